"""Where witness processes run: the executor seam between the scheduler and the machines.

The scheduler (:mod:`harness.schedule`) decides *which* job starts next; an
executor decides *where* and runs it. Two executors, one interface:

- ``local`` (:class:`LocalExecutor`, the default): this machine, ``-j N``
  processes at a time, each started from the run's fork server or as a plain
  subprocess (:func:`harness.run.execute`);
- ``ray`` (:class:`harness.cluster.RayExecutor`): one Ray task per job on a
  local or existing Ray cluster, each running the same
  :func:`harness.run.execute` on its node (``pip install -e '.[cluster]'``;
  docs/cluster.md).

Both hand back the same :class:`harness.run.JobResult` per job, so the
verdicts, the report and the ledger do not depend on the executor; a result
also names the node it ran on (:attr:`harness.run.JobResult.node`).

The interface (:class:`Executor`): a context manager whose ``capacity`` is
how many jobs may run at once; :meth:`~Executor.start` hands it a job,
:meth:`~Executor.events` blocks until something happened (a job
:class:`Started` on a node, or :class:`Finished`), :meth:`~Executor.stop`
cancels every running job (Ctrl-C). Everything is called from one thread,
the one Ctrl-C arrives on.
"""

from __future__ import annotations

import queue
import shutil
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from harness import procs
from harness.errors import UsageError
from harness.run import Job, JobResult, RunConfig, execute, launcher_name, open_launcher

LOCAL, RAY = "local", "ray"
EXECUTORS = (LOCAL, RAY)


@dataclass(frozen=True)
class ExecutorSpec:
    """What the user asked for: ``--executor``, ``--ray-address``, ``--ray-ship``, and whether ``-j`` was given."""

    kind: str = LOCAL
    address: str | None = None  # ray: join this cluster; None starts a local one
    ship: str = "auto"  # ray: how nodes get the weights and the oracle (harness.cluster.SHIP_MODES)
    jobs_given: bool = False  # ray: -j N caps the jobs in flight; else the cluster's CPUs

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise UsageError(f"--executor={self.kind!r} is not an executor: use one of {', '.join(EXECUTORS)}")
        if self.kind == LOCAL and self.address:
            raise UsageError(
                f"--ray-address={self.address!r} needs --executor ray (the local executor runs on this machine only)"
            )


@dataclass(frozen=True)
class Running:
    """A job in flight, for progress lines: its label, plus the node when the executor has more than one."""

    job: Job
    node: str = ""

    @property
    def label(self) -> str:
        return f"{self.job.label} @ {self.node}" if self.node else self.job.label


@dataclass(frozen=True)
class Started:
    item: Any  # what the scheduler passed to start()
    node: str = ""


@dataclass(frozen=True)
class Finished:
    item: Any
    result: JobResult


class Executor(Protocol):
    name: str
    capacity: int

    def __enter__(self) -> Executor: ...
    def __exit__(self, *exc: object) -> None: ...
    def start(self, item: Any, job: Job, folder: Path) -> None: ...
    def events(self) -> list[Started | Finished]: ...
    def running(self) -> list[Running]: ...
    def stop(self) -> None: ...
    def describe(self) -> str: ...
    @property
    def busy(self) -> int: ...


class LocalExecutor:
    """``jobs`` witness processes at a time on this machine: one thread per job, blocked in
    :func:`harness.run.execute` (which only polls its process); results come back on a queue.

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
        procs.sweep_owned()  # folders of runs that were killed (SIGKILL) before they could remove theirs
        self.base = procs.owned_tempdir()
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


def make(spec: ExecutorSpec | Executor | None, cfg: RunConfig, jobs: int) -> Executor:
    """The executor ``spec`` names, not yet entered (UsageError when it cannot be had, e.g. ray missing);
    an executor given instead of a spec is returned as it is."""
    if spec is not None and not isinstance(spec, ExecutorSpec):
        return spec
    spec = spec or ExecutorSpec()
    cfg = blas_config(cfg, jobs > 1)
    if spec.kind == RAY:
        from harness.cluster import RayExecutor, import_ray

        import_ray()  # UsageError with the install hint before anything else
        return RayExecutor(cfg, spec, jobs)
    return LocalExecutor(cfg, jobs)


def blas_config(cfg: RunConfig, parallel: bool) -> RunConfig:
    """With more than one process at a time each gets one BLAS thread, unless ``cfg`` already says."""
    if parallel and cfg.blas_threads is None:
        return replace(cfg, blas_threads=1)
    return cfg


__all__ = ["EXECUTORS", "Executor", "ExecutorSpec", "Finished", "LocalExecutor", "Running", "Started", "make"]
