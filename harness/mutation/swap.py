"""Applying a mutant in a witness process: compile the changed function, swap it in as a liar is swapped in.

:func:`apply` is what the plugin calls (:mod:`harness.plugin`), before collection in a fresh witness
process, or after it in a process forked from a card's warm server (:mod:`harness.execute.warm`), where the
``from module import f`` copies made by the modules imported since are rebound too. The mutant itself is
rebuilt from its key by :func:`harness.mutation.generate.find`.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Sequence
from pathlib import Path

from harness import liars
from harness.errors import LiarError
from harness.mutation import cbuild, cgen
from harness.mutation.generate import Mutant, find, parse_key
from harness.select import csource

_PLAIN_DECORATORS = {"property", "staticmethod", "classmethod"}


def compile_mutant(
    root: Path, key: str, module_globals: dict, owner: object | None, found: tuple[Mutant, str, ast.AST] | None = None
) -> tuple[Mutant, object]:
    """(mutant, the changed function) compiled in ``module_globals``.

    The def is compiled inside a stand-in class of the same name (so
    ``self.__x`` mangles as in the real class) and a function that holds
    ``__class__`` (so zero-argument ``super()`` works), with its own line
    numbers, under the file's name: a traceback points at the mutated line.
    ``property``/``staticmethod``/``classmethod`` decorators are left off
    (the caller wraps like the original); other decorators are applied.
    ``found``: what :func:`find` returned for ``key``, when the caller has it.
    """
    mutant, _, fn = found if found is not None else find(root, key)
    fn = copy.deepcopy(fn)
    fn.decorator_list = [d for d in fn.decorator_list if not (isinstance(d, ast.Name) and d.id in _PLAIN_DECORATORS)]
    cls_name = mutant.qualname.split(".")[-2] if "." in mutant.qualname else None
    outer = ast.FunctionDef(
        name="__kvproof_outer__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg("__class__")], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[fn, ast.Return(ast.Name(fn.name, ast.Load()))],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    body: list[ast.stmt] = [outer]
    if cls_name:
        body = [ast.ClassDef(name=cls_name, bases=[], keywords=[], body=[outer], decorator_list=[], type_params=[])]
    module = ast.Module(body=body, type_ignores=[])
    for node in (outer, *body):
        node.lineno, node.col_offset, node.end_lineno, node.end_col_offset = 1, 0, 1, 0
    ast.fix_missing_locations(module)
    code = compile(module, str((root / mutant.path).resolve()), "exec")
    ns: dict = {}
    exec(code, module_globals, ns)  # noqa: S102 - the point: compile the changed function
    make = vars(ns[cls_name])["__kvproof_outer__"] if cls_name else ns["__kvproof_outer__"]
    func = make(owner)
    func.__qualname__ = mutant.qualname
    return mutant, func


def apply(key: str, root: Path, late: Sequence[str] = ()):
    """Swap the mutant ``key`` into the running process, as :func:`harness.liars.apply` does a liar.

    ``late``: names of modules imported *after* the point where a fresh
    witness process applies a mutant (a warm server's collection,
    :mod:`harness.execute.warm`); a module-level function's ``from module
    import f`` copies in them are rebound too, as those imports would have
    bound the mutant. Returns a :class:`harness.liars.Applied`; raises
    LiarError when the key names no mutant of the file as it is, or the
    target cannot be resolved.
    """
    import importlib
    import inspect
    import sys

    if csource.is_c(parse_key(key)[0]):
        return apply_c(key, root)
    found = find(root, key)
    mutant = found[0]
    module = importlib.import_module(mutant.module)
    target = liars._resolve(f"mutant {key}", mutant.target)
    owner = target.owner if inspect.isclass(target.owner) else None
    _, func = compile_mutant(root, key, vars(module), owner, found)
    replacement: object = func
    if isinstance(target.original, property):
        orig = target.original
        replacement = property(func, orig.fset, orig.fdel, orig.__doc__)
    spec = liars.Liar(f"mutant {key}", mutant.target, replacement, False, mutant.change)
    patch = liars._swap(spec, target)
    rebound: list[tuple[object, str]] = []
    if target.in_module:
        done = {id(m) for m, _ in patch.rebound} | {id(target.owner)}
        for name in late:
            mod = sys.modules.get(name)
            if mod is None or id(mod) in done:
                continue
            for attr, value in list(vars(mod).items()):
                if value is patch.plain:
                    setattr(mod, attr, replacement)
                    rebound.append((mod, attr))

    def undo() -> None:
        patch.undo()
        for mod, attr in rebound:
            setattr(mod, attr, patch.plain)

    return liars.Applied(spec.name, spec.target, target.original, undo)


def apply_c(key: str, root: Path):
    """Run this process on the C mutant ``key``: its file's ``load`` hook (:mod:`harness.mutation.cbuild`) gets
    the changed text (built already by the stage, so only loaded here). LiarError when the key names no
    mutant now or the project declares no hooks; any error of the hook (no kernel loaded, a build that
    fails) propagates: the mutant is ``error``, never run on unchanged code."""
    mutant, text, _ = cgen.find(root, key)
    hooks = cbuild.hooks(root).get(mutant.path)
    if hooks is None:
        raise LiarError(
            f"mutant={key!r}: {mutant.path} has no [tool.kvproof.c-sources] entry in pyproject.toml (how to build "
            "and load a changed copy of it)"
        )
    schema = cbuild.schema_for(root, mutant.path, text)  # built by the stage, with this mutant behind a switch
    undo = cbuild.resolve(hooks.load)(*schema) if schema is not None else cbuild.resolve(hooks.load)(text)
    return liars.Applied(f"mutant {key}", f"{mutant.path}::{mutant.qualname}", None, undo)


__all__ = ["apply", "apply_c", "compile_mutant"]
