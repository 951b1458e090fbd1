/*
 * peak.c — the multiply-add ceilings of this CPU next to down-meta's screening products, in
 * the same minutes: a register-only loop of each instruction (vfmadd231ps, vdpbf16ps,
 * vpdpbusd) on 12 independent accumulators (fewer leave a single core latency-bound: an
 * earlier 3.56 G/s figure for vpdpbusd came from such a loop), on one thread and on the
 * engine's pool; then eng_screen_u8s8 (as down-meta runs it: packed rows on AMX-INT8 tiles)
 * and eng_matmul_bf16 on a down-meta tile (4080 vocabulary rows × hidden, 256 features) as
 * a share of the pool's ceiling.
 *
 *   peak [--hidden 2048] [--reps 8]      (without AVX-512: min(reps, 3) rounds of AVX2's loops)
 *
 * Multiply-adds per second: 16 per vfmadd231ps, 32 per vdpbf16ps, 64 per vpdpbusd. Wall
 * clock, printed, never asserted.
 *
 * Without AVX-512 (or with LQL_NO_AVX512=1) it measures AVX2's FMA ceiling instead, and a
 * dot-product GEMM step from L1 (12 FMAs: 2 weight rows × 6 token rows, 8 k at a time, as
 * llama.cpp's tinyBLAS forms it) with the weights loaded as f32 and as f16 widened in
 * registers by vcvtph2ps: what reading f16 rows in place would cost (ENGINE.md, session 47).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "engine_int.h"
#include "bandwidth.h"
#include "screen_rate.h"

#define STEPS 40000000L   /* loop iterations per thread, 12 instructions each */

/* the register-only loops, then (AVX2) the dot step with f32 and with f16 weights */
enum { FMA, BF16, VNNI, FMA256, DOT32, DOT16 };
static const char *const iname[] = {"vfmadd231ps", "vdpbf16ps", "vpdpbusd",
                                    "vfmadd231ps (8 lanes)", "dot step, f32 weights", "dot step, f16 weights"};
static const int macs[] = {16, 32, 64, 8, 8, 8};

/* the barrier keeps all 12 accumulators in registers and every step live */
#define KEEP12(a)                                                                              \
    __asm__ volatile("" : "+v"(a##0), "+v"(a##1), "+v"(a##2), "+v"(a##3), "+v"(a##4),         \
                          "+v"(a##5), "+v"(a##6), "+v"(a##7), "+v"(a##8), "+v"(a##9),         \
                          "+v"(a##10), "+v"(a##11))

static volatile float sinkf;
static volatile int sinki;

/* 12 chains of OP(c, x, y) on accumulators of type V started at ZERO, with operands of
 * type X; SINK(c0, c5, c11) keeps the result live */
#define LOOP12(NAME, TARGET, V, ZERO, X, XV, YV, OP, SINK)                                     \
    __attribute__((target(TARGET))) static void NAME(void)                                     \
    {                                                                                          \
        V c0 = ZERO, c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0,   \
          c9 = c0, c10 = c0, c11 = c0;                                                         \
        const X x = XV, y = YV;                                                                \
        for (long k = 0; k < STEPS; k++) {                                                     \
            c0 = OP(c0, x, y); c1 = OP(c1, x, y); c2 = OP(c2, x, y); c3 = OP(c3, x, y);        \
            c4 = OP(c4, x, y); c5 = OP(c5, x, y); c6 = OP(c6, x, y); c7 = OP(c7, x, y);        \
            c8 = OP(c8, x, y); c9 = OP(c9, x, y); c10 = OP(c10, x, y); c11 = OP(c11, x, y);    \
            KEEP12(c);                                                                         \
        }                                                                                      \
        SINK(c0, c5, c11);                                                                     \
    }

__attribute__((target("avx512f"))) static void sink512(__m512 a, __m512 b, __m512 c)
{
    sinkf = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, c), b));
}

__attribute__((target("avx512f"))) static void sink512i(__m512i a, __m512i b, __m512i c)
{
    sinki = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a, c), b));
}

