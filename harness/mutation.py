"""Mutation analysis: of the plausible slips in the code a card claims, how many would its witnesses catch?

For each selected card (``run_obligations.py mutate``):

1. **claim** (:func:`claimed`): the functions the card's claim is about:
   each function or method its refs name (a class ref: all its methods),
   and every function of a ``.py`` file listed under an explicit
   ``covers:``. Derived covers (the files of refs and witnesses) do not
   widen it: a card about ``KVCache.evict`` is not scored on
   ``KVCache.nbytes``.
2. **generate** (:mod:`harness.mutants`) every mutant of those functions and
   **sample** at most ``--max-mutants`` per card, reproducibly from the seed.
3. **run** each mutant as a generated liar: a fresh witness process with the
   one function swapped, the card's witnesses only, stopping at the first
   witness that fails (:func:`mutant_job`). A witness gets
   ``min(its timeout, 5 x its honest time + 10 s)``: a mutant that loops
   forever is stopped early.
4. **classify** (:func:`classify`): killed (which witness), timeout,
   survived, equivalent (survived, and marked so in
   ``obligations/equivalent-mutants.yaml`` with a reason), error (could not
   be applied: not scored).
5. **score** (:func:`summarize`): (killed + timeout) / (killed + timeout +
   survived). A card with ``mutation: {min_score: S}`` whose score for the
   bytes it is bound to now is below S is VACUOUS: its witnesses would pass
   wrong code (:func:`harness.verdict.evaluate`).

:func:`claims` is the project view: every function of the implementation,
the cards that claim it, and its surviving mutants; a function no card
claims is code no theorem constrains.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from harness import mutants as gen
from harness.binding import BoundFile, digest
from harness.cardcheck import Problem, line_for, line_index, parse_yaml, schema_problems, short
from harness.cards import EQUIVALENT_FILE, Card
from harness.document import Claim, MutantResult, MutationResult
from harness.errors import InputRefused, LiarError, YamlAliasRefused
from harness.inputs import HINTS_LIMIT, read_text
from harness.outcomes import witness_outcomes
from harness.run import Job, JobResult
from harness.statuses import MutantStatus, Outcome
from harness.verdict import judge_witness

TIMEOUT_FACTOR = 5.0
TIMEOUT_SLACK_S = 10.0
DEFAULT_MAX_MUTANTS = 40

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
                        "pattern": gen._KEY.pattern,
                        "description": "the mutant key mutate prints, PATH.py:LINE:COL:OPERATOR[#N]",
                        "x-allowed": "a mutant key such as impl/kv.py:131:12:compare",
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
    try:
        text = read_text(path, HINTS_LIMIT)
        node, data = parse_yaml(text)
    except InputRefused as exc:
        return {}, [
            Problem(
                shown, 0, "", "", f"the equivalence marks file {exc.why}; replace it with the YAML file or remove it"
            )
        ]
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [Problem(shown, 0, "", "", f"cannot read the equivalence marks: {exc}")]
    except YamlAliasRefused as exc:
        return {}, [
            Problem(
                shown,
                exc.line,
                "",
                f"*{exc.name}",
                f"YAML aliases (*{exc.name}) are not allowed in the equivalence marks; write the value out",
            )
        ]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return {}, [
            Problem(
                shown,
                mark.line + 1 if mark else 0,
                "",
                "",
                f"YAML syntax error: {getattr(exc, 'problem', exc)}; fix the YAML here",
            )
        ]
    if node is None:
        data, values, keys = {}, {}, {}
    else:
        values, keys, _ = line_index(node)
    problems = schema_problems(data, shown, values, keys, schema=EQUIVALENT_SCHEMA)
    if problems:
        return {}, problems
    known = set(card_ids) if card_ids is not None else None
    marks: dict[str, Mark] = {}
    for i, entry in enumerate(data["equivalent"]):
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
        try:
            gen.find(root, key)
        except LiarError as exc:
            problems.append(
                Problem(
                    shown,
                    line,
                    f"equivalent[{i}].mutant",
                    short(key),
                    f"{exc}; remove the mark or mark the mutant's current key",
                    kind="stale",
                )
            )
            continue
        for j, cid in enumerate(entry.get("cards") or []):
            if known is not None and cid not in known:
                problems.append(
                    Problem(
                        shown,
                        line_for(values, ("equivalent", i, "cards", j)),
                        f"equivalent[{i}].cards[{j}]",
                        short(cid),
                        "no card has this id",
                    )
                )
        marks[key] = Mark(key, entry["reason"].strip(), tuple(entry.get("cards") or ()), line)
    return ({} if any(p.kind != "stale" for p in problems) else marks), problems


# ---------------------------------------------------------------- what a score is bound to


def without_floor(text: bytes) -> bytes:
    """A card file's bytes without its top-level ``mutation:`` entry (the line and its indented continuation)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith(b"mutation:"):
            skipping = True
            continue
        if skipping and line[:1] in (b" ", b"\t"):
            continue
        skipping = False
        out.append(line)
    return b"".join(out)


