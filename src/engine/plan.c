/*
 * plan.c — derive the op plan from a container's system graph and bind its operands.
 *
 * Everything comes from the primary component's `execution` surface and its explicit
 * `layers` list (docs/lql/CONTAINER.md). Every field the plan reads is validated; a value
 * the plan does not implement, or an execution field it does not know that is switched
 * on, is refused naming the field (and the layer). Every operand the plan will read is
 * looked up with vx_find and its shape checked against the geometry, so a forward pass
 * never meets a missing or mis-shaped tensor. Matrices stay borrowed views; only vectors
 * (norm weights with their offset added, biases) are copied to f32.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "engine_int.h"

#define OBJ_EMB "target.embedding"
#define OBJ_DEC "target.decoder_stack"
#define OBJ_OUT "target.output_head"

/* ---------------------------------------------------------------- JSON fields */

typedef struct ctx {
    eng_model *m;
    vx_err *err;
    const char *where;     /* "execution.attention" etc., for messages */
    int exact[3];          /* per object (embedding, stack, head): its bound representation
                            * has source authority, so block codecs multiply exactly */
    unsigned char *read;   /* per tensor of the container: an operation reads it */
} ctx;

static const cJSON *field(const cJSON *o, const char *k)
{
    return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static int is_null(const cJSON *v) { return !v || cJSON_IsNull(v); }

static int num(ctx *c, const cJSON *o, const char *k, double *out)
{
    const cJSON *v = field(o, k);
    *out = 0;
    if (!cJSON_IsNumber(v))
        return vx_errf(c->err, VX_EFORMAT, "system graph: %s.%s is missing or not a number",
                       c->where, k);
    /* cJSON reads 1e999 as infinity */
    if (!isfinite(v->valuedouble))
        return vx_errf(c->err, VX_EFORMAT, "system graph: %s.%s is not a finite number",
                       c->where, k);
    *out = v->valuedouble;
    return 0;
}

/* A number above zero (an epsilon, a scale): zero or less has no meaning the executor could
 * give it, and an epsilon of 0 divides a zero row by zero. */
static int posnum(ctx *c, const cJSON *o, const char *k, double *out)
{
    if (num(c, o, k, out)) return -1;
    if (!(*out > 0))
        return vx_errf(c->err, VX_EFORMAT, "system graph: %s.%s = %g is not positive", c->where,
                       k, *out);
    return 0;
}

/* A positive integer that fits comfortably in an int (geometry). */
static int posint(ctx *c, const cJSON *o, const char *k, int *out)
{
    double d;
    *out = 0;
    if (num(c, o, k, &d)) return -1;
    if (d < 1 || d > 1e9 || d != floor(d))
        return vx_errf(c->err, VX_EFORMAT, "system graph: %s.%s = %g is not a positive integer",
                       c->where, k, d);
    *out = (int)d;
    return 0;
}

/* A number or null (null -> 0). */
static int optnum(ctx *c, const cJSON *o, const char *k, double *out)
{
    const cJSON *v = field(o, k);
    *out = 0;
    if (is_null(v)) return 0;
    return num(c, o, k, out);
}

/* A soft-cap: null (off, 0) or positive; 0 or less would divide the logits by it. */
static int optcap(ctx *c, const cJSON *o, const char *k, double *out)
{
    *out = 0;
    return is_null(field(o, k)) ? 0 : posnum(c, o, k, out);
}

static int boolean(ctx *c, const cJSON *o, const char *k, int *out)
{
    const cJSON *v = field(o, k);
    *out = 0;
    if (is_null(v)) return 0;
    if (!cJSON_IsBool(v))
        return vx_errf(c->err, VX_EFORMAT, "system graph: %s.%s is not a boolean", c->where, k);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Pick the index of a string value among choices; -1 with an error naming it. */
static int choice(ctx *c, const cJSON *o, const char *k, const char *const *names, int *out)
{
    const cJSON *v = field(o, k);
    if (!cJSON_IsString(v))
        return vx_errf(c->err, VX_EFORMAT, "system graph: %s.%s is missing or not a string",
                       c->where, k);
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], v->valuestring) == 0) { *out = i; return 0; }
    return vx_errf(c->err, VX_EUNSUPPORTED, "system graph: %s.%s '%s' is not supported by this executor",
                   c->where, k, v->valuestring);
}

/* Refuse keys of o that the plan does not know when they carry a value (not null/false). */
static int known(ctx *c, const cJSON *o, const char *const *keys)
{
    for (const cJSON *v = o ? o->child : NULL; v; v = v->next) {
        int ok = 0;
        for (int i = 0; keys[i] && !ok; i++) ok = strcmp(keys[i], v->string) == 0;
        if (!ok && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
            return vx_errf(c->err, VX_EUNSUPPORTED,
                           "system graph: %s field '%s' is not supported by this executor", c->where,
                           v->string);
    }
    /* every field is written, null when its feature is off: an absent one is not read as
     * off (a deleted rope, softcap or norm offset would run another model unannounced) */
    for (int i = 0; o && keys[i]; i++)
        if (!cJSON_GetObjectItemCaseSensitive(o, keys[i]))
            return vx_errf(c->err, VX_EFORMAT, "system graph: %s.%s is missing (a field is "
                           "always present, null when its feature is off)", c->where, keys[i]);
    return 0;
}

static const cJSON *sub(ctx *c, const cJSON *o, const char *k, int required)
{
    const cJSON *v = field(o, k);
    if (is_null(v)) {
        if (required)
            vx_errf(c->err, VX_EFORMAT, "system graph: %s.%s is missing", c->where, k);
        return NULL;
    }
    if (!cJSON_IsObject(v)) {
        vx_errf(c->err, VX_EFORMAT, "system graph: %s.%s is not an object", c->where, k);
        return NULL;
    }
    return v;
}

/* ---------------------------------------------------------------- operands */

static const char *obj_of(const char *name)
{
    if (strcmp(name, "weight") == 0 || strcmp(name, "positions") == 0) return OBJ_EMB;
    if (strncmp(name, "layers.", 7) == 0) return OBJ_DEC;
    return OBJ_OUT;
}

/* Find operand `name` with the given shape (d1 < 0: 1-D [d0]). layer < 0: not a layer. */
static const vx_tensor *operand(ctx *c, int layer, const char *name, int64_t d0, int64_t d1)
{
    const char *obj = obj_of(name);
    const vx_tensor *t = vx_find(c->m->c, obj, name);
    char lp[32] = "";
    if (layer >= 0) snprintf(lp, sizeof lp, "layer %d: ", layer);
    if (!t) {
        vx_errf(c->err, VX_EMISSING, "%soperand '%s' of %s is missing", lp, name, obj);
        return NULL;
    }
    int nd = d1 < 0 ? 1 : 2;
    if (t->ndim != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1)) {
        char got[96] = "[", want[64];
        for (int i = 0; i < t->ndim; i++) {
            size_t l = strlen(got);
            snprintf(got + l, sizeof got - l, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        }
        strcat(got, "]");
        if (nd == 1) snprintf(want, sizeof want, "[%lld]", (long long)d0);
        else snprintf(want, sizeof want, "[%lld, %lld]", (long long)d0, (long long)d1);
        vx_errf(c->err, VX_EFORMAT, "%soperand '%s' of %s has shape %s, expected %s", lp, name,
                obj, got, want);
        return NULL;
    }
    if (!eng_dtype_executable(t->dtype)) {
        vx_errf(c->err, VX_EUNSUPPORTED,
                "%soperand '%s' of %s has dtype %s, which the engine cannot execute", lp, name,
                obj, vx_dtype_name(t->dtype) ? vx_dtype_name(t->dtype) : "?");
        return NULL;
    }
    c->read[t - vx_tensor_at(c->m->c, 0)] = 1;
    return t;
}

/* Every stored operand of the target's objects is read by some operation. One that none
 * reads means the graph and the operands disagree: a flag that would read it (qkv_bias,
 * final_norm, ...) false or absent, so running would silently drop a term of the model. */
static int all_read(const ctx *c)
{
    for (size_t i = 0; i < vx_tensor_count(c->m->c); i++) {
        const vx_tensor *t = vx_tensor_at(c->m->c, i);
        if (c->read[i] || (strcmp(t->object, OBJ_EMB) != 0 && strcmp(t->object, OBJ_DEC) != 0 &&
                           strcmp(t->object, OBJ_OUT) != 0))
            continue;
        return vx_errf(c->err, VX_EFORMAT,
                       "operand '%s' of %s is stored but no operation of the system graph "
                       "reads it (a flag such as execution.final_norm or attention.qkv_bias "
                       "false or absent?): graph and operands disagree",
                       t->name, t->object);
    }
    return 0;
}

static int matrix(ctx *c, int layer, eng_w *w, int64_t rows, int64_t cols, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int matrix(ctx *c, int layer, eng_w *w, int64_t rows, int64_t cols, const char *fmt, ...)
{
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const vx_tensor *t = operand(c, layer, name, rows, cols);
    if (!t) return -1;
    eng_w_of(w, t);
    const char *obj = obj_of(name);
    w->exact = c->exact[strcmp(obj, OBJ_EMB) == 0 ? 0 : strcmp(obj, OBJ_DEC) == 0 ? 1 : 2];
    return 0;
}

/* A representation with source authority (fidelity source-exact or -equivalent) is the
 * model itself: its block-coded operands (MXFP4 experts as the checkpoint packs them) are
 * multiplied exactly. A quantised profile (numerically-approximate) may round activations. */
static int source_authority(const vx_container *c, const char *obj)
{
    const char *rid = vx_bound_representation(c, obj);
    const cJSON *reps = cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "representations");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(reps, rid ? rid : ""),
                                                      "fidelity");
    return cJSON_IsString(f) && (strcmp(f->valuestring, "source-exact") == 0 ||
                                 strcmp(f->valuestring, "source-equivalent") == 0);
}

