/*
 * tok_norm.c — normalizers: tokenizer.json "normalizer" parsed into a flat list of steps
 * (Sequence nests are flattened) and applied to one text segment at a time. Unicode
 * normal forms come from utf8proc; Lowercase maps code point by code point (full mappings,
 * as Rust's char::to_lowercase, so without the final-sigma rule); Strip removes
 * White_Space characters; Prepend adds its text only to a non-empty segment, as Hugging
 * Face does (so an empty string never gains a '▁').
 */
#include "tok_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int step(eng_tokenizer *t, const cJSON *o, const char *type, vx_err *err)
{
    tok_norm s = {0};
    if (strcmp(type, "NFC") == 0) {
        s.kind = TOK_NFC;
    } else if (strcmp(type, "NFD") == 0) {
        s.kind = TOK_NFD;
    } else if (strcmp(type, "NFKC") == 0) {
        s.kind = TOK_NFKC;
    } else if (strcmp(type, "NFKD") == 0) {
        s.kind = TOK_NFKD;
    } else if (strcmp(type, "Lowercase") == 0) {
        s.kind = TOK_LOWER;
    } else if (strcmp(type, "Strip") == 0) {
        s.kind = TOK_STRIP;
        if (tok_jbool(t, o, "strip_left", "normalizer(Strip)", 1, &s.left, err) < 0 ||
            tok_jbool(t, o, "strip_right", "normalizer(Strip)", 1, &s.right, err) < 0)
            return -1;
    } else if (strcmp(type, "Prepend") == 0) {
        const char *p;
        s.kind = TOK_PREPEND;
        if (tok_jstr(t, o, "prepend", "normalizer(Prepend)", 1, &p, err) < 0)
            return -1;
        s.ns = strlen(p);
        if (!(s.s = tok_arena_dup(&t->arena, p, s.ns)))
            return vx_errf(err, VX_ENOMEM, "out of memory");
    } else if (strcmp(type, "Replace") == 0) {
        const char *c;
        s.kind = TOK_REPLACE;
        if (tok_jstr(t, o, "content", "normalizer(Replace)", 1, &c, err) < 0 ||
            tok_pat_load(t, tok_jget(o, "pattern"), "normalizer(Replace)", &s.pat, err) < 0)
            return -1;
        s.ns = strlen(c);
        s.s = tok_arena_dup(&t->arena, c, s.ns);
    } else {
        return vx_errf(err, VX_EUNSUPPORTED,
                       "%s: normalizer '%s' is not supported (supported: NFC, NFD, NFKC, NFKD, "
                       "Prepend, Replace, Lowercase, Strip, Sequence)", t->path, type);
    }
    if ((s.kind == TOK_REPLACE && !s.s) || tok_push(&t->norm, &t->n_norm, sizeof s, &s) < 0) {
        pcre2_code_free(s.pat.re);
        return vx_errf(err, VX_ENOMEM, "out of memory loading the normalizer");
    }
    return 0;
}

int tok_norm_load(eng_tokenizer *t, const cJSON *o, vx_err *err)
{
    return tok_load_steps(t, o, "normalizer", "normalizers", step, err);
}

static int unicode_form(int kind, const char *s, size_t n, tok_buf *out)
{
    size_t i = 0;
    while (i < n && !((uint8_t)s[i] & 0x80))
        i++;
    if (i == n)   /* ASCII is left unchanged by every normal form */
        return tok_buf_put(out, s, n);
    int opt = UTF8PROC_STABLE;
    if (kind == TOK_NFC || kind == TOK_NFKC)
        opt |= UTF8PROC_COMPOSE;
    else
        opt |= UTF8PROC_DECOMPOSE;
    if (kind == TOK_NFKC || kind == TOK_NFKD)
        opt |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *r = NULL;
    utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &r,
                                      (utf8proc_option_t)opt);
    if (k < 0)   /* only on memory exhaustion: the text was repaired before */
        return -1;
    int rc = tok_buf_put(out, r, (size_t)k);
    free(r);
    return rc;
}

