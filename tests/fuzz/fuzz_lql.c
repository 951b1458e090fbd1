/*
 * fuzz_lql.c — libFuzzer over the language front end: the lexer and parser (lql_parse
 * into an arena), the statement splitter and the REPL's completeness check, on arbitrary
 * bytes. Nothing may crash, leak or trip a sanitizer; an error must come back with a
 * message and, for syntax errors, a position.
 *   cmake -S . -B build-fuzz -DLQL_FUZZ=ON -DCMAKE_C_COMPILER=clang
 *   cmake --build build-fuzz --target fuzz_lql && build-fuzz/fuzz_lql -max_total_time=600
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void count(void *ctx, const char *kw)
{
    (void)kw;
    ++*(int *)ctx;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* lql_split and lql_complete lex up to the NUL sentinel after the text (ast.h), as
     * every caller's buffer has it: the input is given one */
    char *z = malloc(size + 1);
    if (!z) return 0;
    memcpy(z, data, size);
    z[size] = 0;
    const char *text = z;
    size_t off = 0;
    /* statement by statement, as the shell splits a script */
    while (off < size) {
        size_t len;
        lql_split(text + off, size - off, &len);
        if (len == 0) break;
        lql_arena *ar = lql_arena_new();
        if (!ar) break;
        lql_stmt *st = NULL;
        lql_err e;
        if (lql_parse(text + off, len, ar, &st, &e) < 0) {
            if (e.msg[0] == 0) abort();                       /* an error always says why */
            if (e.code == LQL_ESYNTAX && e.line < 1) abort();  /* and where */
        } else {
            for (; st; st = st->next)                         /* touch what handlers read */
                if (st->nsrc > len || (st->arg && strlen(st->arg) > len)) abort();
        }
        lql_arena_free(ar);
        off += len;
    }
    (void)lql_complete(z);
    int seen = 0, n = lql_next_keywords((const char *)data, size < 200 ? size : 200, count, &seen);
    if (n >= 0 && n != seen) abort();
    free(z);
    return 0;
}
