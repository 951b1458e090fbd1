/*
 * fuzz_exec.c — libFuzzer over statements that run: the input is LQL text, split and
 * parsed as the shell does, and every statement chain that reads without writing a file
 * (class READ: what `lql --serve` lets anyone run) or edits quickly (DELETE, UPDATE, the
 * KNN and COMPOSE INSERTs, patches applied from files, UNDO, ROLLBACK; the gated and
 * MEMIT INSERTs, which fit over a corpus and take seconds here, only when
 * LQL_FUZZ_SLOW_INSERTS=1 asks for them) is executed against a
 * small model (tests/fixtures/models/families/llama-gqa: hidden 64, 3 layers, vocab 512,
 * with its tokenizer), encoded once into a scratch directory. An input that edited is
 * followed by a fresh session and journal, so each input starts from the base. A failure
 * must say why; a result must render in every mode, and its json frame must parse back.
 *   scripts/fuzz SECONDS fuzz_exec      (from the repository root, where the fixture is)
 *   LQL_FUZZ_SLOW_INSERTS=1 scripts/fuzz SECONDS fuzz_exec
 *   LQL_FUZZ_NO_DOWN_META=1 scripts/fuzz SECONDS fuzz_exec   (the model encoded without
 *                                       down-meta: browse computes it on demand)
 */
#include "ast.h"
#include "fuzz_files.h"
#include "interp.h"
#include "render.h"
#include "shell.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static lql_session *S;

/* Frees the session at exit (before fuzz_files.h removes the scratch directory). */
static void cleanup(void)
{
    lql_session_free(S);
}

static char model[PATH_MAX], journal[PATH_MAX + 16];

/* A session with the model bound, the journal gone: the base state. */
static void fresh(void)
{
    char use[PATH_MAX + 16], *out = NULL;
    lql_err e = {0};
    lql_session_free(S);
    remove(journal);
    S = lql_session_new();
    snprintf(use, sizeof use, "USE \"%s\";", model);
    if (!S || lql_eval(S, use, strlen(use), LQL_OUT_TSV, &out, &e) != 0)
        abort();
    free(out);
}

static void setup(void)
{
    const char *src = getenv("LQL_FUZZ_CHECKPOINT");
    vx_err err = {0};
    snprintf(model, sizeof model, "%s/m.vindex3", fz_scratch("fuzz_exec"));
    snprintf(journal, sizeof journal, "%s.lqljournal", model);
    /* the down-meta cache (used without stored down-meta) in the scratch, not the user's */
    setenv("XDG_CACHE_HOME", fz_scratch("fuzz_exec"), 1);
    const char *nodm = getenv("LQL_FUZZ_NO_DOWN_META");
    if (lql_encode_container(src ? src : "tests/fixtures/models/families/llama-gqa", model, -1,
                             !(nodm && !strcmp(nodm, "1")), NULL, NULL, &err) != 0) {
        fprintf(stderr, "fuzz_exec: %s (run from the repository root)\n", err.msg);
        abort();
    }
    fresh();
    atexit(cleanup);
}

/* May the harness run this chain (see the top); *edits is set when it changes the journal. */
static int runnable(const lql_stmt *st, int *edits)
{
    static int slow = -1;
    if (slow < 0) {
        const char *v = getenv("LQL_FUZZ_SLOW_INSERTS");
        slow = v && !strcmp(v, "1");
    }
    for (; st; st = st->next) {
        const lql_stmt_def *d = lql_stmt_def_of(st->kind);
        if (!d)
            return 0;
        if (d->cls == LQL_CLASS_EDIT) {
            if (st->kind == LQL_S_SAVE_PATCH ||
                (!slow && st->kind == LQL_S_INSERT && st->mode != LQL_MODE_KNN &&
                 st->mode != LQL_MODE_COMPOSE))
                return 0;
            *edits = 1;
        } else if (d->cls != LQL_CLASS_READ || lql_stmt_writes(st)) {
            return 0;
        }
    }
    return 1;
}

static void render_all(const lql_result *r, const char *stmt, size_t n)
{
    for (int m = 0; m < LQL_OUT_COUNT; m++)
        free(lql_render(r, (lql_outmode)m));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        abort();
    lql_render_opts o = {.mode = LQL_OUT_JSON, .exact = 1};
    lql_render_frame(f, r, &o, stmt, n, NULL, 0, 0);
    fclose(f);
    cJSON *j = cJSON_ParseWithLength(buf, len);
    if (!j) {
        fprintf(stderr, "json frame does not parse: %.*s\n", (int)(len < 2000 ? len : 2000), buf);
        abort();
    }
    cJSON_Delete(j);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!S)
        setup();
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;   /* the lexer's sentinel */
    size_t off = 0;
    int edited = 0;
    while (off < size) {
        size_t end;
        lql_split(text + off, size - off, &end);
        lql_arena *a = lql_arena_new();
        lql_stmt *st = NULL;
        lql_err e = {0};
        if (!a)
            break;
        if (lql_parse(text + off, end, a, &st, &e) != 0) {
            if (!e.msg[0])
                abort();
        } else if (st && runnable(st, &edited)) {
            lql_result *r = lql_result_new();
            if (!r)
                abort();
            if (lql_exec(S, st, r, &e) != 0 && !e.msg[0])
                abort();   /* a failure says why */
            render_all(r, text + off, end);
            lql_result_free(r);
        }
        lql_arena_free(a);
        off += end ? end : size - off;
    }
    free(text);
    if (edited)
        fresh();
    return 0;
}
