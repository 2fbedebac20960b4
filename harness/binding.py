"""Which files a card's verdict is bound to, with their sha256.

A verdict holds for the exact bytes it was computed on: the card itself, its
witness modules, the liar modules its liars live in, the support modules of
its witnesses (every ``conftest.py`` pytest loads for them, and the other
non-test modules beside them, such as ``witnesses/synthetic.py``), and its
covered files. Later
(ledger, ``status``, ``--changed``) a verdict is STALE or replayable by
comparing these hashes; nothing here decides that.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.cards import Card, display_path
from harness.files import sha256_file
from harness.liars import LiarSite
from harness.oracle.store import MANIFEST, resolve_oracle_dir


@dataclass(frozen=True)
class BoundFile:
    path: str  # relative to the project root when inside it
    role: str  # card | witness | liar | support | covers | oracle
    sha256: str | None  # None: the file is missing


def digest(files: Iterable[BoundFile]) -> str:
    """sha256 hex over the sorted ``path\trole\tsha256`` lines of bound files (missing file: ``-``).

    Equal digests mean the same set of files with the same bytes: the key
    ``--changed`` replays by and the history strip calls a change flaky by.
    """
    lines = sorted(f"{f.path}\t{f.role}\t{f.sha256 or '-'}" for f in files)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def bound_files(
    card: Card, root: Path, liars: Mapping[str, LiarSite], extra: tuple[tuple[Path, str], ...] = ()
) -> tuple[BoundFile, ...]:
    """The card file first, then witnesses, liars, support modules, covered files and ``extra``; no duplicates."""
    entries: list[tuple[Path, str]] = [(card.source, "card")]
    entries += [(root / w.file, "witness") for w in card.all_witnesses]
    entries += [(liars[name].path, "liar") for name in card.liars if name in liars]
    entries += [(path, "support") for path in support_files(root, [root / w.file for w in card.all_witnesses])]
    entries += [(root / f, "covers") for f in card.covers]
    entries += list(extra)
    seen: dict[Path, BoundFile] = {}
    for path, role in entries:
        key = path.resolve()
        if key not in seen:
            seen[key] = BoundFile(display_path(path, root), role, sha256_file(path))
    return tuple(seen.values())


def oracle_files(card: Card, oracle_dir: Path | None) -> tuple[tuple[Path, str], ...]:
    """The oracle manifest a card that requires the oracle is bound to (when the oracle code is present)."""
    if not any(r.startswith("oracle:") for r in card.requires):
        return ()
    return ((resolve_oracle_dir(oracle_dir) / MANIFEST, "oracle"),)


def support_files(root: Path, witness_files: list[Path]) -> list[Path]:
    """Modules that shape a witness run besides the witness module itself, sorted.

    Every ``conftest.py`` from the project root down to each witness's
    folder (pytest loads them all), and the non-test ``*.py`` modules in the
    witness's own folder (helpers it imports, e.g. ``witnesses/synthetic.py``).
    """
    found: set[Path] = set()
    root = root.resolve()
    for file in witness_files:
        folder = file.resolve().parent
        for d in [folder, *folder.parents]:
            if (d / "conftest.py").is_file():
                found.add(d / "conftest.py")
            if d == root or root not in d.parents:
                break
        if folder.is_dir():
            found.update(
                p for p in folder.glob("*.py") if not p.name.startswith("test_") and p.resolve() != file.resolve()
            )
    return sorted(found)
