/*
 * exec_edit.c — the mutation statements: INSERT, DELETE, UPDATE, the patch statements, UNDO,
 * ROLLBACK, SHOW PATCHES / HISTORY, and the hook USE calls after binding a container.
 *
 * State per binding (lql_session.edit): the journal (storage/journal.h) — opened at USE
 * when one exists or a path was given, else created by the first edit — plus a browse
 * model for geometry, tokenizer and down-meta, and the overlay replayed from the journal
 * (browse/edit_overlay.h). After every statement that changes the journal the overlay is
 * rebuilt from the journal and attached to the session, so INFER / TRACE / WALK see the
 * effective model. The base container is never written.
 *
 * DELETE and UPDATE address features by their own fields — layer, feature, token (the
 * feature's output token; `entity` and `target` are accepted as the reference's names for
 * it), relation, score/confidence — so `SELECT * FROM FEATURES WHERE …` previews exactly
 * what they touch. INSERT is a rank-1 covariance-whitened down_proj update
 * (engine/edit_memit.h) journaled as a low-rank insert; INSERT … MODE KNN records the
 * canonical prompt's residual as a key of the overlay's residual-key store, which INFER
 * consults (lql_edit_knn_override). COMPILE materialises the overlay into a derived
 * container (browse/edit_compile.h) and gates it: INFER logits, TRACE lens and WALK hits
 * of its probes must agree with the overlay's within a storage-dependent tolerance, or the
 * output is removed. DIFF compares two effective states (CURRENT or a container): features
 * whose tombstone or metadata differ, and per-tensor value deltas. COMPACT (edit_compact.h):
 * storage reorganised, every dropped file named, answers compared.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "browse.h"
#include "conds.h"
#include "edit.h"
#include "edit_compact.h"
#include "edit_compile.h"
#include "edit_gate.h"
#include "edit_memit.h"
#include "edit_overlay.h"
#include "files.h"
#include "interp.h"
#include "journal.h"

/* What INSERT computes once per binding and edit site (a dense layer, or a routed expert
 * of a MoE layer: expert ≥ 0): the activation covariance and the frame decoys' keys. */
typedef struct edit_site_cache {
    double *cov;              /* [F×F], NULL: an empty entry */
    int layer, expert, F;
    int64_t count;            /* corpus positions behind it */
    float *frame;             /* keys of "The {w} is" at the site [n_frame × F] */
    int n_frame;
    float *xin;               /* a gated dense layer: the FFN inputs of the corpus and of
                               * "The {w} is", a gated slot's negatives [n_xin × H] */
    int64_t n_xin;
} edit_site_cache;
#define SITE_CACHE 8          /* a multi-token target on a MoE layer visits several experts */
#define SITE_CACHE_BYTES ((size_t)256 << 20)   /* older sites beyond it are dropped */

typedef struct edit_state {
    char *jpath;              /* the journal's path (explicit or located); NULL: no place */
    char *jerr;               /* why there is no place (said by the first edit), or NULL */
    int located;              /* jpath is the default place (its directory may be missing) */
    vx_journal *j;            /* NULL until opened */
    brw_model *bm;            /* the session's browse model, borrowed on first use */
    brw_edit_overlay *ov;     /* the replayed overlay, NULL when nothing is active */
    edit_site_cache sites[SITE_CACHE]; /* INSERT's per-site statistics, most recent first */
    int32_t *pres_ids;        /* INSERT: preserved prompts (corpus prefixes), back to back */
    int *pres_lens;
    int n_pres;
} edit_state;

static void state_free(void *p)
{
    edit_state *es = p;
    if (!es)
        return;
    vx_journal_close(es->j);
    brw_edit_overlay_free(es->ov);
    for (int i = 0; i < SITE_CACHE; i++) {
        free(es->sites[i].cov);
        free(es->sites[i].frame);
        free(es->sites[i].xin);
    }
    free(es->pres_ids);
    free(es->pres_lens);
    free(es->jpath);
    free(es->jerr);
    free(es);
}

const brw_overlay *lql_edit_overlay(const lql_session *s)
{
    const edit_state *es = s ? s->edit : NULL;
    return es && es->ov ? brw_edit_overlay_browse(es->ov) : NULL;
}

/* ---------------------------------------------------------------- helpers */

static const char *model_name(const vx_container *c)
{
    const cJSON *idx = vx_index_json(c);
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(idx, "model"));
    return name ? name : "";
}

/* The statement's state; -1 when nothing is bound. */
static int state_of(lql_session *s, const lql_stmt *st, edit_state **out, lql_err *e)
{
    vx_container *c;
    if (lql_session_container(s, st, &c, e) < 0)
        return -1;
    if (!s->edit)
        return lql_errf(e, LQL_EEXEC, &st->at, "no edit state for the bound container: USE it "
                        "again");
    *out = s->edit;
    return 0;
}

/* Open the journal. Statements that only read pass create 0: a journal that does not exist
 * yet stays absent (es->j NULL: no edits), so a read-only session creates nothing; the
 * first edit (create 1) creates it, and its directory when it is the default place. */
static int open_journal(lql_session *s, const lql_stmt *st, edit_state *es, int create,
                        lql_err *e)
{
    if (es->j)
        return 0;
    if (!es->jpath)
        return create ? lql_errf(e, LQL_EEXEC, &st->at, "%s", es->jerr) : 0;
    if (!create && strcmp(es->jpath, ":memory:") != 0 && access(es->jpath, F_OK) != 0)
        return 0;
    vx_err ve = {0};
    if ((es->located && vx_journal_create_dir(es->jpath, &ve)) ||
        vx_journal_open(es->jpath, vx_index_sha256(s->vx), model_name(s->vx), &es->j, &ve))
        return lql_err_vx(e, &ve, &st->at);
    return 0;
}

/* The journal's active operations; none while it does not exist. */
static int active_ops(const edit_state *es, vx_op **ops, size_t *n, vx_err *ve)
{
    *ops = NULL;
    *n = 0;
    return es->j ? vx_journal_active_ops(es->j, ops, n, ve) : 0;
}

static int open_browse(lql_session *s, const lql_stmt *st, edit_state *es, lql_err *e)
{
    if (es->bm)
        return 0;
    /* the session's browse model (one tokenizer and token table per binding), borrowed */
    if (lql_session_browse(s, st, &es->bm, e)) {
        es->bm = NULL;
        return -1;
    }
    return 0;
}

/* Replay the journal's active operations into a fresh overlay and attach it. */
static int refresh(lql_session *s, const lql_stmt *st, edit_state *es, lql_err *e)
{
    vx_op *ops = NULL;
    size_t n = 0;
    vx_err ve = {0};
    brw_edit_overlay *ov = NULL;
    if (open_browse(s, st, es, e) || open_journal(s, st, es, 0, e))
        return -1;
    if (active_ops(es, &ops, &n, &ve))
        return lql_err_vx(e, &ve, &st->at);
    int rc = n ? brw_edit_overlay_build(es->bm, ops, n, &ov, &ve) : 0;
    vx_ops_free(ops, n);
    if (rc)
        return lql_err_vx(e, &ve, &st->at);
    lql_session_set_overlay(s, ov ? brw_edit_overlay_eng(ov) : NULL);
    brw_edit_overlay_free(es->ov);
    es->ov = ov;
    return 0;
}

static void note_recorded(lql_result *r, const edit_state *es, const vx_record_info *info)
{
    if (info->auto_started)
        lql_result_note(r, "auto-patch started: %s (edits are journaled in %s; SAVE PATCH "
                        "\"file.vlp\" exports them)", info->patch_name,
                        vx_journal_path(es->j));
}

/* The effective output token of a feature, trimmed as browse shows it, into buf ("" when
 * it has none); md receives its metadata. */
static const char *feature_token(const edit_state *es, int layer, int64_t f, brw_meta *md,
                                 char *buf, size_t n)
{
    const brw_overlay *ov = es->ov ? brw_edit_overlay_browse(es->ov) : NULL;
    buf[0] = '\0';
    if (brw_feature_meta(es->bm, ov, layer, f, md) == 0 && md->present)
        brw_trim(brw_token_text(es->bm, md->top_id), buf, n);
    return buf;
}

/* ---------------------------------------------------------------- feature selection */

typedef struct fsel {
    int layer;
    int64_t feature;
} fsel;

typedef struct fvec {
    fsel *v;
    size_t n, cap;
} fvec;

static int push(fvec *fv, int layer, int64_t f)
{
    if (fv->n == fv->cap) {
        size_t cap = fv->cap ? fv->cap * 2 : 64;
        fsel *nv = realloc(fv->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        fv->v = nv;
        fv->cap = cap;
    }
    fv->v[fv->n++] = (fsel){layer, f};
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
static int select_slots(const edit_state *es, const lql_cond *where, fvec *out, lql_err *e)
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
    brw_select_opts o = {.conds = conds, .n_conds = nc};
    vx_err ve = {0};
    int bad_range = brw_select_check(es->bm, BRW_FEATURES, &o, &ve);
    free(conds);
    free(vals);
    if (bad_range)
        return lql_err_vx(e, &ve, &where->field_at);
    for (int l = 0; l < brw_layers(es->bm); l++) {
        int64_t nf = brw_features(es->bm, l);
        int layer_ok = 1;
        for (const lql_cond *c = where; c; c = c->next)
            if (strcmp(c->field, "layer") == 0 && !cmp_int(l, c->op, &c->val))
                layer_ok = 0;
        for (int64_t f = 0; layer_ok && f < nf; f++) {
            int ok = 1;
            for (const lql_cond *c = where; c && ok; c = c->next)
                if (strcmp(c->field, "feature") == 0)
                    ok = cmp_int(f, c->op, &c->val);
            if (ok && !brw_edit_is_tombstone(es->ov, l, f) && push(out, l, f))
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
static int select_features(const lql_stmt *st, const edit_state *es, fvec *out, lql_err *e)
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
                         .ov = es->ov ? brw_edit_overlay_browse(es->ov) : NULL};
    brw_rows rows;
    vx_err ve = {0};
    if (brw_select(es->bm, BRW_FEATURES, &o, &rows, &ve)) {
        lql_err_vx(e, &ve, &st->where->field_at);
        goto done;
    }
    rc = 0;
    for (size_t r = 0; r < rows.n && rc == 0; r++)
        if (!brw_edit_is_tombstone(es->ov, rows.rows[r].layer, rows.rows[r].feature) &&
            push(out, rows.rows[r].layer, rows.rows[r].feature))
            rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory selecting features");
    brw_rows_free(&rows);
done:
    free(conds);
    free(vals);
    return rc;
}

/* Record ops as one statement, rebuild the overlay, report the auto-patch. */
static int record(lql_session *s, const lql_stmt *st, edit_state *es, const vx_op *ops,
                  size_t n, lql_result *r, vx_record_info *info, lql_err *e)
{
    vx_err ve = {0};
    if (open_journal(s, st, es, 1, e))
        return -1;
    char *text = strndup(st->src, st->nsrc);
    if (!text)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    int rc = vx_journal_record(es->j, text, ops, n, info, &ve);
    free(text);
    if (rc)
        return lql_err_vx(e, &ve, &st->at);
    note_recorded(r, es, info);
    return refresh(s, st, es, e);
}

/* ---------------------------------------------------------------- DELETE / UPDATE */

int lql_h_delete(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    fvec sel = {0};
    if (state_of(s, st, &es, e) || open_browse(s, st, es, e) ||
        open_journal(s, st, es, 0, e) || select_features(st, es, &sel, e)) {
        free(sel.v);
        return -1;
    }
    static const lql_colspec cols[] = {{"layer", LQL_INT, 0}, {"feature", LQL_INT, 0},
                                       {"token", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "deleted", 3, cols);
    vx_op *ops = calloc(sel.n + 1, sizeof *ops);
    if (!ops || !t) {
        free(sel.v);
        free(ops);
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    }
    for (size_t i = 0; i < sel.n; i++) {
        brw_meta md;
        char tok[256];
        vx_op_init(&ops[i], VX_OP_DELETE);
        ops[i].layer = sel.v[i].layer;
        ops[i].feature = (int)sel.v[i].feature;
        lql_row(t);
        lql_cell_int(t, sel.v[i].layer);
        lql_cell_int(t, sel.v[i].feature);
        lql_cell_text(t, feature_token(es, sel.v[i].layer, sel.v[i].feature, &md, tok,
                                       sizeof tok));
    }
    int rc = 0;
    if (sel.n == 0) {
        lql_result_note(r, "no live feature matches: nothing deleted");
    } else {
        vx_record_info info;
        rc = record(s, st, es, ops, sel.n, r, &info, e);
        if (rc == 0)
            lql_result_note(r, "deleted %zu feature%s (history %lld, patch %s)", sel.n,
                            sel.n == 1 ? "" : "s", (long long)info.history_n, info.patch_name);
    }
    vx_ops_free(ops, sel.n);
    free(sel.v);
    return rc;
}

/* The token ids of " target" (no specials) as the model would write them after the
 * prompt, leading lone word-boundary pieces skipped: *out malloc'd, *n ≥ 1; at names the
 * target in errors. */
static int target_ids(const eng_tokenizer *tok, const char *target, const lql_span *at,
                      int32_t **out, size_t *n, lql_err *e)
{
    size_t len = strlen(target);
    char *text = malloc(len + 2);
    if (!text)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    text[0] = ' ';
    memcpy(text + 1, target, len + 1);
    int32_t *ids = NULL;
    vx_err ve = {0};
    int rc = eng_tok_encode(tok, text, len + 1, 0, &ids, n, &ve);
    free(text);
    if (rc)
        return lql_err_vx(e, &ve, at);
    size_t skip = 0;
    for (const char *p; skip < *n && (p = eng_tok_piece(tok, ids[skip])) &&
                        (!strcmp(p, "\xe2\x96\x81") || !strcmp(p, "\xc4\xa0") || !strcmp(p, " "));)
        skip++;
    if (skip == *n) {
        free(ids);
        return lql_errf(e, LQL_EEXEC, at, "target \"%s\" has no tokens", target);
    }
    memmove(ids, ids + skip, (*n - skip) * sizeof *ids);
    *n -= skip;
    *out = ids;
    return 0;
}

/* UPDATE's target: a feature's metadata names one token, so a target of several is
 * refused rather than cut to its first. */
static int target_id(const eng_tokenizer *tok, const char *target, const lql_span *at,
                     int32_t *out, lql_err *e)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (target_ids(tok, target, at, &ids, &n, e))
        return -1;
    *out = ids[0];
    free(ids);
    if (n > 1)
        return lql_errf(e, LQL_EEXEC, at, "target \"%s\" is %zu tokens; a feature's metadata "
                        "names one token", target, n);
    return 0;
}

int lql_h_update(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    if (state_of(s, st, &es, e) || open_browse(s, st, es, e))
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
                                "%g)", a->field, a->val.f);
            conf = a->val.f;
        } else {
            return lql_errf(e, LQL_EEXEC, &a->field_at, "cannot SET \"%s\": UPDATE EDGES sets "
                            "target and confidence", a->field);
        }
    }
    int32_t tid = -1;
    if (target && target_id(brw_tokenizer(es->bm), target->val.s, &target->val.at, &tid, e))
        return -1;
    fvec sel = {0};
    if (open_journal(s, st, es, 0, e) || select_features(st, es, &sel, e)) {
        free(sel.v);
        return -1;
    }
    static const lql_colspec cols[] = {{"layer", LQL_INT, 0}, {"feature", LQL_INT, 0},
                                       {"before", LQL_TEXT, 0}, {"after", LQL_TEXT, 0},
                                       {"confidence", LQL_FLOAT, 4}};
    lql_table *t = lql_result_table(r, "updated", 5, cols);
    vx_op *ops = calloc(sel.n + 1, sizeof *ops);
    if (!ops || !t) {
        free(sel.v);
        free(ops);
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    }
    int rc = 0;
    for (size_t i = 0; i < sel.n && rc == 0; i++) {
        brw_meta md;
        char before[256], after[256] = "";
        feature_token(es, sel.v[i].layer, sel.v[i].feature, &md, before, sizeof before);
        vx_op *op = &ops[i];
        vx_op_init(op, VX_OP_UPDATE);
        op->layer = sel.v[i].layer;
        op->feature = (int)sel.v[i].feature;
        op->has_meta = 1;
        op->meta_id = tid >= 0 ? tid : md.present ? md.top_id : -1;
        op->meta_c = !isnan(conf) ? conf : md.present ? md.c_score : 0.0;
        const char *piece = op->meta_id >= 0 ? brw_token_text(es->bm, (int32_t)op->meta_id)
                                             : NULL;
        brw_trim(piece ? piece : "", after, sizeof after);
        vx_err ve = {0};
        if (vx_op_set_str(&op->meta_token, piece ? piece : "", &ve))
            rc = lql_err_vx(e, &ve, &st->at);
        lql_row(t);
        lql_cell_int(t, op->layer);
        lql_cell_int(t, op->feature);
        lql_cell_text(t, before);
        lql_cell_text(t, after);
        lql_cell_float(t, op->meta_c);
    }
    if (rc == 0 && sel.n == 0) {
        lql_result_note(r, "no live feature matches: nothing updated");
    } else if (rc == 0) {
        vx_record_info info;
        rc = record(s, st, es, ops, sel.n, r, &info, e);
        if (rc == 0)
            lql_result_note(r, "updated %zu feature%s (history %lld, patch %s)", sel.n,
                            sel.n == 1 ? "" : "s", (long long)info.history_n, info.patch_name);
    }
    vx_ops_free(ops, sel.n);
    free(sel.v);
    return rc;
}

