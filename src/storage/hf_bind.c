/*
 * hf_bind.c — binding checkpoint tensors to canonical operand names (CONTAINER.md):
 * every source tensor is found by its Hugging Face name, its shape checked against what
 * config.json implies, and recorded with the slice or transpose that turns it into the
 * operand (fused Phi-3 rows, GPT-2 Conv1D columns). A tensor that binds is marked, so the
 * admission can refuse any checkpoint tensor left over.
 */
#include "hf_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hf_push_op(judge *j, hf_object *o, const char *name, const st_tensor *t, hf_xform xf,
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

static const st_tensor *need(judge *j, const char *src, int ndim, const int64_t *want, int raw);

/* Find the checkpoint tensor `src` (prefix applied) and check its shape is `want`. */
const st_tensor *hf_need(judge *j, const char *src, int ndim, const int64_t *want)
{
    return need(j, src, ndim, want, 0);
}

/* The same for packed bytes (u8: MXFP4 blocks and scales). */
const st_tensor *hf_need_u8(judge *j, const char *src, int ndim, const int64_t *want)
{
    return need(j, src, ndim, want, 1);
}

static const st_tensor *need(judge *j, const char *src, int ndim, const int64_t *want, int raw)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", j->prefix, src);
    const st_tensor *t = st_find(j->m, full);
    if (!t) {
        vx_errf(j->err, VX_EMISSING, "checkpoint: tensor '%s' is missing (family '%s')", full,
                j->family);
        return NULL;
    }
    if (raw ? t->dtype != VX_U8 : t->dtype != VX_F32 && t->dtype != VX_F16 && t->dtype != VX_BF16) {
        vx_errf(j->err, VX_EUNSUPPORTED, "checkpoint: tensor '%s' has dtype %s; %s", full,
                vx_dtype_name(t->dtype) ? vx_dtype_name(t->dtype) : "u8",
                raw ? "packed MXFP4 blocks and scales must be U8" : "weights must be F32, F16 or BF16");
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


/* Bind a whole source tensor of shape {a} or {a, b} (b = 0 for 1-D) to an operand. */
int hf_bind(judge *j, int obj, const char *src, int64_t a, int64_t b, const char *fmt, ...)
{
    int64_t s[2] = {a, b};
    int nd = b ? 2 : 1;
    const st_tensor *t = hf_need(j, src, nd, s);
    if (!t)
        return -1;
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return hf_push_op(j, &j->p->obj[obj], name, t, HF_WHOLE, 0, 0, nd, s);
}

/* Source name built printf-style for layer-indexed tensors. */
const char *hf_nm(char *buf, size_t n, const char *fmt, ...)
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
    if (o->xf == HF_GATHER) {
        cJSON_AddNumberToObject(b, "expert", o->expert);
        cJSON *r = cJSON_AddArrayToObject(b, o->transpose ? "cols" : "rows");
        cJSON_AddItemToArray(r, cJSON_CreateNumber((double)o->lo));
        cJSON_AddItemToArray(r, cJSON_CreateNumber((double)o->hi));
        cJSON_AddNumberToObject(b, "step", o->step);
        if (o->scales)
            cJSON_AddStringToObject(b, "scales", o->scales->name);
    }
    if (o->xf == HF_T || o->xf == HF_COLS_T || (o->xf == HF_GATHER && o->transpose))
        cJSON_AddBoolToObject(b, "transpose", 1);
    return b;
}

/* Llama-style decoder tensors (attention, norms, dense MLP); MoE and MLA layers are
 * bound by their own helpers. */
int hf_bind_attention(judge *j, const arch *a, int i)
{
    char s[160];
    int64_t q = (int64_t)a->heads * a->head_dim, kv = (int64_t)a->kv_heads * a->head_dim;
    static const char *const qkv[] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) {
        /* a sigmoid output gate rides in q_proj: per head [query | gate] rows */
        int64_t rows = k ? kv : a->attn_gate ? 2 * q : q;
        if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.%s_proj.weight", i, qkv[k]), rows,
                 a->hidden, "layers.%d.attn.%s_proj", i, qkv[k]) < 0)
            return -1;
        if (a->qkv_bias && hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.%s_proj.bias", i, qkv[k]),
                                rows, 0, "layers.%d.attn.%s_proj.bias", i, qkv[k]) < 0)
            return -1;
    }
    if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.o_proj.weight", i), a->hidden, q,
             "layers.%d.attn.o_proj", i) < 0)
        return -1;
    if (a->out_bias && hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.o_proj.bias", i), a->hidden,
                            0, "layers.%d.attn.o_proj.bias", i) < 0)
        return -1;
    return 0;
}

