"""Equivalence marks: mutants no input can tell from the original, named in ``obligations/equivalent-mutants.yaml``.

Each mark holds the mutant's key, why it is equivalent, and the cards it is
for (absent: every card). A marked mutant still runs; only a survivor counts
as equivalent (:func:`harness.mutation.score.classify`). :func:`load_marks`
validates the file like a card (schema, file:line problems) and names the
marks whose mutant no longer exists, so ``validate`` can say which to renew.
:func:`marks_digest` is what of the file a card's mutation score is bound to:
the marks that can change it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness import schemas
from harness.errors import InputRefused, LiarError, YamlAliasRefused
from harness.inputs import HINTS_LIMIT, read_text
from harness.mutation import cgen
from harness.mutation import generate as gen
from harness.mutation.keys import KEY_PATTERN, parse_key
from harness.select import csource
from harness.select.cards import EQUIVALENT_FILE
from harness.select.problems import Problem, line_for, line_index, parse_yaml, schema_problems, short

EQUIVALENT_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["equivalent"],
    "properties": {
        "equivalent": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["mutant", "reason"],
                "properties": {
                    "mutant": {
                        "type": "string",
                        "pattern": KEY_PATTERN.pattern,
                        "description": "the mutant key mutate prints, PATH.py:LINE:COL:OPERATOR[#N] (or PATH.c:...)",
                        "x-allowed": "a mutant key such as impl/kv.py:131:12:compare",
                    },
                    "change": {
                        "type": "string",
                        "minLength": 1,
                        "description": "what the mutant changes, as mutate prints it (BEFORE -> AFTER): pins the mark "
                        "to that change, so a key that comes to name another change when the code moves is stale",
                        "x-allowed": "the change mutate printed for the key, such as 'i < n -> i <= n'",
                    },
                    "reason": {
                        "type": "string",
                        "minLength": 10,
                        "description": "why no input can tell the mutant from the original",
                        "x-allowed": "a sentence saying why the change cannot be observed",
                    },
                    "cards": {
                        "type": "array",
                        "items": {"type": "string"},
                        "uniqueItems": True,
                        "description": "the cards the mark is for; absent: every card",
                    },
                },
            },
        },
    },
}


# ---------------------------------------------------------------- equivalence marks


@dataclass(frozen=True)
class Mark:
    """A mutant marked equivalent: it cannot be told from the original, with the reason."""

    key: str
    reason: str
    cards: tuple[str, ...]  # empty: every card
    line: int

    def applies(self, card_id: str) -> bool:
        return not self.cards or card_id in self.cards


def load_marks(
    cards_dir: Path, root: Path, card_ids: Iterable[str] | None = None
) -> tuple[dict[str, Mark], list[Problem]]:
    """The marks of ``cards_dir/equivalent-mutants.yaml`` (none when it is absent) and its problems.

    Checked like a card: YAML, the schema (with lines), duplicate keys and
    card ids that are not cards (when ``card_ids`` is given): any of these
    and the file gives no marks at all. A key that names no mutant of the
    file as it is now (the code moved) is a problem of kind ``stale``: that
    mark alone is left out.
    """
    path = cards_dir / EQUIVALENT_FILE
    if not path.exists() and not path.is_symlink():
        return {}, []
    shown = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    parsed = _parse(path, shown)
    if isinstance(parsed, Problem):
        return {}, [parsed]
    node, data = parsed
    if node is None:
        data, values, keys = {}, {}, {}
    else:
        values, keys, _ = line_index(node)
    problems = schema_problems(data, shown, values, keys, schema=EQUIVALENT_SCHEMA)
    if problems:
        return {}, problems
    marks, problems = _marks(data["equivalent"], shown, values, root, card_ids)
    return ({} if any(p.kind != "stale" for p in problems) else marks), problems


def _parse(path: Path, shown: str) -> tuple[Any, Any] | Problem:
    """(node, data) of the marks file (:func:`harness.select.problems.parse_yaml`), or why it cannot be read."""
    try:
        return parse_yaml(read_text(path, HINTS_LIMIT))
    except InputRefused as exc:
        return Problem(
            shown, 0, "", "", f"the equivalence marks file {exc.why}; replace it with the YAML file or remove it"
        )
    except (OSError, UnicodeDecodeError) as exc:
        return Problem(shown, 0, "", "", f"cannot read the equivalence marks: {exc}")
    except YamlAliasRefused as exc:
        return Problem(
            shown,
            exc.line,
            "",
            f"*{exc.name}",
            f"YAML aliases (*{exc.name}) are not allowed in the equivalence marks; write the value out",
        )
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return Problem(
            shown,
            mark.line + 1 if mark else 0,
            "",
            "",
            f"YAML syntax error: {getattr(exc, 'problem', exc)}; fix the YAML here",
        )


def _marks(
    entries: Sequence[Mapping[str, Any]],
    shown: str,
    values: Mapping[str, int],
    root: Path,
    card_ids: Iterable[str] | None,
) -> tuple[dict[str, Mark], list[Problem]]:
    """The marks of a file that fits the schema, and its problems: a key marked twice, a stale mark (left out), a
    card id that is not a card (when ``card_ids`` is given)."""
    known = set(card_ids) if card_ids is not None else None
    marks: dict[str, Mark] = {}
    problems: list[Problem] = []
    for i, entry in enumerate(entries):
        line = line_for(values, ("equivalent", i))
        key = entry["mutant"]
        if key in marks:
            problems.append(
                Problem(
                    shown,
                    line,
                    f"equivalent[{i}].mutant",
                    short(key),
                    f"marked twice (first at line {marks[key].line}); keep one mark per mutant",
                )
            )
            continue
        stale = _stale(root, entry, f"equivalent[{i}]", shown, line)
        if stale is not None:
            problems.append(stale)
            continue
        problems += [
            Problem(
                shown,
                line_for(values, ("equivalent", i, "cards", j)),
                f"equivalent[{i}].cards[{j}]",
                short(cid),
                "no card has this id",
            )
            for j, cid in enumerate(entry.get("cards") or [])
            if known is not None and cid not in known
        ]
        marks[key] = Mark(key, entry["reason"].strip(), tuple(entry.get("cards") or ()), line)
    return marks, problems


def _stale(root: Path, entry: Mapping[str, Any], where: str, shown: str, line: int) -> Problem | None:
    """A problem of kind ``stale`` when the mark's key names no mutant now, or a mutant that makes another change
    than the pinned one (the code moved); None when it still names its mutant."""
    key, pinned = entry["mutant"], entry.get("change")
    try:
        mutant = gen.find(root, key)[0]  # a C file is parsed and indexed once (cgen._site_index)
    except LiarError as exc:
        return Problem(shown, line, f"{where}.mutant", short(key), f"{exc}; {_renew(root, key, pinned)}", kind="stale")
    if pinned is not None and mutant.change != pinned:
        return Problem(
            shown,
            line,
            f"{where}.change",
            short(pinned),
            f"the key {key} now names the change {mutant.change!r} in {mutant.qualname}, not the one the mark "
            f"was made for (the code moved); {_renew(root, key, pinned)}",
            kind="stale",
        )
    return None


def _renew(root: Path, key: str, pinned: str | None) -> str:
    """How to renew a stale mark: the mutant's current key when its pinned change names exactly one."""
    if pinned is None:
        return "remove the mark or mark the mutant's current key (mutate prints it; add `change:` to pin the mark)"
    path, _, col, op, _ = parse_key(key)
    try:
        every = (cgen.generate if csource.is_c(path) else gen.generate)(root, path)
        same = [m.key for m in every if m.operator == op and m.change == pinned]
    except (OSError, UnicodeDecodeError, SyntaxError, LiarError):
        same = []
    if len(same) > 1:  # lines moved, columns did not (an edit elsewhere leaves a line's text as it was)
        same = [k for k in same if parse_key(k)[2] == col] or same
    if len(same) == 1:
        return f"the same change is now {same[0]}: if the reason still holds there, change the key to it"
    where = f"{len(same)} mutants make that change now" if same else "no mutant makes that change now"
    return f"{where}; remove the mark or mark the mutant's current key (mutate prints it)"


