/*
 * test_render.c — result sets rendered in every output mode (exact bytes), number
 * formatting, the error block with its caret, the shell's script runner (meta-commands,
 * .bail, .read nesting, exit state), the golden runner failing when it should, and the
 * generated reference docs/lql/REFERENCE.md matching the statement table.
 */
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "t.h"
#include "files.h"
#include "shell.h"
#include "render_int.h"

static lql_result *sample(void)
{
    lql_result *r = lql_result_new();
    static const lql_colspec cols[] = {{"rank", LQL_INT, 0}, {"token", LQL_TEXT, 0},
                                       {"prob", LQL_FLOAT, 4}};
    lql_table *t = lql_result_table(r, NULL, 3, cols);
    lql_row(t); lql_cell_int(t, 1); lql_cell_text(t, " mat"); lql_cell_float(t, 0.41234);
    lql_row(t); lql_cell_int(t, -2); lql_cell_text(t, "a,\"b\"\tc\nd"); lql_cell_float(t, -0.00001);
    lql_row(t); lql_cell_int(t, 3); lql_cell_null(t); lql_cell_float(t, 1.0 / 0.0);
    lql_row(t); lql_cell_int(t, 4); lql_cell_text(t, "日本"); lql_cell_float(t, 0.0 / 0.0);
    lql_result_note(r, "%d rows", 4);
    return r;
}

static void check_mode(lql_result *r, lql_outmode m, const char *want)
{
    char *got = lql_render(r, m);
    CHECK_STR(got, want);
    free(got);
}

static void modes(void)
{
    lql_result *r = sample();
    const lql_table *t = lql_result_table_at(r, 0);
    CHECK(lql_table_nrows(t) == 4 && lql_table_ncols(t) == 3);
    CHECK_STR(lql_table_cell(t, 0, 2), "0.4123");
    CHECK_STR(lql_table_cell(t, 1, 2), "0.0000");          /* negative zero loses its sign */
    CHECK_STR(lql_table_cell(t, 2, 2), "inf");
    CHECK_STR(lql_table_cell(t, 3, 2), "nan");
    CHECK(lql_table_cell_is_null(t, 2, 1) && !lql_table_cell_is_null(t, 2, 0));
    CHECK_STR(lql_table_cell(t, 9, 0), "");

    check_mode(r, LQL_OUT_TSV,
        "rank\ttoken\tprob\n"
        "1\t mat\t0.4123\n"
        "-2\ta,\"b\"\\tc\\nd\t0.0000\n"
        "3\t\tinf\n"
        "4\t日本\tnan\n"
        "-- 4 rows\n");
    check_mode(r, LQL_OUT_CSV,
        "rank,token,prob\r\n"
        "1, mat,0.4123\r\n"
        "-2,\"a,\"\"b\"\"\tc\nd\",0.0000\r\n"
        "3,,inf\r\n"
        "4,日本,nan\r\n"
        "-- 4 rows\r\n");
    check_mode(r, LQL_OUT_JSON,
        "{\"statement\": null, \"tables\": [{\"title\": null, \"columns\": [{\"name\": \"rank\", "
        "\"type\": \"int\"}, {\"name\": \"token\", \"type\": \"text\"}, {\"name\": \"prob\", "
        "\"type\": \"float\"}], \"rows\": [{\"rank\": 1, \"token\": \" mat\", \"prob\": 0.4123}, "
        "{\"rank\": -2, \"token\": \"a,\\\"b\\\"\\tc\\nd\", \"prob\": 0.0000}, {\"rank\": 3, "
        "\"token\": null, \"prob\": null}, {\"rank\": 4, \"token\": \"日本\", \"prob\": null}]}], "
        "\"notes\": [\"4 rows\"], \"error\": null}\n");
    check_mode(r, LQL_OUT_JSONL,
        "{\"rank\": 1, \"token\": \" mat\", \"prob\": 0.4123}\n"
        "{\"rank\": -2, \"token\": \"a,\\\"b\\\"\\tc\\nd\", \"prob\": 0.0000}\n"
        "{\"rank\": 3, \"token\": null, \"prob\": null}\n"
        "{\"rank\": 4, \"token\": \"日本\", \"prob\": null}\n"
        "-- 4 rows\n");
    /* table: numbers right-aligned, text left, wide characters count two columns */
    check_mode(r, LQL_OUT_TABLE,
        "rank  token          prob\n"
        "----  -----------  ------\n"
        "   1   mat         0.4123\n"
        "  -2  a,\"b\"\\tc\\nd  0.0000\n"
        "   3                  inf\n"
        "   4  日本            nan\n"
        "(4 rows)\n"
        "4 rows\n");
    lql_result_free(r);

    /* two tables, a title, invalid UTF-8 in JSON, an empty table */
    r = lql_result_new();
    static const lql_colspec c1[] = {{"k", LQL_TEXT, 0}};
    lql_table *a = lql_result_table(r, "first", 1, c1);
    lql_row(a); lql_cell_text(a, "\xff" "x");
    lql_result_table(r, NULL, 1, c1);
    check_mode(r, LQL_OUT_TSV, "-- first\nk\n\xffx\n\nk\n");
    check_mode(r, LQL_OUT_JSON, "{\"statement\": null, \"tables\": [{\"title\": \"first\", \"columns\": "
               "[{\"name\": \"k\", \"type\": \"text\"}], \"rows\": [{\"k\": \"\\ufffdx\"}]}, {\"title\": "
               "null, \"columns\": [{\"name\": \"k\", \"type\": \"text\"}], \"rows\": []}], \"notes\": [], "
               "\"error\": null}\n");
    lql_result_free(r);

    /* a short row is shown as incomplete, not silently misaligned */
    r = lql_result_new();
    static const lql_colspec c2[] = {{"a", LQL_INT, 0}, {"b", LQL_INT, 0}};
    a = lql_result_table(r, NULL, 2, c2);
    lql_row(a); lql_cell_int(a, 1);
    lql_row(a); lql_cell_int(a, 2); lql_cell_int(a, 3);
    check_mode(r, LQL_OUT_TSV, "-- out of memory: table incomplete\n");
    lql_result_free(r);

    lql_outmode m;
    CHECK(lql_outmode_parse("JSONL", &m) == 0 && m == LQL_OUT_JSONL);
    CHECK(lql_outmode_parse("xml", &m) < 0);
    CHECK_STR(lql_outmode_name(LQL_OUT_CSV), "csv");
}

