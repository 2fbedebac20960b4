"""Falsifying examples -> standalone reproduction scripts that import only the library, numpy and torch.

A traced handle (a third-party target's adapter) writes every library call it
makes into a :class:`Trace`, as source: the cache's construction, each call
with its tensors spelled out literally (``T([...], shape)``; a float32 value
printed with ``repr`` reads back as the same bits), and the adapter's own
library-facing functions, copied verbatim with :func:`inspect.getsource` (the
very functions the adapter ran, so the script does exactly what the witness
did). Every call that may raise is wrapped so the script goes on and can say
what happened.

When a witness's check fails on a traced handle it adds a :class:`Check` (a
boolean expression over the script's objects and literal expected values,
which come from the reference target or the witness's own reasoning, never
from the code under test) and :func:`render` turns the trace into::

    \"\"\"header: target, version, claim, the documentation that backs it, upstream link\"\"\"
    import ...; def T(...); def differs(...); <the adapter's functions>
    problems = []
    <the calls, in order>
    if not (<check>): problems.append(<what differs>)
    exit 1 while any problem is present, 0 once it is fixed

Hypothesis replays the shrunk example last, so the last failure a witness
records is the minimal one; the ``kv_repro`` fixture (harness.targets.fixture)
writes it when ``--kvproof-repro DIR`` is given.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


def T(values, shape):
    """A float32 tensor from literal values (each printed with repr: the same bits)."""
    import torch

    return torch.tensor(values, dtype=torch.float32).reshape(shape)


def differs(got, want, bound=0.0):
    """'' when got and want (tensors or arrays) agree within bound per element, else what differs."""
    import numpy as np

    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    excess = np.abs(got - want) - np.asarray(bound, dtype=np.float64)
    bad = np.argwhere(~(excess <= 0))
    if len(bad) == 0:
        return ""
    i = tuple(int(x) for x in bad[0])
    allowed = np.broadcast_to(np.asarray(bound, dtype=np.float64), got.shape)[i]
    first = f"first at {i}: {got[i]!r}, expected {want[i]!r} (allowed {allowed!r})"
    return f"{len(bad)} of {got.size} values differ; {first}"


def held_rows_differ(got, want_k, want_v, bound_k, bound_v, need):
    """'' when got = (K, V, positions) read from a cache is right, else what is wrong.

    Right: the positions are a run ending at the last position appended (want_k
    holds every position appended, (L, B, H, n, D)), at least ``need`` long, and
    K, V at those positions agree with want_k, want_v within bound_k, bound_v.
    """
    import numpy as np

    k, v, pos = np.asarray(got[0]), np.asarray(got[1]), [int(p) for p in got[2]]
    want_k, want_v = np.asarray(want_k), np.asarray(want_v)
    n = want_k.shape[3]
    if pos and (pos != list(range(pos[0], pos[0] + len(pos))) or pos[0] < 0 or pos[-1] != n - 1):
        return f"holds positions {pos}: not a run ending at the last position appended, {n - 1}"
    if len(pos) < need:
        return f"holds positions {pos}; it must hold at least the last {need} of the {n} appended"
    sel = np.asarray(pos, dtype=np.int64)
    for name, a, want, bound in (("K", k, want_k, bound_k), ("V", v, want_v, bound_v)):
        b = np.broadcast_to(np.asarray(bound, dtype=np.float64), want.shape)
        msg = differs(a, want[:, :, :, sel], b[:, :, :, sel])
        if msg:
            return f"{name} at positions {pos[0] if pos else '-'}..{pos[-1] if pos else '-'}: {msg}"
    return ""


def visible_differs(k, v, positions, length, offset, want_k, want_v, bound_k, bound_v, first, window):
    """'' when the rows one append handed attention are right, else what is wrong.

    Right: as many rows as the mask sizes declared (kv_length), at positions
    offset, offset + 1, ...; every query of the append (positions first ..
    n - 1, n = want_k.shape[3]) finds all it may see among them (the last
    ``window`` positions up to its own, or all before it); and every row at a
    position appended so far equals it within the bound (rows past n are unused
    storage a causal mask hides).
    """
    import numpy as np

    k, v, want_k, want_v = np.asarray(k), np.asarray(v), np.asarray(want_k), np.asarray(want_v)
    m, n = k.shape[3], want_k.shape[3]
    if m != length:
        return f"the mask sizes declared kv_length={length} for this append, but it returned {m} key rows"
    pos = [int(p) for p in positions]
    if pos != list(range(offset, offset + m)):
        return f"rows at positions {pos[:6]}...: the mask's kv_offset={offset} says they start there"
    for p in range(first, n):
        lo = 0 if window is None else max(0, p - window + 1)
        if lo < offset or p >= offset + m:
            return f"the query at position {p} must see positions {lo}..{p}; the rows hold {offset}..{offset + m - 1}"
    idx = np.asarray([i for i, p in enumerate(pos) if p < n], dtype=np.int64)
    sel = np.asarray([pos[i] for i in idx], dtype=np.int64)
    for name, a, want, bound in (("K", k, want_k, bound_k), ("V", v, want_v, bound_v)):
        b = np.broadcast_to(np.asarray(bound, dtype=np.float64), want.shape)
        msg = differs(a[:, :, :, idx], want[:, :, :, sel], b[:, :, :, sel])
        if msg:
            return f"{name} handed to attention: {msg}"
    return ""


SCRIPT_HELPERS = (T, differs, held_rows_differ, visible_differs)  # copied into every script


@dataclass(frozen=True)
class Check:
    """One claim the script checks: ``expr`` is True while the claim holds; ``says`` what it claims; ``shows``
    an expression whose value is printed beside a failure (what the library gave)."""

    expr: str
    says: str
    shows: str = ""


@dataclass
class Trace:
    """The library statements a traced handle ran, in order, as source lines."""

    imports: dict[str, None] = field(default_factory=dict)  # an ordered set
    functions: dict[str, str] = field(default_factory=dict)  # name -> source, in first-use order
    lines: list[str] = field(default_factory=list)
    used: int = 0  # variable names handed out

    def name(self, prefix: str) -> str:
        """A fresh variable name: prefix0, prefix1, ..."""
        self.used += 1
        return f"{prefix}{self.used - 1}"

    def need(self, *imports: str) -> None:
        for line in imports:
            self.imports[line] = None

    def function(self, fn: Callable) -> str:
        """Copy ``fn``'s source into the script (once); returns its name."""
        if fn.__name__ not in self.functions:
            self.functions[fn.__name__] = textwrap.dedent(inspect.getsource(fn))
        return fn.__name__

    def tensor(self, a: np.ndarray) -> str:
        """Source that rebuilds ``a`` (float32) bit for bit as a torch tensor."""
        a = np.asarray(a, dtype=np.float32)
        return f"T({a.reshape(-1).tolist()!r}, {tuple(a.shape)!r})"

    def call(self, stmt: str) -> None:
        """A statement that must run (a construction): the script stops with its traceback if it raises."""
        self.lines.append(stmt)

    def attempt(self, stmt: str, result: str = "") -> str:
        """A call that may raise: the script records the exception in a fresh variable and goes on.

        Returns that variable's name (None when the call returned). ``result``,
        when given, is set to None first so later lines can test it.
        """
        flag = self.name("raised")
        if result:
            self.lines.append(f"{result} = None")
        self.lines += [
            "try:",
            f"    {stmt}",
            f"    {flag} = None",
            "except Exception as e:  # recorded: a check below says whether raising is allowed",
            f'    {flag} = f"{{type(e).__name__}}: {{e}}"',
            f'    print("{stmt.split("=")[-1].strip()[:60]} raised", {flag})',
        ]
        return flag

    def check(self, chk: Check) -> None:
        """Append ``chk`` at this point of the script (after the calls so far)."""
        shows = f" + ': got ' + repr({chk.shows})" if chk.shows else ""
        self.lines += [
            "try:",
            f"    if not ({chk.expr}):",
            f"        problems.append({chk.says!r}{shows})",
            "except Exception as e:",
            f'    problems.append({chk.says!r} + f": checking it raised {{type(e).__name__}}: {{e}}")',
        ]

    def snapshot(self) -> Trace:
        """A copy to keep (the handle goes on appending to this one)."""
        return Trace(dict(self.imports), dict(self.functions), list(self.lines), self.used)


