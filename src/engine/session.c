/*
 * session.c — eng_session: the KV cache and the forward pass over the plan.
 *
 * The residual stream: h += post(attn(pre(h))); h += post(ffn(pre(h))), each pre and post
 * norm present or not as the graph says.
 * A chunk of n tokens runs as a batch (prefill: GEMM), one token as GEMV (decode). The
 * cache holds f32 keys (after rope) and values for every layer; MLA layers cache their
 * expanded per-head keys and values, so attention is one kernel for both operators. The
 * state is allocated as each layer of the graph declares it (docs/lql/GRAPH.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine_int.h"

#define CHUNK 256

int eng_session_new(const eng_model *m, int max_ctx, eng_session **out, vx_err *err)
{
    *out = NULL;
    if (max_ctx <= 0) max_ctx = m->ctx;
    if (max_ctx > m->ctx)
        return vx_errf(err, VX_EARG, "session context %d exceeds the model's context length %d",
                       max_ctx, m->ctx);
    eng_session *s = calloc(1, sizeof *s);
    if (!s) return vx_errf(err, VX_ENOMEM, "out of memory creating a session");
    s->m = m;
    s->max_ctx = max_ctx;
    s->kv = calloc((size_t)m->n_layers, sizeof *s->kv);
    s->state = calloc((size_t)m->n_layers * VX_STATE_MAX, sizeof *s->state);
    int k = m->top_k > 0 ? m->top_k : 1;
    s->route_ids = malloc((size_t)m->n_layers * k * sizeof *s->route_ids);
    s->route_w = calloc((size_t)m->n_layers * k, sizeof *s->route_w);
    if (!s->kv || !s->state || !s->route_ids || !s->route_w) goto oom;
    for (int i = 0; i < m->n_layers * k; i++) s->route_ids[i] = -1;
    for (int l = 0; l < m->n_layers; l++) {
        /* allocate what the graph declares (the plan checked it is what the operator keeps) */
        const vx_layer_shape *ls = &m->shape->layer[l];
        void **st = &s->state[(size_t)l * VX_STATE_MAX];
        for (int r = 0; r < ls->nstate; r++) {
            size_t bytes = (size_t)ls->state[r].bytes * (ls->state[r].per_token ? (size_t)max_ctx : 1);
            if (!(st[r] = calloc(1, bytes))) goto oom;
        }
        eng_kv *kv = &s->kv[l];
        if (m->layers[l].ssm || m->layers[l].dn) continue;   /* no kv: the mixer reads st */
        if (m->layers[l].mla) {
            /* the latent cache: one [latent | k_rope] row per position for all heads */
            kv->kv_heads = 1;
            kv->kdim = kv->vstride = m->kv_lora + m->qk_rope;
            kv->vdim = m->kv_lora;
            kv->k = st[0];
        } else {
            kv->kv_heads = m->kv_heads;
            kv->kdim = kv->vdim = m->head_dim;
            kv->vstride = m->kv_heads * m->head_dim;
            kv->k = st[0];
            kv->v = st[1];
        }
    }
    *out = s;
    return 0;
oom:
    eng_session_free(s);
    return vx_errf(err, VX_ENOMEM, "out of memory for a %d-position kv cache", max_ctx);
}

void eng_session_free(eng_session *s)
{
    if (!s) return;
    for (size_t i = 0; s->state && i < (size_t)s->m->n_layers * VX_STATE_MAX; i++)
        free(s->state[i]);
    free(s->state);
    free(s->kv);
    free(s->route_ids);
    free(s->route_w);
    free(s);
}

/* Back to position 0: per-position regions are simply overwritten from there, the fixed
 * (recurrent) regions start again from zeros. */
void eng_session_reset(eng_session *s)
{
    const eng_model *m = s->m;
    s->pos = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const vx_layer_shape *ls = &m->shape->layer[l];
        for (int r = 0; r < ls->nstate; r++)
            if (!ls->state[r].per_token)
                memset(s->state[(size_t)l * VX_STATE_MAX + r], 0, (size_t)ls->state[r].bytes);
    }
}
int eng_session_pos(const eng_session *s) { return s->pos; }

