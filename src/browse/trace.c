/*
 * trace.c — TRACE: the logit lens over a forward pass. Observers record, for every
 * position, the residual after the embedding and after each layer together with the
 * attention and FFN deltas that layer added; each recorded residual is then read through
 * eng_lens (final norm → LM head → soft-cap) and a softmax.
 *
 * FOR "t": the answer id is the first id of encode(" t") without special tokens — the token
 * the model would have to produce next to say " t" (the reference takes the last id, which for
 * "Paris" → " Par" "is" tracks "is"; lql tracks " Par"); FOR n tracks id n. Its rank
 * (1 + tokens with a strictly higher probability) and probability are reported per
 * layer, and the pushes are changes in its lens logit, which telescope exactly:
 *   attn_push = lens(r_prev + attn)[t] − lens(r_prev)[t]
 *   ffn_push  = lens(r_prev + attn + ffn)[t] − lens(r_prev + attn)[t]
 * (the reference instead lenses each delta alone, which is not additive).
 *
 * Trace files (SAVE / FROM): little-endian, a 32-byte header "LQLTRACE", u32 version 1,
 * u32 n_tokens, u32 n_layers, u32 hidden, i32 target (-1 for none), u32 0; then i32
 * ids[n_tokens]; then f32 states[n_tokens][n_layers + 1][3][hidden] where slot 0 is the
 * residual, 1 the attention delta and 2 the FFN delta (row 0 is the embedding: deltas 0).
 */
#include "brw_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct rec_ctx {
    int n_tokens, n_layers, hidden;
    int first;               /* first recorded position */
    float *states;
} rec_ctx;

static float *slot(const rec_ctx *r, int pos, int row, int k)
{
    size_t p = (size_t)(pos - r->first);
    return r->states + ((p * (size_t)(r->n_layers + 1) + (size_t)row) * 3 + (size_t)k) *
                           (size_t)r->hidden;
}

static void on_embed(void *ctx, int pos0, int n, const float *resid)
{
    rec_ctx *r = ctx;
    for (int i = 0; i < n && pos0 + i < r->n_tokens; i++)
        if (pos0 + i >= r->first)
            memcpy(slot(r, pos0 + i, 0, 0), resid + (size_t)i * (size_t)r->hidden,
                   (size_t)r->hidden * sizeof(float));
}

static void on_layer(void *ctx, int layer, int pos0, int n, const float *attn,
                     const float *ffn, const float *resid)
{
    rec_ctx *r = ctx;
    if (layer < 0 || layer >= r->n_layers)
        return;
    size_t hb = (size_t)r->hidden * sizeof(float);
    for (int i = 0; i < n && pos0 + i < r->n_tokens; i++) {
        if (pos0 + i < r->first)
            continue;
        memcpy(slot(r, pos0 + i, layer + 1, 0), resid + (size_t)i * (size_t)r->hidden, hb);
        memcpy(slot(r, pos0 + i, layer + 1, 1), attn + (size_t)i * (size_t)r->hidden, hb);
        memcpy(slot(r, pos0 + i, layer + 1, 2), ffn + (size_t)i * (size_t)r->hidden, hb);
    }
}

static float norm2(const float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return (float)sqrt(s);
}

/* The FOR target: the id itself with FOR n; for FOR "t" the first id of the answer " t"
 * (eng_tok_answer_ids, as INSERT reads a target), the token the model must produce next
 * to say it, and how many tokens " t" spells. Without FOR, *out is left alone (a saved
 * trace keeps the target it was recorded with). */
