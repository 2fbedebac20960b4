"""Compiled kernels with one per-element summation order for any row count.

NOTE: why this module exists. BLAS rounds a one-row product (gemv) and a
many-row product (gemm) differently, so a position's bits would depend on
how its tokens were fed (KV-T4). The C kernel below computes every output
element of ``x @ W`` in one fixed order (k-blocks of 64, one FMA per step
inside a block, block sums added left to right), whether the call has one
row (decode: each weight panel streamed once) or hundreds (prefill:
register tiles of 6 rows x 16 columns, 2 panels on AVX-512). Same order,
same bits, by construction; ``tests/test_linear.py`` and KV-T4 check it.

The kernel is compiled on first use with the machine's C compiler
(``cc -O3 -march=native -ffp-contract=off -fopenmp``) into
``<checkout>/.cache/kernels/`` (``KVPROOF_KERNEL_CACHE``), keyed by the
source, the flags, the compiler and the CPU, so later processes only
``dlopen`` it (about a millisecond). Threads: OpenMP's, so
``OMP_NUM_THREADS`` applies (the harness sets it to 1 under ``-j N``).

``KVPROOF_KERNEL=numpy`` (or no working compiler) selects the fallback:
numpy's gemv for every row (``impl.linear``), invariant too but slower for
prefills. Both are reported by :func:`impl.linear.numerics_path`.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

NR = 16  # panel width in floats: the packed weight is (P, K, NR)
ENV_CHOICE = "KVPROOF_KERNEL"  # "auto" (default), "c", or "numpy"
ENV_CACHE = "KVPROOF_KERNEL_CACHE"
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared", "-std=gnu11")

C_SOURCE = r"""
/* y = x @ W for a weight packed in 16-column panels; one per-element order for every row count.
 *
 * Layout: w is (P, K, 16) float32, panel p holding columns [16p, 16p+16) of W (K, C),
 * zero-padded past C. x is (T, K) with row stride ldx, y is (T, P*16) with row stride ldy.
 *
 * The invariant: every output element y[t, c] is computed as
 *     y = 0
 *     for each k-block [k0, k0 + KC):               (KC = 64, fixed)
 *         acc = 0; for k in the block: acc = fma(x[t, k], w[k, c], acc)
 *         y = (first block) ? acc : y + acc
 * one fused multiply-add per step (an intrinsic, never left to the compiler's
 * contraction; built with -ffp-contract=off), whatever T is and whichever tile
 * computes it. Tiles differ only in how many (row, column) elements they carry
 * in registers at once. The two-level sum keeps the rounding error below
 * OpenBLAS's (a plain k-sequential sum was about 2x worse than sgemm).
 */
#include <stddef.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#define NR 16 /* panel width (floats) */

#if defined(__AVX512F__)
#define VL 16
typedef __m512 vec;
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps((p), (v))
#define VBCAST(s) _mm512_set1_ps(s)
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VADD(a, b) _mm512_add_ps((a), (b))
#define ISA "avx512f"
#elif defined(__AVX2__) && defined(__FMA__)
#define VL 8
typedef __m256 vec;
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps((p), (v))
#define VBCAST(s) _mm256_set1_ps(s)
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VADD(a, b) _mm256_add_ps((a), (b))
#define ISA "avx2+fma"
#else
/* Portable: GCC vector extension, fused by fmaf() per lane (exactly rounded, so any lane
 * order gives the same bits). */
#define VL 4
typedef float vec __attribute__((vector_size(16)));
static inline vec VZERO(void) { vec z = {0, 0, 0, 0}; return z; }
static inline vec VLOAD(const float *p) { vec v; __builtin_memcpy(&v, p, sizeof v); return v; }
#define VSTORE(p, v) do { vec t_ = (v); __builtin_memcpy((p), &t_, sizeof t_); } while (0)
static inline vec VBCAST(float s) { vec v = {s, s, s, s}; return v; }
static inline vec VFMA(vec a, vec b, vec c) {
    vec r;
    for (int i = 0; i < 4; i++) r[i] = fmaf(a[i], b[i], c[i]);
    return r;
}
#define VADD(a, b) ((a) + (b))
#define ISA "generic-fmaf"
#endif

#define NV (NR / VL)   /* vectors per panel row */
#ifndef TP
#define TP (VL == 16 ? 2 : 1) /* panels per prefill tile */
#endif
#define MR 6           /* rows per prefill tile */
#ifndef KC
#define KC 64
#endif

