
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
#include <stdlib.h>
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
/* Portable: GCC vector extension, each lane fused exactly as fmaf() does (one rounding, so any
 * lane order gives the same bits). */
#define VL 4
typedef float vec __attribute__((vector_size(16)));
static inline vec VZERO(void) { vec z = {0, 0, 0, 0}; return z; }
static inline vec VLOAD(const float *p) { vec v; __builtin_memcpy(&v, p, sizeof v); return v; }
#define VSTORE(p, v) do { vec t_ = (v); __builtin_memcpy((p), &t_, sizeof t_); } while (0)
static inline vec VBCAST(float s) { vec v = {s, s, s, s}; return v; }
#if defined(__FP_FAST_FMAF) || !defined(__x86_64__)
/* fmaf is one instruction (aarch64's baseline has it), or there is no SSE2 double to emulate it with */
static inline vec VFMA(vec a, vec b, vec c) {
    vec r;
    for (int i = 0; i < 4; i++) r[i] = fmaf(a[i], b[i], c[i]);
    return r;
}
#define FMAF fmaf
#define ISA "generic-fmaf"
#else
/* x86-64's baseline has no fused multiply-add: fmaf() is a library call per lane, which clobbers every
 * vector register (a 40-token prefill took 12.6 s on one thread, against 0.15 s with AVX2). The same
 * correctly rounded result from SSE2 doubles instead: a*b is exact in double (24 + 24 significant bits;
 * no overflow or underflow for float operands), the sum with c is rounded once to double, then to float.
 * Rounding twice gives another result than rounding the exact sum once only when the double sum lands
 * exactly on a midpoint between two floats (rounding is monotone and every midpoint is a double, so it
 * never crosses one) or, for float's subnormal range, whose midpoints sit at other bits, anywhere below
 * 2^-126; a vector with such a lane (random data practically never) takes fmaf() itself. So every lane
 * has fmaf's bits (checked against fmaf on 8e7 random and crafted triples). Zero is exact: no detour. */
#include <emmintrin.h>
static inline vec VFMA(vec a, vec b, vec c) {
    __m128 A = (__m128)a, B = (__m128)b, C = (__m128)c;
    __m128d slo = _mm_add_pd(_mm_mul_pd(_mm_cvtps_pd(A), _mm_cvtps_pd(B)), _mm_cvtps_pd(C));
    __m128d shi = _mm_add_pd(_mm_mul_pd(_mm_cvtps_pd(_mm_movehl_ps(A, A)), _mm_cvtps_pd(_mm_movehl_ps(B, B))),
                             _mm_cvtps_pd(_mm_movehl_ps(C, C)));
    /* the low and high 32 bits of the four doubles */
    __m128i lo = _mm_castps_si128(_mm_shuffle_ps(_mm_castpd_ps(slo), _mm_castpd_ps(shi), _MM_SHUFFLE(2, 0, 2, 0)));
    __m128i hi = _mm_castps_si128(_mm_shuffle_ps(_mm_castpd_ps(slo), _mm_castpd_ps(shi), _MM_SHUFFLE(3, 1, 3, 1)));
    /* a float midpoint: the 29 bits below float's last one are 1000...0 */
    __m128i mid = _mm_cmpeq_epi32(_mm_and_si128(lo, _mm_set1_epi32(0x1FFFFFFF)), _mm_set1_epi32(0x10000000));
    /* 0 < |s| < 2^-126 (|s| is never a double subnormal here, so s != 0 iff its high word is not 0) */
    __m128i habs = _mm_and_si128(hi, _mm_set1_epi32(0x7FFFFFFF));
    __m128i tiny = _mm_and_si128(_mm_cmpgt_epi32(habs, _mm_setzero_si128()),
                                 _mm_cmplt_epi32(habs, _mm_set1_epi32(0x38100000)));
    if (__builtin_expect(_mm_movemask_epi8(_mm_or_si128(mid, tiny)) != 0, 0)) {
        vec r;
        for (int i = 0; i < 4; i++) r[i] = fmaf(a[i], b[i], c[i]);
        return r;
    }
    return (vec)_mm_movelh_ps(_mm_cvtpd_ps(slo), _mm_cvtpd_ps(shi));
}
static inline float FMAF(float a, float b, float c) {
    double s = (double)a * (double)b + (double)c;
    unsigned long long bits;
    __builtin_memcpy(&bits, &s, sizeof bits);
    unsigned long long mag = bits & 0x7FFFFFFFFFFFFFFFull;
    if (__builtin_expect((bits & 0x1FFFFFFF) == 0x10000000 || (mag != 0 && mag < 0x3810000000000000ull), 0))
        return fmaf(a, b, c);
    return (float)s;
}
#define ISA "generic-fma-sse2"
#endif
#define VADD(a, b) ((a) + (b))
#endif
#ifndef FMAF
#define FMAF fmaf /* one instruction where the build has FMA */
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

/* The thread count of calls made with nthreads <= 0 from the calling thread (OpenMP's nthreads-var);
 * n <= 0 leaves it. Returns the count before. */
int kv_default_threads(int n) {
#ifdef _OPENMP
    int old = omp_get_max_threads();
    if (n > 0) omp_set_num_threads(n);
    return old;
#else
    (void)n;
    return 1;
#endif
}

/* One tile: R rows x NP panels over k in [k0, k1), k-block by k-block (the first block of the row,
 * kb == 0, stores its sum; later ones add theirs). pstride = K*NR floats between panels. Row r's
 * value at step k is x[k * KS + r]: KS = 1 for one plain row (decode), KS = MR for rows packed as
 * (K, MR) (many rows, below: the MR values a step broadcasts sit side by side). */
