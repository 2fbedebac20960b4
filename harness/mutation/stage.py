"""The mutation stage of a run: ``run_obligations.py mutate`` (see :mod:`harness.mutation.score` for the method).

:func:`measure` runs after the cards' honest and liar runs (:func:`harness.pipeline.execute`):
for every card whose honest run held it generates and samples the mutants
of the code the card claims, runs each in the ``-j`` worker pool
(:func:`harness.execute.schedule.run_jobs`) against the card's witnesses only,
classifies and scores them. With ``--changed`` a mutant whose result the
ledger holds for the same bound bytes (same card digest, same key) is not
run again. :func:`recall` is what a plain ``run`` does instead: it reads
each card's newest measured score from the ledger (stale when the card's
bytes changed since).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from harness import provenance
from harness.cards import Card
from harness.document import Claim, MutantResult, MutationResult
from harness.errors import LedgerError
from harness.execute.jobs import Job, JobResult, RunConfig
from harness.execute.outcomes import CardRun
from harness.execute.schedule import run_jobs
from harness.ledger import FILENAME, Ledger
from harness.mutation import generate as gen
from harness.mutation import score as mutation
from harness.mutation.marks import Mark
from harness.statuses import MutantStatus, Outcome
from harness.subjects import DEFAULT

if TYPE_CHECKING:
    from harness.pipeline import Reporter, RunPlan, RunRequest


@dataclass(frozen=True)
class MutateOptions:
    """``mutate``'s own options."""

    max_mutants: int | None = mutation.DEFAULT_MAX_MUTANTS  # per card; None: every mutant
    seed: int = 0  # which mutants are sampled
    only: tuple[str, ...] = ()  # run just these mutant keys (of each card's claimed code), no sampling


@dataclass(frozen=True)
class Measured:
    """What the mutation stage produced."""

    results: Mapping[str, MutationResult]  # card id -> its score (cards not measured are absent)
    skipped: Mapping[str, str]  # card id -> why it was not measured
    claims: tuple[Claim, ...]
    mutants_run: int
    mutants_reused: int
    wall_s: float


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


def _open_ledger(req: RunRequest) -> Ledger | None:
    path = req.reports_dir / FILENAME
    if not path.is_file():
        return None
    try:
        return Ledger(path, create=False)
    except LedgerError:
        return None


