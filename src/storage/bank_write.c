/*
 * bank_write.c — `vindex bank import`: derive a bank-shape container (convergence
 * configuration, docs/lql/BANK.md) from a graph-shape MoE container. The gated FFN
 * weights of every layer (routed experts, the shared expert, dense FFNs) move into one
 * LYRW v2 file per layer, byte for byte; the decoder object's other operands are
 * rewritten into fresh tensor-table segments; moe_manifest.json describes each layer's
 * programme; every other file is hard-linked (copied when linking fails). Regions are
 * streamed from the source mapping, so memory holds the tables only. The result is
 * built through the container writer (cwriter.c) and published when complete.
 */
#include "vindex.h"
#include "vx_int.h"
#include "lyrw.h"
#include "st.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const roles[3] = {"gate_proj", "up_proj", "down_proj"};

typedef struct importer {
    const vx_container *c;
    const char *src, *out, *object, *rep;
    vx_cw *cw;
    char *moved;                 /* per vx_tensor_at index: goes into a bank */
    cJSON *index, *manifest_layers;
    vx_bank_info *info;
    int fused;                   /* VX_BANK_FUSED: gate and up as one region */
    unsigned char *buf;          /* fused: one entry's gate + up */
    size_t nbuf;
    vx_err *err;
} importer;

/* ---------------------------------------------------------------- files */

/* Carry every regular file of the source tree except index.json and the skipped
 * segments (the decoder representation's, rewritten here). */
static int carry(void *ctx, const char *rel, const char *path, const struct stat *sb)
{
    importer *im = ctx;
    (void)path;
    (void)sb;   /* a regular file: vx_tree_files refuses anything else */
    if (strcmp(rel, "index.json") == 0)
        return 0;
    for (size_t s = 0; s < vx_segment_count(im->c); s++) {
        vx_segment_view v;
        vx_segment_at(im->c, s, &v);
        if (strcmp(v.representation, im->rep) == 0 && strcmp(v.rel, rel) == 0)
            return 0;
    }
    return vx_cw_carry(im->cw, rel, im->err);
}

/* ---------------------------------------------------------------- planning */

/* The LYRW format tag storing dtype dt, with its packing; -1 when LYRW has none. */
static int lyrw_format(vx_dtype dt, uint16_t *format, uint16_t *packing)
{
    for (unsigned f = 0; f <= VX_LF_MXFP8; f++) {
        vx_dtype got;
        if (vx_lyrw_format_dtype(f, &got) == 0 && got == dt) {
            *format = (uint16_t)f;
            *packing = vx_dtype_block_elems(dt) > 1 ? VX_PACK_BLOCKS_INLINE : VX_PACK_ROW_MAJOR;
            return 0;
        }
    }
    return -1;
}

/* One bank of a layer file: the operand of (entry, role) is name_of(...). */
typedef struct bank_plan {
    int slot;
    uint32_t entries;
    const vx_tensor *t[3];       /* entry 0's tensors, for the schema */
    const vx_tensor *bias[3];    /* entry 0's gate/up/down biases: programme gpt-oss-expert-v1 */
} bank_plan;

static const char *const bias_roles[3] = {"gate_proj.bias", "up_proj.bias", "down_proj.bias"};

static const vx_tensor *expert_bias(const importer *im, int layer, uint32_t e, int r)
{
    return vx_findf(im->c, im->object, "layers.%d.ffn.experts.%u.%s", layer, e, bias_roles[r]);
}

static const vx_tensor *operand(const importer *im, int slot, int layer, uint32_t e, int r)
{
    if (slot == VX_SLOT_ROUTED)
        return vx_findf(im->c, im->object, "layers.%d.ffn.experts.%u.%s", layer, e, roles[r]);
    if (slot == VX_SLOT_SHARED)
        return vx_findf(im->c, im->object, "layers.%d.ffn.shared.%s", layer, roles[r]);
    return vx_findf(im->c, im->object, "layers.%d.ffn.%s", layer, roles[r]);
}

