"""An int8 KV cache: each (layer, batch element, head, position) row of K and V is stored as int8 with its own scale.

The scheme: scale = absmax / 127 of the row (1 for an all-zero row), q = rint(x / scale) in -127..127,
read back as q * scale. Every element reads back within scale / 2 of what was appended (plus float32
rounding). The buffers start at ``capacity`` positions and double; a fork shares them until either side
writes (copy-on-write).
"""

import numpy as np


def quantize(x):
    """x (..., D) float32 -> (q (..., D) int8, scale (...) float32), one scale per row."""
    absmax = np.abs(x).max(axis=-1)
    scale = np.where(absmax > 0, absmax / np.float32(127), np.float32(1)).astype(np.float32)
    q = np.clip(np.rint(x / scale[..., None]), -127, 127).astype(np.int8)
    return q, scale


def dequantize(q, scale):
    return q.astype(np.float32) * scale[..., None]


class _Buffers:
    """The int8 rows and their scales; ``users`` counts the caches sharing them."""

    def __init__(self, qk, qv, sk, sv):
        self.qk, self.qv, self.sk, self.sv = qk, qv, sk, sv
        self.users = 1

    def copy(self):
        return _Buffers(self.qk.copy(), self.qv.copy(), self.sk.copy(), self.sv.copy())


class Int8KVCache:
    """K and V of a batch, (layers, batch, heads, positions, head_dim), stored as int8 rows with float32 scales."""

    def __init__(self, n_layers, batch, n_heads, head_dim, capacity=16):
        if capacity < 1:
            raise ValueError(f"capacity={capacity}: must be >= 1")
        shape = (n_layers, batch, n_heads, capacity, head_dim)
        q = np.zeros(shape, np.int8)
        s = np.zeros(shape[:-1], np.float32)
        self._buf = _Buffers(q, q.copy(), s, s.copy())
        self.length = 0
        self._deq = None  # (k, v): rows 0 .. m - 1 dequantized by an earlier read, reused by the next ones

    @property
    def batch(self):
        return self._buf.qk.shape[1]

    @property
    def capacity(self):
        return self._buf.qk.shape[3]

    def __len__(self):
        return self.length

    def append(self, k, v):
        """Quantize k and v, each (layers, batch, heads, t, head_dim), into positions length .. length + t - 1."""
        t = k.shape[3]
        end = self.length + t
        if end > self.capacity:
            self._grow(end)
        else:
            self._own()
        qk, sk = quantize(np.asarray(k, np.float32))
        qv, sv = quantize(np.asarray(v, np.float32))
        b = self._buf
        b.qk[:, :, :, self.length : end] = qk
        b.sk[:, :, :, self.length : end] = sk
        b.qv[:, :, :, self.length : end] = qv
        b.sv[:, :, :, self.length : end] = sv
        self.length = end

    def keys_values(self):
        """(k, v): positions 0 .. length - 1 dequantized, float32, in new arrays."""
        m = 0 if self._deq is None else self._deq[0].shape[3]
        if self._deq is None or m < self.length:
            b = self._buf
            k_new = dequantize(b.qk[:, :, :, m : self.length], b.sk[:, :, :, m : self.length])
            v_new = dequantize(b.qv[:, :, :, m : self.length], b.sv[:, :, :, m : self.length])
            if self._deq is None:
                self._deq = (k_new, v_new)
            else:
                self._deq = (
                    np.concatenate([self._deq[0], k_new], axis=3),
                    np.concatenate([self._deq[1], v_new], axis=3),
                )
        k, v = self._deq
        return k[:, :, :, : self.length].copy(), v[:, :, :, : self.length].copy()

    def truncate(self, n):
        """Keep positions 0 .. n - 1; refuse an n outside 0 .. length with ValueError."""
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate({n}): n must be in 0..{self.length}")
        self.length = n
        if self._deq is not None:
            self._deq = (self._deq[0][:, :, :, :n], self._deq[1][:, :, :, :n])

    def fork(self):
        """A fork in O(1): both share the buffers until either side writes (copy-on-write)."""
        other = Int8KVCache.__new__(Int8KVCache)
        self._buf.users += 1
        other._buf = self._buf
        other.length = self.length
        other._deq = self._deq  # never written in place: safe to share
        return other

    def reorder(self, idx):
        """Batch element i becomes old element idx[i] (beam search: indices may repeat)."""
        self._take(self._check(idx, exact=True))

    def select(self, idx):
        """Keep batch elements idx, in that order."""
        self._take(self._check(idx, exact=False))

    def _take(self, idx):
        b = self._buf
        self._buf = _Buffers(b.qk[:, idx], b.qv[:, idx], b.sk[:, idx], b.sv[:, idx])
        b.users -= 1
        self._deq = None

    def _own(self):
        """Copy the buffers first if another cache shares them (copy-on-write)."""
        if self._buf.users > 1:
            self._buf.users -= 1
            self._buf = self._buf.copy()

    def _grow(self, need):
        size = max(need, 2 * self.capacity)
        old, n = self._buf, self.length
        shape = old.qk.shape[:3] + (size,) + old.qk.shape[4:]
        q = np.zeros(shape, np.int8)
        s = np.zeros(shape[:-1], np.float32)
        new = _Buffers(q, q.copy(), s, s.copy())
        new.qk[:, :, :, :n] = old.qk[:, :, :, :n]
        new.qv[:, :, :, :n] = old.qv[:, :, :, :n]
        new.sk[:, :, :, :n] = old.sk[:, :, :, :n]
        new.sv[:, :, :, :n] = old.sv[:, :, :, :n]
        old.users -= 1
        self._buf = new

    def _check(self, idx, exact):
        idx = [int(i) for i in idx]
        if not idx or any(not 0 <= i < self.batch for i in idx) or (exact and len(idx) != self.batch):
            raise ValueError(f"batch indices {idx} do not fit a batch of {self.batch}")
        return idx
