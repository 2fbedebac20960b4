"""Block-manager targets of the ``own`` group: impl's paged pool, and a prefix-caching manager after vLLM's contract.

``impl.blocks`` maps the block-manager protocol (:mod:`harness.targets.blocks`)
onto impl.paged: a request is a ``PagedSequence`` over one ``BlockPool`` of
3-position blocks (grow=False: a pool of ``capacity`` blocks that can run
out); ``allocate`` is ``reserve`` then ``write`` of the token ids as the
sequence's one-wide K, pre-RoPE K and V rows (the slot store is the pool's
own storage, so copy-on-write copies it); ``read`` is ``PagedSequence.rows``;
``free`` is ``release`` (a second one raises SequenceReleased: the contract
``refuse``); ``fork``, ``truncate``, ``refcount`` and ``num_free`` are
impl's; ``hold`` is ``BlockPool.incref`` of each block and ``release`` is
``ImplBlocks.release`` (a list naming a block twice, or a free one, raises
CacheError and changes nothing: the release contract ``refuse``). impl has
no prefix cache and no reset: those claims are n/a on it.

``reference.blocks`` (:class:`PrefixBlocks`) is a block manager with a
prefix cache, written from the contract vLLM's v1 BlockPool documents
(policy ``lru``, free ``idempotent``, reset refused while a block is held,
block 0 a null block never handed out; ``release`` of a list naming a block
twice or an unheld one refused; extra keys ``cache_salt`` and ``lora`` in
every block's cache key, each with its kind), with no fork or truncate; it
is here so that the prefix, hit-length, extra-key, reset and reuse-order
claims run on something in this checkout, and its liars show they catch a
wrong manager.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from harness.targets.blocks import BlockId, Keys, blocks_for, keys_of
from harness.targets.protocol import Geometry, Numerics, Target
from impl.cache import KVGeometry
from impl.errors import CacheError
from impl.paged import BlockPool, PagedSequence

ONE = KVGeometry(1, 1, 1)  # a slot holds one number: the token id, as float32 (exact below 2**24)


class ImplBlocks:
    """impl's BlockPool and PagedSequences behind the block-manager verbs (see the module docstring)."""

    free_contract = "refuse"
    policy = "lowest-free"
    release_contract = "refuse"

    def __init__(self, target: Target, total: int, block_size: int = 3) -> None:
        self.target, self.total, self.block_size = target, total, block_size
        self.pool = BlockPool(total, block_size, ONE)
        self.seqs: dict[Hashable, PagedSequence] = {}

    def _seq(self, r: Hashable) -> PagedSequence:
        if r not in self.seqs:
            raise KeyError(f"request {r!r} was never admitted")
        return self.seqs[r]

    def allocate(self, r: Hashable, tokens: Sequence[int]) -> int:
        new = r not in self.seqs
        s = PagedSequence(self.pool) if new else self.seqs[r]
        start = len(s)
        s.reserve(len(tokens))  # all-or-nothing: PoolExhausted (a MemoryError) changes nothing
        if new:
            self.seqs[r] = s
        rows = np.asarray(tokens, np.float32).reshape(-1, 1)
        s.write(0, start, rows, rows, rows)
        return 0

    def table(self, r: Hashable) -> list[BlockId]:
        return list(self._seq(r).blocks)

    def read(self, r: Hashable) -> list[int]:
        return [int(x) for x in self._seq(r).rows("k")[0][:, 0]]

    def free(self, r: Hashable) -> None:
        self._seq(r).release()

    def num_free(self) -> int:
        return int(self.pool.num_free)

    def block_ids(self) -> list[BlockId]:
        return list(range(self.pool.num_blocks))

    def fork(self, src: Hashable, dst: Hashable) -> None:
        if dst in self.seqs:
            raise ValueError(f"fork(dst={dst!r}): the request already exists")
        self.seqs[dst] = self._seq(src).fork()

    def truncate(self, r: Hashable, n: int) -> None:
        self._seq(r).truncate(n)

    def refcount(self, b: BlockId) -> int:
        return int(self.pool.refcount(b))

    def hold(self, blocks: Sequence[BlockId]) -> None:
        for b in blocks:
            self.pool.incref(b)

    def release(self, blocks: Sequence[BlockId]) -> None:
        """impl has no verb that frees a list: the adapter checks the whole list first (each block held, none named
        twice: CacheError, nothing changed), then gives back one reference each with BlockPool.decref."""
        ids = list(blocks)
        for b in ids:
            if self.pool.refcount(b) <= 0:
                raise CacheError(f"release(blocks={ids}): block {b} is held by no one; name held blocks only")
        twice = sorted({b for b in ids if ids.count(b) > 1})
        if twice:
            raise CacheError(f"release(blocks={ids}): names block(s) {twice} twice; name each block once")
        for b in ids:
            self.pool.decref(b)


