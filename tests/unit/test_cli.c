/*
 * test_cli.c — the lql executable as a program drives it: the sqlite3-style options, the
 * json framing parsed with a real JSON parser (cJSON), notes kept off stdout in the
 * program modes, floats that round-trip, write failures, NUL / BOM / `;;` in scripts, and
 * a conversation over a FIFO (one statement written, its answer read, then the next),
 * every wait bounded so a regression fails instead of hanging the suite.
 */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "t.h"
#include "test_journal_fx.h"

#define LQL LQL_BINARY_DIR "/lql"
#define DIR LQL_BINARY_DIR "/cli-test"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) { cap = (n + 4096 + 1) * 2; buf = realloc(buf, cap); }
        size_t k = fread(buf + n, 1, 4096, f);
        n += k;
        if (k == 0) break;
    }
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* `sh -c CMD` with stdout and stderr captured; the exit status returned. It runs in an
 * empty directory: SHOW MODELS lists the working directory. */
static int sh(const char *cmd, char **out, char **err)
{
    char full[8192];
    snprintf(full, sizeof full, "cd " DIR "/empty && ( %s ) >" DIR "/out 2>" DIR "/err", cmd);
    int st = system(full);
    if (out) *out = slurp(DIR "/out");
    if (err) *err = slurp(DIR "/err");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_file(const char *path, const char *body, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(body, 1, n, f); fclose(f); }
}

static void options(void)
{
    char *out, *err;
    CHECK(sh(LQL " --version", &out, &err) == 0);
    CHECK_STR(out, "lql 0.1.0\n");
    free(out); free(err);

    /* several -c run in order; -cmd runs before them */
    CHECK(sh(LQL " -c '.print one' -c '.print two' -cmd '.print zero'", &out, &err) == 0);
    CHECK_STR(out, "zero\none\ntwo\n");
    free(out); free(err);

    /* -init runs a file first; ~/.lqlrc is read only when interactive */
    write_file(DIR "/init.lql", ".mode csv\n", 10);
    write_file(DIR "/.lqlrc", ".print from-rc\n", 15);
    CHECK(sh("HOME=" DIR " " LQL " -init " DIR "/init.lql -c 'SHOW MODELS;'", &out, &err) == 0);
    CHECK_STR(out, "container,format,model,layers\r\n");
    free(out); free(err);
    CHECK(sh("HOME=" DIR " " LQL " -c 'SHOW MODELS;'", &out, &err) == 0);
    CHECK_STR(out, "container\tformat\tmodel\tlayers\n");
    free(out); free(err);

    /* .once sends the next statement's results to a file, the one after it to stdout */
    CHECK(sh(LQL " -c '.once " DIR "/once.txt' -c 'SHOW MODELS;' -c '.print after'", &out, &err) == 0);
    CHECK_STR(out, "after\n");
    char *once = slurp(DIR "/once.txt");
    CHECK_STR(once, "container\tformat\tmodel\tlayers\n");
    free(once);
    free(out); free(err);

    /* modes and headers from the command line */
    CHECK(sh(LQL " -noheader -c 'SHOW MODELS;'", &out, &err) == 0);
    CHECK_STR(out, "");
    free(out); free(err);
    CHECK(sh(LQL " -markdown -c 'SHOW MODELS;'", &out, &err) == 0);
    CHECK_STR(out, "| container | format | model | layers |\n|-----------|--------|-------|-------:|\n");
    free(out); free(err);
    CHECK(sh(LQL " --box -c '.show'", &out, &err) == 0);
    CHECK_HAS(out, "      mode: box\n");
    free(out); free(err);

    /* a bad option is a usage error; .exit N sets the status */
    CHECK(sh(LQL " -nosuch", NULL, NULL) == 2);
    CHECK(sh(LQL " -c '.exit 3' -c '.print never'", &out, &err) == 3);
    CHECK_STR(out, "");
    free(out); free(err);

    /* -readonly refuses what writes, before it runs */
    CHECK(sh(LQL " -readonly -c 'UNDO;'", &out, &err) == 1);
    CHECK_HAS(err, "error: <command>:1:1: UNDO writes: refused in a read-only shell (-readonly)");
    free(out); free(err);
    /* the edit class comes from the statement table, as the server's read-only mode has it */
    CHECK(sh(LQL " -readonly -c 'BEGIN PATCH \"p\";'", &out, &err) == 1);
    CHECK_HAS(err, "BEGIN PATCH writes: refused in a read-only shell (-readonly)");
    free(out); free(err);
    /* TRACE writes only through SAVE: the refusal names and points at the clause */
    CHECK(sh(LQL " -readonly -c 'TRACE \"x\" SAVE \"ro.trace\";'", &out, &err) == 1);
    CHECK_HAS(err, "error: <command>:1:11: TRACE … SAVE writes: refused in a read-only shell "
                   "(-readonly)");
    free(out); free(err);

    /* -bail stops at the first failure */
    CHECK(sh(LQL " -bail -c 'STATS;' -c '.print after'", &out, &err) == 1);
    CHECK_STR(out, "");
    free(out); free(err);
}

