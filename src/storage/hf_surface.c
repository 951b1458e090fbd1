/*
 * hf_surface.c — the execution surface: activation names, RoPE (theta, llama3 scaling,
 * partial rotary), the model dtype, special tokens and whether the tokenizer adds BOS,
 * and the component JSON (docs/lql/CONTAINER.md) built from a family's `arch`. Every
 * field is always written (null when off), so absence never means a default.
 */
#include "hf_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *num_or_null(double v, int on)
{
    return on ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

/* Map a config activation name to the surface's. NULL when not admitted. */
static const char *activation(const char *z)
{
    static const struct { const char *hf, *lql; } map[] = {
        {"silu", "silu"}, {"swish", "silu"},
        {"gelu_pytorch_tanh", "gelu_tanh"}, {"gelu_new", "gelu_tanh"}, {"gelu_fast", "gelu_tanh"},
        {"gelu_tanh", "gelu_tanh"}, {"gelu", "gelu"},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (z && strcmp(z, map[i].hf) == 0)
            return map[i].lql;
    return NULL;
}

int hf_act_key(judge *j, arch *a, const char *k, const char *def)
{
    const cJSON *v = hf_key(j, k);
    const char *z = v && cJSON_IsString(v) ? v->valuestring : (v && !cJSON_IsNull(v) ? NULL : def);
    if (!z || !(a->act = activation(z)))
        return hf_refuse(j, k, v);
    return 0;
}

/* YaRN's attention factor, stated in the graph: 0.1·ln(factor) + 1 when the config has
 * none. transformers 4.5x took the factor as max_position_embeddings / original; later
 * versions keep the explicit factor: a config where the two differ is ambiguous. */
static int yarn_resolve(judge *j, const arch *a, cJSON *s, const char *scname)
{
    double f = cJSON_GetObjectItemCaseSensitive(s, "factor")->valuedouble;
    double orig = cJSON_GetObjectItemCaseSensitive(s, "original_max_position_embeddings")->valuedouble;
    char full[64];
    snprintf(full, sizeof full, "%s.factor", scname);
    if (f < 1)
        return hf_bad_type(j, full, "at least 1 for yarn");
    if (fabs((double)a->ctx / orig - f) > 1e-9 * f)
        return vx_errf(j->err, VX_EUNSUPPORTED, "config.json: %s %g differs from "
                       "max_position_embeddings / original_max_position_embeddings = %g; "
                       "transformers versions disagree on which applies (family '%s')", full, f,
                       (double)a->ctx / orig, j->family);
    cJSON *af = cJSON_GetObjectItemCaseSensitive(s, "attention_factor");
    if (cJSON_IsNull(af))
        cJSON_ReplaceItemInObject(s, "attention_factor", cJSON_CreateNumber(0.1 * log(f) + 1.0));
    return 0;
}

/* RoPE: rope_theta / rope_scaling, or the newer rope_parameters spelling. Only "default"
 * "llama3", "linear" and "yarn" scaling are admitted; anything else refuses as
 * 'rope_scaling.type=X'. */
int hf_rope_keys(judge *j, arch *a)
{
    const cJSON *params = hf_key(j, "rope_parameters");
    const cJSON *sc = hf_key(j, "rope_scaling");
    const char *scname = "rope_scaling";
    if (params && !cJSON_IsNull(params)) {
        if (!cJSON_IsObject(params))
            return hf_bad_type(j, "rope_parameters", "an object");
        const cJSON *th = cJSON_GetObjectItemCaseSensitive(params, "rope_theta");
        if (cJSON_IsNumber(th) && !(th->valuedouble > 0 && isfinite(th->valuedouble)))
            return hf_bad_type(j, "rope_parameters.rope_theta", "a positive number");
        if (cJSON_IsNumber(th))
            a->theta = th->valuedouble;
        if (!sc || cJSON_IsNull(sc)) {
            sc = params;
            scname = "rope_parameters";
        }
    }
    if (hf_has(j, "rope_theta") && hf_getposd(j, "rope_theta", 10000.0, &a->theta) < 0)
        return -1;
    const cJSON *prf = hf_key(j, "partial_rotary_factor");
    if (sc && cJSON_IsObject(sc) && !prf)
        prf = cJSON_GetObjectItemCaseSensitive(sc, "partial_rotary_factor");
    if (prf && !cJSON_IsNull(prf)) {
        if (!cJSON_IsNumber(prf) || prf->valuedouble <= 0 || prf->valuedouble > 1)
            return hf_bad_type(j, "partial_rotary_factor", "a number in (0, 1]");
        a->rotary_dim = (int)(a->head_dim * prf->valuedouble);
        a->rotary_dim -= a->rotary_dim % 2;
    }
    if (!sc || cJSON_IsNull(sc))
        return 0;
    if (!cJSON_IsObject(sc))
        return hf_bad_type(j, scname, "an object or null");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(sc, "rope_type");
    const char *tk = "rope_type";
    if (!ty) {
        ty = cJSON_GetObjectItemCaseSensitive(sc, "type");
        tk = "type";
    }
    char full[64];
    snprintf(full, sizeof full, "%s.%s", scname, tk);
    if (!cJSON_IsString(ty))
        return ty ? hf_refuse(j, full, ty) : hf_missing(j, full);
    if (strcmp(ty->valuestring, "default") == 0)
        return 0;
    /* per type: the parameters it reads (numbers > 0 unless noted) */
    static const struct { const char *type; const char *keys[6]; } types[] = {
        {"llama3", {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}},
        {"linear", {"factor"}},
        {"yarn", {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                  "truncate", "attention_factor"}},
    };
    int t = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(ty->valuestring, types[i].type) == 0) t = i;
    if (t < 0)
        return hf_refuse(j, full, ty);
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", types[t].type);
    /* Any other key inside the scaling object would be a parameter we do not apply. */
    for (const cJSON *c = sc->child; c; c = c->next) {
        int known = strcmp(c->string, tk) == 0 || strcmp(c->string, "rope_theta") == 0 ||
                    strcmp(c->string, "partial_rotary_factor") == 0;
        for (int i = 0; i < 6 && types[t].keys[i]; i++)
            known |= strcmp(c->string, types[t].keys[i]) == 0;
        if (!known) {
            cJSON_Delete(s);
            snprintf(full, sizeof full, "%s.%s", scname, c->string);
            return hf_refuse(j, full, c);
        }
    }
    for (int i = 0; i < 6 && types[t].keys[i]; i++) {
        const char *k = types[t].keys[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(sc, k);
        snprintf(full, sizeof full, "%s.%s", scname, k);
        if (t == 2 && (!v || cJSON_IsNull(v)) && strcmp(k, "original_max_position_embeddings")) {
            /* yarn's defaults (transformers' _compute_yarn_parameters) */
            if (strcmp(k, "truncate") == 0) cJSON_AddBoolToObject(s, k, 1);
            else if (strcmp(k, "beta_fast") == 0) cJSON_AddNumberToObject(s, k, 32);
            else if (strcmp(k, "beta_slow") == 0) cJSON_AddNumberToObject(s, k, 1);
            else if (strcmp(k, "attention_factor") == 0) cJSON_AddNullToObject(s, k);
            else {
                cJSON_Delete(s);
                return hf_missing(j, full);
            }
            continue;
        }
        if (strcmp(k, "truncate") == 0 ? !cJSON_IsBool(v) : !cJSON_IsNumber(v) || !(v->valuedouble > 0)) {
            cJSON_Delete(s);
            return v ? hf_bad_type(j, full, strcmp(k, "truncate") ? "a positive number" : "a boolean")
                     : hf_missing(j, full);
        }
        cJSON_AddItemToObject(s, k, cJSON_Duplicate(v, 0));
    }
    if (t == 2 && yarn_resolve(j, a, s, scname) < 0) {
        cJSON_Delete(s);
        return -1;
    }
    a->rope_scaling = s;
    return 0;
}

int hf_model_dtype(judge *j, vx_dtype *out)
{
    const cJSON *v = hf_key(j, "torch_dtype");
    if (!v || cJSON_IsNull(v))
        v = hf_key(j, "dtype");
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v))
        return hf_bad_type(j, v->string, "a dtype name");
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "bfloat16") == 0)
            *out = VX_BF16;
        else if (strcmp(v->valuestring, "float16") == 0)
            *out = VX_F16;
        else if (strcmp(v->valuestring, "float32") == 0)
            *out = VX_F32;
        else
            return hf_refuse(j, cJSON_IsString(hf_key(j, "torch_dtype")) ? "torch_dtype" : "dtype", v);
        return 0;
    }
    char buf[64];
    const st_tensor *t = st_find(j->m, hf_nm(buf, sizeof buf, "%sembed_tokens.weight", j->prefix));
    *out = t ? t->dtype : VX_F32;
    return 0;
}

