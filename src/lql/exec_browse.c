/*
 * exec_browse.c — the browse statements: WALK, EXPLAIN WALK, DESCRIBE, SELECT, SHOW
 * FEATURES / RELATIONS / ENTITIES, TRACE and EXPLAIN INFER's per-layer part. Each handler
 * maps the parsed clauses onto a src/browse library call and turns its structs into
 * result tables; every clause the grammar accepts is honoured or refused by name.
 *
 * Browse state (the brw_model over the bound container) is created on first use and
 * kept in the session until the binding changes. The mutation overlay (lql_edit_overlay)
 * is passed to every scan, so edited gate rows are rescored, tombstoned features dropped
 * and metadata overrides shown; TRACE and EXPLAIN INFER run the bound model, which
 * carries the overlay itself.
 */
#include "interp.h"

#include "browse.h"
#include "conds.h"
#include "exec_edit.h"
#include "files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void free_browse(void *p)
{
    brw_close(p);
}

int lql_session_browse(lql_session *s, const lql_stmt *st, brw_model **out, lql_err *e)
{
    vx_container *c;
    if (lql_session_container(s, st, &c, e) != 0)
        return -1;
    if (!s->browse) {
        vx_err ve = {0};
        brw_model *m;
        const eng_tokenizer *tok;
        lql_err te = {0};
        /* without a loadable tokenizer brw_open_tok loads its own and says what is wrong,
         * after the FFN shape checks */
        if (lql_session_tokenizer(s, st, &tok, &te) != 0)
            tok = NULL;
        if (brw_open_tok(c, tok, &m, &ve) != 0)
            return lql_err_vx(e, &ve, &st->at);
        s->browse = m;
        s->browse_free = free_browse;
    }
    *out = s->browse;
    return 0;
}

lql_browse_mark lql_browse_mark_now(const lql_session *s)
{
    lql_browse_mark k = {0};
    if (s->browse) {
        brw_od_stats st;
        brw_meta_stats(s->browse, &st);
        k = (lql_browse_mark){st.computed, st.cached, st.events};
    }
    return k;
}

void lql_browse_note(const lql_session *s, const lql_browse_mark *before, lql_result *r)
{
    if (!s->browse)
        return;
    brw_od_stats st;
    brw_meta_stats(s->browse, &st);
    const unsigned long long c = st.computed - before->computed, k = st.cached - before->cached;
    if (c && k)
        lql_result_note(r, "down-meta of %llu features: %llu computed on demand, %llu read from "
                        "the down-meta cache (the container stores none; STATS counts them)",
                        c + k, c, k);
    else if (c || k)
        lql_result_note(r, "down-meta of %llu feature%s %s (the container stores none; STATS "
                        "counts them)", c + k, c + k == 1 ? "" : "s",
                        c ? "computed on demand" : "read from the down-meta cache");
    if (st.events != before->events)
        lql_result_note(r, "%s", st.why);
}

/* A container whose down-meta is neither stored nor computable leaves the token and down
 * columns empty: a note says why rather than leave them blank. */
static void note_no_meta(const brw_model *m, lql_result *r)
{
    vx_err ve = {0};
    if (brw_meta_source(m) == BRW_META_NONE && brw_meta_refuse(m, &ve) != 0)
        lql_result_note(r, "%s", ve.msg);
}

/* lql_session_browse for a statement that reads FFN features: refused, naming the layer
 * kinds, when no layer has a channel mixer (a pure SSM stack), since an empty answer would
 * say "nothing matches" where the truth is "nothing to browse". */
static int session_features(lql_session *s, const lql_stmt *st, brw_model **out, lql_err *e)
{
    if (lql_session_browse(s, st, out, e) != 0)
        return -1;
    int64_t total = 0;
    for (int l = 0; l < brw_layers(*out); l++)
        total += brw_features(*out, l);
    if (total)
        return 0;
    vx_container *c;
    if (lql_session_container(s, st, &c, e) != 0)
        return -1;
    const vx_graph_shape *g = vx_shape_of(c);
    char kinds[128] = "";
    for (int l = 0; l < g->layers; l++) {
        const char *k = vx_mixer_name(g->layer[l].mixer);
        if (!strstr(kinds, k) && strlen(kinds) + strlen(k) + 3 < sizeof kinds)
            snprintf(kinds + strlen(kinds), sizeof kinds - strlen(kinds), "%s%s", *kinds ? ", " : "", k);
    }
    return lql_errf(e, LQL_EEXEC, &st->at, "this model has no FFN features to browse: every "
                    "layer's channel mixer is 'none' (token mixers: %s)", kinds);
}

static const lql_span *clause_at(const lql_stmt *st, lql_clause_kind c)
{
    return &st->clause_at[c];
}

/* Resolve LAYERS range against the model: -1 -1 for all. */
static int layer_range(const lql_stmt *st, int layers, int *lo, int *hi, lql_err *e)
{
    *lo = *hi = -1;
    if (!lql_has(st, LQL_C_LAYERS) || st->layers.all)
        return 0;
    if (lql_check_layers(e, clause_at(st, LQL_C_LAYERS), st->layers.lo, st->layers.hi,
                         layers) != 0)
        return -1;
    *lo = st->layers.lo;
    *hi = st->layers.hi;
    return 0;
}

/* AT LAYER n checked against the model, or -1 when absent. */
static int at_layer(const lql_stmt *st, const brw_model *m, int *layer, lql_err *e)
{
    *layer = -1;
    if (!lql_has(st, LQL_C_AT_LAYER))
        return 0;
    if (lql_check_layers(e, clause_at(st, LQL_C_AT_LAYER), st->layer, st->layer,
                         brw_layers(m)) != 0)
        return -1;
    *layer = (int)st->layer;
    return 0;
}

static int check_top(const lql_stmt *st, int64_t max, lql_err *e)
{
    if (lql_has(st, LQL_C_TOP) && (st->top <= 0 || st->top > max))
        return lql_errf(e, LQL_EEXEC, clause_at(st, LQL_C_TOP),
                        "TOP must be between 1 and %lld (got %lld)", (long long)max,
                        (long long)st->top);
    return 0;
}

static int oom(lql_err *e)
{
    return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
}

/* Trimmed readable text of a token. */
static void token_text(const brw_model *m, int32_t id, char *buf, size_t n)
{
    if (id < 0) {
        buf[0] = 0;
        return;
    }
    brw_trim(brw_token_text(m, id), buf, n);
}

/* A token's text for a quoted label in a note or title (query token "\n"): untrimmed, so a
 * whitespace token is not shown as "", with quotes, backslashes and control bytes escaped
 * (a cell needs none of this: the renderer shows its control bytes). */
