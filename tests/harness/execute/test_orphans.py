"""No process outlives its runner, and no scratch folder outlives a dead one (issue 12).

End to end: ``run_obligations.py run`` on a copy of tests/fixtures/project with
the cards of ``cards-slow/``, whose witnesses start three sleepers each (one in
the witness's process group, one in a session of its own, one orphaned by
its parent). Every process a run starts carries the test's temp path on its
command line (the plan path under ``TMPDIR``, or ``FX_ORPHAN_MARK``), so
``/proc`` shows whether any survived.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.errors import HarnessError, UsageError
from harness.execute import orphans
from harness.execute.jobs import RunConfig

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, POSIX signals")

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"
WAIT_S = 60  # for a witness to start, on a loaded machine
GONE_S = 5  # for every process of a killed run to be gone


class Run:
    """A copy of the fixture project with its own TMPDIR; starts runs that mark their processes."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "project"
        shutil.copytree(FIXTURE, self.root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
        self.tmp = base / "tmp"
        self.tmp.mkdir()

    def env(self, pids: Path | None) -> dict[str, str]:
        env = {
            **os.environ,
            "KVPROOF_ROOT": str(self.root),
            "COLUMNS": "200",
            "TMPDIR": str(self.tmp),
            "FX_ORPHAN_MARK": str(self.base),
        }
        for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR", "FX_ORPHAN_PIDS", orphans.WATCHDOG_ENV):
            env.pop(name, None)
        if pids is not None:
            env["FX_ORPHAN_PIDS"] = str(pids)
        return env

    def start(self, card: str, pids: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(ENTRY), "run", "--cards", "cards-slow", card, "-j", "1"],
            cwd=self.root,
            env=self.env(pids),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def run(self, card: str, pids: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ENTRY), "run", "--cards", "cards-slow", card, "-j", "1"],
            cwd=self.root,
            env=self.env(pids),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def folders(self, pid: int | None = None) -> list[Path]:
        return sorted(self.tmp.glob(orphans.RUN_PREFIX + (f"{pid}-*" if pid is not None else "*")))

    def survivors(self) -> list[str]:
        """Live (non-zombie) processes whose command line names this run's folder."""
        mark, found = str(self.base), []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if mark in cmdline and not _zombie(int(name)):
                    found.append(f"{name}: {cmdline}")
            except OSError:
                continue
        return found


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # gone
    return stat[stat.rfind(")") + 2 :].split()[0] in ("Z", "X")


def _alive(pid: int) -> bool:
    return orphans.pid_alive(pid) and not _zombie(pid)


def _wait_for_pids(path: Path, runner: subprocess.Popen) -> list[int]:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert runner.poll() is None, f"the runner exited ({runner.returncode}) before its witness started"
        assert time.monotonic() < deadline, "the witness never started its children"
        time.sleep(0.05)
    return [int(line) for line in path.read_text().split()]