#define DEFINE_TILE(NAME, R, NP, KS)                                                         \
    static inline void NAME(const float *restrict x, const float *restrict w, long pstride,  \
                            long k0, long k1, float *restrict y, long ldy) {                 \
        for (long kb = k0; kb < k1; kb += KC) { /* k0 is a multiple of KC: whole k-blocks */ \
            long ke = kb + KC < k1 ? kb + KC : k1;                                           \
            vec acc[R][NP * NV];                                                             \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                             \
            _Pragma("GCC unroll 16") for (int j = 0; j < NP * NV; j++)                       \
                acc[r][j] = VZERO();                                                         \
            _Pragma("GCC unroll 4") for (long k = kb; k < ke; k++) {                         \
                vec wv[NP * NV];                                                             \
                _Pragma("GCC unroll 16") for (int p = 0; p < NP; p++)                        \
                _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++)                        \
                    wv[p * NV + v] = VLOAD(w + p * pstride + k * NR + v * VL);               \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                       \
                    vec xb = VBCAST(x[k * KS + r]);                                          \
                    _Pragma("GCC unroll 16") for (int j = 0; j < NP * NV; j++)               \
                        acc[r][j] = VFMA(xb, wv[j], acc[r][j]);                              \
                }                                                                            \
            }                                                                                \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                             \
            _Pragma("GCC unroll 16") for (int j = 0; j < NP * NV; j++)                       \
                VSTORE(y + r * ldy + j * VL,                                                 \
                       kb ? VADD(VLOAD(y + r * ldy + j * VL), acc[r][j]) : acc[r][j]);       \
        }                                                                                    \
    }

DEFINE_TILE(tile_1_1, 1, 1, 1) DEFINE_TILE(tile_1_4, 1, 4, 1)


/* One row, panels [p0, p1): each panel streamed once over k. */
static void row_panels(const float *x, const float *w, long K, long p0, long p1, float *y) {
    long pstride = K * NR, p = p0;
    for (; p + 4 <= p1; p += 4) tile_1_4(x, w + p * pstride, pstride, 0, K, y + p * NR, 0);
    for (; p < p1; p++) tile_1_1(x, w + p * pstride, pstride, 0, K, y + p * NR, 0);
}

/* Many rows: x packed (tiles, K, MR) by pack_rows, the same tile shapes reading it. */
#define PTILES_FOR(R) DEFINE_TILE(ptile_##R##_1, R, 1, MR) DEFINE_TILE(ptile_##R##_2, R, 2, MR)
PTILES_FOR(1) PTILES_FOR(2) PTILES_FOR(3) PTILES_FOR(4) PTILES_FOR(5) PTILES_FOR(6)

typedef void (*ptile_fn)(const float *restrict, const float *restrict, long, long, long, float *restrict, long);
static const ptile_fn PTILES[MR + 1][3] = {
    {0, 0, 0},
    {0, ptile_1_1, ptile_1_2}, {0, ptile_2_1, ptile_2_2}, {0, ptile_3_1, ptile_3_2},
    {0, ptile_4_1, ptile_4_2}, {0, ptile_5_1, ptile_5_2}, {0, ptile_6_1, ptile_6_2},
};

#ifndef MC_ROWS
#define MC_ROWS 24 /* rows per work item (a multiple of MR) */
#endif
#ifndef NC_PANELS
#define NC_PANELS 4 /* panels per work item */
#endif

/* Rows [t0, t1) (t0 a multiple of MR) of packed x against panels [p0, p1): for each panel group of
 * TP, every tile of rows runs over all of k (the panel group stays in L2 meanwhile; one call per
 * tile, so one k-block's last FMAs overlap the next block's first). Blocking changes which elements
 * are in flight together, never the order in which any one element is summed. */
static void packed_block(const float *xp, long t0, long t1, const float *w, long K, long p0, long p1,
                         float *y, long ldy) {
    long pstride = K * NR;
    int np;
    for (long p = p0; p < p1; p += np) {
        np = (p1 - p >= TP) ? TP : 1;
        for (long t = t0; t < t1; t += MR) {
            long r = t1 - t < MR ? t1 - t : MR;
            PTILES[r][np](xp + t * K, w + p * pstride, pstride, 0, K, y + t * ldy + p * NR, ldy);
        }
    }
}

static void pack_rows(const float *x, long T, long ldx, long K, long tile, float *xp) {
    long t = tile * MR, r1 = T - t < MR ? T - t : MR;
    float *dst = xp + t * K;
    for (long r = 0; r < r1; r++) {
        const float *src = x + (t + r) * ldx;
        for (long k = 0; k < K; k++) dst[k * MR + r] = src[k];
    }
}

/* Scratch for packed x, one per calling thread (ctypes calls may come from several threads). */
static __thread float *xp_buf;
static __thread size_t xp_cap;

static float *packed_scratch(size_t floats) {
    if (floats > xp_cap) {
        free(xp_buf);
        xp_cap = floats + floats / 4;
        xp_buf = aligned_alloc(64, (xp_cap * 4 + 63) / 64 * 64);
        if (!xp_buf) xp_cap = 0;
    }
    return xp_buf;
}

/* T >= 2 rows: pack x, then work items (a block of rows x NC_PANELS panels) handed out
 * dynamically, so a thread that is slowed (a busy or virtual machine) does less of the work and
 * the other does more. Which thread computes an element never changes how it is summed. */
static int rows_linear(const float *x, long T, long ldx, const float *w, long K, long P, float *y, long ldy,
                       int nt) {
    long tiles = (T + MR - 1) / MR;
    float *xp = packed_scratch((size_t)tiles * MR * K);
    if (!xp) return -1;
    long mc = MC_ROWS;
    long nb = (T + mc - 1) / mc, ng = (P + NC_PANELS - 1) / NC_PANELS, items = nb * ng;
    /* Which index varies fastest: the smaller operand is the one re-read from cache. A weight bigger than
     * x (the head, most layers at long prefills) is walked once, panel group by panel group, with all rows
     * passing; a small weight stays in cache while row blocks pass. */
    int panels_outer = P * NR > T;
    (void)nt;
#ifdef _OPENMP
    #pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
#ifdef _OPENMP
        #pragma omp for schedule(static)
#endif
        for (long tile = 0; tile < tiles; tile++) pack_rows(x, T, ldx, K, tile, xp);
#ifdef _OPENMP
        #pragma omp for schedule(dynamic, 1)
#endif
        for (long i = 0; i < items; i++) {
            long b = panels_outer ? i % nb : i / ng, g = panels_outer ? i / nb : i % ng;
            long t0 = b * mc, t1 = t0 + mc < T ? t0 + mc : T;
            long p0 = g * NC_PANELS, p1 = p0 + NC_PANELS < P ? p0 + NC_PANELS : P;
            packed_block(xp, t0, t1, w, K, p0, p1, y, ldy);
        }
    }
    return 0;
}

