import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.attention import attend_one
from impl.cache import KVGeometry, KVStore
from impl.designs import make_cache
from impl.errors import CacheError
from impl.kv import KVCache
from impl.model.session import Session
from impl.rope import apply_rope


def assert_same_cache(a, b):
    assert len(a) == len(b)
    assert np.array_equal(a.pos, b.pos)
    for name in ("k", "k_raw", "v"):
        for la, lb in zip(getattr(a, name), getattr(b, name), strict=True):
            assert np.array_equal(la, lb), name


def prompt(n, seed=0, vocab=97):
    return [int(x) for x in np.random.default_rng(seed).integers(0, vocab, n)]


def greedy(s: Session, n: int) -> list[int]:
    return s.generate([], n)


@pytest.mark.parametrize("start,n", [(-1, 1), (0, -1), (9, 1), (10, 1), (True, 1)])
def test_evict_rejects_bad_arguments_naming_them(tiny, start, n):
    s = Session(tiny)
    s.prefill(prompt(9))
    with pytest.raises(ValueError, match=r"evict\(start="):
        s.cache.evict(start, n)
    assert len(s.cache) == 9


def test_evict_zero_is_a_no_op_and_n_is_clipped_to_the_end(tiny):
    s = Session(tiny)
    s.prefill(prompt(9))
    before = s.cache.clone()
    assert s.cache.evict(3, 0) == 0
    assert_same_cache(s.cache, before)
    assert s.cache.evict(9, 0) == 0  # start == len with n == 0 is allowed
    assert s.cache.evict(6, 100) == 3
    assert len(s.cache) == 6 and list(s.cache.pos) == list(range(6))


def test_evict_middle_span_rerotates_survivors_once_from_k_raw(tiny):
    s = Session(tiny)
    s.prefill(prompt(20, seed=3))
    old = s.cache.clone()
    assert s.cache.evict(5, 7) == 7
    c = s.cache
    assert list(c.pos) == list(range(13))
    for layer in range(tiny.config.n_layers):
        assert np.array_equal(c.k_raw[layer][:5], old.k_raw[layer][:5])
        assert np.array_equal(c.k_raw[layer][5:], old.k_raw[layer][12:])
        assert np.array_equal(c.v[layer][5:], old.v[layer][12:])
        assert np.array_equal(c.k[layer][:5], old.k[layer][:5])
        raw = c.k_raw[layer].reshape(13, 2, 8)
        want = apply_rope(raw, *tiny.ropes[layer].rows(np.arange(13))).reshape(13, 16)
        assert np.array_equal(c.k[layer], want)
        # and the moved survivors really changed (they were rotated for other positions)
        assert not np.array_equal(c.k[layer][5:], old.k[layer][12:])


@settings(max_examples=25, deadline=None)
@given(n_pre=st.integers(1, 12), n_span=st.integers(1, 10), n_post=st.integers(1, 8), seed=st.integers(0, 999))
def test_write_time_evict_equals_never_having_seen_the_span(tiny, n_pre, n_span, n_post, seed):
    ids = prompt(n_pre + n_span + n_post, seed=seed)
    pre, span, post = ids[:n_pre], ids[n_pre : n_pre + n_span], ids[n_pre + n_span :]
    a = Session(tiny)
    a.prefill(pre)
    a.prefill(span)
    assert a.cache.evict(n_pre, n_span) == n_span
    a.prefill(post)
    b = Session(tiny)
    b.prefill(pre + post)
    assert_same_cache(a.cache, b.cache)
    assert np.array_equal(a.last_logits, b.last_logits)
    assert greedy(a, 6) == greedy(b, 6)


def test_clone_shares_no_memory_with_its_source(tiny):
    s = Session(tiny)
    s.prefill(prompt(7))
    c = s.cache.clone()
    for name in ("k", "k_raw", "v"):
        for la, lb in zip(getattr(s.cache, name), getattr(c, name), strict=True):
            assert not np.shares_memory(la, lb)
    assert not np.shares_memory(s.cache.pos, c.pos)
    c.k[0][0, 0] += 1.0
    c.evict(0, 2)
    assert len(s.cache) == 7 and s.cache.k[0][0, 0] != c.k[0][0, 0]


def test_fork_diverges_without_touching_the_parent(tiny):
    s = Session(tiny)
    s.prefill(prompt(6))
    snap = s.cache.clone()
    f = s.fork()
    f.step(5)
    f.step(6)
    assert_same_cache(s.cache, snap)
    assert len(f) == 8


def test_window_covering_everything_is_bit_identical_to_no_window(tiny):
    ids = prompt(30, seed=4)
    a, b = Session(tiny), Session(tiny, window=30)
    assert np.array_equal(a.prefill(ids), b.prefill(ids))
    assert_same_cache(a.cache, b.cache)


def test_window_of_one_returns_each_positions_own_value():
    # softmax over a single key is exactly 1, so the output is that key's V, bit for bit
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 2, 8)).astype(np.float32)
    k = rng.standard_normal((1, 16)).astype(np.float32)
    v = rng.standard_normal((1, 16)).astype(np.float32)
    out = attend_one(q, k, v, 1 / np.sqrt(8))
    assert np.array_equal(out, np.repeat(v.reshape(2, 1, 8), 2, axis=1))


def test_window_changes_logits_only_once_the_context_is_longer_than_it(tiny):
    ids = prompt(12, seed=5)
    full = Session(tiny).prefill(ids)
    w = Session(tiny, window=4).prefill(ids)
    assert np.array_equal(full[:4], w[:4])  # positions 0..3 see at most 4 keys
    assert not np.array_equal(full[4:], w[4:])