/* ---------------------------------------------------------------- INSERT */

/* Texts the covariance corpus is sampled from (each followed by 8 sampled tokens: what is
 * preserved is mostly prompts, whose activations are short-context ones — measured on the
 * held-out set, 256 texts of 8 tokens kept more unseen prompts than 32 of 48). */
static const char *const corpus_starts[] = {
    "The", "In", "A", "It", "He", "She", "We", "Once", "This", "There", "I", "They",
    "When", "My", "All", "What",
};
#define CORPUS_SEQS 256
#define CORPUS_LEN 8
#define CORPUS_SEED 1
#define DECOYS 40            /* template neighbours "The {relation} of {W} is" */
#define FRAME_DECOYS 100     /* "The {w} is": prompts of the fact's frame, any word */
#define DECOY_WEIGHT 2.0     /* both decoy sets together, relative to the corpus */
/* Preserved prompts: corpus prefixes whose next-token distribution steers the optimisation
 * of u (KL, edit_memit.h) — measured (MUTATION.md): mean KL on controls 0.0296 → 0.0146
 * held-out, 0.0112 → 0.0021 suite; 128 prompts gained 0.001 more for twice the cost. */
#define PRESERVED 64
#define KL_WEIGHT 1e5
#define GATE_MARGIN 8.0f     /* a gated slot: SiLU(−8) = −0.003 of SiLU(8) off its prompt */

/* The activation covariance of an edit site (a dense layer, or a routed expert of a MoE
 * layer) and its frame decoys, once per binding and site. */
static int layer_cov(edit_state *es, eng_model *m, int layer, int expert, const lql_stmt *st,
                     lql_result *r, lql_err *e, const edit_site_cache **out)
{
    for (int i = 0; i < SITE_CACHE; i++)
        if (es->sites[i].cov && es->sites[i].layer == layer && es->sites[i].expert == expert) {
            *out = &es->sites[i];
            return 0;
        }
    int32_t *ids = NULL;
    int *lens = NULL;
    double *cov = NULL;
    float *frame = NULL, *xin = NULL, *xfr = NULL;
    int64_t count = 0, nxin = 0;
    int nf = 0, nxf = 0;
    vx_err ve = {0};
    int rc = eng_edit_corpus(m, corpus_starts, (int)(sizeof corpus_starts / sizeof *corpus_starts),
                             CORPUS_SEQS, CORPUS_LEN, CORPUS_SEED, &ids, &lens, &ve) ||
             eng_edit_covariance(m, layer, expert, ids, lens, CORPUS_SEQS, &cov, &count, &ve) ||
             eng_edit_frame_decoys(m, layer, expert, FRAME_DECOYS, &frame, &nf, &ve);
    /* a gated slot's negatives: the corpus and the frame decoys at the FFN input */
    if (!rc && expert < 0 && eng_edit_gate_ok(m, layer)) {
        rc = eng_edit_inputs(m, layer, ids, lens, CORPUS_SEQS, &xin, &nxin, &ve) ||
             eng_edit_decoy_inputs(m, layer, NULL, NULL, FRAME_DECOYS, &xfr, &nxf, &ve);
        const int H = eng_model_hidden(m);
        float *all = rc ? NULL : realloc(xin, (size_t)(nxin + nxf) * H * sizeof *all);
        if (!rc && !all)
            rc = vx_errf(&ve, VX_ENOMEM, "out of memory");
        if (all) {
            memcpy(all + (size_t)nxin * H, xfr, (size_t)nxf * H * sizeof *all);
            xin = all;
            nxin += nxf;
        }
        free(xfr);
    }
    /* preserved prompts (once per binding, whatever the site): prefixes of spread corpus
     * texts, 3 to 9 tokens long */
    const int npres = es->pres_ids ? 0 : PRESERVED;
    int32_t *pids = rc || !npres ? NULL : malloc((size_t)(npres * 9 + 1) * sizeof *pids);
    int *plens = rc || !npres ? NULL : malloc((size_t)(npres + 1) * sizeof *plens);
    if (!rc && npres && (!pids || !plens))
        rc = vx_errf(&ve, VX_ENOMEM, "out of memory");
    size_t used = 0;
    int q = 0;
    for (int i = 0, off = 0; !rc && q < npres && i < CORPUS_SEQS; off += lens[i++]) {
        if (i % (CORPUS_SEQS / npres))
            continue;
        int len = 3 + q % 7 < lens[i] ? 3 + q % 7 : lens[i];
        memcpy(pids + used, ids + off, (size_t)len * sizeof *pids);
        used += (size_t)len;
        plens[q++] = len;
    }
    free(ids);
    free(lens);
    if (rc) {
        free(cov);
        free(frame);
        free(xin);
        free(pids);
        free(plens);
        return lql_err_vx(e, &ve, &st->at);
    }
    if (npres) {
        es->pres_ids = pids;
        es->pres_lens = plens;
        es->n_pres = q;
    }
    free(es->sites[SITE_CACHE - 1].cov);
    free(es->sites[SITE_CACHE - 1].frame);
    free(es->sites[SITE_CACHE - 1].xin);
    memmove(es->sites + 1, es->sites, (SITE_CACHE - 1) * sizeof *es->sites);
    const int F = expert >= 0 ? eng_model_expert_features(m) : eng_model_ffn_features(m, layer);
    es->sites[0] = (edit_site_cache){cov, layer, expert, F, count, frame, nf, xin, nxin};
    *out = &es->sites[0];
    /* a dense layer's covariance may be 128 MB (4096 features): keep what fits the budget */
    size_t bytes = 0;
    for (int i = 0; i < SITE_CACHE; i++) {
        bytes += (size_t)es->sites[i].F * (size_t)es->sites[i].F * sizeof(double);
        if (i > 0 && bytes > SITE_CACHE_BYTES) {
            free(es->sites[i].cov);
            free(es->sites[i].frame);
            free(es->sites[i].xin);
            es->sites[i] = (edit_site_cache){0};
        }
    }
    if (expert >= 0)
        lql_result_note(r, "layer %d expert %d: activation covariance over %lld positions of %d "
                        "sampled texts (once per session)", layer, expert, (long long)count,
                        CORPUS_SEQS);
    else
        lql_result_note(r, "layer %d: activation covariance over %lld positions of %d sampled "
                        "texts (once per session)", layer, (long long)count, CORPUS_SEQS);
    return 0;
}

/* Keys of the active low-rank inserts at a site (layer, expert): [*n × F], malloc'd. */
static int layer_keys(edit_state *es, int layer, int expert, int F, float **keys, int *n,
                      lql_err *e, const lql_stmt *st)
{
    vx_op *ops = NULL;
    size_t nops = 0;
    vx_err ve = {0};
    *keys = NULL;
    *n = 0;
    if (active_ops(es, &ops, &nops, &ve))
        return lql_err_vx(e, &ve, &st->at);
    size_t rows = 0;
    for (size_t i = 0; i < nops; i++) {
        const vx_opvec *key = vx_op_vec(&ops[i], "key");
        if (ops[i].kind == VX_OP_INSERT && ops[i].layer == layer &&
            ops[i].expert == expert && key && key->cols == F)
            rows += (size_t)key->rows;
    }
    float *k = malloc((rows + 1) * (size_t)F * sizeof *k);
    if (!k) {
        vx_ops_free(ops, nops);
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    }
    for (size_t i = 0; i < nops; i++) {
        const vx_opvec *key = vx_op_vec(&ops[i], "key");
        if (ops[i].kind != VX_OP_INSERT || ops[i].layer != layer || ops[i].expert != expert ||
            !key || key->cols != F)
            continue;
        memcpy(k + (size_t)*n * F, key->data, (size_t)key->rows * F * sizeof *k);
        *n += (int)key->rows;
    }
    vx_ops_free(ops, nops);
    *keys = k;
    return 0;
}

/* The canonical prompts of the active inserts at dense layer `layer` other than prompt
 * (a gated slot stays off on them): *out [*n] malloc'd strings. */
static int fact_prompts(edit_state *es, int layer, const char *prompt, char ***out, int *n,
                        lql_err *e)
{
    vx_op *ops = NULL;
    size_t nops = 0;
    vx_err ve = {0};
    *out = NULL;
    *n = 0;
    if (active_ops(es, &ops, &nops, &ve))
        return lql_err_vx(e, &ve, NULL);
    char **p = malloc((nops + 1) * sizeof *p);
    for (size_t i = 0; p && i < nops; i++) {
        if (ops[i].kind != VX_OP_INSERT || ops[i].layer != layer || ops[i].expert >= 0 ||
            !ops[i].entity || !ops[i].relation)
            continue;
        char *q = eng_edit_prompt(ops[i].relation, ops[i].entity);
        int dup = q && !strcmp(q, prompt);
        for (int k = 0; q && k < *n && !dup; k++)
            dup = !strcmp(q, p[k]);
        if (dup || !q)
            free(q);
        else
            p[(*n)++] = q;
    }
    vx_ops_free(ops, nops);
    if (!p)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    *out = p;
    return 0;
}

/* The residual after every layer at the last position of a forward pass. */
typedef struct resid_cap {
    int H;
    float *out;               /* [layers, H] */
} resid_cap;

