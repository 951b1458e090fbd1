/*
 * hf_judge.c — judging config.json keys. A family builder reads the keys it turns into
 * the execution surface (reading marks a key as used); what is left is either
 * declaration-only, listed with its reason in index.json `encoder.declaration_only`, or
 * refused naming key and family — fail closed, since an unknown key might change
 * execution. Values the surface cannot express refuse the same way
 * ("key 'rope_scaling.type=yarn' changes execution ...").
 */
#include "hf_int.h"
#include "vx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const cJSON *hf_key(judge *j, const char *k)
{
    int i = 0;
    for (const cJSON *c = j->cfg->child; c; c = c->next, i++) {
        if (strcmp(c->string, k) == 0) {
            if (i < NKEYS)
                j->used[i] = 1;
            return c;
        }
    }
    return NULL;
}

/* Look at a key without judging it (it stays for the declaration-only pass). */
const cJSON *hf_peek(judge *j, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(j->cfg, k);
}

int hf_has(judge *j, const char *k)
{
    const cJSON *v = hf_key(j, k);
    return v && !cJSON_IsNull(v);
}

/* "key 'k=v' changes execution and is not admitted for family 'f'". */
int hf_refuse(judge *j, const char *k, const cJSON *v)
{
    char val[96] = "", z[95];
    if (v)
        snprintf(val, sizeof val, "=%s", cJSON_IsString(v) ? v->valuestring
                                                           : vx_json_text(v, z, sizeof z));
    return vx_errf(j->err, VX_EUNSUPPORTED, "config.json: key '%s%s' changes execution and is not "
                   "admitted for family '%s'", k, val, j->family);
}

int hf_missing(judge *j, const char *k)
{
    return vx_errf(j->err, VX_EMISSING, "config.json: required key '%s' is missing for family '%s'",
                   k, j->family);
}

int hf_bad_type(judge *j, const char *k, const char *want)
{
    return vx_errf(j->err, VX_EFORMAT, "config.json: key '%s' must be %s for family '%s'", k, want,
                   j->family);
}

/* Integer key; absent or null gives def, or refuses when def < -1 is REQUIRED. */
int hf_geti(judge *j, const char *k, long def, long *out)
{
    const cJSON *v = hf_key(j, k);
    if (!v || cJSON_IsNull(v)) {
        if (def == REQUIRED)
            return hf_missing(j, k);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return hf_bad_type(j, k, "an integer");
    if (fabs(v->valuedouble) > 1e15)   /* past any size a model has: say so, not "integer" */
        return vx_errf(j->err, VX_EFORMAT, "config.json: key '%s' = %.17g is too large for family "
                       "'%s' (no size this reader takes is above 10^15)", k, v->valuedouble, j->family);
    *out = (long)v->valuedouble;
    return 0;
}

/* A positive integer that fits the geometry fields (int). */
int hf_getpos(judge *j, const char *k, long def, int *out)
{
    long v = 0;
    if (hf_geti(j, k, def, &v) < 0)
        return -1;
    if (v <= 0 || v > DIM_MAX)
        return hf_bad_type(j, k, "a positive integer of at most 2^28");
    *out = (int)v;
    return 0;
}

int hf_getd(judge *j, const char *k, double def, double *out)
{
    const cJSON *v = hf_key(j, k);
    if (!v || cJSON_IsNull(v)) {
        if (isnan(def))
            return hf_missing(j, k);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v))
        return hf_bad_type(j, k, "a number");
    *out = v->valuedouble;
    return 0;
}

/* A number that must be positive when present (eps, theta, caps, scalars). */
int hf_getposd(judge *j, const char *k, double def, double *out)
{
    if (hf_getd(j, k, def, out) < 0)
        return -1;
    if (hf_has(j, k) && !(*out > 0 && isfinite(*out)))
        return hf_bad_type(j, k, "a positive number");
    return 0;
}

int hf_getb(judge *j, const char *k, int def, int *out)
{
    const cJSON *v = hf_key(j, k);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return hf_bad_type(j, k, "true or false");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Keys whose only admitted value is a default (false, 0, 1, a fixed string): any other
 * value refuses by name. */
int hf_expect_false(judge *j, const char *k)
{
    const cJSON *v = hf_key(j, k);
    if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
        return hf_refuse(j, k, v);
    return 0;
}

int hf_expect_num(judge *j, const char *k, double want)
{
    const cJSON *v = hf_key(j, k);
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == want))
        return hf_refuse(j, k, v);
    return 0;
}

int hf_expect_str(judge *j, const char *k, const char *want)
{
    const cJSON *v = hf_key(j, k);
    if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, want) == 0))
        return hf_refuse(j, k, v);
    return 0;
}

/* Declaration-only keys: read by nothing in execution. Reasons are shown by describe.
 * fams is a mask of the families (1 << fam) a family-specific entry applies to; 0 = all. */
typedef struct decl {
    const char *key, *reason;
    unsigned fams;
} decl;

typedef struct note {
    const char *key, *reason;
} note;

