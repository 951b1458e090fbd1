/*
 * select.c — SELECT over the three browse tables and the SHOW statements built on them.
 *
 *   FEATURES  one row per feature with metadata: layer, feature, token (down-meta top
 *             token), relation (label), score = confidence = c_score, also, band.
 *   EDGES     without an entity condition, the same rows read as edges (token = target);
 *             with `entity = "X"` (or IN), X's query is scored against every feature of
 *             the layers passing the layer conditions (no top-500 cut as in the
 *             reference, so score conditions are exact) and the rows are the hits:
 *             score = gate.
 *   ENTITIES  capitalised alphabetic top tokens of >= 3 letters that are not function
 *             words ("The", "After"), aggregated over the
 *             features passing the layer/feature conditions: entity, count, score (max
 *             c_score).
 *
 * Every condition is honoured (= != > < >= <= LIKE IN on numbers and text; text = is
 * case-insensitive and compares the trimmed token), all ANDed; ORDER BY any field; LIMIT
 * defaults to 20 (SHOW ENTITIES and RELATIONS: 50), and brw_rows.total counts the rows it
 * cut too. NEAREST TO "x" AT LAYER n ranks the whole layer by gate·q of x's query.
 */
#include "brw_int.h"
#include <ctype.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>

#define DEFAULT_LIMIT 20  /* SELECT, SHOW FEATURES */
#define SHOW_LIMIT 50     /* SHOW ENTITIES, SHOW RELATIONS */

static const char *const field_names[BRW_F_COUNT_] = {
    "layer", "feature", "token", "entity", "relation", "score", "confidence", "also",
    "count", "band", "target"};

const char *brw_field_name(brw_field f)
{
    return f < BRW_F_COUNT_ ? field_names[f] : "?";
}

static const brw_field edges_f[] = {BRW_F_LAYER, BRW_F_FEATURE, BRW_F_ENTITY,
                                    BRW_F_RELATION, BRW_F_TARGET, BRW_F_SCORE,
                                    BRW_F_CONFIDENCE, BRW_F_ALSO, BRW_F_BAND};
static const brw_field feats_f[] = {BRW_F_LAYER, BRW_F_FEATURE, BRW_F_TOKEN,
                                    BRW_F_RELATION, BRW_F_SCORE, BRW_F_ALSO, BRW_F_BAND};
static const brw_field ents_f[] = {BRW_F_ENTITY, BRW_F_COUNT, BRW_F_SCORE};

static const brw_field *table_fields(brw_from from, size_t *n)
{
    if (from == BRW_EDGES) {
        *n = sizeof edges_f / sizeof *edges_f;
        return edges_f;
    }
    if (from == BRW_FEATURES) {
        *n = sizeof feats_f / sizeof *feats_f;
        return feats_f;
    }
    *n = sizeof ents_f / sizeof *ents_f;
    return ents_f;
}

static const char *table_name(brw_from from)
{
    return from == BRW_EDGES ? "EDGES" : from == BRW_FEATURES ? "FEATURES" : "ENTITIES";
}

size_t brw_default_fields(brw_from from, brw_field *out, size_t max)
{
    size_t n;
    const brw_field *f = table_fields(from, &n);
    for (size_t i = 0; i < n && i < max; i++)
        out[i] = f[i];
    return n < max ? n : max;
}

/* cond: the field of a WHERE condition, where ENTITIES also takes layer and feature (they
 * pick the features counted; as columns they would have no value). */
static int field_lookup(brw_from from, const char *name, int cond, brw_field *out,
                        vx_err *err)
{
    size_t n;
    const brw_field *f = table_fields(from, &n);
    brw_field want = BRW_F_COUNT_;
    for (int i = 0; i < BRW_F_COUNT_; i++)
        if (strcasecmp(name, field_names[i]) == 0)
            want = (brw_field)i;
    /* synonyms the reference accepts */
    if (strcasecmp(name, "c_score") == 0)
        want = BRW_F_CONFIDENCE;
    if (from == BRW_EDGES && want == BRW_F_TOKEN)
        want = BRW_F_TARGET;
    if (from == BRW_FEATURES && want == BRW_F_TARGET)
        want = BRW_F_TOKEN;
    /* FEATURES' confidence (c_score) is the feature's own; its score is too, except under
     * NEAREST TO, where it is the dot product with the query, as EDGES' walked score */
    if (from == BRW_FEATURES && want == BRW_F_CONFIDENCE) {
        *out = want;
        return 0;
    }
    if (from == BRW_ENTITIES && want == BRW_F_TOKEN)
        want = BRW_F_ENTITY;
    if (cond && from == BRW_ENTITIES && (want == BRW_F_LAYER || want == BRW_F_FEATURE)) {
        *out = want;
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (f[i] == want) {
            *out = want;
            return 0;
        }
    char list[256] = "";
    for (size_t i = 0; i < n; i++) {
        strcat(list, i ? ", " : "");
        strcat(list, field_names[f[i]]);
    }
    return vx_errf(err, VX_EARG, "unknown field \"%s\" for %s (fields: %s)", name,
                   table_name(from), list);
}

int brw_field_parse(brw_from from, const char *name, brw_field *out, vx_err *err)
{
    return field_lookup(from, name, 0, out, err);
}

int brw_cond_field_parse(brw_from from, const char *name, brw_field *out, vx_err *err)
{
    return field_lookup(from, name, 1, out, err);
}

static int numeric(brw_field f)
{
    return f == BRW_F_LAYER || f == BRW_F_FEATURE || f == BRW_F_SCORE ||
           f == BRW_F_CONFIDENCE || f == BRW_F_COUNT;
}

static double num_of(const brw_row *r, brw_field f)
{
    switch (f) {
    case BRW_F_LAYER: return r->layer;
    case BRW_F_FEATURE: return (double)r->feature;
    case BRW_F_SCORE: return r->score;
    case BRW_F_CONFIDENCE: return r->confidence;
    case BRW_F_COUNT: return (double)r->count;
    default: return 0;
    }
}

static const char *text_of(const brw_row *r, brw_field f)
{
    switch (f) {
    case BRW_F_TOKEN: case BRW_F_TARGET: return r->token;
    case BRW_F_ENTITY: return r->entity;
    case BRW_F_RELATION: return r->relation;
    case BRW_F_ALSO: return r->also;
    case BRW_F_BAND: return brw_band_name(r->band);
    default: return NULL;
    }
}

/* The code point at s lower-cased, its length in *len; an invalid byte stands alone (as a
 * negative value no code point has). */
static int32_t folded_cp(const char *s, int *len)
{
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, -1, &cp);
    if (k <= 0) {
        *len = 1;
        return -1 - (int32_t)(unsigned char)*s;
    }
    *len = (int)k;
    return utf8proc_tolower(cp);
}

