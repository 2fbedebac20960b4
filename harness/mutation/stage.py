"""The mutation stage of a run: ``run_obligations.py mutate`` (see :mod:`harness.mutation.score` for the method).

:func:`measure` runs after the cards' honest and liar runs (:func:`harness.pipeline.execute`):
for every card whose honest run held it generates and samples the mutants
of the code the card claims, runs each in the ``-j`` worker pool
(:func:`harness.execute.schedule.run_jobs`) against the card's witnesses only,
classifies and scores them. With ``--changed`` a mutant whose result the
ledger holds for the same bound bytes (same card digest, same key) is not
run again; its status is decided again with the equivalence marks as they
are now (a survivor marked since is equivalent, an equivalent whose mark was
removed survives), and the score records those marks
(:func:`harness.mutation.score.score_marks`). :func:`recall` is what a plain ``run`` does instead: it reads
each card's newest score measured on its floor's sample and on the bytes it
is bound to now (:mod:`harness.mutation.sample`), else its newest score,
shown as stale or as measured on another sample, never judging.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

from harness.execute.executor import RAY
from harness.execute.forkserver import WarmFacts
from harness.execute.jobs import Job, RunConfig, WarmCard, WarmSpec
from harness.execute.launcher import WARM
from harness.execute.outcomes import CardRun, witness_outcomes
from harness.execute.schedule import run_jobs
from harness.mutation import cbuild, score
from harness.mutation import generate as gen
from harness.mutation import sample as smp
from harness.mutation.marks import Mark
from harness.mutation.pool import MutantPool
from harness.mutation.reach import Killers, Reach, reach_of
from harness.mutation.recall import open_ledger
from harness.plan.subjects import DEFAULT
from harness.record import provenance
from harness.record.document import Claim, MutantResult, MutationResult
from harness.request import MutateOptions, Reporter, RunRequest
from harness.select import csource
from harness.select.cards import Card
from harness.statuses import MutantStatus, Outcome
from harness.wire import messages

if TYPE_CHECKING:
    from harness.plan.planning import RunPlan


@dataclass(frozen=True)
class Measured:
    """What the mutation stage produced."""

    results: Mapping[str, MutationResult]  # card id -> its score (cards not measured are absent)
    skipped: Mapping[str, str]  # card id -> why it was not measured
    claims: tuple[Claim, ...]
    mutants_run: int
    mutants_reused: int
    wall_s: float
    not_reached: int = 0  # survivors never run: no witness runs their lines
    first_kill: int = 0  # run mutants killed (or timed out) by the first witness they ran against
    started: Mapping[str, int] = field(default_factory=dict)  # how run mutants started ("warm", "fresh: why") -> n
    traced: int = 0  # cards whose line coverage took a run of its own (their honest run was replayed)
    witness_s: float = 0.0  # witness seconds the run mutants needed (MutantResult.witness_s, summed)


def _say(reporter: Reporter | None, text: str) -> None:
    if reporter is not None:
        reporter.note(text)


def _honest_times(card: Card, run: CardRun | None, entry) -> tuple[bool, dict[str, float]]:
    """(did the honest run hold, witness id -> seconds) from this run's outcomes or a replayed entry."""
    if run is not None:
        outs = run.outcomes.witnesses + run.outcomes.controls
        held = len(outs) == len(card.all_witnesses) and all(o.status == Outcome.PASSED for o in outs)
        return held, {o.witness_id: o.duration for o in run.outcomes.witnesses}
    if entry is not None:
        outs = entry.witnesses + entry.controls
        return all(w.status == Outcome.PASSED for w in outs), {w.id: w.duration_s for w in entry.witnesses}
    return False, {}


# the run's profile -> the profile its mutants run under (else the same): a release run's, the floor sample's
MUTANT_PROFILES = {"release": smp.FLOOR_PROFILE}


def mutant_profile(profile: str) -> str:
    """The profile a run's mutants run under: the release profile's cards run 1000 random examples a property,
    its mutants the ci profile's 50 with ci's seed (:func:`mutant_config`: the budget the floors are set at, the
    status a ci run measures, and a cost a release can pay: survivors run every covering witness in full)."""
    return MUTANT_PROFILES.get(profile, profile)


MUTANT_SEED = smp.FLOOR_HYPOTHESIS_SEED  # the Hypothesis seed of mutants run under another profile than the run's


