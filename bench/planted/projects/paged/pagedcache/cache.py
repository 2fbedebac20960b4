"""A paged KV cache: every sequence is a table of fixed-size blocks from one refcounted pool.

A block holds ``block_size`` consecutive positions of one sequence for every
layer and head. Forks share blocks (their counts are raised); a block with
more than one owner is copied before anyone writes into it (copy-on-write).
"""

import numpy as np


class BlockPool:
    """Blocks of K/V rows, (blocks, layers, heads, block_size, head_dim) float32, each with a reference count.

    The pool doubles when no block is free. A block whose count drops to 0 is
    free again (and handed out first: the free list is a stack).
    """

    def __init__(self, n_layers, n_heads, head_dim, block_size=4, num_blocks=8):
        self.block_size = block_size
        self.k = np.zeros((num_blocks, n_layers, n_heads, block_size, head_dim), np.float32)
        self.v = np.zeros_like(self.k)
        self.refs = np.zeros(num_blocks, np.int64)
        self.free = list(range(num_blocks - 1, -1, -1))

    @property
    def num_used(self):
        """Blocks with a count above 0."""
        return int(np.count_nonzero(self.refs))

    def allocate(self):
        if not self.free:
            self._grow()
        b = self.free.pop()
        self.refs[b] = 1
        return b

    def incref(self, b):
        self.refs[b] += 1

    def decref(self, b):
        self.refs[b] -= 1
        if self.refs[b] == 0:
            self.free.append(b)

    def copy_block(self, src):
        """A new block (count 1) holding the rows of block ``src``."""
        dst = self.allocate()
        self.k[dst] = self.k[src]
        self.v[dst] = self.v[src]
        return dst

    def _grow(self):
        n = len(self.refs)
        self.k = np.concatenate([self.k, np.zeros_like(self.k)])
        self.v = np.concatenate([self.v, np.zeros_like(self.v)])
        self.refs = np.concatenate([self.refs, np.zeros(n, np.int64)])
        self.free.extend(range(2 * n - 1, n - 1, -1))


class PagedKVCache:
    """A batch of sequences of equal length, each a block table into ``pool``; rows are (L, B, H, T, D) float32."""

    def __init__(self, pool, batch):
        self.pool = pool
        self.tables = [[] for _ in range(batch)]
        self.length = 0

    @property
    def batch(self):
        return len(self.tables)

    def __len__(self):
        return self.length

    def append(self, k, v):
        """Store k and v, each (layers, batch, heads, t, head_dim), at positions length .. length + t - 1."""
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
                self.pool.k[blk, :, :, off : off + take] = k[:, b, :, p - n0 : p - n0 + take]
                self.pool.v[blk, :, :, off : off + take] = v[:, b, :, p - n0 : p - n0 + take]
                p += take
        self.length = n1

    def _make_tail_writable(self, table):
        """Copy the partly filled last block first if another table shares it (copy-on-write)."""
        tail = table[-1]
        if self.pool.refs[tail] > 1:
            table[-1] = self.pool.copy_block(tail)
            self.pool.decref(tail)

    def read(self):
        """(k, v): K and V of positions 0 .. length - 1, (L, B, H, length, D), gathered into new arrays."""
        bs, n = self.pool.block_size, self.length
        nb = -(-n // bs)
        ks, vs = [], []
        for table in self.tables:
            idx = np.asarray(table[:nb], dtype=np.intp)
            for src, out in ((self.pool.k, ks), (self.pool.v, vs)):
                blocks = src[idx]  # (nb, L, H, bs, D), a copy
                rows = blocks.transpose(1, 2, 0, 3, 4).reshape(src.shape[1], src.shape[2], nb * bs, src.shape[4])
                out.append(rows[:, :, :n])
        return np.stack(ks, axis=1), np.stack(vs, axis=1)

    def truncate(self, n):
        """Keep positions 0 .. n - 1 (ValueError outside 0 .. length); blocks past them go back to the pool."""
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate({n}): n must be in 0..{self.length}")
        keep = -(-n // self.pool.block_size)
        for table in self.tables:
            for blk in table[keep:]:
                self.pool.decref(blk)
            del table[keep:]
        self.length = n

    def fork(self):
        """A copy-on-write fork: the same blocks, each count raised by one."""
        other = PagedKVCache(self.pool, 0)
        other.tables = [list(table) for table in self.tables]
        for table in other.tables:
            for blk in table:
                self.pool.incref(blk)
        other.length = self.length
        return other

    def release(self):
        """This cache is done: every block it holds goes back to the pool (once no fork shares it)."""
        for table in self.tables:
            for blk in table:
                self.pool.decref(blk)
        self.tables = []

    def reorder(self, idx):
        """Batch element i becomes old element idx[i] (indices may repeat: those share blocks copy-on-write)."""
        self._take(self._check(idx, exact=True))

    def select(self, idx):
        """Keep batch elements idx, in that order."""
        self._take(self._check(idx, exact=False))

    def repeat(self, r):
        """Each batch element r times in a row."""
        if r < 1:
            raise ValueError(f"repeat({r}): r must be >= 1")
        self._take([b for b in range(self.batch) for _ in range(r)])

    def _take(self, idx):
        new = [list(self.tables[i]) for i in idx]
        for table in new:
            for blk in table:
                self.pool.incref(blk)
        for table in self.tables:
            for blk in table:
                self.pool.decref(blk)
        self.tables = new

    def _check(self, idx, exact):
        idx = [int(i) for i in idx]
        if not idx or any(not 0 <= i < self.batch for i in idx) or (exact and len(idx) != self.batch):
            raise ValueError(f"batch indices {idx} do not fit a batch of {self.batch}")
        return idx
