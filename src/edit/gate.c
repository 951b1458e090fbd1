/*
 * gate.c — the probe gate COMPILE and COMPACT publish through (edit.h): the same prompts run
 * through the source (its overlay attached) and the written container — INFER logits,
 * TRACE lens of every layer, WALK hits and the edited features' down-meta must agree
 * within a tolerance set by how the written tensors are stored.
 */
#include "ed_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a probe reads: the next-token logits and the logit lens of the last position's
 * residual after every layer (TRACE's lens). */
typedef struct probe_read {
    float *logits;            /* [vocab] */
    float *resid;             /* [layers × hidden] */
    float *lens;              /* [layers × vocab] */
} probe_read;

/* Run prompt through m: logits and lens into p (buffers the caller sized). */
static int probe_run(eng_model *m, const char *prompt, probe_read *p, vx_err *ve)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = eng_tok_encode(eng_model_tokenizer(m), prompt, strlen(prompt), 1, &ids, &n, ve) ||
             ed_last_residuals(m, ids, n, p->resid, p->logits, ve);
    free(ids);
    const int L = eng_model_layers(m), H = eng_model_hidden(m), V = eng_model_vocab(m);
    for (int l = 0; l < L && rc == 0; l++)
        eng_lens(m, p->resid + (size_t)l * H, p->lens + (size_t)l * V);
    return rc ? -1 : 0;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static double max_absdiff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* Every feature the overlay gives metadata or a tombstone must read the same (presence,
 * top token, c_score) in the compiled container as through the overlay. */
static void meta_compare(const brw_model *ma, const eng_overlay *ova, const brw_model *mb,
                         char *bad, size_t nbad)
{
    const size_t nm = ova ? ova->n_meta : 0, ne = ova ? ova->n_edits : 0;
    for (size_t i = 0; i < nm + ne && !bad[0]; i++) {
        int layer = i < nm ? ova->meta[i].layer : ova->edits[i - nm].layer;
        int64_t f = i < nm ? ova->meta[i].feature : ova->edits[i - nm].feature;
        if (i >= nm && !ova->edits[i - nm].tombstone)
            continue;
        brw_meta a, b;
        brw_feature_meta(ma, ova, layer, f, &a);
        brw_feature_meta(mb, NULL, layer, f, &b);
        if (a.present != b.present || (a.present && (a.top_id != b.top_id ||
                                                     a.c_score != b.c_score)))
            snprintf(bad, nbad, "down-meta of layer %d feature %lld: %s %d (%.4g) vs %s %d "
                     "(%.4g)", layer, (long long)f, a.present ? "token" : "none", a.top_id,
                     a.c_score, b.present ? "token" : "none", b.top_id, b.c_score);
    }
}

static int tombstoned(const eng_overlay *ov, int layer, int64_t f)
{
    for (size_t i = 0; ov && i < ov->n_edits; i++)
        if (ov->edits[i].tombstone && ov->edits[i].layer == layer && ov->edits[i].feature == f)
            return 1;
    return 0;
}

/* WALK top 10 per layer on both sides. The compiled container cannot drop a tombstoned
 * feature of a plain MLP from its scan (its gate row stays; its down column is zero), so
 * such hits are skipped on the compiled side. Hit ranks may differ only where the scores
 * tie within tol; the largest score difference at equal ranks goes to *d. */
static int walk_compare(const brw_model *ma, const eng_overlay *ova, const brw_model *mb,
                        const eng_overlay *tomb, const char *prompt, double tol, double *d,
                        char *bad, size_t nbad, vx_err *ve)
{
    brw_walk wa = {0}, wb = {0};
    brw_walk_opts oa = {.top = 10, .layer_lo = -1, .layer_hi = -1, .ov = ova};
    brw_walk_opts ob = {.top = 10 + 8, .layer_lo = -1, .layer_hi = -1, .ov = NULL};
    int rc = brw_walk_run(ma, prompt, &oa, &wa, ve) || brw_walk_run(mb, prompt, &ob, &wb, ve);
    for (int l = 0; l < wa.n_layers && l < wb.n_layers && rc == 0; l++) {
        const brw_hit *ha = wa.hits + (size_t)l * wa.top, *hb = wb.hits + (size_t)l * wb.top;
        int k = 0;
        for (int j = 0; j < wb.counts[l] && k < wa.counts[l]; j++) {
            if (tombstoned(tomb, wb.layers[l], hb[j].feature))
                continue;
            double sd = fabs((double)ha[k].score - hb[j].score);
            *d = fmax(*d, sd);
            int found = 0;
            for (int i = 0; i < wa.counts[l] && !found; i++)
                found = ha[i].feature == hb[j].feature &&
                        fabs((double)ha[i].score - hb[j].score) <= tol;
            int cutoff = fabs((double)hb[j].score - ha[wa.counts[l] - 1].score) <= tol;
            if ((sd > tol || (ha[k].feature != hb[j].feature && !found && !cutoff)) && !bad[0])
                snprintf(bad, nbad, "WALK \"%s\" layer %d rank %d: feature %lld (%.4g) vs "
                         "%lld (%.4g)", prompt, wa.layers[l], k + 1, (long long)ha[k].feature,
                         ha[k].score, (long long)hb[j].feature, hb[j].score);
            k++;
        }
        if (k < wa.counts[l] && !bad[0])
            snprintf(bad, nbad, "WALK \"%s\" layer %d: %d hits vs %d", prompt, wa.layers[l],
                     wa.counts[l], k);
    }
    brw_walk_free(&wa);
    brw_walk_free(&wb);
    return rc ? -1 : 0;
}

/* One more row of g. */
static ed_probe_row *probe_row(ed_gate *g)
{
    ed_probe_row *nr = realloc(g->rows, (g->n_rows + 1) * sizeof *nr);
    if (!nr)
        return NULL;
    g->rows = nr;
    return &g->rows[g->n_rows++];
}

int ed_gate_run(eng_model *m, const char *out, const char *const *prompts, int np, ed_gate *g,
                ed_err *e)
{
    vx_container *c2 = NULL;
    eng_model *m2 = NULL;
    brw_model *b2 = NULL;
    vx_err ve = {0};
    /* bound as the session is: the compiled container carries the same profiles */
    if (vx_open_profile(out, vx_profile(eng_model_container(m)), NULL, 0, &c2, &ve) ||
        eng_model_bind(c2, &m2, &ve) ||
        (g->bm && brw_open_tok(c2, eng_model_tokenizer(m2), &b2, &ve))) {
        eng_model_free(m2);
        vx_close(c2);
        e->vx = ve;
        e->at = ED_AT_OUTPUT;
        return -1;
    }
    const size_t V = (size_t)eng_model_vocab(m), L = (size_t)eng_model_layers(m),
                 H = (size_t)eng_model_hidden(m);
    probe_read pa = {malloc(V * sizeof(float)), malloc(L * H * sizeof(float)),
                     malloc(L * V * sizeof(float))};
    probe_read pb = {malloc(V * sizeof(float)), malloc(L * H * sizeof(float)),
                     malloc(L * V * sizeof(float))};
    g->ran = 1;
    g->logit = g->lens = g->walk = g->scale = 0;
    g->walk_bad[0] = g->meta_bad[0] = '\0';
    if (g->bm)
        meta_compare(g->bm, g->ov, b2, g->meta_bad, sizeof g->meta_bad);
    int rc = 0;
    if (!pa.logits || !pa.resid || !pa.lens || !pb.logits || !pb.resid || !pb.lens)
        rc = vx_errf(&e->vx, VX_ENOMEM, "out of memory");
    else if (eng_model_layers(m2) != (int)L || eng_model_vocab(m2) != (int)V ||
             eng_model_hidden(m2) != (int)H)
        rc = vx_errf(&e->vx, VX_EFORMAT, "'%s' has %d layers, hidden %d, vocabulary %d; the "
                     "bound model has %zu, %zu, %zu", out, eng_model_layers(m2),
                     eng_model_hidden(m2), eng_model_vocab(m2), L, H, V);
    for (int i = 0; i < np && rc == 0; i++) {
        if (vx_cancel_flag) {   /* a probe is a few forward passes: asked between them */
            rc = vx_errf(&e->vx, VX_ECANCEL, "cancelled");
            break;
        }
        if (probe_run(m, prompts[i], &pa, &ve) || probe_run(m2, prompts[i], &pb, &ve)) {
            e->vx = ve;
            rc = -1;
            break;
        }
        double sc = 0, wd = 0;
        for (size_t v = 0; v < V; v++)
            sc = fmax(sc, fabs((double)pa.logits[v]));
        g->scale = fmax(g->scale, sc);
        /* WALK scores are judged in the unit of this prompt's logits */
        if (g->bm && walk_compare(g->bm, g->ov, b2, g->ov, prompts[i], g->rel * fmax(sc, 1.0),
                                  &wd, g->walk_bad, sizeof g->walk_bad, &ve)) {
            e->vx = ve;
            rc = -1;
            break;
        }
        double dl = max_absdiff(pa.logits, pb.logits, V);
        double dn = max_absdiff(pa.lens, pb.lens, L * V);
        g->logit = fmax(g->logit, dl);
        g->lens = fmax(g->lens, dn);
        g->walk = fmax(g->walk, wd);
        ed_probe_row *row = probe_row(g);
        /* the top tokens as text (" Paris"), as INFER shows them, not vocabulary pieces */
        const int32_t ia = argmax(pa.logits, (int)V), ib = argmax(pb.logits, (int)V);
        char *ta = NULL, *tb = NULL;
        vx_err de;
        size_t na, nb;
        if (eng_tok_decode_after(eng_model_tokenizer(m), &ia, 1, 0, &ta, &na, &de) < 0)
            ta = NULL;
        if (eng_tok_decode_after(eng_model_tokenizer(m2), &ib, 1, 0, &tb, &nb, &de) < 0)
            tb = NULL;
        if (row)
            *row = (ed_probe_row){strdup(prompts[i]), "", "", dl, dn, wd, !ta, !tb};
        if (row && row->prompt) {
            snprintf(row->top_a, sizeof row->top_a, "%s", ta ? ta : "");
            snprintf(row->top_b, sizeof row->top_b, "%s", tb ? tb : "");
        }
        free(ta);
        free(tb);
        if (!row || !row->prompt) {
            rc = vx_errf(&e->vx, VX_ENOMEM, "out of memory");
            break;
        }
    }
    free(pa.logits);
    free(pa.resid);
    free(pa.lens);
    free(pb.logits);
    free(pb.resid);
    free(pb.lens);
    brw_close(b2);
    eng_model_free(m2);
    vx_close(c2);
    return rc;
}

void ed_gate_free(ed_gate *g)
{
    for (size_t i = 0; i < g->n_rows; i++)
        free(g->rows[i].prompt);
    free(g->rows);
    g->rows = NULL;
    g->n_rows = 0;
}

/* The gate's tolerance relative to the logit scale, from the dtypes of the tensors COMPILE
 * rewrote: 1e-5 when all are f32 (exact materialisation; what remains is summation order),
 * looser where COMPILE rounds the edited tensors once (f16 keeps 11 significant bits, bf16
 * 8; a block-quantised tensor's edited blocks are quantised again: q8_0 rounds each weight
 * to 1/254 of its block's largest magnitude, 4-bit codecs to about 1/30). */
double ed_gate_tolerance(const ed_compile_report *rep, const char **why)
{
    static const struct { unsigned mask; double rel; const char *why; } tols[] = {
        {1u << VX_Q4_0 | 1u << VX_Q4_K | 1u << VX_MXFP4, 2e-1, "2e-1 (4-bit block storage)"},
        {1u << VX_Q6_K, 1e-1, "1e-1 (q6_k storage)"},
        {1u << VX_Q8_0, 1e-2, "1e-2 (q8_0 storage)"},
        {1u << VX_BF16, 2e-2, "2e-2 (bf16 storage)"},
        {1u << VX_F16, 2e-3, "2e-3 (f16 storage)"},
    };
    for (size_t i = 0; i < sizeof tols / sizeof *tols; i++)
        if (rep->dtypes & tols[i].mask) {
            *why = tols[i].why;
            return tols[i].rel;
        }
    *why = "1e-5 (f32 storage)";
    return 1e-5;
}

