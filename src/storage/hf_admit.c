/*
 * hf_admit.c — Hugging Face admission: the only file in lql that knows model families.
 *
 * Every config.json key gets a judgment. A family builder reads the keys it turns into
 * the execution surface (reading marks a key as used); declaration-only keys are listed
 * with a reason; a key that is neither refuses the encode naming key and family (fail
 * closed: an unknown key might change execution). Values the surface cannot express
 * refuse the same way ("key 'rope_scaling.type=yarn' changes execution ..."). Tensors are
 * bound to canonical operand names with their expected shapes; a checkpoint tensor that
 * binds to nothing refuses too, so no weight is silently dropped.
 */
#include "hf_admit.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NKEYS 256
/* Geometry values above this are refused: sums of two stay inside int, products are
 * formed in 64 bits. */
#define DIM_MAX (1L << 28)

/* The judgment state of one admission. */
typedef struct judge {
    const cJSON *cfg;
    const char *family;
    unsigned char used[NKEYS];   /* per config key, in document order */
    const st_model *m;
    unsigned char *bound;        /* per checkpoint tensor: consumed by an operand */
    hf_plan *p;
    vx_err *err;
    const char *prefix;          /* checkpoint tensor prefix ("model.", "transformer.", "") */
} judge;

typedef enum fam {
    F_LLAMA, F_MISTRAL, F_QWEN2, F_GEMMA, F_GEMMA2, F_GPT2, F_PHI3, F_MIXTRAL, F_QWEN2_MOE,
    F_DEEPSEEK_V3
} fam;

#define B(f) (1u << (f))

/* ---------------------------------------------------------------- config keys */

static const cJSON *key(judge *j, const char *k)
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
static const cJSON *peek(judge *j, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(j->cfg, k);
}

static int has(judge *j, const char *k)
{
    const cJSON *v = key(j, k);
    return v && !cJSON_IsNull(v);
}

/* "key 'k=v' changes execution and is not admitted for family 'f'". */
static int refuse(judge *j, const char *k, const cJSON *v)
{
    char val[96] = "";
    if (v) {
        if (cJSON_IsString(v))
            snprintf(val, sizeof val, "=%s", v->valuestring);
        else {
            char *z = cJSON_PrintUnformatted(v);
            snprintf(val, sizeof val, "=%s", z ? z : "?");
            free(z);
        }
    }
    return vx_errf(j->err, VX_EUNSUPPORTED, "config.json: key '%s%s' changes execution and is not "
                   "admitted for family '%s'", k, val, j->family);
}

static int missing(judge *j, const char *k)
{
    return vx_errf(j->err, VX_EMISSING, "config.json: required key '%s' is missing for family '%s'",
                   k, j->family);
}

static int bad_type(judge *j, const char *k, const char *want)
{
    return vx_errf(j->err, VX_EFORMAT, "config.json: key '%s' must be %s for family '%s'", k, want,
                   j->family);
}

/* Integer key; absent or null gives def, or refuses when def < -1 is REQUIRED. */
#define REQUIRED (-2)
static int geti(judge *j, const char *k, long def, long *out)
{
    const cJSON *v = key(j, k);
    if (!v || cJSON_IsNull(v)) {
        if (def == REQUIRED)
            return missing(j, k);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 1e15)
        return bad_type(j, k, "an integer");
    *out = (long)v->valuedouble;
    return 0;
}

/* A positive integer that fits the geometry fields (int). */
static int getpos(judge *j, const char *k, long def, int *out)
{
    long v;
    if (geti(j, k, def, &v) < 0)
        return -1;
    if (v <= 0 || v > DIM_MAX)
        return bad_type(j, k, "a positive integer of at most 2^28");
    *out = (int)v;
    return 0;
}

static int getd(judge *j, const char *k, double def, double *out)
{
    const cJSON *v = key(j, k);
    if (!v || cJSON_IsNull(v)) {
        if (isnan(def))
            return missing(j, k);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v))
        return bad_type(j, k, "a number");
    *out = v->valuedouble;
    return 0;
}

/* A number that must be positive when present (eps, theta, caps, scalars). */
static int getposd(judge *j, const char *k, double def, double *out)
{
    if (getd(j, k, def, out) < 0)
        return -1;
    if (has(j, k) && !(*out > 0 && isfinite(*out)))
        return bad_type(j, k, "a positive number");
    return 0;
}

static int getb(judge *j, const char *k, int def, int *out)
{
    const cJSON *v = key(j, k);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return bad_type(j, k, "true or false");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Keys whose only admitted value is a default (false, 0, 1, a fixed string): any other
 * value refuses by name. */
static int expect_false(judge *j, const char *k)
{
    const cJSON *v = key(j, k);
    if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
        return refuse(j, k, v);
    return 0;
}

static int expect_num(judge *j, const char *k, double want)
{
    const cJSON *v = key(j, k);
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == want))
        return refuse(j, k, v);
    return 0;
}

static int expect_str(judge *j, const char *k, const char *want)
{
    const cJSON *v = key(j, k);
    if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, want) == 0))
        return refuse(j, k, v);
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

/* Keys that are declaration-only only at their default: anything else changes execution. */
static int check_defaults(judge *j)
{
    static const char *const off[] = {"is_encoder_decoder", "add_cross_attention"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = peek(j, off[i]);
        if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
            return refuse(j, off[i], key(j, off[i]));
    }
    const cJSON *q = key(j, "quantization_config");
    if (q && !cJSON_IsNull(q))
        return refuse(j, "quantization_config", NULL);
    return 0;
}

/* After the builder ran: every key is used, declaration-only (listed), or refused. */
static int judge_rest(judge *j, unsigned famb, const decl *fd, size_t nfam)
{
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
            return refuse(j, c->string, NULL);
        cJSON_AddStringToObject(j->p->declaration_only, c->string, why);
    }
    return 0;
}

/* ---------------------------------------------------------------- operands */