def score_digest(card: Card, bound: Iterable[BoundFile]) -> str:
    """The digest a mutation score is bound to: the card's bound files, the card file without its floor.

    The floor (``mutation: {min_score: ...}``) judges a score; it is not
    part of what was measured, so setting or changing it keeps the score
    fresh. Any other byte of the card, its witnesses, liars or covered
    files makes the score stale, as it makes a verdict stale.
    """
    try:
        own = hashlib.sha256(without_floor(card.source.read_bytes())).hexdigest()
    except OSError:
        own = None
    return digest(replace(b, sha256=own) if b.role == "card" else b for b in bound)


# ---------------------------------------------------------------- what a card claims


def claimed(card: Card, root: Path) -> dict[str, frozenset[str] | None]:
    """``path -> qualnames`` of the functions the card claims (None: every function of the file).

    Files outside the project or not Python, witnesses (of any card), tests,
    ``conftest.py`` and liars are never mutated.
    """
    own = {w.file for w in card.all_witnesses}

    def is_code(path: str) -> bool:  # witnesses (any card's), tests, conftest and liars are never mutated
        name = Path(path).name
        return (
            path not in own
            and not path.startswith(("witnesses/", "tests/"))
            and not name.startswith("test_")
            and name != "conftest.py"
        )

    out: dict[str, set[str] | None] = {}
    if card.explicit_covers:
        for f in card.covers:
            if f.endswith(".py") and is_code(f) and (root / f).is_file():
                out[f] = None
    for ref in card.refs:
        path, _, qual = ref.partition("::")
        if not path.endswith(".py") or not is_code(path) or not (root / path).is_file():
            continue
        if path in out and out[path] is None:
            continue
        out.setdefault(path, set()).add(qual)
    return {p: (None if q is None else frozenset(q)) for p, q in sorted(out.items())}


def _wanted(names: frozenset[str] | None, qualname: str) -> bool:
    return names is None or qualname in names or any(qualname.startswith(n + ".") for n in names)


class Generated:
    """Every mutant of every file asked for, generated once per file (files are shared between cards)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._by_file: dict[str, list[gen.Mutant]] = {}
        self._functions: dict[str, list[str]] = {}

    def file(self, path: str) -> list[gen.Mutant]:
        if path not in self._by_file:
            self._by_file[path] = gen.generate(self.root, path)
        return self._by_file[path]

    def functions(self, path: str) -> list[str]:
        """Qualnames of the file's functions and methods, in file order."""
        if path not in self._functions:
            tree = ast.parse((self.root / path).read_text(encoding="utf-8"))
            self._functions[path] = [q for q, _ in gen.functions(tree)]
        return self._functions[path]


@dataclass(frozen=True)
class CardMutants:
    """What a card's mutation run covers: its claimed functions, how many mutants they have, the sample."""

    card: Card
    functions: tuple[str, ...]  # "path::qualname"
    candidates: int
    sample: tuple[gen.Mutant, ...]


