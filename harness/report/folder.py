"""Publish one run: the dated report folder, the ledger row, the ``latest`` link.

``reports/<UTC date-time>/`` (e.g. ``2025-11-29T13-38-22Z``) holds
``index.html``, ``verdicts.json``, ``verdicts.md``, ``junit.xml`` and
``cards/`` (every card file exactly as the run loaded it, with
``cards/index.json``: id, path, sha256, version, file).

Order of work, so that an interrupt (Ctrl-C, SIGTERM, a kill) never leaves
half a run anywhere:

1. every file is written into ``reports/.partial-<name>-<pid>/``;
2. one ledger transaction inserts the run; inside it, just before COMMIT,
   the folder is renamed to its final name (``os.rename``: atomic);
3. ``reports/latest`` is pointed at it (a new symlink renamed over the old).

Interrupted in 1 or 2 before the rename: the ledger rolls back and the
partial folder is removed (or, after a SIGKILL, left hidden under its
``.partial-`` name and removed by the next run). Interrupted between the
rename and COMMIT: the folder is moved out of the way again, so the ledger
and the folders agree. A folder under its final name is always complete.

When the ledger cannot record the run (a lock held too long, a full disk,
an I/O error, a damaged file: :class:`harness.errors.LedgerError`), the
complete folder is kept as ``reports/<name>.unrecorded/`` and
:class:`harness.errors.RunNotRecorded` says where: nothing measured is
lost, and ``latest`` and the ledger still agree.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.compare import render as compare_report
from harness.errors import LedgerError, RunNotRecorded
from harness.execute.orphans import pid_alive
from harness.ledger.history import FILENAME, Ledger, PastVerdict
from harness.record.document import RunDocument
from harness.report import html, jsonfile, junit, markdown
from harness.report.view import HISTORY_LIMIT, build_view
from harness.select.cards import card_bytes

PARTIAL = ".partial-"
REPRO = "repro"  # the report folder's reproductions of failures (harness.targets.replay)
UNRECORDED = ".unrecorded"  # suffix of a complete report folder whose run the ledger could not record
LATEST = "latest"
FILES = ("verdicts.json", "verdicts.md", "junit.xml", "index.html")
CARDS = "cards"  # the card files as run, and cards/index.json


def folder_name(started: str) -> str:
    """``2025-11-29T13:38:22Z`` -> ``2025-11-29T13-38-22Z`` (no colons: portable, sorts by time)."""
    return re.sub(r"[^0-9A-Za-z.-]", "-", started.replace(":", "-"))


def _free_name(reports: Path, base: str) -> str:
    name, n = base, 1
    while (reports / name).exists():
        n += 1
        name = f"{base}.{n}"
    return name


def sweep_partials(reports: Path) -> list[Path]:
    """Remove ``.partial-*`` folders left by runs that were killed (their process is gone)."""
    removed = []
    for path in reports.glob(PARTIAL + "*"):
        m = re.search(r"-(\d+)$", path.name)
        if path.is_dir() and m and not pid_alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def write_cards(folder: Path, doc: RunDocument, root: Path | None = None) -> None:
    """``cards/``: each card file exactly as the run loaded it, and ``cards/index.json`` (id, path, sha256, file).

    The bytes come from :func:`harness.select.cards.card_bytes` (kept at load time), else from the card file
    when its sha256 still equals the card's fingerprint; a card whose bytes are neither is listed with
    ``file: null`` and why, never with other bytes than it was judged against.
    """
    import hashlib
    import json

    out = folder / CARDS
    out.mkdir()
    index, used = [], set()
    for card in doc.cards:
        raw = card_bytes(card.fingerprint)
        if raw is None and root is not None:
            try:
                disk = (root / card.card_path).read_bytes()
            except OSError:
                disk = None
            if disk is not None and hashlib.sha256(disk).hexdigest() == card.fingerprint:
                raw = disk
        entry = {"id": card.id, "card_path": card.card_path, "sha256": card.fingerprint, "version": card.version}
        if raw is None:
            index.append({**entry, "file": None, "why": "the card file changed before the report was written"})
            continue
        name = Path(card.card_path).name
        if name in used:  # two cards from files of the same name in different folders
            name = f"{card.id}-{name}"
        used.add(name)
        (out / name).write_bytes(raw)
        index.append({**entry, "file": name})
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")


def write_files(
    folder: Path, doc: RunDocument, view: Mapping[str, Any], root: Path | None = None, comparison: Any = None
) -> None:
    """The four report files (the document's JSON form, three renderings of its view) and the cards as run;
    with a --baseline comparison also compare.json and compare.md. Texts were made safe in the document
    (:func:`harness.record.build.made_safe`); a character that still cannot be encoded is written as its escape."""
    folder.mkdir(parents=True)
    write_cards(folder, doc, root)
    if comparison is not None:
        import json

        (folder / "compare.json").write_text(
            json.dumps(compare_report.to_json(comparison), indent=2, ensure_ascii=False) + "\n",
            encoding="utf-8",
            errors="backslashreplace",  # a baseline's text (a hand-edited verdicts.json) may hold a lone surrogate
        )
        (folder / "compare.md").write_text(
            compare_report.to_markdown(comparison), encoding="utf-8", errors="backslashreplace"
        )
    (folder / "verdicts.json").write_text(jsonfile.dumps(doc.to_json()), encoding="utf-8", errors="backslashreplace")
    (folder / "verdicts.md").write_text(markdown.render(view), encoding="utf-8", errors="backslashreplace")
    (folder / "junit.xml").write_text(junit.render(view), encoding="utf-8", errors="backslashreplace")
    (folder / "index.html").write_text(html.render(view), encoding="utf-8", errors="backslashreplace")


def point_latest(reports: Path, name: str) -> str:
    """``reports/latest`` -> ``name`` (symlink swapped atomically), else ``reports/latest.html`` redirecting.

    Folder names sort by start time; a run never moves ``latest`` back to an
    older one (two runs may overlap and finish in either order).

    Returns what was written (``latest`` or ``latest.html``).
    """
    link = reports / LATEST
    tmp = reports / f".{LATEST}-{os.getpid()}"
    try:
        if link.is_symlink() and os.readlink(link) > name:
            return LATEST  # a run that started later has already published: latest stays the newest
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(name, tmp, target_is_directory=True)
        os.replace(tmp, link)
        return LATEST
    except (OSError, NotImplementedError):
        try:
            tmp.unlink()
        except OSError:
            pass
        page = reports / f"{LATEST}.html"
        page.write_text(html.redirect_page(f"{name}/index.html"), encoding="utf-8")
        return page.name


def publish(
    reports: Path,
    doc: RunDocument,
    root: Path,
    ledger: Ledger | None = None,
    *,
    comparison: Any = None,
    extra: Path | None = None,
) -> Path:
    """Write the dated report folder for ``doc`` and record the run in the ledger; returns the folder.

    ``ledger`` defaults to ``reports/ledger.sqlite``. History shown in the
    report comes from that ledger as it was before this run. ``extra``: a
    folder of files the run wrote (its reproductions), moved in as ``repro/``.
    """
    reports.mkdir(parents=True, exist_ok=True)
    sweep_partials(reports)
    own = ledger is None
    unusable: LedgerError | None = None  # the ledger failed before the run could be recorded: keep the report
    past: dict[str, Sequence[PastVerdict]] = {}
    trends: dict[str, Any] = {}
    try:
        ledger = ledger or Ledger(reports / FILENAME)
        ids = [c.id for c in doc.cards]
        past = ledger.histories(ids, limit=HISTORY_LIMIT - 1)
        trends = {cid: ledger.trend(cid, HISTORY_LIMIT - 1) for cid in ids}
    except LedgerError as exc:
        unusable = exc
    try:
        base = folder_name(doc.header.started)
        for _attempt in range(5):
            name = _free_name(reports, base)
            final = reports / name
            tmp = reports / f"{PARTIAL}{name}-{os.getpid()}"
            moved = False

            def move_into_place(tmp: Path = tmp, final: Path = final) -> None:
                nonlocal moved
                os.rename(tmp, final)  # NOTE: fails if another run took the name meanwhile; we retry
                moved = True

            retry = False
            try:
                write_files(
                    tmp,
                    doc,
                    build_view(
                        doc, past, root=root, report_dir=name, trends=trends, comparison=comparison, report_path=final
                    ),
                    root,
                    comparison,
                )
                if extra is not None and extra.is_dir():
                    shutil.copytree(extra, tmp / REPRO)
                if unusable is not None:
                    raise unusable
                ledger.record(doc, report_dir=name, before_commit=move_into_place)
            except BaseException as exc:
                if moved:  # COMMIT did not happen: take the folder back out of sight
                    os.rename(final, tmp)
                if isinstance(exc, LedgerError) and (tmp / "index.html").is_file():
                    kept = reports / _free_name(reports, name + UNRECORDED)
                    os.rename(tmp, kept)  # complete, but in no ledger: kept under a name that says so
                    raise RunNotRecorded(exc, kept) from None
                retry = isinstance(exc, OSError) and not moved and final.exists()  # lost the race for the name
                if not retry:
                    raise
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            if retry:
                continue
            point_latest(reports, name)
            if extra is not None:
                shutil.rmtree(extra, ignore_errors=True)
            return final
        raise OSError(f"could not find a free report folder name near {base} in {reports}")
    finally:
        if own and ledger is not None:
            ledger.close()