static const note decl_common[] = {
    {"is_encoder_decoder", "encoder-decoder switch; false for a decoder-only model"},
    {"add_cross_attention", "encoder-decoder switch; false for a decoder-only model"},
    {"architectures", "python class name; the family is taken from model_type"},
    {"transformers_version", "version of the library that wrote the file"},
    {"torch_dtype", "storage dtype of the source; each tensor's dtype is read from the checkpoint"},
    {"dtype", "storage dtype of the source; each tensor's dtype is read from the checkpoint"},
    {"initializer_range", "training initialisation"},
    {"use_cache", "runtime KV-cache switch"},
    {"pad_token_id", "padding id, unused by causal inference"},
    {"attention_dropout", "dropout, inactive at inference"},
    {"hidden_dropout", "dropout, inactive at inference"},
    {"resid_pdrop", "dropout, inactive at inference"},
    {"embd_pdrop", "dropout, inactive at inference"},
    {"attn_pdrop", "dropout, inactive at inference"},
    {"summary_first_dropout", "dropout of the classification head, not part of the causal LM"},
    {"summary_activation", "sequence-classification head, not part of the causal LM"},
    {"summary_proj_to_labels", "sequence-classification head, not part of the causal LM"},
    {"summary_type", "sequence-classification head, not part of the causal LM"},
    {"summary_use_proj", "sequence-classification head, not part of the causal LM"},
    {"pretraining_tp", "tensor-parallel slicing used in pre-training; computes the same function"},
    {"output_router_logits", "training output of the router (auxiliary loss)"},
    {"router_aux_loss_coef", "training loss coefficient"},
    {"router_z_loss_coef", "training loss coefficient"},
    {"aux_loss_alpha", "training loss coefficient"},
    {"seq_aux", "training loss switch"},
    {"router_jitter_noise", "router noise, applied in training only"},
    {"cache_implementation", "KV-cache layout hint for the python runtime"},
    {"reorder_and_upcast_attn", "numerical-stability switch; lql computes attention in f32"},
    {"_name_or_path", "provenance"},
    {"_commit_hash", "provenance"},
    {"auto_map", "python classes for remote code; the family is taken from model_type"},
    {"gradient_checkpointing", "training memory switch"},
    {"_attn_implementation_autoset", "python kernel choice; same function"},
    {"tokenizer_class", "tokenizer choice; the tokenizer is read from tokenizer.json"},
    {"return_dict", "python API switch"},
    {"output_hidden_states", "python API switch"},
    {"output_attentions", "python API switch"},
    {"torchscript", "python API switch"},
    {"use_return_dict", "python API switch"},
    {"_attn_implementation", "python kernel choice; same function"},
    {"attn_implementation", "python kernel choice; same function"},
    {"id2label", "classification labels"},
    {"label2id", "classification labels"},
    {"problem_type", "classification setting"},
    {"finetuning_task", "training metadata"},
    {"task_specific_params", "pipeline defaults"},
    {"prefix", "pipeline default"},
    {"max_length", "generation default"},
    {"min_length", "generation default"},
    {"do_sample", "generation default"},
    {"early_stopping", "generation default"},
    {"num_beams", "generation default"},
    {"num_beam_groups", "generation default"},
    {"diversity_penalty", "generation default"},
    {"temperature", "generation default"},
    {"top_k", "generation default"},
    {"top_p", "generation default"},
    {"typical_p", "generation default"},
    {"repetition_penalty", "generation default"},
    {"length_penalty", "generation default"},
    {"no_repeat_ngram_size", "generation default"},
    {"encoder_no_repeat_ngram_size", "generation default"},
    {"bad_words_ids", "generation default"},
    {"num_return_sequences", "generation default"},
    {"output_scores", "generation default"},
    {"return_dict_in_generate", "generation default"},
    {"forced_bos_token_id", "generation default"},
    {"forced_eos_token_id", "generation default"},
    {"remove_invalid_values", "generation default"},
    {"exponential_decay_length_penalty", "generation default"},
    {"suppress_tokens", "generation default"},
    {"begin_suppress_tokens", "generation default"},
    {"sep_token_id", "tokenizer id, unused by causal inference"},
    {"unk_token_id", "tokenizer id, unused by causal inference"},
    {"decoder_start_token_id", "encoder-decoder setting, unused by a decoder-only model"},
    {"chunk_size_feed_forward", "memory-saving chunking; computes the same function"},
    {"tie_encoder_decoder", "encoder-decoder setting, unused by a decoder-only model"},
    {"is_decoder", "encoder-decoder setting, unused by a decoder-only model"},
    {"pruned_heads", "python bookkeeping; pruned heads are absent from the stored tensors"},
    {"tf_legacy_loss", "training loss switch"},
    {"use_bfloat16", "legacy dtype hint"},
};

/* Family-specific declaration-only keys; the builder has checked the value where one
 * matters (n_ctx equal to n_positions, topk_method noaux_tc, ...). */
