"""GitHub Actions: an annotation per card that is not PROVEN, and the run's Markdown as the job summary.

Used by ``run`` and ``mutate`` when ``GITHUB_ACTIONS=true`` (GitHub sets it in every job): each FAILED,
VACUOUS, ERROR or UNVERIFIED card that counts for the gate becomes an ``::error`` workflow command at its
card file (and, when a witness failed at a known line, a second one at that line), so the pull request
shows it where it is; the report folder's ``verdicts.md`` is appended to ``$GITHUB_STEP_SUMMARY``. Nothing
is written elsewhere, and a summary file that cannot be written is said on stderr, never raised: the run
already recorded its evidence.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from harness.record.build import required_cell
from harness.record.document import CardResult, RunDocument
from harness.statuses import Verdict


def _escape(text: str, prop: bool = False) -> str:
    """A workflow command's data (or property value) as GitHub reads it: %, CR and LF encoded (and : , too)."""
    out = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return out.replace(":", "%3A").replace(",", "%2C") if prop else out


def annotations(cards: Iterable[CardResult], subjects=()) -> list[str]:
    """The ``::error`` lines for the cards (cells) that are not PROVEN and count for the gate (n/a cards and
    cells of a configuration marked ``required: false`` do not)."""
    out = []
    for c in cards:
        if c.verdict == Verdict.PROVEN or not required_cell(c, subjects):
            continue
        title = _escape(f"{c.id} {c.verdict}", prop=True)
        out.append(f"::error file={_escape(c.card_path, True)},line=1,title={title}::{_escape(c.reason)}")
        for w in c.witnesses + c.controls:
            path, _, line = (w.location or "").rpartition(":")
            if w.status == "failed" and path and line.isdigit():
                what = _escape(f"{c.id}: witness {w.id} failed", prop=True)
                out.append(
                    f"::error file={_escape(path, True)},line={line},title={what}::{_escape(w.message or w.why)}"
                )
    return out


def publish(doc: RunDocument, report_dir: Path | None, out: TextIO | None = None) -> None:
    """Print the annotations and append the report's verdicts.md to ``$GITHUB_STEP_SUMMARY`` (when set)."""
    out = out or sys.stdout
    for line in annotations(doc.cards, doc.header.subjects):
        print(line, file=out, flush=True)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    md = report_dir / "verdicts.md" if report_dir is not None else None
    if not summary or md is None or not md.is_file():
        return
    try:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(md.read_text(encoding="utf-8") + "\n")
    except OSError as exc:
        print(f"kvproof: warning: GITHUB_STEP_SUMMARY={summary!r} could not be written ({exc})", file=sys.stderr)


def wanted() -> bool:
    """Is this run inside a GitHub Actions job?"""
    return os.environ.get("GITHUB_ACTIONS") == "true"
