/*
 * gemm_bf16.c — the screening products, for callers that screen candidates and recompute
 * the survivors exactly (down-meta's first pass); not default paths of eng_matmul (the
 * executor keeps f32-accurate products; it calls eng_matmul_bf16 only for bf16 prefill
 * under the LQL_PREFILL_BF16=1 opt-in, matmul.c):
 *   eng_matmul_bf16  y[t, r] ≈ Σ_k W[r, k] · X[t, k] for bf16 W and X with AVX512-BF16:
 *                    each bf16 pair product exact in f32 (vdpbf16ps), the sum accumulated
 *                    in f32 with a stated error bound (eng_sum_gamma); twice the f32
 *                    GEMM's multiply rate on CPUs without AMX;
 *   eng_matmul_u8s8  y[t, r] = Σ_k W[r, k] · X[t, k] for unsigned-byte W and signed-byte X
 *                    with AVX512-VNNI (vpdpbusd), exact in int32; twice the bf16 rate; on
 *                    AMX-INT8 tiles where the CPU has them (eng_amx_u8s8_rows, amx.c: the
 *                    same sums), reading W packed in their layout (eng_u8s8_pack_row);
 *                    without VNNI, with AVX2's vpmaddubsw + vpmaddwd, whose pair sums
 *                    saturate at 16 bits: exact for |X| ≤ 64 (eng_u8s8_x_limit), twice the
 *                    f32 GEMM's multiply rate on two multiply pipes.
 *
 * Layout as gemm.c (the BLIS scheme): X is packed once per call into groups of 64 tokens,
 * k in 32-bit lanes (bf16 pairs or byte quads: xp[(g · kq + k) · 64 + t] holds X[t]'s k-th
 * lane, zero past n). The micro-kernel holds a 6-row × 64-token block of C in 24 registers
 * and, per lane step, broadcasts one lane of each of the 6 weight rows, read in place.
 * A thread takes a tile of weight rows (sized to stay in L2 with one packed group) and
 * runs every group over it; each output is one chain of cols / 2 vdpbf16ps (or cols / 4
 * vpdpbusd) on one lane. Each tile's C, one group at a time, goes to the caller's
 * eng_screen_fn on that thread (eng_screen_*), or transposed into y (eng_matmul_*).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "engine_int.h"

#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define TVNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define MR 6                    /* weight rows per micro-kernel block */
#define GT 64                   /* tokens per packed group (four 16-lane vectors) */
#define TILE_W (240 * 1024)     /* weight bytes per tile: stays in L2 beside one group */

int eng_bf16_dot_ready(void)
{
    static _Atomic int cpu = -1;
    if (cpu < 0) cpu = __builtin_cpu_supports("avx512bf16");
    return cpu && eng_avx512();
}

static int vnni(void)
{
    static _Atomic int cpu = -1;
    if (cpu < 0) cpu = __builtin_cpu_supports("avx512vnni");
    return cpu && eng_avx512();
}

/* AVX2 (the build's baseline) has the screen too, for a narrower x */
int eng_u8s8_x_limit(void)
{
    /* vpmaddubsw adds two u8 · s8 products into an int16: 2 · 255 · 64 < 2^15 */
    return vnni() ? 127 : 64;
}

