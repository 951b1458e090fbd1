/*
 * test_parity_engine.c — the engine's contracts beyond the goldens, on encoded fixtures:
 *   - bind refusals with their exact messages (unknown operators and fields, missing and
 *     mis-shaped operands), forward-pass argument errors and cancellation;
 *   - observers: residual bookkeeping (resid_out = resid_in + attn + ffn), attention
 *     probabilities (rows sum to 1, causal, the sliding window), FFN activations equal
 *     to act(gate·x)·(up·x) recomputed in float64 from the stored rows, MoE activations
 *     zero outside the routed experts;
 *   - the overlay: identity edits change nothing, a tombstone equals a zero down column
 *     equals the rank-1 delta that cancels the feature, detaching restores the base;
 *   - prefill and token-by-token decode agree; seeded sampling is reproducible;
 *   - sessions batched (eng_forward_batch, eng_generate_batch) equal each session alone,
 *     on attention (full, windowed, MLA), MoE and recurrent (Mamba2, Gated DeltaNet) layers;
 *     a pass resumed at any layer (eng_forward_from) equals the whole pass bit for bit.
 */
#include <stdlib.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "t.h"
#include "t_file.h"
#include "t_graph.h"
#include "engine_int.h"

static char tmp[] = "/tmp/lql-engine-XXXXXX";

static void encode(const char *fx, char *out, size_t n)
{
    t_encode_family(tmp, fx, out, n);
}

/* ---------------------------------------------------------------- bind refusals */

typedef t_graph_edit graph_edit;

static void e_operator(cJSON *c)
{
    cJSON *l = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), 1);
    cJSON_ReplaceItemInObject(l, "operator", cJSON_CreateString("linear_attention"));
}
static void e_ffn(cJSON *c)
{
    cJSON *l = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), 2);
    cJSON_ReplaceItemInObject(l, "ffn", cJSON_CreateString("hyper"));
}
static void e_layer_field(cJSON *c)
{
    cJSON_AddTrueToObject(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), 0), "cross_attention");
}
static void e_norm(cJSON *c)
{
    cJSON *n = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "norm");
    cJSON_ReplaceItemInObject(n, "kind", cJSON_CreateString("scale"));
}
static void e_field(cJSON *c)
{
    cJSON_AddNumberToObject(cJSON_GetObjectItem(c, "execution"), "alibi", 8);
}
static void e_yarn(cJSON *c)
{
    cJSON *r = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"),
                                                       "attention"), "rope");
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", "dynamic");
    cJSON_ReplaceItemInObject(r, "scaling", s);
}
static void e_act(cJSON *c)
{
    cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "ffn");
    cJSON_ReplaceItemInObject(f, "activation", cJSON_CreateString("relu2"));
}
static void e_bias(cJSON *c)
{
    cJSON *a = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "attention");
    cJSON_ReplaceItemInObject(a, "qkv_bias", cJSON_CreateTrue());
}
static void e_heads(cJSON *c)
{
    cJSON *a = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "attention");
    cJSON_ReplaceItemInObject(a, "heads", cJSON_CreateNumber(8));
}
static void e_moe(cJSON *c)
{
    cJSON *l = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), 0);
    cJSON_ReplaceItemInObject(l, "ffn", cJSON_CreateString("moe"));
}
static void e_geometry(cJSON *c)
{
    cJSON *a = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "attention");
    cJSON_ReplaceItemInObject(a, "kv_heads", cJSON_CreateNumber(3));
}

static cJSON *state0(cJSON *c)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), 0), "state"), 0);
}
static void e_state_shape(cJSON *c)
{
    cJSON *sh = cJSON_GetObjectItem(state0(c), "shape");
    cJSON_ReplaceItemInArray(sh, 1, cJSON_CreateNumber(8));
}
static void e_state_fixed(cJSON *c)
{
    cJSON_ReplaceItemInObject(state0(c), "per_token", cJSON_CreateFalse());
}
static void e_state_gone(cJSON *c)
{
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), 2), "state",
                              cJSON_CreateNull());
}
static void e_window_absent(cJSON *c)
{
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), 1), "window");
}
static void e_state_dtype(cJSON *c)
{
    cJSON_ReplaceItemInObject(state0(c), "dtype", cJSON_CreateString("q8_0"));
}
static void e_state_field(cJSON *c)
{
    cJSON_AddStringToObject(state0(c), "layout", "paged");
}
static void e_mamba_section(cJSON *c)
{
    cJSON *l = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "layers"), 1);
    cJSON_ReplaceItemInObject(l, "operator", cJSON_CreateString("mamba2"));
}
static void e_hidden(cJSON *c)
{
    cJSON_ReplaceItemInObject(c, "hidden_size", cJSON_CreateNumber(100000));
}

