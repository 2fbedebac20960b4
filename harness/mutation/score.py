"""Mutation analysis: of the plausible slips in the code a card claims, how many would its witnesses catch?

For each selected card (``run_obligations.py mutate``):

1. **claim** (:func:`claimed`): the functions the card's claim is about:
   each function or method its refs name (a class ref: all its methods),
   and every function of a ``.py`` file listed under an explicit
   ``covers:``. Derived covers (the files of refs and witnesses) do not
   widen it: a card about ``KVCache.evict`` is not scored on
   ``KVCache.nbytes``. C too (:mod:`harness.mutation.cgen`): a ref
   ``impl/kernels.c::kv_attend`` claims that function and every function
   and macro it reaches by name. A ``.c`` file under ``covers:`` binds the
   card to its bytes but claims nothing: C is claimed deliberately, by ref.
2. **generate** (:mod:`harness.mutation.generate`) every mutant of those functions and
   **sample** at most ``--max-mutants`` per card, reproducibly from the seed.
3. **run** each mutant as a generated liar: a fresh witness process with the
   one function swapped, the card's witnesses only, stopping at the first
   witness that fails (:func:`mutant_job`). A witness gets
   ``min(its timeout, 5 x its honest time + 4 s)``: a mutant that loops
   forever is stopped early.
4. **classify** (:func:`classify`): killed (which witness), timeout,
   survived, equivalent (survived, and marked so in
   ``obligations/equivalent-mutants.yaml`` with a reason), error (could not
   be applied: not scored).
5. **score** (:func:`summarize`): (killed + timeout) / (killed + timeout +
   survived). A card with ``mutation: {min_score: S}`` whose score for the
   bytes it is bound to now, measured on the floor's own sample
   (:mod:`harness.mutation.sample`, :func:`judges`), is below S is VACUOUS:
   its witnesses would pass wrong code (:func:`harness.verdict.evaluate`). A
   score on any other sample is shown with why (``other_sample``), never judged.
   A score is bound to its bytes (:func:`score_digest`) and to the
   equivalence marks that can change it (:func:`score_marks`): measured with
   other marks, it is stale (``stale_why``). One that scored nothing never
   meets a floor under release (:func:`harness.verdict.nothing_scored`).

:func:`claims` is the project view: every function of the implementation,
the cards that claim it, and its surviving mutants; a function no card
claims is code no theorem constrains.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness.errors import LiarError
from harness.execute.jobs import Job, JobResult
from harness.execute.outcomes import witness_outcomes
from harness.mutation import cbuild, cgen
from harness.mutation import generate as gen
from harness.mutation import marks as eqmarks
from harness.mutation import sample as smp
from harness.mutation.marks import Mark
from harness.plan.binding import BoundFile, digest
from harness.record.document import Claim, MutantResult, MutationResult
from harness.select import csource
from harness.select.cards import EQUIVALENT_FILE, Card
from harness.statuses import MutantStatus, Outcome
from harness.verdict import judge_witness

TIMEOUT_FACTOR = 5.0
TIMEOUT_SLACK_S = 4.0
DEFAULT_MAX_MUTANTS = smp.DEFAULT_MAX_MUTANTS  # the floor sample's (harness.mutation.sample)


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
    try:  # the claim is part of what was measured: refs-only and refs-and-covers scores are different scores
        claim = b"" if card.claims_covers else b"\0mutation.claims=refs"
        own = hashlib.sha256(without_floor(card.source.read_bytes()) + claim).hexdigest()
    except OSError:
        own = None
    return digest(replace(b, sha256=own) if b.role == "card" else b for b in bound)


# ---------------------------------------------------------------- what a card claims


def claimed(card: Card, root: Path, *, c_reach: bool = True) -> dict[str, frozenset[str] | None]:
    """``path -> qualnames`` of the functions the card claims (None: every function of the file).

    Files outside the project or not Python, witnesses (of any card), tests,
    ``conftest.py`` and liars are never mutated. ``c_reach`` False: a C
    file's names are the refs' own, not all they reach (no C file is parsed).
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
    if card.explicit_covers and card.claims_covers:
        for f in card.covers:
            if f.endswith(".py") and is_code(f) and (root / f).is_file():  # C: claimed by refs only
                out[f] = None
    for ref in card.refs:
        path, _, qual = ref.partition("::")
        if not path.endswith((".py", *csource.C_SUFFIXES)) or not is_code(path) or not (root / path).is_file():
            continue
        if path in out and out[path] is None:
            continue
        out.setdefault(path, set()).add(qual)
    for path, names in out.items():
        if names is not None and csource.is_c(path) and c_reach:  # a C entry point claims what it reaches
            out[path] = set(csource.reach(root, path, names))
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
            make = cgen.generate if csource.is_c(path) else gen.generate
            self._by_file[path] = make(self.root, path)
        return self._by_file[path]

    def functions(self, path: str) -> list[str]:
        """Qualnames of the file's functions and methods (a C file's functions and macros), in file order."""
        if path not in self._functions:
            if csource.is_c(path):
                self._functions[path] = csource.names(self.root, path)
            else:
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