static int push_op(judge *j, hf_object *o, const char *name, const st_tensor *t, hf_xform xf,
                   int64_t lo, int64_t hi, int ndim, const int64_t *shape)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        hf_operand *a = realloc(o->op, cap * sizeof *a);
        if (!a)
            return vx_errf(j->err, VX_ENOMEM, "admission: out of memory");
        o->op = a;
        o->cap = cap;
    }
    hf_operand *x = &o->op[o->n];
    memset(x, 0, sizeof *x);
    x->name = strdup(name);
    if (!x->name)
        return vx_errf(j->err, VX_ENOMEM, "admission: out of memory");
    x->src = t;
    x->xf = xf;
    x->lo = lo;
    x->hi = hi;
    x->ndim = ndim;
    memcpy(x->shape, shape, (size_t)ndim * sizeof *shape);
    o->n++;
    j->bound[t - st_at(j->m, 0)] = 1;
    return 0;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *s)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* Find the checkpoint tensor `src` (prefix applied) and check its shape is `want`. */
static const st_tensor *need(judge *j, const char *src, int ndim, const int64_t *want)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", j->prefix, src);
    const st_tensor *t = st_find(j->m, full);
    if (!t) {
        vx_errf(j->err, VX_EMISSING, "checkpoint: tensor '%s' is missing (family '%s')", full,
                j->family);
        return NULL;
    }
    if (t->dtype != VX_F32 && t->dtype != VX_F16 && t->dtype != VX_BF16) {
        vx_errf(j->err, VX_EUNSUPPORTED, "checkpoint: tensor '%s' has dtype %s; weights must be "
                "F32, F16 or BF16", full, vx_dtype_name(t->dtype));
        return NULL;
    }
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == want[i];
    if (!ok) {
        char a[96], b[96];
        shape_str(a, sizeof a, t->ndim, t->shape);
        shape_str(b, sizeof b, ndim, want);
        vx_errf(j->err, VX_EFORMAT, "checkpoint: tensor '%s' has shape %s, config.json implies %s "
                "(family '%s')", full, a, b, j->family);
        return NULL;
    }
    return t;
}

enum { EMB, DEC, OUT };

/* Bind a whole source tensor of shape {a} or {a, b} (b = 0 for 1-D) to an operand. */
static int bind(judge *j, int obj, const char *src, int64_t a, int64_t b, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int bind(judge *j, int obj, const char *src, int64_t a, int64_t b, const char *fmt, ...)
{
    int64_t s[2] = {a, b};
    int nd = b ? 2 : 1;
    const st_tensor *t = need(j, src, nd, s);
    if (!t)
        return -1;
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return push_op(j, &j->p->obj[obj], name, t, HF_WHOLE, 0, 0, nd, s);
}

/* Source name built printf-style for layer-indexed tensors. */
static const char *nm(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const char *nm(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return buf;
}

cJSON *hf_binding(const hf_operand *o)
{
    if (o->xf == HF_WHOLE)
        return cJSON_CreateString(o->src->name);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "tensor", o->src->name);
    if (o->xf == HF_ROWS || o->xf == HF_COLS_T) {
        cJSON *r = cJSON_AddArrayToObject(b, o->xf == HF_ROWS ? "rows" : "cols");
        cJSON_AddItemToArray(r, cJSON_CreateNumber((double)o->lo));
        cJSON_AddItemToArray(r, cJSON_CreateNumber((double)o->hi));
    }
    if (o->xf == HF_T || o->xf == HF_COLS_T)
        cJSON_AddBoolToObject(b, "transpose", 1);
    return b;
}

/* ---------------------------------------------------------------- the surface */

/* Geometry and switches every decoder family fills; the builder then emits the JSON. */
typedef struct arch {
    int layers, hidden, heads, kv_heads, head_dim, inter, vocab, ctx;
    double eps, theta, scale, emb_scale, weight_offset;
    int norm_layer, norm_bias;          /* LayerNorm (GPT-2) with bias */
    int qkv_bias, out_bias, ffn_bias, gated;
    const char *act;
    int rope, interleaved, rotary_dim;
    cJSON *rope_scaling;                /* owned until emitted; NULL = none */
    double attn_softcap, final_softcap; /* 0 = none */
    int post_attn, post_ffn, learned_pos, tied;
    int *window;                        /* per layer, 0 = none */
    int *moe;                           /* per layer: 1 sparse */
    int mla;
    int q_lora, kv_lora, nope, rope_dim, v_dim;
    int experts, top_k, expert_inter, sigmoid, score_bias, n_group, topk_group, normalise;
    double routed_scaling;
    int shared_inter, shared_gate;
    int window_default;                 /* sliding_window when the key is absent */
} arch;

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

static int act_key(judge *j, arch *a, const char *k, const char *def)
{
    const cJSON *v = key(j, k);
    const char *z = v && cJSON_IsString(v) ? v->valuestring : (v && !cJSON_IsNull(v) ? NULL : def);
    if (!z || !(a->act = activation(z)))
        return refuse(j, k, v);
    return 0;
}

/* RoPE: rope_theta / rope_scaling, or the newer rope_parameters spelling. Only "default"
 * and "llama3" scaling are admitted; anything else refuses as 'rope_scaling.type=X'. */
static int rope_keys(judge *j, arch *a)
{
    const cJSON *params = key(j, "rope_parameters");
    const cJSON *sc = key(j, "rope_scaling");
    const char *scname = "rope_scaling";
    if (params && !cJSON_IsNull(params)) {
        if (!cJSON_IsObject(params))
            return bad_type(j, "rope_parameters", "an object");
        const cJSON *th = cJSON_GetObjectItemCaseSensitive(params, "rope_theta");
        if (cJSON_IsNumber(th) && !(th->valuedouble > 0 && isfinite(th->valuedouble)))
            return bad_type(j, "rope_parameters.rope_theta", "a positive number");
        if (cJSON_IsNumber(th))
            a->theta = th->valuedouble;
        if (!sc || cJSON_IsNull(sc)) {
            sc = params;
            scname = "rope_parameters";
        }
    }
    if (has(j, "rope_theta") && getposd(j, "rope_theta", 10000.0, &a->theta) < 0)
        return -1;
    const cJSON *prf = key(j, "partial_rotary_factor");
    if (sc && cJSON_IsObject(sc) && !prf)
        prf = cJSON_GetObjectItemCaseSensitive(sc, "partial_rotary_factor");
    if (prf && !cJSON_IsNull(prf)) {
        if (!cJSON_IsNumber(prf) || prf->valuedouble <= 0 || prf->valuedouble > 1)
            return bad_type(j, "partial_rotary_factor", "a number in (0, 1]");
        a->rotary_dim = (int)(a->head_dim * prf->valuedouble);
        a->rotary_dim -= a->rotary_dim % 2;
    }
    if (!sc || cJSON_IsNull(sc))
        return 0;
    if (!cJSON_IsObject(sc))
        return bad_type(j, scname, "an object or null");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(sc, "rope_type");
    const char *tk = "rope_type";
    if (!ty) {
        ty = cJSON_GetObjectItemCaseSensitive(sc, "type");
        tk = "type";
    }
    char full[64];
    snprintf(full, sizeof full, "%s.%s", scname, tk);
    if (!cJSON_IsString(ty))
        return ty ? refuse(j, full, ty) : missing(j, full);
    if (strcmp(ty->valuestring, "default") == 0)
        return 0;
    if (strcmp(ty->valuestring, "llama3") != 0)
        return refuse(j, full, ty);
    static const char *const f[] = {"factor", "low_freq_factor", "high_freq_factor",
                                    "original_max_position_embeddings"};
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", "llama3");
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(sc, f[i]);
        if (!cJSON_IsNumber(v) || v->valuedouble <= 0) {
            cJSON_Delete(s);
            snprintf(full, sizeof full, "%s.%s", scname, f[i]);
            return v ? bad_type(j, full, "a positive number") : missing(j, full);
        }
        cJSON_AddNumberToObject(s, f[i], v->valuedouble);
    }
    /* Any other key inside the scaling object would be a parameter we do not apply. */
    for (const cJSON *c = sc->child; c; c = c->next) {
        int known = strcmp(c->string, tk) == 0 || strcmp(c->string, "rope_theta") == 0 ||
                    strcmp(c->string, "partial_rotary_factor") == 0;
        for (int i = 0; i < 4; i++)
            known |= strcmp(c->string, f[i]) == 0;
        if (!known) {
            cJSON_Delete(s);
            snprintf(full, sizeof full, "%s.%s", scname, c->string);
            return refuse(j, full, c);
        }
    }
    a->rope_scaling = s;
    return 0;
}