/* q_norm / k_norm: [head_dim] per head, or the whole projection's width. */
int hf_bind_qk_norm(judge *j, const arch *a, int i)
{
    char s[160];
    int per = strcmp(a->qk_norm, "head") == 0;
    int64_t q = per ? a->head_dim : (int64_t)a->heads * a->head_dim;
    int64_t k = per ? a->head_dim : (int64_t)a->kv_heads * a->head_dim;
    if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.q_norm.weight", i), q, 0,
                "layers.%d.attn.q_norm", i) < 0)
        return -1;
    return hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.k_norm.weight", i), k, 0,
                   "layers.%d.attn.k_norm", i);
}

/* One operand gathered from expert e of a stacked source (HF_GATHER): `rows` rows (or, with
 * transpose, columns) lo, lo + step, … of width `cols`; cols 0 gives a vector. */
static int gather(judge *j, const char *name, const st_tensor *t, const st_tensor *sc, int e,
                  int64_t lo, int step, int transpose, int64_t rows, int64_t cols)
{
    int64_t sh[2] = {rows, cols};
    hf_object *o = &j->p->obj[j->dec];
    if (hf_push_op(j, o, name, t, HF_GATHER, lo, lo + rows * step, cols ? 2 : 1, sh) < 0)
        return -1;
    hf_operand *x = &o->op[o->n - 1];
    x->expert = e;
    x->step = step;
    x->transpose = transpose;
    x->scales = sc;
    if (sc)
        j->bound[sc - st_at(j->m, 0)] = 1;
    return 0;
}

/* GPT-OSS experts, stacked per layer: gate_up_proj interleaves gate (even) and up (odd)
 * along its 2I axis, biases too. Packed (a->mxfp4): MXFP4 blocks [E, out, in/32, 16] with
 * scales [E, out, in/32], matrices [out, in], kept MXFP4 (source-exact, nibbles reordered);
 * unpacked: gate_up_proj [E, H, 2I] and down_proj [E, I, H] used as x @ W, transposed. */
