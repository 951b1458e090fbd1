/*
 * hf_export.c — a container back to the Hugging Face checkpoint it was encoded from
 * (vindex.h, vx_export_hf). The mapping is the encoder's, read backwards: every object's
 * source_bindings names the checkpoint tensor (and slice or transpose) each operand was
 * copied from, and index.json's encoder.source_shapes keeps the shape of every source
 * tensor that was not stored whole. So a rename is written as it is stored, row slices of a
 * fused tensor (Phi-3 qkv / gate_up, Granite's per-expert rows) are concatenated back,
 * Conv1D transposes are undone, a [C, K] conv weight gets its [C, 1, K] back, experts
 * gathered from a stacked tensor (gpt-oss) are scattered back into it, and MXFP4 experts
 * (stored source-exact as [scale | 16 nibble bytes] blocks) are split back into the
 * checkpoint's `*_blocks` and `*_scales` with its nibble order. Tensors keep their stored
 * bytes and dtype, so `vindex encode` of the directory reproduces the container's payload
 * hashes.
 */
#include "hf_int.h"
#include "vx_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- shared with hf_gguf.c */

int hf_export_admissible(const vx_container *c, int mxfp4, const char *what, vx_err *err)
{
    if (vx_container_shape(c) == VX_SHAPE_BANK)
        return vx_errf(err, VX_EUNSUPPORTED, "%s: '%s' is bank-shape: its experts live in LYRW "
                       "bank files with no checkpoint layout; export the graph-shape container "
                       "it was imported from", what, vx_dir(c));
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if (t->dtype == VX_F32 || t->dtype == VX_F16 || t->dtype == VX_BF16 ||
            (t->dtype == VX_MXFP4 && mxfp4))
            continue;
        const char *p = vx_profile(c);
        if (t->dtype == VX_MXFP4)
            return vx_errf(err, VX_EUNSUPPORTED, "%s: tensor '%s' (%s) is MXFP4-packed; GGUF "
                           "export writes f32/f16/bf16 tensors (export FORMAT SAFETENSORS keeps "
                           "the checkpoint's MXFP4 blocks and scales)", what, t->name, t->object);
        return vx_errf(err, VX_EUNSUPPORTED, "%s: tensor '%s' (%s) is stored as %s%s%s%s; export "
                       "writes tensors as stored and does not dequantise (the result would not "
                       "re-encode to this container): bind its f32/f16/bf16 representation",
                       what, t->name, t->object, vx_dtype_name(t->dtype) ? vx_dtype_name(t->dtype)
                       : "a block-quantised type", p ? " (profile '" : "", p ? p : "", p ? "')" : "");
    }
    return 0;
}

/* ---------------------------------------------------------------- the inverse mapping */

/* PX_BLOCKS / PX_SCALES: an MXFP4 operand's codes / scales gathered from the
 * checkpoint's [E, R, nb, 16] blocks / [E, R, nb] scales */
enum { PX_WHOLE, PX_ROWS, PX_T, PX_COLS_T, PX_GATHER, PX_BLOCKS, PX_SCALES };

typedef struct part {
    const vx_tensor *t;
    int xf;
    int64_t lo, hi;
    int expert, step, transpose;     /* PX_GATHER, PX_BLOCKS, PX_SCALES */
} part;

typedef struct src_tensor {
    const char *name;            /* checkpoint name (borrowed from the graph JSON) */
    vx_dtype dtype;
    int ndim;
    int64_t shape[VX_MAX_DIMS];
    part *parts;
    size_t n, cap;
} src_tensor;

typedef struct plan {
    src_tensor *s;
    size_t n, cap;
} plan;

static void plan_free(plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->s[i].parts);
    free(p->s);
}

static src_tensor *plan_get(plan *p, const char *name, vx_err *err)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->s[i].name, name) == 0)
            return &p->s[i];
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        src_tensor *s = realloc(p->s, cap * sizeof *s);
        if (!s) {
            vx_errf(err, VX_ENOMEM, "export: out of memory");
            return NULL;
        }
        p->s = s;
        p->cap = cap;
    }
    src_tensor *s = &p->s[p->n++];
    memset(s, 0, sizeof *s);
    s->name = name;
    return s;
}

