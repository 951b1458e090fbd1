/*
 * hf_recur.c — admission of the recurrent token mixers and the families built on them:
 * Mamba2 (every layer an SSM mixer, no channel mixer), GraniteMoeHybrid (Mamba2 or NoPE
 * attention per layer, each followed by an MoE plus an always-on shared MLP, with
 * embedding / residual / attention / logit multipliers) and Qwen3-Next (Gated DeltaNet or
 * gated attention per layer, each followed by an MoE with a gated shared expert).
 * Families' semantics follow transformers' modeling files (tests/fixtures/models/families/
 * README.md lists the details); every config key read here is judged, as in hf_admit.c.
 */
#include "hf_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- configuration */

/* Mamba2's own geometry keys, read before the per-layer arrays exist. */
int hf_mamba2_geometry(judge *j, arch *a)
{
    if (hf_getpos(j, "hidden_size", REQUIRED, &a->hidden) < 0 ||
        hf_getpos(j, "num_hidden_layers", REQUIRED, &a->layers) < 0 ||
        hf_getpos(j, "vocab_size", REQUIRED, &a->vocab) < 0 ||
        hf_getposd(j, "layer_norm_epsilon", 1e-5, &a->eps) < 0)
        return -1;
    if (a->layers > 4096)
        return hf_bad_type(j, "num_hidden_layers", "at most 4096");
    /* no positions: the context is what a session allocates, not a model limit */
    a->ctx = 1 << 20;
    a->rope = 0;
    a->no_ffn = 1;
    a->act = "silu";
    return 0;
}

/* time_step_limit [min, max]: dt is clamped to it after the softplus. */
static int dt_limit(judge *j, arch *a)
{
    const cJSON *v = hf_key(j, "time_step_limit");
    a->ssm_dt_min = 0;
    a->ssm_dt_max = INFINITY;
    if (!v || cJSON_IsNull(v))
        return 0;
    const cJSON *lo = cJSON_GetArrayItem(v, 0), *hi = cJSON_GetArrayItem(v, 1);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !cJSON_IsNumber(lo) || !cJSON_IsNumber(hi) ||
        !(lo->valuedouble >= 0) || !(hi->valuedouble > lo->valuedouble))
        return hf_bad_type(j, "time_step_limit", "a list [min, max] with 0 <= min < max");
    a->ssm_dt_min = lo->valuedouble;
    a->ssm_dt_max = hi->valuedouble;
    return 0;
}

/* The SSM geometry shared by Mamba2 and Granite's mamba layers; key names differ. */
static int ssm_geometry(judge *j, arch *a, const char *heads, const char *head_dim,
                        const char *groups, const char *state, const char *conv,
                        const char *expand, int head_dim_auto)
{
    long ex = 0;
    if (hf_getpos(j, heads, REQUIRED, &a->ssm_heads) < 0 || hf_getpos(j, groups, 1, &a->ssm_groups) < 0 ||
        hf_getpos(j, state, REQUIRED, &a->ssm_state) < 0 || hf_getpos(j, conv, 4, &a->ssm_conv) < 0 ||
        hf_geti(j, expand, 2, &ex) < 0)
        return -1;
    if (ex < 1 || ex > 64)
        return hf_bad_type(j, expand, "a positive integer");
    long inner = ex * a->hidden;
    const cJSON *hd = hf_peek(j, head_dim);
    if (head_dim_auto && cJSON_IsString(hd) && strcmp(hd->valuestring, "auto") == 0) {
        hf_key(j, head_dim);
        if (inner % a->ssm_heads)
            return hf_bad_type(j, heads, "a divisor of the inner width for head_dim 'auto'");
        a->ssm_head_dim = (int)(inner / a->ssm_heads);
    } else if (hf_getpos(j, head_dim, REQUIRED, &a->ssm_head_dim) < 0) {
        return -1;
    }
    if ((long)a->ssm_heads * a->ssm_head_dim != inner)
        return vx_errf(j->err, VX_EFORMAT, "config.json: %s %d x %s %d is not %s x hidden_size = %ld "
                       "(family '%s')", heads, a->ssm_heads, head_dim, a->ssm_head_dim, expand, inner,
                       j->family);
    if (a->ssm_heads % a->ssm_groups)
        return hf_bad_type(j, groups, "a divisor of the number of heads");
    if (a->ssm_conv < 2)
        return hf_bad_type(j, conv, "at least 2");
    return 0;
}

