/*
 * test_browse_ondemand.c — down-meta computed on demand (ondemand.c) for a container
 * encoded without it (brw_encode_finish_bands, `vindex encode --no-down-meta`) gives the
 * stored records bit for bit: per fixture (dense bf16 Llama, GPT-2's plain MLP, Mixtral's
 * experts, gpt-oss's MXFP4-packed experts), every record brw_downmeta_exact computes
 * equals down_meta.bin's bytes, and every feature's brw_feature_meta through
 * brw_meta_prepare equals the stored container's, as does a whole layer computed by
 * brw_meta_prepare_layers (the screened pass) and SHOW FEATURES over it. Also: the
 * bands-only index (layer bands, no down_meta, verify ok), the source each container
 * reports, out-of-range and repeated features skipped, and the computed count.
 */
#include "brw_int.h"
#include "t.h"
#include "t_browse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* brw_downmeta_exact of every feature against the stored file, byte for byte. */
static void check_exact(const brw_model *m, const char *dir, const char *what)
{
    size_t n = 0;
    uint8_t *file = t_slurp(&n, "%s/browse/down_meta.bin", dir);
    CHECK_MSG(file != NULL, "%s: no down_meta.bin", what);
    if (!file) return;
    const size_t rb = 8 + 8 * (size_t)BRW_DOWN_TOP_K;
    size_t off = 16, bad = 0, total = 0;
    for (int l = 0; l < m->s.layers; l++) {
        const int64_t F = m->s.layer[l].features;
        off += 4;
        if (F == 0) continue;
        int *ls = malloc((size_t)F * sizeof *ls);
        int64_t *fs = malloc((size_t)F * sizeof *fs);
        uint8_t *rec = malloc((size_t)F * rb);
        for (int64_t f = 0; f < F; f++) {
            ls[f] = l;
            fs[f] = f;
        }
        vx_err err = {0};
        CHECK_MSG(brw_downmeta_exact(&m->s, ls, fs, (size_t)F, rec, &err) == 0, "%s: %s", what,
                  err.msg);
        CHECK(off + (size_t)F * rb <= n);
        for (int64_t f = 0; f < F && off + (size_t)F * rb <= n; f++)
            bad += memcmp(rec + (size_t)f * rb, file + off + (size_t)f * rb, rb) != 0;
        off += (size_t)F * rb;
        total += (size_t)F;
        free(ls);
        free(fs);
        free(rec);
    }
    CHECK_MSG(bad == 0 && total > 0, "%s: %zu of %zu records differ from down_meta.bin", what,
              bad, total);
    free(file);
}