static void errors(void)
{
    lql_err e = {LQL_ESYNTAX, 2, 5, 3, "near \"TOP\": expected a string"};
    char *s = lql_error_text("f.lql", "USE 'x';\nWALK TOP 3;", 1, &e);
    CHECK_STR(s, "error: f.lql:2:5: near \"TOP\": expected a string\n  WALK TOP 3;\n      ^~~\n");
    free(s);
    lql_err u = {LQL_ESYNTAX, 1, 8, 2, "x"};
    s = lql_error_text(NULL, "\tINFER \"é\" TOP", 1, &u);
    CHECK_STR(s, "error: 1:8: x\n  \tINFER \"é\" TOP\n  \t      ^~\n");
    free(s);
}

/* r rendered with o, notes inline, compared with want. */
/* Text with a NUL (a decoded token can be U+0000): every mode prints all of it, escaped
 * where the mode escapes (\0 in tsv, \x00 for people, \u0000 in json). */
static void nul_text(void)
{
    lql_result *r = lql_result_new();
    static const lql_colspec cols[] = {{"continuation", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, NULL, 1, cols);
    lql_row(t);
    lql_cell_textn(t, "a\0b", 3);
    check_mode(r, LQL_OUT_TSV, "continuation\na\\0b\n");
    check_mode(r, LQL_OUT_JSONL, "{\"continuation\": \"a\\u0000b\"}\n");
    check_mode(r, LQL_OUT_TABLE, "continuation\n------------\na\\x00b\n(1 row)\n");
    char *csv = lql_render(r, LQL_OUT_CSV);
    CHECK(csv && strcmp(csv, "continuation\r\na") == 0 && memcmp(csv + 15, "\0b\r\n", 4) == 0);
    free(csv);
    lql_result_free(r);
}

/* a column of -d digits shows a nonzero value d digits would round to zero in 3 significant
 * digits (TRACE FOR's probability of a low-ranked token) */
static void tiny_floats(void)
{
    lql_result *r = lql_result_new();
    static const lql_colspec cols[] = {{"p", LQL_FLOAT, -4}};
    lql_table *t = lql_result_table(r, NULL, 1, cols);
    static const double v[] = {1.4e-12, 0.00012, 0.00004, 0, -2.5e-7, 0.5};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        lql_row(t);
        lql_cell_float(t, v[i]);
    }
    check_mode(r, LQL_OUT_TABLE, "        p\n---------\n 1.40e-12\n   0.0001\n 4.00e-05\n"
                                 "   0.0000\n-2.50e-07\n   0.5000\n(6 rows)\n");
    lql_result_free(r);
}

