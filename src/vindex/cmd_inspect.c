/*
 * cmd_inspect.c — the read-only views of a container: `inspect` (summary), `describe`
 * (one object's tensors or a component's execution surface), `representations` and
 * `precision` (bits per weight from stored bytes). Human output is aligned tables with
 * units; --json prints the same facts as one JSON document.
 */
#include "cli.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* Per-representation totals, in graph object order. */
typedef struct rep_stat {
    const char *id, *object;
    const cJSON *rec;        /* index.json representations[id] */
    size_t tensors;
    uint64_t bytes, elems;
    unsigned dtypes;         /* bit per vx_dtype present */
    uint64_t dbytes[VX_DTYPE_COUNT], delems[VX_DTYPE_COUNT];
} rep_stat;

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *str(const cJSON *o, const char *k, const char *dflt)
{
    const cJSON *v = get(o, k);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = get(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static int in_list(const cJSON *list, const char *s)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        if (cJSON_IsString(e) && strcmp(e->valuestring, s) == 0)
            return 1;
    }
    return 0;
}

/* Totals for every representation a graph object lists; caller frees. */
static rep_stat *rep_stats(const vx_container *c, size_t *n)
{
    const cJSON *reps = get(vx_index_json(c), "representations"), *o, *r;
    size_t cap = 0;
    *n = 0;
    cJSON_ArrayForEach(o, get(vx_graph_json(c), "objects"))
        cap += (size_t)cJSON_GetArraySize(get(o, "representations"));
    rep_stat *s = calloc(cap ? cap : 1, sizeof *s);
    if (!s)
        return NULL;
    cJSON_ArrayForEach(o, get(vx_graph_json(c), "objects")) {
        cJSON_ArrayForEach(r, get(o, "representations")) {
            rep_stat *x = &s[(*n)++];
            x->id = r->valuestring;
            x->object = str(o, "id", "?");
            x->rec = get(reps, x->id);
        }
    }
    /* From every mapped segment, so representations a profile does not bind count too. */
    vx_segment_view v;
    for (size_t i = 0; vx_segment_at(c, i, &v) == 0; i++) {
        for (size_t j = 0; j < *n; j++) {
            if (strcmp(s[j].object, v.object) != 0 || !in_list(get(s[j].rec, "segments"), v.rel))
                continue;
            for (size_t k = 0; k < v.hdr->n; k++) {
                const vx_seg_tensor *t = &v.hdr->t[k];
                uint64_t e = 1;
                for (int d = 0; d < t->ndim; d++)
                    e *= (uint64_t)t->shape[d];
                s[j].tensors++;
                s[j].bytes += t->length;
                s[j].elems += e;
                s[j].dtypes |= 1u << t->dtype;
                s[j].dbytes[t->dtype] += t->length;
                s[j].delems[t->dtype] += e;
            }
            break;
        }
    }
    return s;
}

/* Opens a->pos[0] and totals its representations (*s, caller frees); *w is the width of
 * the longest representation id, at least 14. NULL with *rc set on failure. */
static vx_container *open_stats(const vindex_args *a, rep_stat **s, size_t *n, int *w, int *rc)
{
    vx_container *c = vindex_open(a, rc);
    if (!c)
        return NULL;
    *s = rep_stats(c, n);
    if (!*s) {
        vx_close(c);
        *rc = vindex_fail(a, "out of memory");
        return NULL;
    }
    *w = 14;
    for (size_t i = 0; i < *n; i++)
        *w = (int)strlen((*s)[i].id) > *w ? (int)strlen((*s)[i].id) : *w;
    return c;
}

/* "bf16" or "bf16+f32": the dtypes present. */
static const char *dtype_set(unsigned mask, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int d = 0; d < VX_DTYPE_COUNT && at < size; d++) {
        if (mask & (1u << d))
            at += (size_t)snprintf(buf + at, size - at, "%s%s", at ? "+" : "", vx_dtype_name((vx_dtype)d));
    }
    return at ? buf : "-";
}

