"""The dated report's renderers: gold Markdown / JUnit / HTML, history transitions, headline, escaping.

Everything renders one stored verdicts document (tests/fixtures/report-data/
mixed-verdicts.json: the fixture project's cards-mixed run, one card per
verdict, a title holding ``<script>``) and a ledger seeded with earlier runs.
Gold files have dates and durations blanked; regenerate them with
``KVPROOF_REGOLD=1 pytest tests/harness/report/test_report.py``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.ledger.history import Ledger
from harness.plan.binding import BoundFile, digest
from harness.project import command, runner
from harness.record import build
from harness.record.document import RunDocument, WitnessResult
from harness.report import html, junit, markdown
from harness.report.view import build_view, history_marks, transition

HERE = Path(__file__).resolve().parents[2]  # tests/
FIXTURE_DOC = HERE / "fixtures" / "report-data" / "mixed-verdicts.json"
GOLD = HERE / "fixtures" / "report-data" / "gold"
PROJECT = HERE / "fixtures" / "project"


def load_doc() -> dict:
    return json.loads(FIXTURE_DOC.read_text(encoding="utf-8"))


def at(doc: dict, started: str, **verdicts: str) -> dict:
    """A copy of ``doc`` started at ``started`` with some cards' verdicts replaced (FX_ADD= for FX-ADD)."""
    out = copy.deepcopy(doc)
    out["header"]["started"] = started
    for c in out["cards"]:
        new = verdicts.get(c["id"].replace("-", "_"))
        if new:
            c["verdict"], c["reason"] = new, f"was {new} then"
    return out


def card(view: dict, card_id: str) -> dict:
    return next(c for c in view["cards"] if c["id"] == card_id)


@pytest.fixture()
def seeded_view(tmp_path) -> dict:
    """The fixture run as the third run: FX-ADD was FAILED then PROVEN on the same files (flaky, not now);
    FX-LOOSE was PROVEN before and is FAILED now; FX-WEAK's card file changed since."""
    doc = load_doc()
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        ledger.record(
            RunDocument.from_json(at(doc, "2026-01-01T10:00:00Z", FX_ADD="FAILED", FX_LOOSE="PROVEN")),
            "2026-01-01T10-00-00Z",
        )
        second = at(doc, "2026-01-02T10:00:00Z", FX_LOOSE="PROVEN", FX_WEAK="PROVEN")
        next(c for c in second["cards"] if c["id"] == "FX-WEAK")["bound_files"][0]["sha256"] = "f" * 64
        ledger.record(RunDocument.from_json(second), "2026-01-02T10-00-00Z")
        past = ledger.histories([c["id"] for c in doc["cards"]])
    return build_view(RunDocument.from_json(doc), past, root=PROJECT, report_dir="2026-01-03T10-00-00Z")


# ---------------------------------------------------------------- gold

DATE = re.compile(r"\d{4}-\d\d-\d\d(?:[T ]\d\d[:-]\d\d[:-]\d\d(?:\.\d+)?(?:Z| UTC)?)?")
DURATION = re.compile(r"\b\d+\.\d+ s\b|(?<=time=\")\d+\.\d+|(?<=>)\d+\.\d+(?= s<)")


def blank(text: str) -> str:
    """Dates, durations and the start of a command as it runs from the document's root (the replay commands a run
    records, harness.project.runner) or from here (hints made now) blanked."""
    text = DURATION.sub("<T>", DATE.sub("<DATE>", text))
    for start in (runner(at=Path("/project")), runner()):
        text = text.replace(f"{start} run ", "<KVPROOF> run ")
    return text