static int model_dtype(judge *j, vx_dtype *out)
{
    const cJSON *v = key(j, "torch_dtype");
    if (!v || cJSON_IsNull(v))
        v = key(j, "dtype");
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v))
        return bad_type(j, v->string, "a dtype name");
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "bfloat16") == 0)
            *out = VX_BF16;
        else if (strcmp(v->valuestring, "float16") == 0)
            *out = VX_F16;
        else if (strcmp(v->valuestring, "float32") == 0)
            *out = VX_F32;
        else
            return refuse(j, cJSON_IsString(key(j, "torch_dtype")) ? "torch_dtype" : "dtype", v);
        return 0;
    }
    char buf[64];
    const st_tensor *t = st_find(j->m, nm(buf, sizeof buf, "%sembed_tokens.weight", j->prefix));
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
static int special_tokens(judge *j, const cJSON *gen, int vocab, cJSON *st)
{
    const cJSON *bos = key(j, "bos_token_id"), *eos = key(j, "eos_token_id");
    if (!bos || cJSON_IsNull(bos))
        bos = gen ? cJSON_GetObjectItemCaseSensitive(gen, "bos_token_id") : NULL;
    if (bos && !cJSON_IsNull(bos) && !is_token(bos, vocab))
        return bad_type(j, "bos_token_id", "a token id below vocab_size (or null)");
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
                return bad_type(j, "eos_token_id", "a token id below vocab_size (or a list of them)");
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
static int adds_bos(const cJSON *tok, const cJSON *tokcfg)
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

/* Emit the component JSON for the arch (consumes a->rope_scaling). */
static cJSON *emit(const arch *a, cJSON *special)
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

    cJSON *at = cJSON_AddObjectToObject(x, "attention");
    cJSON_AddNumberToObject(at, "heads", a->heads);
    cJSON_AddNumberToObject(at, "kv_heads", a->kv_heads);
    cJSON_AddNumberToObject(at, "head_dim", a->head_dim);
    cJSON_AddNumberToObject(at, "scale", a->scale);
    cJSON_AddBoolToObject(at, "qkv_bias", a->qkv_bias);
    cJSON_AddBoolToObject(at, "out_bias", a->out_bias);
    cJSON_AddItemToObject(at, "softcap", num_or_null(a->attn_softcap, a->attn_softcap != 0));
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

    cJSON *f = cJSON_AddObjectToObject(x, "ffn");
    cJSON_AddStringToObject(f, "kind", a->gated ? "gated" : "plain");
    cJSON_AddStringToObject(f, "activation", a->act);
    cJSON_AddNumberToObject(f, "intermediate", a->inter);
    cJSON_AddBoolToObject(f, "bias", a->ffn_bias);

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

    cJSON *pn = cJSON_AddObjectToObject(x, "post_norms");
    cJSON_AddBoolToObject(pn, "attn", a->post_attn);
    cJSON_AddBoolToObject(pn, "ffn", a->post_ffn);
    cJSON_AddBoolToObject(x, "final_norm", 1);
    cJSON *lm = cJSON_AddObjectToObject(x, "lm_head");
    cJSON_AddBoolToObject(lm, "tied", a->tied);
    cJSON_AddItemToObject(lm, "softcap", num_or_null(a->final_softcap, a->final_softcap != 0));
    cJSON_AddNumberToObject(x, "context_length", a->ctx);
    cJSON_AddItemToObject(x, "special_tokens", special);

    cJSON *ls = cJSON_AddArrayToObject(c, "layers");
    for (int i = 0; i < a->layers; i++) {
        cJSON *l = cJSON_CreateObject();
        cJSON_AddStringToObject(l, "operator", a->mla ? "mla" : "softmax_attention");
        cJSON_AddItemToObject(l, "window", num_or_null(a->window[i], a->window[i] != 0));
        cJSON_AddStringToObject(l, "ffn", a->moe[i] ? "moe" : "dense");
        cJSON_AddItemToArray(ls, l);
    }
    return c;
}

