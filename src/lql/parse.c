/*
 * parse.c — the parser driver: lexes the text, feeds Lemon token by token, and words the
 * errors. A syntax error is reported `near "X": expected …` with the tokens the grammar
 * would have accepted there (found by replaying the accepted prefix with each candidate
 * token — cheap for statements of a few dozen tokens, and it can never disagree with the
 * grammar), or `incomplete input` at the end of the text. Also the statement splitter and
 * the REPL's completeness check, which use the same lexer so strings and comments are
 * treated exactly as the parser treats them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "parse_int.h"

/* Lemon's entry points (gen/lql.c). */
void *lqlParserAlloc(void *(*mallocProc)(size_t), lql_pctx *p);
void lqlParserFree(void *parser, void (*freeProc)(void *));
void lqlParser(void *parser, int major, lql_token minor);

typedef struct toklist { lql_token *a; int *code; int n, cap; } toklist;

static int push(lql_arena *ar, toklist *tl, int code, const lql_token *t)
{
    if (tl->n == tl->cap) {
        int cap = tl->cap ? tl->cap * 2 : 64;
        lql_token *a = lql_arena_alloc(ar, (size_t)cap * sizeof *a);
        int *c = lql_arena_alloc(ar, (size_t)cap * sizeof *c);
        if (!a || !c) return -1;
        if (tl->n) {
            memcpy(a, tl->a, (size_t)tl->n * sizeof *a);
            memcpy(c, tl->code, (size_t)tl->n * sizeof *c);
        }
        tl->a = a; tl->code = c; tl->cap = cap;
    }
    tl->a[tl->n] = *t;
    tl->code[tl->n] = code;
    tl->n++;
    return 0;
}

/* Feed toks[0..k) and then `probe`: does the grammar accept probe there? */
static int accepts(const toklist *tl, int k, int probe)
{
    lql_arena *ar = lql_arena_new();
    if (!ar) return 0;
    lql_pctx p = {ar, NULL, 0, NULL};
    void *ps = lqlParserAlloc(lql_malloc, &p);
    int ok = 0;
    if (ps) {
        for (int i = 0; i < k && !p.failed; i++) lqlParser(ps, tl->code[i], tl->a[i]);
        if (!p.failed) {
            /* a dummy value the builders can read: digits parse, quotes unquote */
            lql_token t = {probe == LQL_TK_STRING ? "\"\"" : "0", probe == LQL_TK_STRING ? 2 : 1, 1, 1};
            lqlParser(ps, probe, t);
            ok = p.failed != 2;
        }
        lqlParserFree(ps, free);
    }
    lql_arena_free(ar);
    return ok;
}

/* What may come next, in the order a message lists it: literals and operators, then the
 * keywords (inserted before `|>`), then what ends a statement. */
static const struct { int code; const char *text; } puncts[] = {
    {LQL_TK_STRING, "a string"}, {LQL_TK_INT, "an integer"}, {LQL_TK_FLOAT, "a decimal"},
    {LQL_TK_ID, "a name"}, {LQL_TK_STAR, "*"}, {LQL_TK_COMMA, ","}, {LQL_TK_LP, "("},
    {LQL_TK_RP, ")"}, {LQL_TK_DOT, "."}, {LQL_TK_EQ, "="}, {LQL_TK_NE, "!="},
    {LQL_TK_GT, ">"}, {LQL_TK_LT, "<"}, {LQL_TK_GE, ">="}, {LQL_TK_LE, "<="},
    {LQL_TK_MINUS, "-"}, {LQL_TK_PIPE, "|>"}, {LQL_TK_SEMI, ";"}, {0, "end of input"},
};
#define NPUNCT (sizeof puncts / sizeof puncts[0])
#define KEYWORDS_AT (NPUNCT - 3)
#define MAX_LISTED 12

