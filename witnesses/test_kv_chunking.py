"""KV-T4: a position's K, V and logits are the same bits however its tokens were fed."""
from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from impl.model.session import Session
from witnesses.synthetic import cache_delta, geometries, tiny_llama, token_ids


@st.composite
def chunkings(draw, max_len: int = 32):
    """(n, [(a, b), ...]): a random split of range(n) into consecutive chunks."""
    n = draw(st.integers(1, max_len))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    return n, list(zip(bounds, bounds[1:]))


def feed(s: Session, ids: list[int], chunks) -> np.ndarray:
    """Feed ids chunk by chunk (1-token chunks via step()); logits of every position."""
    rows = [s.step(ids[a])[None] if b - a == 1 else s.prefill(ids[a:b]) for a, b in chunks]
    return np.concatenate(rows)


def test_any_chunking_is_bit_identical_on_random_geometries(evidence):
    @given(geo=geometries, case=chunkings(), seed=st.integers(0, 9999))
    def prop(geo, case, seed):
        n, chunks = case
        model = tiny_llama(**geo)
        ids = token_ids(n, seed)
        whole = Session(model)
        lw = whole.prefill(ids)
        parts = Session(model)
        lp = feed(parts, ids, chunks)
        delta = max(float(np.max(np.abs(lw - lp))), cache_delta(whole.cache, parts.cache))
        evidence.observe("max_abs_delta", delta)
        assert delta == 0 and np.array_equal(lw, lp)
        evidence.count("examples")

    prop()


PROMPT_40 = ("A long time ago, in a small village by the sea, there lived an old fisherman who told stories "
             "to the children every evening. The stories were about storms, lost ships, and the strange lights")

CHUNKINGS_40 = {
    "one-prefill": [(0, 40)],
    "all-steps": [(i, i + 1) for i in range(40)],
    "ragged": [(0, 7), (7, 8), (8, 25), (25, 26), (26, 40)],
    "pairs": [(i, i + 2) for i in range(0, 40, 2)],
}


def test_real_weights_forty_tokens_fed_four_ways_are_bit_identical(smollm2, evidence):
    ids = smollm2.tokenizer.encode(PROMPT_40)[:40]
    assert len(ids) == 40
    runs = {}
    for name, chunks in CHUNKINGS_40.items():
        s = smollm2.session()
        runs[name] = (feed(s, ids, chunks), s.cache)
    ref_logits, ref_cache = runs.pop("one-prefill")
    delta = 0.0
    for name, (logits, cache) in runs.items():
        d = max(float(np.max(np.abs(logits - ref_logits))), cache_delta(cache, ref_cache))
        delta = max(delta, d)
        assert d == 0 and np.array_equal(logits, ref_logits), f"{name}: max|delta|={d}"
    evidence.record("max_abs_delta", delta)
    evidence.record("chunkings_compared", len(CHUNKINGS_40))
