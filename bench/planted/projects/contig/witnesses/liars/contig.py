"""Liars: plausible wrong versions of contigcache's code, which the witnesses must catch."""

import numpy as np

from harness import liar


@liar(
    "contig.append_ignores_length",
    target="contigcache.cache:ContigKVCache.append",
    why="writes every chunk at position 0 instead of at the current length: only the last chunk survives",
)
def append(self, k, v):
    t = k.shape[3]
    end = self.length + t
    if end > self.capacity:
        self._grow(end)
    self._k[:, :, :, :t] = k
    self._v[:, :, :, :t] = v
    self.length = end


@liar(
    "contig.truncate_keeps_one_more",
    target="contigcache.cache:ContigKVCache.truncate",
    why="an off-by-one: keeps the first position it should drop",
)
def truncate(self, n):
    if not 0 <= n <= self.length:
        raise ValueError(f"truncate({n}): n must be in 0..{self.length}")
    self.length = min(n + 1, self.length)


@liar(
    "contig.truncate_zero_is_a_no_op",
    target="contigcache.cache:ContigKVCache.truncate",
    why="`if n:` treats truncate(0) as 'no argument': the cache keeps everything",
)
def truncate_zero(self, n):
    if not 0 <= n <= self.length:
        raise ValueError(f"truncate({n}): n must be in 0..{self.length}")
    if n:
        self.length = n


@liar(
    "contig.fork_shares_v",
    target="contigcache.cache:ContigKVCache.fork",
    why="the fork copies K but shares the V buffer with its source",
)
def fork(self):
    from contigcache.cache import ContigKVCache

    other = ContigKVCache.__new__(ContigKVCache)
    other._k = self._k.copy()
    other._v = self._v
    other.length = self.length
    return other


@liar(
    "contig.select_sorted",
    target="contigcache.cache:ContigKVCache.select",
    why="select keeps the elements named, but in ascending order rather than the order asked for",
)
def select(self, idx):
    idx = sorted(self._check(idx, exact=False))
    self._k = self._k[:, idx]
    self._v = self._v[:, idx]


@liar(
    "contig.stores_half_precision",
    target="contigcache.cache:ContigKVCache.append",
    why="stores rows rounded to float16 to halve memory: read-back is no longer exact",
)
def append_f16(self, k, v):
    t = k.shape[3]
    end = self.length + t
    if end > self.capacity:
        self._grow(end)
    self._k[:, :, :, self.length : end] = k.astype(np.float16)
    self._v[:, :, :, self.length : end] = v.astype(np.float16)
    self.length = end


@liar(
    "contig.grow_forgets_rows",
    target="contigcache.cache:ContigKVCache._grow",
    why="grows the buffers without copying what they held: every position before a growth reads back as zeros",
)
def _grow(self, need):
    size = max(need, 2 * self.capacity)
    shape = self._k.shape[:3] + (size,) + self._k.shape[4:]
    self._k = np.zeros(shape, np.float32)
    self._v = np.zeros(shape, np.float32)


@liar(
    "contig.values_returns_keys",
    target="contigcache.cache:ContigKVCache.values",
    why="a copy-paste slip: values() returns the keys",
)
def values(self):
    return self._k[:, :, :, : self.length].copy()
