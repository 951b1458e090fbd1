/*
 * manifest.c — moe_manifest.json (seed §8; lql's layout in docs/lql/BANK.md): parsing and
 * structural validation of the per-layer MoE programme description, and the §8.4
 * programme registry. Validation here is structural (schema, layer range and uniqueness,
 * bank fields); unknown programme names are kept with id -1 and judged later by the
 * capability check in bank.c, so a manifest naming a future programme still parses.
 */
#include "vindex.h"
#include "vx_int.h"
#include "lyrw.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* §8.4: id, name, the region roles each programme needs, and whether lql executes it. */
static const vx_programme registry[] = {
    {0, "gated-mlp-v1", {VX_ROLE_GATE, VX_ROLE_UP, VX_ROLE_DOWN}, 3, 1},
    {1, "gated-mlp-fused-fc1-v1", {VX_ROLE_GATE_UP_FUSED, VX_ROLE_DOWN}, 2, 1},
    {2, "gpt-oss-expert-v1", {VX_ROLE_GATE, VX_ROLE_UP, VX_ROLE_DOWN, VX_ROLE_BIAS}, 4, 1},
    {3, "shared-routed-mlp-v1", {VX_ROLE_GATE, VX_ROLE_UP, VX_ROLE_DOWN}, 3, 0},
    {4, "latent-moe-v1",
     {VX_ROLE_GATE, VX_ROLE_UP, VX_ROLE_DOWN, VX_ROLE_LATENT_IN, VX_ROLE_LATENT_OUT}, 5, 0},
};

const vx_programme *vx_programme_find(const char *name)
{
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++) {
        if (strcmp(registry[i].name, name) == 0)
            return &registry[i];
    }
    return NULL;
}

const char *const vx_bank_slot_names[VX_BANK_SLOTS] = {"routed_bank", "shared_bank", "dense_bank"};

static int u32_field(const cJSON *obj, const char *key, uint32_t *out, const char *where,
                     vx_err *err)
{
    uint64_t v;
    if (vx_json_u64(cJSON_GetObjectItemCaseSensitive(obj, key), &v) < 0 || v > UINT32_MAX)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s: '%s' is not an unsigned 32-bit integer",
                       where, key);
    *out = (uint32_t)v;
    return 0;
}

static int parse_bank(const cJSON *b, int layer, int slot, vx_mbank *out, vx_err *err)
{
    char where[96];
    snprintf(where, sizeof where, "layer %d %s", layer, vx_bank_slot_names[slot]);
    if (!cJSON_IsObject(b))
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s is not an object", where);
    out->present = 1;
    out->programme = vx_json_str(b, "programme");
    out->storage = vx_json_str(b, "storage");
    if (!out->programme)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s names no programme", where);
    if (!out->storage)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s names no storage", where);
    if (u32_field(b, "bank_id", &out->bank_id, where, err) < 0 ||
        u32_field(b, "experts", &out->experts, where, err) < 0)
        return -1;
    if (out->bank_id > 0xFFFF)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s: bank_id %u does not fit LYRW's u16",
                       where, out->bank_id);
    if (out->experts == 0)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s: experts is 0", where);
    const vx_programme *p = vx_programme_find(out->programme);
    out->prog = p;
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(b, "programme_id");
    uint64_t id;
    if (p && pid && (vx_json_u64(pid, &id) < 0 || id != (uint64_t)p->id))
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s: programme_id disagrees with programme '%s' (registry id %d)",
                       where, out->programme, p->id);
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(b, "expert_dims");
    if (!cJSON_IsObject(dims))
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s has no expert_dims", where);
    strncat(where, " expert_dims", sizeof where - strlen(where) - 1);
    return u32_field(dims, "input", &out->input, where, err) < 0 ||
                   u32_field(dims, "intermediate", &out->intermediate, where, err) < 0 ||
                   u32_field(dims, "output", &out->output, where, err) < 0
               ? -1
               : 0;
}

/* e's `key`, where stated (absent or null: not), is the string `want`: the one arrangement
 * lql executes (a latent input space, transforms or another reduction named here were run
 * as the graph's plain MoE). `want` NULL: it must not be stated. */
