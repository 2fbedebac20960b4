"""contigcache's ContigKVCache as a kvproof target: one batch-native cache behind kvproof's verbs."""

import numpy as np
from contigcache import ContigKVCache

from harness.targets.protocol import Numerics, Rows, Target, Visible, check_rows


class ContigHandle:
    """One ContigKVCache holding every batch element; rows go in and out as (L, B, H, T, D) float32."""

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
        # keys() and values() are documented to return copies: passed through as they are
        return Rows(self.cache.keys(), self.cache.values(), np.arange(len(self), dtype=np.int64))

    def truncate(self, n):
        self.cache.truncate(n)

    def fork(self):
        return ContigHandle(self.geometry, self.window, self.cache.fork())

    def reorder(self, idx):
        self.cache.reorder(idx)

    def select(self, idx):
        self.cache.select(idx)

    def repeat(self, r):
        self.cache.repeat(r)


def build(geometry, batch, window, capacity, trace=None):
    g = geometry
    return ContigHandle(g, window, ContigKVCache(g.n_layers, batch, g.n_kv_heads, g.head_dim, capacity=capacity))


TARGET = Target(
    name="contigcache",
    title="contigcache.ContigKVCache: contiguous (L, B, H, T, D) buffers that double when full",
    distribution="contigcache",
    capabilities=frozenset({"append", "read", "truncate", "fork", "reorder", "select", "repeat", "mask", "grow"}),
    numerics=Numerics.exact(),
    refs=(
        "contigcache/cache.py::ContigKVCache.append",
        "contigcache/cache.py::ContigKVCache.truncate",
        "contigcache/cache.py::ContigKVCache.fork",
    ),
    build=build,
    own=True,  # our own code: it gates
    docs=(
        ("truncate", 'ContigKVCache.truncate: "Keep positions 0 .. n - 1; refuse an n outside 0 .. length"'),
        ("fork", 'ContigKVCache.fork: "An independent copy: nothing is shared with this cache."'),
        ("reorder", 'ContigKVCache.reorder: "Batch element i becomes old element idx[i]"'),
    ),
)
