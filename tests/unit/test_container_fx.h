/*
 * test_container_fx.h — builds tiny VINDEX3 containers by hand for the reader tests (no
 * encoder involved): a 2-layer llama-shaped graph with three objects, each tensor filled
 * with known values, segments framed and hashed as docs/lql/CONTAINER.md says, plus a
 * matching safetensors "source checkpoint". Tests edit the cJSON trees (or the written
 * bytes) to make each hostile case, then call fx_write.
 */
#ifndef TEST_CONTAINER_FX_H
#define TEST_CONTAINER_FX_H

#include "vindex.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FX_NOBJ 3
#define FX_LAYERS 2
#define FX_HIDDEN 8
#define FX_VOCAB 16
#define FX_INTER 16

typedef struct fx {
    char dir[64];                 /* the container */
    char src[64];                 /* the source checkpoint (model.safetensors) */
    cJSON *index, *graph;
    cJSON *hdr[FX_NOBJ];          /* segment headers, one segment per object */
    unsigned char *payload[FX_NOBJ];
    uint64_t plen[FX_NOBJ];
    int tensor_sha;               /* record per-tensor sha256 in the tables */
    int count;                    /* tensors added so far (drives fx_value) */
} fx;

static const char *fx_obj[FX_NOBJ] = {"target.embedding", "target.decoder_stack",
                                      "target.output_head"};
static const char *fx_rel[FX_NOBJ] = {"segments/target.embedding.bin",
                                      "segments/target.decoder_stack.bin",
                                      "segments/target.output_head.bin"};

/* The value stored at element e of the n-th tensor added (exact in bf16 too). */
static inline float fx_value(int n, uint64_t e)
{
    return (float)(n + 1) + (float)(e % 64) * 0.125f;
}

static inline cJSON *fx_object(fx *f, int k)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(f->graph, "objects"), k);
}

/* Append a tensor to object k's table at the next 64-byte offset, bound to source `src`. */
static inline void fx_add(fx *f, int k, const char *name, vx_dtype dt, int ndim, const int64_t *shape,
                   const char *src)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (uint64_t)shape[i];
    uint64_t len = n * vx_dtype_block_bytes(dt);
    uint64_t off = (f->plen[k] + 63) / 64 * 64;
    f->payload[k] = realloc(f->payload[k], off + len);
    memset(f->payload[k] + f->plen[k], 0, off - f->plen[k]);
    for (uint64_t e = 0; e < n; e++) {
        float v = fx_value(f->count, e);
        if (dt == VX_F32) {
            memcpy(f->payload[k] + off + 4 * e, &v, 4);
        } else {
            uint16_t h = vx_f32_to_bf16(v);
            memcpy(f->payload[k] + off + 2 * e, &h, 2);
        }
    }
    f->count++;
    f->plen[k] = off + len;
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", name);
    cJSON_AddStringToObject(t, "dtype", vx_dtype_name(dt));
    cJSON *sh = cJSON_AddArrayToObject(t, "shape");
    for (int i = 0; i < ndim; i++)
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[i]));
    cJSON_AddNumberToObject(t, "offset", (double)off);
    cJSON_AddNumberToObject(t, "length", (double)len);
    cJSON_AddItemToArray(cJSON_GetObjectItem(f->hdr[k], "tensors"), t);
    cJSON_AddStringToObject(cJSON_GetObjectItem(fx_object(f, k), "source_bindings"), name, src);
}

/* The table entry for `name` in object k (for tests to edit). */
static inline cJSON *fx_tensor(fx *f, int k, const char *name)
{
    cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(f->hdr[k], "tensors")) {
        if (strcmp(cJSON_GetObjectItem(t, "name")->valuestring, name) == 0)
            return t;
    }
    return NULL;
}

static inline void fx_set_num(cJSON *obj, const char *key, double v)
{
    cJSON_ReplaceItemInObject(obj, key, cJSON_CreateNumber(v));
}

/* a layer's declared state: f32 keys and values of 1 kv head x 4 per position */
#define FX_KV "\"state\": [{\"name\": \"k\", \"dtype\": \"f32\", \"shape\": [1, 4], \"per_token\": true}," \
    " {\"name\": \"v\", \"dtype\": \"f32\", \"shape\": [1, 4], \"per_token\": true}]"

