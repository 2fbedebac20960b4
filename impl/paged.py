"""The paged KV cache: a pool of fixed-size blocks, page tables, fork with copy-on-write.

Small single-job pieces, composed (after vLLM's block allocator):

    RefCounter     how many page tables hold each block id
    BlockStorage   the K, k_raw and V rows of every block, all layers
    BlockPool      allocate / incref / decref over the two, lowest free id first
    PagedSequence  one sequence's page table and length; an ``impl.cache.KVStore``

Layout (the pool's storage; block b holds rows [i*bs, (i+1)*bs) of every
sequence whose page table has b at index i):
    k, k_raw, v   (n_layers, num_blocks, block_size, kv_dim) float32
A block id names the same slot in every layer, as in vLLM: one allocation
holds a token's K/V for the whole model.

Row r of a sequence lives in block ``blocks[r // bs]`` at offset ``r % bs``.
``view`` gathers the blocks of the page table, in table order, into one
(hi, kv_dim) array, so attention reads the very bytes a contiguous
``impl.kv.KVCache`` would hold and gives the same bits (card PKV-EQUIV).

Copy-on-write: ``fork`` shares every block (count + 1). Before rows are
written into a block whose count is above 1, ``reserve`` copies it into a
fresh block for this sequence alone (``_make_writable``), so a fork never
sees its sibling's writes. Only the last, partly filled block can be shared
and written: full blocks are never written again.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from impl.cache import KVGeometry, KVStore, Window, check_positive_int
from impl.errors import CacheError, ImplError
from impl.rope import RopeTable

BlockId = int  # index of a block in the pool's storage, 0..num_blocks-1


class PoolExhausted(ImplError, MemoryError):
    """The pool has fewer free blocks than an operation needs; nothing was changed."""

    def __init__(self, needed: int, free: int, pool: BlockPool) -> None:
        self.needed, self.free = needed, free
        super().__init__(
            f"block pool exhausted: needed={needed} blocks, free={free} (pool of num_blocks={pool.num_blocks} "
            f"x block_size={pool.block_size} tokens); release or truncate sequences, or build a larger "
            f"BlockPool(num_blocks=...) (or one with grow=True)"
        )


class SequenceReleased(CacheError):
    """A released PagedSequence was used again."""


class RefCounter:
    """Reference counts of block ids 0..n-1. Knows nothing of storage or free lists."""

    def __init__(self, n: int) -> None:
        self._counts = [0] * n

    def get(self, b: BlockId) -> int:
        return self._counts[b]

    def incref(self, b: BlockId) -> int:
        self._counts[b] += 1
        return self._counts[b]

    def decref(self, b: BlockId) -> int:
        assert self._counts[b] > 0, f"decref of block {b} whose count is already 0"
        self._counts[b] -= 1
        return self._counts[b]

    def extend(self, n: int) -> None:
        self._counts.extend([0] * (n - len(self._counts)))


class BlockStorage:
    """K, pre-RoPE K and V for ``num_blocks`` blocks of every layer.

    ``k``, ``k_raw``, ``v``: (n_layers, num_blocks, block_size, kv_dim) float32.
    """

    def __init__(self, num_blocks: int, block_size: int, geometry: KVGeometry) -> None:
        shape = (geometry.n_layers, num_blocks, block_size, geometry.kv_dim)
        self.k, self.k_raw, self.v = (np.zeros(shape, np.float32) for _ in range(3))

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.k, self.k_raw, self.v

    def copy_block(self, src: BlockId, dst: BlockId) -> None:
        """Copy every layer's rows of block ``src`` into block ``dst``."""
        for a in self.arrays:
            a[:, dst] = a[:, src]

    def grow(self, num_blocks: int) -> None:
        """Reallocate to ``num_blocks`` blocks, keeping the contents of the old ones."""
        old = self.k.shape[1]
        grown = []
        for a in self.arrays:
            b = np.zeros((a.shape[0], num_blocks) + a.shape[2:], np.float32)
            b[:, :old] = a
            grown.append(b)
        self.k, self.k_raw, self.v = grown


