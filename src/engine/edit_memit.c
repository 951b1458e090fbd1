/*
 * edit_memit.c — fact insertion as a rank-1, covariance-whitened update of one layer's
 * down_proj (method and shapes in edit_memit.h). The forward passes are the engine's own
 * (the candidate update rides on the overlay as a low-rank delta, so what is optimised is
 * exactly what the overlay will apply); the gradient is a hand-written backward pass for
 * the prompt's last position through the final norm, the LM head and the FFN branches and
 * norms of the layers above the edit.
 */
#include "edit_memit.h"
#include "engine_int.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

/* LAPACK (OpenBLAS), Fortran calling convention: the trailing size_t is the hidden
 * length of the character argument. */
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info,
                    size_t uplo_len);
extern void dpotrs_(const char *uplo, const int *n, const int *nrhs, const double *a,
                    const int *lda, double *b, const int *ldb, int *info, size_t uplo_len);

/* A layer whose FFN output is normalised after down_proj: -1 naming it. */
static int post_normed(const eng_model *m, int layer, vx_err *err)
{
    /* the rank-1 update's δ would pass through the norm, which keeps the branch's length
     * and bends δ with the rest of the output: what reaches the residual is not δ */
    if (m->layers[layer].post_ffn.width)
        return vx_errf(err, VX_EUNSUPPORTED, "INSERT at layer %d: its FFN output is normalised "
                       "after down_proj (post-FFN norm), so a rank-1 down_proj update cannot set "
                       "what reaches the residual; INSERT edits dense FFN layers without one "
                       "(MODE KNN does not edit the FFN)", layer);
    return 0;
}

/* The machine's memory as the covariance rule reads it (a test may set it). */
static uint64_t memory_bytes;

void eng_edit_test_set_memory(uint64_t bytes)
{
    memory_bytes = bytes;
}

/* A site of F features: its F×F covariance is built in f32 and f64 and copied for the
 * solve (20 bytes per entry at the peak); more than half the machine's memory is refused
 * before the corpus runs rather than failing, or swapping, minutes into it. */
static int covariance_fits(int layer, int64_t F, int expert, vx_err *err)
{
    uint64_t mem = memory_bytes;
    if (!mem) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        mem = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    }
    const uint64_t need = (uint64_t)F * (uint64_t)F * 20;
    if (mem && need > mem / 2)
        return vx_errf(err, VX_EUNSUPPORTED, "layer %d%s has %lld features: INSERT's %lld x %lld "
                       "activation covariance needs %.1f GiB while solving, more than half "
                       "of this machine's %.1f GiB", layer, expert ? "'s experts" : "",
                       (long long)F, (long long)F, (long long)F, need / 1073741824.0,
                       mem / 1073741824.0);
    return 0;
}

int eng_edit_check_layer(const eng_model *m, int layer, vx_err *err)
{
    if (layer < 0 || layer >= m->n_layers)
        return vx_errf(err, VX_EARG, "layer %d is out of range (the model has %d layers: 0-%d)",
                       layer, m->n_layers, m->n_layers - 1);
    const eng_layer *L = &m->layers[layer];
    if (L->ffn_none)
        return vx_errf(err, VX_EUNSUPPORTED, "layer %d is a %s layer with no FFN: INSERT edits "
                       "dense FFN layers", layer, vx_mixer_name(m->shape->layer[layer].mixer));
    if (L->moe)
        return vx_errf(err, VX_EUNSUPPORTED, "layer %d is a mixture-of-experts layer: this "
                       "edit needs a dense FFN (INSERT's default MODE MEMIT edits the routed "
                       "experts)", layer);
    if (post_normed(m, layer, err))
        return -1;
    return covariance_fits(layer, L->mlp.inter, 0, err);
}

int eng_edit_check_site(const eng_model *m, int layer, int expert, vx_err *err)
{
    if (expert < 0 || layer < 0 || layer >= m->n_layers || !m->layers[layer].moe)
        return eng_edit_check_layer(m, layer, err);
    if (expert >= m->experts)
        return vx_errf(err, VX_EARG, "expert %d is out of range (layer %d has experts 0-%d)",
                       expert, layer, m->experts - 1);
    if (post_normed(m, layer, err))
        return -1;
    return covariance_fits(layer, m->expert_inter, 1, err);
}

/* The features an edit site spans: a dense layer's [0, inter), or one routed expert's
 * slice [expert · expert_inter, +expert_inter) of a MoE layer's expert-major features. */
static int site_features(const eng_model *m, int layer, int expert, int *off)
{
    *off = expert >= 0 ? expert * m->expert_inter : 0;
    return expert >= 0 ? m->expert_inter : m->layers[layer].mlp.inter;
}

/* ---------------------------------------------------------------- capture */

typedef struct capture {
    int layer, H, F, n_layers;
    int off;                  /* the site's first feature in the layer's activations */
    float *key;               /* [F] activations at `layer`, last position, or NULL */
    float *xin;               /* [H] FFN input at `layer`, last position, or NULL */
    float *x;                 /* [n_layers × H] residual after each layer, last position */
    float *ffn;               /* [n_layers × H] FFN branch output, last position */
    float *rows;              /* every position's activations at `layer` when acts */
    float *in_rows;           /* every position's FFN input [H] when inputs */
    size_t n_rows, cap_rows;
    int acts, inputs;
    /* a batch of texts (run_corpus): their lengths, and the first one's number; key and
     * xin then receive each text's last position at its number ([texts × F], [texts × H]) */
    const int *text_n;
    int texts;
    size_t text0;
    float *final;             /* [texts × H]: each text's residual after the last layer */
    float *entry;             /* [positions × H]: the residual entering `layer` (run) */
    int oom;
} capture;

/* The residual entering layer `layer`, every position: the embedding for layer 0. */
static void keep_entry(capture *c, int pos0, int n, const float *resid)
{
    memcpy(c->entry + (size_t)pos0 * c->H, resid, (size_t)n * c->H * sizeof(float));
}

static void on_embed(void *ctx, int pos0, int n, const float *resid)
{
    capture *c = ctx;
    if (c->entry && c->layer == 0)
        keep_entry(c, pos0, n, resid);
}

/* Row r's activations and FFN input into the slots of text t (key, xin, when set). */
static void last_row(capture *c, size_t t, int r, const float *in, const float *act,
                     int features)
{
    if (c->xin)
        memcpy(c->xin + t * c->H, in + (size_t)r * c->H, (size_t)c->H * sizeof(float));
    if (c->key)
        memcpy(c->key + t * c->F, act + (size_t)r * features + c->off, (size_t)c->F * sizeof(float));
}

static void on_ffn(void *ctx, int layer, int pos0, int n, const float *in, const float *act,
                   int features)
{
    (void)pos0;
    capture *c = ctx;
    if (layer != c->layer || c->off + c->F > features)
        return;
    if (c->text_n)
        for (int t = 0, r = 0; t < c->texts; t++) {
            r += c->text_n[t];
            last_row(c, c->text0 + (size_t)t, r - 1, in, act, features);
        }
    else
        last_row(c, 0, n - 1, in, act, features);
    if (c->acts || c->inputs) {
        if (c->n_rows + (size_t)n > c->cap_rows) {
            const size_t cap = (c->n_rows + (size_t)n) * 2;
            float *na = c->acts ? realloc(c->rows, cap * c->F * sizeof *na) : NULL;
            if (na)
                c->rows = na;
            float *ni = c->inputs ? realloc(c->in_rows, cap * c->H * sizeof *ni) : NULL;
            if (ni)
                c->in_rows = ni;
            if ((c->acts && !na) || (c->inputs && !ni)) {
                c->oom = 1;
                return;
            }
            c->cap_rows = cap;
        }
        for (int t = 0; t < n; t++) {
            const size_t r = c->n_rows + (size_t)t;
            if (c->acts)
                memcpy(c->rows + r * c->F, act + (size_t)t * features + c->off,
                       (size_t)c->F * sizeof(float));
            if (c->inputs)
                memcpy(c->in_rows + r * c->H, in + (size_t)t * c->H, (size_t)c->H * sizeof(float));
        }
        c->n_rows += (size_t)n;
    }
}

