/*
 * jinja_lex.re — the chat-template lexer (re2c → build/gen/jinja_lex.c).
 *
 * Splits a template into text and tags the way Hugging Face's jinja2 environment does
 * (trim_blocks and lstrip_blocks on, keep_trailing_newline off): `{%-`/`-%}` and the output
 * forms strip whitespace on their side, a block tag eats one newline after it, spaces and
 * tabs before a block tag at the start of a line go. Inside a tag re2c scans the tokens; the
 * first word of a block tag is fused with it (TAG_IF, TAG_FOR, …) so the grammar stays
 * LALR(1). A tag or token outside the subset is an error naming it and its line.
 */
#include <stdio.h>
#include <string.h>

#include "jinja_gram.h"
#include "jinja_int.h"

typedef struct lexer {
    const char *src, *end;
    jj_arena **arena;
    jj_tok *toks;
    int n, cap;
    char *err;
    size_t errn;
    const char *lpos;           /* line_at's memo: the line of lpos (positions mostly grow) */
    int lline;
} lexer;

static int push(lexer *lx, int code, const char *s, size_t n, int64_t i, int line)
{
    if (lx->n + 1 >= lx->cap) {
        int cap = lx->cap ? lx->cap * 2 : 256;
        jj_tok *t = jj_alloc(lx->arena, (size_t)cap * sizeof *t);
        if (!t) { snprintf(lx->err, lx->errn, "out of memory"); return -1; }
        if (lx->n) memcpy(t, lx->toks, (size_t)lx->n * sizeof *t);
        lx->toks = t;
        lx->cap = cap;
    }
    lx->toks[lx->n++] = (jj_tok){code, s, n, i, line};
    return 0;
}

static int line_at(lexer *lx, const char *p)
{
    if (!lx->lpos || p < lx->lpos) { lx->lpos = lx->src; lx->lline = 1; }
    for (; lx->lpos < p; lx->lpos++) lx->lline += *lx->lpos == '\n';
    return lx->lline;
}

/* A string literal's bytes with Python's common escapes resolved. */
static const char *unquote(lexer *lx, const char *z, size_t n, size_t *out)
{
    char *s = jj_alloc(lx->arena, n + 1), *o = s;
    if (!s) return NULL;
    for (size_t k = 1; k + 1 < n; k++) {
        if (z[k] != '\\' || k + 2 >= n) { *o++ = z[k]; continue; }
        char c = z[++k];
        switch (c) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case '\\': case '\'': case '"': *o++ = c; break;
        default: *o++ = '\\'; *o++ = c; break;
        }
    }
    *o = 0;
    *out = (size_t)(o - s);
    return s;
}

static int keyword(const char *z, size_t n)
{
    static const struct { const char *w; int code; } kw[] = {
        {"and", JT_AND}, {"or", JT_OR}, {"not", JT_NOT}, {"in", JT_IN}, {"is", JT_IS},
        {"if", JT_IF}, {"else", JT_ELSE}, {"true", JT_TRUE}, {"True", JT_TRUE},
        {"false", JT_FALSE}, {"False", JT_FALSE}, {"none", JT_NONE}, {"None", JT_NONE}};
    for (size_t k = 0; k < sizeof kw / sizeof kw[0]; k++)
        if (strlen(kw[k].w) == n && !memcmp(kw[k].w, z, n)) return kw[k].code;
    return JT_NAME;
}

