"""The Ray executor: each witness job a Ray task running the same fresh pytest process on a cluster node.

``run_obligations.py run --executor ray`` starts a local Ray cluster for the
run (this machine, ``-j N`` CPUs) or, with ``--ray-address ADDR``, joins an
existing one. Ray does the distributing; this module only says what a job
needs on a node and how a job's result comes back (docs/cluster.md).

Code: the project is shipped with a Ray ``runtime_env`` ``working_dir`` (the
checkout without .git, .venv, .cache, reports; Ray also honours
``.gitignore``). When the project under proof is not the harness's own
checkout (a fixture project), the ``harness`` package goes along as a
``py_modules`` entry. ``KVPROOF_*`` settings of the driver that are not paths
(numerics choices, the launcher) go along as ``env_vars``.

Data: the weights and the oracle export go along as resources named by
their digests (:mod:`harness.execute.shipping`). A node that cannot provide
one with the driver's digest, or that computes with another numerics path
than the driver (impl's kernels), runs nothing: the job's witnesses are
skipped with the reason and the card is UNVERIFIED, never judged on other data.

A task (:func:`node_task`) is a Ray streaming generator: it first yields
where it runs (so the driver knows a job's node as it starts), then the
:class:`harness.execute.jobs.JobResult` of :func:`harness.execute.watch.execute`: per-witness
timeouts, the watchdog, the fork server (one per Ray worker process, kept for
its later tasks) all behave as locally. A worker that dies mid-job (killed,
out of memory, its node lost) shows as a Ray error on the next item: the job
runs once more, on whichever node Ray picks, and if that attempt dies too the
job is ERROR with both nodes named (:attr:`harness.execute.jobs.JobResult.lost`).
Ctrl-C cancels every task (``ray.cancel(force=True)`` kills the workers;
their witness processes follow through the watchdog pipe).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.execute import orphans
from harness.execute.executor import RAY, ExecutorSpec, Finished, Running, Started
from harness.execute.jobs import Job, JobResult, RunConfig
from harness.execute.shipping import (
    NODE_CACHE_ENV,
    ORACLE,
    SHIP_MODES,
    WEIGHTS,
    Resource,
    driver_resources,
    node_cache,
    provide,
    ship,
)
from harness.execute.watch import execute, launcher_name, open_launcher, witness_env
from harness.project import KVPROOF_HOME
from harness.record.provenance import numerics

INSTALL_HINT = "pip install -e '.[cluster]'"
EXCLUDES = [".git", ".venv", ".cache", "reports", ".hypothesis", "*.egg-info", "__pycache__", "*.pyc"]
# KVPROOF_* settings that name places or processes on the driver: never sent to a node
NODE_LOCAL_ENV = (
    "KVPROOF_ROOT",
    "KVPROOF_GGUF",
    "KVPROOF_ORACLE_DIR",
    "KVPROOF_WEIGHTS_CACHE",
    "KVPROOF_KERNEL_CACHE",
    "KVPROOF_REPORTS_DIR",
    "KVPROOF_CARDS_DIR",
    "KVPROOF_WATCHDOG_FD",
    "KVPROOF_FORKSERVER_FD",
    NODE_CACHE_ENV,
)
WAIT_S = 0.2  # longest wait for a task event, so Ctrl-C is seen promptly


def import_ray():
    """The ``ray`` module, or a UsageError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError(
            f"--executor ray needs the `ray` package, which this Python ({sys.executable}) cannot import ({exc}); "
            f"install the cluster extra with `{sys.executable} -m {INSTALL_HINT}` in the checkout (or `make "
            "cluster`), or leave out --executor ray to run on this machine"
        ) from None
    return ray


# ---------------------------------------------------------------- what a node needs


@dataclass(frozen=True)
class NodeData:
    """What :func:`node_task` gets besides the job: the resources, how to get them, the driver's numerics."""

    resources: tuple[Resource, ...] = ()
    ship: str = "auto"
    numerics: str | None = None  # the driver's impl numerics line (harness.record.provenance.numerics); None: not said


# ---------------------------------------------------------------- on the node


@dataclass(frozen=True)
class NodeInfo:
    host: str
    ip: str
    node_id: str

    @property
    def label(self) -> str:
        return f"{self.host} ({self.ip}, node {self.node_id[:8]})"


