"""Batch-invariant linear layers: a row's bits never depend on how many rows share the call.

NOTE: the trap this module exists for. numpy sends a one-row matmul to
BLAS's matrix-vector kernel (gemv) and a multi-row one to the
matrix-matrix kernel (gemm); the two round differently (about 4e-5 on a
576x1536 weight), and sgemm's own blocking is an implementation detail of
one BLAS build. A decode step is one row, a prefill many, so a naive
forward gives a position different bits depending on how its tokens were
fed (KV-T4).

Two numerics paths, one per process (:func:`numerics_path` names it):

- ``kernel`` (default): :mod:`impl.kernels`' C kernel. Every output
  element is summed over k in one fixed order (k-blocks of 64, one FMA per
  step, block sums added in order) for one row and for many, so decode
  streams the weights at memory speed and prefill runs register-tiled at
  matrix-matrix speed with the same bits. Weights are packed once into
  16-column panels ``(P, in, 16)``, zero-padded past ``out``.
- ``numpy-gemv`` (fallback: no C compiler, or ``KVPROOF_KERNEL=numpy``):
  every row goes through the same gemv call, a stacked product
  (T, 1, K) @ (K, C), bit-identical to a lone decode row. gemv results also
  depend on the output width and alignment of the weight block, so the
  blocking below is fixed per layer and shared by every caller. Weights
  are column blocks (in, C) C-contiguous.

The two paths give different bits (each is invariant on its own): compare
runs made under the same path only.

Decode (one row) has a third route under the kernel path, with the
kernel path's bits: when the weights were loaded from a GGUF whose
matrices are Q4_1 or Q8_0 blocks (impl.model.gguf_quant attaches a
:class:`QuantRows` to each such Linear), a one-row call reads those
blocks from the memory-mapped file (about 96 MB a step for SmolLM2
instead of 540 MB of float32) through ``Kernel.linear_q``, which computes
every weight with gguf.quants' float32 operations and feeds it into the
very order above. ``KVPROOF_DECODE`` (auto | quantized | f32) chooses;
:func:`decode_path` names the choice in force.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from impl import kernels
from impl.attention import attention_path
from impl.errors import SettingError, setting

BLOCK_BYTES = 16 << 20  # numpy-gemv: one weight block; 16 MiB balances decode (few calls) and prefill (cache reuse)
NR = kernels.NR
ENV_DECODE = "KVPROOF_DECODE"  # "auto" (default: quantized where the GGUF allows), "quantized", or "f32"
DECODE_CHOICES = ("auto", "quantized", "f32")


def decode_choice() -> str:
    """The validated value of KVPROOF_DECODE ("auto" when unset); SettingError naming the allowed values."""
    return setting(
        ENV_DECODE,
        DECODE_CHOICES,
        "a decode path",
        "auto = quantized GGUF blocks where the file stores Q4_1/Q8_0 and the C kernel build decodes them with "
        "vector code, else the float32 weights",
    )


def linear_path() -> str:
    """The weight-product path this process uses: ``kernel <isa> (build <name>: <flags>): ...`` (the ISA build
    in force, KVPROOF_KERNEL_ISA) or ``numpy-gemv ... (fallback: why)``."""
    k = kernels.load()
    if k is None:
        return f"numpy-gemv every row (fallback: {kernels.status()})"
    return f"kernel {k.describe()}: fixed k-order (64-blocks, fma), 16-col panels, any row count"


def decode_path() -> str:
    """Where one-row (decode) products read their weights in this process, e.g. for report headers.

    Raises SettingError for an unknown KVPROOF_DECODE, or for ``quantized`` without the C kernel.
    """
    choice = decode_choice()
    k = kernels.load()
    if choice == "f32":
        return f"float32 weights ({ENV_DECODE}=f32)"
    if k is None:
        if choice == "quantized":
            raise SettingError(
                f"{ENV_DECODE}=quantized but the C kernel is unavailable ({kernels.status()}); "
                f"unset it to decode from the float32 weights"
            )
        return "float32 weights (quantized decode needs the C kernel)"
    if choice == "auto" and not k.q_vector:
        return f"float32 weights (the {k.build} build's block decoder is scalar: slower, same bits)"
    return (
        f"quantized GGUF blocks (Q4_1/Q8_0, kernel {k.q_isa}) where the file stores them, else float32; "
        f"same bits either way"
    )


def numerics_path() -> str:
    """One line naming every numerics path this process uses, for report and bench headers.

    e.g. ``linear: kernel avx2+fma (build avx2: -mavx2 -mfma -mf16c): ...; decode: ...; attention: numpy, one
    query at a time; rowwise: numpy``.
    Bits are comparable only between runs that print the same linear, attention and rowwise parts
    (the decode part changes what is read, never the bits).
    """

    rowwise = (
        "kernel (rmsnorm: fma lane sums; rope: numpy's operations; silu: the kernel's exp)"
        if kernels.load() is not None
        else "numpy"
    )
    return f"linear: {linear_path()}; decode: {decode_path()}; attention: {attention_path()}; rowwise: {rowwise}"


@dataclass(frozen=True)
class QuantRows:
    """A Linear's weight as GGUF blocks: row c of W (out, in) is in/32 blocks of ``qtype`` at address ``rows[c]``.

    ``rows`` (out,) uintp addresses into ``keep`` (the file's memory map, kept alive by this
    object); row order already includes any un-permutation and concatenation the float32
    weight went through. ``nbytes``: bytes one product streams.
    """

    qtype: str  # "Q4_1" or "Q8_0" (kernels.QTYPES)
    rows: np.ndarray  # (out,) uintp
    keep: object  # what the addresses point into
    nbytes: int


def pack_panels(w_out_in: np.ndarray) -> np.ndarray:
    """(out, in) -> (ceil(out/16), in, 16) float32: panel p holds outputs [16p, 16p + 16), zero past ``out``."""
    c, k = w_out_in.shape
    p = -(-c // NR)
    if c % NR:
        w_out_in = np.concatenate([w_out_in, np.zeros((p * NR - c, k), dtype=np.float32)])
    # one strided copy; going through the (in, out) transpose instead costs ~10x (1.8 s for the head)
    return np.ascontiguousarray(np.asarray(w_out_in, dtype=np.float32).reshape(p, NR, k).transpose(0, 2, 1))


def _column_blocks(w_in_out: np.ndarray, block_bytes: int) -> list[np.ndarray]:
    k, c = w_in_out.shape
    cols = max(64, (block_bytes // (4 * k)) // 64 * 64)
    return [np.ascontiguousarray(w_in_out[:, s : s + cols], dtype=np.float32) for s in range(0, c, cols)]


class Linear:
    """y = x @ W.T for a weight ``W`` given as (out, in), the torch layout.

    ``blocks`` is the stored layout (what the float32 cache keeps): under the
    kernel path one array (P, in, 16) of packed panels; under numpy-gemv
    column blocks of W.T, each (in, C_i), C_i a multiple of 64 except
    possibly the last. ``quant``: the same W as GGUF blocks, or None; set by
    impl.model.gguf_quant, used for one-row calls under the kernel path.
    """

    quant: QuantRows | None = None

    def __init__(self, weight_out_in: np.ndarray, block_bytes: int = BLOCK_BYTES) -> None:
        w = np.asarray(weight_out_in, dtype=np.float32)
        assert w.ndim == 2
        self.n_out, self.n_in = w.shape
        self._set_layout(w, block_bytes)

    def _set_layout(self, w_out_in: np.ndarray, block_bytes: int = BLOCK_BYTES) -> None:
        self.kernel = kernels.load()
        if self.kernel is not None:
            self.blocks = [pack_panels(w_out_in)]
            self.offsets = [0]
        else:
            self.blocks = _column_blocks(w_out_in.T, block_bytes)
            self.offsets = list(range(0, self.n_out, self.blocks[0].shape[1]))

    @classmethod
    def from_blocks(cls, blocks: list[np.ndarray], n_out: int | None = None) -> Linear:
        """Rebuild from ``blocks`` as returned by ``.blocks`` (e.g. memory-mapped).

        Packed panels carry no width: pass ``n_out`` unless it is a multiple
        of 16. A layout made under the other numerics path is converted.
        """
        self = cls.__new__(cls)
        self.n_in = blocks[0].shape[-2] if blocks[0].ndim == 3 else blocks[0].shape[0]
        if blocks[0].ndim == 3:  # packed panels (P, in, 16)
            (p,) = {b.shape[0] for b in blocks[:1]}
            assert len(blocks) == 1 and blocks[0].shape[2] == NR and blocks[0].dtype == np.float32
            self.n_out = n_out if n_out is not None else p * NR
            packed = True
        else:
            for b in blocks:
                assert b.ndim == 2 and b.shape[0] == self.n_in and b.dtype == np.float32
            self.n_out = sum(b.shape[1] for b in blocks)
            packed = False
        self.kernel = kernels.load()
        if packed == (self.kernel is not None):
            self.blocks = list(blocks)
            self.offsets = [0] if packed else list(np.cumsum([0] + [b.shape[1] for b in blocks[:-1]]))
        else:
            self.blocks = list(blocks)
            self._set_layout(self.weight())
        return self

    @property
    def nbytes(self) -> int:
        """Bytes of the stored float32 layout."""
        return sum(b.nbytes for b in self.blocks)

    @property
    def decode_quantized(self) -> bool:
        """Whether a one-row call reads ``quant`` (the GGUF blocks) instead of the float32 panels."""
        return self.quant is not None and self.kernel is not None

    @property
    def decode_nbytes(self) -> int:
        """Bytes of weights one one-row call streams."""
        return self.quant.nbytes if self.decode_quantized else self.nbytes

    def weight(self) -> np.ndarray:
        """The (out, in) weight back, for tests and export."""
        if self.blocks[0].ndim == 3:
            p = self.blocks[0]  # (P, in, 16)
            return p.transpose(0, 2, 1).reshape(-1, self.n_in)[: self.n_out]
        return np.concatenate(self.blocks, axis=1).T

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x (T, in) float32 -> (T, out) float32; row t depends only on x[t], never on T."""
        t = x.shape[0]
        x = np.ascontiguousarray(x, dtype=np.float32)
        if t == 0:
            return np.empty((0, self.n_out), dtype=np.float32)
        if t == 1 and self.decode_quantized:
            q = self.quant
            out = np.empty((1, self.n_out), dtype=np.float32)
            self.kernel.linear_q(x[0], q.rows, kernels.QTYPES[q.qtype], out[0])
            return out
        if self.kernel is not None:
            panels = self.blocks[0]
            out = np.empty((t, panels.shape[0] * NR), dtype=np.float32)
            self.kernel.linear(x, panels, out)
            if out.shape[1] != self.n_out:
                out = np.ascontiguousarray(out[:, : self.n_out])
            return out
        x3 = x.reshape(t, 1, self.n_in)  # (T, 1, in)
        out = np.empty((t, self.n_out), dtype=np.float32)
        for s, blk in zip(self.offsets, self.blocks, strict=False):
            # (T, 1, in) @ (in, C) -> (T, 1, C): one gemv per row
            np.matmul(x3, blk, out=out[:, None, s : s + blk.shape[1]])
        return out
