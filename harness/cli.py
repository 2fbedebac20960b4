"""run_obligations.py command line (skeleton: the harness issue fills it in)."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "oracle":
        from harness.oracle.cli import main as oracle_main

        return oracle_main(argv[1:])
    print("usage: run_obligations.py oracle {export,status,verify} [...]", file=sys.stderr)
    return 2
