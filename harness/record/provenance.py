"""The run header: when, on what commit and machine, with which libraries and settings.

Everything here is gathered once per run, before any witness starts; every
failure to learn something is recorded as None, never raised.
"""

from __future__ import annotations

import datetime as _dt
import platform
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.record.document import GitState, Host


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(root: Path, bound: Iterable[str] = ()) -> GitState:
    """The commit and whether the tree is dirty: a tracked file modified, or a file a verdict is bound to
    (``bound``, paths relative to ``root``) that git does not track. None for what git could not tell."""
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no") if commit else None
    if status == "":
        inside = sorted(p for p in bound if not p.startswith(("/", "(")) and (root / p).is_file())
        for i in range(0, len(inside), 200):  # NOTE: a bounded command line
            untracked = _git(root, "ls-files", "--others", "--exclude-standard", "--", *inside[i : i + 200])
            if untracked is None or untracked:
                status = untracked
                break
    return GitState(commit, bool(status) if status is not None else None)


def library_versions() -> dict[str, Any]:
    """python, numpy, pytest, hypothesis versions and numpy's BLAS (name, version)."""
    from importlib import metadata

    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("numpy", "pytest", "hypothesis"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    out["blas"] = None
    try:
        import numpy

        cfg = numpy.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        out["blas"] = " ".join(str(blas.get(k)) for k in ("name", "version") if blas.get(k)) or None
    except Exception:  # NOTE: show_config's shape differs across numpy versions; best effort
        pass
    return out


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Provenance:
    """Where and when a run happened: start time, commit, machine, library versions."""

    started: str
    git: GitState
    host: Host
    versions: dict[str, Any]


def gather(root: Path, bound: Iterable[str] = ()) -> Provenance:
    """Everything about the run's surroundings, gathered now (before any witness starts); ``bound``: the
    paths the run's verdicts are bound to (an untracked one makes the tree dirty)."""
    return Provenance(
        utc_now(),
        git_state(root, bound),
        Host(socket.gethostname(), platform.platform(), platform.machine()),
        library_versions(),
    )


def numerics(root: Path) -> str | None:
    """The numerics path of the implementation under proof, when it names one; None otherwise.

    A project whose ``impl/linear.py`` defines ``numerics_path()`` (this
    repository's impl does: which kernels compute every row) gets that line
    in the report header, so a reader knows which path produced the
    verdicts. Best effort: any failure is None, never an error.
    """
    if not (root / "impl" / "linear.py").is_file():
        return None
    import importlib

    try:
        module = importlib.import_module("impl.linear")
        if Path(module.__file__).resolve().parent.parent != root.resolve():
            return None  # another project's impl on the path
        return str(module.numerics_path())
    except Exception:  # NOTE: a broken impl must still get its verdicts; the witnesses will say what is wrong
        return None


def command_line(argv: list[str]) -> str:
    """The command as the user typed it, for the report header and the replay hints."""
    return shlex.join([Path(sys.argv[0]).name, *argv])