/* Edit distance between a keyword and a word, ignoring case; stops counting past 3. */
static int distance(const char *a, const char *b, int nb)
{
    int na = (int)strlen(a), prev[64], cur[64];
    if (na >= 63 || nb >= 63) return 99;
    for (int j = 0; j <= nb; j++) prev[j] = j;
    for (int i = 1; i <= na; i++) {
        cur[0] = i;
        for (int j = 1; j <= nb; j++) {
            int sub = prev[j - 1] + ((a[i - 1] | 0x20) != (b[j - 1] | 0x20));
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (size_t)(nb + 1) * sizeof prev[0]);
    }
    return prev[nb];
}

/* "A, B or C" into buf (n bytes). */
static void join(const char *const *items, int m, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < m && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i == 0 ? "" : i == m - 1 ? " or " : ", ",
                                items[i]);
}

/* "expected A, B or C" into buf, listing what toks[0..k) may be followed by; empty when
 * there are too many alternatives to be useful. *hint receives the accepted keyword
 * closest to the word `near` (at most 2 edits away, shorter than half its length) or
 * NULL. */
static void expected(const toklist *tl, int k, const lql_token *near, const char **hint,
                     char *buf, size_t n)
{
    const char *items[MAX_LISTED + 1];
    int best = 3;
    *hint = NULL;
    int nitems = 0, name_ok = accepts(tl, k, LQL_TK_ID);
    int int_ok = accepts(tl, k, LQL_TK_INT), float_ok = accepts(tl, k, LQL_TK_FLOAT);
    buf[0] = 0;
    for (size_t i = 0; i < NPUNCT && nitems <= MAX_LISTED; i++) {
        int c = puncts[i].code;
        if (i == KEYWORDS_AT) {
            /* With a name expected every keyword is accepted as one: list none of them. */
            for (size_t j = 0; !name_ok && j < lql_keyword_count(); j++) {
                const char *kw = lql_keyword_at(j);
                if (!accepts(tl, k, lql_keyword_code(kw, (int)strlen(kw)))) continue;
                if (nitems <= MAX_LISTED) items[nitems++] = kw;
                int d = near ? distance(kw, near->z, near->n) : 99;
                if (d < best && d * 2 < near->n) { best = d; *hint = kw; }
            }
        }
        if (c == LQL_TK_INT || c == LQL_TK_FLOAT) {
            if (c == LQL_TK_INT && int_ok) items[nitems++] = float_ok ? "a number" : "an integer";
            if (c == LQL_TK_FLOAT && float_ok && !int_ok) items[nitems++] = "a decimal";
            continue;
        }
        if (c == LQL_TK_ID ? name_ok : accepts(tl, k, c)) items[nitems++] = puncts[i].text;
    }
    if (nitems == 0 || nitems > MAX_LISTED) return;
    const size_t at = (size_t)snprintf(buf, n, "expected ");
    join(items, nitems, buf + at, n - at);
}

/* The keywords that may start a statement at toks[k], "A, B, … or Z", into buf. */
static void starters(const toklist *tl, int k, char *buf, size_t n)
{
    const char *items[64];
    int m = 0;
    for (size_t j = 0; j < lql_keyword_count() && m < 64; j++) {
        const char *kw = lql_keyword_at(j);
        if (accepts(tl, k, lql_keyword_code(kw, (int)strlen(kw)))) items[m++] = kw;
    }
    join(items, m, buf, n);
}