static void cap_layer(void *ctx, int layer, int pos0, int n, const float *attn,
                      const float *ffn, const float *resid)
{
    (void)pos0;
    (void)attn;
    (void)ffn;
    resid_cap *c = ctx;
    memcpy(c->out + (size_t)layer * c->H, resid + (size_t)(n - 1) * c->H,
           (size_t)c->H * sizeof *c->out);
}

/* Run ids through m (its overlay attached) and fill res [layers, hidden] with the residual
 * after each layer at the last position; logits (may be NULL) gets the next-token logits. */
static int last_residuals(eng_model *m, const int32_t *ids, size_t n, float *res,
                          float *logits, vx_err *ve)
{
    float *lg = logits ? logits : malloc((size_t)eng_model_vocab(m) * sizeof *lg);
    eng_session *ss = NULL;
    resid_cap cap = {eng_model_hidden(m), res};
    eng_observer obs = {&cap, NULL, cap_layer, NULL, NULL};
    int rc = !lg ? vx_errf(ve, VX_ENOMEM, "out of memory")
                 : eng_session_new(m, (int)n, &ss, ve) ||
                       eng_forward(ss, ids, (int)n, lg, &obs, ve);
    eng_session_free(ss);
    if (lg != logits)
        free(lg);
    return rc ? -1 : 0;
}

int lql_edit_knn_override(lql_session *s, const lql_stmt *st, eng_model *m, const int32_t *ids,
                          size_t n, lql_result *r, lql_err *e)
{
    edit_state *es = s->edit;
    size_t nk = 0;
    const brw_knn_entry *k = brw_edit_knn(es ? es->ov : NULL, &nk);
    if (!nk)
        return 0;
    const int L = eng_model_layers(m), H = eng_model_hidden(m);
    float *res = malloc((size_t)L * H * sizeof *res);
    vx_err ve = {0};
    if (!res)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    if (last_residuals(m, ids, n, res, NULL, &ve)) {
        free(res);
        return lql_err_vx(e, &ve, &st->at);
    }
    double best = BRW_KNN_THRESHOLD;
    const brw_knn_entry *hit = NULL;
    for (size_t i = 0; i < nk; i++) {
        if (k[i].layer < 0 || k[i].layer >= L)
            continue;
        const float *x = res + (size_t)k[i].layer * H;
        double dot = 0, nn = 0;
        for (int h = 0; h < H; h++) {
            dot += (double)x[h] * k[i].key[h];
            nn += (double)x[h] * x[h];
        }
        double cosv = nn > 0 ? dot / sqrt(nn) : 0;
        if (cosv > best) {
            best = cosv;
            hit = &k[i];
        }
    }
    free(res);
    if (hit) {
        char *piece = NULL;
        int32_t id = hit->target_id;
        if (eng_tok_decode(eng_model_tokenizer(m), &id, 1, 0, &piece, &ve) < 0)
            piece = NULL;
        lql_result_note(r, "KNN override: the prediction is \"%s\" (cos %.4f with the key of "
                        "%s at layer %d; the table is the model's own distribution)",
                        piece ? piece : hit->target, best, hit->entity, hit->layer);
        free(piece);
    }
    return 0;
}

/* Where an INSERT installs by default: the last layer (MEMIT) or the layer before the end
 * of the knowledge band (the reference's KNN and COMPOSE default). */
typedef enum { INSERT_AT_LAST, INSERT_AT_KNOWLEDGE } insert_default;
/* What an INSERT mode edits: nothing of the FFN (KNN), a dense FFN (COMPOSE), or a dense
 * FFN or the routed experts of a MoE layer (MEMIT). */
typedef enum { SITE_NONE, SITE_DENSE, SITE_ROUTED } edit_site;

/* What every INSERT mode starts with: the edit state with browse and the journal open, the
 * bound model, the install layer (AT LAYER, else the mode's default) checked against the
 * model — and against what the mode edits (edits) — and the target's id. */
static int insert_setup(lql_session *s, const lql_stmt *st, insert_default dflt, edit_site edits,
                        edit_state **es, eng_model **m, int *layer, int32_t *tid, lql_err *e)
{
    if (state_of(s, st, es, e) || open_browse(s, st, *es, e) ||
        open_journal(s, st, *es, 0, e) || lql_session_model(s, st, m, e))
        return -1;
    const int L = eng_model_layers(*m);
    if (lql_has(st, LQL_C_AT_LAYER)) {
        *layer = (int)st->layer;
    } else if (dflt == INSERT_AT_LAST) {
        *layer = L - 1;
    } else {
        int band[3][2];
        brw_bands((*es)->bm, band);
        *layer = band[1][1] - 1 >= 0 ? band[1][1] - 1 : 0;
    }
    const lql_span *at = lql_has(st, LQL_C_AT_LAYER) ? &st->clause_at[LQL_C_AT_LAYER] : &st->at;
    vx_err ve = {0};
    if (*layer < 0 || *layer >= L)
        return lql_errf(e, LQL_EEXEC, at, "layer %d is out of range (the model has layers 0-%d)",
                        *layer, L - 1);
    if ((edits == SITE_DENSE && eng_edit_check_layer(*m, *layer, &ve)) ||
        (edits == SITE_ROUTED && eng_edit_check_site(*m, *layer, 0, &ve)))
        return lql_err_vx(e, &ve, at);
    int32_t *ids = NULL;
    size_t n = 0;
    if (target_ids(eng_model_tokenizer(*m), st->target, &st->target_at, &ids, &n, e))
        return -1;
    *tid = ids[0];
    free(ids);
    /* KNN overrides one prediction and COMPOSE writes one feature's token */
    if (n > 1 && st->mode != LQL_MODE_MEMIT && lql_has(st, LQL_C_MODE))
        return lql_errf(e, LQL_EEXEC, &st->target_at, "target \"%s\" is %zu tokens; MODE %s "
                        "writes one token (the default MODE MEMIT writes them all)", st->target,
                        n, st->mode == LQL_MODE_KNN ? "KNN" : "COMPOSE");
    return 0;
}

/* INSERT … MODE KNN: the residual after `layer` at the canonical prompt's last position,
 * through the effective model, journaled as an insert_knn (key stored as captured; the
 * store normalises it). Default layer: the knowledge band's last layer − 1, as the
 * reference. */
static int insert_knn(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    eng_model *m = NULL;
    int layer;
    int32_t tid;
    if (insert_setup(s, st, INSERT_AT_KNOWLEDGE, SITE_NONE, &es, &m, &layer, &tid, e))
        return -1;
    const int L = eng_model_layers(m), H = eng_model_hidden(m);
    double conf = lql_has(st, LQL_C_CONFIDENCE) ? st->confidence : 1.0;
    char *prompt = eng_edit_prompt(st->relation_v, st->entity);
    int32_t *ids = NULL;
    size_t n = 0;
    float *res = malloc((size_t)L * H * sizeof *res);
    vx_err ve = {0};
    vx_op op;
    vx_op_init(&op, VX_OP_INSERT_KNN);
    int rc = -1;
    if (!prompt || !res) {
        lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
        goto done;
    }
    if (eng_tok_encode(eng_model_tokenizer(m), prompt, strlen(prompt), 1, &ids, &n, &ve) ||
        last_residuals(m, ids, n, res, NULL, &ve)) {
        lql_err_vx(e, &ve, &st->entity_at);
        goto done;
    }
    op.layer = layer;
    op.confidence = conf;
    op.target_id = tid;
    if (vx_op_set_str(&op.entity, st->entity, &ve) ||
        vx_op_set_str(&op.relation, st->relation_v, &ve) ||
        vx_op_set_str(&op.target, st->target, &ve) || vx_op_set_str(&op.mode, "knn", &ve) ||
        vx_op_set_vec(&op, "key", 1, H, res + (size_t)layer * H, &ve)) {
        lql_err_vx(e, &ve, &st->at);
        goto done;
    }
    vx_record_info info;
    if (record(s, st, es, &op, 1, r, &info, e))
        goto done;
    brw_edit_counts cnt;
    brw_edit_overlay_counts(es->ov, &cnt);
    lql_result_note(r, "inserted: %s -[%s]-> %s at layer %d (KNN store: the residual of \"%s\" "
                    "is the key, cosine > %.2f overrides the prediction; %zu entr%s; history "
                    "%lld, patch %s)", st->entity, st->relation_v, st->target, layer, prompt,
                    BRW_KNN_THRESHOLD, cnt.knn, cnt.knn == 1 ? "y" : "ies",
                    (long long)info.history_n, info.patch_name);
    rc = 0;
done:
    vx_op_clear(&op);
    free(prompt);
    free(ids);
    free(res);
    return rc;
}

/* ---------------------------------------------------------------- INSERT … MODE COMPOSE */

/* The fixed decoys the reference captures beside its template decoys. */
static const char *const compose_fixed[] = {
    "Once upon a time", "The quick brown fox", "In the beginning", "Hello, my name is",
    "The weather today is", "I think that", "It was a dark and stormy night",
    "The best way to", "Water is made of", "My favorite food is",
};
#define COMPOSE_TEMPLATE 10
#define COMPOSE_BALANCE 16
#define COMPOSE_CROSS 8
#define COMPOSE_RECENT 16

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

/* p(tid) after prompt through m as it is now (its overlay attached). */
static int prompt_p(eng_model *m, const char *prompt, int32_t tid, float *scratch_h,
                    float *logits, float *p, vx_err *ve)
{
    if (text_ffn_in(m, 0, prompt, scratch_h, logits, ve))
        return -1;
    *p = eng_edit_p(logits, eng_model_vocab(m), tid);
    return 0;
}

/* Row norms medians of the first 100 features of a layer's gate and up rows and down
 * columns (base weights). */
static int compose_refs(const vx_container *c, int layer, int F, int H, float ref[3],
                        vx_err *ve)
{
    static const char *const roles[] = {"gate_proj", "up_proj", "down_proj"};
    int n = F < 100 ? F : 100;
    float *nv = malloc((size_t)n * sizeof *nv);
    if (!nv)
        return vx_errf(ve, VX_ENOMEM, "out of memory");
    for (int r = 0; r < 3; r++) {
        const vx_tensor *t = vx_findf(c, "target.decoder_stack", "layers.%d.ffn.%s", layer,
                                      roles[r]);
        float *w = NULL;
        int ch = 0;
        if (!t || t->ndim != 2) {
            free(nv);
            return vx_errf(ve, VX_EUNSUPPORTED, "MODE COMPOSE installs a gated FFN feature: "
                           "layer %d has no dense ffn.%s", layer, roles[r]);
        }
        if (brw_edit_tensor_f32(c, NULL, t, &w, &ch, ve)) {
            free(nv);
            return -1;
        }
        for (int f = 0; f < n; f++) {
            double q = 0;
            for (int k = 0; k < H; k++) {
                double v = r < 2 ? w[(size_t)f * H + k] : w[(size_t)k * F + f];
                q += v * v;
            }
            nv[f] = (float)sqrt(q);
        }
        ref[r] = median(nv, n);
        free(w);
    }
    free(nv);
    return 0;
}

/* The slot: the first feature with no base metadata and no overlay claim, else the
 * unclaimed feature with the lowest c_score; -1 when every feature is claimed. */
