/*
 * test_journal_downmeta.c — down-meta of the features a low-rank INSERT moved. A rank-1
 * insert op at layer 3 whose u is the embedding row of " London" (×40) and whose v puts
 * weight on five features (and a little on every other) is replayed into the overlay:
 *   - the eight features with the largest |v_f|·|u| get recomputed metadata (the loaded
 *     ones show " London", the others what E · column says);
 *   - SELECT … WHERE layer = 3 AND token = "London" through the overlay lists four of
 *     them (the fifth has an UPDATE), without the overlay none;
 *   - a feature whose metadata an operation set keeps it (an UPDATE after the insert);
 *   - COMPILE writes a DMET whose records for the eight features agree with the overlay
 *     (same top token, c_score within 1e-4: f32 storage); it computes layer 3's records
 *     alone (the progress it reports counts that layer's features) and carries every other
 *     layer's from the base byte for byte; a COMPILE of the UPDATE alone computes none.
 */
#include "browse.h"
#include "compile.h"
#include "overlay.h"
#include "engine.h"
#include "t.h"
#include "t_file.h"
#include "test_journal_fx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LONDON 3798

/* The largest total COMPILE's down-meta stage reported. */
static void on_progress(void *ctx, const char *stage, uint64_t done, uint64_t total)
{
    (void)done;
    if (!strcmp(stage, "down-meta") && total > *(uint64_t *)ctx)
        *(uint64_t *)ctx = total;
}

/* The records of layer l in two DMET files are byte for byte the same. */
static int same_layer(const brw_dmet *a, const brw_dmet *b, int l)
{
    int64_t n = brw_dmet_count(a, l);
    if (n != brw_dmet_count(b, l))
        return 0;
    for (int64_t f = 0; f < n; f++) {
        brw_meta x, y;
        if (brw_dmet_get(a, l, f, &x) || brw_dmet_get(b, l, f, &y) || memcmp(&x, &y, sizeof x))
            return 0;
    }
    return 1;
}

