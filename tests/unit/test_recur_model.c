/*
 * test_recur_model.c — recurrent layers in whole models, on the encoded mamba2,
 * granite-hybrid, qwen3-next and qwen3-next-mtp fixtures (the goldens themselves are
 * test_parity's) and the dense hybrid granite-dense (tools/mkfixture; no golden):
 *   - prefill of a long sequence (crossing the session's 256-position chunks) equals the
 *     same tokens fed in odd pieces and one token at a time: last-position logits within
 *     1e-5 of the largest logit; a reset session starts again from zero state;
 *   - the declared state: fixed bytes (conv window + recurrent state) and bytes per
 *     position as the graph declares them, the numbers SHOW LAYERS / STATS report;
 *   - a failed forward (cancelled) resets a session holding recurrent state to position 0;
 *   - the multi-token-prediction block is an auxiliary component ("mtp", one attention + MoE
 *     layer, an edge from the decoder's last layer): qwen3-next-mtp's main logits are
 *     bit-identical to qwen3-next's, and nothing of it is bound by the decoder's plan;
 *   - fail-closed: a missing recurrent operand, an unknown layer kind, a section field the
 *     executor does not know and state declarations that do not match the operator are each
 *     refused by name (pinned texts).
 */
#include <stdlib.h>
#include <cjson/cJSON.h>
#include "t.h"
#include "t_file.h"
#include "t_graph.h"
#include "engine_int.h"

static char tmp[] = "/tmp/lql-recur-XXXXXX";

static void encode(const char *fx, char *out, size_t n)
{
    t_encode_family(tmp, fx, out, n);
}

static eng_model *bind(const char *dir, vx_container **c)
{
    vx_err err = {0};
    eng_model *m = NULL;
    if (vx_open(dir, c, &err) != 0 || eng_model_bind(*c, &m, &err) != 0) {
        CHECK_MSG(0, "bind %s: %s", dir, err.msg);
        return NULL;
    }
    return m;
}

/* max |a - b| / (1 + max |b|) */
static double rel(const float *a, const float *b, int n)
{
    double d = 0, s = 0;
    for (int i = 0; i < n; i++) {
        if (fabs(b[i]) > s) s = fabs(b[i]);
        if (fabs(a[i] - b[i]) > d) d = fabs(a[i] - b[i]);
    }
    return d / (1 + s);
}

/* Prefill vs pieces vs token by token over n tokens. */
static void test_decode(const char *name, const char *dir, int n)
{
    vx_container *c;
    eng_model *m = bind(dir, &c);
    if (!m) return;
    const int V = eng_model_vocab(m);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 131 + 7) % 510);
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4), *d = malloc((size_t)V * 4);
    eng_session *s;
    vx_err err = {0};
    CHECK(eng_session_new(m, n, &s, &err) == 0);
    CHECK(eng_forward(s, ids, n, a, NULL, &err) == 0);
    eng_session_reset(s);
    const int pieces[] = {100, 1, 155, 3};
    int done = 0;
    for (int k = 0; k < 4; k++) {
        CHECK(eng_forward(s, ids + done, pieces[k], NULL, NULL, &err) == 0);
        done += pieces[k];
    }
    CHECK(eng_forward(s, ids + done, n - done, b, NULL, &err) == 0);
    double e_split = rel(b, a, V);
    eng_session_reset(s);
    for (int t = 0; t < n; t++) CHECK(eng_forward(s, ids + t, 1, d, NULL, &err) == 0);
    double e_step = rel(d, a, V);
    CHECK_MSG(e_split < 1e-5, "%s: %d tokens in pieces vs one prefill: %g", name, n, e_split);
    CHECK_MSG(e_step < 1e-5, "%s: %d tokens one at a time vs one prefill: %g", name, n, e_step);
    printf("%-16s %d tokens: pieces %.2g, token-by-token %.2g (relative to the largest logit)\n",
           name, n, e_split, e_step);
    /* a reset starts from zero state: the same prompt gives the same bits */
    eng_session_reset(s);
    CHECK(eng_forward(s, ids, 37, b, NULL, &err) == 0);
    eng_session_reset(s);
    CHECK(eng_forward(s, ids, 37, d, NULL, &err) == 0);
    CHECK(memcmp(b, d, (size_t)V * 4) == 0);
    /* a cancelled forward cannot rewind a recurrence: the session is back at 0 */
    vx_cancel_flag = 1;
    CHECK(eng_forward(s, ids, 3, NULL, NULL, &err) == -1 && err.code == VX_ECANCEL);
    vx_cancel_flag = 0;
    CHECK(eng_session_pos(s) == 0);
    CHECK(eng_forward(s, ids, 37, d, NULL, &err) == 0);
    CHECK(memcmp(b, d, (size_t)V * 4) == 0);
    free(ids); free(a); free(b); free(d);
    eng_session_free(s);
    eng_model_free(m);
    vx_close(c);
}