static void token_label(const char *piece, char *buf, size_t n)
{
    size_t o = 0;
    for (const unsigned char *c = (const unsigned char *)piece; *c && o + 5 < n; c++) {
        if (*c == '"' || *c == '\\')
            o += (size_t)snprintf(buf + o, n - o, "\\%c", *c);
        else if (*c == '\n' || *c == '\t' || *c == '\r')
            o += (size_t)snprintf(buf + o, n - o, "\\%c",
                                  *c == '\n' ? 'n' : *c == '\t' ? 't' : 'r');
        else if (*c < 0x20 || *c == 0x7f)
            o += (size_t)snprintf(buf + o, n - o, "\\x%02x", *c);
        else if (*c >= 0xc0 && o + (*c >= 0xf0 ? 4u : *c >= 0xe0 ? 3u : 2u) >= n)
            break; /* a cut never splits a UTF-8 sequence */
        else
            buf[o++] = (char)*c;
    }
    buf[o] = 0;
}

/* token_label of a query token: a whitespace token as its decoded text ("\n"), which the
 * token columns show as its piece ("Ċ") only because trimming would leave nothing. */
static void query_label(const brw_model *m, int32_t id, char *buf, size_t n)
{
    char *text = NULL;
    size_t len;
    vx_err ve;
    if (!brw_token_blank(m, id) ||
        eng_tok_decode_after(brw_tokenizer(m), &id, 1, 0, &text, &len, &ve) != 0)
        text = NULL;
    token_label(text ? text : brw_token_text(m, id), buf, n);
    free(text);
}

/* The first k readable down tokens other than the top one, ", "-joined. */
static void down_list(const brw_model *m, const brw_meta *md, int k, char *buf, size_t n)
{
    buf[0] = 0;
    int taken = 0;
    for (int j = 0; j < md->k && taken < k; j++) {
        char t[128];
        token_text(m, md->ids[j], t, sizeof t);
        if (!t[0])
            continue;
        if (strlen(buf) + strlen(t) + 3 >= n)
            break;
        strcat(buf, taken ? ", " : "");
        strcat(buf, t);
        taken++;
    }
}

/* ---------------------------------------------------------------- WALK */

static int walk_table(const brw_model *m, const eng_overlay *ov, const brw_walk *w,
                      const char *title, int verbose, lql_result *r)
{
    int dense = w->mode == BRW_DENSE;
    lql_colspec cols[] = {{"layer", LQL_INT, 0}, {"feature", LQL_INT, 0},
                          {"gate", LQL_FLOAT, 4}, {"act", LQL_FLOAT, 4},
                          {"token", LQL_TEXT, 0}, {"down", LQL_TEXT, 0},
                          {"c_score", LQL_FLOAT, 4}, {"band", LQL_TEXT, 0}};
    /* the act column only in DENSE mode (elsewhere it would repeat gate) */
    lql_colspec use[8];
    int nc = 0;
    for (int c = 0; c < (verbose ? 8 : 6); c++)
        if (c != 3 || dense)
            use[nc++] = cols[c];
    lql_table *t = lql_result_table(r, title, nc, use);
    if (!t)
        return -1;
    for (int i = 0; i < w->n_layers; i++)
        for (int j = 0; j < w->counts[i]; j++) {
            const brw_hit *h = &w->hits[(size_t)i * (size_t)w->top + j];
            brw_meta md;
            int has = brw_feature_meta(m, ov, h->layer, h->feature, &md) == 0;
            char tok[128], down[512];
            token_text(m, has ? md.top_id : -1, tok, sizeof tok);
            if (has)
                down_list(m, &md, 3, down, sizeof down);
            else
                down[0] = 0;
            lql_row(t);
            lql_cell_int(t, h->layer);
            lql_cell_int(t, h->feature);
            lql_cell_float(t, h->gate);
            if (dense)
                lql_cell_float(t, h->score);
            lql_cell_text(t, has ? tok : NULL);
            lql_cell_text(t, has ? down : NULL);
            if (verbose) {
                if (has)
                    lql_cell_float(t, md.c_score);
                else
                    lql_cell_null(t);
                lql_cell_text(t, brw_band_name(brw_band_of(m, h->layer)));
            }
        }
    return 0;
}

/* What a mode ranks by, for the plan and the note. */
static const char *rank_key(brw_walk_mode mode)
{
    return mode == BRW_PURE ? "gate·q" : mode == BRW_DENSE ? "|act|" : "|gate·q|";
}

/* Bytes scanned, in MB as the notes always said, in kB below 0.05 MB (a small model's
 * layer printed as "0.0 MB"). */
static const char *scanned_size(uint64_t n, char *buf, size_t size)
{
    if (n >= 50000)
        snprintf(buf, size, "%.1f MB", (double)n / 1e6);
    else
        snprintf(buf, size, "%.1f kB", (double)n / 1e3);
    return buf;
}

static int run_walk(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e,
                    int explain)
{
    char sz[32];
    brw_model *m = NULL;
    if (session_features(s, st, &m, e) != 0)
        return -1;
    int verbose = explain && lql_has(st, LQL_C_VERBOSE);
    int64_t maxf = 0;
    for (int l = 0; l < brw_layers(m); l++)
        if (brw_features(m, l) > maxf)
            maxf = brw_features(m, l);
    if (check_top(st, maxf, e) != 0)
        return -1;
    brw_walk_opts o = {.top = lql_has(st, LQL_C_TOP) ? (int)st->top : explain ? (verbose ? 10 : 5) : 3};
    if (lql_has(st, LQL_C_MODE))
        o.mode = st->mode == LQL_MODE_PURE ? BRW_PURE
               : st->mode == LQL_MODE_DENSE ? BRW_DENSE : BRW_HYBRID;
    if (layer_range(st, brw_layers(m), &o.layer_lo, &o.layer_hi, e) != 0)
        return -1;
    const eng_overlay *ov = lql_edit_overlay(s);
    o.ov = ov;
    brw_walk w;
    vx_err ve = {0};
    if (brw_walk_run(m, st->arg, &o, &w, &ve) != 0)
        return lql_err_vx(e, &ve, &st->arg_at);
    char tok[128];
    query_label(m, w.token, tok, sizeof tok);
    int rc = 0;
    if (explain) {
        lql_colspec pc[] = {{"step", LQL_TEXT, 0}, {"detail", LQL_TEXT, 0}};
        lql_table *pt = lql_result_table(r, "plan", 2, pc);
        char d[256];
        if (!pt)
            return oom(e);
        lql_row(pt);
        lql_cell_text(pt, "query");
        snprintf(d, sizeof d, "embedding of \"%s\" (id %d) x %g", brw_token_text(m, w.token),
                 w.token, (double)brw_embed_scale(m));
        lql_cell_text(pt, d);
        lql_row(pt);
        lql_cell_text(pt, "layers");
        snprintf(d, sizeof d, "%d-%d (%d)", w.layers[0], w.layers[w.n_layers - 1], w.n_layers);
        lql_cell_text(pt, d);
        lql_row(pt);
        lql_cell_text(pt, "scan");
        snprintf(d, sizeof d, "%s: top %d by %s per layer, %s of %s read in place",
                 brw_walk_mode_name(w.mode), w.top, rank_key(w.mode),
                 scanned_size(w.bytes_scanned, sz, sizeof sz),
                 w.mode == BRW_DENSE ? "gate and up rows" : "gate rows");
        lql_cell_text(pt, d);
    }
    if (walk_table(m, ov, &w, explain ? "hits" : NULL, verbose, r) != 0)
        rc = oom(e);
    if (rc == 0 && !explain && lql_has(st, LQL_C_COMPARE)) {
        brw_walk b;
        brw_walk_opts ob = o;
        ob.ov = NULL;
        if (brw_walk_run(m, st->arg, &ob, &b, &ve) != 0)
            rc = lql_err_vx(e, &ve, &st->arg_at);
        else {
            if (walk_table(m, NULL, &b, "base (no overlay)", 0, r) != 0)
                rc = oom(e);
            brw_walk_free(&b);
        }
    }
    if (rc == 0 && !explain)
        lql_result_note(r, "query token \"%s\" (id %d), %d layer%s, %s mode (by %s), %s "
                        "of %s scanned; no attention: for inference use INFER", tok, w.token,
                        w.n_layers, w.n_layers == 1 ? "" : "s", brw_walk_mode_name(w.mode),
                        rank_key(w.mode), scanned_size(w.bytes_scanned, sz, sizeof sz),
                        w.mode == BRW_DENSE ? "gate and up rows" : "gate rows");
    if (rc == 0)
        note_no_meta(m, r);
    brw_walk_free(&w);
    return rc;
}