/* ---------------------------------------------------------------- families */

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
     B(F_QWEN2) | B(F_QWEN2_MOE)},
    {"sliding_window", "sliding window is off (use_sliding_window false)",
     B(F_QWEN2) | B(F_QWEN2_MOE)},
    {"hidden_act", "legacy spelling; this family reads hidden_activation", B(F_GEMMA) | B(F_GEMMA2)},
    {"sliding_window_size", "legacy duplicate of sliding_window, which is the key read", B(F_GEMMA2)},
    {"max_sequence_length", "legacy LLaMA-1 key; transformers reads max_position_embeddings",
     B(F_LLAMA)},
};

/* Shared by the Llama-like families: geometry keys. */
static int geometry(judge *j, arch *a)
{
    if (getpos(j, "hidden_size", REQUIRED, &a->hidden) < 0 ||
        getpos(j, "num_hidden_layers", REQUIRED, &a->layers) < 0 ||
        getpos(j, "num_attention_heads", REQUIRED, &a->heads) < 0 ||
        getpos(j, "vocab_size", REQUIRED, &a->vocab) < 0 ||
        getpos(j, "intermediate_size", REQUIRED, &a->inter) < 0 ||
        getpos(j, "max_position_embeddings", a->ctx, &a->ctx) < 0 ||
        getpos(j, "num_key_value_heads", a->heads, &a->kv_heads) < 0 ||
        getpos(j, "head_dim", a->hidden / a->heads, &a->head_dim) < 0)
        return -1;
    if (a->heads % a->kv_heads)
        return vx_errf(j->err, VX_EFORMAT, "config.json: num_attention_heads %d is not a multiple of "
                       "num_key_value_heads %d", a->heads, a->kv_heads);
    if (a->layers > 4096)
        return bad_type(j, "num_hidden_layers", "at most 4096");
    return 0;
}

/* Llama-style decoder tensors (attention, norms, dense MLP); MoE and MLA layers are
 * bound by their own helpers. */
static int bind_attention(judge *j, const arch *a, int i)
{
    char s[160];
    int64_t q = (int64_t)a->heads * a->head_dim, kv = (int64_t)a->kv_heads * a->head_dim;
    static const char *const qkv[] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) {
        int64_t rows = k ? kv : q;
        if (bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.%s_proj.weight", i, qkv[k]), rows,
                 a->hidden, "layers.%d.attn.%s_proj", i, qkv[k]) < 0)
            return -1;
        if (a->qkv_bias && bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.%s_proj.bias", i, qkv[k]),
                                rows, 0, "layers.%d.attn.%s_proj.bias", i, qkv[k]) < 0)
            return -1;
    }
    if (bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.o_proj.weight", i), a->hidden, q,
             "layers.%d.attn.o_proj", i) < 0)
        return -1;
    if (a->out_bias && bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.o_proj.bias", i), a->hidden,
                            0, "layers.%d.attn.o_proj.bias", i) < 0)
        return -1;
    return 0;
}

static int bind_mlp(judge *j, const arch *a, int i, const char *src, const char *dst, int inter)
{
    char s[160];
    static const char *const gu[] = {"gate", "up"};
    for (int k = 0; k < 2; k++)
        if (bind(j, DEC, nm(s, sizeof s, "layers.%d.%s.%s_proj.weight", i, src, gu[k]), inter,
                 a->hidden, "layers.%d.%s.%s_proj", i, dst, gu[k]) < 0)
            return -1;
    return bind(j, DEC, nm(s, sizeof s, "layers.%d.%s.down_proj.weight", i, src), a->hidden, inter,
                "layers.%d.%s.down_proj", i, dst);
}

static int bind_norm(judge *j, const arch *a, int i, const char *src, const char *dst)
{
    char s[160];
    return bind(j, DEC, nm(s, sizeof s, "layers.%d.%s.weight", i, src), a->hidden, 0,
                "layers.%d.%s", i, dst);
}

static int bind_moe(judge *j, fam f, const arch *a, int i)
{
    char s[160];
    const char *blk = f == F_MIXTRAL ? "block_sparse_moe" : "mlp";
    if (bind(j, DEC, nm(s, sizeof s, "layers.%d.%s.gate.weight", i, blk), a->experts, a->hidden,
             "layers.%d.ffn.router", i) < 0)
        return -1;
    if (a->score_bias) {
        int64_t sh[1] = {a->experts};
        const st_tensor *t = need(j, nm(s, sizeof s, "layers.%d.mlp.gate.e_score_correction_bias", i),
                                  1, sh);
        if (!t)
            return -1;
        char name[96];
        snprintf(name, sizeof name, "layers.%d.ffn.router.score_bias", i);
        if (push_op(j, &j->p->obj[DEC], name, t, HF_WHOLE, 0, 0, 1, sh) < 0)
            return -1;
        j->p->obj[DEC].op[j->p->obj[DEC].n - 1].keep_f32 = 1;
    }
    for (int e = 0; e < a->experts; e++) {
        if (f == F_MIXTRAL) {
            static const char *const w[] = {"w1", "w3", "w2"}, *const c[] = {"gate", "up", "down"};
            for (int k = 0; k < 3; k++) {
                int64_t r = k == 2 ? a->hidden : a->expert_inter, cl = k == 2 ? a->expert_inter : a->hidden;
                if (bind(j, DEC, nm(s, sizeof s, "layers.%d.block_sparse_moe.experts.%d.%s.weight", i, e,
                                    w[k]), r, cl, "layers.%d.ffn.experts.%d.%s_proj", i, e, c[k]) < 0)
                    return -1;
            }
        } else {
            char src[64], dst[64];
            snprintf(src, sizeof src, "mlp.experts.%d", e);
            snprintf(dst, sizeof dst, "ffn.experts.%d", e);
            if (bind_mlp(j, a, i, src, dst, a->expert_inter) < 0)
                return -1;
        }
    }
    if (a->shared_inter) {
        if (bind_mlp(j, a, i, f == F_DEEPSEEK_V3 ? "mlp.shared_experts" : "mlp.shared_expert",
                     "ffn.shared", a->shared_inter) < 0)
            return -1;
        if (a->shared_gate && bind(j, DEC, nm(s, sizeof s, "layers.%d.mlp.shared_expert_gate.weight", i),
                                   1, a->hidden, "layers.%d.ffn.shared_gate", i) < 0)
            return -1;
    }
    return 0;
}

