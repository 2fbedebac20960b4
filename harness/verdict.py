"""Outcomes -> verdicts. Pure: no I/O, no clock, no globals.

:func:`evaluate` turns a card and what happened when its witnesses ran into
one of PROVEN, FAILED, VACUOUS, UNVERIFIED, ERROR with a one-line reason.
Precedence, first match wins:

1. ERROR      the card's refs, tests or liars do not resolve (nothing ran)
2. FAILED     a witness failed an assertion (incl. Hypothesis falsifying), a
              bound did not hold, or a control showed no difference
3. ERROR      a witness raised a non-assertion exception, failed to collect,
              timed out, crashed the interpreter, never ran, or recorded no
              value for one of its bounds
4. UNVERIFIED a witness or control skipped (missing oracle, optional dep)
5. UNVERIFIED the card lists liars but they were not run (--no-liars)
6. ERROR      a liar could not be applied (its module or target is broken)
7. UNVERIFIED a listed liar has no run at all
8. VACUOUS    a liar survived: every witness passed under it
9. VACUOUS    the card's mutation score, measured on the bytes it is bound
              to now and on the sample its floor was set on, is below its
              ``mutation.min_score``: its witnesses would pass too much wrong
              code (:mod:`harness.mutation.score`, :mod:`harness.mutation.sample`)
10. UNVERIFIED a liar's run was inconclusive (witnesses skipped or errored under it)
10b. UNVERIFIED the release profile, a card with ``mutation.min_score`` and no score measured on the
              bytes it is bound to now, with the equivalence marks of its mutants now, and on its floor's sample
              (a floor that nobody measured does not hold by default; a score on a partial or another sample
              says nothing of the floor's: :func:`unjudged_floor`), or one that scored no mutant
              (:func:`nothing_scored`: a floor that judged zero mutants did not hold)
10c. UNVERIFIED a witness's Hypothesis property ran under less than the run's profile's budget (``ci`` 50,
              ``release`` 1000 examples): its ``max_examples`` is below it, its phases leave out generation,
              it generated no example, or kvproof could not count its examples (:func:`weak_property`)
11. PROVEN    otherwise

A mutation score never measured, measured on other bytes (stale) or on
another sample than its floor's, does not change the verdict (but for 10b);
the reports and ``status`` say so.

A witness whose test failed, errored or skipped is judged by that outcome; the bounds on the evidence
it had recorded when it stopped are judged only where more examples could not have changed the answer
(:func:`_stopped_early`): a tally below its floor is "not judged", never a second failure.

FAILED outranks ERROR: a refutation stands even if another witness is broken.
Under a liar, only a witness whose check fails (an assertion, or a bound on
its evidence) catches it. A witness that errors under it (an exception that
is no assertion, a timeout, an assertion raised inside the liar's own code)
proved nothing: the liar is inconclusive, and the card says which. A crash
is not a refutation: a witness that checks nothing would "catch" every liar
that crashes. (Mutants differ: a mutant is killed by any failure or error,
as in every mutation tool; :mod:`harness.mutation.score`.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from harness.project import recorded_runner
from harness.select.cards import Bound, Card, Witness
from harness.statuses import WORST_FIRST, Kind, LiarStatus, Outcome, Verdict
from harness.wire.messages import OBSERVED_FIELDS, PROFILE_EXAMPLES, NodeResult, PropertyRun
from harness.wire.safetext import CLIPPED, is_clipped
from harness.wording import NOT_JUDGED, check_text, not_judged, reason_value, stopped_text, unevaluated_text

# ---------------------------------------------------------------- inputs


NOT_APPLICABLE_PREFIX = "n/a:"  # a node that skips with this says the card does not apply to its subject
# a target lacking a capability the witness needs (harness.targets.fixture): not a path of the claim at all;
# a target "not runnable here" is a path left unchecked, so it never drops out beside the others
LACKS_CAPABILITY = re.compile(r"n/a: target \S+ lacks capability ")


def not_applicable_nodes(nodes: tuple[NodeResult, ...]) -> list[NodeResult]:
    """The nodes to leave out of a witness's judgement: those that skipped because their target lacks a
    capability the witness needs, when another node did not. When every node skipped so, none is left out:
    the witness is skipped (UNVERIFIED, or an n/a cell)."""
    na = [n for n in nodes if n.outcome == Outcome.SKIPPED and LACKS_CAPABILITY.match(n.message)]
    return na if len(na) < len(nodes) else []


@dataclass(frozen=True)
class WitnessOutcome:
    """Every node run for one witness (several when it is parametrized)."""

    witness_id: str
    nodes: tuple[NodeResult, ...] = ()
    not_run_reason: str = ""  # why there are no nodes (e.g. the process died earlier)

    @property
    def status(self) -> str:
        """The worst outcome of the nodes the claim applies to (see :func:`not_applicable_nodes`)."""
        if not self.nodes:
            return Outcome.NOT_RUN
        na = not_applicable_nodes(self.nodes)
        found = {n.outcome for n in self.nodes if n not in na}
        return next(s for s in WORST_FIRST if s in found)

    @property
    def duration(self) -> float:
        return sum(n.duration for n in self.nodes)

    @property
    def per_node(self) -> bool:
        """True when :attr:`evidence` is keyed by node id (a parametrized witness ran several nodes)."""
        return len(self.nodes) > 1

    @property
    def evidence(self) -> Mapping[str, Any]:
        """The evidence of a single node; for parametrized witnesses, keyed by node id."""
        if not self.per_node:
            return self.nodes[0].evidence if self.nodes else {}
        return {n.nodeid: n.evidence for n in self.nodes}

    def first(self, status: str) -> NodeResult | None:
        return next((n for n in self.nodes if n.outcome == status), None)


@dataclass(frozen=True)
class LiarRun:
    """The card's witnesses run in a fresh process with one liar patched in."""

    name: str
    witnesses: tuple[WitnessOutcome, ...] = ()
    apply_error: str = ""  # the liar could not be applied
    duration: float = 0.0
    node: str = ""  # where its process ran (a cluster node), "" on this machine
    lost: str = ""  # its process never came back (harness.execute.jobs.JobResult.lost): the liar is ERROR