@dataclass(frozen=True)
class Header:
    """What a reproduction says about itself."""

    title: str
    target: str  # kvproof target name
    library: str  # e.g. "transformers==5.24.0"
    cls: str  # the class under test, e.g. "transformers.StaticLayer"
    claim: str
    backing: str  # the docstring or documented use the claim rests on
    witness: str  # card / witness node id
    link: str = ""  # upstream issue or pull request


def render(header: Header, trace: Trace, checks: Sequence[Check] = ()) -> str:
    """The reproduction script for ``trace`` (whose checks are already in it) plus ``checks``, as text."""
    t = trace.snapshot()
    for chk in checks:
        t.check(chk)
    doc = [
        header.title,
        "",
        f"Class: {header.cls} ({header.library}; kvproof target {header.target})",
        f"Claim: {header.claim}",
        f"Backed by: {header.backing}",
        f"Found by: kvproof {header.witness}",
    ]
    if header.link:
        doc.append(f"Upstream: {header.link}")
    doc += [
        "",
        "Generated by kvproof (harness/targets/repro.py) from the shrunk falsifying example. It imports only",
        "the library, numpy and torch, replays the calls literally and prints what differs.",
        "Exit status: 1 while the problem is present, 0 once it is fixed.",
    ]
    body = "\n".join(textwrap.fill(line, 110) if line else "" for line in doc).replace('"""', "'''")
    out = ["#!/usr/bin/env python3", f'"""{body}\n"""', "", "import sys", "", *sorted(t.imports), ""]
    for fn in SCRIPT_HELPERS:
        out += ["", textwrap.dedent(inspect.getsource(fn)).rstrip(), ""]
    for src in t.functions.values():
        out += ["", src.rstrip(), ""]
    out += ["", "problems = []", "", *t.lines, ""]
    out += [
        "for p in problems:",
        '    print("PROBLEM:", p)',
        "if problems:",
        f'    print(f"{{len(problems)}} problem(s): the claim does not hold on {header.library}")',
        "    sys.exit(1)",
        f'print("OK: the claim holds on {header.library}")',
        "sys.exit(0)",
        "",
    ]
    return "\n".join(out)


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (folders made), executable; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return path