static int compose_slot(const edit_state *es, const eng_overlay *cur, int layer, int F)
{
    int best = -1;
    float best_c = INFINITY;
    for (int f = 0; f < F; f++) {
        int claimed = 0;
        for (size_t i = 0; cur && i < cur->n_edits && !claimed; i++)
            claimed = cur->edits[i].layer == layer && cur->edits[i].feature == f;
        if (claimed)
            continue;
        brw_meta md;
        if (brw_feature_meta(es->bm, NULL, layer, f, &md) != 0 || !md.present)
            return f;
        if (md.c_score < best_c) {
            best_c = md.c_score;
            best = f;
        }
    }
    return best;
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

typedef struct compose_fact {
    char *prompt;
    int32_t tid;
} compose_fact;

/* The canonical prompts and targets of the last COMPOSE_RECENT compose installs. */
static int recent_composes(const edit_state *es, eng_model *m, compose_fact *out, int *n,
                           vx_err *ve)
{
    vx_op *ops = NULL;
    size_t nops = 0;
    *n = 0;
    if (active_ops(es, &ops, &nops, ve))
        return -1;
    for (size_t i = nops; i-- > 0 && *n < COMPOSE_RECENT;) {
        const vx_op *o = &ops[i];
        if (o->kind != VX_OP_INSERT || !o->mode || strcmp(o->mode, "compose") || !o->entity ||
            !o->relation || !o->target)
            continue;
        int32_t *ids = NULL;
        size_t ni = 0;
        char *sp = malloc(strlen(o->target) + 2);
        if (sp)
            snprintf(sp, strlen(o->target) + 2, " %s", o->target);
        int ok = sp && eng_tok_encode(eng_model_tokenizer(m), sp, strlen(sp), 0, &ids, &ni,
                                      ve) == 0 && ni > 0;
        free(sp);
        if (ok && (out[*n].prompt = eng_edit_prompt(o->relation, o->entity))) {
            out[*n].tid = ids[0];
            (*n)++;
        }
        free(ids);
    }
    vx_ops_free(ops, nops);
    return 0;
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

/* INSERT … MODE COMPOSE: a new FFN feature in a free slot (REFERENCE-NOTES §6): gate along
 * the canonical prompt's FFN input made orthogonal to decoys and earlier installs' gates
 * (×g_ref·30), up along the input (×u_ref), down along the target's embedding
 * (×d_ref·ALPHA), then balanced on the target's probability and checked against recent
 * installs. Journaled as an insert with gate/up/down vectors. */
static int insert_compose(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    double alpha = lql_has(st, LQL_C_ALPHA) ? st->alpha : 0.10;
    if (!(alpha >= 0.05 && alpha <= 0.30))
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_ALPHA], "ALPHA must be between "
                        "0.05 and 0.30 (got %g)", alpha);
    double conf = lql_has(st, LQL_C_CONFIDENCE) ? st->confidence : 0.9;
    edit_state *es = NULL;
    eng_model *m = NULL;
    int layer;
    int32_t tid;
    if (insert_setup(s, st, INSERT_AT_KNOWLEDGE, SITE_DENSE, &es, &m, &layer, &tid, e))
        return -1;
    const int H = eng_model_hidden(m), V = eng_model_vocab(m);
    const lql_span *layer_at = lql_has(st, LQL_C_AT_LAYER) ? &st->clause_at[LQL_C_AT_LAYER]
                                                           : &st->at;
    vx_err ve = {0};
    const int F = eng_model_ffn_features(m, layer);
    const eng_overlay *cur = es->ov ? brw_edit_overlay_eng(es->ov) : NULL;
    const int nfix = (int)(sizeof compose_fixed / sizeof *compose_fixed);
    size_t ne = cur ? cur->n_edits : 0;
    char *prompt = eng_edit_prompt(st->relation_v, st->entity);
    float *x = malloc((size_t)H * sizeof *x), *logits = malloc((size_t)V * sizeof *logits);
    float *scratch = malloc((size_t)H * sizeof *scratch), *temb = malloc((size_t)H * sizeof *temb);
    float *vec = calloc((size_t)H * 4, sizeof *vec);   /* gate, up, down, best down */
    float *basis = malloc((size_t)(nfix + COMPOSE_TEMPLATE + (int)ne + 1) * H * sizeof *basis);
    eng_feature_edit *ed = malloc((ne + 1) * sizeof *ed);
    compose_fact recent[COMPOSE_RECENT];
    int nrecent = 0, rc = -1, nb = 0, steps = 0, cross = 0;
    float ref[3], p_before = 0, p = 0, best_p = -1;
    vx_op op;
    vx_op_init(&op, VX_OP_INSERT);
    if (!prompt || !x || !logits || !scratch || !temb || !vec || !basis || !ed) {
        lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
        goto done;
    }
    float *gate = vec, *up = vec + H, *down = vec + 2 * H, *best = vec + 3 * H;
    int slot = compose_slot(es, cur, layer, F);
    if (slot < 0) {
        lql_errf(e, LQL_EEXEC, layer_at, "MODE COMPOSE: every feature of layer %d is claimed "
                 "by the overlay", layer);
        goto done;
    }
    /* 1. capture: the canonical prompt's FFN input and the decoys' (effective model) */
    if (compose_refs(s->vx, layer, F, H, ref, &ve) ||
        text_ffn_in(m, layer, prompt, x, logits, &ve) ||
        brw_entity_query(es->bm, st->target, temb, &ve) ||
        recent_composes(es, m, recent, &nrecent, &ve))
        goto vx_fail;
    p_before = eng_edit_p(logits, V, tid);
    for (int i = 0; i < nfix; i++)
        if (text_ffn_in(m, layer, compose_fixed[i], basis + (size_t)nb++ * H, NULL, &ve))
            goto vx_fail;
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
        if (!w || k < 3 || w[k] || strcasecmp(w, st->entity) == 0)
            continue;
        char *dp = eng_edit_prompt(st->relation_v, w);
        int bad = !dp || text_ffn_in(m, layer, dp, basis + (size_t)nb * H, NULL, &ve);
        free(dp);
        if (bad)
            goto vx_fail;
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
    eng_overlay trial = {ed, ne + 1, cur ? cur->lowrank : NULL, cur ? cur->n_lowrank : 0};
    lql_session_set_overlay(s, &trial);
    int stale = 0;
    for (steps = 1; steps <= COMPOSE_BALANCE; steps++) {
        if (prompt_p(m, prompt, tid, scratch, logits, &p, &ve))
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
        for (int i = 0; i < nrecent && !low; i++) {
            if (prompt_p(m, recent[i].prompt, recent[i].tid, scratch, logits, &q, &ve))
                break;
            low = q < 0.20f;
        }
        if (!low)
            break;
        set_len(down, H, norm2(down, H) * 0.7);
    }
    if (!ve.msg[0])
        prompt_p(m, prompt, tid, scratch, logits, &p, &ve);
    lql_session_set_overlay(s, cur);
    if (ve.msg[0])
        goto vx_fail;
    op.layer = layer;
    op.feature = slot;
    op.confidence = conf;
    op.alpha = alpha;
    op.has_meta = 1;
    op.meta_id = tid;
    op.meta_c = conf;
    const char *piece = brw_token_text(es->bm, tid);
    if (vx_op_set_str(&op.entity, st->entity, &ve) ||
        vx_op_set_str(&op.relation, st->relation_v, &ve) ||
        vx_op_set_str(&op.target, st->target, &ve) || vx_op_set_str(&op.mode, "compose", &ve) ||
        vx_op_set_str(&op.meta_token, piece ? piece : "", &ve) ||
        vx_op_set_vec(&op, "gate", 1, H, gate, &ve) || vx_op_set_vec(&op, "up", 1, H, up, &ve) ||
        vx_op_set_vec(&op, "down", 1, H, down, &ve))
        goto vx_fail;
    if (inserted_row(r, st, layer, slot, p_before, p, steps, e) < 0)
        goto done;
    vx_record_info info;
    if (record(s, st, es, &op, 1, r, &info, e))
        goto done;
    lql_result_note(r, "inserted: %s -[%s]-> %s at layer %d feature %d (MODE COMPOSE: gate "
                    "%.3g, up %.3g, down %.3g = ALPHA %.2f x d_ref %.3g after balancing; "
                    "history %lld, patch %s)", st->entity, st->relation_v, st->target, layer,
                    slot, norm2(gate, H), norm2(up, H), norm2(down, H), alpha, ref[2],
                    (long long)info.history_n, info.patch_name);
    rc = 0;
    goto done;
vx_fail:
    lql_err_vx(e, &ve, &st->at);
done:
    for (int i = 0; i < nrecent; i++)
        free(recent[i].prompt);
    vx_op_clear(&op);
    free(prompt);
    free(x);
    free(logits);
    free(scratch);
    free(temb);
    free(vec);
    free(basis);
    free(ed);
    return rc;
}

