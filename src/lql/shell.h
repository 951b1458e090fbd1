/*
 * shell.h — the layer that reads statements and prints: batch scripts, `-c`, the REPL,
 * meta-commands and the golden-test runner all go through lql_shell_run(), so a golden
 * test exercises exactly what a user types. Only this layer prints; errors come up as
 * lql_err values and are shown as
 *     error: FILE:LINE:COL: message
 *       <the source line>
 *       ^~~~
 */
#ifndef LQL_SHELL_H
#define LQL_SHELL_H

#include <stdio.h>

#include "interp.h"
#include "render.h"

#define LQL_READ_DEPTH_MAX 16

typedef struct lql_shell {
    lql_session *s;
    lql_outmode mode;           /* table on a terminal, tsv otherwise */
    int timer;                  /* .timer on: elapsed time per statement on stderr */
    int bail;                   /* .bail on: stop at the first error */
    FILE *out;                  /* where results go (.output); stdout by default */
    FILE *err;                  /* where errors go: stderr */
    int interactive;            /* a terminal: prompts, history, progress bar */
    int failed;                 /* some statement failed */
    int stop;                   /* .quit, or bail after an error, or a cancel in batch */
    int depth;                  /* .read nesting */
    int plain_errors;           /* golden runner: errors as "error: L:C: msg", no file or caret */
} lql_shell;

/* Set up a shell around a new session (out = stdout, err = stderr). -1 on out-of-memory. */
int lql_shell_init(lql_shell *sh);
void lql_shell_close(lql_shell *sh);

/* Run every statement and meta-command in text (a script, a -c argument, a REPL buffer).
 * label names the source in errors ("script.lql", "<command>", "<stdin>"), line0 is the
 * line number of text's first line. Results are rendered to sh->out, errors to sh->err.
 * Returns 0 if everything succeeded, -1 otherwise (sh->failed is set). A raised
 * vx_cancel_flag (Ctrl-C) stops the text before its next statement; the caller clears
 * the flag before running new input. */
int lql_shell_run(lql_shell *sh, const char *label, const char *text, int line0);

/* Parse and execute one statement chain and render its result in mode: *out receives the
 * malloc'd text (NULL on failure). On failure e holds the error with a position within
 * text (always set: the statement's keyword when the handler gave none). */
int lql_eval(lql_session *s, const char *text, size_t n, lql_outmode mode, char **out, lql_err *e);

/* The printed form of an error: "error: LABEL:LINE:COL: msg" (or "error: LINE:COL: msg"
 * when label is NULL), plus, when src is not NULL, the source line and a caret span under
 * the culprit. src's first line is line line0. malloc'd; NULL on out-of-memory. */
char *lql_error_text(const char *label, const char *src, int line0, const lql_err *e);

/* A meta-command line (starting with '.'). Returns 0, or -1 after printing an error. */
int lql_meta(lql_shell *sh, const char *line, const char *label, int lineno);

/* Meta-command names (".help", …) for completion. */
size_t lql_meta_count(void);
const char *lql_meta_name(size_t i);

/* The interactive loop (readline, history in ~/.lql_history). Returns when the user quits. */
int lql_repl(lql_shell *sh);

/* Run a golden test file (docs/lql/TESTING.md); update rewrites its expected blocks.
 * Prints failures and "N passed, M failed" to stdout. Returns 0 when all passed. */
int lql_golden(const char *path, int update);

/* The statement and meta-command reference as Markdown (docs/lql/REFERENCE.md is this
 * text; test_render checks it). malloc'd. */
char *lql_help_markdown(void);

/* Install the SIGINT handler: Ctrl-C raises vx_cancel_flag (and clears the REPL line). */
void lql_signals_install(void);

#endif
