/*
 * segment_read.c — parsing and validating one segment's framing and tensor table from
 * memory: [u64 LE header length][header JSON, space padded to a 64-byte payload start]
 * [payload]. Every check is done in 64-bit arithmetic before a pointer is formed, so this
 * is also the fuzzers' entry point for hostile segment bytes.
 */
#include "vindex.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor table is metadata: even 100k-tensor MoE stacks stay far below this. */
#define HEADER_MAX (100ull << 20)

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t n)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

/* Validates one table entry into *t; name points into the header JSON. */
static int entry(const char *seg, const cJSON *e, size_t idx, uint64_t payload, vx_seg_tensor *t,
                 vx_err *err)
{
    const char *name = vx_json_str(e, "name");
    if (!cJSON_IsObject(e) || !name || !*name)
        return vx_errf(err, VX_EFORMAT, "segment '%s': tensor #%zu has no name", seg, idx);
    memset(t, 0, sizeof *t);
    t->name = name;
    const char *dt = vx_json_str(e, "dtype");
    vx_dtype d;
    if (!dt || vx_dtype_parse(dt, &d) < 0)
        return vx_errf(err, VX_EFORMAT, "segment '%s': tensor '%s' has unknown dtype '%s'", seg,
                       name, dt ? dt : "(none)");
    t->dtype = d;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    int nd = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
    if (nd < 1 || nd > VX_MAX_DIMS)
        return vx_errf(err, VX_EFORMAT, "segment '%s': tensor '%s' has %s dims (1-%d allowed)",
                       seg, name, nd < 0 ? "no shape array for its" : nd == 0 ? "0" : "more than 4",
                       VX_MAX_DIMS);
    t->ndim = nd;
    uint64_t rows = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t v;
        const cJSON *dim = cJSON_GetArrayItem(shape, i);
        if (vx_json_u64(dim, &v) < 0 || v == 0)
            return vx_errf(err, VX_EFORMAT, "segment '%s': tensor '%s' dim %d is not a positive integer",
                           seg, name, i);
        t->shape[i] = (int64_t)v;
        if (i < nd - 1 && __builtin_mul_overflow(rows, v, &rows))
            return vx_errf(err, VX_EFORMAT, "segment '%s': tensor '%s' shape overflows 64 bits", seg,
                           name);
    }
    char sh[128];
    shape_str(t->shape, nd, sh, sizeof sh);
    uint64_t ne0 = (uint64_t)t->shape[nd - 1], want;
    if (ne0 % vx_dtype_block_elems(d))
        return vx_errf(err, VX_EFORMAT,
                       "segment '%s': tensor '%s' innermost dim %llu is not a multiple of the %s block (%u)",
                       seg, name, (unsigned long long)ne0, dt, vx_dtype_block_elems(d));
    if (vx_dtype_nbytes(d, ne0, rows, &want) < 0)
        return vx_errf(err, VX_EFORMAT, "segment '%s': tensor '%s' shape %s overflows 64 bits", seg,
                       name, sh);
    if (vx_json_u64(cJSON_GetObjectItemCaseSensitive(e, "offset"), &t->offset) < 0)
        return vx_errf(err, VX_EFORMAT, "segment '%s': tensor '%s' offset is not an integer in 0..2^53",
                       seg, name);
    if (vx_json_u64(cJSON_GetObjectItemCaseSensitive(e, "length"), &t->length) < 0)
        return vx_errf(err, VX_EFORMAT, "segment '%s': tensor '%s' length is not an integer in 0..2^53",
                       seg, name);
    if (t->length != want)
        return vx_errf(err, VX_EFORMAT,
                       "segment '%s': tensor '%s' length %llu does not match %s x %s = %llu bytes",
                       seg, name, (unsigned long long)t->length, vx_dtype_name(d), sh,
                       (unsigned long long)want);
    if (t->offset % 64)
        return vx_errf(err, VX_EFORMAT, "segment '%s': tensor '%s' offset %llu is not 64-byte aligned",
                       seg, name, (unsigned long long)t->offset);
    uint64_t end;
    if (__builtin_add_overflow(t->offset, t->length, &end) || end > payload)
        return vx_errf(err, VX_EFORMAT,
                       "segment '%s': tensor '%s' extends past end of file (offset %llu + %llu > %llu)",
                       seg, name, (unsigned long long)t->offset, (unsigned long long)t->length,
                       (unsigned long long)payload);
    /* absent: an older writer recorded none; present, it must be one (a malformed one read
     * as absent would switch the first-touch check off) */
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(e, "sha256");
    if (sha && !(cJSON_IsString(sha) && vx_is_sha256(sha->valuestring)))
        return vx_errf(err, VX_EFORMAT, "segment '%s': tensor '%s' records a sha256 that is not 64 "
                       "lower-case hex digits", seg, name);
    t->sha256 = sha ? sha->valuestring : NULL;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const vx_seg_tensor *x = *(vx_seg_tensor *const *)a, *y = *(vx_seg_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(vx_seg_tensor *const *)a)->name, (*(vx_seg_tensor *const *)b)->name);
}

