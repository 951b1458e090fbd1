/*
 * test_gpt_oss.c — GPT-OSS experts kept as the checkpoint packs them.
 *
 * The fixtures gpt-oss (experts as MXFP4 blocks + scales) and gpt-oss-bf16 (the same
 * model dequantised, transformers' unpacked [in, out] layout) are encoded; then:
 *   - every expert matrix of the packed container is stored mxfp4 under a source-exact
 *     representation and decodes to exactly the bf16 container's values (so the codes and
 *     scales were copied, not requantised), and verify re-hashes blocks and scales;
 *   - every MXFP4 value is a bf16, and a source-exact MXFP4 product is the product on its
 *     bf16 decode bit for bit (extreme scales, decode and prefill row counts);
 *   - on every prompt of both goldens both give bit-identical logits, in prefill and in 8
 *     decode steps after it, with and without AVX-512: the MXFP4 experts are decoded
 *     exactly to bf16 and run through the bf16 kernels (engine/matmul.c), so the products
 *     and their summation order are the dequantised model's;
 *   - WALK's DENSE scores are the activations the engine computes (expert biases and the
 *     clamped SwiGLU included);
 *   - a sinks tensor of the wrong shape is refused by name at encode.
 */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "t.h"
#include "t_file.h"
#include "engine_int.h"
#include "qkernels.h"
#include "browse.h"
#include "brw_int.h"

static char tmp[] = "/tmp/lql-gptoss-XXXXXX";

static int encode(const char *src, const char *name, char *out, size_t n, vx_err *err)
{
    snprintf(out, n, "%s/%s.vindex3", tmp, name);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    return vx_encode(src, out, &o, err);
}

/* --dtype f16 narrows the bf16 float operands (the stack's representation becomes
 * numerically-approximate) while the packed experts are copied: down-meta still reads them
 * as the checkpoint's own weights (it refused them as a quantised derivation). */
static void check_narrowed_downmeta(const char *src)
{
    char out[4200];
    snprintf(out, sizeof out, "%s/f16.vindex3", tmp);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.dtype = VX_F16;
    o.finish = brw_encode_finish;
    o.finish_ctx = &o;
    vx_err err = {0};
    CHECK_MSG(vx_encode(src, out, &o, &err) == 0, "encode --dtype f16: %s", err.msg);
    vx_container *c = NULL;
    CHECK_MSG(vx_open(out, &c, &err) == 0, "%s", err.msg);
    if (!c) return;
    const cJSON *ix = vx_index_json(c);
    const cJSON *rep = cJSON_GetObjectItem(cJSON_GetObjectItem(ix, "representations"),
                                           "target.decoder_stack.mxfp4");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(rep, "fidelity")), "numerically-approximate");
    CHECK(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(ix, "browse"), "down_meta")));
    brw_model *m = NULL;
    CHECK_MSG(brw_open(c, &m, &err) == 0 && brw_meta_source(m) == BRW_META_STORED, "%s", err.msg);
    brw_close(m);
    vx_close(c);
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

/* The claim behind the bit-identity. Every MXFP4 value — each E2M1 code times each E8M0
 * scale — is a bf16: its bf16 round trip is the identity, subnormal scales and the products
 * that overflow to inf included. And a source-exact MXFP4 product equals the product on its
 * bf16 decode bit for bit, for decode and prefill row counts, single and multi-threaded,
 * with and without AVX-512, on blocks with extreme scales. */
static void check_mxfp4_bf16(void)
{
    unsigned char blk[17];
    float v[32];
    int bad = 0, n = 0;
    for (int e = 0; e < 255; e++) {
        blk[0] = (unsigned char)e;
        for (int j = 0; j < 16; j++) blk[1 + j] = (unsigned char)(j | (15 - j) << 4);
        eng_qrow_f32(VX_MXFP4, blk, v, 32);
        for (int i = 0; i < 32; i++, n++) {
            float r = vx_bf16_to_f32(vx_f32_to_bf16(v[i]));
            bad += memcmp(&r, &v[i], sizeof r) != 0;
        }
    }
    CHECK_MSG(n == 255 * 32 && bad == 0, "%d of %d MXFP4 values are not bf16", bad, n);

    static const int scales[] = {0, 1, 3, 100, 120, 127, 131, 200, 252};
    static const int shapes[][2] = {{24, 64}, {200, 256}};
    static const int ns[] = {1, 3, 8, 9, 20};
    uint64_t seed = 7;
    for (size_t sh = 0; sh < 2; sh++) {
        const int R = shapes[sh][0], C = shapes[sh][1], nb = C / 32;
        const size_t rb = (size_t)nb * 17;
        unsigned char *q = malloc((size_t)R * rb);
        uint16_t *b = malloc((size_t)R * C * sizeof *b);
        float *row = malloc((size_t)C * sizeof *row), *x = malloc((size_t)20 * C * sizeof *x);
        float *yq = malloc((size_t)20 * R * sizeof *yq), *yb = malloc((size_t)20 * R * sizeof *yb);
        for (int r = 0; r < R; r++) {
            for (int k = 0; k < nb; k++) {
                unsigned char *p = q + (size_t)r * rb + (size_t)k * 17;
                p[0] = (unsigned char)scales[(r * nb + k) % 9];
                for (int j = 1; j < 17; j++) {
                    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                    p[j] = (unsigned char)(seed >> 56);
                }
            }
            eng_qrow_f32(VX_MXFP4, q + (size_t)r * rb, row, C);
            for (int c = 0; c < C; c++) b[(size_t)r * C + c] = vx_f32_to_bf16(row[c]);
        }
        for (int i = 0; i < 20 * C; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((int64_t)(seed >> 40) - (1 << 23)) / (float)(1 << 22);
        }
        eng_w wq = {VX_MXFP4, q, R, C, rb, 0, 1}, wb = {VX_BF16, b, R, C, (size_t)C * 2, 0, 0};
        for (int a = 0; a < 2; a++) {
            setenv("LQL_NO_AVX512", a ? "1" : "0", 1);
            for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
                eng_matmul(&wq, x, ns[k], yq);
                eng_matmul(&wb, x, ns[k], yb);
                CHECK_MSG(memcmp(yq, yb, (size_t)ns[k] * R * sizeof *yq) == 0,
                          "[%d, %d] x %d rows (LQL_NO_AVX512=%d): MXFP4 and its bf16 decode differ", R, C,
                          ns[k], a);
            }
        }
        unsetenv("LQL_NO_AVX512");
        free(q); free(b); free(row); free(x); free(yq); free(yb);
    }
}

