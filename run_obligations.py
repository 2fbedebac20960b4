#!/usr/bin/env python3
"""kvproof: run the theorem cards in obligations/ and write verdict reports.

Thin entry point; everything lives in harness.cli.
"""
import sys
from pathlib import Path

# NOTE: bytecode, as for witness processes (harness.run._env): where PYTHONDONTWRITEBYTECODE is set, every
# run compiled the harness from source (~0.7 s). The runner keeps its bytecode under .cache/pycache, never
# in a __pycache__ of the source tree; a .pyc is checked against its source's mtime and size on import.
if sys.dont_write_bytecode and sys.pycache_prefix is None:
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(Path(__file__).resolve().parent / ".cache" / "pycache")

from harness.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
