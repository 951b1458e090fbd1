/*
 * amx.c — prefill products on Intel AMX tiles, at f32 accuracy.
 *
 * AMX multiplies bf16 pairs exactly and accumulates in f32 (TDPBF16PS). To keep f32
 * quality, each activation x is split into three bf16 parts x = hi + mid + lo (each the
 * round-to-nearest of what is left; together they hold 24 mantissa bits, i.e. x exactly);
 * the bf16 weights are used as stored, straight from the mmap. The product is then the sum
 * of the part products, all exact, accumulated in f32: the same accuracy class as sgemm.
 * f16 weights would need two bf16 parts, twice the tile products: the AVX-512 f32 GEMM
 * ran them faster (ENGINE.md, session 41).
 *
 * Layout: A = 16 weight rows × 32 columns (row-major bf16, 64 bytes a row); B = 32
 * columns × 16 tokens packed in pairs (row kk holds, for each token, columns 2kk and
 * 2kk+1), prepared once per call from x on the pool; C = 16 weight rows × 16 tokens in
 * f32. Each part owns a range of row blocks and runs the k dimension in L2-sized chunks,
 * each with 4 C tiles, 2 A tiles and 2 B tiles per pair of token blocks.
 *
 * Used only when the CPU has AMX-BF16, the kernel granted the tile state, and
 * LQL_NO_AMX is not 1; rows past the last 32-row block and column counts that are not a
 * multiple of 32 are left to the caller's other paths.
 *
 * The block formats' integer prefill (gemm.c, activations quantised as decode quantises
 * them) takes AMX-INT8 tiles for its block products where the CPU has them
 * (eng_amx_i8_rows, at the end): the same integers, the same f32 arithmetic after them.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <cpuid.h>
#include <immintrin.h>
#include "engine_int.h"

#define TAMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* CPUID leaf 7: AMX-TILE (EDX bit 24) and AMX-BF16 (EDX bit 22) in subleaf 0,
 * AVX512-BF16 (EAX bit 5) in subleaf 1, plus AVX512F/BW/VL; read directly because not
 * every compiler knows these names for __builtin_cpu_supports. */
static int cpu_has_amx(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const unsigned b_need = (1u << 16) | (1u << 30) | (1u << 31);   /* avx512f, bw, vl */
    if ((b & b_need) != b_need || !(d & (1u << 24)) || !(d & (1u << 22))) return 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (a >> 5) & 1;
}

int eng_amx_ready(void)
{
    static _Atomic int ready = -1;
    if (ready < 0) {
        const char *e = getenv("LQL_NO_AMX");
        ready = !(e && *e == '1') && cpu_has_amx() &&
                syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return ready;
}

/* Tiles 0..7 as 16 rows of 64 bytes each, or the shapes given (n tiles from 0; the rest
 * unused): the tile configuration of this thread until _tile_release. GCC 12's
 * _tile_loadconfig names only the config's first 8 bytes as read, so its stores to the
 * rest may be dropped as dead (a constant-propagated copy of this function did so and
 * faulted); the instruction is written here with the whole 64-byte struct as its operand. */
TAMX static void tiles_config(int n, const uint8_t *rows, const uint16_t *colsb)
{
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < (n ? n : 8); i++) {
        cfg.rows[i] = n ? rows[i] : 16;
        cfg.colsb[i] = n ? colsb[i] : 64;
    }
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

/* ---------------------------------------------------------------- packing x */

/* Split 16 floats into three bf16 parts whose sum is x. */
TAMX static inline void split3(__m512 x, __m256i *hi, __m256i *mid, __m256i *lo)
{
    __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
    __m512 r = _mm512_sub_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    __m256i m = (__m256i)_mm512_cvtneps_pbh(r);
    r = _mm512_sub_ps(r, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(m), 16)));
    *hi = h;
    *mid = m;
    *lo = (__m256i)_mm512_cvtneps_pbh(r);
}

/* The B tile of token block tb, k-step k, part p: the two token blocks of a pair and the
 * three parts of a k-step are adjacent, so the k loop for one pair of token blocks reads
 * one contiguous stream. */
static size_t btile(int ks, int tb, int k, int p)
{
    return ((((size_t)(tb / 2) * ks + k) * 3 + p) * 2 + (tb & 1)) * 256;
}

typedef struct pack_job {
    const float *x;
    int n, cols, nb;
    uint32_t *pk;
    atomic_int fail;        /* a part could not get its scratch */
} pack_job;

/* B tiles for x [n, cols]: pk[btile(tb, k, p) + kk · 16 + t] is the dword (columns
 * 32k + 2kk, +1) of token 16tb + t in part p; tokens past n are zero. Part i of n packs
 * a range of k-steps for every token (the tiles of a range are disjoint from the others'),
 * so the packing runs on the pool rather than before it. */