static void failures(void)
{
    char *out, *err;
    /* write failures are errors, not a silent exit 0 */
    CHECK(sh(LQL " -c 'SHOW MODELS;' >/dev/full", &out, &err) == 1);
    CHECK_HAS(err, "cannot write results: No space left on device");
    free(out); free(err);
    CHECK(sh(LQL " -c '.output /dev/full' -c 'SHOW MODELS;'", &out, &err) == 1);
    CHECK_HAS(err, "cannot write results: No space left on device");
    free(out); free(err);

    /* a NUL byte is an error at its place; the statements around it still run */
    static const char nul[] = "SHOW MODELS;\nSHOW\0 MODELS;\nSHOW MODELS;\n";
    write_file(DIR "/nul.lql", nul, sizeof nul - 1);
    CHECK(sh(LQL " -f " DIR "/nul.lql", &out, &err) == 1);
    CHECK_STR(err, "error: " DIR "/nul.lql:2:5: NUL byte in the input: LQL text cannot hold one "
                   "(the statement is discarded)\n");
    CHECK_STR(out, "container\tformat\tmodel\tlayers\ncontainer\tformat\tmodel\tlayers\n");
    free(out); free(err);
    CHECK(sh("printf 'SHOW MODELS;\\n.print a\\0b\\n' | " LQL, &out, &err) == 1);
    CHECK_HAS(err, "error: <stdin>:2:9: NUL byte in the input");
    free(out); free(err);
    /* only the statement holding it: one before it on its line runs, and in json it has
     * its frame (a driver counts one per statement) */
    CHECK(sh("printf 'SHOW MODELS; SHOW\\0 MODELS;\\nSHOW MODELS;\\n' | " LQL " -json", &out, &err) == 1);
    CHECK_STR(err, "error: <stdin>:1:18: NUL byte in the input: LQL text cannot hold one (the statement "
                   "is discarded)\n");
    size_t frames = 0;
    for (const char *q = out; q && (q = strchr(q, '\n')); q++) frames++;
    CHECK(out && strstr(out, "\"statement\": \"SHOW MODELS\"") && frames == 3);
    CHECK_HAS(out, "\"error\": {\"message\": \"NUL byte in the input: LQL text cannot hold one (the "
                   "statement is discarded)\", \"line\": 1, \"col\": 18}");
    free(out); free(err);

    /* a byte-order mark and empty statements are accepted */
    static const char bom[] = "\xEF\xBB\xBFSHOW MODELS;;\n;\n.print ok\n";
    write_file(DIR "/bom.lql", bom, sizeof bom - 1);
    CHECK(sh(LQL " < " DIR "/bom.lql", &out, &err) == 0);
    CHECK_STR(out, "container\tformat\tmodel\tlayers\nok\n");
    CHECK_STR(err, "");
    free(out); free(err);

    /* a container argument that cannot be bound is the argument's error, not a USE the
     * user never typed echoed with a caret, and what it kept from running is said */
    CHECK(sh(LQL " /nonexistent -c 'SHOW MODELS; STATS' -c '.print x' -f " DIR "/bom.lql",
             &out, &err) == 1);
    CHECK_STR(out, "");
    CHECK_STR(err, "error: container argument '/nonexistent': cannot resolve container directory "
                   "'/nonexistent': No such file or directory\n"
                   "-- 3 statements and the script " DIR "/bom.lql not run: the container could "
                   "not be bound\n");
    free(out); free(err);

    /* a byte that is not UTF-8 is shown as \xNN in the message and the echoed line (a
     * valid multi-byte character as it is), and the caret counts its 4 columns */
    CHECK(sh("printf 'TOKENIZE \"\\303\\251\\377\" \\377;\\n' | " LQL, &out, &err) == 1);
    CHECK_STR(err, "error: <stdin>:1:15: unrecognized token: \"\\xff\"\n"
                   "  TOKENIZE \"\xc3\xa9\\xff\" \\xff;\n"
                   "                   ^~~~\n");
    free(out); free(err);

    /* a \0 escape is refused where it is, not a silently shortened string */
    CHECK(sh(LQL " -c 'TOKENIZE \"ab\\0c\";'", &out, &err) == 1);
    CHECK_HAS(err, "error: <command>:1:13: \\0 in a string: LQL strings cannot hold a NUL character");
    free(out); free(err);
}

/* Every line of text parsed as a JSON document: how many, and the i-th (NULL past the end). */
static int frames(const char *text, cJSON **f, int max)
{
    int n = 0;
    for (const char *p = text; *p && n < max;) {
        const char *e = strchr(p, '\n');
        if (!e) e = p + strlen(p);
        char *line = strndup(p, (size_t)(e - p));
        f[n] = cJSON_Parse(line);
        CHECK_MSG(f[n] != NULL, "not one JSON document: %s", line);
        free(line);
        if (f[n]) n++;
        p = *e ? e + 1 : e;
    }
    return n;
}

static const char *str_of(const cJSON *o, const char *k)
{
    return cJSON_GetStringValue(cJSON_GetObjectItem(o, k));
}

static void json_batch(void)
{
    char *out, *err;
    cJSON *f[8] = {0};
    CHECK(sh(LQL " -json -c 'SHOW MODELS; STATS; TOKENIZE \"x\" |> SHOW MODELS;;' -c 'WALK TOP;'",
             &out, &err) == 1);
    int n = frames(out, f, 8);
    CHECK(n == 4);
    if (n == 4) {
        CHECK_STR(str_of(f[0], "statement"), "SHOW MODELS");
        CHECK(cJSON_IsNull(cJSON_GetObjectItem(f[0], "error")));
        const cJSON *t0 = cJSON_GetArrayItem(cJSON_GetObjectItem(f[0], "tables"), 0);
        CHECK_STR(str_of(cJSON_GetArrayItem(cJSON_GetObjectItem(t0, "columns"), 3), "name"), "layers");
        CHECK_STR(str_of(cJSON_GetArrayItem(cJSON_GetObjectItem(t0, "columns"), 3), "type"), "int");
        const cJSON *e1 = cJSON_GetObjectItem(f[1], "error");
        CHECK_STR(str_of(e1, "message"), "no container bound: USE \"path\" first");
        CHECK(cJSON_GetObjectItem(e1, "line")->valueint == 1 && cJSON_GetObjectItem(e1, "col")->valueint == 14);
        CHECK_STR(str_of(f[2], "statement"), "TOKENIZE \"x\"");
        CHECK(!cJSON_IsNull(cJSON_GetObjectItem(f[2], "error")));
        /* a statement that does not parse is a frame too */
        CHECK_STR(str_of(f[3], "statement"), "WALK TOP");
        CHECK_STR(str_of(cJSON_GetObjectItem(f[3], "error"), "message"), "near \"TOP\": expected a string");
    }
    for (int i = 0; i < n; i++) cJSON_Delete(f[i]);
    free(out); free(err);

    /* a container argument that cannot be bound: its USE frame carries the error (no
     * position: it is no input's) and the note of what did not run */
    CHECK(sh(LQL " -json /nonexistent -c 'SHOW MODELS;' -c 'STATS'", &out, &err) == 1);
    n = frames(out, f, 8);
    CHECK(n == 1);
    if (n == 1) {
        CHECK_STR(str_of(f[0], "statement"), "USE \"/nonexistent\"");
        const cJSON *e0 = cJSON_GetObjectItem(f[0], "error");
        CHECK_STR(str_of(e0, "message"), "container argument '/nonexistent': cannot resolve "
                                         "container directory '/nonexistent': No such file or "
                                         "directory");
        CHECK(cJSON_GetObjectItem(e0, "line")->valueint == 0);
        CHECK_STR(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(f[0], "notes"), 0)),
                  "2 statements not run: the container could not be bound");
    }
    CHECK_STR(err, "error: container argument '/nonexistent': cannot resolve container directory "
                   "'/nonexistent': No such file or directory\n");
    for (int i = 0; i < n; i++) cJSON_Delete(f[i]);
    free(out); free(err);

    /* a meta-command that fails is a frame too, at its line (col 1), so a reader taking one
     * frame per line it sent does not wait forever (it wrote nothing on stdout) */
    static const char meta[] = "SHOW MODELS;\n.read /nonexistent\n.output " DIR "/no-dir/x \n"
                               ".frob\n";
    write_file(DIR "/meta.lql", meta, sizeof meta - 1);
    CHECK(sh(LQL " -json -f " DIR "/meta.lql", &out, &err) == 1);
    n = frames(out, f, 8);
    CHECK(n == 4);
    static const char *const stmt[] = {".read /nonexistent", ".output " DIR "/no-dir/x", ".frob"};
    static const char *const msg[] = {
        "cannot read \"/nonexistent\": No such file or directory",
        "cannot open \"" DIR "/no-dir/x\" for writing: No such file or directory",
        "unknown meta-command: \".frob\" (.help lists them)"};
    for (int i = 1; i < n && i < 4; i++) {
        CHECK_STR(str_of(f[i], "statement"), stmt[i - 1]);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(f[i], "tables")) == 0);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(f[i], "notes")) == 0);
        const cJSON *e = cJSON_GetObjectItem(f[i], "error");
        CHECK_STR(str_of(e, "message"), msg[i - 1]);
        CHECK(cJSON_GetObjectItem(e, "line") && cJSON_GetObjectItem(e, "line")->valueint == i + 1);
        CHECK(cJSON_GetObjectItem(e, "col") && cJSON_GetObjectItem(e, "col")->valueint == 1);
    }
    CHECK_HAS(err, "error: " DIR "/meta.lql:2:1: cannot read \"/nonexistent\"");
    for (int i = 0; i < n; i++) cJSON_Delete(f[i]);
    free(out); free(err);

    /* a meta-command that succeeds is a frame too: what it prints are its notes, a line
     * each; a .read's frame follows its statements'; after `.mode tsv` (its own answer is
     * no longer json) .print writes its text; blanks before a meta-command's '.' are allowed
     * (the REPL took them, scripts read a syntax error) */
    static const char inner[] = "SHOW MODELS;\nBOGUS;\n";
    write_file(DIR "/inner.lql", inner, sizeof inner - 1);
    static const char ok[] = ".timer off\n.print a \"b  c\"\n  .mode\n.read " DIR "/inner.lql\n"
                             ".mode tsv\n\t.print plain\n";   /* blanks may come first */
    write_file(DIR "/ok.lql", ok, sizeof ok - 1);
    CHECK(sh(LQL " -json -f " DIR "/ok.lql", &out, &err) == 1);
    char *tail = out ? strstr(out, "plain\n") : NULL;
    CHECK(tail && tail[6] == 0);
    if (tail) *tail = 0;
    n = frames(out, f, 8);
    CHECK(n == 6);
    static const char *const ok_stmt[] = {".timer off", ".print a \"b  c\"", ".mode", "SHOW MODELS",
                                          "BOGUS", ".read " DIR "/inner.lql"};
    static const char *const ok_note[] = {NULL, "a b  c", "json", NULL, NULL, NULL};
    for (int i = 0; i < n && i < 6; i++) {
        CHECK_STR(str_of(f[i], "statement"), ok_stmt[i]);
        const cJSON *notes = cJSON_GetObjectItem(f[i], "notes");
        if (ok_note[i]) {
            CHECK(cJSON_GetArraySize(notes) == 1);
            CHECK_STR(cJSON_GetStringValue(cJSON_GetArrayItem(notes, 0)), ok_note[i]);
        }
        CHECK(cJSON_IsNull(cJSON_GetObjectItem(f[i], "error")) == (i != 4));
    }
    for (int i = 0; i < n; i++) cJSON_Delete(f[i]);
    free(out); free(err);
}

