/*
 * gemm.c — the prefill GEMM at f32 accuracy with AVX-512: y[t, r] = Σ_k W[r, k] · x[t, k]
 * for many activation rows, weights of any executable dtype converted exactly to f32 a
 * tile of rows at a time (the caller's row converter), products and sums in f32 FMA.
 *
 * Why not sgemm: Debian's OpenBLAS picks its AVX2 (Haswell) kernels on CPUs it does not
 * know, such as Zen 5, which halves the FMA rate (measured 108 vs 157 GFLOP/s for the same
 * product with OPENBLAS_CORETYPE=SkylakeX; the variable must be set before the process
 * starts, so a library cannot choose it). This kernel is written for AVX-512 directly.
 *
 * Layout (the BLIS scheme): activations are packed once per product, transposed into
 * groups of 64 tokens (xp[(g · cols + k) · 64 + t], zero past n), so one k-step of a group
 * is four 16-lane vectors. The micro-kernel holds a 6-row × 64-token block of C in 24
 * registers and, per k, broadcasts one f32 weight of each of the 6 rows against the four
 * token vectors. k runs in chunks of KC so a chunk of packed activations stays in L1/L2;
 * C is parked in a small buffer between chunks. Accuracy: exact weights and activations,
 * f32 FMA accumulation — the same class as sgemm (only the summation order differs).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "engine_int.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define MR 6          /* weight rows per micro-kernel block */
#define GT 64         /* tokens per packed group (four 16-lane vectors) */
#define KC 256        /* k per chunk: 64 KiB of packed activations */
#define TILE_F32 (192 * 1024)   /* f32 weight tile per thread: stays in L2 */

int eng_avx512(void)
{
    static int cpu = -1;
    if (cpu < 0)
        cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl");
    const char *e = getenv("LQL_NO_AVX512");
    return cpu && !(e && *e == '1');
}

/* Weight rows per tile for a width: the f32 tile stays in L2, a multiple of MR. */
static int tile_rows(int cols)
{
    int rt = (int)(TILE_F32 / ((size_t)cols * sizeof(float))) / MR * MR;
    return rt < MR ? MR : rt;
}

int eng_xpack_make(eng_xpack *xp, const float *x, int n, int cols)
{
    const int groups = (n + GT - 1) / GT, rt = tile_rows(cols);
    xp->n = n;
    xp->cols = cols;
    xp->parts = eng_threads();
    /* per part: the weight tile, then C (aligned to 64 bytes for the micro-kernel) */
    xp->scratch_floats = ((size_t)rt * cols + 15) / 16 * 16 + (size_t)rt * GT;
    xp->p = aligned_alloc(64, (size_t)groups * cols * GT * sizeof(float));
    xp->scratch = aligned_alloc(64, (size_t)xp->parts * xp->scratch_floats * sizeof(float));
    if (!xp->p || !xp->scratch) {
        eng_xpack_free(xp);
        return -1;
    }
    for (int g = 0; g < groups; g++) {
        float *dst = xp->p + (size_t)g * cols * GT;
        const int t0 = g * GT, tn = n - t0 < GT ? n - t0 : GT;
        if (tn < GT) memset(dst, 0, (size_t)cols * GT * sizeof(float));
        /* 16 k at a time per token keeps both sides of the transpose in cache lines */
        for (int k0 = 0; k0 < cols; k0 += 16) {
            const int kn = cols - k0 < 16 ? cols - k0 : 16;
            for (int t = 0; t < tn; t++) {
                const float *src = x + (size_t)(t0 + t) * cols + k0;
                for (int k = 0; k < kn; k++) dst[(size_t)(k0 + k) * GT + t] = src[k];
            }
        }
    }
    return 0;
}

void eng_xpack_free(eng_xpack *xp)
{
    free(xp->p);
    free(xp->scratch);
    xp->p = NULL;
    xp->scratch = NULL;
}

