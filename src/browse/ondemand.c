/*
 * ondemand.c — down-meta computed when asked, for a container that stores none
 * (browse/down_meta.bin is optional: a serving-only container, or `vindex encode
 * --no-down-meta`). The statements that read a few features' down-meta (WALK, DESCRIBE,
 * EXPLAIN INFER) name them to brw_meta_prepare first, which computes the ones not yet
 * known by the exact pass (brw_downmeta_exact: the records the encode hook would have
 * written); the statements that read every feature of some layers (SELECT, SHOW
 * FEATURES / ENTITIES / RELATIONS) name the layers to brw_meta_prepare_layers, which runs
 * the encode hook's screened pass over those not complete yet. Records are kept for the
 * model's life; brw_feature_meta then reads them as it reads the file.
 *
 * They are also kept across sessions in the user's down-meta cache (metacache.h): a layer's
 * cached records are read the first time a statement needs that layer, and what is
 * computed is written back, so a second session computes nothing the first did. The
 * cache is a convenience: when it cannot be used (none configured, not writable, not this
 * container's, a record naming a token outside the vocabulary) everything is computed as
 * without it, and the problem is said once (brw_od_stats.why, events).
 */
#include "brw_int.h"
#include "metacache.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REC (8 + 8 * (size_t)BRW_DOWN_TOP_K)

/* have[l][f]: the state of a record */
enum { UNKNOWN, KNOWN, PENDING, CACHED };   /* CACHED: read from the cache, not yet counted */

struct brw_ondemand {
    pthread_mutex_t mu;      /* sessions may share a model across threads */
    int layers;
    uint8_t **rec;           /* [layers] features × REC bytes, allocated on first use */
    uint8_t **have;          /* [layers] per feature: UNKNOWN .. CACHED */
    uint8_t *loaded;         /* [layers] 1 once the cache's records of the layer were read */
    uint64_t computed, cached;
    double seconds;
    int cache_tried;         /* 1 once the cache was looked for */
    vx_metacache *cache;     /* NULL without one (or after it failed) */
    char cache_path[PATH_MAX];
    char why[VX_ERR_MAX + 64];
    unsigned events;
};

int brw_ondemand_new(brw_model *m, vx_err *err)
{
    brw_ondemand *d = calloc(1, sizeof *d);
    if (d) {
        d->layers = m->s.layers;
        d->rec = calloc((size_t)d->layers + 1, sizeof *d->rec);
        d->have = calloc((size_t)d->layers + 1, sizeof *d->have);
        d->loaded = calloc((size_t)d->layers + 1, 1);
    }
    if (!d || !d->rec || !d->have || !d->loaded) {
        if (d) {
            free(d->rec);
            free(d->have);
            free(d->loaded);
        }
        free(d);
        return vx_errf(err, VX_ENOMEM, "browse: out of memory");
    }
    pthread_mutex_init(&d->mu, NULL);
    m->od = d;
    return 0;
}

