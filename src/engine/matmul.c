/*
 * matmul.c — eng_matmul, the engine's one door to matrix products, and the weight-view
 * helpers.
 *
 * Weights stay where the mmap put them, in their stored dtype. Two paths:
 *  - few rows of x (decode, n <= SMALL_N; f32/f16/bf16 weights up to FEW_N): a streaming
 *    kernel reads each weight row once,
 *    converts f16/bf16 to f32 in registers (AVX-512 when the CPU has it, else AVX2) and
 *    dots it with every x row while the weight row is in L1. Rows are split over the
 *    pool's threads. Decode is memory bound, so this reads each weight byte once per token.
 *  - many rows (prefill): bf16 weights on AMX tiles where the CPU has them (amx.c), else
 *    the f32 GEMM (gemm.c: with AVX-512 bf16 read in place, f16 too off Intel, other
 *    dtypes through f32 tiles that stay in L2; with AVX2 only, every dtype through the
 *    tiles).
 * Block-quantised dtypes (q8_0, q4_k, ...) go to qkernels.c (eng_qgemv / eng_qgemm), which
 * computes on the blocks in place, except a source-exact MXFP4 matrix, which runs as the
 * bf16 matrix it decodes to (runs_as_bf16); a dtype no path executes is refused at bind.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include <cblas.h>
#include "engine_int.h"
#include "qkernels.h"

#define SMALL_N 8
/* f32/f16/bf16 weights stream up to this many rows of x (AVX-512): few_block ran 1.1-1.9x
 * the GEMM's rate at 9-16 rows (ENGINE.md session 37), and 1.3-3.7x AMX's (session 38). */
#define FEW_N 16

void eng_w_of(eng_w *w, const vx_tensor *t)
{
    uint64_t rb = 0;
    memset(w, 0, sizeof *w);
    w->dt = t->dtype;
    w->data = t->data;
    w->rows = t->ndim >= 2 ? (int)t->shape[0] : 1;
    w->cols = (int)t->shape[t->ndim - 1];
    vx_dtype_nbytes(t->dtype, (uint64_t)w->cols, 1, &rb);
    w->row_bytes = (size_t)rb;
}

void eng_add_bias(float *y, const float *b, int n, int w)
{
    if (!b) return;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < w; i++) y[(size_t)t * w + i] += b[i];
}

int eng_dtype_executable(vx_dtype t)
{
    return t == VX_F32 || t == VX_F16 || t == VX_BF16 || eng_qsupported(t);
}

static int is_block(vx_dtype t) { return t != VX_F32 && t != VX_F16 && t != VX_BF16; }

void eng_row_f32(vx_dtype dt, const void *src, float *dst, size_t n)
{
    if (is_block(dt)) vx_dequantize_row(dt, src, dst, n);
    else vx_row_to_f32(dt, src, dst, n);
}

/* ---------------------------------------------------------------- scalar helpers */

float eng_row_elem(vx_dtype dt, const void *row, int k)
{
    const char *r = row;
    float v = 0;
    if (is_block(dt)) {
        /* decode only the block holding element k */
        unsigned be = vx_dtype_block_elems(dt);
        float blk[be];
        vx_dequantize_row(dt, r + (size_t)(k / be) * vx_dtype_block_bytes(dt), blk, be);
        return blk[k % be];
    }
    vx_row_to_f32(dt, r + (size_t)k * (dt == VX_F32 ? 4 : 2), &v, 1);
    return v;
}

/* Bytes between stored rows of a transposed view (0 in the view: packed). */
static size_t trans_stride(const eng_w *w)
{
    uint64_t rb = 0;
    if (w->row_bytes) return w->row_bytes;
    vx_dtype_nbytes(w->dt, (uint64_t)w->rows, 1, &rb);
    return (size_t)rb;
}

float eng_w_at(const eng_w *w, int r, int c)
{
    if (w->trans) return eng_row_elem(w->dt, (const char *)w->data + (size_t)c * trans_stride(w), r);
    return eng_row_elem(w->dt, (const char *)w->data + (size_t)r * w->row_bytes, c);
}

/* 8 weights of row p from element k, as f32 (AVX2 + F16C). */
static inline __attribute__((always_inline)) __m256 load8(vx_dtype dt, const void *p, int k)
{
    if (dt == VX_F32) return _mm256_loadu_ps((const float *)p + k);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + k));
    if (dt == VX_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static float tail_dot(vx_dtype dt, const void *row, const float *x, int k, int cols)
{
    float s = 0, t;
    for (; k < cols; k++) {
        vx_row_to_f32(dt, (const char *)row + (size_t)k * (dt == VX_F32 ? 4 : 2), &t, 1);
        s += t * x[k];
    }
    return s;
}

float eng_dot(const float *a, const float *b, int n)
{
    __m256 acc = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= n; k += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
    float s = eng_hsum256(acc);
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define AI __attribute__((always_inline))

T512 static inline AI __m512 load16(vx_dtype dt, const void *p, int k)
{
    if (dt == VX_F32) return _mm512_loadu_ps((const float *)p + k);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + k));
    if (dt == VX_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* x's even and odd elements of the 32-block at k (dot by pairs, below): pre-permuted
 * (x_pairs, once per product) or permuted here in registers. */
T512 static inline AI void x_evod(const float *x, int k, int perm, __m512 *e, __m512 *o)
{
    if (perm) {
        *e = _mm512_loadu_ps(x + k);
        *o = _mm512_loadu_ps(x + k + 16);
        return;
    }
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + 16);
    *e = _mm512_permutex2var_ps(a, ie, b);
    *o = _mm512_permutex2var_ps(a, io, b);
}

/* The 32 weights of a row at column k as two f32 vectors: w0 pairs with x[k, k + 16) (for
 * bf16, the block's even elements), w1 with the rest. bf16 by pairs: a 64-byte load holds
 * 16 pairs; the even ones become f32 by a shift, the odd ones by a mask, so no weight is
 * widened by a shuffle (vpmovzxwd took the decode GEMV to 0.68-0.85 of a plain read on a
 * Zen 4 host where this ran 0.87-0.93, ENGINE.md session 16). f16: one 64-byte load, its
 * halves converted (0.72-0.96 of a plain read against 0.69-0.93 for two 32-byte loads,
 * alternated on that host). */
T512 static inline AI void widen32(vx_dtype dt, const void *row, int k, __m512 *w0, __m512 *w1)
{
    if (dt == VX_BF16) {
        __m512i v = _mm512_loadu_si512((const uint16_t *)row + k);
        ENG_KEEP(v);
        *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        *w1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
    } else if (dt == VX_F16) {
        __m512i v = _mm512_loadu_si512((const uint16_t *)row + k);
        *w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(v));
        *w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1));
    } else {
        *w0 = load16(dt, row, k);
        *w1 = load16(dt, row, k + 16);
    }
}

/* One 32-column step of a row's dot into chains c0 and c1; x in pairs' order for bf16
 * when perm, else permuted here. */
