"""The numerics contract: a position's K, V and logits are the same bits however
its tokens were fed (one prefill, chunks of any size, or one step at a time)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from impl.model.session import Session


@st.composite
def chunkings(draw, max_len=40):
    n = draw(st.integers(1, max_len))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    return n, [(a, b) for a, b in zip(bounds, bounds[1:])]


def feed(s: Session, ids, chunks):
    rows = []
    for a, b in chunks:
        if b - a == 1 and a % 2:  # mix step() and one-token prefills
            rows.append(s.step(ids[a])[None])
        else:
            rows.append(s.prefill(ids[a:b]))
    return np.concatenate(rows)


@settings(max_examples=60, deadline=None)
@given(case=chunkings(), seed=st.integers(0, 10_000), window=st.sampled_from([None, 3, 7]))
def test_any_chunking_gives_bit_identical_kv_and_logits(tiny, case, seed, window):
    n, chunks = case
    ids = [int(x) for x in np.random.default_rng(seed).integers(0, tiny.config.vocab, n)]
    whole = Session(tiny, window=window)
    lw = whole.prefill(ids)
    parts = Session(tiny, window=window)
    lp = feed(parts, ids, chunks)
    assert np.array_equal(lw, lp)
    for name in ("k", "k_raw", "v"):
        for a, b in zip(getattr(whole.cache, name), getattr(parts.cache, name)):
            assert np.array_equal(a, b), name


def test_real_weights_forty_tokens_fed_three_ways_are_identical(smollm2):
    text = ("A long time ago, in a small village by the sea, there lived an old fisherman who "
            "told stories to the children every evening. The stories were about storms, lost ships, and "
            "the strange lights that some sailors claimed to see far out over the water at night.")
    ids = smollm2.tokenizer.encode(text)[:40]
    assert len(ids) == 40
    one = smollm2.session()
    l1 = one.prefill(ids)
    steps = smollm2.session()
    l2 = np.stack([steps.step(t) for t in ids])
    chunks = smollm2.session()
    l3 = np.concatenate([chunks.prefill(ids[a:b]) for a, b in [(0, 7), (7, 8), (8, 25), (25, 40)]])
    assert np.array_equal(l1, l2) and np.array_equal(l1, l3)
    for a, b, c in zip(one.cache.k, steps.cache.k, chunks.cache.k):
        assert np.array_equal(a, b) and np.array_equal(a, c)
    for a, b, c in zip(one.cache.v, steps.cache.v, chunks.cache.v):
        assert np.array_equal(a, b) and np.array_equal(a, c)
