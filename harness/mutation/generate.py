"""Mutants: generated liars, one small :mod:`ast` change to one impl function each.

A mutant is named by its key ``path:line:col:operator`` (``impl/kv.py:131:12:compare``):
the file, where the changed node starts (1-based line, 0-based column as
:mod:`ast` counts it) and which operator changed it. The key alone rebuilds
the mutant from the file's bytes (:func:`find`), so a mutant is reproducible
from (file, line, operator); which mutants a run samples is reproducible
from the seed (:func:`sample`).

Operators (each changes one node in exactly one way, so a node and an
operator name one mutant). The first ones match mutmut 3 and cosmic-ray
(``harness/mutation/generate.py`` is our own generator: mutmut rewrites a whole copy of
the project with trampolines and runs its own forked tests, cosmic-ray
rewrites the file on disk behind a database session; kvproof swaps one
compiled function into a fresh witness process instead, as it does a liar):

- ``arith``: ``+``<->``-``, ``*``<->``/``, ``//``->``/``, ``%``->``/``, ``**``->``*``,
  ``<<``<->``>>``, ``&``<->``|``, ``^``->``&`` (mutmut's table); also in ``x op= y``;
- ``compare``: ``<``<->``<=``, ``>``<->``>=``, ``==``<->``!=``, ``is``<->``is not``,
  ``in``<->``not in`` (``compare.N`` for the N-th operator of a chain);
- ``boolop``: ``and``<->``or``;   ``unary``: drop ``not``, ``~`` or unary ``-``;
- ``bool``: ``True``<->``False``;   ``const+1`` / ``const-1``: an int ``n`` -> ``n+1`` / ``n-1``
  (a float ``x`` -> ``x+1``, ``const+1`` only);
- ``loopctl``: ``break``<->``continue``;   ``noloop``: ``for x in it`` -> ``for x in ()``;
- ``minmax``: ``min``<->``max`` (also ``np.minimum``/``maximum``, ``argmin``/``argmax``, ``.min()``/``.max()``);
- ``drop``: one statement (call, assignment, ``raise``, ``assert``, ``del``) -> ``pass``.

Never mutated: docstrings, annotations, decorators, default arguments,
f-strings and the arguments of a ``raise`` (messages: no card claims
wording). Strings are never mutated.

Which functions a card's mutants come from is :func:`claimed`: every
function or method its refs name (a class ref: all its methods) and every
function in a file it lists under an explicit ``covers:``. Applying one in a
witness process is :mod:`harness.mutation.swap`.
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness.errors import LiarError
from harness.mutation import cgen
from harness.mutation.keys import OPERATORS, Mutant, parse_key
from harness.select import csource

_ARITH: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Div,
    ast.Pow: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitAnd,
}
_COMPARE: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_MINMAX = {
    "min": "max",
    "max": "min",
    "minimum": "maximum",
    "maximum": "minimum",
    "argmin": "argmax",
    "argmax": "argmin",
    "amin": "amax",
    "amax": "amin",
    "nanmin": "nanmax",
    "nanmax": "nanmin",
}
_DROPPABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Assert, ast.Delete)


@dataclass(frozen=True)
class _Site:
    """A mutant found in a parsed file, with what it takes to build it."""

    mutant: Mutant
    index: int  # position of the node in ast.walk(function)
    func: ast.FunctionDef | ast.AsyncFunctionDef


# ---------------------------------------------------------------- functions of a file


def functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualname, def) of every module-level function and every method (nested classes too), in file order.

    Functions defined inside a function are part of it, not listed apart.
    """

    def walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + node.name, node
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, prefix + node.name + ".")
            elif isinstance(node, (ast.If, ast.Try)):
                yield from walk(node.body, prefix)

    yield from walk(tree.body, "")


def _skipped(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[int]:
    """ids of nodes never mutated: decorators, annotations, defaults, docstring, f-strings, raise arguments."""
    skip: list[ast.AST] = (
        list(fn.decorator_list) + list(fn.args.defaults) + [d for d in fn.args.kw_defaults if d is not None]
    )
    if fn.returns is not None:
        skip.append(fn.returns)
    for node in ast.walk(fn):
        if isinstance(node, ast.arg) and node.annotation is not None:
            skip.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            skip.append(node.annotation)
        elif isinstance(node, ast.JoinedStr):
            skip.append(node)
        elif isinstance(node, ast.Raise):
            skip += [n for n in (node.exc, node.cause) if n is not None]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) and node is not fn:
            if not isinstance(node, ast.Lambda):
                skip += list(node.decorator_list)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    skip += list(node.args.defaults)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                skip.append(body[0])
    return {id(n) for s in skip for n in ast.walk(s)}


# ---------------------------------------------------------------- operators