static cJSON *specials(cJSON *c)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "special_tokens");
}
static void e_eos_text(cJSON *c)
{
    cJSON *l = cJSON_CreateArray();
    cJSON_AddItemToArray(l, cJSON_CreateString("2"));
    cJSON_ReplaceItemInObject(specials(c), "eos", l);
}
static void e_eos_range(cJSON *c)
{
    cJSON *l = cJSON_CreateArray();
    cJSON_AddItemToArray(l, cJSON_CreateNumber(1));
    cJSON_AddItemToArray(l, cJSON_CreateNumber(1e9));
    cJSON_ReplaceItemInObject(specials(c), "eos", l);
}
static void e_eos_many(cJSON *c)
{
    cJSON *l = cJSON_CreateArray();
    for (int i = 0; i < 33; i++) cJSON_AddItemToArray(l, cJSON_CreateNumber(i));
    cJSON_ReplaceItemInObject(specials(c), "eos", l);
}
static void e_bos(cJSON *c)
{
    cJSON_ReplaceItemInObject(specials(c), "bos", cJSON_CreateNumber(-1));
}
/* execution.section.key set to v */
static void exec_set(cJSON *c, const char *section, const char *key, double v)
{
    cJSON *o = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), section);
    cJSON_ReplaceItemInObject(o, key, cJSON_CreateNumber(v));
}
static void e_eps(cJSON *c) { exec_set(c, "norm", "eps", 0); }
static void e_scale(cJSON *c) { exec_set(c, "attention", "scale", -0.25); }
/* a soft-cap of 0 or less divides the scores by it: refused, null is off */
static void e_softcap(cJSON *c) { exec_set(c, "attention", "softcap", 0); }
static void e_final_softcap(cJSON *c) { exec_set(c, "lm_head", "softcap", -30); }
static void e_final_gone(cJSON *c)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(c, "execution"), "final_norm", cJSON_CreateFalse());
}
static void e_final_absent(cJSON *c)
{
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(c, "execution"), "final_norm");
}
static void e_rope_absent(cJSON *c)
{
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "attention"),
                               "rope");
}
static void e_tied(cJSON *c)
{
    cJSON *h = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "lm_head");
    cJSON_ReplaceItemInObject(h, "tied", cJSON_CreateTrue());
}
static void e_context(cJSON *c)
{
    cJSON_ReplaceItemInObject(c, "context_length", cJSON_CreateNumber(7));
}

static void e_experts(cJSON *c)
{
    cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "moe");
    cJSON_ReplaceItemInObject(m, "experts", cJSON_CreateNumber(4));
}
static void e_expert_width(cJSON *c)
{
    cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "moe");
    cJSON_ReplaceItemInObject(m, "expert_intermediate", cJSON_CreateNumber(20));
}
static void e_width(cJSON *c)
{
    cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "execution"), "ffn");
    cJSON_ReplaceItemInObject(f, "intermediate", cJSON_CreateNumber(100));
}

/* Refused by the typed graph shape at open (open_fails) or by the plan at bind. */
static void refuse_at(const char *base, graph_edit ed, int open_fails, const char *want)
{
    t_graph_refused(tmp, base, ed, open_fails, want);
}

static void refuse(const char *base, graph_edit ed, const char *want)
{
    refuse_at(base, ed, 0, want);
}

