/*
 * meta.c — the shell's meta-commands (.help .mode .headers .width .timer .read .output
 * .once .print .show .bail .quit .exit), one
 * table driving dispatch, arity errors, `.help` and the reference docs; and the Markdown
 * reference generated from the statement and meta-command tables (lql --help-markdown).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "shell.h"

/* out: where a printing command writes its answer (sh->out, or its json frame's notes). */
typedef int (*meta_fn)(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz);

typedef struct meta_def {
    const char *name, *usage, *help;
    int min_args, max_args;
    meta_fn fn;
    int prints;     /* writes its answer to the output: in json, the lines of its frame's notes */
} meta_def;

static int on_off(const char *v, int *out, char *err, size_t errsz)
{
    if (strcasecmp(v, "on") == 0) { *out = 1; return 0; }
    if (strcasecmp(v, "off") == 0) { *out = 0; return 0; }
    snprintf(err, errsz, "expected on or off, got \"%s\"", v);
    return -1;
}

static int m_help(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz);

static int m_mode(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    if (argc == 1) { fprintf(out, "%s\n", lql_outmode_name(sh->mode)); return 0; }
    if (lql_outmode_parse(argv[1], &sh->mode) == 0) return 0;
    snprintf(err, errsz, "unknown mode: \"%s\" (table, box, markdown, tsv, csv, json or jsonl)", argv[1]);
    return -1;
}

static int m_timer(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)out; (void)argc;
    return on_off(argv[1], &sh->timer, err, errsz);
}

static int m_bail(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)out; (void)argc;
    return on_off(argv[1], &sh->bail, err, errsz);
}

static int m_headers(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)out; (void)argc;
    int on;
    if (on_off(argv[1], &on, err, errsz) < 0) return -1;
    sh->noheader = !on;
    return 0;
}

static int m_width(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)out; (void)argc;
    char *end;
    long w = strtol(argv[1], &end, 10);
    if (*end || end == argv[1] || w < 0 || w > 100000 || w == 1) {
        snprintf(err, errsz, "expected a width of 2 to 100000 columns, or 0 for no limit, got \"%s\"", argv[1]);
        return -1;
    }
    sh->width = (int)w;
    return 0;
}

/* A results file for .output / .once ("stdout": NULL). */
static int open_out(const char *name, FILE **f, char *err, size_t errsz)
{
    *f = NULL;
    if (strcmp(name, "stdout") == 0) return 0;
    *f = fopen(name, "w");
    if (!*f) { snprintf(err, errsz, "cannot open \"%s\" for writing: %s", name, strerror(errno)); return -1; }
    return 0;
}

/* Close a results file: a failed write (a full disk) is reported here. */
static int close_file(FILE *f, char *err, size_t errsz)
{
    if (!f || f == stdout || fclose(f) == 0) return 0;
    snprintf(err, errsz, "cannot write results: %s", strerror(errno));
    return -1;
}

static int m_output(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)out;
    FILE *f;
    if (open_out(argc == 2 ? argv[1] : "stdout", &f, err, errsz) < 0) return -1;
    FILE *old = sh->out;
    sh->out = f ? f : stdout;
    return close_file(old, err, errsz);
}

static int m_once(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)out; (void)argc;
    FILE *f;
    if (open_out(argv[1], &f, err, errsz) < 0) return -1;
    FILE *old = sh->once;
    sh->once = f;
    return close_file(old, err, errsz);
}

static int m_print(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)sh; (void)err; (void)errsz;
    for (int i = 1; i < argc; i++) fprintf(out, "%s%s", i > 1 ? " " : "", argv[i]);
    fputc('\n', out);
    return 0;
}

