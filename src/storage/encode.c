/*
 * encode.c — vx_encode: a Hugging Face checkpoint in, a VINDEX3 graph container out.
 *
 * Admission (hf_admit.c) judges the config and binds every checkpoint tensor to a
 * canonical operand; this file streams the operands, one at a time and in bounded chunks,
 * from the checkpoint's mmap into segment files (converting dtype when asked, splitting
 * fused tensors, transposing Conv1D weights), hashing as it writes. Pages of the source are
 * released as soon as a chunk is written, so resident memory stays at a few chunk buffers
 * however large the model is. Everything goes through the container writer (cwriter.c)
 * into `<out>.tmp.<pid>`; index.json is written last, the finish hook runs, and only then
 * is the directory committed. Any failure (or vx_cancel_flag) removes the temporary tree.
 */
#include "hf_admit.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <utf8proc.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_ELEMS (1u << 20)                      /* elements converted per step */

void vx_encode_opts_init(vx_encode_opts *o)
{
    memset(o, 0, sizeof *o);
    o->dtype = -1;
    o->layer_lo = o->layer_hi = -1;
}

/* ---------------------------------------------------------------- streaming state */

typedef struct enc {
    const vx_encode_opts *o;
    const st_model *m;
    vx_err *err;
    float *f32;                  /* CHUNK_ELEMS floats */
    unsigned char *cbuf;         /* CHUNK_ELEMS * 4: converted output */
    unsigned char *gbuf;         /* CHUNK_ELEMS * 4: gathered (transposed) source */
    unsigned char *hashed;       /* per checkpoint tensor: in this representation's source hash */
    vx_sha256_ctx pay, src;      /* representation payload / source payload */
    vx_hasher *hs;               /* hashes pay beside the segment write, or NULL (inline) */
    const char *src_dir;         /* the checkpoint, for messages */
    int src_is_pay;              /* every operand a whole, unconverted, distinct tensor:
                                  * the source hash is the payload hash (one pass saved) */
    uint64_t done, total;        /* progress, in stored bytes */
    const st_tensor *cur;        /* the checkpoint tensor being written (for messages) */
    vx_segw_tensor *tt;          /* the object's tensor table, and the segment being */
    vx_segw *w;                  /* written: a SIGBUS jump leaves them to vx_encode */
} enc;

static vx_dtype out_dtype(const enc *e, const hf_operand *op)
{
    if (op->keep_f32)
        return VX_F32;
    if (op->scales)
        return VX_MXFP4;         /* packed experts stay as the checkpoint stores them */
    return e->o->dtype < 0 ? op->src->dtype : (vx_dtype)e->o->dtype;
}

static uint64_t op_bytes(const hf_operand *op, vx_dtype t)
{
    uint64_t rows = 1, bytes = 0;
    for (int i = 0; i + 1 < op->ndim; i++)
        rows *= (uint64_t)op->shape[i];
    vx_dtype_nbytes(t, (uint64_t)op->shape[op->ndim - 1], rows, &bytes);
    return bytes;
}

/* Convert n values from one float dtype to another (f32 / f16 / bf16; RNE); a finite value
 * the target dtype cannot hold (f16 past ±65504) is refused, never stored as infinity. */
static int convert(enc *e, vx_dtype from, const void *src, vx_dtype to, void *dst, size_t n)
{
    if (from == to) {
        memcpy(dst, src, n * vx_dtype_block_bytes(to));
        return 0;
    }
    vx_row_to_f32(from, src, e->f32, n);
    size_t bad;
    vx_encode_f32(to, e->f32, dst, n, &bad);
    if (bad < n)
        return vx_errf(e->err, VX_EFORMAT, "encode: tensor '%s' holds %g, beyond f16's range "
                       "(±65504): as f16 it would be infinity; encode it as bf16 or f32 (--dtype)",
                       e->cur ? e->cur->name : "?", (double)e->f32[bad]);
    return 0;
}