static cJSON *dtype_array(unsigned mask)
{
    cJSON *a = cJSON_CreateArray();
    for (int d = 0; d < VX_DTYPE_COUNT; d++) {
        if (mask & (1u << d))
            cJSON_AddItemToArray(a, cJSON_CreateString(vx_dtype_name((vx_dtype)d)));
    }
    return a;
}

static uint64_t disk_bytes(const vx_container *c, size_t *nseg)
{
    uint64_t total = 0;
    const cJSON *s;
    *nseg = 0;
    cJSON_ArrayForEach(s, get(vx_index_json(c), "segments")) {
        double b = num(s, "bytes");
        total += b > 0 ? (uint64_t)b : 0;
        (*nseg)++;
    }
    return total;
}

VINDEX_HANDLER(inspect)
{
    int rc, w;
    size_t n = 0, nseg = 0;
    rep_stat *s;
    vx_container *c = open_stats(a, &s, &n, &w, &rc);
    if (!c)
        return rc;
    const cJSON *ix = vx_index_json(c), *comp = vx_component(c);
    const cJSON *ex = get(comp, "execution"), *att = get(ex, "attention"), *ffn = get(ex, "ffn");
    uint64_t payload = 0, disk = disk_bytes(c, &nseg);
    for (size_t i = 0; i < n; i++)
        payload += s[i].bytes;
    if (a->json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "container", vx_dir(c));
        cJSON_AddNumberToObject(doc, "version", vx_version(c));
        cJSON_AddStringToObject(doc, "generation", "VINDEX3");
        cJSON_AddStringToObject(doc, "shape", vx_container_shape(c) == VX_SHAPE_BANK ? "bank" : "graph");
        cJSON_AddStringToObject(doc, "model", str(ix, "model", ""));
        cJSON_AddStringToObject(doc, "family", str(ix, "family", ""));
        cJSON_AddStringToObject(doc, "authority", str(ix, "authority", ""));
        cJSON_AddStringToObject(doc, "index_sha256", vx_index_sha256(c));
        cJSON *cj = cJSON_AddObjectToObject(doc, "component");
        cJSON_AddStringToObject(cj, "id", str(comp, "id", ""));
        cJSON_AddStringToObject(cj, "role", str(comp, "role", ""));
        const vx_graph_shape *g = vx_shape_of(c);
        cJSON_AddNumberToObject(cj, "num_layers", g->layers);
        cJSON_AddNumberToObject(cj, "hidden_size", g->hidden);
        cJSON_AddNumberToObject(cj, "vocab_size", g->vocab);
        cJSON_AddNumberToObject(cj, "context_length", g->context);
        cJSON_AddNumberToObject(cj, "state_bytes_per_position", (double)g->state_per_token);
        cJSON_AddNumberToObject(cj, "state_bytes_fixed", (double)g->state_fixed);
        cJSON *objs = cJSON_AddArrayToObject(doc, "representations");
        for (size_t i = 0; i < n; i++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "id", s[i].id);
            cJSON_AddStringToObject(r, "object", s[i].object);
            cJSON_AddNumberToObject(r, "tensors", (double)s[i].tensors);
            cJSON_AddNumberToObject(r, "bytes", (double)s[i].bytes);
            cJSON_AddItemToObject(r, "dtypes", dtype_array(s[i].dtypes));
            cJSON_AddItemToArray(objs, r);
        }
        cJSON *profs = cJSON_AddArrayToObject(doc, "profiles");
        const cJSON *p;
        const char *auth;
        vx_err perr = {0};
        vx_profile_authority(ix, vx_graph_json(c), NULL, &auth, &perr);
        cJSON *b = cJSON_CreateObject();
        cJSON_AddNullToObject(b, "profile");
        cJSON_AddStringToObject(b, "authority", auth);
        cJSON_AddItemToArray(profs, b);
        cJSON_ArrayForEach(p, get(ix, "profiles")) {
            const char *pn = str(p, "profile", "?");
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "profile", pn);
            cJSON_AddStringToObject(r, "authority",
                                    vx_profile_authority(ix, vx_graph_json(c), pn, &auth, &perr) == 0 ? auth : "invalid");
            cJSON_AddItemToArray(profs, r);
        }
        cJSON_AddNumberToObject(doc, "tensors", (double)vx_tensor_count(c));
        cJSON_AddNumberToObject(doc, "payload_bytes", (double)payload);
        cJSON_AddNumberToObject(doc, "segments", (double)nseg);
        cJSON_AddNumberToObject(doc, "disk_bytes", (double)disk);
        free(s);
        vx_close(c);
        return vindex_emit(doc);
    }
    char b1[32], b2[32], dt[64];
    printf("container  %s\n", vx_dir(c));
    printf("format     VINDEX3 (index.json version %d), %s shape, authority %s\n", vx_version(c),
           vx_container_shape(c) == VX_SHAPE_BANK ? "bank" : "graph", str(ix, "authority", "?"));
    printf("model      %s (family %s)\n", str(ix, "model", "?"), str(ix, "family", "?"));
    printf("index      sha256 %s\n", vx_index_sha256(c));
    const vx_graph_shape *g = vx_shape_of(c);
    printf("%-10s %s: %d layers, hidden %d, vocab %d, context %d\n", str(comp, "role", "component"),
           str(comp, "id", "?"), g->layers, g->hidden, g->vocab, g->context);
    printf("state      %llu bytes per position, %llu fixed\n",
           (unsigned long long)g->state_per_token, (unsigned long long)g->state_fixed);
    if (att)
        printf("attention  %.0f heads, %.0f kv heads, head_dim %.0f%s\n", num(att, "heads"),
               num(att, "kv_heads"), num(att, "head_dim"),
               cJSON_IsObject(get(ex, "mla")) ? " (mla)" : "");
    if (ffn)
        printf("ffn        %s %s, intermediate %.0f%s\n", str(ffn, "kind", "?"), str(ffn, "activation", "?"),
               num(ffn, "intermediate"), cJSON_IsObject(get(ex, "moe")) ? " (moe)" : "");
    printf("representations\n");
    for (size_t i = 0; i < n; i++)
        printf("  %-*s %5zu tensor%s %10s  %s\n", w, s[i].id, s[i].tensors, s[i].tensors == 1 ? " " : "s",
               vindex_bytes(s[i].bytes, b1, sizeof b1), dtype_set(s[i].dtypes, dt, sizeof dt));
    const cJSON *p;
    const char *auth;
    vx_err perr = {0};
    vx_profile_authority(ix, vx_graph_json(c), NULL, &auth, &perr);
    printf("profiles   (baseline) %s", auth);
    cJSON_ArrayForEach(p, get(ix, "profiles")) {
        const char *pn = str(p, "profile", "?");
        printf(", %s %s", pn, vx_profile_authority(ix, vx_graph_json(c), pn, &auth, &perr) == 0 ? auth : "invalid");
    }
    printf("\n");
    printf("total      %zu tensors, %s payload in %zu segment%s (%s on disk)\n", vx_tensor_count(c),
           vindex_bytes(payload, b1, sizeof b1), nseg, nseg == 1 ? "" : "s",
           vindex_bytes(disk, b2, sizeof b2));
    free(s);
    vx_close(c);
    return VINDEX_OK;
}

