"""The ledger file opened: schema migrated, locks waited for, damage refused, SQLite errors said in full.

:class:`LedgerFile` is what :class:`harness.ledger.history.Ledger` reads and writes
through: it opens (``create``: or starts) the SQLite file, migrates an older
schema forward in one transaction (:mod:`harness.ledger.schema`), refuses a
newer one, a file that is not a regular file, an SQLite database that is not
a ledger and a ledger missing a table, and runs every statement through
:meth:`LedgerFile.guard`.

Locks: SQLite lets one process write at a time. A ledger another process
holds (a run recording, an open ``sqlite3`` shell) is waited for, with a
line on stderr, for up to ``KVPROOF_LEDGER_TIMEOUT`` seconds
(:data:`DEFAULT_LOCK_TIMEOUT_S`), then :class:`LedgerLocked`.

Raises :class:`LedgerError` (also an ``OSError``) when the file cannot be
opened, was written by a newer kvproof, is not a regular file, or any read
or write fails: :class:`LedgerDamaged` for a damaged file (garbled pages, a
missing table, a row that is not JSON), :class:`LedgerLocked` for a lock
held too long, each one paragraph naming the file and the fix. No
``sqlite3`` exception leaves the ledger modules.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self, TypeVar

from harness.errors import LedgerDamaged, LedgerError, LedgerLocked, UsageError
from harness.inputs import what_it_is
from harness.ledger import schema
from harness.ledger.schema import SCHEMA_VERSION, TABLES

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


def guarded(method: Callable[..., T]) -> Callable[..., T]:
    """A reading method of a :class:`LedgerFile` whose SQLite errors become LedgerError (waiting for a held lock
    first)."""

    @functools.wraps(method)
    def call(self: LedgerFile, *args: Any, **kwargs: Any) -> T:
        return self.guard(lambda: method(self, *args, **kwargs), "read it")

    return call


class LedgerFile:
    """An open ledger file. Use as a context manager, or call :meth:`close`."""

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
            self.guard(self._migrate, "open it")
            self.guard(self._check_tables, "open it")
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

    def guard(self, fn: Callable[[], T], doing: str) -> T:
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

    def __enter__(self) -> Self:
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
            for step in schema.MIGRATIONS[version:]:
                step(self.conn)
            self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def transaction(self, doing: str = "write to it") -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (KeyboardInterrupt included).

        BEGIN and COMMIT wait for a lock another process holds (see :meth:`guard`); a COMMIT that fails
        rolls back, so the ledger is as it was."""
        self.guard(lambda: self.conn.execute("BEGIN IMMEDIATE"), doing)
        try:
            yield self.conn
            self.guard(lambda: self.conn.execute("COMMIT"), doing)
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self.conn.in_transaction:  # SQLite rolls some failures back itself (a full disk)
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # closing the connection rolls back too

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