/* Overlap and duplicate-name checks over a sorted view of the table. */
static int cross_checks(const char *seg, vx_segment_hdr *h, vx_err *err)
{
    if (h->n < 2)
        return 0;
    vx_seg_tensor **v = malloc(h->n * sizeof *v);
    if (!v)
        return vx_errf(err, VX_ENOMEM, "segment '%s': out of memory", seg);
    for (size_t i = 0; i < h->n; i++)
        v[i] = &h->t[i];
    int rc = 0;
    qsort(v, h->n, sizeof *v, by_offset);
    for (size_t i = 0; i + 1 < h->n && rc == 0; i++) {
        if (v[i]->offset + v[i]->length > v[i + 1]->offset)
            rc = vx_errf(err, VX_EFORMAT,
                         "segment '%s': tensors '%s' and '%s' overlap (offset %llu + %llu > %llu)",
                         seg, v[i]->name, v[i + 1]->name, (unsigned long long)v[i]->offset,
                         (unsigned long long)v[i]->length, (unsigned long long)v[i + 1]->offset);
    }
    qsort(v, h->n, sizeof *v, by_name);
    for (size_t i = 0; i + 1 < h->n && rc == 0; i++) {
        if (strcmp(v[i]->name, v[i + 1]->name) == 0)
            rc = vx_errf(err, VX_EFORMAT, "segment '%s': tensor name '%s' appears twice", seg,
                         v[i]->name);
    }
    free(v);
    return rc;
}

int vx_segment_parse(const char *seg, const void *data, uint64_t size, vx_segment_hdr *h,
                     vx_err *err)
{
    memset(h, 0, sizeof *h);
    const unsigned char *p = data;
    if (size < 8)
        return vx_errf(err, VX_EFORMAT,
                       "segment '%s' is truncated: %llu bytes, too short for the 8-byte header length",
                       seg, (unsigned long long)size);
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = len << 8 | p[i];
    if (len > size - 8)
        return vx_errf(err, VX_EFORMAT,
                       "segment '%s': header length %llu extends past end of file (%llu bytes)", seg,
                       (unsigned long long)len, (unsigned long long)size);
    if (len > HEADER_MAX)
        return vx_errf(err, VX_EFORMAT, "segment '%s': header length %llu exceeds the %llu-byte limit",
                       seg, (unsigned long long)len, HEADER_MAX);
    if ((8 + len) % 64)
        return vx_errf(err, VX_EFORMAT,
                       "segment '%s': header length %llu does not start the payload on a 64-byte boundary",
                       seg, (unsigned long long)len);
    char label[300];
    snprintf(label, sizeof label, "segment '%s' header", seg);
    if (vx_json_parse(label, (const char *)p + 8, (size_t)len, &h->json, err) < 0)
        return -1;
    h->header_len = len;
    h->payload_off = 8 + len;
    h->payload_bytes = size - 8 - len;
    const char *schema = vx_json_str(h->json, "schema");
    if (!schema || strcmp(schema, "tensor-table") != 0) {
        vx_errf(err, VX_EFORMAT, "segment '%s': header schema '%s' is not 'tensor-table'", seg,
                schema ? schema : "(none)");
        goto fail;
    }
    /* a new tensor-table version would be a new reading of the bytes: refused by number */
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(h->json, "version");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != 1) {
        char v[32] = "(none)";
        if (cJSON_IsNumber(ver))
            snprintf(v, sizeof v, "%g", ver->valuedouble);
        vx_errf(err, VX_EUNSUPPORTED, "segment '%s': tensor-table version %s is not supported; "
                "this lql reads version 1", seg, v);
        goto fail;
    }
    h->object = vx_json_str(h->json, "object");
    h->representation = vx_json_str(h->json, "representation");
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(h->json, "tensors");
    if (!cJSON_IsArray(tensors)) {
        vx_errf(err, VX_EFORMAT, "segment '%s': header has no 'tensors' array", seg);
        goto fail;
    }
    int n = cJSON_GetArraySize(tensors);
    if (n > 0) {
        h->t = calloc((size_t)n, sizeof *h->t);
        if (!h->t) {
            vx_errf(err, VX_ENOMEM, "segment '%s': out of memory for %d tensors", seg, n);
            goto fail;
        }
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, tensors) {
        if (entry(seg, e, h->n, h->payload_bytes, &h->t[h->n], err) < 0)
            goto fail;
        h->n++;
    }
    if (cross_checks(seg, h, err) < 0)
        goto fail;
    return 0;
fail:
    vx_segment_hdr_free(h);
    return -1;
}

void vx_segment_hdr_free(vx_segment_hdr *h)
{
    cJSON_Delete(h->json);
    free(h->t);
    memset(h, 0, sizeof *h);
}
