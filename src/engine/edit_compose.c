/*
 * edit_compose.c — INSERT … MODE COMPOSE's numerics (edit_compose.h): reference norms,
 * the gate orthogonalised against decoys and peers, the balancing and the cross-fact check.
 */
#include "edit_compose.h"
#include "edit_memit.h"
#include "engine_int.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The fixed decoys the reference captures beside its template decoys. */
static const char *const compose_fixed[] = {
    "Once upon a time", "The quick brown fox", "In the beginning", "Hello, my name is",
    "The weather today is", "I think that", "It was a dark and stormy night",
    "The best way to", "Water is made of", "My favorite food is",
};
#define COMPOSE_TEMPLATE 10
#define COMPOSE_BALANCE 16
#define COMPOSE_CROSS 8

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static double norm2(const float *x, int n)
{
    double q = 0;
    for (int i = 0; i < n; i++)
        q += (double)x[i] * x[i];
    return sqrt(q);
}

/* x scaled to length len (left as it is when zero). */
static void set_len(float *x, int n, double len)
{
    double q = norm2(x, n);
    for (int i = 0; q > 0 && i < n; i++)
        x[i] = (float)(x[i] / q * len);
}

/* The FFN input at layer of text's last position into x [H]; logits may be NULL. */
static int text_ffn_in(eng_model *m, int layer, const char *text, float *x, float *logits,
                       vx_err *ve)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = eng_tok_encode(eng_model_tokenizer(m), text, strlen(text), 1, &ids, &n, ve) ||
             eng_edit_ffn_in(m, layer, ids, (int)n, x, logits, ve);
    free(ids);
    return rc ? -1 : 0;
}

/* p(tid) after prompt through m as it is now (its overlay attached). The pass captures at
 * the install layer, already checked: any other layer may be one it cannot capture at. */
static int prompt_p(eng_model *m, int layer, const char *prompt, int32_t tid,
                    float *scratch_h, float *logits, float *p, vx_err *ve)
{
    if (text_ffn_in(m, layer, prompt, scratch_h, logits, ve))
        return -1;
    *p = eng_edit_p(logits, eng_model_vocab(m), tid);
    return 0;
}

/* Row norms medians of the first 100 features of a layer's gate and up rows and down
 * columns (base weights, read through their bindings, so quantised ones too). */
static int compose_refs(const eng_model *m, int layer, int F, int H, float ref[3],
                        vx_err *ve)
{
    if (!eng_edit_gate_ok(m, layer))
        return vx_errf(ve, VX_EUNSUPPORTED, "MODE COMPOSE installs a gated FFN feature: "
                       "layer %d has no gated dense FFN without biases", layer);
    const eng_mlp *b = &m->layers[layer].mlp;
    const eng_w *w[3] = {&b->gate, &b->up, &b->down};
    int n = F < 100 ? F : 100;
    float *nv = malloc((size_t)n * sizeof *nv);
    if (!nv)
        return vx_errf(ve, VX_ENOMEM, "out of memory");
    for (int r = 0; r < 3; r++) {
        for (int f = 0; f < n; f++) {
            double q = 0;
            for (int k = 0; k < H; k++) {
                double v = r < 2 ? eng_w_at(w[r], f, k) : eng_w_at(w[r], k, f);
                q += v * v;
            }
            nv[f] = (float)sqrt(q);
        }
        ref[r] = median(nv, n);
    }
    free(nv);
    return 0;
}

/* Modified Gram-Schmidt: x made orthogonal to the n rows of basis (each [H]), which are
 * orthonormalised in place first (rows that vanish are dropped). */
static void mgs(float *basis, int n, float *x, int H)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        float *b = basis + (size_t)i * H;
        for (int j = 0; j < k; j++) {
            const float *q = basis + (size_t)j * H;
            double d = 0;
            for (int h = 0; h < H; h++)
                d += (double)b[h] * q[h];
            for (int h = 0; h < H; h++)
                b[h] -= (float)(d * q[h]);
        }
        double nb = norm2(b, H);
        if (nb < 1e-6)
            continue;
        float *dst = basis + (size_t)k * H;
        for (int h = 0; h < H; h++)
            dst[h] = (float)(b[h] / nb);
        k++;
    }
    for (int j = 0; j < k; j++) {
        const float *q = basis + (size_t)j * H;
        double d = 0;
        for (int h = 0; h < H; h++)
            d += (double)x[h] * q[h];
        for (int h = 0; h < H; h++)
            x[h] -= (float)(d * q[h]);
    }
}

