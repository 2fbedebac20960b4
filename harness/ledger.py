"""SQLite history of runs and verdicts: ``reports/ledger.sqlite``.

Tables (schema version in ``PRAGMA user_version``, see ``MIGRATIONS``):

- ``runs``: one row per run; the header of the verdicts document (when,
  commit and dirty flag, host, profile, seed, gate) and the report folder.
- ``verdicts``: one row per (run, card): verdict, reason, headline, the
  card's whole entry of the verdicts document as JSON, and ``bound_digest``,
  the sha256 over the sorted ``path role sha256`` lines of every file the
  verdict is bound to. "The last PROVEN verdict whose bound files all have
  the same sha256 as now" is then one indexed query (:meth:`Ledger.last_matching`).
- ``bound_files``: the (path, role, sha256) of every bound file of every
  verdict, so ``status`` can name the files that changed.
- ``evidence``: every value a witness or control recorded, one row per
  (witness, node, key), the value as JSON.
- ``mutation``: one row per (run, card) whose mutation score that run
  measured (``mutate``): the digest of the bytes it was measured on, the
  score and counts; the mutants themselves are in the card's entry.
  :meth:`Ledger.last_mutation` is what ``run`` and ``status`` read.

Replays (``run --changed``): a card whose bound files are byte-identical to
those of its last PROVEN verdict is not run again; the run records a
``verdicts`` row with ``replay_of`` = the run_id of the run that produced
the evidence (always an original run, never another replay), the same
entry and bound files, and no ``evidence`` rows (the evidence lives in the
original run). :meth:`Ledger.last_matching` only ever returns original
verdicts, so a chain of replays can never stand in for evidence: every
replay points straight at the run that proved it.

Writes: :meth:`Ledger.record` writes one run in one transaction. A run that
is interrupted before it (Ctrl-C, kill) leaves no trace; one killed inside
it is rolled back by SQLite's journal. Readers never see half a run.

Locks: SQLite lets one process write at a time. A ledger another process
holds (a run recording, an open ``sqlite3`` shell) is waited for, with a
line on stderr, for up to ``KVPROOF_LEDGER_TIMEOUT`` seconds
(:data:`DEFAULT_LOCK_TIMEOUT_S`), then :class:`LedgerLocked`.

Raises :class:`LedgerError` (also an ``OSError``) when the file cannot be
opened, was written by a newer kvproof, is not a regular file, or any read
or write fails: :class:`LedgerDamaged` for a damaged file (garbled pages, a
missing table, a row that is not JSON), :class:`LedgerLocked` for a lock
held too long, each one paragraph naming the file and the fix. No
``sqlite3`` exception leaves this module.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harness.document import CardResult, MutationResult, RunDocument
from harness.errors import LedgerDamaged, LedgerError, LedgerLocked, UsageError
from harness.files import json_safe
from harness.inputs import what_it_is
from harness.statuses import Verdict

SCHEMA_VERSION = 3
FILENAME = "ledger.sqlite"
TABLES = ("runs", "verdicts", "bound_files", "evidence", "mutation")  # what a ledger of SCHEMA_VERSION holds
TIMEOUT_ENV = "KVPROOF_LEDGER_TIMEOUT"
DEFAULT_LOCK_TIMEOUT_S = 120.0  # how long a held lock is waited for
FIRST_TRY_S = 0.5  # waited without a word: a run's COMMIT takes milliseconds

T = TypeVar("T")


def lock_timeout() -> float:
    """Seconds to wait for a ledger lock another process holds: ``KVPROOF_LEDGER_TIMEOUT``, else 120.

    Raises UsageError for a value that is not a number from 0 to 86400.
    """
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (0 <= value <= 86400):
        raise UsageError(
            f"{TIMEOUT_ENV}={raw!r} is not a number of seconds from 0 to 86400; it is how long a run waits for "
            f"the ledger lock another process holds (default {DEFAULT_LOCK_TIMEOUT_S:g}); set a number or unset it"
        )
    return value


def damage_fix(path: Path) -> str:
    """What to do about a damaged ledger, with the commands."""
    return (
        f"move it aside to start a new history (`mv {path} {path}.damaged`: the next run starts a new ledger; "
        f"the report folders stay), or salvage what is readable with `sqlite3 {path} .recover | sqlite3 "
        f"{path}.recovered` and put that file in its place"
    )


def _busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc)


def _guarded(method: Callable[..., T]) -> Callable[..., T]:
    """A reading method of :class:`Ledger` whose SQLite errors become LedgerError (waiting for a held lock first)."""

    @functools.wraps(method)
    def call(self: Ledger, *args: Any, **kwargs: Any) -> T:
        return self._guard(lambda: method(self, *args, **kwargs), "read it")

    return call


def _script(conn: sqlite3.Connection, sql: str) -> None:
    """Run ``;``-separated DDL inside the caller's transaction.

    NOTE: ``executescript`` would COMMIT first, breaking the one-transaction rule.
    """
    for statement in sql.split(";"):
        if statement.strip():
            conn.execute(statement)


def _v1(conn: sqlite3.Connection) -> None:
    _script(
        conn,
        """
        CREATE TABLE runs (
            run_id      INTEGER PRIMARY KEY,
            started     TEXT NOT NULL,      -- UTC ISO 8601 with Z
            finished    TEXT,
            duration_s  REAL,
            git_commit  TEXT,
            git_dirty   INTEGER,            -- 0/1, NULL unknown
            host        TEXT,
            profile     TEXT,
            seed        INTEGER,
            liars       INTEGER,
            command     TEXT,
            gate        TEXT NOT NULL,      -- PASS | FAIL
            report_dir  TEXT,               -- folder name under reports/, NULL when none was written
            header_json TEXT NOT NULL       -- the whole header of the verdicts document
        );
        CREATE TABLE verdicts (
            run_id       INTEGER NOT NULL REFERENCES runs(run_id),
            card_id      TEXT NOT NULL,
            verdict      TEXT NOT NULL,
            reason       TEXT NOT NULL,
            headline     TEXT,
            duration_s   REAL,
            fingerprint  TEXT,              -- sha256 of the card file
            bound_digest TEXT NOT NULL,     -- see bound_digest()
            entry_json   TEXT NOT NULL,     -- the card's entry of the verdicts document
            PRIMARY KEY (run_id, card_id)
        );
        CREATE INDEX verdicts_by_card ON verdicts (card_id, run_id);
        CREATE INDEX runs_by_start ON runs (started, run_id);
        CREATE INDEX verdicts_by_digest ON verdicts (card_id, bound_digest, verdict);
        CREATE TABLE bound_files (
            run_id  INTEGER NOT NULL,
            card_id TEXT NOT NULL,
            path    TEXT NOT NULL,
            role    TEXT NOT NULL,
            sha256  TEXT,                   -- NULL: the file was missing
            PRIMARY KEY (run_id, card_id, path)
        );
        CREATE TABLE evidence (
            run_id     INTEGER NOT NULL,
            card_id    TEXT NOT NULL,
            witness_id TEXT NOT NULL,
            kind       TEXT NOT NULL,       -- witness | control
            nodeid     TEXT NOT NULL,
            key        TEXT NOT NULL,
            value_json TEXT NOT NULL
        );
        CREATE INDEX evidence_by_card ON evidence (card_id, witness_id, key);
    """,
    )


def _v2(conn: sqlite3.Connection) -> None:
    # replay_of: NULL for a verdict computed in this run; else the run_id whose evidence it replays
    conn.execute("ALTER TABLE verdicts ADD COLUMN replay_of INTEGER REFERENCES runs(run_id)")


def _v3(conn: sqlite3.Connection) -> None:
    # one row per card per run that *measured* its mutation score (mutate); the mutants are in entry_json
    _script(
        conn,
        """
        CREATE TABLE mutation (
            run_id       INTEGER NOT NULL REFERENCES runs(run_id),
            card_id      TEXT NOT NULL,
            bound_digest TEXT NOT NULL,
            score        REAL,               -- NULL: nothing scored
            killed       INTEGER NOT NULL,
            survived     INTEGER NOT NULL,
            timeout      INTEGER NOT NULL,
            equivalent   INTEGER NOT NULL,
            error        INTEGER NOT NULL,
            PRIMARY KEY (run_id, card_id)
        );
        CREATE INDEX mutation_by_card ON mutation (card_id, run_id);
    """,
    )


# Index i migrates a ledger from version i to i + 1. Append, never edit.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2, _v3)
assert len(MIGRATIONS) == SCHEMA_VERSION


@dataclass(frozen=True)
class PastVerdict:
    """One card verdict as recorded, with the run it came from."""

    run_id: int
    started: str
    card_id: str
    verdict: str
    reason: str
    headline: str | None
    bound_digest: str
    git_commit: str | None
    git_dirty: bool | None
    profile: str | None
    seed: int | None
    report_dir: str | None
    replay_of: int | None = None  # the original run_id when this verdict was replayed (``--changed``)
    replayed_started: str | None = None  # that original run's start time

    @property
    def evidence_run_id(self) -> int:
        """The run whose witnesses actually produced this verdict."""
        return self.replay_of if self.replay_of is not None else self.run_id

    def entry(self, ledger: Ledger) -> CardResult:
        return ledger.entry(self.run_id, self.card_id)


_PAST = """SELECT v.run_id, r.started, v.card_id, v.verdict, v.reason, v.headline, v.bound_digest,
                  r.git_commit, r.git_dirty, r.profile, r.seed, r.report_dir, v.replay_of, o.started
           FROM verdicts v JOIN runs r ON r.run_id = v.run_id LEFT JOIN runs o ON o.run_id = v.replay_of"""


def _past(row: tuple) -> PastVerdict:
    values = list(row)
    values[8] = None if values[8] is None else bool(values[8])
    return PastVerdict(*values)


class Ledger:
    """An open ledger. Use as a context manager, or call :meth:`close`."""

    def __init__(self, path: Path, *, create: bool = True, timeout: float | None = None) -> None:
        """Open (``create``: or start) the ledger at ``path``; ``timeout``: seconds to wait for a lock another
        process holds (default :func:`lock_timeout`). Raises LedgerError (see the module docstring)."""
        self.path = Path(path)
        self.timeout = lock_timeout() if timeout is None else timeout
        other = what_it_is(self.path)
        if other is not None:
            raise LedgerError(
                f"the ledger {self.path} is {other}, not a regular file (an SQLite database); move it away, "
                "or give another --reports DIR"
            )
        if not create and not self.path.exists():
            raise LedgerError(f"no ledger at {self.path}; run the obligations once to start one")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a transaction is exactly one run
            self.conn = sqlite3.connect(str(self.path), timeout=FIRST_TRY_S, isolation_level=None)
        except (sqlite3.Error, OSError) as exc:
            raise LedgerError(
                f"the ledger {self.path} cannot be opened ({exc}); fix the permissions of the file and its "
                "folder, or give another --reports DIR"
            ) from None
        try:
            self.conn.execute("PRAGMA foreign_keys = ON")
            self._guard(self._migrate, "open it")
            self._guard(self._check_tables, "open it")
        except BaseException:
            self.conn.close()
            raise

    def _check_tables(self) -> None:
        have = {name for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in TABLES if t not in have]
        if missing:
            raise LedgerDamaged(
                f"the ledger {self.path} is damaged: it has no table {', '.join(missing)} (a ledger of schema "
                f"version {SCHEMA_VERSION} has {', '.join(TABLES)}), so its history cannot be read; "
                + damage_fix(self.path)
            )

    def _guard(self, fn: Callable[[], T], doing: str) -> T:
        """``fn()``; a lock another process holds is waited for (one line on stderr) for up to ``self.timeout``
        seconds; any SQLite error becomes LedgerLocked, LedgerDamaged or LedgerError saying what to do."""
        try:
            return fn()
        except sqlite3.Error as exc:
            if not _busy(exc) or self.timeout <= FIRST_TRY_S:
                raise self._failure(exc, doing) from None
        print(
            f"waiting for the ledger lock held by another process on {self.path} "
            f"(up to {self.timeout:g} s; {TIMEOUT_ENV} sets it)",
            file=sys.stderr,
            flush=True,
        )
        self.conn.execute(f"PRAGMA busy_timeout = {int((self.timeout - FIRST_TRY_S) * 1000)}")
        try:
            return fn()
        except sqlite3.Error as exc:
            raise self._failure(exc, doing) from None
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {int(FIRST_TRY_S * 1000)}")

    def _failure(self, exc: sqlite3.Error, doing: str) -> LedgerError:
        """The LedgerError for an SQLite error met while doing ``doing`` ("read it", "record this run")."""
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        text = str(exc)
        said = f"(SQLite: {text if len(text) <= 160 else text[:157] + '...'})"
        if _busy(exc):
            return LedgerLocked(
                f"the ledger {self.path} is locked by another process, which held it for more than "
                f"{self.timeout:g} s ({TIMEOUT_ENV}), so kvproof could not {doing} {said}; let that process "
                f"finish (a run recording its verdicts, or an open `sqlite3` shell: `fuser {self.path}` names "
                f"it) and try again, or raise {TIMEOUT_ENV}. The file itself is fine: do not move it aside"
            )
        if code == sqlite3.SQLITE_FULL:
            return LedgerError(
                f"the ledger {self.path}: the disk, or the file-size limit (`ulimit -f`), is full, so kvproof "
                f"could not {doing} {said}; free space or raise the limit, then run again. The ledger is as it "
                "was before"
            )
        if code == sqlite3.SQLITE_IOERR:
            return LedgerError(
                f"the ledger {self.path}: an I/O error, so kvproof could not {doing} {said}; check the disk, its "
                "free space and the file-size limit (`ulimit -f`), then run again. If `sqlite3 "
                f"{self.path} 'PRAGMA integrity_check'` then reports damage: " + damage_fix(self.path)
            )
        if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_AUTH):
            return LedgerError(
                f"the ledger {self.path} cannot be written, so kvproof could not {doing} {said}; fix the "
                "permissions of the file and its folder, or give another --reports DIR"
            )
        return LedgerDamaged(
            f"the ledger {self.path} is damaged, so kvproof could not {doing} {said}; " + damage_fix(self.path)
        )

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    @property
    def version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        version = self.version
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"ledger {self.path} has schema version {version}, newer than this kvproof "
                f"understands ({SCHEMA_VERSION}); update kvproof or use another --reports folder"
            )
        if version == SCHEMA_VERSION:
            return
        if version == 0:  # a new, empty file; an SQLite database with tables of its own is someone else's
            theirs = [n for (n,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            if theirs:
                raise LedgerError(
                    f"{self.path} is an SQLite database but not a kvproof ledger (no schema version; tables "
                    f"{', '.join(theirs[:5])}), so kvproof will not add its tables to it; move it away, or give "
                    "another --reports DIR"
                )
        with self.transaction():
            for step in MIGRATIONS[version:]:
                step(self.conn)
            self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def transaction(self, doing: str = "write to it") -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (KeyboardInterrupt included).

        BEGIN and COMMIT wait for a lock another process holds (see :meth:`_guard`); a COMMIT that fails
        rolls back, so the ledger is as it was."""
        self._guard(lambda: self.conn.execute("BEGIN IMMEDIATE"), doing)
        try:
            yield self.conn
            self._guard(lambda: self.conn.execute("COMMIT"), doing)
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self.conn.in_transaction:  # SQLite rolls some failures back itself (a full disk)
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # closing the connection rolls back too

    # ------------------------------------------------------------ writing

    def record(
        self, doc: RunDocument, report_dir: str | None = None, before_commit: Callable[[], None] | None = None
    ) -> int:
        """Write one run in one transaction; returns its run_id.

        ``before_commit`` runs inside the transaction after every row is
        written (the CLI moves the report folder into place there): if it
        raises, nothing is recorded. Any SQLite error (full disk, I/O, a lock
        held too long, damage) rolls back and raises LedgerError.
        """
        return self._guard(lambda: self._record(doc, report_dir, before_commit), "record this run")

    def _record(self, doc: RunDocument, report_dir: str | None, before_commit: Callable[[], None] | None) -> int:
        head = doc.header
        with self.transaction("record this run") as c:
            cur = c.execute(
                "INSERT INTO runs (started, finished, duration_s, git_commit, git_dirty, host, profile, seed, "
                "liars, command, gate, report_dir, header_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    head.started,
                    head.finished,
                    head.duration_s,
                    head.git.commit,
                    None if head.git.dirty is None else int(head.git.dirty),
                    head.host.name,
                    head.profile,
                    head.seed,
                    int(head.liars),
                    head.command,
                    head.summary.gate,
                    report_dir,
                    _dumps(doc.to_json()["header"]),
                ),
            )
            run_id = int(cur.lastrowid)
            for card in doc.cards:
                replay_of = card.replayed_from.run_id if card.replayed_from else None
                c.execute(
                    "INSERT INTO verdicts (run_id, card_id, verdict, reason, headline, duration_s, fingerprint, "
                    "bound_digest, entry_json, replay_of) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (
                        run_id,
                        card.id,
                        card.verdict,
                        card.reason,
                        card.headline.text if card.headline else None,
                        card.duration_s,
                        card.fingerprint,
                        card.bound_digest,
                        _dumps(card.to_json()),
                        replay_of,
                    ),
                )
                c.executemany(
                    "INSERT OR IGNORE INTO bound_files VALUES (?,?,?,?,?)",
                    [(run_id, card.id, b.path, b.role, b.sha256) for b in card.bound_files],
                )
                if replay_of is None:  # a replay's evidence is the original run's rows
                    c.executemany("INSERT INTO evidence VALUES (?,?,?,?,?,?,?)", list(_evidence_rows(run_id, card)))
                m = card.mutation
                if m is not None and m.measured_run is None and not m.partial:  # measured here, in full
                    c.execute(
                        "INSERT INTO mutation VALUES (?,?,?,?,?,?,?,?,?)",
                        (
                            run_id,
                            card.id,
                            m.bound_digest,
                            m.score,
                            m.killed,
                            m.survived,
                            m.timeout,
                            m.equivalent,
                            m.error,
                        ),
                    )
            if before_commit is not None:
                before_commit()
        return run_id

    # ------------------------------------------------------------ reading

    @_guarded
    def runs(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs, newest first: run_id, started, git_commit, git_dirty, profile, seed, gate, report_dir, cards."""
        sql = (
            "SELECT r.run_id, r.started, r.git_commit, r.git_dirty, r.profile, r.seed, r.gate, r.report_dir, "
            "r.duration_s, (SELECT COUNT(*) FROM verdicts v WHERE v.run_id = r.run_id) "
            "FROM runs r ORDER BY r.started DESC, r.run_id DESC" + (" LIMIT ?" if limit else "")
        )
        keys = (
            "run_id",
            "started",
            "git_commit",
            "git_dirty",
            "profile",
            "seed",
            "gate",
            "report_dir",
            "duration_s",
            "cards",
        )
        return [dict(zip(keys, row, strict=True)) for row in self.conn.execute(sql, (limit,) if limit else ())]

    @_guarded
    def history(self, card_id: str, limit: int | None = None) -> list[PastVerdict]:
        """Past verdicts of one card, oldest first by start time (the newest ``limit`` when given)."""
        sql = f"{_PAST} WHERE v.card_id = ? ORDER BY r.started DESC, v.run_id DESC" + (" LIMIT ?" if limit else "")
        rows = self.conn.execute(sql, (card_id, limit) if limit else (card_id,)).fetchall()
        return [_past(r) for r in reversed(rows)]

    def histories(self, card_ids: Iterable[str], limit: int | None = None) -> dict[str, list[PastVerdict]]:
        return {cid: self.history(cid, limit) for cid in card_ids}

    @_guarded
    def last(self, card_id: str) -> PastVerdict | None:
        """The card's most recent verdict, or None when it never ran."""
        row = self.conn.execute(
            f"{_PAST} WHERE v.card_id = ? ORDER BY r.started DESC, v.run_id DESC LIMIT 1", (card_id,)
        ).fetchone()
        return _past(row) if row else None

    @_guarded
    def last_matching(
        self, card_id: str, digest: str, verdict: str = Verdict.PROVEN, profile: str | None = None
    ) -> PastVerdict | None:
        """The newest original ``verdict`` of the card whose bound files had exactly the digest ``digest``.

        Replays are never returned (their ``replay_of`` names the original,
        which is); with ``profile`` only runs of that Hypothesis profile
        count. This is the replay query of ``--changed``: one indexed lookup.
        """
        sql = (
            f"{_PAST} WHERE v.card_id = ? AND v.bound_digest = ? AND v.verdict = ? AND v.replay_of IS NULL"
            + (" AND r.profile = ?" if profile is not None else "")
            + " ORDER BY r.started DESC, v.run_id DESC LIMIT 1"
        )
        args = (card_id, digest, verdict) + ((profile,) if profile is not None else ())
        row = self.conn.execute(sql, args).fetchone()
        return _past(row) if row else None

    @_guarded
    def last_mutation(self, card_id: str, digest: str | None = None) -> tuple[int, str, MutationResult] | None:
        """(run_id, started, result) of the card's newest measured mutation score (with ``digest``: on those bytes)."""
        sql = (
            "SELECT m.run_id, r.started FROM mutation m JOIN runs r ON r.run_id = m.run_id WHERE m.card_id = ?"
            + (" AND m.bound_digest = ?" if digest is not None else "")
            + " ORDER BY m.run_id DESC LIMIT 1"
        )
        row = self.conn.execute(sql, (card_id,) + ((digest,) if digest is not None else ())).fetchone()
        if row is None:
            return None
        result = self.entry(row[0], card_id).mutation
        return None if result is None else (row[0], row[1], result)

    @_guarded
    def mutation_scores(self, card_id: str, limit: int = 20) -> list[tuple[int, str, float | None]]:
        """(run_id, started, score) of the card's measured mutation scores, oldest first (the newest ``limit``)."""
        rows = self.conn.execute(
            "SELECT m.run_id, r.started, m.score FROM mutation m JOIN runs r ON r.run_id = m.run_id "
            "WHERE m.card_id = ? ORDER BY m.run_id DESC LIMIT ?",
            (card_id, limit),
        ).fetchall()
        return list(reversed(rows))

    @_guarded
    def bound_files(self, run_id: int, card_id: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT path, role, sha256 FROM bound_files WHERE run_id = ? AND card_id = ? ORDER BY rowid",
            (run_id, card_id),
        )
        return [{"path": p, "role": r, "sha256": s} for p, r, s in rows]

    @_guarded
    def entry(self, run_id: int, card_id: str) -> CardResult:
        """The card's whole result in that run (entries of older kvproof versions are upgraded as read);
        LedgerDamaged when the stored entry is not JSON or not a card entry."""
        row = self.conn.execute(
            "SELECT entry_json FROM verdicts WHERE run_id = ? AND card_id = ?", (run_id, card_id)
        ).fetchone()
        if row is None:
            raise LedgerError(f"no verdict for card_id={card_id!r} in run_id={run_id}")
        what = f"verdicts.entry_json of run_id={run_id} card_id={card_id!r}"
        entry = self.loads(row[0], what)
        try:
            return CardResult.from_json(entry)
        except Exception as exc:  # cattrs raises its own exception groups: name the row, not the traceback
            raise self.damaged(what, f"{type(exc).__name__}: {str(exc)[:200]}") from None

    def damaged(self, what: str, why: str) -> LedgerDamaged:
        """LedgerDamaged for one stored value (``what`` names its row) that does not read back."""
        return LedgerDamaged(
            f"the ledger {self.path} is damaged: {what} does not read as what kvproof wrote ({why}); "
            + damage_fix(self.path)
        )

    def loads(self, text: Any, what: str) -> Any:
        """``json.loads(text)`` of a stored JSON object (``what`` names its row), else LedgerDamaged."""
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise self.damaged(what, f"not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise self.damaged(what, f"a JSON {type(value).__name__}, not an object")
        return value

    @_guarded
    def card_ids(self) -> set[str]:
        """Every card id with a recorded verdict."""
        return {cid for (cid,) in self.conn.execute("SELECT DISTINCT card_id FROM verdicts")}

    @_guarded
    def run_row(self, run_id: int) -> tuple[str, str, str | None] | None:
        """(header_json, started, report_dir) of one run, or None when there is no such run."""
        return self.conn.execute(
            "SELECT header_json, started, report_dir FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()

    @_guarded
    def run_entries(self, run_id: int) -> list[str]:
        """The entry_json of every card of one run, in the order they were recorded."""
        rows = self.conn.execute("SELECT entry_json FROM verdicts WHERE run_id = ? ORDER BY rowid", (run_id,))
        return [e for (e,) in rows]

    @_guarded
    def trend(self, card_id: str, limit: int) -> list[dict[str, Any]]:
        """The card's newest ``limit`` recorded verdicts, oldest first, as points for a trend picture:
        started, headline key/value/op/limit (from its entry), duration_s (None for a replay: it ran nothing)."""
        rows = self.conn.execute(
            "SELECT r.started, v.duration_s, v.replay_of, json_extract(v.entry_json, '$.headline.key'), "
            "json_extract(v.entry_json, '$.headline.value'), json_extract(v.entry_json, '$.headline.op'), "
            "json_extract(v.entry_json, '$.headline.limit') FROM verdicts v JOIN runs r ON r.run_id = v.run_id "
            "WHERE v.card_id = ? ORDER BY r.started DESC, v.run_id DESC LIMIT ?",
            (card_id, limit),
        ).fetchall()
        return [
            {
                "started": st,
                "duration_s": None if rep is not None else dur,
                "key": key,
                "value": val,
                "op": op,
                "limit": lim,
            }
            for st, dur, rep, key, val, op, lim in reversed(rows)
        ]

    @_guarded
    def run_count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])


def _dumps(value: Any) -> str:
    return json.dumps(json_safe(value), ensure_ascii=False, allow_nan=False, sort_keys=False)


def _evidence_rows(run_id: int, card: CardResult) -> Iterator[tuple]:
    for w in card.witnesses + card.controls:
        single = w.nodes[0].nodeid if w.nodes else w.test
        per_node = w.evidence if w.evidence_per_node else {single: w.evidence}
        for nodeid, values in per_node.items():
            if not isinstance(values, Mapping):
                continue
            for key, value in values.items():
                yield (run_id, card.id, w.id, w.kind, nodeid, key, _dumps(value))


def changed_files(recorded: Iterable[Mapping[str, Any]], current: Iterable[Mapping[str, Any]]) -> list[str]:
    """Human-readable differences between two bound-file lists: ``impl/kv.py changed``, ``... added``."""
    old = {f["path"]: f for f in recorded}
    new = {f["path"]: f for f in current}
    out = []
    for path, f in new.items():
        if path not in old:
            out.append(f"{path} newly bound")
        elif old[path].get("sha256") != f.get("sha256"):
            out.append(f"{path} {'missing' if f.get('sha256') is None else 'changed'}")
    out += [f"{path} no longer bound" for path in old if path not in new]
    return out
