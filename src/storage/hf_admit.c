/*
 * hf_admit.c — Hugging Face admission: which families lql admits, the config-class
 * defaults, each family's configuration keys (geometry, windows, MoE routing, MLA) and
 * the builder that turns them into the surface and the operand plan. With hf_judge.c,
 * hf_surface.c and hf_bind.c this is the only code in lql that knows model families.
 * A checkpoint tensor that binds to nothing refuses the encode, so no weight is
 * silently dropped.
 */
#include "hf_int.h"
#include "vx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Per family: the values transformers' config class uses when a key is absent. */
typedef struct fam_info {
    const char *model_type;
    fam f;
    int tied;                    /* tie_word_embeddings */
    double eps, theta;           /* rms_norm_eps, rope_theta */
    int window;                  /* sliding_window (0 = none) */
    int ctx;                     /* max_position_embeddings */
} fam_info;

static const fam_info families[] = {
    {"llama", F_LLAMA, 0, 1e-6, 1e4, 0, 2048},
    {"mistral", F_MISTRAL, 0, 1e-6, 1e4, 4096, 4096 * 32},
    {"qwen2", F_QWEN2, 0, 1e-6, 1e4, 4096, 32768},
    {"gemma", F_GEMMA, 1, 1e-6, 1e4, 0, 8192},
    {"gemma2", F_GEMMA2, 1, 1e-6, 1e4, 4096, 8192},
    {"gpt2", F_GPT2, 1, 1e-5, 0, 0, 1024},
    {"phi3", F_PHI3, 0, 1e-5, 1e4, 0, 4096},
    {"mixtral", F_MIXTRAL, 0, 1e-5, 1e6, 0, 4096 * 32},
    {"qwen2_moe", F_QWEN2_MOE, 0, 1e-6, 1e4, 4096, 32768},
    {"deepseek_v3", F_DEEPSEEK_V3, 0, 1e-6, 1e4, 0, 4096},
    {"qwen3", F_QWEN3, 0, 1e-6, 1e4, 4096, 32768},
    {"qwen3_moe", F_QWEN3_MOE, 0, 1e-6, 1e4, 4096, 32768},
    {"olmo2", F_OLMO2, 0, 1e-5, 1e4, 0, 2048},
    {"gemma3_text", F_GEMMA3, 1, 1e-6, 1e6, 4096, 131072},
    {"gpt_oss", F_GPT_OSS, 0, 1e-5, 150000, 128, 131072},
    {"mamba2", F_MAMBA2, 0, 1e-5, 0, 0, 0},
    {"granitemoehybrid", F_GRANITE_HYBRID, 0, 1e-6, 1e4, 0, 2048},
    {"qwen3_next", F_QWEN3_NEXT, 0, 1e-6, 1e4, 0, 32768},
};

/* Shared by the Llama-like families: geometry keys. */
static int geometry(judge *j, arch *a)
{
    if (hf_getpos(j, "hidden_size", REQUIRED, &a->hidden) < 0 ||
        hf_getpos(j, "num_hidden_layers", REQUIRED, &a->layers) < 0 ||
        hf_getpos(j, "num_attention_heads", REQUIRED, &a->heads) < 0 ||
        hf_getpos(j, "vocab_size", REQUIRED, &a->vocab) < 0 ||
        hf_getpos(j, "intermediate_size", REQUIRED, &a->inter) < 0 ||
        hf_getpos(j, "max_position_embeddings", a->ctx, &a->ctx) < 0 ||
        hf_getpos(j, "num_key_value_heads", a->heads, &a->kv_heads) < 0 ||
        hf_getpos(j, "head_dim", a->hidden / a->heads, &a->head_dim) < 0)
        return -1;
    if (a->heads % a->kv_heads)
        return vx_errf(j->err, VX_EFORMAT, "config.json: num_attention_heads %d is not a multiple of "
                       "num_key_value_heads %d", a->heads, a->kv_heads);
    if (a->layers > 4096)
        return hf_bad_type(j, "num_hidden_layers", "at most 4096");
    return 0;
}

