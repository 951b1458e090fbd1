/*
 * model.c — the effective model (edit.h): journal place and opening, replay into the
 * overlay, recording, DELETE / UPDATE as operations, and the residual-key store's lookup.
 */
#include "ed_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *ed_model_name(const vx_container *c)
{
    const cJSON *idx = vx_index_json(c);
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(idx, "model"));
    return name ? name : "";
}

int ed_model_new(vx_container *c, const char *journal, ed_attach_fn attach, void *ctx,
                 ed_model **out, vx_err *err)
{
    *out = NULL;
    ed_model *ed = calloc(1, sizeof *ed);
    if (!ed)
        return vx_errf(err, VX_ENOMEM, "out of memory");
    ed->c = c;
    ed->attach = attach;
    ed->attach_ctx = ctx;
    ed->explicit_journal = journal != NULL;
    char path[4096];
    vx_err ve = {0};
    if (journal) {
        if (snprintf(path, sizeof path, "%s", journal) >= (int)sizeof path) {
            ed_model_free(ed);
            return vx_errf(err, VX_EARG, "journal path too long (%zu bytes; at most %zu)",
                           strlen(journal), sizeof path - 1);
        }
    } else if (vx_journal_locate(vx_dir(c), vx_index_sha256(c), path, sizeof path, &ve)) {
        /* no place for a journal is no reason to refuse reading: the first edit says it */
        if (!(ed->jerr = strdup(ve.msg))) {
            ed_model_free(ed);
            return vx_errf(err, VX_ENOMEM, "out of memory");
        }
        *out = ed;
        return 0;
    }
    if (!(ed->jpath = strdup(path))) {
        ed_model_free(ed);
        return vx_errf(err, VX_ENOMEM, "out of memory");
    }
    *out = ed;
    return 0;
}

void ed_model_free(ed_model *ed)
{
    if (!ed)
        return;
    vx_journal_close(ed->j);
    ed_overlay_free(ed->ov);
    for (int i = 0; i < SITE_CACHE; i++) {
        free(ed->sites[i].cov);
        free(ed->sites[i].frame);
        free(ed->sites[i].xin);
    }
    free(ed->pres_ids);
    free(ed->pres_lens);
    free(ed->jpath);
    free(ed->jerr);
    free(ed);
}

void ed_model_set_browse(ed_model *ed, brw_model *bm) { ed->bm = bm; }
brw_model *ed_model_browse(const ed_model *ed) { return ed->bm; }
vx_container *ed_model_container(const ed_model *ed) { return ed->c; }
vx_journal *ed_journal(const ed_model *ed) { return ed->j; }
const char *ed_journal_place(const ed_model *ed) { return ed->jpath; }
const ed_overlay *ed_current(const ed_model *ed) { return ed->ov; }

const char *ed_journal_where(const ed_model *ed)
{
    return ed->j ? vx_journal_path(ed->j) : ed->jpath ? ed->jpath : ed->jerr;
}

int ed_journal_open(ed_model *ed, int create, vx_err *err)
{
    if (ed->j)
        return 0;
    if (!ed->jpath)
        return create ? vx_errf(err, VX_EARG, "%s", ed->jerr) : 0;
    if (!create && strcmp(ed->jpath, ":memory:") != 0 && access(ed->jpath, F_OK) != 0)
        return 0;
    if ((!ed->explicit_journal && vx_journal_create_dir(ed->jpath, err)) ||
        vx_journal_open(ed->jpath, vx_index_sha256(ed->c), ed_model_name(ed->c), &ed->j, err))
        return -1;
    vx_journal_strict(ed->j);   /* edits are computed from ed->ov, the last replay */
    return 0;
}

int ed_model_has_journal(const ed_model *ed)
{
    return ed->jpath && ((ed->explicit_journal && strcmp(ed->jpath, ":memory:") == 0) ||
                         access(ed->jpath, F_OK) == 0);
}

int ed_model_load(ed_model *ed, vx_err *err)
{
    /* an existing journal (or an in-memory one) is opened now so its edits apply from the
     * first statement; otherwise the first edit creates it, so a session that only reads
     * creates nothing. A named one must be creatable: said now, not at the first edit. */
    if (!ed_model_has_journal(ed))
        return ed->explicit_journal ? vx_cw_check(ed->jpath, NULL, VX_CW_FILE, "journal", err)
                                    : 0;
    return ed_journal_open(ed, 1, err) || ed_refresh(ed, err) ? -1 : 0;
}

int ed_active_ops(const ed_model *ed, vx_op **ops, size_t *n, vx_err *err)
{
    *ops = NULL;
    *n = 0;
    return ed->j ? vx_journal_active_ops(ed->j, ops, n, err) : 0;
}