T512 static inline AI void step32(vx_dtype dt, int perm, const void *row, const float *x, int k,
                                  __m512 *c0, __m512 *c1)
{
    __m512 w0, w1, x0, x1;
    widen32(dt, row, k, &w0, &w1);
    if (dt == VX_BF16) {
        x_evod(x, k, perm, &x0, &x1);
    } else {
        x0 = _mm512_loadu_ps(x + k);
        x1 = _mm512_loadu_ps(x + k + 16);
    }
    *c0 = _mm512_fmadd_ps(w0, x0, *c0);
    *c1 = _mm512_fmadd_ps(w1, x1, *c1);
}

/* A f32/f16/bf16 row · x with AVX-512, as four chains of 16-lane products, 64 weights a
 * step (over the bench's bf16 and f16 stacks this streamed 4-6 % more of the memory's
 * bandwidth than two chains, ENGINE.md session 9): span512 runs the 64-column steps in
 * [k0, k1) on chains a[0..3], finish512 the last 32-column step and the sum. A whole row
 * is span512(0, cols) then finish512; the split decode (split_rows) pauses the chains
 * between parts, so every path sums the same products in the same order and a row gives
 * one value whichever path reads it. pf: where the next run of a split decode starts,
 * fetched into L2 in step with this run, or NULL; l1: with pf, when not 0, the row's own
 * bytes that far ahead are fetched into L1 as well (rows_ahead). Inlined per dtype, so no
 * loop holds a dtype test. The first cols - cols % 32; perm: x in pairs' order (bf16 only). */
T512 static inline AI void span512(vx_dtype dt, int perm, const void *row, const float *x,
                                   int k0, int k1, __m512 *a, const char *pf, int l1)
{
    const int es = dt == VX_F32 ? 4 : 2;
    __m512 a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
    for (int k = k0; k + 64 <= k1; k += 64) {
        if (pf)
            for (int b = 0; b < 64 * es; b += 64) {
                _mm_prefetch(pf + (size_t)(k - k0) * es + b, _MM_HINT_T1);
                if (l1) _mm_prefetch((const char *)row + (size_t)k * es + l1 + b, _MM_HINT_T0);
            }
        step32(dt, perm, row, x, k, &a0, &a1);
        step32(dt, perm, row, x, k + 32, &a2, &a3);
    }
    a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3;
}

