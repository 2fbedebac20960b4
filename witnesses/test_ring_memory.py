"""RING-T4: a ring session pays for what it uses; int8 holds K/V in about a quarter; nbytes is exact."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from impl.cache import KVGeometry
from impl.model.session import Session
from impl.ring import RingCache, RingConfig, reserved_bytes
from witnesses.synthetic import tiny_llama, token_ids

SMOLLM2_GLOBAL = (5, 11, 17, 23, 29)  # impl.ring.smollm2_windows(1024): every 6th layer global
F32, I8 = 4, 1  # bytes of one float32 and one int8


def smollm2_ring() -> RingConfig:
    """SmolLM2-135M's KV geometry (30 layers, 3 KV heads of 64) with a 1024 window on 25 layers."""
    return RingConfig(KVGeometry(30, 3, 64), max_seq_len=8192, window=1024, global_layers=SMOLLM2_GLOBAL)


def row_bytes(g: KVGeometry, precision: str) -> int:
    """Bytes one position costs in one layer, from the geometry: K and V values, plus for int8 one float32
    scale per KV head for K and one for V."""
    values = g.n_kv_heads * (g.head_dim + g.v_head_dim)
    if precision == "f32":
        return values * F32
    return values * I8 + 2 * g.n_kv_heads * F32


def reserved_from_geometry(
    n_layers: int,
    geometry: KVGeometry,
    max_seq_len: int,
    window: int | None,
    global_layers: tuple[int, ...],
    precision: str,
) -> int:
    """A fixed allocation's bytes, worked out here: each global layer (every layer when window is None)
    reserves max_seq_len rows, each local layer min(window, max_seq_len) rows, at row_bytes each."""
    rows = sum(
        max_seq_len if window is None or layer in global_layers else min(window, max_seq_len)
        for layer in range(n_layers)
    )
    return rows * row_bytes(geometry, precision)


def session_of(n: int, precision: str, hint: int = 64) -> RingCache:
    """A ring after n positions on every layer (zeros: memory does not depend on the values)."""
    cfg = smollm2_ring()
    ring = RingCache(cfg, hint=hint, precision=precision)
    k = np.zeros((n, cfg.geometry.kv_dim), np.float32)
    for layer in range(cfg.geometry.n_layers):
        ring.write_rows(layer, 0, k, k)
    ring.advance(n)
    return ring


def held_arrays(obj) -> dict[int, np.ndarray]:
    """Every numpy buffer reachable from ``obj`` through impl objects, lists, tuples and dicts (by base)."""
    found: dict[int, np.ndarray] = {}
    seen: set[int] = set()

    def walk(o):
        if id(o) in seen:
            return
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            base = o
            while isinstance(base.base, np.ndarray):
                base = base.base
            found[id(base)] = base
        elif isinstance(o, dict):
            for x in o.values():
                walk(x)
        elif isinstance(o, (list, tuple, set)):
            for x in o:
                walk(x)
        elif type(o).__module__.startswith("impl.") and hasattr(o, "__dict__"):
            for x in vars(o).values():
                walk(x)

    walk(obj)
    return found


def test_a_512_token_session_pays_at_least_4x_less_than_reserving(evidence):
    ring = session_of(512, "f32")
    g = KVGeometry(30, 3, 64)
    reserved = reserved_from_geometry(30, g, 8192, 1024, SMOLLM2_GLOBAL, "f32")
    assert reserved == (25 * 1024 + 5 * 8192) * 2 * 192 * 4, "25 local x 1024 + 5 global x 8192 slots of K + V"
    held = ring.nbytes
    evidence.record("session_bytes", held)
    evidence.record("session_mib", round(held / 2**20, 2))
    evidence.record("reserved_mib", round(reserved / 2**20, 2))
    evidence.record("saving_factor", round(reserved / held, 3))
    assert [ring.slots(i) for i in range(30)] == [512] * 30
    # fed one decode step at a time (hint 64): doublings at 64, 128 and 256 only, so again 512 slots a layer
    stepped = RingCache(smollm2_ring(), hint=64)
    row = np.zeros(192, np.float32)
    for pos in range(512):
        for layer in range(30):
            stepped.write_kv(layer, pos, row, row)
        stepped.advance()
    assert [stepped.slots(i) for i in range(30)] == [512] * 30, "stepping grew a ring past what it uses"
    assert stepped.nbytes == held
    assert held == 30 * 512 * 2 * 192 * 4, "30 layers x 512 slots x (K + V) x 192 floats"
    assert reserved / held >= 4


