/*
 * downmeta.c — the encode hook that computes down-meta: for every FFN feature f of every
 * layer, logits = E · down[:, f] over the whole vocabulary (E the unscaled embedding, no
 * final norm), keeping the top BRW_DOWN_TOP_K (id, logit) pairs; then records the layer
 * bands in index.json.
 *
 * This is 2·vocab·hidden·features·layers flops (16 TFLOP for a 1.1B Llama), so it runs in
 * two passes per chunk of FC features:
 *   1. the whole vocabulary is scored by the engine's matrix door (eng_matmul_rows: E read
 *      in place in its stored dtype, the chunk's down columns as the FC activation rows;
 *      the AMX or AVX-512 prefill GEMM at f32 accuracy, on the engine's thread pool), one
 *      vocabulary tile at a time, keeping CAND candidates per feature;
 *   2. the candidates are rescored one row at a time (eng_row_dot, exact weights, f32),
 *      and the best BRW_DOWN_TOP_K of them are written.
 * Layers stream one at a time, chunks one after the other (each product is parallel).
 */
#include "brw_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <immintrin.h>

#define FC 256          /* features per chunk */
#define CAND 16         /* candidates per feature kept by the first pass */
#define VTILE 4096      /* vocabulary rows per product */

/* Insert (id, x) into a descending list of current length *n (capacity k). Ties keep the
 * earlier (lower) id. */
