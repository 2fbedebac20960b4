"""Half-split rotary position embedding (rotate_half, as in Hugging Face Llama).

Angles are computed in float64 and cos/sin cast to float32 once, into a
table indexed by absolute position. Every rotation in impl goes through
``apply_rope`` with rows of that table, so the K of a position is the same
bits whether it was written by a prefill, a decode step or re-derived after
eviction.
"""

from __future__ import annotations

import numpy as np

from impl import kernels


class RopeTable:
    """cos/sin for positions [0, max_pos) of one RoPE base.

    Layout: ``cos``, ``sin``: (max_pos, head_dim) float32, the two halves of
    each row equal (the half-split convention).
    """

    def __init__(self, theta: float, head_dim: int, max_pos: int) -> None:
        self.theta, self.head_dim, self.max_pos = float(theta), head_dim, max_pos
        inv_freq = 1.0 / (self.theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
        angles = np.arange(max_pos, dtype=np.float64)[:, None] * inv_freq[None, :]  # (P, D/2)
        angles = np.concatenate([angles, angles], axis=1)  # (P, D)
        self.cos = np.cos(angles).astype(np.float32)
        self.sin = np.sin(angles).astype(np.float32)

    def rows(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin rows for integer positions ``pos`` (T,) -> two (T, D) arrays."""
        pos = self._checked(pos)
        return self.cos[pos], self.sin[pos]

    def _checked(self, pos) -> np.ndarray:
        pos = np.asarray(pos, dtype=np.int64) if np.size(pos) == 0 else np.asarray(pos)  # [] is float otherwise
        if pos.size and (pos.min() < 0 or pos.max() >= self.max_pos):
            raise ValueError(
                f"RoPE position out of range: pos={int(pos.min())}..{int(pos.max())}, "
                f"allowed 0..{self.max_pos - 1} (max_pos of the model's RoPE table)"
            )
        return pos

    def apply(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """``apply_rope(x, *self.rows(pos))`` for x (T, H, D): the same bits, in one native pass when
        impl.kernels' C kernel is loaded (no (T, D) row copies, no temporaries)."""

        k = kernels.load()
        if (
            k is not None
            and x.ndim == 3
            and x.dtype == np.float32
            and x.strides[2] == 4
            and x.strides[1] == 4 * x.shape[2]
            and x.shape[2] == self.head_dim
            and np.size(pos) == x.shape[0]
        ):
            return k.rope(x, self.cos, self.sin, self._checked(pos))
        return apply_rope(x, *self.rows(pos))


def rotate_half(x: np.ndarray) -> np.ndarray:
    """(..., D) -> (..., D): [-x2, x1] for halves x1, x2."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate ``x`` (T, H, D) by per-position ``cos``/``sin`` (T, D); float32 out.

    Elementwise, so each row's result depends only on that row and its angle.
    """
    c, s = cos[:, None, :], sin[:, None, :]  # (T, 1, D) broadcast over heads
    return x * c + rotate_half(x) * s