def node_info() -> NodeInfo:
    import ray

    try:
        ip = ray.util.get_node_ip_address()
    except Exception:
        ip = "?"
    return NodeInfo(socket.gethostname(), ip, ray.get_runtime_context().get_node_id())


_NODE_NUMERICS: dict[str, str | None] = {}


def _numerics(root: Path) -> str | None:
    """This worker's numerics line for the project at ``root`` (impl's kernels), computed once per worker."""
    if str(root) not in _NODE_NUMERICS:
        _NODE_NUMERICS[str(root)] = numerics(root)
    return _NODE_NUMERICS[str(root)]


def _caches(driver_root: Path) -> dict[str, str]:
    """Where witness processes on this node keep built kernels and float32 weights: the driver's .cache when
    this node sees the driver's checkout (same machine), else the node cache."""
    env = {}
    for var, sub in (("KVPROOF_WEIGHTS_CACHE", "weights"), ("KVPROOF_KERNEL_CACHE", "kernels")):
        shared = driver_root / ".cache" / sub
        env[var] = str(shared if shared.is_dir() and os.access(shared, os.W_OK) else node_cache() / sub)
    return env


_LAUNCHERS: dict[tuple, Any] = {}  # one fork server per Ray worker process and run environment


def _launcher(cfg: RunConfig, scratch: Path):
    """This worker's fork server for ``cfg`` (kept for its later tasks), or None for plain subprocesses."""
    if launcher_name(cfg) != "forkserver":
        return None
    import atexit

    key = tuple(sorted(witness_env(cfg).items()))
    if key not in _LAUNCHERS:
        for old in _LAUNCHERS.values():
            old.close()
        _LAUNCHERS.clear()
        launcher = open_launcher(cfg, scratch)
        _LAUNCHERS[key] = launcher
        atexit.register(launcher.close)
    return _LAUNCHERS[key]


_SCRATCH: list[Path] = []


def _scratch() -> Path:
    if not _SCRATCH:
        orphans.sweep_owned("kvproof-node-run-")
        _SCRATCH.append(orphans.owned_tempdir("kvproof-node-run-"))
    return _SCRATCH[0]


def node_task(job: Job, cfg: RunConfig, data: NodeData):
    """The Ray task of one job: yields this node's label, then the job's :class:`JobResult`."""
    info = node_info()
    yield info.label
    t0 = time.monotonic()
    root = Path.cwd()  # the runtime_env working_dir, unpacked on this node
    problems = []
    paths: dict[str, Path] = {}
    for r in data.resources:
        where, why = provide(r, data.ship, info.label)
        if why:
            problems.append(why)
        else:
            paths[r.kind] = where
    env = _caches(Path(cfg.root))
    if WEIGHTS in paths:
        env["KVPROOF_GGUF"] = str(paths[WEIGHTS])
    os.environ.update(env)  # NOTE: before the numerics check: impl builds its kernel into KVPROOF_KERNEL_CACHE
    if not problems and data.numerics is not None:
        mine = _numerics(root)
        if mine != data.numerics:
            problems.append(
                f"node {info.label} computes with another numerics path than the driver "
                f"(node: {mine}; driver: {data.numerics}); bits compare only under one path"
            )
    if problems:
        yield JobResult(unavailable="; ".join(problems), node=info.label, duration=time.monotonic() - t0)
        return
    # NOTE: no oracle resource means the driver has none either: the witnesses find none here and skip, as there
    node_cfg = replace(cfg, root=root, python=sys.executable, oracle_dir=paths.get(ORACLE))
    scratch = _scratch()
    workdir = scratch / f"job-{uuid.uuid4().hex[:12]}"
    try:
        res = execute(job, node_cfg, workdir, None, _launcher(node_cfg, scratch))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    res.node = info.label
    yield res


# ---------------------------------------------------------------- the driver


@dataclass
class _Session:
    """This process's connection to a cluster, kept across the run's stages (run, then mutate)."""

    ray: Any
    started_local: bool
    address: str
    remote: Any
    shipped: dict[tuple, list[Resource]] = field(default_factory=dict)


_SESSION: list[_Session] = []


def runtime_env(root: Path) -> dict[str, Any]:
    """The code and settings every node gets: the project as working_dir, harness as a module when the
    project is not the harness's own checkout, and the driver's non-path KVPROOF_* settings."""
    env_vars = {k: v for k, v in os.environ.items() if k.startswith("KVPROOF_") and k not in NODE_LOCAL_ENV}
    out: dict[str, Any] = {"working_dir": str(root), "excludes": list(EXCLUDES), "env_vars": env_vars}
    if Path(root).resolve() != KVPROOF_HOME.resolve():
        out["py_modules"] = [str(KVPROOF_HOME / "harness")]
    return out