static void on_layer(void *ctx, int layer, int pos0, int n, const float *attn,
                     const float *ffn, const float *resid)
{
    (void)attn;
    capture *c = ctx;
    if (c->entry && layer == c->layer - 1)
        keep_entry(c, pos0, n, resid);
    if (c->final && c->text_n && layer == c->n_layers - 1)
        for (int t = 0, r = 0; t < c->texts; t++) {
            r += c->text_n[t];
            memcpy(c->final + (c->text0 + (size_t)t) * c->H, resid + (size_t)(r - 1) * c->H,
                   (size_t)c->H * sizeof(float));
        }
    if (!c->x)
        return;
    memcpy(c->x + (size_t)layer * c->H, resid + (size_t)(n - 1) * c->H, (size_t)c->H * sizeof(float));
    memcpy(c->ffn + (size_t)layer * c->H, ffn + (size_t)(n - 1) * c->H, (size_t)c->H * sizeof(float));
}

/* rc, or an error when capture c ran out of memory during a pass that succeeded. */
static int captured(const capture *c, int rc, vx_err *err)
{
    if (!rc && c && c->oom)
        return vx_errf(err, VX_ENOMEM, "out of memory capturing activations");
    return rc;
}

/* The observer that feeds capture c. */
static eng_observer observe(capture *c)
{
    return (eng_observer){c, on_embed, on_layer, on_ffn, NULL};
}

/* One forward pass from position 0 with the capture attached: of ids, or, when entry is not
 * NULL, from layer c->layer on with entry the residual entering it at the n positions
 * (eng_forward_from); logits may be NULL. */
static int run_at(eng_model *m, const int32_t *ids, const float *entry, int n, capture *c,
                  float *logits, vx_err *err)
{
    eng_session *s;
    if (eng_session_new(m, n, &s, err))
        return -1;
    const eng_observer obs = observe(c);
    int rc = entry ? eng_forward_from(s, c->layer, entry, n, logits, &obs, err)
                   : eng_forward(s, ids, n, logits, &obs, err);
    eng_session_free(s);
    return captured(c, rc, err);
}

static int run(eng_model *m, const int32_t *ids, int n, capture *c, float *logits, vx_err *err)
{
    return run_at(m, ids, NULL, n, c, logits, err);
}

/* The activations of an edit site (site_features) at the last of ids[0..n). */
static int site_key(eng_model *m, int layer, int expert, const int32_t *ids, int n, float *key,
                    vx_err *err)
{
    if (eng_edit_check_site(m, layer, expert, err))
        return -1;
    capture c = {.layer = layer, .H = m->hidden, .n_layers = m->n_layers, .key = key};
    c.F = site_features(m, layer, expert, &c.off);
    return run(m, ids, n, &c, NULL, err);
}

int eng_edit_key(eng_model *m, int layer, const int32_t *ids, int n, float *key, vx_err *err)
{
    return site_key(m, layer, -1, ids, n, key, err);
}

int eng_edit_ffn_in(eng_model *m, int layer, const int32_t *ids, int n, float *x,
                    float *logits, vx_err *err)
{
    if (eng_edit_check_layer(m, layer, err))
        return -1;
    capture c = {.layer = layer, .H = m->hidden, .F = m->layers[layer].mlp.inter,
                 .n_layers = m->n_layers, .xin = x};
    return run(m, ids, n, &c, logits, err);
}

/* ---------------------------------------------------------------- corpus, covariance */

/* Texts per batched pass: the corpus's products run as one GEMM over this many rows per
 * step instead of a GEMV per text, and its sessions' caches stay small. */
#define CORPUS_BATCH 64

/* eng_edit_corpus, with c (may be NULL) attached to every pass, which sees every position
 * of every text. */
static int sample_corpus(eng_model *m, const char *const *starts, int n_starts, int nseq,
                         int len, uint64_t seed, capture *c, int32_t **ids, int **lens,
                         vx_err *err)
{
    const eng_observer obs = observe(c);
    *ids = NULL;
    *lens = NULL;
    if (!m->tok)
        return vx_errf(err, VX_EMISSING, "the container has no tokenizer to build a corpus");
    /* texts i < nseq: start i % n_starts and up to len tokens sampled with seed + i, CORPUS_BATCH
     * texts at a time */
    const int G = nseq < 1 ? 1 : nseq < CORPUS_BATCH ? nseq : CORPUS_BATCH;
    int32_t **tok = calloc((size_t)n_starts, sizeof *tok);
    size_t *ntok = calloc((size_t)n_starts, sizeof *ntok), ptot = 0, cap = 1, used = 0;
    int *ln = calloc((size_t)nseq + 1, sizeof *ln);
    int32_t *gen = malloc((size_t)G * len * sizeof *gen), *all = NULL, *prompts = NULL;
    int *np = malloc((size_t)G * sizeof *np), *ng = malloc((size_t)G * sizeof *ng);
    eng_session **ss = calloc((size_t)G, sizeof *ss);
    eng_sampler *sp = malloc((size_t)G * sizeof *sp);
    static const char oom[] = "out of memory sampling a corpus";
    int rc = tok && ntok && ln && gen && np && ng && ss && sp ? 0 : vx_errf(err, VX_ENOMEM, "%s", oom);
    for (int i = 0; !rc && i < n_starts; i++) {
        rc = eng_tok_encode(m->tok, starts[i], strlen(starts[i]), 1, &tok[i], &ntok[i], err);
        ptot += ntok[i];
    }
    for (int i = 0; !rc && i < nseq; i++) cap += ntok[i % n_starts] + (size_t)len;
    if (!rc && (!(all = malloc(cap * sizeof *all)) ||
                !(prompts = malloc(ptot * (size_t)G * sizeof *prompts))))
        rc = vx_errf(err, VX_ENOMEM, "%s", oom);
    for (int i0 = 0; !rc && i0 < nseq; i0 += G) {
        const int B = nseq - i0 < G ? nseq - i0 : G;
        for (int b = 0, off = 0; !rc && b < B; off += np[b++]) {
            const int st = (i0 + b) % n_starts;
            np[b] = (int)ntok[st];
            memcpy(prompts + off, tok[st], ntok[st] * sizeof *prompts);
            sp[b] = (eng_sampler){1.0f, 0, 1.0f, seed + (uint64_t)(i0 + b)};
            rc = eng_session_new(m, np[b] + len, &ss[b], err);
        }
        if (!rc)
            rc = eng_generate_batch(ss, B, prompts, np, len, sp, c ? &obs : NULL, c != NULL, gen,
                                    ng, err);
        rc = captured(c, rc, err);
        for (int b = 0; b < B; b++) {
            eng_session_free(ss[b]);
            ss[b] = NULL;
        }
        for (int b = 0, o = 0; !rc && b < B; o += np[b++]) {
            memcpy(all + used, prompts + o, (size_t)np[b] * sizeof *all);
            memcpy(all + used + np[b], gen + (size_t)b * len, (size_t)ng[b] * sizeof *all);
            used += (size_t)np[b] + (size_t)ng[b];
            ln[i0 + b] = np[b] + ng[b];
        }
    }
    for (int i = 0; tok && i < n_starts; i++) free(tok[i]);
    free(tok);
    free(ntok);
    free(gen);
    free(prompts);
    free(np);
    free(ng);
    free(ss);
    free(sp);
    if (rc) {
        free(all);
        free(ln);
        return -1;
    }
    *ids = all;
    *lens = ln;
    return 0;
}

int eng_edit_corpus(eng_model *m, const char *const *starts, int n_starts, int nseq, int len,
                    uint64_t seed, int32_t **ids, int **lens, vx_err *err)
{
    return sample_corpus(m, starts, n_starts, nseq, len, seed, NULL, ids, lens, err);
}

/* Every text of a corpus through the capture c (its rows freed on failure), as many texts
 * per eng_forward_batch as eng_batch_fit gives; texts
 * must not be empty. logits, when not NULL, receives each text's next-token logits
 * [nseq × vocab]. */
static int run_corpus(eng_model *m, const int32_t *ids, const int *lens, int nseq, capture *c,
                      float *logits, vx_err *err)
{
    eng_session **ss = calloc((size_t)nseq + 1, sizeof *ss);
    int *nb = malloc(((size_t)nseq + 1) * sizeof *nb);
    int rc = ss && nb ? 0 : vx_errf(err, VX_ENOMEM, "out of memory for the corpus's sessions");
    const eng_observer obs = observe(c);
    size_t off = 0;
    for (int i = 0; !rc && i < nseq;) {
        int B = 0, rows = 0;
        const int first = i, fit = eng_batch_fit(lens + i, nseq - i);
        for (; B < fit; i++) {
            if ((rc = eng_session_new(m, lens[i], &ss[B], err)))
                break;
            nb[B++] = lens[i];
            rows += lens[i];
        }
        c->text_n = nb;
        c->texts = B;
        c->text0 = (size_t)first;
        if (!rc)
            rc = eng_forward_batch(ss, B, ids + off, nb,
                                   logits ? logits + (size_t)first * m->vocab : NULL, &obs, err);
        rc = captured(c, rc, err);
        for (int b = 0; b < B; b++) {
            eng_session_free(ss[b]);
            ss[b] = NULL;
        }
        off += (size_t)rows;
    }
    free(ss);
    free(nb);
    c->text_n = NULL;
    c->texts = 0;
    if (rc) {
        free(c->rows);
        free(c->in_rows);
        c->rows = c->in_rows = NULL;
    }
    return rc;
}