@dataclass(frozen=True)
class CardOutcomes:
    """What happened when a card ran. Missing witness outcomes count as not run."""

    witnesses: tuple[WitnessOutcome, ...] = ()
    controls: tuple[WitnessOutcome, ...] = ()
    liars: tuple[LiarRun, ...] = ()
    link_problems: tuple[str, ...] = ()  # non-empty: ERROR without running
    liars_skipped: str = ""  # why liars were not run ("--no-liars", "honest run FAILED")


# ---------------------------------------------------------------- outputs


@dataclass(frozen=True)
class BoundCheck:
    """One bound evaluated on one node's evidence. ``holds`` None: could not evaluate."""

    key: str
    op: str
    limit: Any
    actual: Any  # the value judged: for observed evidence, the worst one for this bound
    holds: bool | None
    nodeid: str = ""
    detail: str = ""  # observed evidence: which value was judged, e.g. "max of 50 observed"

    def describe(self) -> str:
        if self.holds is None and not_judged(self.detail):
            return stopped_text(self.key, self.op, self.limit, self.actual, self.detail, reason=True)
        if self.holds is None:
            return unevaluated_text(self.key, self.actual, reason=True)  # actual carries the reason text
        return check_text(self.key, self.op, self.limit, self.actual, self.detail, reason=True)


@dataclass(frozen=True)
class WitnessVerdict:
    """A witness or control after its bounds were applied."""

    witness_id: str
    kind: str  # witness | control
    status: str  # passed | failed | error | skipped | not_run
    why: str = ""  # one line when not passed
    checks: tuple[BoundCheck, ...] = ()


@dataclass(frozen=True)
class LiarVerdict:
    name: str
    status: str  # caught | survived | not_run | error | inconclusive
    caught_by: tuple[str, ...] = ()  # witness ids that failed or errored under the liar
    why: str = ""
    witnesses: tuple[WitnessVerdict, ...] = ()

    @property
    def caught(self) -> bool:
        return self.status == LiarStatus.CAUGHT


