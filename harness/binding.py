"""Which files a card's verdict is bound to, with their sha256.

A verdict holds for the exact bytes it was computed on: the card itself, its
witness modules, the liar modules its liars live in, the support modules of
its witnesses (every ``conftest.py`` pytest loads for them, and the other
non-test modules beside them, such as ``witnesses/synthetic.py``), and its
covered files; and what decides the numbers without being a file of the
project (:func:`run_context`): the weights file (by its sha256) and the
settings (every ``KVPROOF_*`` variable that is not a location or a process
detail, and the numerics line of the implementation). Later (ledger,
``status``, ``--changed``, ``--rerun-failed``) a verdict is STALE or
replayable by comparing these hashes; nothing here decides that.
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.cards import Card, display_path
from harness.files import sha256_file
from harness.liars import LiarSite
from harness.oracle.store import MANIFEST, current_weights, resolve_oracle_dir
from harness.refs import parse_module

SETTINGS_PATH = "(settings: KVPROOF_* and the numerics line)"  # the label of the settings entry
# KVPROOF_* variables that say where things are or how processes start, never what is computed; every other
# one (KVPROOF_KERNEL, KVPROOF_ATTENTION, KVPROOF_DECODE, ... and any added later) is bound
NOT_NUMERICS = frozenset(
    {
        "KVPROOF_ROOT",
        "KVPROOF_CARDS_DIR",
        "KVPROOF_REPORTS_DIR",
        "KVPROOF_HOME",
        "KVPROOF_ORACLE_DIR",  # the oracle manifest is bound by its own sha256
        "KVPROOF_GGUF",  # the weights are bound by their sha256
        "KVPROOF_WEIGHTS_CACHE",
        "KVPROOF_KERNEL_CACHE",
        "KVPROOF_NODE_CACHE",
        "KVPROOF_LAUNCHER",
        "KVPROOF_PROFILE",
        "KVPROOF_ARTIFACTS",
        "KVPROOF_REGOLD",
        "KVPROOF_WATCHDOG_FD",
        "KVPROOF_FORKSERVER_FD",
        "KVPROOF_ZYGOTE_BYTECODE",
        "KVPROOF_ACCOUNT",
    }
)


@dataclass(frozen=True)
class BoundFile:
    path: str  # relative to the project root when inside it
    role: str  # card | witness | liar | support | covers | oracle | weights | settings
    sha256: str | None  # None: the file is missing


def digest(files: Iterable[BoundFile]) -> str:
    """sha256 hex over the sorted ``path\trole\tsha256`` lines of bound files (missing file: ``-``).

    Equal digests mean the same set of files with the same bytes: the key
    ``--changed`` replays by and the history strip calls a change flaky by.
    """
    lines = sorted(f"{f.path}\t{f.role}\t{f.sha256 or '-'}" for f in files)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def settings_text(
    numerics: str | None, environ: Mapping[str, str] | None = None, declared: Mapping[str, str] | None = None
) -> str:
    """The settings a verdict is bound to, one ``NAME=value`` line each (every numerics ``KVPROOF_*`` variable
    of ``environ``, and every ``declared`` setting of the cell's configuration, whatever its name), then the
    numerics line (:func:`harness.provenance.numerics`)."""
    env = dict(os.environ if environ is None else environ)
    env.update(declared or {})
    names = {k for k in env if k.startswith("KVPROOF_") and k not in NOT_NUMERICS} | set(declared or {})
    lines = [f"{k}={env[k]}" for k in sorted(names)]
    return "\n".join([*lines, f"numerics: {numerics or '-'}"])


def run_context(
    root: Path,
    numerics: str | None,
    environ: Mapping[str, str] | None = None,
    declared: Mapping[str, str] | None = None,
) -> tuple[BoundFile, ...]:
    """What every card of a run is bound to besides its files: the settings and, for a project whose
    ``impl`` loads model weights, the weights file it would load now (missing: sha256 None)."""
    text = settings_text(numerics, environ, declared)
    out = [BoundFile(SETTINGS_PATH, "settings", hashlib.sha256(text.encode("utf-8")).hexdigest())]
    if (root / "impl" / "model" / "weights.py").is_file():
        try:
            path, sha = current_weights()
            out.append(BoundFile(display_path(path, root), "weights", sha))
        except Exception as exc:  # NOTE: the project's own WeightsError; its witnesses say what is wrong
            out.append(BoundFile(f"(weights: {type(exc).__name__})", "weights", None))
    return tuple(out)


def bound_files(
    card: Card,
    root: Path,
    liars: Mapping[str, LiarSite],
    extra: tuple[tuple[Path, str], ...] = (),
    context: tuple[BoundFile, ...] = (),
) -> tuple[BoundFile, ...]:
    """The card file first, then witnesses, liars, support modules, covered files, ``extra`` and the run's
    ``context`` (:func:`run_context`); no duplicates."""
    entries: list[tuple[Path, str]] = [(card.source, "card")]
    entries += [(root / w.file, "witness") for w in card.all_witnesses]
    entries += [(liars[name].path, "liar") for name in card.liars if name in liars]
    entries += [(path, "support") for path in support_files(root, [root / w.file for w in card.all_witnesses])]
    entries += [(root / f, "covers") for f in card.covers]
    entries += list(extra)
    seen: dict[Path, BoundFile] = {}
    for path, role in entries:
        key = path.resolve()
        if key not in seen:
            seen[key] = BoundFile(display_path(path, root), role, sha256_file(path))
    return tuple(seen.values()) + tuple(context)


def oracle_files(card: Card, oracle_dir: Path | None) -> tuple[tuple[Path, str], ...]:
    """The oracle manifest a card that requires the oracle is bound to (when the oracle code is present)."""
    if not any(r.startswith("oracle:") for r in card.requires):
        return ()
    return ((resolve_oracle_dir(oracle_dir) / MANIFEST, "oracle"),)


# kvproof's generic witnesses, installed with it (a project's witness modules import the claims they use):
# a witness module that imports one of them is bound to all of them (the claims and the checks they make)
GENERIC_WITNESSES = ("harness.targets.claims", "harness.targets.judge")
GENERIC_FILES = tuple(Path(__file__).resolve().parent / "targets" / f"{m.split('.')[-1]}.py" for m in GENERIC_WITNESSES)


def generic_support(witness_file: Path) -> list[Path]:
    """:data:`GENERIC_FILES` when ``witness_file`` imports one of :data:`GENERIC_WITNESSES` (read with ast), else []."""
    tree = parse_module(witness_file) if witness_file.is_file() else ""
    if isinstance(tree, str):
        return []
    names = [a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module and not n.level]
    if any(n == g or n.startswith(g + ".") for n in names for g in GENERIC_WITNESSES):
        return list(GENERIC_FILES)
    return []


def support_files(root: Path, witness_files: list[Path]) -> list[Path]:
    """Modules that shape a witness run besides the witness module itself, sorted.

    Every ``conftest.py`` from the project root down to each witness's
    folder (pytest loads them all), the non-test ``*.py`` modules in the
    witness's own folder (helpers it imports, e.g. ``witnesses/synthetic.py``),
    and kvproof's generic witness modules when the witness imports them
    (:func:`generic_support`; outside the project, shown with their full path).
    """
    found: set[Path] = set()
    root = root.resolve()
    for file in witness_files:
        folder = file.resolve().parent
        for d in [folder, *folder.parents]:
            if (d / "conftest.py").is_file():
                found.add(d / "conftest.py")
            if d == root or root not in d.parents:
                break
        if folder.is_dir():
            found.update(
                p for p in folder.glob("*.py") if not p.name.startswith("test_") and p.resolve() != file.resolve()
            )
        found.update(generic_support(file))
    return sorted(found)
