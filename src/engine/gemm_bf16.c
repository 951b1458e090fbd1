/*
 * gemm_bf16.c — a screening product with AVX512-BF16: y[t, r] ≈ Σ_k W[r, k] · X[t, k] for
 * bf16 W and bf16 X, each bf16 pair product exact in f32 (vdpbf16ps) and the sum
 * accumulated in f32 with a stated error bound (eng_sum_gamma). It is not a path of
 * eng_matmul (the executor keeps f32-accurate products): it serves callers that screen
 * candidates and recompute the survivors exactly (down-meta's first pass), and that need
 * twice the f32 GEMM's multiply rate on CPUs without AMX.
 *
 * Layout as gemm.c (the BLIS scheme): X is packed once per call into groups of 64 tokens,
 * k in pairs (xp[(g · kp + k) · 64 + t] holds X[t, 2k] and X[t, 2k + 1] as one 32-bit
 * lane, zero past n). The micro-kernel holds a 6-row × 64-token block of C in 24 registers
 * and, per k pair, broadcasts one bf16 pair of each of the 6 weight rows, read in place.
 * A thread takes a tile of weight rows (sized to stay in L2 with one packed group) and
 * runs every group over it; each output is one chain of cols / 2 vdpbf16ps on one lane.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "engine_int.h"

#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define MR 6                    /* weight rows per micro-kernel block */
#define GT 64                   /* tokens per packed group (four 16-lane vectors) */
#define TILE_W (240 * 1024)     /* weight bytes per tile: stays in L2 beside one group */

int eng_bf16_dot_ready(void)
{
    static int cpu = -1;
    if (cpu < 0) cpu = __builtin_cpu_supports("avx512bf16");
    return cpu && eng_avx512();
}

/* γ_n = n·u / (1 − n·u): a sum of exact products with at most n f32 roundings on its
 * way, in any order, is within γ_n · Σ|products| of the exact sum. u = 2^-23 (one ulp, not
 * half) also covers a unit that truncates instead of rounding to nearest. Each vdpbf16ps
 * adds two exact products to its lane: at most two roundings per k pair, cols in all;
 * inputs and results below 2^-126 may be flushed to zero (the instruction's DAZ/FTZ),
 * which eng_bf16_sum_slack bounds. */
double eng_sum_gamma(int n)
{
    const double nu = (double)n * ldexp(1.0, -23);
    return nu / (1 - nu);
}

double eng_bf16_sum_slack(int cols, double xnorm, double wnorm)
{
    /* a flushed input loses at most 2^-126 times its partner (Σ|partner| ≤ √cols · norm),
     * a flushed partial sum at most 2^-126 per rounding */
    return ldexp(1.0, -125) * (sqrt((double)cols) * (xnorm + wnorm) + 2.0 * cols);
}

typedef struct bjob {
    const uint8_t *w;
    size_t rb;
    int rows, cols, n, kp, chunk;
    const uint32_t *xp;
    uint8_t *pad;       /* per part: MR rows of cols bf16, for the last short block */
    int parts;
    float *y;
    atomic_int next;
} bjob;

/* C[MR][64] = W[MR rows, stride rb][kp pairs] · X[kp pairs][64 tokens]. */
TBF static void micro(const uint8_t *w, size_t rb, const uint32_t *x, int kp, float *c)
{
    __m512 a[MR][4];
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) a[i][v] = _mm512_setzero_ps();
    for (int k = 0; k < kp; k++) {
        __m512bh xv[4];
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)
            xv[v] = (__m512bh)_mm512_load_si512(x + (size_t)k * GT + v * 16);
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {
            int32_t pair;
            memcpy(&pair, w + (size_t)i * rb + 4 * (size_t)k, 4);
            __m512bh b = (__m512bh)_mm512_set1_epi32(pair);
            _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)
                a[i][v] = _mm512_dpbf16_ps(a[i][v], xv[v], b);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)
            _mm512_store_ps(c + i * GT + v * 16, a[i][v]);
}

static void bf16_part(void *ctx, int part, int parts)
{
    bjob *j = ctx;
    (void)parts;
    if (part >= j->parts) return;   /* the pool grew since the call: the others claim it all */
    const int groups = (j->n + GT - 1) / GT;
    const size_t bytes = (size_t)j->cols * 2;
    _Alignas(64) float cb[MR * GT];
    uint8_t *pad = j->pad + (size_t)part * MR * bytes;
    int lo;
    while ((lo = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed)) < j->rows) {
        const int hi = lo + j->chunk < j->rows ? lo + j->chunk : j->rows;
        for (int g = 0; g < groups; g++) {
            const int t0 = g * GT, tn = j->n - t0 < GT ? j->n - t0 : GT;
            const uint32_t *xg = j->xp + (size_t)g * j->kp * GT;
            for (int r = lo; r < hi; r += MR) {
                const int nr = hi - r < MR ? hi - r : MR;
                const uint8_t *w = j->w + (size_t)r * j->rb;
                size_t rb = j->rb;
                if (nr < MR) {
                    for (int i = 0; i < MR; i++) {
                        if (i < nr) memcpy(pad + i * bytes, w + i * j->rb, bytes);
                        else memset(pad + i * bytes, 0, bytes);
                    }
                    w = pad;
                    rb = bytes;
                }
                micro(w, rb, xg, j->kp, cb);
                for (int t = 0; t < tn; t++) {
                    float *yt = j->y + (size_t)(t0 + t) * j->rows + r;
                    for (int i = 0; i < nr; i++) yt[i] = cb[i * GT + t];
                }
            }
        }
    }
}

int eng_matmul_bf16(const void *w, int rows, int cols, size_t row_bytes, const uint16_t *x,
                    int n, float *y)
{
    if (n <= 0 || rows <= 0) return 0;
    if (cols % 2 || !eng_bf16_dot_ready()) return -1;
    const int kp = cols / 2, groups = (n + GT - 1) / GT;
    const int parts = eng_threads();
    uint32_t *xp = aligned_alloc(64, (size_t)groups * kp * GT * sizeof *xp);
    uint8_t *pad = malloc((size_t)parts * MR * (size_t)cols * 2);
    if (!xp || !pad) {
        free(xp);
        free(pad);
        return -1;
    }
    for (int g = 0; g < groups; g++) {
        uint32_t *dst = xp + (size_t)g * kp * GT;
        const int t0 = g * GT, tn = n - t0 < GT ? n - t0 : GT;
        if (tn < GT) memset(dst, 0, (size_t)kp * GT * sizeof *dst);
        for (int t = 0; t < tn; t++) {
            const uint16_t *src = x + (size_t)(t0 + t) * cols;
            for (int k = 0; k < kp; k++)
                dst[(size_t)k * GT + t] = (uint32_t)src[2 * k] | (uint32_t)src[2 * k + 1] << 16;
        }
    }
    bjob j = {.w = w, .rb = row_bytes, .rows = rows, .cols = cols, .n = n, .kp = kp,
              .xp = xp, .pad = pad, .parts = parts, .y = y};
    /* tiles that stay in L2, small enough that a delayed thread's share is taken over */
    int chunk = (int)(TILE_W / ((size_t)cols * 2)) / MR * MR;
    const int fair = rows / (parts * 4) / MR * MR;
    chunk = chunk > fair ? fair : chunk;
    j.chunk = chunk < MR ? MR : chunk;
    atomic_init(&j.next, 0);
    eng_parallel(bf16_part, &j);
    free(xp);
    free(pad);
    return 0;
}
