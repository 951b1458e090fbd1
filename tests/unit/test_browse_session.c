/*
 * test_browse_session.c — one tokenizer per session: after USE, the browse model (WALK),
 * the engine model (INFER), TOKENIZE and the edit statements' browse view all use the
 * session's tokenizer, in either order of first use, and unbinding frees it after them
 * (ASan sees any use after free). Also the session's browse model answers SHOW LAYERS /
 * STATS with browse's counts.
 */
#include "brw_int.h"
#include "shell.h"
#include "t.h"
#include "t_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *run(lql_session *s, const char *text)
{
    char *out = NULL;
    lql_err e = {0};
    if (lql_eval(s, text, strlen(text), LQL_OUT_TSV, &out, &e) != 0) {
        fprintf(stderr, "%s: %s\n", text, e.msg);
        return NULL;
    }
    return out;
}

static void check_one(lql_session *s, const char *const *stmts, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        char *out = run(s, stmts[i]);
        CHECK_MSG(out != NULL, "%s: %s failed", what, stmts[i]);
        free(out);
    }
    CHECK_MSG(s->tok && s->model && s->browse, "%s: tokenizer, model and browse bound", what);
    if (!s->tok || !s->model || !s->browse)
        return;
    CHECK_MSG(eng_model_tokenizer(s->model) == s->tok, "%s: the model borrows the session's "
              "tokenizer", what);
    CHECK_MSG(brw_tokenizer(s->browse) == s->tok, "%s: browse borrows it", what);
    CHECK_MSG(((brw_model *)s->browse)->own_tok == NULL, "%s: browse loaded none", what);
}

int main(void)
{
    char dir[4096], use[4200];
    snprintf(dir, sizeof dir, "%s/h12-session-tiny.vindex3", LQL_BINARY_DIR);
    if (t_rm_rf(dir) != 0)
        return 1;
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.finish = brw_encode_finish;
    vx_err err = {0};
    CHECK_MSG(vx_encode(LQL_FIXTURE_DIR "/models/tinyllama", dir, &o, &err) == 0, "encode: %s",
              err.msg);
    snprintf(use, sizeof use, "USE \"%s\" JOURNAL \":memory:\";", dir);

    lql_session *s = lql_session_new();
    const char *a[] = {use, "WALK \"The capital of France is\" TOP 1;",
                       "INFER \"The capital of France is\" TOP 1;", "TOKENIZE \"Paris\";"};
    check_one(s, a, 4, "browse first");
    lql_session_unbind(s);
    CHECK(!s->tok && !s->model && !s->browse);
    const char *b[] = {use, "TOKENIZE \"Paris\";", "INFER \"The capital of France is\" TOP 1;",
                       "DELETE FROM EDGES WHERE layer = 0 AND feature = 5;",
                       "WALK \"The capital of France is\" TOP 1;"};
    check_one(s, b, 5, "tokenize, infer, edit, walk");

    /* SHOW LAYERS and STATS carry browse's per-layer counts */
    char *out = run(s, "SHOW LAYERS 0-0;");
    CHECK(out != NULL);
    if (out) {
        /* layer 0 lost feature 5 to the DELETE: 767 with down-meta */
        CHECK_HAS(out, "band\ttop_token\ttop_count\twith_meta\tgate_dtype");
        CHECK_HAS(out, "\tsyntax\t");
        CHECK_HAS(out, "0\tsoftmax_attention\t\tdense\t768\tk,v\t1024\t0\t3147776\tsyntax\t.\"\t12\t767\tf32");
    }
    free(out);
    out = run(s, "STATS;");
    CHECK(out != NULL);
    if (out) {
        CHECK_HAS(out, "features with down-meta\t3072 of 3072");   /* the base container */
        CHECK_HAS(out, "gate rows\t3145728 bytes (f32)");
        CHECK_HAS(out, "syntax\tlayers 0-0, 768 features");
        CHECK_HAS(out, "knowledge\tlayers 1-2, 1536 features");
        CHECK_HAS(out, "output\tlayers 3-3, 768 features");
        /* 4 layers x f32 k and v of 4 kv heads x 32 */
        CHECK_HAS(out, "state\t4096 bytes per position, 0 fixed");
    }
    free(out);
    lql_session_free(s);

    /* two sessions on one journal file: each statement sees what the journal holds, the
     * other session's commits included (A opened before the journal existed) */
    {
        char jp[4200], usej[8500];
        snprintf(jp, sizeof jp, "%s/h12-shared.lqljournal", LQL_BINARY_DIR);
        unlink(jp);
        snprintf(usej, sizeof usej, "USE \"%s\" JOURNAL \"%s\";", dir, jp);
        lql_session *sa = lql_session_new(), *sb = lql_session_new();
        const char *q = "INFER \"The capital of France is\" TOP 1;";
        free(run(sa, usej));
        char *before = run(sa, q);
        free(run(sb, usej));
        free(run(sb, "DELETE FROM EDGES WHERE token = \"Par\";"));
        char *in_b = run(sb, q), *in_a = run(sa, q);
        CHECK(before && in_b && in_a && strcmp(before, in_b) != 0);
        if (in_a && in_b) {
            CHECK_HAS(in_a, "was changed by another session: 3 operations replayed before this "
                            "statement");
            CHECK_HAS(in_a, strstr(in_b, "rank") ? strstr(in_b, "rank") : in_b);
        }
        free(run(sb, "UNDO;"));
        char *again = run(sa, q);
        if (again && before)
            CHECK_HAS(again, strstr(before, "rank") ? strstr(before, "rank") : before);
        free(before);
        free(in_b);
        free(in_a);
        free(again);
        /* a file a statement writes may not land inside the container (SAVE PATCH, DIFF
         * INTO PATCH and TRACE SAVE wrote into its segments/ folder) */
        char bad[8600], *out2 = NULL;
        lql_err le = {0};
        snprintf(bad, sizeof bad, "TRACE \"x\" SAVE \"%s/segments/x.trace\";", dir);
        CHECK(lql_eval(sa, bad, strlen(bad), LQL_OUT_TSV, &out2, &le) != 0);
        CHECK_HAS(le.msg, "TRACE SAVE: '");
        CHECK_HAS(le.msg, "/segments/x.trace' is inside the container '");
        free(out2);
        /* the replay note counts the KNN-store entries among its operations */
        free(run(sb, "INSERT INTO EDGES (entity, relation, target) VALUES (\"Zorbania\", "
                     "\"capital\", \"London\") MODE KNN;"));
        lql_session *sc = lql_session_new();
        char *note = run(sc, usej);
        CHECK(note != NULL);
        if (note) CHECK_HAS(note, "0 low-rank deltas, 1 KNN-store entry)");
        free(note);
        lql_session_free(sc);
        lql_session_free(sa);
        lql_session_free(sb);
        unlink(jp);
    }
    t_rm_rf(dir);
    return T_DONE();
}
