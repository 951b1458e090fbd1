/*
 * qkernels.c — products on block-quantised weights without dequantising the matrix (the
 * contract is in qkernels.h). Activations are quantised once per call to 8-bit blocks;
 * each weight block is unpacked to bytes in registers and multiplied with byte
 * multiply-adds (AVX-512 VNNI where the CPU has it, AVX2 otherwise), accumulating in int32
 * with one f32 scale product per block. Formats without an integer kernel, and
 * builds without AVX2, dequantise one block at a time into a stack buffer and take an f32
 * dot product. Rows are split across the engine's pool.
 */
#include "qkernels.h"
#include "engine_int.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

int eng_qsupported(vx_dtype dt)
{
    unsigned e, b;
    return vx_quant_block(dt, &e, &b) == 0;
}

/* ---------------------------------------------------------------- the f32 block path */

/* Σ a[i]·b[i] over n (a multiple of 32: every block size is). */
static float dotf(const float *a, const float *b, int n)
{
#ifdef __AVX2__
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    return eng_hsum256(_mm256_add_ps(s0, s1));
#else
    float s = 0;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
#endif
}

/* ---------------------------------------------------------------- quantised activations */

/* Activations of n rows as 8-bit blocks: per block an f32 scale, the int8 values, and sums
 * over each 16 values, which the K-quant kernels need for their mins and offsets and the
 * unsigned-weight 32-block kernels for theirs. */
typedef struct acts {
    int blk, nb;              /* block size, blocks per row */
    float *d;                 /* [n, nb] */
    int8_t *q;                /* [n, cols]; nibble_order for the wide Q4_0/MXFP4 kernel, k4_order for Q4_K's */
    int16_t *bs;              /* [n, cols / 16] */
    int32_t *c;               /* [n, cols / 4]: −off × each 4 values' sum, or NULL when off is 0 */
    int off;                  /* the wide Q8_0 kernel's start (128), Q4_0's or MXFP4's value offset (8, 12) */
    int wide;                 /* 1: the AVX-512 VNNI kernels */
    void *mem;
} acts;

/* Activation block size of the integer kernel for dt, 0 when dt takes the f32 path. */
static int act_block(vx_dtype dt)
{
#ifdef __AVX2__
    switch (dt) {
    case VX_Q8_0:
    case VX_Q4_0:
    case VX_MXFP4:
        return 32;
    case VX_Q4_K:
    case VX_Q6_K:
        return 256;
    default:
        return 0;
    }
#else
    (void)dt;
    return 0;
#endif
}

/* One block: scale amax/127, values rounded to nearest (even, lrintf in the default
 * mode); 0 and all-zero for a zero block. A block holding a NaN or an infinity gets a NaN
 * scale, so the non-finite value reaches every output it touches instead of being rounded
 * away. bs gets the sums of each 16 values; c (unless NULL) −off × the sums of each 4. */
static void quantise_block(const float *xb, int blk, float *d, int8_t *q, int16_t *bs, int32_t *c, int off)
{
    float amax = 0;
    for (int i = 0; i < blk; i++)
        amax = fabsf(xb[i]) > amax || xb[i] != xb[i] ? fabsf(xb[i]) : amax;
    int finite = isfinite(amax);
    float id = finite && amax > 0 ? 127.f / amax : 0.f;
    *d = finite ? amax / 127.f : NAN;
    for (int i = 0; i < blk; i++)
        q[i] = (int8_t)lrintf(xb[i] * id);
    for (int g = 0; g < blk / 16; g++) {
        int sum = 0;
        for (int i = 0; i < 16; i++)
            sum += q[16 * g + i];
        bs[g] = (int16_t)sum;
    }
    for (int g = 0; c && g < blk / 4; g++)
        c[g] = -off * (q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3]);
}

#ifdef __AVX2__
/* Unsigned int8 × signed int8, each 4 consecutive products summed: 8 int32 lanes. */
static __m256i sums4(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* quantise_block 32 values at a time, bit-identical (vcvtps2dq rounds to nearest even as
 * lrintf does); 0 without writing when the block holds a non-finite value, which the
 * scalar code then takes. Prefill quantises every token, so this runs on its critical path. */
static int quantise_block_avx2(const float *xb, int blk, float *d, int8_t *q, int16_t *bs, int32_t *c, int off)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    __m256 m = zero, z = zero;
    for (int i = 0; i < blk; i += 8) {
        __m256 v = _mm256_loadu_ps(xb + i);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v));
        z = _mm256_fmadd_ps(v, zero, z);        /* NaN once any value is inf or NaN */
    }
    if (_mm256_movemask_ps(_mm256_cmp_ps(z, z, _CMP_UNORD_Q)))
        return 0;
    float amax = eng_hmax256(m);
    const __m256 id = _mm256_set1_ps(amax > 0 ? 127.f / amax : 0.f);
    *d = amax / 127.f;
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int i = 0; i < blk; i += 32) {
        __m256i v[4];
        for (int k = 0; k < 4; k++)
            v[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 8 * k), id));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
        p = _mm256_permutevar8x32_epi32(p, order);   /* the packs interleave 128-bit lanes */
        _mm256_storeu_si256((__m256i *)(void *)(q + i), p);
        __m256i s4 = sums4(_mm256_set1_epi8(1), p);
        if (c)
            _mm256_storeu_si256((__m256i *)(void *)(c + i / 4), _mm256_mullo_epi32(s4, _mm256_set1_epi32(-off)));
        __m128i s = _mm_hadd_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        s = _mm_hadd_epi32(s, s);
        bs[i / 16] = (int16_t)_mm_cvtsi128_si32(s);
        bs[i / 16 + 1] = (int16_t)_mm_extract_epi32(s, 1);
    }
    return 1;
}
#endif

static void quantise_acts(const float *x, const acts *a, float *d, int8_t *q, int16_t *bs, int32_t *c)
{
    for (int b = 0; b < a->nb; b++) {
        const size_t o = (size_t)b * a->blk;
        int32_t *cb = c ? c + o / 4 : NULL;
#ifdef __AVX2__
        if (quantise_block_avx2(x + o, a->blk, d + b, q + o, bs + o / 16, cb, a->off))
            continue;
#endif
        quantise_block(x + o, a->blk, d + b, q + o, bs + o / 16, cb, a->off);
    }
}

/* The activations X [n, cols] quantised to blocks of blk, with c when off is not 0. */
static int acts_make(acts *a, int blk, const float *X, int n, int cols, int off)
{
    a->blk = blk;
    a->nb = cols / blk;
    a->wide = 0;
    a->off = off;
    size_t nd = (size_t)n * a->nb, nq = (size_t)n * cols, ns = (size_t)n * (cols / 16);
    size_t nc = off ? nq / 4 : 0;
    a->mem = malloc(nd * sizeof(float) + nc * sizeof(int32_t) + nq + ns * sizeof(int16_t));
    if (!a->mem)
        return -1;
    a->d = a->mem;
    int32_t *c = (int32_t *)(a->d + nd);
    a->c = off ? c : NULL;
    a->bs = (int16_t *)(c + nc);
    a->q = (int8_t *)(a->bs + ns);
    for (int t = 0; t < n; t++)
        quantise_acts(X + (size_t)t * cols, a, a->d + (size_t)t * a->nb, a->q + (size_t)t * cols,
                      a->bs + (size_t)t * (cols / 16), off ? a->c + (size_t)t * (cols / 4) : NULL);
    return 0;
}

/* ---------------------------------------------------------------- integer kernels */

#ifdef __AVX2__
static float h2f(const unsigned char *p)
{
    return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8));
}

/* Signed int8 × signed int8 (|a| × b with a's sign), as sums4's lanes in floats. */
static __m256 mul_i8(__m256i a, __m256i b)
{
    return _mm256_cvtepi32_ps(sums4(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)));
}