/* A [n] vector as owned f32, plus `offset` per element. */
static int vector(ctx *c, int layer, float **out, int64_t n, float offset, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int vector(ctx *c, int layer, float **out, int64_t n, float offset, const char *fmt, ...)
{
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const vx_tensor *t = operand(c, layer, name, n, -1);
    if (!t) return -1;
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return vx_errf(c->err, VX_ENOMEM, "out of memory binding '%s'", name);
    eng_row_f32(t->dtype, t->data, v, (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] += offset;
    *out = v;
    return 0;
}

typedef struct normspec { int kind, bias; float eps, offset; } normspec;

static int norm(ctx *c, int layer, eng_norm *nm, const normspec *ns, int width, float eps,
                const char *name)
{
    nm->kind = ns->kind;
    nm->width = width;
    nm->eps = eps;
    if (vector(c, layer, &nm->w, width, ns->offset, "%s", name)) return -1;
    if (ns->bias && vector(c, layer, &nm->b, width, 0, "%s.bias", name)) return -1;
    return 0;
}

static void norm_free(eng_norm *nm)
{
    free(nm->w);
    free(nm->b);
}

/* ---------------------------------------------------------------- sections */

/* YaRN: a linear ramp between the dims that rotate beta_fast and beta_slow times over the
 * original context blends interpolated (÷ factor) and original frequencies; cos and sin are
 * multiplied by the stated attention factor. truncate rounds the ramp's ends outward. */
static int rope_yarn(ctx *c, const cJSON *s, eng_rope *rp, double theta)
{
    static const char *const keys[] = {"type", "factor", "original_max_position_embeddings",
                                       "beta_fast", "beta_slow", "truncate", "attention_factor",
                                       NULL};
    double f, orig, bf, bs, af;
    int trunc, half = rp->rotary_dim / 2, d = rp->rotary_dim;
    if (known(c, s, keys) || num(c, s, "factor", &f) ||
        num(c, s, "original_max_position_embeddings", &orig) || num(c, s, "beta_fast", &bf) ||
        num(c, s, "beta_slow", &bs) || boolean(c, s, "truncate", &trunc) ||
        num(c, s, "attention_factor", &af))
        return -1;
    if (!(f >= 1) || !(orig > 0) || !(bf > bs) || !(bs > 0) || !(af > 0))
        return vx_errf(c->err, VX_EFORMAT, "system graph: yarn rope scaling parameters (factor %g, "
                       "original %g, beta_fast %g, beta_slow %g, attention_factor %g) are out of range",
                       f, orig, bf, bs, af);
    double lo = d * log(orig / (bf * 2 * M_PI)) / (2 * log(theta));
    double hi = d * log(orig / (bs * 2 * M_PI)) / (2 * log(theta));
    if (trunc) { lo = floor(lo); hi = ceil(hi); }
    if (lo < 0) lo = 0;
    if (hi > d - 1) hi = d - 1;
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < half; i++) {
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        rp->inv_freq[i] = rp->inv_freq[i] / f * ramp + rp->inv_freq[i] * (1 - ramp);
    }
    rp->mscale = af;
    return 0;
}

/* Frequency scaling of a rope: llama3 (three wavelength bands), linear (every frequency
 * ÷ factor) or yarn. */
static int rope_scaling(ctx *c, const cJSON *s, eng_rope *rp, double theta)
{
    static const char *const types[] = {"llama3", "linear", "yarn", NULL};
    int ty, half = rp->rotary_dim / 2;
    double f, lo, hi, orig;
    if (choice(c, s, "type", types, &ty)) return -1;
    if (ty == 2) return rope_yarn(c, s, rp, theta);
    if (ty == 1) {
        static const char *const lkeys[] = {"type", "factor", NULL};
        if (known(c, s, lkeys) || num(c, s, "factor", &f)) return -1;
        if (!(f > 0))
            return vx_errf(c->err, VX_EFORMAT, "system graph: linear rope scaling factor %g is not positive", f);
        for (int i = 0; i < half; i++) rp->inv_freq[i] /= f;
        return 0;
    }
    static const char *const skeys[] = {"type", "factor", "low_freq_factor", "high_freq_factor",
                                        "original_max_position_embeddings", NULL};
    if (known(c, s, skeys) || num(c, s, "factor", &f) ||
        num(c, s, "low_freq_factor", &lo) || num(c, s, "high_freq_factor", &hi) ||
        num(c, s, "original_max_position_embeddings", &orig))
        return -1;
    if (!(f > 0) || !(hi > lo) || !(lo > 0) || !(orig > 0))
        return vx_errf(c->err, VX_EFORMAT, "system graph: llama3 rope scaling parameters "
                       "(factor %g, low %g, high %g, original %g) are out of range", f, lo, hi, orig);
    double lo_wl = orig / lo, hi_wl = orig / hi;
    for (int i = 0; i < half; i++) {
        double inv = rp->inv_freq[i], wl = 2 * M_PI / inv;
        if (wl > lo_wl) inv = inv / f;
        else if (wl >= hi_wl) {
            double sm = (orig / wl - lo) / (hi - lo);
            inv = (1 - sm) * inv / f + sm * inv;
        }
        rp->inv_freq[i] = inv;
    }
    return 0;
}

/* A rope object (execution.attention.rope, or a layer's own) into r; style ROPE_NONE
 * when the value is null. */
static int rope_parse(ctx *c, const cJSON *rj, int head_dim, eng_rope *rp)
{
    const char *where = c->where;
    rp->mscale = 1;
    if (is_null(rj)) {
        rp->style = ROPE_NONE;
        return 0;
    }
    if (!cJSON_IsObject(rj))
        return vx_errf(c->err, VX_EFORMAT, "system graph: %s is not an object", where);
    static const char *const styles[] = {"rotate_half", "interleaved", NULL};
    static const char *const keys[] = {"style", "theta", "rotary_dim", "scaling", NULL};
    int st;
    double theta;
    if (known(c, rj, keys) || choice(c, rj, "style", styles, &st) || num(c, rj, "theta", &theta) ||
        posint(c, rj, "rotary_dim", &rp->rotary_dim))
        return -1;
    rp->style = st == 0 ? ROPE_HALF : ROPE_INTERLEAVED;
    if (rp->rotary_dim > head_dim || rp->rotary_dim % 2)
        return vx_errf(c->err, VX_EFORMAT,
                       "system graph: rope rotary_dim %d does not fit head dim %d",
                       rp->rotary_dim, head_dim);
    if (!(theta > 0))
        return vx_errf(c->err, VX_EFORMAT, "system graph: rope theta %g is not positive", theta);
    int half = rp->rotary_dim / 2;
    rp->inv_freq = malloc((size_t)half * sizeof(double));
    if (!rp->inv_freq) return vx_errf(c->err, VX_ENOMEM, "out of memory binding rope");
    for (int i = 0; i < half; i++)
        rp->inv_freq[i] = 1.0 / pow(theta, (2.0 * i) / rp->rotary_dim);
    const cJSON *sj = field(rj, "scaling");
    if (is_null(sj)) return 0;
    char sw[96];
    snprintf(sw, sizeof sw, "%s.scaling", where);
    c->where = sw;
    int rc = -1;
    if (!cJSON_IsObject(sj))
        vx_errf(c->err, VX_EFORMAT, "system graph: %s is not an object", sw);
    else
        rc = rope_scaling(c, sj, rp, theta);
    c->where = where;
    return rc;
}

static int moe_plan(ctx *c, const cJSON *mo)
{
    eng_model *m = c->m;
    static const char *const keys[] = {"experts", "top_k", "expert_intermediate", "scoring",
                                       "score_correction_bias", "n_group", "topk_group",
                                       "normalise", "routed_scaling", "shared", "router_bias",
                                       "expert_bias", "expert_activation", NULL};
    static const char *const scorings[] = {"softmax", "sigmoid", NULL};
    double rs;
    c->where = "execution.moe";
    if (known(c, mo, keys) || posint(c, mo, "experts", &m->experts) ||
        posint(c, mo, "top_k", &m->top_k) ||
        posint(c, mo, "expert_intermediate", &m->expert_inter) ||
        choice(c, mo, "scoring", scorings, &m->scoring) ||
        boolean(c, mo, "score_correction_bias", &m->has_score_bias) ||
        boolean(c, mo, "normalise", &m->normalise) || num(c, mo, "routed_scaling", &rs) ||
        boolean(c, mo, "router_bias", &m->router_bias) ||
        boolean(c, mo, "expert_bias", &m->expert_bias))
        return -1;
    m->routed_scaling = (float)rs;
    const cJSON *ea = sub(c, mo, "expert_activation", 0);
    if (!ea && !is_null(field(mo, "expert_activation"))) return -1;
    if (ea) {
        static const char *const akeys[] = {"kind", "alpha", "limit", NULL};
        static const char *const kinds[] = {"clamped_swiglu", NULL};
        int k;
        double al, li;
        c->where = "execution.moe.expert_activation";
        if (known(c, ea, akeys) || choice(c, ea, "kind", kinds, &k) || num(c, ea, "alpha", &al) ||
            num(c, ea, "limit", &li))
            return -1;
        if (!(li > 0) || !(al > 0))
            return vx_errf(c->err, VX_EFORMAT, "system graph: clamped_swiglu alpha %g and limit %g "
                           "must be positive", al, li);
        m->expert_alpha = (float)al;
        m->expert_limit = (float)li;
        c->where = "execution.moe";
    }
    m->n_group = m->topk_group = 1;
    if (!is_null(field(mo, "n_group")) && posint(c, mo, "n_group", &m->n_group)) return -1;
    if (!is_null(field(mo, "topk_group")) && posint(c, mo, "topk_group", &m->topk_group))
        return -1;
    if (m->top_k > m->experts || m->experts % m->n_group || m->topk_group > m->n_group ||
        (m->n_group > 1 && m->experts / m->n_group < 2) ||
        m->top_k > m->topk_group * (m->experts / m->n_group))
        return vx_errf(c->err, VX_EFORMAT,
                       "system graph: moe routing (experts %d, top_k %d, n_group %d, "
                       "topk_group %d) is inconsistent", m->experts, m->top_k, m->n_group,
                       m->topk_group);
    const cJSON *sh = sub(c, mo, "shared", 0);
    if (!sh) return is_null(field(mo, "shared")) ? 0 : -1;
    static const char *const skeys[] = {"intermediate", "gate", NULL};
    c->where = "execution.moe.shared";
    if (known(c, sh, skeys) || posint(c, sh, "intermediate", &m->shared_inter)) return -1;
    if (!is_null(field(sh, "gate"))) {
        static const char *const gates[] = {"sigmoid", NULL};
        int g;
        if (choice(c, sh, "gate", gates, &g)) return -1;
        m->shared_gated = 1;
    }
    return 0;
}

static int mla_plan(ctx *c, const cJSON *ml, float *qa_eps, float *kva_eps)
{
    eng_model *m = c->m;
    static const char *const keys[] = {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                       "qk_rope_head_dim", "v_head_dim", "q_a_norm_eps",
                                       "kv_a_norm_eps", NULL};
    double e1, e2;
    c->where = "execution.mla";
    if (known(c, ml, keys) || posint(c, ml, "kv_lora_rank", &m->kv_lora) ||
        posint(c, ml, "qk_nope_head_dim", &m->qk_nope) ||
        posint(c, ml, "qk_rope_head_dim", &m->qk_rope) ||
        posint(c, ml, "v_head_dim", &m->v_head_dim) || posnum(c, ml, "kv_a_norm_eps", &e2))
        return -1;
    m->q_lora = 0;
    e1 = 0;
    if (!is_null(field(ml, "q_lora_rank")) &&
        (posint(c, ml, "q_lora_rank", &m->q_lora) || posnum(c, ml, "q_a_norm_eps", &e1)))
        return -1;
    *qa_eps = (float)e1;
    *kva_eps = (float)e2;
    m->mla_on = 1;
    return 0;
}

static int mlp_bind(ctx *c, int layer, eng_mlp *b, int inter, int gated, int bias,
                    const char *prefix)
{
    const int H = c->m->hidden;
    b->inter = inter;
    if (gated && matrix(c, layer, &b->gate, inter, H, "%s.gate_proj", prefix)) return -1;
    if (gated && bias && vector(c, layer, &b->gate_b, inter, 0, "%s.gate_proj.bias", prefix))
        return -1;
    if (matrix(c, layer, &b->up, inter, H, "%s.up_proj", prefix) ||
        matrix(c, layer, &b->down, H, inter, "%s.down_proj", prefix))
        return -1;
    if (bias && (vector(c, layer, &b->up_b, inter, 0, "%s.up_proj.bias", prefix) ||
                 vector(c, layer, &b->down_b, H, 0, "%s.down_proj.bias", prefix)))
        return -1;
    return 0;
}

static void mlp_free(eng_mlp *b)
{
    free(b->gate_b);
    free(b->up_b);
    free(b->down_b);
}

/* ---------------------------------------------------------------- layers */

typedef struct gspec {
    normspec ns;
    float eps, qa_eps, kva_eps;
    int qkv_bias, out_bias, post_attn, post_ffn, pre_attn, pre_ffn, sinks;
    /* recurrent mixers' geometry and facts (execution.mamba2 / .gated_deltanet), copied
     * into each layer of that kind; has_* 0 when the section is null */
    int has_ssm, has_dn;
    eng_ssm ssm;
    eng_deltanet dn;
    int ssm_conv_bias, ssm_proj_bias;
} gspec;

/* execution.mamba2: the SSM geometry every mamba2 layer shares. */
static int ssm_plan(ctx *c, const cJSON *sj, gspec *g)
{
    static const char *const keys[] = {"heads", "head_dim", "groups", "state_size", "conv_kernel",
                                       "conv_bias", "proj_bias", "dt_min", "dt_max", "norm_eps",
                                       NULL};
    eng_ssm *S = &g->ssm;
    double lo, hi = 0, eps;
    c->where = "execution.mamba2";
    if (known(c, sj, keys) || posint(c, sj, "heads", &S->heads) ||
        posint(c, sj, "head_dim", &S->head_dim) || posint(c, sj, "groups", &S->groups) ||
        posint(c, sj, "state_size", &S->state) || posint(c, sj, "conv_kernel", &S->conv.kernel) ||
        boolean(c, sj, "conv_bias", &g->ssm_conv_bias) || boolean(c, sj, "proj_bias", &g->ssm_proj_bias) ||
        num(c, sj, "dt_min", &lo) || (!is_null(field(sj, "dt_max")) && num(c, sj, "dt_max", &hi)) ||
        num(c, sj, "norm_eps", &eps))
        return -1;
    if (S->heads % S->groups || S->conv.kernel < 2 || !(lo >= 0) ||
        (!is_null(field(sj, "dt_max")) && !(hi > lo)) || !(eps > 0))
        return vx_errf(c->err, VX_EFORMAT, "system graph: execution.mamba2 (heads %d, groups %d, "
                       "conv_kernel %d, dt_min %g, norm_eps %g) is inconsistent", S->heads, S->groups,
                       S->conv.kernel, lo, eps);
    S->dt_min = (float)lo;
    S->dt_max = is_null(field(sj, "dt_max")) ? INFINITY : (float)hi;
    S->norm.kind = NORM_RMS;
    S->norm.eps = (float)eps;
    S->norm.width = S->heads * S->head_dim;
    S->conv.channels = S->norm.width + 2 * S->groups * S->state;
    g->has_ssm = 1;
    return 0;
}

/* execution.gated_deltanet: the geometry every gated_deltanet layer shares. */
static int deltanet_plan(ctx *c, const cJSON *dj, gspec *g)
{
    static const char *const keys[] = {"k_heads", "v_heads", "k_dim", "v_dim", "conv_kernel",
                                       "norm_eps", NULL};
    eng_deltanet *D = &g->dn;
    double eps;
    c->where = "execution.gated_deltanet";
    if (known(c, dj, keys) || posint(c, dj, "k_heads", &D->k_heads) ||
        posint(c, dj, "v_heads", &D->v_heads) || posint(c, dj, "k_dim", &D->k_dim) ||
        posint(c, dj, "v_dim", &D->v_dim) || posint(c, dj, "conv_kernel", &D->conv.kernel) ||
        num(c, dj, "norm_eps", &eps))
        return -1;
    if (D->v_heads % D->k_heads || D->conv.kernel < 2 || !(eps > 0) || D->k_dim > 4096 ||
        D->v_dim > 4096)
        return vx_errf(c->err, VX_EFORMAT, "system graph: execution.gated_deltanet (k_heads %d, "
                       "v_heads %d, k_dim %d, v_dim %d, conv_kernel %d) is inconsistent",
                       D->k_heads, D->v_heads, D->k_dim, D->v_dim, D->conv.kernel);
    D->norm.kind = NORM_RMS;
    D->norm.eps = (float)eps;
    D->norm.width = D->v_dim;
    D->conv.channels = 2 * D->k_heads * D->k_dim + D->v_heads * D->v_dim;
    g->has_dn = 1;
    return 0;
}

/* The state a layer declares must be what its operator keeps: region `idx` named `name`,
 * f32, per position or fixed, of shape d[ndim]. */
static int region_is(ctx *c, int i, const vx_layer_shape *ls, int idx, const char *name,
                     int per_token, int ndim, const int64_t *d)
{
    const vx_state_region *r = idx < ls->nstate ? &ls->state[idx] : NULL;
    if (!r || strcmp(r->name, name) != 0)
        return vx_errf(c->err, VX_EFORMAT, "layer %d: operator '%s' keeps state region '%s' as "
                       "region %d, which the graph does not declare", i, vx_mixer_name(ls->mixer),
                       name, idx);
    int same = r->dtype == VX_F32 && r->per_token == per_token && r->ndim == ndim;
    for (int k = 0; same && k < ndim; k++) same = r->shape[k] == d[k];
    if (!same) {
        char got[96] = "", want[96] = "";
        for (int k = 0; k < r->ndim; k++) {
            size_t l = strlen(got);
            snprintf(got + l, sizeof got - l, "%s%lld", k ? ", " : "", (long long)r->shape[k]);
        }
        for (int k = 0; k < ndim; k++) {
            size_t l = strlen(want);
            snprintf(want + l, sizeof want - l, "%s%lld", k ? ", " : "", (long long)d[k]);
        }
        return vx_errf(c->err, VX_EFORMAT, "layer %d: state region '%s' is declared %s [%s] %s; "
                       "operator '%s' keeps f32 [%s] %s", i, name, vx_dtype_name(r->dtype), got,
                       r->per_token ? "per position" : "fixed", vx_mixer_name(ls->mixer), want,
                       per_token ? "per position" : "fixed");
    }
    return 0;
}

/* The state a layer declares must be what its operator keeps: region `idx` named `name`,
 * f32, per position, of shape [d0, d1]. */
static int state_is(ctx *c, int i, const vx_layer_shape *ls, int idx, const char *name,
                    int64_t d0, int64_t d1)
{
    const int64_t d[2] = {d0, d1};
    return region_is(c, i, ls, idx, name, 1, 2, d);
}

/* A [rows, cols] operand as owned f32 (the conv taps). */
static int small_f32(ctx *c, int layer, float **out, int64_t rows, int64_t cols, const char *name)
{
    const vx_tensor *t = operand(c, layer, name, rows, cols);
    if (!t) return -1;
    if (!(*out = malloc((size_t)(rows * cols) * sizeof **out)))
        return vx_errf(c->err, VX_ENOMEM, "out of memory binding '%s'", name);
    eng_row_f32(t->dtype, t->data, *out, (size_t)(rows * cols));
    return 0;
}

/* −exp(A_log) per head, the decay rate both recurrences use. */
static int decay_rates(ctx *c, int layer, float **out, int n, const char *name)
{
    if (vector(c, layer, out, n, 0, "%s", name)) return -1;
    for (int h = 0; h < n; h++) (*out)[h] = (float)-exp((double)(*out)[h]);
    return 0;
}

/* A recurrent token mixer: its declared state (conv window + recurrent state, both
 * fixed) checked against what the kernel keeps, then its operands. */
static int recur_bind(ctx *c, const gspec *g, int i)
{
    eng_model *m = c->m;
    eng_layer *L = &m->layers[i];
    const vx_layer_shape *ls = &m->shape->layer[i];
    const int H = m->hidden;
    char nm[160];
    if (ls->nstate != 2)
        return vx_errf(c->err, VX_EFORMAT, "layer %d: operator '%s' keeps 2 state regions (conv, "
                       "%s), the graph declares %d", i, vx_mixer_name(ls->mixer),
                       ls->mixer == VX_MIXER_MAMBA2 ? "ssm" : "recurrent", ls->nstate);
    if (ls->mixer == VX_MIXER_MAMBA2) {
        const eng_ssm *G = &g->ssm;
        const int I = G->heads * G->head_dim, GN = G->groups * G->state;
        const int P = 2 * I + 2 * GN + G->heads;
        const int64_t cw[2] = {G->conv.kernel - 1, G->conv.channels},
                      st[3] = {G->heads, G->head_dim, G->state};
        if (region_is(c, i, ls, 0, "conv", 0, 2, cw) || region_is(c, i, ls, 1, "ssm", 0, 3, st))
            return -1;
        eng_ssm *S = L->ssm = malloc(sizeof *S);
        if (!S) return vx_errf(c->err, VX_ENOMEM, "out of memory binding layer %d", i);
        *S = *G;
        S->in_b = S->out_b = S->conv.w = S->conv.b = S->dt_bias = S->a = S->d = S->norm.w = NULL;
        S->norm.b = NULL;
        snprintf(nm, sizeof nm, "layers.%d.ssm.conv", i);
        if (matrix(c, i, &S->in_proj, P, H, "layers.%d.ssm.in_proj", i) ||
            (g->ssm_proj_bias && vector(c, i, &S->in_b, P, 0, "layers.%d.ssm.in_proj.bias", i)) ||
            small_f32(c, i, &S->conv.w, G->conv.channels, G->conv.kernel, nm) ||
            (g->ssm_conv_bias && vector(c, i, &S->conv.b, G->conv.channels, 0, "layers.%d.ssm.conv.bias", i)) ||
            vector(c, i, &S->dt_bias, G->heads, 0, "layers.%d.ssm.dt_bias", i) ||
            decay_rates(c, i, &S->a, G->heads, (snprintf(nm, sizeof nm, "layers.%d.ssm.A_log", i), nm)) ||
            vector(c, i, &S->d, G->heads, 0, "layers.%d.ssm.D", i) ||
            vector(c, i, &S->norm.w, I, 0, "layers.%d.ssm.norm", i) ||
            matrix(c, i, &S->out_proj, H, I, "layers.%d.ssm.out_proj", i) ||
            (g->ssm_proj_bias && vector(c, i, &S->out_b, H, 0, "layers.%d.ssm.out_proj.bias", i)))
            return -1;
        return 0;
    }
    const eng_deltanet *G = &g->dn;
    const int nk = G->k_heads, nv = G->v_heads, dk = G->k_dim, dv = G->v_dim, r = nv / nk;
    const int64_t cw[2] = {G->conv.kernel - 1, G->conv.channels}, st[3] = {nv, dk, dv};
    if (region_is(c, i, ls, 0, "conv", 0, 2, cw) || region_is(c, i, ls, 1, "recurrent", 0, 3, st))
        return -1;
    eng_deltanet *D = L->dn = malloc(sizeof *D);
    if (!D) return vx_errf(c->err, VX_ENOMEM, "out of memory binding layer %d", i);
    *D = *G;
    D->conv.w = D->conv.b = D->dt_bias = D->a = D->norm.w = D->norm.b = NULL;
    snprintf(nm, sizeof nm, "layers.%d.deltanet.conv", i);
    if (matrix(c, i, &D->in_qkvz, nk * (2 * dk + 2 * r * dv), H, "layers.%d.deltanet.in_qkvz", i) ||
        matrix(c, i, &D->in_ba, 2 * nv, H, "layers.%d.deltanet.in_ba", i) ||
        small_f32(c, i, &D->conv.w, G->conv.channels, G->conv.kernel, nm) ||
        vector(c, i, &D->dt_bias, nv, 0, "layers.%d.deltanet.dt_bias", i) ||
        decay_rates(c, i, &D->a, nv, (snprintf(nm, sizeof nm, "layers.%d.deltanet.A_log", i), nm)) ||
        vector(c, i, &D->norm.w, dv, 0, "layers.%d.deltanet.norm", i) ||
        matrix(c, i, &D->out_proj, H, nv * dv, "layers.%d.deltanet.out_proj", i))
        return -1;
    return 0;
}

static void recur_free(eng_layer *L)
{
    if (L->ssm) {
        free(L->ssm->in_b); free(L->ssm->out_b); free(L->ssm->conv.w); free(L->ssm->conv.b);
        free(L->ssm->dt_bias); free(L->ssm->a); free(L->ssm->d); free(L->ssm->norm.w);
        free(L->ssm);
    }
    if (L->dn) {
        free(L->dn->conv.w); free(L->dn->dt_bias); free(L->dn->a); free(L->dn->norm.w);
        free(L->dn);
    }
}

/* A layer's channel mixer: dense MLP, MoE (router, experts, shared expert) or none. */
static int channel_bind(ctx *c, int i)
{
    eng_model *m = c->m;
    eng_layer *L = &m->layers[i];
    const int H = m->hidden;
    char pre[24];
    snprintf(pre, sizeof pre, "layers.%d", i);
    if (L->ffn_none) return 0;
    char fp[96];
    if (!L->moe) {
        snprintf(fp, sizeof fp, "%s.ffn", pre);
        return mlp_bind(c, i, &L->mlp, m->inter, m->ffn_gated, m->ffn_bias, fp);
    }
    if (matrix(c, i, &L->router, m->experts, H, "%s.ffn.router", pre)) return -1;
    if (m->router_bias &&
        vector(c, i, &L->router_b, m->experts, 0, "%s.ffn.router.bias", pre))
        return -1;
    if (m->has_score_bias &&
        vector(c, i, &L->score_bias, m->experts, 0, "%s.ffn.router.score_bias", pre))
        return -1;
    L->experts = calloc((size_t)m->experts, sizeof *L->experts);
    if (!L->experts) return vx_errf(c->err, VX_ENOMEM, "out of memory binding layer %d", i);
    for (int e = 0; e < m->experts; e++) {
        snprintf(fp, sizeof fp, "%s.ffn.experts.%d", pre, e);
        if (mlp_bind(c, i, &L->experts[e], m->expert_inter, 1, m->expert_bias, fp)) return -1;
        L->experts[e].alpha = m->expert_alpha;
        L->experts[e].limit = m->expert_limit;
    }
    if (m->shared_inter) {
        snprintf(fp, sizeof fp, "%s.ffn.shared", pre);
        if (mlp_bind(c, i, &L->shared, m->shared_inter, 1, 0, fp)) return -1;
        if (m->shared_gated && matrix(c, i, &L->shared_gate, 1, H, "%s.ffn.shared_gate", pre))
            return -1;
    }
    return 0;
}

static int layer_bind(ctx *c, const gspec *g, int i)
{
    eng_model *m = c->m;
    eng_layer *L = &m->layers[i];
    const vx_layer_shape *ls = &m->shape->layer[i];
    const int H = m->hidden;
    char pre[24];
    snprintf(pre, sizeof pre, "layers.%d", i);
    char nm[160];
    L->moe = ls->channel == VX_CHANNEL_MOE;
    L->ffn_none = ls->channel == VX_CHANNEL_NONE;
    if (ls->mixer == VX_MIXER_MAMBA2 || ls->mixer == VX_MIXER_DELTANET) {
        snprintf(nm, sizeof nm, "%s.attn_norm", pre);
        if (recur_bind(c, g, i) || (g->pre_attn && norm(c, i, &L->attn_norm, &g->ns, H, g->eps, nm)))
            return -1;
        snprintf(nm, sizeof nm, "%s.ffn_norm", pre);
        if (g->pre_ffn && !L->ffn_none && norm(c, i, &L->ffn_norm, &g->ns, H, g->eps, nm)) return -1;
        return channel_bind(c, i);
    }
    L->mla = ls->mixer == VX_MIXER_MLA;
    L->window = ls->window;
    if (L->mla ? state_is(c, i, ls, 0, "latent", 1, (int64_t)m->kv_lora + m->qk_rope)
               : state_is(c, i, ls, 0, "k", m->kv_heads, m->head_dim) ||
                     state_is(c, i, ls, 1, "v", m->kv_heads, m->head_dim))
        return -1;
    L->rope = &m->rope;
    const cJSON *rj = field(ls->json, "rope");
    if (!is_null(rj)) {
        char w[48];
        snprintf(w, sizeof w, "layers[%d].rope", i);
        c->where = w;
        int rc = rope_parse(c, rj, L->mla ? m->qk_rope : m->head_dim, &L->own_rope);
        c->where = "layers";
        if (rc) return -1;
        L->rope = &L->own_rope;
    }

    snprintf(nm, sizeof nm, "%s.attn_norm", pre);
    if (g->pre_attn && norm(c, i, &L->attn_norm, &g->ns, H, g->eps, nm)) return -1;
    snprintf(nm, sizeof nm, "%s.ffn_norm", pre);
    if (g->pre_ffn && !L->ffn_none && norm(c, i, &L->ffn_norm, &g->ns, H, g->eps, nm)) return -1;
    normspec post = g->ns;
    post.bias = 0;
    snprintf(nm, sizeof nm, "%s.post_attn_norm", pre);
    if (g->post_attn && norm(c, i, &L->post_attn, &post, H, g->eps, nm)) return -1;
    snprintf(nm, sizeof nm, "%s.post_ffn_norm", pre);
    if (g->post_ffn && norm(c, i, &L->post_ffn, &post, H, g->eps, nm)) return -1;

    if (!L->mla) {
        const int qd = m->heads * m->head_dim, kd = m->kv_heads * m->head_dim;
        if (matrix(c, i, &L->q, m->attn_gate ? 2 * qd : qd, H, "%s.attn.q_proj", pre) ||
            matrix(c, i, &L->k, kd, H, "%s.attn.k_proj", pre) ||
            matrix(c, i, &L->v, kd, H, "%s.attn.v_proj", pre) ||
            matrix(c, i, &L->o, H, qd, "%s.attn.o_proj", pre))
            return -1;
        if (g->qkv_bias && (vector(c, i, &L->qb, qd, 0, "%s.attn.q_proj.bias", pre) ||
                            vector(c, i, &L->kb, kd, 0, "%s.attn.k_proj.bias", pre) ||
                            vector(c, i, &L->vb, kd, 0, "%s.attn.v_proj.bias", pre)))
            return -1;
        if (g->out_bias && vector(c, i, &L->ob, H, 0, "%s.attn.o_proj.bias", pre)) return -1;
        if (m->qk_norm) {
            normspec qn = g->ns;
            qn.bias = 0;
            int per = m->qk_norm == QK_HEAD;
            snprintf(nm, sizeof nm, "%s.attn.q_norm", pre);
            if (norm(c, i, &L->q_norm, &qn, per ? m->head_dim : qd, g->eps, nm)) return -1;
            snprintf(nm, sizeof nm, "%s.attn.k_norm", pre);
            if (norm(c, i, &L->k_norm, &qn, per ? m->head_dim : kd, g->eps, nm)) return -1;
        }
        if (g->sinks && vector(c, i, &L->sinks, m->heads, 0, "%s.attn.sinks", pre)) return -1;
    } else {
        const int qk = m->qk_nope + m->qk_rope;
        normspec lr = g->ns;
        lr.kind = NORM_RMS;
        lr.bias = 0;
        if (m->q_lora) {
            snprintf(nm, sizeof nm, "%s.attn.q_a_norm", pre);
            if (matrix(c, i, &L->q_a, m->q_lora, H, "%s.attn.q_a_proj", pre) ||
                norm(c, i, &L->q_a_norm, &lr, m->q_lora, g->qa_eps, nm) ||
                matrix(c, i, &L->q_b, m->heads * qk, m->q_lora, "%s.attn.q_b_proj", pre))
                return -1;
        } else if (matrix(c, i, &L->q, m->heads * qk, H, "%s.attn.q_proj", pre)) {
            return -1;
        }
        snprintf(nm, sizeof nm, "%s.attn.kv_a_norm", pre);
        if (matrix(c, i, &L->kv_a, m->kv_lora + m->qk_rope, H, "%s.attn.kv_a_proj", pre) ||
            norm(c, i, &L->kv_a_norm, &lr, m->kv_lora, g->kva_eps, nm) ||
            matrix(c, i, &L->kv_b, m->heads * (m->qk_nope + m->v_head_dim), m->kv_lora,
                   "%s.attn.kv_b_proj", pre) ||
            matrix(c, i, &L->o, H, m->heads * m->v_head_dim, "%s.attn.o_proj", pre))
            return -1;
        if (g->out_bias && vector(c, i, &L->ob, H, 0, "%s.attn.o_proj.bias", pre)) return -1;
    }

    return channel_bind(c, i);
}

/* ---------------------------------------------------------------- plan */

/* A token id of the vocabulary, as the encoder judged it (hf_surface.c). */
static int token_id(ctx *c, const cJSON *v, const char *what, int32_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= c->m->vocab ||
        v->valuedouble != floor(v->valuedouble))
        return vx_errf(c->err, VX_EFORMAT, "system graph: %s.%s is not a token id below "
                       "vocab_size %d", c->where, what, c->m->vocab);
    *out = (int32_t)v->valuedouble;
    return 0;
}