def claimed_functions(card: Card, generated: Generated) -> tuple[str, ...]:
    """``path::qualname`` of every function the card claims (no mutant is generated)."""
    return tuple(
        f"{path}::{q}"
        for path, names in claimed(card, generated.root).items()
        for q in generated.functions(path)
        if _wanted(names, q)
    )


def card_mutants(card: Card, generated: Generated, max_mutants: int | None, seed: int) -> CardMutants:
    """The card's claimed functions and its sample of their mutants (reproducible from ``seed``)."""
    pool = [
        m
        for path, names in claimed(card, generated.root).items()
        for m in generated.file(path)
        if _wanted(names, m.qualname)
    ]
    return CardMutants(
        card, claimed_functions(card, generated), len(pool), tuple(gen.sample(pool, max_mutants, seed, card.id))
    )


# ---------------------------------------------------------------- run one


def mutant_timeouts(card: Card, took: Mapping[str, float], default_timeout: float) -> dict[str, float]:
    """Per witness test: ``min(its timeout, TIMEOUT_FACTOR x its honest seconds + TIMEOUT_SLACK_S)``.

    ``took``: witness id -> seconds of the card's honest run.
    """
    return {
        w.test: min(w.timeout or default_timeout, TIMEOUT_FACTOR * took.get(w.id, 0.0) + TIMEOUT_SLACK_S)
        for w in card.witnesses
    }


def mutant_job(card: Card, mutant: gen.Mutant, timeouts: Mapping[str, float]) -> Job:
    """The card's witnesses under ``mutant``: a fresh process, stopping at the first witness that fails."""
    return Job(card, card.witnesses, mutant=mutant.key, timeouts=dict(timeouts))


def classify(card: Card, mutant: gen.Mutant, res: JobResult, mark: Mark | None, root: Path) -> MutantResult:
    """What the card's witnesses made of ``mutant``, judged exactly as under a liar (node outcomes *and* bounds).

    error: the mutant could not be applied. killed: a witness failed or
    errored (an assertion, an exception, a bound that did not hold, a
    collection error, a crash). timeout: a witness ran past its timeout.
    survived: every witness passed (skips are named: they checked nothing);
    equivalent: survived, and ``mark`` says why no input can tell it apart.
    """

    def result(status: MutantStatus, killer: str = "", detail: str = "") -> MutantResult:
        text = ""
        if status != MutantStatus.KILLED:
            try:
                text = gen.diff(root, mutant)
            except LiarError:
                text = ""
        return MutantResult(
            mutant.key,
            mutant.path,
            mutant.line,
            mutant.qualname,
            mutant.operator,
            mutant.change,
            status,
            killer,
            detail,
            round(res.duration, 3),
            text,
        )

    if res.liar_error:
        return result(MutantStatus.ERROR, detail=f"could not be applied: {res.liar_error}")
    outcomes = witness_outcomes(card.witnesses, res)
    judged = [judge_witness(w, o) for w, o in zip(card.witnesses, outcomes, strict=False)]
    for w, o, v in zip(card.witnesses, outcomes, judged, strict=False):
        if v.status in (Outcome.FAILED, Outcome.ERROR):
            node = o.first(Outcome.ERROR)
            if node is not None and (node.message or "").startswith("timeout:"):
                return result(MutantStatus.TIMEOUT, w.id, node.message)
            return result(MutantStatus.KILLED, w.id, v.why.splitlines()[0] if v.why else "")
    if res.stopped.startswith("pytest was silent"):
        return result(MutantStatus.TIMEOUT, "collection", res.stopped)
    not_run = [v for v in judged if v.status == Outcome.NOT_RUN]
    if not_run:  # no witness failed, yet one never ran: the process died between nodes
        return result(MutantStatus.KILLED, "crash", f"{not_run[0].witness_id} {not_run[0].why}")
    skipped = [v.witness_id for v in judged if v.status == Outcome.SKIPPED]
    if mark is not None:
        return result(MutantStatus.EQUIVALENT, detail=mark.reason)
    note = f" ({', '.join(skipped)} skipped: checked nothing)" if skipped else ""
    return result(MutantStatus.SURVIVED, detail=f"every witness passed{note}")


