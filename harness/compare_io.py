"""Find the two runs ``compare`` and ``run --baseline`` compare, from what a user can name.

A reference is one of:

- a run id as ``history`` lists it (``12``), or ``latest`` / ``previous``
  (the newest and second-newest recorded runs), read from the ledger;
- a report folder (``reports/2026-11-30T18-11-04Z/``) or a ``verdicts.json``
  file, e.g. one attached to the last release: read from the file.

Every failure is a :class:`harness.errors.UsageError` that names the
reference, says what was looked for and how to list what there is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.document import RunDocument
from harness.errors import UsageError
from harness.ledger import FILENAME, Ledger

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
        entries = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, dict) and e.get("file"):
            try:
                out[str(e["id"])] = (folder / "cards" / str(e["file"])).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
    return out


def _from_file(path: Path, ref: str) -> LoadedRun:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"compare reference {ref!r}: cannot read {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise UsageError(
            f"compare reference {ref!r}: {path} is not JSON (line {e.lineno}: {e.msg}); give a "
            f"verdicts.json written by `run --json` or a report folder"
        ) from e
    if not isinstance(data, dict) or data.get("header", {}).get("schema") != "kvproof.verdicts":
        raise UsageError(
            f"compare reference {ref!r}: {path} is not a kvproof verdicts document (its header.schema "
            f"is not 'kvproof.verdicts'); give a verdicts.json written by `run --json` or a report folder"
        )
    try:
        doc = RunDocument.from_json(data)
    except Exception as e:  # cattrs raises its own exception groups: name the file, not the traceback
        raise UsageError(
            f"compare reference {ref!r}: {path} does not read as a verdicts document ({type(e).__name__}: "
            f"{str(e)[:200]}); was it written by another kvproof version?"
        ) from e
    return LoadedRun(doc, str(path), card_texts(path.parent))


def _from_ledger(ledger: Ledger | None, run_id: int, ref: str, reports: Path) -> LoadedRun:
    if ledger is None:
        raise UsageError(
            f"compare reference {ref!r}: no runs are recorded in {reports}/ yet; run the cards first, "
            f"or give a report folder or verdicts.json"
        )
    row = ledger.conn.execute(
        "SELECT header_json, started, report_dir FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    if row is None:
        ids = [r["run_id"] for r in ledger.runs(5)]
        raise UsageError(
            f"compare reference {ref!r}: no run {run_id} in {reports / FILENAME} (newest: "
            f"{', '.join(map(str, ids)) or 'none'}); `run_obligations.py history` lists the runs"
        )
    header_json, started, report_dir = row
    if report_dir and (reports / report_dir / VERDICTS_FILE).is_file():  # the whole document, timing included
        loaded = _from_file(reports / report_dir / VERDICTS_FILE, ref)
        return LoadedRun(loaded.doc, f"run {run_id} ({started})", loaded.cards)
    cards = [
        json.loads(e)
        for (e,) in ledger.conn.execute("SELECT entry_json FROM verdicts WHERE run_id = ? ORDER BY rowid", (run_id,))
    ]
    doc = RunDocument.from_json({"header": json.loads(header_json), "cards": cards})
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
        if not (path / VERDICTS_FILE).is_file():
            raise UsageError(
                f"compare reference {ref!r}: the folder {path} has no {VERDICTS_FILE}; give a report "
                f"folder (reports/<date>/) or a verdicts.json"
            )
        return _from_file(path / VERDICTS_FILE, ref)
    if path.is_file():
        return _from_file(path, ref)
    raise UsageError(
        f"compare reference {ref!r} is neither a run id (`run_obligations.py history` lists them), "
        f"latest/previous, nor an existing report folder or verdicts.json"
    )


def open_ledger(reports: Path) -> Ledger | None:
    path = reports / FILENAME
    return Ledger(path, create=False) if path.is_file() else None
