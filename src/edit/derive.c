/*
 * derive.c — COMPILE of the effective model (edit.h): the ON CONFLICT policies, provenance,
 * materialisation (compile.h) and the probe gate (gate.c) the result must pass before it
 * is kept.
 */
#include "ed_int.h"
#include "edit_memit.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ON CONFLICT FAIL: the first feature slot that operations of two different patches
 * touch, refused by name; 0 when there is none. */
static int check_conflicts(const ed_model *es, ed_err *e)
{
    vx_op *ops = NULL;
    size_t n = 0;
    if (ed_active_ops(es, &ops, &n, &e->vx))
        return -1;
    int rc = 0;
    for (size_t a = 0; a < n && rc == 0; a++)
        for (size_t b = a + 1; b < n && rc == 0; b++)
            if (ops[a].feature >= 0 && ops[a].layer == ops[b].layer &&
                ops[a].feature == ops[b].feature && ops[a].patch_id != ops[b].patch_id) {
                e->at = ED_AT_CONFLICT;
                rc = vx_errf(&e->vx, VX_EARG, "conflict: layer %d feature %d is edited by two "
                             "patches (operations %lld and %lld); ON CONFLICT LAST_WINS keeps "
                             "the later", ops[a].layer, ops[a].feature, (long long)ops[a].seq,
                             (long long)ops[b].seq);
            }
    vx_ops_free(ops, n);
    return rc;
}

/* An operation's confidence for ON CONFLICT HIGHEST_CONFIDENCE: its own (INSERT
 * CONFIDENCE, a patch's "confidence"), else its down_meta c_score (UPDATE … SET
 * confidence), else none (-inf: a DELETE without one ranks below any that has one). */
static double op_confidence(const vx_op *op)
{
    if (isfinite(op->confidence))
        return op->confidence;
    if (op->has_meta && isfinite(op->meta_c))
        return op->meta_c;
    return -INFINITY;
}

/* ON CONFLICT HIGHEST_CONFIDENCE: for every feature slot operations of two or more
 * patches touch, only the operations of the patch holding the highest confidence on that
 * slot are kept (a tie goes to the later operation, as LAST_WINS); the others are set
 * aside, each named in a note. Operations without a feature (low-rank inserts) never
 * conflict. Builds *out from what is kept; *n_aside counts what was set aside. */
static int resolve_confidence(const ed_model *es, ed_compile_res *r, ed_overlay **out,
                              ed_err *e)
{
    vx_op *ops = NULL;
    size_t n = 0;
    *out = NULL;
    if (ed_active_ops(es, &ops, &n, &e->vx))
        return -1;
    char *aside = calloc(n ? n : 1, 1);
    vx_op *kept = calloc(n ? n : 1, sizeof *kept);
    int rc = 0;
    r->aside = calloc(n ? n : 1, sizeof *r->aside);
    if (!aside || !kept || !r->aside)
        rc = vx_errf(&e->vx, VX_ENOMEM, "out of memory");
    for (size_t a = 0; a < n && rc == 0; a++) {
        if (ops[a].feature < 0)
            continue;
        /* the winner on a's slot: the op with the highest confidence, later on ties */
        size_t win = a;
        int contested = 0;
        for (size_t b = 0; b < n; b++) {
            if (ops[b].feature != ops[a].feature || ops[b].layer != ops[a].layer)
                continue;
            contested |= ops[b].patch_id != ops[a].patch_id;
            if (op_confidence(&ops[b]) >= op_confidence(&ops[win]))
                win = b;
        }
        if (!contested || ops[a].patch_id == ops[win].patch_id || aside[a])
            continue;
        aside[a] = 1;
        r->aside[r->n_aside++] = (ed_set_aside){ops[a].layer, ops[a].feature,
                                                (long long)ops[a].seq, op_confidence(&ops[a]),
                                                (long long)ops[win].seq,
                                                op_confidence(&ops[win])};
    }
    size_t nk = 0;
    for (size_t a = 0; a < n && rc == 0; a++)
        if (!aside[a])
            kept[nk++] = ops[a];   /* shallow: the overlay copies what it keeps */
    if (rc == 0 && nk && ed_overlay_build(es->bm, kept, nk, out, &e->vx))
        rc = -1;
    if (rc == 0 && !*out)
        rc = vx_errf(&e->vx, VX_EARG, "nothing to compile: every operation was set aside by ON "
                     "CONFLICT HIGHEST_CONFIDENCE");
    free(kept);
    free(aside);
    vx_ops_free(ops, n);
    return rc;
}


