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
nodes; :func:`unparsed` lists them). ``_Pragma(...)`` and
``__attribute__((...))`` are blanked (same length) before parsing: the
grammar does not know them.

Claims: a card's ref ``impl/kernels.c::kv_linear`` claims that function
and every function and macro it reaches by name (:func:`reach`), so a card
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

C_SUFFIXES = (".c", ".h")

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
_BLANKED = re.compile(rb"_Pragma\s*\(|__attribute__\s*\(")


@functools.cache
def _parser():
    """tree-sitter's C parser (imported on first use: only ``mutate`` over C needs it)."""
    import tree_sitter
    import tree_sitter_c

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_c.language()))


def _blank(raw: bytes, a: int, b: int) -> bytes:
    """``raw[a:b]`` as spaces, its newlines kept: offsets, lines and columns stay where they were."""
    return raw[:a] + bytes(c if c == 10 else 32 for c in raw[a:b]) + raw[b:]


def _word_byte(c: int) -> bool:
    return chr(c).isalnum() or c == 95


def _view(raw: bytes) -> bytes:
    """The source as the grammar can read it, every offset where it was: comments, ``_Pragma("...")`` and
    ``__attribute__((...))`` blanked (newlines kept; a comment inside a multi-line macro ends the macro's
    text for the grammar), string and character literals skipped over."""
    out = bytearray(raw)
    i, n = 0, len(raw)

    def blank(a: int, b: int) -> None:
        for j in range(a, b):
            if out[j] != 10:
                out[j] = 32

    def skip_quoted(j: int) -> int:  # j at the opening quote: the index after the closing one
        q = raw[j]
        j += 1
        while j < n and raw[j] != q and raw[j] != 10:
            j += 2 if raw[j] == 0x5C else 1
        return j + 1

    while i < n:
        c = raw[i]
        if c in (0x22, 0x27):
            i = skip_quoted(i)
        elif raw.startswith(b"/*", i):
            end = raw.find(b"*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
        elif raw.startswith(b"//", i):
            end = raw.find(b"\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif (m := _BLANKED.match(raw, i)) is not None and (i == 0 or not _word_byte(raw[i - 1])):
            depth, j = 1, m.end()
            while j < n and depth:
                if raw[j] in (0x22, 0x27):
                    j = skip_quoted(j)
                    continue
                depth += {0x28: 1, 0x29: -1}.get(raw[j], 0)
                j += 1
            blank(i, j)
            i = j
        else:
            i += 1
    return bytes(out)


@dataclass(frozen=True)
class Unit:
    """A function definition or function-like macro: its name, where its code is, and its nodes' root."""

    name: str
    kind: str  # "function" or "macro"
    line: int  # 1-based, the definition's first line
    end_line: int
    body: object  # the tree-sitter node whose subtree is mutated (a function's body, a macro's parsed text)
    names: frozenset[str]  # identifiers the code mentions (what it calls, the macros it uses)


def _declarator_name(node) -> str | None:
    d = node.child_by_field_name("declarator")
    while d is not None and d.type != "identifier":
        if d.type == "function_declarator" or d.child_by_field_name("declarator") is not None:
            d = d.child_by_field_name("declarator")
        else:
            return None
    return d.text.decode() if d is not None else None


def _identifiers(node) -> frozenset[str]:
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "identifier" or n.type == "type_identifier":
            out.add(n.text.decode())
        stack.extend(n.children)
    return frozenset(out)


def _macro_body(view: bytes, define, value):
    """The macro's text parsed on its own at its own offsets (everything else blanked): as top-level code
    (a macro that defines functions), else wrapped as a statement of a function; None when neither parses."""
    blank = bytes(c if c == 10 else 32 for c in view)
    a, b = value.start_byte, value.end_byte
    # the continuations as plain line ends, ``x##y`` as one identifier (same length)
    text = view[a:b].replace(b"\\\n", b" \n").replace(b"##", b"__")
    alone = blank[:a] + text + blank[b:]
    tree = _parser().parse(alone)
    if not tree.root_node.has_error:
        return tree.root_node
    head, tail = b"void f(){", b";}"
    start = define.start_byte
    if a - start < len(head) or b + 1 + len(tail) > len(view):
        return None
    wrapped = alone[:start] + head + alone[start + len(head) : b + 1] + tail + alone[b + 1 + len(tail) :]
    tree = _parser().parse(wrapped)
    if tree.root_node.has_error:
        return None
    fn = next((c for c in tree.root_node.children if c.type == "function_definition"), None)
    body = fn.child_by_field_name("body") if fn is not None else None
    stmt = body.named_children[0] if body is not None and body.named_children else None
    # an expression macro: its expression (dropping the whole expansion is no mutant, just a broken build)
    return stmt.named_children[0] if stmt is not None and stmt.type == "expression_statement" else body


@functools.lru_cache(maxsize=8)
def _units(raw: bytes) -> tuple[tuple[Unit, ...], tuple[tuple[int, int], ...], dict[str, str]]:
    """(units in file order, (line, end line) of code the grammar could not parse, names a top-level macro
    call defines -> that macro)."""
    view = _view(raw)
    tree = _parser().parse(view)
    units: list[Unit] = []
    unparsed: list[tuple[int, int]] = []
    top_calls: list[tuple[str, str]] = []

    def walk(node) -> None:
        for child in node.children:
            if child.type == "function_definition":
                name = _declarator_name(child)
                body = child.child_by_field_name("body")
                if name and body is not None:
                    units.append(
                        Unit(
                            name,
                            "function",
                            child.start_point[0] + 1,
                            child.end_point[0] + 1,
                            body,
                            _identifiers(body),
                        )
                    )
            elif child.type == "preproc_function_def":
                name_node, value = child.child_by_field_name("name"), child.child_by_field_name("value")
                if name_node is None or value is None:
                    continue
                body = _macro_body(view, child, value)
                line, end = child.start_point[0] + 1, child.end_point[0] + 1
                if body is None:
                    unparsed.append((line, end))
                    continue
                units.append(Unit(name_node.text.decode(), "macro", line, end, body, _identifiers(body)))
            elif child.type in ("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef"):
                walk(child)
            elif child.type == "ERROR":
                unparsed.append((child.start_point[0] + 1, child.end_point[0] + 1))
                walk(child)
            elif child.type in ("expression_statement", "call_expression", "declaration"):
                kinds = ("identifier", "type_identifier", "(", ")", ",", "number_literal")
                leaves = [n for n in _leaves(child) if n.type in kinds]
                for i in range(len(leaves) - 2):  # MACRO(NAME, ...): the macro defines NAME
                    shape = (leaves[i].type, leaves[i + 1].type, leaves[i + 2].type)
                    if shape[0] in kinds[:2] and shape[1] == "(" and shape[2] in kinds[:2]:
                        top_calls.append((leaves[i + 2].text.decode(), leaves[i].text.decode()))

    walk(tree.root_node)
    macros = {u.name for u in units if u.kind == "macro"}
    defines = {made: macro for made, macro in top_calls if macro in macros}
    return tuple(units), tuple(unparsed), defines


def _leaves(node) -> Iterator:
    stack = [node]
    out = []
    while stack:
        n = stack.pop()
        if n.child_count == 0:
            out.append(n)
        else:
            stack.extend(reversed(n.children))
    return iter(out)


def units(root: Path, path: str) -> tuple[Unit, ...]:
    """The functions and parsed function-like macros of ``root/path``, in file order."""
    return _units((root / path).read_bytes())[0]


def unparsed(root: Path, path: str) -> tuple[tuple[int, int], ...]:
    """(first, last) lines of code in ``root/path`` the grammar could not parse: never mutated."""
    return _units((root / path).read_bytes())[1]


def names(root: Path, path: str) -> list[str]:
    """Each function's and macro's name once, in file order (a name defined in several ``#if`` branches once)."""
    return list(dict.fromkeys(u.name for u in units(root, path)))


def reach(root: Path, path: str, start: Iterable[str]) -> frozenset[str]:
    """The names ``start`` names and every function and macro they reach by name in ``root/path``
    (a call, a macro use, or a function a top-level macro call defines: ``DEFINE_TILE(tile_1_1, ...)``)."""
    us, _, defines = _units((root / path).read_bytes())
    mentions: dict[str, set[str]] = {}
    for u in us:
        mentions.setdefault(u.name, set()).update(u.names)
    known = set(mentions)
    seen: set[str] = set()
    todo = [n for n in start]
    while todo:
        n = todo.pop()
        n = defines.get(n, n)
        if n in seen or n not in known:
            continue
        seen.add(n)
        todo.extend(m for m in mentions[n] if (m in known or m in defines) and m not in seen)
    return frozenset(seen)


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
    us = _units(raw)[0]
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


def is_c(path: str) -> bool:
    return path.endswith(C_SUFFIXES)


__all__ = ["C_SUFFIXES", "Edit", "Unit", "edits", "find", "generate", "is_c", "names", "reach", "units", "unparsed"]
