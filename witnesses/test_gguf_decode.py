"""Witnesses for GGUF-DEQUANT (obligations/GGUF-DEQUANT.yaml): impl's weights are the format's values.

The reference is witnesses/gguf_reference.py: the GGUF header parsed with
``struct`` and every tensor decoded from its raw blocks by ggml's block
definitions (Q4_1: w = d*q + m, low nibbles first; Q8_0: w = d*q; F32 as
is), sharing no code with impl or the ``gguf`` package that impl and the
transformers oracle both use. Comparison is on the float32 bit patterns
(uint32 views), so even -0.0 against +0.0 would count as a difference.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from witnesses import gguf_reference as ref

pytestmark = [pytest.mark.weights]

# NOTE: the fixtures below are session-scoped, not module-scoped: a card interleaves witnesses of
# several modules (GGUF-DEQUANT runs one of test_kv_chunking between two of these), and pytest tears
# a module's fixtures down whenever the next test is in another module, so the file would be read,
# dequantised and decoded again after every detour.


@pytest.fixture(scope="session")
def gguf_path():
    """The GGUF impl loads by default (KVPROOF_GGUF or the packaged SmolLM2)."""
    from impl.errors import WeightsError
    from impl.model.weights import resolve_weights

    try:
        return resolve_weights(None, verify=False).path
    except WeightsError as e:
        pytest.skip(f"weights unavailable: {e}")


@pytest.fixture(scope="session")
def reference(gguf_path) -> ref.ReferenceFile:
    """The file's bytes and index; .tensor(name) decodes one tensor by the format's definition (q/k rows in HF
    order), once per process (read-only, shared by every witness that compares it)."""
    return ref.ReferenceFile(gguf_path)


def _differs(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when ``got`` is float32 with ``want``'s shape and bits; else what differs, in words."""
    if got.shape != want.shape or got.dtype != np.float32:
        return f"shape={got.shape} dtype={got.dtype}, want shape={want.shape} float32"
    bad = got.view(np.uint32) != want.view(np.uint32)
    if not bad.any():
        return None
    first = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return (
        f"{int(bad.sum())} of {bad.size} values differ, first at {tuple(int(i) for i in first)}: "
        f"got {got[first]!r}, want {want[first]!r}"
    )


def _check(pairs, evidence, key: str, first_only: bool = False) -> list[str]:
    """Compare (label, got, want) triples; record how many and how many differ; return the failures.

    ``first_only``: stop at the first difference (the witness fails on it anyway; a wrong decoder
    then costs one tensor's comparison, not every tensor's). A run that finds none compares all.
    """
    failures = []
    n = 0
    for label, got, want in pairs:
        n += 1
        why = _differs(np.asarray(got), want)
        if why is not None:
            failures.append(f"{label}: {why}")
            if first_only:
                failures[-1] += f" (stopped at the first difference: {n} compared)"
                break
    evidence.record(f"{key}_checked", n)
    evidence.record(f"mismatched_{key}", len(failures))
    return failures


class _StoredTensor:
    """What impl's dequantize_tensor reads of a gguf.GGUFReader tensor (data, shape in ne order, tensor_type),
    made from the reference's own index of the file: raw block bytes for quantized types, float32 for F32."""

    def __init__(self, reference: ref.ReferenceFile, name: str) -> None:
        import gguf

        info = reference.infos[name]
        n = info.n_values
        if info.ggml_type == ref.F32:
            self.data = np.frombuffer(reference.buf, dtype=np.float32, count=n, offset=info.offset)
        else:
            nbytes = n // ref.BLOCK * ref.BLOCK_BYTES[info.ggml_type]
            self.data = np.frombuffer(reference.buf, dtype=np.uint8, count=nbytes, offset=info.offset)
        self.shape = info.ne
        self.tensor_type = gguf.GGMLQuantizationType(info.ggml_type)


def test_dequantize_tensor_decodes_one_stored_tensor_of_each_type_as_the_format_defines_it(reference, evidence):
    """impl's dequantize_tensor on the first tensor of each type in the file (attn_q/attn_k left out: their
    rows are permuted as stored), fed the raw bytes the reference indexed, equals the reference decode bit
    for bit. loader-tensors checks every tensor through read_gguf; this one costs one tensor per type, so a
    wrong block decoder is refuted in a second instead of after a whole read_gguf."""
    from impl.model.gguf_load import dequantize_tensor

    first: dict[str, str] = {}
    for name, info in reference.infos.items():
        if reference.permuted_heads(name) is None:
            first.setdefault(info.type_name, name)
    evidence.record("types_checked", len(first))
    failures = _check(
        (
            (f"{n} ({t})", dequantize_tensor(_StoredTensor(reference, n)), reference.tensor(n))
            for t, n in sorted(first.items())
        ),
        evidence,
        "per_type",
    )
    assert not failures, "dequantize_tensor differs from the format's definition:\n  " + "\n  ".join(failures)


