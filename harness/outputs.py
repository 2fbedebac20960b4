"""Where the harness writes, checked before anything runs: no output replaces an input, a report or the ledger.

``run --json PATH``, ``compare --json/--markdown/--html PATH`` and
``--reports DIR`` are checked here (:func:`check_file`, :func:`check_reports`)
before the first witness starts or the first reference is read. A file
output is refused (UsageError, exit 2, one paragraph naming the option, the
path, why and the fix) when it would land

- inside a protected folder: the cards folder, ``impl/``, ``witnesses/``,
  ``harness/``, ``obligations/`` or ``.git/`` of the project or of this
  checkout, or a dated report folder (a report is never rewritten);
- on the ledger (``ledger.sqlite`` and its journal files);
- on an existing source file (``.py``, ``.c``, ``.yaml``, ``.toml``, ...);
- on any other existing file that is not a previous output of the same kind:
  a verdicts document is recognised by its ``header.schema``, a comparison
  JSON by its ``schema``, the Markdown and HTML of ``compare`` by the marker
  line this module writes into them (:data:`MARKDOWN_MARKER`,
  :data:`HTML_MARKER`).

``--force`` lifts only the last rule; nothing lets an output replace code,
cards, a report or the ledger. ``--reports`` must not be the cards folder or
inside it (its report copies of the cards would load as duplicate cards),
nor inside another protected folder.

:func:`write_atomic` writes a file the way every output is written: a
temporary file in the same folder, then ``os.replace``, so a reader sees the
old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InputRefused, UsageError
from harness.inputs import DOCUMENT_LIMIT, read_bytes
from harness.project import KVPROOF_HOME

PROTECTED = ("impl", "witnesses", "harness", "obligations", ".git")  # folders of the project and of this checkout
SOURCE_SUFFIXES = frozenset(
    ".py .pyi .pyx .c .h .cc .cpp .so .yaml .yml .toml .cfg .ini .sh .sqlite .gguf .j2 .lock".split()
)
LEDGER_NAME = "ledger.sqlite"
_REPORT_FOLDER = re.compile(r"\d{4}-\d\d-\d\dT|latest$|\.partial-")  # harness.report.folder's names
MARKDOWN_MARKER = "<!-- kvproof compare: written by run_obligations.py compare --markdown, which may overwrite it -->"
HTML_MARKER = "<!-- kvproof compare: written by run_obligations.py compare --html, which may overwrite it -->"

VERDICTS = "verdicts"  # run --json: obligations/verdicts.schema.json
COMPARE_JSON = "compare-json"  # compare --json
MARKDOWN = "markdown"  # compare --markdown
HTML = "html"  # compare --html
_WHAT = {
    VERDICTS: "a verdicts document kvproof wrote (header.schema 'kvproof.verdicts')",
    COMPARE_JSON: "a comparison kvproof wrote (schema 'kvproof.compare')",
    MARKDOWN: "a Markdown comparison kvproof wrote (its first line is kvproof's marker)",
    HTML: "an HTML comparison kvproof wrote (it carries kvproof's marker)",
}


@dataclass(frozen=True)
class Places:
    """The inputs an output must not replace: the project root, its cards folder, the reports folder."""

    root: Path
    cards_dir: Path
    reports_dir: Path

    def protected(self) -> list[tuple[Path, str]]:
        """(folder, how to name it) for every protected folder, resolved; the cards folder first."""
        out = [(self.cards_dir.resolve(), "the cards folder")]
        for base in dict.fromkeys((self.root.resolve(), KVPROOF_HOME.resolve())):
            out += [(base / name, f"{name}/ of {base}") for name in PROTECTED]
        return out


def target(path: Path) -> Path:
    """The file a write to ``path`` replaces: its folder resolved (symlinks followed), its own name kept.

    NOTE: ``os.replace`` onto a symlink replaces the link, not the file it points at.
    """
    path = Path(path).expanduser()
    path = path if path.is_absolute() else Path.cwd() / path
    return path.parent.resolve() / path.name


def check_file(path: Path, option: str, kind: str, places: Places, *, force: bool = False) -> Path:
    """The file ``path`` (given as ``option``, e.g. ``--json='x'``) may be written as an output of ``kind``;
    returns it (see :func:`target`). Raises UsageError naming the option, the path, why and the fix."""
    real = target(path)
    fix = "give a path outside the project's code, cards and reports, e.g. in the current folder"

    def refuse(why: str, how: str = fix) -> None:
        raise UsageError(f"{option}: refused: {why}, so writing it would replace an input of kvproof; {how}")

    for folder, name in places.protected():
        if real == folder or real.is_relative_to(folder):
            refuse(f"{real} is inside {name}")
    reports = places.reports_dir.resolve()
    if real == reports:
        refuse(f"{real} is the reports folder itself (--reports)", "give the file another path than --reports")
    if real.parent == reports and real.name.startswith(LEDGER_NAME):
        refuse(f"{real} is the ledger (the history of every run) or one of its journal files")
    if (
        real.is_relative_to(reports)
        and real.parent != reports
        and _REPORT_FOLDER.match(real.relative_to(reports).parts[0])
    ):
        refuse(f"{real} is inside a report folder of {reports}/ (a report is never rewritten)")
    if not (real.exists() or real.is_symlink()):
        return real
    if real.is_dir():
        return real  # the caller says "is a folder" in its own words
    if real.suffix.lower() in SOURCE_SUFFIXES:
        refuse(f"{real} is an existing source file ({real.suffix})")
    if not force and not is_previous_output(real, kind):
        raise UsageError(
            f"{option}: refused: {real} exists and is not {_WHAT[kind]}, so writing would replace it; give a "
            "new path, move the file away, or add --force to replace it"
        )
    return real


def is_previous_output(path: Path, kind: str) -> bool:
    """Whether the existing ``path`` is a regular file this kind of output wrote (so it may be replaced)."""
    try:
        head = read_bytes(path, DOCUMENT_LIMIT) if kind in (VERDICTS, COMPARE_JSON) else _head(path)
    except (InputRefused, OSError):
        return False
    if kind in (VERDICTS, COMPARE_JSON):
        try:
            data = json.loads(head)
        except ValueError:
            return False
        if not isinstance(data, dict):
            return False
        if kind == VERDICTS:
            header = data.get("header")
            return isinstance(header, dict) and header.get("schema") == "kvproof.verdicts"
        return data.get("schema") == "kvproof.compare"
    text = head.decode("utf-8", errors="replace")
    if kind == MARKDOWN:
        return text.split("\n", 1)[0].strip() == MARKDOWN_MARKER
    return HTML_MARKER in text


def _head(path: Path, size: int = 4096) -> bytes:
    """The first ``size`` bytes of the regular file ``path`` (InputRefused for anything else)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputRefused(path, "is not a regular file")
        return os.read(fd, size)
    finally:
        os.close(fd)


def check_reports(folder: Path, source: str, places: Places) -> None:
    """``--reports`` (named ``source``) must not be the cards folder or inside it, nor inside another protected
    folder: its report folders hold copies of the cards, which would load as duplicate cards."""
    real = folder.resolve()
    cards = places.cards_dir.resolve()
    for prot, name in places.protected():
        if real == prot or real.is_relative_to(prot):
            why = (
                "the reports would hold copies of every card (cards/ in each report folder), which the next "
                "run loads as duplicate card ids"
                if prot == cards
                else "it holds code or cards kvproof reads, never its output"
            )
            raise UsageError(
                f"{source}={str(folder)!r}: refused: {real} is {'' if real == prot else 'inside '}{name}; {why}. "
                "Give a folder of its own, e.g. --reports reports (the default)"
            )


def check_distinct(outputs: Iterable[tuple[str, Path]]) -> None:
    """Two outputs of one command must not be the same file (the second would replace the first)."""
    seen: dict[Path, str] = {}
    for option, path in outputs:
        if path in seen:
            raise UsageError(f"{option} and {seen[path]} name the same file {path}; give each its own path")
        seen[path] = option


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``. A character
    UTF-8 cannot encode (a lone surrogate from a hand-edited input) is written as its escape, never raised."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
