/*
 * exec_infer.c — INFER and the prediction part of EXPLAIN INFER: a full forward pass
 * through the engine (overlay applied when the session has one), the next-token
 * distribution as rank / token / prob, and GENERATE's continuation (greedy, or sampled
 * with TEMPERATURE / TOP_P / SEED; the default seed is 0 so a sampled run repeats).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_edit.h"
#include "interp.h"

#define DEFAULT_TOP 5

typedef struct scored { int32_t id; float p; } scored;

static int by_prob(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;          /* ties: lower id first */
}

/* Tokenize the prompt (special tokens applied, as the model sees it); an empty prompt
 * or one longer than the model's context is refused. On failure *ids is NULL. */
static int prompt_ids(lql_session *s, const lql_stmt *st, eng_model **m, int32_t **ids,
                      size_t *n, lql_err *e)
{
    if (lql_session_model(s, st, m, e) < 0) return -1;
    vx_err ve = {0};
    if (eng_tok_encode(eng_model_tokenizer(*m), st->arg, strlen(st->arg), 1, ids, n, &ve) < 0)
        return lql_err_vx(e, &ve, &st->arg_at);
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return lql_errf(e, LQL_EEXEC, &st->arg_at, "empty prompt: it has no tokens");
    }
    if (*n > (size_t)eng_model_context(*m)) {
        free(*ids);
        *ids = NULL;
        return lql_errf(e, LQL_EEXEC, &st->arg_at,
                        "prompt has %zu tokens, more than the model's context of %d", *n,
                        eng_model_context(*m));
    }
    return 0;
}

/* Next-token probabilities after ids[0..n) with the overlay attached or not.
 * probs [vocab] is filled. */
static int next_probs(lql_session *s, eng_model *m, const int32_t *ids, size_t n, int base,
                      float *probs, const lql_stmt *st, lql_err *e)
{
    eng_session *es = NULL;
    vx_err ve = {0};
    if (base && s->overlay) eng_model_set_overlay(m, NULL);
    int rc = eng_session_new(m, (int)n, &es, &ve);
    if (rc == 0) rc = eng_forward(es, ids, (int)n, probs, NULL, &ve);
    eng_session_free(es);
    if (base && s->overlay) eng_model_set_overlay(m, s->overlay);
    if (rc < 0) return lql_err_vx(e, &ve, &st->at);
    eng_softmax(probs, eng_model_vocab(m));
    return 0;
}

/* The top k of probs[0..vocab) in descending order into out[0..k): insertion into a
 * k-list for small k (one pass), a full sort when k is large. -1 on out-of-memory. */
static int top_k(const float *probs, int vocab, int k, scored *out)
{
    if (k > 64) {
        scored *all = malloc((size_t)vocab * sizeof *all);
        if (!all) return -1;
        for (int i = 0; i < vocab; i++) { all[i].id = i; all[i].p = probs[i]; }
        qsort(all, (size_t)vocab, sizeof *all, by_prob);
        memcpy(out, all, (size_t)k * sizeof *out);
        free(all);
        return 0;
    }
    int n = 0;
    for (int i = 0; i < vocab; i++) {
        scored c = {i, probs[i]};
        if (n == k && by_prob(&c, &out[k - 1]) >= 0) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && by_prob(&c, &out[j - 1]) < 0) { out[j] = out[j - 1]; j--; }
        out[j] = c;
    }
    return 0;
}

