"""compare: per-card changes between two runs, and each regression rule (harness.compare.diff)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from harness.compare.diff import compare, thresholds_from_cards
from harness.record.document import CardResult, RunDocument
from harness.statuses import LiarStatus, Verdict

DOC = Path(__file__).resolve().parents[2] / "fixtures" / "report-data" / "mixed-verdicts.json"


@pytest.fixture()
def base() -> RunDocument:
    return RunDocument.from_json(json.loads(DOC.read_text()))


def _card(doc: RunDocument, cid: str) -> CardResult:
    return next(c for c in doc.cards if c.id == cid)


def _with_card(doc: RunDocument, card: CardResult) -> RunDocument:
    return dataclasses.replace(doc, cards=tuple(card if c.id == card.id else c for c in doc.cards))


def _set_actual(card: CardResult, witness: str, key: str, value, *, controls: bool = False) -> CardResult:
    group = card.controls if controls else card.witnesses
    new = []
    for w in group:
        if w.id == witness:
            w = dataclasses.replace(
                w, bounds=tuple(dataclasses.replace(b, actual=value) if b.key == key else b for b in w.bounds)
            )
        new.append(w)
    return dataclasses.replace(card, **{"controls" if controls else "witnesses": tuple(new)})


def test_a_run_against_itself_has_no_change_and_no_regression(base):
    cmp = compare(base, base)
    assert [c.status for c in cmp.cards] == ["unchanged"] * len(base.cards)
    assert cmp.regressions == ()
    assert all(m.change in (None, 0.0) and not m.regression for c in cmp.cards for m in c.measures)


def test_a_verdict_that_gets_worse_is_a_regression_and_a_better_one_is_not(base):
    add = _card(base, "FX-ADD")
    worse = _with_card(base, dataclasses.replace(add, verdict=Verdict.FAILED, reason="bound broken"))
    cmp = compare(base, worse)
    regs = [r for r in cmp.regressions if r.rule == "verdict"]
    assert [r.card for r in regs] == ["FX-ADD"] and "PROVEN -> FAILED" in regs[0].text
    better = compare(worse, base)
    assert not [r for r in better.regressions if r.rule == "verdict"]
    # VACUOUS -> FAILED is worse too; FAILED -> VACUOUS is not
    weak = _card(base, "FX-WEAK")
    failed = _with_card(base, dataclasses.replace(weak, verdict=Verdict.FAILED))
    assert [r.card for r in compare(base, failed).regressions if r.rule == "verdict"] == ["FX-WEAK"]
    assert not [r for r in compare(failed, base).regressions if r.rule == "verdict"]


def test_a_liar_caught_before_and_surviving_now_is_a_regression(base):
    add = _card(base, "FX-ADD")
    (liar,) = add.liars
    survived = dataclasses.replace(liar, caught=False, caught_by=(), status=LiarStatus.SURVIVED)
    after = _with_card(base, dataclasses.replace(add, liars=(survived,), verdict=Verdict.VACUOUS))
    cmp = compare(base, after)
    change = next(c for c in cmp.cards if c.id == "FX-ADD")
    assert change.newly_surviving == ("arith.off_by_one",)
    assert change.liars_before == (1, 1) and change.liars_after == (0, 1)
    assert {r.rule for r in change.regressions} == {"verdict", "liar"}
    # a liar that already survived before is not news
    assert not [r for r in compare(after, after).regressions]


def test_any_move_on_an_exact_bound_is_a_regression(base):
    add = _card(base, "FX-ADD")  # exact: max_abs_delta le 0, measured 0
    moved = _with_card(base, _set_actual(add, "exact", "max_abs_delta", 1e-9))
    cmp = compare(base, moved)
    (m,) = [m for m in next(c for c in cmp.cards if c.id == "FX-ADD").measures if m.witness == "exact"]
    assert m.before == 0 and m.after == 1e-9 and m.change == pytest.approx(1e-9)
    assert m.toward_bound and math.isinf(m.used) and m.threshold == 0.0 and m.regression
    assert [r.rule for r in cmp.regressions] == ["measure"]


def test_a_move_away_from_the_bound_is_never_a_regression(base):
    add = _card(base, "FX-ADD")  # control inputs-differ: max_abs_delta gt 0, measured 1
    grew = _with_card(base, _set_actual(add, "inputs-differ", "max_abs_delta", 5, controls=True))
    cmp = compare(base, grew)
    (m,) = [m for m in next(c for c in cmp.cards if c.id == "FX-ADD").measures if m.witness == "inputs-differ"]
    assert m.change == 4 and not m.toward_bound and not m.regression and cmp.regressions == ()


def test_a_move_toward_a_loose_bound_is_shown_not_judged_without_a_threshold(base):
    add = _card(base, "FX-ADD")  # control: gt 0 from 1 down to 0.2 is toward the bound, 80% of the room
    shrank = _with_card(base, _set_actual(add, "inputs-differ", "max_abs_delta", 0.2, controls=True))
    cmp = compare(base, shrank)
    (m,) = [m for m in next(c for c in cmp.cards if c.id == "FX-ADD").measures if m.witness == "inputs-differ"]
    assert m.toward_bound and m.used == pytest.approx(0.8) and m.threshold is None and not m.regression
    assert next(c for c in cmp.cards if c.id == "FX-ADD").status == "changed"
    # with a card threshold of half the room it is a regression; with 0.9 it is not
    over = compare(base, shrank, thresholds={("FX-ADD", "inputs-differ", "max_abs_delta"): 0.5})
    assert [r.rule for r in over.regressions] == ["measure"] and "used 80% of the room" in over.regressions[0].text
    under = compare(base, shrank, thresholds={("FX-ADD", "inputs-differ", "max_abs_delta"): 0.9})
    assert under.regressions == ()


def test_changed_bound_files_name_why_a_card_moved(base):
    add = _card(base, "FX-ADD")
    files = tuple(
        dataclasses.replace(f, sha256="0" * 64) if f.path.endswith("test_arith.py") else f for f in add.bound_files
    )
    after = _with_card(base, dataclasses.replace(add, bound_files=files, version=add.version + 1))
    change = next(c for c in compare(base, after).cards if c.id == "FX-ADD")
    assert change.status == "changed" and change.version_before + 1 == change.version_after
    assert change.changed_files == ("witnesses/test_arith.py (witness)",)
    assert change.regressions == ()


def test_added_and_removed_cards(base):
    fewer = dataclasses.replace(base, cards=tuple(c for c in base.cards if c.id != "FX-ADD"))
    cmp = compare(fewer, base)
    assert cmp.added == ("FX-ADD",) and cmp.removed == () and cmp.regressions == ()  # it enters PROVEN
    cmp = compare(base, fewer)
    assert cmp.removed == ("FX-ADD",) and cmp.cards[-1].id == "FX-ADD" and cmp.regressions == ()
    # a card that enters not PROVEN is a regression against nothing
    only_weak = dataclasses.replace(base, cards=tuple(c for c in base.cards if c.id != "FX-WEAK"))
    regs = compare(only_weak, base).regressions
    assert [(r.card, r.rule) for r in regs if r.card == "FX-WEAK"][:1] == [("FX-WEAK", "verdict")]


def test_duration_change_is_reported(base):
    add = _card(base, "FX-ADD")
    slower = _with_card(base, dataclasses.replace(add, duration_s=add.duration_s + 2.5))
    change = next(c for c in compare(base, slower).cards if c.id == "FX-ADD")
    assert change.duration_change == pytest.approx(2.5)


def test_card_regression_thresholds_are_read_from_the_witnesses(tmp_path):
    from harness.select.cards import load_cards

    card = tmp_path / "T-1.yaml"
    card.write_text(
        "id: T-1\ntitle: t\nmodule: m\nregime: A\ntheorem: t\nproof: p\nrefs: []\nversion: 1\n"
        "witnesses:\n  - id: w\n    test: witnesses/test_x.py::test_x\n"
        "    bounds: {max_abs_delta: {le: 1.0e-4}}\n    reason: r\n    regression: {max_abs_delta: 0.5}\n"
    )
    res = load_cards(tmp_path, root=tmp_path)
    assert thresholds_from_cards(res.cards) == {("T-1", "w", "max_abs_delta"): 0.5}


def test_a_threshold_on_a_key_the_witness_does_not_bound_is_refused(tmp_path):
    from harness.select.cards import load_cards

    (tmp_path / "T-2.yaml").write_text(
        "id: T-2\ntitle: t\nmodule: m\nregime: A\ntheorem: t\nproof: p\nrefs: []\nversion: 1\n"
        "witnesses:\n  - id: w\n    test: witnesses/test_x.py::test_x\n"
        "    bounds: {max_abs_delta: {le: 0}}\n    regression: {max_rel_delta: 0.5}\n"
    )
    res = load_cards(tmp_path, root=tmp_path)
    (p,) = [p for p in res.problems if "regression" in p.field]
    assert p.field == "witnesses[0].regression.max_rel_delta" and "max_abs_delta" in p.message and p.line == 13


# ---------------------------------------------------------------- the command


def _cli(*args):
    from harness.cli import main

    return main(["compare", *args])


def _write(doc: RunDocument, path: Path) -> Path:
    path.write_text(json.dumps(doc.to_json()))
    return path


def test_compare_command_exit_codes_json_and_markdown(base, tmp_path, capsys):
    a = _write(base, tmp_path / "a.json")
    add = _card(base, "FX-ADD")
    broke = _write(
        _with_card(base, dataclasses.replace(add, verdict=Verdict.FAILED, reason="bound broken")), tmp_path / "b.json"
    )
    assert _cli(str(a), str(a), "--fail-on-regression") == 0
    assert _cli(str(a), str(broke)) == 0  # without --fail-on-regression it only reports
    out = capsys.readouterr().out
    assert "PROVEN → FAILED" in out and "1 regression(s)" in out
    assert (
        _cli(
            str(a),
            str(broke),
            "--fail-on-regression",
            "--json",
            str(tmp_path / "c.json"),
            "--markdown",
            str(tmp_path / "c.md"),
        )
        == 1
    )
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["schema"] == "kvproof.compare" and data["summary"]["regressions"] == 1
    assert [r["card"] for r in data["regressions"]] == ["FX-ADD"]
    md = (tmp_path / "c.md").read_text()
    assert "| FX-ADD | PROVEN → FAILED |" in md and "### Regressions" in md
    moved = _write(_with_card(base, _set_actual(add, "exact", "max_abs_delta", 0.5)), tmp_path / "m.json")
    assert _cli(str(a), str(moved), "--html", str(tmp_path / "c.html")) == 0
    page = (tmp_path / "c.html").read_text()
    assert "<script" not in page and 'class="bars"' in page and "FX-ADD/exact: max_abs_delta" in page
    assert "1 regression(s)" in page


def test_compare_a_report_folder_and_a_missing_reference(base, tmp_path, capsys):
    folder = tmp_path / "2026-11-30T00-00-00Z"
    folder.mkdir()
    _write(base, folder / "verdicts.json")
    assert _cli(str(folder), str(folder / "verdicts.json"), "--json", "-") == 0
    assert json.loads(capsys.readouterr().out)["summary"]["unchanged"] == len(base.cards)
    assert _cli(str(tmp_path / "nope"), str(folder), "--reports", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "'" + str(tmp_path / "nope") + "'" in err and "history" in err
    (tmp_path / "bad.json").write_text("{not json")
    assert _cli(str(tmp_path / "bad.json"), str(folder)) == 2
    assert "is not JSON" in capsys.readouterr().err
    assert _cli(str(folder), str(folder), "--markdown", str(tmp_path / "no" / "such" / "x.md")) == 2
    assert "does not exist" in capsys.readouterr().err
    assert _cli("--reports", str(tmp_path / "empty")) == 2  # no ledger: previous/latest cannot be found
    assert "0 run(s) recorded" in capsys.readouterr().err


def test_compare_shows_a_cards_own_changes_from_the_report_folders(base, tmp_path, capsys):
    add = _card(base, "FX-ADD")
    runs = []
    for i, (text, fp) in enumerate(
        (("id: FX-ADD\ntheorem: a + b\n", "a" * 64), ("id: FX-ADD\ntheorem: a + b, exactly\n", "b" * 64))
    ):
        folder = tmp_path / f"run{i}"
        (folder / "cards").mkdir(parents=True)
        (folder / "cards" / "FX-ADD.yaml").write_text(text)
        (folder / "cards" / "index.json").write_text(json.dumps([{"id": "FX-ADD", "file": "FX-ADD.yaml"}]))
        _write(_with_card(base, dataclasses.replace(add, fingerprint=fp)), folder / "verdicts.json")
        runs.append(str(folder))
    assert _cli(*runs, "--markdown", str(tmp_path / "c.md")) == 0
    md = (tmp_path / "c.md").read_text()
    assert "FX-ADD: the card changed" in md and "-theorem: a + b\n+theorem: a + b, exactly" in md
    assert "+theorem: a + b, exactly" in capsys.readouterr().out


def test_liars_not_run_because_the_card_failed_are_left_to_the_verdict_rule(base):
    add = _card(base, "FX-ADD")
    (liar,) = add.liars
    not_run = dataclasses.replace(liar, caught=False, caught_by=(), status=LiarStatus.NOT_RUN)
    after = _with_card(base, dataclasses.replace(add, liars=(not_run,), verdict=Verdict.FAILED, reason="broken"))
    assert [r.rule for r in compare(base, after).regressions] == ["verdict"]
