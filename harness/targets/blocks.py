"""The block-manager protocol: caches that hand out blocks to requests, and the list-of-requests known answer.

Beside the row protocol (:mod:`harness.targets.protocol`: a handle holds
rows), a block manager holds *requests*: each request is an id (any hashable
value) with a sequence of token ids, and the manager maps its positions onto
fixed-size blocks of a pool (vLLM's KVCacheManager/BlockPool, impl's
BlockPool + PagedSequence). A block-manager target is an ordinary
:class:`harness.targets.protocol.Target` declaring the capability ``blocks``;
``target.make(geometry, capacity=N)`` builds a :class:`BlockHandle` over a
pool of N usable blocks (the geometry, batch and window are not used). It
lacks ``append``, so every row witness is n/a on it, and a row target lacks
``blocks``, so every block witness is n/a there.

Vocabulary:

    request   an id; its tokens are the token ids appended to it so far, in order
    position  0-based index into a request's tokens; position p lives in block
              ``table(r)[p // block_size]`` at offset ``p % block_size``
    table     ``table(r)``: the request's block ids in logical order, exactly
              ceil(len / block_size) of them (no null or padding block)
    held      a block is held by a request while it is in the request's table;
              a block held by no live request is free (a cached block that is
              free counts as free: it may be handed out, evicting it)

Verbs of a handle (capability in brackets when it is optional):

    allocate(r, tokens, keys=None) -> int
                                 append ``tokens`` to request r (an id not yet seen
                                 admits a new request); allocates the blocks they need
                                 and records the tokens in their slots (the model's
                                 write), except the positions a prefix hit served.
                                 Returns how many leading tokens a prefix hit served
                                 (0 without [prefix], and for a request already live).
                                 All-or-nothing: with too few free blocks it raises
                                 MemoryError and changes nothing. ``keys`` (given only
                                 to a handle whose ``extra_keys`` name its kinds, only
                                 when admitting): the new request's extra keys, kind ->
                                 value (str), which its blocks' prefix-cache keys carry
    table(r) -> list[int]        the request's block ids (see above)
    read(r) -> list[int]         the token ids recorded in the slots of r's blocks,
                                 positions 0..len-1: the slot store's read-back
    free(r)                      the request ends: each block loses one holder. Freeing
                                 a request again, or one never admitted, follows the
                                 handle's ``free_contract`` (:data:`FREE_CONTRACTS`)
    num_free() -> int            free blocks; with ``total`` - num_free() in use
    block_ids() -> list[int]     every usable block id (``total`` of them; a null block
                                 the manager never hands out is not one)
    [fork] fork(src, dst)        dst becomes a new request with src's tokens, sharing its
                                 blocks (a write into a shared block goes to a copy)
    [truncate] truncate(r, n)    keep positions [0, n) of r (0 <= n <= len)
    [refcount] refcount(b) -> int  how many live requests hold block b
    [prefix]                     ``allocate`` of a new request may serve leading full
                                 blocks from blocks computed earlier (a prefix cache)
    [reset] reset() -> bool      drop the prefix cache: True when done; refused (False,
                                 or a ValueError/RuntimeError) while any block is held
    [evict]                      the handle's ``policy`` (:data:`POLICIES`) says which
                                 free block is handed out (or evicted) next
    [free-blocks] hold(blocks)   the pool level under a prefix hit or a fork: one more
                                 reference to each listed block, every one held (vLLM's
                                 BlockPool.touch, impl's BlockPool.incref)
    [free-blocks] release(blocks)  the pool level under a request's free: give back one
                                 reference to each listed block. A list naming a block
                                 twice, or a block no one holds, follows the handle's
                                 ``release_contract`` (:data:`RELEASE_CONTRACTS`)

Attributes of a handle: ``target``, ``block_size``, ``total``,
``free_contract``, ``policy`` (None without [evict]),
``release_contract`` (with [free-blocks]) and ``extra_keys`` (with
[prefix], optional): the kinds of extra key ``allocate`` takes, e.g.
``("cache_salt", "lora")`` (vLLM puts a request's cache_salt, LoRA adapter
and multimodal features into its block hashes as extra keys); a handle
without it takes none, and the claim about extra keys is n/a for it. A verb
in brackets is called only on a handle whose target declares its
capability; a handle without it need not define it.

Under [prefix] a block's prefix-cache key is the request's extra keys, each
with its kind (:data:`Keys`), and the whole token prefix the block ends:
requests whose extra keys differ never share a block by prefix, whatever
their tokens.

The known answer is :class:`Requests`: which requests live, with which
tokens, and which histories they share by declaration (a fork; a prefix
hit), computed from the definition of each verb, never from the manager.
It does not know block ids: the claims (:mod:`harness.targets.blockclaims`)
read those from the handle and check them against what it allows.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from harness.targets.protocol import Target

RequestId = Hashable
BlockId = int
Keys = tuple[tuple[str, str], ...]  # a request's extra keys: (kind, value) pairs sorted by kind; () for none


def keys_of(keys: dict[str, str] | None) -> Keys:
    """The canonical :data:`Keys` of an ``allocate(keys=...)`` argument (None or {}: no extra keys)."""
    return tuple(sorted((str(k), str(v)) for k, v in (keys or {}).items()))


FREE_CONTRACTS = {
    "idempotent": "freeing a request again, or one never admitted, does nothing (vLLM's KVCacheManager.free)",
    "refuse": "freeing a request again, or one never admitted, raises (ValueError, RuntimeError or KeyError) "
    "and changes nothing (impl's PagedSequence.release of a released sequence)",
}
RELEASE_CONTRACTS = {
    "refuse": "a list naming a block twice, or a block no one holds (a reference count would go below 0), raises "
    "(ValueError, RuntimeError or KeyError) and changes nothing (impl's BlockPool.free_blocks)",
    "idempotent": "a block named twice loses one reference, a block no one holds is left alone: no count goes "
    "below 0 and the free blocks stay the blocks with no reference",
}
REFUSALS = (ValueError, RuntimeError, KeyError)  # how a handle refuses a free, a reset or a verb's argument

POLICIES = {
    "lowest-free": "the lowest free block id is handed out first (impl's BlockPool.allocate: a min-heap)",
    "lru": "free blocks form a queue, first handed out first: at the start in id order; a request's freed blocks "
    "join it tail block first, those not full (no prefix cached in them) at the front, full (cached) ones at the "
    "back, so the least recently used cached block is evicted first; a prefix hit takes a block out of it "
    "(vLLM's BlockPool: free_block_queue, touch, tail blocks freed first)",
}


class BlockHandle(Protocol):
    """One block manager made by ``Target.make``; the verbs are described in the module docstring."""

    target: Target
    block_size: int
    total: int
    free_contract: str
    policy: str | None

    def allocate(self, request: RequestId, tokens: Sequence[int], keys: dict[str, str] | None = None) -> int: ...

    def table(self, request: RequestId) -> list[BlockId]: ...

    def read(self, request: RequestId) -> list[int]: ...

    def free(self, request: RequestId) -> None: ...

    def num_free(self) -> int: ...

    def block_ids(self) -> list[BlockId]: ...

    def fork(self, src: RequestId, dst: RequestId) -> None: ...

    def truncate(self, request: RequestId, n: int) -> None: ...

    def refcount(self, block: BlockId) -> int: ...

    def reset(self) -> bool: ...

    def hold(self, blocks: Sequence[BlockId]) -> None: ...

    def release(self, blocks: Sequence[BlockId]) -> None: ...


def blocks_for(n: int, block_size: int) -> int:
    """ceil(n / block_size): the blocks n positions occupy."""
    return -(-n // block_size)


@dataclass
class Request:
    """One request of the known answer: its tokens and whether it lives."""

    tokens: list[int]
    live: bool = True


@dataclass
class Requests:
    """The list-of-requests reference: every verb is its definition on token lists.

    ``common[(a, b)]`` (a, b ordered by admission): how many leading positions
    a and b share by a fork (fork copies the source's; a truncate lowers it;
    appends leave it). ``computed``: the (extra keys, token prefix) pairs that
    filled a block since the last reset (what a prefix hit may serve).
    ``keys``: each request's extra keys, given at admission (a fork's are its
    source's).
    """

    block_size: int
    prefix: bool = False
    requests: dict[RequestId, Request] = field(default_factory=dict)
    order: list[RequestId] = field(default_factory=list)
    common: dict[tuple[RequestId, RequestId], int] = field(default_factory=dict)
    computed: set[tuple[Keys, tuple[int, ...]]] = field(default_factory=set)
    keys: dict[RequestId, Keys] = field(default_factory=dict)

    # -- reading

    def live(self) -> list[RequestId]:
        return [r for r in self.order if self.requests[r].live]

    def is_live(self, r: RequestId) -> bool:
        return r in self.requests and self.requests[r].live

    def tokens(self, r: RequestId) -> list[int]:
        return list(self.requests[r].tokens)

    def held(self, r: RequestId) -> int:
        """The blocks r's table holds: ceil(len / block_size)."""
        return blocks_for(len(self.requests[r].tokens), self.block_size)

    def _key(self, a: RequestId, b: RequestId) -> tuple[RequestId, RequestId]:
        return (a, b) if self.order.index(a) < self.order.index(b) else (b, a)

    def shared(self, a: RequestId, b: RequestId) -> int:
        """Leading positions a and b share by a fork (0 when neither is forked from the other's history)."""
        return self.common.get(self._key(a, b), 0)

    def may_share(self, a: RequestId, b: RequestId, i: int) -> str:
        """Why live requests a and b may both hold one block as their block i ("" when they may not): it holds
        positions of a history they share by a fork, or (prefix) it is full in both with the same prefix and
        the same extra keys."""
        bs = self.block_size
        if i * bs < self.shared(a, b):
            return "fork"
        ta, tb = self.requests[a].tokens, self.requests[b].tokens
        end = (i + 1) * bs
        same = ta[:end] == tb[:end] and self.keys.get(a, ()) == self.keys.get(b, ())
        if self.prefix and len(ta) >= end and len(tb) >= end and same:
            return "prefix"
        return ""

    def need(self, r: RequestId, t: int, last_shared: bool) -> int:
        """Blocks an append of t tokens to r needs without a prefix hit: the new ones, plus a private copy of
        a partly filled last block another live request also holds."""
        n = len(self.requests[r].tokens) if self.is_live(r) else 0
        cow = t > 0 and n % self.block_size != 0 and last_shared
        return blocks_for(n + t, self.block_size) - blocks_for(n, self.block_size) + int(cow)

    def hit_is_computed(self, tokens: Sequence[int], hit: int, keys: Keys = ()) -> str:
        """Why a prefix hit of ``hit`` leading tokens of ``tokens``, for a request with extra keys ``keys``, is
        wrong ("" when it is right): a hit is whole blocks, at most len - 1 tokens (the last token is always
        computed), each block's prefix computed since the last reset by a request with the same extra keys."""
        bs = self.block_size
        if not self.prefix and hit:
            return f"a hit of {hit} tokens from a manager without a prefix cache"
        if hit < 0 or hit % bs:
            return f"a hit of {hit} tokens is not whole blocks of {bs}"
        if hit > len(tokens) - 1:
            return (
                f"a hit of {hit} tokens of a {len(tokens)}-token request (at most {len(tokens) - 1}: the last "
                "token is always computed)"
            )
        for j in range(hit // bs):
            prefix = tuple(tokens[: (j + 1) * bs])
            if (keys, prefix) in self.computed:
                continue
            others = sorted(k for k, p in self.computed if p == prefix)
            if others:
                return (
                    f"block {j} of the hit serves the prefix {list(prefix)}, computed since the last reset only by "
                    f"requests with other extra keys ({', '.join(map(str, others))}; this request's: {keys}): "
                    "requests that differ in an extra key never share a block by prefix"
                )
            return (
                f"block {j} of the hit serves the prefix {list(prefix)}, which no request computed since the last reset"
            )
        return ""

    def collides(self, tokens: Sequence[int], keys: Keys) -> tuple[bool, bool]:
        """Whether a prefix a hit on ``tokens`` could serve (whole blocks, at most len - 1 tokens) was computed
        by requests with other extra keys, and whether one of those had the same values under other kinds (a
        lora name equal to a cache_salt: vllm-project/vllm#44701): the chances a manager has to share wrongly."""
        bs, other, renamed = self.block_size, False, False
        for j in range((len(tokens) - 1) // bs):
            prefix = tuple(tokens[: (j + 1) * bs])
            for k, p in self.computed:
                if p == prefix and k != keys:
                    other = True
                    renamed |= sorted(v for _, v in k) == sorted(v for _, v in keys)
        return other, renamed

    # -- verbs

    def allocate(self, r: RequestId, tokens: Sequence[int], keys: Keys = ()) -> None:
        if r not in self.requests:
            self.requests[r] = Request([])
            self.order.append(r)
            self.keys[r] = keys
        self.requests[r].tokens += [int(x) for x in tokens]
        self._computed(r)

    def _computed(self, r: RequestId) -> None:
        toks, bs = self.requests[r].tokens, self.block_size
        for j in range(len(toks) // bs):
            self.computed.add((self.keys[r], tuple(toks[: (j + 1) * bs])))

    def free(self, r: RequestId) -> None:
        self.requests[r].live = False
        for key in [k for k in self.common if r in k]:
            del self.common[key]

    def fork(self, src: RequestId, dst: RequestId) -> None:
        n = len(self.requests[src].tokens)
        for x in self.live():
            if x != src:
                self.common[(x, dst)] = min(self.shared(src, x), n)
        self.requests[dst] = Request(list(self.requests[src].tokens))
        self.keys[dst] = self.keys[src]
        self.order.append(dst)
        self.common[(src, dst)] = n

    def truncate(self, r: RequestId, n: int) -> None:
        del self.requests[r].tokens[n:]
        for key in self.common:
            if r in key:
                self.common[key] = min(self.common[key], n)

    def reset(self) -> None:
        self.computed.clear()


# ---------------------------------------------------------------- declared reuse orders


class LowestFree:
    """Policy ``lowest-free``: the blocks an allocation takes are the lowest free ids."""

    def __init__(self, ids: Sequence[BlockId]) -> None:
        self.ids = list(ids)

    def expect(self, free: set[BlockId], k: int) -> list[BlockId]:
        return sorted(free)[:k]

    def took(self, blocks: Sequence[BlockId]) -> None:
        """The blocks an allocation took (nothing to remember)."""

    def freed(self, tail_first: Sequence[BlockId], cached: Sequence[bool]) -> None:
        """Blocks that became free (nothing to remember)."""

    def hit(self, blocks: Sequence[BlockId]) -> None:
        """Blocks a prefix hit took (nothing to remember)."""


class LruQueue:
    """Policy ``lru`` (see :data:`POLICIES`): a queue of free blocks, handed out from its front."""

    def __init__(self, ids: Sequence[BlockId]) -> None:
        self.queue = list(ids)

    def expect(self, free: set[BlockId], k: int) -> list[BlockId]:
        return self.queue[:k]

    def took(self, blocks: Sequence[BlockId]) -> None:
        self.queue = [b for b in self.queue if b not in set(blocks)]

    def freed(self, tail_first: Sequence[BlockId], cached: Sequence[bool]) -> None:
        front = [b for b, c in zip(tail_first, cached, strict=True) if not c]
        back = [b for b, c in zip(tail_first, cached, strict=True) if c]
        self.queue = front + self.queue + back

    def hit(self, blocks: Sequence[BlockId]) -> None:
        self.took(blocks)


POLICY_MODELS = {"lowest-free": LowestFree, "lru": LruQueue}


# ---------------------------------------------------------------- what a prefix cache can serve


class CachedBlocks:
    """The blocks that cache a prefix and have not been evicted: what a prefix hit can serve (with [prefix, evict]).

    A block caches (extra keys, prefix) from the step that makes it a full block
    of a request's table holding that prefix (a prefix cache caches every full
    block it computes: vLLM's cache_full_blocks, "A cached block is a full block
    with a block hash"), and stops when an allocation takes it as a new block
    (the declared policy evicts it: the blocks an allocation takes are the
    policy's, :class:`LruQueue`), at a done reset, and -- to stay on the safe
    side -- when a truncate cuts into or below it (its slots may be rewritten).
    A free evicts nothing: a freed cached block waits in the free queue. It
    learns only from block ids the handle showed and from the steps' own
    definitions, so everything it holds is a block the manager must still be
    able to serve.
    """

    def __init__(self) -> None:
        self.of: dict[BlockId, tuple[Keys, tuple[int, ...]]] = {}

    def filled(self, table: Sequence[BlockId], tokens: Sequence[int], keys: Keys, block_size: int) -> None:
        """A request with ``tokens`` and extra keys ``keys`` holds ``table`` after a step: its full blocks cache."""
        for j in range(len(tokens) // block_size):
            self.of[table[j]] = (keys, tuple(tokens[: (j + 1) * block_size]))

    def evicted(self, blocks: Sequence[BlockId]) -> None:
        """``blocks`` were handed out as new blocks (or may be rewritten): they cache nothing now."""
        for b in blocks:
            self.of.pop(b, None)

    def reset(self) -> None:
        self.of.clear()

    def longest(self, tokens: Sequence[int], keys: Keys, block_size: int) -> list[list[BlockId]]:
        """For each leading full block a hit on ``tokens`` may serve (at most len - 1 tokens), while every one so
        far is cached under ``keys``: the blocks that cache it. Its length is the hit the cache can serve."""
        out = []
        for j in range((len(tokens) - 1) // block_size):
            want = (keys, tuple(tokens[: (j + 1) * block_size]))
            holders = sorted(b for b, k in self.of.items() if k == want)
            if not holders:
                break
            out.append(holders)
        return out