int brw_fold_cmp(const char *a, const char *b)
{
    while (*a && *b) {
        int la, lb;
        int32_t x = folded_cp(a, &la), y = folded_cp(b, &lb);
        if (x != y)
            return x < y ? -1 : 1;
        a += la;
        b += lb;
    }
    return (*a != 0) - (*b != 0);
}

int brw_vocab_reads(const brw_model *m, const char *text)
{
    char want[256], buf[256];
    brw_trim(text, want, sizeof want);
    for (int32_t id = 0; id < brw_vocab(m); id++) {
        brw_trim(brw_token_text(m, id), buf, sizeof buf);
        if (brw_fold_cmp(buf, want) == 0)
            return 1;
    }
    return 0;
}

/* Greedy with one backtrack point (the last %), so each pattern position costs at most one
 * pass over the text: "%a%a%a…" cannot make it exponential. */
int brw_like(const char *s, const char *p)
{
    const char *star_p = NULL, *star_s = NULL;
    while (*s) {
        int ls, lp;
        if (*p == '%') {
            while (*p == '%')
                p++;
            star_p = p;
            star_s = s;
            continue;
        }
        int32_t c = folded_cp(s, &ls);
        if (*p == '_') {
            p++;
            s += ls;
            continue;
        }
        if (*p) {
            const char *q = p + (*p == '\\' && p[1]);
            if (folded_cp(q, &lp) == c) {
                p = q + lp;
                s += ls;
                continue;
            }
        }
        if (!star_p)
            return 0;
        folded_cp(star_s, &ls);
        s = star_s += ls;
        p = star_p;
    }
    while (*p == '%')
        p++;
    return *p == 0;
}

static int cmp_num(double a, brw_op op, double b)
{
    switch (op) {
    case BRW_EQ: return a == b;
    case BRW_NE: return a != b;
    case BRW_GT: return a > b;
    case BRW_LT: return a < b;
    case BRW_GE: return a >= b;
    case BRW_LE: return a <= b;
    default: return 0;
    }
}

static int match_one(const brw_row *r, brw_field f, brw_op op, const brw_value *v)
{
    if (op == BRW_IN)
        op = BRW_EQ;
    /* score and confidence are f32: equal is equal at f32, so the shortest spelling of a
     * value (0.21581374) matches it as its 17-digit double text does; ordering stays exact */
    if ((f == BRW_F_SCORE || f == BRW_F_CONFIDENCE) && (op == BRW_EQ || op == BRW_NE))
        return cmp_num((float)num_of(r, f), op, (float)v->num);
    if (numeric(f))
        return cmp_num(num_of(r, f), op, v->num);
    const char *t = text_of(r, f);
    char buf[256];
    brw_trim(t ? t : "", buf, sizeof buf);
    if (op == BRW_LIKE)
        return t && brw_like(buf, v->str);
    if (!t)
        return op == BRW_NE;
    char want[256];
    brw_trim(v->str, want, sizeof want);
    int c = brw_fold_cmp(buf, want);
    switch (op) {
    case BRW_EQ: return c == 0;
    case BRW_NE: return c != 0;
    case BRW_GT: return c > 0;
    case BRW_LT: return c < 0;
    case BRW_GE: return c >= 0;
    case BRW_LE: return c <= 0;
    default: return 0;
    }
}

/* qsort order of prepared IN values: folded, then bytes (so equal spellings are adjacent) */
static int cmp_in(const void *a, const void *b)
{
    const char *x = ((const brw_value *)a)->str, *y = ((const brw_value *)b)->str;
    int c = brw_fold_cmp(x, y);
    return c ? c : strcmp(x, y);
}

/* bsearch over them: text = is folded equality */
static int cmp_fold(const void *a, const void *b)
{
    return brw_fold_cmp(((const brw_value *)a)->str, ((const brw_value *)b)->str);
}

/* A text IN's values are trimmed and sorted by cmp_in (prepare()), so the row's text is
 * trimmed once and looked up in log n; a numeric IN tests its values in turn. */
static int match(const brw_row *r, const brw_cond *c)
{
    if (c->op == BRW_IN && !numeric(c->field)) {
        const char *t = text_of(r, c->field);
        char buf[256];
        if (!t)
            return 0;
        brw_trim(t, buf, sizeof buf);
        brw_value key = {.is_str = 1, .str = buf};
        return bsearch(&key, c->vals, c->n_vals, sizeof key, cmp_fold) != NULL;
    }
    if (c->op == BRW_IN) {
        for (size_t i = 0; i < c->n_vals; i++)
            if (match_one(r, c->field, BRW_IN, &c->vals[i]))
                return 1;
        return 0;
    }
    return c->n_vals ? match_one(r, c->field, c->op, &c->vals[0]) : 0;
}

