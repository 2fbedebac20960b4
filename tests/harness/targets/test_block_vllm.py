"""harness/targets/vllm.py's extra keys and hit length, against the real vLLM (TGT-BLOCKS-KEYS, TGT-BLOCKS-HIT).

Run with ``.venv-vllm/bin/python -m pytest tests/harness/targets/test_block_vllm.py`` (vLLM lives in a venv of
its own: ``make engines-vllm``). Without vLLM the tests that need it skip; the declaration tests run everywhere.
"""

from __future__ import annotations

import pytest

from harness.targets import registry
from harness.targets import vllm as vllm_target
from harness.targets.protocol import Geometry

GEOMETRY = Geometry(1, 1, 1)  # make() takes one; a block manager does not use it
TARGET = registry.get("vllm.kvcache-manager")
needs_vllm = pytest.mark.skipif(
    not TARGET.runnable, reason=f"vLLM is not installed here: make engines-vllm ({TARGET.unavailable})"
)


def test_the_vllm_handle_takes_a_cache_salt_and_a_lora_as_extra_keys_and_quotes_the_hash_docs():
    assert vllm_target.VllmBlocks.extra_keys == ("cache_salt", "lora")
    backing = TARGET.backing(["extra-keys"])
    assert "cache_salt" in backing and "generate_block_hash_extra_keys" in backing
    assert "find_longest_cache_hit" in TARGET.backing(["prefix"])


@needs_vllm
def test_requests_that_differ_in_an_extra_key_share_no_block_and_equal_keys_do():
    h = TARGET.make(GEOMETRY, capacity=8)
    assert h.allocate("a", [0, 1, 2], keys={"cache_salt": "x"}) == 0
    assert h.allocate("b", [0, 1, 2], keys={"lora": "x"}) == 0  # the same value under another kind
    assert h.allocate("c", [0, 1, 2]) == 0  # no extra key
    assert h.allocate("d", [0, 1, 2], keys={"cache_salt": "x"}) == 2  # a's block 0
    assert h.table("d")[0] == h.table("a")[0] and len({h.table(r)[0] for r in "abc"}) == 3
    assert h.allocate("e", [0, 1, 2], keys={"lora": "x"}) == 2 and h.table("e")[0] == h.table("b")[0]
    assert h.read("e") == [0, 1, 2]


@needs_vllm
def test_a_freed_cached_block_serves_a_prompt_sent_again_until_it_is_handed_out():
    h = TARGET.make(GEOMETRY, capacity=3)
    h.allocate("a", [0, 1, 2])  # block 1 full and cached, block 2 partly filled
    h.free("a")
    assert h.allocate("b", [0, 1, 2]) == 2 and h.table("b")[0] == 1  # the freed block, still cached
    h.free("b")
    h.allocate("c", [2, 2, 2, 2, 2, 2])  # every block, block 1 last (cached: the back of the queue)
    h.free("c")
    assert h.allocate("d", [0, 1, 2]) == 0