static int add_part(src_tensor *s, const part *pt, vx_err *err)
{
    const vx_tensor *t = pt->t;
    if (s->n && s->parts[0].t->dtype != t->dtype)
        return vx_errf(err, VX_EUNSUPPORTED, "export: checkpoint tensor '%s' would be rebuilt "
                       "from operands of two dtypes (%s, %s)", s->name,
                       vx_dtype_name(s->parts[0].t->dtype), vx_dtype_name(t->dtype));
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4;
        part *q = realloc(s->parts, cap * sizeof *q);
        if (!q)
            return vx_errf(err, VX_ENOMEM, "export: out of memory");
        s->parts = q;
        s->cap = cap;
    }
    s->parts[s->n++] = *pt;
    s->dtype = t->dtype;
    return 0;
}

static int cmp_part(const void *a, const void *b)
{
    const part *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The source shape, and a check that the parts rebuild exactly that tensor. */
static int settle(src_tensor *s, const cJSON *shapes, vx_err *err)
{
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(shapes, s->name);
    const vx_tensor *t0 = s->parts[0].t;
    int xf = s->parts[0].xf;
    for (size_t i = 1; i < s->n; i++)
        if (s->parts[i].xf != xf || xf == PX_WHOLE || xf == PX_T ||
            s->parts[i].transpose != s->parts[0].transpose)
            return vx_errf(err, VX_EFORMAT, "export: checkpoint tensor '%s' is bound by %zu "
                           "operands in different ways; the bindings do not invert", s->name, s->n);
    if (sh) {
        s->ndim = cJSON_GetArraySize(sh);
        if (s->ndim < 1 || s->ndim > VX_MAX_DIMS)
            return vx_errf(err, VX_EFORMAT, "export: encoder.source_shapes['%s'] is not a shape",
                           s->name);
        for (int d = 0; d < s->ndim; d++) {
            const cJSON *v = cJSON_GetArrayItem(sh, d);
            if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 4e18) ||
                v->valuedouble != floor(v->valuedouble))
                return vx_errf(err, VX_EFORMAT, "export: encoder.source_shapes['%s'] is not a "
                               "shape", s->name);
            s->shape[d] = (int64_t)v->valuedouble;
        }
    } else if (xf == PX_WHOLE) {
        s->ndim = t0->ndim;
        memcpy(s->shape, t0->shape, sizeof s->shape);
    } else if (xf == PX_T && t0->ndim == 2) {
        s->ndim = 2;
        s->shape[0] = t0->shape[1];
        s->shape[1] = t0->shape[0];
    } else {
        return vx_errf(err, VX_EUNSUPPORTED, "export: checkpoint tensor '%s' was stored sliced "
                       "and this container does not record its source shape (encoded before "
                       "export existed): re-encode it from the checkpoint", s->name);
    }
    uint64_t n = 1, have = 0;
    for (int d = 0; d < s->ndim; d++)
        if (__builtin_mul_overflow(n, (uint64_t)s->shape[d], &n))
            return vx_errf(err, VX_EFORMAT, "export: encoder.source_shapes['%s'] has more "
                           "elements than 64 bits count", s->name);
    /* an MXFP4 value is half a block byte; a 32-value block has one scale byte */
    for (size_t i = 0; i < s->n; i++)
        have += vx_tensor_nelems(s->parts[i].t) / (xf == PX_BLOCKS ? 2 : xf == PX_SCALES ? 32 : 1);
    if (n != have)
        return vx_errf(err, VX_EFORMAT, "export: checkpoint tensor '%s' has %llu elements but "
                       "its operands hold %llu", s->name, (unsigned long long)n,
                       (unsigned long long)have);
    if (xf == PX_ROWS || xf == PX_COLS_T) {
        qsort(s->parts, s->n, sizeof *s->parts, cmp_part);
        int64_t at = 0;
        for (size_t i = 0; i < s->n; i++) {
            if (s->parts[i].lo != at)
                return vx_errf(err, VX_EFORMAT, "export: the slices of checkpoint tensor '%s' "
                               "leave a gap or overlap at %lld", s->name, (long long)at);
            at = s->parts[i].hi;
        }
        if (xf == PX_COLS_T && (s->ndim != 2 || at != s->shape[1]))
            return vx_errf(err, VX_EFORMAT, "export: the column slices of '%s' do not cover it",
                           s->name);
        /* the element count alone would pass a source shape with its dims swapped; rows
         * run over every dim but the last (a stacked [experts, rows, cols] included), a
         * vector's over its elements */
        uint64_t last = s->ndim > 1 ? (uint64_t)s->shape[s->ndim - 1] : 1;
        int64_t rows = last ? (int64_t)(n / last) : 0;
        if (xf == PX_ROWS && at != rows)
            return vx_errf(err, VX_EFORMAT, "export: the row slices of '%s' cover %lld rows; "
                           "encoder.source_shapes gives it %lld", s->name, (long long)at,
                           (long long)rows);
    }
    if (xf == PX_T && (s->ndim != 2 || t0->ndim != 2))
        return vx_errf(err, VX_EFORMAT, "export: transposed tensor '%s' is not 2-D", s->name);
    if (xf == PX_T && (s->shape[0] != t0->shape[1] || s->shape[1] != t0->shape[0]))
        return vx_errf(err, VX_EFORMAT, "export: encoder.source_shapes['%s'] is [%lld, %lld]; "
                       "the operand stored transposed is [%lld, %lld]", s->name,
                       (long long)s->shape[0], (long long)s->shape[1], (long long)t0->shape[0],
                       (long long)t0->shape[1]);
    if ((xf == PX_BLOCKS && (s->ndim != 4 || s->shape[3] != 16)) ||
        (xf == PX_SCALES && s->ndim != 3))
        return vx_errf(err, VX_EFORMAT, "export: MXFP4 tensor '%s' is not [experts, rows, "
                       "blocks%s]", s->name, xf == PX_BLOCKS ? ", 16" : "");
    if (xf == PX_GATHER && s->ndim != 3 && !(s->ndim == 2 && !s->parts[0].transpose))
        return vx_errf(err, VX_EFORMAT, "export: gathered tensor '%s' is not [experts, rows, "
                       "cols] (or [experts, n] for vectors)", s->name);
    return 0;
}

