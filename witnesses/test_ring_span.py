"""RING-T2: spans never exceed the ring; running past max_seq_len is refused or reported."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from impl.cache import KVGeometry
from impl.model.session import Session
from impl.ring import RingCache, RingConfig
from impl.ring_store import ContextFull
from witnesses.synthetic import tiny_llama, token_ids
from witnesses.test_ring_placement import WindowRowsCache


def test_span_never_exceeds_what_the_ring_holds(evidence):
    """For every layer and position (far past max_seq_len): the span [lo, hi) ends at pos + 1, hi - lo <= slots,
    lo >= the window's lo, and the whole span is readable (held, not reused)."""
    @given(hint=st.integers(1, 12), window=st.integers(1, 20), max_seq_len=st.integers(1, 16),
           n=st.integers(1, 60))
    def prop(hint, window, max_seq_len, n):
        cfg = RingConfig(KVGeometry(2, 1, 2), max_seq_len=max_seq_len,
                         window=window, global_layers=(1,))
        ring = RingCache(cfg, hint=hint)
        x = np.zeros(2, np.float32)
        for pos in range(n):
            for layer in range(2):
                ring.write_kv(layer, pos, x, x)
                lo, hi = ring.span(layer, pos)
                reach = cfg.reach(layer)
                want_lo = 0 if reach is None else max(0, pos + 1 - reach)
                over = not (hi == pos + 1 and lo >= want_lo and hi - lo <= ring.slots(layer))
                evidence.count("spans_checked")
                evidence.count("spans_clamped", int(lo > want_lo))
                evidence.count("overreaching_spans", int(over))
                if over:
                    raise AssertionError(f"layer {layer} pos {pos}: span [{lo}, {hi}) with {ring.slots(layer)} slots "
                                         f"(window lo {want_lo})")
                ring.read(layer, lo, hi)  # raises if any of it is not held
            ring.advance()
        evidence.count("examples")

    prop()


# (pos, layer, half-open span) worked out by hand: window 4 on layer 0, layer 3 global, max_seq_len 64
SPAN_TABLE = [(2, 0, (0, 3)), (3, 0, (0, 4)), (4, 0, (1, 5)), (10, 0, (7, 11)), (10, 3, (0, 11))]


@pytest.mark.parametrize("pos,layer,want", SPAN_TABLE)
def test_span_table(pos, layer, want, evidence):
    cfg = RingConfig(KVGeometry(4, 1, 4), max_seq_len=64, window=4,
                     global_layers=(3,))
    ring = RingCache(cfg, hint=8)
    x = np.zeros(4, np.float32)
    for p in range(pos + 1):
        ring.write_kv(layer, p, x, x)
    got = ring.span(layer, pos)
    evidence.record("span", f"[{got[0]}, {got[1]})")
    assert got == want


def test_saturation_is_reported_once_a_global_layer_runs_past_max_seq_len(evidence):
    cfg = RingConfig(KVGeometry(2, 1, 2), max_seq_len=8, window=4,
                     global_layers=(1,))
    ring = RingCache(cfg, hint=8)
    x = np.zeros(2, np.float32)
    flags = []
    for pos in range(12):
        for layer in range(2):
            ring.write_kv(layer, pos, x, x)
            lo, hi = ring.span(layer, pos)
            assert hi - lo <= ring.slots(layer)
        ring.advance()
        flags.append(ring.is_saturated())
    evidence.record("first_saturated_pos", flags.index(True))
    assert flags == [False] * 8 + [True] * 4, f"saturation flags by position: {flags}"


def test_session_refuses_to_run_past_max_seq_len(evidence):
    """Default overflow="refuse": the token past max_seq_len raises ContextFull and the session is unchanged."""
    model = tiny_llama(n_layers=2, n_kv_heads=2, group=2, head_dim=8)
    ws = [4, None]
    s = Session(model, window=ws, cache="ring", hint=4, max_seq_len=16)
    store = s.cache
    s.prefill(token_ids(10, 1))
    s.generate([], 6)  # feeds 6 more: 16 positions held, the 16th token's logits predict a 17th
    assert len(s) == 16
    before = [store.ring.read(1, 0, 16)[0].copy()]
    refused = []
    for feed in (lambda: s.step(3), lambda: s.prefill([1, 2, 3])):
        with pytest.raises(ContextFull) as err:
            feed()
        refused.append(type(err.value).__name__)
    assert len(s) == 16 and not store.is_saturated()
    assert np.array_equal(store.ring.read(1, 0, 16)[0], before[0])
    evidence.record("refusals", len(refused))
    evidence.record("length_after_refusal", len(s))


def test_clamped_session_reports_saturation_and_attends_the_last_max_seq_len(evidence):
    """overflow="clamp": is_saturated() turns true, and every logit equals a contiguous reference whose
    global layers see exactly the last max_seq_len positions (never a reused slot)."""
    @given(n=st.integers(17, 40), window=st.integers(1, 8), hint=st.integers(1, 8),
           chunks=st.lists(st.integers(1, 12), min_size=1, max_size=6), seed=st.integers(0, 9999))
    def prop(n, window, hint, chunks, seed):
        model = tiny_llama(n_layers=2, n_kv_heads=2, group=2, head_dim=8)
        ws, m = [window, None], 16
        ring = Session(model, window=ws, cache="ring", hint=hint, max_seq_len=m, overflow="clamp")
        store = ring.cache
        ref = Session(model, window=ws, cache=WindowRowsCache(model, ws, caps=[m, m]))
        from witnesses.test_ring_placement import feed_in_chunks

        la, lb = feed_in_chunks([ring, ref], token_ids(n, seed), chunks)
        delta = float(np.max(np.abs(la.astype(np.float64) - lb)))
        evidence.observe("max_abs_delta", delta)
        evidence.count("examples")
        assert store.is_saturated(), f"{n} positions through max_seq_len={m} and no saturation reported"
        assert delta == 0.0, f"clamped ring differs from the last-max_seq_len reference by {delta}"

    prop()


def test_clamped_session_differs_from_one_that_kept_everything(evidence):
    """Control: past max_seq_len the clamped ring has really lost history (else saturation means nothing)."""
    model = tiny_llama(n_layers=2, n_kv_heads=2, group=2, head_dim=8)
    ws = [4, None]
    ids = token_ids(30, 5)
    clamped = Session(model, window=ws, cache="ring", hint=4, max_seq_len=16, overflow="clamp")
    full = Session(model, window=ws, cache="ring", hint=4, max_seq_len=64)
    la, lb = clamped.prefill(ids), full.prefill(ids)
    assert np.array_equal(la[:16], lb[:16]), "before saturation the two must agree"
    delta = float(np.max(np.abs(la.astype(np.float64) - lb)))
    evidence.record("max_abs_delta", delta)
    assert delta > 0
