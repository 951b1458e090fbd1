/*
 * mkfixture.c — deterministic synthetic Hugging Face checkpoints for tests and benchmarks.
 *
 *   mkfixture --family llama|mistral|qwen2|gemma|gemma2|gpt2|phi3|mixtral|qwen2_moe|deepseek_v3|
 *                      granitemoehybrid
 *             [--hidden N] [--layers N] [--heads N] [--kv-heads N] [--head-dim N]
 *             [--inter N] [--vocab N] [--ctx N] [--experts N] [--expert-inter N]
 *             [--dtype f32|f16|bf16] [--seed N] [--shards N] [--tokenizer FILE]
 *             [--attention-bias] -o DIR
 *
 * Writes DIR/config.json and generation_config.json in the family's Hugging Face
 * spelling, the weights in HF tensor names (model.safetensors, or N shards plus
 * model.safetensors.index.json), and a copy of --tokenizer as tokenizer.json. Weights come
 * from a seeded PRNG per tensor (so sharding does not change a value): matrices are
 * normal-ish with std 1/sqrt(fan-in), norms 1 ± 0.05, biases ± 0.02. Tensors are
 * generated and written in 1 Mi-element chunks, so a multi-GB checkpoint (e.g. the 1.1B
 * TinyLlama geometry) is written in a few MB of memory. granitemoehybrid is the dense
 * Granite-4.0-H form (num_local_experts 0: every layer's FFN is the shared MLP alone), with
 * Mamba2 token mixers (expand 2, head dim 16, one group, state 16, conv 4) except on every
 * fourth layer from layer 1, which is NoPE attention. This tool knows HF layouts
 * because it imitates them; the encoder's admission (src/storage/hf_admit.c) is the only
 * place that interprets them.
 */
#include "vindex.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CHUNK (1u << 20)

enum kind { MAT, NORM, BIAS, F32VEC, EMB };

typedef struct spec {
    char name[128];
    int ndim;
    int64_t shape[3];
    enum kind kind;
} spec;

typedef struct geo {
    const char *family;
    int hidden, layers, heads, kv, hd, inter, vocab, ctx, experts, einter, shards;
    int attn_bias;               /* llama: q/k/v/o biases (attention_bias true) */
    vx_dtype dtype;
    uint64_t seed;
    const char *tokenizer, *out;
} geo;

static spec *specs;
static size_t nspec, capspec;

