/*
 * test_browse_quant.c — browse over block-quantised FFN rows read in place. tinyllama is
 * encoded into the build tree and given q8_0, q4_k, q4_0, q6_k and mxfp4 representations
 * of its decoder stack; under each every WALK mode's hits (all ranks, every layer) equal a
 * float64 recomputation from the decoded rows (vx_decode_f32: the codecs' dequantiser) within 1e-4
 * relative, and the top hits are compared with the f32 WALK of the same prompts (the
 * agreement is printed and bounded from below). gpt2 (plain MLP with a c_fc bias) under
 * q8_0 covers DENSE's up rows with a bias. An embedding in a block codec is still refused
 * by name, and so is computing down-meta (the encode hook) from a quantised down_proj.
 */
#include "test_journal_fx.h"
#include "test_walk_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOP 10

static const char *const prompts[] = {"The capital of France is", "Paris", "water",
                                      "The king of", "She played the piano", "1 2 3"};
#define N_PROMPTS (sizeof prompts / sizeof *prompts)

/* Agreement of a quantised walk with the f32 one over every prompt and layer: top-1
 * equal, and hits of the f32 top TOP also in the quantised top TOP. */
typedef struct agree { int top1, layers, shared, hits; } agree;

static void compare(const brw_model *f32, const brw_model *qm, brw_walk_mode mode, agree *a)
{
    brw_walk_opts o = {.top = TOP, .layer_lo = -1, .layer_hi = -1, .mode = mode};
    vx_err err = {0};
    for (size_t p = 0; p < N_PROMPTS; p++) {
        brw_walk a0, a1;
        if (brw_walk_run(f32, prompts[p], &o, &a0, &err) != 0)
            continue;
        if (brw_walk_run(qm, prompts[p], &o, &a1, &err) != 0) {
            brw_walk_free(&a0);
            continue;
        }
        for (int i = 0; i < a0.n_layers; i++) {
            const brw_hit *x = &a0.hits[(size_t)i * TOP], *y = &a1.hits[(size_t)i * TOP];
            a->layers++;
            a->top1 += x[0].feature == y[0].feature;
            for (int j = 0; j < a0.counts[i]; j++) {
                a->hits++;
                for (int k = 0; k < a1.counts[i]; k++)
                    if (y[k].feature == x[j].feature) {
                        a->shared++;
                        break;
                    }
            }
        }
        brw_walk_free(&a0);
        brw_walk_free(&a1);
    }
}

/* Open dir with the decoder stack bound to representation rep (NULL: the baseline). */
static void open_model(const char *dir, const char *rep, vx_container **c, brw_model **m)
{
    vx_err err = {0};
    vx_select sel = {"target.decoder_stack", rep};
    *c = NULL;
    *m = NULL;
    CHECK_MSG(vx_open_profile(dir, NULL, &sel, rep ? 1 : 0, c, &err) == 0, "open %s: %s",
              rep ? rep : "baseline", err.msg);
    if (*c)
        CHECK_MSG(brw_open(*c, m, &err) == 0, "brw_open %s: %s", rep ? rep : "baseline",
                  err.msg);
}

static int encode(const char *hf, const char *out)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    if (system(cmd) != 0)
        return -1;
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.finish = brw_encode_finish;     /* down-meta, as EXTRACT writes it */
    vx_err err = {0};
    CHECK_MSG(vx_encode(hf, out, &o, &err) == 0, "encode %s: %s", hf, err.msg);
    return err.msg[0] ? -1 : 0;
}

/* A container whose baseline decoder stack is the q8_0 representation (listed first in
 * system_graph.json): browse opens it, but the encode hook refuses to compute down-meta
 * from it, by name. */
