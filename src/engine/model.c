/*
 * model.c — eng_model: bind (plan + operands + tokenizer snapshot), accessors, the
 * overlay attachment and the logit lens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "engine_int.h"

/* Bind; with borrow set, tok (possibly NULL) is used instead of loading the snapshot. */
static int bind(vx_container *c, int borrow, const eng_tokenizer *tok, eng_model **out,
                vx_err *err)
{
    *out = NULL;
    if (!c) return vx_errf(err, VX_EARG, "eng_model_bind: no container");
    eng_model *m = calloc(1, sizeof *m);
    if (!m) return vx_errf(err, VX_ENOMEM, "out of memory binding the model");
    m->c = c;
    if (eng_plan_build(m, err)) { eng_model_free(m); return -1; }
    if (borrow) {
        m->tok = tok;
        *out = m;
        return 0;
    }
    /* the tokenizer snapshot is optional: a container without one still runs on ids */
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer.json", vx_dir(c)) < (int)sizeof path &&
        access(path, F_OK) == 0 &&
        (vx_snapshot_check(c, NULL, err) || eng_tok_load_dir(vx_dir(c), &m->own_tok, err))) {
        eng_model_free(m);
        return -1;
    }
    m->tok = m->own_tok;
    *out = m;
    return 0;
}

int eng_model_bind(vx_container *c, eng_model **out, vx_err *err)
{
    return bind(c, 0, NULL, out, err);
}

int eng_model_bind_tok(vx_container *c, const eng_tokenizer *tok, eng_model **out,
                       vx_err *err)
{
    return bind(c, 1, tok, out, err);
}

void eng_model_free(eng_model *m)
{
    if (!m) return;
    eng_plan_free(m);
    eng_tok_free(m->own_tok);
    free(m);
}

const vx_container *eng_model_container(const eng_model *m) { return m->c; }
const eng_tokenizer *eng_model_tokenizer(const eng_model *m) { return m->tok; }
int eng_model_layers(const eng_model *m) { return m->n_layers; }
int eng_model_hidden(const eng_model *m) { return m->hidden; }
int eng_model_vocab(const eng_model *m) { return m->vocab; }
int eng_model_context(const eng_model *m) { return m->ctx; }
float eng_model_embed_scale(const eng_model *m) { return m->embed_scale; }

int eng_model_ffn_features(const eng_model *m, int layer)
{
    if (layer < 0 || layer >= m->n_layers) return 0;
    return m->layers[layer].moe ? m->experts * m->expert_inter : m->inter;
}

int eng_model_top_k(const eng_model *m)
{
    return m->moe_on ? m->top_k : 0;
}

int eng_model_expert_features(const eng_model *m)
{
    return m->moe_on ? m->expert_inter : 0;
}

int32_t eng_model_eos(const eng_model *m, int i)
{
    return i >= 0 && i < m->n_eos ? m->eos[i] : -1;
}

void eng_model_set_overlay(eng_model *m, const eng_overlay *ov)
{
    m->overlay = ov;
}

void eng_lens_rows(const eng_model *m, const float *resid, int n, float *normed, float *logits)
{
    const float *x = resid;
    if (m->final_norm.width) {
        eng_norm_apply(&m->final_norm, resid, normed, n);
        x = normed;
    }
    eng_matmul(&m->lm_head, x, n, logits);
    const size_t all = (size_t)n * m->vocab;
    if (m->final_softcap > 0)
        for (size_t i = 0; i < all; i++) logits[i] = eng_softcap(logits[i], m->final_softcap);
    if (m->logits_divisor != 1.0f)
        for (size_t i = 0; i < all; i++) logits[i] /= m->logits_divisor;
}

void eng_lens(const eng_model *m, const float *resid, float *logits)
{
    float h[m->hidden];
    eng_lens_rows(m, resid, 1, h, logits);
}
