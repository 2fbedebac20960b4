"""C source read as the C grammar sees it (tree-sitter): its functions and function-like macros, and what each reaches.

A C file is a sequence of *units*: each function definition and each
function-like macro whose text parses as C on its own (a macro that defines
functions, such as the kernel's ``DEFINE_TILE``, or an expression), in
every ``#if`` branch. Comments, ``_Pragma(...)`` and ``__attribute__((...))``
are blanked (same length) before parsing: the grammar does not know them,
and every offset, line and column stays where it was. Code the grammar
cannot parse (its ERROR nodes) is listed by :func:`unparsed`.

Refs to C (``impl/kernels.c::kv_linear``, :mod:`harness.select.refs`) are
resolved here; the mutation stage's C mutants (:mod:`harness.mutation.cgen`)
are changes inside these units; a card's ref claims its function and every
function and macro it reaches by name (:func:`reach`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

C_SUFFIXES = (".c", ".h")

_BLANKED = re.compile(rb"_Pragma\s*\(|__attribute__\s*\(")


@functools.cache
def _parser():
    """tree-sitter's C parser (imported on first use: only ``mutate`` over C needs it)."""
    import tree_sitter
    import tree_sitter_c

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_c.language()))


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
def units_of(raw: bytes) -> tuple[tuple[Unit, ...], tuple[tuple[int, int], ...], dict[str, str]]:
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
    return units_of((root / path).read_bytes())[0]


def unparsed(root: Path, path: str) -> tuple[tuple[int, int], ...]:
    """(first, last) lines of code in ``root/path`` the grammar could not parse: never mutated."""
    return units_of((root / path).read_bytes())[1]


def names(root: Path, path: str) -> list[str]:
    """Each function's and macro's name once, in file order (a name defined in several ``#if`` branches once)."""
    return list(dict.fromkeys(u.name for u in units(root, path)))


def reach(root: Path, path: str, start: Iterable[str]) -> frozenset[str]:
    """The names ``start`` names and every function and macro they reach by name in ``root/path``
    (a call, a macro use, or a function a top-level macro call defines: ``DEFINE_TILE(tile_1_1, ...)``)."""
    us, _, defines = units_of((root / path).read_bytes())
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


def is_c(path: str) -> bool:
    return path.endswith(C_SUFFIXES)


__all__ = ["C_SUFFIXES", "Unit", "is_c", "names", "reach", "units", "units_of", "unparsed"]