/* 32 nibbles in the Q4_0 order (element i low nibble of byte i, i+16 the high one). */
static __m256i nibbles(const unsigned char *p)
{
    __m128i t = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}

static __m256i load32(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* Decode streams every weight from DRAM (the model is larger than the cache) through a
 * file mapping of 4 KiB pages, where the hardware prefetchers stop at each page edge: each
 * kernel step asks for the lines of its n bytes one page ahead, so the next page's TLB walk
 * and line fills overlap this page's products. Measured on q8_0 32000 x 2048 (70 MB), one
 * thread: 8.3 GB/s without, 12.1 at 2 KiB ahead, 12.6-15.0 at 4 KiB. Prefetches past the
 * end of the matrix are hints and never fault. */
#define AHEAD 4096

/* The fetch helpers are always inlined: a prefetch has no effect GCC must keep, so an
 * out-of-line copy (as when n only becomes a constant after a caller is inlined) is
 * judged free of side effects and its calls deleted — the Q8_0, Q4_0 and MXFP4 kernels,
 * folded into one body, lost every fetch that way. */
static inline __attribute__((always_inline)) void ahead(const unsigned char *w, int n)
{
    for (int o = 0; o < n; o += 64)   /* steps of at most 64 bytes leave no line out */
        _mm_prefetch((const char *)w + AHEAD + o, _MM_HINT_T0);
}

/* ahead into L2 only: the wide Q8_0 kernel's stream of decode's shapes ran 7-8 % faster so
 * (27.2-28.3 GB/s against 25.1-26.5, alternated); the other kernels' did not (Q4_0 3 %
 * slower). 3 KiB ahead rather than 4: 3 KiB decoded the 1.1B bench model faster in 9 of
 * 11 alternated pairs, medians 24.44 against 23.82 tokens/s (Emerald Rapids, ENGINE.md
 * session 43). */
#define AHEAD_L2 3072

static inline __attribute__((always_inline)) void ahead_l2(const unsigned char *w, int n)
{
    for (int o = 0; o < n; o += 64)
        _mm_prefetch((const char *)w + AHEAD_L2 + o, _MM_HINT_T1);
}

/* ahead into L2 from farther, and the lines already there into L1 a little before they
 * are read: the wide Q4_K kernel, whose products keep the core busy, then decoded the 1.1B
 * bench model at 40.2-41.5 against 33.8 tokens/s (0.81-0.83 of the probe against 0.71;
 * medians of 4-8 alternated runs, Emerald Rapids, ENGINE.md session 42). */
#define AHEAD_FAR 8192
#define AHEAD_NEAR 1024

static inline __attribute__((always_inline)) void ahead_two(const unsigned char *w, int n)
{
    for (int o = 0; o < n; o += 64) {
        _mm_prefetch((const char *)w + AHEAD_FAR + o, _MM_HINT_T1);
        _mm_prefetch((const char *)w + AHEAD_NEAR + o, _MM_HINT_T0);
    }
}

/* MXFP4's E2M1 codes doubled (so every one is an integer: 0, 1, 2, 3, 4, 6, 8, 12 and their
 * negatives) plus 12, so every one is unsigned (vpmaddubsw's first operand). */
static const int8_t e2m1_shifted[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

/* A block's 32 values as int8: Q8_0's as stored; Q4_0's and MXFP4's first unsigned (the
 * decode kernels' operands, their offsets 8 and 12 taken back through acts' c), then
 * signed (nibble − 8, doubled E2M1). */
static __m256i q8_0_values(const unsigned char *w)
{
    return load32(w + 2);
}

static __m256i q4_0_unsigned(const unsigned char *w)
{
    return nibbles(w + 2);
}

static __m256i mxfp4_unsigned(const unsigned char *w)
{
    return _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)e2m1_shifted)),
        nibbles(w + 1));
}

static __m256i q4_0_values(const unsigned char *w)
{
    return _mm256_sub_epi8(q4_0_unsigned(w), _mm256_set1_epi8(8));
}

static __m256i mxfp4_values(const unsigned char *w)
{
    return _mm256_sub_epi8(mxfp4_unsigned(w), _mm256_set1_epi8(12));
}

/* Unsigned values × signed activations (sums4) plus the lanes' offset terms (c: −offset ×
 * each 4 activations' sum), as floats: the same integers as mul_i8 of the signed values,
 * two instructions fewer (no vpsignb). */
static __m256 mul_u8_off(__m256i u, __m256i q, const int32_t *c)
{
    return _mm256_cvtepi32_ps(_mm256_add_epi32(sums4(u, q), _mm256_loadu_si256((const __m256i *)(const void *)c)));
}

/* 2^(e-128): the E8M0 scale halved, because e2m1_shifted holds doubled E2M1 values;
 * e = 255 is NaN. Built from bits so e = 0 and 1 give the exact subnormals. */
static float e8m0_half(unsigned e)
{
    if (e == 255)
        return NAN;
    uint32_t bits = e >= 2 ? (e - 1) << 23 : 0x00400000u >> (1 - e);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* e8m0_half of 8 codes (each in a 32-bit lane) as vector operations. */
static __m256i e8m0_half8(__m256i e)
{
    const __m256i one = _mm256_set1_epi32(1);
    __m256i bits = _mm256_slli_epi32(_mm256_sub_epi32(e, one), 23);
    bits = _mm256_blendv_epi8(bits, _mm256_srlv_epi32(_mm256_set1_epi32(0x00400000), _mm256_sub_epi32(one, e)),
                              _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e));
    return _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7fc00000), _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
}

/* The E8M0 scales of 8 consecutive blocks (bb bytes apart) times d[0..8), as floats. */
static __m256 e8m0_scales8(const unsigned char *w, int bb, const float *d)
{
    const __m256i e = _mm256_setr_epi32(w[0], w[bb], w[2 * bb], w[3 * bb], w[4 * bb], w[5 * bb], w[6 * bb], w[7 * bb]);
    return _mm256_mul_ps(_mm256_castsi256_ps(e8m0_half8(e)), _mm256_loadu_ps(d));
}

/* The f16 scales of 8 consecutive blocks (bb bytes apart) times d[0..8), as floats: a
 * scalar conversion and broadcast per block (seven instructions) was most of an AVX2 step.
 * Each product is the per-block form's h2f(w) * d[b]. */
static short f16_at(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return (short)v;
}

static __m256 f16_scales8(const unsigned char *w, int bb, const float *d)
{
    const __m128i h = _mm_setr_epi16(f16_at(w), f16_at(w + bb), f16_at(w + 2 * bb), f16_at(w + 3 * bb),
                                     f16_at(w + 4 * bb), f16_at(w + 5 * bb), f16_at(w + 6 * bb),
                                     f16_at(w + 7 * bb));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(d));
}

/* Lane i of v in every lane. */
static __m256 lane(__m256 v, int i)
{
    return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(i));
}

/* The 32-value block formats (Q8_0, Q4_0, MXFP4: dt), a scale per block; c the offset
 * terms of Q4_0's and MXFP4's unsigned values (unread for Q8_0). Two accumulators alternate
 * so consecutive blocks do not wait on each other's multiply-add. 8 blocks a step, their
 * scales built at once (f16_scales8, e8m0_scales8); the tail block by block. Inlined with
 * dt a constant, so no loop holds a format test. */
static inline __attribute__((always_inline)) __m256 block_product(vx_dtype dt, const unsigned char *w,
                                                                  const int8_t *q, const int32_t *c)
{
    const __m256i x = load32(q);
    if (dt == VX_Q8_0) return mul_i8(q8_0_values(w), x);
    return mul_u8_off(dt == VX_Q4_0 ? q4_0_unsigned(w) : mxfp4_unsigned(w), x, c);
}

