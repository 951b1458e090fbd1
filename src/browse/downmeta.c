/*
 * downmeta.c — the encode hook that computes down-meta: for every FFN feature f of every
 * layer, logits = E · down[:, f] over the whole vocabulary (E the unscaled embedding, no
 * final norm), keeping the top BRW_DOWN_TOP_K (id, logit) pairs; then records the layer
 * bands in index.json.
 *
 * The product is a blocked SGEMM: E is widened to f32 once, down columns are taken
 * BLOCK at a time (widened when stored as f16/bf16), and C = Dᵀ·E_tileᵀ is computed one
 * vocabulary tile at a time so each feature's logits are a contiguous row that a bounded
 * insertion scan reduces to its top-k. Layers stream one at a time; memory is E in f32
 * plus one block and one tile.
 */
#include "brw_int.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BLOCK 256
#define VTILE 4096

/* Insert (id, x) into a descending top-k list of current length *n. Ties keep the
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

typedef struct dm_work {
    const brw_shape *s;
    float *E;                /* [vocab, hidden] f32 */
    float *D;                /* [hidden, BLOCK] */
    float *C;                /* [BLOCK, VTILE] */
    int32_t *ids;            /* [BLOCK, k] */
    float *val;              /* [BLOCK, k] */
    int *cnt;                /* [BLOCK] */
    uint8_t *rec;            /* [BLOCK, record bytes] */
} dm_work;

/* Down-meta of one part's features [f0, f0+nb), written to f. */
static int do_block(dm_work *w, const brw_part *p, int64_t f0, int nb, FILE *f, vx_err *err)
{
    const brw_shape *s = w->s;
    int H = s->hidden, V = s->vocab, k = BRW_DOWN_TOP_K;
    const vx_tensor *dn = p->down;
    const float *A;
    int lda;
    if (dn->dtype == VX_F32) {
        A = (const float *)dn->data + f0;
        lda = (int)p->rows;
    } else {
        size_t esz = 2;
        for (int h = 0; h < H; h++)
            vx_row_to_f32(dn->dtype,
                          (const uint8_t *)dn->data + ((size_t)h * (size_t)p->rows + (size_t)f0) * esz,
                          w->D + (size_t)h * nb, (size_t)nb);
        A = w->D;
        lda = nb;
    }
    memset(w->cnt, 0, (size_t)nb * sizeof *w->cnt);
    for (int v0 = 0; v0 < V; v0 += VTILE) {
        int vt = V - v0 < VTILE ? V - v0 : VTILE;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, nb, vt, H, 1.0f, A, lda,
                    w->E + (size_t)v0 * (size_t)H, H, 0.0f, w->C, vt);
        for (int j = 0; j < nb; j++) {
            const float *row = w->C + (size_t)j * (size_t)vt;
            int32_t *ids = w->ids + (size_t)j * k;
            float *val = w->val + (size_t)j * k;
            for (int v = 0; v < vt; v++) {
                float x = row[v];
                if (w->cnt[j] == k && !(x > val[k - 1]))
                    continue;
                topk_insert(ids, val, &w->cnt[j], k, v0 + v, x);
            }
        }
    }
    size_t rb = 8 + 8 * (size_t)k;
    memset(w->rec, 0, rb * (size_t)nb);
    for (int j = 0; j < nb; j++) {
        uint8_t *r = w->rec + (size_t)j * rb;
        if (w->cnt[j] == 0)
            continue;
        put32(r, (uint32_t)w->ids[(size_t)j * k]);
        putf(r + 4, w->val[(size_t)j * k]);
        for (int t = 0; t < w->cnt[j]; t++) {
            put32(r + 8 + 8 * t, (uint32_t)w->ids[(size_t)j * k + t]);
            putf(r + 12 + 8 * t, w->val[(size_t)j * k + t]);
        }
    }
    if (fwrite(w->rec, rb, (size_t)nb, f) != (size_t)nb)
        return vx_errf(err, VX_EIO, "down_meta: write failed: %s", strerror(errno));
    return 0;
}

