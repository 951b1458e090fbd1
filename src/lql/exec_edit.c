/*
 * exec_edit.c — the session's hold on the mutation layer (src/edit, edit.h): the binding's
 * effective model, created by the hook USE calls after binding a container (the journal
 * opened when one exists or a path was given, else created by the first edit), its overlay
 * attached to the session after every change, and INFER's look-up in the residual-key
 * store. The statements are exec_insert.c (INSERT), exec_delete.c (DELETE, UPDATE),
 * exec_patch.c (patches, UNDO, ROLLBACK, SHOW PATCHES / HISTORY), exec_diff.c (DIFF) and
 * exec_compile.c (COMPILE, COMPACT); each parses its fields, calls src/edit and renders.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_edit.h"

static void attach(void *ctx, const eng_overlay *ov)
{
    lql_session_set_overlay(ctx, ov);
}

static void model_free(void *p)
{
    ed_model_free(p);
}

const eng_overlay *lql_edit_overlay(const lql_session *s)
{
    return s && s->edit ? ed_model_overlay(s->edit) : NULL;
}

int lql_edit_model(lql_session *s, const lql_stmt *st, int browse, ed_model **out,
                   lql_err *e)
{
    vx_container *c;
    if (lql_session_container(s, st, &c, e) < 0)
        return -1;
    if (!s->edit)
        return lql_errf(e, LQL_EEXEC, &st->at, "no edit state for the bound container: USE it "
                        "again");
    *out = s->edit;
    if (browse && !ed_model_browse(*out)) {
        /* the session's browse model (one tokenizer and token table per binding), borrowed */
        brw_model *bm = NULL;
        if (lql_session_browse(s, st, &bm, e))
            return -1;
        ed_model_set_browse(*out, bm);
    }
    return 0;
}

int lql_edit_journal(const lql_stmt *st, ed_model *ed, int create, lql_err *e)
{
    vx_err ve = {0};
    return ed_journal_open(ed, create, &ve) ? lql_err_vx(e, &ve, &st->at) : 0;
}

void lql_edit_note_recorded(lql_result *r, const ed_model *ed, const vx_record_info *info)
{
    if (info->auto_started)
        lql_result_note(r, "auto-patch started: %s (edits are journaled in %s; SAVE PATCH "
                        "\"file.vlp\" in this session exports them)", info->patch_name,
                        vx_journal_path(ed_journal(ed)));
}

char *lql_edit_text(const lql_stmt *st)
{
    return strndup(st->src, st->nsrc);
}

int lql_edit_knn_override(lql_session *s, const lql_stmt *st, eng_model *m, const int32_t *ids,
                          size_t n, lql_result *r, lql_err *e)
{
    ed_knn_hit hit;
    vx_err ve = {0};
    if (ed_knn_lookup(s->edit, m, ids, n, &hit, &ve))
        return lql_err_vx(e, &ve, &st->at);
    if (hit.entry) {
        char *piece = NULL;
        int32_t id = hit.entry->target_id;
        size_t plen;
        if (eng_tok_decode_after(eng_model_tokenizer(m), &id, 1, 0, &piece, &plen, &ve) < 0)
            piece = NULL;
        lql_result_note(r, "KNN override: the prediction is \"%s\" (cos %.4f with the key of "
                        "%s at layer %d; the table is the model's own distribution)",
                        piece ? piece : hit.entry->target, hit.cosine, hit.entry->entity,
                        hit.entry->layer);
        free(piece);
    }
    return 0;
}

/* ", N KNN-store entries" for a replay note, "" when there are none (the usual case) */
static const char *knn_part(size_t n)
{
    static _Thread_local char buf[48];
    if (!n) return "";
    snprintf(buf, sizeof buf, ", %zu KNN-store entr%s", n, n == 1 ? "y" : "ies");
    return buf;
}

int lql_edit_sync(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = s->edit;
    vx_err ve = {0};
    int stale = ed ? ed_stale(ed, &ve) : 0;
    if (stale < 0)
        return lql_err_vx(e, &ve, &st->at);
    if (!stale)
        return 0;
    if (lql_edit_model(s, st, 1, &ed, e) || (ed_refresh(ed, &ve) && lql_err_vx(e, &ve, &st->at)))
        return -1;
    ed_counts c = {0};
    if (ed_current(ed))
        ed_overlay_counts(ed_current(ed), &c);
    lql_result_note(r, "journal %s was changed by another session: %zu operations replayed "
                    "before this statement", ed_journal_place(ed), c.ops);
    return 0;
}

int lql_edit_on_use(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    vx_err ve = {0};
    const lql_span *at = lql_has(st, LQL_C_JOURNAL) ? &st->clause_at[LQL_C_JOURNAL] : &st->at;
    if (ed_model_new(s->vx, s->journal, attach, s, &ed, &ve))
        return lql_err_vx(e, &ve, at);
    s->edit = ed;
    s->edit_free = model_free;
    if (!ed_model_has_journal(ed) && !s->journal)
        return 0;
    if (lql_edit_model(s, st, 1, &ed, e) || (ed_model_load(ed, &ve) &&
                                             lql_err_vx(e, &ve, &st->at))) {
        e->line = at->line;
        e->col = at->col;
        e->len = at->len;
        return -1;
    }
    const ed_overlay *ov = ed_current(ed);
    if (ov) {
        ed_counts c;
        ed_overlay_counts(ov, &c);
        lql_result_note(r, "journal %s: %zu operations replayed (%zu tombstones, %zu replaced "
                        "features, %zu metadata overrides, %zu low-rank deltas%s)",
                        ed_journal_place(ed), c.ops, c.tombstones, c.replaced, c.meta,
                        c.lowrank, knn_part(c.knn));
    }
    return 0;
}
