"""Which files a card's verdict is bound to, with their sha256.

A verdict holds for the exact bytes it was computed on: the card itself, its
witness modules, the liar modules its liars live in, the support modules of
its witnesses (every ``conftest.py`` pytest loads for them, and the other
non-test modules beside them, such as ``witnesses/synthetic.py``), the
pytest configuration files in their folders, and its covered files; and what
decides the numbers without being a file of the project
(:func:`run_context`): the weights file (by its sha256), the settings
(every ``KVPROOF_*`` variable that is not a location or a process detail,
and the numerics line of the implementation) and the environment
(:func:`environment`: the interpreter's and the libraries' versions, and the
variables outside ``KVPROOF_*`` that change numbers or what runs).

That much is known before anything runs. After the run, every file of the
project its witness processes actually read (honest and liar processes:
:mod:`harness.execute.reads`) joins the binding (:func:`read_files`), with a
marker saying the read-set was recorded (:data:`READS_PATH`). Later (ledger,
``status``, ``--changed``, ``--rerun-failed``) a verdict is STALE or
replayable by comparing its recorded binding with the same binding now
(:func:`rebind`: the declared files and environment as they are now, the
files it read then hashed again); nothing here decides that.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import platform
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from harness.files import sha256_file
from harness.liars import LiarSite
from harness.oracle.store import MANIFEST, current_weights, resolve_oracle_dir
from harness.select.cards import Card, display_path
from harness.select.refs import parse_module

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
        "KVPROOF_REPRO_DIR",  # where reproductions of failures are written
        "KVPROOF_APPLIED",  # set inside a witness process once a liar or mutant is patched in
    }
)


# The environment a verdict is bound to besides KVPROOF_*: variables that change the numbers (BLAS and OpenMP
# threads, numpy's CPU dispatch, the C compiler and its flags the kernel is built with) or what Python runs
# (PYTHONPATH, PYTHONOPTIMIZE strips asserts, PYTHONWARNINGS can make a warning an error, ...), by name prefix
ENV_PREFIXES = (
    "OMP_",
    "GOMP_",
    "KMP_",
    "OPENBLAS_",
    "GOTO_",
    "MKL_",
    "BLIS_",
    "VECLIB_",
    "NUMEXPR_",
    "NPY_",
    "NUMPY_",
    "PYTHON",
    "HYPOTHESIS_",
    "TORCH_",
    "CUBLAS_",
    "CUDA_",
)
ENV_NAMES = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES"})
ENV_NAMES |= {"CC", "CFLAGS", "CPPFLAGS", "LDFLAGS"}
# PYTHON* variables that are process details, never numbers (the runner sets its own for witness processes)
ENV_NOT_NUMERICS = frozenset(
    {
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONPYCACHEPREFIX",
        "PYTHONFAULTHANDLER",
        "PYTHONBREAKPOINT",
        "PYTHONSTARTUP",
        "PYTHONINSPECT",
        "PYTHONPROFILEIMPORTTIME",
        "PYTHONTRACEMALLOC",
        "PYTHONHISTFILE",
    }
)
LIBRARIES = ("numpy", "hypothesis", "pytest")  # always bound by version, with the interpreter's
READS_PATH = "(read-set: the project files the witness processes read)"  # the marker of a recorded read-set
PYTEST_CONFIGS = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
# folders of a project that hold no input of a verdict: state, caches derived from bound inputs, outputs
NOT_INPUTS = (".git", ".cache", ".hypothesis", ".pytest_cache")
NOT_RECORDED = "bound before kvproof recorded what witnesses read; rerun"
NOT_REPORTED = "a witness process did not report what it read; rerun"


@dataclass(frozen=True)
class BoundFile:
    path: str  # relative to the project root when inside it
    role: str  # card | witness | liar | support | config | covers | oracle | weights | settings | environment
    # | read (a project file a witness process read) | reads (the read-set marker, READS_PATH)
    sha256: str | None  # None: the file is missing (the marker: a process did not report what it read)


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
    numerics line (:func:`harness.record.provenance.numerics`)."""
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
    """What every card of a run is bound to besides its files: the settings, the environment
    (:func:`environment`) and, for a project whose ``impl`` loads model weights, the weights file it would
    load now (missing: sha256 None)."""
    text = settings_text(numerics, environ, declared)
    out = [BoundFile(SETTINGS_PATH, "settings", hashlib.sha256(text.encode("utf-8")).hexdigest())]
    out += environment(root, environ)
    if (root / "impl" / "model" / "weights.py").is_file():
        try:
            path, sha = current_weights()
            out.append(BoundFile(display_path(path, root), "weights", sha))
        except Exception as exc:  # NOTE: the project's own WeightsError; its witnesses say what is wrong
            out.append(BoundFile(f"(weights: {type(exc).__name__})", "weights", None))
    return tuple(out)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def environment(root: Path, environ: Mapping[str, str] | None = None) -> list[BoundFile]:
    """The environment a verdict is bound to, role ``environment``: ``(python CPython 3.11.7)``, ``(library
    numpy 2.1.3)`` for numpy, Hypothesis, pytest and every dependency the project's ``pyproject.toml``
    declares (``[project] dependencies``), and ``(env NAME)`` (sha256 of its value) for each variable of
    ``environ`` named by :data:`ENV_PREFIXES` or :data:`ENV_NAMES` (not :data:`ENV_NOT_NUMERICS`).

    Not bound: every other variable (places, the terminal, the locale: binding them would make each shell a
    new binding) and ``-j``'s one-BLAS-thread-per-process cap, which the runner sets for witness processes.
    """
    env = os.environ if environ is None else environ
    names = sorted(
        k
        for k in env
        if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and k not in ENV_NOT_NUMERICS and not k.startswith("KVPROOF_")
    )
    shown = {k: k if _encodable(k) else ascii(k)[1:-1] for k in names}  # the ledger stores text, not surrogates
    return [*_libraries(root.resolve()), *(BoundFile(f"(env {shown[k]})", "environment", _sha(env[k])) for k in names)]


