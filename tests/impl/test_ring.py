"""impl.ring behaviours no card names: errors, truncate, clone, staging, the Model.session wiring."""

import numpy as np
import pytest

from impl.cache import KVGeometry
from impl.designs import make_cache
from impl.errors import CacheError
from impl.model.session import Session
from impl.ring import RingCache, RingConfig, reserved_bytes, smollm2_windows
from impl.ring_store import ContextFull, RingKVStore


def cfg(**kw):
    base = dict(geometry=KVGeometry(2, 1, 2), max_seq_len=16, window=4, global_layers=(1,))
    base.update(kw)
    return RingConfig(**base)


@pytest.mark.parametrize(
    "field,value", [("max_seq_len", True), ("window", 0), ("global_layers", (5,)), ("geometry", (2, 1, 2))]
)
def test_config_rejects_bad_fields_naming_them(field, value):
    with pytest.raises(CacheError, match=field):
        cfg(**{field: value})


@pytest.mark.parametrize("field,value", [("n_layers", 0), ("head_dim", -1), ("v_head_dim", 0), ("n_kv_heads", True)])
def test_geometry_rejects_bad_fields_naming_them(field, value):
    with pytest.raises(CacheError, match=f"KVGeometry\\({field}="):
        KVGeometry(**dict(dict(n_layers=2, n_kv_heads=1, head_dim=2), **{field: value}))


def test_cache_rejects_bad_precision_and_hint():
    with pytest.raises(CacheError, match="precision='fp16'"):
        RingCache(cfg(), precision="fp16")
    with pytest.raises(CacheError, match="hint=0"):
        RingCache(cfg(), hint=0)


def test_write_below_what_the_ring_holds_is_refused():
    ring = RingCache(cfg(), hint=4)
    x = np.zeros(2, np.float32)
    for p in range(10):
        ring.write_kv(0, p, x, x)
    with pytest.raises(CacheError, match="ascending"):
        ring.write_kv(0, 3, x, x)


def test_read_of_a_position_no_longer_held_raises():
    ring = RingCache(cfg(), hint=4)
    x = np.zeros(2, np.float32)
    for p in range(10):
        ring.write_kv(0, p, x, x)
    with pytest.raises(CacheError, match="holds 6..9"):
        ring.read(0, 5, 10)


def test_window_none_makes_every_layer_global_and_grows_to_max_seq_len():
    ring = RingCache(cfg(window=None, global_layers=()), hint=1)
    x = np.zeros(2, np.float32)
    for p in range(16):
        ring.write_kv(0, p, x, x)
    assert ring.slots(0) == 16 and not ring.is_saturated()
    ring.write_kv(0, 16, x, x)
    assert ring.slots(0) == 16 and ring.is_saturated()


def test_reserved_bytes_charges_every_layer_its_cap():
    c = cfg()
    assert reserved_bytes(c) == (4 + 16) * 2 * 2 * 4
    assert reserved_bytes(c, "int8") == (4 + 16) * (2 + 4 + 2 + 4)


def test_smollm2_windows_marks_every_sixth_layer_global():
    ws = smollm2_windows(1024)
    assert len(ws) == 30 and [i for i, w in enumerate(ws) if w is None] == [5, 11, 17, 23, 29]


def test_a_ring_refuses_two_different_windows(tiny):
    with pytest.raises(CacheError, match="one window"):
        make_cache("ring", tiny.config.kv_geometry, tiny.ropes, [4, 8])


def test_make_cache_builds_a_ring_store_with_options(tiny):
    store = make_cache("ring", tiny.config.kv_geometry, tiny.ropes, [4, None], hint=2, precision="int8", max_seq_len=32)
    assert isinstance(store, RingKVStore)
    assert store.ring.precision == "int8" and store.ring.config.global_layers == (1,)
    assert store.ring.config.max_seq_len == 32 and store.ring.slots(0) == 2


def test_failed_forward_truncates_and_a_retry_gives_the_same_logits(tiny, monkeypatch):
    ws = [3, None]
    a = Session(tiny, window=ws, cache="ring", hint=2)
    b = Session(tiny, window=ws, cache="ring", hint=2)
    ids = [5, 6, 7, 8, 9, 10, 11]
    a.prefill(ids)
    b.prefill(ids)
    calls = {"n": 0}
    real = tiny.layers[1].wo.__call__

    class Boom(RuntimeError):
        pass

    def flaky(x):
        calls["n"] += 1
        raise Boom()

    for chunk in ([12], [12, 13, 14, 15, 16]):  # a decode step (in place) and a staged chunk
        monkeypatch.setattr(tiny.layers[1], "wo", type("W", (), {"__call__": lambda self, x: flaky(x)})())
        with pytest.raises(Boom):
            a.prefill(chunk)
        monkeypatch.undo()
        assert len(a) == len(ids)
    assert tiny.layers[1].wo.__call__ == real
    assert np.array_equal(a.prefill([12, 13, 14, 15, 16]), b.prefill([12, 13, 14, 15, 16]))


def test_fork_is_independent_and_continues_identically(tiny):
    ws = [3, None]
    s = Session(tiny, window=ws, cache="ring", hint=2, precision="int8")
    s.prefill(list(range(1, 12)))
    f = s.fork()
    assert f.generate([], 5) == s.generate([], 5)
    f.step(3)
    assert len(f) == len(s) + 1
    assert f.cache.ring.layers[0].buf["kq"] is not s.cache.ring.layers[0].buf["kq"]


def test_clamp_mode_runs_on_and_reports(tiny):
    ws = [3, None]
    s = Session(tiny, window=ws, cache="ring", hint=2, max_seq_len=8, overflow="clamp")
    store = s.cache
    s.prefill(list(range(1, 13)))
    assert store.is_saturated() and store.ring.slots(1) == 8


def test_refuse_mode_names_the_limit(tiny):
    ws = [3, None]
    s = Session(tiny, window=ws, cache="ring", max_seq_len=8)
    with pytest.raises(ContextFull, match="max_seq_len=8"):
        s.prefill(list(range(1, 10)))
    assert len(s) == 0


def test_bad_overflow_is_rejected():
    with pytest.raises(CacheError, match="overflow='wrap'"):
        RingKVStore(RingCache(cfg()), overflow="wrap")


def test_model_session_runs_on_the_ring(smollm2):
    s = smollm2.session(window=smollm2_windows(1024), cache="ring", hint=16)
    ids = smollm2.tokenizer.encode("The capital of France is")
    ref = smollm2.session()
    assert s.generate(ids, 4) == ref.generate(ids, 4)
