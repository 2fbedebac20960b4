"""Committed scheduling hints: ``<cards dir>/timings.json``, the expected process times of a run with no history.

The scheduler (:mod:`harness.execute.schedule`) starts the job with the longest
expected chain first and runs the witnesses that caught a liar first under
it. It learns both from the card's last recorded run in the ledger
(``reports/ledger.sqlite``), which a fresh clone (CI) does not have: there
every card is "unknown" (1 s) and jobs go in card order. In the spirit of
pytest-split's ``.test_durations``, ``timings.json`` next to the cards
(``obligations/`` unless ``--cards`` / ``KVPROOF_CARDS_DIR`` say otherwise)
carries those numbers in the repository: ``run_obligations.py timings
--write`` writes it from the ledger's latest entry of each card (what
:func:`expected_from_entry` gives, seconds rounded to 0.1),
and :func:`harness.plan.planning.plan` uses it for each card the ledger has no
entry for (a ledger entry is newer and was measured on this machine, so it
wins). ``run_obligations.py timings`` shows what the next run would use and
where each number came from (the table: :func:`harness.report.terminal.render_timings`).

Cells: a ``run --matrix`` or ``run --target`` records each cell in the ledger
under its own id, ``CARD@NAME`` (:func:`harness.plan.subjects.cell_id`), and that
is the key the plan looks a cell's times up by, in the ledger and in this
file; ``timings --write`` writes every cell the ledger holds beside the
cards (a cell without an entry of its own takes its card's).

The format (schema: ``obligations/timings.schema.json``)::

    {"format": "kvproof-timings", "version": 1, "recorded": "2026-12-01T00:14:46Z",
     "source": "ledger run 33 (reports/2026-12-01T00-07-51Z)",
     "cards": {"RING-T3": {"honest_s": 15.2,
                           "liars": {"ring.stale_tail": {"s": 9.8, "caught_by": ["matches-reference"]}}}}}

They are hints, never part of a verdict: entries for card ids or liar names
that no longer exist are ignored, a card or liar missing from the file is
unknown (1 s), and a witness id in ``caught_by`` that the card no longer has
moves nothing. A malformed file is refused before anything runs
(:class:`TimingsInvalid`, exit 2, one paragraph naming the file, the field as
a JSON path, the value, what is allowed (:mod:`harness.schemas`) and the fix), never silently
ignored: bad JSON, another format or version, a duplicate key, seconds that
are negative, not numbers or not finite (NaN, Infinity), any field missing,
unknown or of the wrong type.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from harness import schemas
from harness.errors import HarnessError, InputRefused
from harness.inputs import HINTS_LIMIT, read_text
from harness.plan.subjects import split
from harness.project import KVPROOF_HOME, runner
from harness.record.document import CardResult
from harness.select.cards import display_path
from harness.select.problems import Problem
from harness.select.suggest import did_you_mean
from harness.statuses import LiarStatus

FILENAME = "timings.json"
FORMAT = "kvproof-timings"
VERSION = 1
SCHEMA_PATH = KVPROOF_HOME / "obligations" / "timings.schema.json"


def fix() -> str:
    """What to do about a malformed file, with the command as the user runs it (:func:`harness.project.program`)."""
    return f"delete it or rewrite it with `{runner()} timings --write`"


# where a card's expected times came from
LEDGER, FILE, UNKNOWN = "ledger", FILENAME, "unknown"


UNKNOWN_S = 1.0  # expected seconds of a process never seen before


@dataclass(frozen=True)
class Expected:
    """Expected seconds of a card's processes, and which witnesses caught each liar, from its last recorded run."""

    honest_s: float = UNKNOWN_S
    liars_s: Mapping[str, float] = field(default_factory=dict)
    caught_by: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # liar -> witness ids

    def liar(self, name: str) -> float:
        return self.liars_s.get(name, UNKNOWN_S)


def expected_from_entry(entry: CardResult | None) -> Expected:
    """Process durations from a card's result in an earlier run (None: unknown)."""
    if entry is None:
        return Expected()
    liars = {lv.name: float(lv.duration_s or 0.0) for lv in entry.liars if lv.status != LiarStatus.NOT_RUN}
    caught = {lv.name: tuple(lv.caught_by) for lv in entry.liars if lv.caught_by}
    return Expected(entry.honest_s or UNKNOWN_S, liars, caught)


def chain_s(exp: Expected, liars: Sequence[str]) -> float:
    """A card's expected chain: its honest run, then (its liars start after it, side by side) its slowest liar."""
    return exp.honest_s + max((exp.liar(n) for n in liars), default=0.0)


class TimingsInvalid(HarnessError, ValueError):
    """``timings.json`` is malformed (exit 2); ``problem`` names the file, the field (a JSON path) and the value."""

    def __init__(self, problem: Problem, more: int = 0) -> None:
        self.problem = problem
        also = f" ({more} more problem(s) in the file)" if more else ""
        super().__init__(
            f"{problem}{also}. The file holds only scheduling hints (expected seconds per process, "
            f"see obligations/timings.schema.json); {fix()}."
        )


