"""impl's own caches as targets, and the list-of-rows reference target that known answers come from.

impl's stores hold one sequence each, rows (n, H * D) per layer (head h in
columns [h * D, (h + 1) * D)); a handle of batch B holds B stores, so the
batch verbs are the handle's: ``reorder``/``select`` keep the stores named
(a store named twice is cloned for its second use, never shared), ``repeat``
clones each store ``r - 1`` times. A paged handle's B sequences share one
``BlockPool``, so a clone is impl's copy-on-write ``fork`` and a dropped
element is ``release``d. What a handle hands attention is what
``impl.attention.causal_attention`` reads: ``view`` (or ``view_many`` when the
store offers it, as the ring does) from the first query's lowest visible row,
that row found by ``impl.attention.window_lo`` from the store's ``pos``.

``mask_sizes(q)`` has no counterpart in impl (attention works per query from
``pos``); the adapter states it from the definition of a window (a query at
position p sees positions >= p - W + 1), so the window witness checks impl's
views against that definition.

The reference target (``reference``) is a list of rows in numpy and the
definition of each verb, nothing more: the known answer every witness
compares a target with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from harness.targets import blockown, seqown
from harness.targets.protocol import (
    Geometry,
    Numerics,
    Occupancy,
    Rows,
    Target,
    Visible,
    check_rows,
    not_capable,
)
from impl import attention
from impl.cache import KVGeometry, KVStore
from impl.designs import make_cache
from impl.paged import BlockPool, PagedSequence
from impl.rope import RopeTable

# ---------------------------------------------------------------- the batch verbs' index rules


def check_index(verb: str, idx: Sequence[int], batch: int, exact_len: bool) -> list[int]:
    """``idx`` as a list of ints in 0..batch-1 (of length batch when ``exact_len``); ValueError otherwise."""
    out = []
    for i in idx:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < batch:
            raise ValueError(f"{verb}(idx={list(idx)!r}): each index must be an int in 0..{batch - 1}")
        out.append(int(i))
    if not out or (exact_len and len(out) != batch):
        want = f"exactly {batch}" if exact_len else "at least 1"
        raise ValueError(f"{verb}(idx={list(idx)!r}): {want} indices")
    return out


def check_repeats(r: int) -> int:
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 1:
        raise ValueError(f"repeat(r={r!r}): r must be an int >= 1")
    return int(r)


def first_visible(n: int, window: int | None) -> int:
    """The lowest position a query at position n may see: max(0, n - W + 1), or 0 without a window."""
    return 0 if window is None else max(0, n - window + 1)


# ---------------------------------------------------------------- the reference: a list of rows


class ReferenceHandle:
    """K and V as (L, B, H, n, D) float32 arrays; every verb is its definition on them."""

    trace = None

    def __init__(self, target: Target, geometry: Geometry, batch: int, window: int | None) -> None:
        self.target, self.geometry, self.batch, self.window = target, geometry, batch, window
        empty = np.zeros(geometry.rows_shape(batch, 0), np.float32)
        self.k, self.v = empty, empty.copy()

    def release(self) -> None:
        """Nothing is shared: the rows go with the handle."""

    def __len__(self) -> int:
        return int(self.k.shape[3])

    def mask_sizes(self, query_len: int) -> tuple[int, int]:
        lo = first_visible(len(self), self.window)
        return len(self) + query_len - lo, lo

    def append(self, k: np.ndarray, v: np.ndarray) -> Visible:
        check_rows(self.geometry, self.batch, k, v)
        length, lo = self.mask_sizes(k.shape[3])
        self.k = np.concatenate([self.k, np.asarray(k, np.float32)], axis=3)
        self.v = np.concatenate([self.v, np.asarray(v, np.float32)], axis=3)
        return Visible(self.k[:, :, :, lo:].copy(), self.v[:, :, :, lo:].copy(), np.arange(lo, len(self)), length, lo)

    def read(self) -> Rows:
        return Rows(self.k.copy(), self.v.copy(), np.arange(len(self), dtype=np.int64))

    def truncate(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= len(self):
            raise ValueError(f"truncate(n={n!r}): n must be an int in 0..{len(self)}")
        self.k, self.v = self.k[:, :, :, : int(n)].copy(), self.v[:, :, :, : int(n)].copy()

    def fork(self) -> ReferenceHandle:
        h = ReferenceHandle(self.target, self.geometry, self.batch, self.window)
        h.k, h.v = self.k.copy(), self.v.copy()
        return h

    def _take(self, idx: list[int]) -> None:
        self.k, self.v, self.batch = self.k[:, idx].copy(), self.v[:, idx].copy(), len(idx)

    def reorder(self, idx: Sequence[int]) -> None:
        self._take(check_index("reorder", idx, self.batch, exact_len=True))

    def select(self, idx: Sequence[int]) -> None:
        self._take(check_index("select", idx, self.batch, exact_len=False))

    def repeat(self, r: int) -> None:
        r = check_repeats(r)
        self._take([b for b in range(self.batch) for _ in range(r)])


# ---------------------------------------------------------------- impl's stores


def to_store_rows(a: np.ndarray) -> np.ndarray:
    """(H, T, D) -> (T, H * D): one batch element's rows of one layer in impl's layout."""
    h, t, d = a.shape
    return np.ascontiguousarray(a.transpose(1, 0, 2).reshape(t, h * d), dtype=np.float32)


def from_store_rows(rows: np.ndarray, h: int, d: int) -> np.ndarray:
    """(n, H * D) -> (H, n, D), a copy."""
    n = rows.shape[0]
    return np.array(rows.reshape(n, h, d).transpose(1, 0, 2), dtype=np.float32)


class StoresHandle:
    """B impl stores (one per batch element) behind the target verbs.

    ``clone_store`` makes an independent copy of one store (``KVStore.clone``;
    a paged sequence's is a copy-on-write fork); ``release_store`` ends a
    dropped one (a paged sequence returns its blocks). ``pool``: the block
    pool the stores share, whose blocks in use are the handle's occupancy
    (None for the designs that share nothing).
    """

    trace = None

    def __init__(
        self,
        target: Target,
        geometry: Geometry,
        window: int | None,
        stores: list[KVStore],
        clone_store: Callable[[KVStore], KVStore],
        release_store: Callable[[KVStore], None],
        pool: BlockPool | None = None,
    ) -> None:
        self.target, self.geometry, self.window = target, geometry, window
        self.stores, self.clone_store, self.release_store, self.pool = stores, clone_store, release_store, pool

    def occupancy(self) -> int:
        """The shared pool's blocks in use (BlockPool.num_used)."""
        if self.pool is None:
            raise not_capable(self.target, "occupancy", "occupancy")
        return int(self.pool.num_used)

    def release(self) -> None:
        """Release every batch element's store (a paged sequence returns its blocks)."""
        for s in self.stores:
            self.release_store(s)
        self.stores = []

    @property
    def batch(self) -> int:
        return len(self.stores)

    def __len__(self) -> int:
        return len(self.stores[0])

    def mask_sizes(self, query_len: int) -> tuple[int, int]:
        lo = first_visible(len(self), self.window)
        return len(self) + query_len - lo, lo

    def append(self, k: np.ndarray, v: np.ndarray) -> Visible:
        g = self.geometry
        t = check_rows(g, self.batch, k, v)
        length, offset = self.mask_sizes(t)
        n0 = len(self)
        for b, s in enumerate(self.stores):
            start = len(s)
            s.reserve(t)
            for layer in range(g.n_layers):
                kr, vr = to_store_rows(k[layer, b]), to_store_rows(v[layer, b])
                s.write(layer, start, kr, kr, vr)  # k_raw = k: the protocol carries no RoPE
        his = np.arange(n0 + 1, n0 + t + 1, dtype=np.int64)  # one past each query's own row
        per_layer, lo_seen = [], None
        for layer in range(g.n_layers):
            per_batch = []
            for s in self.stores:
                kk, vv, lo = self.visible_rows(s, layer, his)
                lo_seen = lo if lo_seen is None else lo_seen
                if lo != lo_seen:
                    raise AssertionError(f"{self.target.name}: batch elements see different first rows")
                per_batch.append((kk, vv))
            per_layer.append(per_batch)
        kv = np.stack([np.stack([from_store_rows(kk, g.n_kv_heads, g.head_dim) for kk, _ in pb]) for pb in per_layer])
        vv = np.stack([np.stack([from_store_rows(v_, g.n_kv_heads, g.head_dim) for _, v_ in pb]) for pb in per_layer])
        pos = np.asarray(self.stores[0].pos)[lo_seen : n0 + t].copy()
        return Visible(kv, vv, pos, length, offset)

    def visible_rows(self, s: KVStore, layer: int, his: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Rows [lo, his[-1]) of ``s`` as attention reads them for queries ending at ``his``, and lo.

        lo is the first query's lowest visible row: its window row (window_lo over ``pos``), or the first
        row the store still holds for it (a ring's base), whichever is higher, as causal_attention takes it.
        """
        pos = s.pos
        lo_w = attention.window_lo(pos, int(his[0]), self.window)  # looked up per call: a liar may patch it
        view_many = getattr(s, "view_many", None)
        if view_many is not None:
            kk, vv, bases = view_many(layer, his)
            b0 = int(bases.min())
            lo = max(lo_w, int(bases[0]))
            return kk[lo - b0 :], vv[lo - b0 :], lo
        kk, vv, base = s.view(layer, int(his[-1]))
        lo = max(lo_w, base)
        return kk[lo - base :], vv[lo - base :], lo

    def read(self) -> Rows:
        g = self.geometry
        n = len(self)
        ks, vs, base0 = [], [], None
        for layer in range(g.n_layers):
            kb, vb = [], []
            for s in self.stores:
                kk, vv, base = s.view(layer, n) if n else (np.zeros((0, g.n_kv_heads * g.head_dim)),) * 2 + (0,)
                base0 = base if base0 is None else base0
                kb.append(from_store_rows(kk, g.n_kv_heads, g.head_dim))
                vb.append(from_store_rows(vv, g.n_kv_heads, g.head_dim))
            ks.append(np.stack(kb))
            vs.append(np.stack(vb))
        return Rows(np.stack(ks), np.stack(vs), np.asarray(self.stores[0].pos)[base0:n].copy())

    def truncate(self, n: int) -> None:
        for s in self.stores:
            s.truncate(n)

    def _copy(self, stores: list[KVStore]) -> list[KVStore]:
        return [self.clone_store(s) for s in stores]

    def fork(self) -> StoresHandle:
        stores = self._copy(self.stores)
        return StoresHandle(
            self.target, self.geometry, self.window, stores, self.clone_store, self.release_store, self.pool
        )

    def _keep(self, idx: list[int]) -> None:
        """Batch element i becomes old element idx[i]; a store named again is cloned, one not named released."""
        used: set[int] = set()
        new = []
        for i in idx:
            new.append(self.stores[i] if i not in used else self.clone_store(self.stores[i]))
            used.add(i)
        for i, s in enumerate(self.stores):
            if i not in used:
                self.release_store(s)
        self.stores = new

    def reorder(self, idx: Sequence[int]) -> None:
        self._keep(check_index("reorder", idx, self.batch, exact_len=True))

    def select(self, idx: Sequence[int]) -> None:
        self._keep(check_index("select", idx, self.batch, exact_len=False))

    def repeat(self, r: int) -> None:
        r = check_repeats(r)
        self._keep([b for b in range(self.batch) for _ in range(r)])


# ---------------------------------------------------------------- builders


def ropes_for(geometry: Geometry, capacity: int) -> list[RopeTable]:
    return [RopeTable(10000.0, geometry.head_dim, capacity + 1)] * geometry.n_layers


def kv_geometry(geometry: Geometry) -> KVGeometry:
    return KVGeometry(geometry.n_layers, geometry.n_kv_heads, geometry.head_dim)


def no_release(store: KVStore) -> None:
    """A dropped contiguous or ring store holds nothing shared: the garbage collector takes it."""


def clone(store: KVStore) -> KVStore:
    return store.clone()


def build_design(name: str, design: str, **options) -> Callable:
    """The builder of target ``name``: ``batch`` fresh stores of impl's ``design`` (make_cache with ``options``)."""

    def build(geometry: Geometry, batch: int, window: int | None, capacity: int, trace=None) -> StoresHandle:
        g = kv_geometry(geometry)
        ropes = ropes_for(geometry, capacity)
        extra = dict(options)
        if design == "ring":
            extra["max_seq_len"] = capacity
        else:  # where the storage starts: appends past it grow it (the capability "grow")
            extra["capacity"] = capacity
        stores = [make_cache(design, g, ropes, window, **extra) for _ in range(batch)]
        return StoresHandle(TARGETS[name], geometry, window, stores, clone, no_release)

    return build


def build_paged(geometry: Geometry, batch: int, window: int | None, capacity: int, trace=None) -> StoresHandle:
    pool = BlockPool(2, 3, kv_geometry(geometry), grow=True)  # 3-row blocks: appends cross block edges
    stores: list[KVStore] = [PagedSequence(pool) for _ in range(batch)]
    return StoresHandle(TARGETS["impl.paged"], geometry, window, stores, paged_fork, paged_release, pool)


def paged_fork(store: KVStore) -> KVStore:
    assert isinstance(store, PagedSequence)
    return store.fork()


def paged_release(store: KVStore) -> None:
    assert isinstance(store, PagedSequence)
    store.release()


def build_reference(geometry: Geometry, batch: int, window: int | None, capacity: int, trace=None) -> ReferenceHandle:
    return ReferenceHandle(TARGETS["reference"], geometry, batch, window)


def int8_bound(calibration: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """|read - x| per element of impl's int8 ring: scale / 2 of its (row, head), plus float32 rounding.

    impl.quant's scheme: per (position, KV head) vector, scale = absmax / 127 and
    q = rint(x / scale), read back as q * scale in float32. rint is off by at most
    1/2; x / scale and q * scale each round once in float32 (relative 2**-24), so
    |q * scale - x| <= scale / 2 * (1 + 2**-15) + 2**-23 * |x|. Per-vector scales do
    not depend on the other rows, so ``calibration`` is not needed.
    """
    x = np.abs(rows.astype(np.float64))
    scale = x.max(axis=-1, keepdims=True) / 127.0  # (L, B, H, N, 1): one scale per (position, head)
    return scale / 2 * (1 + 2.0**-15) + 2.0**-23 * x


_ALL = frozenset({"append", "read", "truncate", "fork", "reorder", "select", "repeat", "window", "mask"})

TARGETS: dict[str, Target] = {}


def _own(
    name: str, title: str, build: Callable, refs: tuple[str, ...], numerics: Numerics, extra=(), occupancy=None
) -> None:
    caps = _ALL | frozenset(extra)
    TARGETS[name] = Target(name, title, "kvproof", caps, numerics, refs, build, own=True, occupancy=occupancy)


_own(
    "reference",
    "a list of rows in numpy: each verb is its definition (the known answers)",
    build_reference,
    ("harness/targets/own.py::ReferenceHandle",),
    Numerics.exact(),
    extra=("grow",),
)
_own(
    "impl.contiguous",
    "impl.kv.KVCache: one store per batch element, windows masked from pos",
    build_design("impl.contiguous", "contiguous"),
    (
        "impl/kv.py::KVCache.reserve",
        "impl/kv.py::KVCache.write",
        "impl/kv.py::KVCache.view",
        "impl/kv.py::KVCache.truncate",
        "impl/kv.py::KVCache.clone",
        "impl/attention.py::window_lo",
    ),
    Numerics.exact(),
    extra=("grow",),  # KVCache doubles its storage past the capacity it starts with
)
_own(
    "impl.paged",
    "impl.paged.PagedSequence: B sequences over one BlockPool of 3-row blocks, clones by copy-on-write fork",
    build_paged,
    (
        "impl/paged.py::PagedSequence.reserve",
        "impl/paged.py::PagedSequence.write",
        "impl/paged.py::PagedSequence.view",
        "impl/paged.py::PagedSequence.truncate",
        "impl/paged.py::PagedSequence.fork",
        "impl/paged.py::PagedSequence.release",
        "impl/paged.py::BlockPool.num_used",
        "impl/attention.py::window_lo",
    ),
    Numerics.exact(),
    extra=("grow", "occupancy"),  # the pool grows (grow=True); its blocks in use are the occupancy
    occupancy=Occupancy("blocks", block=3),
)
_own(
    "impl.ring",
    "impl.ring_store.RingKVStore (f32): rings of a window's slots, grown from a hint of 2",
    build_design("impl.ring", "ring", hint=2),
    (
        "impl/ring_store.py::RingKVStore.write",
        "impl/ring_store.py::RingKVStore.view",
        "impl/ring_store.py::RingKVStore.view_many",
        "impl/ring_store.py::RingKVStore.truncate",
        "impl/ring_store.py::RingKVStore.clone",
        "impl/ring.py::RingCache.span",
    ),
    Numerics.exact(),
)
_own(
    "impl.ring-int8",
    "impl.ring_store.RingKVStore (int8): per (position, KV head) symmetric int8",
    build_design("impl.ring-int8", "ring", hint=2, precision="int8"),
    (
        "impl/ring_store.py::RingKVStore.write",
        "impl/ring_store.py::RingKVStore.view",
        "impl/ring.py::Int8Codec.encode",
        "impl/quant.py::quantize",
        "impl/quant.py::dequantize",
    ),
    Numerics.lossy(
        lambda calibration, rows: int8_bound(calibration, rows),  # looked up per call: a mutant of it applies
        "impl.quant: per (position, KV head) scale = absmax / 127, q = rint(x / scale), read as q * scale: "
        "|error| <= scale / 2 plus two float32 roundings (int8_bound)",
    ),
    extra=("quantized",),
)

TARGETS.update(blockown.TARGETS)  # the block managers (harness/targets/blocks.py): impl's paged pool, reference.blocks
TARGETS.update(seqown.TARGETS)  # the sequence cache (harness/targets/sequences.py): reference.sequences
OWN = tuple(TARGETS)  # the default selection, in this order