T512 static inline AI float finish512(vx_dtype dt, int perm, const void *row, const float *x,
                                      int cols, __m512 *a)
{
    const int k = cols & ~63;
    if (k + 32 <= cols) step32(dt, perm, row, x, k, &a[0], &a[1]);
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

#define L1_AHEAD 4096

/* pf: where to fetch into L2 in step with the row (rows_ahead), or NULL; with it, the row's
 * bytes L1_AHEAD on come into L1 (rows_ahead says why). */
T512 static inline AI float dot512(vx_dtype dt, int perm, const void *row, const float *x, int cols,
                                   const char *pf)
{
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    span512(dt, perm, row, x, 0, cols, a, pf, L1_AHEAD);
    return finish512(dt, perm, row, x, cols, a);
}

T512 static float dot_pairs_perm(const void *row, const float *xp, int cols, const char *pf)
{
    return dot512(VX_BF16, 1, row, xp, cols, pf);
}

/* x (n rows of cols, cols % 32 == 0) in pairs' order (widen32), 64-byte aligned; NULL
 * without memory (the caller then reads x as it is). */
static float *x_pairs(const float *x, int n, int cols)
{
    size_t len = (size_t)n * (size_t)cols;
    float *p = aligned_alloc(64, (len * sizeof *p + 63) & ~(size_t)63);
    if (!p) return NULL;
    for (size_t k = 0; k < len; k += 32)
        for (int i = 0; i < 16; i++) {
            p[k + (size_t)i] = x[k + 2 * (size_t)i];
            p[k + 16 + (size_t)i] = x[k + 2 * (size_t)i + 1];
        }
    return p;
}

T512 ENG_HOT_LOOP static float dot_row512(vx_dtype dt, const void *row, const float *x, int cols,
                                         const char *pf)
{
    eng_asan_range(row, (size_t)cols * (dt == VX_F32 ? 4 : 2), "row_dot weights");
    eng_asan_range(x, (size_t)cols * sizeof *x, "row_dot activations");
    if (dt == VX_BF16) return dot512(VX_BF16, 0, row, x, cols, pf);
    if (dt == VX_F16) return dot512(VX_F16, 0, row, x, cols, pf);
    return dot512(VX_F32, 0, row, x, cols, pf);
}

/* Without AVX-512 (an AVX2-only Zen 3, 2026-12-07) a streamed row's bytes this far ahead
 * are fetched into L2 as it is dotted (not a row dotted on its own, e.g. a rescored
 * candidate, whose next bytes are not read next): WALK's gate scan (bf16) then ran
 * 0.97-1.02 of the probe against 0.86-0.96 without (4 alternated rounds), the decode GEMV
 * over the bench stack 0.92-0.95 (bf16) and 0.91-0.94 (f16) against 0.86-0.91 (3 rounds
 * each); 16 KiB ran 0.94-1.02. A fetch past a matrix's end is a hint and never faults. */
#define AVX2_AHEAD 8192

/* row_dot_k without AVX-512: two chains, so the loop is not bound by one multiply-add's
 * latency; each line `ahead` further on is asked into L2 as the row is read. */
static ENG_HOT_LOOP float row_dot256(vx_dtype dt, const void *row, const float *x, int cols, int ahead)
{
    const size_t es = dt == VX_F32 ? 4 : 2;
    eng_asan_range(row, (size_t)cols * es, "row_dot weights");
    eng_asan_range(x, (size_t)cols * sizeof *x, "row_dot activations");
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int k = 0;
    for (; k + 16 <= cols; k += 16) {
        if (ahead && !((size_t)k * es & 63)) _mm_prefetch((const char *)row + (size_t)k * es + ahead, _MM_HINT_T1);
        a0 = _mm256_fmadd_ps(load8(dt, row, k), _mm256_loadu_ps(x + k), a0);
        a1 = _mm256_fmadd_ps(load8(dt, row, k + 8), _mm256_loadu_ps(x + k + 8), a1);
    }
    if (k + 8 <= cols) {
        a0 = _mm256_fmadd_ps(load8(dt, row, k), _mm256_loadu_ps(x + k), a0);
        k += 8;
    }
    return eng_hsum256(_mm256_add_ps(a0, a1)) + tail_dot(dt, row, x, k, cols);
}

/* Stored row (cols elements in dt) · x: exact weights, f32 products; wide: eng_avx512(),
 * read once by a caller that dots many rows; ahead: without it, how far ahead the row's
 * bytes are fetched (AVX2_AHEAD when the caller streams rows, 0 for a row on its own). */
static float row_dot_k(vx_dtype dt, const void *row, const float *x, int cols, int wide, int ahead)
{
    if (is_block(dt)) return eng_qdot(dt, row, x, cols);
    if (cols >= 32 && wide) {
        const int k = cols & ~31;
        return dot_row512(dt, row, x, cols, NULL) + tail_dot(dt, row, x, k, cols);
    }
    return row_dot256(dt, row, x, cols, ahead);
}

static float row_dot(vx_dtype dt, const void *row, const float *x, int cols)
{
    return row_dot_k(dt, row, x, cols, eng_avx512(), 0);
}

float eng_row_dot(vx_dtype dt, const void *row, const float *x, int cols)
{
    return row_dot(dt, row, x, cols);
}

float eng_w_dot_row(const eng_w *w, int r, const float *x)
{
    if (w->trans) {
        float s = 0;
        for (int c = 0; c < w->cols; c++) s += eng_w_at(w, r, c) * x[c];
        return s;
    }
    return row_dot(w->dt, (const char *)w->data + (size_t)r * w->row_bytes, x, w->cols);
}

/* ---------------------------------------------------------------- streaming rows */

/* Decode reads every weight byte from DRAM once per token, so its speed is how well the
 * memory system is kept streaming. One row at a time, front to back, is one sequential
 * stream per thread that the hardware prefetchers follow, and few instructions per cache
 * line let the core keep more lines in flight. The earlier groups of 8 rows (8 streams a
 * page apart, software prefetch a page ahead) capped near 34 GB/s on this host in minutes
 * when a one-row kernel streamed 41-44; in slower minutes the two are within a few per
 * cent (2026-12-02, ENGINE.md "Decode kernels"). Rows are claimed in contiguous chunks
 * (run_part), so each thread's stream runs over whole pages. */

/* Decode (one x row) of rows wider than SPLIT_COLS: x's f32 footprint (over 16 KiB) and
 * the streaming row evict each other from L1, so x is read from L2 on every row; a
 * 5632-column f16 down projection streamed 13-23 GB/s where the stack's other shapes ran
 * 26-40. So the rows are read in panels of PANEL rows, a part of about SPLIT_COLS columns
 * or fewer at a time (cols / parts, rounded down to 64; the last takes the rest), the x
 * part staying in L1, each row's chains kept between its parts
 * (span512). The row stream then has gaps the hardware prefetchers do not follow, so each
 * run fetches the next into L2 as it goes (into L1 it evicts x again): the same rows ran
 * 26-33 GB/s against 13-23 read whole, alternated; without the prefetch 12-18
 * (ENGINE.md session 17). */
#define SPLIT_COLS 4096
#define PANEL 16

T512 static inline AI void split_rows(vx_dtype dt, int perm, const eng_w *w, int r0, int r1,
                                      const float *x, float *y)
{
    const int cols = w->cols, parts = (cols + SPLIT_COLS - 1) / SPLIT_COLS;
    const int width = (cols / parts) & ~63, es = dt == VX_F32 ? 4 : 2;
    const char *base = w->data;
#define ROW(r) (base + (size_t)(r) * w->row_bytes)
    __m512 acc[PANEL][4];
    for (int p0 = r0; p0 < r1; p0 += PANEL) {
        const int p1 = r1 - p0 < PANEL ? r1 : p0 + PANEL;
        for (int r = 0; r < p1 - p0; r++)
            for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
        for (int q = 0; q < parts; q++) {
            const int k0 = q * width, k1 = q + 1 < parts ? k0 + width : cols;
            for (int r = p0; r < p1; r++) {
                const char *pf = r + 1 < p1     ? ROW(r + 1) + (size_t)k0 * es
                                 : q + 1 < parts ? ROW(p0) + (size_t)k1 * es
                                 : p1 < r1       ? ROW(p1)
                                                 : NULL;
                span512(dt, perm, ROW(r), x, k0, k1, acc[r - p0], pf, 0);
            }
        }
        for (int r = p0; r < p1; r++) {
            float s = finish512(dt, perm, ROW(r), x, cols, acc[r - p0]);
            if (!perm) s += tail_dot(dt, ROW(r), x, cols & ~31, cols);   /* as row_dot_k */
            y[r] = s;
        }
    }
#undef ROW
}

T512 static void rows_split(const eng_w *w, int r0, int r1, const float *x, const float *xp, float *y)
{
    if (w->dt == VX_BF16 && xp) split_rows(VX_BF16, 1, w, r0, r1, xp, y);
    else if (w->dt == VX_BF16) split_rows(VX_BF16, 0, w, r0, r1, x, y);
    else if (w->dt == VX_F16) split_rows(VX_F16, 0, w, r0, r1, x, y);
    else split_rows(VX_F32, 0, w, r0, r1, x, y);
}

/* A few x rows (2 <= n <= FEW_N: a short prompt, INFER's usual case) in blocks of FEW_R
 * rows by FEW_T tokens: each weight vector is loaded and widened once per block for its
 * tokens, each x vector once for the block's rows, one chain per (row, token) — 16
 * accumulators. Dotting each token in turn (the n = 1 kernel n times) read all of x from
 * L2 for every row and widened each weight n times: compute-bound, 34 ms more per token on
 * the 1.1B bench model; blocks of 2 rows by all n tokens were 10-65 % slower than these
 * (ENGINE.md session 17). Every (row, token) has the same chain whatever block holds it, so
 * a row's value does not depend on where its chunk starts. x: pairs' order for bf16
 * (cols % 32 == 0), else as stored; the last cols % 32 by tail_dot. The block's four rows
 * are four streams the hardware prefetchers follow poorly, so the next block (contiguous)
 * is fetched into L2 as this one is read; with x held in registers (ENG_KEEP) a step of 2-8
 * sessions' tokens from DRAM ran 1.3-1.6x faster (ENGINE.md session 37). */
#define FEW_R 4   /* rows a block */
#define FEW_T 4   /* tokens a block */
T512 static inline AI void few_block(vx_dtype dt, int R, const eng_w *w, int r, const float *x,
                                     const float *xt, int t0, int tn, float *y, const char *pf)
{
    const int cols = w->cols, k32 = cols & ~31, es = dt == VX_F32 ? 4 : 2;
    const char *row[FEW_R];
    for (int i = 0; i < R; i++) row[i] = (const char *)w->data + (size_t)(r + i) * w->row_bytes;
    __m512 acc[FEW_R][FEW_T];
    for (int i = 0; i < R; i++)
        for (int t = 0; t < FEW_T; t++) acc[i][t] = _mm512_setzero_ps();
    for (int k = 0; k < k32; k += 32) {
        if (pf)
            for (int b = 0; b < 32 * es * R; b += 64) _mm_prefetch(pf + (size_t)k * es * R + b, _MM_HINT_T1);
        __m512 w0[FEW_R], w1[FEW_R];
        for (int i = 0; i < R; i++) widen32(dt, row[i], k, &w0[i], &w1[i]);
        for (int t = 0; t < FEW_T; t++) {
            if (t >= tn) break;
            __m512 x0 = _mm512_loadu_ps(x + (size_t)(t0 + t) * cols + k);
            __m512 x1 = _mm512_loadu_ps(x + (size_t)(t0 + t) * cols + k + 16);
            /* in registers: folded into each row's FMA, x was loaded R times */
            ENG_KEEP(x0);
            ENG_KEEP(x1);
            for (int i = 0; i < R; i++)
                acc[i][t] = _mm512_fmadd_ps(w1[i], x1, _mm512_fmadd_ps(w0[i], x0, acc[i][t]));
        }
    }
    for (int i = 0; i < R; i++)
        for (int t = 0; t < tn; t++)
            y[(size_t)(t0 + t) * w->rows + r + i] =
                _mm512_reduce_add_ps(acc[i][t]) +
                tail_dot(dt, row[i], xt + (size_t)(t0 + t) * cols, k32, cols);
}

T512 static inline AI void few_rows(vx_dtype dt, const eng_w *w, int r0, int r1, const float *x,
                                    const float *xt, int n, float *y)
{
    int r = r0;
    for (; r + FEW_R <= r1; r += FEW_R) {
        const char *pf = r + 2 * FEW_R <= r1 ? (const char *)w->data + (size_t)(r + FEW_R) * w->row_bytes : NULL;
        for (int t0 = 0; t0 < n; t0 += FEW_T)
            few_block(dt, FEW_R, w, r, x, xt, t0, n - t0 < FEW_T ? n - t0 : FEW_T, y, t0 ? NULL : pf);
    }
    for (; r < r1; r++)
        for (int t0 = 0; t0 < n; t0 += FEW_T)
            few_block(dt, 1, w, r, x, xt, t0, n - t0 < FEW_T ? n - t0 : FEW_T, y, NULL);
}

T512 static void rows_few(const eng_w *w, int r0, int r1, const float *x, const float *xp, int n,
                          float *y)
{
    if (w->dt == VX_BF16) few_rows(VX_BF16, w, r0, r1, xp, x, n, y);
    else if (w->dt == VX_F16) few_rows(VX_F16, w, r0, r1, x, x, n, y);
    else few_rows(VX_F32, w, r0, r1, x, x, n, y);
}

/* The same without AVX-512 (AVX2's 16 registers): blocks of 3 rows by up to 3 tokens, one
 * 8-lane chain per (row, token) over k in order, so a row's value does not depend on the
 * block that holds it. The n = 1 kernel n times widened each weight n times and read x from
 * L2 for every row: a 1.1B f16 prompt of 8 tokens ran 17.5 tokens/s against llama.cpp's
 * 34.3 on an AVX2-only Zen 3 (ENGINE.md session 48). The next block's rows (contiguous) are
 * fetched into L2 as this one is read, as few_block does. */
#define FEW2_R 3
#define FEW2_T 3
static inline AI void few_block256(vx_dtype dt, int R, const eng_w *w, int r, const float *x, int t0,
                                   int tn, float *y, const char *pf)
{
    const int cols = w->cols, k8 = cols & ~7, es = dt == VX_F32 ? 4 : 2;
    const char *row[FEW2_R];
    for (int i = 0; i < R; i++) row[i] = (const char *)w->data + (size_t)(r + i) * w->row_bytes;
    __m256 acc[FEW2_R][FEW2_T];
    for (int i = 0; i < R; i++)
        for (int t = 0; t < FEW2_T; t++) acc[i][t] = _mm256_setzero_ps();
    for (int k = 0; k < k8; k += 8) {
        if (pf && !(k & 31))
            for (int b = 0; b < 32 * es * R; b += 64) _mm_prefetch(pf + (size_t)k * es * R + b, _MM_HINT_T1);
        __m256 wv[FEW2_R];
        for (int i = 0; i < R; i++) wv[i] = load8(dt, row[i], k);
        for (int t = 0; t < FEW2_T; t++) {
            if (t >= tn) break;
            __m256 xv = _mm256_loadu_ps(x + (size_t)(t0 + t) * cols + k);
            ENG_KEEP(xv);   /* loaded once, not folded into each row's multiply-add */
            for (int i = 0; i < R; i++) acc[i][t] = _mm256_fmadd_ps(wv[i], xv, acc[i][t]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int t = 0; t < tn; t++)
            y[(size_t)(t0 + t) * w->rows + r + i] =
                eng_hsum256(acc[i][t]) + tail_dot(dt, row[i], x + (size_t)(t0 + t) * cols, k8, cols);
}

/* A block of R rows by tn tokens, tn a constant in each copy (no per-token test in the loop). */
static inline AI void few_tokens256(vx_dtype dt, int R, const eng_w *w, int r, const float *x, int t0,
                                    int tn, float *y, const char *pf)
{
    if (tn == 3) few_block256(dt, R, w, r, x, t0, 3, y, pf);
    else if (tn == 2) few_block256(dt, R, w, r, x, t0, 2, y, pf);
    else few_block256(dt, R, w, r, x, t0, 1, y, pf);
}

/* R rows from r against n tokens, the tokens in nearly equal blocks of at most FEW2_T (8 as
 * 2 + 3 + 3, 4 as 2 + 2: a block of one token loads a weight vector per multiply-add); pf
 * is fetched with the first block. */
static inline AI void few_tokens_all256(vx_dtype dt, int R, const eng_w *w, int r, const float *x, int n,
                                        float *y, const char *pf)
{
    const int nb = (n + FEW2_T - 1) / FEW2_T;
    for (int b = 0; b < nb; b++) {
        int t0, t1;
        eng_split(n, b, nb, 1, &t0, &t1);
        few_tokens256(dt, R, w, r, x, t0, t1 - t0, y, b ? NULL : pf);
    }
}

/* Rows [r0, r1) against n tokens: blocks of FEW2_R rows, then the last rows one at a time. */
static inline AI void few_rows256(vx_dtype dt, const eng_w *w, int r0, int r1, const float *x, int n, float *y)
{
    int r = r0;
    for (; r + FEW2_R <= r1; r += FEW2_R)
        few_tokens_all256(dt, FEW2_R, w, r, x, n, y,
                          r + 2 * FEW2_R <= r1 ? (const char *)w->data + (size_t)(r + FEW2_R) * w->row_bytes : NULL);
    for (; r < r1; r++) few_tokens_all256(dt, 1, w, r, x, n, y, NULL);
}

/* Instrumented under ASan, like rows_few (short prompts are not where the sanitizer suite
 * spends its time). */
static void rows_few256(const eng_w *w, int r0, int r1, const float *x, int n, float *y)
{
    if (w->dt == VX_BF16) few_rows256(VX_BF16, w, r0, r1, x, n, y);
    else if (w->dt == VX_F16) few_rows256(VX_F16, w, r0, r1, x, n, y);
    else few_rows256(VX_F32, w, r0, r1, x, n, y);
}

/* Decode (one x row) of f32/f16/bf16 rows on an Intel CPU: each row is dotted while the
 * bytes AHEAD further on are fetched into L2. On a Sapphire Rapids-class Xeon (2 vCPUs,
 * 2026-12-06) the stack's products streamed 0.93 (bf16) and 0.78-0.83 (f16) of a plain
 * read without it and 1.06-1.17 / 1.03-1.09 with it (T1 4-16 KiB ahead alike, T0 less;
 * build/gemv, alternated); on the Zen 4/5 hosts a prefetch on top of one row moved nothing
 * beyond the noise (ENGINE.md, "Decode kernels: one row at a time"), so they keep the
 * hardware prefetchers alone. The lines in L2 are also asked into L1 L1_AHEAD before they
 * are read: on an Emerald Rapids Xeon the 22 bf16 gate matrices of the 1.1B bench model
 * then streamed 34.3 against 29.1 GB/s (medians of 4 alternated runs; ENGINE.md session
 * 42). The same products in the same order as row_dot_k and dot_pairs_perm. */
#define AHEAD 8192

T512 static void rows_ahead(const eng_w *w, int r0, int r1, const float *x, const float *xp, float *y)
{
    const char *base = w->data, *end = base + (size_t)r1 * w->row_bytes;
    const int cols = w->cols;
    for (int r = r0; r < r1; r++) {
        const char *row = base + (size_t)r * w->row_bytes;
        const char *pf = row + AHEAD < end ? row + AHEAD : NULL;
        y[r] = xp ? dot_pairs_perm(row, xp, cols, pf)
                  : dot_row512(w->dt, row, x, cols, pf) + tail_dot(w->dt, row, x, cols & ~31, cols);
    }
}

/* y[t, r] for r in [r0, r1), t < n: the exact row dot (row_dot_k; wide is eng_avx512(),
 * read once per product), the row in L1 for every x row after the first. xp: x in
 * pairs' order (widen32; bf16 rows, cols % 32 == 0, AVX-512), or NULL. One x row
 * over rows wider than SPLIT_COLS goes part by part (split_rows), on Intel CPUs with the
 * next bytes fetched ahead (rows_ahead), to the same values. */
static void rows_dot(const eng_w *w, int r0, int r1, const float *x, const float *xp, int n,
                     float *y, int wide)
{
    if (n == 1 && wide && w->cols > SPLIT_COLS && !is_block(w->dt)) {
        rows_split(w, r0, r1, x, xp, y);
        return;
    }
    if (n == 1 && wide && w->cols >= 64 && !is_block(w->dt) && eng_intel()) {
        rows_ahead(w, r0, r1, x, xp, y);
        return;
    }
    if (n > 1 && n <= FEW_N && wide && !is_block(w->dt) && (w->dt != VX_BF16 || xp)) {
        rows_few(w, r0, r1, x, xp, n, y);
        return;
    }
    if (n > 1 && n <= FEW_N && !wide && !is_block(w->dt)) {
        rows_few256(w, r0, r1, x, n, y);
        return;
    }
    for (int r = r0; r < r1; r++) {
        const char *row = (const char *)w->data + (size_t)r * w->row_bytes;
        for (int t = 0; t < n; t++)
            y[(size_t)t * w->rows + r] =
                xp ? dot_pairs_perm(row, xp + (size_t)t * w->cols, w->cols, NULL)
                   : row_dot_k(w->dt, row, x + (size_t)t * w->cols, w->cols, wide, t ? 0 : AVX2_AHEAD);
    }
}

/* x in the order the streaming kernel reads it, when that is not x's own: bf16 rows under
 * AVX-512 with cols % 32 == 0. */
static int wants_pairs(vx_dtype dt, int cols, int wide)
{
    return dt == VX_BF16 && wide && cols % 32 == 0;
}

float *eng_x_aligned(const float *x, size_t n)
{
    if (!((uintptr_t)x & 63)) return NULL;
    float *a = aligned_alloc(64, (n * sizeof *a + 63) & ~(size_t)63);
    if (a) memcpy(a, x, n * sizeof *a);
    return a;
}

float *eng_x_pairs(const float *x, int cols)
{
    return wants_pairs(VX_BF16, cols, eng_avx512()) ? x_pairs(x, 1, cols) : NULL;
}

void eng_rows_dot(vx_dtype dt, const void *data, size_t row_bytes, int n, const float *x,
                  const float *xp, int cols, float *y)
{
    const eng_w w = {.dt = dt, .data = data, .rows = n, .cols = cols, .row_bytes = row_bytes};
    const int wide = eng_avx512();
    rows_dot(&w, 0, n, x, wants_pairs(dt, cols, wide) ? xp : NULL, 1, y, wide);
}

/* ---------------------------------------------------------------- row conversion */

T512 static void cvt_avx512(vx_dtype dt, const void *src, float *dst, int n)
{
    int k = 0;
    for (; k + 16 <= n; k += 16) _mm512_storeu_ps(dst + k, load16(dt, src, k));
    if (k < n) vx_row_to_f32(dt, (const uint16_t *)src + k, dst + k, (size_t)(n - k));
}

static void cvt_avx2(vx_dtype dt, const void *src, float *dst, int n)
{
    int k = 0;
    for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, load8(dt, src, k));
    if (k < n) vx_row_to_f32(dt, (const uint16_t *)src + k, dst + k, (size_t)(n - k));
}

/* One f16/bf16 row to f32, vectorised (the tile copy of the GEMM path). */
static void cvt_row(vx_dtype dt, const void *src, float *dst, int n)
{
    if (eng_avx512()) cvt_avx512(dt, src, dst, n);
    else cvt_avx2(dt, src, dst, n);
}

/* Row r of view ctx as f32: the row converter eng_gemm_rows calls. */
static void gemm_row(const void *ctx, int r, float *dst)
{
    const eng_w *w = ctx;
    const char *src = (const char *)w->data + (size_t)r * w->row_bytes;
    if (w->dt == VX_F32) memcpy(dst, src, (size_t)w->cols * sizeof(float));
    else cvt_row(w->dt, src, dst, w->cols);
}

/* ---------------------------------------------------------------- dispatch */

typedef struct job {
    const eng_w *w;
    const eng_w *src;      /* source-exact MXFP4 rows that w (their bf16 shape) decodes, or NULL */
    const float *x;
    const float *xp;       /* x in pairs' order (widen32) for the streaming path, or NULL */
    const eng_xpack *pk;   /* x packed for eng_gemm_rows, or NULL */
    int wide;              /* eng_avx512(), read once per product */
    float *y;
    int n;
    int stream;            /* the streaming path (streamed()), else the GEMM's */
    atomic_int next;       /* streaming and GEMM paths: first row not yet claimed */
} job;

/* Row r of an MXFP4 view as bf16 (tmp: cols floats). Every MXFP4 value is a bf16 (see
 * runs_as_bf16), so dropping the low half of its f32 bits is exact, not a rounding. */
static void mxfp4_row_bf16(const eng_w *w, int r, float *tmp, uint16_t *dst)
{
    eng_qrow_f32(VX_MXFP4, (const char *)w->data + (size_t)r * w->row_bytes, tmp, w->cols);
    for (int k = 0; k < w->cols; k++) {
        uint32_t u;
        memcpy(&u, tmp + k, sizeof u);
        dst[k] = (uint16_t)(u >> 16);
    }
}

/* Rows [r0, r1) of the streaming path, from view w (y is the product's, row stride w->rows). */
static void stream_rows(const job *j, const eng_w *w, int r0, int r1, float *y)
{
    rows_dot(w, r0, r1, j->x, j->xp, j->n, y, j->wide);
}

/* Source-exact MXFP4 rows [lo, hi) decoded to bf16 DEC_ROWS at a time (a multiple of the
 * kernels' 4-row groups, so every row meets the kernel it meets in a bf16 matrix), then the
 * bf16 kernel on a view of the buffer. buf: DEC_ROWS bf16 rows + one f32 row. */
#define DEC_ROWS 16
static void stream_decoded(const job *j, int lo, int hi, uint16_t *buf)
{
    const int cols = j->w->cols;
    float *tmp = (float *)(buf + (size_t)DEC_ROWS * cols);
    eng_w v = *j->w;
    v.data = buf;
    for (int r = lo; r < hi; r += DEC_ROWS) {
        int e = hi - r < DEC_ROWS ? hi : r + DEC_ROWS;
        for (int i = r; i < e; i++)
            mxfp4_row_bf16(j->src, i, tmp, buf + (size_t)(i - r) * cols);
        stream_rows(j, &v, 0, e - r, j->y + r);
    }
}

static void run_part(void *ctx, int i, int nparts)
{
    job *j = ctx;
    int lo, hi;
    if (j->stream) {
        uint16_t *buf = j->src ? malloc((size_t)j->w->cols * (DEC_ROWS * sizeof(uint16_t) + sizeof(float)))
                               : NULL;
        while (eng_claim_rows(&j->next, j->w->rows, nparts, &lo, &hi)) {
            if (!j->src) {
                stream_rows(j, j->w, lo, hi, j->y);
            } else if (buf) {
                stream_decoded(j, lo, hi, buf);
            } else {
                /* no buffer: exact products by blocks, equal to the bf16 model's only to
                 * f32 rounding — slower order, not wrong */
                for (int r = lo; r < hi; r++)
                    for (int t = 0; t < j->n; t++)
                        j->y[(size_t)t * j->w->rows + r] =
                            eng_qdot(VX_MXFP4, (const char *)j->src->data + (size_t)r * j->src->row_bytes,
                                     j->x + (size_t)t * j->w->cols, j->w->cols);
            }
        }
        free(buf);
        return;
    }
    if (j->pk) {
        eng_gemm_part(j->pk, i, &j->next, j->w->rows, j->y, gemm_row, j->w, j->w->dt, j->w->data,
                      j->w->row_bytes);
        return;
    }
    /* no memory to pack x: the streaming kernel, slower, not wrong */
    eng_split(j->w->rows, i, nparts, 16, &lo, &hi);
    if (lo < hi) rows_dot(j->w, lo, hi, j->x, NULL, j->n, j->y, j->wide);
}

/* Transposed views (stored [cols, rows]: small computed factors and weight slices read
 * in-major, e.g. MLA's absorbed key projection): f32 goes to sgemm in place, other dtypes
 * are converted to f32 first. Without memory for the copy, element by element. */
static void matmul_trans(const eng_w *w, const float *x, int n, float *y)
{
    const size_t st = trans_stride(w);
    if (w->dt == VX_F32 && st % sizeof(float) == 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, w->rows, w->cols, 1.0f, x,
                    w->cols, (const float *)w->data, (int)(st / sizeof(float)), 0.0f, y, w->rows);
        return;
    }
    float *b = malloc((size_t)w->rows * w->cols * sizeof *b);
    if (!b) {
        for (int t = 0; t < n; t++)
            for (int r = 0; r < w->rows; r++) {
                float acc = 0;
                for (int c = 0; c < w->cols; c++) acc += eng_w_at(w, r, c) * x[(size_t)t * w->cols + c];
                y[(size_t)t * w->rows + r] = acc;
            }
        return;
    }
    for (int c = 0; c < w->cols; c++)
        eng_row_f32(w->dt, (const char *)w->data + (size_t)c * st, b + (size_t)c * w->rows,
                    (size_t)w->rows);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, w->rows, w->cols, 1.0f, x,
                w->cols, b, w->rows, 0.0f, y, w->rows);
    free(b);
}

