"""Running a mutate run's mutants in the worker pool: which witness first, follow-ups, results as they arrive.

:class:`MutantPool` drives :func:`harness.execute.schedule.run_jobs` for the
mutation stage (:mod:`harness.mutation.stage`): as each job starts it orders
the job's witnesses killer-first (:class:`harness.mutation.reach.Killers`,
:func:`harness.mutation.reach.ordered`); as each ends it classifies the
mutant (:func:`harness.mutation.score.classify`) and notes who killed it, so
the next mutants of the same function try that witness first; and a mutant
whose first detection was a timeout runs once more against the witnesses
card order puts before the timed-out one (:meth:`MutantPool.more`). The
``--slow`` reference path uses none of this: card order, every witness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness.execute.executor import ExecutorSpec
from harness.execute.jobs import Job, JobResult, RunConfig
from harness.execute.outcomes import witness_outcomes
from harness.execute.schedule import run_jobs
from harness.mutation import score
from harness.mutation.generate import Mutant
from harness.mutation.marks import Mark
from harness.mutation.reach import Killers, ordered
from harness.record.document import MutantResult
from harness.select.cards import Card
from harness.statuses import MutantStatus

if TYPE_CHECKING:
    from harness.request import Reporter

Key = tuple[str, str]  # (card id, mutant key)


class MutantPool:
    """The jobs of a mutation stage (``(card id, mutant, job)``, in start order) and what came of them.

    ``fast``: False for ``--slow`` (no reordering, no follow-ups). Lives on the scheduling thread.
    """

    def __init__(
        self,
        cards: Mapping[str, Card],
        jobs: Sequence[tuple[str, Mutant, Job]],
        marks: Mapping[str, Mark],
        root: Path,
        *,
        killers: Mapping[str, Killers],
        fast: bool,
    ) -> None:
        self.cards, self.jobs, self.marks, self.root = cards, list(jobs), marks, root
        self.killers, self.fast = killers, fast
        self.which: dict[Key, Mutant] = {(cid, m.key): m for cid, m, _ in self.jobs}
        self.ran: dict[Key, MutantResult] = {}
        self.timed_out: dict[Key, MutantResult] = {}  # its follow-up runs the witnesses before the timed-out one

    def _mark(self, cid: str, key: str) -> Mark | None:
        mark = self.marks.get(key)
        return mark if mark is not None and mark.applies(cid) else None

    def prepare(self, job: Job) -> Job:
        """The job as it starts: its witnesses killer-first (a follow-up keeps card order)."""
        cid = job.card.id
        if (cid, job.mutant) in self.timed_out:
            return job
        m = self.which[(cid, job.mutant)]
        ids = ordered([w.id for w in job.witnesses], self.killers[cid].hint(m))
        return replace(job, witnesses=tuple(next(w for w in job.witnesses if w.id == i) for i in ids))

    def done(self, job: Job, res: JobResult) -> bool:
        """Classify the mutant ``job`` ran (with its first run's result, for a follow-up); True for a follow-up."""
        cid = job.card.id
        m = self.which[(cid, job.mutant)]
        r = score.classify(self.cards[cid], m, res, self._mark(cid, m.key), self.root, job)
        first = self.timed_out.pop((cid, m.key), None)
        if first is not None:  # a witness before the timed-out one failed, or the timeout stands
            r = score.after_timeout(first, r)
        self.ran[(cid, m.key)] = r
        if r.status in (MutantStatus.KILLED, MutantStatus.TIMEOUT):
            self.killers[cid].record(m, r.killer)
        return first is not None

    def more(self, job: Job, res: JobResult) -> list[Job]:
        """After a timeout: the covering witnesses before the timed-out one in card order that did not run.

        NOTE: the reference path runs every witness in card order and its status is the first one's that
        fails or runs out of time. A fast run's first detection by a timeout is checked against the
        witnesses card order puts before it (one that fails there makes the mutant killed, as it is in the
        reference); a fast run's first detection by a failure is not (a witness card order puts earlier
        that would run out of time is not looked for: the mutant is killed, not timeout, either way detected).
        """
        cid = job.card.id
        r = self.ran.get((cid, job.mutant))
        if not self.fast or r is None or r.status != MutantStatus.TIMEOUT or (cid, job.mutant) in self.timed_out:
            return []
        order = [w.id for w in self.cards[cid].witnesses]
        if r.killer not in order:
            return []
        ran_ids = {o.witness_id for o in witness_outcomes(job.witnesses, res) if o.nodes}
        left = {w.id for w in job.witnesses} - ran_ids
        before = [w for w in order[: order.index(r.killer)] if w in left]
        if not before:
            return []
        self.timed_out[(cid, job.mutant)] = r
        by_id = {w.id: w for w in job.witnesses}
        return [replace(job, witnesses=tuple(by_id[w] for w in before))]

    def run(
        self, cfg: RunConfig, workers: int, executor: ExecutorSpec, reporter: Reporter | None
    ) -> dict[Key, MutantResult]:
        """Run every job (``workers`` at a time), follow-ups included; each mutant's result."""
        run = [j for _, _, j in self.jobs]
        prepare = self.prepare if self.fast else None
        if reporter is None or not run:
            run_jobs(
                run,
                cfg,
                jobs=workers,
                executor=executor,
                on_done=lambda job, finished, res: self.done(job, res),
                prepare=prepare,
                more=self.more,
            )
            return self.ran
        with reporter.progress(len(run)) as (on_start, on_done):

            def done(job: Job, finished: int, res: JobResult) -> None:
                if not self.done(job, res):  # a follow-up is not a job of its own on the progress bar
                    on_done(job, finished)

            run_jobs(
                run,
                cfg,
                jobs=workers,
                on_start=on_start,
                executor=executor,
                on_done=done,
                prepare=prepare,
                more=self.more,
            )
        return self.ran


__all__ = ["MutantPool"]
