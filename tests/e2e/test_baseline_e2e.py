"""run --baseline / --fail-on-regression and run --rerun-failed, end to end on the fixture project."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/
FIXTURE = HERE / "fixtures" / "project"
ENTRY = HERE.parent / "run_obligations.py"


def kvproof(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "200"}
    for var in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        env.pop(var, None)
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], cwd=root, env=env, capture_output=True, text=True, timeout=180
    )


@pytest.fixture()
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    return root


def _latest(root: Path) -> Path:
    return (root / "reports" / "latest").resolve()


def test_baseline_column_section_and_files_and_the_regression_exit(project):
    first = kvproof(project, "run", "-j", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    base = _latest(project)
    same = kvproof(project, "run", "-j", "2", "--baseline", "latest", "--fail-on-regression")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "vs baseline" in same.stdout and "no regression" in same.stdout
    folder = _latest(project)
    data = json.loads((folder / "compare.json").read_text())
    assert data["summary"]["regressions"] == 0 and data["before"]["label"].startswith("run 1 ")
    page = (folder / "index.html").read_text()
    assert "<th>vs baseline</th>" in page and 'id="baseline"' in page
    assert page.count('<svg class="trend"') >= 2  # two runs of each card: a time trend each

    # a regression that leaves every card PROVEN: FX-ADD's control moves toward its bound by more than the
    # threshold the card sets (the baseline is a verdicts.json where it measured 10; it measures 1 now)
    card = project / "obligations" / "fx-add.yaml"
    card.write_text(
        card.read_text().replace(
            "    bounds: {max_abs_delta: {gt: 0}}\n",
            "    bounds: {max_abs_delta: {gt: 0}}\n    regression: {max_abs_delta: 0.5}\n",
        )
    )
    old = json.loads((base / "verdicts.json").read_text())
    add = next(c for c in old["cards"] if c["id"] == "FX-ADD")
    add["controls"][0]["bounds"][0]["actual"] = 10
    shutil.copytree(base / "cards", project / "release" / "cards")  # a kept release report: verdicts and cards
    release = project / "release" / "verdicts.json"
    release.write_text(json.dumps(old))
    gated = kvproof(project, "run", "-j", "2", "--baseline", str(release), "--fail-on-regression")
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "gate PASS" in gated.stdout and "1 regression(s)" in gated.stdout
    assert "inputs-differ: max_abs_delta 10 -> 1" in gated.stdout.replace("→", "->")
    md = (_latest(project) / "compare.md").read_text()
    assert "### Regressions" in md and "used 90% of the room" in md
    assert "FX-ADD: the card changed" in md and "+    regression: {max_abs_delta: 0.5}" in md  # the card's own diff
    told = kvproof(project, "run", "-j", "2", "--baseline", str(release))  # without the flag: reported only
    assert told.returncode == 0 and "1 regression(s)" in told.stdout


def test_a_baseline_that_names_nothing_stops_the_run_before_anything_runs(project):
    bad = kvproof(project, "run", "--baseline", "42")
    assert bad.returncode == 2 and "no run 42" in bad.stderr and "history" in bad.stderr
    assert not (project / "reports" / "latest").exists()
    lone = kvproof(project, "run", "--fail-on-regression")
    assert lone.returncode == 2 and "--fail-on-regression needs --baseline" in lone.stderr


def test_rerun_failed_runs_what_was_not_proven_and_replays_the_rest(project):
    first = kvproof(project, "run", "-j", "2", "--cards", "cards-mixed")
    assert first.returncode == 1  # the mixed cards: one PROVEN, the others not
    again = kvproof(project, "run", "-j", "2", "--cards", "cards-mixed", "--rerun-failed")
    assert again.returncode == 1
    assert "--rerun-failed: 1 card(s) replayed" in again.stdout and "10 to run" in again.stdout
    doc = json.loads((_latest(project) / "verdicts.json").read_text())
    replayed = {c["id"] for c in doc["cards"] if c["replayed_from"]}
    assert replayed == {"FX-ADD"}
    assert all(c["verdict"] != "PROVEN" for c in doc["cards"] if c["id"] != "FX-ADD")
    # a PROVEN card whose files changed since runs again
    (project / "cards-mixed" / "01-proven.yaml").write_text(
        (project / "cards-mixed" / "01-proven.yaml").read_text() + "# edited\n"
    )
    third = kvproof(project, "run", "-j", "2", "--cards", "cards-mixed", "--rerun-failed")
    assert "0 card(s) replayed" in third.stdout and "11 to run" in third.stdout
    both = kvproof(project, "run", "--changed", "--rerun-failed")
    assert both.returncode == 2 and "not allowed with" in both.stderr
