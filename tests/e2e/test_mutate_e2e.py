"""End to end: ``run_obligations.py mutate`` on the fixture project's mutation cards
(tests/fixtures/project/cards-mutation).

FX-SCALE claims ``scale`` but its witness only checks a value below the cap,
so mutants of the cap survive and its ``mutation.min_score: 0.9`` makes it
VACUOUS; FX-LOOP's ``count_up`` has mutants that loop forever (timeouts). One
full mutate run (every mutant: ``--max-mutants 0``) is shared; the later
tests replay it (--changed), read it back (run, status) and make it stale.
"""

from __future__ import annotations

import json
import sqlite3

import jsonschema
import pytest
from test_cli_e2e import REPO, _copy_project, _no_traceback, kvproof

SCHEMA = json.loads((REPO / "obligations" / "verdicts.schema.json").read_text())


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return _copy_project(tmp_path_factory.mktemp("mutate") / "project")


@pytest.fixture(scope="module")
def mutated(project):
    proc = kvproof(
        project, "mutate", "--cards", "cards-mutation", "--max-mutants", "0", "-j", "2", "--json", "m.json", timeout=300
    )
    return proc, json.loads((project / "m.json").read_text())


def _card(doc, cid):
    return next(c for c in doc["cards"] if c["id"] == cid)


def _statuses(card):
    return {m["key"]: m["status"] for m in card["mutation"]["mutants"]}