static int m_show(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)argc; (void)argv; (void)err; (void)errsz;
    fprintf(out, "%10s: %s\n", "mode", lql_outmode_name(sh->mode));
    fprintf(out, "%10s: %s\n", "headers", sh->noheader ? "off" : "on");
    if (sh->width) fprintf(out, "%10s: %d\n", "width", sh->width);
    else fprintf(out, "%10s: 0 (no limit)\n", "width");
    fprintf(out, "%10s: %s\n", "timer", sh->timer ? "on" : "off");
    fprintf(out, "%10s: %s\n", "bail", sh->bail ? "on" : "off");
    fprintf(out, "%10s: %s\n", "readonly", sh->readonly ? "on" : "off");
    fprintf(out, "%10s: %s\n", "output", sh->out == stdout ? "stdout" : "a file (.output)");
    fprintf(out, "%10s: %s\n", "container", sh->s->path ? sh->s->path : "(none: USE \"path\")");
    return 0;
}

static int m_quit(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)out; (void)argc; (void)argv; (void)err; (void)errsz;
    sh->stop = 1;
    return 0;
}

static int m_exit(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)out;
    int code = 0;
    if (argc == 2) {
        char *end;
        long v = strtol(argv[1], &end, 10);
        if (*end || end == argv[1] || v < 0 || v > 255) {
            snprintf(err, errsz, "expected an exit status 0 to 255, got \"%s\"", argv[1]);
            return -1;
        }
        code = (int)v;
    }
    sh->stop = 1;
    sh->exit_code = code;
    return 0;
}

static int m_read(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)out; (void)argc;
    if (sh->depth >= LQL_READ_DEPTH_MAX) {
        snprintf(err, errsz, ".read nested more than %d deep", LQL_READ_DEPTH_MAX);
        return -1;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        snprintf(err, errsz, "cannot read \"%s\": %s", argv[1], strerror(errno));
        return -1;
    }
    sh->depth++;
    int rc = lql_shell_run_stream(sh, argv[1], f);
    sh->depth--;
    fclose(f);
    if (sh->stop && !sh->bail && sh->exit_code < 0 && !sh->write_failed)
        sh->stop = 0;                          /* a .quit inside the file ends the file only */
    return rc < 0 ? -2 : 0;                    /* -2: failed, already reported */
}

static const meta_def metas[] = {
    {".help", ".help [STATEMENT]", "List the statements and meta-commands, or show the "
     "syntax and purpose of a statement (or of every statement starting with the words "
     "given: `.help SHOW`; a clause's keyword lists the statements that take it: `.help "
     "GENERATE`).", 0, 3, m_help, 1},
    {".mode", ".mode [MODE]", "Set (or show) the output mode: table, box, markdown, tsv, "
     "csv, json or jsonl. table is the default on a terminal, tsv otherwise (SHELL.md: "
     "Output).", 0, 1, m_mode, 1},
    {".headers", ".headers on|off", "Print the column-name line (table, box, tsv, csv; "
     "markdown always has one).", 1, 1, m_headers, 0},
    {".width", ".width N", "Cut table and box cells wider than N columns with … (0: no "
     "limit; 80 by default).", 1, 1, m_width, 0},
    {".timer", ".timer on|off", "Print each statement's elapsed time on stderr.", 1, 1, m_timer, 0},
    {".read", ".read FILE", "Run the statements in FILE (nesting up to 16 deep).", 1, 1, m_read, 0},
    {".output", ".output [FILE|stdout]", "Send results to FILE (truncated), or back to stdout.",
     0, 1, m_output, 0},
    {".once", ".once FILE", "Send the next statement's results to FILE (truncated), then "
     "back.", 1, 1, m_once, 0},
    {".print", ".print [TEXT ...]", "Print the words given (\"…\" keeps blanks) to the output.",
     0, 7, m_print, 1},
    {".show", ".show", "Show the settings: mode, headers, width, timer, bail, readonly, output, "
     "container.", 0, 0, m_show, 1},
    {".bail", ".bail on|off", "Stop at the first failed statement (batch continues by "
     "default; the exit status is non-zero either way).", 1, 1, m_bail, 0},
    {".quit", ".quit", "Leave the shell (Ctrl-D too); in a .read file, leave that file.", 0, 0, m_quit, 0},
    {".exit", ".exit [N]", "Leave the shell with exit status N (0 by default).", 0, 1, m_exit, 0},
};
#define NMETA (sizeof metas / sizeof metas[0])