def test_window_is_measured_in_positions_after_eviction(tiny):
    # evict renumbers; a window after write-time eviction equals the window in a never-saw session
    ids = prompt(20, seed=6)
    a = Session(tiny, window=5)
    a.prefill(ids[:3])
    a.prefill(ids[3:9])
    a.cache.evict(3, 6)
    la = a.prefill(ids[9:])
    b = Session(tiny, window=5)
    lb = b.prefill(ids[:3] + ids[9:])
    assert np.array_equal(la, lb[3:])
    assert not np.array_equal(la, Session(tiny).prefill(ids[:3] + ids[9:])[3:])  # the window mattered


@pytest.mark.parametrize("window", [0, -2, 2.5, True, [3, 3, 3]])
def test_bad_windows_are_refused(tiny, window):
    with pytest.raises(CacheError, match="window"):
        Session(tiny, window=window)


def test_per_layer_window_accepts_none(tiny):
    s = Session(tiny, window=[None, 2])
    assert s.window == [None, 2]
    s.prefill(prompt(5))


def test_truncate_rewinds_to_a_prefix_and_rejects_out_of_range(tiny):
    ids = prompt(10, seed=7)
    a = Session(tiny)
    a.prefill(ids)
    a.cache.truncate(6)
    b = Session(tiny)
    b.prefill(ids[:6])
    assert_same_cache(a.cache, b.cache)
    with pytest.raises(CacheError, match="truncate"):
        a.cache.truncate(7)


def test_failed_forward_leaves_the_cache_as_it_was(tiny):
    s = Session(tiny)
    s.prefill(prompt(4))
    snap = s.cache.clone()
    with pytest.raises(ValueError, match="token id=97"):
        s.prefill([1, 97])
    assert_same_cache(s.cache, snap)


def test_session_truncate_rewinds_and_asks_for_a_token_next(tiny):
    ids = prompt(8, seed=9)
    s = Session(tiny)
    s.prefill(ids)
    s.truncate(5)
    assert len(s) == 5 and s.last_logits is None
    with pytest.raises(ValueError, match="give a prompt"):
        s.generate([], 1)
    b = Session(tiny)
    b.prefill(ids[:5])
    assert np.array_equal(s.prefill(ids[5:]), b.prefill(ids[5:]))


# ---- one vocabulary across the three designs (impl.cache) -------------------------------------

DESIGNS = [("contiguous", {}), ("paged", {"block_size": 3}), ("ring", {"hint": 2})]
PROTOCOL = ("__len__", "pos", "nbytes", "reserve", "write", "view", "truncate", "clone")


@pytest.mark.parametrize("design,opts", DESIGNS)
def test_every_design_implements_the_whole_kvstore_protocol_itself(tiny, design, opts):
    store = make_cache(design, tiny.config.kv_geometry, tiny.ropes, **opts)
    assert store.geometry == tiny.config.kv_geometry
    inherited = [name for name in PROTOCOL if getattr(type(store), name) is getattr(KVStore, name)]
    assert not inherited, f"{type(store).__name__} leaves {inherited} to the protocol's placeholders"


@pytest.mark.parametrize("design,opts", DESIGNS)
def test_every_design_truncates_then_continues_like_a_session_that_never_saw_the_tail(tiny, design, opts):
    ids = prompt(12, seed=3)
    s = Session(tiny, cache=design, **opts)
    s.prefill(ids)
    s.truncate(7)
    assert len(s) == 7 and list(s.cache.pos) == list(range(7))
    ref = Session(tiny, cache=design, **opts)
    ref.prefill(ids[:7])
    assert np.array_equal(s.prefill(ids[9:]), ref.prefill(ids[9:]))
    with pytest.raises(CacheError, match=r"truncate\(n=11"):
        s.truncate(11)


def test_a_wrapped_ring_truncated_below_what_it_holds_refuses_to_read_reused_slots(tiny):
    s = Session(tiny, window=[3, None], cache="ring", hint=2)
    s.generate(prompt(4), 6)  # decode steps write in place: layer 0's 3 slots now hold positions 7..9
    s.truncate(5)
    with pytest.raises(CacheError, match="the ring holds"):
        s.step(1)
    assert len(s) == 5  # the failed forward truncated its own row away again


def test_make_cache_always_returns_a_cache_and_names_an_unknown_design(tiny):
    geo = tiny.config.kv_geometry
    assert isinstance(make_cache("contiguous", geo, tiny.ropes), KVCache)
    with pytest.raises(CacheError, match="cache='blocks' is not a cache design"):
        make_cache("blocks", geo, tiny.ropes)
    with pytest.raises(TypeError):
        make_cache("contiguous", geo, tiny.ropes, block_size=4)
    with pytest.raises(CacheError, match="only taken with a design name"):
        Session(tiny, cache=make_cache("contiguous", geo, tiny.ropes), block_size=4)


def test_geometry_comes_from_the_model_config_in_its_words(tiny):
    c = tiny.config
    g = c.kv_geometry
    assert (g.n_layers, g.n_kv_heads, g.head_dim, g.v_head_dim, g.kv_dim) == (
        c.n_layers,
        c.n_kv_heads,
        c.head_dim,
        c.head_dim,
        c.kv_dim,
    )
    with pytest.raises(CacheError, match="v_head_dim=4 differs"):
        KVCache(KVGeometry(2, 2, 8, v_head_dim=4), tiny.ropes)
