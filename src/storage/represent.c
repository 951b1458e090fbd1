/*
 * represent.c — compiling a new representation of one logical object beside its original
 * (seed §9.1, §18.3: REPRESENT / vindex represent), and comparing representations value
 * by value. The new representation is read from the object's baseline through the mmap
 * and streamed one tensor (and at most ~1 Mi values) at a time into
 * segments/<object>.<dtype>[.NNN].bin; its fidelity is measured, not assumed: every value
 * is decoded back and compared with the source value. index.json and system_graph.json
 * are then rewritten atomically, index.json first, so a crash in between leaves a
 * container that still opens (an unlisted representation is ignored).
 */
#include "journal.h"
#include "vindex.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_VALUES (1u << 20)
#define MAX_SHARDS 1000
#define MAX_THREADS 32

int vx_decode_f32(vx_dtype dt, const void *src, float *dst, size_t n)
{
    if (dt == VX_F32 || dt == VX_F16 || dt == VX_BF16)
        return vx_row_to_f32(dt, src, dst, n);
    return vx_dequantize_row(dt, src, dst, n);
}

/* When a finite block's scale overflowed, the index of its value of largest magnitude,
 * which caused it; else be. An overflow shows as a value coming back non-finite (an f16
 * scale past 65504 makes the block inf/NaN) or as the largest one collapsing (Q6_K squares
 * values: past ~1e18 the block comes back 0). In range the largest value returns within a
 * quarter (MXFP4's saturation; Q4_K 8 %); below 1 a collapse is underflow, mere rounding. */
static size_t block_overflow(vx_dtype dt, const void *blk, const float *x, unsigned be)
{
    float back[256];                      /* the largest block, Q4_K's and Q6_K's */
    vx_dequantize_block(dt, blk, back);
    size_t worst = 0;
    int finite = 1;
    for (unsigned k = 0; k < be; k++) {
        finite = finite && isfinite(back[k]);
        if (fabsf(x[k]) > fabsf(x[worst]))
            worst = k;
    }
    float m = fabsf(x[worst]);
    return !finite || (m >= 1.f && fabsf(back[worst]) < m / 2) ? worst : be;
}

int vx_encode_f32(vx_dtype dt, const float *x, void *dst, size_t n, size_t *bad)
{
    uint16_t *h = dst;
    *bad = n;
    switch (dt) {
    case VX_F32:
        memcpy(dst, x, n * sizeof *x);
        return 0;
    case VX_F16:
        for (size_t i = 0; i < n; i++) {
            h[i] = vx_f32_to_f16(x[i]);
            if ((h[i] & 0x7fff) == 0x7c00 && isfinite(x[i]) && *bad == n)
                *bad = i;
        }
        return 0;
    case VX_BF16:
        for (size_t i = 0; i < n; i++)
            h[i] = vx_f32_to_bf16(x[i]);
        return 0;
    default:
        break;
    }
    unsigned be, bb;
    if (vx_quant_block(dt, &be, &bb) < 0 || n % be || vx_quantize_row(dt, x, dst, n) < 0)
        return -1;
    /* ggml's bytes, but a block holds neither a non-finite value (NaN comes back finite, inf
     * turns its block to NaN) nor a scale past its f16 / E8M0 range */
    for (size_t b = 0; b < n / be && *bad == n; b++) {
        const float *xb = x + b * be;
        for (unsigned i = 0; i < be && *bad == n; i++)
            if (!isfinite(xb[i]))
                *bad = b * be + i;
        size_t w = *bad == n ? block_overflow(dt, (const unsigned char *)dst + b * bb, xb, be) : be;
        if (w < be)
            *bad = b * be + w;
    }
    return 0;
}
static int is_target(vx_dtype dt)
{
    return dt == VX_F32 || dt == VX_F16 || dt == VX_BF16 || dt == VX_Q8_0 || dt == VX_Q4_0 ||
           dt == VX_Q4_K || dt == VX_Q6_K || dt == VX_MXFP4;
}

/* Same values, a NaN matching any NaN. */
static int same_values(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0 && !(isnan(a[i]) && isnan(b[i])))
            return 0;
    }
    return 1;
}

/* Inner dimension and row count; 0 inner for a tensor that cannot be re-encoded. */
static void rows_of(const vx_tensor *t, uint64_t *ne0, uint64_t *nrows)
{
    uint64_t n = vx_tensor_nelems(t);
    *ne0 = t->ndim >= 1 ? (uint64_t)t->shape[t->ndim - 1] : 0;
    *nrows = *ne0 ? n / *ne0 : 0;
}

