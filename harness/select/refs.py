"""Resolve refs and pytest node ids statically, with :mod:`ast`; nothing is imported.

``path.py::Name`` and ``path.py::Class.method`` (refs; ``path.c::name`` for C, in tree-sitter's
C grammar) and
``path.py::test_x`` / ``path.py::TestClass::test_x`` (test nodes) are looked
up in the parsed source of ``root/path.py``. The result gives the lines of
the definition, for reports that show the referenced source beside a proof.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from harness.project import KVPROOF_HOME
from harness.select import csource
from harness.select.suggest import did_you_mean


@functools.lru_cache(maxsize=256)
def _parse(path: Path, mtime_ns: int) -> ast.Module | str:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read: {exc}"


def parse_module(path: Path) -> ast.Module | str:
    """AST of a Python file, or a message saying why it could not be parsed."""
    try:
        return _parse(path, path.stat().st_mtime_ns)
    except OSError as exc:
        return f"cannot read: {exc}"


def _scope_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names defined at the top of a module or class body (def, class, assignment)."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names[t.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.If, ast.Try)):  # e.g. `if TYPE_CHECKING:` / try-import fallbacks
            names.update(_scope_names(node.body))
    return names


@dataclass(frozen=True)
class RefSite:
    """Where a ref points: file (relative), first and last line of the definition."""

    path: str
    line: int
    end_line: int


def resolve_symbol(root: Path, file: str, qualname: str) -> RefSite | str:
    """Find ``qualname`` (``Name`` or ``Class.method``) in ``root/file`` statically.

    Returns the :class:`RefSite` or a message saying what is missing, with a
    suggestion when a close name exists.
    """
    path = root / file
    if not path.is_file():
        return f"no such file {file}"
    tree = parse_module(path)
    if isinstance(tree, str):
        return f"{file}: {tree}"
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    walked = []
    for part in qualname.split("."):
        names = _scope_names(body)
        if part not in names:
            scope = ".".join(walked) or file
            return f"`{part}` is not defined in {scope}{did_you_mean(part, names)}"
        node = names[part]
        walked.append(part)
        body = node.body if isinstance(node, ast.ClassDef) else []
    assert node is not None
    return RefSite(file, node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno)


def resolve_c(root: Path, file: str, name: str) -> RefSite | str:
    """Find the C function or function-like macro ``name`` in ``root/file`` (tree-sitter's C grammar,
    :mod:`harness.select.csource`): its first definition's lines, or a message saying what is missing."""
    path = root / file
    if not path.is_file():
        return f"no such file {file}"
    try:
        units = csource.units(root, file)
    except (OSError, UnicodeDecodeError) as exc:
        return f"{file}: cannot read: {exc}"
    for u in units:
        if u.name == name:
            return RefSite(file, u.line, u.end_line)
    names = {u.name: u for u in units}
    return f"`{name}` is not a function or function-like macro of {file}{did_you_mean(name, names)}"


def resolve_ref(root: Path, ref: str) -> RefSite | str:
    """Resolve ``path.py::Name`` / ``path.py::Class.method`` (see :func:`resolve_symbol`), or ``path.c::name``
    (:func:`resolve_c`)."""
    file, _, qual = ref.partition("::")
    if csource.is_c(file):
        return resolve_c(root, file, qual)
    return resolve_symbol(root, file, qual)


def resolve_test(root: Path, node_id: str) -> RefSite | str:
    """Check a pytest node id exists: file, then ``test_x`` or ``TestClass::test_x``.

    A ``[param]`` suffix is accepted by base name (parametrized ids are
    generated at collection time and cannot be checked without importing).
    A test function the module imports by name (``from harness.targets.claims
    import test_x``: pytest collects it there) counts too, when the module it
    comes from defines it (looked up in the project, then in kvproof's
    checkout; a module found in neither is taken on trust, and collection
    decides).
    """
    base = node_id.split("[", 1)[0]
    file, _, rest = base.partition("::")
    result = resolve_symbol(root, file, rest.replace("::", "."))
    if isinstance(result, str) and "is not defined" in result and "::" not in rest:
        imported = _imported_test(root, file, rest)
        if imported is not None:
            return imported
    if isinstance(result, str) and "is not defined" in result:
        return result.replace("is not defined", "is not a test")
    return result


def _imported_test(root: Path, file: str, name: str) -> RefSite | str | None:
    """Where ``file`` imports test function ``name`` (``from module import name [as alias]`` at its top), checked
    in the module it comes from when that is found; None when it imports no such name."""
    tree = parse_module(root / file)
    if isinstance(tree, str):
        return None
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            site = RefSite(file, node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno)
            rel = Path(*node.module.split(".")).with_suffix(".py")
            for base in dict.fromkeys((root, KVPROOF_HOME)):
                if (base / rel).is_file():
                    found = resolve_symbol(base, rel.as_posix(), alias.name)
                    if isinstance(found, str):
                        return f"{file}:{node.lineno} imports {alias.name} from {node.module}, but {found}"
                    return site
            return site  # an installed module outside both: pytest's collection decides
    return None