/* The lowercase of one code point as Rust's char::to_lowercase gives it. utf8proc has the
 * simple mappings only (U+0130 'İ', the one character whose full lowercase is two, "i"
 * U+0307, is done in lower()) and lacks the case pairs of Unicode 16-17, which utf8proc 2.8
 * (Unicode 15) does not know and @huggingface/tokenizers (node 20's ICU, Unicode 17) has. */
static int32_t lower_cp(int32_t c)
{
    static const int32_t pairs[][2] = {
        {0x1C89, 0x1C8A}, {0xA7CB, 0x0264}, {0xA7CC, 0xA7CD}, {0xA7CE, 0xA7CF},
        {0xA7D2, 0xA7D3}, {0xA7D4, 0xA7D5}, {0xA7DA, 0xA7DB}, {0xA7DC, 0x019B}};
    if (c >= 0x10D50 && c <= 0x10D65)   /* Garay */
        return c + 0x20;
    if (c >= 0x16EA0 && c <= 0x16EB8)   /* Beria Erfe */
        return c + 0x1B;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (c == pairs[i][0])
            return pairs[i][1];
    return utf8proc_tolower(c);
}

static int lower(const char *s, size_t n, tok_buf *out)
{
    for (size_t i = 0; i < n;) {
        int32_t cp;
        char u[4];
        i += tok_utf8_next(s + i, n - i, &cp);
        if (cp == 0x130) {
            if (tok_buf_put(out, "i\xCC\x87", 3) < 0)
                return -1;
            continue;
        }
        if (tok_buf_put(out, u, tok_utf8_put(lower_cp(cp), u)) < 0)
            return -1;
    }
    return 0;
}

static int strip(const tok_norm *st, const char *s, size_t n, tok_buf *out)
{
    size_t a = 0, b = n;
    while (st->left && a < b) {
        int32_t cp;
        size_t k = tok_utf8_next(s + a, b - a, &cp);
        if (!tok_is_ws(cp))
            break;
        a += k;
    }
    while (st->right && b > a) {
        size_t k = 1;   /* step back to the lead byte of the last character */
        while (k < b - a && ((uint8_t)s[b - k] & 0xC0) == 0x80)
            k++;
        int32_t cp;
        tok_utf8_next(s + b - k, k, &cp);
        if (!tok_is_ws(cp))
            break;
        b -= k;
    }
    return tok_buf_put(out, s + a, b - a);
}

int tok_normalize(tok_ctx *c, const char *s, size_t n, tok_buf *out)
{
    const eng_tokenizer *t = c->t;
    tok_buf a = {0};
    out->n = 0;
    if (tok_buf_put(out, s, n) < 0)
        goto oom;
    for (size_t i = 0; i < t->n_norm; i++) {
        const tok_norm *st = &t->norm[i];
        int rc = 0;
        a.n = 0;
        switch (st->kind) {
        case TOK_NFC: case TOK_NFD: case TOK_NFKC: case TOK_NFKD:
            rc = unicode_form(st->kind, out->p, out->n, &a);
            break;
        case TOK_LOWER:
            rc = lower(out->p, out->n, &a);
            break;
        case TOK_STRIP:
            rc = strip(st, out->p, out->n, &a);
            break;
        case TOK_PREPEND:
            if (out->n)
                rc = tok_buf_put(&a, st->s, st->ns);
            rc = rc < 0 ? rc : tok_buf_put(&a, out->p, out->n);
            break;
        case TOK_REPLACE:
            if (tok_pat_replace(&st->pat, out->p, out->n, st->s, st->ns, c->md, &c->spans, &a,
                                c->err) < 0) {
                tok_buf_free(&a);
                return -1;
            }
            break;
        }
        if (rc < 0 || tok_buf_put(&a, "", 0) < 0)
            goto oom;
        tok_buf x = *out;   /* the result becomes the next step's input */
        *out = a;
        a = x;
    }
    tok_buf_free(&a);
    return tok_buf_put(out, "", 0) < 0 ? vx_errf(c->err, VX_ENOMEM, "out of memory") : 0;
oom:
    tok_buf_free(&a);
    return vx_errf(c->err, VX_ENOMEM, "out of memory while normalizing text");
}
