/*
 * compile.c — COMPILE (compile.h): a derived container from a base and an
 * overlay. The order of materialisation mirrors the executor's overlay: replaced rows and
 * columns first, then the low-rank deltas, then tombstones last (so a tombstoned feature
 * contributes nothing even where a low-rank delta reads it).
 */
#include "compile.h"
#include "browse.h"
#include "lyrw.h"
#include "vx_int.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { ROLE_GATE = 0, ROLE_UP = 1, ROLE_DOWN = 2, ROLE_NONE = -1 };

/* What an FFN operand of the decoder stack holds of the overlay's feature space: a dense
 * layer's matrix (expert -1, features [0, n)) or one routed expert's (features
 * [f0, f0 + n) of the layer's expert-major features, n = expert_intermediate). */
typedef struct site {
    int role, layer, expert;
    int64_t f0, n;
    int gated;                /* the FFN has a gate_proj (a tombstone zeroes its row) */
} site;

/* The site of a decoder-stack operand (shape [rows, cols]); role ROLE_NONE when it is not
 * a dense or routed-expert FFN matrix. */
static site site_of(const vx_container *c, const char *object, const char *name,
                    const int64_t *shape, int ndim)
{
    static const char *const roles[] = {"gate_proj", "up_proj", "down_proj"};
    site st = {ROLE_NONE, -1, -1, 0, 0, 0};
    char rest[32];
    int n = 0;
    if (strcmp(object, "target.decoder_stack") != 0 || ndim != 2)
        return st;
    if (!(sscanf(name, "layers.%d.ffn.experts.%d.%31s%n", &st.layer, &st.expert, rest, &n) == 3 &&
          name[n] == '\0')) {
        st.expert = -1;
        n = 0;
        if (sscanf(name, "layers.%d.ffn.%31s%n", &st.layer, rest, &n) != 2 || name[n] != '\0')
            return st;
    }
    for (int r = 0; r < 3; r++)
        if (strcmp(rest, roles[r]) == 0)
            st.role = r;
    if (st.role == ROLE_NONE || st.expert < -1)
        return (site){ROLE_NONE, -1, -1, 0, 0, 0};
    st.n = st.role == ROLE_DOWN ? shape[1] : shape[0];
    st.f0 = st.expert >= 0 ? (int64_t)st.expert * st.n : 0;
    st.gated = st.expert >= 0
        ? vx_findf(c, object, "layers.%d.ffn.experts.%d.gate_proj", st.layer, st.expert) != NULL
        : vx_findf(c, object, "layers.%d.ffn.gate_proj", st.layer) != NULL;
    return st;
}

/* A low-rank delta's v rows for a site, or NULL when it does not reach it: a delta
 * addressed to an expert reaches that expert's matrix; a layer-wide one every matrix of
 * the layer (its v rows f0.. on an expert's). */
static const float *lowrank_v(const eng_lowrank *lr, const site *st)
{
    if (lr->layer != st->layer || lr->rank <= 0)
        return NULL;
    if (lr->expert == st->expert)
        return lr->v;
    if (lr->expert < 0 && st->expert >= 0)
        return lr->v + (size_t)st->f0 * (size_t)lr->rank;
    return NULL;
}

/* The site-local index of an edited feature, or -1 when the edit is elsewhere. */
static int64_t local(const eng_feature_edit *e, const site *st)
{
    if (e->layer != st->layer || e->feature < st->f0 || e->feature >= st->f0 + st->n)
        return -1;
    return e->feature - st->f0;
}

/* Does the overlay change the site's matrix? */
static int edited(const eng_overlay *ov, const site *st)
{
    if (st->role == ROLE_NONE)
        return 0;
    const int role = st->role;
    for (size_t i = 0; i < ov->n_edits; i++) {
        const eng_feature_edit *e = &ov->edits[i];
        if (local(e, st) < 0)
            continue;
        if ((role == ROLE_GATE && (e->gate || (e->tombstone && st->gated))) ||
            (role == ROLE_UP && e->up) || (role == ROLE_DOWN && (e->down || e->tombstone)))
            return 1;
    }
    for (size_t i = 0; role == ROLE_DOWN && i < ov->n_lowrank; i++)
        if (lowrank_v(&ov->lowrank[i], st))
            return 1;
    return 0;
}