/* C[MR][NV · 16] (+)= W[MR rows, stride ldw][kn] · X[kn][64]: NV token vectors. */
#define MICRO(NV)                                                                              \
T512 static void micro_##NV(const float *w, size_t ldw, const float *x, int kn, float *c,     \
                            int first)                                                         \
{                                                                                              \
    __m512 a[MR][NV];                                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                   \
            a[i][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(c + i * GT + v * 16);       \
    for (int k = 0; k < kn; k++) {                                                             \
        __m512 xv[NV];                                                                         \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                   \
            xv[v] = _mm512_load_ps(x + (size_t)k * GT + v * 16);                               \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {                                 \
            __m512 b = _mm512_set1_ps(w[(size_t)i * ldw + k]);                                 \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                               \
                a[i][v] = _mm512_fmadd_ps(b, xv[v], a[i][v]);                                  \
        }                                                                                      \
    }                                                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                   \
            _mm512_store_ps(c + i * GT + v * 16, a[i][v]);                                     \
}
MICRO(1)
MICRO(2)
MICRO(3)
MICRO(4)

/* y for weight rows [r0, r1), r1 - r0 <= tile_rows(cols), with the part's scratch. */
static void gemm_tile(const eng_xpack *xp, int r0, int r1, float *y, int ldy, float *wt, float *cb,
                      void (*row)(const void *ctx, int r, float *dst), const void *ctx,
                      const char *pf, size_t pf_bytes)
{
    const int cols = xp->cols, groups = (xp->n + GT - 1) / GT;
    const int tr = r1 - r0, trp = (tr + MR - 1) / MR * MR;
    /* the next tile's stored bytes, asked into L2 a slice per micro-kernel call, so its
     * conversion does not wait on DRAM */
    const int calls = groups * ((cols + KC - 1) / KC) * (trp / MR);
    const size_t pf_step = (pf_bytes / (size_t)calls + 63) & ~(size_t)63;
    const char *pf_end = pf ? pf + pf_bytes : NULL;
    for (int i = 0; i < tr; i++) row(ctx, r0 + i, wt + (size_t)i * cols);
    if (trp > tr) memset(wt + (size_t)tr * cols, 0, (size_t)(trp - tr) * cols * sizeof *wt);
    for (int g = 0; g < groups; g++) {
        const int t0 = g * GT, tn = xp->n - t0 < GT ? xp->n - t0 : GT, nv = (tn + 15) / 16;
        const float *xg = xp->p + (size_t)g * cols * GT;
        for (int k0 = 0; k0 < cols; k0 += KC) {
            const int kn = cols - k0 < KC ? cols - k0 : KC;
            for (int b = 0; b < trp; b += MR) {
                for (size_t o = 0; pf < pf_end && o < pf_step; o += 64, pf += 64)
                    _mm_prefetch(pf, _MM_HINT_T1);
                const float *w = wt + (size_t)b * cols + k0;
                const float *x = xg + (size_t)k0 * GT;
                float *c = cb + (size_t)b * GT;
                switch (nv) {
                case 1: micro_1(w, (size_t)cols, x, kn, c, k0 == 0); break;
                case 2: micro_2(w, (size_t)cols, x, kn, c, k0 == 0); break;
                case 3: micro_3(w, (size_t)cols, x, kn, c, k0 == 0); break;
                default: micro_4(w, (size_t)cols, x, kn, c, k0 == 0); break;
                }
            }
        }
        /* C is [row][token]; y is [token][row] */
        for (int t = 0; t < tn; t++) {
            float *yt = y + (size_t)(t0 + t) * ldy + r0;
            for (int i = 0; i < tr; i++) yt[i] = cb[(size_t)i * GT + t];
        }
    }
}

void eng_gemm_part(const eng_xpack *xp, int part, atomic_int *next, int rows, float *y,
                   void (*row)(const void *ctx, int r, float *dst), const void *ctx,
                   const void *src, size_t src_rb)
{
    const int rt = tile_rows(xp->cols);
    if (part >= xp->parts) return;   /* the pool grew since packing: the others claim it all */
    float *wt = xp->scratch + (size_t)part * xp->scratch_floats;
    float *cb = wt + ((size_t)rt * xp->cols + 15) / 16 * 16;
    /* chunks of at most one tile, small enough that a delayed thread's share is taken over;
     * each part claims its next chunk before computing the current one, so that chunk's
     * rows can be fetched while this one computes */
    int chunk = rows / (xp->parts * 4) / MR * MR;
    chunk = chunk < MR ? MR : chunk > rt ? rt : chunk;
    int lo = atomic_fetch_add_explicit(next, chunk, memory_order_relaxed);
    while (lo < rows) {
        const int hi = lo + chunk < rows ? lo + chunk : rows;
        const int nlo = atomic_fetch_add_explicit(next, chunk, memory_order_relaxed);
        const int nhi = nlo + chunk < rows ? nlo + chunk : rows;
        const char *pf = src && nlo < rows ? (const char *)src + (size_t)nlo * src_rb : NULL;
        gemm_tile(xp, lo, hi, y, rows, wt, cb, row, ctx, pf, pf ? (size_t)(nhi - nlo) * src_rb : 0);
        lo = nlo;
    }
}
