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

/* How many features an overlay gives metadata or an edit (repeats counted). */
static size_t n_touched(const eng_overlay *ov)
{
    return ov ? ov->n_meta + ov->n_edits : 0;
}

/* Those of layer l (or every layer, l < 0), appended to (ls, fs) at *n. */
static void touched(const eng_overlay *ov, int l, int *ls, int64_t *fs, size_t *n)
{
    const size_t nm = ov ? ov->n_meta : 0;
    for (size_t i = 0; i < n_touched(ov); i++) {
        const int tl = i < nm ? ov->meta[i].layer : ov->edits[i - nm].layer;
        if (l >= 0 && tl != l)
            continue;
        ls[*n] = tl;
        fs[(*n)++] = i < nm ? ov->meta[i].feature : ov->edits[i - nm].feature;
    }
}

/* The base down-meta the comparison reads, computed first where a side stores none (a
 * no-op for stored records). Over one base (the same index.json) a feature no overlay
 * touches reads the same on both sides, so only the touched ones are compared (*only set,
 * mark[l][f] = 1 for them); over two bases every feature of the compared layers is. */
static int diff_prepare(const ed_side *A, const ed_side *B, int layer, int *only,
                        uint8_t **mark, vx_err *e)
{
    const int L = brw_layers(A->bm);
    *only = A->bm == B->bm || !strcmp(vx_index_sha256(A->c), vx_index_sha256(B->c));
    if (!*only) {
        int *ls = malloc((size_t)L * sizeof *ls + 1), k = 0;
        if (!ls)
            return vx_errf(e, VX_ENOMEM, "out of memory");
        for (int l = 0; l < L; l++)
            if (layer < 0 || layer == l)
                ls[k++] = l;
        int rc = brw_meta_prepare_layers(A->bm, ls, k, e) || brw_meta_prepare_layers(B->bm, ls, k, e);
        free(ls);
        return rc ? -1 : 0;
    }
    const size_t cap = n_touched(A->ov) + n_touched(B->ov) + 1;
    int *ls = malloc(cap * sizeof *ls);
    int64_t *fs = malloc(cap * sizeof *fs);
    size_t n = 0;
    int rc = !ls || !fs ? vx_errf(e, VX_ENOMEM, "out of memory") : 0;
    if (!rc) {
        touched(A->ov, layer, ls, fs, &n);
        touched(B->ov, layer, ls, fs, &n);
    }
    for (size_t i = 0; !rc && i < n; i++) {
        if (!mark[ls[i]] && !(mark[ls[i]] = calloc((size_t)brw_features(A->bm, ls[i]) + 1, 1)))
            rc = vx_errf(e, VX_ENOMEM, "out of memory");
        else
            mark[ls[i]][fs[i]] = 1;
    }
    if (!rc && (brw_meta_prepare(A->bm, ls, fs, n, e) || brw_meta_prepare(B->bm, ls, fs, n, e)))
        rc = -1;
    free(ls);
    free(fs);
    return rc;
}

static int diff_rows(const ed_side *A, const ed_side *B, int layer, const char *relation,
                     int only, uint8_t *const *mark, ed_diff_row **out, size_t *n, vx_err *e)
{
    const int L = brw_layers(A->bm);
    size_t cap = 0;
    for (int l = 0; l < L; l++) {
        if (layer >= 0 && layer != l)
            continue;
        for (int64_t f = 0; f < brw_features(A->bm, l); f++) {
            if (only && !(mark[l] && mark[l][f]))
                continue;
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

int ed_diff_features(const ed_side *A, const ed_side *B, int layer, const char *relation,
                     ed_diff_row **out, size_t *n, vx_err *e)
{
    *out = NULL;
    *n = 0;
    int L = brw_layers(A->bm);
    if (L != brw_layers(B->bm))
        return vx_errf(e, VX_EARG, "cannot DIFF models of different depth: %s has %d layers, "
                       "%s has %d", A->label, L, B->label, brw_layers(B->bm));
    for (int l = 0; l < L; l++)
        if (brw_features(A->bm, l) != brw_features(B->bm, l))
            return vx_errf(e, VX_EARG, "cannot DIFF: layer %d has %lld features in %s and %lld "
                           "in %s", l, (long long)brw_features(A->bm, l), A->label,
                           (long long)brw_features(B->bm, l), B->label);
    uint8_t **mark = calloc((size_t)L + 1, sizeof *mark);
    int only = 0, rc = !mark ? vx_errf(e, VX_ENOMEM, "out of memory") : 0;
    if (!rc)
        rc = diff_prepare(A, B, layer, &only, mark, e) ||
             diff_rows(A, B, layer, relation, only, mark, out, n, e) ? -1 : 0;
    for (int l = 0; mark && l < L; l++)
        free(mark[l]);
    free(mark);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
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
            /* equal bytes that neither overlay changes are equal values: not decoded (a
             * 1.1B model's 2 GB were, for every DIFF under an overlay: 33 s) */
            if (!ed_tensor_edited(A->c, oa, x) && !ed_tensor_edited(B->c, ob, y) &&
                x->dtype == y->dtype && x->nbytes == y->nbytes &&
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