/* The site's covariance from the rows c captured (acts; inputs when c->inputs): both
 * handed over or freed. */
static int site_cov(capture *c, double **cov, int64_t *count, float **inputs, vx_err *err)
{
    const int F = c->F;
    float *cf = c->n_rows ? calloc((size_t)F * F, sizeof *cf) : NULL;
    double *cd = c->n_rows ? malloc((size_t)F * F * sizeof *cd) : NULL;
    if (!cf || !cd) {
        free(c->rows);
        free(c->in_rows);
        free(cf);
        free(cd);
        return c->n_rows ? vx_errf(err, VX_ENOMEM, "out of memory for a %d x %d covariance", F, F)
                         : vx_errf(err, VX_EARG, "the corpus is empty");
    }
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, F, (int)c->n_rows,
                1.0f / (float)c->n_rows, c->rows, F, 0.0f, cf, F);
    for (int i = 0; i < F; i++)
        for (int j = i; j < F; j++)
            cd[(size_t)i * F + j] = cd[(size_t)j * F + i] = cf[(size_t)i * F + j];
    free(cf);
    free(c->rows);
    *cov = cd;
    *count = (int64_t)c->n_rows;
    if (inputs)
        *inputs = c->in_rows;
    return 0;
}

/* A capture of every position's activations at the site (and FFN inputs when inputs). */
static int site_capture(eng_model *m, int layer, int expert, int inputs, capture *c,
                        vx_err *err)
{
    if (eng_edit_check_site(m, layer, expert, err))
        return -1;
    *c = (capture){.layer = layer, .H = m->hidden, .n_layers = m->n_layers, .acts = 1,
                   .inputs = inputs};
    c->F = site_features(m, layer, expert, &c->off);
    return 0;
}

int eng_edit_covariance(eng_model *m, int layer, int expert, const int32_t *ids, const int *lens,
                        int nseq, double **cov, int64_t *count, float **inputs, vx_err *err)
{
    *cov = NULL;
    *count = 0;
    if (inputs)
        *inputs = NULL;
    capture c;
    if (site_capture(m, layer, expert, inputs != NULL, &c, err) ||
        run_corpus(m, ids, lens, nseq, &c, NULL, err))
        return -1;
    return site_cov(&c, cov, count, inputs, err);
}