static int resolve_target(const eng_model *em, const brw_trace_opts *o, int32_t *out,
                          int *pieces, vx_err *err)
{
    if (o && o->by_id) {
        int V = eng_model_vocab(em);
        if (o->for_id < 0 || o->for_id >= V)
            return vx_errf(err, VX_EARG, "FOR %d is outside the vocabulary (0-%d)", o->for_id,
                           V - 1);
        *out = o->for_id;
        return 0;
    }
    if (!o || !o->for_token)
        return 0;
    const char *t = o->for_token;
    /* " " alone would silently trace the space token */
    if (!t[0])
        return vx_errf(err, VX_EARG, "FOR needs a non-empty token");
    int32_t *ids = NULL;
    size_t n = 0;
    if (eng_tok_answer_ids(eng_model_tokenizer(em), t, &ids, &n, err) != 0)
        return -1;
    if (n == 0) {
        free(ids);
        return vx_errf(err, VX_EARG, "FOR \"%s\" has no tokens but spaces", t);
    }
    *out = ids[0];
    *pieces = (int)n;
    free(ids);
    return 0;
}

/* Build the lens rows of a recorded trace. */
static int build_rows(const eng_model *em, brw_trace *t, const brw_trace_opts *o,
                      vx_err *err)
{
    int V = eng_model_vocab(em), H = t->hidden, L = t->n_layers;
    int lo = o ? o->layer_lo : -1, hi = o ? o->layer_hi : -1;
    if (lo >= 0 && (lo > hi || hi >= L))
        return vx_errf(err, VX_EARG, "layer range %d-%d is out of range (the model has %d "
                       "layers: 0-%d)", lo, hi, L, L - 1);
    int p0 = o && o->all_positions ? t->first_pos : t->n_tokens - 1;
    size_t cap = (size_t)(t->n_tokens - p0) * (size_t)(L + 1);
    t->rows = calloc(cap + 1, sizeof *t->rows);
    float *lg = malloc((size_t)V * sizeof *lg), *pr = malloc((size_t)V * sizeof *pr);
    float *mid = malloc((size_t)H * sizeof *mid), *lm = malloc((size_t)V * sizeof *lm);
    float *lp = malloc((size_t)V * sizeof *lp);
    int rc = -1;
    if (!t->rows || !lg || !pr || !mid || !lm || !lp) {
        vx_errf(err, VX_ENOMEM, "trace: out of memory");
        goto done;
    }
    rec_ctx r = {t->n_tokens, L, H, t->first_pos, t->states};
    for (int pos = p0; pos < t->n_tokens; pos++) {
        if (vx_cancel_flag) {   /* (layers + 1) to 3 (layers + 1) lens per position */
            vx_errf(err, VX_ECANCEL, "trace: cancelled at position %d", pos);
            goto done;
        }
        for (int row = 0; row <= L; row++) {
            int layer = row - 1;
            /* the embedding row is kept with the full range or a range starting at 0 */
            if (lo >= 0 && !(layer >= lo && layer <= hi) && !(layer == -1 && lo == 0))
                continue;
            brw_trace_row *x = &t->rows[t->n_rows++];
            const float *res = slot(&r, pos, row, 0);
            x->pos = pos;
            x->layer = layer;
            x->resid_norm = norm2(res, H);
            x->attn_norm = row ? norm2(slot(&r, pos, row, 1), H) : 0;
            x->ffn_norm = row ? norm2(slot(&r, pos, row, 2), H) : 0;
            eng_lens(em, res, lg);
            for (int v = 0; v < V; v++)
                if (!isfinite(lg[v])) {
                    /* nan or inf states in a trace file (the forward pass refuses its
                     * own), or an output head without a hash to catch it: refused, naming
                     * the row, never shown as nan probabilities */
                    char where[32] = "the embedding";
                    if (layer >= 0)
                        snprintf(where, sizeof where, "layer %d", layer);
                    vx_errf(err, VX_EFORMAT, "trace: the logit lens of %s at position %d is not "
                            "finite (token id %d): the state or the output head is corrupted", where, pos, v);
                    goto done;
                }
            memcpy(pr, lg, (size_t)V * sizeof *pr);
            eng_softmax(pr, V);
            int best = 0;
            for (int v = 1; v < V; v++)
                if (pr[v] > pr[best])
                    best = v;
            x->top_id = best;
            x->top_prob = pr[best];
            x->rank = 0;
            if (t->target >= 0 && t->target < V) {
                float p = pr[t->target];
                int rank = 1;
                for (int v = 0; v < V; v++)
                    rank += pr[v] > p;
                x->rank = rank;
                x->prob = p;
                if (row) {
                    const float *prev = slot(&r, pos, row - 1, 0), *a = slot(&r, pos, row, 1);
                    for (int h = 0; h < H; h++)
                        mid[h] = prev[h] + a[h];
                    eng_lens(em, prev, lp);
                    eng_lens(em, mid, lm);
                    x->attn_push = lm[t->target] - lp[t->target];
                    x->ffn_push = lg[t->target] - lm[t->target];
                }
            }
        }
    }
    rc = 0;
done:
    free(lg);
    free(pr);
    free(mid);
    free(lm);
    free(lp);
    return rc;
}