def test_every_mutant_is_classified_and_the_weak_card_is_vacuous(mutated):
    proc, doc = mutated
    _no_traceback(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    jsonschema.validate(doc, SCHEMA)
    scale, loop = _card(doc, "FX-SCALE"), _card(doc, "FX-LOOP")
    s = _statuses(scale)
    assert s["fakeimpl/scale.py:5:8:arith"] == "killed"  # x * k -> x / k: the witness's bound catches it
    assert s["fakeimpl/scale.py:6:7:compare"] == "equivalent"  # marked in equivalent-mutants.yaml
    assert s["fakeimpl/scale.py:7:8:drop"] == "survived"  # the cap is never reached by the witness
    m = scale["mutation"]
    assert (m["killed"], m["survived"], m["equivalent"], m["candidates"]) == (2, 5, 1, 8)
    assert m["score"] == round(2 / 7, 4) and m["holds"] is False
    assert scale["verdict"] == "VACUOUS" and scale["reason"].startswith("mutation score 0.29 < min_score 0.90")
    equivalent = next(x for x in m["mutants"] if x["status"] == "equivalent")
    assert equivalent["detail"].startswith("at y == 100 both branches give 100")
    survivor = next(x for x in m["mutants"] if x["key"] == "fakeimpl/scale.py:7:8:drop")
    assert "-        y = 100\n+        pass" in survivor["diff"]
    lp = loop["mutation"]
    assert lp["timeout"] == 3 and _statuses(loop)["fakeimpl/scale.py:14:8:arith"] == "timeout"  # i -= 1 loops
    assert loop["verdict"] == "PROVEN" and lp["min_score"] is None
    claims = {(c["path"], c["qualname"]): c for c in doc["claims"]}
    assert claims[("fakeimpl/scale.py", "Box.half")]["cards"] == []  # no card claims it
    assert claims[("fakeimpl/scale.py", "scale")]["survived"] == 5


def test_the_report_and_ledger_keep_the_score(mutated, project):
    proc, doc = mutated
    html = (project / "reports" / "latest" / "index.html").read_text()
    assert "fakeimpl/scale.py:7:8:drop" in html and "Box.half" in html
    md = (project / "reports" / "latest" / "verdicts.md").read_text()
    assert "fakeimpl/scale.py:7:8:drop" in md
    rows = (
        sqlite3.connect(project / "reports" / "ledger.sqlite")
        .execute("SELECT card_id, score, survived FROM mutation ORDER BY card_id")
        .fetchall()
    )
    assert rows == [("FX-LOOP", _card(doc, "FX-LOOP")["mutation"]["score"], 2), ("FX-SCALE", round(2 / 7, 4), 5)]


def test_changed_reuses_every_mutant_while_the_bytes_are_the_same(mutated, project):
    proc = kvproof(
        project, "mutate", "--cards", "cards-mutation", "--max-mutants", "0", "--changed", "--json", "again.json"
    )
    _no_traceback(proc)
    doc = json.loads((project / "again.json").read_text())
    before = json.loads((project / "m.json").read_text())
    for cid in ("FX-SCALE", "FX-LOOP"):
        now = _card(doc, cid)["mutation"]
        assert _statuses(_card(doc, cid)) == _statuses(_card(before, cid))
        assert all(m["reused_from"] is not None for m in now["mutants"])
        assert now["previous_score"] == _card(before, cid)["mutation"]["score"]
    assert "running 0" in proc.stdout + proc.stderr


def test_run_judges_with_the_ledger_score_until_the_code_changes(mutated, project):
    proc = kvproof(project, "run", "FX-SCALE", "--cards", "cards-mutation", "--json", "run.json")
    card = _card(json.loads((project / "run.json").read_text()), "FX-SCALE")
    assert proc.returncode == 1 and card["verdict"] == "VACUOUS"
    assert card["mutation"]["measured_run"] is not None and not card["mutation"]["stale"]
    status = kvproof(project, "status", "--cards", "cards-mutation")
    assert "0.29 BELOW" in status.stdout
    src = project / "fakeimpl" / "scale.py"
    src.write_text(src.read_text() + "\n# a change to the claimed file\n")
    proc = kvproof(project, "run", "FX-SCALE", "--cards", "cards-mutation", "--json", "stale.json")
    card = _card(json.loads((project / "stale.json").read_text()), "FX-SCALE")
    assert proc.returncode == 0 and card["verdict"] == "PROVEN"
    assert card["mutation"]["stale"] and card["mutation"]["holds"] is None
    assert "STALE" in kvproof(project, "status", "--cards", "cards-mutation").stdout


def test_show_prints_one_mutants_diff_and_a_bad_key_is_one_line(project):
    ok = kvproof(project, "mutate", "--show", "fakeimpl/scale.py:7:8:drop")
    assert ok.returncode == 0 and "+        pass" in ok.stdout
    bad = kvproof(project, "mutate", "--show", "fakeimpl/scale.py:999:0:drop")
    _no_traceback(bad)
    assert bad.returncode == 2 and "no such mutant now" in bad.stderr


def test_a_broken_marks_file_stops_mutate_before_anything_runs(project, tmp_path):
    marks = project / "cards-mutation" / "equivalent-mutants.yaml"
    keep = marks.read_text()
    try:
        marks.write_text("equivalent:\n  - mutant: fakeimpl/scale.py:6:7:compare\n")
        proc = kvproof(project, "mutate", "--cards", "cards-mutation")
        _no_traceback(proc)
        assert proc.returncode == 2 and "equivalent[0].reason" in proc.stderr
    finally:
        marks.write_text(keep)


def test_a_fixed_sample_of_real_mutants_runs_against_a_real_card(tmp_path):
    """Three mutants of impl's rolling conv tail (RING-T5), seed 0: each applied in a real witness process and
    classified (none may fail to apply); the sample is the same on every run of the same code."""
    args = (
        "mutate",
        "RING-T5",
        "--no-liars",
        "--max-mutants",
        "3",
        "--seed",
        "0",
        "-j",
        "2",
        "--reports",
        str(tmp_path / "reports"),
    )
    env_root = REPO
    proc = kvproof(env_root, *args, "--json", str(tmp_path / "a.json"), timeout=600)
    _no_traceback(proc)
    doc = json.loads((tmp_path / "a.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    m = _card(doc, "RING-T5")["mutation"]
    assert len(m["mutants"]) == 3 and m["candidates"] > 3
    assert all(x["status"] in ("killed", "survived", "timeout", "equivalent") for x in m["mutants"]), m["mutants"]
    assert all(x["path"].startswith("impl/") for x in m["mutants"])
    from harness.mutation import generate as gen
    from harness.mutation.score import Generated, card_mutants
    from harness.select.cards import load_card

    card, _, _ = load_card(REPO / "obligations" / "RING-T5.yaml", REPO)
    again = card_mutants(card, Generated(REPO), 3, 0)
    assert [x.key for x in again.sample] == [x["key"] for x in m["mutants"]]
    assert all(gen.find(REPO, x["key"])[0].change == x["change"] for x in m["mutants"])


def test_the_release_profile_runs_its_mutants_under_ci_with_the_same_statuses(mutated, tmp_path):
    """mutate --profile release: the cards run under release (1000 random examples), the mutants under ci (the
    budget floors are set at, reproducible): traced again under ci, every status as in a ci mutate run."""
    _, ci_doc = mutated
    project = _copy_project(tmp_path / "project")
    proc = kvproof(
        project,
        "mutate",
        *("--cards", "cards-mutation", "--max-mutants", "0", "-j", "2", "--profile", "release", "--json", "r.json"),
        timeout=300,
    )
    _no_traceback(proc)
    doc = json.loads((project / "r.json").read_text())
    assert doc["header"]["profile"] == "release"
    assert "(under the ci profile and Hypothesis seed 0, which the mutants run under)" in proc.stdout + proc.stderr
    for cid in ("FX-SCALE", "FX-LOOP"):
        assert _statuses(_card(doc, cid)) == _statuses(_card(ci_doc, cid))
    assert _card(doc, "FX-SCALE")["verdict"] == "VACUOUS"  # the floor judged by the score the run measured