int eng_edit_corpus_stats(eng_model *m, const char *const *starts, int n_starts, int nseq,
                          int len, uint64_t seed, int layer, int expert, int32_t **ids,
                          int **lens, double **cov, int64_t *count, float **inputs,
                          vx_err *err)
{
    *ids = NULL;
    *lens = NULL;
    *cov = NULL;
    *count = 0;
    if (inputs)
        *inputs = NULL;
    capture c;
    if (site_capture(m, layer, expert, inputs != NULL, &c, err))
        return -1;
    if (sample_corpus(m, starts, n_starts, nseq, len, seed, &c, ids, lens, err)) {
        free(c.rows);
        free(c.in_rows);
        return -1;
    }
    if (site_cov(&c, cov, count, inputs, err)) {
        free(*ids);
        free(*lens);
        *ids = NULL;
        *lens = NULL;
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- prompts and decoys */

/* s without its surrounding blanks: *n bytes from the returned pointer. */
static const char *trimmed(const char *s, int *n)
{
    s += strspn(s, " \t\r\n");
    size_t k = strlen(s);
    while (k > 0 && strchr(" \t\r\n", s[k - 1]))
        k--;
    *n = (int)k;
    return s;
}

char *eng_edit_prompt(const char *relation, const char *entity)
{
    /* blanks around either part are not part of the name: DESCRIBE and DELETE match the
     * entity trimmed, so the prompt does too (" Zorbania " keyed "of  Zorbania  is") */
    int nr, ne;
    const char *r = trimmed(relation, &nr), *e = trimmed(entity, &ne);
    size_t n = (size_t)nr + (size_t)ne + 16;
    char *p = malloc(n);
    if (!p)
        return NULL;
    snprintf(p, n, "The %.*s of %.*s is", nr, r, ne, e);
    for (char *c = p + 4; *c && c < p + 4 + nr; c++)
        if (*c == '-' || *c == '_')
            *c = ' ';
    return p;
}

/* A vocabulary piece that is a word-boundary marker ("Ġ" or "▁") followed by an
 * alphabetic word of at least three letters — capitalised ("ĠLondon") when capital, else
 * lower-case ("Ġschool"): the word, else NULL. */
static const char *vocab_word(const char *piece, int capital)
{
    const char *w = NULL;
    if (!strncmp(piece, "\xc4\xa0", 2))
        w = piece + 2;
    else if (!strncmp(piece, "\xe2\x96\x81", 3))
        w = piece + 3;
    if (!w || (capital && !(w[0] >= 'A' && w[0] <= 'Z')))
        return NULL;
    size_t k = capital ? 1 : 0;
    for (; w[k]; k++)
        if (!(w[k] >= 'a' && w[k] <= 'z'))
            return NULL;
    return k >= 3 ? w : NULL;
}

/* Up to n prompts built from vocabulary words (lowest ids first): the canonical prompt of
 * relation with a capitalised word as entity (entity itself skipped), or with relation
 * NULL "The {w} is" for lower-case words; from one pass, their keys at the site (keys) and
 * their FFN inputs at `layer` (inputs), whichever is not NULL. */
static int word_keys(eng_model *m, int layer, int expert, const char *relation,
                     const char *entity, int n, float **keys, float **inputs, int *count,
                     vx_err *err)
{
    if (keys)
        *keys = NULL;
    if (inputs)
        *inputs = NULL;
    *count = 0;
    if (eng_edit_check_site(m, layer, expert, err))
        return -1;
    if (!m->tok)
        return vx_errf(err, VX_EMISSING, "the container has no tokenizer for decoy prompts");
    capture c = {.layer = layer, .H = m->hidden, .n_layers = m->n_layers};
    c.F = site_features(m, layer, expert, &c.off);
    const size_t slots = (size_t)(n > 0 ? n : 1);
    c.key = keys ? malloc(slots * c.F * sizeof *c.key) : NULL;
    c.xin = inputs ? malloc(slots * c.H * sizeof *c.xin) : NULL;
    int *lens = malloc(slots * sizeof *lens);
    int32_t *all = NULL;
    size_t used = 0, cap = 0;
    int got = 0, rc = (!keys || c.key) && (!inputs || c.xin) && lens
                          ? 0 : vx_errf(err, VX_ENOMEM, "out of memory for decoy keys");
    size_t V = eng_tok_vocab_size(m->tok);
    for (size_t id = 0; !rc && id < V && got < n; id++) {
        const char *piece = eng_tok_piece(m->tok, (int32_t)id);
        const char *w = piece ? vocab_word(piece, relation != NULL) : NULL;
        if (!w || (entity && strcasecmp(w, entity) == 0))
            continue;
        char frame[128], *prompt = frame;
        if (relation)
            prompt = eng_edit_prompt(relation, w);
        else
            snprintf(frame, sizeof frame, "The %.100s is", w);
        int32_t *ids = NULL;
        size_t ni = 0;
        rc = !prompt ? vx_errf(err, VX_ENOMEM, "out of memory")
                     : eng_tok_encode(m->tok, prompt, strlen(prompt), 1, &ids, &ni, err);
        if (!rc && ni == 0)
            rc = vx_errf(err, VX_EARG, "the decoy prompt \"%s\" has no tokens", prompt);
        if (!rc && used + ni > cap) {
            cap = (used + ni) * 2;
            int32_t *na = realloc(all, cap * sizeof *na);
            if (na) all = na;
            else rc = vx_errf(err, VX_ENOMEM, "out of memory for decoy prompts");
        }
        if (!rc) {
            memcpy(all + used, ids, ni * sizeof *ids);
            used += ni;
            lens[got++] = (int)ni;
        }
        if (prompt != frame)
            free(prompt);
        free(ids);
    }
    /* all of them through the model in batches, each one's last position kept */
    if (!rc)
        rc = run_corpus(m, all, lens, got, &c, NULL, err);
    free(all);
    free(lens);
    if (rc) {
        free(c.key);
        free(c.xin);
        return -1;
    }
    if (keys)
        *keys = c.key;
    if (inputs)
        *inputs = c.xin;
    *count = got;
    return 0;
}

int eng_edit_frame_decoys(eng_model *m, int layer, int expert, int n, float **keys,
                          float **inputs, int *count, vx_err *err)
{
    return word_keys(m, layer, expert, NULL, NULL, n, keys, inputs, count, err);
}

int eng_edit_decoys(eng_model *m, int layer, int expert, const char *relation,
                    const char *entity, int n, float **keys, int *count, vx_err *err)
{
    return word_keys(m, layer, expert, relation, entity, n, keys, NULL, count, err);
}

int eng_edit_decoy_inputs(eng_model *m, int layer, const char *relation, const char *entity,
                          int n, float **x, int *count, vx_err *err)
{
    return word_keys(m, layer, -1, relation, entity, n, NULL, x, count, err);
}

/* ---------------------------------------------------------------- the whitened direction */

/* v = A⁻¹K (KᵀA⁻¹K)⁻¹ e_last with K = [protect (np rows) | key]. */
static int solve_v(const eng_insert_opts *o, int F, const float *protect, int np,
                   const float *key, float *v, vx_err *err)
{
    const int mk = np + 1;
    double *A = malloc((size_t)F * F * sizeof *A), *Y = malloc((size_t)F * mk * sizeof *Y);
    double *G = malloc((size_t)mk * mk * sizeof *G), *cvec = calloc((size_t)mk, sizeof *cvec);
    int rc = -1, info = 0, one = 1;
    if (!A || !Y || !G || !cvec) {
        vx_errf(err, VX_ENOMEM, "out of memory solving for the update");
        goto done;
    }
    memcpy(A, o->cov, (size_t)F * F * sizeof *A);
    for (int d = 0; d < o->n_decoys; d++) {
        const float *k = o->decoys + (size_t)d * F;
        double w = o->decoy_weight / o->n_decoys;
        for (int i = 0; i < F; i++)
            for (int j = 0; j < F; j++)
                A[(size_t)i * F + j] += w * k[i] * k[j];
    }
    double mean = 0;
    for (int i = 0; i < F; i++)
        mean += A[(size_t)i * F + i];
    mean /= F;
    for (int i = 0; i < F; i++)
        A[(size_t)i * F + i] += o->ridge * (mean > 0 ? mean : 1.0);
    dpotrf_("L", &F, A, &F, &info, 1);
    if (info != 0) {
        vx_errf(err, VX_EARG, "the activation covariance is not positive definite (pivot %d)",
                info);
        goto done;
    }
    for (int j = 0; j < mk; j++) {
        const float *k = j < np ? protect + (size_t)j * F : key;
        for (int i = 0; i < F; i++)
            Y[(size_t)j * F + i] = k[i];
    }
    dpotrs_("L", &F, &mk, A, &F, Y, &F, &info, 1);
    for (int a = 0; a < mk; a++) {
        const float *ka = a < np ? protect + (size_t)a * F : key;
        for (int b = 0; b < mk; b++) {
            double s = 0;
            for (int i = 0; i < F; i++)
                s += ka[i] * Y[(size_t)b * F + i];
            G[(size_t)a * mk + b] = s;
        }
    }
    for (int a = 0; a < mk; a++)
        for (int b = a + 1; b < mk; b++)
            G[(size_t)a * mk + b] = G[(size_t)b * mk + a] =
                0.5 * (G[(size_t)a * mk + b] + G[(size_t)b * mk + a]);
    double tr = 0;
    for (int a = 0; a < mk; a++)
        tr += G[(size_t)a * mk + a];
    for (int a = 0; a < mk; a++)
        G[(size_t)a * mk + a] += 1e-9 * tr / mk;
    dpotrf_("L", &mk, G, &mk, &info, 1);
    if (info != 0) {
        vx_errf(err, VX_EARG, "the fact's key cannot be separated from an earlier insert's at "
                "layer %d (the same prompt?)", o->layer);
        goto done;
    }
    cvec[mk - 1] = 1;
    dpotrs_("L", &mk, &one, G, &mk, cvec, &mk, &info, 1);
    for (int i = 0; i < F; i++) {
        double s = 0;
        for (int b = 0; b < mk; b++)
            s += Y[(size_t)b * F + i] * cvec[b];
        v[i] = (float)s;
    }
    rc = 0;
done:
    free(A);
    free(Y);
    free(G);
    free(cvec);
    return rc;
}

/* ---------------------------------------------------------------- backward */

/* d/dx of the activation function. */
static float act_grad(int act, float x)
{
    if (act == ACT_SILU) {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    if (act == ACT_GELU_TANH) {
        const float c = 0.7978845608f;
        float u = c * (x + 0.044715f * x * x * x), th = tanhf(u);
        return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * c * (1.0f + 3 * 0.044715f * x * x);
    }
    return 0.5f * (1.0f + erff(x * 0.70710678f)) + x * expf(-0.5f * x * x) * 0.39894228f;
}

/* dx += ∂norm(x)/∂x ᵀ · dy for one row of width w. */
static void norm_grad(const eng_norm *nm, const float *x, const float *dy, float *dx)
{
    const int w = nm->width;
    if (nm->kind == NORM_RMS) {
        double ss = 0, dot = 0;
        for (int i = 0; i < w; i++)
            ss += (double)x[i] * x[i];
        double r = 1.0 / sqrt(ss / w + nm->eps);
        for (int i = 0; i < w; i++)
            dot += (double)nm->w[i] * dy[i] * x[i];
        for (int i = 0; i < w; i++)
            dx[i] += (float)(r * nm->w[i] * dy[i] - x[i] * r * r * r * dot / w);
        return;
    }
    double mu = 0, var = 0, mg = 0, mgx = 0;
    for (int i = 0; i < w; i++)
        mu += x[i];
    mu /= w;
    for (int i = 0; i < w; i++)
        var += (x[i] - mu) * (x[i] - mu);
    double sd = sqrt(var / w + nm->eps);
    for (int i = 0; i < w; i++) {
        double g = (double)nm->w[i] * dy[i], xh = (x[i] - mu) / sd;
        mg += g;
        mgx += g * xh;
    }
    mg /= w;
    mgx /= w;
    for (int i = 0; i < w; i++) {
        double xh = (x[i] - mu) / sd;
        dx[i] += (float)(((double)nm->w[i] * dy[i] - mg - xh * mgx) / sd);
    }
}

typedef struct scratch {
    float *z, *raw, *dz, *y, *dy, *gp, *up, *dm, *row, *h2;
} scratch;

/* One row's head gradient from its logits raw [V]: the loss −log p(t) when q is NULL,
 * else KL(q ‖ p), p the softmax of the (soft-capped) logits. dz [V] receives dLoss/dlogit
 * (raw, before the cap); returns p(t) (q NULL) or the KL. raw is overwritten. */
static double head_row(const eng_model *m, float *raw, float *dz, int32_t t, const double *q)
{
    const int V = m->vocab;
    /* softmax of the (soft-capped) logits; raw keeps the cap derivative */
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) {
        float l = m->final_softcap > 0 ? eng_softcap(raw[v], m->final_softcap) : raw[v];
        if (m->final_softcap > 0) {
            float th = l / m->final_softcap;
            raw[v] = 1.0f - th * th;
        } else {
            raw[v] = 1.0f;
        }
        dz[v] = l;
        mx = fmaxf(mx, l);
    }
    double sum = 0;
    for (int v = 0; v < V; v++)
        sum += exp((double)dz[v] - mx);
    /* once, not per logit: libm's log may set errno, so the compiler cannot hoist it */
    const double lsum = log(sum);
    double ret = 0;
    for (int v = 0; v < V; v++) {
        double lp = (double)dz[v] - mx - lsum, p = exp(lp);
        double want = q ? q[v] : (v == t ? 1.0 : 0.0);
        if (!q && v == t)
            ret = p;
        if (q && q[v] > 0)
            ret += q[v] * (log(q[v]) - lp);
        float d = (float)(p - want) * raw[v];
        dz[v] = fabsf(d) < 1e-9f ? 0.0f : d;
    }
    return ret;
}

/* Buffers of head_grads for up to k rows. */
typedef struct head_buf {
    float *z, *dy;            /* [k × H] */
    float *raw, *dz;          /* [k × V] */
} head_buf;

/* The gradients at k last-layer outputs hN [k × H] (one LM-head product each way for all
 * of them): row j's loss is −log p(t[j]) when q is NULL or q[j] is, else KL(q[j] ‖ p);
 * g [k × H] receives the gradients, ret[j] p(t[j]) or the KL. -1 out of memory. */
static int head_grads(const eng_model *m, int k, const float *hN, const int32_t *t,
                      const double *const *q, float *g, double *ret, const head_buf *b)
{
    const int H = m->hidden, V = m->vocab;
    if (m->final_norm.width)
        eng_norm_apply(&m->final_norm, hN, b->z, k);
    else
        memcpy(b->z, hN, (size_t)k * H * sizeof(float));
    eng_matmul(&m->lm_head, b->z, k, b->raw);
    for (int j = 0; j < k; j++)
        ret[j] = head_row(m, b->raw + (size_t)j * V, b->dz + (size_t)j * V, t ? t[j] : 0,
                          q ? q[j] : NULL);
    if (eng_matmul_t(&m->lm_head, b->dz, k, b->dy))
        return -1;
    for (int j = 0; j < k; j++) {
        float *gj = g + (size_t)j * H;
        if (m->final_norm.width) {
            memset(gj, 0, (size_t)H * sizeof(float));
            norm_grad(&m->final_norm, hN + (size_t)j * H, b->dy + (size_t)j * H, gj);
        } else {
            memcpy(gj, b->dy + (size_t)j * H, (size_t)H * sizeof(float));
        }
    }
    return 0;
}

/* dL/dh at the output of layer `layer` (last position) for L = −log p(t); x and ffn are
 * the captured residuals and FFN outputs of every layer. -1 out of memory. */
static int backward(const eng_model *m, int layer, const float *x, const float *ffn,
                    int32_t t, float *g, scratch *s)
{
    const int H = m->hidden, nl = m->n_layers;
    const head_buf hb = {s->z, s->dy, s->raw, s->dz};
    double pt;
    if (head_grads(m, 1, x + (size_t)(nl - 1) * H, &t, NULL, g, &pt, &hb))
        return -1;
    /* down through the layers above the edit: residual path plus each dense FFN branch
     * (attention, MoE and post-normed or un-pre-normed branches are held fixed for the
     * gradient) */
    for (int l = nl - 1; l > layer; l--) {
        const eng_layer *L = &m->layers[l];
        if (L->moe || L->post_ffn.width || !L->ffn_norm.width)
            continue;
        const eng_mlp *b = &L->mlp;
        const int F = b->inter;
        for (int i = 0; i < H; i++)
            s->h2[i] = x[(size_t)l * H + i] - ffn[(size_t)l * H + i];
        eng_norm_apply(&L->ffn_norm, s->h2, s->y, 1);
        eng_matmul(&b->up, s->y, 1, s->up);
        eng_add_bias(s->up, b->up_b, 1, F);
        if (eng_matmul_t(&b->down, g, 1, s->dm))
            return -1;
        if (b->gate.data) {
            eng_matmul(&b->gate, s->y, 1, s->gp);
            for (int i = 0; i < F; i++) {
                float a = s->gp[i];
                eng_act(m->act, &a, 1);
                float dgp = s->dm[i] * s->up[i] * act_grad(m->act, s->gp[i]);
                s->dm[i] *= a;        /* now d(up) */
                s->gp[i] = dgp;
            }
            if (eng_matmul_t(&b->gate, s->gp, 1, s->dy) || eng_matmul_t(&b->up, s->dm, 1, s->row))
                return -1;
            for (int i = 0; i < H; i++)
                s->dy[i] += s->row[i];
        } else {
            for (int i = 0; i < F; i++)
                s->dm[i] *= act_grad(m->act, s->up[i]);
            if (eng_matmul_t(&b->up, s->dm, 1, s->dy))
                return -1;
        }
        norm_grad(&L->ffn_norm, s->h2, s->dy, g);
    }
    return 0;
}

/* ---------------------------------------------------------------- insert */

void eng_insert_fact_free(eng_insert_fact *f)
{
    if (!f)
        return;
    free(f->u);
    free(f->v);
    free(f->key);
    memset(f, 0, sizeof *f);
}

static float softmax_p(const float *logits, int V, int32_t t)
{
    float mx = -INFINITY;
    for (int v = 0; v < V; v++)
        mx = fmaxf(mx, logits[v]);
    double sum = 0;
    for (int v = 0; v < V; v++)
        sum += exp((double)logits[v] - mx);
    return (float)(exp((double)logits[t] - mx) / sum);
}

int eng_edit_insert(eng_model *m, const int32_t *ids, int n, const eng_insert_opts *o,
                    eng_insert_fact *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    if (eng_edit_check_site(m, o->layer, o->expert, err))
        return -1;
    if (o->target < 0 || o->target >= m->vocab)
        return vx_errf(err, VX_EARG, "target id %d is out of range (vocab %d)", o->target,
                       m->vocab);
    int off;
    const int H = m->hidden, F = site_features(m, o->layer, o->expert, &off), V = m->vocab;
    /* the backward pass runs through the dense FFNs above, which may be wider than the site */
    int FB = F;
    for (int l = o->layer + 1; l < m->n_layers; l++)
        if (!m->layers[l].moe && !m->layers[l].ffn_none && m->layers[l].mlp.inter > FB)
            FB = m->layers[l].mlp.inter;
    const int nl = m->n_layers, wide = FB > H ? FB : H;
    out->hidden = H;
    out->features = F;
    out->u = calloc((size_t)H, sizeof(float));
    out->v = malloc((size_t)F * sizeof(float));
    out->key = malloc((size_t)F * sizeof(float));
    /* the preserved prompts' KL applies where the update's effect on them is exact: at
     * the last layer, the output there is h + (vᵀk)·u */
    const int npres = o->n_pres > 0 && o->kl_weight > 0 && o->layer == nl - 1 ? o->n_pres : 0;
    /* so do the fact's other wordings: their output there is h + r·δ */
    const int naux = o->n_aux > 0 && o->layer == nl - 1 ? o->n_aux : 0;
    /* x, ffn [nl × H]; logits, raw, dz [V]; z, y, dy, h2, g [H]; gp, up, dm [FB];
     * row [max(FB, H)]; preserved prompts' h [npres × H], key [npres × F], s [npres] */
    size_t total = (size_t)nl * H * 2 + (size_t)V * 3 + (size_t)H * 5 + (size_t)FB * 3 + wide +
                   (size_t)npres * (H + F + 1) + (size_t)(naux + 1) * H;
    float *buf = calloc(total, sizeof *buf);
    double *pq = calloc((size_t)npres * V + 1, sizeof *pq);
    /* a step's head gradients of the preserved prompts (or the other wordings) together:
     * their outputs kh and gradients kg [k × H], head_grads' buffers kb, weights kw [k] */
    const size_t kmax = (size_t)(npres > naux ? npres : naux) + 1;
    float *kh = malloc(kmax * ((size_t)H * 4 + (size_t)V * 2 + 1) * sizeof *kh);
    double *kret = malloc(kmax * sizeof *kret);
    const double **kq = malloc(kmax * sizeof *kq);
    int32_t *kt = malloc(kmax * sizeof *kt);
    const eng_overlay *base = m->overlay;
    eng_lowrank *lr = NULL;
    int rc = -1;
    if (!out->u || !out->v || !out->key || !buf || !pq || !kh || !kret || !kq || !kt) {
        vx_errf(err, VX_ENOMEM, "out of memory for an insert");
        goto done;
    }
    float *kg = kh + kmax * H;
    head_buf kb;
    kb.z = kg + kmax * H;
    kb.dy = kb.z + kmax * H;
    kb.raw = kb.dy + kmax * H;
    kb.dz = kb.raw + kmax * V;
    float *kw = kb.dz + kmax * V;
    float *x = buf, *ffn = x + (size_t)nl * H, *logits = ffn + (size_t)nl * H;
    scratch s;
    s.raw = logits + V;
    s.dz = s.raw + V;
    s.z = s.dz + V;
    s.y = s.z + H;
    s.dy = s.y + H;
    s.h2 = s.dy + H;
    float *g = s.h2 + H;
    s.gp = g + H;
    s.up = s.gp + FB;
    s.dm = s.up + FB;
    s.row = s.dm + FB;
    float *ph = s.row + wide, *pk = ph + (size_t)npres * H, *ps = pk + (size_t)npres * F;
    float *ah = ps + npres, *ag = ah + (size_t)naux * H;   /* aux residuals, their gradient */
    /* the preserved prompts through the effective model: key, last residual, and the
     * next-token distribution the KL holds them to */
    capture pc = {.layer = o->layer, .H = H, .F = F, .n_layers = nl, .off = off, .key = pk,
                  .final = ph};
    float *plog = npres ? malloc((size_t)npres * V * sizeof *plog) : NULL;
    if (npres && !plog) {
        vx_errf(err, VX_ENOMEM, "out of memory for an insert");
        goto done;
    }
    if (npres && run_corpus(m, o->pres_ids, o->pres_lens, npres, &pc, plog, err)) {
        free(plog);
        goto done;
    }
    for (int c = 0; c < npres; c++) {
        const float *lg = plog + (size_t)c * V;
        double mx = -INFINITY, sum = 0, *q = pq + (size_t)c * V;
        for (int v = 0; v < V; v++)
            mx = fmax(mx, lg[v]);
        for (int v = 0; v < V; v++)
            sum += (q[v] = exp(lg[v] - mx));
        for (int v = 0; v < V; v++)
            q[v] /= sum;
    }
    free(plog);
    capture ac = {.layer = o->layer, .H = H, .F = F, .n_layers = nl, .off = off, .final = ah};
    if (naux && run_corpus(m, o->aux_ids, o->aux_lens, naux, &ac, NULL, err))
        goto done;
    /* the key, and the prompt's earlier positions: protected too, so prompts sharing
     * the fact's prefix ("The capital of") see no change there */
    capture kc = {.layer = o->layer, .H = H, .F = F, .n_layers = nl, .off = off,
                  .key = out->key, .acts = 1};
    if (run(m, ids, n, &kc, NULL, err)) {
        free(kc.rows);
        goto done;
    }
    int np = o->n_protect + n - 1;
    float *prot = malloc(((size_t)np + 1) * F * sizeof *prot);
    if (!prot) {
        free(kc.rows);
        vx_errf(err, VX_ENOMEM, "out of memory for an insert");
        goto done;
    }
    /* an earlier insert keyed on the same prompt is superseded, not protected: both
     * constraints cannot hold, and the new update is optimised on top of the old one */
    np = 0;
    for (int i = 0; i < o->n_protect; i++) {
        const float *k = o->protect + (size_t)i * F;
        double kk = 0, ok = 0, oo = 0;
        for (int q = 0; q < F; q++) {
            kk += (double)out->key[q] * out->key[q];
            ok += (double)out->key[q] * k[q];
            oo += (double)k[q] * k[q];
        }
        if (ok * ok < 0.999 * 0.999 * kk * oo || ok < 0)
            memcpy(prot + (size_t)np++ * F, k, (size_t)F * sizeof *prot);
    }
    /* an expert's slice is zero at positions not routed to it: nothing to protect there */
    for (int t = 0; t < n - 1; t++) {
        const float *k = kc.rows + (size_t)t * F;
        int any = 0;
        for (int q = 0; q < F && !any; q++)
            any = k[q] != 0.0f;
        if (any)
            memcpy(prot + (size_t)np++ * F, k, (size_t)F * sizeof *prot);
    }
    free(kc.rows);
    int sv = solve_v(o, F, prot, np, out->key, out->v, err);
    free(prot);
    if (sv)
        goto done;
    /* a preserved prompt's KL grows with s² (s = vᵀk): those under 1 % of the largest s²
     * are left out of the optimisation (they cost a head pass each per step) */
    float smax = 0;
    for (int q = 0; q < npres; q++) {
        ps[q] = cblas_sdot(F, out->v, 1, pk + (size_t)q * F, 1);
        smax = fmaxf(smax, fabsf(ps[q]));
    }
    for (int q = 0; q < npres; q++)
        if (fabsf(ps[q]) < 0.1f * smax)
            ps[q] = 0;

    /* the candidate update rides on the overlay: base edits + base low-ranks + u vᵀ */
    size_t nb = base ? base->n_lowrank : 0;
    lr = malloc((nb + 1) * sizeof *lr);
    if (!lr) {
        vx_errf(err, VX_ENOMEM, "out of memory for an insert");
        goto done;
    }
    if (nb)
        memcpy(lr, base->lowrank, nb * sizeof *lr);
    lr[nb] = (eng_lowrank){o->layer, 1, out->u, out->v, o->expert};
    eng_overlay trial = {base ? base->edits : NULL, base ? base->n_edits : 0, lr, nb + 1,
                         NULL, 0};
    eng_model_set_overlay(m, &trial);

    /* the layers below the edit see none of it: they run once, and every step runs the
     * prompt from the residual entering the edit's layer */
    capture c = {.layer = o->layer, .H = H, .F = F, .n_layers = nl, .off = off, .x = x,
                 .ffn = ffn, .entry = malloc((size_t)n * H * sizeof(float))};
    if (!c.entry) {
        vx_errf(err, VX_ENOMEM, "out of memory for an insert");
        goto restore;
    }
    if (run(m, ids, n, &c, NULL, err))
        goto restore;
    float step_len = 0, cap = 0;
    /* steered first; should the steer keep the target from p_stop (measured on a
     * random-weight Granite: p 0.002 after 100 steps), the descent reruns unsteered */
    int steer = npres > 0 || naux > 0;
    for (int step = 0;; step++) {
        if (steer && step > o->max_steps) {
            steer = 0;
            step = 0;
            memset(out->u, 0, (size_t)H * sizeof(float));
        }
        if (vx_cancel_flag) {
            vx_errf(err, VX_ECANCEL, "insert cancelled");
            goto restore;
        }
        if (run_at(m, ids, c.entry, n, &c, logits, err))
            goto restore;
        float p = softmax_p(logits, V, o->target);
        if (step == 0) {
            out->p_before = p;
            double hn = 0;
            for (int i = 0; i < H; i++)
                hn += (double)x[(size_t)o->layer * H + i] * x[(size_t)o->layer * H + i];
            /* δ reaches the residual times the residual multiplier (Granite's 0.22):
             * step and cap are set on that effect, so they mean the same in every family */
            hn = sqrt(hn) / m->residual_scale;
            step_len = (float)(o->step * hn);
            cap = (float)(o->max_norm * hn);
        }
        out->p_after = p;
        out->steps = step;
        /* the other wordings: their mean p(target) and the gradient of their mean −log p;
         * the descent goes on until they reach p_stop too, or the steps run out */
        double aux_p = 1;
        if (steer && naux) {
            aux_p = 0;
            memset(ag, 0, (size_t)H * sizeof *ag);
            for (int q = 0; q < naux; q++) {
                for (int i = 0; i < H; i++)
                    kh[(size_t)q * H + i] = ah[(size_t)q * H + i] +
                                            m->residual_scale * o->aux_ratio[q] * out->u[i];
                kt[q] = o->target;
            }
            if (head_grads(m, naux, kh, kt, NULL, kg, kret, &kb))
                goto oom;
            for (int q = 0; q < naux; q++) {
                aux_p += kret[q] / naux;
                cblas_saxpy(H, o->aux_ratio[q] / (float)naux, kg + (size_t)q * H, 1, ag, 1);
            }
        }
        if ((p > o->p_stop && (aux_p > o->p_stop || step >= o->max_steps)) ||
            (!steer && step >= o->max_steps))
            break;
        if (step >= o->max_steps)
            continue;
        /* normalised gradient descent: a fixed-length step along −∇ keeps δ in the
         * directions that matter (sign-like optimisers spread it over every coordinate,
         * and a longer δ leaks further through vᵀ act on other prompts) */
        if (backward(m, o->layer, x, ffn, o->target, g, &s))
            goto oom;
        if (steer && naux)
            cblas_saxpy(H, 1.0f, ag, 1, g, 1);
        double gn = 0, norm = 0;
        for (int i = 0; i < H; i++)
            gn += (double)g[i] * g[i];
        gn = sqrt(gn);
        /* + kl_weight × the mean KL of the preserved prompts: at h_c + r·s_c·u (r the
         * residual multiplier), ∂/∂u is r·s_c times the gradient at h; r is common to the
         * target's gradient, so it drops out of the direction. Only the part orthogonal
         * to the target's gradient is kept: it steers the step, never holds back the
         * target */
        if (steer) {
            memset(s.h2, 0, (size_t)H * sizeof(float));
            int k = 0;
            for (int q = 0; q < npres; q++) {
                if (ps[q] == 0)
                    continue;
                for (int i = 0; i < H; i++)
                    kh[(size_t)k * H + i] = ph[(size_t)q * H + i] + m->residual_scale * ps[q] * out->u[i];
                kq[k] = pq + (size_t)q * V;
                kw[k++] = (float)(o->kl_weight / npres) * ps[q];
            }
            if (k && head_grads(m, k, kh, NULL, kq, kg, kret, &kb))
                goto oom;
            for (int j = 0; j < k; j++)
                cblas_saxpy(H, kw[j], kg + (size_t)j * H, 1, s.h2, 1);
            double gk = cblas_sdot(H, g, 1, s.h2, 1);
            if (gn > 0)
                cblas_saxpy(H, (float)(-gk / (gn * gn)), g, 1, s.h2, 1);
            /* and then to u: it turns δ rather than lengthening it (an exact projection on
             * the complement of both measured worse: suite mean KL 0.0054, held-out
             * 0.0186) */
            double uu = cblas_sdot(H, out->u, 1, out->u, 1);
            if (uu > 0)
                cblas_saxpy(H, (float)(-cblas_sdot(H, out->u, 1, s.h2, 1) / uu), out->u, 1,
                            s.h2, 1);
            /* the steer, relative to the target's gradient, at most as long as it: every
             * step advances the target by the same length */
            double kn = sqrt(cblas_sdot(H, s.h2, 1, s.h2, 1));
            cblas_saxpy(H, (float)(kn > gn ? gn / kn : 1.0), s.h2, 1, g, 1);
        }
        if (gn == 0)
            break;
        for (int i = 0; i < H; i++) {
            out->u[i] -= (float)(step_len * g[i] / gn);
            norm += (double)out->u[i] * out->u[i];
        }
        if (cap > 0 && sqrt(norm) > cap)
            for (int i = 0; i < H; i++)
                out->u[i] *= (float)(cap / sqrt(norm));
    }
    rc = 0;
    goto restore;
oom:
    vx_errf(err, VX_ENOMEM, "out of memory for an insert's gradient");
restore:
    free(c.entry);
    eng_model_set_overlay(m, base);
done:
    free(lr);
    free(buf);
    free(pq);
    free(kh);
    free(kret);
    free(kq);
    free(kt);
    if (rc)
        eng_insert_fact_free(out);
    return rc;
}

float eng_edit_p(const float *logits, int V, int32_t t)
{
    return softmax_p(logits, V, t);
}

/* ---------------------------------------------------------------- the gated feature
 * A fact as one gated FFN feature that fires on its prompt alone (edit_memit.h): the gate
 * row is a max-margin separator of the prompt's FFN input from the negatives', the down
 * column carries the optimised δ. */

/* LAPACK (OpenBLAS): solve a symmetric positive definite system. */
extern void dposv_(const char *uplo, const int *n, const int *nrhs, double *a, const int *lda,
                   double *b, const int *ldb, int *info, size_t uplo_len);

int eng_edit_gate_ok(const eng_model *m, int layer)
{
    vx_err e = {0};
    if (eng_edit_check_layer(m, layer, &e))
        return 0;
    const eng_mlp *b = &m->layers[layer].mlp;
    return b->gate.data && !b->gate_b && !b->up_b;
}

int eng_edit_claimed(const eng_overlay *ov, int layer, int64_t f)
{
    for (size_t i = 0; ov && i < ov->n_edits; i++)
        if (ov->edits[i].layer == layer && ov->edits[i].feature == f)
            return 1;
    return 0;
}

void eng_gate_slot_free(eng_gate_slot *s)
{
    if (!s)
        return;
    free(s->gate);
    free(s->para_ids);
    free(s->para_lens);
    free(s->para_ratio);
    s->gate = s->up = s->down = s->para_ratio = NULL;
    s->para_ids = NULL;
    s->para_lens = NULL;
}

void eng_edit_gate_down(const eng_model *m, int layer, eng_gate_slot *s, const float *delta)
{
    const eng_mlp *b = &m->layers[layer].mlp;
    for (int h = 0; h < m->hidden; h++)
        s->down[h] = (delta[h] + s->a_old * eng_w_at(&b->down, h, s->feature)) / s->a_prompt;
}

/* Negatives X [n × H] and positives P [np × H]: the L2-SVM without bias,
 *   min ½‖g‖² + C Σ_i c_i max(0, 1 − y_i g·x_i)²,
 * each positive (y +1) weighted as all negatives (y −1) together, by Newton steps on the
 * active set (the objective is convex and piecewise quadratic: a step is exact on its
 * piece; backtracking keeps it descending across pieces). g [H] out. */
static int fit_gate(const float *X, int64_t n, const float *P, int np, int H, float *g,
                    vx_err *err)
{
    const double C = 1e3 / (double)(n + np);
    const double cp = (double)n;
    double *A = malloc((size_t)H * H * sizeof *A), *b = malloc((size_t)H * sizeof *b);
    double *gd = calloc((size_t)H, sizeof *gd);
    float *Af = malloc((size_t)H * H * sizeof *Af), *act = malloc((size_t)(n + np) * H * sizeof *act);
    int rc = -1;
    if (!A || !b || !gd || !Af || !act) {
        vx_errf(err, VX_ENOMEM, "out of memory fitting a gate");
        goto done;
    }
    double obj = INFINITY;
    for (int it = 0; it < 40; it++) {
        /* the active rows (margin violated), each scaled by √(2C c_i) */
        int64_t na = 0;
        memset(b, 0, (size_t)H * sizeof *b);
        for (int64_t i = 0; i < n + np; i++) {
            const float *x = i < n ? X + (size_t)i * H : P + (size_t)(i - n) * H;
            const double y = i < n ? -1.0 : 1.0, c = i < n ? 1.0 : cp;
            double d = 0;
            for (int h = 0; h < H; h++)
                d += gd[h] * x[h];
            if (y * d >= 1)
                continue;
            const float s = (float)sqrt(2 * C * c);
            for (int h = 0; h < H; h++) {
                act[(size_t)na * H + h] = s * x[h];
                b[h] += 2 * C * c * y * x[h];
            }
            na++;
        }
        if (na == 0)
            break;
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, H, (int)na, 1.0f, act, H, 0.0f, Af, H);
        for (int i = 0; i < H; i++)
            for (int j = i; j < H; j++)
                A[(size_t)i * H + j] = A[(size_t)j * H + i] = Af[(size_t)i * H + j] + (i == j);
        int nn = H, one = 1, info = 0;
        dposv_("U", &nn, &one, A, &nn, b, &nn, &info, 1);
        if (info) {
            vx_errf(err, VX_EUNSUPPORTED, "the gate's Newton system is singular (LAPACK info %d)",
                    info);
            goto done;
        }
        /* backtrack along gd → b until the objective decreases */
        double t = 1, best = INFINITY;
        for (int bt = 0; bt < 30; bt++, t *= 0.5) {
            double o = 0;
            for (int h = 0; h < H; h++) {
                double v = gd[h] + t * (b[h] - gd[h]);
                o += 0.5 * v * v;
            }
            for (int64_t i = 0; i < n + np; i++) {
                const float *x = i < n ? X + (size_t)i * H : P + (size_t)(i - n) * H;
                const double y = i < n ? -1.0 : 1.0, c = i < n ? 1.0 : cp;
                double d = 0;
                for (int h = 0; h < H; h++)
                    d += (gd[h] + t * (b[h] - gd[h])) * x[h];
                if (y * d < 1)
                    o += C * c * (1 - y * d) * (1 - y * d);
            }
            best = o;
            if (o < obj)
                break;
        }
        if (!(best < obj * (1 - 1e-9)))
            break;
        obj = best;
        for (int h = 0; h < H; h++)
            gd[h] += t * (b[h] - gd[h]);
    }
    for (int h = 0; h < H; h++)
        g[h] = (float)gd[h];
    rc = 0;
done:
    free(A);
    free(b);
    free(gd);
    free(Af);
    free(act);
    return rc;
}

/* The fact asked in other words, the gate's further positives: fixed templates ({r} the
 * relation, {e} the entity), none of them a paraphrase the tests measure. */
static const char *const para_style[] = {
    "The {r} of {e} was",
    "What is the {r} of {e}? It is",
    "In {e}, the {r} is",
    "The {r} of {e}, as everyone knows, is",
    "{e} is known for its {r}, which is",
};

/* A template with {r} and {e} filled in (relation's '-' and '_' as spaces), malloc'd. */
static char *fill(const char *tpl, const char *relation, const char *entity)
{
    size_t n = strlen(tpl) + 2 * (strlen(relation) + strlen(entity)) + 1, k = 0;
    char *out = malloc(n);
    for (const char *c = tpl; out && *c; c++) {
        const char *w = !strncmp(c, "{r}", 3) ? relation : !strncmp(c, "{e}", 3) ? entity : NULL;
        if (!w) {
            out[k++] = *c;
            continue;
        }
        for (const char *q = w; *q; q++)
            out[k++] = w == relation && (*q == '-' || *q == '_') ? ' ' : *q;
        c += 2;
    }
    if (out)
        out[k] = 0;
    return out;
}

/* f(z)·(w·x) for the layer's activation f. */
static float feature_act(const eng_model *m, float z, float wx)
{
    eng_act(m->act, &z, 1);
    return z * wx;
}

int eng_edit_gate_fit(eng_model *m, const int32_t *ids, int n, const eng_gate_opts *o,
                      eng_gate_slot *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    const int layer = o->layer;
    if (!eng_edit_gate_ok(m, layer))
        return vx_errf(err, VX_EUNSUPPORTED, "layer %d has no gated dense FFN without biases: "
                       "a gated slot cannot be written there", layer);
    const int H = m->hidden;
    const eng_mlp *b = &m->layers[layer].mlp;
    const int F = b->inter;
    /* the slot: the unclaimed feature with the least output energy on the corpus */
    const eng_overlay *ov = m->overlay;
    double least = INFINITY;
    out->feature = -1;
    for (int f = 0; f < F; f++) {
        if (eng_edit_claimed(ov, layer, f))
            continue;
        double dd = 0;
        for (int r = 0; r < H; r++) {
            float w = eng_w_at(&b->down, r, f);
            dd += (double)w * w;
        }
        double energy = o->cov[(size_t)f * F + f] * dd;
        if (energy < least) {
            least = energy;
            out->feature = f;
        }
    }
    if (out->feature < 0)
        return vx_errf(err, VX_EARG, "every feature of layer %d is claimed by the overlay",
                       layer);
    float *xs = NULL, *dec = NULL, *neg = NULL, *g = NULL, *pos = NULL;
    int64_t nx = 0;
    int nd = 0, rc = -1;
    /* the prompt's FFN inputs at every position: the last is the positive, the earlier
     * ones negatives (prompts sharing the prefix see nothing) */
    capture pc = {.layer = layer, .H = H, .F = m->layers[layer].mlp.inter,
                  .n_layers = m->n_layers, .inputs = 1};
    const int ran = run(m, ids, n, &pc, NULL, err);
    xs = pc.in_rows;
    nx = (int64_t)pc.n_rows;
    if (ran || eng_edit_decoy_inputs(m, layer, o->relation, o->entity, o->n_decoys, &dec, &nd, err))
        goto done;
    const int64_t nneg = o->n_neg + (nx - 1) + nd + o->n_others;
    neg = malloc((size_t)(nneg + 1) * H * sizeof *neg);
    g = malloc((size_t)H * 3 * sizeof *g);
    if (!neg || !g) {
        vx_errf(err, VX_ENOMEM, "out of memory for a gated slot");
        goto done;
    }
    int64_t k = 0;
    memcpy(neg, o->neg, (size_t)o->n_neg * H * sizeof *neg);
    k += o->n_neg;
    memcpy(neg + (size_t)k * H, xs, (size_t)(nx - 1) * H * sizeof *neg);
    k += nx - 1;
    memcpy(neg + (size_t)k * H, dec, (size_t)nd * H * sizeof *neg);
    k += nd;
    for (int i = 0; i < o->n_others; i++) {
        int32_t *oi = NULL;
        size_t on = 0;
        if (eng_tok_encode(m->tok, o->others[i], strlen(o->others[i]), 1, &oi, &on, err) ||
            eng_edit_ffn_in(m, layer, oi, (int)on, neg + (size_t)k++ * H, NULL, err)) {
            free(oi);
            goto done;
        }
        free(oi);
    }
    /* positives: the prompt, then the templates followed by the target's earlier tokens */
    const int npara = o->para ? (int)(sizeof para_style / sizeof *para_style) : 0;
    pos = malloc((size_t)(npara + 1) * H * sizeof *pos);
    out->para_ids = malloc(((size_t)npara * (64 + (size_t)o->tail) + 1) * sizeof *out->para_ids);
    out->para_lens = malloc(((size_t)npara + 1) * sizeof *out->para_lens);
    out->para_ratio = malloc(((size_t)npara + 1) * sizeof *out->para_ratio);
    if (!pos || !out->para_ids || !out->para_lens || !out->para_ratio) {
        vx_errf(err, VX_ENOMEM, "out of memory for a gated slot");
        goto done;
    }
    memcpy(pos, xs + (size_t)(nx - 1) * H, (size_t)H * sizeof *pos);
    size_t at = 0;
    for (int i = 0; i < npara; i++) {
        char *t = fill(para_style[i], o->relation, o->entity);
        int32_t *pi = NULL;
        size_t pn = 0;
        int32_t *all = NULL;
        int bad = !t || eng_tok_encode(m->tok, t, strlen(t), 1, &pi, &pn, err);
        if (!bad && pn > 64)
            bad = vx_errf(err, VX_EARG, "a paraphrase template of the fact is %zu tokens "
                          "(at most 64)", pn);
        all = bad ? NULL : out->para_ids + at;
        if (!bad) {
            memcpy(all, pi, pn * sizeof *all);
            memcpy(all + pn, ids + n - o->tail, (size_t)o->tail * sizeof *all);
            out->para_lens[i] = (int)pn + o->tail;
            at += pn + (size_t)o->tail;
            bad = eng_edit_ffn_in(m, layer, all, (int)pn + o->tail, pos + (size_t)(i + 1) * H,
                                  NULL, err);
        }
        free(t);
        free(pi);
        if (bad)
            goto done;
    }
    out->n_para = npara;
    const float *xp = pos;
    if (fit_gate(neg, k, pos, npara + 1, H, g, err))
        goto done;
    float *gate = g, *up = g + H, *down = g + 2 * H;
    cblas_sscal(H, o->margin, gate, 1);
    out->n_neg = k;
    for (int64_t i = 0; i < k; i++)
        out->n_open += cblas_sdot(H, gate, 1, neg + (size_t)i * H, 1) > -0.5f * o->margin;
    const float zp = out->z_prompt = cblas_sdot(H, gate, 1, xp, 1);
    const double xx = cblas_sdot(H, xp, 1, xp, 1);
    for (int h = 0; h < H; h++)
        up[h] = (float)(xp[h] / xx);
    const float ap = feature_act(m, zp, 1.0f);
    /* a layer too narrow to tell the prompt from ordinary text (a 64-wide random-weight
     * fixture left a third of the negatives open): the caller writes a rank-1 update */
    if (!(zp > 0.5f * o->margin) || !(ap > 0) || out->n_open * 100 > k) {
        vx_errf(err, VX_EUNSUPPORTED, "no gate at layer %d keeps the prompt on (pre-activation "
                "%.3g, wanted %.3g) and 99%% of %lld negatives off (%lld open)", layer, zp,
                o->margin, (long long)k, (long long)out->n_open);
        rc = 1;
        goto done;
    }
    /* each template's activation relative to the prompt's: the share of d it receives */
    for (int i = 0; i < npara; i++)
        out->para_ratio[i] = feature_act(m, cblas_sdot(H, gate, 1, pos + (size_t)(i + 1) * H, 1),
                                         cblas_sdot(H, up, 1, pos + (size_t)(i + 1) * H, 1)) / ap;
    /* the replaced feature's own output at the prompt is folded into d */
    double zo = 0, wo = 0;
    for (int h = 0; h < H; h++) {
        zo += (double)eng_w_at(&b->gate, out->feature, h) * xp[h];
        wo += (double)eng_w_at(&b->up, out->feature, h) * xp[h];
    }
    out->a_old = feature_act(m, (float)zo, (float)wo);
    out->a_prompt = ap;
    out->gate = g;
    out->up = up;
    out->down = down;
    g = NULL;
    rc = 0;
done:
    if (rc)
        eng_gate_slot_free(out);
    free(xs);
    free(dec);
    free(neg);
    free(pos);
    free(g);
    return rc;
}