int brw_trace_run(eng_model *em, const char *prompt, const brw_trace_opts *o,
                  brw_trace *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    out->target = -1;
    const eng_tokenizer *tok = eng_model_tokenizer(em);
    int32_t *ids = NULL;
    size_t n = 0;
    if (eng_tok_encode(tok, prompt, strlen(prompt), 1, &ids, &n, err) != 0)
        return -1;
    if (n == 0) {
        free(ids);
        return vx_errf(err, VX_EARG, "empty prompt: it has no tokens");
    }
    if (n > (size_t)eng_model_context(em)) {
        free(ids);
        return vx_errf(err, VX_EARG, "prompt has %zu tokens, more than the model's context of %d",
                       n, eng_model_context(em));
    }
    out->ids = ids;
    out->n_tokens = (int)n;
    out->n_layers = eng_model_layers(em);
    out->hidden = eng_model_hidden(em);
    if (resolve_target(em, o, &out->target, &out->for_pieces, err) != 0)
        goto fail;
    /* only the last position unless every one is asked for: a long prompt's full record
     * is n × (layers + 1) × 3 × hidden floats */
    out->first_pos = o && (o->all_positions || o->keep_all) ? 0 : (int)n - 1;
    size_t ns = ((size_t)n - (size_t)out->first_pos) * (size_t)(out->n_layers + 1) * 3 *
                (size_t)out->hidden;
    out->states = calloc(ns, sizeof *out->states);
    if (!out->states) {
        vx_errf(err, VX_ENOMEM, "trace: out of memory (%zu states)", ns);
        goto fail;
    }
    rec_ctx r = {out->n_tokens, out->n_layers, out->hidden, out->first_pos, out->states};
    eng_observer obs = {.ctx = &r, .on_embed = on_embed, .on_layer = on_layer};
    eng_session *s = NULL;
    if (eng_session_new(em, (int)n, &s, err) != 0)
        goto fail;
    int rc = eng_forward(s, ids, (int)n, NULL, &obs, err);
    eng_session_free(s);
    if (rc != 0 || build_rows(em, out, o, err) != 0)
        goto fail;
    return 0;
fail:
    brw_trace_free(out);
    return -1;
}

void brw_trace_free(brw_trace *t)
{
    free(t->ids);
    free(t->states);
    free(t->rows);
    memset(t, 0, sizeof *t);
    t->target = -1;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int brw_trace_save(const brw_trace *t, const char *path, vx_err *err)
{
    if (t->first_pos != 0)
        return vx_errf(err, VX_EARG, "trace: only the last position was recorded; SAVE needs "
                       "every position (keep_all)");
    /* created exclusively: a trace file never replaces an existing file */
    FILE *f = fopen(path, "wbx");
    if (!f)
        return vx_errf(err, VX_EIO, "cannot create \"%s\": %s", path, strerror(errno));
    uint8_t h[32] = "LQLTRACE";
    put32(h + 8, 1);
    put32(h + 12, (uint32_t)t->n_tokens);
    put32(h + 16, (uint32_t)t->n_layers);
    put32(h + 20, (uint32_t)t->hidden);
    put32(h + 24, (uint32_t)t->target);
    put32(h + 28, 0);
    size_t ns = (size_t)t->n_tokens * (size_t)(t->n_layers + 1) * 3 * (size_t)t->hidden;
    int ok = fwrite(h, 1, 32, f) == 32;
    for (int i = 0; ok && i < t->n_tokens; i++) {
        uint8_t b[4];
        put32(b, (uint32_t)t->ids[i]);
        ok = fwrite(b, 1, 4, f) == 4;
    }
    /* states are host floats; x86-64 and aarch64 hosts are little-endian */
    if (ok)
        ok = fwrite(t->states, sizeof(float), ns, f) == ns;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok) {
        int en = errno;
        remove(path);   /* no truncated trace left behind for FROM to reject later */
        return vx_errf(err, VX_EIO, "cannot write \"%s\": %s", path, strerror(en));
    }
    return 0;
}