static inline __attribute__((always_inline)) float
dot_blocks32(vx_dtype dt, const unsigned char *w, const float *d, const int8_t *q, const int32_t *c, int nb)
{
    const int bb = dt == VX_Q8_0 ? 34 : dt == VX_Q4_0 ? 18 : 17;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int b = 0;
    for (; b + 8 <= nb; b += 8, w += 8 * bb) {
        ahead(w, 8 * bb);
        const __m256 sc = dt == VX_MXFP4 ? e8m0_scales8(w, bb, d + b) : f16_scales8(w, bb, d + b);
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++)
            acc[i & 1] = _mm256_fmadd_ps(lane(sc, i), block_product(dt, w + bb * i, q + 32 * (b + i), c + 8 * (b + i)),
                                         acc[i & 1]);
    }
    for (; b < nb; b++, w += bb) {
        ahead(w, bb);
        const float sc = dt == VX_MXFP4 ? e8m0_half(w[0]) : h2f(w);
        acc[b & 1] = _mm256_fmadd_ps(_mm256_set1_ps(sc * d[b]), block_product(dt, w, q + 32 * b, c + 8 * b), acc[b & 1]);
    }
    return eng_hsum256(_mm256_add_ps(acc[0], acc[1]));
}

static float dot_q8_0(const unsigned char *w, const float *d, const int8_t *q, int nb)
{
    return dot_blocks32(VX_Q8_0, w, d, q, NULL, nb);
}

/* One Q8_0 row against T activation rows of a from t0 (a short prompt): dot_q8_0 of each,
 * bit for bit (the same integers, scale products and accumulation order), with the row's
 * values, their absolute values and its scales read and made once for the T rows rather
 * than once per row. */
static inline __attribute__((always_inline)) void dot_q8_0_rows(const unsigned char *w, const acts *a, int t0,
                                                                int T, float *out)
{
    enum { TMAX = 3 };
    const int bb = 34, nb = a->nb, cols = nb * 32;
    __m256 acc[TMAX][2];
    for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    int b = 0;
    for (; b + 8 <= nb; b += 8, w += 8 * bb) {
        ahead(w, 8 * bb);
        const __m128i h = _mm_setr_epi16(f16_at(w), f16_at(w + bb), f16_at(w + 2 * bb), f16_at(w + 3 * bb),
                                         f16_at(w + 4 * bb), f16_at(w + 5 * bb), f16_at(w + 6 * bb),
                                         f16_at(w + 7 * bb));
        const __m256 sw = _mm256_cvtph_ps(h);
        __m256 sc[TMAX];
        for (int t = 0; t < T; t++) sc[t] = _mm256_mul_ps(sw, _mm256_loadu_ps(a->d + (size_t)(t0 + t) * nb + b));
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
            const __m256i v = q8_0_values(w + bb * i), av = _mm256_sign_epi8(v, v);
            for (int t = 0; t < T; t++) {
                const __m256i x = load32(a->q + (size_t)(t0 + t) * cols + 32 * (b + i));
                const __m256 p = _mm256_cvtepi32_ps(sums4(av, _mm256_sign_epi8(x, v)));
                acc[t][i & 1] = _mm256_fmadd_ps(lane(sc[t], i), p, acc[t][i & 1]);
            }
        }
    }
    for (; b < nb; b++, w += bb) {
        const float sw = h2f(w);
        for (int t = 0; t < T; t++) {
            const __m256 p = mul_i8(q8_0_values(w), load32(a->q + (size_t)(t0 + t) * cols + 32 * b));
            acc[t][b & 1] = _mm256_fmadd_ps(_mm256_set1_ps(sw * a->d[(size_t)(t0 + t) * nb + b]), p, acc[t][b & 1]);
        }
    }
    for (int t = 0; t < T; t++) out[t] = eng_hsum256(_mm256_add_ps(acc[t][0], acc[t][1]));
}

static float dot_q4_0(const unsigned char *w, const float *d, const int8_t *q, const int32_t *c, int nb)
{
    return dot_blocks32(VX_Q4_0, w, d, q, c, nb);
}

static float dot_mxfp4(const unsigned char *w, const float *d, const int8_t *q, const int32_t *c, int nb)
{
    return dot_blocks32(VX_MXFP4, w, d, q, c, nb);
}

/* q4k_scales_masked's two masks (a kernel loop makes them once and hides them from the
 * compiler, which otherwise rebuilt each inside the loop from a movabs and two vector
 * instructions). */
typedef struct { __m256i lo, hi; } q4k_masks;

static q4k_masks q4k_masks_make(void)
{
    return (q4k_masks){_mm256_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f,
                                         0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f),
                       _mm256_setr_epi32(0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030)};
}

/* Q4_K's 12 packed bytes → bytes 0..7 the 6-bit scales, 8..15 the 6-bit mins, in a
 * register (going through memory stalls store forwarding on every block). With the bytes
 * as 32-bit words u0 u1 u2: scales 0-3 = u0 & 0x3f, mins 0-3 = u1 & 0x3f, scales 4-7 = u2's
 * low nibbles with u0's top 2 bits, mins 4-7 = u2's high nibbles with u1's top 2 bits. Reads
 * 16 bytes from s: the block goes on past them. */
static __m256i q4k_scales_masked(__m256i v, const q4k_masks *m)
{
    __m256i a = _mm256_shuffle_epi32(v, 0x98);    /* u0 u2 u1 u2 */
    __m256i b = _mm256_shuffle_epi32(v, 0x50);    /* u0 u0 u1 u1 */
    __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(a, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)), m->lo);
    return _mm256_or_si256(lo, _mm256_and_si256(_mm256_srli_epi32(b, 2), m->hi));
}

static __m256i q4k_scales_lanes(__m256i v)
{
    const q4k_masks m = q4k_masks_make();
    return q4k_scales_masked(v, &m);
}

static __m128i q4k_scales(const unsigned char *s)
{
    return _mm256_castsi256_si128(
        q4k_scales_lanes(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)s))));
}

/* The same for two super-blocks' scale bytes (s0 and s1), one in each 128-bit lane. */
static __m256i q4k_scales2(const unsigned char *s0, const unsigned char *s1)
{
    return q4k_scales_lanes(_mm256_loadu2_m128i((const __m128i *)(const void *)s1,
                                                (const __m128i *)(const void *)s0));
}

static void q4k_unpack(const unsigned char *s, uint8_t sm[16])
{
    _mm_storeu_si128((__m128i *)(void *)sm, q4k_scales(s));
}

/* min_s · (sum of 16 activations) for the 16 halves of the 8 sub-blocks, pairwise summed to
 * 8 lanes; sm as q4k_scales gives it. Kept as a vector so the kernels reduce it once per
 * row, not once per block. */
static __m256 q4k_mins(__m128i sm, const int16_t *bs)
{
    __m128i m = _mm_srli_si128(sm, 8);
    __m256i dup = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(dup, _mm256_loadu_si256((const __m256i *)(const void *)bs)));
}

/* vpshufb's control for a 128-bit lane of int16: element e in every element (the K
 * formats' scale of one 32-value run, from the block's scales widened once). */
static __m128i pick16(int e)
{
    return _mm_set1_epi16((short)(0x0100 + 0x0202 * e));
}

static float dot_q4_k(const unsigned char *w, const float *d, const int8_t *q,
                      const int16_t *bs, int nb)
{
    /* every constant made once, out of the compiler's sight (see q4k_masks) */
    __m256i m4 = _mm256_set1_epi8(0x0f), pick[8];
    q4k_masks mk = q4k_masks_make();
    ENG_KEEP(m4);
    ENG_KEEP(mk.lo);
    ENG_KEEP(mk.hi);
    for (int e = 0; e < 8; e++) {
        pick[e] = _mm256_broadcastsi128_si256(pick16(e));
        ENG_KEEP(pick[e]);
    }
    __m256 acc = _mm256_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, w += 144, q += 256, bs += 16) {
        ahead(w, 144);
        /* the block's d and dmin times the activations' scale, converted together */
        int32_t dm;
        memcpy(&dm, w, 4);
        const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(dm)), _mm_set1_ps(d[b]));
        __m128i smv = _mm256_castsi256_si128(
            q4k_scales_masked(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(w + 4))), &mk));
        accm = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)), q4k_mins(smv, bs), accm);
        const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(smv));
        __m256i isum = _mm256_setzero_si256();
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            __m256i v = load32(w + 16 + 32 * j);
            ENG_KEEP(v);
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            __m256i plo = _mm256_maddubs_epi16(lo, load32(q + 64 * j));
            __m256i phi = _mm256_maddubs_epi16(hi, load32(q + 64 * j + 32));
            const __m256i sl = _mm256_shuffle_epi8(sc, pick[2 * j]);
            const __m256i sh = _mm256_shuffle_epi8(sc, pick[2 * j + 1]);
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_madd_epi16(plo, sl), _mm256_madd_epi16(phi, sh)));
        }
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(isum), acc);
    }
    return eng_hsum256(acc) - eng_hsum256(accm);
}

