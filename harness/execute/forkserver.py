"""A fork server for witness processes: the interpreter and third-party imports are paid once per run.

This module is the runner's end of one fork server (:class:`ForkServer`,
:class:`ForkChild`; :mod:`harness.execute.launcher` picks the server for each
job); the zygote's end is :mod:`harness.execute.zygote`. The
two ends share only the request format and the constants the zygote
module defines.

Why
---
Every witness process used to spend 1.2-1.5 s before its first test:
interpreter start, numpy, Hypothesis and pytest imports, loading pytest's
entry-point plugins. A run starts 71 of them. Here one process per run (the
*zygote*, ``python -m harness.execute.zygote``) imports those libraries once,
and each witness process is a ``fork()`` of it.

What the zygote holds, and what it must not
--------------------------------------------
Third-party libraries only (:func:`harness.execute.zygote.preload`): Hypothesis, numpy, gguf, PyYAML,
pytest and its built-in plugins, the modules of installed ``pytest11`` entry-point
plugins; and the witness side: ``harness.plugin`` and the wire it imports
(:data:`harness.execute.zygote.WITNESS_SIDE_MODULES`). Nothing of the code under test: no ``impl``, no
witnesses, no conftest. Each job imports the code under test itself, after the
fork, so a liar or mutant is patched into fresh modules exactly as in a
plain subprocess, and ``impl``'s C kernel (OpenMP: libgomp cannot be used
in a fork once a parallel region ran) is first loaded in the child. The
zygote's only project modules are the runner's machinery it runs
(``harness``, ``harness.execute.zygote``, ``harness.execute.orphans``, ``harness.execute.pytest_main``)
and the witness side.

The zygote is started with the run's environment (``harness.execute.watch.witness_env``:
PYTHONPATH, PYTHONHASHSEED=0, BLAS thread variables, KVPROOF_*), so what the
interpreter and OpenBLAS read once at start-up (hash seed, sys.path, thread
count) is what a fresh witness process would have read. Bytecode settings
are the exception: the zygote imports the installed libraries with their
own ``__pycache__`` and then takes the run's (see :func:`harness.execute.zygote.preload`); each
child sets them from its job's environment.
A job whose environment differs runs as a plain subprocess.

Threads and fork: the zygote is single-threaded when it forks (it watches the
runner's pipe in its own select loop, not in a watchdog thread). numpy's
OpenBLAS starts its thread pool on import when it may use more than one
thread (``-j 1``: BLAS threads not pinned); OpenBLAS registers a
``pthread_atfork`` handler that shuts the pool down before ``fork()`` and the
child starts its own on first use (checked: OpenBLAS 0.3.31, numpy 2.4,
``tests/harness/execute/test_forkserver.py``).

A job
-----
The runner sends a request (argv, env, cwd, log file) over a unix socket.
The zygote forks a child that becomes a session leader, chdirs, replaces
``os.environ``, sends stdout/stderr to the log file, enables faulthandler
(as PYTHONFAULTHANDLER does), starts the runner watchdog
(:func:`harness.execute.orphans.watch_runner`; the watchdog pipe's read end is
inherited), runs :func:`harness.execute.pytest_main.main` with the argv, and
``os._exit``\\ s with pytest's code. The zygote reports the child's pid at
start and its exit status at its end; the runner sees a :class:`ForkChild`
(``pid``, ``poll()``, ``wait()``, ``returncode``), like a ``Popen``.

Killing, and pid reuse
----------------------
The zygote is the child's parent, so only it knows whether the child's pid
is still the child's: it kills a child (a kill request from the runner: a
timeout or Ctrl-C) only while the child is unreaped, and when a child ends
it kills the child's process group while the child is still a zombie
(``waitid(WNOWAIT)``), then reaps it. The zygote is a child subreaper, so
what a dead child's processes leave behind in other sessions is re-parented
to it; it kills those too. The runner never signals a pid of a fork child
itself, except when the zygote is gone (below).

Warm servers
------------
A ``mutate`` run's mutants start from a second kind of server, one per card
(:meth:`harness.execute.launcher.Launcher.spawn_warm`, :mod:`harness.execute.warm`): the same runner's
end (:class:`ForkServer`, requests, kills, endings), but the process has also
imported the code under test and let pytest collect the card's witnesses, so
it is *not* free of the project as the zygote is; that is its point, and why
each mutant says in its result how it started. Its ``ready`` message carries
what a fork of it cannot reproduce (:class:`WarmFacts`); a job the facts rule
out, or one whose server could not start or was lost, starts from the zygote
as before. The next card's server starts while this card's mutants run; an
idle server of a card whose jobs are done is closed.

Endings
-------
Runner gone (the watchdog pipe or the socket reaches end of file, whatever
killed the runner): the zygote kills every child's tree and exits; each
child's own watchdog kills it as well. The zygote gone mid-run: the runner
says so once, kills the jobs that were running (each is its session's
leader: checked through ``/proc`` before the kill), runs them again and
every later job as plain subprocesses (:class:`harness.execute.launcher.Launcher`,
which picks the fork server for each job).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.execute import orphans
from harness.execute.ingress import tail_text
from harness.execute.zygote import BYTECODE_ENV, SOCKET_ENV, SOCKET_PATH_ENV, TITLE_ROOM

FORKSERVER = "forkserver"
SUBPROCESS = "subprocess"
LAUNCHERS = (FORKSERVER, SUBPROCESS)
LAUNCHER_ENV = "KVPROOF_LAUNCHER"
LOST_CODE = -signal.SIGKILL  # returncode of a child whose zygote died under it (the runner killed it)


# ---------------------------------------------------------------- which launcher


def available() -> bool:
    """True where witness processes can be forked from a zygote (POSIX fork, unix sockets)."""
    return hasattr(os, "fork") and hasattr(socket, "AF_UNIX") and hasattr(os, "waitid")


def choose(value: str | None = None) -> str:
    """The launcher of a run: ``value``, else ``KVPROOF_LAUNCHER``, else the fork server on Linux.

    ``forkserver`` where fork is missing gives ``subprocess``. Raises
    :class:`harness.errors.UsageError` for any other name.
    """
    raw = os.environ.get(LAUNCHER_ENV, "") if value is None else value
    name = raw.strip().lower()
    if name in ("", "auto"):
        return FORKSERVER if available() and sys.platform.startswith("linux") else SUBPROCESS
    if name == SUBPROCESS:
        return SUBPROCESS
    if name == FORKSERVER:
        return FORKSERVER if available() else SUBPROCESS

    source = "launcher" if value is not None else LAUNCHER_ENV
    raise UsageError(
        f"{source}={raw!r} is not a launcher: witness processes start from the fork server "
        f"({FORKSERVER!r}, the default on Linux) or as plain subprocesses ({SUBPROCESS!r}); "
        f"set {LAUNCHER_ENV}={SUBPROCESS} to force plain subprocesses, or unset it"
    )


# ---------------------------------------------------------------- runner side


class Unavailable(Exception):
    """The fork server cannot start this job (it is gone, never started, or fork failed): use a subprocess."""


class ForkChild:
    """A witness process forked by the zygote, as the runner sees it: ``pid``, ``poll()``, ``wait()``, ``returncode``.

    ``lost`` is True when the zygote died while the child ran: the runner
    killed the child, its ``returncode`` is :data:`LOST_CODE` and its result
    means nothing (:func:`harness.execute.watch.execute` runs the job again).
    """

    def __init__(self, server: ForkServer, job_id: int, args: Sequence[str]) -> None:
        self.server, self.id, self.args = server, job_id, list(args)
        self.pid = 0
        self.returncode: int | None = None
        self.lost = False
        self.error = ""
        self._started = threading.Event()
        self._done = threading.Event()

    def poll(self) -> int | None:
        return self.returncode if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def kill_tree(self) -> None:
        """SIGKILL the child, its process group and its descendants.

        Done by the zygote while the pid is the child's.
        """
        self.server.kill(self)

    def _end(self, code: int, lost: bool = False) -> None:
        self.returncode, self.lost = code, lost
        self._started.set()
        self._done.set()

    def __repr__(self) -> str:
        return f"<ForkChild pid={self.pid} returncode={self.returncode}{' lost' if self.lost else ''}>"


def _kill_orphan(pid: int) -> None:
    """SIGKILL what is left of a fork child whose zygote died, if ``pid`` still leads its own session.

    NOTE: nobody reaps for us here (the child was re-parented), so the pid is
    checked first: a fork child leads its session and process group, a pid
    reused by some other process almost never does.
    """
    if pid <= 0:
        return
    try:
        if os.getsid(pid) != pid or os.getpgid(pid) != pid:
            return
    except OSError:
        return
    orphans.kill_tree(pid)


class ForkServer:
    """The runner's end of one zygote: start it, ask it for children, hear how they end.

    One reader thread takes the zygote's messages; any thread may call
    :meth:`spawn` and :meth:`kill`. ``on_lost(why)`` is called once if the
    zygote goes away before :meth:`close`.
    """

    def __init__(
        self,
        python: str,
        env: Mapping[str, str],
        cwd: Path,
        log: Path,
        ready_timeout: float,
        on_lost: Callable[[str], None] | None = None,
        module: str = "harness.execute.zygote",
        argv: Sequence[str] = (),
        via: ForkServer | None = None,
    ) -> None:
        """Start ``python -m module LOG ROOM ARGV...``; or, with ``via`` (a zygote), fork it from there (its
        libraries already imported: a warm server starts in a third of the time), reached over a unix socket
        at ``LOG.sock``. Raises :class:`Unavailable` when it does not start or say it is ready in time."""
        self.env = dict(env)
        self.log = log
        self.on_lost = on_lost
        self.facts = WarmFacts()  # what a warm server said when ready (harness.execute.warm); empty for the zygote
        self.alive = False
        self.why = ""
        self.closing = False
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._children: dict[int, ForkChild] = {}
        self._serial = 0
        self.spawned = 0  # children forked so far
        self._ready = threading.Event()
        self._modules: list[str] | None = None
        self._modules_seen = threading.Condition(self._lock)
        if via is not None:
            self._fork_from(via, module, argv, cwd, log)
        else:
            self._popen(python, module, argv, cwd, log)
        self.alive = True
        self.pid = self.proc.pid
        self.reader = threading.Thread(target=self._read, name="kvproof-forkserver", daemon=True)
        self.reader.start()
        if not self._ready.wait(ready_timeout):
            self.close()
            raise Unavailable(f"the fork server was not ready after {ready_timeout:g} s")
        if not self.alive:
            raise Unavailable(self.why)

    def _fork_from(self, zygote: ForkServer, module: str, argv: Sequence[str], cwd: Path, log: Path) -> None:
        path = log.with_suffix(".sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            listener.listen(1)
            listener.settimeout(30.0)
            env = {**self.env, SOCKET_PATH_ENV: str(path), orphans.WATCHDOG_ENV: "inherited"}  # the zygote's read end
            # NOTE: the zygote child keeps the watchdog pipe for the server's own loop (no watchdog thread: a
            # warm server must be single-threaded when it forks)
            self.proc = zygote.spawn([str(log), "-", *argv], env, cwd, log, entry=module)  # as _popen's argv
            try:
                self.sock, _ = listener.accept()
            except OSError as exc:
                self.proc.kill_tree()
                raise Unavailable(f"the fork server did not connect: {exc}") from None
        except OSError as exc:
            raise Unavailable(f"the fork server could not start: {exc}") from None
        finally:
            listener.close()
            path.unlink(missing_ok=True)

    def _popen(self, python: str, module: str, argv: Sequence[str], cwd: Path, log: Path) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        watchdog = orphans.watchdog_fd()
        zenv = {**self.env, orphans.WATCHDOG_ENV: str(watchdog), SOCKET_ENV: str(theirs.fileno())}
        # the run's bytecode settings are applied after the zygote imported the installed libraries (preload)
        zenv[BYTECODE_ENV] = json.dumps(
            {
                "prefix": zenv.pop("PYTHONPYCACHEPREFIX", None) or None,
                "dont_write": bool(zenv.get("PYTHONDONTWRITEBYTECODE")),
            }
        )
        zenv["PYTHONDONTWRITEBYTECODE"] = "1"  # until then: harness.execute.zygote itself is not cached in the tree
        try:
            with open(log, "wb") as logf:
                # NOTE: the log path is on the command line, so ps (and the orphan tests) see which run the
                # zygote and every child it forks belong to; a session of its own keeps Ctrl-C away from it
                room = "-" * TITLE_ROOM  # overwritten at once: see set_title
                self.proc = subprocess.Popen(
                    [python, "-m", module, str(log), room, *argv],
                    cwd=cwd,
                    env=zenv,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(watchdog, theirs.fileno()),
                )
        except OSError as exc:
            ours.close()
            raise Unavailable(f"the fork server could not start: {exc}") from None
        finally:
            theirs.close()
        self.sock = ours

    # -------------------------------------------------------- requests

    def _send(self, message: Mapping[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        with self._send_lock:
            self.sock.sendall(data)

    def spawn(
        self, args: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path, entry: str | None = None
    ) -> ForkChild:
        """Fork a child that runs :func:`harness.execute.pytest_main.main` with ``args`` (or module ``entry`` as
        ``__main__``, ``python -m entry args`` would); returns once it started.

        Raises :class:`Unavailable` when the zygote is gone or could not fork.
        """
        with self._lock:
            if not self.alive:
                raise Unavailable(self.why or "the fork server is closed")
            self._serial += 1
            child = ForkChild(self, self._serial, args)
            self._children[child.id] = child
        try:
            self._send(
                {
                    "op": "spawn",
                    "id": child.id,
                    "argv": list(args),
                    "env": dict(env),
                    "cwd": str(cwd),
                    "log": str(log),
                    "entry": entry,
                }
            )
        except OSError as exc:
            self._gone(f"the fork server's socket failed: {exc}")
        child._started.wait()
        if child.error:
            raise Unavailable(child.error)
        if child.lost and not child.pid:
            raise Unavailable(self.why)
        return child

    @property
    def busy(self) -> bool:
        """Does a child of this server still run?"""
        with self._lock:
            return bool(self._children)

    def modules(self, timeout: float = 30.0) -> list[str]:
        """The names in the zygote's ``sys.modules`` (what every child starts with); [] if it does not answer."""
        with self._lock:
            self._modules = None
        try:
            self._send({"op": "modules"})
        except OSError:
            return []
        with self._modules_seen:
            self._modules_seen.wait_for(lambda: self._modules is not None or not self.alive, timeout)
            return list(self._modules or [])

    def kill(self, child: ForkChild) -> None:
        """Kill ``child``'s tree: through the zygote (it alone knows the pid is still the child's), else directly."""
        if child._done.is_set():
            return
        with self._lock:
            alive = self.alive
        if alive:
            try:
                self._send({"op": "kill", "id": child.id})
                return
            except OSError as exc:
                self._gone(f"the fork server's socket failed: {exc}")
        # NOTE: _gone already killed every child it knew; this covers a child reported after that
        _kill_orphan(child.pid)

    # -------------------------------------------------------- messages

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    self._dispatch(json.loads(line))
                except ValueError:
                    continue
        self._gone("")

    def _dispatch(self, msg: Mapping[str, Any]) -> None:
        op = msg.get("op")
        if op == "ready":
            self.facts = WarmFacts.of(msg)
            self._ready.set()
            return
        if op == "modules":
            with self._modules_seen:
                self._modules = list(msg.get("names", []))
                self._modules_seen.notify_all()
            return
        with self._lock:
            child = self._children.get(int(msg.get("id", -1)))
            if child is not None and op in ("exit", "failed"):
                self._children.pop(child.id)
        if child is None:
            return
        if op == "started":
            self.spawned += 1
            child.pid = int(msg["pid"])
            child._started.set()
        elif op == "failed":
            child.error = f"the fork server could not fork: {msg.get('error', '?')}"
            child._end(1)
        elif op == "exit":
            child._end(int(msg["code"]))

    def _gone(self, why: str) -> None:
        """The zygote went away (or its socket broke): every child still running is killed and marked lost."""
        with self._lock:
            if not self.alive:
                return
            self.alive = False
            children, self._children = list(self._children.values()), {}
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._kill_proc()
            code = self.proc.wait()
        if not why:
            why = f"the fork server (pid {self.pid}) ended ({orphans.exit_text(code)})"
            tail = _tail(self.log)
            if tail and not self.closing:
                why += f": {tail}"
        self.why = why
        self._ready.set()
        with self._modules_seen:
            self._modules_seen.notify_all()
        for child in children:
            _kill_orphan(child.pid)
            child._end(LOST_CODE, lost=True)
        if not self.closing and self.on_lost is not None:
            self.on_lost(why)

    def _kill_proc(self) -> None:
        if isinstance(self.proc, ForkChild):
            self.proc.kill_tree()  # forked from a zygote: that zygote kills it
        else:
            self.proc.kill()

    def close(self) -> None:
        """End the zygote (it kills any child still running) and wait for it."""
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._kill_proc()
            self.proc.wait()
        if threading.current_thread() is not self.reader:
            self.reader.join(timeout=10)
        self.sock.close()


def _tail(path: Path, lines: int = 5) -> str:
    """The last ``lines`` lines of ``path`` joined (read from its end only: a log may be gigabytes)."""
    return " | ".join(tail_text(path).strip().splitlines()[-lines:])


@dataclass(frozen=True)
class WarmFacts:
    """What a warm server (:mod:`harness.execute.warm`) reported when ready: what a fork of it cannot reproduce.

    ``ran``: path -> traced lines that ran before the fork (imports, collection); ``held``:
    ``path::qualname`` -> what else holds that function (a list, a cell, ...); ``refused``: why no job may
    fork from it ("" when they may).
    """

    ran: Mapping[str, frozenset[int]] = field(default_factory=dict)
    held: Mapping[str, str] = field(default_factory=dict)
    refused: str = ""

    @classmethod
    def of(cls, msg: Mapping[str, Any]) -> WarmFacts:
        ran = {str(p): frozenset(int(n) for n in lines) for p, lines in dict(msg.get("ran") or {}).items()}
        held = {str(k): str(v) for k, v in dict(msg.get("held") or {}).items()}
        return cls(ran, held, str(msg.get("refused") or ""))