static void mark_moved(importer *im, const vx_tensor *t)
{
    for (size_t i = 0; i < vx_tensor_count(im->c); i++) {
        if (vx_tensor_at(im->c, i) == t)
            im->moved[i] = 1;
    }
}

/* A bank is planned when every (entry, role) operand is present, each role has one dtype
 * and shape across entries, and LYRW can store that dtype. A dense FFN with biases stays
 * in the graph segment (the gated-mlp-v1 programme has no bias role). */
static int plan_bank(importer *im, int layer, int slot, uint32_t entries, bank_plan *p)
{
    p->slot = slot;
    p->entries = entries;
    for (int r = 0; r < 3; r++) {
        p->t[r] = operand(im, slot, layer, 0, r);
        uint16_t f, k;
        if (!p->t[r] || p->t[r]->ndim != 2 || lyrw_format(p->t[r]->dtype, &f, &k) < 0)
            return 0;
    }
    if (slot == VX_SLOT_DENSE && (vx_findf(im->c, im->object, "layers.%d.ffn.up_proj.bias", layer) ||
                                  vx_findf(im->c, im->object, "layers.%d.ffn.down_proj.bias", layer)))
        return 0;
    /* routed experts with biases (GPT-OSS) are programme gpt-oss-expert-v1: the three
     * biases of an entry form its one bias region, which needs one dtype */
    memset(p->bias, 0, sizeof p->bias);
    if (slot == VX_SLOT_ROUTED && expert_bias(im, layer, 0, 0)) {
        if (im->fused)
            return vx_errf(im->err, VX_EUNSUPPORTED, "bank import: layer %d's routed experts carry biases, "
                           "which programme gated-mlp-fused-fc1-v1 cannot hold (import without --fused)", layer);
        for (uint32_t e = 0; e < entries; e++)
            for (int r = 0; r < 3; r++) {
                const vx_tensor *b = expert_bias(im, layer, e, r);
                if (e == 0)
                    p->bias[r] = b;
                uint16_t f, k;
                if (!b || b->ndim != 1 || b->dtype != p->bias[0]->dtype || b->shape[0] != p->bias[r]->shape[0] ||
                    lyrw_format(b->dtype, &f, &k) < 0 || k != VX_PACK_ROW_MAJOR)
                    return vx_errf(im->err, VX_EUNSUPPORTED,
                                   "bank import: layer %d routed_bank entry %u: operand '%s' is absent or differs in dtype or shape from entry 0's biases",
                                   layer, e, bias_roles[r]);
            }
    }
    for (uint32_t e = 0; e < entries; e++) {
        for (int r = 0; r < 3; r++) {
            const vx_tensor *t = operand(im, slot, layer, e, r);
            if (!t || t->dtype != p->t[r]->dtype || t->ndim != 2 || t->shape[0] != p->t[r]->shape[0] ||
                t->shape[1] != p->t[r]->shape[1])
                return vx_errf(im->err, VX_EUNSUPPORTED,
                               "bank import: layer %d %s entry %u: operand '%s' is absent or differs in dtype or shape from entry 0",
                               layer, vx_bank_slot_names[slot], e, roles[r]);
        }
    }
    return 1;
}

/* ---------------------------------------------------------------- writing */

static int record_file(importer *im, const char *rel, const char *schema, int version, vx_err *err)
{
    char path[PATH_MAX], sha[65];
    struct stat st;
    if (vx_cw_path(im->cw, rel, path, sizeof path, err) < 0 || vx_sha256_file(path, sha, err) < 0)
        return -1;
    if (stat(path, &st) < 0)
        return vx_errf(err, VX_EIO, "bank import: cannot stat '%s': %s", path, strerror(errno));
    vx_segment_record(cJSON_GetObjectItemCaseSensitive(im->index, "segments"), rel, schema, version,
                      (uint64_t)st.st_size, sha);
    return 0;
}