/* execution.special_tokens: bos an id or null, eos an id or a list of them (GENERATE stops
 * at any), add_bos a boolean. Absent: no special tokens; a malformed one is refused, never
 * dropped (an eos skipped silently would let GENERATE run past the end of its text). */
static int special_tokens(ctx *c, const cJSON *ex)
{
    const cJSON *sp = sub(c, ex, "special_tokens", 0);
    if (!sp) return is_null(field(ex, "special_tokens")) ? 0 : -1;
    c->where = "execution.special_tokens";
    static const char *const keys[] = {"bos", "eos", "add_bos", NULL};
    int add_bos;
    int32_t bos;
    const cJSON *b = field(sp, "bos"), *eos = field(sp, "eos"), *e;
    if (known(c, sp, keys) || boolean(c, sp, "add_bos", &add_bos) ||
        (!is_null(b) && token_id(c, b, "bos", &bos)))
        return -1;
    if (is_null(eos)) return 0;
    if (cJSON_IsNumber(eos)) return token_id(c, eos, "eos", &c->m->eos[c->m->n_eos++]);
    if (!cJSON_IsArray(eos))
        return vx_errf(c->err, VX_EFORMAT, "system graph: execution.special_tokens.eos is not "
                       "a token id or a list of them");
    if (cJSON_GetArraySize(eos) > ENG_MAX_EOS)
        return vx_errf(c->err, VX_EUNSUPPORTED, "system graph: execution.special_tokens.eos "
                       "lists %d ids; this executor stops on at most %d", cJSON_GetArraySize(eos),
                       ENG_MAX_EOS);
    cJSON_ArrayForEach(e, eos)
        if (token_id(c, e, "eos[]", &c->m->eos[c->m->n_eos++])) return -1;
    return 0;
}

