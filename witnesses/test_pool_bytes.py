"""PKV-POOL: a growing block pool's bookkeeping, and the byte counts of paged and contiguous caches.

A Hypothesis state machine drives a grow=True pool with its own model of the
pool (the size it must have grown to, each block's holders, each held
block's contents); the byte counts are computed here from the geometry
(n_layers, n_kv_heads, head_dim, 4-byte float32, 8-byte int64 positions,
block_size, blocks held), never by an impl helper.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from impl.cache import KVGeometry
from impl.errors import CacheError
from impl.kv import KVCache
from impl.paged import BlockPool, PagedSequence, PoolExhausted, RefCounter
from impl.rope import RopeTable

F32, I64 = 4, 8  # bytes of one float32 and one int64
small_geometries = st.builds(
    KVGeometry, n_layers=st.integers(1, 3), n_kv_heads=st.integers(1, 3), head_dim=st.sampled_from([2, 4, 8])
)


def write_rows(store, t: int, rng: np.random.Generator) -> None:
    """Open t rows at the end of ``store`` and write random K/V into every layer, as the forward pass does."""
    g, start = store.geometry, len(store)
    store.reserve(t)
    for layer in range(g.n_layers):
        k_raw, k, v = rng.standard_normal((3, t, g.n_kv_heads * g.head_dim)).astype(np.float32)
        store.write(layer, start, k_raw, k, v)


def out_of_range_refused(pool: BlockPool, b: int) -> bool:
    try:
        pool.refcount(b)
    except CacheError:
        return True
    return False


STATS = Counter()  # summed over every run of the machine in this process


def block_bytes(g: KVGeometry, bs: int) -> int:
    """K, pre-RoPE K and V (three float32 arrays) for bs rows of every layer."""
    return 3 * g.n_layers * bs * g.n_kv_heads * g.head_dim * F32


def grown_size(size: int, used: int, n: int) -> int:
    """The size a pool of ``size`` blocks with ``used`` held must double to for n free (unchanged if enough)."""
    while size - used < n:
        size *= 2
    return size


class GrowingPool(RuleBasedStateMachine):
    """A grow=True pool against the witness's own model of it."""

    def __init__(self) -> None:
        super().__init__()
        self.pool: BlockPool | None = None
        self.size = 0
        self.holders: dict[int, int] = {}  # block id -> count, held blocks only
        self.fill: dict[int, float] = {}  # block id -> the value written into all of its rows when allocated
        self.next_fill = 1.0

    @initialize(num_blocks=st.integers(1, 4), bs=st.integers(1, 4), g=small_geometries)
    def make_pool(self, num_blocks, bs, g):
        self.pool = BlockPool(num_blocks, bs, g, grow=True)
        self.size, self.initial, self.g, self.bs = num_blocks, num_blocks, g, bs
        STATS["runs"] += 1

    def free_set(self) -> set[int]:
        return set(range(self.size)) - set(self.holders)

    @rule()
    def allocate(self):
        want = min(self.free_set()) if self.free_set() else self.size  # lowest free id; after growth, the first new
        grows = not self.free_set()
        if grows:
            self.size = grown_size(self.size, len(self.holders), 1)
        b = self.pool.allocate()
        assert b == want, f"allocate() gave block_id={b}, the lowest free id is {want}"
        assert b not in self.holders, f"allocate() handed out block_id={b}, which is held"
        self.holders[b] = 1
        for a in (self.pool.storage.k, self.pool.storage.k_raw, self.pool.storage.v):
            a[:, b] = self.next_fill  # as a sequence's write would: every layer's rows of the block
        self.fill[b] = self.next_fill
        self.next_fill += 1.0
        STATS["allocations"] += 1
        STATS["growths"] += int(grows)
        STATS["allocated_past_initial_size"] += int(b >= self.initial)

    @precondition(lambda self: self.holders)
    @rule(i=st.integers(0, 99))
    def decref(self, i):
        b = sorted(self.holders)[i % len(self.holders)]
        assert self.pool.decref(b) == self.holders[b] - 1
        self.holders[b] -= 1
        if not self.holders[b]:
            del self.holders[b], self.fill[b]

    @precondition(lambda self: self.holders)
    @rule(i=st.integers(0, 99))
    def incref(self, i):
        b = sorted(self.holders)[i % len(self.holders)]
        assert self.pool.incref(b) == self.holders[b] + 1
        self.holders[b] += 1

    @rule(n=st.integers(0, 40))
    def ensure_free(self, n):
        want = grown_size(self.size, len(self.holders), n)
        STATS["ensure_free_grew"] += int(want != self.size)
        STATS["ensure_free_beyond_one_doubling"] += int(want > 2 * self.size)
        self.size = want
        self.pool.ensure_free(n)
        assert self.pool.num_free >= n, f"ensure_free({n}) left num_free={self.pool.num_free}"

    # ---- invariants ------------------------------------------------------------------------
    @invariant()
    def counts_agree_with_the_model(self):
        if self.pool is None:
            return
        p = self.pool
        assert p.num_blocks == self.size, f"num_blocks={p.num_blocks}, the pool must have grown to {self.size}"
        assert p.num_used == len(self.holders), f"num_used={p.num_used}, {len(self.holders)} blocks are held"
        assert p.num_free == self.size - len(self.holders), f"num_free={p.num_free}"
        assert p.free_ids() == self.free_set(), f"free_ids={sorted(p.free_ids())}, want {sorted(self.free_set())}"
        assert [p.refcount(b) for b in range(self.size)] == [self.holders.get(b, 0) for b in range(self.size)]
        for bad in (self.size, -1):
            assert out_of_range_refused(p, bad), f"refcount({bad}) accepted in a pool of {self.size} blocks"

    @invariant()
    def storage_is_sized_by_the_geometry(self):
        if self.pool is None:
            return
        g, bs, st_ = self.g, self.bs, self.pool.storage
        shape = (g.n_layers, self.size, bs, g.n_kv_heads * g.head_dim)
        arrays = (st_.k, st_.k_raw, st_.v)
        assert all(a.shape == shape and a.dtype == np.float32 for a in arrays), (
            f"storage shapes {[a.shape for a in arrays]}, want {shape} float32"
        )
        assert sum(a.nbytes for a in arrays) == self.size * block_bytes(g, bs)
        assert self.pool.block_nbytes == block_bytes(g, bs), (
            f"block_nbytes={self.pool.block_nbytes}, the geometry gives {block_bytes(g, bs)}"
        )

    @invariant()
    def held_blocks_keep_their_rows(self):
        if self.pool is None:
            return
        for b, x in self.fill.items():
            for a in (self.pool.storage.k, self.pool.storage.k_raw, self.pool.storage.v):
                assert np.all(a[:, b] == x), f"block {b} lost its rows (want {x}) after the pool grew"