TAMX static void pack_part(void *ctx, int part, int nparts)
{
    pack_job *j = ctx;
    const int ks = j->cols / 32;
    int k0, k1;
    eng_split(ks, part, nparts, 1, &k0, &k1);
    if (k0 >= k1) return;
    const int kn = k1 - k0;
    uint16_t *tmp = malloc((size_t)3 * kn * 32 * sizeof *tmp);
    if (!tmp) {
        atomic_store(&j->fail, 1);
        return;
    }
    for (int tp = 0; tp < j->nb / 2; tp++)
        memset(j->pk + btile(ks, 2 * tp, k0, 0), 0, (size_t)kn * 3 * 2 * 1024);
    for (int t = 0; t < j->n; t++) {
        const float *xr = j->x + (size_t)t * j->cols + (size_t)k0 * 32;
        uint16_t *ph = tmp, *pm = tmp + kn * 32, *pl = tmp + 2 * kn * 32;
        for (int c = 0; c < kn * 32; c += 16) {
            __m256i h, m, l;
            split3(_mm512_loadu_ps(xr + c), &h, &m, &l);
            _mm256_storeu_si256((__m256i *)(ph + c), h);
            _mm256_storeu_si256((__m256i *)(pm + c), m);
            _mm256_storeu_si256((__m256i *)(pl + c), l);
        }
        const int tb = t / 16, tt = t % 16;
        for (int p = 0; p < 3; p++) {
            const uint32_t *src = (const uint32_t *)(tmp + (size_t)p * kn * 32);
            for (int k = 0; k < kn; k++) {
                uint32_t *dst = j->pk + btile(ks, tb, k0 + k, p) + tt;
                for (int kk = 0; kk < 16; kk++) dst[kk * 16] = src[k * 16 + kk];
            }
        }
    }
    free(tmp);
}

/* ---------------------------------------------------------------- the kernel */

#define KC 32   /* k-steps (32 columns each) per chunk: the chunk's B tiles stay in L2 */

typedef struct amx_job {
    const eng_w *w;
    const uint32_t *pk;
    float *y;
    int n, nb, blocks;
    atomic_int fail;        /* a part could not get its scratch */
} amx_job;

/* A part owns a contiguous range of 32-row blocks (A tiles 4 and 5 are two 16-row halves
 * feeding C rows 0/1, loaded from the mapping with the row stride). Tiles 0..3 are
 * C[row][token block], tiles 6 and 7 the B tiles of the
 * pair's two token blocks (one B register stalled each reload behind the two products still
 * reading it). The k dimension runs in chunks of KC outermost, so one chunk's B tiles (all
 * tokens) are reused from L2 by every block of the part; the C tiles are parked in `acc`
 * between chunks. A bf16 block's lines come from memory at its first token pair and from
 * cache at the others; loading them in place instead of copying them into k-major tiles
 * first took the 64-token bf16 prompt from 76-143 to 137-214 tokens/s (with the packing on
 * the pool; ENGINE.md, session 38). */
