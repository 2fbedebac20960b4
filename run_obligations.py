#!/usr/bin/env python3
"""kvproof: run the theorem cards in obligations/ and write verdict reports.

Thin entry point; everything lives in harness.cli.
"""
import sys

from harness.cli import main

if __name__ == "__main__":
    sys.exit(main())