/* A source-exact MXFP4 matrix executes as the bf16 matrix it decodes to. An E2M1 value has
 * two significant bits and an E8M0 scale is a power of two, so every product is a bf16: the
 * smallest, 0.5 * 2^-127, is above bf16's least subnormal 2^-133, the ones too large for f32
 * (scales 253-254 with |E2M1| >= 4 or 2) are infinities in f32 and bf16 alike, and scale 255
 * is NaN in both. The decoded rows are therefore the dequantised checkpoint's exactly, and
 * through the bf16 kernels they meet the same products in the same order: the packed and
 * the dequantised model give bit-identical logits. */
static int runs_as_bf16(const eng_w *w) { return w->exact && w->dt == VX_MXFP4 && !w->trans; }

/* AMX's GEMM takes bf16 products that do not stream where the CPU has it. f16 weights
 * need two bf16 parts there, twice the tile products: the AVX-512 f32 GEMM ran them faster
 * (ENGINE.md, 2026-12-06). */
static int amx_takes(const eng_w *w)
{
    return w->dt == VX_BF16 && w->cols % 32 == 0 && eng_amx_rows(w) > 0 && eng_amx_ready();
}

/* Whether n rows of x through w take the streaming path (rows_dot) rather than a GEMM
 * (the bf16 opt-in's where it applies); wide is the product's eng_avx512(). AMX's GEMM
 * does not take 9-16 rows either: it pads them to 32 tokens and runs 3 activation parts,
 * and on a Sapphire Rapids-class Xeon the stream ran 1.3-3.7x faster there (ENGINE.md,
 * session 38). Without AVX-512, f16 and bf16 stream up to FEW_N rows too, f32 up to
 * FEW_N_F32_AVX2: on an AVX2-only Zen 3 (one thread, 5632 × 2048 and 2048 × 5632 from
 * cache) the stream ran 57-76 GFLOP/s at 10-12 tokens against the GEMM's 40-53, and the
 * 1.1B prompt of 16 f16 tokens 61.6-64.1 against 57.0-57.7 tokens/s; f32 rows, twice as
 * wide, fall out of L1 between token blocks: 37 against 48 GFLOP/s at 16 (ENGINE.md
 * session 48). */