def _pool(card: Card, generated: Generated) -> list[gen.Mutant]:
    return [
        m
        for path, names in claimed(card, generated.root).items()
        for m in generated.file(path)
        if _wanted(names, m.qualname)
    ]


def card_mutants(card: Card, generated: Generated, max_mutants: int | None, seed: int) -> CardMutants:
    """The card's claimed functions and its sample of their mutants (reproducible from ``seed``)."""
    pool = _pool(card, generated)
    return CardMutants(
        card, claimed_functions(card, generated), len(pool), tuple(gen.sample(pool, max_mutants, seed, card.id))
    )


EVERY_LINE = ((1, 1 << 62),)


def claimed_spans(card: Card, root: Path) -> dict[str, tuple[tuple[int, int], ...]]:
    """``path -> (first, last)`` lines of every Python function the card claims: every mutant of the card is on
    one of these lines. A C file the card claims spans every line (what a C ref reaches is known only by parsing
    the file: ``run`` and ``status`` do not), as does a file that cannot be parsed."""
    out = {}
    for path, names in claimed(card, root, c_reach=False).items():
        try:
            if csource.is_c(path):
                out[path] = EVERY_LINE
                continue
            every = _function_spans((root / path).read_text(encoding="utf-8"))
            out[path] = tuple((first, last) for q, first, last in every if _wanted(names, q))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            out[path] = EVERY_LINE
    return out


@functools.lru_cache(maxsize=64)
def _function_spans(text: str) -> tuple[tuple[str, int, int], ...]:
    """(qualname, first line, last line) of each function of a Python source (as :func:`gen.functions`)."""
    return tuple((q, fn.lineno, fn.end_lineno or fn.lineno) for q, fn in gen.functions(ast.parse(text)))


def score_marks(card: Card, root: Path, cards_dir: Path) -> str:
    """The digest of the equivalence marks the card's score is bound to: those for the card on the lines of the
    functions it claims (:func:`harness.mutation.marks.marks_digest`). Any other mark leaves its score fresh."""
    return eqmarks.marks_digest(cards_dir, card.base_id, claimed_spans(card, root))


MARKS_CHANGED = (
    "measured with other equivalence marks than equivalent-mutants.yaml holds now for the code it claims "
    "(a mark added, removed or re-pinned since changes which survivors are equivalent)"
)
MARKS_UNKNOWN = "measured by an older kvproof, which did not record the equivalence marks it was measured with"


def floor_draw(card: Card, generated: Generated) -> frozenset[str]:
    """The keys of the mutants the floor's sample (:data:`harness.mutation.sample.FLOOR`) draws for the card
    from its claimed code as it is now (the files are generated once per :class:`Generated`)."""
    floor = smp.FLOOR
    return frozenset(m.key for m in gen.sample(_pool(card, generated), floor.max_mutants, floor.seed, card.id))


# ---------------------------------------------------------------- run one


def mutant_timeouts(card: Card, took: Mapping[str, float], default_timeout: float) -> dict[str, float]:
    """Per witness test: ``min(its timeout, TIMEOUT_FACTOR x its honest seconds + TIMEOUT_SLACK_S)``.

    ``took``: witness id -> seconds of the card's honest run.
    """
    return {
        w.test: min(w.timeout or default_timeout, TIMEOUT_FACTOR * took.get(w.id, 0.0) + TIMEOUT_SLACK_S)
        for w in card.witnesses
    }


def mutant_job(
    card: Card,
    mutant: gen.Mutant,
    timeouts: Mapping[str, float],
    witnesses: Sequence[str] | None = None,
    nodes: Mapping[str, tuple[str, ...]] | None = None,
) -> Job:
    """The card's witnesses (only ``witnesses``, ids in that order, when given; of a witness in ``nodes``, only
    those nodes) under ``mutant``: one process, stopping at the first witness that fails."""
    chosen = card.witnesses
    if witnesses is not None:
        by_id = {w.id: w for w in card.witnesses}
        chosen = tuple(by_id[i] for i in witnesses)
    return Job(card, chosen, mutant=mutant.key, timeouts=dict(timeouts), nodes=dict(nodes) if nodes else None)


