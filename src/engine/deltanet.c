/*
 * deltanet.c — the Gated DeltaNet mixer (eng_deltanet in engine_int.h).
 *
 * Projections for all n positions at once, the per-key-head grouped projection rows
 * gathered into the conv's channel order [q | k | v], the conv over the carried window,
 * then the gated delta rule position by position per value head over S [dk, dv]. As in
 * ssm.c the scan is the exact recurrence rather than the chunked (WY) form, so a prompt
 * split anywhere equals decode; its cost per token is nv·dk·dv, small next to the
 * projections. Value heads run on the pool when the scan is large enough.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine_int.h"

size_t eng_deltanet_state_floats(const eng_deltanet *L)
{
    return (size_t)L->v_heads * L->k_dim * L->v_dim;
}

typedef struct scan {
    const eng_deltanet *L;
    const float *qkv, *gb;  /* conv outputs [n, 2·nk·dk + nv·dv]; [n, nv] (g, β) pairs */
    float *st, *o;          /* S [nv, dk, dv]; o [n, nv·dv] */
    int n;
} scan;

/* x · rsqrt(Σx² + 1e-6) · scale, into out */
static void l2norm(const float *x, int d, float scale, float *out)
{
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss + 1e-6)) * scale;
    for (int i = 0; i < d; i++) out[i] = x[i] * inv;
}

static void scan_heads(void *ctx, int part, int parts)
{
    const scan *s = ctx;
    const eng_deltanet *L = s->L;
    const int nk = L->k_heads, nv = L->v_heads, dk = L->k_dim, dv = L->v_dim;
    const int C = 2 * nk * dk + nv * dv, r = nv / nk;
    const float qscale = 1.0f / sqrtf((float)dk);
    float q[dk], k[dk], delta[dv];
    int lo, hi;
    eng_split(nv, part, parts, 1, &lo, &hi);
    for (int h = lo; h < hi; h++) {
        const int kh = h / r;
        float *S = s->st + (size_t)h * dk * dv;
        for (int t = 0; t < s->n; t++) {
            const float *row = s->qkv + (size_t)t * C;
            l2norm(row + (size_t)kh * dk, dk, qscale, q);
            l2norm(row + (size_t)(nk + kh) * dk, dk, 1.0f, k);
            const float *v = row + (size_t)2 * nk * dk + (size_t)h * dv;
            const float decay = expf(s->gb[((size_t)t * nv + h) * 2]);
            const float beta = s->gb[((size_t)t * nv + h) * 2 + 1];
            for (int j = 0; j < dv; j++) delta[j] = 0;
            for (int i = 0; i < dk; i++) {
                float *Si = S + (size_t)i * dv;
                for (int j = 0; j < dv; j++) {
                    Si[j] *= decay;
                    delta[j] += Si[j] * k[i];
                }
            }
            for (int j = 0; j < dv; j++) delta[j] = beta * (v[j] - delta[j]);
            float *o = s->o + (size_t)t * nv * dv + (size_t)h * dv;
            for (int j = 0; j < dv; j++) o[j] = 0;
            for (int i = 0; i < dk; i++) {
                float *Si = S + (size_t)i * dv;
                for (int j = 0; j < dv; j++) {
                    Si[j] += k[i] * delta[j];
                    o[j] += Si[j] * q[i];
                }
            }
        }
    }
}

int eng_deltanet_run(const eng_deltanet *L, const float *h, int n, float *conv_win,
                     float *state, float *out, vx_err *err)
{
    const int nk = L->k_heads, nv = L->v_heads, dk = L->k_dim, dv = L->v_dim, r = nv / nk;
    const int C = 2 * nk * dk + nv * dv, V = nv * dv, Pq = L->in_qkvz.rows, Pb = L->in_ba.rows;
    const size_t per = (size_t)Pq + Pb + 2 * (size_t)C + V + 2 * (size_t)nv + V;
    float *pq = malloc((size_t)n * per * sizeof *pq);
    if (!pq) return vx_errf(err, VX_ENOMEM, "out of memory for the deltanet mixer (%d positions)", n);
    float *pb = pq + (size_t)n * Pq, *mixed = pb + (size_t)n * Pb, *qkv = mixed + (size_t)n * C;
    float *z = qkv + (size_t)n * C, *gb = z + (size_t)n * V, *o = gb + (size_t)n * 2 * nv;
    const eng_w *in2[2] = {&L->in_qkvz, &L->in_ba};
    float *const out2[2] = {pq, pb};
    eng_matmul_shared(in2, 2, h, n, out2);
    const int gq = 2 * dk + 2 * r * dv;
    for (int t = 0; t < n; t++) {
        const float *src = pq + (size_t)t * Pq, *ba = pb + (size_t)t * Pb;
        float *mx = mixed + (size_t)t * C, *zt = z + (size_t)t * V, *g = gb + (size_t)t * 2 * nv;
        for (int j = 0; j < nk; j++) {
            const float *grp = src + (size_t)j * gq;
            memcpy(mx + (size_t)j * dk, grp, (size_t)dk * sizeof *mx);
            memcpy(mx + (size_t)(nk + j) * dk, grp + dk, (size_t)dk * sizeof *mx);
            memcpy(mx + (size_t)2 * nk * dk + (size_t)j * r * dv, grp + 2 * dk,
                   (size_t)r * dv * sizeof *mx);
            memcpy(zt + (size_t)j * r * dv, grp + 2 * dk + r * dv, (size_t)r * dv * sizeof *zt);
            for (int i = 0; i < r; i++) {
                const int hv = j * r + i;
                const float b = ba[(size_t)j * 2 * r + i], a = ba[(size_t)j * 2 * r + r + i];
                g[2 * hv] = L->a[hv] * eng_softplus(a + L->dt_bias[hv]);
                g[2 * hv + 1] = 1.0f / (1.0f + expf(-b));
            }
        }
    }
    eng_conv_run(&L->conv, conv_win, mixed, (size_t)C, n, qkv);
    scan sc = {L, qkv, gb, state, o, n};
    if ((size_t)n * nv * dk * dv < 65536) scan_heads(&sc, 0, 1);
    else eng_parallel(scan_heads, &sc);
    eng_gated_norm(&L->norm, o, z, n * nv, 0);
    eng_matmul(&L->out_proj, o, n, out);
    free(pq);
    return 0;
}