int eng_session_routing(const eng_session *s, int layer, int *ids, float *w)
{
    const eng_model *m = s->m;
    if (layer < 0 || layer >= m->n_layers || !m->layers[layer].moe) return 0;
    for (int k = 0; k < m->top_k; k++) {
        ids[k] = s->route_ids[layer * m->top_k + k];
        w[k] = s->route_w[layer * m->top_k + k];
    }
    return m->top_k;
}

static void embed(const eng_model *m, const int32_t *ids, int n, int pos0, float *x)
{
    const int H = m->hidden;
    for (int t = 0; t < n; t++) {
        float *r = x + (size_t)t * H;
        eng_row_f32(m->embed.dt, (const char *)m->embed.data + (size_t)ids[t] * m->embed.row_bytes,
                    r, (size_t)H);
        if (m->embed_scale != 1.0f)
            for (int i = 0; i < H; i++) r[i] *= m->embed_scale;
        if (m->positions.data) {
            float p[H];
            eng_row_f32(m->positions.dt,
                        (const char *)m->positions.data + (size_t)(pos0 + t) * m->positions.row_bytes,
                        p, (size_t)H);
            for (int i = 0; i < H; i++) r[i] += p[i];
        }
    }
}

/* x += post(d) · scale over [n, hidden]: a branch output, post-normed (in place) when the
 * layer has that norm, scaled by the residual multiplier (in place, so observers see what
 * was added), added to the residual. */
static void residual_add(const eng_norm *post, float scale, float *d, float *x, int n, int hidden)
{
    if (post->width) eng_norm_apply(post, d, d, n);
    if (scale != 1.0f)
        for (size_t i = 0; i < (size_t)n * hidden; i++) d[i] *= scale;
    for (size_t i = 0; i < (size_t)n * hidden; i++) x[i] += d[i];
}

/* The first non-finite value of v ([n, width] rows from position pos0) is an error naming
 * where (layer < 0: the embedding; layer == n_layers: the output head): a corrupted weight
 * or an overflow never reaches a result as nan. */
static int finite_rows(const eng_model *m, const float *v, int n, int width, int pos0,
                       int layer, vx_err *err)
{
    for (size_t i = 0; i < (size_t)n * width; i++)
        if (!isfinite(v[i])) {
            char where[48];
            if (layer < 0 || layer >= m->n_layers)
                snprintf(where, sizeof where, "%s", layer < 0 ? "the embedding" : "the output head");
            else
                snprintf(where, sizeof where, "layer %d", layer);
            return vx_errf(err, VX_EFORMAT, "%s produced a non-finite value (%s at position %d, "
                           "element %d): the weights are corrupted or the values overflowed",
                           where, isnan(v[i]) ? "nan" : "inf", pos0 + (int)(i / width),
                           (int)(i % width));
        }
    return 0;
}

/* h = norm(x) before a branch, or x itself when the layer has no pre-norm there. */
static void pre_norm(const eng_norm *nm, const float *x, float *h, int n, int hidden)
{
    if (nm->width) eng_norm_apply(nm, x, h, n);
    else memcpy(h, x, (size_t)n * hidden * sizeof *h);
}

/* The layer's token mixer over h → a. */
static int token_mixer(eng_session *s, int l, const float *h, int n, int pos0, float *a,
                       const eng_observer *obs, vx_err *err)
{
    const eng_layer *L = &s->m->layers[l];
    void **st = &s->state[(size_t)l * VX_STATE_MAX];
    if (L->ssm) return eng_ssm_run(L->ssm, h, n, st[0], st[1], a, err);
    if (L->dn) return eng_deltanet_run(L->dn, h, n, st[0], st[1], a, err);
    return L->mla ? eng_mla_layer(s, l, h, n, pos0, a, obs, err)
                  : eng_attn_layer(s, l, h, n, pos0, a, obs, err);
}