/* The kernels form these sizes in int and keep a hidden-sized row on the stack: refuse a
 * graph whose geometry would overflow them, before any operand is looked up. */
static int geometry_ok(const eng_model *m, vx_err *err)
{
    const int64_t lim = (int64_t)1 << 28;
    const int64_t qk = (int64_t)m->qk_nope + m->qk_rope + m->v_head_dim;
    const struct { const char *what; int64_t v, max; } p[] = {
        {"hidden_size", m->hidden, 65536},
        {"num_layers", m->n_layers, 65536},
        {"experts", m->experts, 65536},
        {"heads x head_dim", (int64_t)m->heads * m->head_dim, lim},
        {"heads x (qk_nope + qk_rope + v_head_dim)", (int64_t)m->heads * qk, lim},
        {"kv_lora_rank + qk_rope_head_dim", (int64_t)m->kv_lora + m->qk_rope, lim},
        {"experts x expert_intermediate", (int64_t)m->experts * m->expert_inter, lim},
        {"intermediate", m->inter, lim},
        {"vocab_size", m->vocab, lim},
        {"context_length", m->ctx, lim},
    };
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        if (p[i].v > p[i].max)
            return vx_errf(err, VX_EUNSUPPORTED, "system graph: %s = %lld exceeds the engine's "
                           "limit %lld", p[i].what, (long long)p[i].v, (long long)p[i].max);
    return 0;
}