static void test_refusals(const char *gqa, const char *mix)
{
    /* the feature count browse scans is the graph's, checked against the stored rows */
    refuse(mix, e_experts, "layer 0: operand 'layers.0.ffn.router' of target.decoder_stack has "
                           "shape [8, 64], expected [4, 64]");
    refuse(gqa, e_width, "layer 0: operand 'layers.0.ffn.gate_proj' of target.decoder_stack has "
                         "shape [176, 64], expected [100, 64]");
    refuse(mix, e_expert_width, "layer 0: operand 'layers.0.ffn.experts.0.gate_proj' of "
                                "target.decoder_stack has shape [64, 64], expected [20, 64]");
    refuse_at(gqa, e_operator, 1, "layer 1: operator 'linear_attention' is not a token mixer this "
              "executor knows (softmax_attention, mla, gated_deltanet, mamba2)");
    refuse_at(gqa, e_ffn, 1, "layer 2: ffn operator 'hyper' is not a channel mixer this executor "
              "knows (dense, moe, none)");
    refuse_at(gqa, e_layer_field, 1, "layer 0: field 'cross_attention' is not supported by this executor");
    refuse(gqa, e_norm, "system graph: execution.norm.kind 'scale' is not supported by this executor");
    refuse(gqa, e_field, "system graph: execution field 'alibi' is not supported by this executor");
    refuse(gqa, e_yarn, "system graph: execution.attention.rope.scaling.type 'dynamic' is not supported by this executor");
    refuse(gqa, e_act, "system graph: execution.ffn.activation 'relu2' is not supported by this executor");
    refuse(gqa, e_bias, "layer 0: operand 'layers.0.attn.q_proj.bias' of target.decoder_stack is missing");
    refuse(gqa, e_heads, "layer 0: operand 'layers.0.attn.q_proj' of target.decoder_stack has "
                         "shape [64, 64], expected [128, 64]");
    refuse_at(gqa, e_moe, 1, "layer 0: ffn 'moe' but execution.moe is null");
    refuse(gqa, e_state_shape, "layer 0: state region 'k' is declared f32 [2, 8] per position; "
                               "operator 'softmax_attention' keeps f32 [2, 16] per position");
    refuse(gqa, e_state_fixed, "layer 0: state region 'k' is declared f32 [2, 16] fixed; "
                               "operator 'softmax_attention' keeps f32 [2, 16] per position");
    refuse_at(gqa, e_state_gone, 1, "layer 2: state is missing or not a list of regions");
    /* a field is present, null when off: absent is not read as off */
    refuse_at(gqa, e_window_absent, 1, "layer 1: field 'window' is missing (a field is always "
              "present, null when its feature is off)");
    refuse(gqa, e_final_absent, "system graph: execution.final_norm is missing (a field is always "
           "present, null when its feature is off)");
    refuse(gqa, e_rope_absent, "system graph: execution.attention.rope is missing (a field is "
           "always present, null when its feature is off)");
    refuse_at(gqa, e_state_dtype, 1, "layer 0: state region 'k' dtype 'q8_0' is not f32, f16 or bf16");
    refuse_at(gqa, e_state_field, 1, "layer 0: state[0] field 'layout' is not known to this reader");
    refuse_at(gqa, e_mamba_section, 1, "layer 1: operator 'mamba2' but execution.mamba2 is null");
    refuse(gqa, e_geometry, "system graph: 4 heads is not a multiple of 3 kv heads");
    refuse(gqa, e_hidden, "system graph: hidden_size = 100000 exceeds the engine's limit 65536");
    /* special tokens are the encoder's ids or refused, never dropped (GENERATE stops on them) */
    refuse(gqa, e_eos_text, "system graph: execution.special_tokens.eos[] is not a token id below vocab_size 512");
    refuse(gqa, e_eos_range, "system graph: execution.special_tokens.eos[] is not a token id below vocab_size 512");
    refuse(gqa, e_bos, "system graph: execution.special_tokens.bos is not a token id below vocab_size 512");
    refuse(gqa, e_eos_many, "system graph: execution.special_tokens.eos lists 33 ids; this executor stops on at most 32");
    refuse(gqa, e_eps, "system graph: execution.norm.eps = 0 is not positive");
    refuse(gqa, e_scale, "system graph: execution.attention.scale = -0.25 is not positive");
    refuse(gqa, e_softcap, "system graph: execution.attention.softcap = 0 is not positive");
    refuse(gqa, e_final_softcap, "system graph: execution.lm_head.softcap = -30 is not positive");
    /* an operand no operation reads: running would drop a term of the model */
    refuse(gqa, e_final_gone, "operand 'final_norm' of target.output_head is stored but no operation "
           "of the system graph reads it (a flag such as execution.final_norm or "
           "attention.qkv_bias false or absent?): graph and operands disagree");
    refuse(gqa, e_tied, "operand 'lm_head' of target.output_head is stored but no operation of the "
           "system graph reads it (a flag such as execution.final_norm or attention.qkv_bias "
           "false or absent?): graph and operands disagree");
    refuse_at(gqa, e_context, 1, "system graph: context_length disagrees with execution.context_length 512");
}