/* The distribution table (and with COMPARE the base model's beside it). */
static int predictions(lql_session *s, const lql_stmt *st, eng_model *m, const int32_t *ids,
                       size_t n, lql_result *r, lql_err *e)
{
    int vocab = eng_model_vocab(m);
    int k = lql_has(st, LQL_C_TOP) ? (int)st->top : DEFAULT_TOP;
    if (k < 1 || k > vocab)
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_TOP], "TOP must be between 1 and %d (the vocabulary "
                        "size; got %d)", vocab, k);
    int compare = lql_has(st, LQL_C_COMPARE);
    float *probs = malloc((size_t)vocab * sizeof *probs * 2);
    scored *top = malloc((size_t)k * sizeof *top * 2);
    if (!probs || !top) { free(probs); free(top); return lql_errf(e, LQL_ENOMEM, NULL, "out of memory"); }
    int rc = next_probs(s, m, ids, n, 0, probs, st, e);
    if (rc == 0 && compare) rc = next_probs(s, m, ids, n, 1, probs + vocab, st, e);
    if (rc == 0 && (top_k(probs, vocab, k, top) < 0 || (compare && top_k(probs + vocab, vocab, k, top + k) < 0)))
        rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    if (rc == 0) {
        /* WITH IDS: each token's id beside it (tokens that decode alike, a U+FFFD byte
         * piece, are told apart; TRACE … FOR n takes the id) */
        const int wid = lql_has(st, LQL_C_WITH_IDS);
        lql_colspec cols[7] = {{"rank", LQL_INT, 0}, {"token", LQL_TEXT, 0}};
        int nc = 2;
        if (wid) cols[nc++] = (lql_colspec){"id", LQL_INT, 0};
        cols[nc++] = (lql_colspec){"prob", LQL_FLOAT, 4};
        if (compare) {
            cols[nc++] = (lql_colspec){"base_token", LQL_TEXT, 0};
            if (wid) cols[nc++] = (lql_colspec){"base_id", LQL_INT, 0};
            cols[nc++] = (lql_colspec){"base_prob", LQL_FLOAT, 4};
        }
        lql_table *t = lql_result_table(r, NULL, nc, cols);
        const eng_tokenizer *tok = eng_model_tokenizer(m);
        for (int i = 0; i < k; i++) {
            lql_row(t);
            lql_cell_int(t, i + 1);
            for (int b = 0; b <= compare; b++) {
                const scored *c = &top[(size_t)b * (size_t)k + (size_t)i];
                lql_cell_token(t, tok, c->id);
                if (wid) lql_cell_int(t, c->id);
                lql_cell_float(t, c->p);
            }
        }
        if (compare && !s->overlay) lql_result_note(r, "no overlay: base and effective model are the same");
        rc = lql_edit_knn_override(s, st, m, ids, n, r, e);
    }
    free(probs);
    free(top);
    return rc;
}

/* GENERATE's clauses checked against the model and the prompt's n tokens, into *sp: done
 * before anything runs, so a bad clause never follows printed predictions. */
static int sampler_of(const lql_stmt *st, eng_model *m, size_t n, eng_sampler *sp, lql_err *e)
{
    int max_new = (int)st->generate;
    if (max_new < 1) return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_GENERATE], "GENERATE needs at least 1 token");
    /* the last token generated is never fed back: it needs no position */
    if ((int64_t)n + max_new - 1 > eng_model_context(m))
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_GENERATE],
                        "prompt (%zu tokens) + GENERATE %d exceeds the model's context of %d "
                        "(the prompt and all but the last generated token take a position)",
                        n, max_new, eng_model_context(m));
    *sp = (eng_sampler){0.0f, 0, 1.0f, 0};
    if (lql_has(st, LQL_C_TEMPERATURE)) {
        if (st->temperature < 0)
            return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_TEMPERATURE], "TEMPERATURE must be >= 0");
        sp->temperature = eng_sampler_param(st->temperature);
    }
    if (lql_has(st, LQL_C_TOP_P)) {
        if (!(st->top_p > 0 && st->top_p <= 1))
            return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_TOP_P], "TOP_P must be in (0, 1], got %.15g", st->top_p);
        sp->top_p = eng_sampler_param(st->top_p);
    }
    if (lql_has(st, LQL_C_SEED)) sp->seed = st->seed;
    /* greedy decoding never samples: a seed or nucleus there would be ignored */
    static const lql_clause_kind sampling[] = {LQL_C_TOP_P, LQL_C_SEED};
    for (size_t i = 0; sp->temperature == 0 && i < 2; i++)
        if (lql_has(st, sampling[i]))
            return lql_errf(e, LQL_EEXEC, &st->clause_at[sampling[i]],
                            "%s applies to sampling: add TEMPERATURE x with x > 0", lql_clause_text(sampling[i]));
    return 0;
}