static const decl decl_family[] = {
    {"original_max_position_embeddings", "used only by longrope scaling, which is not set",
     B(F_PHI3)},
    {"n_ctx", "legacy alias of n_positions (equal here)", B(F_GPT2)},
    {"topk_method", "routing method name; the surface states the routing rule", B(F_DEEPSEEK_V3)},
    {"ep_size", "expert-parallel degree; computes the same function", B(F_DEEPSEEK_V3)},
    {"num_nextn_predict_layers", "multi-token-prediction head, not part of the causal LM",
     B(F_DEEPSEEK_V3)},
    {"max_window_layers", "sliding window is off (use_sliding_window false)",
     B(F_QWEN2) | B(F_QWEN2_MOE) | B(F_QWEN3) | B(F_QWEN3_MOE)},
    {"sliding_window", "sliding window is off (use_sliding_window false)",
     B(F_QWEN2) | B(F_QWEN2_MOE) | B(F_QWEN3) | B(F_QWEN3_MOE)},
    {"attn_logit_softcapping", "Gemma3Attention applies no score soft-cap", B(F_GEMMA3)},
    {"experts_per_token", "legacy duplicate of num_experts_per_tok, which is read", B(F_GPT_OSS)},
    {"initial_context_length", "training context; yarn's original_max_position_embeddings is read",
     B(F_GPT_OSS)},
    {"swiglu_limit", "transformers hard-codes the expert clamp at 7.0 (the surface states it)",
     B(F_GPT_OSS)},
    {"_sliding_window_pattern", "layer_types, which is read, states which layers slide",
     B(F_GEMMA3)},
    {"sliding_window_pattern", "layer_types, which is read, states which layers slide",
     B(F_GEMMA3)},
    {"hidden_act", "legacy spelling; this family reads hidden_activation", B(F_GEMMA) | B(F_GEMMA2)},
    {"sliding_window_size", "legacy duplicate of sliding_window, which is the key read", B(F_GEMMA2)},
    {"max_sequence_length", "legacy LLaMA-1 key; transformers reads max_position_embeddings",
     B(F_LLAMA)},
    {"chunk_size", "chunk length of the chunked SSM prefill; the recurrence computes the same "
     "function", B(F_MAMBA2)},
    {"mamba_chunk_size", "chunk length of the chunked SSM prefill; the recurrence computes the "
     "same function", B(F_GRANITE_HYBRID)},
    {"norm_before_gate", "ignored by transformers' Mamba2 (the gate is applied before the norm)",
     B(F_MAMBA2)},
    {"rms_norm", "ignored by transformers' Mamba2 (the gated norm is always an RMSNorm)",
     B(F_MAMBA2)},
    {"intermediate_size", "unused by transformers' Mamba2, which takes expand x hidden_size",
     B(F_MAMBA2)},
    {"time_step_rank", "dt projection rank of Mamba1; Mamba2 projects dt per head", B(F_MAMBA2)},
    {"time_step_scale", "training initialisation of dt", B(F_MAMBA2)},
    {"time_step_init_scheme", "training initialisation of dt", B(F_MAMBA2)},
    {"time_step_min", "training initialisation of dt_bias", B(F_MAMBA2)},
    {"time_step_max", "training initialisation of dt_bias", B(F_MAMBA2)},
    {"time_step_floor", "training initialisation of dt_bias", B(F_MAMBA2)},
    {"rescale_prenorm_residual", "training initialisation", B(F_MAMBA2)},
    {"residual_in_fp32", "numerics switch; lql keeps the residual in f32", B(F_MAMBA2)},
};

/* Keys that are declaration-only only at their default: anything else changes execution. */
int hf_check_defaults(judge *j)
{
    static const char *const off[] = {"is_encoder_decoder", "add_cross_attention"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = hf_peek(j, off[i]);
        if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
            return hf_refuse(j, off[i], hf_key(j, off[i]));
    }
    const cJSON *q = hf_key(j, "quantization_config");
    if (q && !cJSON_IsNull(q) && !j->quant_judged)
        return hf_refuse(j, "quantization_config", NULL);
    return 0;
}

/* After the builder ran: every key is used, declaration-only (listed), or refused. */
int hf_judge_rest(judge *j, unsigned famb)
{
    const decl *fd = decl_family;
    size_t nfam = sizeof decl_family / sizeof *decl_family;
    int i = 0;
    for (const cJSON *c = j->cfg->child; c; c = c->next, i++) {
        if (i < NKEYS && j->used[i])
            continue;
        const char *why = NULL;
        for (size_t k = 0; k < nfam && !why; k++)
            if ((fd[k].fams & famb) && strcmp(fd[k].key, c->string) == 0)
                why = fd[k].reason;
        for (size_t k = 0; k < sizeof decl_common / sizeof *decl_common && !why; k++)
            if (strcmp(decl_common[k].key, c->string) == 0)
                why = decl_common[k].reason;
        if (!why)
            return hf_refuse(j, c->string, NULL);
        cJSON_AddStringToObject(j->p->declaration_only, c->string, why);
    }
    return 0;
}
