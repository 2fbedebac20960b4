"""The SQLite ledger: one transaction per run, the replay query, schema versions, stale detection."""

from __future__ import annotations

import copy
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from harness.ledger.history import SCHEMA_VERSION, Ledger, LedgerError, changed_files
from harness.plan.binding import BoundFile, digest
from harness.plan.status import card_status, status_exit_code
from harness.record.document import RunDocument
from harness.statuses import CardState

NEVER_RUN, STALE = CardState.NEVER_RUN, CardState.STALE

FIXTURE_DOC = Path(__file__).resolve().parents[2] / "fixtures" / "report-data" / "mixed-verdicts.json"


def bound_digest(files) -> str:
    return digest(BoundFile(**f) for f in files)


def doc_at(started: str, **verdicts: str) -> RunDocument:
    return RunDocument.from_json(doc_json_at(started, **verdicts))


def doc_json_at(started: str, **verdicts: str) -> dict:
    doc = json.loads(FIXTURE_DOC.read_text(encoding="utf-8"))
    doc["header"]["started"] = started
    for c in doc["cards"]:
        if c["id"].replace("-", "_") in verdicts:
            c["verdict"] = verdicts[c["id"].replace("-", "_")]
    return doc


def snapshot(path: Path) -> dict:
    """Every row of every table, to compare a ledger before and after."""
    conn = sqlite3.connect(path)
    try:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in tables}
    finally:
        conn.close()


