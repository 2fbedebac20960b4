"""Witnesses for KERNEL-ACC (obligations/KERNEL-ACC.yaml), part 2: the C kernel's edges.

test_kernel_paths.py draws the shapes SmolLM2 never has; this file drives what those draws still leave
out, each against a reference written here (float64, or the documented float32 arithmetic computed
exactly), never the code under test:

- the default thread count (``Kernel.default_threads``): set, read back, and what ``threads=0`` calls use;
- the packed-row scratch of ``kv_linear``: a new calling thread's first call of any size (one row of K = 1
  up to a 1024 x 2048 prefill), then growth;
- every buffer flush against a page no access may reach: a byte read or written outside an argument
  faults instead of reading whatever the heap holds (the kernel's tails must stay inside their rows);
- GGUF scales at the ends of f16 (zero, subnormal, the top binade, infinities, NaN) in the quantized decode;
- many panels (65-300 columns: several work items of 4 panels, a single row split over threads);
- wide query groups (5-9, and MQA's 65-130 query heads over one KV head) and head_dims past 128.

Units and references as in test_kernel_paths.py (u = 2^-24).
"""

from __future__ import annotations

import ctypes
import mmap
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl import kernels
from witnesses import gguf_reference
from witnesses.test_kernel_paths import (
    NR,
    QBLOCK,
    attention_bound,
    attention_case,
    bitdiff,
    blocked_dot_reference,
    cuts,
    dot_bound,
    fma32,
    pack,
    random_blocks,
    rope_tables,
)

seeds = st.integers(0, 2**31 - 1)
threads_st = st.integers(1, 4)


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


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bits, every NaN counting as equal to every NaN (a NaN's payload is not specified here)."""
    if a.shape != b.shape:
        return False
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a[~na].view(np.uint32), b[~nb].view(np.uint32)))


def ptr(a: np.ndarray | None) -> int | None:
    return None if a is None else a.ctypes.data


# ---- the default thread count ----------------------------------------------------------------------------


def test_default_thread_count_is_set_read_back_and_threads0_calls_keep_their_bits(kern, evidence):
    """Kernel.default_threads(n) sets the count every ``threads=0`` call from this thread uses and returns the
    count before; n <= 0 only reads it. Walks 3, 1, 4, 2, 1, 3 (restoring the count it found): each set returns
    the previous one, reading (0, -2) returns the current one and changes nothing. Under each, threads=0 calls
    of every entry point on work past its threading threshold have the bits of threads=1 (thread counts never
    change bits: a default of 3 runs them threaded)."""
    rng = np.random.default_rng(27)
    x = rng.standard_normal((40, 70)).astype(np.float32)
    panels = pack(rng.standard_normal((90, 70)).astype(np.float32))
    g = (rng.standard_normal((64, 600)) * 3).astype(np.float32)  # 38400 values: past kv_silu's 32768
    u = rng.standard_normal((64, 600)).astype(np.float32)
    xr = rng.standard_normal((60, 4, 300)).astype(np.float32)  # rope: 72000 values, past 65536
    cos, sin = rope_tables(10000.0, 300, 512)
    pos = rng.integers(0, 512, 60)
    q, k, v, lo, hi = attention_case(rng, 80, 20, 2, 3, 64, None, 1.0, 0)
    raw = random_blocks("Q8_0", 161, 4, rng)  # 10 groups of 16 rows and one of 1: threaded on 2-4 threads
    rows = np.ascontiguousarray(raw.ctypes.data + np.arange(161) * raw.shape[1], dtype=np.uintp)
    xq = rng.standard_normal(128).astype(np.float32)

    def run(threads: int) -> list[np.ndarray]:
        y = np.empty((40, panels.shape[0] * NR), dtype=np.float32)
        kern.linear(x, panels, y, threads=threads)
        y1 = np.empty((1, panels.shape[0] * NR), dtype=np.float32)
        kern.linear(x[:1], panels, y1, threads=threads)
        yq = np.empty(161, dtype=np.float32)
        kern.linear_q(xq, rows, kernels.QTYPES["Q8_0"], yq, threads=threads)
        return [
            y,
            y1,
            yq,
            kern.silu(g, u, threads=threads),
            kern.rmsnorm(g, u[0], 1e-5, threads=threads),
            kern.rope(xr, cos, sin, pos, threads=threads),
            kern.attend(q, k, v, lo, hi, 0.125, threads=threads),
        ]

    want = run(1)
    before = kern.default_threads(0)
    errors, delta, prev = 0, 0.0, before
    try:
        for n in (3, 1, 4, 2, 1, 3):
            errors += int(kern.default_threads(n) != prev)
            errors += int(kern.default_threads(0) != n)
            errors += int(kern.default_threads(-2) != n)
            delta = max(delta, *(bitdiff(a, b) for a, b in zip(run(0), want, strict=True)))
            prev = n
    finally:
        kern.default_threads(before)
    errors += int(kern.default_threads(0) != before)
    evidence.count("default_thread_errors", errors)
    evidence.observe("default_thread_delta", delta)
    assert errors == 0, f"{errors} reads of the default thread count were not what was set"
    assert delta == 0, f"threads=0 calls under a default count changed bits: {delta}"


# ---- the packed-row scratch --------------------------------------------------------------------------------

# (T, K, C): a new thread's first call of 2 rows of K = 1 (6 floats of scratch), then growth in every step size,
# unusual K, a shrink (the scratch is kept), and a 1024-row prefill of K = 2048 (10 MB of scratch)
SCRATCH_CALLS = [
    (2, 1, 5),
    (7, 1, 16),
    (12, 1, 3),
    (2, 2, 17),
    (13, 1, 33),
    (3, 5, 1),
    (30, 7, 40),
    (6, 1, 2),
    (100, 33, 20),
    (257, 129, 50),
    (24, 64, 16),
    (600, 300, 33),
    (5, 3, 7),
    (1024, 2048, 16),
    (9, 1000, 18),
]