/* ---------------------------------------------------------------- observers */

typedef struct rec {
    int H, L, F, window, bad_resid, bad_attn, attn_calls, ffn_calls, moe_bad;
    float *prev;          /* [n, H] residual before the current layer */
    const eng_model *m;
    double worst_act;
} rec;

static void r_embed(void *ctx, int pos0, int n, const float *x)
{
    rec *r = ctx;
    (void)pos0;
    memcpy(r->prev, x, (size_t)n * r->H * sizeof(float));
}

static void r_layer(void *ctx, int l, int pos0, int n, const float *a, const float *f,
                    const float *x)
{
    rec *r = ctx;
    (void)l; (void)pos0;
    for (size_t i = 0; i < (size_t)n * r->H; i++)
        if (fabsf(r->prev[i] + a[i] + f[i] - x[i]) > 1e-5f * (1 + fabsf(x[i]))) r->bad_resid++;
    memcpy(r->prev, x, (size_t)n * r->H * sizeof(float));
}

static void r_attn(void *ctx, int l, int h, int pos0, int n, int n_keys, const float *p)
{
    rec *r = ctx;
    (void)l; (void)h;
    r->attn_calls++;
    for (int t = 0; t < n; t++) {
        int i = pos0 + t;
        double s = 0;
        for (int j = 0; j < n_keys; j++) {
            float v = p[(size_t)t * n_keys + j];
            int vis = j <= i && (!r->window || j > i - r->window);
            if (!vis && v != 0) r->bad_attn++;
            if (vis && !(v > 0)) r->bad_attn++;
            s += v;
        }
        if (fabs(s - 1) > 1e-5) r->bad_attn++;
    }
}

/* FFN activations against float64 recomputation from the stored gate/up rows. */
static void r_ffn(void *ctx, int l, int pos0, int n, const float *in, const float *act, int F)
{
    rec *r = ctx;
    (void)pos0;
    r->ffn_calls++;
    const eng_layer *L = &r->m->layers[l];
    if (L->moe) {
        /* exactly top_k experts carry nonzero activations per position */
        int E = r->m->experts, EI = r->m->expert_inter;
        for (int t = 0; t < n; t++) {
            int live = 0;
            for (int e = 0; e < E; e++) {
                int nz = 0;
                for (int f = 0; f < EI; f++) nz |= act[(size_t)t * F + e * EI + f] != 0;
                live += nz;
            }
            if (live != r->m->top_k) r->moe_bad++;
        }
        return;
    }
    const int H = r->H;
    for (int t = 0; t < n; t += 3)
        for (int f = 0; f < F; f += 7) {
            double g = 0, u = 0;
            for (int i = 0; i < H; i++) {
                g += (double)eng_w_at(&L->mlp.gate, f, i) * in[(size_t)t * H + i];
                u += (double)eng_w_at(&L->mlp.up, f, i) * in[(size_t)t * H + i];
            }
            double want = g / (1 + exp(-g)) * u, got = act[(size_t)t * F + f];
            double e = fabs(want - got) / (1e-3 + fabs(want));
            if (e > r->worst_act) r->worst_act = e;
        }
}

static eng_model *bind(const char *dir, vx_container **c)
{
    eng_model *m = NULL;
    vx_err err = {0};
    if (vx_open(dir, c, &err) || eng_model_bind(*c, &m, &err)) {
        CHECK_MSG(0, "bind %s: %s", dir, err.msg);
        return NULL;
    }
    return m;
}

static const int32_t prompt[20] = {510, 72, 101, 108, 108, 111, 44, 32, 119, 111,
                                   114, 108, 100, 33, 32, 84, 104, 101, 32, 99};

static void test_observers(const char *dir, int window, int n)
{
    vx_container *c;
    eng_model *m = bind(dir, &c);
    if (!m) return;
    rec r = {eng_model_hidden(m), eng_model_layers(m), 0, window, 0, 0, 0, 0, 0,
             malloc((size_t)n * eng_model_hidden(m) * sizeof(float)), m, 0};
    eng_observer obs = {&r, r_embed, r_layer, r_ffn, r_attn};
    eng_session *s;
    vx_err err = {0};
    CHECK(eng_session_new(m, 64, &s, &err) == 0);
    CHECK(eng_forward(s, prompt, n - 2, NULL, &obs, &err) == 0);
    CHECK(eng_forward(s, prompt + n - 2, 2, NULL, &obs, &err) == 0);   /* pos0 > 0 */
    CHECK(r.bad_resid == 0);
    CHECK(r.bad_attn == 0);
    CHECK(r.moe_bad == 0);
    CHECK(r.attn_calls == 2 * r.L * m->heads);
    CHECK(r.ffn_calls == 2 * r.L);
    CHECK_MSG(r.worst_act < 1e-4, "ffn act error %g", r.worst_act);
    eng_session_free(s);
    free(r.prev);
    eng_model_free(m);
    vx_close(c);
}

