"""Process helpers: no witness process outlives its runner, and no temp folder outlives a dead one.

Watchdog pipe
-------------
The runner makes one pipe (:func:`watchdog_fd`). It alone holds the write end
(non-inheritable, and closed in any child forked without exec); every witness
process gets the read end (``pass_fds``) with its number in
``KVPROOF_WATCHDOG_FD``, and :func:`watch_runner` starts a daemon thread there
that blocks reading it. The runner never writes, so the read returns only at
end of file: when the last write end is closed, that is when the runner has
exited, however it died (SIGKILL included). The thread then kills the witness
and everything it started (:func:`kill_tree`).

Why not ``PR_SET_PDEATHSIG``: it fires when the *thread* that forked the child
exits, not the process, and :mod:`harness.execute.schedule` starts witness processes
from worker threads that end after each job; it is also Linux-only. The pipe
has neither problem.

Killing a tree
--------------
A witness runs as the leader of its own session and process group, so one
``killpg`` reaches everything it started, except what started a session of
its own. On Linux a witness also makes itself a child subreaper (orphaned
descendants are re-parented to it, not to init), and :func:`kill_tree` kills
every descendant found through ``/proc`` before the group.

Owned temp folders
------------------
:func:`owned_tempdir` names a folder ``<prefix><pid>-<random>`` in the system
temp folder (``TMPDIR``); :func:`sweep_owned` removes those whose pid is no
longer alive, i.e. left by a runner that was killed before it could clean up.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from harness.errors import EXHAUSTED, NO_SPACE, NO_SPACE_EXIT, no_space

WATCHDOG_ENV = "KVPROOF_WATCHDOG_FD"
RUN_PREFIX = "kvproof-run-"

_lock = threading.Lock()
_pipe: tuple[int, int, int] | None = None  # (owner pid, read fd, write fd)


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (ours or not).

    Used to tell a live writer's temp folder from a dead one's.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def exit_text(code: int | None) -> str:
    """A process's exit status in words: "exit code 1", "killed by SIGKILL", "still running"."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# a dead process's output names what ran out by the errno's own text (os.strerror), or by Python's MemoryError
_EXHAUSTED_TEXT = (
    *((os.strerror(code), why) for code, why in EXHAUSTED.items()),
    ("MemoryError", EXHAUSTED[errno.ENOMEM]),
)
FULL_BELOW = 1 << 20  # bytes: a file system with less than this free is full for a witness process
_NO_SPACE_TEXT = tuple(os.strerror(code) for code in NO_SPACE)
# an OSError's own line names the file: "[Errno 28] No space left on device: '/tmp/x/fill.bin'"
_NO_SPACE_FILE = re.compile("(?:" + "|".join(map(re.escape, _NO_SPACE_TEXT)) + r"): '([^'\n]+)'")


def exhausted(output: str, folders: Sequence[Path], code: int | None = None) -> str:
    """What ran out when a process died, in words ("" when nothing says so).

    A witness that fills the disk often cannot even say so: its event stream and its stderr live on the disk it
    filled. So the file systems of ``folders`` (the job's folder, the temporary folder) are checked for free
    space too, besides the errors its output names. A full disk is named with its fix (:func:`no_space`): the
    file the output says a write failed on, else the full folder, else the temp folder.
    """
    found = [why for text, why in _EXHAUSTED_TEXT if text in output and text not in _NO_SPACE_TEXT]
    if code is not None and code == -signal.SIGXFSZ:
        found.append(EXHAUSTED[errno.EFBIG])
    devices: set[int] = set()
    full: list[tuple[Path, int]] = []
    for folder in folders:
        try:
            device, free = os.stat(folder).st_dev, shutil.disk_usage(folder).free
        except OSError:
            continue
        if device in devices:  # one file system, named once
            continue
        devices.add(device)
        if free < FULL_BELOW:
            full.append((folder, free))
    named = _NO_SPACE_FILE.search(output)
    said = code == NO_SPACE_EXIT  # the witness process's own write found the disk full (harness.execute.pytest_main)
    if said or named or full or any(text in output for text in _NO_SPACE_TEXT):
        where = named.group(1) if named else (full[0][0] if full else None)
        left = f" ({full[0][1] // 1024} KiB free)" if full else ""
        found.insert(0, no_space(where) + left)
    return "; ".join(dict.fromkeys(found))