/* Apply the overlay to one FFN matrix held as f32 (rows × cols, PyTorch order). */
static void apply(const eng_overlay *ov, const site *st, float *w, int64_t rows, int64_t cols)
{
    const int role = st->role;
    for (size_t i = 0; i < ov->n_edits; i++) {
        const eng_feature_edit *e = &ov->edits[i];
        int64_t f = local(e, st);
        if (f < 0 || e->tombstone)
            continue;
        if (role == ROLE_DOWN && e->down && f < cols)
            for (int64_t r = 0; r < rows; r++)
                w[r * cols + f] = e->down[r];
        const float *row = role == ROLE_GATE ? e->gate : role == ROLE_UP ? e->up : NULL;
        if (row && f < rows)
            memcpy(w + f * cols, row, (size_t)cols * sizeof *w);
    }
    for (size_t i = 0; role == ROLE_DOWN && i < ov->n_lowrank; i++) {
        const eng_lowrank *lr = &ov->lowrank[i];
        const float *v = lowrank_v(lr, st);
        if (v)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, lr->rank,
                        1.0f, lr->u, lr->rank, v, lr->rank, 1.0f, w, (int)cols);
    }
    for (size_t i = 0; i < ov->n_edits; i++) {
        const eng_feature_edit *e = &ov->edits[i];
        int64_t f = local(e, st);
        if (f < 0 || !e->tombstone)
            continue;
        if (role == ROLE_DOWN && f < cols)
            for (int64_t r = 0; r < rows; r++)
                w[r * cols + f] = 0;
        if (role == ROLE_GATE && f < rows)
            memset(w + f * cols, 0, (size_t)cols * sizeof *w);
    }
}

/* f32 back to the stored dtype (f32, f16 or bf16). */
/* Stored values to f32: n values of dtype dt at src (length bytes); a block-quantised
 * dtype is decoded row by row, rows of cols values. -1 when dt has no decoder. */
static int decode(vx_dtype dt, const unsigned char *src, uint64_t length, uint64_t n,
                  int64_t cols, float *f)
{
    unsigned be, bb;
    if (vx_quant_block(dt, &be, &bb) != 0)
        return vx_row_to_f32(dt, src, f, (size_t)n) < 0 ? -1 : 0;
    const int64_t rows = (int64_t)(n / (uint64_t)cols);
    const size_t row_bytes = (size_t)length / (size_t)rows;
    for (int64_t r = 0; r < rows; r++)
        if (vx_dequantize_row(dt, src + (size_t)r * row_bytes, f + (size_t)r * cols,
                              (size_t)cols) < 0)
            return -1;
    return 0;
}

/* ---------------------------------------------------------------- files */

typedef struct walk_ctx {
    vx_cw *w;
    const char *const *skip;   /* container-relative paths not to carry over */
    size_t n_skip;
    size_t linked;
    vx_err *err;
} walk_ctx;

/* Carry a regular file over unless it is skipped. */
static int carry(void *ctx, const char *rel, const char *src, const struct stat *sb)
{
    walk_ctx *w = ctx;
    for (size_t i = 0; i < w->n_skip; i++)
        if (strcmp(w->skip[i], rel) == 0)
            return 0;
    (void)sb;   /* a regular file: vx_tree_files refuses anything else */
    (void)src;
    w->linked++;
    return vx_cw_carry(w->w, rel, w->err);
}

int brw_payload_sha256(const char *dir, const cJSON *rep, char hex[65], vx_err *err)
{
    vx_sha256_ctx ctx;
    if (vx_sha256_init(&ctx, err) < 0)
        return -1;
    const cJSON *sp;
    cJSON_ArrayForEach(sp, cJSON_GetObjectItemCaseSensitive(rep, "segments")) {
        char path[4200];
        if (!cJSON_IsString(sp))
            continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, sp->valuestring) >= sizeof path) {
            vx_sha256_free(&ctx);
            return vx_errf(err, VX_EARG, "path too long under '%s'", dir);
        }
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size <= 0) {
            if (fd >= 0)
                close(fd);
            vx_sha256_free(&ctx);
            return vx_errf(err, VX_EIO, "cannot read '%s'", path);
        }
        void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        vx_segment_hdr h;
        if (map == MAP_FAILED ||
            vx_segment_parse(sp->valuestring, map, (uint64_t)sb.st_size, &h, err) < 0) {
            if (map != MAP_FAILED)
                munmap(map, (size_t)sb.st_size);
            vx_sha256_free(&ctx);
            return map == MAP_FAILED ? vx_errf(err, VX_EIO, "cannot map '%s'", path) : -1;
        }
        const unsigned char *payload = (const unsigned char *)map + h.payload_off;
        for (size_t i = 0; i < h.n; i++)
            vx_sha256_update(&ctx, payload + h.t[i].offset, (size_t)h.t[i].length);
        vx_segment_hdr_free(&h);
        munmap(map, (size_t)sb.st_size);
    }
    vx_sha256_final(&ctx, hex);
    return 0;
}