def _diff(root: Path, mutant: gen.Mutant) -> str:
    try:
        return gen.diff(root, mutant)
    except LiarError:
        return ""


def unrun(mutant: gen.Mutant, status: MutantStatus, detail: str, how: str, root: Path) -> MutantResult:
    """The result of a mutant that was never run (``how`` says why: :data:`NOT_REACHED`, :data:`BUILT_OUT`)."""
    return MutantResult(
        mutant.key,
        mutant.path,
        mutant.line,
        mutant.qualname,
        mutant.operator,
        mutant.change,
        status,
        detail=detail,
        diff=_diff(root, mutant),
        how=how,
    )


def built_out(mutant: gen.Mutant, status: MutantStatus, detail: str, root: Path) -> MutantResult:
    """A C mutant the build already decided (:mod:`harness.mutation.cbuild`): equivalent (the same bytes as the
    unchanged file) or error (does not compile); never run."""
    return unrun(mutant, status, detail, BUILT_OUT, root)


BUILT_OUT = "not run: decided by its build"


def not_reached(mutant: gen.Mutant, mark: Mark | None, root: Path) -> MutantResult:
    """A mutant on lines no witness of the card runs: it survives (equivalent when marked) and is never run."""
    lines = f"{mutant.path}:{mutant.line}" + (f"-{mutant.lines[-1]}" if len(mutant.lines) > 1 else "")
    status, detail = MutantStatus.SURVIVED, f"not reached: no witness runs {lines} (never run)"
    if mark is not None:
        status, detail = MutantStatus.EQUIVALENT, mark.reason
    return unrun(mutant, status, detail, NOT_REACHED, root)


NOT_REACHED = "not reached"


def classify(
    card: Card, mutant: gen.Mutant, res: JobResult, mark: Mark | None, root: Path, job: Job | None = None
) -> MutantResult:
    """What the witnesses made of ``mutant``, judged exactly as under a liar (node outcomes *and* bounds).

    ``job``: the job that ran it (its witnesses, in the order they ran; default: every witness of the card).
    error: the mutant could not be applied. killed: a witness failed or
    errored (an assertion, an exception, a bound that did not hold, a
    collection error, a crash). timeout: a witness ran past its timeout.
    survived: every witness passed (skips are named: they checked nothing);
    equivalent: survived, and ``mark`` says why no input can tell it apart.
    """
    witnesses = job.witnesses if job is not None else card.witnesses
    outcomes = witness_outcomes(witnesses, res)
    ran = [o for o in outcomes if o.nodes]

    def result(status: MutantStatus, killer: str = "", detail: str = "") -> MutantResult:
        seconds = [sum(n.duration for n in o.nodes) for o in ran if not killer or o.witness_id == killer]
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
            "" if status == MutantStatus.KILLED else _diff(root, mutant),
            how=res.started_as or "fresh",
            tried=len(ran),
            witness_s=round(sum(seconds), 3),
        )

    if res.liar_error:
        return result(MutantStatus.ERROR, detail=f"could not be applied: {res.liar_error}")
    judged = [judge_witness(w, o) for w, o in zip(witnesses, outcomes, strict=False)]
    for w, o, v in zip(witnesses, outcomes, judged, strict=False):
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
    only = (job.nodes or {}) if job is not None else {}
    part = [w.id for w in witnesses if w.id in only]
    if part:  # NOTE: of a parametrized witness, only the nodes whose test body ran the mutant's lines ran
        n = sum(len(only[w]) for w in part)
        note += f"; {', '.join(part)} ran only the node(s) that run them ({n})"
    if len(witnesses) < len(card.witnesses):
        others = len(card.witnesses) - len(witnesses)
        return result(
            MutantStatus.SURVIVED,
            detail=f"every witness that runs its lines passed{note} ({others} of {len(card.witnesses)} never run them)",
        )
    if part:
        return result(MutantStatus.SURVIVED, detail=f"every witness that runs its lines passed{note}")
    return result(MutantStatus.SURVIVED, detail=f"every witness passed{note}")