TAMX static void amx_part(void *ctx, int part, int nparts)
{
    amx_job *j = ctx;
    const eng_w *w = j->w;
    const int ks = w->cols / 32, nb = j->nb, nbp = nb / 2;
    int b0, b1;
    eng_split(j->blocks, part, nparts, 1, &b0, &b1);
    if (b0 >= b1) return;
    float *acc = malloc((size_t)(b1 - b0) * nbp * 4 * 256 * sizeof *acc);
    if (!acc) {
        atomic_store(&j->fail, 1);
        return;
    }
    tiles_config(0, NULL, NULL);
    for (int k0 = 0; k0 < ks; k0 += KC) {
        const int kn = ks - k0 < KC ? ks - k0 : KC;
        for (int b = b0; b < b1; b++) {
            for (int tp = 0; tp < nbp; tp++) {
                float *ct = acc + ((size_t)(b - b0) * nbp + tp) * 4 * 256;
                if (k0 == 0) {
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_zero(2);
                    _tile_zero(3);
                } else {
                    _tile_loadd(0, ct, 64);
                    _tile_loadd(1, ct + 256, 64);
                    _tile_loadd(2, ct + 512, 64);
                    _tile_loadd(3, ct + 768, 64);
                }
                for (int k = 0; k < kn; k++) {
                    const char *wr = (const char *)w->data + (size_t)b * 32 * w->row_bytes + (size_t)(k0 + k) * 64;
                    _tile_loadd(4, wr, (long)w->row_bytes);
                    _tile_loadd(5, wr + 16 * w->row_bytes, (long)w->row_bytes);
                    for (int p = 0; p < 3; p++) {
                        const uint32_t *bt = j->pk + btile(ks, 2 * tp, k0 + k, p);
                        _tile_loadd(6, bt, 64);
                        _tile_loadd(7, bt + 256, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                }
                _tile_stored(0, ct, 64);
                _tile_stored(1, ct + 256, 64);
                _tile_stored(2, ct + 512, 64);
                _tile_stored(3, ct + 768, 64);
            }
        }
    }
    _tile_release();
    /* C tiles are [weight row][token]; y is [token][row] */
    for (int b = b0; b < b1; b++)
        for (int tp = 0; tp < nbp; tp++) {
            const float *ct = acc + ((size_t)(b - b0) * nbp + tp) * 4 * 256;
            for (int rb = 0; rb < 2; rb++)
                for (int h = 0; h < 2; h++)
                    for (int t = 0; t < 16; t++) {
                        int tok = (2 * tp + h) * 16 + t;
                        if (tok >= j->n) break;
                        float *yr = j->y + (size_t)tok * w->rows + (size_t)b * 32 + rb * 16;
                        const float *c = ct + (size_t)(rb * 2 + h) * 256;
                        for (int m = 0; m < 16; m++) yr[m] = c[m * 16 + t];
                    }
        }
    free(acc);
}

int eng_amx_rows(const eng_w *w)
{
    return w->rows / 32 * 32;
}

int eng_amx_matmul(const eng_w *w, const float *x, int n, float *y)
{
    const int nb = ((n + 31) / 32) * 2, ks = w->cols / 32;
    amx_job j = {w, NULL, y, n, nb, w->rows / 32, 0};
    uint32_t *pk = malloc((size_t)3 * ks * nb * 1024);
    if (!pk) return -1;
    pack_job pj = {x, n, w->cols, nb, pk, 0};
    eng_parallel(pack_part, &pj);
    if (atomic_load(&pj.fail)) {
        free(pk);
        return -1;
    }
    j.pk = pk;
    eng_parallel(amx_part, &j);
    free(pk);
    return atomic_load(&j.fail) ? -1 : 0;
}

/* ---------------------------------------------------------------- int8 blocks */

#define TAMXI __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl")))

/* AMX-INT8 (CPUID leaf 7 EDX bit 25) beside eng_amx_ready's tile state; LQL_NO_AMX is read
 * per call here, so a test can compare the two integer kernels in one process. */
int eng_amx_i8_ready(void)
{
    static _Atomic int cpu = -1;
    if (cpu < 0) {
        unsigned a, b, c, d;
        cpu = __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 25) & 1) && eng_amx_ready();
    }
    const char *e = getenv("LQL_NO_AMX");
    return cpu && !(e && *e == '1');
}

/* One 32-value block's products of 16 weight rows and 16 tokens, from tile `ct` stored in
 * `buf`, added to acc[16] (one row's 16 tokens each) in the integer kernel's arithmetic:
 * (float)(Σ w·x) · (dw · xd), then mn · xs with mins. */
TAMXI static inline void i8_scale(const int32_t *buf, const float *dw, const float *mn, int sn,
                                  int nb, int b, __m512 xd, __m512 xs, int min, __m512 acc[16])
{
    for (int i = 0; i < 16; i++) {
        __m512i s = _mm512_load_si512(buf + i * 16);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_set1_ps(dw[i * sn + b]), xd), acc[i]);
        if (min) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(mn[i * nb + b]), xs, acc[i]);
    }
}

/* c[i · gt + 16 v + t] for weight rows i < rows (a multiple of 16; row i's block b at
 * w + i · rb + b · bst) and tokens 16 v + t, v < nv, over all nb blocks: gemm.c's integer
 * micro-kernel with each block's 16 × 16 products taken by one TDPBSSD (signed weights
 * against signed activations, whose packing is already a B tile: 8 rows of 16 tokens × 4
 * bytes). The VNNI kernel multiplies unsigned offset activations (x + 128) and adds
 * −128 · Σ w; here Σ w · x comes straight, the same integer without that correction's pass
 * over the weights, scaled and added in the same order (block by block), so the result is
 * the VNNI kernel's bit for bit. Two C tiles alternate,
 * and a block's products are scaled one block after they were stored (vector loads of a
 * tile store just made wait for it), while the next block's product runs. */