/* a json row's keys are unique even when two columns share a name (SELECT token, TOKEN) */
static void same_names(void)
{
    lql_result *r = lql_result_new();
    static const lql_colspec cols[] = {{"token", LQL_TEXT, 0}, {"token", LQL_TEXT, 0},
                                       {"n", LQL_INT, 0}, {"token", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, NULL, 4, cols);
    lql_row(t);
    lql_cell_text(t, "a");
    lql_cell_text(t, "b");
    lql_cell_int(t, 1);
    lql_cell_text(t, "c");
    check_mode(r, LQL_OUT_JSONL, "{\"token\": \"a\", \"token_2\": \"b\", \"n\": 1, \"token_3\": \"c\"}\n");
    lql_result_free(r);
}

static void check_opts(const lql_result *r, lql_render_opts o, const char *want)
{
    char *got = NULL;
    size_t n;
    FILE *f = open_memstream(&got, &n);
    lql_render_to(r, &o, f, f);
    fclose(f);
    CHECK_STR(got, want);
    free(got);
}

/* The modes added for issue 10: exact floats, box, markdown, width, headers, notes apart. */
static void modes_more(void)
{
    char buf[64];
    double vals[] = {0.1, 1.0 / 3.0, 0.9604446887969971, 1e-300, -2.5e17, 0.0, 100, 1e15,
                     1e16, 1.5e-5, 0.0001, 5e-324, 1.7976931348623157e308};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        lql_format_exact(vals[i], buf, sizeof buf);
        CHECK_MSG(strtod(buf, NULL) == vals[i], "%s does not round-trip", buf);
    }
    lql_format_exact(0.1, buf, sizeof buf);
    CHECK_STR(buf, "0.1");                          /* the shortest such text */
    /* positional for decimal exponents -4 to 15, as Python's repr ("1e+02" before) */
    static const struct { double v; const char *s; } forms[] = {
        {100, "100"}, {-120, "-120"}, {1e15, "1000000000000000"}, {1e16, "1e+16"},
        {0.0001, "0.0001"}, {1.5e-5, "1.5e-05"}, {2.5e-3, "0.0025"}, {99.5, "99.5"}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        lql_format_exact(forms[i].v, buf, sizeof buf);
        CHECK_STR(buf, forms[i].s);
    }

    lql_result *r = lql_result_new();
    static const lql_colspec cols[] = {{"k", LQL_TEXT, 0}, {"p", LQL_FLOAT, 4}};
    lql_table *t = lql_result_table(r, "tt", 2, cols);
    lql_row(t); lql_cell_text(t, "a|b"); lql_cell_float(t, 1.0 / 3.0);
    lql_row(t); lql_cell_text(t, "a long cell of text"); lql_cell_float(t, 0.5);
    lql_result_note(r, "a note");
    char *o = NULL, *n = NULL;
    size_t ol, nl;
    FILE *fo = open_memstream(&o, &ol), *fn = open_memstream(&n, &nl);
    lql_render_opts ro = {LQL_OUT_TSV, 1, 0, 0};
    lql_render_to(r, &ro, fo, fn);
    fclose(fo); fclose(fn);
    CHECK_STR(o, "k\tp\na|b\t0.3333333333333333\na long cell of text\t0.5\n");
    CHECK_STR(n, "-- tt\n-- a note\n");            /* titles and notes apart from results */
    free(o); free(n);
    /* a note quoting a control character (a path with a newline) stays one line */
    lql_result *rn = lql_result_new();
    lql_result_note(rn, "journal /tmp/new\nline\x01.j");
    fo = open_memstream(&o, &ol);
    fn = open_memstream(&n, &nl);
    lql_render_to(rn, &ro, fo, fn);
    fclose(fo); fclose(fn);
    CHECK_STR(n, "-- journal /tmp/new\\nline\\x01.j\n");
    free(o); free(n);
    lql_result_free(rn);

    check_opts(r, (lql_render_opts){LQL_OUT_BOX, 1, 0, 8},
               "tt\n"
               "┌──────────┬────────┐\n"
               "│ k        │      p │\n"
               "├──────────┼────────┤\n"
               "│ a|b      │ 0.3333 │\n"
               "│ a long … │ 0.5000 │\n"
               "└──────────┴────────┘\n"
               "a note\n");
    check_opts(r, (lql_render_opts){LQL_OUT_MARKDOWN, 1, 1, 8},      /* never cut; always a header */
               "tt\n"
               "| k                   |      p |\n"
               "|---------------------|-------:|\n"
               "| a\\|b                | 0.3333 |\n"
               "| a long cell of text | 0.5000 |\n"
               "a note\n");
    check_opts(r, (lql_render_opts){LQL_OUT_TABLE, 1, 1, 5},         /* numbers never cut */
               "tt\na|b    0.3333\na lo…  0.5000\n(2 rows)\na note\n");
    lql_result_free(r);
}