/* ---------------------------------------------------------------- overlay */

static void logits_of(eng_model *m, float *lg)
{
    eng_session *s;
    vx_err err = {0};
    CHECK(eng_session_new(m, 32, &s, &err) == 0);
    CHECK(eng_forward(s, prompt, 12, lg, NULL, &err) == 0);
    eng_session_free(s);
}

static double maxdiff(const float *a, const float *b, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void test_overlay(const char *dir)
{
    vx_container *c;
    eng_model *m = bind(dir, &c);
    if (!m) return;
    const int V = eng_model_vocab(m), H = eng_model_hidden(m), l = 1, f = 17;
    const int F = eng_model_ffn_features(m, l);
    CHECK(F == 176 && eng_model_ffn_features(m, 99) == 0);
    float *base = malloc(V * 4), *lg = malloc(V * 4), *lg2 = malloc(V * 4);
    float *gate = malloc(H * 4), *up = malloc(H * 4), *down = malloc(H * 4), *zero = calloc(H, 4);
    float *u = malloc(H * 4), *v = calloc(F, 4);
    const eng_layer *L = &m->layers[l];
    for (int i = 0; i < H; i++) {
        gate[i] = eng_w_at(&L->mlp.gate, f, i);
        up[i] = eng_w_at(&L->mlp.up, f, i);
        down[i] = eng_w_at(&L->mlp.down, i, f);
        u[i] = -down[i];
    }
    v[f] = 1;
    logits_of(m, base);

    eng_feature_edit same = {l, f, 0, gate, up, down};
    eng_overlay ov = {&same, 1, NULL, 0, NULL, 0};
    eng_model_set_overlay(m, &ov);
    logits_of(m, lg);
    CHECK_NEAR(maxdiff(lg, base, V), 0, 1e-5);

    eng_feature_edit tomb = {l, f, 1, NULL, NULL, NULL};
    ov = (eng_overlay){&tomb, 1, NULL, 0, NULL, 0};
    logits_of(m, lg);
    CHECK(maxdiff(lg, base, V) > 1e-4);
    eng_feature_edit zdown = {l, f, 0, NULL, NULL, zero};
    ov = (eng_overlay){&zdown, 1, NULL, 0, NULL, 0};
    logits_of(m, lg2);
    CHECK_NEAR(maxdiff(lg, lg2, V), 0, 1e-5);
    eng_lowrank lr = {l, 1, u, v, -1};
    ov = (eng_overlay){NULL, 0, &lr, 1, NULL, 0};
    logits_of(m, lg2);
    CHECK_NEAR(maxdiff(lg, lg2, V), 0, 1e-5);

    /* a replaced gate row changes the activation of that feature only */
    float *g2 = malloc(H * 4);
    for (int i = 0; i < H; i++) g2[i] = -gate[i];
    eng_feature_edit ng = {l, f, 0, g2, NULL, NULL};
    ov = (eng_overlay){&ng, 1, NULL, 0, NULL, 0};
    logits_of(m, lg2);
    CHECK(maxdiff(lg2, base, V) > 1e-4);

    eng_model_set_overlay(m, NULL);
    logits_of(m, lg);
    CHECK(maxdiff(lg, base, V) == 0);
    free(base); free(lg); free(lg2); free(gate); free(up); free(down); free(zero);
    free(u); free(v); free(g2);
    eng_model_free(m);
    vx_close(c);
}

/* ---------------------------------------------------------------- sessions */

typedef struct chunks { int calls, pos[8], n[8]; } chunks;

static void c_embed(void *ctx, int pos0, int n, const float *x)
{
    chunks *c = ctx;
    (void)x;
    if (c->calls < 8) { c->pos[c->calls] = pos0; c->n[c->calls] = n; }
    c->calls++;
}

/* A long forward runs in chunks of 256 and equals the same tokens fed in pieces. */
static void test_chunks(const char *dir)
{
    vx_container *c;
    eng_model *m = bind(dir, &c);
    if (!m) return;
    const int V = eng_model_vocab(m), N = 300;
    int32_t ids[300];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 37 + 11) % 510);
    float *a = malloc(V * 4), *b = malloc(V * 4);
    eng_session *s;
    vx_err err = {0};
    chunks ch = {0, {0}, {0}};
    eng_observer obs = {&ch, c_embed, NULL, NULL, NULL};
    CHECK(eng_session_new(m, 512, &s, &err) == 0);
    CHECK(eng_forward(s, ids, N, a, &obs, &err) == 0);
    CHECK(ch.calls == 2 && ch.pos[0] == 0 && ch.n[0] == 256 && ch.pos[1] == 256 && ch.n[1] == 44);
    eng_session_reset(s);
    CHECK(eng_forward(s, ids, 100, NULL, NULL, &err) == 0);
    CHECK(eng_forward(s, ids + 100, 199, NULL, NULL, &err) == 0);
    CHECK(eng_forward(s, ids + 299, 1, b, NULL, &err) == 0);
    CHECK(eng_session_pos(s) == N);
    CHECK_NEAR(maxdiff(a, b, V), 0, 1e-4);
    free(a);
    free(b);
    eng_session_free(s);
    eng_model_free(m);
    vx_close(c);
}

