"""GGUF tensors decoded from the format's definition, sharing no code with impl or ``gguf``.

The reference for card GGUF-DEQUANT (obligations/GGUF-DEQUANT.yaml). impl
reads weights with the ``gguf`` package (``GGUFReader`` and
``gguf.quants.dequantize``), and so does the transformers oracle, so oracle
parity cannot see a wrong dequantisation. This module reads the file with
``struct`` and numpy only, from the layouts ggml defines
(ggml/src/ggml-common.h, dequantize_row_* in ggml/src/ggml-quants.c):

    GGUF v2/v3, little-endian: "GGUF", u32 version, u64 n_tensors, u64 n_kv;
      n_kv x (string key, u32 type, value); n_tensors x (string name,
      u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset); data starts at
      the next multiple of general.alignment (default 32), each tensor at
      data start + offset. A string is u64 length + UTF-8 bytes. ne[0] is
      the fastest-moving dimension, so numpy's shape is ne reversed.
    F32   (type 0): float32 values as they are.
    F16   (type 1): float16 values, widened to float32 (exact).
    Q4_1  (type 3): blocks of 32 values, 20 bytes each:
            {f16 d; f16 m; uint8 qs[16]}
          value j (0..15) = (qs[j] & 0x0F) * d + m,
          value j + 16    = (qs[j] >> 4)   * d + m.
    Q8_0  (type 8): blocks of 32 values, 34 bytes each:
            {f16 d; int8 qs[32]}
          value j = qs[j] * d.

Arithmetic, and why the bits are fixed: ggml converts d and m from f16 to
f32 (exact: every f16 value, subnormals included, is an f32 value) and
computes ``x * d + m`` in f32. The product of an f16 significand (11 bits)
and q (Q4_1: 4 bits, Q8_0: 8 bits plus sign) has at most 19 significant bits,
so ``q * d`` is exact in f32 and the only rounding is the one of the final
add. A fused multiply-add rounds ``q * d + m`` once too, so fma or not, in
either order of the product, every correct implementation gives these exact
bits: bit-for-bit comparison is the right test, not a tolerance.

The attn_q / attn_k un-permutation (llama.cpp's converter reorders their rows
for its interleaved RoPE; impl uses half-split RoPE like Hugging Face) is
written here as an explicit row index, not as impl's reshape (see
:func:`hf_row_order`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# ggml_type ids (ggml.h enum ggml_type)
F32, F16, Q4_1, Q8_0 = 0, 1, 3, 8
TYPE_NAMES = {F32: "F32", F16: "F16", Q4_1: "Q4_1", Q8_0: "Q8_0"}
BLOCK = 32  # values per Q4_1 / Q8_0 block (QK4_1, QK8_0)
BLOCK_BYTES = {Q4_1: 2 + 2 + 16, Q8_0: 2 + 32}

# GGUF metadata value types: fixed sizes in bytes; 8 = string, 9 = array
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ggml_type: int
    ne: tuple[int, ...]  # ggml order: ne[0] fastest
    offset: int  # absolute byte offset in the file

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy shape: ne reversed ((out, in) for a matrix)."""
        return tuple(reversed(self.ne))

    @property
    def n_values(self) -> int:
        return int(np.prod(self.ne))

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.ggml_type, f"type{self.ggml_type}")


@dataclass(frozen=True)
class GGUFIndex:
    """What the reference needs from a GGUF: scalar metadata and where each tensor lies."""

    version: int
    metadata: dict  # scalar keys only (arrays are skipped)
    tensors: tuple[TensorInfo, ...]


class _Cursor:
    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str:
        n = self.take("<Q")
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def skip_value(self, vtype: int) -> None:
        if vtype in _SCALAR:
            self.pos += struct.calcsize(_SCALAR[vtype])
        elif vtype == _STRING:
            self.pos += 8 + self.take("<Q")
        elif vtype == _ARRAY:
            etype, n = self.take("<I"), self.take("<Q")
            if etype in _SCALAR:
                self.pos += n * struct.calcsize(_SCALAR[etype])
            else:
                for _ in range(n):
                    self.skip_value(etype)
        else:
            raise ValueError(f"GGUF metadata value type {vtype} at byte {self.pos} is not in the format")


def index(buf: bytes | memoryview) -> GGUFIndex:
    """Parse the header of a little-endian GGUF (v2 or v3) held in ``buf``."""
    cur = _Cursor(memoryview(buf))
    if bytes(cur.buf[:4]) != b"GGUF":
        raise ValueError(f"not a GGUF file: starts with {bytes(cur.buf[:4])!r}")
    cur.pos = 4
    version = cur.take("<I")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version}: this reference reads little-endian v2/v3 only")
    n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
    meta: dict = {}
    for _ in range(n_kv):
        key, vtype = cur.string(), cur.take("<I")
        if vtype in _SCALAR:
            meta[key] = cur.take(_SCALAR[vtype])
        elif vtype == _STRING:
            meta[key] = cur.string()
        else:
            cur.skip_value(vtype)
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.take("<I")
        ne = tuple(cur.take("<Q") for _ in range(n_dims))
        infos.append((name, cur.take("<I"), ne, cur.take("<Q")))
    align = int(meta.get("general.alignment", 32))
    data_start = -(-cur.pos // align) * align
    tensors = tuple(TensorInfo(n, t, ne, data_start + off) for n, t, ne, off in infos)
    return GGUFIndex(version, meta, tensors)


def decode_q4_1(raw: np.ndarray) -> np.ndarray:
    """uint8 Q4_1 blocks (n_blocks * 20 bytes) -> float32 (n_blocks * 32,)."""
    blocks = raw.reshape(-1, BLOCK_BYTES[Q4_1])  # (n_blocks, 20)
    d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)  # (n_blocks, 1)
    m = blocks[:, 2:4].copy().view("<f2").astype(np.float32)  # (n_blocks, 1)
    qs = blocks[:, 4:20]  # (n_blocks, 16)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)  # (n_blocks, 32): low nibbles first
    return (q * d + m).reshape(-1)


