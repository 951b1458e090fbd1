/*
 * knn.c — gate KNN: for each requested layer, the features whose gate row has the largest
 * |gate·q| (sign kept), or by the WALK modes' keys (signed gate·q, or the activation
 * with the up rows). One pass over the gate rows read in place from the mmap; f16 and
 * bf16 rows are widened in registers (F16C / a 16-bit shift), so the scan runs at memory
 * bandwidth. Block-quantised rows are read in place too, with exact weights and f32
 * products (nothing copied, no separate index): q8_0 and q4_0 widened block by block in
 * registers, q4_k, q6_k and mxfp4 dequantised one block at a time into a stack buffer
 * (eng_qdot). Rows are cut into chunks that threads pull from a
 * shared counter; each thread keeps a bounded min-heap per layer, merged at the end.
 *
 * With an overlay, the base scan asks for k + (edits in the layer) hits so that dropping
 * tombstones and rescoring edited features with their replacement rows stays exact.
 */
#include "brw_int.h"

#include "qkernels.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_AVX2 1
#endif

#define CHUNK_ROWS 128

#ifdef HAVE_AVX2
static inline float hsum(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline __m256 ld_bf16(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline __m256 ld_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
#endif

#ifdef HAVE_AVX2
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

AVX512_TARGET static inline __m512 ld16_bf16(const uint16_t *p)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The first n - n % 32 elements with 512-bit registers (two accumulators); the caller
 * finishes the tail. */
AVX512_TARGET static float dot512(vx_dtype t, const void *row, const float *q, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    if (t == VX_F32) {
        const float *r = row;
        for (; i + 32 <= n; i += 32) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(r + i), _mm512_loadu_ps(q + i), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(r + i + 16), _mm512_loadu_ps(q + i + 16), a1);
        }
    } else if (t == VX_F16) {
        const uint16_t *r = row;
        for (; i + 32 <= n; i += 32) {
            a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + i))),
                                 _mm512_loadu_ps(q + i), a0);
            a1 = _mm512_fmadd_ps(
                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + i + 16))),
                _mm512_loadu_ps(q + i + 16), a1);
        }
    } else {
        const uint16_t *r = row;
        for (; i + 32 <= n; i += 32) {
            a0 = _mm512_fmadd_ps(ld16_bf16(r + i), _mm512_loadu_ps(q + i), a0);
            a1 = _mm512_fmadd_ps(ld16_bf16(r + i + 16), _mm512_loadu_ps(q + i + 16), a1);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

/* AVX-512 present and not disabled by LQL_NO_AVX512 (for comparing the two paths). */
static int has_avx512(void)
{
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && !getenv("LQL_NO_AVX512");
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}
#endif

#ifdef HAVE_AVX2
/* Eight int8 weights of a block (from p) times q[0..8) added to s. */
static inline __m256 fma_i8(__m128i p, const float *q, __m256 s)
{
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(p)), _mm256_loadu_ps(q), s);
}

/* Σ d·w·q over Q8_0 or Q4_0 blocks (f16 scale, then 32 int8, or 16 bytes of nibbles: low
 * nibbles are elements 0-15, high 16-31, offset 8): the weights are widened straight into
 * registers and each block's sum is scaled once. The products are the ones eng_qdot forms
 * from the dequantised block, only summed in another order. */
static float dot_q8q4(vx_dtype t, const uint8_t *row, const float *q, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    size_t bb = t == VX_Q8_0 ? 34 : 18;
    const __m128i m4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t b = 0; b < n / 32; b++, row += bb, q += 32) {
        uint16_t dh;
        memcpy(&dh, row, 2);
        __m128i lo, hi;
        if (t == VX_Q8_0) {
            lo = _mm_loadu_si128((const __m128i *)(row + 2));
            hi = _mm_loadu_si128((const __m128i *)(row + 18));
        } else {
            __m128i x = _mm_loadu_si128((const __m128i *)(row + 2));
            lo = _mm_sub_epi8(_mm_and_si128(x, m4), eight);
            hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), m4), eight);
        }
        __m256 s = _mm256_setzero_ps();
        s = fma_i8(lo, q, s);
        s = fma_i8(_mm_srli_si128(lo, 8), q + 8, s);
        s = fma_i8(hi, q + 16, s);
        s = fma_i8(_mm_srli_si128(hi, 8), q + 24, s);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(dh)), s, acc);
    }
    return hsum(acc);
}
#endif

