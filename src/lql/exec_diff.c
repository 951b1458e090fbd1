/*
 * exec_diff.c — DIFF: two effective states (CURRENT or a container) compared by src/edit
 * (diff.c) — features whose tombstone or metadata differ, per-tensor value deltas, or with
 * PHYSICAL the segment files — and with INTO PATCH the differences written as a patch.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "exec_edit.h"
#include "files.h"

/* Per-tensor value deltas of the effective states. */
static int diff_tensors(const lql_stmt *st, const ed_side *A, const ed_side *B, lql_result *r,
                        lql_err *e)
{
    static const lql_colspec cols[] = {
        {"object", LQL_TEXT, 0}, {"tensor", LQL_TEXT, 0}, {"changed", LQL_INT, 0},
        {"max_abs_diff", LQL_FLOAT, 6}, {"status", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "tensors", 5, cols);
    if (!t)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    ed_tensor_diff *rows = NULL;
    size_t n = 0;
    vx_err ve = {0};
    int rc = ed_diff_tensors(A, B, lql_has(st, LQL_C_LAYER) ? (int)st->layer : -1, &rows, &n,
                             &ve);
    for (size_t i = 0; i < n; i++) {
        lql_row(t);
        lql_cell_text(t, rows[i].object);
        lql_cell_text(t, rows[i].name);
        lql_cell_int(t, rows[i].changed);
        if (rows[i].has_max)
            lql_cell_float(t, rows[i].max_abs);
        else
            lql_cell_null(t);
        lql_cell_text(t, rows[i].status);
    }
    free(rows);
    return rc ? lql_err_vx(e, &ve, &st->at) : 0;
}

/* PHYSICAL: the segment files as index.json records them. */
static int diff_segments(const ed_side *A, const ed_side *B, lql_result *r, lql_err *e)
{
    static const lql_colspec cols[] = {
        {"segment", LQL_TEXT, 0}, {"bytes_a", LQL_INT, 0}, {"bytes_b", LQL_INT, 0},
        {"status", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "segments", 4, cols);
    if (!t)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(vx_index_json(A->c), "segments");
    const cJSON *sb = cJSON_GetObjectItemCaseSensitive(vx_index_json(B->c), "segments"), *x;
    cJSON_ArrayForEach(x, sa) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(sb, x->string);
        const char *ha = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "sha256"));
        const char *hb = y ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(y, "sha256")) : NULL;
        lql_row(t);
        lql_cell_text(t, x->string);
        lql_cell_int(t, (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(x, "bytes")));
        if (y)
            lql_cell_int(t, (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(y, "bytes")));
        else
            lql_cell_null(t);
        lql_cell_text(t, !y ? "only in a" : ha && hb && !strcmp(ha, hb) ? "same" : "differs");
    }
    cJSON_ArrayForEach(x, sb)
        if (!cJSON_GetObjectItemCaseSensitive(sa, x->string)) {
            lql_row(t);
            lql_cell_text(t, x->string);
            lql_cell_null(t);
            lql_cell_int(t, (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(x, "bytes")));
            lql_cell_text(t, "only in b");
        }
    return 0;
}


/* The KNN store (INSERT … MODE KNN) changes predictions without a weight, so neither
 * table above shows it: its entries on each side, when the sides' stores differ (only
 * CURRENT has one). RELATION and LAYER filter them as they filter features. */
static int diff_knn(const lql_stmt *st, const ed_side *A, const ed_side *B, lql_result *r,
                    lql_err *e)
{
    if (A->edit == B->edit)
        return 0;
    const ed_side *side[2] = {A, B};
    size_t shown = 0;
    lql_table *t = NULL;
    for (int i = 0; i < 2; i++) {
        size_t nk = 0;
        const ed_knn_entry *k = ed_knn(side[i]->edit, &nk);
        for (size_t j = 0; j < nk; j++) {
            if ((lql_has(st, LQL_C_LAYER) && k[j].layer != st->layer) ||
                (lql_has(st, LQL_C_RELATION) && strcasecmp(k[j].relation, st->relation)))
                continue;
            static const lql_colspec cols[] = {
                {"side", LQL_TEXT, 0}, {"entity", LQL_TEXT, 0}, {"relation", LQL_TEXT, 0},
                {"target", LQL_TEXT, 0}, {"layer", LQL_INT, 0}};
            if (!t && !(t = lql_result_table(r, "knn store", 5, cols)))
                return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
            lql_row(t);
            lql_cell_text(t, i ? "b" : "a");
            lql_cell_text(t, k[j].entity);
            lql_cell_text(t, k[j].relation);
            lql_cell_text(t, k[j].target);
            lql_cell_int(t, k[j].layer);
            shown++;
        }
    }
    if (shown)
        lql_result_note(r, "%zu KNN-store entr%s on one side only (INSERT … MODE KNN: a residual "
                        "key that overrides INFER's and GENERATE's prediction, no weight)",
                        shown, shown == 1 ? "y" : "ies");
    return 0;
}

/* INTO PATCH: the feature differences as vector-free operations on side a (the path was
 * checked before the diff ran). */
