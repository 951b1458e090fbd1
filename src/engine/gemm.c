/*
 * gemm.c — the prefill GEMM at f32 accuracy with AVX-512: y[t, r] = Σ_k W[r, k] · x[t, k]
 * for many activation rows, products and sums in f32 FMA. bf16 weights are read where they
 * are stored and widened exactly in registers (a broadcast and a shift), and so are f16
 * weights off Intel (a broadcast and vcvtph2ps): other dtypes are converted exactly to f32
 * a tile of rows at a time (the caller's row converter). On Intel's cores vcvtph2ps is two
 * uops on the ports that run the FMAs, and f16 tiles ran faster (ENGINE.md, session 41);
 * on a Zen 5 the widening is free and the tile's conversion is not (session 49).
 *
 * Why not sgemm: Debian's OpenBLAS picks its AVX2 (Haswell) kernels on CPUs it does not
 * know, such as Zen 5, which halves the FMA rate (measured 108 vs 157 GFLOP/s for the same
 * product with OPENBLAS_CORETYPE=SkylakeX; the variable must be set before the process
 * starts, so a library cannot choose it). This kernel is written for AVX-512 directly.
 * Without AVX-512 (or with LQL_NO_AVX512=1) the same packing and tiles run an AVX2
 * micro-kernel (micro8): sgemm called per weight tile packed the activations again for
 * every tile, a third of its time on a Zen 3 (ENGINE.md, session 44).
 *
 * Layout (the BLIS scheme): activations are packed once per product, transposed into
 * groups of 64 tokens (xp[(g · cols + k) · 64 + t], zero past n), so one k-step of a group
 * is four 16-lane vectors. The micro-kernel holds a 6-row × 64-token block of C in 24
 * registers and, per k, broadcasts one weight of each of the 6 rows (as f32) against the
 * four token vectors. k runs in chunks of KC so a chunk of packed activations stays in L1/L2;
 * C is parked in a small buffer between chunks. Accuracy: exact weights and activations,
 * f32 FMA accumulation — the same class as sgemm (only the summation order differs).
 *
 * Block formats with activations quantised to 8-bit blocks (eng_xpack_make_q8; the numerics
 * of the integer decode kernels, qkernels.h) take an integer micro-kernel instead: Q8_0
 * weights read in place, other formats from an int8 tile the codec unpacks, four int8 at a
 * time broadcast against four bytes of each of 16 tokens (vpdpbusd: the activations offset
 * by 128 to be unsigned, the offset taken back through each block's weight sum), one f32
 * scale product per block. 2.9× the f32 kernel's multiply-adds per second on one core in
 * cache (161 vs 55 G/s).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "engine_int.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define T512V __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define MR 6          /* weight rows per micro-kernel block */
#define GT 64         /* tokens per packed group (four 16-lane vectors) */
#define KC 256        /* k per chunk: 64 KiB of packed activations */
#define TILE_F32 (192 * 1024)   /* f32 weight tile per thread: stays in L2 */
#define Q8B 34        /* Q8_0 block: f16 scale, 32 int8 */
#define MRQ 3         /* rows per integer micro-kernel call (two per MR block) */
#define T256 __attribute__((target("avx2,fma")))

/* The CPU checks here and in amx.c, gemm_bf16.c and qkernels.c cache their answer in an
 * atomic: pool threads can ask first at the same time (ThreadSanitizer saw eng_intel's
 * plain int written by two), and all of them write the same value. */
int eng_avx512(void)
{
    static _Atomic int cpu = -1;
    if (cpu < 0)
        cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl");
    const char *e = getenv("LQL_NO_AVX512");
    return cpu && !(e && *e == '1');
}

int eng_intel(void)
{
    static _Atomic int intel = -1;
    if (intel < 0) intel = __builtin_cpu_is("intel");
    return intel;
}

int eng_gemm_widens(vx_dtype dt)
{
    return dt == VX_BF16 || (dt == VX_F16 && !eng_intel());
}

/* Whether the GEMM reads the weight rows where they are stored, widening each weight as it
 * broadcasts it (eng_gemm_widens; the other float dtypes go through an f32 tile, the
 * integer paths have their own rule). With AVX2 a widening broadcast is four uops against
 * vbroadcastss's one, so every dtype takes the tile there. */
static int in_place(const eng_xpack *xp, const void *src, vx_dtype src_dt)
{
    return !xp->q8 && !xp->v256 && src && eng_gemm_widens(src_dt);
}

/* Rows read in place need no tile in L2, only C: their chunks take this many
 * rows (a multiple of MR and of store_t16's 16) whatever the width. Capped at the f32
 * tile's rows, a 5632-wide product ran 6-row chunks, each C transposed from a sixth of a
 * 16-row block: 300 against 333 GFLOP/s (bf16 2048 × 5632, 64 tokens, 2 threads). */
#define DIRECT_ROWS 48

/* Weight rows per tile for a width: the f32 tile stays in L2, a multiple of MR. */
static int tile_rows(int cols)
{
    int rt = (int)(TILE_F32 / ((size_t)cols * sizeof(float))) / MR * MR;
    return rt < MR ? MR : rt;
}

/* Prefill packs a few hundred KiB per product, hundreds of products a second on small
 * models: fresh allocations that size are fresh mappings, so each product paid page
 * faults on its packing, and under ASan an mmap, a munmap and a TLB shootdown (on this
 * VM the sanitizer suite's edit tests spent most of their time there). Freed buffers are
 * kept in a few slots for the next product; a slot's size is a lower bound of its buffer. */
