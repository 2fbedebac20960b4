"""Mutation analysis (harness/mutation/score.py): what a card claims, how a mutant's run is classified, the score,
the equivalence marks and the verdict rule. The end-to-end run on the fixture project is
tests/e2e/test_mutate_e2e.py."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from harness.execute.jobs import JobResult
from harness.mutation import generate as mutants
from harness.mutation import score as mutation
from harness.mutation.marks import Mark, load_marks
from harness.record.document import MutantResult
from harness.select.cards import load_card
from harness.statuses import MutantStatus, Outcome, Verdict
from harness.verdict import CardOutcomes, WitnessOutcome, evaluate
from harness.wire.messages import CollectError, NodeResult

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "project"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def scale_card():
    card, problems, _ = load_card(FIXTURE / "cards-mutation" / "FX-SCALE.yaml", FIXTURE)
    assert not problems
    return card


@pytest.fixture(scope="module")
def a_mutant():
    return next(m for m in mutants.generate(FIXTURE, "fakeimpl/scale.py", ["scale"]) if m.operator == "arith")


NODE = "witnesses/test_scale.py::test_scale_small"


def _res(outcome=Outcome.PASSED, evidence=None, message="", **kw) -> JobResult:
    res = JobResult(duration=1.25, **kw)
    if outcome is not None:
        res.results[NODE] = NodeResult(
            NODE, outcome, 0.1, evidence if evidence is not None else {"max_abs_delta": 0}, message
        )
    return res


# ---------------------------------------------------------------- classification


@pytest.mark.parametrize(
    "res, status, killer, detail",
    [
        (_res(Outcome.FAILED, message="AssertionError: 1.5 != 6"), MutantStatus.KILLED, "small", "AssertionError"),
        (_res(evidence={"max_abs_delta": 4.5}), MutantStatus.KILLED, "small", "max_abs_delta = 4.5"),  # a bound alone
        (_res(Outcome.ERROR, message="timeout: still running after 3 s"), MutantStatus.TIMEOUT, "small", "timeout"),
        (
            _res(Outcome.ERROR, message="ZeroDivisionError: division by zero"),
            MutantStatus.KILLED,
            "small",
            "ZeroDivision",
        ),
        (
            _res(None, collect_errors=[CollectError("witnesses/test_scale.py", "E   ImportError: boom")]),
            MutantStatus.KILLED,
            "small",
            "collection error",
        ),
        (_res(None, stopped="the interpreter died in something"), MutantStatus.KILLED, "crash", "not run"),
        (
            _res(None, stopped="pytest was silent for 60 s outside any test (collection or fixture teardown hung)"),
            MutantStatus.TIMEOUT,
            "collection",
            "silent",
        ),
        (_res(None, liar_error="mutant='x': no such mutant now"), MutantStatus.ERROR, "", "could not be applied"),
        (_res(), MutantStatus.SURVIVED, "", "every witness passed"),
        (_res(Outcome.SKIPPED, message="no oracle"), MutantStatus.SURVIVED, "", "small skipped: checked nothing"),
    ],
)
def test_classification(scale_card, a_mutant, res, status, killer, detail):
    got = mutation.classify(scale_card, a_mutant, res, None, FIXTURE)
    assert (got.status, got.killer) == (status, killer)
    assert detail in got.detail
    assert got.duration_s == 1.25 and got.key == a_mutant.key
    assert bool(got.diff) == (status != MutantStatus.KILLED)  # survivors carry their diff for the report


def test_a_marked_survivor_is_equivalent_with_its_reason_and_a_killed_one_stays_killed(scale_card, a_mutant):
    mark = Mark(a_mutant.key, "no input can tell them apart", (), 3)
    assert mutation.classify(scale_card, a_mutant, _res(), mark, FIXTURE).status == MutantStatus.EQUIVALENT
    assert mutation.classify(scale_card, a_mutant, _res(), mark, FIXTURE).detail == mark.reason
    killed = mutation.classify(scale_card, a_mutant, _res(Outcome.FAILED, message="AssertionError"), mark, FIXTURE)
    assert killed.status == MutantStatus.KILLED


# ---------------------------------------------------------------- score and verdict


def _result(status: MutantStatus, i: int = 0) -> MutantResult:
    return MutantResult(f"f.py:{i}:0:arith", "f.py", i, "f", "arith", "a -> b", status)


def test_score_counts_timeouts_as_detected_and_leaves_equivalent_and_error_out():
    rs = [
        _result(MutantStatus.KILLED, 1),
        _result(MutantStatus.TIMEOUT, 2),
        _result(MutantStatus.SURVIVED, 3),
        _result(MutantStatus.EQUIVALENT, 4),
        _result(MutantStatus.ERROR, 5),
    ]
    assert mutation.score_of(rs) == round(2 / 3, 4)
    assert mutation.score_of([_result(MutantStatus.EQUIVALENT)]) is None


def _summary(card, statuses):
    cm = mutation.CardMutants(card, ("fakeimpl/scale.py::scale",), 8, ())
    return mutation.summarize(
        cm,
        [_result(s, i) for i, s in enumerate(statuses)],
        seed=0,
        max_mutants=40,
        bound_digest="d" * 64,
        measured_at="2026-11-30T00:00:00Z",
    )


def _proven_outcomes():
    node = NodeResult(NODE, Outcome.PASSED, 0.1, {"max_abs_delta": 0})
    return CardOutcomes(witnesses=(WitnessOutcome("small", (node,)),))


def test_a_score_below_min_score_makes_a_proven_card_vacuous_with_its_own_reason(scale_card):
    low = _summary(scale_card, [MutantStatus.KILLED, MutantStatus.SURVIVED])
    assert (low.score, low.min_score, low.holds) == (0.5, 0.9, False)
    v = evaluate(scale_card, _proven_outcomes(), low)
    assert v.verdict == Verdict.VACUOUS
    assert v.reason.startswith(
        "mutation score 0.50 < min_score 0.90: 1 of 2 mutants of the code it claims pass "
        "every witness; e.g. f.py:1 f: a -> b"
    )
    high = _summary(scale_card, [MutantStatus.KILLED] * 9 + [MutantStatus.SURVIVED])
    assert high.holds is True and evaluate(scale_card, _proven_outcomes(), high).verdict == Verdict.PROVEN
    assert evaluate(scale_card, _proven_outcomes(), None).verdict == Verdict.PROVEN  # never measured: no effect


def test_a_stale_score_does_not_judge_and_a_recalled_one_is_judged_against_the_current_floor(scale_card):
    low = _summary(scale_card, [MutantStatus.KILLED, MutantStatus.SURVIVED])
    stale = mutation.recalled(scale_card, low, 7, "e" * 64)
    assert stale.stale and stale.holds is None and stale.measured_run == 7
    fresh = mutation.recalled(replace(scale_card, min_score=0.5), low, 7, "d" * 64)
    assert not fresh.stale and fresh.holds is True and fresh.min_score == 0.5


def test_a_failed_card_stays_failed_whatever_its_score(scale_card):
    node = NodeResult(NODE, Outcome.FAILED, 0.1, {}, "AssertionError")
    low = _summary(scale_card, [MutantStatus.SURVIVED])
    assert (
        evaluate(scale_card, CardOutcomes(witnesses=(WitnessOutcome("small", (node,)),)), low).verdict == Verdict.FAILED
    )


# ---------------------------------------------------------------- what a card claims


def test_a_card_claims_its_refs_functions_and_every_function_of_explicit_covers(scale_card):
    assert mutation.claimed(scale_card, FIXTURE) == {"fakeimpl/scale.py": frozenset({"scale"})}
    wide = replace(
        scale_card,
        explicit_covers=True,
        covers=("fakeimpl/text.py", "witnesses/test_scale.py"),
        refs=("fakeimpl/scale.py::Box",),
    )
    got = mutation.claimed(wide, FIXTURE)
    assert got == {"fakeimpl/scale.py": frozenset({"Box"}), "fakeimpl/text.py": None}  # never its own witnesses
    cm = mutation.card_mutants(wide, mutation.Generated(FIXTURE), None, 0)
    assert "fakeimpl/scale.py::Box.doubled" in cm.functions and "fakeimpl/scale.py::scale" not in cm.functions
    assert {m.qualname for m in cm.sample} >= {"Box.doubled", "Box.half"}


def test_card_mutants_samples_reproducibly(scale_card):
    g = mutation.Generated(FIXTURE)
    a = mutation.card_mutants(scale_card, g, 3, seed=1)
    assert a.candidates == 8 and len(a.sample) == 3
    assert a.sample == mutation.card_mutants(scale_card, g, 3, seed=1).sample


def test_mutant_timeouts_are_short_but_never_longer_than_the_cards(scale_card):
    t = mutation.mutant_timeouts(scale_card, {"small": 0.5}, 60.0)
    assert t == {NODE: 0.5 * mutation.TIMEOUT_FACTOR + mutation.TIMEOUT_SLACK_S}
    w = replace(scale_card.witnesses[0], timeout=2.0)
    assert mutation.mutant_timeouts(replace(scale_card, witnesses=(w,)), {"small": 9.0}, 60.0) == {NODE: 2.0}


# ---------------------------------------------------------------- equivalence marks


@pytest.fixture()
def cards_copy(tmp_path):
    dest = tmp_path / "project"
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    return dest


def test_the_fixture_marks_load(cards_copy):
    marks, problems = load_marks(cards_copy / "cards-mutation", cards_copy, ["FX-SCALE", "FX-LOOP"])
    assert not problems and set(marks) == {"fakeimpl/scale.py:6:7:compare", "fakeimpl/scale.py:34:19:arith"}
    assert marks["fakeimpl/scale.py:34:19:arith"].applies("FX-SCALE")
    assert not marks["fakeimpl/scale.py:34:19:arith"].applies("FX-LOOP")


@pytest.mark.parametrize(
    "text, field, message",
    [
        ("equivalent:\n  - mutant: fakeimpl/scale.py:6:7:compare\n", "equivalent[0].reason", "missing required field"),
        ("equivalent:\n  - mutant: scale.py\n    reason: because it is the same\n", "equivalent[0].mutant", ""),
        (
            "equivalent:\n  - mutant: fakeimpl/scale.py:6:7:compare\n    reason: the same for every input\n"
            "    cards: [FX-NOPE]\n",
            "equivalent[0].cards[0]",
            "no card has this id",
        ),
        (
            "equivalent:\n  - mutant: fakeimpl/scale.py:6:7:compare\n    reason: the same for every input\n"
            "  - mutant: fakeimpl/scale.py:6:7:compare\n    reason: the same for every input\n",
            "equivalent[1].mutant",
            "marked twice",
        ),
        (
            "equivalent:\n  - mutant: fakeimpl/scale.py:6:7:compare\n    reason: the same for every input\n"
            "    why: x\n",
            "equivalent[0].why",
            "unknown field",
        ),
    ],
)
def test_a_broken_marks_file_is_refused_with_file_line_and_field(cards_copy, text, field, message):
    (cards_copy / "cards-mutation" / "equivalent-mutants.yaml").write_text(text)
    marks, problems = load_marks(cards_copy / "cards-mutation", cards_copy, ["FX-SCALE", "FX-LOOP"])
    assert marks == {}
    p = next(p for p in problems if p.field == field)
    assert message in p.message and p.line > 0 and p.path == "cards-mutation/equivalent-mutants.yaml"


def test_a_mark_for_code_that_moved_is_stale_and_only_that_mark_is_left_out(cards_copy):
    src = cards_copy / "fakeimpl" / "scale.py"
    src.write_text(src.read_text().replace("def count_up(n):", "def count_up(n):\n    pass"))  # Box moves down
    marks, problems = load_marks(cards_copy / "cards-mutation", cards_copy)
    assert set(marks) == {"fakeimpl/scale.py:6:7:compare"}
    assert [p.kind for p in problems] == ["stale"] and "no such mutant now" in problems[0].message


def test_a_pinned_mark_whose_key_now_names_another_change_is_stale_and_names_the_new_key(cards_copy):
    key = "fakeimpl/scale.py:6:7:compare"
    pinned = mutants.find(cards_copy, key)[0].change
    marks_file = cards_copy / "cards-mutation" / "equivalent-mutants.yaml"
    marks_file.write_text(
        f"equivalent:\n  - mutant: {key}\n    change: {json.dumps(pinned)}\n    reason: same at 100\n"
    )
    assert set(load_marks(cards_copy / "cards-mutation", cards_copy)[0]) == {key}  # pinned and current: it loads
    src = cards_copy / "fakeimpl" / "scale.py"
    src.write_text(src.read_text().replace("    y = x * k\n", "    y = x * k\n    if y < 0:\n        y = 0\n"))
    assert mutants.find(cards_copy, key)[0].change != pinned  # the key still exists, naming the new `if`
    marks, problems = load_marks(cards_copy / "cards-mutation", cards_copy)
    assert marks == {}
    [p] = problems
    assert p.kind == "stale" and p.field == "equivalent[0].change" and p.line == 2
    assert "the same change is now fakeimpl/scale.py:8:7:compare" in p.message
    assert mutants.find(cards_copy, "fakeimpl/scale.py:8:7:compare")[0].change == pinned


def test_a_stale_pinned_key_names_where_its_change_went(cards_copy):
    key = "fakeimpl/scale.py:34:19:arith"
    pinned = mutants.find(cards_copy, key)[0].change
    marks_file = cards_copy / "cards-mutation" / "equivalent-mutants.yaml"
    marks_file.write_text(f"equivalent:\n  - mutant: {key}\n    change: {json.dumps(pinned)}\n    reason: v + 0 is v\n")
    src = cards_copy / "fakeimpl" / "scale.py"
    src.write_text(src.read_text().replace("def count_up(n):", "def count_up(n):\n    pass"))  # Box moves down
    _, [p] = load_marks(cards_copy / "cards-mutation", cards_copy)
    assert p.kind == "stale" and "no such mutant now" in p.message
    assert "the same change is now fakeimpl/scale.py:35:19:arith" in p.message


def test_the_marks_file_is_not_a_card():
    from harness.select.cards import find_card_files

    assert not [p for p in find_card_files(FIXTURE / "cards-mutation") if p.name == "equivalent-mutants.yaml"]


def test_claims_name_functions_no_card_claims(scale_card):
    g = mutation.Generated(FIXTURE)
    cm = mutation.card_mutants(scale_card, g, None, 0)
    rows = mutation.claims(
        FIXTURE,
        ["fakeimpl/scale.py"],
        {"FX-SCALE": cm},
        {
            "FX-SCALE": [
                replace(_result(MutantStatus.SURVIVED), path="fakeimpl/scale.py", qualname="scale"),
                _result(MutantStatus.KILLED),
            ]
        },
        g,
    )
    by = {r.qualname: r for r in rows}
    assert by["scale"].cards == ("FX-SCALE",) and (by["scale"].mutants, by["scale"].survived) == (1, 1)
    assert by["count_up"].cards == () and by["count_up"].mutants == 0
    assert set(by) == {"scale", "count_up", "Box.__init__", "Box.doubled", "Box.half", "Box.of"}


def test_a_floor_is_not_part_of_what_a_score_is_bound_to(cards_copy):
    from harness.plan.binding import bound_files, digest

    path = cards_copy / "cards-mutation" / "FX-LOOP.yaml"
    card, _, _ = load_card(path, cards_copy)
    before = mutation.score_digest(card, bound_files(card, cards_copy, {}))
    assert before == digest(bound_files(card, cards_copy, {}))  # no floor: the plain digest
    for floor in ("mutation: {min_score: 0.5}\n", "mutation:\n  min_score: 0.5\n"):
        path.write_text(path.read_text().replace("version: 1\n", floor + "version: 1\n"))
        with_floor, _, _ = load_card(path, cards_copy)
        assert with_floor.min_score == 0.5
        assert mutation.score_digest(with_floor, bound_files(with_floor, cards_copy, {})) == before
        path.write_text(path.read_text().replace(floor, ""))
    path.write_text(path.read_text().replace("count_up(n) returns n.", "count_up(n) returns n, exactly."))
    changed, _, _ = load_card(path, cards_copy)
    assert mutation.score_digest(changed, bound_files(changed, cards_copy, {})) != before


def test_a_release_runs_mutants_under_the_ci_profile_and_its_seed_not_the_runs_random_one(tmp_path):
    """The statuses a ci ``mutate`` measured, from a release run: ci's 50 derandomized examples need ci's seed too
    (a release run's random seed gave 2 of 1,071 mutants another status, measured 2026-12-02)."""
    from harness.mutation.stage import MUTANT_SEED, mutant_config
    from harness.request import RunRequest

    def cfg(profile: str, seed: int | None):
        return mutant_config(RunRequest(tmp_path, tmp_path, tmp_path, "--reports", profile=profile, seed=seed))

    release = cfg("release", 2720485480)
    assert (release.profile, release.seed, release.liars) == ("ci", MUTANT_SEED, False) and MUTANT_SEED == 0
    ci = cfg("ci", 7)  # --hypothesis-seed 7 on a ci run: its mutants run with the seed asked for
    assert (ci.profile, ci.seed) == ("ci", 7)
