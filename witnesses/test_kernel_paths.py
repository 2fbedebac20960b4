"""Witnesses for KERNEL-ACC (obligations/KERNEL-ACC.yaml): the C kernel on the paths SmolLM2 never takes.

SmolLM2's shapes (multiples of 16 and 64, group size 3, head_dim 64) and the gate's one thread per witness
never reach the kernel's tails: K not a multiple of the 64-wide k-block, widths not a multiple of a
16-column panel, row counts not a multiple of the 6-row tile or the 24-row work item, partial value chunks,
the scalar head_dim path, a short last group of 16 rows in the quantized decode, 2-4 threads. Hypothesis
draws those shapes here and every witness checks two things:

(a) invariance: a row's (element's, query's) bits do not depend on the row count, on how the rows are
    chunked into calls, on which other columns share the call, or on the thread count (1-4);
(b) accuracy: each result against a float64 reference written here with numpy (never the impl function
    under test), with the bound the card states; the worst value seen is recorded (``evidence.observe``).
    Where the kernel's arithmetic is specified exactly (linear and the quantized decode: one fma per step,
    k-blocks of 64 summed left to right; rope: numpy's float32 operations), the reference computes that
    very arithmetic in float64 with exact rounding and the bits must be equal.

Units: u = 2^-24, the largest relative error of one float32 rounding. A witness skips (the card is
UNVERIFIED) when the kernel is not loaded (KVPROOF_KERNEL=numpy); the numpy row-wise functions have their
own witness, which runs on every path.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl import kernels
from witnesses import gguf_reference

U = 2.0**-24  # unit roundoff of float32
KC = 64  # the kernel's k-block: every output element sums k in blocks of 64, block sums left to right
NR = 16  # panel width: the packed weight is (P, K, 16), zero past the last column
QBLOCK = {"Q4_1": 20, "Q8_0": 34}  # bytes per 32 values
EXP_BOUND_U = 3.0  # the card's bound for the kernel's exp (exp-vs-float64); softmax and silu bounds build on it
NUMPY_EXP_BOUND_U = 4.0  # the card's bound for numpy's float32 exp (numpy-rowwise-vs-float64)
EXP_LO = -87.0  # below: the kernel's exp is exactly 0 (kernels.c EXP_LO); exp(-87) = 1.65e-38
FLT_MIN = 2.0**-126


@pytest.fixture(scope="module")
def kern():
    """The loaded kernel; the witness skips (card UNVERIFIED) when the numpy fallback is in force."""
    k = kernels.load()
    if k is None:
        why = kernels.status()
        # n/a (not counted) only where the path is absent by choice or by the machine: KVPROOF_KERNEL=numpy, or
        # no C compiler at all; a kernels.c the compiler on PATH refuses is a defect, never a path that is absent
        absent = why == f"{kernels.ENV_CHOICE}=numpy" or "no C compiler" in why
        pytest.skip(f"{'n/a: ' if absent else ''}the C kernel is not loaded ({why}): its paths cannot be checked here")
    return k


# ---- exact float32 arithmetic in float64 --------------------------------------------------------------


def round_f32(v: Fraction) -> np.float32:
    """The float32 nearest to the exact rational ``v``, ties to even: one rounding, never two."""
    f = np.float32(float(v))  # within one float32 step of the answer
    lo, hi = np.nextafter(f, np.float32(-np.inf)), np.nextafter(f, np.float32(np.inf))
    best = min((abs(Fraction(float(c)) - v), int(c.view(np.uint32)) & 1, c) for c in (lo, f, hi))
    return best[2]


def fma32(a, b, c) -> np.ndarray:
    """float32 fma(a, b, c) element by element (broadcast), rounded once, from float64: a*b is exact in double
    (24 + 24 bits), the sum rounds once to double and then to float32, which equals one rounding unless the
    double sum lies exactly on a float32 midpoint or below 2^-126 (the subnormal grid): those elements are
    redone in exact rational arithmetic."""
    a64, b64, c64 = (np.asarray(t, dtype=np.float64) for t in np.broadcast_arrays(a, b, c))
    s = a64 * b64 + c64  # numpy: the product exactly, then one rounding for the sum (never fused)
    bits = s.view(np.int64)
    mag = np.abs(s)
    hazard = ((bits & 0x1FFFFFFF) == 0x10000000) | ((mag > 0) & (mag < FLT_MIN))
    out = s.astype(np.float32)
    for idx in zip(*np.nonzero(hazard), strict=True):
        out[idx] = round_f32(Fraction(float(a64[idx])) * Fraction(float(b64[idx])) + Fraction(float(c64[idx])))
    return out


def blocked_dot_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (T, K) @ w (C, K).T -> (T, C) float32 in the kernel's documented order: per k-block of 64,
    acc = fma(x_k, w_k, acc) from 0, one rounding a step; block sums added left to right."""
    t, k = x.shape
    y = None
    for k0 in range(0, k, KC):
        acc = np.zeros((t, w.shape[0]), dtype=np.float32)
        for j in range(k0, min(k0 + KC, k)):
            acc = fma32(x[:, j, None], w[None, :, j], acc)
        y = acc if y is None else y + acc  # float32 + float32: one rounding
    return y


