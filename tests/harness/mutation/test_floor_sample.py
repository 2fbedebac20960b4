"""A release floor is judged only by a score measured on the floor's own sample (harness.mutation.sample).

Issue 35: ``mutate CARD --max-mutants 1`` scored 100% and replaced a
measured 36%, and ``run --profile release`` was then PROVEN. End to end on
the fixture project's mutation cards: FX-SCALE (8 mutants, 2 of 7 scored
detected, ``min_score: 0.9``) and FX-POLY, written here (more mutants than
the default sample draws, so a sampling seed changes the draw); then the
pieces: the sample's key and texts, the score, the recall, the verdict and
the ledger's queries.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from test_cli_e2e import ENTRY, REPO, _copy_project, _no_traceback, kvproof
from test_ledger import doc_at

from harness.ledger.history import Ledger
from harness.mutation import generate as gen
from harness.mutation import sample as smp
from harness.mutation import score as mutation
from harness.record.document import MutantResult, MutationResult
from harness.request import RunRequest
from harness.select.cards import load_card
from harness.statuses import MutantStatus, Outcome, Verdict
from harness.verdict import CardOutcomes, WitnessOutcome, evaluate
from harness.wire.messages import NodeResult

SCHEMA = json.loads((REPO / "obligations" / "verdicts.schema.json").read_text())
FIXTURE = REPO / "tests" / "fixtures" / "project"
CARDS = ("--cards", "cards-mutation")


def _card(doc, cid):
    return next(c for c in doc["cards"] if c["id"] == cid)


def _json(project: Path, *args: str, name: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    if env is None:
        proc = kvproof(project, *args, "--json", name, timeout=300)
    else:
        full = {**os.environ, "KVPROOF_ROOT": str(project), "COLUMNS": "200", **env}
        full.pop("KVPROOF_CARDS_DIR", None)
        proc = subprocess.run(
            [sys.executable, str(ENTRY), *args, "--json", name],
            cwd=project,
            env=full,
            capture_output=True,
            text=True,
            timeout=300,
        )
    _no_traceback(proc)
    doc = json.loads((project / name).read_text())
    jsonschema.validate(doc, SCHEMA)
    return proc, doc


def _status(project: Path) -> str:
    """``status`` with room for every column on one line."""
    env = {**os.environ, "KVPROOF_ROOT": str(project), "COLUMNS": "1000"}
    env.pop("KVPROOF_CARDS_DIR", None)
    proc = subprocess.run(
        [sys.executable, str(ENTRY), "status", *CARDS], cwd=project, env=env, capture_output=True, text=True
    )
    _no_traceback(proc)
    return proc.stdout


def _rows(project: Path, cid: str) -> list[tuple]:
    conn = sqlite3.connect(project / "reports" / "ledger.sqlite")
    try:
        return conn.execute(
            "SELECT run_id, score, sample FROM mutation WHERE card_id = ? ORDER BY run_id", (cid,)
        ).fetchall()
    finally:
        conn.close()


def _seed_drawing_one_of(keys: set[str]) -> tuple[int, str]:
    """A sampling seed whose one-mutant draw of FX-SCALE is one of ``keys`` (a killed mutant: 100%)."""
    card, _, _ = load_card(FIXTURE / "cards-mutation" / "FX-SCALE.yaml", FIXTURE)
    g = mutation.Generated(FIXTURE)
    for seed in range(100):
        (m,) = mutation.card_mutants(card, g, 1, seed).sample
        if m.key in keys:
            return seed, m.key
    raise AssertionError("no seed draws a killed mutant")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """The fixture project after one default ``mutate``: every card's score on its floor's sample."""
    project = _copy_project(tmp_path_factory.mktemp("floor") / "project")
    proc, doc = _json(project, "mutate", *CARDS, "-j", "2", name="full.json")
    return project, proc, doc


def _killed(doc) -> set[str]:
    return {m["key"] for m in _card(doc, "FX-SCALE")["mutation"]["mutants"] if m["status"] == "killed"}


# ---------------------------------------------------------------- end to end


def test_the_full_default_sample_judges_the_floor(measured):
    project, proc, doc = measured
    m = _card(doc, "FX-SCALE")["mutation"]
    assert m["sample"] == smp.FLOOR.key and m["other_sample"] == ""
    assert (m["score"], m["holds"]) == (round(2 / 7, 4), False)
    assert _card(doc, "FX-SCALE")["verdict"] == "VACUOUS"
    _, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel0.json")
    card = _card(rel, "FX-SCALE")
    assert card["verdict"] == "VACUOUS" and card["reason"].startswith("mutation score 0.29 < min_score 0.90")


def test_max_mutants_1_after_a_full_measurement_changes_no_judged_score_nor_makes_release_proven(measured):
    project, _, full = measured
    seed, key = _seed_drawing_one_of(_killed(full))
    before = _rows(project, "FX-SCALE")
    proc, doc = _json(project, "mutate", "FX-SCALE", *CARDS, "--max-mutants", "1", "--seed", str(seed), name="p.json")
    card = _card(doc, "FX-SCALE")
    m = card["mutation"]
    assert [x["key"] for x in m["mutants"]] == [key] and m["score"] == 1.0  # the partial sample scores 100%
    assert m["holds"] is None and m["sample"] != smp.FLOOR.key
    assert m["other_sample"] == "measured on a partial sample (at most 1 mutant(s) a card, not at most 40" + (
        f"; sampling seed {seed}, not 0)" if seed else ")"
    )
    assert card["verdict"] == "VACUOUS"  # judged by the ledger's score on the floor's sample, in this very run
    assert card["reason"].startswith("mutation score 0.29 < min_score 0.90")
    rows = _rows(project, "FX-SCALE")
    assert rows[: len(before)] == before and rows[-1][1:] == (1.0, m["sample"])  # both kept, the full one judges

    _, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel1.json")
    card = _card(rel, "FX-SCALE")
    assert card["verdict"] == "VACUOUS" and card["mutation"]["score"] == round(2 / 7, 4)
    assert card["mutation"]["measured_run"] == before[-1][0]
    line = next(x for x in _status(project).splitlines() if "FX-SCALE" in x)
    assert "0.29 BELOW (run #1," in line and "; then 1.00 measured on a partial sample (at most 1" in line, line


def test_a_single_mutant_run_never_judges_nor_replaces(measured):
    project, _, full = measured
    key = sorted(_killed(full))[0]
    before = _rows(project, "FX-SCALE")
    _, doc = _json(project, "mutate", "FX-SCALE", *CARDS, "--mutant", key, name="one.json")
    card = _card(doc, "FX-SCALE")
    assert card["mutation"]["partial"] and card["mutation"]["score"] == 1.0 and card["mutation"]["holds"] is None
    assert "given with --mutant" in card["mutation"]["other_sample"]
    assert card["verdict"] == "VACUOUS" and _rows(project, "FX-SCALE") == before  # never recorded as a score
    _, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel2.json")
    assert _card(rel, "FX-SCALE")["verdict"] == "VACUOUS"


def test_mutants_judged_under_other_conditions_are_another_sample(measured):
    """Another Hypothesis seed for the mutants, another --timeout: each mutant's status could differ."""
    project, _, _ = measured
    for args, says in (
        (("--hypothesis-seed", "3"), "mutants under ci with Hypothesis seed 3, not ci with seed 0"),
        (("--timeout", "30"), "--timeout 30 s, not 60"),
    ):
        _, doc = _json(project, "mutate", "FX-SCALE", *CARDS, *args, name="cond.json")
        card = _card(doc, "FX-SCALE")
        assert card["mutation"]["other_sample"] == f"measured on another sample ({says})"
        assert card["mutation"]["holds"] is None and card["verdict"] == "VACUOUS"  # the floor sample's score judges


