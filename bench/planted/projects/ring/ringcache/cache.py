"""A sliding-window KV cache: a ring of ``window + extra`` slots per layer, batch element and head.

A query at position p attends to positions p - window + 1 .. p. Between
appends the ring keeps at least the last ``window - 1`` positions (the ones the
next query still sees); position p lives in slot p % slots.
"""

import numpy as np


class SlidingWindowCache:
    """Keys and values of a batch in rings shaped (layers, batch, heads, slots, head_dim), float32."""

    def __init__(self, n_layers, batch, n_heads, head_dim, window, extra=2):
        if window < 1:
            raise ValueError(f"window={window}: must be >= 1")
        self.window = window
        self.slots = window + extra
        shape = (n_layers, batch, n_heads, self.slots, head_dim)
        self._k = np.zeros(shape, np.float32)
        self._v = np.zeros(shape, np.float32)
        self.length = 0  # positions appended so far (minus those truncated)
        self.first = 0  # the lowest position still held

    @property
    def batch(self):
        return self._k.shape[1]

    def __len__(self):
        return self.length

    def mask_sizes(self, query_len):
        """(kv_length, kv_offset) for the next append of query_len positions, as transformers' sliding layers
        declare them: the keys it returns start at kv_offset = max(0, length - window + 1)."""
        offset = max(0, self.length - self.window + 1)
        return self.length + query_len - offset, offset

    def append(self, k, v):
        """Store k and v, each (layers, batch, heads, t, head_dim); return (k, v) for these t queries: the rows of
        positions kv_offset .. length + t - 1 (what mask_sizes(t) declared), in new arrays."""
        t = k.shape[3]
        _, lo = self.mask_sizes(t)
        if lo == self.length:  # nothing held is visible (the first append, or a window of 1): the new rows alone
            out_k, out_v = k.copy(), v.copy()
        else:
            past_k, past_v = self._gather(lo, self.length)
            out_k = np.concatenate([past_k, k], axis=3)
            out_v = np.concatenate([past_v, v], axis=3)
        keep = min(t, self.slots)  # a chunk longer than the ring leaves only its last rows
        slot = np.arange(self.length + t - keep, self.length + t) % self.slots
        self._k[:, :, :, slot] = k[:, :, :, t - keep :]
        self._v[:, :, :, slot] = v[:, :, :, t - keep :]
        self.length += t
        self.first = max(self.first, self.length - self.slots)
        return out_k, out_v

    def held(self):
        """(k, v, first): the rows of positions first .. length - 1 the ring holds, in new arrays."""
        k, v = self._gather(self.first, self.length)
        return k, v, self.first

    def _gather(self, lo, hi):
        slot = np.arange(lo, hi) % self.slots
        return self._k[:, :, :, slot], self._v[:, :, :, slot]  # fancy indexing: copies

    def truncate(self, n):
        """Keep positions 0 .. n - 1. ValueError for an n outside 0 .. length, or one whose window (positions
        n - window + 1 .. n - 1) the ring no longer holds."""
        if not 0 <= n <= self.length or max(0, n - self.window + 1) < self.first:
            raise ValueError(f"truncate({n}): n must be in 0..{self.length} with the window before it held")
        self.length = n

    def fork(self):
        """An independent copy of the rings."""
        other = SlidingWindowCache.__new__(SlidingWindowCache)
        other.__dict__.update(self.__dict__)
        other._k = self._k.copy()
        other._v = self._v.copy()
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

    def _check(self, idx, exact):
        idx = [int(i) for i in idx]
        if not idx or any(not 0 <= i < self.batch for i in idx) or (exact and len(idx) != self.batch):
            raise ValueError(f"batch indices {idx} do not fit a batch of {self.batch}")
        return idx