def mutant_config(req: RunRequest) -> RunConfig:
    """How a run's mutants (and the stage's own tracing of their witnesses) run: no liars, the run's profile and
    Hypothesis seed, or under :func:`mutant_profile` when that is another profile, that profile's seed
    (:data:`MUTANT_SEED`): a release run's random seed would give its mutants other examples than a ci
    ``mutate`` run's, and another status (measured: 2 of 1,071 differed), where the point of running them
    under ci is the status a floor was set at."""
    profile = mutant_profile(req.profile)
    return RunConfig(
        root=req.root,
        profile=profile,
        seed=req.seed if profile == req.profile else MUTANT_SEED,
        default_timeout=req.timeout,
        liars=False,
        oracle_dir=req.oracle_dir,
    )


def traced_files(req: RunRequest, cards: Sequence[Card]) -> dict[str, tuple[str, ...]]:
    """Card id -> the files its honest run traces in a ``mutate`` run: the Python files it claims
    (default configuration only; none for ``--slow``, nor where the mutants run under another profile than the
    cards: lines run under one profile's examples say nothing of another's, the stage traces them itself)."""
    opts = req.mutate
    if opts is None or not opts.fast or mutant_profile(req.profile) != req.profile:
        return {}
    return {c.id: tuple(score.claimed(c, req.root)) for c in cards if c.subject == DEFAULT}


def _why_fresh(m: gen.Mutant, facts: WarmFacts) -> str:
    """Why ``m`` cannot fork from its card's warm server ("" when it can): what the fork would not reproduce."""
    if facts.refused:
        return facts.refused
    ran = facts.ran.get(m.path, frozenset())
    if any(n in ran for n in m.lines):
        return f"line {m.line} runs while the witnesses are imported or collected, before a fork could change it"
    holder = facts.held.get(f"{m.path}::{m.qualname}")
    if holder:
        return f"{m.qualname} is also held by {holder} (a parametrize list, a closure, ...), which a fork cannot rebind"
    return ""


def _by_build(r: MutantResult) -> bool:
    """An equivalent its build decided (not in this build, or the same bytes): no mark needed."""
    return r.how == score.BUILT_OUT or r.detail in (cbuild.EQUIVALENT_SAME_CODE, cbuild.NOT_IN_BUILD)


def _built(
    req: RunRequest,
    jobs: list[tuple[str, gen.Mutant, Job]],
    marks: Mapping[str, Mark],
    ran: dict[tuple[str, str], MutantResult],
    reporter: Reporter | None,
) -> list[tuple[str, gen.Mutant, Job]]:
    """Build the C mutants among ``jobs`` (:mod:`harness.mutation.cbuild`): one that does not compile is error,
    one that compiles to the unchanged file's bytes equivalent (both into ``ran``, never run); the jobs left."""
    cs = [m for _, m, _ in jobs if csource.is_c(m.path)]
    if not cs:
        return jobs
    fast = req.mutate.fast if req.mutate is not None else True  # --slow: every C mutant built alone (the reference)
    report = cbuild.prebuild(req.root, cs, req.jobs, partial(_say, reporter), schema=fast)
    counts = {s: sum(b.status == s for b in report.results.values()) for s in ("ok", "same", "error")}
    _say(
        reporter,
        f"mutate: {len(report.results)} C mutant(s) built in {report.wall_s:.1f} s "
        f"({report.cpu_s:.1f} s of compiling): {counts['ok']} to run, {counts['same']} compile to the unchanged "
        "bytes (equivalent, not run), "
        f"{counts['error']} do not compile (error, not scored)",
    )
    left = []
    for cid, m, job in jobs:
        b = report.results.get(m.key)
        if b is None or b.status == "ok":
            left.append((cid, m, job))
        elif b.status == "same":
            ran[(cid, m.key)] = score.built_out(m, MutantStatus.EQUIVALENT, b.detail, req.root)
        else:
            ran[(cid, m.key)] = score.built_out(m, MutantStatus.ERROR, b.detail, req.root)
    return left