def test_int8_holds_kv_in_about_a_quarter_of_f32(evidence):
    f32, i8 = session_of(512, "f32"), session_of(512, "int8")
    ratio = i8.nbytes / f32.nbytes
    evidence.record("int8_bytes", i8.nbytes)
    evidence.record("int8_mib", round(i8.nbytes / 2**20, 2))
    evidence.record("int8_to_f32", round(ratio, 4))
    assert ratio == (64 + 4) / (4 * 64), "per (slot, head): 64 int8 values + one float32 scale vs 64 float32"


def test_nbytes_is_exactly_the_arrays_held(evidence):
    """After real sessions (growth, wrap, staged chunks): nbytes == the sum of every buffer reachable
    from the store, and an int8 store holds no float32 K/V buffer (only its scales are float32)."""
    model = tiny_llama(n_layers=3, n_kv_heads=2, group=2, head_dim=8)
    ws = [6, None, 6]
    unaccounted, f32_kv = 0, 0
    for precision in ("f32", "int8"):
        for n, hint, chunk in [(5, 2, 5), (23, 3, 9), (40, 1, 1), (40, 64, 40)]:
            s = Session(model, window=ws, cache="ring", hint=hint, precision=precision)
            store = s.cache
            ids = token_ids(n, n)
            for i in range(0, n, chunk):
                s.prefill(ids[i : i + chunk])
            reported = store.nbytes  # commits a staged chunk first, then counts
            arrays = held_arrays(store)
            unaccounted += abs(sum(a.nbytes for a in arrays.values()) - reported)
            if precision == "int8":
                f32_kv += sum(
                    1 for a in arrays.values() if a.dtype == np.float32 and a.ndim >= 2 and a.shape[-1] in (8, 16)
                )  # a K/V row or head of floats
    evidence.record("bytes_unaccounted", unaccounted)
    evidence.record("f32_kv_buffers_in_int8", f32_kv)
    assert unaccounted == 0 and f32_kv == 0, f"nbytes off by {unaccounted}; {f32_kv} float32 K/V buffers in int8"


def test_reserved_bytes_is_every_cap_times_the_row_bytes(evidence):
    """impl.ring.reserved_bytes (what RING-T4's baseline used to be) equals the witness's own arithmetic:
    on the SmolLM2 configuration and on small random ones (windows above and below max_seq_len, value
    heads of another width, no local layers), at float32 and int8."""
    cases = [(30, KVGeometry(30, 3, 64), 8192, 1024, SMOLLM2_GLOBAL)]

    @given(
        n_layers=st.integers(1, 5),
        n_kv_heads=st.integers(1, 3),
        head_dim=st.sampled_from([2, 4, 8]),
        v_head_dim=st.sampled_from([None, 2, 6]),
        max_seq_len=st.integers(1, 40),
        window=st.one_of(st.none(), st.integers(1, 50)),
        data=st.data(),
    )
    def prop(n_layers, n_kv_heads, head_dim, v_head_dim, max_seq_len, window, data):
        gl = tuple(data.draw(st.lists(st.integers(0, n_layers - 1), max_size=n_layers, unique=True), "globals"))
        check(n_layers, KVGeometry(n_layers, n_kv_heads, head_dim, v_head_dim), max_seq_len, window, gl)

    def check(n_layers, g, max_seq_len, window, gl):
        cfg = RingConfig(g, max_seq_len=max_seq_len, window=window, global_layers=gl)
        for precision in ("f32", "int8"):
            want = reserved_from_geometry(n_layers, g, max_seq_len, window, gl, precision)
            got = reserved_bytes(cfg, precision)
            evidence.observe("reserved_bytes_off", abs(got - want))
            assert got == want, f"reserved_bytes={got} for {cfg} at {precision}; the caps x row bytes give {want}"
        evidence.count("configs")

    for case in cases:
        check(*case)
    prop()