/* y[t, :] = x[t, :] @ W for t < T. nthreads <= 0: OpenMP's default. Returns 0, or -1 when the
 * scratch for packed rows cannot be allocated. */
int kv_linear(const float *x, long T, long ldx, const float *w, long K, long P, float *y, long ldy,
              int nthreads) {
#ifdef _OPENMP
    int nt = nthreads > 0 ? nthreads : omp_get_max_threads();
#else
    int nt = 1;
#endif
    if (T <= 0) return 0;
    if (T >= 2) return rows_linear(x, T, ldx, w, K, P, y, ldy, nt);
#ifdef _OPENMP
    if (nt > 1 && P >= 2 * TP) {
        long groups = (P + TP - 1) / TP;
        #pragma omp parallel num_threads(nt)
        {
            int i = omp_get_thread_num(), n = omp_get_num_threads();
            long g0 = groups * i / n, g1 = groups * (i + 1) / n;
            long p0 = g0 * TP, p1 = g1 * TP < P ? g1 * TP : P;
            row_panels(x, w, K, p0, p1, y);
        }
        return 0;
    }
#endif
    row_panels(x, w, K, 0, P, y);
    return 0;
}

/* ---- attention: one query head over its visible keys, the same arithmetic for any T ----
 *
 * For query i, KV head h, group member g, over the visible view rows [lo_i, hi_i), n = hi - lo:
 *   s_j  = hsum_tree(fma chain over D/VL chunks of q * k_j) * scale   (j in row order)
 *   m    = max_j s_j;  p_j = expf_k(s_j - m)   (our own exp: same bits in every lane)
 *   l    = lane sums of p over j = 0, VL, 2VL, ... (+1, +2, ...), then the hsum tree
 *   o[d] = (sum_j p_j * v_j[d], j in row order, one fma per step) / l
 * Nothing depends on T, on which thread computes it, or on rows outside [lo, hi). */

#if VL == 16
#define VMUL(a, b) _mm512_mul_ps((a), (b))
#define VSUB(a, b) _mm512_sub_ps((a), (b))
#define VDIV(a, b) _mm512_div_ps((a), (b))
#define VMAX(a, b) _mm512_max_ps((a), (b))
#define VROUND(a) _mm512_roundscale_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VPOW2I(n) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define VZERO_BELOW(r, x, lim) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask((x), (lim), _CMP_GE_OQ), (r))
#elif VL == 8
#define VMUL(a, b) _mm256_mul_ps((a), (b))
#define VSUB(a, b) _mm256_sub_ps((a), (b))
#define VDIV(a, b) _mm256_div_ps((a), (b))
#define VMAX(a, b) _mm256_max_ps((a), (b))
#define VROUND(a) _mm256_round_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VPOW2I(n) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define VZERO_BELOW(r, x, lim) _mm256_and_ps(_mm256_cmp_ps((x), (lim), _CMP_GE_OQ), (r))
#else
#define VMUL(a, b) ((a) * (b))
#define VSUB(a, b) ((a) - (b))
#define VDIV(a, b) ((a) / (b))
static inline vec VMAX(vec a, vec b) { vec r; for (int i = 0; i < VL; i++) r[i] = a[i] > b[i] ? a[i] : b[i]; return r; }
static inline vec VROUND(vec a) { vec r; for (int i = 0; i < VL; i++) r[i] = rintf(a[i]); return r; }
static inline vec VPOW2I(vec n) { vec r; for (int i = 0; i < VL; i++) r[i] = ldexpf(1.0f, (int)n[i]); return r; }
static inline vec VZERO_BELOW(vec r, vec x, vec lim) { for (int i = 0; i < VL; i++) if (!(x[i] >= lim[i])) r[i] = 0.0f; return r; }
#endif

#ifndef PF_ROWS
#define PF_ROWS 16 /* rows ahead for software prefetch of strided K/V rows */
#endif
#if defined(__x86_64__) || defined(__i386__)
#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#else
#define PREFETCH(p) __builtin_prefetch((p))
#endif
#define EXP_LO -87.0f /* below: exp is 0 here (true value < 1.7e-38; a softmax term that small is 0 in float32 sums) */

/* exp(x) for x <= 0 (softmax arguments), Cephes' polynomial; about 1 ulp; exp(0) == 1 exactly. */
static inline vec vexp(vec x) {
    vec lim = VBCAST(EXP_LO);
    vec xc = VMAX(x, lim);
    vec n = VROUND(VMUL(xc, VBCAST(1.44269504088896341f)));
    vec r = VFMA(n, VBCAST(-0.693359375f), xc);
    r = VFMA(n, VBCAST(2.12194440e-4f), r);
    vec p = VBCAST(1.9875691500e-4f);
    p = VFMA(p, r, VBCAST(1.3981999507e-3f));
    p = VFMA(p, r, VBCAST(8.3334519073e-3f));
    p = VFMA(p, r, VBCAST(4.1665795894e-2f));
    p = VFMA(p, r, VBCAST(1.6666665459e-1f));
    p = VFMA(p, r, VBCAST(5.0000001201e-1f));
    p = VFMA(p, VMUL(r, r), VADD(r, VBCAST(1.0f)));
    return VZERO_BELOW(VMUL(p, VPOW2I(n)), x, lim);
}

