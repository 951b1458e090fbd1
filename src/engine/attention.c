/*
 * attention.c — causal softmax attention over the session's KV cache.
 *
 * eng_attn_layer projects q/k/v (+biases), applies QK-norm and rope, appends k/v to the cache and
 * calls eng_attend, then o_proj. eng_attend is shared with MLA: query head h reads kv head
 * h / (heads / kv_heads) (repeat-interleave GQA); key j is visible from query i iff
 * j <= i and, with a window W, i - W < j. Scores are scaled, soft-capped (before the
 * mask), soft-maxed in f32 with a max shift (a learned sink logit per head joins the
 * normaliser and takes no value). Heads run on the pool unless an on_attn
 * observer wants each head's probabilities (observers are called on the caller's thread).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "engine_int.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl")))
/* glibc's libmvec: expf on 16 lanes; within 3 ulp of the correctly rounded exp on every 7th
 * float of [-104, 0] (measured, 2026-12-03), libm's expf within 1 */
T512 __m512 _ZGVeN16v_expf(__m512 x);
/* and on 8 lanes with AVX2 (the same algorithm at that width) */
__m256 _ZGVdN8v_expf(__m256 x);

enum { ATT_ONE, ATT_256, ATT_512 };

typedef struct att {
    const eng_model *m;
    const eng_layer *L;
    const eng_kv *kv;
    const float *q;
    float *out, *probs;   /* probs: [n, n_keys] of one head, or NULL */
    int n, pos0;
    int form;             /* ATT_512: heads512 (AVX-512, both head widths multiples of 16);
                           * ATT_256: heads256 (multiples of 8); ATT_ONE: one_head */
    int fail;
} att;

/* Query t's probabilities (keys [lo, pos0 + t] in p, of one head) for an observer. */
static void keep_probs(const att *a, int t, int lo, const float *p)
{
    const int i = a->pos0 + t, n_keys = a->pos0 + a->n;
    float *pr = a->probs + (size_t)t * n_keys;
    memset(pr, 0, (size_t)n_keys * sizeof *pr);
    memcpy(pr + lo, p + lo, (size_t)(i - lo + 1) * sizeof *pr);
}

/* One head over all n queries; p is scratch of pos0 + n floats. */
static void one_head(const att *a, int h, float *p)
{
    const eng_model *m = a->m;
    const eng_kv *kv = a->kv;
    const int heads = m->heads, group = heads / kv->kv_heads, kvh = h / group;
    const int kd = kv->kdim, vd = kv->vdim, kst = kv->kv_heads * kd, vst = kv->vstride;
    const float *vbase = kv->v ? kv->v : kv->k;
    const int W = a->L->window;
    const float *sink = a->L->sinks ? &a->L->sinks[h] : NULL;
    for (int t = 0; t < a->n; t++) {
        const int i = a->pos0 + t, lo = W && i - W + 1 > 0 ? i - W + 1 : 0;
        const float *q = a->q + (size_t)t * heads * kd + (size_t)h * kd;
        float mx = sink ? *sink : -INFINITY;
        for (int j = lo; j <= i; j++) {
            const float *k = kv->k + (size_t)j * kst + (size_t)kvh * kd;
            float s = eng_dot(q, k, kd) * m->attn_scale;
            if (m->attn_softcap > 0) s = eng_softcap(s, m->attn_softcap);
            p[j] = s;
            if (s > mx) mx = s;
        }
        /* a learned sink joins the softmax unscaled and has no value row */
        float sum = sink ? expf(*sink - mx) : 0;
        for (int j = lo; j <= i; j++) { p[j] = expf(p[j] - mx); sum += p[j]; }
        float inv = 1.0f / sum;
        float *o = a->out + (size_t)t * heads * vd + (size_t)h * vd;
        memset(o, 0, (size_t)vd * sizeof *o);
        for (int j = lo; j <= i; j++) {
            const float *v = vbase + (size_t)j * vst + (size_t)kvh * vd;
            float w = p[j] * inv;
            p[j] = w;
            for (int d = 0; d < vd; d++) o[d] += w * v[d];
        }
        if (a->probs) keep_probs(a, t, lo, p);
    }
}

/* Lane r of the result: the sum of v[r]'s 16 lanes (16 keys' scores at once: 45 operations
 * where sixteen reduce_add sequences take about 130). */