@dataclass(frozen=True)
class CardVerdict:
    card_id: str
    verdict: str
    reason: str
    witnesses: tuple[WitnessVerdict, ...] = ()
    controls: tuple[WitnessVerdict, ...] = ()
    liars: tuple[LiarVerdict, ...] = ()


# ---------------------------------------------------------------- bounds


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def observed_summary(value: Any) -> Mapping[str, Any] | None:
    """``value`` when it is the summary ``evidence.observe`` reports (exactly :data:`OBSERVED_FIELDS`), else None."""
    if isinstance(value, Mapping) and set(value) == set(OBSERVED_FIELDS):
        return value
    return None


def _missing(bound: Bound, reached: bool) -> str:
    if not reached:
        return "was not reached: the witness stopped before recording it"
    return (
        f"was not recorded; the witness passed without recording it: call evidence.record({bound.key!r}, value) "
        f"(or evidence.observe({bound.key!r}, x) per example, evidence.count({bound.key!r}, n))"
    )


def check_bound(bound: Bound, evidence: Mapping[str, Any], nodeid: str = "", reached: bool = True) -> BoundCheck:
    """Evaluate one bound; NaN never satisfies an ordering bound.

    ``reached`` is False when the node did not pass (it failed, errored or
    skipped), so a missing key means the witness stopped before recording it,
    not that it forgot to, and a value it did record is judged only where
    stopping could not have changed the answer (:func:`_stopped_early`).
    Observed evidence (:func:`observed_summary`) is judged by
    :func:`_check_observed`.
    """
    check = _check_bound(bound, evidence, nodeid, reached)
    if reached or bound.key not in evidence:
        return check
    return _stopped_early(check, observed_summary(evidence[bound.key]) is not None)


def _stopped_early(check: BoundCheck, observed: bool) -> BoundCheck:
    """A check on the evidence of a node that stopped early (its test failed, errored or skipped): kept when more
    examples could not have changed its answer, else not judged (``holds`` None, the value it had reached kept,
    ``detail`` :data:`harness.wording.NOT_JUDGED`).

    An observed summary's worst value only gets worse with more examples: its broken bound stands, a bound it
    met so far is not judged. A plain number is a tally (``evidence.count``, only grows) or a value recorded once
    (final); judged as if it could still grow, an upper bound it breaks stands and a lower bound it meets
    stands, while a tally below its floor (``examples = 7 (>= 10)``: it stopped counting because the witness
    stopped) is not judged. Anything else (a string, a bool, a check that could not be evaluated) is final.
    """
    if check.holds is None or check.op not in ("le", "lt", "ge", "gt", "eq", "ne"):
        return check
    actual, limit = check.actual, check.limit
    if observed:
        final = check.holds is False and not (check.op == "ne" and not _is_nan(actual))
    elif not (_is_number(actual) and _is_number(limit)) or _is_nan(actual):
        final = True
    elif check.op in ("le", "lt"):
        final = check.holds is False
    elif check.op in ("ge", "gt"):
        final = check.holds is True
    else:  # eq / ne: only a tally already past the limit cannot come back to it
        final = actual > limit and check.holds is (check.op == "ne")
    if final:
        return check
    return replace(check, holds=None, detail=NOT_JUDGED + (f"; {check.detail}" if check.detail else ""))


