"""The SmolLM2 (llama) forward pass in numpy, top to bottom.

x = embed[ids]
for each layer:
    h = rmsnorm(x) ; q, k_raw, v = h @ Wqkv ; q, k = rope(q), rope(k_raw)
    cache <- (k_raw, k, v) ; x += attention(q, cache) @ Wo
    h = rmsnorm(x) ; x += (silu(h @ Wgate) * (h @ Wup)) @ Wdown
logits = rmsnorm(x) @ embed.T            (tied output head)

float32 throughout; every weight product goes through impl.linear.Linear,
so each row is computed the same way however many rows are fed at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from impl import kernels
from impl.attention import causal_attention
from impl.linear import Linear
from impl.model.config import ModelConfig
from impl.rope import RopeTable


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """(T, H) -> (T, H): x / sqrt(mean(x^2) + eps) * weight, per row.

    With the C kernel loaded: ``kv_rmsnorm`` (squares summed by fma in vector lanes, one fixed
    order); otherwise numpy's pairwise mean. The two differ in the last bits; each is per row.
    """
    k = kernels.load()
    if k is not None and x.ndim == 2 and x.dtype == np.float32 and x.strides[1] == 4 and weight.dtype == np.float32:
        return k.rmsnorm(x, weight, eps)
    var = np.mean(x * x, axis=-1, keepdims=True)  # (T, 1)
    return (x * (np.float32(1.0) / np.sqrt(var + np.float32(eps)))) * weight


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x) in float32, element by element.

    With the C kernel loaded (impl.kernels): ``kv_silu``, exp(-|x|) by the kernel's exp and
    x / (1 + e) or (x * e) / (1 + e) by sign, threaded over rows (numpy's float32 exp costs
    about 4 ns an element on AVX2 machines, ~0.1 s of a 512-token prefill). Otherwise numpy's
    x / (1 + exp(-x)). The two give different last bits; each is elementwise, so a row's bits
    never depend on the other rows.
    """
    k = kernels.load()
    x = np.asarray(x, dtype=np.float32)
    if k is not None and x.ndim in (1, 2) and x.size and x.strides[-1] == 4:
        return k.silu(x)
    return x / (np.float32(1.0) + np.exp(-x))


def swiglu(gu: np.ndarray, ffn: int) -> np.ndarray:
    """silu(gate) * up for gu = [gate | up] (T, 2 ffn): the same float32 operations, element by element, as
    ``silu(gu[:, :ffn]) * gu[:, ffn:]`` (so the same bits), in one pass (the kernel) or one scratch array
    instead of five temporaries (numpy)."""
    g, u = gu[:, :ffn], gu[:, ffn:]
    k = kernels.load()
    if k is not None and gu.dtype == np.float32 and gu.strides[1] == 4:
        return k.silu(g, u)
    t = np.negative(g)
    np.exp(t, out=t)
    t += np.float32(1.0)
    np.divide(g, t, out=t)
    t *= u
    return t


@dataclass
class Layer:
    attn_norm: np.ndarray  # (hidden,)
    wqkv: Linear  # hidden -> q_dim + 2 * kv_dim (q, k, v concatenated)
    wo: Linear  # q_dim -> hidden
    ffn_norm: np.ndarray  # (hidden,)
    w_gate_up: Linear  # hidden -> 2 * ffn (gate, up concatenated)
    w_down: Linear  # ffn -> hidden


