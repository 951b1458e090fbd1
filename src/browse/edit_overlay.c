/*
 * edit_overlay.c — replaying journal operations into the effective-model overlay (rules
 * in edit_overlay.h). Slots are found through a small open-addressing table keyed by
 * (layer, feature), so a replay is linear in the number of operations.
 */
#include "edit_overlay.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    int layer;
    int64_t feature;
    int tombstone;
    float *gate, *up, *down;
    int has_meta;
    int32_t top_id;
    int has_score;
    float c_score;
} slot;

struct brw_edit_overlay {
    slot *slots;
    size_t n_slots, cap_slots;
    size_t *table;            /* slot index + 1, 0 = empty */
    size_t table_size;        /* a power of two */
    eng_lowrank *lowrank;
    size_t n_lowrank;
    eng_feature_edit *edits;
    brw_meta_edit *meta;
    size_t n_ops;
    eng_overlay eng;
    brw_overlay brw;
};

int brw_edit_check_op(const brw_model *m, const vx_op *op, const char *where, vx_err *err)
{
    const char *kind = vx_op_kind_name(op->kind);
    int L = brw_layers(m), H = brw_hidden(m);
    if (!kind)
        return vx_errf(err, VX_EFORMAT, "%s has an invalid kind", where);
    if (op->kind == VX_OP_INSERT_KNN || op->kind == VX_OP_DELETE_KNN)
        return vx_errf(err, VX_EUNSUPPORTED,
                       "%s (%s) cannot be applied: lql has no residual-key (KNN) store", where,
                       kind);
    if (op->layer < 0 || op->layer >= L)
        return vx_errf(err, VX_EARG, "%s (%s): layer %d is out of range (the model has "
                       "layers 0-%d)", where, kind, op->layer, L - 1);
    int64_t F = brw_features(m, op->layer);
    const vx_opvec *u = vx_op_vec(op, "u"), *v = vx_op_vec(op, "v");
    if (u || v) {
        if (op->kind != VX_OP_INSERT || !u || !v)
            return vx_errf(err, VX_EFORMAT, "%s (%s): a low-rank delta needs both u and v on "
                           "an insert", where, kind);
        const vx_opvec *k = vx_op_vec(op, "key");
        if (k && (k->rows != 1 || k->cols != F))
            return vx_errf(err, VX_EFORMAT, "%s (%s): the key holds %lld floats; layer %d has "
                           "%lld features", where, kind, (long long)(k->rows * k->cols),
                           op->layer, (long long)F);
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

static int grow_table(brw_edit_overlay *o)
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
static slot *find_slot(brw_edit_overlay *o, int layer, int64_t feature)
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

static int add_lowrank(brw_edit_overlay *o, const vx_op *op)
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
    nl[o->n_lowrank++] = (eng_lowrank){op->layer, (int)u->cols, cu, cv};
    return 0;
}

static int apply(brw_edit_overlay *o, const vx_op *op)
{
    if (op->kind == VX_OP_INSERT && vx_op_vec(op, "u"))
        return add_lowrank(o, op);
    slot *s = find_slot(o, op->layer, op->feature);
    if (!s)
        return -1;
    if (op->kind == VX_OP_DELETE) {
        s->tombstone = 1;
        return 0;
    }
    if (op->kind == VX_OP_INSERT)
        s->tombstone = 0;
    if (take_vec(&s->gate, op, "gate") || take_vec(&s->up, op, "up") ||
        take_vec(&s->down, op, "down"))
        return -1;
    if (op->has_meta) {
        s->has_meta = 1;
        if (op->meta_id >= 0 && op->meta_id <= INT32_MAX)
            s->top_id = (int32_t)op->meta_id;
        s->has_score = !isnan(op->meta_c);
        s->c_score = s->has_score ? (float)op->meta_c : 0.0f;
    }
    return 0;
}

/* Build the arrays the engine and browse read from the slots. */
static int publish(brw_edit_overlay *o)
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
            o->meta[nm++] = (brw_meta_edit){s->layer, s->feature, s->top_id, s->has_score,
                                            s->c_score};
    }
    o->eng = (eng_overlay){o->edits, ne, o->lowrank, o->n_lowrank};
    o->brw = (brw_overlay){&o->eng, o->meta, nm};
    return 0;
}

int brw_edit_overlay_build(const brw_model *m, const vx_op *ops, size_t n,
                           brw_edit_overlay **out, vx_err *err)
{
    *out = NULL;
    brw_edit_overlay *o = calloc(1, sizeof *o);
    if (!o)
        return vx_errf(err, VX_ENOMEM, "out of memory building the overlay");
    for (size_t i = 0; i < n; i++) {
        char where[64];
        snprintf(where, sizeof where, "journal operation %lld", (long long)ops[i].seq);
        if (brw_edit_check_op(m, &ops[i], where, err)) {
            brw_edit_overlay_free(o);
            return -1;
        }
        if (apply(o, &ops[i])) {
            brw_edit_overlay_free(o);
            return vx_errf(err, VX_ENOMEM, "out of memory building the overlay");
        }
    }
    o->n_ops = n;
    if (publish(o)) {
        brw_edit_overlay_free(o);
        return vx_errf(err, VX_ENOMEM, "out of memory building the overlay");
    }
    *out = o;
    return 0;
}

void brw_edit_overlay_free(brw_edit_overlay *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->n_slots; i++) {
        free(o->slots[i].gate);
        free(o->slots[i].up);
        free(o->slots[i].down);
    }
    for (size_t i = 0; i < o->n_lowrank; i++) {
        free((float *)o->lowrank[i].u);
        free((float *)o->lowrank[i].v);
    }
    free(o->slots);
    free(o->table);
    free(o->lowrank);
    free(o->edits);
    free(o->meta);
    free(o);
}

const eng_overlay *brw_edit_overlay_eng(const brw_edit_overlay *o)
{
    return &o->eng;
}

const brw_overlay *brw_edit_overlay_browse(const brw_edit_overlay *o)
{
    return &o->brw;
}

void brw_edit_overlay_counts(const brw_edit_overlay *o, brw_edit_counts *out)
{
    memset(out, 0, sizeof *out);
    out->ops = o->n_ops;
    out->features = o->n_slots;
    out->lowrank = o->n_lowrank;
    for (size_t i = 0; i < o->n_slots; i++) {
        const slot *s = &o->slots[i];
        out->tombstones += s->tombstone != 0;
        out->replaced += s->gate || s->up || s->down;
        out->meta += s->has_meta != 0;
    }
}

int brw_edit_is_tombstone(const brw_edit_overlay *o, int layer, int64_t feature)
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
