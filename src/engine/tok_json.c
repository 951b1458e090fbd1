/*
 * tok_json.c — the fast path for loading big tokenizer.json files. Gemma-3's file is 33 MB,
 * nearly all of it model.vocab (262k entries) and model.merges (515k pairs); building a
 * cJSON node per value costs more than everything else in loading. This scanner walks
 * the raw text once, reads those two values straight into a tok_raw, and hands cJSON the
 * rest of the document with them replaced by {} and []. It only accepts the plain shape
 * (string keys without escapes for the structure, ids as plain decimal integers, merges
 * as "a b" strings or ["a", "b"] pairs, no \u0000 or lone surrogates); anything else makes
 * it decline, and the caller parses the whole file with cJSON, whose path reports every
 * error precisely. It never changes what a well-formed file means.
 */
#include "tok_int.h"

#include <stdlib.h>
#include <string.h>

#define MAX_ID 16777215L   /* as tok_bpe.c: the id → piece table is dense */

typedef struct scan {
    const char *p, *end;
    tok_buf tmp;           /* unescaped string */
    tok_raw *r;
} scan;

static void ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int eat(scan *s, char c)
{
    ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

/* The raw content of the string at s->p (which must be '"'): [*a, *a + *n); *esc when it
 * holds backslashes. 0, or -1 when there is no closing quote or a raw control char. */
static int span(scan *s, const char **a, size_t *n, int *esc)
{
    ws(s);
    if (s->p >= s->end || *s->p != '"')
        return -1;
    const char *q = ++s->p;
    *esc = 0;
    while (q < s->end && *q != '"') {
        if ((unsigned char)*q < 0x20)
            return -1;
        if (*q == '\\') {
            *esc = 1;
            q++;
        }
        q++;
    }
    if (q >= s->end)
        return -1;
    *a = s->p;
    *n = (size_t)(q - s->p);
    s->p = q + 1;
    return 0;
}

static int hex4(const char *p, const char *end, uint32_t *v)
{
    if (end - p < 4)
        return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* Unescape raw string content into s->tmp; -1 on anything cJSON would read differently. */
static int unescape(scan *s, const char *a, size_t n)
{
    const char *p = a, *end = a + n;
    s->tmp.n = 0;
    while (p < end) {
        const char *q = memchr(p, '\\', (size_t)(end - p));
        if (!q)
            q = end;
        if (tok_buf_put(&s->tmp, p, (size_t)(q - p)) < 0)
            return -1;
        if (q == end)
            break;
        if (q + 1 >= end)
            return -1;
        char c = q[1], out;
        p = q + 2;
        switch (c) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u': {
            uint32_t u, lo;
            if (hex4(p, end, &u) < 0 || u == 0 || (u >= 0xDC00 && u <= 0xDFFF))
                return -1;
            p += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {   /* a surrogate pair */
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) < 0 ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return -1;
                p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            char b[4];
            if (tok_buf_put(&s->tmp, b, tok_utf8_put((int32_t)u, b)) < 0)
                return -1;
            continue;
        }
        default:
            return -1;
        }
        if (tok_buf_putc(&s->tmp, out) < 0)
            return -1;
    }
    return tok_buf_put(&s->tmp, "", 0);
}

/* Read a string into r->strings; *out / *n the copy. */
static int string(scan *s, const char **out, size_t *n)
{
    const char *a;
    size_t len;
    int esc;
    if (span(s, &a, &len, &esc) < 0)
        return -1;
    if (esc) {
        if (unescape(s, a, len) < 0)
            return -1;
        a = s->tmp.p;
        len = s->tmp.n;
    }
    if (!(*out = tok_arena_dup(&s->r->strings, a, len)))
        return -1;
    *n = len;
    return 0;
}

/* An object key without escapes and its ':'; -1 otherwise. */
static int key(scan *s, const char **a, size_t *n)
{
    int esc;
    return span(s, a, n, &esc) < 0 || esc || !eat(s, ':') ? -1 : 0;
}

static int same(const char *a, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(a, lit, n) == 0;
}

/* Skip one value of any kind (brackets balanced, strings honoured). */
static int skip(scan *s)
{
    ws(s);
    if (s->p >= s->end)
        return -1;
    if (*s->p == '"') {
        const char *a;
        size_t n;
        int esc;
        return span(s, &a, &n, &esc);
    }
    if (*s->p == '{' || *s->p == '[') {
        size_t depth = 0;
        while (s->p < s->end) {
            char c = *s->p;
            if (c == '"') {
                const char *a;
                size_t n;
                int esc;
                if (span(s, &a, &n, &esc) < 0)
                    return -1;
                continue;
            }
            s->p++;
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0)
                return 0;
        }
        return -1;
    }
    while (s->p < s->end && !strchr(",}] \t\n\r", *s->p))
        s->p++;
    return 0;
}

