"""int8cache's Int8KVCache as a kvproof target: one batch-native int8 cache behind kvproof's verbs."""

import numpy as np
from int8cache import Int8KVCache

from harness.targets.protocol import Numerics, Rows, Target, Visible, check_rows


def int8_bound(calibration, rows):
    """|read - x| per element: half the scale of its row, plus float32 rounding (the scheme int8cache documents).

    scale = absmax / 127 of each (layer, batch element, head, position) row and q = rint(x / scale): rint is
    off by at most 1/2, so |q * scale - x| <= scale / 2; x / scale and q * scale each round once in float32
    (relative 2**-24), and scale itself once, hence scale / 2 * (1 + 2**-15) + 2**-23 * |x|. Rows are
    quantized each on its own, so the first chunk (``calibration``) plays no part.
    """
    x = np.abs(rows.astype(np.float64))
    scale = x.max(axis=-1, keepdims=True) / 127.0
    return scale / 2 * (1 + 2.0**-15) + 2.0**-23 * x


class Int8Handle:
    """One Int8KVCache holding every batch element; rows go in and out as (L, B, H, T, D) float32."""

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
        rows = self.read()  # attention gets every position held, dequantized
        return Visible(rows.k, rows.v, rows.positions, length, offset)

    def read(self):
        k, v = self.cache.keys_values()  # new arrays (documented): passed through
        return Rows(k, v, np.arange(len(self), dtype=np.int64))

    def truncate(self, n):
        self.cache.truncate(n)

    def fork(self):
        return Int8Handle(self.geometry, self.window, self.cache.fork())

    def reorder(self, idx):
        self.cache.reorder(idx)

    def select(self, idx):
        self.cache.select(idx)


def build(geometry, batch, window, capacity, trace=None):
    g = geometry
    return Int8Handle(g, window, Int8KVCache(g.n_layers, batch, g.n_kv_heads, g.head_dim, capacity=capacity))


TARGET = Target(
    name="int8cache",
    title="int8cache.Int8KVCache: int8 rows with a per-row absmax scale, copy-on-write forks",
    distribution="int8cache",
    capabilities=frozenset({"append", "read", "truncate", "fork", "reorder", "select", "mask", "quantized", "grow"}),
    numerics=Numerics.lossy(
        int8_bound,
        "per (layer, batch element, head, position) row: scale = absmax / 127, q = rint(x / scale), read back as "
        "q * scale; |read - x| <= scale / 2 plus float32 rounding (int8_bound)",
    ),
    refs=(
        "int8cache/cache.py::quantize",
        "int8cache/cache.py::dequantize",
        "int8cache/cache.py::Int8KVCache.append",
        "int8cache/cache.py::Int8KVCache.keys_values",
    ),
    build=build,
    own=True,  # our own code: it gates
    docs=(
        ("quantized", 'int8cache: "Every element reads back within scale / 2 of what was appended"'),
        ("truncate", 'Int8KVCache.truncate: "Keep positions 0 .. n - 1; refuse an n outside 0 .. length"'),
        ("fork", 'Int8KVCache.fork: "both share the buffers until either side writes (copy-on-write)"'),
    ),
)