static inline void fx_init(fx *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/lql_fx_XXXXXX");
    snprintf(f->src, sizeof f->src, "/tmp/lql_fxsrc_XXXXXX");
    if (!mkdtemp(f->dir) || !mkdtemp(f->src))
        abort();
    f->tensor_sha = 1;
    f->graph = cJSON_Parse(
        "{\"schema\": 7, \"future_field\": {\"kept\": true},"
        " \"components\": [{\"id\": \"target\", \"role\": \"decoder\", \"num_layers\": 2,"
        "   \"hidden_size\": 8, \"vocab_size\": 16, \"context_length\": 32,"
        "   \"execution\": {\"embedding\": {\"scale\": 1.0, \"positions\": null},"
        "     \"norm\": {\"kind\": \"rms\", \"eps\": 1e-05, \"weight_offset\": 0, \"bias\": false},"
        "     \"attention\": {\"heads\": 2, \"kv_heads\": 1, \"head_dim\": 4, \"scale\": 0.5,"
        "       \"qkv_bias\": false, \"out_bias\": false, \"softcap\": null, \"qk_norm\": null,"
        "       \"sinks\": false, \"rope\": {\"style\": \"rotate_half\", \"theta\": 10000,"
        "       \"rotary_dim\": 4, \"scaling\": null}, \"output_gate\": null}, \"mla\": null,"
        "     \"ffn\": {\"kind\": \"gated\", \"activation\": \"silu\", \"intermediate\": 16,"
        "       \"bias\": false}, \"moe\": null, \"mamba2\": null, \"gated_deltanet\": null,"
        "     \"residual_scale\": null, \"pre_norms\": {\"attn\": true, \"ffn\": true},"
        "     \"post_norms\": {\"attn\": false, \"ffn\": false}, \"final_norm\": true,"
        "     \"lm_head\": {\"tied\": false, \"softcap\": null, \"logits_divisor\": null},"
        "     \"context_length\": 32, \"special_tokens\": {\"bos\": 0, \"eos\": [1], \"add_bos\": true}},"
        "   \"layers\": [{\"operator\": \"softmax_attention\", \"window\": null, \"ffn\": \"dense\", \"rope\": null, " FX_KV "},"
        "                {\"operator\": \"softmax_attention\", \"window\": null, \"ffn\": \"dense\", \"rope\": null, " FX_KV "}]}],"
        " \"objects\": ["
        "  {\"id\": \"target.embedding\", \"component\": \"target\", \"kind\": \"embedding\","
        "   \"source_bindings\": {}, \"representations\": [\"target.embedding.f32\"]},"
        "  {\"id\": \"target.decoder_stack\", \"component\": \"target\", \"kind\": \"decoder_stack\","
        "   \"source_bindings\": {}, \"representations\": [\"target.decoder_stack.f32\"]},"
        "  {\"id\": \"target.output_head\", \"component\": \"target\", \"kind\": \"output_head\","
        "   \"source_bindings\": {}, \"representations\": [\"target.output_head.f32\"]}],"
        " \"edges\": []}");
    f->index = cJSON_Parse(
        "{\"version\": 4, \"model\": \"fx\", \"family\": \"llama\", \"hidden_size\": 8,"
        " \"num_layers\": 2, \"system_graph\": \"system_graph.json\", \"moe_manifest\": null,"
        " \"authority\": \"canonical\", \"representations\": {}, \"segments\": {},"
        " \"profiles\": [], \"variants\": {}, \"unknown_future_key\": [1, 2, 3]}");
    cJSON_AddItemToObject(f->index, "encoder", cJSON_CreateObject());
    cJSON_AddStringToObject(cJSON_GetObjectItem(f->index, "encoder"), "source", f->src);
    for (int k = 0; k < FX_NOBJ; k++) {
        f->hdr[k] = cJSON_CreateObject();
        cJSON_AddStringToObject(f->hdr[k], "schema", "tensor-table");
        cJSON_AddNumberToObject(f->hdr[k], "version", 1);
        cJSON_AddStringToObject(f->hdr[k], "object", fx_obj[k]);
        char rep[64];
        snprintf(rep, sizeof rep, "%s.f32", fx_obj[k]);
        cJSON_AddStringToObject(f->hdr[k], "representation", rep);
        cJSON_AddArrayToObject(f->hdr[k], "tensors");
    }
    const int64_t emb[2] = {FX_VOCAB, FX_HIDDEN}, vec[1] = {FX_HIDDEN};
    const int64_t q[2] = {FX_HIDDEN, FX_HIDDEN}, kv[2] = {4, FX_HIDDEN};
    const int64_t gu[2] = {FX_INTER, FX_HIDDEN}, dn[2] = {FX_HIDDEN, FX_INTER};
    fx_add(f, 0, "weight", VX_F32, 2, emb, "model.embed_tokens.weight");
    for (int l = 0; l < FX_LAYERS; l++) {
        static const struct { const char *op, *src; int kind; vx_dtype dt; } ops[] = {
            {"attn_norm", "input_layernorm.weight", 0, VX_F32},
            {"attn.q_proj", "self_attn.q_proj.weight", 1, VX_F32},
            {"attn.k_proj", "self_attn.k_proj.weight", 2, VX_F32},
            {"attn.v_proj", "self_attn.v_proj.weight", 2, VX_F32},
            {"attn.o_proj", "self_attn.o_proj.weight", 1, VX_F32},
            {"ffn_norm", "post_attention_layernorm.weight", 0, VX_F32},
            {"ffn.gate_proj", "mlp.gate_proj.weight", 3, VX_BF16},
            {"ffn.up_proj", "mlp.up_proj.weight", 3, VX_BF16},
            {"ffn.down_proj", "mlp.down_proj.weight", 4, VX_BF16},
        };
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
            char name[64], src[96];
            snprintf(name, sizeof name, "layers.%d.%s", l, ops[i].op);
            snprintf(src, sizeof src, "model.layers.%d.%s", l, ops[i].src);
            const int64_t *shape[] = {vec, q, kv, gu, dn};
            fx_add(f, 1, name, ops[i].dt, ops[i].kind ? 2 : 1, shape[ops[i].kind], src);
        }
    }
    fx_add(f, 2, "final_norm", VX_F32, 1, vec, "model.norm.weight");
    fx_add(f, 2, "lm_head", VX_F32, 2, emb, "lm_head.weight");
}

