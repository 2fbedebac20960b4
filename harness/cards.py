"""Load theorem cards from YAML and validate them, reporting every problem.

A card is read with ``yaml.safe_load`` only, checked against
``obligations/card.schema.json`` and then against the project it talks about:
refs and test nodes are resolved statically with :mod:`ast` (nothing is
imported), liars against the static liar index. Nothing here runs code.

Two kinds of :class:`Problem`:

- ``load``: the card cannot be used at all (YAML syntax, schema, duplicate
  ids, a tolerance without a reason). ``run`` refuses to start (exit 2).
- ``link``: the card is well formed but points at something that does not
  exist (ref, test node, liar, covered file). ``run`` gives that card ERROR
  without running it; ``validate`` reports it like any other problem.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from harness.liars import LiarSite
from harness.project import SCHEMA_PATH
from harness.statuses import Kind
from harness.refs import RefSite, parse_module, resolve_ref, resolve_symbol, resolve_test  # noqa: F401
from harness.suggest import did_you_mean

TOLERANCE_OPS = ("le", "lt")
BOUND_OPS = ("le", "lt", "ge", "gt", "eq", "ne")

# ---------------------------------------------------------------- data types


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one card: where, which field, what value, what is allowed."""

    path: str  # card file, as shown to the user (relative to the project root when possible)
    line: int  # 1-based; 0 when unknown
    field: str  # dotted field path, e.g. witnesses[0].test; "" for the whole file
    value: str  # repr of the offending value, shortened; "" when there is none
    message: str  # what is wrong, what is allowed, the fix
    kind: str = "load"  # "load" (card unusable) or "link" (dangling ref/test/liar/file)

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        what = f"{self.field}={self.value}" if self.field and self.value else (self.field or "")
        return f"{where}: {what}: {self.message}" if what else f"{where}: {self.message}"


@dataclass(frozen=True)
class Bound:
    """``key op limit`` on a value a witness records, e.g. max_abs_delta le 0."""

    key: str
    op: str  # one of BOUND_OPS
    limit: Any

    def __str__(self) -> str:
        return f"{self.key} {self.op} {self.limit!r}"


@dataclass(frozen=True)
class Witness:
    """A pytest node that checks part of a card's claim (a control when kind='control')."""

    id: str
    test: str  # pytest node id relative to the project root
    kind: Kind = Kind.WITNESS
    bounds: tuple[Bound, ...] = ()
    reason: str = ""
    timeout: float | None = None  # seconds; None = harness default
    notes: str = ""

    @property
    def file(self) -> str:
        return self.test.split("::", 1)[0]


@dataclass(frozen=True)
class Card:
    """A validated theorem card. Paths are relative to the project root."""

    id: str
    title: str
    module: str
    regime: str
    theorem: str
    proof: str
    refs: tuple[str, ...]
    covers: tuple[str, ...]  # explicit covers, or the default (files of refs and witnesses)
    requires: tuple[str, ...]
    witnesses: tuple[Witness, ...]
    controls: tuple[Witness, ...]
    liars: tuple[str, ...]
    notes: str
    tags: tuple[str, ...]
    version: int
    source: Path  # absolute path of the card file
    display_path: str  # card file as shown to users
    fingerprint: str  # sha256 hex of the card file's bytes
    lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def all_witnesses(self) -> tuple[Witness, ...]:
        return self.witnesses + self.controls

    def line_of(self, field_path: str) -> int:
        return self.lines.get(field_path, 0)


@dataclass(frozen=True)
class LoadResult:
    """Cards that loaded (in file order) and every problem found."""

    cards: tuple[Card, ...]
    problems: tuple[Problem, ...]
    broken_ids: Mapping[str, str] = field(default_factory=dict)  # card file that did not load -> its id, if readable

    @property
    def load_problems(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.kind == "load")

    def link_problems(self, card_id: str) -> tuple[Problem, ...]:
        card = next((c for c in self.cards if c.id == card_id), None)
        if card is None:
            return ()
        return tuple(p for p in self.problems if p.kind == "link" and p.path == card.display_path)