/* GENERATE n with the checked sampler sp: the continuation as text and ids. */
static int generate(lql_session *s, const lql_stmt *st, eng_model *m, const int32_t *ids,
                    size_t n, const eng_sampler *sp, lql_result *r, lql_err *e)
{
    int max_new = (int)st->generate;
    eng_session *es = NULL;
    vx_err ve = {0};
    int32_t *out = malloc((size_t)max_new * sizeof *out);
    int n_out = 0;
    if (!out) return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    /* the KNN store overrides each prediction it matches, as at INFER … TOP */
    eng_gen_hooks h = {s->on_token, s->token_ctx, NULL, NULL, NULL};
    ed_knn_gen kg;
    int rc = ed_knn_gen_hooks(&kg, s->edit, m, &h, &ve);
    if (rc == 0) rc = eng_session_new(m, (int)n + max_new - 1, &es, &ve);
    if (rc == 0) rc = eng_generate_with(es, ids, (int)n, max_new, sp, &h, out, &n_out, &ve);
    eng_session_free(es);
    ed_knn_gen_free(&kg);
    if (rc < 0) { free(out); return lql_err_vx(e, &ve, &st->at); }
    if (kg.overridden)
        lql_result_note(r, "KNN override: %d of %d tokens set by the store (the first, token %d, "
                        "by the key of %s at layer %d, cos %.4f)", kg.overridden, kg.steps,
                        kg.first_step + 1, kg.first.entry->entity, kg.first.entry->layer,
                        kg.first.cosine);
    /* the text the continuation adds after the prompt's (Llama 2's first "▁Paris" is
     * " Paris"); after a prompt of special tokens alone it starts the text */
    char *text = NULL;
    size_t text_len = 0;
    const eng_tokenizer *tok = eng_model_tokenizer(m);
    if ((eng_tok_has_text(tok, ids, n) ? eng_tok_decode_after : eng_tok_decode_len)(tok, out, (size_t)n_out, 1, &text,
                                                            &text_len, &ve) < 0) {
        free(out);
        return lql_err_vx(e, &ve, &st->at);
    }
    size_t cap = (size_t)n_out * 12 + 1, len = 0;
    char *idtext = malloc(cap);
    if (idtext) {
        idtext[0] = 0;
        for (int i = 0; i < n_out; i++)
            len += (size_t)snprintf(idtext + len, cap - len, "%s%d", i ? " " : "", out[i]);
    }
    static const lql_colspec cols[] = {{"prompt", LQL_TEXT, 0}, {"continuation", LQL_TEXT, 0},
        {"tokens", LQL_INT, 0}, {"ids", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, NULL, 4, cols);
    lql_row(t);
    lql_cell_text(t, st->arg);
    lql_cell_textn(t, text, text_len);
    lql_cell_int(t, n_out);
    lql_cell_text(t, idtext ? idtext : "");
    free(idtext);
    free(text);
    free(out);
    return 0;
}

int lql_h_infer(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    /* Sampling settings without GENERATE would be parsed and then ignored: refuse. */
    static const lql_clause_kind sampling[] = {LQL_C_TEMPERATURE, LQL_C_TOP_P, LQL_C_SEED};
    if (!lql_has(st, LQL_C_GENERATE))
        for (size_t i = 0; i < 3; i++)
            if (lql_has(st, sampling[i]))
                return lql_errf(e, LQL_EEXEC, &st->clause_at[sampling[i]],
                                "%s applies to GENERATE: add GENERATE n", lql_clause_text(sampling[i]));
    if (lql_has(st, LQL_C_WITH_IDS) && lql_has(st, LQL_C_GENERATE) && !lql_has(st, LQL_C_TOP))
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_WITH_IDS],
                        "WITH IDS adds an id column to the next-token table: add TOP n (GENERATE's "
                        "table has its ids column already)");
    if (lql_has(st, LQL_C_GENERATE) && lql_has(st, LQL_C_COMPARE))
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_COMPARE],
                        "COMPARE shows next-token distributions: it does not combine with GENERATE");
    eng_model *m;
    int32_t *ids = NULL;
    size_t n = 0;
    if (prompt_ids(s, st, &m, &ids, &n, e) < 0) return -1;
    eng_sampler sp = {0};
    int rc = lql_has(st, LQL_C_GENERATE) ? sampler_of(st, m, n, &sp, e) : 0;
    if (rc == 0 && (!lql_has(st, LQL_C_GENERATE) || lql_has(st, LQL_C_TOP)))
        rc = predictions(s, st, m, ids, n, r, e);
    if (rc == 0 && lql_has(st, LQL_C_GENERATE)) rc = generate(s, st, m, ids, n, &sp, r, e);
    free(ids);
    return rc;
}

int lql_h_explain_infer(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    eng_model *m;
    int32_t *ids = NULL;
    size_t n = 0;
    if (prompt_ids(s, st, &m, &ids, &n, e) < 0) return -1;
    int rc = lql_explain_infer_check(s, st, e);
    if (rc == 0) rc = predictions(s, st, m, ids, n, r, e);
    if (rc == 0) rc = lql_explain_infer_layers(s, st, ids, (int)n, r, e);
    free(ids);
    return rc;
}
