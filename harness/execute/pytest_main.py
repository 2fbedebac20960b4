"""Entry point of a witness subprocess: ``python -m harness.execute.pytest_main [pytest args]``.

First thing, the watchdog (:func:`harness.execute.orphans.watch_runner`): when the
runner that started this process dies, however it died, this process and
everything it started are killed, so no witness outlives its runner; and
when pytest is done, whatever the witnesses started and left running is
killed too.

The fork server (:mod:`harness.execute.forkserver`) runs the same two steps in each
child it forks: :func:`preload` once in the server, :func:`main` per job.

pytest's own account: :func:`main` registers :class:`AccountKeeper`, which
sees each test body from the outermost ``pytest_runtest_call`` wrapper and
refuses hooks that project code implements on the run-test protocol (a
conftest hookwrapper on ``pytest_runtest_makereport`` can rewrite a failure
as a pass). After ``pytest.main`` returns it writes a
:class:`harness.wire.messages.Account` where :data:`harness.wire.messages.ACCOUNT_ENV`
said (the variable is removed before pytest starts); the runner
cross-checks it against the plugin's events. docs/trust.md says what this
does and does not stop.

NOTE: imports heavy libraries *before* pytest installs its assertion-rewriting
import hook; under the hook every import is inspected and Hypothesis alone
takes about three times as long to import (0.6 s instead of 0.2 s), which is
paid once per card and per liar.
"""

from __future__ import annotations

import inspect
import os
import site
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.errors import NO_SPACE_EXIT, no_space_in
from harness.execute.orphans import kill_descendants, watch_runner
from harness.execute.reads import ReadLog
from harness.wire.messages import ACCOUNT_ENV, CALL_FAILED, CALL_PASSED, CALL_SKIPPED, Account

HARNESS_DIR = Path(__file__).resolve().parents[1]  # the harness package: its own hooks are not project code

# Hooks that decide or carry a test's outcome. Project code (a conftest, a plugin module in the project)
# implementing one could rewrite what pytest reports, so kvproof refuses the run instead.
GUARDED_HOOKS = (
    "pytest_runtestloop",
    "pytest_runtest_protocol",
    "pytest_runtest_setup",
    "pytest_runtest_call",
    "pytest_runtest_teardown",
    "pytest_pyfunc_call",
    "pytest_runtest_makereport",
    "pytest_runtest_logreport",
    "pytest_runtest_logstart",
    "pytest_runtest_logfinish",
    "pytest_report_teststatus",
    "pytest_collectreport",
    "pytest_sessionfinish",
)


def preload() -> None:
    """Import the heavy third-party libraries every witness process uses, before pytest's import hook exists."""
    import hypothesis  # noqa: F401

    try:
        import numpy  # noqa: F401
    except ImportError:  # the harness itself does not need numpy
        pass


def _library_dirs() -> list[Path]:
    dirs = [*site.getsitepackages(), site.getusersitepackages(), *sysconfig.get_paths().values()]
    return [Path(d).resolve() for d in dirs if d]


def _classify(exc: BaseException) -> str:
    if isinstance(exc, pytest.skip.Exception | pytest.xfail.Exception):
        return CALL_SKIPPED
    if isinstance(exc, AssertionError | pytest.fail.Exception):
        return CALL_FAILED
    return f"raised {type(exc).__name__}"


class AccountKeeper:
    """pytest's own account of this process (see the module docstring); registered by :func:`run`.

    ``account``: where :meth:`write` puts it (None: nowhere); a process forked from a warm server
    (:mod:`harness.execute.warm`) learns its own after the fork.
    """

    def __init__(self, account: Path | None = None, reads: ReadLog | None = None) -> None:
        self.account = account
        self.reads = reads  # what this process read of the project (None: not recorded, e.g. a warm server)
        self.calls: dict[str, str] = {}
        self.refused: list[str] = []
        self.checked: pytest.Config | None = None  # the config whose hooks project_hooks already judged

    def write(self, code: int) -> None:
        """Write the account with pytest's exit ``code``, if this process has somewhere to write it."""
        if self.account is not None:
            reads = None if self.reads is None else tuple(self.reads.files())
            Account(int(code), dict(self.calls), tuple(self.refused), reads).write(self.account)

    def project_hooks(self, config: pytest.Config) -> list[str]:
        """``file implements hook`` for each guarded hook implemented in the project, not in a library."""
        root, libs, found = Path(config.rootpath).resolve(), _library_dirs(), []
        for name in GUARDED_HOOKS:
            for impl in getattr(config.hook, name).get_hookimpls():
                try:
                    src = Path(inspect.getsourcefile(impl.function) or "").resolve()
                except TypeError:  # a builtin: not project code
                    continue
                if src.is_relative_to(HARNESS_DIR) or any(src.is_relative_to(d) for d in libs):
                    continue
                if src.is_relative_to(root):
                    found.append(f"{src.relative_to(root).as_posix()} implements {name}")
        return found

    def check(self, config: pytest.Config) -> list[str]:
        """:meth:`project_hooks` of ``config``, judged once (a warm server judges before it forks)."""
        if self.checked is not config:
            self.refused = self.project_hooks(config)
            self.checked = config
        return self.refused

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        # NOTE: after collection, so every conftest pytest loads for the selected tests is registered
        return True if self.check(session.config) else None  # a result ends the loop before any test runs

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item):
        try:
            result = yield
        except BaseException as exc:
            self.calls[item.nodeid] = _classify(exc)
            raise
        self.calls[item.nodeid] = CALL_PASSED
        return result


def account_path() -> Path | None:
    """Where this process's account goes: ``KVPROOF_ACCOUNT``, removed from the environment so no witness sees it."""
    value = os.environ.pop(ACCOUNT_ENV, None)
    return Path(value) if value else None


def run(args: Sequence[str], keeper: AccountKeeper, plugins: Sequence[object] = ()) -> int:
    """Run pytest with ``args`` (``keeper`` and ``plugins`` registered), kill whatever the witnesses started
    and left running, write ``keeper``'s account; pytest's exit code."""
    code = pytest.main(list(args), plugins=[keeper, *plugins])
    kill_descendants(os.getpid())  # nothing a witness started outlives it
    keeper.write(int(code))
    return int(code)


def main(args: Sequence[str]) -> int:
    """Run pytest with ``args``, then kill whatever the witnesses started and left running; pytest's exit code.

    Writes pytest's own :class:`~harness.wire.messages.Account` where
    ``KVPROOF_ACCOUNT`` says (removed from the environment first), with every file of the project (the
    working folder) this process read from here on (:mod:`harness.execute.reads`). A write of its own that finds
    the disk full (the event stream, the account) exits :data:`~harness.errors.NO_SPACE_EXIT`: its stderr is
    on that disk too, and the runner names the full disk from the exit code.
    """
    try:
        return run(args, AccountKeeper(account_path(), ReadLog.install(os.getcwd())))
    except Exception as exc:
        if no_space_in(exc):
            return NO_SPACE_EXIT
        raise


if __name__ == "__main__":
    watch_runner()
    preload()
    sys.exit(main(sys.argv[1:]))
