/*
 * describe.c — DESCRIBE: what the model associates with an entity. The entity's query
 * (mean token embedding × scale) is walked at 20 features per layer; hits are kept when
 * their gate is positive and at least 20% of the strongest gate of the scan (a relative
 * floor, so the rule holds for any model scale — the reference's absolute 5.0 only fits
 * one family), their target is a content word and not the entity itself, and they are
 * coherent (some content word among the other output tokens, unless the gate is at
 * least half the strongest). Hits merge by lower-cased target (max gate, best layer and
 * feature, layer span, count), are labelled, and bucketed by the band of their best
 * layer with per-band caps.
 *
 * Signal: the strongest gate relative to the median |gate| of all scanned hits:
 * clean (>= 4x), moderate (>= 2x), diffuse otherwise.
 */
#include "brw_int.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DESCRIBE_K 20

static const char *const stop_words[] = {
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her",
    "was", "one", "our", "out", "has", "him", "his", "how", "its", "may", "new", "now",
    "old", "see", "two", "way", "who", "did", "get", "let", "put", "say", "she", "too",
    "use", "that", "with", "have", "this", "will", "your", "from", "they", "been", "were",
    "what", "when", "which", "their", "there", "than", "then", "them", "these", "those",
    "into", "also", "some", "such", "only", "over", "very", "just", "more", "most", "other",
    "about", "after", "before", "would", "could", "should", "where", "while", "being",
    "does", "each", "here", "because", "between", "through", "every", NULL};

/* A readable content word: >= 3 letters, Latin script (ASCII letters or UTF-8 Latin-1 /
 * Latin Extended-A letters), inner ' or - allowed, not camelCase, not a stop word. */
static int content_word(const char *t)
{
    size_t letters = 0;
    const unsigned char *p = (const unsigned char *)t;
    int prev_lower = 0;
    for (; *p; p++) {
        if (isalpha(*p)) {
            if (prev_lower && isupper(*p))
                return 0;
            prev_lower = islower(*p) != 0;
            letters++;
        } else if (*p >= 0xC3 && *p <= 0xC5 && p[1] >= 0x80 && p[1] <= 0xBF) {
            p++;
            letters++;
            prev_lower = 1;
        } else if ((*p == '\'' || *p == '-') && letters > 0 && p[1]) {
            prev_lower = 0;
        } else {
            return 0;
        }
    }
    return letters >= 3 && !brw_stop_word(t);
}

int brw_stop_word(const char *t)
{
    for (int i = 0; stop_words[i]; i++)
        if (strcasecmp(t, stop_words[i]) == 0)
            return 1;
    return 0;
}

/* Readable: non-empty after trimming and free of control bytes and U+FFFD. */
static int readable(const char *t)
{
    if (!*t)
        return 0;
    for (const unsigned char *p = (const unsigned char *)t; *p; p++)
        if (*p < 0x20 || (p[0] == 0xEF && p[1] == 0xBF && p[2] == 0xBD))
            return 0;
    return 1;
}

typedef struct cand {
    char target[128];
    float gate;
    int layer, layer_min, layer_max, count;
    int64_t feature;
    int n_also;
    char also[BRW_ALSO_MAX][128];
} cand;

static int cmp_gate(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    int c = brw_fcmp(b->gate, a->gate);
    if (c)
        return c;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    return a->feature < b->feature ? -1 : a->feature > b->feature;
}