#define FEW_N_F32_AVX2 12
static int streamed(const eng_w *w, int n, int wide)
{
    if (n <= SMALL_N) return 1;
    if (w->dt == VX_F32 && !wide && n > FEW_N_F32_AVX2) return 0;
    return n <= FEW_N && (w->dt == VX_F32 || w->dt == VX_F16 || w->dt == VX_BF16) &&
           !(w->dt == VX_BF16 && eng_prefill_bf16_optin());
}

typedef struct decode_job {
    const eng_w *w;            /* MXFP4 rows */
    uint16_t *dst;             /* [rows, cols] bf16 */
    atomic_int failed;
} decode_job;

static void decode_part(void *ctx, int i, int nparts)
{
    decode_job *d = ctx;
    const eng_w *w = d->w;
    int lo, hi;
    eng_split(w->rows, i, nparts, 4, &lo, &hi);
    if (lo >= hi) return;
    float *tmp = malloc((size_t)w->cols * sizeof *tmp);
    if (!tmp) {
        atomic_store(&d->failed, 1);
        return;
    }
    for (int r = lo; r < hi; r++) mxfp4_row_bf16(w, r, tmp, d->dst + (size_t)r * w->cols);
    free(tmp);
}

/* Prefill on a source-exact MXFP4 matrix: the whole matrix decoded to bf16 (the prefill
 * kernels, AMX's included, read bf16 rows in place), then the bf16 product. -1 without
 * memory: the caller takes the exact block path. */