def _candidates(node: ast.AST) -> Iterator[tuple[str, Callable[[ast.AST], ast.AST]]]:
    """(operator name, how to change a deep copy of ``node``) for every mutant of ``node``."""
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        yield "arith", lambda n: _with(n, op=_ARITH[type(n.op)]())
    elif isinstance(node, ast.AugAssign) and type(node.op) in _ARITH:
        yield "arith", lambda n: _with(n, op=_ARITH[type(n.op)]())
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _COMPARE:
                yield (
                    ("compare" if i == 0 else f"compare.{i}"),
                    (
                        lambda n, i=i: _with(
                            n, ops=[(_COMPARE[type(o)]() if j == i else o) for j, o in enumerate(n.ops)]
                        )
                    ),
                )
    elif isinstance(node, ast.BoolOp):
        yield "boolop", lambda n: _with(n, op=ast.Or() if isinstance(n.op, ast.And) else ast.And())
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert, ast.USub)):
        yield "unary", lambda n: n.operand
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield "bool", lambda n: ast.Constant(not n.value)
    elif isinstance(node, ast.Constant) and isinstance(node.value, int):
        yield "const+1", lambda n: ast.Constant(n.value + 1)
        yield (
            "const-1",
            lambda n: ast.Constant(n.value - 1) if n.value >= 1 else ast.UnaryOp(ast.USub(), ast.Constant(1 - n.value)),
        )  # -1 is written (and parsed) as -(1)
    elif isinstance(node, ast.Constant) and isinstance(node.value, float):
        yield "const+1", lambda n: ast.Constant(n.value + 1.0)
    elif isinstance(node, (ast.Break, ast.Continue)):
        yield "loopctl", lambda n: ast.Continue() if isinstance(n, ast.Break) else ast.Break()
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        yield "noloop", lambda n: _with(n, iter=ast.Tuple(elts=[], ctx=ast.Load()))
    elif isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("min", "max"):
            yield "minmax", lambda n: _with(n, func=ast.Name(_MINMAX[n.func.id], ast.Load()))
        elif isinstance(func, ast.Attribute) and func.attr in _MINMAX:
            yield "minmax", lambda n: _with(n, func=_with(n.func, attr=_MINMAX[n.func.attr]))
    if isinstance(node, _DROPPABLE) and not (isinstance(node, ast.AnnAssign) and node.value is None):
        yield "drop", lambda n: ast.Pass()


def _with(node: ast.AST, **fields: object) -> ast.AST:
    for name, value in fields.items():
        setattr(node, name, value)
    return node


def _replace_child(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return
    raise ValueError("child not found")  # pragma: no cover - ast.walk found it under this parent


def _expected(fn: ast.AST, index: int, change: Callable[[ast.AST], ast.AST], fresh: ast.AST | None = None) -> ast.AST:
    """A copy of ``fn`` with its ``index``-th node (in ast.walk order) changed (``fresh``: a copy to use, e.g. a
    new parse of its text, instead of a deep copy)."""
    fn2 = fresh if fresh is not None else copy.deepcopy(fn)
    nodes = list(ast.walk(fn2))
    target = nodes[index]
    new = change(target)
    if new is not target:
        parent = next(p for p in nodes if any(c is target for c in ast.iter_child_nodes(p)))
        _replace_child(parent, target, new)
    return fn2


# ---------------------------------------------------------------- source text


class _Source:
    """A file's text with (line, col) -> offset, as :mod:`ast` counts columns (utf-8 bytes)."""

    def __init__(self, text: str) -> None:
        self.raw = text.encode("utf-8")
        self.starts = [0]
        for line in text.encode("utf-8").splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.raw[a:b].decode("utf-8")

    def replaced(self, node: ast.AST, text: str) -> str:
        a, b = self.span(node)
        return (self.raw[:a] + text.encode("utf-8") + self.raw[b:]).decode("utf-8")


def _find_function(tree: ast.Module, qualname: str) -> ast.AST | None:
    return next((fn for q, fn in functions(tree) if q == qualname), None)


def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=False)