VINDEX_HANDLER(representations)
{
    int rc, w;
    size_t n = 0;
    rep_stat *s;
    vx_container *c = open_stats(a, &s, &n, &w, &rc);
    if (!c)
        return rc;
    cJSON *doc = a->json ? cJSON_CreateArray() : NULL;
    int fw = 8;
    for (size_t i = 0; i < n; i++) {
        int len = (int)strlen(str(s[i].rec, "fidelity", "-"));
        fw = len > fw ? len : fw;
    }
    if (!doc)
        printf("%-*s  %-8s  %-*s  %7s  %10s  %s\n", w, "representation", "dtype", fw, "fidelity",
               "tensors", "bytes", "segments");
    for (size_t i = 0; i < n; i++) {
        char dt[64], b[32];
        const char *dtype = str(s[i].rec, "dtype", dtype_set(s[i].dtypes, dt, sizeof dt));
        const cJSON *segs = get(s[i].rec, "segments");
        if (doc) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "id", s[i].id);
            cJSON_AddStringToObject(r, "object", s[i].object);
            cJSON_AddStringToObject(r, "encoding", str(s[i].rec, "encoding", ""));
            cJSON_AddStringToObject(r, "dtype", dtype);
            cJSON_AddStringToObject(r, "fidelity", str(s[i].rec, "fidelity", ""));
            cJSON_AddNumberToObject(r, "tensors", (double)s[i].tensors);
            cJSON_AddNumberToObject(r, "bytes", (double)s[i].bytes);
            cJSON_AddItemToObject(r, "segments", cJSON_Duplicate(segs, 1));
            cJSON_AddItemToArray(doc, r);
            continue;
        }
        printf("%-*s  %-8s  %-*s  %7zu  %10s  ", w, s[i].id, dtype, fw, str(s[i].rec, "fidelity", "-"),
               s[i].tensors, vindex_bytes(s[i].bytes, b, sizeof b));
        const cJSON *e;
        int first = 1;
        cJSON_ArrayForEach(e, segs) {
            printf("%s%s", first ? "" : ", ", cJSON_IsString(e) ? e->valuestring : "?");
            first = 0;
        }
        printf("\n");
    }
    free(s);
    vx_close(c);
    return doc ? vindex_emit(doc) : VINDEX_OK;
}

