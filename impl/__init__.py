"""impl: the implementation under proof.

A numpy SmolLM2-135M runtime (``impl.model``) and the KV-cache designs whose
claims the cards in ``obligations/`` check: contiguous (``impl.kv``), paged
and ring (later).
"""
