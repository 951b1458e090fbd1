/*
 * ffn.c — the feed-forward branch: gated (act(gate)·up, or the clamped SwiGLU of GPT-OSS
 * experts) or plain (act(up + b)) MLPs, and the overlay on top of them.
 *
 * Overlay contract (engine.h): for the features of a layer, edits may replace gate/up
 * rows (the activation is recomputed from the replacement rows), replace a down column
 * (adds (down'_f − down_f)·act_f) or tombstone the feature (act_f = 0, so it contributes
 * nothing anywhere). A low-rank pair adds U·(Vᵀ·act) over the layer's features. For MoE
 * layers features are expert-major (e · expert_intermediate + f) and act_f already carries
 * the routing weight, so the same formulas hold per layer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine_int.h"

float eng_glu_clamped(float g, float u, float alpha, float limit)
{
    float gv = g < limit ? g : limit, uv = u < -limit ? -limit : u > limit ? limit : u;
    return gv / (1.0f + expf(-alpha * gv)) * (uv + 1.0f);
}

/* act ← act(g) · act (clamped for GPT-OSS experts), or act(act) without a gate, over len
 * values. A prompt's is split over the pool: run serially, its expf left the other thread
 * idle for ~6 % of a 64-token prefill. */
typedef struct glu_job {
    int act;
    const eng_mlp *b;
    float *g, *act_v;
    size_t len;
} glu_job;
#define GLU_PAR 65536

static void glu_part(void *ctx, int i, int parts)
{
    const glu_job *j = ctx;
    const size_t lo = j->len * (size_t)i / (size_t)parts, hi = j->len * (size_t)(i + 1) / (size_t)parts;
    float *g = j->g, *a = j->act_v;
    if (g && j->b->limit > 0) {
        for (size_t k = lo; k < hi; k++) a[k] = eng_glu_clamped(g[k], a[k], j->b->alpha, j->b->limit);
    } else if (g) {
        eng_act(j->act, g + lo, hi - lo);
        for (size_t k = lo; k < hi; k++) a[k] *= g[k];
    } else {
        eng_act(j->act, a + lo, hi - lo);
    }
}

int eng_mlp_run(const eng_model *m, int layer, const eng_mlp *b, int f0, const float *h,
                int n, const float *rowscale, float *act, float *out, vx_err *err)
{
    const int H = m->hidden, I = b->inter;
    const eng_overlay *ov = f0 >= 0 ? m->overlay : NULL;
    float *g = NULL;
    if (b->gate.data && !(g = malloc((size_t)n * I * sizeof *g)))
        return vx_errf(err, VX_ENOMEM, "layer %d: out of memory for the ffn", layer);
    const eng_w *ug[2] = {&b->up, &b->gate};
    float *const out2[2] = {act, g};
    eng_matmul_shared(ug, g ? 2 : 1, h, n, out2);
    if (g) eng_add_bias(g, b->gate_b, n, I);
    eng_add_bias(act, b->up_b, n, I);
    for (size_t e = 0; ov && e < ov->n_edits; e++) {
        const eng_feature_edit *ed = &ov->edits[e];
        int f = ed->feature - f0;
        if (ed->layer != layer || f < 0 || f >= I) continue;
        for (int t = 0; t < n; t++) {
            const float *ht = h + (size_t)t * H;
            eng_w row = {VX_F32, NULL, 1, H, (size_t)H * sizeof(float), 0, 0};
            if (ed->gate && g) {
                row.data = ed->gate;
                g[(size_t)t * I + f] = eng_w_dot_row(&row, 0, ht) + (b->gate_b ? b->gate_b[f] : 0);
            }
            if (ed->up) {
                row.data = ed->up;
                act[(size_t)t * I + f] = eng_w_dot_row(&row, 0, ht) + (b->up_b ? b->up_b[f] : 0);
            }
        }
    }
    glu_job gj = {m->act, b, g, act, (size_t)n * I};
    if (gj.len >= GLU_PAR) eng_parallel(glu_part, &gj);
    else glu_part(&gj, 0, 1);
    free(g);
    if (rowscale)
        for (int t = 0; t < n; t++)
            for (int i = 0; i < I; i++) act[(size_t)t * I + i] *= rowscale[t];
    for (size_t e = 0; ov && e < ov->n_edits; e++) {
        const eng_feature_edit *ed = &ov->edits[e];
        int f = ed->feature - f0;
        if (ed->layer == layer && f >= 0 && f < I && ed->tombstone)
            for (int t = 0; t < n; t++) act[(size_t)t * I + f] = 0;
    }
    eng_matmul(&b->down, act, n, out);
    /* the whole branch output is scaled, its bias included (a routed expert's weight) */
    for (int t = 0; b->down_b && t < n; t++)
        for (int r = 0; r < H; r++)
            out[(size_t)t * H + r] += (rowscale ? rowscale[t] : 1.0f) * b->down_b[r];
    for (size_t e = 0; ov && e < ov->n_edits; e++) {
        const eng_feature_edit *ed = &ov->edits[e];
        int f = ed->feature - f0;
        if (ed->layer != layer || f < 0 || f >= I || !ed->down || ed->tombstone) continue;
        for (int r = 0; r < H; r++) {
            float d = ed->down[r] - eng_w_at(&b->down, r, f);
            for (int t = 0; t < n; t++) out[(size_t)t * H + r] += d * act[(size_t)t * I + f];
        }
    }
    return 0;
}