float brw_dot_row(vx_dtype t, const void *row, const float *q, int64_t n)
{
#ifdef HAVE_AVX2
    if (t == VX_Q8_0 || t == VX_Q4_0)
        return dot_q8q4(t, row, q, n);
#endif
    if (t != VX_F32 && t != VX_F16 && t != VX_BF16)
        return eng_qdot(t, row, q, (int)n);
    int64_t i = 0;
    float s = 0;
#ifdef HAVE_AVX2
    if (n >= 32 && has_avx512()) {
        i = n - n % 32;
        s = dot512(t, row, q, n);
        for (; i < n; i++)
            s += (t == VX_F32 ? ((const float *)row)[i]
                  : t == VX_F16 ? vx_f16_to_f32(((const uint16_t *)row)[i])
                                : vx_bf16_to_f32(((const uint16_t *)row)[i])) * q[i];
        return s;
    }
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    if (t == VX_F32) {
        const float *r = row;
        for (; i + 16 <= n; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(q + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r + i + 8), _mm256_loadu_ps(q + i + 8), a1);
        }
    } else if (t == VX_F16) {
        const uint16_t *r = row;
        for (; i + 16 <= n; i += 16) {
            a0 = _mm256_fmadd_ps(ld_f16(r + i), _mm256_loadu_ps(q + i), a0);
            a1 = _mm256_fmadd_ps(ld_f16(r + i + 8), _mm256_loadu_ps(q + i + 8), a1);
        }
    } else {
        const uint16_t *r = row;
        for (; i + 16 <= n; i += 16) {
            a0 = _mm256_fmadd_ps(ld_bf16(r + i), _mm256_loadu_ps(q + i), a0);
            a1 = _mm256_fmadd_ps(ld_bf16(r + i + 8), _mm256_loadu_ps(q + i + 8), a1);
        }
    }
    s = hsum(_mm256_add_ps(a0, a1));
#endif
    for (; i < n; i++) {
        float x;
        if (t == VX_F32)
            x = ((const float *)row)[i];
        else if (t == VX_F16)
            x = vx_f16_to_f32(((const uint16_t *)row)[i]);
        else
            x = vx_bf16_to_f32(((const uint16_t *)row)[i]);
        s += x * q[i];
    }
    return s;
}

void brw_parallel(void *(*fn)(void *), void *ctx, size_t size, int n)
{
    pthread_t tid[64];
    int started = 1;
    for (int t = 1; t < n && t < 64; t++) {
        if (pthread_create(&tid[t], NULL, fn, (uint8_t *)ctx + (size_t)t * size) != 0)
            break;
        started++;
    }
    fn(ctx);
    for (int t = 1; t < started; t++)
        pthread_join(tid[t], NULL);
}

/* ---------------------------------------------------------------- bounded heap */

/* Is a a worse hit than b? A smaller key is worse (|score|, or the signed score when
 * PURE); on ties the larger feature is. */
static inline int worse(const brw_hit *a, const brw_hit *b, int pure)
{
    float x = pure ? a->score : fabsf(a->score), y = pure ? b->score : fabsf(b->score);
    if (x != y)
        return x < y;
    return a->feature > b->feature;
}

typedef struct heap {
    brw_hit *h;
    int n, cap;
    int pure;
} heap;

static void sift_down(heap *hp, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < hp->n && worse(&hp->h[l], &hp->h[m], hp->pure))
            m = l;
        if (r < hp->n && worse(&hp->h[r], &hp->h[m], hp->pure))
            m = r;
        if (m == i)
            return;
        brw_hit t = hp->h[i];
        hp->h[i] = hp->h[m];
        hp->h[m] = t;
        i = m;
    }
}

