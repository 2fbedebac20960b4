"""Plan: every output proven writable before anything runs; each cell bound to its files, with what the ledger
knows of it.

:func:`check_outputs` refuses a run whose report, ledger or ``--json``
could not be written (or would replace an input); :func:`plan` binds each
card to its files (:mod:`harness.plan.binding`) and asks the ledger what
``--changed`` (or ``--rerun-failed``) may replay, how long each process took
last time (else ``obligations/timings.json``, :mod:`harness.plan.timings`) and
the newest mutation scores: a :class:`RunPlan`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness import outputs
from harness.errors import LedgerError, UsageError
from harness.ledger.history import FILENAME, Ledger, PastVerdict, changed_files
from harness.mutation.marks import Mark
from harness.mutation.recall import recall
from harness.plan import subjects, timings
from harness.plan.binding import (
    BoundFile,
    ReadScope,
    bound_files,
    digest,
    oracle_files,
    rebind,
    run_context,
    unrecorded,
)
from harness.plan.subjects import Subject
from harness.plan.timings import Expected
from harness.record import build, provenance
from harness.record.document import MutationResult
from harness.request import Reporter, RunRequest
from harness.select.cards import Card
from harness.select.selection import Loaded
from harness.statuses import Verdict


@dataclass(frozen=True)
class RunPlan:
    """Every selected card with what it is bound to, and what the ledger already knows."""

    cards: tuple[Card, ...]
    links: Mapping[str, tuple[str, ...]]  # card id -> link problems (the card errors without running)
    bound: Mapping[str, tuple[BoundFile, ...]]
    replays: Mapping[str, build.Replayed] = field(default_factory=dict)
    expected: Mapping[str, Expected] = field(default_factory=dict)
    mutations: Mapping[str, MutationResult] = field(default_factory=dict)  # newest measured, from the ledger
    marks: Mapping[str, Mark] = field(default_factory=dict)  # equivalence marks (mutate)
    schedule_from: Mapping[str, str] = field(default_factory=dict)  # card to run -> where its expected times came
    # from: "ledger", "timings.json" or "unknown" (harness.plan.timings)
    subjects: tuple[Subject, ...] = ()  # run --matrix: every selected configuration as probed (runnable or not)
    scope: ReadScope | None = None  # which files the witness processes read join each binding (binding.read_files)
    not_replayed: Mapping[str, str] = field(default_factory=dict)  # --changed: card -> why it runs ("x.py changed")

    @property
    def to_run(self) -> list[Card]:
        return [c for c in self.cards if c.id not in self.replays]


def check_outputs(req: RunRequest) -> None:
    """Prove every place the run writes to safe and writable, before anything runs; UsageError names the first
    that is not.

    No output may replace an input (:mod:`harness.outputs`): the reports
    folder is not the cards folder or inside it, nor inside impl/ or
    witnesses/; ``--json PATH`` is not inside those, a report folder, the
    ledger or a source file, and an existing file there must be a previous
    verdicts document (else ``--force``). Then the reports folder must exist
    or be creatable and be writable, the ledger in it must open for writing
    (an old ledger is migrated here), and ``--json PATH`` must be a file path
    in a writable folder.
    """
    reports = req.reports_dir
    what = f"{req.reports_source}={str(reports)!r}"
    places = outputs.Places(req.root, req.cards_dir, reports)
    outputs.check_reports(reports, req.reports_source, places)
    if req.json_path is not None and not req.json_path.is_dir():
        outputs.check_file(req.json_path, f"--json={req.json_arg!r}", outputs.VERDICTS, places, force=req.force)
    _writable_folder(reports, what, "give a folder you can write to with --reports DIR")
    try:
        Ledger(reports / FILENAME, create=True).close()
    except LedgerError as exc:  # its message names the file and the fix (a damaged file, a lock held too long)
        raise UsageError(f"{req.reports_source}: {exc}") from None
    path, arg = req.json_path, req.json_arg
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"--json={arg!r} is a folder; give a file path such as {arg.rstrip('/')}/verdicts.json")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(
            f"--json={arg!r}: the file exists and is not writable; fix its permissions or give another path"
        )
    _writable_folder(path.parent, f"--json={arg!r}", "give a path in a folder you can write to")


def _writable_folder(folder: Path, what: str, fix: str) -> None:
    """Create ``folder`` if needed and prove it writable by creating a file in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".kvproof-write-check-"):
            pass
    except OSError as exc:
        raise UsageError(f"{what}: cannot write there ({exc.strerror or exc}); {fix}") from None