int lql_h_walk(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    return run_walk(s, st, r, e, 0);
}

int lql_h_explain_walk(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    return run_walk(s, st, r, e, 1);
}

/* ---------------------------------------------------------------- DESCRIBE */

static int band_of_clause(lql_band b)
{
    switch (b) {
    case LQL_BAND_SYNTAX: return BRW_SYNTAX;
    case LQL_BAND_KNOWLEDGE: return BRW_KNOWLEDGE;
    case LQL_BAND_OUTPUT: return BRW_OUTPUT;
    default: return -1;
    }
}

/* One row of DESCRIBE's inserted table: facts merged by (layer, relation, target, mode). */
typedef struct fact_row {
    const char *relation, *target, *mode;
    int layer, count;
    int64_t feature;              /* the first slot's, -1 for a low-rank update or a KNN key */
} fact_row;

static int same_text(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcasecmp(a, b) == 0);
}

static void fact_add(fact_row *f, size_t *n, const char *relation, const char *target,
                     const char *mode, int layer, int64_t feature)
{
    for (size_t i = 0; i < *n; i++)
        if (f[i].layer == layer && same_text(f[i].relation, relation) &&
            same_text(f[i].target, target) && same_text(f[i].mode, mode)) {
            f[i].count++;
            return;
        }
    f[(*n)++] = (fact_row){relation, target, mode, layer, 1, feature};
}

/* Does layer l pass DESCRIBE's AT LAYER and band clauses? */
static int describe_layer_ok(const brw_model *m, const brw_describe_opts *o, int l)
{
    return l >= 0 && l < brw_layers(m) && (o->at_layer < 0 || l == o->at_layer) &&
           (o->band < 0 || brw_band_of(m, l) == o->band);
}

/* DESCRIBE's second table: the journal's inserted facts about ent (INSERT in every mode,
 * and APPLY PATCH's inserts), from the entity, relation and target each was made from.
 * The walk finds features by the entity's embedding, which a fact keyed on its prompt's
 * residual need not match (a gated feature, a low-rank update, a KNN key), so without this
 * `DESCRIBE "e"` would not show what `INSERT … VALUES ("e", …)` just taught the model.
 * Deleted features and KNN entries are left out; *shown counts the rows. */
static int describe_inserted(lql_session *s, const lql_stmt *st, const brw_model *m,
                             const char *ent, const brw_describe_opts *o, lql_result *r,
                             size_t *shown, lql_err *e)
{
    *shown = 0;
    ed_model *ed;
    if (lql_edit_model(s, st, 0, &ed, e) != 0)
        return -1;
    vx_op *ops = NULL;
    size_t n = 0, nk = 0, nf = 0;
    vx_err ve = {0};
    if (ed_active_ops(ed, &ops, &n, &ve) != 0)
        return lql_err_vx(e, &ve, &st->at);
    const ed_overlay *cur = ed_current(ed);
    const ed_knn_entry *kn = ed_knn(cur, &nk);
    fact_row *f = calloc(n + nk + 1, sizeof *f);
    if (!f) {
        vx_ops_free(ops, n);
        return oom(e);
    }
    char t[256];
    for (size_t i = 0; i < n; i++) {
        const vx_op *op = &ops[i];
        if (op->kind != VX_OP_INSERT || !op->entity || !describe_layer_ok(m, o, op->layer))
            continue;
        brw_trim(op->entity, t, sizeof t);
        if (strcasecmp(t, ent) != 0 || (op->feature >= 0 && ed_is_tombstone(cur, op->layer, op->feature)))
            continue;
        fact_add(f, &nf, op->relation, op->target, op->mode ? op->mode : "insert", op->layer,
                 op->feature);
    }
    for (size_t i = 0; i < nk; i++) {
        brw_trim(kn[i].entity, t, sizeof t);
        if (strcasecmp(t, ent) == 0 && describe_layer_ok(m, o, kn[i].layer))
            fact_add(f, &nf, kn[i].relation[0] ? kn[i].relation : NULL, kn[i].target, "knn",
                     kn[i].layer, -1);
    }
    int rc = 0;
    if (nf) {
        static const lql_colspec cols[] = {{"band", LQL_TEXT, 0}, {"relation", LQL_TEXT, 0},
            {"target", LQL_TEXT, 0}, {"layer", LQL_INT, 0}, {"feature", LQL_INT, 0},
            {"mode", LQL_TEXT, 0}, {"count", LQL_INT, 0}};
        lql_table *tb = lql_result_table(r, "inserted", 7, cols);
        for (size_t k = 0; tb && k < nf; k++) {
            lql_row(tb);
            lql_cell_text(tb, brw_band_name(brw_band_of(m, f[k].layer)));
            lql_cell_text(tb, f[k].relation);
            lql_cell_text(tb, f[k].target);
            lql_cell_int(tb, f[k].layer);
            if (f[k].feature >= 0)
                lql_cell_int(tb, f[k].feature);
            else
                lql_cell_null(tb);
            lql_cell_text(tb, f[k].mode);
            lql_cell_int(tb, f[k].count);
        }
        rc = tb ? 0 : oom(e);
        *shown = nf;
    }
    free(f);
    vx_ops_free(ops, n);
    return rc;
}