static void heap_push(heap *hp, const brw_hit *x)
{
    if (hp->cap == 0)
        return;
    if (hp->n < hp->cap) {
        int i = hp->n++;
        hp->h[i] = *x;
        while (i > 0) {
            int p = (i - 1) / 2;
            if (!worse(&hp->h[i], &hp->h[p], hp->pure))
                break;
            brw_hit t = hp->h[i];
            hp->h[i] = hp->h[p];
            hp->h[p] = t;
            i = p;
        }
        return;
    }
    if (!worse(&hp->h[0], x, hp->pure))
        return;
    hp->h[0] = *x;
    sift_down(hp, 0);
}

static int cmp_by(const brw_hit *a, const brw_hit *b, int pure)
{
    if (worse(b, a, pure))
        return -1;
    if (worse(a, b, pure))
        return 1;
    return 0;
}

static int cmp_abs(const void *a, const void *b)
{
    return cmp_by(a, b, 0);
}

static int cmp_signed(const void *a, const void *b)
{
    return cmp_by(a, b, 1);
}

static void sort_hits(brw_hit *h, size_t n, brw_walk_mode mode)
{
    qsort(h, n, sizeof *h, mode == BRW_PURE ? cmp_signed : cmp_abs);
}

const char *brw_walk_mode_name(brw_walk_mode mode)
{
    return mode == BRW_PURE ? "pure" : mode == BRW_DENSE ? "dense" : "hybrid";
}

/* Row r of a [rows, hidden] operand (hidden a multiple of the block size: checked by the
 * container reader). */
static const void *row_of(const vx_tensor *t, int64_t r, int hidden)
{
    size_t row = (size_t)hidden / vx_dtype_block_elems(t->dtype) * vx_dtype_block_bytes(t->dtype);
    return (const uint8_t *)t->data + (size_t)r * row;
}

/* A hit for row r of a part: gate·q, and in DENSE mode the activation (gate and up may be
 * replacement rows from the overlay, f32). */
static brw_hit score_row(const brw_model *m, brw_walk_mode mode, int layer,
                         const brw_part *p, int64_t r, const float *q, const float *gate,
                         const float *up)
{
    int hidden = m->s.hidden;
    float g = gate ? brw_dot_row(VX_F32, gate, q, hidden)
                   : brw_dot_row(p->gate->dtype, row_of(p->gate, r, hidden), q, hidden);
    brw_hit h = {layer, p->first + r, g, g};
    if (mode != BRW_DENSE)
        return h;
    if (p->up) {
        float u = up ? brw_dot_row(VX_F32, up, q, hidden)
                     : brw_dot_row(p->up->dtype, row_of(p->up, r, hidden), q, hidden);
        float a = g;
        eng_act(m->s.act, &a, 1);
        h.score = a * u;
    } else {
        if (p->bias) {
            float b;
            vx_row_to_f32(p->bias->dtype,
                          (const uint8_t *)p->bias->data +
                              (size_t)r * (p->bias->dtype == VX_F32 ? 4 : 2), &b, 1);
            h.gate = g + b;
        }
        h.score = h.gate;
        eng_act(m->s.act, &h.score, 1);
    }
    return h;
}

/* ---------------------------------------------------------------- the scan */

typedef struct item {
    int li;                 /* index into the request's layers */
    const brw_part *part;
    int64_t r0, r1;
} item;

typedef struct scan {
    const brw_model *m;
    const int *layers;
    int n_layers;
    const float *q;
    brw_walk_mode mode;
    item *items;
    size_t n_items;
    size_t next;            /* atomic work counter */
    int *kk;                /* heap capacity per layer */
    int threads;
    heap *heaps;            /* [threads][n_layers] */
} scan;

typedef struct worker {
    scan *s;
    int t;
} worker;