static inline void topk_insert(int32_t *ids, float *val, int *n, int k, int32_t id, float x)
{
    int i = *n;
    if (i == k) {
        if (!(x > val[k - 1]))
            return;
        i = k - 1;
    } else {
        (*n)++;
    }
    while (i > 0 && x > val[i - 1]) {
        val[i] = val[i - 1];
        ids[i] = ids[i - 1];
        i--;
    }
    val[i] = x;
    ids[i] = id;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void putf(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put32(p, u);
}

/* ---------------------------------------------------------------- shared state */

typedef struct dm_chunk {
    const brw_part *part;
    int64_t f0;
    int nb;
} dm_chunk;

/* The scratch of the pass: one chunk at a time. */
typedef struct dm_worker {
    const brw_shape *s;
    uint8_t *rec;            /* the layer's records [features, record bytes] */
    size_t rb;
    float *dcol;             /* [FC, hidden] the chunk's down columns, feature-major */
    float *cbuf;             /* [FC, VTILE] logits of one vocabulary tile */
    int32_t *cid;            /* [FC, CAND] */
    float *cval;
    int *cn;
} dm_worker;

/* Load the chunk's down columns into w->dcol as f32, feature-major. */
static void load_cols(dm_worker *w, const dm_chunk *ch)
{
    const brw_shape *s = w->s;
    const vx_tensor *dn = ch->part->down;
    int H = s->hidden;
    unsigned be = 1, bb = 0;
    if (vx_quant_block(dn->dtype, &be, &bb) == 0) {
        /* a block codec with source authority (MXFP4 experts): decode the blocks covering
         * the chunk's features of each row */
        size_t b0 = (size_t)ch->f0 / be, b1 = ((size_t)ch->f0 + (size_t)ch->nb + be - 1) / be;
        size_t rb = (size_t)ch->part->rows / be * bb, skip = (size_t)ch->f0 - b0 * be;
        float buf[FC + 256];
        for (int h = 0; h < H; h++) {
            vx_dequantize_row(dn->dtype, (const uint8_t *)dn->data + (size_t)h * rb + b0 * bb, buf,
                              (b1 - b0) * be);
            for (int j = 0; j < ch->nb; j++)
                w->dcol[(size_t)j * (size_t)H + (size_t)h] = buf[skip + (size_t)j];
        }
        return;
    }
    size_t esz = dn->dtype == VX_F32 ? 4 : 2;
    float tmp[FC];
    for (int h = 0; h < H; h++) {
        const uint8_t *row = (const uint8_t *)dn->data +
                             ((size_t)h * (size_t)ch->part->rows + (size_t)ch->f0) * esz;
        vx_row_to_f32(dn->dtype, row, tmp, (size_t)ch->nb);
        for (int j = 0; j < ch->nb; j++)
            w->dcol[(size_t)j * (size_t)H + (size_t)h] = tmp[j];
    }
}

/* Rescore each feature's candidates exactly and write its record. */
static void rescore(dm_worker *w, const dm_chunk *ch)
{
    const brw_shape *s = w->s;
    int H = s->hidden, k = BRW_DOWN_TOP_K;
    size_t esz = s->embed->dtype == VX_F32 ? 4 : 2;
    for (int j = 0; j < ch->nb; j++) {
        int32_t ids[CAND];
        float val[CAND];
        int n = 0;
        for (int c = 0; c < w->cn[j]; c++) {
            int32_t id = w->cid[(size_t)j * CAND + c];
            float x = eng_row_dot(s->embed->dtype,
                                  (const uint8_t *)s->embed->data + (size_t)id * (size_t)H * esz,
                                  w->dcol + (size_t)j * (size_t)H, H);
            /* insert by (value desc, id asc) so equal logits order by id */
            int i = n++;
            while (i > 0 && (x > val[i - 1] || (x == val[i - 1] && id < ids[i - 1]))) {
                val[i] = val[i - 1];
                ids[i] = ids[i - 1];
                i--;
            }
            val[i] = x;
            ids[i] = id;
        }
        uint8_t *r = w->rec + (size_t)(ch->part->first + ch->f0 + j) * w->rb;
        memset(r, 0, w->rb);
        if (n == 0)
            continue;
        put32(r, (uint32_t)ids[0]);
        putf(r + 4, val[0]);
        for (int t = 0; t < n && t < k; t++) {
            put32(r + 8 + 8 * t, (uint32_t)ids[t]);
            putf(r + 12 + 8 * t, val[t]);
        }
    }
}

/* ---------------------------------------------------------------- first pass */

/* Candidates of the chunk's features over the whole vocabulary. */
static void rank_chunk(dm_worker *w, const dm_chunk *ch)
{
    const brw_shape *s = w->s;
    const vx_tensor *E = s->embed;
    int H = s->hidden, V = s->vocab;
    size_t esz = E->dtype == VX_F32 ? 4 : 2;
    memset(w->cn, 0, (size_t)ch->nb * sizeof *w->cn);
    for (int v0 = 0; v0 < V; v0 += VTILE) {
        int vt = V - v0 < VTILE ? V - v0 : VTILE;
        eng_matmul_rows(E->dtype, (const uint8_t *)E->data + (size_t)v0 * H * esz, vt, H,
                        (size_t)H * esz, w->dcol, ch->nb, w->cbuf);
        for (int j = 0; j < ch->nb; j++) {
            const float *row = w->cbuf + (size_t)j * (size_t)vt;
            int32_t *ids = w->cid + (size_t)j * CAND;
            float *val = w->cval + (size_t)j * CAND;
            for (int c0 = 0; c0 < vt; c0 += 8) {
                /* most blocks hold nothing above the current threshold: test 8 at once */
                if (w->cn[j] == CAND && c0 + 8 <= vt &&
                    !_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + c0),
                                                      _mm256_set1_ps(val[CAND - 1]), _CMP_GT_OQ)))
                    continue;
                for (int v = c0; v < c0 + 8 && v < vt; v++)
                    if (w->cn[j] < CAND || row[v] > val[CAND - 1])
                        topk_insert(ids, val, &w->cn[j], CAND, v0 + v, row[v]);
            }
        }
    }
}

static void worker_free(dm_worker *w)
{
    free(w->dcol);
    free(w->cbuf);
    free(w->cid);
    free(w->cval);
    free(w->cn);
}

