"""ringcache: a sliding-window KV cache in ring buffers."""

from ringcache.cache import SlidingWindowCache

__all__ = ["SlidingWindowCache"]