/* One row of `precision`: with json, a new object {key: name (when key), weights, bytes,
 * bits_per_weight} for the caller to place; otherwise the text line is printed (name in a
 * column w wide) and NULL returned. */
static cJSON *precision_row(int json, const char *key, const char *name, uint64_t weights,
                            uint64_t bytes, int w)
{
    double bpw = weights ? 8.0 * (double)bytes / (double)weights : 0;
    if (!json) {
        char b[32];
        printf("%-*s  %14llu  %10s  %9.3f\n", w, name, (unsigned long long)weights,
               vindex_bytes(bytes, b, sizeof b), bpw);
        return NULL;
    }
    cJSON *r = cJSON_CreateObject();
    if (key)
        cJSON_AddStringToObject(r, key, name);
    cJSON_AddNumberToObject(r, "weights", (double)weights);
    cJSON_AddNumberToObject(r, "bytes", (double)bytes);
    cJSON_AddNumberToObject(r, "bits_per_weight", bpw);
    return r;
}

VINDEX_HANDLER(precision)
{
    int rc, w;
    size_t n = 0;
    rep_stat *s;
    vx_container *c = open_stats(a, &s, &n, &w, &rc);
    if (!c)
        return rc;
    /* Per dtype: over every representation (each dtype's own bits per weight, block scales
     * included). Overall: the bound (baseline) representations, one per object, so a
     * weight is counted once however many representations the container holds. */
    uint64_t bytes = 0, elems = 0, dbytes[VX_DTYPE_COUNT] = {0}, delems[VX_DTYPE_COUNT] = {0};
    for (size_t i = 0; i < n; i++) {
        for (int d = 0; d < VX_DTYPE_COUNT; d++) {
            dbytes[d] += s[i].dbytes[d];
            delems[d] += s[i].delems[d];
        }
        const char *bound = vx_bound_representation(c, s[i].object);
        if (bound && strcmp(bound, s[i].id) == 0) {
            bytes += s[i].bytes;
            elems += s[i].elems;
        }
    }
    cJSON *doc = a->json ? cJSON_CreateObject() : NULL, *reps = NULL, *dts = NULL;
    if (doc) {
        reps = cJSON_AddArrayToObject(doc, "representations");
        dts = cJSON_AddArrayToObject(doc, "dtypes");
    } else {
        printf("%-*s  %14s  %10s  %9s\n", w, "representation", "weights", "bytes", "bits/wt");
    }
    for (size_t i = 0; i < n; i++) {
        cJSON *r = precision_row(doc != NULL, "id", s[i].id, s[i].elems, s[i].bytes, w);
        if (r)
            cJSON_AddItemToArray(reps, r);
    }
    for (int d = 0; d < VX_DTYPE_COUNT; d++) {
        if (!delems[d])
            continue;
        cJSON *r = precision_row(doc != NULL, "dtype", vx_dtype_name((vx_dtype)d), delems[d],
                                 dbytes[d], w);
        if (r)
            cJSON_AddItemToArray(dts, r);
    }
    cJSON *t = precision_row(doc != NULL, NULL, "overall", elems, bytes, w);
    if (t)
        cJSON_AddItemToObject(doc, "overall", t);
    free(s);
    vx_close(c);
    return doc ? vindex_emit(doc) : VINDEX_OK;
}