/* Q6_K half n (0 or 1) of a block as four vectors of 32 unsigned 6-bit values, in element
 * order: 4 low bits from ql, 2 high bits from qh. */
static inline __attribute__((always_inline)) void q6k_unpack(const unsigned char *w, int n, __m256i v[4])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    __m256i l0 = load32(w + 64 * n), l1 = load32(w + 64 * n + 32);
    ENG_KEEP(l0);
    ENG_KEEP(l1);
    __m256i h = load32(w + 128 + 32 * n);
    __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                     _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                     _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
    __m256i hi[4] = {h, _mm256_srli_epi16(h, 2), _mm256_srli_epi16(h, 4), _mm256_srli_epi16(h, 6)};
    for (int k = 0; k < 4; k++)
        v[k] = _mm256_or_si256(lo[k], _mm256_slli_epi16(_mm256_and_si256(hi[k], m2), 4));
}

/* scale_g · (sum of the 16 activations of group g), pairwise summed to 8 lanes: what Q6_K's
 * -32 offset takes off, kept as a vector so the kernels reduce it once per row. */
static __m256 q6k_offset(const int8_t *sc, const int16_t *bs)
{
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(
        _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)sc)),
        _mm256_loadu_si256((const __m256i *)(const void *)bs)));
}

static float dot_q6_k(const unsigned char *w, const float *d, const int8_t *q,
                      const int16_t *bs, int nb)
{
    __m256 acc = _mm256_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, w += 210, q += 256, bs += 16) {
        ahead(w, 210);
        const int8_t *sc = (const int8_t *)(w + 192);
        float dd = h2f(w + 208) * d[b];
        accm = _mm256_fmadd_ps(_mm256_set1_ps(32 * dd), q6k_offset(sc, bs), accm);
        /* the 16 scales as int16, each half's 8 in both 128-bit lanes: one vpshufb gives a
         * 32-value run's pair (2k in the low lane, 2k + 1 in the high) */
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)sc));
        const __m256i sh[2] = {_mm256_permute2x128_si256(s16, s16, 0x00),
                               _mm256_permute2x128_si256(s16, s16, 0x11)};
        __m256i isum = _mm256_setzero_si256();
        _Pragma("GCC unroll 2") for (int n = 0; n < 2; n++) {
            __m256i v[4];
            q6k_unpack(w, n, v);
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                __m256i p = _mm256_maddubs_epi16(v[k], load32(q + 128 * n + 32 * k));
                const __m256i pick = _mm256_set_m128i(pick16(2 * k + 1), pick16(2 * k));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_shuffle_epi8(sh[n], pick)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(isum), acc);
    }
    return eng_hsum256(acc) - eng_hsum256(accm);
}

/* ---- AVX-512 VNNI: two 32-blocks per instruction, chosen at run time */

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

/* Used when the CPU has AVX-512 BW/VL/VNNI and LQL_NO_AVX512 is not 1 (read per call, so a
 * test can cover both paths in one process). */
static int wide_ok(void)
{
    static _Atomic int vnni = -1;
    if (vnni < 0) vnni = __builtin_cpu_supports("avx512vnni");
    return vnni && eng_avx512();
}

/* The exact int32 sums of Q8_0 blocks b, b + 1 (at p) with their activations: the weights
 * flipped to unsigned (w + 128) against the signed activations, each lane started from c. */
T512 static inline __m512i q8_pair(const unsigned char *p, const int32_t *c, const int8_t *q)
{
    const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(load32(p + 2)), load32(p + 36), 1);
    return _mm512_dpbusd_epi32(_mm512_loadu_si512((const void *)c),
                               _mm512_xor_si512(wv, _mm512_set1_epi8((char)0x80)),
                               _mm512_loadu_si512((const void *)q));
}

/* Q8_0, two blocks per vpdpbusd, eight blocks a step. vpdpbusd takes unsigned × signed:
 * the weights flipped to w + 128 (one xor) times the activations, started from c = -128 ×
 * each 4 activations' sum, give each lane's exact sum of w·x; the step's eight f16 scales
 * are converted and scaled in one 128-bit step (inserts, not a gather: Zen 4's is slow).
 * Decode is memory-bound, but the sign trick and a scalar scale conversion per block (17
 * vector uops a block pair on ports 0 and 5, against about 8 now) held a DRAM-sized
 * stream of decode's shapes at 0.94 of a plain read where loads alone ran 1.05
 * (`qgemv --stack`). Every lane's integer and scale are the pair step's, added in the
 * same order: the result does not depend on which step ran. */
T512 static float dot_q8_0_wide(const unsigned char *w, const float *d, const int8_t *q,
                                const int32_t *c, int nb)
{
    __m512 acc = _mm512_setzero_ps();
    int b = 0;
    for (; b + 8 <= nb; b += 8, w += 8 * 34) {
        ahead_l2(w, 8 * 34);
        uint16_t h0;
        memcpy(&h0, w, 2);
        __m128i h = _mm_cvtsi32_si128(h0);   /* the step's eight scales (Zen 4's gather is slow) */
        h = _mm_insert_epi16(h, *(const uint16_t *)(const void *)(w + 34), 1);
        h = _mm_insert_epi16(h, *(const uint16_t *)(const void *)(w + 68), 2);
        h = _mm_insert_epi16(h, *(const uint16_t *)(const void *)(w + 102), 3);
        h = _mm_insert_epi16(h, *(const uint16_t *)(const void *)(w + 136), 4);
        h = _mm_insert_epi16(h, *(const uint16_t *)(const void *)(w + 170), 5);
        h = _mm_insert_epi16(h, *(const uint16_t *)(const void *)(w + 204), 6);
        h = _mm_insert_epi16(h, *(const uint16_t *)(const void *)(w + 238), 7);
        const __m512 s = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(d + b)));
        for (int k = 0; k < 4; k++) {
            const __m512i pv = q8_pair(w + 68 * k, c + 8 * (b + 2 * k), q + 32 * (b + 2 * k));
            __m512 sc = _mm512_permutexvar_ps(
                _mm512_inserti64x4(_mm512_set1_epi32(2 * k), _mm256_set1_epi32(2 * k + 1), 1), s);
            acc = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(pv), acc);
        }
    }
    for (; b + 2 <= nb; b += 2, w += 2 * 34) {
        ahead_l2(w, 2 * 34);
        const __m512i pv = q8_pair(w, c + 8 * b, q + 32 * b);
        __m512 sc = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(h2f(w) * d[b]),
                                         _mm512_set1_ps(h2f(w + 34) * d[b + 1]));
        acc = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(pv), acc);
    }
    float r = _mm512_reduce_add_ps(acc);
    if (b < nb)
        r += dot_q8_0(w, d + b, q + 32 * b, nb - b);
    return r;
}

/* The scales of 8 consecutive Q4_0 / MXFP4 blocks (bb bytes apart) as floats: one gather,
 * then f16 → f32, or E8M0 → the halved power of two (e8m0_half8). */
