/*
 * tok_bpe.c — the BPE model. Loading builds the vocab (piece → id hash map plus the id →
 * piece table) and the merge table ((left id, right id) → (rank, merged id)) from either
 * merge spelling ("a b" strings or ["a", "b"] pairs), checking every merge against the
 * vocab. Encoding a pre-token follows Hugging Face's word model: split into characters
 * (continuing_subword_prefix / end_of_word_suffix applied), unknown characters become
 * <0xNN> byte pieces (byte_fallback) or the unk id (consecutive ones fused with fuse_unk),
 * then the lowest-ranked adjacent pair is merged repeatedly through a binary heap over a
 * linked list of symbols, leftmost first among equal ranks. ignore_merges takes a
 * pre-token that is already in the vocab as one token.
 */
#include "tok_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Vocab ids above this are refused: the id → piece table is allocated densely. */
#define MAX_ID ((1L << 24) - 1)

typedef struct tok_sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len;   /* bytes of the text covered; 0 once merged into its left neighbour */
} tok_sym;

typedef struct tok_merge {
    uint32_t rank, pos;
    int32_t id;
} tok_merge;

/* ---------------------------------------------------------------- loading */

/* Append to a raw list, doubling its capacity (these lists reach 500k entries). */
static int raw_add(tok_raw_entry **l, size_t *n, size_t *cap, tok_raw_entry e)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 1024;
        tok_raw_entry *p = realloc(*l, c * sizeof *p);
        if (!p)
            return -1;
        *l = p;
        *cap = c;
    }
    (*l)[(*n)++] = e;
    return 0;
}

int tok_raw_vocab(tok_raw *r, const char *k, size_t n, int32_t id)
{
    return raw_add(&r->v, &r->nv, &r->cv, (tok_raw_entry){k, (uint32_t)n, NULL, 0, id});
}

int tok_raw_merge(tok_raw *r, const char *a, size_t na, const char *b, size_t nb)
{
    return raw_add(&r->m, &r->nm, &r->cm, (tok_raw_entry){a, (uint32_t)na, b, (uint32_t)nb, 0});
}

void tok_raw_free(tok_raw *r)
{
    free(r->v);
    free(r->m);
    tok_arena_free(&r->strings);
    memset(r, 0, sizeof *r);
}

/* model.vocab and model.merges from the parsed JSON into r (strings borrowed from it). */
static int raw_from_json(const eng_tokenizer *t, const cJSON *model, tok_raw *r, vx_err *err)
{
    const cJSON *v = tok_jget(model, "vocab"), *e;
    if (!v)
        return vx_errf(err, VX_EFORMAT, "%s: model has no 'vocab'", t->path);
    if (!cJSON_IsObject(v))
        return vx_errf(err, VX_EFORMAT, "%s: model.vocab must be an object (got %s)", t->path,
                       tok_jtype(v));
    cJSON_ArrayForEach(e, v) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        /* range before the cast: converting an out-of-range double is undefined */
        if (!cJSON_IsNumber(e) || d < 0 || d > (double)MAX_ID || d != (double)(long)d)
            return vx_errf(err, VX_EFORMAT, "%s: model.vocab['%s'] must be an id in 0..%ld "
                           "(got %s)", t->path, e->string, MAX_ID,
                           cJSON_IsNumber(e) ? "a number out of range" : tok_jtype(e));
        if (tok_raw_vocab(r, e->string, strlen(e->string), (int32_t)d) < 0)
            return vx_errf(err, VX_ENOMEM, "out of memory loading the vocab");
    }
    const cJSON *ms = tok_jget(model, "merges"), *m;
    if (ms && !cJSON_IsArray(ms))
        return vx_errf(err, VX_EFORMAT, "%s: model.merges must be an array (got %s)", t->path,
                       tok_jtype(ms));
    size_t i = 0;
    cJSON_ArrayForEach(m, ms) {
        const char *a = NULL, *b = NULL;
        if (cJSON_IsString(m)) {
            const char *sp = strchr(m->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == m->valuestring || !sp[1])
                return vx_errf(err, VX_EFORMAT, "%s: model.merges[%zu] '%s' is not two pieces "
                               "separated by one space", t->path, i, m->valuestring);
            if (tok_raw_merge(r, m->valuestring, (size_t)(sp - m->valuestring), sp + 1,
                              strlen(sp + 1)) < 0)
                return vx_errf(err, VX_ENOMEM, "out of memory loading the merges");
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            a = m->child->valuestring;
            b = m->child->next->valuestring;
            if (tok_raw_merge(r, a, strlen(a), b, strlen(b)) < 0)
                return vx_errf(err, VX_ENOMEM, "out of memory loading the merges");
        } else {
            return vx_errf(err, VX_EFORMAT, "%s: model.merges[%zu] must be a string \"a b\" or "
                           "a pair [\"a\", \"b\"] (got %s)", t->path, i, tok_jtype(m));
        }
        i++;
    }
    return 0;
}

