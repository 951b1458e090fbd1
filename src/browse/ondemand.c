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
 */
#include "brw_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REC (8 + 8 * (size_t)BRW_DOWN_TOP_K)

struct brw_ondemand {
    pthread_mutex_t mu;      /* sessions may share a model across threads */
    int layers;
    uint8_t **rec;           /* [layers] features × REC bytes, allocated on first use */
    uint8_t **have;          /* [layers] per feature: 1 computed */
    uint64_t computed;
    double seconds;
};

int brw_ondemand_new(brw_model *m, vx_err *err)
{
    brw_ondemand *d = calloc(1, sizeof *d);
    if (d) {
        d->layers = m->s.layers;
        d->rec = calloc((size_t)d->layers + 1, sizeof *d->rec);
        d->have = calloc((size_t)d->layers + 1, sizeof *d->have);
    }
    if (!d || !d->rec || !d->have) {
        if (d) {
            free(d->rec);
            free(d->have);
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
    pthread_mutex_destroy(&d->mu);
    free(d);
}

int brw_ondemand_get(const brw_model *m, int layer, int64_t feature, brw_meta *out)
{
    brw_ondemand *d = m->od;
    memset(out, 0, sizeof *out);
    if (layer < 0 || layer >= d->layers || feature < 0 || feature >= m->s.layer[layer].features)
        return -1;
    pthread_mutex_lock(&d->mu);
    if (d->have[layer] && d->have[layer][feature])
        brw_dmet_rec(d->rec[layer] + (size_t)feature * REC, BRW_DOWN_TOP_K, out);
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

/* The features of the list not yet computed, once each, into ml / mf (marked 2 in have). */
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
        if (d->have[l][f])
            continue;
        d->have[l][f] = 2;
        ml[*k] = l;
        mf[(*k)++] = f;
    }
    return 0;
}

int brw_meta_prepare(const brw_model *m, const int *layer, const int64_t *feature, size_t n,
                     vx_err *err)
{
    brw_ondemand *d = m->od;
    if (!d || n == 0)
        return 0;
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
        d->have[ml[i]][mf[i]] = 1;
    }
    d->computed += k;
    d->seconds += now() - t0;
    k = 0;
    rc = 0;
done:
    for (size_t i = 0; i < k; i++)   /* a failed batch leaves its features to the next */
        d->have[ml[i]][mf[i]] = 0;
    pthread_mutex_unlock(&d->mu);
    free(ml);
    free(mf);
    free(recs);
    return rc;
}

/* Is every feature of layer l computed? */
static int layer_done(const brw_ondemand *d, const brw_model *m, int l)
{
    return d->have[l] && !memchr(d->have[l], 0, (size_t)m->s.layer[l].features);
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
        if (listed || l < 0 || l >= d->layers || m->s.layer[l].features == 0 ||
            layer_done(d, m, l))
            continue;
        if (layer_bufs(d, m, l) != 0) {
            vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
            goto done;
        }
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
    for (int i = 0; i < k; i++) {
        const int l = todo[i];
        for (int64_t f = 0; f < m->s.layer[l].features; f++)
            d->computed += d->have[l][f] != 1;
        memset(d->have[l], 1, (size_t)m->s.layer[l].features);
    }
    d->seconds += now() - t0;
    rc = 0;
done:
    pthread_mutex_unlock(&d->mu);
    free(todo);
    free(recs);
    return rc;
}

uint64_t brw_meta_computed(const brw_model *m, double *seconds)
{
    brw_ondemand *d = m->od;
    uint64_t n = 0;
    double s = 0;
    if (d) {
        pthread_mutex_lock(&d->mu);
        n = d->computed;
        s = d->seconds;
        pthread_mutex_unlock(&d->mu);
    }
    if (seconds)
        *seconds = s;
    return n;
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