/* Every bound operand of every object, grouped by the checkpoint tensor it came from. */
static int build_plan(const vx_container *c, plan *p, vx_err *err)
{
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(vx_graph_json(c), "objects")) {
        const char *id = vx_json_str(o, "id");
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(o, "source_bindings")) {
            const vx_tensor *t = id && b->string ? vx_findf(c, id, "%s", b->string) : NULL;
            if (!t)
                return vx_errf(err, VX_EMISSING, "export: operand '%s' of '%s' is not stored in "
                               "the bound representation", b->string ? b->string : "?",
                               id ? id : "?");
            const char *src = cJSON_IsString(b) ? b->valuestring : vx_json_str(b, "tensor");
            if (!src)
                return vx_errf(err, VX_EFORMAT, "export: operand '%s' has a binding without a "
                               "tensor", b->string);
            int xf = PX_WHOLE;
            int64_t lo = 0, hi = 0;
            const cJSON *rows = cJSON_GetObjectItemCaseSensitive(b, "rows");
            const cJSON *cols = cJSON_GetObjectItemCaseSensitive(b, "cols");
            const cJSON *rc = rows ? rows : cols;
            part pt = {t, PX_WHOLE, 0, 0, 0, 0, 0};
            const char *scales = vx_json_str(b, "scales");
            if (scales && t->dtype != VX_MXFP4)
                return vx_errf(err, VX_EUNSUPPORTED, "export: operand '%s' is bound to the MXFP4 "
                               "blocks of '%s' but stored as %s (edited or re-represented); "
                               "export writes MXFP4 experts back only as stored and does not "
                               "re-pack blocks and scales", b->string, src,
                               vx_dtype_name(t->dtype) ? vx_dtype_name(t->dtype) : "another type");
            if (t->dtype == VX_MXFP4 && (!scales || !cJSON_HasObjectItem(b, "expert")))
                return vx_errf(err, VX_EUNSUPPORTED, "export: MXFP4 operand '%s' has no "
                               "checkpoint blocks and scales to go back to", b->string);
            if (cJSON_HasObjectItem(b, "expert")) {
                xf = scales ? PX_BLOCKS : PX_GATHER;
                pt.expert = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "expert"));
                pt.step = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "step"));
                pt.transpose = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "transpose"));
                lo = rc ? (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(rc, 0)) : -1;
                if (lo < 0 || pt.step < 1 || pt.expert < 0)
                    return vx_errf(err, VX_EFORMAT, "export: operand '%s' has a malformed "
                                   "expert binding", b->string);
            } else if (rc) {
                lo = (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(rc, 0));
                hi = (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(rc, 1));
                xf = rows ? PX_ROWS : PX_COLS_T;
            } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "transpose"))) {
                xf = PX_T;
            }
            pt.xf = xf;
            pt.lo = lo;
            pt.hi = hi;
            src_tensor *s = plan_get(p, src, err);
            if (!s || add_part(s, &pt, err))
                return -1;
            if (scales) {
                pt.xf = PX_SCALES;
                if (!(s = plan_get(p, scales, err)) || add_part(s, &pt, err))
                    return -1;
            }
        }
    }
    const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "encoder"), "source_shapes");
    for (size_t i = 0; i < p->n; i++)
        if (settle(&p->s[i], shapes, err))
            return -1;
    return p->n ? 0 : vx_errf(err, VX_EFORMAT, "export: '%s' records no source bindings",
                              vx_dir(c));
}

