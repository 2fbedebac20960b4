"""Select: the cards a run may use, with the liar index and the equivalence marks, refused as ``validate`` refuses.

:func:`load` reads the cards and the liar index, :func:`runnable` decides
what of the selection may run, :func:`equivalence_marks` reads the marks a
mutate run uses. All three run before anything is planned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from harness.errors import CardInvalid, UsageError
from harness.liars import LiarSite, scan
from harness.mutation.marks import Mark, load_marks
from harness.project import runner
from harness.request import Reporter, RunRequest
from harness.select.cards import Card, LoadResult, Problem, find_card_files, load_cards, select


@dataclass(frozen=True)
class Loaded:
    result: LoadResult
    sites: Mapping[str, LiarSite]
    liar_problems: tuple[Problem, ...]


def load(root: Path, folder: Path, shown: str) -> Loaded:
    """Cards, the liar index and its problems; UsageError when ``folder`` holds no card (``shown`` names it)."""
    if not find_card_files(folder):
        raise UsageError(
            f"no cards found in {shown}; add one with `{runner()} new ID` "
            "or point --cards at the folder that holds them"
        )
    sites, liar_problems = scan(root)
    result = load_cards(folder, root, sites)
    extra = tuple(Problem(p.path, p.line, p.field, p.value, p.message) for p in liar_problems)
    return Loaded(result, sites, extra)


def matching(cards: Sequence[Card], keyword: str) -> list[Card]:
    """The cards whose id, title or a tag matches ``keyword`` as pytest's ``-k`` does (case-insensitive
    substrings, and / or / not, parentheses); UsageError for an expression that does not parse or matches
    no card."""
    if not keyword:
        return list(cards)
    from _pytest.mark.expression import Expression  # pytest's own -k grammar (its errors: SyntaxError, or ParseError)

    try:
        expr = Expression.compile(keyword)
    except Exception as exc:  # noqa: BLE001 (the grammar's error class differs between pytest versions)
        raise UsageError(f"-k {keyword!r}: {exc}; e.g. -k 'fork and not paged'") from None

    def hit(card: Card):
        text = " ".join([card.id, card.title, *card.tags]).lower()
        return lambda word, **_kw: word.lower() in text

    out = [c for c in cards if expr.evaluate(hit(c))]
    if not out:
        raise UsageError(f"-k {keyword!r} matches no card's id, title or tag; `{runner()} list` shows them")
    return out


def runnable(
    loaded: Loaded, ids: Sequence[str], tags: Sequence[str], reporter: Reporter | None, keyword: str = ""
) -> list[Card]:
    """The cards a run may use, or CardInvalid.

    ``validate`` and ``run`` refuse the same things: a full run (no ids, no
    tags) stops on any card that does not load and on any problem in the
    liar index. A run of a selection goes ahead when none of the selected
    ids matches a broken card and no selected card lists a liar whose
    registration is broken; the other broken files are named as a warning.
    """
    result, liar_problems = loaded.result, loaded.liar_problems
    broken = list(result.load_problems) + list(liar_problems)
    if not broken:
        return matching(select(result.cards, ids, tags), keyword)
    if not ids and not tags:
        raise CardInvalid(broken)
    hit = [
        p
        for p in result.load_problems
        if p.path in result.broken_ids and any(fnmatchcase(result.broken_ids[p.path], pat) for pat in ids)
    ]
    hit += [p for p in liar_problems if p.field != "name"]  # an unreadable liar module may hold any name
    if hit:
        raise CardInvalid(hit)
    selected = matching(select(result.cards, ids, tags), keyword)
    named = {n for c in selected for n in c.liars}
    hit = [p for p in liar_problems if p.field == "name" and p.value.strip("'\"") in named]
    if hit:
        raise CardInvalid(hit)
    if reporter is not None:
        reporter.warning(
            broken,
            f"warning: {len(broken)} problem(s) in cards that are not selected "
            f"(`{runner()} validate` lists them); running the selection:",
        )
    return selected


def equivalence_marks(req: RunRequest, loaded: Loaded, reporter: Reporter | None) -> dict[str, Mark]:
    """The equivalence marks a mutate run uses; CardInvalid when the marks file is broken.

    A mark whose key names no mutant of the code as it is now (the code
    moved or changed) is kept out and named as a warning: the mutant it
    meant, if still there, shows as survived until it is marked again.
    """
    marks, problems = load_marks(req.cards_dir, req.root, [c.id for c in loaded.result.cards])
    broken = [p for p in problems if p.kind != "stale"]
    if broken:
        raise CardInvalid(broken)
    if problems and reporter is not None:
        reporter.warning(
            problems,
            f"warning: {len(problems)} equivalence mark(s) match no mutant of the code as "
            "it is now; mark the current keys again:",
        )
    return marks