static int bind_mla(judge *j, const arch *a, int i)
{
    char s[160];
    int64_t qk = a->nope + a->rope_dim;
    if (a->q_lora) {
        if (bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.q_a_proj.weight", i), a->q_lora, a->hidden,
                 "layers.%d.attn.q_a_proj", i) < 0 ||
            bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.q_a_layernorm.weight", i), a->q_lora, 0,
                 "layers.%d.attn.q_a_norm", i) < 0 ||
            bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.q_b_proj.weight", i), a->heads * qk,
                 a->q_lora, "layers.%d.attn.q_b_proj", i) < 0)
            return -1;
    } else if (bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.q_proj.weight", i), a->heads * qk,
                    a->hidden, "layers.%d.attn.q_proj", i) < 0) {
        return -1;
    }
    if (bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.kv_a_proj_with_mqa.weight", i),
             a->kv_lora + a->rope_dim, a->hidden, "layers.%d.attn.kv_a_proj", i) < 0 ||
        bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.kv_a_layernorm.weight", i), a->kv_lora, 0,
             "layers.%d.attn.kv_a_norm", i) < 0 ||
        bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.kv_b_proj.weight", i),
             (int64_t)a->heads * (a->nope + a->v_dim), a->kv_lora, "layers.%d.attn.kv_b_proj", i) < 0 ||
        bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.o_proj.weight", i), a->hidden,
             (int64_t)a->heads * a->v_dim, "layers.%d.attn.o_proj", i) < 0)
        return -1;
    return 0;
}

/* Phi-3's fused qkv_proj and gate_up_proj, split by rows. */
static int bind_phi3(judge *j, const arch *a, int i)
{
    char s[160];
    int64_t q = (int64_t)a->heads * a->head_dim, kv = (int64_t)a->kv_heads * a->head_dim;
    int64_t fs[2] = {q + 2 * kv, a->hidden};
    const st_tensor *t = need(j, nm(s, sizeof s, "layers.%d.self_attn.qkv_proj.weight", i), 2, fs);
    if (!t)
        return -1;
    int64_t lo[3] = {0, q, q + kv}, hi[3] = {q, q + kv, q + 2 * kv};
    static const char *const qkv[] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) {
        char name[96];
        int64_t sh[2] = {hi[k] - lo[k], a->hidden};
        snprintf(name, sizeof name, "layers.%d.attn.%s_proj", i, qkv[k]);
        if (push_op(j, &j->p->obj[DEC], name, t, HF_ROWS, lo[k], hi[k], 2, sh) < 0)
            return -1;
    }
    if (bind(j, DEC, nm(s, sizeof s, "layers.%d.self_attn.o_proj.weight", i), a->hidden, q,
             "layers.%d.attn.o_proj", i) < 0)
        return -1;
    if (bind_norm(j, a, i, "post_attention_layernorm", "ffn_norm") < 0)
        return -1;
    int64_t gs[2] = {2 * (int64_t)a->inter, a->hidden};
    if (!(t = need(j, nm(s, sizeof s, "layers.%d.mlp.gate_up_proj.weight", i), 2, gs)))
        return -1;
    static const char *const gu[] = {"gate", "up"};
    for (int k = 0; k < 2; k++) {
        char name[96];
        int64_t sh[2] = {a->inter, a->hidden};
        snprintf(name, sizeof name, "layers.%d.ffn.%s_proj", i, gu[k]);
        if (push_op(j, &j->p->obj[DEC], name, t, HF_ROWS, k * (int64_t)a->inter,
                    (k + 1) * (int64_t)a->inter, 2, sh) < 0)
            return -1;
    }
    return bind(j, DEC, nm(s, sizeof s, "layers.%d.mlp.down_proj.weight", i), a->hidden, a->inter,
                "layers.%d.ffn.down_proj", i);
}

/* GPT-2: Conv1D weights [in, out] are transposed; c_attn's columns are q | k | v. */
static int bind_gpt2_layer(judge *j, const arch *a, int i)
{
    char s[160], name[96];
    int64_t E = a->hidden, I = a->inter;
    static const char *const ln[] = {"ln_1", "ln_2"}, *const dn[] = {"attn_norm", "ffn_norm"};
    int64_t cs[2] = {E, 3 * E}, bs[1] = {3 * E};
    const st_tensor *w = need(j, nm(s, sizeof s, "h.%d.attn.c_attn.weight", i), 2, cs);
    const st_tensor *b = w ? need(j, nm(s, sizeof s, "h.%d.attn.c_attn.bias", i), 1, bs) : NULL;
    if (!b)
        return -1;
    if (bind(j, DEC, nm(s, sizeof s, "h.%d.ln_1.weight", i), E, 0, "layers.%d.attn_norm", i) < 0 ||
        bind(j, DEC, nm(s, sizeof s, "h.%d.ln_1.bias", i), E, 0, "layers.%d.attn_norm.bias", i) < 0)
        return -1;
    static const char *const qkv[] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) {
        int64_t sh[2] = {E, E};
        snprintf(name, sizeof name, "layers.%d.attn.%s_proj", i, qkv[k]);
        if (push_op(j, &j->p->obj[DEC], name, w, HF_COLS_T, k * E, (k + 1) * E, 2, sh) < 0)
            return -1;
        snprintf(name, sizeof name, "layers.%d.attn.%s_proj.bias", i, qkv[k]);
        if (push_op(j, &j->p->obj[DEC], name, b, HF_ROWS, k * E, (k + 1) * E, 1, sh) < 0)
            return -1;
    }
    struct { const char *src; int64_t in, out; const char *dst; } conv[] = {
        {"attn.c_proj", E, E, "attn.o_proj"}, {"mlp.c_fc", E, I, "ffn.up_proj"},
        {"mlp.c_proj", I, E, "ffn.down_proj"},
    };
    for (int k = 0; k < 3; k++) {
        if (k == 1 && (bind(j, DEC, nm(s, sizeof s, "h.%d.%s.weight", i, ln[1]), E, 0, "layers.%d.%s", i,
                            dn[1]) < 0 ||
                       bind(j, DEC, nm(s, sizeof s, "h.%d.%s.bias", i, ln[1]), E, 0, "layers.%d.%s.bias",
                            i, dn[1]) < 0))
            return -1;
        int64_t src[2] = {conv[k].in, conv[k].out}, dst[2] = {conv[k].out, conv[k].in};
        const st_tensor *t = need(j, nm(s, sizeof s, "h.%d.%s.weight", i, conv[k].src), 2, src);
        if (!t)
            return -1;
        snprintf(name, sizeof name, "layers.%d.%s", i, conv[k].dst);
        if (push_op(j, &j->p->obj[DEC], name, t, HF_T, 0, 0, 2, dst) < 0)
            return -1;
        if (bind(j, DEC, nm(s, sizeof s, "h.%d.%s.bias", i, conv[k].src), conv[k].out, 0,
                 "layers.%d.%s.bias", i, conv[k].dst) < 0)
            return -1;
    }
    return 0;
}

