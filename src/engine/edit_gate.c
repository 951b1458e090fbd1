/*
 * edit_gate.c — a fact as one gated FFN feature that fires on its prompt alone (method
 * and shapes in edit_gate.h): the gate row is a max-margin separator of the prompt's FFN
 * input from the negatives', the down column carries the optimised δ.
 */
#include "edit_gate.h"
#include "edit_memit.h"
#include "engine_int.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* LAPACK (OpenBLAS): solve a symmetric positive definite system. */
extern void dposv_(const char *uplo, const int *n, const int *nrhs, double *a, const int *lda,
                   double *b, const int *ldb, int *info, size_t uplo_len);

int eng_edit_gate_ok(const eng_model *m, int layer)
{
    vx_err e = {0};
    if (eng_edit_check_layer(m, layer, &e))
        return 0;
    const eng_mlp *b = &m->layers[layer].mlp;
    return b->gate.data && !b->gate_b && !b->up_b;
}

void eng_gate_slot_free(eng_gate_slot *s)
{
    if (!s)
        return;
    free(s->gate);
    free(s->para_ids);
    free(s->para_lens);
    free(s->para_ratio);
    s->gate = s->up = s->down = s->para_ratio = NULL;
    s->para_ids = NULL;
    s->para_lens = NULL;
}

void eng_edit_gate_down(const eng_model *m, int layer, eng_gate_slot *s, const float *delta)
{
    const eng_mlp *b = &m->layers[layer].mlp;
    for (int h = 0; h < m->hidden; h++)
        s->down[h] = (delta[h] + s->a_old * eng_w_at(&b->down, h, s->feature)) / s->a_prompt;
}

/* Negatives X [n × H] and positives P [np × H]: the L2-SVM without bias,
 *   min ½‖g‖² + C Σ_i c_i max(0, 1 − y_i g·x_i)²,
 * each positive (y +1) weighted as all negatives (y −1) together, by Newton steps on the
 * active set (the objective is convex and piecewise quadratic: a step is exact on its
 * piece; backtracking keeps it descending across pieces). g [H] out. */
static int fit_gate(const float *X, int64_t n, const float *P, int np, int H, float *g,
                    vx_err *err)
{
    const double C = 1e3 / (double)(n + np);
    const double cp = (double)n;
    double *A = malloc((size_t)H * H * sizeof *A), *b = malloc((size_t)H * sizeof *b);
    double *gd = calloc((size_t)H, sizeof *gd);
    float *Af = malloc((size_t)H * H * sizeof *Af), *act = malloc((size_t)(n + np) * H * sizeof *act);
    int rc = -1;
    if (!A || !b || !gd || !Af || !act) {
        vx_errf(err, VX_ENOMEM, "out of memory fitting a gate");
        goto done;
    }
    double obj = INFINITY;
    for (int it = 0; it < 40; it++) {
        /* the active rows (margin violated), each scaled by √(2C c_i) */
        int64_t na = 0;
        memset(b, 0, (size_t)H * sizeof *b);
        for (int64_t i = 0; i < n + np; i++) {
            const float *x = i < n ? X + (size_t)i * H : P + (size_t)(i - n) * H;
            const double y = i < n ? -1.0 : 1.0, c = i < n ? 1.0 : cp;
            double d = 0;
            for (int h = 0; h < H; h++)
                d += gd[h] * x[h];
            if (y * d >= 1)
                continue;
            const float s = (float)sqrt(2 * C * c);
            for (int h = 0; h < H; h++) {
                act[(size_t)na * H + h] = s * x[h];
                b[h] += 2 * C * c * y * x[h];
            }
            na++;
        }
        if (na == 0)
            break;
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, H, (int)na, 1.0f, act, H, 0.0f, Af, H);
        for (int i = 0; i < H; i++)
            for (int j = i; j < H; j++)
                A[(size_t)i * H + j] = A[(size_t)j * H + i] = Af[(size_t)i * H + j] + (i == j);
        int nn = H, one = 1, info = 0;
        dposv_("U", &nn, &one, A, &nn, b, &nn, &info, 1);
        if (info) {
            vx_errf(err, VX_EUNSUPPORTED, "the gate's Newton system is singular (LAPACK info %d)",
                    info);
            goto done;
        }
        /* backtrack along gd → b until the objective decreases */
        double t = 1, best = INFINITY;
        for (int bt = 0; bt < 30; bt++, t *= 0.5) {
            double o = 0;
            for (int h = 0; h < H; h++) {
                double v = gd[h] + t * (b[h] - gd[h]);
                o += 0.5 * v * v;
            }
            for (int64_t i = 0; i < n + np; i++) {
                const float *x = i < n ? X + (size_t)i * H : P + (size_t)(i - n) * H;
                const double y = i < n ? -1.0 : 1.0, c = i < n ? 1.0 : cp;
                double d = 0;
                for (int h = 0; h < H; h++)
                    d += (gd[h] + t * (b[h] - gd[h])) * x[h];
                if (y * d < 1)
                    o += C * c * (1 - y * d) * (1 - y * d);
            }
            best = o;
            if (o < obj)
                break;
        }
        if (!(best < obj * (1 - 1e-9)))
            break;
        obj = best;
        for (int h = 0; h < H; h++)
            gd[h] += t * (b[h] - gd[h]);
    }
    for (int h = 0; h < H; h++)
        g[h] = (float)gd[h];
    rc = 0;
