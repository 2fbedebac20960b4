"""Every target by name, the selections a run can ask for, and which targets can run here.

Names: ``reference`` and ``impl.*`` (:mod:`harness.targets.own`, the default
selection ``own``), ``transformers.*`` (:mod:`harness.targets.transformers`).
A selection is a comma-separated list of names, groups (``own``,
``transformers``, ``all``) or globs (``transformers.*sliding``), in that order,
each target once. ``KVPROOF_TARGETS`` holds the default selection of a
witness process (``--kvproof-target`` wins); a selection names a target that
cannot run here too (its cells are "not runnable here", with the reason).
"""

from __future__ import annotations

import difflib
import fnmatch
import os
from dataclasses import dataclass

from harness.errors import TargetUnknown
from harness.targets import own, transformers
from harness.targets.protocol import Target

ENV_TARGETS = "KVPROOF_TARGETS"
DEFAULT = "own"

TARGETS: dict[str, Target] = {**own.TARGETS, **transformers.TARGETS}
GROUPS: dict[str, tuple[str, ...]] = {
    "own": own.OWN,
    "transformers": tuple(transformers.TARGETS),
    "all": tuple(TARGETS),
}


def get(name: str) -> Target:
    """The target called ``name``; TargetUnknown naming the known ones otherwise."""
    try:
        return TARGETS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(TARGETS) + list(GROUPS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise TargetUnknown(
            f"target={name!r} is not a target{hint}; known: {', '.join(TARGETS)} (groups: {', '.join(GROUPS)})"
        ) from None


def select(spec: str | None = None) -> tuple[Target, ...]:
    """The targets a selection names (None or "": ``KVPROOF_TARGETS``, else ``own``), in order, each once.

    Raises TargetUnknown for a name, group or glob that matches no target.
    """
    spec = spec or os.environ.get(ENV_TARGETS) or DEFAULT
    out: dict[str, Target] = {}
    for word in (w.strip() for w in spec.split(",")):
        if not word:
            continue
        if word in GROUPS:
            names = list(GROUPS[word])
        elif any(c in word for c in "*?["):
            names = [n for n in TARGETS if fnmatch.fnmatchcase(n, word)]
            if not names:
                raise TargetUnknown(f"target={word!r} matches no target; known: {', '.join(TARGETS)}")
        else:
            names = [get(word).name]
        for n in names:
            out.setdefault(n, TARGETS[n])
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
