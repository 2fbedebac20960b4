"""contigcache: a contiguous KV cache for a batch of sequences of equal length."""

from contigcache.cache import ContigKVCache

__all__ = ["ContigKVCache"]