int main(void)
{
    char base[2048], out[2048];
    snprintf(base, sizeof base, "%s/h11-downmeta-base.vindex3", LQL_BINARY_DIR);
    snprintf(out, sizeof out, "%s/h11-downmeta-out.vindex3", LQL_BINARY_DIR);
    fx_rm_rf(base);
    fx_rm_rf(out);
    vx_err e = {0};
    vx_container *c = NULL;
    brw_model *bm = NULL;
    if (fx_encode_tiny(base, NULL) || vx_open(base, &c, &e) || brw_open(c, &bm, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    const int H = brw_hidden(bm);
    const int64_t F = brw_features(bm, 3);
    const vx_tensor *E = vx_find(c, "target.embedding", "weight");
    float *u = malloc((size_t)H * sizeof *u), *v = malloc((size_t)F * sizeof *v);
    CHECK(E && E->dtype == VX_F32);
    if (!E || !u || !v)
        return 1;
    memcpy(u, (const float *)E->data + (size_t)LONDON * H, (size_t)H * sizeof *u);
    for (int i = 0; i < H; i++)
        u[i] *= 40.0f;
    static const int64_t loaded[5] = {10, 200, 345, 500, 700};
    for (int64_t f = 0; f < F; f++)
        v[f] = 1e-4f * (float)((f * 37) % 11);   /* small, distinct: 3 more slots at 1e-3 */
    for (int i = 0; i < 5; i++)
        v[loaded[i]] = 1.0f + 0.1f * (float)i;

    vx_op ops[2];
    vx_op_init(&ops[0], VX_OP_INSERT);
    ops[0].layer = 3;
    ops[0].seq = 1;
    CHECK(vx_op_set_vec(&ops[0], "u", H, 1, u, &e) == 0);
    CHECK(vx_op_set_vec(&ops[0], "v", F, 1, v, &e) == 0);
    /* an UPDATE of one loaded feature after the insert: its metadata stays the operation's */
    vx_op_init(&ops[1], VX_OP_UPDATE);
    ops[1].layer = 3;
    ops[1].feature = (int)loaded[4];
    ops[1].seq = 2;
    ops[1].has_meta = 1;
    ops[1].meta_id = 42;
    ops[1].meta_c = 0.25;

    ed_overlay *ov = NULL;
    CHECK_MSG(ed_overlay_build(bm, ops, 2, &ov, &e) == 0, "build: %s", e.msg);
    if (!ov)
        return T_DONE();
    ed_counts cnt;
    ed_overlay_counts(ov, &cnt);
    CHECK(cnt.meta == 1 && cnt.recomputed == 7 && cnt.features == 1);
    const eng_overlay *bo = ed_overlay_eng(ov);
    brw_meta md;
    for (int i = 0; i < 4; i++) {
        CHECK(brw_feature_meta(bm, bo, 3, loaded[i], &md) == 0 && md.present);
        CHECK_MSG(md.top_id == LONDON, "feature %lld shows %d", (long long)loaded[i], md.top_id);
    }
    CHECK(brw_feature_meta(bm, bo, 3, loaded[4], &md) == 0 && md.top_id == 42);
    CHECK_NEAR(md.c_score, 0.25, 1e-6);
    /* without the overlay the loaded features show their base tokens, not London */
    int base_london = 0;
    for (int i = 0; i < 5; i++)
        base_london += brw_feature_meta(bm, NULL, 3, loaded[i], &md) == 0 &&
                       md.top_id == LONDON;
    CHECK(base_london == 0);

    /* SELECT … FROM FEATURES WHERE layer = 3 AND token = "London" through the overlay */
    brw_value v3 = {0, 3, NULL}, vl = {1, 0, "London"};
    brw_cond cond[2];
    memset(cond, 0, sizeof cond);
    CHECK(brw_field_parse(BRW_FEATURES, "layer", &cond[0].field, &e) == 0);
    CHECK(brw_field_parse(BRW_FEATURES, "token", &cond[1].field, &e) == 0);
    cond[0] = (brw_cond){cond[0].field, BRW_EQ, &v3, 1};
    cond[1] = (brw_cond){cond[1].field, BRW_EQ, &vl, 1};
    brw_select_opts so = {cond, 2, NULL, 0, 0, 0, 0, -1, bo};
    brw_rows rows = {0};
    CHECK_MSG(brw_select(bm, BRW_FEATURES, &so, &rows, &e) == 0, "select: %s", e.msg);
    int seen = 0;
    for (size_t r = 0; r < rows.n; r++)
        for (int i = 0; i < 4; i++)
            seen += rows.rows[r].feature == loaded[i];
    CHECK_MSG(seen == 4, "SELECT shows %d of the 4 moved London features (%zu rows)", seen,
              rows.n);
    brw_rows_free(&rows);
    so.ov = NULL;
    CHECK(brw_select(bm, BRW_FEATURES, &so, &rows, &e) == 0);
    seen = 0;
    for (size_t r = 0; r < rows.n; r++)
        for (int i = 0; i < 5; i++)
            seen += rows.rows[r].feature == loaded[i];
    CHECK(seen == 0);
    brw_rows_free(&rows);

    /* COMPILE writes DMET records that agree with the overlay on the moved features */
    ed_compile_report rep, rep_;
    uint64_t total = 0;
    CHECK_MSG(ed_compile(c, NULL, ed_overlay_eng(ov), out, NULL, on_progress, &total, &rep, &e) == 0,
              "compile: %s", e.msg);
    CHECK_MSG(total == (uint64_t)F, "down-meta computed for %llu features, want layer 3's %lld",
              (unsigned long long)total, (long long)F);
    char pa[2300], pb[2300];
    snprintf(pa, sizeof pa, "%s/browse/down_meta.bin", base);
    snprintf(pb, sizeof pb, "%s/browse/down_meta.bin", out);
    brw_dmet *da = NULL, *db = NULL;
    CHECK(brw_dmet_load(pa, &da, &e) == 0 && brw_dmet_load(pb, &db, &e) == 0);
    for (int l = 0; da && db && l < brw_dmet_layers(da); l++)
        CHECK_MSG(same_layer(da, db, l) == (l != 3), "layer %d's records %s the base's", l,
                  l == 3 ? "are" : "are not");
    if (db)
        brw_dmet_free(db);
    vx_container *c2 = NULL;
    brw_model *bm2 = NULL;
    CHECK(vx_open(out, &c2, &e) == 0 && brw_open(c2, &bm2, &e) == 0);
    for (int i = 0; bm2 && i < 4; i++) {
        brw_meta a, b;
        CHECK(brw_feature_meta(bm, bo, 3, loaded[i], &a) == 0);
        CHECK(brw_feature_meta(bm2, NULL, 3, loaded[i], &b) == 0);
        CHECK(a.top_id == b.top_id);
        CHECK_NEAR(a.c_score, b.c_score, 1e-4);
    }
    brw_close(bm2);
    vx_close(c2);
    ed_overlay_free(ov);
    /* the UPDATE alone changes no weight: every record is the base's but its own */
    fx_rm_rf(out);
    total = 0;
    ov = NULL;
    CHECK(ed_overlay_build(bm, &ops[1], 1, &ov, &e) == 0);
    CHECK_MSG(ov && ed_compile(c, NULL, ed_overlay_eng(ov), out, NULL, on_progress, &total, &rep, &e) == 0,
              "compile: %s", e.msg);
    CHECK(total == 0);
    db = NULL;
    CHECK(brw_dmet_load(pb, &db, &e) == 0);
    for (int l = 0; da && db && l < brw_dmet_layers(da); l++)
        CHECK(same_layer(da, db, l) == (l != 3));
    brw_meta m3;
    CHECK(db && brw_dmet_get(db, 3, loaded[4], &m3) == 0 && m3.top_id == 42);
    if (db)
        brw_dmet_free(db);
    if (da)
        brw_dmet_free(da);
    ed_overlay_free(ov);
    /* under a profile whose decoder stack is q8_0 the moved columns are read from its
     * blocks (decoded): the same eight features are recomputed and the loaded ones show
     * London (the overlay recomputed none: a block column had no f32 view) */
    {
        char q8[2300], cmd[4800];
        snprintf(q8, sizeof q8, "%s/h11-downmeta-q8.vindex3", LQL_BINARY_DIR);
        fx_rm_rf(q8);
        snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", base, q8);
        CHECK(system(cmd) == 0);
        vx_select sel = {"target.decoder_stack", "target.decoder_stack.q8_0"};
        vx_container *cq = NULL;
        brw_model *bq = NULL;
        CHECK_MSG(vx_represent(q8, "target.decoder_stack", VX_Q8_0, NULL, &e) == 0 &&
                  vx_profile_add(q8, "q8", &sel, 1, 1, &e) == 0 &&
                  vx_open_profile(q8, "q8", NULL, 0, &cq, &e) == 0 && brw_open(cq, &bq, &e) == 0,
                  "q8_0 profile: %s", e.msg);
        ed_overlay *oq = NULL;
        if (bq)
            CHECK_MSG(ed_overlay_build(bq, ops, 1, &oq, &e) == 0, "build: %s", e.msg);
        if (oq) {
            ed_counts cq_n;
            ed_overlay_counts(oq, &cq_n);
            CHECK_MSG(cq_n.recomputed == 8, "recomputed %zu under q8_0", (size_t)cq_n.recomputed);
            for (int i = 0; i < 5; i++) {
                CHECK(brw_feature_meta(bq, ed_overlay_eng(oq), 3, loaded[i], &md) == 0);
                CHECK_MSG(md.top_id == LONDON, "q8_0: feature %lld shows %d",
                          (long long)loaded[i], md.top_id);
            }
        }
        ed_overlay_free(oq);
        brw_close(bq);
        vx_close(cq);
        fx_rm_rf(q8);
    }
    /* a base index without 'authority' (and a representation without payload_sha256):
     * the compiled one is stamped derived and hashed all the same (both were lost) */
    vx_close(c);
    c = NULL;
    char ip[2300];
    snprintf(ip, sizeof ip, "%s/index.json", base);
    size_t n = 0;
    char *text = (char *)t_slurp(&n, "%s", ip);
    cJSON *ix = text ? cJSON_Parse(text) : NULL, *rp;
    free(text);
    cJSON_DeleteItemFromObjectCaseSensitive(ix, "authority");
    cJSON_ArrayForEach(rp, cJSON_GetObjectItemCaseSensitive(ix, "representations"))
        cJSON_DeleteItemFromObjectCaseSensitive(rp, "payload_sha256");
    char *w = ix ? cJSON_Print(ix) : NULL;
    FILE *fo = w ? fopen(ip, "w") : NULL;
    CHECK(fo && fputs(w, fo) >= 0 && fclose(fo) == 0);
    free(w);
    cJSON_Delete(ix);
    fx_rm_rf(out);
    ov = NULL;
    brw_close(bm);
    bm = NULL;
    CHECK(vx_open(base, &c, &e) == 0 && brw_open(c, &bm, &e) == 0 &&
          ed_overlay_build(bm, ops, 1, &ov, &e) == 0);
    CHECK_MSG(ov && ed_compile(c, NULL, ed_overlay_eng(ov), out, NULL, NULL, NULL, &rep_, &e) == 0,
              "compile: %s", e.msg);
    snprintf(ip, sizeof ip, "%s/index.json", out);
    text = (char *)t_slurp(&n, "%s", ip);
    ix = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ix, "authority")), "derived");
    int hashed = 0;
    cJSON_ArrayForEach(rp, cJSON_GetObjectItemCaseSensitive(ix, "representations"))
        hashed += cJSON_HasObjectItem(rp, "payload_sha256");
    CHECK(hashed > 0);
    cJSON_Delete(ix);
    ed_overlay_free(ov);
    vx_op_clear(&ops[0]);
    vx_op_clear(&ops[1]);
    free(u);
    free(v);
    brw_close(bm);
    vx_close(c);
    if (t_fail == 0) {
        fx_rm_rf(base);
        fx_rm_rf(out);
    }
    return T_DONE();
}