static const char *st_dtype(vx_dtype t)
{
    return t == VX_F32 ? "F32" : t == VX_F16 ? "F16" : t == VX_MXFP4 ? "U8" : "BF16";
}

/* A tensor scattered back from gathered operands, as n units of `unit` bytes (elements,
 * or MXFP4 rows), each of which must be written exactly once (seen). */
static int scatter_start(const src_tensor *s, uint64_t n, size_t unit, unsigned char **out,
                         unsigned char **seen, vx_err *err)
{
    *out = malloc((size_t)(n * unit) + 1);
    *seen = calloc((size_t)n + 1, 1);
    return *out && *seen ? 0 : vx_errf(err, VX_ENOMEM, "export: out of memory for '%s'", s->name);
}

/* Check that every unit was written, write the bytes (rc == 0), free both buffers. */
static int scatter_end(int fd, const src_tensor *s, unsigned char *out, unsigned char *seen,
                       uint64_t n, size_t unit, int rc, const char *path, vx_err *err)
{
    for (uint64_t i = 0; i < n && rc == 0; i++)
        if (!seen[i])
            rc = vx_errf(err, VX_EFORMAT, "export: the gathered operands of '%s' leave %s %llu "
                         "unwritten", s->name, unit == vx_dtype_block_bytes(s->dtype) ?
                         "element" : "row", (unsigned long long)i);
    if (rc == 0)
        rc = vx_write_all(fd, out, n * unit, "export", path, err);
    free(out);
    free(seen);
    return rc;
}

/* A source tensor's bytes in the checkpoint (MXFP4 blocks and scales are U8). */
static uint64_t src_bytes(const src_tensor *s)
{
    uint64_t n = s->dtype == VX_MXFP4 ? 1 : vx_dtype_block_bytes(s->dtype);
    for (int d = 0; d < s->ndim; d++)
        n *= (uint64_t)s->shape[d];
    return n;
}

/* The checkpoint's MXFP4 blocks [E, R, nb, 16] or scales [E, R, nb] back from the stored
 * operands, whose rows are nb blocks of [scale | 16 bytes] with value j in the low nibble
 * of byte j and value j + 16 in its high nibble (encode.c); the checkpoint packs values 2j
 * (low) and 2j + 1 (high) in byte j. Operand row i of expert e is checkpoint row
 * lo + i·step; every row must be written exactly once. */
