"""Where things are: the kvproof checkout, the project under proof, the card schema.

Two roots, kept apart on purpose:

- :data:`KVPROOF_HOME`, the checkout this harness runs from (``harness/``,
  ``run_obligations.py``, ``.cache/`` with the oracle export and the
  weights cache). Witness processes get it on ``PYTHONPATH`` so they can
  import the harness plugin.
- :func:`project_root`, the project whose cards, witnesses and impl are
  run: ``KVPROOF_ROOT`` when set (tests point it at a fixture project),
  else the checkout itself. Paths in cards are relative to it.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import UsageError

KVPROOF_HOME = Path(__file__).resolve().parents[1]
SCHEMA_PATH = KVPROOF_HOME / "obligations" / "card.schema.json"


def project_root() -> Path:
    """``KVPROOF_ROOT`` (which must be a folder) or :data:`KVPROOF_HOME`; raises UsageError otherwise."""
    env = os.environ.get("KVPROOF_ROOT")
    if env:
        root = Path(env).expanduser().resolve()
        if not root.is_dir():
            raise UsageError(f"KVPROOF_ROOT={env!r} is not a folder; point it at the project root or unset it")
        return root
    return KVPROOF_HOME