@pytest.mark.parametrize(
    "name,render", [("verdicts.md", markdown.render), ("junit.xml", junit.render), ("index.html", html.render)]
)
def test_rendered_report_matches_gold_with_dates_and_durations_blanked(seeded_view, name, render):
    got = blank(render(seeded_view))
    path = GOLD / name
    if os.environ.get("KVPROOF_REGOLD"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8"), f"{name} differs from its gold; KVPROOF_REGOLD=1 rewrites it"


# ---------------------------------------------------------------- history and transitions


def test_transitions_name_newly_failed_newly_proven_and_flaky():
    assert transition(None, {"verdict": "PROVEN", "digest": "a"})["kind"] == "first"
    assert transition({"verdict": "PROVEN", "digest": "a"}, {"verdict": "PROVEN", "digest": "b"}) is None
    failed = transition({"verdict": "PROVEN", "digest": "a"}, {"verdict": "FAILED", "digest": "b"})
    assert failed["kind"] == "newly FAILED" and not failed["flaky"]
    flaky = transition({"verdict": "FAILED", "digest": "a"}, {"verdict": "PROVEN", "digest": "a"})
    assert flaky["kind"] == "newly PROVEN" and flaky["flaky"] and "no bound file changed" in flaky["text"]
    assert transition({"verdict": "PROVEN", "digest": "a"}, {"verdict": "ERROR", "digest": "a"})["kind"] == "now ERROR"


def test_history_strip_marks_each_run_and_this_run_last(seeded_view):
    add = card(seeded_view, "FX-ADD")
    assert [m["verdict"] for m in add["history"]] == ["FAILED", "PROVEN", "PROVEN"]
    assert add["history"][1]["change"]["kind"] == "newly PROVEN" and add["history"][1]["change"]["flaky"]
    assert add["history"][-1]["current"] and add["change"] is None  # unchanged this run
    assert add["history"][0]["report_dir"] == "2026-01-01T10-00-00Z"


def test_card_that_changed_verdict_this_run_is_called_out(seeded_view):
    loose, weak = card(seeded_view, "FX-LOOSE"), card(seeded_view, "FX-WEAK")
    assert loose["change"]["kind"] == "newly FAILED" and loose["change"]["flaky"]  # same files as last run
    assert weak["change"]["kind"] == "now VACUOUS" and not weak["change"]["flaky"]  # its card file changed
    assert {ch["id"] for ch in seeded_view["summary"]["changes"]} == {"FX-LOOSE", "FX-WEAK"}


def test_history_is_capped_to_the_newest_marks():
    from harness.ledger.history import PastVerdict

    past = [
        PastVerdict(i, f"2026-01-01T00:00:{i:02d}Z", "X", "PROVEN", "", None, "d", None, None, "ci", 0, None)
        for i in range(40)
    ]
    marks = history_marks(
        past, {"started": "2026-01-02T00:00:00Z", "verdict": "FAILED", "digest": "d", "report_dir": None}, limit=30
    )
    assert len(marks) == 30 and marks[-1]["current"] and marks[-1]["change"]["kind"] == "newly FAILED"


# ---------------------------------------------------------------- HTML


def test_html_shows_hostile_title_as_text(seeded_view):
    page = html.render(seeded_view)
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_html_is_self_contained(seeded_view):
    page = html.render(seeded_view)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert not re.search(r"<script|<link|@import|url\(|@font-face", page, re.I)
    assert "<style>" in page and 'name="viewport"' in page and "@media print" in page


def test_html_filter_hides_proven_cards_with_css_only(seeded_view):
    page = html.render(seeded_view)
    assert '<input type="checkbox" id="only-open"' in page
    assert '#only-open:checked ~ main [data-verdict="PROVEN"] { display: none; }' in page
    tagged = re.findall(r'<(tr|section)\b[^>]*data-verdict="PROVEN"', page)
    assert tagged == ["tr", "section"]  # the index row and the card section of FX-ADD


def test_html_card_shows_refs_with_file_line_and_source(seeded_view):
    add = card(seeded_view, "FX-ADD")
    src = add["ref_sources"][0]
    assert src["location"] == "fakeimpl/arith.py:4" and src["lines"][1]["text"].strip() == "return a + b"
    page = html.render(seeded_view)
    assert "fakeimpl/arith.py:4" in page and "return a + b" in page


def test_html_failure_shows_shrunk_example_and_replay_command(seeded_view):
    w = card(seeded_view, "FX-FALSIFIED")["failing"][0]
    assert w["replay"] == command("run FX-FALSIFIED --cards cards-mixed --profile ci --seed 0", at=Path("/project"))
    page = html.render(seeded_view)
    assert "shrunk Hypothesis example (seed 0" in page and "@reproduce_failure" in page
    assert "&lt;script>alert(1)&lt;/script>" in markdown.render(seeded_view)


# ---------------------------------------------------------------- Markdown and JUnit


def test_markdown_escapes_pipes_and_lists_every_non_proven_reason(seeded_view):
    md = markdown.render(seeded_view)
    rows = [ln for ln in md.splitlines() if ln.startswith("| FX-")]
    assert len(rows) == 11 and all(ln.count(" | ") == 9 for ln in rows)
    assert r"max\|Δ\| = 1.000e-03 (≤ 0)" in md
    assert md.count("\n- **FX-") == 10 + 2  # ten not PROVEN, two changes


def test_junit_keeps_failures_and_errors_apart_with_environment_properties(seeded_view):
    root = ET.fromstring(junit.render(seeded_view))
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "11",
        "5",
        "5",
        "0",
    )
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["git.commit"].startswith("0123456789ab") and props["hypothesis.seed"] == "0"
    assert props["version.numpy"] and props["kvproof.gate"] == "FAIL"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["FX-ADD"].find("failure") is None and cases["FX-ADD"].find("error") is None
    assert cases["FX-FALSIFIED"].find("failure").get("type") == "FAILED"
    assert cases["FX-HANG"].find("error").get("type") == "ERROR"
    assert cases["FX-WEAK"].find("failure").get("type") == "VACUOUS"


