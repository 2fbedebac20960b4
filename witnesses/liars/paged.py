"""Liars for the paged KV cache (cards PKV-*).

Each is a plausible wrong version of one function of impl.paged: the slips
a block allocator really makes. A card that lists one must have a witness
that fails under it.
"""

from __future__ import annotations

import heapq

import numpy as np

from witnesses.liars import liar

# ---- the four from the issue ------------------------------------------------------------


@liar(
    "paged.cow_writes_shared",
    target="impl.paged:PagedSequence._make_writable",
    why="copy-on-write that never copies: an append into a shared last block writes into the sibling's block",
)
def make_writable_in_place(self, i):
    return None


@liar(
    "paged.truncate_keeps_blocks",
    target="impl.paged:PagedSequence.truncate",
    why="drops rows and page-table entries but never decrefs the blocks: they leak, never free again",
)
def truncate_without_release(self, n):
    self._check_live("truncate", f"n={n}")
    keep = -(-int(n) // self.pool.block_size)
    del self.blocks[keep:]
    self._n = int(n)
    self._gathered = None


@liar(
    "paged.fork_no_incref",
    target="impl.paged:PagedSequence.fork",
    why="the fork copies the page table but leaves every count at 1, so nobody knows the blocks are shared",
)
def fork_without_incref(self):
    from impl.paged import PagedSequence

    s = PagedSequence(self.pool)
    s.blocks, s._n = list(self.blocks), self._n
    return s


@liar(
    "paged.exhausted_hands_out_used",
    target="impl.paged:BlockPool.allocate",
    why="a free list that wraps around: with no free block it hands out the lowest id, still in use",
)
def allocate_wraps_around(self):
    if not self._free and not self.grow:
        b = 0
        while self._refs.get(b) == 0:
            b += 1
        self._refs.incref(b)
        return b
    self.ensure_free(1)
    b = heapq.heappop(self._free)
    self._refs.incref(b)
    return b


# ---- paged attention and rewind ------------------------------------------------------------


@liar(
    "paged.gather_in_id_order",
    target="impl.paged:PagedSequence._gather",
    why="gathers the sequence's blocks in block-id order, not page-table order (right while ids ascend)",
)
def gather_sorted(self, layer, rows):
    bs, kv = self.pool.block_size, self.pool.geometry.kv_dim
    nb = -(-rows // bs)
    idx = np.asarray(sorted(self.blocks[:nb]), dtype=np.intp)
    st = self.pool.storage
    k = st.k[layer].take(idx, axis=0).reshape(nb * bs, kv)
    v = st.v[layer].take(idx, axis=0).reshape(nb * bs, kv)
    return k[:rows], v[:rows]


@liar(
    "paged.truncate_keeps_the_boundary_block",
    target="impl.paged:PagedSequence.truncate",
    factory=True,
    why="a truncate to a block boundary inside the history (0 < n < len) keeps the block that starts at n (one "
    "page-table entry too many): while a fork still shares it, the next append writes its rows into the fork's",
)
def make_truncate_keeps_boundary_block(original):
    def truncate(self, n):
        bs = self.pool.block_size
        if not (type(n) is int and 0 < n < len(self) and n % bs == 0):
            return original(self, n)  # refusals and every other n as before
        keep = n // bs + 1  # the slip: rows 0..n-1 fill n // bs blocks, the one starting at n stays too
        for b in self.blocks[keep:]:
            self.pool.decref(b)
        del self.blocks[keep:]
        self._n = n
        self._gathered = None

    return truncate


@liar(
    "paged.truncate_to_block_boundary",
    target="impl.paged:PagedSequence.truncate",
    factory=True,
    why="truncates at block granularity: keeps the whole last block, so rows past n in it stay visible",
)
def make_truncate_rounds_up(original):
    def truncate(self, n):
        bs = self.pool.block_size
        return original(self, min(len(self), -(-int(n) // bs) * bs))

    return truncate


@liar(
    "paged.gather_cache_outlives_rows",
    target="impl.paged:PagedSequence.view",
    why="serves a layer's gathered K/V while it is long enough, even after truncate and new writes replaced rows",
)
def view_stale(self, layer, hi):
    cache = self.__dict__.setdefault("_liar_views", {})
    got = cache.get(layer)
    if got is None or got[0] < hi:
        k, v = self._gather(layer, len(self))
        got = cache[layer] = (len(self), k, v)
    return got[1][:hi], got[2][:hi], 0


@liar(
    "paged.release_keeps_blocks",
    target="impl.paged:PagedSequence.release",
    why="release marks the sequence released but never returns its blocks: every block it held leaks",
)
def release_without_returning(self):
    self._check_live("release", "")
    self._released = True


# ---- the block-manager claims (TGT-BLOCKS*) ------------------------------------------------


@liar(
    "paged.release_twice_decrefs",
    target="impl.paged:PagedSequence.release",
    why="release decrefs every block but neither checks nor clears the page table: a second release decrefs "
    "them again, freeing a block a fork still holds",
)
def release_without_clearing(self):
    for b in self.blocks:
        self.pool.decref(b)
    self._released = True


@liar(
    "paged.allocate_highest_free",
    target="impl.paged:BlockPool.allocate",
    why="a free list kept as a stack: hands out the highest free id, not the lowest the pool documents",
)
def allocate_highest_free(self):
    self.ensure_free(1)
    b = max(self._free)
    self._free.remove(b)
    heapq.heapify(self._free)
    self._refs.incref(b)
    return b