/* "piece": id, ... */
static int vocab(scan *s)
{
    if (!eat(s, '{'))
        return -1;
    if (eat(s, '}'))
        return 0;
    do {
        const char *k;
        size_t n;
        if (string(s, &k, &n) < 0 || !eat(s, ':'))
            return -1;
        ws(s);
        long id = 0;
        int digits = 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9' && digits < 9) {
            id = id * 10 + (*s->p++ - '0');
            digits++;
        }
        if (!digits || id > MAX_ID || (s->p < s->end && strchr(".eE0123456789", *s->p)))
            return -1;
        if (tok_raw_vocab(s->r, k, n, (int32_t)id) < 0)
            return -1;
    } while (eat(s, ','));
    return eat(s, '}') ? 0 : -1;
}

/* "a b" or ["a", "b"], ... */
static int merges(scan *s)
{
    if (!eat(s, '['))
        return -1;
    if (eat(s, ']'))
        return 0;
    do {
        const char *a, *b;
        size_t na, nb;
        ws(s);
        if (eat(s, '[')) {
            if (string(s, &a, &na) < 0 || !eat(s, ',') || string(s, &b, &nb) < 0 ||
                !eat(s, ']'))
                return -1;
        } else {
            if (string(s, &a, &na) < 0)
                return -1;
            const char *sp = memchr(a, ' ', na);
            if (!sp || sp == a || sp + 1 == a + na || memchr(sp + 1, ' ', na - (size_t)(sp - a) - 1))
                return -1;   /* cJSON's path names the bad merge */
            b = sp + 1;
            nb = na - (size_t)(b - a);
            na = (size_t)(sp - a);
        }
        if (tok_raw_merge(s->r, a, na, b, nb) < 0)
            return -1;
    } while (eat(s, ','));
    return eat(s, ']') ? 0 : -1;
}

/* The model object: records where vocab and merges sit in the text. */
static int model(scan *s, const char *base, size_t range[2][2])
{
    int seen[2] = {0, 0};
    if (!eat(s, '{'))
        return -1;
    if (eat(s, '}'))
        return -1;   /* no vocab: let cJSON's path say so */
    do {
        const char *k;
        size_t nk;
        if (key(s, &k, &nk) < 0)
            return -1;
        int w = same(k, nk, "vocab") ? 0 : same(k, nk, "merges") ? 1 : -1;
        ws(s);
        if (w < 0) {
            if (skip(s) < 0)
                return -1;
            continue;
        }
        if (seen[w])
            return -1;
        seen[w] = 1;
        range[w][0] = (size_t)(s->p - base);
        if ((w == 0 ? vocab(s) : merges(s)) < 0)
            return -1;
        range[w][1] = (size_t)(s->p - base);
    } while (eat(s, ','));
    return eat(s, '}') && seen[0] ? 0 : -1;
}

static int scan_all(scan *s, const char *text, size_t range[2][2])
{
    int seen = 0;
    if (!eat(s, '{'))
        return -1;
    do {
        const char *k;
        size_t nk;
        if (key(s, &k, &nk) < 0)
            return -1;
        if (same(k, nk, "model")) {
            if (seen++ || model(s, text, range) < 0)
                return -1;
        } else if (skip(s) < 0) {
            return -1;
        }
    } while (eat(s, ','));
    return eat(s, '}') && seen ? 0 : -1;
}

int tok_fast_scan(const char *text, size_t n, tok_raw *r, tok_buf *rest)
{
    scan s = {.p = text, .end = text + n, .r = r};
    size_t range[2][2] = {{0, 0}, {0, 0}};
    int ok = scan_all(&s, text, range) == 0;
    tok_buf_free(&s.tmp);
    if (!ok) {
        tok_raw_free(r);
        return 0;
    }
    /* rest = text with the vocab replaced by {} and the merges (when present) by []. */
    int order = range[1][1] && range[1][0] < range[0][0];   /* merges first? */
    size_t at = 0;
    rest->n = 0;
    for (int k = 0; k < 2; k++) {
        int w = order ? 1 - k : k;
        if (!range[w][1])
            continue;
        if (tok_buf_put(rest, text + at, range[w][0] - at) < 0 ||
            tok_buf_put(rest, w == 0 ? "{}" : "[]", 2) < 0)
            return -1;
        at = range[w][1];
    }
    return tok_buf_put(rest, text + at, n - at) < 0 ? -1 : 1;
}