#define KEEP 4
#define KEEP_MAX ((size_t)64 << 20)
static struct {
    pthread_mutex_t mu;
    void *p[KEEP];
    size_t cap[KEEP];
} keep = {.mu = PTHREAD_MUTEX_INITIALIZER};

void *eng_buf_take(size_t bytes)
{
    void *p = NULL;
    int best = -1;
    pthread_mutex_lock(&keep.mu);
    for (int i = 0; i < KEEP; i++)
        if (keep.p[i] && keep.cap[i] >= bytes && (best < 0 || keep.cap[i] < keep.cap[best])) best = i;
    if (best >= 0) {
        p = keep.p[best];
        keep.p[best] = NULL;
    }
    pthread_mutex_unlock(&keep.mu);
    return p ? p : aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

/* Keep p (at least bytes long) in an empty slot or in place of a smaller buffer. */
void eng_buf_give(void *p, size_t bytes)
{
    if (!p || bytes > KEEP_MAX) {
        free(p);
        return;
    }
    int slot = 0;
    pthread_mutex_lock(&keep.mu);
    for (int i = 1; i < KEEP; i++)
        if (keep.p[slot] && (!keep.p[i] || keep.cap[i] < keep.cap[slot])) slot = i;
    void *out = p;
    if (!keep.p[slot] || keep.cap[slot] < bytes) {
        out = keep.p[slot];
        keep.p[slot] = p;
        keep.cap[slot] = bytes;
    }
    pthread_mutex_unlock(&keep.mu);
    free(out);
}

/* The packings' sizes, from n, cols and parts: activations (f32 or offset bytes), the
 * per-block floats of the byte packing, and the parts' scratch. */
static size_t p_bytes(const eng_xpack *xp)
{
    return (size_t)((xp->n + GT - 1) / GT) * xp->cols * GT * sizeof(float);
}

static size_t q8_bytes(const eng_xpack *xp)
{
    return (size_t)((xp->n + 15) / 16) * (xp->cols / 32) * 512;
}

static size_t q8f_bytes(const eng_xpack *xp)
{
    return (size_t)((xp->n + 15) / 16) * (xp->cols / 32) * 16 * sizeof(float);
}

static size_t scratch_bytes(const eng_xpack *xp)
{
    return (size_t)xp->parts * xp->scratch_floats * sizeof(float);
}

/* An empty packing of n × cols for the pool's parts, its scratch sized: per part the
 * weight tile, then C (aligned to 64 bytes for the micro-kernel). */
static void xpack_init(eng_xpack *xp, int n, int cols)
{
    const size_t rt = (size_t)tile_rows(cols);
    *xp = (eng_xpack){.n = n, .cols = cols, .parts = eng_threads(),
                      .scratch_floats = (rt * cols + 15) / 16 * 16 +
                                        (size_t)(rt > DIRECT_ROWS ? (rt + 15) / 16 * 16 : DIRECT_ROWS) * GT};
}

/* Transposes a 16 × 16 block of 32-bit values in registers: v[i] holds row i on entry and
 * column i (lane j = row j) on return. */
T512 static inline void t16(__m512i v[16])
{
    __m512i u[16];
    for (int i = 0; i < 16; i += 2) {
        u[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        u[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4)
        for (int h = 0; h < 2; h++) {
            v[i + h] = _mm512_unpacklo_epi64(u[i + h], u[i + 2 + h]);
            v[i + 2 + h] = _mm512_unpackhi_epi64(u[i + h], u[i + 2 + h]);
        }
    /* v[4q + e] holds, per 128-bit lane L, rows 4q .. 4q + 3 of column 4L + tk[e] */
    static const int tk[4] = {0, 2, 1, 3};
    for (int q = 0; q < 4; q += 2)
        for (int e = 0; e < 4; e++) {
            u[4 * q + e] = _mm512_shuffle_i32x4(v[4 * q + e], v[4 * q + 4 + e], 0x88);
            u[4 * q + 4 + e] = _mm512_shuffle_i32x4(v[4 * q + e], v[4 * q + 4 + e], 0xdd);
        }
    /* u[e] and u[8 + e]: lanes 0 and 2 of the row quads; u[4 + e], u[12 + e]: 1 and 3 */
    for (int e = 0; e < 4; e++)
        for (int h = 0; h < 2; h++) {
            v[4 * h + tk[e]] = _mm512_shuffle_i32x4(u[4 * h + e], u[8 + 4 * h + e], 0x88);
            v[8 + 4 * h + tk[e]] = _mm512_shuffle_i32x4(u[4 * h + e], u[8 + 4 * h + e], 0xdd);
        }
}

/* Transposes an 8 × 8 block of floats in registers: v[i] holds row i on entry and column
 * i on return. */
T256 static inline void t8(__m256 v[8])
{
    __m256 u[8], w[8];
    for (int i = 0; i < 8; i += 2) {
        u[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
        u[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; h++) {
            w[i + h] = _mm256_shuffle_ps(u[i + h], u[i + 2 + h], 0x44);
            w[i + 2 + h] = _mm256_shuffle_ps(u[i + h], u[i + 2 + h], 0xee);
        }
    /* w[0..3]: columns 0, 2, 1, 3 of rows 0-3 (128-bit lane 0) and 4, 6, 5, 7 (lane 1);
     * w[4..7] the same of rows 4-7 */
    static const int col[4] = {0, 2, 1, 3};
    for (int e = 0; e < 4; e++) {
        v[col[e]] = _mm256_permute2f128_ps(w[e], w[4 + e], 0x20);
        v[4 + col[e]] = _mm256_permute2f128_ps(w[e], w[4 + e], 0x31);
    }
}

/* One group of tn <= GT tokens (x: its first token row) into dst, 16 × 16 blocks
 * transposed in registers (t16): packing is serial, and a scalar transpose here left the
 * other thread idle for ~5 % of a 64-token f16 prefill. */
T512 static void pack512(float *dst, const float *x, int tn, int cols)
{
    for (int b = 0; b < tn; b += 16)   /* 16 token rows streamed at a time */
        for (int k0 = 0; k0 < cols; k0 += 16) {
            const int kn = cols - k0 < 16 ? cols - k0 : 16;
            const __mmask16 km = eng_lanes16(kn);
            const float *src = x + (size_t)b * cols + k0;
            __m512i v[16];
            for (int i = 0; i < 16; i++)
                v[i] = b + i < tn ? _mm512_maskz_loadu_epi32(km, src + (size_t)i * cols) : _mm512_setzero_si512();
            t16(v);
            for (int k = 0; k < kn; k++) _mm512_store_si512(dst + (size_t)(k0 + k) * GT + b, v[k]);
        }
}

/* The same for the AVX2 kernel, with the group's 16-token slices one after another (slice v
 * at 16 v · cols, token t of it at k · 16 + t): the kernel keeps a slice's KC rows in L1,
 * and at 64 tokens' 256-byte stride those would map to a quarter of its sets. By 8 × 8
 * blocks (t8); a token row's last cols % 8 through a copy. */
T256 static void pack256(float *dst, const float *x, int tn, int cols)
{
    for (int b = 0; b < tn; b += 8)
        for (int k0 = 0; k0 < cols; k0 += 8) {
            const int kn = cols - k0 < 8 ? cols - k0 : 8;
            const float *src = x + (size_t)b * cols + k0;
            __m256 v[8];
            for (int i = 0; i < 8; i++) {
                if (b + i >= tn) {
                    v[i] = _mm256_setzero_ps();
                } else if (kn == 8) {
                    v[i] = _mm256_loadu_ps(src + (size_t)i * cols);
                } else {   /* the row's last cols % 8, zero-padded */
                    float part[8] = {0};
                    memcpy(part, src + (size_t)i * cols, (size_t)kn * sizeof(float));
                    v[i] = _mm256_loadu_ps(part);
                }
            }
            t8(v);
            float *sl = dst + (size_t)(b / 16) * cols * 16 + b % 16;
            for (int k = 0; k < kn; k++) _mm256_store_ps(sl + (size_t)(k0 + k) * 16, v[k]);
        }
}

int eng_xpack_make(eng_xpack *xp, const float *x, int n, int cols)
{
    xpack_init(xp, n, cols);
    xp->v256 = !eng_avx512();
    xp->p = eng_buf_take(p_bytes(xp));
    xp->scratch = eng_buf_take(scratch_bytes(xp));
    if (!xp->p || !xp->scratch) {
        eng_xpack_free(xp);
        return -1;
    }
    for (int t0 = 0; t0 < n; t0 += GT) {
        float *dst = xp->p + (size_t)(t0 / GT) * cols * GT;
        const int tn = n - t0 < GT ? n - t0 : GT;
        if (tn < GT) memset(dst, 0, (size_t)cols * GT * sizeof(float));   /* tokens past n: 0 */
        if (xp->v256) pack256(dst, x + (size_t)t0 * cols, tn, cols);
        else pack512(dst, x + (size_t)t0 * cols, tn, cols);
    }
    return 0;
}

int eng_q8_amx(int kind)
{
    return kind != ROW_I8_HALF && eng_amx_i8_ready();
}

int eng_xpack_make_q8(eng_xpack *xp, const float *d, const int8_t *q, const int16_t *bs, int n,
                      int cols, int blk, int kind)
{
    const int sums = kind == ROW_I8_MIN;
    const int nb = cols / 32, nv = (n + 15) / 16, per = blk / 32;
    xpack_init(xp, n, cols);
    const size_t nd = (size_t)nv * nb * 16;
    xp->q8 = eng_buf_take(q8_bytes(xp));
    xp->q8d = eng_buf_take(q8f_bytes(xp));
    xp->q8s = sums ? eng_buf_take(q8f_bytes(xp)) : NULL;
    xp->scratch = eng_buf_take(scratch_bytes(xp));
    if (!xp->q8 || !xp->q8d || (sums && !xp->q8s) || !xp->scratch) {
        eng_xpack_free(xp);
        return -1;
    }
    xp->row_i8_kind = kind;
    /* AMX multiplies signed by signed (TDPBSSD), so its products need no correction for
     * the activations' offset; the VNNI kernels' vpdpbusd wants them unsigned (+ 128).
     * Decided here, once per product, so every part reads the bytes as they were packed;
     * AMX's 16-row blocks fit the part's tile from 64 columns on. */
    xp->amx = cols >= 64 && eng_q8_amx(kind);
    const char off = xp->amx ? 0 : (char)0x80;
    /* tokens past n: value 0 and scale 0, so they add nothing */
    memset(xp->q8, off, (size_t)nv * nb * 512);
    memset(xp->q8d, 0, nd * sizeof(float));
    if (sums) memset(xp->q8s, 0, nd * sizeof(float));
    for (int t = 0; t < n; t++) {
        const int v = t / 16, l = t % 16;
        for (int b = 0; b < nb; b++) {
            const int8_t *src = q + (size_t)t * cols + 32 * b;
            uint8_t *dst = xp->q8 + ((size_t)v * nb + b) * 512 + 4 * l;
            uint32_t four[8];
            _mm256_storeu_si256((__m256i *)(void *)four,
                                _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)src),
                                                 _mm256_set1_epi8(off)));
            for (int j = 0; j < 8; j++) memcpy(dst + 64 * j, four + j, 4);
            const size_t at = ((size_t)v * nb + b) * 16 + l;
            xp->q8d[at] = d[(size_t)t * (cols / blk) + b / per];
            if (sums) {
                const int16_t *s16 = bs + (size_t)t * (cols / 16) + 2 * b;
                xp->q8s[at] = xp->q8d[at] * (float)(s16[0] + s16[1]);
            }
        }
    }
    return 0;
}

void eng_xpack_free(eng_xpack *xp)
{
    eng_buf_give(xp->p, p_bytes(xp));
    eng_buf_give(xp->q8, q8_bytes(xp));
    eng_buf_give(xp->q8d, q8f_bytes(xp));
    eng_buf_give(xp->q8s, q8f_bytes(xp));
    eng_buf_give(xp->scratch, scratch_bytes(xp));
    xp->p = NULL;
    xp->q8 = NULL;
    xp->q8d = NULL;
    xp->q8s = NULL;
    xp->scratch = NULL;
}

/* C[MR][NV · 16] (+)= W[MR rows, stride ldw][kn] · X[kn][64]: NV token vectors, W of
 * element type WT, each weight made an exact f32 broadcast by BCAST (bf16 widened in
 * registers: even with f32 tiles on Zen 5, within 7 % either way of them on an Emerald
 * Rapids Xeon; f16 by vcvtph2ps, eng_gemm_widens). */
#define MICRO(NAME, NV, WT, BCAST)                                                             \
T512 ENG_HOT_LOOP static void NAME##_##NV(const WT *w, size_t ldw, const float *x, int kn,  \
                                          float *c, int first)                                 \
{                                                                                              \
    for (int i = 0; i < MR; i++)                                                               \
        eng_asan_range(w + (size_t)i * ldw, (size_t)kn * sizeof *w, #NAME " weights");         \
    eng_asan_range(x, kn ? ((size_t)(kn - 1) * GT + NV * 16) * sizeof *x : 0, #NAME " tokens"); \
    eng_asan_range(c, (size_t)((MR - 1) * GT + NV * 16) * sizeof *c, #NAME " sums");           \
    __m512 a[MR][NV];                                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                   \
            a[i][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(c + i * GT + v * 16);       \
    for (int k = 0; k < kn; k++) {                                                             \
        __m512 xv[NV];                                                                         \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                   \
            xv[v] = _mm512_load_ps(x + (size_t)k * GT + v * 16);                               \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {                                 \
            __m512 b = BCAST(w[(size_t)i * ldw + k]);                                          \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                               \
                a[i][v] = _mm512_fmadd_ps(b, xv[v], a[i][v]);                                  \
        }                                                                                      \
    }                                                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                   \
            _mm512_store_ps(c + i * GT + v * 16, a[i][v]);                                     \
}
#define BC_F32(e) _mm512_set1_ps(e)
#define BC_BF16(e) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_set1_epi16((short)(e)), 16))
#define MICROS(NAME, WT, BCAST) \
    MICRO(NAME, 1, WT, BCAST) MICRO(NAME, 2, WT, BCAST) MICRO(NAME, 3, WT, BCAST) MICRO(NAME, 4, WT, BCAST)
MICROS(micro, float, BC_F32)
MICROS(micro_bf16, uint16_t, BC_BF16)
#define BC_F16(e) _mm512_cvtph_ps(_mm256_set1_epi16((short)(e)))
MICROS(micro_f16, uint16_t, BC_F16)

/* The AVX2 micro-kernel: C[MR][16] (+)= W[MR rows, stride ldw][kn] (f32) · X[kn][16] (a
 * 16-token slice, pack256). C takes 12 of AVX2's 16 registers, the two token vectors and the
 * broadcast weight three more. */
T256 ENG_HOT_LOOP static void micro8(const float *w, size_t ldw, const float *x, int kn, float *c, int first)
{
    for (int i = 0; i < MR; i++) eng_asan_range(w + (size_t)i * ldw, (size_t)kn * sizeof *w, "micro8 weights");
    eng_asan_range(x, (size_t)kn * 16 * sizeof *x, "micro8 tokens");
    eng_asan_range(c, (size_t)((MR - 1) * GT + 16) * sizeof *c, "micro8 sums");
    __m256 a[MR][2];
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 2") for (int v = 0; v < 2; v++)
            a[i][v] = first ? _mm256_setzero_ps() : _mm256_load_ps(c + i * GT + v * 8);
    for (int k = 0; k < kn; k++) {
        const __m256 x0 = _mm256_load_ps(x + (size_t)k * 16), x1 = _mm256_load_ps(x + (size_t)k * 16 + 8);
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {
            const __m256 b = _mm256_broadcast_ss(w + (size_t)i * ldw + k);
            a[i][0] = _mm256_fmadd_ps(b, x0, a[i][0]);
            a[i][1] = _mm256_fmadd_ps(b, x1, a[i][1]);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)
        _Pragma("GCC unroll 2") for (int v = 0; v < 2; v++)
            _mm256_store_ps(c + i * GT + v * 8, a[i][v]);
}

/* One micro-kernel call on nv token vectors: f32 W (the converted tile), or bf16 W read
 * where it is stored (dt). */
static void micro_run(vx_dtype dt, const void *w, size_t ldw, const float *x, int kn, float *c,
                      int first, int nv)
{
#define MICRO_NV(NAME, WT)                                                                     \
    switch (nv) {                                                                              \
    case 1: NAME##_1((const WT *)w, ldw, x, kn, c, first); break;                              \
    case 2: NAME##_2((const WT *)w, ldw, x, kn, c, first); break;                              \
    case 3: NAME##_3((const WT *)w, ldw, x, kn, c, first); break;                              \
    default: NAME##_4((const WT *)w, ldw, x, kn, c, first); break;                             \
    }
    if (dt == VX_BF16) MICRO_NV(micro_bf16, uint16_t)
    else if (dt == VX_F16) MICRO_NV(micro_f16, uint16_t)
    else MICRO_NV(micro, float)
#undef MICRO_NV
}

/* C[MRQ][NV · 16] (+)= int8 weight rows (row stride rb, blocks of 32 values bst bytes
 * apart: Q8_0 in place, or a tile unpacked by row_i8) · the packed activations of NV token
 * vectors over nbk blocks from b0. Per block, each row's int32 sums start at corr (−128 ×
 * the block's weight sum, which removes the activations' +128 offset), take eight vpdpbusd
 * steps, and are scaled by the row's block scale dw times each token's activation scale;
 * with MIN the block's min mn times each token's scaled activation sum is added too; with
 * HALF each 16 values of a block have their own correction and scale (Q6_K). */
#define MICRO_Q8(NAME, NV, MIN, HALF)                                                          \
T512V static void NAME##_##NV(const uint8_t *w, size_t rb, size_t bst, const int32_t *corr,    \
                              const float *dw, const float *mn, int nb, const uint8_t *xq,     \
                              const float *xd, const float *xs, int b0, int nbk, float *c,     \
                              int first)                                                       \
{                                                                                              \
    const size_t vq = (size_t)nb * 512, vd = (size_t)nb * 16;                                  \
    const int sn = HALF ? 2 * nb : nb;   /* scales (and corrections) per row */                \
    __m512 a[MRQ][NV];                                                                         \
    (void)mn; (void)xs;                                                                        \
    _Pragma("GCC unroll 4") for (int i = 0; i < MRQ; i++)                                      \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                   \
            a[i][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(c + i * GT + v * 16);       \
    for (int b = b0; b < b0 + nbk; b++) {                                                      \
        const uint8_t *wb = w + (size_t)b * bst;                                               \
        _Pragma("GCC unroll 2") for (int h = 0; h < (HALF ? 2 : 1); h++) {                     \
            const int sb = HALF ? 2 * b + h : b;                                               \
            __m512i s[MRQ][NV];                                                                \
            _Pragma("GCC unroll 4") for (int i = 0; i < MRQ; i++)                              \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                           \
                    s[i][v] = _mm512_set1_epi32(corr[i * sn + sb]);                            \
            _Pragma("GCC unroll 8") for (int j = HALF ? 4 * h : 0; j < (HALF ? 4 * h + 4 : 8); j++) { \
                __m512i xv[NV];                                                                \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                           \
                    xv[v] = _mm512_load_si512((const void *)(xq + v * vq + (size_t)b * 512 + j * 64)); \
                _Pragma("GCC unroll 4") for (int i = 0; i < MRQ; i++) {                        \
                    int32_t w4;                                                                \
                    memcpy(&w4, wb + i * rb + 4 * j, 4);                                       \
                    const __m512i wv = _mm512_set1_epi32(w4);                                  \
                    _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                       \
                        s[i][v] = _mm512_dpbusd_epi32(s[i][v], xv[v], wv);                     \
                }                                                                              \
            }                                                                                  \
            _Pragma("GCC unroll 4") for (int i = 0; i < MRQ; i++) {                            \
                const __m512 dv = _mm512_set1_ps(dw[i * sn + sb]);                             \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                         \
                    a[i][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i][v]),                     \
                                              _mm512_mul_ps(dv, _mm512_load_ps(xd + v * vd + (size_t)b * 16)), \
                                              a[i][v]);                                        \
                    if (MIN)                                                                   \
                        a[i][v] = _mm512_fmadd_ps(_mm512_set1_ps(mn[i * nb + b]),              \
                                                  _mm512_load_ps(xs + v * vd + (size_t)b * 16), a[i][v]); \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    _Pragma("GCC unroll 4") for (int i = 0; i < MRQ; i++)                                      \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                   \
            _mm512_store_ps(c + i * GT + v * 16, a[i][v]);                                     \
}
#define MICROS_Q8(NAME, MIN, HALF)                                                             \
    MICRO_Q8(NAME, 1, MIN, HALF) MICRO_Q8(NAME, 2, MIN, HALF) MICRO_Q8(NAME, 3, MIN, HALF)     \
    MICRO_Q8(NAME, 4, MIN, HALF)
MICROS_Q8(micro_q8, 0, 0)
MICROS_Q8(micro_q8m, 1, 0)
MICROS_Q8(micro_q8h, 0, 1)

/* corr[b] = −128 × Σ of block b's 32 int8 values (q: block 0's first value, blocks bst
 * bytes apart). */
T512V static void block_corr(const uint8_t *q, size_t bst, int nb, int32_t *corr)
{
    const __m256i ones = _mm256_set1_epi8(1);
    int b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256i p[8];
        for (int i = 0; i < 8; i++)
            p[i] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones,
                                       _mm256_loadu_si256((const __m256i *)(const void *)(q + (size_t)(b + i) * bst)));
        /* hadd pairs twice: each 128-bit half then holds four blocks' partial sums */
        __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
        __m256i e = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
        __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(a, e, 0x20),
                                       _mm256_permute2x128_si256(a, e, 0x31));
        _mm256_storeu_si256((__m256i *)(void *)(corr + b),
                            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum, 7)));
    }
    for (; b < nb; b++) {
        int sum = 0;
        for (int k = 0; k < 32; k++) sum += (int8_t)q[(size_t)b * bst + k];
        corr[b] = -128 * sum;
    }
}

/* corr[g] = −128 × Σ of each 16 values of a contiguous int8 row of nb blocks of 32. */
T512V static void half_corr(const uint8_t *q, int nb, int32_t *corr)
{
    for (int b = 0; b < nb; b++) {
        /* byte sums of each 8 values, offset to unsigned */
        __m256i t = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * b)),
                                                     _mm256_set1_epi8((char)0x80)),
                                    _mm256_setzero_si256());
        int64_t l[4];
        _mm256_storeu_si256((__m256i *)(void *)l, t);
        corr[2 * b] = -128 * (int32_t)(l[0] + l[1] - 128 * 16);
        corr[2 * b + 1] = -128 * (int32_t)(l[2] + l[3] - 128 * 16);
    }
}

