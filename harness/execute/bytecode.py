"""Bytecode a witness process could load for a source it no longer matches: dropped before the run starts.

Python trusts a ``.pyc`` when the source's modification time (whole
seconds) and size equal the ones recorded in it; pytest's rewritten test
modules are checked the same way. A file edited within the second its
bytecode was written, to the same size (``x * k`` -> ``x / k``, or one
inserted line for another of the same length), keeps its stale bytecode:
the witness would run the old code while the verdict is bound to the new
bytes. So before the first witness process of a run starts, every bytecode
file of the project in the run's bytecode folder (``<root>/.cache/pycache``,
:func:`harness.execute.watch.pycache_dir`) whose own write time is not
strictly after the second its source was last modified in is removed, and
Python compiles the source again.

Only the project's mirror inside the prefix is looked at (the installed
libraries' bytecode is left alone): a few hundred ``stat`` calls. Imports
nothing of the harness.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

SKIP = {".venv", ".cache", ".git", "node_modules"}  # folders of the project that hold no source it imports


def source_of(pyc: Path, mirror: Path, root: Path) -> Path | None:
    """The source ``pyc`` (under ``mirror``, the prefix's copy of ``root``) was compiled from; None if none."""
    name = pyc.name.split(".", 1)[0]
    folder = pyc.parent
    if folder.name == "__pycache__":  # pytest's rewritten modules, or a prefix-less layout
        folder = folder.parent
    try:
        rel = folder.relative_to(mirror)
    except ValueError:
        return None
    return root / rel / f"{name}.py"


def drop_ambiguous(prefix: Path, root: Path) -> int:
    """Remove every ``.pyc`` of ``root``'s sources under ``prefix`` that may be stale; how many were removed."""
    root = Path(root).resolve()
    mirror = Path(prefix) / root.relative_to(root.anchor)
    if not mirror.is_dir():
        return 0
    dropped = 0
    for folder, dirs, files in os.walk(mirror):
        if Path(folder) == mirror:
            dirs[:] = [d for d in dirs if d not in SKIP]
        for name in files:
            if not name.endswith(".pyc"):
                continue
            pyc = Path(folder) / name
            source = source_of(pyc, mirror, root)
            try:
                written, modified = pyc.stat().st_mtime, source.stat().st_mtime if source else None
            except OSError:
                continue
            if modified is not None and written < math.floor(modified) + 1:
                pyc.unlink(missing_ok=True)
                dropped += 1
    return dropped