/* Whether t is a MoE router: layers.{i}.ffn.router (CONTAINER.md's canonical operands) of
 * a layer its object's component runs as "moe" (the graph's layers[i].ffn). */
static int is_router(const vx_container *c, const cJSON *obj, const vx_tensor *t)
{
    unsigned layer;
    int end = 0;
    if (sscanf(t->name, "layers.%u.ffn.router%n", &layer, &end) != 1 || !end || t->name[end])
        return 0;
    const vx_graph_shape *s = vx_object_shape(c, obj);
    return layer < (unsigned)s->layers && s->layer[layer].channel == VX_CHANNEL_MOE;
}

/* The dtype a tensor is stored in under target dt: its source dtype for routers (a
 * router's logits pick the experts, and near-ties flip under quantisation: mixtral's
 * q8_0 KL rose to 2.07 nats where an expert changed; llama.cpp keeps ffn_gate_inp f32
 * whatever the target), integer tensors, and under a block codec 1-D tensors (norm
 * weights, biases: few bytes, and ggml keeps them float too) and inner dims the block
 * size does not divide. */
static vx_dtype out_dtype(const vx_tensor *t, vx_dtype dt, int router)
{
    uint64_t ne0, nrows;
    rows_of(t, &ne0, &nrows);
    int block = vx_dtype_block_elems(dt) > 1;
    if (router || (block && t->ndim < 2) || ne0 == 0 || ne0 % vx_dtype_block_elems(dt) != 0 ||
        (t->dtype != VX_F32 && t->dtype != VX_F16 && t->dtype != VX_BF16 &&
         vx_quant_block(t->dtype, &(unsigned){0}, &(unsigned){0}) < 0))
        return t->dtype;
    return dt;
}

typedef struct job {
    const char *dir, *object;
    vx_dtype dt;
    const vx_tensor **t;       /* the baseline's tensors of the object, table order */
    vx_segw_tensor *tw;        /* their output table */
    uint64_t *len;             /* output bytes per tensor */
    size_t n;
    char id[192];
    char (*rel)[256];          /* segment paths written */
    int nseg, published;       /* written (as `<rel>.tmp.<pid>`), renamed to rel */
    float *x, *back;           /* chunk buffers */
    unsigned char *buf;
    vx_sha256_ctx pay;
    int exact;
    vx_represent_info *info;
    vx_err *err;
} job;

/* Converting rows [r0, r1) of a chunk: decode to f32, encode to the output dtype. */
typedef struct part {
    vx_dtype sd, od;
    const unsigned char *src;
    float *x;
    unsigned char *dst;
    uint64_t ne0, r0, r1;
    uint64_t bad;              /* the chunk's first value od cannot hold, else UINT64_MAX */
    int rc;
} part;

static void *convert(void *arg)
{
    part *p = arg;
    uint64_t sb = 0, ob = 0, n = (p->r1 - p->r0) * p->ne0;
    size_t bad = 0;
    p->rc = vx_dtype_nbytes(p->sd, p->ne0, p->r0, &sb) < 0 || vx_dtype_nbytes(p->od, p->ne0, p->r0, &ob) < 0 ||
            vx_decode_f32(p->sd, p->src + sb, p->x + p->r0 * p->ne0, (size_t)n) < 0 ||
            vx_encode_f32(p->od, p->x + p->r0 * p->ne0, p->dst + ob, (size_t)n, &bad) < 0 ? -1 : 0;
    p->bad = p->rc == 0 && bad < n ? p->r0 * p->ne0 + bad : UINT64_MAX;
    return NULL;
}

