"""The hit-length and extra-key claims (TGT-BLOCKS-HIT, TGT-BLOCKS-KEYS), the sharing witness, and step weights.

The known answer's extra keys and the model of what a prefix cache can serve
(harness.targets.blocks.CachedBlocks) are checked against hand-worked
answers; the claims prove reference.blocks and fail planted-bug managers (a
PrefixBlocks subclass with one slip) with a short numbered program naming the
slip; a manager that cannot share, or takes no extra key, is n/a.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings

from harness.targets import blockclaims as claims  # the module, not its test_* names: pytest would collect those
from harness.targets import registry
from harness.targets.blockclaims import BlockProgram, steps_for
from harness.targets.blockown import ImplBlocks, PrefixBlocks
from harness.targets.blocks import CachedBlocks, Requests, keys_of
from harness.targets.protocol import Numerics, Target
from harness.wire.evidence import Evidence

HIT = claims.test_prefix_hits_are_as_long_as_the_cache_can_serve
KEYS = claims.test_requests_with_other_extra_keys_share_no_block
SHARED = claims.test_blocks_are_shared_only_as_declared
SALT, LORA = "cache_salt", "lora"


def run(claim, tgt) -> str:
    """The AssertionError's text of ``claim`` on ``tgt`` ("" when it holds), on the ci profile."""
    before = settings._current_profile  # restored after: the ci profile must not leak into other tests
    settings.load_profile("ci")
    try:
        claim(tgt, Evidence())
    except AssertionError as e:
        return str(e)
    except ExceptionGroup as group:  # Hypothesis found distinct failures: each shrunk program, one a line
        return "\n".join(str(e) for e in group.exceptions)
    finally:
        settings.load_profile(before or "default")
    return ""


def target(cls, name: str, caps=("blocks", "prefix", "reset", "refcount", "evict")) -> Target:
    made = Target(
        name,
        f"{cls.__name__}: {cls.__doc__}",
        "kvproof",
        frozenset(caps),
        Numerics.exact(),
        (),
        lambda geometry, batch, window, capacity, trace=None: cls(made, capacity),
    )
    return made


def steps_of(said: str) -> list[str]:
    return re.findall(r"(\d+)\. ", said.split(": after the steps ")[1].split(": ")[0])


# ---------------------------------------------------------------- the known answer with extra keys


def test_extra_keys_are_kind_value_pairs_in_kind_order():
    assert keys_of(None) == keys_of({}) == ()
    assert keys_of({LORA: "x", SALT: "y"}) == ((SALT, "y"), (LORA, "x"))
    assert keys_of({SALT: "x"}) != keys_of({LORA: "x"})  # the same value under another kind is another key


def test_requests_with_other_extra_keys_may_not_share_and_their_prefixes_serve_no_hit():
    m = Requests(block_size=2, prefix=True)
    m.allocate("a", [1, 2, 3], keys_of({SALT: "x"}))
    m.allocate("b", [1, 2, 3], keys_of({LORA: "x"}))
    m.allocate("c", [1, 2, 3], keys_of({SALT: "x"}))
    assert m.may_share("a", "b", 0) == "" and m.may_share("a", "c", 0) == "prefix"
    assert m.hit_is_computed([1, 2, 5], 2, keys_of({SALT: "x"})) == ""
    says = m.hit_is_computed([1, 2, 5], 2, keys_of({SALT: "y"}))
    assert "only by requests with other extra keys" in says and "never share a block" in says
    assert "other extra keys" in m.hit_is_computed([1, 2, 5], 2)  # a plain request: no one computed it plain
    assert m.collides([1, 2, 5], keys_of({LORA: "x"})) == (True, True)  # a cache_salt x computed it: renamed
    assert m.collides([1, 2, 5], keys_of({LORA: "y"})) == (True, False)
    assert m.collides([1, 2], keys_of({LORA: "y"})) == (False, False)  # a hit serves at most len - 1 tokens


def test_a_fork_keeps_its_source_extra_keys():
    m = Requests(block_size=2, prefix=True)
    m.allocate("a", [1, 2], keys_of({SALT: "x"}))
    m.fork("a", "b")
    m.allocate("b", [3, 4])
    assert m.keys["b"] == keys_of({SALT: "x"}) and (keys_of({SALT: "x"}), (1, 2, 3, 4)) in m.computed


# ---------------------------------------------------------------- what a prefix cache can serve


def test_a_full_block_caches_its_prefix_until_it_is_handed_out_again():
    c = CachedBlocks()
    c.filled([7, 8, 9], [1, 2, 3, 4, 5], (), 2)  # blocks 7, 8 full; 9 partly filled
    assert c.longest([1, 2, 3, 4, 6], (), 2) == [[7], [8]]
    assert c.longest([1, 2, 3, 4], (), 2) == [[7]]  # at most len - 1 tokens
    assert c.longest([1, 2, 3, 4, 6], keys_of({SALT: "x"}), 2) == []  # other extra keys: nothing to serve
    c.filled([5, 6], [1, 2, 3, 4], (), 2)  # the same prefixes again: duplicates
    c.evicted([8])
    assert c.longest([1, 2, 3, 4, 6], (), 2) == [[5, 7], [6]]
    c.evicted([5, 7])
    assert c.longest([1, 2, 3, 4, 6], (), 2) == []  # block 0 of the prefix is gone: so is every later one
    c.reset()
    assert c.of == {}