static int gpt2_keys(judge *j, arch *a)
{
    long inner;
    if (getpos(j, "n_embd", REQUIRED, &a->hidden) < 0 || getpos(j, "n_layer", REQUIRED, &a->layers) < 0 ||
        getpos(j, "n_head", REQUIRED, &a->heads) < 0 || getpos(j, "vocab_size", REQUIRED, &a->vocab) < 0 ||
        getpos(j, "n_positions", 1024, &a->ctx) < 0 || geti(j, "n_inner", 0, &inner) < 0 ||
        getposd(j, "layer_norm_epsilon", 1e-5, &a->eps) < 0 || act_key(j, a, "activation_function",
                                                                    "gelu_new") < 0)
        return -1;
    if (a->layers > 4096)
        return bad_type(j, "n_layer", "at most 4096");
    if (inner < 0 || inner > DIM_MAX || (inner == 0 && has(j, "n_inner")))
        return bad_type(j, "n_inner", "a positive integer or null");
    a->inter = inner ? (int)inner : 4 * a->hidden;
    a->kv_heads = a->heads;
    a->head_dim = a->hidden / a->heads;
    int scale_w;
    if (getb(j, "scale_attn_weights", 1, &scale_w) < 0 ||
        expect_false(j, "scale_attn_by_inverse_layer_idx") < 0)
        return -1;
    a->scale = scale_w ? 1.0 / sqrt((double)a->head_dim) : 1.0;
    const cJSON *nctx = peek(j, "n_ctx");
    if (nctx && !cJSON_IsNull(nctx) && !(cJSON_IsNumber(nctx) && nctx->valuedouble == a->ctx))
        return refuse(j, "n_ctx", key(j, "n_ctx"));
    a->norm_layer = a->norm_bias = a->qkv_bias = a->out_bias = a->ffn_bias = 1;
    a->gated = 0;
    a->learned_pos = 1;
    a->rope = 0;
    return 0;
}

/* Sliding windows per layer (0 = full attention). */
static int windows(judge *j, fam f, arch *a)
{
    long w = 0;
    if (f == F_LLAMA || f == F_GPT2 || f == F_DEEPSEEK_V3 || f == F_GEMMA)
        return 0;
    if (f == F_QWEN2 || f == F_QWEN2_MOE) {
        int use;
        long mwl;
        if (getb(j, "use_sliding_window", 0, &use) < 0)
            return -1;
        const cJSON *lt = key(j, "layer_types");
        if (lt && !cJSON_IsNull(lt) && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != a->layers))
            return bad_type(j, "layer_types", "a list with one entry per layer");
        if (!use) {
            /* sliding_window / max_window_layers stay declaration-only */
            const cJSON *t;
            cJSON_ArrayForEach(t, lt) if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention"))
                return refuse(j, "layer_types", t);
            return 0;
        }
        if (geti(j, "sliding_window", peek(j, "sliding_window") ? 0 : a->window_default, &w) < 0 ||
            geti(j, "max_window_layers", 0, &mwl) < 0)
            return -1;
        if (w <= 0 || w > DIM_MAX)
            return bad_type(j, "sliding_window", "a positive integer when use_sliding_window is set");
        for (int i = 0; i < a->layers; i++) {
            int on = i >= mwl;
            if (cJSON_IsArray(lt)) {
                const cJSON *t = cJSON_GetArrayItem(lt, i);
                on = cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0;
            }
            if (cJSON_IsArray(lt) && !on && (!cJSON_IsString(cJSON_GetArrayItem(lt, i)) ||
                                             strcmp(cJSON_GetArrayItem(lt, i)->valuestring, "full_attention")))
                return refuse(j, "layer_types", cJSON_GetArrayItem(lt, i));
            a->window[i] = on ? (int)w : 0;
        }
        return 0;
    }
    /* Absent: the class default; null: no window. */
    if (geti(j, "sliding_window", peek(j, "sliding_window") ? 0 : a->window_default, &w) < 0)
        return -1;
    if (w < 0 || w > DIM_MAX || (w == 0 && has(j, "sliding_window")))
        return bad_type(j, "sliding_window", "a positive integer or null");
    if (f == F_GEMMA2) {
        const cJSON *lt = key(j, "layer_types");
        if (lt && !cJSON_IsNull(lt) && (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != a->layers))
            return bad_type(j, "layer_types", "a list with one entry per layer");
        for (int i = 0; i < a->layers; i++) {
            int on = i % 2 == 0;
            if (cJSON_IsArray(lt)) {
                const cJSON *t = cJSON_GetArrayItem(lt, i);
                if (!cJSON_IsString(t) || (strcmp(t->valuestring, "sliding_attention") != 0 &&
                                           strcmp(t->valuestring, "full_attention") != 0))
                    return refuse(j, "layer_types", t);
                on = strcmp(t->valuestring, "sliding_attention") == 0;
            }
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
    if (f == F_MIXTRAL) {
        if (getpos(j, "num_local_experts", REQUIRED, &a->experts) < 0 ||
            getpos(j, "num_experts_per_tok", 2, &a->top_k) < 0)
            return -1;
        a->expert_inter = a->inter;
        a->normalise = 1;
        for (int i = 0; i < a->layers; i++)
            a->moe[i] = 1;
    } else if (f == F_QWEN2_MOE) {
        int step = 1;
        if (getpos(j, "num_experts", REQUIRED, &a->experts) < 0 ||
            getpos(j, "num_experts_per_tok", REQUIRED, &a->top_k) < 0 ||
            getpos(j, "moe_intermediate_size", REQUIRED, &a->expert_inter) < 0 ||
            getpos(j, "decoder_sparse_step", 1, &step) < 0 ||
            getb(j, "norm_topk_prob", 0, &a->normalise) < 0)
            return -1;
        long si;
        if (geti(j, "shared_expert_intermediate_size", 0, &si) < 0)
            return -1;
        if (si < 0 || si > DIM_MAX)
            return bad_type(j, "shared_expert_intermediate_size", "a non-negative integer");
        a->shared_inter = (int)si;
        a->shared_gate = si > 0;
        const cJSON *only = key(j, "mlp_only_layers");
        if (only && !cJSON_IsNull(only) && !cJSON_IsArray(only))
            return bad_type(j, "mlp_only_layers", "a list of layer numbers");
        for (int i = 0; i < a->layers; i++) {
            int dense = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, only) dense |= cJSON_IsNumber(e) && e->valuedouble == i;
            a->moe[i] = !dense && (i + 1) % step == 0;
        }
    } else {
        int nshared = 1, first;
        if (getpos(j, "n_routed_experts", REQUIRED, &a->experts) < 0 ||
            getpos(j, "num_experts_per_tok", REQUIRED, &a->top_k) < 0 ||
            getpos(j, "moe_intermediate_size", REQUIRED, &a->expert_inter) < 0 ||
            getpos(j, "n_group", 1, &a->n_group) < 0 || getpos(j, "topk_group", 1, &a->topk_group) < 0 ||
            getb(j, "norm_topk_prob", 1, &a->normalise) < 0 ||
            getposd(j, "routed_scaling_factor", 1.0, &a->routed_scaling) < 0 ||
            getpos(j, "n_shared_experts", 1, &nshared) < 0)
            return -1;
        long fk;
        if (geti(j, "first_k_dense_replace", 0, &fk) < 0)
            return -1;
        first = (int)(fk < 0 ? 0 : fk > a->layers ? a->layers : fk);
        if (expect_str(j, "scoring_func", "sigmoid") < 0 || expect_num(j, "moe_layer_freq", 1) < 0)
            return -1;
        const cJSON *tm = peek(j, "topk_method");
        if (tm && !cJSON_IsNull(tm) && !(cJSON_IsString(tm) && strcmp(tm->valuestring, "noaux_tc") == 0))
            return refuse(j, "topk_method", key(j, "topk_method"));
        if (a->experts % a->n_group || a->topk_group > a->n_group)
            return vx_errf(j->err, VX_EFORMAT, "config.json: n_routed_experts %d, n_group %d and "
                           "topk_group %d do not form groups", a->experts, a->n_group, a->topk_group);
        a->sigmoid = a->score_bias = 1;
        if ((long)a->expert_inter * nshared > DIM_MAX)
            return bad_type(j, "n_shared_experts", "small enough for a shared MLP width within 2^28");
        a->shared_inter = a->expert_inter * nshared;
        for (int i = 0; i < a->layers; i++)
            a->moe[i] = i >= first;
    }
    if (f != F_DEEPSEEK_V3) {
        a->n_group = a->topk_group = 1;
        a->routed_scaling = 1.0;
    }
    if (a->top_k > a->experts)
        return bad_type(j, "num_experts_per_tok", "at most the number of experts");
    return 0;
}