def measure(
    req: RunRequest,
    the_plan: RunPlan,
    runs: Mapping[str, CardRun],
    marks: Mapping[str, Mark],
    reporter: Reporter | None,
    all_cards: Sequence[Card] = (),
) -> Measured:
    """Generate, run, classify and score the mutants of every selected card whose honest run held.

    ``all_cards`` (every loaded card, selected or not) decides which
    functions the project view counts as claimed.
    """
    opts = req.mutate or MutateOptions()
    t0 = time.monotonic()
    generated = mutation.Generated(req.root)
    skipped: dict[str, str] = {}
    plans: dict[str, mutation.CardMutants] = {}
    timeouts: dict[str, dict[str, float]] = {}
    _say(reporter, "mutate: generating the mutants of the code each card claims ...")
    for card in the_plan.cards:
        if card.subject != DEFAULT:
            continue  # a score measures the witnesses: on the default configuration only (run --matrix cells)
        replay = the_plan.replays.get(card.id)
        held, took = _honest_times(card, runs.get(card.id), replay.entry if replay else None)
        if not held:
            skipped[card.id] = "not measured: the card's honest run did not hold (mutants say nothing then)"
            continue
        cm = mutation.card_mutants(card, generated, None if opts.only else opts.max_mutants, opts.seed)
        if opts.only:
            cm = replace(cm, sample=tuple(m for m in cm.sample if m.key in opts.only))
            if not cm.sample:
                skipped[card.id] = "not measured: none of the --mutant keys is a mutant of the code it claims"
                continue
        if not cm.functions:
            skipped[card.id] = "not measured: the card claims no Python function (no refs into code, no covers)"
            continue
        plans[card.id] = cm
        timeouts[card.id] = mutation.mutant_timeouts(card, took, req.timeout)

    reused: dict[str, dict[str, MutantResult]] = {}
    previous: dict[str, float | None] = {}
    ledger = _open_ledger(req)
    if ledger is not None:
        with ledger:
            for cid in plans:
                last = ledger.last_mutation(cid)
                previous[cid] = last[2].score if last else None
                if req.changed:
                    same = ledger.last_mutation(cid, mutation.score_digest(plans[cid].card, the_plan.bound[cid]))
                    if same is not None:
                        reused[cid] = {
                            m.key: replace(m, reused_from=m.reused_from or same[0])
                            for m in same[2].mutants
                            if m.status != MutantStatus.ERROR
                        }

    jobs: list[tuple[str, gen.Mutant, Job]] = []
    for cid, cm in plans.items():
        for m in cm.sample:
            if m.key not in reused.get(cid, {}):
                jobs.append((cid, m, mutation.mutant_job(cm.card, m, timeouts[cid])))
    # the slowest cards' mutants first, so the pool does not end on one long card
    slow = {cid: sum(timeouts[cid].values()) for cid in plans}
    jobs.sort(key=lambda t: -slow[t[0]])
    n_reused = sum(len(cm.sample) for cm in plans.values()) - len(jobs)
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
        + (f", reusing {n_reused} from the ledger (--changed)" if n_reused else "")
        + (f", {req.jobs} at a time" if req.executor.kind != "ray" else ", on the Ray cluster"),
    )

    cfg = RunConfig(
        root=req.root,
        profile=req.profile,
        seed=req.seed,
        default_timeout=req.timeout,
        liars=False,
        oracle_dir=req.oracle_dir,
    )
    results_of: list[JobResult]
    if reporter is None or not jobs:
        results_of = run_jobs([j for _, _, j in jobs], cfg, jobs=req.jobs, executor=req.executor)
    else:
        with reporter.progress(len(jobs)) as (on_start, on_done):
            results_of = run_jobs(
                [j for _, _, j in jobs],
                cfg,
                jobs=req.jobs,
                on_start=on_start,
                executor=req.executor,
                on_done=lambda job, finished, res: on_done(job, finished),
            )
    ran: dict[tuple[str, str], MutantResult] = {}
    for (cid, m, _), res in zip(jobs, results_of, strict=True):
        card = plans[cid].card
        mark = marks.get(m.key)
        ran[(cid, m.key)] = mutation.classify(card, m, res, mark if mark and mark.applies(cid) else None, req.root)

    measured_at = provenance.utc_now()
    out: dict[str, MutationResult] = {}
    per_card: dict[str, list[MutantResult]] = {}
    for cid, cm in plans.items():
        rows = []
        for m in cm.sample:
            r = ran.get((cid, m.key)) or reused[cid][m.key]
            mark = marks.get(m.key)
            if r.status == MutantStatus.SURVIVED and mark and mark.applies(cid):  # a mark made since it was reused
                r = replace(r, status=MutantStatus.EQUIVALENT, detail=mark.reason)
            elif r.status == MutantStatus.EQUIVALENT and not (mark and mark.applies(cid)):  # its mark was removed
                r = replace(r, status=MutantStatus.SURVIVED, detail="every witness passed")
            rows.append(r)
        per_card[cid] = rows
        out[cid] = mutation.summarize(
            cm,
            rows,
            seed=opts.seed,
            max_mutants=opts.max_mutants,
            bound_digest=mutation.score_digest(cm.card, the_plan.bound[cid]),
            measured_at=measured_at,
            previous=previous.get(cid),
            partial=bool(opts.only),
        )
    everyone = list(all_cards) or list(the_plan.cards)
    files = mutation.impl_files(req.root, everyone)
    claimed = {
        c.id: plans.get(c.id) or mutation.CardMutants(c, mutation.claimed_functions(c, generated), 0, ())
        for c in everyone
    }
    table = mutation.claims(req.root, files, claimed, per_card, generated)
    return Measured(out, skipped, table, len(jobs), n_reused, time.monotonic() - t0)


def recall(req: RunRequest, cards: Sequence[Card], bound: Mapping[str, Sequence]) -> dict[str, MutationResult]:
    """Each card's newest measured mutation score from the ledger, judged for the card as it is now."""
    ledger = _open_ledger(req)
    if ledger is None:
        return {}
    out = {}
    with ledger:
        for card in cards:
            try:
                last = ledger.last_mutation(card.id)
            except LedgerError:
                continue
            if last is not None:
                run_id, started, past = last
                now = mutation.score_digest(card, bound[card.id])
                out[card.id] = replace(
                    mutation.recalled(card, past, run_id, now), measured_at=past.measured_at or started
                )
    return out


__all__ = ["Measured", "MutateOptions", "measure", "recall"]
