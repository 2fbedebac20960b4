"""Liars for card GGUF-DEQUANT: wrong dequantisations that still give plausible weights."""

from __future__ import annotations

import os

import numpy as np

from witnesses.liars import liar

# NOTE: as in witnesses/liars/model.py: the float32 weights cache
# (impl.model.f32cache) would hand a liar run the arrays the honest loader
# made, and a liar run that found no entry would store its wrong arrays
# under the honest code's key for every later process. This module is
# imported only in the process one of its liars is applied to.
os.environ["KVPROOF_WEIGHTS_CACHE"] = "off"


def _blocks(t, nbytes: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """(n_blocks, nbytes) uint8 blocks of a gguf ReaderTensor, and its float shape."""
    raw = np.asarray(t.data, dtype=np.uint8)  # (rows, bytes per row)
    return raw.reshape(-1, nbytes), (*raw.shape[:-1], raw.shape[-1] // nbytes * 32)


def _f16(col: np.ndarray) -> np.ndarray:
    return col.copy().view("<f2").astype(np.float32)


@liar(
    "gguf.q4_1_interleaved_nibbles",
    target="impl.model.gguf_load:dequantize_tensor",
    factory=True,
    why="reads Q4_1 byte j as values 2j (low nibble) and 2j+1 (high nibble) instead of j and j+16: "
    "every value and every block's d and m stay in range, only their order within a block is wrong",
)
def q4_1_interleaved(original):
    def dequantize_tensor(t):
        if t.tensor_type.name != "Q4_1":
            return original(t)
        b, shape = _blocks(t, 20)
        d, m, qs = _f16(b[:, 0:2]), _f16(b[:, 2:4]), b[:, 4:20]
        q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 32).astype(np.float32)  # (n_blocks, 32) interleaved
        return (q * d + m).reshape(shape)

    return dequantize_tensor


@liar(
    "gguf.q8_0_unsigned",
    target="impl.model.gguf_load:dequantize_tensor",
    factory=True,
    why="reads Q8_0's quants as uint8 instead of int8: the positive half of the embedding is right, "
    "every negative value becomes d*(q+256)",
)
def q8_0_unsigned(original):
    def dequantize_tensor(t):
        if t.tensor_type.name != "Q8_0":
            return original(t)
        b, shape = _blocks(t, 34)
        q = b[:, 2:].astype(np.float32)  # uint8: the bug
        return (q * _f16(b[:, 0:2])).reshape(shape)

    return dequantize_tensor
