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
#include <unistd.h>
#include <cjson/cJSON.h>

#include "browse.h"
#include "exec_edit.h"
#include "files.h"
#include "interp.h"
#include "journal.h"

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

/* Bytes of the tensors of object (NULL: any) whose name starts with prefix (NULL: all);
 * the object keeps an auxiliary component's "layers.0." out of the decoder's layer 0. */
static uint64_t tensor_bytes(const vx_container *c, const char *object, const char *prefix)
{
    uint64_t sum = 0;
    size_t n = vx_tensor_count(c), pl = prefix ? strlen(prefix) : 0;
    for (size_t i = 0; i < n; i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if ((!object || strcmp(t->object, object) == 0) &&
            (!prefix || strncmp(t->name, prefix, pl) == 0))
            sum += t->nbytes;
    }
    return sum;
}

/* ---------------------------------------------------------------- USE */

static char *sdup(const char *z)
{
    size_t n = strlen(z) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, z, n);
    return d;
}

/* Binds an open container c (owned from here on) at path, with the journal and profile
 * names given, replacing the session's binding only once the new one (its journal
 * included) is whole: a USE that fails leaves the session as it was. The note names the
 * model and the profile with its derived authority. */
static int bind(lql_session *s, const lql_stmt *st, vx_container *c, const char *path,
                const char *journal, const char *profile, lql_result *r, lql_err *e)
{
    char *p = sdup(path), *j = journal ? sdup(journal) : NULL, *pr = profile ? sdup(profile) : NULL;
    lql_session old = *s;   /* the binding's fields, released on success, put back on failure */
    s->vx = c;
    s->path = p;
    s->journal = j;
    s->profile = pr;
    s->model = NULL;
    s->tok = NULL;
    s->overlay = NULL;
    s->browse = s->edit = NULL;
    s->browse_free = s->edit_free = NULL;
    int rc = !p || (journal && !j) || (profile && !pr)
                 ? lql_errf(e, LQL_ENOMEM, NULL, "out of memory")
                 : lql_edit_on_use(s, st, r, e);
    lql_session_unbind(rc < 0 ? s : &old);
    if (rc < 0) {
        *s = old;
        return -1;
    }
    const vx_graph_shape *g = vx_shape_of(c);
    lql_result_note(r, "using %s (%d layers, %d hidden, %lld features, model: %s)", path,
                    g->layers, g->hidden, (long long)g->features, jstr(vx_index_json(c), "model", "?"));
    if (vx_container_shape(c) == VX_SHAPE_BANK)
        lql_result_note(r, "bank shape: FFN banks in LYRW v2 files located by moe_manifest.json");
    if (profile) {
        const char *auth = "?";
        vx_err ve = {0};
        vx_profile_authority(vx_index_json(c), vx_graph_json(c), profile, &auth, &ve);
        lql_result_note(r, "profile %s: authority %s", profile, auth);
    }
    return 0;
}