static int write_meta(const brw_shape *s, const char *path, vx_err *err)
{
    dm_worker w = {.s = s, .rb = 8 + 8 * (size_t)BRW_DOWN_TOP_K};
    size_t H = (size_t)s->hidden;
    int rc = -1;
    FILE *f = NULL;
    dm_chunk *chunks = NULL;
    int64_t maxf = 0;
    for (int l = 0; l < s->layers; l++)
        if (s->layer[l].features > maxf)
            maxf = s->layer[l].features;
    size_t max_chunks = 0;
    for (int l = 0; l < s->layers; l++) {
        size_t n = 0;
        for (int p = 0; p < s->layer[l].n_parts; p++)
            n += (size_t)((s->layer[l].parts[p].rows + FC - 1) / FC);
        if (n > max_chunks)
            max_chunks = n;
    }
    chunks = malloc((max_chunks + 1) * sizeof *chunks);
    w.rec = malloc((size_t)maxf * w.rb + 1);
    w.dcol = malloc((size_t)FC * H * sizeof *w.dcol);
    w.cbuf = malloc((size_t)FC * VTILE * sizeof *w.cbuf);
    w.cid = malloc((size_t)FC * CAND * sizeof *w.cid);
    w.cval = malloc((size_t)FC * CAND * sizeof *w.cval);
    w.cn = malloc((size_t)FC * sizeof *w.cn);
    if (!chunks || !w.rec || !w.dcol || !w.cbuf || !w.cid || !w.cval || !w.cn) {
        vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
        goto done;
    }
    f = fopen(path, "wb");
    if (!f) {
        vx_errf(err, VX_EIO, "down_meta: cannot create \"%s\": %s", path, strerror(errno));
        goto done;
    }
    uint8_t hdr[16];
    put32(hdr, BRW_DMET_MAGIC);
    put32(hdr + 4, 1);
    put32(hdr + 8, (uint32_t)s->layers);
    put32(hdr + 12, BRW_DOWN_TOP_K);
    if (fwrite(hdr, 1, 16, f) != 16) {
        vx_errf(err, VX_EIO, "down_meta: write failed: %s", strerror(errno));
        goto done;
    }
    for (int l = 0; l < s->layers; l++) {
        const brw_layer *L = &s->layer[l];
        size_t n_chunks = 0;
        for (int p = 0; p < L->n_parts; p++)
            for (int64_t f0 = 0; f0 < L->parts[p].rows; f0 += FC)
                chunks[n_chunks++] = (dm_chunk){&L->parts[p], f0,
                    (int)(L->parts[p].rows - f0 < FC ? L->parts[p].rows - f0 : FC)};
        for (size_t i = 0; i < n_chunks && !vx_cancel_flag; i++) {
            load_cols(&w, &chunks[i]);
            rank_chunk(&w, &chunks[i]);
            rescore(&w, &chunks[i]);
        }
        if (vx_cancel_flag) {
            vx_errf(err, VX_ECANCEL, "down_meta: cancelled at layer %d", l);
            goto done;
        }
        uint8_t cnt[4];
        put32(cnt, (uint32_t)L->features);
        if (fwrite(cnt, 1, 4, f) != 4 ||
            fwrite(w.rec, w.rb, (size_t)L->features, f) != (size_t)L->features) {
            vx_errf(err, VX_EIO, "down_meta: write failed: %s", strerror(errno));
            goto done;
        }
    }
    if (fflush(f) != 0 || ferror(f)) {
        vx_errf(err, VX_EIO, "down_meta: write failed: %s", strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (f && fclose(f) != 0 && rc == 0)
        rc = vx_errf(err, VX_EIO, "down_meta: close failed: %s", strerror(errno));
    worker_free(&w);
    free(chunks);
    free(w.rec);
    return rc;
}

static cJSON *band_json(const int r[2])
{
    if (r[0] < 0)
        return cJSON_CreateNull();
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber(r[0]));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(r[1]));
    return a;
}