int ed_refresh(ed_model *ed, vx_err *err)
{
    vx_op *ops = NULL;
    size_t n = 0;
    ed_overlay *ov = NULL;
    /* the journal's version taken first, as what this replay has seen: a commit landing
     * during the read counts as unseen when an edit computed from it is recorded */
    if (ed_journal_open(ed, 0, err) || (ed->j && vx_journal_moved(ed->j, err) < 0) ||
        ed_active_ops(ed, &ops, &n, err))
        return -1;
    if (n && !ed->bm) {
        vx_ops_free(ops, n);
        return vx_errf(err, VX_EARG, "the effective model has no browse model to replay into "
                       "(ed_model_set_browse)");
    }
    int rc = n ? ed_overlay_build(ed->bm, ops, n, &ov, err) : 0;
    vx_ops_free(ops, n);
    if (rc)
        return -1;
    if (ed->attach)
        ed->attach(ed->attach_ctx, ov ? ed_overlay_eng(ov) : NULL);
    ed_overlay_free(ed->ov);
    ed->ov = ov;
    return 0;
}

int ed_stale(ed_model *ed, vx_err *err)
{
    if (!ed->j)
        return ed->jpath && strcmp(ed->jpath, ":memory:") != 0 && access(ed->jpath, F_OK) == 0;
    return vx_journal_moved(ed->j, err);
}

const eng_overlay *ed_model_overlay(const ed_model *ed)
{
    return ed->ov ? ed_overlay_eng(ed->ov) : NULL;
}

int ed_feature_meta(const ed_model *ed, int layer, int64_t feature, brw_meta *md)
{
    return brw_feature_meta(ed->bm, ed_model_overlay(ed), layer, feature, md);
}

int ed_prepare_meta(const ed_model *ed, const ed_slot *sel, size_t n, vx_err *err)
{
    if (brw_meta_source(ed->bm) != BRW_META_ON_DEMAND || n == 0)
        return 0;
    int *ls = malloc(n * sizeof *ls);
    int64_t *fs = malloc(n * sizeof *fs);
    int rc = !ls || !fs ? vx_errf(err, VX_ENOMEM, "out of memory") : 0;
    for (size_t i = 0; !rc && i < n; i++) {
        ls[i] = sel[i].layer;
        fs[i] = sel[i].feature;
    }
    if (!rc)
        rc = brw_meta_prepare(ed->bm, ls, fs, n, err);
    free(ls);
    free(fs);
    return rc;
}

int ed_record(ed_model *ed, const char *text, const vx_op *ops, size_t n,
              vx_record_info *info, vx_err *err)
{
    if (!ed->bm)   /* checked before anything is journaled: the replay needs it */
        return vx_errf(err, VX_EARG, "the effective model has no browse model to replay into "
                       "(ed_model_set_browse)");
    if (ed_journal_open(ed, 1, err) || vx_journal_record(ed->j, text, ops, n, info, err))
        return -1;
    return ed_refresh(ed, err);
}

/* ---------------------------------------------------------------- delete / update */

int ed_delete(ed_model *ed, const char *text, const ed_slot *sel, size_t n,
              vx_record_info *info, vx_err *err)
{
    vx_op *ops = calloc(n + 1, sizeof *ops);
    if (!ops)
        return vx_errf(err, VX_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        vx_op_init(&ops[i], VX_OP_DELETE);
        ops[i].layer = sel[i].layer;
        ops[i].feature = (int)sel[i].feature;
    }
    int rc = ed_record(ed, text, ops, n, info, err);
    vx_ops_free(ops, n);
    return rc;
}

int ed_update(ed_model *ed, const char *text, const ed_slot *sel, size_t n, int32_t tid,
              double conf, ed_update_row *rows, vx_record_info *info, vx_err *err)
{
    vx_op *ops = calloc(n + 1, sizeof *ops);
    if (!ops)
        return vx_errf(err, VX_ENOMEM, "out of memory");
    int rc = ed_prepare_meta(ed, sel, n, err);
    for (size_t i = 0; i < n && rc == 0; i++) {
        brw_meta md;
        ed_update_row *row = &rows[i];
        row->layer = sel[i].layer;
        row->feature = sel[i].feature;
        memset(&row->before, 0, sizeof row->before);
        if (ed_feature_meta(ed, sel[i].layer, sel[i].feature, &md) == 0)
            row->before = md;
        md = row->before;
        vx_op *op = &ops[i];
        vx_op_init(op, VX_OP_UPDATE);
        op->layer = sel[i].layer;
        op->feature = (int)sel[i].feature;
        op->has_meta = 1;
        op->meta_id = tid >= 0 ? tid : md.present ? md.top_id : -1;
        op->meta_c = !isnan(conf) ? conf : md.present ? md.c_score : 0.0;
        row->top_id = (int32_t)op->meta_id;
        row->c_score = op->meta_c;
        const char *piece = op->meta_id >= 0 ? brw_token_text(ed->bm, (int32_t)op->meta_id)
                                             : NULL;
        rc = vx_op_set_str(&op->meta_token, piece ? piece : "", err);
    }
    if (rc == 0 && n)
        rc = ed_record(ed, text, ops, n, info, err);
    vx_ops_free(ops, n);
    return rc;
}