int hf_mamba2_keys(judge *j, arch *a)
{
    if (ssm_geometry(j, a, "num_heads", "head_dim", "n_groups", "state_size", "conv_kernel", "expand",
                     0) < 0 ||
        hf_getb(j, "use_conv_bias", 1, &a->ssm_conv_bias) < 0 ||
        hf_getb(j, "use_bias", 0, &a->ssm_proj_bias) < 0 || dt_limit(j, a) < 0 ||
        hf_act_key(j, a, "hidden_act", "silu") < 0)
        return -1;
    if (strcmp(a->act, "silu") != 0)
        return hf_refuse(j, "hidden_act", hf_key(j, "hidden_act"));
    /* transformers' Mamba2 normalises with layer_norm_epsilon everywhere */
    a->ssm_eps = a->eps;
    for (int i = 0; i < a->layers; i++)
        a->mixer[i] = MIX_MAMBA2;
    return 0;
}

/* layer_types (or the older layers_block_type): which layers are which mixer. */
static int layer_kinds(judge *j, arch *a, const char *key, const char *const *names,
                       const int *kinds, int n)
{
    const cJSON *lt = hf_key(j, key);
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != a->layers)
        return hf_bad_type(j, key, "a list with one entry per layer");
    int i = 0;
    for (const cJSON *t = lt->child; t; t = t->next, i++) {
        int k = -1;
        for (int c = 0; c < n && k < 0; c++)
            if (cJSON_IsString(t) && strcmp(t->valuestring, names[c]) == 0)
                k = kinds[c];
        if (k < 0)
            return hf_refuse(j, key, t);
        a->mixer[i] = k;
    }
    return 0;
}

int hf_granite_keys(judge *j, arch *a)
{
    static const char *const names[] = {"mamba", "attention"};
    static const int kinds[] = {MIX_MAMBA2, MIX_ATTN};
    const char *lk = hf_peek(j, "layer_types") ? "layer_types" : "layers_block_type";
    double emb = 1, res = 1, att = 1, logit = 1;
    if (layer_kinds(j, a, lk, names, kinds, 2) < 0 ||
        ssm_geometry(j, a, "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state",
                     "mamba_d_conv", "mamba_expand", 1) < 0 ||
        hf_getb(j, "mamba_conv_bias", 1, &a->ssm_conv_bias) < 0 ||
        hf_getb(j, "mamba_proj_bias", 0, &a->ssm_proj_bias) < 0 ||
        hf_getposd(j, "embedding_multiplier", 1.0, &emb) < 0 ||
        hf_getposd(j, "residual_multiplier", 1.0, &res) < 0 ||
        hf_getposd(j, "attention_multiplier", 1.0, &att) < 0 ||
        hf_getposd(j, "logits_scaling", 1.0, &logit) < 0 ||
        hf_expect_str(j, "normalization_function", "rmsnorm") < 0 ||
        hf_expect_false(j, "attention_bias") < 0)
        return -1;
    /* the gated norm and the conv use the model's eps and activation; no dt clamp */
    a->ssm_eps = a->eps;
    a->ssm_dt_min = 0;
    a->ssm_dt_max = INFINITY;
    if (strcmp(a->act, "silu") != 0)
        return hf_refuse(j, "hidden_act", hf_key(j, "hidden_act"));
    const cJSON *pe = hf_key(j, "position_embedding_type");
    if (cJSON_IsString(pe) && strcmp(pe->valuestring, "nope") == 0) {
        /* rope_theta / rope_scaling are leftovers when positions are off */
        a->rope = 0;
    } else if (pe && !cJSON_IsNull(pe) && !(cJSON_IsString(pe) && strcmp(pe->valuestring, "rope") == 0)) {
        return hf_refuse(j, "position_embedding_type", pe);
    }
    a->emb_scale = emb;
    a->residual_scale = res;
    a->scale = att;
    a->logits_divisor = logit;
    /* every layer: an MoE (top-k of the logits, softmax over those k: the renormalised
     * top-k of a full softmax) plus the always-on shared MLP; with no experts the shared
     * MLP alone is the layer's dense FFN */
    long ne = 0;
    if (hf_geti(j, "num_local_experts", 0, &ne) < 0 ||
        hf_getpos(j, "shared_intermediate_size", REQUIRED, &a->shared_inter) < 0)
        return -1;
    if (ne < 0 || ne > 65536)
        return hf_bad_type(j, "num_local_experts", "a number of experts");
    a->experts = (int)ne;
    if (!a->experts) {
        a->inter = a->shared_inter;
        a->shared_inter = 0;
        hf_key(j, "num_experts_per_tok");   /* no router to apply it */
        return 0;
    }
    if (hf_getpos(j, "num_experts_per_tok", REQUIRED, &a->top_k) < 0)
        return -1;
    if (a->top_k > a->experts)
        return hf_bad_type(j, "num_experts_per_tok", "at most the number of experts");
    a->expert_inter = a->inter;
    a->normalise = 1;
    a->n_group = a->topk_group = 1;
    a->routed_scaling = 1.0;
    for (int i = 0; i < a->layers; i++)
        a->moe[i] = 1;
    return 0;
}