done:
    free(A);
    free(b);
    free(gd);
    free(Af);
    free(act);
    return rc;
}

/* The fact asked in other words, the gate's further positives: fixed templates ({r} the
 * relation, {e} the entity), none of them a paraphrase the tests measure. */
static const char *const para_style[] = {
    "The {r} of {e} was",
    "What is the {r} of {e}? It is",
    "In {e}, the {r} is",
    "The {r} of {e}, as everyone knows, is",
    "{e} is known for its {r}, which is",
};

/* A template with {r} and {e} filled in (relation's '-' and '_' as spaces), malloc'd. */
static char *fill(const char *tpl, const char *relation, const char *entity)
{
    size_t n = strlen(tpl) + 2 * (strlen(relation) + strlen(entity)) + 1, k = 0;
    char *out = malloc(n);
    for (const char *c = tpl; out && *c; c++) {
        const char *w = !strncmp(c, "{r}", 3) ? relation : !strncmp(c, "{e}", 3) ? entity : NULL;
        if (!w) {
            out[k++] = *c;
            continue;
        }
        for (const char *q = w; *q; q++)
            out[k++] = w == relation && (*q == '-' || *q == '_') ? ' ' : *q;
        c += 2;
    }
    if (out)
        out[k] = 0;
    return out;
}

/* f(z)·(w·x) for the layer's activation f. */
static float feature_act(const eng_model *m, float z, float wx)
{
    eng_act(m->act, &z, 1);
    return z * wx;
}

