"""C mutants: one token-level change to one function (or function-like macro) of a C file.

The C side of :mod:`harness.mutation.generate`: the same :class:`~harness.mutation.generate.Mutant`
(``impl/kernels.c:412:27:compare``: file, 1-based line and 0-based byte column of
the changed token, operator), found in tree-sitter's C grammar
(``tree-sitter-c``), never by regular expressions over the source. The
operators are the Python ones, as C spells them:

- ``arith``: ``+``<->``-``, ``*``<->``/``, ``%``->``/``, ``<<``<->``>>``, ``&``<->``|``, ``^``->``&``,
  also in ``x op= y``;   ``incdec``: ``++``<->``--``;
- ``compare``: ``<``<->``<=``, ``>``<->``>=``, ``==``<->``!=`` (a loop bound or a tail condition);
- ``boolop``: ``&&``<->``||``;   ``unary``: drop ``!``, ``~`` or unary ``-``;   ``bool``: ``true``<->``false``;
- ``const+1`` / ``const-1``: an integer literal (decimal or hex, suffix kept) +-1; a floating literal +1;
- ``loopctl``: ``break``<->``continue``;   ``noloop``: a ``for``/``while`` condition -> ``0``;
- ``minmax``: ``fmaxf``<->``fminf`` (and the vector max/min intrinsics);
- ``drop``: one expression statement -> ``;`` (not one that does nothing: ``(void)x;``).

Where: the body of every function definition, and the body of every
function-like macro whose text parses as C on its own (a macro that
defines functions, such as the kernel's ``DEFINE_TILE``, or an expression),
in every ``#if`` branch: a branch the build leaves out compiles to the
same machine code, which the mutation stage detects before running
anything (:mod:`harness.mutation.cbuild`). Never mutated: preprocessor
directives and conditions, declarations' array sizes outside function
bodies, string literals, and code tree-sitter cannot parse (its ERROR
nodes; :func:`harness.select.csource.unparsed` lists them). ``_Pragma(...)`` and
``__attribute__((...))`` are blanked (same length) before parsing: the
grammar does not know them.

Claims: a card's ref ``impl/kernels.c::kv_linear`` claims that function
and every function and macro it reaches by name (:func:`harness.select.csource.reach`), so a card
about the entry point is scored on the code the entry point runs.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.errors import LiarError
from harness.mutation.keys import Mutant, parse_key
from harness.select import csource

_ARITH = {"+": "-", "-": "+", "*": "/", "/": "*", "%": "/", "<<": ">>", ">>": "<<", "&": "|", "|": "&", "^": "&"}
_COMPARE = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
_BOOLOP = {"&&": "||", "||": "&&"}
_ASSIGN = {f"{a}=": f"{b}=" for a, b in _ARITH.items()}
_MINMAX = {
    "fmaxf": "fminf",
    "fminf": "fmaxf",
    "fmax": "fmin",
    "fmin": "fmax",
    "_mm512_max_ps": "_mm512_min_ps",
    "_mm512_min_ps": "_mm512_max_ps",
    "_mm256_max_ps": "_mm256_min_ps",
    "_mm256_min_ps": "_mm256_max_ps",
    "_mm_max_ps": "_mm_min_ps",
    "_mm_min_ps": "_mm_max_ps",
}
_INT = re.compile(r"^(0[xX][0-9a-fA-F]+|[1-9][0-9]*|0)([uUlL]*)$")
_FLOAT = re.compile(r"^([0-9]*\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)([fFlL]?)$")
_SKIP_TYPES = {"ERROR", "string_literal", "char_literal", "concatenated_string", "comment", "preproc_call"}
# ---------------------------------------------------------------- operators


@dataclass(frozen=True)
class _Change:
    operator: str
    start: int  # byte offsets of the text replaced
    end: int
    text: str  # what replaces it
    at: object  # the node whose text is shown as before/after


def _int_text(value: int, like: str) -> str:
    if like.lower().startswith("0x") and value >= 0:
        digits = f"{value:X}" if any(ch in "ABCDEF" for ch in like[2:]) else f"{value:x}"
        return like[:2] + digits
    return str(value)


def _changes(n) -> Iterator[_Change]:
    t = n.type
    if t in ("binary_expression", "assignment_expression", "update_expression", "unary_expression"):
        op = n.child_by_field_name("operator")
        if op is None:
            return
        s = op.text.decode()
        if t == "binary_expression":
            for table, name in ((_ARITH, "arith"), (_COMPARE, "compare"), (_BOOLOP, "boolop")):
                if s in table:
                    yield _Change(name, op.start_byte, op.end_byte, table[s], n)
        elif t == "assignment_expression" and s in _ASSIGN:
            yield _Change("arith", op.start_byte, op.end_byte, _ASSIGN[s], n)
        elif t == "update_expression" and s in ("++", "--"):
            yield _Change("incdec", op.start_byte, op.end_byte, "--" if s == "++" else "++", n)
        elif t == "unary_expression" and s in ("!", "-", "~"):
            yield _Change("unary", op.start_byte, op.end_byte, "", n)
    elif t == "number_literal":
        s = n.text.decode()
        m = _INT.match(s)
        if m:
            v = int(m[1], 0)
            yield _Change("const+1", n.start_byte, n.end_byte, _int_text(v + 1, m[1]) + m[2], n)
            if v >= 1:
                yield _Change("const-1", n.start_byte, n.end_byte, _int_text(v - 1, m[1]) + m[2], n)
            return
        m = _FLOAT.match(s)
        if m:
            yield _Change("const+1", n.start_byte, n.end_byte, repr(float(m[1]) + 1.0) + m[2], n)
    elif t in ("true", "false"):
        yield _Change("bool", n.start_byte, n.end_byte, "false" if t == "true" else "true", n)
    elif t in ("break_statement", "continue_statement"):
        kw = n.children[0]
        yield _Change("loopctl", kw.start_byte, kw.end_byte, "continue" if t == "break_statement" else "break", n)
    elif t in ("for_statement", "while_statement"):
        cond = n.child_by_field_name("condition")
        if cond is not None:
            inner = cond.named_children[0] if cond.type == "parenthesized_expression" and cond.named_children else cond
            yield _Change("noloop", inner.start_byte, inner.end_byte, "0", inner)
    elif t == "call_expression":
        fn = n.child_by_field_name("function")
        if fn is not None and fn.type == "identifier" and fn.text.decode() in _MINMAX:
            yield _Change("minmax", fn.start_byte, fn.end_byte, _MINMAX[fn.text.decode()], n)
    if t == "expression_statement" and n.named_child_count and not _no_op(n.named_children[0]):
        yield _Change("drop", n.start_byte, n.end_byte, ";", n)


def _no_op(expr) -> bool:
    """``(void)x`` or a bare name or number: a statement that does nothing (dropping it is no mutant)."""
    if expr.type == "cast_expression":
        ty = expr.child_by_field_name("type")
        return ty is not None and ty.text.replace(b" ", b"") == b"void" and _no_op(expr.child_by_field_name("value"))
    return expr.type in ("identifier", "number_literal", "parenthesized_expression") and b"(" not in expr.text[1:]


def _nodes(body) -> Iterator:
    """Every node of ``body`` a mutant may change (pre-order), skipping strings, comments, directives
    and ERROR subtrees."""
    stack = [body]
    while stack:
        n = stack.pop()
        if n.type in _SKIP_TYPES or n.is_missing or (n.type.startswith("preproc_") and n is not body):
            if n.type.startswith("preproc_if") or n.type in ("preproc_else", "preproc_elif", "preproc_ifdef"):
                cond = n.child_by_field_name("condition")
                stack.extend(reversed([c for c in n.children if cond is None or c.id != cond.id]))
            continue
        yield n
        stack.extend(reversed(n.children))


def _line_starts(raw: bytes) -> list[int]:
    starts = [0]
    for i, c in enumerate(raw):
        if c == 10:
            starts.append(i + 1)
    return starts


def _sites(raw: bytes, path: str) -> Iterator[tuple[Mutant, _Change]]:
    us = csource.units_of(raw)[0]
    starts = _line_starts(raw)
    for u in us:
        seen: dict[tuple[int, int, str], int] = {}
        for node in _nodes(u.body):
            for ch in _changes(node):
                line = bisect.bisect_right(starts, ch.start)
                col = ch.start - starts[line - 1]
                place = (line, col, ch.operator)
                nth = seen[place] = seen.get(place, 0) + 1
                a, b = ch.at.start_byte, ch.at.end_byte
                before = raw[a:b].decode("utf-8", "replace")
                after = (raw[a : ch.start] + ch.text.encode() + raw[ch.end : b]).decode("utf-8", "replace")
                yield Mutant(path, u.name, line, col, ch.operator, before, after, nth, ch.at.end_point[0] + 1), ch


def generate(root: Path, path: str, qualnames: Iterable[str] | None = None) -> list[Mutant]:
    """Every mutant of the C file ``root/path`` (only in the units named ``qualnames``, when given), in file order."""
    want = None if qualnames is None else set(qualnames)
    out = [m for m, _ in _sites((root / path).read_bytes(), path) if want is None or m.qualname in want]
    return sorted(out, key=lambda m: (m.line, m.col, m.operator, m.nth))


@functools.lru_cache(maxsize=4)
def _site_index(raw: bytes, path: str) -> dict[tuple[int, int, str, int], tuple[Mutant, _Change]]:
    """Every mutant of the file's bytes by (line, col, operator, nth), kept: a warm server builds it once for all
    of its forks (:func:`preparse`; parsing kernels.c took each C mutant's process 0.4 s)."""
    return {(m.line, m.col, m.operator, m.nth): (m, ch) for m, ch in _sites(raw, path)}


def preparse(root: Path, path: str) -> None:
    """Find the mutants of the C file ``path`` now, so that :func:`find` on it later (in forks) does not."""
    try:
        _site_index((root / path).read_bytes(), path)
    except OSError:
        pass


def find(root: Path, key: str) -> tuple[Mutant, str, None]:
    """The mutant ``key`` names, rebuilt from the file as it is now: (mutant, mutated file text, None).

    LiarError when the file or the mutant is not there (the file changed since the key was made).
    """
    path, line, col, op, nth = parse_key(key)
    try:
        raw = (root / path).read_bytes()
    except OSError as exc:
        raise LiarError(f"mutant={key!r}: cannot read {path}: {exc}") from None
    site = _site_index(raw, path).get((line, col, op, nth))
    if site is not None:
        m, ch = site
        return m, (raw[: ch.start] + ch.text.encode() + raw[ch.end :]).decode("utf-8"), None
    raise LiarError(
        f"mutant={key!r}: {path} has no such mutant now (its code changed since the key was made); "
        "run mutate again to get current keys"
    )


@dataclass(frozen=True)
class Edit:
    """A C mutant as a text edit: ``raw[start:end]`` becomes ``text``; ``wrap_start:wrap_end`` is the smallest
    expression or statement holding it (``stmt``: a statement), which a mutant schema switches
    (:mod:`harness.mutation.cbuild`)."""

    mutant: Mutant
    start: int
    end: int
    text: bytes
    wrap_start: int
    wrap_end: int
    stmt: bool
    lines: tuple[int, int]  # the wrap's first and last line
    constant: bool  # in a place C needs a constant (an array size, a case label, a static initializer, ...)


def _in_constant_place(node) -> bool:
    """Is ``node`` part of an expression C evaluates at compile time (where no run-time switch may stand)?"""
    child, p = node, node.parent
    while p is not None and p.type not in ("compound_statement", "translation_unit"):
        if p.type == "array_declarator":
            size = p.child_by_field_name("size")
            if size is not None and size.start_byte <= child.start_byte and child.end_byte <= size.end_byte:
                return True
        if p.type in ("case_statement", "enumerator"):
            value = p.child_by_field_name("value")
            if value is not None and value.start_byte <= child.start_byte and child.end_byte <= value.end_byte:
                return True
        if p.type in ("bitfield_clause", "static_assert_declaration"):
            return True
        if p.type == "declaration" and any(
            c.type == "storage_class_specifier" and c.text == b"static" for c in p.children
        ):
            return True
        child, p = p, p.parent
    return False


def edits(root: Path, path: str, keys: Iterable[str]) -> dict[str, Edit]:
    """The :class:`Edit` of each of ``keys`` (mutants of ``root/path``) that the file has now."""
    want = set(keys)
    out = {}
    for m, ch in _sites((root / path).read_bytes(), path):
        if m.key in want:
            stmt = ch.operator in ("drop", "loopctl")
            lines = (ch.at.start_point[0] + 1, ch.at.end_point[0] + 1)
            const = _in_constant_place(ch.at)
            out[m.key] = Edit(
                m, ch.start, ch.end, ch.text.encode(), ch.at.start_byte, ch.at.end_byte, stmt, lines, const
            )
    return out


__all__ = ["Edit", "edits", "find", "generate"]
