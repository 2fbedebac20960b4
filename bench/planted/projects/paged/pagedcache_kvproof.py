"""pagedcache's PagedKVCache as a kvproof target: a batch of block tables over one pool its forks share."""

import numpy as np
from pagedcache import BlockPool, PagedKVCache

from harness.targets.protocol import Numerics, Occupancy, Rows, Target, Visible, check_rows

BLOCK_SIZE = 4


class PagedHandle:
    """One PagedKVCache (every batch element a block table); rows go in and out as (L, B, H, T, D) float32."""

    trace = None  # kvproof records the verbs themselves: a failure's reproduction replays them

    def __init__(self, geometry, window, cache):
        self.target, self.geometry, self.window, self.cache = TARGET, geometry, window, cache

    @property
    def batch(self):
        return self.cache.batch

    def __len__(self):
        return len(self.cache)

    def mask_sizes(self, query_len):
        return len(self) + query_len, 0  # no window: every query sees every position from 0

    def append(self, k, v):
        check_rows(self.geometry, self.batch, k, v)
        length, offset = self.mask_sizes(k.shape[3])
        self.cache.append(k, v)
        rows = self.read()  # attention gets every position held
        return Visible(rows.k, rows.v, rows.positions, length, offset)

    def read(self):
        k, v = self.cache.read()  # gathered into new arrays (documented): passed through
        return Rows(k, v, np.arange(len(self), dtype=np.int64))

    def truncate(self, n):
        self.cache.truncate(n)

    def fork(self):
        return PagedHandle(self.geometry, self.window, self.cache.fork())

    def reorder(self, idx):
        self.cache.reorder(idx)

    def select(self, idx):
        self.cache.select(idx)

    def repeat(self, r):
        self.cache.repeat(r)

    def occupancy(self):
        return self.cache.pool.num_used  # the pool this handle's make() created, shared by its forks

    def release(self):
        self.cache.release()


def build(geometry, batch, window, capacity, trace=None):
    g = geometry
    blocks = max(1, batch * -(-capacity // BLOCK_SIZE))  # room for the capacity; the pool doubles past it
    pool = BlockPool(g.n_layers, g.n_kv_heads, g.head_dim, block_size=BLOCK_SIZE, num_blocks=blocks)
    return PagedHandle(g, window, PagedKVCache(pool, batch))


TARGET = Target(
    name="pagedcache",
    title="pagedcache.PagedKVCache: block tables over a refcounted pool of 4-position blocks, copy-on-write forks",
    distribution="pagedcache",
    capabilities=frozenset(
        {"append", "read", "truncate", "fork", "reorder", "select", "repeat", "mask", "grow", "occupancy"}
    ),
    numerics=Numerics.exact(),
    refs=(
        "pagedcache/cache.py::PagedKVCache.append",
        "pagedcache/cache.py::PagedKVCache.truncate",
        "pagedcache/cache.py::PagedKVCache.fork",
        "pagedcache/cache.py::PagedKVCache.release",
    ),
    build=build,
    own=True,  # our own code: it gates
    occupancy=Occupancy(unit="blocks", block=BLOCK_SIZE, factor=1.0, slack=0),
    docs=(
        ("truncate", 'PagedKVCache.truncate: "Keep positions 0 .. n - 1 (ValueError outside 0 .. length)"'),
        ("fork", 'PagedKVCache.fork: "A copy-on-write fork: the same blocks, each count raised by one."'),
        ("occupancy", 'PagedKVCache.release: "every block it holds goes back to the pool"'),
    ),
)
