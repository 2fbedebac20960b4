"""Every target by name, the selections a run can ask for, and which targets can run here.

Names: ``reference`` and ``impl.*`` (:mod:`harness.targets.own`, the group
``own``), ``transformers.*`` (:mod:`harness.targets.transformers`), and the
project's own targets, declared in its ``pyproject.toml`` (``[tool.kvproof]
targets = ["module:NAME"]``, :mod:`harness.targets.pyproject`; the group
``project``). A selection is a comma-separated list of names, groups
(``own``, ``transformers``, ``project``, ``all``) or globs
(``transformers.*sliding``), in that order, each target once.
``KVPROOF_TARGETS`` holds the default selection of a witness process
(``--kvproof-target`` wins); without either, a project that declares targets
selects ``project``, any other ``own``. A selection names a target that
cannot run here too (its cells are "not runnable here", with the reason).

The project is the one :func:`use_project` names (the ``kv_target`` plugin
names pytest's root), else :func:`harness.project.project_root` (``KVPROOF_ROOT``,
else found from the working directory up); no project found: no project targets.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

from harness.errors import TargetUnknown, UsageError
from harness.project import project_root as discover
from harness.targets import litgpt, llamacpp, own, pyproject, torchtune, transformers, vllm
from harness.targets.protocol import Target

ENV_TARGETS = "KVPROOF_TARGETS"
DEFAULT = "own"  # the default selection of a project that declares no targets of its own
PROJECT = "project"  # the group of the project's own targets, and the default selection where there are any

# kvproof's built-in targets (the project's own come from project_targets())
TARGETS: dict[str, Target] = {
    **own.TARGETS,
    **transformers.TARGETS,
    **torchtune.TARGETS,
    **litgpt.TARGETS,
    **vllm.TARGETS,
    **llamacpp.TARGETS,
}
GROUPS: dict[str, tuple[str, ...]] = {
    "own": own.OWN,
    "transformers": tuple(transformers.TARGETS),
    "torchtune": tuple(torchtune.TARGETS),
    "litgpt": tuple(litgpt.TARGETS),
    "vllm": tuple(vllm.TARGETS),
    "llamacpp": tuple(llamacpp.TARGETS),
    "all": tuple(TARGETS),
}

_root: list[Path | None] = []  # the project use_project() named ([] : not named, discover it)


def use_project(root: Path | None) -> None:
    """Take the project's targets from ``root`` (None: the process has no project) instead of discovering it."""
    _root[:] = [None if root is None else Path(root).resolve()]


def project_root() -> Path | None:
    """The project whose targets count: the one :func:`use_project` named, else the discovered one, else None."""
    if _root:
        return _root[0]
    try:
        return discover()
    except UsageError:  # no project here (or KVPROOF_ROOT names none): only the built-in targets
        return None


def project_targets() -> dict[str, Target]:
    """name -> Target the project declares ([tool.kvproof] targets); ProjectTargetsInvalid when it cannot load."""
    root = project_root()
    return pyproject.load(root, TARGETS) if root is not None else {}


def targets() -> dict[str, Target]:
    """Every target by name: the built-in ones, then the project's."""
    return {**TARGETS, **project_targets()}


def groups() -> dict[str, tuple[str, ...]]:
    """Every group: own, transformers, project (the project's targets; may be empty) and all."""
    mine = tuple(project_targets())
    return {**{k: v for k, v in GROUPS.items() if k != "all"}, PROJECT: mine, "all": (*GROUPS["all"], *mine)}


def default() -> str:
    """The selection a witness gets from neither ``--kvproof-target`` nor ``KVPROOF_TARGETS``."""
    return PROJECT if project_targets() else DEFAULT


def get(name: str) -> Target:
    """The target called ``name``; TargetUnknown naming the known ones otherwise."""
    known = targets()
    try:
        return known[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(known) + list(groups()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise TargetUnknown(
            f"target={name!r} is not a target{hint}; known: {', '.join(known)} (groups: {', '.join(groups())})"
        ) from None


def select(spec: str | None = None) -> tuple[Target, ...]:
    """The targets a selection names (None or "": ``KVPROOF_TARGETS``, else :func:`default`), in order, each once.

    Raises TargetUnknown for a name, group or glob that matches no target (or an empty selection),
    ProjectTargetsInvalid when the project's declared targets do not load.
    """
    spec = spec or os.environ.get(ENV_TARGETS) or default()
    known, named = targets(), groups()
    out: dict[str, Target] = {}
    for word in (w.strip() for w in spec.split(",")):
        if not word:
            continue
        if word in named:
            names = list(named[word])
        elif any(c in word for c in "*?["):
            names = [n for n in known if fnmatch.fnmatchcase(n, word)]
            if not names:
                raise TargetUnknown(f"target={word!r} matches no target; known: {', '.join(known)}")
        else:
            names = [get(word).name]
        for n in names:
            out.setdefault(n, known[n])
    if not out:
        raise TargetUnknown(f"{ENV_TARGETS}/--kvproof-target={spec!r} selects no target")
    return tuple(out.values())


@dataclass(frozen=True)
class Availability:
    """One target as this machine sees it: runnable (bound to ``binding``) or not, and why not."""

    name: str
    runnable: bool
    binding: str  # e.g. "transformers==5.24.0", or "kvproof==0.1.0"
    reason: str  # why it is not runnable here; "" when it is


def available(spec: str = "all") -> list[Availability]:
    """Every selected target with whether it runs here and why not (never leaves one out)."""
    return [Availability(t.name, t.runnable, t.binding(), t.unavailable) for t in select(spec)]