/* A closed output pipe (SIGPIPE back to its default, as a shell gives it) and a file-size
 * limit are write errors with a message and exit 1, not a death by signal; COMPILE under
 * the limit leaves no temporary tree. */
static void killed_writes(const char *box)
{
    char cmd[8192], *out, *err;
    FILE *f = fopen(DIR "/long.lql", "w");
    if (f) {
        fputs("TOKENIZE \"", f);
        for (int i = 0; i < 100000; i++) fputs("a ", f);
        fputs("\";\n", f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "( perl -e '$SIG{PIPE} = \"DEFAULT\"; exec @ARGV' " LQL " -tsv "
             "'%s' -f " DIR "/long.lql 2>" DIR "/pipe.err; echo $? >" DIR "/pipe.rc ) | head -c 1",
             box);
    CHECK(sh(cmd, &out, &err) == 0);
    free(out); free(err);
    char *rc = slurp(DIR "/pipe.rc"), *perr = slurp(DIR "/pipe.err");
    CHECK_STR(rc, "1\n");
    CHECK_HAS(perr, "error: cannot write results: Broken pipe");
    free(rc); free(perr);
    snprintf(cmd, sizeof cmd, "ulimit -f 64; " LQL " -c 'USE \"%s\" JOURNAL \":memory:\"; "
             "DELETE FROM EDGES WHERE layer = 1 AND feature = 3; COMPILE CURRENT INTO VINDEX \""
             DIR "/ulimit.vindex3\";'; echo rc=$?; ls -d " DIR "/ulimit.vindex3*", box);
    sh(cmd, &out, &err);
    CHECK_HAS(out, "rc=1");
    CHECK_HAS(err, "File too large");
    CHECK_HAS(err, "No such file or directory");   /* ls: nothing left behind */
    free(out); free(err);
}

/* A FIFO where a file belongs (a segment, a patch) is refused at once, not waited on. */
static void fifos(const char *box)
{
    char cmd[8192], *out, *err;
    snprintf(cmd, sizeof cmd, "rm -rf " DIR "/fifo.vindex3 && cp -r '%s' " DIR "/fifo.vindex3 && "
             "rm " DIR "/fifo.vindex3/segments/target.decoder_stack.bin && mkfifo "
             DIR "/fifo.vindex3/segments/target.decoder_stack.bin " DIR "/p.vlp && "
             "timeout 20 " LQL " " DIR "/fifo.vindex3 -c 'STATS;'; echo rc=$?; "
             "timeout 20 " LQL " -c 'USE \"%s\" JOURNAL \":memory:\"; APPLY PATCH \"" DIR
             "/p.vlp\";'; echo rc=$?", box, box);
    sh(cmd, &out, &err);
    CHECK_HAS(err, "segment 'segments/target.decoder_stack.bin' is not a regular file");
    CHECK_HAS(err, "patch ('" DIR "/p.vlp') is not a regular file");
    CHECK(!strstr(out, "rc=124"));
    free(out); free(err);
}

/* With a real container: notes off stdout, floats that round-trip, jsonl rows. */
static void with_model(const char *box)
{
    char cmd[4096], *out, *err;
    cJSON *f[8] = {0};
    snprintf(cmd, sizeof cmd, LQL " -json '%s' -c 'INFER \"The capital of France is\" TOP 2;'", box);
    CHECK(sh(cmd, &out, &err) == 0);
    int n = frames(out, f, 8);
    double jprob = -1;
    CHECK(n == 2);
    if (n == 2) {
        CHECK_STR(str_of(f[0], "statement"), "USE \"" DIR "/tiny.vindex3\"");
        CHECK_HAS(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(f[0], "notes"), 0)), "using ");
        const cJSON *rows = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(f[1], "tables"), 0), "rows");
        CHECK(cJSON_GetArraySize(rows) == 2);
        jprob = cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 0), "prob")->valuedouble;
    }
    for (int i = 0; i < n; i++) cJSON_Delete(f[i]);
    free(out); free(err);

    /* tsv: only the table on stdout, the notes on stderr; the same exact number */
    snprintf(cmd, sizeof cmd, LQL " '%s' -c 'INFER \"The capital of France is\" TOP 2;'", box);
    CHECK(sh(cmd, &out, &err) == 0);
    CHECK(strncmp(out, "rank\ttoken\tprob\n1\t Par\t0.96", strlen("rank\ttoken\tprob\n1\t Par\t0.96")) == 0);
    CHECK(!strstr(out, "--"));
    CHECK_HAS(err, "-- using ");
    const char *p = strchr(out + 16, '\t');
    p = p ? strchr(p + 1, '\t') : NULL;
    char *end = NULL;
    double tprob = p ? strtod(p + 1, &end) : -2;
    CHECK_MSG(end && end - p - 1 > 8, "prob printed with %d characters", end ? (int)(end - p - 1) : 0);
    CHECK(tprob == jprob);          /* both the shortest round-trip text of one double */

    /* a chain is framed as `a; b` is: no blank line a tsv reader would take for a table
     * boundary between the two statements' tables */
    char *chain_out, *chain_err, *seq_out, *seq_err;
    snprintf(cmd, sizeof cmd, LQL " '%s' -c 'TOKENIZE \"a\" |> TOKENIZE \"b\";'", box);
    CHECK(sh(cmd, &chain_out, &chain_err) == 0);
    snprintf(cmd, sizeof cmd, LQL " '%s' -c 'TOKENIZE \"a\"; TOKENIZE \"b\";'", box);
    CHECK(sh(cmd, &seq_out, &seq_err) == 0);
    CHECK_STR(chain_out, seq_out);
    CHECK(!strstr(chain_out, "\n\n"));
    free(chain_out); free(chain_err); free(seq_out); free(seq_err);
    free(out); free(err);

    /* an -init file that fails is an ordinary error: the statements still run (they were
     * skipped without a word); -bail stops at a script that cannot be opened */
    write_file(DIR "/badinit.lql", "BOGUS;\n", 7);
    snprintf(cmd, sizeof cmd, LQL " -init " DIR "/badinit.lql '%s' -c 'TOKENIZE \"y\";'", box);
    CHECK(sh(cmd, &out, &err) == 1);
    CHECK_HAS(out, "\ty\n");
    free(out); free(err);
    snprintf(cmd, sizeof cmd, LQL " -bail '%s' -f " DIR "/no-such.lql -c 'TOKENIZE \"y\";'", box);
    CHECK(sh(cmd, &out, &err) == 1);
    CHECK_STR(out, "");
    free(out); free(err);

    /* jsonl: every stdout line one row object */
    snprintf(cmd, sizeof cmd, LQL " -jsonl '%s' -c 'INFER \"The capital of France is\" TOP 3;'", box);
    CHECK(sh(cmd, &out, &err) == 0);
    n = frames(out, f, 8);
    CHECK(n == 3);
    for (int i = 0; i < n; i++) {
        CHECK(cJSON_GetObjectItem(f[i], "rank")->valueint == i + 1);
        cJSON_Delete(f[i]);
    }
    free(out); free(err);
}

