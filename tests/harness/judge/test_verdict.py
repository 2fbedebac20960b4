"""The verdict table: outcomes -> PROVEN / FAILED / VACUOUS / UNVERIFIED / ERROR."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.select.cards import Bound, Card, Witness
from harness.statuses import Verdict
from harness.verdict import CardOutcomes, LiarRun, WitnessOutcome, check_bound, evaluate
from harness.wire.messages import NodeResult

ERROR, FAILED, PROVEN, UNVERIFIED, VACUOUS = (
    Verdict.ERROR,
    Verdict.FAILED,
    Verdict.PROVEN,
    Verdict.UNVERIFIED,
    Verdict.VACUOUS,
)


def _card(witnesses=(("w1", ()),), controls=(), liars=()) -> Card:
    def mk(specs, kind):
        return tuple(
            Witness(wid, f"witnesses/test_x.py::test_{wid}", kind, tuple(Bound(*b) for b in bounds))
            for wid, bounds in specs
        )

    return Card(
        id="T",
        title="t",
        module="impl.x",
        regime="N",
        theorem="t",
        proof="p",
        refs=(),
        covers=(),
        requires=(),
        witnesses=mk(witnesses, "witness"),
        controls=mk(controls, "control"),
        liars=tuple(liars),
        notes="",
        tags=(),
        version=1,
        source=Path("/x.yaml"),
        display_path="x.yaml",
        fingerprint="0" * 64,
    )


def node(outcome="passed", message="", **evidence) -> NodeResult:
    return NodeResult("n", outcome, 0.01, evidence, message)


def wo(wid, *nodes, not_run="") -> WitnessOutcome:
    return WitnessOutcome(wid, tuple(nodes), not_run)


DELTA0 = (("max_abs_delta", "le", 0),)
DIFFERS = (("max_abs_delta", "gt", 0),)
ONE = _card()
BOUNDED = _card(witnesses=(("w1", DELTA0),))
CONTROLLED = _card(controls=(("c1", DIFFERS),))
LIARS = _card(liars=("m.a", "m.b"))

# (name, card, outcomes, verdict, reason fragment)
TABLE = [
    ("all-pass", ONE, CardOutcomes((wo("w1", node()),)), PROVEN, "1 witness(es) passed"),
    ("bound-holds", BOUNDED, CardOutcomes((wo("w1", node(max_abs_delta=0.0)),)), PROVEN, "passed"),
    (
        "assertion-fails",
        ONE,
        CardOutcomes((wo("w1", node("failed", "AssertionError: 1 != 2")),)),
        FAILED,
        "witness w1 failed: AssertionError: 1 != 2",
    ),
    (
        "bound-violated",
        BOUNDED,
        CardOutcomes((wo("w1", node(max_abs_delta=1e-6)),)),
        FAILED,
        "max_abs_delta = 1.000e-06 (bound le 0)",
    ),
    ("nan-violates", BOUNDED, CardOutcomes((wo("w1", node(max_abs_delta=float("nan"))),)), FAILED, "nan"),
    (
        "control-no-difference",
        CONTROLLED,
        CardOutcomes((wo("w1", node()),), (wo("c1", node(max_abs_delta=0.0)),)),
        FAILED,
        "control c1 showed no difference: max_abs_delta = 0.000e+00 (bound gt 0)",
    ),
    (
        "control-assertion",
        CONTROLLED,
        CardOutcomes((wo("w1", node()),), (wo("c1", node("failed", "no diff")),)),
        FAILED,
        "control c1 showed no difference: no diff",
    ),
    (
        "control-shows-difference",
        CONTROLLED,
        CardOutcomes((wo("w1", node()),), (wo("c1", node(max_abs_delta=3.0)),)),
        PROVEN,
        "1 control(s)",
    ),
    (
        "exception-is-error",
        ONE,
        CardOutcomes((wo("w1", node("error", "TypeError: x")),)),
        ERROR,
        "witness w1: TypeError: x",
    ),
    (
        "timeout-is-error",
        ONE,
        CardOutcomes((wo("w1", node("error", "timeout: still running after 1 s")),)),
        ERROR,
        "timeout",
    ),
    ("missing-outcome-is-error", ONE, CardOutcomes(()), ERROR, "did not run"),
    (
        "not-run-after-crash",
        ONE,
        CardOutcomes((wo("w1", not_run="not run: the interpreter died in x"),)),
        ERROR,
        "interpreter died",
    ),
    (
        "missing-evidence-is-error",
        BOUNDED,
        CardOutcomes((wo("w1", node()),)),
        ERROR,
        "`max_abs_delta` was not recorded",
    ),
    (
        "non-number-evidence-is-error",
        BOUNDED,
        CardOutcomes((wo("w1", node(max_abs_delta="zero")),)),
        ERROR,
        "is not a number",
    ),
    (
        "failure-outranks-error",
        _card(witnesses=(("w1", ()), ("w2", ()))),
        CardOutcomes((wo("w1", node("error", "boom")), wo("w2", node("failed", "refuted")))),
        FAILED,
        "refuted",
    ),
    (
        "skip-is-unverified",
        ONE,
        CardOutcomes((wo("w1", node("skipped", "oracle export missing")),)),
        UNVERIFIED,
        "skipped: oracle export missing",
    ),
    (
        "error-outranks-skip",
        _card(witnesses=(("w1", ()), ("w2", ()))),
        CardOutcomes((wo("w1", node("skipped", "s")), wo("w2", node("error", "e")))),
        ERROR,
        "w2: e",
    ),
    (
        "link-problem-is-error",
        ONE,
        CardOutcomes(link_problems=("refs[0] does not resolve",)),
        ERROR,
        "not run: refs[0] does not resolve",
    ),
    (
        "liars-caught",
        LIARS,
        CardOutcomes(
            (wo("w1", node()),),
            liars=(LiarRun("m.a", (wo("w1", node("failed", "x")),)), LiarRun("m.b", (wo("w1", node("failed", "y")),))),
        ),
        PROVEN,
        "2/2 liar(s) caught",
    ),
    (
        "liar-that-only-errors-proves-nothing",
        LIARS,
        CardOutcomes(
            (wo("w1", node()),),
            liars=(LiarRun("m.a", (wo("w1", node("failed", "x")),)), LiarRun("m.b", (wo("w1", node("error", "y")),))),
        ),
        UNVERIFIED,
        "liar m.b: proved nothing: witness w1 errored under it",
    ),
    (
        "liar-survives",
        LIARS,
        CardOutcomes(
            (wo("w1", node()),),
            liars=(LiarRun("m.a", (wo("w1", node("failed", "x")),)), LiarRun("m.b", (wo("w1", node()),))),
        ),
        VACUOUS,
        "liar m.b survived",
    ),
    (
        "liar-caught-by-bound",
        _card(witnesses=(("w1", DELTA0),), liars=("m.a",)),
        CardOutcomes((wo("w1", node(max_abs_delta=0)),), liars=(LiarRun("m.a", (wo("w1", node(max_abs_delta=1)),)),)),
        PROVEN,
        "1/1 liar(s) caught",
    ),
    (
        "liars-not-run",
        LIARS,
        CardOutcomes((wo("w1", node()),), liars_skipped="--no-liars"),
        UNVERIFIED,
        "liars were not run (--no-liars)",
    ),
    (
        "liar-not-applied",
        LIARS,
        CardOutcomes(
            (wo("w1", node()),),
            liars=(LiarRun("m.a", apply_error="target gone"), LiarRun("m.b", (wo("w1", node("failed")),))),
        ),
        ERROR,
        "liar m.a could not be applied: target gone",
    ),
    (
        "liar-inconclusive",
        LIARS,
        CardOutcomes(
            (wo("w1", node()),),
            liars=(LiarRun("m.a", (wo("w1", node("skipped", "s")),)), LiarRun("m.b", (wo("w1", node("failed")),))),
        ),
        UNVERIFIED,
        "liar m.a: witnesses skipped",
    ),
    (
        "honest-failure-outranks-liars",
        LIARS,
        CardOutcomes((wo("w1", node("failed", "no")),), liars_skipped="the honest run did not hold"),
        FAILED,
        "no",
    ),
    (
        "parametrized-one-node-fails",
        BOUNDED,
        CardOutcomes((wo("w1", node(max_abs_delta=0), node(max_abs_delta=2)),)),
        FAILED,
        "max_abs_delta = 2",
    ),
]


@pytest.mark.parametrize("name,card,outcomes,expected,fragment", TABLE, ids=[t[0] for t in TABLE])
def test_verdict_table(name, card, outcomes, expected, fragment):
    result = evaluate(card, outcomes)
    assert (result.verdict, fragment in result.reason) == (expected, True), result.reason


def test_liar_verdict_names_the_witnesses_that_caught_it():
    card = _card(witnesses=(("w1", ()), ("w2", ()), ("w3", ())), liars=("m.a",))
    outcomes = CardOutcomes(
        tuple(wo(w, node()) for w in ("w1", "w2", "w3")),
        liars=(LiarRun("m.a", (wo("w1", node()), wo("w2", node("failed")), wo("w3", node("error")))),),
    )
    (liar,) = evaluate(card, outcomes).liars
    assert liar.caught and liar.caught_by == ("w2",)  # w3 errored: a crash is no catch


def test_verdict_is_deterministic_and_pure():
    outcomes = CardOutcomes((wo("w1", node("failed", "x")),))
    assert evaluate(ONE, outcomes) == evaluate(ONE, outcomes)


@pytest.mark.parametrize(
    "op,limit,actual,holds",
    [
        ("le", 0, 0.0, True),
        ("le", 0, 1e-9, False),
        ("lt", 1, 1, False),
        ("ge", 2, 2, True),
        ("gt", 0, 0, False),
        ("eq", True, True, True),
        ("ne", "a", "b", True),
        ("eq", 3, 3.0, True),
        ("le", 0, True, None),  # a bool is not a measurement
        # eq/ne compare a value of the limit's own kind: anything else cannot be judged (ERROR), never holds
        ("ne", 0, None, None),  # max(deltas, default=None) that saw nothing is no difference
        ("eq", 0, None, None),
        ("ne", 0, "0.5", None),  # text is not a measurement
        ("eq", 1, True, None),  # True == 1 in Python; a bool is not the number 1
        ("ne", 0, False, None),
        ("ne", 0, [1, 2], None),
        ("ne", 0, {"a": 1}, None),
        ("eq", True, 1, None),
        ("eq", "ok", 0, None),
        ("ne", "ok", None, None),
        ("ne", 0, float("nan"), False),  # NaN measured nothing: it differs from no limit
        ("eq", 0, float("nan"), False),
        ("ne", None, 0, True),  # a null limit compares with anything
        ("eq", None, None, True),
        ("ne", 0, 0.5, True),
        ("ne", 0, 0, False),
    ],
)
def test_check_bound(op, limit, actual, holds):
    assert check_bound(Bound("k", op, limit), {"k": actual}).holds is holds


# ---------------------------------------------------------------- observed evidence (evidence.observe)


def observed(lo, hi, n=50, nan=0) -> dict:
    return {"observed": n, "min": lo, "max": hi, "nan": nan}


@pytest.mark.parametrize(
    "op,limit,summary,actual,holds",
    [
        ("le", 0, observed(0.0, 0.0), 0.0, True),
        ("le", 0, observed(0.0, 1e-6), 1e-6, False),  # the max is judged
        ("lt", 1, observed(-5, 1), 1, False),
        ("ge", 4, observed(4.5, 9.0), 4.5, True),  # the min is judged
        ("gt", 0, observed(0, 7), 0, False),
        ("le", 1, observed(0.0, 0.5, nan=1), "nan", False),  # any NaN fails an ordering bound
        ("ge", 0, observed(None, None, n=3, nan=3), "nan", False),
        ("eq", 0, observed(0, 0), 0, True),
        ("eq", 0, observed(0, 2), 2, False),  # the max differs
        ("eq", 0, observed(-1, 0), -1, False),  # the min differs
        ("eq", 0, observed(0, 0, nan=2), "nan", False),
        ("ne", 0, observed(1, 5), 1, True),  # the limit is outside [min, max]
        ("ne", 9, observed(1, 5), 5, True),
        ("ne", 3, observed(3, 3), 3, False),  # every value equals the limit
        ("ne", 3, observed(None, None, n=2, nan=2), "nan", False),  # NaN measured nothing: no difference shown
        ("ne", 0, observed(1, 5, nan=1), "nan", False),  # one NaN example is enough to fail
    ],
)
def test_observed_evidence_is_judged_on_its_worst_value(op, limit, summary, actual, holds):
    check = check_bound(Bound("k", op, limit), {"k": summary})
    got = "nan" if isinstance(check.actual, float) and check.actual != check.actual else check.actual
    assert (got, check.holds) == (actual, holds), check


@pytest.mark.parametrize(
    "summary",
    [
        observed(None, None, n=5, nan=0),  # values observed, but no min/max: forged
        observed(5, 1),  # min above max
        observed("a", "b"),
        observed(0, 1, n=-1),
        observed(0, 1, n=True),
        observed(0, 1, n=2, nan=3),  # more NaN than observed
        observed(0, None),
    ],
)
@pytest.mark.parametrize("op,limit", [("ne", 0), ("eq", 0), ("le", 10), ("ge", -10)])
def test_a_malformed_observed_summary_holds_for_no_bound(summary, op, limit):
    check = check_bound(Bound("k", op, limit), {"k": summary})
    assert check.holds is None and "is not an observed summary" in check.actual, check


@pytest.mark.parametrize("limit", [True, "x", None])
def test_an_observed_summary_needs_a_number_limit(limit):
    check = check_bound(Bound("k", "eq", limit), {"k": observed(0, 0)})
    assert check.holds is None and "needs a number limit" in check.actual


def test_a_control_bound_ne_on_a_recorded_null_is_error_not_a_difference():
    card = _card(witnesses=(("w1", (("k", "ne", 0),)),))
    verdict = evaluate(card, CardOutcomes((wo("w1", node(k=None)),)))
    assert verdict.verdict == ERROR and "is not a number" in verdict.reason


def test_observed_ne_with_the_limit_inside_the_range_is_undecidable_and_says_to_count():
    check = check_bound(Bound("k", "ne", 3), {"k": observed(1, 5)})
    assert check.holds is None
    assert "cannot tell" in check.actual and "evidence.count(" in check.actual


def test_observed_bound_report_names_the_worst_value_and_how_many_were_observed():
    verdict = evaluate(BOUNDED, CardOutcomes((wo("w1", node(max_abs_delta=observed(0.0, 2e-6, n=40))),)))
    assert verdict.verdict == FAILED
    assert "max_abs_delta = 2.000e-06 (bound le 0; max of 40 observed)" in verdict.reason
    assert evaluate(BOUNDED, CardOutcomes((wo("w1", node(max_abs_delta=observed(0.0, 0.0))),))).verdict == PROVEN


def test_observed_ne_undecidable_is_error_never_proven_or_failed():
    card = _card(witnesses=(("w1", (("k", "ne", 3),)),))
    verdict = evaluate(card, CardOutcomes((wo("w1", node(k=observed(1, 5))),)))
    assert verdict.verdict == ERROR and "cannot tell" in verdict.reason


def test_missing_key_of_a_witness_that_failed_is_not_reached_not_forgotten():
    verdict = evaluate(BOUNDED, CardOutcomes((wo("w1", node("failed", "AssertionError: boom")),)))
    (check,) = verdict.witnesses[0].checks
    assert "not reached: the witness stopped before recording it" in check.actual
    assert "evidence.record" not in check.actual


def test_missing_key_of_a_witness_that_passed_says_to_record_it():
    verdict = evaluate(BOUNDED, CardOutcomes((wo("w1", node()),)))
    (check,) = verdict.witnesses[0].checks
    assert "passed without recording it" in check.actual and "evidence.record('max_abs_delta'" in check.actual


def _node(nodeid, outcome="passed", message="", **evidence) -> NodeResult:
    return NodeResult(nodeid, outcome, 0.01, evidence, message)


NA = "n/a: target impl.ring lacks capability occupancy"
COUNTED = (("examples", "ge", 10),)


def test_nodes_that_skip_na_are_left_out_when_another_node_ran_and_named_in_why():
    card = _card(witnesses=(("w1", COUNTED),))
    ran = _node("t[impl.paged]", examples=50)
    na = _node("t[impl.ring]", "skipped", NA)  # no evidence: it would miss the bound if it were judged
    v = evaluate(card, CardOutcomes((wo("w1", ran, na),)))
    assert v.verdict == PROVEN, v.reason
    assert "n/a on 1 of 2 node(s) (impl.ring: " + NA in v.witnesses[0].why


def test_a_node_that_ran_still_decides_when_others_are_na():
    card = _card(witnesses=(("w1", COUNTED),))
    failed = _node("t[impl.paged]", "failed", "AssertionError: leak", examples=3)
    na = _node("t[impl.ring]", "skipped", NA)
    assert evaluate(card, CardOutcomes((wo("w1", failed, na),))).verdict == FAILED


@pytest.mark.parametrize(
    "other", [_node("t[b]", "skipped", "optional dependency missing"), _node("t[b]", "skipped", NA)]
)
def test_every_node_na_or_a_plain_skip_is_still_unverified(other):
    """Only n/a skips beside a node that ran are left out: a plain skip, or n/a everywhere, is UNVERIFIED."""
    first = _node("t[a]", "skipped", NA) if other.message == NA else _node("t[a]", examples=50)
    v = evaluate(_card(witnesses=(("w1", COUNTED),)), CardOutcomes((wo("w1", first, other),)))
    assert v.verdict == UNVERIFIED, v.reason


def test_a_target_not_runnable_here_is_never_left_out_beside_the_others():
    """Only a target lacking a capability is not a path of the claim; one that cannot run here is a path left
    unchecked: the witness is skipped (UNVERIFIED), not judged on the other targets alone."""
    card = _card(witnesses=(("w1", COUNTED),))
    ran = _node("t[impl.paged]", examples=50)
    absent = _node("t[transformers.quantized-hqq]", "skipped", "n/a: target x is not runnable here: hqq is missing")
    assert evaluate(card, CardOutcomes((wo("w1", ran, absent),))).verdict == UNVERIFIED