class BlockPool:
    """Fixed-size blocks of K/V storage shared by any number of ``PagedSequence``.

    ``allocate()`` hands out the lowest free id with count 1 and raises
    ``PoolExhausted`` (a MemoryError) when none is free, leaving the pool
    unchanged. ``decref`` frees a block when its count reaches 0; freed ids
    are handed out again. With ``grow=True`` the pool doubles its storage
    instead of raising (the default pool of a model session does this).
    ``geometry``: the model's (``ModelConfig.kv_geometry``). Bytes per block:
    3 * n_layers * block_size * kv_dim * 4. Raises CacheError for a count
    that is not an int >= 1 or a geometry whose K and V widths differ.
    """

    def __init__(self, num_blocks: int, block_size: int, geometry: KVGeometry, *, grow: bool = False) -> None:
        check_positive_int("BlockPool", "num_blocks", num_blocks)
        check_positive_int("BlockPool", "block_size", block_size)
        if not isinstance(geometry, KVGeometry):
            raise CacheError(
                f"BlockPool(geometry={geometry!r}): expected an impl.cache.KVGeometry "
                "(ModelConfig.kv_geometry gives a model's)"
            )
        geometry.require_square("a block pool")
        self.num_blocks, self.block_size = int(num_blocks), int(block_size)
        self.geometry, self.grow = geometry, grow
        self.storage = BlockStorage(self.num_blocks, self.block_size, geometry)
        self._refs = RefCounter(self.num_blocks)
        self._free: list[BlockId] = list(range(self.num_blocks))  # a min-heap of free ids

    # ---- read side -----------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def block_nbytes(self) -> int:
        """Bytes of K, k_raw and V one block holds over all layers."""
        return 3 * self.geometry.n_layers * self.block_size * self.geometry.kv_dim * 4

    def refcount(self, block_id: BlockId) -> int:
        self._check_id(block_id)
        return self._refs.get(block_id)

    def free_ids(self) -> set[BlockId]:
        return set(self._free)

    # ---- verbs -------------------------------------------------------------
    def allocate(self) -> BlockId:
        """The lowest free block id, now with count 1. Raises PoolExhausted if none is free."""
        self.ensure_free(1)
        b = heapq.heappop(self._free)
        self._refs.incref(b)
        return b

    def ensure_free(self, n: int) -> None:
        """Make ``n`` blocks free (growing a grow=True pool) or raise PoolExhausted; else no change."""
        if n <= len(self._free):
            return
        if not self.grow:
            raise PoolExhausted(n, len(self._free), self)
        size = self.num_blocks
        while size - self.num_used < n:
            size *= 2
        self.storage.grow(size)
        self._refs.extend(size)
        for b in range(self.num_blocks, size):
            heapq.heappush(self._free, b)
        self.num_blocks = size

    def incref(self, block_id: BlockId) -> int:
        """One more holder of an allocated block; returns its new count."""
        self._check_allocated(block_id, "incref")
        return self._refs.incref(block_id)

    def decref(self, block_id: BlockId) -> int:
        """One holder fewer; at 0 the block is free again. Returns the new count."""
        self._check_allocated(block_id, "decref")
        n = self._refs.decref(block_id)
        if n == 0:
            heapq.heappush(self._free, block_id)
        return n

    def _check_id(self, b) -> None:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 0 <= b < self.num_blocks:
            raise CacheError(f"block_id={b!r} is not a block of this pool: use 0..{self.num_blocks - 1}")

    def _check_allocated(self, b, verb: str) -> None:
        self._check_id(b)
        if self._refs.get(b) == 0:
            raise CacheError(f"{verb}(block_id={b}): the block is free; only allocated blocks have holders")


