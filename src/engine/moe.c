/*
 * moe.c — a routed mixture-of-experts FFN as the graph declares it.
 *
 * Per position: router logits (+ router bias) → scores s (softmax over all experts, or sigmoid). The
 * selection uses s + score bias when the graph has one; with n_group > 1 only the
 * topk_group groups with the largest sum of their two best selection scores stay eligible
 * (the rest score 0, as the reference does). The top_k eligible experts are taken in
 * descending selection score (ties: lower id). Their weights are the unbiased s,
 * divided by their sum when `normalise`, then multiplied by routed_scaling. Each expert
 * runs once over the positions routed to it (a batch in prefill). A shared expert is
 * added to every position, scaled by sigmoid(shared_gate · x) when gated.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine_int.h"

/* Route one position: logits [E] → chosen ids / weights [top_k]. sel is scratch [E]. */
static void route(const eng_model *m, const eng_layer *L, float *lg, float *sel, int *ids,
                  float *w)
{
    const int E = m->experts, K = m->top_k;
    if (m->scoring == SCORE_SOFTMAX) eng_softmax(lg, E);
    else for (int e = 0; e < E; e++) lg[e] = 1.0f / (1.0f + expf(-lg[e]));
    for (int e = 0; e < E; e++) sel[e] = lg[e] + (L->score_bias ? L->score_bias[e] : 0);
    if (m->n_group > 1) {
        const int G = m->n_group, per = E / G;
        float gs[G];
        int keep[G];
        for (int g = 0; g < G; g++) {
            float b1 = -INFINITY, b2 = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                if (sel[e] > b1) { b2 = b1; b1 = sel[e]; }
                else if (sel[e] > b2) b2 = sel[e];
            }
            gs[g] = b1 + b2;
            keep[g] = 0;
        }
        for (int k = 0; k < m->topk_group; k++) {
            int best = -1;
            for (int g = 0; g < G; g++)
                if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
            keep[best] = 1;
        }
        for (int g = 0; g < G; g++)
            if (!keep[g])
                for (int e = g * per; e < (g + 1) * per; e++) sel[e] = 0;
    }
    float sum = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int j = 0; j < k && !taken; j++) taken = ids[j] == e;
            if (!taken && (best < 0 || sel[e] > sel[best])) best = e;
        }
        ids[k] = best;
        w[k] = lg[best];
        sum += w[k];
    }
    for (int k = 0; k < K; k++) {
        if (m->normalise) w[k] /= sum + 1e-20f;
        w[k] *= m->routed_scaling;
    }
}

int eng_ffn_moe(const eng_batch *bt, int layer, const float *h, int pos0, float *out,
                const eng_observer *obs, vx_err *err)
{
    const eng_model *m = bt->ss[0]->m;
    const int n = bt->rows;
    const eng_layer *L = &m->layers[layer];
    const int H = m->hidden, E = m->experts, K = m->top_k, EI = m->expert_inter;
    const int F = E * EI;
    int want_act = (obs && obs->on_ffn) || (m->overlay && m->overlay->n_lowrank);
    int rc = 0;
    float *lg = malloc((size_t)n * E * sizeof *lg);
    float *sel = malloc((size_t)E * sizeof *sel);
    int *ids = malloc((size_t)n * K * sizeof *ids);
    float *w = malloc((size_t)n * K * sizeof *w);
    int *rows = malloc((size_t)n * sizeof *rows);
    float *rw = malloc((size_t)n * sizeof *rw);
    int si = m->shared_inter > EI ? m->shared_inter : EI;
    float *hx = malloc((size_t)n * H * sizeof *hx), *ox = malloc((size_t)n * H * sizeof *ox);
    float *ax = malloc((size_t)n * si * sizeof *ax);
    float *full = want_act ? calloc((size_t)n * F, sizeof *full) : NULL;
    if (!lg || !sel || !ids || !w || !rows || !rw || !hx || !ox || !ax || (want_act && !full)) {
        rc = vx_errf(err, VX_ENOMEM, "layer %d: out of memory for the moe ffn", layer);
        goto done;
    }
    eng_matmul(&L->router, h, n, lg);
    eng_add_bias(lg, L->router_b, n, E);
    for (int t = 0; t < n; t++)
        route(m, L, lg + (size_t)t * E, sel, ids + (size_t)t * K, w + (size_t)t * K);
    for (int b = 0, r = 0; b < bt->B; b++) {
        eng_session *s = bt->ss[b];
        r += bt->n[b];
        memcpy(s->route_ids + (size_t)layer * K, ids + (size_t)(r - 1) * K, (size_t)K * sizeof *ids);
        memcpy(s->route_w + (size_t)layer * K, w + (size_t)(r - 1) * K, (size_t)K * sizeof *w);
    }
    memset(out, 0, (size_t)n * H * sizeof *out);
    for (int e = 0; e < E && !rc; e++) {
        int cnt = 0;
        for (int t = 0; t < n; t++)
            for (int k = 0; k < K; k++)
                if (ids[(size_t)t * K + k] == e) {
                    rows[cnt] = t;
                    rw[cnt] = w[(size_t)t * K + k];
                    memcpy(hx + (size_t)cnt * H, h + (size_t)t * H, (size_t)H * sizeof *hx);
                    cnt++;
                }
        if (!cnt) continue;
        rc = eng_mlp_run(m, layer, &L->experts[e], e * EI, hx, cnt, rw, ax, ox, err);
        for (int i = 0; i < cnt && !rc; i++) {
            float *o = out + (size_t)rows[i] * H;
            for (int d = 0; d < H; d++) o[d] += ox[(size_t)i * H + d];
            if (full)
                memcpy(full + (size_t)rows[i] * F + (size_t)e * EI, ax + (size_t)i * EI,
                       (size_t)EI * sizeof *full);
        }
    }
    if (!rc && full) rc = eng_lowrank_apply(m, layer, full, n, F, out, err);
    if (!rc && m->shared_inter) {
        float *gate = NULL;
        if (L->shared_gate.data) {
            for (int t = 0; t < n; t++)
                rw[t] = 1.0f / (1.0f + expf(-eng_w_dot_row(&L->shared_gate, 0, h + (size_t)t * H)));
            gate = rw;
        }
        rc = eng_mlp_run(m, layer, &L->shared, -1, h, n, gate, ax, ox, err);
        for (size_t i = 0; !rc && i < (size_t)n * H; i++) out[i] += ox[i];
    }
    if (!rc && obs && obs->on_ffn) obs->on_ffn(obs->ctx, layer, pos0, n, h, full, F);
done:
    free(lg); free(sel); free(ids); free(w); free(rows); free(rw);
    free(hx); free(ox); free(ax); free(full);
    return rc;
}
