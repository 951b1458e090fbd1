/*
 * overlay.c — replaying journal operations into the effective-model overlay (rules
 * in overlay.h). Slots are found through a small open-addressing table keyed by
 * (layer, feature), so a replay is linear in the number of operations.
 */
#include "overlay.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct slot {
    int layer;
    int64_t feature;
    int tombstone;
    float *gate, *up, *down;
    int has_meta;             /* 1: an operation's down_meta; 2: recomputed (moved column) */
    char *relation;           /* the latest insert's relation when it carried down_meta, or NULL */
    int32_t top_id;
    int has_score;
    float c_score;
} slot;

struct ed_overlay {
    slot *slots;
    size_t n_slots, cap_slots;
    size_t *table;            /* slot index + 1, 0 = empty */
    size_t table_size;        /* a power of two */
    eng_lowrank *lowrank;
    size_t n_lowrank;
    eng_feature_edit *edits;
    eng_meta_edit *meta;
    size_t n_ops;
    eng_overlay eng;
    ed_knn_entry *knn;       /* the residual-key store, keys unit length */
    size_t n_knn;
    int hidden;
};

int ed_check_op(const brw_model *m, const vx_op *op, const char *where, vx_err *err)
{
    const char *kind = vx_op_kind_name(op->kind);
    int L = brw_layers(m), H = brw_hidden(m);
    if (!kind)
        return vx_errf(err, VX_EFORMAT, "%s has an invalid kind", where);
    if (op->kind == VX_OP_DELETE_KNN)
        return op->entity ? 0 : vx_errf(err, VX_EFORMAT, "%s (%s) names no entity", where, kind);
    /* a journal op older than the digests (or a patch) could carry what no statement
     * writes; replayed, it made every INFER blame the weights */
    for (int i = 0; i < op->nvec; i++)
        for (int64_t k = 0; k < op->vec[i].rows * op->vec[i].cols; k++)
            if (!isfinite(op->vec[i].data[k]))
                return vx_errf(err, VX_EFORMAT, "%s (%s): vector '%s' holds a non-finite "
                               "value at index %lld", where, kind, op->vec[i].role,
                               (long long)k);
    if (op->layer < 0 || op->layer >= L)
        return vx_errf(err, VX_EARG, "%s (%s): layer %d is out of range (the model has %d "
                       "layers: 0-%d)", where, kind, op->layer, L, L - 1);
    /* what the statements refuse, a hand-edited patch may not bring in either */
    if (!isnan(op->confidence) && !(op->confidence >= 0 && op->confidence <= 1))
        return vx_errf(err, VX_EARG, "%s (%s): confidence must be between 0 and 1 (got %.15g)",
                       where, kind, op->confidence);
    if (op->has_meta && (op->meta_id < -1 || op->meta_id >= brw_vocab(m)))
        return vx_errf(err, VX_EARG, "%s (%s): down_meta token id %lld is out of range "
                       "(vocabulary 0-%d)", where, kind, (long long)op->meta_id,
                       brw_vocab(m) - 1);
    /* stored as f32: 1e300 is finite as a double and infinite there */
    if (op->has_meta && !isnan(op->meta_c) && !isfinite((float)op->meta_c))
        return vx_errf(err, VX_EARG, "%s (%s): down_meta c_score %g is not a finite 32-bit "
                       "float", where, kind, op->meta_c);
    if (op->kind == VX_OP_INSERT_KNN) {
        const vx_opvec *k = vx_op_vec(op, "key");
        if (!k || k->rows * k->cols != H)
            return vx_errf(err, VX_EFORMAT, "%s (%s): the key must hold %d floats (the "
                           "model's hidden size)", where, kind, H);
        if (op->target_id < 0 || op->target_id >= brw_vocab(m))
            return vx_errf(err, VX_EARG, "%s (%s): target id %lld is out of range (vocabulary "
                           "0-%d)", where, kind, (long long)op->target_id, brw_vocab(m) - 1);
        return 0;
    }
    int64_t F = brw_features(m, op->layer);
    const vx_opvec *u = vx_op_vec(op, "u"), *v = vx_op_vec(op, "v");
    if (u || v) {
        if (op->kind != VX_OP_INSERT || !u || !v)
            return vx_errf(err, VX_EFORMAT, "%s (%s): a low-rank delta needs both u and v on "
                           "an insert", where, kind);
        /* an expert-addressed delta spans that expert's features (one part of the layer) */
        int64_t first, rows;
        if (op->expert >= 0 && brw_expert_span(m, op->layer, op->expert, &first, &rows))
            return vx_errf(err, VX_EARG, "%s (%s): expert %d: layer %d %s", where, kind,
                           op->expert, op->layer, brw_expert_span(m, op->layer, 0, &first,
                           &rows) ? "has no routed experts" : "has fewer experts");
        if (op->expert >= 0)
            F = rows;
        /* one key per rank component (a multi-token target has one per token) */
        const vx_opvec *k = vx_op_vec(op, "key");
        if (k && (k->rows != u->cols || k->cols != F))
            return vx_errf(err, VX_EFORMAT, "%s (%s): the key is [%lld, %lld]; a rank-%lld "
                           "delta at layer %d needs [%lld, %lld]", where, kind,
                           (long long)k->rows, (long long)k->cols, (long long)u->cols,
                           op->layer, (long long)u->cols, (long long)F);
        if (u->rows != H || v->rows != F || u->cols != v->cols)
            return vx_errf(err, VX_EFORMAT, "%s (%s): low-rank shapes u [%lld, %lld] and v "
                           "[%lld, %lld] do not fit layer %d (hidden %d, %lld features)",
                           where, kind, (long long)u->rows, (long long)u->cols,
                           (long long)v->rows, (long long)v->cols, op->layer, H,
                           (long long)F);
        return 0;
    }
    if (op->feature < 0 || op->feature >= F)
        return vx_errf(err, VX_EARG, "%s (%s): feature %d is out of range (layer %d has "
                       "features 0-%lld)", where, kind, op->feature, op->layer,
                       (long long)F - 1);
    for (int i = 0; i < op->nvec; i++) {
        const vx_opvec *x = &op->vec[i];
        if (strcmp(x->role, "gate") && strcmp(x->role, "up") && strcmp(x->role, "down"))
            return vx_errf(err, VX_EFORMAT, "%s (%s): a '%s' vector has no meaning here", where,
                           kind, x->role);
        if (x->rows != 1 || x->cols != H)
            return vx_errf(err, VX_EFORMAT, "%s (%s): the %s vector holds %lld floats; the "
                           "model's hidden size is %d", where, kind, x->role,
                           (long long)(x->rows * x->cols), H);
    }
    if (op->kind == VX_OP_UPDATE && !op->has_meta && op->nvec == 0)
        return vx_errf(err, VX_EFORMAT, "%s (%s): changes nothing (no down_meta, no vectors)",
                       where, kind);
    /* an insert writes a feature: without a vector it would only relabel one, and
     * DESCRIBE would list a fact no weight holds (a relabel is UPDATE … SET target) */
    if (op->kind == VX_OP_INSERT && op->nvec == 0)
        return vx_errf(err, VX_EFORMAT, "%s (%s): no gate, up or down vector: an insert "
                       "writes the feature's weights (UPDATE sets metadata alone)", where, kind);
    return 0;
}