/* The caller's options with every text IN condition's values trimmed once and sorted
 * (cmp_in), as match() reads them: what brw_select and brw_show_features evaluate. */
typedef struct prepared {
    brw_select_opts o;      /* the caller's, conds pointing at conds below */
    brw_cond *conds;        /* [o.n_conds] */
    brw_value *vals;        /* the text IN values, trimmed */
    char *text;             /* their strings, NUL-terminated one after another */
} prepared;

static void release(prepared *p)
{
    free(p->conds);
    free(p->vals);
    free(p->text);
}

static int prepare(const brw_select_opts *o, prepared *p, vx_err *err)
{
    memset(p, 0, sizeof *p);
    p->o = *o;
    size_t nv = 0, nt = 0;
    for (size_t i = 0; i < o->n_conds; i++)
        if (o->conds[i].op == BRW_IN && !numeric(o->conds[i].field))
            for (size_t j = 0; j < o->conds[i].n_vals; j++, nv++)
                nt += strlen(o->conds[i].vals[j].str) + 1;
    if (o->n_conds == 0)
        return 0;
    p->conds = malloc(o->n_conds * sizeof *p->conds);
    p->vals = malloc((nv ? nv : 1) * sizeof *p->vals);
    p->text = malloc(nt ? nt : 1);
    if (!p->conds || !p->vals || !p->text) {
        release(p);
        return vx_errf(err, VX_ENOMEM, "select: out of memory");
    }
    memcpy(p->conds, o->conds, o->n_conds * sizeof *p->conds);
    brw_value *v = p->vals;
    char *t = p->text;
    for (size_t i = 0; i < o->n_conds; i++) {
        brw_cond *c = &p->conds[i];
        if (c->op != BRW_IN || numeric(c->field))
            continue;
        for (size_t j = 0; j < c->n_vals; j++) {
            size_t n = strlen(c->vals[j].str) + 1;
            brw_trim(c->vals[j].str, t, n < 256 ? n : 256);  /* as match_one trims */
            v[j] = (brw_value){.is_str = 1, .str = t};
            t += strlen(t) + 1;
        }
        c->vals = v;
        qsort(v, c->n_vals, sizeof *v, cmp_in);
        v += c->n_vals;
    }
    p->o.conds = p->conds;
    return 0;
}

static int check_layer(const brw_model *m, int layer, vx_err *err)
{
    if (layer < 0 || layer >= m->s.layers)
        return vx_errf(err, VX_EARG, "layer %d is out of range (the model has %d layers: 0-%d)",
                       layer, m->s.layers, m->s.layers - 1);
    return 0;
}

/* A layer or feature condition names indices that exist (0..count-1, `note` says which):
 * = != IN values outside them are refused (a layer with the message every other statement
 * gives for a bad layer), as is a fraction, and an ordering no index satisfies. The value
 * is echoed to 15 significant digits, as typed (%g wrote feature 99999999 as 1e+08). */
static int check_index_cond(const brw_cond *c, int64_t count, const char *note, vx_err *err)
{
    static const char *const ops[] = {"=", "!=", ">", "<", ">=", "<="};
    const char *f = brw_field_name(c->field);
    for (size_t j = 0; j < c->n_vals; j++) {
        double v = c->vals[j].num;
        if (c->op == BRW_EQ || c->op == BRW_NE || c->op == BRW_IN) {
            if (v != floor(v))
                return vx_errf(err, VX_EARG, "%s %.15g is not a %s number (%s)", f, v, f, note);
            if (v < 0 || v >= (double)count)
                return vx_errf(err, VX_EARG, "%s %.15g is out of range (%s)", f, v, note);
        } else if (!cmp_num(0, c->op, v) && !cmp_num((double)count - 1, c->op, v)) {
            /* monotone: an ordering holds somewhere in 0..count-1 iff at an end */
            return vx_errf(err, VX_EARG, "%s %s %.15g matches no %s (%s)", f, ops[c->op], v, f,
                           note);
        }
    }
    return 0;
}

/* Does layer l satisfy every layer condition of o (and is it `only`, when that is ≥ 0)? */
static int layer_allowed(const brw_select_opts *o, int only, int l)
{
    if (only >= 0 && l != only)
        return 0;
    brw_row r = {.layer = l};
    for (size_t i = 0; i < o->n_conds; i++)
        if (o->conds[i].field == BRW_F_LAYER && !match(&r, &o->conds[i]))
            return 0;
    return 1;
}

/* Refuse conditions whose values do not fit their field, relation conditions on a
 * container without labels and layer / feature indices that do not exist (they could only
 * ever match nothing). */
