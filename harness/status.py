"""``status`` and ``history``: what the ledger says about each card, without running anything.

A card's last verdict is STALE when the files it was bound to then (card,
witnesses, liars, covered files, oracle manifest) differ from the files it is
bound to now: a byte changed, a file went missing, or the card now binds
another set of files. Pure: the caller reads the ledger and hashes the files.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from harness.ledger import PastVerdict, changed_files
from harness.statuses import CardState, Verdict



@dataclass(frozen=True)
class CardStatus:
    """One card as ``status`` shows it. ``state`` is the last verdict, STALE, or "never run"."""

    card_id: str
    title: str
    state: str
    last: PastVerdict | None
    changed: tuple[str, ...] = ()  # "impl/kv.py changed", ... (non-empty exactly when STALE)

    @property
    def fresh_proven(self) -> bool:
        return self.state == Verdict.PROVEN


def card_status(card_id: str, title: str, last: PastVerdict | None, recorded: Iterable[Mapping[str, Any]],
                current: Iterable[Mapping[str, Any]]) -> CardStatus:
    """Decide one card's state from its last verdict, the files bound then and the files bound now."""
    if last is None:
        return CardStatus(card_id, title, CardState.NEVER_RUN, None)
    changed = tuple(changed_files(recorded, current))
    return CardStatus(card_id, title, CardState.STALE if changed else last.verdict, last, changed)


def status_exit_code(rows: Sequence[CardStatus]) -> int:
    """0 when every card's last verdict is PROVEN and still bound to the same bytes, else 1."""
    return 0 if rows and all(r.fresh_proven for r in rows) else 1


def status_rows(ledger, cards, root: Path, sites, oracle_dir: Path | None) -> list[CardStatus]:
    """Each card's :class:`CardStatus` from ``ledger`` (None: no ledger yet) and the files as they are now."""
    from dataclasses import asdict

    from harness.binding import bound_files, oracle_files

    rows = []
    for card in cards:
        last = ledger.last(card.id) if ledger is not None else None
        recorded = ledger.bound_files(last.run_id, card.id) if last is not None else []
        current = [asdict(b) for b in bound_files(card, root, sites, oracle_files(card, oracle_dir))] \
            if last is not None else []
        rows.append(card_status(card.id, card.title, last, recorded, current))
    return rows