def _is_nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _check_bound(bound: Bound, evidence: Mapping[str, Any], nodeid: str, reached: bool) -> BoundCheck:
    if bound.key not in evidence:
        return BoundCheck(bound.key, bound.op, bound.limit, _missing(bound, reached), None, nodeid)
    actual = evidence[bound.key]
    if is_clipped(actual):  # NOTE: judged as recorded: a value too large to keep cannot be judged on its head
        why = (
            f"was too large to record, so the bound cannot be judged ({actual.removeprefix(CLIPPED).rstrip('>')}); "
            f"record a summary the bound can judge instead, e.g. evidence.record({bound.key!r}, max(values)) "
            "and the full list under another key"
        )
        return BoundCheck(bound.key, bound.op, bound.limit, why, None, nodeid)
    summary = observed_summary(actual)
    if summary is not None:
        return _check_observed(bound, summary, nodeid)
    if bound.op in ("eq", "ne"):
        mismatch = _kind_mismatch(actual, bound.limit)
        if mismatch:
            shown = f"= {actual!r} {mismatch} (bound {bound.op} {bound.limit!r})"
            return BoundCheck(bound.key, bound.op, bound.limit, shown, None, nodeid)
        if isinstance(actual, float) and math.isnan(actual):  # NaN measured nothing: it differs from no limit
            return BoundCheck(bound.key, bound.op, bound.limit, actual, False, nodeid)
        holds = (actual == bound.limit) == (bound.op == "eq")
        return BoundCheck(bound.key, bound.op, bound.limit, actual, holds, nodeid)
    if not _is_number(actual):
        return BoundCheck(
            bound.key,
            bound.op,
            bound.limit,
            f"= {actual!r} is not a number (bound {bound.op} {bound.limit!r})",
            None,
            nodeid,
        )
    if isinstance(actual, float) and math.isnan(actual):
        return BoundCheck(bound.key, bound.op, bound.limit, actual, False, nodeid)
    return BoundCheck(bound.key, bound.op, bound.limit, actual, _holds(bound.op, actual, bound.limit), nodeid)


def _kind_mismatch(actual: Any, limit: Any) -> str:
    """Why ``actual`` cannot be compared with an eq/ne ``limit`` ("" when it can).

    The recorded value must be of the limit's kind: a number (never a bool) for a number, a bool for a bool, a
    string for a string; a ``null`` limit compares with anything. Without this, ``ne: 0`` would hold for a recorded
    ``None`` (a ``max(deltas, default=None)`` that saw nothing) and ``eq: 1`` for ``True``.
    """
    if limit is None:
        return ""
    if isinstance(limit, bool):
        return "" if isinstance(actual, bool) else "is not a boolean"
    if _is_number(limit):
        return "" if _is_number(actual) else "is not a number"
    if isinstance(limit, str):
        return "" if isinstance(actual, str) else "is not a string"
    return f"cannot be compared with a {type(limit).__name__} limit"


def _summary_problem(summary: Mapping[str, Any]) -> str:
    """Why ``summary`` is not a well-formed observed summary ("" when it is): a forged or corrupt one never holds."""
    n, lo, hi, nans = summary["observed"], summary["min"], summary["max"], summary["nan"]
    counts_ok = all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in (n, nans or 0))
    if not counts_ok or (nans or 0) > n:
        return f"is not an observed summary: observed={n!r}, nan={nans!r} must be counts with nan <= observed"
    if (lo is None) != (hi is None) or (lo is None and n and (nans or 0) != n):
        return f"is not an observed summary: min={lo!r}, max={hi!r} are missing while non-NaN values were observed"
    if lo is not None and (not _is_number(lo) or not _is_number(hi) or lo > hi):
        return f"is not an observed summary: min={lo!r}, max={hi!r} must be numbers with min <= max"
    return ""


def _holds(op: str, actual: Any, limit: Any) -> bool:
    return bool({"le": actual <= limit, "lt": actual < limit, "ge": actual >= limit, "gt": actual > limit}[op])