int lql_h_describe(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    brw_model *m = NULL;
    if (session_features(s, st, &m, e) != 0)
        return -1;
    if (brw_meta_source(m) == BRW_META_NONE) {
        vx_err ve = {0};
        brw_meta_refuse(m, &ve);
        return lql_err_vx(e, &ve, &st->at);
    }
    const eng_overlay *ov = lql_edit_overlay(s);
    brw_describe_opts o = {.band = -1, .at_layer = -1, .ov = ov};
    if (lql_has(st, LQL_C_BAND))
        o.band = band_of_clause(st->band);
    if (at_layer(st, m, &o.at_layer, e) != 0)
        return -1;
    /* a layer outside the band named would leave nothing to describe, said as nothing */
    if (o.band >= 0 && o.at_layer >= 0 && brw_band_of(m, o.at_layer) != o.band) {
        int band[3][2], b = brw_band_of(m, o.at_layer);
        brw_bands(m, band);
        char where[64];
        if (band[o.band][0] < 0)
            snprintf(where, sizeof where, "the model has no %s band", lql_band_text(st->band));
        else
            snprintf(where, sizeof where, "layers %d-%d", band[o.band][0], band[o.band][1]);
        return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_AT_LAYER], "AT LAYER %d is %s%s, "
                        "not in %s (%s); give one", o.at_layer, b < 0 ? "in no band" : "in ",
                        b < 0 ? "" : lql_band_text((lql_band)(LQL_BAND_SYNTAX + b)),
                        lql_band_text(st->band), where);
    }
    o.relations_only = lql_has(st, LQL_C_RELATIONS_ONLY);
    o.mode = lql_has(st, LQL_C_RAW) ? BRW_DESCRIBE_RAW
           : lql_has(st, LQL_C_VERBOSE) ? BRW_DESCRIBE_VERBOSE : BRW_DESCRIBE_BRIEF;
    brw_describe d;
    vx_err ve = {0};
    if (brw_describe_run(m, st->arg, &o, &d, &ve) != 0)
        return lql_err_vx(e, &ve, ve.code == VX_EMISSING && o.relations_only
                                      ? &st->clause_at[LQL_C_RELATIONS_ONLY] : &st->arg_at);
    int brief = o.mode == BRW_DESCRIBE_BRIEF, raw = o.mode == BRW_DESCRIBE_RAW;
    lql_colspec all[] = {{"band", LQL_TEXT, 0}, {"relation", LQL_TEXT, 0},
                         {"target", LQL_TEXT, 0}, {"gate", LQL_FLOAT, 4},
                         {"layer", LQL_INT, 0}, {"feature", LQL_INT, 0},
                         {"layers", LQL_TEXT, 0}, {"count", LQL_INT, 0},
                         {"also", LQL_TEXT, 0}};
    lql_colspec cols[9];
    int nc = 0;
    for (int i = 0; i < 9; i++) {
        if (raw && i == 1)
            continue;
        if (brief && i >= 5)
            continue;
        if (!brief && i == 4)
            continue;
        cols[nc++] = all[i];
    }
    lql_table *t = lql_result_table(r, NULL, nc, cols);
    if (!t) {
        brw_describe_free(&d);
        return oom(e);
    }
    for (size_t i = 0; i < d.n_edges; i++) {
        const brw_edge *x = &d.edges[i];
        lql_row(t);
        lql_cell_text(t, brw_band_name(x->band));
        if (!raw)
            lql_cell_text(t, x->relation);
        lql_cell_text(t, x->target);
        lql_cell_float(t, x->gate);
        if (brief) {
            lql_cell_int(t, x->layer);
            continue;
        }
        char span[32], also[512] = "";
        if (x->layer_min == x->layer_max)
            snprintf(span, sizeof span, "L%d", x->layer_min);
        else
            snprintf(span, sizeof span, "L%d-%d", x->layer_min, x->layer_max);
        for (int a = 0; a < x->n_also; a++) {
            strcat(also, a ? ", " : "");
            strncat(also, x->also[a], 100);
        }
        lql_cell_int(t, x->feature);
        lql_cell_text(t, span);
        lql_cell_int(t, x->count);
        lql_cell_text(t, also);
    }
    char ent[256];
    brw_trim(st->arg, ent, sizeof ent);
    size_t facts = 0;
    if (describe_inserted(s, st, m, ent, &o, r, &facts, e) != 0) {
        brw_describe_free(&d);
        return -1;
    }
    if (d.n_edges == 0)
        lql_result_note(r, "%s: no edges found", ent);
    else
        lql_result_note(r, "%s: signal %s (%zu edges, %zu shown, strongest gate scanned %.4f)", ent, d.signal,
                        d.total_edges, d.n_edges, (double)d.max_gate);
    if (facts)
        lql_result_note(r, "%s: %zu inserted fact%s in the journal (the 'inserted' table)", ent,
                        facts, facts == 1 ? "" : "s");
    brw_describe_free(&d);
    return 0;
}

/* ---------------------------------------------------------------- SELECT */

static brw_op op_of(lql_cmpop op)
{
    switch (op) {
    case LQL_OP_EQ: return BRW_EQ;
    case LQL_OP_NE: return BRW_NE;
    case LQL_OP_GT: return BRW_GT;
    case LQL_OP_LT: return BRW_LT;
    case LQL_OP_GE: return BRW_GE;
    case LQL_OP_LE: return BRW_LE;
    case LQL_OP_LIKE: return BRW_LIKE;
    default: return BRW_IN;
    }
}

static void value_of(const lql_value *v, brw_value *out)
{
    out->is_str = v->kind == LQL_V_STR;
    out->num = v->f;
    out->str = v->s;
}

int lql_browse_conds(const lql_cond *where, brw_from from, const char *(*alias)(const char *),
                     brw_cond **conds, size_t *n, brw_value **vals, lql_err *e)
{
    size_t nc = 0, nv = 0;
    for (const lql_cond *c = where; c; c = c->next) {
        nc++;
        nv += c->val.kind == LQL_V_LIST ? (size_t)c->val.n : 1;
    }
    *conds = calloc(nc + 1, sizeof **conds);
    *vals = calloc(nv + 1, sizeof **vals);
    *n = 0;
    if (!*conds || !*vals) {
        free(*conds);
        free(*vals);
        return oom(e);
    }
    size_t vi = 0;
    for (const lql_cond *c = where; c; c = c->next) {
        brw_cond *x = &(*conds)[(*n)++];
        vx_err ve = {0};
        if (brw_cond_field_parse(from, alias ? alias(c->field) : c->field, &x->field, &ve) != 0) {
            free(*conds);
            free(*vals);
            return lql_err_vx(e, &ve, &c->field_at);
        }
        x->op = op_of(c->op);
        x->vals = &(*vals)[vi];
        if (c->val.kind == LQL_V_LIST) {
            for (int i = 0; i < c->val.n; i++)
                value_of(&c->val.items[i], &(*vals)[vi++]);
            x->n_vals = (size_t)c->val.n;
        } else {
            value_of(&c->val, &(*vals)[vi++]);
            x->n_vals = 1;
        }
    }
    return 0;
}