int hf_qwen3_next_keys(judge *j, arch *a)
{
    static const char *const names[] = {"linear_attention", "full_attention"};
    static const int kinds[] = {MIX_DELTANET, MIX_ATTN};
    if (hf_peek(j, "layer_types")) {
        if (layer_kinds(j, a, "layer_types", names, kinds, 2) < 0)
            return -1;
    } else {
        int every = 4;
        if (hf_getpos(j, "full_attention_interval", 4, &every) < 0)
            return -1;
        for (int i = 0; i < a->layers; i++)
            a->mixer[i] = (i + 1) % every == 0 ? MIX_ATTN : MIX_DELTANET;
    }
    if (hf_peek(j, "layer_types"))
        hf_key(j, "full_attention_interval");   /* layer_types wins when both are present */
    if (hf_getpos(j, "linear_num_key_heads", REQUIRED, &a->dn_k_heads) < 0 ||
        hf_getpos(j, "linear_num_value_heads", REQUIRED, &a->dn_v_heads) < 0 ||
        hf_getpos(j, "linear_key_head_dim", REQUIRED, &a->dn_k_dim) < 0 ||
        hf_getpos(j, "linear_value_head_dim", REQUIRED, &a->dn_v_dim) < 0 ||
        hf_getpos(j, "linear_conv_kernel_dim", 4, &a->dn_conv) < 0 ||
        hf_expect_false(j, "use_sliding_window") < 0 || hf_expect_false(j, "attention_bias") < 0)
        return -1;
    if (a->dn_conv < 2)
        return hf_bad_type(j, "linear_conv_kernel_dim", "at least 2");
    if (a->dn_v_heads % a->dn_k_heads)
        return hf_bad_type(j, "linear_num_value_heads", "a multiple of linear_num_key_heads");
    if (strcmp(a->act, "silu") != 0)
        return hf_refuse(j, "hidden_act", hf_key(j, "hidden_act"));
    a->dn_eps = a->eps;
    /* partial rotary: transformers' class default is 0.25, not 1 */
    const cJSON *rp = hf_peek(j, "rope_parameters");
    if (!hf_peek(j, "partial_rotary_factor") &&
        !(cJSON_IsObject(rp) && cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor"))) {
        a->rotary_dim = a->head_dim / 4;
        a->rotary_dim -= a->rotary_dim % 2;
    }
    a->attn_gate = 1;
    a->qk_norm = "head";
    /* zero-centred (1 + w) norms: input, post-attention, final, q_norm and k_norm; the
     * gated DeltaNet norm is a plain w (the plan binds it without the offset) */
    a->weight_offset = 1.0;
    return 0;
}

/* ---------------------------------------------------------------- tensors */

/* A source [C, 1, K] conv weight as the operand [C, K] (the same bytes). */
static int bind_conv(judge *j, const char *src, int64_t C, int64_t K, const char *dst)
{
    int64_t s3[3] = {C, 1, K}, s2[2] = {C, K};
    const st_tensor *t = hf_need(j, src, 3, s3);
    return t ? hf_push_op(j, &j->p->obj[j->dec], dst, t, HF_WHOLE, 0, 0, 2, s2) : -1;
}

/* A per-head parameter kept in f32 whatever the dtype policy: exp(A_log) and the dt
 * bias feed a recurrence over every position, where bf16 rounding compounds. */
static int bind_f32_vec(judge *j, const char *src, int64_t n, const char *dst)
{
    if (hf_bind(j, j->dec, src, n, 0, "%s", dst) < 0)
        return -1;
    j->p->obj[j->dec].op[j->p->obj[j->dec].n - 1].keep_f32 = 1;
    return 0;
}

int hf_bind_ssm(judge *j, const arch *a, int i, const char *src)
{
    char s[160], d[96];
    const int64_t H = a->hidden, I = (int64_t)a->ssm_heads * a->ssm_head_dim;
    const int64_t GN = (int64_t)a->ssm_groups * a->ssm_state, C = I + 2 * GN;
    const int64_t P = 2 * I + 2 * GN + a->ssm_heads;
    /* a projection with more rows carries transformers' d_mlp blocks, which lql does not run */
    if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.%s.in_proj.weight", i, src), P, H,
                "layers.%d.ssm.in_proj", i) < 0 ||
        (a->ssm_proj_bias && hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.%s.in_proj.bias", i, src), P, 0,
                                     "layers.%d.ssm.in_proj.bias", i) < 0) ||
        bind_conv(j, hf_nm(s, sizeof s, "layers.%d.%s.conv1d.weight", i, src), C, a->ssm_conv,
                  hf_nm(d, sizeof d, "layers.%d.ssm.conv", i)) < 0 ||
        (a->ssm_conv_bias && hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.%s.conv1d.bias", i, src), C, 0,
                                     "layers.%d.ssm.conv.bias", i) < 0) ||
        bind_f32_vec(j, hf_nm(s, sizeof s, "layers.%d.%s.dt_bias", i, src), a->ssm_heads,
                     hf_nm(d, sizeof d, "layers.%d.ssm.dt_bias", i)) < 0 ||
        bind_f32_vec(j, hf_nm(s, sizeof s, "layers.%d.%s.A_log", i, src), a->ssm_heads,
                     hf_nm(d, sizeof d, "layers.%d.ssm.A_log", i)) < 0 ||
        bind_f32_vec(j, hf_nm(s, sizeof s, "layers.%d.%s.D", i, src), a->ssm_heads,
                     hf_nm(d, sizeof d, "layers.%d.ssm.D", i)) < 0 ||
        hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.%s.norm.weight", i, src), I, 0,
                "layers.%d.ssm.norm", i) < 0 ||
        hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.%s.out_proj.weight", i, src), H, I,
                "layers.%d.ssm.out_proj", i) < 0 ||
        (a->ssm_proj_bias && hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.%s.out_proj.bias", i, src), H, 0,
                                     "layers.%d.ssm.out_proj.bias", i) < 0))
        return -1;
    return 0;
}