def _check_observed(bound: Bound, summary: Mapping[str, Any], nodeid: str) -> BoundCheck:
    """A bound on ``{"observed": n, "min": lo, "max": hi, "nan": k}``, judged on its worst value.

    le/lt: the max; ge/gt: the min; any NaN observed makes the worst value NaN
    (the bound fails). eq: fails on NaN, else on whichever of min and max
    differs from the limit. ne: holds when the limit is outside [min, max],
    fails when min == max == limit or any value was NaN; otherwise the
    summary cannot decide, and the check holds None (ERROR) with advice to
    count the examples equal to the limit instead.
    """
    key, op, limit = bound.key, bound.op, bound.limit
    n, lo, hi, nans = summary["observed"], summary["min"], summary["max"], summary["nan"] or 0

    def check(actual: Any, holds: bool | None, detail: str) -> BoundCheck:
        return BoundCheck(key, op, limit, actual, holds, nodeid, detail)

    problem = _summary_problem(summary)
    if problem:
        return check(f"= {dict(summary)!r} {problem}", None, "")
    if not n:
        return check("observed no value (the summary says observed=0)", None, "")
    if not _is_number(limit):  # an observed summary holds numbers only
        return check(f"is a summary of observed numbers; bound {op} {limit!r} needs a number limit", None, "")
    if nans:  # NaN measured nothing: it fails every bound, ne included (it shows no difference)
        return check(math.nan, False, f"{nans} of {n} observed were NaN")
    if op == "ne":
        if limit < lo or limit > hi:
            nearest = lo if abs(lo - limit) <= abs(hi - limit) else hi
            return check(nearest, True, f"nearest of {n} observed")
        if lo == hi == limit:
            return check(lo, False, f"min = max of {n} observed")
        return check(
            f"observed {n} value(s) in [{reason_value(lo)}, {reason_value(hi)}], "
            f"which contains the limit {reason_value(limit)}: "
            f"their summary cannot tell whether one equals it (bound ne {reason_value(limit)}); count those "
            f"examples with evidence.count('{key}_equal', int(x == {limit!r})) and bound that with eq: 0",
            None,
            "",
        )
    if op == "eq":
        for name, value in (("min", lo), ("max", hi)):
            if value != limit:
                return check(value, False, f"{name} of {n} observed")
        return check(lo, True, f"min = max of {n} observed")
    name, value = ("max", hi) if op in ("le", "lt") else ("min", lo)
    if not _is_number(value):
        return check(f"= {value!r} is not a number (bound {op} {limit!r})", None, "")
    return check(value, _holds(op, value, limit), f"{name} of {n} observed")


def _applicable(outcome: WitnessOutcome) -> tuple[WitnessOutcome, str]:
    """The outcome without the nodes the claim does not apply to (:func:`not_applicable_nodes`), and what was
    left out ("n/a on ...")."""
    na = not_applicable_nodes(outcome.nodes)
    if not na:
        return outcome, ""
    kept = tuple(n for n in outcome.nodes if n not in na)
    said = "; ".join(f"{n.nodeid.rpartition('[')[2].rstrip(']') or n.nodeid}: {n.message}" for n in na)
    return replace(outcome, nodes=kept), f"n/a on {len(na)} of {len(outcome.nodes)} node(s) ({said})"


def judge_witness(witness: Witness, outcome: WitnessOutcome | None) -> WitnessVerdict:
    """Node outcomes + the witness's bounds -> one status and why.

    Nodes that skipped ``n/a: ...`` (a parametrized witness over targets, some lacking a capability it needs)
    are left out when another node ran: the claim is judged on the nodes it applies to, and a passed witness
    says which were n/a."""
    kind = witness.kind
    if outcome is None or not outcome.nodes:
        why = (outcome.not_run_reason if outcome else "") or "did not run"
        return WitnessVerdict(witness.id, kind, Outcome.NOT_RUN, why)
    outcome, left_out = _applicable(outcome)
    status = outcome.status
    checks = tuple(
        check_bound(b, n.evidence, n.nodeid, reached=n.outcome == Outcome.PASSED)
        for n in outcome.nodes
        for b in witness.bounds
    )
    if status != Outcome.PASSED:  # the node's own outcome decides; checks are kept for display
        node = outcome.first(status)
        assert node is not None
        why = node.message or status
        if node.location:
            why += f" ({node.location})"
        return WitnessVerdict(witness.id, kind, status, why, checks)
    missing = [c for c in checks if c.holds is None]
    broken = [c for c in checks if c.holds is False]
    if broken:
        return WitnessVerdict(witness.id, kind, Outcome.FAILED, broken[0].describe(), checks)
    if missing:
        return WitnessVerdict(witness.id, kind, Outcome.ERROR, missing[0].describe(), checks)
    return WitnessVerdict(witness.id, kind, Outcome.PASSED, left_out, checks)