static int is_token(const cJSON *v, int vocab)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < vocab &&
           v->valuedouble == floor(v->valuedouble);
}

/* bos / eos from config.json, completed by generation_config.json (eos merged); every id
 * must be a token of the vocabulary. */
int hf_special_tokens(judge *j, const cJSON *gen, int vocab, cJSON *st)
{
    const cJSON *bos = hf_key(j, "bos_token_id"), *eos = hf_key(j, "eos_token_id");
    const char *bos_file = "config.json";
    if (!bos || cJSON_IsNull(bos)) {
        bos = gen ? cJSON_GetObjectItemCaseSensitive(gen, "bos_token_id") : NULL;
        bos_file = "generation_config.json";
    }
    if (bos && !cJSON_IsNull(bos) && !is_token(bos, vocab))
        return vx_errf(j->err, VX_EFORMAT, "%s: key 'bos_token_id' must be a token id below "
                       "vocab_size %d (or null) for family '%s'", bos_file, vocab, j->family);
    cJSON_AddItemToObject(st, "bos", bos && cJSON_IsNumber(bos) ? cJSON_CreateNumber(bos->valuedouble)
                                                                : cJSON_CreateNull());
    cJSON *ids = cJSON_AddArrayToObject(st, "eos");
    const cJSON *srcs[2] = {eos, gen ? cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id") : NULL};
    for (int s = 0; s < 2; s++) {
        const cJSON *v = srcs[s];
        if (!v || cJSON_IsNull(v))
            continue;
        const cJSON *one = cJSON_IsArray(v) ? v->child : v;
        for (; one; one = cJSON_IsArray(v) ? one->next : NULL) {
            if (!is_token(one, vocab))
                return vx_errf(j->err, VX_EFORMAT, "%s: key 'eos_token_id' must be a token id "
                               "below vocab_size %d (or a list of them) for family '%s'",
                               s ? "generation_config.json" : "config.json", vocab, j->family);
            int dup = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, ids) dup |= e->valuedouble == one->valuedouble;
            if (!dup)
                cJSON_AddItemToArray(ids, cJSON_CreateNumber(one->valuedouble));
        }
    }
    return 0;
}

