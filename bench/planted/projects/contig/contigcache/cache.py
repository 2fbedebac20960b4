"""A contiguous KV cache: one buffer per K and V for every layer, batch element and head, grown by doubling."""

import numpy as np


class ContigKVCache:
    """Keys and values shaped (layers, batch, heads, positions, head_dim), float32.

    Every batch element has the same length. The buffers start with room for
    ``capacity`` positions and double when an append would overflow them.
    ``keys()`` and ``values()`` return copies: the caller may keep them.
    """

    def __init__(self, n_layers, batch, n_heads, head_dim, capacity=16):
        if capacity < 1:
            raise ValueError(f"capacity={capacity}: must be >= 1")
        shape = (n_layers, batch, n_heads, capacity, head_dim)
        self._k = np.zeros(shape, np.float32)
        self._v = np.zeros(shape, np.float32)
        self.length = 0

    @property
    def batch(self):
        return self._k.shape[1]

    @property
    def capacity(self):
        return self._k.shape[3]

    def __len__(self):
        return self.length

    def append(self, k, v):
        """Store k and v, each (layers, batch, heads, t, head_dim), at positions length .. length + t - 1."""
        t = k.shape[3]
        end = self.length + t
        if end > self.capacity:
            self._grow(end)
        self._k[:, :, :, self.length : end] = k
        self._v[:, :, :, self.length : end] = v
        self.length = end

    def keys(self):
        """K of positions 0 .. length - 1, a copy."""
        return self._k[:, :, :, : self.length].copy()

    def values(self):
        """V of positions 0 .. length - 1, a copy."""
        return self._v[:, :, :, : self.length].copy()

    def truncate(self, n):
        """Keep positions 0 .. n - 1; refuse an n outside 0 .. length with ValueError."""
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate({n}): n must be in 0..{self.length}")
        self.length = n

    def fork(self):
        """An independent copy: nothing is shared with this cache."""
        other = ContigKVCache.__new__(ContigKVCache)
        other._k = self._k.copy()
        other._v = self._v.copy()
        other.length = self.length
        return other

    def reorder(self, idx):
        """Batch element i becomes old element idx[i] (beam search: indices may repeat)."""
        idx = self._check(idx, exact=True)
        self._k = self._k[:, idx]
        self._v = self._v[:, idx]

    def select(self, idx):
        """Keep batch elements idx, in that order."""
        idx = self._check(idx, exact=False)
        self._k = self._k[:, idx]
        self._v = self._v[:, idx]

    def repeat(self, r):
        """Each batch element r times in a row."""
        if r < 1:
            raise ValueError(f"repeat({r}): r must be >= 1")
        self._k = np.repeat(self._k, r, axis=1)
        self._v = np.repeat(self._v, r, axis=1)

    def _check(self, idx, exact):
        idx = [int(i) for i in idx]
        if not idx or any(not 0 <= i < self.batch for i in idx) or (exact and len(idx) != self.batch):
            raise ValueError(f"batch indices {idx} do not fit a batch of {self.batch}")
        return idx

    def _grow(self, need):
        size = max(need, 2 * self.capacity)
        shape = self._k.shape[:3] + (size,) + self._k.shape[4:]
        k = np.zeros(shape, np.float32)
        v = np.zeros(shape, np.float32)
        k[:, :, :, : self.length] = self._k[:, :, :, : self.length]
        v[:, :, :, : self.length] = self._v[:, :, :, : self.length]
        self._k, self._v = k, v
