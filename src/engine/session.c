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

/* The layer's token mixer over the batch's rows h → a: attention projects every row at
 * once; the other mixers read one session's state and run per session. */
static int token_mixer(const eng_batch *bt, int l, const float *h, float *a,
                       const eng_observer *obs, vx_err *err)
{
    const eng_model *m = bt->ss[0]->m;
    const eng_layer *L = &m->layers[l];
    if (!L->ssm && !L->dn && !L->mla) return eng_attn_layer(bt, l, h, a, obs, err);
    for (int b = 0, r = 0; b < bt->B; r += bt->n[b++]) {
        eng_session *s = bt->ss[b];
        void **st = &s->state[(size_t)l * VX_STATE_MAX];
        const float *hb = h + (size_t)r * m->hidden;
        float *ab = a + (size_t)r * m->hidden;
        const int n = bt->n[b];
        int rc = L->ssm  ? eng_ssm_run(L->ssm, hb, n, st[0], st[1], ab, err)
                 : L->dn ? eng_deltanet_run(L->dn, hb, n, st[0], st[1], ab, err)
                         : eng_mla_layer(s, l, hb, n, s->pos, ab, obs, err);
        if (rc) return rc;
    }
    return 0;
}

/* finite_rows over each session's rows, naming its positions. */
static int finite_batch(const eng_batch *bt, const float *v, int width, int layer, vx_err *err)
{
    for (int b = 0, r = 0; b < bt->B; r += bt->n[b++])
        if (finite_rows(bt->ss[0]->m, v + (size_t)r * width, bt->n[b], width, bt->ss[b]->pos,
                        layer, err))
            return -1;
    return 0;
}

/* The batch's rows (at most CHUNK for one session) through the layers from `first` on,
 * entering as the embeddings of ids or, when x_in is not NULL, as those rows of the
 * residual; logits, when not NULL, receive each session's last row's [B, vocab]. */
static int forward_chunk(const eng_batch *bt, const int32_t *ids, const float *x_in, int first,
                         float *logits, const eng_observer *obs, vx_err *err)
{
    const eng_model *m = bt->ss[0]->m;
    const int H = m->hidden, n = bt->rows;
    /* observers see the chunk's first position, or -1 for rows of several sessions */
    const int pos0 = bt->B == 1 ? bt->ss[0]->pos : -1;
    float *x = malloc((size_t)n * H * 4 * sizeof(float));
    if (!x) return vx_errf(err, VX_ENOMEM, "out of memory for %d positions", n);
    float *h = x + (size_t)n * H, *a = h + (size_t)n * H, *f = a + (size_t)n * H;
    int rc = 0;
    if (x_in) {
        memcpy(x, x_in, (size_t)n * H * sizeof *x);
    } else {
        for (int b = 0, r = 0; b < bt->B; r += bt->n[b++])
            embed(m, ids + r, bt->n[b], bt->ss[b]->pos, x + (size_t)r * H);
        rc = finite_batch(bt, x, H, -1, err);
        if (!rc && obs && obs->on_embed) obs->on_embed(obs->ctx, pos0, n, x);
    }
    for (int l = first; l < m->n_layers && !rc; l++) {
        const eng_layer *L = &m->layers[l];
        if (vx_cancel_flag) { rc = vx_errf(err, VX_ECANCEL, "forward pass cancelled"); break; }
        pre_norm(&L->attn_norm, x, h, n, H);
        if ((rc = token_mixer(bt, l, h, a, obs, err))) break;
        residual_add(&L->post_attn, m->residual_scale, a, x, n, H);
        if (L->ffn_none) {
            memset(f, 0, (size_t)n * H * sizeof *f);
        } else {
            pre_norm(&L->ffn_norm, x, h, n, H);
            rc = L->moe ? eng_ffn_moe(bt, l, h, pos0, f, obs, err)
                        : eng_ffn_dense(m, l, h, n, pos0, f, obs, err);
            if (rc) break;
            residual_add(&L->post_ffn, m->residual_scale, f, x, n, H);
        }
        if ((rc = finite_batch(bt, x, H, l, err))) break;
        if (obs && obs->on_layer) obs->on_layer(obs->ctx, l, pos0, n, a, f, x);
    }
    if (!rc && logits) {
        /* the sessions' last rows, gathered (h is free now), through one head product */
        for (int b = 0, r = 0; b < bt->B; b++) {
            r += bt->n[b];
            memcpy(h + (size_t)b * H, x + (size_t)(r - 1) * H, (size_t)H * sizeof *h);
        }
        eng_lens_rows(m, h, bt->B, a, logits);
        for (int b = 0; !rc && b < bt->B; b++)
            rc = finite_rows(m, logits + (size_t)b * m->vocab, 1, m->vocab,
                             bt->ss[b]->pos + bt->n[b] - 1, m->n_layers, err);
    }
    if (!rc)
        for (int b = 0; b < bt->B; b++) bt->ss[b]->pos += bt->n[b];
    free(x);
    return rc;
}