static void test_session(const char *dir)
{
    vx_container *c;
    eng_model *m = bind(dir, &c);
    if (!m) return;
    const int V = eng_model_vocab(m);
    float *a = malloc(V * 4), *b = malloc(V * 4);
    eng_session *s;
    vx_err err = {0};
    CHECK(eng_session_new(m, 16, &s, &err) == 0);
    CHECK(eng_forward(s, prompt, 12, a, NULL, &err) == 0);
    CHECK(eng_session_pos(s) == 12);
    eng_session_reset(s);
    for (int i = 0; i < 12; i++) CHECK(eng_forward(s, prompt + i, 1, b, NULL, &err) == 0);
    CHECK_NEAR(maxdiff(a, b, V), 0, 1e-4);

    CHECK(eng_forward(s, prompt, 5, NULL, NULL, &err) == -1);
    CHECK_STR(err.msg, "context full: 12 positions + 5 tokens exceeds the session's 16");
    int32_t badid = 9999;
    CHECK(eng_forward(s, &badid, 1, NULL, NULL, &err) == -1);
    CHECK_STR(err.msg, "token id 9999 is out of range (vocab 512)");
    /* an id the tokenizer names past the model's rows is refused naming its piece */
    eng_tokenizer *big_tok = NULL;
    eng_model *m2 = NULL;
    eng_session *s2 = NULL;
    CHECK(eng_tok_load_dir(LQL_TOKENIZER_DIR "/llama2", &big_tok, &err) == 0);
    CHECK(eng_model_bind_tok(c, big_tok, &m2, &err) == 0 && eng_session_new(m2, 4, &s2, &err) == 0);
    if (s2) {
        char want[256];
        badid = 20000;
        snprintf(want, sizeof want, "token id 20000 ('%s' in tokenizer.json) is out of range: "
                 "the model has 512 token rows", eng_tok_piece(big_tok, badid));
        CHECK(eng_forward(s2, &badid, 1, NULL, NULL, &err) == -1);
        CHECK_STR(err.msg, want);
    }
    eng_session_free(s2);
    eng_model_free(m2);
    eng_tok_free(big_tok);
    vx_cancel_flag = 1;
    CHECK(eng_forward(s, prompt, 1, NULL, NULL, &err) == -1 && err.code == VX_ECANCEL);
    CHECK_STR(err.msg, "forward pass cancelled");
    vx_cancel_flag = 0;
    CHECK(eng_session_pos(s) == 12);
    eng_session *big;
    CHECK(eng_session_new(m, 100000, &big, &err) == -1);
    CHECK_STR(err.msg, "session context 100000 exceeds the model's context length 512");

    /* seeded sampling is reproducible and differs across seeds */
    eng_sampler sp = {1.5f, 50, 0.95f, 1234};
    int32_t o1[16], o2[16], o3[16];
    int n1, n2, n3;
    eng_session_reset(s);
    CHECK(eng_generate(s, prompt, 2, 12, &sp, o1, &n1, &err) == 0);
    eng_session_reset(s);
    CHECK(eng_generate(s, prompt, 2, 12, &sp, o2, &n2, &err) == 0);
    sp.seed = 99;
    eng_session_reset(s);
    CHECK(eng_generate(s, prompt, 2, 12, &sp, o3, &n3, &err) == 0);
    CHECK(n1 == n2 && memcmp(o1, o2, (size_t)n1 * 4) == 0);
    CHECK(n1 != n3 || memcmp(o1, o3, (size_t)n1 * 4) != 0);
    CHECK(eng_model_eos(m, 0) == 511 && eng_model_eos(m, 1) == -1);
    free(a);
    free(b);
    eng_session_free(s);
    eng_model_free(m);
    vx_close(c);
}