/* The two models' logits on ids (prefill), then on 8 greedy continuation tokens fed one at a
 * time (decode): the worst |difference| and how many logit vectors were compared. */
static double compare_run(eng_session *sq, eng_session *sb, const int32_t *tok, int k, int V,
                          float *lq, float *lb, int *vectors, vx_err *err)
{
    double worst = 0;
    eng_session_reset(sq);
    eng_session_reset(sb);
    if (eng_forward(sq, tok, k, lq, NULL, err) || eng_forward(sb, tok, k, lb, NULL, err)) return INFINITY;
    for (int step = 0;; step++) {
        int aq = 0;
        for (int i = 0; i < V; i++) {
            worst = fmax(worst, fabs((double)lq[i] - lb[i]));
            if (lq[i] > lq[aq]) aq = i;
        }
        (*vectors)++;
        if (step == 8) break;
        int32_t next = aq;
        if (eng_forward(sq, &next, 1, lq, NULL, err) || eng_forward(sb, &next, 1, lb, NULL, err))
            return INFINITY;
    }
    return worst;
}

/* Every prompt of both goldens: the packed model's logits are the bf16 model's bit for bit
 * (its MXFP4 experts run through the bf16 kernels), in prefill and decode, with and
 * without AVX-512 (eng_avx512 reads LQL_NO_AVX512 per product). */
static void check_logits(vx_container *q, vx_container *b, const char *const golden[2])
{
    eng_model *mq = NULL, *mb = NULL;
    eng_session *sq = NULL, *sb = NULL;
    vx_err err = {0};
    CHECK_MSG(eng_model_bind(q, &mq, &err) == 0, "%s", err.msg);
    CHECK_MSG(eng_model_bind(b, &mb, &err) == 0, "%s", err.msg);
    if (!mq || !mb || eng_session_new(mq, 0, &sq, &err) || eng_session_new(mb, 0, &sb, &err)) {
        CHECK_MSG(0, "setup: %s", err.msg);
        goto out;
    }
    const int V = mq->vocab;
    float *lq = malloc((size_t)V * sizeof *lq), *lb = malloc((size_t)V * sizeof *lb);
    static const char *const isa[] = {"0", "1"};
    for (int a = 0; a < 2; a++) {
        setenv("LQL_NO_AVX512", isa[a], 1);
        double worst = 0;
        int prompts = 0, vectors = 0;
        for (int gi = 0; gi < 2; gi++) {
            cJSON *gj = t_load_json(golden[gi]);
            CHECK_MSG(gj != NULL, "%s", golden[gi]);
            const cJSON *p;
            cJSON_ArrayForEach(p, cJSON_GetObjectItem(gj, "prompts")) {
                int32_t tok[512];
                int k = 0;
                const cJSON *v;
                cJSON_ArrayForEach(v, cJSON_GetObjectItem(p, "ids")) if (k < 512) tok[k++] = (int32_t)v->valuedouble;
                if (k < 1) continue;
                double w = compare_run(sq, sb, tok, k, V, lq, lb, &vectors, &err);
                CHECK_MSG(isfinite(w), "forward: %s", err.msg);
                worst = fmax(worst, w);
                prompts++;
            }
            cJSON_Delete(gj);
        }
        printf("gpt-oss vs gpt-oss-bf16 (LQL_NO_AVX512=%s): %d prompts, %d logit vectors (prefill "
               "and 8 decode steps each), worst |logit difference| %.3g\n", isa[a], prompts, vectors,
               worst);
        CHECK(prompts >= 8);
        CHECK_MSG(worst == 0, "LQL_NO_AVX512=%s: worst logit difference %.3g", isa[a], worst);
    }
    unsetenv("LQL_NO_AVX512");
    free(lq);
    free(lb);
out:
    eng_session_free(sq);
    eng_session_free(sb);
    eng_model_free(mq);
    eng_model_free(mb);
}