static uint64_t mix(int layer, int64_t feature)
{
    uint64_t k = ((uint64_t)(uint32_t)layer << 40) ^ (uint64_t)feature;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static int grow_table(ed_overlay *o)
{
    size_t size = o->table_size ? o->table_size * 2 : 64;
    size_t *t = calloc(size, sizeof *t);
    if (!t)
        return -1;
    for (size_t i = 0; i < o->n_slots; i++) {
        size_t h = mix(o->slots[i].layer, o->slots[i].feature) & (size - 1);
        while (t[h])
            h = (h + 1) & (size - 1);
        t[h] = i + 1;
    }
    free(o->table);
    o->table = t;
    o->table_size = size;
    return 0;
}

/* The slot of (layer, feature), created empty when absent; NULL on out-of-memory. */
static slot *find_slot(ed_overlay *o, int layer, int64_t feature)
{
    if (o->table_size) {
        size_t h = mix(layer, feature) & (o->table_size - 1);
        for (; o->table[h]; h = (h + 1) & (o->table_size - 1)) {
            slot *s = &o->slots[o->table[h] - 1];
            if (s->layer == layer && s->feature == feature)
                return s;
        }
    }
    if ((o->n_slots + 1) * 2 > o->table_size && grow_table(o))
        return NULL;
    if (o->n_slots == o->cap_slots) {
        size_t cap = o->cap_slots ? o->cap_slots * 2 : 32;
        slot *ns = realloc(o->slots, cap * sizeof *ns);
        if (!ns)
            return NULL;
        o->slots = ns;
        o->cap_slots = cap;
    }
    slot *s = &o->slots[o->n_slots++];
    memset(s, 0, sizeof *s);
    s->layer = layer;
    s->feature = feature;
    s->top_id = -1;
    size_t h = mix(layer, feature) & (o->table_size - 1);
    while (o->table[h])
        h = (h + 1) & (o->table_size - 1);
    o->table[h] = o->n_slots;
    return s;
}

/* Replace *dst with a copy of the op's vector of that role, when it carries one. */
static int take_vec(float **dst, const vx_op *op, const char *role)
{
    const vx_opvec *v = vx_op_vec(op, role);
    if (!v)
        return 0;
    size_t n = (size_t)(v->rows * v->cols);
    float *copy = malloc(n * sizeof *copy);
    if (!copy)
        return -1;
    memcpy(copy, v->data, n * sizeof *copy);
    free(*dst);
    *dst = copy;
    return 0;
}

static int add_lowrank(ed_overlay *o, const vx_op *op)
{
    const vx_opvec *u = vx_op_vec(op, "u"), *v = vx_op_vec(op, "v");
    eng_lowrank *nl = realloc(o->lowrank, (o->n_lowrank + 1) * sizeof *nl);
    if (!nl)
        return -1;
    o->lowrank = nl;
    size_t nu = (size_t)(u->rows * u->cols), nv = (size_t)(v->rows * v->cols);
    float *cu = malloc(nu * sizeof *cu), *cv = malloc(nv * sizeof *cv);
    if (!cu || !cv) {
        free(cu);
        free(cv);
        return -1;
    }
    memcpy(cu, u->data, nu * sizeof *cu);
    memcpy(cv, v->data, nv * sizeof *cv);
    nl[o->n_lowrank++] = (eng_lowrank){op->layer, (int)u->cols, cu, cv, op->expert};
    return 0;
}

/* insert_knn appends a unit-length key; delete_knn drops every entry of its entity. */
static int apply_knn(ed_overlay *o, const vx_op *op)
{
    if (op->kind == VX_OP_DELETE_KNN) {
        size_t k = 0;
        for (size_t i = 0; i < o->n_knn; i++) {
            if (strcasecmp(o->knn[i].entity, op->entity) == 0) {
                free((float *)o->knn[i].key);
                free((char *)o->knn[i].entity);
                free((char *)o->knn[i].relation);
                free((char *)o->knn[i].target);
            } else {
                o->knn[k++] = o->knn[i];
            }
        }
        o->n_knn = k;
        return 0;
    }
    const vx_opvec *kv = vx_op_vec(op, "key");
    ed_knn_entry *nk = realloc(o->knn, (o->n_knn + 1) * sizeof *nk);
    if (!nk)
        return -1;
    o->knn = nk;
    float *key = malloc((size_t)o->hidden * sizeof *key);
    char *ent = strdup(op->entity ? op->entity : ""), *tgt = strdup(op->target ? op->target : "");
    char *rel = strdup(op->relation ? op->relation : "");
    if (!key || !ent || !tgt || !rel) {
        free(key);
        free(ent);
        free(tgt);
        free(rel);
        return -1;
    }
    double nn = 0;
    for (int h = 0; h < o->hidden; h++)
        nn += (double)kv->data[h] * kv->data[h];
    float inv = nn > 0 ? (float)(1.0 / sqrt(nn)) : 0.0f;
    for (int h = 0; h < o->hidden; h++)
        key[h] = kv->data[h] * inv;
    nk[o->n_knn++] = (ed_knn_entry){op->layer, (int32_t)op->target_id, key, ent, rel, tgt};
    return 0;
}

static int apply(ed_overlay *o, const vx_op *op)
{
    if (op->kind == VX_OP_INSERT_KNN || op->kind == VX_OP_DELETE_KNN)
        return apply_knn(o, op);
    if (op->kind == VX_OP_INSERT && vx_op_vec(op, "u"))
        return add_lowrank(o, op);
    slot *s = find_slot(o, op->layer, op->feature);
    if (!s)
        return -1;
    if (op->kind == VX_OP_DELETE) {
        s->tombstone = 1;
        return 0;
    }
    if (take_vec(&s->gate, op, "gate") || take_vec(&s->up, op, "up") ||
        take_vec(&s->down, op, "down"))
        return -1;
    if (op->kind == VX_OP_INSERT) {
        s->tombstone = 0;
        /* an UPDATE keeps the relation; a later insert into the slot names its own */
        free(s->relation);
        s->relation = NULL;
        if (op->has_meta && op->relation && op->relation[0] && !(s->relation = strdup(op->relation)))
            return -1;
    }
    if (op->has_meta) {
        s->has_meta = 1;
        if (op->meta_id >= 0 && op->meta_id <= INT32_MAX)
            s->top_id = (int32_t)op->meta_id;
        s->has_score = !isnan(op->meta_c);
        s->c_score = s->has_score ? (float)op->meta_c : 0.0f;
    }
    return 0;
}

/* Row of v for feature f of a low-rank delta (a delta addressed to an expert spans that
 * expert's features only), or -1 when the delta does not reach f. */
static int64_t lowrank_row(const brw_model *m, const eng_lowrank *lr, int64_t f)
{
    if (lr->expert < 0)
        return f;
    int64_t first, rows;
    if (brw_expert_span(m, lr->layer, lr->expert, &first, &rows))
        return -1;
    return f >= first && f < first + rows ? f - first : -1;
}

/* The effective down column of feature f at layer (base or replaced, plus every low-rank
 * delta reaching it) into col [hidden]; -1 when its part has no stored down_proj or its
 * dtype has no f32 view. */
static int down_column(const brw_model *m, const ed_overlay *o, const slot *s, int layer,
                       int64_t f, float *col)
{
    const int H = brw_hidden(m);
    if (brw_down_column(m, layer, f, s && s->down ? NULL : col))
        return -1;
    if (s && s->down)
        memcpy(col, s->down, (size_t)H * sizeof *col);
    for (size_t i = 0; i < o->n_lowrank; i++) {
        const eng_lowrank *lr = &o->lowrank[i];
        int64_t vr = lr->layer == layer ? lowrank_row(m, lr, f) : -1;
        if (vr < 0)
            continue;
        for (int h = 0; h < H; h++)
            for (int r = 0; r < lr->rank; r++)
                col[h] += lr->u[(size_t)h * lr->rank + r] * lr->v[(size_t)vr * lr->rank + r];
    }
    return 0;
}

/* After a low-rank INSERT the features whose down column moved most — the top
 * ED_MOVED_FEATURES of each delta by |v_f|·|u| — get their output token recomputed from
 * the effective column exactly as the encoder's down-meta does (argmax over the vocabulary
 * of E · column, E the unscaled embedding), so WALK / DESCRIBE / SELECT show the new edge.
 * A slot whose metadata an operation set keeps it; tombstones are skipped. */
#define ED_MOVED_FEATURES 8
static int recompute_moved(ed_overlay *o, const brw_model *m)
{
    const int H = brw_hidden(m);
    if (!o->n_lowrank || brw_top_token(m, NULL, NULL, NULL))
        return 0;
    float *col = malloc((size_t)H * sizeof *col);
    if (!col)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < o->n_lowrank && rc == 0; i++) {
        const eng_lowrank *lr = &o->lowrank[i];
        int64_t F = brw_features(m, lr->layer), f0 = 0, rows;
        if (lr->expert >= 0 && brw_expert_span(m, lr->layer, lr->expert, &f0, &rows) == 0)
            F = rows;
        int64_t top[ED_MOVED_FEATURES];
        double mv[ED_MOVED_FEATURES];
        int nt = 0;
        for (int64_t f = 0; f < F; f++) {   /* |u| is common to the delta: rank by |v_f| */
            double x = 0;
            for (int r = 0; r < lr->rank; r++)
                x += (double)lr->v[(size_t)f * lr->rank + r] * lr->v[(size_t)f * lr->rank + r];
            int k = nt < ED_MOVED_FEATURES ? nt++ : ED_MOVED_FEATURES;
            if (k == ED_MOVED_FEATURES && x <= mv[k - 1])
                continue;
            if (k == ED_MOVED_FEATURES)
                k--;
            while (k > 0 && x > mv[k - 1]) {
                mv[k] = mv[k - 1];
                top[k] = top[k - 1];
                k--;
            }
            mv[k] = x;
            top[k] = f0 + f;
        }
        for (int t = 0; t < nt && rc == 0; t++) {
            slot *sl = find_slot(o, lr->layer, top[t]);
            if (!sl) {
                rc = -1;
                break;
            }
            if (sl->tombstone || sl->has_meta == 1 || down_column(m, o, sl, lr->layer, top[t], col))
                continue;
            int32_t best = -1;
            float bx = -INFINITY;
            brw_top_token(m, col, &best, &bx);
            sl->has_meta = 2;
            sl->top_id = best;
            sl->has_score = 1;
            sl->c_score = bx;
        }
    }
    free(col);
    return rc;
}