int hf_bind_gpt_oss_moe(judge *j, const arch *a, int i)
{
    char s[160], nm[160];
    const int64_t E = a->experts, H = a->hidden, I = a->expert_inter;
    if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.mlp.router.weight", i), E, H,
                "layers.%d.ffn.router", i) < 0 ||
        hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.mlp.router.bias", i), E, 0,
                "layers.%d.ffn.router.bias", i) < 0)
        return -1;
    const int64_t gb[2] = {E, 2 * I}, db[2] = {E, H};
    const st_tensor *gub = hf_need(j, hf_nm(s, sizeof s, "layers.%d.mlp.experts.gate_up_proj_bias", i), 2, gb);
    const st_tensor *dnb = gub ? hf_need(j, hf_nm(s, sizeof s, "layers.%d.mlp.experts.down_proj_bias", i), 2, db) : NULL;
    if (!dnb)
        return -1;
    const st_tensor *gu, *dn, *gus = NULL, *dns = NULL;
    if (a->mxfp4) {
        if (H % 32 || I % 32)
            return vx_errf(j->err, VX_EFORMAT, "config.json: hidden_size %lld and intermediate_size %lld "
                           "must be multiples of the MXFP4 block (32) (family '%s')", (long long)H,
                           (long long)I, j->family);
        const int64_t gw[4] = {E, 2 * I, H / 32, 16}, gs[3] = {E, 2 * I, H / 32};
        const int64_t dw[4] = {E, H, I / 32, 16}, ds[3] = {E, H, I / 32};
        if (!(gu = hf_need_u8(j, hf_nm(s, sizeof s, "layers.%d.mlp.experts.gate_up_proj_blocks", i), 4, gw)) ||
            !(gus = hf_need_u8(j, hf_nm(s, sizeof s, "layers.%d.mlp.experts.gate_up_proj_scales", i), 3, gs)) ||
            !(dn = hf_need_u8(j, hf_nm(s, sizeof s, "layers.%d.mlp.experts.down_proj_blocks", i), 4, dw)) ||
            !(dns = hf_need_u8(j, hf_nm(s, sizeof s, "layers.%d.mlp.experts.down_proj_scales", i), 3, ds)))
            return -1;
    } else {
        const int64_t gw[3] = {E, H, 2 * I}, dw[3] = {E, I, H};
        if (!(gu = hf_need(j, hf_nm(s, sizeof s, "layers.%d.mlp.experts.gate_up_proj", i), 3, gw)) ||
            !(dn = hf_need(j, hf_nm(s, sizeof s, "layers.%d.mlp.experts.down_proj", i), 3, dw)))
            return -1;
    }
    const int t = !a->mxfp4;
    for (int e = 0; e < E; e++) {
        static const char *const part[] = {"gate_proj", "up_proj"};
        for (int k = 0; k < 2; k++) {
            snprintf(nm, sizeof nm, "layers.%d.ffn.experts.%d.%s", i, e, part[k]);
            if (gather(j, nm, gu, gus, e, k, 2, t, I, H) < 0)
                return -1;
            snprintf(nm, sizeof nm, "layers.%d.ffn.experts.%d.%s.bias", i, e, part[k]);
            if (gather(j, nm, gub, NULL, e, k, 2, 0, I, 0) < 0)
                return -1;
        }
        snprintf(nm, sizeof nm, "layers.%d.ffn.experts.%d.down_proj", i, e);
        if (gather(j, nm, dn, dns, e, 0, 1, t, H, I) < 0)
            return -1;
        snprintf(nm, sizeof nm, "layers.%d.ffn.experts.%d.down_proj.bias", i, e);
        if (gather(j, nm, dnb, NULL, e, 0, 1, 0, H, 0) < 0)
            return -1;
    }
    return 0;
}

int hf_bind_mlp(judge *j, const arch *a, int i, const char *src, const char *dst, int inter)
{
    char s[160];
    static const char *const gu[] = {"gate", "up"};
    for (int k = 0; k < 2; k++)
        if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.%s.%s_proj.weight", i, src, gu[k]), inter,
                 a->hidden, "layers.%d.%s.%s_proj", i, dst, gu[k]) < 0)
            return -1;
    return hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.%s.down_proj.weight", i, src), a->hidden, inter,
                "layers.%d.%s.down_proj", i, dst);
}

int hf_bind_norm(judge *j, const arch *a, int i, const char *src, const char *dst)
{
    char s[160];
    return hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.%s.weight", i, src), a->hidden, 0,
                "layers.%d.%s", i, dst);
}

int hf_bind_moe(judge *j, fam f, const arch *a, int i)
{
    char s[160];
    const char *blk = f == F_MIXTRAL ? "block_sparse_moe" : "mlp";
    if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.%s.gate.weight", i, blk), a->experts, a->hidden,
             "layers.%d.ffn.router", i) < 0)
        return -1;
    if (a->score_bias) {
        int64_t sh[1] = {a->experts};
        const st_tensor *t = hf_need(j, hf_nm(s, sizeof s, "layers.%d.mlp.gate.e_score_correction_bias", i),
                                  1, sh);
        if (!t)
            return -1;
        char name[96];
        snprintf(name, sizeof name, "layers.%d.ffn.router.score_bias", i);
        if (hf_push_op(j, &j->p->obj[j->dec], name, t, HF_WHOLE, 0, 0, 1, sh) < 0)
            return -1;
        j->p->obj[j->dec].op[j->p->obj[j->dec].n - 1].keep_f32 = 1;
    }
    for (int e = 0; e < a->experts; e++) {
        if (f == F_MIXTRAL) {
            static const char *const w[] = {"w1", "w3", "w2"}, *const c[] = {"gate", "up", "down"};
            for (int k = 0; k < 3; k++) {
                int64_t r = k == 2 ? a->hidden : a->expert_inter, cl = k == 2 ? a->expert_inter : a->hidden;
                if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.block_sparse_moe.experts.%d.%s.weight", i, e,
                                    w[k]), r, cl, "layers.%d.ffn.experts.%d.%s_proj", i, e, c[k]) < 0)
                    return -1;
            }
        } else {
            char src[64], dst[64];
            snprintf(src, sizeof src, "mlp.experts.%d", e);
            snprintf(dst, sizeof dst, "ffn.experts.%d", e);
            if (hf_bind_mlp(j, a, i, src, dst, a->expert_inter) < 0)
                return -1;
        }
    }
    if (a->shared_inter) {
        if (hf_bind_mlp(j, a, i, f == F_DEEPSEEK_V3 ? "mlp.shared_experts" : "mlp.shared_expert",
                     "ffn.shared", a->shared_inter) < 0)
            return -1;
        if (a->shared_gate && hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.mlp.shared_expert_gate.weight", i),
                                   1, a->hidden, "layers.%d.ffn.shared_gate", i) < 0)
            return -1;
    }
    return 0;
}