def _same_bytes(req: RunRequest, ran: dict[tuple[str, str], MutantResult], reporter: Reporter | None) -> None:
    """C survivors that ran in the schema, built alone and compared with the unchanged file's build: the same
    bytes is equivalent (trivial compiler equivalence: e.g. ``NP * NV`` and ``NP / NV`` where this build's NV is
    1). Only a survivor can be equivalent, so only survivors pay for a build of their own."""
    survivors = {
        m.key: m
        for (cid, key), r in ran.items()
        if r.status == MutantStatus.SURVIVED and csource.is_c(r.path) and r.how != score.BUILT_OUT
        for m in [gen.find(req.root, key)[0]]
    }
    if not survivors:
        return
    _say(reporter, f"mutate: building the {len(survivors)} surviving C mutant(s) alone (same bytes: equivalent) ...")
    report = cbuild.prebuild(req.root, list(survivors.values()), req.jobs, schema=False)
    same = {k for k, b in report.results.items() if b.status == "same"}
    for (cid, key), r in list(ran.items()):
        if key in same and r.status == MutantStatus.SURVIVED:
            ran[(cid, key)] = replace(r, status=MutantStatus.EQUIVALENT, detail=report.results[key].detail)
    _say(reporter, f"mutate: {len(same)} of them compile to the unchanged bytes (equivalent)")


def _traced(
    req: RunRequest, cfg: RunConfig, plans: Mapping[str, score.CardMutants], need: Sequence[str]
) -> tuple[dict[str, list[messages.LinesRun]], dict[str, dict[str, float]], dict[str, dict[str, tuple[str, ...]]]]:
    """Line coverage for cards whose honest run did not trace this time (replayed, or run under another profile
    than the mutants'): their witnesses once more, under ``cfg``. Also each witness's seconds (its timeout base)
    and nodes."""
    jobs = [
        Job(plans[c].card, plans[c].card.witnesses, coverage=tuple(score.claimed(plans[c].card, req.root)))
        for c in need
    ]
    results = run_jobs(jobs, cfg, jobs=req.jobs, executor=req.executor)
    out, took, nodes = {}, {}, {}
    for cid, job, res in zip(need, jobs, results, strict=True):
        ok = all(r.outcome == Outcome.PASSED for r in res.results.values()) and not res.stopped
        out[cid] = res.lines_run if ok else []  # a run that did not hold says nothing: every witness runs
        outs = witness_outcomes(job.witnesses, res) if ok else ()
        took[cid] = {o.witness_id: o.duration for o in outs}
        nodes[cid] = _nodes(outs)
    return out, took, nodes


def _nodes(outcomes) -> dict[str, tuple[str, ...]]:
    """Witness id -> the node ids an honest run ran for it."""
    return {o.witness_id: tuple(n.nodeid for n in o.nodes) for o in outcomes}


def measure(
    req: RunRequest,
    the_plan: RunPlan,
    runs: Mapping[str, CardRun],
    marks: Mapping[str, Mark],
    reporter: Reporter | None,
    all_cards: Sequence[Card] = (),
) -> Measured:
    """Generate, run, classify and score the mutants of every selected card whose honest run held.

    One step a function, in order: choose (the cards measured, their mutants drawn), recall (the ledger's
    scores, --changed's reusable results), reach (line coverage: who runs what), jobs (built and ordered),
    announce, run, score (each card's, with the marks as they are now), claims (the project view), tally.
    ``all_cards`` (every loaded card, selected or not) decides which
    functions the project view counts as claimed.
    """
    opts = req.mutate or MutateOptions()
    t0 = time.monotonic()
    generated = score.Generated(req.root)
    cfg = mutant_config(req)
    chosen = _choose(req, opts, cfg, the_plan, runs, generated, reporter)
    recalled = _recall(req, the_plan, chosen)
    todo = {
        cid: [m for m in cm.sample if m.key not in recalled.reused.get(cid, {})] for cid, cm in chosen.plans.items()
    }
    reached = _reach(req, opts, cfg, runs, chosen, todo, reporter)
    ran: dict[tuple[str, str], MutantResult] = {}
    jobs = _jobs(req, opts, marks, chosen.plans, reached, todo, ran, reporter)
    n_reused = sum(len(cm.sample) for cm in chosen.plans.values()) - len(jobs) - len(ran)
    _announce(req, opts, chosen.plans, jobs, ran, n_reused, reporter)
    _run(req, opts, cfg, marks, chosen.plans, jobs, recalled.last, ran, reporter)
    out, per_card = _score_cards(req, opts, the_plan, marks, chosen, recalled, ran)
    table = _claims(req, the_plan, all_cards, chosen.plans, per_card, generated)
    run_rows = [ran[(cid, m.key)] for cid, m, _ in jobs]
    started, wall = _tally(opts, jobs, run_rows, t0, reporter)
    return Measured(
        out,
        chosen.skipped,
        table,
        len(jobs),
        n_reused,
        wall,
        not_reached=sum(r.how == score.NOT_REACHED for r in ran.values()),
        first_kill=sum(r.status in (MutantStatus.KILLED, MutantStatus.TIMEOUT) and r.tried == 1 for r in run_rows),
        started=started,
        traced=reached.traced,
        witness_s=round(sum(r.witness_s for r in run_rows), 3),
    )


