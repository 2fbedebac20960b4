"""Load theorem cards from YAML and validate them, reporting every problem.

A card is read with ``yaml.safe_load`` only, checked against
``obligations/card.schema.json`` and then against the project it talks about:
refs and test nodes are resolved statically with :mod:`ast` (nothing is
imported), liars against the static liar index. Nothing here runs code.

Two kinds of :class:`Problem`:

- ``load``: the card cannot be used at all (YAML syntax, schema, duplicate
  ids, a tolerance without a reason). ``run`` refuses to start (exit 2).
- ``link``: the card is well formed but points at something that does not
  exist (ref, test node, liar, covered file), or is still a scaffold
  (``kvproof new``'s placeholder TODO in its title, theorem, proof or a
  reason; ``refs: []``). ``run`` gives that card ERROR without running it;
  ``validate`` reports it like any other problem.

One pass: every check runs on every part of a card that has the shape it
reads, so a card the schema refuses still has its refs, tests, liars and
bounds checked, and ``validate`` names every problem of every card at once,
each card's sorted by line. A card with a ``load`` problem is not built, and
every problem of it then counts as ``load``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from harness.errors import InputRefused, UsageError, YamlAliasRefused
from harness.inputs import CARD_LIMIT, read_bytes
from harness.liars import LiarSite
from harness.project import SCHEMA_PATH, runner  # noqa: F401  (SCHEMA_PATH re-exported for the scaffold, tests)
from harness.select.problems import (
    Problem,
    entries_of,
    field_path,
    items_of,
    line_index,
    load_schema,  # noqa: F401  (re-exported: harness.select.schemadoc reads it here)
    parse_yaml,
    schema_problems,
    semantic_problems,
    short,
)
from harness.select.refs import resolve_ref, resolve_symbol, resolve_test
from harness.select.suggest import did_you_mean
from harness.statuses import Kind
from harness.wire.safetext import escape, is_safe
from harness.wording import bound_text

TOLERANCE_OPS = ("le", "lt")
BOUND_OPS = ("le", "lt", "ge", "gt", "eq", "ne")
ALIAS_MESSAGE = "YAML aliases (*{name}) are not allowed in a card; write the value out"

# ---------------------------------------------------------------- data types


@dataclass(frozen=True)
class Bound:
    """``key op limit`` on a value a witness records, e.g. max_abs_delta le 0."""

    key: str
    op: str  # one of BOUND_OPS
    limit: Any

    def __str__(self) -> str:
        return bound_text(self.key, self.op, self.limit)


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
    regression: tuple[tuple[str, float], ...] = ()  # (key, fraction of the headroom) pairs (harness.compare.diff)

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
    min_score: float | None = None  # mutation.min_score: the least mutation score the card must meet
    explicit_covers: bool = False  # covers: written in the card (not derived from refs and witnesses)
    claims_covers: bool = True  # mutation.claims: "refs-and-covers" (the default) or "refs" (covers bind only)
    subject: str = (
        "default"  # the subject a cell of this card is about (harness.plan.subjects); id is then CARD@SUBJECT
    )
    card_id: str = ""  # the card's own id when this is a cell of another subject ("" : same as id)

    @property
    def base_id(self) -> str:
        """The card's own id (a cell's ``id`` is ``CARD@SUBJECT`` for subjects other than the default)."""
        return self.card_id or self.id

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


def display_path(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- loading

_LOADED: dict[str, bytes] = {}  # sha256 -> the bytes of every card file this process loaded


def _keep_bytes(raw: bytes) -> str:
    """Remember a card file's bytes under their sha256 (the card's fingerprint), which is returned."""
    fp = hashlib.sha256(raw).hexdigest()
    _LOADED[fp] = raw
    return fp


def card_bytes(fingerprint: str) -> bytes | None:
    """The exact bytes a card with this fingerprint was loaded from in this process (None: not loaded here).

    The report folder keeps them (``cards/``), so an old report still shows the theorem, bounds and liars
    its verdicts were judged against, even after the card file changed.
    """
    return _LOADED.get(fingerprint)


def _bounds(raw: Mapping[str, Mapping[str, Any]] | None) -> tuple[Bound, ...]:
    out = []
    for key, ops in (raw or {}).items():
        for op, limit in ops.items():
            out.append(Bound(key, op, limit))
    return tuple(out)


def _witness(raw: Mapping[str, Any], kind: Kind) -> Witness:
    return Witness(
        id=raw["id"],
        test=raw["test"],
        kind=kind,
        bounds=_bounds(raw.get("bounds")),
        reason=raw.get("reason", ""),
        timeout=raw.get("timeout"),
        notes=raw.get("notes", ""),
        regression=tuple((k, float(v)) for k, v in (raw.get("regression") or {}).items()),
    )


def default_covers(refs: Iterable[str], witnesses: Iterable[Witness]) -> tuple[str, ...]:
    """Files of the refs and of the witnesses, first-seen order, no duplicates."""
    files = [r.split("::", 1)[0] for r in refs] + [w.file for w in witnesses]
    return tuple(dict.fromkeys(files))


def load_card(
    path: Path, root: Path, liars: Mapping[str, LiarSite] | None = None
) -> tuple[Card | None, list[Problem], str | None]:
    """Load one card file. Returns (card or None, every problem found, sorted by line, the id if readable).

    In steps: its name (:func:`_unnamable`), its bytes (:func:`_read_card`), its YAML (:func:`_parse_card`), its
    form (duplicate keys, the schema), its meaning (:func:`harness.select.problems.semantic_problems`), what it
    points at (:func:`_link_checks`: only when ``liars``, the liar index, is given), then the :class:`Card`
    (:func:`_build_card`). One pass: a step never stops the next ones; each check reads the parts of the card that
    have the shape it needs, so a misspelt field does not hide a ref that does not resolve. A card with a ``load``
    problem is not built, and then every problem of it is ``load`` (the card is not used at all). A built card
    comes with its ``link`` problems (``run`` makes it ERROR without running it).
    """
    shown = display_path(path, root)
    refused = _unnamable(shown)
    if refused is not None:
        return None, [refused], None
    read = _read_card(path, shown)
    if isinstance(read, Problem):
        return None, [read], None
    raw_bytes, text = read
    parsed = _parse_card(text, shown)
    if isinstance(parsed, Problem):
        return None, [parsed], None
    node, data = parsed
    values, keys, dups = line_index(node)
    problems = [
        Problem(shown, line, f, "", "duplicate key; YAML would silently keep only the last one") for f, line in dups
    ]
    problems += schema_problems(data, shown, values, keys)
    problems += semantic_problems(data, shown, values, root)
    card_id = data.get("id") if isinstance(data.get("id"), str) else None
    if liars is not None:
        problems += _link_checks(shown, values, root, liars, **_linked(data, problems))
    card = None
    if any(p.kind == "load" for p in problems):
        problems = [p if p.kind == "load" else replace(p, kind="load") for p in problems]
    else:
        card = _build_card(data, path, shown, raw_bytes, values)
    problems.sort(key=lambda p: (p.line, p.field))
    return card, problems, card_id


def _linked(data: dict, problems: Iterable[Problem]) -> dict[str, list[tuple[str, str]]]:
    """What :func:`_link_checks` resolves in a card's fields: each ref, test node, explicit cover and liar name
    that is text and has no problem yet (a ref the schema refuses, or one leading out of the root, is not read)."""
    taken = [p.field for p in problems]

    def clean(parts: tuple) -> bool:
        fp = field_path(parts)
        return not any(f == fp or f.startswith((fp + ".", fp + "[")) for f in taken)

    def texts(key: str) -> list[tuple[str, str]]:
        return [(field_path((key, i)), v) for i, v in items_of(data, key) if isinstance(v, str) and clean((key, i))]

    tests = [
        (field_path((g, i, "test")), w["test"])
        for g, i, w in entries_of(data)
        if isinstance(w.get("test"), str) and clean((g, i, "test"))
    ]
    return {"refs": texts("refs"), "tests": tests, "covers": texts("covers"), "names": texts("liars")}


def _unnamable(shown: str) -> Problem | None:
    """The problem of a card file whose path cannot be shown as plain text (None: it can)."""
    if is_safe(shown, lines=False):
        return None
    shown = escape(shown, lines=False)
    why = "its path is not plain text (bytes that are not UTF-8, or a control character); rename the file or folder"
    return Problem(shown, 0, "", "", f"the card file cannot be named in a report: {why}")


def _read_card(path: Path, shown: str) -> tuple[bytes, str] | Problem:
    """The card file's bytes and UTF-8 text, or the problem that it cannot be read (too large, not a file, ...)."""
    try:
        raw_bytes = read_bytes(path, CARD_LIMIT)
        return raw_bytes, raw_bytes.decode("utf-8")
    except InputRefused as exc:
        return Problem(shown, 0, "", "", f"the card file {exc.why}; replace it with a card's YAML")
    except (OSError, UnicodeDecodeError) as exc:
        return Problem(shown, 0, "", "", f"cannot read the card: {exc}")


