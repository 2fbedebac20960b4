"""Witnesses for GGUF-DEQUANT (obligations/GGUF-DEQUANT.yaml): impl's weights are the format's values.

The reference is witnesses/gguf_reference.py: the GGUF header parsed with
``struct`` and every tensor decoded from its raw blocks by ggml's block
definitions (Q4_1: w = d*q + m, low nibbles first; Q8_0: w = d*q; F32 as
is), sharing no code with impl or the ``gguf`` package that impl and the
transformers oracle both use. Comparison is on the float32 bit patterns
(uint32 views), so even -0.0 against +0.0 would count as a difference.
"""
from __future__ import annotations

import numpy as np
import pytest

from witnesses import gguf_reference as ref

pytestmark = [pytest.mark.weights]


@pytest.fixture(scope="module")
def gguf_path():
    """The GGUF impl loads by default (KVPROOF_GGUF or the packaged SmolLM2)."""
    from impl.errors import WeightsError
    from impl.model.weights import resolve_weights

    try:
        return resolve_weights(None, verify=False).path
    except WeightsError as e:
        pytest.skip(f"weights unavailable: {e}")


@pytest.fixture(scope="module")
def reference(gguf_path) -> ref.ReferenceFile:
    """The file's bytes and index; .tensor(name) decodes one tensor by the format's definition (q/k rows in HF order)."""
    return ref.ReferenceFile(gguf_path)


def _differs(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when ``got`` is float32 with ``want``'s shape and bits; else what differs, in words."""
    if got.shape != want.shape or got.dtype != np.float32:
        return f"shape={got.shape} dtype={got.dtype}, want shape={want.shape} float32"
    bad = got.view(np.uint32) != want.view(np.uint32)
    if not bad.any():
        return None
    first = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return (f"{int(bad.sum())} of {bad.size} values differ, first at {tuple(int(i) for i in first)}: "
            f"got {got[first]!r}, want {want[first]!r}")


def _check(pairs, evidence, key: str) -> list[str]:
    """Compare (label, got, want) triples; record how many and how many differ; return the failures."""
    failures = []
    n = 0
    for label, got, want in pairs:
        n += 1
        why = _differs(np.asarray(got), want)
        if why is not None:
            failures.append(f"{label}: {why}")
    evidence.record(f"{key}_checked", n)
    evidence.record(f"mismatched_{key}", len(failures))
    return failures


def test_loader_returns_every_tensor_as_the_format_defines_it(gguf_path, reference, evidence):
    """read_gguf's float32 tensors equal the reference decode of the raw blocks, bit for bit, for every tensor."""
    from impl.model.gguf_load import read_gguf

    loaded = read_gguf(gguf_path).tensors  # uncached: read_gguf never consults the float32 weights cache
    names = list(reference.infos)
    missing = [n for n in names if n not in loaded]
    extra = sorted(set(loaded) - set(names))
    types: dict[str, int] = {}
    for info in reference.infos.values():
        types[info.type_name] = types.get(info.type_name, 0) + 1
    for name, n in sorted(types.items()):
        evidence.record(f"{name.lower()}_tensors", n)
    evidence.record("values_checked", sum(reference.infos[n].n_values for n in names))
    failures = _check(
        ((f"{n} ({reference.infos[n].type_name})", loaded[n], reference.tensor(n)) for n in names if n in loaded),
        evidence, "tensors")
    failures += [f"{n}: in the file, not in read_gguf's tensors" for n in missing]
    failures += [f"{n}: in read_gguf's tensors, not in the file" for n in extra]
    assert not failures, f"{len(failures)} tensors differ from the format's definition:\n  " + "\n  ".join(failures[:8])


def test_the_forward_reads_every_tensor_as_the_format_defines_it(reference, evidence):
    """The arrays load_model's Llama computes with (through the float32 cache when on) equal the reference."""
    from impl.model import f32cache, load_model

    evidence.record("f32_cache", "off" if f32cache.cache_root() is None else "on")
    llama = load_model().llama
    used: set[str] = set()

    def w(*names: str) -> np.ndarray:
        """The reference tensor(s), concatenated along the output rows as Llama fuses them."""
        used.update(names)
        parts = [reference.tensor(n) for n in names]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def pairs():
        # generated lazily: one layer's arrays (reference and Linear.weight() copies) alive at a time
        head = "output.weight" if "output.weight" in reference.infos else "token_embd.weight"  # tied when absent
        yield "embed", llama.embed, w("token_embd.weight")
        yield "head", llama.head.weight(), w(head)
        yield "norm", llama.norm, w("output_norm.weight")
        for i, L in enumerate(llama.layers):
            b = f"blk.{i}."
            yield f"layers[{i}].attn_norm", L.attn_norm, w(b + "attn_norm.weight")
            yield f"layers[{i}].wqkv", L.wqkv.weight(), w(b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight")
            yield f"layers[{i}].wo", L.wo.weight(), w(b + "attn_output.weight")
            yield f"layers[{i}].ffn_norm", L.ffn_norm, w(b + "ffn_norm.weight")
            yield f"layers[{i}].w_gate_up", L.w_gate_up.weight(), w(b + "ffn_gate.weight", b + "ffn_up.weight")
            yield f"layers[{i}].w_down", L.w_down.weight(), w(b + "ffn_down.weight")

    failures = _check(pairs(), evidence, "arrays")
    evidence.record("tensors_checked", len(used))
    failures += [f"{n}: in the file, read by no array of the forward" for n in reference.infos if n not in used]
    assert not failures, f"{len(failures)} forward arrays differ from the format's definition:\n  " + "\n  ".join(failures[:8])


def test_stored_q_and_k_rows_are_not_in_hugging_face_order(reference, evidence):
    """Control: every attn_q/attn_k as stored differs from its HF-order reference, so the row order is really tested.

    With loader-tensors (impl's tensors equal the HF-order reference), this
    means impl's q/k differ from the rows as stored: a loader that skipped the
    un-permutation would fail loader-tensors.
    """
    differing = 0
    for name in reference.infos:
        if reference.permuted_heads(name) is not None:
            differing += int(not np.array_equal(reference.stored(name).view(np.uint32),
                                                reference.tensor(name).view(np.uint32)))
    evidence.record("qk_tensors_differing_as_stored", differing)
