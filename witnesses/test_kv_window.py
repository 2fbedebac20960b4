"""KV-T3: the window masks exactly the out-of-window positions; prefix splice equals recompute."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.attention import attention_kernel, causal_attention, window_lo
from impl.model.session import Session
from witnesses.synthetic import cache_delta, force_numpy_fallback, fresh_tiny_llama, tiny_llama, token_ids
from witnesses.test_kv_slots import uncached_reference

# (pos, query row, W, lowest visible row) -- worked out by hand from "visible iff pos >= p - W + 1"
WINDOW_TABLE = [
    ([0, 1, 2, 3, 4], 4, None, 0),  # no window: everything
    ([0, 1, 2, 3, 4], 4, 1, 4),  # W=1: only itself
    ([0, 1, 2, 3, 4], 4, 2, 3),
    ([0, 1, 2, 3, 4], 4, 5, 0),  # W = length: everything
    ([0, 1, 2, 3, 4], 4, 99, 0),
    ([0, 1, 2, 3, 4], 0, 3, 0),  # first position
    ([0, 1, 2, 7, 8], 4, 3, 3),  # gapped pos: p=8 sees pos >= 6, i.e. rows 3 (pos 7) and 4
    ([0, 1, 2, 7, 8], 3, 3, 3),  # p=7 sees pos >= 5: only itself
    ([0, 1, 2, 7, 8], 4, 7, 2),  # p=8 sees pos >= 2: rows 2..4
    ([5, 6, 9], 2, 4, 1),  # pos not starting at 0
]


@pytest.mark.parametrize("pos,row,window,want", WINDOW_TABLE)
def test_window_lowest_visible_index_table(pos, row, window, want, evidence):
    got = window_lo(np.asarray(pos, dtype=np.int64), row + 1, window)
    evidence.record("lowest_visible", got)
    assert got == want


def visible_rows(pos, i, window):
    """Rows query row i may see, from the definition: j <= i with pos[j] >= pos[i] - window + 1."""
    rows = np.arange(i + 1)
    if window is None:
        return rows
    return rows[pos[: i + 1] >= pos[i] - window + 1]


def masked_reference(q, k, v, pos, window, scale):
    """Attention for every query row over exactly its visible rows, found by the witness's own mask.

    q (T, Hkv, G, D), k/v (T, Hkv*D), pos (T,); query row i sees rows j <= i
    with pos[j] >= pos[i] - window + 1. Written independently of impl.attention
    (its own mask from the definition), with the numpy path's float32 operations over
    the visible rows only (a window is the same bits as attention over its rows alone).
    """
    t, hkv, _, d = q.shape
    out = []
    for i in range(t):
        rows = visible_rows(pos, i, window) if window is not None else np.arange(i + 1)
        lo = int(rows[0])
        assert np.array_equal(rows, np.arange(lo, i + 1)), f"visible rows of query {i} are not a run: {rows}"
        kh = k[lo : i + 1].reshape(i + 1 - lo, hkv, d).transpose(1, 0, 2)  # (Hkv, n, D)
        vh = v[lo : i + 1].reshape(i + 1 - lo, hkv, d).transpose(1, 0, 2)
        s = np.ascontiguousarray(np.matmul(kh, q[i].transpose(0, 2, 1)).transpose(0, 2, 1)) * np.float32(scale)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        w = e / e.sum(axis=-1, keepdims=True)
        out.append(np.matmul(w, vh).reshape(-1))
    return np.stack(out)


def rows_reference(kernel, q, k, v, pos, window, scale):
    """Attention for every query row over exactly its visible rows, copied out by the witness's own mask.

    Each query goes to the kernel alone with a fresh contiguous array holding only its visible
    rows and no window (lo = 0, hi = their count): the kernel never sees a window or a row
    outside it, so the window logic under test (window_lo, causal_attention's lo/hi) is not used.
    """
    out = []
    for i in range(q.shape[0]):
        rows = visible_rows(pos, i, window)
        kv, vv = np.ascontiguousarray(k[rows]), np.ascontiguousarray(v[rows])
        out.append(kernel.attend(q[i : i + 1], kv, vv, np.array([0]), np.array([len(rows)]), scale)[0])
    return np.stack(out)


def float64_reference(q, k, v, pos, window, scale):
    """The same attention in float64 from the definition (-inf mask), independent of either float32 path."""
    t, hkv, g, d = q.shape
    out = np.empty((t, hkv * g * d))
    for i in range(t):
        rows = visible_rows(pos, i, window)
        kh = k[rows].astype(np.float64).reshape(len(rows), hkv, d)
        vh = v[rows].astype(np.float64).reshape(len(rows), hkv, d)
        s = np.einsum("hgd,nhd->hgn", q[i].astype(np.float64), kh) * scale
        w = np.exp(s - s.max(axis=-1, keepdims=True))
        w /= w.sum(axis=-1, keepdims=True)
        out[i] = np.einsum("hgn,nhd->hgd", w, vh).reshape(-1)
    return out


def test_windowed_attention_equals_masked_reference(evidence):
    """Bit for bit against the reference of the attention path in force (numpy: the visible rows alone
    with the same float32 steps; kernel: the kernel over only the visible rows, which the witness copies
    out itself), and within 1e-5 of a float64 reference on either path."""
    masked_reference_property(evidence, tiny_llama(n_layers=2, n_kv_heads=2, group=2, head_dim=8))


def test_windowed_attention_equals_masked_reference_on_the_numpy_fallback(monkeypatch, evidence):
    """The same with the kernel switched off (as without a C compiler, or under KVPROOF_KERNEL=numpy or
    KVPROOF_ATTENTION=numpy): causal_attention's numpy loop and attend_one's visible rows against the masked
    reference bit for bit, and against float64, whatever path the process would take by default."""
    force_numpy_fallback(monkeypatch)
    masked_reference_property(evidence, fresh_tiny_llama(n_layers=2, n_kv_heads=2, group=2, head_dim=8))


def masked_reference_property(evidence, model) -> None:
    """causal_attention over random windows of a session's cache (of ``model``) equals the reference of the
    attention path in force bit for bit, and the float64 reference within 1e-5."""
    kernel = attention_kernel()
    evidence.record("attention_path", "kernel" if kernel is not None else "numpy")

    @given(n=st.integers(1, 30), window=st.one_of(st.none(), st.integers(1, 12)), seed=st.integers(0, 9999))
    def prop(n, window, seed):
        s = Session(model, window=window)
        s.prefill(token_ids(n, seed))
        q = np.random.default_rng(seed).standard_normal((n, 2, 2, 8)).astype(np.float32)
        for layer in range(2):
            got = causal_attention(q, s.cache, layer, 0, window, model.scale)
            args = (q, s.cache.k[layer], s.cache.v[layer], s.cache.pos, window, model.scale)
            want = masked_reference(*args) if kernel is None else rows_reference(kernel, *args)
            delta = float(np.max(np.abs(got - want)))
            evidence.observe("max_abs_delta", delta)
            assert np.array_equal(got, want), f"layer {layer}: max|delta|={delta}"
            d64 = float(np.max(np.abs(got - float64_reference(*args))))
            evidence.observe("max_abs_delta_float64", d64)
            assert d64 <= 1e-5, f"layer {layer}: {d64} from the float64 reference"
        evidence.count("examples")

    prop()


def test_window_at_least_the_sequence_equals_full_causal(evidence):
    @given(n=st.integers(1, 24), extra=st.integers(0, 5), seed=st.integers(0, 9999))
    def prop(n, extra, seed):
        model = tiny_llama()
        ids = token_ids(n, seed)
        full, win = Session(model), Session(model, window=n + extra)
        lf, lw = full.prefill(ids), win.prefill(ids)
        delta = max(float(np.max(np.abs(lf - lw))), cache_delta(full.cache, win.cache))
        evidence.observe("max_abs_delta", delta)
        assert np.array_equal(lf, lw) and delta == 0

    prop()


def test_no_window_is_identical_on_cacheless_prefill_decode_and_forked_paths(evidence):
    model = tiny_llama(n_layers=3)
    ids = token_ids(20, 7)
    _, _, _, cacheless = uncached_reference(model, ids)
    a = Session(model)
    prefill_decode = np.concatenate([a.prefill(ids[:8])] + [a.step(t)[None] for t in ids[8:]])
    b = Session(model)
    b.prefill(ids[:11])
    f = b.fork()
    forked = np.concatenate([f.prefill(ids[11:15])] + [f.step(t)[None] for t in ids[15:]])
    delta = max(float(np.max(np.abs(prefill_decode - cacheless))), float(np.max(np.abs(forked - cacheless[11:]))))
    evidence.record("max_abs_delta", delta)
    assert np.array_equal(prefill_decode, cacheless)
    assert np.array_equal(forked, cacheless[11:])


def test_window_of_three_changes_the_last_logits(smollm2, evidence):
    """Control: on real weights a short window really changes the output."""
    ids = smollm2.tokenizer.encode("The weather in Paris today is sunny and warm, so")
    full = smollm2.session().prefill(ids)[-1]
    w3 = smollm2.session(window=3).prefill(ids)[-1]
    delta = float(np.max(np.abs(full - w3)))
    evidence.record("max_abs_delta", delta)
    assert delta > 0


def test_prefix_splice_equals_full_recompute_on_real_weights(smollm2, evidence):
    tk = smollm2.tokenizer
    prefix = tk.encode("You are a careful assistant. Answer briefly.\nQuestion:")
    suffixes = [tk.encode(" What is the capital of France?\nAnswer:"), tk.encode(" Name a red fruit.\nAnswer:")]
    base = smollm2.session()
    base.prefill(prefix)
    base_len = len(base)
    # two splices from one prefix session: a clone that shared arrays would let one clobber the other
    spliced = [smollm2.session_from_prefix(base, s) for s in suffixes]
    base.prefill(tk.encode(" Something else entirely."))  # and the source moving on must not reach them
    for sp, suffix in zip(spliced, suffixes, strict=True):
        full = smollm2.session()
        lf = full.prefill(prefix + suffix)
        evidence.observe("max_abs_delta", float(np.max(np.abs(sp.last_logits - lf[-1]))))
        assert np.array_equal(sp.last_logits, lf[-1])
        assert len(sp) == len(full) == base_len + len(suffix)
        g1, g2 = sp.generate([], 8), full.generate([], 8)
        evidence.count("greedy_tokens_compared", len(g1))
        assert g1 == g2


def test_prefix_splice_property_on_random_prefixes(evidence):
    @given(n_pre=st.integers(1, 16), n_a=st.integers(1, 8), n_b=st.integers(1, 8), seed=st.integers(0, 9999))
    def prop(n_pre, n_a, n_b, seed):
        model = tiny_llama()
        ids = token_ids(n_pre + n_a + n_b, seed)
        pre, sa, sb = ids[:n_pre], ids[n_pre : n_pre + n_a], ids[n_pre + n_a :]
        base = Session(model)
        base.prefill(pre)
        spl_a = Session.fork(base)
        spl_a.prefill(sa)
        spl_b = Session.fork(base)
        spl_b.prefill(sb)
        for sp, suf in ((spl_a, sa), (spl_b, sb)):
            full = Session(model)
            full.prefill(pre + suf)
            delta = cache_delta(sp.cache, full.cache)
            evidence.observe("max_abs_delta", delta)
            assert delta == 0 and np.array_equal(sp.last_logits, full.last_logits)
        evidence.count("examples")

    prop()


def test_fork_carries_last_logits_and_its_clone_grows_and_evicts_like_a_fresh_cache(evidence):
    """A fork of a prefilled session predicts what the source predicts (last_logits equal, but its own
    copy) and continues with the same greedy tokens as a session that prefilled the prefix itself; a fork
    of an empty session has no last_logits. The cloned cache is a whole KVCache: prefilled past its
    capacity (64 rows, so storage grows) and then evicted, it equals a never-forked session doing the
    same, and the source is untouched."""
    model = tiny_llama(n_layers=2)
    pre, suffix = token_ids(9, 3), token_ids(70, 4)
    base = Session(model)
    assert Session.fork(base).last_logits is None
    base.prefill(pre)
    want = base.last_logits.copy()
    f = base.fork()
    assert f.last_logits is not None and np.array_equal(f.last_logits, want)
    assert not np.shares_memory(f.last_logits, base.last_logits), "the fork shares last_logits with its source"
    solo = Session(model)
    solo.prefill(pre)
    g_fork, g_solo = f.generate([], 4), solo.generate([], 4)
    assert g_fork == g_solo, f"fork continues {g_fork}, a session that prefilled the prefix continues {g_solo}"
    assert np.array_equal(base.last_logits, want), "generating on the fork changed the source's last_logits"
    # the cloned cache grows and evicts like a cache that was never cloned
    h, ref = base.fork(), Session(model)
    ref.prefill(pre)
    h.prefill(suffix)
    ref.prefill(suffix)
    assert h.cache.evict(5, 20) == ref.cache.evict(5, 20) == 20
    source = Session(model)
    source.prefill(pre)
    delta = max(cache_delta(h.cache, ref.cache), cache_delta(base.cache, source.cache))
    evidence.record("max_abs_delta", delta)
    assert delta == 0 and len(h) == len(pre) + len(suffix) - 20