/* Does msg start with the word w? */
static int starts_with_word(const char *msg, const char *w)
{
    size_t n = strlen(w);
    return strncmp(msg, w, n) == 0 && (msg[n] == ' ' || msg[n] == 0);
}

const lql_span *lql_cond_span(const lql_cond *where, brw_from from, const vx_err *ve,
                              const lql_span *other)
{
    for (const lql_cond *c = where; c; c = c->next) {
        brw_field f;
        vx_err ignored;
        if (starts_with_word(ve->msg, c->field) ||
            (brw_cond_field_parse(from, c->field, &f, &ignored) == 0 &&
             starts_with_word(ve->msg, brw_field_name(f))))
            return &c->field_at;
    }
    return other;
}

void lql_note_unread_token(const brw_model *m, brw_from from, const brw_cond *conds, size_t n,
                           lql_result *r)
{
    const brw_field tf = from == BRW_EDGES ? BRW_F_TARGET
                       : from == BRW_ENTITIES ? BRW_F_ENTITY : BRW_F_TOKEN;
    for (size_t i = 0; i < n; i++) {
        const brw_cond *c = &conds[i];
        if (c->field != tf || !(c->op == BRW_EQ || (c->op == BRW_IN && c->n_vals == 1)) ||
            !c->vals[0].is_str || brw_vocab_reads(m, c->vals[0].str))
            continue;
        /* the value as conditions compare it (trimmed), read as INSERT and UPDATE read a
         * target */
        char *value = malloc(strlen(c->vals[0].str) + 1), pieces[512] = "", first[256] = "";
        if (!value)
            return;
        brw_trim(c->vals[0].str, value, strlen(c->vals[0].str) + 1);
        if (!value[0]) {
            free(value);
            continue;
        }
        int32_t *ids = NULL;
        size_t k = 0;
        vx_err ve = {0};
        if (eng_tok_answer_ids(brw_tokenizer(m), value, &ids, &k, &ve) == 0) {
            size_t used = 0;
            for (size_t j = 0; j < k && used + 8 < sizeof pieces; j++) {
                int w = snprintf(pieces + used, sizeof pieces - used, "%s\"%s\"", j ? " " : "",
                                 brw_token_text(m, ids[j]));
                used += w > 0 ? (size_t)w : 0;
            }
            /* the first token offered as a LIKE prefix only when the value starts with its
             * text (a byte of a character shows as its piece, which it does not) and that
             * holds no wildcard */
            if (k) {
                brw_trim(brw_token_text(m, ids[0]), first, sizeof first);
                if (strncmp(value, first, strlen(first)) || strpbrk(first, "%_\\"))
                    first[0] = 0;
            }
        }
        free(ids);
        if (first[0])
            lql_result_note(r, "no token of this vocabulary reads \"%s\" (%s): a feature's token "
                            "is one token, so none equals it; LIKE \"%s%%\" matches its first",
                            value, pieces, first);
        else
            lql_result_note(r, "no token of this vocabulary reads \"%s\": a feature's token is "
                            "one token, so none equals it", value);
        free(value);
        return;
    }
}

static void rows_table(const brw_rows *rows, const brw_field *f, int nf, lql_table *t)
{
    for (size_t i = 0; i < rows->n; i++) {
        const brw_row *x = &rows->rows[i];
        lql_row(t);
        for (int c = 0; c < nf; c++)
            switch (f[c]) {
            case BRW_F_LAYER: lql_cell_int(t, x->layer); break;
            case BRW_F_FEATURE: lql_cell_int(t, x->feature); break;
            case BRW_F_TOKEN: case BRW_F_TARGET: lql_cell_text(t, x->token); break;
            case BRW_F_ENTITY: lql_cell_text(t, x->entity); break;
            case BRW_F_RELATION: lql_cell_text(t, x->relation); break;
            case BRW_F_SCORE: lql_cell_float(t, x->score); break;
            case BRW_F_CONFIDENCE:
                if (x->no_meta) lql_cell_null(t);
                else lql_cell_float(t, x->confidence);
                break;
            case BRW_F_ALSO: lql_cell_text(t, x->also); break;
            case BRW_F_COUNT: lql_cell_int(t, x->count); break;
            case BRW_F_BAND: lql_cell_text(t, brw_band_name(x->band)); break;
            default: lql_cell_null(t); break;
            }
    }
}

static lql_coltype field_type(brw_field f)
{
    switch (f) {
    case BRW_F_LAYER: case BRW_F_FEATURE: case BRW_F_COUNT: return LQL_INT;
    case BRW_F_SCORE: case BRW_F_CONFIDENCE: return LQL_FLOAT;
    default: return LQL_TEXT;
    }
}

/* names: the columns as the statement spelt them (a synonym such as c_score or token heads
 * its column under that name, as SQL does), or NULL for the fields' own names. */
static int emit_rows(const brw_rows *rows, const brw_field *f, const char *const *names, int nf,
                     const char *title, lql_result *r, lql_err *e)
{
    lql_colspec cols[16];
    for (int i = 0; i < nf && i < 16; i++)
        cols[i] = (lql_colspec){names ? names[i] : brw_field_name(f[i]), field_type(f[i]), 4};
    lql_table *t = lql_result_table(r, title, nf, cols);
    if (!t)
        return oom(e);
    rows_table(rows, f, nf, t);
    return 0;
}

static int limit_of(const lql_stmt *st, int64_t *out, lql_err *e)
{
    *out = -1;
    if (!lql_has(st, LQL_C_LIMIT))
        return 0;
    if (st->limit < 0)
        return lql_errf(e, LQL_EEXEC, clause_at(st, LQL_C_LIMIT),
                        "LIMIT must not be negative (got %lld)", (long long)st->limit);
    *out = st->limit;
    return 0;
}

/* A note when the table's default limit cut rows (no LIMIT clause: an explicit LIMIT says
 * nothing, the cut was asked for). */
static void cut_note(const lql_stmt *st, const brw_rows *rows, lql_result *r)
{
    if (!lql_has(st, LQL_C_LIMIT) && rows->total > rows->n)
        lql_result_note(r, "%zu of %zu rows shown (the default limit); LIMIT n shows more",
                        rows->n, rows->total);
}

/* st's WHERE onto o, then SELECT (show_layer < 0) or SHOW FEATURES show_layer, and the
 * rows as one table of fields f. */