T512 static __m256 scales8(int mx, unsigned bb, const unsigned char *w)
{
    const __m256i off = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32((int)bb));
    __m256i g = _mm256_i32gather_epi32((const int *)(const void *)w, off, 1);
    if (!mx)
        return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(g));
    return _mm256_castsi256_ps(e8m0_half8(_mm256_and_si256(g, _mm256_set1_epi32(0xff))));
}

/* The activations of every whole group of 8 blocks in the order dot_q4_wide reads them:
 * per 4 blocks, their 16 first values then their 16 last ones (the order of four blocks'
 * low nibbles, then their high nibbles). The blocks after the last whole group stay in
 * element order for the per-block kernels. */
static void nibble_order(acts *a, int n, int cols)
{
    for (int t = 0; t < n; t++)
        for (int g = 0; g < a->nb / 8 * 2; g++) {
            int8_t *p = a->q + (size_t)t * cols + 128 * g, tmp[128];
            memcpy(tmp, p, sizeof tmp);
            for (int i = 0; i < 4; i++) {
                memcpy(p + 16 * i, tmp + 32 * i, 16);
                memcpy(p + 64 + 16 * i, tmp + 32 * i + 16, 16);
            }
        }
}

/* The activations of every Q4_K super-block in the order dot_q4_k_wide reads them: per
 * 128 values (two 64-value groups, one 64-byte load of 128 nibbles), the groups' first 32
 * values (their low nibbles) then their last 32 (the high nibbles): 0-31, 64-95, 32-63,
 * 96-127. */
static void k4_order(acts *a, int n, int cols)
{
    for (int t = 0; t < n; t++)
        for (int g = 0; g < cols / 128; g++) {
            int8_t *p = a->q + (size_t)t * cols + 128 * g, tmp[128];
            memcpy(tmp, p, sizeof tmp);
            memcpy(p + 32, tmp + 64, 32);
            memcpy(p + 64, tmp + 32, 32);
        }
}

/* Q4_0 and MXFP4, eight blocks per step, with the weights kept unsigned so vpdpbusd takes
 * them directly: Q4_0 as the raw nibble (value + 8), MXFP4 as the doubled E2M1 value + 12
 * from a table; the offset times each block's activation sum is taken off at the end. Four
 * blocks' 16 nibble bytes fill a vector: its low nibbles are their first 16 values, its
 * high nibbles the last 16, against activations in nibble_order. */
T512 static float dot_q4_wide(vx_dtype dt, const unsigned char *w, const float *d,
                              const int8_t *q, const int16_t *bs, const int32_t *c, int nb)
{
    const int mx = dt == VX_MXFP4;
    const unsigned bb = mx ? 17 : 18;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)e2m1_shifted));
    __m512i pick[2];          /* lane i takes scale 4k + i / 4 */
    for (int k = 0; k < 2; k++)
        pick[k] = _mm512_add_epi32(_mm512_set1_epi32(4 * k),
                                   _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                                                       10, 11, 12, 13, 14, 15), 2));
    __m512 acc = _mm512_setzero_ps();
    __m256 acco = _mm256_setzero_ps();
    int b = 0;
    for (; b + 8 <= nb; b += 8, w += 8 * bb) {
        ahead(w, 8 * (int)bb);
        __m256 s8 = _mm256_mul_ps(scales8(mx, bb, w), _mm256_loadu_ps(d + b));
        /* Σ of each block's 32 activations, from the 16-sums */
        __m256i xs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(bs + 2 * b)),
                                       _mm256_set1_epi16(1));
        acco = _mm256_fmadd_ps(s8, _mm256_cvtepi32_ps(xs), acco);
        __m512 s16 = _mm512_castps256_ps512(s8);
        for (int k = 0; k < 2; k++) {
            const unsigned char *n0 = w + 4 * k * bb + 2 - mx;
            __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)n0));
            for (int i = 1; i < 4; i++)
                v = _mm512_mask_broadcast_i32x4(v, (__mmask16)(0xf << 4 * i),
                                                _mm_loadu_si128((const __m128i *)(const void *)(n0 + i * bb)));
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if (mx) {
                lo = _mm512_shuffle_epi8(tab, lo);
                hi = _mm512_shuffle_epi8(tab, hi);
            }
            const int8_t *x = q + 32 * (b + 4 * k);
            __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512((const void *)x));
            p = _mm512_dpbusd_epi32(p, hi, _mm512_loadu_si512((const void *)(x + 64)));
            acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick[k], s16), _mm512_cvtepi32_ps(p), acc);
        }
    }
    float r = _mm512_reduce_add_ps(acc) - (float)(mx ? 12 : 8) * eng_hsum256(acco);
    if (b < nb)
        r += mx ? dot_mxfp4(w, d + b, q + 32 * b, c + 8 * b, nb - b) : dot_q4_0(w, d + b, q + 32 * b, c + 8 * b, nb - b);
    return r;
}

/* Index vectors for vpermw: lane i of idx[k] picks the scale of its values from a 16-entry
 * int16 scale vector. A 64-value step gives 32 int16 products of 2 values each, Q6_K's
 * groups of 16 values 8 each. */
T512 static void kidx(__m512i idx[4])
{
    for (int k = 0; k < 4; k++) {
        int16_t v[32];
        for (int i = 0; i < 32; i++)
            v[i] = (int16_t)(4 * k + i / 8);
        idx[k] = _mm512_loadu_si512((const void *)v);
    }
}

/* One Q4_K super-block's integer sums, each sub-block's weighted by its 6-bit scale (s: the
 * eight scales as 16-bit words in every 128-bit lane). */
T512 static inline __m512i q4k_isum(const unsigned char *w, const int8_t *q, __m512i s,
                                    const __m512i pick[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i isum = _mm512_setzero_si512();
    for (int p = 0; p < 2; p++) {
        __m512i v = _mm512_loadu_si512((const void *)(w + 16 + 64 * p));
        ENG_KEEP(v);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(lo, _mm512_loadu_si512((const void *)(q + 128 * p))),
                                   _mm512_shuffle_epi8(s, pick[2 * p]));
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(hi, _mm512_loadu_si512((const void *)(q + 128 * p + 64))),
                                   _mm512_shuffle_epi8(s, pick[2 * p + 1]));
    }
    return isum;
}

/* Q4_K 128 values per step: one 64-byte load holds two 64-value groups, whose low nibbles
 * (sub-blocks 2k, 2k+2) and high nibbles (2k+1, 2k+3) meet activations in k4_order;
 * unsigned nibbles × int8 activations (vpmaddubsw), then vpdpwssd multiplies by the 6-bit
 * sub-block scales, each vector's taken by vpshufb from one broadcast, and accumulates in
 * int32; one f32 conversion per block, d and dmin converted together. The mins go through
 * the 16-sums as in the AVX2 kernel. Against 64 values per step with vpermw: 25.2-25.5
 * against 21.4 GB/s on one Zen 4 core with the rows in L2, the same sums bit for bit
 * (ENGINE.md session 18). Two super-blocks a step share the unpacking of their scales and
 * mins, their f16 conversions and the mins' products (each 256-bit lane or half the
 * work of one); the mins are taken off in the products' accumulator, so one reduction
 * ends the row (fewer uops on the two vector ports: 13 % faster in L2, ENGINE.md
 * session 42). */