static int shrank(vx_err *err, const char *src)
{
    return vx_errf(err, VX_EIO, "encode: a file of checkpoint '%s' shrank or vanished while it "
                   "was being read (SIGBUS on its mapping): the checkpoint changed during the "
                   "encode; nothing was written", src);
}

/* Emit n bytes p. The cancel check is the segment writer's too; this one names the
 * statement. The payload hash runs on the hasher's thread while this one hashes the tensor
 * and writes: the 1.1B encode took 7.4-7.8 s without the payload hash against 9.0-11.3 s
 * with it inline (ENCODE.md, session 50). */
static int emit(enc *e, vx_segw *w, const void *p, size_t n)
{
    if (vx_cancel_flag)
        return vx_errf(e->err, VX_ECANCEL, "encode: cancelled");
    vx_hasher_post(e->hs, &e->pay, p, n);
    const int rc = vx_segw_write(w, p, n, e->err);
    if (vx_hasher_wait(e->hs) < 0)
        return rc < 0 ? -1 : shrank(e->err, e->src_dir);
    if (rc < 0)
        return -1;
    e->done += n;
    if (e->o->progress)
        e->o->progress(e->o->progress_ctx, "encode", e->done, e->total);
    return 0;
}

/* Source hash of a whole checkpoint tensor, once per representation (st_hash_sources'
 * order: first use in table order). */
static void hash_source_whole(enc *e, const st_tensor *t)
{
    size_t k = (size_t)(t - st_at(e->m, 0));
    if (e->hashed[k])
        return;
    e->hashed[k] = 1;
    for (uint64_t o = 0; o < t->nbytes; o += 4 * (uint64_t)CHUNK_ELEMS) {
        uint64_t len = t->nbytes - o < 4 * (uint64_t)CHUNK_ELEMS ? t->nbytes - o : 4 * (uint64_t)CHUNK_ELEMS;
        vx_sha256_update(&e->src, t->data + o, (size_t)len);
        st_release(t->data + o, len);
    }
}

/* Emit n gathered source elements (e->gbuf), converted to the operand's dtype. */
static int emit_gathered(enc *e, vx_segw *w, vx_dtype from, vx_dtype to, size_t n)
{
    const void *outp = e->gbuf;
    if (from != to) {
        if (convert(e, from, e->gbuf, to, e->cbuf, n) < 0)
            return -1;
        outp = e->cbuf;
    }
    return emit(e, w, outp, n * vx_dtype_block_bytes(to));
}

/* MXFP4 rows from blocks [E, R, nb, 16] + scales [E, R, nb]: each 32-value block becomes
 * lql's [scale | 16 bytes], value j in the low nibble of byte j and value j + 16 in its high
 * nibble, where the checkpoint packs values 2j (low) and 2j + 1 (high) in byte j. Codes and
 * scales are copied, never requantised. */
static int write_mxfp4_rows(enc *e, vx_segw *w, const hf_operand *op)
{
    const st_tensor *t = op->src, *sc = op->scales;
    const uint64_t R = (uint64_t)t->shape[1], nb = (uint64_t)t->shape[2];
    for (int64_t i = 0; i < op->shape[0]; i++) {
        uint64_t r = (uint64_t)op->expert * R + (uint64_t)(op->lo + i * op->step);
        const unsigned char *blk = t->data + r * nb * 16, *s = sc->data + r * nb;
        unsigned char *out = e->cbuf;
        for (uint64_t b = 0; b < nb; b++, out += 17) {
            unsigned char v[32];
            for (int k = 0; k < 16; k++) {
                v[2 * k] = blk[b * 16 + k] & 0x0f;
                v[2 * k + 1] = blk[b * 16 + k] >> 4;
            }
            out[0] = s[b];
            for (int k = 0; k < 16; k++)
                out[1 + k] = (unsigned char)(v[k] | v[k + 16] << 4);
        }
        if (emit(e, w, e->cbuf, (size_t)(nb * 17)) < 0)
            return -1;
    }
    return 0;
}

