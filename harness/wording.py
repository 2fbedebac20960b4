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
import re
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


# ---------------------------------------------------------------- a witness that stopped early

NOT_JUDGED = "not judged: the witness stopped early"  # a check's detail starts with it (harness.verdict.check_bound)


def not_judged(detail: str) -> bool:
    """Is a check with this ``detail`` one the judge did not judge because its witness stopped early?"""
    return detail.startswith(NOT_JUDGED)


def stopped_text(
    key: str, op: str, limit: Any, actual: Any, detail: str, *, label: str = "", reason: bool = False
) -> str:
    """A bound on the evidence of a witness that stopped early, not judged: the value it had reached, the bound,
    then why (``examples = 7 (≥ 10): not judged: the witness stopped early``)."""
    rest = detail.removeprefix(NOT_JUDGED).lstrip("; ")
    return f"{check_text(key, op, limit, actual, rest, label=label, reason=reason)}: {NOT_JUDGED}"


# ---------------------------------------------------------------- a failing check's message

CHECK_PREFIXES = ("AssertionError: ", "Failed: ")  # the exception's name before an assertion's own words
SHORT_CHECK = 44  # characters of a check in short (a FAILED card's headline)
_FIRST_STEP = re.compile(r"(?:^|(?<=\s))1\. ")


def check_message(message: str) -> str:
    """A failed check's message without the exception's name (``AssertionError: x`` -> ``x``)."""
    for prefix in CHECK_PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def check_parts(text: str) -> dict[str, Any]:
    """A check's message cut where it reads best one part a line: ``{"head", "steps", "tail", "rest"}``.

    A first line in the numbered-steps form the target claims write (``after the steps 1. append of 3 to
    handle 0; 2. fork of handle 0 (handle 1); 3. ...: handle 1: the rows held: ...``, at least a ``; 2. ``)
    gives ``head`` (``after the steps``), ``steps`` (each without its number) and ``tail`` (what follows the
    last step: the check itself, or ``then ...: ...``); any other first line is ``head`` alone. ``rest``: the
    message's other lines.
    """
    lines = text.splitlines() or [""]
    first, rest = lines[0], lines[1:]
    start = _FIRST_STEP.search(first)
    if start is None or "; 2. " not in first[start.end() :]:
        return {"head": first, "steps": [], "tail": "", "rest": rest}
    body, steps, k = first[start.end() :], [], 2
    while (cut := body.find(f"; {k}. ")) >= 0:
        steps.append(body[:cut])
        body, k = body[cut + len(f"; {k}. ") :], k + 1
    ends = [i for i in (body.find(": "), body.find("; ")) if i >= 0]
    end = min(ends, default=len(body))
    steps.append(body[:end])
    return {"head": first[: start.start()].strip(), "steps": steps, "tail": body[end + 2 :], "rest": rest}


def short_check(text: str, limit: int = SHORT_CHECK) -> str:
    """A check's message in short: the check itself (past the numbered steps), cut after whole clauses
    (``: `` and ``; ``) at about ``limit`` characters, ``…`` marking the cut."""
    parts = check_parts(check_message(text))
    core = (parts["tail"] if parts["steps"] else parts["head"]).strip() or parts["head"].strip()
    if len(core) <= limit:
        return core
    kept = ""
    for clause in re.split(r"(?<=[:;]) ", core):
        longer = f"{kept} {clause}" if kept else clause
        if len(longer.rstrip(":;")) > limit:
            break
        kept = longer
    kept = kept.rstrip(" :;") or core[: limit - 1].rstrip()
    return kept + " …"
