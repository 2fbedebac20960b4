"""Causal depthwise convolution over a sequence, and its rolling tail for decode.

Definition (zero history before the first input)::

    y[t, c] = sum_{j=0}^{K-1} taps[j, c] * x[t - j * dilation, c]     (x[<0] = 0)

``causal_conv`` computes it for a whole sequence. ``ConvTail`` computes it
one position (or one chunk) at a time: it keeps the last
``(K - 1) * dilation`` inputs (the *reach*), which is everything a later
output can still look at, so memory stays fixed however long the session.

Both go through ``_conv_rows`` with the history in front of the new rows,
accumulating taps j = 0, 1, ... in the same float32 order, so a step
produces exactly the bits the sequence convolution does (card RING-T5); what
can go wrong is only which inputs the tail holds, and that is what the
witnesses pin.
"""

from __future__ import annotations

import numpy as np

from impl.errors import ImplError


class ConvError(ImplError, ValueError):
    """A convolution request with a bad shape or dilation."""


def _check(taps: np.ndarray, dilation: int) -> np.ndarray:
    taps = np.asarray(taps, np.float32)
    if taps.ndim != 2 or taps.shape[0] < 1:
        raise ConvError(f"taps.shape={taps.shape}: expected (K, channels) with K >= 1")
    if isinstance(dilation, bool) or not isinstance(dilation, (int, np.integer)) or dilation < 1:
        raise ConvError(f"dilation={dilation!r} is not allowed: use an int >= 1")
    return taps


def _conv_rows(ext: np.ndarray, taps: np.ndarray, dilation: int, reach: int) -> np.ndarray:
    """Outputs for rows [reach, len(ext)) of ``ext`` = (history (reach, C); new rows (T, C)).

    taps (K, C). Accumulates j = 0..K-1 in order; returns (T, C) float32.
    """
    t = ext.shape[0] - reach
    y = taps[0] * ext[reach:]  # (T, C)
    for j in range(1, taps.shape[0]):
        back = j * dilation
        y = y + taps[j] * ext[reach - back : reach - back + t]  # x[t - j*dilation]
    return y


def causal_conv(x: np.ndarray, taps: np.ndarray, dilation: int = 1) -> np.ndarray:
    """The whole-sequence causal depthwise convolution: x (T, C), taps (K, C) -> (T, C) float32."""
    taps = _check(taps, dilation)
    x = np.asarray(x, np.float32)
    if x.ndim != 2 or x.shape[1] != taps.shape[1]:
        raise ConvError(f"x.shape={x.shape}: expected (T, {taps.shape[1]}) to match taps {taps.shape}")
    reach = (taps.shape[0] - 1) * dilation
    ext = np.concatenate([np.zeros((reach, x.shape[1]), np.float32), x])  # (reach + T, C)
    return _conv_rows(ext, taps, dilation, reach)


class ConvTail:
    """Rolling state of one causal depthwise convolution: the last ``reach`` inputs, oldest first.

    Layout: ``tail`` (reach, channels) float32, zeros before the session's
    first input (exactly the zero history of ``causal_conv``).
    """

    def __init__(self, taps: np.ndarray, dilation: int = 1) -> None:
        self.taps = _check(taps, dilation)
        self.dilation = int(dilation)
        self.reach = (self.taps.shape[0] - 1) * self.dilation
        self.tail = np.zeros((self.reach, self.taps.shape[1]), np.float32)  # (reach, C)

    @property
    def nbytes(self) -> int:
        return self.tail.nbytes

    def feed(self, x: np.ndarray) -> np.ndarray:
        """Convolve the next T inputs x (T, C) -> (T, C) float32, then roll the tail past them."""
        x = np.asarray(x, np.float32)
        if x.ndim != 2 or x.shape[1] != self.taps.shape[1]:
            raise ConvError(f"x.shape={x.shape}: expected (T, {self.taps.shape[1]})")
        ext = np.concatenate([self.tail, x])  # (reach + T, C)
        y = _conv_rows(ext, self.taps, self.dilation, self.reach)
        self.tail = ext[ext.shape[0] - self.reach :].copy()  # the last `reach` inputs
        return y

    def step(self, x: np.ndarray) -> np.ndarray:
        """One position: x (C,) -> (C,) float32."""
        return self.feed(np.asarray(x, np.float32)[None, :])[0]

    def seed(self, history: np.ndarray) -> None:
        """Set the tail from earlier inputs (T, C), oldest first (e.g. after a batched prefill)."""
        h = (
            np.asarray(history, np.float32)[-self.reach :]
            if self.reach
            else np.zeros((0, self.taps.shape[1]), np.float32)
        )
        self.tail = np.concatenate([np.zeros((self.reach - h.shape[0], self.taps.shape[1]), np.float32), h])