/* HF_GATHER: output row i of an operand taken from expert `expert` of a stacked [E, R, C]
 * source ([E, N]: R = N, C = 1) is source row lo + i·step, or with transpose that column;
 * gathered element by element into bounded chunks, converted, streamed. */
static int write_gather(enc *e, vx_segw *w, const hf_operand *op)
{
    const st_tensor *t = op->src;
    hash_source_whole(e, t);
    if (op->scales) {
        hash_source_whole(e, op->scales);
        return write_mxfp4_rows(e, w, op);
    }
    vx_dtype from = t->dtype, to = out_dtype(e, op);
    const size_t es = vx_dtype_block_bytes(from);
    const uint64_t R = (uint64_t)t->shape[1], C = t->ndim == 3 ? (uint64_t)t->shape[2] : 1;
    const uint64_t len = op->transpose ? R : C, stride = op->transpose ? C : 1;
    const unsigned char *base = t->data + (uint64_t)op->expert * R * C * es;
    size_t fill = 0;
    for (int64_t i = 0; i < op->shape[0]; i++) {
        uint64_t k = (uint64_t)(op->lo + i * op->step);
        const unsigned char *p = base + (op->transpose ? k : k * C) * es;
        for (uint64_t x = 0; x < len; x++) {
            memcpy(e->gbuf + fill * es, p + x * stride * es, es);
            if (++fill == CHUNK_ELEMS || (i + 1 == op->shape[0] && x + 1 == len)) {
                if (emit_gathered(e, w, from, to, fill) < 0)
                    return -1;
                fill = 0;
            }
        }
    }
    return 0;
}

/* Stream one operand into the segment. */
static int write_operand(enc *e, vx_segw *w, const hf_operand *op)
{
    const st_tensor *t = e->cur = op->src;
    if (op->xf == HF_GATHER)
        return write_gather(e, w, op);
    vx_dtype from = t->dtype, to = out_dtype(e, op);
    size_t es = vx_dtype_block_bytes(from), eo = vx_dtype_block_bytes(to);
    if (op->xf == HF_WHOLE || op->xf == HF_ROWS) {
        uint64_t b0 = 0, b1 = t->nbytes;
        if (op->xf == HF_ROWS) {
            /* rows of the last dimension: a fused [experts, out, in] source is sliced as
             * the matrix [experts · out, in] (1-D: elements) */
            uint64_t row = t->ndim > 1 ? (uint64_t)t->shape[t->ndim - 1] * es : es;
            b0 = (uint64_t)op->lo * row;
            b1 = (uint64_t)op->hi * row;
        }
        size_t k = (size_t)(t - st_at(e->m, 0));
        int inline_hash = op->xf == HF_WHOLE && !e->hashed[k];
        if (op->xf == HF_ROWS)
            hash_source_whole(e, t);
        e->hashed[k] = 1;
        for (uint64_t at = b0; at < b1;) {
            size_t n = (size_t)((b1 - at) / es < CHUNK_ELEMS ? (b1 - at) / es : CHUNK_ELEMS);
            const unsigned char *p = t->data + at;
            if (inline_hash && !e->src_is_pay)
                vx_sha256_update(&e->src, p, n * es);
            if (from == to) {
                if (emit(e, w, p, n * es) < 0)
                    return -1;
            } else {
                if (convert(e, from, p, to, e->cbuf, n) < 0 || emit(e, w, e->cbuf, n * eo) < 0)
                    return -1;
            }
            st_release(p, n * es);
            at += n * es;
        }
        return 0;
    }
    /* Transposed: output row c is source column c, for c in [lo, hi). */
    hash_source_whole(e, t);
    uint64_t R = (uint64_t)t->shape[0], C = (uint64_t)t->shape[1];
    uint64_t lo = op->xf == HF_T ? 0 : (uint64_t)op->lo, hi = op->xf == HF_T ? C : (uint64_t)op->hi;
    uint64_t block = R ? CHUNK_ELEMS / R : 1;
    if (block == 0)
        block = 1;
    for (uint64_t c0 = lo; c0 < hi; c0 += block) {
        uint64_t nc = hi - c0 < block ? hi - c0 : block;
        for (uint64_t r0 = 0; r0 < R; r0 += CHUNK_ELEMS) {
            /* Rows r0.. of the output rows c0..c0+nc: gather column-major. When R alone
             * exceeds a chunk, nc is 1 and rows are taken CHUNK_ELEMS at a time. */
            uint64_t nr = R - r0 < CHUNK_ELEMS ? R - r0 : CHUNK_ELEMS;
            if (nc > 1)
                nr = R;
            for (uint64_t r = r0; r < r0 + nr; r++) {
                const unsigned char *srow = t->data + (r * C + c0) * es;
                for (uint64_t c = 0; c < nc; c++)
                    memcpy(e->gbuf + (c * nr + (r - r0)) * es, srow + c * es, es);
            }
            if (emit_gathered(e, w, from, to, (size_t)(nc * nr)) < 0)
                return -1;
            if (nc > 1)
                break;
        }
    }
    st_release(t->data, t->nbytes);
    return 0;
}

