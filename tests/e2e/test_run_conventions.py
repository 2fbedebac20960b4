"""pytest's everyday conventions for ``run`` (issue 38): ``-x`` / ``--maxfail N``, ``-v`` / ``-q``, ``--watch``.

End to end on a copy of tests/fixtures/project (KVPROOF_ROOT): a folder ``cx`` of four fast cards in card
order FX-ADD (PROVEN), FX-FALSIFIED (FAILED), FX-LOOSE (FAILED), FX-SKIP (UNVERIFIED), and the watch on
obligations/ with cards-extra/fx-shout.yaml added (FX-SHOUT covers fakeimpl/text.py, no other card does).
Plus direct calls of the pieces: the scheduler's stop, the watch's "what changed -> which cards" step and the
command line a run records.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

from harness.commands import recorded_argv
from harness.execute.jobs import RunConfig
from harness.execute.schedule import run_cards
from harness.ledger.history import FILENAME, Ledger
from harness.liars import scan
from harness.plan import watching
from harness.select.cards import load_cards

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"
SCHEMA = json.loads((REPO / "obligations" / "verdicts.schema.json").read_text())
CX = ("01-proven.yaml", "02-falsified.yaml", "03-bound.yaml", "06-skip.yaml")
STOPPED = "not run: the run stopped after"


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200"}
    for name in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR", "GITHUB_ACTIONS"):
        env.pop(name, None)
    return env


def kvproof(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], cwd=root, env=_env(root), capture_output=True, text=True, timeout=180
    )


def _copy(dest: Path) -> Path:
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    (dest / "cx").mkdir()
    for name in CX:
        shutil.copy(dest / "cards-mixed" / name, dest / "cx" / name)
    return dest


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return _copy(tmp_path_factory.mktemp("conventions") / "project")


def _doc(root: Path, name: str) -> dict:
    doc = json.loads((root / name).read_text())
    jsonschema.validate(doc, SCHEMA)
    return doc


def _verdicts(doc: dict) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in doc["cards"]}


def _not_run(doc: dict) -> list[str]:
    return [c["id"] for c in doc["cards"] if c["reason"].startswith(STOPPED)]


# ---------------------------------------------------------------- -x / --maxfail


def test_x_stops_after_the_first_failing_card_and_lists_the_rest_as_not_run(project):
    proc = kvproof(project, "run", "--cards", "cx", "-j", "1", "-x", "--json", "x.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = _doc(project, "x.json")
    assert _verdicts(doc) == {"FX-ADD": "PROVEN", "FX-FALSIFIED": "FAILED", "FX-LOOSE": "ERROR", "FX-SKIP": "ERROR"}
    assert _not_run(doc) == ["FX-LOOSE", "FX-SKIP"]
    loose = next(c for c in doc["cards"] if c["id"] == "FX-LOOSE")
    assert loose["reason"] == "not run: the run stopped after 1 failing card(s) (-x/--maxfail 1)"
    assert doc["header"]["summary"]["gate"] == "FAIL"
    assert "stopped after 1 failing card(s) (-x/--maxfail); 2 card(s) not run: FX-LOOSE, FX-SKIP" in proc.stdout
    assert "ERROR FX-LOOSE" not in proc.stdout  # one line for the cards not run, not a block each
    assert "Traceback" not in proc.stdout + proc.stderr


def test_maxfail_counts_every_verdict_that_fails_the_gate(project):
    proc = kvproof(project, "run", "--cards", "cx", "-j", "1", "--maxfail", "2", "--json", "m2.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = _doc(project, "m2.json")
    assert _verdicts(doc)["FX-LOOSE"] == "FAILED" and _not_run(doc) == ["FX-SKIP"]
    assert "stopped after 2 failing card(s) (-x/--maxfail); 1 card(s) not run: FX-SKIP" in proc.stdout
    # UNVERIFIED fails the gate too: with 3 the run stops at FX-SKIP, the last card, and nothing is left out
    proc = kvproof(project, "run", "--cards", "cx", "-j", "1", "--maxfail", "3", "--json", "m3.json", "--force")
    doc = _doc(project, "m3.json")
    assert proc.returncode == 1 and _not_run(doc) == [] and _verdicts(doc)["FX-SKIP"] == "UNVERIFIED"
    assert "0 card(s) not run" in proc.stdout


def test_maxfail_with_several_jobs_never_reports_a_card_not_run_as_proven(project):
    proc = kvproof(project, "run", "--cards", "cx", "-j", "2", "-x", "--json", "j2.json", "--force")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = _doc(project, "j2.json")
    ran = [c for c in doc["cards"] if not c["reason"].startswith(STOPPED)]
    assert any(c["verdict"] != "PROVEN" for c in ran)
    assert all(c["verdict"] == "ERROR" and c["duration_s"] == 0 for c in doc["cards"] if c not in ran)
    assert len(doc["cards"]) == len(CX)  # none dropped


def test_x_on_a_run_that_holds_changes_nothing(project):
    proc = kvproof(project, "run", "-x", "--json", "ok.json", "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set(_verdicts(_doc(project, "ok.json")).values()) == {"PROVEN"} and "stopped after" not in proc.stdout


def test_a_card_that_errors_before_anything_runs_counts_first(tmp_path):
    root = _copy(tmp_path / "p")
    shutil.copy(root / "cards-mixed" / "11-dangling.yaml", root / "cx" / "11-dangling.yaml")
    proc = kvproof(root, "run", "--cards", "cx", "-x", "--json", "d.json")
    doc = _doc(root, "d.json")
    assert proc.returncode == 1 and _verdicts(doc)["FX-DANGLING"] == "ERROR"
    assert _not_run(doc) == ["FX-ADD", "FX-FALSIFIED", "FX-LOOSE", "FX-SKIP"]  # its ref does not resolve: nothing ran


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_maxfail_must_be_a_positive_integer(project, value):
    proc = kvproof(project, "run", "--maxfail", value)
    assert proc.returncode == 2
    assert "argument --maxfail:" in proc.stderr and "give 1 or more" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------- -v / -q


def test_q_prints_only_the_cards_not_proven_and_the_summary(project):
    proc = kvproof(project, "run", "--cards", "cx", "-j", "1", "-q")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "FX-ADD" not in out and "┃" not in out and "time per card" not in out and "kvproof:" not in out
    assert "FAILED FX-FALSIFIED" in out and "check:" in out and "UNVERIFIED FX-SKIP" in out
    assert "gate FAIL: 1 PROVEN, 2 FAILED, 1 UNVERIFIED of 4 card(s)" in out and "report reports/" in out
    qq = kvproof(project, "run", "--cards", "cx", "-j", "1", "-qq").stdout
    assert "check:" not in qq and "report" not in qq and "FX-ADD" not in qq
    assert [ln.split()[0] for ln in qq.strip().splitlines()] == ["FAILED", "FAILED", "UNVERIFIED", "gate"], qq
    good = kvproof(project, "run", "-q").stdout
    assert good.startswith("gate PASS: 2 PROVEN of 2 card(s)") and "FX-" not in good, good


def test_v_shows_each_verdict_as_known_and_the_witnesses_under_each_card(project):
    proc = kvproof(project, "run", "-j", "1", "-v")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "PROVEN FX-ACC (" in out and out.index("PROVEN FX-ACC (") < out.index("┃")  # during the run
    assert "witness matches-sum passed witnesses/test_arith.py::test_acc_matches_sum" in out
    assert "witnesses/test_arith.py::test_acc_matches_sum[xs0] passed" in out  # a parametrized witness's nodes
    assert "✓ max_abs_delta = 0 (≤ 0)" in out and "liar arith.off_by_one caught by exact" in out
    vv = kvproof(project, "run", "FX-ACC", "-j", "1", "-vv").stdout
    assert "liar arith.acc_forgets caught by matches-sum\n    witness matches-sum failed" in vv


def test_v_and_q_change_nothing_the_run_writes(project):
    docs = []
    for flag in ("-vv", "-qq"):
        proc = kvproof(project, "run", "--cards", "cx", "-j", "1", flag, "--json", "vq.json", "--force")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        docs.append(_doc(project, "vq.json"))
    a, b = docs
    assert (
        a["header"]["command"]
        == b["header"]["command"]
        == "run_obligations.py run --cards cx -j 1 --json vq.json --force"
    )
    keep = ("id", "verdict", "reason", "bound_digest", "headline", "counts")
    assert [{k: c[k] for k in keep} for c in a["cards"]] == [{k: c[k] for k in keep} for c in b["cards"]]


def test_the_recorded_command_leaves_out_what_only_the_terminal_sees():
    argv = ["run", "-vv", "-xq", "--watch", "--watch-int", "0.1", "--watch-runs=2", "-k", "v", "--quiet", "--verb"]
    assert recorded_argv(argv) == ("run", "-x", "-k", "v")
    assert recorded_argv(["run", "--maxfail", "2", "-j", "1", "KV-*"]) == ("run", "--maxfail", "2", "-j", "1", "KV-*")


# ---------------------------------------------------------------- the scheduler's stop


def test_run_cards_stops_when_told_and_every_card_not_finished_comes_back_not_run(project):
    sites, _ = scan(project)
    cards = load_cards(project / "cx", project, sites).cards
    seen: list[str] = []

    def on_card(run) -> str:
        seen.append(run.card.id)
        return "enough" if len(seen) == 2 else ""

    runs = run_cards(cards, RunConfig(root=project), jobs=1, on_card=on_card)
    assert seen == ["FX-ADD", "FX-FALSIFIED"] and [r.card.id for r in runs] == [c.id for c in cards]
    assert [r.outcomes.link_problems for r in runs] == [(), (), ("enough",), ("enough",)]


# ---------------------------------------------------------------- --watch: what changed -> which cards


def test_touched_names_the_cards_whose_files_changed_and_the_files():
    files = {"A": ("a.yaml", "w.py", "impl.py"), "B": ("b.yaml", "impl.py"), "C": ("c.yaml",)}
    before = {"a.yaml": (1, 10), "w.py": (1, 5), "impl.py": (1, 7), "b.yaml": (1, 3), "c.yaml": (1, 1)}
    assert watching.touched(before, dict(before), files) == {}
    after = {**before, "impl.py": (2, 7)}
    assert watching.touched(before, after, files) == {"A": ("impl.py",), "B": ("impl.py",)}
    after = {**before, "w.py": (1, 6), "c.yaml": None}  # written (size), removed
    assert watching.touched(before, after, files) == {"A": ("w.py",), "C": ("c.yaml",)}
    assert watching.touched({**before, "c.yaml": None}, before, files) == {"C": ("c.yaml",)}  # created
    assert watching.touched(before, {**before, "new.py": (1, 1)}, {"A": ("new.py",)}) == {}  # not watched yet
    text = watching.trigger_text({"A": ("w.py",), "C": ("c.yaml", "w.py")}, ["A", "C"])
    assert text == "watch: w.py, c.yaml changed: running A, C"


def test_card_files_are_the_bound_files_that_are_files_and_the_files_of_the_refs(tmp_path):
    bound = [SimpleNamespace(path=p) for p in ("cards/a.yaml", "witnesses/t.py", "(settings: KVPROOF_*)", "x.py")]
    card = SimpleNamespace(id="A", bound_files=bound, refs=("impl/a.py::f", "x.py::g"))
    assert watching.card_files(SimpleNamespace(cards=[card])) == {
        "A": ("cards/a.yaml", "witnesses/t.py", "x.py", "impl/a.py")
    }
    (tmp_path / "x.py").write_text("x = 1\n")
    snap = watching.snapshot(tmp_path, ["x.py", "gone.py"])
    assert snap["gone.py"] is None and snap["x.py"][1] == 6


def _watch(root: Path, *args: str) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen(
        [sys.executable, str(ENTRY), "run", "--watch", "--watch-interval", "0.2", *args],
        cwd=root,
        env={**_env(root), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    return proc, lines


def _wait_for(lines: list[str], text: str, proc: subprocess.Popen, seconds: float = 90) -> None:
    end = time.monotonic() + seconds
    while not any(text in ln for ln in lines):
        assert time.monotonic() < end and proc.poll() is None, "".join(lines)
        time.sleep(0.1)


def test_watch_runs_again_just_the_cards_bound_to_the_file_that_changed(tmp_path):
    root = _copy(tmp_path / "p")
    (root / "cards-extra" / "fx-shout.yaml").rename(root / "obligations" / "fx-shout.yaml")
    proc, lines = _watch(root, "--watch-runs", "3", "-q")
    try:
        _wait_for(lines, "watch: watching", proc)
        text = root / "fakeimpl" / "text.py"
        text.write_text(text.read_text() + "\n# edited\n")
        _wait_for(lines, "1 PROVEN of 1 card(s)", proc)
        card = root / "obligations" / "fx-shout.yaml"
        card.write_text(card.read_text().replace("title:", "titel:"))  # a broken card: said, and still watching
        assert proc.wait(timeout=90) == 2, "".join(lines)
    finally:
        proc.kill()
    out = "".join(lines)
    assert "gate PASS: 3 PROVEN of 3 card(s)" in out
    assert "watch: fakeimpl/text.py changed: running FX-SHOUT" in out
    assert "watch: obligations/fx-shout.yaml changed: running FX-SHOUT" in out and "still watching" in out
    with Ledger(root / "reports" / FILENAME, create=False) as ledger:
        runs = ledger.runs(10)
    assert len(runs) == 2  # the broken card's run could not start: nothing recorded
    assert [r["cards"] for r in runs] == [1, 3]


def test_a_watchs_later_run_records_what_it_ran_not_how_the_first_run_chose_its_cards():
    from harness.commands import _rerun_argv

    argv = ["run", "FX-*", "-k", "add and not slow", "--tag", "fast", "--tag=kv", "-kx", "--changed", "--lf", "-j", "2"]
    assert _rerun_argv(argv, ["FX-*"], ["FX-ADD"]) == ("run", "-j", "2", "FX-ADD")
    assert _rerun_argv(["run", "--rerun-failed", "--profile", "ci"], [], ["A", "B"]) == (
        "run",
        "--profile",
        "ci",
        "A",
        "B",
    )
