"""A warm server: a card's witnesses imported and collected once, then one forked witness process per mutant.

Why
---
A mutant used to be a fresh witness process (a fork of the run's zygote,
:mod:`harness.execute.zygote`): it imported the code under test and the
card's witness modules, let pytest collect them, applied the mutant and ran
the witnesses. For a card whose witnesses kill a mutant in a tenth of a
second that start-up was most of the time. Here one process per card (in a
``mutate`` run) does everything up to the first test once, and each mutant
is a ``fork()`` of it that applies its mutant and runs its witnesses.

The server
----------
Started by the runner's end (:class:`harness.execute.forkserver.ForkServer`,
``python -m harness.execute.warm LOG ROOM PYTEST-ARGS...``) with the
environment a witness process of the run has. It preloads the libraries as
the zygote does, then runs ``pytest PYTEST-ARGS`` (the card's witnesses, a
plan with ``warm`` set: no mutant, the claimed files traced) through
:func:`harness.execute.pytest_main.run`. When pytest reaches the test loop
(:meth:`WarmServer.pytest_runtestloop`, after collection) it does not run a
test: it says what a fork could not reproduce (:func:`facts`) in its
``ready`` message, freezes what it holds for the garbage collector, and
serves spawn requests with :class:`harness.execute.zygote.Zygote`'s loop (the
same requests, kill semantics and endings as the zygote).

A mutant's process
------------------
A fork of the server, inside its test loop: it becomes the witness process
the request describes (:func:`harness.execute.zygote.enter_child`: session,
environment, log, watchdog), gets pytest's output capture anew, takes its own
plan (events file, timeouts) and applies its mutant
(:meth:`harness.plugin._Recorder.adopt`: the ``from module import f`` copies
made by the modules collection imported are rebound too, as a fresh
process's imports would have bound the mutant), keeps the requested
witnesses in the requested order as the session's items, and returns from
the hook: pytest's own test loop runs them, the session ends as in any
witness process, pytest's account is written where the request's
environment says (:class:`harness.execute.pytest_main.AccountKeeper`), and the
process exits. The runner cannot tell it from a fresh one, except by its speed.

What a fork cannot reproduce, hence "fresh"
-------------------------------------------
A fresh process applies its mutant *before* collection. A fork applies it
after, which is the same only when collection did not depend on the mutated
code. :func:`facts` reports, and the job's
:class:`harness.execute.jobs.WarmSpec` decides from it, per mutant:

- the traced lines that ran before the fork (module-level code, a
  parametrize list or strategy built by calling the claimed code): a mutant
  on one of them starts fresh;
- functions held by reference in something other than a module's namespace
  (a module-level function) or its own class (a method): a parametrize
  list, a default argument, a closure, a Hypothesis strategy. Rebinding
  cannot reach those, so a mutant of such a function starts fresh;
- a server that refused to serve (collection failed, or more than one thread
  runs in it, which ``fork()`` would not copy): every mutant of the card
  starts fresh, with the reason.
"""

from __future__ import annotations

import gc
import inspect
import os
import socket
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.execute import orphans, pytest_main, zygote
from harness.wire import messages

RECORDER = "kvproof-recorder"  # the name harness.plugin registers its recorder under


class Forked(Exception):  # noqa: N818 - not an error: how a fork leaves the server's loop
    """Raised in a fork of the server, out of the serving loop and into the test loop hook."""

    def __init__(self, msg: Mapping[str, Any], loop: zygote.Zygote) -> None:
        super().__init__("forked")
        self.msg, self.loop = msg, loop


def _become(msg: Mapping[str, Any], loop: zygote.Zygote) -> None:
    raise Forked(msg, loop)


