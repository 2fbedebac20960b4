"""The cache factory: a design name -> an empty :class:`impl.cache.KVStore` of that design.

It sits beside the three designs (:mod:`impl.kv`, :mod:`impl.paged`,
:mod:`impl.ring_store`), so the protocol module (:mod:`impl.cache`) knows
none of them and nothing imports in a circle.
"""

from __future__ import annotations

from collections.abc import Sequence

from impl.cache import CACHE_DESIGNS, KVGeometry, KVStore, normalize_window
from impl.errors import CacheError
from impl.kv import KVCache
from impl.paged import PagedSequence
from impl.ring_store import RingKVStore
from impl.rope import RopeTable

DESIGNS = {"contiguous": KVCache, "paged": PagedSequence, "ring": RingKVStore}  # CACHE_DESIGNS, by name
assert tuple(DESIGNS) == CACHE_DESIGNS


def make_cache(design: str, geometry: KVGeometry, ropes: Sequence[RopeTable], window=None, **options) -> KVStore:
    """An empty cache of ``design`` ("contiguous", "paged" or "ring") for a model of ``geometry``.

    ``ropes``: the model's RoPE table per layer (the contiguous cache
    re-rotates survivors of an eviction; the ring takes its default
    ``max_seq_len`` from their length). ``window``: None, one W or one per
    layer (see ``normalize_window``). ``options`` go to the design's
    ``build``: ``capacity=`` for contiguous; ``block_size=``, ``pool=`` for paged;
    ``hint=``, ``precision=``, ``max_seq_len=``, ``overflow=`` for ring.
    Raises CacheError for an unknown design or a bad option value, TypeError
    for an option the design does not take.
    """
    cls = DESIGNS.get(design)
    if cls is None:
        raise CacheError(f"cache={design!r} is not a cache design; use one of {', '.join(CACHE_DESIGNS)}")
    return cls.build(geometry, ropes, normalize_window(window, geometry.n_layers), **options)