/* The declared state in bytes: fixed (per layer, allocated once) and per position. */
static void test_state(const char *dir, uint64_t fixed, uint64_t per_token, const char *kinds)
{
    vx_container *c = NULL;
    vx_err err = {0};
    CHECK(vx_open(dir, &c, &err) == 0);
    if (!c) return;
    const vx_graph_shape *g = vx_shape_of(c);
    CHECK_MSG(g->state_fixed == fixed, "%s: fixed state %llu bytes, want %llu", dir,
              (unsigned long long)g->state_fixed, (unsigned long long)fixed);
    CHECK_MSG(g->state_per_token == per_token, "%s: %llu bytes per position, want %llu", dir,
              (unsigned long long)g->state_per_token, (unsigned long long)per_token);
    for (int l = 0; l < g->layers; l++) {
        int want = kinds[l] == 'm' ? VX_MIXER_MAMBA2 : kinds[l] == 'd' ? VX_MIXER_DELTANET
                                                                         : VX_MIXER_ATTENTION;
        CHECK_MSG((int)g->layer[l].mixer == want, "%s: layer %d is %s", dir, l,
                  vx_mixer_name(g->layer[l].mixer));
        if (g->layer[l].mixer == VX_MIXER_MAMBA2)
            CHECK(g->layer[l].nstate == 2 && !strcmp(g->layer[l].state[0].name, "conv") &&
                  !strcmp(g->layer[l].state[1].name, "ssm") && g->layer[l].state_per_token == 0);
    }
    vx_close(c);
}

/* The MTP block: a second component with an edge, never read by the decoder. */
static void test_mtp(const char *plain, const char *mtp)
{
    vx_container *c0, *c1;
    eng_model *m0 = bind(plain, &c0), *m1 = bind(mtp, &c1);
    if (!m0 || !m1) return;
    CHECK(vx_shape_count(c0) == 1 && vx_shape_count(c1) == 2);
    const vx_graph_shape *g = vx_shape_component(c1, "mtp");
    CHECK(g && !strcmp(g->role, "mtp") && g->layers == 1 &&
          g->layer[0].mixer == VX_MIXER_ATTENTION && g->layer[0].channel == VX_CHANNEL_MOE);
    const cJSON *edges = cJSON_GetObjectItem(vx_graph_json(c1), "edges");
    const cJSON *e = cJSON_GetArrayItem(edges, 0);
    CHECK(cJSON_GetArraySize(edges) == 1 &&
          !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "producer_component")), "target") &&
          !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "consumer_object")), "mtp.block") &&
          cJSON_GetArrayItem(cJSON_GetObjectItem(e, "producer_layers"), 0)->valueint == 3);
    CHECK(vx_find(c1, "mtp.block", "fc") && vx_find(c1, "mtp.block", "layers.0.ffn.router") &&
          !vx_find(c0, "mtp.block", "fc"));
    const int V = eng_model_vocab(m0);
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (int32_t)((i * 57 + 3) % 510);
    eng_session *s0, *s1;
    vx_err err = {0};
    CHECK(eng_session_new(m0, 64, &s0, &err) == 0 && eng_session_new(m1, 64, &s1, &err) == 0);
    CHECK(eng_forward(s0, ids, 40, a, NULL, &err) == 0 && eng_forward(s1, ids, 40, b, NULL, &err) == 0);
    CHECK_MSG(memcmp(a, b, (size_t)V * 4) == 0, "qwen3-next-mtp's main logits differ from qwen3-next's");
    free(a); free(b);
    eng_session_free(s0); eng_session_free(s1);
    eng_model_free(m0); eng_model_free(m1);
    vx_close(c0); vx_close(c1);
}

/* ---------------------------------------------------------------- refusals */

static cJSON *layer(cJSON *c, int l) { return cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), l); }
static cJSON *region(cJSON *c, int l, int r)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(layer(c, l), "state"), r);
}
static cJSON *ssm(cJSON *c) { return cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "mamba2"); }

static void e_bias(cJSON *c) { cJSON_ReplaceItemInObject(ssm(c), "proj_bias", cJSON_CreateTrue()); }
static void e_kind(cJSON *c) { cJSON_ReplaceItemInObject(layer(c, 1), "operator", cJSON_CreateString("rwkv7")); }
static void e_field(cJSON *c) { cJSON_AddNumberToObject(ssm(c), "chunk", 256); }
static void e_conv(cJSON *c)
{
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(region(c, 0, 0), "shape"), 1, cJSON_CreateNumber(100));
}
static void e_per_token(cJSON *c) { cJSON_ReplaceItemInObject(region(c, 2, 1), "per_token", cJSON_CreateTrue()); }
static void e_one_region(cJSON *c) { cJSON_DeleteItemFromArray(cJSON_GetObjectItem(layer(c, 1), "state"), 1); }
static void e_groups(cJSON *c) { cJSON_ReplaceItemInObject(ssm(c), "groups", cJSON_CreateNumber(3)); }
static void e_window(cJSON *c) { cJSON_ReplaceItemInObject(layer(c, 0), "window", cJSON_CreateNumber(8)); }
static void e_dn_region(cJSON *c) { cJSON_ReplaceItemInObject(region(c, 1, 1), "name", cJSON_CreateString("ssm")); }
static void e_rscale(cJSON *c)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(c, "execution"), "residual_scale", cJSON_CreateNumber(0));
}
static void e_dn_heads(cJSON *c)
{
    cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "gated_deltanet");
    cJSON_ReplaceItemInObject(d, "v_heads", cJSON_CreateNumber(8));
}