# ---------------------------------------------------------------- headline


def _w(wid, *bounds, kind="witness") -> WitnessResult:
    from harness.record.document import CheckResult

    checks = tuple(CheckResult(k, op, lim, act, holds, node) for k, op, lim, act, holds, node in bounds)
    return WitnessResult(
        id=wid,
        kind=kind,
        test=f"witnesses/test_x.py::test_{wid}",
        status="passed",
        why="",
        duration_s=0.0,
        timeout_s=None,
        evidence={},
        bounds=checks,
        reason="",
        message="",
        location="",
        failure="",
        hypothesis=None,
        nodes=(),
    )


def test_headline_is_the_first_bounded_delta_not_the_largest_recorded_value():
    # ORACLE-PARITY: token-ids (mismatches eq 0), logits (max_abs_delta le 1.5e-4); hidden states record a
    # large absolute delta without a bound and must not become the headline
    witnesses = [
        _w("token-ids", ("mismatches", "eq", 0, 0, True, "")),
        _w("logits", ("max_abs_delta", "le", 1.5e-4, 7.5e-5, True, "")),
        _w("hidden", ("max_rel_delta", "le", 2e-5, 6.7e-6, True, "")),
    ]
    head = build.headline(witnesses)
    assert head.witness == "logits" and head.text == "max|Δ| = 7.500e-05 (≤ 1.5e-04)"


def test_headline_of_a_parametrized_witness_is_its_worst_node():
    w = _w("p", ("max_abs_delta", "le", 0, 0.0, True, "a[1]"), ("max_abs_delta", "le", 0, 2.0, False, "a[2]"))
    assert build.headline([w]).value == 2.0
    ctl = _w("c", ("max_abs_delta", "gt", 0, 3.0, True, "c[1]"), ("max_abs_delta", "gt", 0, 0.5, True, "c[2]"))
    assert build.headline([ctl]).value == 0.5


def test_headline_falls_back_to_any_numeric_bound_then_none():
    assert build.headline([_w("t", ("mismatches", "eq", 0, 0, True, ""))]).text == "mismatches = 0 (= 0)"
    assert build.headline([_w("t", ("max_abs_delta", "le", 0, "was not recorded", None, ""))]) is None
    assert build.headline([]) is None


def test_view_digest_matches_what_the_ledger_stores():
    doc = load_doc()
    files = [BoundFile(**b) for b in doc["cards"][0]["bound_files"]]
    assert digest(files) == digest(reversed(files))
    assert RunDocument.from_json(doc).cards[0].bound_digest == digest(files)
