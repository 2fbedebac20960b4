"""KV-T1: an append lands in its (layer, pos, head) slot, and reads back bit-exact."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from impl.attention import attend_one, causal_attention
from impl.cache import KVGeometry
from impl.kv import KVCache
from impl.model.llama import rmsnorm, silu
from impl.model.session import Session
from impl.rope import RopeTable, apply_rope
from witnesses.synthetic import VOCAB, force_numpy_fallback, fresh_tiny_llama, geometries, tiny_llama, token_ids


def tag(layer: int, pos: int, head: int, d: np.ndarray) -> np.ndarray:
    """A value that names its slot; exact in float32 (< 2**24)."""
    return (((layer * 64 + pos) * 8 + head) * 32 + d).astype(np.float32)


def test_append_lands_in_its_layer_pos_head_slot_and_reads_back_exactly(evidence):
    slot_property(evidence)


def test_append_lands_in_its_slot_and_reads_back_exactly_on_the_numpy_fallback(monkeypatch, evidence):
    """The slot property with the kernel switched off (as without a C compiler): the read-back then goes
    through causal_attention's numpy loop and attend_one's reshape of the cached rows to (n, Hkv, D), the
    path the proof describes, which the kernel path never runs."""
    force_numpy_fallback(monkeypatch)
    slot_property(evidence)


def slot_property(evidence) -> None:
    """Tagged K, k_raw, V appended in random chunks land in their (layer, pos, head) slots, and attention
    with a window of 1 reads each V row back bit for bit, on the attention path in force."""

    @given(geo=geometries, chunks=st.lists(st.integers(1, 6), min_size=1, max_size=6))
    def prop(geo, chunks):
        L, H, D = geo["n_layers"], geo["n_kv_heads"], geo["head_dim"]
        cache = KVCache(KVGeometry(L, H, D), [RopeTable(10000.0, D, 64)] * L, capacity=2)  # tiny: growth is exercised
        d = np.arange(D)
        for t in chunks:
            start = len(cache)
            pos = cache.reserve(t)
            for layer in range(L):
                k_raw = np.stack([np.concatenate([tag(layer, p, h, d) for h in range(H)]) for p in pos])  # (t, H*D)
                cache.write(layer, start, k_raw, k_raw + 0.5, -k_raw)
        n = len(cache)
        assert n == sum(chunks) and list(cache.pos) == list(range(n))
        misplaced = 0
        for layer in range(L):
            for p in range(n):
                for h in range(H):
                    want = tag(layer, p, h, d)
                    cols = slice(h * D, (h + 1) * D)
                    misplaced += not np.array_equal(cache.k_raw[layer][p, cols], want)
                    misplaced += not np.array_equal(cache.k[layer][p, cols], want + 0.5)
                    misplaced += not np.array_equal(cache.v[layer][p, cols], -want)
        evidence.observe("misplaced_slots", misplaced)
        assert misplaced == 0, f"{misplaced} slots hold another slot's value"
        # read back through the attention path: with a window of 1 a query sees only
        # its own key, the softmax weight is exactly 1, and the output is that V row
        q = np.random.default_rng(n).standard_normal((n, H, 2, D)).astype(np.float32)
        for layer in range(L):
            out = causal_attention(q, cache, layer, 0, 1, 1 / np.sqrt(D))  # (n, H*2*D)
            got = out.reshape(n, H, 2, D)
            want = cache.v[layer].reshape(n, H, 1, D)
            delta = float(np.max(np.abs(got - want)))
            evidence.observe("max_abs_delta", delta)
            assert np.array_equal(got, np.broadcast_to(want, got.shape)), f"layer {layer}: read-back differs"
        evidence.count("examples")

    prop()


def uncached_reference(model, ids: list[int]):
    """K, k_raw, V per layer and logits, computed position by position with no KVCache.

    Uses the model's weights and numerics kernels (Linear, rmsnorm, apply_rope)
    but its own storage and its own attention loop, so any slip in the
    cache's reserve/write/read path shows up as a difference.
    """
    c = model.config
    t = len(ids)
    x = model.embed[np.asarray(ids)]
    ks, kraws, vs = [], [], []
    for li, L in enumerate(model.layers):
        h = rmsnorm(x, L.attn_norm, c.rms_eps)
        qkv = L.wqkv(h)
        q = qkv[:, : c.q_dim].reshape(t, c.n_heads, c.head_dim)
        k_raw = qkv[:, c.q_dim : c.q_dim + c.kv_dim].reshape(t, c.n_kv_heads, c.head_dim)
        v = np.ascontiguousarray(qkv[:, c.q_dim + c.kv_dim :])
        cos, sin = model.ropes[li].rows(np.arange(t))
        q, k = apply_rope(q, cos, sin), apply_rope(k_raw, cos, sin).reshape(t, c.kv_dim)
        qg = q.reshape(t, c.n_kv_heads, c.group, c.head_dim)
        att = np.stack([attend_one(qg[j], k[: j + 1], v[: j + 1], model.scale).reshape(-1) for j in range(t)])
        x = x + L.wo(att)
        h = rmsnorm(x, L.ffn_norm, c.rms_eps)
        gu = L.w_gate_up(h)
        x = x + L.w_down(silu(gu[:, : c.ffn]) * gu[:, c.ffn :])
        ks.append(k)
        kraws.append(k_raw.reshape(t, c.kv_dim))
        vs.append(v)
    return ks, kraws, vs, model.head(rmsnorm(x, model.norm, c.rms_eps))


def test_cached_path_equals_uncached_reference_position_by_position(evidence):
    cached_equals_uncached_property(evidence, tiny_llama)


def test_cached_path_equals_uncached_reference_on_the_numpy_fallback(monkeypatch, evidence):
    """The same with the kernel switched off (as without a C compiler), on models built under it: the cached
    path reads K/V back through causal_attention's numpy loop, the reference through attend_one directly."""
    force_numpy_fallback(monkeypatch)
    cached_equals_uncached_property(evidence, fresh_tiny_llama)