static cJSON *bank_json(const importer *im, const bank_plan *p, uint16_t id, const char *rel)
{
    cJSON *b = cJSON_CreateObject(), *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(b, "bank_id", id);
    cJSON_AddNumberToObject(b, "experts", p->entries);
    cJSON_AddStringToObject(b, "programme", p->bias[0] ? "gpt-oss-expert-v1"
                                            : im->fused ? "gated-mlp-fused-fc1-v1" : "gated-mlp-v1");
    cJSON_AddNumberToObject(b, "programme_id", p->bias[0] ? 2 : im->fused ? 1 : 0);
    cJSON_AddStringToObject(b, "storage", rel);
    cJSON_AddNumberToObject(d, "input", (double)p->t[0]->shape[1]);
    cJSON_AddNumberToObject(d, "intermediate", (double)p->t[0]->shape[0]);
    cJSON_AddNumberToObject(d, "output", (double)p->t[2]->shape[0]);
    cJSON_AddItemToObject(b, "expert_dims", d);
    return b;
}

/* The manifest entry of a layer: the routing facts restated from the graph's execution
 * surface (which stays the authority) plus the banks. */
static cJSON *layer_json(const importer *im, int layer, const bank_plan *p, int np, const char *rel)
{
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(vx_component(im->c), "execution"), "moe");
    cJSON *l = cJSON_CreateObject();
    cJSON_AddNumberToObject(l, "layer", layer);
    cJSON_AddStringToObject(l, "input_space", "residual");
    if (p[0].slot == VX_SLOT_ROUTED) {
        char name[96];
        cJSON *r = cJSON_AddObjectToObject(l, "router"), *sel;
        snprintf(name, sizeof name, "layers.%d.ffn.router", layer);
        cJSON_AddStringToObject(r, "scores", name);
        snprintf(name, sizeof name, "layers.%d.ffn.router.score_bias", layer);
        if (vx_find(im->c, im->object, name))
            cJSON_AddStringToObject(r, "score_bias", name);
        else
            cJSON_AddNullToObject(r, "score_bias");
        cJSON_AddItemToObject(r, "scoring", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(moe, "scoring"), 1));
        sel = cJSON_AddObjectToObject(r, "selection");
        cJSON_AddStringToObject(sel, "kind", "top_k");
        cJSON_AddItemToObject(sel, "k", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(moe, "top_k"), 1));
        cJSON_AddItemToObject(sel, "n_group", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(moe, "n_group"), 1));
        cJSON_AddItemToObject(sel, "topk_group", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(moe, "topk_group"), 1));
        cJSON_AddStringToObject(r, "normalisation",
                                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(moe, "normalise")) ? "sum_to_one" : "none");
        cJSON_AddItemToObject(r, "routed_scaling",
                              cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(moe, "routed_scaling"), 1));
    }
    cJSON_AddNullToObject(l, "transforms");
    for (int i = 0; i < np; i++) {
        cJSON *b = bank_json(im, &p[i], (uint16_t)i, rel);
        if (p[i].slot == VX_SLOT_SHARED) {
            char name[96];
            snprintf(name, sizeof name, "layers.%d.ffn.shared_gate", layer);
            if (vx_find(im->c, im->object, name))
                cJSON_AddStringToObject(b, "gate", name);
            else
                cJSON_AddNullToObject(b, "gate");
        }
        cJSON_AddItemToObject(l, vx_bank_slot_names[p[i].slot], b);
    }
    cJSON_AddStringToObject(l, "reduction", p[0].slot == VX_SLOT_ROUTED ? "gate_weighted_sum" : "identity");
    cJSON_AddStringToObject(l, "combine", "residual_add");
    return l;
}

/* Tensors t[0..n) of one entry back to back into im->buf: the fused region (gate then up,
 * contiguous halves) or the bias region (gate, up, down biases). */