/* out += U·(Vᵀ·act) for every low-rank delta of the layer; a delta addressed to an expert
 * reads that expert's slice of the expert-major act (zero where it is not routed, the
 * routing weight folded in: exactly expert e's down_proj += U·Vᵀ). */
int eng_lowrank_apply(const eng_model *m, int layer, const float *act, int n, int features,
                      float *out, vx_err *err)
{
    const eng_overlay *ov = m->overlay;
    const int H = m->hidden, EI = m->expert_inter;
    for (size_t i = 0; ov && i < ov->n_lowrank; i++) {
        const eng_lowrank *lr = &ov->lowrank[i];
        if (lr->layer != layer || lr->rank <= 0) continue;
        int w = features;
        if (lr->expert >= 0) {
            if (!m->layers[layer].moe || lr->expert >= m->experts)
                return vx_errf(err, VX_EARG, "layer %d: a low-rank delta addresses expert %d, "
                               "which the layer does not have", layer, lr->expert);
            w = EI;
        }
        float *t = malloc((size_t)n * ((size_t)lr->rank + H + (lr->expert >= 0 ? w : 0)) * sizeof *t);
        if (!t) return vx_errf(err, VX_ENOMEM, "layer %d: out of memory for a low-rank delta", layer);
        float *d = t + (size_t)n * lr->rank;
        const float *a = act;
        if (lr->expert >= 0) {
            float *sl = d + (size_t)n * H;
            for (int p = 0; p < n; p++)
                memcpy(sl + (size_t)p * w, act + (size_t)p * features + (size_t)lr->expert * EI,
                       (size_t)w * sizeof *sl);
            a = sl;
        }
        eng_w v = {VX_F32, lr->v, lr->rank, w, 0, 1, 0};
        eng_w u = {VX_F32, lr->u, H, lr->rank, (size_t)lr->rank * sizeof(float), 0, 0};
        eng_matmul(&v, a, n, t);
        eng_matmul(&u, t, n, d);
        for (size_t k = 0; k < (size_t)n * H; k++) out[k] += d[k];
        free(t);
    }
    return 0;
}

int eng_ffn_dense(const eng_model *m, int layer, const float *h, int n, int pos0,
                  float *out, const eng_observer *obs, vx_err *err)
{
    const eng_layer *L = &m->layers[layer];
    float *act = malloc((size_t)n * L->mlp.inter * sizeof *act);
    if (!act) return vx_errf(err, VX_ENOMEM, "layer %d: out of memory for the ffn", layer);
    int rc = eng_mlp_run(m, layer, &L->mlp, 0, h, n, NULL, act, out, err);
    if (!rc) rc = eng_lowrank_apply(m, layer, act, n, L->mlp.inter, out, err);
    if (!rc && obs && obs->on_ffn) obs->on_ffn(obs->ctx, layer, pos0, n, h, act, L->mlp.inter);
    free(act);
    return rc;
}
