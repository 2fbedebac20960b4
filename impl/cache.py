"""What every KV-cache design shares: its geometry, the KVStore protocol, one builder.

Three designs implement ``KVStore``: contiguous (``impl.kv.KVCache``), paged
(``impl.paged.PagedSequence`` over a ``BlockPool``) and ring
(``impl.ring_store.RingKVStore`` over an ``impl.ring.RingCache``). They share one vocabulary:

    geometry          KVGeometry(n_layers, n_kv_heads, head_dim): what one
                      position's K/V is, the words ModelConfig uses
    len(store)        rows held; rows are positions in append order
    store.pos         (len,) int64 absolute positions, ascending
    reserve(t)        open t rows at the end (then ``write`` per layer)
    truncate(n)       keep rows [0, n): the one verb that drops positions
                      (a rewind, or undoing a failed forward)
    view(layer, hi)   K, V of rows [base, hi): ranges are half-open everywhere
    clone()           an independent copy
    nbytes            bytes the store holds (each design says what it counts)

``make_cache(design, geometry, ropes, window, **options)`` builds any of them
(``Session`` and ``Model.session`` call it). A paged sequence also has
``release()``: not a way to drop positions but the end of its life (every
block back to the pool; any later use raises), like vLLM's ``free``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from impl.errors import CacheError

Window = int | None  # a layer's attention window in positions; None = the layer sees everything

CACHE_DESIGNS = ("contiguous", "paged", "ring")


def check_positive_int(owner: str, name: str, val) -> None:
    """Raise CacheError naming ``owner(name=val)`` unless val is an int >= 1 (bools are not ints here)."""
    if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
        raise CacheError(f"{owner}({name}={val!r}): must be an int >= 1")


@dataclass(frozen=True)
class KVGeometry:
    """The shape of one position's K/V across the model; every cache design is sized by it.

    ``ModelConfig.kv_geometry`` gives a model's. Raises CacheError for a
    field that is not an int >= 1.
    """

    n_layers: int  # decoder blocks with a KV cache
    n_kv_heads: int  # key/value heads per layer (grouped-query attention)
    head_dim: int  # width of one key head (and of one value head, unless v_head_dim says otherwise)
    v_head_dim: int | None = None  # a value head's width if it differs (only the ring holds such K/V); None = head_dim

    def __post_init__(self) -> None:
        if self.v_head_dim is None:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        for name in ("n_layers", "n_kv_heads", "head_dim", "v_head_dim"):
            check_positive_int("KVGeometry", name, getattr(self, name))

    @property
    def kv_dim(self) -> int:
        """Width of one position's key row in one layer: n_kv_heads * head_dim."""
        return self.n_kv_heads * self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of one position's value row in one layer: n_kv_heads * v_head_dim (= kv_dim by default)."""
        return self.n_kv_heads * self.v_head_dim

    def require_square(self, design: str) -> None:
        """Raise CacheError unless K and V rows have one width (``design`` stores them alike)."""
        if self.v_head_dim != self.head_dim:
            raise CacheError(
                f"{design} stores K and V rows of one width: v_head_dim={self.v_head_dim} differs "
                f"from head_dim={self.head_dim}; use the ring cache, or v_head_dim=None"
            )


class KVStore(Protocol):
    """What the forward pass, attention and ``Session`` need from any KV cache design.

    Rows are cache entries in the order they were appended; ``pos[i]`` is
    row i's absolute RoPE position. Every range is half-open.
    """

    geometry: KVGeometry

    def __len__(self) -> int:
        """Rows held."""

    @property
    def pos(self) -> np.ndarray:
        """(len,) int64 absolute positions, ascending."""

    @property
    def nbytes(self) -> int:
        """Bytes of storage this cache holds (the design's docstring says exactly what it counts)."""

    def reserve(self, t: int) -> np.ndarray:
        """Open t rows at the end; return their positions (t,) int64."""

    def write(self, layer: int, start: int, k_raw: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store rows [start, start+T) of one layer; k_raw, k (T, kv_dim), v (T, v_dim) float32."""

    def view(self, layer: int, hi: int) -> tuple[np.ndarray, np.ndarray, int]:
        """K, V of rows [base, hi) in row order as (hi - base, kv_dim) float32, and base.

        base is 0 when every row is held; a cache that drops old rows (a
        ring) returns the first row it still has. Such a cache may also
        offer ``view_many(layer, his) -> (K, V, bases)``: what ``view(layer, hi)``
        gives each of several queries (``his`` ascending), as one K/V holding
        rows [min(bases), his[-1]) with the same values, so a chunk's
        attention is one native call (impl.attention.causal_attention; else one view per query).
        """

    def truncate(self, n: int) -> None:
        """Keep rows [0, n), dropping every position >= n (a rewind, or undoing a failed forward).

        Raises CacheError unless n is an int in 0..len.
        """

    def clone(self) -> KVStore:
        """An independent copy (a paged cache may share blocks copy-on-write)."""


def normalize_window(window, n_layers: int) -> list[Window]:
    """None, one W for every layer, or a per-layer sequence -> list of per-layer W.

    Raises CacheError for anything else (a W < 1, a list of the wrong length).
    """
    if window is None or isinstance(window, (int, np.integer, float)):
        ws = [window] * n_layers
    elif not isinstance(window, (list, tuple)):
        raise CacheError(f"window={window!r} is not allowed: use None, an int >= 1, or a list with one per layer")
    else:
        ws = list(window)
        if len(ws) != n_layers:
            raise CacheError(
                f"window has {len(ws)} entries but the model has {n_layers} layers; "
                "give one int for all layers or exactly one per layer (None = no window)"
            )
    for i, w in enumerate(ws):
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1):
            raise CacheError(f"window={w!r} (layer {i}) is not allowed: use an int >= 1 or None")
    return [None if w is None else int(w) for w in ws]
