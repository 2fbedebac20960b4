"""A witness that stopped early (its test failed, errored or skipped) is not charged with the evidence it did not
reach: its bounds are judged only where more examples could not have changed the answer (issue 37).

A witness whose test passed is judged on every bound, as ever: one that passes while missing a bound is FAILED
for it (how a vacuous witness is caught)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.select.cards import Bound, Card, Witness
from harness.statuses import Outcome, Verdict
from harness.verdict import CardOutcomes, WitnessOutcome, check_bound, evaluate, judge_witness
from harness.wire.messages import NodeResult
from harness.wording import NOT_JUDGED, not_judged


def _card(*bounds: tuple[str, str, object], wid: str = "agree") -> Card:
    witness = Witness(wid, f"witnesses/test_x.py::test_{wid}", "witness", tuple(Bound(*b) for b in bounds))
    return Card(
        id="T",
        title="t",
        module="impl.x",
        regime="A",
        theorem="t",
        proof="p",
        refs=(),
        covers=(),
        requires=(),
        witnesses=(witness,),
        controls=(),
        liars=(),
        notes="",
        tags=(),
        version=1,
        source=Path("/x.yaml"),
        display_path="x.yaml",
        fingerprint="0" * 64,
    )


def _outcome(outcome: str, message: str = "", **evidence) -> CardOutcomes:
    node = NodeResult("witnesses/test_x.py::test_agree", outcome, 0.01, evidence, message, location="x.py:3")
    return CardOutcomes((WitnessOutcome("agree", (node,)),))


MESSAGE = "AssertionError: after the steps 1. append of 3 to handle 0; 2. fork of handle 0: handle 1: the rows differ"


def test_an_assertion_failed_witness_lists_no_follow_on_bound_failure_for_its_counts():
    card = _card(("examples", "ge", 10), ("three_or_more_handles", "ge", 10))
    verdict = evaluate(card, _outcome("failed", MESSAGE, examples=7, three_or_more_handles=2))
    assert verdict.verdict == Verdict.FAILED
    assert verdict.reason == f"witness agree failed: {MESSAGE} (x.py:3)"
    (w,) = verdict.witnesses
    assert w.status == Outcome.FAILED and "examples" not in w.why
    for check in w.checks:  # kept, with the value it had reached, but not judged either way
        assert check.holds is None and not_judged(check.detail), check
        assert check.describe().endswith(NOT_JUDGED)
    assert [c.actual for c in w.checks] == [7, 2]
    assert w.checks[0].describe() == f"examples = 7 (bound ge 10): {NOT_JUDGED}"


def test_a_witness_that_passed_under_its_floor_still_fails_on_the_bound():
    card = _card(("examples", "ge", 10))
    verdict = evaluate(card, _outcome("passed", examples=7))
    assert verdict.verdict == Verdict.FAILED
    assert verdict.reason == "witness agree failed: examples = 7 (bound ge 10)"
    (check,) = verdict.witnesses[0].checks
    assert check.holds is False and check.detail == ""


def test_an_errored_witness_is_error_and_its_low_counts_are_not_judged():
    card = _card(("examples", "ge", 10))
    verdict = evaluate(card, _outcome("error", "TypeError: boom", examples=3))
    assert verdict.verdict == Verdict.ERROR and "examples" not in verdict.reason
    assert verdict.witnesses[0].checks[0].holds is None


def observed(lo: float, hi: float, n: int = 5, nan: int = 0) -> dict:
    return {"observed": n, "min": lo, "max": hi, "nan": nan}


@pytest.mark.parametrize(
    "op,limit,value,holds",
    [
        # plain numbers: a tally only grows (evidence.count), a recorded value is final
        ("ge", 10, 7, None),  # below its floor: it stopped counting
        ("ge", 10, 12, True),  # met its floor: more could only add
        ("gt", 0, 0, None),
        ("le", 0, 3, False),  # past an upper bound: more could only add
        ("le", 5, 3, None),  # under it so far
        ("lt", 1, 1, False),
        ("eq", 0, 2, False),  # a tally already past 0 cannot come back
        ("eq", 5, 2, None),  # could still reach 5
        ("eq", 0, 0, None),  # could still leave 0
        ("ne", 0, 2, True),  # already past
        ("ne", 5, 5, None),
        ("eq", "ok", "no", False),  # not a number: recorded, final
        ("le", 0, float("nan"), False),
        # observed summaries: the worst value only gets worse
        ("le", 0, observed(0.0, 0.5), False),
        ("le", 1, observed(0.0, 0.5), None),
        ("ge", 0, observed(-1.0, 2.0), False),
        ("ge", -5, observed(-1.0, 2.0), None),
        ("eq", 0, observed(0.0, 1.0), False),
        ("eq", 0, observed(0.0, 0.0), None),
        ("ne", 3, observed(3.0, 3.0), None),
        ("le", 0, observed(None, None, n=1, nan=1), False),
    ],
)
def test_a_stopped_node_keeps_only_the_checks_more_examples_could_not_change(op, limit, value, holds):
    check = check_bound(Bound("k", op, limit), {"k": value}, reached=False)
    assert check.holds is holds, check
    assert not_judged(check.detail) is (holds is None)
    reached = check_bound(Bound("k", op, limit), {"k": value})  # the same value on a node that passed
    assert reached.holds is not None and not not_judged(reached.detail)
    if holds is not None:  # a check that stands reads as it would on a node that passed
        assert (reached.holds, reached.detail) == (check.holds, check.detail)


def test_a_value_never_recorded_by_a_stopped_node_is_still_not_reached():
    check = check_bound(Bound("examples", "ge", 10), {}, reached=False)
    assert check.holds is None and "was not reached" in check.actual and check.detail == ""


def test_a_parametrized_witness_judges_each_node_by_its_own_outcome():
    witness = _card(("examples", "ge", 10)).witnesses[0]
    nodes = (
        NodeResult("t[a]", "passed", 0.0, {"examples": 4}),
        NodeResult("t[b]", "failed", 0.0, {"examples": 4}, "AssertionError: x"),
    )
    v = judge_witness(witness, WitnessOutcome("agree", nodes))
    assert v.status == Outcome.FAILED and v.why == "AssertionError: x"
    assert [c.holds for c in v.checks] == [False, None]  # the node that passed missed its floor