def test_another_seed_drawing_the_same_mutants_is_the_floor_sample(measured):
    """FX-SCALE has 8 mutants, fewer than 40: every seed and --max-mutants 0 draw them all, as the floor does."""
    project, _, full = measured
    _, doc = _json(project, "mutate", "FX-SCALE", *CARDS, "--seed", "7", "--changed", name="s7.json")
    m = _card(doc, "FX-SCALE")["mutation"]
    assert m["sample"] == smp.FLOOR.key and m["holds"] is False and m["seed"] == 7
    assert m["previous_score"] == _card(full, "FX-SCALE")["mutation"]["score"]


def test_without_a_floor_sample_score_release_stays_unverified_and_names_the_command(measured, tmp_path):
    project = _copy_project(tmp_path / "project")
    seed, _ = _seed_drawing_one_of(_killed(measured[2]))
    _json(project, "mutate", "FX-SCALE", *CARDS, "--max-mutants", "1", "--seed", str(seed), name="p.json")
    proc, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel.json")
    card = _card(rel, "FX-SCALE")
    assert proc.returncode == 1 and card["verdict"] == "UNVERIFIED", card["reason"]
    assert "was measured on a partial sample (at most 1 mutant(s) a card, not at most 40" in card["reason"]
    assert card["reason"].endswith("run_obligations.py mutate FX-SCALE`")  # as it runs from the project
    _, ci = _json(project, "run", "FX-SCALE", *CARDS, name="ci.json")
    assert _card(ci, "FX-SCALE")["verdict"] == "PROVEN"  # ci does not enforce floors; the score judges nothing
    assert _card(ci, "FX-SCALE")["mutation"]["other_sample"].startswith("measured on a partial sample")
    _json(project, "mutate", "FX-SCALE", *CARDS, name="full.json")  # the command the reason names
    _, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel2.json")
    assert _card(rel, "FX-SCALE")["verdict"] == "VACUOUS"