def _by_id(outcomes: tuple[WitnessOutcome, ...]) -> dict[str, WitnessOutcome]:
    return {o.witness_id: o for o in outcomes}


def judge_liar(card: Card, run: LiarRun | None, name: str) -> LiarVerdict:
    if run is None:
        return LiarVerdict(name, LiarStatus.NOT_RUN, why="not run")
    if run.apply_error:
        return LiarVerdict(name, LiarStatus.ERROR, why=f"could not be applied: {run.apply_error}")
    if run.lost:
        return LiarVerdict(name, LiarStatus.ERROR, why=f"was lost: {run.lost}")
    got = _by_id(run.witnesses)
    judged = tuple(judge_witness(w, got.get(w.id)) for w in card.witnesses)
    caught_by = tuple(v.witness_id for v in judged if v.status == Outcome.FAILED)
    if caught_by:
        return LiarVerdict(name, LiarStatus.CAUGHT, caught_by, "", judged)
    errored = [v for v in judged if v.status == Outcome.ERROR]
    if errored:
        why = (
            f"proved nothing: witness {errored[0].witness_id} errored under it ({errored[0].why}); "
            "a liar is caught by a failed check, not by a crash"
        )
        return LiarVerdict(name, LiarStatus.INCONCLUSIVE, (), why, judged)
    if any(v.status in (Outcome.SKIPPED, Outcome.NOT_RUN) for v in judged):
        return LiarVerdict(name, LiarStatus.INCONCLUSIVE, (), "witnesses skipped or did not run under it", judged)
    return LiarVerdict(name, LiarStatus.SURVIVED, (), f"all {len(judged)} witness(es) passed under it", judged)


# ---------------------------------------------------------------- the verdict


def _more(items: list, shown: int = 1) -> str:
    rest = len(items) - shown
    return f" (+{rest} more)" if rest > 0 else ""


def mutation_reason(mutation: Any) -> str:
    """Why a card whose mutation score is below its floor is VACUOUS, naming the first survivor."""
    scored = mutation.killed + mutation.timeout + mutation.survived
    first = next((m for m in mutation.mutants if m.status == "survived"), None)
    eg = f"; e.g. {m_where(first)}" if first is not None else ""
    return (
        f"mutation score {mutation.score:.2f} < min_score {mutation.min_score:.2f}: {mutation.survived} of "
        f"{scored} mutants of the code it claims pass every witness{eg}"
    )


def unjudged_floor(card: Card, mutation: Any) -> str:
    """Why the card's ``mutation.min_score`` cannot be judged by ``mutation`` (the score the run has for it, or
    None), "" when it can or there is no floor: never measured, stale (its bytes, or its equivalence marks:
    ``mutation.stale_why``), measured on a partial or another sample than the floor's
    (``mutation.other_sample``, :mod:`harness.mutation.sample`), or no mutant scored (:func:`nothing_scored`)."""
    if card.min_score is None:
        return ""
    marks = getattr(mutation, "stale_why", "") if mutation is not None and mutation.stale else ""
    if mutation is None or (mutation.stale and not marks):
        return (
            f"mutation score not measured on these bytes (min_score {card.min_score:g}; the release profile "
            f"enforces it): run `{recorded_runner()} mutate --profile release`"
        )
    score = "–" if mutation.score is None else f"{mutation.score:.2f}"
    run = f" (run #{mutation.measured_run})" if getattr(mutation, "measured_run", None) is not None else ""
    if marks:
        return (
            f"the newest mutation score on these bytes, {score}{run}, was {marks}; min_score {card.min_score:g} is "
            f"judged only with the equivalence marks as they are now (the release profile enforces it): run "
            f"`{recorded_runner()} mutate {card.id}` (with --changed it reuses its mutants' results)"
        )
    other = getattr(mutation, "other_sample", "") or (
        "measured on a partial sample (only the mutant keys given with --mutant)" if mutation.partial else ""
    )
    if not other:
        return nothing_scored(card, mutation) if mutation.score is None else ""
    return (
        f"the newest mutation score on these bytes, {score}{run}, was {other}; min_score {card.min_score:g} is "
        f"judged only on the sample it was set on (the release profile enforces it): run "
        f"`{recorded_runner()} mutate {card.id}`"
    )