/* The residual entering each layer, every position (on_embed for layer 0). */
typedef struct entries {
    int H;
    float *x;   /* [(layers + 1) × n × H]: entry of layer l at l · n · H */
    int n;
} entries;
static void en_embed(void *ctx, int pos0, int n, const float *resid)
{
    entries *e = ctx;
    memcpy(e->x + (size_t)pos0 * e->H, resid, (size_t)n * e->H * 4);
}
static void en_layer(void *ctx, int layer, int pos0, int n, const float *a, const float *f,
                     const float *resid)
{
    (void)a;
    (void)f;
    entries *e = ctx;
    memcpy(e->x + ((size_t)(layer + 1) * e->n + pos0) * e->H, resid, (size_t)n * e->H * 4);
}

/* eng_forward_from layer l, given the residual entering it, computes the whole pass's
 * logits bit for bit, for every l (0: the embedding; the last + 1: the head alone). */
static void test_from(const char *dir)
{
    vx_container *c;
    eng_model *m = bind(dir, &c);
    if (!m) return;
    const int V = eng_model_vocab(m), H = eng_model_hidden(m), L = eng_model_layers(m), n = 12;
    entries e = {H, malloc((size_t)(L + 1) * n * H * 4), n};
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    eng_session *s;
    vx_err err = {0};
    eng_observer obs = {&e, en_embed, en_layer, NULL, NULL};
    CHECK(eng_session_new(m, n, &s, &err) == 0);
    CHECK(eng_forward(s, prompt, n, a, &obs, &err) == 0);
    for (int l = 0; l <= L; l++) {
        eng_session_reset(s);
        CHECK(eng_forward_from(s, l, e.x + (size_t)l * n * H, n, b, NULL, &err) == 0);
        CHECK(memcmp(a, b, (size_t)V * 4) == 0);
        CHECK(eng_session_pos(s) == n);
    }
    CHECK(eng_forward_from(s, 0, e.x, 1, b, NULL, &err) == -1);
    CHECK_STR(err.msg, "context full: 12 positions + 1 tokens exceeds the session's 12");
    eng_session_reset(s);
    CHECK(eng_forward_from(s, L + 1, e.x, 1, b, NULL, &err) == -1);
    char want[96];
    snprintf(want, sizeof want, "eng_forward_from: layer %d is out of range (the model has %d "
             "layers)", L + 1, L);
    CHECK_STR(err.msg, want);
    free(e.x);
    free(a);
    free(b);
    eng_session_free(s);
    eng_model_free(m);
    vx_close(c);
}

/* Sessions batched: eng_forward_batch of three sessions with prompts of different lengths
 * (prefill), then one token each (a decode step), equals each session run alone, routing
 * records included; a refused batch leaves every session where it was. */
