"""File content as the harness records it: sha256 of bytes, and values made safe for standard JSON.

impl keeps its own ``impl.model.weights.sha256_file``: impl is the project
under proof and never imports the harness.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

CHUNK = 1 << 20


def sha256_file(path: Path) -> str | None:
    """sha256 hex of the file's bytes, read in 1 MiB chunks; None when it cannot be read (missing, a folder)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while block := fh.read(CHUNK):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities written as strings (``"nan"``, ``"inf"``): JSON has neither."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