int hf_bind_deltanet(judge *j, const arch *a, int i)
{
    char s[160], d[96];
    const int64_t H = a->hidden, nk = a->dn_k_heads, nv = a->dn_v_heads, dk = a->dn_k_dim,
                  dv = a->dn_v_dim, r = nv / nk;
    const int64_t C = 2 * nk * dk + nv * dv;
    if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.linear_attn.in_proj_qkvz.weight", i),
                nk * (2 * dk + 2 * r * dv), H, "layers.%d.deltanet.in_qkvz", i) < 0 ||
        hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.linear_attn.in_proj_ba.weight", i), 2 * nv, H,
                "layers.%d.deltanet.in_ba", i) < 0 ||
        bind_conv(j, hf_nm(s, sizeof s, "layers.%d.linear_attn.conv1d.weight", i), C, a->dn_conv,
                  hf_nm(d, sizeof d, "layers.%d.deltanet.conv", i)) < 0 ||
        bind_f32_vec(j, hf_nm(s, sizeof s, "layers.%d.linear_attn.dt_bias", i), nv,
                     hf_nm(d, sizeof d, "layers.%d.deltanet.dt_bias", i)) < 0 ||
        bind_f32_vec(j, hf_nm(s, sizeof s, "layers.%d.linear_attn.A_log", i), nv,
                     hf_nm(d, sizeof d, "layers.%d.deltanet.A_log", i)) < 0 ||
        hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.linear_attn.norm.weight", i), dv, 0,
                "layers.%d.deltanet.norm", i) < 0 ||
        hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.linear_attn.out_proj.weight", i), H, nv * dv,
                "layers.%d.deltanet.out_proj", i) < 0)
        return -1;
    return 0;
}

