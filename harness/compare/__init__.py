"""COMPARE: two runs -> what changed, and which changes regress (``run_obligations.py compare``, ``--baseline``).

- ``diff``: two documents -> the comparison (pure): verdicts, evidence
  beyond thresholds, scores.
- ``runs``: finding a run: a report folder, a ``verdicts.json``, a ledger
  run id, ``latest``.
- ``render``: the comparison as terminal, Markdown, HTML and JSON.
"""