/* out[i] = exp(x[i]) for x[i] <= 0 by vexp, the exp softmax and silu use (for tests of it); a short tail is
 * padded into a full vector, so an element's bits depend on its own x only. */
void kv_exp(const float *x, long n, float *out) {
    long i = 0;
    for (; i + VL <= n; i += VL) VSTORE(out + i, vexp(VLOAD(x + i)));
    if (i < n) {
        float t[VL] = {0}, o[VL];
        for (long j = 0; i + j < n; j++) t[j] = x[i + j];
        VSTORE(o, vexp(VLOAD(t)));
        for (long j = 0; i + j < n; j++) out[i + j] = o[j];
    }
}

/* Sum of the VL lanes by halving (lane i + lane i + VL/2, ...): a fixed tree. */
static inline float vhsum(vec a) {
    float t[VL];
    VSTORE(t, a);
    for (int w = VL / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) t[i] = t[i] + t[i + w];
    return t[0];
}

static inline float vhmax(vec a) {
    float t[VL];
    VSTORE(t, a);
    float m = t[0];
    for (int i = 1; i < VL; i++) m = t[i] > m ? t[i] : m;
    return m;
}

/* Scores of G query vectors q (G, D) against keys rows [0, n) at stride ld: s[g * ns + j]. */
static void scores(const float *restrict q, int G, const float *restrict k, long ld, long n, int D, float scale,
                   float *restrict s, long ns) {
#if VL == 8
    if (D % 8 == 0 && D <= 128) {
        /* 8 keys at a time; each key's 8 lane sums reduced by the same hadd tree,
         * ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)); a short last batch reads zero rows.
         * The batch's key rows stay in L1 while every group member uses them. */
        int nc = D / 8;
        __m256 sc = _mm256_set1_ps(scale);
        static const float zeros[128] __attribute__((aligned(32))) = {0};
        for (long j0 = 0; j0 < n; j0 += 8) {
            const float *kr[8];
            for (int b = 0; b < 8; b++) kr[b] = j0 + b < n ? k + (j0 + b) * ld : zeros;
            if (j0 + PF_ROWS + 8 <= n) /* strided rows: help the prefetcher (no effect on any value) */
                for (int b = 0; b < 8; b++)
                    for (int c = 0; c < D; c += 16) _mm_prefetch((const char *)(k + (j0 + PF_ROWS + b) * ld + c), _MM_HINT_T0);
            for (int g = 0; g < G; g++) {
                const float *qg = q + g * D;
                __m256 a[8];
                for (int b = 0; b < 8; b++) a[b] = _mm256_setzero_ps();
                for (int c = 0; c < nc; c++) {
                    __m256 qc = _mm256_loadu_ps(qg + c * 8);
                    for (int b = 0; b < 8; b++) a[b] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kr[b] + c * 8), a[b]);
                }
                __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
                __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
                __m256 s03 = _mm256_hadd_ps(s01, s23), s47 = _mm256_hadd_ps(s45, s67);
                __m256 dot = _mm256_add_ps(_mm256_permute2f128_ps(s03, s47, 0x20),
                                           _mm256_permute2f128_ps(s03, s47, 0x31));
                _mm256_storeu_ps(s + g * ns + j0, _mm256_mul_ps(dot, sc));
            }
        }
        return;
    }
#endif
    for (int g = 0; g < G; g++) {
        const float *qg = q + g * D;
        float *sg = s + g * ns;
        if (D % VL == 0 && D <= 16 * VL) {
            int nc = D / VL;
            for (long j = 0; j < n; j++) {
                const float *kj = k + j * ld;
                vec acc = VZERO();
                for (int c = 0; c < nc; c++) acc = VFMA(VLOAD(qg + c * VL), VLOAD(kj + c * VL), acc);
                sg[j] = vhsum(acc) * scale;
            }
        } else {
            for (long j = 0; j < n; j++) {
                const float *kj = k + j * ld;
                float acc = 0.0f;
                for (int d = 0; d < D; d++) acc = FMAF(qg[d], kj[d], acc);
                sg[j] = acc * scale;
            }
        }
    }
}

/* s[0, npad) holds n scores then padding: replaces them by exp(s - max) (padding -> 0); returns their sum. */
static float softmax_numerators(float *restrict s, long n) {
    long npad = (n + VL - 1) / VL * VL;
    for (long j = n; j < npad; j++) s[j] = -INFINITY;
    vec mv = VBCAST(-INFINITY);
    for (long j = 0; j < npad; j += VL) mv = VMAX(mv, VLOAD(s + j));
    vec m = VBCAST(vhmax(mv));
    vec lv = VZERO();
    for (long j = 0; j < npad; j += VL) {
        vec e = vexp(VSUB(VLOAD(s + j), m));
        VSTORE(s + j, e);
        lv = VADD(lv, e);
    }
    return vhsum(lv);
}

/* out[g, d] = (sum over j in order of p[g * ns + j] * v[j, d], one fma per step) / l[g], for GG group
 * members at once: each value row is read once for all of them. CW value chunks per pass. */
