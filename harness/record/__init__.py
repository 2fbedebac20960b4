"""RECORD: the typed run document, built from the judged cells, with where and how the run happened.

- ``document``: :class:`RunDocument` and its parts (frozen dataclasses) and
  their one JSON form (``verdicts.json``, ``--json``,
  ``obligations/verdicts.schema.json``).
- ``build``: judged cells -> the run document (texts made safe).
- ``provenance``: commit, host, numerics path, the UTC clock of a run.

The ledger (:mod:`harness.ledger`) keeps documents; the report
(:mod:`harness.report`) renders them.
"""
