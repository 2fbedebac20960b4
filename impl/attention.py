"""Grouped-query causal attention over a KV cache, one query row at a time.

NOTE: batch invariance. Each query in row hi-1 is its own small product
over exactly the keys [0, hi) that precede it; it is never part of a
(T, S) score matrix whose causal mask hides later keys. In such a matrix a
query's softmax sum and weighted V sum would run over a length that
depends on how many tokens were fed together, and summation order
(pairwise sums, BLAS tails) depends on length. Computed this way, a
position's attention output is the same bits for a prefill, a chunk or a
single decode step.

A window hides the keys below it: the numpy path gives them score -inf
inside that product (exp gives exactly 0, the sums keep their length and
order), the kernel never visits them (the same bits as the mask, since
adding an exact 0 changes no sum). Either way a window at least as long as
the context is bit-identical to no window. The window is decided from the cache's stored ``pos``, never from
row indices: a query at absolute position p sees keys with pos >= p - W + 1.

Two numerics paths (:func:`attention_path` names the one in force):

- ``kernel`` (default when impl.kernels loads): ``kv_attend``, every
  query's scores, softmax and weighted sum over exactly its visible keys
  [lo, hi) in one fixed order, all T queries of a call in one native call.
  Keys outside the window are not visited at all, which equals the -inf
  mask bit for bit (exp gives exactly 0 and adding 0 changes no sum), so
  under the kernel a window is the same bits as attention over the
  window's rows alone, and a window as long as the context the same as none.
- ``numpy`` (fallback: no C compiler, or ``KVPROOF_ATTENTION=numpy``): the
  code below, one query at a time, over exactly its visible rows [lo, hi)
  too (it once masked [0, lo) with -inf: BLAS blocks a sum by its row
  count, so the hidden rows changed the visible ones' bits, and a windowed
  cache that no longer held them gave other logits than a recompute), so a
  window is the same bits as attention over the window's rows alone here
  as well.

Each path is invariant on its own; the two give different bits, so compare
runs made under the same path only (the report header names it).
"""

from __future__ import annotations

import numpy as np

from impl import kernels
from impl.errors import SettingError, setting

ENV_ATTENTION = "KVPROOF_ATTENTION"  # "auto" (default: kernel when it loads), "kernel", or "numpy"
ATTENTION_CHOICES = ("auto", "kernel", "numpy")


def attention_choice() -> str:
    """The validated value of KVPROOF_ATTENTION ("auto" when unset); SettingError naming the allowed values."""
    return setting(
        ENV_ATTENTION, ATTENTION_CHOICES, "an attention path", "auto = the C kernel when it builds, else numpy"
    )


def attention_kernel():
    """The compiled kernel when this process runs attention through it, else None.

    ``kernel`` insists (SettingError when the kernel cannot be built);
    ``auto`` takes it when it loads; ``numpy`` never.
    """
    choice = attention_choice()
    if choice == "numpy":
        return None
    k = kernels.load()
    if k is None and choice == "kernel":
        raise SettingError(
            f"{ENV_ATTENTION}=kernel but the C kernel is unavailable ({kernels.status()}); "
            f"unset it to fall back to numpy"
        )
    return k


def attention_path() -> str:
    """One line naming attention's numerics path, e.g. for report headers."""
    k = attention_kernel()
    if k is not None:
        return f"kernel {k.isa}: all queries in one call, each over exactly its visible keys"
    why = f"{ENV_ATTENTION}=numpy" if attention_choice() == "numpy" else kernels.status()
    return f"numpy, one query at a time, each over exactly its visible keys [lo, hi) (fallback: {why})"


def window_lo(pos: np.ndarray, hi: int, window: int | None) -> int:
    """First row a query in row hi-1 may attend; pos (n,) ascending int64."""
    if window is None:
        return 0
    p = int(pos[hi - 1])
    return int(np.searchsorted(pos[:hi], p - window + 1, side="left"))


