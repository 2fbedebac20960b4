"""Judged cards -> the run document (:class:`harness.record.document.RunDocument`).

Order, totals, counts per verdict and regime, the headline measure, each
card's honest time and bound digest, the replay command and the gate result
are decided here once. Renderers read the report view built from this
document (:mod:`harness.report.view`) and compute nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.execute.outcomes import CardRun
from harness.plan.binding import BoundFile, digest
from harness.plan.subjects import split
from harness.project import command
from harness.record.document import (
    SCHEMA,
    SCHEMA_VERSION,
    CardResult,
    CheckResult,
    Claim,
    Counts,
    Headline,
    LiarResult,
    MutationResult,
    NodeEntry,
    NotProven,
    PropertyExamples,
    ReplayedFrom,
    RunDocument,
    RunHeader,
    Slowest,
    SlowestLiar,
    SubjectInfo,
    Summary,
    Timing,
    TimingRow,
    WitnessResult,
)
from harness.record.provenance import Provenance
from harness.select.cards import Card, Witness
from harness.statuses import VERDICTS, Gate, LiarStatus, Outcome, Verdict
from harness.verdict import (
    NOT_APPLICABLE_PREFIX,
    BoundCheck,
    CardVerdict,
    LiarVerdict,
    WitnessOutcome,
    WitnessVerdict,
    weak_property,
)
from harness.wire.safetext import escape_value, is_safe_value
from harness.wording import check_text, short_check

REGIMES = ("N", "A", "C", "D")
HEADLINE_KEYS = (("max_abs_delta", "max|Δ|"), ("max_rel_delta", "max rel Δ"))


@dataclass(frozen=True)
class CardReport:
    """Inputs for one card: what it claims, how it ran, what was decided, what it is bound to."""

    card: Card
    run: CardRun
    verdict: CardVerdict
    bound_files: tuple[BoundFile, ...]
    mutation: MutationResult | None = None  # measured in this run (mutate) or recalled from the ledger


@dataclass(frozen=True)
class Replayed:
    """A card not run again (``--changed``): its result from the original run whose bound files had these bytes.

    ``run_id``, ``started`` and ``report_dir`` name that original run (never
    another replay: see :meth:`harness.ledger.history.Ledger.last_matching`).
    """

    entry: CardResult
    run_id: int
    started: str
    report_dir: str | None


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def fraction(a: int, b: int) -> str:
    """``3/4``, or ``–`` when there is nothing to count."""
    return f"{a}/{b}" if b else "–"


def liars_fraction(counts: Mapping[str, Any]) -> str:
    """``2/3`` caught, or ``not run`` when the card lists liars but none ran (e.g. its witnesses failed)."""
    if counts["liars_total"] and counts.get("liars_run", counts["liars_total"]) == 0:
        return "not run"
    return fraction(counts["liars_caught"], counts["liars_total"])


def _worst(op: str, checks: list[CheckResult]) -> CheckResult:
    """The check furthest on the wrong side of its bound: max for le/lt, min for ge/gt, else the first broken."""
    if op in ("le", "lt"):
        return max(checks, key=lambda c: (math.isnan(c.actual), c.actual))
    if op in ("ge", "gt"):
        return min(checks, key=lambda c: (not math.isnan(c.actual), c.actual))
    return next((c for c in checks if c.holds is False), checks[0])


def headline(witnesses: Iterable[WitnessResult]) -> Headline | None:
    """The measure shown beside a verdict, taken from bounded evidence of the witnesses (not controls).

    The first bound in card order on a delta key (max_abs_delta, max_rel_delta)
    that was recorded as a number, else the first recorded numeric bound;
    for a parametrized witness its worst node. Unbounded evidence never
    becomes the headline (ORACLE-PARITY records hidden-state absolute deltas
    for information; its claim is bounded on the logits). None when nothing
    bounded was measured.
    """
    witnesses = list(witnesses)
    labels = dict(HEADLINE_KEYS)
    for wanted in (lambda key: key in labels, lambda key: True):
        for w in witnesses:
            by_bound: dict[tuple[str, str], list[CheckResult]] = {}
            for c in w.bounds:
                if c.holds is not None and _num(c.actual) and wanted(c.key):
                    by_bound.setdefault((c.key, c.op), []).append(c)
            for (key, op), checks in by_bound.items():
                worst = _worst(op, checks)
                value, limit = worst.actual, worst.limit
                shown = float(value) if key in labels else value
                text = check_text(key, op, limit, shown, label=labels.get(key, ""))
                return Headline(key, value, text, w.id, op, limit, worst.holds)
    return None


def failed_headline(witnesses: Iterable[WitnessResult]) -> Headline | None:
    """A FAILED card's headline: what failed, never a measure that held. The first failed witness's (or
    control's) broken bound, or, when its test failed, its check in short (``handles-agree: handle 1: the rows
    held ...``). None when no witness failed (the caller falls back to :func:`headline`)."""
    w = next((w for w in witnesses if w.status == Outcome.FAILED), None)
    if w is None:
        return None
    broken = [c for c in w.bounds if c.holds is False]
    if broken:
        c = broken[0]
        labels = dict(HEADLINE_KEYS)
        shown = float(c.actual) if c.key in labels and _num(c.actual) else c.actual
        text = check_text(c.key, c.op, c.limit, shown, label=labels.get(c.key, ""))
        return Headline(c.key, c.actual, text, w.id, c.op, c.limit, False)
    said = (w.hypothesis or {}).get("check") or w.message or w.why
    return Headline("", None, f"{w.id}: {short_check(said)}" if said else f"{w.id} failed", w.id, "", None, False)


def _check(c: BoundCheck) -> CheckResult:
    return CheckResult(c.key, c.op, c.limit, c.actual, c.holds, c.nodeid, c.detail)


def _examples(outcome: WitnessOutcome | None, profile: str) -> tuple[PropertyExamples, ...]:
    """Each Hypothesis property the witness's nodes ran, with how it fell short of ``profile``'s budget."""
    nodes = outcome.nodes if outcome else ()
    return tuple(
        PropertyExamples(
            r.property,
            r.ran,
            r.max_examples,
            r.generate,
            r.exhausted,
            r.explicit,
            node=n.nodeid if len(nodes) > 1 else "",
            short=weak_property(r, profile),
        )
        for n in nodes
        for r in n.examples
    )


def _witness_result(
    w: Witness, outcome: WitnessOutcome | None, judged: WitnessVerdict, replay: str = "", profile: str = ""
) -> WitnessResult:
    """One witness as judged; ``replay`` (honest runs only) is added to a falsified Hypothesis example;
    ``profile``: the run's, whose budget its Hypothesis properties are held to."""
    nodes = outcome.nodes if outcome else ()
    bad = next((n for n in nodes if n.outcome != Outcome.PASSED), None)
    hyp = next((dict(n.hypothesis) for n in nodes if n.hypothesis), None)
    if hyp and hyp.get("example") and replay:
        hyp["replay"] = replay
    checks = tuple(_check(c) for c in judged.checks) or tuple(
        CheckResult(b.key, b.op, b.limit, None, None) for b in w.bounds
    )
    return WitnessResult(
        id=w.id,
        kind=w.kind,
        test=w.test,
        status=judged.status,
        why=judged.why,
        duration_s=round(outcome.duration, 4) if outcome else 0.0,
        timeout_s=w.timeout,
        evidence=dict(outcome.evidence) if outcome else {},
        bounds=checks,
        reason=w.reason,
        message=bad.message if bad else "",
        location=bad.location if bad else "",
        failure=bad.failure if bad else "",
        hypothesis=hyp,
        nodes=tuple(NodeEntry(n.nodeid, n.outcome, round(n.duration, 4)) for n in nodes),
        evidence_per_node=outcome.per_node if outcome else False,
        examples=_examples(outcome, profile),
    )


