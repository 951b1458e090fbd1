/*
 * graph_shape.c — the system graph's components validated once, at open, into typed
 * shapes (vx_graph_shape): geometry, per-layer token mixer and channel mixer, and the
 * continuation state each layer declares. docs/lql/GRAPH.md is the schema.
 *
 * Everything here is structure: kinds are known names, widths positive integers, every
 * layer kind has the execution section it needs, every state region a known dtype and a
 * positive shape. What an operator does with its facts is the engine plan's to judge.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "vx_int.h"

static const char *const mixer_names[] = {NULL, "softmax_attention", "mla", "gated_deltanet",
                                          "mamba2"};
/* the execution section each token mixer reads its facts from */
static const char *const mixer_sections[] = {NULL, "attention", "mla", "gated_deltanet",
                                             "mamba2"};
static const char *const channel_names[] = {"none", "dense", "moe"};

const char *vx_mixer_name(vx_mixer k)
{
    return k >= VX_MIXER_ATTENTION && k <= VX_MIXER_MAMBA2 ? mixer_names[k] : "?";
}

const char *vx_channel_name(vx_channel k)
{
    return k >= VX_CHANNEL_NONE && k <= VX_CHANNEL_MOE ? channel_names[k] : "?";
}

typedef struct rd {
    vx_err *err;
    char where[96];          /* "" for the primary component, else "component 'x' " */
} rd;

static const cJSON *item(const cJSON *o, const char *k)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static int absent(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* A positive integer no larger than max, as int. */
static int posint(rd *r, const cJSON *o, const char *section, const char *k, double max, int *out)
{
    const cJSON *v = item(o, k);
    *out = 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > max ||
        v->valuedouble != floor(v->valuedouble))
        return vx_errf(r->err, VX_EFORMAT, "system graph: %s%s%s is missing or not a positive integer",
                       r->where, section, k);
    *out = (int)v->valuedouble;
    return 0;
}

/* An execution section: NULL when null or absent; -1 through *bad when not an object. */
static const cJSON *section(rd *r, const cJSON *ex, const char *k, int *bad)
{
    const cJSON *v = item(ex, k);
    if (absent(v)) return NULL;
    if (!cJSON_IsObject(v)) {
        *bad = vx_errf(r->err, VX_EFORMAT, "system graph: %sexecution.%s is not an object",
                       r->where, k);
        return NULL;
    }
    return v;
}

static int geometry(rd *r, const cJSON *comp, vx_graph_shape *s)
{
    const cJSON *ex = item(comp, "execution"), *ctx;
    if (posint(r, comp, "", "num_layers", 65536, &s->layers) ||
        posint(r, comp, "", "hidden_size", 1e9, &s->hidden) ||
        posint(r, comp, "", "vocab_size", 1e9, &s->vocab))
        return -1;
    if (!cJSON_IsObject(ex))
        return vx_errf(r->err, VX_EFORMAT, "system graph: %sexecution is missing or not an object",
                       r->where);
    ctx = item(ex, "context_length");
    if (absent(ctx) ? posint(r, comp, "", "context_length", 1e9, &s->context)
                    : posint(r, ex, "execution.", "context_length", 1e9, &s->context))
        return -1;
    /* the encoder writes both; two lengths that disagree leave no way to tell which holds */
    int outer;
    if (!absent(ctx) && !absent(item(comp, "context_length")) &&
        (posint(r, comp, "", "context_length", 1e9, &outer) || outer != s->context))
        return vx_errf(r->err, VX_EFORMAT, "system graph: %scontext_length disagrees with "
                       "execution.context_length %d", r->where, s->context);
    int bad = 0;
    const cJSON *at = section(r, ex, "attention", &bad), *ffn = section(r, ex, "ffn", &bad),
                *moe = section(r, ex, "moe", &bad);
    if (bad) return -1;
    if (at && (posint(r, at, "execution.attention.", "heads", 1e9, &s->heads) ||
               posint(r, at, "execution.attention.", "kv_heads", 1e9, &s->kv_heads) ||
               posint(r, at, "execution.attention.", "head_dim", 1e9, &s->head_dim)))
        return -1;
    if (ffn && posint(r, ffn, "execution.ffn.", "intermediate", 1e9, &s->intermediate)) return -1;
    if (moe && (posint(r, moe, "execution.moe.", "experts", 65536, &s->experts) ||
                posint(r, moe, "execution.moe.", "top_k", 65536, &s->top_k) ||
                posint(r, moe, "execution.moe.", "expert_intermediate", 1e9, &s->expert_intermediate)))
        return -1;
    s->execution = ex;
    return 0;
}

/* Index of str among names (entries may be NULL), or -1. */
static int index_of(const char *str, const char *const *names, int n)
{
    for (int i = 0; str && i < n; i++)
        if (names[i] && strcmp(names[i], str) == 0) return i;
    return -1;
}