/* The f16 scales of one Q8_0 row's blocks as f32. */
T512V static void q8_scales(const uint8_t *w, int nb, float *dw)
{
    /* 16 blocks' scales in one gather */
    const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(Q8B));
    int b = 0;
    for (; b + 16 <= nb; b += 16)
        _mm512_storeu_ps(dw + b, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                                     _mm512_i32gather_epi32(at, (const void *)(w + (size_t)b * Q8B), 1))));
    for (; b < nb; b++)
        dw[b] = _cvtsh_ss((unsigned short)(w[(size_t)b * Q8B] | w[(size_t)b * Q8B + 1] << 8));
}

static void micro_q8(int kind, const uint8_t *w, size_t rb, size_t bst, const int32_t *corr,
                     const float *dw, const float *mn, int nb, const uint8_t *xq, const float *xd,
                     const float *xs, int b0, int nbk, float *c, int first, int nv)
{
#define MICRO_Q8_NV(NAME)                                                                      \
    switch (nv) {                                                                              \
    case 1: NAME##_1(w, rb, bst, corr, dw, mn, nb, xq, xd, xs, b0, nbk, c, first); break;      \
    case 2: NAME##_2(w, rb, bst, corr, dw, mn, nb, xq, xd, xs, b0, nbk, c, first); break;      \
    case 3: NAME##_3(w, rb, bst, corr, dw, mn, nb, xq, xd, xs, b0, nbk, c, first); break;      \
    default: NAME##_4(w, rb, bst, corr, dw, mn, nb, xq, xd, xs, b0, nbk, c, first); break;     \
    }
    if (kind == ROW_I8_MIN) MICRO_Q8_NV(micro_q8m)
    else if (kind == ROW_I8_HALF) MICRO_Q8_NV(micro_q8h)
    else MICRO_Q8_NV(micro_q8)
#undef MICRO_Q8_NV
}