def test_a_growing_pool_keeps_its_counts_ids_storage_and_rows(evidence):
    """Random allocate / incref / decref / ensure_free on a grow=True pool (1-4 blocks to start): after each
    step num_blocks is the doubled size the model predicts, num_free, num_used, free_ids and every refcount
    equal the model's count, the storage is (n_layers, num_blocks, block_size, kv_dim) float32 for K, k_raw
    and V (bytes = num_blocks x 3 x n_layers x block_size x kv_dim x 4), allocate hands out the lowest free id
    (the first new one after a growth) and never a held one, and every held block keeps its rows."""
    STATS.clear()
    run_state_machine_as_test(GrowingPool, settings=settings(settings.default, stateful_step_count=25))
    for key in (
        "runs",
        "allocations",
        "growths",
        "allocated_past_initial_size",
        "ensure_free_grew",
        "ensure_free_beyond_one_doubling",
    ):
        evidence.record(key, STATS[key])


def test_refcounter_extend_holds_counts_of_exactly_ids_0_to_n(evidence):
    """RefCounter.extend(n), as a pool's growth calls it: the old counts are kept, ids up to n - 1 get
    count 0, and id n is not one of its ids (IndexError); extending to the size it has changes nothing."""
    rc = RefCounter(2)
    rc.incref(0), rc.incref(1), rc.incref(1)
    checked = 0
    for n, want in ((5, [1, 2, 0, 0, 0]), (5, [1, 2, 0, 0, 0]), (8, [1, 2, 0, 0, 0, 0, 0, 0])):
        rc.extend(n)
        got = [rc.get(b) for b in range(n)]
        assert got == want, f"after extend({n}): counts {got}, want {want}"
        try:
            rc.get(n)
        except IndexError:
            checked += 1
        else:
            raise AssertionError(f"after extend({n}) the counter holds a count for id {n}")
    evidence.record("sizes_checked", checked)