static int write_mxfp4(int fd, const src_tensor *s, const char *path, vx_err *err)
{
    const int blocks = s->parts[0].xf == PX_BLOCKS;
    const uint64_t E = (uint64_t)s->shape[0], R = (uint64_t)s->shape[1];
    const uint64_t nb = (uint64_t)s->shape[2], rb = nb * (blocks ? 16 : 1);
    unsigned char *out, *seen;
    int rc = scatter_start(s, E * R, rb, &out, &seen, err);
    for (size_t p = 0; p < s->n && rc == 0; p++) {
        const part *q = &s->parts[p];
        const unsigned char *d = q->t->data;
        const uint64_t rows = (uint64_t)q->t->shape[0];
        if ((uint64_t)q->expert >= E || q->t->ndim != 2 || (uint64_t)q->t->shape[1] != nb * 32) {
            rc = vx_errf(err, VX_EFORMAT, "export: MXFP4 operand '%s' does not fit expert %d of "
                         "'%s'", q->t->name, q->expert, s->name);
            break;
        }
        for (uint64_t i = 0; i < rows && rc == 0; i++) {
            const uint64_t k = (uint64_t)q->lo + i * (uint64_t)q->step;
            const uint64_t r = (uint64_t)q->expert * R + k;
            if (k >= R || seen[r]++) {
                rc = vx_errf(err, VX_EFORMAT, "export: the MXFP4 operands of '%s' overlap or "
                             "overrun at row %llu", s->name, (unsigned long long)r);
                break;
            }
            for (uint64_t b = 0; b < nb; b++) {
                const unsigned char *blk = d + (i * nb + b) * 17;
                unsigned char *o = out + r * rb + b * (blocks ? 16 : 1);
                if (!blocks) {
                    o[0] = blk[0];
                    continue;
                }
                unsigned char v[32];
                for (int j = 0; j < 16; j++) {
                    v[j] = blk[1 + j] & 0x0f;
                    v[j + 16] = blk[1 + j] >> 4;
                }
                for (int j = 0; j < 16; j++)
                    o[j] = (unsigned char)(v[2 * j] | v[2 * j + 1] << 4);
            }
        }
    }
    return scatter_end(fd, s, out, seen, E * R, rb, rc, path, err);
}

/* A stacked-experts tensor [E, R, C] ([E, N]: R = N, C = 1) scattered back from its
 * gathered operands: operand row i of expert e is source row lo + i·step (transposed: that
 * column); every element must be written exactly once. */
static int write_gathered(int fd, const src_tensor *s, const char *path, vx_err *err)
{
    const size_t es = vx_dtype_block_bytes(s->dtype);
    const uint64_t E = (uint64_t)s->shape[0], R = (uint64_t)s->shape[1];
    const uint64_t C = s->ndim == 3 ? (uint64_t)s->shape[2] : 1, n = E * R * C;
    unsigned char *out, *seen;
    int rc = scatter_start(s, n, es, &out, &seen, err);
    for (size_t p = 0; p < s->n && rc == 0; p++) {
        const part *q = &s->parts[p];
        const unsigned char *d = q->t->data;
        const uint64_t len = q->transpose ? R : C, rows = (uint64_t)q->t->shape[0];
        if ((uint64_t)q->expert >= E || vx_tensor_nelems(q->t) != rows * len) {
            rc = vx_errf(err, VX_EFORMAT, "export: operand '%s' does not fit expert %d of '%s'",
                         q->t->name, q->expert, s->name);
            break;
        }
        for (uint64_t i = 0; i < rows && rc == 0; i++) {
            uint64_t k = (uint64_t)q->lo + i * (uint64_t)q->step;
            for (uint64_t x = 0; x < len && rc == 0; x++) {
                uint64_t at = (uint64_t)q->expert * R * C + (q->transpose ? x * C + k : k * C + x);
                if (k >= (q->transpose ? C : R) || seen[at]++)
                    rc = vx_errf(err, VX_EFORMAT, "export: the gathered operands of '%s' "
                                 "overlap or overrun at element %llu", s->name,
                                 (unsigned long long)at);
                else
                    memcpy(out + at * es, d + (i * len + x) * es, es);
            }
        }
    }
    return scatter_end(fd, s, out, seen, n, es, rc, path, err);
}

/* A source tensor's bytes: the parts in order (whole, or row slices concatenated),
 * transposed back ([out, in] operands to the [in, out] Conv1D layout), or scattered back
 * into a stacked-experts tensor. */
