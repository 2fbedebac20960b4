"""Liars for card KERNEL-ACC: the C kernel's entry points, each wrong only on a path SmolLM2 never takes
(a partial panel, 2+ threads, a short row group, one query among many) or by a few ulps.

Each wraps the real :class:`impl.kernels.Kernel` method (``factory=True``) and changes what it returns in
numpy; none raises, so a witness must catch it by an assertion or a bound.
"""

from __future__ import annotations

import ctypes

import numpy as np

from witnesses import gguf_reference
from witnesses.liars import liar

NR = 16  # panel width of the packed weight (impl.kernels.NR)


def _ulps_away(a: np.ndarray, n: int) -> np.ndarray:
    """a moved n float32 steps away from zero."""
    out = np.asarray(a, dtype=np.float32)
    away = np.where(np.signbit(out), np.float32(-np.inf), np.float32(np.inf)).astype(np.float32)
    for _ in range(n):
        out = np.nextafter(out, away)
    return out


@liar(
    "kernels.exp_7ulp",
    target="impl.kernels:Kernel.exp",
    factory=True,
    why="a cheaper exp polynomial: every result 7 ulps too large (about 1e-6 relative, invisible in any logit)",
)
def exp_7ulp(original):
    def exp(self, x):
        return _ulps_away(original(self, x), 7)

    return exp


@liar(
    "kernels.silu_7ulp",
    target="impl.kernels:Kernel.silu",
    factory=True,
    why="a sloppier sigmoid: every silu (and gated silu) 7 ulps further from zero",
)
def silu_7ulp(original):
    def silu(self, g, u=None, threads=0):
        return _ulps_away(original(self, g, u, threads), 7)

    return silu


@liar(
    "kernels.linear_tail_order",
    target="impl.kernels:Kernel.linear",
    factory=True,
    why="a partial last panel (width not a multiple of 16) handled by a scalar loop that multiplies and adds "
    "separately, in one chain over all of k: other bits for the tail columns only",
)
def linear_tail_order(original):
    def linear(self, x, packed, out, threads=0):
        original(self, x, packed, out, threads)
        last = packed[-1]  # (K, 16)
        if not (last == 0).all(axis=0).any():  # a full panel: no tail columns
            return
        xs = np.asarray(x, dtype=np.float32)
        acc = np.zeros((xs.shape[0], NR), dtype=np.float32)
        for k in range(xs.shape[1]):
            acc = acc + xs[:, k : k + 1] * last[k]  # float32: the product rounded, then the sum
        p = packed.shape[0]
        out[:, (p - 1) * NR : p * NR] = acc

    return linear


@liar(
    "kernels.threaded_chunk_order",
    target="impl.kernels:Kernel.linear",
    factory=True,
    why="with more than one thread the first work item (24 rows x 4 panels) is summed per k-block by BLAS and the "
    "block sums added right to left: one thread gives the documented bits, two or more do not",
)
def threaded_chunk_order(original):
    def linear(self, x, packed, out, threads=0):
        original(self, x, packed, out, threads)
        t, k = x.shape
        if t < 2 or threads == 1 or (threads <= 0 and self.default_threads() <= 1):
            return
        rows, panels = min(24, t), packed[:4]  # (p, K, 16)
        w = panels.transpose(1, 0, 2).reshape(k, -1)  # (K, p*16)
        xs = np.asarray(x[:rows], dtype=np.float32)
        y = None
        for k0 in reversed(range(0, k, 64)):
            part = xs[:, k0 : k0 + 64] @ w[k0 : k0 + 64]  # (rows, p*16) float32
            y = part if y is None else y + part
        out[:rows, : w.shape[1]] = y

    return linear


@liar(
    "kernels.rmsnorm_eps_after_sqrt",
    target="impl.kernels:Kernel.rmsnorm",
    why="x / (sqrt(mean(x^2)) + eps) * w: eps added after the square root (a common variant, and a wrong one "
    "for llama: rows whose mean square is near eps come out several times too large)",
)
def rmsnorm_eps_after_sqrt(self, x, weight, eps, threads=0):
    x = np.asarray(x, dtype=np.float32)
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)  # (T, 1)
    return ((x / (np.sqrt(ms) + np.float32(eps))) * weight).astype(np.float32)


@liar(
    "kernels.rope_fused",
    target="impl.kernels:Kernel.rope",
    why="the rotation contracted (fma): x1*c - x2*s rounded once instead of numpy's three roundings; as "
    "accurate, other bits than impl.rope.apply_rope",
)
def rope_fused(self, x, cos, sin, pos, threads=0):
    half = x.shape[2] // 2
    x64 = np.asarray(x, dtype=np.float64)  # (T, H, D)
    c = cos[pos][:, None, :].astype(np.float64)  # (T, 1, D)
    s = sin[pos][:, None, :].astype(np.float64)
    x1, x2 = x64[..., :half], x64[..., half:]
    o1 = x1 * c[..., :half] - x2 * s[..., :half]
    o2 = x2 * c[..., half:] + x1 * s[..., half:]
    return np.concatenate([o1, o2], axis=-1).astype(np.float32)


@liar(
    "kernels.q_short_group_dot",
    target="impl.kernels:Kernel.linear_q",
    factory=True,
    why="the rows of a short last group (row count not a multiple of 16) decoded to float32 and summed by "
    "numpy's dot (BLAS order) instead of the k-blocked fma order: other bits for those rows only",
)
def q_short_group_dot(original):
    def linear_q(self, x, rows, qtype, out, threads=0, reference=False):
        original(self, x, rows, qtype, out, threads, reference)
        c = rows.shape[0]
        q4 = qtype == 2  # ggml's Q4_1 id (impl.kernels.QTYPES)
        nbytes = x.shape[0] // 32 * (20 if q4 else 34)
        decode = gguf_reference.decode_q4_1 if q4 else gguf_reference.decode_q8_0
        for i in range(c - c % 16, c):
            raw = np.frombuffer(ctypes.string_at(int(rows[i]), nbytes), dtype=np.uint8)
            out[i] = np.dot(np.asarray(x, dtype=np.float32), decode(raw))

    return linear_q


@liar(
    "kernels.attend_batched_softmax",
    target="impl.kernels:Kernel.attend",
    factory=True,
    why="queries fed together go through one masked (T, n) score matrix per head (numpy float32, -inf outside "
    "[lo, hi)): a query's bits then depend on which queries share the call; one query alone is the kernel's",
)
def attend_batched_softmax(original):
    def attend(self, q, k, v, lo, hi, scale, threads=0):
        t, hkv, g, d = q.shape
        if t < 2:
            return original(self, q, k, v, lo, hi, scale, threads)
        n = k.shape[0]
        kk = np.ascontiguousarray(k, dtype=np.float32).reshape(n, hkv, d)  # (n, Hkv, D)
        vv = np.ascontiguousarray(v, dtype=np.float32).reshape(n, hkv, d)
        cols = np.arange(n)
        hidden = (cols[None, :] < np.asarray(lo)[:, None]) | (cols[None, :] >= np.asarray(hi)[:, None])  # (T, n)
        out = np.empty((t, hkv, g, d), dtype=np.float32)
        for h in range(hkv):
            s = np.einsum("tgd,nd->tgn", q[:, h], kk[:, h]) * np.float32(scale)  # (T, G, n)
            s[np.broadcast_to(hidden[:, None, :], s.shape)] = -np.inf
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, h] = (s / s.sum(axis=-1, keepdims=True)) @ vv[:, h]  # (T, G, D)
        return out.reshape(t, -1)

    return attend
