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

SCRIPT_HELPERS = '''
def T(values, shape):
    """A float32 tensor from literal values (each printed with repr: the same bits)."""
    return torch.tensor(values, dtype=torch.float32).reshape(shape)


def differs(got, want, bound=0.0):
    """'' when got and want (tensors or arrays) agree within bound per element, else what differs."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    excess = np.abs(got - want) - np.asarray(bound, dtype=np.float64)
    bad = np.argwhere(~(excess <= 0))
    if len(bad) == 0:
        return ""
    i = tuple(bad[0])
    allowed = np.broadcast_to(np.asarray(bound, dtype=np.float64), got.shape)[i]
    first = f"first at {i}: {got[i]!r}, expected {want[i]!r} (allowed {allowed!r})"
    return f"{len(bad)} of {got.size} values differ; {first}"
'''


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
    out += [SCRIPT_HELPERS.strip(), ""]
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
