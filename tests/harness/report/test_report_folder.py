"""The dated report folder: written whole or not at all, the ledger in step, `latest`, and the
`status` / `history` / `show` commands on a real run of the fixture project."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.ledger.history import Ledger
from harness.record.document import RunDocument
from harness.report import folder

HERE = Path(__file__).resolve().parents[2]  # tests/
FIXTURE = HERE / "fixtures" / "project"
FIXTURE_DOC = HERE / "fixtures" / "report-data" / "mixed-verdicts.json"
ENTRY = HERE.parent / "run_obligations.py"


def doc_at(started: str) -> RunDocument:
    doc = json.loads(FIXTURE_DOC.read_text(encoding="utf-8"))
    doc["header"]["started"] = started
    return RunDocument.from_json(doc)


def rows(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        conn.close()


def visible(reports: Path) -> list[str]:
    return sorted(p.name for p in reports.iterdir())


# ---------------------------------------------------------------- publish, in process


def test_publish_writes_the_four_files_records_the_run_and_points_latest(tmp_path):
    reports = tmp_path / "reports"
    final = folder.publish(reports, doc_at("2026-01-01T10:00:00Z"), FIXTURE)
    assert final.name == "2026-01-01T10-00-00Z"
    assert sorted(p.name for p in final.iterdir()) == sorted(folder.FILES + (folder.CARDS,))
    assert os.readlink(reports / "latest") == final.name and (reports / "latest" / "index.html").is_file()
    again = folder.publish(reports, doc_at("2026-01-01T10:00:00Z"), FIXTURE)  # same second: a new name
    assert again.name == "2026-01-01T10-00-00Z.2" and os.readlink(reports / "latest") == again.name
    with Ledger(reports / "ledger.sqlite") as ledger:
        assert [r["report_dir"] for r in ledger.runs()] == [again.name, final.name]
    assert json.loads((final / "verdicts.json").read_text())["header"]["started"] == "2026-01-01T10:00:00Z"


def test_interrupt_while_writing_leaves_no_folder_and_the_ledger_unchanged(tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    folder.publish(reports, doc_at("2026-01-01T10:00:00Z"), FIXTURE)
    before = visible(reports)

    def ctrl_c(view):
        raise KeyboardInterrupt

    monkeypatch.setattr(folder.html, "render", ctrl_c)  # index.html is written last: three files exist by then
    with pytest.raises(KeyboardInterrupt):
        folder.publish(reports, doc_at("2026-01-02T10:00:00Z"), FIXTURE)
    assert visible(reports) == before and rows(reports / "ledger.sqlite") == 1


def test_interrupt_between_rename_and_commit_takes_the_folder_back(tmp_path):
    reports = tmp_path / "reports"
    folder.publish(reports, doc_at("2026-01-01T10:00:00Z"), FIXTURE)
    before = visible(reports)

    class InterruptedLedger(Ledger):
        def record(self, doc, report_dir=None, before_commit=None):
            def move_then_interrupt():
                before_commit()
                assert (reports / report_dir / "index.html").is_file()  # it was in place, complete
                raise KeyboardInterrupt

            return super().record(doc, report_dir, move_then_interrupt)

    with InterruptedLedger(reports / "ledger.sqlite") as ledger:
        with pytest.raises(KeyboardInterrupt):
            folder.publish(reports, doc_at("2026-01-02T10:00:00Z"), FIXTURE, ledger)
    assert visible(reports) == before and rows(reports / "ledger.sqlite") == 1


def test_partial_folders_of_killed_runs_are_swept(tmp_path):
    reports = tmp_path / "reports"
    dead = reports / f"{folder.PARTIAL}2026-01-01T10-00-00Z-999999999"
    alive = reports / f"{folder.PARTIAL}2026-01-01T10-00-01Z-{os.getpid()}"
    for d in (dead, alive):
        d.mkdir(parents=True)
    folder.publish(reports, doc_at("2026-01-01T10:00:02Z"), FIXTURE)
    assert not dead.exists() and alive.exists()


def test_latest_falls_back_to_a_redirect_page_where_links_fail(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise OSError("symlinks are not supported here")

    monkeypatch.setattr(folder.os, "symlink", no_links)
    assert folder.point_latest(tmp_path, "2026-01-01T10-00-00Z") == "latest.html"
    page = (tmp_path / "latest.html").read_text()
    assert "url=2026-01-01T10-00-00Z/index.html" in page


# ---------------------------------------------------------------- the CLI on the fixture project


def kvproof(root: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVPROOF_ROOT": str(root), "COLUMNS": "250"}
    env.pop("KVPROOF_CARDS_DIR", None)
    env.pop("KVPROOF_REPORTS_DIR", None)
    return subprocess.run(
        [sys.executable, str(ENTRY), *args], cwd=root, env=env, capture_output=True, text=True, timeout=120, **kw
    )


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reports") / "project"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__", "reports"))
    proc = kvproof(root, "run", "FX-ADD")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "report reports/" in proc.stdout
    return root


def test_a_run_leaves_a_dated_report_and_status_reads_it_without_running(ran):
    reports = ran / "reports"
    latest = reports / "latest"
    assert sorted(p.name for p in latest.iterdir()) == sorted(folder.FILES + (folder.CARDS,))
    assert "| FX-ADD | add is exact on integers | N | PROVEN |" in (latest / "verdicts.md").read_text()
    proc = kvproof(ran, "status", "FX-ADD")
    assert proc.returncode == 0 and "PROVEN" in proc.stdout and "STALE" not in proc.stdout


def test_status_marks_a_card_stale_after_its_impl_file_is_edited(ran, tmp_path):
    impl = ran / "fakeimpl" / "arith.py"
    original = impl.read_text()
    try:
        impl.write_text(original + "\n# edited\n")
        proc = kvproof(ran, "status")
        assert proc.returncode == 1
        assert "STALE (was PROVEN)" in proc.stdout and "fakeimpl/arith.py changed" in proc.stdout
        assert "never run" in proc.stdout  # FX-ACC
        show = kvproof(ran, "show", "FX-ADD")
        assert "last verdict PROVEN" in show.stdout and "STALE: fakeimpl/arith.py changed" in show.stdout
    finally:
        impl.write_text(original)
    assert kvproof(ran, "status", "FX-ADD").returncode == 0


def test_the_report_keeps_each_card_exactly_as_it_was_run(ran, tmp_path):
    """cards/ holds the bytes the run judged against (sha256 = the card's fingerprint), even once the card file
    changes; a later run's report keeps the new bytes and the old report is untouched."""
    import hashlib

    first = (ran / "reports" / "latest").resolve()
    (entry,) = json.loads((first / "cards" / "index.json").read_text())
    card = ran / entry["card_path"]
    kept = (first / "cards" / entry["file"]).read_bytes()
    assert entry["id"] == "FX-ADD" and kept == card.read_bytes()
    doc = json.loads((first / "verdicts.json").read_text())
    assert hashlib.sha256(kept).hexdigest() == entry["sha256"] == doc["cards"][0]["fingerprint"]
    original = card.read_bytes()
    try:
        card.write_bytes(original + b"# an edit after the run\n")
        proc = kvproof(ran, "run", "FX-ADD")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        second = (ran / "reports" / "latest").resolve()
        assert second != first
        assert (second / "cards" / entry["file"]).read_bytes().endswith(b"# an edit after the run\n")
        assert (first / "cards" / entry["file"]).read_bytes() == kept
    finally:
        card.write_bytes(original)


def test_history_lists_runs_and_a_cards_verdicts(ran):
    runs = kvproof(ran, "history")
    assert runs.returncode == 0 and "PASS" in runs.stdout
    card = kvproof(ran, "history", "FX-ADD")
    assert card.returncode == 0 and "history of FX-ADD" in card.stdout and "PROVEN" in card.stdout
    bad = kvproof(ran, "history", "FX-ADDD")
    assert bad.returncode == 2 and "did you mean `FX-ADD`" in bad.stderr


def test_ctrl_c_during_a_run_leaves_no_report_and_the_ledger_unchanged(ran):
    reports = ran / "reports"
    before, runs_before = visible(reports), rows(reports / "ledger.sqlite")
    env = {**os.environ, "KVPROOF_ROOT": str(ran), "COLUMNS": "200"}
    # NOTE: a shell that starts CI in the background hands SIGINT down as ignored, and
    # Python then installs no KeyboardInterrupt handler; restore the default for the child.
    proc = subprocess.Popen(
        [sys.executable, str(ENTRY), "run", "--cards", "cards-mixed", "FX-HANG"],
        cwd=ran,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout.readline().startswith("kvproof:")  # the run has started (its header is out)
    time.sleep(0.3)  # FX-HANG's witness waits for its 1 s timeout: the run cannot have finished
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert visible(reports) == before and rows(reports / "ledger.sqlite") == runs_before