static int gpt2_keys(judge *j, arch *a)
{
    long inner = 0;
    if (hf_getpos(j, "n_embd", REQUIRED, &a->hidden) < 0 || hf_getpos(j, "n_layer", REQUIRED, &a->layers) < 0 ||
        hf_getpos(j, "n_head", REQUIRED, &a->heads) < 0 || hf_getpos(j, "vocab_size", REQUIRED, &a->vocab) < 0 ||
        hf_getpos(j, "n_positions", 1024, &a->ctx) < 0 || hf_geti(j, "n_inner", 0, &inner) < 0 ||
        hf_getposd(j, "layer_norm_epsilon", 1e-5, &a->eps) < 0 || hf_act_key(j, a, "activation_function",
                                                                    "gelu_new") < 0)
        return -1;
    if (a->layers > 4096)
        return hf_bad_type(j, "n_layer", "at most 4096");
    if (inner < 0 || inner > DIM_MAX || (inner == 0 && hf_has(j, "n_inner")))
        return hf_bad_type(j, "n_inner", "a positive integer or null");
    a->inter = inner ? (int)inner : 4 * a->hidden;
    a->kv_heads = a->heads;
    a->head_dim = a->hidden / a->heads;
    int scale_w = 0;
    if (hf_getb(j, "scale_attn_weights", 1, &scale_w) < 0 ||
        hf_expect_false(j, "scale_attn_by_inverse_layer_idx") < 0)
        return -1;
    a->scale = scale_w ? 1.0 / sqrt((double)a->head_dim) : 1.0;
    const cJSON *nctx = hf_peek(j, "n_ctx");
    if (nctx && !cJSON_IsNull(nctx) && !(cJSON_IsNumber(nctx) && nctx->valuedouble == a->ctx))
        return hf_refuse(j, "n_ctx", hf_key(j, "n_ctx"));
    a->norm_layer = a->norm_bias = a->qkv_bias = a->out_bias = a->ffn_bias = 1;
    a->gated = 0;
    a->learned_pos = 1;
    a->rope = 0;
    return 0;
}

/* layer_types: a list with one entry per layer, or *lt NULL when null or absent. */
static int layer_types(judge *j, const arch *a, const cJSON **lt)
{
    *lt = hf_key(j, "layer_types");
    if (*lt && !cJSON_IsNull(*lt) && (!cJSON_IsArray(*lt) || cJSON_GetArraySize(*lt) != a->layers))
        return hf_bad_type(j, "layer_types", "a list with one entry per layer");
    if (!cJSON_IsArray(*lt))
        *lt = NULL;
    return 0;
}

/* Whether layer i slides: its layer_types entry, or dflt without a list; an entry that is
 * neither kind is refused. */
static int slides(judge *j, const cJSON *lt, int i, int dflt, int *on)
{
    *on = dflt;
    if (!lt)
        return 0;
    const cJSON *t = cJSON_GetArrayItem(lt, i);
    if (!cJSON_IsString(t) || (strcmp(t->valuestring, "sliding_attention") != 0 &&
                               strcmp(t->valuestring, "full_attention") != 0))
        return hf_refuse(j, "layer_types", t);
    *on = strcmp(t->valuestring, "sliding_attention") == 0;
    return 0;
}

/* Gemma 3: layer_types (else sliding_window_pattern: layer i is full iff (i + 1) % pattern
 * == 0) picks sliding layers, which have the window and their own unscaled rope base
 * (rope_local_base_freq); full layers use rope_theta with rope_scaling. */
static int gemma3_layers(judge *j, arch *a)
{
    long w = 0;
    int pattern = 6;
    double local = 1e4;
    if (hf_geti(j, "sliding_window", hf_peek(j, "sliding_window") ? 0 : a->window_default, &w) < 0 ||
        hf_getposd(j, "rope_local_base_freq", 1e4, &local) < 0)
        return -1;
    if (w <= 0 || w > DIM_MAX)
        return hf_bad_type(j, "sliding_window", "a positive integer");
    const cJSON *lt;
    if (layer_types(j, a, &lt) < 0)
        return -1;
    if (!lt) {
        const char *pk = hf_peek(j, "sliding_window_pattern") ? "sliding_window_pattern"
                                                             : "_sliding_window_pattern";
        if (hf_getpos(j, pk, 6, &pattern) < 0)
            return -1;
    }
    for (int i = 0; i < a->layers; i++) {
        int on;
        if (slides(j, lt, i, (i + 1) % pattern != 0, &on) < 0)
            return -1;
        a->window[i] = on ? (int)w : 0;
        a->layer_theta[i] = on ? local : 0;
    }
    return 0;
}