def test_a_score_measured_under_another_configuration_does_not_judge_the_default_one(tmp_path):
    project = _copy_project(tmp_path / "project")
    _, doc = _json(project, "mutate", "FX-SCALE", *CARDS, name="m.json", env={"KVPROOF_FLOOR_CHECK": "other"})
    assert _card(doc, "FX-SCALE")["verdict"] == "VACUOUS"  # under that configuration, judged
    _, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel.json")
    card = _card(rel, "FX-SCALE")
    assert card["verdict"] == "UNVERIFIED" and card["mutation"]["stale"], card["reason"]
    assert card["reason"].startswith("mutation score not measured on these bytes")


def test_a_score_from_an_older_kvproof_does_not_judge(measured, tmp_path):
    """Rows of a ledger before the sample was recorded (NULL), or of another sampler version, never judge."""
    project = tmp_path / "project"
    shutil.copytree(measured[0], project)
    db = project / "reports" / "ledger.sqlite"
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE mutation SET sample = NULL")
        for run_id, card_id, entry in conn.execute("SELECT run_id, card_id, entry_json FROM verdicts").fetchall():
            e = json.loads(entry)
            if e.get("mutation"):
                e["mutation"].pop("sample", None)
                e["mutation"].pop("other_sample", None)
                conn.execute(
                    "UPDATE verdicts SET entry_json = ? WHERE run_id = ? AND card_id = ?",
                    (json.dumps(e), run_id, card_id),
                )
    conn.close()
    _, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel.json")
    card = _card(rel, "FX-SCALE")
    assert card["verdict"] == "UNVERIFIED" and card["mutation"]["other_sample"] == smp.OLDER
    assert "by an older kvproof" in card["reason"]


POLY = "def poly(x):\n    y = 0\n" + "".join(f"    y = y + x * {k}\n" for k in range(2, 14)) + "    return y\n"
POLY_WITNESS = """from fakeimpl.poly import poly


def test_poly():
    assert poly(3) == 3 * sum(range(2, 14))
"""
POLY_CARD = """id: FX-POLY
title: poly sums its terms
module: fakeimpl.poly
regime: A
theorem: poly(x) is x times the sum of 2..13.
proof: one term a line.
refs: [fakeimpl/poly.py::poly]
witnesses:
  - id: three
    test: witnesses/test_poly.py::test_poly
mutation: {min_score: 0.5}
version: 1
"""


@pytest.fixture
def poly_project(tmp_path):
    project = _copy_project(tmp_path / "project")
    (project / "fakeimpl" / "poly.py").write_text(POLY)
    (project / "witnesses" / "test_poly.py").write_text(POLY_WITNESS)
    (project / "cards-floor").mkdir()
    (project / "cards-floor" / "FX-POLY.yaml").write_text(POLY_CARD)
    return project


def test_a_different_seed_is_another_sample_and_never_hides_the_floor_samples_score(poly_project):
    project, cards = poly_project, ("--cards", "cards-floor")
    card, _, _ = load_card(project / "cards-floor" / "FX-POLY.yaml", project)
    g = mutation.Generated(project)
    assert mutation.card_mutants(card, g, None, 0).candidates > smp.DEFAULT_MAX_MUTANTS
    assert mutation.card_mutants(card, g, 40, 5).sample != mutation.card_mutants(card, g, 40, 0).sample

    _, doc = _json(project, "mutate", *cards, "--seed", "5", "-j", "2", name="s5.json")
    m = _card(doc, "FX-POLY")["mutation"]
    assert m["other_sample"] == "measured on another sample (sampling seed 5, not 0)" and m["holds"] is None
    _, rel = _json(project, "run", *cards, "--profile", "release", name="rel.json")
    assert _card(rel, "FX-POLY")["verdict"] == "UNVERIFIED"
    assert "sampling seed 5, not 0" in _card(rel, "FX-POLY")["reason"]

    _, full = _json(project, "mutate", *cards, "--changed", "-j", "2", name="full.json")  # reuses seed 5's results
    fm = _card(full, "FX-POLY")["mutation"]
    assert fm["sample"] == smp.FLOOR.key and fm["holds"] is True and fm["previous_score"] is None
    assert any(x["reused_from"] is not None for x in fm["mutants"])
    _json(project, "mutate", *cards, "--seed", "5", "--max-mutants", "2", name="again.json")
    _, rel = _json(project, "run", *cards, "--profile", "release", name="rel2.json")
    card = _card(rel, "FX-POLY")
    assert card["verdict"] == "PROVEN" and card["mutation"]["score"] == fm["score"]
    assert card["mutation"]["sample"] == smp.FLOOR.key


# ---------------------------------------------------------------- the pieces