T512 static float dot_q4_k_wide(const unsigned char *w, const float *d, const int8_t *q,
                                const int16_t *bs, int nb)
{
    __m512i pick[4];          /* vector 2p + h: 16-bit lanes 0-15 scale 4p + h, 16-31 4p + h + 2 */
    for (int k = 0; k < 4; k++) {
        int8_t v[64];
        for (int i = 0; i < 64; i++)
            v[i] = (int8_t)(2 * (k / 2 * 4 + k % 2 + i / 32 * 2) + (i & 1));
        pick[k] = _mm512_loadu_si512((const void *)v);
    }
    /* lanes of dd (d·d_x, dmin·d_x of the first super-block, then of the second): the
     * second's d, and each super-block's dmin over its 8 min products */
    const __m512i d1 = _mm512_set1_epi32(2), dmin = _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
    __m512 acc = _mm512_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2, w += 288, q += 512, bs += 32) {
        ahead_two(w, 288);
        const __m256i sm = q4k_scales2(w + 4, w + 148);
        int dm0, dm1;
        memcpy(&dm0, w, 4);
        memcpy(&dm1, w + 144, 4);
        const __m128 dx = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)(d + b)));
        const __m512 dd = _mm512_castps128_ps512(
            _mm_mul_ps(_mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(dm0), dm1, 1)), _mm_unpacklo_ps(dx, dx)));
        const __m512i m = _mm512_cvtepu8_epi16(_mm256_unpacklo_epi8(_mm256_srli_si256(sm, 8),
                                                                    _mm256_srli_si256(sm, 8)));
        acc = _mm512_fnmadd_ps(_mm512_permutexvar_ps(dmin, dd),
                               _mm512_cvtepi32_ps(_mm512_madd_epi16(m, _mm512_loadu_si512((const void *)bs))), acc);
        const __m512i e = _mm512_cvtepu8_epi16(sm);
        const __m512i i0 = q4k_isum(w, q, _mm512_shuffle_i32x4(e, e, 0x00), pick);
        const __m512i i1 = q4k_isum(w + 144, q + 256, _mm512_shuffle_i32x4(e, e, 0xaa), pick);
        acc = _mm512_fmadd_ps(_mm512_broadcastss_ps(_mm512_castps512_ps128(dd)), _mm512_cvtepi32_ps(i0), acc);
        acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(d1, dd), _mm512_cvtepi32_ps(i1), acc);
    }
    for (; b < nb; b++, w += 144, q += 256, bs += 16) {
        ahead_two(w, 144);
        __m128i sm = q4k_scales(w + 4);
        int dm;
        memcpy(&dm, w, 4);
        __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(dm)), _mm_set1_ps(d[b]));
        acc = _mm512_fnmadd_ps(_mm512_broadcastss_ps(_mm_movehdup_ps(dd)),
                               _mm512_zextps256_ps512(q4k_mins(sm, bs)), acc);
        __m512i s = _mm512_broadcast_i32x4(_mm256_castsi256_si128(_mm256_cvtepu8_epi16(sm)));
        acc = _mm512_fmadd_ps(_mm512_broadcastss_ps(dd), _mm512_cvtepi32_ps(q4k_isum(w, q, s, pick)), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* Half n of a Q6_K super-block's values (0..63, unsigned) in element order: v01 its first
 * 64, v23 the next 64. The 4 low bits of two ql runs come in one load, the 2 high bits
 * from the qh run and the same run shifted by 2 side by side. */
T512 static void q6k_values(const unsigned char *w, int n, __m512i *v01, __m512i *v23)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
    __m512i l = _mm512_loadu_si512((const void *)(w + 64 * n));
    ENG_KEEP(l);
    __m256i h = load32(w + 128 + 32 * n);
    __m512i hx = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
    *v01 = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(hx, m2), 4));
    *v23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                           _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hx, 4), m2), 4));
}

/* Q6_K 64 values per step, assembled in element order by q6k_values, so the activations
 * load straight. */
T512 static float dot_q6_k_wide(const unsigned char *w, const float *d, const int8_t *q,
                                const int16_t *bs, int nb)
{
    __m512i idx[4];
    kidx(idx);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, w += 210, q += 256, bs += 16) {
        ahead(w, 210);
        const int8_t *sc = (const int8_t *)(w + 192);
        float dd = h2f(w + 208) * d[b];
        accm = _mm256_fmadd_ps(_mm256_set1_ps(32 * dd), q6k_offset(sc, bs), accm);
        __m512i s = _mm512_castsi256_si512(
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)sc)));
        __m512i isum = _mm512_setzero_si512();
        for (int n = 0; n < 2; n++) {
            __m512i v01, v23;
            q6k_values(w, n, &v01, &v23);
            __m512i x01 = _mm512_loadu_si512((const void *)(q + 128 * n));
            __m512i x23 = _mm512_loadu_si512((const void *)(q + 128 * n + 64));
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(v01, x01),
                                       _mm512_permutexvar_epi16(idx[2 * n], s));
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(v23, x23),
                                       _mm512_permutexvar_epi16(idx[2 * n + 1], s));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(dd), _mm512_cvtepi32_ps(isum), acc);
    }
    return _mm512_reduce_add_ps(acc) - eng_hsum256(accm);
}

/* One weight row against activation row t. */
static float dot_row(vx_dtype dt, const unsigned char *w, const acts *a, int t, int cols)
{
    const float *d = a->d + (size_t)t * a->nb;
    const int8_t *q = a->q + (size_t)t * cols;
    const int16_t *bs = a->bs + (size_t)t * (cols / 16);
    const int32_t *c = a->c ? a->c + (size_t)t * (cols / 4) : NULL;
    if (a->wide && a->blk == 32)
        return dt == VX_Q8_0 ? dot_q8_0_wide(w, d, q, c, a->nb) : dot_q4_wide(dt, w, d, q, bs, c, a->nb);
    if (a->wide)
        return dt == VX_Q4_K ? dot_q4_k_wide(w, d, q, bs, a->nb) : dot_q6_k_wide(w, d, q, bs, a->nb);
    switch (dt) {
    case VX_Q8_0:
        return dot_q8_0(w, d, q, a->nb);
    case VX_Q4_0:
        return dot_q4_0(w, d, q, c, a->nb);
    case VX_MXFP4:
        return dot_mxfp4(w, d, q, c, a->nb);
    case VX_Q4_K:
        return dot_q4_k(w, d, q, bs, a->nb);
    default:
        return dot_q6_k(w, d, q, bs, a->nb);
    }
}

/* ---------------------------------------------------------------- exact-weight blocks */

/* A Q4_K super-block as eight runs of 32 unsigned nibbles in element order, each run's
 * scale d·sc and min dmin·m (w = scale·q − min): the dequantiser's and the integer
 * prefill's unpack. */
static void q4k_block(const unsigned char *w, __m256i v[8], float sc[8], float mn[8])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    uint8_t sm[16];
    q4k_unpack(w + 4, sm);
    const float d = h2f(w), dmin = h2f(w + 2);
    for (int j = 0; j < 4; j++) {
        __m256i x = load32(w + 16 + 32 * j);
        v[2 * j] = _mm256_and_si256(x, m4);
        v[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
    }
    for (int k = 0; k < 8; k++) {
        sc[k] = d * (float)sm[k];
        mn[k] = dmin * (float)sm[8 + k];
    }
}

/* out[0..32) = sc·q − sub for 32 int8 values q, the first 16 with sc[0]/sub[0] and the last
 * 16 with sc[1]/sub[1]: a product then a difference, exactly as the codec forms them. */
static void store32(__m256i q, const __m256 sc[2], const __m256 sub[2], float *out)
{
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int k = 0; k < 4; k++) {
        __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[k]));
        _mm256_storeu_ps(out + 8 * k, _mm256_sub_ps(_mm256_mul_ps(sc[k / 2], v), sub[k / 2]));
    }
}