static int matmul_decoded(const eng_w *w, const float *x, int n, float *y)
{
    eng_w v = *w;
    v.dt = VX_BF16;
    v.exact = 0;
    v.row_bytes = (size_t)w->cols * sizeof(uint16_t);
    decode_job d = {.w = w, .dst = malloc((size_t)w->rows * v.row_bytes)};
    if (!d.dst) return -1;
    if ((size_t)w->rows * (size_t)w->cols < 32768) decode_part(&d, 0, 1);
    else eng_parallel(decode_part, &d);
    int rc = atomic_load(&d.failed) ? -1 : 0;
    v.data = d.dst;
    if (!rc) eng_matmul(&v, x, n, y);
    free(d.dst);
    return rc;
}

/* Rows of a source-authority block matrix: exact weights, f32 products (eng_qdot). */
static void exact_part(void *ctx, int i, int nparts)
{
    const job *j = ctx;
    const eng_w *w = j->w;
    int lo, hi;
    eng_split(w->rows, i, nparts, 4, &lo, &hi);
    for (int r = lo; r < hi; r++)
        for (int t = 0; t < j->n; t++)
            j->y[(size_t)t * w->rows + r] = eng_qdot(w->dt, (const char *)w->data + (size_t)r * w->row_bytes,
                                                     j->x + (size_t)t * w->cols, w->cols);
}

