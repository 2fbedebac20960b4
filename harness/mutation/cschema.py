"""Mutant schemata for C: many mutants in one build, each behind a run-time switch (compile once, not once each).

Stryker's idea, for C: every sampled mutant of a file is written into one
copy of it, its expression ``E`` becoming
``(kvproof_mutant == 7 ? (E') : (E))`` and its statement ``S``
``{ if (kvproof_mutant == 7) S' else S }``; the copy starts with
``int kvproof_mutant;`` and ``#line 1`` (every other line keeps its number).
With the switch at 0 the build computes exactly what the unchanged file does
(each original expression and statement is kept, in a branch not taken); set
to a mutant's number it computes exactly what that mutant's own build would.
Mutants nest (a changed operand inside a changed operator's expression):
each alternative holds the switches of the mutants inside it, except those
inside the text its own change replaces.

A mutant whose switch cannot compile where it stands (an array size, a
``static`` initializer, an OpenMP loop's canonical form, an intrinsic's
immediate operand) is left out of the schema after the compiler names its
line (:func:`harness.mutation.cbuild.prebuild` builds it alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.mutation.cgen import Edit

SWITCH = "kvproof_mutant"
HEADER = f"int {SWITCH};\n#line 1\n".encode()


@dataclass
class _Wrap:
    start: int
    end: int
    stmt: bool
    edits: list[Edit] = field(default_factory=list)
    kids: list[_Wrap] = field(default_factory=list)


def _tree(edits: Sequence[Edit]) -> list[_Wrap]:
    """The wraps (one per distinct changed expression or statement), nested by containment; the top level."""
    by_range: dict[tuple[int, int], _Wrap] = {}
    for e in edits:
        w = by_range.setdefault((e.wrap_start, e.wrap_end), _Wrap(e.wrap_start, e.wrap_end, e.stmt))
        w.edits.append(e)
    top: list[_Wrap] = []
    stack: list[_Wrap] = []
    for w in sorted(by_range.values(), key=lambda w: (w.start, -w.end)):
        while stack and not (stack[-1].start <= w.start and w.end <= stack[-1].end):
            stack.pop()
        (stack[-1].kids if stack else top).append(w)
        stack.append(w)
    return top


def render(raw: bytes, edits: Sequence[Edit]) -> tuple[bytes, dict[str, int]]:
    """The schema of ``raw`` holding ``edits``: (its text, mutant key -> switch value, from 1)."""
    ids = {e.mutant.key: i + 1 for i, e in enumerate(edits)}

    def emit(lo: int, hi: int, kids: list[_Wrap], change: Edit | None) -> bytes:
        out, pos = [], lo
        for k in kids:
            if change is not None and change.start <= k.start and k.end <= change.end:
                continue  # inside the text the change replaces
            out.append(_segment(pos, k.start, change))
            out.append(wrapped(k))
            pos = k.end
        out.append(_segment(pos, hi, change))
        return b"".join(out)

    def _segment(a: int, b: int, change: Edit | None) -> bytes:
        if change is not None and a <= change.start and change.end <= b:
            return raw[a : change.start] + change.text + raw[change.end : b]
        return raw[a:b]

    def wrapped(w: _Wrap) -> bytes:
        base = emit(w.start, w.end, w.kids, None)
        alts = [(ids[e.mutant.key], emit(w.start, w.end, w.kids, e)) for e in w.edits]
        if w.stmt:
            head = b"".join(b"if (%s == %d) %s else " % (SWITCH.encode(), i, alt) for i, alt in alts)
            return b"{ " + head + base + b" }"
        head = b"".join(b"%s == %d ? (%s) : " % (SWITCH.encode(), i, alt) for i, alt in alts)
        return b"(" + head + b"(" + base + b"))"

    return HEADER + emit(0, len(raw), _tree(edits), None), ids


__all__ = ["HEADER", "SWITCH", "render"]
