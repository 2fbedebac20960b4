"""Where things are: the kvproof checkout, the project under proof, the card schema.

Two roots, kept apart on purpose:

- :data:`KVPROOF_HOME`, the checkout this harness runs from (``harness/``,
  ``run_obligations.py``, ``.cache/`` with the oracle export and the
  weights cache). Witness processes get it on ``PYTHONPATH`` so they can
  import the harness plugin.
- :func:`project_root`, the project whose cards, witnesses and impl are
  run: ``KVPROOF_ROOT`` when set (tests point it at a fixture project),
  else discovered from the working directory upward: the nearest folder
  whose ``pyproject.toml`` has a ``[tool.kvproof]`` table, or that holds an
  ``obligations/`` folder (so kvproof runs on any project, from anywhere
  inside it). Paths in cards are relative to it.

And how the user called kvproof (:func:`program`): every message that names a
command to type says it the same way.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from harness.errors import UsageError

KVPROOF_HOME = Path(__file__).resolve().parents[1]
SCHEMA_PATH = KVPROOF_HOME / "obligations" / "card.schema.json"


ROOT_MARKERS = "a pyproject.toml with a [tool.kvproof] table, or an obligations/ folder"


def declares_kvproof(pyproject: Path) -> bool:
    """True when ``pyproject`` has a ``[tool.kvproof]`` table; UsageError naming the file when it is not TOML."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(
            f"{pyproject}: cannot be read as TOML ({exc}); fix it, or set KVPROOF_ROOT to the project root"
        ) from None
    return isinstance(data.get("tool", {}).get("kvproof"), dict)


def find_root(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` that is a kvproof project (:data:`ROOT_MARKERS`), else None."""
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and declares_kvproof(pyproject):
            return folder
        if (folder / "obligations").is_dir():
            return folder
    return None


def project_root(cwd: Path | None = None) -> Path:
    """The project root: ``KVPROOF_ROOT`` (which must be a folder), else discovered from ``cwd``.

    ``cwd`` defaults to the working directory; the nearest folder at or
    above it with a ``[tool.kvproof]`` table in its ``pyproject.toml`` or an
    ``obligations/`` folder is the root. Raises UsageError when
    ``KVPROOF_ROOT`` is not a folder or nothing is found.
    """
    env = os.environ.get("KVPROOF_ROOT")
    if env:
        root = Path(env).expanduser().resolve()
        if not root.is_dir():
            raise UsageError(f"KVPROOF_ROOT={env!r} is not a folder; point it at the project root or unset it")
        return root
    try:
        start = (cwd if cwd is not None else Path.cwd()).resolve()
    except OSError as exc:  # the working directory was removed
        raise UsageError(
            f"the working directory cannot be read ({exc}); cd into the project or set KVPROOF_ROOT"
        ) from None
    found = find_root(start)
    if found is None:
        raise UsageError(
            f"no kvproof project at or above {start}: looked for {ROOT_MARKERS}; run from inside the project, "
            "add a [tool.kvproof] table to its pyproject.toml, or set KVPROOF_ROOT=PATH"
        )
    return found


def program() -> str:
    """How the user called us: ``kvproof`` (the console script, ``pip install -e .``), else ``run_obligations.py``.

    The errors (``kvproof: error: ...``), the usage lines and every hint that names a command to type
    (``kvproof validate`` lists every problem) say it this way; the two are the same command.
    """
    return "kvproof" if Path(sys.argv[0]).name == "kvproof" else "run_obligations.py"
