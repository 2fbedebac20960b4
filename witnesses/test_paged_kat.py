"""PKV-KAT: known answers for the block pool and page tables on a 3-block pool."""

from __future__ import annotations

import numpy as np
import pytest

from impl.cache import KVGeometry
from impl.errors import CacheError
from impl.paged import BlockPool, PagedSequence, PoolExhausted, RefCounter, SequenceReleased

BS, GEOMETRY = 4, KVGeometry(n_layers=2, n_kv_heads=2, head_dim=8)


def pool3() -> BlockPool:
    return BlockPool(3, BS, GEOMETRY)


def ask(table: list, question: str, got, want) -> None:
    table.append({"question": question, "got": got, "want": want})


def finish(table: list, evidence) -> None:
    wrong = [row for row in table if row["got"] != row["want"]]
    evidence.record("wrong_answers", len(wrong))
    evidence.record("answers", table)
    assert not wrong, "wrong known answers: " + "; ".join(
        f"{r['question']}: got {r['got']}, want {r['want']}" for r in wrong
    )


def exhausted(pool: BlockPool) -> str:
    """'raises' if allocate() raises PoolExhausted, else the id it handed out."""
    try:
        return f"handed out {pool.allocate()}"
    except PoolExhausted:
        return "raises PoolExhausted"


def test_pool_allocates_0_1_2_fails_fast_on_the_fourth_and_recycles_a_freed_id(evidence):
    pool, t = pool3(), []
    ask(t, "first three allocations", [pool.allocate() for _ in range(3)], [0, 1, 2])
    ask(t, "fourth allocation", exhausted(pool), "raises PoolExhausted")
    ask(t, "counts after the failed allocation", [pool.refcount(b) for b in range(3)], [1, 1, 1])
    ask(t, "num_free after the failed allocation", pool.num_free, 0)
    ask(t, "decref(1) returns", pool.decref(1), 0)
    ask(t, "num_free after freeing 1", pool.num_free, 1)
    ask(t, "next allocation", pool.allocate(), 1)
    ask(t, "allocation after that", exhausted(pool), "raises PoolExhausted")
    ask(t, "incref(2) returns", pool.incref(2), 2)
    ask(t, "decref(2) returns", pool.decref(2), 1)
    ask(t, "block 2 still allocated", 2 in pool.free_ids(), False)
    rc = RefCounter(2)
    ask(t, "RefCounter: incref(1) returns", rc.incref(1), 1)
    try:
        rc.decref(0)
        ask(t, "RefCounter: decref of a count-0 id", f"returned, count now {rc.get(0)}", "refused")
    except AssertionError:
        ask(t, "RefCounter: decref of a count-0 id", "refused", "refused")
    ask(t, "RefCounter: counts after the refused decref", [rc.get(0), rc.get(1)], [0, 1])
    finish(t, evidence)


def test_fork_shares_blocks_and_truncate_releases_them(evidence):
    pool, t = pool3(), []
    a = PagedSequence(pool)
    a.reserve(5)  # rows 0..4: blocks [0, 1], the second partly filled
    ask(t, "page table after 5 rows", list(a.blocks), [0, 1])
    b = a.fork()
    ask(t, "fork's page table", list(b.blocks), [0, 1])
    ask(t, "counts after fork", [pool.refcount(x) for x in (0, 1)], [2, 2])
    ask(t, "num_free after fork (nothing copied)", pool.num_free, 1)
    b.truncate(4)  # b no longer needs block 1
    ask(t, "b's table after truncate(4)", list(b.blocks), [0])
    ask(t, "count of block 1 after b.truncate(4)", pool.refcount(1), 1)
    a.truncate(3)
    ask(t, "a's table after truncate(3)", list(a.blocks), [0])
    ask(t, "num_free after both truncates", pool.num_free, 2)
    ask(t, "count of the still-shared block 0", pool.refcount(0), 2)
    b.release()
    ask(t, "count of block 0 after b.release()", pool.refcount(0), 1)
    a.release()
    ask(t, "num_free after releasing everything", pool.num_free, 3)
    ask(t, "free ids", sorted(pool.free_ids()), [0, 1, 2])
    c = PagedSequence(pool)
    c.reserve(4)  # exactly one full block: [0]
    d = c.fork()
    d.reserve(1)  # the next row opens a new block; the full shared block is not copied
    ask(t, "fork at a block boundary, then one row: tables", (list(c.blocks), list(d.blocks)), ([0], [0, 1]))
    ask(t, "counts after it (no copy)", [pool.refcount(x) for x in range(3)], [2, 1, 0])
    finish(t, evidence)


