/*
 * shape.c — the container's FFN as browse sees it: for every layer the gate rows (the
 * rows that decide whether a feature fires) and the down columns (what it writes), read
 * from the decoder component's execution surface and bound to borrowed tensor views.
 * Nothing is hard-coded per family: gated vs plain and dense vs MoE come from the graph.
 * FFN matrices may be block-quantised (the representation a profile binds): their rows are
 * dequantised lazily, one row at a time, by whoever reads them (knn.c); the embedding is
 * read as whole rows here and stays f32/f16/bf16.
 */
#include "brw_int.h"

#include "qkernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STACK "target.decoder_stack"

/* Check a matrix operand: 2-D, dtype readable by browse (a block codec the kernels score
 * in place only when quant is set), shape {rows, cols}. */
static int check_mat(const vx_tensor *t, const char *name, int64_t rows, int64_t cols,
                     int quant, vx_err *err)
{
    if (!t)
        return vx_errf(err, VX_EMISSING, "browse: operand \"%s\" is missing", name);
    int plain = t->dtype == VX_F32 || t->dtype == VX_F16 || t->dtype == VX_BF16;
    if (!plain && !(quant && eng_qsupported(t->dtype)))
        return vx_errf(err, VX_EUNSUPPORTED, "browse: operand \"%s\" is stored as %s; browse "
                       "reads %s", name, vx_dtype_name(t->dtype),
                       quant ? "f32, f16, bf16, q8_0, q4_0, q4_k, q6_k and mxfp4"
                             : "f32, f16 and bf16");
    if (t->ndim != 2 || (rows >= 0 && t->shape[0] != rows) || t->shape[1] != cols)
        return vx_errf(err, VX_EFORMAT, "browse: operand \"%s\" has shape [%lld, %lld], want "
                       "[%lld, %lld]", name, (long long)t->shape[0],
                       (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)rows,
                       (long long)cols);
    return 0;
}

/* A [rows] f32/f16/bf16 vector operand. */
static int bind_vec(const vx_container *c, const char *name, int64_t rows, const vx_tensor **out,
                    vx_err *err)
{
    const vx_tensor *t = vx_find(c, STACK, name);
    if (!t)
        return vx_errf(err, VX_EMISSING, "browse: operand \"%s\" is missing", name);
    if ((t->dtype != VX_F32 && t->dtype != VX_F16 && t->dtype != VX_BF16) || t->ndim != 1 ||
        t->shape[0] != rows)
        return vx_errf(err, VX_EFORMAT, "browse: operand \"%s\" is not an f32/f16/bf16 vector "
                       "of %lld", name, (long long)rows);
    *out = t;
    return 0;
}

/* bias: a plain MLP's up_proj.bias (ffn.bias), or a gated expert's gate_proj.bias and
 * up_proj.bias (moe.expert_bias). */
static int bind_part(const vx_container *c, brw_part *p, const char *prefix, int gated,
                     int bias, int hidden, int64_t rows, vx_err *err)
{
    char gname[256], dname[256];
    snprintf(gname, sizeof gname, "%s.%s", prefix, gated ? "gate_proj" : "up_proj");
    snprintf(dname, sizeof dname, "%s.down_proj", prefix);
    p->gate = vx_find(c, STACK, gname);
    if (check_mat(p->gate, gname, rows, hidden, 1, err) != 0)
        return -1;
    p->rows = p->gate->shape[0];
    p->down = vx_find(c, STACK, dname);
    if (check_mat(p->down, dname, hidden, p->rows, 1, err) != 0)
        return -1;
    if (gated) {
        snprintf(gname, sizeof gname, "%s.up_proj", prefix);
        p->up = vx_find(c, STACK, gname);
        if (check_mat(p->up, gname, p->rows, hidden, 1, err) != 0)
            return -1;
        if (!bias)
            return 0;
        snprintf(gname, sizeof gname, "%s.gate_proj.bias", prefix);
        snprintf(dname, sizeof dname, "%s.up_proj.bias", prefix);
        return bind_vec(c, gname, p->rows, &p->gate_b, err) ? -1
                                                            : bind_vec(c, dname, p->rows, &p->up_b, err);
    }
    if (!bias)
        return 0;
    snprintf(gname, sizeof gname, "%s.up_proj.bias", prefix);
    return bind_vec(c, gname, p->rows, &p->bias, err);
}

