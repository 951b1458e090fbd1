/*
 * mla.c — multi-head latent attention with a latent cache.
 *
 * The query comes from a low-rank pair with a norm between (q_a → norm → q_b) or a direct
 * q_proj; rows per head are [nope | rope]. kv_a gives [latent | k_rope]: the latent goes
 * through its norm, k_rope (one rope head shared by every query head) through the plan's
 * rope. The cache keeps just that row, [latent | k_rope], per position — kv_lora + rope
 * floats instead of heads · (nope + rope + v).
 *
 * kv_b's rows per head are [k_nope (W_k) | v (W_v)], so k_nope_j = W_k · c_j and
 * v_j = W_v · c_j for the cached latent c_j. Attention runs in latent space ("absorbed"):
 *   score_j = q_nope · W_k c_j + q_rope · k_rope_j = [W_kᵀ q_nope | q_rope] · [c_j | k_rope_j]
 *   out     = Σ_j p_j W_v c_j = W_v (Σ_j p_j c_j)
 * which is the same attention reassociated: eng_attend runs over the shared cache row
 * with the absorbed query, and W_v maps each head's latent context back to v_head_dim.
 */
#include <stdlib.h>
#include <string.h>
#include "engine_int.h"

/* The [rows_n, kv_lora] slice of kv_b starting at row r0, as a view; trans: read in-major
 * (the [kv_lora, rows_n] matrix W_kᵀ). */
static eng_w kvb_slice(const eng_w *kvb, int r0, int rows_n, int trans)
{
    eng_w w = *kvb;
    w.data = (const char *)kvb->data + (size_t)r0 * kvb->row_bytes;
    w.rows = trans ? kvb->cols : rows_n;
    w.cols = trans ? rows_n : kvb->cols;
    w.trans = trans;
    return w;
}

int eng_mla_layer(eng_session *s, int layer, const float *h, int n, int pos0, float *out,
                  const eng_observer *obs, vx_err *err)
{
    const eng_model *m = s->m;
    const eng_layer *L = &m->layers[layer];
    const eng_kv *kv = &s->kv[layer];
    const int heads = m->heads, nope = m->qk_nope, rope = m->qk_rope, qk = nope + rope;
    const int vd = m->v_head_dim, lat = m->kv_lora, row = lat + rope, kvb = nope + vd;
    size_t need = (size_t)n * ((size_t)m->q_lora + (size_t)heads * qk + row + lat +
                               (size_t)heads * row + (size_t)heads * lat + (size_t)heads * vd +
                               nope + lat + vd);
    float *qa = malloc(need * sizeof *qa);
    if (!qa) return vx_errf(err, VX_ENOMEM, "layer %d: out of memory for mla", layer);
    float *q = qa + (size_t)n * m->q_lora, *ka = q + (size_t)n * heads * qk;
    float *lt = ka + (size_t)n * row, *qx = lt + (size_t)n * lat;
    float *cl = qx + (size_t)n * heads * row, *ctxo = cl + (size_t)n * heads * lat;
    float *g_in = ctxo + (size_t)n * heads * vd, *g_lat = g_in + (size_t)n * nope;
    float *g_v = g_lat + (size_t)n * lat;
    const eng_w *in2[2] = {m->q_lora ? &L->q_a : &L->q, &L->kv_a};
    float *const out2[2] = {m->q_lora ? qa : q, ka};
    eng_matmul_shared(in2, 2, h, n, out2);
    if (m->q_lora) {
        eng_norm_apply(&L->q_a_norm, qa, qa, n);
        eng_matmul(&L->q_b, qa, n, q);
    }
    eng_rope_apply(L->rope, q, n, pos0, heads, qk, nope);

    /* the cache row: [norm(latent) | rope(k_rope)] */
    for (int t = 0; t < n; t++) memcpy(lt + (size_t)t * lat, ka + (size_t)t * row, (size_t)lat * sizeof *lt);
    eng_norm_apply(&L->kv_a_norm, lt, lt, n);
    eng_rope_apply(L->rope, ka, n, pos0, 1, row, lat);
    for (int t = 0; t < n; t++) {
        float *c = kv->k + (size_t)(pos0 + t) * row;
        memcpy(c, lt + (size_t)t * lat, (size_t)lat * sizeof *c);
        memcpy(c + lat, ka + (size_t)t * row + lat, (size_t)rope * sizeof *c);
    }

    /* absorbed queries: [W_kᵀ q_nope | q_rope] per head */
    for (int hh = 0; hh < heads; hh++) {
        eng_w wk = kvb_slice(&L->kv_b, hh * kvb, nope, 1);
        for (int t = 0; t < n; t++)
            memcpy(g_in + (size_t)t * nope, q + (size_t)t * heads * qk + (size_t)hh * qk,
                   (size_t)nope * sizeof *g_in);
        eng_matmul(&wk, g_in, n, g_lat);
        for (int t = 0; t < n; t++) {
            float *d = qx + (size_t)t * heads * row + (size_t)hh * row;
            memcpy(d, g_lat + (size_t)t * lat, (size_t)lat * sizeof *d);
            memcpy(d + lat, q + (size_t)t * heads * qk + (size_t)hh * qk + nope,
                   (size_t)rope * sizeof *d);
        }
    }
    eng_attend(m, L, layer, kv, qx, n, pos0, cl, obs);

    /* each head's latent context back through W_v */
    for (int hh = 0; hh < heads; hh++) {
        eng_w wv = kvb_slice(&L->kv_b, hh * kvb + nope, vd, 0);
        for (int t = 0; t < n; t++)
            memcpy(g_lat + (size_t)t * lat, cl + (size_t)t * heads * lat + (size_t)hh * lat,
                   (size_t)lat * sizeof *g_lat);
        eng_matmul(&wv, g_lat, n, g_v);
        for (int t = 0; t < n; t++)
            memcpy(ctxo + (size_t)t * heads * vd + (size_t)hh * vd, g_v + (size_t)t * vd,
                   (size_t)vd * sizeof *ctxo);
    }
    eng_matmul(&L->o, ctxo, n, out);
    eng_add_bias(out, L->ob, n, m->hidden);
    free(qa);
    return 0;
}