/* ---------------------------------------------------------------- files */

/* Tokenizer and config files in every form the hub ships them (tokenizer.json is the one
 * lql's tokenizer reads; the others keep the container self-contained): the encoder copies
 * them in, export (hf_export.c) copies them back out. */
const char *const vx_hf_snapshots[] = {"tokenizer.json", "tokenizer_config.json",
                                       "generation_config.json", "special_tokens_map.json",
                                       "config.json", "added_tokens.json", "vocab.json",
                                       "merges.txt", "tokenizer.model", "chat_template.jinja",
                                       NULL};

int vx_copy_snapshot(const char *from_dir, const char *to_dir, const char *name, vx_err *err)
{
    char src[PATH_MAX], dst[PATH_MAX];
    if (snprintf(src, sizeof src, "%s/%s", from_dir, name) >= (int)sizeof src ||
        snprintf(dst, sizeof dst, "%s/%s", to_dir, name) >= (int)sizeof dst)
        return vx_errf(err, VX_EARG, "path too long: '%s/%s'", from_dir, name);
    if (access(src, F_OK) != 0 && errno == ENOENT)
        return 0;
    return vx_file_copy(src, dst, err);
}

/* ---------------------------------------------------------------- objects */

enum { EXACT, EQUIVALENT, APPROXIMATE };
static const char *const fidelity_name[] = {"source-exact", "source-equivalent",
                                            "numerically-approximate"};

static int fidelity(vx_dtype from, vx_dtype to)
{
    if (from == to)
        return EXACT;
    return to == VX_F32 ? EQUIVALENT : APPROXIMATE;
}

/* Encode one object: its operands into segments/<id>[.NNN].bin, recording segments and
 * the representation in index, the object in objects. */