/* Does a usage line hold word as one of its keywords (a whole word in capitals there, so
 * placeholders such as `n` or `prompt` never match; word compared ignoring case)? */
static int has_word(const char *usage, const char *word)
{
    static const char kw[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_";
    const size_t n = strlen(word);
    if (n == 0 || strspn(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_") != n) return 0;
    for (const char *p = usage; *p; p++) {
        const int inside = p > usage && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        if (!inside && strspn(p, kw) == n && strncasecmp(p, word, n) == 0 && !isalnum((unsigned char)p[n]))
            return 1;
    }
    return 0;
}

static int m_help(lql_shell *sh, FILE *out, int argc, char **argv, char *err, size_t errsz)
{
    (void)sh;
    size_t n;
    const lql_stmt_def *defs = lql_stmt_defs(&n);
    if (argc > 1) {
        char name[128] = "";
        for (int i = 1; i < argc; i++) {
            strncat(name, argv[i], sizeof name - strlen(name) - 2);
            if (i + 1 < argc) strcat(name, " ");
        }
        const lql_stmt_def *d = lql_stmt_def_find(name);
        if (d) { fprintf(out, "%s\n\n%s\n", d->usage, d->help); return 0; }
        /* the words may start several statements (`.help SHOW`) or go on into the
         * syntax (`.help ROLLBACK TO`): show each statement they fit */
        int found = 0;
        for (size_t i = 0; i < n; i++) {
            size_t dl = strlen(defs[i].name), nl = strlen(name);
            int fits = nl < dl ? strncasecmp(defs[i].name, name, nl) == 0 && defs[i].name[nl] == ' '
                               : strncasecmp(defs[i].name, name, dl) == 0 && (name[dl] == ' ' || !name[dl]);
            if (fits) fprintf(out, "%s%s\n\n%s\n", found++ ? "\n" : "", defs[i].usage, defs[i].help);
        }
        if (found) return 0;
        for (size_t i = 0; i < NMETA; i++)
            if (strcasecmp(name, metas[i].name) == 0 || strcasecmp(name, metas[i].name + 1) == 0) {
                fprintf(out, "%s\n\n%s\n", metas[i].usage, metas[i].help);
                return 0;
            }
        /* a clause's keyword (`.help GENERATE`, `.help LIMIT`): the statements that take it */
        for (size_t i = 0; i < n; i++)
            if (has_word(defs[i].usage, name)) {
                if (!found++) fprintf(out, "\"%s\" starts no statement; it is part of:\n", name);
                fprintf(out, "  %s\n", defs[i].usage);
            }
        if (found) return 0;
        snprintf(err, errsz, "no such statement or meta-command: \"%s\"", name);
        return -1;
    }
    fprintf(out, "Statements (end each with ;  .help NAME for details):\n");
    for (size_t i = 0; i < n; i++) fprintf(out, "  %s\n", defs[i].usage);
    fprintf(out, "Meta-commands (at the start of a line):\n");
    for (size_t i = 0; i < NMETA; i++) fprintf(out, "  %-24s %s\n", metas[i].usage, metas[i].help);
    return 0;
}

/* line without its trailing blanks: a frame's statement. */
static size_t trimmed_len(const char *line)
{
    size_t n = strlen(line);
    while (n && strchr(" \t\r\n", line[n - 1])) n--;
    return n;
}

/* Runs d. In json mode (as the command leaves it) it is answered by one frame on the output,
 * as a statement is, so a program reading one frame per line it sent never waits on a
 * meta-command (`.timer on` printed nothing, `.print` a line that is not json): the text a
 * printing command writes becomes the frame's notes, a line each; a `.read`'s frame follows
 * the frames of the statements it ran. A failure's frame is lql_meta's. */
static int json_answer(lql_shell *sh, const meta_def *d, int argc, char **argv, char *err,
                       size_t errsz, const char *line, int lineno)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = NULL;
    if (sh->mode == LQL_OUT_JSON && d->prints && !(mem = open_memstream(&text, &len))) {
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    int rc = d->fn(sh, mem ? mem : sh->out, argc, argv, err, errsz);
    if (mem) {
        if (fclose(mem) != 0 && rc == 0) {
            snprintf(err, errsz, "out of memory");
            rc = -1;
        }
    }
    if (rc != -1 && sh->mode == LQL_OUT_JSON) {
        lql_result *r = lql_result_new();
        if (!r) {
            free(text);
            snprintf(err, errsz, "out of memory");
            return -1;
        }
        for (const char *p = text, *end = text + len; p < end;) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            int k = (int)((nl ? nl : end) - p);
            lql_result_note(r, "%.*s", k, p);
            p += k + 1;
        }
        lql_shell_frame(sh, r, line, trimmed_len(line), NULL, lineno, 1);
        lql_result_free(r);
    }
    free(text);
    return rc;
}

size_t lql_meta_count(void) { return NMETA; }
const char *lql_meta_name(size_t i) { return i < NMETA ? metas[i].name : NULL; }

int lql_meta(lql_shell *sh, const char *line, const char *label, int lineno)
{
    char *copy = strdup(line), *argv[8];
    int argc = 0;
    if (!copy) return -1;
    /* words separated by blanks; "…" groups a word with spaces */
    for (char *p = copy; *p && argc < 8;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        if (*p == '"') {
            argv[argc++] = ++p;
            while (*p && *p != '"') p++;
        } else {
            argv[argc++] = p;
            while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
        }
        if (*p) *p++ = 0;
    }
    char err[300] = "";
    int rc = -1;
    const meta_def *d = NULL;
    for (size_t i = 0; argc && i < NMETA; i++)
        if (strcmp(argv[0], metas[i].name) == 0) d = &metas[i];
    if (!d) snprintf(err, sizeof err, "unknown meta-command: \"%s\" (.help lists them)", argc ? argv[0] : line);
    else if (argc - 1 < d->min_args || argc - 1 > d->max_args)
        snprintf(err, sizeof err, "usage: %s", d->usage);
    else rc = json_answer(sh, d, argc, argv, err, sizeof err, line, lineno);
    if (rc >= 0 && sh->out && lql_shell_flush(sh, sh->out) < 0) rc = -2;
    if (rc == -1 && sh->plain_errors) fprintf(sh->err, "error: %d:1: %s\n", lineno, err);
    else if (rc == -1) fprintf(sh->err, "error: %s:%d:1: %s\n", label, lineno, err);
    if (rc == -1)
        lql_shell_frame(sh, NULL, line, trimmed_len(line), err, lineno, 1);
    free(copy);
    return rc < 0 ? -1 : 0;
}

/* ---------------------------------------------------------------- reference docs */

char *lql_help_markdown(void)
{
    char *buf = NULL;
    size_t len = 0, n;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    const lql_stmt_def *defs = lql_stmt_defs(&n);
    fprintf(f, "# LQL statement reference\n\n"
               "Generated by `lql --help-markdown` from the interpreter's statement table; "
               "`test_render` fails when this file and the table differ. Clauses in `{}` may "
               "appear in any order, each at most once; `range` is `INT-INT` (start <= end) "
               "or `ALL`; `conds` are `field op value` joined by `AND`, with op one of "
               "`= != > < >= <= LIKE IN (…)`. Keywords are case-insensitive.\n\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "## %s\n\n```\n%s\n```\n\n%s\n\n", defs[i].name, defs[i].usage, defs[i].help);
    fprintf(f, "# Meta-commands\n\nOnly at the start of a line (an empty statement buffer).\n\n"
               "| command | what it does |\n|---|---|\n");
    for (size_t i = 0; i < NMETA; i++) fprintf(f, "| `%s` | %s |\n", metas[i].usage, metas[i].help);
    fprintf(f, "\n# Keywords\n\n");
    for (size_t i = 0; i < lql_keyword_count(); i++)
        fprintf(f, "%s`%s`", i ? " " : "", lql_keyword_at(i));
    fprintf(f, "\n");
    if (fclose(f) != 0) { free(buf); return NULL; }
    return buf;
}