/* A container without tokenizer.json (the model still runs on ids): every statement that
 * needs text refuses by name with status 1, never a crash; what needs none still runs. */
static void without_tokenizer(const char *box)
{
    char cmd[4096], *out, *err;
    snprintf(cmd, sizeof cmd, "cp -r '%s' " DIR "/notok.vindex3 && rm " DIR "/notok.vindex3/tokenizer.json", box);
    CHECK(sh(cmd, NULL, NULL) == 0);
    static const char *const needs_text[] = {
        "INFER \"The capital of France is\" TOP 2;", "INFER \"Once\" GENERATE 4;",
        "EXPLAIN INFER \"Once\" TOP 1;", "TRACE \"Once\";", "WALK \"Once\" TOP 3;",
        "DESCRIBE \"France\";",
        "INSERT INTO EDGES (entity, relation, target) VALUES (\"A\", \"b\", \"C\");"};
    for (size_t i = 0; i < sizeof needs_text / sizeof *needs_text; i++) {
        snprintf(cmd, sizeof cmd, LQL " " DIR "/notok.vindex3 -c '%s'", needs_text[i]);
        CHECK_MSG(sh(cmd, &out, &err) == 1, "%s: not refused with status 1", needs_text[i]);
        CHECK_HAS(err, "tokenizer");
        CHECK(!strstr(err, "Segmentation") && !strstr(err, "runtime error"));
        free(out); free(err);
    }
    snprintf(cmd, sizeof cmd, LQL " " DIR "/notok.vindex3 -c 'SHOW LAYERS;'");
    CHECK(sh(cmd, &out, &err) == 0);
    CHECK_HAS(out, "softmax_attention");
    free(out); free(err);
    /* exports: the file the encoder copied (and hashed) gone is said so; from a checkpoint
     * that had none, nothing edited, the checkpoint export needs no tokenizer, and a GGUF
     * file carries one */
    CHECK(sh("cp -r '" LQL_FIXTURE_DIR "/models/tinyllama' " DIR "/notok-ck && rm " DIR
             "/notok-ck/tokenizer.json && " LQL_BINARY_DIR "/vindex encode " DIR "/notok-ck -o " DIR
             "/notok2.vindex3 >/dev/null", NULL, NULL) == 0);
    static const struct { const char *box, *target; int status; const char *want; } ex[] = {
        {"notok", "notok-hf\"", 1, "snapshot 'tokenizer.json' is missing"},
        {"notok2", "notok-hf\"", 0, "exported: "},
        {"notok2", "notok.gguf\" FORMAT GGUF", 1, "export gguf: the container has no tokenizer.json"}};
    for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) {
        snprintf(cmd, sizeof cmd, LQL " " DIR "/%s.vindex3 -c 'COMPILE CURRENT INTO MODEL \"" DIR "/%s;'",
                 ex[i].box, ex[i].target);
        CHECK_MSG(sh(cmd, &out, &err) == ex[i].status, "%s", cmd);
        CHECK_HAS(err, ex[i].want);
        free(out); free(err);
    }
}

/* index.json's browse.layer_bands out of range: STATS says the recorded bands are ignored
 * and shows the depth rule's, instead of replacing them without a word. */
static void bad_bands(const char *box)
{
    char cmd[4096], path[4096], *out, *err;
    snprintf(cmd, sizeof cmd, "cp -r '%s' " DIR "/bands.vindex3", box);
    CHECK(sh(cmd, NULL, NULL) == 0);
    snprintf(path, sizeof path, DIR "/bands.vindex3/index.json");
    char *text = slurp(path);
    cJSON *idx = cJSON_Parse(text);
    cJSON *lb = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(idx, "browse"),
                                                 "layer_bands");
    CHECK(cJSON_IsObject(lb));
    cJSON *r = cJSON_CreateArray();
    cJSON_AddItemToArray(r, cJSON_CreateNumber(5));
    cJSON_AddItemToArray(r, cJSON_CreateNumber(9));
    cJSON_ReplaceItemInObjectCaseSensitive(lb, "syntax", r);
    char *bad = cJSON_Print(idx);
    FILE *f = fopen(path, "wb");
    CHECK(f && bad && fputs(bad, f) >= 0);
    if (f) fclose(f);
    snprintf(cmd, sizeof cmd, LQL " " DIR "/bands.vindex3 -c 'STATS;'");
    CHECK(sh(cmd, &out, &err) == 0);
    CHECK_HAS(err, "browse.layer_bands is ignored ('syntax' [5, 9] is not a layer range in 0-3)");
    CHECK_HAS(out, "syntax\tlayers 0-");
    free(out); free(err); free(bad); free(text);
    cJSON_Delete(idx);
}