@dataclass(frozen=True)
class _Chosen:
    """What :func:`_choose` decided: the cards measured and their mutants, the cards skipped and why."""

    plans: dict[str, score.CardMutants]  # card id -> its mutants (the cards measured, in plan order)
    skipped: dict[str, str]  # card id -> why it is not measured
    samples: dict[str, tuple[smp.Sample, bool]]  # card id -> (what it is measured on, is that the floor's)
    took: dict[str, dict[str, float]]  # card id -> witness id -> its honest run's seconds
    timeouts: dict[str, dict[str, float]]  # card id -> witness id -> a mutant's timeout


def _choose(
    req: RunRequest,
    opts: MutateOptions,
    cfg: RunConfig,
    the_plan: RunPlan,
    runs: Mapping[str, CardRun],
    generated: score.Generated,
    reporter: Reporter | None,
) -> _Chosen:
    """Step 1, choose: each card whose honest run held, its mutants drawn, their timeouts and its sample."""
    chosen = _Chosen({}, {}, {}, {}, {})
    _say(reporter, "mutate: generating the mutants of the code each card claims ...")
    for card in the_plan.cards:
        if card.subject != DEFAULT:
            continue  # a score measures the witnesses: on the default configuration only (run --matrix cells)
        replay = the_plan.replays.get(card.id)
        held, chosen.took[card.id] = _honest_times(card, runs.get(card.id), replay.entry if replay else None)
        if not held:
            chosen.skipped[card.id] = "not measured: the card's honest run did not hold (mutants say nothing then)"
            continue
        cm = score.card_mutants(card, generated, None if opts.only else opts.max_mutants, opts.seed)
        if opts.only:
            cm = replace(cm, sample=tuple(m for m in cm.sample if m.key in opts.only))
            if not cm.sample:
                chosen.skipped[card.id] = "not measured: none of the --mutant keys is a mutant of the code it claims"
                continue
        if not cm.functions:
            chosen.skipped[card.id] = "not measured: the card claims no Python function (no refs into code, no covers)"
            continue
        chosen.plans[card.id] = cm
        chosen.timeouts[card.id] = score.mutant_timeouts(card, chosen.took[card.id], req.timeout)
        chosen.samples[card.id] = _sample_of(card, cm, opts, cfg, req.timeout, generated)
    return chosen


@dataclass(frozen=True)
class _Recalled:
    """What the ledger holds for the cards measured (:func:`_recall`)."""

    reused: dict[str, dict[str, MutantResult]]  # card id -> mutant key -> its result (--changed: same bytes)
    previous: dict[str, float | None]  # card id -> its newest score on the same sample
    last: dict[str, MutationResult]  # card id -> its newest score on any sample (killers first)


def _recall(req: RunRequest, the_plan: RunPlan, chosen: _Chosen) -> _Recalled:
    """Step 2, recall: each card's newest scores in the ledger, and with --changed the results it may reuse."""
    recalled = _Recalled({}, {}, {})
    ledger = open_ledger(req)
    if ledger is None:
        return recalled
    with ledger:
        for cid in chosen.plans:
            newest = ledger.last_mutation(cid)
            if newest is not None:
                recalled.last[cid] = newest[2]  # killers first: whatever sample they were found on
            sample, floor = chosen.samples[cid]
            before = ledger.last_mutation(cid, sample=smp.stored_key(sample, floor))  # on the same sample
            recalled.previous[cid] = before[2].score if before else None
            if req.changed:  # a mutant's status depends on the conditions it was judged under, not the draw
                digest = score.score_digest(chosen.plans[cid].card, the_plan.bound[cid])
                same = ledger.last_mutation(cid, digest, conditions=sample.conditions)
                if same is not None:
                    recalled.reused[cid] = {
                        m.key: replace(m, reused_from=m.reused_from or same[0])
                        for m in same[2].mutants
                        if m.status != MutantStatus.ERROR
                    }
    return recalled


