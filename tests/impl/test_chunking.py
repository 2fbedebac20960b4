"""The numerics contract: a position's K, V and logits are the same bits however
its tokens were fed (one prefill, chunks of any size, or one step at a time),
under each attention path (numpy one query at a time, or the C kernel)."""

import itertools
import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impl import kernels
from impl.attention import ENV_ATTENTION, attention_kernel, causal_attention
from impl.model.session import Session

ATTENTION_PATHS = ["numpy", "kernel"]


def attention_env(path: str):
    if path == "kernel" and kernels.load() is None:
        pytest.skip(f"kernel unavailable: {kernels.status()}")
    return mock.patch.dict(os.environ, {ENV_ATTENTION: path})


@st.composite
def chunkings(draw, max_len=40):
    n = draw(st.integers(1, max_len))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    return n, list(itertools.pairwise(bounds))


def feed(s: Session, ids, chunks):
    rows = []
    for a, b in chunks:
        if b - a == 1 and a % 2:  # mix step() and one-token prefills
            rows.append(s.step(ids[a])[None])
        else:
            rows.append(s.prefill(ids[a:b]))
    return np.concatenate(rows)


@pytest.mark.parametrize("path", ATTENTION_PATHS)
def test_any_chunking_gives_bit_identical_kv_and_logits(tiny, path):
    with attention_env(path):
        check_any_chunking(tiny)


@settings(max_examples=60, deadline=None)
@given(case=chunkings(), seed=st.integers(0, 10_000), window=st.sampled_from([None, 3, 7]))
def check_any_chunking(tiny, case, seed, window):
    n, chunks = case
    ids = [int(x) for x in np.random.default_rng(seed).integers(0, tiny.config.vocab, n)]
    whole = Session(tiny, window=window)
    lw = whole.prefill(ids)
    parts = Session(tiny, window=window)
    lp = feed(parts, ids, chunks)
    assert np.array_equal(lw, lp)
    for name in ("k", "k_raw", "v"):
        for a, b in zip(getattr(whole.cache, name), getattr(parts.cache, name), strict=True):
            assert np.array_equal(a, b), name


@pytest.mark.parametrize("path", ATTENTION_PATHS)
def test_real_weights_forty_tokens_fed_three_ways_are_identical(smollm2, path):
    with attention_env(path):
        check_forty_tokens(smollm2)


def check_forty_tokens(smollm2):
    text = (
        "A long time ago, in a small village by the sea, there lived an old fisherman who "
        "told stories to the children every evening. The stories were about storms, lost ships, and "
        "the strange lights that some sailors claimed to see far out over the water at night."
    )
    ids = smollm2.tokenizer.encode(text)[:40]
    assert len(ids) == 40
    one = smollm2.session()
    l1 = one.prefill(ids)
    steps = smollm2.session()
    l2 = np.stack([steps.step(t) for t in ids])
    chunks = smollm2.session()
    l3 = np.concatenate([chunks.prefill(ids[a:b]) for a, b in [(0, 7), (7, 8), (8, 25), (25, 40)]])
    assert np.array_equal(l1, l2) and np.array_equal(l1, l3)
    for a, b, c in zip(one.cache.k, steps.cache.k, chunks.cache.k, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c)
    for a, b, c in zip(one.cache.v, steps.cache.v, chunks.cache.v, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c)


class RowsCache:
    """A minimal KVStore over given K/V rows: view(layer, hi) -> rows [0, hi), base 0."""

    def __init__(self, k, v):
        self.k, self.v = k, v
        self.pos = np.arange(len(k), dtype=np.int64)

    def view(self, layer, hi):
        return self.k[:hi], self.v[:hi], 0


@pytest.mark.parametrize("geometry", [(3, 3, 64), (2, 2, 8), (1, 3, 2), (2, 1, 16), (1, 1, 5)])
@pytest.mark.parametrize("window", [None, 1, 5, 300])
def test_kernel_attention_row_equals_the_query_alone_over_its_visible_keys(geometry, window):
    """All T queries in one native call == each query alone over exactly [lo, hi) (the prefill/decode pair)."""
    with attention_env("kernel"):
        k = attention_kernel()
        hkv, g, d = geometry
        rng = np.random.default_rng(hkv * 100 + d)
        n = 70
        keys = (2 * rng.standard_normal((n, hkv * d))).astype(np.float32)
        vals = rng.standard_normal((n, hkv * d)).astype(np.float32)
        q = rng.standard_normal((n, hkv, g, d)).astype(np.float32)
        cache = RowsCache(keys, vals)
        for start, t in [(0, n), (0, 1), (17, 1), (10, 33), (69, 1)]:
            got = causal_attention(q[start : start + t], cache, 0, start, window, 0.125)
            for i in range(t):
                hi = start + i + 1
                lo = 0 if window is None else max(0, hi - window)
                alone = k.attend(
                    q[start + i][None], keys[lo:hi], vals[lo:hi], np.array([0]), np.array([hi - lo]), 0.125
                )
                assert np.array_equal(got[i], alone[0]), (start, t, i)
                # and close to a float64 softmax over the same keys
                kh = keys[lo:hi].reshape(-1, hkv, d).astype(np.float64)
                s = np.einsum("hgd,nhd->hgn", q[start + i].astype(np.float64), kh) * 0.125
                p = np.exp(s - s.max(-1, keepdims=True))
                ref = np.einsum("hgn,nhd->hgd", p / p.sum(-1, keepdims=True), vals[lo:hi].reshape(-1, hkv, d))
                assert np.abs(got[i] - ref.reshape(-1)).max() < 2e-6


def test_kernel_attention_over_one_key_returns_its_value_exactly():
    with attention_env("kernel"):
        k = attention_kernel()
        v = np.arange(16, dtype=np.float32).reshape(1, 16) - 3.5
        out = k.attend(
            np.ones((1, 2, 3, 8), np.float32), np.ones((1, 16), np.float32), v, np.array([0]), np.array([1]), 1.0
        )
        assert np.array_equal(out.reshape(2, 3, 8), np.repeat(v.reshape(2, 1, 8), 3, axis=1))


def test_kernel_attention_bits_do_not_depend_on_threads_or_on_how_group_members_are_split():
    """A decode step splits a head's group members across threads; a prefill keeps them together."""
    with attention_env("kernel"):
        k = attention_kernel()
        rng = np.random.default_rng(4)
        n, hkv, g, d = 300, 3, 3, 64
        keys = rng.standard_normal((n, hkv * d)).astype(np.float32)
        vals = rng.standard_normal((n, hkv * d)).astype(np.float32)
        q = rng.standard_normal((n, hkv, g, d)).astype(np.float32)
        his = np.arange(1, n + 1)
        los = np.zeros(n, dtype=np.int64)
        ref = k.attend(q, keys, vals, los, his, 0.125, threads=1)
        for threads in (1, 2, 3):
            assert np.array_equal(k.attend(q, keys, vals, los, his, 0.125, threads=threads), ref)
            for i in (0, 150, n - 1):
                one = k.attend(q[i : i + 1], keys, vals, los[i : i + 1], his[i : i + 1], 0.125, threads=threads)
                assert np.array_equal(one[0], ref[i]), (threads, i)