static int build_vocab(eng_tokenizer *t, const tok_raw *r, vx_err *err)
{
    long max = -1;
    for (size_t i = 0; i < r->nv; i++)
        if (r->v[i].id > max)
            max = r->v[i].id;
    t->n_ids = (size_t)(max + 1);
    t->piece = calloc(t->n_ids ? t->n_ids : 1, sizeof *t->piece);
    t->plen = calloc(t->n_ids ? t->n_ids : 1, sizeof *t->plen);
    t->special = calloc(t->n_ids ? t->n_ids : 1, 1);
    if (!t->piece || !t->plen || !t->special || tok_smap_init(&t->vocab, r->nv) < 0)
        return vx_errf(err, VX_ENOMEM, "out of memory loading the vocab of %zu pieces", r->nv);
    for (size_t i = 0; i < r->nv; i++) {
        const tok_raw_entry *e = &r->v[i];
        char *s = tok_arena_dup(&t->arena, e->a, e->na);
        if (!s || tok_smap_put(&t->vocab, s, e->na, e->id) < 0)
            return vx_errf(err, VX_ENOMEM, "out of memory loading the vocab");
        if (!t->piece[e->id]) {   /* a duplicate id keeps its first piece */
            t->piece[e->id] = s;
            t->plen[e->id] = e->na;
        }
    }
    return 0;
}

/* Index merge i: both halves and their concatenation must be in the vocab. */
static int merge_one(eng_tokenizer *t, const tok_raw *r, size_t i, tok_buf *cat, vx_err *err)
{
    const char *a = r->m[i].a, *b = r->m[i].b;
    size_t na = r->m[i].na, nb = r->m[i].nb;
    int32_t ia = tok_smap_get(&t->vocab, a, na), ib = tok_smap_get(&t->vocab, b, nb);
    if (ia < 0 || ib < 0)
        return vx_errf(err, VX_EFORMAT, "%s: model.merges[%zu] '%.*s' '%.*s': '%.*s' is not in "
                       "the vocab", t->path, i, (int)na, a, (int)nb, b,
                       ia < 0 ? (int)na : (int)nb, ia < 0 ? a : b);
    /* The merged piece drops the right half's continuing_subword_prefix. */
    size_t skip = t->prefix && nb >= t->nprefix && memcmp(b, t->prefix, t->nprefix) == 0
                      ? t->nprefix : 0;
    cat->n = 0;
    if (tok_buf_put(cat, a, na) < 0 || tok_buf_put(cat, b + skip, nb - skip) < 0)
        return vx_errf(err, VX_ENOMEM, "out of memory loading the merges");
    int32_t id = tok_smap_get(&t->vocab, cat->p, cat->n);
    if (id < 0)
        return vx_errf(err, VX_EFORMAT, "%s: model.merges[%zu] '%.*s' '%.*s' makes '%s', which "
                       "is not in the vocab", t->path, i, (int)na, a, (int)nb, b, cat->p);
    /* A repeated pair keeps its last rank, as HF's map collection does. */
    if (tok_pmap_put(&t->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, (uint32_t)i,
                     id) < 0)
        return vx_errf(err, VX_ENOMEM, "out of memory loading the merges");
    return 0;
}

