/*
 * hf_int.h — declarations shared by the admission files, private to src/storage/hf_*.c:
 * hf_judge.c (config keys and their judgments), hf_surface.c (the execution surface),
 * hf_bind.c (checkpoint tensors to canonical operands) and hf_admit.c (the families).
 * Together they are the only code in lql that knows model families.
 */
#ifndef LQL_HF_INT_H
#define LQL_HF_INT_H

#include "hf_admit.h"

#include <cjson/cJSON.h>

#define NKEYS 256
/* Geometry values above this are refused: sums of two stay inside int, products are
 * formed in 64 bits. */
#define DIM_MAX (1L << 28)

#define REQUIRED (-2)            /* hf_geti / hf_getpos default: the key must be present */

typedef enum fam {
    F_LLAMA, F_MISTRAL, F_QWEN2, F_GEMMA, F_GEMMA2, F_GPT2, F_PHI3, F_MIXTRAL, F_QWEN2_MOE,
    F_DEEPSEEK_V3, F_QWEN3, F_QWEN3_MOE, F_OLMO2, F_GEMMA3, F_GPT_OSS, F_MAMBA2, F_GRANITE_HYBRID,
    F_QWEN3_NEXT
} fam;

/* Token mixer of a layer (arch.mixer[]). */
enum { MIX_ATTN = 0, MIX_MAMBA2 = 1, MIX_DELTANET = 2 };

#define B(f) (1u << (f))

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
    int dec;                     /* the object layer binders write: DEC, or MTP for the
                                  * auxiliary multi-token-prediction block */
    int quant_judged;            /* quantization_config was read and admitted by the family */
} judge;

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
    int no_pre_norms;                   /* OLMo-2: norms only on the branch outputs */
    const char *qk_norm;                /* NULL, "head" or "projection" */
    int sinks;                          /* learned attention sinks per head */
    int router_bias, expert_bias;       /* MoE router / expert MLP biases */
    double swiglu_alpha, swiglu_limit;  /* clamped SwiGLU experts (0: the ffn activation) */
    int mxfp4;                          /* experts packed as MXFP4 blocks + scales */
    int *window;                        /* per layer, 0 = none */
    double *layer_theta;                /* per layer: own unscaled rope base, 0 = the global rope */
    int *moe;                           /* per layer: 1 sparse */
    int mla;
    int q_lora, kv_lora, nope, rope_dim, v_dim;
    int experts, top_k, expert_inter, sigmoid, score_bias, n_group, topk_group, normalise;
    double routed_scaling;
    int shared_inter, shared_gate;
    int window_default;                 /* sliding_window when the key is absent */
    /* recurrent mixers and hybrids (hf_recur.c) */
    int *mixer;                         /* per layer: MIX_* */
    int no_ffn;                         /* layers have no channel mixer */
    int ssm_heads, ssm_head_dim, ssm_groups, ssm_state, ssm_conv, ssm_conv_bias, ssm_proj_bias;
    double ssm_dt_min, ssm_dt_max, ssm_eps;   /* dt_max INFINITY: unbounded */
    int dn_k_heads, dn_v_heads, dn_k_dim, dn_v_dim, dn_conv;
    double dn_eps;
    int attn_gate;                      /* per-head [query | gate] rows in q_proj, sigmoid */
    double residual_scale, logits_divisor;   /* 1 when the family has none */
} arch;

enum { EMB, DEC, OUT, MTP };     /* hf_plan.obj[] indices */

/* ---- hf_judge.c: reading a key marks it used (an execution key); errors name the key,
 * the value and the family, and every function returns 0 or -1 with j->err filled. ---- */
const cJSON *hf_key(judge *j, const char *k);
const cJSON *hf_peek(judge *j, const char *k);       /* look without judging */
int hf_has(judge *j, const char *k);                 /* present and not null */
int hf_refuse(judge *j, const char *k, const cJSON *v);
int hf_missing(judge *j, const char *k);
int hf_bad_type(judge *j, const char *k, const char *want);
int hf_geti(judge *j, const char *k, long def, long *out);
int hf_getpos(judge *j, const char *k, long def, int *out);
int hf_getd(judge *j, const char *k, double def, double *out);
int hf_getposd(judge *j, const char *k, double def, double *out);
int hf_getb(judge *j, const char *k, int def, int *out);
int hf_expect_false(judge *j, const char *k);
int hf_expect_num(judge *j, const char *k, double want);
int hf_expect_str(judge *j, const char *k, const char *want);
int hf_check_defaults(judge *j);
/* Every key not read is declaration-only (listed with its reason) or refused; famb is
 * B(family) for the family-specific list. */
