"""Compare two runs: what changed per card between them, and which changes are regressions. Pure: no I/O.

:func:`compare` takes two :class:`harness.record.document.RunDocument` (``before``
and ``after``) and returns a :class:`Comparison`: per card the verdict,
version, liars caught, duration and every bounded measure before -> after,
the bound files whose bytes changed (why a card moved), and the
regressions. Loading runs (ledger ids, report folders, verdicts.json files)
is :mod:`harness.compare.runs`'s job; rendering is :mod:`harness.compare.render`'s.

Regression rules (docs/compare.md states them for users):

1. verdict worse: the after verdict ranks below the before one, in the order
   PROVEN > UNVERIFIED > VACUOUS > ERROR > FAILED (a card that stops being
   PROVEN is always a regression; so is a VACUOUS card that now FAILS).
2. liar survives: a liar caught before ran and was not caught after
   (survived, inconclusive, error), or a liar new to the card is not
   caught. A liar that did not run (its card's honest run failed, or
   --no-liars) is left to rule 1: the verdict says it.
3. measure toward its bound: a numeric bounded measure moves toward its
   bound (up for le/lt, down for ge/gt, any move for eq) by more than the
   witness's threshold, a fraction of the headroom it had before
   (|limit - before|). The default threshold is 0 on an *exact* bound (eq,
   or a le/lt/ge/gt bound the measure sat on before: headroom 0, like
   max|delta| <= 0 at 0): any move is a regression. Elsewhere the default is
   no threshold (the change is shown, not judged); a card sets one per
   witness and key with ``regression: {<key>: <fraction>}`` (0 <= fraction
   <= 1; 0.5 = "used up more than half of the room that was left").

A card in one run only is listed as added or removed; a removed card is not
a regression (the card set is the author's to change), an added card that
is not PROVEN is (rule 1 against nothing: it enters worse than PROVEN).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.plan.binding import BoundFile
from harness.record.document import CardResult, ChangedFile, CheckResult, LiarResult, RunDocument
from harness.statuses import LiarStatus, Verdict

VERDICT_RANK = {Verdict.PROVEN: 0, Verdict.UNVERIFIED: 1, Verdict.VACUOUS: 2, Verdict.ERROR: 3, Verdict.FAILED: 4}
TOWARD_UP = ("le", "lt")  # the measure must stay at or below its limit: up is toward it
TOWARD_DOWN = ("ge", "gt")

Thresholds = Mapping[tuple[str, str, str], float]  # (card id, witness id, key) -> fraction of the headroom


@dataclass(frozen=True)
class MeasureChange:
    """One bounded measure of one witness, before -> after."""

    witness: str
    key: str
    node: str  # the pytest node for per-node evidence, else ""
    op: str
    limit: Any
    before: Any  # None: not measured in that run
    after: Any
    change: float | None  # after - before when both are finite numbers
    toward_bound: bool  # moved toward the limit (eq: moved at all)
    used: float | None  # the fraction of the headroom the move used (inf when the headroom was 0)
    threshold: float | None  # the regression threshold in force (None: the change is shown, not judged)
    regression: bool


@dataclass(frozen=True)
class Regression:
    card: str
    rule: str  # "verdict" | "liar" | "measure"
    text: str


@dataclass(frozen=True)
class CardChange:
    id: str
    status: str  # "added" | "removed" | "changed" | "unchanged"
    title: str
    verdict_before: str | None
    verdict_after: str | None
    version_before: int | None
    version_after: int | None
    liars_before: tuple[int, int] | None  # (caught, total)
    liars_after: tuple[int, int] | None
    newly_surviving: tuple[str, ...]
    duration_before: float | None
    duration_after: float | None
    changed_files: tuple[str, ...]  # bound files whose bytes differ ("path (role)"), or that appeared/went
    measures: tuple[MeasureChange, ...]
    regressions: tuple[Regression, ...]
    replayed_after: bool = False  # the after verdict was replayed (--changed), not recomputed
    card_diff: str = ""  # unified diff of the card file between the runs, when both reports kept it

    @property
    def duration_change(self) -> float | None:
        if self.duration_before is None or self.duration_after is None:
            return None
        return self.duration_after - self.duration_before


@dataclass(frozen=True)
class RunRef:
    """How a compared run is named in the output."""

    label: str  # e.g. "run 12 (2026-11-30T18:11:04Z)"
    started: str
    commit: str | None
    gate: str


@dataclass(frozen=True)
class Comparison:
    before: RunRef
    after: RunRef
    cards: tuple[CardChange, ...]
    regressions: tuple[Regression, ...] = field(default=())

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.cards if c.status == "added")

    @property
    def removed(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.cards if c.status == "removed")


def run_ref(doc: RunDocument, label: str) -> RunRef:
    h = doc.header
    return RunRef(label, h.started, h.git.commit, str(h.summary.gate))


def compare(
    before: RunDocument,
    after: RunDocument,
    *,
    before_label: str = "before",
    after_label: str = "after",
    thresholds: Thresholds | None = None,
    card_texts: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {}),
) -> Comparison:
    """Every card of either run, in the after run's order then the removed ones, with its changes.

    ``card_texts``: (before, after) card id -> the card file's text as run, for the card's own diff.
    """
    thresholds = thresholds or {}
    a = {c.id: c for c in before.cards}
    b = {c.id: c for c in after.cards}
    order = [c.id for c in after.cards] + [c.id for c in before.cards if c.id not in b]
    cards = tuple(
        card_change(a.get(cid), b.get(cid), thresholds, card_diff(cid, a.get(cid), b.get(cid), card_texts))
        for cid in order
    )
    regressions = tuple(r for c in cards for r in c.regressions)
    return Comparison(run_ref(before, before_label), run_ref(after, after_label), cards, regressions)


def card_diff(
    cid: str, a: CardResult | None, b: CardResult | None, texts: tuple[Mapping[str, str], Mapping[str, str]]
) -> str:
    """The card file's unified diff between the runs ('' when unchanged or either text is unknown)."""
    import difflib

    if a is None or b is None or a.fingerprint == b.fingerprint:
        return ""
    x, y = texts[0].get(cid), texts[1].get(cid)
    if x is None or y is None:
        return ""
    return "".join(
        difflib.unified_diff(
            x.splitlines(keepends=True),
            y.splitlines(keepends=True),
            f"{a.card_path} (before)",
            f"{b.card_path} (after)",
        )
    )


