"""A ring cache behind the KVStore protocol: the store a ring session runs on.

``RingKVStore`` adapts an ``impl.ring.RingCache`` (per-layer rings, f32 or
int8) to ``impl.cache.KVStore``: rows are positions, ``pos`` is 0..len-1.
What it adds to the rings is the session's side: staging a chunk that
would wrap a ring until its forward is over, and the overflow policy for a
global layer that would run past ``max_seq_len`` (refuse with
``ContextFull``, or clamp and report ``is_saturated()``).
``RingKVStore.build`` makes one for a model (``make_cache("ring", ...)``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from impl.cache import KVGeometry, KVStore, Window
from impl.errors import CacheError
from impl.ring import Encoded, Position, RingCache, RingConfig, take_rows
from impl.rope import RopeTable

OVERFLOW = ("refuse", "clamp")


class ContextFull(CacheError):
    """The session would run a layer that needs all its history past ``max_seq_len``."""


class RingKVStore(KVStore):
    """A ``RingCache`` behind the ``impl.cache.KVStore`` protocol (rows == positions).

    The ring never evicts or renumbers, so it keeps no pre-RoPE keys:
    ``write`` ignores ``k_raw``. ``pos`` is computed (0..len-1), not held.

    NOTE: a multi-row chunk that would wrap a ring cannot be written in
    place: ``Llama.forward`` writes all T rows of a layer before its T
    queries attend, and row s would overwrite row s - cap that query s - 1
    still needs. Such a chunk is staged (in the cache's own precision, so a
    staged row reads back the same bits as a committed one) and committed
    to the ring by the next ``reserve`` (or ``nbytes``, ``clone``,
    ``is_saturated``), i.e. once the forward that wrote it has finished: a
    failed forward's ``truncate`` then drops it without having displaced a
    row the retry needs. Decode steps and chunks that end within the cap
    are written in place (a step at the cap reuses the slot of pos - cap,
    which no query at pos or later reads).

    ``overflow``: "refuse" raises ContextFull from ``reserve`` instead of
    letting a global layer run past ``max_seq_len``; "clamp" runs on over
    the most recent ``max_seq_len`` positions with ``is_saturated()`` true.
    """

    def __init__(self, ring: RingCache, overflow: str = "refuse") -> None:
        if overflow not in OVERFLOW:
            raise CacheError(f"overflow={overflow!r} is not allowed: use one of {', '.join(OVERFLOW)}")
        self.ring, self.overflow = ring, overflow
        self._n = 0
        self._staged: dict[int, tuple[Position, Encoded]] = {}  # layer -> (start, rows [start, n))

    @classmethod
    def build(
        cls,
        geometry: KVGeometry,
        ropes: Sequence[RopeTable],
        window: list[Window],
        *,
        hint: int = 64,
        precision: str = "f32",
        max_seq_len: int | None = None,
        overflow: str = "refuse",
    ) -> RingKVStore:
        """``make_cache("ring", ...)``: the ring store for a model session.

        ``window`` (the session's, one per layer): None marks a global layer;
        every windowed layer must share the same W (the ring's one window).
        ``max_seq_len`` defaults to the length of the model's RoPE tables
        (``ModelConfig.max_pos``); ``ropes`` are otherwise unused (the ring
        never renumbers, so it never re-rotates). Raises CacheError for a
        window list with two different windows.
        """
        local = sorted({w for w in window if w is not None})
        if len(local) > 1:
            raise CacheError(
                f"window={list(window)}: the ring takes one window for its local layers, got {local}; "
                "use one W (None for global layers)"
            )
        cfg = RingConfig(
            geometry,
            max_seq_len=int(max_seq_len or ropes[0].max_pos),
            window=local[0] if local else None,
            global_layers=tuple(i for i, w in enumerate(window) if w is None),
        )
        return cls(RingCache(cfg, hint=hint, precision=precision), overflow=overflow)

    def __len__(self) -> int:
        return self._n

    @property
    def geometry(self) -> KVGeometry:
        return self.ring.config.geometry

    @property
    def pos(self) -> np.ndarray:
        """(len,) int64: row i is position i."""
        return np.arange(self._n, dtype=np.int64)

    def _limit(self) -> int | None:
        """Positions the session may reach without saturating, or None if it can run on."""
        c = self.ring.config
        caps = [c.cap(i) for i in range(c.geometry.n_layers) if c.reach(i) is None or c.reach(i) > c.cap(i)]
        return min(caps) if caps else None

    def reserve(self, t: int) -> np.ndarray:
        self.flush()
        limit = self._limit()
        if self.overflow == "refuse" and limit is not None and self._n + t > limit:
            raise ContextFull(
                f"reserve(t={t}) at length {self._n}: the ring's max_seq_len={limit} would be exceeded and a "
                "global layer would lose history; start a new session, raise max_seq_len, or pass "
                'overflow="clamp" to run on over the most recent positions (is_saturated() then reports it)'
            )
        start, self._n = self._n, self._n + t
        return np.arange(start, self._n, dtype=np.int64)

    def truncate(self, n: int) -> None:
        """Keep rows [0, n). Raises CacheError unless n is an int in 0..len.

        Exact for a failed forward (its rows never displaced a row a later
        query needs). Dropping positions whose writes already reused the
        slots of older ones leaves the ring short of that history: a later
        ``view`` that needs it raises CacheError rather than reading a
        reused slot.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= self._n:
            raise CacheError(f"truncate(n={n!r}): n must be an int in 0..{self._n} (the cache length)")
        self.ring.truncate(n)
        for layer, (start, enc) in list(self._staged.items()):
            if n <= start:
                del self._staged[layer]
            else:
                self._staged[layer] = (start, take_rows(enc, slice(0, n - start)))
        self._n = int(n)

    def write(self, layer: int, start: int, k_raw: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        t = k.shape[0]
        if t == 1 or start + t <= self.ring.layers[layer].cap:
            self.ring.write_rows(layer, start, k, v)  # nothing a query of this chunk needs is overwritten
        else:
            self._staged[layer] = (start, self.ring.codec.encode(k, v))

    def view(self, layer: int, hi: int) -> tuple[np.ndarray, np.ndarray, int]:
        lo, _ = self.ring.span(layer, hi - 1)
        k, v = self._rows(layer, lo, hi)
        return k, v, lo

    def view_many(self, layer: int, his: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # NOTE: a chunk's queries each see their own span [lo_i, hi_i) (a window, a ring's slots); one read of
        # [lo_0, hi_last) holds every one of them with the values view(layer, hi_i) reads (the same slots
        # decoded by the same codec, row by row), so attention runs as one native call instead of one view
        # (a copy and decode of up to a window of rows) per query: a 270-token prefill on a 64 window read
        # 270 windows per layer.
        bases = np.array([self.ring.span(layer, int(hi) - 1)[0] for hi in his], dtype=np.int64)
        k, v = self._rows(layer, int(bases.min()), int(his[-1]))
        return k, v, bases

    def _rows(self, layer: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """K, V of positions [lo, hi): committed rows from the ring, staged ones decoded from the stage."""
        staged = self._staged.get(layer)
        if staged is None:
            return self.ring.read(layer, lo, hi)
        s0, enc = staged
        parts = []
        if lo < s0:
            parts.append(self.ring.read(layer, lo, s0))
        parts.append(self.ring.codec.decode(take_rows(enc, slice(max(lo, s0) - s0, hi - s0))))
        k = np.concatenate([p[0] for p in parts])  # fresh arrays: a flush may reuse the slots below them
        v = np.concatenate([p[1] for p in parts])
        return k, v

    def _flush_layer(self, layer: int) -> None:
        start, enc = self._staged.pop(layer)
        self.ring.put_encoded(layer, start, enc)

    def flush(self) -> None:
        """Commit staged rows to the rings and advance the ring to the store's length."""
        for layer in list(self._staged):
            self._flush_layer(layer)
        if len(self.ring) < self._n:
            self.ring.advance(self._n - len(self.ring))

    def clone(self) -> RingKVStore:
        self.flush()
        c = RingKVStore(self.ring.clone(), self.overflow)
        c._n = self._n
        return c

    # ---- the ring's own questions, after committing ------------------------------------------
    def is_saturated(self) -> bool:
        self.flush()
        return self.ring.is_saturated()

    @property
    def nbytes(self) -> int:
        """Bytes held: the rings' buffers at their current sizes (nothing is staged after a flush)."""
        self.flush()
        return self.ring.nbytes
