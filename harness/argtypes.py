"""argparse value types that refuse what cannot work, with one line saying what is allowed.

argparse turns :class:`argparse.ArgumentTypeError` into ``usage: ...`` plus
``error: argument --timeout: ...`` and exit code 2, before anything runs.
"""

from __future__ import annotations

import argparse
import math

from harness.execute.jobs import MAX_TIMEOUT_S

SEED_MAX = 2**63 - 1  # the ledger stores seeds as SQLite INTEGER (signed 64 bit)


def seed(text: str) -> int:
    """A Hypothesis seed: an integer from 0 to 2**63-1."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an integer; give a seed from 0 to {SEED_MAX} (every run prints the seed it used)"
        ) from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"{text} is out of range; give a seed from 0 to {SEED_MAX}")
    return value


def seconds(text: str) -> float:
    """A timeout: a finite number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give seconds above 0, e.g. 60") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(
            f"{text} is not allowed; give a finite number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, e.g. 60"
        )
    return value


def positive_int(text: str) -> int:
    """A count of at least 1 (jobs, history entries)."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; give 1 or more") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not allowed; give 1 or more")
    return value


def non_negative_int(text: str) -> int:
    """A count of 0 or more (0 meaning "no limit" where the option says so)."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; give 0 or more") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not allowed; give 0 or more")
    return value