def test_linear_scratch_serves_any_first_call_and_growth_on_a_new_thread(kern, evidence):
    """kv_linear packs many rows into a scratch buffer kept per calling thread and grown on demand. On fresh
    threads (each starts with none), every call of SCRATCH_CALLS, in order, on 1 and on 3 threads: no
    MemoryError (kv_linear only fails when memory runs out), and the rows checked (first, middle, last and
    3 random) have the bits of the same row fed alone (the one-row path, which uses no scratch) and, for
    K <= 300, of the documented order computed exactly (blocked_dot_reference)."""
    failures: list[str] = []
    tally = {"mismatches": 0, "calls": 0}

    def sequence(threads: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        for t, k, c in SCRATCH_CALLS:
            x = rng.standard_normal((t, k)).astype(np.float32)
            w = rng.standard_normal((c, k)).astype(np.float32)
            panels = pack(w)
            y = np.empty((t, panels.shape[0] * NR), dtype=np.float32)
            try:
                kern.linear(x, panels, y, threads=threads)
            except MemoryError as e:
                failures.append(f"T={t} K={k} threads={threads}: {e}")
                continue
            rows = np.unique(np.r_[0, t // 2, t - 1, rng.integers(0, t, 3)])
            for i in rows:
                y1 = np.empty((1, panels.shape[0] * NR), dtype=np.float32)
                kern.linear(x[i : i + 1], panels, y1, threads=threads)
                tally["mismatches"] += int(bitdiff(y[i : i + 1, :c], y1[:, :c]) != 0)
            if k <= 300:
                want = blocked_dot_reference(x[rows], w)
                tally["mismatches"] += int((y[rows, :c].view(np.uint32) != want.view(np.uint32)).any())
            tally["calls"] += 1

    for threads, seed in ((1, 1), (3, 2)):
        th = threading.Thread(target=sequence, args=(threads, seed))
        th.start()
        th.join()
    evidence.count("scratch_failures", len(failures))
    evidence.count("scratch_mismatches", tally["mismatches"])
    evidence.count("scratch_calls", tally["calls"])
    assert not failures, failures[:3]
    assert tally["mismatches"] == 0, f"{tally['mismatches']} checks of packed rows differ from the row alone"


# ---- guard pages ------------------------------------------------------------------------------------------

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


class Guarded:
    """Copies of arrays placed flush against a page that no access may reach (PROT_NONE): ``at="end"`` puts
    the array's last byte just before a guard page, ``at="start"`` its first byte just after one. A read or
    write of even one byte outside the array faults (SIGSEGV: the witness process dies, so it fails)
    instead of reading what the heap holds there."""

    def __init__(self) -> None:
        self._maps: list[tuple[int, int]] = []

    def __call__(self, a: np.ndarray, at: str) -> np.ndarray:
        a = np.ascontiguousarray(a)
        nbytes = a.nbytes
        pages = -(-max(nbytes, 1) // PAGE)
        size = (pages + 2) * PAGE
        prot_rw, private_anon = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        base = _libc.mmap(None, size, prot_rw, private_anon, -1, 0)
        if base is None or base == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "mmap failed")
        self._maps.append((base, size))
        for guard in (base, base + (pages + 1) * PAGE):
            if _libc.mprotect(guard, PAGE, 0) != 0:
                raise OSError(ctypes.get_errno(), "mprotect failed")
        start = base + PAGE + (pages * PAGE - nbytes if at == "end" else 0)
        out = np.frombuffer((ctypes.c_char * nbytes).from_address(start), dtype=a.dtype, count=a.size)
        out = out.reshape(a.shape)
        out[...] = a
        return out

    def nothing(self) -> int:
        """An address whose first byte is a guard page: the pointer of an empty argument, which no access may
        follow."""
        base = _libc.mmap(None, PAGE, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if base is None or base == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "mmap failed")
        self._maps.append((base, PAGE))
        return base

    def close(self) -> None:
        for base, size in self._maps:
            _libc.munmap(base, size)
        self._maps.clear()


def test_every_entry_point_stays_inside_its_buffers(kern, evidence):
    """Each C entry point (kv_linear with 1 and more rows, kv_linear_q vector and scalar, kv_exp, kv_silu
    gated or not, kv_rmsnorm, kv_rope, kv_attend) on shapes with every kind of tail, 1-4 threads, with every
    input and output flush against a guard page, once at its end and once at its start: no access faults,
    and every output has the bits of the same call on ordinary arrays (through impl.kernels.Kernel). Rows at
    strides wider than their length give the same values and leave the gaps between output rows alone;
    empty calls (no rows, no values) touch no byte; kv_linear_q returns 0, and -1 for a K that is not a
    multiple of 32 or a type id other than Q4_1's and Q8_0's (touching nothing then either)."""
    lib = kern.lib

    @given(
        t=st.integers(1, 8),
        k=st.integers(1, 150),
        c=st.one_of(st.integers(1, 70), st.sampled_from([16, 32, 48, 64])),  # whole groups of 16 rows too
        f=st.integers(1, 70),
        half=st.integers(1, 40),
        g=st.integers(1, 5),
        d=st.sampled_from([8, 16, 24, 32, 40, 48, 64, 80, 96, 100, 128]),
        nb=st.integers(1, 4),
        qtype=st.sampled_from(sorted(QBLOCK)),
        threads=threads_st,
        seed=seeds,
    )
    def prop(t, k, c, f, half, g, d, nb, qtype, threads, seed):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((t, k)).astype(np.float32)
        panels = pack(rng.standard_normal((c, k)).astype(np.float32))
        p = panels.shape[0]
        lin = np.empty((t, p * NR), dtype=np.float32)
        kern.linear(x, panels, lin, threads=1)
        raw = random_blocks(qtype, c, nb, rng)
        order = rng.permutation(c)
        xq = rng.standard_normal(32 * nb).astype(np.float32)
        rows0 = np.ascontiguousarray(raw.ctypes.data + order * raw.shape[1], dtype=np.uintp)
        lq = np.empty(c, dtype=np.float32)
        kern.linear_q(xq, rows0, kernels.QTYPES[qtype], lq, threads=1)
        raw32 = random_blocks(qtype, 32, nb, rng)
        rows32 = np.ascontiguousarray(raw32.ctypes.data + np.arange(32) * raw32.shape[1], dtype=np.uintp)
        lq32 = np.empty(32, dtype=np.float32)
        kern.linear_q(xq, rows32, kernels.QTYPES[qtype], lq32, threads=1)
        xe = -np.abs(rng.standard_normal(f) * 10).astype(np.float32)
        gs = (rng.standard_normal((t, f)) * 3).astype(np.float32)
        us = rng.standard_normal((t, f)).astype(np.float32)
        wn = (1 + 0.1 * rng.standard_normal(f)).astype(np.float32)
        dr = 2 * half
        xr = rng.standard_normal((t, 2, dr)).astype(np.float32)
        cos, sin = rope_tables(10000.0, dr, 50)
        pos = rng.integers(0, 50, t)
        pos[0], pos[-1] = 0, 49  # the tables' first and last rows
        n = t + int(rng.integers(0, 20))
        q, kk, vv, lo, hi = attention_case(rng, n, t, 1, g, d, None, 1.0, 0)
        want = {
            "linear": lin,
            "linear_q": lq,
            "linear_q 32 rows": lq32,
            "exp": kern.exp(xe),
            "silu": kern.silu(gs, None, threads=1),
            "swiglu": kern.silu(gs, us, threads=1),
            "rmsnorm": kern.rmsnorm(gs, wn, 1e-5, threads=1),
            "rope": kern.rope(xr, cos, sin, pos, threads=1),
            "attend": kern.attend(q, kk, vv, lo, hi, 0.25, threads=1),
        }
        bad = []
        for at in ("end", "start"):
            gd = Guarded()
            try:
                got = {}
                gx, gw = gd(x, at), gd(panels, at)
                y = gd(np.zeros((t, p * NR), np.float32), at)
                lib.kv_linear(ptr(gx), t, k, ptr(gw), k, p, ptr(y), p * NR, threads)
                got["linear"] = y.copy()
                graw = gd(raw, at)
                grows = gd(np.ascontiguousarray(graw.ctypes.data + order * raw.shape[1], dtype=np.uintp), at)
                gxq, yq = gd(xq, at), gd(np.zeros(c, np.float32), at)
                for ref in (0, 1):
                    lib.kv_linear_q(ptr(gxq), 32 * nb, ptr(grows), c, kernels.QTYPES[qtype], ptr(yq), threads, ref)
                    got["linear_q" if ref == 0 else "linear_q scalar"] = yq.copy()
                # 32 rows: two whole groups of 16, the last one's rows ending at the guard
                graw32 = gd(raw32, at)
                grows32 = gd(
                    np.ascontiguousarray(graw32.ctypes.data + np.arange(32) * raw32.shape[1], dtype=np.uintp), at
                )
                y32 = gd(np.zeros(32, np.float32), at)
                lib.kv_linear_q(ptr(gxq), 32 * nb, ptr(grows32), 32, kernels.QTYPES[qtype], ptr(y32), threads, 0)
                got["linear_q 32 rows"] = y32.copy()
                gxe, ye = gd(xe, at), gd(np.zeros(f, np.float32), at)
                lib.kv_exp(ptr(gxe), f, ptr(ye))
                got["exp"] = ye.copy()
                ggs, gus, ys = gd(gs, at), gd(us, at), gd(np.zeros((t, f), np.float32), at)
                for name, uu in (("silu", None), ("swiglu", gus)):
                    lib.kv_silu(ptr(ggs), f, ptr(uu), f if uu is not None else 0, t, f, ptr(ys), f, threads)
                    got[name] = ys.copy()
                gwn, yn = gd(wn, at), gd(np.zeros((t, f), np.float32), at)
                lib.kv_rmsnorm(ptr(ggs), f, t, f, ptr(gwn), ctypes.c_float(1e-5), ptr(yn), f, threads)
                got["rmsnorm"] = yn.copy()
                gxr, gc, gsn = gd(xr, at), gd(cos, at), gd(sin, at)
                gpos, yr = gd(pos.astype(np.int64), at), gd(np.zeros((t, 2, dr), np.float32), at)
                lib.kv_rope(ptr(gxr), 2 * dr, t, 2, dr, ptr(gc), ptr(gsn), ptr(gpos), ptr(yr), threads)
                got["rope"] = yr.copy()
                gq, gk, gv = gd(q, at), gd(kk, at), gd(vv, at)
                glo, ghi = gd(lo, at), gd(hi, at)
                ya = gd(np.zeros((t, g * d), np.float32), at)
                lib.kv_attend(ptr(gq), t, 1, g, d, ptr(gk), ptr(gv), d, ptr(glo), ptr(ghi), 0.25, ptr(ya), threads)
                got["attend"] = ya.copy()
            finally:
                gd.close()
            want["linear_q scalar"] = want["linear_q"]
            for name, out in got.items():
                if not same_bits(out, want[name]):
                    bad.append(f"{name} ({at})")

        # rows at strides wider than their length (x, g, u at +3 floats, outputs at +5): the values are the
        # contiguous call's, and the gaps between output rows (NaN sentinels) are never written
        def padded(a: np.ndarray, extra: int) -> np.ndarray:
            wide = np.full((a.shape[0], a.shape[1] + extra), np.nan, dtype=np.float32)
            wide[:, : a.shape[1]] = a
            return wide

        xs, ys = padded(x, 3), padded(np.zeros((t, p * NR), np.float32), 5)
        lib.kv_linear(ptr(xs), t, k + 3, ptr(panels), k, p, ptr(ys), p * NR + 5, threads)
        strided = {"linear": ys}
        gsp, usp = padded(gs, 3), padded(us, 3)
        for name, uu in (("silu", None), ("swiglu", usp)):
            yo = padded(np.zeros((t, f), np.float32), 5)
            lib.kv_silu(ptr(gsp), f + 3, ptr(uu), f + 3 if uu is not None else 0, t, f, ptr(yo), f + 5, threads)
            strided[name] = yo
        yo = padded(np.zeros((t, f), np.float32), 5)
        lib.kv_rmsnorm(ptr(gsp), f + 3, t, f, ptr(wn), ctypes.c_float(1e-5), ptr(yo), f + 5, threads)
        strided["rmsnorm"] = yo
        for name, yo in strided.items():
            width = yo.shape[1] - 5
            if not (same_bits(yo[:, :width], want[name]) and np.isnan(yo[:, width:]).all()):
                bad.append(f"{name} (strided rows)")
        # empty calls touch nothing (every pointer a guard page) and return 0; kv_linear_q refuses what it
        # does not decode (-1: K not a multiple of 32, a type id other than Q4_1's and Q8_0's) and returns 0 else
        gd = Guarded()
        try:
            z = gd.nothing()
            rcs = [
                lib.kv_linear(z, 0, k, z, k, p, z, p * NR, threads),
                lib.kv_linear_q(z, 32 * nb, z, 0, kernels.QTYPES[qtype], z, threads, 0),
                lib.kv_linear_q(z, 32 * nb, z, 0, kernels.QTYPES[qtype], z, threads, 1),
            ]
            lib.kv_exp(z, 0, z)
            lib.kv_silu(z, f, z, f, 0, f, z, f, threads)
            lib.kv_silu(z, 0, None, 0, t, 0, z, 0, threads)
            lib.kv_rmsnorm(z, f, 0, f, z, ctypes.c_float(1e-5), z, f, threads)
            lib.kv_rope(z, 2 * dr, 0, 2, dr, z, z, z, z, threads)
            lib.kv_attend(z, 0, 1, g, d, z, z, d, z, z, 0.25, z, threads)
            # rows of no values: nothing but the positions (RoPE) and view bounds (attention) is read
            lib.kv_rmsnorm(z, 0, t, 0, z, ctypes.c_float(1e-5), z, 0, threads)
            gpos = gd(pos.astype(np.int64), "end")
            lib.kv_rope(z, 0, t, 0, dr, z, z, ptr(gpos), z, threads)
            lib.kv_rope(z, 0, t, 2, 0, z, z, ptr(gpos), z, threads)
            glo, ghi = gd(lo, "end"), gd(hi, "end")
            lib.kv_attend(z, t, 1, g, 0, z, z, 0, ptr(glo), ptr(ghi), 0.25, z, threads)
            lib.kv_attend(z, t, 0, g, d, z, z, 0, ptr(glo), ptr(ghi), 0.25, z, threads)  # no KV heads
            # views of no rows (lo == hi, below Kernel.attend's checks): no key or value is read, nothing faults
            ya = gd(np.zeros((t, 2 * d), np.float32), "end")
            lib.kv_attend(z, t, 1, 2, d, z, z, d, ptr(ghi), ptr(ghi), 0.25, ptr(ya), threads)
            gxq, grows = gd(xq, "end"), gd(rows0, "end")
            yq = gd(np.zeros(c, np.float32), "end")
            for kq, qt in ((32 * nb + 1 + int(rng.integers(31)), kernels.QTYPES[qtype]), (32 * nb, 3), (32 * nb, 0)):
                rcs.append(lib.kv_linear_q(ptr(gxq), kq, ptr(grows), c, qt, ptr(yq), threads, 0) + 1)
                rcs.append(lib.kv_linear_q(ptr(gxq), kq, ptr(grows), c, qt, ptr(yq), threads, 1) + 1)
        finally:
            gd.close()
        if any(rcs):
            bad.append(f"return codes {rcs} (0 expected: -1 + 1 for the refused calls)")
        evidence.count("guarded_calls", 2 * len(want))
        evidence.count("guarded_mismatches", len(bad))
        assert not bad, f"other bits with buffers against guard pages: {bad} (t={t} k={k} c={c} f={f} d={d} g={g})"

    prop()


# ---- quantized decode: f16 scales at the ends of their range ---------------------------------------------

F16_SPECIALS = np.array(
    [0.0, -0.0, 2.0**-24, -(2.0**-24), 3 * 2.0**-20, -(1023 * 2.0**-24), 2.0**-14, 32768.0, -40000.0, 65504.0]
    + [np.inf, -np.inf, np.nan],
    dtype=np.float16,
)


def test_quantized_decode_has_ggml_bits_for_f16_scales_at_the_ends_of_their_range(kern, evidence):
    """Kernel.linear_q (vector and scalar code, 1-4 threads) on Q4_1/Q8_0 blocks whose scales d (and Q4_1
    minima m) are drawn from F16_SPECIALS: zeros of both signs, subnormals (the f16 exponent 0), the smallest
    normal, the top binade (exponent 30, up to 65504), infinities and NaN (exponent 31). Each output equals
    the documented arithmetic on ggml's float32 weights (witnesses/gguf_reference.py: f16 widened exactly,
    then q*d (+ m) in float32) summed in the kernel's documented order, bit for bit; any NaN matches any NaN.
    Then crafted rows (non-negative x, every q positive, one block of a row in three with an infinite, NaN,
    largest or smallest scale: an infinity must stay an infinity, and a row's one NaN source gives the output
    its payload, quieted, as IEEE 754 propagation does in numpy and on x86 alike: these bits exactly), rows of
    33 blocks, and K = 0 (every output +0)."""

    @given(
        qtype=st.sampled_from(sorted(QBLOCK)),
        c=st.integers(1, 40),
        nb=st.integers(1, 5),
        share=st.sampled_from([0.3, 1.0]),
        threads=threads_st,
        seed=seeds,
    )
    def prop(qtype, c, nb, share, threads, seed):
        rng = np.random.default_rng(seed)
        raw = random_blocks(qtype, c, nb, rng).reshape(c, nb, QBLOCK[qtype])
        special = rng.random((c, nb)) < share
        for field in (0, 2) if qtype == "Q4_1" else (0,):
            vals = raw[:, :, field : field + 2].copy().view(np.float16)[..., 0]
            vals[special] = rng.choice(F16_SPECIALS, special.sum())
            raw[:, :, field : field + 2] = vals[..., None].view(np.uint8).reshape(c, nb, 2)
        raw = np.ascontiguousarray(raw.reshape(c, -1))
        rows = np.ascontiguousarray(raw.ctypes.data + np.arange(c) * raw.shape[1], dtype=np.uintp)
        k = 32 * nb
        x = rng.standard_normal(k).astype(np.float32)
        decode = gguf_reference.decode_q4_1 if qtype == "Q4_1" else gguf_reference.decode_q8_0
        with np.errstate(invalid="ignore", over="ignore"):
            want = blocked_dot_reference(x[None], decode(raw.reshape(-1)).reshape(c, k))[0]
        bad = 0
        for ref in (False, True):
            got = np.empty(c, dtype=np.float32)
            kern.linear_q(x, rows, kernels.QTYPES[qtype], got, threads=threads, reference=ref)
            bad += int(not same_bits(got, want))
        evidence.count("special_scale_mismatches", bad)
        evidence.count("special_scale_blocks", int(special.sum()))
        assert bad == 0, f"{qtype} c={c} K={k}: outputs are not ggml's arithmetic on f16 scales at the ends"

    prop()
    # crafted: non-negative x and blocks whose q are all positive, so an infinite scale gives an infinite output
    # (not NaN) and a NaN scale NaN; and K = 0, where every output is the empty sum, +0
    rng = np.random.default_rng(7)
    bad, cases = 0, 0
    for qtype in sorted(QBLOCK):
        # f16 bit patterns: +-inf, quiet and signalling NaNs with payloads, the largest and the smallest value
        for special in (0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x7D55, 0xFE3F, 0x7BFF, 0x0001):
            raw = random_blocks(qtype, 20, 3, rng).reshape(20, 3, QBLOCK[qtype])
            if qtype == "Q4_1":
                raw[:, :, 4:] = rng.integers(1, 16, raw[:, :, 4:].shape) * 17  # both nibbles 1-15
                raw[:, :, 2:4] = 0  # m = +0
            else:
                raw[:, :, 2:] = rng.integers(1, 128, raw[:, :, 2:].shape)
            raw[:, :, 1] &= 0x7F  # d >= 0: the f16 sign bit cleared
            raw[::3, 1, 0:2] = np.array([special], dtype=np.uint16).view(np.uint8)[None]
            raw = np.ascontiguousarray(raw.reshape(20, -1))
            rows = np.ascontiguousarray(raw.ctypes.data + np.arange(20) * raw.shape[1], dtype=np.uintp)
            x = np.abs(rng.standard_normal(96)).astype(np.float32)
            decode = gguf_reference.decode_q4_1 if qtype == "Q4_1" else gguf_reference.decode_q8_0
            with np.errstate(invalid="ignore", over="ignore"):
                want = blocked_dot_reference(x[None], decode(raw.reshape(-1)).reshape(20, 96))[0]
            for ref in (False, True):
                got = np.empty(20, dtype=np.float32)
                kern.linear_q(x, rows, kernels.QTYPES[qtype], got, threads=2, reference=ref)
                bad += int(not np.array_equal(got.view(np.uint32), want.view(np.uint32)))  # NaN payloads too
                cases += 1
        # a long row: 33 blocks (K = 1056, past 31 blocks)
        raw = random_blocks(qtype, 20, 33, rng)
        rows33 = np.ascontiguousarray(raw.ctypes.data + np.arange(20) * raw.shape[1], dtype=np.uintp)
        x = np.ones(34 * 32, np.float32)  # ones past the end: a read past x adds to the sum instead of nothing
        x[: 33 * 32] = rng.standard_normal(33 * 32)
        x = x[: 33 * 32]
        decode = gguf_reference.decode_q4_1 if qtype == "Q4_1" else gguf_reference.decode_q8_0
        want = blocked_dot_reference(x[None], decode(raw.reshape(-1)).reshape(20, 33 * 32))[0]
        for ref in (False, True):
            got = np.empty(20, dtype=np.float32)
            kern.linear_q(x, rows33, kernels.QTYPES[qtype], got, threads=2, reference=ref)
            bad += int(not same_bits(got, want))
            cases += 1
        for ref in (False, True):
            got = np.full(20, np.nan, dtype=np.float32)
            kern.linear_q(np.zeros(0, np.float32), rows, kernels.QTYPES[qtype], got, reference=ref)
            bad += int(not same_bits(got, np.zeros(20, np.float32)))
            cases += 1
    evidence.count("special_scale_mismatches", bad)
    assert bad == 0, f"{bad} of {cases} crafted decodes (infinite, NaN and extreme scales; K = 0) are not ggml's"


# ---- linear on many panels ----------------------------------------------------------------------------------


def test_linear_on_many_panels_has_the_documented_order_on_any_threads(kern, evidence):
    """Kernel.linear with 65-300 columns (5-19 panels: several work items of 4 panels, the 4-panel one-row
    tile, a single row split over 2-4 threads), 1-120 rows, K 1-130: bits equal to the documented order
    computed exactly (40 rows at most), to the row alone, to any chunking of the rows and to 1 thread, and
    within gamma_n sum|x_k w_k| of the float64 product."""

    @given(t=st.integers(1, 120), k=st.integers(1, 130), c=st.integers(65, 300), threads=threads_st, seed=seeds)
    def prop(t, k, c, threads, seed):
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal((t, k)) * np.exp(rng.uniform(-3, 3, (t, 1)))).astype(np.float32)
        w = rng.standard_normal((c, k)).astype(np.float32)
        panels = pack(w)

        def lin(xx, th):
            y = np.empty((xx.shape[0], panels.shape[0] * NR), dtype=np.float32)
            kern.linear(np.ascontiguousarray(xx), panels, y, threads=th)
            return y[:, :c]

        whole = lin(x, 1)
        delta = bitdiff(lin(x, threads), whole)
        delta = max(delta, bitdiff(np.concatenate([lin(x[a:b], threads) for a, b in cuts(t, seed)]), whole))
        for i in {0, t - 1, int(rng.integers(t))}:
            delta = max(delta, bitdiff(lin(x[i : i + 1], threads), whole[i : i + 1]))
        rows = np.unique(np.r_[0 : min(t, 24), t - 1, rng.integers(0, t, 15)])
        mismatched = int((whole[rows].view(np.uint32) != blocked_dot_reference(x[rows], w).view(np.uint32)).sum())
        y64 = x.astype(np.float64) @ w.T.astype(np.float64)
        scale = np.abs(x).astype(np.float64) @ np.abs(w.T).astype(np.float64)
        ratio = float(np.max(np.abs(whole - y64) / (dot_bound(k) * scale)))
        evidence.observe("wide_row_delta", delta)
        evidence.count("wide_order_mismatches", mismatched)
        evidence.observe("wide_err_over_bound", ratio)
        evidence.count("wide_threaded_rows", int(threads > 1))
        assert delta == 0, f"row bits depend on rows, chunking or threads: {delta} (T={t} K={k} C={c})"
        assert mismatched == 0, f"{mismatched} elements are not the documented order (T={t} K={k} C={c})"
        assert ratio <= 1, ratio

    prop()


# ---- attention: wide groups and wide heads -------------------------------------------------------------------

wide_shapes = st.fixed_dictionaries(
    {
        "n": st.integers(1, 60),
        "t": st.integers(1, 6),
        "hkv": st.integers(1, 2),
        "g": st.integers(5, 9),
        "d": st.sampled_from([136, 144, 160, 176, 192, 200, 208, 224, 240, 256, 264, 272]),
    }
)
mqa_shapes = st.fixed_dictionaries(
    {
        "n": st.integers(1, 40),
        "t": st.integers(1, 2),
        "hkv": st.just(1),
        "g": st.integers(65, 130),
        "d": st.sampled_from([8, 24, 32, 64, 80, 128]),
    }
)


def test_attention_on_wide_groups_and_heads_is_within_its_bound_and_a_querys_bits_are_its_own(kern, evidence):
    """Kernel.attend with groups of 5-9 query heads per KV head (a full group of 4 and a remainder), MQA's
    65-130 query heads over one KV head, head_dims 136-272 (8-16 value chunks of 16 and partial ones; past 256
    the scalar path), 1-4 threads, causal views or any views (each query its own [lo, hi): later queries may
    see fewer rows, further on), queries scaled from 1e-6 (scores near 0, where the dot product's bound is
    tiny) to 5: a query's bits equal the query alone, in any chunking, on 1 thread and in a call past the
    threading threshold; each output within attention_bound of the float64 reference."""

    @given(
        shape=st.one_of(wide_shapes, mqa_shapes),
        any_views=st.booleans(),
        temp=st.sampled_from([1e-6, 1.0, 5.0]),
        threads=threads_st,
        seed=seeds,
    )
    def prop(shape, any_views, temp, threads, seed):
        n, hkv, g, d = shape["n"], shape["hkv"], shape["g"], shape["d"]
        t = min(shape["t"], n)
        rng = np.random.default_rng(seed)
        q, k, v, lo, hi = attention_case(rng, n, t, hkv, g, d, None, temp, 0)
        if any_views:  # the first query sees all n rows; the others 1-3 rows ending anywhere
            hi = rng.integers(1, n + 1, t)
            hi[0] = n
            lo = np.maximum(hi - rng.integers(1, 4, t), 0)
            lo[0] = 0
        scale = 1.0 / np.sqrt(d)
        got = kern.attend(q, k, v, lo, hi, scale, threads=1)
        delta = bitdiff(kern.attend(q, k, v, lo, hi, scale, threads=threads), got)
        for a, b in cuts(t, seed):
            delta = max(delta, bitdiff(kern.attend(q[a:b], k, v, lo[a:b], hi[a:b], scale, threads=threads), got[a:b]))
        i = int(rng.integers(t))
        alone = kern.attend(q[i : i + 1], k, v, lo[i : i + 1], hi[i : i + 1], scale, threads=threads)
        delta = max(delta, bitdiff(alone, got[i : i + 1]))
        reps = max(1, -(-65536 // (t * n * hkv * g * d)))
        big = kern.attend(np.tile(q, (reps, 1, 1, 1)), k, v, np.tile(lo, reps), np.tile(hi, reps), scale, threads)
        delta = max(delta, bitdiff(big[-t:], got))
        exact, bound = attention_bound(q, k, v, lo, hi, scale, kern.vl)
        ratio = float(np.max(np.abs(got - exact) / bound))
        evidence.observe("wide_attention_delta", delta)
        evidence.observe("wide_attention_err_over_bound", ratio)
        evidence.count("wide_group_examples", int(g <= 9))
        evidence.count("mqa_examples", int(g > 64))
        assert delta == 0, f"a query's bits depend on the other queries or the threads: {delta} (D={d} G={g})"
        assert ratio <= 1, f"|o - o64| = {ratio:.3f} x the bound (n={n} D={d} G={g})"

    prop()


# ---- the Python entry points: layouts they accept, arguments they refuse ------------------------------------


def test_kernel_methods_accept_every_documented_layout_and_refuse_the_rest(kern, evidence):
    """impl.kernels.Kernel's methods are the C kernel's only callers in impl, and their checks are what keep
    the kernel inside its arguments. Accepted layouts give the bits of the same values laid out plainly:
    strided rows (x, g, u, out wider than needed, k/v rows with another stride or column step, q and
    weights not contiguous or float64, positions and view bounds as int32 lists, 1-D silu), and the columns
    of out past P*16 are left alone. Each refused call (one condition of one check broken, everything else
    valid) raises AssertionError or ValueError before the kernel runs. A Kernel made anew from the loaded
    library has its attributes and the loaded one's bits on every entry point."""
    rng = np.random.default_rng(2027)
    mism: list[str] = []

    def check(name: str, got: np.ndarray, want: np.ndarray) -> None:
        if not same_bits(np.asarray(got), want):
            mism.append(name)

    # exp: float64 and strided input converted; shape kept; empty input fine
    xe = -np.abs(rng.standard_normal((3, 10)) * 5).astype(np.float32)
    want_e = kern.exp(np.ascontiguousarray(xe))
    check("exp float64", kern.exp(xe.astype(np.float64)), want_e)
    wide_e = np.zeros((3, 20), np.float32)
    wide_e[:, ::2] = xe
    check("exp strided", kern.exp(wide_e[:, ::2]), want_e)
    check("exp empty", kern.exp(np.zeros((0, 4), np.float32)), np.zeros((0, 4), np.float32))
    # linear: x rows strided, out wider than P*16 (extra columns untouched)
    t, k, c = 9, 37, 21
    x = rng.standard_normal((t, k)).astype(np.float32)
    panels = pack(rng.standard_normal((c, k)).astype(np.float32))
    p = panels.shape[0]
    want_l = np.empty((t, p * NR), np.float32)
    kern.linear(x, panels, want_l, threads=1)
    xw = np.zeros((t, k + 3), np.float32)
    xw[:, :k] = x
    out = np.full((t, p * NR + 7), np.nan, np.float32)
    kern.linear(xw[:, :k], panels, out, threads=2)
    check("linear strided", out[:, : p * NR], want_l)
    if not np.isnan(out[:, p * NR :]).all():
        mism.append("linear wrote past P*16 columns")
    # silu: 1-D, strided g and u
    g = (rng.standard_normal((5, 33)) * 3).astype(np.float32)
    u = rng.standard_normal((5, 33)).astype(np.float32)
    want_s, want_w = kern.silu(np.ascontiguousarray(g), None, 1), kern.silu(g, u, 1)
    gw, uw = np.zeros((5, 40), np.float32), np.zeros((5, 36), np.float32)
    gw[:, :33], uw[:, :33] = g, u
    check("silu strided", kern.silu(gw[:, :33], None, 2), want_s)
    check("swiglu strided", kern.silu(gw[:, :33], uw[:, :33], 2), want_w)
    check("silu 1-D", kern.silu(g[2], None), want_s[2])
    check("swiglu 1-D", kern.silu(g[2], u[2]), want_w[2])
    # rmsnorm: strided x, float64 and strided weight
    wn = (1 + 0.1 * rng.standard_normal(33)).astype(np.float32)
    want_n = kern.rmsnorm(np.ascontiguousarray(g), wn, 1e-5, 1)
    check("rmsnorm strided", kern.rmsnorm(gw[:, :33], wn.astype(np.float64), 1e-5, 2), want_n)
    ww = np.zeros(66, np.float32)
    ww[::2] = wn
    check("rmsnorm strided weight", kern.rmsnorm(g, ww[::2], 1e-5), want_n)
    # rope: heads as views into wider rows, positions as an int32 list
    d = 12
    cos, sin = rope_tables(10000.0, d, 64)
    xr = rng.standard_normal((4, 3, d)).astype(np.float32)
    pos = rng.integers(0, 64, 4)
    want_r = kern.rope(np.ascontiguousarray(xr), cos, sin, pos, 1)
    rw = np.zeros((4, 5 * d), np.float32)
    rw[:, d : 4 * d] = xr.reshape(4, -1)
    check(
        "rope views", kern.rope(rw[:, d : 4 * d].reshape(4, 3, d), cos, sin, pos.astype(np.int32).tolist(), 2), want_r
    )
    # attend: q float64 and strided, k and v with different row strides or a column step, lo/hi int32
    q, kk, vv, lo, hi = attention_case(rng, 12, 3, 2, 2, 16, None, 1.0, 0)
    want_a = kern.attend(q, kk, vv, lo, hi, 0.25, 1)
    kw, vw = np.zeros((12, 40), np.float32), np.zeros((12, 64), np.float32)
    kw[:, :32], vw[:, ::2] = kk, vv
    check("attend strided k, v", kern.attend(q.astype(np.float64), kw[:, :32], vw[:, ::2], lo, hi, 0.25, 2), want_a)
    qw = np.zeros((3, 2, 2, 32), np.float32)
    qw[..., ::2] = q
    lo32, hi32 = lo.astype(np.int32).tolist(), hi.astype(np.int32).tolist()
    check("attend strided q", kern.attend(qw[..., ::2], kk, vv, lo32, hi32, 0.25), want_a)
    check("attend v strided alone", kern.attend(q, kk, vw[:, ::2], lo, hi, 0.25), want_a)
    vw2 = np.zeros((12, 35), np.float32)
    vw2[:, :32] = vv
    check("attend v rows strided alone", kern.attend(q, kk, vw2[:, :32], lo, hi, 0.25), want_a)
    # one key/value row broadcast to 40 (row stride 0): the values of 40 equal rows (4 value chunks: full ones)
    qb, kb1, vb1, lob, hib = attention_case(rng, 40, 2, 1, 2, 64, None, 1.0, 0)
    kb, vb = np.broadcast_to(kb1[:1], (40, 64)), np.broadcast_to(vb1[:1], (40, 64))
    check(
        "attend broadcast rows",
        kern.attend(qb, kb, vb, lob, hib, 0.25),
        kern.attend(qb, kb.copy(), vb.copy(), lob, hib, 0.25),
    )
    # rows that overlap (row stride 4 bytes) with a column step of 8 in k and 4 in v, and the other way round:
    # Kernel.attend must copy whichever has no unit column step
    buf_k, buf_v = rng.standard_normal(200).astype(np.float32), rng.standard_normal(200).astype(np.float32)
    qo = rng.standard_normal((1, 1, 1, 32)).astype(np.float32)
    for name, ko, vo in (
        (
            "k",
            np.lib.stride_tricks.as_strided(buf_k, (12, 32), (4, 8)),
            np.lib.stride_tricks.as_strided(buf_v, (12, 32), (4, 4)),
        ),
        (
            "v",
            np.lib.stride_tricks.as_strided(buf_k, (12, 32), (4, 4)),
            np.lib.stride_tricks.as_strided(buf_v, (12, 32), (4, 8)),
        ),
    ):
        lo1, hi1 = np.array([2]), np.array([12])
        want_o = kern.attend(qo, np.ascontiguousarray(ko), np.ascontiguousarray(vo), lo1, hi1, 0.25)
        check(f"attend overlapping rows, {name} column step 8", kern.attend(qo, ko, vo, lo1, hi1, 0.25), want_o)
    # k and v with different row strides where one of them has rows 4 bytes apart (overlapping), and no queries
    kn = rng.standard_normal((12, 32)).astype(np.float32)
    for name, ko, vo in (
        ("k plain, v rows overlapping", kn, np.lib.stride_tricks.as_strided(buf_v, (12, 32), (4, 4))),
        ("k rows overlapping, v plain", np.lib.stride_tricks.as_strided(buf_k, (12, 32), (4, 4)), kn),
    ):
        want_o = kern.attend(qo, np.ascontiguousarray(ko), np.ascontiguousarray(vo), lo1, hi1, 0.25)
        check(f"attend {name}", kern.attend(qo, ko, vo, lo1, hi1, 0.25), want_o)
    check("attend no queries", kern.attend(q[:0], kk, vv, lo[:0], hi[:0], 0.25), np.zeros((0, 64), np.float32))
    # a Kernel made anew from the same library: its attributes and every entry point, with the loaded one's bits
    fresh = kernels.Kernel(kern.path, build=kern.build)
    attrs = (fresh.path, fresh.build, fresh.isa, fresh.q_isa, fresh.vl, fresh.q_vector)
    if attrs != (kern.path, kern.build, kern.isa, kern.q_isa, kern.vl, kern.isa.startswith("avx")):
        mism.append(f"a new Kernel's attributes {attrs}")
    desc = fresh.describe()
    if not (desc.startswith(fresh.isa) and f"build {fresh.build}:" in desc) or any(
        fl not in desc for fl in kernels.ISA_BUILDS[fresh.build].flags
    ):
        mism.append(f"describe() = {desc!r}")
    fl = np.empty((t, p * NR), np.float32)
    fresh.linear(x, panels, fl, threads=2)
    check("fresh linear", fl, want_l)
    check("fresh exp", fresh.exp(xe), want_e)
    check("fresh silu", fresh.silu(g, u, 2), want_w)
    check("fresh rmsnorm", fresh.rmsnorm(g, wn, 1e-5, 2), want_n)
    check("fresh rope", fresh.rope(xr, cos, sin, pos, 2), want_r)
    check("fresh attend", fresh.attend(q, kk, vv, lo, hi, 0.25, 2), want_a)
    before = fresh.default_threads(0)
    if fresh.default_threads(before) != before or kern.default_threads(0) != before:
        mism.append("fresh default_threads")
    # linear_q: the documented call works
    raw = random_blocks("Q4_1", 20, 2, rng)
    rows = np.ascontiguousarray(raw.ctypes.data + np.arange(20) * raw.shape[1], dtype=np.uintp)
    xq = rng.standard_normal(64).astype(np.float32)
    yq = np.empty(20, np.float32)
    kern.linear_q(xq, rows, kernels.QTYPES["Q4_1"], yq)
    fq = np.empty(20, np.float32)
    fresh.linear_q(xq, rows, kernels.QTYPES["Q4_1"], fq, threads=2)
    check("fresh linear_q", fq, yq)

    f64 = np.float64
    refusals = {
        "exp x > 0": lambda: kern.exp(np.array([-1.0, 0.5], np.float32)),
        "exp NaN": lambda: kern.exp(np.array([-1.0, np.nan], np.float32)),
        "linear packed shape": lambda: kern.linear(x, panels[:, :-1], np.empty((t, p * NR), np.float32)),
        "linear packed dtype": lambda: kern.linear(x, panels.astype(f64), np.empty((t, p * NR), np.float32)),
        "linear packed layout": lambda: kern.linear(x, np.asfortranarray(panels), np.empty((t, p * NR), np.float32)),
        "linear x dtype": lambda: kern.linear(x.astype(f64), panels, np.empty((t, p * NR), np.float32)),
        "linear x columns": lambda: kern.linear(xw[:, ::2][:, :k], panels, np.empty((t, p * NR), np.float32)),
        "linear out dtype": lambda: kern.linear(x, panels, np.empty((t, p * NR), f64)),
        "linear out columns": lambda: kern.linear(x, panels, np.empty((t, 2 * p * NR), np.float32)[:, ::2]),
        "linear out rows": lambda: kern.linear(x, panels, np.empty((t - 1, p * NR), np.float32)),
        "linear out width": lambda: kern.linear(x, panels, np.empty((t, p * NR - 1), np.float32)),
        "silu 3-D": lambda: kern.silu(g.reshape(5, 3, 11)),
        "silu dtype": lambda: kern.silu(g.astype(f64)),
        "silu columns": lambda: kern.silu(gw[:, ::2]),
        "swiglu shape": lambda: kern.silu(g, u[:, :32]),
        "swiglu dtype": lambda: kern.silu(g, u.astype(f64)),
        "swiglu columns": lambda: kern.silu(g[:, :16], uw[:, ::2][:, :16]),
        "rmsnorm dtype": lambda: kern.rmsnorm(g.astype(f64), wn, 1e-5),
        "rmsnorm columns": lambda: kern.rmsnorm(gw[:, ::2], wn[:20], 1e-5),
        "rmsnorm weight": lambda: kern.rmsnorm(g, wn[:32], 1e-5),
        "rope dtype": lambda: kern.rope(xr.astype(f64), cos, sin, pos),
        "rope columns": lambda: kern.rope(np.zeros((4, 3, 2 * d), np.float32)[..., ::2], cos, sin, pos),
        "rope heads": lambda: kern.rope(np.zeros((4, 3, d + 2), np.float32)[..., :d], cos, sin, pos),
        "rope odd d": lambda: kern.rope(
            np.zeros((4, 3, 11), np.float32), np.ascontiguousarray(cos[:, :11]), np.ascontiguousarray(sin[:, :11]), pos
        ),
        "rope table shapes": lambda: kern.rope(xr, cos, sin[:32], pos),
        "rope table width": lambda: kern.rope(
            xr, np.ascontiguousarray(cos[:, :10]), np.ascontiguousarray(sin[:, :10]), pos
        ),
        "rope cos layout": lambda: kern.rope(xr, np.asfortranarray(cos), sin, pos),
        "rope sin layout": lambda: kern.rope(xr, cos, np.asfortranarray(sin), pos),
        "rope positions": lambda: kern.rope(xr, cos, sin, pos[:3]),
        "linear_q x dtype": lambda: kern.linear_q(xq.astype(f64), rows, 2, np.empty(20, np.float32)),
        "linear_q x layout": lambda: kern.linear_q(np.repeat(xq, 2)[::2], rows, 2, np.empty(20, np.float32)),
        "linear_q out dtype": lambda: kern.linear_q(xq, rows, 2, np.empty(20, f64)),
        "linear_q out layout": lambda: kern.linear_q(xq, rows, 2, np.empty(40, np.float32)[::2]),
        "linear_q rows dtype": lambda: kern.linear_q(xq, rows.astype(np.int32), 2, np.empty(20, np.float32)),
        "linear_q rows layout": lambda: kern.linear_q(xq, np.repeat(rows, 2)[::2], 2, np.empty(20, np.float32)),
        "linear_q out shape": lambda: kern.linear_q(xq, rows, 2, np.empty(19, np.float32)),
        "linear_q qtype": lambda: kern.linear_q(xq, rows, 3, np.empty(20, np.float32)),
        "linear_q K": lambda: kern.linear_q(xq[:48], rows, 2, np.empty(20, np.float32)),
        "attend k, v shapes": lambda: kern.attend(q, kk, vv[:11], lo, hi, 0.25),
        "attend k width": lambda: kern.attend(q, kk[:, :16], vv[:, :16], lo, hi, 0.25),
        "attend k dtype": lambda: kern.attend(q, kk.astype(f64), vv, lo, hi, 0.25),
        "attend v dtype": lambda: kern.attend(q, kk, vv.astype(f64), lo, hi, 0.25),
        "attend lo shape": lambda: kern.attend(q, kk, vv, lo[:2], hi, 0.25),
        "attend hi shape": lambda: kern.attend(q, kk, vv, lo, hi[:2], 0.25),
        "attend lo < 0": lambda: kern.attend(q, kk, vv, lo - 1, hi, 0.25),
        "attend empty view": lambda: kern.attend(q, kk, vv, hi, hi, 0.25),
        "attend hi > n": lambda: kern.attend(q, kk, vv, lo, hi + 1, 0.25),
        "attend one lo < 0": lambda: kern.attend(q, kk, vv, lo - np.array([1, 0, 0]), hi, 0.25),
        "attend 1 query lo < 0": lambda: kern.attend(q[:1], kk, vv, lo[:1] - 1, hi[:1], 0.25),
        "attend 1 query empty view": lambda: kern.attend(q[:1], kk, vv, hi[:1], hi[:1], 0.25),
        "attend 1 query hi > n": lambda: kern.attend(q[:1], kk, vv, lo[:1], hi[:1] * 0 + 13, 0.25),
    }
    not_refused = []
    for name, call in refusals.items():
        try:
            call()
        except (AssertionError, ValueError):
            continue
        not_refused.append(name)
    evidence.count("layout_mismatches", len(mism))
    evidence.count("refusals_missed", len(not_refused))
    evidence.count("refusals_tried", len(refusals))
    assert not mism, f"accepted layouts gave other bits: {mism}"
    assert not not_refused, f"calls that should be refused ran: {not_refused}"


# ---- the model's row-wise steps and RoPE tables: which computation runs ------------------------------------


def test_model_rowwise_steps_and_rope_tables_run_the_documented_computation_on_every_layout(kern, evidence):
    """With the C kernel loaded, impl.model.llama's rmsnorm, silu and swiglu and impl.rope.RopeTable.apply are
    the kernel's computation wherever it takes the layout (float32, unit column stride; RoPE: (T, H, D)
    heads of the table's head_dim, one position per row), with the kernel's bits, and numpy's float32
    formulas from their docstrings (written here) everywhere else: rmsnorm (x * (1 / sqrt(mean(x*x) + eps)))
    * w, silu x / (1 + exp(-x)), swiglu silu(g) * u, RoPE x * cos + rotate_half(x) * sin. RopeTable's tables
    are cos and sin of pos * theta^(-2i/D) computed in float64 and rounded once (both halves equal);
    positions outside [0, max_pos) raise ValueError, an empty list of positions is fine; with the kernel
    switched off RopeTable.apply has the same bits; with it loaded, RopeTable.apply calls Kernel.rope exactly
    for the layouts the kernel takes (its docstring's "one native pass"), counted by a spy. The inputs are
    ones where the kernel's and numpy's rmsnorm and silu differ (checked), so which of the two ran shows."""
    from impl.model import llama
    from impl.rope import RopeTable

    rng = np.random.default_rng(99)
    mism: list[str] = []
    f32 = np.float32

    def check(name: str, got, want) -> None:
        got, want = np.asarray(got), np.asarray(want)
        if got.dtype != want.dtype or not same_bits(got.astype(np.float32), want.astype(np.float32)):
            mism.append(name)

    # 40 rows of 700 at scales 0.05-20: numpy's and the kernel's rmsnorm and silu differ in some of them
    x = (rng.standard_normal((40, 700)) * np.exp(rng.uniform(-3, 3, (40, 1)))).astype(f32)
    w = (1 + 0.1 * rng.standard_normal(700)).astype(f32)
    xw = np.zeros((40, 1400), f32)
    xw[:, ::2] = x

    def np_rmsnorm(a, wt, eps):
        var = np.mean(a * a, axis=-1, keepdims=True)
        return (a * (f32(1.0) / np.sqrt(var + f32(eps)))) * wt

    if same_bits(kern.rmsnorm(x, w, 1e-5), np_rmsnorm(x, w, 1e-5)):
        mism.append("precondition: the kernel's and numpy's rmsnorm have the same bits here")
    check("rmsnorm kernel", llama.rmsnorm(x, w, 1e-5), kern.rmsnorm(x, w, 1e-5))
    check("rmsnorm strided", llama.rmsnorm(xw[:, ::2], w, 1e-5), np_rmsnorm(xw[:, ::2], w, 1e-5))
    check("rmsnorm 1-D", llama.rmsnorm(x[0], w, 1e-5), np_rmsnorm(x[0], w, 1e-5))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    check("rmsnorm float64 x", llama.rmsnorm(x64, w, 1e-5), np_rmsnorm(x64, w, 1e-5))
    check("rmsnorm float64 w", llama.rmsnorm(x, w64, 1e-5), np_rmsnorm(x, w64, 1e-5))

    def np_silu(a):
        a = np.asarray(a, dtype=f32)
        return a / (f32(1.0) + np.exp(-a))

    if same_bits(kern.silu(x), np_silu(x)) or same_bits(kern.silu(x[1]), np_silu(x[1])):
        mism.append("precondition: the kernel's and numpy's silu have the same bits here")
    check("silu kernel 2-D", llama.silu(x), kern.silu(x))
    check("silu kernel 1-D", llama.silu(x[1]), kern.silu(x[1]))
    check("silu float64 in", llama.silu(x64), kern.silu(x))
    check("silu 3-D", llama.silu(x.reshape(4, 10, 700)), np_silu(x.reshape(4, 10, 700)))
    check("silu strided", llama.silu(xw[:, ::2]), np_silu(xw[:, ::2]))
    check("silu empty", llama.silu(np.zeros((0, 5), f32)), np.zeros((0, 5), f32))
    gu = (rng.standard_normal((6, 2 * 240)) * 2).astype(f32)
    if same_bits(kern.silu(gu[:, :240], gu[:, 240:]), np_silu(gu[:, :240]) * gu[:, 240:]):
        mism.append("precondition: the kernel's and numpy's swiglu have the same bits here")
    check("swiglu kernel", llama.swiglu(gu, 240), kern.silu(gu[:, :240], gu[:, 240:]))
    gw = np.zeros((6, 960), f32)
    gw[:, ::2] = gu
    check("swiglu strided", llama.swiglu(gw[:, ::2], 240), np_silu(gu[:, :240]) * gu[:, 240:])

    d, max_pos, theta = 12, 70, 5000.0
    table = RopeTable(theta, d, max_pos)
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(max_pos, dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=1)
    check("rope cos table", table.cos, np.cos(ang).astype(f32))
    check("rope sin table", table.sin, np.sin(ang).astype(f32))
    xr = rng.standard_normal((5, 3, d)).astype(f32)
    pos = np.array([0, 69, 3, 35, 7])

    def np_rope(a, p):
        c, s = np.cos(ang[p]).astype(f32)[:, None, :], np.sin(ang[p]).astype(f32)[:, None, :]
        h = d // 2
        return np.concatenate(
            [a[..., :h] * c[..., :h] - a[..., h:] * s[..., :h], a[..., h:] * c[..., h:] + a[..., :h] * s[..., h:]], -1
        )

    want_r = np_rope(xr, pos)
    cs, sn = table.rows(pos)
    check("rope rows cos", cs, np.cos(ang[pos]).astype(f32))
    check("rope rows sin", sn, np.sin(ang[pos]).astype(f32))
    # RopeTable.apply runs the kernel ("one native pass") exactly where the kernel takes the layout: a spy on
    # Kernel.rope counts the calls
    calls: list[int] = []
    real_rope = kern.rope

    def spy(*a, **kw):
        calls.append(1)
        return real_rope(*a, **kw)

    def native(name: str, want_calls: int, got, want) -> None:
        check(name, got, want)
        if len(calls) != want_calls:
            mism.append(f"{name}: {len(calls)} kernel calls, {want_calls} expected")
        calls.clear()

    kern.rope = spy
    try:
        native("rope apply kernel", 1, table.apply(xr, pos), want_r)
        native("rope apply list", 1, table.apply(xr, pos.tolist()), want_r)
        rw = np.zeros((5, 3, d + 4), f32)
        rw[..., :d] = xr
        native("rope apply strided heads", 0, table.apply(rw[..., :d], pos), want_r)
        native("rope apply float64", 0, table.apply(xr.astype(np.float64), pos), np_rope(xr.astype(np.float64), pos))
        check("rope apply empty", table.apply(np.zeros((0, 3, d), f32), []), np.zeros((0, 3, d), f32))
    finally:
        del kern.rope
    real_load = kernels.load
    try:
        kernels.load = lambda: None  # the numpy fallback in force (as KVPROOF_KERNEL=numpy)
        check("rope apply fallback", table.apply(xr, pos), want_r)
    finally:
        kernels.load = real_load
    refused = 0
    for bad in ([0, -1, 2, 3, 4], [0, 1, 2, 3, 70]):
        try:
            table.apply(xr, bad)
        except ValueError:
            refused += 1
        try:
            table.rows(np.array(bad))
        except ValueError:
            refused += 1
    evidence.count("dispatch_mismatches", len(mism))
    evidence.count("rope_refusals", refused)
    assert not mism, f"not the documented computation: {mism}"
    assert refused == 4, f"out-of-range positions accepted ({4 - refused} of 4 calls)"


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def test_linear_scratch_fails_only_when_memory_runs_out_and_recovers(kern, evidence):
    """kv_linear returns -1 (Kernel.linear: MemoryError) only when its packed-row scratch cannot be allocated,
    and reserves no more than it needs (the packed rows plus a quarter, rounded to 64 bytes). On this thread
    (the main one: its allocations come from the main heap and mmap, both counted), every input allocated
    first, under an address-space limit 64 MB above what the process maps (RLIMIT_AS): a call whose scratch
    needs 150 MB fails (more than the heap can hold free: malloc_trim first); then calls needing 17 to 50 MB
    of scratch (6 steps, 186 MB in all) succeed in turn (growth frees the smaller buffer: at most 50 MB
    live); 1500 attention calls over 4000 keys (64 KB of scores each, 96 MB in all) keep their bits; with
    the limit lifted, the 150 MB call succeeds. The rows of
    every successful call have the bits of the same row fed alone. (The other witnesses' calls on this
    thread need at most about 1 MB of scratch, so every call here grows it.)"""
    import resource

    rng = np.random.default_rng(11)
    k_dim = 1000
    big_t, steps = 30_000, (3400, 4200, 5200, 6500, 8000, 10_000)  # scratch 1.25 * T * K * 4 B: 150; 17-50 MB
    panels = pack(rng.standard_normal((16, k_dim)).astype(np.float32))
    xs = [rng.standard_normal((t, k_dim), dtype=np.float32) for t in (big_t, *steps)]
    outs = [np.zeros((x.shape[0], NR), np.float32) for x in xs]
    codes: list[str] = []
    qa, ka, va, loa, hia = attention_case(rng, 4000, 1, 1, 4, 16, None, 1.0, 0)  # 64 KB of scores a call
    want_a = kern.attend(qa, ka, va, loa, hia, 0.25, threads=1)
    attend_delta = 0.0
    _libc.malloc_trim(0)  # free heap memory back to the system: what is left free cannot hold 150 MB
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + 64 * 2**20, hard))
        for x, y in zip(xs, outs, strict=True):
            try:
                kern.linear(x, panels, y, threads=1)
                codes.append("ok")
            except MemoryError:
                codes.append("MemoryError")
        for _ in range(1500):  # 96 MB of score buffers in all: each call must free its own
            attend_delta = max(attend_delta, bitdiff(kern.attend(qa, ka, va, loa, hia, 0.25, threads=1), want_a))
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    try:
        kern.linear(xs[0], panels, outs[0], threads=1)
        codes.append("ok")
    except MemoryError:
        codes.append("MemoryError")
    mism = 0
    for x, y in zip(xs, outs, strict=True):
        for i in (0, x.shape[0] // 2, x.shape[0] - 1):
            y1 = np.empty((1, NR), np.float32)
            kern.linear(x[i : i + 1], panels, y1, threads=1)
            mism += int(bitdiff(y[i : i + 1], y1) != 0)
    want = ["MemoryError"] + ["ok"] * (len(steps) + 1)
    evidence.record("limited_calls", codes)
    evidence.count("scratch_limit_errors", int(codes != want))
    evidence.count("scratch_limit_mismatches", mism + int(attend_delta != 0))
    assert codes == want, f"150 MB, 17-50 MB under a 64 MB margin, 150 MB without: {codes}, expected {want}"
    assert mism == 0, f"{mism} rows differ from the row alone"


def test_the_kernel_is_loaded_wherever_it_builds(evidence):
    """The numpy fallback is for an explicit KVPROOF_KERNEL=numpy or a kernel that does not build (no compiler,
    a compiler error: impl.kernels.status() names it). Where kernels.build() gives a library, kernels.load()
    must return a Kernel, never the fallback: otherwise every witness of this card would skip
    and the card say nothing (this witness has no `kern` fixture, so it runs either way)."""
    import os

    if os.environ.get(kernels.ENV_CHOICE, "auto") == "numpy":
        pytest.skip("n/a: KVPROOF_KERNEL=numpy chooses the fallback")
    try:
        path = kernels.build()
    except (OSError, RuntimeError) as e:
        if "no C compiler" in str(e):
            pytest.skip(f"n/a: the kernel cannot be built on this machine ({e})")
        raise AssertionError(f"kernels.c does not build with the compiler on PATH: {e}") from e
    k = kernels.load()
    loaded = k is not None  # (its library may be another build of kernels.c: a changed copy loaded on purpose)
    evidence.count("kernel_not_loaded", int(not loaded))
    assert loaded, f"the kernel builds ({path}) but load() gives {k!r}: {kernels.status()}"


# ---- attention: the documented order, bit for bit ------------------------------------------------------------

F32 = np.float32


def vexp_reference(x: np.ndarray) -> np.ndarray:
    """kernels.c's exp (vexp) in float32 numpy, operation for operation: x clamped at -87, n = rint(x * log2(e)),
    r = x - n ln2 in two fma steps (ln2 = 0.693359375 - 2.12194440e-4), Cephes' degree-5 polynomial by fma,
    p * (r * r) + (r + 1) by fma, times 2^n (exact), and 0 where x < -87 (or NaN). Each step rounded once."""
    x = np.asarray(x, dtype=F32)
    lim = F32(-87.0)
    xc = np.maximum(x, lim)
    n = np.rint(xc * F32(1.44269504088896341)).astype(F32)
    r = fma32(n, F32(-0.693359375), xc)
    r = fma32(n, F32(2.12194440e-4), r)
    p = np.full_like(x, F32(1.9875691500e-4))
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = fma32(p, r, F32(c))
    p = fma32(p, r * r, r + F32(1.0))
    with np.errstate(over="ignore", invalid="ignore"):
        out = p * np.ldexp(F32(1.0), n.astype(np.int32)).astype(F32)
    return np.where(x >= lim, out, F32(0.0)).astype(F32)


def lane_tree(t: np.ndarray) -> np.ndarray:
    """kernels.c's vhsum over the last axis (VL lanes): lane i += lane i + w for w = VL/2, ..., 1; lane 0."""
    t = t.copy()
    w = t.shape[-1] // 2
    while w >= 1:
        t[..., :w] = t[..., :w] + t[..., w : 2 * w]
        w //= 2
    return t[..., 0]


def scores_reference(q: np.ndarray, k: np.ndarray, scale: float, vl: int) -> np.ndarray:
    """q (M, D) against keys k (M, n, D) -> (M, n) float32 in the order of the kernel's build: VL lanes of fma
    chains over the D/VL chunks then the lane tree (D a multiple of VL, at most 16 VL; on VL = 8 builds, D a
    multiple of 8 up to 128: 8 lanes summed ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), the hadd tree), else one fma
    chain over d; times scale, rounded once."""
    m, n, d = k.shape
    if vl == 8 and d % 8 == 0 and d <= 128:
        acc = np.zeros((m, n, 8), F32)
        for c in range(d // 8):
            acc = fma32(q[:, None, c * 8 : (c + 1) * 8], k[:, :, c * 8 : (c + 1) * 8], acc)
        a = acc
        dot = ((a[..., 0] + a[..., 1]) + (a[..., 2] + a[..., 3])) + ((a[..., 4] + a[..., 5]) + (a[..., 6] + a[..., 7]))
    elif d % vl == 0 and d <= 16 * vl:
        acc = np.zeros((m, n, vl), F32)
        for c in range(d // vl):
            acc = fma32(q[:, None, c * vl : (c + 1) * vl], k[:, :, c * vl : (c + 1) * vl], acc)
        dot = lane_tree(acc)
    else:
        dot = np.zeros((m, n), F32)
        for j in range(d):
            dot = fma32(q[:, None, j], k[:, :, j], dot)
    return (dot * F32(scale)).astype(F32)


def attention_reference(q, k, v, lo, hi, scale: float, vl: int) -> np.ndarray:
    """kernels.c's attention for every (query, KV head, member), in its documented order: scores_reference; m
    the largest score; p_j = vexp(s_j - m); l = the lane sums of p over j = 0, VL, 2VL, ... (+1, ...; zeros
    past n) added block by block, then the lane tree; o[d] = (fma chain over j in row order of p_j v_j[d]
    from 0) / l. (T, Hkv * G * D) float32."""
    t, hkv, g, d = q.shape
    n_i = (hi - lo).astype(int)
    nmax = int(n_i.max())
    out = np.zeros((t, hkv, g, d), F32)
    for h in range(hkv):
        kh = np.zeros((t, nmax, d), F32)
        vh = np.zeros((t, nmax, d), F32)
        for i in range(t):
            kh[i, : n_i[i]] = k[lo[i] : hi[i], h * d : (h + 1) * d]
            vh[i, : n_i[i]] = v[lo[i] : hi[i], h * d : (h + 1) * d]
        qs = q[:, h].reshape(t * g, d)
        s = scores_reference(qs, np.repeat(kh, g, axis=0), scale, vl).reshape(t, g, nmax)
        valid = np.arange(nmax)[None, None, :] < n_i[:, None, None]
        s = np.where(valid, s, F32(-np.inf))
        m = s.max(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore"):
            p = np.where(valid, vexp_reference(s - m), F32(0.0))
        npad = -(-nmax // vl) * vl
        pp = np.zeros((t, g, npad), F32)
        pp[..., :nmax] = p
        lv = np.zeros((t, g, vl), F32)
        for b in range(0, npad, vl):
            lv = lv + pp[..., b : b + vl]
        lsum = lane_tree(lv)
        acc = np.zeros((t, g, d), F32)
        for j in range(nmax):
            acc = fma32(p[:, :, j, None], vh[:, None, j, :], acc)
        out[:, h] = acc / lsum[..., None]
    return out.reshape(t, -1)


# the lane path's chunk counts 1-16 and past it, odd head_dims (the scalar path), 8-multiples (VL = 8's own path)
ATTENTION_DIMS = [8, 12, 16, 17, 24, 32, 48, 64, 72, 96, 128, 129, 136, 160, 240, 256, 264, 272]


def test_attention_has_the_documented_order_bit_for_bit(kern, evidence):
    """Kernel.attend against attention_reference, the kernel's own documented arithmetic written here in
    float32 numpy (each fma rounded once, by fma32), bit for bit: head_dims on the lane path and the scalar
    path (multiples of VL up to 16 VL and past it, 8-multiples on VL = 8 builds, odd ones), groups of 1-6
    (whole and partial groups of 4 members), 1-64 keys in causal or any views, queries scaled 0.1-20, 1-4
    threads (and every head_dim once more, whatever the draw); and one key at each position scoring 100 above
    the rest: its weight exactly 1, the others' exactly 0 (e^-100 is below the flush at -87), so the output is
    that key's value row exactly."""

    @given(
        n=st.integers(1, 64),
        t=st.integers(1, 6),
        hkv=st.integers(1, 2),
        g=st.integers(1, 6),
        d=st.sampled_from(ATTENTION_DIMS),
        any_views=st.booleans(),
        temp=st.sampled_from([0.1, 1.0, 20.0]),
        threads=threads_st,
        seed=seeds,
    )
    def prop(n, t, hkv, g, d, any_views, temp, threads, seed):
        t = min(t, n)
        rng = np.random.default_rng(seed)
        q, k, v, lo, hi = attention_case(rng, n, t, hkv, g, d, None, temp, 0)
        if any_views:
            hi = rng.integers(1, n + 1, t)
            lo = (hi - rng.integers(1, n + 1, t)).clip(0)
        scale = 1.0 / np.sqrt(d)
        got = kern.attend(q, k, v, lo, hi, scale, threads=threads)
        want = attention_reference(q, k, v, lo, hi, scale, kern.vl)
        bad = int((~((got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want)))).sum())
        evidence.count("attention_order_mismatches", bad)
        evidence.count("attention_order_examples")
        assert bad == 0, f"{bad} outputs are not the documented order (n={n} t={t} G={g} D={d} VL={kern.vl})"

    prop()
    bad, cases = 0, 0
    rng = np.random.default_rng(100)
    for d in ATTENTION_DIMS:  # every head_dim once, whatever the draw
        q, k, v, lo, hi = attention_case(rng, 20, 3, 1, 5, d, None, 1.0, 0)
        got = kern.attend(q, k, v, lo, hi, 0.3, threads=2)
        want = attention_reference(q, k, v, lo, hi, 0.3, kern.vl)
        bad += int(not same_bits(got, want))
        cases += 1
    for n in (1, 5, 17, 40):
        for d in (16, 24, 64):
            for j in range(n):
                q = np.zeros((1, 1, 2, d), F32)
                q[0, 0, :, 0] = 1.0
                k = rng.uniform(-1, 1, (n, d)).astype(F32)
                k[:, 0] = rng.uniform(-1, 1, n)
                k[j, 0] = 101.0  # scores: 1 * k[:, 0], the key j 100 and more above the others
                v = rng.standard_normal((n, d)).astype(F32)
                got = kern.attend(q, k, v, np.array([0]), np.array([n]), 1.0, threads=1).reshape(2, d)
                bad += int(not (got == v[j][None]).all())
                cases += 1
    evidence.count("dominant_key_mismatches", bad)
    assert bad == 0, f"{bad} of {cases} attentions (every head_dim; one dominant key) are not the documented ones"
