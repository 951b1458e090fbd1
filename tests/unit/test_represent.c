/*
 * test_represent.c — what a quantised representation costs in model output, measured:
 * tinyllama (f32) gets Q8_0 and Q4_K representations of its decoder stack and output head
 * (profiles "q8" and "q4k"; Q6_K, Q4_0 and MXFP4 are measured beside them); each profile is bound and run over the 5 golden prompts and
 * 40 more, and its last-position distribution is compared with the f32 baseline's: top-1
 * agreement and mean KL(f32 || quantised) in nats. Bounds are the measured values with
 * margin (docs/lql/PROFILES.md records the numbers); mixtral's Q8_0 stack, its routers
 * kept f32, is measured the same way. Also: the representations' stored
 * sizes are exactly the block formats' (Q8_0 34 B / 32 values, Q4_K 144 B / 256) and the
 * per-tensor value differences are those of the codecs.
 */
#include "t.h"
#include "t_file.h"
#include "vindex.h"
#include "engine.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *extra[] = {
    "The capital of Germany is", "The capital of Italy is", "The capital of Spain is",
    "The capital of Japan is", "Water is made of", "The sun rises in the",
    "A group of wolves is called a", "The opposite of hot is", "Two plus two is",
    "The color of the sky is", "My favourite food is", "She opened the door and",
    "The chemical symbol for Silver is", "The largest planet is", "Dogs like to",
    "In the morning I drink", "The first letter of the alphabet is", "He said that the",
    "Once upon a time, a king", "The moon orbits the", "Life is like a",
    "The best way to learn is", "Knowledge is", "A baby dog is called a",
    "The capital of England is", "Happiness is", "The author of Hamlet is",
    "Music is the", "All that glitters is not", "The early bird catches the",
    "Birds can", "The ocean is", "I think therefore I", "Time is",
    "The quick brown fox", "Every day I", "The teacher told the class",
    "Paris is the capital of", "A journey of a thousand miles", "Love is",
};

typedef struct run { eng_model *m; vx_container *c; } run;

static int bind(run *r, const char *dir, const char *profile)
{
    vx_err err = {0};
    if (vx_open_profile(dir, profile, NULL, 0, &r->c, &err) < 0 || eng_model_bind(r->c, &r->m, &err) < 0) {
        fprintf(stderr, "bind %s: %s\n", profile ? profile : "baseline", err.msg);
        return -1;
    }
    return 0;
}

/* Last-position probabilities of text under r into p[vocab]. */
static int probs(run *r, const char *text, float *p)
{
    vx_err err = {0};
    eng_session *s = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    if (eng_tok_encode(eng_model_tokenizer(r->m), text, strlen(text), 1, &ids, &n, &err) < 0 ||
        eng_session_new(r->m, 64, &s, &err) < 0 || eng_forward(s, ids, (int)n, p, NULL, &err) < 0) {
        fprintf(stderr, "forward '%s': %s\n", text, err.msg);
        free(ids);
        eng_session_free(s);
        return -1;
    }
    eng_softmax(p, eng_model_vocab(r->m));
    free(ids);
    eng_session_free(s);
    return 0;
}

static int argmax(const float *p, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (p[i] > p[b]) b = i;
    return b;
}

/* The golden prompts of the model at src, then the extra ones, into prompts[64] (borrowed
 * from *golden, which the caller frees); their count. */
static int load_prompts(const char *src, const char **prompts, cJSON **golden)
{
    char gp[600];
    snprintf(gp, sizeof gp, "%s/golden.json", src);
    *golden = t_load_json(gp);
    const cJSON *p;
    int np = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(*golden, "prompts"))
        if (np < 64 - (int)(sizeof extra / sizeof extra[0]))
            prompts[np++] = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) prompts[np++] = extra[i];
    return np;
}

/* Runs every prompt under the baseline binding of dir and under each of nd profiles:
 * top-1 agreement and KL(baseline || profile) of the last-position distribution, summed
 * (kl) and largest (klmax). -1 when a binding or a forward pass fails. */
