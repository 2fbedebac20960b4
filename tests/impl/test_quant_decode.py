"""Quantized decode (impl.model.gguf_quant, Kernel.linear_q): the float32 path's bits from the GGUF's blocks.

A one-row product read straight from Q4_1/Q8_0 blocks must be bit-identical to the same product on the
float32 weights the loader made from those blocks (gguf.quants' dequantization, the q/k un-permutation,
the panel packing): KV-T4 compares a decoded row with a prefilled one bit for bit, and every
real-weights witness compares bits across paths.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from impl import kernels
from impl.errors import SettingError
from impl.linear import ENV_DECODE, Linear, decode_choice, decode_path, numerics_path
from impl.model import gguf_quant

needs_kernel = pytest.mark.skipif(kernels.load() is None, reason=f"C kernel unavailable: {kernels.status()}")
VECTOR_Q = kernels.load() is not None and kernels.load().q_vector
needs_vector_q = pytest.mark.skipif(
    not VECTOR_Q,
    reason="no vector block decoder in this kernel build (portable): KVPROOF_DECODE=auto decodes from the float32 "
    "panels there (test_auto_decodes_from_the_float32_panels_on_a_build_whose_block_decoder_is_scalar)",
)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def probe_inputs(n_in: int, seed: int) -> dict[str, np.ndarray]:
    """One-row inputs of very different magnitudes (each (n_in,) float32)."""
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal(n_in).astype(np.float32)
    spread = (normal * np.exp2(rng.integers(-60, 60, n_in))).astype(np.float32)  # mixed exponents per element
    outlier = normal.copy()
    outlier[rng.integers(0, n_in, 3)] = [7e3, -5e3, 2e3]  # like SmolLM2's residual channels
    signed_zeros = np.where(rng.random(n_in) < 0.5, np.float32(-0.0), normal).astype(np.float32)
    return {
        "normal": normal,
        "tiny": normal * np.float32(1e-30),
        "huge": normal * np.float32(1e30),
        "spread": spread,
        "outlier": outlier,
        "signed-zeros": signed_zeros,
    }


def linears(llama) -> list[tuple[str, Linear]]:
    return [(label, lin) for label, lin, _ in gguf_quant._sources(llama, set())]


def f32_product(lin: Linear, x: np.ndarray) -> np.ndarray:
    """The same Linear's one-row product on its float32 panels (quantized decode switched off for the call)."""
    q, lin.quant = lin.quant, None
    try:
        return lin(x[None])[0]
    finally:
        lin.quant = q


# ---- the kernel on synthetic blocks ------------------------------------------------------------


def random_blocks(qtype: str, n_out: int, n_in: int, seed: int) -> np.ndarray:
    """(n_out, n_in/32 * block bytes) uint8: random quants and random finite f16 scales (normal,
    subnormal, up to 65504, either sign), every nibble and byte value."""
    rng = np.random.default_rng(seed)
    nb = n_in // 32
    raw = rng.integers(0, 256, (n_out, nb, kernels.QBLOCK_BYTES[qtype]), dtype=np.uint8)
    n_f16 = 2 if qtype == "Q4_1" else 1  # d (and m) lead the block
    h = rng.integers(0, 1 << 16, (n_out, nb, n_f16), dtype=np.uint16)
    h &= ~np.uint16(0x7C00) | np.uint16(rng.integers(0, 31, h.shape, dtype=np.uint16) << 10)  # exponent < 31: finite
    raw[:, :, : 2 * n_f16] = h.astype("<u2").view(np.uint8).reshape(n_out, nb, 2 * n_f16)
    return raw.reshape(n_out, -1)