static int concat(importer *im, const vx_tensor *const *t, int n)
{
    size_t len = 0, at = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)t[i]->nbytes;
    if (len > im->nbuf) {
        unsigned char *b = realloc(im->buf, len);
        if (!b)
            return vx_errf(im->err, VX_ENOMEM, "bank import: out of memory joining '%s' (%zu bytes)", t[0]->name, len);
        im->buf = b;
        im->nbuf = len;
    }
    for (int i = 0; i < n; i++) {
        memcpy(im->buf + at, t[i]->data, (size_t)t[i]->nbytes);
        at += (size_t)t[i]->nbytes;
        if (i) {
            mark_moved(im, t[i]);
            st_release(t[i]->data, t[i]->nbytes);
        }
    }
    return 0;
}

/* One LYRW file for a layer's banks: regions straight from the source mapping (a fused
 * region goes through one entry's buffer). */
static int write_layer(importer *im, int layer, const bank_plan *p, int np)
{
    char rel[64], path[PATH_MAX];
    snprintf(rel, sizeof rel, "banks/layer_%03d.lyrw", layer);
    if (vx_cw_path(im->cw, rel, path, sizeof path, im->err) < 0)
        return -1;
    vx_lyrw_schema sch[3][4];
    vx_lyrw_bank_spec spec[3];
    /* Plain: gate, up, down (+ bias: one row [gate | up | down biases], programme
     * gpt-oss-expert-v1). Fused: gate_up_fused ([2 inter, hidden], gate rows first), down. */
    static const uint16_t plain[4] = {VX_ROLE_GATE, VX_ROLE_UP, VX_ROLE_DOWN, VX_ROLE_BIAS};
    static const uint16_t fused[2] = {VX_ROLE_GATE_UP_FUSED, VX_ROLE_DOWN};
    static const int plain_src[4] = {0, 1, 2, -1}, fused_src[2] = {0, 2};
    const uint16_t *roles_of = im->fused ? fused : plain;
    const int *src_of = im->fused ? fused_src : plain_src;
    int nsch_of[3];
    for (int i = 0; i < np; i++) {
        int nsch = nsch_of[i] = im->fused ? 2 : p[i].bias[0] ? 4 : 3;
        for (int r = 0; r < nsch; r++) {
            uint16_t f = 0, k = 0;
            if (roles_of[r] == VX_ROLE_BIAS) {
                lyrw_format(p[i].bias[0]->dtype, &f, &k);
                sch[i][r] = (vx_lyrw_schema){.role = VX_ROLE_BIAS, .format = f, .packing = k,
                                             .pair_id = VX_LYRW_UNPAIRED, .layout = VX_LAYOUT_UNSPECIFIED,
                                             .rows = 1,
                                             .cols = (uint32_t)(2 * p[i].bias[0]->shape[0] + p[i].bias[2]->shape[0])};
                continue;
            }
            const vx_tensor *t = p[i].t[src_of[r]];
            int is_fused = roles_of[r] == VX_ROLE_GATE_UP_FUSED;
            lyrw_format(t->dtype, &f, &k);
            sch[i][r] = (vx_lyrw_schema){.role = roles_of[r], .format = f, .packing = k,
                                         .pair_id = VX_LYRW_UNPAIRED,
                                         .layout = is_fused ? VX_LAYOUT_CONTIGUOUS_HALVES : VX_LAYOUT_UNSPECIFIED,
                                         .rows = (uint32_t)t->shape[0] * (is_fused ? 2u : 1u),
                                         .cols = (uint32_t)t->shape[1]};
        }
        spec[i] = (vx_lyrw_bank_spec){
            .id = (uint16_t)i,
            .kind = (uint16_t)(p[i].slot == VX_SLOT_ROUTED ? VX_BANK_ROUTED
                               : p[i].slot == VX_SLOT_SHARED ? VX_BANK_SHARED : VX_BANK_DENSE),
            .schema_count = (uint16_t)nsch, .num_entries = p[i].entries,
            .input_dim = (uint32_t)p[i].t[0]->shape[1], .intermediate_dim = (uint32_t)p[i].t[0]->shape[0],
            .output_dim = (uint32_t)p[i].t[2]->shape[0], .schemas = sch[i],
            .first_entry = 0, .entry_count = p[i].entries};
    }
    vx_lyrw_writer *w;
    if (vx_lyrw_writer_open(path, (uint32_t)layer, 0, spec, (uint16_t)np, &w, im->err) < 0)
        return -1;
    for (int i = 0; i < np; i++) {
        for (uint32_t e = 0; e < p[i].entries; e++) {
            for (int r = 0; r < nsch_of[i]; r++) {
                const vx_tensor *t = roles_of[r] == VX_ROLE_BIAS ? expert_bias(im, layer, e, 0)
                                                                 : operand(im, p[i].slot, layer, e, src_of[r]);
                const void *bytes = t->data;
                uint64_t n = t->nbytes;
                if (vx_cancel_flag) {
                    vx_lyrw_writer_abort(w);
                    return vx_errf(im->err, VX_ECANCEL, "bank import cancelled");
                }
                if (roles_of[r] == VX_ROLE_GATE_UP_FUSED || roles_of[r] == VX_ROLE_BIAS) {
                    const vx_tensor *part[3] = {t, NULL, NULL};
                    int nparts = roles_of[r] == VX_ROLE_BIAS ? 3 : 2;
                    if (nparts == 3) {
                        part[1] = expert_bias(im, layer, e, 1);
                        part[2] = expert_bias(im, layer, e, 2);
                    } else {
                        part[1] = operand(im, p[i].slot, layer, e, 1);
                    }
                    if (concat(im, part, nparts) < 0) {
                        vx_lyrw_writer_abort(w);
                        return -1;
                    }
                    bytes = im->buf;
                    n = 0;
                    for (int q = 0; q < nparts; q++)
                        n += part[q]->nbytes;
                }
                if (vx_lyrw_write_region(w, bytes, n, im->err) < 0) {
                    vx_lyrw_writer_abort(w);
                    return -1;
                }
                st_release(t->data, t->nbytes);   /* resident: one region at a time */
                mark_moved(im, t);
                im->info->regions++;
                im->info->bank_bytes += n;
            }
        }
        im->info->banks[p[i].slot]++;
    }
    char sha[65];
    uint64_t size = 0;
    if (vx_lyrw_writer_close(w, sha, &size, im->err) < 0)
        return -1;
    vx_segment_record(cJSON_GetObjectItemCaseSensitive(im->index, "segments"), rel, "lyrw", 2,
                      size, sha);
    cJSON_AddItemToArray(im->manifest_layers, layer_json(im, layer, p, np, rel));
    im->info->layers++;
    return 0;
}