/* Build the arrays the engine and browse read from the slots. */
static int publish(ed_overlay *o)
{
    size_t ne = 0, nm = 0;
    o->edits = calloc(o->n_slots + 1, sizeof *o->edits);
    o->meta = calloc(o->n_slots + 1, sizeof *o->meta);
    if (!o->edits || !o->meta)
        return -1;
    for (size_t i = 0; i < o->n_slots; i++) {
        const slot *s = &o->slots[i];
        if (s->tombstone || s->gate || s->up || s->down)
            o->edits[ne++] = (eng_feature_edit){s->layer, (int)s->feature, s->tombstone,
                                                s->gate, s->up, s->down};
        if (s->has_meta)
            o->meta[nm++] = (eng_meta_edit){s->layer, s->feature, s->top_id, s->has_score,
                                            s->c_score, s->relation};
    }
    o->eng = (eng_overlay){o->edits, ne, o->lowrank, o->n_lowrank, o->meta, nm};
    return 0;
}

int ed_overlay_build(const brw_model *m, const vx_op *ops, size_t n, ed_overlay **out,
                     vx_err *err)
{
    *out = NULL;
    ed_overlay *o = calloc(1, sizeof *o);
    if (!o)
        return vx_errf(err, VX_ENOMEM, "out of memory building the overlay");
    o->hidden = brw_hidden(m);
    for (size_t i = 0; i < n; i++) {
        char where[64];
        snprintf(where, sizeof where, "journal operation %lld", (long long)ops[i].seq);
        if (ed_check_op(m, &ops[i], where, err)) {
            ed_overlay_free(o);
            return -1;
        }
        if (apply(o, &ops[i])) {
            ed_overlay_free(o);
            return vx_errf(err, VX_ENOMEM, "out of memory building the overlay");
        }
    }
    o->n_ops = n;
    if (recompute_moved(o, m) || publish(o)) {
        ed_overlay_free(o);
        return vx_errf(err, VX_ENOMEM, "out of memory building the overlay");
    }
    *out = o;
    return 0;
}

