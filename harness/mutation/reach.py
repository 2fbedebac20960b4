"""Which witnesses can tell a mutant from the original: reachability, from the honest run's line coverage.

A ``mutate`` run's honest runs trace the files each card claims
(:class:`harness.wire.linecov.LineTracer`): per node, the lines its test body ran;
and the lines that ran outside any test body (collection, fixture set-up and
tear-down), which any node may have depended on. :func:`reach_of` turns that
into a card's :class:`Reach`.

A mutant changes only the code on its lines (:attr:`harness.mutation.generate.Mutant.lines`).
A witness whose test body never ran any of them, in a run that is otherwise
the same, runs exactly as it did honestly: it passes. So:

- **not reached**: no witness ran any of its lines, and none ran outside a
  test body: every witness would pass; the mutant survives and is never run
  (reported as survived, with that reason);
- **covering witnesses**: the mutant runs against the witnesses whose test
  body ran one of its lines, or against every witness when one of its lines
  ran outside a test body (set-up that any witness may share); of a witness
  of several nodes (a parametrized test), only the nodes whose test body
  ran one of its lines (:meth:`Reach.only_nodes`: the others would run as
  they did honestly);
- **order** (:func:`ordered`, :class:`Killers`): the witness that killed
  this mutant last time, then the ones that killed its neighbours (same
  line, then same function; this run's results as they come in, then the
  last run's), then the rest in card order. A mutant run stops at the first
  witness that fails, so a good guess is most of the saving.

NOTE: what this assumes. A witness that runs none of the mutant's lines
still shares the process with the witnesses before it: a value one of them
computed under the mutant and cached (an ``lru_cache``, a module-level
table) could reach it. Lines run while building such a cache in one
witness's test body count for that witness only. tests/harness/mutation/test_mutate_fast.py
runs a fixed sample both ways and compares every status.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from harness.mutation.generate import Mutant
from harness.record.document import MutantResult
from harness.select.cards import Card
from harness.statuses import MutantStatus
from harness.wire import messages

Lines = Mapping[str, frozenset[int]]  # path relative to the root -> line numbers


def _merge(into: dict[str, set[int]], lines: Mapping[str, Iterable[int]]) -> None:
    for path, numbers in lines.items():
        into.setdefault(path, set()).update(numbers)


def _hits(lines: Lines, mutant: Mutant) -> bool:
    ran = lines.get(mutant.path)
    return bool(ran) and any(n in ran for n in mutant.lines)


@dataclass(frozen=True)
class Reach:
    """The lines each witness's test body ran in the honest run, and those run outside any test body; per node
    too, for a witness of several nodes (a parametrized test)."""

    witnesses: tuple[str, ...]  # witness ids, card order
    by_witness: Mapping[str, Lines]
    outside: Lines
    nodes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # witness id -> every node it ran honestly
    by_node: Mapping[str, Lines] = field(default_factory=dict)  # node id -> the lines its test body ran

    def running(self, mutant: Mutant) -> tuple[str, ...]:
        """Ids of the witnesses that can tell ``mutant`` apart, card order; () when none can: not reached.

        A C mutant: every witness (C lines are not traced; a C mutant is never "not reached")."""
        if not mutant.path.endswith(".py") or _hits(self.outside, mutant):
            return self.witnesses
        return tuple(w for w in self.witnesses if _hits(self.by_witness.get(w, {}), mutant))

    def only_nodes(self, mutant: Mutant, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Of the witnesses ``ids`` (from :meth:`running`), those of several nodes whose test bodies did not all
        run the mutant's lines: witness id -> the nodes that did (the others run as they did honestly: they
        pass). A witness absent here runs whole: every node ran a line, or one ran outside a test body, or the
        honest run's node list is not known."""
        if not mutant.path.endswith(".py") or _hits(self.outside, mutant):
            return {}
        out = {}
        for w in ids:
            every = self.nodes.get(w, ())
            hit = tuple(n for n in every if _hits(self.by_node.get(n, {}), mutant))
            if hit and len(hit) < len(every):
                out[w] = hit
        return out

    @property
    def lines(self) -> int:
        """Distinct traced lines run by any witness or outside a test body (for the run's note)."""
        every: dict[str, set[int]] = {}
        for lines in (*self.by_witness.values(), self.outside):
            _merge(every, lines)
        return sum(len(v) for v in every.values())