def _liar_result(card: Card, lv: LiarVerdict, run: CardRun) -> LiarResult:
    lrun = next((r for r in run.outcomes.liars if r.name == lv.name), None)
    outcomes = {o.witness_id: o for o in (lrun.witnesses if lrun else ())}
    return LiarResult(
        lv.name,
        lv.caught,
        tuple(lv.caught_by),
        lv.status,
        lv.why,
        round(lrun.duration, 4) if lrun else 0.0,
        tuple(_witness_result(w, outcomes.get(w.id), j) for w, j in zip(card.witnesses, lv.witnesses, strict=False)),
        node=lrun.node if lrun else "",
    )


def _detail(verdict: str, entries: Iterable[WitnessResult], liars: tuple[LiarResult, ...]) -> str:
    """A second line under the reason: the shrunk example, or which witness caught which liar."""
    if verdict == Verdict.PROVEN:
        return ""
    for e in entries:
        hyp = e.hypothesis or {}
        if e.status == Outcome.FAILED and hyp.get("example"):
            lines = [ln.strip() for ln in hyp["example"].splitlines() if ln.strip()]
            text = " ".join(lines)
            return (text if len(text) <= 160 else text[:157] + "...") + f" (seed {hyp.get('seed')})"
    if liars and any(entry.status != LiarStatus.NOT_RUN for entry in liars):
        parts = [
            f"{entry.name} caught by {', '.join(entry.caught_by)}" if entry.caught else f"{entry.name} {entry.status}"
            for entry in liars
        ]
        return "liars: " + "; ".join(parts)
    return ""


