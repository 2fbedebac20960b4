"""Issue 38, the first hour: what changed since a card's last PROVEN run, paths and commands as they run from
the working directory, and a full disk named as such.

The since-PROVEN rows record the fixture run (tests/fixtures/report-data/mixed-verdicts.json) in a ledger and
ask again after editing a bound file's bytes; the full-disk rows write to ``/dev/full`` (the kernel's own
ENOSPC, as a full disk gives it) and exercise the exit code a witness process uses when its own stream is on the
full disk.
"""

from __future__ import annotations

import copy
import errno
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from rich.console import Console
from test_report import PROJECT, at, card, load_doc

from harness import pipeline, project
from harness.errors import NO_SPACE_EXIT, NoSpace
from harness.execute import orphans, pytest_main
from harness.ledger.history import Ledger
from harness.record.document import RunDocument
from harness.report import html, markdown, terminal
from harness.report.view import NEVER_PROVEN, build_view

REPO = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((REPO / "obligations" / "verdicts.schema.json").read_text())


# ---------------------------------------------------------------- files changed since the last PROVEN


def _edited(doc: dict, card_id: str, path: str) -> dict:
    out = copy.deepcopy(doc)
    entry = next(c for c in out["cards"] if c["id"] == card_id)
    next(b for b in entry["bound_files"] if b["path"] == path)["sha256"] = "e" * 64
    return out


@pytest.fixture()
def since_doc(tmp_path) -> RunDocument:
    """The fixture run as the second run: FX-LOOSE was PROVEN in the first, then fakeimpl/arith.py changed;
    FX-FALSIFIED was never PROVEN; FX-NOCONTROL was PROVEN on the same bytes as now."""
    doc = load_doc()
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        first = at(doc, "2026-01-01T10:00:00Z", FX_LOOSE="PROVEN", FX_NOCONTROL="PROVEN")
        ledger.record(RunDocument.from_json(first), "2026-01-01T10-00-00Z")
    now = RunDocument.from_json(_edited(doc, "FX-LOOSE", "fakeimpl/arith.py"))
    return pipeline.since_proven(SimpleNamespace(reports_dir=tmp_path), now)


def _card(doc: RunDocument, card_id: str):
    return next(c for c in doc.cards if c.id == card_id)


def test_a_failed_card_names_the_bound_files_changed_since_its_last_proven_run(since_doc):
    sp = _card(since_doc, "FX-LOOSE").since_proven
    assert sp is not None and sp.run_id == 1 and sp.started == "2026-01-01T10:00:00Z"
    assert sp.report_dir == "2026-01-01T10-00-00Z"
    assert [(f.path, f.role, f.change) for f in sp.files] == [("fakeimpl/arith.py", "covers", "changed")]


def test_never_proven_and_proven_on_the_same_bytes_are_told_apart(since_doc):
    assert _card(since_doc, "FX-FALSIFIED").since_proven.run_id is None
    same = _card(since_doc, "FX-NOCONTROL").since_proven
    assert same.run_id == 1 and same.files == ()
    assert _card(since_doc, "FX-ADD").since_proven is None  # PROVEN now: nothing to say


def test_without_a_ledger_every_card_that_is_not_proven_was_never_proven(tmp_path):
    doc = pipeline.since_proven(SimpleNamespace(reports_dir=tmp_path), RunDocument.from_json(load_doc()))
    assert all(c.since_proven is None if c.verdict == "PROVEN" else c.since_proven.run_id is None for c in doc.cards)


def test_the_json_carries_it_and_the_schema_describes_it(since_doc):
    data = since_doc.to_json()
    for entry in data["cards"]:  # (the fixture document is of schema version 1: its cards are checked)
        jsonschema.validate(entry, {"$ref": "#/$defs/card", "$defs": SCHEMA["$defs"]})
    loose = next(c for c in data["cards"] if c["id"] == "FX-LOOSE")
    assert loose["since_proven"]["files"] == [{"path": "fakeimpl/arith.py", "role": "covers", "change": "changed"}]
    assert RunDocument.from_json(data) == since_doc  # and reads back