@dataclass(frozen=True)
class _Reached:
    """What :func:`_reach` found: which witnesses run each card's lines, and the times its mutants run with."""

    reach: dict[str, Reach | None]  # card id -> who runs which lines (none without --fast)
    traced: int  # cards whose line coverage took a run of its own
    took: dict[str, dict[str, float]]  # card id -> witness id -> seconds (under the mutants' profile)
    timeouts: dict[str, dict[str, float]]  # card id -> witness id -> a mutant's timeout


def _reach(
    req: RunRequest,
    opts: MutateOptions,
    cfg: RunConfig,
    runs: Mapping[str, CardRun],
    chosen: _Chosen,
    todo: Mapping[str, list[gen.Mutant]],
    reporter: Reporter | None,
) -> _Reached:
    """Step 3, reach: each card's line coverage (its honest run's, else a run of its own) -> who reaches what."""
    plans = chosen.plans
    reached = _Reached({}, 0, dict(chosen.took), dict(chosen.timeouts))
    if not opts.fast:
        return reached
    traced: dict[str, list[messages.LinesRun]] = {}
    traced_nodes: dict[str, dict[str, tuple[str, ...]]] = {}
    other = cfg.profile != req.profile  # the cards ran under another profile than the mutants will
    need = [cid for cid in plans if todo[cid] and (other or not (runs.get(cid) and runs[cid].lines_run))]
    if need:
        why = (
            f"under the {cfg.profile} profile and Hypothesis seed {cfg.seed}, which the mutants run under"
            if other
            else "replayed card(s)"
        )
        _say(reporter, f"mutate: tracing the witnesses of {len(need)} card(s) for line coverage ({why}) ...")
        traced, times, traced_nodes = _traced(req, cfg, plans, need)
        for cid, t in times.items():
            if other and t:  # the timeouts of mutants under this profile: from its own times
                reached.took[cid] = t
                reached.timeouts[cid] = score.mutant_timeouts(plans[cid].card, t, req.timeout)
    for cid in plans:
        if cid in traced:
            lines, nodes = traced[cid], traced_nodes.get(cid)
        elif cid in runs:
            lines, nodes = runs[cid].lines_run, _nodes(runs[cid].outcomes.witnesses)
        else:
            lines, nodes = (), None
        reached.reach[cid] = reach_of(plans[cid].card, lines or (), nodes)
    return replace(reached, traced=len(traced))


def _jobs(
    req: RunRequest,
    opts: MutateOptions,
    marks: Mapping[str, Mark],
    plans: Mapping[str, score.CardMutants],
    reached: _Reached,
    todo: Mapping[str, list[gen.Mutant]],
    ran: dict[tuple[str, str], MutantResult],
    reporter: Reporter | None,
) -> list[tuple[str, gen.Mutant, Job]]:
    """Step 4, jobs: each mutant to run as a job (one no witness reaches, or its C build decides, into ``ran``),
    the slowest cards' first, each able to fork from its card's warm server where it may."""
    jobs: list[tuple[str, gen.Mutant, Job]] = []
    for cid, ms in todo.items():
        card = plans[cid].card
        for m in ms:
            mark = marks.get(m.key)
            mark = mark if mark and mark.applies(cid) else None
            ids, nodes = None, None
            if reached.reach.get(cid) is not None:
                ids = reached.reach[cid].running(m)
                if not ids:
                    ran[(cid, m.key)] = score.not_reached(m, mark, req.root)
                    continue
                nodes = reached.reach[cid].only_nodes(m, ids)
            jobs.append((cid, m, score.mutant_job(card, m, reached.timeouts[cid], ids, nodes)))
    jobs = _built(req, jobs, marks, ran, reporter)
    return _ordered(req, opts, plans, reached.took, jobs)