static void baseline_q8(const char *dir, const vx_container *c0)
{
    cJSON *g = cJSON_Duplicate(vx_graph_json(c0), 1), *o;
    cJSON *reps = NULL;
    cJSON_ArrayForEach(o, cJSON_GetObjectItem(g, "objects"))
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "id")), "target.decoder_stack"))
            reps = cJSON_GetObjectItem(o, "representations");
    CHECK(cJSON_GetArraySize(reps) == 3);
    if (cJSON_GetArraySize(reps) != 3) {
        cJSON_Delete(g);
        return;
    }
    cJSON_InsertItemInArray(reps, 0, cJSON_DetachItemFromArray(reps, 1));
    char path[4200], *text = cJSON_Print(g);
    snprintf(path, sizeof path, "%s/system_graph.json", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f && text && fputs(text, f) >= 0);
    if (f)
        fclose(f);
    free(text);
    cJSON_Delete(g);
    vx_container *c = NULL;
    brw_model *m = NULL;
    vx_err err = {0};
    CHECK_MSG(vx_open(dir, &c, &err) == 0, "open: %s", err.msg);
    CHECK_STR(vx_bound_representation(c, "target.decoder_stack"), "target.decoder_stack.q8_0");
    CHECK(c && brw_open(c, &m, &err) == 0 && m->s.layer[0].parts[0].gate->dtype == VX_Q8_0);
    brw_close(m);
    cJSON *ix = c ? cJSON_Duplicate(vx_index_json(c), 1) : NULL;
    vx_close(c);
    CHECK(brw_encode_finish(NULL, dir, ix, &err) == -1);
    CHECK_STR(err.msg, "down_meta: operand \"layers.0.ffn.down_proj\" is stored as q8_0; "
                       "down-meta is computed from f32, f16 or bf16 weights");
    cJSON_Delete(ix);
}

static void tiny(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/h14-quant-tiny.vindex3", LQL_BINARY_DIR);
    if (encode(LQL_FIXTURE_DIR "/models/tinyllama", dir) != 0)
        return;
    vx_err err = {0};
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_Q8_0, NULL, &err) == 0, "q8_0: %s",
              err.msg);
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_Q4_K, NULL, &err) == 0, "q4_k: %s",
              err.msg);
    vx_container *c0, *c8, *c4;
    brw_model *m0, *m8, *m4;
    open_model(dir, NULL, &c0, &m0);
    open_model(dir, "target.decoder_stack.q8_0", &c8, &m8);
    open_model(dir, "target.decoder_stack.q4_k", &c4, &m4);
    if (!m0 || !m8 || !m4)
        goto done;
    const brw_part *p8 = &m8->s.layer[2].parts[0], *p4 = &m4->s.layer[2].parts[0];
    CHECK(p8->gate->dtype == VX_Q8_0 && p8->up->dtype == VX_Q8_0 && p8->down->dtype == VX_Q8_0);
    CHECK(p4->gate->dtype == VX_Q4_K && p4->up->dtype == VX_Q4_K);
    /* gate bytes: 768 rows of 256 as 8 Q8_0 blocks (34 B) and as one Q4_K block (144 B) */
    CHECK(m8->s.layer[2].gate_bytes == 768u * 8 * 34);
    CHECK(m4->s.layer[2].gate_bytes == 768u * 144);
    /* the down-meta is the container's (computed at encode from the canonical weights) */
    brw_meta a, b;
    CHECK(brw_feature_meta(m0, NULL, 3, 470, &a) == 0 &&
          brw_feature_meta(m8, NULL, 3, 470, &b) == 0);
    CHECK(a.present && a.top_id == b.top_id && a.c_score == b.c_score);

    static const brw_walk_mode modes[] = {BRW_HYBRID, BRW_PURE, BRW_DENSE};
    static const char *const mname[] = {"hybrid", "pure", "dense"};
    for (int k = 0; k < 3; k++)
        for (size_t p = 0; p < N_PROMPTS; p++) {
            char name[96];
            snprintf(name, sizeof name, "q8_0 %s \"%s\"", mname[k], prompts[p]);
            wr_check_mode(m8, name, prompts[p], modes[k], TOP);
            snprintf(name, sizeof name, "q4_k %s \"%s\"", mname[k], prompts[p]);
            wr_check_mode(m4, name, prompts[p], modes[k], TOP);
        }

    /* agreement with the f32 walk (HYBRID); floors below the measured values */
    agree g8 = {0}, g4 = {0};
    compare(m0, m8, BRW_HYBRID, &g8);
    compare(m0, m4, BRW_HYBRID, &g4);
    printf("f32 vs q8_0 hybrid: top-1 %d/%d layers, top-%d hits shared %d/%d\n", g8.top1,
           g8.layers, TOP, g8.shared, g8.hits);
    printf("f32 vs q4_k hybrid: top-1 %d/%d layers, top-%d hits shared %d/%d\n", g4.top1,
           g4.layers, TOP, g4.shared, g4.hits);
    CHECK(g8.layers == 24 && g8.hits == 240 && g4.hits == 240);
    CHECK_MSG(g8.top1 >= 22 && g8.shared >= 220, "q8_0 agreement %d %d", g8.top1, g8.shared);
    CHECK_MSG(g4.top1 >= 16 && g4.shared >= 170, "q4_k agreement %d %d", g4.top1, g4.shared);

    /* the other codecs browse reads: every mode equal to float64 too */
    static const vx_dtype more[] = {VX_Q4_0, VX_Q6_K, VX_MXFP4};
    for (int d = 0; d < 3; d++) {
        const char *dn = vx_dtype_name(more[d]);
        char rep[64];
        snprintf(rep, sizeof rep, "target.decoder_stack.%s", dn);
        CHECK_MSG(vx_represent(dir, "target.decoder_stack", more[d], NULL, &err) == 0,
                  "%s: %s", dn, err.msg);
        vx_container *cx;
        brw_model *mx;
        open_model(dir, rep, &cx, &mx);
        if (mx) {
            CHECK(mx->s.layer[1].parts[0].gate->dtype == more[d]);
            for (int k = 0; k < 3; k++)
                for (size_t p = 0; p < N_PROMPTS; p += 2) {
                    char name[96];
                    snprintf(name, sizeof name, "%s %s \"%s\"", dn, mname[k], prompts[p]);
                    wr_check_mode(mx, name, prompts[p], modes[k], TOP);
                }
        }
        brw_close(mx);
        vx_close(cx);
    }