# ---------------------------------------------------------------- helpers


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _field_path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@functools.lru_cache(maxsize=1)
def load_schema() -> dict:
    """The card JSON Schema (obligations/card.schema.json)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def display_path(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- YAML with lines


def _line_index(node: yaml.Node, prefix: tuple = ()) -> tuple[dict[str, int], dict[str, int], list]:
    """Map dotted field paths to the 1-based line of their value and of their key.

    Also returns duplicate mapping keys as ``(field, line)``; ``safe_load``
    would silently keep only the last one.
    """
    values: dict[str, int] = {}
    keys: dict[str, int] = {}
    dups: list[tuple[str, int]] = []

    def walk(n: yaml.Node, parts: tuple) -> None:
        values[_field_path(parts)] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            seen: set = set()
            for k, v in n.value:
                name = k.value
                sub = parts + (name,)
                if name in seen:
                    dups.append((_field_path(sub), k.start_mark.line + 1))
                seen.add(name)
                keys[_field_path(sub)] = k.start_mark.line + 1
                walk(v, sub)
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, parts + (i,))

    walk(node, prefix)
    return values, keys, dups


def _line_for(values: Mapping[str, int], parts: tuple) -> int:
    parts = tuple(parts)
    while True:
        key = _field_path(parts)
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


def _schema_problems(data: Any, shown: str, values: dict, keys: dict) -> list[Problem]:
    import jsonschema

    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for err in validator.iter_errors(data):
        parts = tuple(err.absolute_path)
        where = _field_path(parts)
        line = _line_for(values, parts)
        kind = err.validator
        sch = err.schema if isinstance(err.schema, dict) else {}
        if kind == "additionalProperties" and isinstance(err.instance, dict):
            allowed = sorted(sch.get("properties", {}))
            for extra in sorted(set(err.instance) - set(allowed)):
                sub = parts + (extra,)
                problems.append(Problem(
                    shown, keys.get(_field_path(sub), line), _field_path(sub), "",
                    f"unknown field{did_you_mean(extra, allowed)}; allowed: {', '.join(allowed)}"))
            continue
        if kind == "required" and isinstance(err.instance, dict):
            for missing in [k for k in err.validator_value if k not in err.instance]:
                hint = sch.get("properties", {}).get(missing, {}).get("description", "")
                problems.append(Problem(
                    shown, line, _field_path(parts + (missing,)), "",
                    f"missing required field; add `{missing}:`" + (f" ({hint})" if hint else "")))
            continue
        value = _short(err.instance)
        if kind == "type":
            expected = err.validator_value
            expected = " or ".join(expected) if isinstance(expected, list) else expected
            msg = f"wrong type {type(err.instance).__name__}; expected {expected}"
            if isinstance(err.instance, str) and "number" in str(expected) and _numeric_text(err.instance):
                msg += (f" (YAML reads {err.instance} as text because a float needs a dot: "
                        f"write {_yaml_float(err.instance)})")
        elif kind == "enum":
            msg = f"not allowed{did_you_mean(err.instance, map(str, err.validator_value))}; " \
                  f"allowed: {', '.join(map(str, err.validator_value))}"
            if sch.get("description"):
                msg += f" ({sch['description']})"
        elif kind == "pattern":
            msg = f"does not match; expected {sch.get('x-allowed', 'pattern ' + str(err.validator_value))}"
        elif kind == "propertyNames":
            msg = "bound key must be an identifier such as max_abs_delta"
        elif kind == "minItems":
            msg = f"needs at least {err.validator_value} item(s)"
        elif kind == "minLength":
            msg = "must not be empty"
        elif kind == "uniqueItems":
            msg = "has duplicate items; list each once"
        elif kind == "minProperties":
            msg = "must not be empty; give at least one entry, e.g. {max_abs_delta: {le: 0}}"
        elif kind in ("maximum", "exclusiveMaximum"):
            sign = "<=" if kind == "maximum" else "<"
            msg = f"too large; must be {sign} {err.validator_value:g}"
        elif kind in ("minimum", "exclusiveMinimum"):
            sign = ">=" if kind == "minimum" else ">"
            msg = f"too small; must be {sign} {err.validator_value}"
        else:
            msg = err.message
        problems.append(Problem(shown, line, where, value, msg))
    return problems


# ---------------------------------------------------------------- loading


def _bounds(raw: Mapping[str, Mapping[str, Any]] | None) -> tuple[Bound, ...]:
    out = []
    for key, ops in (raw or {}).items():
        for op, limit in ops.items():
            out.append(Bound(key, op, limit))
    return tuple(out)


def _witness(raw: Mapping[str, Any], kind: Kind) -> Witness:
    return Witness(
        id=raw["id"], test=raw["test"], kind=kind, bounds=_bounds(raw.get("bounds")),
        reason=raw.get("reason", ""), timeout=raw.get("timeout"), notes=raw.get("notes", ""))


def default_covers(refs: Iterable[str], witnesses: Iterable[Witness]) -> tuple[str, ...]:
    """Files of the refs and of the witnesses, first-seen order, no duplicates."""
    files = [r.split("::", 1)[0] for r in refs] + [w.file for w in witnesses]
    return tuple(dict.fromkeys(files))


# C0 and C1 control characters, DEL and the Unicode line/paragraph separators; \n and \t are
# allowed in the prose fields only.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
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
            problems.append(Problem(
                shown, _line_for(values, parts), _field_path(parts), _short(text),
                f"contains the control character U+{ord(char):04X}; reports would show it raw. "
                "Remove it (write plain text" + ("" if prose else " on one line") + ")"))
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


def _path_problems(data: dict, shown: str, values: dict, root: Path) -> list[Problem]:
    """Every file a card names (refs, witness tests, covers) resolves inside the project root."""
    named: list[tuple[tuple, str]] = []
    named += [(("refs", i), r.split("::", 1)[0]) for i, r in enumerate(data.get("refs") or [])]
    named += [(("covers", i), c) for i, c in enumerate(data.get("covers") or [])]
    for group in ("witnesses", "controls"):
        named += [((group, i, "test"), w["test"].split("::", 1)[0]) for i, w in enumerate(data.get(group) or [])]
    problems = []
    for parts, file in named:
        why = path_problem(file, root)
        if why:
            problems.append(Problem(shown, _line_for(values, parts), _field_path(parts),
                                    _short(_get(data, parts)), why))
    return problems


def _get(data: Any, parts: tuple) -> Any:
    for p in parts:
        data = data[p]
    return data


def _bound_problems(data: dict, shown: str, values: dict) -> list[Problem]:
    """Bound limits must be finite (``.nan`` or ``.inf`` would make a bound that checks nothing); so must timeouts."""
    problems = []
    for group in ("witnesses", "controls"):
        for i, w in enumerate(data.get(group) or []):
            timeout = w.get("timeout")
            if isinstance(timeout, float) and math.isnan(timeout):
                fp = f"{group}[{i}].timeout"
                problems.append(Problem(shown, values.get(fp, 0), fp, "nan",
                                        "a timeout must be a finite number of seconds above 0; e.g. `timeout: 120`"))
            for key, ops in (w.get("bounds") or {}).items():
                for op, limit in ops.items():
                    if isinstance(limit, float) and not math.isfinite(limit):
                        fp = f"{group}[{i}].bounds.{key}.{op}"
                        what = "NaN compares false with everything" if math.isnan(limit) else \
                            "an infinite limit holds (or fails) for every finite value"
                        problems.append(Problem(
                            shown, values.get(fp, 0), fp, _short(limit),
                            f"a bound limit must be a finite number ({what}, so the bound would check "
                            f"nothing or refute everything); give the real limit, e.g. {{{op}: 0}}"))
    return problems


def _semantic_problems(data: dict, shown: str, values: dict, root: Path) -> list[Problem]:
    """Checks the schema cannot express: finite bounds, paths inside the root, control
    characters, tolerance reasons, unique witness ids."""
    problems = _bound_problems(data, shown, values) + _path_problems(data, shown, values, root)
    problems += _control_problems(data, shown, values)
    seen: dict[str, str] = {}
    for group in ("witnesses", "controls"):
        for i, w in enumerate(data.get(group) or []):
            where = f"{group}[{i}]"
            if w["id"] in seen:
                problems.append(Problem(shown, values.get(f"{where}.id", 0), f"{where}.id", _short(w["id"]),
                                        f"duplicate witness id (also {seen[w['id']]}); ids must be unique in a card"))
            seen.setdefault(w["id"], where)
            for key, ops in (w.get("bounds") or {}).items():
                for op, limit in ops.items():
                    if op in TOLERANCE_OPS and isinstance(limit, (int, float)) and math.isfinite(limit) and limit > 0 and not w.get("reason"):
                        fp = f"{where}.bounds.{key}.{op}"
                        problems.append(Problem(
                            shown, values.get(fp, 0), fp, _short(limit),
                            f"a tolerance above zero needs a reason; add `reason:` to {where} "
                            f"saying why {limit!r} is right"))
    return problems


def load_card(path: Path, root: Path) -> tuple[Card | None, list[Problem], str | None]:
    """Load one card file. Returns (card or None, load problems, the id if readable)."""
    shown = display_path(path, root)
    try:
        raw_bytes = path.read_bytes()
        text = raw_bytes.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(shown, 0, "", "", f"cannot read the card: {exc}")], None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        what = exc.problem or "invalid YAML"
        if exc.context:
            ctx = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
            what += f" ({exc.context}{ctx})"
        return None, [Problem(shown, line, "", "", f"YAML syntax error: {what}; fix the YAML here")], None
    except yaml.YAMLError as exc:
        return None, [Problem(shown, 0, "", "", f"YAML error: {exc}")], None
    if node is None or not isinstance(data, dict):
        return None, [Problem(shown, 1, "", _short(data) if data is not None else "",
                              "a card must be a YAML mapping of fields (id:, title:, ...); "
                              "see obligations/card.schema.json")], None
    values, keys, dups = _line_index(node)
    problems = [Problem(shown, line, f, "", "duplicate key; YAML would silently keep only the last one")
                for f, line in dups]
    problems += _schema_problems(data, shown, values, keys)
    problems.sort(key=lambda p: p.line)
    card_id = data.get("id") if isinstance(data.get("id"), str) else None
    if problems:
        return None, problems, card_id
    problems = _semantic_problems(data, shown, values, root)
    if problems:
        problems.sort(key=lambda p: p.line)
        return None, problems, card_id
    witnesses = tuple(_witness(w, Kind.WITNESS) for w in data["witnesses"])
    controls = tuple(_witness(w, Kind.CONTROL) for w in data.get("controls") or [])
    refs = tuple(data["refs"])
    covers = tuple(data["covers"]) if "covers" in data else default_covers(refs, witnesses + controls)
    card = Card(
        id=data["id"], title=data["title"], module=data["module"], regime=data["regime"],
        theorem=data["theorem"].strip(), proof=data["proof"].strip(), refs=refs, covers=covers,
        requires=tuple(data.get("requires") or ()), witnesses=witnesses, controls=controls,
        liars=tuple(data.get("liars") or ()), notes=(data.get("notes") or "").strip(),
        tags=tuple(data.get("tags") or ()), version=data["version"], source=path.resolve(),
        display_path=shown, fingerprint=hashlib.sha256(raw_bytes).hexdigest(), lines=values)
    return card, [], card_id


def link_problems(card: Card, root: Path, liars: Mapping[str, LiarSite]) -> list[Problem]:
    """Refs, test nodes, covered files and liars that do not exist (kind='link')."""
    out = []

    def add(fp: str, value: str, msg: str) -> None:
        out.append(Problem(card.display_path, card.line_of(fp), fp, _short(value), msg, kind="link"))

    for i, ref in enumerate(card.refs):
        site = resolve_ref(root, ref)
        if isinstance(site, str):
            add(f"refs[{i}]", ref, f"ref does not resolve: {site}")
    for group, items in (("witnesses", card.witnesses), ("controls", card.controls)):
        for i, w in enumerate(items):
            site = resolve_test(root, w.test)
            if isinstance(site, str):
                add(f"{group}[{i}].test", w.test, f"test node does not exist: {site}")
    if "covers" in card.lines:
        for i, f in enumerate(card.covers):
            if not (root / f).is_file():
                add(f"covers[{i}]", f, f"no such file under the project root {root}")
    for i, name in enumerate(card.liars):
        if name not in liars:
            known = ", ".join(sorted(liars)) or "none registered in witnesses/liars/"
            add(f"liars[{i}]", name, f"unknown liar{did_you_mean(name, liars)}; known: {known}")
            continue
        site = liars[name]
        module, _, qual = site.target.partition(":")
        file = module.replace(".", "/") + ".py"
        if not (root / file).is_file() and (root / module.replace(".", "/") / "__init__.py").is_file():
            file = module.replace(".", "/") + "/__init__.py"
        found = resolve_symbol(root, file, qual)
        if isinstance(found, str):
            shown = display_path(site.path, root)
            add(f"liars[{i}]", name,
                f"the liar's target {site.target!r} ({shown}:{site.line}) does not resolve: {found}")
    return out


def find_card_files(cards_dir: Path) -> list[Path]:
    """Every ``*.yaml``/``*.yml`` under ``cards_dir``, sorted by path."""
    if not cards_dir.is_dir():
        return []
    return sorted(p for p in cards_dir.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def load_cards(cards_dir: Path, root: Path, liars: Mapping[str, LiarSite] | None = None) -> LoadResult:
    """Load and validate every card under ``cards_dir``; never stops at the first problem.

    ``liars`` is the static liar index (:func:`harness.liars.scan`); when
    None, liar names are not checked.
    """
    cards: list[Card] = []
    problems: list[Problem] = []
    first_seen: dict[str, tuple[str, int]] = {}
    broken_ids: dict[str, str] = {}
    for path in find_card_files(cards_dir):
        card, probs, card_id = load_card(path, root)
        problems += probs
        if card is None and card_id is not None:
            broken_ids[display_path(path, root)] = card_id
        if card_id is not None:
            shown = display_path(path, root)
            line = card.line_of("id") if card else 0
            if card_id in first_seen:
                where = "%s:%d" % first_seen[card_id]
                problems.append(Problem(shown, line, "id", _short(card_id),
                                        f"duplicate card id (first defined at {where}); give this card its own id"))
                continue
            first_seen[card_id] = (shown, line)
        if card is not None:
            cards.append(card)
            problems += link_problems(card, root, liars) if liars is not None else []
    return LoadResult(tuple(cards), tuple(problems), broken_ids)


# ---------------------------------------------------------------- selection


def select(cards: Iterable[Card], patterns: Iterable[str] = (), tags: Iterable[str] = ()) -> list[Card]:
    """Cards whose id matches any pattern (exact or fnmatch glob) and carries any tag.

    Raises :class:`harness.errors.UsageError` for a pattern or tag that
    matches no card, with a suggestion.
    """
    from fnmatch import fnmatchcase

    from harness.errors import UsageError

    cards = list(cards)
    patterns, tags = list(patterns), list(tags)
    ids = [c.id for c in cards]
    for pat in patterns:
        if not any(fnmatchcase(i, pat) for i in ids):
            raise UsageError(f"card id {pat!r} matches no card{did_you_mean(pat, ids)}; "
                             f"`run_obligations.py list` shows the ids")
    all_tags = {t for c in cards for t in c.tags}
    for tag in tags:
        if tag not in all_tags:
            raise UsageError(f"--tag {tag!r} is on no card{did_you_mean(tag, all_tags)}; "
                             f"tags in use: {', '.join(sorted(all_tags)) or 'none'}")
    out = []
    for c in cards:
        if patterns and not any(fnmatchcase(c.id, p) for p in patterns):
            continue
        if tags and not set(tags) & set(c.tags):
            continue
        out.append(c)
    return out


_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,63}$")


def valid_card_id(card_id: str) -> bool:
    return bool(_ID_RE.match(card_id))