/* A trace file's states must be what a forward pass records: finite, and each residual the
 * one before plus that layer's two deltas. Any summation order stays within a few ulps of
 * the magnitudes added; 1e-5 of them leaves a wide margin and still catches a changed
 * value, which would otherwise print as a plausible norm or push. */
static int check_states(const brw_trace *t, const char *name, vx_err *err)
{
    static const char *const slots[3] = {"residual", "attention delta", "FFN delta"};
    rec_ctx r = {t->n_tokens, t->n_layers, t->hidden, 0, t->states};
    for (int pos = 0; pos < t->n_tokens; pos++)
        for (int row = 0; row <= t->n_layers; row++) {
            char where[32] = "the embedding row";
            if (row)
                snprintf(where, sizeof where, "layer %d", row - 1);
            for (int k = 0; k < 3; k++) {
                const float *s = slot(&r, pos, row, k);
                for (int i = 0; i < t->hidden; i++)
                    if (!isfinite(s[i]))
                        return vx_errf(err, VX_EFORMAT, "trace \"%s\": the %s of %s at position "
                                       "%d is not finite (element %d): the file is corrupted",
                                       name, slots[k], where, pos, i);
            }
            if (!row)
                continue;
            const float *p = slot(&r, pos, row - 1, 0), *res = slot(&r, pos, row, 0);
            const float *a = slot(&r, pos, row, 1), *f = slot(&r, pos, row, 2);
            for (int i = 0; i < t->hidden; i++) {
                double sum = (double)p[i] + a[i] + f[i];
                double mag = fabs((double)p[i]) + fabs((double)a[i]) + fabs((double)f[i]);
                if (fabs(res[i] - sum) > 1e-5 * mag + 1e-30)
                    return vx_errf(err, VX_EFORMAT, "trace \"%s\": the residual after %s at "
                                   "position %d is not the row before plus its attention and "
                                   "FFN deltas (element %d: %.9g, want %.9g): the file is "
                                   "corrupted", name, where, pos, i, res[i], sum);
            }
        }
    return 0;
}