static int select_check(const brw_model *m, brw_from from, const brw_select_opts *o, int only,
                        vx_err *err)
{
    for (size_t i = 0; i < o->n_conds; i++)
        if (o->conds[i].field == BRW_F_RELATION && !brw_has_labels(m, o->ov))
            return vx_errf(err, VX_EMISSING, "relation conditions need relation labels "
                           "(feature_labels.json or relation_clusters.json); this container "
                           "has none");
    static const char *const ops[] = {"=", "!=", ">", "<", ">=", "<=", "LIKE", "IN"};
    for (size_t i = 0; i < o->n_conds; i++) {
        const brw_cond *c = &o->conds[i];
        brw_field f;
        if (brw_cond_field_parse(from, brw_field_name(c->field), &f, err) != 0)
            return -1;
        if (c->n_vals == 0 || (c->op != BRW_IN && c->n_vals != 1))
            return vx_errf(err, VX_EARG, "condition on %s needs %s", brw_field_name(c->field),
                           c->op == BRW_IN ? "at least one value" : "one value");
        for (size_t j = 0; j < c->n_vals; j++) {
            if (numeric(c->field) && c->vals[j].is_str)
                return vx_errf(err, VX_EARG, "%s %s compares numbers, got \"%s\"",
                               brw_field_name(c->field), ops[c->op], c->vals[j].str);
            if (!numeric(c->field) && !c->vals[j].is_str)
                return vx_errf(err, VX_EARG, "%s %s compares text, got %.15g",
                               brw_field_name(c->field), ops[c->op], c->vals[j].num);
        }
        if (numeric(c->field) && c->op == BRW_LIKE)
            return vx_errf(err, VX_EARG, "LIKE needs a text field, %s is a number",
                           brw_field_name(c->field));
        char note[96];
        if (c->field == BRW_F_LAYER) {
            snprintf(note, sizeof note, "the model has %d layers: 0-%d", m->s.layers,
                     m->s.layers - 1);
            if (check_index_cond(c, m->s.layers, note, err) != 0)
                return -1;
        }
        if (c->field == BRW_F_FEATURE) {
            /* against the layers the layer conditions leave (a dense layer among MoE ones
             * has fewer features), checked above to be some */
            int64_t most = -1;
            int same = 1, n_in = 0, one = 0;
            for (int l = 0; l < m->s.layers; l++) {
                if (!layer_allowed(o, only, l))
                    continue;
                same &= most < 0 || m->s.layer[l].features == most;
                if (m->s.layer[l].features > most)
                    most = m->s.layer[l].features;
                n_in++;
                one = l;
            }
            char range[40] = "no FFN features";    /* a layer with no channel mixer */
            if (most > 0)
                snprintf(range, sizeof range, "features 0-%lld", (long long)most - 1);
            if (n_in == 1)
                snprintf(note, sizeof note, "layer %d has %s", one, range);
            else
                snprintf(note, sizeof note, "%s %s", !same ? "the largest layer has"
                         : n_in == m->s.layers ? "every layer has" : "those layers have", range);
            if (most >= 0 && check_index_cond(c, most, note, err) != 0)
                return -1;
        }
    }
    if (o->has_order) {
        brw_field f;
        if (brw_field_parse(from, brw_field_name(o->order), &f, err) != 0)
            return -1;
    }
    return 0;
}

int brw_select_check(const brw_model *m, brw_from from, const brw_select_opts *o,
                     vx_err *err)
{
    return select_check(m, from, o, -1, err);
}

/* ---------------------------------------------------------------- row building */

static char *dup(const char *s)
{
    return s ? strdup(s) : NULL;
}

typedef struct rowvec {
    brw_row *v;
    size_t n, cap;
} rowvec;

static brw_row *push(rowvec *rv)
{
    if (rv->n == rv->cap) {
        size_t cap = rv->cap ? rv->cap * 2 : 256;
        brw_row *v = realloc(rv->v, cap * sizeof *v);
        if (!v)
            return NULL;
        rv->v = v;
        rv->cap = cap;
    }
    brw_row *r = &rv->v[rv->n++];
    memset(r, 0, sizeof *r);
    return r;
}

static void row_clear(brw_row *r)
{
    free(r->token);
    free(r->entity);
    free(r->relation);
    free(r->also);
}

void brw_rows_free(brw_rows *r)
{
    for (size_t i = 0; i < r->n; i++)
        row_clear(&r->rows[i]);
    free(r->rows);
    r->rows = NULL;
    r->n = r->total = 0;
}

/* Free a partial row vector on an error path; always -1. */
static int drop_rows(rowvec *rv)
{
    brw_rows r = {.n = rv->n, .rows = rv->v};
    brw_rows_free(&r);
    rv->v = NULL;
    rv->n = rv->cap = 0;
    return -1;
}

/* Fill a row's metadata fields from a feature; 0 when it has metadata. */
static int fill_meta(const brw_model *m, const eng_overlay *ov, brw_row *r, int layer,
                     int64_t f)
{
    brw_meta md;
    r->layer = layer;
    r->feature = f;
    r->band = brw_band_of(m, layer);
    if (brw_feature_meta(m, ov, layer, f, &md) != 0)
        return -1;
    char t[256], also[512] = "";
    brw_trim(brw_token_text(m, md.top_id), t, sizeof t);
    r->token = dup(t);
    r->confidence = md.c_score;
    r->score = md.c_score;
    int na = 0;
    for (int j = 0; j < md.k && na < 4; j++) {
        if (md.ids[j] == md.top_id)
            continue;
        char a[128];
        brw_trim(brw_token_text(m, md.ids[j]), a, sizeof a);
        if (!a[0])
            continue;
        if (strlen(also) + strlen(a) + 3 >= sizeof also)
            break;
        strcat(also, na ? ", " : "");
        strcat(also, a);
        na++;
    }
    r->also = dup(also);
    r->relation = dup(brw_label(m, ov, layer, f));
    return 0;
}

/* Conditions on layer/feature alone, to skip whole layers or features early. */
static int pre_match(const brw_select_opts *o, int layer, int64_t f, int only_layer)
{
    brw_row r = {.layer = layer, .feature = f};
    for (size_t i = 0; i < o->n_conds; i++) {
        const brw_cond *c = &o->conds[i];
        if (c->field == BRW_F_LAYER || (!only_layer && c->field == BRW_F_FEATURE))
            if (!match(&r, c))
                return 0;
    }
    return 1;
}

