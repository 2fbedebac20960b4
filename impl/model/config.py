"""ModelConfig: one flat dataclass describing a llama-family decoder."""

from __future__ import annotations

from dataclasses import dataclass

from impl.cache import KVGeometry


@dataclass(frozen=True)
class ModelConfig:
    n_layers: int = 30  # decoder blocks
    hidden: int = 576  # residual stream width
    n_heads: int = 9  # query heads
    n_kv_heads: int = 3  # key/value heads (grouped-query attention)
    head_dim: int = 64  # per-head width; hidden == n_heads * head_dim for SmolLM2
    ffn: int = 1536  # SwiGLU inner width
    vocab: int = 49152  # tokens; the output head is tied to the embedding
    rope_theta: float | tuple[float, ...] = 100000.0  # one base, or one per layer
    rms_eps: float = 1e-5  # RMSNorm epsilon (the GGUF stores 9.9999997e-06)
    max_pos: int = 8192  # RoPE table length = longest context we accept
    bos_id: int | None = 1  # recorded only: like Hugging Face, we never add a BOS
    eos_id: int | None = 2

    def __post_init__(self) -> None:
        assert self.n_heads % self.n_kv_heads == 0, "query heads must group evenly over KV heads"
        assert self.head_dim % 2 == 0, "half-split RoPE needs an even head_dim"
        if isinstance(self.rope_theta, tuple):
            assert len(self.rope_theta) == self.n_layers, "one RoPE theta per layer"

    @property
    def kv_dim(self) -> int:
        """Width of one position's K (or V) row in the cache: n_kv_heads * head_dim."""
        return self.n_kv_heads * self.head_dim

    @property
    def kv_geometry(self) -> KVGeometry:
        """The K/V shape every cache design is sized by (n_layers, n_kv_heads, head_dim)."""
        return KVGeometry(self.n_layers, self.n_kv_heads, self.head_dim)

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads

    def theta(self, layer: int) -> float:
        """RoPE base of one layer."""
        return self.rope_theta[layer] if isinstance(self.rope_theta, tuple) else self.rope_theta
