"""RING-T2: spans never exceed the ring; running past max_seq_len is refused or reported."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from impl.cache import KVGeometry
from impl.model.session import Session
from impl.ring import RingCache, RingConfig
from impl.ring_store import ContextFull, RingKVStore
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


def _reads_are_exactly_what_is_held(ring, layer, h_lo, h_hi, written, evidence, where=""):
    """RingCache.read(layer, lo, hi) for every lo, hi around the held [h_lo, h_hi) (inverted ones too): accepted
    exactly when h_lo <= lo <= hi <= h_hi, with (hi - lo, 2) K and V and each position's own rows where
    ``written`` (position -> (k, v)) has them (a gap position was never written: no claim on its rows);
    refused with CacheError otherwise."""
    from impl.errors import CacheError

    for lo in range(max(-1, h_lo - 2), h_hi + 3):
        for hi in range(lo - 1, h_hi + 3):
            ok = h_lo <= lo <= hi <= h_hi
            try:
                k, v = ring.read(layer, lo, hi)
            except CacheError:
                assert not ok, f"layer {layer}{where}: read({lo}, {hi}) refused, the ring holds {h_lo}..{h_hi - 1}"
                evidence.count("refused")
                continue
            assert ok, f"layer {layer}{where}: read({lo}, {hi}) accepted, the ring holds {h_lo}..{h_hi - 1}"
            assert k.shape == (hi - lo, 2) and v.shape == (hi - lo, 2), (lo, hi, k.shape, v.shape)
            for i, p in enumerate(range(lo, hi)):
                if p in written:
                    wk, wv = written[p]
                    if not (np.array_equal(k[i], wk) and np.array_equal(v[i], wv)):
                        evidence.count("misread_rows")
                        raise AssertionError(
                            f"layer {layer}{where}: read({lo}, {hi}) row of pos {p} is {k[i]}, {v[i]}; "
                            f"written {wk}, {wv}"
                        )
            evidence.count("accepted")
            evidence.count("empty_reads", int(lo == hi))


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
                _reads_are_exactly_what_is_held(ring, layer, max(0, high - slots[layer]), high, latest[layer], evidence)
        evidence.count("saturated_examples", int(ring.is_saturated()))
        evidence.count("examples")

    prop()


def test_truncate_keeps_the_held_positions_below_n_and_never_gets_a_reused_slot_back(evidence):
    """Writes and truncate(n) interleaved, on a ring of a local and a global layer: truncate(n) drops positions
    >= n; the positions below n the ring held stay held with their own rows; a position whose slot a later one
    reused stays gone (truncating below it recovers nothing: the layer then holds nothing, and its next write
    goes at or past the gone positions); len(ring), the next position to decode, becomes min(len, n). After
    every step RingCache.read(layer, lo, hi) accepts exactly the held [lo, hi) and returns each position's own
    rows, and is_saturated() is true exactly while a layer that needs more than its cap has lost a position it
    was given. The held ranges are worked out here from those rules (a gone position never comes back), not
    asked of impl."""

    step = st.one_of(
        st.tuples(st.just("write"), st.integers(0, 2), st.integers(1, 6)),
        st.tuples(st.just("truncate"), st.integers(0, 8), st.just(0)),
    )

    @given(
        hint=st.integers(1, 6),
        window=st.integers(1, 8),
        max_seq_len=st.integers(1, 12),
        steps=st.lists(step, max_size=9),
    )
    @example(hint=4, window=4, max_seq_len=8, steps=[("write", 0, 6), ("truncate", 2, 0), ("write", 0, 1)])
    @example(hint=2, window=3, max_seq_len=4, steps=[("write", 0, 7), ("truncate", 5, 0), ("write", 0, 2)])
    @example(hint=4, window=2, max_seq_len=4, steps=[("write", 0, 5), ("truncate", 2, 0)])  # lost exactly one
    def prop(hint, window, max_seq_len, steps):
        cfg = RingConfig(KVGeometry(2, 1, 2), max_seq_len=max_seq_len, window=window, global_layers=(1,))
        ring = RingCache(cfg, hint=hint)
        caps = [min(window, max_seq_len), max_seq_len]
        needs_more = [window > max_seq_len, True]
        slots = [min(hint, c) for c in caps]
        gone = [0, 0]  # positions below gone[layer] are gone for good (their slots were reused)
        high = [0, 0]  # one past the highest position each layer holds (or, having lost all, what is gone)
        rows: list[dict] = [{}, {}]
        length = 0  # len(ring): the next position the decode path writes (advanced past each write here)
        for what, a, t in steps:
            if what == "truncate":
                n = max(0, max(high) - a)
                for la in range(2):
                    if high[la] > n:  # (a layer holding nothing at or past n keeps what it holds)
                        gone[la] = max(gone[la], high[la] - slots[la])
                        high[la] = max(n, gone[la])
                    rows[la] = {p: r for p, r in rows[la].items() if p < n}
                evidence.count("truncations")
                evidence.count("lost_history", int(any(n < g for g in gone)))
                ring.truncate(n)
                length = min(length, n)
            else:
                start = max(high) + a
                for la in range(2):
                    pos = np.arange(start, start + t, dtype=np.float32)[:, None] + 1
                    k = np.concatenate([pos, -pos], axis=1) + 1000 * la
                    v = np.concatenate([pos + 0.5, 2 * pos], axis=1) - 1000 * la + 100 * len(rows[la])
                    ring.write_rows(la, start, k, v)
                    rows[la].update({start + i: (k[i], v[i]) for i in range(t)})
                    last = start + t - 1
                    if last >= slots[la] and slots[la] < caps[la]:
                        slots[la] = min(caps[la], max(2 * slots[la], last + 1))
                    high[la] = start + t
                ring.advance(start + t - length)
                length = start + t
            assert len(ring) == length, f"after {steps}: len(ring) = {len(ring)}, want {length}"
            for la in range(2):
                h_lo = max(0, gone[la], high[la] - slots[la])
                _reads_are_exactly_what_is_held(ring, la, h_lo, high[la], rows[la], evidence, f" after {steps}")
            lost = [needs_more[la] and max(gone[la], high[la] - slots[la]) > 0 for la in range(2)]
            assert ring.is_saturated() == any(lost), (
                f"after {steps}: is_saturated() = {ring.is_saturated()}, but the layers that lost a position "
                f"they need are {[la for la in range(2) if lost[la]]}"
            )
            evidence.count("saturated_after_truncate", int(what == "truncate" and any(lost)))
        evidence.count("examples")

    prop()


def test_ring_store_truncate_of_a_failed_forward_equals_never_feeding_it(evidence):
    """A RingKVStore (a local and a global layer, refuse mode) fed a prefix, then a forward that reserves a
    chunk, writes every layer (staged where the chunk would reuse slots it reads) and reads it, and then
    truncate(n) back into or before that chunk; then more chunks. It must act as a store that was only ever
    fed the positions below n (the same rows): the same length, the same refusals, and every later query's
    view of every layer the same (lo and rows); after flush() the ring's length is the store's and it no
    longer serves position n. truncate refuses (CacheError, nothing changed) an n past the length, a negative
    one and one that is not an int. Rows are values of the position (the failed chunk's poisoned), so a
    dropped row that leaks shows."""
    from impl.errors import CacheError

    def rows(layer: int, start: int, t: int, poison: bool):
        pos = np.arange(start, start + t, dtype=np.float32)[:, None] + 1
        k = np.concatenate([pos, -pos], axis=1) + 1000 * layer - (7777 if poison else 0)
        v = np.concatenate([pos + 0.5, 2 * pos], axis=1) - 1000 * layer
        return k, v

    def feed(store, t: int, poison: bool = False):
        """A forward of t positions: reserve, write every layer, then each query's view; None when refused."""
        try:
            at = store.reserve(t)
        except ContextFull:
            return None
        seen = []
        try:
            for layer in range(2):
                k, v = rows(layer, int(at[0]), t, poison)
                store.write(layer, int(at[0]), k, k, v)
                seen += [(layer, int(q) + 1, *store.view(layer, int(q) + 1)) for q in at]
        except CacheError as e:  # a forward the never-fed store runs is a failed check here, not a crash
            return f"CacheError: {e}"
        return seen

    def same(got, want, when: str) -> None:
        assert (got is None) == (want is None), f"{when}: {'refused' if got is None else 'fed'} here, not never-fed"
        if isinstance(got, str) or isinstance(want, str):  # the same failure in both is the same behaviour
            shown = [x if isinstance(x, str) else "ran" for x in (got, want)]
            assert got == want, f"{when}: here {shown[0]}; never-fed {shown[1]}"
            evidence.count("same_failures")
            return
        for (layer, hi, ka, va, la), (_, _, kb, vb, lb) in zip(got or (), want or (), strict=True):
            ok = la == lb and np.array_equal(ka, kb) and np.array_equal(va, vb)
            assert ok, f"{when}: layer {layer} view({hi}) from {la}: {ka.tolist()}; never-fed from {lb}: {kb.tolist()}"
            evidence.count("views_compared")

    @given(
        hint=st.integers(1, 4),
        window=st.integers(1, 6),
        max_seq_len=st.integers(2, 10),
        prefix=st.lists(st.integers(1, 4), max_size=3),
        chunk=st.integers(1, 5),
        keep=st.integers(0, 5),
        after=st.lists(st.integers(1, 3), max_size=3),
    )
    @example(hint=2, window=3, max_seq_len=10, prefix=[2, 1], chunk=4, keep=2, after=[1, 2])
    @example(hint=4, window=2, max_seq_len=8, prefix=[3], chunk=1, keep=0, after=[1])
    def prop(hint, window, max_seq_len, prefix, chunk, keep, after):
        cfg = RingConfig(KVGeometry(2, 1, 2), max_seq_len=max_seq_len, window=window, global_layers=(1,))
        a, b = RingKVStore(RingCache(cfg, hint=hint)), RingKVStore(RingCache(cfg, hint=hint))
        for t in prefix:
            same(feed(a, t), feed(b, t), f"prefix {prefix}")
        p = len(a)
        if feed(a, chunk, poison=True) is None:
            evidence.count("chunk_refused")
            return
        n = p + min(keep, chunk)
        for bad in (len(a) + 1, -1, True, float(n), None):  # refused (CacheError), nothing changed
            try:
                a.truncate(bad)
            except CacheError:
                evidence.count("bad_truncations_refused")
            else:
                raise AssertionError(f"truncate({bad!r}) at length {p + chunk}: accepted")
            assert len(a) == p + chunk, f"a refused truncate({bad!r}) changed the length to {len(a)}"
        staged = any(chunk > 1 and p + chunk > cfg.cap(layer) for layer in range(2))
        evidence.count("staged_chunks", int(staged))
        evidence.count("cut_inside_chunk", int(p < n < p + chunk))
        a.truncate(n)
        if n > p:
            assert feed(b, n - p, poison=True) is not None
        assert len(a) == len(b) == n, f"truncate({n}): length {len(a)}"
        for t in after:
            same(feed(a, t), feed(b, t), f"after {prefix}, a chunk of {chunk}, truncate({n}), {after}")
        for s in (a, b):
            s.flush()
            assert len(s.ring) == len(s), f"after flush the ring's length is {len(s.ring)}, the store's {len(s)}"
        for layer in range(2):
            try:
                a.ring.read(layer, 0, len(a) + 1)
            except CacheError:
                evidence.count("past_length_refused")
            else:
                raise AssertionError(f"layer {layer}: the ring still serves position {len(a)} after truncate({n})")
        evidence.count("examples")

    prop()