int brw_shape_read(const vx_container *c, brw_shape *s, vx_err *err)
{
    memset(s, 0, sizeof *s);
    const vx_graph_shape *g = vx_shape_of(c);
    const cJSON *ex = g->execution;
    s->g = g;
    s->layers = g->layers;
    s->hidden = g->hidden;
    s->vocab = g->vocab;
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(ex, "embedding");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(emb, "scale");
    s->embed_scale = cJSON_IsNumber(sc) ? (float)sc->valuedouble : 1.0f;
    const cJSON *ffn = cJSON_GetObjectItemCaseSensitive(ex, "ffn");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(ffn, "kind");
    int any_ffn = 0;
    for (int i = 0; i < g->layers; i++)
        any_ffn |= g->layer[i].channel != VX_CHANNEL_NONE;
    if (!any_ffn && (!ffn || cJSON_IsNull(ffn))) {
        /* no layer has a channel mixer (a pure SSM stack): nothing for browse to bind */
        s->gated = 1;
        s->act = 0;
    } else if (!cJSON_IsString(kind))
        return vx_errf(err, VX_EFORMAT, "browse: execution.ffn.kind is missing");
    if (any_ffn || (ffn && !cJSON_IsNull(ffn))) {
        s->gated = strcmp(kind->valuestring, "gated") == 0;
        if (!s->gated && strcmp(kind->valuestring, "plain") != 0)
            return vx_errf(err, VX_EUNSUPPORTED, "browse: ffn kind \"%s\" is not gated or plain",
                           kind->valuestring);
        /* the engine's names, in eng_act's numbering */
        static const char *const acts[] = {"silu", "gelu_tanh", "gelu"};
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(ffn, "activation");
        s->act = -1;
        for (int a = 0; a < 3 && cJSON_IsString(act); a++)
            if (strcmp(act->valuestring, acts[a]) == 0)
                s->act = a;
        if (s->act < 0)
            return vx_errf(err, VX_EFORMAT, "browse: execution.ffn.activation is missing or not "
                           "silu, gelu_tanh or gelu");
    }
    int bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ffn, "bias"));
    /* experts with biases and GPT-OSS's clamped SwiGLU: what WALK scores is what the
     * engine computes (the engine's plan has validated both) */
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(ex, "moe");
    int expert_bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(moe, "expert_bias"));
    const cJSON *ea = cJSON_GetObjectItemCaseSensitive(moe, "expert_activation");
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(ea, "alpha"), *li = cJSON_GetObjectItemCaseSensitive(ea, "limit");
    if (cJSON_IsObject(ea)) {
        if (!cJSON_IsNumber(al) || !cJSON_IsNumber(li) || !(al->valuedouble > 0) || !(li->valuedouble > 0))
            return vx_errf(err, VX_EFORMAT, "browse: execution.moe.expert_activation needs positive "
                           "alpha and limit");
        s->glu_alpha = (float)al->valuedouble;
        s->glu_limit = (float)li->valuedouble;
    }
    const int experts = g->experts;
    s->embed = vx_find(c, "target.embedding", "weight");
    if (check_mat(s->embed, "target.embedding.weight", s->vocab, s->hidden, 0, err) != 0)
        return -1;
    s->layer = calloc((size_t)s->layers + 1, sizeof *s->layer);
    if (!s->layer)
        return vx_errf(err, VX_ENOMEM, "browse: out of memory");
    for (int i = 0; i < s->layers; i++) {
        brw_layer *L = &s->layer[i];
        L->g = &g->layer[i];
        int is_moe = L->g->channel == VX_CHANNEL_MOE;
        L->n_parts = is_moe ? experts : L->g->channel == VX_CHANNEL_DENSE;
        L->parts = calloc((size_t)L->n_parts + 1, sizeof *L->parts);
        if (!L->parts) {
            brw_shape_free(s);
            return vx_errf(err, VX_ENOMEM, "browse: out of memory");
        }
        for (int e = 0; e < L->n_parts; e++) {
            char prefix[128];
            if (is_moe)
                snprintf(prefix, sizeof prefix, "layers.%d.ffn.experts.%d", i, e);
            else
                snprintf(prefix, sizeof prefix, "layers.%d.ffn", i);
            int64_t want = e > 0 ? L->parts[0].rows : -1;
            if (bind_part(c, &L->parts[e], prefix, is_moe ? 1 : s->gated, is_moe ? expert_bias : bias,
                          s->hidden, want, err) != 0) {
                brw_shape_free(s);
                return -1;
            }
            L->parts[e].first = L->features;
            L->features += L->parts[e].rows;
            L->gate_bytes += L->parts[e].gate->nbytes;
            L->up_bytes += (L->parts[e].up ? L->parts[e].up->nbytes : 0) +
                           (L->parts[e].bias ? L->parts[e].bias->nbytes : 0) +
                           (L->parts[e].up_b ? L->parts[e].up_b->nbytes : 0);
        }
    }
    return 0;
}

void brw_shape_free(brw_shape *s)
{
    if (s->layer)
        for (int i = 0; i < s->layers; i++)
            free(s->layer[i].parts);
    free(s->layer);
    s->layer = NULL;
}

int brw_embed_row(const brw_shape *s, int32_t id, float *out, vx_err *err)
{
    if (id < 0 || id >= s->vocab)
        return vx_errf(err, VX_EARG, "browse: token id %d is outside the vocabulary (%d)", id,
                       s->vocab);
    size_t esz = s->embed->dtype == VX_F32 ? 4 : 2;
    const uint8_t *row = (const uint8_t *)s->embed->data + (size_t)id * (size_t)s->hidden * esz;
    vx_row_to_f32(s->embed->dtype, row, out, (size_t)s->hidden);
    return 0;
}

void brw_trim(const char *s, char *buf, size_t n)
{
    if (!n)
        return;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    size_t len = strlen(s);
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\n' ||
                   s[len - 1] == '\r'))
        len--;
    if (len >= n)
        len = n - 1;
    memcpy(buf, s, len);
    buf[len] = 0;
}

const vx_tensor **brw_shape_tensors(const brw_shape *s, size_t *n)
{
    size_t cap = 1;
    for (int l = 0; l < s->layers; l++) cap += 5 * (size_t)s->layer[l].n_parts;
    const vx_tensor **t = malloc(cap * sizeof *t);
    if (!t) return NULL;
    *n = 0;
    t[(*n)++] = s->embed;
    for (int l = 0; l < s->layers; l++)
        for (int e = 0; e < s->layer[l].n_parts; e++) {
            const brw_part *p = &s->layer[l].parts[e];
            const vx_tensor *read[5] = {p->gate, p->up, p->bias, p->gate_b, p->up_b};
            for (int k = 0; k < 5; k++)
                if (read[k]) t[(*n)++] = read[k];
        }
    return t;
}