int lql_h_insert(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    eng_model *m = NULL;
    if (lql_has(st, LQL_C_CONFIDENCE) && !(st->confidence >= 0 && st->confidence <= 1))
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_CONFIDENCE], "CONFIDENCE must be "
                        "between 0 and 1 (got %g)", st->confidence);
    if (st->mode == LQL_MODE_KNN && !lql_has(st, LQL_C_ALPHA))
        return insert_knn(s, st, r, e);
    if (st->mode == LQL_MODE_COMPOSE)
        return insert_compose(s, st, r, e);
    if (lql_has(st, LQL_C_ALPHA))
        return lql_refuse_clause(e, st, LQL_C_ALPHA, "ALPHA scales MODE COMPOSE installs; a "
                                 "MEMIT insert finds its own strength (set CONFIDENCE)");
    double conf = lql_has(st, LQL_C_CONFIDENCE) ? st->confidence : 0.5;
    if (lql_has(st, LQL_C_CONFIDENCE) && !(conf >= 0.5 && conf < 1))
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_CONFIDENCE], "CONFIDENCE is the "
                        "probability the target must reach: at least 0.5 and below 1");
    int layer;
    int32_t tid;
    if (insert_setup(s, st, INSERT_AT_LAST, SITE_ROUTED, &es, &m, &layer, &tid, e))
        return -1;
    vx_err ve = {0};
    const int H = eng_model_hidden(m), K = eng_model_top_k(m);
    char *prompt = eng_edit_prompt(st->relation_v, st->entity);
    int32_t *ids = NULL;
    size_t n = 0;
    float *keys = NULL, *decoys = NULL;
    int nk = 0, nd = 0, rc = -1, F = 0, site = -2;
    const edit_site_cache *sc = NULL;
    int32_t *tids = NULL, *seq = NULL;
    size_t nt = 0, nops = 0;
    eng_insert_fact *fx = NULL;
    eng_lowrank *lrs = NULL;
    int *experts = NULL;
    float *wroute = NULL;
    /* the overlay the statement starts from (the journal's), restored after each trial */
    const eng_overlay *base = es->ov ? brw_edit_overlay_eng(es->ov) : NULL;
    const size_t nbase = base ? base->n_lowrank : 0, nbe = base ? base->n_edits : 0;
    /* a dense gated FFN gets one gated feature per target token (edit_gate.h), else
     * (MoE experts, plain MLPs) a rank-1 down_proj update */
    int gated = eng_edit_gate_ok(m, layer);
    eng_feature_edit *eds = NULL;
    eng_gate_slot *gs = NULL;
    char **others = NULL;
    int nothers = 0;
    vx_op *ops = NULL;
    if (!prompt) {
        lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
        goto done;
    }
    if (eng_tok_encode(eng_model_tokenizer(m), prompt, strlen(prompt), 1, &ids, &n, &ve)) {
        lql_err_vx(e, &ve, &st->entity_at);
        goto done;
    }
    /* a target of several tokens is one rank-1 update per token, each keyed on the prompt
     * followed by the target's earlier tokens and protecting the keys before it, so that
     * greedy generation writes the whole target; journaled as one insert per edit site */
    if (target_ids(eng_model_tokenizer(m), st->target, &st->target_at, &tids, &nt, e))
        goto done;
    seq = malloc((n + nt) * sizeof *seq);
    fx = calloc(nt, sizeof *fx);
    lrs = malloc((nbase + nt + 1) * sizeof *lrs);
    experts = malloc((nt * (size_t)(K + 1) + 1) * sizeof *experts);
    wroute = malloc((nt * (size_t)(K + 1) + 1) * sizeof *wroute);
    ops = calloc(nt, sizeof *ops);
    eds = malloc((nbe + nt + 1) * sizeof *eds);
    gs = calloc(nt, sizeof *gs);
    if (!seq || !fx || !lrs || !experts || !wroute || !ops || !eds || !gs) {
        lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
        goto done;
    }
    for (size_t j = 0; j < nt; j++)
        vx_op_init(&ops[j], VX_OP_INSERT);
    memcpy(seq, ids, n * sizeof *seq);
    if (nt > 1)
        memcpy(seq + n, tids, (nt - 1) * sizeof *seq);
    if (nbase)
        memcpy(lrs, base->lowrank, nbase * sizeof *lrs);
    if (nbe)
        memcpy(eds, base->edits, nbe * sizeof *eds);
    if (gated && fact_prompts(es, layer, prompt, &others, &nothers, e))
        goto done;
    double p_before = 1, p_after = 1;
    int steps = 0;
    for (size_t j = 0; j < nt; j++) {
        /* the edit site: the layer, or on a MoE layer the top-1 expert the token's key
         * routes to (the router's first choice; an edit of the layer's FFN cannot change
         * the routing at that layer, so the expert stays the one the key reaches) */
        int *ex = experts + j * (size_t)(K + 1);
        float *wx = wroute + j * (size_t)(K + 1);
        int nr = eng_edit_route(m, layer, seq, (int)(n + j), ex, wx, &ve);
        if (nr < 0) {
            lql_err_vx(e, &ve, &st->at);
            goto done;
        }
        ex[K] = nr > 0 ? ex[0] : -1;
        const int want = ex[K];
        if (want != site) {
            free(keys);
            free(decoys);
            keys = decoys = NULL;
            nk = nd = 0;
            site = want;
            F = site >= 0 ? eng_model_expert_features(m) : eng_model_ffn_features(m, layer);
            if (layer_cov(es, m, layer, site, st, r, e, &sc) ||
                layer_keys(es, layer, site, F, &keys, &nk, e, st))
                goto done;
            if (eng_edit_decoys(m, layer, site, st->relation_v, st->entity, DECOYS, &decoys,
                                &nd, &ve)) {
                lql_err_vx(e, &ve, &st->at);
                goto done;
            }
            float *all = realloc(decoys, (size_t)(nd + sc->n_frame + 1) * F * sizeof *all);
            float *grown = realloc(keys, (size_t)(nk + (int)nt + 1) * F * sizeof *keys);
            decoys = all ? all : decoys;
            keys = grown ? grown : keys;
            if (!all || !grown) {
                lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
                goto done;
            }
            memcpy(decoys + (size_t)nd * F, sc->frame, (size_t)sc->n_frame * F * sizeof *decoys);
            nd += sc->n_frame;
            /* the statement's earlier tokens written at this site are protected too */
            for (size_t i = 0; i < j; i++)
                if (experts[i * (size_t)(K + 1) + K] == site)
                    memcpy(keys + (size_t)nk++ * F, fx[i].key, (size_t)F * sizeof *keys);
        }
        eng_overlay trial = {eds, nbe + (gated ? j : 0), lrs, nbase + (gated ? 0 : j)};
        eng_insert_opts io = {layer, site, tids[j], sc->cov, keys, nk, decoys, nd, DECOY_WEIGHT,
                              1e-2, 100, (float)conf, 0.02f, 4.0f, es->pres_ids, es->pres_lens,
                              es->n_pres, gated ? 0 : KL_WEIGHT, NULL, NULL, NULL, 0};
        eng_model_set_overlay(m, &trial);
        /* gated: the gate first, so that δ can also raise the target on the fact's other
         * wordings (each receives its share of δ) */
        int ir = 0;
        if (gated) {
            eng_gate_opts go = {layer, sc->cov, sc->xin, sc->n_xin, st->relation_v, st->entity,
                                DECOYS, (const char *const *)others, nothers, GATE_MARGIN,
                                (int)j, 1};
            ir = eng_edit_gate_fit(m, seq, (int)(n + j), &go, &gs[j], &ve);
            io.aux_ids = gs[j].para_ids;
            io.aux_lens = gs[j].para_lens;
            io.aux_ratio = gs[j].para_ratio;
            io.n_aux = gs[j].n_para;
        }
        if (!ir)
            ir = eng_edit_insert(m, seq, (int)(n + j), &io, &fx[j], &ve);
        if (!ir && gated && fx[j].p_after > conf)
            eng_edit_gate_down(m, layer, &gs[j], fx[j].u);
        eng_model_set_overlay(m, base);
        if (ir == 1) {
            /* no gate tells this prompt apart: the whole statement as rank-1 updates */
            lql_result_note(r, "%s: a rank-1 update instead", ve.msg);
            for (size_t i = 0; i <= j; i++)
                eng_insert_fact_free(&fx[i]);
            gated = 0;
            site = -2;
            j = (size_t)-1;
            continue;
        }
        if (ir) {
            lql_err_vx(e, &ve, &st->at);
            goto done;
        }
        if (!(fx[j].p_after > conf)) {
            const char *piece = eng_tok_piece(eng_model_tokenizer(m), tids[j]);
            lql_errf(e, LQL_EEXEC, &st->target_at, "could not make \"%s\" reach p %.2f after "
                     "\"%s\" in %d steps at layer %d (token %zu of %zu, '%s': p %.4f); nothing "
                     "inserted", st->target, conf, prompt, fx[j].steps, layer, j + 1, nt,
                     piece ? piece : "?", fx[j].p_after);
            goto done;
        }
        memcpy(keys + (size_t)nk++ * F, fx[j].key, (size_t)F * sizeof *keys);
        lrs[nbase + j] = (eng_lowrank){layer, 1, fx[j].u, fx[j].v, site};
        if (gated)
            eds[nbe + j] = (eng_feature_edit){layer, gs[j].feature, 0, gs[j].gate, gs[j].up,
                                              gs[j].down};
        p_before *= fx[j].p_before;
        p_after *= fx[j].p_after;
        steps += fx[j].steps;
    }
    /* gated: one slot insert per target token, mode "gated" (replayed as the slot's rows) */
    for (size_t j = 0; gated && j < nt; j++) {
        vx_op *op = &ops[nops++];
        const char *piece = eng_tok_piece(eng_model_tokenizer(m), tids[j]);
        op->layer = layer;
        op->feature = gs[j].feature;
        op->confidence = conf;
        op->has_meta = 1;
        op->meta_id = tids[j];
        op->meta_c = conf;
        if (vx_op_set_str(&op->entity, st->entity, &ve) ||
            vx_op_set_str(&op->relation, st->relation_v, &ve) ||
            vx_op_set_str(&op->target, st->target, &ve) || vx_op_set_str(&op->mode, "gated", &ve) ||
            vx_op_set_str(&op->meta_token, piece ? piece : "", &ve) ||
            vx_op_set_vec(op, "gate", 1, H, gs[j].gate, &ve) ||
            vx_op_set_vec(op, "up", 1, H, gs[j].up, &ve) ||
            vx_op_set_vec(op, "down", 1, H, gs[j].down, &ve)) {
            lql_err_vx(e, &ve, &st->at);
            goto done;
        }
    }
    /* rank-1: one insert per edit site, its columns the site's tokens in order (a dense
     * layer, or every token routed to the same expert: one op of rank nt) */
    for (size_t j = 0; !gated && j < nt; j++) {
        const int sj = experts[j * (size_t)(K + 1) + K];
        int done_site = 0;
        for (size_t i = 0; i < j && !done_site; i++)
            done_site = experts[i * (size_t)(K + 1) + K] == sj;
        if (done_site)
            continue;
        size_t cols = 0;
        for (size_t i = j; i < nt; i++)
            cols += experts[i * (size_t)(K + 1) + K] == sj;
        const int Fs = fx[j].features;
        float *U = malloc((size_t)H * cols * sizeof *U), *Vm = malloc((size_t)Fs * cols * sizeof *Vm);
        float *Km = malloc((size_t)Fs * cols * sizeof *Km);
        vx_op *op = &ops[nops++];
        vx_err oe = {0};
        int bad = !U || !Vm || !Km;
        for (size_t i = j, c = 0; i < nt && !bad; i++) {
            if (experts[i * (size_t)(K + 1) + K] != sj)
                continue;
            for (int h = 0; h < H; h++)
                U[(size_t)h * cols + c] = fx[i].u[h];
            for (int f = 0; f < Fs; f++)
                Vm[(size_t)f * cols + c] = fx[i].v[f];
            memcpy(Km + c * Fs, fx[i].key, (size_t)Fs * sizeof *Km);
            c++;
        }
        op->layer = layer;
        op->expert = sj;
        op->confidence = conf;
        if (bad) {
            vx_errf(&oe, VX_ENOMEM, "out of memory");
        } else if (vx_op_set_str(&op->entity, st->entity, &oe) ||
                   vx_op_set_str(&op->relation, st->relation_v, &oe) ||
                   vx_op_set_str(&op->target, st->target, &oe) ||
                   vx_op_set_str(&op->mode, "memit", &oe) ||
                   vx_op_set_vec(op, "u", H, (int64_t)cols, U, &oe) ||
                   vx_op_set_vec(op, "v", Fs, (int64_t)cols, Vm, &oe) ||
                   vx_op_set_vec(op, "key", (int64_t)cols, Fs, Km, &oe)) {
            bad = 1;
        }
        free(U);
        free(Vm);
        free(Km);
        if (bad) {
            lql_err_vx(e, &oe, &st->at);
            goto done;
        }
    }
    if (inserted_row(r, st, layer, -1, p_before, p_after, steps, e) < 0)
        goto done;
    vx_record_info info;
    if (record(s, st, es, ops, nops, r, &info, e))
        goto done;
    const char *what = experts[K] >= 0 ? "expert down_proj" : "down_proj";
    for (size_t j = 0; gated && j < nt; j++)
        lql_result_note(r, "inserted: %s -[%s]-> %s at layer %d: token %zu of %zu as gated "
                        "feature %d (gate pre-activation %.1f on its prompt, at most %.1f on %lld "
                        "of %lld negatives; history %lld, patch %s)", st->entity, st->relation_v,
                        st->target, layer, j + 1, nt, gs[j].feature, gs[j].z_prompt,
                        -0.5 * GATE_MARGIN, (long long)(gs[j].n_neg - gs[j].n_open),
                        (long long)gs[j].n_neg, (long long)info.history_n, info.patch_name);
    if (!gated && nt == 1)
        lql_result_note(r, "inserted: %s -[%s]-> %s at layer %d (rank-1 %s update keyed on "
                        "\"%s\"; history %lld, patch %s)", st->entity, st->relation_v,
                        st->target, layer, what, prompt, (long long)info.history_n,
                        info.patch_name);
    else if (!gated)
        lql_result_note(r, "inserted: %s -[%s]-> %s at layer %d (rank-%zu %s update, one per "
                        "target token, keyed on \"%s\" and the target's first %zu tokens; "
                        "p_before and p_after are of the whole target; history %lld, patch %s)",
                        st->entity, st->relation_v, st->target, layer, nt, what, prompt, nt - 1,
                        (long long)info.history_n, info.patch_name);
    for (size_t j = 0; K > 0 && j < nt && experts[K] >= 0; j++) {
        const int *ex = experts + j * (size_t)(K + 1);
        const float *wx = wroute + j * (size_t)(K + 1);
        char routed[256];
        size_t at = 0;
        for (int k = 0; k < K && at < sizeof routed; k++)
            at += (size_t)snprintf(routed + at, sizeof routed - at, "%s%d (%.3f)", k ? ", " : "",
                                   ex[k], wx[k]);
        lql_result_note(r, "moe: token %zu of %zu routes to experts %s at layer %d; expert "
                        "%d's down_proj is updated (the top-1 expert)", j + 1, nt, routed, layer,
                        ex[K]);
    }
    rc = 0;
done:
    for (size_t j = 0; ops && j < nt; j++)
        vx_op_clear(&ops[j]);
    free(ops);
    for (size_t j = 0; fx && j < nt; j++)
        eng_insert_fact_free(&fx[j]);
    for (size_t j = 0; gs && j < nt; j++)
        eng_gate_slot_free(&gs[j]);
    for (int i = 0; i < nothers; i++)
        free(others[i]);
    free(others);
    free(gs);
    free(eds);
    free(fx);
    free(lrs);
    free(seq);
    free(tids);
    free(experts);
    free(wroute);
    free(prompt);
    free(ids);
    free(keys);
    free(decoys);
    return rc;
}

/* ---------------------------------------------------------------- patches */

int lql_h_begin_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    if (state_of(s, st, &es, e) || open_journal(s, st, es, 1, e))
        return -1;
    const char *prev = vx_journal_recording_name(es->j);
    char was[128] = "";
    snprintf(was, sizeof was, "%s", prev ? prev : "");
    int64_t taken = 0;
    vx_err ve = {0};
    if (vx_journal_begin_patch(es->j, st->arg, &taken, &ve))
        return lql_err_vx(e, &ve, &st->arg_at);
    lql_result_note(r, "patch session started: %s", st->arg);
    if (taken)
        lql_result_note(r, "took over %lld operation%s of %s", (long long)taken,
                        taken == 1 ? "" : "s", was);
    return 0;
}

static void count_kinds(const vx_op *ops, size_t n, size_t c[VX_OP_KIND_COUNT])
{
    memset(c, 0, VX_OP_KIND_COUNT * sizeof *c);
    for (size_t i = 0; i < n; i++)
        if ((unsigned)ops[i].kind < VX_OP_KIND_COUNT)
            c[ops[i].kind]++;
}

int lql_h_save_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    if (state_of(s, st, &es, e))
        return -1;
    const char *name = es->j ? vx_journal_recording_name(es->j) : NULL;
    if (!name)
        return lql_errf(e, LQL_EEXEC, &st->at, "no patch is recording: BEGIN PATCH \"name\" or "
                        "make an edit first");
    char file[4096];
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
    vx_patch p = {0};
    vx_err ve = {0};
    if (vx_journal_patch_ops(es->j, vx_journal_recording(es->j), &p.ops, &p.nops, &ve))
        return lql_err_vx(e, &ve, &st->at);
    char now[32];
    vx_utc_now(now);
    p.version = 1;
    p.base_model = (char *)model_name(s->vx);
    p.base_checksum = (char *)vx_index_sha256(s->vx);
    p.created_at = now;
    p.description = (char *)name;
    int rc = vx_patch_write(file, &p, &ve);
    size_t c[VX_OP_KIND_COUNT];
    count_kinds(p.ops, p.nops, c);
    vx_ops_free(p.ops, p.nops);
    if (rc)
        return lql_err_vx(e, &ve, st->arg ? &st->arg_at : &st->at);
    lql_result_note(r, "saved: %s to %s (%zu inserts, %zu updates, %zu deletes)", name, file,
                    c[VX_OP_INSERT], c[VX_OP_UPDATE], c[VX_OP_DELETE]);
    vx_journal_stop_recording(es->j);
    return 0;
}

/* The name an applied file takes: its description, else the file's stem. */
static void patch_name(const vx_patch *p, const char *file, char *out, size_t n)
{
    if (p->description && *p->description) {
        snprintf(out, n, "%s", p->description);
        return;
    }
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    size_t len = strlen(base);
    if (len > 4 && strcmp(base + len - 4, ".vlp") == 0)
        len -= 4;
    snprintf(out, n, "%.*s", (int)len, base);
}