/* LQL_PREFILL_BF16=1 (read per call): prefill on bf16 weights rounds the activations to
 * bf16 and runs eng_matmul_bf16 (vdpbf16ps, twice the f32 GEMM's rate on CPUs without
 * AMX). Opt-in because it is not f32-accurate: each x loses its low 16 mantissa bits
 * (relative error up to 2^-9), which the parity goldens do not allow; bench/decode prints
 * the KL of its logits to the default path's. */
int eng_prefill_bf16_optin(void)
{
    /* where AMX is granted its f32-accurate tiles take bf16 prefill, so the opt-in has
     * nothing to speed up and would only round the products AMX leaves (odd shapes) */
    const char *e = getenv("LQL_PREFILL_BF16");
    return e && *e == '1' && eng_bf16_dot_ready() && !eng_amx_ready();
}

#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* x to bf16, round to nearest even (vcvtneps2bf16: denormals flush to zero). */
TBF static void round_bf16(const float *x, uint16_t *dst, size_t n)
{
    size_t k = 0;
    for (; k + 16 <= n; k += 16)
        _mm256_storeu_si256((__m256i *)(dst + k), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + k)));
    for (; k < n; k++) dst[k] = vx_f32_to_bf16(x[k]);
}

/* The opt-in product; -1 when it does not apply or memory runs out (the caller goes on). */
static int matmul_bf16_acts(const eng_w *w, const float *x, int n, float *y)
{
    if (n <= SMALL_N || w->dt != VX_BF16 || !eng_prefill_bf16_optin()) return -1;
    uint16_t *xb = malloc((size_t)n * w->cols * sizeof *xb);
    if (!xb) return -1;
    round_bf16(x, xb, (size_t)n * w->cols);
    int rc = eng_matmul_bf16(w->data, w->rows, w->cols, w->row_bytes, xb, n, y);
    free(xb);
    return rc;
}

const char *eng_prefill_path(vx_dtype dt)
{
    /* in eng_matmul's order: AMX first, then the opt-in */
    if (dt == VX_BF16 && eng_amx_ready())
        return "AMX tiles (split bf16 parts, f32 accuracy)";
    if (dt == VX_BF16 && eng_prefill_bf16_optin())
        return "AVX512-BF16 vdpbf16ps on bf16-rounded activations (LQL_PREFILL_BF16=1, not f32-accurate)";
    if (eng_qprefill_int(dt)) {
        const int amx = eng_q8_amx(eng_row_i8_kind(dt));
        if (dt == VX_Q8_0)
            return amx ? "AMX-INT8 block products, Q8_0 read in place, activations quantised as in decode"
                       : "AVX-512 VNNI int8 GEMM, Q8_0 read in place, activations quantised as in decode";
        return amx ? "AMX-INT8 block products on int8 tiles, activations quantised as in decode"
                   : "AVX-512 VNNI int8 GEMM on int8 tiles, activations quantised as in decode";
    }
    if (eng_avx512() && eng_gemm_widens(dt)) return "AVX-512 f32 GEMM, weights widened exactly in registers";
    if (eng_avx512()) return "AVX-512 f32 GEMM on exact f32 weight tiles";
    return "AVX2 f32 GEMM on exact f32 weight tiles";
}

void eng_matmul_rows(vx_dtype dt, const void *data, int rows, int cols, size_t row_bytes,
                     const float *x, int n, float *y)
{
    eng_w w = {.dt = dt, .data = data, .rows = rows, .cols = cols, .row_bytes = row_bytes};
    eng_matmul(&w, x, n, y);
}

/* Tiny products are not worth waking the pool for, nor copying x for (so their x is read
 * as given: a different kernel for bf16 at 2-8 tokens, whose sums differ in order). */
static int tiny(const eng_w *w, int n)
{
    return (size_t)w->rows * (size_t)w->cols * (size_t)n < 32768;
}

/* x as the streaming path reads it (j->stream, not tiny): bf16 rows in pairs' order,
 * other rows from a 64-byte-aligned copy when x is not aligned (decode streamed 15-20 %
 * slower with x 16 bytes off a cache line, bf16, 2026-12-02). Each copy is made once into
 * *xp or *xa, which the caller frees, so the products of one x share it. */
static void stream_x(job *j, float **xp, float **xa)
{
    const eng_w *w = j->w;
    if (!j->stream || tiny(w, j->n)) return;
    if (wants_pairs(w->dt, w->cols, j->wide)) {
        if (!*xp) *xp = x_pairs(j->x, j->n, w->cols);
        j->xp = *xp;
    } else if (w->cols % 16 == 0) {
        if (!*xa) *xa = eng_x_aligned(j->x, (size_t)j->n * w->cols);
        if (*xa) j->x = *xa;
    }
}

static void shared_run(const void *ctx, int lo, int hi)
{
    const job *j = ctx;
    stream_rows(j, j->w, lo, hi, j->y);
}

/* Decode's products that read one x (q, k, v; gate, up) as one region, so the threads meet
 * once at the end instead of after each product, and a small product (k, v) streams
 * inside the large one's region rather than as its own short one. Each row meets the
 * kernel eng_matmul gives it (one row's value does not depend on its chunk), so the
 * results are eng_matmul's, bit for bit. */