static void sink256(__m256 a, __m256 b, __m256 c)
{
    float o[8];
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(a, c), b));
    sinkf = o[0];
}

LOOP12(loop_fma, "avx512f", __m512, _mm512_set1_ps(0.f), __m512, _mm512_set1_ps(0.999f),
       _mm512_set1_ps(1e-3f), _mm512_fmadd_ps, sink512)
LOOP12(loop_bf16, "avx512f,avx512bf16", __m512, _mm512_set1_ps(0.f), __m512bh,
       (__m512bh)_mm512_set1_epi16(0x3f80), (__m512bh)_mm512_set1_epi16(0x3a83), _mm512_dpbf16_ps, sink512)
LOOP12(loop_vnni, "avx512f,avx512vnni", __m512i, _mm512_setzero_si512(), __m512i, _mm512_set1_epi8(3),
       _mm512_set1_epi8(-2), _mm512_dpbusd_epi32, sink512i)
LOOP12(loop_fma256, "avx2,fma", __m256, _mm256_set1_ps(0.f), __m256, _mm256_set1_ps(0.999f),
       _mm256_set1_ps(1e-3f), _mm256_fmadd_ps, sink256)

/* The dot-product step over 512 k of 2 weight rows (f16 when half, else f32) and 6 token
 * rows, all in L1, repeated; 12 accumulators, one FMA each per 8 k. Out of line: inlined
 * into run_loop's switch it ran 49-64 GFLOP/s on one thread against 68-78. */
#define DOT_K 512
static float dot_w32[2][DOT_K], dot_x[6][DOT_K];
static uint16_t dot_w16[2][DOT_K];

__attribute__((noinline)) static void loop_dot(int half)
{
    __m256 a[2][6];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 6; j++) a[i][j] = _mm256_setzero_ps();
    for (long r = 0; r < STEPS / (DOT_K / 8); r++)
        for (int k = 0; k < DOT_K; k += 8) {
            __m256 w[2];
            for (int i = 0; i < 2; i++)
                w[i] = half ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(dot_w16[i] + k)))
                            : _mm256_loadu_ps(dot_w32[i] + k);
            for (int j = 0; j < 6; j++) {
                const __m256 x = _mm256_loadu_ps(dot_x[j] + k);
                a[0][j] = _mm256_fmadd_ps(w[0], x, a[0][j]);
                a[1][j] = _mm256_fmadd_ps(w[1], x, a[1][j]);
            }
        }
    __m256 t = _mm256_setzero_ps();   /* every chain, so none is dead */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 6; j++) t = _mm256_add_ps(t, a[i][j]);
    sink256(t, t, t);
}

static void run_loop(void *ctx, int part, int parts)
{
    (void)part;
    (void)parts;
    switch (*(const int *)ctx) {
    case FMA: loop_fma(); break;
    case BF16: loop_bf16(); break;
    case VNNI: loop_vnni(); break;
    case FMA256: loop_fma256(); break;
    default: loop_dot(*(const int *)ctx == DOT16); break;
    }
}

/* G multiply-adds per second of one loop, on one thread or on the pool. */
static double ceiling(int which, int pool)
{
    const double t0 = bw_now();
    if (pool) eng_parallel(run_loop, &which);
    else run_loop(&which, 0, 1);
    const double t = bw_now() - t0;
    return (double)STEPS * 12 * macs[which] * (pool ? eng_threads() : 1) / t / 1e9;
}

/* Without AVX-512: AVX2's FMA ceiling and the dot step, reps rounds. */
static int main_avx2(int reps)
{
    for (int k = 0; k < DOT_K; k++) {
        for (int i = 0; i < 2; i++) {
            dot_w16[i][k] = vx_f32_to_f16(1e-3f * (float)(k % 7 - 3));
            dot_w32[i][k] = vx_f16_to_f32(dot_w16[i][k]);
        }
        for (int j = 0; j < 6; j++) dot_x[j][k] = 1e-3f * (float)(k % 5 - 2);
    }
    for (int r = 0; r < reps; r++)
        for (int w = FMA256; w <= DOT16; w++) {
            const double one = ceiling(w, 0), pool = ceiling(w, 1);
            printf("%-24s one thread %6.1f G multiply-adds/s (%5.1f GFLOP/s)   pool %6.1f G/s (%5.1f GFLOP/s)\n",
                   iname[w], one, 2 * one, pool, 2 * pool);
        }
    return 0;
}

