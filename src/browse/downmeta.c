/*
 * downmeta.c — the encode hook that computes down-meta: for every FFN feature f of every
 * layer, logits = E · down[:, f] over the whole vocabulary (E the unscaled embedding, no
 * final norm), keeping the top BRW_DOWN_TOP_K (id, logit) pairs; then records the layer
 * bands in index.json.
 *
 * This is 2·vocab·hidden·features·layers flops (16 TFLOP for a 1.1B Llama), so it runs in
 * two passes per chunk of FC features:
 *   1. a fast pass ranks the whole vocabulary and keeps CAND candidates per feature: on
 *      CPUs with AMX-BF16 a tile kernel over E and the down columns rounded to bf16
 *      (exact products for bf16 checkpoints), elsewhere (or with LQL_NO_AMX set) a
 *      blocked f32 SGEMM one vocabulary tile at a time;
 *   2. the candidates are rescored exactly in f32 from the stored values, and the best
 *      BRW_DOWN_TOP_K of them are written.
 * Both paths write identical bytes unless the fast pass misorders a logit outside the top
 * CAND into the top 10 (a gap below bf16 rounding noise). Layers stream one at a time;
 * chunks are shared among eng_threads() workers (the SGEMM path uses OpenBLAS's threads).
 */
#include "brw_int.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HAVE_AMX 1
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx2")))
#endif

#define FC 256          /* features per chunk */
#define CAND 16         /* candidates per feature kept by the fast pass */
#define VTILE 4096      /* vocabulary tile of the SGEMM pass */

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

typedef struct dm_ctx {
    const brw_shape *s;
    int amx;
    int hpad, ks, vpad;      /* AMX: hidden padded to 32, k-steps, vocab padded to 32 */
    uint16_t *epack;         /* AMX: E in VNNI tiles [vpad/16][ks][16][16][2] */
    float *ef32;             /* SGEMM: E as f32 [vocab, hidden] */
    dm_chunk *chunks;
    size_t n_chunks, next;   /* next: atomic work counter */
    uint8_t *rec;            /* the layer's records [features, record bytes] */
    size_t rb;
    int failed;
} dm_ctx;

typedef struct dm_worker {
    dm_ctx *x;
    float *dcol;             /* [FC, hidden] the chunk's down columns, feature-major */
    uint16_t *apack;         /* AMX: [FC/16][ks][16][32] */
    float *cbuf;             /* AMX: [32, 32]; SGEMM: [FC, VTILE] */
    int32_t *cid;            /* [FC, CAND] */
    float *cval;
    int *cn;
} dm_worker;