/* Every condition but skip (NULL: none) holds for r (ANDed: a walked entity's rows face
 * the other entity conditions too, so `entity = "A" AND entity = "B"` matches nothing). */
static int all_match(const brw_select_opts *o, const brw_row *r, const brw_cond *skip)
{
    for (size_t i = 0; i < o->n_conds; i++)
        if (&o->conds[i] != skip && !match(r, &o->conds[i]))
            return 0;
    return 1;
}

static int feature_rows(const brw_model *m, const brw_select_opts *o, int only_layer,
                        rowvec *rv, vx_err *err)
{
    for (int l = 0; l < m->s.layers; l++) {
        if ((only_layer >= 0 && l != only_layer) || !pre_match(o, l, 0, 1))
            continue;
        for (int64_t f = 0; f < m->s.layer[l].features; f++) {
            if (!pre_match(o, l, f, 0))
                continue;
            brw_row *r = push(rv);
            if (!r)
                return vx_errf(err, VX_ENOMEM, "select: out of memory");
            if (fill_meta(m, o->ov, r, l, f) != 0 || !all_match(o, r, NULL)) {
                row_clear(r);
                rv->n--;
            }
        }
    }
    return 0;
}

/* Hits of one query over the layers passing the layer conditions (or one layer). named:
 * the condition that named the entity, which its rows hold by construction (not tested
 * again). */
static int walk_rows(const brw_model *m, const brw_select_opts *o, const char *entity,
                     const brw_cond *named, int one_layer, rowvec *rv, vx_err *err)
{
    int L = m->s.layers, *layers = malloc((size_t)L * sizeof *layers), n = 0, k = 0;
    float *q = malloc((size_t)m->s.hidden * sizeof *q);
    if (!layers || !q) {
        free(layers);
        free(q);
        return vx_errf(err, VX_ENOMEM, "select: out of memory");
    }
    for (int l = 0; l < L; l++)
        if (one_layer >= 0 ? l == one_layer : pre_match(o, l, 0, 1)) {
            layers[n++] = l;
            if (m->s.layer[l].features > k)
                k = (int)m->s.layer[l].features;
        }
    int rc = 0;
    brw_hit *hits = NULL;
    int *counts = NULL;
    if (n == 0)
        goto done;
    hits = malloc((size_t)n * (size_t)k * sizeof *hits);
    counts = calloc((size_t)n, sizeof *counts);
    if (!hits || !counts) {
        rc = vx_errf(err, VX_ENOMEM, "select: out of memory");
        goto done;
    }
    char ent[256];
    brw_trim(entity, ent, sizeof ent);
    if (!ent[0]) {
        rc = vx_errf(err, VX_EARG, "entity must not be empty");
        goto done;
    }
    if (brw_entity_query(m, ent, q, err) != 0 ||
        brw_gate_knn(m, layers, n, q, k, o->ov, hits, counts, err) != 0) {
        rc = -1;
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < counts[i]; j++) {
            const brw_hit *h = &hits[(size_t)i * (size_t)k + j];
            brw_row *r = push(rv);
            if (!r) {
                rc = vx_errf(err, VX_ENOMEM, "select: out of memory");
                goto done;
            }
            r->no_meta = fill_meta(m, o->ov, r, h->layer, h->feature) != 0;
            r->score = h->score;
            r->entity = dup(ent);
            if (!all_match(o, r, named)) {
                row_clear(r);
                rv->n--;
            }
        }
done:
    free(layers);
    free(q);
    free(hits);
    free(counts);
    return rc;
}

static int is_entity(const char *t)
{
    size_t n = 0;
    if (!isupper((unsigned char)t[0]))
        return 0;
    for (; t[n]; n++)
        if (!isalpha((unsigned char)t[n]))
            return 0;
    return n >= 3 && !brw_stop_word(t);
}

static int entity_rows(const brw_model *m, const brw_select_opts *o, int only_layer,
                       rowvec *rv, vx_err *err)
{
    for (int l = 0; l < m->s.layers; l++) {
        if ((only_layer >= 0 && l != only_layer) || !pre_match(o, l, 0, 1))
            continue;
        for (int64_t f = 0; f < m->s.layer[l].features; f++) {
            brw_meta md;
            if (!pre_match(o, l, f, 0) || brw_feature_meta(m, o->ov, l, f, &md) != 0)
                continue;
            char t[256];
            brw_trim(brw_token_text(m, md.top_id), t, sizeof t);
            if (!is_entity(t))
                continue;
            size_t i;
            for (i = 0; i < rv->n; i++)
                if (strcmp(rv->v[i].token, t) == 0)
                    break;
            if (i == rv->n) {
                brw_row *r = push(rv);
                if (!r || !(r->token = dup(t)) || !(r->entity = dup(t)))
                    return vx_errf(err, VX_ENOMEM, "select: out of memory");
                r->score = md.c_score;
                r->layer = l;
                r->band = -1;
            }
            brw_row *r = &rv->v[i];
            r->count++;
            if (md.c_score > r->score)
                r->score = md.c_score;
        }
    }
    /* entity-level conditions (layer/feature were applied per feature) */
    size_t w = 0;
    for (size_t i = 0; i < rv->n; i++) {
        int ok = 1;
        for (size_t c = 0; c < o->n_conds && ok; c++)
            if (o->conds[c].field != BRW_F_LAYER && o->conds[c].field != BRW_F_FEATURE)
                ok = match(&rv->v[i], &o->conds[c]);
        if (ok)
            rv->v[w++] = rv->v[i];
        else
            row_clear(&rv->v[i]);
    }
    rv->n = w;
    return 0;
}

