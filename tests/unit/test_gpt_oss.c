/*
 * test_gpt_oss.c — GPT-OSS experts kept as the checkpoint packs them.
 *
 * The fixtures gpt-oss (experts as MXFP4 blocks + scales) and gpt-oss-bf16 (the same
 * model dequantised, transformers' unpacked [in, out] layout) are encoded; then:
 *   - every expert matrix of the packed container is stored mxfp4 under a source-exact
 *     representation and decodes to exactly the bf16 container's values (so the codes and
 *     scales were copied, not requantised), and verify re-hashes blocks and scales;
 *   - on every golden prompt both give the same greedy token, probabilities within 1e-5 (the parity tolerance)
 *     and logits within 1e-4 (the worst differences are printed: only the f32 summation
 *     order differs, about 1e-5 in the logits);
 *   - a sinks tensor of the wrong shape is refused by name at encode.
 */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "t.h"
#include "t_file.h"
#include "engine_int.h"

static char tmp[] = "/tmp/lql-gptoss-XXXXXX";

static int encode(const char *src, const char *name, char *out, size_t n, vx_err *err)
{
    snprintf(out, n, "%s/%s.vindex3", tmp, name);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    return vx_encode(src, out, &o, err);
}

/* Packed experts: mxfp4, and value-identical to the bf16 model's. */
static void check_experts(const vx_container *q, const vx_container *b)
{
    const vx_graph_shape *g = vx_shape_of(q);
    const char *rid = vx_bound_representation(q, "target.decoder_stack");
    const cJSON *rep = cJSON_GetObjectItem(cJSON_GetObjectItem(vx_index_json(q), "representations"),
                                           rid ? rid : "");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(rep, "fidelity")), "source-exact");
    static const char *const roles[] = {"gate_proj", "up_proj", "down_proj"};
    int n = 0, bad = 0;
    float *x = malloc(4096 * sizeof *x), *y = malloc(4096 * sizeof *y);
    for (int l = 0; l < g->layers; l++)
        for (int e = 0; e < g->experts; e++)
            for (int r = 0; r < 3; r++) {
                const vx_tensor *tq = vx_findf(q, "target.decoder_stack", "layers.%d.ffn.experts.%d.%s", l, e, roles[r]);
                const vx_tensor *tb = vx_findf(b, "target.decoder_stack", "layers.%d.ffn.experts.%d.%s", l, e, roles[r]);
                if (!tq || !tb || tq->dtype != VX_MXFP4 || tb->dtype != VX_BF16 ||
                    tq->shape[0] != tb->shape[0] || tq->shape[1] != tb->shape[1] || tq->shape[1] > 4096) {
                    bad++;
                    continue;
                }
                size_t qrow = tq->nbytes / (size_t)tq->shape[0], brow = tb->nbytes / (size_t)tb->shape[0];
                for (int64_t i = 0; i < tq->shape[0]; i++) {
                    vx_dequantize_row(VX_MXFP4, (const char *)tq->data + i * qrow, x, (size_t)tq->shape[1]);
                    vx_row_to_f32(VX_BF16, (const char *)tb->data + i * brow, y, (size_t)tb->shape[1]);
                    bad += memcmp(x, y, (size_t)tq->shape[1] * sizeof *x) != 0;
                }
                n++;
            }
    free(x);
    free(y);
    CHECK_MSG(n == g->layers * g->experts * 3 && bad == 0, "%d expert matrices, %d differing", n, bad);
}

static void check_logits(vx_container *q, vx_container *b, const char *golden)
{
    eng_model *mq = NULL, *mb = NULL;
    eng_session *sq = NULL, *sb = NULL;
    vx_err err = {0};
    CHECK_MSG(eng_model_bind(q, &mq, &err) == 0, "%s", err.msg);
    CHECK_MSG(eng_model_bind(b, &mb, &err) == 0, "%s", err.msg);
    cJSON *gj = t_load_json(golden);
    if (!mq || !mb || !gj || eng_session_new(mq, 0, &sq, &err) || eng_session_new(mb, 0, &sb, &err)) {
        CHECK_MSG(0, "setup: %s", err.msg);
        goto out;
    }
    const int V = mq->vocab;
    float *lq = malloc((size_t)V * sizeof *lq), *lb = malloc((size_t)V * sizeof *lb);
    double worst = 0, worst_p = 0;
    int prompts = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(gj, "prompts")) {
        const cJSON *ids = cJSON_GetObjectItem(p, "ids");
        int n = cJSON_GetArraySize(ids), k = 0;
        int32_t tok[512];
        const cJSON *v;
        cJSON_ArrayForEach(v, ids) if (k < 512) tok[k++] = (int32_t)v->valuedouble;
        eng_session_reset(sq);
        eng_session_reset(sb);
        if (n < 1 || eng_forward(sq, tok, k, lq, NULL, &err) || eng_forward(sb, tok, k, lb, NULL, &err)) {
            CHECK_MSG(0, "forward: %s", err.msg);
            continue;
        }
        int aq = 0, ab = 0;
        for (int i = 0; i < V; i++) {
            worst = fmax(worst, fabs((double)lq[i] - lb[i]));
            if (lq[i] > lq[aq]) aq = i;
            if (lb[i] > lb[ab]) ab = i;
        }
        CHECK(aq == ab);
        double zq = 0, zb = 0;
        for (int i = 0; i < V; i++) {
            zq += exp((double)lq[i] - lq[aq]);
            zb += exp((double)lb[i] - lb[ab]);
        }
        for (int i = 0; i < V; i++)
            worst_p = fmax(worst_p, fabs(exp((double)lq[i] - lq[aq]) / zq - exp((double)lb[i] - lb[ab]) / zb));
        prompts++;
    }
    printf("gpt-oss vs gpt-oss-bf16: %d prompts, worst |logit difference| %.2e, "
           "|probability difference| %.2e\n", prompts, worst, worst_p);
    CHECK(prompts >= 4);
    CHECK_MSG(worst <= 1e-4, "worst logit difference %.3g", worst);
    CHECK_MSG(worst_p <= 1e-5, "worst probability difference %.3g", worst_p);
    free(lq);
    free(lb);
