"""SQLite history of runs and verdicts: ``reports/ledger.sqlite``; what a run writes and what is read back.

Three modules: :mod:`harness.ledger.schema` (the tables, the migrations),
:mod:`harness.ledger.store` (opening, locks, damage, SQLite errors as
LedgerError) and this one, :class:`Ledger`: :meth:`Ledger.record` writes a
run, the other methods are the queries ``run``, ``status``, ``history``,
``compare`` and the reports ask.

Replays (``run --changed``): a card whose binding is what it was for one of
its PROVEN verdicts (the files it names, its environment, and every file its
witness processes read then: :func:`harness.plan.binding.rebind`) is not run
again; the run records a
``verdicts`` row with ``replay_of`` = the run_id of the run that produced
the evidence (always an original run, never another replay), the same
entry and bound files, and no ``evidence`` rows (the evidence lives in the
original run). :meth:`Ledger.originals` and :meth:`Ledger.last_matching` only ever return original
verdicts, so a chain of replays can never stand in for evidence: every
replay points straight at the run that proved it.

Writes: :meth:`Ledger.record` writes one run in one transaction. A run that
is interrupted before it (Ctrl-C, kill) leaves no trace; one killed inside
it is rolled back by SQLite's journal. Readers never see half a run.

Raises LedgerError (see :mod:`harness.ledger.store`); no ``sqlite3``
exception leaves this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from harness.errors import LedgerError
from harness.files import json_safe
from harness.ledger.schema import FILENAME, SCHEMA_VERSION
from harness.ledger.store import LedgerFile, guarded
from harness.plan.subjects import SEPARATOR
from harness.record.document import CardResult, MutationResult, RunDocument, SubjectInfo
from harness.statuses import Verdict

# where callers have always found them: the file name, the schema version, the error
__all__ = ["FILENAME", "SCHEMA_VERSION", "Ledger", "LedgerError", "PastVerdict", "changed_files"]


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


class Ledger(LedgerFile):
    """An open ledger: :meth:`record` a run, then ask. Use as a context manager, or call :meth:`close`."""

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
        return self.guard(lambda: self._record(doc, report_dir, before_commit), "record this run")

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
                if m is not None and m.measured_run is None and not m.partial:  # measured here, on a sample
                    c.execute(
                        "INSERT INTO mutation (run_id, card_id, bound_digest, score, killed, survived, timeout, "
                        "equivalent, error, sample, marks_digest) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
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
                            m.sample or None,
                            m.marks_digest or None,
                        ),
                    )
            if before_commit is not None:
                before_commit()
        return run_id

    # ------------------------------------------------------------ reading

    @guarded
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

    @guarded
    def history(self, card_id: str, limit: int | None = None) -> list[PastVerdict]:
        """Past verdicts of one card, oldest first by start time (the newest ``limit`` when given)."""
        sql = f"{_PAST} WHERE v.card_id = ? ORDER BY r.started DESC, v.run_id DESC" + (" LIMIT ?" if limit else "")
        rows = self.conn.execute(sql, (card_id, limit) if limit else (card_id,)).fetchall()
        return [_past(r) for r in reversed(rows)]

    def histories(self, card_ids: Iterable[str], limit: int | None = None) -> dict[str, list[PastVerdict]]:
        return {cid: self.history(cid, limit) for cid in card_ids}

    @guarded
    def last(self, card_id: str) -> PastVerdict | None:
        """The card's most recent verdict, or None when it never ran."""
        row = self.conn.execute(
            f"{_PAST} WHERE v.card_id = ? ORDER BY r.started DESC, v.run_id DESC LIMIT 1", (card_id,)
        ).fetchone()
        return _past(row) if row else None

    @guarded
    def last_with(self, card_id: str, verdict: str = Verdict.PROVEN) -> PastVerdict | None:
        """The newest run in which the card had ``verdict`` (a replay of it included: the card was that there),
        or None when it never had."""
        row = self.conn.execute(
            f"{_PAST} WHERE v.card_id = ? AND v.verdict = ? ORDER BY r.started DESC, v.run_id DESC LIMIT 1",
            (card_id, verdict),
        ).fetchone()
        return _past(row) if row else None

    @guarded
    def last_matching(
        self, card_id: str, digest: str, verdict: str = Verdict.PROVEN, profile: str | None = None
    ) -> PastVerdict | None:
        """The newest original ``verdict`` of the card whose bound files had exactly the digest ``digest``.

        Replays are never returned (their ``replay_of`` names the original,
        which is); with ``profile`` only runs of that Hypothesis profile
        count. One indexed lookup (``--changed`` tries :meth:`originals`, each against its read-set).
        """
        sql = (
            f"{_PAST} WHERE v.card_id = ? AND v.bound_digest = ? AND v.verdict = ? AND v.replay_of IS NULL"
            + (" AND r.profile = ?" if profile is not None else "")
            + " ORDER BY r.started DESC, v.run_id DESC LIMIT 1"
        )
        args = (card_id, digest, verdict) + ((profile,) if profile is not None else ())
        row = self.conn.execute(sql, args).fetchone()
        return _past(row) if row else None

    @guarded
    def originals(
        self, card_id: str, verdict: str = Verdict.PROVEN, profile: str | None = None, limit: int = 50
    ) -> list[PastVerdict]:
        """The card's original ``verdict`` verdicts (never a replay), newest first, the first of each bound digest,
        from its newest ``limit``; with ``profile`` only runs of that Hypothesis profile count. The candidates
        ``--changed`` tries, each against its own recorded binding (:func:`harness.plan.binding.rebind`)."""
        sql = (
            f"{_PAST} WHERE v.card_id = ? AND v.verdict = ? AND v.replay_of IS NULL"
            + (" AND r.profile = ?" if profile is not None else "")
            + " ORDER BY r.started DESC, v.run_id DESC LIMIT ?"
        )
        args = (card_id, verdict) + ((profile,) if profile is not None else ()) + (limit,)
        seen: set[str] = set()
        out = []
        for row in self.conn.execute(sql, args).fetchall():
            past = _past(row)
            if past.bound_digest not in seen:
                seen.add(past.bound_digest)
                out.append(past)
        return out

    @guarded
    def last_mutation(
        self,
        card_id: str,
        digest: str | None = None,
        *,
        sample: str | None = None,
        conditions: str | None = None,
        marks: str | None = None,
    ) -> tuple[int, str, MutationResult] | None:
        """(run_id, started, result) of the card's newest measured mutation score: with ``digest``, on those
        bytes; with ``sample``, measured on that sample (:attr:`harness.mutation.sample.Sample.key`: the floor's
        is the only one that judges a floor); with ``conditions``, on any sample whose mutants were judged so
        (:attr:`~harness.mutation.sample.Sample.conditions`: their results can be reused); with ``marks``,
        measured with those equivalence marks (:func:`harness.mutation.marks.marks_digest`). A row of an older
        ledger (sample or marks unknown) matches none of these."""
        where, args = ["m.card_id = ?"], [card_id]
        for clause, value in (
            ("m.bound_digest = ?", digest),
            ("m.sample = ?", sample),
            ("substr(m.sample, 1, ?) = ?", conditions),
            ("m.marks_digest = ?", marks),
        ):
            if value is not None:
                where.append(clause)
                args += [len(value) + 1, value + ";"] if clause.startswith("substr") else [value]
        sql = (
            "SELECT m.run_id, r.started FROM mutation m JOIN runs r ON r.run_id = m.run_id WHERE "
            + " AND ".join(where)
            + " ORDER BY m.run_id DESC LIMIT 1"
        )
        row = self.conn.execute(sql, args).fetchone()
        if row is None:
            return None
        result = self.entry(row[0], card_id).mutation
        return None if result is None else (row[0], row[1], result)

    @guarded
    def mutation_scores(self, card_id: str, limit: int = 20) -> list[tuple[int, str, float | None]]:
        """(run_id, started, score) of the card's measured mutation scores, oldest first (the newest ``limit``)."""
        rows = self.conn.execute(
            "SELECT m.run_id, r.started, m.score FROM mutation m JOIN runs r ON r.run_id = m.run_id "
            "WHERE m.card_id = ? ORDER BY m.run_id DESC LIMIT ?",
            (card_id, limit),
        ).fetchall()
        return list(reversed(rows))

    @guarded
    def bound_files(self, run_id: int, card_id: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT path, role, sha256 FROM bound_files WHERE run_id = ? AND card_id = ? ORDER BY rowid",
            (run_id, card_id),
        )
        return [{"path": p, "role": r, "sha256": s} for p, r, s in rows]

    @guarded
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

    @guarded
    def card_ids(self) -> set[str]:
        """Every card id with a recorded verdict."""
        return {cid for (cid,) in self.conn.execute("SELECT DISTINCT card_id FROM verdicts")}

    @guarded
    def cells(self, card_id: str) -> list[str]:
        """The ids ``CARD@SUBJECT`` of every other cell of the card with a recorded verdict (``--matrix``,
        ``--target``; :func:`harness.plan.subjects.cell_id`), sorted; the default cell is the card's own id."""
        prefix = card_id + SEPARATOR
        rows = self.conn.execute(
            "SELECT DISTINCT card_id FROM verdicts WHERE substr(card_id, 1, ?) = ? ORDER BY card_id",
            (len(prefix), prefix),
        )
        return [cid for (cid,) in rows]

    @guarded
    def subjects(self, run_id: int) -> tuple[SubjectInfo, ...]:
        """The subjects (configurations, targets) of a ``--matrix`` or ``--target`` run as its header recorded
        them; () for a plain run. LedgerDamaged when they do not read back."""
        row = self.conn.execute("SELECT header_json FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return ()
        what = f"runs.header_json of run_id={run_id}"
        found = self.loads(row[0], what).get("subjects") or []
        names = {f.name for f in fields(SubjectInfo)}
        try:
            return tuple(SubjectInfo(**{k: v for k, v in s.items() if k in names}) for s in found)
        except (TypeError, AttributeError) as exc:
            raise self.damaged(what, f"its subjects: {exc}") from None

    @guarded
    def run_row(self, run_id: int) -> tuple[str, str, str | None] | None:
        """(header_json, started, report_dir) of one run, or None when there is no such run."""
        return self.conn.execute(
            "SELECT header_json, started, report_dir FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()

    @guarded
    def run_entries(self, run_id: int) -> list[str]:
        """The entry_json of every card of one run, in the order they were recorded."""
        rows = self.conn.execute("SELECT entry_json FROM verdicts WHERE run_id = ? ORDER BY rowid", (run_id,))
        return [e for (e,) in rows]

    @guarded
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

    @guarded
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