static int write_tensor(int fd, const src_tensor *s, const char *path, vx_err *err)
{
    const size_t es = vx_dtype_block_bytes(s->dtype);
    if (s->parts[0].xf == PX_GATHER)
        return write_gathered(fd, s, path, err);
    if (s->parts[0].xf == PX_BLOCKS || s->parts[0].xf == PX_SCALES)
        return write_mxfp4(fd, s, path, err);
    if (s->parts[0].xf == PX_WHOLE || s->parts[0].xf == PX_ROWS) {
        for (size_t i = 0; i < s->n; i++)
            if (vx_write_all(fd, s->parts[i].t->data, s->parts[i].t->nbytes, "export", path, err))
                return -1;
        return 0;
    }
    /* source [R, C]; output row r gathers column r of every part */
    const int64_t R = s->shape[0], C = s->shape[1];
    unsigned char *row = malloc((size_t)(C ? C : 1) * es);
    if (!row)
        return vx_errf(err, VX_ENOMEM, "export: out of memory for '%s'", s->name);
    int rc = 0;
    for (int64_t r = 0; r < R && rc == 0; r++) {
        int64_t c = 0;
        for (size_t i = 0; i < s->n; i++) {
            const vx_tensor *t = s->parts[i].t;      /* [cols of this part, R] */
            const unsigned char *d = t->data;
            for (int64_t k = 0; k < t->shape[0]; k++, c++)
                memcpy(row + (size_t)c * es, d + ((size_t)k * (size_t)R + (size_t)r) * es, es);
        }
        rc = vx_write_all(fd, row, (uint64_t)C * es, "export", path, err);
    }
    free(row);
    return rc;
}

static int write_safetensors(const plan *p, const char *path, vx_export_report *rep,
                             vx_err *err)
{
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0;
    for (size_t i = 0; i < p->n; i++) {
        const src_tensor *s = &p->s[i];
        const uint64_t n = src_bytes(s);
        cJSON *e = cJSON_AddObjectToObject(h, s->name);
        cJSON_AddStringToObject(e, "dtype", st_dtype(s->dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < s->ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)s->shape[d]));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + n)));
        off += n;
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!text)
        return vx_errf(err, VX_ENOMEM, "export: out of memory");
    size_t tl = strlen(text), hl = (tl + 7) & ~(size_t)7;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644), rc = 0;
    if (fd < 0) {
        free(text);
        return vx_errf(err, VX_EIO, "export: cannot create '%s': %s", path, strerror(errno));
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    rc = vx_write_all(fd, len, 8, "export", path, err) ||
         vx_write_all(fd, text, tl, "export", path, err) ||
         vx_write_all(fd, "        ", hl - tl, "export", path, err);
    free(text);
    for (size_t i = 0; i < p->n && rc == 0; i++)
        rc = write_tensor(fd, &p->s[i], path, err);
    if (rc == 0 && fsync(fd) != 0)
        rc = vx_errf(err, VX_EIO, "export: cannot sync '%s': %s", path, strerror(errno));
    close(fd);
    rep->tensors = p->n;
    rep->bytes = off;
    return rc ? -1 : 0;
}

int vx_export_hf(const vx_container *c, const char *out_dir, vx_export_report *rep,
                 vx_err *err)
{
    memset(rep, 0, sizeof *rep);
    char cfg[4200], path[4300];
    if (vx_cw_check(out_dir, vx_dir(c), 0, "export", err) ||
        hf_export_admissible(c, 1, "export", err))
        return -1;
    snprintf(cfg, sizeof cfg, "%s/config.json", vx_dir(c));
    if (access(cfg, R_OK) != 0)
        return vx_errf(err, VX_EMISSING, "export: '%s' has no config.json snapshot (the encoder "
                       "copies it from the checkpoint); a Hugging Face directory needs one",
                       vx_dir(c));
    plan p = {0};
    vx_cw *w = NULL;
    if (vx_snapshot_check(c, NULL, err) || build_plan(c, &p, err) || vx_cw_open(&w, out_dir, vx_dir(c), "export", err) ||
        vx_cw_path(w, "model.safetensors", path, sizeof path, err)) {
        plan_free(&p);
        vx_cw_abort(w);
        return -1;
    }
    int rc = write_safetensors(&p, path, rep, err);
    for (size_t i = 0; rc == 0 && vx_hf_snapshots[i]; i++) {
        char have[4300];
        snprintf(have, sizeof have, "%s/%s", vx_dir(c), vx_hf_snapshots[i]);
        if (access(have, F_OK) != 0)
            continue;
        rc = vx_copy_snapshot(vx_dir(c), vx_cw_dir(w), vx_hf_snapshots[i], err);
        rep->files += rc == 0;
    }
    plan_free(&p);
    if (rc) {
        vx_cw_abort(w);
        return -1;
    }
    return vx_cw_commit(w, err) ? -1 : 0;
}