/* The tokens of one tag from *pp up to and including its end; sets *strip_after. */
static int tag(lexer *lx, const char **pp, int block, int *strip_after)
{
    const unsigned char *cur = (const unsigned char *)*pp, *mar, *tok;
    int first = block;
    for (;;) {
        tok = cur;
        int line = line_at(lx, (const char *)tok), code;
        if ((const char *)cur >= lx->end) {
            snprintf(lx->err, lx->errn, "line %d: the tag opened here never closes", line);
            return -1;
        }
        /*!re2c
            re2c:yyfill:enable = 0;
            re2c:define:YYCTYPE = "unsigned char";
            re2c:define:YYCURSOR = cur;
            re2c:define:YYMARKER = mar;

            name = [A-Za-z_][A-Za-z0-9_]*;
            dstr = ["] ([^"\\\x00] | "\\" [^\x00])* ["];
            sstr = ['] ([^'\\\x00] | "\\" [^\x00])* ['];

            [ \t\r\n]+  { continue; }
            "-%}"       { if (!block) goto bad; *strip_after = 1; break; }
            "%}"        { if (!block) goto bad; *strip_after = 0; break; }
            "-}}"       { if (block) goto bad; *strip_after = 1; break; }
            "}}"        { if (block) goto bad; *strip_after = 0; break; }
            name        {
                size_t n = (size_t)(cur - tok);
                const char *z = (const char *)tok;
                if (first) {
                    static const struct { const char *w; int code; } tags[] = {
                        {"if", JT_TAG_IF}, {"elif", JT_TAG_ELIF}, {"else", JT_TAG_ELSE},
                        {"endif", JT_TAG_ENDIF}, {"for", JT_TAG_FOR},
                        {"endfor", JT_TAG_ENDFOR}, {"set", JT_TAG_SET}};
                    code = 0;
                    for (size_t k = 0; k < sizeof tags / sizeof tags[0]; k++)
                        if (strlen(tags[k].w) == n && !memcmp(tags[k].w, z, n)) code = tags[k].code;
                    if (!code) {
                        snprintf(lx->err, lx->errn, "line %d: unsupported tag {%% %.*s %%}", line,
                                 (int)(n > 40 ? 40 : n), z);
                        return -1;
                    }
                    first = 0;
                    if (push(lx, code, z, n, 0, line) < 0) return -1;
                    continue;
                }
                code = keyword(z, n);
                if (push(lx, code, z, n, 0, line) < 0) return -1;
                continue;
            }
            [0-9]+      {
                int64_t v = 0;
                for (const unsigned char *q = tok; q < cur; q++) {
                    if (v > (INT64_MAX - 9) / 10) goto bad;
                    v = v * 10 + (*q - '0');
                }
                if (push(lx, JT_INT, NULL, 0, v, line) < 0) return -1;
                continue;
            }
            dstr | sstr {
                size_t n;
                const char *s = unquote(lx, (const char *)tok, (size_t)(cur - tok), &n);
                if (!s || push(lx, JT_STRING, s, n, 0, line) < 0) return -1;
                continue;
            }
            "=="  { code = JT_EQ; goto op; }
            "!="  { code = JT_NE; goto op; }
            "<="  { code = JT_LE; goto op; }
            ">="  { code = JT_GE; goto op; }
            "<"   { code = JT_LT; goto op; }
            ">"   { code = JT_GT; goto op; }
            "//"  { code = JT_FLOORDIV; goto op; }
            "+"   { code = JT_PLUS; goto op; }
            "-"   { code = JT_MINUS; goto op; }
            "*"   { code = JT_STAR; goto op; }
            "/"   { code = JT_SLASH; goto op; }
            "%"   { code = JT_PERCENT; goto op; }
            "~"   { code = JT_TILDE; goto op; }
            "("   { code = JT_LPAREN; goto op; }
            ")"   { code = JT_RPAREN; goto op; }
            "["   { code = JT_LBRACKET; goto op; }
            "]"   { code = JT_RBRACKET; goto op; }
            ","   { code = JT_COMMA; goto op; }
            "."   { code = JT_DOT; goto op; }
            ":"   { code = JT_COLON; goto op; }
            "|"   { code = JT_PIPE; goto op; }
            "="   { code = JT_ASSIGN; goto op; }
            *     { goto bad; }
        */
op:
        if (first) goto bad;
        if (push(lx, code, NULL, 0, 0, line) < 0) return -1;
        continue;
bad:
        snprintf(lx->err, lx->errn, "line %d: unsupported syntax at \"%.*s\"", line,
                 (int)((const char *)cur - (const char *)tok) > 20 ? 20
                     : (int)((const char *)cur - (const char *)tok) ? (int)((const char *)cur - (const char *)tok) : 1,
                 (const char *)tok);
        return -1;
    }
    *pp = (const char *)cur;
    return push(lx, block ? JT_BLOCK_END : JT_OUT_END, NULL, 0, 0, line_at(lx, (const char *)cur));
}

int jj_lex(const char *src, size_t n, jj_arena **a, jj_tok **out, int *nout, char *err,
           size_t errn)
{
    lexer lx = {src, src + n, a, NULL, 0, 0, err, errn, NULL, 0};
    /* keep_trailing_newline off: one final newline is not output */
    if (n && src[n - 1] == '\n') lx.end--;
    const char *p = src;
    int strip_next = 0, trim_nl = 0;
    while (p < lx.end) {
        const char *at = p;
        while (at + 1 < lx.end && !(at[0] == '{' && (at[1] == '{' || at[1] == '%' || at[1] == '#'))) at++;
        if (at + 1 >= lx.end) at = lx.end;
        const char *t0 = p, *t1 = at;
        if (strip_next) while (t0 < t1 && strchr(" \t\r\n\f\v", *t0)) t0++;
        else if (trim_nl && t0 < t1 && *t0 == '\n') t0++;
        else if (trim_nl && t1 - t0 >= 2 && t0[0] == '\r' && t0[1] == '\n') t0 += 2;
        int kind = at < lx.end ? at[1] : 0;            /* '{' output, '%' block, '#' comment */
        const char *inner = at + 2;
        if (kind && inner < lx.end && *inner == '+') {
            snprintf(err, errn, "line %d: unsupported whitespace control \"{%c+\"", line_at(&lx, at), kind);
            return -1;
        }
        if (kind && inner < lx.end && *inner == '-') {
            inner++;
            while (t1 > t0 && strchr(" \t\r\n\f\v", t1[-1])) t1--;
        } else if (kind == '%' || kind == '#') {
            /* lstrip_blocks: spaces and tabs between a line start and a block tag */
            const char *q = t1;
            while (q > src && (q[-1] == ' ' || q[-1] == '\t')) q--;
            if ((q == src || q[-1] == '\n') && q >= t0) t1 = q;
        }
        if (t1 > t0 && push(&lx, JT_TEXT, t0, (size_t)(t1 - t0), 0, line_at(&lx, t0)) < 0) return -1;
        if (!kind) break;
        if (kind == '#') {
            const char *e = inner;
            while (e + 1 < lx.end && !(e[0] == '#' && e[1] == '}')) e++;
            if (e + 1 >= lx.end) {
                snprintf(err, errn, "line %d: the comment opened here never closes", line_at(&lx, at));
                return -1;
            }
            strip_next = e > inner && e[-1] == '-';
            trim_nl = !strip_next;
            p = e + 2;
            continue;
        }
        if (kind == '{' && push(&lx, JT_OUT_BEGIN, NULL, 0, 0, line_at(&lx, at)) < 0) return -1;
        const char *q = inner;
        if (tag(&lx, &q, kind == '%', &strip_next) < 0) return -1;
        trim_nl = kind == '%' && !strip_next;
        p = q;
    }
    if (push(&lx, 0, NULL, 0, 0, line_at(&lx, lx.end)) < 0) return -1;
    *out = lx.toks;
    *nout = lx.n;
    return 0;
}