#define BATCH 16

/* Merges are indexed in batches whose hash-table slots are prefetched a step ahead (the
 * tables are tens of MB, so each look-up is otherwise a cache miss). A batch with any
 * problem is redone one merge at a time by merge_one, which names the first bad merge;
 * redoing a put is harmless (same key, same value). */
static int build_merges(eng_tokenizer *t, const tok_raw *r, vx_err *err)
{
    if (tok_pmap_init(&t->merges, r->nm) < 0)
        return vx_errf(err, VX_ENOMEM, "out of memory loading the merges");
    tok_buf cat = {0};
    int rc = 0;
    for (size_t i0 = 0; i0 < r->nm && rc == 0; i0 += BATCH) {
        size_t nb = r->nm - i0 < BATCH ? r->nm - i0 : BATCH, off[BATCH + 1];
        uint32_t ha[BATCH], hb[BATCH], hc[BATCH];
        int32_t ia[BATCH], ib[BATCH];
        const tok_raw_entry *m = r->m + i0;
        int bad = 0;
        for (size_t j = 0; j < nb; j++) {
            ha[j] = tok_hash(m[j].a, m[j].na);
            hb[j] = tok_hash(m[j].b, m[j].nb);
            tok_smap_prefetch(&t->vocab, ha[j]);
            tok_smap_prefetch(&t->vocab, hb[j]);
        }
        cat.n = 0;
        for (size_t j = 0; j < nb; j++) {
            ia[j] = tok_smap_get_h(&t->vocab, m[j].a, m[j].na, ha[j]);
            ib[j] = tok_smap_get_h(&t->vocab, m[j].b, m[j].nb, hb[j]);
            size_t skip = t->prefix && m[j].nb >= t->nprefix &&
                          memcmp(m[j].b, t->prefix, t->nprefix) == 0 ? t->nprefix : 0;
            off[j] = cat.n;
            if (tok_buf_put(&cat, m[j].a, m[j].na) < 0 ||
                tok_buf_put(&cat, m[j].b + skip, m[j].nb - skip) < 0) {
                bad = 1;
                break;
            }
            hc[j] = tok_hash(cat.p + off[j], cat.n - off[j]);
            tok_smap_prefetch(&t->vocab, hc[j]);
            tok_pmap_prefetch(&t->merges, (uint64_t)(uint32_t)ia[j] << 32 | (uint32_t)ib[j]);
            bad |= ia[j] < 0 || ib[j] < 0;
        }
        off[nb] = cat.n;
        for (size_t j = 0; j < nb && !bad; j++) {
            int32_t id = tok_smap_get_h(&t->vocab, cat.p + off[j], off[j + 1] - off[j], hc[j]);
            bad = id < 0 || tok_pmap_put(&t->merges, (uint64_t)(uint32_t)ia[j] << 32 |
                                         (uint32_t)ib[j], (uint32_t)(i0 + j), id) < 0;
        }
        for (size_t j = 0; j < nb && bad && rc == 0; j++)
            rc = merge_one(t, r, i0 + j, &cat, err);
    }
    tok_buf_free(&cat);
    return rc;
}

/* Optional string field kept in the arena; "" counts as absent. */
static int opt_str(eng_tokenizer *t, const cJSON *o, const char *key, char **out, size_t *n,
                   vx_err *err)
{
    const char *s;
    if (tok_jstr(t, o, key, "model", 0, &s, err) < 0)
        return -1;
    *out = NULL;
    *n = 0;
    if (!s || !*s)
        return 0;
    *n = strlen(s);
    *out = tok_arena_dup(&t->arena, s, *n);
    return *out ? 0 : vx_errf(err, VX_ENOMEM, "out of memory");
}