def _parse_card(text: str, shown: str) -> tuple[Any, dict] | Problem:
    """The card's YAML node and its mapping of fields, or the problem that it is no YAML mapping."""
    try:
        node, data = parse_yaml(text)
    except YamlAliasRefused as exc:
        return Problem(shown, exc.line, "", f"*{exc.name}", ALIAS_MESSAGE.format(name=exc.name))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        what = exc.problem or "invalid YAML"
        if exc.context:
            ctx = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
            what += f" ({exc.context}{ctx})"
        return Problem(shown, line, "", "", f"YAML syntax error: {what}; fix the YAML here")
    except yaml.YAMLError as exc:
        return Problem(shown, 0, "", "", f"YAML error: {exc}")
    if node is None or not isinstance(data, dict):
        return Problem(
            shown,
            1,
            "",
            short(data) if data is not None else "",
            "a card must be a YAML mapping of fields (id:, title:, ...); see obligations/card.schema.json",
        )
    return node, data


def _build_card(data: Mapping[str, Any], path: Path, shown: str, raw_bytes: bytes, values: Mapping[str, int]) -> Card:
    """The :class:`Card` of a file whose fields passed the schema and the semantic checks."""
    witnesses = tuple(_witness(w, Kind.WITNESS) for w in data["witnesses"])
    controls = tuple(_witness(w, Kind.CONTROL) for w in data.get("controls") or [])
    refs = tuple(data["refs"])
    covers = tuple(data["covers"]) if "covers" in data else default_covers(refs, witnesses + controls)
    return Card(
        id=data["id"],
        title=data["title"],
        module=data["module"],
        regime=data["regime"],
        theorem=data["theorem"].strip(),
        proof=data["proof"].strip(),
        refs=refs,
        covers=covers,
        requires=tuple(data.get("requires") or ()),
        witnesses=witnesses,
        controls=controls,
        liars=tuple(data.get("liars") or ()),
        notes=(data.get("notes") or "").strip(),
        tags=tuple(data.get("tags") or ()),
        version=data["version"],
        source=path.resolve(),
        display_path=shown,
        fingerprint=_keep_bytes(raw_bytes),
        lines=values,
        min_score=(data.get("mutation") or {}).get("min_score"),
        explicit_covers="covers" in data,
        claims_covers=(data.get("mutation") or {}).get("claims", "refs-and-covers") != "refs",
    )


