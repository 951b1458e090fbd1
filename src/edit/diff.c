/*
 * diff.c — DIFF of two effective states (edit.h): CURRENT (the base plus the overlay) or a
 * container's stored state; the features whose tombstone or metadata differ, per-tensor
 * value deltas, and the differences as a vector-free patch.
 */
#include "ed_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void ed_side_close(ed_side *d)
{
    if (d->owned) {
        brw_close(d->bm);
        vx_close(d->c);
    }
    memset(d, 0, sizeof *d);
}

int ed_side_open(const ed_model *es, const char *path, ed_side *d, vx_err *err)
{
    memset(d, 0, sizeof *d);
    if (!path) {
        d->label = "CURRENT";
        d->c = es->c;
        d->bm = es->bm;
        d->edit = es->ov;
        d->ov = es->ov ? ed_overlay_eng(es->ov) : NULL;
        return 0;
    }
    d->label = path;
    d->owned = 1;
    if (vx_open(path, &d->c, err) || brw_open(d->c, &d->bm, err)) {
        vx_close(d->c);
        memset(d, 0, sizeof *d);
        return -1;
    }
    return 0;
}

int ed_diff_features(const ed_side *A, const ed_side *B, int layer, const char *relation,
                     ed_diff_row **out, size_t *n, vx_err *e)
{
    *out = NULL;
    *n = 0;
    int L = brw_layers(A->bm);
    if (L != brw_layers(B->bm))
        return vx_errf(e, VX_EARG, "cannot DIFF models of different depth: %s has %d layers, "
                       "%s has %d", A->label, L, B->label, brw_layers(B->bm));
    size_t cap = 0;
    for (int l = 0; l < L; l++) {
        if (brw_features(A->bm, l) != brw_features(B->bm, l))
            return vx_errf(e, VX_EARG, "cannot DIFF: layer %d has %lld features in %s and %lld "
                           "in %s", l, (long long)brw_features(A->bm, l), A->label,
                           (long long)brw_features(B->bm, l), B->label);
        if (layer >= 0 && layer != l)
            continue;
        for (int64_t f = 0; f < brw_features(A->bm, l); f++) {
            ed_diff_row d = {l, f, NULL, {0}, {0}};
            brw_feature_meta(A->bm, A->ov, l, f, &d.a);
            brw_feature_meta(B->bm, B->ov, l, f, &d.b);
            int ta = ed_is_tombstone(A->edit, l, f), tb = ed_is_tombstone(B->edit, l, f);
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
            if (relation) {
                const char *la = brw_label(A->bm, A->ov, l, f), *lb = brw_label(B->bm, B->ov, l, f);
                if (!(la && !strcasecmp(la, relation)) && !(lb && !strcasecmp(lb, relation)))
                    continue;
            }
            if (*n == cap) {
                cap = cap ? cap * 2 : 64;
                ed_diff_row *nr = realloc(*out, cap * sizeof *nr);
                if (!nr)
                    return vx_errf(e, VX_ENOMEM, "out of memory");
                *out = nr;
            }
            (*out)[(*n)++] = d;
        }
    }
    return 0;
}


/* Is the tensor in layer (or layer -1)? */
static int tensor_in_layer(int layer, const char *name)
{
    int l;
    return layer < 0 || (sscanf(name, "layers.%d.", &l) == 1 && l == layer);
}

/* One more row of *out. */
static ed_tensor_diff *tensor_row(ed_tensor_diff **out, size_t *n, size_t *cap)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        ed_tensor_diff *nr = realloc(*out, c * sizeof *nr);
        if (!nr)
            return NULL;
        *out = nr;
        *cap = c;
    }
    return &(*out)[(*n)++];
}

int ed_diff_tensors(const ed_side *A, const ed_side *B, int layer, ed_tensor_diff **out,
                    size_t *nout, vx_err *e)
{
    size_t cap = 0;
    *out = NULL;
    *nout = 0;
    const eng_overlay *oa = A->edit ? ed_overlay_eng(A->edit) : NULL;
    const eng_overlay *ob = B->edit ? ed_overlay_eng(B->edit) : NULL;
    for (size_t i = 0; i < vx_tensor_count(A->c); i++) {
        const vx_tensor *x = vx_tensor_at(A->c, i), *y = vx_find(B->c, x->object, x->name);
        if (!tensor_in_layer(layer, x->name))
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
            if (ed_tensor_f32(A->c, oa, x, &fa, &ea, &ve) ||
                ed_tensor_f32(B->c, ob, y, &fb, &eb, &ve)) {
                free(fa);
                if (ve.code != VX_EUNSUPPORTED) {
                    *e = ve;
                    return -1;
                }
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
        ed_tensor_diff *row = tensor_row(out, nout, &cap);
        if (!row)
            return vx_errf(e, VX_ENOMEM, "out of memory");
        *row = (ed_tensor_diff){x->object, x->name, changed, mx, have_mx, status};
    }
    for (size_t i = 0; i < vx_tensor_count(B->c); i++) {
        const vx_tensor *y = vx_tensor_at(B->c, i);
        if (tensor_in_layer(layer, y->name) && !vx_find(A->c, y->object, y->name)) {
            ed_tensor_diff *row = tensor_row(out, nout, &cap);
            if (!row)
                return vx_errf(e, VX_ENOMEM, "out of memory");
            *row = (ed_tensor_diff){y->object, y->name, 0, 0, 0, "only in b"};
        }
    }
    return 0;
}

int ed_diff_patch(const ed_side *A, const ed_side *B, const ed_diff_row *rows, size_t n,
                  const char *file, size_t *written, size_t *skipped_out, vx_err *e)
{
    vx_patch p = {0};
    char now[32];
    ed_patch_header(&p, A->c, "diff", now);
    p.ops = calloc(n + 1, sizeof *p.ops);
    if (!p.ops)
        return vx_errf(e, VX_ENOMEM, "out of memory");
    size_t skipped = 0;
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
            rc = vx_op_set_str(&op->meta_token, piece ? piece : "", e);
        }
        p.nops++;
    }
    if (rc == 0 && vx_patch_write(file, &p, e))
        rc = -1;
    *written = p.nops;
    *skipped_out = skipped;
    vx_ops_free(p.ops, p.nops);
    return rc;
}