int hf_bind_mla(judge *j, const arch *a, int i)
{
    char s[160];
    int64_t qk = a->nope + a->rope_dim;
    if (a->q_lora) {
        if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.q_a_proj.weight", i), a->q_lora, a->hidden,
                 "layers.%d.attn.q_a_proj", i) < 0 ||
            hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.q_a_layernorm.weight", i), a->q_lora, 0,
                 "layers.%d.attn.q_a_norm", i) < 0 ||
            hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.q_b_proj.weight", i), a->heads * qk,
                 a->q_lora, "layers.%d.attn.q_b_proj", i) < 0)
            return -1;
    } else if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.q_proj.weight", i), a->heads * qk,
                    a->hidden, "layers.%d.attn.q_proj", i) < 0) {
        return -1;
    }
    if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.kv_a_proj_with_mqa.weight", i),
             a->kv_lora + a->rope_dim, a->hidden, "layers.%d.attn.kv_a_proj", i) < 0 ||
        hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.kv_a_layernorm.weight", i), a->kv_lora, 0,
             "layers.%d.attn.kv_a_norm", i) < 0 ||
        hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.kv_b_proj.weight", i),
             (int64_t)a->heads * (a->nope + a->v_dim), a->kv_lora, "layers.%d.attn.kv_b_proj", i) < 0 ||
        hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.o_proj.weight", i), a->hidden,
             (int64_t)a->heads * a->v_dim, "layers.%d.attn.o_proj", i) < 0)
        return -1;
    return 0;
}

/* Phi-3's fused qkv_proj and gate_up_proj, split by rows. */
int hf_bind_phi3(judge *j, const arch *a, int i)
{
    char s[160];
    int64_t q = (int64_t)a->heads * a->head_dim, kv = (int64_t)a->kv_heads * a->head_dim;
    int64_t fs[2] = {q + 2 * kv, a->hidden};
    const st_tensor *t = hf_need(j, hf_nm(s, sizeof s, "layers.%d.self_attn.qkv_proj.weight", i), 2, fs);
    if (!t)
        return -1;
    int64_t lo[3] = {0, q, q + kv}, hi[3] = {q, q + kv, q + 2 * kv};
    static const char *const qkv[] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) {
        char name[96];
        int64_t sh[2] = {hi[k] - lo[k], a->hidden};
        snprintf(name, sizeof name, "layers.%d.attn.%s_proj", i, qkv[k]);
        if (hf_push_op(j, &j->p->obj[j->dec], name, t, HF_ROWS, lo[k], hi[k], 2, sh) < 0)
            return -1;
    }
    if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.self_attn.o_proj.weight", i), a->hidden, q,
             "layers.%d.attn.o_proj", i) < 0)
        return -1;
    if (hf_bind_norm(j, a, i, "post_attention_layernorm", "ffn_norm") < 0)
        return -1;
    int64_t gs[2] = {2 * (int64_t)a->inter, a->hidden};
    if (!(t = hf_need(j, hf_nm(s, sizeof s, "layers.%d.mlp.gate_up_proj.weight", i), 2, gs)))
        return -1;
    static const char *const gu[] = {"gate", "up"};
    for (int k = 0; k < 2; k++) {
        char name[96];
        int64_t sh[2] = {a->inter, a->hidden};
        snprintf(name, sizeof name, "layers.%d.ffn.%s_proj", i, gu[k]);
        if (hf_push_op(j, &j->p->obj[j->dec], name, t, HF_ROWS, k * (int64_t)a->inter,
                    (k + 1) * (int64_t)a->inter, 2, sh) < 0)
            return -1;
    }
    return hf_bind(j, j->dec, hf_nm(s, sizeof s, "layers.%d.mlp.down_proj.weight", i), a->hidden, a->inter,
                "layers.%d.ffn.down_proj", i);
}