@pytest.fixture(scope="session")
def gguf_read(gguf_path):
    """read_gguf's result, once per process (uncached: read_gguf never consults the float32 weights cache)."""
    from impl.model.gguf_load import read_gguf

    return read_gguf(gguf_path)


def test_loader_returns_every_tensor_as_the_format_defines_it(gguf_read, reference, evidence):
    """read_gguf's float32 tensors equal the reference decode of the raw blocks, bit for bit, for every tensor
    (in file order, failing at the first that differs)."""
    loaded = gguf_read.tensors
    names = list(reference.infos)
    missing = [n for n in names if n not in loaded]
    extra = sorted(set(loaded) - set(names))
    types: dict[str, int] = {}
    for info in reference.infos.values():
        types[info.type_name] = types.get(info.type_name, 0) + 1
    for name, n in sorted(types.items()):
        evidence.record(f"{name.lower()}_tensors", n)
    values = 0

    def pairs():
        nonlocal values
        for n in names:
            if n in loaded:
                values += reference.infos[n].n_values
                yield f"{n} ({reference.infos[n].type_name})", loaded[n], reference.tensor(n)

    failures = _check(pairs(), evidence, "tensors", first_only=True)
    evidence.record("values_checked", values)
    failures += [f"{n}: in the file, not in read_gguf's tensors" for n in missing]
    failures += [f"{n}: in read_gguf's tensors, not in the file" for n in extra]
    assert not failures, f"{len(failures)} tensors differ from the format's definition:\n  " + "\n  ".join(failures[:8])


def _forward_pairs(llama, reference, used: set[str]):
    """(label, array the forward reads, reference) per array of ``llama``; adds the file's tensor names to ``used``.

    Generated lazily: one layer's arrays (reference and Linear.weight() copies) alive at a time.
    """

    def w(*names: str) -> np.ndarray:
        """The reference tensor(s), concatenated along the output rows as Llama fuses them."""
        used.update(names)
        parts = [reference.tensor(n) for n in names]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

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


def _check_forward_arrays(llama, reference, evidence) -> list[str]:
    used: set[str] = set()
    failures = _check(_forward_pairs(llama, reference, used), evidence, "arrays")
    evidence.record("tensors_checked", len(used))
    return failures + [f"{n}: in the file, read by no array of the forward" for n in reference.infos if n not in used]


def test_the_forward_reads_every_tensor_as_the_format_defines_it(reference, evidence):
    """The arrays load_model's Llama computes with (through the float32 cache when on) equal the reference."""
    from impl.model import f32cache, load_model

    evidence.record("f32_cache", "off" if f32cache.cache_root() is None else "on")
    failures = _check_forward_arrays(load_model().llama, reference, evidence)
    assert not failures, f"{len(failures)} forward arrays differ from the format's definition:\n  " + "\n  ".join(
        failures[:8]
    )


def test_a_llama_built_from_the_file_and_rebuilt_from_its_state_reads_the_format_bits(gguf_read, reference, evidence):
    """What a cache miss runs: Llama(config, read_gguf tensors) holds the reference bits, and
    Llama.from_state(config, llama.state()) (what the float32 cache stores and serves) uses those
    very arrays, no copies, so a memory-mapped entry is what the forward reads."""
    from impl.model.llama import Llama

    fresh = Llama(gguf_read.config, gguf_read.tensors)
    failures = _check_forward_arrays(fresh, reference, evidence)
    st = fresh.state()
    again = Llama.from_state(gguf_read.config, st)
    shared, not_shared = 0, []
    for name, a in st.items():
        # every stored array must reappear, as itself, somewhere in the rebuilt model
        found = any(b is a for b in _model_arrays(again))
        shared += found
        if not found:
            not_shared.append(name)
    evidence.record("state_arrays", len(st))
    evidence.record("state_arrays_not_reused", len(not_shared))
    if not_shared:
        failures.append(f"from_state did not use {len(not_shared)} state arrays as they are: {not_shared[:5]}")
    linears = [("head", again.head, fresh.head)] + [
        (f"layers[{i}].{name}", getattr(La, name), getattr(Lf, name))
        for i, (La, Lf) in enumerate(zip(again.layers, fresh.layers, strict=False))
        for name in Llama.LINEARS
    ]
    if len(again.layers) != len(fresh.layers):
        failures.append(f"from_state: {len(again.layers)} layers, the fresh build {len(fresh.layers)}")
    for label, got, want in linears:  # the same blocks, read back as the same (out, in) weight
        why = _differs(got.weight(), want.weight())
        if why is not None:
            failures.append(f"from_state: {label}: {why}")
    assert not failures, f"{len(failures)} problems:\n  " + "\n  ".join(failures[:8])