int brw_describe_run(const brw_model *m, const char *entity, const brw_describe_opts *o,
                     brw_describe *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    out->signal = "diffuse";
    brw_describe_opts def = {.band = -1, .at_layer = -1};
    if (!o)
        o = &def;
    char ent[256];
    brw_trim(entity, ent, sizeof ent);
    if (!ent[0])
        return vx_errf(err, VX_EARG, "DESCRIBE needs a non-empty entity");
    /* without labels every edge would be filtered away: "no edges found" would be a lie */
    if (o->relations_only && !brw_has_labels(m, o->ov))
        return vx_errf(err, VX_EMISSING, "RELATIONS ONLY needs relation labels "
                       "(feature_labels.json or relation_clusters.json); this container has "
                       "none");
    int L = m->s.layers, *layers = malloc((size_t)L * sizeof *layers), n_layers = 0;
    if (!layers)
        return vx_errf(err, VX_ENOMEM, "describe: out of memory");
    if (o->at_layer >= 0) {
        if (o->at_layer >= L) {
            free(layers);
            return vx_errf(err, VX_EARG, "layer %d is out of range (the model has %d layers: "
                           "0-%d)", o->at_layer, L, L - 1);
        }
        /* AT LAYER with a band: that layer when it lies in the band, else nothing */
        if (o->band < 0 || brw_band_of(m, o->at_layer) == o->band)
            layers[n_layers++] = o->at_layer;
    } else {
        for (int l = 0; l < L; l++)
            if (o->band < 0 || brw_band_of(m, l) == o->band)
                layers[n_layers++] = l;
    }
    if (n_layers == 0) {
        free(layers);
        return 0;
    }
    float *q = malloc((size_t)m->s.hidden * sizeof *q);
    brw_hit *hits = malloc((size_t)n_layers * DESCRIBE_K * sizeof *hits);
    int *counts = calloc((size_t)n_layers, sizeof *counts);
    cand *cs = calloc((size_t)n_layers * DESCRIBE_K + 1, sizeof *cs);
    float *mags = malloc(((size_t)n_layers * DESCRIBE_K + 1) * sizeof *mags);
    int *pl = malloc(((size_t)n_layers * DESCRIBE_K + 1) * sizeof *pl);
    int64_t *pf = malloc(((size_t)n_layers * DESCRIBE_K + 1) * sizeof *pf);
    int rc = -1;
    if (!q || !hits || !counts || !cs || !mags || !pl || !pf) {
        vx_errf(err, VX_ENOMEM, "describe: out of memory");
        goto done;
    }
    if (brw_entity_query(m, ent, q, err) != 0 ||
        brw_gate_knn(m, layers, n_layers, q, DESCRIBE_K, o->ov, hits, counts, err) != 0)
        goto done;
    float maxg = 0;
    size_t nm = 0;
    for (int i = 0; i < n_layers; i++)
        for (int j = 0; j < counts[i]; j++) {
            float g = hits[(size_t)i * DESCRIBE_K + j].score;
            mags[nm++] = fabsf(g);
            if (g > maxg)
                maxg = g;
        }
    float median = 0;
    if (nm) {
        qsort(mags, nm, sizeof *mags, brw_cmp_floats);
        median = mags[nm / 2];
    }
    out->max_gate = maxg;
    /* only the hits that can become edges (the test below) need their down-meta */
    size_t np = 0;
    for (int i = 0; i < n_layers; i++)
        for (int j = 0; j < counts[i]; j++) {
            const brw_hit *h = &hits[(size_t)i * DESCRIBE_K + j];
            if (h->score > 0 && h->score >= 0.2f * maxg) {
                pl[np] = h->layer;
                pf[np++] = h->feature;
            }
        }
    if (brw_meta_prepare(m, pl, pf, np, err) != 0)
        goto done;
    if (median > 0 && maxg >= 4 * median)
        out->signal = "clean";
    else if (median > 0 && maxg >= 2 * median)
        out->signal = "moderate";
    size_t nc = 0;
    for (int i = 0; i < n_layers; i++)
        for (int j = 0; j < counts[i]; j++) {
            const brw_hit *h = &hits[(size_t)i * DESCRIBE_K + j];
            if (!(h->score > 0) || h->score < 0.2f * maxg)
                continue;
            brw_meta md;
            if (brw_feature_meta(m, o->ov, h->layer, h->feature, &md) != 0)
                continue;
            char tgt[128];
            brw_trim(brw_token_text(m, md.top_id), tgt, sizeof tgt);
            if (brw_token_blank(m, md.top_id) || !content_word(tgt) || strcasecmp(tgt, ent) == 0)
                continue;
            cand c = {.gate = h->score, .layer = h->layer, .layer_min = h->layer,
                      .layer_max = h->layer, .count = 1, .feature = h->feature};
            snprintf(c.target, sizeof c.target, "%s", tgt);
            /* also-tokens: other readable outputs with a positive logit, up to 5, of
             * which content words are kept (up to 3) */
            int seen_readable = 0, n_read = 0;
            for (int t = 0; t < md.k && n_read < BRW_ALSO_MAX; t++) {
                if (md.ids[t] == md.top_id || !(md.logits[t] > 0))
                    continue;
                char a[128];
                brw_trim(brw_token_text(m, md.ids[t]), a, sizeof a);
                if (brw_token_blank(m, md.ids[t]) || !readable(a))
                    continue;
                seen_readable = 1;
                n_read++;
                if (content_word(a) && c.n_also < 3)
                    snprintf(c.also[c.n_also++], sizeof c.also[0], "%s", a);
            }
            if (c.n_also == 0 && seen_readable && h->score < 0.5f * maxg)
                continue;
            /* merge by lower-cased target */
            size_t k;
            for (k = 0; k < nc; k++)
                if (strcasecmp(cs[k].target, c.target) == 0)
                    break;
            if (k == nc) {
                cs[nc++] = c;
                continue;
            }
            cand *d = &cs[k];
            d->count++;
            if (c.layer < d->layer_min)
                d->layer_min = c.layer;
            if (c.layer > d->layer_max)
                d->layer_max = c.layer;
            if (c.gate > d->gate) {
                int lmin = d->layer_min, lmax = d->layer_max, cnt = d->count;
                *d = c;
                d->layer_min = lmin;
                d->layer_max = lmax;
                d->count = cnt;
            }
        }
    qsort(cs, nc, sizeof *cs, cmp_gate);
    out->edges = calloc(nc + 1, sizeof *out->edges);
    if (!out->edges) {
        vx_errf(err, VX_ENOMEM, "describe: out of memory");
        goto done;
    }
    int cap = o->mode == BRW_DESCRIBE_BRIEF ? 10 : 30;
    for (int b = -1; b < 3; b++) {
        int taken = 0, bcap = b == BRW_OUTPUT && o->mode == BRW_DESCRIBE_BRIEF ? 5 : cap;
        for (size_t k = 0; k < nc; k++) {
            const cand *c = &cs[k];
            if (brw_band_of(m, c->layer) != b)
                continue;
            const char *label = brw_label(m, o->ov, c->layer, c->feature);
            if (o->relations_only && !label)
                continue;
            out->total_edges++;
            if (taken >= bcap)
                continue;
            brw_edge *e = &out->edges[out->n_edges++];
            taken++;
            e->target = strdup(c->target);
            e->relation = label ? strdup(label) : NULL;
            e->gate = c->gate;
            e->layer = c->layer;
            e->feature = c->feature;
            e->band = b;
            e->count = c->count;
            e->layer_min = c->layer_min;
            e->layer_max = c->layer_max;
            e->n_also = c->n_also;
            for (int a = 0; a < c->n_also; a++)
                e->also[a] = strdup(c->also[a]);
        }
    }
    rc = 0;
done:
    free(layers);
    free(q);
    free(hits);
    free(counts);
    free(cs);
    free(mags);
    free(pl);
    free(pf);
    if (rc != 0)
        brw_describe_free(out);
    return rc;
}

void brw_describe_free(brw_describe *d)
{
    for (size_t i = 0; i < d->n_edges; i++) {
        free(d->edges[i].target);
        free(d->edges[i].relation);
        for (int a = 0; a < d->edges[i].n_also; a++)
            free(d->edges[i].also[a]);
    }
    free(d->edges);
    d->edges = NULL;
    d->n_edges = 0;
}