const char *kv_isa(void) { return ISA; }
int kv_vl(void) { return VL; }

/* One tile: R rows x NP panels over k in [k0, k1). pstride = K*NR floats between panels. */
#define DEFINE_TILE(R, NP)                                                                   \
    static inline void tile_##R##_##NP(const float *restrict x, long ldx,                    \
                                       const float *restrict w, long pstride, long k0,       \
                                       long k1, float *restrict y, long ldy, int add) {        \
        vec acc[R][NP * NV];                                                                 \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                 \
        _Pragma("GCC unroll 16") for (int j = 0; j < NP * NV; j++)                           \
            acc[r][j] = VZERO();                                                             \
        for (long k = k0; k < k1; k++) {                                                     \
            vec wv[NP * NV];                                                                 \
            _Pragma("GCC unroll 16") for (int p = 0; p < NP; p++)                            \
            _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++)                            \
                wv[p * NV + v] = VLOAD(w + p * pstride + k * NR + v * VL);                   \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                           \
                vec xb = VBCAST(x[r * ldx + k]);                                             \
                _Pragma("GCC unroll 16") for (int j = 0; j < NP * NV; j++)                   \
                    acc[r][j] = VFMA(xb, wv[j], acc[r][j]);                                  \
            }                                                                                \
        }                                                                                    \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                 \
        _Pragma("GCC unroll 16") for (int j = 0; j < NP * NV; j++)                           \
            VSTORE(y + r * ldy + j * VL,                                                     \
                   add ? VADD(VLOAD(y + r * ldy + j * VL), acc[r][j]) : acc[r][j]);          \
    }


#define TILES_FOR(R) DEFINE_TILE(R, 1) DEFINE_TILE(R, 2)
TILES_FOR(1) TILES_FOR(2) TILES_FOR(3) TILES_FOR(4) TILES_FOR(5) TILES_FOR(6)
DEFINE_TILE(1, 4)

typedef void (*tile_fn)(const float *restrict, long, const float *restrict, long, long, long,
                        float *restrict, long, int);
static const tile_fn TILES[MR + 1][3] = {
    {0, 0, 0},
    {0, tile_1_1, tile_1_2}, {0, tile_2_1, tile_2_2}, {0, tile_3_1, tile_3_2},
    {0, tile_4_1, tile_4_2}, {0, tile_5_1, tile_5_2}, {0, tile_6_1, tile_6_2},
};


/* One row, panels [p0, p1): each panel streamed once over k. */
static void row_panels(const float *x, const float *w, long K, long p0, long p1, float *y) {
    long pstride = K * NR, p = p0;
    for (; p + 4 <= p1; p += 4)
        for (long k0 = 0; k0 < K; k0 += KC)
            tile_1_4(x, 0, w + p * pstride, pstride, k0, k0 + KC < K ? k0 + KC : K, y + p * NR, 0, k0 > 0);
    for (; p < p1; p++)
        for (long k0 = 0; k0 < K; k0 += KC)
            tile_1_1(x, 0, w + p * pstride, pstride, k0, k0 + KC < K ? k0 + KC : K, y + p * NR, 0, k0 > 0);
}

/* T rows, panels [p0, p1) in groups of TP, k in blocks of KC, rows in tiles of MR. */
static void rows_panels(const float *x, long T, long ldx, const float *w, long K, long p0, long p1,
                        float *y, long ldy) {
    long pstride = K * NR;
    int np;
    for (long p = p0; p < p1; p += np) {
        np = (p1 - p >= TP) ? TP : 1;
        for (long k0 = 0; k0 < K; k0 += KC) {
            long k1 = k0 + KC < K ? k0 + KC : K;
            long t = 0;
            for (; t + MR <= T; t += MR)
                TILES[MR][np](x + t * ldx, ldx, w + p * pstride, pstride, k0, k1, y + t * ldy + p * NR, ldy, k0 > 0);
            if (t < T)
                TILES[T - t][np](x + t * ldx, ldx, w + p * pstride, pstride, k0, k1, y + t * ldy + p * NR, ldy, k0 > 0);
        }
    }
}

