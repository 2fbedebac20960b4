"""The launcher of a run's witness processes: which fork server starts each job (harness.execute.forkserver's
design docstring is the design document).

:class:`Launcher` keeps the run's zygote (one per environment: ``--matrix``
configurations get their own), starts it again when a witness kills it, and
gives up on it (plain subprocesses) after :data:`MAX_LOSSES`; and, in a
``mutate`` run, the cards' warm servers (:meth:`Launcher.spawn_warm`,
:mod:`harness.execute.warm`): forked from the zygote, started ahead of the
jobs that want them, closed when their card's jobs are done.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from harness.execute import orphans
from harness.execute.forkserver import FORKSERVER, ForkChild, ForkServer, Unavailable, WarmFacts
from harness.execute.zygote import SOCKET_ENV
from harness.wire.messages import ACCOUNT_ENV

_VOLATILE = (
    orphans.WATCHDOG_ENV,
    SOCKET_ENV,
    ACCOUNT_ENV,
    "PYTEST_CURRENT_TEST",
)  # differ from call to call, read by no import


def _same_env(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    def strip(env: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if k not in _VOLATILE}

    return strip(a) == strip(b)


class _Starting:
    """A warm server being started by one thread; the others that want it wait on ``done``."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.server: ForkServer | None = None
        self.why = ""


WARM = "warm"  # JobResult.started_as of a job forked from its card's warm server
MAX_LOSSES = 3  # fork servers lost in one run before every later job starts as a plain subprocess
MAX_ENVIRONMENTS = 12  # zygotes for environments other than the run's (one per --matrix configuration)


