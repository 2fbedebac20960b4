"""Cells: the subjects a ``--matrix`` or ``--target`` run proves, and each selected card under each of them.

A subject is impl under one configuration (:mod:`harness.plan.subjects`) or
under one target (:mod:`harness.targets`); a cell is a card under a
subject, its id ``CARD@SUBJECT`` (:func:`harness.plan.subjects.cell_id`; the
default subject keeps the card's id). A plain run has no subjects and its
cells are the cards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from harness.errors import TargetUnknown, UsageError
from harness.plan import subjects
from harness.plan.subjects import Subject
from harness.request import Reporter, RunRequest
from harness.select.cards import Card
from harness.targets import known, registry


def resolve_subjects(req: RunRequest, reporter: Reporter | None) -> tuple[Subject, ...]:
    """The configurations a ``--matrix`` run proves, each probed on this machine (none for a plain run);
    ConfigurationsInvalid (exit 2) for a malformed configurations file or an invalid configuration (a setting
    the implementation refuses or never reads), UsageError for a name it lacks."""
    if req.targets:
        return target_subjects(req, reporter)
    if req.matrix is None:
        return ()
    found = subjects.load(req.cards_dir, req.root)
    chosen = found.select(req.matrix)
    if reporter is not None:
        reporter.note(f"matrix: probing {len(chosen)} configuration(s): {', '.join(c.name for c in chosen)}")
    probed = tuple(subjects.probe(c, found.probe, req.root) for c in chosen)
    subjects.refuse_invalid(found, probed, req.root)
    return probed


def target_subjects(req: RunRequest, reporter: Reporter | None) -> tuple[Subject, ...]:
    """``run --target SPEC``: the default subject and one subject per selected target (harness.targets),
    each with ``KVPROOF_TARGETS`` set to it and its distribution's version as a bound setting; impl's own
    targets gate, third-party ones are a survey; a target that cannot run here is a visible cell. A target
    installed at another version than its known list was surveyed on carries a note saying so (``drift``)."""
    try:
        found = registry.available(req.targets or "")
    except TargetUnknown as exc:
        raise UsageError(f"--target: {exc}") from None
    survey = known.load(req.root) if (req.root / known.KNOWN_PATH).is_file() else None
    if reporter is not None:
        reporter.note(f"targets: {', '.join(a.name for a in found)} (cards tagged `targets` run under each)")
    out = [Subject(subjects.DEFAULT, "impl's own targets, as a plain run", {}, True, True)]
    for a in found:
        findings = survey.known.get(a.name, ()) if survey is not None else ()
        # every card a finding fails, its `also:` cells too (first finding listed wins): each is a known FAILED
        expected = {card: k.reproduction for k in reversed(findings) for card in (c.split("/")[0] for c in k.cells)}
        out.append(
            Subject(
                a.name,
                f"the target {a.name} ({a.binding})",
                {registry.ENV_TARGETS: a.name, "KVPROOF_TARGET_BINDING": a.binding},
                registry.get(a.name).own,
                a.runnable,
                a.reason,
                a.binding,
                expected,
                drift=survey.drift(a.name, a.binding, req.root) if survey is not None else "",
            )
        )
    return tuple(out)


def expand(cards: Sequence[Card], subs: Sequence[Subject]) -> list[Card]:
    """Every (card, runnable subject) as a cell card (``CARD@SUBJECT``, the default keeps the card's id), card
    by card; the cards themselves when there are no subjects. Under targets (a subject that sets
    ``KVPROOF_TARGETS``) only the cards tagged ``targets`` get a cell."""
    runnable_here = [s for s in subs if s.runnable]
    if not subs:
        return list(cards)
    return [
        cell(c, s)
        for c in cards
        for s in runnable_here
        if s.name == subjects.DEFAULT or registry.ENV_TARGETS not in s.settings or "targets" in c.tags
    ]


def cell(card: Card, subject: Subject) -> Card:
    """``card`` under ``subject``: its id ``CARD@SUBJECT`` (the default keeps the card's id), its subject, and the
    liars that apply there (``status`` binds a recorded cell the same way)."""
    return replace(
        card,
        id=subjects.cell_id(card.id, subject.name),
        subject=subject.name,
        card_id=card.id,
        # a liar is a wrong version of *our* code: it says how strong the witnesses are on impl's own
        # targets; on a third-party target (a survey cell) it would patch code the target never runs
        liars=() if registry.ENV_TARGETS in subject.settings and not subject.required else card.liars,
    )