void eng_matmul_shared(const eng_w *const *w, int count, const float *x, int n, float *const *y)
{
    enum { MAXP = 4 };
    const int wide = eng_avx512();
    int ok = count > 1 && count <= MAXP;
    for (int i = 0; ok && i < count; i++)
        ok = w[i]->rows > 0 && !w[i]->trans && !runs_as_bf16(w[i]) &&
             (is_block(w[i]->dt) ? n <= SMALL_N && !w[i]->exact && eng_qsupported(w[i]->dt)
                                 : streamed(w[i], n, wide)) &&
             w[i]->cols == w[0]->cols;
    if (!ok) {
        for (int i = 0; i < count; i++) eng_matmul(w[i], x, n, y[i]);
        return;
    }
    float *xp = NULL, *xa = NULL;
    job jobs[MAXP];
    eng_rowjob rj[MAXP];
    int made = 0;
    for (; made < count; made++) {
        const eng_w *v = w[made];
        if (is_block(v->dt)) {
            if (eng_qrows_make(v->dt, v->data, v->rows, v->cols, x, n, y[made], &rj[made]) < 0) break;
            continue;
        }
        job *j = &jobs[made];
        *j = (job){.w = v, .x = x, .wide = wide, .y = y[made], .n = n, .stream = 1};
        stream_x(j, &xp, &xa);
        rj[made] = (eng_rowjob){.run = shared_run, .ctx = j, .rows = v->rows};
    }
    if (made == count) eng_parallel_rows(rj, count);
    for (int i = 0; i < made; i++)
        if (is_block(w[i]->dt)) eng_qrows_free(&rj[i]);
    if (made < count)   /* no memory for a block product's activations: one at a time */
        for (int i = 0; i < count; i++) eng_matmul(w[i], x, n, y[i]);
    free(xp);
    free(xa);
}

void eng_matmul(const eng_w *w, const float *x, int n, float *y)
{
    static int blas_single;
    if (n <= 0 || w->rows <= 0) return;
    if (!blas_single) { openblas_set_num_threads(1); blas_single = 1; }
    if (w->trans) {
        matmul_trans(w, x, n, y);
        return;
    }
    eng_w dec;
    const eng_w *src = NULL;
    if (runs_as_bf16(w)) {
        if (n > SMALL_N && matmul_decoded(w, x, n, y) == 0) return;
        if (n <= SMALL_N) {
            /* decode streams the rows through a small buffer (run_part) */
            dec = *w;
            dec.dt = VX_BF16;
            dec.exact = 0;
            dec.data = NULL;
            dec.row_bytes = (size_t)w->cols * sizeof(uint16_t);
            src = w;
            w = &dec;
        }
    }
    if (is_block(w->dt)) {
        /* exact: f32 products per row up to qkernels' 8-row threshold (above it the tiles
         * are dequantised exactly and multiplied in f32 anyway) */
        if (w->exact && n <= 8) {
            job j = {.w = w, .x = x, .y = y, .n = n};
            if (tiny(w, n)) exact_part(&j, 0, 1);
            else eng_parallel(exact_part, &j);
            return;
        }
        if (n == 1) eng_qgemv(w->dt, w->data, w->rows, w->cols, x, y);
        else eng_qgemm(w->dt, w->data, w->rows, w->cols, x, n, y);
        return;
    }
    const int wide = eng_avx512(), stream = streamed(w, n, wide);
    if (!stream && amx_takes(w) && eng_amx_matmul(w, x, n, y) == 0) {
        int done = eng_amx_rows(w);
        if (done < w->rows) rows_dot(w, done, w->rows, x, NULL, n, y, 1);   /* AMX implies AVX-512 */
        return;
    }
    if (!src && matmul_bf16_acts(w, x, n, y) == 0) return;
    job j = {.w = w, .src = src, .x = x, .wide = wide, .y = y, .n = n, .stream = stream};
    eng_xpack pk = {0};
    if (!j.stream && eng_xpack_make(&pk, x, n, w->cols) == 0) j.pk = &pk;

    float *xp = NULL, *xa = NULL;
    stream_x(&j, &xp, &xa);
    if (tiny(w, n)) run_part(&j, 0, 1);
    else eng_parallel(run_part, &j);
    free(xp);
    free(xa);
    eng_xpack_free(&pk);
}

/* ---------------------------------------------------------------- the transposed product */

#define T_TILE 64

typedef struct tjob {
    const eng_w *w;
    const float *x;
    int n;
    float *part;     /* [parts × n × cols]: each part's sum over its rows */
    int fail;
} tjob;

/* Part i of n: its rows of W, T_TILE at a time converted to f32 and multiplied in by sgemm. */
static void t_part(void *ctx, int i, int parts)
{
    tjob *j = ctx;
    const eng_w *w = j->w;
    const int cols = w->cols;
    float *y = j->part + (size_t)i * j->n * cols;
    memset(y, 0, (size_t)j->n * cols * sizeof *y);
    int lo, hi;
    eng_split(w->rows, i, parts, T_TILE, &lo, &hi);
    if (lo >= hi) return;
    float *buf = malloc((size_t)T_TILE * cols * sizeof *buf);
    if (!buf) { j->fail = 1; return; }
    for (int r0 = lo; r0 < hi; r0 += T_TILE) {
        const int nr = hi - r0 < T_TILE ? hi - r0 : T_TILE;
        for (int r = 0; r < nr; r++)
            eng_row_f32(w->dt, (const char *)w->data + (size_t)(r0 + r) * w->row_bytes,
                        buf + (size_t)r * cols, (size_t)cols);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->n, cols, nr, 1.0f,
                    j->x + r0, w->rows, buf, cols, 1.0f, y, cols);
    }
    free(buf);
}

int eng_matmul_t(const eng_w *w, const float *x, int n, float *y)
{
    if (n <= 0) return 0;
    if (w->trans) {
        /* stored [cols, rows]: the stored rows are W's columns, so this is eng_matmul */
        eng_w v = *w;
        v.trans = 0;
        v.rows = w->cols;
        v.cols = w->rows;
        v.row_bytes = trans_stride(w);
        eng_matmul(&v, x, n, y);
        return 0;
    }
    /* zeroed: a pool that started fewer threads than eng_threads leaves parts unrun */
    const int parts = eng_threads();
    tjob j = {w, x, n, calloc((size_t)parts * n * w->cols, sizeof(float)), 0};
    if (!j.part) return -1;
    eng_parallel(t_part, &j);
    if (j.fail) {
        /* a part could not get its tile: every part again on this thread */
        j.fail = 0;
        for (int i = 0; i < parts && !j.fail; i++) t_part(&j, i, parts);
    }
    if (!j.fail) {
        memcpy(y, j.part, (size_t)n * w->cols * sizeof *y);
        for (int i = 1; i < parts; i++)
            cblas_saxpy(n * w->cols, 1.0f, j.part + (size_t)i * n * w->cols, 1, y, 1);
    }
    free(j.part);
    return j.fail ? -1 : 0;
}