/* Rows [r0, r0 + n) of a source whose leading dimensions are flattened into rows of its
 * last dimension (a fused [experts, out, in] tensor) as the operand [n, in]. */
static int bind_rows(judge *j, const st_tensor *t, int64_t r0, int64_t n, int64_t in, const char *dst)
{
    int64_t sh[2] = {n, in};
    return hf_push_op(j, &j->p->obj[j->dec], dst, t, HF_ROWS, r0, r0 + n, 2, sh);
}

/* Granite's fused MoE: input_linear [E, 2I, H] (gate rows first, then up), output_linear
 * [E, H, I]; shared_mlp the same layout for one MLP. */
int hf_bind_granite_moe(judge *j, const arch *a, int i)
{
    char s[160], d[96];
    const int64_t H = a->hidden, E = a->experts;
    const int64_t S = a->experts ? a->shared_inter : a->inter, I = a->expert_inter;
    const char *sh = a->experts ? "ffn.shared" : "ffn";
    int64_t in_s[2] = {2 * S, H}, out_s[2] = {H, S};
    const st_tensor *gi = hf_need(j, hf_nm(s, sizeof s, "layers.%d.shared_mlp.input_linear.weight", i), 2, in_s);
    const st_tensor *go = gi ? hf_need(j, hf_nm(s, sizeof s, "layers.%d.shared_mlp.output_linear.weight", i),
                                       2, out_s) : NULL;
    if (!go ||
        bind_rows(j, gi, 0, S, H, hf_nm(d, sizeof d, "layers.%d.%s.gate_proj", i, sh)) < 0 ||
        bind_rows(j, gi, S, S, H, hf_nm(d, sizeof d, "layers.%d.%s.up_proj", i, sh)) < 0 ||
        hf_push_op(j, &j->p->obj[j->dec], hf_nm(d, sizeof d, "layers.%d.%s.down_proj", i, sh), go, HF_WHOLE,
                   0, 0, 2, out_s) < 0)
        return -1;
    if (!E)
        return 0;
    int64_t ei[3] = {E, 2 * I, H}, eo[3] = {E, H, I};
    const st_tensor *wi = hf_need(j, hf_nm(s, sizeof s, "layers.%d.block_sparse_moe.input_linear.weight", i), 3, ei);
    const st_tensor *wo = wi ? hf_need(j, hf_nm(s, sizeof s, "layers.%d.block_sparse_moe.output_linear.weight", i),
                                       3, eo) : NULL;
    if (!wo || hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.block_sparse_moe.router.layer.weight", i), E, H,
                       "layers.%d.ffn.router", i) < 0)
        return -1;
    for (int64_t e = 0; e < E; e++)
        if (bind_rows(j, wi, e * 2 * I, I, H, hf_nm(d, sizeof d, "layers.%d.ffn.experts.%lld.gate_proj", i, (long long)e)) < 0 ||
            bind_rows(j, wi, e * 2 * I + I, I, H, hf_nm(d, sizeof d, "layers.%d.ffn.experts.%lld.up_proj", i, (long long)e)) < 0 ||
            bind_rows(j, wo, e * H, H, I, hf_nm(d, sizeof d, "layers.%d.ffn.experts.%lld.down_proj", i, (long long)e)) < 0)
            return -1;
    return 0;
}