/* `vindex encode --no-down-meta`: no down_meta.bin; WALK, DESCRIBE, EXPLAIN INFER and
 * SHOW FEATURES print what they print on the container that stores it (computed on demand,
 * said in a note), STATS counts what was computed; a quantised profile's down operands give
 * none, said by WALK and refused by DESCRIBE. */
static void no_down_meta(const char *box)
{
    char cmd[4096], *out, *err, *out2, *err2;
    setenv("XDG_CACHE_HOME", DIR "/xdg-cache", 1);   /* the down-meta cache, fresh */
    unsetenv("LQL_NO_CACHE");
    CHECK(sh(LQL_BINARY_DIR "/vindex encode " TINY " -o " DIR "/nodm.vindex3 --no-down-meta",
             &out, &err) == 0);
    CHECK_HAS(out, "encoded ");
    free(out); free(err);
    struct stat st;
    CHECK(stat(DIR "/nodm.vindex3/browse/down_meta.bin", &st) != 0);
    const char *q = "WALK \"The capital of France is\" TOP 3; DESCRIBE \"France\"; "
                    "EXPLAIN INFER \"The capital of France is\" TOP 2;";
    snprintf(cmd, sizeof cmd, LQL " " DIR "/nodm.vindex3 -c '%s STATS;' 2>&1 | grep -v '^-- using'", q);
    CHECK(sh(cmd, &out, &err) == 0);
    snprintf(cmd, sizeof cmd, LQL " '%s' -c '%s' 2>&1 | grep -v '^-- using'", box, q);
    CHECK(sh(cmd, &out2, &err2) == 0);
    /* the same tables and notes, plus the on-demand notes (WALK's 12 hits: 4 layers x 3) */
    CHECK_HAS(out, "-- down-meta of 12 features computed on demand (the container stores none; "
                   "STATS counts them)\n");
    char *stats = strstr(out, "stat\tvalue");
    CHECK(stats != NULL);
    if (stats) {
        CHECK_HAS(stats, "features with down-meta\tcomputed on demand (not stored), ");
        *stats = 0;
    }
    char *kept = malloc(strlen(out) + 1), *w = kept;
    for (char *line = out, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (!strstr(line, "computed on demand"))
            w += sprintf(w, nl ? "%s\n" : "%s", line);
    }
    *w = 0;
    CHECK_STR(kept, out2);
    CHECK_HAS(out2, "Par");
    free(kept); free(out); free(err); free(out2); free(err2);
    /* a statement that reads whole layers computes them (layer 1: 768 features), but for
     * the five the first session's statements computed there, which the cache holds now */
    CHECK(sh(LQL " " DIR "/nodm.vindex3 -c 'SHOW FEATURES 1 LIMIT 3;'", &out, &err) == 0);
    snprintf(cmd, sizeof cmd, LQL " '%s' -c 'SHOW FEATURES 1 LIMIT 3;'", box);
    CHECK(sh(cmd, &out2, &err2) == 0);
    CHECK_STR(out, out2);
    CHECK_HAS(err, "-- down-meta of 768 features: 763 computed on demand, 5 read from the "
                   "down-meta cache (the container stores none; STATS counts them)\n");
    free(out); free(err); free(out2); free(err2);
    /* a later session reads them all from the cache: the same tables, nothing computed */
    snprintf(cmd, sizeof cmd, LQL " " DIR "/nodm.vindex3 -c '%s STATS;' 2>&1 | grep -v '^-- using'", q);
    CHECK(sh(cmd, &out, &err) == 0);
    CHECK_HAS(out, "-- down-meta of 12 features read from the down-meta cache (the container "
                   "stores none; STATS counts them)\n");
    CHECK_HAS(out, "so far: 0 computed, 53 read from the down-meta cache\n");
    CHECK_HAS(out, "down-meta cache\t" DIR "/xdg-cache/lql/nodm.vindex3-");
    CHECK(strstr(out, "computed on demand (the") == NULL);
    free(out); free(err);
    /* COMPILE of an insert (whose metadata needs a down-meta file) over the base without
     * one writes every feature's: the same file as compiled over the base that stores it */
    const char *ins = "INSERT INTO EDGES (entity, relation, target) VALUES (\"Atlantis\", "
                      "\"capital\", \"Poseidonia\"); COMPILE CURRENT INTO VINDEX";
    snprintf(cmd, sizeof cmd, "cp -r " DIR "/nodm.vindex3 " DIR "/nodm-e.vindex3 && cp -r '%s' "
             DIR "/box-e.vindex3 && rm -f " DIR "/box-e.vindex3.lqljournal && " LQL " " DIR
             "/nodm-e.vindex3 -c '%s \"" DIR "/nodm-c.vindex3\";' && " LQL " " DIR
             "/box-e.vindex3 -c '%s \"" DIR "/box-c.vindex3\";' && cmp " DIR
             "/nodm-c.vindex3/browse/down_meta.bin " DIR "/box-c.vindex3/browse/down_meta.bin && "
             LQL_BINARY_DIR "/vindex verify " DIR "/nodm-c.vindex3", box, ins, ins);
    CHECK(sh(cmd, &out, &err) == 0);
    CHECK_HAS(err, "5 down-meta records");
    CHECK_HAS(err, "-- compiled: the base stores no down-meta, so the compiled container's was "
                   "written whole: 0 of 4 layers carried from the base's records computed this "
                   "session or read from its down-meta cache, 4 computed\n");
    CHECK_HAS(out, "verify: ok");
    free(out); free(err);
    /* over the container whose cache holds layer 1 whole (SHOW FEATURES 1 above), then
     * every layer (a SELECT reads them all), COMPILE carries those layers' records: the same
     * file again */
    static const char *const fill[2] = {"", "SELECT * FROM FEATURES LIMIT 1;"};
    static const char *const carried[2] = {"1 of 4 layers carried", "4 of 4 layers carried"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "rm -rf " DIR "/nodm-k.vindex3 && " LQL " -c 'USE \"" DIR
                 "/nodm.vindex3\" JOURNAL \":memory:\"; %s %s \"" DIR "/nodm-k.vindex3\";' "
                 "&& cmp " DIR "/nodm-k.vindex3/browse/down_meta.bin " DIR
                 "/box-c.vindex3/browse/down_meta.bin", fill[i], ins);
        CHECK(sh(cmd, &out, &err) == 0);
        CHECK_HAS(err, carried[i]);
        free(out); free(err);
    }
    /* under a quantised profile the down operands are not the model's: no down-meta, and
     * WALK says why its token columns are empty; DESCRIBE refuses */
    CHECK(sh(LQL_BINARY_DIR "/vindex represent " DIR "/nodm.vindex3 target.decoder_stack "
             "--dtype q8_0 --profile q8", &out, &err) == 0);
    free(out); free(err);
    CHECK(sh(LQL " -c 'USE \"" DIR "/nodm.vindex3\" PROFILE \"q8\"; WALK \"The capital of France "
             "is\" TOP 1; DESCRIBE \"France\";'", &out, &err) == 1);
    CHECK_HAS(err, "-- the container has no down-meta (browse/down_meta.bin) and it cannot be "
                   "computed: down_meta: operand \"layers.0.ffn.down_proj\" is stored as q8_0; "
                   "down-meta is computed from f32, f16 or bf16 weights\n");
    CHECK_HAS(err, "error: <command>:1:");
    CHECK_HAS(out, "0\t739\t");
    free(out); free(err);
    /* nor can DIFF compare its features (a DELETE would read as unchanged): said, tensors
     * still compared; a confidence alone is not set on features that have no token */
    CHECK(sh(LQL " -c 'USE \"" DIR "/nodm.vindex3\" PROFILE \"q8\" JOURNAL \":memory:\"; DELETE "
             "FROM EDGES WHERE layer = 0 AND feature = 76; UPDATE EDGES SET confidence = 0.5 WHERE "
             "layer = 1 AND feature = 3; DIFF \"" DIR "/nodm.vindex3\" CURRENT LAYER 0;'",
             &out, &err) == 0);
    CHECK_HAS(err, "-- features not compared: side b (CURRENT): the container has no down-meta "
                   "(browse/down_meta.bin) and it cannot be computed: down_meta: operand ");
    CHECK_HAS(err, "-- 1 feature without down-meta left as it is (layer 1 feature 3): a confidence "
                   "is that of a feature's output token; SET target = \"…\" gives one; the "
                   "container has no down-meta");
    CHECK_HAS(out, "target.decoder_stack\tlayers.0.ffn.down_proj\t");
    CHECK(strstr(out, "c_a\tc_b") == NULL);
    free(out); free(err);
    /* the features NEAREST TO walks have no confidence there: null, not 0 */
    CHECK(sh(LQL " -json -c 'USE \"" DIR "/nodm.vindex3\" PROFILE \"q8\"; SELECT target, "
             "confidence FROM EDGES NEAREST TO \"France\" AT LAYER 2 LIMIT 1;'", &out, &err) == 0);
    CHECK_HAS(out, "\"rows\": [{\"target\": null, \"confidence\": null}]");
    CHECK_HAS(out, "\"notes\": [\"the container has no down-meta (browse/down_meta.bin) and it "
                   "cannot be computed: down_meta: operand ");
    free(out); free(err);
    /* under a profile whose operands are a derived bf16 copy the records would differ from
     * the checkpoint's, which the cache (one per container) holds: computed, not cached */
    CHECK(sh(LQL_BINARY_DIR "/vindex represent " DIR "/nodm.vindex3 target.decoder_stack "
             "--dtype bf16 --profile half", &out, &err) == 0);
    free(out); free(err);
    CHECK(sh(LQL " -c 'USE \"" DIR "/nodm.vindex3\" PROFILE \"half\"; WALK \"The capital of "
             "France is\" TOP 1; STATS;'", &out, &err) == 0);
    CHECK_HAS(err, "-- down-meta of 4 features computed on demand");
    CHECK_HAS(out, "down-meta cache\tnone (profile \"half\" binds a derived representation of "
                   "target.decoder_stack; its down-meta is kept for this session only)\n");
    free(out); free(err);
}