/* Error echoes: a window of at most LQL_ECHO_MAX characters, control bytes escaped. */
static void echo_window(void)
{
    char line[1200];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = 0;
    memcpy(line + 600, "BAD", 3);
    lql_err e = {LQL_ESYNTAX, 1, 601, 3, "m"};
    char *s = lql_error_text(NULL, line, 1, &e);
    const char *l2 = s ? strchr(s, '\n') + 1 : "";
    const char *l3 = strchr(l2, '\n') + 1;
    CHECK((int)(l3 - l2) < LQL_ECHO_MAX + 16);      /* not 1200 characters */
    CHECK(strncmp(l2, "  …", strlen("  …")) == 0);
    CHECK(strstr(l2, "BAD") && strstr(l2, "…\n"));
    CHECK((size_t)(strchr(l3, '^') - l3) == (size_t)(strstr(l2, "BAD") - l2) - 2);   /* "…" is 3 bytes, 1 column */
    free(s);
    lql_err c = {LQL_ESYNTAX, 1, 3, 1, "m"};
    s = lql_error_text(NULL, "a\x01" "b\x1b[2J", 1, &c);
    CHECK_STR(s, "error: 1:3: m\n  a\\x01b\\x1b[2J\n       ^\n");
    free(s);
    /* a wide character takes two columns and a combining mark none: the caret under "x"
     * stands where a terminal shows it */
    lql_err w = {LQL_ESYNTAX, 1, 6, 1, "m"};
    s = lql_error_text(NULL, "\"\xE6\x9D\xB1" "e\xCC\x81\"x", 1, &w);
    CHECK_STR(s, "error: 1:6: m\n  \"\xE6\x9D\xB1" "e\xCC\x81\"x\n       ^\n");
    free(s);
}

/* The stream reader: statements run as lines end them; BOM, `;;` and NUL. */
static void stream(void)
{
    static const char text[] = "\xEF\xBB\xBF.print a\nSHOW MODELS;;\n;\n.print \"b c\"\nSHOW\0MODELS;\n.print d\n";
    FILE *in = fmemopen((void *)text, sizeof text - 1, "r");
    char *out = NULL, *err = NULL;
    size_t no, ne;
    lql_shell sh;
    lql_shell_init(&sh);
    sh.out = open_memstream(&out, &no);
    sh.err = open_memstream(&err, &ne);
    CHECK(lql_shell_run_stream(&sh, "in.lql", in) < 0);
    fclose(in);
    fclose(sh.out); fclose(sh.err);
    sh.out = stdout;
    lql_shell_close(&sh);
    CHECK_STR(out, "a\ncontainer\tformat\tmodel\tlayers\nb c\nd\n");
    CHECK_STR(err, "error: in.lql:5:5: NUL byte in the input: LQL text cannot hold one (the statement is discarded)\n");
    free(out); free(err);

    /* .help by words: every statement they start, or the one they go on into */
    char *o2 = NULL, *e2 = NULL;
    lql_shell_init(&sh);
    sh.out = open_memstream(&o2, &no);
    sh.err = open_memstream(&e2, &ne);
    CHECK(lql_shell_run(&sh, "s", ".help SHOW\n.help rollback to\n", 1) == 0);
    fclose(sh.out); fclose(sh.err);
    sh.out = stdout;
    lql_shell_close(&sh);
    CHECK_HAS(o2, "SHOW LAYERS [range]\n");
    CHECK_HAS(o2, "SHOW HISTORY\n");
    CHECK_HAS(o2, "ROLLBACK TO n\n");
    CHECK_STR(e2, "");
    free(o2); free(e2);
}