/* ---------------------------------------------------------------- surface */

void hf_emit_recur(cJSON *x, const arch *a)
{
    int ssm = 0, dn = 0;
    for (int i = 0; a->mixer && i < a->layers; i++) {
        ssm |= a->mixer[i] == MIX_MAMBA2;
        dn |= a->mixer[i] == MIX_DELTANET;
    }
    if (ssm) {
        cJSON *m = cJSON_AddObjectToObject(x, "mamba2");
        cJSON_AddNumberToObject(m, "heads", a->ssm_heads);
        cJSON_AddNumberToObject(m, "head_dim", a->ssm_head_dim);
        cJSON_AddNumberToObject(m, "groups", a->ssm_groups);
        cJSON_AddNumberToObject(m, "state_size", a->ssm_state);
        cJSON_AddNumberToObject(m, "conv_kernel", a->ssm_conv);
        cJSON_AddBoolToObject(m, "conv_bias", a->ssm_conv_bias);
        cJSON_AddBoolToObject(m, "proj_bias", a->ssm_proj_bias);
        cJSON_AddNumberToObject(m, "dt_min", a->ssm_dt_min);
        if (isinf(a->ssm_dt_max))
            cJSON_AddNullToObject(m, "dt_max");
        else
            cJSON_AddNumberToObject(m, "dt_max", a->ssm_dt_max);
        cJSON_AddNumberToObject(m, "norm_eps", a->ssm_eps);
    } else {
        cJSON_AddNullToObject(x, "mamba2");
    }
    if (dn) {
        cJSON *g = cJSON_AddObjectToObject(x, "gated_deltanet");
        cJSON_AddNumberToObject(g, "k_heads", a->dn_k_heads);
        cJSON_AddNumberToObject(g, "v_heads", a->dn_v_heads);
        cJSON_AddNumberToObject(g, "k_dim", a->dn_k_dim);
        cJSON_AddNumberToObject(g, "v_dim", a->dn_v_dim);
        cJSON_AddNumberToObject(g, "conv_kernel", a->dn_conv);
        cJSON_AddNumberToObject(g, "norm_eps", a->dn_eps);
    } else {
        cJSON_AddNullToObject(x, "gated_deltanet");
    }
    if (a->residual_scale != 1.0)
        cJSON_AddNumberToObject(x, "residual_scale", a->residual_scale);
    else
        cJSON_AddNullToObject(x, "residual_scale");
}

/* A recurrent layer's continuation state: the conv window (the last kernel − 1 conv
 * inputs) and the recurrent state, both fixed-size. */
void hf_layer_state(cJSON *state, const arch *a, int i)
{
    if (a->mixer[i] == MIX_MAMBA2) {
        const int64_t I = (int64_t)a->ssm_heads * a->ssm_head_dim;
        const int64_t conv[] = {a->ssm_conv - 1, I + 2 * (int64_t)a->ssm_groups * a->ssm_state};
        const int64_t ssm[] = {a->ssm_heads, a->ssm_head_dim, a->ssm_state};
        hf_state_region(state, "conv", "f32", 0, 2, conv);
        hf_state_region(state, "ssm", "f32", 0, 3, ssm);
    } else {
        const int64_t conv[] = {a->dn_conv - 1, 2 * (int64_t)a->dn_k_heads * a->dn_k_dim +
                                                    (int64_t)a->dn_v_heads * a->dn_v_dim};
        const int64_t rec[] = {a->dn_v_heads, a->dn_k_dim, a->dn_v_dim};
        hf_state_region(state, "conv", "f32", 0, 2, conv);
        hf_state_region(state, "recurrent", "f32", 0, 3, rec);
    }
}

/* ---------------------------------------------------------------- multi-token prediction */