void brw_ondemand_free(brw_ondemand *d)
{
    if (!d)
        return;
    for (int l = 0; l < d->layers; l++) {
        free(d->rec[l]);
        free(d->have[l]);
    }
    free(d->rec);
    free(d->have);
    free(d->loaded);
    vx_metacache_close(d->cache);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* The record of (layer, feature) into out when it is known: 1, else 0 (out untouched). */
static int read_known(brw_ondemand *d, int layer, int64_t feature, brw_meta *out)
{
    pthread_mutex_lock(&d->mu);
    const int have = d->have[layer] &&
                     (d->have[layer][feature] == KNOWN || d->have[layer][feature] == CACHED);
    if (have)
        brw_dmet_rec(d->rec[layer] + (size_t)feature * REC, BRW_DOWN_TOP_K, out);
    pthread_mutex_unlock(&d->mu);
    return have;
}

int brw_ondemand_get(const brw_model *m, int layer, int64_t feature, brw_meta *out)
{
    brw_ondemand *d = m->od;
    memset(out, 0, sizeof *out);
    if (layer < 0 || layer >= d->layers || feature < 0 || feature >= m->s.layer[layer].features)
        return -1;
    if (read_known(d, layer, feature, out))
        return 0;
    /* a reader that named no features first (an edit statement's report, DIFF, the COMPILE
     * gate): the record is computed now, never read as "no metadata" */
    vx_err err = {0};
    if (brw_meta_prepare(m, &layer, &feature, 1, &err) == 0) {
        read_known(d, layer, feature, out);
        return 0;
    }
    pthread_mutex_lock(&d->mu);
    snprintf(d->why, sizeof d->why, "down-meta of layer %d feature %lld could not be computed "
             "(%.400s): shown without it", layer, (long long)feature, err.msg);
    d->events++;
    pthread_mutex_unlock(&d->mu);
    return 0;
}

/* First touch of the down operands, which nothing else in browse reads (the engine
 * remembers a passed check, so a later call costs nothing). */
static int check_down(const brw_model *m, vx_err *err)
{
    size_t n = 0, k = 0;
    for (int l = 0; l < m->s.layers; l++)
        n += (size_t)m->s.layer[l].n_parts;
    const vx_tensor **t = malloc((n + 1) * sizeof *t);
    if (!t)
        return vx_errf(err, VX_ENOMEM, "integrity check: out of memory");
    for (int l = 0; l < m->s.layers; l++)
        for (int p = 0; p < m->s.layer[l].n_parts; p++)
            t[k++] = m->s.layer[l].parts[p].down;
    int rc = eng_tensors_check(m->c, t, k, err);
    free(t);
    return rc;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Layer l's record and flag arrays, allocated on first use; -1 when memory is short. */
static int layer_bufs(brw_ondemand *d, const brw_model *m, int l)
{
    if (!d->have[l] && !(d->have[l] = calloc((size_t)m->s.layer[l].features + 1, 1)))
        return -1;
    if (!d->rec[l] && !(d->rec[l] = malloc((size_t)m->s.layer[l].features * REC + 1)))
        return -1;
    return 0;
}

/* The cache stops being used: why, said once (events). */
static void cache_drop(brw_ondemand *d, const char *msg, int writing)
{
    snprintf(d->why, sizeof d->why, "%s; %s", msg,
             writing ? "what is computed is kept for this session only"
                     : "the cache is not used (down-meta is computed instead)");
    d->events++;
    vx_metacache_close(d->cache);
    d->cache = NULL;
}

/* The object whose bound representation is not the checkpoint's values (a profile's
 * derivation), or NULL: the records then are not the checkpoint's. */
static const char *derived_object(const brw_model *m)
{
    static const char *const objects[] = {"target.decoder_stack", "target.embedding"};
    for (int i = 0; i < 2; i++)
        if (!brw_rep_canonical(m->c, objects[i]))
            return objects[i];
    return NULL;
}

/* The cache, looked for on first use (so a session that never computes down-meta does not
 * touch it); NULL without one. */
static vx_metacache *cache_of(brw_ondemand *d, const brw_model *m)
{
    if (d->cache_tried)
        return d->cache;
    d->cache_tried = 1;
    vx_err err = {0};
    char why[256] = "";
    /* the cache holds the checkpoint's records: under a profile that derives the operands
     * they would differ, and the profiles of one container share one index (and cache) */
    const char *derived = derived_object(m);
    if (derived) {
        snprintf(d->why, sizeof d->why, "none (profile \"%s\" binds a derived "
                 "representation of %s; its down-meta is kept for this session only)",
                 vx_profile(m->c) ? vx_profile(m->c) : "", derived);
        return NULL;
    }
    int rc = vx_metacache_locate(vx_dir(m->c), vx_index_sha256(m->c), d->cache_path,
                                 sizeof d->cache_path, why, sizeof why, &err);
    if (rc == 1)
        snprintf(d->why, sizeof d->why, "none (%s)", why);
    else if (rc < 0 || vx_metacache_open(d->cache_path, vx_index_sha256(m->c), REC, &d->cache,
                                         &err) != 0)
        cache_drop(d, err.msg, 0);
    return d->cache;
}

/* A record the cache gave must be one the exact pass can give: some token, every id in
 * the vocabulary (brw_feature_meta's readers index the vocabulary by them). */
static int rec_ok(const brw_model *m, const uint8_t *p)
{
    brw_meta md;
    brw_dmet_rec(p, BRW_DOWN_TOP_K, &md);
    if (!md.present || (uint32_t)md.top_id >= (uint32_t)m->s.vocab)
        return 0;
    for (int j = 0; j < md.k; j++)
        if ((uint32_t)md.ids[j] >= (uint32_t)m->s.vocab)
            return 0;
    return 1;
}

/* Layer l's cached records (the first time it is needed), marked CACHED. */
static void cache_load(brw_ondemand *d, const brw_model *m, int l)
{
    vx_metacache *c = cache_of(d, m);
    if (!c || d->loaded[l])
        return;
    d->loaded[l] = 1;
    const int64_t F = m->s.layer[l].features;
    uint8_t *mark = malloc((size_t)F + 1);
    uint64_t n = 0;
    vx_err err = {0};
    if (!mark) {
        cache_drop(d, "down-meta cache: out of memory", 0);
        return;
    }
    /* only unknown features are read (mark 0), so a record this session has is never
     * replaced; the ones read are marked 1 */
    for (int64_t f = 0; f < F; f++)
        mark[f] = d->have[l][f] == UNKNOWN ? 0 : 2;
    if (vx_metacache_layer(c, l, F, d->rec[l], mark, &n, &err) != 0) {
        cache_drop(d, err.msg, 0);
        n = 0;
    }
    for (int64_t f = 0; f < F && n; f++) {
        if (mark[f] != 1)
            continue;
        if (!rec_ok(m, d->rec[l] + (size_t)f * REC)) {
            char msg[VX_ERR_MAX];
            snprintf(msg, sizeof msg, "down-meta cache '%.300s': layer %d feature %lld names a "
                     "token outside the vocabulary (%d tokens)", d->cache_path, l, (long long)f,
                     m->s.vocab);
            cache_drop(d, msg, 0);
            for (int64_t g = 0; g < F; g++)   /* none of this layer's is trusted */
                if (d->have[l][g] == CACHED)
                    d->have[l][g] = UNKNOWN;
            break;
        }
        d->have[l][f] = CACHED;
    }
    free(mark);
}

/* Write back n records just computed; a failure stops the cache for the session. */
static void cache_put(brw_ondemand *d, const int *l, const int64_t *f, size_t n,
                      const uint8_t *recs)
{
    vx_err err = {0};
    if (d->cache && vx_metacache_put(d->cache, l, f, n, recs, &err) != 0)
        cache_drop(d, err.msg, 1);
}

/* The features of the list not yet known, once each, into ml / mf (marked PENDING); the
 * ones the cache gave counted. */
static int pending(brw_ondemand *d, const brw_model *m, const int *layer, const int64_t *feature,
                   size_t n, int *ml, int64_t *mf, size_t *k)
{
    for (size_t i = 0; i < n; i++) {
        const int l = layer[i];
        const int64_t f = feature[i];
        if (l < 0 || l >= d->layers || f < 0 || f >= m->s.layer[l].features)
            continue;
        if (layer_bufs(d, m, l) != 0)
            return -1;
        cache_load(d, m, l);
        if (d->have[l][f] == CACHED) {
            d->have[l][f] = KNOWN;
            d->cached++;
        }
        if (d->have[l][f] != UNKNOWN)
            continue;
        d->have[l][f] = PENDING;
        ml[*k] = l;
        mf[(*k)++] = f;
    }
    return 0;
}

/* The layers in which n names at least a third of the features (repeats counted): the
 * screened pass computes a whole layer for about what the exact pass costs for a third of
 * it (1.1B: 2.4 s a layer, 1.3 s for 1000 of its 5632 features), to the same records. */
static int dense_layers(const brw_model *m, const int *layer, size_t n, int *out)
{
    const int L = m->s.layers;
    size_t *cnt = calloc((size_t)L + 1, sizeof *cnt);
    int k = 0;
    if (!cnt)
        return 0;   /* then feature by feature: slower, the same records */
    for (size_t i = 0; i < n; i++)
        if (layer[i] >= 0 && layer[i] < L)
            cnt[layer[i]]++;
    for (int l = 0; l < L; l++)
        if (m->s.layer[l].features > 0 && cnt[l] * 3 >= (size_t)m->s.layer[l].features)
            out[k++] = l;
    free(cnt);
    return k;
}

int brw_meta_prepare(const brw_model *m, const int *layer, const int64_t *feature, size_t n,
                     vx_err *err)
{
    brw_ondemand *d = m->od;
    if (!d || n == 0)
        return 0;
    int *dense = malloc(((size_t)d->layers + 1) * sizeof *dense);
    const int nd = dense ? dense_layers(m, layer, n, dense) : 0;
    const int drc = nd ? brw_meta_prepare_layers(m, dense, nd, err) : 0;
    free(dense);
    if (drc)
        return -1;
    int *ml = malloc(n * sizeof *ml);
    int64_t *mf = malloc(n * sizeof *mf);
    uint8_t *recs = NULL;
    size_t k = 0;
    int rc = -1;
    pthread_mutex_lock(&d->mu);
    if (!ml || !mf || pending(d, m, layer, feature, n, ml, mf, &k) != 0 ||
        (k && !(recs = malloc(k * REC)))) {
        vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
        goto done;
    }
    if (k && check_down(m, err) != 0)
        goto done;
    const double t0 = now();
    if (k && brw_downmeta_exact(&m->s, ml, mf, k, recs, err) != 0)
        goto done;
    for (size_t i = 0; i < k; i++) {
        memcpy(d->rec[ml[i]] + (size_t)mf[i] * REC, recs + i * REC, REC);
        d->have[ml[i]][mf[i]] = KNOWN;
    }
    d->computed += k;
    d->seconds += now() - t0;
    cache_put(d, ml, mf, k, recs);
    k = 0;
    rc = 0;
done:
    for (size_t i = 0; i < k; i++)   /* a failed batch leaves its features to the next */
        d->have[ml[i]][mf[i]] = UNKNOWN;
    pthread_mutex_unlock(&d->mu);
    free(ml);
    free(mf);
    free(recs);
    return rc;
}

/* Is every record of layer l known, the cache's read first (the first time, and counted
 * now)? 1 or 0; -1 without memory. Called under d->mu. */
static int layer_known(brw_ondemand *d, const brw_model *m, int l)
{
    if (layer_bufs(d, m, l) != 0)
        return -1;
    cache_load(d, m, l);
    const int64_t F = m->s.layer[l].features;
    int done = 1;
    for (int64_t f = 0; f < F; f++) {
        if (d->have[l][f] == CACHED) {
            d->have[l][f] = KNOWN;
            d->cached++;
        }
        done &= d->have[l][f] == KNOWN;
    }
    return done;
}

/* Layer l's records that were not known before its pass, to the cache. */
static void cache_put_layer(brw_ondemand *d, const brw_model *m, int l, const uint8_t *was)
{
    const int64_t F = m->s.layer[l].features;
    int *ls = malloc((size_t)F * sizeof *ls + 1);
    int64_t *fs = malloc((size_t)F * sizeof *fs + 1);
    uint8_t *recs = malloc((size_t)F * REC + 1);
    size_t n = 0;
    if (d->cache && ls && fs && recs)
        for (int64_t f = 0; f < F; f++)
            if (was[f] != KNOWN) {
                ls[n] = l;
                fs[n] = f;
                memcpy(recs + n++ * REC, d->rec[l] + (size_t)f * REC, REC);
            }
    if (d->cache && !(ls && fs && recs))
        cache_drop(d, "down-meta cache: out of memory", 1);
    else
        cache_put(d, ls, fs, n, recs);
    free(ls);
    free(fs);
    free(recs);
}

int brw_meta_prepare_layers(const brw_model *m, const int *layers, int n, vx_err *err)
{
    brw_ondemand *d = m->od;
    if (!d || n <= 0)
        return 0;
    int *todo = malloc((size_t)n * sizeof *todo), k = 0, rc = -1;
    uint8_t **recs = malloc((size_t)n * sizeof *recs);
    pthread_mutex_lock(&d->mu);
    if (!todo || !recs) {
        vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const int l = layers[i];
        int listed = 0;
        for (int j = 0; j < k && !listed; j++)
            listed = todo[j] == l;
        if (listed || l < 0 || l >= d->layers || m->s.layer[l].features == 0)
            continue;
        const int lk = layer_known(d, m, l);
        if (lk < 0) {
            vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
            goto done;
        }
        if (lk)
            continue;
        todo[k] = l;
        recs[k++] = d->rec[l];
    }
    if (k && check_down(m, err) != 0)
        goto done;
    const double t0 = now();
    /* a layer's records are copied in only once all of them are computed, and they are
     * the bytes the exact pass gives, so a failure leaves nothing half-written */
    if (k && brw_downmeta_layers(&m->s, todo, k, recs, err) != 0)
        goto done;
    d->seconds += now() - t0;
    for (int i = 0; i < k; i++) {
        const int l = todo[i];
        for (int64_t f = 0; f < m->s.layer[l].features; f++)
            d->computed += d->have[l][f] != KNOWN;
        cache_put_layer(d, m, l, d->have[l]);
        memset(d->have[l], KNOWN, (size_t)m->s.layer[l].features);
    }
    rc = 0;
done:
    pthread_mutex_unlock(&d->mu);
    free(todo);
    free(recs);
    return rc;
}

int brw_meta_known(const brw_model *m, brw_dmet **out, uint8_t **complete, vx_err *err)
{
    brw_ondemand *d = m->od;
    *out = NULL;
    *complete = NULL;
    if (!d || derived_object(m))
        return 0;
    uint8_t **recs = calloc((size_t)d->layers + 1, sizeof *recs);
    uint8_t *done = calloc((size_t)d->layers + 1, 1);
    int any = 0, rc = 0;
    if (!recs || !done) {
        free(recs);
        free(done);
        return vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
    }
    pthread_mutex_lock(&d->mu);
    for (int l = 0; l < d->layers; l++) {
        const int lk = m->s.layer[l].features ? layer_known(d, m, l) : 0;
        if (lk < 0) {
            rc = vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
            break;
        }
        if (lk) {
            recs[l] = d->rec[l];
            done[l] = any = 1;
        }
    }
    if (rc == 0 && any)
        rc = brw_dmet_from_records(&m->s, recs, out, err);
    pthread_mutex_unlock(&d->mu);
    free(recs);
    if (*out)
        *complete = done;
    else
        free(done);
    return rc;
}

void brw_meta_stats(const brw_model *m, brw_od_stats *out)
{
    brw_ondemand *d = m->od;
    memset(out, 0, sizeof *out);
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    out->computed = d->computed;
    out->cached = d->cached;
    out->seconds = d->seconds;
    out->events = d->events;
    snprintf(out->cache, sizeof out->cache, "%s", d->cache_path);
    snprintf(out->why, sizeof out->why, "%s", d->why);
    pthread_mutex_unlock(&d->mu);
}

int brw_meta_prepare_hits(const brw_model *m, const brw_hit *hits, const int *counts,
                          int n_layers, int stride, vx_err *err)
{
    if (!m->od)
        return 0;
    size_t n = 0;
    for (int i = 0; i < n_layers; i++)
        n += (size_t)counts[i];
    int *l = malloc((n + 1) * sizeof *l);
    int64_t *f = malloc((n + 1) * sizeof *f);
    if (!l || !f) {
        free(l);
        free(f);
        return vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
    }
    n = 0;
    for (int i = 0; i < n_layers; i++)
        for (int j = 0; j < counts[i]; j++) {
            l[n] = hits[(size_t)i * (size_t)stride + (size_t)j].layer;
            f[n++] = hits[(size_t)i * (size_t)stride + (size_t)j].feature;
        }
    int rc = brw_meta_prepare(m, l, f, n, err);
    free(l);
    free(f);
    return rc;
}