/* INSERT … MODE COMPOSE's feature (edit_compose.h). */
int eng_compose(eng_model *m, const eng_compose_opts *o, eng_compose_out *out, vx_err *err)
{
    const int H = eng_model_hidden(m), V = eng_model_vocab(m), layer = o->layer;
    const int slot = o->slot;
    const int32_t tid = o->target;
    const double alpha = o->alpha;
    const float *temb = o->temb;
    const int F = eng_model_ffn_features(m, layer);
    const eng_overlay *cur = m->overlay;
    const int nfix = (int)(sizeof compose_fixed / sizeof *compose_fixed);
    size_t ne = cur ? cur->n_edits : 0;
    vx_err ve = {0};
    memset(out, 0, sizeof *out);
    char *prompt = eng_edit_prompt(o->relation, o->entity);
    float *x = malloc((size_t)H * sizeof *x), *logits = malloc((size_t)V * sizeof *logits);
    float *scratch = malloc((size_t)H * sizeof *scratch);
    float *vec = calloc((size_t)H * 3, sizeof *vec);   /* gate, up, down */
    float *vec_best = calloc((size_t)H, sizeof *vec_best);   /* the best down */
    float *basis = malloc((size_t)(nfix + COMPOSE_TEMPLATE + (int)ne + 1) * H * sizeof *basis);
    eng_feature_edit *ed = malloc((ne + 1) * sizeof *ed);
    int rc = -1, nb = 0, steps = 0, cross = 0;
    float ref[3], p_before = 0, p = 0, best_p = -1;
    out->gate = vec;
    if (!prompt || !x || !logits || !scratch || !vec || !vec_best || !basis || !ed) {
        vx_errf(&ve, VX_ENOMEM, "out of memory");
        goto fail;
    }
    float *gate = vec, *up = vec + H, *down = vec + 2 * H, *best = vec_best;
    out->up = up;
    out->down = down;
    /* 1. capture: the canonical prompt's FFN input and the decoys' (effective model) */
    if (compose_refs(m, layer, F, H, ref, &ve) ||
        text_ffn_in(m, layer, prompt, x, logits, &ve))
        goto fail;
    p_before = eng_edit_p(logits, V, tid);
    for (int i = 0; i < nfix; i++)
        if (text_ffn_in(m, layer, compose_fixed[i], basis + (size_t)nb++ * H, NULL, &ve))
            goto fail;
    /* the template decoys: the canonical prompt around vocabulary words (as the MEMIT
     * decoys) captured at the FFN input */
    size_t Vt = eng_tok_vocab_size(eng_model_tokenizer(m));
    for (size_t id = 0, got = 0; id < Vt && id < 5000 && got < COMPOSE_TEMPLATE; id++) {
        const char *piece = eng_tok_piece(eng_model_tokenizer(m), (int32_t)id);
        const char *w = piece && (!strncmp(piece, "\xc4\xa0", 2) || !strncmp(piece,
                                  "\xe2\x96\x81", 3)) ? piece + (piece[0] == '\xc4' ? 2 : 3)
                                                      : NULL;
        size_t k = 0;
        while (w && isalpha((unsigned char)w[k]))
            k++;
        if (!w || k < 3 || w[k] || strcasecmp(w, o->entity) == 0)
            continue;
        char *dp = eng_edit_prompt(o->relation, w);
        int bad = !dp || text_ffn_in(m, layer, dp, basis + (size_t)nb * H, NULL, &ve);
        free(dp);
        if (bad)
            goto fail;
        nb++;
        got++;
    }
    /* peers: the gates already installed at this layer */
    for (size_t i = 0; i < ne; i++)
        if (cur->edits[i].layer == layer && cur->edits[i].gate)
            memcpy(basis + (size_t)nb++ * H, cur->edits[i].gate, (size_t)H * sizeof *basis);
    /* 3-4. vectors, the gate refined against decoys and peers */
    memcpy(gate, x, (size_t)H * sizeof *gate);
    mgs(basis, nb, gate, H);
    set_len(gate, H, ref[0] * 30.0);
    memcpy(up, x, (size_t)H * sizeof *up);
    set_len(up, H, ref[1]);
    memcpy(down, temb, (size_t)H * sizeof *down);
    set_len(down, H, ref[2] * alpha);
    /* 5. balance on the canonical prompt, with the install attached */
    if (ne)
        memcpy(ed, cur->edits, ne * sizeof *ed);
    ed[ne] = (eng_feature_edit){layer, slot, 0, gate, up, down};
    eng_overlay trial = {ed, ne + 1, cur ? cur->lowrank : NULL, cur ? cur->n_lowrank : 0,
                         NULL, 0};
    eng_model_set_overlay(m, &trial);
    int stale = 0;
    for (steps = 1; steps <= COMPOSE_BALANCE; steps++) {
        if (prompt_p(m, layer, prompt, tid, scratch, logits, &p, &ve))
            break;
        if (p > best_p) {
            best_p = p;
            memcpy(best, down, (size_t)H * sizeof *best);
            stale = 0;
        } else if (++stale >= 2) {
            memcpy(down, best, (size_t)H * sizeof *down);
            p = best_p;
            break;
        }
        if (p > 0.95f)
            set_len(down, H, norm2(down, H) * 0.7);
        else if (p < 0.30f)
            set_len(down, H, norm2(down, H) * 1.6);
        else
            break;
    }
    /* 6. cross-fact: a recent install pushed below p 0.20 shrinks this one */
    for (cross = 0; !ve.msg[0] && cross < COMPOSE_CROSS; cross++) {
        int low = 0;
        float q = 0;
        for (int i = 0; i < o->n_recent && !low; i++) {
            if (prompt_p(m, layer, o->recent[i].prompt, o->recent[i].tid, scratch, logits,
                         &q, &ve))
                break;
            low = q < 0.20f;
        }
        if (!low)
            break;
        set_len(down, H, norm2(down, H) * 0.7);
    }
    if (!ve.msg[0])
        prompt_p(m, layer, prompt, tid, scratch, logits, &p, &ve);
    eng_model_set_overlay(m, cur);
    if (ve.msg[0])
        goto fail;
    out->p_before = p_before;
    out->p_after = p;
    out->steps = steps;
    memcpy(out->ref, ref, sizeof ref);
    out->norms[0] = norm2(gate, H);
    out->norms[1] = norm2(up, H);
    out->norms[2] = norm2(down, H);
    rc = 0;
fail:
    if (rc) {
        *err = ve;
        eng_compose_out_free(out);
    }
    free(prompt);
    free(x);
    free(logits);
    free(scratch);
    free(vec_best);
    free(basis);
    free(ed);
    return rc;
}

void eng_compose_out_free(eng_compose_out *out)
{
    free(out->gate);
    out->gate = out->up = out->down = NULL;
}
