"""Liars: plausible wrong versions of pagedcache's code, which the witnesses must catch."""

import numpy as np

from harness import liar


@liar(
    "paged.append_ignores_block_offset",
    target="pagedcache.cache:PagedKVCache.append",
    why="writes every run of rows from the start of its block, ignoring the position's offset inside it",
)
def append(self, k, v):
    bs, n0 = self.pool.block_size, self.length
    n1 = n0 + k.shape[3]
    for b, table in enumerate(self.tables):
        if n0 % bs:
            self._make_tail_writable(table)
        while len(table) * bs < n1:
            table.append(self.pool.allocate())
        p = n0
        while p < n1:
            blk, off = table[p // bs], p % bs
            take = min(bs - off, n1 - p)
            self.pool.k[blk, :, :, 0:take] = k[:, b, :, p - n0 : p - n0 + take]
            self.pool.v[blk, :, :, 0:take] = v[:, b, :, p - n0 : p - n0 + take]
            p += take
    self.length = n1


@liar(
    "paged.truncate_rounds_up_to_a_block",
    target="pagedcache.cache:PagedKVCache.truncate",
    why="truncates at block granularity: keeps the whole last block, so rows past n in it stay",
)
def truncate(self, n):
    if not 0 <= n <= self.length:
        raise ValueError(f"truncate({n}): n must be in 0..{self.length}")
    bs = self.pool.block_size
    keep = -(-n // bs)
    for table in self.tables:
        for blk in table[keep:]:
            self.pool.decref(blk)
        del table[keep:]
    self.length = min(self.length, keep * bs)


@liar(
    "paged.cow_never_copies",
    target="pagedcache.cache:PagedKVCache._make_tail_writable",
    why="copy-on-write that never copies: an append into a shared last block writes into the sibling's block",
)
def _make_tail_writable(self, table):
    return None


@liar(
    "paged.repeat_tiles",
    target="pagedcache.cache:PagedKVCache.repeat",
    why="repeat tiles the batch (0, 1, 0, 1) instead of repeating each element in a row (0, 0, 1, 1)",
)
def repeat(self, r):
    if r < 1:
        raise ValueError(f"repeat({r}): r must be >= 1")
    self._take([b for _ in range(r) for b in range(self.batch)])


@liar(
    "paged.pool_half_precision",
    target="pagedcache.cache:BlockPool.__init__",
    why="a pool of float16 blocks to halve memory: read-back is no longer exact",
)
def __init__(self, n_layers, n_heads, head_dim, block_size=4, num_blocks=8):
    self.block_size = block_size
    self.k = np.zeros((num_blocks, n_layers, n_heads, block_size, head_dim), np.float16)
    self.v = np.zeros_like(self.k)
    self.refs = np.zeros(num_blocks, np.int64)
    self.free = list(range(num_blocks - 1, -1, -1))


@liar(
    "paged.select_sorted",
    target="pagedcache.cache:PagedKVCache.select",
    why="select keeps the elements named, but in ascending order rather than the order asked for",
)
def select(self, idx):
    self._take(sorted(self._check(idx, exact=False)))


@liar(
    "paged.fork_no_incref",
    target="pagedcache.cache:PagedKVCache.fork",
    why="the fork copies the block tables but leaves every count as it was: nobody knows the blocks are shared",
)
def fork(self):
    from pagedcache.cache import PagedKVCache

    other = PagedKVCache(self.pool, 0)
    other.tables = [list(table) for table in self.tables]
    other.length = self.length
    return other


@liar(
    "paged.read_v_from_k_pool",
    target="pagedcache.cache:PagedKVCache.read",
    why="a copy-paste slip in the gather: V is read from the pool's K blocks",
)
def read(self):
    bs, n = self.pool.block_size, self.length
    nb = -(-n // bs)
    ks, vs = [], []
    for table in self.tables:
        idx = np.asarray(table[:nb], dtype=np.intp)
        for src, out in ((self.pool.k, ks), (self.pool.k, vs)):
            blocks = src[idx]
            rows = blocks.transpose(1, 2, 0, 3, 4).reshape(src.shape[1], src.shape[2], nb * bs, src.shape[4])
            out.append(rows[:, :, :n])
    return np.stack(ks, axis=1), np.stack(vs, axis=1)


@liar(
    "paged.take_keeps_old_counts",
    target="pagedcache.cache:PagedKVCache._take",
    why="reorder/select/repeat raise the counts of the new tables but never lower the old ones: dropped elements leak",
)
def _take(self, idx):
    new = [list(self.tables[i]) for i in idx]
    for table in new:
        for blk in table:
            self.pool.incref(blk)
    self.tables = new