int brw_trace_parse(const void *buf, size_t n, const char *name, int layers, int hidden,
                    int vocab, brw_trace *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    out->target = -1;
    const uint8_t *h = buf;
    if (n < 32 || memcmp(h, "LQLTRACE", 8) != 0)
        return vx_errf(err, VX_EFORMAT, "\"%s\" is not an lql trace file (bad header)", name);
    uint32_t ver = get32(h + 8), nt = get32(h + 12), nl = get32(h + 16), hid = get32(h + 20);
    int32_t target = (int32_t)get32(h + 24);
    if (ver != 1)
        return vx_errf(err, VX_EVERSION, "trace \"%s\": unsupported version %u", name, ver);
    if ((int64_t)nl != layers || (int64_t)hid != hidden)
        return vx_errf(err, VX_EARG, "trace \"%s\" (%u tokens, %u layers, hidden %u) does not "
                       "match the bound model (%d layers, hidden %d)", name, nt, nl, hid,
                       layers, hidden);
    if (nt == 0 || nt > (1u << 20))
        return vx_errf(err, VX_EFORMAT, "trace \"%s\" records %u tokens (a trace holds 1 to "
                       "%u)", name, nt, 1u << 20);
    if (get32(h + 28) != 0)
        return vx_errf(err, VX_EFORMAT, "trace \"%s\": header bytes 28-31 are reserved (0), "
                       "not %u", name, get32(h + 28));
    /* nt <= 2^20, nl and hid equal the model's: no 64-bit overflow */
    uint64_t ns = (uint64_t)nt * (nl + 1) * 3 * hid, want = 32 + 4 * (uint64_t)nt + 4 * ns;
    if ((uint64_t)n != want)
        return vx_errf(err, VX_EFORMAT, "trace \"%s\" is %zu bytes, want %llu", name, n,
                       (unsigned long long)want);
    if (target < -1 || target >= vocab)
        return vx_errf(err, VX_EFORMAT, "trace \"%s\": FOR token id %d is outside the "
                       "vocabulary (0-%d)", name, target, vocab - 1);
    for (uint32_t i = 0; i < nt; i++) {
        int32_t id = (int32_t)get32(h + 32 + 4 * (size_t)i);
        if (id < 0 || id >= vocab)
            return vx_errf(err, VX_EFORMAT, "trace \"%s\": token %u has id %d, outside the "
                           "vocabulary (0-%d)", name, i, id, vocab - 1);
    }
    out->ids = malloc(4 * (size_t)nt);
    out->states = malloc(4 * (size_t)ns);
    if (!out->ids || !out->states) {
        brw_trace_free(out);
        return vx_errf(err, VX_ENOMEM, "trace \"%s\": out of memory", name);
    }
    out->n_tokens = (int)nt;
    out->n_layers = (int)nl;
    out->hidden = (int)hid;
    out->target = target;
    for (uint32_t i = 0; i < nt; i++)
        out->ids[i] = (int32_t)get32(h + 32 + 4 * (size_t)i);
    /* states are little-endian floats, as the host's (see brw_trace_save) */
    memcpy(out->states, h + 32 + 4 * (size_t)nt, 4 * (size_t)ns);
    if (check_states(out, name, err) != 0) {
        brw_trace_free(out);
        return -1;
    }
    return 0;
}