static int run_rows(const lql_stmt *st, const brw_model *m, brw_from from, int show_layer,
                    brw_select_opts *o, const brw_field *f, int nf, lql_result *r, lql_err *e)
{
    brw_cond *conds;
    brw_value *vals;
    if (lql_browse_conds(st->where, from, NULL, &conds, &o->n_conds, &vals, e) != 0)
        return -1;
    o->conds = conds;
    brw_rows rows;
    vx_err ve = {0};
    int rc = show_layer >= 0 ? brw_show_features(m, show_layer, o, &rows, &ve)
                             : brw_select(m, from, o, &rows, &ve);
    if (rc != 0)
        rc = lql_err_vx(e, &ve, o->nearest ? clause_at(st, LQL_C_NEAREST)
                                                : lql_cond_span(st->where, from, &ve, &st->at));
    else {
        rc = emit_rows(&rows, f, show_layer < 0 && st->nfields ? st->fields : NULL, nf, NULL,
                       r, e);
        if (rc == 0)
            cut_note(st, &rows, r);
        if (rc == 0 && rows.total == 0)
            lql_note_unread_token(m, from, conds, o->n_conds, r);
        brw_rows_free(&rows);
    }
    free(conds);
    free(vals);
    return rc;
}

int lql_h_select(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    brw_model *m = NULL;
    if (session_features(s, st, &m, e) != 0)
        return -1;
    brw_from from = st->from == LQL_FROM_EDGES ? BRW_EDGES
                  : st->from == LQL_FROM_FEATURES ? BRW_FEATURES : BRW_ENTITIES;
    brw_field f[16];
    int nf = 0;
    vx_err ve = {0};
    if (st->nfields == 0)
        nf = (int)brw_default_fields(from, f, 16);
    for (int i = 0; i < st->nfields && i < 16; i++) {
        if (brw_field_parse(from, st->fields[i], &f[nf], &ve) != 0)
            return lql_err_vx(e, &ve, &st->fields_at[i]);
        nf++;
    }
    const eng_overlay *ov = lql_edit_overlay(s);
    brw_select_opts o = {.ov = ov};
    if (limit_of(st, &o.limit, e) != 0)
        return -1;
    if (lql_has(st, LQL_C_ORDER)) {
        if (brw_field_parse(from, st->order_field, &o.order, &ve) != 0)
            return lql_err_vx(e, &ve, &st->order_at);
        o.has_order = 1;
        o.desc = st->order_desc;
    }
    if (lql_has(st, LQL_C_NEAREST)) {
        if (lql_check_layers(e, clause_at(st, LQL_C_NEAREST), st->layer, st->layer,
                             brw_layers(m)) != 0)
            return -1;
        o.nearest = st->nearest;
        o.nearest_layer = (int)st->layer;
    }
    int rc = run_rows(st, m, from, -1, &o, f, nf, r, e);
    if (rc == 0)
        note_no_meta(m, r);   /* walked edges (an entity, NEAREST TO) have no targets */
    return rc;
}

/* ---------------------------------------------------------------- SHOW */

int lql_h_show_features(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    brw_model *m = NULL;
    if (session_features(s, st, &m, e) != 0)
        return -1;
    if (lql_check_layers(e, &st->n_at, st->n, st->n, brw_layers(m)) != 0)
        return -1;
    const eng_overlay *ov = lql_edit_overlay(s);
    brw_select_opts o = {.ov = ov};
    if (limit_of(st, &o.limit, e) != 0)
        return -1;
    brw_field f[] = {BRW_F_FEATURE, BRW_F_TOKEN, BRW_F_SCORE, BRW_F_ALSO, BRW_F_RELATION};
    return run_rows(st, m, BRW_FEATURES, (int)st->n, &o, f, 5, r, e);
}

/* The browse model and AT LAYER (-1 when absent) of a SHOW statement. */
static int show_at(lql_session *s, const lql_stmt *st, brw_model **m, int *layer, lql_err *e)
{
    if (session_features(s, st, m, e) != 0)
        return -1;
    return at_layer(st, *m, layer, e);
}