def test_html_markdown_and_terminal_show_it(since_doc):
    view = build_view(since_doc, {}, root=PROJECT)
    loose = card(view, "FX-LOOSE")["since_proven"]
    want = "changed since last PROVEN (run 1, 2026-01-01T10:00:00Z): fakeimpl/arith.py"
    assert loose["text"] == want
    assert card(view, "FX-FALSIFIED")["since_proven"]["text"] == NEVER_PROVEN

    page = html.render(view)
    assert 'href="../2026-01-01T10-00-00Z/index.html#' in page and "<code>fakeimpl/arith.py</code>" in page
    assert NEVER_PROVEN in page and "no bound file changed since last PROVEN" in page

    md = markdown.render(view)
    assert f"  - {want}" in md and f"  - {NEVER_PROVEN}" in md

    out = io.StringIO()
    terminal.render_run(Console(file=out, width=300, color_system=None), view)
    text = out.getvalue()
    assert f"    {want}" in text  # FX-LOOSE, FX-FALSIFIED and FX-NOCONTROL are FAILED
    assert "no bound file changed since last PROVEN (run 1" in text
    assert text.count(NEVER_PROVEN) == 1  # FAILED cards only: FX-FALSIFIED, not the ERROR ones


# ---------------------------------------------------------------- paths and commands from the working directory


def test_paths_are_relative_to_the_working_directory_inside_the_project(tmp_path, monkeypatch):
    (tmp_path / "proj" / "witnesses").mkdir(parents=True)
    root = tmp_path / "proj"
    report = root / "reports" / "2026" / "index.html"
    assert project.shown_path(report, root, cwd=root) == "reports/2026/index.html"
    assert project.shown_path(report, root, cwd=root / "witnesses") == "../reports/2026/index.html"
    assert project.shown_path(report, root, cwd=tmp_path) == str(report)  # outside the project: absolute
    assert project.shown_path(tmp_path / "elsewhere", root, cwd=root) == str(tmp_path / "elsewhere")


def test_a_command_runs_as_printed_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["run_obligations.py"])
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no kvproof on PATH
    monkeypatch.chdir(REPO)
    here = os.path.relpath(sys.executable, REPO)
    assert project.command("run X") == f"{here} run_obligations.py run X"
    monkeypatch.chdir(REPO / "witnesses")
    assert (
        project.command("run X") == f"{os.path.relpath(sys.executable, REPO / 'witnesses')} ../run_obligations.py run X"
    )
    monkeypatch.chdir(tmp_path)  # outside the checkout: absolute
    assert project.command("run X") == f"{os.path.abspath(sys.executable)} {REPO / 'run_obligations.py'} run X"
    # this install's own console script on PATH (beside this interpreter): the short form runs as printed
    beside = str(Path(os.path.abspath(sys.executable)).parent / "kvproof")
    monkeypatch.setattr(shutil, "which", lambda name: beside)
    assert project.command("run X") == "kvproof run X"
    # another kvproof on PATH is not this one: the path again
    monkeypatch.setattr(shutil, "which", lambda name: str(tmp_path / "bin" / "kvproof"))
    assert project.command("run X").endswith("run_obligations.py run X")


def test_a_console_script_called_by_path_is_named_by_its_path(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "bin" / "kvproof")])
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert project.runner() == str(tmp_path / "bin" / "kvproof")  # outside the checkout: absolute


def test_replay_hints_use_the_command():
    view = build_view(RunDocument.from_json(load_doc()), {}, root=PROJECT)
    replay = next(w["replay"] for w in card(view, "FX-FALSIFIED")["failing"] if w["replay"])
    # recorded as it runs from the run's project root (the document's root), wherever the run was started
    root = Path(load_doc()["header"]["root"])
    assert replay == project.command("run FX-FALSIFIED --cards cards-mixed --profile ci --seed 0", at=root)


# ---------------------------------------------------------------- a full disk


def test_exhausted_names_the_full_disk_from_the_output_or_the_exit_code(tmp_path):
    said = orphans.exhausted("OSError: [Errno 28] No space left on device: '/scratch/fill.bin'", [tmp_path])
    assert said.startswith("no space left on /scratch/fill.bin (TMPDIR")
    assert said.endswith("free space or point TMPDIR elsewhere")
    by_code = orphans.exhausted("", [tmp_path], NO_SPACE_EXIT)
    assert by_code.startswith("no space left on ") and "point TMPDIR elsewhere" in by_code
    assert orphans.exhausted("", [tmp_path], 70) == ""