void ed_overlay_free(ed_overlay *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->n_slots; i++) {
        free(o->slots[i].gate);
        free(o->slots[i].up);
        free(o->slots[i].down);
        free(o->slots[i].relation);
    }
    for (size_t i = 0; i < o->n_lowrank; i++) {
        free((float *)o->lowrank[i].u);
        free((float *)o->lowrank[i].v);
    }
    for (size_t i = 0; i < o->n_knn; i++) {
        free((float *)o->knn[i].key);
        free((char *)o->knn[i].entity);
        free((char *)o->knn[i].relation);
        free((char *)o->knn[i].target);
    }
    free(o->knn);
    free(o->slots);
    free(o->table);
    free(o->lowrank);
    free(o->edits);
    free(o->meta);
    free(o);
}

const eng_overlay *ed_overlay_eng(const ed_overlay *o)
{
    return &o->eng;
}

void ed_overlay_counts(const ed_overlay *o, ed_counts *out)
{
    memset(out, 0, sizeof *out);
    out->ops = o->n_ops;
    out->knn = o->n_knn;
    out->features = o->n_slots;
    out->lowrank = o->n_lowrank;
    for (size_t i = 0; i < o->n_slots; i++) {
        const slot *s = &o->slots[i];
        int edited = s->tombstone || s->gate || s->up || s->down || s->has_meta == 1;
        out->features -= !edited;   /* a recomputed-only slot is no edit */
        out->tombstones += s->tombstone != 0;
        out->replaced += s->gate || s->up || s->down;
        out->meta += s->has_meta == 1;
        out->recomputed += s->has_meta == 2;
    }
}

int ed_is_tombstone(const ed_overlay *o, int layer, int64_t feature)
{
    if (!o || !o->table_size)
        return 0;
    size_t h = mix(layer, feature) & (o->table_size - 1);
    for (; o->table[h]; h = (h + 1) & (o->table_size - 1)) {
        const slot *s = &o->slots[o->table[h] - 1];
        if (s->layer == layer && s->feature == feature)
            return s->tombstone;
    }
    return 0;
}

const ed_knn_entry *ed_knn(const ed_overlay *o, size_t *n)
{
    *n = o ? o->n_knn : 0;
    return o ? o->knn : NULL;
}
