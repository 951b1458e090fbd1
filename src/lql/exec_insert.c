/*
 * exec_insert.c — INSERT. The statement's clauses are checked here (CONFIDENCE, ALPHA,
 * MODE), src/edit inserts the fact (ed_insert: MEMIT by default, insert.c; KNN; COMPOSE,
 * compose.c) and the outcome is rendered: the statistics computed, the "inserted" row, the
 * journal notes and, on a MoE layer, the routing.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "exec_edit.h"

/* An ed_err at the clause it is about. */
static int insert_err(const lql_stmt *st, const ed_err *ee, lql_err *e)
{
    const lql_span *at = &st->at;
    if (ee->at == ED_AT_ENTITY)
        at = &st->entity_at;
    else if (ee->at == ED_AT_TARGET)
        at = &st->target_at;
    else if (ee->at == ED_AT_LAYER && lql_has(st, LQL_C_AT_LAYER))
        at = &st->clause_at[LQL_C_AT_LAYER];
    return lql_err_vx(e, &ee->vx, at);
}

/* The "inserted" table of an INSERT: one row; feature < 0 leaves out the feature column
 * (modes that edit no single feature). */
static int inserted_row(lql_result *r, const lql_stmt *st, int layer, int feature,
                        double p_before, double p_after, int steps, lql_err *e)
{
    static const lql_colspec cols[] = {
        {"entity", LQL_TEXT, 0}, {"relation", LQL_TEXT, 0}, {"target", LQL_TEXT, 0},
        {"layer", LQL_INT, 0}, {"feature", LQL_INT, 0}, {"p_before", LQL_FLOAT, 4},
        {"p_after", LQL_FLOAT, 4}, {"steps", LQL_INT, 0}};
    static const lql_colspec nofeat[] = {
        {"entity", LQL_TEXT, 0}, {"relation", LQL_TEXT, 0}, {"target", LQL_TEXT, 0},
        {"layer", LQL_INT, 0}, {"p_before", LQL_FLOAT, 4}, {"p_after", LQL_FLOAT, 4},
        {"steps", LQL_INT, 0}};
    lql_table *t = feature >= 0 ? lql_result_table(r, "inserted", 8, cols)
                                : lql_result_table(r, "inserted", 7, nofeat);
    if (!t)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    lql_row(t);
    lql_cell_text(t, st->entity);
    lql_cell_text(t, st->relation_v);
    lql_cell_text(t, st->target);
    lql_cell_int(t, layer);
    if (feature >= 0)
        lql_cell_int(t, feature);
    lql_cell_float(t, p_before);
    lql_cell_float(t, p_after);
    lql_cell_int(t, steps);
    return 0;
}