static int pick(const cJSON *v, const char *const *names, int n)
{
    return cJSON_IsString(v) ? index_of(v->valuestring, names, n) : -1;
}

static int state_region(rd *r, int l, const cJSON *e, int k, vx_state_region *g)
{
    static const char *const keys[] = {"name", "dtype", "shape", "per_token"};
    if (!cJSON_IsObject(e))
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: state[%d] is not an object", r->where, l, k);
    for (const cJSON *v = e->child; v; v = v->next)
        if (index_of(v->string, keys, 4) < 0)
            return vx_errf(r->err, VX_EUNSUPPORTED,
                           "%slayer %d: state[%d] field '%s' is not known to this reader",
                           r->where, l, k, v->string);
    const cJSON *nm = item(e, "name"), *dt = item(e, "dtype"), *sh = item(e, "shape"),
                *pt = item(e, "per_token");
    if (!cJSON_IsString(nm) || !*nm->valuestring || strlen(nm->valuestring) >= sizeof g->name)
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: state[%d].name is missing or not a short string",
                       r->where, l, k);
    snprintf(g->name, sizeof g->name, "%s", nm->valuestring);
    if (!cJSON_IsString(dt) || vx_dtype_parse(dt->valuestring, &g->dtype) < 0 ||
        (g->dtype != VX_F32 && g->dtype != VX_F16 && g->dtype != VX_BF16))
        return vx_errf(r->err, VX_EUNSUPPORTED, "%slayer %d: state region '%s' dtype %s%s%s is not f32, f16 or bf16",
                       r->where, l, g->name, cJSON_IsString(dt) ? "'" : "",
                       cJSON_IsString(dt) ? dt->valuestring : "(missing)", cJSON_IsString(dt) ? "'" : "");
    if (!cJSON_IsBool(pt))
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: state region '%s' per_token is not a boolean",
                       r->where, l, g->name);
    g->per_token = cJSON_IsTrue(pt);
    int nd = cJSON_IsArray(sh) ? cJSON_GetArraySize(sh) : 0;
    if (nd < 1 || nd > VX_STATE_DIMS)
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: state region '%s' shape is not a list of 1 to %d sizes",
                       r->where, l, g->name, VX_STATE_DIMS);
    g->ndim = nd;
    g->elems = 1;
    int d = 0;
    for (const cJSON *v = sh->child; v; v = v->next, d++) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1 << 30 ||
            v->valuedouble != floor(v->valuedouble))
            return vx_errf(r->err, VX_EFORMAT, "%slayer %d: state region '%s' shape[%d] is not a positive integer",
                           r->where, l, g->name, d);
        g->shape[d] = (int64_t)v->valuedouble;
        g->elems *= (uint64_t)g->shape[d];
        if (g->elems > (uint64_t)1 << 36)
            return vx_errf(r->err, VX_EFORMAT, "%slayer %d: state region '%s' is too large",
                           r->where, l, g->name);
    }
    g->bytes = g->elems * (g->dtype == VX_F32 ? 4 : 2);
    return 0;
}

