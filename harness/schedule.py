"""Run many cards at once: N witness processes at a time, results in card order.

The unit of work is one pytest process (:class:`harness.run.Job`): a card's
honest run, or its witnesses under one liar. A card's liar jobs become ready
when its honest run held (:func:`harness.run.after_honest`), and may then run
side by side with each other and with other cards' jobs. With ``jobs=1`` the
order is the serial one (each card's honest run, then its liars, card after
card), so ``-j 1`` and the old loop start the same processes in the same order.

Which ready job starts next: the one with the longest expected remaining
chain (its own expected seconds, plus for an honest run its slowest liar),
from the durations of the card's last recorded run (:func:`expected_from_entry`);
ties, and cards never run, go in card order. Starting the long chains first
keeps the two slowest cards (RING-T3, ORACLE-PARITY: honest ~10 s, then one
~10 s liar each) from ending up alone at the tail.

Threads, not processes, drive the witness processes: each worker thread
blocks in :func:`harness.run.execute` (which only polls a subprocess), and all
bookkeeping happens on the calling thread, which is also where Ctrl-C
arrives. On Ctrl-C (KeyboardInterrupt, which SIGTERM is turned into by the
CLI) every worker is cancelled, every process group killed, the threads
joined, and the interrupt re-raised: nothing is returned, so nothing is
recorded. A run killed outright (SIGKILL) cannot clean up: its witness
processes kill themselves (:func:`harness.procs.watch_runner`) and the next
run removes its scratch folder (:func:`harness.procs.sweep_owned`).
"""
from __future__ import annotations

import os
import queue
import shutil
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from harness import procs
from harness.cards import Card
from harness.document import CardResult
from harness.statuses import LiarStatus
from harness.run import (CardRun, HonestPart, Job, JobResult, LiarRun, RunConfig, after_honest,
                         assemble, execute, honest_job, liar_job, liar_run, not_run)

UNKNOWN_S = 1.0  # expected seconds of a process never seen before


def default_jobs() -> int:
    """Worker processes by default: the number of cores (at least 1)."""
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Expected:
    """Expected seconds of a card's processes, from its last recorded run."""

    honest_s: float = UNKNOWN_S
    liars_s: Mapping[str, float] = field(default_factory=dict)

    def liar(self, name: str) -> float:
        return self.liars_s.get(name, UNKNOWN_S)


def expected_from_entry(entry: CardResult | None) -> Expected:
    """Process durations from a card's result in an earlier run (None: unknown)."""
    if entry is None:
        return Expected()
    liars = {lv.name: float(lv.duration_s or 0.0) for lv in entry.liars if lv.status != LiarStatus.NOT_RUN}
    return Expected(entry.honest_s or UNKNOWN_S, liars)


@dataclass
class _CardState:
    index: int
    card: Card
    honest: HonestPart | None = None
    liars: dict[str, LiarRun] = field(default_factory=dict)
    waiting: int = 0  # jobs started or ready but not finished


@dataclass(order=True)
class _Ready:
    key: tuple[float, int, int]  # (-priority, card index, liar index): smallest starts first
    job: Job = field(compare=False)
    liar_index: int = field(compare=False, default=-1)


def _next(done: queue.Queue) -> Any:
    # NOTE: a timeout keeps the wait short, so Ctrl-C is seen promptly on every platform
    while True:
        try:
            return done.get(timeout=0.2)
        except queue.Empty:
            continue