int eng_edit_gate_fit(eng_model *m, const int32_t *ids, int n, const eng_gate_opts *o,
                      eng_gate_slot *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    const int layer = o->layer;
    if (!eng_edit_gate_ok(m, layer))
        return vx_errf(err, VX_EUNSUPPORTED, "layer %d has no gated dense FFN without biases: "
                       "a gated slot cannot be written there", layer);
    const int H = m->hidden;
    const eng_mlp *b = &m->layers[layer].mlp;
    const int F = b->inter;
    /* the slot: the unclaimed feature with the least output energy on the corpus */
    const eng_overlay *ov = m->overlay;
    double least = INFINITY;
    out->feature = -1;
    for (int f = 0; f < F; f++) {
        int claimed = 0;
        for (size_t i = 0; ov && i < ov->n_edits && !claimed; i++)
            claimed = ov->edits[i].layer == layer && ov->edits[i].feature == f;
        if (claimed)
            continue;
        double dd = 0;
        for (int r = 0; r < H; r++) {
            float w = eng_w_at(&b->down, r, f);
            dd += (double)w * w;
        }
        double energy = o->cov[(size_t)f * F + f] * dd;
        if (energy < least) {
            least = energy;
            out->feature = f;
        }
    }
    if (out->feature < 0)
        return vx_errf(err, VX_EARG, "every feature of layer %d is claimed by the overlay",
                       layer);
    float *xs = NULL, *dec = NULL, *neg = NULL, *g = NULL, *pos = NULL;
    int64_t nx = 0;
    int nd = 0, rc = -1;
    /* the prompt's FFN inputs at every position: the last is the positive, the earlier
     * ones negatives (prompts sharing the prefix see nothing) */
    int one = n;
    if (eng_edit_inputs(m, layer, ids, &one, 1, &xs, &nx, err) ||
        eng_edit_decoy_inputs(m, layer, o->relation, o->entity, o->n_decoys, &dec, &nd, err))
        goto done;
    const int64_t nneg = o->n_neg + (nx - 1) + nd + o->n_others;
    neg = malloc((size_t)(nneg + 1) * H * sizeof *neg);
    g = malloc((size_t)H * 3 * sizeof *g);
    if (!neg || !g) {
        vx_errf(err, VX_ENOMEM, "out of memory for a gated slot");
        goto done;
    }
    int64_t k = 0;
    memcpy(neg, o->neg, (size_t)o->n_neg * H * sizeof *neg);
    k += o->n_neg;
    memcpy(neg + (size_t)k * H, xs, (size_t)(nx - 1) * H * sizeof *neg);
    k += nx - 1;
    memcpy(neg + (size_t)k * H, dec, (size_t)nd * H * sizeof *neg);
    k += nd;
    for (int i = 0; i < o->n_others; i++) {
        int32_t *oi = NULL;
        size_t on = 0;
        if (eng_tok_encode(m->tok, o->others[i], strlen(o->others[i]), 1, &oi, &on, err) ||
            eng_edit_ffn_in(m, layer, oi, (int)on, neg + (size_t)k++ * H, NULL, err)) {
            free(oi);
            goto done;
        }
        free(oi);
    }
    /* positives: the prompt, then the templates followed by the target's earlier tokens */
    const int npara = o->para ? (int)(sizeof para_style / sizeof *para_style) : 0;
    pos = malloc((size_t)(npara + 1) * H * sizeof *pos);
    out->para_ids = malloc(((size_t)npara * (64 + (size_t)o->tail) + 1) * sizeof *out->para_ids);
    out->para_lens = malloc(((size_t)npara + 1) * sizeof *out->para_lens);
    out->para_ratio = malloc(((size_t)npara + 1) * sizeof *out->para_ratio);
    if (!pos || !out->para_ids || !out->para_lens || !out->para_ratio) {
        vx_errf(err, VX_ENOMEM, "out of memory for a gated slot");
        goto done;
    }
    memcpy(pos, xs + (size_t)(nx - 1) * H, (size_t)H * sizeof *pos);
    size_t at = 0;
    for (int i = 0; i < npara; i++) {
        char *t = fill(para_style[i], o->relation, o->entity);
        int32_t *pi = NULL;
        size_t pn = 0;
        int32_t *all = NULL;
        int bad = !t || eng_tok_encode(m->tok, t, strlen(t), 1, &pi, &pn, err);
        if (!bad && pn > 64)
            bad = vx_errf(err, VX_EARG, "a paraphrase template of the fact is %zu tokens "
                          "(at most 64)", pn);
        all = bad ? NULL : out->para_ids + at;
        if (!bad) {
            memcpy(all, pi, pn * sizeof *all);
            memcpy(all + pn, ids + n - o->tail, (size_t)o->tail * sizeof *all);
            out->para_lens[i] = (int)pn + o->tail;
            at += pn + (size_t)o->tail;
            bad = eng_edit_ffn_in(m, layer, all, (int)pn + o->tail, pos + (size_t)(i + 1) * H,
                                  NULL, err);
        }
        free(t);
        free(pi);
        if (bad)
            goto done;
    }
    out->n_para = npara;
    const float *xp = pos;
    if (fit_gate(neg, k, pos, npara + 1, H, g, err))
        goto done;
    float *gate = g, *up = g + H, *down = g + 2 * H;
    cblas_sscal(H, o->margin, gate, 1);
    out->n_neg = k;
    for (int64_t i = 0; i < k; i++)
        out->n_open += cblas_sdot(H, gate, 1, neg + (size_t)i * H, 1) > -0.5f * o->margin;
    const float zp = out->z_prompt = cblas_sdot(H, gate, 1, xp, 1);
    const double xx = cblas_sdot(H, xp, 1, xp, 1);
    for (int h = 0; h < H; h++)
        up[h] = (float)(xp[h] / xx);
    const float ap = feature_act(m, zp, 1.0f);
    /* a layer too narrow to tell the prompt from ordinary text (a 64-wide random-weight
     * fixture left a third of the negatives open): the caller writes a rank-1 update */
    if (!(zp > 0.5f * o->margin) || !(ap > 0) || out->n_open * 100 > k) {
        vx_errf(err, VX_EUNSUPPORTED, "no gate at layer %d keeps the prompt on (pre-activation "
                "%.3g, wanted %.3g) and 99%% of %lld negatives off (%lld open)", layer, zp,
                o->margin, (long long)k, (long long)out->n_open);
        rc = 1;
        goto done;
    }
    /* each template's activation relative to the prompt's: the share of d it receives */
    for (int i = 0; i < npara; i++)
        out->para_ratio[i] = feature_act(m, cblas_sdot(H, gate, 1, pos + (size_t)(i + 1) * H, 1),
                                         cblas_sdot(H, up, 1, pos + (size_t)(i + 1) * H, 1)) / ap;
    /* the replaced feature's own output at the prompt is folded into d */
    double zo = 0, wo = 0;
    for (int h = 0; h < H; h++) {
        zo += (double)eng_w_at(&b->gate, out->feature, h) * xp[h];
        wo += (double)eng_w_at(&b->up, out->feature, h) * xp[h];
    }
    out->a_old = feature_act(m, (float)zo, (float)wo);
    out->a_prompt = ap;
    out->gate = g;
    out->up = up;
    out->down = down;
    g = NULL;
    rc = 0;
done:
    if (rc)
        eng_gate_slot_free(out);
    free(xs);
    free(dec);
    free(neg);
    free(pos);
    free(g);
    return rc;
}