@needs_kernel
@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize(
    "n_out,n_in", [(1, 32), (7, 96), (16, 64), (17, 160), (33, 576), (100, 1536)], ids=lambda v: str(v)
)
def test_kernel_on_random_blocks_equals_the_float32_kernel_on_their_dequantization(qtype, n_out, n_in):
    """Any shape (rows not a multiple of the 16-row groups, inputs ending in a half k-block), any block
    bytes: linear_q equals Kernel.linear on gguf.quants.dequantize of the same bytes, bit for bit, on
    1-3 threads and in the scalar reference; rows given in any order (addresses) permute the outputs."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    raw = random_blocks(qtype, n_out, n_in, seed=n_out * 1000 + n_in)
    w = np.asarray(dequantize(raw, GGMLQuantizationType[qtype]), dtype=np.float32)  # (n_out, n_in)
    assert w.shape == (n_out, n_in) and np.isfinite(w).all()
    lin = Linear(w)
    k = kernels.load()
    rows = (raw.ctypes.data + np.arange(n_out) * raw.shape[1]).astype(np.uintp)
    order = np.random.default_rng(n_in).permutation(n_out)
    for name, x in probe_inputs(n_in, seed=n_out).items():
        want = bits(lin(x[None])[0])
        for threads, ref in ((0, False), (1, False), (3, False), (1, True)):
            out = np.empty(n_out, np.float32)
            k.linear_q(x, rows, kernels.QTYPES[qtype], out, threads=threads, reference=ref)
            assert np.array_equal(bits(out), want), f"x={name} threads={threads} reference={ref}"
        out = np.empty(n_out, np.float32)
        k.linear_q(x, np.ascontiguousarray(rows[order]), kernels.QTYPES[qtype], out)
        assert np.array_equal(bits(out), want[order]), f"x={name} rows permuted"


# ---- the real GGUF ------------------------------------------------------------------------------


@needs_kernel
@needs_vector_q
def test_every_weight_product_of_the_real_gguf_reads_its_blocks_and_gives_the_float32_bits(smollm2):
    """All 121 products (30 x wqkv, wo, w_gate_up, w_down and the tied Q8_0 head), i.e. every Q4_1/Q8_0
    tensor of the file, attn_q/attn_k through the un-permuted row order: the one-row product from the
    GGUF blocks equals the float32 panels' bit for bit, for inputs from 1e-30 to 1e30, vectorized,
    scalar (reference=True, what a machine without AVX2 runs) and on 1 or 2 threads."""
    if smollm2.config.vocab != 49152:
        pytest.skip("not the default SmolLM2 file")
    assert smollm2.decode.startswith("quantized Q4_1/Q8_0 for 121 of 121"), smollm2.decode
    k = kernels.load()
    types, compared = set(), 0
    for i, (label, lin) in enumerate(linears(smollm2.llama)):
        assert lin.decode_quantized, label
        q = lin.quant
        types.add(q.qtype)
        assert q.rows.shape == (lin.n_out,) and q.nbytes == lin.n_out * lin.n_in // 32 * kernels.QBLOCK_BYTES[q.qtype]
        probes = probe_inputs(lin.n_in, seed=i)
        if label != "head" and i % 10:  # every product on two inputs, one in ten (and the head) on all six
            probes = {n: probes[n] for n in ("normal", "spread")}
        for name, x in probes.items():
            want = bits(f32_product(lin, x))
            assert np.array_equal(bits(lin(x[None])[0]), want), f"{label} x={name}"
            if name == "normal":
                for threads, ref in ((1, False), (2, False), (1, True)):
                    out = np.empty(lin.n_out, np.float32)
                    k.linear_q(x, q.rows, kernels.QTYPES[q.qtype], out, threads=threads, reference=ref)
                    assert np.array_equal(bits(out), want), f"{label} threads={threads} reference={ref}"
            compared += 1
    assert types == {"Q4_1", "Q8_0"} and compared >= 250


@needs_kernel
@needs_vector_q
def test_greedy_decode_from_quantized_blocks_has_the_float32_logits_bits_at_every_step(smollm2):
    """24 greedy steps after a prompt, quantized decode vs the same session on the float32 weights:
    identical logits bits at every step; and each decoded row equals the same position of one prefill."""
    decode_both_ways(smollm2, smollm2.tokenizer.encode("The capital of France is"), 24)


def test_decode_reads_about_a_sixth_of_the_float32_bytes(smollm2):
    n32 = smollm2.llama.nbytes
    nq = smollm2.llama.decode_nbytes
    if kernels.load() is None or not smollm2.decode.startswith("quantized"):
        assert nq == n32
    else:
        assert 0.15 * n32 < nq < 0.2 * n32, (nq, n32)


# ---- settings -----------------------------------------------------------------------------------


def test_an_unknown_decode_setting_is_refused_naming_the_choices(monkeypatch):
    monkeypatch.setenv(ENV_DECODE, "fast")
    with pytest.raises(SettingError) as e:
        decode_choice()
    msg = str(e.value)
    assert f"{ENV_DECODE}='fast'" in msg and all(c in msg for c in ("auto", "quantized", "f32"))
    with pytest.raises(SettingError):
        numerics_path()  # so `python -m impl` and the report header refuse it before any output


def test_the_numerics_line_names_the_decode_path(monkeypatch):
    monkeypatch.delenv(ENV_DECODE, raising=False)
    line = numerics_path()
    assert "; decode: " in line and line.index("linear: ") < line.index("decode: ") < line.index("attention: ")
    if VECTOR_Q:
        assert "quantized GGUF blocks" in decode_path() and kernels.load().q_isa in decode_path()
    elif kernels.load() is not None:
        assert decode_path().startswith("float32 weights (the ") and "block decoder is scalar" in decode_path()
    monkeypatch.setenv(ENV_DECODE, "f32")
    assert decode_path() == f"float32 weights ({ENV_DECODE}=f32)"


def test_quantized_without_the_kernel_is_an_error_and_auto_falls_back(monkeypatch):
    monkeypatch.setattr(kernels, "_state", {"kernel": None, "why": "forced by the test"})
    monkeypatch.setenv(ENV_DECODE, "quantized")
    with pytest.raises(SettingError, match="forced by the test"):
        decode_path()
    monkeypatch.setenv(ENV_DECODE, "auto")
    assert decode_path().startswith("float32 weights")


# ---- small GGUF files of several tensor types ---------------------------------------------------

TOKENS = [chr(c) for c in range(63, 127)] + ["AB"]  # printable ASCII maps to itself under byte-level BPE
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 4, 2, 16, 96  # FFN = 96: w_down's k ends in a half k-block


def write_gguf(
    path: Path,
    matrix_type: str,
    embd_type: str,
    overrides: dict[str, str] | None = None,
    tied: bool = True,
    seed: int = 0,
) -> Path:
    """A 2-layer llama GGUF with random weights, matrices stored as ``matrix_type``, token_embd as ``embd_type``."""
    import gguf
    from gguf.quants import quantize

    rng = np.random.default_rng(seed)
    vocab = len(TOKENS)  # 65: the head's last 16-row group is short
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(TOKENS)
    w.add_token_types([1] * vocab)
    w.add_token_merges(["A B"])

    def add(name: str, arr: np.ndarray, qtype: str) -> None:
        qtype = (overrides or {}).get(name, qtype)
        arr = arr.astype(np.float32)
        if qtype == "F32":
            w.add_tensor(name, arr)
        elif qtype == "F16":
            w.add_tensor(name, arr.astype(np.float16))
        else:
            t = gguf.GGMLQuantizationType[qtype]
            w.add_tensor(name, quantize(arr, t), raw_dtype=t)  # element shape from the byte shape

    def mat(o: int, i: int) -> np.ndarray:
        return rng.standard_normal((o, i)) * 0.1

    add("token_embd.weight", rng.standard_normal((vocab, HIDDEN)), embd_type)
    if not tied:
        add("output.weight", mat(vocab, HIDDEN), matrix_type)
    add("output_norm.weight", 1 + 0.1 * rng.standard_normal(HIDDEN), "F32")
    for i in range(2):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", 1 + 0.1 * rng.standard_normal(HIDDEN), "F32")
        add(b + "ffn_norm.weight", 1 + 0.1 * rng.standard_normal(HIDDEN), "F32")
        add(b + "attn_q.weight", mat(HEADS * HEAD_DIM, HIDDEN), matrix_type)
        add(b + "attn_k.weight", mat(KV_HEADS * HEAD_DIM, HIDDEN), matrix_type)
        add(b + "attn_v.weight", mat(KV_HEADS * HEAD_DIM, HIDDEN), matrix_type)
        add(b + "attn_output.weight", mat(HIDDEN, HEADS * HEAD_DIM), matrix_type)
        add(b + "ffn_gate.weight", mat(FFN, HIDDEN), matrix_type)
        add(b + "ffn_up.weight", mat(FFN, HIDDEN), matrix_type)
        add(b + "ffn_down.weight", mat(HIDDEN, FFN), matrix_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def fresh_load(monkeypatch, tmp_path):
    """load_model with its per-process model cache emptied and the float32 cache in tmp_path (or off)."""
    import impl.model as model_pkg
    from impl.model import f32cache

    monkeypatch.setattr(model_pkg, "_cache", {})

    def load(path: Path, cache: str = "on"):
        monkeypatch.setenv(f32cache.ENV_DIR, "off" if cache == "off" else str(tmp_path / "wcache"))
        model_pkg._cache.clear()
        return model_pkg.load_model(path)

    return load


def decode_both_ways(model, prompt: list[int] | None = None, n: int = 6) -> None:
    """Greedy decode on the quantized path and on the float32 weights (quantized blocks detached): the
    same tokens and logits bits at every step; and every decoded row equals the same position of one prefill."""
    prompt = prompt or [3, 17, 40, 8, 64, 1]
    assert any(lin.decode_quantized for _, lin in linears(model.llama))

    def run():
        s = model.session()
        rows = [s.prefill(prompt)[-1].copy()]
        toks = []
        for _ in range(n):
            toks.append(int(np.argmax(s.last_logits)))
            rows.append(s.step(toks[-1]).copy())
        return np.stack(rows), toks

    quant, toks = run()
    with gguf_quant.detached(model.llama):
        assert not any(lin.decode_quantized for _, lin in linears(model.llama))
        f32, toks_f32 = run()
    assert all(lin.decode_quantized for _, lin in linears(model.llama) if lin.quant is not None)
    assert toks == toks_f32
    for step in range(n + 1):
        assert np.array_equal(bits(quant[step]), bits(f32[step])), f"step {step}"
    full = model.session().prefill(prompt + toks[:-1])  # the decoded positions, prefilled in one call
    assert np.array_equal(bits(full[len(prompt) - 1 :]), bits(quant[:n]))


@needs_kernel
@needs_vector_q
@pytest.mark.parametrize("cache", ["on", "off"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied-head", "own-head"])
def test_a_q4_1_q8_0_file_decodes_quantized_with_float32_bits_loaded_or_cached(tmp_path, fresh_load, cache, tied):
    """A small Q4_1/Q8_0 llama: every product is served from its blocks, first load (read_gguf's index)
    and, with the cache on, a second load from the float32 cache (the manifest's index, GGUF mapped
    again); either way the decoded logits have the float32 path's bits, including a 65-row head
    (a short last row group) and w_down's 96-wide input (a half k-block)."""
    path = write_gguf(tmp_path / "tiny.gguf", "Q4_1", "Q8_0", tied=tied)
    loads = 2 if cache == "on" else 1
    for n in range(loads):
        model = fresh_load(path, cache)
        assert model.decode.startswith("quantized") and "for 9 of 9 weight products" in model.decode, model.decode
        assert {lin.quant.qtype for _, lin in linears(model.llama)} == ({"Q4_1", "Q8_0"} if tied else {"Q4_1"})
        for label, lin in linears(model.llama):
            x = probe_inputs(lin.n_in, seed=n)["spread"]
            assert np.array_equal(bits(lin(x[None])[0]), bits(f32_product(lin, x))), label
        decode_both_ways(model)


@needs_kernel
@needs_vector_q
def test_the_q_and_k_rows_follow_unpermute_rope_rows(tmp_path, fresh_load, monkeypatch):
    """The quantized row order is unpermute_rope_rows applied to row numbers: with that function replaced
    (here by the identity, as liar model.no_unpermute does) both paths change together, never apart."""
    from impl.model import gguf_load

    path = write_gguf(tmp_path / "tiny.gguf", "Q4_1", "Q8_0")
    honest = fresh_load(path, "off")
    monkeypatch.setattr(gguf_load, "unpermute_rope_rows", lambda w, n_head: w)
    monkeypatch.setattr(gguf_quant, "unpermute_rope_rows", gguf_load.unpermute_rope_rows)
    kept = fresh_load(path, "off")
    x = probe_inputs(HIDDEN, seed=3)["normal"]
    a, b = honest.llama.layers[0].wqkv, kept.llama.layers[0].wqkv
    assert not np.array_equal(f32_product(a, x), f32_product(b, x))  # the order matters
    assert np.array_equal(bits(b(x[None])[0]), bits(f32_product(b, x)))
    decode_both_ways(kept, n=3)


@pytest.mark.parametrize("matrix_type,embd_type", [("F32", "F32"), ("F16", "F16"), ("Q8_0", "F32")])
def test_a_file_without_quantized_matrices_decodes_from_float32(
    tmp_path, fresh_load, matrix_type, embd_type, monkeypatch
):
    """F32/F16 tensors: nothing attached where the types are not Q4_1/Q8_0, decode as before; ``quantized``
    then refuses the file naming a product and its types."""
    path = write_gguf(tmp_path / "plain.gguf", matrix_type, embd_type)
    model = fresh_load(path, "off")
    quantized = {label for label, lin in linears(model.llama) if lin.quant is not None}
    if matrix_type == "Q8_0" and VECTOR_Q:  # the layers from blocks, the F32 head not
        assert quantized == {label for label, _ in linears(model.llama)} - {"head"}, model.decode
        assert "float32 for the rest: first head: tensor types F32" in model.decode
    else:
        assert not quantized and model.decode.startswith("float32"), model.decode
    s = model.session()
    s.prefill([5, 6, 7])
    assert len(s.generate([], 3)) == 3
    if kernels.load() is not None:
        monkeypatch.setenv(ENV_DECODE, "quantized")
        with pytest.raises(SettingError, match=r"KVPROOF_DECODE=quantized but \d+ weight products"):
            fresh_load(path, "off")


@needs_kernel
@needs_vector_q
def test_mixed_types_inside_one_product_keep_that_product_on_float32(tmp_path, fresh_load):
    """attn_v stored F16 beside Q4_1 attn_q/attn_k: that layer's wqkv stays float32, the rest quantized."""
    path = write_gguf(tmp_path / "mixed.gguf", "Q4_1", "Q8_0", overrides={"blk.1.attn_v.weight": "F16"})
    model = fresh_load(path, "off")
    off = {label for label, lin in linears(model.llama) if lin.quant is None}
    assert off == {"blk.1.wqkv"}, model.decode
    assert "8 of 9" in model.decode and "F16/Q4_1" in model.decode
    decode_both_ways(model, n=3)


@needs_kernel
def test_auto_decodes_from_the_float32_panels_on_a_build_whose_block_decoder_is_scalar(
    tmp_path, fresh_load, monkeypatch
):
    """A portable build decodes blocks with the scalar loop (slower than the float32 panels, same bits): auto
    attaches nothing and says why; ``quantized`` still reads the blocks there, with the float32 bits."""
    path = write_gguf(tmp_path / "tiny.gguf", "Q4_1", "Q8_0")
    monkeypatch.setattr(kernels.load(), "q_isa", "scalar")
    monkeypatch.delenv(ENV_DECODE, raising=False)
    model = fresh_load(path, "off")
    assert "decodes blocks with scalar code" in model.decode and all(
        lin.quant is None for _, lin in linears(model.llama)
    )
    assert decode_path().startswith("float32 weights (the ") and "scalar" in decode_path()
    monkeypatch.setenv(ENV_DECODE, "quantized")
    model = fresh_load(path, "off")
    assert model.decode.startswith("quantized") and "for 9 of 9" in model.decode, model.decode
    for label, lin in linears(model.llama):
        x = probe_inputs(lin.n_in, seed=2)["spread"]
        assert np.array_equal(bits(lin(x[None])[0]), bits(f32_product(lin, x))), label
    decode_both_ways(model, n=3)


def test_decode_setting_f32_or_no_kernel_attaches_nothing(tmp_path, fresh_load, monkeypatch):
    path = write_gguf(tmp_path / "tiny.gguf", "Q4_1", "Q8_0")
    monkeypatch.setenv(ENV_DECODE, "f32")
    model = fresh_load(path, "off")
    assert model.decode == f"float32 ({ENV_DECODE}=f32)"
    assert all(lin.quant is None for _, lin in linears(model.llama))
    monkeypatch.setenv(ENV_DECODE, "auto")
    monkeypatch.setattr(kernels, "_state", {"kernel": None, "why": "forced by the test"})
    model = fresh_load(path, "off")
    assert model.decode.startswith("float32 (no C kernel") and all(lin.quant is None for _, lin in linears(model.llama))
    s = model.session()
    s.prefill([5, 6, 7])
    assert len(s.generate([], 2)) == 2


@needs_kernel
@needs_vector_q
def test_a_linear_on_the_numpy_fallback_ignores_attached_blocks(tmp_path, fresh_load, monkeypatch):
    """Quantized decode has the kernel path's bits, so a Linear built for numpy-gemv never uses it."""
    path = write_gguf(tmp_path / "tiny.gguf", "Q4_1", "Q8_0")
    model = fresh_load(path, "off")
    lin = model.llama.layers[0].wo
    x = probe_inputs(lin.n_in, seed=1)["normal"][None]
    monkeypatch.setattr(kernels, "_state", {"kernel": None, "why": "forced by the test"})
    gemv = Linear(lin.weight())
    want = gemv(x)
    gemv.quant = lin.quant
    assert gemv.kernel is None and not gemv.decode_quantized and gemv.decode_nbytes == gemv.nbytes
    assert np.array_equal(bits(gemv(x)), bits(want))