/* Sliding windows per layer (0 = full attention). */
static int windows(judge *j, fam f, arch *a)
{
    long w = 0;
    if (f == F_LLAMA || f == F_GPT2 || f == F_DEEPSEEK_V3 || f == F_GEMMA || f == F_OLMO2 ||
        f == F_MAMBA2 || f == F_GRANITE_HYBRID || f == F_QWEN3_NEXT)
        return 0;
    if (f == F_GEMMA3)
        return gemma3_layers(j, a);
    if (f == F_QWEN2 || f == F_QWEN2_MOE || f == F_QWEN3 || f == F_QWEN3_MOE) {
        int use = 0;
        long mwl = 0;
        if (hf_getb(j, "use_sliding_window", 0, &use) < 0)
            return -1;
        const cJSON *lt = hf_key(j, "layer_types");
        if (lt && !cJSON_IsNull(lt) && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != a->layers))
            return hf_bad_type(j, "layer_types", "a list with one entry per layer");
        if (!use) {
            /* sliding_window / max_window_layers stay declaration-only */
            const cJSON *t;
            cJSON_ArrayForEach(t, lt) if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention"))
                return hf_refuse(j, "layer_types", t);
            return 0;
        }
        if (hf_geti(j, "sliding_window", hf_peek(j, "sliding_window") ? 0 : a->window_default, &w) < 0 ||
            hf_geti(j, "max_window_layers", 0, &mwl) < 0)
            return -1;
        if (w <= 0 || w > DIM_MAX)
            return hf_bad_type(j, "sliding_window", "a positive integer when use_sliding_window is set");
        for (int i = 0; i < a->layers; i++) {
            int on = i >= mwl;
            if (cJSON_IsArray(lt)) {
                const cJSON *t = cJSON_GetArrayItem(lt, i);
                on = cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0;
            }
            if (cJSON_IsArray(lt) && !on && (!cJSON_IsString(cJSON_GetArrayItem(lt, i)) ||
                                             strcmp(cJSON_GetArrayItem(lt, i)->valuestring, "full_attention")))
                return hf_refuse(j, "layer_types", cJSON_GetArrayItem(lt, i));
            a->window[i] = on ? (int)w : 0;
        }
        return 0;
    }
    /* Absent: the class default; null: no window. */
    if (hf_geti(j, "sliding_window", hf_peek(j, "sliding_window") ? 0 : a->window_default, &w) < 0)
        return -1;
    if (w < 0 || w > DIM_MAX || (w == 0 && hf_has(j, "sliding_window")))
        return hf_bad_type(j, "sliding_window", "a positive integer or null");
    if (f == F_GEMMA2 || f == F_GPT_OSS) {
        /* even layers slide unless layer_types says otherwise */
        const cJSON *lt;
        if (layer_types(j, a, &lt) < 0)
            return -1;
        for (int i = 0; i < a->layers; i++) {
            int on;
            if (slides(j, lt, i, i % 2 == 0, &on) < 0)
                return -1;
            a->window[i] = on ? (int)w : 0;
        }
        return 0;
    }
    for (int i = 0; i < a->layers; i++)   /* mistral, mixtral, phi3: every layer */
        a->window[i] = (int)w;
    return 0;
}

