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

And how the user called kvproof (:func:`program`: the name in ``kvproof: error:``
and usage lines); every hint that names a command to type says it with
:func:`command`, which runs as printed from the working directory, and every
path a message prints goes through :func:`shown_path` (relative to the working
directory inside the project, else absolute).
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


# ---------------------------------------------------------------- what the terminal prints


def _home_parent(path: Path) -> Path:
    """``path`` absolute with its folders resolved but not its last part (``.venv/bin/python`` stays the venv's)."""
    path = Path(os.path.abspath(path))
    return path.parent.resolve() / path.name


def shown_path(path: Path | str, root: Path | None = None, *, cwd: Path | None = None) -> str:
    """A path as a message prints it: relative to the working directory when that is inside the project
    ``root`` (default :func:`project_root`) and the path is too (``../reports/2026-.../index.html`` from a
    subfolder), so it can be typed or clicked from there; else absolute. Every path the terminal names goes
    through here (the project's files, the report folder, the interpreter in a command: :func:`command`)."""
    target = _home_parent(Path(path))
    try:
        here = (cwd if cwd is not None else Path.cwd()).resolve()
        base = (root if root is not None else project_root(here)).resolve()
    except (OSError, UsageError):  # no working directory, or no project around it: absolute says it everywhere
        return str(target)
    if not here.is_relative_to(base) or not target.is_relative_to(base):
        return str(target)
    return Path(os.path.relpath(target, here)).as_posix()


def _typed(path: Path, absolute: bool = False, cwd: Path | None = None) -> str:
    """An executable's path as typed from the working directory (or ``cwd``; ``./x`` rather than ``x``, which
    PATH would look up; the absolute path with ``absolute``), quoted for the shell when it needs it."""
    import shlex

    shown = str(path.absolute()) if absolute else shown_path(path, KVPROOF_HOME, cwd=cwd)
    if "/" not in shown:
        shown = f"./{shown}"
    return shlex.quote(shown)


def runner(absolute: bool = False, at: Path | None = None) -> str:
    """The start of a command that runs as printed from the working directory, whatever PATH holds (with
    ``absolute``, from any directory: for a hint that changes directory first; with ``at``, from that folder:
    for what a run records, which must not depend on where it was started):

    - ``kvproof`` when the user called the console script from PATH, or when this install's own ``kvproof``
      (beside this interpreter) is on PATH;
    - the console script's path (``.venv/bin/kvproof``) when they called it by path;
    - else this interpreter and run_obligations.py by path, relative to the working directory inside the
      checkout (``.venv/bin/python run_obligations.py``; ``../.venv/bin/python ../run_obligations.py`` from a
      subfolder), absolute outside it.
    """
    import shutil

    on_path = shutil.which("kvproof")
    here_bin = _home_parent(Path(sys.executable)).parent
    called = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if called is not None and called.name == "kvproof":
        if on_path and _home_parent(Path(on_path)) == _home_parent(called):
            return "kvproof"
        return _typed(called, absolute, at)
    if on_path and _home_parent(Path(on_path)).parent == here_bin:
        return "kvproof"
    script = KVPROOF_HOME / "run_obligations.py"
    if not script.is_file():  # an installed kvproof without its checkout: the console script is the way in
        return "kvproof"
    return f"{_typed(Path(sys.executable), absolute, at)} {_typed(script, absolute, at).removeprefix('./')}"


def recorded_runner() -> str:
    """:func:`runner` as typed from the project root: for text a run records (verdict reasons, replay commands),
    which must not depend on the folder the run was started from."""
    try:
        return runner(at=project_root())
    except UsageError:
        return runner()


def command(args: str = "", at: Path | None = None) -> str:
    """``args`` (``run FX-ADD --profile ci``) as a whole command that runs as printed from the working directory
    (:func:`runner`): what every hint that names a command to type says (the terminal, the reports, verdict
    reasons, mutation and replay hints)."""
    return f"{runner(at=at)} {args}".rstrip()
