"""The executor factory: an :class:`~harness.execute.executor.ExecutorSpec` -> the executor it names.

It sits beside the implementations (:mod:`harness.execute.local`,
:mod:`harness.execute.cluster`), so the interface module
(:mod:`harness.execute.executor`) knows none of them and nothing imports in
a circle.
"""

from __future__ import annotations

from harness.execute.cluster import RayExecutor, import_ray
from harness.execute.executor import RAY, Executor, ExecutorSpec, blas_config
from harness.execute.jobs import RunConfig
from harness.execute.local import LocalExecutor


def make(spec: ExecutorSpec | Executor | None, cfg: RunConfig, jobs: int) -> Executor:
    """The executor ``spec`` names, not yet entered (UsageError when it cannot be had, e.g. ray missing);
    an executor given instead of a spec is returned as it is."""
    if spec is not None and not isinstance(spec, ExecutorSpec):
        return spec
    spec = spec or ExecutorSpec()
    cfg = blas_config(cfg, jobs > 1)
    if spec.kind == RAY:
        import_ray()  # UsageError with the install hint before anything else
        return RayExecutor(cfg, spec, jobs)
    return LocalExecutor(cfg, jobs)
