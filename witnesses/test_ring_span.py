"""RING-T2: spans never exceed the ring; running past max_seq_len is refused or reported."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from impl.cache import KVGeometry
from impl.model.session import Session
from impl.ring import RingCache, RingConfig
from impl.ring_store import ContextFull
from witnesses.synthetic import tiny_llama, token_ids
from witnesses.test_ring_placement import WindowRowsCache


def test_span_never_exceeds_what_the_ring_holds(evidence):
    """For every layer and position (far past max_seq_len): the span [lo, hi) ends at pos + 1, hi - lo <= slots,
    lo >= the window's lo, and the whole span is readable (held, not reused)."""

    @given(hint=st.integers(1, 12), window=st.integers(1, 20), max_seq_len=st.integers(1, 16), n=st.integers(1, 60))
    def prop(hint, window, max_seq_len, n):
        cfg = RingConfig(KVGeometry(2, 1, 2), max_seq_len=max_seq_len, window=window, global_layers=(1,))
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
                    raise AssertionError(
                        f"layer {layer} pos {pos}: span [{lo}, {hi}) with {ring.slots(layer)} slots "
                        f"(window lo {want_lo})"
                    )
                ring.read(layer, lo, hi)  # raises if any of it is not held
            ring.advance()
        evidence.count("examples")

    prop()


# (pos, layer, half-open span) worked out by hand: window 4 on layer 0, layer 3 global, max_seq_len 64
SPAN_TABLE = [(2, 0, (0, 3)), (3, 0, (0, 4)), (4, 0, (1, 5)), (10, 0, (7, 11)), (10, 3, (0, 11))]


@pytest.mark.parametrize("pos,layer,want", SPAN_TABLE)
def test_span_table(pos, layer, want, evidence):
    cfg = RingConfig(KVGeometry(4, 1, 4), max_seq_len=64, window=4, global_layers=(3,))
    ring = RingCache(cfg, hint=8)
    x = np.zeros(4, np.float32)
    for p in range(pos + 1):
        ring.write_kv(layer, p, x, x)
    got = ring.span(layer, pos)
    evidence.record("span", f"[{got[0]}, {got[1]})")
    assert got == want


def test_saturation_is_reported_once_a_global_layer_runs_past_max_seq_len(evidence):
    cfg = RingConfig(KVGeometry(2, 1, 2), max_seq_len=8, window=4, global_layers=(1,))
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

    @given(
        n=st.integers(17, 40),
        window=st.integers(1, 8),
        hint=st.integers(1, 8),
        chunks=st.lists(st.integers(1, 12), min_size=1, max_size=6),
        seed=st.integers(0, 9999),
    )
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


