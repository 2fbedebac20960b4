"""``run --watch``: the files each card of a run is bound to, their state, and which cards a change touches.

After each run, :func:`card_files` lists per card (or cell) of its document the bound files that are files
(:mod:`harness.plan.binding`: the card, its witness modules, liar modules, support and config modules, covered
files, the oracle manifest, the weights, and every project file its witness processes read), then the files of
its refs. :func:`snapshot` takes their state, mtime (ns) and size, with no hashing (a poll every second must be
cheap; a save of the same bytes counts as a change, as a save is meant to); :func:`touched` compares two
snapshots and names, per card, the files that changed. Pure but for :func:`snapshot`'s ``stat``; the loop that
polls and runs again lives in :mod:`harness.commands`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.record.document import RunDocument

State = tuple[int, int] | None  # (mtime_ns, size); None: missing or unreadable
Snapshot = Mapping[str, State]


def card_files(doc: RunDocument) -> dict[str, tuple[str, ...]]:
    """Card (or cell) id -> the files its verdict is bound to and the files of its refs, as the document names
    them (relative to the project root, or absolute outside it), in order, no duplicates. Bound entries that are no
    file (the settings, the environment, the read-set marker: shown in parentheses) are left out."""
    out: dict[str, tuple[str, ...]] = {}
    for card in doc.cards:
        paths = [b.path for b in card.bound_files if not b.path.startswith("(")]
        paths += [ref.split("::", 1)[0] for ref in card.refs]
        out[card.id] = tuple(dict.fromkeys(p for p in paths if p))
    return out


def snapshot(root: Path, paths: Iterable[str]) -> dict[str, State]:
    """Each path's state now: (mtime in ns, size), or None when it is missing (a path is relative to ``root``)."""
    out: dict[str, State] = {}
    for path in paths:
        try:
            st = (root / path).stat()
        except OSError:
            out[path] = None
            continue
        out[path] = (st.st_mtime_ns, st.st_size)
    return out


def touched(before: Snapshot, after: Snapshot, files: Mapping[str, Iterable[str]]) -> dict[str, tuple[str, ...]]:
    """Card id -> its files whose state differs between ``before`` and ``after`` (created, removed, written), in
    the card's file order; the cards none of whose files changed are left out. A path only one snapshot holds is
    not compared (it was not watched yet)."""
    changed = {p for p in before.keys() & after.keys() if before[p] != after[p]}
    out: dict[str, tuple[str, ...]] = {}
    for card_id, paths in files.items():
        hit = tuple(p for p in dict.fromkeys(paths) if p in changed)
        if hit:
            out[card_id] = hit
    return out


def trigger_text(hit: Mapping[str, Iterable[str]], card_ids: Iterable[str]) -> str:
    """``watch: fakeimpl/text.py changed: running FX-SHOUT`` (the files, each once, and the cards that run)."""
    files = list(dict.fromkeys(p for paths in hit.values() for p in paths))
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return f"watch: {shown} changed: running {', '.join(card_ids)}"


__all__ = ["Snapshot", "State", "card_files", "snapshot", "touched", "trigger_text"]
