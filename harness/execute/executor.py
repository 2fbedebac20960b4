"""Where witness processes run: the executor seam between the scheduler and the machines.

The scheduler (:mod:`harness.execute.schedule`) decides *which* job starts next; an
executor decides *where* and runs it. Two executors, one interface:

- ``local`` (:class:`harness.execute.local.LocalExecutor`, the default): this machine, ``-j N``
  processes at a time, each started from the run's fork server or as a plain
  subprocess (:func:`harness.execute.watch.execute`);
- ``ray`` (:class:`harness.execute.cluster.RayExecutor`): one Ray task per job on a
  local or existing Ray cluster, each running the same
  :func:`harness.execute.watch.execute` on its node (``pip install -e '.[cluster]'``;
  docs/cluster.md).

Both hand back the same :class:`harness.execute.jobs.JobResult` per job, so the
verdicts, the report and the ledger do not depend on the executor; a result
also names the node it ran on (:attr:`harness.execute.jobs.JobResult.node`).

This module is the interface only and knows no implementation; the
factory, :func:`harness.execute.factory.make`, sits beside them.

The interface (:class:`Executor`): a context manager whose ``capacity`` is
how many jobs may run at once; :meth:`~Executor.start` hands it a job,
:meth:`~Executor.events` blocks until something happened (a job
:class:`Started` on a node, or :class:`Finished`), :meth:`~Executor.stop`
cancels every running job (Ctrl-C). Everything is called from one thread,
the one Ctrl-C arrives on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.errors import UsageError

if TYPE_CHECKING:  # the interface names the job types; importing it loads none of them
    from harness.execute.jobs import Job, JobResult, RunConfig

LOCAL, RAY = "local", "ray"
EXECUTORS = (LOCAL, RAY)


@dataclass(frozen=True)
class ExecutorSpec:
    """What the user asked for: ``--executor``, ``--ray-address``, ``--ray-ship``, and whether ``-j`` was given."""

    kind: str = LOCAL
    address: str | None = None  # ray: join this cluster; None starts a local one
    ship: str = "auto"  # ray: how nodes get the weights and the oracle (harness.execute.shipping.SHIP_MODES)
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


def blas_config(cfg: RunConfig, parallel: bool) -> RunConfig:
    """With more than one process at a time each gets one BLAS thread, unless ``cfg`` already says."""
    if parallel and cfg.blas_threads is None:
        return replace(cfg, blas_threads=1)
    return cfg


__all__ = ["EXECUTORS", "LOCAL", "RAY", "Executor", "ExecutorSpec", "Finished", "Running", "Started", "blas_config"]
