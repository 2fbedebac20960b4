"""A card's job results -> its outcomes: which witness each node result belongs to, when liars run, the card's run.

:func:`harness.execute.jobs.honest_job` -> :func:`harness.execute.watch.execute` -> :func:`after_honest`
(which liars to run) -> ``execute`` per :func:`harness.execute.jobs.liar_job` -> :func:`liar_run`
-> :func:`assemble`; :mod:`harness.execute.schedule` interleaves these steps across
cards. Nothing here starts a process or builds a job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.execute.jobs import JobResult, RunConfig
from harness.execute.orphans import exit_text
from harness.select.cards import Card, Witness
from harness.statuses import Outcome
from harness.verdict import CardOutcomes, LiarRun, WitnessOutcome, judge_witness
from harness.wire import messages
from harness.wire.messages import NodeResult


@dataclass(frozen=True)
class CardRun:
    """Everything the runs of one card produced, ready for :func:`harness.verdict.evaluate`."""

    card: Card
    outcomes: CardOutcomes
    duration: float  # seconds, all processes of this card
    honest_s: float = 0.0  # seconds, the honest process alone
    honest_node: str = ""  # where the honest process ran (a cluster node), "" on this machine
    lines_run: tuple[messages.LinesRun, ...] = ()  # the honest run's traced lines (a mutate run), as streamed
    # project files its honest and liar processes read (harness.execute.reads), relative to the root, sorted;
    # None when one of them did not say (the verdict is then never replayed: harness.plan.binding.read_files)
    reads: tuple[str, ...] | None = None


def _covers(collector: str, file: str) -> bool:
    """Does a collection error of ``collector`` (a module or folder node id) hide ``file``?"""
    return bool(collector) and (file == collector or file.startswith(collector.rstrip("/") + "/"))


def witness_outcomes(witnesses: tuple[Witness, ...], res: JobResult) -> tuple[WitnessOutcome, ...]:
    """Map node results of one process onto the witnesses that named them.

    A job whose node could not provide the run's data (``unavailable``) skips
    every witness with that reason (the card is UNVERIFIED, never judged on
    other data); a job that was lost on the cluster ran none of them.
    """
    if res.unavailable:
        return tuple(
            WitnessOutcome(w.id, (NodeResult(w.test, Outcome.SKIPPED, message=res.unavailable),)) for w in witnesses
        )
    if res.lost:
        return tuple(WitnessOutcome(w.id, (), f"not run: {res.lost}") for w in witnesses)
    out = []
    for w in witnesses:
        nodes = tuple(r for nid, r in res.results.items() if messages.node_matches(w.test, nid))
        if nodes:
            out.append(WitnessOutcome(w.id, nodes))
            continue
        err = next((e for e in res.collect_errors if _covers(e.nodeid, w.file)), None)
        if err is not None:
            last = [ln for ln in err.text.strip().splitlines() if ln.strip()][-1:] or ["?"]
            node = NodeResult(w.test, Outcome.ERROR, message=f"collection error: {last[0].strip()}", failure=err.text)
            out.append(WitnessOutcome(w.id, (node,)))
        elif res.liar_error:
            out.append(WitnessOutcome(w.id, (), f"not run: liar could not be applied: {res.liar_error}"))
        elif res.stopped:
            out.append(WitnessOutcome(w.id, (), f"not run: {res.stopped}"))
        else:
            tail = [ln for ln in res.output_tail.splitlines() if ln.strip()][-1:] or [""]
            node = NodeResult(
                w.test,
                Outcome.ERROR,
                message=f"pytest did not run this node ({exit_text(res.exit_code)}): {tail[0].strip()}",
                failure=res.output_tail,
            )
            out.append(WitnessOutcome(w.id, (node,)))
    return tuple(out)


@dataclass(frozen=True)
class HonestPart:
    """What a card's honest run decided: its witness and control outcomes and which liars to run next."""

    witnesses: tuple[WitnessOutcome, ...]
    controls: tuple[WitnessOutcome, ...]
    duration: float
    liars: tuple[str, ...]  # to run now, in card order
    liars_skipped: str = ""  # why the listed liars are not run
    node: str = ""  # where the honest process ran
    lines_run: tuple[messages.LinesRun, ...] = ()  # its traced lines (harness.execute.jobs.Job.coverage)
    reads: tuple[str, ...] | None = None  # project files it read (harness.execute.jobs.JobResult.reads)


def after_honest(card: Card, cfg: RunConfig, res: JobResult) -> HonestPart:
    """Judge the honest run's witnesses; liars run only when every witness and control held."""
    wo = witness_outcomes(card.witnesses, res)
    co = witness_outcomes(card.controls, res)
    judged = [judge_witness(w, o) for w, o in zip(card.witnesses + card.controls, wo + co, strict=False)]
    all_held = all(v.status == Outcome.PASSED for v in judged)
    part = HonestPart(wo, co, res.duration, node=res.node, liars=(), lines_run=tuple(res.lines_run), reads=res.reads)
    if not card.liars:
        return part
    if not cfg.liars:
        return replace(part, liars_skipped="--no-liars")
    if not all_held:
        return replace(part, liars_skipped="the honest run did not hold")
    return replace(part, liars=tuple(card.liars))


def liar_run(card: Card, name: str, res: JobResult) -> LiarRun:
    return LiarRun(name, witness_outcomes(card.witnesses, res), res.liar_error, res.duration, res.node, res.lost)


def assemble(
    card: Card,
    honest: HonestPart,
    liar_runs: tuple[LiarRun, ...],
    liar_reads: tuple[tuple[str, ...] | None, ...] = (),
) -> CardRun:
    """The card's :class:`CardRun`; ``liar_runs`` in card order. Duration: every process of the card, summed.

    Its ``reads`` are those of the honest process and of every liar process (``liar_reads``): whether a liar
    is caught is part of the verdict, so what a liar's process read binds it too (a mutant's never does).
    """
    duration = honest.duration + sum(r.duration for r in liar_runs)
    every = (honest.reads, *liar_reads)
    reads = None if any(r is None for r in every) else tuple(sorted({f for r in every for f in r or ()}))
    return CardRun(
        card,
        CardOutcomes(honest.witnesses, honest.controls, liar_runs, (), honest.liars_skipped),
        duration,
        honest.duration,
        honest.node,
        honest.lines_run,
        reads,
    )


def not_run(card: Card, link_problems: tuple[str, ...]) -> CardRun:
    """A card with link problems, or one a stopped run (``-x`` / ``--maxfail``) did not finish, is ERROR ("not
    run: ...") without a process of its own."""
    return CardRun(card, CardOutcomes(link_problems=link_problems), 0.0)