static int encode_object(enc *e, vx_cw *cw, const hf_object *ob, cJSON *index, cJSON *objects)
{
    uint64_t by[VX_DTYPE_COUNT] = {0};
    int fid = EXACT;
    for (size_t i = 0; i < ob->n; i++) {
        vx_dtype t = out_dtype(e, &ob->op[i]);
        by[t] += op_bytes(&ob->op[i], t);
        int f = ob->op[i].scales ? EXACT : fidelity(ob->op[i].src->dtype, t);
        fid = f > fid ? f : fid;
    }
    vx_dtype rd = VX_F32;
    for (int t = 0; t < VX_DTYPE_COUNT; t++)
        if (by[t] > by[rd])
            rd = (vx_dtype)t;
    char rid[128];
    snprintf(rid, sizeof rid, "%s.%s", ob->id, vx_dtype_name(rd));

    vx_segw_tensor *tt = e->tt = calloc(ob->n + 1, sizeof *tt);
    if (!tt)
        return vx_errf(e->err, VX_ENOMEM, "encode: out of memory");
    for (size_t i = 0; i < ob->n; i++) {
        tt[i].name = ob->op[i].name;
        tt[i].dtype = out_dtype(e, &ob->op[i]);
        tt[i].ndim = ob->op[i].ndim;
        memcpy(tt[i].shape, ob->op[i].shape, sizeof tt[i].shape);
    }
    cJSON *rep = cJSON_CreateObject();
    cJSON_AddStringToObject(rep, "object", ob->id);
    cJSON_AddStringToObject(rep, "encoding", "tensor-table");
    cJSON_AddStringToObject(rep, "dtype", vx_dtype_name(rd));
    cJSON_AddStringToObject(rep, "fidelity", fidelity_name[fid]);
    cJSON *seglist = cJSON_AddArrayToObject(rep, "segments");
    cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(index, "representations"), rid, rep);
    cJSON *segs = cJSON_GetObjectItemCaseSensitive(index, "segments");

    memset(e->hashed, 0, st_count(e->m) + 1);
    e->src_is_pay = 1;
    for (size_t i = 0; i < ob->n && e->src_is_pay; i++) {
        size_t k = (size_t)(ob->op[i].src - st_at(e->m, 0));
        e->src_is_pay = ob->op[i].xf == HF_WHOLE && tt[i].dtype == ob->op[i].src->dtype && !e->hashed[k];
        e->hashed[k] = 1;
    }
    memset(e->hashed, 0, st_count(e->m) + 1);
    int rc = vx_sha256_init(&e->pay, e->err);
    if (rc == 0 && (rc = vx_sha256_init(&e->src, e->err)) < 0)
        vx_sha256_free(&e->pay);
    if (rc < 0) {
        free(tt);
        e->tt = NULL;
        return -1;
    }
    uint64_t cap;
    if (vx_shard_cap(&cap, e->err) < 0) {
        free(tt);
        e->tt = NULL;
        return -1;
    }
    int nfile = 0;
    for (size_t i = 0; rc == 0 && i < ob->n; nfile++) {
        /* Take operands while the file stays within the cap. */
        size_t fit;
        if ((rc = vx_segw_fit(tt + i, ob->n - i, cap, "encode", ob->id, &fit, e->err)) < 0)
            break;
        size_t k = i + fit;
        char rel[256];
        vx_shard_name(rel, sizeof rel, ob->id, (size_t)nfile);
        vx_segw *w;
        if ((rc = vx_cw_segment(cw, rel, ob->id, rid, tt + i, k - i, &w, e->err)) < 0)
            break;
        e->w = w;
        for (size_t j = i; rc == 0 && j < k; j++)
            rc = write_operand(e, w, &ob->op[j]);
        e->w = NULL;
        if (rc < 0) {
            vx_segw_abort(w);
            break;
        }
        char sha[65];
        uint64_t bytes;
        if ((rc = vx_segw_close(w, sha, &bytes, e->err)) < 0)
            break;
        vx_segment_record(segs, rel, "tensor-table", 1, bytes, sha);
        cJSON_AddItemToArray(seglist, cJSON_CreateString(rel));
        i = k;
    }
    free(tt);
    e->tt = NULL;
    if (rc < 0) {
        vx_sha256_free(&e->pay);
        vx_sha256_free(&e->src);
        return -1;
    }
    char hp[65], hs[65];
    vx_sha256_final(&e->src, hs);
    vx_sha256_final(&e->pay, hp);
    if (e->src_is_pay)
        memcpy(hs, hp, sizeof hs);
    cJSON_AddStringToObject(rep, "source_payload_sha256", hs);
    cJSON_AddStringToObject(rep, "payload_sha256", hp);

    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", ob->id);
    cJSON_AddStringToObject(o, "component", ob->component);
    cJSON_AddStringToObject(o, "kind", ob->kind);
    cJSON *b = cJSON_AddObjectToObject(o, "source_bindings");
    for (size_t i = 0; i < ob->n; i++)
        cJSON_AddItemToObject(b, ob->op[i].name, hf_binding(&ob->op[i]));
    /* the shape of every source tensor that is not stored whole as it was (sliced, fused,
     * transposed, gathered, reshaped): what export needs to rebuild it */
    cJSON *ss = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(index, "encoder"),
                                                 "source_shapes");
    for (size_t i = 0; i < ob->n; i++) {
        const hf_operand *op = &ob->op[i];
        const st_tensor *ts[2] = {op->src, op->scales};
        if (op->xf == HF_WHOLE && op->ndim == op->src->ndim)
            continue;
        for (int k = 0; k < 2; k++) {
            if (!ts[k] || cJSON_HasObjectItem(ss, ts[k]->name))
                continue;
            if (!ss)
                ss = cJSON_AddObjectToObject(cJSON_GetObjectItemCaseSensitive(index, "encoder"),
                                             "source_shapes");
            cJSON *sh = cJSON_AddArrayToObject(ss, ts[k]->name);
            for (int d = 0; d < ts[k]->ndim; d++)
                cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)ts[k]->shape[d]));
        }
    }
    cJSON *rs = cJSON_AddArrayToObject(o, "representations");
    cJSON_AddItemToArray(rs, cJSON_CreateString(rid));
    cJSON_AddItemToArray(objects, o);
    return 0;
}