def _model_arrays(llama):
    yield llama.embed
    yield llama.norm
    yield from llama.head.blocks
    for L in llama.layers:
        yield L.attn_norm
        yield L.ffn_norm
        for name in ("wqkv", "wo", "w_gate_up", "w_down"):
            yield from getattr(L, name).blocks


def test_stored_q_and_k_rows_are_not_in_hugging_face_order(reference, evidence):
    """Control: every attn_q/attn_k as stored differs from its HF-order reference, so the row order is really tested.

    With loader-tensors (impl's tensors equal the HF-order reference), this
    means impl's q/k differ from the rows as stored: a loader that skipped the
    un-permutation would fail loader-tensors.
    """
    differing = 0
    for name in reference.infos:
        if reference.permuted_heads(name) is not None:
            differing += int(
                not np.array_equal(reference.stored(name).view(np.uint32), reference.tensor(name).view(np.uint32))
            )
    evidence.record("qk_tensors_differing_as_stored", differing)


def test_the_float32_cache_serves_what_was_stored_and_refuses_any_other_entry(tmp_path, monkeypatch, evidence):
    """f32cache in a temporary folder, on a small random llama (per-layer RoPE bases, so the config's
    tuple must survive JSON): a stored entry loads back with the same config, tokenizer JSON and
    array bits, and the rebuilt forward gives the same logits; an entry whose data bytes, data hash,
    GGUF hash or producing code differ is refused (load returns None, never the wrong arrays); the
    code fingerprint changes with the gguf package's version (or, without one, its quants source)."""
    from importlib import metadata

    from impl.model import f32cache
    from impl.model.llama import Llama
    from impl.model.session import Session
    from witnesses.synthetic import tiny_llama, token_ids

    monkeypatch.setenv(f32cache.ENV_DIR, str(tmp_path / "cache"))
    model = tiny_llama(n_layers=2, theta=(10000.0, 50000.0))
    st, tok = model.state(), '{"model": "tiny"}'
    sha = "ab" * 32
    problems: list[str] = []

    def fresh_entry():
        entry = f32cache.store(sha, model.config, st, tok)
        assert entry == tmp_path / "cache" / sha[:16] and (entry / "manifest.json").is_file(), entry
        return entry

    fresh_entry()  # stores the entry (and checks where it went) that load must serve
    hit = f32cache.load(sha)
    if hit is None:
        problems.append("a valid entry was refused")
    else:
        config, got, tok_back = hit
        if config != model.config:
            problems.append(f"config {config} != stored {model.config}")
        if tok_back != tok:
            problems.append("tokenizer JSON changed")
        if sorted(got) != sorted(st) or any(
            not np.array_equal(got[k].view(np.uint32), np.asarray(st[k], dtype=np.float32).view(np.uint32))
            or got[k].shape != st[k].shape
            for k in st
        ):
            problems.append("arrays differ from those stored")
        else:
            ids = token_ids(6, 1)
            a, b = Session(model), Session(Llama.from_state(config, got))
            if not np.array_equal(a.prefill(ids), b.prefill(ids)):
                problems.append("the forward rebuilt from the entry gives other logits")

    def refused(label: str, edit) -> None:
        e = fresh_entry()
        edit(e)
        if f32cache.load(sha) is not None:
            problems.append(f"served an entry with {label}")

    def flip_byte(e):
        data = bytearray((e / "weights.f32").read_bytes())
        data[len(data) // 2] ^= 1
        (e / "weights.f32").write_bytes(bytes(data))

    def edit_manifest(**changes):
        def edit(e):
            man = json.loads((e / "manifest.json").read_text())
            man.update(changes)
            (e / "manifest.json").write_text(json.dumps(man))

        return edit

    cases = {
        "one data byte flipped": flip_byte,
        "another data sha256": edit_manifest(data_sha256="0" * 64),
        "another GGUF sha256": edit_manifest(gguf_sha256=sha[:16] + "cd" * 24),
        "another producing code": edit_manifest(code_sha256="1" * 64),
        "a truncated data file": lambda e: (e / "weights.f32").write_bytes((e / "weights.f32").read_bytes()[:-4]),
    }
    for label, edit in cases.items():
        refused(label, edit)

    honest = f32cache.code_fingerprint()
    monkeypatch.setattr(metadata, "version", lambda name: "0.0.0-other")
    other_version = f32cache.code_fingerprint()

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    source_a = f32cache.code_fingerprint()
    import gguf.quants

    fake = tmp_path / "quants.py"
    fake.write_text("# another gguf.quants\n")
    monkeypatch.setattr(gguf.quants, "__file__", str(fake))
    source_b = f32cache.code_fingerprint()
    if len({honest, other_version, source_a, source_b}) != 4:
        problems.append("the code fingerprint ignores the gguf package's version or its quants source")
    evidence.record("corruptions_tried", len(cases))
    evidence.record("cache_problems", len(problems))
    assert not problems, problems