/* Qwen3-Next's MTP block (for speculative decoding): h' = fc([pre_fc_norm_embedding(embed(t))
 * | pre_fc_norm_hidden(h)]), then its layers (full attention + MoE, as the decoder's),
 * its norm and the decoder's lm_head. It is an auxiliary component: the decoder never reads
 * it, so main logits are the same with or without it; the edge says it reads the hidden
 * state after the decoder's last layer, and the component names the embedding and head it
 * shares. */
int hf_bind_mtp(judge *j, fam f, const arch *a, const cJSON *special)
{
    char s[160];
    if (!st_find(j->m, "mtp.fc.weight"))
        return 0;
    int n = 0;
    while (n < 64 && st_find(j->m, hf_nm(s, sizeof s, "mtp.layers.%d.input_layernorm.weight", n)))
        n++;
    if (!n)
        return vx_errf(j->err, VX_EMISSING, "checkpoint: tensor 'mtp.fc.weight' without "
                       "'mtp.layers.0.input_layernorm.weight' (family '%s')", j->family);
    const char *save = j->prefix;
    const int64_t H = a->hidden;
    j->prefix = "mtp.";
    j->dec = MTP;
    int rc = hf_bind(j, MTP, "fc.weight", H, 2 * H, "fc") < 0 ||
             hf_bind(j, MTP, "pre_fc_norm_embedding.weight", H, 0, "pre_fc_norm_embedding") < 0 ||
             hf_bind(j, MTP, "pre_fc_norm_hidden.weight", H, 0, "pre_fc_norm_hidden") < 0 ||
             hf_bind(j, MTP, "norm.weight", H, 0, "final_norm") < 0;
    for (int i = 0; !rc && i < n; i++)
        rc = hf_bind_norm(j, a, i, "input_layernorm", "attn_norm") < 0 ||
             hf_bind_attention(j, a, i) < 0 || (a->qk_norm && hf_bind_qk_norm(j, a, i) < 0) ||
             hf_bind_norm(j, a, i, "post_attention_layernorm", "ffn_norm") < 0 ||
             hf_bind_moe(j, f, a, i) < 0;
    j->prefix = save;
    j->dec = DEC;
    if (rc)
        return -1;

    /* the component: the decoder's surface over n attention + MoE layers */
    arch b = *a;
    int mixer[n], moe[n], window[n];
    double theta[n];
    for (int i = 0; i < n; i++) {
        mixer[i] = MIX_ATTN;
        moe[i] = 1;
        window[i] = 0;
        theta[i] = 0;
    }
    b.layers = n;
    b.mixer = mixer;
    b.moe = moe;
    b.window = window;
    b.layer_theta = theta;
    b.rope_scaling = a->rope_scaling ? cJSON_Duplicate(a->rope_scaling, 1) : NULL;
    cJSON *c = hf_emit(&b, cJSON_Duplicate(special, 1));
    cJSON_ReplaceItemInObject(c, "id", cJSON_CreateString("mtp"));
    cJSON_ReplaceItemInObject(c, "role", cJSON_CreateString("mtp"));
    cJSON *in = cJSON_AddObjectToObject(c, "inputs");
    cJSON_AddStringToObject(in, "embedding", "target.embedding");
    cJSON_AddStringToObject(in, "output_head", "target.output_head");
    cJSON_AddStringToObject(in, "fc", "concat(pre_fc_norm_embedding(embedding(next token)), "
                            "pre_fc_norm_hidden(hidden))");
    j->p->aux = c;
    cJSON *e = cJSON_CreateObject(), *pl = cJSON_CreateArray();
    cJSON_AddStringToObject(e, "producer_component", "target");
    cJSON_AddItemToArray(pl, cJSON_CreateNumber(a->layers - 1));
    cJSON_AddItemToObject(e, "producer_layers", pl);
    cJSON_AddStringToObject(e, "consumer_component", "mtp");
    cJSON_AddStringToObject(e, "consumer_object", "mtp.block");
    j->p->edges = cJSON_CreateArray();
    cJSON_AddItemToArray(j->p->edges, e);
    return 0;
}
