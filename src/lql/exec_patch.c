/*
 * exec_patch.c — the patch statements (BEGIN / SAVE / APPLY / REMOVE PATCH, SHOW PATCHES),
 * UNDO, ROLLBACK and SHOW HISTORY: calls of src/edit (patch.c) and the journal's listings,
 * rendered.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_edit.h"
#include "files.h"

int lql_h_begin_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    if (lql_edit_model(s, st, 0, &ed, e) || lql_edit_journal(st, ed, 1, e))
        return -1;
    char was[128] = "";
    int64_t taken = 0;
    vx_err ve = {0};
    if (ed_begin_patch(ed, st->arg, was, sizeof was, &taken, &ve))
        return lql_err_vx(e, &ve, &st->arg_at);
    lql_result_note(r, "patch session started: %s", st->arg);
    if (taken)
        lql_result_note(r, "took over %lld operation%s of %s", (long long)taken,
                        taken == 1 ? "" : "s", was);
    return 0;
}

/* ", N KNN-store" for the insert_knn / delete_knn operations among counts, or "" (the
 * notes named only inserts, updates and deletes, so those summed to less than the total). */
static void knn_part(const size_t counts[VX_OP_KIND_COUNT], char *buf, size_t n)
{
    size_t k = counts[VX_OP_INSERT_KNN] + counts[VX_OP_DELETE_KNN];
    if (k)
        snprintf(buf, n, ", %zu KNN-store", k);
}

int lql_h_save_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    if (lql_edit_model(s, st, 0, &ed, e))
        return -1;
    const char *rec = ed_journal(ed) ? vx_journal_recording_name(ed_journal(ed)) : NULL;
    if (!rec)
        return lql_errf(e, LQL_EEXEC, &st->at, "no patch is recording: BEGIN PATCH \"name\" or "
                        "make an edit first");
    char name[256], file[4096];
    snprintf(name, sizeof name, "%s", rec);
    if (st->arg) {
        snprintf(file, sizeof file, "%s", st->arg);
    } else {
        if (strncmp(name, "auto-", 5) == 0)
            return lql_errf(e, LQL_EEXEC, &st->at, "the anonymous patch %s needs a file name: "
                            "SAVE PATCH \"file.vlp\"", name);
        snprintf(file, sizeof file, "%s.vlp", name);
    }
    if (lql_output_path(file, "SAVE PATCH", st->arg ? &st->arg_at : &st->at, e))
        return -1;
    size_t c[VX_OP_KIND_COUNT];
    vx_err ve = {0};
    if (ed_save_patch(ed, file, c, &ve))
        return lql_err_vx(e, &ve, st->arg ? &st->arg_at : &st->at);
    char knn[48] = "";
    knn_part(c, knn, sizeof knn);
    lql_result_note(r, "saved: %s to %s (%zu inserts, %zu updates, %zu deletes%s)", name, file,
                    c[VX_OP_INSERT], c[VX_OP_UPDATE], c[VX_OP_DELETE], knn);
    return 0;
}

int lql_h_apply_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    if (lql_edit_model(s, st, 1, &ed, e) || lql_edit_journal(st, ed, 1, e))
        return -1;
    char *text = lql_edit_text(st);
    if (!text)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    ed_apply_res x;
    vx_err ve = {0};
    int rc = ed_apply_patch(ed, st->arg, text, &x, &ve);
    free(text);
    if (rc)
        return lql_err_vx(e, &ve, &st->arg_at);
    char knn[48] = "";
    knn_part(x.counts, knn, sizeof knn);
    lql_result_note(r, "applied: %s (%zu operations: %zu inserts, %zu updates, %zu deletes%s; "
                    "history %lld)", x.name, x.n_ops, x.counts[VX_OP_INSERT],
                    x.counts[VX_OP_UPDATE], x.counts[VX_OP_DELETE], knn, (long long)x.history_n);
    return 0;
}

int lql_h_remove_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    if (lql_edit_model(s, st, 0, &ed, e) || lql_edit_journal(st, ed, 0, e) ||
        (ed_journal(ed) && lql_edit_model(s, st, 1, &ed, e)))
        return -1;
    char *text = lql_edit_text(st);
    if (!text)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    vx_err ve = {0};
    int rc = ed_remove_patch(ed, text, st->arg, &ve);
    free(text);
    if (rc)
        return lql_err_vx(e, &ve, &st->arg_at);
    lql_result_note(r, "removed: %s", st->arg);
    return 0;
}