int lql_h_show_relations(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    brw_model *m = NULL;
    int layer;
    if (show_at(s, st, &m, &layer, e) != 0)
        return -1;
    int64_t limit;
    if (limit_of(st, &limit, e) != 0)
        return -1;
    const eng_overlay *ov = lql_edit_overlay(s);
    brw_rows rows;
    int labelled;
    float cut;
    vx_err ve = {0};
    if (brw_show_relations(m, layer, limit, ov, &rows, &labelled, &cut, &ve) != 0)
        return lql_err_vx(e, &ve, &st->at);
    int ex = lql_has(st, LQL_C_WITH_EXAMPLES);
    lql_colspec cols[] = {{labelled ? "relation" : "token", LQL_TEXT, 0},
                          {"features", LQL_INT, 0}, {"max_score", LQL_FLOAT, 4},
                          {"layers", LQL_TEXT, 0}, {"examples", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, NULL, ex ? 5 : 4, cols);
    if (!t) {
        brw_rows_free(&rows);
        return oom(e);
    }
    for (size_t i = 0; i < rows.n; i++) {
        const brw_row *x = &rows.rows[i];
        char span[32];
        if (x->layer == x->layer_max)
            snprintf(span, sizeof span, "L%d", x->layer);
        else
            snprintf(span, sizeof span, "L%d-%d", x->layer, x->layer_max);
        lql_row(t);
        lql_cell_text(t, x->token);
        lql_cell_int(t, x->count);
        lql_cell_float(t, x->score);
        lql_cell_text(t, span);
        if (ex)
            lql_cell_text(t, x->also);
    }
    if (labelled && !brw_has_labels(m, NULL))
        lql_result_note(r, "no relation labels in this container: the relations of this "
                        "session's inserts label their features (COMPILE writes them into "
                        "feature_labels.json)");
    if (!labelled) {
        int band[3][2];
        brw_bands(m, band);
        if (layer >= 0)
            lql_result_note(r, "no relation labels in this container: top output tokens "
                            "(c_score >= %.4f, the top 10%%) at layer %d", (double)cut, layer);
        else if (band[1][0] < 0)
            lql_result_note(r, "no relation labels in this container: top output tokens "
                            "(c_score >= %.4f, the top 10%%) of every layer, L0-%d (the model "
                            "has no knowledge band)", (double)cut, brw_layers(m) - 1);
        else
            lql_result_note(r, "no relation labels in this container: top output tokens "
                            "(c_score >= %.4f, the top 10%%) of the knowledge band L%d-%d",
                            (double)cut, band[1][0], band[1][1]);
    }
    cut_note(st, &rows, r);
    brw_rows_free(&rows);
    return 0;
}

int lql_h_show_entities(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    brw_model *m = NULL;
    int layer;
    if (show_at(s, st, &m, &layer, e) != 0)
        return -1;
    int64_t limit;
    if (limit_of(st, &limit, e) != 0)
        return -1;
    const eng_overlay *ov = lql_edit_overlay(s);
    brw_rows rows;
    vx_err ve = {0};
    if (brw_show_entities(m, layer, limit, ov, &rows, &ve) != 0)
        return lql_err_vx(e, &ve, &st->at);
    brw_field f[] = {BRW_F_ENTITY, BRW_F_COUNT, BRW_F_SCORE};
    int rc = emit_rows(&rows, f, NULL, 3, NULL, r, e);
    if (rc == 0)
        cut_note(st, &rows, r);
    brw_rows_free(&rows);
    return rc;
}

/* ---------------------------------------------------------------- TRACE */

static void layer_label(int layer, char *buf, size_t n)
{
    if (layer < 0)
        snprintf(buf, n, "emb");
    else
        snprintf(buf, n, "L%d", layer);
}

static const char *who(float a, float f)
{
    if (a > 0.5f && f > 0.5f)
        return "both up";
    if (a < -0.5f && f < -0.5f)
        return "both down";
    if (fabsf(a) >= fabsf(f))
        return a > 0.5f ? "attn up" : a < -0.5f ? "attn down" : f > 0.5f ? "ffn up"
             : f < -0.5f ? "ffn down" : "~";
    return f > 0.5f ? "ffn up" : f < -0.5f ? "ffn down" : a > 0.5f ? "attn up"
         : a < -0.5f ? "attn down" : "~";
}

int lql_h_trace(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    if (lql_has(st, LQL_C_FROM) && st->arg)
        return lql_errf(e, LQL_EEXEC, clause_at(st, LQL_C_FROM),
                        "TRACE takes a prompt or FROM \"file\", not both");
    if (lql_has(st, LQL_C_SAVE) &&
        lql_output_path(st->save_path, "TRACE SAVE", clause_at(st, LQL_C_SAVE), e) != 0)
        return -1;
    eng_model *em;
    if (lql_session_model(s, st, &em, e) != 0)
        return -1;
    brw_trace_opts o = {.for_token = lql_has(st, LQL_C_FOR) ? st->for_token : NULL,
                        .by_id = lql_has(st, LQL_C_FOR) && !st->for_token,
                        .for_id = st->for_id,
                        .all_positions = st->positions == LQL_POS_ALL,
                        .keep_all = lql_has(st, LQL_C_SAVE)};
    if (layer_range(st, eng_model_layers(em), &o.layer_lo, &o.layer_hi, e) != 0)
        return -1;
    brw_trace t;
    vx_err ve = {0};
    if (lql_has(st, LQL_C_FROM)) {
        if (brw_trace_load(em, st->from_path, &o, &t, &ve) != 0)
            return lql_err_vx(e, &ve, clause_at(st, LQL_C_FROM));
    } else if (brw_trace_run(em, st->arg, &o, &t, &ve) != 0) {
        return lql_err_vx(e, &ve, lql_has(st, LQL_C_FOR) && strstr(ve.msg, "FOR")
                                      ? clause_at(st, LQL_C_FOR) : &st->arg_at);
    }
    const eng_tokenizer *tok = eng_model_tokenizer(em);
    int allpos = o.all_positions, rc = 0;
    lql_colspec cols[] = {{"pos", LQL_INT, 0}, {"token", LQL_TEXT, 0},
                          {"layer", LQL_TEXT, 0}, {"top1", LQL_TEXT, 0},
                          {"top1_id", LQL_INT, 0}, {"prob", LQL_FLOAT, 4},
                          {"attn_norm", LQL_FLOAT, 4}, {"ffn_norm", LQL_FLOAT, 4}};
    lql_table *tb = lql_result_table(r, NULL, allpos ? 8 : 6, allpos ? cols : cols + 2);
    lql_table *tf = NULL, *td = NULL;
    if (tb && t.target >= 0) {
        lql_colspec fc[] = {{"pos", LQL_INT, 0}, {"layer", LQL_TEXT, 0},
                            {"rank", LQL_INT, 0}, {"prob", LQL_FLOAT, -4},
                            {"attn_push", LQL_FLOAT, 4}, {"ffn_push", LQL_FLOAT, 4},
                            {"who", LQL_TEXT, 0}};
        char title[160], *piece = NULL;
        vx_err de;
        size_t plen;
        if (eng_tok_decode_after(tok, &t.target, 1, 0, &piece, &plen, &de) != 0)
            piece = NULL;
        char label[128];
        token_label(piece ? piece : "", label, sizeof label);
        snprintf(title, sizeof title, "FOR \"%s\" (id %d)", label, t.target);
        free(piece);
        if (t.for_pieces > 1)
            lql_result_note(r, "FOR \"%s\" spells %d tokens; the first, \"%s\" (id %d), is "
                            "tracked (FOR n tracks any token id)", o.for_token, t.for_pieces,
                            label, t.target);
        tf = lql_result_table(r, title, allpos ? 7 : 6, allpos ? fc : fc + 1);
    }
    if (tb && lql_has(st, LQL_C_DECOMPOSE)) {
        lql_colspec dc[] = {{"pos", LQL_INT, 0}, {"layer", LQL_TEXT, 0},
                            {"attn_norm", LQL_FLOAT, 4}, {"ffn_norm", LQL_FLOAT, 4},
                            {"resid_norm", LQL_FLOAT, 4}, {"attn_pct", LQL_FLOAT, 1}};
        td = lql_result_table(r, "decompose", allpos ? 6 : 5, allpos ? dc : dc + 1);
    }
    if (!tb || (t.target >= 0 && !tf) || (lql_has(st, LQL_C_DECOMPOSE) && !td)) {
        brw_trace_free(&t);
        return oom(e);
    }
    for (size_t i = 0; i < t.n_rows; i++) {
        const brw_trace_row *x = &t.rows[i];
        char lab[16];
        layer_label(x->layer, lab, sizeof lab);
        lql_row(tb);
        if (allpos) {
            lql_cell_int(tb, x->pos);
            lql_cell_token(tb, tok, t.ids[x->pos]);
        }
        lql_cell_text(tb, lab);
        lql_cell_token(tb, tok, x->top_id);
        lql_cell_int(tb, x->top_id);
        lql_cell_float(tb, x->top_prob);
        lql_cell_float(tb, x->attn_norm);
        lql_cell_float(tb, x->ffn_norm);
        if (tf) {
            lql_row(tf);
            if (allpos)
                lql_cell_int(tf, x->pos);
            lql_cell_text(tf, lab);
            lql_cell_int(tf, x->rank);
            lql_cell_float(tf, x->prob);
            lql_cell_float(tf, x->attn_push);
            lql_cell_float(tf, x->ffn_push);
            lql_cell_text(tf, x->layer < 0 ? "" : who(x->attn_push, x->ffn_push));
        }
        if (td) {
            lql_row(td);
            if (allpos)
                lql_cell_int(td, x->pos);
            lql_cell_text(td, lab);
            lql_cell_float(td, x->attn_norm);
            lql_cell_float(td, x->ffn_norm);
            lql_cell_float(td, x->resid_norm);
            float sum = x->attn_norm + x->ffn_norm;
            lql_cell_float(td, sum > 0 ? 100.0 * x->attn_norm / sum : 0);
        }
    }
    if (lql_has(st, LQL_C_SAVE)) {
        if (brw_trace_save(&t, st->save_path, &ve) != 0)
            rc = lql_err_vx(e, &ve, clause_at(st, LQL_C_SAVE));
        else
            lql_result_note(r, "saved %d positions x %d layers (+ embedding) to %s", t.n_tokens,
                            t.n_layers, st->save_path);
    }
    /* the KNN store overrides the prediction INFER and GENERATE give: say so here too */
    if (rc == 0 && !lql_has(st, LQL_C_FROM))
        rc = lql_edit_knn_override(s, st, em, t.ids, (size_t)t.n_tokens, r, e);
    brw_trace_free(&t);
    return rc;
}

/* ---------------------------------------------------------------- EXPLAIN INFER */

/* EXPLAIN INFER's per-layer options from its clauses, checked against the bound model. */
static int explain_opts(lql_session *s, const lql_stmt *st, eng_model **em, brw_model **m,
                        brw_explain_opts *o, lql_err *e)
{
    if (lql_session_model(s, st, em, e) != 0 || lql_session_browse(s, st, m, e) != 0)
        return -1;
    *o = (brw_explain_opts){.top = lql_has(st, LQL_C_TOP) ? (int)st->top : 3,
                            .attention = lql_has(st, LQL_C_WITH_ATTENTION), .band = -1};
    if (lql_has(st, LQL_C_TOP) && (st->top <= 0 || st->top > 1000))
        return lql_errf(e, LQL_EEXEC, clause_at(st, LQL_C_TOP),
                        "TOP must be between 1 and 1000 (got %lld)", (long long)st->top);
    if (lql_has(st, LQL_C_BAND))
        o->band = band_of_clause(st->band);
    if (layer_range(st, eng_model_layers(*em), &o->layer_lo, &o->layer_hi, e) != 0)
        return -1;
    /* a range with no layer of the band named would explain nothing, said as nothing */
    int in = o->band < 0 || !lql_has(st, LQL_C_LAYERS) || st->layers.all;
    for (int l = o->layer_lo; !in && l <= o->layer_hi; l++)
        in = brw_band_of(*m, l) == o->band;
    if (!in) {
        return lql_errf(e, LQL_EEXEC, clause_at(st, LQL_C_LAYERS), "LAYERS %d-%d has no layer "
                        "in %s; give one", o->layer_lo, o->layer_hi, lql_band_text(st->band));
    }
    return 0;
}

int lql_explain_infer_check(lql_session *s, const lql_stmt *st, lql_err *e)
{
    eng_model *em;
    brw_model *m;
    brw_explain_opts o;
    return explain_opts(s, st, &em, &m, &o, e);
}

int lql_explain_infer_layers(lql_session *s, const lql_stmt *st, const int32_t *ids, int n,
                             lql_result *r, lql_err *e)
{
    eng_model *em;
    brw_model *m = NULL;
    brw_explain_opts o;
    if (explain_opts(s, st, &em, &m, &o, e) != 0)
        return -1;
    brw_explain x;
    vx_err ve = {0};
    if (brw_explain_run(em, m, ids, n, &o, &x, &ve) != 0)
        return lql_err_vx(e, &ve, &st->arg_at);
    lql_colspec cols[] = {{"layer", LQL_INT, 0}, {"feature", LQL_INT, 0},
                          {"act", LQL_FLOAT, 4}, {"token", LQL_TEXT, 0},
                          {"c_score", LQL_FLOAT, 4}};
    lql_table *t = lql_result_table(r, "features that fired (last position)", 5, cols);
    lql_table *ta = NULL;
    if (t && o.attention) {
        lql_colspec ac[] = {{"layer", LQL_INT, 0}, {"attended", LQL_TEXT, 0},
                            {"pos", LQL_INT, 0}, {"weight", LQL_FLOAT, 4},
                            {"lens_top1", LQL_TEXT, 0}, {"lens_prob", LQL_FLOAT, 4}};
        ta = lql_result_table(r, "attention and logit lens (last position)", 6, ac);
    }
    if (!t || (o.attention && !ta)) {
        brw_explain_free(&x);
        return oom(e);
    }
    char no_attn[256] = "";     /* layers whose token mixer has no attention weights */
    int64_t features = 0;       /* of the layers explained: none in a pure-SSM stack */
    for (int i = 0; i < x.n_layers; i++) {
        const brw_explain_layer *L = &x.layers[i];
        features += brw_features(m, L->layer);
        for (int j = 0; j < L->n_fired; j++) {
            char tok[128];
            token_text(m, L->fired[j].top_id, tok, sizeof tok);
            lql_row(t);
            lql_cell_int(t, L->layer);
            lql_cell_int(t, L->fired[j].feature);
            lql_cell_float(t, L->fired[j].act);
            if (L->fired[j].top_id >= 0) {
                lql_cell_text(t, tok);
                lql_cell_float(t, L->fired[j].c_score);
            } else {
                lql_cell_null(t);
                lql_cell_null(t);
            }
        }
        if (ta) {
            char att[128], lens[128];
            token_text(m, L->attended_id, att, sizeof att);
            brw_trim(brw_token_text(m, L->lens_id), lens, sizeof lens);
            lql_row(ta);
            lql_cell_int(ta, L->layer);
            if (L->attended_id >= 0) {
                lql_cell_text(ta, att);
                lql_cell_int(ta, L->attended_pos);
                lql_cell_float(ta, L->attended_weight);
            } else {
                /* a recurrent mixer (Mamba2, Gated DeltaNet) weighs no positions: null, not
                 * a position -1 of weight 0 */
                lql_cell_null(ta);
                lql_cell_null(ta);
                lql_cell_null(ta);
                size_t k = strlen(no_attn);
                snprintf(no_attn + k, sizeof no_attn - k, "%s%d", k ? ", " : "", L->layer);
            }
            lql_cell_text(ta, lens);
            lql_cell_float(ta, L->lens_prob);
        }
    }
    if (no_attn[0])
        lql_result_note(r, "no attention weights in layer%s %s (a recurrent token mixer): "
                        "attended, pos and weight are null", strchr(no_attn, ',') ? "s" : "",
                        no_attn);
    if (x.n_layers && !features)
        lql_result_note(r, "no FFN features in the layers explained (their channel mixer is "
                        "'none'): nothing can fire");
    brw_explain_free(&x);
    return 0;
}