/* C is [row][token], y [token][row]: 16 × 16 blocks are transposed in registers, so each
 * token's stretch of the tile is written whole (the scalar loop it replaced, one word per
 * (row, token), was 19 % of down-meta's screening product: BROWSE.md). */
T512 static void store_t16(const uint32_t *c, int nr, int tn, uint32_t *y, size_t ys)
{
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const __mmask16 m = eng_lanes16(nr - r0);
        for (int t0 = 0; t0 < tn; t0 += 16) {
            __m512i v[16];
            for (int i = 0; i < 16; i++) v[i] = _mm512_load_si512(c + (size_t)(r0 + i) * GT + t0);
            t16(v);
            for (int t = 0; t < 16 && t0 + t < tn; t++)
                _mm512_mask_storeu_epi32(y + (size_t)(t0 + t) * ys + r0, m, v[t]);
        }
    }
}

/* The same by 8 × 8 blocks (t8) without AVX-512: nr rows of C (its buffer a multiple of 8
 * rows long) into [token][row] output. */
T256 static void store_t8(const float *c, int nr, int tn, float *y, size_t ys)
{
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const int rn = nr - r0 < 8 ? nr - r0 : 8;
        for (int t0 = 0; t0 < tn; t0 += 8) {
            __m256 v[8];
            for (int i = 0; i < 8; i++) v[i] = _mm256_load_ps(c + (size_t)(r0 + i) * GT + t0);
            t8(v);
            for (int t = 0; t < 8 && t0 + t < tn; t++) {
                float *dst = y + (size_t)(t0 + t) * ys + r0;
                if (rn == 8) {
                    _mm256_storeu_ps(dst, v[t]);
                } else {
                    float part[8];
                    _mm256_storeu_ps(part, v[t]);
                    memcpy(dst, part, (size_t)rn * sizeof(float));
                }
            }
        }
    }
}

