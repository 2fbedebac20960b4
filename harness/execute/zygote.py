"""The zygote's end of the fork server: preload once, then fork one witness process per request.

Started by the runner's end (:mod:`harness.execute.forkserver`, whose
docstring is the design document) as ``python -m harness.execute.zygote``
with a unix socket and the watchdog pipe. It imports third-party libraries
and the witness side (:data:`WITNESS_SIDE_MODULES`), never the code under
test, and forks a child per job that runs :func:`harness.execute.pytest_main.main`.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.execute import orphans
from harness.execute import pytest_main as _pytest_main

SOCKET_ENV = "KVPROOF_FORKSERVER_FD"
SOCKET_PATH_ENV = "KVPROOF_FORKSERVER_SOCKET"  # a server forked from the zygote connects here instead (a path)
BYTECODE_ENV = "KVPROOF_ZYGOTE_BYTECODE"  # the run's PYTHONPYCACHEPREFIX / PYTHONDONTWRITEBYTECODE, held back (preload)
TITLE_ROOM = 8192  # bytes of command line the zygote starts with, so each child can show its own (ps, /proc)


def _installed(module: str) -> bool:
    """True when ``module``'s top-level package lives in this interpreter's site-packages or standard library
    (an installed library, not the project's own code, which an editable install leaves in the checkout).
    Finding imports nothing."""
    import importlib.util
    import site
    import sysconfig

    libs = {
        Path(p).resolve()
        for p in (
            *site.getsitepackages(),
            site.getusersitepackages(),
            *(sysconfig.get_paths().get(k) for k in ("purelib", "platlib", "stdlib")),
        )
        if p
    }
    try:
        spec = importlib.util.find_spec(module.partition(".")[0])
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    places = ([spec.origin] if spec.origin else []) + list(spec.submodule_search_locations or [])
    return bool(places) and all(any(Path(p).resolve().is_relative_to(lib) for lib in libs) for p in places)


def preload() -> list[str]:
    """Import the third-party libraries a witness process needs (nothing of the project); what failed, as text."""
    import importlib

    problems = []
    # NOTE: bytecode of the installed libraries. Witness processes keep bytecode under the run's
    # PYTHONPYCACHEPREFIX (harness.execute.watch.witness_env), and with a prefix set Python reads .pyc files
    # only there: on a fresh checkout (CI) the zygote compiled numpy, Hypothesis, pytest and much of the standard
    # library from source into an empty prefix, 3-10 s before the first witness ran. Installed packages and the
    # standard library come with their own __pycache__ (pip and the Python install compiled them), so the
    # zygote starts without the run's bytecode settings (Launcher: no prefix, nothing written) and imports
    # the libraries that way; the run's settings (:data:`BYTECODE_ENV`) are applied before the project's
    # modules (the judge, below; the code under test in each job), which never write into the tree.
    prefix, dont_write = sys.pycache_prefix, sys.dont_write_bytecode
    held = os.environ.pop(BYTECODE_ENV, None)
    if held is not None:
        settings = json.loads(held)
        prefix, dont_write = settings["prefix"], settings["dont_write"]
    sys.pycache_prefix = None
    try:
        _pytest_main.preload()  # Hypothesis and numpy, before anything of pytest (see its NOTE)
        import _pytest.config
        import pytest  # noqa: F401

        for name in _pytest.config.default_plugins:
            try:
                importlib.import_module(f"_pytest.{name}")
            except Exception as exc:  # a built-in plugin this pytest does not have: pytest itself will say so
                problems.append(f"_pytest.{name}: {exc}")
        from importlib.metadata import entry_points

        plugins = []
        for ep in entry_points(group="pytest11"):
            if _installed(ep.module):
                try:
                    importlib.import_module(ep.module)
                except Exception as exc:  # a broken plugin fails in the child as it would in a fresh process
                    problems.append(f"{ep.module}: {exc}")
            else:
                plugins.append(ep.module)  # the project's own plugin: imported with the prefix, below
        for name in THIRD_PARTY:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError:  # not this project's dependency
                pass
            except Exception as exc:  # broken: the job that needs it says so
                problems.append(f"{name}: {exc}")
    finally:
        sys.pycache_prefix, sys.dont_write_bytecode = prefix, dont_write
    for name in plugins:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a broken plugin fails in the child as it would in a fresh process
            problems.append(f"{name}: {exc}")
    for name in WITNESS_SIDE_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the child imports it again and reports what is wrong
            problems.append(f"{name}: {exc}")
    return problems


# NOTE: the witness side, not the judge: harness.plugin (which each job loads with -p) and what it imports
# (the wire, the status words, the errors) hold only constants at import and read the environment when
# called. Liars and mutants patch impl, never these; impl, the witnesses and conftest stay out of the zygote.
WITNESS_SIDE_MODULES = ("harness.plugin",)
# Libraries the code under test imports (impl reads the GGUF with gguf, its tokenizer is tokenizers'), and
# modules pytest imports late, preloaded for their bytecode and import time; importing them runs no code of
# the project and starts no thread (tests/harness/execute/test_forkserver.py: the zygote stays single-threaded).
THIRD_PARTY = (
    "yaml",
    "gguf",
    "gguf.quants",
    "tokenizers",
    "hypothesis.stateful",
    "hypothesis.extra.numpy",
    "_pytest._argcomplete",
)


class Zygote:
    """The serving loop: fork a child per ``spawn`` request, report its pid and its end, kill on request.

    ``become(msg, zygote)`` is what a child does: the plain zygote's runs pytest and never returns
    (:func:`_child`); a warm server's (:mod:`harness.execute.warm`) sets the child up and raises, to unwind
    into the pytest session the server is in. ``ready``: more to say in the ``ready`` message.
    """

    def __init__(
        self,
        sock: socket.socket,
        watchdog: int | None,
        become: Callable[[Mapping[str, Any], Zygote], None] | None = None,
        ready: Mapping[str, Any] | None = None,
    ) -> None:
        self.sock, self.watchdog = sock, watchdog
        self.become = become if become is not None else _child
        self.ready = dict(ready or {})
        self.children: dict[int, int] = {}  # pid -> job id, every child forked and not yet reaped
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)

    def send(self, message: Mapping[str, Any]) -> None:
        try:
            self.sock.sendall((json.dumps(message) + "\n").encode())
        except OSError:
            pass  # the runner is gone: the loop sees end of file next

    def serve(self) -> None:
        self.send({**self.ready, "op": "ready", "pid": os.getpid()})
        buf = b""
        watched = [self.sock, self.wake_r] + ([self.watchdog] if self.watchdog is not None else [])
        while True:
            readable, _, _ = select.select(watched, [], [], 1.0)
            if self.wake_r in readable:
                try:
                    while os.read(self.wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            if self.watchdog is not None and self.watchdog in readable:
                try:
                    data = os.read(self.watchdog, 1)
                except OSError:
                    data = b""
                if not data:
                    break  # the runner is gone, however it died
            if self.sock in readable:
                try:
                    data = self.sock.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    break  # the runner closed us (end of run) or died
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self.handle(json.loads(line))
            self.reap()
        for pid in list(self.children):
            orphans.kill_tree(pid)  # NOTE: unreaped, so each pid is still our child's

    def handle(self, msg: Mapping[str, Any]) -> None:
        if msg.get("op") == "spawn":
            self.spawn(msg)
        elif msg.get("op") == "modules":
            self.send({"op": "modules", "names": sorted(sys.modules)})
        elif msg.get("op") == "kill":
            pid = next((p for p, i in self.children.items() if i == msg.get("id")), None)
            if pid is not None:  # NOTE: not reaped yet (only reap() reaps), so the pid is still the child's
                orphans.kill_tree(pid)

    def spawn(self, msg: Mapping[str, Any]) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            self.send({"op": "failed", "id": msg["id"], "error": str(exc)})
            return
        if pid == 0:
            self.become(msg, self)  # never returns (a warm server's raises, out of serve())
        self.children[pid] = msg["id"]
        self.send({"op": "started", "id": msg["id"], "pid": pid})

    def reap(self) -> None:
        ended = False
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
            if info is None:
                break
            pid = info.si_pid
            job = self.children.pop(pid, None)
            if job is not None:
                # NOTE: the child is a zombie and not yet reaped, so its pid (its process group's id) cannot
                # have been reused: this reaches only what it left in its group
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                continue
            if job is not None:
                ended = True
                self.send({"op": "exit", "id": job, "code": os.waitstatus_to_exitcode(status)})
        if ended:
            self.kill_strays()

    def kill_strays(self) -> None:
        """Kill our children that we did not fork: processes a dead child left in other sessions, re-parented to us
        (a subreaper). A live child is a subreaper itself, so what it leaves goes to it, not to us."""
        me = os.getpid()
        for pid in orphans.descendants(me):
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    stat = fh.read().decode("ascii", "replace")
                ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == me and pid not in self.children:
                orphans.kill_tree(pid)


def set_title(argv: Sequence[str]) -> bool:
    """Linux: make this process's command line (``/proc/self/cmdline``, ``ps``) read ``argv``; False if it cannot.

    The bytes are written over the process's original argument area (as the
    setproctitle package does), cut to its size: the zygote starts with
    :data:`TITLE_ROOM` bytes of padding for it. A fork child then shows the
    ``python -m harness.execute.pytest_main ...`` line a subprocess would have had, so
    ``ps`` and the tests that look for witness processes by their command line
    see the same thing with either launcher.
    """
    try:
        import ctypes

        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read()
        fields = stat[stat.rfind(b")") + 2 :].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48 and 49 of stat)
        with open("/proc/self/cmdline", "rb") as fh:
            if len(fh.read()) != end - start:
                return False
    except (OSError, ValueError, IndexError, ImportError):
        return False
    data = b"\0".join(os.fsencode(a) for a in argv)[: end - start - 1]
    ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)
    return True


def enter_child(msg: Mapping[str, Any], zygote: Zygote, watch: bool = True) -> None:
    """In a forked child: become the witness process ``msg`` asks for, up to running pytest.

    Its own session, its command line, default signal handling, none of the zygote's sockets; ``msg``'s
    cwd and environment; stdout and stderr to its log, stdin from /dev/null; faulthandler; the runner's
    watchdog (``watch`` False: its fd is left in the environment for the child's own loop to watch);
    numpy's global generator reseeded.
    """
    os.setsid()
    set_title([sys.executable, "-m", msg.get("entry") or "harness.execute.pytest_main", *msg["argv"]])
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    zygote.sock.close()
    os.close(zygote.wake_r)
    os.close(zygote.wake_w)
    os.chdir(msg["cwd"])
    os.environ.clear()
    os.environ.update(msg["env"])
    if zygote.watchdog is not None and orphans.WATCHDOG_ENV in os.environ:
        os.environ[orphans.WATCHDOG_ENV] = str(zygote.watchdog)  # the inherited read end, same pipe
    fd = os.open(msg["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.pycache_prefix = os.environ.get("PYTHONPYCACHEPREFIX") or None
    if os.environ.get("PYTHONFAULTHANDLER"):
        import faulthandler

        faulthandler.enable()
    if watch:
        orphans.watch_runner()
    if "numpy.random" in sys.modules:
        # NOTE: a fresh process seeds numpy's global generator from the OS; forked ones would share the
        # zygote's state (the random module reseeds itself after fork)
        sys.modules["numpy.random"].seed()
    sys.argv = [_pytest_main.__file__, *msg["argv"]]


def finish_child(code: int) -> None:
    """End a forked child as a fresh interpreter would end: exit handlers, flushed streams, exit ``code``."""
    try:
        import atexit

        atexit._run_exitfuncs()  # as a fresh interpreter's exit would
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF if code >= 0 else 1)


def _child(msg: Mapping[str, Any], zygote: Zygote) -> None:
    """In the forked child: become the witness process ``msg`` asks for, run pytest, ``os._exit``."""
    code = 70
    try:
        entry = msg.get("entry")
        enter_child(msg, zygote, watch=not entry)
        if entry:  # a server of its own (harness.execute.warm), run as `python -m ENTRY ARGV` would run it
            import runpy

            sys.argv = [entry, *msg["argv"]]
            runpy.run_module(entry, run_name="__main__", alter_sys=True)
            code = 0
        else:
            code = _pytest_main.main(msg["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 70
    finally:
        finish_child(code)


def serve_main(argv: Sequence[str]) -> int:
    """The zygote's entry point: take the socket and watchdog fds from the environment, preload, serve."""
    try:
        sock_fd = int(os.environ.pop(SOCKET_ENV))
    except (KeyError, ValueError):
        print(
            f"harness.execute.zygote: {SOCKET_ENV} names no socket: this module is started by the runner "
            "(harness.execute.watch), not by hand",
            file=sys.stderr,
        )
        return 2
    watchdog_raw = os.environ.pop(orphans.WATCHDOG_ENV, None)
    watchdog = int(watchdog_raw) if watchdog_raw and watchdog_raw.isdigit() else None
    orphans.become_subreaper()
    set_title([sys.executable, "-m", "harness.execute.zygote", *argv[:1]])
    sock = socket.socket(fileno=sock_fd)
    for problem in preload():
        print(f"harness.execute.zygote: not preloaded: {problem}", file=sys.stderr)
    # NOTE: what the zygote imported is never garbage: frozen, each child's collections (pytest runs
    # gc.collect several times at exit) skip it, and do not write to the pages it shares with the zygote
    gc.freeze()
    Zygote(sock, watchdog).serve()
    return 0


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