/* Dequantise one block in registers, bit-equal to the codec; 0 when dt has no such path. */
static int deq_block_fast(vx_dtype dt, const unsigned char *w, float *out)
{
    const __m256 zero[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    switch (dt) {
    case VX_Q8_0:
    case VX_Q4_0: {
        float d = h2f(w);
        __m256i q = dt == VX_Q8_0 ? q8_0_values(w) : q4_0_values(w);
        __m256 sc[2] = {_mm256_set1_ps(d), _mm256_set1_ps(d)};
        store32(q, sc, zero, out);
        return 1;
    }
    case VX_MXFP4: {
        if (w[0] == 255) {
            for (int i = 0; i < 32; i++)
                out[i] = NAN;
            return 1;
        }
        float d = e8m0_half(w[0]);
        __m256i nib = nibbles(w + 1), q = mxfp4_values(w);
        __m256 sc[2] = {_mm256_set1_ps(d), _mm256_set1_ps(d)};
        store32(q, sc, zero, out);
        /* Code 8 is -0: OR the nibble's sign bit (moved to bit 7, then sign-extended to bit
         * 31) into every value; the others are negative or zero already. */
        __m256i sgn = _mm256_slli_epi16(_mm256_and_si256(nib, _mm256_set1_epi8(8)), 4);
        __m128i lo = _mm256_castsi256_si128(sgn), hi = _mm256_extracti128_si256(sgn, 1);
        __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int k = 0; k < 4; k++) {
            __m256 m = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepi8_epi32(part[k]), 24));
            _mm256_storeu_ps(out + 8 * k, _mm256_or_ps(_mm256_loadu_ps(out + 8 * k), m));
        }
        return 1;
    }
    case VX_Q4_K: {
        __m256i v[8];
        float scale[8], min[8];
        q4k_block(w, v, scale, min);
        for (int s = 0; s < 8; s++) {
            __m256 sc[2] = {_mm256_set1_ps(scale[s]), _mm256_set1_ps(scale[s])};
            __m256 mn[2] = {_mm256_set1_ps(min[s]), _mm256_set1_ps(min[s])};
            store32(v[s], sc, mn, out + 32 * s);
        }
        return 1;
    }
    case VX_Q6_K: {
        const int8_t *scs = (const int8_t *)(w + 192);
        float d = h2f(w + 208);
        for (int n = 0; n < 2; n++) {
            __m256i v[4];
            q6k_unpack(w, n, v);
            for (int k = 0; k < 4; k++) {
                const int8_t *s = scs + 8 * n + 2 * k;
                __m256 sc[2] = {_mm256_set1_ps(d * (float)s[0]), _mm256_set1_ps(d * (float)s[1])};
                store32(_mm256_sub_epi8(v[k], _mm256_set1_epi8(32)), sc, zero,
                        out + 128 * n + 32 * k);
            }
        }
        return 1;
    }
    default:
        return 0;
    }
}
#endif

/* One block to f32 by the fastest exact route. */
static void deq_block(vx_dtype dt, const unsigned char *w, float *out)
{
#ifdef __AVX2__
    if (deq_block_fast(dt, w, out))
        return;
#endif
    vx_dequantize_block(dt, w, out);
}

void eng_qrow_f32(vx_dtype dt, const void *row, float *dst, int cols)
{
    unsigned be, bb;
    if (vx_quant_block(dt, &be, &bb) != 0)
        return;
    for (int b = 0; b < cols / (int)be; b++)
        deq_block(dt, (const unsigned char *)row + (size_t)b * bb, dst + (size_t)b * be);
}

float eng_qdot(vx_dtype dt, const void *row, const float *x, int cols)
{
    unsigned be, bb;
    if (vx_quant_block(dt, &be, &bb) != 0)
        return NAN;
    const unsigned char *w = row;
    float buf[256], s = 0;
    for (int b = 0; b < cols / (int)be; b++) {
        deq_block(dt, w + (size_t)b * bb, buf);
        s += dotf(buf, x + (size_t)b * be, (int)be);
    }
    return s;
}

/* ---------------------------------------------------------------- row loops, threads */

typedef struct job {
    vx_dtype dt;
    const unsigned char *W;
    size_t row_bytes;
    int rows, cols, n;
    const float *X;
    float *Y;
    const acts *a;            /* NULL: the f32 block path */
    eng_xpack pk;             /* prefill: X packed for eng_gemm_part (p and q8 NULL: sgemm tiles) */
    atomic_int next;          /* eng_gemm_part's first unclaimed row */
} job;

#ifdef __AVX2__
/* A Q8_0 row against every activation row, up to 3 at a time (8 as 2 + 3 + 3). */
static void q8_0_rows(const job *j, const unsigned char *w, int r)
{
    const int n = j->n, nb = (n + 2) / 3;
    float out[3];
    for (int k = 0; k < nb; k++) {
        int t0, t1;
        eng_split(n, k, nb, 1, &t0, &t1);
        const int tn = t1 - t0;
        if (tn == 3) dot_q8_0_rows(w, j->a, t0, 3, out);
        else if (tn == 2) dot_q8_0_rows(w, j->a, t0, 2, out);
        else dot_q8_0_rows(w, j->a, t0, 1, out);
        for (int t = 0; t < tn; t++) j->Y[(size_t)(t0 + t) * j->rows + r] = out[t];
    }
}
#endif

/* The streaming path: each weight row is read once and dotted with every activation row
 * while it sits in L1. */
static void run_rows(const job *j, int r0, int r1)
{
    for (int r = r0; r < r1; r++) {
        const unsigned char *w = j->W + (size_t)r * j->row_bytes;
#ifdef __AVX2__
        if (j->a && j->n > 1 && j->dt == VX_Q8_0 && !j->a->wide) {
            q8_0_rows(j, w, r);
            continue;
        }
#endif
        for (int t = 0; t < j->n; t++) {
            float *y = j->Y + (size_t)t * j->rows + r;
#ifdef __AVX2__
            if (j->a) {
                *y = dot_row(j->dt, w, j->a, t, j->cols);
                continue;
            }
#endif
            *y = eng_qdot(j->dt, w, j->X + (size_t)t * j->cols, j->cols);
        }
    }
}

/* Above this many activation rows the weights are dequantised a tile at a time (exactly)
 * and multiplied in f32: by the engine's GEMM (gemm.c), or by sgemm in eng_qgemm_rows and
 * when x cannot be packed. Prefill then runs at GEMM speed with exact weights. */
#define GEMM_N 8
#define TILE_BYTES (2 * 1024 * 1024)

/* Row r of the job's weights as f32: the row converter eng_gemm_rows calls. */
static void gemm_row(const void *ctx, int r, float *dst)
{
    const job *j = ctx;
    eng_qrow_f32(j->dt, j->W + (size_t)r * j->row_bytes, dst, j->cols);
}

#ifdef __AVX2__
/* One Q6_K row (nsb super-blocks) as int8 q − 32 in element order with each 16 values'
 * scale d·sc. */
T512 static void q6k_row_i8(const unsigned char *w, int nsb, int8_t *q, float *d)
{
    const __m512i off = _mm512_set1_epi8(32);
    for (int sb = 0; sb < nsb; sb++, w += 210, q += 256, d += 16) {
        for (int n = 0; n < 2; n++) {
            __m512i v01, v23;
            q6k_values(w, n, &v01, &v23);
            _mm512_storeu_si512((void *)(q + 128 * n), _mm512_sub_epi8(v01, off));
            _mm512_storeu_si512((void *)(q + 128 * n + 64), _mm512_sub_epi8(v23, off));
        }
        const float dd = h2f(w + 208);
        for (int g = 0; g < 16; g++) d[g] = dd * (float)(int8_t)w[192 + g];
    }
}

/* Row r of the job's Q4_0, MXFP4, Q4_K or Q6_K weights for the integer prefill kernel: per
 * 32-block the int8 values the decode kernels multiply, with the block's scale d and min
 * m (w = d·q + m): Q4_0 nibble − 8 and its scale; MXFP4 the doubled E2M1 value and the
 * halved E8M0 scale; Q4_K the nibble, d·sc and −dmin·m of its sub-block; Q6_K q − 32 with
 * a scale per 16 values (ROW_I8_HALF, no min). */
