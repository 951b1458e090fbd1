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
#include "engine_int.h"

typedef struct att {
    const eng_model *m;
    const eng_layer *L;
    const eng_kv *kv;
    const float *q;
    float *out, *probs;   /* probs: [n, n_keys] of one head, or NULL */
    int n, pos0;
    int fail;
} att;

/* One head over all n queries; p is scratch of pos0 + n floats. */
static void one_head(const att *a, int h, float *p)
{
    const eng_model *m = a->m;
    const eng_kv *kv = a->kv;
    const int heads = m->heads, group = heads / kv->kv_heads, kvh = h / group;
    const int kd = kv->kdim, vd = kv->vdim, kst = kv->kv_heads * kd, vst = kv->vstride;
    const float *vbase = kv->v ? kv->v : kv->k;
    const int W = a->L->window, n_keys = a->pos0 + a->n;
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
        if (a->probs) {
            float *pr = a->probs + (size_t)t * n_keys;
            memset(pr, 0, (size_t)n_keys * sizeof *pr);
            memcpy(pr + lo, p + lo, (size_t)(i - lo + 1) * sizeof *pr);
        }
    }
}

static void heads_part(void *ctx, int i, int n)
{
    att *a = ctx;
    int lo, hi;
    eng_split(a->m->heads, i, n, 1, &lo, &hi);
    if (lo >= hi) return;
    float *p = malloc((size_t)(a->pos0 + a->n) * sizeof *p);
    if (!p) { a->fail = 1; return; }
    for (int h = lo; h < hi; h++) one_head(a, h, p);
    free(p);
}

void eng_attend(const eng_model *m, const eng_layer *L, int layer, const eng_kv *kv,
                const float *q, int n, int pos0, float *out, const eng_observer *obs)
{
    att a = {m, L, kv, q, out, NULL, n, pos0, 0};
    const int n_keys = pos0 + n;
    if (obs && obs->on_attn) {
        float *p = malloc((size_t)n_keys * sizeof *p);
        a.probs = malloc((size_t)n * n_keys * sizeof *a.probs);
        if (p && a.probs) {
            for (int h = 0; h < m->heads; h++) {
                one_head(&a, h, p);
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

int eng_attn_layer(eng_session *s, int layer, const float *h, int n, int pos0, float *out,
                   const eng_observer *obs, vx_err *err)
{
    const eng_model *m = s->m;
    const eng_layer *L = &m->layers[layer];
    const eng_kv *kv = &s->kv[layer];
    const int qd = m->heads * m->head_dim, kd = m->kv_heads * m->head_dim;
    float *q = malloc((size_t)n * (2 * qd + 2 * kd) * sizeof *q);
    if (!q) return vx_errf(err, VX_ENOMEM, "layer %d: out of memory for attention", layer);
    float *k = q + (size_t)n * qd, *v = k + (size_t)n * kd, *ctxo = v + (size_t)n * kd;
    float *gate = NULL;
    if (m->attn_gate) {
        /* q_proj rows per head are [query | gate]: split them, gates compacted in place */
        const int hd = m->head_dim;
        if (!(gate = malloc((size_t)n * 2 * qd * sizeof *gate))) {
            free(q);
            return vx_errf(err, VX_ENOMEM, "layer %d: out of memory for attention", layer);
        }
        eng_matmul(&L->q, h, n, gate);
        for (size_t r = 0; r < (size_t)n * m->heads; r++) {
            memcpy(q + r * hd, gate + r * 2 * hd, (size_t)hd * sizeof *q);
            memmove(gate + r * hd, gate + r * 2 * hd + hd, (size_t)hd * sizeof *gate);
        }
    } else {
        eng_matmul(&L->q, h, n, q);
    }
    eng_matmul(&L->k, h, n, k);
    eng_matmul(&L->v, h, n, v);
    eng_add_bias(q, L->qb, n, qd);
    eng_add_bias(k, L->kb, n, kd);
    eng_add_bias(v, L->vb, n, kd);
    if (L->q_norm.width) {
        /* per head: rows of head_dim; whole projection: one row per token */
        int per = m->qk_norm == QK_HEAD;
        eng_norm_apply(&L->q_norm, q, q, per ? n * m->heads : n);
        eng_norm_apply(&L->k_norm, k, k, per ? n * m->kv_heads : n);
    }
    eng_rope_apply(L->rope, q, n, pos0, m->heads, m->head_dim, 0);
    eng_rope_apply(L->rope, k, n, pos0, m->kv_heads, m->head_dim, 0);
    memcpy(kv->k + (size_t)pos0 * kd, k, (size_t)n * kd * sizeof *k);
    memcpy(kv->v + (size_t)pos0 * kd, v, (size_t)n * kd * sizeof *v);
    eng_attend(m, L, layer, kv, q, n, pos0, ctxo, obs);
    if (gate)
        for (size_t i = 0; i < (size_t)n * qd; i++) ctxo[i] /= 1.0f + expf(-gate[i]);
    eng_matmul(&L->o, ctxo, n, out);
    eng_add_bias(out, L->ob, n, m->hidden);
    free(gate);
    free(q);
    return 0;
}
