"""Write the verdicts document (``--json PATH``) exactly as the builder made it."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


def _clean(value: Any) -> Any:
    """JSON has no NaN/Infinity: write them as strings so the file stays standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(_clean(doc), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write(doc: dict[str, Any], path: Path) -> None:
    """Write atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(dumps(doc), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # after a failed replace (e.g. path is a folder) no stray file stays