static void add(enum kind k, int64_t a, int64_t b, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void add(enum kind k, int64_t a, int64_t b, const char *fmt, ...)
{
    if (nspec == capspec) {
        capspec = capspec ? 2 * capspec : 256;
        specs = realloc(specs, capspec * sizeof *specs);
        if (!specs) {
            fprintf(stderr, "mkfixture: out of memory\n");
            exit(1);
        }
    }
    spec *s = &specs[nspec++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    s->kind = k;
    s->shape[0] = a;
    s->shape[1] = b;
    s->shape[2] = 1;
    s->ndim = b ? 2 : 1;
}

/* A [a, 1, k] tensor (a depthwise conv1d weight, as torch stores it). */
static void add_conv(int64_t a, int64_t k, const char *name)
{
    add(MAT, a, 1, "%s", name);
    specs[nspec - 1].ndim = 3;
    specs[nspec - 1].shape[2] = k;
}

static uint64_t spec_elems(const spec *sp)
{
    uint64_t n = 1;
    for (int d = 0; d < sp->ndim; d++)
        n *= (uint64_t)sp->shape[d];
    return n;
}

static int is(const geo *g, const char *f)
{
    return strcmp(g->family, f) == 0;
}

/* Gemma and Gemma-2: tied, (1 + w) norms stored as offsets. */
static int gemma(const geo *g)
{
    return is(g, "gemma") || is(g, "gemma2");
}

/* ---- tensor lists, in Hugging Face names ---- */

static void mlp(const geo *g, const char *pre, int inter)
{
    add(MAT, inter, g->hidden, "%s.gate_proj.weight", pre);
    add(MAT, inter, g->hidden, "%s.up_proj.weight", pre);
    add(MAT, g->hidden, inter, "%s.down_proj.weight", pre);
}

/* Granite hybrid: which layers are attention (the rest are Mamba2), and the SSM geometry. */
#define GH_HEAD_DIM 16
#define GH_STATE 16
#define GH_CONV 4
static int gh_attention(int layer)
{
    return layer % 4 == 1;
}

static void granite_hybrid(const geo *g)
{
    const int64_t H = g->hidden, I = 2 * H, nh = I / GH_HEAD_DIM, cd = I + 2 * GH_STATE;
    /* tied, std 1: the logits (embedding rows · normed state / logits_scaling) can be
     * confident, so an inserted fact can be recalled at p > 0.5 */
    add(EMB, g->vocab, H, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++) {
        char p[64], n[128];
        snprintf(p, sizeof p, "model.layers.%d", i);
        add(NORM, H, 0, "%s.input_layernorm.weight", p);
        if (gh_attention(i)) {
            add(MAT, (int64_t)g->heads * g->hd, H, "%s.self_attn.q_proj.weight", p);
            add(MAT, (int64_t)g->kv * g->hd, H, "%s.self_attn.k_proj.weight", p);
            add(MAT, (int64_t)g->kv * g->hd, H, "%s.self_attn.v_proj.weight", p);
            add(MAT, H, (int64_t)g->heads * g->hd, "%s.self_attn.o_proj.weight", p);
        } else {
            add(BIAS, nh, 0, "%s.mamba.A_log", p);
            add(BIAS, nh, 0, "%s.mamba.D", p);
            add(BIAS, nh, 0, "%s.mamba.dt_bias", p);
            snprintf(n, sizeof n, "%s.mamba.conv1d.weight", p);
            add_conv(cd, GH_CONV, n);
            add(BIAS, cd, 0, "%s.mamba.conv1d.bias", p);
            add(MAT, 2 * I + 2 * GH_STATE + nh, H, "%s.mamba.in_proj.weight", p);
            add(NORM, I, 0, "%s.mamba.norm.weight", p);
            add(MAT, H, I, "%s.mamba.out_proj.weight", p);
        }
        add(NORM, H, 0, "%s.post_attention_layernorm.weight", p);
        add(MAT, 2 * (int64_t)g->inter, H, "%s.shared_mlp.input_linear.weight", p);
        add(MAT, H, g->inter, "%s.shared_mlp.output_linear.weight", p);
    }
    add(NORM, H, 0, "model.norm.weight");
}

static void tensors(const geo *g)
{
    int64_t H = g->hidden, q = (int64_t)g->heads * g->hd, kv = (int64_t)g->kv * g->hd;
    if (is(g, "granitemoehybrid")) {
        granite_hybrid(g);
        return;
    }
    if (is(g, "gpt2")) {
        add(MAT, g->vocab, H, "transformer.wte.weight");
        add(MAT, g->ctx, H, "transformer.wpe.weight");
        for (int i = 0; i < g->layers; i++) {
            add(NORM, H, 0, "transformer.h.%d.ln_1.weight", i);
            add(BIAS, H, 0, "transformer.h.%d.ln_1.bias", i);
            add(MAT, H, 3 * H, "transformer.h.%d.attn.c_attn.weight", i);
            add(BIAS, 3 * H, 0, "transformer.h.%d.attn.c_attn.bias", i);
            add(MAT, H, H, "transformer.h.%d.attn.c_proj.weight", i);
            add(BIAS, H, 0, "transformer.h.%d.attn.c_proj.bias", i);
            add(NORM, H, 0, "transformer.h.%d.ln_2.weight", i);
            add(BIAS, H, 0, "transformer.h.%d.ln_2.bias", i);
            add(MAT, H, g->inter, "transformer.h.%d.mlp.c_fc.weight", i);
            add(BIAS, g->inter, 0, "transformer.h.%d.mlp.c_fc.bias", i);
            add(MAT, g->inter, H, "transformer.h.%d.mlp.c_proj.weight", i);
            add(BIAS, H, 0, "transformer.h.%d.mlp.c_proj.bias", i);
        }
        add(NORM, H, 0, "transformer.ln_f.weight");
        add(BIAS, H, 0, "transformer.ln_f.bias");
        return;
    }
    add(MAT, g->vocab, H, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++) {
        char p[64];
        snprintf(p, sizeof p, "model.layers.%d", i);
        add(NORM, H, 0, "%s.input_layernorm.weight", p);
        if (is(g, "phi3")) {
            add(MAT, q + 2 * kv, H, "%s.self_attn.qkv_proj.weight", p);
        } else if (is(g, "deepseek_v3")) {
            int nope = g->hd, rope = g->hd / 2, v = g->hd, ql = g->hidden / 2, kl = g->hidden / 2;
            add(MAT, ql, H, "%s.self_attn.q_a_proj.weight", p);
            add(NORM, ql, 0, "%s.self_attn.q_a_layernorm.weight", p);
            add(MAT, (int64_t)g->heads * (nope + rope), ql, "%s.self_attn.q_b_proj.weight", p);
            add(MAT, kl + rope, H, "%s.self_attn.kv_a_proj_with_mqa.weight", p);
            add(NORM, kl, 0, "%s.self_attn.kv_a_layernorm.weight", p);
            add(MAT, (int64_t)g->heads * (nope + v), kl, "%s.self_attn.kv_b_proj.weight", p);
        } else {
            int bias = is(g, "qwen2") || is(g, "qwen2_moe") || g->attn_bias;
            add(MAT, q, H, "%s.self_attn.q_proj.weight", p);
            add(MAT, kv, H, "%s.self_attn.k_proj.weight", p);
            add(MAT, kv, H, "%s.self_attn.v_proj.weight", p);
            if (bias) {
                add(BIAS, q, 0, "%s.self_attn.q_proj.bias", p);
                add(BIAS, kv, 0, "%s.self_attn.k_proj.bias", p);
                add(BIAS, kv, 0, "%s.self_attn.v_proj.bias", p);
            }
        }
        add(MAT, H, is(g, "deepseek_v3") ? (int64_t)g->heads * g->hd : q, "%s.self_attn.o_proj.weight", p);
        if (g->attn_bias)
            add(BIAS, H, 0, "%s.self_attn.o_proj.bias", p);
        add(NORM, H, 0, "%s.post_attention_layernorm.weight", p);
        if (is(g, "gemma2")) {
            add(NORM, H, 0, "%s.pre_feedforward_layernorm.weight", p);
            add(NORM, H, 0, "%s.post_feedforward_layernorm.weight", p);
        }
        char m[96];
        if (is(g, "phi3")) {
            add(MAT, 2 * (int64_t)g->inter, H, "%s.mlp.gate_up_proj.weight", p);
            add(MAT, H, g->inter, "%s.mlp.down_proj.weight", p);
        } else if (is(g, "mixtral")) {
            add(MAT, g->experts, H, "%s.block_sparse_moe.gate.weight", p);
            for (int e = 0; e < g->experts; e++) {
                add(MAT, g->einter, H, "%s.block_sparse_moe.experts.%d.w1.weight", p, e);
                add(MAT, H, g->einter, "%s.block_sparse_moe.experts.%d.w2.weight", p, e);
                add(MAT, g->einter, H, "%s.block_sparse_moe.experts.%d.w3.weight", p, e);
            }
        } else if ((is(g, "qwen2_moe") && i != 1) || (is(g, "deepseek_v3") && i >= 1)) {
            add(MAT, g->experts, H, "%s.mlp.gate.weight", p);
            if (is(g, "deepseek_v3"))
                add(F32VEC, g->experts, 0, "%s.mlp.gate.e_score_correction_bias", p);
            for (int e = 0; e < g->experts; e++) {
                snprintf(m, sizeof m, "%s.mlp.experts.%d", p, e);
                mlp(g, m, g->einter);
            }
            if (is(g, "deepseek_v3")) {
                snprintf(m, sizeof m, "%s.mlp.shared_experts", p);
                mlp(g, m, g->einter);
            } else {
                snprintf(m, sizeof m, "%s.mlp.shared_expert", p);
                mlp(g, m, 2 * g->einter);
                add(MAT, 1, H, "%s.mlp.shared_expert_gate.weight", p);
            }
        } else {
            snprintf(m, sizeof m, "%s.mlp", p);
            mlp(g, m, g->inter);
        }
    }
    add(NORM, H, 0, "model.norm.weight");
    if (!gemma(g))
        add(MAT, g->vocab, H, "lm_head.weight");
}

/* ---- config.json ---- */

static cJSON *config(const geo *g)
{
    static const struct { const char *fam, *arch; } archs[] = {
        {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"},
        {"qwen2", "Qwen2ForCausalLM"}, {"gemma", "GemmaForCausalLM"},
        {"gemma2", "Gemma2ForCausalLM"},
        {"gpt2", "GPT2LMHeadModel"}, {"phi3", "Phi3ForCausalLM"},
        {"mixtral", "MixtralForCausalLM"}, {"qwen2_moe", "Qwen2MoeForCausalLM"},
        {"deepseek_v3", "DeepseekV3ForCausalLM"}, {"granitemoehybrid", "GraniteMoeHybridForCausalLM"},
    };
    cJSON *c = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(c, "architectures");
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
        if (is(g, archs[i].fam))
            cJSON_AddItemToArray(a, cJSON_CreateString(archs[i].arch));
    cJSON_AddStringToObject(c, "model_type", g->family);
    const char *dt = g->dtype == VX_BF16 ? "bfloat16" : g->dtype == VX_F16 ? "float16" : "float32";
    cJSON_AddStringToObject(c, "torch_dtype", dt);
    cJSON_AddNumberToObject(c, "vocab_size", g->vocab);
    cJSON_AddNumberToObject(c, "bos_token_id", g->vocab - 2);
    cJSON_AddNumberToObject(c, "eos_token_id", g->vocab - 1);
    cJSON_AddNumberToObject(c, "initializer_range", 0.02);
    cJSON_AddStringToObject(c, "transformers_version", "4.46.3");
    if (is(g, "gpt2")) {
        cJSON_AddNumberToObject(c, "n_embd", g->hidden);
        cJSON_AddNumberToObject(c, "n_layer", g->layers);
        cJSON_AddNumberToObject(c, "n_head", g->heads);
        cJSON_AddNumberToObject(c, "n_positions", g->ctx);
        if (g->inter == 4 * g->hidden)
            cJSON_AddNullToObject(c, "n_inner");
        else
            cJSON_AddNumberToObject(c, "n_inner", g->inter);
        cJSON_AddStringToObject(c, "activation_function", "gelu_new");
        cJSON_AddNumberToObject(c, "layer_norm_epsilon", 1e-5);
        cJSON_AddNumberToObject(c, "attn_pdrop", 0.1);
        cJSON_AddNumberToObject(c, "resid_pdrop", 0.1);
        cJSON_AddNumberToObject(c, "embd_pdrop", 0.1);
        return c;
    }
    if (is(g, "granitemoehybrid")) {
        cJSON_AddNumberToObject(c, "hidden_size", g->hidden);
        cJSON_AddNumberToObject(c, "num_hidden_layers", g->layers);
        cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
        for (int i = 0; i < g->layers; i++)
            cJSON_AddItemToArray(lt, cJSON_CreateString(gh_attention(i) ? "attention" : "mamba"));
        cJSON_AddNumberToObject(c, "num_attention_heads", g->heads);
        cJSON_AddNumberToObject(c, "num_key_value_heads", g->kv);
        cJSON_AddNumberToObject(c, "max_position_embeddings", g->ctx);
        cJSON_AddStringToObject(c, "position_embedding_type", "nope");
        cJSON_AddNumberToObject(c, "rope_theta", 1e4);
        cJSON_AddNullToObject(c, "rope_scaling");
        cJSON_AddBoolToObject(c, "attention_bias", 0);
        cJSON_AddNumberToObject(c, "attention_dropout", 0.0);
        cJSON_AddStringToObject(c, "hidden_act", "silu");
        cJSON_AddStringToObject(c, "normalization_function", "rmsnorm");
        cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-5);
        /* no experts: the shared MLP is each layer's whole FFN */
        cJSON_AddNumberToObject(c, "num_local_experts", 0);
        cJSON_AddNumberToObject(c, "num_experts_per_tok", 0);
        cJSON_AddNumberToObject(c, "intermediate_size", g->inter);
        cJSON_AddNumberToObject(c, "shared_intermediate_size", g->inter);
        cJSON_AddNumberToObject(c, "embedding_multiplier", 1.0);
        cJSON_AddNumberToObject(c, "residual_multiplier", 0.22);
        cJSON_AddNumberToObject(c, "attention_multiplier", 1.0 / g->hd);
        cJSON_AddNumberToObject(c, "logits_scaling", 4.0);
        cJSON_AddNumberToObject(c, "mamba_n_heads", 2 * g->hidden / GH_HEAD_DIM);
        cJSON_AddNumberToObject(c, "mamba_d_head", GH_HEAD_DIM);
        cJSON_AddNumberToObject(c, "mamba_n_groups", 1);
        cJSON_AddNumberToObject(c, "mamba_d_state", GH_STATE);
        cJSON_AddNumberToObject(c, "mamba_d_conv", GH_CONV);
        cJSON_AddNumberToObject(c, "mamba_expand", 2);
        cJSON_AddNumberToObject(c, "mamba_chunk_size", 8);
        cJSON_AddBoolToObject(c, "mamba_conv_bias", 1);
        cJSON_AddBoolToObject(c, "mamba_proj_bias", 0);
        cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
        cJSON_AddBoolToObject(c, "use_cache", 1);
        return c;
    }
    cJSON_AddNumberToObject(c, "hidden_size", g->hidden);
    cJSON_AddNumberToObject(c, "num_hidden_layers", g->layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", g->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", is(g, "deepseek_v3") ? g->heads : g->kv);
    cJSON_AddNumberToObject(c, "max_position_embeddings", g->ctx);
    cJSON_AddNumberToObject(c, "rms_norm_eps", is(g, "qwen2") || gemma(g) ? 1e-6 : 1e-5);
    cJSON_AddNumberToObject(c, "rope_theta", is(g, "qwen2") || is(g, "mixtral") ? 1e6 : 1e4);
    cJSON_AddNumberToObject(c, "intermediate_size", g->inter);
    cJSON_AddNumberToObject(c, "attention_dropout", 0.0);
    cJSON_AddBoolToObject(c, "use_cache", 1);
    if (is(g, "llama"))
        cJSON_AddBoolToObject(c, "attention_bias", g->attn_bias);
    if (!gemma(g))
        cJSON_AddBoolToObject(c, "tie_word_embeddings", 0);
    if (is(g, "gemma")) {
        cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
        cJSON_AddNumberToObject(c, "head_dim", g->hd);
    } else if (is(g, "gemma2")) {
        cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
        cJSON_AddNumberToObject(c, "head_dim", g->hd);
        cJSON_AddNumberToObject(c, "query_pre_attn_scalar", g->hd);
        cJSON_AddNumberToObject(c, "attn_logit_softcapping", 50.0);
        cJSON_AddNumberToObject(c, "final_logit_softcapping", 30.0);
        cJSON_AddNumberToObject(c, "sliding_window", 8);
    } else {
        cJSON_AddStringToObject(c, "hidden_act", "silu");
    }
    if (is(g, "llama") || is(g, "mistral"))
        cJSON_AddNumberToObject(c, "head_dim", g->hd);
    if (is(g, "llama"))
        cJSON_AddNullToObject(c, "rope_scaling");
    if (is(g, "mistral"))
        cJSON_AddNumberToObject(c, "sliding_window", 8);
    if (is(g, "qwen2") || is(g, "qwen2_moe")) {
        cJSON_AddBoolToObject(c, "use_sliding_window", 0);
        cJSON_AddNumberToObject(c, "sliding_window", g->ctx);
        cJSON_AddNumberToObject(c, "max_window_layers", g->layers);
    }
    if (is(g, "phi3") || is(g, "mixtral"))
        cJSON_AddNullToObject(c, "sliding_window");
    if (is(g, "mixtral")) {
        cJSON_AddNumberToObject(c, "num_local_experts", g->experts);
        cJSON_AddNumberToObject(c, "num_experts_per_tok", 2);
        cJSON_AddNumberToObject(c, "router_aux_loss_coef", 0.001);
        cJSON_SetNumberValue(cJSON_GetObjectItem(c, "intermediate_size"), g->einter);
    }
    if (is(g, "qwen2_moe")) {
        cJSON_AddNumberToObject(c, "num_experts", g->experts);
        cJSON_AddNumberToObject(c, "num_experts_per_tok", 2);
        cJSON_AddNumberToObject(c, "moe_intermediate_size", g->einter);
        cJSON_AddNumberToObject(c, "shared_expert_intermediate_size", 2 * g->einter);
        cJSON_AddBoolToObject(c, "norm_topk_prob", 0);
        cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
        cJSON *only = cJSON_AddArrayToObject(c, "mlp_only_layers");
        if (g->layers > 1)
            cJSON_AddItemToArray(only, cJSON_CreateNumber(1));
    }
    if (is(g, "deepseek_v3")) {
        cJSON_AddNumberToObject(c, "q_lora_rank", g->hidden / 2);
        cJSON_AddNumberToObject(c, "kv_lora_rank", g->hidden / 2);
        cJSON_AddNumberToObject(c, "qk_nope_head_dim", g->hd);
        cJSON_AddNumberToObject(c, "qk_rope_head_dim", g->hd / 2);
        cJSON_AddNumberToObject(c, "v_head_dim", g->hd);
        cJSON_AddNumberToObject(c, "head_dim", g->hd / 2);
        cJSON_AddBoolToObject(c, "rope_interleave", 1);
        cJSON_AddNumberToObject(c, "n_routed_experts", g->experts);
        cJSON_AddNumberToObject(c, "num_experts_per_tok", 2);
        cJSON_AddNumberToObject(c, "moe_intermediate_size", g->einter);
        cJSON_AddNumberToObject(c, "n_shared_experts", 1);
        cJSON_AddNumberToObject(c, "n_group", g->experts % 2 ? 1 : 2);
        cJSON_AddNumberToObject(c, "topk_group", 1);
        cJSON_AddBoolToObject(c, "norm_topk_prob", 1);
        cJSON_AddNumberToObject(c, "routed_scaling_factor", 2.5);
        cJSON_AddNumberToObject(c, "first_k_dense_replace", 1);
        cJSON_AddStringToObject(c, "scoring_func", "sigmoid");
        cJSON_AddStringToObject(c, "topk_method", "noaux_tc");
        cJSON_AddNullToObject(c, "rope_scaling");
    }
    return c;
}

/* ---- values ---- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fnv(const char *z)
{
    uint64_t h = 1469598103934665603ull;
    for (; *z; z++)
        h = (h ^ (unsigned char)*z) * 1099511628211ull;
    return h;
}

/* Irwin-Hall(4): mean 0, variance 1 after scaling; cheap and bounded. */
static float normalish(uint64_t *s)
{
    uint64_t r = splitmix(s);
    float u = 0;
    for (int i = 0; i < 4; i++)
        u += (float)((r >> (16 * i)) & 0xffff) / 65536.0f;
    return (u - 2.0f) * 1.7320508f;
}

static int write_values(FILE *f, const geo *g, const spec *sp)
{
    static float v[CHUNK];
    static unsigned char out[CHUNK * 4];
    vx_dtype t = sp->kind == F32VEC ? VX_F32 : g->dtype;
    uint64_t n = spec_elems(sp);
    uint64_t s = g->seed ^ fnv(sp->name);
    float std = sp->kind == EMB ? 0.6f
              : sp->kind == MAT ? 1.0f / sqrtf((float)(n / (uint64_t)sp->shape[0]))
              : sp->kind == NORM ? 0.05f : 0.02f;
    float mean = sp->kind == NORM && !gemma(g) ? 1.0f : 0.0f;
    for (uint64_t at = 0; at < n; at += CHUNK) {
        size_t k = (size_t)(n - at < CHUNK ? n - at : CHUNK);
        for (size_t i = 0; i < k; i++)
            v[i] = mean + std * normalish(&s);
        size_t es = vx_dtype_block_bytes(t);
        for (size_t i = 0; i < k; i++) {
            uint16_t h = t == VX_F16 ? vx_f32_to_f16(v[i]) : vx_f32_to_bf16(v[i]);
            memcpy(out + es * i, t == VX_F32 ? (const void *)&v[i] : (const void *)&h, es);
        }
        if (fwrite(out, es, k, f) != k)
            return -1;
    }
    return 0;
}

static uint64_t spec_bytes(const geo *g, const spec *sp)
{
    return spec_elems(sp) * vx_dtype_block_bytes(sp->kind == F32VEC ? VX_F32 : g->dtype);
}

static int write_shard(const geo *g, const char *path, size_t lo, size_t hi)
{
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0;
    for (size_t i = lo; i < hi; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, specs[i].name);
        vx_dtype t = specs[i].kind == F32VEC ? VX_F32 : g->dtype;
        cJSON_AddStringToObject(e, "dtype", t == VX_F32 ? "F32" : t == VX_F16 ? "F16" : "BF16");
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < specs[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)specs[i].shape[d]));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        uint64_t n = spec_bytes(g, &specs[i]);
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + n)));
        off += n;
    }
    char *z = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t len = strlen(z), pad = (8 - len % 8) % 8;
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "mkfixture: cannot create '%s': %s\n", path, strerror(errno));
        free(z);
        return -1;
    }
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)((uint64_t)(len + pad) >> (8 * i));
    int rc = fwrite(le, 1, 8, f) == 8 && fwrite(z, 1, len, f) == len && fwrite("        ", 1, pad, f) == pad
                 ? 0 : -1;
    free(z);
    for (size_t i = lo; rc == 0 && i < hi; i++)
        rc = write_values(f, g, &specs[i]);
    if (fclose(f) != 0)
        rc = -1;
    if (rc < 0)
        fprintf(stderr, "mkfixture: cannot write '%s'\n", path);
    return rc;
}