/* ---------------------------------------------------------------- entry */

/* s as JSON text can hold it: each byte that does not start valid UTF-8 becomes U+FFFD
 * (cJSON would write it raw, and no JSON reader takes the file then). malloc'd. */
static char *json_text(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k > 0) {
            memcpy(o, s + i, (size_t)k);
            o += k;
            i += (size_t)k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    *o = 0;
    return out;
}

static cJSON *make_index(const hf_plan *p, const char *model, const char *source, const vx_encode_opts *o)
{
    cJSON *x = cJSON_CreateObject();
    char *m = json_text(model), *src = json_text(source);
    cJSON_AddNumberToObject(x, "version", 4);
    cJSON_AddStringToObject(x, "model", m ? m : "?");
    cJSON_AddStringToObject(x, "family", p->family);
    cJSON_AddNumberToObject(x, "hidden_size", p->hidden);
    cJSON_AddNumberToObject(x, "num_layers", p->num_layers);
    cJSON_AddStringToObject(x, "system_graph", "system_graph.json");
    cJSON_AddNullToObject(x, "moe_manifest");
    cJSON_AddStringToObject(x, "authority", "canonical");
    cJSON_AddNullToObject(x, "derived_from_model");
    cJSON_AddNullToObject(x, "precision_map");
    cJSON_AddObjectToObject(x, "representations");
    cJSON_AddObjectToObject(x, "segments");
    cJSON_AddArrayToObject(x, "profiles");
    cJSON_AddObjectToObject(x, "variants");
    cJSON *e = cJSON_AddObjectToObject(x, "encoder");
    cJSON_AddStringToObject(e, "name", "lql");
    cJSON_AddStringToObject(e, "version", "0.1.0");
    cJSON_AddStringToObject(e, "source", src ? src : "?");
    free(m);
    free(src);
    cJSON_AddItemToObject(e, "declaration_only", cJSON_Duplicate(p->declaration_only, 1));
    cJSON_AddStringToObject(e, "dtype_policy", o->dtype < 0 ? "source" : vx_dtype_name((vx_dtype)o->dtype));
    if (o->layer_lo >= 0 && o->layer_hi >= o->layer_lo) {
        cJSON *b = cJSON_AddArrayToObject(e, "layer_band");
        cJSON_AddItemToArray(b, cJSON_CreateNumber(o->layer_lo));
        cJSON_AddItemToArray(b, cJSON_CreateNumber(o->layer_hi));
    }
    return x;
}