int eng_u8s8_amx(int cols)
{
    return cols % 64 == 0 && vnni() && eng_amx_i8_ready();
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
    int u8s8;           /* 0: bf16 × bf16 → f32; 1: u8 × s8 → int32 */
    int amx;            /* u8s8 on AMX-INT8 tiles (eng_amx_u8s8_rows) */
    int vnni;           /* u8s8 with vpdpbusd (else AVX2's micro_u8s8_avx2) */
    int br;             /* weight rows per block: MR, or 32 on AMX */
    const uint8_t *w;
    size_t rb;
    int rows, bytes, n, kp, chunk;   /* bytes of a row used; kp 32-bit lanes of them */
    const uint32_t *xp;
    uint8_t *pad;       /* per part: br rows of `bytes`, for the last short block */
    uint32_t *cbuf;     /* per part: C of a tile's row blocks, [crows][GT] */
    int crows;
    int parts;
    eng_screen_fn fn;   /* takes each tile's C, one group of tokens at a time */
    void *ctx;
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

/* The same block with vpdpbusd: per lane, four unsigned weight bytes times four signed
 * token bytes, summed into int32 (exact: |Σ| < 2^31 for cols ≤ 65536). */
TVNNI static void micro_u8s8(const uint8_t *w, size_t rb, const uint32_t *x, int kp, int32_t *c)
{
    __m512i a[MR][4];
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) a[i][v] = _mm512_setzero_si512();
    for (int k = 0; k < kp; k++) {
        __m512i xv[4];
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)
            xv[v] = _mm512_load_si512(x + (size_t)k * GT + v * 16);
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {
            int32_t quad;
            memcpy(&quad, w + (size_t)i * rb + 4 * (size_t)k, 4);
            const __m512i b = _mm512_set1_epi32(quad);
            _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)
                a[i][v] = _mm512_dpbusd_epi32(a[i][v], b, xv[v]);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)
            _mm512_store_si512(c + i * GT + v * 16, a[i][v]);
}

/* The same block without VNNI: 16 tokens (two 8-lane vectors) at a time, tokens past tn
 * skipped; per lane vpmaddubsw adds the four products in two int16 pairs (exact for |x| ≤
 * 64) and vpmaddwd by ones adds the pairs into int32 — the same sums. */
static void micro_u8s8_avx2(const uint8_t *w, size_t rb, const uint32_t *x, int kp, int tn,
                            int32_t *c)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (int s = 0; s < tn; s += 16) {
        __m256i a[MR][2];
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) a[i][0] = a[i][1] = _mm256_setzero_si256();
        for (int k = 0; k < kp; k++) {
            const __m256i x0 = _mm256_load_si256((const __m256i *)(const void *)(x + (size_t)k * GT + s)),
                          x1 = _mm256_load_si256((const __m256i *)(const void *)(x + (size_t)k * GT + s + 8));
            _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {
                int32_t quad;
                memcpy(&quad, w + (size_t)i * rb + 4 * (size_t)k, 4);
                const __m256i b = _mm256_set1_epi32(quad);
                a[i][0] = _mm256_add_epi32(a[i][0], _mm256_madd_epi16(_mm256_maddubs_epi16(b, x0), ones));
                a[i][1] = _mm256_add_epi32(a[i][1], _mm256_madd_epi16(_mm256_maddubs_epi16(b, x1), ones));
            }
        }
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {
            _mm256_store_si256((__m256i *)(void *)(c + i * GT + s), a[i][0]);
            _mm256_store_si256((__m256i *)(void *)(c + i * GT + s + 8), a[i][1]);
        }
    }
}