static int moe_keys(judge *j, fam f, arch *a)
{
    if (f == F_GPT_OSS) {
        /* router with bias: top-k of the logits, softmax over the k (= renormalised top-k of
         * the full softmax); experts with biases and transformers' hard-coded clamped SwiGLU */
        if (hf_getpos(j, "num_local_experts", REQUIRED, &a->experts) < 0 ||
            hf_getpos(j, "num_experts_per_tok", REQUIRED, &a->top_k) < 0)
            return -1;
        a->expert_inter = a->inter;
        a->normalise = a->router_bias = a->expert_bias = 1;
        a->swiglu_alpha = 1.702;
        a->swiglu_limit = 7.0;
        for (int i = 0; i < a->layers; i++)
            a->moe[i] = 1;
    } else if (f == F_MIXTRAL) {
        if (hf_getpos(j, "num_local_experts", REQUIRED, &a->experts) < 0 ||
            hf_getpos(j, "num_experts_per_tok", 2, &a->top_k) < 0)
            return -1;
        a->expert_inter = a->inter;
        a->normalise = 1;
        for (int i = 0; i < a->layers; i++)
            a->moe[i] = 1;
    } else if (f == F_QWEN2_MOE || f == F_QWEN3_MOE || f == F_QWEN3_NEXT) {
        int step = 1;
        if (hf_getpos(j, "num_experts", REQUIRED, &a->experts) < 0 ||
            hf_getpos(j, "num_experts_per_tok", REQUIRED, &a->top_k) < 0 ||
            hf_getpos(j, "moe_intermediate_size", REQUIRED, &a->expert_inter) < 0 ||
            hf_getpos(j, "decoder_sparse_step", 1, &step) < 0 ||
            hf_getb(j, "norm_topk_prob", f == F_QWEN3_NEXT, &a->normalise) < 0)
            return -1;
        long si = 0;
        if (hf_geti(j, "shared_expert_intermediate_size", 0, &si) < 0)
            return -1;
        if (si < 0 || si > DIM_MAX)
            return hf_bad_type(j, "shared_expert_intermediate_size", "a non-negative integer");
        a->shared_inter = (int)si;
        a->shared_gate = si > 0;
        const cJSON *only = hf_key(j, "mlp_only_layers");
        if (only && !cJSON_IsNull(only) && !cJSON_IsArray(only))
            return hf_bad_type(j, "mlp_only_layers", "a list of layer numbers");
        for (int i = 0; i < a->layers; i++) {
            int dense = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, only) dense |= cJSON_IsNumber(e) && e->valuedouble == i;
            a->moe[i] = !dense && (i + 1) % step == 0;
        }
    } else {
        int nshared = 1, first;
        if (hf_getpos(j, "n_routed_experts", REQUIRED, &a->experts) < 0 ||
            hf_getpos(j, "num_experts_per_tok", REQUIRED, &a->top_k) < 0 ||
            hf_getpos(j, "moe_intermediate_size", REQUIRED, &a->expert_inter) < 0 ||
            hf_getpos(j, "n_group", 1, &a->n_group) < 0 || hf_getpos(j, "topk_group", 1, &a->topk_group) < 0 ||
            hf_getb(j, "norm_topk_prob", 1, &a->normalise) < 0 ||
            hf_getposd(j, "routed_scaling_factor", 1.0, &a->routed_scaling) < 0 ||
            hf_getpos(j, "n_shared_experts", 1, &nshared) < 0)
            return -1;
        long fk = 0;
        if (hf_geti(j, "first_k_dense_replace", 0, &fk) < 0)
            return -1;
        first = (int)(fk < 0 ? 0 : fk > a->layers ? a->layers : fk);
        if (hf_expect_str(j, "scoring_func", "sigmoid") < 0 || hf_expect_num(j, "moe_layer_freq", 1) < 0)
            return -1;
        const cJSON *tm = hf_peek(j, "topk_method");
        if (tm && !cJSON_IsNull(tm) && !(cJSON_IsString(tm) && strcmp(tm->valuestring, "noaux_tc") == 0))
            return hf_refuse(j, "topk_method", hf_key(j, "topk_method"));
        if (a->experts % a->n_group || a->topk_group > a->n_group)
            return vx_errf(j->err, VX_EFORMAT, "config.json: n_routed_experts %d, n_group %d and "
                           "topk_group %d do not form groups", a->experts, a->n_group, a->topk_group);
        /* the reference ranks a group by the sum of its two best experts, then picks the
         * top_k among the kept groups' experts: both need enough experts (the executor
         * refuses such a graph, so it is refused here, by its keys) */
        int per = a->experts / a->n_group;
        if (a->n_group > 1 && per < 2)
            return vx_errf(j->err, VX_EFORMAT, "config.json: n_group %d leaves groups of %d "
                           "expert (n_routed_experts %d); a group is ranked by its two best",
                           a->n_group, per, a->experts);
        if (a->top_k > a->topk_group * per)
            return vx_errf(j->err, VX_EFORMAT, "config.json: num_experts_per_tok %d is more "
                           "than the %d experts of the topk_group %d groups routing keeps",
                           a->top_k, a->topk_group * per, a->topk_group);
        a->sigmoid = a->score_bias = 1;
        if ((long)a->expert_inter * nshared > DIM_MAX)
            return hf_bad_type(j, "n_shared_experts", "small enough for a shared MLP width within 2^28");
        a->shared_inter = a->expert_inter * nshared;
        for (int i = 0; i < a->layers; i++)
            a->moe[i] = i >= first;
    }
    if (f != F_DEEPSEEK_V3) {
        a->n_group = a->topk_group = 1;
        a->routed_scaling = 1.0;
    }
    if (a->top_k > a->experts)
        return hf_bad_type(j, "num_experts_per_tok", "at most the number of experts");
    return 0;
}

static int mla_keys(judge *j, arch *a)
{
    long ql = 0;
    if (hf_geti(j, "q_lora_rank", 0, &ql) < 0 || hf_getpos(j, "kv_lora_rank", REQUIRED, &a->kv_lora) < 0 ||
        hf_getpos(j, "qk_nope_head_dim", REQUIRED, &a->nope) < 0 ||
        hf_getpos(j, "qk_rope_head_dim", REQUIRED, &a->rope_dim) < 0 ||
        hf_getpos(j, "v_head_dim", REQUIRED, &a->v_dim) < 0 ||
        hf_getb(j, "rope_interleave", 1, &a->interleaved) < 0 || hf_expect_false(j, "attention_bias") < 0)
        return -1;
    if (ql < 0 || ql > DIM_MAX)
        return hf_bad_type(j, "q_lora_rank", "a positive integer or null");
    a->q_lora = (int)ql;
    a->mla = 1;
    int qk = a->nope + a->rope_dim;
    if (hf_expect_num(j, "qk_head_dim", qk) < 0 || hf_expect_num(j, "head_dim", a->rope_dim) < 0)
        return -1;
    a->head_dim = qk;
    a->kv_heads = a->heads;
    a->rotary_dim = a->rope_dim;
    a->scale = 1.0 / sqrt((double)qk);
    return 0;
}