/* What an insert reports once it is journaled. */
static void inserted_notes(const lql_stmt *st, const ed_model *ed, const ed_insert_res *x,
                           ed_insert_mode mode, lql_result *r)
{
    const vx_record_info *info = &x->info;
    lql_edit_note_recorded(r, ed, info);
    if (x->earlier)
        lql_result_note(r, "%s -[%s]-> %s, inserted before (history %lld), is still active: this "
                        "insert is written over it and DESCRIBE lists both (UNDO the one not "
                        "wanted)", st->entity, st->relation_v, x->earlier, x->earlier_history);
    if (mode == ED_KNN) {
        lql_result_note(r, "inserted: %s -[%s]-> %s at layer %d (KNN store: the residual of "
                        "\"%s\" is the key, cosine > %.2f overrides the prediction; %zu entr%s; "
                        "history %lld, patch %s)", st->entity, st->relation_v, st->target,
                        x->layer, x->prompt, ED_KNN_THRESHOLD, x->knn_entries,
                        x->knn_entries == 1 ? "y" : "ies", (long long)info->history_n,
                        info->patch_name);
        return;
    }
    if (mode == ED_COMPOSE) {
        lql_result_note(r, "inserted: %s -[%s]-> %s at layer %d feature %d (MODE COMPOSE: gate "
                        "%.3g, up %.3g, down %.3g = ALPHA %.2f x d_ref %.3g after balancing; "
                        "history %lld, patch %s)", st->entity, st->relation_v, st->target,
                        x->layer, x->feature, x->norms[0], x->norms[1], x->norms[2], x->alpha,
                        x->d_ref, (long long)info->history_n, info->patch_name);
        /* recorded as the reference records its install, but not silently: its strong gate
         * also fires on other prompts, earlier facts' included */
        if (x->p_after < x->confidence)
            lql_result_note(r, "MODE COMPOSE: \"%s\" reaches p %.4f after \"%s\", below "
                            "CONFIDENCE %.2f, and the install can change other prompts' answers "
                            "(earlier facts' too: INFER them); recorded anyway, as the reference "
                            "records it (MEMIT, the default, refuses below CONFIDENCE; UNDO takes "
                            "it back)", st->target, x->p_after, x->prompt ? x->prompt : "?",
                            x->confidence);
        return;
    }
    const int K = x->top_k;
    const size_t nt = x->n_tokens;
    const int *experts = x->experts;
    const char *what = experts[K] >= 0 ? "expert down_proj" : "down_proj";
    for (size_t j = 0; x->gated && j < nt; j++)
        lql_result_note(r, "inserted: %s -[%s]-> %s at layer %d: token %zu of %zu as gated "
                        "feature %d (gate pre-activation %.1f on its prompt, at most %.1f on %lld "
                        "of %lld negatives; history %lld, patch %s)", st->entity, st->relation_v,
                        st->target, x->layer, j + 1, nt, x->gates[j].feature,
                        x->gates[j].z_prompt, x->gates[j].z_off, x->gates[j].n_off,
                        x->gates[j].n_neg, (long long)info->history_n, info->patch_name);
    if (!x->gated) {
        if (nt == 1)
            lql_result_note(r, "inserted: %s -[%s]-> %s at layer %d (rank-1 %s update keyed on "
                            "\"%s\"; history %lld, patch %s)", st->entity, st->relation_v,
                            st->target, x->layer, what, x->prompt, (long long)info->history_n,
                            info->patch_name);
        else
            lql_result_note(r, "inserted: %s -[%s]-> %s at layer %d (rank-%zu %s update, one per "
                            "target token, keyed on \"%s\" and the target's first %zu tokens; "
                            "p_before and p_after are of the whole target; history %lld, patch %s)",
                            st->entity, st->relation_v, st->target, x->layer, nt, what, x->prompt,
                            nt - 1, (long long)info->history_n, info->patch_name);
    }
    for (size_t j = 0; K > 0 && j < nt && experts[K] >= 0; j++) {
        const int *ex = experts + j * (size_t)(K + 1);
        const float *wx = x->weights + j * (size_t)(K + 1);
        char routed[256];
        size_t at = 0;
        for (int k = 0; k < K && at < sizeof routed; k++)
            at += (size_t)snprintf(routed + at, sizeof routed - at, "%s%d (%.3f)", k ? ", " : "",
                                   ex[k], wx[k]);
        lql_result_note(r, "moe: token %zu of %zu routes to experts %s at layer %d; expert "
                        "%d's down_proj is updated (the top-1 expert)", j + 1, nt, routed,
                        x->layer, ex[K]);
    }
}

