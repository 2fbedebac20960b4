"""RING-T1: ring placement and growth; ring attention equals contiguous attention over the window.

The references here are contiguous ``KVCache``s driven by the same forward
pass. ``WindowRowsCache`` hands attention exactly the window's rows
[lo, hi) (what a sliding window means, summed over the window only);
the stock ``KVCache`` hands rows [0, hi) with the out-of-window scores
masked to -inf, whose float32 sums run over a different length.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from impl.attention import attention_kernel, window_lo
from impl.cache import KVGeometry
from impl.kv import KVCache
from impl.model.session import Session
from impl.quant import fake_quant
from impl.ring import RingCache, RingConfig
from witnesses.synthetic import tiny_llama, token_ids


class WindowRowsCache(KVCache):
    """Contiguous cache whose ``view`` gives only the window's rows [lo, hi) of each layer.

    ``windows``: per layer W or None; ``caps``: per layer the most rows a
    layer may see (a saturated global layer's max_seq_len), or None.
    ``quant``: store fake_quant(K), fake_quant(V) per (row, KV head), the
    float32 values an int8 cache must compute on.
    """

    def __init__(self, model, windows, caps=None, quant: bool = False) -> None:
        c = model.config
        super().__init__(c.kv_geometry, model.ropes)
        self.windows = list(windows)
        self.caps = list(caps) if caps is not None else [None] * c.n_layers
        self.quant = quant

    def write(self, layer, start, k_raw, k, v):
        if self.quant:
            t, g = k.shape[0], self.geometry
            k = fake_quant(k.reshape(t, g.n_kv_heads, g.head_dim), 8).reshape(t, -1)
            v = fake_quant(v.reshape(t, g.n_kv_heads, g.head_dim), 8).reshape(t, -1)
        super().write(layer, start, k_raw, k, v)

    def view(self, layer, hi):
        lo = window_lo(self.pos, hi, self.windows[layer])
        if self.caps[layer] is not None:
            lo = max(lo, hi - self.caps[layer])
        return self._k[layer][lo:hi], self._v[layer][lo:hi], lo


def feed_in_chunks(sessions, ids, sizes):
    """Feed ids to every session in the same chunks; returns each one's stacked logits."""
    outs = [[] for _ in sessions]
    i = 0
    for t in sizes:
        if i >= len(ids):
            break
        chunk = ids[i : i + t]
        i += t
        for o, s in zip(outs, sessions, strict=True):
            o.append(s.prefill(chunk))
    if i < len(ids):
        for o, s in zip(outs, sessions, strict=True):
            o.append(s.prefill(ids[i:]))
    return [np.concatenate(o) for o in outs]


ring_sessions = st.fixed_dictionaries(
    {
        "n_layers": st.integers(1, 3),
        "n_kv_heads": st.integers(1, 3),
        "head_dim": st.sampled_from([2, 4, 8]),
        "window": st.integers(1, 12),
        "global_mask": st.lists(st.booleans(), min_size=3, max_size=3),
        "hint": st.integers(1, 16),
        "n": st.integers(1, 40),
        "chunks": st.lists(st.integers(1, 20), min_size=1, max_size=8),
        "seed": st.integers(0, 9999),
    }
)


def test_ring_attention_equals_contiguous_window_rows_bit_for_bit(evidence):
    """Logits of every fed row and of 4 greedy steps, and every row the ring holds, bit for bit."""

    @given(p=ring_sessions)
    def prop(p):
        model = tiny_llama(n_layers=p["n_layers"], n_kv_heads=p["n_kv_heads"], group=2, head_dim=p["head_dim"])
        ws = [None if p["global_mask"][i] else p["window"] for i in range(p["n_layers"])]
        ring = Session(model, window=ws, cache="ring", hint=p["hint"])
        store = ring.cache
        ref = Session(model, window=ws, cache=WindowRowsCache(model, ws))
        ids = token_ids(p["n"], p["seed"])
        la, lb = feed_in_chunks([ring, ref], ids, p["chunks"])
        ga, gb = ring.generate([], 4), ref.generate([], 4)
        delta = float(np.max(np.abs(la.astype(np.float64) - lb)))
        n = len(store)
        for layer in range(p["n_layers"]):  # every held row, as stored
            lo, _ = store.ring.span(layer, n - 1)  # [lo, n)
            k, v = store.ring.read(layer, lo, n)
            delta = max(
                delta,
                float(np.max(np.abs(k.astype(np.float64) - ref.cache.k[layer][lo:n]))),
                float(np.max(np.abs(v.astype(np.float64) - ref.cache.v[layer][lo:n]))),
            )
        evidence.observe("max_abs_delta", delta)
        evidence.count("examples")
        evidence.count("examples_past_window", int(n > p["window"] and any(w is not None for w in ws)))
        assert delta == 0.0 and ga == gb, f"ring differs from the window-rows reference: max|delta|={delta}"

    prop()


def test_growth_never_scrambles_any_held_position(evidence):
    """Tagged writes at ascending positions (with gaps); after each, every held position reads its own tag."""

    @given(
        hint=st.integers(1, 20),
        window=st.integers(1, 24),
        max_seq_len=st.integers(1, 40),
        heads=st.integers(1, 3),
        steps=st.lists(st.integers(1, 4), min_size=1, max_size=60),
        precision=st.sampled_from(["f32", "int8"]),
    )
    def prop(hint, window, max_seq_len, heads, steps, precision):
        cfg = RingConfig(
            KVGeometry(2, heads, 4, v_head_dim=2), max_seq_len=max_seq_len, window=window, global_layers=(1,)
        )
        ring = RingCache(cfg, hint=hint, precision=precision)
        tags = {}  # (layer, pos) -> (k, v) as written
        pos = -1
        for step in steps:
            pos += step
            for layer in range(2):
                before = ring.slots(layer)
                k = ((pos + 1) * (np.arange(cfg.geometry.kv_dim) + 1) * (1 + layer)).astype(np.float32)
                v = (-(pos + 1) * (np.arange(cfg.geometry.v_dim) + 1) * (1 + layer)).astype(np.float32)
                ring.write_kv(layer, pos, k, v)
                tags[layer, pos] = (k, v)
                evidence.count("growths", int(ring.slots(layer) != before))
                assert ring.slots(layer) <= cfg.cap(layer)
                lo, hi = ring.layers[layer].held()
                for q in range(lo, hi):
                    if (layer, q) not in tags:
                        continue  # a gap: never written
                    got_k, got_v = ring.read(layer, q, q + 1)
                    want_k, want_v = tags[layer, q]
                    if precision == "int8":
                        want_k = fake_quant(want_k.reshape(heads, 4), 8).reshape(-1)
                        want_v = fake_quant(want_v.reshape(heads, 2), 8).reshape(-1)
                    if not (np.array_equal(got_k[0], want_k) and np.array_equal(got_v[0], want_v)):
                        evidence.count("misplaced_rows")
                        raise AssertionError(
                            f"layer {layer} pos {q} reads back another position's K/V "
                            f"after writing pos {pos} (slots {ring.slots(layer)})"
                        )
        evidence.count("misplaced_rows", 0)  # present (0) when every held row read back its own tag
        evidence.count("examples")

    prop()


def test_local_slots_cap_at_window_and_global_keep_growing(evidence):
    """The seed's geometry: 4 layers, window 4, layer 3 global, max_seq_len 64, hint 2."""
    cfg = RingConfig(KVGeometry(4, 1, 4), max_seq_len=64, window=4, global_layers=(3,))
    ring = RingCache(cfg, hint=2)
    k = np.ones(4, np.float32)
    assert ring.slots(0) == 2 and ring.slots(3) == 2, "every layer starts at the hint, not its cap"
    ring.write_kv(0, 3, k, k)
    assert ring.slots(0) == 4
    ring.write_kv(0, 99, k, k)
    assert ring.slots(0) == 4, "a local layer never exceeds its window"
    seen = []
    for pos in range(40):
        ring.write_kv(3, pos, k, k)
        seen.append(ring.slots(3))
    assert seen[-1] >= 40 and seen == sorted(seen), f"the global layer must keep growing: {seen}"
    evidence.record("local_slots", ring.slots(0))
    evidence.record("global_slots_after_40", ring.slots(3))
    assert ring.slots(0) == 4


def test_ring_session_vs_masked_contiguous_session(evidence):
    """Against the stock contiguous session (the window applied inside attention, which holds every row):
    bit-identical on either attention path (each reads exactly a query's visible rows, never the others)."""
    kernel = attention_kernel() is not None
    evidence.record("attention_path", "kernel" if kernel else "numpy")

    @given(p=ring_sessions)
    def prop(p):
        model = tiny_llama(n_layers=p["n_layers"], n_kv_heads=p["n_kv_heads"], group=2, head_dim=p["head_dim"])
        ws = [None if p["global_mask"][i] else p["window"] for i in range(p["n_layers"])]
        ring = Session(model, window=ws, cache="ring", hint=p["hint"])
        ref = Session(model, window=ws)
        la, lb = feed_in_chunks([ring, ref], token_ids(p["n"], p["seed"]), p["chunks"])
        delta = float(np.max(np.abs(la.astype(np.float64) - lb)))
        evidence.observe("max_abs_delta", delta)
        evidence.observe("max_rel_delta", delta / float(np.max(np.abs(lb))))
        ga, gb = ring.generate([], 4), ref.generate([], 4)
        evidence.count("greedy_tokens_compared", len(ga))
        evidence.count("greedy_tokens_differing", sum(a != b for a, b in zip(ga, gb, strict=True)))
        evidence.count("examples")
        path = "kernel" if kernel else "numpy"
        assert delta == 0.0 and ga == gb, f"{path} path: ring and stock contiguous logits differ by {delta}"

    prop()


def test_window_rows_reference_sees_a_window_one_row_longer(evidence):
    """Control: the bit-exact comparison can see the window: the window-rows reference with W and with
    W + 1 give different logits on 40 tokens, so a ring that held or read one row too many would show.

    Also recorded: how the stock contiguous session differs from the window-rows reading of the same
    window (not at all, on either attention path)."""
    model = tiny_llama(n_layers=2, n_kv_heads=2, group=2, head_dim=8)
    ids = token_ids(40, 7)
    w, w1 = [5, 5], [6, 6]
    la = Session(model, window=w, cache=WindowRowsCache(model, w)).prefill(ids)
    lb = Session(model, window=w1, cache=WindowRowsCache(model, w1)).prefill(ids)
    delta = float(np.max(np.abs(la.astype(np.float64) - lb)))
    evidence.record("max_abs_delta", delta)
    evidence.record("rows_differing", int(np.sum(np.any(la != lb, axis=1))))
    masked = Session(model, window=w).prefill(ids)
    evidence.record("masked_vs_window_rows_delta", float(np.max(np.abs(masked.astype(np.float64) - la))))
    assert delta > 0, "windows of 5 and 6 rows give the same logits here: the control shows nothing"


def test_ring_store_takes_one_window_for_its_local_layers(evidence):
    """make_cache("ring") (Session(cache="ring")) takes a window list whose non-None entries are one W: the
    ring's local layers get W, the None layers are global; a list with two different windows raises
    CacheError (the ring has one window)."""
    from impl.errors import CacheError

    model = tiny_llama(n_layers=3, n_kv_heads=1, group=2, head_dim=4)
    for ws, ok in [
        ([2, None, 2], True),
        ([None, None, None], True),
        ([3, 3, 3], True),
        (4, True),
        ([2, 3, None], False),
        ([2, None, 5], False),
        ([1, 2, 3], False),
    ]:
        try:
            s = Session(model, window=ws, cache="ring", hint=2)
        except CacheError:
            assert not ok, f"window={ws}: refused, the non-None windows are one W"
            evidence.count("refused")
            continue
        assert ok, f"window={ws}: accepted, but the ring has one window for its local layers"
        per = ws if isinstance(ws, list) else [ws] * 3
        cfg = s.cache.ring.config
        local = {w for w in per if w is not None}
        assert cfg.window == (local.pop() if local else None), (ws, cfg.window)
        assert cfg.global_layers == tuple(i for i, w in enumerate(per) if w is None), (ws, cfg.global_layers)
        evidence.count("accepted")