int lql_h_apply_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    if (state_of(s, st, &es, e) || open_browse(s, st, es, e) || open_journal(s, st, es, 1, e))
        return -1;
    vx_patch p;
    vx_err ve = {0};
    if (vx_patch_read(st->arg, brw_hidden(es->bm), &p, &ve))
        return lql_err_vx(e, &ve, &st->arg_at);
    const char *sha = vx_index_sha256(s->vx), *model = model_name(s->vx);
    int rc = -1;
    /* the checksum, when the file has one, is the base's index sha256; else the model */
    if (p.base_checksum && strcmp(p.base_checksum, sha) != 0) {
        lql_errf(e, LQL_EEXEC, &st->arg_at, "%s was made for another base: checksum %.16s... "
                 "(model '%s') but the bound container's index sha256 is %.16s... (model "
                 "'%s')", st->arg, p.base_checksum, p.base_model, sha, model);
        goto done;
    }
    if (!p.base_checksum && strcmp(p.base_model, model) != 0) {
        lql_errf(e, LQL_EEXEC, &st->arg_at, "%s was made for model '%s' but the bound "
                 "container is model '%s'", st->arg, p.base_model, model);
        goto done;
    }
    for (size_t i = 0; i < p.nops; i++) {
        char where[300];
        snprintf(where, sizeof where, "%s: operation %zu", st->arg, i + 1);
        if (brw_edit_check_op(es->bm, &p.ops[i], where, &ve)) {
            lql_err_vx(e, &ve, &st->arg_at);
            goto done;
        }
    }
    char name[256];
    patch_name(&p, st->arg, name, sizeof name);
    int64_t existing;
    if (vx_journal_find_patch(es->j, name, &existing, &ve) == 0) {
        lql_errf(e, LQL_EEXEC, &st->arg_at, "a patch named '%s' is already applied (REMOVE "
                 "PATCH \"%s\" first)", name, name);
        goto done;
    }
    char *tags = NULL;
    cJSON *ta = cJSON_CreateStringArray((const char *const *)p.tags, (int)p.ntags);
    if (ta) {
        tags = cJSON_PrintUnformatted(ta);
        cJSON_Delete(ta);
    }
    char *text = strndup(st->src, st->nsrc);
    vx_patch_meta meta = {name, p.description, p.author, tags, st->arg};
    int64_t hist;
    int ir = text ? vx_journal_import(es->j, text, &meta, p.ops, p.nops, NULL, &hist, &ve)
                  : vx_errf(&ve, VX_ENOMEM, "out of memory");
    free(text);
    free(tags);
    if (ir) {
        lql_err_vx(e, &ve, &st->arg_at);
        goto done;
    }
    if (refresh(s, st, es, e))
        goto done;
    size_t c[VX_OP_KIND_COUNT];
    count_kinds(p.ops, p.nops, c);
    lql_result_note(r, "applied: %s (%zu operations: %zu inserts, %zu updates, %zu deletes; "
                    "history %lld)", name, p.nops, c[VX_OP_INSERT], c[VX_OP_UPDATE],
                    c[VX_OP_DELETE], (long long)hist);
    rc = 0;
done:
    vx_patch_free(&p);
    return rc;
}

int lql_h_remove_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    if (state_of(s, st, &es, e) || open_journal(s, st, es, 0, e))
        return -1;
    if (!es->j)
        return lql_errf(e, LQL_EEXEC, &st->arg_at, "no patch named '%s' (nothing has been "
                        "edited: the journal %s does not exist)", st->arg, es->jpath);
    char *text = strndup(st->src, st->nsrc);
    if (!text)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    int64_t pid;
    vx_err ve = {0};
    int rc = vx_journal_remove_patch(es->j, text, st->arg, &pid, &ve);
    free(text);
    if (rc)
        return lql_err_vx(e, &ve, &st->arg_at);
    if (refresh(s, st, es, e))
        return -1;
    lql_result_note(r, "removed: %s", st->arg);
    return 0;
}

/* ---------------------------------------------------------------- undo / history */

/* The history entry numbered n (for notes), or NULL. */
static const vx_history_entry *entry(const vx_history_entry *h, size_t nh, int64_t n)
{
    return n >= 1 && (size_t)n <= nh && h[n - 1].n == n ? &h[n - 1] : NULL;
}

int lql_h_undo(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    if (state_of(s, st, &es, e))
        return -1;
    if (!es->j) {
        lql_result_note(r, "nothing to undo");
        return 0;
    }
    int64_t n;
    vx_err ve = {0};
    if (vx_journal_undo(es->j, &n, &ve))
        return lql_err_vx(e, &ve, &st->at);
    if (!n) {
        lql_result_note(r, "nothing to undo");
        return 0;
    }
    if (refresh(s, st, es, e))
        return -1;
    vx_history_entry *h;
    size_t nh;
    if (vx_journal_history(es->j, &h, &nh, &ve) == 0) {
        const vx_history_entry *x = entry(h, nh, n);
        lql_result_note(r, "undone: %lld %s", (long long)n, x ? x->text : "");
        vx_history_free(h, nh);
    }
    return 0;
}

int lql_h_rollback(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    if (state_of(s, st, &es, e) || open_journal(s, st, es, 0, e))
        return -1;
    if (!es->j)
        return lql_errf(e, LQL_EEXEC, &st->at, "no such history entry: %lld (the history is "
                        "empty)", (long long)st->n);
    int64_t count;
    vx_err ve = {0};
    if (vx_journal_rollback(es->j, st->n, &count, &ve))
        return lql_err_vx(e, &ve, &st->at);
    if (refresh(s, st, es, e))
        return -1;
    lql_result_note(r, "rolled back to %lld (%lld statement%s undone)", (long long)st->n,
                    (long long)count, count == 1 ? "" : "s");
    return 0;
}

