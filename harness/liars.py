"""Liars: deliberately wrong variants of one impl function, registered by name.

A liar is a small module in ``witnesses/liars/`` that swaps one function or
method of the implementation for a plausible wrong version::

    # witnesses/liars/kv.py
    from witnesses.liars import liar   # re-exports harness.liars.liar

    @liar("kv.composed_rotation", target="impl.kv:KVCache.evict",
          why="rotates the stored post-RoPE K by the shift instead of re-deriving it")
    def evict(self, start, n):
        ...

    @liar("kv.off_by_one", target="impl.kv:KVCache.evict", factory=True)
    def make(original):              # factory=True: receives the real one
        def evict(self, start, n):
            return original(self, start + 1, n)
        return evict

The harness finds liar names statically (:func:`scan`, an :mod:`ast` pass
that never imports the liar module), so ``validate`` can check a card's
``liars:`` cheaply; names and targets must therefore be string literals.
In the witness subprocess, :func:`apply` imports only the module that
defines the liar and patches its target *before* the witness modules are
collected, so ``from impl.kv import KVCache`` in a witness sees the liar.

NOTE: patching a module attribute does not reach code that bound the
original with ``from x import f`` earlier; :func:`apply` therefore also
rebinds every already-imported module of the target's top-level package
whose attribute *is* the original object.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import LiarError

LIARS_DIR = Path("witnesses") / "liars"  # relative to the project root


@dataclass(frozen=True)
class LiarSite:
    """Where a liar is registered, found without importing it."""

    name: str
    target: str  # "package.module:Qual.name"
    path: Path  # absolute path of the liar module
    line: int
    why: str = ""


@dataclass(frozen=True)
class Liar:
    """A registered liar (runtime side)."""

    name: str
    target: str
    replacement: Callable
    factory: bool
    why: str
    raises: tuple[type[BaseException], ...] = ()  # what raising is part of the lie (see :func:`liar`)


_REGISTRY: dict[str, Liar] = {}


def liar(
    name: str,
    *,
    target: str,
    why: str = "",
    factory: bool = False,
    raises: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> Callable[[Callable], Callable]:
    """Register the decorated function as liar ``name`` replacing ``target``.

    ``target`` is ``"module:Name"`` or ``"module:Class.method"``. With
    ``factory=True`` the decorated function is called with the original and
    returns the replacement. Both arguments must be string literals (the
    harness reads them with :mod:`ast`).

    ``raises``: the exception types whose raising *is* the lie (a range check that refuses a valid call raises
    the API's own error, e.g. ``raises=CacheError``). Every other exception that leaves a call of the liar
    (a wrong signature's TypeError, an AttributeError, the original's error reached through a factory) is a
    crash: a witness that turns it into a failed check (``except Exception: pytest.fail(...)``) has not caught
    the liar (:data:`CALL_TAG`).
    """
    if ":" not in target:
        raise LiarError(f"target={target!r}: expected 'module:Name' or 'module:Class.method'")
    declared = raises if isinstance(raises, tuple) else (raises,)
    if not all(isinstance(t, type) and issubclass(t, BaseException) for t in declared):
        raise LiarError(f"liar={name!r}: raises={raises!r}: expected an exception class or a tuple of them")

    def register(fn: Callable) -> Callable:
        _REGISTRY[name] = Liar(name, target, fn, factory, why, declared)
        return fn

    return register


# ---------------------------------------------------------------- static side


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


@dataclass(frozen=True)
class LiarProblem:
    """Something wrong in the liar index: a duplicate name, a non-literal or bad target, a broken module."""

    path: str  # liar module, relative to the project root when possible
    line: int  # 1-based; 0 when unknown
    field: str  # "name" or "target"; "" for the whole module
    value: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        what = f"{self.field}={self.value}: " if self.field else ""
        return f"{where}: {what}{self.message}"


_TARGET_RE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:"
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)


def _shown(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def scan(root: Path) -> tuple[dict[str, LiarSite], list[LiarProblem]]:
    """Index every ``@liar(...)`` under ``root/witnesses/liars`` without importing.

    Returns (name -> site, problems). A name registered twice (in one file
    or two) is a problem and is left out of the index altogether, so no
    run can pick one of the two by file order.
    """
    folder = root / LIARS_DIR
    sites: dict[str, LiarSite] = {}
    problems: list[LiarProblem] = []
    duplicated: set[str] = set()
    if not folder.is_dir():
        return sites, problems
    for path in sorted(folder.rglob("*.py")):
        shown = _shown(path, root)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, OSError, UnicodeDecodeError) as exc:
            problems.append(
                LiarProblem(shown, getattr(exc, "lineno", 0) or 0, "", "", f"cannot parse liar module: {exc}")
            )
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            fname = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if fname != "liar" or not node.args:
                continue
            kw = {k.arg: k.value for k in node.keywords}
            name, target = _literal(node.args[0]), _literal(kw.get("target"))
            if name is None or target is None:
                problems.append(
                    LiarProblem(shown, node.lineno, "", "", "liar(...) needs a literal name and target='module:Name'")
                )
                continue
            if not _TARGET_RE.match(target):
                problems.append(
                    LiarProblem(
                        shown,
                        node.lineno,
                        "target",
                        repr(target),
                        "expected 'package.module:Name' or 'package.module:Class.method' (dotted names only, "
                        "resolved inside the project), e.g. 'impl.kv:KVCache.evict'",
                    )
                )
                continue
            if name in sites or name in duplicated:
                first = sites.pop(name, None)
                duplicated.add(name)
                where = f" (first at {_shown(first.path, root)}:{first.line})" if first else ""
                problems.append(
                    LiarProblem(
                        shown,
                        node.lineno,
                        "name",
                        repr(name),
                        f"liar name registered more than once{where}; a run could not tell which one a card means: "
                        "rename one of them",
                    )
                )
                continue
            sites[name] = LiarSite(name, target, path.resolve(), node.lineno, _literal(kw.get("why")) or "")
    return sites, problems


# ---------------------------------------------------------------- runtime side


@dataclass(frozen=True)
class Applied:
    """A liar in effect: call ``undo()`` to restore the original."""

    name: str
    target: str
    original: object
    undo: Callable[[], None]
    source: str = ""  # the liar module's file: an exception raised there is the liar's own crash, not a catch


def _load_module_file(path: Path) -> None:
    mod_name = "kvproof_liar_" + "_".join(path.with_suffix("").parts[-3:]).replace("-", "_")
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise LiarError(f"cannot import liar module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)


def _site(name: str, root: Path) -> LiarSite:
    """Where ``name`` is registered under ``root``; LiarError when it is not, or more than once."""
    sites, problems = scan(root)
    clash = [p for p in problems if p.field == "name" and p.value == repr(name)]
    if clash:
        raise LiarError(f"liar={name!r}: {clash[0]}")
    if name not in sites:
        raise LiarError(f"liar={name!r} is not registered in {root / LIARS_DIR}")
    return sites[name]


def _load(name: str, site: LiarSite) -> Liar:
    """The registered liar, importing its module unless this process already has it from ``site.path``."""
    known = _REGISTRY.get(name)
    code = getattr(known.replacement, "__code__", None) if known else None
    if code is None or Path(code.co_filename).resolve() != site.path:  # not loaded from this root yet
        try:
            _load_module_file(site.path)
        except LiarError:
            raise
        except Exception as exc:  # the liar module itself is broken
            raise LiarError(f"liar={name!r}: importing {site.path} raised {type(exc).__name__}: {exc}") from exc
    if name not in _REGISTRY:
        raise LiarError(f"liar={name!r}: {site.path} did not register it when imported")
    return _REGISTRY[name]


@dataclass(frozen=True)
class _Target:
    """What ``module:Qual.name`` names: the attribute ``attr`` of ``owner`` (a module or class)."""

    module: str
    owner: object
    attr: str
    original: object  # as stored on owner: a staticmethod/classmethod stays wrapped
    in_module: bool  # a module-level name (no class in between)


def _resolve(name: str, target: str) -> _Target:
    """Import the target's module and find the attribute; LiarError when either is missing."""
    module_name, _, qual = target.partition(":")
    try:
        owner: object = importlib.import_module(module_name)
    except Exception as exc:
        raise LiarError(
            f"liar={name!r}: target module {module_name!r} cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc
    *path, attr = qual.split(".")
    for part in path:
        if not hasattr(owner, part):
            raise LiarError(f"liar={name!r}: target={target!r}: {part!r} not found")
        owner = getattr(owner, part)
    try:
        original = inspect.getattr_static(owner, attr)
    except AttributeError:
        where = getattr(owner, "__name__", owner)
        raise LiarError(f"liar={name!r}: target={target!r}: {attr!r} not found in {where}") from None
    return _Target(module_name, owner, attr, original, not path)


@dataclass(frozen=True)
class _Patch:
    """One target swapped for its replacement (and the ``from module import f`` copies rebound)."""

    target: _Target
    plain: object  # the original function, unwrapped from staticmethod/classmethod
    had_own: bool  # the owner held the attribute itself (not inherited from a base class)
    rebound: tuple[tuple[object, str], ...]  # (module, name) that held ``plain``

    def undo(self) -> None:
        t = self.target
        if self.had_own:
            setattr(t.owner, t.attr, t.original)
        else:
            delattr(t.owner, t.attr)
        for mod, aname in self.rebound:
            setattr(mod, aname, self.plain)


def _rebind(t: _Target, plain: object, replacement: object) -> tuple[tuple[object, str], ...]:
    """Point every attribute that *is* ``plain`` in the target's top-level package at ``replacement``."""
    top = t.module.split(".")[0]
    rebound = []
    for mname, mod in list(sys.modules.items()):
        if mod is None or mod is t.owner or not (mname == top or mname.startswith(top + ".")):
            continue
        for aname, value in list(vars(mod).items()):
            if value is plain:
                setattr(mod, aname, replacement)
                rebound.append((mod, aname))
    return tuple(rebound)


def _swap(spec: Liar, t: _Target, tag: bool = False) -> _Patch:
    """Set the replacement (wrapped like the original) on the owner; returns how to undo it. ``tag``: a liar's
    calls tag the exceptions that leave them (:func:`_tagging`); a mutant's are left as they are (any failure
    kills a mutant, and its function must stay the mutated source's own)."""
    original = t.original
    plain = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    replacement = spec.replacement(plain) if spec.factory else spec.replacement
    if tag:
        replacement = _tagging(replacement, spec)
    if isinstance(original, staticmethod):
        replacement = staticmethod(replacement)
    elif isinstance(original, classmethod):
        replacement = classmethod(replacement)
    had_own = inspect.isclass(t.owner) and t.attr in vars(t.owner) or not inspect.isclass(t.owner)
    setattr(t.owner, t.attr, replacement)
    # a module-level function: rebind `from module import f` copies in the same package
    rebound = _rebind(t, plain, replacement) if t.in_module else ()
    return _Patch(t, plain, had_own, rebound)


CALL_TAG = "__kvproof_liar_call__"  # set on an exception that left a call of the applied liar (not declared raises)


def _tagging(replacement: object, spec: Liar) -> object:
    """``replacement`` wrapped so that an exception leaving a call of it carries :data:`CALL_TAG` (the liar's name).

    The witness side (:mod:`harness.plugin`) refuses a failed check raised from, or while handling, such an
    exception: a crash is not a catch. Types in ``spec.raises`` stay untagged (raising them is the lie). A class
    or any other non-function target is returned as it is (its calls are not tagged).
    """
    if not inspect.isfunction(replacement) or inspect.isgeneratorfunction(replacement):
        return replacement
    fn = replacement

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not isinstance(exc, spec.raises) and not hasattr(exc, CALL_TAG):
                try:
                    setattr(exc, CALL_TAG, spec.name)
                except (AttributeError, TypeError):  # an exception type that takes no attributes: left untagged
                    pass
            raise

    return call


def apply(name: str, root: Path) -> Applied:
    """Patch liar ``name`` (found under ``root/witnesses/liars``) into the running process.

    Raises :class:`LiarError` when the name is unknown or registered twice,
    its module fails to import or does not register it, or the target
    cannot be imported or does not exist.
    """
    site = _site(name, root)
    spec = _load(name, site)
    target = _resolve(name, spec.target)
    return Applied(
        name, spec.target, target.original, _swap(spec, target, tag=True).undo, str(Path(site.path).resolve())
    )