/* ---------------------------------------------------------------- ordering */

static brw_field sort_field;
static int sort_desc, sort_kind;   /* kind 0: by field; 1: by |score| desc; 2: entities */

static int cmp_rows(const void *pa, const void *pb)
{
    const brw_row *a = pa, *b = pb;
    int c = 0;
    if (sort_kind == 1) {
        c = brw_fcmp(fabs(b->score), fabs(a->score));
    } else if (sort_kind == 2) {
        c = a->count > b->count ? -1 : a->count < b->count;
        if (!c)
            c = strcmp(a->token, b->token);
        return c;
    } else if (numeric(sort_field)) {
        c = brw_fcmp(num_of(a, sort_field), num_of(b, sort_field));
        if (sort_desc)
            c = -c;
    } else {
        const char *x = text_of(a, sort_field), *y = text_of(b, sort_field);
        c = brw_fold_cmp(x ? x : "", y ? y : "");
        if (sort_desc)
            c = -c;
    }
    if (!c)
        c = a->layer != b->layer ? (a->layer < b->layer ? -1 : 1)
                                 : (a->feature < b->feature ? -1 : a->feature > b->feature);
    return c;
}

static void finish_rows(rowvec *rv, const brw_select_opts *o, int kind, brw_rows *out)
{
    sort_kind = o->has_order ? 0 : kind;
    sort_field = o->order;
    sort_desc = o->desc;
    if ((o->has_order || kind != 0) && rv->n)   /* no rows: rv->v is NULL */
        qsort(rv->v, rv->n, sizeof *rv->v, cmp_rows);
    size_t lim = o->limit < 0 ? DEFAULT_LIMIT : (size_t)o->limit;
    out->total = rv->n;
    for (size_t i = lim; i < rv->n; i++)
        row_clear(&rv->v[i]);
    if (rv->n > lim)
        rv->n = lim;
    out->rows = rv->v;
    out->n = rv->n;
}

/* The down-meta of every feature of the layers a scan reads (lo..hi, or every layer when
 * lo < 0; of those, the ones o's layer conditions admit when o is given), in one pass: 0
 * when stored, or computed now when the container stores none; else -1 with why. */
static int need_meta(const brw_model *m, const brw_select_opts *o, int lo, int hi, vx_err *err)
{
    if (m->dmet)
        return 0;
    if (!m->od)
        return brw_meta_refuse(m, err);
    int *ls = malloc(((size_t)m->s.layers + 1) * sizeof *ls), n = 0;
    if (!ls)
        return vx_errf(err, VX_ENOMEM, "select: out of memory");
    for (int l = 0; l < m->s.layers; l++)
        if (brw_in_range(l, lo, hi) && (!o || pre_match(o, l, 0, 1)))
            ls[n++] = l;
    int rc = brw_meta_prepare_layers(m, ls, n, err);
    free(ls);
    return rc;
}

/* The rows of brw_select before ordering and the limit, *kind the default order. */
static int select_rows(const brw_model *m, brw_from from, const brw_select_opts *o,
                       rowvec *rv, int *kind, vx_err *err)
{
    if (o->nearest) {
        if (check_layer(m, o->nearest_layer, err) != 0)
            return -1;
        if (from == BRW_ENTITIES)
            return vx_errf(err, VX_EARG, "NEAREST TO applies to EDGES and FEATURES, not "
                           "ENTITIES");
        for (size_t i = 0; i < o->n_conds; i++)
            if (o->conds[i].field == BRW_F_ENTITY)
                return vx_errf(err, VX_EARG, "entity conditions cannot be combined with "
                               "NEAREST TO, which names the entity");
        *kind = 1;
        return walk_rows(m, o, o->nearest, NULL, o->nearest_layer, rv, err);
    }
    if (from == BRW_ENTITIES) {
        *kind = 2;
        return entity_rows(m, o, -1, rv, err);
    }
    /* the first = or IN entity condition names the queries walked; every entity
     * condition (that one included) then filters the rows */
    const brw_cond *ec = NULL;
    int other = 0;
    for (size_t i = 0; i < o->n_conds; i++)
        if (o->conds[i].field == BRW_F_ENTITY) {
            if (!ec && (o->conds[i].op == BRW_EQ || o->conds[i].op == BRW_IN))
                ec = &o->conds[i];
            other = 1;
        }
    if (other && !ec)
        return vx_errf(err, VX_EARG, "entity conditions need = or IN: the entity's query is "
                       "walked");
    if (!ec)
        return feature_rows(m, o, -1, rv, err);
    /* an IN's values are trimmed and sorted (prepare), so a repeated spelling follows its
     * first and is walked once: IN ("Spain", "Spain ") walks Spain once; "spain" is
     * another query, with its own tokens and scores */
    *kind = 1;
    int rc = 0;
    for (size_t i = 0; i < ec->n_vals && rc == 0; i++)
        if (vx_cancel_flag)
            rc = vx_errf(err, VX_ECANCEL, "select: cancelled after %zu of %zu entities", i,
                         ec->n_vals);
        else if (i == 0 || strcmp(ec->vals[i - 1].str, ec->vals[i].str) != 0)
            rc = walk_rows(m, o, ec->vals[i].str, ec, -1, rv, err);
    return rc;
}