static int diff_patch(const lql_stmt *st, const ed_side *A, const ed_side *B,
                      const ed_diff_row *rows, size_t n, lql_result *r, lql_err *e)
{
    size_t written = 0, skipped = 0;
    vx_err ve = {0};
    if (ed_diff_patch(A, B, rows, n, st->into, &written, &skipped, &ve))
        return lql_err_vx(e, &ve, ve.code == VX_ENOMEM ? &st->at
                                                       : &st->clause_at[LQL_C_INTO_PATCH]);
    /* said every time: the tensors table above may show weights this file does not carry */
    lql_result_note(r, "wrote %zu operations to %s: vector-free (deletes and down-meta "
                    "updates), weight changes are not carried (SAVE PATCH and COMPILE carry "
                    "them)%s", written, st->into,
                    skipped ? "; restored features have no vector-free form: skipped" : "");
    return 0;
}

/* The features whose tombstone or metadata differ, as a table and a count (*rows for INTO
 * PATCH). A side whose down-meta is neither stored nor computable (a quantised profile's
 * down operands) has nothing to compare — every feature would read as added or removed,
 * and a deleted one as unchanged — so that is said instead, and INTO PATCH refused. */
static int diff_features(const lql_stmt *st, const ed_side *A, const ed_side *B,
                         ed_diff_row **rows, size_t *n, lql_result *r, lql_err *e)
{
    vx_err ve = {0};
    const ed_side *blind = brw_meta_source(A->bm) == BRW_META_NONE   ? A
                           : brw_meta_source(B->bm) == BRW_META_NONE ? B
                                                                     : NULL;
    if (blind) {
        brw_meta_refuse(blind->bm, &ve);
        if (lql_has(st, LQL_C_INTO_PATCH))
            return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_INTO_PATCH], "DIFF INTO PATCH "
                            "writes the feature differences, and %s cannot be compared: %s",
                            blind->label, ve.msg);
        lql_result_note(r, "features not compared: side %s (%s): %s", blind == A ? "a" : "b",
                        blind->label, ve.msg);
        return 0;
    }
    if (ed_diff_features(A, B, lql_has(st, LQL_C_LAYER) ? (int)st->layer : -1,
                         lql_has(st, LQL_C_RELATION) ? st->relation : NULL, rows, n, &ve))
        return lql_err_vx(e, &ve, &st->at);
    static const lql_colspec cols[] = {
        {"layer", LQL_INT, 0}, {"feature", LQL_INT, 0}, {"a", LQL_TEXT, 0},
        {"b", LQL_TEXT, 0}, {"c_a", LQL_FLOAT, 4}, {"c_b", LQL_FLOAT, 4},
        {"status", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "features", 7, cols);
    if (!t)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    const ed_diff_row *x = *rows;
    size_t limit = lql_has(st, LQL_C_LIMIT) ? (size_t)st->limit : 20;
    for (size_t i = 0; i < *n && i < limit; i++) {
        char ta[256], tb[256];
        brw_trim(x[i].a.present ? brw_token_text(A->bm, x[i].a.top_id) : "", ta, sizeof ta);
        brw_trim(x[i].b.present ? brw_token_text(B->bm, x[i].b.top_id) : "", tb, sizeof tb);
        lql_row(t);
        lql_cell_int(t, x[i].layer);
        lql_cell_int(t, x[i].feature);
        lql_cell_text(t, ta);
        lql_cell_text(t, tb);
        lql_cell_float(t, x[i].a.c_score);
        lql_cell_float(t, x[i].b.c_score);
        lql_cell_text(t, x[i].status);
    }
    lql_result_note(r, "%zu feature%s%s", *n, *n == 1 ? " differs" : "s differ",
                    *n > limit ? " (LIMIT shows the first ones)" : "");
    return 0;
}

int lql_h_diff(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    ed_side A, B;
    vx_err ve = {0};
    /* the output path first: an existing file must not cost (and print) the whole diff */
    if (lql_has(st, LQL_C_INTO_PATCH) &&
        lql_output_path(st->into, "DIFF INTO PATCH", &st->clause_at[LQL_C_INTO_PATCH], e))
        return -1;
    if (lql_edit_model(s, st, 1, &ed, e))
        return -1;
    if (ed_journal(ed) && ed_refresh(ed, &ve))
        return lql_err_vx(e, &ve, &st->at);
    if (ed_side_open(ed, st->arg, &A, &ve))
        return lql_err_vx(e, &ve, &st->arg_at);
    if (ed_side_open(ed, st->arg2, &B, &ve)) {
        ed_side_close(&A);
        return lql_err_vx(e, &ve, &st->arg2_at);
    }
    ed_diff_row *rows = NULL;
    size_t n = 0;
    int rc = -1;
    if (lql_has(st, LQL_C_LAYER) &&
        lql_check_layers(e, &st->clause_at[LQL_C_LAYER], st->layer, st->layer,
                         brw_layers(A.bm)))
        goto done;
    /* CURRENT's inserts label the features they wrote, as SELECT and DELETE read them */
    if (lql_has(st, LQL_C_RELATION) && !brw_has_labels(A.bm, A.ov) &&
        !brw_has_labels(B.bm, B.ov)) {
        lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_RELATION], "RELATION needs relation "
                 "labels: neither side has feature labels or an inserted relation");
        goto done;
    }
    if (diff_features(st, &A, &B, &rows, &n, r, e))
        goto done;
    if (diff_knn(st, &A, &B, r, e))
        goto done;
    if ((lql_has(st, LQL_C_PHYSICAL) ? diff_segments(&A, &B, r, e) : diff_tensors(st, &A, &B, r, e)) ||
        (lql_has(st, LQL_C_INTO_PATCH) && diff_patch(st, &A, &B, rows, n, r, e)))
        goto done;
    rc = 0;
done:
    free(rows);
    ed_side_close(&A);
    ed_side_close(&B);
    return rc;
}