static void int8_row(const void *ctx, int r, int8_t *q, float *d, float *m)
{
    const job *j = ctx;
    const unsigned char *w = j->W + (size_t)r * j->row_bytes;
    const int nb = j->cols / 32;
    if (j->dt == VX_Q6_K) {
        q6k_row_i8(w, nb / 8, q, d);
        return;
    }
    if (j->dt == VX_Q4_K) {
        for (int sb = 0; sb < nb / 8; sb++, w += 144, q += 256, d += 8, m += 8) {
            __m256i v[8];
            q4k_block(w, v, d, m);
            for (int k = 0; k < 8; k++) {
                _mm256_storeu_si256((__m256i *)(void *)(q + 32 * k), v[k]);
                m[k] = -m[k];
            }
        }
        return;
    }
    const int mx = j->dt == VX_MXFP4;
    for (int b = 0; b < nb; b++, w += mx ? 17 : 18) {
        _mm256_storeu_si256((__m256i *)(void *)(q + 32 * b), mx ? mxfp4_values(w) : q4_0_values(w));
        d[b] = mx ? e8m0_half(w[0]) : h2f(w);
        m[b] = 0;
    }
}
#endif

static void run_tiles(const job *j, int r0, int r1)
{
    int per = (int)(TILE_BYTES / ((size_t)j->cols * sizeof(float)));
    per = per < 4 ? 4 : per;
    float *buf = malloc((size_t)per * (size_t)j->cols * sizeof(float));
    if (!buf) {
        run_rows(j, r0, r1);      /* the f32 block path needs no memory: slower, not wrong */
        return;
    }
    for (int r = r0; r < r1; r += per) {
        int tr = r1 - r < per ? r1 - r : per;
        for (int i = 0; i < tr; i++)
            eng_qrow_f32(j->dt, j->W + (size_t)(r + i) * j->row_bytes, buf + (size_t)i * j->cols,
                         j->cols);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, tr, j->cols, 1.0f, j->X,
                    j->cols, buf, j->cols, 0.0f, j->Y + r, j->rows);
    }
    free(buf);
}

static void run(const job *j, int r0, int r1)
{
    if (j->n > GEMM_N)
        run_tiles(j, r0, r1);
    else
        run_rows(j, r0, r1);
}

static void part(void *ctx, int i, int n)
{
    job *j = ctx;
    int lo, hi;
    if (j->pk.p || j->pk.q8) {
        eng_gemm_part(&j->pk, i, &j->next, j->rows, j->Y, gemm_row, j, j->dt, j->W, j->row_bytes);
        return;
    }
    if (j->n <= GEMM_N) {
        while (eng_claim_rows(&j->next, j->rows, n, &lo, &hi))
            run_rows(j, lo, hi);
        return;
    }
    eng_split(j->rows, i, n, 4, &lo, &hi);
    if (lo < hi)
        run(j, lo, hi);
}

/* LQL_QEXACT=1: the activations stay in f32 (exact weights, f32 products) at every batch
 * size, for analyses that must not see activation rounding; read per call. */
static int qexact(void)
{
    const char *ex = getenv("LQL_QEXACT");
    return ex && *ex == '1';
}

/* Every format with an integer decode kernel (act_block: Q8_0, Q4_0, MXFP4, Q4_K, Q6_K) keeps decode's
 * integer products (quantised activations) in prefill on AVX-512 VNNI, at GEMM speed; every
 * other case multiplies exact f32 weight tiles. */
int eng_qprefill_int(vx_dtype dt)
{
#ifdef __AVX2__
    return act_block(dt) && !qexact() && wide_ok();
#else
    (void)dt;
    return 0;
#endif
}

/* Q4_K's mins take the activations' block sums; Q6_K has a scale per 16 values. */
int eng_row_i8_kind(vx_dtype dt)
{
    return dt == VX_Q4_K ? ROW_I8_MIN : dt == VX_Q6_K ? ROW_I8_HALF : ROW_I8_PLAIN;
}

/* Prepares the job: activations quantised when dt has an integer kernel and the batch is
 * small; the BLAS kept single-threaded inside the pool's parts. */
static void job_init(job *j, acts *a, vx_dtype dt, const void *W, int rows, int cols,
                     const float *X, int n, float *Y, int pack)
{
    static int blas_single;
    unsigned be = 1, bb = 0;
    vx_quant_block(dt, &be, &bb);
    *j = (job){dt, W, (size_t)(cols / (int)be) * bb, rows, cols, n, X, Y, NULL, {0}, 0};
    a->mem = NULL;
    int blk = qexact() ? 0 : act_block(dt);
    if (n > GEMM_N) {
        if (!blas_single) {
            openblas_set_num_threads(1);
            blas_single = 1;
        }
        /* pack only for eng_qgemm's parts: eng_qgemm_rows already runs inside one */
        if (pack && eng_qprefill_int(dt) && acts_make(a, blk, X, n, cols, 0) == 0) {
            int ok = eng_xpack_make_q8(&j->pk, a->d, a->q, a->bs, n, cols, blk, eng_row_i8_kind(dt)) == 0;
            free(a->mem);
            a->mem = NULL;
            if (ok) {
#ifdef __AVX2__
                if (dt != VX_Q8_0) j->pk.row_i8 = int8_row;   /* Q8_0 is read in place */
#endif
                return;
            }
        }
        if (pack && eng_xpack_make(&j->pk, X, n, cols) < 0) j->pk.p = NULL;
        return;
    }
#ifdef __AVX2__
    const int wide = blk && wide_ok();
    /* c: the wide Q8_0 kernel's start; the Q4_0 and MXFP4 kernels' offset terms (the wide
     * ones read them only in their per-block tail) */
    const int off = dt == VX_Q4_0 ? 8 : dt == VX_MXFP4 ? 12 : wide && dt == VX_Q8_0 ? 128 : 0;
#else
    const int wide = 0, off = 0;
#endif
    if (blk && acts_make(a, blk, X, n, cols, off) == 0) {
        a->wide = wide;
#ifdef __AVX2__
        if (a->wide && (dt == VX_Q4_0 || dt == VX_MXFP4))
            nibble_order(a, n, cols);
        else if (a->wide && dt == VX_Q4_K)
            k4_order(a, n, cols);
#endif
        j->a = a;
    }
}

void eng_qgemm_rows(vx_dtype dt, const void *W, int r0, int r1, int rows, int cols,
                    const float *X, int n, float *Y)
{
    job j;
    acts a;
    job_init(&j, &a, dt, W, rows, cols, X, n, Y, 0);
    run(&j, r0, r1);
    free(a.mem);
}

void eng_qgemm(vx_dtype dt, const void *W, int rows, int cols, const float *X, int n,
               float *Y)
{
    job j;
    acts a;
    job_init(&j, &a, dt, W, rows, cols, X, n, Y, 1);
    /* Below ~64 KiB of weight work the pool's wake-up costs more than it saves. */
    if ((uint64_t)rows * j.row_bytes * (uint64_t)n < 65536 || rows < 8)
        part(&j, 0, 1);
    else
        eng_parallel(part, &j);
    free(a.mem);
    eng_xpack_free(&j.pk);
}

typedef struct qrows {
    job j;
    acts a;
} qrows;

static void qrows_run(const void *ctx, int lo, int hi)
{
    run_rows(&((const qrows *)ctx)->j, lo, hi);
}

int eng_qrows_make(vx_dtype dt, const void *W, int rows, int cols, const float *X, int n, float *Y,
                   eng_rowjob *rj)
{
    qrows *q = n <= GEMM_N ? malloc(sizeof *q) : NULL;
    if (!q) return -1;
    job_init(&q->j, &q->a, dt, W, rows, cols, X, n, Y, 0);
    rj->run = qrows_run;
    rj->ctx = q;
    rj->rows = rows;
    atomic_init(&rj->next, 0);
    return 0;
}

void eng_qrows_free(eng_rowjob *rj)
{
    qrows *q = (qrows *)rj->ctx;
    free(q->a.mem);
    free(q);
}

void eng_qgemv(vx_dtype dt, const void *W, int rows, int cols, const float *x, float *y)
{
    eng_qgemm(dt, W, rows, cols, x, 1, y);
}