/* Plan and write every layer's banks. */
static int write_banks(importer *im)
{
    const vx_graph_shape *sh = vx_shape_of(im->c);
    for (int layer = 0; layer < sh->layers; layer++) {
        bank_plan p[2];
        int np = 0, rc;
        if (sh->layer[layer].channel == VX_CHANNEL_MOE) {
            if ((rc = plan_bank(im, layer, VX_SLOT_ROUTED, (uint32_t)sh->experts, &p[np])) < 0)
                return -1;
            if (!rc)
                return vx_errf(im->err, VX_EUNSUPPORTED,
                               "bank import: layer %d's routed experts are not three 2-D gated projections in a dtype LYRW stores",
                               layer);
            np++;
            if ((rc = plan_bank(im, layer, VX_SLOT_SHARED, 1, &p[np])) < 0)
                return -1;
            np += rc;
        } else if ((rc = plan_bank(im, layer, VX_SLOT_DENSE, 1, &p[np])) < 0) {
            return -1;
        } else {
            np += rc;
        }
        if (np && write_layer(im, layer, p, np) < 0)
            return -1;
    }
    return 0;
}

/* The decoder object's remaining operands, in their table order, into fresh
 * tensor-table segments (sharded like the encoder), and the representation record. */
static int write_graph_segments(importer *im)
{
    size_t n = 0, total = vx_tensor_count(im->c);
    vx_segw_tensor *tt = calloc(total ? total : 1, sizeof *tt);
    const vx_tensor **src = calloc(total ? total : 1, sizeof *src);
    if (!tt || !src) {
        free(tt);
        free(src);
        return vx_errf(im->err, VX_ENOMEM, "bank import: out of memory");
    }
    for (size_t i = 0; i < total; i++) {
        const vx_tensor *t = vx_tensor_at(im->c, i);
        if (im->moved[i] || strcmp(t->object, im->object) != 0)
            continue;
        tt[n] = (vx_segw_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim};
        memcpy(tt[n].shape, t->shape, sizeof tt[n].shape);
        src[n++] = t;
    }
    cJSON *rep = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(im->index, "representations"), im->rep);
    cJSON *segs = cJSON_GetObjectItemCaseSensitive(im->index, "segments"), *list = cJSON_CreateArray(), *old;
    cJSON_ArrayForEach(old, cJSON_GetObjectItemCaseSensitive(rep, "segments"))
        cJSON_DeleteItemFromObjectCaseSensitive(segs, cJSON_GetStringValue(old));
    cJSON_ReplaceItemInObjectCaseSensitive(rep, "segments", list);
    vx_sha256_ctx pay;
    uint64_t cap;
    int rc = vx_shard_cap(&cap, im->err) < 0 ? -1 : vx_sha256_init(&pay, im->err);
    for (size_t i = 0, nfile = 0; rc == 0 && i < n; nfile++) {
        size_t fit;
        if ((rc = vx_segw_fit(tt + i, n - i, cap, "bank import", im->object, &fit, im->err)) < 0)
            break;
        char rel[256];
        vx_shard_name(rel, sizeof rel, im->object, nfile);
        vx_segw *w;
        if ((rc = vx_cw_segment(im->cw, rel, im->object, im->rep, tt + i, fit, &w, im->err)) < 0)
            break;
        for (size_t j = i; rc == 0 && j < i + fit; j++) {
            rc = vx_segw_write(w, src[j]->data, (size_t)src[j]->nbytes, im->err);
            vx_sha256_update(&pay, src[j]->data, (size_t)src[j]->nbytes);
            st_release(src[j]->data, src[j]->nbytes);
            im->info->graph_bytes += src[j]->nbytes;
        }
        char sha[65];
        uint64_t bytes;
        if (rc < 0) {
            vx_segw_abort(w);
            break;
        }
        if ((rc = vx_segw_close(w, sha, &bytes, im->err)) < 0)
            break;
        vx_segment_record(segs, rel, "tensor-table", 1, bytes, sha);
        cJSON_AddItemToArray(list, cJSON_CreateString(rel));
        i += fit;
    }
    if (rc == 0) {
        char hex[65];
        vx_sha256_final(&pay, hex);
        cJSON_ReplaceItemInObjectCaseSensitive(rep, "payload_sha256", cJSON_CreateString(hex));
        /* the tensor table now holds fewer operands than the record covered */
        if (vx_source_hash(im->c, im->object, vx_json_str(rep, "fidelity"), src, n, hex) == 0)
            cJSON_ReplaceItemInObjectCaseSensitive(rep, "source_payload_sha256", cJSON_CreateString(hex));
        else
            cJSON_DeleteItemFromObjectCaseSensitive(rep, "source_payload_sha256");
    } else {
        vx_sha256_free(&pay);
    }
    free(tt);
    free(src);
    return rc;
}

