/*
 * knn.c — gate KNN: for each requested layer, the features whose gate row has the largest
 * |gate·q| (sign kept), or by the WALK modes' keys (signed gate·q, or the activation
 * with the up rows). One pass over the gate rows read in place from the mmap, each row
 * dotted with q by the engine's row kernel (eng_row_dot, a chunk of rows per eng_rows_dot
 * call on the hot path: f16/bf16 widened in registers with
 * AVX-512 where present, q for bf16 rows paired once per scan (eng_x_pairs), so the scan
 * runs at memory bandwidth; block-quantised rows with
 * exact weights and f32 products, nothing copied, no separate index). Rows are cut into
 * chunks that the engine pool's parts (eng_parallel) pull from a shared counter; each part
 * keeps a bounded min-heap per layer, merged at the end.
 *
 * With an overlay, the base scan asks for k + (edits in the layer) hits so that dropping
 * tombstones and rescoring edited features with their replacement rows stays exact.
 */
#include "brw_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A work item is about CHUNK_BYTES of one part's gate rows (at most MAX_CHUNK_ROWS): each
 * item a thread claims restarts its read stream somewhere else, and 512 KiB items (128
 * rows of the 1.1B bench model) read at 0.70-0.85 of the bandwidth probe where 1-8 MiB read
 * at 0.88-0.98 in the same minutes (BROWSE.md "Performance: WALK", session 28). */
#define CHUNK_BYTES ((size_t)2 << 20)
#define MAX_CHUNK_ROWS 1024

/* ---------------------------------------------------------------- bounded heap */

/* Is a a worse hit than b? A smaller key is worse (|score|, or the signed score when
 * PURE; NaN the worst), on ties the larger feature. */
static inline int worse(const brw_hit *a, const brw_hit *b, int pure)
{
    float x = pure ? a->score : fabsf(a->score), y = pure ? b->score : fabsf(b->score);
    int c = brw_fcmp(x, y);
    if (c)
        return c < 0;
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

/* The bytes of one row of a [rows, hidden] operand (hidden a multiple of the block size:
 * checked by the container reader), and row r. */
static size_t row_bytes_of(const vx_tensor *t, int hidden)
{
    return (size_t)hidden / vx_dtype_block_elems(t->dtype) * vx_dtype_block_bytes(t->dtype);
}

static const void *row_of(const vx_tensor *t, int64_t r, int hidden)
{
    return (const uint8_t *)t->data + (size_t)r * row_bytes_of(t, hidden);
}

/* Element r of an f32/f16/bf16 vector operand; 0 without one. */
static float vec_at(const vx_tensor *t, int64_t r)
{
    float v = 0;
    if (t)
        vx_row_to_f32(t->dtype, (const uint8_t *)t->data + (size_t)r * (t->dtype == VX_F32 ? 4 : 2),
                      &v, 1);
    return v;
}

/* A hit for row r of a part: gate·q (+ the expert's gate bias), and in DENSE mode the
 * activation the engine computes, biases and clamped SwiGLU included (gate and up may be
 * replacement rows from the overlay, f32). */
static brw_hit score_row(const brw_model *m, brw_walk_mode mode, int layer,
                         const brw_part *p, int64_t r, const float *q, const float *gate,
                         const float *up)
{
    int hidden = m->s.hidden;
    float g = gate ? eng_row_dot(VX_F32, gate, q, hidden)
                   : eng_row_dot(p->gate->dtype, row_of(p->gate, r, hidden), q, hidden);
    g += vec_at(p->gate_b, r);
    brw_hit h = {layer, p->first + r, g, g};
    if (mode != BRW_DENSE)
        return h;
    if (p->up) {
        float u = (up ? eng_row_dot(VX_F32, up, q, hidden)
                      : eng_row_dot(p->up->dtype, row_of(p->up, r, hidden), q, hidden)) +
                  vec_at(p->up_b, r);
        if (m->s.glu_limit > 0 && m->s.layer[layer].g->channel == VX_CHANNEL_MOE) {
            h.score = eng_glu_clamped(g, u, m->s.glu_alpha, m->s.glu_limit);
        } else {
            float a = g;
            eng_act(m->s.act, &a, 1);
            h.score = a * u;
        }
    } else {
        h.gate = g + vec_at(p->bias, r);
        h.score = h.gate;
        eng_act(m->s.act, &h.score, 1);
    }
    return h;
}

/* ---------------------------------------------------------------- the scan */

/* Rows of a part per work item. */
static int64_t chunk_rows(const brw_part *p, int hidden)
{
    size_t n = CHUNK_BYTES / row_bytes_of(p->gate, hidden);
    return n < 1 ? 1 : n > MAX_CHUNK_ROWS ? MAX_CHUNK_ROWS : (int64_t)n;
}

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
    const float *qp;           /* q for bf16 gate rows (eng_x_pairs), or NULL */
    brw_walk_mode mode;
    item *items;
    size_t n_items;
    size_t next;            /* atomic work counter */
    int *kk;                /* heap capacity per layer */
    int threads;
    heap *heaps;            /* [threads][n_layers] */
} scan;