static inline void fx_path(const fx *f, const char *rel, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", f->dir, rel);
}

static inline void fx_put(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(data, 1, n, fp) != n)
        abort();
    fclose(fp);
}

static inline void fx_put_json(const char *path, const cJSON *j)
{
    char *s = cJSON_Print(j);
    fx_put(path, s, strlen(s));
    free(s);
}

/* The source checkpoint: every bound tensor, same bytes, safetensors framing. */
static inline void fx_write_source(fx *f)
{
    cJSON *h = cJSON_CreateObject();
    unsigned char *data = NULL;
    uint64_t n = 0;
    for (int k = 0; k < FX_NOBJ; k++) {
        cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(f->hdr[k], "tensors")) {
            const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
            cJSON *b = cJSON_GetObjectItem(cJSON_GetObjectItem(fx_object(f, k), "source_bindings"), name);
            if (!cJSON_IsString(b))
                continue;
            uint64_t off = (uint64_t)cJSON_GetObjectItem(t, "offset")->valuedouble;
            uint64_t len = (uint64_t)cJSON_GetObjectItem(t, "length")->valuedouble;
            if (off + len > f->plen[k])
                continue;
            cJSON *e = cJSON_CreateObject();
            const char *dt = cJSON_GetObjectItem(t, "dtype")->valuestring;
            cJSON_AddStringToObject(e, "dtype", strcmp(dt, "bf16") == 0 ? "BF16" : "F32");
            cJSON_AddItemToObject(e, "shape", cJSON_Duplicate(cJSON_GetObjectItem(t, "shape"), 1));
            cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
            cJSON_AddItemToArray(o, cJSON_CreateNumber((double)n));
            cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(n + len)));
            cJSON_AddItemToObject(h, b->valuestring, e);
            data = realloc(data, n + len);
            memcpy(data + n, f->payload[k] + off, len);
            n += len;
        }
    }
    char *hs = cJSON_PrintUnformatted(h);
    uint64_t hl = strlen(hs);
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", f->src);
    FILE *fp = fopen(path, "wb");
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(hl >> (8 * i));
    fwrite(le, 1, 8, fp);
    fwrite(hs, 1, hl, fp);
    fwrite(data, 1, n, fp);
    fclose(fp);
    free(hs);
    free(data);
    cJSON_Delete(h);
}

/* Writes everything; index records (bytes, sha256, payload and source hashes) are
 * recomputed from what was written unless a test set `keep_records`. */