/* One chunk of at most CHUNK tokens at the session's position. */
static int forward_chunk(eng_session *s, const int32_t *ids, int n, float *logits,
                         const eng_observer *obs, vx_err *err)
{
    const eng_model *m = s->m;
    const int H = m->hidden, pos0 = s->pos;
    float *x = malloc((size_t)n * H * 4 * sizeof(float));
    if (!x) return vx_errf(err, VX_ENOMEM, "out of memory for %d positions", n);
    float *h = x + (size_t)n * H, *a = h + (size_t)n * H, *f = a + (size_t)n * H;
    int rc = 0;
    embed(m, ids, n, pos0, x);
    rc = finite_rows(m, x, n, H, pos0, -1, err);
    if (!rc && obs && obs->on_embed) obs->on_embed(obs->ctx, pos0, n, x);
    for (int l = 0; l < m->n_layers && !rc; l++) {
        const eng_layer *L = &m->layers[l];
        if (vx_cancel_flag) { rc = vx_errf(err, VX_ECANCEL, "forward pass cancelled"); break; }
        pre_norm(&L->attn_norm, x, h, n, H);
        if ((rc = token_mixer(s, l, h, n, pos0, a, obs, err))) break;
        residual_add(&L->post_attn, m->residual_scale, a, x, n, H);
        if (L->ffn_none) {
            memset(f, 0, (size_t)n * H * sizeof *f);
        } else {
            pre_norm(&L->ffn_norm, x, h, n, H);
            rc = L->moe ? eng_ffn_moe(s, l, h, n, pos0, f, obs, err)
                        : eng_ffn_dense(m, l, h, n, pos0, f, obs, err);
            if (rc) break;
            residual_add(&L->post_ffn, m->residual_scale, f, x, n, H);
        }
        if ((rc = finite_rows(m, x, n, H, pos0, l, err))) break;
        if (obs && obs->on_layer) obs->on_layer(obs->ctx, l, pos0, n, a, f, x);
    }
    if (!rc && logits) {
        eng_lens(m, x + (size_t)(n - 1) * H, logits);
        rc = finite_rows(m, logits, 1, m->vocab, pos0 + n - 1, m->n_layers, err);
    }
    if (!rc) s->pos += n;
    free(x);
    return rc;
}

int eng_forward(eng_session *s, const int32_t *ids, int n, float *logits,
                const eng_observer *obs, vx_err *err)
{
    const eng_model *m = s->m;
    if (n <= 0) return vx_errf(err, VX_EARG, "eng_forward: no tokens");
    if ((int64_t)s->pos + n > s->max_ctx)
        return vx_errf(err, VX_EARG, "context full: %d positions + %d tokens exceeds the "
                       "session's %d", s->pos, n, s->max_ctx);
    for (int t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= m->vocab) {
            /* an id the tokenizer gave: name its piece, the entry past the model's rows */
            const char *piece = m->tok ? eng_tok_piece(m->tok, ids[t]) : NULL;
            if (piece)
                return vx_errf(err, VX_EARG, "token id %d ('%s' in tokenizer.json) is out of "
                               "range: the model has %d token rows", ids[t], piece, m->vocab);
            return vx_errf(err, VX_EARG, "token id %d is out of range (vocab %d)", ids[t],
                           m->vocab);
        }
    /* long prompts run in chunks: activation memory stays bounded and the prefill kernels'
     * packed activations stay cache-sized; observers see each chunk with its pos0 */
    const int pos0 = s->pos;
    for (int done = 0; done < n;) {
        int c = n - done < CHUNK ? n - done : CHUNK;
        if (forward_chunk(s, ids + done, c, done + c == n ? logits : NULL, obs, err)) {
            /* a recurrence cannot be rewound: a session holding fixed state starts over */
            if (m->shape->state_fixed) eng_session_reset(s);
            else s->pos = pos0;
            return -1;
        }
        done += c;
    }
    return 0;
}