def test_the_floor_sample_is_the_default_of_mutate_and_of_a_run():
    assert smp.FLOOR.max_mutants == mutation.DEFAULT_MAX_MUTANTS
    assert smp.FLOOR.timeout_s == RunRequest.__dataclass_fields__["timeout"].default
    from harness.mutation.stage import MUTANT_SEED, mutant_profile
    from harness.request import MutateOptions

    opts = MutateOptions()
    assert (opts.seed, opts.max_mutants, opts.only) == (smp.FLOOR.seed, smp.FLOOR.max_mutants, ())
    assert mutant_profile("ci") == mutant_profile("release") == smp.FLOOR.profile
    assert MUTANT_SEED == smp.FLOOR.hypothesis_seed


def test_every_parameter_that_changes_the_draw_or_the_judging_changes_the_key():
    base = smp.FLOOR
    variants = [
        replace(base, seed=1),
        replace(base, max_mutants=1),
        replace(base, max_mutants=None),
        replace(base, chosen=("a.py:1:0:arith",)),
        replace(base, profile="release"),
        replace(base, hypothesis_seed=7),
        replace(base, timeout_s=30.0),
        replace(base, sampler=base.sampler + 1),
    ]
    keys = {v.key for v in variants}
    assert len(keys) == len(variants) and base.key not in keys
    assert all(v.key.startswith(v.conditions + ";") for v in [base, *variants])
    texts = [smp.difference(v) for v in variants]
    assert texts[0] == "measured on another sample (sampling seed 1, not 0)"
    assert texts[1] == "measured on a partial sample (at most 1 mutant(s) a card, not at most 40)"
    assert texts[2] == "measured on another sample (every mutant, not at most 40)"
    assert texts[3] == "measured on a partial sample (only the 1 mutant key(s) given with --mutant)"
    assert "release with Hypothesis seed 0" in texts[4] and "Hypothesis seed 7" in texts[5]
    assert "--timeout 30 s" in texts[6] and "kvproof sampler version 2, not 1" in texts[7]


def test_a_score_is_on_the_floor_sample_only_when_it_drew_exactly_its_mutants_judged_alike():
    floor = {"a", "b", "c"}
    assert smp.on_floor(replace(smp.FLOOR, max_mutants=None, seed=9), ["c", "b", "a"], floor)
    assert not smp.on_floor(smp.FLOOR, ["a", "b", "c", "d"], floor)  # a superset: another sample
    assert not smp.on_floor(replace(smp.FLOOR, max_mutants=2), ["a", "b"], floor)
    assert not smp.on_floor(replace(smp.FLOOR, chosen=("a", "b", "c")), ["a", "b", "c"], floor)
    assert not smp.on_floor(replace(smp.FLOOR, hypothesis_seed=1), ["a", "b", "c"], floor)


def _result(status: MutantStatus, i: int) -> MutantResult:
    return MutantResult(f"f.py:{i}:0:arith", "f.py", i, "f", "arith", "a -> b", status)


@pytest.fixture
def scale_card():
    card, _, _ = load_card(FIXTURE / "cards-mutation" / "FX-SCALE.yaml", FIXTURE)
    return card


def _summary(card, statuses, sample=smp.FLOOR, on_floor=None) -> MutationResult:
    cm = mutation.CardMutants(card, ("fakeimpl/scale.py::scale",), 8, ())
    return mutation.summarize(
        cm,
        [_result(s, i) for i, s in enumerate(statuses)],
        seed=sample.seed,
        max_mutants=sample.max_mutants,
        bound_digest="d" * 64,
        measured_at="2026-11-30T00:00:00Z",
        sample=sample,
        on_floor=on_floor,
    )


def _proven():
    node = NodeResult("witnesses/test_scale.py::test_scale_small", Outcome.PASSED, 0.1, {"max_abs_delta": 0})
    return CardOutcomes(witnesses=(WitnessOutcome("small", (node,)),))


def test_a_partial_sample_score_neither_passes_nor_fails_a_floor(scale_card):
    one = replace(smp.FLOOR, max_mutants=1)
    high = _summary(scale_card, [MutantStatus.KILLED], one, on_floor=False)
    low = _summary(scale_card, [MutantStatus.SURVIVED], one, on_floor=False)
    for m in (high, low):
        assert m.holds is None and m.sample == one.key and not mutation.judges(m)
        assert evaluate(scale_card, _proven(), m).verdict == Verdict.PROVEN  # ci: floors not enforced, as unmeasured
        v = evaluate(scale_card, _proven(), m, floors=True)
        assert v.verdict == Verdict.UNVERIFIED
        assert "was measured on a partial sample (at most 1 mutant(s) a card, not at most 40)" in v.reason
    full = _summary(scale_card, [MutantStatus.KILLED, MutantStatus.SURVIVED])
    assert full.sample == smp.FLOOR.key and mutation.judges(full) and full.holds is False
    assert evaluate(scale_card, _proven(), full, floors=True).verdict == Verdict.VACUOUS
    drew_alike = _summary(scale_card, [MutantStatus.KILLED], replace(smp.FLOOR, max_mutants=None), on_floor=True)
    assert drew_alike.sample == smp.FLOOR.key and drew_alike.holds is True