def decode_q8_0(raw: np.ndarray) -> np.ndarray:
    """uint8 Q8_0 blocks (n_blocks * 34 bytes) -> float32 (n_blocks * 32,)."""
    blocks = raw.reshape(-1, BLOCK_BYTES[Q8_0])  # (n_blocks, 34)
    d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)  # (n_blocks, 1)
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)  # (n_blocks, 32)
    return (q * d).reshape(-1)


def decode(buf: bytes | memoryview, t: TensorInfo) -> np.ndarray:
    """One tensor from the file bytes ``buf``: float32 in numpy shape (ne reversed), as stored (not un-permuted)."""
    n = t.n_values
    if t.ggml_type == F32:
        flat = np.frombuffer(buf, dtype="<f4", count=n, offset=t.offset).astype(np.float32)
    elif t.ggml_type == F16:
        flat = np.frombuffer(buf, dtype="<f2", count=n, offset=t.offset).astype(np.float32)
    elif t.ggml_type in BLOCK_BYTES:
        if t.ne[0] % BLOCK:
            raise ValueError(f"{t.name}: row length ne[0]={t.ne[0]} is not a multiple of {BLOCK}")
        raw = np.frombuffer(buf, dtype=np.uint8, count=n // BLOCK * BLOCK_BYTES[t.ggml_type], offset=t.offset)
        flat = decode_q4_1(raw) if t.ggml_type == Q4_1 else decode_q8_0(raw)
    else:
        raise NotImplementedError(
            f"{t.name}: ggml type {t.ggml_type} has no reference decoder here (known: {sorted(TYPE_NAMES.values())})"
        )
    return flat.reshape(t.shape)


def hf_row_order(n_rows: int, n_head: int) -> np.ndarray:
    """For each Hugging Face row of attn_q/attn_k, the GGUF row it was stored at.

    llama.cpp's converter writes head h's rows so that the two halves of the
    head (s = 0: first half, s = 1: second half, i = 0 .. hd/2-1 within the
    half) are interleaved: HF row h*hd + s*hd/2 + i is stored at GGUF row
    h*hd + 2*i + s. Rotate-half RoPE needs the HF order back.
    """
    hd = n_rows // n_head
    assert hd * n_head == n_rows and hd % 2 == 0, (n_rows, n_head)
    src = np.empty(n_rows, dtype=np.int64)
    for h in range(n_head):
        for s in range(2):
            for i in range(hd // 2):
                src[h * hd + s * (hd // 2) + i] = h * hd + 2 * i + s
    return src


class ReferenceFile:
    """A GGUF file's bytes and index; :meth:`tensor` decodes a tensor on its first request and keeps it.

    Several witnesses compare the same tensors (as read_gguf returns them, as
    the forward holds them, as a fresh build holds them), so each tensor is
    decoded once per process and handed out read-only: what one comparison
    sees, the next sees too (SmolLM2 decoded is 540 MB of float32).
    """

    # tensors whose rows llama.cpp's converter permuted, and the metadata key of their head count
    PERMUTED = {"attn_q.weight": "llama.attention.head_count", "attn_k.weight": "llama.attention.head_count_kv"}

    def __init__(self, path: str | Path) -> None:
        self.buf = Path(path).read_bytes()
        self.index = index(self.buf)
        self.infos = {t.name: t for t in self.index.tensors}
        self._decoded: dict[str, np.ndarray] = {}  # name -> tensor() result, read-only

    def stored(self, name: str) -> np.ndarray:
        """The tensor decoded, rows as stored in the file."""
        return decode(self.buf, self.infos[name])

    def permuted_heads(self, name: str) -> int | None:
        """The head count whose rows the converter permuted in ``name``, or None if it did not."""
        for suffix, key in self.PERMUTED.items():
            if name.endswith(suffix):
                return int(self.index.metadata[key])
        return None

    def tensor(self, name: str) -> np.ndarray:
        """The tensor decoded, attn_q/attn_k rows in Hugging Face order (:func:`hf_row_order`); read-only,
        decoded on the first request for ``name`` and the same array after."""
        if name not in self._decoded:
            w = self.stored(name)
            heads = self.permuted_heads(name)
            w = w if heads is None else w[hf_row_order(w.shape[0], heads)]
            w.setflags(write=False)
            self._decoded[name] = w
        return self._decoded[name]