/* GPT-2: Conv1D weights [in, out] are transposed; c_attn's columns are q | k | v. */
int hf_bind_gpt2_layer(judge *j, const arch *a, int i)
{
    char s[160], name[96];
    int64_t E = a->hidden, I = a->inter;
    static const char *const ln[] = {"ln_1", "ln_2"}, *const dn[] = {"attn_norm", "ffn_norm"};
    int64_t cs[2] = {E, 3 * E}, bs[1] = {3 * E};
    const st_tensor *w = hf_need(j, hf_nm(s, sizeof s, "h.%d.attn.c_attn.weight", i), 2, cs);
    const st_tensor *b = w ? hf_need(j, hf_nm(s, sizeof s, "h.%d.attn.c_attn.bias", i), 1, bs) : NULL;
    if (!b)
        return -1;
    if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "h.%d.ln_1.weight", i), E, 0, "layers.%d.attn_norm", i) < 0 ||
        hf_bind(j, j->dec, hf_nm(s, sizeof s, "h.%d.ln_1.bias", i), E, 0, "layers.%d.attn_norm.bias", i) < 0)
        return -1;
    static const char *const qkv[] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) {
        int64_t sh[2] = {E, E};
        snprintf(name, sizeof name, "layers.%d.attn.%s_proj", i, qkv[k]);
        if (hf_push_op(j, &j->p->obj[j->dec], name, w, HF_COLS_T, k * E, (k + 1) * E, 2, sh) < 0)
            return -1;
        snprintf(name, sizeof name, "layers.%d.attn.%s_proj.bias", i, qkv[k]);
        if (hf_push_op(j, &j->p->obj[j->dec], name, b, HF_ROWS, k * E, (k + 1) * E, 1, sh) < 0)
            return -1;
    }
    struct { const char *src; int64_t in, out; const char *dst; } conv[] = {
        {"attn.c_proj", E, E, "attn.o_proj"}, {"mlp.c_fc", E, I, "ffn.up_proj"},
        {"mlp.c_proj", I, E, "ffn.down_proj"},
    };
    for (int k = 0; k < 3; k++) {
        if (k == 1 && (hf_bind(j, j->dec, hf_nm(s, sizeof s, "h.%d.%s.weight", i, ln[1]), E, 0, "layers.%d.%s", i,
                            dn[1]) < 0 ||
                       hf_bind(j, j->dec, hf_nm(s, sizeof s, "h.%d.%s.bias", i, ln[1]), E, 0, "layers.%d.%s.bias",
                            i, dn[1]) < 0))
            return -1;
        int64_t src[2] = {conv[k].in, conv[k].out}, dst[2] = {conv[k].out, conv[k].in};
        const st_tensor *t = hf_need(j, hf_nm(s, sizeof s, "h.%d.%s.weight", i, conv[k].src), 2, src);
        if (!t)
            return -1;
        snprintf(name, sizeof name, "layers.%d.%s", i, conv[k].dst);
        if (hf_push_op(j, &j->p->obj[j->dec], name, t, HF_T, 0, 0, 2, dst) < 0)
            return -1;
        if (hf_bind(j, j->dec, hf_nm(s, sizeof s, "h.%d.%s.bias", i, conv[k].src), conv[k].out, 0,
                 "layers.%d.%s.bias", i, conv[k].dst) < 0)
            return -1;
    }
    return 0;
}