int brw_select(const brw_model *m, brw_from from, const brw_select_opts *o, brw_rows *out,
               vx_err *err)
{
    memset(out, 0, sizeof *out);
    if (brw_select_check(m, from, o, err) != 0)
        return -1;
    prepared p;
    if (prepare(o, &p, err) != 0)
        return -1;
    rowvec rv = {0};
    /* NEAREST TO ranks by the gate, so without any down-meta its rows show no token */
    int kind = 0, rc = o->nearest && brw_meta_source(m) == BRW_META_NONE
                           ? 0 : need_meta(m, &p.o, o->nearest ? o->nearest_layer : -1,
                                           o->nearest ? o->nearest_layer : -1, err);
    if (rc == 0)
        rc = select_rows(m, from, &p.o, &rv, &kind, err);
    if (rc == 0)
        finish_rows(&rv, &p.o, kind, out);
    else
        drop_rows(&rv);
    release(&p);
    return rc;
}

/* ---------------------------------------------------------------- show */

int brw_show_features(const brw_model *m, int layer, const brw_select_opts *o,
                      brw_rows *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    if (check_layer(m, layer, err) != 0 || select_check(m, BRW_FEATURES, o, layer, err) != 0)
        return -1;
    /* a layer condition that excludes the layer listed could only give an empty table */
    if (!pre_match(o, layer, 0, 1))
        return vx_errf(err, VX_EARG, "layer conditions that exclude layer %d, the one SHOW "
                       "FEATURES %d lists, leave nothing to list", layer, layer);
    if (need_meta(m, NULL, layer, layer, err) != 0)
        return -1;
    prepared p;
    if (prepare(o, &p, err) != 0)
        return -1;
    rowvec rv = {0};
    int rc = feature_rows(m, &p.o, layer, &rv, err);
    if (rc == 0)
        finish_rows(&rv, &p.o, 0, out);
    else
        drop_rows(&rv);
    release(&p);
    return rc;
}

int brw_show_entities(const brw_model *m, int layer, int64_t limit, const eng_overlay *ov,
                      brw_rows *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    if (layer >= 0 && check_layer(m, layer, err) != 0)
        return -1;
    if (need_meta(m, NULL, layer, layer, err) != 0)
        return -1;
    brw_select_opts o = {.limit = limit < 0 ? SHOW_LIMIT : limit, .ov = ov};
    rowvec rv = {0};
    if (entity_rows(m, &o, layer, &rv, err) != 0)
        return drop_rows(&rv);
    finish_rows(&rv, &o, 2, out);
    return 0;
}

/* The down-meta of the labelled features of layers lo..hi (computed when not stored). */
static int label_meta(const brw_model *m, const eng_overlay *ov, int lo, int hi, vx_err *err)
{
    if (!m->od)
        return 0;
    size_t n = 0;
    for (int l = lo; l <= hi; l++)
        for (int64_t f = 0; f < m->s.layer[l].features; f++)
            n += brw_label(m, ov, l, f) != NULL;
    int *ls = malloc((n + 1) * sizeof *ls);
    int64_t *fs = malloc((n + 1) * sizeof *fs);
    int rc = ls && fs ? 0 : vx_errf(err, VX_ENOMEM, "select: out of memory");
    n = 0;
    for (int l = lo; l <= hi && rc == 0; l++)
        for (int64_t f = 0; f < m->s.layer[l].features; f++)
            if (brw_label(m, ov, l, f)) {
                ls[n] = l;
                fs[n++] = f;
            }
    if (rc == 0)
        rc = brw_meta_prepare(m, ls, fs, n, err);
    free(ls);
    free(fs);
    return rc;
}

/* The 90th percentile of c_score over layers lo..hi (features with metadata). */
static float score_p90(const brw_model *m, const eng_overlay *ov, int lo, int hi)
{
    size_t n = 0, cap = 0;
    for (int l = lo; l <= hi; l++)
        cap += (size_t)m->s.layer[l].features;
    float *v = malloc((cap + 1) * sizeof *v);
    if (!v)
        return 0;
    for (int l = lo; l <= hi; l++)
        for (int64_t f = 0; f < m->s.layer[l].features; f++) {
            brw_meta md;
            if (brw_feature_meta(m, ov, l, f, &md) == 0)
                v[n++] = md.c_score;
        }
    float p = 0;
    if (n) {
        qsort(v, n, sizeof *v, brw_cmp_floats);
        p = v[(n * 9) / 10];
    }
    free(v);
    return p;
}