def _wait_until_gone(run: Run, pids: list[int]) -> None:
    deadline = time.monotonic() + GONE_S
    while (run.survivors() or any(_alive(p) for p in pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.survivors() == [] and [p for p in pids if _alive(p)] == []


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.fixture
def fx(tmp_path) -> Run:
    run = Run(tmp_path)
    yield run
    for line in run.survivors():  # never leave a sleeper behind, even when a test failed
        try:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        except OSError:
            pass


# ---------------------------------------------------------------- end to end


def test_sigkill_of_the_runner_leaves_no_process_and_the_next_run_sweeps_its_folder(fx):
    runner = fx.start("FX-SLOW", fx.base / "slow.pids")
    try:
        witness, *children = _wait_for_pids(fx.base / "slow.pids", runner)
        # the witness, its three sleepers and (with the default launcher) the run's fork server
        witnesses = [line for line in fx.survivors() if "harness.execute.zygote" not in line]
        assert len(witnesses) == 4 and all(_alive(p) for p in [witness, *children])
        assert fx.folders(runner.pid), "the run's scratch folder is named after its pid"
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        _wait_until_gone(fx, [witness, *children])
    finally:
        _kill(runner)
    stale = fx.folders(runner.pid)
    assert stale, "a SIGKILLed runner cannot remove its folder"

    done = fx.run("FX-LEAVER", fx.base / "leaver.pids")  # its witness leaves three sleepers behind and returns
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert [p for p in stale if p.exists()] == []
    assert fx.folders() == [], "the next run removes the stale folder, and its own"
    left = [int(line) for line in (fx.base / "leaver.pids").read_text().split()]
    _wait_until_gone(fx, left)


def test_a_run_sweeps_dead_runs_folders_but_not_a_live_runs(fx):
    dead = fx.tmp / f"{orphans.RUN_PREFIX}{_dead_pid()}-x1y2z3"
    (dead / "000-FX-OLD" / "honest").mkdir(parents=True)
    runner = fx.start("FX-SLOW", fx.base / "slow.pids")
    try:
        witness, *children = _wait_for_pids(fx.base / "slow.pids", runner)
        live = fx.folders(runner.pid)
        assert live and not dead.exists(), "the live run swept the dead one's folder as it started"

        done = fx.run("FX-LEAVER")  # a second run at the same time, same TMPDIR
        assert done.returncode == 0, done.stdout + done.stderr
        assert fx.folders(runner.pid) == live and all(p.is_dir() for p in live)
        assert runner.poll() is None and all(_alive(p) for p in [witness, *children])
    finally:
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
    _wait_until_gone(fx, [witness, *children])


# ---------------------------------------------------------------- the watchdog, without a runner


def _script(tmp_path: Path, body: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop(orphans.WATCHDOG_ENV, None)
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(body), str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True
    )


def test_a_child_started_from_a_thread_that_ended_lives_while_its_runner_does(tmp_path):
    # NOTE: PR_SET_PDEATHSIG would kill this child when the thread that started it ends; the pipe must not
    runner = _script(
        tmp_path,
        """
        import os, subprocess, sys, threading, time
        from harness.execute import orphans
        def start():
            fd = orphans.watchdog_fd()
            code = "from harness.execute.orphans import watch_runner; watch_runner(); import time; time.sleep(60)"
            p = subprocess.Popen([sys.executable, "-c", code, sys.argv[1]], pass_fds=(fd,),
                                 env={**os.environ, orphans.WATCHDOG_ENV: str(fd)}, start_new_session=True)
            print(p.pid, flush=True)
        t = threading.Thread(target=start)
        t.start()
        t.join()
        time.sleep(60)
    """,
    )
    try:
        child = int(runner.stdout.readline())
        time.sleep(1.0)
        assert _alive(child), "the child died although its runner is alive"
        runner.kill()
        runner.wait()
        deadline = time.monotonic() + GONE_S
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        _kill(runner)


def test_a_process_forked_from_the_runner_does_not_keep_the_pipe_open(tmp_path):
    proc = _script(
        tmp_path,
        """
        import os
        from harness.execute import orphans
        fd = orphans.watchdog_fd()
        write = orphans._pipe[2]
        pid = os.fork()
        if pid == 0:
            try:
                os.fstat(write)
                os._exit(1)  # the write end is still open in the child
            except OSError:
                pass
            os._exit(0 if orphans.watchdog_fd() != fd or orphans._pipe[2] != write else 2)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """,
    )
    out, _ = proc.communicate(timeout=30)
    assert out.strip() == "0"


def test_kill_tree_reaches_children_in_other_sessions(tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    code = (
        "import subprocess, sys, time; "
        f"a = subprocess.Popen({sleeper!r}); b = subprocess.Popen({sleeper!r}, start_new_session=True); "
        "print(a.pid, b.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        kids = [int(p) for p in parent.stdout.readline().split()]
        assert set(kids) <= set(orphans.descendants(parent.pid))
        orphans.kill_tree(parent.pid)
        parent.wait(timeout=5)
        deadline = time.monotonic() + GONE_S
        while any(_alive(p) for p in kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in kids)
    finally:
        _kill(parent)


# ---------------------------------------------------------------- sweeping


def test_sweep_removes_only_folders_of_dead_pids(tmp_path):
    dead, live = _dead_pid(), os.getppid()
    names = [
        f"kvproof-run-{dead}-abc",
        f"kvproof-run-{live}-abc",
        f"kvproof-run-{os.getpid()}-abc",
        "kvproof-run-abcdefgh",
        "kvproof-other-1-abc",
        f"kvproof-run-{dead}x-abc",
    ]
    for name in names:
        (tmp_path / name).mkdir()
    (tmp_path / f"kvproof-run-{dead}-file").write_text("not a folder")
    removed = orphans.sweep_owned(parent=tmp_path)
    assert [p.name for p in removed] == [f"kvproof-run-{dead}-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:] + [f"kvproof-run-{dead}-file"])


def test_owned_tempdir_is_named_after_this_process(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    folder = orphans.owned_tempdir()
    assert folder.parent == tmp_path and folder.name.startswith(f"kvproof-run-{os.getpid()}-")
    assert orphans.sweep_owned() == [] and folder.is_dir()


# ---------------------------------------------------------------- timeouts


@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf, 1e12, True, "60", None])
@pytest.mark.parametrize("field", ["default_timeout", "startup_timeout"])
def test_run_config_refuses_a_timeout_that_is_not_a_positive_finite_number(tmp_path, field, value):
    with pytest.raises(UsageError, match=f"{field}=") as info:
        RunConfig(root=tmp_path, **{field: value})
    assert isinstance(info.value, HarnessError) and "> 0" in str(info.value)


@pytest.mark.parametrize("value", [0.01, 1, 60.0, 1e6])
def test_run_config_takes_a_positive_finite_timeout(tmp_path, value):
    assert RunConfig(root=tmp_path, default_timeout=value, startup_timeout=value).default_timeout == value