/* The decoder object: the one holding the first router operand. */
static const char *moe_object(const vx_container *c)
{
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        const char *r = strstr(t->name, ".ffn.router");
        if (r && strcmp(r, ".ffn.router") == 0)
            return t->object;
    }
    return NULL;
}

static int import(importer *im)
{
    const vx_container *c = im->c;
    if (vx_container_shape(c) == VX_SHAPE_BANK)
        return vx_errf(im->err, VX_EARG, "bank import: '%s' is already a bank-shape container", im->src);
    if (!vx_shape_of(c)->experts || !(im->object = moe_object(c)))
        return vx_errf(im->err, VX_EUNSUPPORTED,
                       "bank import: '%s' has no routed layers (execution.moe is null); a bank container holds MoE expert banks",
                       im->src);
    im->rep = vx_bound_representation(c, im->object);
    size_t nrep = 0;
    for (size_t i = 0; i < vx_segment_count(c); i++) {
        vx_segment_view v;
        vx_segment_at(c, i, &v);
        nrep += strcmp(v.object, im->object) == 0 && strcmp(v.representation, im->rep) != 0;
    }
    if (nrep)
        return vx_errf(im->err, VX_EUNSUPPORTED,
                       "bank import: object '%s' has representations beside '%s'; import a container with one", im->object,
                       im->rep);
    if (vx_cw_open(&im->cw, im->out, im->src, "bank import", im->err) < 0)
        return -1;
    cJSON *manifest = cJSON_CreateObject();
    cJSON_AddNumberToObject(manifest, "schema", VX_MANIFEST_SCHEMA);
    cJSON_AddStringToObject(manifest, "object", im->object);
    im->manifest_layers = cJSON_AddArrayToObject(manifest, "layers");
    int rc = vx_tree_files(im->src, carry, im, im->err);
    if (rc == 0)
        rc = write_banks(im);
    if (rc == 0)
        rc = write_graph_segments(im);
    if (rc == 0)
        rc = vx_cw_json(im->cw, "moe_manifest.json", manifest, im->err);
    if (rc == 0) {
        cJSON *rep = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(im->index, "representations"), im->rep);
        cJSON *files = cJSON_CreateArray(), *l;
        cJSON_ArrayForEach(l, im->manifest_layers) {
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(l, "routed_bank");
            if (!b)
                b = cJSON_GetObjectItemCaseSensitive(l, "dense_bank");
            cJSON_AddItemToArray(files, cJSON_CreateString(vx_json_str(b, "storage")));
        }
        cJSON_DeleteItemFromObjectCaseSensitive(rep, "bank_storage");
        cJSON_AddItemToObject(rep, "bank_storage", files);
        cJSON_ReplaceItemInObjectCaseSensitive(im->index, "moe_manifest", cJSON_CreateString("moe_manifest.json"));
        rc = record_file(im, "moe_manifest.json", "moe-manifest", VX_MANIFEST_SCHEMA, im->err);
    }
    if (rc == 0)
        rc = vx_cw_index(im->cw, im->index, im->err);
    cJSON_Delete(manifest);
    return rc;
}