int lql_h_use(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    vx_container *c = NULL;
    vx_err ve = {0};
    if (vx_open_profile(st->arg, st->profile, NULL, 0, &c, &ve) < 0) {
        /* the profile's own refusals point at the PROFILE clause, the rest at the path */
        int at_profile = st->profile && (strncmp(ve.msg, "no profile '", 12) == 0 ||
                                         strncmp(ve.msg, "profile '", 9) == 0 ||
                                         strncmp(ve.msg, "index.json 'profiles'", 21) == 0);
        return lql_err_vx(e, &ve, at_profile ? &st->clause_at[LQL_C_PROFILE] : &st->arg_at);
    }
    return bind(s, st, c, st->arg, st->journal, st->profile, r, e);
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

int lql_encode_container(const char *hf_dir, const char *out_dir, int dtype, int down_meta,
                         vx_progress_fn progress, void *progress_ctx, vx_err *err)
{
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.dtype = dtype;
    o.progress = progress;
    o.progress_ctx = progress_ctx;
    o.finish = down_meta ? brw_encode_finish : brw_encode_finish_bands;   /* browse's */
    o.finish_ctx = &o;                /* so down-meta reports its progress too */
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
    vx_err ve = {0};
    /* the encoder's refusals at what they are about: the DTYPE and the target checked
     * first, so what is left to fail is the checkpoint (or a cancel, the statement's) */
    if (vx_encode_dtype_check(dtype, &ve) < 0)
        return lql_err_vx(e, &ve, &st->clause_at[LQL_C_DTYPE]);
    if (vx_cw_check(st->arg2, NULL, 0, "encode", &ve) < 0)
        return lql_err_vx(e, &ve, &st->arg2_at);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (lql_encode_container(st->arg, st->arg2, dtype, 1, s->progress, s->progress_ctx, &ve) < 0)
        return lql_err_vx(e, &ve, ve.code == VX_ECANCEL ? &st->at : &st->arg_at);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    vx_container *c = NULL;
    if (vx_open(st->arg2, &c, &ve) < 0) return lql_err_vx(e, &ve, &st->arg2_at);
    lql_result_note(r, "extracted %s into %s (%zu tensors, %.1f MB, %.1f s)", st->arg, st->arg2,
                    vx_tensor_count(c), (double)tensor_bytes(c, NULL, NULL) / 1e6, secs);
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
    const vx_graph_shape *g = vx_shape_of(c);
    static const lql_colspec cols[] = {{"stat", LQL_TEXT, 0}, {"value", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, NULL, 2, cols);
    kv(t, "model", "%s", jstr(idx, "model", "?"));
    kv(t, "family", "%s", jstr(idx, "family", "?"));
    kv(t, "version", "%d", vx_version(c));
    kv(t, "authority", "%s", jstr(idx, "authority", "?"));
    kv(t, "layers", "%d", g->layers);
    kv(t, "hidden", "%d", g->hidden);
    kv(t, "vocab", "%d", g->vocab);
    kv(t, "context", "%d", g->context);
    if (g->heads)
        kv(t, "heads", "%d (kv %d, head dim %d)", g->heads, g->kv_heads, g->head_dim);
    else
        kv(t, "heads", "none (no layer attends)");
    if (g->intermediate)
        kv(t, "ffn", "%s %s", jstr(jget(g->execution, "ffn"), "kind", "?"),
           jstr(jget(g->execution, "ffn"), "activation", "?"));
    else
        kv(t, "ffn", "none");
    kv(t, "features", "%lld", (long long)g->features);
    kv(t, "state", "%llu bytes per position, %llu fixed", (unsigned long long)g->state_per_token,
       (unsigned long long)g->state_fixed);
    /* browse's view (bands with their feature counts, down-meta, gate rows) when browse
     * can open the container; otherwise the recorded bands and a note saying why not */
    brw_model *bm = NULL;
    brw_stats bs;
    lql_err be = {0};
    vx_err ve = {0};
    int browse = lql_session_browse(s, st, &bm, &be) == 0 && brw_stats_get(bm, &bs, &ve) == 0;
    const cJSON *bands = jget(jget(idx, "browse"), "layer_bands");
    for (int i = 0; i < 3; i++) {
        const cJSON *b = jget(bands, brw_band_name(i));
        if (browse && bs.band[i][0] >= 0)
            kv(t, brw_band_name(i), "layers %d-%d, %lld features", bs.band[i][0],
               bs.band[i][1], (long long)bs.band_features[i]);
        else if (!browse && cJSON_GetArraySize(b) == 2)
            kv(t, brw_band_name(i), "layers %d-%d", cJSON_GetArrayItem(b, 0)->valueint,
               cJSON_GetArrayItem(b, 1)->valueint);
    }
    if (browse) {
        if (brw_meta_source(bm) == BRW_META_ON_DEMAND) {
            brw_od_stats od;
            brw_meta_stats(bm, &od);
            kv(t, "features with down-meta", "computed on demand (not stored), %llu of %lld so "
               "far: %llu computed, %llu read from the down-meta cache",
               (unsigned long long)(od.computed + od.cached), (long long)bs.features,
               (unsigned long long)od.computed, (unsigned long long)od.cached);
            if (!*od.cache && !*od.why)
                kv(t, "down-meta cache", "not opened yet (the first statement that needs "
                   "down-meta opens it)");
            else
                kv(t, "down-meta cache", "%s", *od.why ? od.why : od.cache);
        } else
            kv(t, "features with down-meta", "%lld of %lld", (long long)bs.with_meta,
               (long long)bs.features);
        if (*bs.gate_dtype)
            kv(t, "gate rows", "%llu bytes (%s)", (unsigned long long)bs.gate_bytes, bs.gate_dtype);
        else   /* no layer has a gated channel mixer (a pure SSM stack) */
            kv(t, "gate rows", "none (no layer has FFN gate rows)");
        kv(t, "relation labels", "%s", bs.labelled ? "yes" : "no");
        if (bs.bands_note[0])
            lql_result_note(r, "index.json's browse.layer_bands is ignored (%s): the bands "
                            "follow depth", bs.bands_note);
    } else {
        lql_result_note(r, "no browse view: %s", be.msg[0] ? be.msg : ve.msg);
    }
    kv(t, "tensors", "%zu", vx_tensor_count(c));
    kv(t, "tensor bytes", "%llu", (unsigned long long)tensor_bytes(c, NULL, NULL));
    kv(t, "index sha256", "%s", vx_index_sha256(c));
    if (!s->hide_paths)
        kv(t, "path", "%s", vx_dir(c));
    return 0;
}

/* ---------------------------------------------------------------- SHOW LAYERS */

int lql_h_show_layers(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    vx_container *c = NULL;
    if (lql_session_container(s, st, &c, e) < 0) return -1;
    const vx_graph_shape *g = vx_shape_of(c);
    int lo = 0, hi = g->layers - 1;
    if (lql_has(st, LQL_C_LAYERS)) {
        if (!st->layers.all) { lo = st->layers.lo; hi = st->layers.hi; }
        if (lql_check_layers(e, &st->layers.at, lo, hi, g->layers) < 0) return -1;
    }
    /* browse's per-layer view (band, most frequent down-meta top token, features with
     * down-meta as the overlay leaves them, gate dtype) when browse can open the container */
    brw_model *bm = NULL;
    brw_layer_info *li = NULL;
    size_t nli = 0;
    lql_err be = {0};
    vx_err ve = {0};
    if (lql_session_browse(s, st, &bm, &be) != 0 ||
        brw_show_layers(bm, lo, hi, lql_edit_overlay(s), &li, &nli, &ve) != 0) {
        lql_result_note(r, "no browse view: %s", be.msg[0] ? be.msg : ve.msg);
        li = NULL;
    }
    static const lql_colspec cols[] = {{"layer", LQL_INT, 0}, {"operator", LQL_TEXT, 0},
        {"window", LQL_INT, 0}, {"ffn", LQL_TEXT, 0}, {"features", LQL_INT, 0},
        {"state", LQL_TEXT, 0}, {"state_per_pos", LQL_INT, 0}, {"state_fixed", LQL_INT, 0},
        {"bytes", LQL_INT, 0}, {"band", LQL_TEXT, 0}, {"top_token", LQL_TEXT, 0},
        {"top_count", LQL_INT, 0}, {"with_meta", LQL_INT, 0}, {"gate_dtype", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, NULL, 14, cols);
    if (!t) {
        free(li);
        return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    }
    for (int i = lo; i <= hi; i++) {
        const vx_layer_shape *L = &g->layer[i];
        char prefix[32], stack[96];
        snprintf(prefix, sizeof prefix, "layers.%d.", i);
        snprintf(stack, sizeof stack, "%s.decoder_stack", g->id ? g->id : "target");
        lql_row(t);
        lql_cell_int(t, i);
        lql_cell_text(t, vx_mixer_name(L->mixer));
        if (L->window) lql_cell_int(t, L->window); else lql_cell_null(t);
        lql_cell_text(t, vx_channel_name(L->channel));
        lql_cell_int(t, L->features);
        char regions[128] = "";
        for (int k = 0; k < L->nstate; k++) {
            size_t at = strlen(regions);
            snprintf(regions + at, sizeof regions - at, "%s%s", k ? "," : "", L->state[k].name);
        }
        lql_cell_text(t, regions);
        lql_cell_int(t, (int64_t)L->state_per_token);
        lql_cell_int(t, (int64_t)L->state_fixed);
        lql_cell_int(t, (int64_t)tensor_bytes(c, stack, prefix));
        const brw_layer_info *x = li && (size_t)(i - lo) < nli ? &li[i - lo] : NULL;
        if (!x) {
            for (int k = 0; k < 5; k++) lql_cell_null(t);
            continue;
        }
        char tok[128];
        brw_trim(x->top_id >= 0 ? brw_token_text(bm, x->top_id) : "", tok, sizeof tok);
        lql_cell_text(t, x->band >= 0 ? brw_band_name(x->band) : NULL);
        if (x->top_id >= 0) lql_cell_text(t, tok); else lql_cell_null(t);
        lql_cell_int(t, x->top_count);
        lql_cell_int(t, x->with_meta);
        lql_cell_text(t, x->gate_dtype);
    }
    free(li);
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
        if (nn) names = nn;
        if (!nn || !(names[n] = sdup(de->d_name))) {
            closedir(d);
            for (size_t i = 0; i < n; i++) free(names[i]);
            free(names);
            return lql_errf(e, LQL_ENOMEM, &st->at, "out of memory listing the current directory");
        }
        n++;
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
        {"context", LQL_INT, 0}, {"objects", LQL_INT, 0}, {"profile", LQL_TEXT, 0},
        {"authority", LQL_TEXT, 0}, {"shape", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, NULL, 10, cols);
    const char *auth = NULL;
    vx_err ve = {0};
    if (vx_profile_authority(vx_index_json(c), vx_graph_json(c), vx_profile(c), &auth, &ve) < 0)
        return lql_err_vx(e, &ve, &st->at);
    const cJSON *graph = vx_graph_json(c), *comp, *obj;
    cJSON_ArrayForEach(comp, jget(graph, "components")) {
        const char *id = jstr(comp, "id", "?");
        int64_t nobj = 0;
        cJSON_ArrayForEach(obj, jget(graph, "objects"))
            if (strcmp(jstr(obj, "component", ""), id) == 0) nobj++;
        lql_row(t);
        lql_cell_text(t, id);
        lql_cell_text(t, jstr(comp, "role", NULL));
        const vx_graph_shape *g = vx_shape_component(c, id);
        lql_cell_int(t, g ? g->layers : 0);
        lql_cell_int(t, g ? g->hidden : 0);
        lql_cell_int(t, g ? g->vocab : 0);
        lql_cell_int(t, g ? g->context : 0);
        lql_cell_int(t, nobj);
        lql_cell_text(t, vx_profile(c) ? vx_profile(c) : "(baseline)");
        lql_cell_text(t, auth);
        lql_cell_text(t, vx_container_shape(c) == VX_SHAPE_BANK ? "bank" : "graph");
    }
    return 0;
}

/* ---------------------------------------------------------------- SHOW REPRESENTATIONS */

int lql_h_show_representations(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    vx_container *c = NULL;
    if (lql_session_container(s, st, &c, e) < 0) return -1;
    const cJSON *idx = vx_index_json(c), *reps = jget(idx, "representations"), *obj, *id, *seg;
    static const lql_colspec cols[] = {{"representation", LQL_TEXT, 0}, {"object", LQL_TEXT, 0},
        {"dtype", LQL_TEXT, 0}, {"fidelity", LQL_TEXT, 0}, {"segments", LQL_INT, 0},
        {"bytes", LQL_INT, 0}, {"dtypes", LQL_TEXT, 0}, {"bits_per_weight", LQL_FLOAT, 3},
        {"active", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, NULL, 9, cols);
    /* graph object order, each object's representations in the order it lists them */
    cJSON_ArrayForEach(obj, jget(vx_graph_json(c), "objects")) {
        const char *oid = jstr(obj, "id", "?"), *bound = vx_bound_representation(c, oid);
        cJSON_ArrayForEach(id, jget(obj, "representations")) {
            const char *rid = cJSON_GetStringValue(id);
            const cJSON *rep = rid ? jget(reps, rid) : NULL;
            if (!rep) continue;
            int64_t nseg = 0, bytes = 0;
            cJSON_ArrayForEach(seg, jget(rep, "segments")) {
                nseg++;
                if (cJSON_IsString(seg))
                    bytes += jint(jget(jget(idx, "segments"), seg->valuestring), "bytes", 0);
            }
            vx_rep_totals tot;
            char dts[96] = "";
            size_t at = 0;
            int have = vx_representation_totals(c, rid, &tot) == 0;
            for (int d = 0; have && d < VX_DTYPE_COUNT; d++)
                if ((tot.dtypes & (1u << d)) && at < sizeof dts)
                    at += (size_t)snprintf(dts + at, sizeof dts - at, "%s%s", at ? "+" : "",
                                           vx_dtype_name((vx_dtype)d));
            lql_row(t);
            lql_cell_text(t, rid);
            lql_cell_text(t, oid);
            lql_cell_text(t, jstr(rep, "dtype", NULL));
            lql_cell_text(t, jstr(rep, "fidelity", NULL));
            lql_cell_int(t, nseg);
            lql_cell_int(t, bytes);
            lql_cell_text(t, dts);
            lql_cell_float(t, have && tot.weights ? 8.0 * (double)tot.bytes / (double)tot.weights : 0);
            lql_cell_text(t, bound && strcmp(bound, rid) == 0 ? "yes" : "no");
        }
    }
    const char *auth = "?";
    vx_err ve = {0};
    if (vx_profile_authority(idx, vx_graph_json(c), vx_profile(c), &auth, &ve) < 0)
        return lql_err_vx(e, &ve, &st->at);
    lql_result_note(r, "bound: %s%s, authority %s (the weakest fidelity of the active representations)",
                    vx_profile(c) ? "profile " : "", vx_profile(c) ? vx_profile(c) : "baseline", auth);
    return 0;
}

/* ---------------------------------------------------------------- REPRESENT */

/* REPRESENT "object" AS dtype: compiles the representation beside the original
 * (vx_represent), selects it in the profile named after the dtype (created when absent,
 * so `USE "x" PROFILE "q8_0"` binds every object represented as q8_0), and rebinds the
 * container with the session's profile, so SHOW REPRESENTATIONS sees it. Refused while
 * a journal is named (JOURNAL, even ":memory:") or exists at the default place: journals
 * are keyed to index.json's sha256, which REPRESENT changes. */
int lql_h_represent(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    vx_container *c = NULL;
    if (lql_session_container(s, st, &c, e) < 0) return -1;
    vx_dtype dt;
    if (vx_dtype_parse(st->arg2, &dt) < 0)
        return lql_errf(e, LQL_EEXEC, &st->arg2_at, "unknown dtype: %s (REPRESENT writes q8_0, "
                        "q4_0, q4_k, q6_k, mxfp4, f16, bf16 or f32)", st->arg2);
    char jpath[4096];
    vx_err ve = {0};
    const char *jp = s->journal;
    if (!jp && vx_journal_locate(vx_dir(c), vx_index_sha256(c), jpath, sizeof jpath, &ve) == 0)
        jp = jpath;
    if (s->journal || (jp && access(jp, F_OK) == 0))
        return lql_errf(e, LQL_EEXEC, &st->at, "REPRESENT rewrites index.json, and the journal '%s' is "
                        "keyed to its sha256: %s", jp,
                        s->journal ? "USE the container without JOURNAL to represent it (COMPILE "
                                     "any edits into a new container first)"
                                   : "COMPILE the edits into a new container first");
    vx_represent_info in;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (vx_represent(s->path, st->arg, dt, &in, &ve) < 0) return lql_err_vx(e, &ve, &st->arg_at);
    vx_select sel = {st->arg, in.id};
    if (vx_profile_add(s->path, vx_dtype_name(dt), &sel, 1, 1, &ve) < 0) return lql_err_vx(e, &ve, &st->at);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    char *path = sdup(s->path), *journal = s->journal ? sdup(s->journal) : NULL;
    char *profile = s->profile ? sdup(s->profile) : NULL;
    vx_container *c2 = NULL;
    int rc = -1;
    if (!path || (s->journal && !journal) || (s->profile && !profile))
        rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    else if (vx_open_profile(path, profile, NULL, 0, &c2, &ve) < 0)
        rc = lql_err_vx(e, &ve, &st->at);
    else
        rc = bind(s, st, c2, path, journal, profile, r, e);
    if (rc == 0)
        lql_result_note(r, "represented %s as %s: %s (from %s), %zu tensors (%zu kept in their source "
                        "dtype), %.3f bits/weight, fidelity %s, %.1f s; profile %s selects it", st->arg,
                        vx_dtype_name(dt), in.id, in.from, in.tensors, in.kept,
                        in.weights ? 8.0 * (double)in.bytes / (double)in.weights : 0.0, in.fidelity, secs,
                        vx_dtype_name(dt));
    free(path); free(journal); free(profile);
    return rc;
}
