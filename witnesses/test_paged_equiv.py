"""PKV-EQUIV: attention through a page table is bit-identical to attention over a contiguous cache.

Also home of the attention-level gate helpers the other paged witnesses use
(``Gate``, ``feed``, ``round_inputs``): the seed gate's geometry of 2 layers,
4 query heads over 2 KV heads (grouped-query), head_dim 8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from impl.attention import causal_attention
from impl.cache import KVGeometry
from impl.designs import make_cache
from impl.errors import CacheError
from impl.kv import KVCache
from impl.model.session import Session
from impl.paged import BlockPool, PagedSequence
from impl.rope import RopeTable
from witnesses.synthetic import cache_delta, force_numpy_fallback, fresh_tiny_llama, tiny_llama, token_ids

NL, NKV, G, HD = 2, 2, 2, 8  # layers, KV heads, query heads per KV head, head_dim
GEOMETRY = KVGeometry(NL, NKV, HD)
KV_DIM = GEOMETRY.kv_dim
SCALE = float(1 / np.sqrt(HD))
ROUNDS = (5, 1, 3)  # the seed gate's append rounds: prefill, one decode step, a chunk
BLOCK_SIZES = (1, 2, 3, 4, 5, 7, 16)  # 1 and 3 divide 6 and 9, 5 divides 5, the rest divide none


@dataclass
class Round:
    """One append round's inputs: q (NL, t, NKV, G, HD); k_raw, k, v (NL, t, KV_DIM); float32."""

    q: np.ndarray
    k_raw: np.ndarray
    k: np.ndarray
    v: np.ndarray

    @property
    def t(self) -> int:
        return self.k.shape[1]


