"""The ring KV cache: memory sized to the session, windows as rings, int8 storage.

Each layer holds its keys and values in ``slots`` rows addressed by
``slot = pos % slots``. A layer starts at the caller's ``hint`` and doubles on
demand up to its cap: a local (windowed) layer's cap is its window, after
which it wraps as a ring; a global layer's cap is ``max_seq_len``.

NOTE: the one invariant that makes growth safe. A ring only wraps once it is
at its cap, and at its cap it never grows; while it is shorter than its cap
every written position sits at slot == pos. So growing copies slots
[0, slots) to the same slots of the larger buffer and cannot scramble what is
written (``_RingLayer.grow`` asserts it). A growth that re-lays slots in ring
order (as a deque does) is right only for a wrapped ring and scrambles this
one (liar ``ring.grow_ignores_wrap``, card RING-T1).

Layout of one layer (``_RingLayer.buf``, slots on the first axis; D = head_dim,
Dv = v_head_dim of the cache's ``KVGeometry``):
    f32   k  (slots, Hkv * D) float32           v  (slots, Hkv * Dv) float32
    int8  kq (slots, Hkv, D) int8    ks (slots, Hkv) float32 scale
          vq (slots, Hkv, Dv) int8   vs (slots, Hkv) float32 scale
An int8 cache never allocates the float32 K/V buffers; reading dequantises
the rows asked for into transient float32 arrays (what attention multiplies).

``span(layer, pos)`` is the half-open range [lo, pos + 1) of positions a
query at ``pos`` may attend: the window for a local layer, everything for a
global one, clamped to what the ring holds so a layer never reads a slot as
its own past. A global layer that has run past ``max_seq_len`` is saturated
(``is_saturated``): it still answers, over its most recent ``max_seq_len``
positions, and says so.

``impl.ring_store.RingKVStore`` puts a ``RingCache`` behind the
``impl.cache.KVStore`` protocol a ``Session`` runs on
(``make_cache("ring", ...)``, ``Model.session(cache="ring")``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from impl.cache import KVGeometry, check_positive_int
from impl.errors import CacheError
from impl.quant import dequantize, quantize

Position = int  # absolute token position, 0-based
Slot = int  # row index inside one layer's ring buffer
Encoded = dict  # codec field name -> (T, ...) array: one precision's stored form of T rows

PRECISIONS = ("f32", "int8")


@dataclass(frozen=True)
class RingConfig:
    """Geometry and reach of a ring cache.

    ``geometry``: the model's K/V shape (``ModelConfig.kv_geometry``; the
    ring alone also holds value heads of another width, ``v_head_dim``).
    ``window``: the attention window of every local layer (None: no local
    layers). ``global_layers``: layers that attend to everything; their cap
    is ``max_seq_len``. Raises CacheError for a reach it cannot hold.
    """

    geometry: KVGeometry  # layers, KV heads and head widths
    max_seq_len: int  # the most positions any layer stores (a global layer's cap)
    window: int | None = None  # local layers' window in positions; None = every layer global
    global_layers: tuple[int, ...] = ()  # layers that attend to everything

    def __post_init__(self) -> None:
        if not isinstance(self.geometry, KVGeometry):
            raise CacheError(f"RingConfig(geometry={self.geometry!r}): expected an impl.cache.KVGeometry")
        check_positive_int("RingConfig", "max_seq_len", self.max_seq_len)
        if self.window is not None and (
            isinstance(self.window, bool) or not isinstance(self.window, (int, np.integer)) or self.window < 1
        ):
            raise CacheError(f"RingConfig(window={self.window!r}): use an int >= 1, or None for no local layers")
        n = self.geometry.n_layers
        gl = tuple(int(i) for i in self.global_layers)
        bad = [i for i in gl if not 0 <= i < n]
        if bad:
            raise CacheError(f"global_layers={list(gl)}: layer {bad[0]} is outside 0..{n - 1}")
        object.__setattr__(self, "global_layers", tuple(sorted(set(gl))))

    def is_global(self, layer: int) -> bool:
        return self.window is None or layer in self.global_layers

    def reach(self, layer: int) -> int | None:
        """How far back ``layer`` attends: its window, or None (everything) for a global layer."""
        return None if self.is_global(layer) else int(self.window)

    def cap(self, layer: int) -> int:
        """The most slots ``layer`` ever holds: its window (at most max_seq_len), or max_seq_len."""
        r = self.reach(layer)
        return self.max_seq_len if r is None else min(r, self.max_seq_len)


# ---- codecs: how one precision stores rows ------------------------------------------------


class Codec:
    """How one precision stores rows of one geometry: alloc(slots), encode(k, v), decode(rows)."""

    name: str

    def __init__(self, geometry: KVGeometry) -> None:
        self.geometry = geometry


class F32Codec(Codec):
    """Rows stored as given: k (T, kv_dim), v (T, v_dim) float32."""

    name = "f32"

    def alloc(self, slots: int) -> Encoded:
        g = self.geometry
        return {"k": np.zeros((slots, g.kv_dim), np.float32), "v": np.zeros((slots, g.v_dim), np.float32)}

    def encode(self, k: np.ndarray, v: np.ndarray) -> Encoded:
        return {"k": np.array(k, np.float32), "v": np.array(v, np.float32)}  # copies: write stages them (TGT-HANDLES)

    def decode(self, enc: Encoded) -> tuple[np.ndarray, np.ndarray]:
        return enc["k"], enc["v"]


class Int8Codec(Codec):
    """Per (row, KV head) symmetric int8: integers plus one float32 scale each (impl.quant)."""

    name = "int8"

    def alloc(self, slots: int) -> Encoded:
        g = self.geometry
        h = g.n_kv_heads
        return {
            "kq": np.zeros((slots, h, g.head_dim), np.int8),
            "ks": np.ones((slots, h), np.float32),
            "vq": np.zeros((slots, h, g.v_head_dim), np.int8),
            "vs": np.ones((slots, h), np.float32),
        }

    def encode(self, k: np.ndarray, v: np.ndarray) -> Encoded:
        g = self.geometry
        t = k.shape[0]
        kq, ks = quantize(np.asarray(k, np.float32).reshape(t, g.n_kv_heads, g.head_dim), 8)  # (T, Hkv, D), (T, Hkv)
        vq, vs = quantize(np.asarray(v, np.float32).reshape(t, g.n_kv_heads, g.v_head_dim), 8)
        return {"kq": kq, "ks": ks, "vq": vq, "vs": vs}

    def decode(self, enc: Encoded) -> tuple[np.ndarray, np.ndarray]:
        t = enc["kq"].shape[0]
        k = dequantize(enc["kq"], enc["ks"]).reshape(t, self.geometry.kv_dim)  # (T, Hkv*D) float32
        v = dequantize(enc["vq"], enc["vs"]).reshape(t, self.geometry.v_dim)
        return k, v


CODECS = {"f32": F32Codec, "int8": Int8Codec}


def take_rows(enc: Encoded, sel) -> Encoded:
    """The rows ``sel`` (a slice or an index array) of every field of ``enc``."""
    return {name: a[sel] for name, a in enc.items()}


# ---- one layer -------------------------------------------------------------------------------


class _RingLayer:
    """One layer's ring: buffers with ``slots`` rows, its cap, and its high-water mark.

    ``high`` is one past the highest position written; the ring holds
    positions [max(low, high - slots), high) (a gap write leaves skipped slots as they were: zeros
    before the ring wraps, rows of pos - slots after; sessions never skip). ``low`` only rises when a
    truncate drops positions whose slots had already been reused.
    """

    def __init__(self, codec, slots: int, cap: int) -> None:
        self.codec, self.cap = codec, cap
        self.slots = slots
        self.buf: Encoded = codec.alloc(slots)  # name -> (slots, ...)
        self.high = 0
        self.low = 0

    def slots_for(self, pos: Position) -> int:
        """Slots this layer has once ``pos`` is written (one growth step, as ``ensure`` takes)."""
        if pos < self.slots or self.slots >= self.cap:
            return self.slots
        return min(self.cap, max(2 * self.slots, pos + 1))

    def ensure(self, pos: Position) -> None:
        """Grow (doubling, at least to pos + 1, at most to cap) so ``pos`` is addressable."""
        want = self.slots_for(pos)
        if want != self.slots:
            self.grow(want)

    def grow(self, new_slots: int) -> None:
        # NOTE: valid only because a ring below its cap has never wrapped (slot == pos).
        assert self.high <= self.slots < new_slots <= self.cap, (self.high, self.slots, new_slots, self.cap)
        fresh = self.codec.alloc(new_slots)
        for name, a in self.buf.items():
            fresh[name][: self.slots] = a
        self.buf, self.slots = fresh, new_slots

    def held(self) -> tuple[Position, Position]:
        """Positions [lo, hi) the ring holds."""
        return max(self.low, self.high - self.slots, 0), self.high

    def truncate(self, n: Position) -> None:
        """Drop positions >= n; positions whose slots they reused are gone too."""
        if self.high > n:
            self.low = max(self.low, self.high - self.slots)
            self.high = max(n, self.low)

    def put(self, start: Position, enc: Encoded) -> None:
        """Store encoded rows for positions [start, start + T)."""
        t = next(iter(enc.values())).shape[0]
        if t == 0:
            return
        oldest = self.high - self.slots
        if start < oldest:
            raise CacheError(
                f"write at pos={start}: the ring already holds positions up to {self.high - 1} in {self.slots} "
                f"slots, so positions below {oldest} are gone; write positions in ascending order"
            )
        self.ensure(start + t - 1)
        if t > self.slots:  # only the last `slots` rows survive the wrap
            enc, start, t = take_rows(enc, slice(t - self.slots, t)), start + t - self.slots, self.slots
        idx = np.arange(start, start + t) % self.slots  # (T,) distinct slots
        for name, a in enc.items():
            self.buf[name][idx] = a
        self.high = max(self.high, start + t)

    def take(self, lo: Position, hi: Position) -> Encoded:
        """Encoded rows for positions [lo, hi) in position order (views when they do not wrap)."""
        h_lo, h_hi = self.held()
        if lo < h_lo or hi > h_hi or lo > hi:
            raise CacheError(f"read of positions {lo}..{hi - 1}: the ring holds {h_lo}..{h_hi - 1} only")
        s = lo % self.slots
        if s + (hi - lo) <= self.slots:
            return take_rows(self.buf, slice(s, s + hi - lo))
        return take_rows(self.buf, np.arange(lo, hi) % self.slots)

    def arrays(self) -> list[np.ndarray]:
        return list(self.buf.values())

    def clone(self) -> _RingLayer:
        c = _RingLayer.__new__(_RingLayer)
        c.codec, c.cap, c.slots, c.high, c.low = self.codec, self.cap, self.slots, self.high, self.low
        c.buf = {name: a.copy() for name, a in self.buf.items()}
        return c


# ---- the cache -------------------------------------------------------------------------------


class RingCache:
    """Decode-time K/V for one session: per-layer rings sized by ``hint``, f32 or int8.

    ``hint``: positions the session is expected to reach; it sizes the first
    allocation (at most each layer's cap). Exceeding it grows, never fails.
    ``precision``: "f32" (stores what it is given) or "int8" (per (slot, KV
    head) symmetric int8, see impl.quant). Fixed at construction because it
    decides the allocation. Raises CacheError for a bad hint or precision.
    """

    def __init__(self, config: RingConfig, hint: int = 64, precision: str = "f32") -> None:
        if precision not in CODECS:
            raise CacheError(f"precision={precision!r} is not allowed: use one of {', '.join(PRECISIONS)}")
        if isinstance(hint, bool) or not isinstance(hint, (int, np.integer)) or hint < 1:
            raise CacheError(f"hint={hint!r} is not allowed: use an int >= 1 (the positions you expect)")
        self.config, self.precision = config, precision
        self.codec = CODECS[precision](config.geometry)
        self.layers = [
            _RingLayer(self.codec, min(int(hint), config.cap(i)), config.cap(i))
            for i in range(config.geometry.n_layers)
        ]
        self._n = 0

    # ---- positions ----------------------------------------------------------------------
    def __len__(self) -> int:
        """Positions advanced so far: the next position the decode path writes."""
        return self._n

    def advance(self, n: int = 1) -> None:
        """Move on ``n`` positions; call once per decoded token after every layer wrote it."""
        self._n += n

    # ---- writes and reads ----------------------------------------------------------------
    def write_kv(self, layer: int, pos: Position, k: np.ndarray, v: np.ndarray) -> None:
        """Store one position's key (kv_dim,) and value (v_dim,) float32 in ``layer``."""
        self.write_rows(layer, pos, np.asarray(k, np.float32).reshape(1, -1), np.asarray(v, np.float32).reshape(1, -1))

    def write_rows(self, layer: int, start: Position, k: np.ndarray, v: np.ndarray) -> None:
        """Store positions [start, start + T): k (T, kv_dim), v (T, v_dim) float32."""
        g = self.config.geometry
        if k.shape[1:] != (g.kv_dim,) or v.shape[1:] != (g.v_dim,) or k.shape[0] != v.shape[0]:
            raise CacheError(f"write of k{k.shape}, v{v.shape}: expected (T, {g.kv_dim}) and (T, {g.v_dim})")
        self.layers[layer].put(start, self.codec.encode(k, v))

    def put_encoded(self, layer: int, start: Position, enc: Encoded) -> None:
        """Store rows already in this cache's stored form (no second quantisation)."""
        self.layers[layer].put(start, enc)

    def read(self, layer: int, lo: Position, hi: Position) -> tuple[np.ndarray, np.ndarray]:
        """K (hi - lo, kv_dim) and V (hi - lo, v_dim) float32 of positions [lo, hi), oldest first.

        int8 rows come back dequantised (integers times their own slot's
        scale). Raises CacheError if the ring no longer (or not yet) holds them.
        """
        return self.codec.decode(self.layers[layer].take(lo, hi))

    def span(self, layer: int, pos: Position) -> tuple[Position, Position]:
        """Half-open [lo, pos + 1): the positions ``layer`` may attend at ``pos`` once pos is written.

        The window for a local layer, 0.. for a global one, then clamped so
        that hi - lo <= the layer's slots: past its cap a ring never hands out
        a slot that now holds a later position (itself) as the past.
        """
        reach = self.config.reach(layer)
        hi = pos + 1
        lo = 0 if reach is None else max(0, hi - reach)
        lo = max(lo, hi - self.layers[layer].slots_for(pos))
        return lo, hi

    def truncate(self, n: Position) -> None:
        """Drop positions >= n in every layer (positions whose slots they reused are gone too)."""
        for L in self.layers:
            L.truncate(n)
        self._n = min(self._n, n)

    # ---- state -----------------------------------------------------------------------------
    def slots(self, layer: int) -> int:
        """Current ring capacity of ``layer`` in positions."""
        return self.layers[layer].slots

    def is_saturated(self) -> bool:
        """True once a layer that needs more history than its cap (a global layer) ran past the cap, and while
        it has lost a position it was given: a truncate below the cap does not bring back what was reused."""
        c = self.config
        for i, L in enumerate(self.layers):
            reach = c.reach(i)
            if (reach is None or reach > L.cap) and (max(self._n, L.high) > L.cap or L.low > 0):
                return True
        return False

    def arrays(self) -> list[np.ndarray]:
        """Every buffer the cache holds (what ``nbytes`` counts)."""
        return [a for L in self.layers for a in L.arrays()]

    @property
    def nbytes(self) -> int:
        """Bytes of every K/V (and scale) buffer held, at their current sizes."""
        return sum(a.nbytes for a in self.arrays())

    def clone(self) -> RingCache:
        """An independent deep copy."""
        c = RingCache.__new__(RingCache)
        c.config, c.precision, c.codec, c._n = self.config, self.precision, self.codec, self._n
        c.layers = [L.clone() for L in self.layers]
        return c


def smollm2_windows(window: int = 1024, n_layers: int = 30, every: int = 6) -> list[int | None]:
    """Per-layer windows for SmolLM2 run as a hybrid: W on most layers, every ``every``-th layer global.

    SmolLM2 has no native sliding layers; this is the configuration the RING
    cards use (layers 5, 11, 17, 23, 29 global for the defaults).
    """
    return [None if (i + 1) % every == 0 else window for i in range(n_layers)]


def reserved_bytes(config: RingConfig, precision: str = "f32") -> int:
    """What reserving every local window and the full context for global layers would cost."""
    per_row = sum(a.nbytes for a in CODECS[precision](config.geometry).alloc(1).values())
    return sum(config.cap(i) for i in range(config.geometry.n_layers)) * per_row


__all__: Sequence[str] = ["RingConfig", "RingCache", "smollm2_windows", "reserved_bytes"]