/* The edit statements on a container without down-meta print what they print on the one
 * that stores it (the base records they read computed on demand, said in notes): UPDATE's
 * and DELETE's "before" columns, COMPOSE's free slot (the layer's lowest c_score, not
 * feature 0), DIFF against the base (modified / deleted, not "added"), COMPILE's gate, DIFF
 * of the base and the compiled container, and a compiled tombstone (a zero down column:
 * no metadata, not token 0 at score 0) in a compiled container that stores none either,
 * which an UPDATE of the confidence alone leaves as it is. */
static void edits_without_down_meta(const char *box)
{
    char cmd[8192], *out[2], *err[2];
    setenv("LQL_NO_CACHE", "1", 1);   /* computed, not read back from the cache */
    CHECK(sh(LQL_BINARY_DIR "/vindex encode " TINY " -o " DIR "/nodm-ed.vindex3 --no-down-meta",
             &out[0], &err[0]) == 0);
    free(out[0]); free(err[0]);
    const char *base[2] = {box, DIR "/nodm-ed.vindex3"};
    for (int i = 0; i < 2; i++) {
        const char *b = base[i];
        snprintf(cmd, sizeof cmd, "rm -rf '%s-c' '%s-d' && " LQL " -c 'USE \"%s\" JOURNAL \":memory:\";"
                 " UPDATE EDGES SET target = \"London\", confidence = 0.5 WHERE layer = 2 AND feature = 575;"
                 " UPDATE EDGES SET confidence = 0.25 WHERE layer = 1 AND feature = 33;"
                 " DELETE FROM EDGES WHERE layer = 0 AND feature = 76;"
                 " INSERT INTO EDGES (entity, relation, target) VALUES (\"Zorbania\", \"capital\","
                 " \"London\") MODE COMPOSE;"
                 " DIFF \"%s\" CURRENT; COMPILE CURRENT INTO VINDEX \"%s-c\"; DIFF \"%s\" \"%s-c\";"
                 " USE \"%s\" JOURNAL \":memory:\"; DELETE FROM EDGES WHERE layer = 0 AND feature = 76;"
                 " COMPILE CURRENT INTO VINDEX \"%s-d\"; USE \"%s-d\" JOURNAL \":memory:\";"
                 " UPDATE EDGES SET confidence = 0.3 WHERE layer = 0 AND feature = 76; SELECT layer, feature, token, score FROM FEATURES WHERE layer = 0 AND feature >= 75"
                 " AND feature <= 77; DIFF \"%s\" CURRENT LAYER 0;' 2>&1"
                 " | grep -v -e \"computed on demand\" -e \"the base stores no down-meta\""
                 " | sed \"s|%s|BASE|g\"",
                 b, b, b, b, b, b, b, b, b, b, b, b);
        CHECK(sh(cmd, &out[i], &err[i]) == 0);
    }
    CHECK_STR(out[1], out[0]);
    CHECK_HAS(out[0], "layer\tfeature\tbefore\tafter\tconfidence\n2\t575\twhich\tLondon\t0.5\n");
    CHECK_HAS(out[0], "0\t76\tpar\t\t0.19681322574615479\t0\tdeleted\n");
    /* the score before is a stored f32 dot of the host's kernels: 0.2177315354347229 with
     * AVX-512, 0.2177315503358841 on an AVX2-only Zen 3 */
    {
        int found = 0;
        for (const char *l = strstr(out[0], "\n1\t33\ted\ted\t"); l && !found;
             l = strstr(l + 1, "\n1\t33\ted\ted\t")) {
            char *end = NULL;
            const double c = strtod(l + strlen("\n1\t33\ted\ted\t"), &end);
            found = fabs(c - 0.2177315354347229) < 1e-6 && !strncmp(end, "\t0.25\tmodified\n", 15);
        }
        CHECK_MSG(found, "feature 1/33 not listed as modified from 0.2177315 to 0.25: %s", out[0]);
    }
    CHECK_HAS(out[0], "-- compiled: BASE-c");
    /* a confidence alone on the compiled tombstone: it has no token to score (token 0 was
     * invented before) */
    CHECK_HAS(out[0], "-- 1 feature without down-meta left as it is (layer 0 feature 76): a "
                      "confidence is that of a feature's output token; SET target = \"…\" gives "
                      "one\n-- nothing updated\n");
    CHECK_HAS(out[0], "0\t75\tHerbert\t0.2440500408411026\n0\t77\tTorvalds\t");
    CHECK_HAS(out[0], "0\t76\tpar\t\t0.19681322574615479\t0\tremoved\n");
    CHECK(strstr(out[0], "added") == NULL && strstr(out[0], "error") == NULL);
    struct stat st;
    CHECK(stat(DIR "/nodm-ed.vindex3-d/browse/down_meta.bin", &st) != 0);
    for (int i = 0; i < 2; i++) {
        free(out[i]); free(err[i]);
    }
    unsetenv("LQL_NO_CACHE");
}

