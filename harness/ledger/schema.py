"""The ledger's tables and how an older ledger becomes this version (``reports/ledger.sqlite``).

Tables (schema version in ``PRAGMA user_version``, see :data:`MIGRATIONS`):

- ``runs``: one row per run; the header of the verdicts document (when,
  commit and dirty flag, host, profile, seed, gate) and the report folder.
- ``verdicts``: one row per (run, card): verdict, reason, headline, the
  card's whole entry of the verdicts document as JSON, and ``bound_digest``,
  the sha256 over the sorted ``path role sha256`` lines of every file the
  verdict is bound to. "The last PROVEN verdict whose bound files all have
  the same sha256 as now" is then one indexed query
  (:meth:`harness.ledger.history.Ledger.last_matching`). A matrix or target run
  keys its cells ``CARD@SUBJECT`` here (:func:`harness.plan.subjects.cell_id`).
- ``bound_files``: the (path, role, sha256) of every bound file of every
  verdict, so ``status`` can name the files that changed.
- ``evidence``: every value a witness or control recorded, one row per
  (witness, node, key), the value as JSON.
- ``mutation``: one row per (run, card) whose mutation score that run
  measured (``mutate``): the digest of the bytes it was measured on, the
  score and counts, and ``sample``, the sample it was measured on
  (:attr:`harness.mutation.sample.Sample.key`; the floor sample's key when its
  mutants were exactly the floor's; NULL for rows of ledgers before version 4,
  whose sample is unknown), and ``marks_digest``, the equivalence marks it was
  measured with (:func:`harness.mutation.marks.marks_digest`; NULL before
  version 5); the mutants themselves are in the card's entry.
  :meth:`harness.ledger.history.Ledger.last_mutation` is what ``run`` and ``status``
  read: only a row whose ``sample`` is the floor's, and whose bytes and marks
  are the card's now, judges a card's floor.

:mod:`harness.ledger.store` runs the migrations, in one transaction, when it
opens a ledger of an older version.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

SCHEMA_VERSION = 5
FILENAME = "ledger.sqlite"
TABLES = ("runs", "verdicts", "bound_files", "evidence", "mutation")  # what a ledger of SCHEMA_VERSION holds


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


def _v4(conn: sqlite3.Connection) -> None:
    # the sample a score was measured on (harness.mutation.sample.Sample.key); NULL: unknown (an older kvproof)
    _script(
        conn,
        """
        ALTER TABLE mutation ADD COLUMN sample TEXT;
        CREATE INDEX mutation_by_sample ON mutation (card_id, sample, bound_digest, run_id)
    """,
    )


def _v5(conn: sqlite3.Connection) -> None:
    # the equivalence marks a score was measured with (harness.mutation.marks.marks_digest); NULL: unknown
    _script(conn, "ALTER TABLE mutation ADD COLUMN marks_digest TEXT")


# Index i migrates a ledger from version i to i + 1. Append, never edit.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2, _v3, _v4, _v5)
assert len(MIGRATIONS) == SCHEMA_VERSION