static void test_batch(const char *dir)
{
    vx_container *c;
    eng_model *m = bind(dir, &c);
    if (!m) return;
    const int V = eng_model_vocab(m), B = 3;
    const int n[3] = {5, 12, 1}, one[3] = {1, 1, 1};
    int32_t ids[18], next[3] = {7, 300, 42};
    for (int i = 0; i < 18; i++) ids[i] = prompt[i % 20] + (i >= 5 && i < 17 ? 1 : 0);
    float *lb = malloc((size_t)B * V * 4), *la = malloc((size_t)V * 4);
    eng_session *ss[3] = {0}, *alone = NULL;
    vx_err err = {0};
    for (int b = 0; b < B; b++) CHECK(eng_session_new(m, 32, &ss[b], &err) == 0);
    CHECK(eng_session_new(m, 32, &alone, &err) == 0);
    CHECK(eng_forward_batch(ss, B, ids, n, lb, NULL, &err) == 0);
    CHECK(eng_forward_batch(ss, B, next, one, lb, NULL, &err) == 0);
    const int L = eng_model_layers(m);
    for (int b = 0, off = 0; b < B; off += n[b++]) {
        CHECK(eng_session_pos(ss[b]) == n[b] + 1);
        eng_session_reset(alone);
        CHECK(eng_forward(alone, ids + off, n[b], NULL, NULL, &err) == 0);
        CHECK(eng_forward(alone, &next[b], 1, la, NULL, &err) == 0);
        CHECK_NEAR(maxdiff(la, lb + (size_t)b * V, V), 0, 1e-4);
        for (int l = 0; l < L; l++) {
            int ia[8], ib[8];
            float wa[8], wb[8];
            const int k = eng_session_routing(alone, l, ia, wa);
            CHECK(k <= 8 && eng_session_routing(ss[b], l, ib, wb) == k);
            for (int j = 0; j < k && j < 8; j++) CHECK(ia[j] == ib[j] && fabsf(wa[j] - wb[j]) < 1e-4f);
        }
    }
    /* a context too small for one session refuses the batch before anything runs */
    const int too[3] = {1, 1, 31};
    int32_t many[33] = {0};
    CHECK(eng_forward_batch(ss, B, many, too, lb, NULL, &err) == -1);
    CHECK_STR(err.msg, "context full: 2 positions + 31 tokens exceeds the session's 32");
    eng_session *twice[2] = {ss[0], ss[0]};
    CHECK(eng_forward_batch(twice, 2, next, one, NULL, NULL, &err) == -1);
    CHECK_STR(err.msg, "eng_forward_batch: session 1 is also session 0");
    /* a cancelled batch: every session back where it was, or at 0 holding a recurrence */
    vx_cancel_flag = 1;
    CHECK(eng_forward_batch(ss, B, next, one, lb, NULL, &err) == -1 && err.code == VX_ECANCEL);
    vx_cancel_flag = 0;
    for (int b = 0; b < B; b++)
        CHECK(eng_session_pos(ss[b]) == (m->shape->state_fixed ? 0 : n[b] + 1));

    /* eng_generate_batch gives each text what eng_generate gives it alone */
    eng_sampler sp[3] = {{1.0f, 0, 1.0f, 5}, {1.0f, 0, 1.0f, 6}, {0.0f, 0, 1.0f, 7}};
    int32_t out[3 * 6], o1[6];
    int nout[3], n1;
    for (int b = 0; b < B; b++) eng_session_reset(ss[b]);
    CHECK(eng_generate_batch(ss, B, ids, n, 6, sp, NULL, 0, out, nout, &err) == 0);
    for (int b = 0, off = 0; b < B; off += n[b++]) {
        eng_session_reset(alone);
        CHECK(eng_generate(alone, ids + off, n[b], 6, &sp[b], o1, &n1, &err) == 0);
        CHECK(n1 == nout[b] && memcmp(o1, out + b * 6, (size_t)n1 * 4) == 0);
    }
    for (int b = 0; b < B; b++) eng_session_free(ss[b]);
    eng_session_free(alone);
    free(lb);
    free(la);
    eng_model_free(m);
    vx_close(c);
}

int main(void)
{
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    char gqa[4200], swa[4200], mix[4200], ds[4200], hyb[4200], qn[4200];
    encode("llama-gqa", gqa, sizeof gqa);
    encode("granite-hybrid", hyb, sizeof hyb);
    encode("qwen3-next", qn, sizeof qn);
    encode("mistral-swa", swa, sizeof swa);
    encode("mixtral", mix, sizeof mix);
    encode("deepseek-v3-lite", ds, sizeof ds);
    test_refusals(gqa, mix);
    test_observers(gqa, 0, 12);
    test_observers(swa, 8, 20);
    test_observers(mix, 0, 12);
    test_observers(ds, 0, 12);
    test_overlay(gqa);
    test_session(gqa);
    test_chunks(gqa);
    test_batch(gqa);
    test_batch(swa);
    test_batch(mix);
    test_batch(ds);
    test_batch(hyb);
    test_batch(qn);
    test_from(gqa);
    test_from(ds);
    test_from(hyb);
    test_from(qn);
    t_rm_rf(tmp);
    return T_DONE();
}