def plan(
    req: RunRequest,
    loaded: Loaded,
    cards: Sequence[Card],
    reporter: Reporter | None,
    marks: Mapping[str, Mark] | None = None,
    subs: Sequence[Subject] = (),
) -> RunPlan:
    """Bind each card to its files; ask the ledger for replays (``--changed``) and expected process times.

    A card is replayed when one of its original PROVEN verdicts of this
    profile is bound to exactly what it would be bound to now: the files it
    names, its settings and environment, and the files its witness processes
    read then, hashed now (:func:`replayable`); a card with link problems is
    always run (it errors at once).
    A card's expected process times come from its latest ledger entry, else
    from ``<cards dir>/timings.json`` (:mod:`harness.plan.timings`; raises
    TimingsInvalid, before anything runs, when that file is malformed), else
    they are unknown. Both are keyed by the cell's id (``CARD@NAME`` in a
    ``--matrix`` or ``--target`` run); a cell the file has no entry for takes
    its card's.
    """
    hints = _hints(req, cards)
    links = {c.id: tuple(str(p) for p in loaded.result.link_problems(c.base_id)) for c in cards}
    bound = _bind(req, loaded, cards, subs)
    marks = dict(marks or {})
    ledger = _ledger(req, reporter)
    asked = _ask_ledger(req, ledger, cards, links, bound) if ledger is not None else _Asked({}, {}, {})
    replays = asked.replays
    expected, sources = timings.combine([c.id for c in cards if c.id not in replays], asked.measured, hints)
    mutations = recall(req, cards, bound) if ledger is not None else {}
    scope = ReadScope.of(req.root, req.reports_dir, req.oracle_dir)
    why_not = {k: v for k, v in asked.why_not.items() if v and k not in replays}
    return RunPlan(
        tuple(cards), links, bound, replays, expected, mutations, marks, sources, tuple(subs), scope, why_not
    )


def _hints(req: RunRequest, cards: Sequence[Card]) -> dict[str, Expected]:
    """The expected times ``<cards dir>/timings.json`` holds, each cell it has no entry for taking its card's."""
    hints = dict(timings.load(req.cards_dir, req.root))
    hints.update(
        {c.id: hints[c.base_id] for c in cards if c.id != c.base_id and c.id not in hints and c.base_id in hints}
    )
    return hints


def _bind(
    req: RunRequest, loaded: Loaded, cards: Sequence[Card], subs: Sequence[Subject]
) -> dict[str, tuple[BoundFile, ...]]:
    """Each card bound to its files, under its configuration's own settings and numerics line."""
    contexts = {subjects.DEFAULT: run_context(req.root, provenance.numerics(req.root))}
    for s in subs:  # each configuration's own settings and numerics line
        if s.runnable and s.name != subjects.DEFAULT:
            contexts[s.name] = run_context(req.root, s.numerics, os.environ, s.settings)
    return {
        c.id: bound_files(c, req.root, loaded.sites, oracle_files(c, req.oracle_dir), contexts[c.subject])
        for c in cards
    }


def _ledger(req: RunRequest, reporter: Reporter | None) -> Ledger | None:
    """The run's ledger for reading; None when there is none, or it cannot be read (said: every card runs)."""
    path = req.reports_dir / FILENAME
    try:
        return Ledger(path, create=False) if path.is_file() else None
    except LedgerError as exc:
        if reporter is not None:
            reporter.error(f"warning: ledger not read ({exc}); every card runs")
        return None