T512 static inline __attribute__((always_inline)) __m512 hsum16(const __m512 v[16])
{
    __m512 x[8], y[4];
    for (int i = 0; i < 8; i++)
        x[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++)
        y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0xEE));
    /* y[i], 128-bit lane L, element e: lane L's sum of v[4i + e] */
    const __m512 z0 = _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xDD));
    const __m512 z1 = _mm512_add_ps(_mm512_shuffle_f32x4(y[2], y[3], 0x88), _mm512_shuffle_f32x4(y[2], y[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(z0, z1, 0x88), _mm512_shuffle_f32x4(z0, z1, 0xDD));
}

/* Lane r of the result: the sum of v[r]'s 8 lanes (hsum16 at AVX2's width). */
static inline __attribute__((always_inline)) __m256 hsum8(const __m256 v[8])
{
    const __m256 y0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 y1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    /* y0, 128-bit half L, element e: half L's sum of v[e] (y1: of v[4 + e]) */
    return _mm256_add_ps(_mm256_permute2f128_ps(y0, y1, 0x20), _mm256_permute2f128_ps(y0, y1, 0x31));
}

/* The AVX2 mask of the first n of 8 lanes (all 8 for n >= 8). */
static inline __m256i lanes8(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n < 8 ? n : 8), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The operations HEADS takes at a width of 16 (AVX-512) and 8 (AVX2) lanes besides the
 * intrinsics both spell alike: masks of the first n lanes, masked loads (the other lanes
 * 0) and stores, a masked max, zeroing the lanes outside a mask, one vector's max and sum,
 * and libmvec's expf. */
#define AI static inline __attribute__((always_inline))
T512 AI __mmask16 lanes16(int n) { return eng_lanes16(n); }
T512 AI __m512 mload16(__mmask16 km, const float *p) { return _mm512_maskz_loadu_ps(km, p); }
T512 AI void mstore16(float *p, __mmask16 km, __m512 v) { _mm512_mask_storeu_ps(p, km, v); }
T512 AI __m512 mmax16(__m512 mv, __mmask16 km, __m512 x) { return _mm512_mask_max_ps(mv, km, mv, x); }
T512 AI __m512 mzero16(__mmask16 km, __m512 v) { return _mm512_maskz_mov_ps(km, v); }
T512 AI float lanemax16(__m512 v) { return _mm512_reduce_max_ps(v); }
T512 AI float lanesum16(__m512 v) { return _mm512_reduce_add_ps(v); }
T512 AI __m512 expf16(__m512 x) { return _ZGVeN16v_expf(x); }
AI __m256 mload8(__m256i km, const float *p) { return _mm256_maskload_ps(p, km); }
AI void mstore8(float *p, __m256i km, __m256 v) { _mm256_maskstore_ps(p, km, v); }
AI __m256 mmax8(__m256 mv, __m256i km, __m256 x)
{
    return _mm256_max_ps(mv, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), x, _mm256_castsi256_ps(km)));
}
AI __m256 mzero8(__m256i km, __m256 v) { return _mm256_and_ps(_mm256_castsi256_ps(km), v); }
AI float lanemax8(__m256 v) { return eng_hmax256(v); }
AI float lanesum8(__m256 v) { return eng_hsum256(v); }
AI __m256 expf8(__m256 x) { return _ZGVdN8v_expf(x); }

/* NAME: heads [h0, h1), which read one kv head, W keys and W-lane vectors (V, masks M, the
 * _mm<B>_ intrinsics) at a time: the same f32 products as one_head, summed in another
 * order, and the exponentials W at a time (libmvec). Each block of keys serves every head
 * of the range from L1, so the cache is read once per kv head instead of once per query
 * head. The scalar one_head (an eng_dot call, an expf and a reloaded output row per key
 * and head) made attention most of a decode step at a long context: q4_k at 1536 positions
 * ran 26 tokens/s against 64 at the start (AVX-512); without AVX-512 it was 30-40 % of a
 * fuzz input's COMPOSE INSERT over a long entity. p: scratch of (h1 - h0) · (pos0 + n)
 * floats. nk, nv: the head widths in W-lane vectors. */