/* Threads for converting: LQL_THREADS (as the engine reads it), else the online cores. */
static int threads(void)
{
    const char *z = getenv("LQL_THREADS");
    long n = z && *z ? strtol(z, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* Converts k rows at src into j->x (f32) and j->buf (od), split by rows over threads
 * (the quantisers are the cost: Q4_K's scale search runs ~10 M values/s per core).
 * *bad: the chunk's first value od cannot hold (vx_encode_f32), else UINT64_MAX. */
static int convert_rows(job *j, const vx_tensor *t, vx_dtype od, const unsigned char *src, uint64_t ne0,
                        uint64_t k, uint64_t *bad)
{
    int nt = threads();
    if ((uint64_t)nt > k)
        nt = (int)k;
    part p[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int started[MAX_THREADS] = {0}, rc = 0;
    *bad = UINT64_MAX;
    for (int i = 0; i < nt; i++) {
        p[i] = (part){t->dtype, od, src, j->x, j->buf, ne0, k * (uint64_t)i / (uint64_t)nt,
                      k * (uint64_t)(i + 1) / (uint64_t)nt, UINT64_MAX, 0};
        started[i] = i > 0 && pthread_create(&th[i], NULL, convert, &p[i]) == 0;
        if (i > 0 && !started[i])
            convert(&p[i]);          /* no thread: do it here */
    }
    convert(&p[0]);
    for (int i = 0; i < nt; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        rc |= p[i].rc;
        if (*bad == UINT64_MAX)
            *bad = p[i].bad;           /* parts are in row order: the first one found */
    }
    return rc;
}

/* The refusal for value v at (row, col) of t, which od cannot hold (vx_encode_f32). */
static int unrepresentable(job *j, const vx_tensor *t, vx_dtype od, uint64_t row, uint64_t col, float v)
{
    const char *dn = vx_dtype_name(od);
    unsigned be = vx_dtype_block_elems(od);
    if (be == 1)
        return vx_errf(j->err, VX_EFORMAT, "represent: tensor '%s' row %llu column %llu holds %g, "
                       "beyond %s's range: as %s it would be infinity", t->name,
                       (unsigned long long)row, (unsigned long long)col, (double)v, dn, dn);
    if (!isfinite(v))
        return vx_errf(j->err, VX_EFORMAT, "represent: tensor '%s' row %llu block %llu holds %g; "
                       "a %s block cannot hold a non-finite value", t->name, (unsigned long long)row,
                       (unsigned long long)(col / be), (double)v, dn);
    return vx_errf(j->err, VX_EFORMAT, "represent: tensor '%s' row %llu block %llu holds %g, too "
                   "large for a %s block: its scale would overflow and the block decode to "
                   "inf, NaN or 0", t->name, (unsigned long long)row,
                   (unsigned long long)(col / be), (double)v, dn);
}

/* Stream tensor i into w: decode a chunk of rows, encode, check exactness, write. */
static int write_tensor(job *j, vx_segw *w, size_t i)
{
    const vx_tensor *t = j->t[i];
    vx_dtype od = j->tw[i].dtype;
    if (od == t->dtype) {                   /* kept, or already in the target: same bytes */
        vx_sha256_update(&j->pay, t->data, (size_t)t->nbytes);
        return vx_segw_write(w, t->data, (size_t)t->nbytes, j->err);
    }
    uint64_t ne0, nrows, sb, ob;
    rows_of(t, &ne0, &nrows);
    uint64_t per = ne0 >= CHUNK_VALUES ? 1 : CHUNK_VALUES / ne0;
    const unsigned char *src = t->data;
    for (uint64_t r = 0; r < nrows; r += per) {
        if (vx_cancel_flag)
            return vx_errf(j->err, VX_ECANCEL, "represent: cancelled");
        uint64_t k = nrows - r < per ? nrows - r : per, n = k * ne0;
        if (vx_dtype_nbytes(t->dtype, ne0, k, &sb) < 0 || vx_dtype_nbytes(od, ne0, k, &ob) < 0)
            return vx_errf(j->err, VX_EFORMAT, "represent: tensor '%s' has a row the codec cannot split", t->name);
        uint64_t bad;
        if (convert_rows(j, t, od, src, ne0, k, &bad) < 0)
            return vx_errf(j->err, VX_EUNSUPPORTED, "represent: cannot convert tensor '%s' from %s to %s",
                           t->name, vx_dtype_name(t->dtype), vx_dtype_name(od));
        if (bad != UINT64_MAX)
            return unrepresentable(j, t, od, r + bad / ne0, bad % ne0, j->x[bad]);
        if (j->exact) {
            vx_decode_f32(od, j->buf, j->back, (size_t)n);
            j->exact = same_values(j->x, j->back, (size_t)n);
        }
        vx_sha256_update(&j->pay, j->buf, (size_t)ob);
        if (vx_segw_write(w, j->buf, (size_t)ob, j->err) < 0)
            return -1;
        src += sb;
    }
    return 0;
}

/* The name a segment is written under until REPRESENT publishes it with the index. */
static void seg_tmp(const char *path, char tmp[PATH_MAX + 32])
{
    snprintf(tmp, PATH_MAX + 32, "%s.tmp.%ld", path, (long)getpid());
}

/* Writes the shards (vx_segw_fit plans each under the cap); fills j->rel / j->nseg and the
 * index records (segments object, the representation's list). */
static int write_segments(job *j, cJSON *segs_rec, cJSON *rep_segs)
{
    uint64_t cap;
    if (vx_shard_cap(&cap, j->err) < 0)
        return -1;
    for (size_t i = 0; i < j->n;) {
        size_t span = 0;
        if (vx_segw_fit(&j->tw[i], j->n - i, cap, "represent", j->object, &span, j->err) < 0)
            return -1;
        size_t k = i + span;
        if (j->nseg == MAX_SHARDS)
            return vx_errf(j->err, VX_EARG, "represent: more than %d segment files", MAX_SHARDS);
        char *rel = j->rel[j->nseg], path[PATH_MAX];
        vx_shard_name(rel, sizeof j->rel[0], j->id, (size_t)j->nseg);
        if (vx_resolve_in(j->dir, rel, path, sizeof path, j->err) < 0)
            return -1;
        if (access(path, F_OK) == 0)
            return vx_errf(j->err, VX_EARG, "represent: segment '%s' already exists (not listed by index.json; remove it first)",
                           rel);
        /* written under a temporary name, published with the index: a process killed
         * mid-write leaves a `.tmp.<pid>` file no retry stumbles on */
        char tmp[PATH_MAX + 32];
        seg_tmp(path, tmp);
        unlink(tmp);               /* left by a killed process that had this pid */
        vx_segw *w = NULL;
        if (vx_segw_open(&w, tmp, j->object, j->id, &j->tw[i], k - i, j->err) < 0)
            return -1;
        j->nseg++;                 /* from here on the file is ours to remove on failure */
        for (size_t m = i; m < k; m++) {
            if (write_tensor(j, w, m) < 0) {
                vx_segw_abort(w);
                return -1;
            }
        }
        char sha[65];
        uint64_t bytes = 0;
        if (vx_segw_close(w, sha, &bytes, j->err) < 0)
            return -1;
        vx_segment_record(segs_rec, rel, "tensor-table", 1, bytes, sha);
        cJSON_AddItemToArray(rep_segs, cJSON_CreateString(rel));
        i = k;
    }
    return 0;
}

/* Collects the object's baseline tensors and plans their output dtypes. */
static int plan(job *j, const vx_container *c)
{
    const cJSON *obj = vx_graph_object(vx_graph_json(c), j->object);
    size_t n = 0;
    for (size_t i = 0; i < vx_tensor_count(c); i++)
        n += strcmp(vx_tensor_at(c, i)->object, j->object) == 0;
    j->t = calloc(n ? n : 1, sizeof *j->t);
    j->tw = calloc(n ? n : 1, sizeof *j->tw);
    j->len = calloc(n ? n : 1, sizeof *j->len);
    j->rel = calloc(MAX_SHARDS, sizeof *j->rel);
    j->x = malloc(CHUNK_VALUES * sizeof *j->x);
    j->back = malloc(CHUNK_VALUES * sizeof *j->back);
    j->buf = malloc(CHUNK_VALUES * sizeof(float));
    if (!j->t || !j->tw || !j->len || !j->rel || !j->x || !j->back || !j->buf)
        return vx_errf(j->err, VX_ENOMEM, "represent: out of memory planning '%s'", j->object);
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if (strcmp(t->object, j->object) != 0)
            continue;
        uint64_t ne0, nrows;
        rows_of(t, &ne0, &nrows);
        vx_segw_tensor *w = &j->tw[j->n];
        w->name = t->name;
        w->dtype = out_dtype(t, j->dt, is_router(c, obj, t));
        w->ndim = t->ndim;
        memcpy(w->shape, t->shape, sizeof w->shape);
        if (w->dtype == t->dtype)
            j->len[j->n] = t->nbytes;
        else if (vx_dtype_nbytes(w->dtype, ne0, nrows, &j->len[j->n]) < 0)
            return vx_errf(j->err, VX_EFORMAT, "represent: tensor '%s' is too large", t->name);
        if (ne0 > CHUNK_VALUES && w->dtype != t->dtype)
            return vx_errf(j->err, VX_EUNSUPPORTED, "represent: tensor '%s' has rows of %llu values (at most %u per row)",
                           t->name, (unsigned long long)ne0, CHUNK_VALUES);
        j->t[j->n++] = t;
    }
    if (j->n == 0)
        return vx_errf(j->err, VX_EMISSING, "represent: object '%s' has no tensors", j->object);
    /* a representation named for a codec that holds none of its data would only mislead */
    size_t took = 0;
    for (size_t i = 0; i < j->n; i++)
        took += j->tw[i].dtype == j->dt;
    if (!took) {
        /* the reason is a matrix's: 1-D tensors (norms, biases) always keep their dtype */
        const vx_tensor *m = NULL;
        for (size_t i = 0; i < j->n && !m; i++)
            if (j->t[i]->ndim >= 2) m = j->t[i];
        if (!m)
            return vx_errf(j->err, VX_EUNSUPPORTED, "represent: '%s' holds only 1-D tensors "
                           "(norms, biases), which keep their source dtype: nothing to "
                           "represent as %s", j->object, vx_dtype_name(j->dt));
        uint64_t ne0, nrows;
        rows_of(m, &ne0, &nrows);
        const int be = vx_dtype_block_elems(j->dt);
        if (ne0 % (uint64_t)be != 0)
            return vx_errf(j->err, VX_EUNSUPPORTED, "represent: no tensor of '%s' can be stored "
                           "as %s ('%s' has rows of %llu values, which blocks of %d do not "
                           "divide): nothing to represent", j->object, vx_dtype_name(j->dt),
                           m->name, (unsigned long long)ne0, be);
        return vx_errf(j->err, VX_EUNSUPPORTED, "represent: no tensor of '%s' can be stored as "
                       "%s ('%s' is stored as %s, which is not converted): nothing to "
                       "represent", j->object, vx_dtype_name(j->dt), m->name,
                       vx_dtype_name(m->dtype));
    }
    return 0;
}

/* The index and graph with the new representation recorded (vx_json_replace_n). */
static int record(job *j, const vx_container *c, cJSON *segs_rec, cJSON *rep_segs, const char *from)
{
    cJSON *index = cJSON_Duplicate(vx_index_json(c), 1), *graph = cJSON_Duplicate(vx_graph_json(c), 1);
    int rc = -1;
    if (!index || !graph) {
        vx_errf(j->err, VX_ENOMEM, "represent: out of memory");
        goto out;
    }
    cJSON *reps = cJSON_GetObjectItemCaseSensitive(index, "representations");
    cJSON *segs = cJSON_GetObjectItemCaseSensitive(index, "segments");
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(reps, from);
    if (!cJSON_IsObject(segs)) {
        vx_errf(j->err, VX_EFORMAT, "index.json has no 'segments' object");
        goto out;
    }
    const char *base_fid = vx_json_str(src, "fidelity");
    const char *own = j->exact ? "source-equivalent" : "numerically-approximate";
    const char *fid = vx_fidelity_rank(base_fid) > vx_fidelity_rank(own) && base_fid ? base_fid : own;
    char sha[65];
    vx_sha256_final(&j->pay, sha);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "object", j->object);
    cJSON_AddStringToObject(r, "encoding", "tensor-table");
    cJSON_AddStringToObject(r, "dtype", vx_dtype_name(j->dt));
    cJSON_AddStringToObject(r, "fidelity", fid);
    cJSON_AddItemToObject(r, "segments", cJSON_Duplicate(rep_segs, 1));
    /* The source hash covers the operands in table order. The baseline's covers the same
     * table, except on a bank container: there it holds only the operands left outside the
     * LYRW files, while this representation holds every one. */
    char shex[65];
    const char *ssha = vx_json_str(src, "source_payload_sha256");
    if (cJSON_GetObjectItemCaseSensitive(src, "bank_storage"))
        ssha = vx_source_hash(c, j->object, base_fid, j->t, j->n, shex) == 0 ? shex : NULL;
    if (ssha)
        cJSON_AddStringToObject(r, "source_payload_sha256", ssha);
    cJSON_AddStringToObject(r, "payload_sha256", sha);
    cJSON_AddStringToObject(r, "derived_from", from);
    cJSON *kept = cJSON_AddObjectToObject(r, "kept_source_dtype");
    uint64_t bytes = 0, sbytes = 0, weights = 0;
    size_t nkept = 0;
    for (size_t i = 0; i < j->n; i++) {
        bytes += j->len[i];
        sbytes += j->t[i]->nbytes;
        weights += vx_tensor_nelems(j->t[i]);
        if (j->tw[i].dtype != j->dt) {
            cJSON_AddStringToObject(kept, j->t[i]->name, vx_dtype_name(j->tw[i].dtype));
            nkept++;
        }
    }
    cJSON_AddNumberToObject(r, "payload_bytes", (double)bytes);
    cJSON_AddItemToObject(reps, j->id, r);
    cJSON *e;
    cJSON_ArrayForEach(e, segs_rec)
        cJSON_AddItemToObject(segs, e->string, cJSON_Duplicate(e, 1));
    cJSON *obj = vx_graph_object(graph, j->object);
    cJSON *list = cJSON_GetObjectItemCaseSensitive(obj, "representations");
    if (!cJSON_IsArray(list)) {
        vx_errf(j->err, VX_EFORMAT, "system_graph.json: object '%s' has no representations list", j->object);
        goto out;
    }
    cJSON_AddItemToArray(list, cJSON_CreateString(j->id));
    /* both written before either replaces its file: a full disk leaves the container as it
     * was (the index renamed first, so a crash between the renames is the interrupted
     * REPRESENT the next run names) */
    const char *rel[2] = {"index.json", vx_json_str(index, "system_graph")};
    const cJSON *json[2] = {index, graph};
    for (; j->published < j->nseg; j->published++) {
        char path[PATH_MAX], tmp[PATH_MAX + 32];
        if (vx_resolve_in(j->dir, j->rel[j->published], path, sizeof path, j->err) < 0)
            goto out;
        seg_tmp(path, tmp);
        if (vx_publish_new(tmp, path, "represent", j->err) < 0)
            goto out;
    }
    if (vx_json_replace_n(j->dir, rel, json, 2, j->err) < 0)
        goto out;
    if (j->info) {
        vx_represent_info *in = j->info;
        snprintf(in->id, sizeof in->id, "%s", j->id);
        snprintf(in->fidelity, sizeof in->fidelity, "%s", fid);
        snprintf(in->from, sizeof in->from, "%s", from);
        memcpy(in->payload_sha256, sha, sizeof sha);
        in->tensors = j->n;
        in->kept = nkept;
        in->bytes = bytes;
        in->source_bytes = sbytes;
        in->weights = weights;
        in->segments = j->nseg;
    }
    rc = 0;
out:
    cJSON_Delete(index);
    cJSON_Delete(graph);
    return rc;
}

int vx_represent(const char *dir, const char *object, vx_dtype dt, vx_represent_info *info,
                 vx_err *err)
{
    if (info)
        memset(info, 0, sizeof *info);
    if (!is_target(dt)) {
        const char *name = vx_dtype_name(dt) ? vx_dtype_name(dt) : vx_quant_name(dt);
        return vx_errf(err, VX_EUNSUPPORTED, "represent: dtype '%s' has no encoder (targets: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, mxfp4)",
                       name ? name : "?");
    }
    vx_container *c = NULL;
    if (vx_journal_guard(dir, "represent", err) < 0 || vx_open(dir, &c, err) < 0)
        return -1;
    job j = {.dir = dir, .object = object, .dt = dt, .exact = 1, .info = info, .err = err};
    int rc = -1;
    cJSON *segs_rec = cJSON_CreateObject(), *rep_segs = cJSON_CreateArray();
    const char *from = vx_bound_representation(c, object);
    if (!vx_graph_object(vx_graph_json(c), object)) {
        char names[384] = "";
        size_t at = 0;
        const cJSON *o;
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(vx_graph_json(c), "objects")) {
            const char *id = vx_json_str(o, "id");
            if (id && at < sizeof names)
                at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", at ? ", " : "", id);
        }
        vx_errf(err, VX_EMISSING, "represent: no object '%s' in system_graph.json (objects: %s)", object, names);
        goto out;
    }
    if ((size_t)snprintf(j.id, sizeof j.id, "%s.%s", object, vx_dtype_name(dt)) >= sizeof j.id) {
        vx_errf(err, VX_EARG, "represent: object id '%s' is too long", object);
        goto out;
    }
    if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "representations"), j.id)) {
        if (vx_select_check(vx_graph_json(c), object, j.id, NULL, NULL) < 0)
            vx_errf(err, VX_EARG, "represent: representation '%s' is in index.json but not listed by system_graph.json (an interrupted REPRESENT: remove its index.json entries and segments)",
                    j.id);
        else
            vx_errf(err, VX_EARG, "represent: representation '%s' already exists", j.id);
        goto out;
    }
    if (!from) {
        vx_errf(err, VX_EMISSING, "represent: object '%s' has no representation to read from", object);
        goto out;
    }
    if (!segs_rec || !rep_segs || plan(&j, c) < 0 || vx_sha256_init(&j.pay, err) < 0)
        goto out;
    char segdir[PATH_MAX];
    if (vx_resolve_in(dir, "segments", segdir, sizeof segdir, err) < 0)
        goto out;
    if (write_segments(&j, segs_rec, rep_segs) < 0 || record(&j, c, segs_rec, rep_segs, from) < 0) {
        for (int i = 0; i < j.nseg; i++) {
            char path[PATH_MAX], tmp[PATH_MAX + 32];
            if (vx_resolve_in(dir, j.rel[i], path, sizeof path, NULL) < 0)
                continue;
            seg_tmp(path, tmp);
            unlink(tmp);
            if (i < j.published)
                unlink(path);
        }
        goto out;
    }
    rc = 0;
