"""Run many cards at once: N witness processes at a time, results in card order.

The unit of work is one pytest process (:class:`harness.execute.jobs.Job`): a card's
honest run, or its witnesses under one liar. A card's liar jobs become ready
when its honest run held (:func:`harness.execute.outcomes.after_honest`), and may then run
side by side with each other and with other cards' jobs. With ``jobs=1`` the
order is the serial one (each card's honest run, then its liars, card after
card), so ``-j 1`` and the old loop start the same processes in the same order.

Which ready job starts next: the one with the longest expected remaining
chain (its own expected seconds, plus for an honest run its slowest liar,
:func:`chain_s`), from the durations of the card's last recorded run in the
ledger (:func:`expected_from_entry`), else ``obligations/timings.json``, the
committed hints ``run_obligations.py timings --write`` takes from a ledger
(:mod:`harness.plan.timings`; what a fresh clone or CI has), else unknown (1 s a
process; :func:`harness.plan.planning.plan` picks the source per card and the run's
``schedule:`` line counts them). Ties, and unknown cards, go in card order.
Starting the long chains first keeps the two slowest cards (RING-T3,
ORACLE-PARITY: honest ~10 s, then one ~10 s liar each) from ending up alone
at the tail.

A liar job stops at its first failing witness (``--exitfirst``), so its
witnesses run in an order that finds the failure early: the witnesses that
caught this liar in the card's last recorded run (or, from the same sources,
the ``caught_by`` of timings.json) go first, the rest keep card order
(:func:`liar_order`).

Witness processes start from the run's fork server
(:func:`harness.execute.watch.open_launcher`, :mod:`harness.execute.forkserver`), opened when
the run starts and closed when it ends, or as plain subprocesses.

Where each job runs is the executor's business (:mod:`harness.execute.executor`):
the local one drives ``-j N`` processes from threads on this machine, the Ray
one (:mod:`harness.execute.cluster`) one task per job on a cluster. The loop here runs
on the calling thread, which is also where Ctrl-C arrives. On Ctrl-C
(KeyboardInterrupt, which SIGTERM is turned into by the CLI) the executor
cancels every running job (process groups killed, cluster tasks cancelled),
and the interrupt is re-raised: nothing is returned, so nothing is recorded.
A run killed outright (SIGKILL) cannot clean up: its witness processes kill
themselves (:func:`harness.execute.orphans.watch_runner`) and the next run removes its
scratch folder (:func:`harness.execute.orphans.sweep_owned`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import count
from pathlib import Path
from typing import Any

from harness.execute.executor import Executor, ExecutorSpec, Running, Started, blas_config
from harness.execute.factory import make as make_executor
from harness.execute.jobs import Job, JobResult, RunConfig, honest_job, liar_job
from harness.execute.outcomes import CardRun, HonestPart, after_honest, assemble, liar_run, not_run
from harness.plan.timings import Expected, chain_s
from harness.select.cards import Card
from harness.verdict import LiarRun


def default_jobs() -> int:
    """Worker processes by default: the number of cores (at least 1)."""
    return max(1, os.cpu_count() or 1)


def liar_order(job: Job, caught_by: Sequence[str]) -> Job:
    """``job`` with the witnesses in ``caught_by`` (ids) first, the others after them, each group in card order.

    NOTE: the verdict does not depend on the order (a liar is caught iff some witness fails under it), but a
    liar job stops at its first failure, so ``caught_by`` names the witness that failed first in *this*
    order: after a change it may name another witness than card order would have.
    """
    first = set(caught_by)
    if not first:
        return job
    return replace(job, witnesses=tuple(sorted(job.witnesses, key=lambda w: w.id not in first)))


@dataclass
class _CardState:
    index: int
    card: Card
    honest: HonestPart | None = None
    liars: dict[str, LiarRun] = field(default_factory=dict)
    liar_reads: dict[str, tuple[str, ...] | None] = field(default_factory=dict)  # what each liar's process read
    waiting: int = 0  # jobs started or ready but not finished


@dataclass(order=True)
class _Ready:
    key: tuple[float, int, int]  # (-priority, card index, liar index): smallest starts first
    job: Job = field(compare=False)
    liar_index: int = field(compare=False, default=-1)

    @property
    def card_index(self) -> int:
        return self.key[1]

    @property
    def folder(self) -> Path:
        """The job's work folder, relative to the run's scratch folder."""
        name = "honest" if self.liar_index < 0 else f"liar-{self.liar_index}"
        return Path(f"{self.card_index:03d}-{self.job.card.id}") / name


class _Queue:
    """Which job starts next, and each card's bookkeeping until its :class:`CardRun` is assembled.

    Lives on the calling thread only. ``settled`` counts planned processes that will no longer run.
    """

    def __init__(
        self,
        cards: Sequence[Card],
        cfg: RunConfig,
        jobs: int,
        expected: Mapping[str, Expected],
        link_problems: Mapping[str, tuple[str, ...]],
    ) -> None:
        self.cfg, self.jobs, self.expected = cfg, jobs, expected
        self.states = [_CardState(i, c) for i, c in enumerate(cards)]
        self.results: dict[int, CardRun] = {}
        self.ready: list[_Ready] = []
        self.settled = 0
        for st in self.states:
            problems = link_problems.get(st.card.id, ())
            if problems:
                self.results[st.index] = not_run(st.card, problems)
            else:
                job = honest_job(st.card, tuple(cfg.coverage.get(st.card.id, ())))
                self.ready.append(_Ready(self._honest_key(st), job))
                st.waiting = 1

    def _honest_key(self, st: _CardState) -> tuple[float, int, int]:
        chain = chain_s(self.expected.get(st.card.id, Expected()), st.card.liars if self.cfg.liars else ())
        # jobs == 1: plain card order (each card's liars follow it, see _liar_key)
        return (-(0.0 if self.jobs == 1 else chain), st.index, -1)

    def _liar_key(self, st: _CardState, i: int, name: str) -> tuple[float, int, int]:
        if self.jobs == 1:  # a liar goes before every later card (negative priority beats 0)
            return (-1.0, st.index, i)
        return (-self.expected.get(st.card.id, Expected()).liar(name), st.index, i)

    def pop(self) -> _Ready:
        """The ready job to start now (there must be one)."""
        self.ready.sort()
        return self.ready.pop(0)

    def finished(self, item: _Ready, res: JobResult) -> None:
        """Book ``item``'s result; queue a card's liars after its honest run; assemble a card whose jobs are done."""
        st = self.states[item.card_index]
        st.waiting -= 1
        self.settled += 1
        if item.liar_index < 0:
            self._honest_finished(st, res)
        else:
            st.liars[item.job.liar] = liar_run(st.card, item.job.liar, res)
            st.liar_reads[item.job.liar] = res.reads
        if st.waiting == 0:
            assert st.honest is not None
            runs = tuple(st.liars[n] for n in st.honest.liars)
            reads = tuple(st.liar_reads[n] for n in st.honest.liars)
            self.results[st.index] = assemble(st.card, st.honest, runs, reads)

    def _honest_finished(self, st: _CardState, res: JobResult) -> None:
        st.honest = after_honest(st.card, self.cfg, res)
        for i, name in enumerate(st.card.liars):
            if name in st.honest.liars:
                job = liar_order(
                    liar_job(st.card, name), self.expected.get(st.card.id, Expected()).caught_by.get(name, ())
                )
                self.ready.append(_Ready(self._liar_key(st, i, name), job, i))
                st.waiting += 1
        if self.cfg.liars:
            self.settled += len(st.card.liars) - len(st.honest.liars)

    def card_runs(self, stopped: str = "") -> list[CardRun]:
        """Every card's run in card order; after a stop (``stopped``: why), a card that did not finish is not run."""
        if stopped:
            for st in self.states:
                self.results.setdefault(st.index, not_run(st.card, (stopped,)))
        assert len(self.results) == len(self.states), "every card must have finished"
        return [self.results[i] for i in range(len(self.states))]


