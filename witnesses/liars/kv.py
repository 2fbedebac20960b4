"""Liars for the contiguous KV cache (cards KV-T1..KV-T4).

Each is a plausible wrong version of one impl function: the kind of slip a
real cache makes. A card that lists one must have a witness that fails
under it.
"""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info

from impl import kernels
from witnesses.liars import liar

# ---- KV-T1: slots ---------------------------------------------------------------------


@liar(
    "kv.head_stride_mixup",
    target="impl.kv:KVCache.write",
    why="stores each row head-minor: (T, D, Hkv) instead of (T, Hkv, D), so head h's values are strided",
)
def write_head_minor(self, layer, start, k_raw, k, v):
    t = k.shape[0]

    g = self.geometry

    def mix(a):
        return np.ascontiguousarray(a).reshape(t, g.n_kv_heads, g.head_dim).transpose(0, 2, 1).reshape(t, -1)

    self._k_raw[layer][start : start + t] = mix(k_raw)
    self._k[layer][start : start + t] = mix(k)
    self._v[layer][start : start + t] = mix(v)


@liar(
    "kv.v_into_previous_layer",
    target="impl.kv:KVCache.write",
    why="an off-by-one layer index on the V store: layer l's V lands in layer l-1",
)
def write_v_one_layer_down(self, layer, start, k_raw, k, v):
    t = k.shape[0]
    self._k_raw[layer][start : start + t] = k_raw
    self._k[layer][start : start + t] = k
    self._v[max(layer - 1, 0)][start : start + t] = v


# ---- KV-T2: eviction --------------------------------------------------------------------


def _evict_with(self, start, n, rekey, renumber=True):
    """Shared body of the eviction liars: move rows down, let rekey() fix K, renumber pos (or not)."""
    n = min(n, len(self) - start)
    if n <= 0:
        return 0
    end, total = start + n, len(self)
    keep = total - end
    for layer in range(self.geometry.n_layers):
        for a in (self._k_raw[layer], self._v[layer], self._k[layer]):
            a[start : start + keep] = a[end:total].copy()
        rekey(layer, start, keep, n)
    self._pos[start : start + keep] = np.arange(start, start + keep) if renumber else self._pos[end:total].copy()
    self._n = total - n
    return n


@liar(
    "kv.composed_rotation",
    target="impl.kv:KVCache.evict",
    why="re-rotates the old post-RoPE K by the position shift instead of rotating k_raw once",
)
def evict_composed(self, start, n):
    def rekey(layer, start, keep, shift):
        if not keep:
            return
        tab = self.ropes[layer]
        d = self.geometry.head_dim
        inv = 1.0 / (tab.theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
        ang = -float(shift) * inv
        ang = np.concatenate([ang, ang])
        cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
        from impl.rope import apply_rope

        k = self._k[layer][start : start + keep].reshape(keep, self.geometry.n_kv_heads, d)
        self._k[layer][start : start + keep] = apply_rope(
            k, np.broadcast_to(cos, (keep, d)), np.broadcast_to(sin, (keep, d))
        ).reshape(keep, -1)

    return _evict_with(self, start, n, rekey)


@liar(
    "kv.no_rerotate",
    target="impl.kv:KVCache.evict",
    why="moves survivors down but keeps their K rotated for their old positions",
)
def evict_no_rerotate(self, start, n):
    return _evict_with(self, start, n, lambda *a: None)


@liar(
    "kv.no_renumber",
    target="impl.kv:KVCache.evict",
    why="drops the span but leaves survivors' pos (and K) at their old positions: a gap in pos",
)
def evict_no_renumber(self, start, n):
    return _evict_with(self, start, n, lambda *a: None, renumber=False)


@liar(
    "kv.evict_layer0_only",
    target="impl.kv:KVCache.evict",
    factory=True,
    why="evicts (and re-rotates) layer 0 correctly but leaves every other layer's rows in place",
)
def make_evict_layer0_only(original):
    def evict(self, start, n):
        saved = {name: [a.copy() for a in getattr(self, name)[1:]] for name in ("_k", "_k_raw", "_v")}
        removed = original(self, start, n)
        for name, arrays in saved.items():
            for i, a in enumerate(arrays, start=1):
                getattr(self, name)[i][: len(self)] = a[: len(self)]
        return removed

    return evict


# ---- KV-T3: windows and splicing -----------------------------------------------------------


@liar(
    "kv.window_from_index",
    target="impl.attention:window_lo",
    why="takes the window from row indices (hi - W) instead of the stored pos",
)
def window_lo_by_index(pos, hi, window):
    return 0 if window is None else max(0, hi - window)


@liar(
    "kv.window_off_by_one",
    target="impl.attention:window_lo",
    why="keeps one key too many: pos >= p - W instead of pos >= p - W + 1",
)
def window_lo_off_by_one(pos, hi, window):
    if window is None:
        return 0
    p = int(pos[hi - 1])
    return int(np.searchsorted(pos[:hi], p - window, side="left"))


@liar(
    "kv.clone_shares_arrays",
    target="impl.kv:KVCache.clone",
    why="a shallow clone: new lists, but the K/V/pos buffers are the source's",
)
def clone_shallow(self):
    import copy

    c = copy.copy(self)
    c._k, c._k_raw, c._v = list(self._k), list(self._k_raw), list(self._v)
    return c


# ---- KV-T4: chunking invariance -------------------------------------------------------------


@liar(
    "kv.one_row_matmul_decode",
    target="impl.linear:Linear.__call__",
    why="a plain x @ W: a decode step takes numpy's one-row (gemv) path, a prefill the multi-row (gemm) path",
)
def linear_plain_matmul(self, x):
    # NOTE: through Linear.weight(), whatever layout the blocks have (16-column panels for the C kernel)
    x = np.ascontiguousarray(x, dtype=np.float32)
    return x @ self.weight().T


def _threads_in_force() -> int:
    """The thread count impl's products run on now: the kernel's default (threads=0), or BLAS's."""
    kern = kernels.load()
    if kern is not None:
        return kern.default_threads()
    return max((i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"), default=1)


@liar(
    "kv.threaded_rows_gemm",
    target="impl.linear:Linear.__call__",
    factory=True,
    why="a parallel prefill: with more than one thread the rows are split into one chunk per thread and each "
    "chunk goes to one BLAS matmul, so a row's bits depend on the thread count (and on its chunk)",
)
def linear_threaded_rows_gemm(original):
    def call(self, x):
        threads = _threads_in_force()
        if threads <= 1 or x.shape[0] < 2:
            return original(self, x)
        w = self.weight()  # (out, in)
        chunks = np.array_split(np.ascontiguousarray(x, dtype=np.float32), threads)
        return np.concatenate([c @ w.T for c in chunks if len(c)])

    return call


# ---- TGT-GENERATE: a model decoding with the cache ------------------------------------------


@liar(
    "kv.view_drops_first_position",
    target="impl.kv:KVCache.view",
    factory=True,
    why="a cache that drops a position: once it holds more than 3 rows, view starts at row 1 (base 1), as if the "
    "first position had been evicted, so every later query attends without it",
)
def make_view_dropping_first(original):
    def view(self, layer, hi):
        k, v, base = original(self, layer, hi)
        if hi > 3 and base == 0:
            return k[1:], v[1:], 1
        return k, v, base

    return view