def test_a_freed_block_is_still_served_and_one_handed_out_again_is_not():
    ev = Evidence()
    run_ = BlockProgram(registry.get("reference.blocks"), 3, ev, policy=True, longest=True)
    run_.run([("admit", 0, [0, 1, 2]), ("free", 0, None), ("resend", 0, None)])  # r1 hits r0's freed block 1
    assert ev.values["prefix_hits"] == 1 and ev.values["servable_from_free"] == 1
    run_.run([("free", 1, None), ("admit", 0, [2, 2, 2, 2, 2, 2]), ("free", 2, None), ("admit", 0, [0, 1, 2])])
    assert ev.values["prefix_hits"] == 1  # r2 took every block, block 1 last (cached: the back of the queue)


class HitsHeldOnly(PrefixBlocks):
    """serves a cached block only while a live request holds it (a freed cached block is never hit)."""

    def _hits(self, tokens, keys=()):
        out = []
        for j in range((len(tokens) - 1) // self.block_size):
            got = [b for b in self.cache.get(self._key(keys, tokens[: (j + 1) * self.block_size]), []) if self.refs[b]]
            if not got:
                break
            out.append(got[0])
        return out


class RefusesWithoutTheHit(PrefixBlocks):
    """refuses an admission unless every block of the prompt is free, the blocks its hit serves too."""

    def allocate(self, r, tokens, keys=None):
        if r not in self.tables and -(-len(tokens) // self.block_size) > len(self.queue):
            raise MemoryError(f"allocate({r!r}): not enough free blocks")
        return super().allocate(r, tokens, keys)


def test_the_hit_claim_proves_reference_blocks_and_is_n_a_without_a_prefix_cache():
    assert run(HIT, registry.get("reference.blocks")) == ""
    assert registry.get("impl.blocks").lacks(["blocks", "prefix", "evict"]) == ["prefix"]


@pytest.mark.parametrize(
    "cls, says",
    [
        (HitsHeldOnly, r"got a prefix hit of 0 tokens; the cache can serve 2: its block 0, the prefix \[\d, \d\]"),
        (RefusesWithoutTheHit, r"was refused .* after the hit of \d+ tokens the cache can serve"),
    ],
    ids=["hits-held-only", "refuses-without-the-hit"],
)
def test_a_hit_shorter_than_the_cache_can_serve_fails_with_a_short_numbered_program(cls, says):
    said = run(HIT, target(cls, "test.planted"))
    assert re.search(says, said), said
    assert steps_of(said)[0] == "1" and len(steps_of(said)) <= 8, said


def test_a_refusal_the_claim_rejects_is_an_assertion_not_chained_to_the_memory_error():
    run_ = BlockProgram(target(RefusesWithoutTheHit, "test.planted"), 4, Evidence(), policy=True, longest=True)
    run_.run([("admit", 0, [0, 1, 2]), ("admit", 0, [2, 2])])  # blocks 1, 2 and 3: one free
    with pytest.raises(AssertionError, match="the cache can serve") as caught:
        run_.run([("admit", 0, [0, 1, 2, 2])])  # it needs 1 block after the hit on block 1 (held by r0)
    assert caught.value.__context__ is None  # a check failing while handling MemoryError reads as out of memory


# ---------------------------------------------------------------- extra keys


class KeysUntagged(PrefixBlocks):
    """keys a cached block by its extra keys' values without their kinds."""

    def _key(self, keys, prefix):
        return (tuple(sorted(v for _, v in keys)), tuple(prefix))


class NoExtraKeys(PrefixBlocks):
    """a prefix cache whose allocate takes no extra key."""

    extra_keys = ()


def test_the_extra_key_claim_proves_reference_blocks_and_catches_untagged_keys():
    assert run(KEYS, registry.get("reference.blocks")) == ""
    said = run(KEYS, target(KeysUntagged, "test.untagged"))
    pattern = r"extra keys \{'(cache_salt|lora)': '(x|y)'\}.*extra keys \{'(cache_salt|lora)': '\2'\}"
    assert re.search(pattern, said) and "requests with other extra keys" in said, said
    assert len(steps_of(said)) <= 6, said


def test_the_extra_key_claim_is_n_a_for_a_handle_that_takes_none():
    with pytest.raises(pytest.skip.Exception, match="n/a: target test.plain lacks capability extra-keys"):
        run(KEYS, target(NoExtraKeys, "test.plain"))


def test_a_resend_with_keys_moved_to_other_kinds_carries_the_same_values():
    ev = Evidence()
    run_ = BlockProgram(registry.get("reference.blocks"), 6, ev)
    run_.run([("admit_keyed", 0, ([0, 1, 2], {SALT: "x"})), ("rekey", 0, None), ("rekey", 1, None)])
    assert [run_.model.keys[r] for r in ("r0", "r1", "r2")] == [((SALT, "x"),), ((LORA, "x"),), ((SALT, "x"),)]
    assert ev.values["renamed_keys"] == 2 and ev.values["keyed_hits"] == 1  # r2 hits r0's block, not r1's


# ---------------------------------------------------------------- sharing, and the step weights


def test_the_sharing_witness_is_n_a_for_a_manager_that_cannot_share():
    assert run(SHARED, registry.get("impl.blocks")) == ""
    with pytest.raises(pytest.skip.Exception, match="n/a: target test.alone lacks capability fork or prefix"):
        run(SHARED, target(ImplBlocks, "test.alone", caps=("blocks", "refcount")))


def test_a_step_weight_draws_its_kind_that_many_times_as_often():
    drawn: Counter = Counter()

    @settings(max_examples=400, derandomize=True, database=None)
    @given(steps_for(registry.get("impl.blocks"), {"admit": 6, "extend": 0, "fork": 0, "truncate": 0}))
    def draw(step):
        drawn[step[0]] += 1

    draw()
    assert "extend" not in drawn and "fork" not in drawn  # weight 0: never
    assert drawn["admit"] > 3 * drawn["free"], drawn  # 6 copies of admit beside 1 of free
