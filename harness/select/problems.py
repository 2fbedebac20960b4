"""What can be wrong with a card's text, found without running anything.

:class:`Problem` is one finding (file, line, field, value, message). Here
are the YAML line index (so each problem names its line), the JSON-Schema
problems (worded by :mod:`harness.schemas`) with their lines, and the
checks the schema cannot express: finite bound limits and timeouts, paths
that stay inside the project root, no control characters, a reason for
every tolerance above zero, unique witness ids, no placeholder that
``kvproof new`` wrote left in a card that claims code. They run on every
well-formed part of a card, also when the schema refuses another part, so
that one ``validate`` reports every problem. :mod:`harness.select.cards` calls
them, and so do the other YAML files' loaders (the equivalence marks, the
configurations); nothing here imports a project module.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness import schemas
from harness.errors import YamlAliasRefused
from harness.project import SCHEMA_PATH, program
from harness.select.suggest import did_you_mean

TOLERANCE_OPS = ("le", "lt")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one card: where, which field, what value, what is allowed."""

    path: str  # card file, as shown to the user (relative to the project root when possible)
    line: int  # 1-based; 0 when unknown
    field: str  # dotted field path, e.g. witnesses[0].test; "" for the whole file
    value: str  # repr of the offending value, shortened; "" when there is none
    message: str  # what is wrong, what is allowed, the fix
    kind: str = "load"  # "load" (card unusable) or "link" (dangling ref/test/liar/file; placeholder, no refs)

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        what = f"{self.field}={self.value}" if self.field and self.value else (self.field or "")
        return f"{where}: {what}: {self.message}" if what else f"{where}: {self.message}"


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def field_path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@functools.lru_cache(maxsize=1)
def load_schema() -> dict:
    """The card JSON Schema (obligations/card.schema.json)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML was built with it: ~10x faster


def parse_yaml(text: str) -> tuple[Any, Any]:
    """(node, data) of one YAML document, parsed once: the node keeps every line number, the data is what
    ``yaml.safe_load`` gives. Raises yaml.YAMLError (MarkedYAMLError with the line) on bad YAML, and
    YamlAliasRefused for the first alias (``*name``), found in the event stream before anything is composed."""
    # NOTE: an alias makes the node tree a graph: a dozen lines of nested aliases ("billion laughs") stand for
    # 9**9 values, and every walk below (line index, schema, strings) would visit each. Cards never need one.
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            raise YamlAliasRefused(str(event.anchor), event.start_mark.line + 1)
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return node, data


# ---------------------------------------------------------------- YAML with lines


def line_index(node: yaml.Node, prefix: tuple = ()) -> tuple[dict[str, int], dict[str, int], list]:
    """Map dotted field paths to the 1-based line of their value and of their key.

    Also returns duplicate mapping keys as ``(field, line)``; ``safe_load``
    would silently keep only the last one.
    """
    values: dict[str, int] = {}
    keys: dict[str, int] = {}
    dups: list[tuple[str, int]] = []

    def walk(n: yaml.Node, parts: tuple) -> None:
        values[field_path(parts)] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            seen: set = set()
            for k, v in n.value:
                name = k.value
                sub = parts + (name,)
                if name in seen:
                    dups.append((field_path(sub), k.start_mark.line + 1))
                seen.add(name)
                keys[field_path(sub)] = k.start_mark.line + 1
                walk(v, sub)
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, parts + (i,))

    walk(node, prefix)
    return values, keys, dups


def line_for(values: Mapping[str, int], parts: tuple) -> int:
    parts = tuple(parts)
    while True:
        key = field_path(parts)
        if key in values:
            return values[key]
        if not parts:
            return 0
        parts = parts[:-1]


# ---------------------------------------------------------------- schema problems


def _numeric_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _yaml_float(text: str) -> str:
    """``1e-3`` -> ``1.0e-3``: the spelling YAML 1.1 (PyYAML) reads as a float."""
    mant, _, exp = text.strip().lower().partition("e")
    if "." not in mant:
        mant += ".0"
    return f"{mant}e{exp}" if exp else mant


def _yaml_number(problem: schemas.SchemaProblem) -> str:
    """What YAML did to a number written without a dot (``1e-3`` is text to PyYAML), when a number was expected."""
    expected = problem.allowed if isinstance(problem.allowed, list) else [problem.allowed]
    if problem.validator != "type" or "number" not in expected:
        return ""
    if not isinstance(problem.value, str) or not _numeric_text(problem.value):
        return ""
    return f" (YAML reads {problem.value} as text because a float needs a dot: write {_yaml_float(problem.value)})"


def schema_problems(data: Any, shown: str, values: dict, keys: dict, *, schema: dict | None = None) -> list[Problem]:
    """Every way ``data`` breaks ``schema`` (default obligations/card.schema.json), one :class:`Problem` each,
    with its line: :mod:`harness.schemas` words them; here each gets the line of its value (of its key, for an
    unknown field, shown without its value: the line points at it) and the YAML number hint."""
    problems = []
    for p in schemas.problems(data, schema or load_schema(), near=did_you_mean):
        field = field_path(p.parts)
        line = keys.get(field, line_for(values, p.parts[:-1])) if p.unknown else line_for(values, p.parts)
        value = "" if p.missing or p.unknown else short(p.value)
        problems.append(Problem(shown, line, field, value, p.message + _yaml_number(p)))
    return problems


# C0 and C1 control characters, DEL, the Unicode line/paragraph separators and the bidi controls (text that
# reads backwards); \n and \t are allowed in the prose fields only. What harness.wire.safetext escapes elsewhere.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_PROSE_FIELDS = {"theorem", "proof", "notes"}


def _walk_strings(value: Any, parts: tuple = ()) -> Iterable[tuple[tuple, str]]:
    if isinstance(value, str):
        yield parts, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk_strings(v, parts + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk_strings(v, parts + (i,))


def _control_problems(data: dict, shown: str, values: dict) -> list[Problem]:
    """Control characters (NUL, ESC, ...) in any text field; newlines and tabs only in prose."""
    problems = []
    for parts, text in _walk_strings(data):
        prose = len(parts) == 1 and parts[0] in _PROSE_FIELDS or parts[-1:] == ("notes",) or parts[-1:] == ("reason",)
        bad = _CONTROL_RE.search(text) or (None if prose else re.search(r"[\n\r\t]", text.rstrip("\n")))
        if bad:
            char = bad.group(0)
            problems.append(
                Problem(
                    shown,
                    line_for(values, parts),
                    field_path(parts),
                    short(text),
                    f"contains the control character U+{ord(char):04X}; reports would show it raw. "
                    "Remove it (write plain text" + ("" if prose else " on one line") + ")",
                )
            )
    return problems


def path_problem(value: str, root: Path) -> str:
    """Why ``value`` (a project-relative path) may not be used, or ``""``.

    Paths in cards are relative to the project root and must stay inside it:
    no absolute path, no ``..`` part, and no symlink leading out.
    """
    if value.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", value):
        return "is an absolute path; paths in cards are relative to the project root, e.g. impl/kv.py"
    if ".." in re.split(r"[\\/]", value):
        return "leaves the project root with `..`; paths in cards must name files inside the project"
    try:
        (root / value).resolve().relative_to(root.resolve())
    except ValueError:
        return f"resolves outside the project root {root} (through a symlink); name a file inside the project"
    return ""


def items_of(data: Any, key: str) -> list[tuple[int, Any]]:
    """``(index, item)`` of the list ``data[key]``; none when it is missing or no list (the schema says so)."""
    value = data.get(key) if isinstance(data, dict) else None
    return list(enumerate(value)) if isinstance(value, list) else []


def entries_of(data: dict) -> list[tuple[str, int, dict]]:
    """``(group, index, witness)`` of every witness and control that is a mapping (the schema names the rest)."""
    return [(g, i, w) for g in ("witnesses", "controls") for i, w in items_of(data, g) if isinstance(w, dict)]


def _limits(w: dict) -> list[tuple[str, str, Any]]:
    """``(key, op, limit)`` of a witness's bounds, as far as they are mappings (the schema names the rest)."""
    bounds = w.get("bounds")
    if not isinstance(bounds, dict):
        return []
    return [(k, op, lim) for k, ops in bounds.items() if isinstance(ops, dict) for op, lim in ops.items()]