static void *run_worker(void *arg)
{
    worker *w = arg;
    scan *s = w->s;
    int hidden = s->m->s.hidden;
    for (;;) {
        size_t it = __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED);
        if (it >= s->n_items)
            break;
        const item *x = &s->items[it];
        heap *hp = &s->heaps[(size_t)w->t * (size_t)s->n_layers + (size_t)x->li];
        int layer = s->layers[x->li];
        if (s->mode == BRW_HYBRID) {
            /* the hot path: one dot per row, nothing else */
            const vx_tensor *g = x->part->gate;
            for (int64_t r = x->r0; r < x->r1; r++) {
                float d = brw_dot_row(g->dtype, row_of(g, r, hidden), s->q, hidden);
                brw_hit h = {layer, x->part->first + r, d, d};
                heap_push(hp, &h);
            }
            continue;
        }
        for (int64_t r = x->r0; r < x->r1; r++) {
            brw_hit h = score_row(s->m, s->mode, layer, x->part, r, s->q, NULL, NULL);
            heap_push(hp, &h);
        }
    }
    return NULL;
}

/* The last edit of (layer, feature) in ov, or NULL. */
static const eng_feature_edit *find_edit(const eng_overlay *ov, int layer, int64_t f)
{
    const eng_feature_edit *e = NULL;
    for (size_t i = 0; ov && i < ov->n_edits; i++)
        if (ov->edits[i].layer == layer && ov->edits[i].feature == f)
            e = &ov->edits[i];
    return e;
}

/* The hit of feature f at a layer, with the edit's replacement rows when it has them. */
static brw_hit feature_hit(const brw_model *m, brw_walk_mode mode, int layer, int64_t f,
                           const float *q, const eng_feature_edit *e)
{
    const brw_layer *L = &m->s.layer[layer];
    for (int p = 0; p < L->n_parts; p++) {
        const brw_part *pt = &L->parts[p];
        if (f >= pt->first && f < pt->first + pt->rows)
            return score_row(m, mode, layer, pt, f - pt->first, q, e ? e->gate : NULL,
                             e ? e->up : NULL);
    }
    return (brw_hit){layer, f, 0, 0};
}

/* Apply the overlay to one layer's base hits (n of them, sorted best first) and write the
 * top k effective hits to out; returns how many. */
static int apply_overlay(const brw_model *m, const eng_overlay *ov, brw_walk_mode mode,
                         int layer, const float *q, brw_hit *base, int n, int k, brw_hit *out)
{
    size_t cap = (size_t)n + (ov ? ov->n_edits : 0) + 1;
    brw_hit *all = malloc(cap * sizeof *all);
    if (!all)
        return 0;
    int na = 0;
    for (int i = 0; i < n; i++)
        if (!find_edit(ov, layer, base[i].feature))
            all[na++] = base[i];
    for (size_t i = 0; ov && i < ov->n_edits; i++) {
        const eng_feature_edit *e = &ov->edits[i];
        if (e->layer != layer || find_edit(ov, layer, e->feature) != e || e->tombstone)
            continue;
        if (e->feature < 0 || e->feature >= m->s.layer[layer].features)
            continue;
        all[na++] = feature_hit(m, mode, layer, e->feature, q, e);
    }
    sort_hits(all, (size_t)na, mode);
    if (na > k)
        na = k;
    memcpy(out, all, (size_t)na * sizeof *out);
    free(all);
    return na;
}

static int edits_in_layer(const eng_overlay *ov, int layer)
{
    int n = 0;
    for (size_t i = 0; ov && i < ov->n_edits; i++)
        n += ov->edits[i].layer == layer;
    return n;
}

int brw_gate_knn(const brw_model *m, const int *layers, int n_layers, const float *q, int k,
                 const brw_overlay *ov, brw_hit *hits, int *counts, vx_err *err)
{
    return brw_gate_knn_mode(m, layers, n_layers, q, k, BRW_HYBRID, ov, hits, counts, err);
}