int lql_h_show_patches(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    if (state_of(s, st, &es, e))
        return -1;
    static const lql_colspec cols[] = {
        {"patch", LQL_TEXT, 0}, {"ops", LQL_INT, 0}, {"inserts", LQL_INT, 0},
        {"updates", LQL_INT, 0}, {"deletes", LQL_INT, 0}, {"status", LQL_TEXT, 0},
        {"source", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "patches", 7, cols);
    if (!t)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    vx_patch_info *p = NULL;
    size_t n = 0;
    vx_err ve = {0};
    if (es->j && vx_journal_patches(es->j, &p, &n, &ve))
        return lql_err_vx(e, &ve, &st->at);
    int64_t total = 0, pending = 0;
    for (size_t i = 0; i < n; i++) {
        lql_row(t);
        lql_cell_text(t, p[i].name);
        lql_cell_int(t, p[i].n_ops);
        lql_cell_int(t, p[i].n_insert);
        lql_cell_int(t, p[i].n_update);
        lql_cell_int(t, p[i].n_delete);
        lql_cell_text(t, p[i].recording ? "recording" : p[i].applied ? "applied" : "removed");
        lql_cell_text(t, p[i].source);
        if (p[i].applied)
            total += p[i].n_ops;
        if (p[i].recording)
            pending = p[i].n_ops;
    }
    lql_result_note(r, "total: %lld active operation%s", (long long)total,
                    total == 1 ? "" : "s");
    const char *rec = es->j ? vx_journal_recording_name(es->j) : NULL;
    if (rec)
        lql_result_note(r, "recording: %s (%lld ops)", rec, (long long)pending);
    else
        lql_result_note(r, "recording: none");
    vx_patch_infos_free(p, n);
    return 0;
}

int lql_h_show_history(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    if (state_of(s, st, &es, e))
        return -1;
    static const lql_colspec cols[] = {
        {"n", LQL_INT, 0}, {"statement", LQL_TEXT, 0}, {"patch", LQL_TEXT, 0},
        {"ops", LQL_INT, 0}, {"status", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "history", 5, cols);
    if (!t)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    vx_history_entry *h = NULL;
    size_t n = 0;
    vx_err ve = {0};
    if (es->j && vx_journal_history(es->j, &h, &n, &ve))
        return lql_err_vx(e, &ve, &st->at);
    for (size_t i = 0; i < n; i++) {
        lql_row(t);
        lql_cell_int(t, h[i].n);
        lql_cell_text(t, h[i].text);
        lql_cell_text(t, h[i].patch_name);
        lql_cell_int(t, h[i].n_ops);
        lql_cell_text(t, h[i].undone ? "undone" : strcmp(h[i].action, "remove") == 0
                                                      ? "removed patch" : "active");
    }
    lql_result_note(r, "journal: %s", es->j ? vx_journal_path(es->j) : es->jpath ? es->jpath
                                      : es->jerr);
    vx_history_free(h, n);
    return 0;
}

/* ---------------------------------------------------------------- not provided */

/* ---------------------------------------------------------------- DIFF */

/* One side of a DIFF: CURRENT (the bound base plus the overlay) or a container path (its
 * stored state). */
typedef struct side {
    const char *label;
    vx_container *c;          /* owned when a path was given */
    brw_model *bm;            /* owned when a path was given */
    int owned;
    const brw_overlay *bov;   /* CURRENT's overlay, else NULL */
    const brw_edit_overlay *edit;
} side;

static void side_close(side *d)
{
    if (d->owned) {
        brw_close(d->bm);
        vx_close(d->c);
    }
    memset(d, 0, sizeof *d);
}

static int side_open(lql_session *s, const lql_stmt *st, edit_state *es, const char *path,
                     const lql_span *at, side *d, lql_err *e)
{
    memset(d, 0, sizeof *d);
    vx_err ve = {0};
    if (!path) {
        d->label = "CURRENT";
        d->c = s->vx;
        d->bm = es->bm;
        d->edit = es->ov;
        d->bov = es->ov ? brw_edit_overlay_browse(es->ov) : NULL;
        return 0;
    }
    d->label = path;
    d->owned = 1;
    if (vx_open(path, &d->c, &ve) || brw_open(d->c, &d->bm, &ve)) {
        vx_close(d->c);
        memset(d, 0, sizeof *d);
        return lql_err_vx(e, &ve, at ? at : &st->at);
    }
    return 0;
}

typedef struct drow {
    int layer;
    int64_t feature;
    const char *status;
    brw_meta a, b;
} drow;

/* Does a layer pass the LAYER clause? */
static int layer_ok(const lql_stmt *st, int layer)
{
    return !lql_has(st, LQL_C_LAYER) || st->layer == layer;
}

/* The features whose effective state differs between the sides. */
static int diff_features(const lql_stmt *st, const side *A, const side *B, drow **out,
                         size_t *n, lql_err *e)
{
    *out = NULL;
    *n = 0;
    int L = brw_layers(A->bm);
    if (L != brw_layers(B->bm))
        return lql_errf(e, LQL_EEXEC, &st->at, "cannot DIFF models of different depth: %s has "
                        "%d layers, %s has %d", A->label, L, B->label, brw_layers(B->bm));
    size_t cap = 0;
    for (int l = 0; l < L; l++) {
        if (brw_features(A->bm, l) != brw_features(B->bm, l))
            return lql_errf(e, LQL_EEXEC, &st->at, "cannot DIFF: layer %d has %lld features in "
                            "%s and %lld in %s", l, (long long)brw_features(A->bm, l), A->label,
                            (long long)brw_features(B->bm, l), B->label);
        if (!layer_ok(st, l))
            continue;
        for (int64_t f = 0; f < brw_features(A->bm, l); f++) {
            drow d = {l, f, NULL, {0}, {0}};
            brw_feature_meta(A->bm, A->bov, l, f, &d.a);
            brw_feature_meta(B->bm, B->bov, l, f, &d.b);
            int ta = brw_edit_is_tombstone(A->edit, l, f), tb = brw_edit_is_tombstone(B->edit, l, f);
            /* a tombstone on one side matches a feature without metadata on the other (a
             * compiled tombstone) */
            if (ta || tb) {
                if (tb && !ta && d.a.present)
                    d.status = "deleted";
                else if (ta && !tb && d.b.present)
                    d.status = "restored";
                else
                    continue;
            } else if (d.a.present != d.b.present || d.a.top_id != d.b.top_id ||
                       fabsf(d.a.c_score - d.b.c_score) > 0.01f) {
                d.status = !d.a.present ? "added" : !d.b.present ? "removed" : "modified";
            } else {
                continue;
            }
            if (lql_has(st, LQL_C_RELATION)) {
                const char *la = brw_label(A->bm, l, f), *lb = brw_label(B->bm, l, f);
                if (!(la && !strcasecmp(la, st->relation)) && !(lb && !strcasecmp(lb, st->relation)))
                    continue;
            }
            if (*n == cap) {
                cap = cap ? cap * 2 : 64;
                drow *nr = realloc(*out, cap * sizeof *nr);
                if (!nr)
                    return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
                *out = nr;
            }
            (*out)[(*n)++] = d;
        }
    }
    return 0;
}

/* Is the tensor in the LAYER clause's layer (or no clause)? */
static int tensor_in_layer(const lql_stmt *st, const char *name)
{
    int l;
    return !lql_has(st, LQL_C_LAYER) ||
           (sscanf(name, "layers.%d.", &l) == 1 && l == st->layer);
}

/* Per-tensor value deltas of the effective states. */
static int diff_tensors(const lql_stmt *st, const side *A, const side *B, lql_result *r,
                        lql_err *e)
{
    static const lql_colspec cols[] = {
        {"object", LQL_TEXT, 0}, {"tensor", LQL_TEXT, 0}, {"changed", LQL_INT, 0},
        {"max_abs_diff", LQL_FLOAT, 6}, {"status", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "tensors", 5, cols);
    if (!t)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    const eng_overlay *oa = A->edit ? brw_edit_overlay_eng(A->edit) : NULL;
    const eng_overlay *ob = B->edit ? brw_edit_overlay_eng(B->edit) : NULL;
    for (size_t i = 0; i < vx_tensor_count(A->c); i++) {
        const vx_tensor *x = vx_tensor_at(A->c, i), *y = vx_find(B->c, x->object, x->name);
        if (!tensor_in_layer(st, x->name))
            continue;
        const char *status = NULL;
        int64_t changed = 0;
        double mx = 0;
        int have_mx = 0;
        if (!y) {
            status = "only in a";
        } else if (vx_tensor_nelems(x) != vx_tensor_nelems(y) || x->ndim != y->ndim ||
                   memcmp(x->shape, y->shape, sizeof x->shape)) {
            status = "shape differs";
        } else {
            float *fa = NULL, *fb = NULL;
            int ea = 0, eb = 0;
            vx_err ve = {0};
            if (!oa && !ob && x->dtype == y->dtype && x->nbytes == y->nbytes &&
                (x->data == y->data || memcmp(x->data, y->data, (size_t)x->nbytes) == 0))
                continue;
            if (brw_edit_tensor_f32(A->c, oa, x, &fa, &ea, &ve) ||
                brw_edit_tensor_f32(B->c, ob, y, &fb, &eb, &ve)) {
                free(fa);
                if (ve.code != VX_EUNSUPPORTED)
                    return lql_err_vx(e, &ve, &st->at);
                status = x->nbytes == y->nbytes && !memcmp(x->data, y->data, (size_t)x->nbytes)
                             ? NULL : "bytes differ";
            } else {
                uint64_t n = vx_tensor_nelems(x);
                for (uint64_t k = 0; k < n; k++) {
                    double d = fabs((double)fa[k] - fb[k]);
                    changed += d > 0;
                    mx = fmax(mx, d);
                }
                free(fa);
                free(fb);
                have_mx = 1;
                status = changed ? "modified" : NULL;
            }
            if (!status)
                continue;
        }
        lql_row(t);
        lql_cell_text(t, x->object);
        lql_cell_text(t, x->name);
        lql_cell_int(t, changed);
        if (have_mx)
            lql_cell_float(t, mx);
        else
            lql_cell_null(t);
        lql_cell_text(t, status);
    }
    for (size_t i = 0; i < vx_tensor_count(B->c); i++) {
        const vx_tensor *y = vx_tensor_at(B->c, i);
        if (tensor_in_layer(st, y->name) && !vx_find(A->c, y->object, y->name)) {
            lql_row(t);
            lql_cell_text(t, y->object);
            lql_cell_text(t, y->name);
            lql_cell_int(t, 0);
            lql_cell_null(t);
            lql_cell_text(t, "only in b");
        }
    }
    return 0;
}

/* PHYSICAL: the segment files as index.json records them. */
static int diff_segments(const side *A, const side *B, lql_result *r, lql_err *e)
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

/* INTO PATCH: the feature differences as vector-free operations on side a. */
static int diff_patch(const lql_stmt *st, const side *A, const side *B, const drow *rows,
                      size_t n, lql_result *r, lql_err *e)
{
    if (lql_output_path(st->into, "DIFF INTO PATCH", &st->clause_at[LQL_C_INTO_PATCH], e))
        return -1;
    vx_patch p = {0};
    char now[32];
    vx_utc_now(now);
    p.version = 1;
    p.base_model = (char *)model_name(A->c);
    p.base_checksum = (char *)vx_index_sha256(A->c);
    p.created_at = now;
    p.description = (char *)"diff";
    p.ops = calloc(n + 1, sizeof *p.ops);
    if (!p.ops)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    size_t skipped = 0;
    vx_err ve = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        vx_op *op = &p.ops[p.nops];
        int del = !strcmp(rows[i].status, "deleted") || !strcmp(rows[i].status, "removed");
        if (!del && !rows[i].b.present) {
            skipped++;
            continue;
        }
        vx_op_init(op, del ? VX_OP_DELETE : VX_OP_UPDATE);
        op->layer = rows[i].layer;
        op->feature = (int)rows[i].feature;
        if (!del) {
            op->has_meta = 1;
            op->meta_id = rows[i].b.top_id;
            op->meta_c = rows[i].b.c_score;
            const char *piece = brw_token_text(B->bm, rows[i].b.top_id);
            if (vx_op_set_str(&op->meta_token, piece ? piece : "", &ve))
                rc = lql_err_vx(e, &ve, &st->at);
        }
        p.nops++;
    }
    if (rc == 0 && vx_patch_write(st->into, &p, &ve))
        rc = lql_err_vx(e, &ve, &st->clause_at[LQL_C_INTO_PATCH]);
    if (rc == 0)
        lql_result_note(r, "wrote %zu operations to %s%s", p.nops, st->into,
                        skipped ? " (restored features have no vector-free form: skipped)" : "");
    vx_ops_free(p.ops, p.nops);
    return rc;
}

int lql_h_diff(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    side A, B;
    if (state_of(s, st, &es, e) || open_browse(s, st, es, e))
        return -1;
    if (es->j && refresh(s, st, es, e))
        return -1;
    if (side_open(s, st, es, st->arg, &st->arg_at, &A, e))
        return -1;
    if (side_open(s, st, es, st->arg2, &st->arg2_at, &B, e)) {
        side_close(&A);
        return -1;
    }
    drow *rows = NULL;
    size_t n = 0;
    int rc = -1;
    if (lql_has(st, LQL_C_RELATION)) {
        brw_stats sa, sb;
        vx_err ve = {0};
        if (brw_stats_get(A.bm, &sa, &ve) || brw_stats_get(B.bm, &sb, &ve)) {
            lql_err_vx(e, &ve, &st->at);
            goto done;
        }
        if (!sa.labelled && !sb.labelled) {
            lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_RELATION], "RELATION needs relation "
                     "labels: neither side has feature labels");
            goto done;
        }
    }
    if (diff_features(st, &A, &B, &rows, &n, e))
        goto done;
    static const lql_colspec cols[] = {
        {"layer", LQL_INT, 0}, {"feature", LQL_INT, 0}, {"a", LQL_TEXT, 0},
        {"b", LQL_TEXT, 0}, {"c_a", LQL_FLOAT, 4}, {"c_b", LQL_FLOAT, 4},
        {"status", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "features", 7, cols);
    if (!t) {
        lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
        goto done;
    }
    size_t limit = lql_has(st, LQL_C_LIMIT) ? (size_t)st->limit : 20;
    for (size_t i = 0; i < n && i < limit; i++) {
        char ta[256], tb[256];
        brw_trim(rows[i].a.present ? brw_token_text(A.bm, rows[i].a.top_id) : "", ta, sizeof ta);
        brw_trim(rows[i].b.present ? brw_token_text(B.bm, rows[i].b.top_id) : "", tb, sizeof tb);
        lql_row(t);
        lql_cell_int(t, rows[i].layer);
        lql_cell_int(t, rows[i].feature);
        lql_cell_text(t, ta);
        lql_cell_text(t, tb);
        lql_cell_float(t, rows[i].a.c_score);
        lql_cell_float(t, rows[i].b.c_score);
        lql_cell_text(t, rows[i].status);
    }
    lql_result_note(r, "%zu feature%s differ%s", n, n == 1 ? "" : "s",
                    n > limit ? " (LIMIT shows the first ones)" : "");
    if ((lql_has(st, LQL_C_PHYSICAL) ? diff_segments(&A, &B, r, e) : diff_tensors(st, &A, &B, r, e)) ||
        (lql_has(st, LQL_C_INTO_PATCH) && diff_patch(st, &A, &B, rows, n, r, e)))
        goto done;
    rc = 0;
done:
    free(rows);
    side_close(&A);
    side_close(&B);
    return rc;
}

/* ON CONFLICT FAIL: the first feature slot that operations of two different patches
 * touch, refused by name; 0 when there is none. */
static int check_conflicts(edit_state *es, const lql_stmt *st, lql_err *e)
{
    vx_op *ops = NULL;
    size_t n = 0;
    vx_err ve = {0};
    if (active_ops(es, &ops, &n, &ve))
        return lql_err_vx(e, &ve, &st->at);
    int rc = 0;
    for (size_t a = 0; a < n && rc == 0; a++)
        for (size_t b = a + 1; b < n && rc == 0; b++)
            if (ops[a].feature >= 0 && ops[a].layer == ops[b].layer &&
                ops[a].feature == ops[b].feature && ops[a].patch_id != ops[b].patch_id)
                rc = lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_ON_CONFLICT],
                              "conflict: layer %d feature %d is edited by two patches "
                              "(operations %lld and %lld); ON CONFLICT LAST_WINS keeps the later",
                              ops[a].layer, ops[a].feature, (long long)ops[a].seq,
                              (long long)ops[b].seq);
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
static int resolve_confidence(edit_state *es, const lql_stmt *st, lql_result *r,
                              brw_edit_overlay **out, size_t *n_aside, lql_err *e)
{
    vx_op *ops = NULL;
    size_t n = 0;
    vx_err ve = {0};
    *out = NULL;
    *n_aside = 0;
    if (active_ops(es, &ops, &n, &ve))
        return lql_err_vx(e, &ve, &st->at);
    char *aside = calloc(n ? n : 1, 1);
    vx_op *kept = calloc(n ? n : 1, sizeof *kept);
    int rc = 0;
    if (!aside || !kept)
        rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
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
        (*n_aside)++;
        lql_result_note(r, "ON CONFLICT HIGHEST_CONFIDENCE: layer %d feature %d: operation "
                        "%lld (confidence %.4g) set aside for operation %lld (confidence %.4g)",
                        ops[a].layer, ops[a].feature, (long long)ops[a].seq,
                        op_confidence(&ops[a]), (long long)ops[win].seq,
                        op_confidence(&ops[win]));
    }
    size_t nk = 0;
    for (size_t a = 0; a < n && rc == 0; a++)
        if (!aside[a])
            kept[nk++] = ops[a];   /* shallow: the overlay copies what it keeps */
    if (rc == 0 && nk && brw_edit_overlay_build(es->bm, kept, nk, out, &ve))
        rc = lql_err_vx(e, &ve, &st->at);
    if (rc == 0 && !*out)
        rc = lql_errf(e, LQL_EEXEC, &st->at, "nothing to compile: every operation was set "
                      "aside by ON CONFLICT HIGHEST_CONFIDENCE");
    free(kept);
    free(aside);
    vx_ops_free(ops, n);
    return rc;
}

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
             last_residuals(m, ids, n, p->resid, p->logits, ve);
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

/* The gate's settings and findings. bm NULL: no WALK comparison (COMPACT). */
typedef struct probe_gate {
    const brw_model *bm;          /* the source's browse model */
    const brw_overlay *bov;       /* the overlay WALK runs through there (may be NULL) */
    const eng_overlay *ov;        /* its tombstones: dropped by the overlay's WALK only */
    double rel;                   /* tolerance, relative to the logit scale */
    double logit, lens, walk;     /* out: largest differences over the probes */
    double scale;                 /* out: the largest |logit| of the source over the probes */
    char walk_bad[160];           /* out: the first WALK hit that is not explained by a tie */
    char meta_bad[200];           /* out: the first feature whose metadata differs */
} probe_gate;

/* Every feature the overlay gives metadata or a tombstone must read the same (presence,
 * top token, c_score) in the compiled container as through the overlay. */
