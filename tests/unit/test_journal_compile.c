/*
 * test_journal_compile.c — COMPILE on the real tiny model: an overlay mixing every kind
 * of edit (tombstones, a replaced gate row, a replaced down column, a rank-2 low-rank
 * delta, on two layers) is materialised into a derived container, which must
 *   - answer as the overlay does (logits within 1e-4 on f32 storage, three prompts),
 *   - pass vx_verify against its own recorded hashes (segments and payloads),
 *   - be stamped authority "derived" with derived_from_model and provenance,
 *   - leave the base's files byte-identical (segment sha256 before = after),
 * and compiling into an existing directory is refused by name.
 */
#include "browse.h"
#include "compile.h"
#include "engine.h"
#include "t.h"
#include "test_journal_fx.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static const char *const prompts[] = {
    "The capital of France is", "Once upon a time there was", "A baby cat is called a",
};

static float *logits_of(eng_model *m, const char *text)
{
    int32_t *ids;
    size_t n;
    eng_session *s;
    vx_err e = {0};
    float *lg = malloc((size_t)eng_model_vocab(m) * sizeof *lg);
    if (eng_tok_encode(eng_model_tokenizer(m), text, strlen(text), 1, &ids, &n, &e) ||
        eng_session_new(m, 0, &s, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return lg;
    }
    if (eng_forward(s, ids, (int)n, lg, NULL, &e))
        fprintf(stderr, "%s\n", e.msg);
    eng_session_free(s);
    free(ids);
    return lg;
}

int main(void)
{
    char base[4096], out[4096];
    snprintf(base, sizeof base, "%s/h8-compile-base.vindex3", LQL_BINARY_DIR);
    snprintf(out, sizeof out, "%s/h8-compile-out.vindex3", LQL_BINARY_DIR);
    fx_rm_rf(base);
    fx_rm_rf(out);
    vx_err e = {0};
    vx_container *c = NULL;
    eng_model *m = NULL;
    if (fx_encode_tiny(base, NULL) || vx_open(base, &c, &e) || eng_model_bind(c, &m, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    const int H = eng_model_hidden(m), F = eng_model_ffn_features(m, 1), V = eng_model_vocab(m);
    char seg_before[65], seg_after[65], path[4200];
    snprintf(path, sizeof path, "%s/segments/target.decoder_stack.bin", base);
    CHECK(vx_sha256_file(path, seg_before, &e) == 0);

    /* the overlay: every kind of edit */
    float *gate = malloc((size_t)H * sizeof *gate), *down = malloc((size_t)H * sizeof *down);
    float *u = malloc((size_t)H * 2 * sizeof *u), *v = malloc((size_t)F * 2 * sizeof *v);
    for (int i = 0; i < H; i++) {
        gate[i] = 0.05f * sinf(0.3f * (float)i);
        down[i] = 0.2f * cosf(0.1f * (float)i);
        u[2 * i] = 0.01f * (float)(i % 7);
        u[2 * i + 1] = -0.02f * (float)(i % 5);
    }
    for (int f = 0; f < F; f++) {
        v[2 * f] = (f % 11) == 0 ? 0.5f : 0.0f;
        v[2 * f + 1] = (f % 13) == 0 ? -0.25f : 0.0f;
    }
    eng_feature_edit edits[] = {
        {1, 4, 1, NULL, NULL, NULL},        /* tombstone */
        {1, 11, 1, NULL, NULL, NULL},       /* tombstone the low-rank delta reads */
        {2, 7, 0, gate, NULL, NULL},        /* replaced gate row */
        {3, 20, 0, NULL, NULL, down},       /* replaced down column */
    };
    eng_lowrank lr[] = {{1, 2, u, v, -1}};
    eng_overlay ov = {edits, 4, lr, 1, NULL, 0};
    eng_model_set_overlay(m, &ov);

    cJSON *prov = cJSON_CreateObject();
    cJSON_AddStringToObject(prov, "journal", "test");
    ed_compile_report rep;
    int rc = ed_compile(c, NULL, &ov, out, prov, NULL, NULL, &rep, &e);
    CHECK_MSG(rc == 0, "compile: %s", e.msg);
    CHECK(rep.segments_rewritten == 1 && rep.tensors_rewritten == 4);
    printf("compiled: %zu tensors in %zu segments rewritten, %zu files linked\n",
           rep.tensors_rewritten, rep.segments_rewritten, rep.files_linked);

    vx_container *c2 = NULL;
    eng_model *m2 = NULL;
    CHECK(rc == 0 && vx_open(out, &c2, &e) == 0 && eng_model_bind(c2, &m2, &e) == 0);
    if (m2) {
        for (size_t p = 0; p < sizeof prompts / sizeof *prompts; p++) {
            float *a = logits_of(m, prompts[p]), *b = logits_of(m2, prompts[p]);
            double d = 0, moved = 0;
            float *base_lg;
            eng_model_set_overlay(m, NULL);
            base_lg = logits_of(m, prompts[p]);
            eng_model_set_overlay(m, &ov);
            for (int t = 0; t < V; t++) {
                d = fmax(d, fabs((double)a[t] - b[t]));
                moved = fmax(moved, fabs((double)a[t] - base_lg[t]));
            }
            CHECK_MSG(d < 1e-4, "\"%s\": compiled vs overlay logits differ by %g", prompts[p], d);
            CHECK_MSG(moved > 1e-3, "\"%s\": the overlay changed nothing (%g)", prompts[p], moved);
            free(a);
            free(b);
            free(base_lg);
        }
        const cJSON *idx = vx_index_json(c2);
        CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(idx, "authority")), "derived");
        CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(idx, "derived_from_model")),
                  "tinyllama");
        CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(idx,
                  "derived_from"), "journal")), "test");
        CHECK(cJSON_GetObjectItem(idx, "browse") != NULL);
        cJSON *report = NULL;
        vx_err ve = {0};
        CHECK_MSG(vx_verify(out, NULL, &report, &ve) == 0, "verify: %s", ve.msg);
        cJSON_Delete(report);
        /* browse reads the recomputed down-meta of the edited column */
        brw_model *bm = NULL;
        brw_meta md;
        CHECK(brw_open(c2, &bm, &e) == 0 && brw_feature_meta(bm, NULL, 3, 20, &md) == 0 &&
              md.present);
        /* and a compiled tombstone has none */
        CHECK(bm && brw_feature_meta(bm, NULL, 1, 4, &md) != 0 && !md.present);
        CHECK(bm && brw_feature_meta(bm, NULL, 1, 5, &md) == 0 && md.present);
        brw_close(bm);
    }
    CHECK(vx_sha256_file(path, seg_after, &e) == 0);
    CHECK_STR(seg_after, seg_before);

    /* an existing output directory is refused */
    CHECK(ed_compile(c, NULL, &ov, out, NULL, NULL, NULL, &rep, &e) == -1);
    char want[4300];
    snprintf(want, sizeof want, "compile: '%s' already exists; lql does not overwrite it", out);
    CHECK_STR(e.msg, want);
    /* a file of the base it cannot carry (a dangling link) fails COMPILE; it was left out */
    char link_path[4200], out2[4200];
    snprintf(link_path, sizeof link_path, "%s/notes.txt", base);
    snprintf(out2, sizeof out2, "%s/h8-compile-out2.vindex3", LQL_BINARY_DIR);
    fx_rm_rf(out2);
    CHECK(symlink("no-such-file", link_path) == 0);
    CHECK(ed_compile(c, NULL, &ov, out2, NULL, NULL, NULL, &rep, &e) == -1);
    snprintf(want, sizeof want, "'%s' is a symbolic link; a container holds only regular "
             "files and directories", link_path);
    CHECK_STR(e.msg, want);
    CHECK(access(out2, F_OK) != 0);
    unlink(link_path);

    cJSON_Delete(prov);
    eng_model_free(m2);
    vx_close(c2);
    eng_model_set_overlay(m, NULL);
    eng_model_free(m);
    vx_close(c);
    free(gate);
    free(down);
    free(u);
    free(v);
    if (t_fail == 0) {
        fx_rm_rf(base);
        fx_rm_rf(out);
    }
    return T_DONE();
}