def _path_problems(data: dict, shown: str, values: dict, root: Path) -> list[Problem]:
    """Every file a card names (refs, witness tests, covers) resolves inside the project root."""
    named: list[tuple[tuple, str]] = []
    named += [(("refs", i), r.split("::", 1)[0]) for i, r in items_of(data, "refs") if isinstance(r, str)]
    named += [(("covers", i), c) for i, c in items_of(data, "covers") if isinstance(c, str)]
    for group, i, w in entries_of(data):
        if isinstance(w.get("test"), str):
            named.append(((group, i, "test"), w["test"].split("::", 1)[0]))
    problems = []
    for parts, file in named:
        why = path_problem(file, root)
        if why:
            problems.append(Problem(shown, line_for(values, parts), field_path(parts), short(_get(data, parts)), why))
    return problems


def _get(data: Any, parts: tuple) -> Any:
    for p in parts:
        data = data[p]
    return data


def _bound_problems(data: dict, shown: str, values: dict) -> list[Problem]:
    """Bound limits must be finite (``.nan`` or ``.inf`` would make a bound that checks nothing); so must timeouts."""
    problems = []
    floor = (data.get("mutation") or {}).get("min_score") if isinstance(data.get("mutation"), dict) else None
    if isinstance(floor, float) and math.isnan(floor):
        problems.append(
            Problem(
                shown,
                values.get("mutation.min_score", 0),
                "mutation.min_score",
                "nan",
                "a minimum mutation score must be a number from 0 to 1; e.g. `min_score: 0.9`",
            )
        )
    for group, i, w in entries_of(data):
        timeout = w.get("timeout")
        if isinstance(timeout, float) and math.isnan(timeout):
            fp = f"{group}[{i}].timeout"
            problems.append(
                Problem(
                    shown,
                    values.get(fp, 0),
                    fp,
                    "nan",
                    "a timeout must be a finite number of seconds above 0; e.g. `timeout: 120`",
                )
            )
        for key, op, limit in _limits(w):
            if isinstance(limit, float) and not math.isfinite(limit):
                fp = f"{group}[{i}].bounds.{key}.{op}"
                what = (
                    "NaN compares false with everything"
                    if math.isnan(limit)
                    else "an infinite limit holds (or fails) for every finite value"
                )
                problems.append(
                    Problem(
                        shown,
                        values.get(fp, 0),
                        fp,
                        short(limit),
                        f"a bound limit must be a finite number ({what}, so the bound would check "
                        f"nothing or refute everything); give the real limit, e.g. {{{op}: 0}}",
                    )
                )
    return problems