def cached_equals_uncached_property(evidence, build) -> None:
    """Prefill + decode steps on ``build(**geometry)``'s model build a cache and logits bit-identical to the
    uncached reference; so does generate's prompt path (its last row)."""

    @given(geo=geometries, n_prefill=st.integers(1, 9), n_steps=st.integers(0, 6), seed=st.integers(0, 999))
    def prop(geo, n_prefill, n_steps, seed):
        model = build(**geo)
        ids = token_ids(n_prefill + n_steps, seed)
        s = Session(model)
        rows = [s.prefill(ids[:n_prefill])] + [s.step(t)[None] for t in ids[n_prefill:]]
        logits = np.concatenate(rows)
        ks, kraws, vs, ref_logits = uncached_reference(model, ids)
        assert list(s.cache.pos) == list(range(len(ids)))
        delta = 0.0
        for got, want in ((s.cache.k, ks), (s.cache.k_raw, kraws), (s.cache.v, vs), ([logits], [ref_logits])):
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape
                delta = max(delta, float(np.max(np.abs(g.astype(np.float64) - w))))
                assert np.array_equal(g, w)
        # the prompt path (generate feeds its prompt with logits_rows="last"): same cache, same last row
        g = Session(model)
        g.generate(ids, 0)
        assert list(g.cache.pos) == list(range(len(ids)))
        for got, want in (
            (g.cache.k, ks),
            (g.cache.k_raw, kraws),
            (g.cache.v, vs),
            ([g.last_logits], [ref_logits[-1]]),
        ):
            for a, w in zip(got, want, strict=True):
                assert a.shape == w.shape
                delta = max(delta, float(np.max(np.abs(a.astype(np.float64) - w))))
                assert np.array_equal(a, w)
        evidence.observe("max_abs_delta", delta)
        evidence.count("examples")

    prop()


# (ids fed, the first id outside 0..VOCAB-1 the error must name); VOCAB = 61 -- worked out by hand
OUT_OF_VOCAB = [
    ([61], 61),
    ([-1], -1),
    ([3, -1], -1),
    ([0, 61], 61),
    ([60, 0, 64], 64),
    ([5, 61, -2], 61),
    ([-3, 70], -3),
    ([0, 1, 2, -61], -61),
    ([VOCAB + 100, 0], VOCAB + 100),
]


def test_forward_refuses_out_of_vocabulary_ids_and_leaves_the_cache_unchanged(evidence):
    """Llama.forward refuses any token id outside 0..vocab-1 (a negative id must not wrap around the
    embedding table) with a ValueError naming the first such id, before the cache changes; the boundary
    ids 0 and vocab-1 are accepted."""
    model = tiny_llama(n_layers=2)
    s = Session(model)
    s.prefill([0, VOCAB - 1, 7])
    before = [a.copy() for name in ("k", "k_raw", "v") for a in getattr(s.cache, name)] + [s.cache.pos.copy()]
    for ids, bad in OUT_OF_VOCAB:
        try:
            model.forward(np.asarray(ids, dtype=np.int64), s.cache, s.window)
        except ValueError as e:
            assert f"id={bad} " in str(e), f"forward({ids}) named the wrong id: {e}"
        else:
            raise AssertionError(f"forward({ids}) accepted an id outside 0..{VOCAB - 1}")
        evidence.count("refused")
        after = [a for name in ("k", "k_raw", "v") for a in getattr(s.cache, name)] + [s.cache.pos]
        assert len(s.cache) == 3 and all(np.array_equal(a, b) for a, b in zip(before, after, strict=True)), (
            f"a refused forward({ids}) changed the cache"
        )
    for ids in ([0], [VOCAB - 1], [0, VOCAB - 1, 0]):
        n0 = len(s.cache)
        out = model.forward(np.asarray(ids, dtype=np.int64), s.cache, s.window)
        assert out.shape == (len(ids), VOCAB) and len(s.cache) == n0 + len(ids)
        evidence.count("accepted")