/* Run a script through the shell; out/err captured. */
static int run(const char *script, char **out, char **err, lql_shell *keep)
{
    size_t no, ne;
    lql_shell sh;
    lql_shell_init(&sh);
    sh.out = open_memstream(out, &no);
    sh.err = open_memstream(err, &ne);
    lql_shell_run(&sh, "s.lql", script, 1);
    fclose(sh.out);
    fclose(sh.err);
    sh.out = stdout;
    int failed = sh.failed;
    if (keep) *keep = sh;
    lql_shell_close(&sh);
    return failed;
}

static void shell(void)
{
    char *out, *err;
    CHECK(run("SHOW MODELS; -- nothing bound is needed\n.mode csv\n.timer off\n", &out, &err, NULL) == 0);
    CHECK_STR(err, "");
    CHECK_HAS(out, "container\tformat\tmodel\tlayers\n");
    free(out); free(err);

    /* continue after errors by default, with positions in the file */
    CHECK(run("STATS;\n  WALK 'x' TOP;\n.mode xml\n.bogus\n.timer maybe\n.help SHOW  layers\n",
              &out, &err, NULL) == 1);
    CHECK_STR(err,
        "error: s.lql:1:1: no container bound: USE \"path\" first\n  STATS;\n  ^~~~~\n"
        "error: s.lql:2:15: near \";\": expected an integer\n    WALK 'x' TOP;\n                ^\n"
        "error: s.lql:3:1: unknown mode: \"xml\" (table, box, markdown, tsv, csv, json or jsonl)\n"
        "error: s.lql:4:1: unknown meta-command: \".bogus\" (.help lists them)\n"
        "error: s.lql:5:1: expected on or off, got \"maybe\"\n");
    CHECK_HAS(out, "SHOW LAYERS [range]\n\nOne row per layer");
    free(out); free(err);

    /* .bail on stops at the first error */
    CHECK(run(".bail on\nSTATS;\n.mode nope\n", &out, &err, NULL) == 1);
    CHECK_STR(err, "error: s.lql:2:1: no container bound: USE \"path\" first\n  STATS;\n  ^~~~~\n");
    free(out); free(err);

    /* .read nesting is capped */
    char path[] = "/tmp/lql-read-XXXXXX";
    int fd = mkstemp(path);
    char body[128];
    int len = snprintf(body, sizeof body, ".read %s\n", path);
    CHECK(fd >= 0 && write(fd, body, (size_t)len) == len);
    close(fd);
    CHECK(run(body, &out, &err, NULL) == 1);
    char want[256];
    snprintf(want, sizeof want, "error: %s:1:1: .read nested more than 16 deep\n", path);
    CHECK_STR(err, want);
    free(out); free(err);
    unlink(path);

    /* statements after .quit do not run */
    CHECK(run(".quit\nSTATS;\n", &out, &err, NULL) == 0);
    CHECK_STR(err, "");
    free(out); free(err);
}

/* A new temporary file (path is a mkstemp template, filled in) holding body; 1 when written. */
static int temp_file(char *path, const char *body)
{
    int fd = mkstemp(path);
    int ok = fd >= 0 && write(fd, body, strlen(body)) == (ssize_t)strlen(body);
    if (fd >= 0) close(fd);
    return ok;
}

/* lql_golden(path, update) with its report on stdout sent to the file out, so it stays
 * out of the test log. */
static int golden_to(const char *path, int update, const char *out)
{
    fflush(stdout);
    int saved = dup(STDOUT_FILENO), fd = open(out, O_WRONLY | O_TRUNC);
    if (fd >= 0) dup2(fd, STDOUT_FILENO);
    int rc = lql_golden(path, update);
    fflush(stdout);
    if (saved >= 0) { dup2(saved, STDOUT_FILENO); close(saved); }
    if (fd >= 0) close(fd);
    return rc;
}