class Launcher:
    """A run's fork server, started on the first job and started again when it is lost (a witness may kill
    its parent); after :data:`MAX_LOSSES` losses, or when one cannot start, every job starts as a plain
    subprocess.

    A job whose environment differs from the run's (a ``--matrix``
    configuration's settings, e.g. ``KVPROOF_KERNEL=numpy``) gets a zygote of
    its own, started with that environment on its first job (at most
    :data:`MAX_ENVIRONMENTS` of them), so what an interpreter reads once at
    start-up is what a fresh process with those settings would read.

    :meth:`spawn` returns None when the job must start as a subprocess
    instead (the zygote failed, or there are too many environments). Each
    loss is said once, on stderr.
    """

    name = FORKSERVER

    def __init__(
        self,
        python: str,
        env: Mapping[str, str],
        cwd: Path,
        log: Path,
        ready_timeout: float,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.python, self.env, self.cwd, self.log, self.ready_timeout = python, dict(env), cwd, log, ready_timeout
        self.say = say if say is not None else _say
        self.server: ForkServer | None = None
        self.others: dict[tuple, ForkServer] = {}  # environment (its stable items) -> its zygote
        self.warm: dict[str, ForkServer] = {}  # warm server key -> server, least recently used first
        self.warm_failed: dict[str, str] = {}  # key -> why its server cannot serve
        self.warm_started = 0
        self._starting: dict[str, _Starting] = {}  # key -> a start under way (another thread waits on it)
        self._using: dict[str, int] = {}  # key -> jobs between finding its server and forking from it
        self._prewarming: list[threading.Thread] = []
        self.failed = ""
        self.losses = 0
        self._lock = threading.Lock()
        self._warm_lock = threading.Lock()

    def _fail(self, why: str) -> None:
        with self._lock:
            self.losses += 1
            last = self.losses >= MAX_LOSSES and not self.failed
            if last:
                self.failed = why
        if last:
            self.say(f"kvproof: {why}; the remaining witness processes start as plain subprocesses")
        elif not self.failed:
            self.say(f"kvproof: {why}; starting a new fork server for the next witness processes")

    def spawn(self, args: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path) -> ForkChild | None:
        with self._lock:
            if self.failed:
                return None
            if self.server is not None and not self.server.alive and not self.server.closing:
                self.server = None  # lost (on_lost said so): the next job starts a new one
            if self.server is None:
                try:
                    self.server = ForkServer(
                        self.python, self.env, self.cwd, self.log, self.ready_timeout, on_lost=self._fail
                    )
                except Unavailable as exc:
                    self.failed = str(exc)
                    self.say(f"kvproof: {exc}; witness processes start as plain subprocesses")
                    return None
            server = self.server
            if not _same_env(env, server.env):
                server = self._other(env)
                if server is None:
                    return None
        try:
            return server.spawn(args, env, cwd, log)
        except Unavailable:
            return None  # the zygote is gone (on_lost said so) or this one fork failed

    def _other(self, env: Mapping[str, str]) -> ForkServer | None:
        """The zygote for an environment other than the run's, started on first use (lock held)."""
        key = tuple(sorted((k, v) for k, v in env.items() if k not in _VOLATILE))
        server = self.others.get(key)
        if server is not None and not server.alive and not server.closing:
            server = None  # lost: start it again
        if server is None:
            if len(self.others) >= MAX_ENVIRONMENTS and key not in self.others:
                return None
            log = self.log.with_name(f"{self.log.stem}-{len(self.others) + 1}{self.log.suffix}")
            try:
                server = ForkServer(self.python, dict(key), self.cwd, log, self.ready_timeout, on_lost=self._fail)
            except Unavailable as exc:
                self.say(f"kvproof: {exc}; witness processes of that environment start as plain subprocesses")
                return None
            self.others[key] = server
        return server

    def spawn_warm(
        self,
        server: tuple[str, Callable[[Path], Sequence[str]]],
        fresh: Callable[[WarmFacts], str],
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        log: Path,
        then: tuple[str, Callable[[Path], Sequence[str]]] | None = None,
    ) -> tuple[ForkChild | None, str]:
        """(a child forked from warm server ``server``, "warm"), or (None, "fresh: why") when the job must start
        as a fresh process (:meth:`spawn`): ``fresh(facts)`` said so, or the server could not start or serve.

        ``server`` is (key, how to start it: ``argv(folder)`` gives its pytest arguments, ``folder`` its own
        scratch folder). It starts on the first job of its key (later jobs of the key wait for it), with this
        launcher's environment; ``then``, the server the next jobs will want, starts ahead in the background.
        Idle servers of other keys are closed (a card's jobs come together). A server that is lost is not
        started again: its key's later jobs start fresh.
        """
        key = server[0]
        found, why = self._reserve(*server)
        try:
            self._evict(keep={key, then[0] if then is not None else key})
            if then is not None:
                self._prewarm(*then)
            if found is None:
                return None, f"fresh: {why}"
            why = fresh(found.facts)
            if why:
                return None, f"fresh: {why}"
            try:
                return found.spawn(args, env, cwd, log), WARM
            except Unavailable as exc:
                with self._warm_lock:
                    self.warm_failed[key] = f"its warm server could not fork: {exc}"
                return None, f"fresh: {self.warm_failed[key]}"
        finally:
            if found is not None:
                with self._warm_lock:
                    self._using[key] -= 1

    def _reserve(self, key: str, argv: Callable[[Path], Sequence[str]]) -> tuple[ForkServer | None, str]:
        """:meth:`_warm_server`, held for this job (:meth:`_evict` leaves it alone) until the caller lets go."""
        while True:
            found, why = self._warm_server(key, argv)
            if found is None:
                return None, why
            with self._warm_lock:
                if self.warm.get(key) is found and found.alive:
                    self._using[key] = self._using.get(key, 0) + 1
                    return found, ""
            # closed by another job's _evict after it was found (this job was dispatched, not yet here): again

    def _warm_server(self, key: str, argv: Callable[[Path], Sequence[str]]) -> tuple[ForkServer | None, str]:
        """(warm server ``key``, "") started if needed (or waited for, when another thread starts it); (None, why)."""
        with self._warm_lock:
            if self.failed:
                return None, self.failed
            if key in self.warm_failed:
                return None, self.warm_failed[key]
            found = self.warm.pop(key, None)
            if found is not None:
                if found.alive:
                    self.warm[key] = found  # most recently used last
                    return found, ""
                self.warm_failed[key] = f"its warm server ended ({found.why or 'lost'})"
                return None, self.warm_failed[key]
            starting = self._starting.get(key)
            mine = starting is None
            if mine:
                starting = self._starting[key] = _Starting()
                self.warm_started += 1
                folder = self.log.parent / f"warm-{self.warm_started:03d}"
        if not mine:
            starting.done.wait()
            return starting.server, starting.why
        found, why = self._start_warm(folder, argv)
        with self._warm_lock:
            self._starting.pop(key, None)
            if found is not None and self.failed:  # the launcher closed while this one started
                found.close()
                found, why = None, self.failed
            if found is not None:
                self.warm[key] = found
            else:
                self.warm_failed[key] = why
        starting.server, starting.why = found, why
        starting.done.set()
        return found, why

    def _evict(self, keep: set[str]) -> None:
        """Close the warm servers no job will want (a card's jobs run together): those of other keys than
        ``keep`` (the job's card and the next) that no child runs in."""
        with self._warm_lock:
            done = [k for k, s in self.warm.items() if k not in keep and not s.busy and not self._using.get(k)]
            servers = [self.warm.pop(k) for k in done]
        for server in servers:
            server.close()

    def _prewarm(self, key: str, argv: Callable[[Path], Sequence[str]]) -> None:
        """Start warm server ``key`` in the background, unless it runs, starts, or cannot."""
        with self._warm_lock:
            if self.failed or key in self.warm or key in self._starting or key in self.warm_failed:
                return
            thread = threading.Thread(
                target=self._warm_server, args=(key, argv), name=f"kvproof-warm-{key}", daemon=True
            )
            self._prewarming.append(thread)
        thread.start()

    def _zygote(self) -> ForkServer | None:
        """The run's fork server, started if it is not yet (None when there is none to be had)."""
        with self._lock:
            if self.failed:
                return None
            if self.server is not None and not self.server.alive and not self.server.closing:
                self.server = None
            if self.server is None:
                try:
                    self.server = ForkServer(
                        self.python, self.env, self.cwd, self.log, self.ready_timeout, on_lost=self._fail
                    )
                except Unavailable:
                    return None
            return self.server

    def _start_warm(self, folder: Path, argv: Callable[[Path], Sequence[str]]) -> tuple[ForkServer | None, str]:
        """A new warm server in ``folder`` (forked from the run's zygote when it can be, else a new interpreter),
        or (None, why it cannot serve)."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
            args = list(argv(folder))
        except OSError as exc:
            return None, f"its warm server could not start: {exc}"
        server = None
        for via in (self._zygote(), None):
            try:
                server = ForkServer(
                    self.python,
                    self.env,
                    self.cwd,
                    folder / "server.log",
                    self.ready_timeout,
                    on_lost=None,
                    module="harness.execute.warm",
                    argv=args,
                    via=via,
                )
                break
            except Unavailable as exc:
                why = f"its warm server could not start: {exc}"
        if server is None:
            return None, why
        if server.facts.refused:
            server.close()
            return None, server.facts.refused
        return server, ""

    def close(self) -> None:
        with self._lock:
            servers = [s for s in (self.server, *self.others.values()) if s is not None]
            self.server, self.others = None, {}
            self.failed = self.failed or "closed"
        with self._warm_lock:
            servers += list(self.warm.values())
            self.warm = {}
            starting = list(self._prewarming)
        for server in servers:
            server.close()
        for thread in starting:  # a server that finishes starting now closes itself (self.failed is set)
            thread.join(self.ready_timeout + 10)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