def after_timeout(first: MutantResult, then: MutantResult) -> MutantResult:
    """A mutant that ran past a witness's timeout (``first``), then ran against the witnesses card order puts
    before that one (``then``): killed by the first of them that failed, as in card order; else the timeout."""
    both = {"duration_s": round(first.duration_s + then.duration_s, 3), "tried": first.tried + then.tried}
    if then.status in (MutantStatus.KILLED, MutantStatus.TIMEOUT):
        return replace(then, **both)
    return replace(first, **both, witness_s=round(first.witness_s + then.witness_s, 3))


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
    sample: smp.Sample = smp.FLOOR,
    on_floor: bool | None = None,
    marks_digest: str = "",
) -> MutationResult:
    """The card's :class:`MutationResult` for this run (``results`` in sample order).

    ``marks_digest``: the equivalence marks its statuses were decided with (:func:`score_marks`).

    ``sample``: what it was measured on; ``on_floor``: its mutants are exactly the floor sample's, judged as
    the floor's are (:func:`harness.mutation.sample.on_floor`; None: ``sample`` is the floor's). Only such a
    score judges the card's ``min_score``; any other is shown with why not (``other_sample``).
    ``partial``: only chosen mutants ran (``--mutant``); shown, never judged.
    """
    count = {s: sum(r.status == s for r in results) for s in MutantStatus}
    unreached = sum(r.status == MutantStatus.SURVIVED and r.how == NOT_REACHED for r in results)
    score = score_of(results)
    floor = cm.card.min_score
    judged = (sample == smp.FLOOR if on_floor is None else on_floor) and not partial
    other = "" if judged else smp.difference(sample)
    holds = None if score is None or floor is None or not judged else score >= floor
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
        unreached,
        smp.stored_key(sample, judged),
        other,
        marks_digest,
    )


def other_sample(past: MutationResult) -> str:
    """Why ``past`` does not judge a floor ("" when it was measured on this kvproof's floor sample)."""
    if past.sample == smp.FLOOR.key and not past.partial:
        return ""
    if not past.sample:
        return smp.OLDER
    return past.other_sample or f"measured on another sample (not this kvproof's floor sample: {past.sample})"


def judges(m: MutationResult) -> bool:
    """Whether ``m`` may judge its card's floor: measured on the floor's sample, on the bytes bound now."""
    return not m.stale and not m.partial and not other_sample(m)


def recalled(
    card: Card, past: MutationResult, run_id: int, current_digest: str, current_marks: str | None = None
) -> MutationResult:
    """A mutation result read back from the ledger for a card as it is now: stale when its bytes changed, or
    when the equivalence marks that can change it did (``current_marks``, :func:`score_marks`; None: not
    checked). ``stale_why`` says which when it is the marks.

    ``holds`` is judged again against the card's current ``min_score``, and
    is None when the result is stale (it says nothing about these bytes, or
    its equivalent mutants are not the ones marked now) or was measured on
    another sample than the floor's (``other_sample`` says which: it says
    nothing about the floor's mutants).
    """
    why = marks_stale(past, current_marks) if past.bound_digest == current_digest else ""
    stale = past.bound_digest != current_digest or bool(why)
    other = other_sample(past)
    holds = None if stale or other or past.score is None or card.min_score is None else past.score >= card.min_score
    return replace(
        past,
        min_score=card.min_score,
        holds=holds,
        stale=stale,
        measured_run=run_id,
        other_sample=other,
        stale_why=why,
    )


def marks_stale(past: MutationResult, current_marks: str | None) -> str:
    """Why ``past`` was measured with other equivalence marks than ``current_marks`` ("" when the same, or
    ``current_marks`` is None: not checked)."""
    if current_marks is None or past.marks_digest == current_marks:
        return ""
    return MARKS_CHANGED if past.marks_digest else MARKS_UNKNOWN


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
    """The implementation's files: every ``.py`` under the top folders the cards' refs point into, and every C
    file there that the project builds and loads changed copies of (``[tool.kvproof.c-sources]``)."""
    tops = sorted({ref.split("/", 1)[0] for c in cards for ref in c.refs if "/" in ref.split("::", 1)[0]})
    own = {w.file for c in cards for w in c.all_witnesses}
    files = []
    for top in tops:
        folder = root / top
        if not folder.is_dir() or top in ("witnesses", "tests"):
            continue
        files += [p.relative_to(root).as_posix() for p in sorted(folder.rglob("*.py"))]
    files += [c for c in cbuild.hooks(root) if c.split("/", 1)[0] in tops]
    return [f for f in files if f not in own]


__all__ = [
    "CardMutants",
    "DEFAULT_MAX_MUTANTS",
    "EQUIVALENT_FILE",
    "Generated",
    "card_mutants",
    "claimed",
    "claimed_functions",
    "claimed_spans",
    "MARKS_CHANGED",
    "MARKS_UNKNOWN",
    "marks_stale",
    "score_marks",
    "claims",
    "floor_draw",
    "judges",
    "other_sample",
    "classify",
    "score_digest",
    "without_floor",
    "impl_files",
    "mutant_job",
    "mutant_timeouts",
    "NOT_REACHED",
    "BUILT_OUT",
    "after_timeout",
    "built_out",
    "not_reached",
    "recalled",
    "score_of",
    "summarize",
]