def dot_bound(k: int) -> float:
    """gamma_n with n the roundings one product term can pass through in that order: min(K, 64) fma steps
    inside its k-block, then one per later block sum (Higham's recursive-summation argument)."""
    n = min(k, KC) + -(-k // KC) - 1
    return n * U / (1 - n * U)


def pack(w: np.ndarray) -> np.ndarray:
    """(C, K) -> (ceil(C/16), K, 16) float32, panel p = columns [16p, 16p+16), zero past C: the layout the
    kernel reads (written here, not impl.linear.pack_panels)."""
    c, k = w.shape
    p = -(-c // NR)
    full = np.zeros((p * NR, k), dtype=np.float32)
    full[:c] = w
    return np.ascontiguousarray(full.reshape(p, NR, k).transpose(0, 2, 1))  # (P, K, 16)


def kernel_linear(kern, x: np.ndarray, panels: np.ndarray, c: int, threads: int) -> np.ndarray:
    out = np.empty((x.shape[0], panels.shape[0] * NR), dtype=np.float32)
    kern.linear(np.ascontiguousarray(x), panels, out, threads=threads)
    return out[:, :c]


def bitdiff(a: np.ndarray, b: np.ndarray) -> float:
    """0.0 when a and b have the same shape and bits, else max |a - b| (inf for other shapes or NaN patterns)."""
    if a.shape != b.shape:
        return float("inf")
    if np.array_equal(a.view(np.uint32), b.view(np.uint32)):
        return 0.0
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return float(np.nanmax(d)) if np.isfinite(d).any() and d.max() > 0 else float("inf")


def cuts(n: int, seed: int) -> list[tuple[int, int]]:
    """A split of range(n) into 1-5 consecutive chunks."""
    rng = np.random.default_rng(seed)
    inner = sorted(set(rng.integers(1, n, size=min(4, n - 1)).tolist())) if n > 1 else []
    bounds = [0, *inner, n]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


threads_st = st.integers(1, 4)
seeds = st.integers(0, 2**31 - 1)


# ---- linear --------------------------------------------------------------------------------------------


def test_linear_has_the_documented_order_for_any_shape_chunking_width_and_thread_count(kern, evidence):
    """Kernel.linear: K 1-300, 1-600 rows, 1-70 columns, 1-4 threads. Every row's bits equal the same row
    fed alone, in any chunking, with the first c2 columns only, on 1 thread; equal the documented fma order
    computed here exactly; and lie within gamma_n * sum|x_k w_k| of the float64 product."""

    @given(t=st.integers(1, 600), k=st.integers(1, 300), c=st.integers(1, 70), threads=threads_st, seed=seeds)
    def prop(t, k, c, threads, seed):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal((t, k)) * np.exp(rng.uniform(-3, 3, (t, 1)))).astype(np.float32)
        w = rng.standard_normal((c, k)).astype(np.float32)
        panels = pack(w)
        whole = kernel_linear(kern, x, panels, c, threads=1)
        delta = bitdiff(kernel_linear(kern, x, panels, c, threads), whole)
        chunked = np.concatenate([kernel_linear(kern, x[a:b], panels, c, threads) for a, b in cuts(t, seed)])
        delta = max(delta, bitdiff(chunked, whole))
        for i in {0, t // 2, t - 1, int(rng.integers(t))}:
            delta = max(delta, bitdiff(kernel_linear(kern, x[i : i + 1], panels, c, threads), whole[i : i + 1]))
        c2 = int(rng.integers(1, c + 1))  # a narrower matrix: its tail panel is another set of columns
        delta = max(delta, bitdiff(kernel_linear(kern, x, pack(w[:c2]), c2, threads), whole[:, :c2]))
        evidence.observe("row_delta", delta)
        # (b) exact: the documented order, on every row (or 40 of them, the first 24 among them, when large)
        rows = np.arange(t) if t * c * k <= 2_000_000 else np.unique(np.r_[0:24, t - 1, rng.integers(0, t, 15)])
        want = blocked_dot_reference(x[rows], w)
        mismatched = int((whole[rows].view(np.uint32) != want.view(np.uint32)).sum())
        evidence.count("order_mismatches", mismatched)
        # (b) bound: |y - y64| <= gamma_n * sum_k |x_k w_k|
        y64 = x.astype(np.float64) @ w.T.astype(np.float64)
        scale = np.abs(x).astype(np.float64) @ np.abs(w.T).astype(np.float64)
        ratio = float(np.max(np.abs(whole - y64) / (dot_bound(k) * scale)))
        evidence.observe("err_over_bound", ratio)
        evidence.observe("err_u", float(np.max(np.abs(whole - y64) / scale)) / U)
        evidence.count("examples")
        evidence.count("k_tails", int(k % KC != 0))  # a last k-block shorter than 64
        evidence.count("width_tails", int(c % NR != 0))  # a zero-padded last panel
        evidence.count("row_tails", int(t > 1 and t % 6 != 0))  # a short 6-row tile
        evidence.count("threaded", int(threads > 1))
        assert delta == 0, f"row bits depend on rows, chunking, width or threads: max|delta|={delta}"
        assert mismatched == 0, f"{mismatched} elements are not the documented fma order (T={t} K={k} C={c})"
        assert ratio <= 1, f"|y - y64| = {ratio:.3f} x gamma_n sum|x w|"

    prop()


# ---- quantized block decode (linear_q) ------------------------------------------------------------------


def random_blocks(qtype: str, c: int, nb: int, rng) -> np.ndarray:
    """(c, nb * bytes) uint8: c rows of nb random blocks with finite, moderate f16 scales (and minima)."""
    bs = QBLOCK[qtype]
    raw = rng.integers(0, 256, size=(c, nb, bs), dtype=np.uint8)
    d = (rng.standard_normal((c, nb)) * 0.02).astype(np.float16)
    raw[:, :, 0:2] = d.view(np.uint8).reshape(c, nb, 2)
    if qtype == "Q4_1":
        m = (rng.standard_normal((c, nb)) * 0.1).astype(np.float16)
        raw[:, :, 2:4] = m.view(np.uint8).reshape(c, nb, 2)
    return raw.reshape(c, nb * bs)


def exact_block_values(qtype: str, raw: np.ndarray) -> np.ndarray:
    """(c, K) float64: the format's values d*q (+ m) exactly, before any float32 rounding."""
    bs = QBLOCK[qtype]
    b = raw.reshape(-1, bs)  # (c * nb, bs)
    d = b[:, 0:2].copy().view("<f2").astype(np.float64)  # (c * nb, 1)
    if qtype == "Q4_1":
        m = b[:, 2:4].copy().view("<f2").astype(np.float64)
        q = np.concatenate([b[:, 4:20] & 0x0F, b[:, 4:20] >> 4], axis=1).astype(np.float64)
        return (q * d + m).reshape(raw.shape[0], -1)
    return (b[:, 2:].copy().view(np.int8).astype(np.float64) * d).reshape(raw.shape[0], -1)


def test_quantized_decode_has_the_documented_order_and_weights_on_any_rows_and_threads(kern, evidence):
    """Kernel.linear_q on random Q4_1/Q8_0 blocks: 1-200 rows (a short last group of 16 whenever the count
    is not a multiple), K = 32-320 (odd block counts end in a half k-block), rows at permuted addresses,
    1-4 threads, vector and scalar (reference=True) code. Each output equals the documented arithmetic
    (weights decoded with float32 operations as ggml defines them, witnesses/gguf_reference.py, then the
    k-blocked fma order) bit for bit, and lies within gamma_(n+1) * sum|x_k w_k| of the float64 product
    with the format's exact values (one more rounding: a Q4_1 weight's d*q + m)."""

    @given(qtype=st.sampled_from(sorted(QBLOCK)), c=st.integers(1, 200), nb=st.integers(1, 10), threads=threads_st)
    def prop(qtype, c, nb, threads):
        rng = np.random.default_rng(c * 1000 + nb * 10 + threads)
        raw = random_blocks(qtype, c, nb, rng)
        order = rng.permutation(c)  # output row i reads stored row order[i]
        rows = np.ascontiguousarray(raw.ctypes.data + order * raw.shape[1], dtype=np.uintp)
        k = 32 * nb
        x = rng.standard_normal(k).astype(np.float32)
        outs = {}
        for th, ref in ((1, False), (threads, False), (threads, True)):
            outs[th, ref] = np.empty(c, dtype=np.float32)
            kern.linear_q(x, rows, kernels.QTYPES[qtype], outs[th, ref], threads=th, reference=ref)
        got = outs[1, False]
        delta = max(bitdiff(o, got) for o in outs.values())
        decode = gguf_reference.decode_q4_1 if qtype == "Q4_1" else gguf_reference.decode_q8_0
        w32 = decode(raw.reshape(-1)).reshape(c, k)[order]  # float32, as ggml defines it
        want = blocked_dot_reference(x[None], w32)[0]
        mismatched = int((got.view(np.uint32) != want.view(np.uint32)).sum())
        w64 = exact_block_values(qtype, raw)[order]
        scale = np.abs(w64) @ np.abs(x.astype(np.float64))
        n = min(k, KC) + -(-k // KC)  # one more rounding than the dot itself
        ratio = float(np.max(np.abs(got - w64 @ x.astype(np.float64)) / (n * U / (1 - n * U) * scale)))
        evidence.observe("q_delta", delta)
        evidence.count("q_order_mismatches", mismatched)
        evidence.observe("q_err_over_bound", ratio)
        evidence.count("q_short_last_groups", int(c % 16 != 0))
        lanes = 16 if kern.q_vector else 1  # rows a group of kv_linear_q computes at once
        evidence.count("q_threaded", int(threads > 1 and -(-c // lanes) >= 2 * threads))  # its threading rule
        assert delta == 0, f"{qtype} c={c} K={k}: bits depend on threads or the code path: {delta}"
        assert mismatched == 0, f"{qtype} c={c} K={k}: {mismatched} outputs are not the documented arithmetic"
        assert ratio <= 1, f"{qtype}: |y - y64| = {ratio:.3f} x gamma sum|x w|"

    prop()


# ---- exp and silu -------------------------------------------------------------------------------------


def rel_u(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| / |exact| in units of u (exact != 0)."""
    return np.abs(got.astype(np.float64) - exact) / np.abs(exact) / U


def test_exp_is_within_its_bound_of_float64_exact_at_the_ends_and_elementwise(kern, evidence):
    """Kernel.exp (the exp of softmax and silu) on [-87, 0]: relative error <= 3u against float64; exactly 1
    at 0 and -0, exactly 0 below -87 (where exp < 1.7e-38); an element's bits do not depend on its place."""

    @given(n=st.integers(1, 3000), lo=st.sampled_from([-87.0, -20.0, -1.0, -1e-3, -1e-7]), seed=seeds)
    def prop(n, lo, seed):
        rng = np.random.default_rng(seed)
        x = np.concatenate([rng.uniform(lo, 0, n), -np.exp(rng.uniform(np.log(1e-9), np.log(87), n))])
        x = np.clip(x, EXP_LO, 0).astype(np.float32)
        got = kern.exp(x)
        worst = float(np.max(rel_u(got, np.exp(x.astype(np.float64)))))
        off = int(rng.integers(1, 17))
        delta = bitdiff(kern.exp(x[off:]), got[off:])
        delta = max(delta, bitdiff(kern.exp(x[off : off + 1]), got[off : off + 1]))
        evidence.observe("exp_rel_u", worst)
        evidence.observe("exp_delta", delta)
        assert delta == 0 and worst <= EXP_BOUND_U, (delta, worst)

    prop()
    ends = kern.exp(np.array([0.0, -0.0, -87.5, -100.0, -1e30, -np.inf], dtype=np.float32))
    evidence.record("exp_end_values", [float(v) for v in ends])
    assert ends.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0], ends


def exact_silu(g: np.ndarray) -> np.ndarray:
    """g * sigmoid(g) in float64, by sign so neither branch overflows."""
    g = g.astype(np.float64)
    e = np.exp(-np.abs(g))
    return np.where(g >= 0, g / (1 + e), g * e / (1 + e))


def test_silu_is_within_its_bound_of_float64_and_an_elements_bits_are_its_own(kern, evidence):
    """Kernel.silu (and silu(g) * u, the SwiGLU gate) on 1-64 rows of 1-300 values, 1-4 threads. Relative
    error against float64 <= 8.5u where the result is normal (g >= -87); below, |error| < 1e-35 (times |u|,
    when gated: the exact values there are below 1.5e-36). Each element
    equals itself computed in a one-row call, at another offset, on another thread count."""

    @given(t=st.integers(1, 64), f=st.integers(1, 300), gated=st.booleans(), threads=threads_st, seed=seeds)
    def prop(t, f, gated, threads, seed):
        rng = np.random.default_rng(seed)
        g = rng.standard_normal((t, f)) * np.exp(rng.uniform(-4, 4.4, (t, 1)))
        g.flat[rng.integers(0, g.size, 3)] = rng.choice([0.0, -0.0, 87.0, -87.0, -88.0, -1e-30, 1e-30, 200.0], 3)
        g = g.astype(np.float32)
        u = rng.standard_normal((t, f)).astype(np.float32) if gated else None
        got = kern.silu(g, u, threads=1)
        delta = bitdiff(kern.silu(g, u, threads=threads), got)
        i, a = int(rng.integers(t)), int(rng.integers(f))
        delta = max(delta, bitdiff(kern.silu(g[i, a:], None if u is None else u[i, a:]), got[i, a:]))
        big = np.tile(g, (max(1, 33000 // g.size + 1), 1))  # past the threading threshold (32768 values)
        bu = None if u is None else np.tile(u, (big.shape[0] // t, 1))
        delta = max(delta, bitdiff(kern.silu(big, bu, threads=threads)[:t], got))
        exact = exact_silu(g) * (1.0 if u is None else u.astype(np.float64))
        normal = (g >= -87) & (np.abs(exact) >= FLT_MIN)
        worst = float(np.max(rel_u(got[normal], exact[normal]), initial=0.0))
        per_u = 1.0 if u is None else np.maximum(np.abs(u[~normal]), 1)  # exact values there are < 1.5e-36 * |u|
        tail = float(np.max(np.abs(got[~normal] - exact[~normal]) / per_u, initial=0.0))
        evidence.observe("silu_rel_u", worst)
        evidence.observe("silu_tail_abs", tail)
        evidence.observe("silu_delta", delta)
        assert delta == 0, f"an element's bits depend on its row, offset or the threads: {delta}"
        assert worst <= 8.5 and tail < 1e-35, (worst, tail)

    prop()


# ---- rmsnorm -------------------------------------------------------------------------------------------


def rmsnorm_bound_u(sum_roundings: int) -> float:
    """Relative error bound in u of x / sqrt(mean(x^2) + eps) * w: the sum of squares (all terms >= 0)
    gamma_n relative, the mean /H and + eps one rounding each, sqrt halves what it is given and rounds,
    1/sqrt, x*inv and *w one rounding each: gamma_n/2 + 5u (to first order)."""
    g = sum_roundings * U / (1 - sum_roundings * U)
    return (g / 2 + 5 * U) / U * (1 + 1e-6)


def exact_rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w.astype(np.float64)


def test_rmsnorm_is_within_its_bound_of_float64_and_a_rows_bits_are_its_own(kern, evidence):
    """Kernel.rmsnorm: 1-300 rows of H = 1-700, row scales from 1e-3 to 1e3, eps from 1e-6 to 0.1, strided
    rows, 1-4 threads. Relative error <= gamma_n/2 + 5u, n = ceil(H/VL) + log2(VL) (each lane's fma chain,
    then the lane tree; VL the build's vector width); a row's bits equal the row alone, in any chunking, on
    any thread count."""
    lanes = int(np.log2(kern.vl))

    @given(
        t=st.integers(1, 300),
        h=st.integers(1, 700),
        eps=st.sampled_from([1e-6, 1e-5, 1e-3, 0.1]),
        threads=threads_st,
        seed=seeds,
    )
    def prop(t, h, eps, threads, seed):
        rng = np.random.default_rng(seed)
        wide = (rng.standard_normal((t, h + 5)) * np.exp(rng.uniform(-7, 7, (t, 1)))).astype(np.float32)
        x = wide[:, 2 : 2 + h]  # rows strided by h + 5
        w = (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)
        got = kern.rmsnorm(x, w, eps, threads=1)
        delta = bitdiff(kern.rmsnorm(x, w, eps, threads=threads), got)
        parts = np.concatenate([kern.rmsnorm(x[a:b], w, eps, threads=threads) for a, b in cuts(t, seed)])
        delta = max(delta, bitdiff(parts, got))
        big = np.tile(x, (max(1, 33000 // x.size + 1), 1))  # past the threading threshold
        delta = max(delta, bitdiff(kern.rmsnorm(big, w, eps, threads=threads)[:t], got))
        exact = exact_rmsnorm(x, w, eps)
        nz = exact != 0
        bound = rmsnorm_bound_u(-(-h // kern.vl) + lanes)
        ratio = float(np.max(rel_u(got[nz], exact[nz]), initial=0.0)) / bound
        evidence.observe("rmsnorm_err_over_bound", ratio)
        evidence.observe("rmsnorm_delta", delta)
        assert delta == 0, f"a row's bits depend on the other rows or the threads: {delta}"
        assert ratio <= 1 and np.array_equal(got[~nz], exact[~nz].astype(np.float32)), ratio

    prop()


# ---- rope ----------------------------------------------------------------------------------------------


def rope_tables(theta: float, d: int, n_pos: int) -> tuple[np.ndarray, np.ndarray]:
    """Half-split RoPE tables (n_pos, d) float32: angle pos * theta^(-2i/d) in float64, cos/sin rounded once."""
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(n_pos, dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=1)  # (n_pos, d)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def test_rope_has_numpys_float32_bits_and_is_within_2u_of_float64(kern, evidence):
    """Kernel.rope: 1-200 rows of 1-8 heads of D = 2-128 (even; tails past whole vectors), heads read as views
    into wider rows, positions anywhere in the table, 1-4 threads (the rows also repeated past the threading
    threshold). Bits equal numpy's float32
    x1*c - x2*s, x2*c + x1*s (written here); error against float64 on the same table values
    <= 2u (|x1 c| + |x2 s|) (two roundings of products, one of the sum); rows are their own."""

    @given(
        t=st.integers(1, 200),
        heads=st.integers(1, 8),
        half=st.integers(1, 64),
        theta=st.sampled_from([10000.0, 500000.0]),
        threads=threads_st,
        seed=seeds,
    )
    def prop(t, heads, half, theta, threads, seed):
        d = 2 * half
        rng = np.random.default_rng(seed)
        cos, sin = rope_tables(theta, d, 4096)
        qkv = (rng.standard_normal((t, (heads + 3) * d)) * 3).astype(np.float32)
        x = qkv[:, d : d + heads * d].reshape(t, heads, d)  # (T, H, D): heads as views into a wider row
        pos = rng.integers(0, 4096, t)
        got = kern.rope(x, cos, sin, pos, threads=1)
        delta = bitdiff(kern.rope(x, cos, sin, pos, threads=threads), got)
        for a, b in cuts(t, seed):
            delta = max(delta, bitdiff(kern.rope(x[a:b], cos, sin, pos[a:b], threads=threads), got[a:b]))
        reps = -(-65536 // x.size)  # kv_rope threads from 65536 values on: the rows repeated past that
        big = kern.rope(np.tile(x, (reps, 1, 1)), cos, sin, np.tile(pos, reps), threads=threads)
        delta = max(delta, bitdiff(big[-t:], got))
        c, s = cos[pos][:, None, :], sin[pos][:, None, :]  # (T, 1, D)
        x1, x2 = x[..., :half], x[..., half:]
        want = np.concatenate([x1 * c[..., :half] - x2 * s[..., :half], x2 * c[..., half:] + x1 * s[..., half:]], -1)
        mismatched = int((got.view(np.uint32) != want.view(np.uint32)).sum())
        a1, a2, c64, s64 = (v.astype(np.float64) for v in (x1, x2, c, s))
        exact = np.concatenate(
            [a1 * c64[..., :half] - a2 * s64[..., :half], a2 * c64[..., half:] + a1 * s64[..., half:]], -1
        )
        mag = np.concatenate(
            [
                np.abs(a1 * c64[..., :half]) + np.abs(a2 * s64[..., :half]),
                np.abs(a2 * c64[..., half:]) + np.abs(a1 * s64[..., half:]),
            ],
            -1,
        )
        ratio = float(np.max(np.abs(got - exact) / (2 * U * (1 + U) * mag)))
        evidence.observe("rope_delta", delta)
        evidence.count("rope_mismatches", mismatched)
        evidence.observe("rope_err_over_bound", ratio)
        assert delta == 0, f"rows depend on the other rows or the threads: {delta}"
        assert mismatched == 0, f"{mismatched} values are not numpy's float32 operations (D={d})"
        assert ratio <= 1, ratio

    prop()


# ---- attention and its softmax -------------------------------------------------------------------------


def attention_case(draw_rng, n: int, t: int, hkv: int, g: int, d: int, window: int | None, temp: float, pad: int):
    """q (T, Hkv, G, D); k, v views (n, Hkv*D) of rows strided by Hkv*D + pad; lo, hi per query (the last T
    rows, causal, windowed)."""
    rng = draw_rng
    q = (rng.standard_normal((t, hkv, g, d)) * temp).astype(np.float32)
    kv = rng.standard_normal((2, n, hkv * d + pad)).astype(np.float32)
    k, v = kv[0][:, : hkv * d], kv[1][:, : hkv * d]
    hi = np.arange(n - t + 1, n + 1, dtype=np.int64)
    lo = np.zeros(t, dtype=np.int64) if window is None else np.maximum(hi - window, 0)
    return q, k, v, lo, hi


def attention_bound(q, k, v, lo, hi, scale, vl):
    """Per query and output value, float64: the exact attention o and the first-order bound on |o_hat - o|:
    (2 max_j eta_j + gamma_n + gamma_sigma + u) * A_d with A_d = sum_j p_j |v_jd| / sum_j p_j, where
    eta_j = scale gamma_D sum_d |q_d k_jd| + u |s_j| + u |s_j - m| + E_exp bounds score j's relative weight
    error (dot product, scale, s - m, exp), n = keys (the fma chain of p_j v_j), sigma = ceil(n/VL) +
    log2(VL) (the lane sums of p); keys whose weight the kernel flushes (s_j - m < -87) add their exact
    weight (< 1.7e-38 of the largest) times |v|. Times 1.01 for second-order terms (eta <= 1e-4 here)."""
    t, hkv, g, d = q.shape
    o = np.zeros((t, hkv, g, d))
    bound = np.zeros((t, hkv, g, d))
    gam = lambda m: m * U / (1 - m * U)  # noqa: E731
    for i in range(t):
        for h in range(hkv):
            kh = k[lo[i] : hi[i], h * d : (h + 1) * d].astype(np.float64)  # (n, D)
            vh = v[lo[i] : hi[i], h * d : (h + 1) * d].astype(np.float64)
            n = hi[i] - lo[i]
            for m in range(g):
                qm = q[i, h, m].astype(np.float64)
                s = scale * (kh @ qm)  # (n,)
                p = np.exp(s - s.max())
                o[i, h, m] = p @ vh / p.sum()
                eta = scale * gam(d) * (np.abs(kh) @ np.abs(qm)) + U * np.abs(s) + U * (s.max() - s) + EXP_BOUND_U * U
                flushed = (s - s.max()) < EXP_LO + 1  # near or past the flush: exact weight < e^-86
                eta_max = float(np.max(eta[~flushed], initial=0.0))
                sigma = -(-n // vl) + int(np.log2(vl))
                a_d = (p @ np.abs(vh)) / p.sum()
                rel = 2 * eta_max + gam(n) + gam(sigma) + U
                bound[i, h, m] = 1.01 * rel * a_d + 2 * (p[flushed] @ np.abs(vh[flushed])) / p.sum() + 2.0**-149
    return o.reshape(t, -1), bound.reshape(t, -1)


head_dims = st.one_of(st.sampled_from([8, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128]), st.integers(8, 128))


ATTEND_THREADED = 65536  # kernels.c kv_attend: below T * max keys * Hkv * G * D, one thread whatever is asked

# a prefill's queries, and a decode step's one or two queries over many keys: with few (query, KV head) items
# and 2+ threads, kv_attend gives each group member an item of its own (another split of the same arithmetic)
prefill_shapes = st.fixed_dictionaries(
    {"n": st.integers(1, 80), "t": st.integers(1, 24), "hkv": st.integers(1, 3), "g": st.integers(1, 4), "d": head_dims}
)
decode_shapes = st.fixed_dictionaries(
    {
        "n": st.integers(200, 300),
        "t": st.integers(1, 2),
        "hkv": st.integers(1, 2),
        "g": st.integers(3, 4),
        "d": st.integers(112, 128),
    }
)


def test_attention_is_within_its_bound_of_float64_and_a_querys_bits_are_its_own(kern, evidence):
    """Kernel.attend: 1-3 KV heads, groups of 1-4, head_dim 8-128 (partial value chunks, the scalar path when
    not a multiple of the vector width), 1-80 keys with the last 1-24 rows as queries, or a decode step's 1-2
    queries over 200-300 keys; with or without a window, rows strided or not, scores scaled up to 20x, 1-4
    threads. A query's bits equal the query alone, in any chunking of the queries, on any thread count, in a
    call large enough to be threaded (the queries repeated), and over a copy of only its visible rows; each
    output is within the first-order bound of attention_bound of the float64 reference."""

    @given(
        shape=st.one_of(prefill_shapes, decode_shapes),
        window=st.one_of(st.none(), st.integers(1, 300)),
        temp=st.sampled_from([0.1, 1.0, 5.0, 20.0]),
        pad=st.sampled_from([0, 3]),
        threads=threads_st,
        seed=seeds,
    )
    def prop(shape, window, temp, pad, threads, seed):
        n, hkv, g, d = shape["n"], shape["hkv"], shape["g"], shape["d"]
        t = min(shape["t"], n)
        rng = np.random.default_rng(seed)
        q, k, v, lo, hi = attention_case(rng, n, t, hkv, g, d, window, temp, pad)
        scale = 1.0 / np.sqrt(d)
        got = kern.attend(q, k, v, lo, hi, scale, threads=1)
        delta = bitdiff(kern.attend(q, k, v, lo, hi, scale, threads=threads), got)
        for a, b in cuts(t, seed):
            delta = max(delta, bitdiff(kern.attend(q[a:b], k, v, lo[a:b], hi[a:b], scale, threads=threads), got[a:b]))
        work = t * int((hi - lo).max()) * hkv * g * d
        reps = min(4096, -(-ATTEND_THREADED // work))  # the queries repeated: a call past the threading threshold
        big = kern.attend(np.tile(q, (reps, 1, 1, 1)), k, v, np.tile(lo, reps), np.tile(hi, reps), scale, threads)
        delta = max(delta, bitdiff(big[-t:], got))
        i = int(rng.integers(t))
        kc, vc = np.ascontiguousarray(k[lo[i] : hi[i]]), np.ascontiguousarray(v[lo[i] : hi[i]])
        alone = kern.attend(q[i : i + 1], kc, vc, np.array([0]), np.array([hi[i] - lo[i]]), scale, threads=threads)
        delta = max(delta, bitdiff(alone, got[i : i + 1]))
        exact, bound = attention_bound(q, k, v, lo, hi, scale, kern.vl)
        ratio = float(np.max(np.abs(got - exact) / bound))
        evidence.observe("attention_delta", delta)
        evidence.observe("attention_err_over_bound", ratio)
        evidence.count("attention_examples")
        vector = d % kern.vl == 0 and d <= 16 * kern.vl  # kernels.c's vector path for this head_dim
        evidence.count("scalar_head_dims", int(not vector))
        evidence.count("partial_value_chunks", int(vector and (d // kern.vl) % 4 != 0))
        evidence.count("threaded_items", int(threads > 1 and reps * work >= ATTEND_THREADED))
        evidence.count("split_group_items", int(threads > 1 and work >= ATTEND_THREADED and t * hkv < 4 * threads))
        assert delta == 0, f"a query's bits depend on the other queries, the threads or the rows it cannot see: {delta}"
        assert ratio <= 1, f"|o - o64| = {ratio:.3f} x the bound (n={n} D={d} G={g})"

    prop()


def test_softmax_weights_are_within_their_bound_of_float64(kern, evidence):
    """The softmax inside Kernel.attend, isolated: query e_0 (times a power of two) against keys whose first
    value is the score and values that are the identity rows, so the scores are exact and each output is one
    weight p_j / l. Relative error of each weight <= u|s_j - m| + E_exp + sum_i p_i eta_i / sum p +
    gamma_sigma + u with eta_i = u|s_i - m| + E_exp (the rounding of s - m, the exp, the lane sums, the
    divide); weights the kernel flushes (s_j - m < -87) are exactly 0 and their exact value < 1.7e-38."""

    @given(
        d=st.integers(8, 128),
        n=st.integers(1, 128),
        g=st.integers(1, 4),
        spread=st.sampled_from([1.0, 10.0, 60.0, 120.0]),
        threads=threads_st,
        seed=seeds,
    )
    def prop(d, n, g, spread, threads, seed):
        n = min(n, d)  # identity rows need n <= D
        rng = np.random.default_rng(seed)
        s = rng.uniform(-spread, spread / 4, n).astype(np.float32)
        k = np.zeros((n, d), dtype=np.float32)
        k[:, 0] = s
        v = np.eye(n, d, dtype=np.float32)
        amp = 2.0 ** rng.integers(-1, 2, g)  # each group member its own exact multiple of the scores
        q = np.zeros((1, 1, g, d), dtype=np.float32)
        q[0, 0, :, 0] = amp
        got = kern.attend(q, k, v, np.array([0]), np.array([n]), 1.0, threads=threads)[0].reshape(g, d)[:, :n]
        worst, flush_bad = 0.0, 0
        for m in range(g):
            sm = s.astype(np.float64) * amp[m]
            x = sm - sm.max()
            p = np.exp(x)
            want = p / p.sum()
            flushed = x < EXP_LO - 1e-3  # the kernel's float32 s - m is within 1e-3 of x: flushed for sure
            live = x > EXP_LO + 1e-3  # and never flushed
            eta = U * np.abs(x) + EXP_BOUND_U * U
            sigma = -(-n // kern.vl) + int(np.log2(kern.vl))
            rel = eta + (p[live] @ eta[live]) / p.sum() + sigma * U / (1 - sigma * U) + U
            bound = 1.01 * rel * want + 2.0**-149 + 2e-38 * (~live).sum()
            worst = max(worst, float(np.max(np.abs(got[m][live] - want[live]) / bound[live])))
            flush_bad += int(np.count_nonzero(got[m][flushed]) + np.count_nonzero(want[flushed] >= 1.7e-38))
        evidence.observe("softmax_err_over_bound", worst)
        evidence.count("softmax_flush_errors", flush_bad)
        assert worst <= 1 and flush_bad == 0, (worst, flush_bad)

    prop()


# ---- the numpy fallback's row-wise steps ----------------------------------------------------------------


def test_numpy_rowwise_steps_are_within_their_bounds_of_float64_and_rows_are_their_own(monkeypatch, evidence):
    """With the kernel switched off (kernels.load() -> None, as under KVPROOF_KERNEL=numpy): impl.model.llama's
    rmsnorm, silu and swiglu and impl.rope.apply_rope against float64. numpy's float32 exp within 4u
    (measured here on [-87, 88]); silu x / (1 + exp(-x)) within E + 2u, swiglu one rounding more, where
    x >= -87 (below, exp(-x) overflows near -88.7 and the result is 0: |error| < 1e-35);
    rmsnorm within gamma_H/2 + 5u (any summation order of H squares); rope within 2u (|x1 c| + |x2 s|);
    each row the bits of that row alone. Runs on every path."""
    from impl.model import llama
    from impl.rope import apply_rope

    monkeypatch.setattr(kernels, "load", lambda: None)

    @given(t=st.integers(1, 40), h=st.integers(1, 700), eps=st.sampled_from([1e-6, 1e-5, 0.1]), seed=seeds)
    def prop(t, h, eps, seed):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal((t, h)) * np.exp(rng.uniform(-7, 7, (t, 1)))).astype(np.float32)
        w = (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)
        got = llama.rmsnorm(x, w, eps)
        delta = max(bitdiff(llama.rmsnorm(x[a:b], w, eps), got[a:b]) for a, b in cuts(t, seed))
        exact = exact_rmsnorm(x, w, eps)
        nz = exact != 0
        r_ratio = float(np.max(rel_u(got[nz], exact[nz]), initial=0.0)) / rmsnorm_bound_u(h)
        gu = (rng.standard_normal((t, 2 * h)) * np.exp(rng.uniform(-3, 4.4, (t, 1)))).astype(np.float32)
        gate, up = gu[:, :h], gu[:, h:]
        sg, sw = llama.silu(np.ascontiguousarray(gate)), llama.swiglu(gu, h)
        delta = max(delta, max(bitdiff(llama.swiglu(gu[a:b], h), sw[a:b]) for a, b in cuts(t, seed + 1)))
        es = exact_silu(gate)
        ew = es * up.astype(np.float64)
        ok = (gate >= -87) & (np.abs(es) >= FLT_MIN) & (np.abs(ew) >= FLT_MIN)  # below -88.7 exp(-x) overflows
        s_worst = float(np.max(rel_u(sg[ok], es[ok]), initial=0.0))
        w_worst = float(np.max(rel_u(sw[ok], ew[ok]), initial=0.0))
        per_u = np.maximum(np.abs(up[~ok]), 1)  # the tail's exact values are < 1.5e-36 (times |up| for swiglu)
        tail = max(
            float(np.max(np.abs(sg[~ok] - es[~ok]), initial=0.0)),
            float(np.max(np.abs(sw[~ok] - ew[~ok]) / per_u, initial=0.0)),
        )
        half = max(1, h // 16)
        d = 2 * half
        xr = (rng.standard_normal((t, 3, d)) * 3).astype(np.float32)
        cos, sin = rope_tables(10000.0, d, 512)
        pos = rng.integers(0, 512, t)
        rot = apply_rope(xr, cos[pos], sin[pos])
        delta = max(
            delta, max(bitdiff(apply_rope(xr[a:b], cos[pos[a:b]], sin[pos[a:b]]), rot[a:b]) for a, b in cuts(t, seed))
        )
        c64, s64 = cos[pos][:, None, :].astype(np.float64), sin[pos][:, None, :].astype(np.float64)
        a1, a2 = xr[..., :half].astype(np.float64), xr[..., half:].astype(np.float64)
        ex = np.concatenate(
            [a1 * c64[..., :half] - a2 * s64[..., :half], a2 * c64[..., half:] + a1 * s64[..., half:]], -1
        )
        mag = np.concatenate(
            [
                np.abs(a1 * c64[..., :half]) + np.abs(a2 * s64[..., :half]),
                np.abs(a2 * c64[..., half:]) + np.abs(a1 * s64[..., half:]),
            ],
            -1,
        )
        rope_ratio = float(np.max(np.abs(rot - ex) / (2 * U * (1 + U) * mag)))
        xe = np.clip(rng.standard_normal(4 * h) * 30, -87, 88).astype(np.float32)  # results normal and finite
        e_worst = float(np.max(rel_u(np.exp(xe), np.exp(xe.astype(np.float64)))))
        evidence.observe("numpy_delta", delta)
        evidence.observe("numpy_rmsnorm_err_over_bound", r_ratio)
        evidence.observe("numpy_exp_rel_u", e_worst)
        evidence.observe("numpy_silu_rel_u", s_worst)
        evidence.observe("numpy_swiglu_rel_u", w_worst)
        evidence.observe("numpy_silu_tail_abs", tail)
        evidence.observe("numpy_rope_err_over_bound", rope_ratio)
        assert delta == 0, f"a row's bits depend on the rows fed with it: {delta}"
        assert r_ratio <= 1 and rope_ratio <= 1, (r_ratio, rope_ratio)
        assert e_worst <= NUMPY_EXP_BOUND_U, e_worst
        assert s_worst <= NUMPY_EXP_BOUND_U + 2 and w_worst <= NUMPY_EXP_BOUND_U + 3 and tail < 1e-35, (
            s_worst,
            w_worst,
        )

    prop()