static void meta_compare(const brw_model *ma, const brw_overlay *ova, const brw_model *mb,
                         char *bad, size_t nbad)
{
    const size_t nm = ova ? ova->n_meta : 0, ne = ova && ova->eng ? ova->eng->n_edits : 0;
    for (size_t i = 0; i < nm + ne && !bad[0]; i++) {
        int layer = i < nm ? ova->meta[i].layer : ova->eng->edits[i - nm].layer;
        int64_t f = i < nm ? ova->meta[i].feature : ova->eng->edits[i - nm].feature;
        if (i >= nm && !ova->eng->edits[i - nm].tombstone)
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
static int walk_compare(const brw_model *ma, const brw_overlay *ova, const brw_model *mb,
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

/* Run the check prompts through m and the container at out, under m's profile (INFER
 * logits, TRACE lens of every layer, and with g->bm WALK hits), as a table titled names[0] with columns names[1]
 * and names[2]; the largest differences go to g. */
static int check_compiled(eng_model *m, const char *out, const char *const *prompts, int np,
                          const char *const names[3], probe_gate *g, lql_result *r,
                          const lql_stmt *st, lql_err *e)
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
        return lql_err_vx(e, &ve, &st->arg2_at);
    }
    const size_t V = (size_t)eng_model_vocab(m), L = (size_t)eng_model_layers(m),
                 H = (size_t)eng_model_hidden(m);
    probe_read pa = {malloc(V * sizeof(float)), malloc(L * H * sizeof(float)),
                     malloc(L * V * sizeof(float))};
    probe_read pb = {malloc(V * sizeof(float)), malloc(L * H * sizeof(float)),
                     malloc(L * V * sizeof(float))};
    const lql_colspec cols[] = {
        {"prompt", LQL_TEXT, 0}, {names[1], LQL_TEXT, 0}, {names[2], LQL_TEXT, 0},
        {"max_logit_diff", LQL_FLOAT, 6}, {"max_lens_diff", LQL_FLOAT, 6},
        {"max_walk_diff", LQL_FLOAT, 6}};
    lql_table *t = lql_result_table(r, names[0], g->bm ? 6 : 5, cols);
    g->logit = g->lens = g->walk = g->scale = 0;
    g->walk_bad[0] = g->meta_bad[0] = '\0';
    if (g->bm)
        meta_compare(g->bm, g->bov, b2, g->meta_bad, sizeof g->meta_bad);
    int rc = 0;
    if (!pa.logits || !pa.resid || !pa.lens || !pb.logits || !pb.resid || !pb.lens || !t ||
        eng_model_layers(m2) != (int)L || eng_model_vocab(m2) != (int)V)
        rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    for (int i = 0; i < np && rc == 0; i++) {
        if (probe_run(m, prompts[i], &pa, &ve) || probe_run(m2, prompts[i], &pb, &ve)) {
            rc = lql_err_vx(e, &ve, &st->at);
            break;
        }
        double sc = 0, wd = 0;
        for (size_t v = 0; v < V; v++)
            sc = fmax(sc, fabs((double)pa.logits[v]));
        g->scale = fmax(g->scale, sc);
        /* WALK scores are judged in the unit of this prompt's logits */
        if (g->bm && walk_compare(g->bm, g->bov, b2, g->ov, prompts[i], g->rel * fmax(sc, 1.0),
                                  &wd, g->walk_bad, sizeof g->walk_bad, &ve)) {
            rc = lql_err_vx(e, &ve, &st->at);
            break;
        }
        double dl = max_absdiff(pa.logits, pb.logits, V);
        double dn = max_absdiff(pa.lens, pb.lens, L * V);
        g->logit = fmax(g->logit, dl);
        g->lens = fmax(g->lens, dn);
        g->walk = fmax(g->walk, wd);
        lql_row(t);
        lql_cell_text(t, prompts[i]);
        lql_cell_text(t, eng_tok_piece(eng_model_tokenizer(m), argmax(pa.logits, (int)V)));
        lql_cell_text(t, eng_tok_piece(eng_model_tokenizer(m2), argmax(pb.logits, (int)V)));
        lql_cell_float(t, dl);
        lql_cell_float(t, dn);
        if (g->bm)
            lql_cell_float(t, wd);
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

/* The gate's tolerance relative to the logit scale, from the dtypes of the tensors COMPILE
 * rewrote: 1e-5 when all are f32 (exact materialisation; what remains is summation order),
 * looser where COMPILE rounds the edited tensors once (f16 keeps 11 significant bits, bf16
 * 8; a block-quantised tensor's edited blocks are quantised again: q8_0 rounds each weight
 * to 1/254 of its block's largest magnitude, 4-bit codecs to about 1/30). */
static double gate_tolerance(const brw_compile_report *rep, const char **why)
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

int lql_h_compile(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = NULL;
    eng_model *m = NULL;
    /* INTO MODEL (exec_export.c): the overlay is compiled into a staging container, which
     * is then exported; with nothing edited the bound container is exported as it is */
    const int model = lql_has(st, LQL_C_INTO_MODEL);
    char staging[4200];
    const char *out = model ? lql_export_staging(st, staging, sizeof staging) : st->arg2;
    if ((model && lql_export_check(st, e)) || state_of(s, st, &es, e) ||
        open_browse(s, st, es, e) || refresh(s, st, es, e) || lql_session_model(s, st, &m, e))
        return -1;
    if (!es->ov && model)
        return lql_export_run(s, st, NULL, r, e);
    if (!es->ov)
        return lql_errf(e, LQL_EEXEC, &st->at, "nothing to compile: the overlay is empty "
                        "(no active edits in %s)", es->jpath ? es->jpath : "any journal");
    if (lql_has(st, LQL_C_ON_CONFLICT) && st->conflict == LQL_CONFLICT_FAIL &&
        check_conflicts(es, st, e))
        return -1;
    /* what is compiled: the session's overlay, or the one HIGHEST_CONFIDENCE resolves */
    brw_edit_overlay *hov = NULL;
    size_t n_aside = 0;
    if (lql_has(st, LQL_C_ON_CONFLICT) && st->conflict == LQL_CONFLICT_HIGHEST_CONFIDENCE &&
        resolve_confidence(es, st, r, &hov, &n_aside, e))
        return -1;
    const brw_edit_overlay *use = hov ? hov : es->ov;
    /* provenance: the base, the journal, the patches applied */
    cJSON *prov = cJSON_CreateObject(), *names = cJSON_AddArrayToObject(prov, "patches");
    vx_patch_info *pi = NULL;
    size_t npi = 0;
    vx_err ve = {0};
    brw_edit_counts cnt;
    brw_edit_overlay_counts(use, &cnt);
    cJSON_AddStringToObject(prov, "index_sha256", vx_index_sha256(s->vx));
    cJSON_AddStringToObject(prov, "model", model_name(s->vx));
    cJSON_AddStringToObject(prov, "journal", vx_journal_path(es->j));
    cJSON_AddNumberToObject(prov, "operations", (double)cnt.ops);
    if (vx_journal_patches(es->j, &pi, &npi, &ve) == 0)
        for (size_t i = 0; i < npi; i++)
            if (pi[i].applied && pi[i].n_ops)
                cJSON_AddItemToArray(names, cJSON_CreateString(pi[i].name));
    vx_patch_infos_free(pi, npi);
    if (cnt.knn) {
        cJSON_Delete(prov);
        brw_edit_overlay_free(hov);
        return lql_errf(e, LQL_EEXEC, &st->at, "compile: %zu KNN-store entr%s (INSERT … MODE "
                        "KNN) cannot be carried: a container has no residual-key store; UNDO "
                        "%s or REMOVE %s patch, then COMPILE", cnt.knn, cnt.knn == 1 ? "y" :
                        "ies", cnt.knn == 1 ? "it" : "them", cnt.knn == 1 ? "its" : "their");
    }
    brw_compile_report rep;
    cJSON_AddNumberToObject(prov, "set_aside_by_highest_confidence", (double)n_aside);
    int rc = brw_edit_compile(s->vx, brw_edit_overlay_browse(use), out, prov, &rep, &ve);
    cJSON_Delete(prov);
    if (rc) {
        brw_edit_overlay_free(hov);
        return lql_err_vx(e, &ve, &st->arg2_at);
    }
    /* the compiled container must answer as the overlay does: the inserted facts' prompts
     * and two fixed ones */
    vx_op *ops = NULL;
    size_t nops = 0;
    char *prompts[18] = {0};
    int np = 0;
    prompts[np++] = strdup("The capital of France is");
    prompts[np++] = strdup("Once upon a time");
    prompts[np++] = strdup("A baby cat is called a");
    if (active_ops(es, &ops, &nops, &ve) == 0)
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
            rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    static const char *const heads[3] = {"compiled vs overlay", "overlay", "compiled"};
    const char *why = NULL;
    probe_gate g = {es->bm, brw_edit_overlay_browse(use), brw_edit_overlay_eng(use),
                    gate_tolerance(&rep, &why), 0, 0, 0, 0, "", ""};
    /* the probes run the overlay that was compiled, then the session's again */
    lql_session_set_overlay(s, brw_edit_overlay_eng(use));
    if (rc == 0)
        rc = check_compiled(m, out, (const char *const *)prompts, np, heads, &g, r, st, e);
    lql_session_set_overlay(s, brw_edit_overlay_eng(es->ov));
    brw_edit_overlay_free(hov);
    double tol = g.rel * fmax(g.scale, 1.0);
    if (rc == 0 && (g.logit > tol || g.lens > tol || g.walk_bad[0] || g.meta_bad[0])) {
        char what[256];
        if (g.logit > tol || g.lens > tol)
            snprintf(what, sizeof what, "%s differ by %.3g", g.logit > tol ? "INFER logits" :
                     "TRACE lens logits", g.logit > tol ? g.logit : g.lens);
        else
            snprintf(what, sizeof what, "%s", g.walk_bad[0] ? g.walk_bad : g.meta_bad);
        vx_rmtree(out);
        rc = lql_errf(e, LQL_EEXEC, &st->arg2_at, "compile: removed '%s', which does not "
                      "answer as the overlay does within %s x logit scale %.3g: %s", out,
                      why, fmax(g.scale, 1.0), what);
    }
    for (int i = 0; i < np; i++)
        free(prompts[i]);
    if (rc == 0 && model)
        rc = lql_export_run(s, st, out, r, e);
    if (rc == 0 && model && rep.meta_written)
        lql_result_note(r, "%zu down-meta records the overlay sets (UPDATE, inserts' metadata) "
                        "are lql's browse metadata, which a checkpoint has no place for: the "
                        "export carries the weights", rep.meta_written);
    if (model)
        vx_rmtree(out);
    if (rc)
        return -1;
    lql_result_note(r, "compile gate: INFER logits, TRACE lens (every layer) and WALK hits "
                    "(top 10 per layer) of %d probes agree within %s x the logit scale; the "
                    "down-meta of every edited feature is equal", np, why);
    lql_result_note(r, "compiled: %s (authority derived; %zu operations materialised into %zu "
                    "tensors of %zu segments and %zu down-meta records; %zu files linked "
                    "unchanged)%s", model ? "the staging container" : st->arg2, cnt.ops,
                    rep.tensors_rewritten, rep.segments_rewritten, rep.meta_written,
                    rep.files_linked, model ? ", then exported and removed" : "");
    if (rep.blocks)
        lql_result_note(r, "compiled: %zu of %zu blocks of the edited block-quantised tensors "
                        "changed and were quantised again (%zu of them to new bytes; the rest "
                        "rounded back); the other blocks keep their bytes",
                        rep.blocks_requantised, rep.blocks, rep.blocks_new_bytes);
    return 0;
}

/* COMPACT's report: one row per file not carried as it was. */
static void compact_rows(const brw_compact_report *rep, lql_result *r)
{
    static const lql_colspec cols[] = {
        {"file", LQL_TEXT, 0}, {"bytes", LQL_INT, 0}, {"fate", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "files not carried", 3, cols);
    for (size_t i = 0; t && i < rep->n_entries; i++) {
        char fate[4200];
        if (rep->entries[i].merged_into)
            snprintf(fate, sizeof fate, "merged into %s", rep->entries[i].merged_into);
        else
            snprintf(fate, sizeof fate, "dropped: nothing references it");
        lql_row(t);
        lql_cell_text(t, rep->entries[i].path);
        lql_cell_int(t, (int64_t)rep->entries[i].bytes);
        lql_cell_text(t, fate);
    }
}

int lql_h_compact(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    const char *src = st->arg ? st->arg : s->vx ? vx_dir(s->vx) : NULL;
    const lql_span *at = st->arg ? &st->arg_at : &st->at;
    if (!src)
        return lql_errf(e, LQL_EEXEC, &st->at, "COMPACT needs a container: name one "
                        "(COMPACT \"dir\") or bind one with USE");
    char rs[4096], rb[4096];
    int bound = s->vx && realpath(src, rs) && realpath(vx_dir(s->vx), rb) && !strcmp(rs, rb);
    if (!st->into && bound)
        return lql_errf(e, LQL_EEXEC, at, "COMPACT in place of the bound container is "
                        "refused: this session maps its files; give INTO VINDEX \"out\" or "
                        "compact it from a session bound elsewhere");
    /* the source model, kept mapped so the probes can run after an in-place exchange */
    vx_container *c = NULL;
    eng_model *m = NULL;
    vx_err ve = {0};
    if (vx_open(src, &c, &ve) || eng_model_bind(c, &m, &ve)) {
        vx_close(c);
        return lql_err_vx(e, &ve, at);
    }
    brw_compact_report rep;
    const char *out = st->into ? st->into : src;
    int rc = st->into ? brw_compact(c, out, &rep, &ve) : brw_compact_in_place(src, &rep, &ve);
    if (rc) {
        rc = lql_err_vx(e, &ve, st->into ? &st->clause_at[LQL_C_INTO_VINDEX] : at);
        goto done;
    }
    compact_rows(&rep, r);
    static const char *const prompts[] = {"The capital of France is", "Once upon a time"};
    static const char *const names[3] = {"compacted vs source", "source", "compacted"};
    probe_gate g = {0};
    if ((rc = check_compiled(m, out, prompts, 2, names, &g, r, st, e)))
        goto done;
    double worst = fmax(g.logit, g.lens);
    if (worst != 0) {
        rc = lql_errf(e, LQL_EEXEC, &st->at, "compact: '%s' answers differently from its "
                      "source (max logit difference %g)", out, worst);
        goto done;
    }
    lql_result_note(r, "compacted: %s (%zu segments -> %zu, %zu representation%s merged, %zu "
                    "file%s dropped (%llu bytes), %zu carried unchanged, %zu tensors "
                    "byte-identical, index.json %s)", out, rep.segments_before,
                    rep.segments_after, rep.reps_merged, rep.reps_merged == 1 ? "" : "s",
                    rep.n_dropped, rep.n_dropped == 1 ? "" : "s",
                    (unsigned long long)rep.bytes_dropped, rep.files_carried,
                    rep.tensors_checked, rep.index_rewritten ? "rewritten" : "carried as it was");
done:
    brw_compact_report_free(&rep);
    eng_model_free(m);
    vx_close(c);
    return rc;
}

/* ---------------------------------------------------------------- USE */

int lql_edit_on_use(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    edit_state *es = calloc(1, sizeof *es);
    if (!es)
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    char path[4096];
    vx_err ve = {0};
    const lql_span *at = lql_has(st, LQL_C_JOURNAL) ? &st->clause_at[LQL_C_JOURNAL] : &st->at;
    s->edit = es;
    s->edit_free = state_free;
    if (s->journal) {
        snprintf(path, sizeof path, "%s", s->journal);
    } else if (vx_journal_locate(vx_dir(s->vx), vx_index_sha256(s->vx), path, sizeof path,
                                 &ve)) {
        /* no place for a journal is no reason to refuse reading: the first edit says it */
        if (!(es->jerr = strdup(ve.msg)))
            return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
        return 0;
    }
    es->located = !s->journal;
    if (!(es->jpath = strdup(path)))
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    /* an existing journal (or an explicit one) is opened now so its edits apply from the
     * first statement; otherwise the first edit creates it */
    if (!s->journal && access(path, F_OK) != 0)
        return 0;
    if (open_journal(s, st, es, 1, e) || refresh(s, st, es, e)) {
        e->line = at->line;
        e->col = at->col;
        e->len = at->len;
        return -1;
    }
    if (es->ov) {
        brw_edit_counts c;
        brw_edit_overlay_counts(es->ov, &c);
        lql_result_note(r, "journal %s: %zu operations replayed (%zu tombstones, %zu replaced "
                        "features, %zu metadata overrides, %zu low-rank deltas)", path, c.ops,
                        c.tombstones, c.replaced, c.meta, c.lowrank);
    }
    return 0;
}