static void syntax_error(lql_pctx *p, const toklist *tl, int k, const lql_token *eof)
{
    char exp[400];
    const char *hint;
    const lql_token *t = k < tl->n ? &tl->a[k] : NULL;
    int word = t && (tl->code[k] == LQL_TK_ID || lql_keyword_code(t->z, t->n) != LQL_TK_ID);
    expected(tl, k, word ? t : NULL, &hint, exp, sizeof exp);
    p->failed = 0;
    if (!t) {
        lql_p_error(p, eof, "incomplete input%s%s", exp[0] ? ": " : "", exp);
        return;
    }
    int len = t->n > 40 ? 40 : t->n;
    if (!hint && !exp[0] && (k == 0 || tl->code[k - 1] == LQL_TK_SEMI || tl->code[k - 1] == LQL_TK_PIPE)) {
        starters(tl, k, exp, sizeof exp);
        /* GENERATE reads as a statement of its own; it is INFER's clause */
        int gen = lql_keyword_code(t->z, t->n) == lql_keyword_code("GENERATE", 8);
        lql_p_error(p, t, "near \"%.*s%s\": not a statement; one starts with %s%s", len, t->z,
                    t->n > 40 ? "…" : "", exp,
                    gen ? " (GENERATE is INFER's clause: INFER \"prompt\" GENERATE n)" : "");
        return;
    }
    if (hint && !exp[0])
        lql_p_error(p, t, "near \"%.*s\": syntax error (did you mean %s?)", len, t->z, hint);
    else
        lql_p_error(p, t, "near \"%.*s%s\": %s%s%s%s", len, t->z, t->n > 40 ? "…" : "",
                    exp[0] ? exp : "syntax error", hint ? " (did you mean " : "", hint ? hint : "",
                    hint ? "?)" : "");
}

int lql_shown_len(const char *p, size_t n, int *cols)
{
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &cp);
    if (k <= 0 || (cp < 0x20 && cp != '\t') || cp == 0x7f) {
        if (cols) *cols = 4;
        return 0;
    }
    if (cols) *cols = cp == '\t' ? 1 : utf8proc_charwidth(cp) > 0 ? utf8proc_charwidth(cp) : 0;
    return (int)k;
}

/* z[0..n) as lql_shown_len shows it, into out (room for 4n + 1 bytes). */
static const char *shown(const char *z, int n, char *out)
{
    char *o = out;
    for (int i = 0; i < n;) {
        int k = lql_shown_len(z + i, (size_t)(n - i), NULL);
        if (k) { memcpy(o, z + i, (size_t)k); o += k; i += k; }
        else o += sprintf(o, "\\x%02x", (unsigned char)z[i++]);
    }
    *o = 0;
    return out;
}

int lql_parse(const char *text, size_t n, lql_arena *arena, lql_stmt **out, lql_err *e)
{
    *out = NULL;
    if (e) memset(e, 0, sizeof *e);
    const char *nul = memchr(text, 0, n);
    if (nul) {
        /* a NUL would end the text for every C string below: refuse it where it is */
        lql_span at = {1, 1, 1};
        for (const char *q = text; q < nul; q++) {
            if (*q == '\n') { at.line++; at.col = 1; }
            else at.col += ((unsigned char)*q & 0xC0) != 0x80;
        }
        return lql_errf(e, LQL_ESYNTAX, &at, "NUL byte in the statement text (LQL text cannot hold one)");
    }
    char *copy = lql_arena_strndup(arena, text, n);
    if (!copy) return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    lql_lexer lx = {copy, copy + n, 1, copy, NULL, 0};
    lql_pctx p = {arena, e, 0, NULL};
    toklist tl = {0};
    lql_token t, eof;
    int code;

    /* Lex everything first: a lexical error anywhere is reported before any syntax. */
    while ((code = lql_lex(&lx, &t)) != 0) {
        if (code == LQL_TK_ILLEGAL) {
            /* the token is one character, which may be a byte that is not UTF-8: shown
             * as the echo shows it, so every front end (json included) gets its value */
            char buf[40 * 4 + 1];
            lql_p_error(&p, &t, "unrecognized token: \"%s\"", shown(t.z, t.n > 40 ? 40 : t.n, buf));
            return -1;
        }
        if (code == LQL_TK_UNTERMINATED) {
            lql_p_error(&p, &t, "unterminated string");
            return -1;
        }
        if (push(arena, &tl, code, &t) < 0) return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    }
    eof = t;
    eof.n = 1;
    if (tl.n == 0) return 0;

    void *ps = lqlParserAlloc(lql_malloc, &p);
    if (!ps) return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    int k;
    for (k = 0; k < tl.n && !p.failed; k++) lqlParser(ps, tl.code[k], tl.a[k]);
    if (!p.failed) lqlParser(ps, 0, eof);
    else k--;                   /* the token that failed */
    lqlParserFree(ps, free);
    if (p.failed == 2) syntax_error(&p, &tl, k < tl.n ? k : tl.n, &eof);
    if (p.failed) return -1;
    if (!p.result) return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");

    /* Each statement's text runs from its keyword to the last token before the `|>`
     * that follows it (or the end / the final `;`). */
    lql_stmt *st = p.result;
    for (int i = 0; i < tl.n && st; i++) {
        int last = i + 1 >= tl.n || tl.code[i + 1] == LQL_TK_PIPE || tl.code[i + 1] == LQL_TK_SEMI;
        if (last && tl.a[i].z >= st->src) {
            st->nsrc = (size_t)(tl.a[i].z + tl.a[i].n - st->src);
            st = st->next;
        }
    }
    *out = p.result;
    return 0;
}