static int write_meta(const brw_shape *s, const char *path, vx_err *err)
{
    dm_work w = {.s = s};
    size_t H = (size_t)s->hidden, V = (size_t)s->vocab, k = BRW_DOWN_TOP_K;
    w.E = malloc(V * H * sizeof *w.E);
    w.D = malloc(H * BLOCK * sizeof *w.D);
    w.C = malloc((size_t)BLOCK * VTILE * sizeof *w.C);
    w.ids = malloc(BLOCK * k * sizeof *w.ids);
    w.val = malloc(BLOCK * k * sizeof *w.val);
    w.cnt = malloc(BLOCK * sizeof *w.cnt);
    w.rec = malloc(BLOCK * (8 + 8 * k));
    FILE *f = NULL;
    int rc = -1;
    if (!w.E || !w.D || !w.C || !w.ids || !w.val || !w.cnt || !w.rec) {
        vx_errf(err, VX_ENOMEM, "down_meta: out of memory (embedding %zu x %zu as f32)", V, H);
        goto done;
    }
    size_t esz = s->embed->dtype == VX_F32 ? 4 : 2;
    for (size_t v = 0; v < V; v++)
        vx_row_to_f32(s->embed->dtype, (const uint8_t *)s->embed->data + v * H * esz,
                      w.E + v * H, H);
    f = fopen(path, "wb");
    if (!f) {
        vx_errf(err, VX_EIO, "down_meta: cannot create \"%s\": %s", path, strerror(errno));
        goto done;
    }
    uint8_t hdr[16];
    put32(hdr, BRW_DMET_MAGIC);
    put32(hdr + 4, 1);
    put32(hdr + 8, (uint32_t)s->layers);
    put32(hdr + 12, (uint32_t)k);
    if (fwrite(hdr, 1, 16, f) != 16) {
        vx_errf(err, VX_EIO, "down_meta: write failed: %s", strerror(errno));
        goto done;
    }
    for (int l = 0; l < s->layers; l++) {
        const brw_layer *L = &s->layer[l];
        uint8_t cnt[4];
        put32(cnt, (uint32_t)L->features);
        if (fwrite(cnt, 1, 4, f) != 4) {
            vx_errf(err, VX_EIO, "down_meta: write failed: %s", strerror(errno));
            goto done;
        }
        for (int p = 0; p < L->n_parts; p++)
            for (int64_t f0 = 0; f0 < L->parts[p].rows; f0 += BLOCK) {
                if (vx_cancel_flag) {
                    vx_errf(err, VX_ECANCEL, "down_meta: cancelled at layer %d", l);
                    goto done;
                }
                int nb = (int)(L->parts[p].rows - f0 < BLOCK ? L->parts[p].rows - f0 : BLOCK);
                if (do_block(&w, &L->parts[p], f0, nb, f, err) != 0)
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
    free(w.E);
    free(w.D);
    free(w.C);
    free(w.ids);
    free(w.val);
    free(w.cnt);
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
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/browse", tmpdir);
    int rc = -1;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        vx_errf(err, VX_EIO, "down_meta: cannot create \"%s\": %s", dir, strerror(errno));
        goto done;
    }
    snprintf(path, sizeof path, "%s/down_meta.bin", dir);
    if (write_meta(&s, path, err) != 0)
        goto done;
    int band[3][2];
    brw_bands_for_depth(s.layers, o ? o->layer_lo : -1, o ? o->layer_hi : -1, band);
    cJSON *br = cJSON_CreateObject();
    cJSON_AddStringToObject(br, "down_meta", "browse/down_meta.bin");
    cJSON_AddNumberToObject(br, "down_top_k", BRW_DOWN_TOP_K);
    cJSON *lb = cJSON_AddObjectToObject(br, "layer_bands");
    for (int b = 0; b < 3; b++)
        cJSON_AddItemToObject(lb, brw_band_name(b), band_json(band[b]));
    if (o && o->layer_lo >= 0 && o->layer_hi >= o->layer_lo)
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