def card_result(rep: CardReport, settings: RunSettings) -> CardResult:
    """One card that ran in this run, judged."""
    card, run, v = rep.card, rep.run, rep.verdict
    replay = replay_command(settings, card.id)
    w_out = {o.witness_id: o for o in run.outcomes.witnesses}
    c_out = {o.witness_id: o for o in run.outcomes.controls}
    witnesses = tuple(
        _witness_result(w, w_out.get(w.id), j, replay, settings.profile)
        for w, j in zip(card.witnesses, v.witnesses, strict=False)
    )
    controls = tuple(
        _witness_result(c, c_out.get(c.id), j, replay, settings.profile)
        for c, j in zip(card.controls, v.controls, strict=False)
    )
    liars = tuple(_liar_result(card, lv, run) for lv in v.liars)
    counts = Counts(
        witnesses_passed=sum(w.status == Outcome.PASSED for w in witnesses),
        witnesses_total=len(witnesses),
        controls_held=sum(c.status == Outcome.PASSED for c in controls),
        controls_total=len(controls),
        liars_caught=sum(entry.caught for entry in liars),
        liars_total=len(liars),
        liars_run=sum(entry.status != LiarStatus.NOT_RUN for entry in liars),
    )
    return CardResult(
        id=card.id,
        title=card.title,
        module=card.module,
        regime=card.regime,
        version=card.version,
        fingerprint=card.fingerprint,
        card_path=card.display_path,
        tags=card.tags,
        requires=card.requires,
        refs=card.refs,
        theorem=card.theorem,
        proof=card.proof,
        notes=card.notes,
        verdict=v.verdict,
        reason=v.reason,
        duration_s=round(run.duration, 3),
        headline=(v.verdict == Verdict.FAILED and failed_headline(witnesses + controls)) or headline(witnesses),
        counts=counts,
        detail=_detail(v.verdict, witnesses + controls, liars),
        replayed_from=None,
        bound_files=rep.bound_files,
        witnesses=witnesses,
        controls=controls,
        liars=liars,
        honest_s=round(run.honest_s, 3),
        bound_digest=digest(rep.bound_files),
        mutation=rep.mutation,
        honest_node=run.honest_node,
    )


def replayed_result(rep: Replayed) -> CardResult:
    """The original result, marked as replayed; ``duration_s`` 0 (this run spent nothing on it)."""
    entry = rep.entry
    return replace(
        entry, replayed_from=ReplayedFrom(rep.run_id, rep.started, rep.report_dir, entry.duration_s), duration_s=0.0
    )


def timing(cards: tuple[CardResult, ...], wall_s: float | None, jobs: int | None) -> Timing:
    """Where the time went, per card, slowest first: the honest process, its start-up, the liar processes.

    ``startup_s`` is the honest process's time outside any witness node
    (interpreter start, imports, collection); a model load inside a fixture
    counts toward the first witness that asked for it.
    """
    rows = []
    for c in cards:
        if c.replayed_from or not c.duration_s:
            continue  # replayed, or not run (link problems)
        liars = [entry for entry in c.liars if entry.status != LiarStatus.NOT_RUN or entry.duration_s]
        nodes = c.witnesses + c.controls
        slow = max(nodes, key=lambda w: w.duration_s, default=None)
        slow_liar = max(liars, key=lambda entry: entry.duration_s, default=None)
        rows.append(
            TimingRow(
                id=c.id,
                total_s=round(c.duration_s, 3),
                honest_s=round(c.honest_s, 3),
                startup_s=round(max(c.honest_s - sum(w.duration_s for w in nodes), 0.0), 3),
                liars_s=round(sum(entry.duration_s for entry in liars), 3),
                liar_runs=len(liars),
                slowest_witness=Slowest(slow.id, slow.duration_s) if slow else None,
                slowest_liar=SlowestLiar(slow_liar.name, slow_liar.duration_s) if slow_liar else None,
                nodes=tuple(dict.fromkeys(n for n in (c.honest_node, *(entry.node for entry in liars)) if n)),
            )
        )
    rows.sort(key=lambda r: -r.total_s)
    return Timing(
        wall_s=None if wall_s is None else round(wall_s, 3),
        jobs=jobs,
        process_s=round(sum(r.total_s for r in rows), 3),
        processes=sum(1 + r.liar_runs for r in rows if r.total_s > 0),
        replayed=sum(1 for c in cards if c.replayed_from),
        cards=tuple(rows),
    )


def replay_command(settings: RunSettings | RunHeader, card_id: str) -> str:
    """The command that reruns one card with this run's profile and seed (and its cards folder if not the default),
    as it runs from the project root (:func:`harness.project.command` at the root: ``kvproof run ...`` or
    ``.venv/bin/python run_obligations.py run ...``): the run records it, so it does not depend on where the run
    was started."""
    cards = ""
    root, folder = settings.root, settings.cards_dir
    if root and folder and Path(folder) != Path(root) / "obligations":
        try:
            shown = Path(folder).relative_to(root).as_posix()
        except ValueError:
            shown = folder
        cards = f" --cards {shown}"
    return command(
        f"run {card_id}{cards} --profile {settings.profile} --seed {settings.seed}", at=Path(root) if root else None
    )