class _Snippet:
    """One function's own text (decorators included), parsed alone: the same tree as in its file (checked once,
    ``ok``), for a fraction of the cost of parsing the file once per candidate mutant."""

    def __init__(self, src: _Source, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        first = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
        self.start = src.starts[first - 1]
        self.end = src.offset(fn.end_lineno, fn.end_col_offset)
        self.raw = src.raw[self.start : self.end]
        self.indented = fn.col_offset > 0  # parsed inside "if 1:", which takes any indentation as its block's
        self.shift = first - 1 - (1 if self.indented else 0)  # a line here + shift = the line in the file
        try:
            self.ok = _dump(self.parse(self.raw)) == _dump(fn)
        except (SyntaxError, ValueError, IndexError):
            self.ok = False

    def parse(self, raw: bytes) -> ast.AST:
        text = raw.decode("utf-8")
        module = ast.parse(("if 1:\n" + text) if self.indented else text)
        body = module.body[0].body if self.indented else module.body  # type: ignore[attr-defined]
        if len(body) != 1 or not isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise ValueError("not one function")
        return body[0]

    def replaced(self, src: _Source, node: ast.AST, text: str) -> bytes:
        a, b = src.span(node)
        return self.raw[: a - self.start] + text.encode("utf-8") + self.raw[b - self.start :]


def _texts(
    src: _Source, node: ast.AST, new_fn: ast.AST, qualname: str, index: int, snippet: _Snippet | None = None
) -> tuple[str, str, ast.AST] | None:
    """(replacement text, mutated file text, the function as parsed from it) whose parse has exactly ``new_fn``
    for the function; None if none does.

    The replacement is ``ast.unparse`` of the changed node, parenthesised
    when the bare text would parse differently in its place.
    """
    replacement = list(ast.walk(new_fn))[index]  # the changed node (or what replaced it), where it was
    if isinstance(replacement, (ast.For, ast.AsyncFor)):  # noloop: only the iterable changes
        node, replacement = node.iter, replacement.iter
    text = "pass" if isinstance(replacement, ast.Pass) else ast.unparse(replacement)
    want = _dump(new_fn)
    for t in [text] if isinstance(replacement, ast.stmt) else [text, f"({text})"]:
        try:
            if snippet is not None:  # NOTE: Python parses a function the same alone as in its file
                got = snippet.parse(snippet.replaced(src, node, t))
            else:
                got = _find_function(ast.parse(src.replaced(node, t)), qualname)
        except (SyntaxError, ValueError):
            continue
        if got is not None and _dump(got) == want:
            if snippet is not None:
                ast.increment_lineno(got, snippet.shift)  # the file's line numbers: tracebacks, line coverage
            return t, src.replaced(node, t), got
    return None


# ---------------------------------------------------------------- generation

# The changes whose bare text always parses back to them in place: a node replaced by one of the same kind
# and precedence (a comparison, a same-precedence arithmetic operator, a name, a non-negative number, a
# statement). Every other change (``**`` -> ``*``, ``&`` <-> ``|``, ``^`` -> ``&``, ``and`` <-> ``or``, a dropped
# unary operator, a number made negative) is checked by parsing it back (:func:`_texts`).
_SAME_PRECEDENCE = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.LShift, ast.RShift)


def _safe(node: ast.AST, op: str) -> bool:
    if op.split(".")[0] in ("compare", "bool", "minmax", "loopctl", "noloop", "drop", "const+1"):
        return True
    if op == "const-1":
        return isinstance(node, ast.Constant) and node.value >= 1
    if op == "arith":
        return isinstance(getattr(node, "op", None), _SAME_PRECEDENCE)
    return False


def _bare(node: ast.AST, change: Callable[[ast.AST], ast.AST]) -> str:
    """The replacement text of a :func:`_safe` change (``noloop``: the iterable's)."""
    new = change(copy.deepcopy(node))
    if isinstance(new, (ast.For, ast.AsyncFor)):
        new = new.iter
    return "pass" if isinstance(new, ast.Pass) else ast.unparse(new)


def _sites(
    path: str, text: str, wanted: Callable[[str], bool], where: Callable[[ast.AST, str, int], bool] | None = None
) -> Iterator[tuple[_Site, str, ast.AST | None]]:
    """Every mutant of the functions ``wanted(qualname)`` selects (and ``where(node, operator, nth)``, when given),
    with the mutated file text and the mutated function as parsed from it (with ``where``; without, a
    :func:`_safe` change is not parsed: "" and None)."""
    tree = _parsed(text)
    src = _Source(text)
    for qualname, fn in functions(tree):
        if not wanted(qualname):
            continue
        skip = _skipped(fn)
        snippet: _Snippet | None = _Snippet(src, fn)
        if not snippet.ok:  # a function that does not parse alone the same: the whole file, as before
            snippet = None
        seen: dict[tuple[int, int, str], int] = {}
        for index, node in enumerate(ast.walk(fn)):
            if id(node) in skip or node is fn or not hasattr(node, "lineno"):
                continue
            for op, change in _candidates(node):
                place = (node.lineno, node.col_offset, op)
                nth = seen[place] = seen.get(place, 0) + 1
                if where is not None and not where(node, op, nth):
                    continue
                shown = node.iter if isinstance(node, (ast.For, ast.AsyncFor)) else node
                end = shown.end_lineno or node.lineno
                if where is None and _safe(node, op):  # generating: no parse needed (find() always checks)
                    m = Mutant(path, qualname, node.lineno, node.col_offset, op, src.segment(shown), "", nth, end)
                    yield _Site(replace(m, after=_bare(node, change)), index, fn), "", None
                    continue
                fresh = snippet.parse(snippet.raw) if snippet is not None else None  # a copy, faster than deepcopy
                new_fn = _expected(fn, index, change, fresh)
                found = _texts(src, node, new_fn, qualname, index, snippet)
                if found is None:  # no text of this change parses back to it: not generated
                    continue
                after, mutated, parsed = found
                m = Mutant(path, qualname, node.lineno, node.col_offset, op, src.segment(shown), after, nth, end)
                yield _Site(m, index, fn), mutated, parsed