def _drive(
    ex: Executor,
    ready: Callable[[], bool],
    pop: Callable[[], Any],
    finished: Callable[[Any, JobResult], None],
    on_start: Callable[[Job, Sequence[Running]], None] | None,
    halt: Callable[[], bool] | None = None,
) -> None:
    """Keep ``ex`` full with jobs from ``pop`` while ``ready()``; book each result with ``finished``.

    On any exception (Ctrl-C first of all) every running job is cancelled before it is re-raised. Once
    ``halt()`` is true (``-x`` / ``--maxfail``) no job starts and every running one is cancelled, as on Ctrl-C,
    and it returns.
    """
    try:
        while ready() or ex.busy:
            if halt is not None and halt():
                ex.stop()
                return
            while ready() and ex.busy < ex.capacity:
                item = pop()
                ex.start(item, item.job, item.folder)
            for ev in ex.events():
                if isinstance(ev, Started):
                    if on_start:
                        on_start(ev.item.job, ex.running())
                else:
                    finished(ev.item, ev.result)
    except BaseException:
        ex.stop()
        raise


def run_cards(
    cards: Sequence[Card],
    cfg: RunConfig,
    link_problems: Mapping[str, tuple[str, ...]] | None = None,
    *,
    jobs: int = 1,
    expected: Mapping[str, Expected] | None = None,
    on_start: Callable[[Job, Sequence[Running]], None] | None = None,
    on_done: Callable[[Job, int], None] | None = None,
    executor: ExecutorSpec | None = None,
    on_card: Callable[[CardRun], str] | None = None,
) -> list[CardRun]:
    """Run every card; returns their :class:`CardRun` in the order of ``cards``.

    ``jobs``: processes at a time (>= 1) on the local executor; on a Ray
    cluster the cluster's CPUs unless ``executor.jobs_given``. With more than
    one, witness processes get one BLAS thread each (``cfg.blas_threads = 1``)
    unless ``cfg`` already says otherwise. ``on_start(job, running)`` is
    called as a process starts (``running``, :class:`harness.execute.executor.Running`,
    includes it and names each job's node on a cluster); ``on_done(job, settled)``
    when one ends, ``settled`` the number of planned processes that will no
    longer run (finished, plus liars skipped because the honest run did not
    hold). Raises KeyboardInterrupt (after killing every process) when
    interrupted.

    ``on_card(run)`` is called as each card's run is complete (a card with
    link problems at once, before anything starts); when it returns a reason
    (``-x`` / ``--maxfail``: enough cards failed) the run stops: nothing more
    starts, the running processes are cancelled, and every card that did not
    finish comes back not run for that reason (:func:`harness.execute.outcomes.not_run`).
    """
    jobs = max(1, int(jobs))
    cfg = blas_config(cfg, jobs > 1)
    with make_executor(executor, cfg, jobs) as ex:
        todo = _Queue(cards, cfg, ex.capacity, expected or {}, link_problems or {})
        told: set[int] = set()
        stop = [""]

        def tell() -> None:
            for i in sorted(todo.results.keys() - told):
                told.add(i)
                why = on_card(todo.results[i]) if on_card is not None else ""
                stop[0] = stop[0] or why

        def finished(item: _Ready, res: JobResult) -> None:
            todo.finished(item, res)
            if on_done:
                on_done(item.job, todo.settled)
            tell()

        tell()
        _drive(ex, lambda: bool(todo.ready), todo.pop, finished, on_start, lambda: bool(stop[0]))
    return todo.card_runs(stop[0])


