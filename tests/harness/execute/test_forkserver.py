"""The fork server (harness/execute/forkserver.py): witness processes forked from a zygote behave as fresh subprocesses.

Unit tests drive :func:`harness.execute.watch.execute` with a :class:`harness.execute.launcher.Launcher`
on a copy of tests/fixtures/project (plus a few probe witnesses written into
the copy); end-to-end tests run ``run_obligations.py`` with each launcher.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness.errors import Cancelled, UsageError
from harness.execute import forkserver, orphans
from harness.execute.jobs import Job, RunConfig
from harness.execute.schedule import liar_order, run_cards
from harness.execute.watch import execute, open_launcher, pycache_dir
from harness.liars import scan
from harness.plan.timings import Expected, expected_from_entry
from harness.select.cards import load_cards
from harness.statuses import Outcome

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and forkserver.available()),
    reason="the fork server is for Linux (fork, /proc)",
)

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"
GONE_S = 5

PROBES = textwrap.dedent('''\
    """Probe witnesses written by tests/harness/execute/test_forkserver.py."""
    import json
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)", os.environ.get("FX_ORPHAN_MARK", "fx")]


    def _pids(pids):
        out = Path(os.environ["FX_ORPHAN_PIDS"])
        out.with_suffix(".tmp").write_text("".join(f"{p}\\n" for p in pids))
        out.with_suffix(".tmp").replace(out)


    def test_reports_its_process(evidence):
        evidence.record("cwd", os.getcwd())
        evidence.record("argv", sys.argv[1:])
        evidence.record("hash", hash("kvproof"))
        evidence.record("hash_randomization", sys.flags.hash_randomization)
        evidence.record("probe_var", os.environ.get("FX_PROBE_VAR", "unset"))
        evidence.record("watchdog_env", os.environ.get("KVPROOF_WATCHDOG_FD", "unset"))
        evidence.record("session_leader", os.getsid(0) == os.getpid())
        evidence.record("pycache_prefix", sys.pycache_prefix)
        evidence.record("dont_write_bytecode", sys.dont_write_bytecode)
        evidence.record("impl_loaded_before", "fakeimpl.text" in sys.modules)
        import fakeimpl.text  # noqa: F401


    def test_sleeps_with_a_child():
        child = subprocess.Popen(SLEEPER)
        _pids([os.getpid(), child.pid])
        time.sleep(120)


    def test_crashes_leaving_children():
        same_group = subprocess.Popen(SLEEPER)
        own_session = subprocess.Popen(SLEEPER, start_new_session=True)
        _pids([os.getpid(), same_group.pid, own_session.pid])
        os._exit(3)


    def test_naps():
        time.sleep(float(os.environ.get("FX_NAP_S", "2")))
''')


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    (root / "witnesses" / "test_probes.py").write_text(PROBES)
    cards = root / "cards-probe"
    cards.mkdir()
    for name in ("reports_its_process", "sleeps_with_a_child", "crashes_leaving_children", "naps"):
        card_id = "FX-" + name.split("_")[0].upper()
        (cards / f"{name}.yaml").write_text(
            f"id: {card_id}\ntitle: probe {name}\nmodule: fakeimpl.text\nregime: C\ntheorem: t\nproof: p\n"
            "refs: [fakeimpl/text.py::shout]\nwitnesses:\n"
            f"  - id: probe\n    test: witnesses/test_probes.py::test_{name}\n"
            "    timeout: 100\nversion: 1\n"
        )
    return root


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """The witness processes' environment as these tests want it: marks, no inherited BLAS pins."""
    for name in (
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        forkserver.LAUNCHER_ENV,
        orphans.WATCHDOG_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FX_ORPHAN_MARK", str(tmp_path))
    monkeypatch.setenv("FX_ORPHAN_PIDS", str(tmp_path / "pids.txt"))
    monkeypatch.setenv("FX_PROBE_VAR", "reached")
    return tmp_path


class Harness:
    """A launcher for ``project`` and a way to run one of its cards' witnesses through it."""

    def __init__(self, root: Path, scratch: Path, launcher: str = forkserver.FORKSERVER, **cfg) -> None:
        self.root = root
        self.cfg = RunConfig(root=root, launcher=launcher, **cfg)
        self.scratch = scratch
        scratch.mkdir(parents=True, exist_ok=True)
        self.launcher = open_launcher(self.cfg, scratch)
        self.said: list[str] = []
        if self.launcher is not None:
            self.launcher.say = self.said.append
        self.cards = {c.id: c for c in load_cards(root / "cards-probe", root, scan(root)[0]).cards}
        self.cards.update({c.id: c for c in load_cards(root / "cards-mixed", root, scan(root)[0]).cards})
        self.n = 0

    def job(self, card_id: str, liar: str | None = None, timeout: float | None = None) -> Job:
        card = self.cards[card_id]
        timeouts = {w.test: timeout for w in card.all_witnesses} if timeout else None
        return Job(card, card.all_witnesses if liar is None else card.witnesses, liar, timeouts=timeouts)

    def execute(self, job: Job, cancel: threading.Event | None = None):
        self.n += 1
        return execute(job, self.cfg, self.scratch / f"job-{self.n}", cancel, self.launcher)

    def close(self) -> None:
        if self.launcher is not None:
            self.launcher.close()


@pytest.fixture
def fs(project, clean_env):
    h = Harness(project, clean_env / "scratch")
    yield h
    h.close()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def _wait_gone(pids) -> list[int]:
    deadline = time.monotonic() + GONE_S
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _wait_for(
    path: Path, timeout: float = 60, runner: subprocess.Popen | None = None, log: Path | None = None
) -> list[int]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert runner is None or runner.poll() is None, log.read_text() if log else runner.returncode
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return [int(x) for x in path.read_text().split()]


def _evidence(res, name: str = "test_reports_its_process") -> dict:
    (node,) = [r for nid, r in res.results.items() if nid.endswith(name)]
    assert node.outcome == Outcome.PASSED, node
    return node.evidence


def _outcomes(res) -> dict[str, str]:
    return {nid: str(r.outcome) for nid, r in res.results.items()}


# ---------------------------------------------------------------- choosing a launcher


def test_choose_defaults_to_the_fork_server_on_linux_and_takes_the_environment(monkeypatch):
    monkeypatch.delenv(forkserver.LAUNCHER_ENV, raising=False)
    assert forkserver.choose() == "forkserver"
    monkeypatch.setenv(forkserver.LAUNCHER_ENV, "subprocess")
    assert forkserver.choose() == "subprocess"
    assert forkserver.choose("forkserver") == "forkserver"  # an explicit value wins over the environment
    monkeypatch.setattr(forkserver, "available", lambda: False)
    assert forkserver.choose("forkserver") == "subprocess"  # no fork: subprocess


def test_a_bogus_launcher_is_a_usage_error_naming_the_choices(monkeypatch, tmp_path):
    monkeypatch.setenv(forkserver.LAUNCHER_ENV, "bogus")
    with pytest.raises(UsageError, match="KVPROOF_LAUNCHER='bogus' is not a launcher.*'subprocess'"):
        forkserver.choose()
    with pytest.raises(UsageError, match="launcher='fork'"):
        RunConfig(root=tmp_path, launcher="fork")


def test_the_cli_refuses_a_bogus_launcher_in_one_paragraph(project):
    env = {**os.environ, "KVPROOF_ROOT": str(project), forkserver.LAUNCHER_ENV: "bogus"}
    proc = subprocess.run(
        [sys.executable, str(ENTRY), "run", "--cards", "cards-probe", "FX-NAPS"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "KVPROOF_LAUNCHER='bogus' is not a launcher" in proc.stderr and "subprocess" in proc.stderr
    assert not (project / "reports").exists() or not list((project / "reports").glob("20*"))


# ---------------------------------------------------------------- the zygote


def test_the_zygote_holds_libraries_but_nothing_of_the_project(fs):
    fs.execute(fs.job("FX-NAPS", timeout=30))  # the zygote starts with the first job
    names = fs.launcher.server.modules()
    assert {"pytest", "_pytest.python", "hypothesis", "numpy", "_hypothesis_pytestplugin"} <= set(names)
    judged = [
        n for n in names if n.split(".")[0] in ("impl", "witnesses", "fakeimpl", "conftest") or n.startswith("test_")
    ]
    assert judged == []
    # of the harness: the zygote's own machinery and the witness side (the plugin and the wire), nothing else
    harness = {n for n in names if n.startswith("harness")}
    machinery = {"harness", "harness.execute", "harness.execute.orphans"}  # the zygote itself runs as __main__
    witness_side = {
        "harness.execute.pytest_main",
        "harness.execute.reads",  # the entry point's read log (installed after the fork, per job)
        "harness.plugin",
        "harness.wire",
        "harness.wire.evidence",
        "harness.wire.messages",
        "harness.wire.safetext",  # the plugin clips a node's evidence before it writes it
        "harness.statuses",
    }
    assert harness == machinery | witness_side | {"harness.errors"}


def test_the_zygote_is_single_threaded_when_it_forks_even_with_blas_threads_free(fs):
    assert fs.cfg.blas_threads is None  # OpenBLAS starts its pool on import; its atfork handler stops it
    res = fs.execute(fs.job("FX-NAPS", timeout=30))
    assert res.exit_code == 0
    assert fs.launcher.server.spawned == 1
    tasks = os.listdir(f"/proc/{fs.launcher.server.pid}/task")
    assert len(tasks) == 1


def test_env_cwd_argv_and_hash_seed_reach_the_child_as_in_a_subprocess(project, clean_env):
    seen = {}
    for launcher in ("forkserver", "subprocess"):
        h = Harness(project, clean_env / launcher, launcher)
        try:
            res = h.execute(h.job("FX-REPORTS"))
            forked = h.launcher.server.spawned if h.launcher else 0
        finally:
            h.close()
        assert res.exit_code == 0, res.output_tail
        seen[launcher] = ev = _evidence(res)
        assert ev["cwd"] == str(project) and ev["probe_var"] == "reached"
        assert ev["watchdog_env"] == "unset"  # taken by the watchdog, as in a subprocess
        assert ev["hash_randomization"] == 0 and ev["session_leader"] is True
        assert "1 passed" in (h.scratch / "job-1" / "pytest.log").read_text()  # pytest's own output: the log
        assert forked == (launcher == "forkserver")
        assert ev["impl_loaded_before"] is False  # the code under test is imported fresh in each job
        assert ev["pycache_prefix"] == str(pycache_dir(project)) and ev["dont_write_bytecode"] is False
        assert any(a.startswith("--kvproof-plan=") for a in ev["argv"])
        assert ev["argv"][-1].endswith("::test_reports_its_process")
    fork, sub = seen["forkserver"], seen["subprocess"]
    assert fork["hash"] == sub["hash"]  # PYTHONHASHSEED=0 in both
    plan = next(i for i, a in enumerate(fork["argv"]) if a.startswith("--kvproof-plan="))
    assert fork["argv"][:plan] + fork["argv"][plan + 1 :] == sub["argv"][:plan] + sub["argv"][plan + 1 :]


def test_the_zygote_reads_installed_libraries_bytecode_where_pip_put_it(project, clean_env):
    """With the run's PYTHONPYCACHEPREFIX, Python reads .pyc files only under the prefix: the zygote imports
    numpy, Hypothesis and pytest with the prefix off (their own __pycache__, written by pip), so a fresh
    checkout's first run does not compile them into an empty prefix; the project's modules still go there."""
    import numpy

    site = Path(numpy.__file__).resolve().parent
    if not (site / "__pycache__").is_dir():
        pytest.skip(f"{site} has no __pycache__ (installed without bytecode): nothing to read there")
    h = Harness(project, clean_env / "pyc", "forkserver")
    try:
        res = h.execute(h.job("FX-REPORTS"))
    finally:
        h.close()
    assert res.exit_code == 0, res.output_tail
    prefix = pycache_dir(project)
    compiled = [p for p in prefix.rglob("*.pyc")]
    assert compiled, "the project's own modules keep their bytecode under the prefix"
    third_party = [p for p in compiled if any(part in ("numpy", "hypothesis", "_pytest") for part in p.parts)]
    assert third_party == [], f"compiled into the prefix: {third_party[:5]}"


def test_a_job_gives_the_same_node_results_and_exit_code_through_either_launcher(project, clean_env):
    results = {}
    for launcher in ("forkserver", "subprocess"):
        h = Harness(project, clean_env / launcher, launcher)
        try:
            results[launcher] = [
                (_outcomes(r), r.exit_code, r.liar_error, r.stopped)
                for r in (
                    h.execute(h.job("FX-ADD")),
                    h.execute(h.job("FX-ADD", liar="arith.off_by_one")),
                    h.execute(h.job("FX-FALSIFIED")),
                    h.execute(h.job("FX-CRASH")),
                    h.execute(h.job("FX-RAISES")),
                    h.execute(h.job("FX-HANG")),
                )
            ]
        finally:
            h.close()
    assert results["forkserver"] == results["subprocess"]
    assert [r[1] for r in results["forkserver"]] == [0, 1, 1, 3, 1, -signal.SIGKILL]


def test_bytecode_goes_under_the_cache_folder_never_into_the_source_tree(fs):
    res = fs.execute(fs.job("FX-ADD"))
    assert res.exit_code == 0
    cached = [p.name for p in pycache_dir(fs.root).rglob("*.pyc")]
    assert any(name.startswith("test_arith") for name in cached)  # pytest's rewritten witness module
    assert any(name.startswith("arith.") for name in cached)  # the code under test
    assert list(fs.root.rglob("__pycache__")) == []


# ---------------------------------------------------------------- killing


def test_a_timeout_kills_the_child_and_its_descendants(fs, clean_env):
    res = fs.execute(fs.job("FX-SLEEPS", timeout=1.5))
    node = next(iter(res.results.values()))
    assert node.outcome == Outcome.ERROR and node.message.startswith("timeout")
    assert "test_sleeps_with_a_child" in node.failure  # the stack it hung in, as with a subprocess
    assert _wait_gone(_wait_for(clean_env / "pids.txt")) == []


def test_cancel_kills_the_child_and_its_descendants(fs, clean_env):
    cancel = threading.Event()
    box: dict = {}

    def work():
        try:
            box["res"] = fs.execute(fs.job("FX-SLEEPS"), cancel)
        except BaseException as exc:
            box["exc"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    pids = _wait_for(clean_env / "pids.txt")
    cancel.set()
    thread.join(10)
    assert isinstance(box.get("exc"), Cancelled)
    assert _wait_gone(pids) == []


def test_a_crashed_child_leaves_nothing_behind_even_in_another_session(fs, clean_env):
    res = fs.execute(fs.job("FX-CRASHES"))
    assert res.exit_code == 3
    assert "the interpreter died" in next(iter(res.results.values())).message
    pids = _wait_for(clean_env / "pids.txt")
    assert _wait_gone(pids) == []  # its group killed while it was a zombie; the other session as a stray


def test_runner_death_kills_the_zygote_and_its_children(project, clean_env):
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from harness.select.cards import load_cards
        from harness.liars import scan
        from harness.execute.watch import execute, open_launcher
        from harness.execute.jobs import Job, RunConfig
        cfg = RunConfig(root=Path({str(project)!r}), launcher="forkserver")
        cards = load_cards(cfg.root / "cards-probe", cfg.root, scan(cfg.root)[0]).cards
        card = [c for c in cards if c.id == "FX-SLEEPS"][0]
        scratch = Path({str(clean_env / "runner")!r})
        scratch.mkdir()
        launcher = open_launcher(cfg, scratch)
        execute(Job(card, card.witnesses), cfg, scratch / "job", None, launcher)
    """)
    log = clean_env / "runner.log"
    with open(log, "wb") as logf:
        runner = subprocess.Popen([sys.executable, "-c", script], cwd=project, stdout=logf, stderr=subprocess.STDOUT)
    try:
        pids = _wait_for(clean_env / "pids.txt", runner=runner, log=log)
        zygote = int(Path(f"/proc/{pids[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert "harness.execute.zygote" in Path(f"/proc/{zygote}/cmdline").read_text()
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        assert _wait_gone([zygote, *pids]) == []
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def test_a_killed_zygote_is_replaced_and_the_job_runs_again_from_the_new_one(fs, monkeypatch):
    monkeypatch.setenv("FX_NAP_S", "3")
    fs.close()
    fs.launcher = open_launcher(fs.cfg, fs.scratch)  # FX_NAP_S is in its environment
    fs.launcher.say = fs.said.append
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(res=fs.execute(fs.job("FX-NAPS", timeout=60))))
    thread.start()
    deadline = time.monotonic() + 60
    while not (fs.launcher.server and fs.launcher.server._children) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = next(iter(fs.launcher.server._children.values()))
    zygote = fs.launcher.server.proc
    time.sleep(0.5)
    zygote.send_signal(signal.SIGKILL)
    thread.join(60)
    res = box["res"]
    assert child.lost and _wait_gone([child.pid]) == []
    assert _outcomes(res) == {"witnesses/test_probes.py::test_naps": "passed"} and res.exit_code == 0
    assert len(fs.said) == 1 and "fork server" in fs.said[0] and "starting a new fork server" in fs.said[0]
    assert fs.launcher.server is not None and fs.launcher.server.proc is not zygote  # the rerun: a new zygote
    res = fs.execute(fs.job("FX-NAPS", timeout=60))  # later jobs: forked from the new one, nothing more said
    assert res.exit_code == 0 and len(fs.said) == 1 and fs.launcher.server.alive


def test_a_zygote_that_cannot_start_falls_back_once(project, clean_env):
    h = Harness(project, clean_env / "scratch", python=str(clean_env / "no-such-python"))
    try:
        assert h.launcher.spawn(["-q"], {}, project, clean_env / "x.log") is None
        assert h.launcher.spawn(["-q"], {}, project, clean_env / "x.log") is None
        assert len(h.said) == 1 and "could not start" in h.said[0]
    finally:
        h.close()


# ---------------------------------------------------------------- liar order


def test_a_liar_job_runs_the_witness_that_caught_it_last_time_first(project):
    card = next(c for c in load_cards(project / "cards-mixed", project, scan(project)[0]).cards if c.id == "FX-ADD")
    job = Job(card, card.witnesses, "arith.off_by_one")
    assert len(job.witnesses) > 1
    last = job.witnesses[-1].id
    ordered = liar_order(job, (last,))
    assert [w.id for w in ordered.witnesses] == [last] + [w.id for w in job.witnesses[:-1]]
    assert liar_order(job, ()) == job and liar_order(job, ("no-such-witness",)).witnesses == job.witnesses


def test_expected_caught_by_comes_from_the_last_entry():
    from harness.record.document import CardResult

    doc = json.loads((REPO / "tests" / "fixtures" / "report-data" / "mixed-verdicts.json").read_text())
    entry = {
        **doc["cards"][0],
        "liars": [
            {
                "name": "a",
                "caught": True,
                "caught_by": ["w2"],
                "status": "caught",
                "why": "",
                "duration_s": 3.0,
                "witnesses": [],
            },
            {
                "name": "b",
                "caught": False,
                "caught_by": [],
                "status": "survived",
                "why": "",
                "duration_s": 1.0,
                "witnesses": [],
            },
        ],
    }
    exp = expected_from_entry(CardResult.from_json(entry))
    assert exp.caught_by == {"a": ("w2",)} and Expected().caught_by == {}


def test_run_cards_orders_liar_witnesses_and_keeps_the_verdict(project, clean_env):
    card = next(c for c in load_cards(project / "cards-mixed", project, scan(project)[0]).cards if c.id == "FX-ADD")
    cfg = RunConfig(root=project)
    last = card.witnesses[-1].id
    (plain,) = run_cards([card], cfg)
    (ordered,) = run_cards([card], cfg, expected={card.id: Expected(caught_by={n: (last,) for n in card.liars})})
    assert [r.name for r in plain.outcomes.liars] == [r.name for r in ordered.outcomes.liars]
    for a, b in zip(plain.outcomes.liars, ordered.outcomes.liars, strict=True):
        caught = [any(o.status in (Outcome.FAILED, Outcome.ERROR) for o in x.witnesses) for x in (a, b)]
        assert caught[0] == caught[1]


# ---------------------------------------------------------------- end to end


def test_the_run_document_names_the_launcher_and_verdicts_do_not_depend_on_it(project, clean_env):
    docs = {}
    for launcher in ("forkserver", "subprocess"):
        env = {**os.environ, "KVPROOF_ROOT": str(project), "COLUMNS": "200", forkserver.LAUNCHER_ENV: launcher}
        out = clean_env / f"{launcher}.json"
        proc = subprocess.run(
            [sys.executable, str(ENTRY), "run", "--cards", "cards-mixed", "-j", "2", "--json", str(out)],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
        assert "fork server" not in proc.stderr  # no fallback
        docs[launcher] = json.loads(out.read_text())
    assert {k: d["header"]["launcher"] for k, d in docs.items()} == {
        "forkserver": "forkserver",
        "subprocess": "subprocess",
    }

    def verdicts(doc):
        return [
            (
                c["id"],
                c["verdict"],
                c["reason"],
                c["detail"],
                [(w["id"], w["status"]) for w in c["witnesses"] + c["controls"]],
                [(x["name"], x["status"]) for x in c["liars"]],
            )
            for c in doc["cards"]
        ]

    assert verdicts(docs["forkserver"]) == verdicts(docs["subprocess"])
    report = sorted((project / "reports").glob("20*/verdicts.md"))[-1].read_text()
    assert "witness processes: subprocess" in report