static int mla_keys(judge *j, arch *a)
{
    long ql;
    if (geti(j, "q_lora_rank", 0, &ql) < 0 || getpos(j, "kv_lora_rank", REQUIRED, &a->kv_lora) < 0 ||
        getpos(j, "qk_nope_head_dim", REQUIRED, &a->nope) < 0 ||
        getpos(j, "qk_rope_head_dim", REQUIRED, &a->rope_dim) < 0 ||
        getpos(j, "v_head_dim", REQUIRED, &a->v_dim) < 0 ||
        getb(j, "rope_interleave", 1, &a->interleaved) < 0 || expect_false(j, "attention_bias") < 0)
        return -1;
    if (ql < 0 || ql > DIM_MAX)
        return bad_type(j, "q_lora_rank", "a positive integer or null");
    a->q_lora = (int)ql;
    a->mla = 1;
    int qk = a->nope + a->rope_dim;
    if (expect_num(j, "qk_head_dim", qk) < 0 || expect_num(j, "head_dim", a->rope_dim) < 0)
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
    int rc = -1;
    cJSON *special = cJSON_CreateObject();
    if (f == F_GPT2) {
        if (gpt2_keys(j, &a) < 0)
            goto out;
    } else {
        if (geometry(j, &a) < 0 || getposd(j, "rms_norm_eps", fi->eps, &a.eps) < 0)
            goto out;
        a.rotary_dim = a.head_dim;
        a.scale = 1.0 / sqrt((double)a.head_dim);
        if (f == F_DEEPSEEK_V3 && mla_keys(j, &a) < 0)
            goto out;
        if (rope_keys(j, &a) < 0)
            goto out;
        if (f == F_GEMMA || f == F_GEMMA2) {
            const char *k = has(j, "hidden_activation") ? "hidden_activation" : "hidden_act";
            if (act_key(j, &a, k, "gelu_pytorch_tanh") < 0)
                goto out;
        } else if (act_key(j, &a, "hidden_act", "silu") < 0) {
            goto out;
        }
    }
    if (!(a.window = calloc((size_t)a.layers, sizeof *a.window)) ||
        !(a.moe = calloc((size_t)a.layers, sizeof *a.moe))) {
        vx_errf(j->err, VX_ENOMEM, "admission: out of memory");
        goto out;
    }
    if (windows(j, f, &a) < 0)
        goto out;
    if ((f == F_MIXTRAL || f == F_QWEN2_MOE || f == F_DEEPSEEK_V3) && moe_keys(j, f, &a) < 0)
        goto out;

    /* Biases. */
    if (f == F_LLAMA || f == F_PHI3 || f == F_GEMMA || f == F_GEMMA2) {
        int ab;
        if (getb(j, "attention_bias", 0, &ab) < 0)
            goto out;
        a.qkv_bias = a.out_bias = ab;
        if ((f == F_PHI3 || f == F_GEMMA || f == F_GEMMA2) && ab) {
            refuse(j, "attention_bias", key(j, "attention_bias"));
            goto out;
        }
        if (expect_false(j, "mlp_bias") < 0)
            goto out;
    }
    if (f == F_QWEN2 || f == F_QWEN2_MOE) {
        if (getb(j, "qkv_bias", 1, &a.qkv_bias) < 0)
            goto out;
    }

    /* Gemma. */
    if (f == F_GEMMA || f == F_GEMMA2) {
        vx_dtype dt = VX_F32;
        if (model_dtype(j, &dt) < 0)
            goto out;
        float s = sqrtf((float)a.hidden);
        a.emb_scale = dt == VX_BF16 ? vx_bf16_to_f32(vx_f32_to_bf16(s))
                    : dt == VX_F16 ? vx_f16_to_f32(vx_f32_to_f16(s)) : s;
        a.weight_offset = 1.0;
    }
    if (f == F_GEMMA2) {
        double qs;
        if (getposd(j, "attn_logit_softcapping", 0, &a.attn_softcap) < 0 ||
            getposd(j, "final_logit_softcapping", 0, &a.final_softcap) < 0 ||
            getposd(j, "query_pre_attn_scalar", a.head_dim, &qs) < 0)
            goto out;
        a.scale = 1.0 / sqrt(qs);
        a.post_attn = a.post_ffn = 1;
    }
    if (getb(j, "tie_word_embeddings", fi->tied, &a.tied) < 0 || check_defaults(j) < 0 ||
        special_tokens(j, gen, a.vocab, special) < 0)
        goto out;
    cJSON_AddBoolToObject(special, "add_bos", adds_bos(tok, tokcfg));

    /* Tensors. */
    j->p->num_layers = a.layers;
    j->p->hidden = a.hidden;
    j->p->vocab = a.vocab;
    if (f == F_GPT2) {
        if (bind(j, EMB, "wte.weight", a.vocab, a.hidden, "weight") < 0 ||
            bind(j, EMB, "wpe.weight", a.ctx, a.hidden, "positions") < 0)
            goto out;
    } else if (bind(j, EMB, "embed_tokens.weight", a.vocab, a.hidden, "weight") < 0) {
        goto out;
    }
    for (int i = 0; i < a.layers; i++) {
        if (vx_cancel_flag) {
            vx_errf(j->err, VX_ECANCEL, "admission: cancelled");
            goto out;
        }
        if (f == F_GPT2) {
            if (bind_gpt2_layer(j, &a, i) < 0)
                goto out;
            continue;
        }
        if (bind_norm(j, &a, i, "input_layernorm", "attn_norm") < 0)
            goto out;
        if (f == F_PHI3) {
            if (bind_phi3(j, &a, i) < 0)
                goto out;
            continue;
        }
        if ((a.mla ? bind_mla(j, &a, i) : bind_attention(j, &a, i)) < 0)
            goto out;
        if (f == F_GEMMA2) {
            if (bind_norm(j, &a, i, "post_attention_layernorm", "post_attn_norm") < 0 ||
                bind_norm(j, &a, i, "pre_feedforward_layernorm", "ffn_norm") < 0 ||
                bind_norm(j, &a, i, "post_feedforward_layernorm", "post_ffn_norm") < 0)
                goto out;
        } else if (bind_norm(j, &a, i, "post_attention_layernorm", "ffn_norm") < 0) {
            goto out;
        }
        if (a.moe[i] ? bind_moe(j, f, &a, i) < 0 : bind_mlp(j, &a, i, "mlp", "ffn", a.inter) < 0)
            goto out;
    }
    if (f == F_GPT2) {
        if (bind(j, OUT, "ln_f.weight", a.hidden, 0, "final_norm") < 0 ||
            bind(j, OUT, "ln_f.bias", a.hidden, 0, "final_norm.bias") < 0)
            goto out;
    } else if (bind(j, OUT, "norm.weight", a.hidden, 0, "final_norm") < 0) {
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
        int r = bind(j, OUT, "lm_head.weight", a.vocab, a.hidden, "lm_head");
        j->prefix = save;
        if (r < 0)
            goto out;
    }
    j->p->component = emit(&a, special);
    special = NULL;
    a.rope_scaling = NULL;
    rc = 0;
out:
    cJSON_Delete(special);
    cJSON_Delete(a.rope_scaling);
    free(a.window);
    free(a.moe);
    return rc;
}