int ed_target_ids(const eng_tokenizer *tok, const char *target, int32_t **out, size_t *n,
                  vx_err *err)
{
    if (eng_tok_answer_ids(tok, target, out, n, err))
        return -1;
    if (*n == 0) {
        free(*out);
        *out = NULL;
        return vx_errf(err, VX_EARG, "target \"%s\" has no tokens", target);
    }
    return 0;
}

/* ---------------------------------------------------------------- the KNN store */

/* The residual after every layer at the last position of a forward pass, into a
 * [layers × hidden] buffer; ctx is an ed_knn_gen (only its hidden and res are used). */
static void cap_layer(void *ctx, int layer, int pos0, int n, const float *attn,
                      const float *ffn, const float *resid)
{
    (void)pos0;
    (void)attn;
    (void)ffn;
    const ed_knn_gen *c = ctx;
    memcpy(c->res + (size_t)layer * c->hidden, resid + (size_t)(n - 1) * c->hidden,
           (size_t)c->hidden * sizeof *c->res);
}

/* The best key of k[0..nk) above the threshold for the residuals res [L × H]. */
static void best_key(const ed_knn_entry *k, size_t nk, const float *res, int L, int H,
                     ed_knn_hit *hit)
{
    double best = ED_KNN_THRESHOLD;
    hit->entry = NULL;
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
            hit->entry = &k[i];
        }
    }
    hit->cosine = best;
}

int ed_last_residuals(eng_model *m, const int32_t *ids, size_t n, float *res, float *logits,
                      vx_err *ve)
{
    float *lg = logits ? logits : malloc((size_t)eng_model_vocab(m) * sizeof *lg);
    eng_session *ss = NULL;
    ed_knn_gen cap = {.hidden = eng_model_hidden(m), .res = res};
    eng_observer obs = {&cap, NULL, cap_layer, NULL, NULL};
    int rc = !lg ? vx_errf(ve, VX_ENOMEM, "out of memory")
                 : eng_session_new(m, (int)n, &ss, ve) ||
                       eng_forward(ss, ids, (int)n, lg, &obs, ve);
    eng_session_free(ss);
    if (lg != logits)
        free(lg);
    return rc ? -1 : 0;
}

int ed_knn_lookup(const ed_model *ed, eng_model *m, const int32_t *ids, size_t n,
                  ed_knn_hit *hit, vx_err *err)
{
    size_t nk = 0;
    const ed_knn_entry *k = ed_knn(ed ? ed->ov : NULL, &nk);
    hit->entry = NULL;
    hit->cosine = 0;
    if (!nk)
        return 0;
    const int L = eng_model_layers(m), H = eng_model_hidden(m);
    float *res = malloc((size_t)L * H * sizeof *res);
    if (!res)
        return vx_errf(err, VX_ENOMEM, "out of memory");
    if (ed_last_residuals(m, ids, n, res, NULL, err)) {
        free(res);
        return -1;
    }
    best_key(k, nk, res, L, H, hit);
    free(res);
    return 0;
}

static int knn_pick(void *ctx, int32_t *id, vx_err *err)
{
    (void)err;
    ed_knn_gen *g = ctx;
    ed_knn_hit hit;
    best_key(g->keys, g->n_keys, g->res, g->layers, g->hidden, &hit);
    if (hit.entry) {
        *id = hit.entry->target_id;
        if (!g->overridden++) {
            g->first = hit;
            g->first_step = g->steps;
        }
    }
    g->steps++;
    return 0;
}

int ed_knn_gen_hooks(ed_knn_gen *g, const ed_model *ed, const eng_model *m, eng_gen_hooks *h,
                     vx_err *err)
{
    memset(g, 0, sizeof *g);
    g->first_step = -1;
    g->keys = ed_knn(ed ? ed->ov : NULL, &g->n_keys);
    if (!g->n_keys)
        return 0;
    g->layers = eng_model_layers(m);
    g->hidden = eng_model_hidden(m);
    if (!(g->res = calloc((size_t)g->layers * g->hidden, sizeof *g->res)))
        return vx_errf(err, VX_ENOMEM, "out of memory");
    g->obs = (eng_observer){g, NULL, cap_layer, NULL, NULL};
    h->obs = &g->obs;
    h->pick = knn_pick;
    h->pick_ctx = g;
    return 0;
}

void ed_knn_gen_free(ed_knn_gen *g)
{
    free(g->res);
    g->res = NULL;
}