static void screen_part(void *ctx, int part, int parts)
{
    bjob *j = ctx;
    (void)parts;
    if (part >= j->parts) return;   /* the pool grew since the call: the others claim it all */
    const int groups = (j->n + GT - 1) / GT;
    const size_t bytes = (size_t)j->bytes;
    uint8_t *pad = j->pad + (size_t)part * j->br * bytes;
    uint32_t *cb = j->cbuf + (size_t)part * (size_t)j->crows * GT;
    const int br = j->br;
    int lo;
    while ((lo = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed)) < j->rows) {
        const int hi = lo + j->chunk < j->rows ? lo + j->chunk : j->rows;
        const int blocks = (hi - lo + br - 1) / br, last = hi - lo - (blocks - 1) * br;
        if (last < br && !j->amx) {
            const uint8_t *w = j->w + (size_t)(hi - last) * j->rb;
            for (int i = 0; i < br; i++) {
                if (i < last) memcpy(pad + i * bytes, w + i * j->rb, bytes);
                else memset(pad + i * bytes, 0, bytes);
            }
        }
        for (int g = 0; g < groups; g++) {
            const int t0 = g * GT, tn = j->n - t0 < GT ? j->n - t0 : GT;
            const uint32_t *xg = j->xp + (size_t)g * j->kp * GT;
            if (j->amx) {   /* packed rows: whole 32-row blocks, the padding past rows stored */
                eng_amx_u8s8_rows(j->w + (size_t)(lo / 16) * (size_t)j->kp * 64, blocks * br, xg,
                                  j->kp / 16, (tn + 15) / 16, cb);
                j->fn(j->ctx, part, lo, hi - lo, t0, tn, cb);
                continue;
            }
            for (int b = 0; b < blocks; b++) {
                const int pb = b == blocks - 1 && last < br;
                const uint8_t *w = pb ? pad : j->w + (size_t)(lo + b * br) * j->rb;
                uint32_t *c = cb + (size_t)b * br * GT;
                if (j->u8s8 && j->vnni) micro_u8s8(w, pb ? bytes : j->rb, xg, j->kp, (int32_t *)(void *)c);
                else if (j->u8s8)
                    micro_u8s8_avx2(w, pb ? bytes : j->rb, xg, j->kp, tn, (int32_t *)(void *)c);
                else micro(w, pb ? bytes : j->rb, xg, j->kp, (float *)(void *)c);
            }
            j->fn(j->ctx, part, lo, hi - lo, t0, tn, cb);
        }
    }
}

/* Run the product of bytes-per-row `bytes` (a multiple of 4) as kp = bytes / 4 lanes; amx:
 * u8s8 on AMX-INT8 tiles, W packed by eng_u8s8_pack_row. */
static int screen_run(int u8s8, int amx, const void *w, int rows, int bytes, size_t row_bytes,
                      const void *x, int n, int max_parts, eng_screen_fn fn, void *ctx)
{
    const int kp = bytes / 4, groups = (n + GT - 1) / GT;
    const int parts = eng_threads() < max_parts ? eng_threads() : max_parts;
    const int br = amx ? 32 : MR;
    bjob j = {.u8s8 = u8s8, .amx = amx, .vnni = vnni(), .br = br, .w = w, .rb = row_bytes, .rows = rows,
              .bytes = bytes, .n = n, .kp = kp, .parts = parts, .fn = fn, .ctx = ctx};
    /* tiles that stay in L2, small enough that a delayed thread's share is taken over */
    int chunk = (int)(TILE_W / (size_t)bytes) / br * br;
    const int fair = rows / (parts * 4) / br * br;
    chunk = chunk > fair ? fair : chunk;
    j.chunk = chunk < br ? br : chunk;
    j.crows = (j.chunk + 15) / 16 * 16;   /* rows padded for eng_store_t (store_y) */
    const size_t xp_b = (size_t)groups * kp * GT * sizeof *j.xp,
                 pad_b = (size_t)parts * br * (size_t)bytes,
                 cb_b = (size_t)parts * (size_t)j.crows * GT * sizeof *j.cbuf;
    uint32_t *xp = eng_buf_take(xp_b);
    j.pad = eng_buf_take(pad_b);
    j.cbuf = eng_buf_take(cb_b);
    int rc = -1;
    if (xp && j.pad && j.cbuf) {
        for (int g = 0; g < groups; g++) {
            uint32_t *dst = xp + (size_t)g * kp * GT;
            const int t0 = g * GT, tn = n - t0 < GT ? n - t0 : GT;
            if (tn < GT) memset(dst, 0, (size_t)kp * GT * sizeof *dst);
            for (int t = 0; t < tn; t++) {
                const uint8_t *src = (const uint8_t *)x + (size_t)(t0 + t) * (size_t)bytes;
                for (int k = 0; k < kp; k++)   /* AMX: whole B tiles, 16 lanes × 16 tokens */
                    memcpy(amx ? &dst[((size_t)(k / 16) * 4 + (size_t)(t / 16)) * 256 + (k % 16) * 16 + t % 16]
                               : &dst[(size_t)k * GT + t],
                           src + 4 * (size_t)k, 4);
            }
        }
        j.xp = xp;
        atomic_init(&j.next, 0);
        eng_parallel(screen_part, &j);
        rc = 0;
    }
    eng_buf_give(xp, xp_b);
    eng_buf_give(j.pad, pad_b);
    eng_buf_give(j.cbuf, cb_b);
    return rc;
}

