/*
 * lql.re — the LQL lexer (re2c → build/gen/lql_lex.c).
 *
 * Turns NUL-terminated source text into tokens: spans {z, n, line, col} into the text,
 * never copies. Identifiers are looked up in the keyword table (keywords.c) so the one
 * sorted table drives the lexer, tab completion and the docs, and keywords stay
 * case-insensitive. Whitespace and `--` comments are skipped. Bad input is a token too:
 * LQL_TK_ILLEGAL for a character outside the language (spanning a whole UTF-8 sequence),
 * LQL_TK_UNTERMINATED for a quote whose string never closes (the span is the opening
 * quote); the parser driver turns them into errors. Follows ninja's lexer: no YYFILL,
 * the NUL sentinel ends the input.
 */
#include "parse_int.h"

/* Characters (not bytes) in z[0..e): columns count what the user sees. */
static int chars(const char *z, const char *e)
{
    int n = 0;
    for (; z < e; z++) n += ((unsigned char)*z & 0xC0) != 0x80;
    return n;
}

/* Advance line/col over text[0..n). */
static void advance(lql_lexer *lx, const char *z, const char *e)
{
    for (; z < e; z++) {
        if (*z == '\n') { lx->line++; lx->bol = z + 1; }
    }
}

int lql_lex(lql_lexer *lx, lql_token *t)
{
    const unsigned char *cur, *mar, *tok;
    int code;
loop:
    cur = (const unsigned char *)lx->cur;
    tok = cur;
    /*!re2c
        re2c:yyfill:enable = 0;
        re2c:define:YYCTYPE = "unsigned char";
        re2c:define:YYCURSOR = cur;
        re2c:define:YYMARKER = mar;

        ident = [A-Za-z_][A-Za-z0-9_]*;
        dstr  = ["] ([^"\\\x00] | "\\" [^\x00])* ["];
        sstr  = ['] ([^'\\\x00] | "\\" [^\x00])* ['];

        "\x00"            { if ((const char *)tok >= lx->end) { code = 0; cur = tok; goto done; }
                            code = LQL_TK_ILLEGAL; goto done; }
        [ \t\r\n\f\v]+    { advance(lx, (const char *)tok, (const char *)cur);
                            lx->cur = (const char *)cur; goto loop; }
        "--" [^\n\x00]*   { lx->cur = (const char *)cur; goto loop; }
        ident             { code = lql_keyword_code((const char *)tok, (int)(cur - tok)); goto done; }
        [0-9]+ "." [0-9]+ ([eE] [+-]? [0-9]+)? | [0-9]+ [eE] [+-]? [0-9]+
                          { code = LQL_TK_FLOAT; goto done; }
        [0-9]+            { code = LQL_TK_INT; goto done; }
        dstr | sstr       { code = LQL_TK_STRING; goto done; }
        ["']              { code = LQL_TK_UNTERMINATED; goto done; }
        "|>"              { code = LQL_TK_PIPE; goto done; }
        "*"               { code = LQL_TK_STAR; goto done; }
        ","               { code = LQL_TK_COMMA; goto done; }
        ";"               { code = LQL_TK_SEMI; goto done; }
        "("               { code = LQL_TK_LP; goto done; }
        ")"               { code = LQL_TK_RP; goto done; }
        "."               { code = LQL_TK_DOT; goto done; }
        "="               { code = LQL_TK_EQ; goto done; }
        "!="              { code = LQL_TK_NE; goto done; }
        ">"               { code = LQL_TK_GT; goto done; }
        "<"               { code = LQL_TK_LT; goto done; }
        ">="              { code = LQL_TK_GE; goto done; }
        "<="              { code = LQL_TK_LE; goto done; }
        "-"               { code = LQL_TK_MINUS; goto done; }
        *                 { while (*cur >= 0x80 && *cur < 0xC0) cur++;
                            code = LQL_TK_ILLEGAL; goto done; }
    */
done:
    t->z = (const char *)tok;
    t->n = (int)(cur - tok);
    t->line = lx->line;
    if (!lx->cpos || lx->cpos < lx->bol || lx->cpos > (const char *)tok) { lx->cpos = lx->bol; lx->ccol = 1; }
    lx->ccol += chars(lx->cpos, (const char *)tok);
    lx->cpos = (const char *)tok;
    t->col = lx->ccol;
    if (code == LQL_TK_UNTERMINATED) {
        t->n = 1;                 /* the culprit is the opening quote */
        lx->cur = lx->end;        /* nothing after it is a token */
        return code;
    }
    advance(lx, (const char *)tok, (const char *)cur);
    lx->cur = (const char *)cur;
    return code;
}
