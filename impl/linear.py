"""Batch-invariant linear layers.

NOTE: the trap this module exists for. numpy sends a one-row matmul to
BLAS's matrix-vector kernel (gemv) and a multi-row one to the
matrix-matrix kernel (gemm); the two round differently (about 4e-5 on a
576x1536 weight). A decode step is one row, a prefill many, so a naive
forward gives a position different bits depending on how its tokens were
fed. Here every row, always, goes through the same gemv call: a stacked
product (T, 1, K) @ (K, C) runs one gemv per row, bit-identical to a lone
decode row. Measured: gemv results also depend on the output width and
alignment of the weight block (a 3000-column block differed from the same
columns inside a 4096 block), so the blocking below is fixed per layer and
shared by every caller.

Weights are stored as column blocks (K, C) C-contiguous: gemv over a block
that fits in cache can be reused by all T rows of a prefill before the
next block is streamed (which is what keeps prefill of the 49152-wide head
affordable).
"""
from __future__ import annotations

import numpy as np

BLOCK_BYTES = 16 << 20  # one weight block; bench: 16 MiB balances decode (few calls) and prefill (cache reuse)


class Linear:
    """y = x @ W.T for a weight ``W`` given as (out, in), the torch layout.

    Stored as blocks of columns of W.T: ``blocks[i]`` is (in, C_i) float32,
    C_i a multiple of 64 except possibly the last.
    """

    def __init__(self, weight_out_in: np.ndarray, block_bytes: int = BLOCK_BYTES) -> None:
        w = np.asarray(weight_out_in, dtype=np.float32)
        assert w.ndim == 2
        self.n_out, self.n_in = w.shape
        cols = max(64, (block_bytes // (4 * self.n_in)) // 64 * 64)
        wt = w.T  # (in, out) view
        self.blocks = [np.ascontiguousarray(wt[:, s : s + cols]) for s in range(0, self.n_out, cols)]
        self.offsets = [s for s in range(0, self.n_out, cols)]

    @classmethod
    def from_blocks(cls, blocks: list[np.ndarray]) -> "Linear":
        """Rebuild from ``blocks`` as returned by ``.blocks`` (e.g. memory-mapped)."""
        self = cls.__new__(cls)
        self.blocks = list(blocks)
        self.n_in = blocks[0].shape[0]
        self.offsets, s = [], 0
        for b in blocks:
            assert b.ndim == 2 and b.shape[0] == self.n_in and b.dtype == np.float32
            self.offsets.append(s)
            s += b.shape[1]
        self.n_out = s
        return self

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.blocks)

    def weight(self) -> np.ndarray:
        """The (out, in) weight back, for tests and export."""
        return np.concatenate(self.blocks, axis=1).T

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x (T, in) float32 -> (T, out) float32; row t depends only on x[t]."""
        t = x.shape[0]
        x3 = np.ascontiguousarray(x, dtype=np.float32).reshape(t, 1, self.n_in)  # (T, 1, in)
        out = np.empty((t, self.n_out), dtype=np.float32)
        for s, blk in zip(self.offsets, self.blocks):
            # (T, 1, in) @ (in, C) -> (T, 1, C): one gemv per row
            np.matmul(x3, blk, out=out[:, None, s : s + blk.shape[1]])
        return out