/* A source binding as text: "name", or "name rows [a, b)" / "cols [a, b) transposed". */
static void binding_text(const cJSON *b, char *buf, size_t size)
{
    if (cJSON_IsString(b)) {
        snprintf(buf, size, "%s", b->valuestring);
        return;
    }
    const cJSON *rows = get(b, "rows"), *cols = get(b, "cols");
    size_t at = (size_t)snprintf(buf, size, "%s", str(b, "tensor", "-"));
    if (cJSON_GetArraySize(rows) == 2 && at < size)
        at += (size_t)snprintf(buf + at, size - at, " rows [%.0f, %.0f)",
                               cJSON_GetArrayItem(rows, 0)->valuedouble, cJSON_GetArrayItem(rows, 1)->valuedouble);
    if (cJSON_GetArraySize(cols) == 2 && at < size)
        at += (size_t)snprintf(buf + at, size - at, " cols [%.0f, %.0f)",
                               cJSON_GetArrayItem(cols, 0)->valuedouble, cJSON_GetArrayItem(cols, 1)->valuedouble);
    if (cJSON_IsTrue(get(b, "transpose")) && at < size)
        snprintf(buf + at, size - at, " transposed");
}

static int describe_object(const vindex_args *a, const vx_container *c, const cJSON *o)
{
    const char *id = str(o, "id", "?");
    const cJSON *bind = get(o, "source_bindings");
    char sh[64], b[32], src[256];
    cJSON *doc = NULL, *arr = NULL;
    if (a->json) {
        doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "id", id);
        cJSON_AddStringToObject(doc, "kind", str(o, "kind", ""));
        cJSON_AddStringToObject(doc, "component", str(o, "component", ""));
        cJSON_AddItemToObject(doc, "representations", cJSON_Duplicate(get(o, "representations"), 1));
        arr = cJSON_AddArrayToObject(doc, "tensors");
    } else {
        printf("object     %s (%s, component %s)\n", id, str(o, "kind", "?"), str(o, "component", "?"));
    }
    int w = 4, n = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if (strcmp(t->object, id) == 0 && (int)strlen(t->name) > w)
            w = (int)strlen(t->name);
    }
    if (!doc)
        printf("%-*s  %-5s  %-16s  %10s  %s\n", w, "name", "dtype", "shape", "bytes", "source");
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if (strcmp(t->object, id) != 0)
            continue;
        const cJSON *bb = get(bind, t->name);
        if (bb)
            binding_text(bb, src, sizeof src);
        else
            snprintf(src, sizeof src, "-");
        n++;
        total += t->nbytes;
        if (doc) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "name", t->name);
            cJSON_AddStringToObject(r, "dtype", vx_dtype_name(t->dtype));
            cJSON *shape = cJSON_AddArrayToObject(r, "shape");
            for (int d = 0; d < t->ndim; d++)
                cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
            cJSON_AddNumberToObject(r, "bytes", (double)t->nbytes);
            cJSON_AddStringToObject(r, "segment", t->segment);
            cJSON_AddNumberToObject(r, "offset", (double)t->offset);
            cJSON_AddItemToObject(r, "source", bb ? cJSON_Duplicate(bb, 1) : cJSON_CreateNull());
            cJSON_AddItemToArray(arr, r);
        } else {
            printf("%-*s  %-5s  %-16s  %10s  %s\n", w, t->name, vx_dtype_name(t->dtype),
                   vindex_shape(t, sh, sizeof sh), vindex_bytes(t->nbytes, b, sizeof b), src);
        }
    }
    if (doc)
        return vindex_emit(doc);
    printf("%d tensor%s, %s\n", n, n == 1 ? "" : "s", vindex_bytes(total, b, sizeof b));
    return VINDEX_OK;
}