def reach_of(
    card: Card, lines_run: Sequence[messages.LinesRun], nodes: Mapping[str, Sequence[str]] | None = None
) -> Reach | None:
    """The card's :class:`Reach` from the honest run's :class:`harness.wire.messages.LinesRun` events; None when
    there are none (nothing was traced: every mutant runs against every witness). ``nodes``: witness id -> the
    node ids the honest run ran for it (a node that ran no traced line streams no event; without the list,
    every witness runs whole)."""
    if not lines_run:
        return None
    outside: dict[str, set[int]] = {}
    by_witness: dict[str, dict[str, set[int]]] = {w.id: {} for w in card.witnesses}
    by_node: dict[str, dict[str, set[int]]] = {}
    for ev in lines_run:
        if not ev.nodeid:
            _merge(outside, ev.lines)
            continue
        _merge(by_node.setdefault(ev.nodeid, {}), ev.lines)
        for w in card.witnesses:
            if messages.node_matches(w.test, ev.nodeid):
                _merge(by_witness[w.id], ev.lines)

    def frozen(lines: dict[str, set[int]]) -> Lines:
        return {p: frozenset(n) for p, n in lines.items()}

    several = {w: tuple(ns) for w, ns in (nodes or {}).items() if len(ns) > 1}
    return Reach(
        tuple(w.id for w in card.witnesses),
        {w: frozen(v) for w, v in by_witness.items()},
        frozen(outside),
        several,
        {n: frozen(v) for n, v in by_node.items() if any(n in ns for ns in several.values())},
    )


def ordered(ids: Sequence[str], first: Sequence[str]) -> tuple[str, ...]:
    """``ids`` (card order) with those in ``first`` leading, in ``first``'s order; the rest in card order.

    NOTE: card order for the rest, not fastest first (PIT's): a mutant's status is its first detection in
    card order (the reference path's), so with no killer to guess the first detection here is the
    reference's, and a timeout needs no follow-up. Measured on the default sample: the same number killed by
    the first witness tried (509 of 574 either way), the same wall time within noise.
    """
    lead = [w for w in dict.fromkeys(first) if w in ids]
    return tuple(lead + [w for w in ids if w not in lead])


class Killers:
    """Which witness killed which mutant, last run (the ledger) and this run so far: who to try first.

    Lives on the scheduling thread: :meth:`record` as results come in, :meth:`hint` as jobs start.
    """

    def __init__(self, last: Iterable[MutantResult] = ()) -> None:
        self.last = {m.key: m for m in last if m.status in (MutantStatus.KILLED, MutantStatus.TIMEOUT) and m.killer}
        self.now: list[tuple[str, int, str, str]] = []  # (path, line, qualname, killer), in order of arrival

    def record(self, mutant: Mutant, killer: str) -> None:
        if killer:
            self.now.append((mutant.path, mutant.line, mutant.qualname, killer))

    def hint(self, mutant: Mutant) -> list[str]:
        """Witness ids to try first for ``mutant``: its own killer last run, then its neighbours' killers
        (same line, then same function by how many they killed; this run before the last)."""
        own = self.last.get(mutant.key)
        out = [own.killer] if own is not None else []
        past = [(m.path, m.line, m.qualname, m.killer) for m in self.last.values()]
        for rows in (list(reversed(self.now)), past):
            out += [k for p, ln, _, k in rows if (p, ln) == (mutant.path, mutant.line)]
            same_fn = Counter(k for p, _, q, k in rows if (p, q) == (mutant.path, mutant.qualname))
            out += [k for k, _ in same_fn.most_common()]
        return list(dict.fromkeys(out))


__all__ = ["Killers", "Lines", "Reach", "ordered", "reach_of"]
