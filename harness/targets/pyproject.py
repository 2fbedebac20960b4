"""A project's own targets: ``[tool.kvproof] targets = ["module:NAME", ...]`` in its ``pyproject.toml``.

A project under proof (found by :func:`harness.project.project_root`) may
declare the KV caches it wants proven next to kvproof's own and
transformers' targets::

    [tool.kvproof]
    targets = ["toycache_target:TARGET"]

Each entry is ``module:NAME`` (dotted names): the module is imported with
the project root first on ``sys.path`` (so a package or module in the
project folder is found without installing it; an installed one works too),
and ``NAME`` is a :class:`harness.targets.protocol.Target`, a mapping of
names to Targets, or a list or tuple of Targets. Target names must match
:data:`NAME_PATTERN`, be unique, and not be a built-in target's name, a group
(``own``, ``transformers``, ``torchtune``, ``litgpt``, ``project``, ``all``) or under a built-in prefix
(``impl.``, ``transformers.``, ``torchtune.``, ``litgpt.``).

:func:`load` reads and checks the table and imports the entries;
:class:`ProjectTargetsInvalid` (a UsageError, exit 2) names the file, the
field, the value, what is allowed and the fix, in one paragraph, never a
traceback. Results are cached per root, errors too (an import is not
retried).
"""

from __future__ import annotations

import importlib
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

from harness.errors import UsageError
from harness.targets.guard import WHY, ProjectCodeExited, project_code
from harness.targets.protocol import Target

TABLE = "[tool.kvproof]"
KEYS = ("targets", "c-sources")  # the keys [tool.kvproof] may hold (c-sources: harness.mutation.cbuild)
ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
NAME_PATTERN = r"^[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*$"  # as obligations/targets.schema.json's target names
RESERVED_PREFIXES = ("impl.", "transformers.", "torchtune.", "litgpt.", "vllm.", "llama.cpp")
GROUP_NAMES = ("own", "transformers", "torchtune", "litgpt", "vllm", "llamacpp", "project", "all")
EXAMPLE = 'targets = ["mycache_target:TARGET"]'


class ProjectTargetsInvalid(UsageError):
    """``[tool.kvproof]`` in the project's pyproject.toml is malformed, or a target entry does not load.

    ``path`` is the pyproject.toml, ``field`` the setting (``targets[0]``; "" for the whole file), ``value``
    its repr (shortened), ``message`` what is wrong, what is allowed and the fix.
    """

    def __init__(self, path: Path, field: str, value: str, message: str) -> None:
        what = f" {TABLE} {field} = {value}" if field else ""
        super().__init__(f"{path}:{what}: {message}")
        self.path, self.field, self.value, self.message = path, field, value, message


_cache: dict[Path, dict[str, Target] | ProjectTargetsInvalid] = {}


def pyproject_of(root: Path) -> Path:
    return Path(root) / "pyproject.toml"


def table(root: Path) -> dict | None:
    """The ``[tool.kvproof]`` table of ``root/pyproject.toml``, or None when there is none."""
    path = pyproject_of(root)
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProjectTargetsInvalid(path, "", "", f"cannot be read as TOML ({exc}); fix the file") from None
    found = data.get("tool", {}).get("kvproof") if isinstance(data.get("tool"), dict) else None
    return found if isinstance(found, dict) else None


def load(root: Path, builtin: Mapping[str, Target] | None = None) -> dict[str, Target]:
    """name -> Target for every target the project at ``root`` declares (empty when it declares none).

    ``builtin``: the names a project target may not take. Raises
    :class:`ProjectTargetsInvalid` for a malformed table or an entry that does
    not give well-named Targets.
    """
    root = Path(root).resolve()
    if root not in _cache:
        try:
            _cache[root] = _load(root, builtin or {})
        except ProjectTargetsInvalid as exc:
            _cache[root] = exc
    found = _cache[root]
    if isinstance(found, ProjectTargetsInvalid):
        raise found
    return found


def forget() -> None:
    """Drop what :func:`load` cached (tests; a long-lived process whose project changed)."""
    _cache.clear()


def _load(root: Path, builtin: Mapping[str, Target]) -> dict[str, Target]:
    path = pyproject_of(root)
    conf = table(root)
    if conf is None:
        return {}
    unknown = sorted(set(conf) - set(KEYS))
    if unknown:
        raise problem(
            path,
            unknown[0],
            conf[unknown[0]],
            f"is not a {TABLE} setting; the settings are: {', '.join(KEYS)}",
            f"remove it or correct its spelling (e.g. {EXAMPLE})",
        )
    entries = conf.get("targets", [])
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise problem(
            path,
            "targets",
            entries,
            "must be a list of strings, each 'module:NAME' naming a Target (or a dict or list of Targets)",
            f"write e.g. {EXAMPLE}",
        )
    out: dict[str, Target] = {}
    where: dict[str, str] = {}
    for i, entry in enumerate(entries):
        field = f"targets[{i}]"
        for target in _resolve(root, path, field, entry):
            name = target.name
            why = _bad_name(name, builtin)
            if why:
                raise problem(path, field, entry, f"declares a target named {name!r}, which {why}", _RENAME)
            if name in out:
                raise problem(
                    path,
                    field,
                    entry,
                    f"declares a target named {name!r}, which {where[name]} already declares",
                    "give each target its own name, or list each entry once",
                )
            out[name] = target
            where[name] = f"{field} = {entries[i]!r}"
    return out