int brw_trace_load(eng_model *em, const char *path, const brw_trace_opts *o,
                   brw_trace *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    out->target = -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return vx_errf(err, VX_EIO, "cannot open trace \"%s\": %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return vx_errf(err, VX_EIO, "trace \"%s\" is not a regular file", path);
    }
    /* mapped, not read: a full trace of a long prompt is gigabytes */
    size_t n = (size_t)st.st_size;
    void *map = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (map == MAP_FAILED)
        return vx_errf(err, VX_EIO, "cannot map trace \"%s\": %s", path, strerror(errno));
    int rc = brw_trace_parse(map ? map : "", n, path, eng_model_layers(em),
                             eng_model_hidden(em), eng_model_vocab(em), out, err);
    if (map)
        munmap(map, n);
    if (rc != 0)
        return -1;
    if (resolve_target(em, o, &out->target, &out->for_pieces, err) != 0) {
        brw_trace_free(out);
        return -1;
    }
    if (build_rows(em, out, o, err) != 0) {
        brw_trace_free(out);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- explain infer */

typedef struct ex_ctx {
    int n_tokens, n_layers, hidden, top;
    const eng_model *em;
    brw_explain_layer *layers;
    float *attn;             /* [n_layers][n_tokens] summed probs of the last row */
    int *heads;              /* [n_layers] */
    int failed;
} ex_ctx;

static void ex_ffn(void *ctx, int layer, int pos0, int n, const float *ffn_in,
                   const float *act, int features)
{
    (void)ffn_in;
    ex_ctx *x = ctx;
    int last = x->n_tokens - 1 - pos0;
    if (layer < 0 || layer >= x->n_layers || last < 0 || last >= n)
        return;
    const float *a = act + (size_t)last * (size_t)features;
    brw_explain_layer *L = &x->layers[layer];
    free(L->fired);
    L->n_fired = 0;
    L->fired = calloc((size_t)x->top + 1, sizeof *L->fired);
    if (!L->fired) {
        x->failed = 1;
        return;
    }
    for (int f = 0; f < features; f++) {
        float v = a[f];
        if (v == 0)
            continue;
        int i = L->n_fired;
        if (i == x->top) {
            if (!(fabsf(v) > fabsf(L->fired[i - 1].act)))
                continue;
            i--;
        } else {
            L->n_fired++;
        }
        while (i > 0 && fabsf(v) > fabsf(L->fired[i - 1].act)) {
            L->fired[i] = L->fired[i - 1];
            i--;
        }
        L->fired[i] = (brw_fired){f, v, -1, 0};
    }
}

/* The fired features' top tokens, after the forward (down-meta computed on demand runs on
 * the engine's pool, which the forward holds while it calls the observers). */
static int fill_fired(const brw_model *bm, brw_explain *out, vx_err *err)
{
    size_t n = 0, k = 0;
    for (int i = 0; i < out->n_layers; i++)
        n += (size_t)out->layers[i].n_fired;
    int *lay = malloc((n + 1) * sizeof *lay);
    int64_t *f = malloc((n + 1) * sizeof *f);
    int rc = -1;
    if (!lay || !f) {
        vx_errf(err, VX_ENOMEM, "explain: out of memory");
        goto done;
    }
    for (int i = 0; i < out->n_layers; i++)
        for (int j = 0; j < out->layers[i].n_fired; j++) {
            lay[k] = out->layers[i].layer;
            f[k++] = out->layers[i].fired[j].feature;
        }
    if (brw_meta_prepare(bm, lay, f, k, err) != 0)
        goto done;
    for (int i = 0; i < out->n_layers; i++)
        for (int j = 0; j < out->layers[i].n_fired; j++) {
            brw_fired *fd = &out->layers[i].fired[j];
            brw_meta md;
            if (brw_feature_meta(bm, NULL, out->layers[i].layer, fd->feature, &md) == 0) {
                fd->top_id = md.top_id;
                fd->c_score = md.c_score;
            }
        }
    rc = 0;
done:
    free(lay);
    free(f);
    return rc;
}

static void ex_attn(void *ctx, int layer, int head, int pos0, int n, int n_keys,
                    const float *probs)
{
    (void)head;
    ex_ctx *x = ctx;
    int last = x->n_tokens - 1 - pos0;
    if (layer < 0 || layer >= x->n_layers || last < 0 || last >= n)
        return;
    const float *p = probs + (size_t)last * (size_t)n_keys;
    float *acc = x->attn + (size_t)layer * (size_t)x->n_tokens;
    for (int k = 0; k < n_keys && k < x->n_tokens; k++)
        acc[k] += p[k];
    x->heads[layer]++;
}

static void ex_layer(void *ctx, int layer, int pos0, int n, const float *attn,
                     const float *ffn, const float *resid)
{
    (void)attn;
    (void)ffn;
    ex_ctx *x = ctx;
    int last = x->n_tokens - 1 - pos0;
    if (layer < 0 || layer >= x->n_layers || last < 0 || last >= n)
        return;
    int V = eng_model_vocab(x->em);
    float *lg = malloc((size_t)V * sizeof *lg);
    if (!lg) {
        x->failed = 1;
        return;
    }
    eng_lens(x->em, resid + (size_t)last * (size_t)x->hidden, lg);
    eng_softmax(lg, V);
    int best = 0;
    for (int v = 1; v < V; v++)
        if (lg[v] > lg[best])
            best = v;
    x->layers[layer].lens_id = best;
    x->layers[layer].lens_prob = lg[best];
    free(lg);
}

int brw_explain_run(eng_model *em, const brw_model *bm, const int32_t *ids_in, int n,
                    const brw_explain_opts *o, brw_explain *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    int top = o && o->top > 0 ? o->top : 5;
    int L = eng_model_layers(em), V = eng_model_vocab(em);
    int lo = o ? o->layer_lo : -1, hi = o ? o->layer_hi : -1;
    if (lo >= 0 && (lo > hi || hi >= L))
        return vx_errf(err, VX_EARG, "layer range %d-%d is out of range (the model has %d "
                       "layers: 0-%d)", lo, hi, L, L - 1);
    if (n <= 0)
        return vx_errf(err, VX_EARG, "empty prompt: it has no tokens");
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids)
        return vx_errf(err, VX_ENOMEM, "explain: out of memory");
    memcpy(ids, ids_in, (size_t)n * sizeof *ids);
    out->ids = ids;
    out->n_tokens = n;
    ex_ctx x = {n, L, eng_model_hidden(em), top, em, NULL, NULL, NULL, 0};
    x.layers = calloc((size_t)L, sizeof *x.layers);
    x.attn = calloc((size_t)L * (size_t)n, sizeof *x.attn);
    x.heads = calloc((size_t)L, sizeof *x.heads);
    float *logits = malloc((size_t)V * sizeof *logits);
    eng_session *s = NULL;
    int rc = -1;
    if (!x.layers || !x.attn || !x.heads || !logits) {
        vx_errf(err, VX_ENOMEM, "explain: out of memory");
        goto done;
    }
    eng_observer obs = {.ctx = &x, .on_layer = ex_layer, .on_ffn = ex_ffn,
                        .on_attn = o && o->attention ? ex_attn : NULL};
    if (eng_session_new(em, n, &s, err) != 0 ||
        eng_forward(s, ids, n, logits, &obs, err) != 0)
        goto done;
    if (x.failed) {
        vx_errf(err, VX_ENOMEM, "explain: out of memory");
        goto done;
    }
    eng_softmax(logits, V);
    out->top_ids = malloc((size_t)top * sizeof *out->top_ids);
    out->top_probs = malloc((size_t)top * sizeof *out->top_probs);
    if (!out->top_ids || !out->top_probs) {
        vx_errf(err, VX_ENOMEM, "explain: out of memory");
        goto done;
    }
    for (int t = 0; t < top && t < V; t++) {
        int best = -1;
        for (int v = 0; v < V; v++) {
            int used = 0;
            for (int u = 0; u < t && !used; u++)
                used = out->top_ids[u] == v;
            if (!used && (best < 0 || logits[v] > logits[best]))
                best = v;
        }
        out->top_ids[t] = best;
        out->top_probs[t] = logits[best];
        out->n_top++;
    }
    out->layers = calloc((size_t)L, sizeof *out->layers);
    if (!out->layers) {
        vx_errf(err, VX_ENOMEM, "explain: out of memory");
        goto done;
    }
    for (int l = 0; l < L; l++) {
        if (!brw_in_range(l, lo, hi))
            continue;
        if (o && o->band >= 0 && bm && brw_band_of(bm, l) != o->band)
            continue;
        brw_explain_layer *d = &out->layers[out->n_layers++];
        *d = x.layers[l];
        x.layers[l].fired = NULL;
        d->layer = l;
        d->attended_id = -1;
        d->attended_pos = -1;
        if (x.heads[l]) {
            const float *acc = x.attn + (size_t)l * (size_t)n;
            int best = 0;
            for (int k = 1; k < n; k++)
                if (acc[k] > acc[best])
                    best = k;
            d->attended_pos = best;
            d->attended_id = ids[best];
            d->attended_weight = acc[best] / (float)x.heads[l];
        }
    }
    if (bm && fill_fired(bm, out, err) != 0)
        goto done;
    rc = 0;
done:
    eng_session_free(s);
    if (x.layers)
        for (int l = 0; l < L; l++)
            free(x.layers[l].fired);
    free(x.layers);
    free(x.attn);
    free(x.heads);
    free(logits);
    if (rc != 0)
        brw_explain_free(out);
    return rc;
}

void brw_explain_free(brw_explain *e)
{
    free(e->ids);
    free(e->top_ids);
    free(e->top_probs);
    if (e->layers)
        for (int l = 0; l < e->n_layers; l++)
            free(e->layers[l].fired);
    free(e->layers);
    memset(e, 0, sizeof *e);
}