int brw_gate_knn_mode(const brw_model *m, const int *layers, int n_layers, const float *q,
                      int k, brw_walk_mode mode, const brw_overlay *ov, brw_hit *hits,
                      int *counts, vx_err *err)
{
    if (k <= 0)
        return vx_errf(err, VX_EARG, "gate knn: k must be positive (got %d)", k);
    if (mode != BRW_HYBRID && mode != BRW_PURE && mode != BRW_DENSE)
        return vx_errf(err, VX_EARG, "gate knn: unknown mode %d", (int)mode);
    const eng_overlay *eo = ov ? ov->eng : NULL;
    scan s = {.m = m, .layers = layers, .n_layers = n_layers, .q = q, .mode = mode};
    s.kk = calloc((size_t)n_layers + 1, sizeof *s.kk);
    size_t n_items = 0;
    for (int i = 0; i < n_layers; i++) {
        if (layers[i] < 0 || layers[i] >= m->s.layers) {
            free(s.kk);
            return vx_errf(err, VX_EARG, "layer %d is out of range (the model has %d layers: "
                           "0-%d)", layers[i], m->s.layers, m->s.layers - 1);
        }
        const brw_layer *L = &m->s.layer[layers[i]];
        for (int p = 0; p < L->n_parts; p++)
            n_items += (size_t)((L->parts[p].rows + CHUNK_ROWS - 1) / CHUNK_ROWS);
    }
    s.threads = eng_threads();
    if (s.threads < 1)
        s.threads = 1;
    if ((size_t)s.threads > n_items)
        s.threads = n_items ? (int)n_items : 1;
    s.items = malloc((n_items + 1) * sizeof *s.items);
    s.heaps = calloc((size_t)s.threads * (size_t)n_layers + 1, sizeof *s.heaps);
    int rc = -1;
    if (!s.kk || !s.items || !s.heaps) {
        vx_errf(err, VX_ENOMEM, "gate knn: out of memory");
        goto done;
    }
    n_items = 0;
    for (int i = 0; i < n_layers; i++) {
        const brw_layer *L = &m->s.layer[layers[i]];
        int64_t want = (int64_t)k + edits_in_layer(eo, layers[i]);
        s.kk[i] = (int)(want < L->features ? want : L->features);
        for (int p = 0; p < L->n_parts; p++)
            for (int64_t r = 0; r < L->parts[p].rows; r += CHUNK_ROWS) {
                int64_t r1 = r + CHUNK_ROWS < L->parts[p].rows ? r + CHUNK_ROWS
                                                               : L->parts[p].rows;
                s.items[n_items++] = (item){i, &L->parts[p], r, r1};
            }
        for (int t = 0; t < s.threads; t++) {
            heap *hp = &s.heaps[(size_t)t * (size_t)n_layers + (size_t)i];
            hp->cap = s.kk[i];
            hp->pure = mode == BRW_PURE;
            hp->h = malloc(((size_t)hp->cap + 1) * sizeof *hp->h);
            if (!hp->h) {
                vx_errf(err, VX_ENOMEM, "gate knn: out of memory");
                goto done;
            }
        }
    }
    s.n_items = n_items;

    worker w[64];
    int nt = s.threads < 64 ? s.threads : 64;
    for (int t = 0; t < nt; t++)
        w[t] = (worker){&s, t};
    brw_parallel(run_worker, w, sizeof *w, nt);

    for (int i = 0; i < n_layers; i++) {
        int cap = s.kk[i], n = 0;
        brw_hit *merged = malloc(((size_t)cap * (size_t)nt + 1) * sizeof *merged);
        if (!merged) {
            vx_errf(err, VX_ENOMEM, "gate knn: out of memory");
            goto done;
        }
        for (int t = 0; t < nt; t++) {
            heap *hp = &s.heaps[(size_t)t * (size_t)n_layers + (size_t)i];
            memcpy(merged + n, hp->h, (size_t)hp->n * sizeof *merged);
            n += hp->n;
        }
        sort_hits(merged, (size_t)n, mode);
        if (n > cap)
            n = cap;
        brw_hit *dst = hits + (size_t)i * (size_t)k;
        if (eo && edits_in_layer(eo, layers[i]))
            counts[i] = apply_overlay(m, eo, mode, layers[i], q, merged, n, k, dst);
        else {
            counts[i] = n < k ? n : k;
            memcpy(dst, merged, (size_t)counts[i] * sizeof *dst);
        }
        free(merged);
    }
    rc = 0;
done:
    if (s.heaps)
        for (size_t i = 0; i < (size_t)s.threads * (size_t)n_layers; i++)
            free(s.heaps[i].h);
    free(s.heaps);
    free(s.items);
    free(s.kk);
    return rc;
}