CONNECT_S = 5.0  # how long the head's port may take to accept a connection before the address is refused


def check_reachable(address: str) -> None:
    """UsageError unless ``host:port`` accepts a TCP connection within :data:`CONNECT_S` (Ray itself would keep
    retrying for minutes). 'auto' and ray:// client addresses are left to Ray."""
    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise UsageError(
            f"--ray-address={address!r} is not host:port (e.g. 192.0.2.10:6379, as `ray status` on "
            "the head node prints it), 'auto', or a ray:// address"
        )
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_S).close()
    except OSError as exc:
        raise UsageError(
            f"--ray-address={address!r}: nothing accepts connections there ({exc.strerror or exc}); "
            "check the address (`ray status` on the head node prints it) and that the head node is "
            "up, or leave out --ray-address to start a local cluster"
        ) from None


def open_session(spec: ExecutorSpec, root: Path, cpus: int) -> _Session:
    """Start a local cluster (``cpus`` CPUs) or join ``spec.address``, once per process."""
    if _SESSION:
        return _SESSION[0]
    ray = import_ray()
    if spec.address:
        check_reachable(spec.address)
    kwargs: dict[str, Any] = dict(
        runtime_env=runtime_env(root),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        namespace="kvproof",
    )
    if spec.address:
        kwargs["address"] = spec.address
    else:  # NOTE: "local" always starts a new cluster; without it Ray joins one a `ray start` left running
        kwargs.update(address="local", num_cpus=cpus)
    try:
        info = ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError, OSError) as exc:
        where = f"--ray-address={spec.address!r}" if spec.address else "--executor ray (a local cluster)"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "AF_UNIX path length" in first:
            raise UsageError(
                f"{where}: Ray keeps its sockets under its temp folder, and {tempfile.gettempdir()} "
                "is too deep for them (a socket path may not exceed 107 bytes); set RAY_TMPDIR to a "
                "short folder such as /tmp/ray and run again"
            ) from None
        raise UsageError(
            f"{where}: Ray could not start or join the cluster: {first}; check the address "
            "(`ray status` on the head node prints it, e.g. 192.0.2.10:6379) or run without "
            "--ray-address to start a local cluster"
        ) from None
    remote = ray.remote(num_cpus=1, max_retries=0)(node_task)
    address = getattr(info, "address_info", {}).get("address", "") if info is not None else ""
    _SESSION.append(_Session(ray, not spec.address, address or (spec.address or ""), remote))
    return _SESSION[0]


def close_session() -> None:
    """Disconnect (and stop the local cluster this process started); nothing when no session is open."""
    if _SESSION:
        s = _SESSION.pop()
        s.ray.shutdown()


RETRYABLE = (
    "WorkerCrashedError",
    "NodeDiedError",
    "ObjectLostError",
    "OwnerDiedError",
    "RaySystemError",
    "ObjectFetchTimedOutError",
    "ReferenceCountingAssertionError",
    "LocalRayletDiedError",
)


@dataclass
class _Flight:
    item: Any
    job: Job
    t0: float
    attempt: int = 1
    node: str = ""
    history: list[str] = field(default_factory=list)  # why earlier attempts died