def _ordered(
    req: RunRequest,
    opts: MutateOptions,
    plans: Mapping[str, score.CardMutants],
    took: Mapping[str, Mapping[str, float]],
    jobs: list[tuple[str, gen.Mutant, Job]],
) -> list[tuple[str, gen.Mutant, Job]]:
    """The jobs in start order: the slowest cards' mutants first, so the pool does not end on one long card; a
    card's mutants together (they share its warm server), each told its card's warm server where it may fork."""
    order = {cid: i for i, cid in enumerate(plans)}
    load: dict[str, float] = {}
    for cid, _, job in jobs:
        load[cid] = load.get(cid, 0.0) + sum(took[cid].get(w.id, 1.0) for w in job.witnesses)
    jobs = sorted(jobs, key=lambda t: (-load[t[0]], order[t[0]]))
    if not (opts.fast and req.executor.kind != RAY):
        return jobs
    # each mutant may fork from its card's warm server; the next card's starts while this one's run
    servers = {cid: WarmCard(cid, plans[cid].card, tuple(score.claimed(plans[cid].card, req.root))) for cid in load}
    in_order = list(dict.fromkeys(cid for cid, _, _ in jobs))
    after = {c: in_order[i + 1] if i + 1 < len(in_order) else None for i, c in enumerate(in_order)}
    return [
        (cid, m, replace(job, warm=WarmSpec(servers[cid], partial(_why_fresh, m), servers.get(after[cid]))))
        for cid, m, job in jobs
    ]


def _announce(
    req: RunRequest,
    opts: MutateOptions,
    plans: Mapping[str, score.CardMutants],
    jobs: Sequence[tuple[str, gen.Mutant, Job]],
    ran: Mapping[tuple[str, str], MutantResult],
    n_reused: int,
    reporter: Reporter | None,
) -> None:
    """Step 5, announce: how many cards and mutants, how they were picked, and what of them runs."""
    unreached = sum(r.how == score.NOT_REACHED for r in ran.values())
    picked = (
        f"the --mutant key(s) among {sum(cm.candidates for cm in plans.values())}"
        if opts.only
        else f"sampled of {sum(cm.candidates for cm in plans.values())} (seed {opts.seed}, at most "
        f"{opts.max_mutants if opts.max_mutants is not None else 'all'} per card)"
    )
    _say(
        reporter,
        f"mutate: {len(plans)} card(s), {sum(len(cm.sample) for cm in plans.values())} mutant(s) "
        f"{picked}; running {len(jobs)}"
        + (f", {unreached} not reached (no witness runs their lines: never run)" if opts.fast else "")
        + (f", {len(ran) - unreached} decided by their build (C: never run)" if len(ran) > unreached else "")
        + (f", reusing {n_reused} from the ledger (--changed)" if n_reused else "")
        + (f", {req.jobs} at a time" if req.executor.kind != RAY else ", on the Ray cluster")
        + ("" if opts.fast else " (--slow: fresh processes, every witness, card order)"),
    )


def _run(
    req: RunRequest,
    opts: MutateOptions,
    cfg: RunConfig,
    marks: Mapping[str, Mark],
    plans: Mapping[str, score.CardMutants],
    jobs: Sequence[tuple[str, gen.Mutant, Job]],
    last: Mapping[str, MutationResult],
    ran: dict[tuple[str, str], MutantResult],
    reporter: Reporter | None,
) -> None:
    """Step 6, run: every job in the worker pool (killers first), then the C survivors built alone; into ``ran``."""
    pool = MutantPool(
        {cid: plans[cid].card for cid in plans},
        jobs,
        marks,
        req.root,
        killers={cid: Killers(last[cid].mutants if cid in last else ()) for cid in plans},
        fast=opts.fast,
    )
    ran.update(pool.run(cfg, req.jobs, req.executor, reporter))
    _same_bytes(req, ran, reporter)


def _score_cards(
    req: RunRequest,
    opts: MutateOptions,
    the_plan: RunPlan,
    marks: Mapping[str, Mark],
    chosen: _Chosen,
    recalled: _Recalled,
    ran: Mapping[tuple[str, str], MutantResult],
) -> tuple[dict[str, MutationResult], dict[str, list[MutantResult]]]:
    """Step 7, score: each card's mutants (run or reused, judged with the marks as they are now) -> its score;
    (card id -> its score, card id -> its mutants' results)."""
    measured_at = provenance.utc_now()
    out: dict[str, MutationResult] = {}
    per_card: dict[str, list[MutantResult]] = {}
    for cid, cm in chosen.plans.items():
        per_card[cid] = [
            _remarked(cid, m, ran.get((cid, m.key)) or recalled.reused[cid][m.key], marks) for m in cm.sample
        ]
        out[cid] = score.summarize(
            cm,
            per_card[cid],
            seed=opts.seed,
            max_mutants=opts.max_mutants,
            bound_digest=score.score_digest(cm.card, the_plan.bound[cid]),
            measured_at=measured_at,
            previous=recalled.previous.get(cid),
            partial=bool(opts.only),
            sample=chosen.samples[cid][0],
            on_floor=chosen.samples[cid][1],
            marks_digest=score.score_marks(cm.card, req.root, req.cards_dir),  # the marks applied above
        )
    return out, per_card


