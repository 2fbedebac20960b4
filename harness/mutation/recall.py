"""Recall: each card's mutation score from the ledger, judged for the card as it is now (PLAN reads it).

Kept apart from :mod:`harness.mutation.stage` (which measures scores) so
that planning a run, which only reads them, does not import the stage that
runs mutants, and the stage can name the plan's types without a circle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from harness.errors import LedgerError
from harness.ledger.history import FILENAME, Ledger
from harness.mutation import sample as smp
from harness.mutation import score
from harness.record.document import MutationResult
from harness.request import RunRequest
from harness.select.cards import Card


def open_ledger(req: RunRequest) -> Ledger | None:
    """The run's ledger when there is one that opens; None otherwise (nothing to recall, nothing to reuse)."""
    path = req.reports_dir / FILENAME
    if not path.is_file():
        return None
    try:
        return Ledger(path, create=False)
    except LedgerError:
        return None


def recall(req: RunRequest, cards: Sequence[Card], bound: Mapping[str, Sequence]) -> dict[str, MutationResult]:
    """Each card's mutation score from the ledger, judged for the card as it is now: the newest measured on its
    floor's sample, on the bytes it is bound to now and with the equivalence marks that apply to its mutants
    now (the one that judges its floor), else the newest on its floor's sample and these bytes (stale: its
    marks changed), else its newest (stale, or measured on another sample: shown, never judging). A score on
    another sample never hides one on the floor's sample, however much newer it is."""
    ledger = open_ledger(req)
    if ledger is None:
        return {}
    out = {}
    with ledger:
        for card in cards:
            now = score.score_digest(card, bound[card.id])
            marks_now = score.score_marks(card, req.root, req.cards_dir)
            try:
                last = (
                    ledger.last_mutation(card.id, now, sample=smp.FLOOR.key, marks=marks_now)
                    or ledger.last_mutation(card.id, now, sample=smp.FLOOR.key)
                    or ledger.last_mutation(card.id)
                )
            except LedgerError:
                continue
            if last is not None:
                run_id, started, past = last
                out[card.id] = replace(
                    score.recalled(card, past, run_id, now, marks_now), measured_at=past.measured_at or started
                )
    return out


__all__ = ["open_ledger", "recall"]
