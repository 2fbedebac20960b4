"""The SmolLM2 oracle: a transformers reference exported once, then checked.

- ``prompts``: the reference inputs (pure data).
- ``store``: on-disk format, atomic writer, checks and loader (no torch).
- ``export``: runs transformers on the GGUF (the only torch importer).
- ``cli``: ``run_obligations.py oracle export|status|verify``.

Witnesses use ``open_oracle()`` through the ``oracle`` fixture; it raises
OracleMissing / OracleCorrupt / OracleStale with the command that fixes it.
"""

from harness.oracle.store import EXPORT_COMMAND, Oracle, open_oracle, resolve_oracle_dir

__all__ = ["EXPORT_COMMAND", "Oracle", "open_oracle", "resolve_oracle_dir"]
