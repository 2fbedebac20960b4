"""What one witness measured: :class:`Evidence`, the ``evidence`` fixture's object (:mod:`harness.plugin`).

Part of the witness side: imports nothing of the harness but :mod:`harness.wire.messages`.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

from harness.wire.messages import OBSERVED_FIELDS


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy scalars and arrays
        value = value.tolist()
    if isinstance(value, tuple):
        value = list(value)
    json.dumps(value, allow_nan=True)  # raises TypeError for anything else
    return value


def _number(value: Any) -> int | float | None:
    """``value`` as a plain int or float (numpy scalars and 0-d arrays too); None for bool or a non-number."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return int(value) if isinstance(value, numbers.Integral) else float(value)


_VERBS = {
    "record": "evidence.record(key, value)",
    "observe": "evidence.observe(key, value)",
    "count": "evidence.count(key, n)",
}


class Evidence:
    """Measured values one witness records, keyed by name. Each key takes exactly one verb.

    - ``record(key, value)``: one value, recorded once. Recording a key again
      raises ValueError: a silently replaced value could hide the first one.
    - ``observe(key, x)``: a number, once per Hypothesis example (or per case
      of a loop). The node reports the summary ``{"observed": n, "min": lo,
      "max": hi, "nan": k}`` (n observations, k of them NaN; lo/hi over the
      others, null when every one was NaN), and a bound on the key is judged
      on the value that is worst for it: max for le/lt, min for ge/gt, both
      for eq; any NaN makes an ordering bound fail (see
      :func:`harness.verdict.check_bound`).
    - ``count(key, n=1)``: an int >= 0 added to a tally (examples run, rows
      misplaced, ...); the node reports the sum as a plain int. Call it with
      ``n=0`` to make the key exist when nothing was counted.

    A key never recorded, observed or counted is absent, so a bound on it is
    "not recorded". Using a second verb on a key raises ValueError.
    """

    def __init__(self) -> None:
        self._recorded: dict[str, object] = {}
        self._observed: dict[str, dict[str, Any]] = {}
        self._counted: dict[str, int] = {}

    @property
    def values(self) -> dict[str, object]:
        """Everything recorded so far, JSON-able, in first-use order (a fresh dict each call)."""
        keys = {**dict.fromkeys(self._recorded), **dict.fromkeys(self._observed), **dict.fromkeys(self._counted)}
        out: dict[str, object] = {}
        for key in keys:
            if key in self._recorded:
                out[key] = self._recorded[key]
            elif key in self._observed:
                out[key] = dict(self._observed[key])
            else:
                out[key] = self._counted[key]
        return out

    def __repr__(self) -> str:
        return f"Evidence({self.values!r})"

    def _claim(self, verb: str, key: object) -> str:
        if not isinstance(key, str) or not key:
            raise TypeError(f"evidence.{verb}(key={key!r}): key must be a non-empty str such as 'max_abs_delta'")
        for other, used in (("record", self._recorded), ("observe", self._observed), ("count", self._counted)):
            if other != verb and key in used:
                raise ValueError(
                    f"evidence.{verb}({key!r}, ...): key={key!r} was already used with evidence.{other}; "
                    f"one key takes one verb: {_VERBS['record']} once, {_VERBS['observe']} per example "
                    f"(the worst is kept) or {_VERBS['count']} (a tally); use another key name"
                )
        return key

    def record(self, key: str, value: object) -> None:
        """Record ``value`` (number, str, bool, None, list, dict; numpy scalars and
        arrays are converted) under ``key``, once.

        Raises TypeError when the key is not a str or the value is not JSON-able,
        ValueError when the key was already recorded (or observed or counted).
        """
        self._claim("record", key)
        if key in self._recorded:
            raise ValueError(
                f"evidence.record({key!r}, {value!r:.80}): key={key!r} was already recorded as "
                f"{self._recorded[key]!r:.80}; a key is recorded once per test. For a value measured per "
                f"example use evidence.observe(...) once per example or evidence.count(...) for a tally"
            )
        try:
            value = _jsonable(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"evidence.record({key!r}, value={value!r:.80}): value must be JSON-able "
                "(number, str, bool, None, list, dict); convert it, e.g. float(x)"
            ) from None
        if isinstance(value, dict) and set(value) == set(OBSERVED_FIELDS):
            raise ValueError(
                f"evidence.record({key!r}, {value!r:.80}): a dict with exactly the keys "
                f"{', '.join(OBSERVED_FIELDS)} is how evidence.observe reports its summary; "
                "call evidence.observe(key, x) per value instead, or add another field"
            )
        self._recorded[key] = value

    def observe(self, key: str, value: object) -> None:
        """Observe one number (int or float, numpy scalars too; NaN and inf allowed, bool refused).

        Call once per Hypothesis example; the node reports the summary and a
        bound on ``key`` is judged on its worst value (see the class docstring).
        Raises TypeError for a non-number, ValueError when the key was recorded or counted.
        """
        self._claim("observe", key)
        x = _number(value)
        if x is None:
            raise TypeError(
                f"evidence.observe({key!r}, value={value!r:.80}): value must be an int or float "
                "(numpy scalars are converted; a bool is refused: observe int(flag), or count it "
                "with evidence.count(key, int(flag)))"
            )
        s = self._observed.setdefault(key, {"observed": 0, "min": None, "max": None, "nan": 0})
        s["observed"] += 1
        if isinstance(x, float) and math.isnan(x):
            s["nan"] += 1
            return
        s["min"] = x if s["min"] is None else min(s["min"], x)
        s["max"] = x if s["max"] is None else max(s["max"], x)

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` (an int >= 0; numpy ints too, bool refused) to the tally ``key`` (created at 0).

        Raises TypeError for a non-int, ValueError for n < 0 or when the key was recorded or observed.
        """
        self._claim("count", key)
        x = _number(n)
        if not isinstance(x, int):
            raise TypeError(
                f"evidence.count({key!r}, n={n!r:.80}): n must be an int >= 0 (a bool is refused: write int(flag))"
            )
        if x < 0:
            raise ValueError(
                f"evidence.count({key!r}, n={x}): n must be >= 0; a tally only grows "
                "(observe a signed value with evidence.observe)"
            )
        self._counted[key] = self._counted.get(key, 0) + x


__all__ = ["Evidence"]