# The placeholder `kvproof new` writes where the author has to say something (harness.select.scaffold's
# CARD_TEMPLATE): matched as a whole word and case-sensitively, so that "todo" or "TODOs" in prose is no placeholder.
PLACEHOLDER = "TODO"
_PLACEHOLDER_RE = re.compile(rf"\b{PLACEHOLDER}\b")  # a whole word: "TODO:", not "TODOs", "todo", "MASTODON"
# the fields that state the claim, and what each must say instead (notes are left alone: they say what is not
# covered yet, and "TODO: the paged cache" is an honest note there)
_CLAIM_TEXT = {
    "title": "one line saying what is claimed",
    "theorem": "the claim, stated so that it could be false",
    "proof": "why the claim holds, citing the mechanism by symbol (each symbol also in refs)",
    "reason": "why this tolerance is the right one",
}


def placeholder_problems(data: dict, shown: str, values: dict) -> list[Problem]:
    """A card that claims code (it has ``refs:`` or ``module:``) must say what it claims: no :data:`PLACEHOLDER`
    in its title, theorem, proof or a witness's reason, and ``refs:`` not empty. ``kvproof new`` writes both; such
    a card is a scaffold, never a claim. Their kind is ``link``: ``validate`` reports them, ``run`` makes the card
    ERROR without running it (never PROVEN)."""
    if "refs" not in data and "module" not in data:
        return []
    new = f"`{program()} new`"
    rule = (
        f"a card that claims code may not keep {PLACEHOLDER} (the whole word, in capitals) in its title, theorem, "
        "proof or a reason"
    )
    texts: list[tuple[tuple, str, str]] = [((f,), f, data.get(f)) for f in ("title", "theorem", "proof")]
    texts += [((g, i, "reason"), "reason", w.get("reason")) for g, i, w in entries_of(data)]
    problems = []
    for parts, name, text in texts:
        if isinstance(text, str) and _PLACEHOLDER_RE.search(text):
            problems.append(
                Problem(
                    shown,
                    line_for(values, parts),
                    field_path(parts),
                    short(text),
                    f"placeholder text ({new} writes {PLACEHOLDER} where the author has something to say, "
                    f"for you to replace); replace it with {_CLAIM_TEXT[name]}: {rule}",
                    kind="link",
                )
            )
    if data.get("refs") == []:
        problems.append(
            Problem(
                shown,
                line_for(values, ("refs",)),
                "refs",
                "[]",
                f"lists no symbol ({new} writes this empty list for you to fill in); a card that claims code must "
                "list the symbols its proof cites: list each as file.py::Symbol or file.py::Class.method "
                "(file.c::function for C), e.g. refs: [impl/kv.py::KVCache.evict]",
                kind="link",
            )
        )
    return problems