int brw_show_relations(const brw_model *m, int layer, int64_t limit, const eng_overlay *ov,
                       brw_rows *out, int *labelled, float *min_score, vx_err *err)
{
    memset(out, 0, sizeof *out);
    *labelled = 0;
    *min_score = 0;
    if (layer >= 0 && check_layer(m, layer, err) != 0)
        return -1;
    if (!m->dmet && !m->od)
        return brw_meta_refuse(m, err);
    /* an insert's relation labels its features (brw_label), as COMPILE's labels will */
    *labelled = brw_has_labels(m, ov);
    /* labels are read wherever they are (an insert goes to the last layer by default);
     * the token listing keeps to the knowledge band */
    int lo = layer, hi = layer;
    if (layer < 0) {
        lo = *labelled ? -1 : m->band[BRW_KNOWLEDGE][0];
        hi = m->band[BRW_KNOWLEDGE][1];
        if (lo < 0) {
            lo = 0;
            hi = m->s.layers - 1;
        }
    }
    if (*labelled ? label_meta(m, ov, lo, hi, err) != 0 : need_meta(m, NULL, lo, hi, err) != 0)
        return -1;
    rowvec rv = {0};
    if (!*labelled)
        *min_score = score_p90(m, ov, lo, hi);
    for (int l = lo; l <= hi; l++)
        for (int64_t f = 0; f < m->s.layer[l].features; f++) {
            brw_meta md;
            char t[256];
            const char *lab = brw_label(m, ov, l, f);
            if (*labelled) {
                if (!lab)
                    continue;
                snprintf(t, sizeof t, "%s", lab);
                md.c_score = 0;
                if (brw_feature_meta(m, ov, l, f, &md) != 0)
                    md.c_score = 0;
            } else {
                if (brw_feature_meta(m, ov, l, f, &md) != 0 || md.c_score < *min_score)
                    continue;
                brw_trim(brw_token_text(m, md.top_id), t, sizeof t);
                if (!t[0])
                    continue;
            }
            size_t i;
            for (i = 0; i < rv.n; i++)
                if (strcmp(rv.v[i].token, t) == 0)
                    break;
            if (i == rv.n) {
                brw_row *r = push(&rv);
                if (!r || !(r->token = dup(t))) {
                    drop_rows(&rv);
                    return vx_errf(err, VX_ENOMEM, "show relations: out of memory");
                }
                r->score = md.c_score;
                r->layer = l;
                r->band = brw_band_of(m, l);
            }
            brw_row *r = &rv.v[i];
            r->count++;
            if (md.c_score > r->score)
                r->score = md.c_score;
            r->layer_max = l;
            if (r->count <= 3) {
                char ex[64];
                snprintf(ex, sizeof ex, "%sL%d F%lld", r->count > 1 ? ", " : "", l,
                         (long long)f);
                size_t had = r->also ? strlen(r->also) : 0;
                char *a = realloc(r->also, had + strlen(ex) + 1);
                if (a) {
                    memcpy(a + had, ex, strlen(ex) + 1);
                    r->also = a;
                }
            }
        }
    brw_select_opts o = {.limit = limit < 0 ? SHOW_LIMIT : limit};
    finish_rows(&rv, &o, 2, out);
    return 0;
}

int brw_show_layers(const brw_model *m, int lo, int hi, const eng_overlay *ov,
                    brw_layer_info **out, size_t *n, vx_err *err)
{
    *out = NULL;
    *n = 0;
    if (lo < 0) {
        lo = 0;
        hi = m->s.layers - 1;
    }
    if (lo > hi || hi >= m->s.layers)
        return vx_errf(err, VX_EARG, "layer range %d-%d is out of range (the model has %d "
                       "layers: 0-%d)", lo, hi, m->s.layers, m->s.layers - 1);
    /* the layers' down-meta in one pass where the container stores none (brw_feature_meta
     * would compute it a feature at a time) */
    if (m->od && need_meta(m, NULL, lo, hi, err) != 0)
        return -1;
    brw_layer_info *li = calloc((size_t)(hi - lo + 1), sizeof *li);
    int32_t *cnt = calloc((size_t)m->s.vocab, sizeof *cnt);
    if (!li || !cnt) {
        free(li);
        free(cnt);
        return vx_errf(err, VX_ENOMEM, "show layers: out of memory");
    }
    for (int l = lo; l <= hi; l++) {
        brw_layer_info *x = &li[l - lo];
        x->layer = l;
        x->features = m->s.layer[l].features;
        x->band = brw_band_of(m, l);
        x->gate_bytes = m->s.layer[l].gate_bytes;
        /* a layer without a channel mixer (a mamba2 layer) has no gate rows */
        x->gate_dtype = m->s.layer[l].n_parts ? vx_dtype_name(m->s.layer[l].parts[0].gate->dtype) : "";
        x->top_id = -1;
        memset(cnt, 0, (size_t)m->s.vocab * sizeof *cnt);
        for (int64_t f = 0; f < x->features; f++) {
            brw_meta md;
            if (brw_feature_meta(m, ov, l, f, &md) != 0)
                continue;
            x->with_meta++;
            if (md.top_id < 0 || md.top_id >= m->s.vocab)
                continue;
            int32_t c = ++cnt[md.top_id];
            if (c > x->top_count || (c == x->top_count && md.top_id < x->top_id)) {
                x->top_count = c;
                x->top_id = md.top_id;
            }
        }
    }
    free(cnt);
    *out = li;
    *n = (size_t)(hi - lo + 1);
    return 0;
}

int brw_stats_get(const brw_model *m, brw_stats *out, vx_err *err)
{
    (void)err;
    memset(out, 0, sizeof *out);
    out->layers = m->s.layers;
    out->hidden = m->s.hidden;
    out->vocab = m->s.vocab;
    memcpy(out->band, m->band, sizeof m->band);
    out->bands_note = m->bands_note;
    out->labelled = m->labels != NULL || m->clusters != NULL;
    out->gate_dtype = "";
    for (int l = 0; l < m->s.layers && !*out->gate_dtype; l++)
        if (m->s.layer[l].n_parts)
            out->gate_dtype = vx_dtype_name(m->s.layer[l].parts[0].gate->dtype);
    for (int l = 0; l < m->s.layers; l++) {
        out->features += m->s.layer[l].features;
        out->gate_bytes += m->s.layer[l].gate_bytes;
        int b = brw_band_of(m, l);
        if (b >= 0)
            out->band_features[b] += m->s.layer[l].features;
        if (m->dmet)
            for (int64_t f = 0; f < m->s.layer[l].features; f++) {
                brw_meta md;
                brw_dmet_get(m->dmet, l, f, &md);
                out->with_meta += md.present;
            }
    }
    for (size_t i = 0; i < vx_tensor_count(m->c); i++)
        out->container_bytes += vx_tensor_at(m->c, i)->nbytes;
    return 0;
}