def test_a_fixed_pool_refuses_instead_of_growing(evidence):
    """grow=False: ensure_free(n) beyond num_free raises PoolExhausted and changes nothing; n <= num_free
    returns without a change."""

    @given(
        g=small_geometries,
        num_blocks=st.integers(1, 6),
        bs=st.integers(1, 4),
        held=st.integers(0, 6),
        n=st.integers(0, 14),
    )
    def prop(g, num_blocks, bs, held, n):
        pool = BlockPool(num_blocks, bs, g)
        ids = [pool.allocate() for _ in range(min(held, num_blocks))]
        before = (pool.num_blocks, pool.num_free, pool.free_ids(), pool.storage.k.shape)
        free = num_blocks - len(ids)
        try:
            pool.ensure_free(n)
        except PoolExhausted as e:
            assert n > free and (e.needed, e.free) == (n, free), f"ensure_free({n}) raised with {free} free"
            evidence.count("refused")
        else:
            assert n <= free, f"a fixed pool of {num_blocks} with {free} free granted ensure_free({n})"
            evidence.count("granted")
        assert (pool.num_blocks, pool.num_free, pool.free_ids(), pool.storage.k.shape) == before

    prop()


def test_paged_nbytes_is_blocks_held_times_block_bytes_from_the_geometry(evidence):
    """After random appends, truncates and forks: each sequence holds ceil(len / block_size) blocks, and
    nbytes == that count x 3 x n_layers x block_size x n_kv_heads x head_dim x 4 (shared blocks in full)."""

    @given(
        g=small_geometries,
        bs=st.integers(1, 5),
        seed=st.integers(0, 999),
        steps=st.lists(
            st.tuples(st.sampled_from(["append", "truncate", "fork"]), st.integers(0, 99)), min_size=1, max_size=8
        ),
    )
    def prop(g, bs, seed, steps):
        rng = np.random.default_rng(seed)
        pool = BlockPool(2, bs, g, grow=True)
        live = [PagedSequence(pool)]
        worst = 0
        for verb, x in steps:
            seq = live[x % len(live)]
            if verb == "append":
                write_rows(seq, 1 + x % 6, rng)
            elif verb == "truncate":
                seq.truncate(x % (len(seq) + 1))
            else:
                live.append(seq.fork())
            for s in live:
                held = -(-len(s) // bs)
                assert len(s.blocks) == held, f"len {len(s)} with block_size {bs} holds {len(s.blocks)} blocks"
                want = held * block_bytes(g, bs)
                worst = max(worst, abs(s.nbytes - want))
                assert s.nbytes == want, f"nbytes={s.nbytes}, {held} blocks of {block_bytes(g, bs)} bytes = {want}"
                evidence.count("partial_last_block", int(len(s) % bs != 0))
        evidence.observe("bytes_off", worst)

    prop()


def test_contiguous_nbytes_is_rows_times_row_bytes_from_the_geometry(evidence):
    """After random appends, truncates and evictions (capacity 1-4, so storage doubles past the rows in use):
    nbytes == len x (3 x n_layers x n_kv_heads x head_dim x 4 + 8), which is also the bytes of the k, k_raw,
    v and pos views it exposes; the spare capacity is not counted."""

    @given(
        g=small_geometries,
        capacity=st.integers(1, 4),
        seed=st.integers(0, 999),
        steps=st.lists(
            st.tuples(st.sampled_from(["append", "truncate", "evict"]), st.integers(0, 99)), min_size=1, max_size=8
        ),
    )
    def prop(g, capacity, seed, steps):
        rng = np.random.default_rng(seed)
        c = KVCache(g, [RopeTable(10000.0, g.head_dim, 256)] * g.n_layers, capacity=capacity)
        worst = 0
        for verb, x in steps:
            if verb == "append":
                write_rows(c, 1 + x % 6, rng)
            elif verb == "truncate":
                c.truncate(x % (len(c) + 1))
            elif len(c):
                c.evict(x % len(c), 1 + x % 3)
            want = len(c) * (3 * g.n_layers * g.n_kv_heads * g.head_dim * F32 + I64)
            views = sum(a.nbytes for name in ("k", "k_raw", "v") for a in getattr(c, name)) + c.pos.nbytes
            worst = max(worst, abs(c.nbytes - want))
            assert c.nbytes == want == views, f"nbytes={c.nbytes}, the geometry gives {want}, the views hold {views}"
            evidence.count("rows_checked", len(c))
        evidence.observe("bytes_off", worst)

    prop()
