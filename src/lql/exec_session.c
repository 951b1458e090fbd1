/*
 * exec_session.c — session and model statements: USE, TOKENIZE, EXTRACT, STATS, SHOW
 * LAYERS / MODELS / COMPONENTS / REPRESENTATIONS, REPRESENT. Everything here reads the
 * container's metadata (index.json, the system graph, the tensor tables); nothing reads
 * weights except EXTRACT, which writes a new container through the storage encoder.
 */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <cjson/cJSON.h>

#include "browse.h"
#include "files.h"
#include "interp.h"

/* ---------------------------------------------------------------- metadata helpers */

static const cJSON *jget(const cJSON *o, const char *key)
{
    return o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

static const char *jstr(const cJSON *o, const char *key, const char *dflt)
{
    const cJSON *v = jget(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : dflt;
}

static int64_t jint(const cJSON *o, const char *key, int64_t dflt)
{
    const cJSON *v = jget(o, key);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

/* Geometry of the primary component, from the system graph. */
typedef struct geom {
    int layers, hidden, vocab, context;
    int64_t features;            /* FFN features over all layers */
    const cJSON *exec, *layer_ops;
} geom;

/* FFN features of layer i: dense intermediate, or experts · expert_intermediate (MoE). */
static int64_t layer_features(const geom *g, int i)
{
    const cJSON *op = cJSON_GetArrayItem(g->layer_ops, i);
    const cJSON *moe = jget(g->exec, "moe");
    if (cJSON_IsObject(moe) && strcmp(jstr(op, "ffn", "dense"), "moe") == 0)
        return jint(moe, "experts", 0) * jint(moe, "expert_intermediate", 0);
    return jint(jget(g->exec, "ffn"), "intermediate", 0);
}

static void geometry(const vx_container *c, geom *g)
{
    const cJSON *comp = vx_component(c), *idx = vx_index_json(c);
    memset(g, 0, sizeof *g);
    g->layers = (int)jint(comp, "num_layers", jint(idx, "num_layers", 0));
    g->hidden = (int)jint(comp, "hidden_size", jint(idx, "hidden_size", 0));
    g->vocab = (int)jint(comp, "vocab_size", 0);
    g->context = (int)jint(comp, "context_length", 0);
    g->exec = jget(comp, "execution");
    g->layer_ops = jget(comp, "layers");
    for (int i = 0; i < g->layers; i++) g->features += layer_features(g, i);
}

/* Bytes of the tensors whose name starts with prefix (NULL: all). */
static uint64_t tensor_bytes(const vx_container *c, const char *prefix)
{
    uint64_t sum = 0;
    size_t n = vx_tensor_count(c), pl = prefix ? strlen(prefix) : 0;
    for (size_t i = 0; i < n; i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if (!prefix || strncmp(t->name, prefix, pl) == 0) sum += t->nbytes;
    }
    return sum;
}

/* "no such layer" for a range outside 0..layers-1, at the clause. */
static int check_range(const lql_range *r, int layers, lql_err *e)
{
    if (r->all || r->hi < layers) return 0;
    return lql_errf(e, LQL_EEXEC, &r->at, "no such layer: %d (model has layers 0-%d)",
                    r->hi, layers - 1);
}

/* ---------------------------------------------------------------- USE */

static char *sdup(const char *z)
{
    size_t n = strlen(z) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, z, n);
    return d;
}

/* PROFILE: the name must be one the container declares; lql's engine executes the
 * default representation only, so selecting a profile is refused rather than ignored. */
static int check_profile(const vx_container *c, const lql_stmt *st, lql_err *e)
{
    const cJSON *profiles = jget(vx_index_json(c), "profiles"), *p;
    char names[160] = "";
    size_t len = 0;
    cJSON_ArrayForEach(p, profiles) {
        const char *name = jstr(p, "profile", jstr(p, "name", NULL));
        if (!name) continue;
        if (strcmp(name, st->profile) == 0)
            return lql_refuse_clause(e, st, LQL_C_PROFILE,
                                     "the engine executes the container's default representation only");
        if (len < sizeof names)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", name);
    }
    return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_PROFILE], "no such profile: \"%s\" (%s%s)",
                    st->profile, len ? "container declares " : "container declares none", names);
}