int tok_bpe_load(eng_tokenizer *t, const cJSON *model, const tok_raw *fast, vx_err *err)
{
    const char *type;
    if (!model)
        return vx_errf(err, VX_EFORMAT, "%s: no 'model' section", t->path);
    if (!cJSON_IsObject(model))
        return vx_errf(err, VX_EFORMAT, "%s: model must be an object (got %s)", t->path,
                       tok_jtype(model));
    if (tok_jstr(t, model, "type", "model", 0, &type, err) < 0)
        return -1;
    if (type && strcmp(type, "BPE") != 0)
        return vx_errf(err, VX_EUNSUPPORTED, "%s: model type '%s' is not supported (only BPE)",
                       t->path, type);
    const cJSON *drop = tok_jget(model, "dropout");
    if (drop && (!cJSON_IsNumber(drop) || drop->valuedouble != 0))
        return vx_errf(err, VX_EUNSUPPORTED, "%s: BPE dropout is not supported (model.dropout "
                       "must be null)", t->path);
    char *unk;
    size_t nunk;
    if (tok_jbool(t, model, "ignore_merges", "model", 0, &t->ignore_merges, err) < 0 ||
        tok_jbool(t, model, "byte_fallback", "model", 0, &t->byte_fallback, err) < 0 ||
        tok_jbool(t, model, "fuse_unk", "model", 0, &t->fuse_unk, err) < 0 ||
        opt_str(t, model, "continuing_subword_prefix", &t->prefix, &t->nprefix, err) < 0 ||
        opt_str(t, model, "end_of_word_suffix", &t->suffix, &t->nsuffix, err) < 0 ||
        opt_str(t, model, "unk_token", &unk, &nunk, err) < 0)
        return -1;
    t->unk_name = unk;
    tok_raw slow = {0};
    int rc = fast ? 0 : raw_from_json(t, model, &slow, err);
    if (rc == 0)
        rc = build_vocab(t, fast ? fast : &slow, err);
    if (rc == 0)
        rc = build_merges(t, fast ? fast : &slow, err);
    tok_raw_free(&slow);
    if (rc < 0)
        return -1;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = t->byte_fallback ? tok_smap_get(&t->vocab, name, 6) : -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- encoding */

static int merge_less(const tok_merge *a, const tok_merge *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(tok_merge *h, size_t *n, tok_merge m)
{
    size_t i = (*n)++;
    while (i && merge_less(&m, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = m;
}

static tok_merge heap_pop(tok_merge *h, size_t *n)
{
    tok_merge top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = l;
        if (l >= *n)
            break;
        if (l + 1 < *n && merge_less(&h[l + 1], &h[l]))
            m = l + 1;
        if (!merge_less(&h[m], &last))
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* Push the merge of symbols l and its right neighbour r when the pair has one. */
static void push_pair(const eng_tokenizer *t, const tok_sym *sym, int32_t l, int32_t r,
                      tok_merge *h, size_t *n)
{
    const tok_pmap_e *e = tok_pmap_get(&t->merges,
                                       (uint64_t)(uint32_t)sym[l].id << 32 | (uint32_t)sym[r].id);
    if (e)
        heap_push(h, n, (tok_merge){e->a, (uint32_t)l, e->b});
}

/* Split into symbols, one per character (or per byte with byte fallback). */
static int symbols(tok_ctx *c, const char *s, size_t n, size_t *nsym)
{
    const eng_tokenizer *t = c->t;
    tok_sym *sym = c->sym;
    size_t k = 0;
    int last_unk = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t w = tok_utf8_next(s + i, n - i, &cp);
        const char *key = s + i;
        size_t nkey = w;
        if ((t->prefix && i > 0) || (t->suffix && i + w == n)) {
            c->tmp.n = 0;
            if ((t->prefix && i > 0 && tok_buf_put(&c->tmp, t->prefix, t->nprefix) < 0) ||
                tok_buf_put(&c->tmp, s + i, w) < 0 ||
                (t->suffix && i + w == n && tok_buf_put(&c->tmp, t->suffix, t->nsuffix) < 0))
                return vx_errf(c->err, VX_ENOMEM, "out of memory while encoding");
            key = c->tmp.p;
            nkey = c->tmp.n;
        }
        int32_t id = tok_smap_get(&t->vocab, key, nkey);
        int bytes_ok = t->byte_fallback;
        for (size_t j = 0; id < 0 && bytes_ok && j < w; j++)
            bytes_ok = t->byte_id[(uint8_t)s[i + j]] >= 0;
        if (id >= 0) {
            sym[k++] = (tok_sym){id, 0, 0, (uint32_t)w};
            last_unk = 0;
        } else if (bytes_ok) {
            for (size_t j = 0; j < w; j++)
                sym[k++] = (tok_sym){t->byte_id[(uint8_t)s[i + j]], 0, 0, 1};
            last_unk = 0;
        } else if (t->unk >= 0) {
            if (t->fuse_unk && last_unk)
                sym[k - 1].len += (uint32_t)w;
            else
                sym[k++] = (tok_sym){t->unk, 0, 0, (uint32_t)w};
            last_unk = 1;
        }
        i += w;
    }
    for (size_t i = 0; i < k; i++) {
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < k ? (int32_t)i + 1 : -1;
    }
    *nsym = k;
    return 0;
}

int tok_bpe_word(tok_ctx *c, const char *s, size_t n, tok_ids *out)
{
    const eng_tokenizer *t = c->t;
    if (n == 0)
        return 0;
    if (n > INT32_MAX / 4)
        return vx_errf(c->err, VX_EARG, "pre-token of %zu bytes is too long to encode", n);
    if (t->ignore_merges) {
        int32_t id = tok_smap_get(&t->vocab, s, n);
        if (id >= 0)
            return tok_ids_add(out, id) < 0 ? vx_errf(c->err, VX_ENOMEM, "out of memory") : 0;
    }
    if (c->nsym < n) {
        free(c->sym);
        free(c->heap);
        c->sym = malloc(n * sizeof *c->sym);
        c->heap = malloc(3 * n * sizeof *c->heap);
        c->nsym = c->sym && c->heap ? n : 0;
        if (!c->nsym)
            return vx_errf(c->err, VX_ENOMEM, "out of memory encoding a %zu-byte pre-token", n);
    }
    size_t k = 0, nh = 0;
    if (symbols(c, s, n, &k) < 0)
        return -1;
    tok_sym *sym = c->sym;
    tok_merge *h = c->heap;
    for (size_t i = 0; i + 1 < k; i++)
        push_pair(t, sym, (int32_t)i, (int32_t)i + 1, h, &nh);
    while (nh) {
        tok_merge m = heap_pop(h, &nh);
        tok_sym *l = &sym[m.pos];
        if (!l->len || l->next < 0)
            continue;
        tok_sym *r = &sym[l->next];
        const tok_pmap_e *e = tok_pmap_get(&t->merges,
                                           (uint64_t)(uint32_t)l->id << 32 | (uint32_t)r->id);
        if (!e || e->b != m.id)   /* the pair changed since this entry was queued */
            continue;
        l->id = m.id;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (l->next >= 0)
            sym[l->next].prev = (int32_t)m.pos;
        if (l->prev >= 0)
            push_pair(t, sym, l->prev, (int32_t)m.pos, h, &nh);
        if (l->next >= 0)
            push_pair(t, sym, (int32_t)m.pos, l->next, h, &nh);
    }
    for (size_t i = 0; i < k; i++)
        if (sym[i].len && tok_ids_add(out, sym[i].id) < 0)
            return vx_errf(c->err, VX_ENOMEM, "out of memory while encoding");
    return 0;
}

void tok_ctx_free(tok_ctx *c)
{
    free(c->sym);
    free(c->heap);
    free(c->spans.p);
    tok_buf_free(&c->tmp);
    pcre2_match_data_free(c->md);
    memset(c, 0, sizeof *c);
}
