"""How a bound and its check read, everywhere: one module for every format.

Two forms, both built here:

- the *reason* form, in verdict reasons (``max_abs_delta = 1.000e-03 (bound
  le 0)``): the card's own words for the operator, every float in
  scientific notation, so a reason reads the same in every report;
- the *display* form, in report tables and headlines (``max|Δ| = 1.000e-03
  (≤ 0)``): the operator as a symbol and the limit as a card author wrote it.

A bound on its own (``max_abs_delta le 0``, ``show``) is :func:`bound_text`.
"""

from __future__ import annotations

import math
from typing import Any

OP_TEXT = {"le": "≤", "lt": "<", "ge": "≥", "gt": ">", "eq": "=", "ne": "≠"}


def fmt_value(value: Any) -> str:
    """A measured value for display: floats as ``1.234e-05`` (``nan``), strings quoted, the rest as written."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3e}"
    return repr(value) if isinstance(value, str) else str(value)


def fmt_limit(value: Any) -> str:
    """A bound's limit as a card author would write it: 0, 3, 1.5e-04, 0.25."""
    if isinstance(value, float) and value != 0 and math.isfinite(value) and not 1e-3 <= abs(value) < 1e4:
        return f"{value:.1e}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def reason_value(value: Any) -> str:
    """A value in the reason form: floats as ``1.000e-03``, anything else as its repr."""
    return f"{value:.3e}" if isinstance(value, float) else repr(value)


def bound_text(key: str, op: str, limit: Any) -> str:
    """``max_abs_delta le 0``: a bound as the card states it."""
    return f"{key} {op} {limit!r}"


def check_text(
    key: str, op: str, limit: Any, actual: Any, detail: str = "", *, label: str = "", reason: bool = False
) -> str:
    """One evaluated bound as a sentence; ``reason`` picks the reason form (see the module docstring).

    ``label`` replaces the key in the display form (``max|Δ|`` for max_abs_delta); ``detail`` (e.g.
    ``max of 40 observed``) follows the limit.
    """
    more = f"; {detail}" if detail else ""
    if reason:
        return f"{key} = {reason_value(actual)} (bound {op} {reason_value(limit)}{more})"
    return f"{label or key} = {fmt_value(actual)} ({OP_TEXT[op]} {fmt_limit(limit)}{more})"


def unevaluated_text(key: str, why: Any, *, reason: bool = False) -> str:
    """A bound that could not be evaluated: ``why`` says what was missing."""
    if reason:
        return f"`{key}` {why}"
    return f"{key}: {why}" if isinstance(why, str) else f"{key}: not evaluated"