int ed_compile_current(ed_model *es, eng_model *m, const char *out, ed_conflict policy,
                       vx_progress_fn progress, void *progress_ctx, ed_compile_res *r, ed_err *e)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    if (!es->ov)
        return vx_errf(&e->vx, VX_EARG, "nothing to compile: the overlay is empty (no active "
                       "edits in %s)", es->jpath ? es->jpath : "any journal");
    if (policy == ED_CONFLICT_FAIL && check_conflicts(es, e))
        return -1;
    /* what is compiled: the session's overlay, or the one HIGHEST_CONFIDENCE resolves */
    ed_overlay *hov = NULL;
    if (policy == ED_HIGHEST_CONFIDENCE && resolve_confidence(es, r, &hov, e))
        return -1;
    const ed_overlay *use = hov ? hov : es->ov;
    /* provenance: the base, the journal, the patches applied */
    cJSON *prov = cJSON_CreateObject(), *names = cJSON_AddArrayToObject(prov, "patches");
    vx_patch_info *pi = NULL;
    size_t npi = 0;
    vx_err ve = {0};
    ed_counts cnt;
    ed_overlay_counts(use, &cnt);
    r->counts = cnt;
    cJSON_AddStringToObject(prov, "index_sha256", vx_index_sha256(es->c));
    cJSON_AddStringToObject(prov, "model", ed_model_name(es->c));
    cJSON_AddStringToObject(prov, "journal", vx_journal_path(es->j));
    cJSON_AddNumberToObject(prov, "operations", (double)cnt.ops);
    if (vx_journal_patches(es->j, &pi, &npi, &ve) == 0)
        for (size_t i = 0; i < npi; i++)
            if (pi[i].applied && pi[i].n_ops)
                cJSON_AddItemToArray(names, cJSON_CreateString(pi[i].name));
    vx_patch_infos_free(pi, npi);
    if (cnt.knn) {
        cJSON_Delete(prov);
        ed_overlay_free(hov);
        return vx_errf(&e->vx, VX_EARG, "compile: %zu KNN-store entr%s (INSERT … MODE KNN) "
                       "cannot be carried: a container has no residual-key store; UNDO %s or "
                       "REMOVE %s patch, then COMPILE", cnt.knn, cnt.knn == 1 ? "y" : "ies",
                       cnt.knn == 1 ? "it" : "them", cnt.knn == 1 ? "its" : "their");
    }
    cJSON_AddNumberToObject(prov, "set_aside_by_highest_confidence", (double)r->n_aside);
    int rc = ed_compile(es->c, ed_model_browse(es), ed_overlay_eng(use), out, prov, progress,
                        progress_ctx, &r->rep, &e->vx);
    cJSON_Delete(prov);
    if (rc) {
        ed_overlay_free(hov);
        e->at = ED_AT_OUTPUT;
        return -1;
    }
    /* the compiled container must answer as the overlay does: the inserted facts' prompts
     * and three fixed ones */
    vx_op *ops = NULL;
    size_t nops = 0;
    char *prompts[18] = {0};
    int np = 0;
    prompts[np++] = strdup("The capital of France is");
    prompts[np++] = strdup("Once upon a time");
    prompts[np++] = strdup("A baby cat is called a");
    if (ed_active_ops(es, &ops, &nops, &ve) == 0)
        for (size_t i = 0; i < nops && np < 18; i++)
            if (ops[i].kind == VX_OP_INSERT && ops[i].entity && ops[i].relation &&
                (i == 0 || !ops[i - 1].entity || !ops[i - 1].relation ||
                 ops[i - 1].history_n != ops[i].history_n ||
                 strcmp(ops[i - 1].entity, ops[i].entity) ||
                 strcmp(ops[i - 1].relation, ops[i].relation)))   /* a statement's ops once */
                prompts[np++] = eng_edit_prompt(ops[i].relation, ops[i].entity);
    vx_ops_free(ops, nops);
    for (int i = 0; i < np; i++)
        if (!prompts[i])
            rc = vx_errf(&e->vx, VX_ENOMEM, "out of memory");
    ed_gate *g = &r->gate;
    *g = (ed_gate){es->bm, ed_overlay_eng(use), ed_gate_tolerance(&r->rep, &r->why), 0, 0,
                   0, 0, "", "", 0, NULL, 0};
    r->probes = np;
    /* the probes run the overlay that was compiled, then the session's again */
    eng_model_set_overlay(m, ed_overlay_eng(use));
    if (rc == 0)
        rc = ed_gate_run(m, out, (const char *const *)prompts, np, g, e);
    eng_model_set_overlay(m, ed_overlay_eng(es->ov));
    ed_overlay_free(hov);
    if (rc != 0) {
        /* a check that could not run (cancelled, out of memory, the output unreadable)
         * leaves no unchecked container behind */
        char why[VX_ERR_MAX];
        snprintf(why, sizeof why, "%s", e->vx.msg);
        vx_rmtree(out);
        e->at = ED_AT_OUTPUT;
        vx_errf(&e->vx, e->vx.code ? e->vx.code : VX_EIO, "compile: removed '%s', whose check "
                "against the overlay could not run: %s", out, why);
    }
    double tol = g->rel * fmax(g->scale, 1.0);
    if (rc == 0 && (g->logit > tol || g->lens > tol || g->walk_bad[0] || g->meta_bad[0])) {
        char what[256];
        if (g->logit > tol || g->lens > tol)
            snprintf(what, sizeof what, "%s differ by %.3g", g->logit > tol ? "INFER logits" :
                     "TRACE lens logits", g->logit > tol ? g->logit : g->lens);
        else
            snprintf(what, sizeof what, "%s", g->walk_bad[0] ? g->walk_bad : g->meta_bad);
        vx_rmtree(out);
        e->at = ED_AT_OUTPUT;
        rc = vx_errf(&e->vx, VX_EARG, "compile: removed '%s', which does not answer as the "
                     "overlay does within %s x logit scale %.3g: %s", out, r->why,
                     fmax(g->scale, 1.0), what);
    }
    for (int i = 0; i < np; i++)
        free(prompts[i]);
    return rc;
}

void ed_compile_res_free(ed_compile_res *r)
{
    free(r->aside);
    ed_gate_free(&r->gate);
    memset(r, 0, sizeof *r);
}