class RayExecutor:
    """Jobs as Ray tasks: ``capacity`` in flight (the cluster's CPUs, or ``-j N`` when given)."""

    name = RAY

    def __init__(self, cfg: RunConfig, spec: ExecutorSpec, jobs: int) -> None:
        if spec.ship not in SHIP_MODES:
            raise UsageError(f"--ray-ship={spec.ship!r} is not a mode: use one of {', '.join(SHIP_MODES)}")
        launcher_name(cfg)
        self.cfg = replace(cfg, blas_threads=cfg.blas_threads or 1)  # a task holds one CPU
        self.spec, self.jobs = spec, max(1, int(jobs))
        self.capacity = self.jobs
        self.flights: dict[Any, _Flight] = {}
        self.session: _Session | None = None
        self.data = NodeData()
        self._nodes = 0

    def __enter__(self) -> RayExecutor:
        self.session = open_session(self.spec, Path(self.cfg.root), self.jobs)
        ray = self.session.ray
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if cpus < 1:
            raise UsageError(
                f"the Ray cluster at {self.session.address or '?'} has no CPU to run a job on; "
                "add a node with CPUs (ray start --address ...)"
            )
        self._nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        self.capacity = min(self.jobs, cpus) if self.spec.jobs_given else cpus
        resources = driver_resources(self.cfg)
        key = tuple((r.kind, r.digest) for r in resources) + (self.spec.ship,)
        if key not in self.session.shipped:
            self.session.shipped[key] = resources if self.spec.ship == "never" else ship(ray, resources)

        self.data = NodeData(tuple(self.session.shipped[key]), self.spec.ship, numerics(Path(self.cfg.root)))
        return self

    def __exit__(self, *exc: object) -> None:
        if exc and exc[0] is not None:
            self.stop()

    def describe(self) -> str:
        s = self.session
        where = (
            "a local cluster started for this run" if s is None or s.started_local else f"the cluster at {s.address}"
        )
        return (
            f"ray: {where}, {self._nodes} node(s), {self.capacity} job(s) in flight; data: "
            + (", ".join(f"{r.kind} {r.digest[:12]}" for r in self.data.resources) or "none")
            + f" (--ray-ship {self.spec.ship})"
        )

    @property
    def busy(self) -> int:
        return len(self.flights)

    def _submit(self, flight: _Flight) -> None:
        assert self.session is not None
        gen = self.session.remote.remote(flight.job, self.cfg, self.data)
        self.flights[gen] = flight

    def start(self, item: Any, job: Job, folder: Path) -> None:
        self._submit(_Flight(item, job, time.monotonic()))

    def running(self) -> list[Running]:
        return [Running(f.job, f.node) for f in self.flights.values() if f.node]

    def events(self) -> list[Started | Finished]:
        """Block until a task said something: where it started, its result, or that its worker died."""
        assert self.session is not None
        ray = self.session.ray
        while True:
            ready, _ = ray.wait(list(self.flights), num_returns=1, timeout=WAIT_S)
            if ready:
                break
        out: list[Started | Finished] = []
        for gen in ready:
            flight = self.flights[gen]
            try:
                value = ray.get(next(gen))
            except StopIteration:  # the task ended without a result: it cannot, but say so if it does
                self.flights.pop(gen)
                out.append(Finished(flight.item, self._lost(flight, "its task ended without a result")))
                continue
            except Exception as exc:  # noqa: BLE001 - a Ray error: which one decides a retry
                self.flights.pop(gen)
                out.extend(self._died(flight, exc))
                continue
            if isinstance(value, str):
                flight.node = value
                out.append(Started(flight.item, value))
                continue
            self.flights.pop(gen)
            if flight.history:  # NOTE: said where the node is said, so every report shows it beside the job
                value.retried = "; ".join(flight.history)
                value.node = f"{value.node}; retried after {value.retried}"
            out.append(Finished(flight.item, value))
        return out

    def _died(self, flight: _Flight, exc: BaseException) -> list[Started | Finished]:
        kind = type(exc).__name__
        where = f"on node {flight.node}" if flight.node else "before it reported a node"
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), kind)
        if kind not in RETRYABLE:  # our own code raised on the node: a bug, not a lost worker; no retry
            return [Finished(flight.item, self._lost(flight, f"its task failed {where}: {kind}: {first}"))]
        flight.history.append(f"attempt {flight.attempt}: the Ray worker died {where} ({kind})")
        if flight.attempt >= 2:
            return [Finished(flight.item, self._lost(flight, "; ".join(flight.history)))]
        self._submit(replace(flight, attempt=flight.attempt + 1, node=""))
        return []

    def _lost(self, flight: _Flight, why: str) -> JobResult:
        return JobResult(
            lost=why, node=flight.node, duration=time.monotonic() - flight.t0, retried="; ".join(flight.history)
        )

    def stop(self) -> None:
        """Cancel every task in flight (force: the worker is killed, its witness process follows)."""
        if self.session is None:
            return
        for gen in list(self.flights):
            try:
                self.session.ray.cancel(gen, force=True)
            except Exception:  # noqa: BLE001 - already finished or gone
                pass
        self.flights.clear()


__all__ = [
    "INSTALL_HINT",
    "NodeData",
    "RayExecutor",
    "close_session",
    "import_ray",
    "node_task",
    "open_session",
    "runtime_env",
]