out:
    cJSON_Delete(gj);
    eng_session_free(sq);
    eng_session_free(sb);
    eng_model_free(mq);
    eng_model_free(mb);
}

/* Rewrite a copy of the bf16 fixture so layer 0's sinks hold 4 values instead of 8. */
static int short_sinks(const char *src, char *dir, size_t n)
{
    char cmd[8400], path[4400];
    snprintf(dir, n, "%s/short-sinks", tmp);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", src, dir);
    if (system(cmd) != 0) return -1;
    size_t len;
    unsigned char *b = t_slurp(&len, "%s/model.safetensors", dir);
    if (!b || len < 8) return -1;
    uint64_t hl = 0;
    memcpy(&hl, b, 8);
    char *hs = strndup((const char *)b + 8, (size_t)hl);
    cJSON *h = cJSON_Parse(hs);
    free(hs);
    cJSON *t = cJSON_GetObjectItem(h, "model.layers.0.self_attn.sinks");
    if (!t) return -1;
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(t, "shape"), 0, cJSON_CreateNumber(4));
    cJSON *off = cJSON_GetObjectItem(t, "data_offsets");
    cJSON_ReplaceItemInArray(off, 1, cJSON_CreateNumber(cJSON_GetArrayItem(off, 0)->valuedouble + 8));
    char *nh = cJSON_PrintUnformatted(h);
    size_t nl = strlen(nh), pad = (8 - nl % 8) % 8;
    uint64_t nhl = nl + pad;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    int rc = -1;
    if (f && fwrite(&nhl, 8, 1, f) == 1 && fwrite(nh, 1, nl, f) == nl &&
        fwrite("        ", 1, pad, f) == pad && fwrite(b + 8 + hl, 1, len - 8 - hl, f) == len - 8 - hl)
        rc = 0;
    if (f) fclose(f);
    free(nh);
    cJSON_Delete(h);
    free(b);
    return rc;
}

int main(void)
{
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    char sq[4096], sb[4096], oq[4200], ob[4200], golden[4200];
    snprintf(sq, sizeof sq, "%s/models/families/gpt-oss", LQL_FIXTURE_DIR);
    snprintf(sb, sizeof sb, "%s/models/families/gpt-oss-bf16", LQL_FIXTURE_DIR);
    snprintf(golden, sizeof golden, "%s/golden.json", sq);
    vx_err err = {0};
    vx_container *q = NULL, *b = NULL;
    CHECK_MSG(encode(sq, "packed", oq, sizeof oq, &err) == 0, "%s", err.msg);
    CHECK_MSG(encode(sb, "bf16", ob, sizeof ob, &err) == 0, "%s", err.msg);
    CHECK_MSG(vx_open(oq, &q, &err) == 0, "%s", err.msg);
    CHECK_MSG(vx_open(ob, &b, &err) == 0, "%s", err.msg);
    if (q && b) {
        check_experts(q, b);
        check_logits(q, b, golden);
    }
    cJSON *rep = NULL;
    CHECK_MSG(vx_verify(oq, sq, &rep, &err) == 0, "verify: %s", err.msg);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(rep, "ok")));
    cJSON_Delete(rep);
    vx_close(q);
    vx_close(b);

    char bad[4200], out[4200];
    CHECK(short_sinks(sb, bad, sizeof bad) == 0);
    CHECK(encode(bad, "short", out, sizeof out, &err) == -1);
    CHECK_STR(err.msg, "checkpoint: tensor 'model.layers.0.self_attn.sinks' has shape [4], config.json "
                       "implies [8] (family 'gpt_oss')");
    t_rm_rf(tmp);
    return T_DONE();
}