/* A refused clause or output file is refused before anything runs: status 1 and nothing on
 * stdout, never a printed result followed by the error. */
static void refused_first(const char *box)
{
    static const char *const bad[] = {
        "INFER \"abc\" TOP 2 GENERATE 0;", "INFER \"abc\" TOP 2 GENERATE 3 SEED 1;",
        "INFER \"abc\" TOP 2 GENERATE 300;", "EXPLAIN INFER \"abc\" TOP 1 LAYERS 5-6;",
        "DIFF CURRENT CURRENT INTO PATCH \"" DIR "/tiny.vindex3/index.json\";"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char cmd[4096], *out, *err;
        snprintf(cmd, sizeof cmd, LQL " -c 'USE \"%s\" JOURNAL \":memory:\";' -c '%s'", box,
                 bad[i]);
        CHECK_MSG(sh(cmd, &out, &err) == 1, "%s: not refused with status 1", bad[i]);
        CHECK_MSG(!*out, "%s: printed before its refusal: %s", bad[i], out);
        CHECK_HAS(err, "error: ");
        free(out); free(err);
    }
}

/* The exit status of child pid, waiting at most ms (then it is killed: -1). */
static int wait_bounded(pid_t pid, int ms)
{
    int st;
    for (int t = 0; t < ms; t += 50) {
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        struct timespec d = {0, 50000000};
        nanosleep(&d, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* Read one line from fd within ms milliseconds into buf; its length, or -1. */
static int read_line(int fd, char *buf, size_t n, int ms)
{
    size_t k = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (k + 1 < n) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        int left = ms - (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd pf = {fd, POLLIN, 0};
        if (left <= 0 || poll(&pf, 1, left) <= 0) return -1;
        ssize_t r = read(fd, buf + k, 1);
        if (r <= 0) return -1;
        if (buf[k++] == '\n') break;
    }
    buf[k] = 0;
    return (int)k;
}

/* lql box (`lql -json box` when json) reading the FIFO fifo (made here): its pid, *w the
 * FIFO's write end and *r the read end of the child's stream fd (stdout, or stderr with
 * stdout sent to /dev/null). */
static pid_t lql_on_fifo_fd(const char *fifo, const char *box, int json, int fd, int *w,
                            int *r)
{
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    int outp[2];
    CHECK(pipe(outp) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        int in = open(fifo, O_RDONLY);
        dup2(in, STDIN_FILENO);
        if (fd == STDERR_FILENO)
            dup2(open("/dev/null", O_WRONLY), STDOUT_FILENO);
        dup2(outp[1], fd);
        close(outp[0]);
        if (json)
            execl(LQL, "lql", "-json", box, (char *)NULL);
        else
            execl(LQL, "lql", box, (char *)NULL);
        _exit(127);
    }
    close(outp[1]);
    *w = open(fifo, O_WRONLY);
    *r = outp[0];
    return pid;
}

/* `lql -json box` on the FIFO, *r its stdout. */
static pid_t lql_on_fifo(const char *fifo, const char *box, int *w, int *r)
{
    return lql_on_fifo_fd(fifo, box, 1, STDOUT_FILENO, w, r);
}

/* A Ctrl-C during the last statement of a run, one that never polls it (a long
 * TOKENIZE), is not lost: the run exits 1 and says so (it exited 0). */
static void interrupt_last(const char *box)
{
    char fifo[] = DIR "/intr.fifo", line[512];
    int w, errr;
    pid_t pid = lql_on_fifo_fd(fifo, box, 0, STDERR_FILENO, &w, &errr);
    /* the container bound: the handlers are in place and stdin is read next */
    int got;
    while ((got = read_line(errr, line, sizeof line, 60000)) > 0 && !strstr(line, "-- using "))
        ;   /* the journal's notes come first */
    CHECK(got > 0);
    size_t n = 1000000;
    char *stmt = malloc(n + 16);
    memcpy(stmt, "TOKENIZE \"", 10);
    memset(stmt + 10, 'a', n);
    memcpy(stmt + 10 + n, "\";\n", 3);
    CHECK(write(w, stmt, n + 13) == (ssize_t)(n + 13));
    free(stmt);
    close(w);
    struct timespec d = {0, 100000000};
    nanosleep(&d, NULL);
    kill(pid, SIGINT);
    char all[2048] = "";
    while (read_line(errr, line, sizeof line, 120000) > 0)
        if (strlen(all) + strlen(line) < sizeof all) strcat(all, line);
    CHECK(wait_bounded(pid, 120000) == 1);
    CHECK_MSG(strstr(all, "cancelled"), "stderr: %s", all);
    close(errr);
    unlink(fifo);
}

/* lql with a FIFO as stdin: each statement's answer arrives before the next is written. */
static void fifo_conversation(const char *box)
{
    char fifo[] = DIR "/conv.fifo";
    int w, r;
    pid_t pid = lql_on_fifo(fifo, box, &w, &r);
    char line[1 << 16];
    /* the USE frame of the container argument comes first */
    CHECK(read_line(r, line, sizeof line, 30000) > 0);
    CHECK_HAS(line, "\"statement\": \"USE ");
    static const char *const say[] = {"TOKENIZE \"Paris\";\n", "INFER \"The capital of\n",
                                      "France is\" TOP 1;\n", "STATS;\n"};
    static const char *const want[] = {"\"statement\": \"TOKENIZE \\\"Paris\\\"\"", NULL,
                                       "\"statement\": \"INFER \\\"The capital of\\nFrance is\\\" TOP 1\", \"tables\"",
                                       "\"statement\": \"STATS\""};
    for (int i = 0; i < 4; i++) {
        CHECK(write(w, say[i], strlen(say[i])) == (ssize_t)strlen(say[i]));
        if (!want[i]) continue;         /* an unfinished statement: no answer yet */
        int got = read_line(r, line, sizeof line, 30000);
        CHECK_MSG(got > 0, "no answer to %s within 30 s", say[i]);
        if (got > 0) CHECK_HAS(line, want[i]);
    }
    close(w);
    /* end of input: lql exits */
    CHECK(wait_bounded(pid, 30000) == 0);
    close(r);

    /* an edit answered is journaled: lql killed right after answering it (as a pipeline
     * interrupted as a whole would be) still leaves it in the history */
    pid = lql_on_fifo(fifo, box, &w, &r);
    CHECK(read_line(r, line, sizeof line, 30000) > 0);          /* USE */
    static const char del[] = "DELETE FROM EDGES WHERE layer = 1 AND feature = 7;\n";
    CHECK(write(w, del, sizeof del - 1) == (ssize_t)(sizeof del - 1));
    CHECK(read_line(r, line, sizeof line, 30000) > 0);
    CHECK_HAS(line, "\"error\": null");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(w);
    close(r);
    char cmd[4096], *out, *err;
    snprintf(cmd, sizeof cmd, LQL " '%s' -c 'SHOW HISTORY;'", box);
    CHECK(sh(cmd, &out, &err) == 0);
    CHECK_HAS(out, "DELETE FROM EDGES WHERE layer = 1 AND feature = 7\tauto-1\t1\tactive");
    free(out); free(err);
    unlink(fifo);
}

/* Read from fd until `want` appears (or ms pass) into buf; 1 when it did. */
static int read_until(int fd, char *buf, size_t n, const char *want, int ms)
{
    size_t k = 0;
    buf[0] = 0;
    for (int waited = 0; waited < ms && !strstr(buf, want);) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) { waited += 100; continue; }
        ssize_t r = read(fd, buf + k, n - k - 1);
        if (r <= 0) break;
        k += (size_t)r;
        buf[k] = 0;
        if (k + 1 >= n) k = 0;      /* keep reading; only the recent output matters */
    }
    return strstr(buf, want) != NULL;
}

/* An interactive lql on a pseudo-terminal (HOME = DIR/home, cwd DIR/empty): its pid. */
static pid_t shell_on_pty(int *master)
{
    pid_t pid = forkpty(master, NULL, NULL, NULL);
    if (pid == 0) {
        setenv("HOME", DIR "/home", 1);
        setenv("TERM", "dumb", 1);
        if (chdir(DIR "/empty") != 0) _exit(126);
        execl(LQL, "lql", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* The interactive shell on a pseudo-terminal: ~/.lqlrc runs, a multi-line statement is one
 * history entry after a restart, and Ctrl-D at `...>` runs the unfinished statement. */
static void interactive(void)
{
    mkdir(DIR "/home", 0755);
    write_file(DIR "/home/.lqlrc", ".print from-rc\n", 15);
    int master;
    pid_t pid = shell_on_pty(&master);
    CHECK(pid > 0);
    if (pid <= 0) return;
    static char buf[1 << 16];
    CHECK(read_until(master, buf, sizeof buf, "lql> ", 20000));
    CHECK_HAS(buf, "from-rc");      /* ~/.lqlrc ran before the first prompt: interactive only */
    CHECK(write(master, "SHOW\r", 5) == 5);
    CHECK(read_until(master, buf, sizeof buf, "...> ", 20000));
    CHECK(write(master, " MODELS;\r", 9) == 9);
    CHECK(read_until(master, buf, sizeof buf, "(0 rows)", 20000));
    CHECK(write(master, "SHOW MODELS\r", 12) == 12);
    CHECK(read_until(master, buf, sizeof buf, "...> ", 20000));
    CHECK(write(master, "\x04", 1) == 1);           /* Ctrl-D: runs it, then leaves */
    CHECK_MSG(read_until(master, buf, sizeof buf, "(0 rows)", 20000), "Ctrl-D at ...> did not run the statement");
    CHECK(wait_bounded(pid, 20000) == 0);
    close(master);
    char *hist = slurp(DIR "/home/.lql_history");
    CHECK_STR(hist, "SHOW\x01 MODELS;\nSHOW MODELS\n");
    free(hist);

    /* after a restart the two-line statement comes back whole: two steps back in the
     * history (Ctrl-P) are "SHOW MODELS" then "SHOW\n MODELS;", which runs; were its lines
     * two entries, the second step would be " MODELS;", a syntax error */
    pid = shell_on_pty(&master);
    CHECK(pid > 0);
    if (pid <= 0) return;
    CHECK(read_until(master, buf, sizeof buf, "lql> ", 20000));
    CHECK(write(master, "\x10\x10\r", 3) == 3);
    CHECK_MSG(read_until(master, buf, sizeof buf, "(0 rows)", 20000),
              "the recalled multi-line statement did not run: %s", buf);
    CHECK(!strstr(buf, "error"));
    /* Ctrl-D only once readline reads again: sent while the statement still prints, the
     * terminal is in cooked mode and takes it as its own end-of-file, not readline's */
    const char *rows = strstr(buf, "(0 rows)");
    if (!rows || !strstr(rows, "lql> "))
        CHECK(read_until(master, buf, sizeof buf, "lql> ", 20000));
    CHECK(write(master, "\x04", 1) == 1);
    CHECK(wait_bounded(pid, 20000) == 0);
    close(master);
}

/* Typed at a terminal, results into a pipe: stdout holds the results alone (the banner,
 * prompts and line editing go to stderr, the terminal here). */
static void typed_into_pipe(void)
{
    int p[2], master;
    CHECK(pipe(p) == 0);
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        setenv("HOME", DIR "/home", 1);
        setenv("TERM", "dumb", 1);
        if (chdir(DIR "/empty") != 0) _exit(126);
        execl(LQL, "lql", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    CHECK(pid > 0);
    if (pid <= 0) { close(p[0]); return; }
    static char buf[1 << 16];
    CHECK(read_until(master, buf, sizeof buf, "lql> ", 20000));   /* the prompt: on the terminal */
    CHECK(write(master, ".print result-only\r", 19) == 19);
    CHECK(read_until(master, buf, sizeof buf, "lql> ", 20000));
    CHECK(write(master, "\x04", 1) == 1);
    CHECK(wait_bounded(pid, 20000) == 0);
    close(master);
    ssize_t k = read(p[0], buf, sizeof buf - 1);
    buf[k > 0 ? k : 0] = 0;
    close(p[0]);
    CHECK_STR(buf, "from-rc\nresult-only\n");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    fx_rm_rf(DIR);
    mkdir(DIR, 0755);
    mkdir(DIR "/empty", 0755);
    options();
    failures();
    json_batch();
    interactive();
    typed_into_pipe();
    char box[] = DIR "/tiny.vindex3";
    if (fx_encode_tiny(box, NULL) == 0) {
        with_model(box);
        killed_writes(box);
        fifos(box);
        without_tokenizer(box);
        bad_bands(box);
        no_down_meta(box);
        edits_without_down_meta(box);
        refused_first(box);
        fifo_conversation(box);
        interrupt_last(box);
    } else {
        CHECK_MSG(0, "could not encode the tinyllama fixture");
    }
    fx_rm_rf(DIR);
    return T_DONE();
}