def semantic_problems(data: dict, shown: str, values: dict, root: Path) -> list[Problem]:
    """Checks the schema cannot express: finite bounds, paths inside the root, control
    characters, tolerance reasons, unique witness ids, no scaffold placeholder left.

    They run on every part of ``data`` that has the shape they read, also when the schema refuses other parts
    of the card (a misspelt field must not hide a bad bound: ``validate`` reports every problem at once)."""
    problems = _bound_problems(data, shown, values) + _path_problems(data, shown, values, root)
    problems += _control_problems(data, shown, values)
    problems += placeholder_problems(data, shown, values)
    seen: dict[str, str] = {}
    for group, i, w in entries_of(data):
        where = f"{group}[{i}]"
        wid = w.get("id")
        if isinstance(wid, str) and wid in seen:
            problems.append(
                Problem(
                    shown,
                    values.get(f"{where}.id", 0),
                    f"{where}.id",
                    short(wid),
                    f"duplicate witness id (also {seen[wid]}); ids must be unique in a card",
                )
            )
        if isinstance(wid, str):
            seen.setdefault(wid, where)
        for key, op, limit in _limits(w):
            if (
                op in TOLERANCE_OPS
                and isinstance(limit, (int, float))
                and not isinstance(limit, bool)
                and math.isfinite(limit)
                and limit > 0
                and not w.get("reason")
            ):
                fp = f"{where}.bounds.{key}.{op}"
                problems.append(
                    Problem(
                        shown,
                        values.get(fp, 0),
                        fp,
                        short(limit),
                        f"a tolerance above zero needs a reason; add `reason:` to {where} "
                        f"saying why {limit!r} is right",
                    )
                )
        bounded = sorted(str(k) for k in w["bounds"]) if isinstance(w.get("bounds"), dict) else []
        regression = w.get("regression") if isinstance(w.get("regression"), dict) else {}
        for key in regression:
            if key not in bounded:
                fp = f"{where}.regression.{key}"
                problems.append(
                    Problem(
                        shown,
                        values.get(fp, 0),
                        fp,
                        short(key),
                        f"a regression threshold applies to a bounded key, and {where} bounds "
                        f"{', '.join(bounded) if bounded else 'none'}; name one of those or add the bound",
                    )
                )
    return problems
