"""int8cache: a KV cache that stores K and V as int8 with one scale per row."""

from int8cache.cache import Int8KVCache, dequantize, quantize

__all__ = ["Int8KVCache", "dequantize", "quantize"]