void eng_store_t(const uint32_t *c, int nr, int tn, uint32_t *y, size_t ys, int wide)
{
    if (wide) store_t16(c, nr, tn, y, ys);
    else store_t8((const float *)(const void *)c, nr, tn, (float *)(void *)y, ys);
}

/* Without AVX-512, the next chunk's stored rows, fetched into the caches a few lines at a
 * time while this chunk computes: its conversion then reads them from cache instead of
 * waiting on memory. On a Zen 3 without AVX-512 a 64-token f16 prompt spent a tenth of its
 * GEMM's samples converting tiles, stalled on the loads; fetched ahead, the conversion's
 * samples halved and the fetches took back a quarter of that (perf, ENGINE.md session 48).
 * The AVX-512 kernels ran 5-10 % slower with the same fetches on a Zen 5 (bf16 5632 × 2048
 * at 64 tokens 316-321 against 343-350 GFLOP/s, session 49), as a fetch into L2 did there
 * in 2026-12-02. */
typedef struct ahead {
    const char *p, *end;
    size_t step;   /* bytes per fetch call: the range spread over the chunk's kernel calls */
} ahead;

static inline void fetch_ahead(ahead *a)
{
    if (!a) return;
    const char *stop = a->p + a->step < a->end ? a->p + a->step : a->end;
    for (; a->p < stop; a->p += 64) _mm_prefetch(a->p, _MM_HINT_T0);
}