static int stated(const cJSON *e, const char *key, const char *want, uint32_t layer, vx_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    if (!v || cJSON_IsNull(v) || (want && cJSON_IsString(v) && strcmp(v->valuestring, want) == 0))
        return 0;
    char txt[65];
    return vx_errf(err, VX_EUNSUPPORTED, "moe_manifest.json layer %u: %s %s is not executed by lql "
                   "(%s%s%s)", layer, key, vx_json_text(v, txt, sizeof txt),
                   want ? "it runs '" : "it runs none", want ? want : "", want ? "'" : "");
}

/* A manifest name of an operand the graph binds under its canonical name (NULL allowed:
 * the optional ones). */
static int names_operand(const cJSON *o, const char *key, const char *want, int optional,
                         uint32_t layer, vx_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if ((optional && (!v || cJSON_IsNull(v))) || (cJSON_IsString(v) && strcmp(v->valuestring, want) == 0))
        return 0;
    char txt[65];
    return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %u: %s %s is not the operand '%s'%s",
                   layer, key, vx_json_text(v, txt, sizeof txt), want, optional ? " (or null)" : "");
}

static int parse_layer(const cJSON *e, uint64_t num_layers, vx_mlayer *out, vx_err *err)
{
    uint64_t layer;
    const cJSON *lf = cJSON_GetObjectItemCaseSensitive(e, "layer");
    if (!cJSON_IsObject(e) || vx_json_u64(lf, &layer) < 0) {
        if (cJSON_IsNumber(lf))
            return vx_errf(err, VX_EFORMAT, "moe_manifest.json: layer %.17g is out of range (the graph has %llu layers)",
                           lf->valuedouble, (unsigned long long)num_layers);
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json: a layer entry has no numeric 'layer'");
    }
    if (layer >= num_layers)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json: layer %llu is out of range (the graph has %llu layers)",
                       (unsigned long long)layer, (unsigned long long)num_layers);
    out->layer = (uint32_t)layer;
    int any = 0;
    for (int s = 0; s < VX_BANK_SLOTS; s++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, vx_bank_slot_names[s]);
        if (!b || cJSON_IsNull(b))
            continue;
        if (parse_bank(b, (int)layer, s, &out->bank[s], err) < 0)
            return -1;
        any = 1;
    }
    if (!any)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %llu names no bank", (unsigned long long)layer);
    if (out->bank[VX_SLOT_DENSE].present &&
        (out->bank[VX_SLOT_ROUTED].present || out->bank[VX_SLOT_SHARED].present))
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %llu has a dense_bank beside routed or shared banks",
                       (unsigned long long)layer);
    if (out->bank[VX_SLOT_SHARED].present && !out->bank[VX_SLOT_ROUTED].present)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %llu has a shared_bank but no routed_bank",
                       (unsigned long long)layer);
    out->json = e;
    if (out->bank[VX_SLOT_ROUTED].present) {
        const cJSON *router = cJSON_GetObjectItemCaseSensitive(e, "router");
        const cJSON *sel = cJSON_GetObjectItemCaseSensitive(router, "selection");
        char where[64];
        snprintf(where, sizeof where, "layer %llu router selection", (unsigned long long)layer);
        if (!vx_json_str(router, "scores"))
            return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %llu: the routed bank has no router scores operand",
                           (unsigned long long)layer);
        if (u32_field(sel, "k", &out->top_k, where, err) < 0)
            return -1;
    }
    return 0;
}

int vx_schema_check(const cJSON *json, const char *label, int want, vx_err *err)
{
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(json, "schema");
    uint64_t s = 0;
    if (vx_json_u64(schema, &s) == 0 && s == (uint64_t)want)
        return 0;
    char got[64];
    if (cJSON_IsNumber(schema))
        snprintf(got, sizeof got, "%.17g", schema->valuedouble);
    else
        snprintf(got, sizeof got, "%s", schema ? "(not a number)" : "(none)");
    return vx_errf(err, VX_EVERSION, "%s schema %s is not supported; this lql reads schema %d", label, got,
                   want);
}