@dataclass(frozen=True)
class _Plain:
    """A job of :func:`run_jobs`: no card bookkeeping, just where it runs."""

    job: Job
    index: int

    @property
    def folder(self) -> Path:
        return Path(f"job-{self.index:05d}")


def run_jobs(
    jobs_list: Sequence[Job],
    cfg: RunConfig,
    *,
    jobs: int = 1,
    on_start: Callable[[Job, Sequence[Running]], None] | None = None,
    on_done: Callable[[Job, int, JobResult], None] | None = None,
    executor: ExecutorSpec | None = None,
    prepare: Callable[[Job], Job] | None = None,
    more: Callable[[Job, JobResult], Sequence[Job]] | None = None,
) -> list[JobResult]:
    """Run independent jobs (mutants), ``jobs`` processes at a time; results in the order of ``jobs_list``.

    The executor, BLAS threads and Ctrl-C handling are those of
    :func:`run_cards`; jobs start in the order given. ``prepare(job)``, when given, is what starts instead
    of ``job``, decided as it starts (the witnesses' order, from the results so far); ``on_start`` and
    ``on_done(job, finished, result)`` see that job. ``more(job, result)``, when given, names follow-up jobs
    to start next (their results go to ``on_done`` only, with ``finished`` not counting them). Everything
    here runs on the calling thread.
    """
    jobs = max(1, int(jobs))
    cfg = blas_config(cfg, jobs > 1)
    ready = [_Plain(j, i) for i, j in enumerate(jobs_list)][::-1]  # pop() from the end: first job first
    results: dict[int, JobResult] = {}
    extra = count(len(jobs_list))
    main = [0]  # results of jobs_list's jobs so far

    def pop() -> _Plain:
        item = ready.pop()
        return item if prepare is None else _Plain(prepare(item.job), item.index)

    def finished(item: _Plain, res: JobResult) -> None:
        results[item.index] = res
        main[0] += item.index < len(jobs_list)
        if on_done:
            on_done(item.job, main[0], res)
        if more is not None:
            ready.extend(_Plain(j, next(extra)) for j in reversed(more(item.job, res)))

    with make_executor(executor, cfg, jobs) as ex:
        _drive(ex, lambda: bool(ready), pop, finished, on_start)
    return [results[i] for i in range(len(jobs_list))]


__all__ = ["default_jobs", "liar_order", "run_cards", "run_jobs"]