/* The y[n, rows] products' consumer: each block of C into y, transposed. */
typedef struct ystore {
    uint32_t *y;
    int rows;
    int wide;   /* eng_avx512() as the product began */
} ystore;

static void store_y(void *ctx, int part, int r0, int nr, int t0, int tn, const void *c)
{
    const ystore *s = ctx;
    (void)part;
    /* both results are 4-byte words: move them as such */
    eng_store_t(c, nr, tn, s->y + (size_t)t0 * s->rows + r0, (size_t)s->rows, s->wide);
}

int eng_screen_bf16(const void *w, int rows, int cols, size_t row_bytes, const uint16_t *x,
                    int n, int parts, eng_screen_fn fn, void *ctx)
{
    if (n <= 0 || rows <= 0) return 0;
    if (cols % 2 || !eng_bf16_dot_ready() || parts < 1) return -1;
    return screen_run(0, 0, w, rows, cols * 2, row_bytes, x, n, parts, fn, ctx);
}

size_t eng_u8s8_pack_bytes(int rows, int cols)
{
    return ((size_t)(rows + 15) / 16 * 16 + 32) * (size_t)cols;
}

void eng_u8s8_pack_row(uint8_t *dst, int cols, int r, const uint8_t *row)
{
    const size_t ks = (size_t)cols / 64;
    for (size_t k = 0; k < ks; k++)
        memcpy(dst + (((size_t)r / 16 * ks + k) * 16 + (size_t)r % 16) * 64, row + k * 64, 64);
}

int eng_screen_u8s8(const uint8_t *w, int rows, int cols, size_t row_bytes, const int8_t *x,
                    int n, int parts, eng_screen_fn fn, void *ctx)
{
    if (n <= 0 || rows <= 0) return 0;
    if (cols % 4 || cols > 65536 || parts < 1 || (!row_bytes && !eng_u8s8_amx(cols)))
        return -1;
    const int lim = eng_u8s8_x_limit();
    if (lim < 127)   /* outside it the sums would saturate: refused, not wrong */
        for (size_t i = 0; i < (size_t)n * (size_t)cols; i++)
            if (x[i] > lim || x[i] < -lim) return -1;
    return screen_run(1, !row_bytes, w, rows, cols, row_bytes, x, n, parts, fn, ctx);
}

int eng_matmul_bf16(const void *w, int rows, int cols, size_t row_bytes, const uint16_t *x,
                    int n, float *y)
{
    ystore s = {(uint32_t *)(void *)y, rows, eng_avx512()};
    return eng_screen_bf16(w, rows, cols, row_bytes, x, n, eng_threads(), store_y, &s);
}

int eng_matmul_u8s8(const uint8_t *w, int rows, int cols, size_t row_bytes, const int8_t *x,
                    int n, int32_t *y)
{
    ystore s = {(uint32_t *)(void *)y, rows, eng_avx512()};
    if (rows <= 0 || n <= 0 || cols > 65536 || !eng_u8s8_amx(cols))
        return eng_screen_u8s8(w, rows, cols, row_bytes, x, n, eng_threads(), store_y, &s);
    /* the AMX kernel reads packed rows: a copy, for this convenience form */
    uint8_t *pk = calloc(1, eng_u8s8_pack_bytes(rows, cols));
    if (!pk) return -1;
    for (int r = 0; r < rows; r++) eng_u8s8_pack_row(pk, cols, r, w + (size_t)r * row_bytes);
    const int rc = eng_screen_u8s8(pk, rows, cols, 0, x, n, eng_threads(), store_y, &s);
    free(pk);
    return rc;
}