class PagedSequence(KVStore):
    """One sequence's page table over a ``BlockPool``; implements ``impl.cache.KVStore``.

    ``blocks``: the page table, block ids in row order; ``len(seq)`` rows are
    in use, ``pos`` is 0..len-1. Appending is ``reserve(t)`` (allocates
    blocks, all-or-nothing) then ``write`` per layer, as the forward pass
    does. Verbs: ``fork``, ``truncate`` (drop rows >= n, releasing the blocks
    no longer used) and ``release`` (the end of the sequence: every block
    back, no further use). A released sequence raises SequenceReleased (a
    CacheError, a ValueError) on any use.
    """

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.blocks: list[BlockId] = []
        self._n = 0
        self._released = False
        self._gathered: tuple[int, int, np.ndarray, np.ndarray] | None = None  # (layer, rows, k, v)

    @classmethod
    def build(
        cls,
        geometry: KVGeometry,
        ropes: Sequence[RopeTable],
        window: list[Window],
        *,
        block_size: int | None = None,
        pool: BlockPool | None = None,
    ) -> PagedSequence:
        """``make_cache("paged", ...)``: an empty sequence for a model session.

        ``pool``: a BlockPool of the model's ``geometry``; several sessions
        may share one. When None, a private pool with grow=True (4 blocks,
        doubling on demand) so a session never runs out. ``block_size``:
        tokens per block (default 16, or the given pool's). ``window`` needs
        nothing from the cache (attention masks by pos), and ``ropes``
        nothing either (a paged sequence never renumbers). Raises CacheError
        for a pool of another geometry or block size.
        """
        if pool is None:
            pool = BlockPool(4, 16 if block_size is None else block_size, geometry, grow=True)
        elif not isinstance(pool, BlockPool):
            raise CacheError(f"pool={pool!r}: expected an impl.paged.BlockPool or None")
        if block_size is not None and block_size != pool.block_size:
            raise CacheError(
                f"block_size={block_size} differs from the pool's block_size={pool.block_size}; "
                "omit block_size when passing a pool"
            )
        if pool.geometry != geometry:
            raise CacheError(
                f"the pool's geometry={pool.geometry} does not match the model's {geometry}; "
                "build the BlockPool with the model's config.kv_geometry"
            )
        return cls(pool)

    # ---- read side ---------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @property
    def geometry(self) -> KVGeometry:
        return self.pool.geometry

    @property
    def released(self) -> bool:
        return self._released

    @property
    def pos(self) -> np.ndarray:
        """(n,) int64: 0..n-1 (a paged sequence never has gaps)."""
        return np.arange(self._n, dtype=np.int64)

    def view(self, layer: int, hi: int) -> tuple[np.ndarray, np.ndarray, int]:
        """K and V rows [0, hi) of ``layer`` as (hi, kv_dim) float32 arrays in row order, and base 0.

        Gathers the blocks of the page table once per layer and serves every
        ``hi`` of that layer's queries from the result until the sequence
        changes. When the table is a run of consecutive ids the result is a
        view of the pool's storage (no copy).

        NOTE: read-only, like KVCache.view: the arrays may alias the pool's
        storage, and a later write may change or a later view replace them.
        """
        self._check_live("view", f"layer={layer}, hi={hi}")
        g = self._gathered
        if g is None or g[0] != layer or g[1] < hi:
            k, v = self._gather(layer, self._n)
            g = self._gathered = (layer, self._n, k, v)
        return g[2][:hi], g[3][:hi], 0

    def _gather(self, layer: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """K and V rows [0, rows) of one layer, (rows, kv_dim) each."""
        bs, kv = self.pool.block_size, self.pool.geometry.kv_dim
        nb = -(-rows // bs)
        table = self.blocks[:nb]
        st = self.pool.storage
        if nb and table[-1] - table[0] == nb - 1 and table == list(range(table[0], table[0] + nb)):
            b0 = table[0]  # consecutive ids: one slice of storage, no copy
            k = st.k[layer, b0 : b0 + nb].reshape(nb * bs, kv)
            v = st.v[layer, b0 : b0 + nb].reshape(nb * bs, kv)
        else:
            idx = np.asarray(table, dtype=np.intp)
            k = st.k[layer].take(idx, axis=0).reshape(nb * bs, kv)  # (nb*bs, kv_dim), one copy
            v = st.v[layer].take(idx, axis=0).reshape(nb * bs, kv)
        return k[:rows], v[:rows]

    def rows(self, name: str) -> list[np.ndarray]:
        """Every layer's rows of ``name`` ("k", "k_raw" or "v"), each (n, kv_dim), freshly gathered."""
        self._check_live("rows", f"name={name!r}")
        if name not in ("k", "k_raw", "v"):
            raise CacheError(f"rows(name={name!r}): use 'k', 'k_raw' or 'v'")
        a = getattr(self.pool.storage, name)
        idx = np.asarray(self.blocks, dtype=np.intp)
        g = self.pool.geometry
        return [a[layer].take(idx, axis=0).reshape(-1, g.kv_dim)[: self._n] for layer in range(g.n_layers)]

    k = property(lambda self: self.rows("k"), doc="Post-RoPE keys per layer, each (n, kv_dim) (copies).")
    k_raw = property(lambda self: self.rows("k_raw"), doc="Pre-RoPE keys per layer, each (n, kv_dim) (copies).")
    v = property(lambda self: self.rows("v"), doc="Values per layer, each (n, kv_dim) (copies).")

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks this sequence's table references (shared ones counted in full)."""
        return len(self.blocks) * self.pool.block_nbytes

    # ---- write side (the KVStore protocol) -----------------------------------
    def reserve(self, t: int) -> np.ndarray:
        """Open ``t`` rows at the end; returns their positions (t,) int64.

        All-or-nothing: the blocks needed (new ones, plus a private copy of
        a shared last block) are counted first; if the pool cannot supply
        them, PoolExhausted says how many were needed and free, and neither
        the sequence nor the pool changes.
        """
        self._check_live("reserve", f"t={t}")
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0:
            raise CacheError(f"reserve(t={t!r}): t must be an int >= 0")
        bs, start = self.pool.block_size, self._n
        need_new = -(-(start + t) // bs) - len(self.blocks)
        cow = t > 0 and start % bs != 0 and self.pool.refcount(self.blocks[-1]) > 1
        self.pool.ensure_free(need_new + cow)
        if cow:
            self._make_writable(len(self.blocks) - 1)
        for _ in range(need_new):
            self.blocks.append(self.pool.allocate())
        self._n = start + t
        self._gathered = None
        return np.arange(start, start + t, dtype=np.int64)

    def _make_writable(self, i: int) -> None:
        """Copy-on-write: give this sequence its own copy of shared block ``blocks[i]``."""
        old = self.blocks[i]
        new = self.pool.allocate()
        self.pool.storage.copy_block(old, new)
        self.blocks[i] = new
        self.pool.decref(old)

    def write(self, layer: int, start: int, k_raw: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store rows [start, start + T) of ``layer``; inputs (T, kv_dim). Rows must be reserved."""
        self._check_live("write", f"layer={layer}, start={start}")
        t = k.shape[0]
        if not 0 <= start <= start + t <= self._n:
            raise CacheError(f"write(start={start}, T={t}): rows must lie in the reserved 0..{self._n}")
        bs, st = self.pool.block_size, self.pool.storage
        r = start
        while r < start + t:  # one slice assignment per block touched
            b, off = self.blocks[r // bs], r % bs
            m = min(bs - off, start + t - r)
            src = slice(r - start, r - start + m)
            st.k_raw[layer, b, off : off + m] = k_raw[src]
            st.k[layer, b, off : off + m] = k[src]
            st.v[layer, b, off : off + m] = v[src]
            r += m
        if self._gathered is not None and self._gathered[0] == layer:
            self._gathered = None

    def clone(self) -> PagedSequence:
        """KVStore.clone: a fork (blocks shared copy-on-write)."""
        return self.fork()

    # ---- verbs -------------------------------------------------------------
    def fork(self) -> PagedSequence:
        """A new sequence with the same rows: every block is shared (count + 1), none copied."""
        self._check_live("fork", "")
        for b in self.blocks:
            self.pool.incref(b)
        s = PagedSequence(self.pool)
        s.blocks, s._n = list(self.blocks), self._n
        return s

    def truncate(self, n: int) -> None:
        """Keep rows [0, n) (a rewind, or undoing a failed forward); blocks no longer used are decref'd.

        Raises CacheError if n is not an int in 0..len(self).
        """
        self._check_live("truncate", f"n={n}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= self._n:
            raise CacheError(
                f"truncate(n={n!r}): n must be an int in 0..{self._n} (the sequence length); "
                "a sequence can only be shortened"
            )
        keep = -(-int(n) // self.pool.block_size)
        for b in self.blocks[keep:]:
            self.pool.decref(b)
        del self.blocks[keep:]
        self._n = int(n)
        self._gathered = None

    def release(self) -> None:
        """Return every block to the pool; the sequence may not be used afterwards."""
        self._check_live("release", "")
        self.truncate(0)
        self._released = True

    def _check_live(self, verb: str, args: str) -> None:
        if self._released:
            raise SequenceReleased(
                f"{verb}({args}): released=True: this PagedSequence returned its blocks with release(); "
                "fork a live sequence or create a new PagedSequence(pool)"
            )
