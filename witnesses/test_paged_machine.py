"""PKV-MACHINE: random interleavings of new, append, fork, truncate and release against contiguous references.

A Hypothesis ``RuleBasedStateMachine`` drives one small pool. Every live
paged sequence has a contiguous ``KVCache`` fed the same rows; a foreign
holder (the "hog") allocates raw blocks too, as another user of a shared
pool would. After every step the invariants below must hold.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from impl.attention import causal_attention
from impl.errors import CacheError
from impl.paged import BlockPool, PagedSequence, PoolExhausted, SequenceReleased
from witnesses.synthetic import cache_delta
from witnesses.test_paged_equiv import GEOMETRY, KV_DIM, NL, SCALE, contiguous, feed, round_inputs

MAX_LIVE = 5
BLOCK_BYTES_PER_ROW = 3 * NL * KV_DIM * 4  # K, pre-RoPE K and V, float32, every layer


def raises(error: type[Exception], call, says: str = "") -> bool:
    """True when call() raises ``error`` whose message starts with ``says``; False when it returns."""
    try:
        call()
    except error as e:
        assert str(e).startswith(says), f"{error.__name__} says {str(e)[:60]!r}..., not {says!r}..."
        return True
    return False


def valid(call, what: str):
    """``call()``'s result; a CacheError from an operation the model says is valid fails the witness (the claim
    is that valid operations succeed), as an assertion rather than an error."""
    try:
        return call()
    except CacheError as e:
        raise AssertionError(f"{what}, a valid operation, raised {type(e).__name__}: {e}") from e


STATS = Counter()  # summed over every run of the machine in this process


class PagedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pool: BlockPool | None = None
        self.live: list[tuple[PagedSequence, object]] = []  # (paged, contiguous reference)
        self.hog: list[int] = []  # raw block ids held outside any sequence

    @initialize(num_blocks=st.integers(3, 10), bs=st.integers(1, 5))
    def make_pool(self, num_blocks, bs):
        self.pool = BlockPool(num_blocks, bs, GEOMETRY)
        STATS["runs"] += 1

    def pick(self, i: int):
        return self.live[i % len(self.live)]

    # ---- rules -------------------------------------------------------------------------
    @precondition(lambda self: len(self.live) < MAX_LIVE)
    @rule()
    def new_sequence(self):
        self.live.append((PagedSequence(self.pool), contiguous()))

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 99), t=st.integers(1, 4), seed=st.integers(0, 2**16))
    def append(self, i, t, seed):
        self._append(i, t, seed)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 99), seed=st.integers(0, 2**16))
    def decode_one(self, i, seed):  # a second, one-row append rule: appends are the common case
        self._append(i, 1, seed)

    def _append(self, i, t, seed):
        seq, ref = self.pick(i)
        pool, bs, n = self.pool, self.pool.block_size, len(seq)
        cow = n % bs != 0 and pool.refcount(seq.blocks[-1]) > 1
        need = -(-(n + t) // bs) - len(seq.blocks) + cow
        before = (list(seq.blocks), n, [pool.refcount(b) for b in range(pool.num_blocks)], pool.num_free)
        r = round_inputs(t, np.random.default_rng(seed))
        try:
            got = feed(seq, r)
        except (CacheError, PoolExhausted) as e:
            if not isinstance(e, PoolExhausted):
                raise AssertionError(f"an append of {t} row(s), a valid operation, raised {e!r}") from e
            after = (list(seq.blocks), len(seq), [pool.refcount(b) for b in range(pool.num_blocks)], pool.num_free)
            assert need > before[3], f"PoolExhausted with need={need} <= free={before[3]}"
            assert (e.needed, e.free) == (need, before[3]), (e.needed, e.free, need, before[3])
            assert after == before, "a failed append changed the sequence or the pool"
            STATS["exhausted_appends"] += 1
            return
        assert need <= before[3], f"append of t={t} needed {need} blocks with {before[3]} free and did not raise"
        want = feed(ref, r)
        assert np.array_equal(got, want), f"appended rows' attention differs by {np.max(np.abs(got - want))}"
        STATS["appends"] += 1
        STATS["cow_copies"] += cow

    @precondition(lambda self: self.live and len(self.live) < MAX_LIVE)
    @rule(i=st.integers(0, 99))
    def fork(self, i):
        seq, ref = self.pick(i)
        self.live.append((valid(seq.fork, "fork()"), ref.clone()))
        STATS["forks"] += 1

    @precondition(lambda self: self.live and len(self.live) < MAX_LIVE)
    @rule(i=st.integers(0, 99), seed=st.integers(0, 2**16))
    def fork_then_decode(self, i, seed):  # the common serving pattern: copy-on-write when mid-block
        self.fork(i)
        self._append(len(self.live) - 1, 1, seed)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 99), frac=st.floats(0, 1))
    def truncate(self, i, frac):
        seq, ref = self.pick(i)
        n = int(frac * len(seq))
        valid(lambda: seq.truncate(n), f"truncate({n}) of a sequence of {len(seq)} rows")
        ref.truncate(n)
        STATS["truncates"] += 1

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 99))
    def release(self, i):
        seq, _ = self.live.pop(i % len(self.live))
        valid(seq.release, "release() of a live sequence")
        assert seq.blocks == [] and len(seq) == 0, "release() left rows or blocks"
        row = np.zeros((1, KV_DIM), np.float32)
        for verb, call in (
            ("reserve", lambda: seq.reserve(1)),
            ("write", lambda: seq.write(0, 0, row, row, row)),
            ("view", lambda: seq.view(0, 1)),
            ("rows", lambda: seq.rows("k")),
            ("fork", seq.fork),
            ("truncate", lambda: seq.truncate(0)),
            ("release", seq.release),
        ):
            assert raises(SequenceReleased, call, f"{verb}("), f"{verb} on a released sequence did not raise"

        STATS["releases"] += 1

    @precondition(lambda self: len(self.hog) < 3)
    @rule()
    def hog_allocate(self):
        free = self.pool.num_free
        try:
            b = self.pool.allocate()
        except PoolExhausted:
            assert free == 0, f"allocate() raised with num_free={free}"
            STATS["exhausted_allocations"] += 1
            return
        assert free > 0, f"allocate() handed out block_id={b} from an exhausted pool"
        self.hog.append(b)

    @precondition(lambda self: self.hog)
    @rule(i=st.integers(0, 99))
    def hog_free(self, i):
        b = self.hog.pop(i % len(self.hog))
        valid(lambda: self.pool.decref(b), f"decref({b}) of a block the test holds")

    # ---- invariants ------------------------------------------------------------------------
    @invariant()
    def counts_equal_references(self):
        if self.pool is None:
            return
        refs = Counter(self.hog)
        for seq, _ in self.live:
            refs.update(seq.blocks)
        counts = {b: self.pool.refcount(b) for b in range(self.pool.num_blocks)}
        wrong = {b: (counts[b], refs[b]) for b in counts if counts[b] != refs[b]}
        assert not wrong, f"block: (count, references) disagree: {wrong}"
        p = self.pool
        for bad in (-1, p.num_blocks):  # ids outside the pool are refused, never wrapped or indexed past the end
            for verb in ("refcount", "incref", "decref"):
                assert raises(CacheError, lambda verb=verb, bad=bad: getattr(p, verb)(bad)), (
                    f"{verb}({bad}) was not refused"
                )
        for b in sorted(p.free_ids())[:1]:  # a free block has no holders to add or drop
            for verb in ("incref", "decref"):
                assert raises(CacheError, lambda verb=verb, b=b: getattr(p, verb)(b)), (
                    f"{verb}({b}) of a free block was not refused"
                )

    @invariant()
    def free_and_used_partition_the_pool(self):
        if self.pool is None:
            return
        free = self.pool.free_ids()
        used = {b for b in range(self.pool.num_blocks) if self.pool.refcount(b) > 0}
        assert not free & used, f"blocks both free and used: {sorted(free & used)}"
        assert free | used == set(range(self.pool.num_blocks)), "some block is neither free nor used"
        assert self.pool.num_free == len(free), "a block id is on the free list twice"
        assert self.pool.num_used == len(used), f"num_used={self.pool.num_used}, {len(used)} blocks have holders"

    @invariant()
    def every_sequence_equals_its_reference(self):
        for j, (seq, ref) in enumerate(self.live):
            assert len(seq) == len(ref) and cache_delta(seq, ref) == 0.0, f"sequence {j}: rows differ"
            n, bs = len(seq), self.pool.block_size
            assert raises(CacheError, lambda seq=seq: seq.rows("q"), "rows(name='q')"), (
                f"sequence {j}: rows('q') served"
            )
            assert seq.nbytes == len(seq.blocks) * bs * BLOCK_BYTES_PER_ROW, f"sequence {j}: nbytes={seq.nbytes}"
            if n and seq.blocks == list(range(seq.blocks[0], seq.blocks[0] + len(seq.blocks))):
                k, v, _ = seq.view(0, n)  # one run of consecutive ids: a view of the pool's storage, no copy
                assert np.shares_memory(k, self.pool.storage.k) and np.shares_memory(v, self.pool.storage.v), (
                    f"sequence {j}: table {seq.blocks} is consecutive but view copied"
                )
                STATS["zero_copy_views"] += 1
            if not n:
                continue
            q = round_inputs(1, np.random.default_rng(n)).q  # one query at the last row, over every key
            for layer in range(NL):
                got = causal_attention(q[layer], seq, layer, n - 1, None, SCALE)
                want = causal_attention(q[layer], ref, layer, n - 1, None, SCALE)
                assert np.array_equal(got, want), f"sequence {j} layer {layer}: attention differs"
        STATS["checks"] += 1

    def teardown(self):
        if self.pool is None:
            return
        for seq, _ in self.live:
            valid(seq.release, "release() of a live sequence at the end")
        for b in self.hog:
            valid(lambda b=b: self.pool.decref(b), f"decref({b}) of a block the test holds, at the end")
        assert self.pool.num_free == self.pool.num_blocks, (
            f"releasing everything left {self.pool.num_blocks - self.pool.num_free} blocks in use"
        )


def test_random_operation_sequences_keep_pool_invariants_and_match_contiguous(evidence):
    STATS.clear()
    run_state_machine_as_test(PagedMachine, settings=settings(settings.default, stateful_step_count=30))
    for key in (
        "runs",
        "appends",
        "forks",
        "truncates",
        "releases",
        "cow_copies",
        "exhausted_appends",
        "exhausted_allocations",
        "checks",
        "zero_copy_views",
    ):
        evidence.record(key, STATS[key])
