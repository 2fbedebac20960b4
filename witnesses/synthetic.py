"""Small random-weight llamas built with the same code as SmolLM2, for properties.

``Llama.random`` runs the real forward (impl.model.llama) over random
float32 weights, so a property checked here is checked on the code paths
SmolLM2 uses, at sizes where Hypothesis can try many geometries.
"""

from __future__ import annotations

import functools

import numpy as np
from hypothesis import strategies as st

from impl.model.config import ModelConfig
from impl.model.llama import Llama

VOCAB = 61


@functools.lru_cache(maxsize=64)
def tiny_llama(
    n_layers: int = 2,
    n_kv_heads: int = 2,
    group: int = 2,
    head_dim: int = 8,
    theta: float | tuple[float, ...] = 10000.0,
    seed: int = 0,
) -> Llama:
    """A random llama of the given geometry (cached: building one costs ~1 ms)."""
    n_heads = n_kv_heads * group
    cfg = ModelConfig(
        n_layers=n_layers,
        hidden=n_heads * head_dim,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        ffn=2 * n_heads * head_dim,
        vocab=VOCAB,
        rope_theta=theta,
        max_pos=256,
    )
    return Llama.random(cfg, seed=seed)


geometries = st.fixed_dictionaries(
    {
        "n_layers": st.integers(1, 3),
        "n_kv_heads": st.integers(1, 3),
        "group": st.integers(1, 3),
        "head_dim": st.sampled_from([2, 4, 8, 16]),
    }
)

thetas = st.one_of(
    st.sampled_from([10000.0, 100000.0, 500.0]),
    st.lists(st.sampled_from([10000.0, 100000.0, 500.0]), min_size=3, max_size=3).map(tuple),
)


def fresh_tiny_llama(**geometry) -> Llama:
    """``tiny_llama(**geometry)`` built now, not taken from the cache: its Linears take the numerics path in
    force at this moment (a Linear keeps the path it was built on), e.g. inside :func:`force_numpy_fallback`."""
    return tiny_llama.__wrapped__(**geometry)


def force_numpy_fallback(monkeypatch) -> None:
    """Run the rest of a test on impl's numpy fallback, the path a process without a C compiler (or with
    KVPROOF_KERNEL=numpy) takes: impl.kernels' loaded state becomes "no kernel", so kernels.load() returns
    None and every numerics choice made from here on takes its numpy branch (Linear's numpy-gemv layout for
    Linears built from now on, see :func:`fresh_tiny_llama`; rmsnorm, silu, swiglu, RopeTable.apply and
    attention, which ask at each call). KVPROOF_ATTENTION is unset (auto), as a ``kernel`` there would refuse
    a missing kernel. ``monkeypatch`` undoes both when the test ends."""
    from impl import kernels
    from impl.attention import attention_kernel

    monkeypatch.setattr(kernels, "_state", {"kernel": None, "why": "switched off by the witness (numpy fallback)"})
    monkeypatch.delenv("KVPROOF_ATTENTION", raising=False)
    assert kernels.load() is None and attention_kernel() is None, "the numpy fallback is not in force"


def token_ids(n: int, seed: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(0, VOCAB, n)]


def cache_delta(a, b) -> float:
    """max |a - b| over k, k_raw, v of every layer and pos; inf if shapes differ."""
    if len(a) != len(b) or not np.array_equal(a.pos, b.pos):
        return float("inf")
    worst = 0.0
    for name in ("k", "k_raw", "v"):
        for la, lb in zip(getattr(a, name), getattr(b, name), strict=True):
            if la.shape != lb.shape:
                return float("inf")
            if la.size:
                worst = max(worst, float(np.max(np.abs(la.astype(np.float64) - lb))))
    return worst
