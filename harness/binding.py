"""Which files a card's verdict is bound to, with their sha256.

A verdict holds for the exact bytes it was computed on: the card itself, its
witness modules, the liar modules it lists, and its covered files. Later
(ledger, ``status``, ``--changed``) a verdict is STALE or replayable by
comparing these hashes; nothing here decides that.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from harness.cards import Card, display_path, sha256_file
from harness.liars import LiarSite


@dataclass(frozen=True)
class BoundFile:
    path: str  # relative to the project root when inside it
    role: str  # card | witness | liar | covers | oracle
    sha256: str | None  # None: the file is missing


def bound_files(card: Card, root: Path, liars: Mapping[str, LiarSite],
                extra: tuple[tuple[Path, str], ...] = ()) -> tuple[BoundFile, ...]:
    """The card file first, then witnesses, liars, covered files and ``extra`` (path, role); no duplicates."""
    entries: list[tuple[Path, str]] = [(card.source, "card")]
    entries += [(root / w.file, "witness") for w in card.all_witnesses]
    entries += [(liars[name].path, "liar") for name in card.liars if name in liars]
    entries += [(root / f, "covers") for f in card.covers]
    entries += list(extra)
    seen: dict[Path, BoundFile] = {}
    for path, role in entries:
        key = path.resolve()
        if key not in seen:
            seen[key] = BoundFile(display_path(path, root), role, sha256_file(path))
    return tuple(seen.values())