/* Print a JSON value's leaves as "path  value" lines. */
static void flatten(const cJSON *v, const char *path)
{
    if (cJSON_IsObject(v)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", e->string);
            flatten(e, sub);
        }
        return;
    }
    char *s = cJSON_PrintUnformatted(v);
    printf("  %-40s %s\n", path, s ? s : "?");
    free(s);
}

static int describe_component(const vindex_args *a, const vx_container *c, const cJSON *comp)
{
    const cJSON *dropped = get(get(vx_index_json(c), "encoder"), "declaration_only");
    if (a->json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddItemToObject(doc, "component", cJSON_Duplicate(comp, 1));
        cJSON_AddItemToObject(doc, "declaration_only",
                              dropped ? cJSON_Duplicate(dropped, 1) : cJSON_CreateObject());
        return vindex_emit(doc);
    }
    printf("component  %s (%s): %.0f layers, hidden %.0f, vocab %.0f, context %.0f\n",
           str(comp, "id", "?"), str(comp, "role", "?"), num(comp, "num_layers"),
           num(comp, "hidden_size"), num(comp, "vocab_size"), num(comp, "context_length"));
    printf("execution\n");
    flatten(get(comp, "execution"), "");
    printf("layers\n");
    const cJSON *l;
    int i = 0;
    cJSON_ArrayForEach(l, get(comp, "layers")) {
        char *s = cJSON_PrintUnformatted(l);
        printf("  %3d  %s\n", i++, s ? s : "?");
        free(s);
    }
    if (cJSON_GetArraySize(dropped) > 0) {
        printf("declaration-only config keys (not used for execution)\n");
        const cJSON *e;
        cJSON_ArrayForEach(e, dropped)
            printf("  %-28s %s\n", e->string, cJSON_IsString(e) ? e->valuestring : "");
    }
    return VINDEX_OK;
}

VINDEX_HANDLER(describe)
{
    int rc;
    vx_container *c = vindex_open(a, &rc);
    if (!c)
        return rc;
    const char *want = a->pos[1];
    const cJSON *o;
    cJSON_ArrayForEach(o, get(vx_graph_json(c), "objects")) {
        if (strcmp(str(o, "id", ""), want) == 0) {
            rc = describe_object(a, c, o);
            vx_close(c);
            return rc;
        }
    }
    cJSON_ArrayForEach(o, get(vx_graph_json(c), "components")) {
        if (strcmp(str(o, "id", ""), want) == 0) {
            rc = describe_component(a, c, o);
            vx_close(c);
            return rc;
        }
    }
    char msg[768];
    size_t at = (size_t)snprintf(msg, sizeof msg, "no object or component '%s' (have:", want);
    cJSON_ArrayForEach(o, get(vx_graph_json(c), "components"))
        if (at < sizeof msg)
            at += (size_t)snprintf(msg + at, sizeof msg - at, " %s", str(o, "id", "?"));
    cJSON_ArrayForEach(o, get(vx_graph_json(c), "objects"))
        if (at < sizeof msg)
            at += (size_t)snprintf(msg + at, sizeof msg - at, " %s", str(o, "id", "?"));
    if (at < sizeof msg)
        snprintf(msg + at, sizeof msg - at, ")");
    vx_close(c);
    return vindex_fail(a, msg);
}