static int compare(const char *dir, const char *const *prompts, int np, const char *const *profs, int nd,
                   int *agree, double *kl, double *klmax)
{
    run base = {0}, q[8] = {{0}};
    int ok = bind(&base, dir, NULL) == 0;
    for (int d = 0; d < nd; d++) ok = ok && bind(&q[d], dir, profs[d]) == 0;
    int V = ok ? eng_model_vocab(base.m) : 0;
    float *pb = calloc((size_t)V + 1, sizeof *pb), *pq = calloc((size_t)V + 1, sizeof *pq);
    for (int d = 0; d < nd; d++) agree[d] = 0, kl[d] = klmax[d] = 0;
    for (int i = 0; ok && i < np; i++) {
        ok = probs(&base, prompts[i], pb) == 0;
        int top = argmax(pb, V);
        for (int d = 0; ok && d < nd; d++) {
            ok = probs(&q[d], prompts[i], pq) == 0;
            double s = 0;
            for (int v = 0; v < V; v++)
                if (pb[v] > 0) s += (double)pb[v] * (log((double)pb[v]) - log(fmax((double)pq[v], 1e-30)));
            kl[d] += s;
            klmax[d] = s > klmax[d] ? s : klmax[d];
            agree[d] += argmax(pq, V) == top;
        }
    }
    for (int d = 0; ok && d < nd; d++)
        printf("%s: top-1 agreement %d/%d, mean KL(f32 || %s) %.6f nats (max %.6f)\n", profs[d], agree[d], np,
               profs[d], kl[d] / np, klmax[d]);
    free(pb); free(pq);
    eng_model_free(base.m); vx_close(base.c);
    for (int d = 0; d < nd; d++) { eng_model_free(q[d].m); vx_close(q[d].c); }
    return ok ? 0 : -1;
}

/* Routers keep their source dtype under every target (llama.cpp keeps ffn_gate_inp f32):
 * mixtral (random weights) with its stack in Q8_0 and the routers f32 stays near the f32
 * model. Measured on its golden prompts + the extra ones: 43/44, mean KL 9.5e-3, max 0.127
 * nats (AVX2 kernels: 40/44, 8.1e-3, 0.114); with the routers quantised too it was 39/44,
 * 6.4e-2, max 2.27 (experts flipped). Top-1 is too coarse to tell them apart; KL does. */
static void moe_router(const char *tmpl)
{
    char dir[512], src[512];
    snprintf(dir, sizeof dir, "%s/mixtral", tmpl);
    snprintf(src, sizeof src, "%s/models/families/mixtral", LQL_FIXTURE_DIR);
    const char *prompts[64];
    cJSON *golden = NULL;
    int np = load_prompts(src, prompts, &golden);
    CHECK(np == 4 + 40);
    vx_err err = {0};
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    CHECK_MSG(vx_encode(src, dir, &o, &err) == 0, "%s", err.msg);
    vx_represent_info in;
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_Q8_0, &in, &err) == 0, "%s", err.msg);
    vx_select sel = {"target.decoder_stack", in.id};
    CHECK_MSG(vx_profile_add(dir, "q8", &sel, 1, 1, &err) == 0, "%s", err.msg);
    vx_container *c = NULL;
    CHECK_MSG(vx_open_profile(dir, "q8", NULL, 0, &c, &err) == 0, "%s", err.msg);
    const vx_tensor *r = c ? vx_find(c, "target.decoder_stack", "layers.1.ffn.router") : NULL;
    const vx_tensor *e = c ? vx_find(c, "target.decoder_stack", "layers.1.ffn.experts.0.up_proj") : NULL;
    CHECK(r && r->dtype == VX_F32 && e && e->dtype == VX_Q8_0);
    vx_close(c);
    static const char *const q8[] = {"q8"};
    int agree;
    double kl, klmax;
    CHECK(compare(dir, prompts, np, q8, 1, &agree, &kl, &klmax) == 0);
    CHECK(agree >= 38 && kl / np < 2e-2 && klmax < 0.5);
    cJSON_Delete(golden);
}