TAMXI void eng_amx_i8_rows(const uint8_t *w, size_t rb, size_t bst, int rows, const float *dw,
                           const float *mn, int sn, int nb, const uint8_t *xq, const float *xd,
                           const float *xs, int nv, int min, float *c, int gt)
{
    /* C 0-1; A 2-3: 16 rows × 32 int8; B 4-5: 8 × (16 tokens × 4) */
    static const uint8_t rows_[6] = {16, 16, 16, 16, 8, 8};
    static const uint16_t colsb[6] = {64, 64, 32, 32, 64, 64};
    tiles_config(6, rows_, colsb);
    int32_t buf[2][256] __attribute__((aligned(64)));
    const size_t vq = (size_t)nb * 512, vd = (size_t)nb * 16;
    for (int r = 0; r < rows; r += 16) {
        const uint8_t *wr = w + (size_t)r * rb;
        const float *dr = dw + (size_t)r * sn, *mr = min ? mn + (size_t)r * nb : NULL;
        for (int v = 0; v < nv; v++) {
            const uint8_t *xv = xq + v * vq;
            const float *xdv = xd + v * vd, *xsv = min ? xs + v * vd : NULL;
            __m512 acc[16];
            for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
            _tile_zero(0);
            _tile_loadd(2, wr, (long)rb);
            _tile_loadd(4, xv, 64);
            _tile_dpbssd(0, 2, 4);
            for (int b = 0; b <= nb; b++) {
                if (b + 1 < nb) {
                    const uint8_t *wb = wr + (size_t)(b + 1) * bst, *xb = xv + (size_t)(b + 1) * 512;
                    if (v == 0)   /* the rows come from memory once, 16 streams: ask ahead */
                        for (int i = 0; i < 16; i++) _mm_prefetch((const char *)wb + 8 * bst + i * rb, _MM_HINT_T0);
                    if (b & 1) {
                        _tile_zero(0);
                        _tile_loadd(2, wb, (long)rb);
                        _tile_loadd(4, xb, 64);
                        _tile_dpbssd(0, 2, 4);
                    } else {
                        _tile_zero(1);
                        _tile_loadd(3, wb, (long)rb);
                        _tile_loadd(5, xb, 64);
                        _tile_dpbssd(1, 3, 5);
                    }
                }
                if (b < nb) {
                    if (b & 1) _tile_stored(1, buf[1], 64);
                    else _tile_stored(0, buf[0], 64);
                }
                if (b > 0) {
                    const int p = b - 1;
                    i8_scale(buf[p & 1], dr, mr, sn, nb, p, _mm512_load_ps(xdv + (size_t)p * 16),
                             min ? _mm512_load_ps(xsv + (size_t)p * 16) : _mm512_setzero_ps(), min, acc);
                }
            }
            for (int i = 0; i < 16; i++) _mm512_store_ps(c + (size_t)(r + i) * gt + v * 16, acc[i]);
        }
    }
    _tile_release();
}

/* The screening product's exact integer block (gemm_bf16.c, eng_screen_u8s8) on tiles:
 * c[i · 64 + 16 v + t] = Σ_k w_i[k] · x of token 16 v + t, for rows i < rows (a multiple
 * of 32), token vectors v < nv and ks k-steps of 64 bytes, unsigned weight bytes against
 * signed activation bytes. Both operands come as whole tiles, 1 KiB each, contiguous:
 * the weights as eng_u8s8_pack_row stores them (the 16 rows of block b, k-step k at
 * w + (b · ks + k) · 1024), the activations as screen_run packs them for AMX (token
 * vector v, k-step k at xt + (k · 4 + v) · 256 words: 16 lanes of 16 tokens). TDPBUSD
 * sums the same products in int32, so the result is vpdpbusd's exactly. Blocks of 32 rows ×
 * 32 tokens: 2 A, 2 B and 4 C tiles; with every tile a contiguous 1 KiB the loads keep
 * up with the products (strided tiles ran the product at about half the rate). */
TAMXI void eng_amx_u8s8_rows(const uint8_t *w, int rows, const uint32_t *xt, int ks, int nv,
                             uint32_t *c)
{
    tiles_config(0, NULL, NULL);
    for (int r = 0; r < rows; r += 32) {
        const uint8_t *w0 = w + (size_t)(r / 16) * ks * 1024, *w1 = w0 + (size_t)ks * 1024;
        for (int v = 0; v < nv; v += 2) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int k = 0; k < ks; k++) {
                const uint32_t *xb = xt + ((size_t)k * 4 + (size_t)v) * 256;
                _tile_loadd(4, w0 + (size_t)k * 1024, 64);
                _tile_loadd(5, w1 + (size_t)k * 1024, 64);
                _tile_loadd(6, xb, 64);
                _tile_loadd(7, xb + 256, 64);
                _tile_dpbusd(0, 4, 6);
                _tile_dpbusd(1, 5, 6);
                _tile_dpbusd(2, 4, 7);
                _tile_dpbusd(3, 5, 7);
            }
            uint32_t *cv = c + (size_t)r * 64 + 16 * v;
            _tile_stored(0, cv, 256);
            _tile_stored(1, cv + 16 * 64, 256);
            if (v + 1 < nv) {
                _tile_stored(2, cv + 16, 256);
                _tile_stored(3, cv + 16 * 64 + 16, 256);
            }
        }
    }
    _tile_release();
}