static void golden_runner(void)
{
    /* a query with a wrong expected block fails, a right one passes */
    char path[] = "/tmp/lql-golden-XXXXXX";
    const char *body =
        "# runner self-test\n"
        "query\nSHOW MODELS;\n----\ncontainer\tformat\tmodel\tlayers\n\n"
        "query\nSHOW MODELS;\n----\nwrong header\n\n"
        "statement error\nSTATS;\n----\nerror: 1:1: no container bound: USE \"path\" first\n\n"
        "statement error\nSTATS;\n----\nerror: 1:1: another message\n\n"
        "statement ok\nSTATS;\n";
    CHECK(temp_file(path, body));
    /* its report goes to a file (out of the test log) and is checked */
    char rep[] = "/tmp/lql-golden-out-XXXXXX";
    temp_file(rep, "");
    CHECK(golden_to(path, 0, rep) == 1);
    char *report = lql_read_file(rep, 0, NULL);
    char want[300];
    snprintf(want, sizeof want, "%s:7: query failed\n--- expected\n+++ got\n- wrong header\n+ container\tformat\tmodel\tlayers\n", path);
    CHECK_HAS(report, want);
    snprintf(want, sizeof want, "%s:17: statement failed with a different error\n", path);
    CHECK_HAS(report, want);
    snprintf(want, sizeof want, "%s:22: statement failed: error: 1:1: no container bound", path);
    CHECK_HAS(report, want);
    CHECK_HAS(report, "\n2 passed, 3 failed\n");
    free(report);
    unlink(rep);
    unlink(path);
}

/* --update rewrites the expected blocks (keeping the blank lines between records). */
static void golden_update(void)
{
    char path[] = "/tmp/lql-update-XXXXXX";
    const char *body =
        "query\nSHOW MODELS;\n----\n\n"
        "statement error\nSTATS;\n----\nerror: 1:1: old text\n\n"
        "# end\n";
    CHECK(temp_file(path, body));
    int first = golden_to(path, 1, "/dev/null"), second = golden_to(path, 0, "/dev/null");
    CHECK(first == 1 && second == 0);
    char *got = lql_read_file(path, 0, NULL);
    CHECK_STR(got, "query\nSHOW MODELS;\n----\ncontainer\tformat\tmodel\tlayers\n\n"
                   "statement error\nSTATS;\n----\nerror: 1:1: no container bound: USE \"path\" first\n\n"
                   "# end\n");
    free(got);
    unlink(path);
}

static void reference_doc(void)
{
    char *md = lql_help_markdown();
    char *disk = lql_read_file(LQL_SOURCE_DIR "/docs/lql/REFERENCE.md", 0, NULL);
    CHECK_MSG(md && disk && strcmp(md, disk) == 0,
              "docs/lql/REFERENCE.md differs from `lql --help-markdown`: regenerate it");
    CHECK_HAS(md, "## EXPLAIN INFER\n\n```\nEXPLAIN INFER \"prompt\"");
    /* every statement kind has exactly one table entry with a handler */
    size_t nd;
    const lql_stmt_def *d = lql_stmt_defs(&nd);
    CHECK(nd == LQL_S_COUNT);
    for (size_t i = 0; i < nd; i++) {
        CHECK_MSG(d[i].handler && d[i].kind == (lql_kind)i, "%s", d[i].name);
        CHECK_STR(d[i].name, lql_kind_name(d[i].kind));
        CHECK(lql_stmt_def_find(d[i].name) == &d[i]);
    }
    CHECK(lql_stmt_def_find("explain   walk") == &d[LQL_S_EXPLAIN_WALK]);
    CHECK(lql_stmt_def_find("walks") == NULL);
    free(md);
    free(disk);
}

int main(void)
{
    /* SHOW MODELS lists the working directory: run in an empty one, so containers other
     * tests leave in the build tree cannot change the expected (empty) listing. */
    char cwd[] = "/tmp/lql-render-XXXXXX";
    if (!mkdtemp(cwd) || chdir(cwd) != 0)
        return 1;
    modes();
    nul_text();
    tiny_floats();
    same_names();
    modes_more();
    echo_window();
    stream();
    errors();
    shell();
    golden_runner();
    golden_update();
    reference_doc();
    rmdir(cwd);
    return T_DONE();
}