int brw_encode_finish(void *ctx, const char *tmpdir, cJSON *index, vx_err *err)
{
    const vx_encode_opts *o = ctx;
    vx_container *c = NULL;
    if (vx_open(tmpdir, &c, err) != 0)
        return -1;
    brw_shape s;
    if (brw_shape_read(c, &s, err) != 0) {
        vx_close(c);
        return -1;
    }
    /* down-meta describes the canonical weights: the columns are read as f32/f16/bf16, or
     * as a block codec only when the stack's representation has source authority (GPT-OSS
     * experts as the checkpoint packs them); a quantised derivation is not the model */
    int rc = -1;
    const char *rid = vx_bound_representation(c, "target.decoder_stack");
    const cJSON *fid = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(vx_index_json(c),
                                                                          "representations"),
                                         rid ? rid : ""), "fidelity");
    int canonical = cJSON_IsString(fid) && strncmp(fid->valuestring, "source-", 7) == 0;
    unsigned be, bb;
    for (int l = 0; l < s.layers; l++)
        for (int p = 0; p < s.layer[l].n_parts; p++) {
            const vx_tensor *dn = s.layer[l].parts[p].down;
            if (dn->dtype != VX_F32 && dn->dtype != VX_F16 && dn->dtype != VX_BF16 &&
                !(canonical && vx_quant_block(dn->dtype, &be, &bb) == 0 && FC % be == 0)) {
                vx_errf(err, VX_EUNSUPPORTED, "down_meta: operand \"%s\" is stored as %s; "
                        "down-meta is computed from f32, f16 or bf16 weights", dn->name,
                        vx_dtype_name(dn->dtype));
                goto done;
            }
        }
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/browse", tmpdir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        vx_errf(err, VX_EIO, "down_meta: cannot create \"%s\": %s", dir, strerror(errno));
        goto done;
    }
    snprintf(path, sizeof path, "%s/down_meta.bin", dir);
    char hex[65];
    if (write_meta(&s, path, err) != 0 || vx_sha256_file(path, hex, err) != 0)
        goto done;
    /* the band override: from the options when given as ctx, else as the encoder
     * recorded it (index.encoder.layer_band) */
    int lo = o ? o->layer_lo : -1, hi = o ? o->layer_hi : -1;
    const cJSON *lb0 = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(index, "encoder"), "layer_band");
    if (lo < 0 && cJSON_IsArray(lb0) && cJSON_GetArraySize(lb0) == 2 &&
        cJSON_IsNumber(cJSON_GetArrayItem(lb0, 0)) && cJSON_IsNumber(cJSON_GetArrayItem(lb0, 1))) {
        lo = (int)cJSON_GetArrayItem(lb0, 0)->valuedouble;
        hi = (int)cJSON_GetArrayItem(lb0, 1)->valuedouble;
    }
    int band[3][2];
    brw_bands_for_depth(s.layers, lo, hi, band);
    cJSON *br = cJSON_CreateObject();
    cJSON_AddStringToObject(br, "down_meta", "browse/down_meta.bin");
    cJSON_AddStringToObject(br, "down_meta_sha256", hex);
    cJSON_AddNumberToObject(br, "down_top_k", BRW_DOWN_TOP_K);
    cJSON *lb = cJSON_AddObjectToObject(br, "layer_bands");
    for (int b = 0; b < 3; b++)
        cJSON_AddItemToObject(lb, brw_band_name(b), band_json(band[b]));
    if (lo >= 0 && hi >= lo)
        cJSON_AddStringToObject(br, "band_rule", "knowledge band given at encode "
                                "(layer_lo-layer_hi); syntax before it, output after it");
    else
        cJSON_AddStringToObject(br, "band_rule", brw_band_rule);
    if (cJSON_HasObjectItem(index, "browse"))
        cJSON_ReplaceItemInObjectCaseSensitive(index, "browse", br);
    else
        cJSON_AddItemToObject(index, "browse", br);
    rc = 0;
done:
    brw_shape_free(&s);
    vx_close(c);
    return rc;
}
