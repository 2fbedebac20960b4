"""RING-T3: int8 storage reproduces the fake-quant round trip exactly, slot by slot."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from impl.cache import KVGeometry
from impl.model.session import Session
from impl.quant import dequantize, fake_quant, quantize
from impl.ring import RingCache, RingConfig, smollm2_windows
from witnesses.synthetic import tiny_llama, token_ids
from witnesses.test_ring_placement import WindowRowsCache, feed_in_chunks, ring_sessions

GREEDY = 12

TINY = np.finfo(np.float32).smallest_subnormal  # 2**-149
finite32 = st.floats(-1e6, 1e6, width=32, allow_nan=False, allow_infinity=False)


def test_stored_ints_times_scale_equal_the_fake_quant_round_trip(evidence):
    @given(
        x=arrays(
            np.float32,
            st.tuples(st.integers(1, 5), st.integers(1, 70)),
            elements=st.one_of(finite32, st.sampled_from([0.0, 0.5, -0.5, 1.5, 2.5, 127.0, -128.0])),
        ),
        bits=st.integers(2, 8),
        zero_row=st.booleans(),
        tiny_row=st.booleans(),
    )
    def prop(x, bits, zero_row, tiny_row):
        x = x.copy()
        if zero_row:
            x[0] = 0
        if tiny_row:  # subnormal: absmax / qmax underflows to 0 in float32
            x[-1] = np.float32(TINY) * np.resize(np.array([1, -1, 0], np.float32), x.shape[1])
        q, scale = quantize(x, bits)
        qmax = 2 ** (bits - 1) - 1
        assert q.dtype == np.int8 and int(q.min()) >= -qmax - 1 and int(q.max()) <= qmax
        got, want = dequantize(q, scale), fake_quant(x, bits)
        delta = float(np.max(np.abs(got.astype(np.float64) - want)))
        evidence.observe("max_abs_delta", delta)
        assert np.array_equal(got, want), f"stored ints x scale differ from fake_quant by {delta}"
        for row, s in zip(
            x, scale, strict=True
        ):  # absmax / qmax; the least positive float32 if that underflows; 1 if all zero
            a = np.float32(np.max(np.abs(row)))
            want_s = a / np.float32(qmax) if a > 0 else np.float32(1.0)
            assert s == (want_s if want_s > 0 else np.float32(TINY))
            evidence.count("zero_vectors", int(a == 0))
            evidence.count("underflowing_vectors", int(a > 0 and want_s == 0))
        evidence.count("examples")

    prop()

    # Where the clip at -qmax - 1 binds: a subnormal vector whose absmax / qmax rounds (float32 has few
    # subnormal digits) to a scale so small that |x| / scale > qmax + 1. Found here by float64 arithmetic
    # on multiples of the least positive float32 (exact), not by impl.
    for bits in range(2, 9):
        qmax = 2 ** (bits - 1) - 1
        for m in range(1, 4 * qmax + 4):
            a = np.float32(m * TINY)
            s = a / np.float32(qmax)  # float32 division, as the documented rule
            if s == 0 or m / (float(s) / TINY) < qmax + 1.5:
                continue
            x = np.array([[-a, a / np.float32(2)], [a, -a]], np.float32)
            q, scale = quantize(x, bits)
            assert int(q[0, 0]) == -qmax - 1 and int(q[1, 0]) == qmax and int(q[1, 1]) == -qmax - 1, (
                f"bits={bits}, x={m} x 2**-149: q={q.tolist()}, the clip gives {-qmax - 1} and {qmax}"
            )
            got, want = dequantize(q, scale), fake_quant(x, bits)
            assert np.array_equal(got, want), f"bits={bits}, x={m} x 2**-149: {got} != fake_quant {want}"
            evidence.count("clip_binding_vectors")


def test_each_slot_reads_back_its_own_scale_after_wrapping_and_growing(evidence):
    """Distinct magnitude per position, so a scale taken from another slot is visible."""
    bad = {"misread": 0, "checked": 0}
    for hint, window, heads in [(2, 4, 1), (1, 5, 2), (3, 8, 3), (2, 3, 2)]:
        cfg = RingConfig(KVGeometry(2, heads, 6, v_head_dim=4), max_seq_len=64, window=window, global_layers=(1,))
        ring = RingCache(cfg, hint=hint, precision="int8")
        written = {}
        for pos in range(3 * window + 1):
            m = np.float32(pos + 1)
            g = cfg.geometry
            k = (m * (np.arange(g.kv_dim, dtype=np.float32) + 1)) * np.where(np.arange(g.kv_dim) % 2, 1, -1)
            v = -m * np.sqrt(np.arange(g.v_dim, dtype=np.float32) + 1)
            for layer in range(2):
                ring.write_kv(layer, pos, k, v)
            written[pos] = (k, v)
        assert ring.slots(0) == window and ring.slots(1) >= 3 * window + 1
        for layer in range(2):
            L = ring.layers[layer]
            lo, hi = L.held()
            for pos in range(lo, hi):
                slot = pos % L.slots
                k_want = fake_quant(written[pos][0].reshape(heads, 6), 8)
                v_want = fake_quant(written[pos][1].reshape(heads, 4), 8)
                k_got = L.buf["kq"][slot].astype(np.float32) * L.buf["ks"][slot][:, None]
                v_got = L.buf["vq"][slot].astype(np.float32) * L.buf["vs"][slot][:, None]
                rk, rv = ring.read(layer, pos, pos + 1)
                ok = (
                    np.array_equal(k_got, k_want)
                    and np.array_equal(v_got, v_want)
                    and np.array_equal(rk[0], k_want.reshape(-1))
                    and np.array_equal(rv[0], v_want.reshape(-1))
                )
                bad["checked"] += 1
                if not ok:
                    bad["misread"] += 1
    evidence.record("misread_slots", bad["misread"])
    evidence.record("slots_checked", bad["checked"])
    assert bad["misread"] == 0, f"{bad['misread']} of {bad['checked']} slots read back a wrong scale or value"


def test_int8_attention_equals_f32_attention_over_fake_quantised_kv(evidence):
    """int8 ring session vs a float32 contiguous session that stores fake_quant(K), fake_quant(V)."""

    @given(p=ring_sessions)
    def prop(p):
        model = tiny_llama(n_layers=p["n_layers"], n_kv_heads=p["n_kv_heads"], group=2, head_dim=p["head_dim"])
        ws = [None if p["global_mask"][i] else p["window"] for i in range(p["n_layers"])]
        ring = Session(model, window=ws, cache="ring", hint=p["hint"], precision="int8")
        ref = Session(model, window=ws, cache=WindowRowsCache(model, ws, quant=True))
        la, lb = feed_in_chunks([ring, ref], token_ids(p["n"], p["seed"]), p["chunks"])
        delta = float(np.max(np.abs(la.astype(np.float64) - lb)))
        evidence.observe("max_abs_delta", delta)
        evidence.count("examples")
        assert delta == 0.0 and ring.generate([], 3) == ref.generate([], 3), f"max|delta|={delta}"

    prop()


def test_int8_changes_the_logits(evidence):
    """Control: int8 storage really quantises (else the exactness above compares f32 with itself)."""
    model = tiny_llama(n_layers=2, n_kv_heads=2, group=2, head_dim=8)
    ids = token_ids(20, 3)
    a = Session(model, window=4, cache="ring", precision="int8")
    b = Session(model, window=4, cache="ring")
    delta = float(np.max(np.abs(a.prefill(ids).astype(np.float64) - b.prefill(ids))))
    evidence.record("max_abs_delta", delta)
    assert delta > 0


# ---- real weights: the agreement int8 keeps with float32 ------------------------------------


def _greedy(model, ids, window, precision, sessions=None):
    s = model.session(window=window, cache="ring", hint=64, precision=precision)
    if sessions is not None:
        sessions.append(s)
    return s.generate(ids, GREEDY)


def test_real_weights_int8_keeps_greedy_tokens_of_f32(smollm2, oracle, evidence):
    """SmolLM2 on the oracle's reference prompts, 12 greedy tokens, ring with a 1024 window on 25 of 30
    layers: f32 reproduces the oracle; int8's agreement with f32 is measured and recorded."""
    ws = smollm2_windows(1024)
    per, equal, total, f32_off = [], 0, 0, 0
    for name in oracle.prompt_names:
        rec = oracle.prompt(name)
        ids = [int(t) for t in rec.ids]
        g32 = _greedy(smollm2, ids, ws, "f32")
        g8 = _greedy(smollm2, ids, ws, "int8")
        f32_off += sum(a != int(b) for a, b in zip(g32, rec.greedy, strict=True))
        same = sum(a == b for a, b in zip(g8, g32, strict=True))
        first = next((i for i, (a, b) in enumerate(zip(g8, g32, strict=True)) if a != b), GREEDY)
        per.append(f"{name}:{same}/{GREEDY} (first diff at {first})")
        equal += same
        total += GREEDY
    evidence.record("f32_tokens_differing_from_oracle", f32_off)
    evidence.record("int8_tokens_equal_f32", equal)
    evidence.record("tokens_compared", total)
    evidence.record("per_prompt", "; ".join(per))
    assert f32_off == 0, "the f32 ring (no prompt reaches the window) must reproduce the oracle's greedy tokens"


def test_real_weights_int8_on_a_wrapped_ring(smollm2, oracle, evidence):
    """The long prompt with a 64 window on 25 layers, so the rings wrap: int8 vs f32, 12 greedy tokens."""
    ws = smollm2_windows(64)
    ids = [int(t) for t in oracle.prompt("long").ids]
    sessions = []
    g32 = _greedy(smollm2, ids, ws, "f32", sessions)
    g8 = _greedy(smollm2, ids, ws, "int8", sessions)
    same = sum(a == b for a, b in zip(g8, g32, strict=True))
    # the measurement means something only if the windowed rings really wrapped
    local = [i for i, w in enumerate(ws) if w is not None]
    for s in sessions:
        assert len(s) == len(ids) + GREEDY > 64
        assert all(s.cache.ring.slots(i) == 64 for i in local), "a windowed ring did not stop at its window"
    assert len(g8) == len(g32) == GREEDY
    evidence.record("prompt_tokens", len(ids))
    evidence.record("int8_tokens_equal_f32", same)
    evidence.record("tokens_compared", GREEDY)
    evidence.record("f32_continuation", smollm2.tokenizer.decode(g32))
    evidence.record("int8_continuation", smollm2.tokenizer.decode(g8))