static int write_text(const char *dir, const char *name, cJSON *j)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *z = cJSON_Print(j);
    FILE *f = fopen(path, "w");
    int rc = f && fputs(z, f) >= 0 && fputc('\n', f) != EOF ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(z);
    if (rc < 0)
        fprintf(stderr, "mkfixture: cannot write '%s'\n", path);
    return rc;
}

static int copy(const char *from, const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *in = fopen(from, "rb"), *out = in ? fopen(path, "wb") : NULL;
    if (!in || !out) {
        fprintf(stderr, "mkfixture: cannot copy '%s' to '%s': %s\n", from, path, strerror(errno));
        if (in)
            fclose(in);
        return -1;
    }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, n, out);
    fclose(in);
    return fclose(out) == 0 ? 0 : -1;
}

static int usage(void)
{
    fprintf(stderr, "usage: mkfixture --family llama|mistral|qwen2|gemma|gemma2|gpt2|phi3|mixtral|qwen2_moe|"
                    "deepseek_v3|granitemoehybrid [--hidden N] [--layers N] [--heads N] [--kv-heads N] [--head-dim N]\n"
                    "                 [--inter N] [--vocab N] [--ctx N] [--experts N] [--expert-inter N]\n"
                    "                 [--dtype f32|f16|bf16] [--seed N] [--shards N] [--tokenizer FILE]\n"
                    "                 [--attention-bias (llama)] -o DIR\n");
    return 2;
}