static int layer(rd *r, vx_graph_shape *s, const cJSON *lj, int l)
{
    vx_layer_shape *L = &s->layer[l];
    static const char *const keys[] = {"operator", "window", "ffn", "rope", "state"};
    if (!cJSON_IsObject(lj))
        return vx_errf(r->err, VX_EFORMAT, "system graph: %slayers[%d] is not an object", r->where, l);
    L->json = lj;
    for (const cJSON *v = lj->child; v; v = v->next)
        if (index_of(v->string, keys, 5) < 0 &&
            !cJSON_IsNull(v) && !cJSON_IsFalse(v))
            return vx_errf(r->err, VX_EUNSUPPORTED, "%slayer %d: field '%s' is not supported by this executor",
                           r->where, l, v->string);
    for (int i = 0; i < 5; i++)   /* present, null when off: absence is not a default */
        if (!item(lj, keys[i]))
            return vx_errf(r->err, VX_EFORMAT, "%slayer %d: field '%s' is missing (a field is always "
                           "present, null when its feature is off)", r->where, l, keys[i]);
    const cJSON *op = item(lj, "operator"), *ffn = item(lj, "ffn"), *win = item(lj, "window"),
                *st = item(lj, "state");
    if (!cJSON_IsString(op))
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: operator is missing", r->where, l);
    int k = pick(op, mixer_names, 5);
    if (k < 0)
        return vx_errf(r->err, VX_EUNSUPPORTED, "%slayer %d: operator '%s' is not a token mixer this "
                       "executor knows (softmax_attention, mla, gated_deltanet, mamba2)",
                       r->where, l, op->valuestring);
    L->mixer = (vx_mixer)k;
    if (absent(item(s->execution, mixer_sections[k])))
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: operator '%s' but execution.%s is null",
                       r->where, l, op->valuestring, mixer_sections[k]);
    if (!cJSON_IsString(ffn))
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: ffn operator is missing", r->where, l);
    k = pick(ffn, channel_names, 3);
    if (k < 0)
        return vx_errf(r->err, VX_EUNSUPPORTED, "%slayer %d: ffn operator '%s' is not a channel mixer "
                       "this executor knows (dense, moe, none)", r->where, l, ffn->valuestring);
    L->channel = (vx_channel)k;
    if (L->channel == VX_CHANNEL_DENSE && !s->intermediate)
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: ffn 'dense' but execution.ffn is null", r->where, l);
    if (L->channel == VX_CHANNEL_MOE && !s->experts)
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: ffn 'moe' but execution.moe is null", r->where, l);
    L->features = L->channel == VX_CHANNEL_DENSE ? s->intermediate
                  : L->channel == VX_CHANNEL_MOE ? (int64_t)s->experts * s->expert_intermediate : 0;
    if (!absent(win)) {
        if (!cJSON_IsNumber(win) || win->valuedouble < 1 || win->valuedouble > 1e9 ||
            win->valuedouble != floor(win->valuedouble))
            return vx_errf(r->err, VX_EFORMAT, "%slayer %d: window is not a positive integer", r->where, l);
        if (L->mixer != VX_MIXER_ATTENTION && L->mixer != VX_MIXER_MLA)
            return vx_errf(r->err, VX_EFORMAT, "%slayer %d: a window on operator '%s', which does not attend",
                           r->where, l, op->valuestring);
        L->window = (int)win->valuedouble;
    }
    /* a layer's own rotary embedding on a recurrent mixer would be ignored, not executed */
    if (!absent(item(lj, "rope")) && L->mixer != VX_MIXER_ATTENTION && L->mixer != VX_MIXER_MLA)
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: a rope on operator '%s', which does not attend",
                       r->where, l, op->valuestring);
    if (!cJSON_IsArray(st))
        return vx_errf(r->err, VX_EFORMAT, "%slayer %d: state is missing or not a list of regions",
                       r->where, l);
    int n = cJSON_GetArraySize(st), i = 0;
    if (n > VX_STATE_MAX)
        return vx_errf(r->err, VX_EUNSUPPORTED, "%slayer %d: %d state regions (at most %d)", r->where,
                       l, n, VX_STATE_MAX);
    for (const cJSON *e = st->child; e; e = e->next, i++) {
        vx_state_region *g = &L->state[i];
        if (state_region(r, l, e, i, g)) return -1;
        for (int j = 0; j < i; j++)
            if (strcmp(L->state[j].name, g->name) == 0)
                return vx_errf(r->err, VX_EFORMAT, "%slayer %d: state region '%s' is declared twice",
                               r->where, l, g->name);
        *(g->per_token ? &L->state_per_token : &L->state_fixed) += g->bytes;
    }
    L->nstate = n;
    s->features += L->features;
    s->state_per_token += L->state_per_token;
    s->state_fixed += L->state_fixed;
    return 0;
}

static int component(rd *r, const cJSON *comp, vx_graph_shape *s)
{
    s->component = comp;
    s->id = vx_json_str(comp, "id");
    s->role = vx_json_str(comp, "role");
    if (geometry(r, comp, s)) return -1;
    const cJSON *ls = item(comp, "layers");
    if (!cJSON_IsArray(ls) || cJSON_GetArraySize(ls) != s->layers)
        return vx_errf(r->err, VX_EFORMAT, "system graph: %scomponent.layers must list %d layers",
                       r->where, s->layers);
    s->layer = calloc((size_t)s->layers, sizeof *s->layer);
    if (!s->layer) return vx_errf(r->err, VX_ENOMEM, "out of memory reading %d layers", s->layers);
    int l = 0;
    for (const cJSON *lj = ls->child; lj; lj = lj->next, l++)
        if (layer(r, s, lj, l)) return -1;
    return 0;
}

int vx_shapes_read(const cJSON *graph, const cJSON *primary, vx_graph_shape **out, size_t *n,
                   vx_err *err)
{
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(graph, "components"), *comp;
    int cnt = cJSON_GetArraySize(comps), i = 0;
    *out = NULL;
    *n = 0;
    vx_graph_shape *s = calloc((size_t)(cnt > 0 ? cnt : 1), sizeof *s);
    if (!s) return vx_errf(err, VX_ENOMEM, "out of memory reading the system graph");
    /* the primary first, so vx_shape_of is s[0] */
    rd r = {err, ""};
    if (component(&r, primary, &s[i++])) goto fail;
    cJSON_ArrayForEach(comp, comps) {
        if (comp == primary) continue;
        const char *id = vx_json_str(comp, "id");
        snprintf(r.where, sizeof r.where, "component '%s' ", id ? id : "?");
        if (component(&r, comp, &s[i++])) goto fail;
    }
    *out = s;
    *n = (size_t)i;
    return 0;
fail:
    vx_shapes_free(s, (size_t)i);
    return -1;
}

void vx_shapes_free(vx_graph_shape *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++) free(s[i].layer);
    free(s);
}
