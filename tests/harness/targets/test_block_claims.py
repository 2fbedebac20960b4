"""The block-manager protocol (harness/targets/blocks.py), its known answer, and the claims on managers of our own.

(witnesses/test_blocks.py is the module the TGT-BLOCKS cards name; basenames are unique across tests/ and witnesses/.)

The list-of-requests reference is checked against hand-worked answers (what a fork shares, what a truncate
keeps shared, how many blocks an append needs, which prefix hits are right); the declared reuse orders
against hand-worked queues. impl's pool and reference.blocks run a fixed program clean. Each planted-bug
manager (a subclass of PrefixBlocks with one slip) must FAIL the claims with a shrunk program of numbered
steps that names what went wrong. The claims are called as functions with a real ``Evidence`` on the ci
Hypothesis profile.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import settings

from harness.statuses import Outcome
from harness.targets import blockclaims as claims  # the module, not its test_* names: pytest would collect those
from harness.targets import registry
from harness.targets.blockclaims import GEOMETRY, BlockProgram
from harness.targets.blockown import ImplBlocks, PrefixBlocks
from harness.targets.blocks import LowestFree, LruQueue, Requests
from harness.targets.protocol import Numerics, Target
from harness.verdict import not_applicable_nodes
from harness.wire.evidence import Evidence
from harness.wire.messages import NodeResult

# ---------------------------------------------------------------- the known answer


def test_a_fork_shares_its_source_history_and_a_truncate_lowers_it():
    m = Requests(block_size=2)
    m.allocate("a", [1, 2, 3])
    m.fork("a", "b")
    m.fork("b", "c")
    assert m.shared("a", "b") == m.shared("b", "c") == m.shared("a", "c") == 3
    m.allocate("a", [4])  # an append keeps what they share
    assert m.shared("a", "b") == 3 and m.tokens("a") == [1, 2, 3, 4] and m.tokens("b") == [1, 2, 3]
    m.truncate("b", 1)
    assert m.shared("a", "b") == m.shared("b", "c") == 1 and m.shared("a", "c") == 3
    assert m.may_share("a", "c", 1) == "fork" and m.may_share("a", "b", 1) == ""
    m.free("a")
    assert m.live() == ["b", "c"] and m.shared("b", "c") == 1


def test_only_full_blocks_of_an_equal_prefix_may_be_shared_by_a_prefix_cache():
    m = Requests(block_size=2, prefix=True)
    m.allocate("a", [1, 2, 3])
    m.allocate("b", [1, 2, 5])
    m.allocate("c", [9, 2, 3])
    assert m.may_share("a", "b", 0) == "prefix"
    assert m.may_share("a", "b", 1) == ""  # a partly filled block is never a cached one
    assert m.may_share("a", "c", 0) == ""
    plain = Requests(block_size=2)
    plain.allocate("a", [1, 2, 3])
    plain.allocate("b", [1, 2, 5])
    assert plain.may_share("a", "b", 0) == ""  # without a prefix cache: no one's


def test_an_append_needs_its_new_blocks_and_a_copy_of_a_shared_partial_block():
    m = Requests(block_size=3)
    assert m.need("new", 4, last_shared=False) == 2
    m.allocate("a", [1, 2, 3, 4])
    assert m.need("a", 2, last_shared=False) == 0
    assert m.need("a", 2, last_shared=True) == 1  # copy-on-write of block 1
    assert m.need("a", 3, last_shared=True) == 2
    m.allocate("b", [1, 2, 3])
    assert m.need("b", 1, last_shared=True) == 1  # block 0 is full: nothing to copy


def test_a_hit_is_whole_blocks_short_of_the_last_token_of_prefixes_computed_since_the_reset():
    m = Requests(block_size=2, prefix=True)
    m.allocate("a", [1, 2, 3, 4, 5])
    assert m.hit_is_computed([1, 2, 3, 4, 9], 4) == ""
    assert "not whole blocks" in m.hit_is_computed([1, 2, 3, 4, 9], 3)
    assert "at most 3" in m.hit_is_computed([1, 2, 3, 4], 4)
    assert "no request computed" in m.hit_is_computed([7, 2, 3, 4, 9], 2)
    m.reset()
    assert "no request computed" in m.hit_is_computed([1, 2, 3], 2)
    assert "without a prefix cache" in Requests(block_size=2).hit_is_computed([1, 2, 3], 2)


def test_the_declared_reuse_orders():
    low = LowestFree([0, 1, 2, 3])
    assert low.expect({3, 1, 2}, 2) == [1, 2]
    lru = LruQueue([1, 2, 3, 4, 5])
    lru.took([1, 2, 3])
    lru.freed([3, 2, 1], [False, True, True])  # tail first; 3 was not full
    assert lru.queue == [3, 4, 5, 2, 1]
    lru.hit([2])
    assert lru.expect(set(), 4) == [3, 4, 5, 1]


# ---------------------------------------------------------------- the targets, the capabilities


def test_block_targets_and_row_targets_are_n_a_for_each_other():
    rows, blocks = registry.get("impl.paged"), registry.get("impl.blocks")
    assert rows.lacks(["blocks"]) == ["blocks"] and blocks.lacks(["append", "read"]) == ["append", "read"]
    assert registry.get("reference.blocks").lacks(["blocks", "prefix", "reset", "fork"]) == ["fork"]
    assert {"impl.blocks", "reference.blocks"} <= set(registry.GROUPS["own"])
    skipped = [
        NodeResult(f"w.py::t[{name}]", Outcome.SKIPPED, message=f"n/a: target {name} lacks capability blocks")
        for name in ("reference", "impl.paged")
    ]
    ran = NodeResult("w.py::t[impl.blocks]", Outcome.PASSED)
    assert not_applicable_nodes((*skipped, ran)) == skipped  # they drop out beside a node that ran


def test_impl_blocks_and_reference_blocks_run_a_fixed_program_clean():
    for name in ("impl.blocks", "reference.blocks"):
        ev = Evidence()
        run = BlockProgram(registry.get(name), 6, ev, policy=True)
        steps = [("admit", 0, [0, 1, 2, 0, 1]), ("admit", 0, [0, 1, 2, 0, 2]), ("extend", 0, [2, 2])]
        steps += [("free", 0, None), ("free", 0, None), ("free", 6, None), ("admit", 0, [0, 1, 2, 1, 1, 1, 1])]
        steps += [("fork", 1, None), ("extend", 2, [1]), ("truncate", 0, 2)] if name == "impl.blocks" else []
        run.run(steps)
        assert ev.values["double_frees"] == 1 and ev.values["unknown_frees"] == 1, name
    assert ev.values["prefix_hits"] >= 1  # reference.blocks: the second prompt's first two blocks


def test_impl_blocks_refuses_a_second_free_and_reports_exhaustion_as_a_memory_error():
    h = registry.get("impl.blocks").make(GEOMETRY, capacity=2)  # two blocks of 3 tokens
    h.allocate("a", [1, 2, 3, 4])
    with pytest.raises(MemoryError):
        h.allocate("b", [1])
    h.free("a")
    with pytest.raises(ValueError):
        h.free("a")
    with pytest.raises(KeyError):
        h.free("never")
    assert h.num_free() == 2


# ---------------------------------------------------------------- the claims on managers of our own

BOOKS = claims.test_block_managers_keep_the_books
FREE_AGAIN = claims.test_freeing_again_is_idempotent_or_refused
REUSE = claims.test_blocks_are_reused_in_the_declared_order
HITS = claims.test_prefix_hits_serve_computed_prefixes
RESET = claims.test_reset_refuses_while_blocks_are_held
RELEASE = claims.test_releasing_blocks_is_idempotent_or_refused
SHARED = claims.test_blocks_are_shared_only_as_declared
LONGEST = claims.test_prefix_hits_are_as_long_as_the_cache_can_serve
KEYS = claims.test_requests_with_other_extra_keys_share_no_block
CLAIMS = [BOOKS, SHARED, FREE_AGAIN, REUSE, HITS, RESET, LONGEST, KEYS]


def run(claim, tgt) -> tuple[str, dict]:
    """(the AssertionError's text or "", the evidence) of ``claim`` on ``tgt``, on the ci profile."""
    evidence = Evidence()
    before = settings._current_profile  # restored after: the ci profile must not leak into other tests
    settings.load_profile("ci")
    try:
        claim(tgt, evidence)
    except AssertionError as e:
        return str(e), evidence.values
    except ExceptionGroup as group:  # Hypothesis found distinct failures: each shrunk program, one a line
        return "\n".join(str(e) for e in group.exceptions), evidence.values
    finally:
        settings.load_profile(before or "default")
    return "", evidence.values


class FreeKeepsShared(PrefixBlocks):
    """free returns every block of the request to the queue, shared ones too: a block stays in another's table."""

    def free(self, r):
        table = self.tables.pop(r, None)
        if table is None:
            return
        del self.tokens[r]
        for b in reversed(table):
            self.refs[b] = max(0, self.refs[b] - 1)
            if b not in self.queue:
                self.queue.append(b)


class FreeHandsOutShared(PrefixBlocks):
    """free puts a block still shared by another request in the free queue (its count and num_free stay right):
    the next allocation hands it out while a live request holds it."""

    def free(self, r):
        table = self.tables.get(r, [])
        super().free(r)
        self.queue += [b for b in table if self.refs[b] > 0 and b not in self.queue]

    def num_free(self):
        return sum(self.refs[b] == 0 for b in self.block_ids())


class ResetAlways(PrefixBlocks):
    """reset drops the cache even while blocks are held."""

    def reset(self):
        self.key_of.clear()
        self.cache.clear()
        return True


class FreeRaisesAgain(PrefixBlocks):
    """declares free idempotent, yet a second free raises."""

    def free(self, r):
        if r not in self.tables:
            raise KeyError(r)
        super().free(r)


class HitsPartial(PrefixBlocks):
    """counts a hit in tokens, not whole blocks: one token more than the blocks served."""

    def allocate(self, r, tokens):
        got = super().allocate(r, tokens)
        return got + 1 if got else got


def target(cls, name: str) -> Target:
    def build(geometry, batch, window, capacity, trace=None):
        return cls(made, capacity)

    made = Target(
        name,
        f"{cls.__name__}: {cls.__doc__}",
        "kvproof",
        frozenset({"blocks", "prefix", "reset", "refcount", "evict"}),
        Numerics.exact(),
        (),
        build,
    )
    return made


def test_the_clean_manager_is_proven_by_every_claim():
    for claim in CLAIMS:
        said, ev = run(claim, target(PrefixBlocks, "test.clean"))
        assert said == "", said
        assert ev["examples"] >= 10, ev


@pytest.mark.parametrize(
    "cls, claim, says",
    [
        (FreeKeepsShared, BOOKS, "free \\+ used = total|refcount"),
        (FreeHandsOutShared, BOOKS, "handed out again|handed to another|refcount"),
        (ResetAlways, RESET, "reset\\(\\) was done while blocks are held"),
        (FreeRaisesAgain, FREE_AGAIN, "raised KeyError.*idempotent"),
        (HitsPartial, HITS, "not whole blocks"),
    ],
    ids=["free-keeps-shared", "free-hands-out-shared", "reset-always", "free-raises-again", "hits-partial"],
)
def test_a_planted_bug_fails_with_a_short_numbered_program(cls, claim, says):
    said, _ = run(claim, target(cls, "test.planted"))
    assert re.search(says, said), said
    steps = re.findall(r"(\d+)\. ", said.split(": after the steps ")[1].split(": ")[0])
    assert steps[0] == "1" and len(steps) <= 8, said  # shrunk: make, and the few steps the slip needs


def test_impl_blocks_refuses_a_release_naming_a_block_twice_or_a_free_one_and_changes_nothing():
    h = registry.get("impl.blocks").make(GEOMETRY, capacity=3)
    assert h.release_contract == "refuse"
    h.allocate("a", [1, 2, 3, 4])  # blocks 0, 1
    h.hold([0, 1])
    for wrong in ([0, 0], [1, 2], [2]):  # block 0 twice; block 2 is free
        with pytest.raises(ValueError):
            h.release(wrong)
        assert [h.refcount(b) for b in (0, 1, 2)] == [2, 2, 0] and h.num_free() == 1
    h.release([1, 0])
    assert [h.refcount(b) for b in (0, 1, 2)] == [1, 1, 0]


class ReleaseEach(ImplBlocks):
    """release decrefs each listed block in turn (vLLM's free_blocks), declared idempotent."""

    release_contract = "idempotent"

    def release(self, blocks):
        for b in blocks:
            self.pool.decref(b)


class ReleaseEachRefusing(ImplBlocks):
    """release refuses a list with a free block before any decref, but not a block named twice: one with two
    holders loses both."""

    def release(self, blocks):
        for b in blocks:
            self.pool.refcount(b) or self.pool.decref(b)  # raises CacheError: the block is free
        for b in blocks:
            self.pool.decref(b)


def impl_target(cls, name: str) -> Target:
    made = Target(
        name,
        f"{cls.__name__}: {cls.__doc__}",
        "kvproof",
        frozenset({"blocks", "fork", "truncate", "refcount", "free-blocks"}),
        Numerics.exact(),
        (),
        lambda geometry, batch, window, capacity, trace=None: cls(made, capacity),
    )
    return made


def test_the_release_claim_proves_impl_blocks_and_catches_an_unchecked_release():
    for name in ("impl.blocks", "reference.blocks"):
        said, ev = run(RELEASE, registry.get(name))
        assert said == "", said
        # exercised (the card's own bounds, judged in witness processes with PYTHONHASHSEED=0, ask for more; here
        # the test process's hash seed varies and moves how many of each step the programs draw)
        assert ev["holds"] >= 1 and ev["wrong_releases"] >= 1 and ev["releases"] >= 1, (name, ev)
    said, _ = run(RELEASE, impl_target(ReleaseEach, "test.release-each"))
    assert re.search(r"release \[\d+(, \d+)*\] \(block \d+ (twice|held by no one)", said), said
    assert re.search(r"raised CacheError.*idempotent", said), said  # impl's decref refuses a free block
    said, _ = run(RELEASE, impl_target(ReleaseEachRefusing, "test.release-each-refusing"))
    pattern = r"hold \[\d+.*release \[(\d+), \1\] \(block \1 twice\): release of .* was accepted"
    assert re.search(pattern, said), said


def test_a_free_that_leaves_a_held_block_free_names_where_it_is_held_twice():
    said, _ = run(BOOKS, target(FreeHandsOutShared, "test.planted"))
    pattern = r"block \d+ is (held by r\d+ and r\d+|r\d+'s block \d+ and r\d+'s)|holds block\(s\) \[\d+\] twice"
    assert re.search(pattern, said), said