def attend_one(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, lo: int = 0) -> np.ndarray:
    """One query position over n keys, of which [lo, n) are visible.

    q: (Hkv, G, D) post-RoPE queries grouped by their KV head
    k, v: (n, Hkv * D) rows from the cache, the query's own row last
    returns (Hkv, G, D) float32
    """
    hkv, _, d = q.shape
    n = k.shape[0]
    kern = attention_kernel()
    if kern is not None:
        return kern.attend(q[None], k, v, np.array([lo]), np.array([n]), scale).reshape(q.shape)
    # NOTE: exactly the visible rows [lo, n), as the kernel reads them, not every row with the hidden ones masked:
    # BLAS sums a row count's products in a blocking of its own, so masked rows changed the visible ones' bits
    # (a windowed cache that no longer holds them gave other logits than a recompute: TGT-GENERATE@numpy)
    kh = k[lo:].reshape(n - lo, hkv, d).transpose(1, 0, 2)  # (Hkv, n - lo, D): rows of the cache, strided by kv_dim
    vh = v[lo:].reshape(n - lo, hkv, d).transpose(1, 0, 2)  # (Hkv, n - lo, D)
    # NOTE: K @ q^T, not q @ K^T: the cache rows are already in BLAS's row layout,
    # so no (D, n) transpose is gathered per call (2x faster at 2048 keys).
    s = np.matmul(kh, q.transpose(0, 2, 1))  # (Hkv, n - lo, G)
    s = np.ascontiguousarray(s.transpose(0, 2, 1)) * np.float32(scale)  # (Hkv, G, n - lo), contiguous for reductions
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, vh)  # (Hkv, G, D)


def causal_attention(
    q: np.ndarray,
    cache,
    layer: int,
    start: int,
    window: int | None,
    scale: float,
) -> np.ndarray:
    """Attention for T new queries whose K/V are already in rows [start, start+T).

    q: (T, Hkv, G, D); returns (T, Hkv * G * D) float32. ``cache`` is any
    ``impl.cache.KVStore``: it provides ``pos`` and ``view(layer, hi)``.
    """
    t = q.shape[0]
    pos = cache.pos
    kern = attention_kernel()
    if kern is not None:
        k, v, base = cache.view(layer, start + t)
        his = np.arange(start + 1, start + t + 1, dtype=np.int64)
        los = np.zeros(t, dtype=np.int64)
        if window is not None:
            los[:] = [window_lo(pos, hi, window) for hi in his]
        if base == 0:
            # every row is held, so each query's view(layer, hi) is a prefix of this one: one native call
            return kern.attend(q, k, v, los, his, scale)
        # a cache that drops rows (ring): query i reads rows [max(lo_i, base_i), hi_i) of its own view,
        # from one array holding every query's view where the cache offers one (KVStore.view: view_many)
        view_many = getattr(cache, "view_many", None)
        if view_many is not None:
            k, v, bases = view_many(layer, his)
            b0 = int(bases.min())
            return kern.attend(q, k, v, np.maximum(los, bases) - b0, his - b0, scale)
        out = np.empty((t, q.shape[1] * q.shape[2] * q.shape[3]), dtype=np.float32)
        for i, hi in enumerate(his):  # each query's own view, as below
            k, v, base = cache.view(layer, int(hi))
            out[i] = kern.attend(q[i : i + 1], k, v, np.array([max(los[i] - base, 0)]), np.array([hi - base]), scale)[0]
        return out
    out = np.empty((t, q.shape[1] * q.shape[2] * q.shape[3]), dtype=np.float32)
    for i in range(t):
        hi = start + i + 1
        lo = window_lo(pos, hi, window)
        k, v, base = cache.view(layer, hi)  # rows [base, hi)
        out[i] = attend_one(q[i], k, v, scale, max(lo - base, 0)).reshape(-1)
    return out
