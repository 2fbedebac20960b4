"""Quantized decode: point each Linear at its weight's GGUF blocks in the memory-mapped file.

A decode step is one row and memory-bound: it streams every weight once.
The float32 weights are 540 MB a step for SmolLM2; the GGUF stores the
layer matrices as Q4_1 (20 bytes per 32 values) and the tied embedding /
output head as Q8_0 (34 bytes per 32), about 96 MB. :func:`attach` gives
every Linear whose source tensors are all Q4_1 or all Q8_0 a
:class:`impl.linear.QuantRows`: one address per output row into a
read-only map of the file, in the float32 weight's row order:

- wqkv = [attn_q; attn_k; attn_v] and w_gate_up = [ffn_gate; ffn_up]:
  the rows of each tensor in turn (only addresses, nothing is copied);
- attn_q / attn_k: rows taken in the order ``unpermute_rope_rows`` puts
  them, computed by applying that very function to the row numbers, so
  the quantized rows are the float32 rows whatever it does;
- the head: ``output.weight`` when the file has one, else token_embd
  (tied), as in Llama.

``Kernel.linear_q`` then gives each one-row product the bits the float32
panels give (kernels.c says why; tests/impl/test_quant_decode.py checks every
tensor of the real file). Prefill (many rows) keeps the float32 panels.

NOTE: the map is of the file at load time; replacing the file (pip
reinstall) leaves the old map valid, but rewriting it in place under a
running process would change what decode reads. The index comes from the
GGUF header (read_gguf) or, on a float32-cache hit, from the cache's
manifest, which is keyed by the GGUF's sha256.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

import numpy as np

from impl import kernels
from impl.errors import SettingError
from impl.linear import ENV_DECODE, Linear, QuantRows, decode_choice
from impl.model.gguf_load import unpermute_rope_rows

QK = 32  # values per block, both types


def _map(path: Path) -> np.ndarray:
    """The whole file as a read-only uint8 array over one memory map (the array keeps the map open)."""
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mm, dtype=np.uint8)


def _sources(llama, names: set[str]) -> list[tuple[str, Linear, list[tuple[str, int | None]]]]:
    """(label, Linear, [(tensor name, heads to un-permute or None), ...]) for every Linear of ``llama``."""
    c = llama.config
    head = "output.weight" if "output.weight" in names else "token_embd.weight"
    out = [("head", llama.head, [(head, None)])]
    for i, L in enumerate(llama.layers):
        b = f"blk.{i}."
        out += [
            (
                f"{b}wqkv",
                L.wqkv,
                [(b + "attn_q.weight", c.n_heads), (b + "attn_k.weight", c.n_kv_heads), (b + "attn_v.weight", None)],
            ),
            (f"{b}wo", L.wo, [(b + "attn_output.weight", None)]),
            (f"{b}w_gate_up", L.w_gate_up, [(b + "ffn_gate.weight", None), (b + "ffn_up.weight", None)]),
            (f"{b}w_down", L.w_down, [(b + "ffn_down.weight", None)]),
        ]
    return out


def quant_rows(
    lin: Linear, parts: list[tuple[str, int | None]], index: dict[str, dict], data: np.ndarray
) -> QuantRows | str:
    """The QuantRows for ``lin`` from its source tensors, or a reason (str) why it stays on float32."""
    types = {index[n]["type"] if n in index else None for n, _ in parts}
    if None in types:
        return f"{next(n for n, _ in parts if n not in index)} not in the file"
    if len(types) != 1 or not types <= set(kernels.QTYPES):
        return f"tensor types {'/'.join(sorted(types))} (quantized decode reads {', '.join(kernels.QTYPES)})"
    (qtype,) = types
    bs = kernels.QBLOCK_BYTES[qtype]
    base = data.ctypes.data
    addrs, n_rows = [], 0
    for name, heads in parts:
        e = index[name]
        n_out, n_in = e["shape"]
        if n_in != lin.n_in or n_in % QK:
            return f"{name} has in={n_in}, the Linear {lin.n_in}"
        row_bytes = n_in // QK * bs
        if e["offset"] < 0 or e["offset"] + n_out * row_bytes > data.size:
            return f"{name} lies outside the file"
        src = np.arange(n_out, dtype=np.int64)
        if heads is not None:
            src = unpermute_rope_rows(src, heads)  # row i of the float32 weight is stored row src[i]
        addrs.append(base + e["offset"] + src * row_bytes)
        n_rows += n_out
    if n_rows != lin.n_out:
        return f"{n_rows} rows in {', '.join(n for n, _ in parts)}, the Linear has {lin.n_out}"
    rows = np.ascontiguousarray(np.concatenate(addrs), dtype=np.uintp)
    return QuantRows(qtype, rows, data, lin.n_out * (lin.n_in // QK) * bs)


def attach(llama, path: str | os.PathLike, index: list[dict] | None) -> str:
    """Give every Linear of ``llama`` its GGUF blocks (see the module doc); returns one line saying what was done.

    ``index``: gguf_load.tensor_index of the file at ``path`` (None: unknown, decode stays float32).
    KVPROOF_DECODE=f32 attaches nothing, nor does ``auto`` when the kernel build's block decoder is
    scalar (Kernel.q_vector: portable builds); ``quantized`` raises SettingError when the kernel is
    unavailable or any Linear cannot be served from quantized blocks (naming it and why).
    """
    detach(llama)
    choice = decode_choice()
    if choice == "f32":
        return f"float32 ({ENV_DECODE}=f32)"
    why = ""
    k = kernels.load()
    if k is None:
        why = f"no C kernel ({kernels.status()})"
    elif choice == "auto" and not k.q_vector:
        why = f"the {k.build} kernel build decodes blocks with scalar code, slower than the float32 panels"
    elif index is None:
        why = "no tensor index for the file"
    if why:
        if choice == "quantized":
            raise SettingError(f"{ENV_DECODE}=quantized but {why}; unset it to decode from the float32 weights")
        return f"float32 ({why})"
    by_name = {e["name"]: e for e in index}
    data = _map(Path(path))
    done, left = [], []
    for label, lin, parts in _sources(llama, set(by_name)):
        q = quant_rows(lin, parts, by_name, data)
        if isinstance(q, str):
            left.append(f"{label}: {q}")
        else:
            done.append((lin, q))
    if left and choice == "quantized":
        raise SettingError(
            f"{ENV_DECODE}=quantized but {len(left)} weight products cannot decode from "
            f"quantized blocks, first {left[0]}; unset it to decode those from the float32 weights"
        )
    for lin, q in done:
        lin.quant = q
    types = sorted({q.qtype for _, q in done})
    msg = f"quantized {'/'.join(types)} for {len(done)} of {len(done) + len(left)} weight products"
    return msg + (f" (float32 for the rest: first {left[0]})" if left else "") if done else f"float32 ({left[0]})"


def detach(llama) -> None:
    """Back to float32 decode for every Linear of ``llama``."""
    for _, lin, _ in _sources(llama, set()):
        lin.quant = None


@contextlib.contextmanager
def detached(llama):
    """Within the block, decode reads the float32 weights (e.g. to compare or time both paths); the
    quantized blocks are attached again on exit."""
    saved = [(lin, lin.quant) for _, lin, _ in _sources(llama, set())]
    detach(llama)
    try:
        yield llama
    finally:
        for lin, q in saved:
            lin.quant = q