/* y for weight rows [r0, r1) (at most tile_rows(cols), or DIRECT_ROWS for rows read in
 * place), with the part's scratch. The rows are read where they are stored when
 * eng_gemm_widens(src_dt), or Q8_0 against activations packed by eng_xpack_make_q8 (a short last block
 * from a zero-padded copy in wt); the other integer formats are unpacked to an int8 tile in
 * wt by xp->row_i8; everything else is converted to an f32 tile in wt by row(). With
 * xp->amx the integer block products run on AMX-INT8 tiles, which need no corrections. */
static void gemm_tile(const eng_xpack *xp, int r0, int r1, float *y, int ldy, float *wt, float *cb,
                      void (*row)(const void *ctx, int r, float *dst), const void *ctx,
                      vx_dtype src_dt, const char *src, size_t src_rb, ahead *next)
{
    const int amx = xp->amx;
    const int cols = xp->cols, groups = (xp->n + GT - 1) / GT, nb = cols / 32;
    const int q8 = xp->q8 != NULL, unpacked = q8 && xp->row_i8;
    const int pr = amx ? 16 : MR;   /* rows per micro-kernel block */
    const int tr = r1 - r0, trp = (tr + pr - 1) / pr * pr;
    const int direct = q8 || in_place(xp, src, src_dt);
    /* read in place: the last block's rows, zero-padded to pr (zero Q8_0 blocks add nothing) */
    char *pad = (char *)wt;
    const size_t pad_rb = q8 ? src_rb : (size_t)cols * sizeof(uint16_t);
    const int full = tr / pr * pr;
    if (direct && !unpacked && full < trp) {
        memset(pad, 0, pr * pad_rb);
        for (int i = 0; i < tr - full; i++)
            memcpy(pad + (size_t)i * pad_rb, src + (size_t)(r0 + full + i) * src_rb, pad_rb);
    }
    /* integer kernel: the int8 tile (unpacked formats), then per row and block the
     * correction (the VNNI kernel's only), scale and min */
    uint8_t *qt = (uint8_t *)wt;
    char *meta = unpacked ? (char *)wt + ((size_t)trp * cols + 63) / 64 * 64
                          : pad + (pr * pad_rb + 63) / 64 * 64;
    const int kind = unpacked ? xp->row_i8_kind : ROW_I8_PLAIN;
    const int sn = kind == ROW_I8_HALF ? 2 * nb : nb;   /* scales and corrections per row */
    int32_t *corr = (int32_t *)(void *)meta;
    float *dw = (float *)(corr + (size_t)trp * sn), *mn = dw + (size_t)trp * sn;
    if (unpacked) {
        for (int i = 0; i < tr; i++)
            xp->row_i8(ctx, r0 + i, (int8_t *)qt + (size_t)i * cols, dw + (size_t)i * sn, mn + (size_t)i * nb);
        memset(qt + (size_t)tr * cols, 0, (size_t)(trp - tr) * cols);
        memset(dw + (size_t)tr * sn, 0, (size_t)(trp - tr) * sn * sizeof *dw);
        memset(mn + (size_t)tr * nb, 0, (size_t)(trp - tr) * nb * sizeof *mn);
        if (!amx)
            for (int i = 0; i < trp; i++) {
                if (kind == ROW_I8_HALF) half_corr(qt + (size_t)i * cols, nb, corr + (size_t)i * sn);
                else block_corr(qt + (size_t)i * cols, 32, nb, corr + (size_t)i * nb);
            }
    } else if (q8) {
        for (int i = 0; i < trp; i++) {
            const uint8_t *w = (const uint8_t *)(i < full ? src + (size_t)(r0 + i) * src_rb
                                                          : pad + (size_t)(i - full) * pad_rb);
            if (!amx) block_corr(w + 2, Q8B, nb, corr + (size_t)i * nb);
            q8_scales(w, nb, dw + (size_t)i * nb);
        }
    }
    if (!direct) {
        for (int i = 0; i < tr; i++) row(ctx, r0 + i, wt + (size_t)i * cols);
        if (trp > tr) memset(wt + (size_t)tr * cols, 0, (size_t)(trp - tr) * cols * sizeof *wt);
    }
    for (int g = 0; g < groups; g++) {
        const int t0 = g * GT, tn = xp->n - t0 < GT ? xp->n - t0 : GT, nv = (tn + 15) / 16;
        if (amx) {
            const size_t vo = (size_t)(4 * g) * nb;
            const uint8_t *xq = xp->q8 + vo * 512;
            const float *xd = xp->q8d + vo * 16, *xs = xp->q8s ? xp->q8s + vo * 16 : NULL;
            if (unpacked) {
                eng_amx_i8_rows(qt, (size_t)cols, 32, trp, dw, mn, sn, nb, xq, xd, xs, nv,
                                kind == ROW_I8_MIN, cb, GT);
            } else {
                if (full)
                    eng_amx_i8_rows((const uint8_t *)src + (size_t)r0 * src_rb + 2, src_rb, Q8B, full, dw,
                                    NULL, nb, nb, xq, xd, NULL, nv, 0, cb, GT);
                if (full < trp)
                    eng_amx_i8_rows((const uint8_t *)pad + 2, pad_rb, Q8B, pr, dw + (size_t)full * nb, NULL,
                                    nb, nb, xq, xd, NULL, nv, 0, cb + (size_t)full * GT, GT);
            }
            store_t16((const uint32_t *)(const void *)cb, tr, tn,
                      (uint32_t *)(void *)(y + (size_t)t0 * ldy + r0), (size_t)ldy);
            continue;
        }
        if (xp->v256) {
            /* 16 tokens a call, each slice's KC × 16 activations (16 KiB) kept in L1 across
             * the tile's rows */
            const float *xg = xp->p + (size_t)g * cols * GT;
            for (int k0 = 0; k0 < cols; k0 += KC) {
                const int kn = cols - k0 < KC ? cols - k0 : KC;
                for (int v = 0; v < nv; v++)
                    for (int b = 0; b < trp; b += MR) {
                        fetch_ahead(next);
                        micro8(wt + (size_t)b * cols + k0, (size_t)cols, xg + ((size_t)v * cols + k0) * 16, kn,
                               cb + (size_t)b * GT + v * 16, k0 == 0);
                    }
            }
            store_t8(cb, tr, tn, y + (size_t)t0 * ldy + r0, (size_t)ldy);
            continue;
        }
        for (int k0 = 0; k0 < cols; k0 += KC) {
            const int kn = cols - k0 < KC ? cols - k0 : KC;
            for (int b = 0; b < trp; b += MR) {
                float *c = cb + (size_t)b * GT;
                const char *ws = b < full ? src + (size_t)(r0 + b) * src_rb : pad;
                const size_t wrb = b < full ? src_rb : pad_rb;
                if (q8) {
                    const size_t vo = (size_t)(4 * g) * nb;
                    for (int h = 0; h < MR; h += MRQ) {
                        const size_t mo = (size_t)(b + h) * nb, so = (size_t)(b + h) * sn;
                        if (unpacked)
                            micro_q8(kind, qt + (size_t)(b + h) * cols, (size_t)cols, 32,
                                     corr + so, dw + so, mn + mo, nb, xp->q8 + vo * 512, xp->q8d + vo * 16,
                                     xp->q8s ? xp->q8s + vo * 16 : NULL, k0 / 32, kn / 32, c + h * GT,
                                     k0 == 0, nv);
                        else
                            micro_q8(ROW_I8_PLAIN, (const uint8_t *)ws + h * wrb + 2, wrb, Q8B, corr + mo, dw + mo,
                                     NULL, nb, xp->q8 + vo * 512, xp->q8d + vo * 16, NULL, k0 / 32,
                                     kn / 32, c + h * GT, k0 == 0, nv);
                    }
                    continue;
                }
                const float *x = xp->p + (size_t)g * cols * GT + (size_t)k0 * GT;
                if (!direct)
                    micro_run(VX_F32, wt + (size_t)b * cols + k0, (size_t)cols, x, kn, c, k0 == 0, nv);
                else
                    micro_run(src_dt, (const uint16_t *)ws + k0, wrb / sizeof(uint16_t), x, kn, c,
                              k0 == 0, nv);
            }
        }
        store_t16((const uint32_t *)(const void *)cb, tr, tn,
                  (uint32_t *)(void *)(y + (size_t)t0 * ldy + r0), (size_t)ldy);
    }
}

