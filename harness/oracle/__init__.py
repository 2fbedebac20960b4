"""The SmolLM2 oracle: a transformers reference exported once, then checked.

- ``prompts``: the reference inputs (pure data).
- ``store``: on-disk format, atomic writer, checks and loader (no torch);
  ``open_oracle()`` raises OracleMissing / OracleCorrupt / OracleStale with
  the command that fixes it.
- ``export``: runs transformers on the GGUF (the only torch importer).
- ``fixtures``: the ``oracle`` pytest fixture witnesses use (skips when the
  export is missing, damaged or from other weights).
- ``cli``: ``run_obligations.py oracle export|status|verify``.
"""