class Llama:
    """Weights and the forward pass; sessions (impl.model.session) hold state."""

    def __init__(self, config: ModelConfig, tensors: dict[str, np.ndarray]) -> None:
        c = self.config = config
        self.embed = np.ascontiguousarray(tensors["token_embd.weight"], dtype=np.float32)  # (vocab, hidden)
        assert self.embed.shape == (c.vocab, c.hidden), self.embed.shape
        self.norm = tensors["output_norm.weight"].astype(np.float32)  # (hidden,)
        head = tensors.get("output.weight", self.embed)  # tied unless the file has its own
        self.head = Linear(head)  # hidden -> vocab
        self.layers: list[Layer] = []
        for i in range(c.n_layers):
            t = lambda name, i=i: tensors[f"blk.{i}.{name}.weight"]  # noqa: E731
            self.layers.append(
                Layer(
                    attn_norm=t("attn_norm").astype(np.float32),
                    wqkv=Linear(np.concatenate([t("attn_q"), t("attn_k"), t("attn_v")], axis=0)),
                    wo=Linear(t("attn_output")),
                    ffn_norm=t("ffn_norm").astype(np.float32),
                    w_gate_up=Linear(np.concatenate([t("ffn_gate"), t("ffn_up")], axis=0)),
                    w_down=Linear(t("ffn_down")),
                )
            )
        self._init_ropes()

    LINEARS = ("wqkv", "wo", "w_gate_up", "w_down")
    VECTORS = ("attn_norm", "ffn_norm")

    def state(self) -> dict[str, np.ndarray]:
        """Every array the forward reads, in its final layout (for the float32 cache)."""
        st = {"embed": self.embed, "norm": self.norm}
        for bi, b in enumerate(self.head.blocks):
            st[f"head.{bi}"] = b
        for i, L in enumerate(self.layers):
            for name in self.VECTORS:
                st[f"blk.{i}.{name}"] = getattr(L, name)
            for name in self.LINEARS:
                for bi, b in enumerate(getattr(L, name).blocks):
                    st[f"blk.{i}.{name}.{bi}"] = b
        return st

    @classmethod
    def from_state(cls, config: ModelConfig, st: dict[str, np.ndarray]) -> Llama:
        """Inverse of ``state``: no dequantisation, no copies (arrays may be memory-mapped)."""
        self = cls.__new__(cls)
        self.config = c = config

        def blocks(prefix: str) -> list[np.ndarray]:
            out, bi = [], 0
            while f"{prefix}.{bi}" in st:
                out.append(st[f"{prefix}.{bi}"])
                bi += 1
            return out

        self.embed, self.norm = st["embed"], st["norm"]
        self.head = Linear.from_blocks(blocks("head"), n_out=c.vocab)
        n_out = {"wqkv": c.q_dim + 2 * c.kv_dim, "wo": c.hidden, "w_gate_up": 2 * c.ffn, "w_down": c.hidden}
        self.layers = [
            Layer(
                attn_norm=st[f"blk.{i}.attn_norm"],
                ffn_norm=st[f"blk.{i}.ffn_norm"],
                **{name: Linear.from_blocks(blocks(f"blk.{i}.{name}"), n_out=n_out[name]) for name in cls.LINEARS},
            )
            for i in range(c.n_layers)
        ]
        self._init_ropes()
        return self

    def _init_ropes(self) -> None:
        c = self.config
        tables: dict[float, RopeTable] = {}  # one table per distinct base, shared by its layers
        for theta in sorted({c.theta(i) for i in range(c.n_layers)}):
            tables[theta] = RopeTable(theta, c.head_dim, c.max_pos)
        self.ropes = [tables[c.theta(i)] for i in range(c.n_layers)]
        self.scale = 1.0 / np.sqrt(c.head_dim)

    @property
    def nbytes(self) -> int:
        """Bytes of float32 weights streamed per decoded token (the embedding rows aside)."""
        n = self.head.nbytes
        for L in self.layers:
            n += L.wqkv.nbytes + L.wo.nbytes + L.w_gate_up.nbytes + L.w_down.nbytes
        return n

    @property
    def decode_nbytes(self) -> int:
        """Bytes of weights one decode step streams on the path in force (GGUF blocks where
        impl.model.gguf_quant attached them, else float32), the embedding rows aside."""
        return sum(lin.decode_nbytes for lin in self.linears())

    def linears(self) -> list[Linear]:
        """Every weight product: the head, then each layer's wqkv, wo, w_gate_up, w_down."""
        return [self.head] + [getattr(L, name) for L in self.layers for name in self.LINEARS]

    def final_norm(self, x: np.ndarray) -> np.ndarray:
        """The final RMSNorm, for (..., hidden)."""
        shp = x.shape
        return rmsnorm(x.reshape(-1, shp[-1]), self.norm, self.config.rms_eps).reshape(shp)

    def forward(
        self,
        ids: np.ndarray,
        cache,
        window: list[int | None],
        logits_rows: str = "all",
        return_hidden: bool = False,
    ):
        """Feed ``ids`` (T,) after what ``cache`` holds; write their K/V into it.

        Returns logits (T, vocab) for logits_rows="all", (1, vocab) for "last",
        or None for "none"; with return_hidden also the residual stream
        (n_layers + 1, T, hidden) = [embeddings, after layer 1, ..., after layer L].
        On any exception the cache is rolled back to its previous length.
        """
        c = self.config
        ids = np.asarray(ids, dtype=np.int64)
        t = ids.shape[0]
        if t == 0:
            raise ValueError("forward got no token ids; pass at least one")
        if ids.min() < 0 or ids.max() >= c.vocab:
            bad = int(ids[(ids < 0) | (ids >= c.vocab)][0])
            raise ValueError(f"token id={bad} is outside the vocabulary 0..{c.vocab - 1}")
        start = len(cache)
        positions = cache.reserve(t)  # (T,) absolute positions of the new rows
        try:
            x = self.embed[ids]  # (T, hidden)
            hidden = [x] if return_hidden else None
            hq, hkv, d, g = c.n_heads, c.n_kv_heads, c.head_dim, c.group
            for li, L in enumerate(self.layers):
                h = rmsnorm(x, L.attn_norm, c.rms_eps)
                qkv = L.wqkv(h)  # (T, q_dim + 2 kv_dim)
                q = qkv[:, : c.q_dim].reshape(t, hq, d)  # (T, H, D)
                k_raw = qkv[:, c.q_dim : c.q_dim + c.kv_dim].reshape(t, hkv, d)  # (T, Hkv, D)
                v = qkv[:, c.q_dim + c.kv_dim :]  # (T, kv_dim)
                q = self.ropes[li].apply(q, positions)  # apply_rope with the table's rows at positions
                k = self.ropes[li].apply(k_raw, positions)
                cache.write(li, start, k_raw.reshape(t, c.kv_dim), k.reshape(t, c.kv_dim), v)
                att = causal_attention(q.reshape(t, hkv, g, d), cache, li, start, window[li], self.scale)
                x = x + L.wo(att)  # (T, hidden)
                h = rmsnorm(x, L.ffn_norm, c.rms_eps)
                gu = L.w_gate_up(h)  # (T, 2 ffn)
                x = x + L.w_down(swiglu(gu, c.ffn))
                if hidden is not None:
                    hidden.append(x)
            if logits_rows == "all":
                logits = self.head(rmsnorm(x, self.norm, c.rms_eps))  # (T, vocab)
            elif logits_rows == "last":
                logits = self.head(rmsnorm(x[-1:], self.norm, c.rms_eps))  # (1, vocab)
            else:
                logits = None
        except BaseException:
            cache.truncate(start)
            raise
        if return_hidden:
            return logits, np.stack(hidden)
        return logits

    @classmethod
    def random(cls, config: ModelConfig, seed: int = 0, scale: float = 0.08) -> Llama:
        """A small random-weight model built with the same code, for property tests."""
        rng = np.random.default_rng(seed)
        c = config

        def mat(o, i):
            return (rng.standard_normal((o, i)) * scale).astype(np.float32)

        tensors = {
            "token_embd.weight": (rng.standard_normal((c.vocab, c.hidden))).astype(np.float32),
            "output_norm.weight": (1 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32),
        }
        for i in range(c.n_layers):
            p = f"blk.{i}."
            tensors[p + "attn_norm.weight"] = (1 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32)
            tensors[p + "ffn_norm.weight"] = (1 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32)
            tensors[p + "attn_q.weight"] = mat(c.q_dim, c.hidden)
            tensors[p + "attn_k.weight"] = mat(c.kv_dim, c.hidden)
            tensors[p + "attn_v.weight"] = mat(c.kv_dim, c.hidden)
            tensors[p + "attn_output.weight"] = mat(c.hidden, c.q_dim)
            tensors[p + "ffn_gate.weight"] = mat(c.ffn, c.hidden)
            tensors[p + "ffn_up.weight"] = mat(c.ffn, c.hidden)
            tensors[p + "ffn_down.weight"] = mat(c.hidden, c.ffn)
        return cls(c, tensors)