# ---------------------------------------------------------------- what a score is bound to


Spans = Mapping[str, Sequence[tuple[int, int]]]  # path -> (first, last) lines of each function a card claims


def marks_digest(cards_dir: Path, card_id: str, spans: Spans) -> str:
    """The digest of the equivalence marks that can change a card's score: what a score is bound to beside its
    bytes (:func:`harness.mutation.score.score_marks` gives ``spans``; the ledger keeps it with the score).

    A mark changes a score (a marked survivor is equivalent: it leaves the denominator) only when it is for the
    card (no ``cards:``, or the card's id among them) and its key's line lies in a function the card claims
    (``spans``: every mutant of the card is on such a line). The digest is of those marks' keys and pinned
    ``change:`` (the pin decides whether the key still names its mutant), sorted; not of their reasons (they
    explain a status, they do not change it), nor of marks for other cards or other code, so marking another
    card's mutant leaves this card's score fresh. The file absent is no marks. A file that is not a valid marks
    file (``mutate`` refuses it, so no score is measured with it) binds every card to its whole bytes.
    """
    path = cards_dir / EQUIVALENT_FILE
    if not path.exists() and not path.is_symlink():
        return _marks_hash([])
    try:
        entries = _entries(read_text(path, HINTS_LIMIT))
    except (InputRefused, OSError, UnicodeDecodeError) as exc:
        return f"unreadable marks file ({type(exc).__name__})"
    if isinstance(entries, str):
        return entries
    rows = [
        (key, change)
        for key, change, cards, where, line in entries
        if (not cards or card_id in cards) and any(first <= line <= last for first, last in spans.get(where, ()))
    ]
    return _marks_hash(rows)


@functools.lru_cache(maxsize=4)
def _entries(text: str) -> tuple[tuple[str, str | None, tuple[str, ...], str, int], ...] | str:
    """(key, pinned change, cards, path, line) of each mark of a marks file's text, parsed once per text; a
    string (the digest that stands for the whole file) when it is not a marks file :func:`load_marks` accepts."""
    invalid = "invalid marks file " + hashlib.sha256(text.encode()).hexdigest()
    try:
        data = parse_yaml(text)[1]
    except (YamlAliasRefused, yaml.YAMLError):
        return invalid
    if schemas.problems(data, EQUIVALENT_SCHEMA):
        return invalid
    keys = [e["mutant"] for e in data["equivalent"]]
    if len(set(keys)) != len(keys):  # load_marks refuses the file: no mark applies
        return invalid
    out = []
    for e in data["equivalent"]:
        try:
            where, line, *_ = parse_key(e["mutant"])
        except LiarError:
            return invalid
        out.append((e["mutant"], e.get("change"), tuple(e.get("cards") or ()), where, line))
    return tuple(out)


def _marks_hash(rows: Iterable[tuple[str, str | None]]) -> str:
    return hashlib.sha256(json.dumps(sorted(rows)).encode()).hexdigest()