@dataclass(frozen=True)
class Hints:
    """A loaded ``timings.json``."""

    path: Path
    recorded: str
    source: str
    cards: Mapping[str, Expected]


def path_in(cards_dir: Path) -> Path:
    return cards_dir / FILENAME


# ---------------------------------------------------------------- reading


@functools.lru_cache(maxsize=1)
def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def load(cards_dir: Path, root: Path) -> dict[str, Expected]:
    """{card id: Expected} from ``cards_dir/timings.json``; {} when there is none; TimingsInvalid when malformed."""
    hints = read(cards_dir, root)
    return dict(hints.cards) if hints is not None else {}


def read(cards_dir: Path, root: Path) -> Hints | None:
    """The hints file of ``cards_dir``, fully validated; None when there is none. Raises TimingsInvalid."""

    path = path_in(cards_dir)
    if not path.exists() and not path.is_symlink():
        return None
    shown = display_path(path, root)
    try:
        text = read_text(path, HINTS_LIMIT)
    except InputRefused as exc:
        raise TimingsInvalid(Problem(shown, 0, "", "", f"it {exc.why}")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TimingsInvalid(
            Problem(shown, 0, "", "", f"cannot read it ({getattr(exc, 'strerror', None) or exc})")
        ) from None
    if not text.strip():
        raise TimingsInvalid(Problem(shown, 0, "", "", "the file is empty; a JSON object was expected"))
    try:
        data = json.loads(text, object_pairs_hook=_Object.of)
    except json.JSONDecodeError as exc:
        raise TimingsInvalid(
            Problem(shown, exc.lineno, "", "", f"not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})")
        ) from None
    problems = _schema_problems(data, shown)
    first = [p for p in problems if p.field in ("$.format", "$.version")]  # another format explains the rest
    problems = first + _value_problems(data, shown) + [p for p in problems if p not in first]
    if problems:
        raise TimingsInvalid(problems[0], len(problems) - 1)
    return Hints(path, data["recorded"], data["source"], {cid: _expected(e) for cid, e in data["cards"].items()})


def _expected(entry: Mapping[str, Any]) -> Expected:
    liars = entry["liars"]
    return Expected(
        float(entry["honest_s"]),
        {n: float(lv["s"]) for n, lv in liars.items()},
        {n: tuple(lv["caught_by"]) for n, lv in liars.items() if lv["caught_by"]},
    )


class _Object(dict):
    """A JSON object that had a key twice (``duplicate``: that key); json keeps only the last value."""

    duplicate: str = ""

    @classmethod
    def of(cls, pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for key, value in pairs:
            if key in out:
                dup = cls(pairs)
                dup.duplicate = key
                return dup
            out[key] = value
        return out


def _walk(value: Any, parts: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    yield parts, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, parts + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, parts + (i,))


def _value_problems(data: Any, shown: str) -> list[Problem]:
    """What JSON Schema cannot see: a key given twice, NaN and Infinity (Python's json reads both)."""
    out = []
    for parts, value in _walk(data):
        if isinstance(value, _Object):
            key = value.duplicate
            out.append(
                Problem(
                    shown,
                    0,
                    json_path(parts + (key,)),
                    _value(value[key]),
                    "this key is given twice in one object; keep one",
                )
            )
        elif isinstance(value, float) and not math.isfinite(value):
            out.append(
                Problem(
                    shown,
                    0,
                    json_path(parts),
                    _value(value),
                    "not a finite number; seconds must be a number >= 0 (JSON has no NaN or Infinity)",
                )
            )
    return out


def _schema_problems(data: Any, shown: str) -> list[Problem]:
    """The schema's problems (:mod:`harness.schemas` words them), topmost path first, each field as a JSON path
    and its value as JSON (an unknown field's too: no line points at it)."""
    found = sorted(
        schemas.problems(data, load_schema(), near=did_you_mean, field_form='`"{}":`'),
        key=lambda p: [str(x) for x in p.parts],
    )
    return [Problem(shown, 0, json_path(p.parts), "" if p.missing else _value(p.value), p.message) for p in found]


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def json_path(parts: Sequence[Any]) -> str:
    """``("cards", "KV-T1", "honest_s")`` -> ``$.cards["KV-T1"].honest_s``.

    A key that is not a plain name is quoted.
    """
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if _NAME.match(p) else f"[{json.dumps(p)}]")
    return out


def _value(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- the ledger, and writing


class Recorded(NamedTuple):
    """A card's expected times from its latest ledger entry, and the run whose witnesses measured them."""

    expected: Expected
    run_id: int


def from_ledger(ledger: Any, card_id: str) -> Recorded | None:
    """The card's latest ledger entry as :class:`Expected` (a replay counts as the run it replayed); None: never run."""
    last = ledger.last(card_id)
    if last is None:
        return None
    return Recorded(expected_from_entry(ledger.entry(last.evidence_run_id, card_id)), last.evidence_run_id)


def ledger_source(ledger: Any, run_ids: Iterable[int], reports_shown: str) -> str:
    """``ledger run 33 (reports/2026-...)``: which runs the numbers come from, and the newest one's report folder."""
    ids = sorted(set(run_ids))
    folders = {r["run_id"]: r["report_dir"] for r in ledger.runs()}
    newest = folders.get(ids[-1]) if ids else None
    where = f" ({'newest: ' if len(ids) > 1 else ''}{reports_shown}{newest})" if newest else ""
    return f"ledger run{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}{where}"


def _s(seconds: float) -> float:
    return round(float(seconds), 1)


def to_json(expected: Mapping[str, Expected], source: str, recorded: str) -> dict[str, Any]:
    """The file's content; seconds rounded to 0.1 (a committed file should not churn on noise)."""
    cards = {
        cid: {
            "honest_s": _s(e.honest_s),
            "liars": {
                name: {"s": _s(s), "caught_by": list(e.caught_by.get(name, ()))} for name, s in e.liars_s.items()
            },
        }
        for cid, e in expected.items()
    }
    return {"format": FORMAT, "version": VERSION, "recorded": recorded, "source": source, "cards": cards}


def dumps(doc: Mapping[str, Any]) -> str:
    """The file's text: indented JSON with one line per card and per liar, so a rewrite diffs line by line."""
    d = functools.partial(json.dumps, ensure_ascii=False)
    lines = ["{"] + [f"  {d(k)}: {d(v)}," for k, v in doc.items() if k != "cards"] + ['  "cards": {']
    for i, (cid, entry) in enumerate(doc["cards"].items()):
        end = "," if i < len(doc["cards"]) - 1 else ""
        head = f'    {d(cid)}: {{"honest_s": {d(entry["honest_s"])}, "liars": {{'
        liars = list(entry["liars"].items())
        lines += (
            [head + "}}" + end]
            if not liars
            else [head]
            + [f"      {d(n)}: {d(lv)}" + ("," if j < len(liars) - 1 else "") for j, (n, lv) in enumerate(liars)]
            + ["    }}" + end]
        )
    return "\n".join(lines + ["  }", "}"]) + "\n"


def write(cards_dir: Path, expected: Mapping[str, Expected], source: str, recorded: str) -> Path:
    """Write ``cards_dir/timings.json`` atomically (a reader sees the old file or the new one); returns its path."""
    path = path_in(cards_dir)
    text = dumps(to_json(expected, source, recorded))
    fd, tmp = tempfile.mkstemp(dir=cards_dir, prefix=".timings-", suffix=".json")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would make a file only its writer can read
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# ---------------------------------------------------------------- what the scheduler uses


def combine(
    card_ids: Iterable[str], ledger: Mapping[str, Expected], hints: Mapping[str, Expected]
) -> tuple[dict[str, Expected], dict[str, str]]:
    """(card id -> Expected, card id -> where it came from): the ledger's entry, else the file's, else unknown.

    A card that is unknown gets no Expected (the scheduler's default, 1 s a process).
    """
    expected: dict[str, Expected] = {}
    sources: dict[str, str] = {}
    for cid in card_ids:
        for source, known in ((LEDGER, ledger), (FILE, hints)):
            if cid in known:
                expected[cid], sources[cid] = known[cid], source
                break
        else:
            sources[cid] = UNKNOWN
    return expected, sources


def schedule_line(sources: Mapping[str, str], shown_file: str) -> str:
    """Where the run's expected times came from.

    ``schedule: ledger 0, obligations/timings.json 19, unknown 0 card(s)``.
    """
    n = Counter(sources.values())
    return f"schedule: ledger {n[LEDGER]}, {shown_file} {n[FILE]}, unknown {n[UNKNOWN]} card(s)"


def stale_entries(hints: Hints, cards: Sequence[Any]) -> list[str]:
    """Entries of the file that name no card (nor a cell ``CARD@NAME`` of one), or a liar its card does not list
    (ignored by the scheduler)."""
    by_id = {c.id: c for c in cards}
    card_of = {cid: by_id.get(split(cid)[0]) for cid in hints.cards}
    out = [cid for cid, card in card_of.items() if card is None]
    out += [
        f"{cid} / {name}"
        for cid, e in hints.cards.items()
        if card_of[cid] is not None
        for name in e.liars_s
        if name not in card_of[cid].liars
    ]
    return out


__all__ = [
    "FILENAME",
    "Hints",
    "Recorded",
    "TimingsInvalid",
    "combine",
    "dumps",
    "fix",
    "from_ledger",
    "json_path",
    "ledger_source",
    "load",
    "read",
    "schedule_line",
    "stale_entries",
    "to_json",
    "write",
]