int main(int argc, char **argv)
{
    int hidden = 2048, reps = 8;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--hidden")) hidden = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else { fprintf(stderr, "peak: unknown option %s\n", argv[i]); return 2; }
    }
    if (hidden < 4 || hidden % 4 || hidden > 65536 || reps < 1) {
        fprintf(stderr, "peak: --hidden must be a positive multiple of 4 up to 65536, --reps positive\n");
        return 2;
    }
    double ld[3] = {0};
    if (getloadavg(ld, 3) < 0) ld[0] = -1;
    printf("threads %d, load %.2f\n", eng_threads(), ld[0]);
    if (!eng_avx512()) {
        printf("no AVX-512 (or LQL_NO_AVX512=1): AVX2's ceilings, %d rounds\n", reps < 3 ? reps : 3);
        return main_avx2(reps < 3 ? reps : 3);
    }
    if (eng_u8s8_x_limit() < 127 || !eng_bf16_dot_ready()) {   /* < 127: no VNNI */
        fprintf(stderr, "peak: needs AVX-512 with VNNI and BF16, or no AVX-512 at all (this CPU has AVX-512 without them)\n");
        return 1;
    }
    double pool_ceil[3];
    for (int w = FMA; w <= VNNI; w++) {
        const double one = ceiling(w, 0);
        pool_ceil[w] = ceiling(w, 1);
        printf("%-12s one thread %7.1f G multiply-adds/s (%.2f G instr/s)   pool %7.1f G/s (%.2f G instr/s)\n",
               iname[w], one, one / macs[w], pool_ceil[w], pool_ceil[w] / macs[w]);
    }
    /* down-meta's tile: vocabulary rows × hidden against 256 features */
    const int rows = 4080, n = 256;
    const double work = (double)rows * hidden * n;
    /* the int8 product as down-meta runs it (screen_rate.h) */
    const double best8 = screen_best(rows, hidden, n, reps);
    if (best8 < 0) { fprintf(stderr, "peak: the int8 screen failed (out of memory)\n"); return 1; }
    printf("eng_screen_u8s8 %d x %d, %d features: %7.1f G multiply-adds/s, %.2f of the pool's vpdpbusd%s\n",
           rows, hidden, n, work / best8 / 1e9, work / best8 / 1e9 / pool_ceil[VNNI],
           eng_u8s8_amx(hidden) ? " (on AMX-INT8 tiles)" : "");
    uint16_t *wb = malloc((size_t)rows * hidden * 2), *xb = malloc((size_t)n * hidden * 2);
    void *y = malloc((size_t)n * rows * 4);
    if (!wb || !xb || !y) { fprintf(stderr, "peak: out of memory\n"); return 1; }
    uint32_t s = 12345;
    for (size_t i = 0; i < (size_t)rows * hidden; i++) {
        s = s * 1664525u + 1013904223u;
        wb[i] = (uint16_t)(0x3c00 | (s >> 25));
    }
    for (size_t i = 0; i < (size_t)n * hidden; i++) {
        s = s * 1664525u + 1013904223u;
        xb[i] = (uint16_t)(0xbc00 | (s >> 25));
    }
    double bestb = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = bw_now();
        if (eng_matmul_bf16(wb, rows, hidden, (size_t)hidden * 2, xb, n, y) != 0) return 1;
        const double t = bw_now() - t0;
        bestb = t < bestb ? t : bestb;
    }
    printf("eng_matmul_bf16 %d x %d, %d features: %7.1f G multiply-adds/s, %.2f of the pool's vdpbf16ps\n",
           rows, hidden, n, work / bestb / 1e9, work / bestb / 1e9 / pool_ceil[BF16]);
    free(wb);
    free(xb);
    free(y);
    return 0;
}