done:
    brw_close(m0);
    brw_close(m8);
    brw_close(m4);
    vx_close(c8);
    vx_close(c4);
    if (c0)
        baseline_q8(dir, c0);
    vx_close(c0);
    fx_rm_rf(dir);
}

static void gpt2(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/h14-quant-gpt2.vindex3", LQL_BINARY_DIR);
    if (encode(LQL_FIXTURE_DIR "/models/families/gpt2", dir) != 0)
        return;
    vx_err err = {0};
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_Q8_0, NULL, &err) == 0, "q8_0: %s",
              err.msg);
    vx_container *c;
    brw_model *m;
    open_model(dir, "target.decoder_stack.q8_0", &c, &m);
    if (m) {
        const brw_part *p = &m->s.layer[0].parts[0];
        CHECK(!m->s.gated && p->gate->dtype == VX_Q8_0 && p->bias && !p->up);
        wr_check_mode(m, "gpt2 q8_0 hybrid", "The capital of France is", BRW_HYBRID, TOP);
        wr_check_mode(m, "gpt2 q8_0 dense", "The capital of France is", BRW_DENSE, TOP);
    }
    brw_close(m);
    vx_close(c);

    /* an embedding in a block codec is refused by name: it is read as whole rows */
    CHECK(vx_represent(dir, "target.embedding", VX_Q8_0, NULL, &err) == 0);
    vx_select sel = {"target.embedding", "target.embedding.q8_0"};
    CHECK(vx_open_profile(dir, NULL, &sel, 1, &c, &err) == 0);
    CHECK(brw_open(c, &m, &err) == -1);
    CHECK_STR(err.msg, "browse: operand \"target.embedding.weight\" is stored as q8_0; "
                       "browse reads f32, f16 and bf16");
    vx_close(c);
    fx_rm_rf(dir);
}

int main(void)
{
    tiny();
    gpt2();
    return T_DONE();
}