/* obj[key] = item, added when the base's index lacks the key (the item is never lost). */
static void put_item(cJSON *obj, const char *key, cJSON *item)
{
    if (cJSON_HasObjectItem(obj, key))
        cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item);
    else
        cJSON_AddItemToObject(obj, key, item);
}

/* ---------------------------------------------------------------- segments */

/* The recomputed down-meta, then what the overlay says of its features, as browse reads
 * it through the overlay (brw_feature_meta): a metadata override (UPDATE, an insert's
 * down_meta, a moved column's recomputation) sets the top token and c_score — a changed top
 * token leaves no alternatives, written as k copies of the top pair, which every reader
 * skips — and a tombstone has no output tokens (an all-zero record). DMET layout: four
 * u32 header words — magic, version, layers, top_k — then per layer a u32 count and count
 * records of 8 + 8·top_k bytes. */
static int write_meta(const char *path, const eng_overlay *ov, vx_err *err)
{
    FILE *f = fopen(path, "r+b");
    if (!f)
        return vx_errf(err, VX_EIO, "compile: cannot open '%s': %s", path, strerror(errno));
    uint32_t hdr[4];
    int rc = 0;
    if (fread(hdr, 4, 4, f) != 4 || hdr[3] > BRW_DMET_K_MAX) {
        fclose(f);
        return vx_errf(err, VX_EFORMAT, "compile: '%s' is not a down-meta file", path);
    }
    const long rec = 8 + 8 * (long)hdr[3];
    const size_t ne = ov->n_edits, n = ov->n_meta + ne;
    for (size_t i = 0; i < n && rc == 0; i++) {
        /* metadata first, tombstones last: a tombstone wins, as in brw_feature_meta */
        const eng_meta_edit *me = i < ov->n_meta ? &ov->meta[i] : NULL;
        const eng_feature_edit *te = me ? NULL : &ov->edits[i - ov->n_meta];
        int layer = me ? me->layer : te->layer;
        int64_t feature = me ? me->feature : te->feature;
        if ((te && !te->tombstone) || layer < 0 || (uint32_t)layer >= hdr[2])
            continue;
        long at = 16;
        uint32_t count = 0;
        for (int l = 0; l <= layer && rc == 0; l++) {
            if (fseek(f, at, SEEK_SET) != 0 || fread(&count, 4, 1, f) != 1)
                rc = vx_errf(err, VX_EFORMAT, "compile: '%s' is truncated", path);
            else if (l < layer)
                at += 4 + (long)count * rec;
        }
        if (rc || feature < 0 || (uint64_t)feature >= count)
            continue;
        unsigned char r[8 + 8 * BRW_DMET_K_MAX];
        memset(r, 0, sizeof r);
        at += 4 + (long)feature * rec;
        if (me && (fseek(f, at, SEEK_SET) != 0 || fread(r, 1, (size_t)rec, f) != (size_t)rec)) {
            rc = vx_errf(err, VX_EFORMAT, "compile: '%s' is truncated", path);
            break;
        }
        int none = 1;   /* an all-zero record: no down-meta, which a score alone leaves so */
        for (long k = 0; k < rec && none; k++)
            none = r[k] == 0;
        if (me && none && me->top_id < 0)
            continue;
        if (me) {
            uint32_t top;
            float c;
            memcpy(&top, r, 4);
            memcpy(&c, r + 4, 4);
            if (me->has_score)
                c = me->c_score;
            if (me->top_id >= 0 && (uint32_t)me->top_id != top) {
                top = (uint32_t)me->top_id;
                for (uint32_t k = 0; k < hdr[3]; k++) {
                    memcpy(r + 8 + 8 * k, &top, 4);
                    memcpy(r + 12 + 8 * k, &c, 4);
                }
            }
            memcpy(r, &top, 4);
            memcpy(r + 4, &c, 4);
        }
        if (fseek(f, at, SEEK_SET) != 0 || fwrite(r, 1, (size_t)rec, f) != (size_t)rec)
            rc = vx_errf(err, VX_EIO, "compile: cannot write '%s'", path);
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        rc = rc ? rc : vx_errf(err, VX_EIO, "compile: cannot write '%s'", path);
    fclose(f);
    return rc;
}

/* An edited value the tensor's dtype cannot hold (vx_encode_f32's refusal): refused, not
 * written as inf, NaN or a collapsed block. */
static int unheld(const char *name, vx_dtype dt, size_t at, int64_t cols, float v, vx_err *err)
{
    unsigned be, bb;
    const int blocky = vx_quant_block(dt, &be, &bb) == 0;
    return vx_errf(err, VX_EARG, "compile: the edit makes value [%lld, %lld] of tensor '%s' %g, "
                   "which %s cannot hold%s", (long long)(at / (size_t)cols),
                   (long long)(at % (size_t)cols), name, (double)v, vx_dtype_name(dt),
                   blocky && isfinite(v) ? " (its block's scale would overflow)" : "");
}

/* A block-quantised matrix (dt, n values) edited: out holds the stored bytes; every block
 * whose values the edit changed (f against the decoded orig) is quantised again, every
 * other block keeps its bytes. -1 when the codec cannot encode (the decode-only K-quants). */
static int requantise(vx_dtype dt, const char *name, const float *f, const float *orig,
                      size_t n, int64_t cols, void *out, ed_compile_report *rep, vx_err *err)
{
    unsigned be, bb;
    vx_quant_block(dt, &be, &bb);
    const size_t nb = n / be;
    for (size_t b = 0; b < nb; b++) {
        rep->blocks++;
        if (!memcmp(f + b * be, orig + b * be, be * sizeof *f))
            continue;
        unsigned char *blk = (unsigned char *)out + b * bb, was[256];   /* K-quants: ≤ 210 */
        memcpy(was, blk, bb < sizeof was ? bb : sizeof was);
        size_t bad;
        if (vx_encode_f32(dt, f + b * be, blk, be, &bad) < 0)
            return vx_errf(err, VX_EUNSUPPORTED, "compile: tensor '%s' is stored as %s, which "
                           "lql decodes but does not encode; edits are materialised into f32, "
                           "f16, bf16, q8_0, q4_0, q4_k, q6_k and mxfp4 tensors", name,
                           vx_dtype_name(dt));
        if (bad < be)
            return unheld(name, dt, b * be + bad, cols, f[b * be + bad], err);
        rep->blocks_requantised++;
        rep->blocks_new_bytes += memcmp(was, blk, bb < sizeof was ? bb : sizeof was) != 0;
    }
    return 0;
}

/* One edited FFN matrix (site st; dtype, shape and length as stored) materialised from
 * its stored bytes src into out (length bytes): decoded to f32, edited, stored back in its
 * dtype — a block-quantised one by re-quantising only the changed blocks. active: the
 * bound profile reads it (its dtype sets the gate's tolerance). */
static int materialise(const eng_overlay *ov, const site *st, const char *name, vx_dtype dt,
                       const int64_t *shape, uint64_t length, const unsigned char *src,
                       unsigned char *out, int active, ed_compile_report *rep, vx_err *err)
{
    const int64_t rows = shape[0], cols = shape[1];
    const size_t n = (size_t)(rows * cols);
    unsigned be, bb;
    const int blocky = vx_quant_block(dt, &be, &bb) == 0;
    float *f = malloc((n ? n : 1) * sizeof *f);
    float *orig = blocky ? malloc((n ? n : 1) * sizeof *orig) : NULL;
    int rc = 0;
    if (!f || (blocky && !orig)) {
        free(f);
        free(orig);
        return vx_errf(err, VX_ENOMEM, "compile: out of memory for '%s'", name);
    }
    if (decode(dt, src, length, n, cols, f) < 0) {
        rc = vx_errf(err, VX_EUNSUPPORTED, "compile: tensor '%s' is stored as %s, which has no "
                     "f32 view; edits are materialised into f32, f16, bf16 and block-quantised "
                     "tensors", name, vx_dtype_name(dt));
    } else {
        if (blocky)
            memcpy(orig, f, n * sizeof *f);
        apply(ov, st, f, rows, cols);
        /* test hook: one written value wrong (mid-tensor, clear of the low feature ids
         * tests tombstone), so the statement's probe gate must catch it */
        if (getenv("LQL_TEST_COMPILE_FAULT") && rep->tensors_rewritten == 0)
            f[n / 2] += 8.0f;
        if (blocky) {
            memcpy(out, src, (size_t)length);
            rc = requantise(dt, name, f, orig, n, cols, out, rep, err);
        } else {
            size_t bad;
            vx_encode_f32(dt, f, out, n, &bad);
            if (bad < n)
                rc = unheld(name, dt, bad, cols, f[bad], err);
        }
        rep->tensors_rewritten++;
        if (active)
            rep->dtypes |= 1u << dt;
    }
    free(f);
    free(orig);
    return rc;
}

int ed_tensor_edited(const vx_container *c, const eng_overlay *ov, const vx_tensor *t)
{
    if (!ov)
        return 0;
    site st = site_of(c, t->object, t->name, t->shape, t->ndim);
    return edited(ov, &st);
}

int ed_tensor_f32(const vx_container *c, const eng_overlay *ov, const vx_tensor *t,
                  float **out, int *changed, vx_err *err)
{
    *out = NULL;
    *changed = 0;
    const uint64_t n = vx_tensor_nelems(t);
    const int64_t cols = t->ndim ? t->shape[t->ndim - 1] : 0;
    unsigned be, bb;
    if (vx_quant_block(t->dtype, &be, &bb) == 0 &&
        (cols <= 0 || cols % be || n / (uint64_t)cols * ((uint64_t)cols / be * bb) != t->nbytes))
        return vx_errf(err, VX_EFORMAT, "tensor '%s': %llu bytes are not whole %s rows of %lld",
                       t->name, (unsigned long long)t->nbytes, vx_dtype_name(t->dtype),
                       (long long)cols);
    if (n > ((uint64_t)1 << 34) / sizeof(float))
        return vx_errf(err, VX_EARG, "tensor '%s' is too large to view as f32", t->name);
    site st = site_of(c, t->object, t->name, t->shape, t->ndim);
    const int edit = ov && edited(ov, &st);
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    unsigned char *stored = edit ? malloc(t->nbytes ? (size_t)t->nbytes : 1) : NULL;
    ed_compile_report rep = {0};
    vx_err me = {0};
    int rc = 0;
    if (!f || (edit && !stored))
        rc = vx_errf(err, VX_ENOMEM, "out of memory for tensor '%s'", t->name);
    else if (decode(t->dtype, t->data, t->nbytes, n, cols, f) < 0)
        rc = vx_errf(err, VX_EUNSUPPORTED, "tensor '%s' is stored as %s, which has no f32 "
                     "view here", t->name, vx_dtype_name(t->dtype));
    /* an edited tensor as COMPILE writes it (rounded to its dtype, changed blocks quantised
     * again), so DIFF of a session and its own compile is empty; a codec lql cannot encode
     * (COMPILE refuses it) shows the exact edited values */
    else if (edit && materialise(ov, &st, t->name, t->dtype, t->shape, t->nbytes, t->data,
                                 stored, 0, &rep, &me) == 0)
        decode(t->dtype, stored, t->nbytes, n, cols, f);
    else if (edit && me.code == VX_EUNSUPPORTED)
        apply(ov, &st, f, t->shape[0], t->shape[1]);
    else if (edit) {
        *err = me;
        rc = -1;
    }
    free(stored);
    if (rc) {
        free(f);
        return -1;
    }
    *changed = edit;
    *out = f;
    return 0;
}

/* Rewrite one segment with its edited tensors materialised; fills sha and bytes. */
static int rewrite(const vx_container *c, const vx_segment_view *v, const eng_overlay *ov,
                   vx_cw *cw, char sha[65], uint64_t *bytes, ed_compile_report *rep,
                   vx_err *err)
{
    const vx_segment_hdr *h = v->hdr;
    vx_segw_tensor *t = calloc(h->n + 1, sizeof *t);
    if (!t)
        return vx_errf(err, VX_ENOMEM, "compile: out of memory");
    for (size_t i = 0; i < h->n; i++) {
        t[i].name = h->t[i].name;
        t[i].dtype = h->t[i].dtype;
        t[i].ndim = h->t[i].ndim;
        memcpy(t[i].shape, h->t[i].shape, sizeof t[i].shape);
    }
    vx_segw *w = NULL;
    int rc = vx_cw_segment(cw, v->rel, h->object ? h->object : v->object,
                           h->representation ? h->representation : "", t, h->n, &w, err);
    free(t);
    if (rc)
        return -1;
    const unsigned char *payload = (const unsigned char *)v->data + h->payload_off;
    /* unedited tensors are written from the base's mapping */
    for (size_t i = 0; i < h->n && rc == 0; i++) {
        const vx_seg_tensor *x = &h->t[i];
        site st = site_of(c, v->object, x->name, x->shape, x->ndim);
        if (!edited(ov, &st)) {
            rc = vx_segw_write(w, payload + x->offset, (size_t)x->length, err);
            continue;
        }
        unsigned char *out = malloc((size_t)x->length ? (size_t)x->length : 1);
        if (!out) {
            rc = vx_errf(err, VX_ENOMEM, "compile: out of memory for '%s'", x->name);
            break;
        }
        rc = materialise(ov, &st, x->name, x->dtype, x->shape, x->length, payload + x->offset,
                         out, v->active, rep, err);
        if (rc == 0)
            rc = vx_segw_write(w, out, (size_t)x->length, err);
        free(out);
    }
    if (rc) {
        vx_segw_abort(w);
        return -1;
    }
    return vx_segw_close(w, sha, bytes, err);
}

typedef struct bank_ctx {
    const vx_container *c;
    const char *rel;
    const eng_overlay *ov;
    ed_compile_report *rep;
    unsigned char *buf;
} bank_ctx;

/* vx_lyrw_rewrite's region callback: the container's operands lying in this region of the
 * file (by segment and offset; a fused gate_up region holds two) that the overlay edits
 * are materialised into a copy of the region. */
static int bank_region(void *ctx, uint64_t offset, uint64_t length, const unsigned char *data,
                       const unsigned char **out, vx_err *err)
{
    bank_ctx *b = ctx;
    const vx_bank *bk = vx_container_bank(b->c);
    for (size_t i = 0; i < vx_bank_tensor_count(bk); i++) {
        const vx_tensor *t = vx_bank_tensor_at(bk, i);
        if (strcmp(t->segment, b->rel) || t->offset < offset || t->offset + t->nbytes > offset + length)
            continue;
        site st = site_of(b->c, t->object, t->name, t->shape, t->ndim);
        if (!edited(b->ov, &st))
            continue;
        if (!*out) {
            free(b->buf);
            b->buf = malloc((size_t)length ? (size_t)length : 1);
            if (!b->buf)
                return vx_errf(err, VX_ENOMEM, "compile: out of memory for '%s'", t->name);
            memcpy(b->buf, data, (size_t)length);
            *out = b->buf;
        }
        const size_t at = (size_t)(t->offset - offset);
        const vx_tensor *bound = vx_find(b->c, t->object, t->name);
        if (materialise(b->ov, &st, t->name, t->dtype, t->shape, t->nbytes, data + at,
                        b->buf + at, bound && bound->data == t->data, b->rep, err))
            return -1;
    }
    return 0;
}

/* Every edited layer must hold its FFN matrices in this container: a dense
 * ffn.down_proj, or the routed experts' (a low-rank delta addressed to an expert needs that
 * expert's). */
static int check_layers(const vx_container *c, const eng_overlay *ov, vx_err *err)
{
    for (size_t i = 0; i < ov->n_edits + ov->n_lowrank; i++) {
        int layer = i < ov->n_edits ? ov->edits[i].layer : ov->lowrank[i - ov->n_edits].layer;
        int expert = i < ov->n_edits ? -1 : ov->lowrank[i - ov->n_edits].expert;
        if (expert >= 0 && !vx_findf(c, "target.decoder_stack", "layers.%d.ffn.experts.%d.down_proj",
                                     layer, expert))
            return vx_errf(err, VX_EUNSUPPORTED, "compile: layer %d has no "
                           "ffn.experts.%d.down_proj for the expert an INSERT edited", layer,
                           expert);
        if (!vx_findf(c, "target.decoder_stack", "layers.%d.ffn.down_proj", layer) &&
            !vx_findf(c, "target.decoder_stack", "layers.%d.ffn.experts.0.down_proj", layer))
            return vx_errf(err, VX_EUNSUPPORTED, "compile: layer %d has neither a dense "
                           "ffn.down_proj nor routed experts' (ffn.experts.E.down_proj): "
                           "COMPILE materialises FFN edits", layer);
    }
    return 0;
}

/* How many stored FFN matrices the overlay edits, in every representation's segments
 * (a profile's block-quantised copy is edited with the canonical one). */
static size_t edited_tensors(const vx_container *c, const eng_overlay *ov)
{
    size_t n = 0;
    vx_segment_view v;
    for (size_t i = 0; vx_segment_at(c, i, &v) == 0; i++)
        for (size_t k = 0; k < v.hdr->n; k++) {
            const vx_seg_tensor *x = &v.hdr->t[k];
            site st = site_of(c, v.object, x->name, x->shape, x->ndim);
            n += edited(ov, &st);
        }
    const vx_bank *b = vx_container_bank(c);
    for (size_t i = 0; i < vx_bank_tensor_count(b); i++) {
        const vx_tensor *t = vx_bank_tensor_at(b, i);
        site st = site_of(c, t->object, t->name, t->shape, t->ndim);
        n += edited(ov, &st);
    }
    return n;
}

/* Does the overlay edit an operand stored in the bank file rel? */
static int bank_file_edited(const vx_container *c, const eng_overlay *ov, const char *rel)
{
    const vx_bank *b = vx_container_bank(c);
    for (size_t i = 0; i < vx_bank_tensor_count(b); i++) {
        const vx_tensor *t = vx_bank_tensor_at(b, i);
        site st = site_of(c, t->object, t->name, t->shape, t->ndim);
        if (!strcmp(t->segment, rel) && edited(ov, &st))
            return 1;
    }
    return 0;
}

int ed_compile(const vx_container *c, const brw_model *bm, const eng_overlay *ov,
               const char *out_dir, const cJSON *provenance, vx_progress_fn progress,
               void *progress_ctx, ed_compile_report *rep, vx_err *err)
{
    memset(rep, 0, sizeof *rep);
    if (vx_cw_check(out_dir, vx_dir(c), 0, "compile", err) || check_layers(c, ov, err))
        return -1;
    const cJSON *base = vx_index_json(c);
    const char *dmet = vx_json_str(cJSON_GetObjectItemCaseSensitive(base, "browse"), "down_meta");
    /* a base that stores no down-meta, under an overlay that sets some (UPDATE, an insert's
     * metadata): the compiled container gets every feature's, to carry it — the base's as
     * far as they are known (computed this session or cached), the rest computed as at
     * encode */
    const char *mrel = dmet ? dmet : ov->n_meta ? "browse/down_meta.bin" : NULL;
    rep->meta_written = mrel ? ov->n_meta : 0;
    vx_cw *cw = NULL;
    if (vx_cw_open(&cw, out_dir, vx_dir(c), "compile", err))
        return -1;
    cJSON *index = cJSON_Duplicate(base, 1);
    size_t nseg = vx_segment_count(c), nbank = vx_bank_file_count(vx_container_bank(c));
    const char **skip = calloc(nseg + nbank + 3, sizeof *skip);
    brw_dmet *old_meta = NULL;   /* the base's down-meta that is carried */
    uint8_t *known = NULL;       /* its layers that are complete, when computed or cached */
    int rc = -1;
    if (!index || !skip) {
        vx_errf(err, VX_ENOMEM, "compile: out of memory");
        goto fail;
    }
    size_t ns = 0;
    skip[ns++] = "index.json";
    if (dmet)
        skip[ns++] = dmet;
    const size_t first_new = ns;     /* skip[first_new..ns): segments and bank files written anew */
    cJSON *segs = cJSON_GetObjectItemCaseSensitive(index, "segments");
    for (size_t i = 0; i < nseg; i++) {
        vx_segment_view v;
        if (vx_segment_at(c, i, &v) < 0)
            continue;
        int touched = 0;
        for (size_t k = 0; k < v.hdr->n && !touched; k++) {
            const vx_seg_tensor *x = &v.hdr->t[k];
            site st = site_of(c, v.object, x->name, x->shape, x->ndim);
            touched = edited(ov, &st);
        }
        if (!touched)
            continue;
        char sha[65];
        uint64_t bytes = 0;
        if (rewrite(c, &v, ov, cw, sha, &bytes, rep, err))
            goto fail;
        rep->segments_rewritten++;
        skip[ns++] = v.rel;
        cJSON *rec = cJSON_GetObjectItemCaseSensitive(segs, v.rel);
        if (rec) {
            put_item(rec, "sha256", cJSON_CreateString(sha));
            put_item(rec, "bytes", cJSON_CreateNumber((double)bytes));
        }
    }
    /* a bank-shape container's FFN operands live in LYRW files: an edited one is written
     * anew, region for region */
    for (size_t i = 0; i < nbank; i++) {
        const char *rel = vx_bank_file_at(vx_container_bank(c), i);
        if (!bank_file_edited(c, ov, rel))
            continue;
        char src[4200], dst[4200], sha[65];
        uint64_t bytes = 0;
        if ((size_t)snprintf(src, sizeof src, "%s/%s", vx_dir(c), rel) >= sizeof src) {
            vx_errf(err, VX_EARG, "compile: path too long under '%s'", vx_dir(c));
            goto fail;
        }
        bank_ctx bc = {c, rel, ov, rep, NULL};
        int br = vx_cw_path(cw, rel, dst, sizeof dst, err) ||
                 vx_lyrw_rewrite(src, dst, bank_region, &bc, sha, &bytes, err);
        free(bc.buf);
        if (br)
            goto fail;
        rep->segments_rewritten++;
        rep->bank_files_rewritten++;
        skip[ns++] = rel;
        cJSON *rec = cJSON_GetObjectItemCaseSensitive(segs, rel);
        if (rec) {
            put_item(rec, "sha256", cJSON_CreateString(sha));
            put_item(rec, "bytes", cJSON_CreateNumber((double)bytes));
        }
    }
    if (rep->tensors_rewritten != edited_tensors(c, ov)) {
        vx_errf(err, VX_EUNSUPPORTED, "compile: %zu of %zu edited FFN tensors are stored in "
                "segments of '%s'; the others cannot be rewritten", rep->tensors_rewritten,
                edited_tensors(c, ov), vx_dir(c));
        goto fail;
    }
    /* an insert's relation labels its feature in the compiled container as on the overlay */
    cJSON *labels = NULL;
    if (brw_labels_compiled(c, ov, &labels, err))
        goto fail;
    if (labels) {
        int lr = vx_cw_json(cw, brw_label_files[0], labels, err);
        cJSON_Delete(labels);
        if (lr)
            goto fail;
        skip[ns++] = brw_label_files[0];
    }
    walk_ctx w = {cw, skip, ns, 0, err};
    if (vx_tree_files(vx_dir(c), carry, &w, err))
        goto fail;
    rep->files_linked = w.linked;
    /* representations over rewritten segments get a fresh payload hash */
    cJSON *reps = cJSON_GetObjectItemCaseSensitive(index, "representations"), *r;
    cJSON_ArrayForEach(r, reps) {
        int hit = 0;
        const cJSON *sp;
        cJSON_ArrayForEach(sp, cJSON_GetObjectItemCaseSensitive(r, "segments"))
            for (size_t k = first_new; k < ns && cJSON_IsString(sp); k++)
                hit |= strcmp(sp->valuestring, skip[k]) == 0;
        int bank_hit = 0;   /* its bank files (payload_sha256 covers the table segments) */
        cJSON_ArrayForEach(sp, cJSON_GetObjectItemCaseSensitive(r, "bank_storage"))
            for (size_t k = first_new; k < ns && cJSON_IsString(sp); k++)
                bank_hit |= strcmp(sp->valuestring, skip[k]) == 0;
        if (bank_hit && !hit && cJSON_HasObjectItem(r, "fidelity"))
            cJSON_ReplaceItemInObjectCaseSensitive(r, "fidelity", cJSON_CreateString("derived"));
        if (!hit)
            continue;
        char hex[65];
        if (brw_payload_sha256(vx_cw_dir(cw), r, hex, err))
            goto fail;
        put_item(r, "payload_sha256", cJSON_CreateString(hex));
        if (cJSON_HasObjectItem(r, "fidelity"))
            cJSON_ReplaceItemInObjectCaseSensitive(r, "fidelity", cJSON_CreateString("derived"));
    }
    const char *model = vx_json_str(base, "model");
    put_item(index, "authority", cJSON_CreateString("derived"));
    cJSON_DeleteItemFromObjectCaseSensitive(index, "derived_from_model");
    cJSON_AddStringToObject(index, "derived_from_model", model ? model : "");
    cJSON_DeleteItemFromObjectCaseSensitive(index, "derived_from");
    if (provenance)
        cJSON_AddItemToObject(index, "derived_from", cJSON_Duplicate(provenance, 1));
    if (vx_cw_index(cw, index, err))
        goto fail;
    /* the down-meta of the edited weights, the base's records carried for the rest; the
     * base's browse entry (bands, top_k) is kept, with the new file's hash */
    if (mrel) {
        char bpath[4200], mpath[4200], hex[65];
        if (dmet && vx_resolve(c, dmet, bpath, sizeof bpath, err))
            goto fail;
        /* dmet named a file, so index.browse holds it; else a bands-only base's or a new one */
        cJSON *nb = cJSON_GetObjectItemCaseSensitive(index, "browse");
        if (!nb && !(nb = cJSON_AddObjectToObject(index, "browse"))) {
            vx_errf(err, VX_ENOMEM, "compile: out of memory");
            goto fail;
        }
        vx_err ignored = {0};
        if (dmet && brw_dmet_load(bpath, &old_meta, &ignored) != 0)
            old_meta = NULL;   /* an unreadable base file: computed again, in full */
        if (!dmet && bm) {
            if (brw_meta_known(bm, &old_meta, &known, err) != 0)
                goto fail;
            rep->meta_layers = brw_layers(bm);
            for (int l = 0; known && l < rep->meta_layers; l++)
                rep->meta_layers_known += known[l];
        }
        if (vx_cw_path(cw, mrel, mpath, sizeof mpath, err) ||
            brw_downmeta_compile(vx_cw_dir(cw), mpath, old_meta, known, ov, progress,
                                 progress_ctx, err) ||
            write_meta(mpath, ov, err) || vx_sha256_file(mpath, hex, err))
            goto fail;
        if (!dmet) {
            put_item(nb, "down_meta", cJSON_CreateString(mrel));
            put_item(nb, "down_top_k", cJSON_CreateNumber(BRW_DOWN_TOP_K));
        }
        put_item(nb, "down_meta_sha256", cJSON_CreateString(hex));
        if (cJSON_HasObjectItem(nb, "down_top_k"))   /* a base of another k is recomputed */
            cJSON_ReplaceItemInObjectCaseSensitive(nb, "down_top_k",
                                                   cJSON_CreateNumber(BRW_DOWN_TOP_K));
        if (vx_cw_index(cw, index, err))
            goto fail;
    }
    rc = vx_cw_commit(cw, err);
    cw = NULL;
fail:
    vx_cw_abort(cw);
    cJSON_Delete(index);
    free(skip);
    if (old_meta)
        brw_dmet_free(old_meta);
    free(known);
    return rc;
}
