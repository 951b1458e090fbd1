/*
 * exec_delete.c — DELETE and UPDATE. They address features by their own fields — layer,
 * feature, token (the feature's output token; `entity` and `target` are accepted as the
 * reference's names for it), relation, score/confidence — so `SELECT * FROM FEATURES
 * WHERE …` previews exactly what they touch; src/edit (ed_delete, ed_update) journals the
 * operations and replays the overlay.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conds.h"
#include "exec_edit.h"

/* The effective output token of a feature, trimmed as browse shows it, into buf ("" when
 * it has none); md receives its metadata. */
static const char *feature_token(const ed_model *es, int layer, int64_t f, brw_meta *md,
                                 char *buf, size_t n)
{
    buf[0] = '\0';
    if (ed_feature_meta(es, layer, f, md) == 0 && md->present)
        brw_trim(brw_token_text(ed_model_browse(es), md->top_id), buf, n);
    return buf;
}

/* ---------------------------------------------------------------- feature selection */

typedef struct fvec {
    ed_slot *v;
    size_t n, cap;
} fvec;

static int push(fvec *fv, int layer, int64_t f)
{
    if (fv->n == fv->cap) {
        size_t cap = fv->cap ? fv->cap * 2 : 64;
        ed_slot *nv = realloc(fv->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        fv->v = nv;
        fv->cap = cap;
    }
    fv->v[fv->n++] = (ed_slot){layer, f};
    return 0;
}

static int is_slot_field(const char *f)
{
    return strcmp(f, "layer") == 0 || strcmp(f, "feature") == 0;
}

static int cmp_int(int64_t a, lql_cmpop op, const lql_value *v)
{
    if (op == LQL_OP_IN) {
        for (int i = 0; i < v->n; i++)
            if (v->items[i].kind != LQL_V_STR && (double)a == v->items[i].f)
                return 1;
        return 0;
    }
    double b = v->f;
    switch (op) {
    case LQL_OP_EQ: return (double)a == b;
    case LQL_OP_NE: return (double)a != b;
    case LQL_OP_GT: return (double)a > b;
    case LQL_OP_LT: return (double)a < b;
    case LQL_OP_GE: return (double)a >= b;
    case LQL_OP_LE: return (double)a <= b;
    default: return 0;
    }
}

/* Conditions only on layer / feature: enumerate the slots directly (no down-meta needed). */
static int select_slots(const ed_model *es, const lql_cond *where, fvec *out, lql_err *e)
{
    for (const lql_cond *c = where; c; c = c->next) {
        int bad = c->op == LQL_OP_LIKE ? 1 : 0;
        if (c->op == LQL_OP_IN)
            for (int i = 0; i < c->val.n; i++)
                bad |= c->val.items[i].kind == LQL_V_STR;
        else
            bad |= c->val.kind == LQL_V_STR;
        if (bad)
            return lql_errf(e, LQL_EEXEC, &c->field_at, "%s is a number: compare it with = != "
                            "> < >= <= or IN (numbers)", c->field);
    }
    /* a layer or feature that does not exist is refused, as SELECT refuses it */
    brw_cond *conds = NULL;
    brw_value *vals = NULL;
    size_t nc = 0;
    if (lql_browse_conds(where, BRW_FEATURES, NULL, &conds, &nc, &vals, e))
        return -1;
    brw_select_opts o = {.conds = conds, .n_conds = nc, .ov = ed_model_overlay(es)};
    vx_err ve = {0};
    int bad_range = brw_select_check(ed_model_browse(es), BRW_FEATURES, &o, &ve);
    free(conds);
    free(vals);
    if (bad_range)
        return lql_err_vx(e, &ve, lql_cond_span(where, BRW_FEATURES, &ve, &where->field_at));
    for (int l = 0; l < brw_layers(ed_model_browse(es)); l++) {
        int64_t nf = brw_features(ed_model_browse(es), l);
        int layer_ok = 1;
        for (const lql_cond *c = where; c; c = c->next)
            if (strcmp(c->field, "layer") == 0 && !cmp_int(l, c->op, &c->val))
                layer_ok = 0;
        for (int64_t f = 0; layer_ok && f < nf; f++) {
            int ok = 1;
            for (const lql_cond *c = where; c && ok; c = c->next)
                if (strcmp(c->field, "feature") == 0)
                    ok = cmp_int(f, c->op, &c->val);
            if (ok && !ed_is_tombstone(ed_current(es), l, f) && push(out, l, f))
                return lql_errf(e, LQL_ENOMEM, NULL, "out of memory selecting features");
        }
    }
    return 0;
}

/* The edit statements name a feature's token "entity" or "target" too. */
static const char *feature_alias(const char *name)
{
    return strcmp(name, "entity") == 0 || strcmp(name, "target") == 0 ? "token" : name;
}

/* Every live feature matching the WHERE conditions, as SELECT … FROM FEATURES sees them. */
static int select_features(const lql_stmt *st, const ed_model *es, fvec *out, lql_result *r,
                           lql_err *e)
{
    size_t nc = 0;
    int slots_only = 1;
    for (const lql_cond *c = st->where; c; c = c->next) {
        nc++;
        slots_only &= is_slot_field(c->field);
    }
    if (nc == 0)
        return lql_errf(e, LQL_EEXEC, &st->at, "%s needs a WHERE condition",
                        lql_kind_name(st->kind));
    if (slots_only)
        return select_slots(es, st->where, out, e);
    brw_cond *conds = NULL;
    brw_value *vals = NULL;
    int rc = -1;
    if (lql_browse_conds(st->where, BRW_FEATURES, feature_alias, &conds, &nc, &vals, e))
        return -1;
    brw_select_opts o = {.conds = conds, .n_conds = nc, .limit = INT64_MAX,
                         .ov = ed_model_overlay(es)};
    brw_rows rows;
    vx_err ve = {0};
    if (brw_select(ed_model_browse(es), BRW_FEATURES, &o, &rows, &ve)) {
        lql_err_vx(e, &ve, lql_cond_span(st->where, BRW_FEATURES, &ve, &st->where->field_at));
        goto done;
    }
    rc = 0;
    for (size_t i = 0; i < rows.n && rc == 0; i++)
        if (!ed_is_tombstone(ed_current(es), rows.rows[i].layer, rows.rows[i].feature) &&
            push(out, rows.rows[i].layer, rows.rows[i].feature))
            rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory selecting features");
    if (rows.n == 0)
        lql_note_unread_token(ed_model_browse(es), BRW_FEATURES, conds, nc, r);
    brw_rows_free(&rows);
done:
    free(conds);
    free(vals);
    return rc;
}


/* DELETE and UPDATE start alike: the effective model with browse, the journal if it exists,
 * and the live features the WHERE conditions select; when some are, the journal is opened
 * (created) before anything is reported, so an edit that cannot be recorded reports none. */
static int select_live(lql_session *s, const lql_stmt *st, ed_model **ed, fvec *sel,
                       lql_result *r, lql_err *e)
{
    return lql_edit_model(s, st, 1, ed, e) || lql_edit_journal(st, *ed, 0, e) ||
                   select_features(st, *ed, sel, r, e) ||
                   (sel->n && lql_edit_journal(st, *ed, 1, e)) ? -1 : 0;
}

/* Record through call (ed_delete / ed_update's result), then the statement's note. */
static int recorded(const lql_stmt *st, const ed_model *ed, int rc, const vx_err *ve,
                    const vx_record_info *info, const char *what, size_t n, lql_result *r,
                    lql_err *e)
{
    if (rc) {
        lql_result_drop_tables(r);     /* nothing was deleted or updated */
        return lql_err_vx(e, ve, &st->at);
    }
    lql_edit_note_recorded(r, ed, info);
    lql_result_note(r, "%s %zu feature%s (history %lld, patch %s)", what, n, n == 1 ? "" : "s",
                    (long long)info->history_n, info->patch_name);
    return 0;
}

int lql_h_delete(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    fvec sel = {0};
    if (select_live(s, st, &ed, &sel, r, e)) {
        free(sel.v);
        return -1;
    }
    static const lql_colspec cols[] = {{"layer", LQL_INT, 0}, {"feature", LQL_INT, 0},
                                       {"token", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "deleted", 3, cols);
    char *text = lql_edit_text(st);
    if (!t || !text) {
        free(sel.v);
        free(text);
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    }
    vx_err pe = {0};
    if (ed_prepare_meta(ed, sel.v, sel.n, &pe)) {
        free(sel.v);
        free(text);
        return lql_err_vx(e, &pe, &st->at);
    }
    for (size_t i = 0; i < sel.n; i++) {
        brw_meta md;
        char tok[256];
        lql_row(t);
        lql_cell_int(t, sel.v[i].layer);
        lql_cell_int(t, sel.v[i].feature);
        lql_cell_text(t, feature_token(ed, sel.v[i].layer, sel.v[i].feature, &md, tok,
                                       sizeof tok));
    }
    int rc = 0;
    if (sel.n == 0) {
        lql_result_note(r, "no live feature matches: nothing deleted");
    } else {
        vx_record_info info;
        vx_err ve = {0};
        rc = recorded(st, ed, ed_delete(ed, text, sel.v, sel.n, &info, &ve), &ve, &info,
                      "deleted", sel.n, r, e);
    }
    free(text);
    free(sel.v);
    return rc;
}

/* UPDATE's target: a feature's metadata names one token, so a target of several is
 * refused rather than cut to its first. */
static int target_id(const eng_tokenizer *tok, const char *target, const lql_span *at,
                     int32_t *out, lql_err *e)
{
    int32_t *ids = NULL;
    size_t n = 0;
    vx_err ve = {0};
    if (ed_target_ids(tok, target, &ids, &n, &ve))
        return lql_err_vx(e, &ve, at);
    *out = ids[0];
    free(ids);
    if (n > 1)
        return lql_errf(e, LQL_EEXEC, at, "target \"%s\" is %zu tokens; a feature's metadata "
                        "names one token", target, n);
    return 0;
}

/* UPDATE without a target: the selected features that have no down-meta are left out
 * (*none of them, said in a note), since a confidence is that of a feature's output token
 * and they have none (a compiled tombstone, a zero down column, or a container whose
 * down-meta cannot be computed); scoring them would invent token 0. */
static int without_meta(ed_model *ed, fvec *sel, size_t *none, lql_result *r, lql_err *e)
{
    vx_err ve = {0};
    if (ed_prepare_meta(ed, sel->v, sel->n, &ve))
        return lql_err_vx(e, &ve, NULL);
    size_t w = 0;
    char first[96] = "";
    for (size_t i = 0; i < sel->n; i++) {
        brw_meta md;
        if (ed_feature_meta(ed, sel->v[i].layer, sel->v[i].feature, &md) == 0 && md.present)
            sel->v[w++] = sel->v[i];
        else if ((*none)++ == 0)
            snprintf(first, sizeof first, "layer %d feature %lld", sel->v[i].layer,
                     (long long)sel->v[i].feature);
    }
    sel->n = w;
    if (*none) {
        const brw_model *bm = ed_model_browse(ed);
        if (brw_meta_source(bm) == BRW_META_NONE)
            brw_meta_refuse(bm, &ve);
        lql_result_note(r, "%zu feature%s without down-meta left as %s (%s%s): a confidence is "
                        "that of a feature's output token; SET target = \"…\" gives one%s%s",
                        *none, *none == 1 ? "" : "s", *none == 1 ? "it is" : "they are", first,
                        *none > 1 ? ", …" : "", ve.msg[0] ? "; " : "", ve.msg);
    }
    return 0;
}

int lql_h_update(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    if (lql_edit_model(s, st, 1, &ed, e))
        return -1;
    const lql_assign *target = NULL;
    double conf = NAN;
    for (const lql_assign *a = st->sets; a; a = a->next) {
        if (strcmp(a->field, "target") == 0 || strcmp(a->field, "token") == 0) {
            if (a->val.kind != LQL_V_STR)
                return lql_errf(e, LQL_EEXEC, &a->val.at, "%s takes a string", a->field);
            target = a;
        } else if (strcmp(a->field, "confidence") == 0 || strcmp(a->field, "score") == 0 ||
                   strcmp(a->field, "c_score") == 0) {
            if ((a->val.kind != LQL_V_INT && a->val.kind != LQL_V_FLOAT) || !isfinite(a->val.f))
                return lql_errf(e, LQL_EEXEC, &a->val.at, "%s takes a number", a->field);
            if (!(a->val.f >= 0 && a->val.f <= 1))
                return lql_errf(e, LQL_EEXEC, &a->val.at, "%s must be between 0 and 1 (got "
                                "%.15g)", a->field, a->val.f);
            conf = a->val.f;
        } else {
            return lql_errf(e, LQL_EEXEC, &a->field_at, "cannot SET \"%s\": UPDATE EDGES sets "
                            "target and confidence", a->field);
        }
    }
    int32_t tid = -1;
    const brw_model *bm = ed_model_browse(ed);
    if (target && target_id(brw_tokenizer(bm), target->val.s, &target->val.at, &tid, e))
        return -1;
    fvec sel = {0};
    if (select_live(s, st, &ed, &sel, r, e)) {
        free(sel.v);
        return -1;
    }
    size_t none = 0;
    if (tid < 0 && without_meta(ed, &sel, &none, r, e)) {
        free(sel.v);
        return -1;
    }
    static const lql_colspec cols[] = {{"layer", LQL_INT, 0}, {"feature", LQL_INT, 0},
                                       {"before", LQL_TEXT, 0}, {"after", LQL_TEXT, 0},
                                       {"confidence", LQL_FLOAT, 4}};
    lql_table *t = lql_result_table(r, "updated", 5, cols);
    ed_update_row *rows = calloc(sel.n + 1, sizeof *rows);
    char *text = lql_edit_text(st);
    if (!rows || !t || !text) {
        free(sel.v);
        free(rows);
        free(text);
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    }
    vx_record_info info;
    vx_err ve = {0};
    int urc = sel.n ? ed_update(ed, text, sel.v, sel.n, tid, conf, rows, &info, &ve) : 0;
    for (size_t i = 0; i < sel.n; i++) {
        char before[256] = "", after[256] = "";
        if (rows[i].before.present)
            brw_trim(brw_token_text(bm, rows[i].before.top_id), before, sizeof before);
        const char *piece = rows[i].top_id >= 0 ? brw_token_text(bm, rows[i].top_id) : NULL;
        brw_trim(piece ? piece : "", after, sizeof after);
        lql_row(t);
        lql_cell_int(t, sel.v[i].layer);
        lql_cell_int(t, sel.v[i].feature);
        lql_cell_text(t, before);
        lql_cell_text(t, after);
        lql_cell_float(t, rows[i].c_score);
    }
    int rc = 0;
    if (sel.n == 0)
        lql_result_note(r, none ? "nothing updated" : "no live feature matches: nothing updated");
    else
        rc = recorded(st, ed, urc, &ve, &info, "updated", sel.n, r, e);
    free(text);
    free(rows);
    free(sel.v);
    return rc;
}