@functools.cache
def _libraries(root: Path) -> tuple[BoundFile, ...]:
    """(python ...) and (library NAME VERSION) entries; see :func:`environment`. Computed once per process."""
    names = dict.fromkeys([*LIBRARIES, *declared_dependencies(root)])
    python = f"(python {platform.python_implementation()} {platform.python_version()})"
    out = [BoundFile(python, "environment", _sha(python))]
    for name in names:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "not installed"
        except Exception:  # noqa: BLE001 - a broken distribution's metadata: bound as such, never an error
            version = "unreadable"
        label = f"(library {name} {version})"
        out.append(BoundFile(label, "environment", _sha(label)))
    return tuple(out)


def declared_dependencies(root: Path) -> list[str]:
    """The distribution names the project's ``pyproject.toml`` lists in ``[project] dependencies`` (normalized,
    lower case), in order; [] when it has none or the file does not read."""
    try:
        deps = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return []
    names = [m.group(0) for d in deps if isinstance(d, str) and (m := re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", d))]
    return [re.sub(r"[-_.]+", "-", n).lower() for n in names]


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
    entries += [(path, "config") for path in config_files(root, [root / w.file for w in card.all_witnesses])]
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
_HARNESS_DIR = Path(__file__).resolve().parents[1]
GENERIC_FILES = tuple(_HARNESS_DIR / "targets" / f"{m.split('.')[-1]}.py" for m in GENERIC_WITNESSES)
# the generic block-manager claims (cards TGT-BLOCKS*) and their protocol: bound the same way, on their own
GENERIC_BLOCK_WITNESSES = ("harness.targets.blockclaims", "harness.targets.blocks")
GENERIC_BLOCK_FILES = tuple(_HARNESS_DIR / "targets" / f"{m.split('.')[-1]}.py" for m in GENERIC_BLOCK_WITNESSES)


def generic_support(witness_file: Path) -> list[Path]:
    """:data:`GENERIC_FILES` when ``witness_file`` imports one of :data:`GENERIC_WITNESSES` (read with ast), and
    :data:`GENERIC_BLOCK_FILES` when it imports one of :data:`GENERIC_BLOCK_WITNESSES`; else []."""
    tree = parse_module(witness_file) if witness_file.is_file() else ""
    if isinstance(tree, str):
        return []
    names = [a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module and not n.level]
    found: list[Path] = []
    for modules, files in ((GENERIC_WITNESSES, GENERIC_FILES), (GENERIC_BLOCK_WITNESSES, GENERIC_BLOCK_FILES)):
        if any(n == g or n.startswith(g + ".") for n in names for g in modules):
            found += files
    return found


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


def config_files(root: Path, witness_files: list[Path]) -> list[Path]:
    """The pytest configuration files (:data:`PYTEST_CONFIGS`) in each witness's folder and every folder up to the
    project root, sorted: pytest takes its configuration from the nearest, so one created later changes what
    runs (the ones that exist are read, and so bound, anyway; a new one is then "newly bound")."""
    found: set[Path] = set()
    root = root.resolve()
    for file in witness_files:
        folder = file.resolve().parent
        for d in [folder, *folder.parents]:
            found.update(d / name for name in PYTEST_CONFIGS if (d / name).is_file())
            if d == root or root not in d.parents:
                break
    return sorted(found)


# ---------------------------------------------------------------- what the witness processes read


@dataclass(frozen=True)
class ReadScope:
    """Which files a witness process read that join a verdict's binding: those under ``root`` outside
    ``skip`` (the harness, the reports folder, :data:`NOT_INPUTS`); one in ``oracle`` (the oracle export) binds
    its manifest instead."""

    root: Path
    skip: tuple[Path, ...] = ()
    oracle: Path | None = None

    @classmethod
    def of(cls, root: Path, reports_dir: Path | None, oracle_dir: Path | None) -> ReadScope:
        root = root.resolve()
        skip = [_HARNESS_DIR, *(root / d for d in NOT_INPUTS)]  # the harness is not bound
        skip += [Path(os.environ[k]).resolve() for k in CACHE_VARS if os.environ.get(k)]
        if reports_dir is not None:
            skip.append(reports_dir.resolve())
        try:
            oracle = resolve_oracle_dir(oracle_dir).resolve()
        except Exception:  # noqa: BLE001 - no oracle code in this project: nothing read there is special
            oracle = None
        return cls(root, tuple(skip), oracle)


CACHE_VARS = ("KVPROOF_WEIGHTS_CACHE", "KVPROOF_KERNEL_CACHE", "KVPROOF_NODE_CACHE")  # derived from bound inputs


def read_files(
    bound: tuple[BoundFile, ...], reads: Iterable[str] | None, scope: ReadScope | None
) -> tuple[BoundFile, ...]:
    """``bound`` (what was bound before the run) with every file its witness processes read (``reads``, relative
    to the root) that is not bound already, role ``read``, hashed now; then the marker :data:`READS_PATH` (sha256
    None when ``reads`` is None: a process did not say what it read, and the verdict is never replayed).

    ``scope`` None: nothing is added, no marker (the verdict counts as bound without its read-set).
    """
    if scope is None:
        return bound
    if reads is None:
        return (*bound, BoundFile(READS_PATH, "reads", None))
    have = {b.path for b in bound}
    added: dict[str, BoundFile] = {}
    for rel in sorted(set(reads)):
        path = (scope.root / rel).resolve()
        if not _encodable(rel):  # a file name the ledger cannot store: the read-set is not complete
            return (*bound, BoundFile(READS_PATH, "reads", None))
        if scope.oracle is not None and path.is_relative_to(scope.oracle):
            path, role = scope.oracle / MANIFEST, "oracle"
        elif any(path.is_relative_to(d) for d in scope.skip):
            continue
        else:
            role = "read"  # a file outside the project keeps its absolute path (``root / path`` is that path)
        shown = display_path(path, scope.root) if role == "oracle" else rel
        if shown not in have and shown not in added:
            added[shown] = BoundFile(shown, role, sha256_file(path))
    marker = BoundFile(READS_PATH, "reads", _sha("\n".join(sorted(added))))
    return (*bound, *added.values(), marker)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def rebind(
    now: tuple[BoundFile, ...],
    recorded: Iterable[Mapping[str, str | None]],
    root: Path,
    memo: dict[Path, str | None] | None = None,
) -> tuple[BoundFile, ...]:
    """A recorded binding as it would be now: ``now`` (what the card binds before a run, computed now) with the
    files the witness processes read then (role ``read``, and an oracle manifest bound through a read) hashed
    again, and the recorded marker. Equal :func:`digest` to the recorded one: nothing it depends on changed.
    ``memo``: sha256 already computed in this process (``--changed`` tries several verdicts of many cards)."""
    memo = {} if memo is None else memo
    have = {b.path for b in now}
    out = list(now)
    for f in recorded:
        path, role = str(f["path"]), str(f["role"])
        if path in have:
            continue
        if role == "reads":
            out.append(BoundFile(path, role, f.get("sha256")))
        elif role in ("read", "oracle"):
            file = root / path
            if file not in memo:
                memo[file] = sha256_file(file)
            out.append(BoundFile(path, role, memo[file]))
    return tuple(out)


def unrecorded(recorded: Iterable[Mapping[str, str | None]]) -> str:
    """Why a recorded binding does not cover everything its verdict depended on: :data:`NOT_RECORDED` (no
    read-set: an older kvproof), :data:`NOT_REPORTED` (a process did not say), or "" (it does)."""
    marker = next((f for f in recorded if f["role"] == "reads"), None)
    if marker is None:
        return NOT_RECORDED
    return NOT_REPORTED if marker.get("sha256") is None else ""