int lql_h_undo(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    if (lql_edit_model(s, st, 0, &ed, e) || (ed_journal(ed) && lql_edit_model(s, st, 1, &ed, e)))
        return -1;
    int64_t n = 0;
    char *text = NULL;
    vx_err ve = {0};
    if (ed_undo(ed, &n, &text, &ve))
        return lql_err_vx(e, &ve, &st->at);
    if (!n)
        lql_result_note(r, "nothing to undo");
    else
        lql_result_note(r, "undone: %lld %s", (long long)n, text ? text : "");
    free(text);
    return 0;
}

int lql_h_rollback(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    if (lql_edit_model(s, st, 0, &ed, e) || lql_edit_journal(st, ed, 0, e) ||
        (ed_journal(ed) && lql_edit_model(s, st, 1, &ed, e)))
        return -1;
    int64_t count = 0;
    vx_err ve = {0};
    if (ed_rollback(ed, st->n, &count, &ve))
        return lql_err_vx(e, &ve, &st->n_at);
    lql_result_note(r, "rolled back to %lld (%lld statement%s undone)", (long long)st->n,
                    (long long)count, count == 1 ? "" : "s");
    return 0;
}

int lql_h_show_patches(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    if (lql_edit_model(s, st, 0, &ed, e))
        return -1;
    vx_journal *j = ed_journal(ed);
    static const lql_colspec cols[] = {
        {"patch", LQL_TEXT, 0}, {"ops", LQL_INT, 0}, {"inserts", LQL_INT, 0},
        {"updates", LQL_INT, 0}, {"deletes", LQL_INT, 0}, {"knn", LQL_INT, 0},
        {"status", LQL_TEXT, 0}, {"source", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "patches", 8, cols);
    if (!t)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    vx_patch_info *p = NULL;
    size_t n = 0;
    vx_err ve = {0};
    if (j && vx_journal_patches(j, &p, &n, &ve))
        return lql_err_vx(e, &ve, &st->at);
    int64_t total = 0, pending = 0;
    for (size_t i = 0; i < n; i++) {
        lql_row(t);
        lql_cell_text(t, p[i].name);
        lql_cell_int(t, p[i].n_ops);
        lql_cell_int(t, p[i].n_insert);
        lql_cell_int(t, p[i].n_update);
        lql_cell_int(t, p[i].n_delete);
        lql_cell_int(t, p[i].n_knn);
        lql_cell_text(t, p[i].recording ? "recording" : p[i].applied ? "applied" : "removed");
        lql_cell_text(t, p[i].source);
        if (p[i].applied)
            total += p[i].n_ops;
        if (p[i].recording)
            pending = p[i].n_ops;
    }
    lql_result_note(r, "total: %lld active operation%s", (long long)total,
                    total == 1 ? "" : "s");
    const char *rec = j ? vx_journal_recording_name(j) : NULL;
    if (rec)
        lql_result_note(r, "recording: %s (%lld ops)", rec, (long long)pending);
    else
        lql_result_note(r, "recording: none");
    vx_patch_infos_free(p, n);
    return 0;
}

int lql_h_show_history(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    if (lql_edit_model(s, st, 0, &ed, e))
        return -1;
    vx_journal *j = ed_journal(ed);
    static const lql_colspec cols[] = {
        {"n", LQL_INT, 0}, {"statement", LQL_TEXT, 0}, {"patch", LQL_TEXT, 0},
        {"ops", LQL_INT, 0}, {"status", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "history", 5, cols);
    if (!t)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    vx_history_entry *h = NULL;
    vx_patch_info *p = NULL;
    size_t n = 0, np = 0;
    vx_err ve = {0};
    if (j && (vx_journal_history(j, &h, &n, &ve) || vx_journal_patches(j, &p, &np, &ve))) {
        vx_history_free(h, n);
        return lql_err_vx(e, &ve, &st->at);
    }
    for (size_t i = 0; i < n; i++) {
        /* an edit of a patch that was removed no longer applies, as SHOW PATCHES counts it */
        int removed = strcmp(h[i].action, "remove") == 0;
        for (size_t k = 0; k < np && h[i].n_ops; k++)
            removed |= p[k].id == h[i].patch_id && !p[k].applied;
        lql_row(t);
        lql_cell_int(t, h[i].n);
        lql_cell_text(t, h[i].text);
        lql_cell_text(t, h[i].patch_name);
        lql_cell_int(t, h[i].n_ops);
        lql_cell_text(t, h[i].undone ? "undone" : removed ? "removed patch" : "active");
    }
    lql_result_note(r, "journal: %s", ed_journal_where(ed));
    vx_history_free(h, n);
    vx_patch_infos_free(p, np);
    return 0;
}