def test_read_returns_exactly_the_held_positions_and_refuses_the_rest(evidence):
    """Writes at ascending positions (gaps, chunks, single rows; no advance): after each, every layer has the
    slots of the growth rule (start at min(hint, cap); a write reaching pos >= slots below the cap doubles,
    at least to pos + 1, at most to the cap), holds the last `slots` positions below its high-water mark, and
    RingCache.read(layer, lo, hi) returns each written position's own rows for every h_lo <= lo <= hi <= high
    (none when lo == hi) and raises CacheError for every other (lo, hi). is_saturated() is true exactly once
    a layer that needs more than its cap (global, or window > max_seq_len) has a position >= its cap written.
    Caps, slots and held ranges are worked out here from the rules, not asked of impl."""
    from impl.errors import CacheError

    @given(
        hint=st.integers(1, 8),
        window=st.integers(1, 16),
        max_seq_len=st.integers(1, 20),
        writes=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5), st.booleans()), min_size=1, max_size=7),
    )
    @example(hint=2, window=8, max_seq_len=16, writes=[(0, 1, True), (0, 1, False), (1, 3, False), (0, 1, True)])
    @example(hint=1, window=3, max_seq_len=4, writes=[(0, 2, False), (2, 1, True), (0, 4, False), (3, 1, True)])
    def prop(hint, window, max_seq_len, writes):
        cfg = RingConfig(KVGeometry(2, 1, 2), max_seq_len=max_seq_len, window=window, global_layers=(1,))
        ring = RingCache(cfg, hint=hint)
        caps = [min(window, max_seq_len), max_seq_len]
        needs_more = [window > max_seq_len, True]
        slots = [min(hint, c) for c in caps]
        f = np.float32
        for k, v in [
            (np.ones((1, 3), f), np.ones((1, 2), f)),
            (np.ones((1, 2), f), np.ones((1, 3), f)),
            (np.ones((3, 2), f), np.ones((2, 2), f)),
            (np.ones((2, 2), f), np.ones((3, 2), f)),
            (np.ones(2, f), np.ones(2, f)),
            (np.ones((1, 1, 2), f), np.ones((1, 2), f)),
        ]:
            try:
                ring.write_rows(0, 0, k, v)
            except CacheError:
                evidence.count("bad_shapes_refused")
            else:
                raise AssertionError(f"write_rows(k{k.shape}, v{v.shape}) accepted; expected (T, 2) and (T, 2)")
        latest: list[dict] = [{}, {}]
        high = 0
        for gap, t, single in writes:
            start = high + gap
            for layer in range(2):
                rows = np.arange(start, start + t, dtype=np.float32)[:, None] + 1  # (t, 1), distinct per position
                k = np.concatenate([rows, -rows], axis=1) + 1000 * layer
                v = np.concatenate([rows + 0.5, 2 * rows], axis=1) - 1000 * layer
                if t == 1 and single:
                    ring.write_kv(layer, start, k[0], v[0])
                else:
                    ring.write_rows(layer, start, k, v)
                for i in range(t):
                    latest[layer][start + i] = (k[i], v[i])
                last = start + t - 1
                if last >= slots[layer] and slots[layer] < caps[layer]:
                    slots[layer] = min(caps[layer], max(2 * slots[layer], last + 1))
            high = start + t
            want_sat = any(needs_more[la] and high > caps[la] for la in range(2))
            assert ring.is_saturated() == want_sat, (
                f"written up to {high - 1}, caps {caps}: is_saturated() = {ring.is_saturated()}, want {want_sat}"
            )
            for layer in range(2):
                assert ring.slots(layer) == slots[layer], (
                    f"layer {layer} (cap {caps[layer]}, hint {hint}) after writing up to {high - 1}: "
                    f"{ring.slots(layer)} slots, the growth rule gives {slots[layer]}"
                )
                h_lo = max(0, high - slots[layer])
                for lo in range(max(-1, h_lo - 2), high + 2):
                    for hi in range(lo - 1, high + 2):
                        ok = h_lo <= lo <= hi <= high
                        try:
                            k, v = ring.read(layer, lo, hi)
                        except CacheError:
                            assert not ok, f"layer {layer}: read({lo}, {hi}) refused, the ring holds {h_lo}..{high - 1}"
                            evidence.count("refused")
                            continue
                        assert ok, f"layer {layer}: read({lo}, {hi}) accepted, the ring holds {h_lo}..{high - 1}"
                        assert k.shape == (hi - lo, 2) and v.shape == (hi - lo, 2), (lo, hi, k.shape, v.shape)
                        for i, p in enumerate(range(lo, hi)):
                            if p in latest[layer]:  # a gap position was never written: no claim on its rows
                                wk, wv = latest[layer][p]
                                if not (np.array_equal(k[i], wk) and np.array_equal(v[i], wv)):
                                    evidence.count("misread_rows")
                                    raise AssertionError(
                                        f"layer {layer}: read({lo}, {hi}) row of pos {p} is "
                                        f"{k[i]}, {v[i]}; written {wk}, {wv}"
                                    )
                        evidence.count("accepted")
                        evidence.count("empty_reads", int(lo == hi))
        evidence.count("saturated_examples", int(ring.is_saturated()))
        evidence.count("examples")

    prop()
