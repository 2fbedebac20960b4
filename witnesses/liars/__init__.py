"""Liars: plausible wrong versions of one impl function each.

Every card lists the liars its witnesses must catch (``liars: [kv.no_renumber]``).
The harness reruns the card's witnesses in a fresh process with the liar
patched in; if every witness still passes, the liar survived and the card
is VACUOUS: its witnesses would also pass a wrong implementation.

Add a liar by writing a small module here (one module per area, e.g.
``kv.py`` for ``kv.*`` liars)::

    from witnesses.liars import liar

    @liar("kv.no_renumber", target="impl.kv:KVCache.evict",
          why="drops the span but keeps survivors at their old positions")
    def evict(self, start, n):
        ...

or, to wrap the real function, ``factory=True`` and a function that takes
the original and returns the replacement. Names and targets must be string
literals: the harness indexes them with ``ast`` without importing anything.
See harness/liars.py for the mechanism.
"""

from harness.liars import liar

__all__ = ["liar"]