def test_a_recalled_score_of_another_or_an_unknown_sample_never_judges(scale_card):
    full = _summary(scale_card, [MutantStatus.KILLED])
    assert mutation.recalled(scale_card, full, 3, "d" * 64).holds is True
    older = replace(full, sample="", other_sample="")
    r = mutation.recalled(scale_card, older, 3, "d" * 64)
    assert r.holds is None and r.other_sample == smp.OLDER
    bumped = replace(full, sample=full.sample.replace("sampler 1;", "sampler 0;"))
    r = mutation.recalled(scale_card, bumped, 3, "d" * 64)
    assert r.holds is None and r.other_sample.startswith("measured on another sample")


def test_the_ledger_keeps_both_and_the_floor_sample_query_finds_the_full_one(tmp_path):
    full_sample, one = smp.FLOOR, replace(smp.FLOOR, max_mutants=1)

    def doc(started: str, sample: smp.Sample, score: float, digest: str = "d" * 64):
        d = doc_at(started)
        m = MutationResult(
            score, 0.9, None, 1, 0, 0, 0, 0, 8, sample.seed, sample.max_mutants, (), (), bound_digest=digest
        )
        m = replace(m, sample=smp.stored_key(sample, sample == smp.FLOOR))
        return replace(d, cards=(replace(d.cards[0], mutation=m), *d.cards[1:]))

    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        first = ledger.record(doc("2026-12-01T00:00:00Z", full_sample, 0.36))
        ledger.record(doc("2026-12-02T00:00:00Z", one, 1.0))
        cid = doc_at("x").cards[0].id
        assert ledger.last_mutation(cid)[2].score == 1.0  # the newest, whatever its sample
        run_id, _, judge = ledger.last_mutation(cid, "d" * 64, sample=smp.FLOOR.key)
        assert (run_id, judge.score) == (first, 0.36)
        assert ledger.last_mutation(cid, "e" * 64, sample=smp.FLOOR.key) is None
        assert ledger.last_mutation(cid, conditions=smp.FLOOR.conditions)[2].score == 1.0
        assert ledger.last_mutation(cid, conditions=replace(smp.FLOOR, hypothesis_seed=3).conditions) is None
        ledger.conn.execute("UPDATE mutation SET sample = NULL")  # an older kvproof's rows
        assert ledger.last_mutation(cid, sample=smp.FLOOR.key) is None
        assert ledger.last_mutation(cid, conditions=smp.FLOOR.conditions) is None


def test_the_sampler_version_is_pinned_to_what_it_draws():
    """If this fails, generation or sampling changed which mutants a (seed, max) draws: bump SAMPLER_VERSION (every
    score measured before stops judging floors) and update the keys here."""
    card, _, _ = load_card(FIXTURE / "cards-mutation" / "FX-SCALE.yaml", FIXTURE)
    g = mutation.Generated(FIXTURE)
    assert smp.SAMPLER_VERSION == 1
    assert [m.key for m in mutation.card_mutants(card, g, None, 0).sample] == [
        "fakeimpl/scale.py:5:4:drop",
        "fakeimpl/scale.py:5:8:arith",
        "fakeimpl/scale.py:6:7:compare",
        "fakeimpl/scale.py:6:11:const+1",
        "fakeimpl/scale.py:6:11:const-1",
        "fakeimpl/scale.py:7:8:drop",
        "fakeimpl/scale.py:7:12:const+1",
        "fakeimpl/scale.py:7:12:const-1",
    ]
    assert [m.key for m in gen.sample(mutation.card_mutants(card, g, None, 0).sample, 3, 0, card.id)] == [
        "fakeimpl/scale.py:6:7:compare",
        "fakeimpl/scale.py:7:8:drop",
        "fakeimpl/scale.py:7:12:const+1",
    ]


# ---------------------------------------------------------------- the marks a score is bound to


MARKS = "cards-mutation/equivalent-mutants.yaml"


def _mark(project: Path, key: str, cards: str = "") -> None:
    """Append an equivalence mark for ``key`` (for ``cards``, a YAML list, when given) to the fixture's marks."""
    text = f'  - mutant: {key}\n    reason: "marked by the test, whatever its witnesses say"\n'
    with (project / MARKS).open("a") as f:
        f.write(text + (f"    cards: {cards}\n" if cards else ""))