def card_change(a: CardResult | None, b: CardResult | None, thresholds: Thresholds, diff: str = "") -> CardChange:
    assert a is not None or b is not None
    cid = (b or a).id  # type: ignore[union-attr]
    measures = tuple(measure_changes(cid, a, b, thresholds)) if b is not None else ()
    newly = tuple(newly_surviving(a, b)) if b is not None else ()
    regs: list[Regression] = []
    va, vb = (a.verdict if a else None), (b.verdict if b else None)
    if vb is not None and _rank(vb) > (_rank(va) if va is not None else 0):
        was = f"{va}" if va is not None else "new card"
        regs.append(Regression(cid, "verdict", f"{cid}: {was} -> {vb}: {b.reason}"))  # type: ignore[union-attr]
    for name in newly:
        regs.append(Regression(cid, "liar", f"{cid}: liar {name} is no longer caught ({_liar(b, name)})"))
    for m in measures:
        if m.regression:
            regs.append(
                Regression(
                    cid,
                    "measure",
                    f"{cid}/{m.witness}: {m.key} {m.before!r} -> {m.after!r} "
                    f"toward its bound ({m.op} {m.limit!r}){_used_text(m)}",
                )
            )
    files = tuple(changed_bound_files(a, b)) if a is not None and b is not None else ()
    if a is None:
        status = "added"
    elif b is None:
        status = "removed"
    else:
        same = (
            va == vb
            and not files
            and a.version == b.version
            and a.fingerprint == b.fingerprint
            and _liars(a) == _liars(b)
            and all(m.change in (0, 0.0, None) and m.before == m.after for m in measures)
        )
        status = "unchanged" if same else "changed"
    return CardChange(
        id=cid,
        status=status,
        title=(b or a).title,  # type: ignore[union-attr]
        verdict_before=str(va) if va is not None else None,
        verdict_after=str(vb) if vb is not None else None,
        version_before=a.version if a else None,
        version_after=b.version if b else None,
        liars_before=_liars(a),
        liars_after=_liars(b),
        newly_surviving=newly,
        duration_before=_duration(a),
        duration_after=_duration(b),
        changed_files=files,
        measures=measures,
        regressions=tuple(regs),
        replayed_after=bool(b is not None and b.replayed_from is not None),
        card_diff=diff,
    )


def _rank(v: str) -> int:
    return VERDICT_RANK.get(Verdict(v), max(VERDICT_RANK.values()))


def _liars(c: CardResult | None) -> tuple[int, int] | None:
    if c is None:
        return None
    return (sum(1 for li in c.liars if li.caught), len(c.liars))


def _liar(c: CardResult | None, name: str) -> str:
    li = next((li for li in (c.liars if c else ()) if li.name == name), None)
    return str(li.status) if li is not None else "not listed"


def _duration(c: CardResult | None) -> float | None:
    if c is None:
        return None
    if c.replayed_from is not None:
        return c.replayed_from.duration_s  # a replay spent nothing; its verdict's run took this long
    return c.duration_s


