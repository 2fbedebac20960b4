"""``status`` and ``history``: what the ledger says about each card, without running anything.

A card's last verdict is STALE when what it was bound to then (card,
witnesses, liars, support and configuration files, covered files, oracle
manifest, settings and environment, and every project file its witness
processes read) differs from the same binding now
(:func:`harness.plan.binding.rebind`): a byte changed, a file went missing, the
card now binds another set of files, or the verdict was recorded without
its read-set (:func:`harness.plan.binding.unrecorded`). :func:`card_status` is
pure: the caller reads the ledger and hashes the files (:func:`status_rows`).

Cells: a ``run --matrix`` or ``run --target`` records a verdict per cell,
``CARD@SUBJECT`` (:func:`harness.plan.subjects.cell_id`). ``status`` shows every
cell the ledger holds for each card, the default cell first
(:data:`CELLS`). A cell is bound to its subject's settings as well: those of
its configuration in ``configurations.yaml`` now (a target's as its run
recorded them) and the numerics line its run recorded (``status`` probes
nothing; ``run --matrix`` does). A cell its run did not count for the gate
(a configuration marked ``required: false``, a third-party target's survey
cell, a card that does not apply there) is shown but does not count for the
exit code either (:func:`status_exit_code`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.ledger.history import PastVerdict, changed_files
from harness.mutation.sample import FLOOR
from harness.mutation.score import marks_stale, other_sample, score_digest, score_marks
from harness.plan import subjects
from harness.plan.binding import BoundFile, bound_files, oracle_files, rebind, run_context, unrecorded
from harness.plan.cells import cell
from harness.plan.subjects import Subject
from harness.record import provenance
from harness.record.build import required_cell
from harness.record.document import SubjectInfo
from harness.statuses import CardState, Verdict
from harness.targets.registry import ENV_TARGETS

ALL, DEFAULT_ONLY = "all", "default"
CELLS = (ALL, DEFAULT_ONLY)  # status --cells: every recorded cell of each card, or the default cell only


@dataclass(frozen=True)
class CardStatus:
    """One cell as ``status`` shows it. ``state`` is the last verdict, STALE, or "never run"."""

    card_id: str  # the cell's id: the card's own (the default cell), or CARD@SUBJECT
    title: str
    state: str
    last: PastVerdict | None
    changed: tuple[str, ...] = ()  # "impl/kv.py changed", ... (non-empty exactly when STALE)
    mutation: str = ""  # the newest measured mutation score, "STALE" when its bytes or marks changed (mutation_text)
    not_gated: str = ""  # why its run did not count this cell for the gate ("": it counts, as every default cell)

    @property
    def fresh_proven(self) -> bool:
        return self.state == Verdict.PROVEN


def card_status(
    card_id: str,
    title: str,
    last: PastVerdict | None,
    recorded: Iterable[Mapping[str, Any]],
    current: Iterable[Mapping[str, Any]],
    unbound: str = "",
) -> CardStatus:
    """Decide one card's state from its last verdict, the files bound then and the files bound now; ``unbound``:
    why the recorded binding does not cover all the verdict depended on (:func:`harness.plan.binding.unrecorded`),
    which makes it STALE too."""
    if last is None:
        return CardStatus(card_id, title, CardState.NEVER_RUN, None)
    changed = (unbound,) * bool(unbound) + tuple(changed_files(recorded, current))
    return CardStatus(card_id, title, CardState.STALE if changed else last.verdict, last, changed)


def mutation_text(
    card_min: float | None,
    measured: tuple[int, str, Any] | None,
    current_digest: str,
    newer: tuple[int, str, Any] | None = None,
    current_marks: str | None = None,
) -> str:
    """What ``status`` says of a card's mutation score: ``0.83 (run #4, 2026-11-30)``, ``STALE`` when measured on
    other bytes or with other equivalence marks than ``current_marks`` (None: not checked), ``never measured``
    (with the card's floor, when it has one); ``– (no mutant scored)`` when every mutant of its sample was
    equivalent or an error, and ``(N of M mutants error: not scored)`` beside a score some errors left out.
    ``measured`` is the score that judges the floor (on its sample) when the ledger has one; ``newer``, a later
    score on another sample, is shown after it: ``; then 1.00 measured on a partial sample (...) (run #5, ...):
    not judged``. A score on another sample is never BELOW: it judges nothing."""
    floor = f", min {card_min:.2f}" if card_min is not None else ""
    if measured is None:
        return f"never measured{floor}" if card_min is not None else ""
    run_id, started, result = measured
    score = "– (no mutant scored)" if result.score is None else f"{result.score:.2f}"
    if result.error:
        score += f" ({result.error} of {len(result.mutants)} mutants error: not scored)"
    other = other_sample(result)
    below = (
        " BELOW" if card_min is not None and result.score is not None and result.score < card_min and not other else ""
    )
    stale = " STALE (measured on other bytes)" if result.bound_digest != current_digest else ""
    if not stale and marks_stale(result, current_marks):
        stale = " STALE (measured with other equivalence marks)"
    shown = f"{score}{below}{stale}{' ' + other if other else ''} (run #{run_id}, {started[:10]}{floor})"
    if newer is not None and newer[0] != run_id:
        then = "–" if newer[2].score is None else f"{newer[2].score:.2f}"
        why = other_sample(newer[2]) or ("measured on other bytes" if newer[2].bound_digest != current_digest else "")
        why = why or ("measured with other equivalence marks" if marks_stale(newer[2], current_marks) else "")
        shown += f"; then {then} {why or 'measured'} (run #{newer[0]}, {newer[1][:10]}): not judged"
    return shown


def status_exit_code(rows: Sequence[CardStatus]) -> int:
    """0 when the last verdict of every cell that counts for the gate is PROVEN and still bound to the same bytes,
    else 1 (also when nothing is shown)."""
    counted = [r for r in rows if not r.not_gated]
    return 0 if counted and all(r.fresh_proven for r in counted) else 1


def status_rows(
    ledger, cards, root: Path, sites, oracle_dir: Path | None, *, cells: str = ALL, cards_dir: Path | None = None
) -> list[CardStatus]:
    """Each card's :class:`CardStatus` from ``ledger`` (None: no ledger yet) and the files as they are now: its
    default cell, then (``cells`` = ``all``) every other cell the ledger holds for it, by id (see the module
    docstring; ``cards_dir`` holds the configurations file; ConfigurationsInvalid when it is malformed)."""
    from dataclasses import asdict, replace

    rows = []
    context = run_context(root, provenance.numerics(root))
    known = _Subjects(cards_dir, root)
    memo: dict[Path, str | None] = {}  # the files read by many cards' witness processes, hashed once
    for card in cards:
        last = ledger.last(card.id) if ledger is not None else None
        recorded = ledger.bound_files(last.run_id, card.id) if last is not None else []
        now = bound_files(card, root, sites, oracle_files(card, oracle_dir), context)
        current = [asdict(b) for b in rebind(now, recorded, root, memo)] if last is not None else []
        row = card_status(card.id, card.title, last, recorded, current, unrecorded(recorded) if last else "")
        digest = score_digest(card, now)
        marks = score_marks(card, root, cards_dir) if cards_dir is not None and ledger is not None else None
        newest = ledger.last_mutation(card.id) if ledger is not None else None
        # the score that judges the floor (its sample, these bytes and marks), else the newest on the floor's
        # sample, else any
        judge = None
        if ledger is not None:
            judge = ledger.last_mutation(card.id, digest, sample=FLOOR.key, marks=marks) or ledger.last_mutation(
                card.id, sample=FLOOR.key
            )
        text = mutation_text(
            card.min_score, judge or newest, digest, newer=newest if judge else None, current_marks=marks
        )
        rows.append(replace(row, mutation=text))
        if ledger is not None and cells == ALL:
            rows += [_cell_status(ledger, card, cid, sites, oracle_dir, known) for cid in ledger.cells(card.id)]
    return rows


class _Subjects:
    """What a recorded cell's subject is bound to now: the settings each configuration declares (the configurations
    file read once, when a cell needs it) and each (numerics line, settings) context, computed once (the
    weights file is hashed for each)."""

    def __init__(self, cards_dir: Path | None, root: Path) -> None:
        self.cards_dir, self.root = cards_dir, root
        self.declared: dict[str, dict[str, str]] | None = None
        self.contexts: dict[tuple, tuple[BoundFile, ...]] = {}
        self.ran: dict[int, tuple[SubjectInfo, ...]] = {}

    def settings(self, info: SubjectInfo) -> dict[str, str]:
        """A target's settings as its run recorded them; a configuration's as the configurations file says now
        (as recorded when the file no longer has it)."""
        if ENV_TARGETS in info.settings or self.cards_dir is None:
            return dict(info.settings)
        if self.declared is None:
            found = subjects.load(self.cards_dir, self.root)
            self.declared = {c.name: dict(c.settings) for c in found.items}
        return self.declared.get(info.name, dict(info.settings))

    def context(self, numerics: str | None, settings: Mapping[str, str]) -> tuple[BoundFile, ...]:
        key = (numerics, tuple(sorted(settings.items())))
        if key not in self.contexts:
            self.contexts[key] = run_context(self.root, numerics, None, settings)
        return self.contexts[key]

    def of_run(self, ledger, run_id: int) -> tuple[SubjectInfo, ...]:
        if run_id not in self.ran:
            self.ran[run_id] = ledger.subjects(run_id)
        return self.ran[run_id]


def _cell_status(ledger, card, cell_id: str, sites, oracle_dir: Path | None, known: _Subjects) -> CardStatus:
    """One recorded cell ``CARD@SUBJECT`` of ``card``: its last verdict against its files and settings now."""
    from dataclasses import asdict, replace

    last = ledger.last(cell_id)
    _, name = subjects.split(cell_id)
    ran = known.of_run(ledger, last.run_id)
    info = next((s for s in ran if s.name == name), None) or SubjectInfo(name, "", {}, True, True)
    settings = known.settings(info)
    the_cell = cell(card, Subject(name, info.reason, settings, info.required, True, "", info.numerics))
    context = known.context(info.numerics, settings)
    now = bound_files(the_cell, known.root, sites, oracle_files(the_cell, oracle_dir), context)
    recorded = ledger.bound_files(last.run_id, cell_id)
    current = [asdict(b) for b in rebind(now, recorded, known.root)]
    row = card_status(cell_id, card.title, last, recorded, current, unrecorded(recorded))
    return replace(row, not_gated=_not_gated(ledger, last, info, ran))


def _not_gated(ledger, last: PastVerdict, info: SubjectInfo, ran: Sequence[SubjectInfo]) -> str:
    """Why the run that recorded this cell's last verdict did not count it for the gate; "" when it did."""
    if required_cell(ledger.entry(last.run_id, last.card_id), ran):
        return ""
    if not info.required:
        return "a survey target" if ENV_TARGETS in info.settings else f"configuration {info.name}: required: false"
    return "the card does not apply there (n/a)"