int lql_h_use(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    vx_container *c = NULL;
    vx_err ve = {0};
    if (vx_open(st->arg, &c, &ve) < 0) return lql_err_vx(e, &ve, &st->arg_at);
    if (st->profile && check_profile(c, st, e) < 0) { vx_close(c); return -1; }
    lql_session_unbind(s);
    s->vx = c;
    s->path = sdup(st->arg);
    s->journal = st->journal ? sdup(st->journal) : NULL;
    if (!s->path || (st->journal && !s->journal)) {
        lql_session_unbind(s);
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    }
    if (lql_edit_on_use(s, st, r, e) < 0) { lql_session_unbind(s); return -1; }
    geom g;
    geometry(c, &g);
    lql_result_note(r, "using %s (%d layers, %d hidden, %lld features, model: %s)", st->arg,
                    g.layers, g.hidden, (long long)g.features, jstr(vx_index_json(c), "model", "?"));
    return 0;
}

/* ---------------------------------------------------------------- TOKENIZE */

int lql_h_tokenize(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    const eng_tokenizer *tok;
    if (lql_session_tokenizer(s, st, &tok, e) < 0) return -1;
    int32_t *ids = NULL;
    size_t n = 0;
    vx_err ve = {0};
    if (eng_tok_encode(tok, st->arg, strlen(st->arg), 1, &ids, &n, &ve) < 0)
        return lql_err_vx(e, &ve, &st->arg_at);
    static const lql_colspec cols[] = {{"position", LQL_INT, 0}, {"id", LQL_INT, 0},
                                       {"piece", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, NULL, 3, cols);
    for (size_t i = 0; i < n; i++) {
        lql_row(t);
        lql_cell_int(t, (int64_t)i);
        lql_cell_int(t, ids[i]);
        lql_cell_text(t, eng_tok_piece(tok, ids[i]));
    }
    free(ids);
    return 0;
}

/* ---------------------------------------------------------------- EXTRACT */

int lql_encode_container(const char *hf_dir, const char *out_dir, int dtype,
                         void (*progress)(void *, uint64_t, uint64_t), void *progress_ctx,
                         vx_err *err)
{
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.dtype = dtype;
    o.progress = progress;
    o.progress_ctx = progress_ctx;
    o.finish = brw_encode_finish;     /* down-meta and bands for browse */
    return vx_encode(hf_dir, out_dir, &o, err);
}

int lql_h_extract(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    /* lql containers are complete graph containers: every operand is written, which is
     * what INFERENCE and ALL ask for. A browse-only or partial-layer container would be a
     * different artifact, and the encoder does not write one. */
    if (lql_has(st, LQL_C_WITH) && st->level == LQL_LEVEL_BROWSE)
        return lql_refuse_clause(e, st, LQL_C_WITH,
                                 "the encoder writes complete containers (use WITH INFERENCE or ALL)");
    if (lql_has(st, LQL_C_LAYERS) && !st->layers.all)
        return lql_refuse_clause(e, st, LQL_C_LAYERS,
                                 "the encoder writes every layer (a partial container could not run)");
    int dtype = -1;
    if (st->dtype) {
        vx_dtype d;
        if (vx_dtype_parse(st->dtype, &d) < 0)
            return lql_errf(e, LQL_EEXEC, &st->clause_at[LQL_C_DTYPE], "unknown dtype: %s", st->dtype);
        dtype = (int)d;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    vx_err ve = {0};
    if (lql_encode_container(st->arg, st->arg2, dtype, s->progress, s->progress_ctx, &ve) < 0)
        return lql_err_vx(e, &ve, &st->at);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    vx_container *c = NULL;
    if (vx_open(st->arg2, &c, &ve) < 0) return lql_err_vx(e, &ve, &st->arg2_at);
    lql_result_note(r, "extracted %s into %s (%zu tensors, %.1f MB, %.1f s)", st->arg, st->arg2,
                    vx_tensor_count(c), (double)tensor_bytes(c, NULL) / 1e6, secs);
    vx_close(c);
    return 0;
}

/* ---------------------------------------------------------------- STATS */

static void kv(lql_table *t, const char *k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void kv(lql_table *t, const char *k, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    lql_row(t);
    lql_cell_text(t, k);
    lql_cell_text(t, buf);
}

int lql_h_stats(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    vx_container *c = NULL;
    if (lql_session_container(s, st, &c, e) < 0) return -1;
    const cJSON *idx = vx_index_json(c);
    geom g;
    geometry(c, &g);
    static const lql_colspec cols[] = {{"stat", LQL_TEXT, 0}, {"value", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, NULL, 2, cols);
    kv(t, "model", "%s", jstr(idx, "model", "?"));
    kv(t, "family", "%s", jstr(idx, "family", "?"));
    kv(t, "version", "%d", vx_version(c));
    kv(t, "authority", "%s", jstr(idx, "authority", "?"));
    kv(t, "layers", "%d", g.layers);
    kv(t, "hidden", "%d", g.hidden);
    kv(t, "vocab", "%d", g.vocab);
    kv(t, "context", "%d", g.context);
    const cJSON *att = jget(g.exec, "attention");
    kv(t, "heads", "%lld (kv %lld, head dim %lld)", (long long)jint(att, "heads", 0),
       (long long)jint(att, "kv_heads", 0), (long long)jint(att, "head_dim", 0));
    kv(t, "ffn", "%s %s", jstr(jget(g.exec, "ffn"), "kind", "?"), jstr(jget(g.exec, "ffn"), "activation", "?"));
    kv(t, "features", "%lld", (long long)g.features);
    const cJSON *bands = jget(jget(idx, "browse"), "layer_bands");
    static const char *const names[] = {"syntax", "knowledge", "output"};
    for (int i = 0; i < 3; i++) {
        const cJSON *b = jget(bands, names[i]);
        if (cJSON_GetArraySize(b) == 2)
            kv(t, names[i], "layers %d-%d", cJSON_GetArrayItem(b, 0)->valueint,
               cJSON_GetArrayItem(b, 1)->valueint);
    }
    kv(t, "tensors", "%zu", vx_tensor_count(c));
    kv(t, "tensor bytes", "%llu", (unsigned long long)tensor_bytes(c, NULL));
    kv(t, "index sha256", "%s", vx_index_sha256(c));
    kv(t, "path", "%s", vx_dir(c));
    return 0;
}

/* ---------------------------------------------------------------- SHOW LAYERS */

int lql_h_show_layers(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    vx_container *c = NULL;
    if (lql_session_container(s, st, &c, e) < 0) return -1;
    geom g;
    geometry(c, &g);
    int lo = 0, hi = g.layers - 1;
    if (lql_has(st, LQL_C_LAYERS)) {
        if (check_range(&st->layers, g.layers, e) < 0) return -1;
        if (!st->layers.all) { lo = st->layers.lo; hi = st->layers.hi; }
    }
    static const lql_colspec cols[] = {{"layer", LQL_INT, 0}, {"operator", LQL_TEXT, 0},
        {"window", LQL_INT, 0}, {"ffn", LQL_TEXT, 0}, {"features", LQL_INT, 0},
        {"bytes", LQL_INT, 0}};
    lql_table *t = lql_result_table(r, NULL, 6, cols);
    for (int i = lo; i <= hi; i++) {
        const cJSON *op = cJSON_GetArrayItem(g.layer_ops, i), *w = jget(op, "window");
        char prefix[32];
        snprintf(prefix, sizeof prefix, "layers.%d.", i);
        lql_row(t);
        lql_cell_int(t, i);
        lql_cell_text(t, jstr(op, "operator", "?"));
        if (cJSON_IsNumber(w)) lql_cell_int(t, (int64_t)w->valuedouble); else lql_cell_null(t);
        lql_cell_text(t, jstr(op, "ffn", "?"));
        lql_cell_int(t, layer_features(&g, i));
        lql_cell_int(t, (int64_t)tensor_bytes(c, prefix));
    }
    return 0;
}

/* ---------------------------------------------------------------- SHOW MODELS */

/* A small JSON file (an index.json is far below 64 MB), or NULL. */
static cJSON *read_json(const char *path)
{
    size_t n;
    char *buf = lql_read_file(path, (size_t)64 << 20, &n);
    cJSON *j = buf ? cJSON_ParseWithLength(buf, n) : NULL;
    free(buf);
    return j;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int lql_h_show_models(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s;
    DIR *d = opendir(".");
    if (!d) return lql_errf(e, LQL_EEXEC, &st->at, "cannot list the current directory");
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/index.json", de->d_name);
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        char **nn = realloc(names, (n + 1) * sizeof *nn);
        if (!nn) break;
        names = nn;
        if ((names[n] = sdup(de->d_name))) n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    static const lql_colspec cols[] = {{"container", LQL_TEXT, 0}, {"format", LQL_TEXT, 0},
        {"model", LQL_TEXT, 0}, {"layers", LQL_INT, 0}};
    lql_table *t = lql_result_table(r, NULL, 4, cols);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/index.json", names[i]);
        cJSON *idx = read_json(path);
        int64_t v = jint(idx, "version", 0);
        lql_row(t);
        lql_cell_text(t, names[i]);
        lql_cell_text(t, !idx ? "unreadable index.json" : v >= 3 && v <= 4 ? "VINDEX3"
                         : v >= 1 && v <= 2 ? "VINDEX2" : "unknown version");
        lql_cell_text(t, jstr(idx, "model", NULL));
        if (cJSON_IsNumber(jget(idx, "num_layers"))) lql_cell_int(t, jint(idx, "num_layers", 0));
        else lql_cell_null(t);
        cJSON_Delete(idx);
        free(names[i]);
    }
    free(names);
    return 0;
}

/* ---------------------------------------------------------------- SHOW COMPONENTS */

int lql_h_show_components(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    vx_container *c = NULL;
    if (lql_session_container(s, st, &c, e) < 0) return -1;
    static const lql_colspec cols[] = {{"component", LQL_TEXT, 0}, {"role", LQL_TEXT, 0},
        {"layers", LQL_INT, 0}, {"hidden", LQL_INT, 0}, {"vocab", LQL_INT, 0},
        {"context", LQL_INT, 0}, {"objects", LQL_INT, 0}};
    lql_table *t = lql_result_table(r, NULL, 7, cols);
    const cJSON *graph = vx_graph_json(c), *comp, *obj;
    cJSON_ArrayForEach(comp, jget(graph, "components")) {
        const char *id = jstr(comp, "id", "?");
        int64_t nobj = 0;
        cJSON_ArrayForEach(obj, jget(graph, "objects"))
            if (strcmp(jstr(obj, "component", ""), id) == 0) nobj++;
        lql_row(t);
        lql_cell_text(t, id);
        lql_cell_text(t, jstr(comp, "role", NULL));
        lql_cell_int(t, jint(comp, "num_layers", 0));
        lql_cell_int(t, jint(comp, "hidden_size", 0));
        lql_cell_int(t, jint(comp, "vocab_size", 0));
        lql_cell_int(t, jint(comp, "context_length", 0));
        lql_cell_int(t, nobj);
    }
    return 0;
}

/* ---------------------------------------------------------------- SHOW REPRESENTATIONS */

int lql_h_show_representations(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    vx_container *c = NULL;
    if (lql_session_container(s, st, &c, e) < 0) return -1;
    const cJSON *idx = vx_index_json(c), *rep, *seg;
    static const lql_colspec cols[] = {{"representation", LQL_TEXT, 0}, {"object", LQL_TEXT, 0},
        {"dtype", LQL_TEXT, 0}, {"fidelity", LQL_TEXT, 0}, {"segments", LQL_INT, 0},
        {"bytes", LQL_INT, 0}};
    lql_table *t = lql_result_table(r, NULL, 6, cols);
    cJSON_ArrayForEach(rep, jget(idx, "representations")) {
        int64_t nseg = 0, bytes = 0;
        cJSON_ArrayForEach(seg, jget(rep, "segments")) {
            nseg++;
            if (cJSON_IsString(seg))
                bytes += jint(jget(jget(idx, "segments"), seg->valuestring), "bytes", 0);
        }
        lql_row(t);
        lql_cell_text(t, rep->string);
        lql_cell_text(t, jstr(rep, "object", NULL));
        lql_cell_text(t, jstr(rep, "dtype", NULL));
        lql_cell_text(t, jstr(rep, "fidelity", NULL));
        lql_cell_int(t, nseg);
        lql_cell_int(t, bytes);
    }
    return 0;
}

/* ---------------------------------------------------------------- REPRESENT */

int lql_h_represent(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, "the container writer cannot add a representation to an existing "
                             "container (EXTRACT … DTYPE writes a new one)");
}