def newly_surviving(a: CardResult | None, b: CardResult) -> Iterable[str]:
    """Liars of ``b`` that ran and were not caught (survived, inconclusive, could not be applied) and were caught
    in ``a`` or are new to the card. A liar that did not run (the honest run failed, or --no-liars) is not
    news: the card's verdict says why, and rule 1 judges that."""
    before: dict[str, LiarResult] = {li.name: li for li in (a.liars if a else ())}
    for li in b.liars:
        if li.caught or li.status == LiarStatus.NOT_RUN:
            continue
        old = before.get(li.name)
        if old is None or old.caught:
            yield li.name


def bound_file_changes(before: Iterable[BoundFile], after: Iterable[BoundFile]) -> Iterable[ChangedFile]:
    """Bound files whose bytes differ between two bindings (``changed``; a file now missing too), or that are
    bound in one only (``newly bound``, ``no longer bound``): the after binding's order, then the dropped ones."""
    fa = {f.path: f for f in before}
    fb = {f.path: f for f in after}
    for path in list(fb) + [p for p in fa if p not in fb]:
        x, y = fa.get(path), fb.get(path)
        if x is None:
            yield ChangedFile(path, y.role, "newly bound")  # type: ignore[union-attr]
        elif y is None:
            yield ChangedFile(path, x.role, "no longer bound")
        elif x.sha256 != y.sha256:
            yield ChangedFile(path, y.role, "changed")


def changed_bound_files(a: CardResult, b: CardResult) -> Iterable[str]:
    """Bound files whose bytes differ between the runs, or that are bound in one run only: "path (role)"."""
    for f in bound_file_changes(a.bound_files, b.bound_files):
        yield f"{f.path} ({f.role})" if f.change == "changed" else f"{f.path} ({f.role}, {f.change})"


def _checks(c: CardResult | None) -> dict[tuple[str, str, str], CheckResult]:
    out: dict[tuple[str, str, str], CheckResult] = {}
    for w in (c.witnesses + c.controls) if c else ():
        for chk in w.bounds:
            out[(w.id, chk.key, chk.node)] = chk
    return out


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def measure_changes(
    card_id: str, a: CardResult | None, b: CardResult, thresholds: Thresholds
) -> Iterable[MeasureChange]:
    """One entry per bound checked in ``b``, matched with the same witness, key and node in ``a``."""
    before = _checks(a)
    for (wid, key, node), chk in _checks(b).items():
        old = before.get((wid, key, node))
        x = _number(old.actual) if old is not None else None
        y = _number(chk.actual)
        limit = _number(chk.limit)
        change = y - x if x is not None and y is not None and math.isfinite(x) and math.isfinite(y) else None
        toward, used = False, None
        if change is not None and change != 0 and limit is not None:
            if chk.op == "eq":
                toward = True
            elif chk.op in TOWARD_UP:
                toward = change > 0
            elif chk.op in TOWARD_DOWN:
                toward = change < 0
            if toward:
                room = abs(limit - x)  # type: ignore[operator]
                used = abs(change) / room if room > 0 else math.inf
        exact = chk.op == "eq" or (x is not None and limit is not None and x == limit)
        threshold = thresholds.get((card_id, wid, key))
        if threshold is None and exact:
            threshold = 0.0
        regression = bool(toward and threshold is not None and used is not None and used > threshold)
        yield MeasureChange(
            wid,
            key,
            node,
            chk.op,
            chk.limit,
            old.actual if old is not None else None,
            chk.actual,
            change,
            toward,
            used,
            threshold,
            regression,
        )


def _used_text(m: MeasureChange) -> str:
    if m.used is None or m.threshold is None:
        return ""
    if math.isinf(m.used):
        return ": it sat on the bound, any move counts"
    return f": used {m.used:.0%} of the room left (threshold {m.threshold:.0%})"


def thresholds_from_cards(cards: Iterable[Any]) -> dict[tuple[str, str, str], float]:
    """(card, witness, key) -> fraction, from each loaded card's witnesses' ``regression`` settings."""
    out: dict[tuple[str, str, str], float] = {}
    for card in cards:
        for w in card.all_witnesses:
            for key, frac in getattr(w, "regression", ()):
                out[(card.id, w.id, key)] = float(frac)
    return out


def summary_counts(cmp: Comparison) -> Mapping[str, int]:
    """How many cards are in each status, and how many regressions."""
    counts = {s: sum(1 for c in cmp.cards if c.status == s) for s in ("changed", "unchanged", "added", "removed")}
    counts["regressions"] = len(cmp.regressions)
    return counts