/* WALK in DENSE mode scores an expert feature by the activation the engine computes for the
 * same input: the expert's gate and up biases and the clamped SwiGLU included (eng_mlp_run
 * on the walk's query q gives every feature of the expert). */
static void check_walk(vx_container *c)
{
    brw_model *bm = NULL;
    eng_model *m = NULL;
    vx_err err = {0};
    CHECK_MSG(brw_open(c, &bm, &err) == 0, "%s", err.msg);
    CHECK_MSG(eng_model_bind(c, &m, &err) == 0, "%s", err.msg);
    if (!bm || !m) {
        brw_close(bm);
        eng_model_free(m);
        return;
    }
    const int H = m->hidden, EI = m->expert_inter;
    float *q = malloc((size_t)H * sizeof *q), *act = malloc((size_t)EI * sizeof *act);
    float *out = malloc((size_t)H * sizeof *out);
    static const char *const prompts[] = {"cat", "The capital of France is", " dog"};
    int compared = 0;
    double worst = 0;
    for (size_t p = 0; p < sizeof prompts / sizeof *prompts; p++) {
        int32_t tok;
        brw_walk_opts o = {.top = 8, .layer_lo = -1, .layer_hi = -1, .mode = BRW_DENSE};
        brw_walk w = {0};
        if (brw_walk_query(bm, prompts[p], q, &tok, &err) || brw_walk_run(bm, prompts[p], &o, &w, &err)) {
            CHECK_MSG(0, "walk: %s", err.msg);
            continue;
        }
        for (int li = 0; li < w.n_layers; li++)
            for (int k = 0; k < w.counts[li]; k++) {
                const brw_hit *h = &w.hits[(size_t)li * w.top + k];
                const int e = (int)(h->feature / EI), i = (int)(h->feature % EI);
                if (eng_mlp_run(m, h->layer, &m->layers[h->layer].experts[e], -1, q, 1, NULL, act, out, &err)) {
                    CHECK_MSG(0, "mlp: %s", err.msg);
                    continue;
                }
                worst = fmax(worst, fabs((double)act[i] - h->score) / (1 + fabs((double)act[i])));
                compared++;
            }
        brw_walk_free(&w);
    }
    printf("WALK DENSE vs the engine's expert activations: %d features, worst relative "
           "difference %.2g\n", compared, worst);
    CHECK(compared == 3 * 4 * 8);
    CHECK_MSG(worst < 1e-5, "WALK DENSE activation differs from the engine's by %.3g", worst);
    free(q);
    free(act);
    free(out);
    brw_close(bm);
    eng_model_free(m);
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

/* browse's first touch checks what WALK reads of the experts, their biases included */
static void check_browse_touch(const vx_container *c)
{
    vx_err err = {0};
    brw_shape s;
    CHECK_MSG(brw_shape_read(c, &s, &err) == 0, "%s", err.msg);
    if (err.code) return;
    size_t n = 0, biases = 0;
    const vx_tensor **t = brw_shape_tensors(&s, &n);
    CHECK(t != NULL);
    for (int l = 0; t && l < s.layers; l++)
        for (int e = 0; e < s.layer[l].n_parts; e++) {
            const brw_part *p = &s.layer[l].parts[e];
            const vx_tensor *want[2] = {p->gate_b, p->up_b};
            for (int k = 0; k < 2; k++) {
                int found = 0;
                for (size_t i = 0; want[k] && i < n; i++) found |= t[i] == want[k];
                CHECK_MSG(!want[k] || found, "layer %d part %d: expert bias %d not checked", l, e, k);
                biases += want[k] != NULL;
            }
        }
    CHECK(biases > 0);
    free(t);
    brw_shape_free(&s);
}

int main(void)
{
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    char sq[4096], sb[4096], oq[4200], ob[4200], gq[4200], gb[4200];
    snprintf(sq, sizeof sq, "%s/models/families/gpt-oss", LQL_FIXTURE_DIR);
    snprintf(sb, sizeof sb, "%s/models/families/gpt-oss-bf16", LQL_FIXTURE_DIR);
    snprintf(gq, sizeof gq, "%s/golden.json", sq);
    snprintf(gb, sizeof gb, "%s/golden.json", sb);
    const char *const golden[2] = {gq, gb};
    check_mxfp4_bf16();
    check_narrowed_downmeta(sq);
    vx_err err = {0};
    vx_container *q = NULL, *b = NULL;
    CHECK_MSG(encode(sq, "packed", oq, sizeof oq, &err) == 0, "%s", err.msg);
    CHECK_MSG(encode(sb, "bf16", ob, sizeof ob, &err) == 0, "%s", err.msg);
    CHECK_MSG(vx_open(oq, &q, &err) == 0, "%s", err.msg);
    CHECK_MSG(vx_open(ob, &b, &err) == 0, "%s", err.msg);
    if (q && b) {
        check_experts(q, b);
        check_logits(q, b, golden);
        check_walk(q);
        check_browse_touch(q);
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