int vx_encode_dtype_check(int dtype, vx_err *err)
{
    if (dtype < 0 || dtype == VX_F32 || dtype == VX_F16 || dtype == VX_BF16)
        return 0;
    const char *name = vx_dtype_name((vx_dtype)dtype) ? vx_dtype_name((vx_dtype)dtype) : "?";
    return vx_errf(err, VX_EARG, "encode: dtype '%s' is not an encode target (f32, f16 or bf16; "
                   "quantised representations are made from a container: encode, then "
                   "REPRESENT \"object\" AS %s in lql, or vindex represent)", name, name);
}

/* Everything an encode holds, on the heap: a SIGBUS jump out of the middle of it loses
 * nothing the cleanup needs. */
typedef struct encode_run {
    st_model *m;
    hf_plan plan;
    enc e;
    cJSON *index, *graph;
    vx_cw *cw;
} encode_run;

static int encode_body(encode_run *r, const char *src, const char *out_dir,
                       const vx_encode_opts *opts, vx_err *err)
{
    if (st_open_dir(src, &r->m, err) < 0 || hf_admit(src, r->m, &r->plan, err) < 0)
        return -1;
    st_model *m = r->m;
    hf_plan *plan = &r->plan;
    if (plan->num_layers > 0 && opts->layer_hi >= plan->num_layers)
        return vx_errf(err, VX_EARG, "encode: layer band [%d, %d] is outside the model (layers 0..%d)",
                       opts->layer_lo, opts->layer_hi, plan->num_layers - 1);

    enc *e = &r->e;
    *e = (enc){.o = opts, .m = m, .err = err, .src_dir = src, .hs = vx_hasher_start()};
    if (vx_cw_open(&r->cw, out_dir, NULL, "encode", err) < 0)
        return -1;
    e->f32 = malloc(CHUNK_ELEMS * sizeof(float));
    e->cbuf = malloc(CHUNK_ELEMS * 4);
    e->gbuf = malloc(CHUNK_ELEMS * 4);
    e->hashed = calloc(st_count(m) + 1, 1);
    if (!e->f32 || !e->cbuf || !e->gbuf || !e->hashed)
        return vx_errf(err, VX_ENOMEM, "encode: out of memory");
    for (int i = 0; i < HF_NOBJ; i++)
        for (size_t k = 0; k < plan->obj[i].n; k++)
            e->total += op_bytes(&plan->obj[i].op[k], out_dtype(e, &plan->obj[i].op[k]));

    const char *model = opts->model_name;
    char base[PATH_MAX];
    if (!model) {
        snprintf(base, sizeof base, "%s", src);
        model = basename(base);
    }
    r->index = make_index(plan, model, src, opts);
    cJSON *graph = r->graph = cJSON_CreateObject();
    cJSON_AddNumberToObject(graph, "schema", VX_GRAPH_SCHEMA);
    cJSON *comps = cJSON_AddArrayToObject(graph, "components");
    cJSON_AddItemToArray(comps, plan->component);
    plan->component = NULL;
    if (plan->aux) {
        cJSON_AddItemToArray(comps, plan->aux);
        plan->aux = NULL;
    }
    cJSON *objects = cJSON_AddArrayToObject(graph, "objects");
    cJSON_AddItemToObject(graph, "edges", plan->edges ? plan->edges : cJSON_CreateArray());
    plan->edges = NULL;
    int rc = 0;
    for (int i = 0; i < HF_NOBJ && rc == 0; i++)
        if (plan->obj[i].n)
            rc = encode_object(e, r->cw, &plan->obj[i], r->index, objects);
    for (size_t i = 0; vx_hf_snapshots[i] && rc == 0; i++)
        rc = vx_copy_snapshot(src, vx_cw_dir(r->cw), vx_hf_snapshots[i], err);
    /* the snapshots' hashes, so an edit of tokenizer.json or config.json after the encode
     * is refused where they are read, and by vindex verify (vx_snapshot_check) */
    cJSON *snaps = cJSON_AddObjectToObject(r->index, "snapshots");
    for (size_t i = 0; vx_hf_snapshots[i] && rc == 0; i++) {
        char path[PATH_MAX + 64], hex[65];
        snprintf(path, sizeof path, "%s/%s", vx_cw_dir(r->cw), vx_hf_snapshots[i]);
        if (access(path, F_OK) != 0)
            continue;
        if ((rc = vx_sha256_file(path, hex, err)) == 0)
            cJSON_AddStringToObject(snaps, vx_hf_snapshots[i], hex);
    }
    if (rc == 0)
        rc = vx_cw_json(r->cw, "system_graph.json", graph, err);
    if (rc == 0)
        rc = vx_cw_index(r->cw, r->index, err);
    if (rc == 0 && opts->finish) {
        rc = opts->finish(opts->finish_ctx, vx_cw_dir(r->cw), r->index, err);
        if (rc == 0)
            rc = vx_cw_index(r->cw, r->index, err);
    }
    if (rc == 0) {
        rc = vx_cw_commit(r->cw, err);
        r->cw = NULL;
    }
    return rc < 0 ? -1 : 0;
}

