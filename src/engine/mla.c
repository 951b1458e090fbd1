/*
 * mla.c — multi-head latent attention. The query comes from a low-rank pair with a norm
 * between (q_a → norm → q_b) or a direct q_proj; rows per head are [nope | rope]. kv_a
 * gives [latent | k_rope]: k_rope is one rope head shared by every query head, the latent
 * goes through its norm and kv_b, whose rows per head are [k_nope | v]. The rope part is
 * rotated with the plan's rope (interleaved pairs for DeepSeek-V3). The cache stores the
 * expanded per-head keys [k_nope | k_rope] and values, and eng_attend does the rest.
 */
#include <stdlib.h>
#include <string.h>
#include "engine_int.h"

int eng_mla_layer(eng_session *s, int layer, const float *h, int n, int pos0, float *out,
                  const eng_observer *obs, vx_err *err)
{
    const eng_model *m = s->m;
    const eng_layer *L = &m->layers[layer];
    const eng_kv *kv = &s->kv[layer];
    const int heads = m->heads, nope = m->qk_nope, rope = m->qk_rope, qk = nope + rope;
    const int vd = m->v_head_dim, lat = m->kv_lora, kva = lat + rope, kvb = nope + vd;
    size_t need = (size_t)n * ((size_t)m->q_lora + (size_t)heads * qk + kva + lat +
                               (size_t)heads * kvb + (size_t)heads * vd);
    float *qa = malloc(need * sizeof *qa);
    if (!qa) return vx_errf(err, VX_ENOMEM, "layer %d: out of memory for mla", layer);
    float *q = qa + (size_t)n * m->q_lora, *ka = q + (size_t)n * heads * qk;
    float *lt = ka + (size_t)n * kva, *kb = lt + (size_t)n * lat, *ctxo = kb + (size_t)n * heads * kvb;
    if (m->q_lora) {
        eng_matmul(&L->q_a, h, n, qa);
        eng_norm_apply(&L->q_a_norm, qa, qa, n);
        eng_matmul(&L->q_b, qa, n, q);
    } else {
        eng_matmul(&L->q, h, n, q);
    }
    eng_matmul(&L->kv_a, h, n, ka);
    for (int t = 0; t < n; t++) memcpy(lt + (size_t)t * lat, ka + (size_t)t * kva, (size_t)lat * sizeof *lt);
    eng_norm_apply(&L->kv_a_norm, lt, lt, n);
    eng_matmul(&L->kv_b, lt, n, kb);
    eng_rope_apply(&m->rope, q, n, pos0, heads, qk, nope);
    eng_rope_apply(&m->rope, ka, n, pos0, 1, kva, lat);
    for (int t = 0; t < n; t++) {
        float *kr = kv->k + (size_t)(pos0 + t) * heads * qk;
        float *vr = kv->v + (size_t)(pos0 + t) * heads * vd;
        for (int hh = 0; hh < heads; hh++) {
            const float *src = kb + (size_t)t * heads * kvb + (size_t)hh * kvb;
            memcpy(kr + (size_t)hh * qk, src, (size_t)nope * sizeof *kr);
            memcpy(kr + (size_t)hh * qk + nope, ka + (size_t)t * kva + lat, (size_t)rope * sizeof *kr);
            memcpy(vr + (size_t)hh * vd, src + nope, (size_t)vd * sizeof *vr);
        }
    }
    eng_attend(m, L, layer, kv, q, n, pos0, ctxo, obs);
    eng_matmul(&L->o, ctxo, n, out);
    eng_add_bias(out, L->ob, n, m->hidden);
    free(qa);
    return 0;
}
