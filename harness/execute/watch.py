"""Execute one witness process: start it, watch it, and read back what it reported.

The run uses one fresh pytest process per (card, liar).

Process model
-------------
For each card the harness starts one ``python -m pytest`` subprocess for the
honest run (all its witnesses and controls), then, if every witness and
control held, one more fresh subprocess per listed liar (witnesses only,
with the liar patched in before collection). One process per card keeps
the start-up cost (about half a second) per card, not per node, and a
crash takes down only that card.

Timeout attribution
-------------------
The plugin streams a ``start`` line before each node and a ``result`` line
after it to a JSONL file. The harness polls that file while the process
runs: a node whose ``start`` is older than its timeout (+0.5 s grace) gets
ERROR "timeout" and the process group is killed; the stack it hung in was
written by ``faulthandler`` in the child. A process that exits while a node
is started but has no result crashed in that node (``os._exit``, a signal,
an abort). Nodes after it are "not run"; the card is ERROR either way, so
they are not retried. Before the first node and between nodes (collection,
module fixtures) the process gets ``startup_timeout`` seconds of silence.

A mutant of a ``mutate`` run forks from its card's *warm server* instead
(:mod:`harness.execute.warm`: the card's witnesses already imported and
collected), unless what the server reported says a fork could not reproduce
a fresh process for it (:class:`harness.execute.jobs.WarmSpec`); the job's
result says which (``started_as``).

How a process starts (the launcher)
-----------------------------------
By default on Linux a witness process is forked from the run's fork server
(:mod:`harness.execute.forkserver`), a process that imported Hypothesis, numpy and
pytest once and nothing of the project; elsewhere, or with
``KVPROOF_LAUNCHER=subprocess``, it is a plain ``python -m
harness.execute.pytest_main`` subprocess. Both run the same code with the same
environment, cwd, argv and session; the handle this module polls is a
``Popen`` or a :class:`harness.execute.forkserver.ForkChild`. A job that was running
when the fork server died is run again as a subprocess.

Each process runs with the project root as cwd and first on PYTHONPATH,
``PYTHONHASHSEED=0``, in its own session (so a kill reaches its children).
No witness process outlives the runner: each gets the read end of the
runner's watchdog pipe and kills itself and its descendants when the runner
is gone, even after a SIGKILL (:mod:`harness.execute.orphans`). Scratch files live in
``<TMPDIR>/kvproof-run-<pid>-*``; the next run removes those of dead runners.
When several processes run at once (``-j N``, see :mod:`harness.execute.schedule`)
each gets ``OPENBLAS_NUM_THREADS=1`` (and OMP/MKL): OpenBLAS' threads
busy-wait, and two processes with two threads each on two cores ran 10-100x
slower than one thread each. For the same reason each gets
``OMP_WAIT_POLICY=PASSIVE`` (unless the environment sets it): a witness that
runs the kernel on 4 threads (KV-T4's thread counts) kept its idle OpenMP
threads spinning on the cores the other process used (the gate: 55.3 s ->
48.7 s on 2 cores with -j 2; thread-counts alone under load 2.9 s -> 1.4 s).

A card's run is three steps, so a scheduler can interleave cards:
:func:`harness.execute.jobs.honest_job` -> :func:`execute` ->
:func:`harness.execute.outcomes.after_honest` (which liars to run) -> :func:`execute`
per liar -> :func:`harness.execute.outcomes.assemble`;
:func:`harness.execute.schedule.run_cards` runs them for many cards.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import BinaryIO

from harness.errors import Cancelled, exhausted_prefix
from harness.execute import forkserver, ingress, orphans
from harness.execute.jobs import CAUGHT_EARLIER, Job, JobResult, RunConfig, WarmCard
from harness.execute.launcher import Launcher
from harness.project import KVPROOF_HOME
from harness.statuses import Outcome
from harness.wire import messages
from harness.wire.messages import JobPlan, NodeResult

GRACE_S = 0.5
# pytest settings a user's environment may carry (PYTEST_ADDOPTS=--setup-only would run no test body):
# witness processes never inherit them; kvproof passes its own options (see inherited_pytest_settings)
INHERITED_PYTEST_VARS = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_DEBUG")
POLL_S = 0.03
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


# ---------------------------------------------------------------- one process


def _tail(path: Path, lines: int = 25) -> str:
    return ingress.read_tail(path, lines)  # made safe: the log is the witness's own output


exit_text = orphans.exit_text  # what a process's exit code means, in words (shared with harness.execute.forkserver)


def pycache_dir(root: Path) -> Path:
    """Where witness processes write bytecode: ``<root>/.cache/pycache``."""
    return Path(root) / ".cache" / "pycache"


def witness_env(cfg: RunConfig, watchdog: int | None = None, subject: str = "default") -> dict[str, str]:
    """The environment of a witness process of ``subject`` (its settings applied last, over -j's BLAS
    threads: a configuration may ask for OMP_NUM_THREADS=4)."""
    env = {k: v for k, v in os.environ.items() if k not in INHERITED_PYTEST_VARS}
    env.pop(orphans.WATCHDOG_ENV, None)
    env.pop(forkserver.SOCKET_ENV, None)
    env.pop(messages.ACCOUNT_ENV, None)
    # NOTE: bytecode. Some environments (this one) set PYTHONDONTWRITEBYTECODE=1, so no witness process
    # ever kept a .pyc and each one compiled every module it imported and had pytest re-rewrite every
    # witness module's asserts (about 0.4 s a process). Witness processes write bytecode, but only under
    # <root>/.cache/pycache (PYTHONPYCACHEPREFIX, which pytest's rewritten modules honour too), never a
    # __pycache__ in the source tree: the tree stays as the cards bind it, and the cache folder is
    # git-ignored. A .pyc is checked against its source's mtime and size on import, as usual.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache_dir(cfg.root))
    if watchdog is not None:
        env[orphans.WATCHDOG_ENV] = str(watchdog)
    paths = [str(cfg.root), str(KVPROOF_HOME)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONFAULTHANDLER"] = "1"
    env["KVPROOF_PROFILE"] = cfg.profile
    if cfg.repro_dir is not None:
        env["KVPROOF_REPRO_DIR"] = str(cfg.repro_dir)
    env.setdefault("COLUMNS", "120")
    if cfg.oracle_dir is not None:
        env["KVPROOF_ORACLE_DIR"] = str(cfg.oracle_dir)
    if cfg.blas_threads is not None:
        for name in BLAS_THREAD_VARS:
            env[name] = str(cfg.blas_threads)
        # a witness that asks for more kernel threads than its share of the cores (KV-T4's thread counts 1-4)
        # must not spin: OpenMP's idle threads busy-wait by default, on the cores the other processes use
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.update(cfg.subject_env.get(subject, {}))
    return env


def _pytest_args(cfg: RunConfig, plan: Path, nodes: list[str], first_failure: bool = False) -> list[str]:
    """What :func:`harness.execute.pytest_main.main` gets, in a subprocess or a fork."""
    args = [
        "-p",
        "harness.plugin",
        # NOTE: one token. pytest finds the project's ini file from the common ancestor of every argument that
        # does not start with "-": a plan path in /tmp as a separate token made that /tmp, so the project's
        # pytest configuration (markers, filterwarnings, addopts) never applied to its witnesses
        f"--kvproof-plan={plan}",
        "--rootdir",
        str(cfg.root),
        "--confcutdir",
        str(cfg.root),
        "-p",
        "no:cacheprovider",
        "-q",
        "--no-header",
        "-rN",
    ]
    if first_failure:
        # a mutant is caught by the first witness that fails under it; its report keeps the failure's first line
        # only, so pytest renders the traceback natively (no source parsed per frame: ~20 ms a mutant)
        args += ["--exitfirst", "--tb=native"]
    if cfg.seed is not None:
        args.append(f"--hypothesis-seed={cfg.seed}")
    return args + nodes


def _command(cfg: RunConfig, plan: Path, nodes: list[str], first_failure: bool = False) -> list[str]:
    return [cfg.python, "-m", "harness.execute.pytest_main", *_pytest_args(cfg, plan, nodes, first_failure)]


def launcher_name(cfg: RunConfig) -> str:
    """The launcher ``cfg`` asks for: ``forkserver`` or ``subprocess`` (UsageError for a bad KVPROOF_LAUNCHER)."""
    return forkserver.choose(cfg.launcher)


def open_launcher(cfg: RunConfig, scratch: Path) -> Launcher | None:
    """The run's fork server launcher (its zygote starts with the first job), or None for plain subprocesses.

    Close it when the run ends. ``scratch``: the run's own folder (the zygote's log goes there).
    """
    if launcher_name(cfg) != forkserver.FORKSERVER:
        return None
    return Launcher(cfg.python, witness_env(cfg), cfg.root, scratch / "forkserver.log", cfg.startup_timeout)


@dataclass
class _Watch:
    """What the events said so far about the running process. Times are ``time.monotonic()`` seconds."""

    idle_since: float  # when the last node finished (or the process started)
    running: tuple[str, float, float] | None = None  # nodeid, seen at, timeout
    timed_out: tuple[str, float] | None = None  # nodeid ("" outside any node), seconds allowed
    unreadable: list[str] = field(default_factory=list)  # stream lines that were no event (ingress.EventTail)

    def note(self, ev: messages.Event, now: float, out: JobResult) -> None:
        """Take in one event: track the running node; results, collection and liar errors go to ``out``."""
        if isinstance(ev, messages.NodeStarted):
            self.running = (ev.nodeid, now, ev.timeout)
        elif isinstance(ev, messages.NodeFinished):
            self.running, self.idle_since = None, now
            out.results[ev.result.nodeid] = ev.result
        elif isinstance(ev, messages.CollectError):
            out.collect_errors.append(ev)
        elif isinstance(ev, messages.LiarApplied) and not ev.ok:
            out.liar_error = ev.error or "could not be applied"
        elif isinstance(ev, messages.LinesRun):
            out.lines_run.append(ev)

    def overdue(self, now: float, startup_timeout: float) -> tuple[str, float] | None:
        """(nodeid, timeout) of a node running longer than its timeout + :data:`GRACE_S`; ("", startup_timeout)
        after that long without a node running; else None."""
        if self.running is not None and now - self.running[1] > self.running[2] + GRACE_S:
            return self.running[0], self.running[2]
        if self.running is None and now - self.idle_since > startup_timeout:
            return "", startup_timeout
        return None


Proc = subprocess.Popen | forkserver.ForkChild


def _warm_argv(warm: WarmCard, cfg: RunConfig, folder: Path) -> list[str]:
    """The pytest arguments of a card's warm server (its plan written into ``folder``): every witness of the
    card collected, nothing applied, the claimed files traced while it imports and collects."""
    plan = folder / "plan.json"
    JobPlan(
        str(folder / "events.jsonl"),
        str(folder / "stacks.txt"),
        str(cfg.root),
        None,
        cfg.profile,
        cfg.seed,
        {},
        cfg.default_timeout,
        None,
        tuple(warm.coverage),
        True,
    ).write(plan)
    tests = list(dict.fromkeys(w.test for w in warm.card.witnesses))
    return _pytest_args(cfg, plan, tests, first_failure=True)


def _server(warm: WarmCard | None, cfg: RunConfig) -> tuple[str, Callable[[Path], list[str]]] | None:
    """(key, how to start it) of a card's warm server, as :meth:`harness.execute.launcher.Launcher.spawn_warm`
    takes it."""
    return None if warm is None else (warm.key, partial(_warm_argv, warm, cfg))


def _start(
    job: Job,
    cfg: RunConfig,
    plan: Path,
    logf: BinaryIO,
    log: Path,
    launcher: Launcher | None = None,
    account: Path | None = None,
) -> tuple[Proc, str]:
    """Start the witness process in its own session, holding the read end of the runner's watchdog pipe;
    (the process, how it started: :attr:`harness.execute.jobs.JobResult.started_as`).

    Forked by ``launcher`` when there is one and it can (from the job's card's warm server when the job has a
    :class:`harness.execute.jobs.WarmSpec` and the spec allows: "warm"; else "fresh: why"); else a
    subprocess. ``account``: where the entry point writes pytest's own account (:class:`harness.wire.messages.Account`).
    """
    how = "fresh" if job.warm is not None else ""
    watchdog = orphans.watchdog_fd()
    env = witness_env(cfg, watchdog, job.card.subject)
    if account is not None:
        env[messages.ACCOUNT_ENV] = str(account)
    # a mutant is killed by any failure or error: the first ends its run. A liar is caught only by a failed
    # check, so its run goes on past an error (the plugin stops it at the first failure)
    args = _pytest_args(cfg, plan, job.node_ids, first_failure=bool(job.mutant))
    if launcher is not None:
        if job.warm is not None:
            server = _server(job.warm.server, cfg)
            assert server is not None
            child, how = launcher.spawn_warm(
                server, job.warm.fresh, args, env, cfg.root, log, then=_server(job.warm.then, cfg)
            )
            if child is not None:
                return child, how
        child = launcher.spawn(args, env, cfg.root, log)
        if child is not None:
            return child, how
    proc = subprocess.Popen(
        [cfg.python, "-m", "harness.execute.pytest_main", *args],
        cwd=cfg.root,
        env=env,
        stdout=logf,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        pass_fds=(watchdog,),
    )
    return proc, how


def _wait(proc: Proc, job: Job, cfg: RunConfig, events: Path, out: JobResult, cancel: threading.Event | None) -> _Watch:
    """Poll every :data:`POLL_S` until ``proc`` exits or a timeout fires (``proc`` killed, ``timed_out`` set).

    Events go into ``out`` as they arrive. Raises :class:`Cancelled` (``proc`` killed) once ``cancel`` is set.
    """
    tail = ingress.EventTail(events)  # NOTE: what the process wrote enters the runner there, made safe
    watch = _Watch(idle_since=time.monotonic(), unreadable=tail.unreadable)
    while True:
        code = proc.poll()  # NOTE: before the read, so every event written before the exit is seen
        new = tail.read()
        now = time.monotonic()
        for ev in new:
            watch.note(ev, now, out)
        if code is not None:
            return watch
        if cancel is not None and cancel.is_set():
            _kill(proc)
            raise Cancelled(job.label)
        watch.timed_out = watch.overdue(now, cfg.startup_timeout)
        if watch.timed_out:
            _kill(proc)
            return watch
        _nap(proc)


def _nap(proc: Proc) -> None:
    """Wait :data:`POLL_S`, or less when a fork child ends sooner (the fork server says so at once)."""
    if isinstance(proc, forkserver.ForkChild):
        try:
            proc.wait(POLL_S)
        except subprocess.TimeoutExpired:
            pass
    else:
        time.sleep(POLL_S)


def _blame(out: JobResult, watch: _Watch, stacks: Path) -> None:
    """A timeout is ERROR for the node that ran too long (with its stack); a process that died while a node
    ran crashed in that node. Either way ``out.stopped`` says why the later nodes did not run."""
    if watch.timed_out is not None:
        nodeid, seconds = watch.timed_out
        stack = _tail(stacks, 40)
        if nodeid:
            out.results[nodeid] = NodeResult(
                nodeid,
                Outcome.ERROR,
                seconds,
                message=f"timeout: still running after {seconds:g} s",
                failure=("stack when the timeout fired:\n" + stack) if stack else "",
            )
            out.stopped = f"the process was stopped after {nodeid} timed out"
        else:
            out.stopped = f"pytest was silent for {seconds:g} s outside any test (collection or fixture teardown hung)"
    elif watch.running is not None:
        nodeid = watch.running[0]
        ran_out = orphans.exhausted(out.output_tail, (Path(tempfile.gettempdir()), stacks.parent), out.exit_code)
        prefix = exhausted_prefix(ran_out) if ran_out else ""
        out.results[nodeid] = NodeResult(
            nodeid,
            Outcome.ERROR,
            time.monotonic() - watch.running[1],
            message=f"{prefix}the interpreter died while this test ran ({exit_text(out.exit_code)})",
            failure=out.output_tail,
        )
        out.stopped = f"the interpreter died in {nodeid}"


def _distrust(result: NodeResult, why: str) -> NodeResult:
    return NodeResult(
        result.nodeid,
        Outcome.ERROR,
        result.duration,
        result.evidence,
        why[:300],
        why,
        result.location,
        result.hypothesis,
    )


def cross_check(out: JobResult, account: messages.Account | None) -> None:
    """Hold what the plugin streamed against pytest's own account; a disagreement is ERROR naming both.

    The plugin runs inside the process the code under test runs in, so its "passed" stands only when
    pytest's own account agrees: the account exists (the session ended normally), the node's test body
    ran and passed, no project hook was refused, and pytest's exit code is what the results imply.
    Only a streamed "passed" is questioned: a failure or skip cannot hide a wrong result.
    """
    if account is None:
        why = (
            "pytest's own account of this process is missing: it ended "
            f"({exit_text(out.exit_code)}) without pytest finishing its session, so the results it "
            "streamed cannot be trusted (a witness that calls os._exit, or one that forges events)"
        )
        for nodeid, r in out.results.items():
            if r.outcome == Outcome.PASSED:
                out.results[nodeid] = _distrust(r, why)
        if not out.results and not out.stopped and out.exit_code == 0:
            out.stopped = why
        return
    if account.refused:
        why = (
            "kvproof refuses project hooks that can rewrite test outcomes: "
            + "; ".join(account.refused)
            + " (move the behaviour into a fixture)"
        )
        for nodeid, r in out.results.items():
            out.results[nodeid] = _distrust(r, why)
        out.stopped = out.stopped or why
        return
    for nodeid, r in out.results.items():
        if r.outcome != Outcome.PASSED:
            continue
        call = account.calls.get(nodeid)
        if call is None:
            why = (
                "streamed as passed, but pytest's own account has no test body run for it (no call phase: "
                "--setup-only or --setup-plan in the project's pytest options, or a hook that skipped it)"
            )
            out.results[nodeid] = _distrust(r, why)
        elif call != messages.CALL_PASSED:
            why = (
                f"streamed as passed, but pytest's own account says its test body {call}: the outcome was "
                "rewritten between pytest and the plugin (a hook, or a patched harness)"
            )
            out.results[nodeid] = _distrust(r, why)
    passed = out.results and all(r.outcome == Outcome.PASSED for r in out.results.values())
    if passed and not out.collect_errors and account.exit_code != 0:
        why = (
            f"pytest returned exit code {account.exit_code} ({PYTEST_EXIT.get(account.exit_code, 'unknown')}) "
            "although every streamed result says passed"
        )
        for nodeid, r in out.results.items():
            out.results[nodeid] = _distrust(r, why)
    if out.exit_code is not None and out.exit_code >= 0 and out.exit_code != (account.exit_code & 0xFF):
        why = f"the process exited {out.exit_code}, but pytest returned {account.exit_code}"
        for nodeid, r in out.results.items():
            if r.outcome == Outcome.PASSED:
                out.results[nodeid] = _distrust(r, why)


PYTEST_EXIT = {
    0: "all tests passed",
    1: "tests failed",
    2: "interrupted",
    3: "internal error",
    4: "usage error",
    5: "no tests collected",
}


def execute(
    job: Job,
    cfg: RunConfig,
    workdir: Path,
    cancel: threading.Event | None = None,
    launcher: Launcher | None = None,
) -> JobResult:
    """Run ``job`` in a fresh pytest process and collect what it streamed.

    Blocks until the process ends. When ``cancel`` is set (from another
    thread) the process group is killed within ``POLL_S`` and
    :class:`Cancelled` is raised. ``launcher``: the run's fork server
    (:func:`open_launcher`); None starts a plain subprocess.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    events, stacks, log, plan = (workdir / n for n in ("events.jsonl", "stacks.txt", "pytest.log", "plan.json"))
    timeouts = {w.test: (w.timeout or cfg.default_timeout) for w in job.witnesses}
    if job.timeouts is not None:
        timeouts.update(job.timeouts)
    JobPlan(
        str(events),
        str(stacks),
        str(cfg.root),
        job.liar,
        cfg.profile,
        cfg.seed,
        timeouts,
        cfg.default_timeout,
        job.mutant,
        tuple(job.coverage),
    ).write(plan)
    account = workdir / f"account-{secrets.token_hex(8)}.json"  # a name only the runner and the entry point know
    t0 = time.monotonic()
    lost_before = False
    while True:
        events.write_bytes(b"")
        account.unlink(missing_ok=True)
        out = JobResult()
        with open(log, "wb") as logf:
            proc, out.started_as = _start(job, cfg, plan, logf, log, launcher, account)
            try:
                watch = _wait(proc, job, cfg, events, out, cancel)
            finally:
                if proc.poll() is None:
                    _kill(proc)
                _kill_leftovers(proc)
        if not getattr(proc, "lost", False):
            break
        if lost_before:
            # NOTE: never again, and never as a plain subprocess: a witness that kills its parent would kill
            # the runner itself there. The job is ERROR; the run goes on with a new fork server.
            out.lost = (
                "the fork server died twice while this job ran (a witness that kills its parent process does "
                "that); it is not run again"
            )
            break
        lost_before = True  # the fork server died under this job: it runs again, once, from a new one
    out.exit_code = proc.returncode
    out.duration = time.monotonic() - t0
    out.output_tail = _tail(log)
    _blame(out, watch, stacks)
    told = ingress.read_account(account)  # made safe as the events are, so the two accounts still meet
    if watch.timed_out is None and watch.running is None and not out.liar_error:
        cross_check(out, told)
    if watch.unreadable:
        why = (
            f"the process wrote {len(watch.unreadable)} line(s) to kvproof's event stream that are not events "
            f"(first: {watch.unreadable[0]}), so the results it streamed cannot be trusted"
        )
        for nodeid, r in out.results.items():
            if r.outcome == Outcome.PASSED:
                out.results[nodeid] = _distrust(r, why)
    out.reads = told.reads if told is not None else None  # what the verdict is bound to besides its named files
    catches = (Outcome.FAILED,) if job.liar else (Outcome.FAILED, Outcome.ERROR)
    caught = any(r.outcome in catches for r in out.results.values())
    if job.stops_at_first_failure and caught and not out.stopped:
        out.stopped = CAUGHT_EARLIER
    return out


def _kill(proc: Proc) -> None:
    """SIGKILL the witness process, its group and every descendant that left the group."""
    if isinstance(proc, forkserver.ForkChild):
        proc.kill_tree()  # NOTE: done by the fork server, the child's parent: only it knows the pid is still ours
    elif proc.poll() is None:  # NOTE: not yet reaped, so proc.pid is still ours
        orphans.kill_tree(proc.pid)
    proc.wait()


def _kill_leftovers(proc: Proc) -> None:
    """After the witness process ended: SIGKILL what is left of its process group (say it crashed and left
    children). The group id cannot name anyone else's group: a pid is not reused while a group has it.

    A fork child's group was killed by the fork server before it reaped the child (while the zombie still
    held the pid), so there is nothing left to do here: a killpg now could reach a group that reused the pid.
    """
    if isinstance(proc, forkserver.ForkChild):
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