#define DEFINE_PV(GG, CW)                                                                          \
    static void pv_##GG(const float *restrict p, long ns, const float *restrict v, long ld, long n,   \
                        int nc, const float *restrict l, float *restrict out, int D) {              \
        for (int c0 = 0; c0 < nc; c0 += CW) {                                                      \
            int cw = nc - c0 < CW ? nc - c0 : CW;                                                  \
            if (cw == CW) {                                                                        \
                vec acc[GG][CW];                                                                   \
                _Pragma("GCC unroll 8") for (int g = 0; g < GG; g++)                               \
                _Pragma("GCC unroll 8") for (int c = 0; c < CW; c++) acc[g][c] = VZERO();          \
                for (long j = 0; j < n; j++) {                                                     \
                    if (j + PF_ROWS < n) PREFETCH(v + (j + PF_ROWS) * ld + c0 * VL);                \
                    vec vv[CW];                                                                    \
                    _Pragma("GCC unroll 8") for (int c = 0; c < CW; c++)                           \
                        vv[c] = VLOAD(v + j * ld + (c0 + c) * VL);                                 \
                    _Pragma("GCC unroll 8") for (int g = 0; g < GG; g++) {                         \
                        vec pj = VBCAST(p[g * ns + j]);                                            \
                        _Pragma("GCC unroll 8") for (int c = 0; c < CW; c++)                       \
                            acc[g][c] = VFMA(pj, vv[c], acc[g][c]);                                \
                    }                                                                              \
                }                                                                                  \
                _Pragma("GCC unroll 8") for (int g = 0; g < GG; g++)                               \
                _Pragma("GCC unroll 8") for (int c = 0; c < CW; c++)                               \
                    VSTORE(out + g * D + (c0 + c) * VL, VDIV(acc[g][c], VBCAST(l[g])));            \
            } else {                                                                               \
                for (int c = c0; c < nc; c++)                                                      \
                    for (int g = 0; g < GG; g++) {                                                 \
                        vec acc = VZERO();                                                         \
                        for (long j = 0; j < n; j++)                                               \
                            acc = VFMA(VBCAST(p[g * ns + j]), VLOAD(v + j * ld + c * VL), acc);    \
                        VSTORE(out + g * D + c * VL, VDIV(acc, VBCAST(l[g])));                     \
                    }                                                                              \
            }                                                                                      \
        }                                                                                          \
    }
DEFINE_PV(1, 4)
DEFINE_PV(2, 4)
DEFINE_PV(3, 4)
DEFINE_PV(4, 2)

/* One (query, KV head): its G query vectors q (G, D) over key/value rows [0, n) at stride ld; out (G, D).
 * s: scratch of >= G * (n rounded up to VL) floats. */
static void attend_group(const float *restrict q, int G, const float *restrict k, const float *restrict v,
                         long ld, long n, int D, float scale, float *restrict s, float *restrict out) {
    long ns = (n + VL - 1) / VL * VL;
    float l[G]; /* one softmax sum per group member (G >= 1: kv_attend's items; MQA has G of 64 and more) */
    scores(q, G, k, ld, n, D, scale, s, ns);
    for (int g = 0; g < G; g++) l[g] = softmax_numerators(s + g * ns, n);
    if (D % VL == 0 && D <= 16 * VL) {
        int nc = D / VL;
        for (int g0 = 0; g0 < G; g0 += 4) {
            int gg = G - g0 < 4 ? G - g0 : 4;
            const float *p = s + g0 * ns;
            float *o = out + g0 * D;
            switch (gg) {
            case 1: pv_1(p, ns, v, ld, n, nc, l + g0, o, D); break;
            case 2: pv_2(p, ns, v, ld, n, nc, l + g0, o, D); break;
            case 3: pv_3(p, ns, v, ld, n, nc, l + g0, o, D); break;
            default: pv_4(p, ns, v, ld, n, nc, l + g0, o, D); break;
            }
        }
    } else {
        for (int g = 0; g < G; g++)
            for (int d = 0; d < D; d++) {
                float acc = 0.0f;
                for (long j = 0; j < n; j++) acc = FMAF(s[g * ns + j], v[j * ld + d], acc);
                out[g * D + d] = acc / l[g];
            }
    }
}

/* T queries q (T, Hkv, G, D) contiguous; keys/values: view rows at stride ld floats (row r, head h at
 * k + r*ld + h*D); query i sees view rows [lo[i], hi[i]); out (T, Hkv*G*D). */
void kv_attend(const float *q, long T, int hkv, int G, int D, const float *k, const float *v, long ld,
               const long *lo, const long *hi, float scale, float *out, int nthreads) {
    long nmax = 0;
    for (long i = 0; i < T; i++) nmax = hi[i] - lo[i] > nmax ? hi[i] - lo[i] : nmax;
    int nt = 1;
#ifdef _OPENMP
    nt = nthreads > 0 ? nthreads : omp_get_max_threads();
    if (T * hkv * G < 2 || (long)T * nmax * hkv * G * D < 65536) nt = 1;
#endif
    /* An item is (query, KV head, gs group members): all G members share each key/value row read,
     * but a decode step (few items) splits them one per item to use every thread. Either way each
     * member's arithmetic is the same (scores, softmax and the weighted sum are per member). */
    int gs = (nt == 1 || T * hkv >= 4 * nt) ? G : 1;
    long per_head = G / gs;
    long items = T * hkv * per_head;
    #pragma omp parallel num_threads(nt)
    {
        float *s = malloc(sizeof(float) * (size_t)gs * ((nmax + VL - 1) / VL * VL));
        #pragma omp for schedule(dynamic, 1)
        for (long o = 0; o < items; o++) {
            /* KV head by KV head, each head's queries longest first: consecutive items read the same
             * head's K/V rows, which fit in L2 where all heads' rows do not */
            int h = (int)(o / (T * per_head));
            long rest = o % (T * per_head), i = T - 1 - rest / per_head;
            long it = (i * hkv + h) * per_head + rest % per_head;
            long r0 = lo[i], n = hi[i] - lo[i];
            attend_group(q + it * gs * D, gs, k + r0 * ld + (long)h * D, v + r0 * ld + (long)h * D, ld, n, D, scale,
                         s, out + it * gs * D);
        }
        free(s);
    }
}

/* ---- silu(g) (times u): the SwiGLU gate, one fixed formula per element ----
 *
 * e = exp(-|g|) by vexp (x <= 0, so no overflow); silu(g) = g / (1 + e) for g >= 0, (g * e) / (1 + e)
 * below; then one multiply by u when u is given. Every element goes through the vector code (a short
 * tail is padded into a full vector), so its bits depend only on its own g (and u). */
