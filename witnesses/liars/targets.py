"""Liars for the TGT-* cards: slips an adapter really makes when it maps one cache's calls onto the protocol.

Each swaps one method of impl's adapters (harness/targets/own.py), so the TGT
witnesses must catch them on impl's own targets; the same slips in a
third-party adapter would read as that library's bug.
"""

from __future__ import annotations

import numpy as np

from witnesses.liars import liar


@liar(
    "targets.truncate_keeps_one_more",
    target="harness.targets.own:StoresHandle.truncate",
    why="a truncate written as crop(n) on a cache whose crop keeps the position it is given: n + 1 rows survive",
)
def truncate_keeps_one_more(self, n):
    for s in self.stores:
        s.truncate(n + 1 if isinstance(n, int) and 0 <= n < len(s) else n)


@liar(
    "targets.positions_without_offset",
    target="harness.targets.own:StoresHandle.read",
    factory=True,
    why="read numbers the rows it returns from 0, forgetting the first position the store still holds",
)
def make_read_without_offset(original):
    def read(self):
        rows = original(self)
        return type(rows)(rows.k, rows.v, np.arange(len(rows.positions), dtype=np.int64))

    return read


@liar(
    "targets.fork_shares_stores",
    target="harness.targets.own:StoresHandle.fork",
    why="fork hands back a new handle over the very same stores (a shallow copy)",
)
def fork_shares_stores(self):
    stores = list(self.stores)
    return type(self)(self.target, self.geometry, self.window, stores, self.clone_store, self.release_store, self.pool)


@liar(
    "targets.batch_aliases_repeats",
    target="harness.targets.own:StoresHandle._keep",
    why="a batch element named twice (beam search, repeat) gets the same store twice instead of a copy",
)
def keep_aliasing(self, idx):
    used = set(idx)
    for i, s in enumerate(self.stores):
        if i not in used:
            self.release_store(s)
    self.stores = [self.stores[i] for i in idx]


@liar(
    "targets.repeat_tiles",
    target="harness.targets.own:StoresHandle.repeat",
    why="repeat as tile (0, 1, 0, 1) instead of repeat_interleave (0, 0, 1, 1)",
)
def repeat_tiles(self, r):
    self._keep([b for _ in range(int(r)) for b in range(self.batch)])


@liar(
    "targets.mask_ignores_window",
    target="harness.targets.own:StoresHandle.mask_sizes",
    why="mask sizes as for full attention: kv_length counts every position, kv_offset 0, whatever the window",
)
def mask_ignores_window(self, query_len):
    return len(self) + query_len, 0


@liar(
    "targets.release_forgets_stores",
    target="harness.targets.own:StoresHandle.release",
    why="release drops the handle's stores without releasing them: a paged sequence's blocks stay counted in the "
    "pool forever (a leak no read shows)",
)
def release_forgets_stores(self):
    self.stores = []