int vx_bank_import(const char *src_dir, const char *out_dir, unsigned flags, vx_bank_info *info,
                   vx_err *err)
{
    vx_bank_info scratch;
    if (!info)
        info = &scratch;
    memset(info, 0, sizeof *info);
    if (!src_dir || !out_dir || !*out_dir)
        return vx_errf(err, VX_EARG, "bank import: a source container and an output directory are required");
    if (vx_cw_check(out_dir, src_dir, 0, "bank import", err) < 0)
        return -1;
    vx_container *c;
    if (vx_open(src_dir, &c, err) < 0)
        return -1;
    importer im = {.c = c, .src = src_dir, .out = out_dir, .info = info, .err = err,
                   .fused = (flags & VX_BANK_FUSED) != 0,
                   .moved = calloc(vx_tensor_count(c) + 1, 1),
                   .index = cJSON_Duplicate(vx_index_json(c), 1)};
    int rc = !im.moved || !im.index ? vx_errf(err, VX_ENOMEM, "bank import: out of memory") : import(&im);
    if (rc == 0)
        rc = vx_cw_commit(im.cw, err);
    else
        vx_cw_abort(im.cw);
    free(im.moved);
    free(im.buf);
    cJSON_Delete(im.index);
    vx_close(c);
    return rc;
}
