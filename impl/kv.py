"""The contiguous KV cache: per-layer K, pre-RoPE K and V rows, one pos array.

Layout (every layer, rows = cache entries in order; kv_dim = n_kv_heads * head_dim):
    k[l]      (len, kv_dim) float32, post-RoPE keys
    k_raw[l]  (len, kv_dim) float32, keys before rotation
    v[l]      (len, kv_dim) float32
    pos       (len,) int64, each entry's absolute RoPE position
Head h of a row occupies columns [h * head_dim, (h + 1) * head_dim).

Invariant: ``pos`` is 0..len-1. Eviction keeps it so by renumbering the
survivors and re-deriving their K with ONE rotation of ``k_raw`` at the new
index (never a rotation composed on the old K: that drifts ~1e-6 and can
flip a greedy token).

Storage grows by doubling; the public arrays are views of the first len
rows, so a row's bytes and strides never depend on the capacity.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from impl.cache import KVGeometry, KVStore, Window
from impl.errors import CacheError
from impl.rope import RopeTable, apply_rope


class KVCache(KVStore):
    """Contiguous cache for a model of ``geometry``; implements ``impl.cache.KVStore``.

    ``ropes``: one RoPE table per layer (shared, read-only), for eviction's
    re-rotation. ``capacity``: rows allocated up front; storage doubles on
    demand. Raises CacheError for a geometry whose K and V widths differ.
    """

    def __init__(self, geometry: KVGeometry, ropes: Sequence[RopeTable], capacity: int = 64) -> None:
        geometry.require_square("the contiguous cache")
        assert len(ropes) == geometry.n_layers
        self.geometry = geometry
        self.ropes = ropes  # one table per layer (shared, read-only)
        self._cap = max(1, capacity)
        kv = geometry.kv_dim
        self._k = [np.zeros((self._cap, kv), np.float32) for _ in range(geometry.n_layers)]
        self._k_raw = [np.zeros((self._cap, kv), np.float32) for _ in range(geometry.n_layers)]
        self._v = [np.zeros((self._cap, kv), np.float32) for _ in range(geometry.n_layers)]
        self._pos = np.zeros(self._cap, np.int64)
        self._n = 0

    @classmethod
    def build(cls, geometry: KVGeometry, ropes: Sequence[RopeTable], window: list[Window], capacity=64) -> KVCache:
        """``make_cache("contiguous", ...)``: ``capacity=`` rows to start with (a window is a mask attention reads)."""
        return cls(geometry, ropes, capacity)

    # ---- read side -------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @property
    def k(self) -> list[np.ndarray]:
        """Post-RoPE keys per layer, each (len, kv_dim) (views; do not write)."""
        return [a[: self._n] for a in self._k]

    @property
    def k_raw(self) -> list[np.ndarray]:
        """Pre-RoPE keys per layer, each (len, kv_dim)."""
        return [a[: self._n] for a in self._k_raw]

    @property
    def v(self) -> list[np.ndarray]:
        """Values per layer, each (len, kv_dim)."""
        return [a[: self._n] for a in self._v]

    @property
    def pos(self) -> np.ndarray:
        """(len,) int64 absolute positions."""
        return self._pos[: self._n]

    @property
    def nbytes(self) -> int:
        """Bytes of K, k_raw, V and pos held for the entries in use (not the spare capacity)."""
        g = self.geometry
        return self._n * (3 * g.n_layers * g.kv_dim * 4 + 8)

    def view(self, layer: int, hi: int) -> tuple[np.ndarray, np.ndarray, int]:
        """K and V rows [0, hi) of ``layer``: two (hi, kv_dim) views, and base 0."""
        return self._k[layer][:hi], self._v[layer][:hi], 0

    # ---- write side (used by the forward pass) ---------------------------
    def reserve(self, t: int) -> np.ndarray:
        """Open ``t`` new entries at the end; returns their positions (t,) int64.

        The entries count as present for attention once written layer by
        layer with ``write``; ``truncate`` removes them if the forward fails.
        """
        need = self._n + t
        if need > self._cap:
            self._grow(need)
        start = self._n
        new_pos = np.arange(start, need, dtype=np.int64)
        self._pos[start:need] = new_pos
        self._n = need
        return new_pos

    def write(self, layer: int, start: int, k_raw: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store rows [start, start + T) of one layer; inputs are (T, kv_dim)."""
        t = k.shape[0]
        self._k_raw[layer][start : start + t] = k_raw
        self._k[layer][start : start + t] = k
        self._v[layer][start : start + t] = v

    def _grow(self, need: int) -> None:
        cap = self._cap
        while cap < need:
            cap *= 2
        for arrs in (self._k, self._k_raw, self._v):
            for i, a in enumerate(arrs):
                b = np.zeros((cap, self.geometry.kv_dim), np.float32)
                b[: self._n] = a[: self._n]
                arrs[i] = b
        p = np.zeros(cap, np.int64)
        p[: self._n] = self._pos[: self._n]
        self._pos, self._cap = p, cap

    # ---- verbs -------------------------------------------------------------
    def evict(self, start: int, n: int) -> int:
        """Remove entries [start, start + n) from every layer and from ``pos``.

        Survivors after the span move down and are renumbered 0..len-1; each
        moved survivor's K is re-derived by one rotation of its ``k_raw`` at
        its new position. Returns the number removed (n clipped to the end).
        Raises CacheError (a ValueError) for negative arguments or a start
        past the end; n == 0 is a no-op.
        """
        if (
            isinstance(start, bool)
            or isinstance(n, bool)
            or not isinstance(start, (int, np.integer))
            or not isinstance(n, (int, np.integer))
        ):
            raise CacheError(f"evict(start={start!r}, n={n!r}): both must be ints")
        if start < 0 or n < 0:
            raise CacheError(f"evict(start={start}, n={n}): arguments must be >= 0 (cache holds {self._n} positions)")
        if start > self._n or (start == self._n and n > 0):
            raise CacheError(
                f"evict(start={start}, n={n}): start is past the end; the cache holds "
                f"{self._n} positions, so start must be < {self._n}"
            )
        n = min(n, self._n - start)
        if n == 0:
            return 0
        end, total = start + n, self._n
        keep = total - end  # survivors that move
        new_pos = np.arange(start, start + keep, dtype=np.int64)
        g = self.geometry
        for layer in range(g.n_layers):
            for a in (self._k_raw[layer], self._v[layer]):
                a[start : start + keep] = a[end:total].copy()
            if keep:
                raw = self._k_raw[layer][start : start + keep]  # (keep, kv_dim)
                cos, sin = self.ropes[layer].rows(new_pos)
                k = apply_rope(raw.reshape(keep, g.n_kv_heads, g.head_dim), cos, sin)  # (keep, Hkv, D)
                self._k[layer][start : start + keep] = k.reshape(keep, g.kv_dim)
        self._pos[start : start + keep] = new_pos
        self._n = total - n
        return n

    def truncate(self, n: int) -> None:
        """Keep entries [0, n): a rewind, or undoing a failed forward.

        Raises CacheError unless n is an int in 0..len (a bool or a float is not an int here).
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= self._n:
            raise CacheError(f"truncate(n={n!r}): n must be an int in 0..{self._n} (the cache length)")
        n = int(n)
        self._n = n

    def clone(self) -> KVCache:
        """An independent deep copy: no array is shared with the source."""
        c = KVCache.__new__(KVCache)
        c.geometry, c.ropes = self.geometry, self.ropes  # immutable

        c._cap, c._n = self._cap, self._n
        c._k = [a.copy() for a in self._k]
        c._k_raw = [a.copy() for a in self._k_raw]
        c._v = [a.copy() for a in self._v]
        c._pos = self._pos.copy()
        return c