static void check_fixture(const char *what)
{
    char src[1024], full[1024], lazy[1024];
    snprintf(src, sizeof src, "%s/models/%s", LQL_FIXTURE_DIR, what);
    snprintf(full, sizeof full, "%s/ondemand-full.vindex3", LQL_BINARY_DIR);
    snprintf(lazy, sizeof lazy, "%s/ondemand-lazy.vindex3", LQL_BINARY_DIR);
    if (t_encode_browse(src, full, 1, what) != 0 || t_encode_browse(src, lazy, 0, what) != 0)
        return;

    /* the bands-only index: bands recorded, no down-meta, every hash still verifies */
    char path[1100];
    snprintf(path, sizeof path, "%s/index.json", lazy);
    cJSON *idx = t_load_json(path);
    const cJSON *br = cJSON_GetObjectItemCaseSensitive(idx, "browse");
    CHECK_MSG(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(br, "layer_bands")) &&
              !cJSON_HasObjectItem(br, "down_meta") && !cJSON_HasObjectItem(br, "down_meta_sha256"),
              "%s: index.browse of a bands-only encode", what);
    cJSON_Delete(idx);
    cJSON *rep = NULL;
    vx_err err = {0};
    CHECK_MSG(vx_verify(lazy, NULL, &rep, &err) == 0, "%s: verify: %s", what, err.msg);
    cJSON_Delete(rep);

    vx_container *cf, *cl;
    brw_model *mf, *ml;
    if (t_open_browse(full, &cf, &mf, what) != 0) return;
    if (t_open_browse(lazy, &cl, &ml, what) != 0) {
        brw_close(mf);
        vx_close(cf);
        return;
    }
    CHECK(brw_meta_source(mf) == BRW_META_STORED && brw_meta_source(ml) == BRW_META_ON_DEMAND);
    check_exact(mf, full, what);

    /* nothing is known before it is asked for */
    brw_meta md;
    CHECK(brw_feature_meta(ml, NULL, 0, 0, &md) != 0 && !md.present);
    CHECK(brw_meta_computed(ml, NULL) == 0);

    /* every feature through brw_meta_prepare, in two batches (the second half first, with a
     * repeat and out-of-range entries, which are skipped) */
    size_t n = 0;
    for (int l = 0; l < ml->s.layers; l++)
        n += (size_t)ml->s.layer[l].features;
    int *ls = malloc((n + 3) * sizeof *ls);
    int64_t *fs = malloc((n + 3) * sizeof *fs);
    size_t k = 0;
    for (int l = 0; l < ml->s.layers; l++)
        for (int64_t f = 0; f < ml->s.layer[l].features; f++) {
            ls[k] = l;
            fs[k++] = f;
        }
    ls[k] = ml->s.layers;           /* past the last layer */
    fs[k++] = 0;
    ls[k] = 0;                      /* past layer 0's features */
    fs[k++] = ml->s.layer[0].features;
    ls[k] = ls[n - 1];              /* a repeat */
    fs[k++] = fs[n - 1];
    CHECK_MSG(brw_meta_prepare(ml, ls + n / 2, fs + n / 2, k - n / 2, &err) == 0, "%s: %s", what,
              err.msg);
    CHECK(brw_meta_computed(ml, NULL) == n - n / 2);
    CHECK_MSG(brw_meta_prepare(ml, ls, fs, n, &err) == 0, "%s: %s", what, err.msg);
    CHECK(brw_meta_computed(ml, NULL) == n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        brw_meta a, b;
        const int ra = brw_feature_meta(mf, NULL, ls[i], fs[i], &a);
        const int rb = brw_feature_meta(ml, NULL, ls[i], fs[i], &b);
        bad += ra != rb || memcmp(&a, &b, sizeof a) != 0;
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu features' down-meta differ on demand", what, bad, n);
    free(ls);
    free(fs);

    brw_close(ml);
    vx_close(cl);
    /* a whole layer at once (the screened pass), on a fresh model: the stored records */
    if (t_open_browse(lazy, &cl, &ml, what) == 0) {
        const int last = ml->s.layers - 1;
        CHECK_MSG(brw_meta_prepare_layers(ml, &last, 1, &err) == 0, "%s: %s", what, err.msg);
        CHECK(brw_meta_computed(ml, NULL) == (uint64_t)ml->s.layer[last].features);
        CHECK_MSG(brw_meta_prepare_layers(ml, &last, 1, &err) == 0, "%s: %s", what, err.msg);
        CHECK(brw_meta_computed(ml, NULL) == (uint64_t)ml->s.layer[last].features);
        bad = 0;
        for (int64_t f = 0; f < ml->s.layer[last].features; f++) {
            brw_meta a, b;
            brw_feature_meta(mf, NULL, last, f, &a);
            brw_feature_meta(ml, NULL, last, f, &b);
            bad += memcmp(&a, &b, sizeof a) != 0;
        }
        CHECK_MSG(bad == 0, "%s: %zu features of layer %d differ computed by layer", what, bad,
                  last);
        /* SHOW FEATURES of a layer computes it when not stored: the same rows */
        brw_rows ra, rb;
        brw_select_opts so = {.limit = 8};
        CHECK(brw_show_features(mf, 0, &so, &ra, &err) == 0);
        CHECK_MSG(brw_show_features(ml, 0, &so, &rb, &err) == 0, "%s: %s", what, err.msg);
        CHECK(ra.n == rb.n && ra.n > 0);
        for (size_t i = 0; i < ra.n && i < rb.n; i++)
            CHECK(ra.rows[i].feature == rb.rows[i].feature &&
                  ra.rows[i].score == rb.rows[i].score &&
                  !strcmp(ra.rows[i].token ? ra.rows[i].token : "",
                          rb.rows[i].token ? rb.rows[i].token : ""));
        brw_rows_free(&ra);
        brw_rows_free(&rb);
    }

    brw_close(mf);
    brw_close(ml);
    vx_close(cf);
    vx_close(cl);
    t_rm_rf(full);
    t_rm_rf(lazy);
}

int main(void)
{
    check_fixture("tinyllama-bf16");
    check_fixture("families/gpt2");
    check_fixture("families/mixtral");
    check_fixture("families/gpt-oss");
    return T_DONE();
}
