"""``status`` and ``history``: what the ledger says about each card, without running anything.

A card's last verdict is STALE when the files it was bound to then (card,
witnesses, liars, covered files, oracle manifest) differ from the files it is
bound to now: a byte changed, a file went missing, or the card now binds
another set of files. Pure: the caller reads the ledger and hashes the files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import provenance
from harness.binding import bound_files, oracle_files, run_context
from harness.ledger import PastVerdict, changed_files
from harness.mutation.score import score_digest
from harness.statuses import CardState, Verdict


@dataclass(frozen=True)
class CardStatus:
    """One card as ``status`` shows it. ``state`` is the last verdict, STALE, or "never run"."""

    card_id: str
    title: str
    state: str
    last: PastVerdict | None
    changed: tuple[str, ...] = ()  # "impl/kv.py changed", ... (non-empty exactly when STALE)
    mutation: str = ""  # the newest measured mutation score, "STALE" when the bytes changed since (see mutation_text)

    @property
    def fresh_proven(self) -> bool:
        return self.state == Verdict.PROVEN


def card_status(
    card_id: str,
    title: str,
    last: PastVerdict | None,
    recorded: Iterable[Mapping[str, Any]],
    current: Iterable[Mapping[str, Any]],
) -> CardStatus:
    """Decide one card's state from its last verdict, the files bound then and the files bound now."""
    if last is None:
        return CardStatus(card_id, title, CardState.NEVER_RUN, None)
    changed = tuple(changed_files(recorded, current))
    return CardStatus(card_id, title, CardState.STALE if changed else last.verdict, last, changed)


def mutation_text(card_min: float | None, measured: tuple[int, str, Any] | None, current_digest: str) -> str:
    """What ``status`` says of a card's mutation score: ``0.83 (run #4, 2026-11-30)``, ``STALE`` when measured on
    other bytes, ``never measured`` (with the card's floor, when it has one)."""
    floor = f", min {card_min:.2f}" if card_min is not None else ""
    if measured is None:
        return f"never measured{floor}" if card_min is not None else ""
    run_id, started, result = measured
    score = "–" if result.score is None else f"{result.score:.2f}"
    below = " BELOW" if card_min is not None and result.score is not None and result.score < card_min else ""
    stale = " STALE (measured on other bytes)" if result.bound_digest != current_digest else ""
    return f"{score}{below}{stale} (run #{run_id}, {started[:10]}{floor})"


def status_exit_code(rows: Sequence[CardStatus]) -> int:
    """0 when every card's last verdict is PROVEN and still bound to the same bytes, else 1."""
    return 0 if rows and all(r.fresh_proven for r in rows) else 1


def status_rows(ledger, cards, root: Path, sites, oracle_dir: Path | None) -> list[CardStatus]:
    """Each card's :class:`CardStatus` from ``ledger`` (None: no ledger yet) and the files as they are now."""
    from dataclasses import asdict, replace

    rows = []
    context = run_context(root, provenance.numerics(root))
    for card in cards:
        last = ledger.last(card.id) if ledger is not None else None
        recorded = ledger.bound_files(last.run_id, card.id) if last is not None else []
        now = bound_files(card, root, sites, oracle_files(card, oracle_dir), context)
        current = [asdict(b) for b in now] if last is not None else []
        row = card_status(card.id, card.title, last, recorded, current)
        measured = ledger.last_mutation(card.id) if ledger is not None else None
        rows.append(replace(row, mutation=mutation_text(card.min_score, measured, score_digest(card, now))))
    return rows