static inline vec silu_v(vec g) {
    vec e = vexp(VSUB(VZERO(), VMAX(g, VSUB(VZERO(), g)))); /* exp(-|g|) */
    vec den = VADD(VBCAST(1.0f), e);
#if VL == 16
    __mmask16 neg = _mm512_cmp_ps_mask(g, VZERO(), _CMP_LT_OQ);
    return _mm512_mask_div_ps(VDIV(g, den), neg, VMUL(g, e), den);
#elif VL == 8
    vec neg = _mm256_cmp_ps(g, VZERO(), _CMP_LT_OQ);
    return _mm256_blendv_ps(VDIV(g, den), VDIV(VMUL(g, e), den), neg);
#else
    vec pos = VDIV(g, den), ng = VDIV(VMUL(g, e), den), r;
    for (int i = 0; i < VL; i++) r[i] = g[i] < 0.0f ? ng[i] : pos[i];
    return r;
#endif
}

static void silu_row(const float *g, const float *u, long F, float *out) {
    long f = 0;
    for (; f + VL <= F; f += VL) {
        vec r = silu_v(VLOAD(g + f));
        VSTORE(out + f, u ? VMUL(r, VLOAD(u + f)) : r);
    }
    if (f < F) {
        float gt[VL] = {0}, ut[VL] = {0}, ot[VL];
        for (long i = 0; f + i < F; i++) { gt[i] = g[f + i]; if (u) ut[i] = u[f + i]; }
        vec r = silu_v(VLOAD(gt));
        VSTORE(ot, u ? VMUL(r, VLOAD(ut)) : r);
        for (long i = 0; f + i < F; i++) out[f + i] = ot[i];
    }
}

/* out[t, f] = silu(g[t, f]) (* u[t, f] when u is not NULL) for t < T, f < F; row strides in floats. */
void kv_silu(const float *g, long ldg, const float *u, long ldu, long T, long F, float *out, long ldo, int nthreads) {
#ifdef _OPENMP
    int nt = nthreads > 0 ? nthreads : omp_get_max_threads();
    if (T * F < 32768) nt = 1;
    #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
    for (long t = 0; t < T; t++) silu_row(g + t * ldg, u ? u + t * ldu : NULL, F, out + t * ldo);
    (void)nthreads;
}

/* ---- rmsnorm: x / sqrt(mean(x^2) + eps) * w, per row, one fixed order ----
 * sum of squares in VL lane accumulators (one fma per element, in order; a short tail padded with
 * zeros), lanes added by vhsum's tree; then mean = sum / H, inv = 1 / sqrtf(mean + eps) and
 * out = (x * inv) * w, each rounded to float32. A row's bits depend on that row alone. */
static void rmsnorm_row(const float *x, long H, const float *w, float eps, float *out) {
    vec acc = VZERO();
    long h = 0;
    for (; h + VL <= H; h += VL) { vec v = VLOAD(x + h); acc = VFMA(v, v, acc); }
    if (h < H) {
        float t[VL] = {0};
        for (long i = 0; h + i < H; i++) t[i] = x[h + i];
        vec v = VLOAD(t);
        acc = VFMA(v, v, acc);
    }
    float mean = vhsum(acc) / (float)H;
    float inv = 1.0f / sqrtf(mean + eps);
    vec iv = VBCAST(inv);
    for (h = 0; h + VL <= H; h += VL) VSTORE(out + h, VMUL(VMUL(VLOAD(x + h), iv), VLOAD(w + h)));
    for (; h < H; h++) out[h] = (x[h] * inv) * w[h];
}

void kv_rmsnorm(const float *x, long ldx, long T, long H, const float *w, float eps, float *out, long ldo,
                int nthreads) {
#ifdef _OPENMP
    int nt = nthreads > 0 ? nthreads : omp_get_max_threads();
    if (T * H < 32768) nt = 1;
    #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
    for (long t = 0; t < T; t++) rmsnorm_row(x + t * ldx, H, w, eps, out + t * ldo);
    (void)nthreads;
}

/* ---- rotary embedding (half split): the float32 operations of x * cos + rotate_half(x) * sin ----
 * rotate_half(x) = [-x2, x1], so the first half is x1*c + (-(x2*s)) = x1*c - x2*s and the second
 * x2*c + x1*s, each product and sum rounded once (no fma: -ffp-contract=off): the same bits as
 * impl.rope.apply_rope in numpy. x: T rows of H heads of D at (row stride ldx, head stride D);
 * cos/sin: tables (max_pos, D) read at rows pos[t]; out (T, H, D) contiguous. */
void kv_rope(const float *x, long ldx, long T, long H, long D, const float *cs, const float *sn, const long *pos,
             float *out, int nthreads) {
    long half = D / 2;
#ifdef _OPENMP
    int nt = nthreads > 0 ? nthreads : omp_get_max_threads();
    if (T * H * D < 65536) nt = 1;
    #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
    for (long t = 0; t < T; t++) {
        const float *c = cs + pos[t] * D, *s = sn + pos[t] * D;
        for (long h = 0; h < H; h++) {
            const float *x1 = x + t * ldx + h * D, *x2 = x1 + half;
            float *o1 = out + (t * H + h) * D, *o2 = o1 + half;
            long i = 0;
            for (; i + VL <= half; i += VL) {
                vec a = VLOAD(x1 + i), b = VLOAD(x2 + i);
                VSTORE(o1 + i, VSUB(VMUL(a, VLOAD(c + i)), VMUL(b, VLOAD(s + i))));
                VSTORE(o2 + i, VADD(VMUL(b, VLOAD(c + half + i)), VMUL(a, VLOAD(s + half + i))));
            }
            for (; i < half; i++) {
                o1[i] = x1[i] * c[i] - x2[i] * s[i];
                o2[i] = x2[i] * c[half + i] + x1[i] * s[half + i];
            }
        }
    }
    (void)nthreads;
}

