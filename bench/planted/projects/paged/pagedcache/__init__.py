"""pagedcache: a paged KV cache over a refcounted block pool, with copy-on-write forks."""

from pagedcache.cache import BlockPool, PagedKVCache

__all__ = ["BlockPool", "PagedKVCache"]
