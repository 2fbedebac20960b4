"""Suggestions for near-miss names: ``did you mean `witnesses`?``."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# spellings people reach for first, checked before fuzzy matching
ALIASES = {
    "lte": "le",
    "leq": "le",
    "<=": "le",
    "gte": "ge",
    "geq": "ge",
    ">=": "ge",
    "<": "lt",
    ">": "gt",
    "==": "eq",
    "!=": "ne",
    "neq": "ne",
    "witness": "witnesses",
    "control": "controls",
    "liar": "liars",
    "ref": "refs",
    "tag": "tags",
    "note": "notes",
}


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean `x`?)`` for the closest choice, or ``""``."""
    choices = list(choices)
    alias = ALIASES.get(str(word))
    if alias in choices:
        return f" (did you mean `{alias}`?)"
    same_case = [c for c in choices if c.lower() == str(word).lower()]  # ids are case-sensitive: kv-t9 vs KV-T9
    if same_case:
        return f" (did you mean `{same_case[0]}`? ids are case-sensitive)"
    close = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""