/* y[t, :] = x[t, :] @ W for t < T. nthreads <= 0: OpenMP's default. */
void kv_linear(const float *x, long T, long ldx, const float *w, long K, long P, float *y, long ldy,
               int nthreads) {
#ifdef _OPENMP
    int nt = nthreads > 0 ? nthreads : omp_get_max_threads();
    if (nt > 1 && P >= 2 * TP) {
        long groups = (P + TP - 1) / TP;
        #pragma omp parallel num_threads(nt)
        {
            int i = omp_get_thread_num(), n = omp_get_num_threads();
            long g0 = groups * i / n, g1 = groups * (i + 1) / n;
            long p0 = g0 * TP, p1 = g1 * TP < P ? g1 * TP : P;
            if (T == 1) row_panels(x, w, K, p0, p1, y);
            else rows_panels(x, T, ldx, w, K, p0, p1, y, ldy);
        }
        return;
    }
#endif
    (void)nthreads;
    if (T == 1) row_panels(x, w, K, 0, P, y);
    else rows_panels(x, T, ldx, w, K, 0, P, y, ldy);
}
"""


class Kernel:
    """The loaded shared library, with typed entry points."""

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        self.path = path
        self._linear = lib.kv_linear
        self._linear.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                                 ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
        self._linear.restype = None
        lib.kv_isa.restype = ctypes.c_char_p
        self.isa = lib.kv_isa().decode()
        self._lib = lib

    def linear(self, x: np.ndarray, packed: np.ndarray, out: np.ndarray, threads: int = 0) -> None:
        """out[:, :P*NR] = x @ W for W packed as (P, K, NR); x (T, K) and out (T, >= P*NR) float32, rows contiguous."""
        t, k = x.shape
        p = packed.shape[0]
        assert packed.shape == (p, k, NR) and packed.dtype == np.float32 and packed.flags.c_contiguous
        assert x.dtype == np.float32 and x.strides[1] == 4 and out.dtype == np.float32 and out.strides[1] == 4
        assert out.shape[0] == t and out.shape[1] >= p * NR
        self._linear(x.ctypes.data, t, x.strides[0] // 4, packed.ctypes.data, k, p,
                     out.ctypes.data, out.strides[0] // 4, threads)


def cache_dir() -> Path:
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / ".cache" / "kernels"


def _cpu_signature() -> str:
    """What -march=native depends on: the CPU's model name and flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        keep = [ln for ln in text.splitlines() if ln.split(":")[0].strip() in ("model name", "flags", "Features")]
        return "\n".join(sorted(set(keep)))
    except OSError:
        return platform.processor() + platform.machine()


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def build(force: bool = False) -> Path:
    """Compile (or find the cached) shared library; returns its path. Raises OSError/RuntimeError."""
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    exe = Path(shutil.which(cc)).resolve()  # type: ignore[arg-type]
    st = exe.stat()
    compiler = f"{exe}:{st.st_size}:{st.st_mtime_ns}"  # a new compiler rebuilds; no subprocess per process
    key = hashlib.sha256("\0".join([C_SOURCE, " ".join(FLAGS), compiler, _cpu_signature()]).encode()).hexdigest()
    folder = cache_dir()
    so = folder / f"kvkernel-{key[:16]}.so"
    if so.exists() and not force:
        return so
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
        src = Path(tmp) / "kvkernel.c"
        src.write_text(C_SOURCE)
        out = Path(tmp) / so.name
        r = subprocess.run([cc, *FLAGS, "-o", str(out), str(src)], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{cc} failed: {r.stderr.strip()[:2000]}")
        os.replace(out, so)  # atomic: concurrent builders each write their own temp file
    return so


_state: dict[str, object] = {}


def load() -> Kernel | None:
    """The kernel, or None when the numpy fallback is in force (see :func:`status`). Cached per process."""
    if "kernel" not in _state:
        choice = os.environ.get(ENV_CHOICE, "auto").lower()
        kernel, why = None, ""
        if choice == "numpy":
            why = f"{ENV_CHOICE}=numpy"
        else:
            try:
                kernel = Kernel(build())
            except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as e:
                if choice == "c":
                    raise RuntimeError(f"{ENV_CHOICE}=c but the kernel is unavailable: {e}") from e
                why = f"kernel unavailable: {e}"
        _state["kernel"], _state["why"] = kernel, why
    return _state["kernel"]  # type: ignore[return-value]


def status() -> str:
    """Why the fallback is in force ('' when the kernel is loaded)."""
    load()
    return str(_state["why"])