int main(void)
{
    char tmpl[] = "/tmp/lql-represent-XXXXXX", dir[512], src[512];
    if (!mkdtemp(tmpl)) return 1;
    snprintf(dir, sizeof dir, "%s/tiny", tmpl);
    snprintf(src, sizeof src, "%s/models/tinyllama", LQL_FIXTURE_DIR);
    vx_err err = {0};
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    CHECK_MSG(vx_encode(src, dir, &o, &err) == 0, "%s", err.msg);

    static const char *objs[] = {"target.decoder_stack", "target.output_head"};
    /* q8 and q4k are the asserted pair; q6_k, q4_0 and mxfp4 are measured beside them */
    enum { ND = 5 };
    static const vx_dtype dts[ND] = {VX_Q8_0, VX_Q4_K, VX_Q6_K, VX_Q4_0, VX_MXFP4};
    static const char *profs[ND] = {"q8", "q4k", "q6k", "q40", "mxfp4"};
    unsigned be[ND], bb[ND];
    for (int d = 0; d < ND; d++) vx_quant_block(dts[d], &be[d], &bb[d]);
    for (int d = 0; d < ND; d++) {
        for (int k = 0; k < 2; k++) {
            vx_represent_info in;
            CHECK_MSG(vx_represent(dir, objs[k], dts[d], &in, &err) == 0, "%s", err.msg);
            CHECK_STR(in.fidelity, "numerically-approximate");
            vx_select sel = {objs[k], in.id};
            CHECK_MSG(vx_profile_add(dir, profs[d], &sel, 1, 1, &err) == 0, "%s", err.msg);
            /* stored bytes: 1-D norms kept in f32, every matrix exactly the block format */
            uint64_t want = 0, weights = 0;
            vx_container *c = NULL;
            CHECK_MSG(vx_open(dir, &c, &err) == 0, "%s", err.msg);
            for (size_t i = 0; c && i < vx_tensor_count(c); i++) {
                const vx_tensor *t = vx_tensor_at(c, i);
                if (strcmp(t->object, objs[k]) != 0) continue;
                uint64_t n = vx_tensor_nelems(t);
                weights += n;
                want += t->ndim == 1 ? n * 4 : n / be[d] * bb[d];
            }
            vx_close(c);
            CHECK(in.bytes == want);
            CHECK(in.weights == weights);
            CHECK(in.kept == (k == 0 ? 8u : 1u));   /* 4 layers x 2 norms; the final norm */
        }
    }
    /* per-tensor differences of the stack: Q8_0 within half a step of each 32-block's
     * absmax/127, Q4_K looser; relative error measured 0.00500 (q8_0), 0.0667 (q4_k) */
    vx_container *ca = NULL, *cb = NULL, *cc = NULL;
    CHECK(vx_open(dir, &ca, &err) == 0);
    CHECK(vx_open_profile(dir, "q8", NULL, 0, &cb, &err) == 0);
    CHECK(vx_open_profile(dir, "q4k", NULL, 0, &cc, &err) == 0);
    double rel8 = 0, rel4 = 0, ss[4] = {0};
    for (size_t i = 0; ca && cb && cc && i < vx_tensor_count(ca); i++) {
        const vx_tensor *ta = vx_tensor_at(ca, i);
        if (strcmp(ta->object, "target.decoder_stack") != 0) continue;
        const vx_tensor *tb = vx_find(cb, ta->object, ta->name), *tc = vx_find(cc, ta->object, ta->name);
        vx_diff_stat d8, d4;
        CHECK(tb && tc && vx_tensor_diff(ta, tb, &d8, &err) == 0 && vx_tensor_diff(ta, tc, &d4, &err) == 0);
        if (!tb || !tc) continue;
        if (ta->ndim == 1) {
            CHECK(d8.differ == 0 && d4.differ == 0);   /* kept in the source dtype */
            CHECK(tb->dtype == VX_F32 && tc->dtype == VX_F32);
        } else {
            CHECK(tb->dtype == VX_Q8_0 && tc->dtype == VX_Q4_K);
        }
        ss[0] += d8.ss_diff; ss[1] += d8.ss_ref; ss[2] += d4.ss_diff; ss[3] += d4.ss_ref;
    }
    rel8 = sqrt(ss[0] / ss[1]);
    rel4 = sqrt(ss[2] / ss[3]);
    printf("decoder stack relative error: q8_0 %.5f, q4_k %.5f\n", rel8, rel4);
    CHECK(rel8 > 0.003 && rel8 < 0.007);
    CHECK(rel4 > 0.05 && rel4 < 0.09);
    vx_close(ca); vx_close(cb); vx_close(cc);

    /* model output: golden prompts + extra, last position */
    const char *prompts[64];
    cJSON *golden = NULL;
    int np = load_prompts(src, prompts, &golden);
    CHECK(np == 5 + 40);

    int agree[ND];
    double kl[ND], klmax[ND];
    CHECK(compare(dir, prompts, np, profs, ND, agree, kl, klmax) == 0);
    /* measured: q8 45/45, mean KL 1.99e-4 (max 1.0e-3); q4k 43/45, mean KL 7.6e-3 (max 3.0e-2)
     * (AVX2 kernels: 1.90e-4, 7.5e-3); see PROFILES.md */
    CHECK(agree[0] >= 44);
    CHECK(kl[0] / np < 5e-4);
    CHECK(agree[1] >= 40);
    CHECK(kl[1] / np < 2e-2);
    /* measured beside them: q6_k 42/45, 9.9e-4; q4_0 41/45, 1.04e-2; mxfp4 39/45, 2.8e-2.
     * KL orders the formats as their precision does: q8_0 < q6_k < q4_k < q4_0 < mxfp4 */
    CHECK(kl[2] / np < 3e-3 && agree[2] >= 38);
    CHECK(kl[3] / np < 3e-2 && agree[3] >= 36);
    CHECK(kl[4] / np < 6e-2 && agree[4] >= 34);
    CHECK(kl[0] < kl[2] && kl[2] < kl[1] && kl[1] < kl[3] && kl[3] < kl[4]);
    moe_router(tmpl);
    cJSON_Delete(golden);
    t_rm_rf(tmpl);
    return T_DONE();
}