static void run_part(void *ctx, int part, int nparts)
{
    scan *s = ctx;
    int hidden = s->m->s.hidden;
    (void)nparts;
    if (part >= s->threads)
        return;   /* more pool parts than heaps: the others claim every chunk */
    for (;;) {
        size_t it = __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED);
        if (it >= s->n_items)
            break;
        const item *x = &s->items[it];
        heap *hp = &s->heaps[(size_t)part * (size_t)s->n_layers + (size_t)x->li];
        int layer = s->layers[x->li];
        if (s->mode == BRW_HYBRID) {
            /* the hot path: the chunk's dots in one engine call, then the heap */
            const vx_tensor *g = x->part->gate;
            float d[MAX_CHUNK_ROWS];
            eng_rows_dot(g->dtype, row_of(g, x->r0, hidden), row_bytes_of(g, hidden),
                         (int)(x->r1 - x->r0), s->q, s->qp, hidden, d);
            for (int64_t r = x->r0; r < x->r1; r++) {
                float v = d[r - x->r0] + vec_at(x->part->gate_b, r);
                brw_hit h = {layer, x->part->first + r, v, v};
                heap_push(hp, &h);
            }
            continue;
        }
        for (int64_t r = x->r0; r < x->r1; r++) {
            brw_hit h = score_row(s->m, s->mode, layer, x->part, r, s->q, NULL, NULL);
            heap_push(hp, &h);
        }
    }
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
                 const eng_overlay *ov, brw_hit *hits, int *counts, vx_err *err)
{
    return brw_gate_knn_mode(m, layers, n_layers, q, k, BRW_HYBRID, ov, hits, counts, err);
}

int brw_gate_knn_mode(const brw_model *m, const int *layers, int n_layers, const float *q,
                      int k, brw_walk_mode mode, const eng_overlay *ov, brw_hit *hits,
                      int *counts, vx_err *err)
{
    if (k <= 0)
        return vx_errf(err, VX_EARG, "gate knn: k must be positive (got %d)", k);
    if (mode != BRW_HYBRID && mode != BRW_PURE && mode != BRW_DENSE)
        return vx_errf(err, VX_EARG, "gate knn: unknown mode %d", (int)mode);
    const eng_overlay *eo = ov;
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
        for (int p = 0; p < L->n_parts; p++) {
            const int64_t cr = chunk_rows(&L->parts[p], m->s.hidden);
            n_items += (size_t)((L->parts[p].rows + cr - 1) / cr);
        }
    }
    s.threads = eng_threads();
    if (s.threads < 1)
        s.threads = 1;
    if ((size_t)s.threads > n_items)
        s.threads = n_items ? (int)n_items : 1;
    s.items = malloc((n_items + 1) * sizeof *s.items);
    s.heaps = calloc((size_t)s.threads * (size_t)n_layers + 1, sizeof *s.heaps);
    float *qa = NULL, *qp = NULL;
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
            for (int64_t r = 0, cr = chunk_rows(&L->parts[p], m->s.hidden);
                 r < L->parts[p].rows; r += cr) {
                int64_t r1 = r + cr < L->parts[p].rows ? r + cr : L->parts[p].rows;
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

    /* q is read once per gate row: from an aligned copy when it is not aligned */
    qa = m->s.hidden % 16 == 0 ? eng_x_aligned(q, (size_t)m->s.hidden) : NULL;
    if (qa)
        s.q = qa;
    s.qp = qp = eng_x_pairs(q, m->s.hidden);
    int nt = s.threads;
    eng_parallel(run_part, &s);

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
    free(qa);
    free(qp);
    return rc;
}
