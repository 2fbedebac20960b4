"""Inside a witness process: every file of the project it read, for the verdict's binding.

A verdict depends on more than the files a card names: a helper module a
witness imports from anywhere in the project, a fixture file it opens, a
module imported lazily in a test body, the module a liar imports, the
project's pytest configuration. :class:`ReadLog` learns them from the
process itself. An audit hook (:func:`sys.addaudithook`, which no code can
remove) sees every ``open`` (``open()``, ``Path.read_text``, ``numpy.load``,
``os.open``) and every module body executed (``exec``: its code object's
file, also when the module came from a cached ``.pyc``); at the end,
:meth:`ReadLog.files` adds every module in :data:`sys.modules` whose file is
in the project (one imported before the hook existed: a ``sitecustomize`` or
a pytest plugin module of the project the fork server loaded).

What counts: files under the project root (the working folder the process
started in), and files outside it that are not the system's (``/proc``,
``/sys``, ``/dev``, ``/run``), the temporary folder's or an installed
library's (those are listed by absolute path), read and not written by this process (opened for writing,
removed or renamed: its own outputs), outside ``.git``, ``__pycache__``,
the bytecode prefix and the installed libraries (a virtualenv inside the
project). The runner drops what is bound another way
(:func:`harness.plan.binding.read_files`). A file that was opened but did not
exist is listed too: creating it later changes what the witness does. What
the harness itself opens is not (the liar index reads the source of every
liar module to find one; the harness is not bound, docs/trust.md), except
through its generic witness modules, which a witness calls.

Installed by :func:`harness.execute.pytest_main.main` after the fork (the
fork server's own reads are not a job's); it travels back in pytest's own
account (:attr:`harness.wire.messages.Account.reads`). Imports nothing of the
harness.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import tempfile

_HARNESS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
# the generic witness modules (harness.plan.binding.GENERIC_WITNESSES): what they open, they open for a witness
_FOR_WITNESSES = tuple(os.path.join(_HARNESS, "targets", f) for f in ("claims.py", "judge.py"))
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# system folders whose files are no input of a verdict (the kernel's views, devices, run-time state)
_SYSTEM = ("/proc/", "/sys/", "/dev/", "/run/", "/var/run/")
_REMOVES = frozenset({"os.remove", "os.rename", "os.truncate", "shutil.rmtree", "os.rmdir"})


def _text(path: object) -> str | None:
    """A path argument of an audit event as an absolute path, or None (a file descriptor, anything else)."""
    if isinstance(path, int) or path is None:
        return None
    try:
        value = os.fspath(path)
    except TypeError:
        return None
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    return os.path.abspath(value)


class ReadLog:
    """The project files this process read (see the module docstring). Start it with :meth:`install`."""

    def __init__(self, root: str) -> None:
        self.roots = tuple(dict.fromkeys(os.path.join(os.path.abspath(r), "") for r in (root, os.path.realpath(root))))
        self.read: set[str] = set()
        self.written: set[str] = set()
        paths = sysconfig.get_paths()
        self.stdlib = tuple(os.path.join(paths[k], "") for k in ("stdlib", "platstdlib") if paths.get(k))
        temp = os.path.join(os.path.abspath(tempfile.gettempdir()), "")
        self.unwatched = (*_not_project(), *_SYSTEM, temp, _HARNESS)  # the harness is not bound (docs/trust.md)

    @classmethod
    def install(cls, root: str) -> ReadLog:
        log = cls(root)
        sys.addaudithook(log.hook)
        return log

    def _inside(self, path: str) -> bool:
        return path.startswith(self.roots)

    def _watched(self, path: str) -> bool:
        """In the project, or a file outside it that is not the system's, the temporary folder's or a library's."""
        return path.startswith(self.roots) or not path.startswith(self.unwatched)

    def hook(self, event: str, args: tuple) -> None:
        # NOTE: called for every audit event of the process; it must be cheap and must never raise (an exception
        # here would be raised by the audited operation itself, inside the code under test)
        try:
            if event == "open":
                path = _text(args[0])
                if path is None or not self._watched(path):
                    return
                mode, flags = args[1], args[2] if len(args) > 2 else 0
                writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
                if writes:
                    self.written.add(path)
                elif not self._by_harness():
                    self.read.add(path)
            elif event == "exec":
                path = getattr(args[0], "co_filename", None)
                if isinstance(path, str) and os.path.isabs(path) and self._watched(path):
                    self.read.add(path)
            elif event in _REMOVES:
                for arg in args[:2]:
                    path = _text(arg) if isinstance(arg, (str, bytes, os.PathLike)) else None
                    if path is not None and self._watched(path):
                        self.written.add(path)
        except Exception:  # noqa: BLE001 - see the NOTE
            pass

    def _by_harness(self) -> bool:
        """Did the harness itself open the file (the liar index reading every liar module's source), not code of
        the project or a library? The innermost caller outside the standard library decides."""
        frame = sys._getframe(2)  # NOTE: 0 is this method, 1 the hook
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(self.stdlib) or name.startswith("<frozen"):
                frame = frame.f_back
                continue
            return name.startswith(_HARNESS) and not name.startswith(_FOR_WITNESSES)
        return False

    def files(self) -> list[str]:
        """Every project file read, relative to the root (posix), sorted; see the module docstring."""
        found = set(self.read)
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str) and os.path.isabs(path) and self._inside(os.path.normpath(path)):
                found.add(os.path.normpath(path))
        skip = [d for d in _not_project() if not any(r.startswith(d) for r in self.roots)]
        # NOTE: the import system offers each sys.path entry to zipimport, which tries to open it as an archive
        # (a relative entry such as an editable install's "__editable__...__path_hook__" included): not a read
        entries = {os.path.abspath(e) for e in sys.path if isinstance(e, str)}
        root = self.roots[0]
        out = set()
        for path in found - self.written - entries:
            if any(path.startswith(d) for d in skip):
                continue
            if not self._inside(path):  # outside the project: bound by its absolute path (a file, not a folder)
                if not path.startswith(self.unwatched) and not os.path.isdir(path):
                    out.add(path)
                continue
            rel = os.path.relpath(path, root) if path.startswith(root) else os.path.relpath(path, self.roots[-1])
            parts = rel.split(os.sep)
            if ".git" in parts or "__pycache__" in parts or parts[0] == "..":
                continue
            out.add("/".join(parts))
        return sorted(out)


def _not_project() -> list[str]:
    """Folders that hold no input of the project even when they are inside it: the installed libraries
    (a virtualenv in the project folder) and the bytecode prefix; each ending in a separator."""
    dirs = [*site.getsitepackages(), site.getusersitepackages(), *sysconfig.get_paths().values()]
    dirs += [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.pycache_prefix or ""]
    return [os.path.join(os.path.abspath(d), "") for d in dict.fromkeys(dirs) if d]