static int plan_build(ctx *c);

int eng_plan_build(eng_model *m, vx_err *err)
{
    ctx c = {m, err, "component",
             {source_authority(m->c, OBJ_EMB), source_authority(m->c, OBJ_DEC),
              source_authority(m->c, OBJ_OUT)},
             calloc(vx_tensor_count(m->c) + 1, 1)};
    if (!c.read) return vx_errf(err, VX_ENOMEM, "out of memory binding the model");
    int rc = plan_build(&c) || all_read(&c) ? -1 : 0;
    free(c.read);
    return rc;
}

static int plan_build(ctx *cp)
{
    ctx c = *cp;
    eng_model *m = c.m;
    vx_err *err = c.err;
    const vx_graph_shape *sh = vx_shape_of(m->c);
    const cJSON *ex = sh->execution;
    m->shape = sh;
    m->n_layers = sh->layers;
    m->hidden = sh->hidden;
    m->vocab = sh->vocab;
    m->ctx = sh->context;
    c.where = "execution";
    static const char *const keys[] = {"embedding", "norm", "attention", "mla", "ffn", "moe",
                                       "pre_norms", "post_norms", "final_norm", "lm_head",
                                       "context_length", "special_tokens", "mamba2",
                                       "gated_deltanet", "residual_scale", NULL};
    if (known(&c, ex, keys)) return -1;
    const int H = m->hidden;

    /* embedding */
    const cJSON *emb = sub(&c, ex, "embedding", 1);
    if (!emb) return -1;
    c.where = "execution.embedding";
    static const char *const ekeys[] = {"scale", "positions", NULL};
    double scale;
    if (known(&c, emb, ekeys) || posnum(&c, emb, "scale", &scale)) return -1;
    m->embed_scale = (float)scale;
    int learned = 0;
    if (!is_null(field(emb, "positions"))) {
        static const char *const pos[] = {"learned", NULL};
        if (choice(&c, emb, "positions", pos, &learned)) return -1;
        learned = 1;
    }

    /* norm */
    gspec g;
    memset(&g, 0, sizeof g);
    const cJSON *nj = sub(&c, ex, "norm", 1);
    if (!nj) return -1;
    c.where = "execution.norm";
    static const char *const nkeys[] = {"kind", "eps", "weight_offset", "bias", NULL};
    static const char *const kinds[] = {"rms", "layer", NULL};
    double eps, off;
    if (known(&c, nj, nkeys) || choice(&c, nj, "kind", kinds, &g.ns.kind) ||
        posnum(&c, nj, "eps", &eps) || optnum(&c, nj, "weight_offset", &off) ||
        boolean(&c, nj, "bias", &g.ns.bias))
        return -1;
    g.eps = (float)eps;
    g.ns.offset = (float)off;

    /* recurrent mixers, and the residual multiplier every branch shares */
    const cJSON *sj = sub(&c, ex, "mamba2", 0), *dj = sub(&c, ex, "gated_deltanet", 0);
    if ((!sj && !is_null(field(ex, "mamba2"))) || (!dj && !is_null(field(ex, "gated_deltanet"))))
        return -1;
    if ((sj && ssm_plan(&c, sj, &g)) || (dj && deltanet_plan(&c, dj, &g))) return -1;
    c.where = "execution";
    double rscale = 1;
    if (!is_null(field(ex, "residual_scale")) && num(&c, ex, "residual_scale", &rscale)) return -1;
    if (!(rscale > 0 && rscale < 1e6))
        return vx_errf(err, VX_EFORMAT, "system graph: execution.residual_scale %g must be above 0 "
                       "and below 1e6", rscale);
    m->residual_scale = (float)rscale;

    /* attention: null when no layer attends */
    const cJSON *at = sub(&c, ex, "attention", 0);
    if (!at && !is_null(field(ex, "attention"))) return -1;
    c.where = "execution.attention";
    static const char *const akeys[] = {"heads", "kv_heads", "head_dim", "scale", "qkv_bias",
                                        "out_bias", "softcap", "qk_norm", "sinks", "rope",
                                        "output_gate", NULL};
    double ascale = 0, cap = 0;
    if (at && !is_null(field(at, "output_gate"))) {
        static const char *const gates[] = {"sigmoid", NULL};
        int gk;
        if (choice(&c, at, "output_gate", gates, &gk)) return -1;
        m->attn_gate = 1;
    }
    if (!at) {
        m->rope.style = ROPE_NONE;
    } else if (known(&c, at, akeys) || posint(&c, at, "heads", &m->heads) ||
        posint(&c, at, "kv_heads", &m->kv_heads) || posint(&c, at, "head_dim", &m->head_dim) ||
        posnum(&c, at, "scale", &ascale) || boolean(&c, at, "qkv_bias", &g.qkv_bias) ||
        boolean(&c, at, "out_bias", &g.out_bias) || optcap(&c, at, "softcap", &cap) ||
        boolean(&c, at, "sinks", &g.sinks))
        return -1;
    if (at && !is_null(field(at, "qk_norm"))) {
        static const char *const scopes[] = {"head", "projection", NULL};
        int sc;
        if (choice(&c, at, "qk_norm", scopes, &sc)) return -1;
        m->qk_norm = sc == 0 ? QK_HEAD : QK_PROJECTION;
    }
    if (at && m->heads % m->kv_heads)
        return vx_errf(err, VX_EFORMAT, "system graph: %d heads is not a multiple of %d kv heads",
                       m->heads, m->kv_heads);
    m->attn_scale = (float)ascale;
    m->attn_softcap = (float)cap;
    m->v_head_dim = m->head_dim;
    const cJSON *ml = sub(&c, ex, "mla", 0);
    if (!ml && !is_null(field(ex, "mla"))) return -1;
    if (ml && mla_plan(&c, ml, &g.qa_eps, &g.kva_eps)) return -1;
    c.where = "execution.attention.rope";
    if (at && rope_parse(&c, field(at, "rope"), m->mla_on ? m->qk_rope : m->head_dim, &m->rope))
        return -1;

    /* ffn: null when no layer has a channel mixer */
    const cJSON *fj = sub(&c, ex, "ffn", 0);
    if (!fj && !is_null(field(ex, "ffn"))) return -1;
    c.where = "execution.ffn";
    static const char *const fkeys[] = {"kind", "activation", "intermediate", "bias", NULL};
    static const char *const fk[] = {"gated", "plain", NULL};
    static const char *const acts[] = {"silu", "gelu_tanh", "gelu", NULL};
    int fkind = 0;
    if (fj && (known(&c, fj, fkeys) || choice(&c, fj, "kind", fk, &fkind) ||
               choice(&c, fj, "activation", acts, &m->act) ||
               posint(&c, fj, "intermediate", &m->inter) || boolean(&c, fj, "bias", &m->ffn_bias)))
        return -1;
    m->ffn_gated = fkind == 0;
    const cJSON *mo = sub(&c, ex, "moe", 0);
    if (!mo && !is_null(field(ex, "moe"))) return -1;
    if (mo && moe_plan(&c, mo)) return -1;
    m->moe_on = mo != NULL;

    /* pre norms (OLMo-2 has none: its norms act on the branch outputs) */
    const cJSON *prn = sub(&c, ex, "pre_norms", 1);
    if (!prn) return -1;
    static const char *const pkeys[] = {"attn", "ffn", NULL};
    c.where = "execution.pre_norms";
    if (known(&c, prn, pkeys) || boolean(&c, prn, "attn", &g.pre_attn) ||
        boolean(&c, prn, "ffn", &g.pre_ffn))
        return -1;

    /* post norms, head */
    const cJSON *pn = field(ex, "post_norms");
    if (!is_null(pn)) {
        if (!cJSON_IsObject(pn))
            return vx_errf(err, VX_EFORMAT, "system graph: execution.post_norms is not an object");
        c.where = "execution.post_norms";
        if (known(&c, pn, pkeys) || boolean(&c, pn, "attn", &g.post_attn) ||
            boolean(&c, pn, "ffn", &g.post_ffn))
            return -1;
    }
    c.where = "execution";
    int fn, tied;
    if (boolean(&c, ex, "final_norm", &fn)) return -1;
    const cJSON *lm = sub(&c, ex, "lm_head", 1);
    if (!lm) return -1;
    c.where = "execution.lm_head";
    static const char *const lkeys[] = {"tied", "softcap", "logits_divisor", NULL};
    double fcap, div = 1;
    if (known(&c, lm, lkeys) || boolean(&c, lm, "tied", &tied) || optcap(&c, lm, "softcap", &fcap) ||
        (!is_null(field(lm, "logits_divisor")) && num(&c, lm, "logits_divisor", &div)))
        return -1;
    if (!(div > 0))
        return vx_errf(err, VX_EFORMAT, "system graph: execution.lm_head.logits_divisor %g is not "
                       "positive", div);
    m->final_softcap = (float)fcap;
    m->logits_divisor = (float)div;

    if (special_tokens(&c, ex)) return -1;

    if (geometry_ok(m, err)) return -1;

    /* operands outside the stack */
    if (matrix(&c, -1, &m->embed, m->vocab, H, "weight")) return -1;
    if (learned && matrix(&c, -1, &m->positions, m->ctx, H, "positions")) return -1;
    if (fn && norm(&c, -1, &m->final_norm, &g.ns, H, g.eps, "final_norm")) return -1;
    if (tied) m->lm_head = m->embed;
    else if (matrix(&c, -1, &m->lm_head, m->vocab, H, "lm_head")) return -1;

    m->layers = calloc((size_t)m->n_layers, sizeof *m->layers);
    if (!m->layers) return vx_errf(err, VX_ENOMEM, "out of memory binding %d layers", m->n_layers);
    c.where = "layers";
    for (int i = 0; i < m->n_layers; i++)
        if (layer_bind(&c, &g, i)) return -1;
    if (m->mla_on) {
        int any = 0;
        for (int i = 0; i < m->n_layers; i++) any |= m->layers[i].mla;
        if (!any) m->mla_on = 0;
    }
    return 0;
}

void eng_plan_free(eng_model *m)
{
    free(m->rope.inv_freq);
    norm_free(&m->final_norm);
    for (int i = 0; m->layers && i < m->n_layers; i++) {
        eng_layer *L = &m->layers[i];
        free(L->own_rope.inv_freq);
        recur_free(L);
        norm_free(&L->attn_norm);
        norm_free(&L->ffn_norm);
        norm_free(&L->post_attn);
        norm_free(&L->post_ffn);
        norm_free(&L->q_a_norm);
        norm_free(&L->kv_a_norm);
        norm_free(&L->q_norm);
        norm_free(&L->k_norm);
        free(L->sinks);
        free(L->qb); free(L->kb); free(L->vb); free(L->ob);
        mlp_free(&L->mlp);
        free(L->score_bias);
        free(L->router_b);
        for (int e = 0; L->experts && e < m->experts; e++) mlp_free(&L->experts[e]);
        free(L->experts);
        mlp_free(&L->shared);
    }
    free(m->layers);
}
