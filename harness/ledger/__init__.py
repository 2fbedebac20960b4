"""The ledger: every run's document kept in SQLite (``reports/ledger.sqlite``), and every question asked of it.

- ``history``: :class:`Ledger` writes a run in one transaction and answers
  every query (:class:`PastVerdict`, trends, mutation scores, timings).
- ``schema``: its tables (runs, verdicts, bound files, evidence, mutation)
  and the migrations, append-only.
- ``store``: the file opened: migrated, lock waited for, damage refused,
  SQLite errors -> :class:`LedgerError`.
"""