def held_elsewhere(root: Path, files: Iterable[str]) -> dict[str, str]:
    """``path::qualname`` -> what holds it, for every function and method defined in ``files`` that is held by
    something a fork cannot rebind: anything but a module's namespace (a module-level function) or its own
    class's (a method)."""
    wanted = {}
    for rel in files:
        path = Path(root) / rel
        for name in {str(path), os.path.abspath(path), str(path.resolve())}:
            wanted[name] = rel
    modules = [m for m in list(sys.modules.values()) if m is not None and hasattr(m, "__dict__")]
    module_dicts = frozenset(id(vars(m)) for m in modules)
    objects: list[object] = []  # what is looked for (kept alive, so the ids below stay theirs)
    named: dict[int, tuple[str, frozenset[int]]] = {}  # id -> (path::qualname, ids of the holders allowed)

    def add(name: str, value: object, allowed: frozenset[int]) -> None:
        objects.append(value)
        named[id(value)] = (name, allowed)

    def walk_class(rel: str, cls: type, module: str) -> None:
        own = frozenset(id(d) for d in gc.get_referents(vars(cls)) if isinstance(d, dict))
        for attr, value in list(vars(cls).items()):
            nested = isinstance(value, type) and value.__qualname__.startswith(cls.__qualname__ + ".")
            if nested and value.__module__ == module:
                walk_class(rel, value, module)
            elif inspect.isfunction(value) or isinstance(value, staticmethod | classmethod | property):
                add(f"{rel}::{cls.__qualname__}.{attr}", value, own)

    for mod in modules:
        rel = wanted.get(getattr(mod, "__file__", None) or "")
        if rel is None:
            continue
        for attr, value in list(vars(mod).items()):
            if isinstance(value, type) and value.__module__ == mod.__name__:
                walk_class(rel, value, mod.__name__)
            elif callable(value) and getattr(value, "__module__", None) == mod.__name__:
                if hasattr(value, "__code__") or hasattr(value, "__wrapped__"):  # a function, functools.cache & co
                    add(f"{rel}::{attr}", value, module_dicts)
    if not objects:
        return {}
    out: dict[str, str] = {}
    here = sys._getframe()
    for holder in gc.get_referrers(*objects):
        if holder is objects or holder is here or inspect.isframe(holder):
            continue
        for ref in gc.get_referents(holder):
            entry = named.get(id(ref))
            if entry is not None and id(holder) not in entry[1]:
                out.setdefault(entry[0], f"a {type(holder).__name__}")
    return out


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def facts(session: pytest.Session, recorder: Any, ran: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """What a fork of this server cannot reproduce (see the module docstring), for the ``ready`` message."""
    refused = ""
    if recorder is None:
        refused = "the warm server has no kvproof plan"
    elif session.testsfailed:
        refused = "collecting the witnesses failed in the warm server"
    elif _threads() > 1:
        refused = f"{_threads()} threads run in the warm server after collection (a fork copies one)"
    held = {} if refused else held_elsewhere(Path(recorder.root), recorder.plan.coverage)
    return {"ran": {p: list(n) for p, n in ran.items()}, "held": held, "refused": refused}


class WarmServer:
    """The pytest plugin that turns the session into a warm server at its test loop (see the module docstring)."""

    def __init__(self, sock: socket.socket, watchdog: int | None, keeper: pytest_main.AccountKeeper) -> None:
        self.sock, self.watchdog, self.keeper = sock, watchdog, keeper
        self.child = False  # True in a fork: its pytest session ends its process

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        recorder = session.config.pluginmanager.get_plugin(RECORDER)
        ran = recorder.end_warmup() if recorder is not None else {}
        # NOTE: a server forked from the zygote inherits its frozen objects, which gc.get_referrers does not
        # search: unfrozen first, or a holder made in the zygote (a library's registry) would go unseen
        gc.unfreeze()
        ready = facts(session, recorder, ran)
        capman = session.config.pluginmanager.get_plugin("capturemanager")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        # NOTE: inspect's module-by-file cache, filled once here instead of in every fork: pytest's report of a
        # failure finds each traceback entry's module through it (a realpath of every module: 0.1 s a fork)
        inspect.getmodule(_become.__code__)
        self.keeper.check(session.config)  # the project hooks kvproof refuses: collection is done, so judge them now
        gc.collect()
        gc.freeze()  # what the server holds is never garbage: forks do not write to the pages they share with it
        try:
            zygote.Zygote(self.sock, self.watchdog, _become, ready).serve()
        except Forked as fork:
            self.child = True
            return self._run(session, recorder, capman, fork)
        return True  # the server itself runs no test

    def _run(self, session: pytest.Session, recorder: Any, capman: Any, fork: Forked) -> None:
        """In a fork: become the requested witness process; returning lets pytest's own loop run its items."""
        msg = fork.msg
        server_out = os.fstat(1)
        if capman is not None:
            capman.stop_global_capturing()  # the server's capture files are shared with it: this fork gets its own
        zygote.enter_child(msg, fork.loop)
        _redirect_copies(server_out)
        if capman is not None and capman.is_globally_capturing():
            capman.start_global_capturing()
            capman.suspend_global_capture()
        self.keeper.account = pytest_main.account_path()
        argv = list(msg["argv"])
        plan = next(a.split("=", 1)[1] for a in argv if a.startswith("--kvproof-plan="))
        tests = [a for a in argv if not a.startswith("-") and ("::" in a or a.endswith(".py"))]
        try:
            recorder.adopt(messages.JobPlan.read(plan))
        except pytest.UsageError:  # the mutant could not be applied: said on the stream; as a fresh process ends
            self.keeper.write(int(pytest.ExitCode.USAGE_ERROR))
            zygote.finish_child(int(pytest.ExitCode.USAGE_ERROR))
        chosen, seen = [], set()
        for test in tests:
            for item in session.items:
                if item.nodeid not in seen and messages.node_matches(test, item.nodeid):
                    seen.add(item.nodeid)
                    chosen.append(item)
        session.items = chosen
        session.testscollected = len(chosen)
        return None


def _redirect_copies(server_out: os.stat_result) -> None:
    """Point every other descriptor that is a copy of the server's log (faulthandler's) at this process's log."""
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd in (0, 1, 2):
            continue
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (server_out.st_dev, server_out.st_ino):
            os.dup2(1, fd)


def serve_main(argv: Sequence[str]) -> int:
    """The warm server's entry point: ``LOG ROOM PYTEST-ARGS...``; the socket and watchdog fds in the environment."""
    path = os.environ.pop(zygote.SOCKET_PATH_ENV, None)
    try:
        if path:  # forked from the run's zygote: the runner listens there
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
        else:
            sock = socket.socket(fileno=int(os.environ.pop(zygote.SOCKET_ENV)))
    except (KeyError, ValueError, OSError):
        print(
            f"harness.execute.warm: neither {zygote.SOCKET_PATH_ENV} nor {zygote.SOCKET_ENV} names a socket: this "
            "module is started by the runner (harness.execute.forkserver), not by hand",
            file=sys.stderr,
        )
        return 2
    watchdog_raw = os.environ.pop(orphans.WATCHDOG_ENV, None)
    watchdog = int(watchdog_raw) if watchdog_raw and watchdog_raw.isdigit() else None
    orphans.become_subreaper()
    zygote.set_title([sys.executable, "-m", "harness.execute.warm", *argv[:1]])
    for problem in zygote.preload():
        print(f"harness.execute.warm: not preloaded: {problem}", file=sys.stderr)
    keeper = pytest_main.AccountKeeper()
    server = WarmServer(sock, watchdog, keeper)
    code = pytest_main.run(list(argv[2:]), keeper, [server])
    if server.child:
        zygote.finish_child(code)  # never returns
    return 0


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