#define HEADS(NAME, TARGET, W, B, V, M)                                                        \
TARGET AI void NAME(const att *a, int h0, int h1, float *p, int nk, int nv)                    \
{                                                                                              \
    const eng_model *m = a->m;                                                                 \
    const eng_kv *kv = a->kv;                                                                  \
    const int heads = m->heads, kvh = h0 / (heads / kv->kv_heads);                             \
    const int kd = kv->kdim, vd = kv->vdim, kst = kv->kv_heads * kd, vst = kv->vstride;        \
    const float *kbase = kv->k + (size_t)kvh * kd, *vbase = (kv->v ? kv->v : kv->k) + (size_t)kvh * vd; \
    const int W_ = a->L->window, n_keys = a->pos0 + a->n;                                      \
    const V scale = _mm##B##_set1_ps(m->attn_scale);                                           \
    for (int t = 0; t < a->n; t++) {                                                           \
        const int i = a->pos0 + t, lo = W_ && i - W_ + 1 > 0 ? i - W_ + 1 : 0;                 \
        /* scores */                                                                           \
        for (int j0 = lo; j0 <= i; j0 += W) {                                                  \
            const int nb = i - j0 + 1 < W ? i - j0 + 1 : W;                                    \
            const M km = lanes##W(nb);                                                         \
            for (int h = h0; h < h1; h++) {                                                    \
                const float *q = a->q + (size_t)t * heads * kd + (size_t)h * kd;               \
                V acc[W];                                                                      \
                if (nb == W) {   /* unrolled, so the W sums stay in registers */               \
                    _Pragma("GCC unroll 16") for (int r = 0; r < W; r++) {                     \
                        const float *k = kbase + (size_t)(j0 + r) * kst;                       \
                        acc[r] = _mm##B##_mul_ps(_mm##B##_loadu_ps(q), _mm##B##_loadu_ps(k));  \
                        _Pragma("GCC unroll 16") for (int c = 1; c < nk; c++)                  \
                            acc[r] = _mm##B##_fmadd_ps(_mm##B##_loadu_ps(q + W * c),           \
                                                       _mm##B##_loadu_ps(k + W * c), acc[r]);  \
                    }                                                                          \
                } else {                                                                       \
                    for (int r = 0; r < W; r++) {                                              \
                        acc[r] = _mm##B##_setzero_ps();                                        \
                        for (int c = 0; r < nb && c < nk; c++)                                 \
                            acc[r] = _mm##B##_fmadd_ps(_mm##B##_loadu_ps(q + W * c),           \
                                _mm##B##_loadu_ps(kbase + (size_t)(j0 + r) * kst + W * c), acc[r]); \
                    }                                                                          \
                }                                                                              \
                mstore##W(p + (size_t)(h - h0) * n_keys + j0, km, _mm##B##_mul_ps(hsum##W(acc), scale)); \
            }                                                                                  \
        }                                                                                      \
        /* softmax per head; a learned sink joins the normaliser unscaled and has no value row */ \
        for (int h = h0; h < h1; h++) {                                                        \
            float *ph = p + (size_t)(h - h0) * n_keys;                                         \
            if (m->attn_softcap > 0)                                                           \
                for (int j = lo; j <= i; j++) ph[j] = eng_softcap(ph[j], m->attn_softcap);     \
            const float *sink = a->L->sinks ? &a->L->sinks[h] : NULL;                          \
            V mv = _mm##B##_set1_ps(sink ? *sink : -INFINITY);                                 \
            for (int j = lo; j <= i; j += W) {                                                 \
                const M km = lanes##W(i - j + 1);                                              \
                mv = mmax##W(mv, km, mload##W(km, ph + j));                                    \
            }                                                                                  \
            const float mx = lanemax##W(mv);                                                   \
            mv = _mm##B##_set1_ps(mx);                                                         \
            V sv = _mm##B##_setzero_ps();                                                      \
            for (int j = lo; j <= i; j += W) {                                                 \
                const M km = lanes##W(i - j + 1);                                              \
                const V e = mzero##W(km, expf##W(_mm##B##_sub_ps(mload##W(km, ph + j), mv)));  \
                mstore##W(ph + j, km, e);                                                      \
                sv = _mm##B##_add_ps(sv, e);                                                   \
            }                                                                                  \
            const V inv = _mm##B##_set1_ps(1.0f / (lanesum##W(sv) + (sink ? expf(*sink - mx) : 0))); \
            for (int j = lo; j <= i; j += W) {                                                 \
                const M km = lanes##W(i - j + 1);                                              \
                mstore##W(ph + j, km, _mm##B##_mul_ps(mload##W(km, ph + j), inv));             \
            }                                                                                  \
        }                                                                                      \
        /* the weighted values, each block of W value rows serving every head */              \
        for (int h = h0; h < h1; h++)                                                          \
            memset(a->out + (size_t)t * heads * vd + (size_t)h * vd, 0, (size_t)vd * sizeof(float)); \
        for (int j0 = lo; j0 <= i; j0 += W) {                                                  \
            const int nb = i - j0 + 1 < W ? i - j0 + 1 : W;                                    \
            for (int h = h0; h < h1; h++) {                                                    \
                const float *ph = p + (size_t)(h - h0) * n_keys + j0;                          \
                /* at most 16 (AVX-512: MLA's latent values are 32) or 8 (AVX2: 16           \
                 * registers) vectors of sums at a time */                                     \
                for (int c0 = 0; c0 < nv; c0 += W) {                                           \
                    const int cn = nv - c0 < W ? nv - c0 : W;                                  \
                    float *out = a->out + (size_t)t * heads * vd + (size_t)h * vd + W * c0;    \
                    V o[W];                                                                    \
                    for (int c = 0; c < cn; c++) o[c] = _mm##B##_loadu_ps(out + W * c);        \
                    for (int r = 0; r < nb; r++) {                                             \
                        const float *v = vbase + (size_t)(j0 + r) * vst + W * c0;              \
                        const V w = _mm##B##_set1_ps(ph[r]);                                   \
                        for (int c = 0; c < cn; c++) o[c] = _mm##B##_fmadd_ps(w, _mm##B##_loadu_ps(v + W * c), o[c]); \
                    }                                                                          \
                    for (int c = 0; c < cn; c++) _mm##B##_storeu_ps(out + W * c, o[c]);        \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        if (a->probs) keep_probs(a, t, lo, p);   /* one head at a time (eng_attend) */         \
    }                                                                                          \
}
HEADS(heads512, T512, 16, 512, __m512, __mmask16)
HEADS(heads256, , 8, 256, __m256, __m256i)
#undef HEADS
#undef AI

/* heads512 with its widths made constants for the common head sizes, so its loops unroll */
T512 static void heads512_any(const att *a, int h0, int h1, float *p)
{
    const int nk = a->kv->kdim / 16, nv = a->kv->vdim / 16;
    if (nk == 4 && nv == 4) heads512(a, h0, h1, p, 4, 4);
    else if (nk == 8 && nv == 8) heads512(a, h0, h1, p, 8, 8);
    else if (nk == 16 && nv == 16) heads512(a, h0, h1, p, 16, 16);
    else heads512(a, h0, h1, p, nk, nv);
}

/* the same for heads256 */
static void heads256_any(const att *a, int h0, int h1, float *p)
{
    const int nk = a->kv->kdim / 8, nv = a->kv->vdim / 8;
    if (nk == 2 && nv == 2) heads256(a, h0, h1, p, 2, 2);
    else if (nk == 8 && nv == 8) heads256(a, h0, h1, p, 8, 8);
    else if (nk == 16 && nv == 16) heads256(a, h0, h1, p, 16, 16);
    else heads256(a, h0, h1, p, nk, nv);
}

/* Heads [h0, h1) of one kv head in the form eng_attend chose. */
static void heads_run(const att *a, int h0, int h1, float *p)
{
    if (a->form == ATT_512) heads512_any(a, h0, h1, p);
    else if (a->form == ATT_256) heads256_any(a, h0, h1, p);
    else
        for (int g = h0; g < h1; g++) one_head(a, g, p);
}

static void heads_part(void *ctx, int i, int n)
{
    att *a = ctx;
    int lo, hi;
    eng_split(a->m->heads, i, n, 1, &lo, &hi);
    if (lo >= hi) return;
    const int group = a->m->heads / a->kv->kv_heads;
    float *p = malloc((size_t)(a->pos0 + a->n) * (a->form != ATT_ONE ? group : 1) * sizeof *p);
    if (!p) { a->fail = 1; return; }
    for (int h = lo; h < hi;) {
        /* the part's heads that read the same kv head, together */
        const int end = (h / group + 1) * group < hi ? (h / group + 1) * group : hi;
        heads_run(a, h, end, p);
        h = end;
    }
    free(p);
}

void eng_attend(const eng_model *m, const eng_layer *L, int layer, const eng_kv *kv,
                const float *q, int n, int pos0, float *out, const eng_observer *obs)
{
    att a = {m, L, kv, q, out, NULL, n, pos0, 0, 0};
    const int n_keys = pos0 + n;
    a.form = kv->kdim % 16 == 0 && kv->vdim % 16 == 0 && eng_avx512() ? ATT_512
             : kv->kdim % 8 == 0 && kv->vdim % 8 == 0 ? ATT_256 : ATT_ONE;
    if (obs && obs->on_attn) {
        float *p = malloc((size_t)n_keys * sizeof *p);
        a.probs = malloc((size_t)n * n_keys * sizeof *a.probs);
        if (p && a.probs) {
            for (int h = 0; h < m->heads; h++) {
                heads_run(&a, h, h + 1, p);
                obs->on_attn(obs->ctx, layer, h, pos0, n, n_keys, a.probs);
            }
            free(p);
            free(a.probs);
            return;
        }
        free(p);
        free(a.probs);
        a.probs = NULL;
    }
    if ((size_t)n * n_keys * m->heads < 4096) heads_part(&a, 0, 1);
    else eng_parallel(heads_part, &a);
    if (a.fail) {
        /* a worker could not get scratch: finish every head on this thread */
        a.fail = 0;
        heads_part(&a, 0, 1);
    }
}

int eng_attn_layer(const eng_batch *bt, int layer, const float *h, float *out,
                   const eng_observer *obs, vx_err *err)
{
    const eng_model *m = bt->ss[0]->m;
    const eng_layer *L = &m->layers[layer];
    const int n = bt->rows, qd = m->heads * m->head_dim, kd = m->kv_heads * m->head_dim;
    float *q = malloc((size_t)n * (2 * qd + 2 * kd) * sizeof *q);
    if (!q) return vx_errf(err, VX_ENOMEM, "layer %d: out of memory for attention", layer);
    float *k = q + (size_t)n * qd, *v = k + (size_t)n * kd, *ctxo = v + (size_t)n * kd;
    float *gate = NULL;
    if (m->attn_gate &&
        !(gate = malloc((size_t)n * 2 * qd * sizeof *gate))) {
        free(q);
        return vx_errf(err, VX_ENOMEM, "layer %d: out of memory for attention", layer);
    }
    const eng_w *qkv[3] = {&L->q, &L->k, &L->v};
    float *const out3[3] = {gate ? gate : q, k, v};
    eng_matmul_shared(qkv, 3, h, n, out3);
    if (gate) {
        /* q_proj rows per head are [query | gate]: split them, gates compacted in place */
        const int hd = m->head_dim;
        for (size_t r = 0; r < (size_t)n * m->heads; r++) {
            memcpy(q + r * hd, gate + r * 2 * hd, (size_t)hd * sizeof *q);
            memmove(gate + r * hd, gate + r * 2 * hd + hd, (size_t)hd * sizeof *gate);
        }
    }
    eng_add_bias(q, L->qb, n, qd);
    eng_add_bias(k, L->kb, n, kd);
    eng_add_bias(v, L->vb, n, kd);
    if (L->q_norm.width) {
        /* per head: rows of head_dim; whole projection: one row per token */
        int per = m->qk_norm == QK_HEAD;
        eng_norm_apply(&L->q_norm, q, q, per ? n * m->heads : n);
        eng_norm_apply(&L->k_norm, k, k, per ? n * m->kv_heads : n);
    }
    /* each session's rows at its own positions, against its own cache */
    for (int b = 0, r = 0; b < bt->B; r += bt->n[b++]) {
        const eng_kv *kv = &bt->ss[b]->kv[layer];
        const int nb = bt->n[b], pos0 = bt->ss[b]->pos;
        float *qb = q + (size_t)r * qd, *kb = k + (size_t)r * kd, *vb = v + (size_t)r * kd;
        eng_rope_apply(L->rope, qb, nb, pos0, m->heads, m->head_dim, 0);
        eng_rope_apply(L->rope, kb, nb, pos0, m->kv_heads, m->head_dim, 0);
        memcpy(kv->k + (size_t)pos0 * kd, kb, (size_t)nb * kd * sizeof *k);
        memcpy(kv->v + (size_t)pos0 * kd, vb, (size_t)nb * kd * sizeof *v);
        eng_attend(m, L, layer, kv, qb, nb, pos0, ctxo + (size_t)r * qd, obs);
    }
    if (gate)
        for (size_t i = 0; i < (size_t)n * qd; i++) ctxo[i] /= 1.0f + expf(-gate[i]);
    eng_matmul(&L->o, ctxo, n, out);
    eng_add_bias(out, L->ob, n, m->hidden);
    free(gate);
    free(q);
    return 0;
}