/* Every family: config keys into the arch, then tensors into the plan. */
static int build(judge *j, const fam_info *fi, const cJSON *gen, const cJSON *tok,
                 const cJSON *tokcfg)
{
    fam f = fi->f;
    arch a;
    memset(&a, 0, sizeof a);
    a.theta = fi->theta;
    a.ctx = fi->ctx;
    a.window_default = fi->window;
    a.emb_scale = 1.0;
    a.gated = 1;
    a.rope = 1;
    a.act = "silu";
    a.residual_scale = a.logits_divisor = 1.0;
    int rc = -1;
    cJSON *special = cJSON_CreateObject();
    if (f == F_GPT2) {
        if (gpt2_keys(j, &a) < 0)
            goto out;
    } else if (f == F_MAMBA2) {
        if (hf_mamba2_geometry(j, &a) < 0)
            goto out;
    } else {
        if (geometry(j, &a) < 0 || hf_getposd(j, "rms_norm_eps", fi->eps, &a.eps) < 0)
            goto out;
        a.rotary_dim = a.head_dim;
        a.scale = 1.0 / sqrt((double)a.head_dim);
        if (f == F_DEEPSEEK_V3 && mla_keys(j, &a) < 0)
            goto out;
        if (hf_rope_keys(j, &a) < 0)
            goto out;
        if (f == F_GEMMA3) {
            if (hf_act_key(j, &a, "hidden_activation", "gelu_pytorch_tanh") < 0)
                goto out;
        } else if (f == F_GEMMA || f == F_GEMMA2) {
            const char *k = hf_has(j, "hidden_activation") ? "hidden_activation" : "hidden_act";
            if (hf_act_key(j, &a, k, "gelu_pytorch_tanh") < 0)
                goto out;
        } else if (hf_act_key(j, &a, "hidden_act", "silu") < 0) {
            goto out;
        }
    }
    if (!(a.window = calloc((size_t)a.layers, sizeof *a.window)) ||
        !(a.layer_theta = calloc((size_t)a.layers, sizeof *a.layer_theta)) ||
        !(a.moe = calloc((size_t)a.layers, sizeof *a.moe)) ||
        !(a.mixer = calloc((size_t)a.layers, sizeof *a.mixer))) {
        vx_errf(j->err, VX_ENOMEM, "admission: out of memory");
        goto out;
    }
    if (windows(j, f, &a) < 0)
        goto out;
    if ((f == F_MIXTRAL || f == F_QWEN2_MOE || f == F_QWEN3_MOE || f == F_DEEPSEEK_V3 ||
         f == F_GPT_OSS || f == F_QWEN3_NEXT) && moe_keys(j, f, &a) < 0)
        goto out;
    if ((f == F_MAMBA2 && hf_mamba2_keys(j, &a) < 0) ||
        (f == F_GRANITE_HYBRID && hf_granite_keys(j, &a) < 0) ||
        (f == F_QWEN3_NEXT && hf_qwen3_next_keys(j, &a) < 0))
        goto out;

    /* Biases. */
    if (f == F_LLAMA || f == F_PHI3 || f == F_GEMMA || f == F_GEMMA2 || f == F_GEMMA3 ||
        f == F_QWEN3 || f == F_QWEN3_MOE || f == F_OLMO2 || f == F_GPT_OSS) {
        int ab = 0;
        if (hf_getb(j, "attention_bias", f == F_GPT_OSS, &ab) < 0)
            goto out;
        a.qkv_bias = a.out_bias = ab;
        if ((f == F_PHI3 || f == F_GEMMA || f == F_GEMMA2 || f == F_GEMMA3) && ab) {
            hf_refuse(j, "attention_bias", hf_key(j, "attention_bias"));
            goto out;
        }
        if (hf_expect_false(j, "mlp_bias") < 0)
            goto out;
    }
    if (f == F_QWEN2 || f == F_QWEN2_MOE) {
        if (hf_getb(j, "qkv_bias", 1, &a.qkv_bias) < 0)
            goto out;
    }

    /* GPT-OSS: learned sinks; experts packed as MXFP4 when quantization_config says so */
    if (f == F_GPT_OSS) {
        a.sinks = 1;
        const cJSON *q = hf_key(j, "quantization_config");
        if (q && !cJSON_IsNull(q)) {
            const cJSON *qm = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
            if (!cJSON_IsObject(q) || !cJSON_IsString(qm) || strcmp(qm->valuestring, "mxfp4") != 0) {
                hf_refuse(j, "quantization_config", NULL);
                goto out;
            }
            a.mxfp4 = 1;
            j->quant_judged = 1;
        }
    }

    /* QK-norm: per head (one [head_dim] weight shared by the heads) or over the whole
     * projection (OLMo-2), before rope; OLMo-2 norms only the branch outputs. */
    if (f == F_QWEN3 || f == F_QWEN3_MOE || f == F_GEMMA3)
        a.qk_norm = "head";
    if (f == F_OLMO2) {
        a.qk_norm = "projection";
        a.no_pre_norms = a.post_attn = a.post_ffn = 1;
    }

    /* Gemma. */
    if (f == F_GEMMA || f == F_GEMMA2 || f == F_GEMMA3) {
        vx_dtype dt = VX_F32;
        if (hf_model_dtype(j, &dt) < 0)
            goto out;
        float s = sqrtf((float)a.hidden);
        a.emb_scale = dt == VX_BF16 ? vx_bf16_to_f32(vx_f32_to_bf16(s))
                    : dt == VX_F16 ? vx_f16_to_f32(vx_f32_to_f16(s)) : s;
        a.weight_offset = 1.0;
    }
    if (f == F_GEMMA2) {
        double qs = 0;
        if (hf_getposd(j, "attn_logit_softcapping", 0, &a.attn_softcap) < 0 ||
            hf_getposd(j, "final_logit_softcapping", 0, &a.final_softcap) < 0 ||
            hf_getposd(j, "query_pre_attn_scalar", a.head_dim, &qs) < 0)
            goto out;
        a.scale = 1.0 / sqrt(qs);
        a.post_attn = a.post_ffn = 1;
    }
    if (f == F_GEMMA3) {
        /* Gemma3Attention has no score soft-cap (attn_logit_softcapping is declaration-only) */
        double qs = 0;
        if (hf_getposd(j, "final_logit_softcapping", 0, &a.final_softcap) < 0 ||
            hf_getposd(j, "query_pre_attn_scalar", a.head_dim, &qs) < 0 ||
            hf_expect_false(j, "use_bidirectional_attention") < 0)
            goto out;
        a.scale = 1.0 / sqrt(qs);
        a.post_attn = a.post_ffn = 1;
    }
    if (hf_getb(j, "tie_word_embeddings", fi->tied, &a.tied) < 0 || hf_check_defaults(j) < 0 ||
        hf_special_tokens(j, gen, a.vocab, special) < 0)
        goto out;
    cJSON_AddBoolToObject(special, "add_bos", hf_adds_bos(tok, tokcfg));

    /* Tensors. */
    j->p->num_layers = a.layers;
    j->p->hidden = a.hidden;
    j->p->vocab = a.vocab;
    if (f == F_GPT2) {
        if (hf_bind(j, EMB, "wte.weight", a.vocab, a.hidden, "weight") < 0 ||
            hf_bind(j, EMB, "wpe.weight", a.ctx, a.hidden, "positions") < 0)
            goto out;
    } else if (f == F_MAMBA2) {
        if (hf_bind(j, EMB, "embeddings.weight", a.vocab, a.hidden, "weight") < 0)
            goto out;
    } else if (hf_bind(j, EMB, "embed_tokens.weight", a.vocab, a.hidden, "weight") < 0) {
        goto out;
    }
    char sn[160];
    for (int i = 0; i < a.layers; i++) {
        if (vx_cancel_flag) {
            vx_errf(j->err, VX_ECANCEL, "admission: cancelled");
            goto out;
        }
        if (f == F_GPT2) {
            if (hf_bind_gpt2_layer(j, &a, i) < 0)
                goto out;
            continue;
        }
        if (f == F_MAMBA2) {
            if (hf_bind_norm(j, &a, i, "norm", "attn_norm") < 0 || hf_bind_ssm(j, &a, i, "mixer") < 0)
                goto out;
            continue;
        }
        if (!a.no_pre_norms && hf_bind_norm(j, &a, i, "input_layernorm", "attn_norm") < 0)
            goto out;
        if (f == F_PHI3) {
            if (hf_bind_phi3(j, &a, i) < 0)
                goto out;
            continue;
        }
        if (a.mixer[i] == MIX_MAMBA2 ? hf_bind_ssm(j, &a, i, "mamba") < 0
            : a.mixer[i] == MIX_DELTANET ? hf_bind_deltanet(j, &a, i) < 0
            : (a.mla ? hf_bind_mla(j, &a, i) : hf_bind_attention(j, &a, i)) < 0)
            goto out;
        if (a.qk_norm && a.mixer[i] == MIX_ATTN && hf_bind_qk_norm(j, &a, i) < 0)
            goto out;
        if (a.sinks && hf_bind(j, j->dec, hf_nm(sn, sizeof sn, "layers.%d.self_attn.sinks", i), a.heads, 0,
                               "layers.%d.attn.sinks", i) < 0)
            goto out;
        if (f == F_OLMO2) {
            if (hf_bind_norm(j, &a, i, "post_attention_layernorm", "post_attn_norm") < 0 ||
                hf_bind_norm(j, &a, i, "post_feedforward_layernorm", "post_ffn_norm") < 0)
                goto out;
        } else if (f == F_GEMMA2 || f == F_GEMMA3) {
            if (hf_bind_norm(j, &a, i, "post_attention_layernorm", "post_attn_norm") < 0 ||
                hf_bind_norm(j, &a, i, "pre_feedforward_layernorm", "ffn_norm") < 0 ||
                hf_bind_norm(j, &a, i, "post_feedforward_layernorm", "post_ffn_norm") < 0)
                goto out;
        } else if (hf_bind_norm(j, &a, i, "post_attention_layernorm", "ffn_norm") < 0) {
            goto out;
        }
        if (f == F_GRANITE_HYBRID ? hf_bind_granite_moe(j, &a, i) < 0
            : a.moe[i] ? (f == F_GPT_OSS ? hf_bind_gpt_oss_moe(j, &a, i) : hf_bind_moe(j, f, &a, i)) < 0
                       : hf_bind_mlp(j, &a, i, "mlp", "ffn", a.inter) < 0)
            goto out;
    }
    if (f == F_GPT2) {
        if (hf_bind(j, OUT, "ln_f.weight", a.hidden, 0, "final_norm") < 0 ||
            hf_bind(j, OUT, "ln_f.bias", a.hidden, 0, "final_norm.bias") < 0)
            goto out;
    } else if (hf_bind(j, OUT, f == F_MAMBA2 ? "norm_f.weight" : "norm.weight", a.hidden, 0,
                       "final_norm") < 0) {
        goto out;
    }
    if (!a.tied) {
        if (!st_find(j->m, "lm_head.weight")) {
            vx_errf(j->err, VX_EMISSING, "checkpoint: tensor 'lm_head.weight' is missing and "
                    "tie_word_embeddings is false (family '%s')", j->family);
            goto out;
        }
        const char *save = j->prefix;
        j->prefix = "";
        int r = hf_bind(j, OUT, "lm_head.weight", a.vocab, a.hidden, "lm_head");
        j->prefix = save;
        if (r < 0)
            goto out;
    }
    if (f == F_QWEN3_NEXT && hf_bind_mtp(j, f, &a, special) < 0)
        goto out;
    j->p->component = hf_emit(&a, special);
    special = NULL;
    a.rope_scaling = NULL;
    rc = 0;
out:
    cJSON_Delete(special);
    cJSON_Delete(a.rope_scaling);
    free(a.window);
    free(a.layer_theta);
    free(a.moe);
    free(a.mixer);
    return rc;
}