def test_a_witness_process_whose_own_write_finds_the_disk_full_exits_with_the_no_space_code(monkeypatch):
    def full(*args, **kwargs):
        with open("/dev/full", "wb", buffering=0) as fh:
            fh.write(b"x")  # the kernel's ENOSPC, as a full disk gives it

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    monkeypatch.setattr(pytest_main, "run", full)
    monkeypatch.setattr(pytest_main, "account_path", lambda: None)
    monkeypatch.setattr(pytest_main.ReadLog, "install", staticmethod(lambda cwd: None))
    assert pytest_main.main([]) == NO_SPACE_EXIT


class Said:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, text: str) -> None:
        self.errors.append(text)

    def wrote(self, what: str, path: Path) -> None:
        pass


def _write_to_full(*args, **kwargs) -> None:
    with open("/dev/full", "wb", buffering=0) as fh:  # the kernel's ENOSPC, as a full disk gives it
        fh.write(b"x")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_json_write_on_a_full_disk_is_named_and_the_run_not_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline.jsonfile, "write", _write_to_full)
    req = SimpleNamespace(
        json_path=tmp_path / "v.json", json_arg="v.json", reports_dir=tmp_path / "reports", root=PROJECT
    )
    said = Said()
    ok, _ = pipeline.record(req, RunDocument.from_json(load_doc()), said)
    assert ok is False  # the run exits 2: its evidence was not all written
    full = f"--json='v.json': cannot write it: no space left on {tmp_path / 'v.json'} (the device is full)"
    assert any(full in e for e in said.errors), said.errors
    assert any("write --json elsewhere" in e for e in said.errors), said.errors  # not TMPDIR: it is not there


def test_a_harness_write_on_a_full_disk_is_named_and_fails_the_run(monkeypatch):
    def write(*args, **kwargs):
        with open("/dev/full", "wb", buffering=0) as fh:
            fh.write(b"x")

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with pytest.raises(NoSpace) as got:
        with pipeline.full_disk_named():
            write()
    # a write on an open file names no path: the temp folder, where the run's own job folders are
    assert str(got.value).startswith("no space left on ") and "point TMPDIR elsewhere" in str(got.value)
    assert got.value.errno == errno.ENOSPC


FULL_WITNESS = """
import os


def test_writes_to_a_full_disk():
    with open("/dev/full", "wb", buffering=0) as fh:  # the kernel's ENOSPC, as a full disk gives it
        fh.write(b"\\0" * 4096)
"""
FULL_CARD = """id: FX-FULL
title: a witness whose write finds the disk full
module: fakeimpl.arith
regime: N
theorem: add works.
proof: See add.
refs: [fakeimpl/arith.py::add]
witnesses:
  - id: fill
    test: witnesses/test_full.py::test_writes_to_a_full_disk
version: 1
"""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_end_to_end_a_witness_that_finds_the_disk_full_is_named_so_and_paths_read_from_the_subfolder(tmp_path):
    root = tmp_path / "project"
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    (root / "cards-full").mkdir()
    (root / "cards-full" / "FX-FULL.yaml").write_text(FULL_CARD)
    (root / "witnesses" / "test_full.py").write_text(FULL_WITNESS)
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "300"}
    for k in ("KVPROOF_CARDS_DIR", "KVPROOF_REPORTS_DIR"):
        env.pop(k, None)

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(REPO / "run_obligations.py"), "run", "--cards", "../cards-full", "--no-liars", *extra],
            cwd=root / "witnesses",  # from a subfolder: paths relative to it
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    proc = run()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # ERROR, not FAILED: a full disk decides nothing about the theorem; a write on an open file names no path,
    # so the temp folder is named (where a witness's scratch files go)
    assert "ERROR FX-FULL: witness fill: no space left on " in proc.stdout, proc.stdout
    assert "point TMPDIR elsewhere: OSError: [Errno 28]" in proc.stdout, proc.stdout
    assert "resource exhausted" not in proc.stdout
    assert "report ../reports/" in proc.stdout, proc.stdout  # the report folder as typed from witnesses/
    md = (root / "reports" / "latest" / "verdicts.md").read_text()
    assert "point TMPDIR elsewhere" in md and "never PROVEN in this history" in md