/* Room in session s for n more positions. */
static int check_room(const eng_session *s, int n, vx_err *err)
{
    if (n <= 0) return vx_errf(err, VX_EARG, "eng_forward: no tokens");
    if ((int64_t)s->pos + n > s->max_ctx)
        return vx_errf(err, VX_EARG, "context full: %d positions + %d tokens exceeds the "
                       "session's %d", s->pos, n, s->max_ctx);
    return 0;
}

/* The tokens given to session s: n of them, within its context and the vocabulary. */
static int check_ids(const eng_session *s, const int32_t *ids, int n, vx_err *err)
{
    const eng_model *m = s->m;
    if (check_room(s, n, err)) return -1;
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
    return 0;
}

/* After a failed pass: a session holding recurrent (fixed) state starts over (a recurrence
 * cannot be rewound); any other is back at pos0. */
static void rewind_to(eng_session *s, int pos0)
{
    if (s->m->shape->state_fixed) eng_session_reset(s);
    else s->pos = pos0;
}

/* n tokens (ids) or residual rows (x_in, entering layer `first`) appended to s in chunks:
 * activation memory stays bounded and the prefill kernels' packed activations stay
 * cache-sized; observers see each chunk with its pos0. */
static int forward_one(eng_session *s, const int32_t *ids, const float *x_in, int first, int n,
                       float *logits, const eng_observer *obs, vx_err *err)
{
    const int pos0 = s->pos, H = s->m->hidden;
    for (int done = 0; done < n;) {
        int c = n - done < CHUNK ? n - done : CHUNK;
        const eng_batch bt = {&s, 1, &c, c};
        if (forward_chunk(&bt, ids ? ids + done : NULL, x_in ? x_in + (size_t)done * H : NULL,
                          first, done + c == n ? logits : NULL, obs, err)) {
            rewind_to(s, pos0);
            return -1;
        }
        done += c;
    }
    return 0;
}

int eng_forward(eng_session *s, const int32_t *ids, int n, float *logits,
                const eng_observer *obs, vx_err *err)
{
    if (check_ids(s, ids, n, err)) return -1;
    return forward_one(s, ids, NULL, 0, n, logits, obs, err);
}

int eng_forward_from(eng_session *s, int first, const float *x_in, int n, float *logits,
                     const eng_observer *obs, vx_err *err)
{
    const eng_model *m = s->m;
    if (first < 0 || first > m->n_layers)
        return vx_errf(err, VX_EARG, "eng_forward_from: layer %d is out of range (the model has "
                       "%d layers)", first, m->n_layers);
    if (check_room(s, n, err)) return -1;
    return forward_one(s, NULL, x_in, first, n, logits, obs, err);
}

int eng_batch_fit(const int *n, int count)
{
    int k = count > 0, rows = count > 0 ? n[0] : 0;
    while (k < count && rows + n[k] <= CHUNK) rows += n[k++];
    return k;
}

int eng_forward_batch(eng_session *const *ss, int B, const int32_t *ids, const int *n,
                      float *logits, const eng_observer *obs, vx_err *err)
{
    if (B <= 0) return vx_errf(err, VX_EARG, "eng_forward_batch: no sessions");
    if (obs && obs->on_attn && B > 1)
        return vx_errf(err, VX_EARG, "eng_forward_batch: attention probabilities are observed "
                       "one session at a time");
    int rows = 0;
    for (int b = 0; b < B; b++) {
        if (ss[b]->m != ss[0]->m)
            return vx_errf(err, VX_EARG, "eng_forward_batch: the sessions run different models");
        for (int c = 0; c < b; c++)
            if (ss[c] == ss[b])
                return vx_errf(err, VX_EARG, "eng_forward_batch: session %d is also session %d",
                               b, c);
        if (check_ids(ss[b], ids + rows, n[b], err)) return -1;
        rows += n[b];
    }
    int *pos0 = malloc((size_t)B * sizeof *pos0);
    if (!pos0) return vx_errf(err, VX_ENOMEM, "out of memory for a batch of %d sessions", B);
    for (int b = 0; b < B; b++) pos0[b] = ss[b]->pos;
    const eng_batch bt = {ss, B, n, rows};
    int rc = forward_chunk(&bt, ids, NULL, 0, logits, obs, err);
    if (rc)
        for (int b = 0; b < B; b++) rewind_to(ss[b], pos0[b]);
    free(pos0);
    return rc;
}