static inline void fx_write_opts(fx *f, int keep_records)
{
    char path[PATH_MAX];
    fx_path(f, "segments", path, sizeof path);
    mkdir(path, 0755);
    cJSON *reps = cJSON_GetObjectItem(f->index, "representations");
    cJSON *segs = cJSON_GetObjectItem(f->index, "segments");
    for (int k = 0; k < FX_NOBJ; k++) {
        cJSON *t;
        char hex[65];
        vx_sha256_ctx pay;
        vx_sha256_init(&pay, NULL);
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(f->hdr[k], "tensors")) {
            uint64_t off = (uint64_t)cJSON_GetObjectItem(t, "offset")->valuedouble;
            uint64_t len = (uint64_t)cJSON_GetObjectItem(t, "length")->valuedouble;
            if (off + len <= f->plen[k]) {
                vx_sha256_update(&pay, f->payload[k] + off, len);
                if (f->tensor_sha && !keep_records) {
                    vx_sha256_hex(f->payload[k] + off, len, hex);
                    cJSON_DeleteItemFromObject(t, "sha256");
                    cJSON_AddStringToObject(t, "sha256", hex);
                }
            }
        }
        char payhex[65];
        vx_sha256_final(&pay, payhex);
        char *hs = cJSON_PrintUnformatted(f->hdr[k]);
        uint64_t hl = strlen(hs), padded = (8 + hl + 63) / 64 * 64 - 8;
        uint64_t total = 8 + padded + f->plen[k];
        unsigned char *buf = malloc(total);
        for (int i = 0; i < 8; i++)
            buf[i] = (unsigned char)(padded >> (8 * i));
        memset(buf + 8, ' ', padded);
        memcpy(buf + 8, hs, hl);
        memcpy(buf + 8 + padded, f->payload[k], f->plen[k]);
        free(hs);
        fx_path(f, fx_rel[k], path, sizeof path);
        fx_put(path, buf, total);
        vx_sha256_hex(buf, total, hex);
        free(buf);
        if (keep_records)
            continue;
        char rep[64];
        snprintf(rep, sizeof rep, "%s.f32", fx_obj[k]);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "object", fx_obj[k]);
        cJSON_AddStringToObject(r, "encoding", "tensor-table");
        cJSON_AddStringToObject(r, "fidelity", "source-exact");
        cJSON *sl = cJSON_AddArrayToObject(r, "segments");
        cJSON_AddItemToArray(sl, cJSON_CreateString(fx_rel[k]));
        cJSON_AddStringToObject(r, "payload_sha256", payhex);
        /* Every source tensor is distinct and byte-identical: same hash as the payload. */
        cJSON_AddStringToObject(r, "source_payload_sha256", payhex);
        cJSON_DeleteItemFromObject(reps, rep);
        cJSON_AddItemToObject(reps, rep, r);
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "schema", "tensor-table");
        cJSON_AddNumberToObject(s, "version", 1);
        cJSON_AddNumberToObject(s, "bytes", (double)total);
        cJSON_AddStringToObject(s, "sha256", hex);
        cJSON_DeleteItemFromObject(segs, fx_rel[k]);
        cJSON_AddItemToObject(segs, fx_rel[k], s);
    }
    fx_path(f, "system_graph.json", path, sizeof path);
    fx_put_json(path, f->graph);
    fx_path(f, "index.json", path, sizeof path);
    fx_put_json(path, f->index);
    if (!keep_records)
        fx_write_source(f);
}

static inline void fx_write(fx *f)
{
    fx_write_opts(f, 0);
}

static inline void fx_rm(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

static inline void fx_free(fx *f)
{
    fx_rm(f->dir);
    fx_rm(f->src);
    cJSON_Delete(f->index);
    cJSON_Delete(f->graph);
    for (int k = 0; k < FX_NOBJ; k++) {
        cJSON_Delete(f->hdr[k]);
        free(f->payload[k]);
    }
}

/* Open f->dir expecting failure; returns the message (static buffer). */
static inline const char *fx_open_err(fx *f)
{
    static vx_err err;
    vx_container *c = (vx_container *)1;
    memset(&err, 0, sizeof err);
    if (vx_open(f->dir, &c, &err) == 0) {
        vx_close(c);
        return "(opened)";
    }
    return c == NULL ? err.msg : "(out not cleared)";
}

#endif
