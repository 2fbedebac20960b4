"""tieredcache's TieredKVCache as a kvproof target: a batch-native two-tier cache over one PageStore."""

import numpy as np
from tieredcache import PageStore, TieredKVCache

from harness.targets.protocol import Numerics, Occupancy, Rows, Target, Visible, check_rows

PAGE = 4


class TieredHandle:
    """One TieredKVCache holding every batch element; rows go in and out as (L, B, H, T, D) float32."""

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
        k, v = self.cache.read()  # new arrays (documented): passed through
        return Rows(k, v, np.arange(len(self), dtype=np.int64))

    def truncate(self, n):
        self.cache.truncate(n)

    def fork(self):
        return TieredHandle(self.geometry, self.window, self.cache.fork())

    def reorder(self, idx):
        self.cache.reorder(idx)

    def select(self, idx):
        self.cache.select(idx)

    def repeat(self, r):
        self.cache.repeat(r)

    def occupancy(self):
        # the pages in use in the store this handle's make() created (shared by its forks); each cache's hot
        # tier is its own fixed scratch of one page per batch element and is not counted
        return self.cache.store.in_use

    def release(self):
        self.cache.release()


def build(geometry, batch, window, capacity, trace=None):
    g = geometry  # the capacity plays no part: pages are made as the hot tier spills
    return TieredHandle(g, window, TieredKVCache(PageStore(PAGE), g.n_layers, batch, g.n_kv_heads, g.head_dim))


TARGET = Target(
    name="tieredcache",
    title="tieredcache.TieredKVCache: a hot tier per cache over shared, refcounted, immutable 4-position pages",
    distribution="tieredcache",
    capabilities=frozenset(
        {"append", "read", "truncate", "fork", "reorder", "select", "repeat", "mask", "grow", "occupancy"}
    ),
    numerics=Numerics.exact(),
    refs=(
        "tieredcache/cache.py::TieredKVCache.append",
        "tieredcache/cache.py::TieredKVCache.truncate",
        "tieredcache/cache.py::TieredKVCache.fork",
        "tieredcache/cache.py::PageStore.put",
    ),
    build=build,
    own=True,  # our own code: it gates
    occupancy=Occupancy(unit="pages", block=PAGE, factor=1.0, slack=0),
    docs=(
        ("truncate", 'TieredKVCache.truncate: "Keep positions 0 .. n - 1 (ValueError outside 0 .. length)"'),
        ("fork", 'TieredKVCache.fork: "An independent cache sharing this one\'s pages (counts raised)"'),
        ("occupancy", 'TieredKVCache.release: "its pages are given back (recycled once no fork holds them)"'),
    ),
)