/* ---------------------------------------------------------------- entry */

/* Parse dir/file into *out; an absent optional file gives 0 with *out NULL. */
/* Python's json writes float('inf') as the bare token Infinity (Mamba2 configs:
 * "time_step_limit": [0.0, Infinity]), which JSON does not have. Outside strings it
 * becomes 1e999 (padded to the same length), which parses as an infinite double, so the
 * key is judged like any other number. NaN stays invalid and is refused by the parser. */
static void infinity_tokens(char *t, size_t n)
{
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        if (in_str) {
            if (t[i] == '\\') i++;
            else if (t[i] == '"') in_str = 0;
        } else if (t[i] == '"') {
            in_str = 1;
        } else if (n - i >= 8 && memcmp(t + i, "Infinity", 8) == 0) {
            memcpy(t + i, "1e999   ", 8);
            i += 7;
        }
    }
}

static int load_json(const char *dir, const char *file, int required, cJSON **out, vx_err *err)
{
    char path[4096], *text;
    size_t n;
    *out = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (!required && access(path, F_OK) != 0)
        return 0;
    if (vx_read_small_file(path, file, &text, &n, err) < 0)
        return -1;
    if (strcmp(file, "config.json") == 0)
        infinity_tokens(text, n);
    int rc = vx_json_parse(file, text, n, out, err);
    free(text);
    return rc;
}