def nothing_scored(card: Card, mutation: Any) -> str:
    """Why a score on the floor's sample that scored no mutant (``score`` None: every sampled mutant was
    equivalent or an error, or the claimed code has none) does not meet ``min_score``: a floor that judged zero
    mutants did not hold, not even when the claimed code yields none (then the floor judges nothing)."""
    run = f" (run #{mutation.measured_run})" if getattr(mutation, "measured_run", None) is not None else ""
    if not mutation.candidates:
        return (
            f"the mutation score{run} scored no mutant: the code the card claims yields none (0 candidates), so "
            f"min_score {card.min_score:g} judges nothing (the release profile enforces it): claim the code the "
            "theorem is about (refs, covers) or remove mutation.min_score"
        )
    n = mutation.equivalent + mutation.error
    return (
        f"the mutation score{run} scored no mutant: of the {n} sampled, {mutation.equivalent} equivalent and "
        f"{mutation.error} error (could not be applied), so min_score {card.min_score:g} was not tested (the "
        f"release profile enforces it): `{recorded_runner()} mutate {card.id}` shows each mutant's status and why"
    )


def m_where(m: Any) -> str:
    """``path:line Qual.name: before -> after`` for a mutant result."""
    return f"{m.path}:{m.line} {m.qualname}: {m.change}"


def weak_property(run: PropertyRun, profile: str) -> str:
    """How a property's run fell short of ``profile``'s budget (:data:`PROFILE_EXAMPLES`) and the fix; "" when it
    did not, or the profile sets none.

    The rule is about the settings it ran under, not its count: a property whose search space Hypothesis
    exhausted before its ``max_examples`` (a small finite strategy) ran every example there is. A property
    that generated no example without exhausting anything, or with the generate phase off, is weak whatever
    its ``max_examples``; one no test case of which was seen (``max_examples`` None) cannot be shown to have
    run the budget.
    """
    budget = PROFILE_EXAMPLES.get(profile)
    fix = "the profile sets the budget"
    if budget is None:
        return ""
    if run.max_examples is None:
        return (
            "kvproof saw none of its test cases (it counts them through Hypothesis' observability callbacks): "
            "run the property under pytest, with a Hypothesis that has them"
        )
    if run.max_examples < budget:
        return (
            f"max_examples={run.max_examples} is below the {profile} profile's {budget}: "
            f"remove max_examples from @settings ({fix})"
        )
    if run.generate is False:
        return f"its settings leave out Phase.generate: remove phases from @settings ({fix}: {budget} examples)"
    if run.ran == 0 and not run.exhausted:
        return f"it generated no example of the {profile} profile's {budget}: remove what stops it from @settings"
    return ""


def _weak(v: WitnessVerdict, outcome: WitnessOutcome | None, profile: str) -> list[str]:
    """Each property of a witness that fell short of the profile's budget: ``witness W: property P ran N: why``."""
    return [
        f"{v.kind} {v.witness_id}: property {r.property} ran {r.ran} example(s): {why}"
        for n in (outcome.nodes if outcome else ())
        for r in n.examples
        if (why := weak_property(r, profile))
    ]