def round_inputs(t: int, rng: np.random.Generator) -> Round:
    def f(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    return Round(q=f(NL, t, NKV, G, HD), k_raw=f(NL, t, KV_DIM), k=f(NL, t, KV_DIM), v=f(NL, t, KV_DIM))


def feed(cache, r: Round) -> np.ndarray:
    """Append one round to any KVStore, as the forward pass does; attention out (NL, t, NKV*G*HD)."""
    start = len(cache)
    cache.reserve(r.t)
    out = np.empty((NL, r.t, NKV * G * HD), np.float32)
    for layer in range(NL):
        cache.write(layer, start, r.k_raw[layer], r.k[layer], r.v[layer])
        out[layer] = causal_attention(r.q[layer], cache, layer, start, None, SCALE)
    return out


def contiguous() -> KVCache:
    return KVCache(GEOMETRY, [RopeTable(10000.0, HD, 256)] * NL, capacity=2)


def delta(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0


def view_delta(a, b, layer: int, hi: int) -> float:
    """Largest |difference| between the K and V rows [0, hi) two stores' view() serve for ``layer``."""
    (ak, av, _), (bk, bv, _) = a.view(layer, hi), b.view(layer, hi)
    return max(delta(ak, bk), delta(av, bv))


def test_three_rounds_paged_attention_equals_contiguous_bit_for_bit(evidence):
    """The seed gate: 5 + 1 + 3 rows, 2 layers, GQA; block sizes that do and do not divide the lengths.

    A hog sequence holds the pool's low ids and lets them go between rounds,
    so page tables are not ascending runs and the gather path is exercised.
    """
    three_rounds(evidence)


def test_three_rounds_paged_attention_equals_contiguous_on_the_numpy_fallback(monkeypatch, evidence):
    """The seed gate with the kernel switched off (as without a C compiler): attention over the paged and
    the contiguous views then runs causal_attention's numpy loop and attend_one, one query at a time."""
    force_numpy_fallback(monkeypatch)
    three_rounds(evidence)


def three_rounds(evidence) -> None:
    """The seed gate on the attention path in force."""
    tables = {}
    for bs in BLOCK_SIZES:
        rng = np.random.default_rng(20260709 + bs)
        pool = BlockPool(32, bs, GEOMETRY)
        hog = PagedSequence(pool)
        hog.reserve(2 * bs)
        paged, ref = PagedSequence(pool), contiguous()
        for i, t in enumerate(ROUNDS):
            if i == 1:
                hog.release()  # frees the low ids: the next blocks come from below
            r = round_inputs(t, rng)
            got, want = feed(paged, r), feed(ref, r)
            d = delta(got, want)
            evidence.observe("max_abs_delta", d)
            assert np.array_equal(got, want), f"block_size={bs} round {i} (t={t}): max|delta|={d}"
        assert np.array_equal(paged.pos, ref.pos) and cache_delta(paged, ref) == 0.0
        tables[str(bs)] = list(paged.blocks)
    assert any(tab != sorted(tab) for tab in tables.values()), "no page table was out of id order"
    evidence.record("page_tables", tables)


def test_control_a_page_table_entry_naming_another_block_changes_attention(evidence):
    """Control: the comparison sees paging mistakes: one table entry pointing at a sibling's block.

    (Swapping two entries would not do: attention is a sum over keys, so a
    permutation changes only the summation order, by about 1e-7.)
    """
    rng = np.random.default_rng(7)
    pool = BlockPool(8, 2, GEOMETRY)
    paged, other, ref = PagedSequence(pool), PagedSequence(pool), contiguous()
    r = round_inputs(6, rng)
    feed(paged, r)
    feed(ref, r)
    feed(other, round_inputs(2, rng))
    paged.blocks[1] = other.blocks[0]  # rows 2..3 now read the other sequence's rows 0..1
    paged._gathered = None
    q = round_inputs(1, rng).q
    d = 0.0
    for layer in range(NL):
        d = max(
            d,
            delta(
                causal_attention(q[layer], paged, layer, 5, None, SCALE),
                causal_attention(q[layer], ref, layer, 5, None, SCALE),
            ),
        )
    evidence.record("max_abs_delta", d)
    assert d > 1e-3, f"a wrong block in the page table changed attention by only {d}: the check is blind"


def test_paged_session_equals_contiguous_on_random_models_and_chunkings(evidence):
    """Model sessions on random tiny llamas: any chunking, block size, window, pool pressure."""
    random_sessions(evidence, tiny_llama)


def test_paged_session_equals_contiguous_on_the_numpy_fallback(monkeypatch, evidence):
    """The same with the kernel switched off (as without a C compiler), on models built under it: every
    numerics step, attention included (causal_attention's numpy loop, attend_one), takes its numpy branch."""
    force_numpy_fallback(monkeypatch)
    random_sessions(evidence, fresh_tiny_llama)


def random_sessions(evidence, build) -> None:
    """Paged vs contiguous sessions of ``build(**geometry)``'s model: any chunking, block size, window, pool
    pressure."""

    @given(
        geo=st.fixed_dictionaries(
            {
                "n_layers": st.integers(1, 3),
                "n_kv_heads": st.integers(1, 3),
                "group": st.integers(1, 3),
                "head_dim": st.sampled_from([2, 4, 8]),
            }
        ),
        chunks=st.lists(st.integers(1, 7), min_size=1, max_size=5),
        bs=st.integers(1, 9),
        window=st.one_of(st.none(), st.integers(1, 12)),
        hog=st.integers(0, 4),
        seed=st.integers(0, 9999),
    )
    def prop(geo, chunks, bs, window, hog, seed):
        model = build(**geo)
        ids = token_ids(sum(chunks), seed)
        pool = BlockPool(64, bs, model.config.kv_geometry)
        squatter = PagedSequence(pool)
        squatter.reserve(hog * bs)
        paged = Session(model, window=window, cache="paged", pool=pool)
        ref = Session(model, window=window)
        at, got, want = 0, [], []
        for i, t in enumerate(chunks):
            if i == 1:
                squatter.release()
            got.append(paged.prefill(ids[at : at + t]))
            want.append(ref.prefill(ids[at : at + t]))
            at += t
        d = max(delta(np.concatenate(got), np.concatenate(want)), cache_delta(paged.cache, ref.cache))
        evidence.observe("max_abs_delta", d)
        assert d == 0.0, f"paged session differs from contiguous by {d}"
        evidence.count("examples")

    prop()


def test_a_session_without_a_pool_gets_a_private_growing_pool_and_equals_contiguous(evidence):
    """cache="paged" with no pool: a private pool of 4 blocks (of 16 rows, or of block_size=) that doubles
    on demand, so a session never runs out; its logits and cache equal a contiguous session's. An unknown
    design name is refused."""
    model = tiny_llama(n_layers=2, n_kv_heads=2, group=2, head_dim=8)
    ids = token_ids(21, 5)
    fresh = Session(model, cache="paged")
    shape = (fresh.cache.pool.num_blocks, fresh.cache.pool.block_size)
    assert shape == (4, 16), f"default private pool: (num_blocks, block_size)={shape}, documented (4, 16)"
    d, sizes = 0.0, {}
    for options in ({}, {"block_size": 2}, {"block_size": 3}):
        paged, ref = Session(model, cache="paged", **options), Session(model)
        pool = paged.cache.pool
        assert (pool.num_blocks, pool.block_size) == (4, options.get("block_size", 16))
        got = [paged.prefill(ids[:13]), paged.step(ids[13])[None], paged.prefill(ids[14:])]
        want = [ref.prefill(ids[:13]), ref.step(ids[13])[None], ref.prefill(ids[14:])]
        d = max(d, delta(np.concatenate(got), np.concatenate(want)), cache_delta(paged.cache, ref.cache))
        sizes[str(options.get("block_size", 16))] = pool.num_blocks
    evidence.record("max_abs_delta", d)
    evidence.record("private_pool_blocks_after_21_tokens", sizes)
    assert d == 0.0, f"a session on its private paged pool differs from contiguous by {d}"
    assert sizes == {"16": 4, "2": 16, "3": 8}, f"private pools after 21 tokens: {sizes}, want 4 doubled as needed"
    try:
        make_cache("paged-ish", GEOMETRY, [RopeTable(10000.0, HD, 256)] * NL)
    except CacheError as e:
        assert "cache='paged-ish'" in str(e), str(e)
    else:
        raise AssertionError("make_cache accepted the unknown design 'paged-ish'")


def test_view_serves_rows_written_after_an_earlier_view(evidence):
    """view() after write() shows the rows just written, also when rows it already served are written
    again (a reserved row may be written more than once) and when rows are written one at a time with
    views between; a page table out of id order (the gathering path) and the same writes on a contiguous
    cache give the same bits."""
    rng = np.random.default_rng(11)
    pool = BlockPool(8, 2, GEOMETRY)
    hog = PagedSequence(pool)
    hog.reserve(2)  # holds block 0
    paged, ref = PagedSequence(pool), contiguous()
    paged.reserve(2)  # block 1
    hog.release()
    paged.reserve(3)  # blocks 0 and 2: the table [1, 0, 2] is out of id order
    ref.reserve(5)
    assert paged.blocks == [1, 0, 2], paged.blocks
    d, views = 0.0, 0
    for layer, start, t in ((0, 0, 5), (1, 0, 2), (1, 2, 3), (0, 1, 2), (0, 4, 1), (1, 0, 5), (0, 0, 1)):
        rows = [rng.standard_normal((t, KV_DIM)).astype(np.float32) for _ in range(3)]
        paged.write(layer, start, *rows)
        ref.write(layer, start, *rows)
        for hi in (5, start + t):
            d = max(d, view_delta(paged, ref, layer, hi))
            views += 1
    evidence.record("max_abs_delta", d)
    evidence.record("views", views)
    assert d == 0.0, f"a view after a write served stale rows: max|delta|={d}"


def test_a_page_table_of_consecutive_ids_is_viewed_in_place(evidence):
    """A table that is one run of consecutive block ids is served as a view of the pool's storage (no
    copy); the rows are the ones written."""
    rng = np.random.default_rng(12)
    runs = 0
    for bs in BLOCK_SIZES:
        pool = BlockPool(32, bs, GEOMETRY)
        hog = PagedSequence(pool)
        hog.reserve(1)  # the run starts above block 0
        seq, ref = PagedSequence(pool), contiguous()
        r = round_inputs(9, rng)
        feed(seq, r)
        feed(ref, r)
        nb = -(-9 // bs)
        assert seq.blocks == list(range(1, 1 + nb)), seq.blocks
        for layer in range(NL):
            for hi in (1, 9):
                k, v, base = seq.view(layer, hi)
                rk, rv, _ = ref.view(layer, hi)
                assert base == 0 and np.array_equal(k, rk) and np.array_equal(v, rv)
                assert np.shares_memory(k, pool.storage.k) and np.shares_memory(v, pool.storage.v), (
                    f"block_size={bs}: table {seq.blocks} is consecutive but view copied"
                )
                runs += 1
    evidence.record("in_place_views", runs)


# ---- real weights ----------------------------------------------------------------------------

PROMPTS = ("The capital of France is Paris, and the capital of Italy is", "Once upon a time, a small robot found a")
GREEDY = 6


def test_real_weights_paged_sessions_sharing_a_pool_equal_contiguous(smollm2, evidence):
    """Two paged sessions on one pool (block_size 5, interleaved) vs contiguous: logits and greedy tokens.

    A squatter holds the two lowest blocks during the prefills and lets them
    go before decoding, so the decode steps get lower ids: tables out of order.
    """
    pool = BlockPool(16, 5, smollm2.config.kv_geometry)
    squatter = PagedSequence(pool)
    squatter.reserve(10)
    ids = [smollm2.tokenizer.encode(p) for p in PROMPTS]
    paged = [smollm2.session(cache="paged", pool=pool) for _ in ids]
    ref = [smollm2.session() for _ in ids]
    got, want = [[], []], [[], []]
    for i in (0, 1):  # prefills interleaved on the shared pool
        got[i].append(paged[i].prefill(ids[i]))
        want[i].append(ref[i].prefill(ids[i]))
    squatter.release()
    toks = [[], []]
    for _ in range(GREEDY):  # decode steps interleaved too
        for i in (0, 1):
            tp, tr = int(np.argmax(paged[i].last_logits)), int(np.argmax(ref[i].last_logits))
            toks[i].append((tp, tr))
            got[i].append(paged[i].step(tp)[None])
            want[i].append(ref[i].step(tr)[None])
    d = max(delta(np.concatenate(g), np.concatenate(w)) for g, w in zip(got, want, strict=True))
    differing = sum(a != b for t in toks for a, b in t)
    evidence.record("max_abs_delta", d)
    evidence.record("tokens_differing", differing)
    evidence.record("tokens_compared", sum(len(t) for t in toks))
    evidence.record("continuations", [smollm2.tokenizer.decode([a for a, _ in t]) for t in toks])
    evidence.record("page_tables", [list(p.cache.blocks) for p in paged])
    assert any(p.cache.blocks != sorted(p.cache.blocks) for p in paged), "every page table ascends"
    assert differing == 0 and d == 0.0, f"paged differs from contiguous: max|delta|={d}, {differing} tokens"