def link_problems(card: Card, root: Path, liars: Mapping[str, LiarSite]) -> list[Problem]:
    """Refs, test nodes, covered files and liars of a loaded card that do not exist (kind='link')."""
    groups = (("witnesses", card.witnesses), ("controls", card.controls))
    return _link_checks(
        card.display_path,
        card.lines,
        root,
        liars,
        refs=[(f"refs[{i}]", r) for i, r in enumerate(card.refs)],
        tests=[(f"{g}[{i}].test", w.test) for g, ws in groups for i, w in enumerate(ws)],
        covers=[(f"covers[{i}]", f) for i, f in enumerate(card.covers)] if card.explicit_covers else [],
        names=[(f"liars[{i}]", n) for i, n in enumerate(card.liars)],
    )


def _link_checks(
    shown: str,
    lines: Mapping[str, int],
    root: Path,
    liars: Mapping[str, LiarSite],
    *,
    refs: Iterable[tuple[str, str]],
    tests: Iterable[tuple[str, str]],
    covers: Iterable[tuple[str, str]],
    names: Iterable[tuple[str, str]],
) -> list[Problem]:
    """Which of these ``(field, value)`` refs, test nodes, covered files and liar names do not exist
    (kind='link'), each with the line ``lines`` gives its field."""
    out = []

    def add(fp: str, value: str, msg: str) -> None:
        out.append(Problem(shown, lines.get(fp, 0), fp, short(value), msg, kind="link"))

    for fp, ref in refs:
        site = resolve_ref(root, ref)
        if isinstance(site, str):
            add(fp, ref, f"ref does not resolve: {site}")
    for fp, test in tests:
        site = resolve_test(root, test)
        if isinstance(site, str):
            add(fp, test, f"test node does not exist: {site}")
    for fp, f in covers:
        if not (root / f).is_file():
            add(fp, f, f"no such file under the project root {root}")
    for fp, name in names:
        if name not in liars:
            hint = did_you_mean(name, liars)
            group = name.split(".")[0] + "."
            near = sorted(n for n in liars if n.startswith(group)) or sorted(liars)
            known = (
                "none registered in witnesses/liars/"
                if not liars
                else f"known {'in ' + group + '*' if near != sorted(liars) else 'liars'}: "
                + ", ".join(near[:8])
                + (f" and {len(near) - 8} more in witnesses/liars/" if len(near) > 8 else "")
            )
            add(fp, name, f"unknown liar{hint}" if hint else f"unknown liar; {known}")
            continue
        site = liars[name]
        module, _, qual = site.target.partition(":")
        file = module.replace(".", "/") + ".py"
        if not (root / file).is_file() and (root / module.replace(".", "/") / "__init__.py").is_file():
            file = module.replace(".", "/") + "/__init__.py"
        found = resolve_symbol(root, file, qual)
        if isinstance(found, str):
            where = display_path(site.path, root)
            add(fp, name, f"the liar's target {site.target!r} ({where}:{site.line}) does not resolve: {found}")
    return out