@dataclass(frozen=True)
class _Asked:
    """What the ledger said for a plan (:func:`_ask_ledger`)."""

    replays: dict[str, build.Replayed]  # card id -> the verdict replayed for it
    why_not: dict[str, str]  # card id -> why it is not replayed ("" when it was)
    measured: dict[str, Expected]  # card id -> its latest entry's process times (the cards not replayed)


def _ask_ledger(
    req: RunRequest,
    ledger: Ledger,
    cards: Sequence[Card],
    links: Mapping[str, tuple[str, ...]],
    bound: Mapping[str, tuple[BoundFile, ...]],
) -> _Asked:
    """Each card's replay (``--changed``, ``--rerun-failed``) or, when it runs, its latest process times."""
    asked = _Asked({}, {}, {})
    memo: dict[Path, str | None] = {}  # files hashed again for --changed, each once
    with ledger:
        for card in cards:
            if not links[card.id]:
                replayed, why = _replay(req, ledger, card.id, bound[card.id], memo)
                if why is not None:
                    asked.why_not[card.id] = why
                if replayed is not None:
                    asked.replays[card.id] = replayed
                    continue
            last = timings.from_ledger(ledger, card.id)
            if last is not None:
                asked.measured[card.id] = last.expected
    return asked


def _replay(
    req: RunRequest, ledger: Ledger, card_id: str, now: tuple[BoundFile, ...], memo: dict[Path, str | None]
) -> tuple[build.Replayed | None, str | None]:
    """(the verdict replayed for a card, or None; why it is not, "" when it is, None when no one asked)."""
    why = None
    if req.rerun_failed:
        # NOTE: the card's latest verdict decides: not PROVEN -> it runs; PROVEN -> its PROVEN verdict
        # on exactly these bound files is replayed (none: the files changed since, so it runs too)
        latest = ledger.last(card_id)
        past = None
        if latest is not None and latest.verdict == Verdict.PROVEN:
            past, why = replayable(ledger, card_id, now, req.root, req.profile, memo)
        if past is not None:
            return build.Replayed(ledger.entry(past.run_id, card_id), past.run_id, past.started, past.report_dir), why
    if req.changed:
        past, why = replayable(ledger, card_id, now, req.root, req.profile, memo)
        if past is not None:
            return build.Replayed(ledger.entry(past.run_id, card_id), past.run_id, past.started, past.report_dir), why
    return None, why


MAX_CANDIDATES = 50  # newest original PROVEN verdicts a --changed replay looks through (one per bound digest)


def replayable(
    ledger: Ledger,
    card_id: str,
    now: tuple[BoundFile, ...],
    root: Path,
    profile: str | None,
    memo: dict[Path, str | None] | None = None,
) -> tuple[PastVerdict | None, str]:
    """(the newest original PROVEN verdict of ``profile`` whose whole binding is unchanged, ""), or (None, why
    not: what changed since the newest one, or why its binding cannot be trusted to be whole).

    ``now``: what the card is bound to before it runs (:func:`harness.plan.binding.bound_files`); each candidate's
    recorded binding is compared with ``now`` plus the files its witness processes read then, hashed now
    (:func:`harness.plan.binding.rebind`). A verdict recorded without its read-set is never replayed
    (:func:`harness.plan.binding.unrecorded`). ``memo``: the sha256 of files hashed already in this plan.
    """
    why = ""
    for past in ledger.originals(card_id, profile=profile, limit=MAX_CANDIDATES):
        recorded = ledger.bound_files(past.run_id, card_id)
        missing = unrecorded(recorded)
        changes: list[str] = []
        if not missing:
            current = rebind(now, recorded, root, memo)
            if digest(current) == digest(BoundFile(**r) for r in recorded):
                return past, ""
            changes = changed_files(recorded, [asdict(b) for b in current])
        if not why:  # the newest candidate says why ("" when there is none: never PROVEN here)
            why = missing or "; ".join(changes) or "its binding differs"
    return None, why