int hf_judge_rest(judge *j, unsigned famb);

/* ---- hf_surface.c ---- */
int hf_act_key(judge *j, arch *a, const char *k, const char *def);
int hf_rope_keys(judge *j, arch *a);
int hf_model_dtype(judge *j, vx_dtype *out);
int hf_special_tokens(judge *j, const cJSON *gen, int vocab, cJSON *st);
int hf_adds_bos(const cJSON *tok, const cJSON *tokcfg);
/* Append one declared state region {name, dtype, shape, per_token} to a layer's list. */
void hf_state_region(cJSON *state, const char *name, const char *dtype, int per_token, int ndim,
                     const int64_t *shape);
/* The component JSON for a (consumes a->rope_scaling and special). */
cJSON *hf_emit(const arch *a, cJSON *special);

/* ---- hf_bind.c: each binder finds the checkpoint tensor (prefix applied), checks its
 * shape against the config, and appends the operand to the plan. ---- */
int hf_push_op(judge *j, hf_object *o, const char *name, const st_tensor *t, hf_xform xf,
               int64_t lo, int64_t hi, int ndim, const int64_t *shape);
const st_tensor *hf_need(judge *j, const char *src, int ndim, const int64_t *want);
int hf_bind(judge *j, int obj, const char *src, int64_t a, int64_t b, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
const char *hf_nm(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int hf_bind_attention(judge *j, const arch *a, int i);
int hf_bind_mlp(judge *j, const arch *a, int i, const char *src, const char *dst, int inter);
int hf_bind_qk_norm(judge *j, const arch *a, int i);
int hf_bind_gpt_oss_moe(judge *j, const arch *a, int i);
const st_tensor *hf_need_u8(judge *j, const char *src, int ndim, const int64_t *want);
int hf_bind_norm(judge *j, const arch *a, int i, const char *src, const char *dst);
int hf_bind_moe(judge *j, fam f, const arch *a, int i);
int hf_bind_mla(judge *j, const arch *a, int i);
int hf_bind_phi3(judge *j, const arch *a, int i);
int hf_bind_gpt2_layer(judge *j, const arch *a, int i);

/* ---- hf_recur.c: the recurrent token mixers (Mamba2 SSM, Gated DeltaNet) and the
 * families built on them. The *_keys functions read a family's configuration after the
 * per-layer arrays exist; the binders bind one layer's mixer; hf_emit_recur writes the
 * execution sections and hf_layer_state a layer's declared continuation state. ---- */
int hf_mamba2_geometry(judge *j, arch *a);
int hf_mamba2_keys(judge *j, arch *a);
int hf_granite_keys(judge *j, arch *a);
int hf_qwen3_next_keys(judge *j, arch *a);
int hf_bind_ssm(judge *j, const arch *a, int i, const char *src);
int hf_bind_deltanet(judge *j, const arch *a, int i);
int hf_bind_granite_moe(judge *j, const arch *a, int i);
void hf_emit_recur(cJSON *x, const arch *a);
/* The multi-token-prediction block (mtp.* tensors), when the checkpoint has one: bound into
 * object mtp.block and described as component "mtp" with an edge from the decoder. */
int hf_bind_mtp(judge *j, fam f, const arch *a, const cJSON *special);
void hf_layer_state(cJSON *state, const arch *a, int i);

/* ---- hf_export.c, shared with hf_gguf.c: export's refusals. ---- */
/* Refuse what no checkpoint format holds: bank shape, block-quantised tensors, and MXFP4
 * tensors unless mxfp4 (the Hugging Face export writes them back as blocks and scales). */
int hf_export_admissible(const vx_container *c, int mxfp4, const char *what, vx_err *err);

#endif