def _measured_copy(measured, tmp_path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(measured[0], project)
    return project


def _survivors(doc) -> list[str]:
    return sorted(m["key"] for m in _card(doc, "FX-SCALE")["mutation"]["mutants"] if m["status"] == "survived")


def _judging_run(project: Path) -> int:
    """The run of FX-SCALE's newest score on the floor's sample (the module's runs before may have added some)."""
    return max(run_id for run_id, _, sample in _rows(project, "FX-SCALE") if sample == smp.FLOOR.key)


def _status_line(project: Path, cid: str) -> str:
    return next(x for x in _status(project).splitlines() if f"{cid} " in x)


def test_marking_a_survivor_after_the_measurement_makes_the_score_stale_until_measured_again(measured, tmp_path):
    """A mark takes a survivor out of the denominator: it would raise the stored 0.29 without a new measurement."""
    project = _measured_copy(measured, tmp_path)
    survivor = _survivors(measured[2])[0]
    _mark(project, survivor, "[FX-SCALE]")
    assert "STALE (measured with other equivalence marks)" in _status_line(project, "FX-SCALE")

    proc, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel.json")
    card = _card(rel, "FX-SCALE")
    assert proc.returncode == 1 and card["verdict"] == "UNVERIFIED", card["reason"]
    assert card["mutation"]["stale"] and card["mutation"]["stale_why"] == mutation.MARKS_CHANGED
    assert card["mutation"]["holds"] is None and mutation.MARKS_CHANGED in card["reason"]
    assert "run_obligations.py mutate FX-SCALE` (with --changed" in card["reason"]
    _, ci = _json(project, "run", "FX-SCALE", *CARDS, name="ci.json")
    assert _card(ci, "FX-SCALE")["verdict"] == "PROVEN"  # a stale score judges nothing, under ci as ever

    _, again = _json(project, "mutate", "FX-SCALE", *CARDS, "--changed", name="again.json")
    m = _card(again, "FX-SCALE")["mutation"]
    assert all(x["reused_from"] is not None for x in m["mutants"])  # --changed reuses, and re-decides with the mark
    assert next(x for x in m["mutants"] if x["key"] == survivor)["status"] == "equivalent"
    assert (m["score"], m["equivalent"], m["holds"]) == (round(2 / 6, 4), 2, False)
    assert m["marks_digest"] != _card(measured[2], "FX-SCALE")["mutation"]["marks_digest"]
    _, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel2.json")
    card = _card(rel, "FX-SCALE")
    assert card["verdict"] == "VACUOUS" and card["reason"].startswith("mutation score 0.33 < min_score 0.90")
    assert "STALE" not in _status_line(project, "FX-SCALE")


def test_removing_a_mark_the_score_was_measured_with_makes_it_stale(measured, tmp_path):
    project = _measured_copy(measured, tmp_path)
    judged = _judging_run(project)
    marks = (project / MARKS).read_text()
    marked = "  - mutant: fakeimpl/scale.py:6:7:compare\n"
    (project / MARKS).write_text(marks.replace(marked + marks.split(marked)[1].split("  - ")[0], ""))
    assert "6:7:compare" not in (project / MARKS).read_text() and "34:19:arith" in (project / MARKS).read_text()

    _, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel.json")
    card = _card(rel, "FX-SCALE")
    assert card["verdict"] == "UNVERIFIED" and mutation.MARKS_CHANGED in card["reason"], card["reason"]
    _, again = _json(project, "mutate", "FX-SCALE", *CARDS, "--changed", name="again.json")
    m = _card(again, "FX-SCALE")["mutation"]
    unmarked = next(x for x in m["mutants"] if x["key"] == "fakeimpl/scale.py:6:7:compare")
    assert unmarked["status"] == "survived" and unmarked["reused_from"] is not None
    assert (m["score"], m["equivalent"]) == (0.25, 0)

    (project / MARKS).write_text(marks)  # the marks of the first measurement again: its score judges again
    _, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel2.json")
    card = _card(rel, "FX-SCALE")
    assert card["verdict"] == "VACUOUS" and card["mutation"]["score"] == round(2 / 7, 4)
    assert card["mutation"]["measured_run"] == judged


def test_a_mark_for_another_cards_code_or_for_another_card_leaves_the_score_fresh(measured, tmp_path):
    project = _measured_copy(measured, tmp_path)
    judged = _judging_run(project)
    loop, _, _ = load_card(project / "cards-mutation" / "FX-LOOP.yaml", project)
    loop_key = mutation.card_mutants(loop, mutation.Generated(project), None, 0).sample[0].key
    _mark(project, loop_key)  # count_up's mutant: FX-LOOP's code, not FX-SCALE's
    _mark(project, _survivors(measured[2])[0], "[FX-LOOP]")  # in scale, but for FX-LOOP only
    _mark(project, "fakeimpl/scale.py:30:15:arith")  # Box.half: no card claims it
    assert "STALE" not in _status_line(project, "FX-SCALE")
    _, rel = _json(project, "run", "FX-SCALE", *CARDS, "--profile", "release", name="rel.json")
    card = _card(rel, "FX-SCALE")
    assert card["verdict"] == "VACUOUS" and not card["mutation"]["stale"], card["reason"]
    assert card["mutation"]["measured_run"] == judged


IDENT_CARD = """id: FX-IDENT
title: ident returns its argument
module: fakeimpl.ident
regime: A
theorem: ident(x) is x.
proof: it returns it.
refs: [fakeimpl/ident.py::ident]
witnesses:
  - id: same
    test: witnesses/test_ident.py::test_ident
mutation: {min_score: 0.5}
version: 1
"""


def test_a_floor_that_scored_no_mutant_never_holds_under_release(tmp_path):
    """ident's code yields no mutant: its floor judges nothing, so release cannot call it met."""
    project = _copy_project(tmp_path / "project")
    (project / "fakeimpl" / "ident.py").write_text("def ident(x):\n    return x\n")
    (project / "witnesses" / "test_ident.py").write_text(
        "from fakeimpl.ident import ident\n\n\ndef test_ident():\n    assert ident(3) == 3\n"
    )
    (project / "cards-ident").mkdir()
    (project / "cards-ident" / "FX-IDENT.yaml").write_text(IDENT_CARD)
    cards = ("--cards", "cards-ident")
    _, doc = _json(project, "mutate", *cards, name="m.json")
    card = _card(doc, "FX-IDENT")
    assert card["mutation"]["score"] is None and card["mutation"]["candidates"] == 0
    assert card["verdict"] == "PROVEN"  # ci does not enforce floors
    proc, rel = _json(project, "run", *cards, "--profile", "release", name="rel.json")
    card = _card(rel, "FX-IDENT")
    assert proc.returncode == 1 and card["verdict"] == "UNVERIFIED", card["reason"]
    assert "scored no mutant: the code the card claims yields none (0 candidates)" in card["reason"]
    env = {**os.environ, "KVPROOF_ROOT": str(project), "COLUMNS": "1000"}
    env.pop("KVPROOF_CARDS_DIR", None)
    out = subprocess.run(
        [sys.executable, str(ENTRY), "status", *cards], cwd=project, env=env, capture_output=True, text=True
    ).stdout
    assert "– (no mutant scored) (run #1" in out, out


# ---------------------------------------------------------------- the binding, piece by piece


def _marks_file(folder: Path, *entries: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "equivalent-mutants.yaml").write_text(
        "equivalent:\n" + "".join(entries) if entries else "equivalent: []\n"
    )
    return folder


def _entry(key: str, reason: str = "no input tells them apart", change: str = "", cards: str = "") -> str:
    return (
        f"  - mutant: {key}\n    reason: {reason}\n"
        + (f'    change: "{change}"\n' if change else "")
        + (f"    cards: {cards}\n" if cards else "")
    )


def test_a_cards_claimed_spans_are_the_lines_of_its_functions(scale_card):
    assert mutation.claimed_spans(scale_card, FIXTURE) == {"fakeimpl/scale.py": ((4, 8),)}
    box = replace(scale_card, refs=("fakeimpl/scale.py::Box",))  # a class ref: every method
    assert mutation.claimed_spans(box, FIXTURE) == {"fakeimpl/scale.py": ((21, 22), (25, 26), (29, 30), (33, 34))}


def test_the_marks_digest_binds_the_marks_for_the_card_on_its_claimed_lines_only(tmp_path):
    from harness.mutation.marks import marks_digest

    spans = {"impl/a.py": ((10, 20),)}

    def digest(*entries: str) -> str:
        return marks_digest(_marks_file(tmp_path / "c", *entries), "CARD", spans)

    none = digest()
    assert marks_digest(tmp_path / "absent", "CARD", spans) == none  # no file: no marks
    inside = digest(_entry("impl/a.py:12:4:arith"))
    assert inside != none
    assert digest(_entry("impl/a.py:21:4:arith")) == none  # outside the claimed lines
    assert digest(_entry("impl/b.py:12:4:arith")) == none  # another file
    assert digest(_entry("impl/a.py:12:4:arith", cards="[OTHER]")) == none  # for another card
    assert digest(_entry("impl/a.py:12:4:arith", cards="[OTHER, CARD]")) == inside  # for this one, among others
    assert digest(_entry("impl/a.py:12:4:arith", reason="another reason, same mark")) == inside  # reasons explain
    assert digest(_entry("impl/a.py:12:4:arith", change="a + b -> a - b")) != inside  # a pin decides if it applies
    both = digest(_entry("impl/a.py:12:4:arith"), _entry("impl/a.py:14:4:arith"))
    assert both != inside and both == digest(_entry("impl/a.py:14:4:arith"), _entry("impl/a.py:12:4:arith"))
    assert digest(_entry("impl/a.py:12:4:arith"), _entry("impl/b.py:1:0:arith")) == inside  # unrelated: no change
    broken = digest(_entry("impl/a.py:12:4:arith"), _entry("impl/a.py:12:4:arith"))  # mutate refuses duplicates
    assert broken.startswith("invalid marks file ") and broken != digest("  - mutant: 3\n")
    (tmp_path / "c" / "equivalent-mutants.yaml").write_text("equivalent: [\n")
    assert marks_digest(tmp_path / "c", "CARD", spans).startswith("invalid marks file ")


def test_a_recalled_score_measured_with_other_marks_is_stale_and_never_judges(scale_card):
    full = replace(_summary(scale_card, [MutantStatus.KILLED]), marks_digest="m" * 64)
    fresh = mutation.recalled(scale_card, full, 3, "d" * 64, "m" * 64)
    assert not fresh.stale and fresh.holds is True and mutation.judges(fresh)
    assert mutation.recalled(scale_card, full, 3, "d" * 64).holds is True  # None: marks not checked
    other = mutation.recalled(scale_card, full, 3, "d" * 64, "n" * 64)
    assert other.stale and other.holds is None and other.stale_why == mutation.MARKS_CHANGED
    assert not mutation.judges(other)
    v = evaluate(scale_card, _proven(), other, floors=True)
    assert v.verdict == Verdict.UNVERIFIED and mutation.MARKS_CHANGED in v.reason
    older = mutation.recalled(scale_card, replace(full, marks_digest=""), 3, "d" * 64, "m" * 64)
    assert older.stale and older.stale_why == mutation.MARKS_UNKNOWN
    moved = mutation.recalled(scale_card, full, 3, "e" * 64, "n" * 64)  # other bytes: said as before
    assert moved.stale and moved.stale_why == ""
    assert evaluate(scale_card, _proven(), moved, floors=True).reason.startswith("mutation score not measured")


def test_a_score_of_none_on_the_floor_sample_never_meets_a_floor(scale_card):
    for statuses, says in (
        ([MutantStatus.EQUIVALENT, MutantStatus.ERROR], "of the 2 sampled, 1 equivalent and 1 error"),
        ([], "the code the card claims yields none (0 candidates)"),
    ):
        m = _summary(scale_card, statuses)
        if not statuses:
            m = replace(m, candidates=0)
        assert m.score is None and m.holds is None and mutation.judges(m)
        assert evaluate(scale_card, _proven(), m).verdict == Verdict.PROVEN  # ci: shown, not enforced
        v = evaluate(scale_card, _proven(), m, floors=True)
        assert v.verdict == Verdict.UNVERIFIED and "scored no mutant" in v.reason and says in v.reason, v.reason


def test_status_says_no_mutant_scored_errors_and_other_marks():
    from harness.plan.status import mutation_text

    base = MutationResult(0.5, 0.9, None, 1, 1, 0, 0, 2, 8, 0, 40, (), (), bound_digest="d", sample=smp.FLOOR.key)
    base = replace(base, mutants=tuple(_result(MutantStatus.KILLED, i) for i in range(4)), marks_digest="m")
    text = mutation_text(0.9, (4, "2026-12-01T00:00:00Z", base), "d", current_marks="m")
    assert text == "0.50 (2 of 4 mutants error: not scored) BELOW (run #4, 2026-12-01, min 0.90)"
    text = mutation_text(0.9, (4, "2026-12-01T00:00:00Z", base), "d", current_marks="x")
    assert "BELOW STALE (measured with other equivalence marks) (run #4" in text
    none = replace(base, score=None, killed=0, survived=0, error=0)
    assert mutation_text(0.9, (4, "2026-12-01", none), "d").startswith("– (no mutant scored) (run #4")


def test_the_ledger_finds_the_score_measured_with_the_marks_asked_for(tmp_path):
    def doc(started: str, marks: str, score: float):
        d = doc_at(started)
        m = MutationResult(score, 0.9, None, 1, 0, 0, 0, 0, 8, 0, 40, (), (), bound_digest="d" * 64)
        m = replace(m, sample=smp.FLOOR.key, marks_digest=marks)
        return replace(d, cards=(replace(d.cards[0], mutation=m), *d.cards[1:]))

    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        first = ledger.record(doc("2026-12-01T00:00:00Z", "a" * 64, 0.36))
        second = ledger.record(doc("2026-12-02T00:00:00Z", "b" * 64, 0.5))
        cid = doc_at("x").cards[0].id
        assert ledger.last_mutation(cid, "d" * 64, sample=smp.FLOOR.key)[0] == second
        assert ledger.last_mutation(cid, "d" * 64, sample=smp.FLOOR.key, marks="a" * 64)[0] == first
        assert ledger.last_mutation(cid, "d" * 64, sample=smp.FLOOR.key, marks="c" * 64) is None
        assert ledger.last_mutation(cid, "d" * 64, sample=smp.FLOOR.key, marks="b" * 64)[2].marks_digest == "b" * 64