/* ---- one row straight from GGUF quantized blocks (decode), the same bits as kv_linear ----
 *
 * Row c of W (out, K) is K/32 consecutive GGUF blocks at rows[c] (any address: the q/k
 * un-permutation and the q|k|v concatenation are only a choice of row addresses):
 *   Q4_1 (20 bytes): f16 d, f16 m, 16 bytes of nibbles; value i = d * q_i + m, q_i = byte i low
 *                    nibble for i < 16, byte i-16 high nibble for i >= 16;
 *   Q8_0 (34 bytes): f16 d, 32 int8; value i = q_i * d.
 * Each weight is computed with exactly gguf.quants' float32 operations (f16 -> f32 is exact; one
 * rounded multiply, then for Q4_1 one rounded add; built with -ffp-contract=off and written
 * with separate mul/add intrinsics, so never fused), then fed into the same per-element order
 * as kv_linear's (k-blocks of KC, acc = fma(x[k], w[k, c], acc) from 0, block sums added left
 * to right). Same weights, same operations, same order: y[c] has kv_linear's bits.
 * Lanes are 8 output rows at a time (a byte transpose puts one k of 8 rows in one vector). */
#include <stdint.h>
#include <string.h>

#define KV_Q4_1 2 /* ggml type ids */
#define KV_Q8_0 8

static inline float f16_to_f32(const unsigned char *p) { /* exact, no F16C needed */
    uint32_t h = (uint32_t)p[0] | ((uint32_t)p[1] << 8);
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    float f;
    if (e == 0) {
        f = ldexpf((float)man, -24); /* zero or subnormal: exact */
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else if (e == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((e + 112) << 23) | (man << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* The reference: one output row at a time, scalar, the same operations. */
static void rows_q_scalar(const float *x, long K, const unsigned char *const *rows, long c0, long c1, int qtype,
                          float *y) {
    for (long c = c0; c < c1; c++) {
        const unsigned char *r = rows[c];
        float yc = 0.0f;
        for (long k0 = 0; k0 < K; k0 += KC) {
            long k1 = k0 + KC < K ? k0 + KC : K;
            float acc = 0.0f;
            for (long k = k0; k < k1; k++) {
                long b = k / 32, i = k % 32;
                float w;
                if (qtype == KV_Q4_1) {
                    const unsigned char *blk = r + b * 20;
                    float d = f16_to_f32(blk), m = f16_to_f32(blk + 2);
                    int q = i < 16 ? (blk[4 + i] & 0x0F) : (blk[4 + i - 16] >> 4);
                    float dq = d * (float)q; /* two roundings, as numpy's (d * qs) + m */
                    w = dq + m;
                } else {
                    const unsigned char *blk = r + b * 34;
                    w = (float)(int8_t)blk[2 + i] * f16_to_f32(blk);
                }
                acc = FMAF(x[k], w, acc);
            }
            yc = k0 == 0 ? acc : yc + acc;
        }
        y[c] = yc;
    }
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
/* 16 bytes (4 dwords) at each of p[0..7] + off -> w[c] = dword c of rows 0..7 (lane = row). */
static inline void transpose_dwords_8x4(const unsigned char *const *p, long off, __m256i w[4]) {
    __m256i v[4], a[4];
    for (int i = 0; i < 4; i++) /* rows i and i + 4 in the two 128-bit halves */
        v[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p[i] + off))),
                                       _mm_loadu_si128((const __m128i *)(p[i + 4] + off)), 1);
    a[0] = _mm256_unpacklo_epi32(v[0], v[1]); /* r0d0 r1d0 r0d1 r1d1 | rows 4, 5 */
    a[1] = _mm256_unpackhi_epi32(v[0], v[1]); /* r0d2 r1d2 r0d3 r1d3 | rows 4, 5 */
    a[2] = _mm256_unpacklo_epi32(v[2], v[3]);
    a[3] = _mm256_unpackhi_epi32(v[2], v[3]);
    w[0] = _mm256_unpacklo_epi64(a[0], a[2]); /* r0d0 r1d0 r2d0 r3d0 | r4d0 .. r7d0 */
    w[1] = _mm256_unpackhi_epi64(a[0], a[2]);
    w[2] = _mm256_unpacklo_epi64(a[1], a[3]);
    w[3] = _mm256_unpackhi_epi64(a[1], a[3]);
}

static inline __m256i load_u32x8(const unsigned char *const *p, long off) {
    uint32_t v[8];
    for (int i = 0; i < 8; i++) memcpy(&v[i], p[i] + off, 4);
    return _mm256_setr_epi32((int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], (int)v[5], (int)v[6], (int)v[7]);
}

#ifndef QG
#define QG 2 /* groups of 8 rows in flight: independent fma chains (more spill registers; 2 was fastest of 1..4) */
#endif

/* Q4_1, block b of 8 rows p[0..7]: q[c] = nibble bytes 4c..4c+3 of each row (lane = row), d, m. */
static inline void load_q4_1_block8(const unsigned char *const *p, long b, __m256i q[4], __m256 *d, __m256 *m) {
    long off = b * 20;
    /* d (bytes 0-1) and m (2-3) of each row: 8 x 32 bits -> 8 f16 d's, then 8 f16 m's */
    const __m256i sel = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    __m256i dm = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(load_u32x8(p, off), sel), 0xD8);
    *d = _mm256_cvtph_ps(_mm256_castsi256_si128(dm));
    *m = _mm256_cvtph_ps(_mm256_extracti128_si256(dm, 1));
    transpose_dwords_8x4(p, off + 4, q);
}

/* Q8_0, block b of 8 rows: q[c] = int8 values 4c..4c+3 (c < 8) of each row, d. */
static inline void load_q8_0_block8(const unsigned char *const *p, long b, __m256i q[8], __m256 *d) {
    long off = b * 34;
    __m256i d16 = load_u32x8(p, off); /* f16 d in the low half of each lane */
    const __m128i sel = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    __m128i lo = _mm_shuffle_epi8(_mm256_castsi256_si128(d16), sel);
    __m128i hi = _mm_shuffle_epi8(_mm256_extracti128_si256(d16, 1), sel);
    *d = _mm256_cvtph_ps(_mm_unpacklo_epi64(lo, hi));
    transpose_dwords_8x4(p, off + 2, q);
    transpose_dwords_8x4(p, off + 18, q + 4);
}

#define QLANES (8 * QG)
/* QG * 8 rows p[0..QG*8): y[0..QG*8). Per block: every group's raw values transposed (lane = row),
 * then value by value in k order, each group's weight dequantized in registers and fma'd into
 * its chain (QG independent chains). */
static void groups_q(const float *x, long K, const unsigned char *const *p, const unsigned char *const *next,
                     int qtype, float *y) {
    long bs = qtype == KV_Q4_1 ? 20 : 34;
    __m256 ysum[QG], acc[QG], d[QG], m[QG];
    __m256i q[QG][8];
    const __m256i lo4 = _mm256_set1_epi32(0x0F);
    for (int g = 0; g < QG; g++) ysum[g] = acc[g] = _mm256_setzero_ps();
    long nb = K / 32;
    for (long b = 0; b < nb; b++) {
        const float *xb = x + b * 32;
        if (qtype == KV_Q4_1) {
            for (int g = 0; g < QG; g++) load_q4_1_block8(p + 8 * g, b, q[g], &d[g], &m[g]);
            /* value 4c + s: low nibble of byte 4c + s; value 16 + 4c + s: its high nibble */
            _Pragma("GCC unroll 2") for (int hi = 0; hi < 2; hi++)
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
            _Pragma("GCC unroll 4") for (int s = 0; s < 4; s++) {
                __m256 xj = _mm256_broadcast_ss(xb + 16 * hi + 4 * c + s);
                int sh = 8 * s + 4 * hi;
                _Pragma("GCC unroll 8") for (int g = 0; g < QG; g++) {
                    __m256i v = _mm256_and_si256(sh ? _mm256_srli_epi32(q[g][c], sh) : q[g][c], lo4);
                    __m256 w = _mm256_add_ps(_mm256_mul_ps(d[g], _mm256_cvtepi32_ps(v)), m[g]);
                    acc[g] = _mm256_fmadd_ps(xj, w, acc[g]);
                }
            }
        } else {
            for (int g = 0; g < QG; g++) load_q8_0_block8(p + 8 * g, b, q[g], &d[g]);
            _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++)
            _Pragma("GCC unroll 4") for (int s = 0; s < 4; s++) {
                __m256 xj = _mm256_broadcast_ss(xb + 4 * c + s);
                _Pragma("GCC unroll 8") for (int g = 0; g < QG; g++) {
                    __m256i v = _mm256_srai_epi32(s == 3 ? q[g][c] : _mm256_slli_epi32(q[g][c], 24 - 8 * s), 24);
                    __m256 w = _mm256_mul_ps(_mm256_cvtepi32_ps(v), d[g]);
                    acc[g] = _mm256_fmadd_ps(xj, w, acc[g]);
                }
            }
        }
        if (next) /* the next rows' bytes at this block: QG * 8 streams are too many for the hardware prefetcher */
            for (int i = 0; i < QLANES; i++) PREFETCH(next[i] + b * bs);
        long kend = (b + 1) * 32;
        if (kend % KC == 0 || kend == K) { /* a k-block ends: add its sum in order */
            for (int g = 0; g < QG; g++) {
                ysum[g] = (kend <= KC) ? acc[g] : _mm256_add_ps(ysum[g], acc[g]);
                acc[g] = _mm256_setzero_ps();
            }
        }
    }
    for (int g = 0; g < QG; g++) _mm256_storeu_ps(y + 8 * g, ysum[g]);
}

