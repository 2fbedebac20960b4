"""``run -j N``: N witness processes at a time, same verdicts and card order as a serial run; Ctrl-C kills all.

Runs on copies of tests/fixtures/project (KVPROOF_ROOT), plus direct calls of
:func:`harness.execute.schedule.run_cards` on its cards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.execute.jobs import RunConfig
from harness.execute.schedule import run_cards
from harness.ledger.history import FILENAME, Ledger
from harness.liars import scan
from harness.plan.timings import Expected, expected_from_entry
from harness.select.cards import load_cards

REPO = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"
BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200"}
    for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR", *BLAS_VARS):
        env.pop(name, None)
    return env


def kvproof(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], cwd=root, env=_env(root), capture_output=True, text=True, timeout=180
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("parallel") / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    return root


def _card_yaml(card_id: str, test: str, timeout: int = 60) -> str:
    return (
        f"id: {card_id}\ntitle: probe {card_id}\nmodule: fakeimpl.text\nregime: C\ntheorem: t\nproof: p\n"
        f"refs: [fakeimpl/text.py::shout]\nwitnesses:\n  - id: probe\n    test: {test}\n"
        f"    timeout: {timeout}\nversion: 1\n"
    )


def test_parallel_run_gives_the_serial_verdicts_in_card_order(project):
    docs, outs = [], []
    for jobs in ("1", "4"):
        proc = kvproof(project, "run", "--cards", "cards-mixed", "-j", jobs, "--json", f"j{jobs}.json")
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
        docs.append(json.loads((project / f"j{jobs}.json").read_text()))
        outs.append(proc.stdout)
    serial, parallel = ([(c["id"], c["verdict"], c["reason"], c["detail"]) for c in d["cards"]] for d in docs)
    assert serial == parallel
    assert [d["header"]["jobs"] for d in docs] == [1, 4]
    for out in outs:  # the terminal table lists the cards in card order too
        rows = [m.group(1) for line in out.splitlines() if (m := re.match(r"│\s*(FX-[A-Z]+)\s", line))]
        assert rows == [c[0] for c in serial], out


def test_more_than_one_job_gives_each_witness_process_one_blas_thread(project, tmp_path):
    cards = tmp_path / "cards"  # outputs never go into the cards folder (harness.outputs)
    cards.mkdir()
    (cards / "probe.yaml").write_text(_card_yaml("FX-PROBE", "witnesses/test_text.py::test_records_blas_threads"))
    seen = {}
    for jobs in ("1", "2"):
        proc = kvproof(project, "run", "--cards", str(cards), "-j", jobs, "--json", str(tmp_path / f"{jobs}.json"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = json.loads((tmp_path / f"{jobs}.json").read_text())
        seen[jobs] = doc["cards"][0]["witnesses"][0]["evidence"]["blas_threads"]
    assert seen == {"1": "unset", "2": "1"}


def test_the_end_of_a_run_shows_time_per_card_slowest_first(project):
    doc = json.loads((project / "j4.json").read_text())
    rows = doc["timing"]["cards"]
    assert [r["total_s"] for r in rows] == sorted((r["total_s"] for r in rows), reverse=True)
    weak = next(r for r in rows if r["id"] == "FX-WEAK")
    assert weak["liar_runs"] == 2 and weak["liars_s"] > 0 and weak["honest_s"] > 0 and weak["startup_s"] > 0
    proc = kvproof(project, "run", "FX-ADD", "-j", "2")
    assert "time per card, slowest first:" in proc.stdout and "slowest witness" in proc.stdout
    assert "FX-ADD" in proc.stdout.split("time per card")[1] and "arith.off_by_one" in proc.stdout


def test_one_job_starts_processes_in_serial_order_and_liars_run_only_after_their_honest_run(project):
    sites, _ = scan(project)
    cards = load_cards(project / "obligations", project, sites).cards
    cfg = RunConfig(root=project)
    for jobs in (1, 3):
        started: list[str] = []
        runs = run_cards(cards, cfg, jobs=jobs, on_start=lambda job, _running, seen=started: seen.append(job.label))
        assert [r.card.id for r in runs] == [c.id for c in cards]
        assert all(r.outcomes.liars and all(lr.witnesses for lr in r.outcomes.liars) for r in runs)
        for c in cards:  # each card's honest run starts before its liars
            assert started.index(c.id) < min(started.index(f"{c.id} under liar {n}") for n in c.liars)
        if jobs == 1:
            assert started == [label for c in cards for label in [c.id] + [f"{c.id} under liar {n}" for n in c.liars]]


def test_longest_expected_chain_starts_first_with_several_jobs(project):
    sites, _ = scan(project)
    cards = load_cards(project / "obligations", project, sites).cards
    last = cards[-1].id
    started: list[str] = []
    run_cards(
        cards,
        RunConfig(root=project),
        jobs=2,
        expected={last: Expected(honest_s=50.0)},
        on_start=lambda job, running: started.append(job.label),
    )
    assert started[0] == last


def test_expected_durations_come_from_the_cards_last_entry():
    import json

    from harness.record.document import CardResult

    doc = json.loads((REPO / "tests" / "fixtures" / "report-data" / "mixed-verdicts.json").read_text())
    entry = {
        **doc["cards"][0],
        "duration_s": 10.0,
        "honest_s": 7.0,
        "liars": [
            {
                "name": "a",
                "caught": True,
                "caught_by": ["w"],
                "status": "caught",
                "why": "",
                "duration_s": 3.0,
                "witnesses": [],
            },
            {
                "name": "b",
                "caught": False,
                "caught_by": [],
                "status": "not_run",
                "why": "",
                "duration_s": 0.0,
                "witnesses": [],
            },
        ],
    }
    exp = expected_from_entry(CardResult.from_json(entry))
    assert exp.honest_s == pytest.approx(7.0) and exp.liar("a") == 3.0 and exp.liar("b") == 1.0
    assert expected_from_entry(None) == Expected()


def _children_of(project: Path) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "harness.execute.pytest_main" in line and str(project) in line]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_kills_every_witness_process_and_records_nothing(tmp_path):
    root = tmp_path / "p"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    cards = tmp_path / "sleepy"
    cards.mkdir()
    for i in (1, 2, 3):
        (cards / f"s{i}.yaml").write_text(_card_yaml(f"FX-SLEEP{i}", "witnesses/test_text.py::test_sleeps"))
    # NOTE: a shell that starts CI in the background hands SIGINT down as ignored, and
    # Python then installs no KeyboardInterrupt handler; restore the default for the child.
    proc = subprocess.Popen(
        [sys.executable, str(ENTRY), "run", "--cards", str(cards), "-j", "2"],
        cwd=root,
        env=_env(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 30
        while len(_children_of(root)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_children_of(root)) == 2, "two witness processes should be running"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    time.sleep(0.2)
    assert _children_of(root) == []
    reports = root / "reports"
    # the ledger is opened (so created) before any witness runs; it must hold no run
    assert (
        not reports.exists()
        or [p.name for p in reports.iterdir() if not p.name.startswith(".") and p.name != FILENAME] == []
    )
    if (reports / FILENAME).exists():
        with Ledger(reports / FILENAME, create=False) as ledger:
            assert ledger.run_count() == 0