void hf_plan_free(hf_plan *p)
{
    if (!p)
        return;
    cJSON_Delete(p->component);
    cJSON_Delete(p->aux);
    cJSON_Delete(p->edges);
    cJSON_Delete(p->declaration_only);
    for (int i = 0; i < HF_NOBJ; i++) {
        for (size_t k = 0; k < p->obj[i].n; k++)
            free(p->obj[i].op[k].name);
        free(p->obj[i].op);
    }
    memset(p, 0, sizeof *p);
}

/* Tensors no operand needs and HF itself ignores: mask buffers and cached RoPE tables. */
static int ignorable(const char *name, int tied)
{
    size_t n = strlen(name);
    static const char *const suffix[] = {".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq"};
    for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
        size_t k = strlen(suffix[i]);
        if (n >= k && strcmp(name + n - k, suffix[i]) == 0)
            return 1;
    }
    return tied && strcmp(name, "lm_head.weight") == 0;
}

int hf_admit(const char *dir, const st_model *m, hf_plan *p, vx_err *err)
{
    memset(p, 0, sizeof *p);
    static const char *const ids[HF_NOBJ] = {"target.embedding", "target.decoder_stack",
                                             "target.output_head", "mtp.block"};
    static const char *const kinds[HF_NOBJ] = {"embedding", "decoder_stack", "output_head",
                                               "decoder_stack"};
    for (int i = 0; i < HF_NOBJ; i++) {
        p->obj[i].id = ids[i];
        p->obj[i].kind = kinds[i];
        p->obj[i].component = i == MTP ? "mtp" : "target";
    }
    cJSON *cfg = NULL, *gen = NULL, *tok = NULL, *tokcfg = NULL;
    if (load_json(dir, "config.json", 1, &cfg, err) < 0 ||
        load_json(dir, "generation_config.json", 0, &gen, err) < 0 ||
        load_json(dir, "tokenizer.json", 0, &tok, err) < 0 ||
        load_json(dir, "tokenizer_config.json", 0, &tokcfg, err) < 0) {
        cJSON_Delete(cfg);
        cJSON_Delete(gen);
        cJSON_Delete(tok);
        return -1;
    }
    judge j = {.cfg = cfg, .m = m, .p = p, .err = err, .family = "?", .dec = DEC};
    int rc = -1;
    if (cJSON_GetArraySize(cfg) > NKEYS) {
        vx_errf(err, VX_EUNSUPPORTED, "config.json: %d keys; lql judges at most %d",
                cJSON_GetArraySize(cfg), NKEYS);
        goto out;
    }
    j.bound = calloc(st_count(m) + 1, 1);
    p->declaration_only = cJSON_CreateObject();
    if (!j.bound || !p->declaration_only) {
        vx_errf(err, VX_ENOMEM, "admission: out of memory");
        goto out;
    }
    const cJSON *mt = hf_key(&j, "model_type");
    if (!cJSON_IsString(mt)) {
        vx_errf(err, VX_EMISSING, "config.json: key 'model_type' is missing; lql admits llama, "
                "mistral, qwen2, gemma, gemma2, gpt2, phi3, mixtral, qwen2_moe, deepseek_v3, qwen3, "
                "qwen3_moe, olmo2, gemma3_text, gpt_oss, mamba2, granitemoehybrid, qwen3_next");
        goto out;
    }
    int fi = -1;
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (strcmp(mt->valuestring, families[i].model_type) == 0)
            fi = (int)i;
    if (fi < 0) {
        vx_errf(err, VX_EUNSUPPORTED, "config.json: model_type '%s' is not admitted; lql admits "
                "llama, mistral, qwen2, gemma, gemma2, gpt2, phi3, mixtral, qwen2_moe, deepseek_v3, "
                "qwen3, qwen3_moe, olmo2, gemma3_text, gpt_oss, mamba2, granitemoehybrid, qwen3_next",
                mt->valuestring);
        goto out;
    }
    snprintf(p->family, sizeof p->family, "%s", mt->valuestring);
    j.family = p->family;
    fam f = families[fi].f;
    if (f == F_GPT2)
        j.prefix = st_find(m, "transformer.wte.weight") ? "transformer." : "";
    else if (f == F_MAMBA2)
        j.prefix = "backbone.";
    else
        j.prefix = "model.";
    if (build(&j, &families[fi], gen, tok, tokcfg) < 0)
        goto out;
    if (hf_judge_rest(&j, B(f)) < 0)
        goto out;
    int tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p->component, "execution"),
                                         "lm_head"), "tied"));
    /* a tied head's own copy is dropped only when it is the embedding, byte for byte: a
     * different one would be a second output projection the graph never runs */
    const st_tensor *emb = NULL;
    for (size_t k = 0; k < p->obj[0].n && !emb; k++)
        if (strcmp(p->obj[0].op[k].name, "weight") == 0)
            emb = p->obj[0].op[k].src;
    for (size_t i = 0; i < st_count(m); i++) {
        const st_tensor *t = st_at(m, i);
        if (!j.bound[i] && tied && strcmp(t->name, "lm_head.weight") == 0 && emb &&
            (t->dtype != emb->dtype || t->nbytes != emb->nbytes ||
             memcmp(t->data, emb->data, t->nbytes) != 0)) {
            vx_errf(err, VX_EUNSUPPORTED, "checkpoint: tie_word_embeddings is true but tensor "
                    "'lm_head.weight' differs from '%s' (family '%s'): the tied head would "
                    "drop it; set tie_word_embeddings to false if it is the output projection",
                    emb->name, p->family);
            goto out;
        }
        if (!j.bound[i] && !ignorable(t->name, tied)) {
            vx_errf(err, VX_EUNSUPPORTED, "checkpoint: tensor '%s' is not bound to any operand of "
                    "family '%s' (lql refuses to drop weights silently)", t->name, p->family);
            goto out;
        }
    }
    rc = 0;
out:
    if (rc < 0)
        hf_plan_free(p);
    free(j.bound);
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    cJSON_Delete(tok);
    cJSON_Delete(tokcfg);
    return rc;
}