def test_a_recorded_run_reads_back_with_its_evidence_and_bound_files(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as ledger:
        run_id = ledger.record(doc_at("2026-01-01T00:00:00Z"), "2026-01-01T00-00-00Z")
        last = ledger.last("FX-LOOSE")
        assert (last.run_id, last.verdict, last.report_dir) == (run_id, "FAILED", "2026-01-01T00-00-00Z")
        assert last.headline == "max|Δ| = 1.000e-03 (≤ 0)"
        assert ledger.entry(run_id, "FX-ADD").liars[0].caught_by == ("exact", "commutes", "total")
        assert [f["role"] for f in ledger.bound_files(run_id, "FX-ADD")] == ["card", "witness", "liar", "covers"]
        rows = ledger.conn.execute("SELECT witness_id, key, value_json FROM evidence WHERE card_id='FX-LOOSE'")
        assert ("loose", "max_abs_delta", "0.001") in rows.fetchall()
        assert ledger.runs()[0]["cards"] == 11 and ledger.run_count() == 1


def test_history_is_oldest_first_and_limited_to_the_newest(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as ledger:
        for day, verdict in ((1, "FAILED"), (2, "PROVEN"), (3, "ERROR")):
            ledger.record(doc_at(f"2026-01-0{day}T00:00:00Z", FX_ADD=verdict))
        assert [p.verdict for p in ledger.history("FX-ADD")] == ["FAILED", "PROVEN", "ERROR"]
        assert [p.verdict for p in ledger.history("FX-ADD", limit=2)] == ["PROVEN", "ERROR"]
        assert ledger.history("NOPE") == [] and ledger.last("NOPE") is None


def test_last_proven_with_the_same_bound_files_is_one_query(tmp_path):
    first = doc_json_at("2026-01-01T00:00:00Z")
    second = doc_json_at("2026-01-02T00:00:00Z")
    add2 = next(c for c in second["cards"] if c["id"] == "FX-ADD")
    add2["bound_files"][-1]["sha256"] = "e" * 64  # its impl file changed between the runs
    third = doc_json_at("2026-01-03T00:00:00Z", FX_ADD="FAILED")
    with Ledger(tmp_path / "l.sqlite") as ledger:
        ids = [ledger.record(RunDocument.from_json(d)) for d in (first, second, third)]
        add1 = next(c for c in first["cards"] if c["id"] == "FX-ADD")
        assert ledger.last_matching("FX-ADD", bound_digest(add1["bound_files"])).run_id == ids[0]
        assert ledger.last_matching("FX-ADD", bound_digest(add2["bound_files"])).run_id == ids[1]
        assert ledger.last_matching("FX-ADD", "0" * 64) is None
        plan = " ".join(
            r[-1]
            for r in ledger.conn.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM verdicts WHERE card_id=? AND bound_digest=? AND verdict=?",
                ("FX-ADD", "x", "PROVEN"),
            )
        )
        assert "verdicts_by_digest" in plan


def test_bound_digest_ignores_order_and_sees_every_byte():
    files = [{"path": "a", "role": "card", "sha256": "1"}, {"path": "b", "role": "covers", "sha256": "2"}]
    assert bound_digest(files) == bound_digest(files[::-1])
    assert bound_digest(files) != bound_digest([files[0], {**files[1], "sha256": "3"}])
    assert bound_digest(files) != bound_digest([files[0], {**files[1], "sha256": None}])
    assert bound_digest(files) != bound_digest(files[:1])


def test_an_interrupt_inside_the_transaction_leaves_the_ledger_as_it_was(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as ledger:
        ledger.record(doc_at("2026-01-01T00:00:00Z"))
    before = snapshot(path)

    def interrupt() -> None:
        raise KeyboardInterrupt

    with Ledger(path) as ledger:
        with pytest.raises(KeyboardInterrupt):
            ledger.record(doc_at("2026-01-02T00:00:00Z"), before_commit=interrupt)
    assert snapshot(path) == before


def test_a_new_ledger_gets_the_current_schema_version_and_a_newer_one_is_refused(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as ledger:
        assert ledger.version == SCHEMA_VERSION
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(LedgerError, match="newer than this kvproof"):
        Ledger(path)
    with pytest.raises(LedgerError, match="no ledger at"):
        Ledger(tmp_path / "missing.sqlite", create=False)


def test_a_failed_migration_changes_nothing(tmp_path, monkeypatch):
    from harness.ledger import schema as mod

    def broken(conn):
        mod._v1(conn)
        raise sqlite3.OperationalError("disk on fire")

    monkeypatch.setattr(mod, "MIGRATIONS", (broken,))
    path = tmp_path / "l.sqlite"
    with pytest.raises(LedgerError, match="disk on fire"):
        Ledger(path)
    assert snapshot(path) == {}


# ---------------------------------------------------------------- stale detection

RECORDED = [
    {"path": "obligations/kv.yaml", "role": "card", "sha256": "1"},
    {"path": "impl/kv.py", "role": "covers", "sha256": "2"},
    {"path": "impl/rope.py", "role": "covers", "sha256": "3"},
]


def test_changed_files_names_changed_missing_new_and_dropped_files():
    now = copy.deepcopy(RECORDED)
    now[1]["sha256"] = "9"
    now[2]["sha256"] = None
    now.append({"path": "impl/ring.py", "role": "covers", "sha256": "4"})
    assert changed_files(RECORDED, now) == ["impl/kv.py changed", "impl/rope.py missing", "impl/ring.py newly bound"]
    assert changed_files(RECORDED, RECORDED[:2]) == ["impl/rope.py no longer bound"]


def test_status_is_stale_when_a_bound_file_changed_and_the_verdict_otherwise(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as ledger:
        ledger.record(doc_at("2026-01-01T00:00:00Z"))
        last = ledger.last("FX-ADD")
        recorded = ledger.bound_files(last.run_id, "FX-ADD")
    fresh = card_status("FX-ADD", "t", last, recorded, recorded)
    assert fresh.state == "PROVEN" and fresh.changed == ()
    edited = copy.deepcopy(recorded)
    edited[-1]["sha256"] = "0" * 64
    stale = card_status("FX-ADD", "t", last, recorded, edited)
    assert stale.state == STALE and stale.changed == ("fakeimpl/arith.py changed",)
    assert card_status("NEW", "t", None, [], []).state == NEVER_RUN
    assert status_exit_code([fresh]) == 0 and status_exit_code([fresh, stale]) == 1 and status_exit_code([]) == 1
    # a cell its run did not count for the gate (required: false, a survey target) does not count for status
    ungated = replace(stale, card_id="FX-ADD@broken", not_gated="configuration broken: required: false")
    assert status_exit_code([fresh, ungated]) == 0 and status_exit_code([ungated]) == 1


def test_the_cells_of_a_card_and_the_subjects_of_their_run_read_back(tmp_path):
    data = doc_json_at("2026-01-01T00:00:00Z")
    add = next(c for c in data["cards"] if c["id"] == "FX-ADD")
    data["cards"] += [{**copy.deepcopy(add), "id": f"FX-ADD@{name}"} for name in ("shout", "broken")]
    data["cards"].append({**copy.deepcopy(add), "id": "FX-ADDX@shout"})  # another card sharing the prefix
    subject = {"reason": "r", "settings": {"FX_SHOUT": "1"}, "required": True, "runnable": True}
    data["header"]["subjects"] = [{**subject, "name": "shout"}, {**subject, "name": "broken", "required": False}]
    with Ledger(tmp_path / "l.sqlite") as ledger:
        run_id = ledger.record(RunDocument.from_json(data))
        plain = ledger.record(doc_at("2026-01-02T00:00:00Z"))
        assert ledger.cells("FX-ADD") == ["FX-ADD@broken", "FX-ADD@shout"] and ledger.cells("FX-LOOSE") == []
        got = {s.name: (dict(s.settings), s.required) for s in ledger.subjects(run_id)}
        assert got == {"shout": ({"FX_SHOUT": "1"}, True), "broken": ({"FX_SHOUT": "1"}, False)}
        assert ledger.subjects(plain) == () and ledger.subjects(999) == ()