def generate(root: Path, path: str, qualnames: Iterable[str] | None = None) -> list[Mutant]:
    """Every mutant of ``root/path`` (only the functions named in ``qualnames``, when given), in file order.

    ``qualnames`` may name a class: all its methods count.
    """
    text = (root / path).read_text(encoding="utf-8")
    names = None if qualnames is None else set(qualnames)

    def wanted(q: str) -> bool:
        return names is None or q in names or any(q.startswith(n + ".") for n in names)

    out = [s.mutant for s, _, _ in _sites(path, text, wanted)]
    return sorted(out, key=lambda m: (m.line, m.col, m.operator, m.nth))


_PARSED: dict[str, ast.Module] = {}  # file text -> its tree, never changed once parsed (see _parsed)


def _parsed(text: str) -> ast.Module:
    """``ast.parse(text)``, kept: a warm server parses each claimed file once for all of its forks (:func:`preparse`).

    NOTE: callers only read the tree (a mutant is built in a deep copy of its function).
    """
    tree = _PARSED.get(text)
    if tree is None:
        tree = _PARSED[text] = ast.parse(text)
    return tree


def preparse(root: Path, paths: Iterable[str]) -> None:
    """Parse ``paths`` now, so that :func:`find` on them later (in forks of this process) does not."""
    for path in paths:
        if csource.is_c(path):
            cgen.preparse(root, path)
            continue
        try:
            _parsed((root / path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError):
            continue


def find(root: Path, key: str) -> tuple[Mutant, str, ast.AST]:
    """The mutant ``key`` names, rebuilt from the file as it is now: (mutant, mutated file text, mutated def).

    LiarError when the file or the mutant is not there (the file changed since the key was made). A C
    file's mutant: :func:`harness.mutation.cgen.find` (the def is None).
    """
    path, line, col, op, nth = parse_key(key)
    if csource.is_c(path):  # a C mutant: found in the C grammar
        return cgen.find(root, key)  # type: ignore[return-value]
    try:
        text = (root / path).read_text(encoding="utf-8")
        tree = _parsed(text)
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise LiarError(f"mutant={key!r}: cannot read {path}: {exc}") from None
    around = {q for q, fn in functions(tree) if fn.lineno <= line <= (fn.end_lineno or fn.lineno)}
    for site, mutated, parsed in _sites(
        path,
        text,
        around.__contains__,
        lambda node, name, k: (node.lineno, node.col_offset, name, k) == (line, col, op, nth),
    ):
        return site.mutant, mutated, parsed
    raise LiarError(
        f"mutant={key!r}: {path} has no such mutant now (its code changed since the key was made); "
        "run mutate again to get current keys"
    )


def diff(root: Path, mutant: Mutant, context: int = 2) -> str:
    """A unified diff of the mutant against the file, headed ``a/path`` / ``b/path``."""
    _, mutated, _ = find(root, mutant.key)
    before = (root / mutant.path).read_text(encoding="utf-8").splitlines(keepends=True)
    after = mutated.splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, f"a/{mutant.path}", f"b/{mutant.path}", n=context))


def sample(mutants: Sequence[Mutant], n: int | None, seed: int, salt: str) -> list[Mutant]:
    """At most ``n`` of ``mutants``, drawn by ``random.Random`` from (seed, salt), kept in their order.

    Spread over functions: each function gets ``n // functions`` first (its
    own draw), the rest is drawn from what is left. ``n`` None: all.
    """
    if n is None or len(mutants) <= n:
        return list(mutants)
    rng = random.Random(hashlib.sha256(f"{seed}:{salt}".encode()).hexdigest())
    by_fn: dict[tuple[str, str], list[Mutant]] = {}
    for m in mutants:
        by_fn.setdefault((m.path, m.qualname), []).append(m)
    share = n // len(by_fn)
    chosen: set[str] = set()
    for ms in by_fn.values():
        chosen.update(m.key for m in rng.sample(ms, min(share, len(ms))))
    rest = [m for m in mutants if m.key not in chosen]
    chosen.update(m.key for m in rng.sample(rest, n - len(chosen)))
    return [m for m in mutants if m.key in chosen]


__all__ = [
    "Mutant",
    "OPERATORS",
    "diff",
    "find",
    "functions",
    "generate",
    "parse_key",
    "preparse",
    "sample",
]
