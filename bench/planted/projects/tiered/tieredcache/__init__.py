"""tieredcache: a two-tier KV cache, a small hot tier per cache over shared immutable pages."""

from tieredcache.cache import PageStore, TieredKVCache

__all__ = ["PageStore", "TieredKVCache"]