def run_cards(cards: Sequence[Card], cfg: RunConfig, link_problems: Mapping[str, tuple[str, ...]] | None = None,
              *, jobs: int = 1, expected: Mapping[str, Expected] | None = None,
              on_start: Callable[[Job, Sequence[Job]], None] | None = None,
              on_done: Callable[[Job, int], None] | None = None) -> list[CardRun]:
    """Run every card; returns their :class:`CardRun` in the order of ``cards``.

    ``jobs``: processes at a time (>= 1). With more than one, witness
    processes get one BLAS thread each (``cfg.blas_threads = 1``) unless
    ``cfg`` already says otherwise. ``on_start(job, running)`` is called as
    a process starts (``running`` includes it); ``on_done(job, settled)``
    when one ends, ``settled`` the number of planned processes that will no
    longer run (finished, plus liars skipped because the honest run did not
    hold). Raises KeyboardInterrupt (after killing every process) when
    interrupted.
    """
    jobs = max(1, int(jobs))
    if jobs > 1 and cfg.blas_threads is None:
        cfg = replace(cfg, blas_threads=1)
    link_problems = link_problems or {}
    expected = expected or {}
    states = [_CardState(i, c) for i, c in enumerate(cards)]
    results: dict[int, CardRun] = {}
    ready: list[_Ready] = []
    for st in states:
        problems = link_problems.get(st.card.id, ())
        if problems:
            results[st.index] = not_run(st.card, problems)
            continue
        exp = expected.get(st.card.id, Expected())
        chain = exp.honest_s + max((exp.liar(n) for n in st.card.liars if cfg.liars), default=0.0)
        # jobs == 1: plain card order (each card's liars follow it, see _Ready keys of liars below)
        prio = 0.0 if jobs == 1 else chain
        ready.append(_Ready((-prio, st.index, -1), honest_job(st.card)))
        st.waiting = 1

    procs.sweep_owned()  # folders of runs that were killed (SIGKILL) before they could remove theirs
    base = procs.owned_tempdir()
    cancel = threading.Event()
    done: queue.Queue[tuple[_Ready, JobResult | BaseException]] = queue.Queue()
    running: dict[int, tuple[_Ready, threading.Thread]] = {}
    settled = 0
    serial = 0

    def work(item: _Ready, workdir: Path) -> None:
        try:
            done.put((item, execute(item.job, cfg, workdir, cancel)))
        except BaseException as exc:  # Cancelled, or a bug: re-raised on the calling thread
            done.put((item, exc))

    try:
        while ready or running:
            while ready and len(running) < jobs:
                ready.sort()
                item = ready.pop(0)
                st = states[item.key[1]]
                name = "honest" if item.liar_index < 0 else f"liar-{item.liar_index}"
                thread = threading.Thread(target=work, args=(item, base / f"{st.index:03d}-{st.card.id}" / name),
                                          name=f"kvproof-{item.job.label}", daemon=True)
                serial += 1
                running[serial] = (item, thread)
                thread.start()
                if on_start:
                    on_start(item.job, [r.job for r, _ in running.values()])
            item, outcome = _next(done)
            key = next(k for k, (r, _) in running.items() if r is item)
            running.pop(key)[1].join()
            if isinstance(outcome, BaseException):
                raise outcome
            st = states[item.key[1]]
            st.waiting -= 1
            settled += 1
            if item.liar_index < 0:
                st.honest = after_honest(st.card, cfg, outcome)
                exp = expected.get(st.card.id, Expected())
                for i, name in enumerate(st.card.liars):
                    if name in st.honest.liars:
                        prio = 0.0 if jobs == 1 else exp.liar(name)
                        # jobs == 1: a liar goes before every later card (negative priority beats 0)
                        key_prio = -1.0 if jobs == 1 else -prio
                        ready.append(_Ready((key_prio, st.index, i), liar_job(st.card, name), i))
                        st.waiting += 1
                if cfg.liars:
                    settled += len(st.card.liars) - len(st.honest.liars)
            else:
                st.liars[item.job.liar] = liar_run(st.card, item.job.liar, outcome)
            if st.waiting == 0:
                assert st.honest is not None
                runs = tuple(st.liars[n] for n in st.honest.liars)
                results[st.index] = assemble(st.card, st.honest, runs)
            if on_done:
                on_done(item.job, settled)
    except BaseException:
        cancel.set()
        for _, thread in running.values():
            thread.join()
        raise
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert len(results) == len(states), "every card must have finished"
    return [results[i] for i in range(len(states))]


__all__ = ["Expected", "default_jobs", "expected_from_entry", "run_cards"]