EQUIVALENT_FILE = (
    "equivalent-mutants.yaml"  # equivalence marks of mutation analysis (harness.mutation.score), not a card
)
TARGETS_FILE = "targets.yaml"  # third-party targets' expected failures (harness.targets.known), not a card
# the YAML files beside the cards that are not cards: equivalence marks, configurations (harness.plan.subjects),
# third-party targets (harness.targets.known)
SIDE_FILES = (EQUIVALENT_FILE, "configurations.yaml", TARGETS_FILE)


def find_card_files(cards_dir: Path) -> list[Path]:
    """Every ``*.yaml``/``*.yml`` under ``cards_dir`` but the side files (:data:`SIDE_FILES`), sorted by path.

    Anything of those names that is not a folder is listed, a FIFO or a device too: :func:`load_card`
    refuses it by name rather than the run ignoring a card silently.
    """
    if not cards_dir.is_dir():
        return []
    return sorted(
        p
        for p in cards_dir.rglob("*")
        if p.suffix in (".yaml", ".yml")
        and not p.is_dir()
        and (p.exists() or p.is_symlink())
        and not (p.name in SIDE_FILES and p.parent == cards_dir)
    )


_ID_LINE = re.compile(r"""^id:[ \t]*["']?([A-Za-z0-9][A-Za-z0-9_.-]*)""", re.M)


def _id_of_unreadable(path: Path) -> str:
    """The id a card file that does not parse means: its ``id:`` line, else its file name (``KV-T9.yaml``)."""
    found = None
    try:
        if path.is_file():  # never a FIFO or a device: reading one would block or never end
            with open(path, encoding="utf-8", errors="replace") as fh:
                found = _ID_LINE.search(fh.read(1 << 16))
    except OSError:
        found = None
    return found.group(1) if found else re.sub(r"\.ya?ml$", "", path.name)


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
        card, probs, card_id = load_card(path, root, liars)  # every problem of the card, sorted by line
        if card is None:  # named by its id, or the id its text or file name gives: `run ID` must say it is broken
            broken_ids[display_path(path, root)] = card_id or _id_of_unreadable(path)
        if card_id is not None:
            shown = display_path(path, root)
            line = card.line_of("id") if card else 0
            if card_id in first_seen:  # this card is not used: each of its problems keeps it out too
                where = "{}:{}".format(*first_seen[card_id])
                probs = [replace(p, kind="load") for p in probs]
                probs.append(
                    Problem(
                        shown,
                        line,
                        "id",
                        short(card_id),
                        f"duplicate card id (first defined at {where}); give this card its own id",
                    )
                )
                problems += sorted(probs, key=lambda p: (p.line, p.field))
                continue
            first_seen[card_id] = (shown, line)
        problems += probs
        if card is not None:
            cards.append(card)
    return LoadResult(tuple(cards), tuple(problems), broken_ids)


# ---------------------------------------------------------------- selection


def select(cards: Iterable[Card], patterns: Iterable[str] = (), tags: Iterable[str] = ()) -> list[Card]:
    """Cards whose id matches any pattern (exact or fnmatch glob) and carries any tag.

    Raises :class:`harness.errors.UsageError` for a pattern or tag that
    matches no card, with a suggestion.
    """
    from fnmatch import fnmatchcase

    cards = list(cards)
    patterns, tags = list(patterns), list(tags)
    ids = [c.id for c in cards]
    for pat in patterns:
        if not any(fnmatchcase(i, pat) for i in ids):
            raise UsageError(
                f"card id {pat!r} matches no card{did_you_mean(pat, ids)}; `{runner()} list` shows the ids"
            )
    all_tags = {t for c in cards for t in c.tags}
    for tag in tags:
        if tag not in all_tags:
            raise UsageError(
                f"--tag {tag!r} is on no card{did_you_mean(tag, all_tags)}; "
                f"tags in use: {', '.join(sorted(all_tags)) or 'none'}"
            )
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