@dataclass(frozen=True)
class RunSettings:
    """How the run was asked for: what the header says besides provenance and results."""

    profile: str
    seed: int | None
    liars: bool
    default_timeout_s: float
    command: str
    root: str
    cards_dir: str
    jobs: int | None
    changed: bool
    numerics: str | None = None
    launcher: str | None = None
    executor: str | None = None
    subjects: tuple[SubjectInfo, ...] = ()  # run --matrix: every configuration, runnable here or not


def not_applicable(card: CardResult) -> bool:
    """A cell the card does not apply to: nothing failed or errored, and every witness that did not pass
    skipped saying ``n/a: ...`` (a target lacks a capability; a configuration lacks the path the card is
    about, e.g. KERNEL-ACC without the C kernel). Shown as "n/a", never counted for the gate."""
    rest = [w for w in card.witnesses + card.controls if w.status != Outcome.PASSED]
    return (
        card.verdict == Verdict.UNVERIFIED
        and bool(rest)
        and all(w.status == Outcome.SKIPPED and w.message.startswith(NOT_APPLICABLE_PREFIX) for w in rest)
    )


def required_cell(card: CardResult, subjects: Iterable[SubjectInfo]) -> bool:
    """Does the cell ``card`` (id ``CARD@SUBJECT``, or a card of a plain run) count for the gate? Cells of a
    configuration marked ``required: false`` do not, nor cards the run's path does not apply to
    (:func:`not_applicable`: KERNEL-ACC where no C kernel is loaded), in any run: a plain run agrees with the
    matrix. Every other cell does; a gate with no counted cell fails."""
    _, name = split(card.id)
    subjects = tuple(subjects)
    if not_applicable(card):
        return False
    return next((s.required for s in subjects if s.name == name), True)


def build(
    prov: Provenance,
    settings: RunSettings,
    reports: Iterable[CardReport | Replayed],
    *,
    finished: str | None = None,
    wall_s: float | None = None,
    claims: tuple[Claim, ...] = (),
) -> RunDocument:
    """The run document, cards in card order.

    Adds to ``prov`` and ``settings`` the schema name and version, the
    finish time, per-verdict and per-regime counts, how many verdicts were
    replayed and the gate result (PASS only when every card is PROVEN,
    replayed or not), and :func:`timing`.
    """
    cards = tuple(replayed_result(r) if isinstance(r, Replayed) else card_result(r, settings) for r in reports)
    counts = {k: sum(c.verdict == k for c in cards) for k in VERDICTS}
    by_regime = {r: {k: sum(c.verdict == k and c.regime == r for c in cards) for k in VERDICTS} for r in REGIMES}
    counted = [c for c in cards if required_cell(c, settings.subjects)]
    gate = Gate.PASS if counted and all(c.verdict == Verdict.PROVEN for c in counted) else Gate.FAIL
    not_proven = tuple(NotProven(c.id, c.verdict, c.reason) for c in cards if c.verdict != Verdict.PROVEN)
    summary = Summary(len(cards), counts, by_regime, gate, not_proven, sum(1 for c in cards if c.replayed_from))
    header = RunHeader(
        schema=SCHEMA,
        schema_version=SCHEMA_VERSION,
        started=prov.started,
        git=prov.git,
        host=prov.host,
        versions=prov.versions,
        profile=settings.profile,
        seed=settings.seed,
        liars=settings.liars,
        default_timeout_s=settings.default_timeout_s,
        command=settings.command,
        root=settings.root,
        cards_dir=settings.cards_dir,
        jobs=settings.jobs,
        changed=settings.changed,
        finished=finished,
        duration_s=round(wall_s if wall_s is not None else sum(c.duration_s for c in cards), 3),
        summary=summary,
        numerics=settings.numerics,
        launcher=settings.launcher,
        executor=settings.executor,
        subjects=settings.subjects,
    )
    return made_safe(RunDocument(header, cards, timing(cards, wall_s, settings.jobs), claims))


def made_safe(doc: RunDocument) -> RunDocument:
    """``doc`` with every text in it safe to store and show (:mod:`harness.wire.safetext`: control characters and lone
    surrogates as visible escapes). What a witness process wrote was made safe where it entered
    (:mod:`harness.execute.ingress`); this is the last line for the rest: paths from the file system, the
    command line, names and messages from project code. A document that is safe already is returned as is."""
    data = doc.to_json()
    if is_safe_value(data):
        return doc
    return RunDocument.from_json(escape_value(data))