def _remarked(cid: str, m: gen.Mutant, r: MutantResult, marks: Mapping[str, Mark]) -> MutantResult:
    """A mutant's result judged with the equivalence marks as they are now (it may have been reused)."""
    mark = marks.get(m.key)
    if r.status == MutantStatus.SURVIVED and mark and mark.applies(cid):  # a mark made since it was reused
        return replace(r, status=MutantStatus.EQUIVALENT, detail=mark.reason)
    if r.status == MutantStatus.EQUIVALENT and not (mark and mark.applies(cid)) and not _by_build(r):
        # its mark was removed (an equivalent decided by its build needs none)
        return replace(r, status=MutantStatus.SURVIVED, detail=_unmarked_detail(m, r))
    return r


def _claims(
    req: RunRequest,
    the_plan: RunPlan,
    all_cards: Sequence[Card],
    plans: Mapping[str, score.CardMutants],
    per_card: Mapping[str, list[MutantResult]],
    generated: score.Generated,
) -> tuple[Claim, ...]:
    """Step 8, claims: the project view, every claimed function and what of it the cards' mutants measured."""
    everyone = list(all_cards) or list(the_plan.cards)
    files = score.impl_files(req.root, everyone)
    claimed = {
        c.id: plans.get(c.id) or score.CardMutants(c, score.claimed_functions(c, generated), 0, ()) for c in everyone
    }
    return score.claims(req.root, files, claimed, per_card, generated)


def _tally(
    opts: MutateOptions,
    jobs: Sequence[tuple[str, gen.Mutant, Job]],
    run_rows: Sequence[MutantResult],
    t0: float,
    reporter: Reporter | None,
) -> tuple[dict[str, int], float]:
    """Step 9, tally: how the run mutants started ("warm", "fresh: why") -> how many, and the stage's seconds
    since ``t0``; both said."""
    started: dict[str, int] = {}
    for r in run_rows:
        started[r.how] = started.get(r.how, 0) + 1
    if opts.fast and jobs:
        fresh = sum(n for how, n in started.items() if how != WARM)
        _say(
            reporter,
            f"mutate: {started.get(WARM, 0)} mutant(s) forked from their card's warm server, {fresh} started fresh"
            + "".join(f"; {n}: {how.removeprefix('fresh: ')}" for how, n in sorted(started.items()) if how != WARM),
        )
    wall = time.monotonic() - t0
    if jobs:
        _say(
            reporter,
            f"mutate: {len(jobs)} mutant(s) run in {wall:.1f} s ({len(jobs) / wall:.2f}/s); "
            f"witness time they needed {sum(r.witness_s for r in run_rows):.1f} s",
        )
    return started, wall


def _unmarked_detail(m: gen.Mutant, r: MutantResult) -> str:
    """A reused equivalent whose mark was removed since: a survivor, said as its run would say it."""
    if r.how == score.NOT_REACHED:
        lines = f"{m.path}:{m.line}" + (f"-{m.lines[-1]}" if len(m.lines) > 1 else "")
        return f"not reached: no witness runs {lines} (never run)"
    return "every witness passed"


def _sample_of(
    card: Card,
    cm: score.CardMutants,
    opts: MutateOptions,
    cfg: RunConfig,
    timeout_s: float,
    generated: score.Generated,
) -> tuple[smp.Sample, bool]:
    """What the card's score is measured on in this run, and whether that is its floor's sample: judged as the
    floor's mutants are and drawing exactly them (whatever --max-mutants and --seed drew them)."""
    sample = smp.Sample(
        seed=opts.seed,
        max_mutants=None if opts.only else opts.max_mutants,
        chosen=tuple(m.key for m in cm.sample) if opts.only else (),
        profile=cfg.profile,
        hypothesis_seed=cfg.seed,
        timeout_s=timeout_s,
    )
    if not sample.judges_like_floor:
        return sample, False
    drawn = (m.key for m in cm.sample)
    return sample, smp.on_floor(sample, drawn, score.floor_draw(card, generated))


__all__ = ["Measured", "measure", "mutant_config", "traced_files"]