/* Load the chunk's down columns into w->dcol as f32, feature-major. */
static void load_cols(dm_worker *w, const dm_chunk *ch)
{
    const brw_shape *s = w->x->s;
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
    const brw_shape *s = w->x->s;
    int H = s->hidden, k = BRW_DOWN_TOP_K;
    size_t esz = s->embed->dtype == VX_F32 ? 4 : 2;
    for (int j = 0; j < ch->nb; j++) {
        int32_t ids[CAND];
        float val[CAND];
        int n = 0;
        for (int c = 0; c < w->cn[j]; c++) {
            int32_t id = w->cid[(size_t)j * CAND + c];
            float x = brw_dot_row(s->embed->dtype,
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
        uint8_t *r = w->x->rec + (size_t)(ch->part->first + ch->f0 + j) * w->x->rb;
        memset(r, 0, w->x->rb);
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

/* ---------------------------------------------------------------- SGEMM pass */

static void sgemm_chunk(dm_worker *w, const dm_chunk *ch)
{
    const brw_shape *s = w->x->s;
    int H = s->hidden, V = s->vocab;
    memset(w->cn, 0, (size_t)ch->nb * sizeof *w->cn);
    for (int v0 = 0; v0 < V; v0 += VTILE) {
        int vt = V - v0 < VTILE ? V - v0 : VTILE;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ch->nb, vt, H, 1.0f, w->dcol, H,
                    w->x->ef32 + (size_t)v0 * (size_t)H, H, 0.0f, w->cbuf, vt);
        for (int j = 0; j < ch->nb; j++) {
            const float *row = w->cbuf + (size_t)j * (size_t)vt;
            int32_t *ids = w->cid + (size_t)j * CAND;
            float *val = w->cval + (size_t)j * CAND;
            for (int v = 0; v < vt; v++)
                if (w->cn[j] < CAND || row[v] > val[CAND - 1])
                    topk_insert(ids, val, &w->cn[j], CAND, v0 + v, row[v]);
        }
    }
}

/* ---------------------------------------------------------------- AMX pass */

#ifdef HAVE_AMX
typedef struct tilecfg {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tilecfg;

/* CPUID says AMX-TILE and AMX-BF16, and the kernel grants the tile state. */
static int amx_available(void)
{
    unsigned a, b, c, d;
    if (getenv("LQL_NO_AMX"))
        return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
        return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

static uint16_t to_bf16(float x)
{
    return vx_f32_to_bf16(x);
}

/* E into VNNI tiles: tile (vb, kk) row r holds, for each of 16 tokens n, the pair
 * (E[vb·16+n][kk·32+2r], E[…][kk·32+2r+1]); padding is zero. */
static void pack_e(dm_ctx *x)
{
    const brw_shape *s = x->s;
    int H = s->hidden, V = s->vocab;
    size_t esz = s->embed->dtype == VX_F32 ? 4 : 2;
    float *row = malloc((size_t)x->hpad * sizeof *row);
    if (!row) {
        x->failed = 1;
        return;
    }
    for (int v = 0; v < x->vpad; v++) {
        memset(row, 0, (size_t)x->hpad * sizeof *row);
        if (v < V)
            vx_row_to_f32(s->embed->dtype, (const uint8_t *)s->embed->data + (size_t)v * (size_t)H * esz,
                          row, (size_t)H);
        int vb = v / 16, n = v % 16;
        for (int h = 0; h < x->hpad; h += 2) {
            int kk = h / 32, r = (h % 32) / 2;
            uint16_t *t = x->epack + (((size_t)vb * (size_t)x->ks + (size_t)kk) * 16 + (size_t)r) * 32 +
                          (size_t)n * 2;
            t[0] = to_bf16(row[h]);
            t[1] = to_bf16(row[h + 1]);
        }
    }
    free(row);
}

AMX_TARGET static void amx_chunk(dm_worker *w, const dm_chunk *ch)
{
    const dm_ctx *x = w->x;
    int H = x->s->hidden, V = x->s->vocab, KS = x->ks;
    int nt = (ch->nb + 31) / 32 * 2;   /* A tiles of 16 features, an even count */
    /* pack A: tile (t, kk) row r = feature t·16+r, hidden kk·32 … +31 */
    for (int t = 0; t < nt; t++)
        for (int kk = 0; kk < KS; kk++)
            for (int r = 0; r < 16; r++) {
                int f = t * 16 + r;
                uint16_t *dst = w->apack + (((size_t)t * (size_t)KS + (size_t)kk) * 16 + (size_t)r) * 32;
                for (int c = 0; c < 32; c++) {
                    int h = kk * 32 + c;
                    dst[c] = f < ch->nb && h < H ? to_bf16(w->dcol[(size_t)f * (size_t)H + (size_t)h]) : 0;
                }
            }
    memset(w->cn, 0, (size_t)ch->nb * sizeof *w->cn);
    for (int vb = 0; vb < x->vpad / 16; vb += 2) {
        const uint16_t *b0 = x->epack + (size_t)vb * (size_t)KS * 512;
        const uint16_t *b1 = b0 + (size_t)KS * 512;
        for (int t = 0; t < nt; t += 2) {
            const uint16_t *a0 = w->apack + (size_t)t * (size_t)KS * 512;
            const uint16_t *a1 = a0 + (size_t)KS * 512;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int kk = 0; kk < KS; kk++) {
                _tile_loadd(4, a0 + (size_t)kk * 512, 64);
                _tile_loadd(5, a1 + (size_t)kk * 512, 64);
                _tile_loadd(6, b0 + (size_t)kk * 512, 64);
                _tile_loadd(7, b1 + (size_t)kk * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, w->cbuf, 128);
            _tile_stored(1, w->cbuf + 16, 128);
            _tile_stored(2, w->cbuf + 16 * 32, 128);
            _tile_stored(3, w->cbuf + 16 * 32 + 16, 128);
            for (int r = 0; r < 32; r++) {
                int j = t * 16 + r;
                if (j >= ch->nb)
                    break;
                int32_t *ids = w->cid + (size_t)j * CAND;
                float *val = w->cval + (size_t)j * CAND;
                const float *row = w->cbuf + (size_t)r * 32;
                for (int c0 = 0; c0 < 32; c0 += 8) {
                    /* most blocks hold nothing above the current threshold: test 8 at once */
                    if (w->cn[j] == CAND) {
                        __m256 thr = _mm256_set1_ps(val[CAND - 1]);
                        if (!_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + c0), thr,
                                                              _CMP_GT_OQ)))
                            continue;
                    }
                    for (int c = c0; c < c0 + 8; c++) {
                        int v = vb * 16 + c;
                        if (v < V && (w->cn[j] < CAND || row[c] > val[CAND - 1]))
                            topk_insert(ids, val, &w->cn[j], CAND, v, row[c]);
                    }
                }
            }
        }
    }
}

/* All eight tiles 16 rows x 64 bytes. A static image, because GCC 12 drops stores to a
 * stack config before ldtilecfg (it does not see the instruction read them). */
static const tilecfg amx_cfg __attribute__((aligned(64))) = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

AMX_TARGET static void amx_begin(void)
{
    _tile_loadconfig(&amx_cfg);
}

AMX_TARGET static void amx_end(void)
{
    _tile_release();
}
#endif

/* ---------------------------------------------------------------- workers */

static void *run_worker(void *arg)
{
    dm_worker *w = arg;
    dm_ctx *x = w->x;
#ifdef HAVE_AMX
    if (x->amx)
        amx_begin();
#endif
    for (;;) {
        size_t i = __atomic_fetch_add(&x->next, 1, __ATOMIC_RELAXED);
        if (i >= x->n_chunks || vx_cancel_flag)
            break;
        const dm_chunk *ch = &x->chunks[i];
        load_cols(w, ch);
#ifdef HAVE_AMX
        if (x->amx)
            amx_chunk(w, ch);
        else
#endif
            sgemm_chunk(w, ch);
        rescore(w, ch);
    }
#ifdef HAVE_AMX
    if (x->amx)
        amx_end();
#endif
    return NULL;
}

static void worker_free(dm_worker *w)
{
    free(w->dcol);
    free(w->apack);
    free(w->cbuf);
    free(w->cid);
    free(w->cval);
    free(w->cn);
}

static int worker_init(dm_worker *w, dm_ctx *x)
{
    memset(w, 0, sizeof *w);
    w->x = x;
    size_t H = (size_t)x->s->hidden;
    w->dcol = malloc((size_t)FC * H * sizeof *w->dcol);
    w->cid = malloc((size_t)FC * CAND * sizeof *w->cid);
    w->cval = malloc((size_t)FC * CAND * sizeof *w->cval);
    w->cn = malloc((size_t)FC * sizeof *w->cn);
    if (x->amx) {
        w->apack = aligned_alloc(64, (size_t)FC * (size_t)x->hpad * 2);
        w->cbuf = aligned_alloc(64, 32 * 32 * sizeof *w->cbuf);
    } else {
        w->cbuf = malloc((size_t)FC * VTILE * sizeof *w->cbuf);
    }
    if (!w->dcol || !w->cid || !w->cval || !w->cn || !w->cbuf || (x->amx && !w->apack)) {
        worker_free(w);
        return -1;
    }
    return 0;
}

static int write_meta(const brw_shape *s, const char *path, vx_err *err)
{
    dm_ctx x = {.s = s, .rb = 8 + 8 * (size_t)BRW_DOWN_TOP_K};
    size_t H = (size_t)s->hidden, V = (size_t)s->vocab;
#ifdef HAVE_AMX
    x.amx = amx_available();
#endif
    int nw = x.amx ? eng_threads() : 1;
    if (nw < 1)
        nw = 1;
    if (nw > 64)
        nw = 64;
    dm_worker w[64];
    int n_init = 0, rc = -1;
    FILE *f = NULL;
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
    x.chunks = malloc((max_chunks + 1) * sizeof *x.chunks);
    x.rec = malloc((size_t)maxf * x.rb + 1);
    if (x.amx) {
        x.hpad = (int)((H + 31) / 32 * 32);
        x.ks = x.hpad / 32;
        x.vpad = (int)((V + 31) / 32 * 32);
        x.epack = aligned_alloc(64, (size_t)x.vpad * (size_t)x.hpad * 2);
    } else {
        x.ef32 = malloc(V * H * sizeof *x.ef32);
    }
    if (!x.chunks || !x.rec || (x.amx ? !x.epack : !x.ef32)) {
        vx_errf(err, VX_ENOMEM, "down_meta: out of memory (embedding %zu x %zu)", V, H);
        goto done;
    }
#ifdef HAVE_AMX
    if (x.amx) {
        pack_e(&x);
        if (x.failed) {
            vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
            goto done;
        }
    } else
#endif
    {
        size_t esz = s->embed->dtype == VX_F32 ? 4 : 2;
        for (size_t v = 0; v < V; v++)
            vx_row_to_f32(s->embed->dtype, (const uint8_t *)s->embed->data + v * H * esz,
                          x.ef32 + v * H, H);
    }
    for (; n_init < nw; n_init++)
        if (worker_init(&w[n_init], &x) != 0) {
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
        x.n_chunks = 0;
        x.next = 0;
        for (int p = 0; p < L->n_parts; p++)
            for (int64_t f0 = 0; f0 < L->parts[p].rows; f0 += FC)
                x.chunks[x.n_chunks++] = (dm_chunk){&L->parts[p], f0,
                    (int)(L->parts[p].rows - f0 < FC ? L->parts[p].rows - f0 : FC)};
        brw_parallel(run_worker, w, sizeof *w, nw);
        if (vx_cancel_flag) {
            vx_errf(err, VX_ECANCEL, "down_meta: cancelled at layer %d", l);
            goto done;
        }
        uint8_t cnt[4];
        put32(cnt, (uint32_t)L->features);
        if (fwrite(cnt, 1, 4, f) != 4 ||
            fwrite(x.rec, x.rb, (size_t)L->features, f) != (size_t)L->features) {
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
    for (int i = 0; i < n_init; i++)
        worker_free(&w[i]);
    free(x.chunks);
    free(x.rec);
    free(x.epack);
    free(x.ef32);
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
    if (write_meta(&s, path, err) != 0)
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
