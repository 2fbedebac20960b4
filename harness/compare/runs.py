"""Find the two runs ``compare`` and ``run --baseline`` compare, from what a user can name.

A reference is one of:

- a run id as ``history`` lists it (``12``), or ``latest`` / ``previous``
  (the newest and second-newest recorded runs), read from the ledger;
- a report folder (``reports/2026-11-30T18-11-04Z/``) or a ``verdicts.json``
  file, e.g. one attached to the last release: read from the file.

Every failure is a :class:`harness.errors.UsageError` that names the
reference, says what was looked for and how to list what there is. A file
must be a regular file (a folder, FIFO or device is named as such, never
read) and a document must pass :func:`harness.record.document.check_document`
(schema, a known schema version, cards with unique ids) before it is used;
a run read from a damaged ledger is a :class:`harness.errors.LedgerError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import DocumentInvalid, InputRefused, UsageError
from harness.inputs import CARD_LIMIT, DOCUMENT_LIMIT, HINTS_LIMIT, read_text, what_it_is
from harness.ledger.history import FILENAME, Ledger
from harness.project import runner
from harness.record.document import RunDocument, check_document

VERDICTS_FILE = "verdicts.json"


@dataclass(frozen=True)
class LoadedRun:
    doc: RunDocument
    label: str  # "run 12 (2026-11-30T18:11:04Z)" or the file shown
    cards: Mapping[str, str] = field(default_factory=dict)  # card id -> its text as run (the report's cards/)


def card_texts(folder: Path) -> dict[str, str]:
    """Card id -> the card file's text as the run loaded it, from a report folder's ``cards/`` (empty if none)."""
    index = folder / "cards" / "index.json"
    try:
        entries = json.loads(read_text(index, HINTS_LIMIT))
    except (OSError, ValueError):
        return {}
    out = {}
    for e in entries if isinstance(entries, list) else []:
        name = e.get("file") if isinstance(e, dict) else None
        if isinstance(name, str) and name and Path(name).name == name and name not in (".", ".."):
            try:  # NOTE: a plain name only: an index saying "../../x" must not read a file outside cards/
                out[str(e["id"])] = read_text(folder / "cards" / name, CARD_LIMIT)
            except (OSError, UnicodeDecodeError):
                continue
    return out


def _from_file(path: Path, ref: str) -> LoadedRun:
    try:
        data = json.loads(read_text(path, DOCUMENT_LIMIT))
    except InputRefused as e:
        raise UsageError(
            f"compare reference {ref!r}: {path} {e.why}; give a verdicts.json written by `run --json` or a "
            "report folder"
        ) from None
    except OSError as e:
        raise UsageError(f"compare reference {ref!r}: cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise UsageError(
            f"compare reference {ref!r}: {path} is not UTF-8 text ({e.reason} at byte {e.start}); give a "
            "verdicts.json written by `run --json` or a report folder"
        ) from None
    except json.JSONDecodeError as e:
        raise UsageError(
            f"compare reference {ref!r}: {path} is not JSON (line {e.lineno}: {e.msg}); give a "
            f"verdicts.json written by `run --json` or a report folder"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("header"), dict) or "schema" not in data["header"]:
        raise UsageError(
            f"compare reference {ref!r}: {path} is not a kvproof verdicts document (it has no header.schema "
            f"'kvproof.verdicts'); give a verdicts.json written by `run --json` or a report folder"
        )
    try:
        check_document(data)
    except DocumentInvalid as e:
        raise UsageError(
            f"compare reference {ref!r}: {path} is not a verdicts document this kvproof can use: {e}. Give a "
            "verdicts.json written by `run --json` (unedited) or a report folder"
        ) from None
    try:
        doc = RunDocument.from_json(data)
    except Exception as e:  # cattrs raises its own exception groups: name the file, not the traceback
        raise UsageError(
            f"compare reference {ref!r}: {path} does not read as a verdicts document ({type(e).__name__}: "
            f"{str(e)[:200]}); was it written by another kvproof version?"
        ) from None
    return LoadedRun(doc, str(path), card_texts(path.parent))


def _from_ledger(ledger: Ledger | None, run_id: int, ref: str, reports: Path) -> LoadedRun:
    if ledger is None:
        raise UsageError(
            f"compare reference {ref!r}: no runs are recorded in {reports}/ yet; run the cards first, "
            f"or give a report folder or verdicts.json"
        )
    row = ledger.run_row(run_id)
    if row is None:
        ids = [r["run_id"] for r in ledger.runs(5)]
        raise UsageError(
            f"compare reference {ref!r}: no run {run_id} in {reports / FILENAME} (newest: "
            f"{', '.join(map(str, ids)) or 'none'}); `{runner()} history` lists the runs"
        )
    header_json, started, report_dir = row
    if report_dir and (reports / report_dir / VERDICTS_FILE).is_file():  # the whole document, timing included
        loaded = _from_file(reports / report_dir / VERDICTS_FILE, ref)
        return LoadedRun(loaded.doc, f"run {run_id} ({started})", loaded.cards)
    header = ledger.loads(header_json, f"runs.header_json of run_id={run_id}")
    cards = [
        ledger.loads(e, f"verdicts.entry_json #{i + 1} of run_id={run_id}")
        for i, e in enumerate(ledger.run_entries(run_id))
    ]
    data = {"header": header, "cards": cards}
    try:
        check_document(data)
        doc = RunDocument.from_json(data)
    except Exception as e:  # DocumentInvalid, or cattrs' exception groups: name the run, not the traceback
        raise ledger.damaged(f"run_id={run_id}", f"{type(e).__name__}: {str(e)[:200]}") from None
    return LoadedRun(doc, f"run {run_id} ({started})")


def load_ref(ref: str, reports: Path, ledger: Ledger | None, *, cwd: Path | None = None) -> LoadedRun:
    """One reference (see the module docstring) as a run document and its label."""
    text = ref.strip()
    if text in ("latest", "previous"):
        runs = ledger.runs(2) if ledger is not None else []
        need = 1 if text == "latest" else 2
        if len(runs) < need:
            raise UsageError(
                f"compare reference {ref!r}: {len(runs)} run(s) recorded in {reports}/, need {need}; "
                f"run the cards, or give a report folder or verdicts.json"
            )
        return _from_ledger(ledger, int(runs[need - 1]["run_id"]), ref, reports)
    if text.isdigit():
        return _from_ledger(ledger, int(text), ref, reports)
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = (cwd or Path.cwd()) / path
    if path.is_dir():
        if not (path / VERDICTS_FILE).exists():
            raise UsageError(
                f"compare reference {ref!r}: the folder {path} has no {VERDICTS_FILE}; give a report "
                f"folder (reports/<date>/) or a verdicts.json"
            )
        return _from_file(path / VERDICTS_FILE, ref)
    if path.is_file():
        return _from_file(path, ref)
    other = what_it_is(path)
    if other is not None:
        raise UsageError(
            f"compare reference {ref!r}: {path} is {other}, not a report folder or a verdicts.json; give a "
            f"run id (`{runner()} history` lists them), latest/previous, a report folder or a verdicts.json"
        )
    raise UsageError(
        f"compare reference {ref!r} is neither a run id (`{runner()} history` lists them), "
        f"latest/previous, nor an existing report folder or verdicts.json"
    )


def open_ledger(reports: Path) -> Ledger | None:
    """The ledger in ``reports`` for reading, None when there is none (LedgerError when it is not a ledger)."""
    path = reports / FILENAME
    return Ledger(path, create=False) if path.exists() else None