def test_an_append_the_pool_cannot_hold_changes_nothing_and_says_needed_and_free(evidence):
    pool, t = pool3(), []
    a = PagedSequence(pool)
    a.reserve(6)  # blocks [0, 1]
    b = a.fork()  # both share a partly filled block 1
    try:
        b.reserve(7)  # needs a copy of block 1 and 2 new blocks: 3, but 1 is free
        ask(t, "b.reserve(7)", "no error", "PoolExhausted")
    except PoolExhausted as e:
        ask(t, "needed, free in the error", (e.needed, e.free), (3, 1))
        ask(t, "message names needed= and free=", "needed=3" in str(e) and "free=1" in str(e), True)
        ask(t, "is a MemoryError", isinstance(e, MemoryError), True)
    ask(t, "b unchanged: len and table", (len(b), list(b.blocks)), (6, [0, 1]))
    ask(t, "pool unchanged: counts and free", ([pool.refcount(x) for x in range(3)], pool.num_free), ([2, 2, 0], 1))
    b.reserve(1)  # fits: the copy-on-write copy of block 1
    ask(t, "b's table after an append into the shared block", list(b.blocks), [0, 2])
    ask(t, "counts after copy-on-write", [pool.refcount(x) for x in range(3)], [2, 1, 1])
    b.reserve(1)  # b's last block is its own now (count 1) though its first is shared: no copy, no block
    ask(t, "b's table after a second row into its own block", list(b.blocks), [0, 2])
    ask(t, "counts after it", [pool.refcount(x) for x in range(3)], [2, 1, 1])
    a.reserve(0)  # a's last block is shared no more (count 1): nothing to open, nothing to copy
    c = a.fork()  # a and c share [0, 1], block 1 partly filled
    c.reserve(0)  # zero rows write nothing: no copy-on-write
    ask(t, "reserve(0) on a fork sharing a partial block: table, len", (list(c.blocks), len(c)), ([0, 1], 6))
    ask(t, "counts after reserve(0)", [pool.refcount(x) for x in range(3)], [3, 2, 1])
    finish(t, evidence)


def test_bad_arguments_and_use_after_release_raise_errors_naming_the_field(evidence):
    pool = pool3()
    a = PagedSequence(pool)
    a.reserve(3)
    with pytest.raises(CacheError, match=r"n=4.*0\.\.3"):
        a.truncate(4)
    with pytest.raises(CacheError, match=r"n=-1"):
        a.truncate(-1)
    with pytest.raises(CacheError, match=r"block_id=7"):
        pool.refcount(7)
    with pytest.raises(CacheError, match=r"block_id=2.*free"):
        pool.decref(2)
    a.release()
    assert pool.num_free == 3
    row = np.zeros((1, GEOMETRY.kv_dim), np.float32)
    for verb, call in (
        ("reserve", lambda: a.reserve(1)),
        ("fork", a.fork),
        ("truncate", lambda: a.truncate(0)),
        ("view", lambda: a.view(0, 1)),
        ("release", a.release),
        ("write", lambda: a.write(0, 0, row, row, row)),
        ("rows", lambda: a.rows("k")),
    ):
        with pytest.raises(SequenceReleased, match=rf"^{verb}\(.*released=True"):
            call()
    with pytest.raises(CacheError, match="block_size=0"):
        BlockPool(3, 0, GEOMETRY)
    evidence.record("error_cases", 13)