/* Refused by the typed graph shape at open (open_fails) or by the plan at bind. */
static void refuse(const char *base, t_graph_edit ed, int open_fails, const char *want)
{
    t_graph_refused(tmp, base, ed, open_fails, want);
}

static void test_refusals(const char *mamba, const char *next, const char *granite)
{
    /* INSERT divides its step by it; the forward would silently drop every branch */
    refuse(granite, e_rscale, 0, "system graph: execution.residual_scale 0 must be above 0 and below 1e6");
    refuse(next, e_dn_region, 0, "layer 1: operator 'gated_deltanet' keeps state region 'recurrent' "
           "as region 1, which the graph does not declare");
    refuse(next, e_dn_heads, 0, "layer 0: state region 'conv' is declared f32 [3, 160] fixed; "
           "operator 'gated_deltanet' keeps f32 [3, 256] fixed");
    refuse(mamba, e_bias, 0, "layer 0: operand 'layers.0.ssm.in_proj.bias' of target.decoder_stack is missing");
    refuse(mamba, e_kind, 1, "layer 1: operator 'rwkv7' is not a token mixer this executor knows "
           "(softmax_attention, mla, gated_deltanet, mamba2)");
    refuse(mamba, e_field, 0, "system graph: execution.mamba2 field 'chunk' is not supported by this executor");
    refuse(mamba, e_conv, 0, "layer 0: state region 'conv' is declared f32 [3, 100] fixed; operator "
           "'mamba2' keeps f32 [3, 192] fixed");
    refuse(mamba, e_per_token, 0, "layer 2: state region 'ssm' is declared f32 [8, 16, 16] per position; "
           "operator 'mamba2' keeps f32 [8, 16, 16] fixed");
    refuse(mamba, e_one_region, 0, "layer 1: operator 'mamba2' keeps 2 state regions (conv, ssm), the "
           "graph declares 1");
    refuse(mamba, e_groups, 0, "system graph: execution.mamba2 (heads 8, groups 3, conv_kernel 4, "
           "dt_min 0.05, norm_eps 1e-05) is inconsistent");
    refuse(mamba, e_window, 1, "layer 0: a window on operator 'mamba2', which does not attend");
}

int main(void)
{
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    char mamba[4200], granite[4200], next[4200], mtp[4200];
    encode("mamba2", mamba, sizeof mamba);
    encode("granite-hybrid", granite, sizeof granite);
    encode("qwen3-next", next, sizeof next);
    encode("qwen3-next-mtp", mtp, sizeof mtp);
    /* mamba2: 3 layers x (conv [3, 128 + 2·2·16] + ssm [8, 16, 16]) f32; nothing per position */
    test_state(mamba, 3 * 4 * (3 * 192 + 8 * 16 * 16), 0, "mmm");
    /* granite: 3 mamba layers x (conv [3, 128 + 2·16] + ssm [8, 16, 16]); one attention layer
     * keeping k and v [2 kv heads, 16] per position */
    test_state(granite, 3 * 4 * (3 * 160 + 8 * 16 * 16), 2 * 4 * 2 * 16, "mamm");
    /* qwen3-next: 3 gated_deltanet layers x (conv [3, 2·2·16 + 4·24] + recurrent [4, 16, 24]);
     * one attention layer keeping k and v [2, 32] per position */
    test_state(next, 3 * 4 * (3 * 160 + 4 * 16 * 24), 2 * 4 * 2 * 32, "ddda");
    test_decode("mamba2", mamba, 600);
    test_decode("granite-hybrid", granite, 300);
    /* the dense hybrid (tools/mkfixture, no experts): the same state, and its decode */
    char dense[4200];
    snprintf(dense, sizeof dense, "%s/granite-dense.vindex3", tmp);
    vx_err err = {0};
    CHECK_MSG(vx_encode(LQL_FIXTURE_DIR "/models/granite-dense", dense, NULL, &err) == 0, "%s", err.msg);
    test_state(dense, 3 * 4 * (3 * 160 + 8 * 16 * 16), 2 * 4 * 2 * 16, "mamm");
    vx_container *dc = NULL;
    if (vx_open(dense, &dc, &err) == 0) {
        const vx_graph_shape *g = vx_shape_of(dc);
        for (int l = 0; l < g->layers; l++)
            CHECK_MSG(g->layer[l].channel == VX_CHANNEL_DENSE, "granite-dense layer %d is not dense", l);
        vx_close(dc);
    }
    test_decode("granite-dense", dense, 300);
    test_decode("qwen3-next", next, 300);
    test_mtp(next, mtp);
    test_refusals(mamba, next, granite);
    t_rm_rf(tmp);
    return T_DONE();
}
