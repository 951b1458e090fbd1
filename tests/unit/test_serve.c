/*
 * test_serve.c — the parts of src/serve that need no socket: every statement-table row
 * carries a class (the server decides what may run over HTTP from it), the classes the
 * issue names, the sandbox name rule, and --serve address parsing. The routes themselves
 * are exercised over loopback by tests/serve/test_serve.py and tests/serve/curl.sh.
 */
#include "interp.h"
#include "serve.h"
#include "srv_int.h"
#include "t.h"

int main(void)
{
    size_t n;
    const lql_stmt_def *d = lql_stmt_defs(&n);
    CHECK(n > 0);
    for (size_t i = 0; i < n; i++)
        CHECK_MSG(d[i].cls == LQL_CLASS_READ || d[i].cls == LQL_CLASS_EDIT ||
                  d[i].cls == LQL_CLASS_LOCAL, "%s has no statement class", d[i].name);
    /* every kind has a row, so lql_stmt_def_of never leaves a statement unclassified */
    for (int k = 0; k < LQL_S_COUNT; k++)
        CHECK_MSG(lql_stmt_def_of((lql_kind)k) != NULL, "%s has no row", lql_kind_name((lql_kind)k));
    static const char *const local[] = {"USE", "EXTRACT", "COMPILE", "COMPACT", "REPRESENT",
                                        "SHOW MODELS"};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        CHECK_MSG(lql_stmt_def_find(local[i]) && lql_stmt_def_find(local[i])->cls == LQL_CLASS_LOCAL,
                  "%s must be refused over HTTP", local[i]);
    static const char *const edit[] = {"INSERT", "DELETE", "UPDATE", "BEGIN PATCH", "SAVE PATCH",
                                       "APPLY PATCH", "REMOVE PATCH", "UNDO", "ROLLBACK"};
    for (size_t i = 0; i < sizeof edit / sizeof edit[0]; i++)
        CHECK_MSG(lql_stmt_def_find(edit[i]) && lql_stmt_def_find(edit[i])->cls == LQL_CLASS_EDIT,
                  "%s changes the overlay", edit[i]);
    CHECK(lql_stmt_def_find("INFER")->cls == LQL_CLASS_READ);

    /* decoded text holds NULs where a token decodes to one; streaming stops before a cut
     * character and before the U+FFFD run that ends the text (its bytes may yet complete a
     * character); a U+FFFD that text follows is final and goes out, with what follows */
    CHECK(srv_text_ready("a\0b", 3, 3) == 3);
    CHECK(srv_text_ready("a\0b\xEF\xBF\xBD" "c", 7, 7) == 7);
    CHECK(srv_text_ready("\xEF\xBF\xBD\0a\xEF\xBF\xBD", 8, 8) == 5);
    CHECK(srv_text_ready("\xEF\xBF\xBD\0a\xEF\xBF\xBD", 8, 5) == 5);
    CHECK(srv_text_ready("par\xEF\xBF\xBD\xEF\xBF\xBD", 9, 9) == 3);
    CHECK(srv_text_ready("\0\xC3\xA9", 3, 2) == 1);
    CHECK(srv_text_ready("\0\xC3\xA9", 3, 3) == 3);

    CHECK(srv_name_ok("a"));
    CHECK(srv_name_ok("trace_1.npy"));
    CHECK(srv_name_ok("-x.vlp"));
    CHECK(!srv_name_ok(""));
    CHECK(!srv_name_ok("."));
    CHECK(!srv_name_ok(".."));
    CHECK(!srv_name_ok(".hidden"));
    CHECK(!srv_name_ok("a/b"));
    CHECK(!srv_name_ok("a b"));
    CHECK(!srv_name_ok("caf\xc3\xa9"));
    char name[80];
    memset(name, 'x', 64);
    name[64] = 0;
    CHECK(srv_name_ok(name));
    name[64] = 'x';
    name[65] = 0;
    CHECK(!srv_name_ok(name));

    srv_opts o;
    char msg[300];
    srv_opts_default(&o);
    CHECK(strcmp(o.host, "127.0.0.1") == 0 && o.body_max == 1u << 20 && o.stmts_max == 64 &&
          o.tokens_max == 512 && o.sessions_max == 8 && o.stmt_max == 64u << 10 && o.batch_max == 8);
    CHECK(srv_parse_listen(&o, "8080", msg, sizeof msg) == 0 && o.port == 8080 &&
          strcmp(o.host, "127.0.0.1") == 0);
    CHECK(srv_parse_listen(&o, "[::1]:0", msg, sizeof msg) == 0 && o.port == 0 &&
          strcmp(o.host, "::1") == 0);
    CHECK(srv_parse_listen(&o, "0.0.0.0:9", msg, sizeof msg) == 0 && strcmp(o.host, "0.0.0.0") == 0);
    CHECK(srv_parse_listen(&o, "localhost:80", msg, sizeof msg) < 0);
    CHECK_HAS(msg, "numeric");
    CHECK(srv_parse_listen(&o, "127.0.0.1:70000", msg, sizeof msg) < 0);
    CHECK(srv_parse_listen(&o, "127.0.0.1:", msg, sizeof msg) < 0);
    CHECK(srv_parse_listen(&o, ":80", msg, sizeof msg) < 0);
    CHECK(srv_set_limit(&o, "session_ttl_s=5", msg, sizeof msg) == 0 && o.session_ttl_s == 5);
    CHECK(srv_set_limit(&o, "body_max=2048", msg, sizeof msg) == 0 && o.body_max == 2048);
    CHECK(srv_set_limit(&o, "sessions_max=65", msg, sizeof msg) < 0);
    CHECK_HAS(msg, "up to 64");
    CHECK(srv_set_limit(&o, "batch_max=1", msg, sizeof msg) == 0 && o.batch_max == 1);
    CHECK(srv_set_limit(&o, "batch_max=64", msg, sizeof msg) == 0 && o.batch_max == 64);
    CHECK(srv_set_limit(&o, "batch_max=65", msg, sizeof msg) < 0);
    CHECK_HAS(msg, "up to 64");
    CHECK(srv_set_limit(&o, "batch_max=0", msg, sizeof msg) < 0);
    CHECK(srv_set_limit(&o, "queue_max=0", msg, sizeof msg) < 0);
    CHECK(srv_set_limit(&o, "queue_max=", msg, sizeof msg) < 0);
    CHECK(srv_set_limit(&o, "queue_max=3x", msg, sizeof msg) < 0);
    CHECK(srv_set_limit(&o, "queue=3", msg, sizeof msg) < 0);
    CHECK_HAS(msg, "NAME one of");

    /* the Host header against DNS rebinding: loopback names with the bound port; a
     * non-loopback bind is also reached by any IP literal (never by another name) */
    CHECK(srv_host_allowed("127.0.0.1", 8080, "127.0.0.1:8080"));
    CHECK(srv_host_allowed("127.0.0.1", 8080, "LocalHost:8080"));
    CHECK(srv_host_allowed("::1", 8080, "[::1]:8080"));
    CHECK(!srv_host_allowed("127.0.0.1", 8080, "127.0.0.1:8081"));
    CHECK(!srv_host_allowed("127.0.0.1", 8080, "127.0.0.1:"));
    CHECK(!srv_host_allowed("127.0.0.1", 8080, "evil.example:8080"));
    CHECK(!srv_host_allowed("127.0.0.1", 8080, "192.0.2.2:8080"));
    CHECK(!srv_host_allowed("127.0.0.1", 8080, NULL));
    CHECK(!srv_host_allowed("127.0.0.1", 8080, ""));
    CHECK(srv_host_allowed("0.0.0.0", 8080, "192.0.2.2:8080"));
    CHECK(srv_host_allowed("0.0.0.0", 8080, "[fd00::2]:8080"));
    CHECK(srv_host_allowed("192.0.2.2", 80, "192.0.2.2"));
    CHECK(!srv_host_allowed("0.0.0.0", 8080, "evil.example:8080"));
    CHECK(!srv_host_allowed("0.0.0.0", 8080, "192.0.2.2:9090"));
    CHECK(!srv_host_allowed("0.0.0.0", 8080, "192.0.2:8080"));
    CHECK(!srv_host_allowed("::", 8080, "[evil]:8080"));
    CHECK(!srv_host_allowed("::", 8080, "[]:8080"));
    return T_DONE();
}
