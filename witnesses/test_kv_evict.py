"""KV-T2: evicting a span at write time equals a context that never saw it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.model.session import Session
from impl.rope import RopeTable, apply_rope
from witnesses.synthetic import cache_delta, thetas, tiny_llama, token_ids

GREEDY = 12  # the oracle's greedy continuations are 12 tokens


def test_write_time_evict_equals_never_saw_cache_and_greedy(evidence):
    @given(
        theta=thetas,
        n_pre=st.integers(1, 10),
        n_span=st.integers(1, 10),
        n_post=st.integers(1, 8),
        seed=st.integers(0, 10_000),
    )
    def prop(theta, n_pre, n_span, n_post, seed):
        model = tiny_llama(n_layers=3, n_kv_heads=2, group=2, head_dim=8, theta=theta)
        ids = token_ids(n_pre + n_span + n_post, seed)
        pre, span, post = ids[:n_pre], ids[n_pre : n_pre + n_span], ids[n_pre + n_span :]
        a = Session(model)
        a.prefill(pre)
        a.prefill(span)
        assert a.cache.evict(n_pre, n_span) == n_span
        a.prefill(post)
        b = Session(model)
        b.prefill(pre + post)
        delta = cache_delta(a.cache, b.cache)
        evidence.observe("max_abs_delta", delta)
        assert delta == 0.0, f"cache differs from never-saw by {delta}"
        ga, gb = a.generate([], 6), b.generate([], 6)
        assert ga == gb
        evidence.count("examples")
        evidence.count("greedy_tokens_compared", len(ga))

    prop()


def test_survivor_k_is_one_rotation_of_k_raw_at_its_new_index(evidence):
    @given(theta=thetas, n=st.integers(3, 40), data=st.data())
    def prop(theta, n, data):
        model = tiny_llama(n_layers=3, n_kv_heads=2, group=2, head_dim=8, theta=theta)
        start = data.draw(st.integers(0, n - 2), label="start")
        span = data.draw(st.integers(1, n - start - 1), label="span")
        s = Session(model)
        s.prefill(token_ids(n, n))
        before = s.cache.clone()
        s.cache.evict(start, span)
        c, m = s.cache, n - span
        assert list(c.pos) == list(range(m))
        delta = 0.0
        for layer in range(3):
            raw = c.k_raw[layer]
            assert np.array_equal(
                raw, np.concatenate([before.k_raw[layer][:start], before.k_raw[layer][start + span :]])
            )
            want = apply_rope(raw.reshape(m, 2, 8), *model.ropes[layer].rows(np.arange(m))).reshape(m, 16)
            delta = max(delta, float(np.max(np.abs(c.k[layer].astype(np.float64) - want))))
        evidence.observe("max_abs_delta", delta)
        assert delta == 0.0
        evidence.count("examples")

    prop()


# ---- real weights, against the transformers oracle ----------------------------------


def test_write_time_evict_matches_oracle_never_saw(smollm2, oracle, evidence):
    ev = oracle.eviction()
    prefix, poison, query = (list(map(int, a)) for a in (ev.prefix_ids, ev.poison_ids, ev.query_ids))
    s = smollm2.session()
    s.prefill(prefix)
    s.prefill(poison)
    s.cache.evict(len(prefix), len(poison))
    got = s.generate(query, GREEDY)
    want = [int(t) for t in ev.never_greedy]
    evidence.record("tokens_compared", len(want))
    evidence.record("tokens_differing", sum(a != b for a, b in zip(got, want, strict=True)))
    evidence.record("continuation", smollm2.tokenizer.decode(got))
    assert got == want


def test_late_evict_differs_from_never_saw(smollm2, oracle, evidence):
    """Control: once the query has attended to the poison, evicting it cannot undo that."""
    ev = oracle.eviction()
    prefix, poison, query = (list(map(int, a)) for a in (ev.prefix_ids, ev.poison_ids, ev.query_ids))
    s = smollm2.session()
    s.prefill(prefix + poison + query)
    s.cache.evict(len(prefix), len(poison))
    got = s.generate([], GREEDY)
    want = [int(t) for t in ev.never_greedy]
    differing = sum(a != b for a, b in zip(got, want, strict=True))
    evidence.record("tokens_differing", differing)
    evidence.record("continuation", smollm2.tokenizer.decode(got))
    assert differing > 0, "late eviction reproduced never-saw: the control cannot tell the two apart"


def test_no_evict_equals_oracle_poisoned_greedy_which_differs_from_never_saw(smollm2, oracle, evidence):
    """Control: the poison matters (else eviction proves nothing), and our run matches the oracle's."""
    ev = oracle.eviction()
    prefix, poison, query = (list(map(int, a)) for a in (ev.prefix_ids, ev.poison_ids, ev.query_ids))
    got = smollm2.session().generate(prefix + poison + query, GREEDY)
    poisoned, never = [int(t) for t in ev.poisoned_greedy], [int(t) for t in ev.never_greedy]
    differing = sum(a != b for a, b in zip(poisoned, never, strict=True))
    evidence.record("tokens_differing", differing)
    evidence.record("continuation", smollm2.tokenizer.decode(got))
    assert got == poisoned
    assert differing > 0, "the poison does not change the continuation: eviction would prove nothing"


# ---- RopeTable.rows: the rows eviction re-rotates with, and only those -----------------------


def test_rope_rows_are_the_table_rows_in_range_and_refused_outside(evidence):
    """rows(pos) is the table's row pos for every pos in 0..max_pos-1 (a list, a range or an int
    array; an empty int array gives no rows) and raises ValueError when any position is outside that range: a
    negative position must not wrap around to the table's end, one past it must not be an IndexError."""
    max_pos, d = 12, 4
    table = RopeTable(10000.0, d, max_pos)
    for pos in (
        [0, 1, 2],
        list(range(max_pos)),
        range(3, 9),
        np.array([max_pos - 1, 0, 5], np.int64),
        np.array([], np.int64),
    ):
        cos, sin = table.rows(pos)
        idx = list(pos)
        assert cos.shape == sin.shape == (len(idx), d)
        assert all(
            np.array_equal(cos[i], table.cos[p]) and np.array_equal(sin[i], table.sin[p]) for i, p in enumerate(idx)
        ), f"rows({pos!r}) are not the table's rows"
        evidence.count("accepted")
    for pos in (
        [-1],
        [3, -1],
        [-1, 0, max_pos - 1],
        [max_pos],
        [0, max_pos],
        [max_pos + 3, 2],
        [-5, max_pos],
        np.array([2, -2], np.int64),
    ):
        with pytest.raises(ValueError):
            table.rows(pos)
        evidence.count("refused")