class PrefixBlocks:
    """A prefix-caching block manager (``reference.blocks``), after vLLM's v1 BlockPool and KVCacheManager.

    Blocks 1..total (0 is the null block). A full block is cached under the
    request's extra keys, each with its kind, and the whole token prefix it
    ends (a chained hash with tagged extra keys: :meth:`_key`); a new
    request's leading full blocks, at most len - 1 tokens, are served from the
    cache, from any block caching each (a block stays cached until it is
    handed out again, duplicates too). Free blocks
    form a queue handed out from the front (an allocated cached block is
    evicted from the cache); a free request's blocks join it tail first, not
    full ones at the front and full ones at the back. ``reset`` drops the
    cache, refused while any block is held.
    """

    free_contract = "idempotent"
    policy = "lru"
    release_contract = "refuse"
    extra_keys = ("cache_salt", "lora")

    def __init__(self, target: Target, total: int, block_size: int = 2) -> None:
        self.target, self.total, self.block_size = target, total, block_size
        self.queue: list[BlockId] = list(range(1, total + 1))
        self.refs = [0] * (total + 1)
        self.key_of: dict[BlockId, Hashable] = {}  # cached block -> its cache key (extra keys, the prefix it ends)
        self.cache: dict[Hashable, list[BlockId]] = {}  # cache key -> the cached blocks that have it
        self.slots = np.full((total + 1, block_size), -1, np.int64)
        self.tables: dict[Hashable, list[BlockId]] = {}
        self.tokens: dict[Hashable, list[int]] = {}
        self.keys: dict[Hashable, Keys] = {}

    def _key(self, keys: Keys, prefix: Sequence[int]) -> Hashable:
        """The cache key of a full block: each extra key with its kind, and the whole prefix the block ends."""
        return (keys, tuple(prefix))

    def _hits(self, tokens: list[int], keys: Keys = ()) -> list[BlockId]:
        out = []
        for j in range((len(tokens) - 1) // self.block_size):
            got = self.cache.get(self._key(keys, tokens[: (j + 1) * self.block_size]))
            if not got:
                break
            out.append(got[0])
        return out

    def allocate(self, r: Hashable, tokens: Sequence[int], keys: dict[str, str] | None = None) -> int:
        tokens = [int(x) for x in tokens]
        new = r not in self.tables
        table, old = ([], []) if new else (self.tables[r], self.tokens[r])
        kk = keys_of(keys) if new else self.keys[r]
        hits = self._hits(tokens, kk) if new else []
        need = blocks_for(len(old) + len(tokens), self.block_size) - len(table) - len(hits)
        if need > len(self.queue) - sum(self.refs[b] == 0 for b in hits):
            raise MemoryError(f"allocate({r!r}, {len(tokens)} tokens): {need} blocks needed, {len(self.queue)} free")
        for b in hits:
            if self.refs[b] == 0:
                self.queue.remove(b)  # touch: a cached free block is in use again
            self.refs[b] += 1
        fresh, self.queue = self.queue[:need], self.queue[need:]
        for b in fresh:
            self._evict(b)
            self.refs[b] = 1
        table = table + hits + fresh
        self.tables[r], self.tokens[r], self.keys[r] = table, old + tokens, kk
        self._write(r, len(old) + len(hits) * self.block_size)
        return len(hits) * self.block_size

    def _evict(self, b: BlockId) -> None:
        key = self.key_of.pop(b, None)
        if key is not None:
            self.cache[key].remove(b)

    def _write(self, r: Hashable, start: int) -> None:
        bs, table, toks = self.block_size, self.tables[r], self.tokens[r]
        for p in range(start, len(toks)):
            self.slots[table[p // bs], p % bs] = toks[p]
        for j in range(len(toks) // bs):  # every full block is cached under its key
            b = table[j]
            if b not in self.key_of:
                self.key_of[b] = self._key(self.keys[r], toks[: (j + 1) * bs])
                self.cache.setdefault(self.key_of[b], []).append(b)

    def table(self, r: Hashable) -> list[BlockId]:
        return list(self.tables[r])

    def read(self, r: Hashable) -> list[int]:
        bs = self.block_size
        return [int(self.slots[self.tables[r][p // bs], p % bs]) for p in range(len(self.tokens[r]))]

    def free(self, r: Hashable) -> None:
        table = self.tables.pop(r, None)
        if table is None:
            return  # idempotent: freeing an unknown or freed request does nothing
        del self.tokens[r], self.keys[r]
        gone = []
        for b in reversed(table):  # tail blocks first: they are evicted first
            self.refs[b] -= 1
            if self.refs[b] == 0:
                gone.append(b)
        front = [b for b in gone if b not in self.key_of]
        self.queue = front + self.queue + [b for b in gone if b in self.key_of]

    def num_free(self) -> int:
        return len(self.queue)

    def block_ids(self) -> list[BlockId]:
        return list(range(1, self.total + 1))

    def refcount(self, b: BlockId) -> int:
        return self.refs[b]

    def hold(self, blocks: Sequence[BlockId]) -> None:
        for b in blocks:
            if self.refs[b] == 0:
                self.queue.remove(b)  # touch: a free block is in use again
            self.refs[b] += 1

    def release(self, blocks: Sequence[BlockId]) -> None:
        ids = list(blocks)
        bad = sorted({b for b in ids if ids.count(b) > 1 or self.refs[b] == 0})
        if bad:
            raise ValueError(f"release({ids}): block(s) {bad} named twice or held by no one; nothing released")
        gone = []
        for b in ids:  # in list order: the first listed is evicted first, as in vLLM's free_blocks
            self.refs[b] -= 1
            if self.refs[b] == 0:
                gone.append(b)
        front = [b for b in gone if b not in self.key_of]
        self.queue = front + self.queue + [b for b in gone if b in self.key_of]

    def reset(self) -> bool:
        if any(self.refs):
            return False
        self.key_of.clear()
        self.cache.clear()
        return True


# ---------------------------------------------------------------- the targets

TARGETS: dict[str, Target] = {}


def build_impl(geometry: Geometry, batch: int, window: int | None, capacity: int, trace=None) -> ImplBlocks:
    return ImplBlocks(TARGETS["impl.blocks"], capacity)


def build_prefix(geometry: Geometry, batch: int, window: int | None, capacity: int, trace=None) -> PrefixBlocks:
    return PrefixBlocks(TARGETS["reference.blocks"], capacity)


TARGETS["impl.blocks"] = Target(
    "impl.blocks",
    "impl.paged.BlockPool + PagedSequence as a block manager: requests are sequences over a pool of 3-token blocks",
    "kvproof",
    frozenset({"blocks", "fork", "truncate", "refcount", "evict", "free-blocks"}),
    Numerics.exact(),
    (
        "impl/paged.py::BlockPool.allocate",
        "harness/targets/blockown.py::ImplBlocks.release",
        "impl/paged.py::BlockPool.incref",
        "impl/paged.py::BlockPool.decref",
        "impl/paged.py::BlockPool.refcount",
        "impl/paged.py::PagedSequence.reserve",
        "impl/paged.py::PagedSequence.fork",
        "impl/paged.py::PagedSequence.truncate",
        "impl/paged.py::PagedSequence.release",
        "harness/targets/blockown.py::ImplBlocks",
    ),
    build_impl,
    own=True,
    docs=(
        ("free", "PagedSequence.release: 'Return every block to the pool; the sequence may not be used afterwards.'"),
        ("evict", "BlockPool: 'allocate() hands out the lowest free id with count 1'"),
        (
            "free-blocks",
            "ImplBlocks.release (the adapter: impl frees no list): 'CacheError, nothing changed, when the list names "
            "a block twice or a block that is free: either would take a count below its holders.'",
        ),
    ),
)
TARGETS["reference.blocks"] = Target(
    "reference.blocks",
    "a prefix-caching block manager written from vLLM's v1 BlockPool contract (LRU free queue, reset, null block 0)",
    "kvproof",
    frozenset({"blocks", "prefix", "reset", "refcount", "evict", "free-blocks"}),
    Numerics.exact(),
    ("harness/targets/blockown.py::PrefixBlocks",),
    build_prefix,
    own=True,
)