# ---------------------------------------------------------------- watchdog pipe (runner side)


def watchdog_fd() -> int:
    """The read end of this process's watchdog pipe (made on first use); pass it to a child with ``pass_fds``."""
    global _pipe
    with _lock:
        if _pipe is None or _pipe[0] != os.getpid():
            r, w = os.pipe()  # both non-inheritable: a child gets the read end only through pass_fds
            _pipe = (os.getpid(), r, w)
        return _pipe[1]


def _forget_pipe_in_child() -> None:
    # NOTE: a child forked without exec (multiprocessing, os.fork) would keep the write end open and so
    # keep the runner's witnesses alive after the runner died; it closes that copy and makes its own pipe.
    # The read end stays open: a subprocess preexec_fn also runs this hook, before pass_fds are handed on.
    global _pipe, _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    if _pipe is not None:
        try:
            os.close(_pipe[2])
        except OSError:
            pass
        _pipe = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pipe_in_child)


# ---------------------------------------------------------------- watchdog (witness side)


def watch_runner(environ: dict | None = None) -> threading.Thread | None:
    """In a witness process: die with the runner. Starts the watchdog thread if ``KVPROOF_WATCHDOG_FD`` is set.

    The variable is removed from the environment (it names an fd of this
    process only). Returns the thread, or None when there is nothing to watch.
    """
    environ = os.environ if environ is None else environ
    value = environ.pop(WATCHDOG_ENV, None)
    if not value:
        return None
    try:
        fd = int(value)
        os.fstat(fd)
    except (ValueError, OSError):
        return None
    become_subreaper()
    thread = threading.Thread(target=_watch, args=(fd,), name="kvproof-watchdog", daemon=True)
    thread.start()
    return thread


def _watch(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 1)
        except InterruptedError:
            continue
        except OSError:  # the fd was closed under us: nothing left to watch
            return
        if not data:  # end of file: the runner is gone
            kill_tree(os.getpid())
            os._exit(137)  # only reached when this process does not lead its own group
        # NOTE: the runner never writes; anything read is ignored


def become_subreaper() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_child_subreaper = 36
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# ---------------------------------------------------------------- killing


def descendants(pid: int) -> list[int]:
    """Live (non-zombie) descendants of ``pid``, parents before children; empty where ``/proc`` is missing."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        if len(fields) >= 2 and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def kill_descendants(pid: int) -> None:
    """SIGKILL every live descendant of ``pid`` (Linux; elsewhere nothing is found)."""
    for _ in range(5):  # NOTE: repeated: a descendant may fork between the scan and its kill
        found = descendants(pid)
        for child in found:
            try:
                os.kill(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not found:
            break


def kill_tree(leader: int) -> None:
    """SIGKILL every descendant of ``leader``, then its process group if it leads one (else ``leader`` alone)."""
    kill_descendants(leader)
    try:
        if os.getpgid(leader) == leader:
            os.killpg(leader, signal.SIGKILL)
        else:
            os.kill(leader, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- temp folders


def owned_tempdir(prefix: str = RUN_PREFIX) -> Path:
    """A new folder ``<TMPDIR>/<prefix><pid>-<random>``; :func:`sweep_owned` removes it once this process is gone."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


def sweep_owned(prefix: str = RUN_PREFIX, parent: Path | None = None) -> list[Path]:
    """Remove ``<prefix><pid>-*`` folders (in ``parent``, default the temp folder) whose pid is dead."""
    parent = Path(tempfile.gettempdir()) if parent is None else parent
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    removed = []
    try:
        paths = list(parent.glob(prefix + "*"))
    except OSError:
        return removed
    for path in paths:
        m = pattern.match(path.name)
        if not m or int(m.group(1)) == os.getpid() or pid_alive(int(m.group(1))):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