/* encode_body with SIGBUS guarded: the checkpoint is read through its mapping, so a file
 * cut short meanwhile (rewritten, truncated by another program) faults, and the encode
 * fails instead of the process. */
static int encode_guarded(encode_run *r, const char *src, const char *out_dir,
                          const vx_encode_opts *opts, vx_err *err)
{
    sigjmp_buf bus;
    int rc;
    if (sigsetjmp(bus, 1) == 0) {
        vx_bus_arm(&bus);
        rc = encode_body(r, src, out_dir, opts, err);
    } else {
        rc = shrank(err, src);
    }
    vx_bus_disarm();
    return rc;
}

int vx_encode(const char *hf_dir, const char *out_dir, const vx_encode_opts *opts, vx_err *err)
{
    vx_encode_opts defaults;
    if (!opts) {
        vx_encode_opts_init(&defaults);
        opts = &defaults;
    }
    if (!hf_dir || !out_dir || !*out_dir)
        return vx_errf(err, VX_EARG, "encode: a checkpoint directory and an output path are required");
    if (vx_encode_dtype_check(opts->dtype, err) < 0)
        return -1;
    if (opts->layer_lo >= 0 && opts->layer_hi < opts->layer_lo)
        return vx_errf(err, VX_EARG, "encode: layer band [%d, %d] is empty", opts->layer_lo,
                       opts->layer_hi);
    if (vx_cw_check(out_dir, NULL, 0, "encode", err) < 0)
        return -1;
    char src[PATH_MAX];
    if (!realpath(hf_dir, src))
        return vx_errf(err, VX_EIO, "encode: cannot open checkpoint directory '%s': %s", hf_dir,
                       strerror(errno));
    encode_run *r = calloc(1, sizeof *r);
    if (!r)
        return vx_errf(err, VX_ENOMEM, "encode: out of memory");
    int rc = encode_guarded(r, src, out_dir, opts, err);
    /* what a SIGBUS jump left mid-object (NULL otherwise) */
    if (r->e.w)
        vx_segw_abort(r->e.w);
    free(r->e.tt);
    vx_hasher_stop(r->e.hs);   /* a SIGBUS jump may have left it hashing */
    vx_sha256_free(&r->e.pay);
    vx_sha256_free(&r->e.src);
    vx_cw_abort(r->cw);
    cJSON_Delete(r->index);
    cJSON_Delete(r->graph);
    free(r->e.f32);
    free(r->e.cbuf);
    free(r->e.gbuf);
    free(r->e.hashed);
    hf_plan_free(&r->plan);
    st_close(r->m);
    free(r);
    return rc < 0 ? -1 : 0;
}
