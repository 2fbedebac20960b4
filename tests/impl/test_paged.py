"""impl.paged behaviour no card names: growth, session wiring, a failed forward's truncate, errors, the gather paths."""

from __future__ import annotations

import numpy as np
import pytest

from impl.cache import KVGeometry
from impl.designs import make_cache
from impl.errors import CacheError, ImplError
from impl.model.session import Session
from impl.paged import BlockPool, PagedSequence, PoolExhausted, SequenceReleased
from witnesses.synthetic import cache_delta, tiny_llama, token_ids


def filled(pool: BlockPool, n: int, seed: int = 0) -> PagedSequence:
    s = PagedSequence(pool)
    s.reserve(n)
    rng = np.random.default_rng(seed)
    for layer in range(pool.geometry.n_layers):
        a = rng.standard_normal((3, n, pool.geometry.kv_dim)).astype(np.float32)
        s.write(layer, 0, a[0], a[1], a[2])
    return s


def test_pool_exhausted_is_a_memory_error_and_an_impl_error():
    assert issubclass(PoolExhausted, MemoryError) and issubclass(PoolExhausted, ImplError)
    assert issubclass(SequenceReleased, CacheError) and issubclass(SequenceReleased, ValueError)


def test_growing_pool_doubles_and_keeps_block_contents():
    pool = BlockPool(2, 3, KVGeometry(2, 1, 4), grow=True)
    s = filled(pool, 5)
    before = [a.copy() for a in s.k]
    s.reserve(10)  # needs 5 blocks in all
    assert pool.num_blocks == 8 and pool.num_used == 5
    assert all(np.array_equal(a[:5], b) for a, b in zip(s.k, before, strict=True))


def test_fixed_pool_never_grows():
    pool = BlockPool(2, 3, KVGeometry(1, 1, 4))
    PagedSequence(pool).reserve(6)
    with pytest.raises(PoolExhausted):
        pool.allocate()
    assert pool.num_blocks == 2


def test_view_fast_path_and_gather_path_give_the_same_rows():
    pool = BlockPool(8, 2, KVGeometry(2, 1, 4))
    s = filled(pool, 7)
    assert s.blocks == [0, 1, 2, 3]  # one consecutive run: the zero-copy path
    k1, v1, base = s.view(1, 7)
    assert base == 0 and np.shares_memory(k1, pool.storage.k)
    k1, v1 = k1.copy(), v1.copy()
    perm = [3, 0, 2, 1]  # move the blocks so the table is no longer a run
    for a in pool.storage.arrays:
        a[:, perm] = a[:, s.blocks].copy()
    s.blocks = perm
    s._gathered = None
    k2, v2, _ = s.view(1, 7)
    assert not np.shares_memory(k2, pool.storage.k)
    assert np.array_equal(k1, k2) and np.array_equal(v1, v2)
    assert k2.flags.c_contiguous and k2.shape == (7, 4)


def test_fork_then_write_copies_only_last_block():
    pool = BlockPool(8, 4, KVGeometry(1, 1, 4))
    a = filled(pool, 9)  # blocks 0, 1 full; 2 holds one row
    b = a.fork()
    b.reserve(1)
    assert b.blocks[:2] == a.blocks[:2] and b.blocks[2] != a.blocks[2]
    assert [pool.refcount(x) for x in a.blocks] == [2, 2, 1]


def test_a_failed_forward_truncates_and_returns_its_blocks():
    model = tiny_llama()  # max_pos 256: a 300-token prefill fails in RoPE, after reserve
    pool = BlockPool(4, 2, model.config.kv_geometry, grow=True)
    s = Session(model, cache="paged", pool=pool)
    s.prefill(token_ids(3, 0))
    blocks = list(s.cache.blocks)
    with pytest.raises(ValueError, match="RoPE position out of range"):
        s.prefill(token_ids(300, 1))
    assert len(s) == 3 and s.cache.blocks == blocks and pool.num_used == 2


def test_an_append_the_pool_cannot_hold_fails_before_the_forward():
    model = tiny_llama()
    pool = BlockPool(3, 2, model.config.kv_geometry)
    s = Session(model, cache="paged", pool=pool)
    s.prefill(token_ids(5, 0))
    with pytest.raises(PoolExhausted, match="needed=1 blocks, free=0"):
        s.prefill(token_ids(2, 1))
    assert len(s) == 5 and pool.num_free == 0


def test_a_paged_session_defaults_to_a_growing_pool_of_block_size_16():
    model = tiny_llama()
    c = make_cache("paged", model.config.kv_geometry, model.ropes)
    assert c.pool.block_size == 16 and c.pool.grow
    s = Session(model, cache=c)
    s.prefill(token_ids(100, 1))
    ref = Session(model)
    ref.prefill(token_ids(100, 1))
    assert cache_delta(s.cache, ref.cache) == 0.0 and len(s.cache.blocks) == 7


def test_make_cache_builds_a_paged_sequence_and_checks_options():
    model = tiny_llama()
    geo = model.config.kv_geometry
    assert isinstance(make_cache("paged", geo, model.ropes, block_size=4), PagedSequence)
    pool = BlockPool(4, 8, geo)
    assert make_cache("paged", geo, model.ropes, pool=pool).pool is pool
    with pytest.raises(CacheError, match="block_size=4 differs"):
        make_cache("paged", geo, model.ropes, pool=pool, block_size=4)
    with pytest.raises(CacheError, match="n_layers=1"):
        make_cache("paged", geo, model.ropes, pool=BlockPool(4, 8, KVGeometry(1, geo.n_kv_heads, geo.head_dim)))
    with pytest.raises(TypeError):
        make_cache("paged", geo, model.ropes, page_size=4)


def test_a_pool_takes_a_geometry_whose_k_and_v_rows_have_one_width():
    with pytest.raises(CacheError, match="geometry="):
        BlockPool(4, 2, 16)  # the old (num_layers, kv_dim) habit
    with pytest.raises(CacheError, match="v_head_dim=2 differs from head_dim=4"):
        BlockPool(4, 2, KVGeometry(1, 1, 4, v_head_dim=2))


def test_release_returns_blocks_and_forbids_reuse_with_a_clear_message():
    pool = BlockPool(4, 2, KVGeometry(1, 1, 4))
    s = filled(pool, 5)
    s.release()
    assert pool.num_free == 4 and s.released and len(s) == 0
    with pytest.raises(SequenceReleased, match=r"write\(layer=0, start=0\): released=True"):
        s.write(0, 0, *np.zeros((3, 1, 4), np.float32))


@pytest.mark.parametrize("t", [-1, 1.5, True])
def test_reserve_rejects_bad_counts(t):
    with pytest.raises(CacheError, match="t="):
        PagedSequence(BlockPool(2, 2, KVGeometry(1, 1, 4))).reserve(t)


def test_write_outside_reserved_rows_is_rejected():
    s = PagedSequence(BlockPool(2, 2, KVGeometry(1, 1, 4)))
    s.reserve(2)
    with pytest.raises(CacheError, match="start=1, T=2"):
        s.write(0, 1, *np.zeros((3, 2, 4), np.float32))