/* Does the tokenizer add a special token before the text? tokenizer.json's post-processor
 * decides (a TemplateProcessing, alone or inside a Sequence, whose "single" starts with a
 * SpecialToken); without tokenizer.json, tokenizer_config.json's add_bos_token. */
int hf_adds_bos(const cJSON *tok, const cJSON *tokcfg)
{
    if (tok) {
        const cJSON *pp = cJSON_GetObjectItemCaseSensitive(tok, "post_processor");
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
        const cJSON *one = cJSON_IsArray(list) ? list->child : pp;
        for (; one; one = cJSON_IsArray(list) ? one->next : NULL) {
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(one, "type");
            const cJSON *single = cJSON_GetObjectItemCaseSensitive(one, "single");
            if (cJSON_IsString(ty) && strcmp(ty->valuestring, "TemplateProcessing") == 0 &&
                cJSON_IsArray(single) && single->child)
                return cJSON_GetObjectItemCaseSensitive(single->child, "SpecialToken") != NULL;
        }
        return 0;
    }
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(tokcfg, "add_bos_token");
    return cJSON_IsTrue(ab);
}

/* Append one declared state region (docs/lql/GRAPH.md) to a layer's state list. */
void hf_state_region(cJSON *state, const char *name, const char *dtype, int per_token, int ndim,
                     const int64_t *shape)
{
    cJSON *r = cJSON_CreateObject(), *sh = cJSON_CreateArray();
    cJSON_AddStringToObject(r, "name", name);
    cJSON_AddStringToObject(r, "dtype", dtype);
    for (int d = 0; d < ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
    cJSON_AddItemToObject(r, "shape", sh);
    cJSON_AddBoolToObject(r, "per_token", per_token);
    cJSON_AddItemToArray(state, r);
}

/* Attention's continuation state: f32 keys (after rope) and values per position; MLA
 * caches one [latent | k_rope] row per position for all heads. */
static void attention_state(cJSON *state, const arch *a)
{
    if (a->mla) {
        const int64_t lat[] = {1, (int64_t)a->kv_lora + a->rope_dim};
        hf_state_region(state, "latent", "f32", 1, 2, lat);
        return;
    }
    const int64_t kv[] = {a->kv_heads, a->head_dim};
    hf_state_region(state, "k", "f32", 1, 2, kv);
    hf_state_region(state, "v", "f32", 1, 2, kv);
}

/* Emit the component JSON for the arch (consumes a->rope_scaling). */
cJSON *hf_emit(const arch *a, cJSON *special)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", "target");
    cJSON_AddStringToObject(c, "role", "decoder");
    cJSON_AddNumberToObject(c, "num_layers", a->layers);
    cJSON_AddNumberToObject(c, "hidden_size", a->hidden);
    cJSON_AddNumberToObject(c, "vocab_size", a->vocab);
    cJSON_AddNumberToObject(c, "context_length", a->ctx);
    cJSON *x = cJSON_AddObjectToObject(c, "execution");

    cJSON *e = cJSON_AddObjectToObject(x, "embedding");
    cJSON_AddNumberToObject(e, "scale", a->emb_scale);
    cJSON_AddItemToObject(e, "positions", a->learned_pos ? cJSON_CreateString("learned")
                                                         : cJSON_CreateNull());
    cJSON *n = cJSON_AddObjectToObject(x, "norm");
    cJSON_AddStringToObject(n, "kind", a->norm_layer ? "layer" : "rms");
    cJSON_AddNumberToObject(n, "eps", a->eps);
    cJSON_AddNumberToObject(n, "weight_offset", a->weight_offset);
    cJSON_AddBoolToObject(n, "bias", a->norm_bias);

    int attends = 0;
    for (int i = 0; i < a->layers; i++)
        attends |= a->mixer[i] == MIX_ATTN;
    if (!attends) {
        cJSON_AddNullToObject(x, "attention");
        cJSON_Delete(a->rope_scaling);
    } else {
        cJSON *at = cJSON_AddObjectToObject(x, "attention");
        cJSON_AddNumberToObject(at, "heads", a->heads);
        cJSON_AddNumberToObject(at, "kv_heads", a->kv_heads);
        cJSON_AddNumberToObject(at, "head_dim", a->head_dim);
        cJSON_AddNumberToObject(at, "scale", a->scale);
        cJSON_AddBoolToObject(at, "qkv_bias", a->qkv_bias);
        cJSON_AddBoolToObject(at, "out_bias", a->out_bias);
        cJSON_AddItemToObject(at, "softcap", num_or_null(a->attn_softcap, a->attn_softcap != 0));
        cJSON_AddItemToObject(at, "qk_norm", a->qk_norm ? cJSON_CreateString(a->qk_norm) : cJSON_CreateNull());
        cJSON_AddBoolToObject(at, "sinks", a->sinks);
        if (a->rope) {
            cJSON *r = cJSON_AddObjectToObject(at, "rope");
            cJSON_AddStringToObject(r, "style", a->interleaved ? "interleaved" : "rotate_half");
            cJSON_AddNumberToObject(r, "theta", a->theta);
            cJSON_AddNumberToObject(r, "rotary_dim", a->rotary_dim);
            cJSON_AddItemToObject(r, "scaling", a->rope_scaling ? a->rope_scaling : cJSON_CreateNull());
        } else {
            cJSON_AddNullToObject(at, "rope");
            cJSON_Delete(a->rope_scaling);
        }
        cJSON_AddItemToObject(at, "output_gate", a->attn_gate ? cJSON_CreateString("sigmoid")
                                                               : cJSON_CreateNull());
    }

    if (a->mla) {
        cJSON *m = cJSON_AddObjectToObject(x, "mla");
        cJSON_AddItemToObject(m, "q_lora_rank", num_or_null(a->q_lora, a->q_lora != 0));
        cJSON_AddNumberToObject(m, "kv_lora_rank", a->kv_lora);
        cJSON_AddNumberToObject(m, "qk_nope_head_dim", a->nope);
        cJSON_AddNumberToObject(m, "qk_rope_head_dim", a->rope_dim);
        cJSON_AddNumberToObject(m, "v_head_dim", a->v_dim);
        cJSON_AddNumberToObject(m, "q_a_norm_eps", 1e-6);
        cJSON_AddNumberToObject(m, "kv_a_norm_eps", 1e-6);
    } else {
        cJSON_AddNullToObject(x, "mla");
    }

    if (a->no_ffn) {
        cJSON_AddNullToObject(x, "ffn");
    } else {
        cJSON *f = cJSON_AddObjectToObject(x, "ffn");
        cJSON_AddStringToObject(f, "kind", a->gated ? "gated" : "plain");
        cJSON_AddStringToObject(f, "activation", a->act);
        cJSON_AddNumberToObject(f, "intermediate", a->inter);
        cJSON_AddBoolToObject(f, "bias", a->ffn_bias);
    }

    if (a->experts) {
        cJSON *m = cJSON_AddObjectToObject(x, "moe");
        cJSON_AddNumberToObject(m, "experts", a->experts);
        cJSON_AddNumberToObject(m, "top_k", a->top_k);
        cJSON_AddNumberToObject(m, "expert_intermediate", a->expert_inter);
        cJSON_AddStringToObject(m, "scoring", a->sigmoid ? "sigmoid" : "softmax");
        cJSON_AddBoolToObject(m, "score_correction_bias", a->score_bias);
        cJSON_AddNumberToObject(m, "n_group", a->n_group);
        cJSON_AddNumberToObject(m, "topk_group", a->topk_group);
        cJSON_AddBoolToObject(m, "normalise", a->normalise);
        cJSON_AddNumberToObject(m, "routed_scaling", a->routed_scaling);
        cJSON_AddBoolToObject(m, "router_bias", a->router_bias);
        cJSON_AddBoolToObject(m, "expert_bias", a->expert_bias);
        if (a->swiglu_limit > 0) {
            cJSON *act = cJSON_AddObjectToObject(m, "expert_activation");
            cJSON_AddStringToObject(act, "kind", "clamped_swiglu");
            cJSON_AddNumberToObject(act, "alpha", a->swiglu_alpha);
            cJSON_AddNumberToObject(act, "limit", a->swiglu_limit);
        } else {
            cJSON_AddNullToObject(m, "expert_activation");
        }
        if (a->shared_inter) {
            cJSON *s = cJSON_AddObjectToObject(m, "shared");
            cJSON_AddNumberToObject(s, "intermediate", a->shared_inter);
            if (a->shared_gate)
                cJSON_AddStringToObject(s, "gate", "sigmoid");
            else
                cJSON_AddNullToObject(s, "gate");
        } else {
            cJSON_AddNullToObject(m, "shared");
        }
    } else {
        cJSON_AddNullToObject(x, "moe");
    }
    hf_emit_recur(x, a);

    cJSON *prn = cJSON_AddObjectToObject(x, "pre_norms");
    cJSON_AddBoolToObject(prn, "attn", !a->no_pre_norms);
    cJSON_AddBoolToObject(prn, "ffn", !a->no_pre_norms);
    cJSON *pn = cJSON_AddObjectToObject(x, "post_norms");
    cJSON_AddBoolToObject(pn, "attn", a->post_attn);
    cJSON_AddBoolToObject(pn, "ffn", a->post_ffn);
    cJSON_AddBoolToObject(x, "final_norm", 1);
    cJSON *lm = cJSON_AddObjectToObject(x, "lm_head");
    cJSON_AddBoolToObject(lm, "tied", a->tied);
    cJSON_AddItemToObject(lm, "softcap", num_or_null(a->final_softcap, a->final_softcap != 0));
    cJSON_AddItemToObject(lm, "logits_divisor", num_or_null(a->logits_divisor, a->logits_divisor != 1.0));
    cJSON_AddNumberToObject(x, "context_length", a->ctx);
    cJSON_AddItemToObject(x, "special_tokens", special);

    cJSON *ls = cJSON_AddArrayToObject(c, "layers");
    for (int i = 0; i < a->layers; i++) {
        cJSON *l = cJSON_CreateObject();
        static const char *const rec[] = {NULL, "mamba2", "gated_deltanet"};
        cJSON_AddStringToObject(l, "operator", a->mixer[i] != MIX_ATTN ? rec[a->mixer[i]]
                                               : a->mla ? "mla" : "softmax_attention");
        cJSON_AddItemToObject(l, "window", num_or_null(a->window[i], a->window[i] != 0));
        cJSON_AddStringToObject(l, "ffn", a->no_ffn ? "none" : a->moe[i] ? "moe" : "dense");
        if (a->layer_theta[i] > 0) {
            /* a layer kind with its own base and no scaling (Gemma 3's local layers) */
            cJSON *r = cJSON_AddObjectToObject(l, "rope");
            cJSON_AddStringToObject(r, "style", a->interleaved ? "interleaved" : "rotate_half");
            cJSON_AddNumberToObject(r, "theta", a->layer_theta[i]);
            cJSON_AddNumberToObject(r, "rotary_dim", a->rotary_dim);
            cJSON_AddNullToObject(r, "scaling");
        } else {
            cJSON_AddNullToObject(l, "rope");
        }
        if (a->mixer[i] == MIX_ATTN)
            attention_state(cJSON_AddArrayToObject(l, "state"), a);
        else
            hf_layer_state(cJSON_AddArrayToObject(l, "state"), a, i);
        cJSON_AddItemToArray(ls, l);
    }
    return c;
}
