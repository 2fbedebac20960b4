"""The verdicts document as standard JSON (``--json PATH`` and ``verdicts.json``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.files import json_safe
from harness.record.document import RunDocument


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(json_safe(doc), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write(doc: RunDocument, path: Path) -> None:
    """Write the document's JSON form atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(dumps(doc.to_json()), encoding="utf-8", errors="backslashreplace")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # after a failed replace (e.g. path is a folder) no stray file stays