def evaluate(
    card: Card, outcomes: CardOutcomes, mutation: Any = None, *, floors: bool = False, profile: str | None = None
) -> CardVerdict:
    """Decide the card's verdict; see the module docstring for the precedence.

    ``mutation``: the card's :class:`harness.record.document.MutationResult` for the
    bytes it is bound to now, if measured; ``holds`` False (score below the
    card's ``mutation.min_score``) makes an otherwise PROVEN card VACUOUS.
    ``floors`` (the release profile): a card with a ``min_score`` and no such
    score is UNVERIFIED, not PROVEN (:func:`unjudged_floor` says why). A score
    that cannot judge (stale, another sample) has ``holds`` None.
    ``profile``: the run's Hypothesis profile; each property a witness ran is
    held to its budget (:data:`harness.wire.messages.PROFILE_EXAMPLES`, rule 10c).
    """
    if outcomes.link_problems:
        probs = list(outcomes.link_problems)
        return CardVerdict(card.id, Verdict.ERROR, f"not run: {probs[0]}{_more(probs)}")
    got_w, got_c = _by_id(outcomes.witnesses), _by_id(outcomes.controls)
    wv = tuple(judge_witness(w, got_w.get(w.id)) for w in card.witnesses)
    cv = tuple(judge_witness(c, got_c.get(c.id)) for c in card.controls)
    lv = tuple(judge_liar(card, next((r for r in outcomes.liars if r.name == n), None), n) for n in card.liars)
    if outcomes.liars_skipped:
        lv = tuple(
            LiarVerdict(v.name, LiarStatus.NOT_RUN, why=f"not run: {outcomes.liars_skipped}")
            if v.status == LiarStatus.NOT_RUN
            else v
            for v in lv
        )

    def result(verdict: str, reason: str) -> CardVerdict:
        return CardVerdict(card.id, verdict, reason, wv, cv, lv)

    failed = [v for v in wv + cv if v.status == Outcome.FAILED]
    if failed:
        v = failed[0]
        if v.kind == Kind.CONTROL:
            lead = f"control {v.witness_id} showed no difference"
        else:
            lead = f"witness {v.witness_id} failed"
        return result(Verdict.FAILED, f"{lead}: {v.why}{_more(failed)}")
    errors = [v for v in wv + cv if v.status in (Outcome.ERROR, Outcome.NOT_RUN)]
    if errors:
        v = errors[0]
        return result(Verdict.ERROR, f"{v.kind} {v.witness_id}: {v.why}{_more(errors)}")
    skipped = [v for v in wv + cv if v.status == Outcome.SKIPPED]
    if skipped:
        v = skipped[0]
        return result(Verdict.UNVERIFIED, f"{v.kind} {v.witness_id} skipped: {v.why}{_more(skipped)}")
    if card.liars and outcomes.liars_skipped and any(v.status == LiarStatus.NOT_RUN for v in lv):
        return result(Verdict.UNVERIFIED, f"witnesses hold, but liars were not run ({outcomes.liars_skipped})")
    for status, verdict in ((LiarStatus.ERROR, Verdict.ERROR), (LiarStatus.NOT_RUN, Verdict.UNVERIFIED)):
        bad = [v for v in lv if v.status == status]
        if bad:
            return result(verdict, f"liar {bad[0].name} {bad[0].why}{_more(bad)}")
    survived = [v for v in lv if v.status == LiarStatus.SURVIVED]
    if survived:
        names = ", ".join(v.name for v in survived)
        return result(Verdict.VACUOUS, f"liar {names} survived: {survived[0].why}")
    if mutation is not None and mutation.holds is False:
        return result(Verdict.VACUOUS, mutation_reason(mutation))
    inconclusive = [v for v in lv if v.status == LiarStatus.INCONCLUSIVE]
    if inconclusive:
        return result(Verdict.UNVERIFIED, f"liar {inconclusive[0].name}: {inconclusive[0].why}")
    unjudged = unjudged_floor(card, mutation) if floors else ""
    if unjudged:
        return result(Verdict.UNVERIFIED, unjudged)
    if profile is not None:
        weak = [
            t
            for v in wv + cv
            for t in _weak(v, (got_c if v.kind == Kind.CONTROL else got_w).get(v.witness_id), profile)
        ]
        if weak:
            return result(Verdict.UNVERIFIED, f"{weak[0]}{_more(weak)}")
    parts = [f"{len(wv)} witness(es) passed"]
    if cv:
        parts.append(f"{len(cv)} control(s) showed their difference")
    if lv:
        parts.append(f"{len(lv)}/{len(lv)} liar(s) caught")
    return result(Verdict.PROVEN, ", ".join(parts))