_GUARD_FIX = (
    'put the module\'s script part under `if __name__ == "__main__":`, so that importing it only defines the targets'
)
_RENAME = "give it another name (Target(name=...)), e.g. 'mycache' or 'mycache.paged'"


def _bad_name(name: object, builtin: Mapping[str, Target]) -> str:
    """Why ``name`` cannot be a project target's name ("" when it can)."""
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        return "is not allowed: a name is lowercase letters, digits, '_' and '-', in dot-separated parts"
    if name in builtin:
        return "is a built-in target's name"
    if name in GROUP_NAMES:
        return f"is a group's name ({', '.join(GROUP_NAMES)})"
    if name == "reference" or name.startswith(RESERVED_PREFIXES):
        return f"is under a prefix kvproof keeps for its own targets ({', '.join(RESERVED_PREFIXES)})"
    return ""


def _resolve(root: Path, path: Path, field: str, entry: str) -> list[Target]:
    """The Targets ``entry`` ('module:NAME') names, importing the module with ``root`` first on sys.path."""
    if not ENTRY.match(entry):
        raise problem(
            path,
            field,
            entry,
            "is not 'module:NAME' (a dotted module path, a colon, then one attribute name)",
            f"write e.g. {EXAMPLE}",
        )
    module_name, _, attr = entry.partition(":")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # what a user expects: the project's own modules import from its root
        importlib.invalidate_caches()
    try:
        # NOTE: the user's module runs in the runner: guarded, so an exit at import (a script without a __main__
        # guard) is an error naming it, never the run's exit code
        with project_code(f"importing {module_name}", _GUARD_FIX):
            module = importlib.import_module(module_name)
    except ProjectCodeExited as exc:
        raise problem(path, field, entry, f"importing {module_name} {exc.how}: {WHY}", _GUARD_FIX) from None
    except Exception as exc:  # NOTE: the user's module; any failure is theirs to fix, named here without a traceback
        missing = isinstance(exc, ModuleNotFoundError) and exc.name is not None and module_name.startswith(exc.name)
        fix = (
            f"put {module_name.replace('.', '/')}.py (or its package) in the project root {root}, "
            "or install the package that holds it"
            if missing
            else f"fix {module_name} so that `python -c 'import {module_name}'` works from {root}"
        )
        raise problem(path, field, entry, f"importing {module_name} raised {type(exc).__name__}: {exc}", fix) from None
    if not hasattr(module, attr):
        raise problem(
            path,
            field,
            entry,
            f"module {module_name} ({getattr(module, '__file__', '?')}) has no attribute {attr!r}",
            "name the Target (or the dict or list of Targets) the module defines",
        )
    value = getattr(module, attr)
    if isinstance(value, Target):
        return [value]
    items = list(value.values()) if isinstance(value, Mapping) else value if isinstance(value, list | tuple) else None
    if items is None or not items or not all(isinstance(t, Target) for t in items):
        shown = _shown_type(value, items)
        raise problem(
            path,
            field,
            entry,
            f"{module_name}.{attr} is {shown}, not a Target; allowed: a harness.targets.protocol.Target, a dict "
            "of name -> Target, or a non-empty list or tuple of Targets",
            "point the entry at the Target(s) your adapter module defines",
        )
    if isinstance(value, Mapping):
        for key, t in value.items():
            if key != t.name:
                raise problem(
                    path,
                    field,
                    entry,
                    f"{module_name}.{attr}[{key!r}] is the target named {t.name!r}: a dict's keys must be the "
                    "targets' names",
                    "key each Target by its own name",
                )
    return list(items)


def _shown_type(value: object, items: list | None) -> str:
    """What ``value`` is, in words: its type, or the type of the first item that is not a Target."""
    if not items:
        return f"a {type(value).__name__}" + (" (empty)" if items is not None else "")
    other = next(t for t in items if not isinstance(t, Target))
    return f"a {type(value).__name__} holding a {type(other).__name__}"


def problem(path: Path, field: str, value: object, what: str, fix: str) -> ProjectTargetsInvalid:
    """The one-paragraph error: file, field, value, what is wrong and allowed, the fix."""
    shown = repr(value)
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    return ProjectTargetsInvalid(path, field, shown, f"{what}; {fix}")
