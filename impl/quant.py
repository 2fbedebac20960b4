"""Symmetric per-vector integer quantisation: the int8 ring cache's arithmetic.

One vector (the last axis of ``x``) shares one scale::

    qmax  = 2**(bits-1) - 1
    scale = absmax / qmax   if absmax > 0   else 1      (float32)
    q     = clip(rint(x / scale), -qmax - 1, qmax)      (integers)
    out   = q * scale                                   (float32)

``fake_quant`` is the round trip (quantise, then dequantise, in float32);
``quantize`` returns the integers and scales the int8 cache stores, and
``dequantize`` multiplies them back. Both paths share ``_scale`` and the same
float32 operations, so ``dequantize(*quantize(x))`` is bit-identical to
``fake_quant(x, 8)``: an int8 cache computes exactly on the fake-quantised
K/V (card RING-T3), not merely close to it.

NOTE: an all-zero vector keeps scale 1 (the guard is ``absmax > 0``, not a
tolerance), so it stays zero and never divides by zero. ``rint`` rounds
half to even, as torch.round does.
"""

from __future__ import annotations

import numpy as np

from impl.errors import ImplError


class QuantError(ImplError, ValueError):
    """A quantisation request that cannot be honoured (bad bit width)."""


def _qmax(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 2 <= bits <= 8:
        raise QuantError(f"bits={bits!r} is not allowed: use an int in 2..8 (values are stored as int8)")
    return (1 << (int(bits) - 1)) - 1


_TINY = np.finfo(np.float32).smallest_subnormal  # 2**-149


def _scale(x: np.ndarray, qmax: int) -> np.ndarray:
    """(..., D) float32 -> (..., 1) float32 scale per vector: absmax / qmax, or 1 for an all-zero vector.

    A subnormal vector whose absmax / qmax underflows to 0 gets the least
    positive float32 instead (a zero scale would divide by zero: NaN).
    """
    absmax = np.max(np.abs(x), axis=-1, keepdims=True)  # (..., 1)
    scale = (absmax / np.float32(qmax)).astype(np.float32)
    return np.where(absmax > 0, np.maximum(scale, np.float32(_TINY)), np.float32(1.0)).astype(np.float32)


def quantize(x: np.ndarray, bits: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Quantise each vector along the last axis.

    x: (..., D) float32 (a float64 input is cast to float32 first).
    Returns q (..., D) int8 in [-qmax-1, qmax] and scale (...,) float32.
    Raises QuantError for bits outside 2..8.
    """
    qmax = _qmax(bits)
    x = np.asarray(x, dtype=np.float32)
    scale = _scale(x, qmax)  # (..., 1)
    q = np.clip(np.rint(x / scale), -qmax - 1, qmax)  # float32, integer-valued
    return q.astype(np.int8), scale[..., 0]


def dequantize(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """q (..., D) int8 and scale (...,) float32 -> (..., D) float32 = q * scale."""
    return q.astype(np.float32) * scale[..., None].astype(np.float32, copy=False)


def fake_quant(x: np.ndarray, bits: int = 8) -> np.ndarray:
    """Quantise-then-dequantise each vector along the last axis; (..., D) float32 out.

    The reference the int8 cache must reproduce exactly: the float32 value of
    the integer ``rint(x / scale)`` (clipped) times ``scale``.
    """
    qmax = _qmax(bits)
    x = np.asarray(x, dtype=np.float32)
    scale = _scale(x, qmax)
    return np.clip(np.rint(x / scale), -qmax - 1, qmax) * scale