/* ---------------------------------------------------------------- splitting */

int lql_split(const char *text, size_t n, size_t *end)
{
    lql_lexer lx = {text, text + n, 1, text, NULL, 0};
    lql_token t;
    int code;
    *end = n;
    while ((code = lql_lex(&lx, &t)) != 0 && code != LQL_TK_UNTERMINATED) {
        if (code == LQL_TK_SEMI) {
            *end = (size_t)(t.z + 1 - text);
            return 1;
        }
    }
    return 0;
}

int lql_complete_from(const char *text, size_t n, size_t *resume)
{
    /* resume is the start of the last token seen (re-lexed: it decides completeness) or
     * of an unterminated string (which a later line may close) */
    lql_lexer lx = {text + *resume, text + n, 1, text + *resume, NULL, 0};
    lql_token t;
    int code, last = 0;
    size_t at = *resume;
    while ((code = lql_lex(&lx, &t)) != 0) {
        at = (size_t)(t.z - text);
        last = code;
        if (code == LQL_TK_UNTERMINATED) break;
    }
    *resume = at;
    return last == LQL_TK_SEMI || (last == 0 && at == 0);
}

int lql_complete(const char *text)
{
    size_t resume = 0;
    return lql_complete_from(text, strlen(text), &resume);
}

/* ---------------------------------------------------------------- completion */

int lql_next_keywords(const char *text, size_t n, void (*fn)(void *ctx, const char *kw),
                      void *ctx)
{
    lql_arena *ar = lql_arena_new();
    if (!ar) return -1;
    char *copy = lql_arena_strndup(ar, text, n);
    int count = -1;
    if (copy) {
        lql_lexer lx = {copy, copy + n, 1, copy, NULL, 0};
        toklist tl = {0};
        lql_token t;
        int code, ok = 1;
        while (ok && (code = lql_lex(&lx, &t)) != 0)
            ok = code != LQL_TK_ILLEGAL && code != LQL_TK_UNTERMINATED && push(ar, &tl, code, &t) == 0;
        /* the prefix must itself be acceptable: probe with its own last token */
        if (ok && (tl.n == 0 || accepts(&tl, tl.n - 1, tl.code[tl.n - 1])) && !accepts(&tl, tl.n, LQL_TK_ID)) {
            count = 0;
            for (size_t i = 0; i < lql_keyword_count(); i++) {
                const char *kw = lql_keyword_at(i);
                if (accepts(&tl, tl.n, lql_keyword_code(kw, (int)strlen(kw)))) {
                    fn(ctx, kw);
                    count++;
                }
            }
        }
    }
    lql_arena_free(ar);
    return count;
}
