"""The local executor: ``-j N`` witness processes at a time on this machine.

Each job is one thread blocked in :func:`harness.execute.watch.execute`
(which only polls its process); results come back on a queue. The executor
owns the run's scratch folder and fork server for its lifetime.
"""

from __future__ import annotations

import queue
import shutil
import threading
from pathlib import Path
from typing import Any

from harness.execute import bytecode, orphans
from harness.execute.executor import LOCAL, Finished, Running, Started
from harness.execute.jobs import Job, JobResult, RunConfig
from harness.execute.watch import execute, launcher_name, open_launcher, pycache_dir


class LocalExecutor:
    """``jobs`` witness processes at a time on this machine: one thread per job, blocked in
    :func:`harness.execute.watch.execute` (which only polls its process); results come back on a queue.

    Owns the run's scratch folder (``<TMPDIR>/kvproof-run-<pid>-*``) and fork server for its lifetime.
    """

    name = LOCAL

    def __init__(self, cfg: RunConfig, jobs: int) -> None:
        self.cfg, self.capacity = cfg, max(1, int(jobs))
        self.cancel = threading.Event()
        self.done: queue.Queue[tuple[Any, JobResult | BaseException]] = queue.Queue()
        self._events: list[Started | Finished] = []
        self._running: dict[int, tuple[Any, Job, threading.Thread, Path]] = {}  # by start order
        self._serial = 0
        self.base: Path | None = None
        self.launcher = None

    def __enter__(self) -> LocalExecutor:
        launcher_name(self.cfg)  # a bad KVPROOF_LAUNCHER is a UsageError before anything starts
        orphans.sweep_owned()  # folders of runs that were killed (SIGKILL) before they could remove theirs
        bytecode.drop_ambiguous(pycache_dir(self.cfg.root), self.cfg.root)  # no witness runs stale bytecode
        self.base = orphans.owned_tempdir()
        self.launcher = open_launcher(self.cfg, self.base)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.launcher is not None:
            self.launcher.close()
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)

    def describe(self) -> str:
        return f"local: {self.capacity} process(es) at a time on this machine"

    @property
    def busy(self) -> int:
        return len(self._running)

    def _work(self, item: Any, job: Job, workdir: Path) -> None:
        try:
            self.done.put((item, execute(job, self.cfg, workdir, self.cancel, self.launcher)))
        except BaseException as exc:  # Cancelled, or a bug: re-raised on the calling thread
            self.done.put((item, exc))

    def start(self, item: Any, job: Job, folder: Path) -> None:
        assert self.base is not None, "use the executor as a context manager"
        thread = threading.Thread(
            target=self._work, args=(item, job, self.base / folder), name=f"kvproof-{job.label}", daemon=True
        )
        self._serial += 1
        self._running[self._serial] = (item, job, thread, self.base / folder)
        thread.start()
        self._events.append(Started(item))

    def running(self) -> list[Running]:
        return [Running(job) for _, job, _, _ in self._running.values()]

    def events(self) -> list[Started | Finished]:
        """What happened since the last call; blocks until a job ends when nothing did. Re-raises what a
        job's thread raised."""
        if self._events:
            out, self._events = self._events, []
            return out
        # NOTE: a timeout keeps the wait short, so Ctrl-C is seen promptly on every platform
        while True:
            try:
                item, outcome = self.done.get(timeout=0.2)
                break
            except queue.Empty:
                continue
        key = next(k for k, (it, _, _, _) in self._running.items() if it is item)
        _, _, thread, workdir = self._running.pop(key)
        thread.join()
        if isinstance(outcome, BaseException):
            raise outcome
        shutil.rmtree(workdir, ignore_errors=True)  # what the job left is in its result; a mutate run starts hundreds
        return [Finished(item, outcome)]

    def stop(self) -> None:
        """Cancel every job (its process group is killed) and join every thread."""
        self.cancel.set()
        for _, _, thread, _ in self._running.values():
            thread.join()