int main(int argc, char **argv)
{
    geo g = {.family = NULL, .hidden = 64, .layers = 2, .heads = 4, .kv = 2, .hd = 0, .inter = 0,
             .vocab = 512, .ctx = 128, .experts = 4, .einter = 0, .shards = 1, .dtype = VX_F32,
             .seed = 1};
    const struct { const char *flag; int *dst; } ints[] = {
        {"--hidden", &g.hidden}, {"--layers", &g.layers}, {"--heads", &g.heads},
        {"--kv-heads", &g.kv}, {"--head-dim", &g.hd}, {"--inter", &g.inter},
        {"--vocab", &g.vocab}, {"--ctx", &g.ctx}, {"--experts", &g.experts},
        {"--expert-inter", &g.einter}, {"--shards", &g.shards},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int done = 0;
        for (size_t k = 0; k < sizeof ints / sizeof *ints && !done; k++) {
            if (strcmp(a, ints[k].flag) == 0) {
                if (!v || atoi(v) <= 0) {
                    fprintf(stderr, "mkfixture: %s needs a positive number\n", a);
                    return 2;
                }
                *ints[k].dst = atoi(v);
                done = 1;
            }
        }
        if (done) {
            i++;
            continue;
        }
        if (strcmp(a, "--attention-bias") == 0) {
            g.attn_bias = 1;
            continue;
        }
        if (!v)
            return usage();
        if (strcmp(a, "--family") == 0)
            g.family = v;
        else if (strcmp(a, "--dtype") == 0) {
            if (vx_dtype_parse(v, &g.dtype) < 0 || (g.dtype != VX_F32 && g.dtype != VX_F16 && g.dtype != VX_BF16)) {
                fprintf(stderr, "mkfixture: --dtype must be f32, f16 or bf16 (got '%s')\n", v);
                return 2;
            }
        } else if (strcmp(a, "--seed") == 0)
            g.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--tokenizer") == 0)
            g.tokenizer = v;
        else if (strcmp(a, "-o") == 0)
            g.out = v;
        else
            return usage();
        i++;
    }
    static const char *const fams[] = {"llama", "mistral", "qwen2", "gemma", "gemma2", "gpt2", "phi3",
                                       "mixtral", "qwen2_moe", "deepseek_v3", "granitemoehybrid"};
    int ok = 0;
    for (size_t k = 0; g.family && k < sizeof fams / sizeof *fams; k++)
        ok |= strcmp(g.family, fams[k]) == 0;
    if (!ok || !g.out)
        return usage();
    if (g.attn_bias && !is(&g, "llama")) {
        fprintf(stderr, "mkfixture: --attention-bias is a llama option\n");
        return 2;
    }
    if (!g.hd)
        g.hd = g.hidden / g.heads;
    if (!g.inter)
        g.inter = is(&g, "gpt2") ? 4 * g.hidden : 2 * g.hidden;
    if (!g.einter)
        g.einter = g.inter / 2 ? g.inter / 2 : 1;
    if (is(&g, "gpt2"))
        g.kv = g.heads;
    if (g.heads % g.kv || (is(&g, "gpt2") && g.hidden % g.heads) || (is(&g, "deepseek_v3") && g.hd % 4) ||
        (is(&g, "granitemoehybrid") && 2 * g.hidden % GH_HEAD_DIM)) {
        fprintf(stderr, "mkfixture: inconsistent geometry (heads %d, kv-heads %d, head-dim %d)\n", g.heads,
                g.kv, g.hd);
        return 2;
    }
    if (mkdir(g.out, 0755) < 0) {
        fprintf(stderr, "mkfixture: cannot create '%s': %s\n", g.out, strerror(errno));
        return 1;
    }
    tensors(&g);
    cJSON *cfg = config(&g);
    cJSON *gen = cJSON_CreateObject();
    cJSON_AddNumberToObject(gen, "bos_token_id", g.vocab - 2);
    cJSON_AddNumberToObject(gen, "eos_token_id", g.vocab - 1);
    int rc = write_text(g.out, "config.json", cfg) | write_text(g.out, "generation_config.json", gen);
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    if (rc == 0 && g.tokenizer)
        rc = copy(g.tokenizer, g.out, "tokenizer.json");
    if (rc == 0 && g.shards <= 1) {
        char path[4096];
        snprintf(path, sizeof path, "%s/model.safetensors", g.out);
        rc = write_shard(&g, path, 0, nspec);
    } else if (rc == 0) {
        uint64_t total = 0;
        for (size_t i = 0; i < nspec; i++)
            total += spec_bytes(&g, &specs[i]);
        cJSON *idx = cJSON_CreateObject();
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(idx, "metadata"), "total_size", (double)total);
        cJSON *wm = cJSON_AddObjectToObject(idx, "weight_map");
        size_t lo = 0;
        uint64_t acc = 0;
        for (int s = 0; s < g.shards && rc == 0; s++) {
            size_t hi = lo;
            uint64_t goal = total * (uint64_t)(s + 1) / (uint64_t)g.shards;
            while (hi < nspec && (acc < goal || hi == lo || s == g.shards - 1)) {
                acc += spec_bytes(&g, &specs[hi]);
                hi++;
            }
            char name[64], path[4096];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, g.shards);
            snprintf(path, sizeof path, "%s/%s", g.out, name);
            for (size_t i = lo; i < hi; i++)
                cJSON_AddStringToObject(wm, specs[i].name, name);
            rc = write_shard(&g, path, lo, hi);
            lo = hi;
        }
        if (rc == 0)
            rc = write_text(g.out, "model.safetensors.index.json", idx);
        cJSON_Delete(idx);
    }
    free(specs);
    return rc ? 1 : 0;
}