int vx_read_json_in(const char *dir, const char *rel, cJSON **out, vx_err *err)
{
    char path[PATH_MAX], *text = NULL;
    size_t n = 0;
    *out = NULL;
    if (vx_resolve_in(dir, rel, path, sizeof path, err) < 0)
        return -1;
    if (vx_read_small_file(path, rel, &text, &n, err) < 0) {
        if (err && err->code == VX_EMISSING)
            vx_errf(err, VX_EMISSING, "%s is missing from '%s' (index.json names it)", rel, dir);
        return -1;
    }
    int rc = vx_json_parse(rel, text, n, out, err);
    free(text);
    return rc;
}

/* The arrangement a parsed layer states beyond its banks: the one lql executes, its
 * operands under the names the graph binds. */
static int arrangement(const vx_mlayer *m, vx_err *err)
{
    const cJSON *e = m->json;
    const int routed = m->bank[VX_SLOT_ROUTED].present;
    const uint32_t L = m->layer;
    char name[96];
    if (stated(e, "input_space", "residual", L, err) || stated(e, "transforms", NULL, L, err) ||
        stated(e, "routed_output_norm", NULL, L, err) || stated(e, "combine", "residual_add", L, err) ||
        stated(e, "reduction", routed ? "gate_weighted_sum" : "identity", L, err))
        return -1;
    if (routed) {
        const cJSON *router = cJSON_GetObjectItemCaseSensitive(e, "router");
        snprintf(name, sizeof name, "layers.%u.ffn.router", L);
        if (names_operand(router, "scores", name, 0, L, err))
            return -1;
        snprintf(name, sizeof name, "layers.%u.ffn.router.score_bias", L);
        if (names_operand(router, "score_bias", name, 1, L, err) ||
            stated(cJSON_GetObjectItemCaseSensitive(router, "selection"), "kind", "top_k", L, err))
            return -1;
    }
    snprintf(name, sizeof name, "layers.%u.ffn.shared_gate", L);
    if (m->bank[VX_SLOT_SHARED].present &&
        names_operand(cJSON_GetObjectItemCaseSensitive(e, vx_bank_slot_names[VX_SLOT_SHARED]),
                      "gate", name, 1, L, err))
        return -1;
    return 0;
}

int vx_manifest_parse(cJSON *json, uint64_t num_layers, vx_manifest *m, vx_err *err)
{
    memset(m, 0, sizeof *m);
    m->json = json;
    if (vx_schema_check(json, "moe_manifest.json", VX_MANIFEST_SCHEMA, err) < 0) {
        vx_manifest_free(m);
        return -1;
    }
    m->object = vx_json_str(m->json, "object");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(m->json, "layers"), *e;
    int rc = 0;
    if (!m->object)
        rc = vx_errf(err, VX_EFORMAT, "moe_manifest.json names no object (the graph object its banks belong to)");
    else if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) == 0)
        rc = vx_errf(err, VX_EFORMAT, "moe_manifest.json has no 'layers' array");
    else if ((uint64_t)cJSON_GetArraySize(layers) > num_layers)
        rc = vx_errf(err, VX_EFORMAT, "moe_manifest.json lists %d layers; the graph has %llu",
                     cJSON_GetArraySize(layers), (unsigned long long)num_layers);
    else if (!(m->l = calloc((size_t)cJSON_GetArraySize(layers), sizeof *m->l)))
        rc = vx_errf(err, VX_ENOMEM, "out of memory reading moe_manifest.json");
    if (rc == 0) {
        cJSON_ArrayForEach(e, layers) {
            if (parse_layer(e, num_layers, &m->l[m->n], err) < 0) {
                rc = -1;
                break;
            }
            for (size_t i = 0; i < m->n; i++) {
                if (m->l[i].layer == m->l[m->n].layer) {
                    rc = vx_errf(err, VX_EFORMAT, "moe_manifest.json lists layer %u twice", m->l[i].layer);
                    break;
                }
            }
            if (rc < 0)
                break;
            m->n++;
        }
    }
    for (size_t i = 0; rc == 0 && i < m->n; i++)
        rc = arrangement(&m->l[i], err);
    if (rc < 0)
        vx_manifest_free(m);
    return rc;
}

void vx_manifest_free(vx_manifest *m)
{
    cJSON_Delete(m->json);
    free(m->l);
    memset(m, 0, sizeof *m);
}
