"""harness: loads theorem cards, runs their witnesses, decides verdicts.

The public surface, what witness conftests and users import (``__all__``):

- ``plugin``: the pytest plugin (the ``evidence`` fixture, Hypothesis
  profiles); a witnesses folder's conftest says ``pytest_plugins = ["harness.plugin"]``;
- ``prove`` and ``RunRequest``: one whole run, in-process (what
  ``run_obligations.py run`` does);
- ``liar``: the decorator that registers a liar.

Rule: anything else is internal and may move. This module imports nothing
at import time (the witness side must stay light: ``import harness.plugin``
loads only the wire); the names resolve on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["RunRequest", "liar", "plugin", "prove"]

_WHERE = {
    "plugin": ("harness.plugin", None),
    "prove": ("harness.pipeline", "prove"),
    "RunRequest": ("harness.request", "RunRequest"),
    "liar": ("harness.liars", "liar"),
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'harness' has no attribute {name!r}; its public names are {', '.join(__all__)}")
    module, attr = _WHERE[name]
    loaded = importlib.import_module(module)
    return loaded if attr is None else getattr(loaded, attr)


def __dir__() -> list[str]:
    return sorted(__all__)
