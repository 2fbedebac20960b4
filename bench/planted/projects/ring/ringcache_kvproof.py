"""ringcache's SlidingWindowCache as a kvproof target: one batch-native ring cache behind kvproof's verbs."""

import numpy as np
from ringcache import SlidingWindowCache

from harness.targets.protocol import Numerics, Rows, Target, Visible, check_rows


class RingHandle:
    """One SlidingWindowCache holding every batch element; rows go in and out as (L, B, H, T, D) float32."""

    trace = None  # kvproof records the verbs themselves: a failure's reproduction replays them

    def __init__(self, geometry, window, cache):
        self.target, self.geometry, self.window, self.cache = TARGET, geometry, window, cache

    @property
    def batch(self):
        return self.cache.batch

    def __len__(self):
        return len(self.cache)

    def mask_sizes(self, query_len):
        return self.cache.mask_sizes(query_len)

    def append(self, k, v):
        check_rows(self.geometry, self.batch, k, v)
        length, offset = self.mask_sizes(k.shape[3])
        kk, vv = self.cache.append(k, v)  # new arrays (documented): passed through
        return Visible(kk, vv, offset + np.arange(kk.shape[3], dtype=np.int64), length, offset)

    def read(self):
        k, v, first = self.cache.held()
        return Rows(k, v, np.arange(first, len(self), dtype=np.int64))

    def truncate(self, n):
        self.cache.truncate(n)

    def fork(self):
        return RingHandle(self.geometry, self.window, self.cache.fork())

    def reorder(self, idx):
        self.cache.reorder(idx)

    def select(self, idx):
        self.cache.select(idx)


def build(geometry, batch, window, capacity, trace=None):
    g = geometry
    # no window: one wider than the capacity, so no position ever leaves (as transformers' sliding layers are built)
    w = window if window is not None else capacity + 1
    return RingHandle(g, window, SlidingWindowCache(g.n_layers, batch, g.n_kv_heads, g.head_dim, w))


TARGET = Target(
    name="ringcache",
    title="ringcache.SlidingWindowCache: rings of window + 2 slots, transformers-style mask sizes",
    distribution="ringcache",
    capabilities=frozenset({"append", "read", "truncate", "fork", "reorder", "select", "window", "mask"}),
    numerics=Numerics.exact(),
    refs=(
        "ringcache/cache.py::SlidingWindowCache.append",
        "ringcache/cache.py::SlidingWindowCache.mask_sizes",
        "ringcache/cache.py::SlidingWindowCache.truncate",
    ),
    build=build,
    own=True,  # our own code: it gates
    windowed=True,
    docs=(
        ("window", 'SlidingWindowCache: "A query at position p attends to positions p - window + 1 .. p."'),
        (
            "mask",
            'SlidingWindowCache.mask_sizes: "the keys it returns start at kv_offset = max(0, length - window + 1)"',
        ),
        ("truncate", 'SlidingWindowCache.truncate: "Keep positions 0 .. n - 1"'),
        ("fork", 'SlidingWindowCache.fork: "An independent copy of the rings."'),
    ),
)
