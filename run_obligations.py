#!/usr/bin/env python3
"""kvproof: run the theorem cards in obligations/ and write verdict reports.

Thin entry point; everything lives in harness.cli.
"""

import sys
from pathlib import Path

# NOTE: bytecode, as for witness processes (harness.execute.watch.witness_env): with PYTHONDONTWRITEBYTECODE set, every
# run compiled the harness from source (~0.7 s). The runner keeps its bytecode under .cache/pycache, never
# in a __pycache__ of the source tree; a .pyc is checked against its source's mtime and size on import.
# With a prefix set, Python reads .pyc files only under it: the installed libraries (and standard modules)
# the runner uses are imported first, from their own __pycache__ (pip and the Python install compiled
# them), so a fresh checkout's first run does not compile them into an empty prefix (about 2 s;
# harness.execute.zygote.preload does the same for witness processes).
if sys.dont_write_bytecode and sys.pycache_prefix is None:
    for _name in (
        "argparse",
        "sqlite3",
        "importlib.metadata",
        "xml.etree.ElementTree",
        "difflib",
        "subprocess",
        "socket",
        "queue",
        "secrets",
        "html",
        "csv",
        "shlex",
        "yaml",
        "jsonschema",
        "jinja2",
        "rich.console",
        "rich.table",
        "rich.progress",
        "cattrs",
        "numpy",
    ):
        try:
            __import__(_name)
        except ImportError:  # the command that needs it says so
            pass
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(Path(__file__).resolve().parent / ".cache" / "pycache")

from harness.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