static void rows_q(const float *x, long K, const unsigned char *const *rows, long c0, long c1, int qtype, float *y) {
    long c = c0;
    for (; c + QLANES <= c1; c += QLANES)
        groups_q(x, K, rows + c, c + 2 * QLANES <= c1 ? rows + c + QLANES : NULL, qtype, y + c);
    if (c < c1) { /* a short last group: pad with its first row, keep the real lanes */
        const unsigned char *p[QLANES];
        float t[QLANES];
        for (int i = 0; i < QLANES; i++) p[i] = rows[c + i < c1 ? c + i : c];
        groups_q(x, K, p, NULL, qtype, t);
        for (long i = 0; c + i < c1; i++) y[c + i] = t[i];
    }
}
#define QSTR_(x) #x
#define QSTR(x) QSTR_(x)
#define QVEC "avx2: 8 rows a vector, " QSTR(QG) " in flight, prefetched"
#else
#define QLANES 1
static void rows_q(const float *x, long K, const unsigned char *const *rows, long c0, long c1, int qtype, float *y) {
    rows_q_scalar(x, K, rows, c0, c1, qtype, y);
}
#define QVEC "scalar"
#endif

const char *kv_q_isa(void) { return QVEC; }

/* y[c] = x @ W[c, :] for c < C, W's rows as GGUF blocks at rows[c]; x (K,), K a multiple of 32.
 * qtype: KV_Q4_1 or KV_Q8_0 (anything else: returns -1). reference != 0: the scalar loop. */
int kv_linear_q(const float *x, long K, const unsigned char *const *rows, long C, int qtype, float *y,
                int nthreads, int reference) {
    if ((qtype != KV_Q4_1 && qtype != KV_Q8_0) || K % 32) return -1;
    if (reference) {
        rows_q_scalar(x, K, rows, 0, C, qtype, y);
        return 0;
    }
#ifdef _OPENMP
    int nt = nthreads > 0 ? nthreads : omp_get_max_threads();
    long groups = (C + QLANES - 1) / QLANES;
    if (nt > 1 && groups >= 2 * nt) {
        #pragma omp parallel num_threads(nt)
        {
            int i = omp_get_thread_num(), n = omp_get_num_threads();
            long c0 = groups * i / n * QLANES, c1 = groups * (i + 1) / n * QLANES;
            rows_q(x, K, rows, c0, c1 < C ? c1 : C, qtype, y);
        }
        return 0;
    }
#endif
    (void)nthreads;
    rows_q(x, K, rows, 0, C, qtype, y);
    return 0;
}