/* ---------------------------------------------------------------- entry */

/* Parse dir/file into *out; an absent optional file gives 0 with *out NULL. */
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
    int rc = vx_json_parse(file, text, n, out, err);
    free(text);
    return rc;
}

void hf_plan_free(hf_plan *p)
{
    if (!p)
        return;
    cJSON_Delete(p->component);
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
                                             "target.output_head"};
    static const char *const kinds[HF_NOBJ] = {"embedding", "decoder_stack", "output_head"};
    for (int i = 0; i < HF_NOBJ; i++) {
        p->obj[i].id = ids[i];
        p->obj[i].kind = kinds[i];
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
    judge j = {.cfg = cfg, .m = m, .p = p, .err = err, .family = "?"};
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
    const cJSON *mt = key(&j, "model_type");
    if (!cJSON_IsString(mt)) {
        vx_errf(err, VX_EMISSING, "config.json: key 'model_type' is missing; lql admits llama, "
                "mistral, qwen2, gemma, gemma2, gpt2, phi3, mixtral, qwen2_moe, deepseek_v3");
        goto out;
    }
    int fi = -1;
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (strcmp(mt->valuestring, families[i].model_type) == 0)
            fi = (int)i;
    if (fi < 0) {
        vx_errf(err, VX_EUNSUPPORTED, "config.json: model_type '%s' is not admitted; lql admits "
                "llama, mistral, qwen2, gemma, gemma2, gpt2, phi3, mixtral, qwen2_moe, deepseek_v3",
                mt->valuestring);
        goto out;
    }
    snprintf(p->family, sizeof p->family, "%s", mt->valuestring);
    j.family = p->family;
    fam f = families[fi].f;
    if (f == F_GPT2)
        j.prefix = st_find(m, "transformer.wte.weight") ? "transformer." : "";
    else
        j.prefix = "model.";
    if (build(&j, &families[fi], gen, tok, tokcfg) < 0)
        goto out;
    if (judge_rest(&j, B(f), decl_family, sizeof decl_family / sizeof *decl_family) < 0)
        goto out;
    int tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p->component, "execution"),
                                         "lm_head"), "tied"));
    for (size_t i = 0; i < st_count(m); i++) {
        const st_tensor *t = st_at(m, i);
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