void eng_gemm_part(const eng_xpack *xp, int part, atomic_int *next, int rows, float *y,
                   void (*row)(const void *ctx, int r, float *dst), const void *ctx,
                   vx_dtype src_dt, const void *src, size_t src_rb)
{
    const int rt = tile_rows(xp->cols);
    if (part >= xp->parts) return;   /* the pool grew since packing: the others claim it all */
    float *wt = xp->scratch + (size_t)part * xp->scratch_floats;
    float *cb = wt + ((size_t)rt * xp->cols + 15) / 16 * 16;
    /* chunks of at most one tile, small enough that a delayed thread's share (its chunk and
     * the one it claimed ahead) is taken over */
    const int cap = in_place(xp, src, src_dt) && rt < DIRECT_ROWS ? DIRECT_ROWS : rt;
    int chunk = rows / (xp->parts * 4) / MR * MR;
    chunk = chunk < MR ? MR : chunk > cap ? cap : chunk;
    if (xp->amx) chunk = 16;      /* one block of AMX's rows (gemm_tile's scratch holds one) */
    /* the AVX2 kernel calls a chunk makes (gemm_tile's loops), over which the next chunk's
     * rows are fetched */
    const int calls = (xp->cols + KC - 1) / KC * ((chunk + MR - 1) / MR) * ((xp->n + 15) / 16);
    /* each chunk claimed one ahead, so its rows can be fetched while the one before computes */
    int lo = atomic_fetch_add_explicit(next, chunk, memory_order_relaxed);
    while (lo < rows) {
        const int hi = lo + chunk < rows ? lo + chunk : rows;
        const int nlo = atomic_fetch_add_explicit(next, chunk, memory_order_relaxed);
        ahead a = { NULL, NULL, 0 };
        if (src && nlo < rows && xp->v256) {
            const int nhi = nlo + chunk < rows ? nlo + chunk : rows;
            a.p = (const char *)src + (size_t)nlo * src_rb;
            a.end = (const char *)src + (size_t)nhi * src_rb;
            a.step = ((size_t)(nhi - nlo) * src_rb / (size_t)calls + 64) / 64 * 64;
        }
        gemm_tile(xp, lo, hi, y, rows, wt, cb, row, ctx, src_dt, src, src_rb, a.p ? &a : NULL);
        lo = nlo;
    }
}