out:
    vx_sha256_free(&j.pay);      /* a no-op once record() finished it, or before init */
    cJSON_Delete(segs_rec);
    cJSON_Delete(rep_segs);
    free(j.t);
    free(j.tw);
    free(j.len);
    free(j.rel);
    free(j.x);
    free(j.back);
    free(j.buf);
    vx_close(c);
    return rc;
}

int vx_tensor_diff(const vx_tensor *a, const vx_tensor *b, vx_diff_stat *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) != 0)
        return vx_errf(err, VX_EARG, "diff: tensor '%s' has different shapes in the two representations", a->name);
    uint64_t ne0, nrows;
    rows_of(a, &ne0, &nrows);
    if (ne0 == 0)
        return 0;
    uint64_t per = ne0 >= CHUNK_VALUES ? 1 : CHUNK_VALUES / ne0;
    if (ne0 > CHUNK_VALUES)
        return vx_errf(err, VX_EUNSUPPORTED, "diff: tensor '%s' has rows of %llu values (at most %u per row)",
                       a->name, (unsigned long long)ne0, CHUNK_VALUES);
    float *x = malloc(CHUNK_VALUES * sizeof *x), *y = malloc(CHUNK_VALUES * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return vx_errf(err, VX_ENOMEM, "diff: out of memory");
    }
    double sd = 0, sa = 0;
    const unsigned char *pa = a->data, *pb = b->data;
    int rc = 0;
    for (uint64_t r = 0; r < nrows && rc == 0; r += per) {
        uint64_t k = nrows - r < per ? nrows - r : per, n = k * ne0, ba, bb;
        if (vx_cancel_flag) {
            rc = vx_errf(err, VX_ECANCEL, "diff: cancelled");
            break;
        }
        if (vx_dtype_nbytes(a->dtype, ne0, k, &ba) < 0 || vx_dtype_nbytes(b->dtype, ne0, k, &bb) < 0 ||
            vx_decode_f32(a->dtype, pa, x, (size_t)n) < 0 || vx_decode_f32(b->dtype, pb, y, (size_t)n) < 0) {
            rc = vx_errf(err, VX_EUNSUPPORTED, "diff: tensor '%s' cannot be decoded (%s, %s)", a->name,
                         vx_dtype_name(a->dtype), vx_dtype_name(b->dtype));
            break;
        }
        for (uint64_t i = 0; i < n; i++) {
            double d = (double)x[i] - (double)y[i];
            if (d != 0 || (isnan(x[i]) != isnan(y[i])))
                out->differ++;
            if (isnan(d))
                continue;
            double ad = fabs(d);
            out->max_abs = ad > out->max_abs ? ad : out->max_abs;
            sd += d * d;
            sa += (double)x[i] * (double)x[i];
        }
        out->n += n;
        pa += ba;
        pb += bb;
    }
    free(x);
    free(y);
    out->ss_diff = sd;
    out->ss_ref = sa;
    out->rms = out->n ? sqrt(sd / (double)out->n) : 0;
    out->rel = sa > 0 ? sqrt(sd / sa) : (sd > 0 ? INFINITY : 0);
    return rc;
}