int lql_h_insert(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    if (lql_has(st, LQL_C_CONFIDENCE) && !(st->confidence >= 0 && st->confidence <= 1))
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_CONFIDENCE], "CONFIDENCE must be "
                        "between 0 and 1 (got %.15g)", st->confidence);
    ed_insert_mode mode = st->mode == LQL_MODE_KNN && !lql_has(st, LQL_C_ALPHA) ? ED_KNN
                        : st->mode == LQL_MODE_COMPOSE ? ED_COMPOSE : ED_MEMIT;
    if (mode == ED_COMPOSE && lql_has(st, LQL_C_ALPHA) && !(st->alpha >= 0.05 && st->alpha <= 0.30))
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_ALPHA], "ALPHA must be between "
                        "0.05 and 0.30 (got %.15g)", st->alpha);
    if (mode == ED_MEMIT && lql_has(st, LQL_C_ALPHA))
        return lql_refuse_clause(e, st, LQL_C_ALPHA, "ALPHA scales MODE COMPOSE installs; a "
                                 "MEMIT insert finds its own strength (set CONFIDENCE)");
    if (mode == ED_MEMIT && lql_has(st, LQL_C_CONFIDENCE) &&
        !(st->confidence >= 0.5 && st->confidence < 1))
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_CONFIDENCE], "CONFIDENCE is the "
                        "probability the target must reach: at least 0.5 and below 1");
    ed_model *ed = NULL;
    eng_model *m = NULL;
    /* no place for a journal: refused before the edit is computed, not after */
    if (lql_edit_model(s, st, 1, &ed, e) || lql_edit_journal(st, ed, 0, e) ||
        (!ed_journal_place(ed) && lql_edit_journal(st, ed, 1, e)) ||
        lql_session_model(s, st, &m, e))
        return -1;
    if (lql_has(st, LQL_C_AT_LAYER) && lql_check_layers(e, &st->clause_at[LQL_C_AT_LAYER],
                                                        st->layer, st->layer,
                                                        eng_model_layers(m)))
        return -1;
    char *text = lql_edit_text(st);
    if (!text)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    ed_insert_req req = {
        .text = text, .entity = st->entity, .relation = st->relation_v, .target = st->target,
        .mode = mode, .layer_given = lql_has(st, LQL_C_AT_LAYER), .layer = (int)st->layer,
        .confidence = lql_has(st, LQL_C_CONFIDENCE) ? st->confidence : NAN,
        .alpha = lql_has(st, LQL_C_ALPHA) ? st->alpha : NAN,
        .mode_named = lql_has(st, LQL_C_MODE)};
    ed_insert_res x;
    ed_err ee;
    int rc = ed_insert(ed, m, &req, &x, &ee);
    free(text);
    /* the fallback and statistics notes show also when the statement fails after them */
    if (x.fallback[0])
        lql_result_note(r, "%s", x.fallback);
    for (int i = 0; i < x.n_sites; i++) {
        const ed_site_note *n = &x.sites[i];
        if (n->expert >= 0)
            lql_result_note(r, "layer %d expert %d: activation covariance over %lld positions "
                            "of %d sampled texts (once per session)", n->layer, n->expert,
                            n->positions, n->seqs);
        else
            lql_result_note(r, "layer %d: activation covariance over %lld positions of %d "
                            "sampled texts (once per session)", n->layer, n->positions, n->seqs);
    }
    if (rc)
        insert_err(st, &ee, e);     /* no 'inserted' row: nothing was journaled */
    else if (x.answered && x.n_tokens > 1)
        /* each token clears CONFIDENCE; their product, the target's p, need not */
        lql_result_note(r, "already answered: \"%s\" gives \"%s\", each of its %zu tokens "
                        "above CONFIDENCE %.2f (the whole target at p %.4f): nothing inserted "
                        "(nothing journaled)", x.prompt, st->target, x.n_tokens, x.confidence,
                        x.p_before);
    else if (x.answered)
        lql_result_note(r, "already answered: \"%s\" gives \"%s\" at p %.4f, above CONFIDENCE "
                        "%.2f: nothing inserted (nothing journaled)", x.prompt, st->target,
                        x.p_before, x.confidence);
    else if (x.computed && inserted_row(r, st, x.layer, mode == ED_COMPOSE ? x.feature : -1,
                                        x.p_before, x.p_after, x.steps, e) < 0)
        rc = -1;
    else
        inserted_notes(st, ed, &x, mode, r);
    ed_insert_res_free(&x);
    return rc ? -1 : 0;
}
