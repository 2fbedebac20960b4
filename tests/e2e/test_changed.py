"""``run --changed``: replay verdicts whose bound files are unchanged, rerun exactly the cards bound to an edit.

Runs the CLI on a copy of tests/fixtures/project (KVPROOF_ROOT) with
cards-extra/fx-shout.yaml moved into its obligations/: FX-ADD and FX-ACC
cover fakeimpl/arith.py, FX-SHOUT covers fakeimpl/text.py and lists the liar
in witnesses/liars/text.py. One copy is shared, so the tests below
run in file order, each starting from the state the previous one left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from harness.ledger.history import Ledger
from harness.plan.binding import BoundFile, digest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "project"
ENTRY = REPO / "run_obligations.py"
SCHEMA = json.loads((REPO / "obligations" / "verdicts.schema.json").read_text())
ALL = ["FX-ACC", "FX-ADD", "FX-SHOUT"]


def kvproof(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "250"}
    env.pop("KVPROOF_CARDS_DIR", None)
    env.pop("KVPROOF_REPORTS_DIR", None)
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], cwd=root, env=env, capture_output=True, text=True, timeout=180
    )


def changed(root: Path, name: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = kvproof(root, "run", "--changed", "--json", name, *args)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    doc = json.loads((root / name).read_text())
    jsonschema.validate(doc, SCHEMA)
    return proc, doc


def ran(doc: dict) -> list[str]:
    return [c["id"] for c in doc["cards"] if c["replayed_from"] is None]


def touch(path: Path) -> None:
    """Change the bytes, not the behaviour."""
    path.write_text(path.read_text() + "\n# edited\n")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("changed") / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    (root / "cards-extra" / "fx-shout.yaml").rename(root / "obligations" / "fx-shout.yaml")
    first = kvproof(root, "run", "--json", "first.json")
    assert first.returncode == 0, first.stdout + first.stderr
    return root


def test_without_a_ledger_changed_runs_everything(tmp_path):
    root = tmp_path / "p"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    proc, doc = changed(root, "v.json", "FX-ADD")
    assert ran(doc) == ["FX-ADD"] and "0 card(s) replayed" in proc.stdout


def test_nothing_changed_replays_every_card_and_says_so(project):
    proc, doc = changed(project, "same.json")
    assert proc.returncode == 0 and ran(doc) == []
    first = json.loads((project / "first.json").read_text())
    for card, orig in zip(doc["cards"], first["cards"], strict=True):
        assert card["replayed_from"]["run_id"] == 1 and card["replayed_from"]["started"] == first["header"]["started"]
        assert card["verdict"] == "PROVEN" and card["witnesses"] == orig["witnesses"]  # the original evidence
        assert card["duration_s"] == 0.0
    assert doc["header"]["summary"]["replayed"] == 3 and doc["header"]["summary"]["gate"] == "PASS"
    assert doc["timing"]["cards"] == [] and doc["timing"]["processes"] == 0
    assert "3 card(s) replayed (bound files unchanged since their last PROVEN verdict), 0 to run" in proc.stdout
    assert "gate PASS: 3 PROVEN of 3 card(s) (3 replayed)" in proc.stdout
    when = first["header"]["started"].replace("T", " ").replace("Z", " UTC")
    assert proc.stdout.count(f"replayed from {when}") == 3  # one per row of the terminal table


def test_replayed_from_shows_in_every_report_format(project):
    folder = project / "reports" / "latest"
    first = json.loads((project / "first.json").read_text())
    text = f"replayed from {first['header']['started'].replace('T', ' ').replace('Z', ' UTC')}"
    assert (folder / "index.html").read_text().count(text) >= 3
    assert (folder / "verdicts.md").read_text().count(text) == 3
    suite = ET.parse(folder / "junit.xml").getroot().find("testsuite")
    for case in suite.iter("testcase"):
        assert text in case.find("system-out").text
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["kvproof.replayed_from"] == first["header"]["started"]
    assert json.loads((folder / "verdicts.json").read_text())["cards"][0]["replayed_from"]["run_id"] == 1


def test_a_replay_is_recorded_as_pointing_at_the_original_run(project):
    with Ledger(project / "reports" / "ledger.sqlite") as ledger:
        last = ledger.last("FX-ADD")
        assert last.run_id == 2 and last.replay_of == 1 and last.evidence_run_id == 1
        files_digest = digest(BoundFile(**f) for f in ledger.bound_files(2, "FX-ADD"))
        assert ledger.last_matching("FX-ADD", files_digest).run_id == 1  # replays never become evidence
        n = ledger.conn.execute("SELECT COUNT(*) FROM evidence WHERE run_id = 2").fetchone()[0]
        assert n == 0  # the evidence stays with the run that produced it
    status = kvproof(project, "status")
    assert status.returncode == 0 and status.stdout.count("(replayed from ") == 3
    show = kvproof(project, "show", "FX-ADD")
    assert "last verdict PROVEN on" in show.stdout and "(replayed from " in show.stdout


def test_editing_an_impl_file_reruns_exactly_the_cards_bound_to_it(project):
    touch(project / "fakeimpl" / "text.py")
    proc, doc = changed(project, "text.json")
    assert ran(doc) == ["FX-SHOUT"], proc.stdout
    assert "1 to run: FX-SHOUT" in proc.stdout
    touch(project / "fakeimpl" / "arith.py")
    proc, doc = changed(project, "arith.json")
    assert ran(doc) == ["FX-ACC", "FX-ADD"], proc.stdout
    shout = next(c for c in doc["cards"] if c["id"] == "FX-SHOUT")
    text_run = json.loads((project / "text.json").read_text())
    assert shout["replayed_from"]["started"] == text_run["header"]["started"]  # the run that proved these bytes
    assert [r["id"] for r in doc["timing"]["cards"]] and {r["id"] for r in doc["timing"]["cards"]} == {
        "FX-ACC",
        "FX-ADD",
    }


def test_editing_a_liar_module_reruns_the_cards_that_list_its_liars(project):
    touch(project / "witnesses" / "liars" / "text.py")
    assert ran(changed(project, "liar.json")[1]) == ["FX-SHOUT"]
    touch(project / "witnesses" / "liars" / "arith.py")
    assert ran(changed(project, "liar2.json")[1]) == ["FX-ACC", "FX-ADD"]


def test_editing_a_card_or_witness_reruns_it(project):
    touch(project / "obligations" / "fx-acc.yaml")
    assert ran(changed(project, "card.json")[1]) == ["FX-ACC"]
    touch(project / "witnesses" / "test_text.py")
    assert ran(changed(project, "witness.json")[1]) == ["FX-SHOUT"]


def test_only_proven_verdicts_of_the_same_profile_are_replayed(project, tmp_path):
    # a card that FAILED is run again even though nothing changed
    kvproof(project, "run", "FX-ADD", "FX-LOOSE", "--cards", "cards-mixed")
    _, doc = changed(project, "mixed.json", "FX-ADD", "FX-LOOSE", "--cards", "cards-mixed")
    assert ran(doc) == ["FX-LOOSE"]  # cards-mixed's FX-ADD is another card file: its own history
    # a PROVEN of the ci profile is not replayed into a release run
    _, doc = changed(project, "release.json", "FX-SHOUT", "--profile", "release", "--seed", "3")
    assert ran(doc) == ["FX-SHOUT"]