# ---------------------------------------------------------------- score


def score_of(results: Sequence[MutantResult]) -> float | None:
    detected = sum(r.status in (MutantStatus.KILLED, MutantStatus.TIMEOUT) for r in results)
    scored = detected + sum(r.status == MutantStatus.SURVIVED for r in results)
    return round(detected / scored, 4) if scored else None


def summarize(
    cm: CardMutants,
    results: Sequence[MutantResult],
    *,
    seed: int,
    max_mutants: int | None,
    bound_digest: str,
    measured_at: str,
    previous: float | None = None,
    partial: bool = False,
) -> MutationResult:
    """The card's :class:`MutationResult` for this run (``results`` in sample order).

    ``partial``: only chosen mutants ran (``--mutant``); shown, never judged.
    """
    count = {s: sum(r.status == s for r in results) for s in MutantStatus}
    score = score_of(results)
    floor = cm.card.min_score
    holds = None if score is None or floor is None or partial else score >= floor
    return MutationResult(
        score,
        floor,
        holds,
        count[MutantStatus.KILLED],
        count[MutantStatus.SURVIVED],
        count[MutantStatus.TIMEOUT],
        count[MutantStatus.EQUIVALENT],
        count[MutantStatus.ERROR],
        cm.candidates,
        seed,
        max_mutants,
        cm.functions,
        tuple(results),
        None,
        measured_at,
        False,
        previous,
        bound_digest,
        partial,
    )


def recalled(card: Card, past: MutationResult, run_id: int, current_digest: str) -> MutationResult:
    """A mutation result read back from the ledger for a card as it is now: stale when its bytes changed.

    ``holds`` is judged again against the card's current ``min_score``, and
    is None when the result is stale (it says nothing about these bytes).
    """
    stale = past.bound_digest != current_digest
    holds = None if stale or past.score is None or card.min_score is None else past.score >= card.min_score
    return replace(past, min_score=card.min_score, holds=holds, stale=stale, measured_run=run_id)


def claims(
    root: Path,
    impl_files: Iterable[str],
    per_card: Mapping[str, CardMutants],
    results: Mapping[str, Sequence[MutantResult]],
    generated: Generated,
) -> tuple[Claim, ...]:
    """Every function of ``impl_files``: which cards claim it, how many of their mutants ran on it and survived."""
    rows = []
    for path in sorted(impl_files):
        for qual in generated.functions(path):
            name = f"{path}::{qual}"
            cards = tuple(cid for cid, cm in per_card.items() if name in cm.functions)
            ran = [r for cid in cards for r in results.get(cid, ()) if r.path == path and r.qualname == qual]
            rows.append(Claim(path, qual, cards, len(ran), sum(r.status == MutantStatus.SURVIVED for r in ran)))
    return tuple(rows)


def impl_files(root: Path, cards: Sequence[Card]) -> list[str]:
    """The implementation's Python files: every ``.py`` under the top folders the cards' refs point into."""
    tops = sorted({ref.split("/", 1)[0] for c in cards for ref in c.refs if "/" in ref.split("::", 1)[0]})
    own = {w.file for c in cards for w in c.all_witnesses}
    files = []
    for top in tops:
        folder = root / top
        if not folder.is_dir() or top in ("witnesses", "tests"):
            continue
        files += [p.relative_to(root).as_posix() for p in sorted(folder.rglob("*.py"))]
    return [f for f in files if f not in own]


__all__ = [
    "CardMutants",
    "DEFAULT_MAX_MUTANTS",
    "EQUIVALENT_FILE",
    "Generated",
    "Mark",
    "card_mutants",
    "claimed",
    "claimed_functions",
    "claims",
    "classify",
    "score_digest",
    "without_floor",
    "impl_files",
    "load_marks",
    "mutant_job",
    "mutant_timeouts",
    "recalled",
    "score_of",
    "summarize",
]
