"""The report links each witness to its test file and each liar to its module, and says what each liar does."""

from __future__ import annotations

from pathlib import Path

from harness.report.view import link_sources

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "project"


def test_witnesses_and_liars_link_their_source_from_the_report_folder(tmp_path):
    report = tmp_path / "reports" / "2026-12-04T00-00-00Z"
    report.mkdir(parents=True)
    cards = [
        {
            "witnesses": [{"test": "witnesses/test_arith.py::test_acc_matches_sum"}, {"test": "witnesses/nope.py::t"}],
            "controls": [],
            "liars": [{"name": "arith.off_by_one"}, {"name": "no.such_liar"}],
        }
    ]
    link_sources(cards, ROOT, report)
    (c,) = cards
    assert (report / c["witnesses"][0]["source_href"]).resolve() == (ROOT / "witnesses" / "test_arith.py").resolve()
    assert c["witnesses"][1]["source_href"] is None  # no such file: no link
    assert c["liars"][0]["does"] == "adds one too many" and c["liars"][0]["source_href"].endswith(".py")
    assert c["liars"][1]["does"] == "" and c["liars"][1]["source_href"] is None
    link_sources(cards, ROOT, None)  # not written yet (the terminal's view): no links
    assert cards[0]["witnesses"][0]["source_href"] is None
