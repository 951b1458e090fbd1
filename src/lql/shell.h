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

#include <signal.h>
#include <stdio.h>

#include "interp.h"
#include "render.h"

#define LQL_READ_DEPTH_MAX 16

typedef struct lql_shell {
    lql_session *s;
    lql_outmode mode;           /* table on a terminal, tsv otherwise */
    int noheader;               /* -noheader / .headers off: no column-name line */
    int width;                  /* table/box: cells wider are cut with … (.width; 0: never) */
    int exact;                  /* program modes print floats round-trip (golden runner: off) */
    int timer;                  /* .timer on: elapsed time per statement on stderr */
    int bail;                   /* .bail on: stop at the first error */
    int readonly;               /* -readonly: statements that write are refused */
    FILE *out;                  /* where results go (.output); stdout by default */
    FILE *once;                 /* .once FILE: the next statement's results, then closed */
    FILE *err;                  /* where errors go: stderr */
    FILE *notes;                /* program modes' notes and titles; NULL: err */
    int interactive;            /* a terminal: prompts, history, progress bar */
    int failed;                 /* some statement failed */
    int write_failed;           /* results could not be written (reported once) */
    int stop;                   /* .quit, or bail after an error, or a cancel in batch */
    int exit_code;              /* .exit N: exit with N (-1: by failures) */
    int depth;                  /* .read nesting */
    int plain_errors;           /* golden runner: errors as "error: L:C: msg", no file or caret */
} lql_shell;

/* Set up a shell around a new session (out = stdout, err = stderr). -1 on out-of-memory. */
int lql_shell_init(lql_shell *sh);
/* Free the session and close .output / .once files. -1 when closing one failed to write
 * (reported on err). */
int lql_shell_close(lql_shell *sh);

/* Flush f after results were written to it; a failed write (a full disk, a closed pipe)
 * is reported once, fails the run and stops it. 0 or -1. */
int lql_shell_flush(lql_shell *sh, FILE *f);

/* Run every statement and meta-command in text (a script, a -c argument, a REPL buffer).
 * label names the source in errors ("script.lql", "<command>", "<stdin>"), line0 is the
 * line number of text's first line. Results are rendered to sh->out, errors to sh->err.
 * Returns 0 if everything succeeded, -1 otherwise (sh->failed is set). A raised
 * vx_cancel_flag (Ctrl-C) stops the text before its next statement; the caller clears
 * the flag before running new input. */
int lql_shell_run(lql_shell *sh, const char *label, const char *text, int line0);

/* Bind the CONTAINER argument as `USE "path"` does (the same notes and json frame), but
 * report a failure as the argument's: `error: container argument 'path': …` without a
 * position or an echoed line (line 0, col 0 in its json frame), with the note "<unrun>
 * not run: the container could not be bound" when unrun is not NULL. 0 or -1. */
int lql_shell_use(lql_shell *sh, const char *path, const char *unrun);

/* How many statements and meta-commands text holds (what lql_shell_run would run). */
int lql_shell_count(const char *text);

/* Read f line by line and run each statement as soon as a line ends it (its last token is
 * `;`), flushing its output before the next line is read: a pipe is a conversation. A
 * meta-command is a line starting with `.` while no statement is pending. At the end of
 * input a pending statement runs (the final `;` is optional). A UTF-8 byte-order mark
 * before the first line is skipped; a NUL byte is an error (the statement holding it is
 * discarded). Returns 0, or -1 when something failed. */
int lql_shell_run_stream(lql_shell *sh, const char *label, FILE *f);

/* How lql_eval_to runs and prints a statement chain. */
typedef struct lql_eval_opts {
    lql_render_opts render;
    int readonly;               /* refuse the statements that write (lql_stmt_writes) */
    int line, col;              /* where text starts in its source (1, 1 for a lone text):
                                 * error positions and json frames count from there */
} lql_eval_opts;

/* Parse and execute one statement chain, rendering each statement's result to out as it
 * completes (notes and titles of the program modes to notes; notes may equal out). In
 * json mode each statement — and a chain that does not parse — is one frame line
 * (render.h) whose "error" holds the failure. Returns 0, or -1 with e set to the first
 * error, positioned in the source (always set: the statement's keyword when the handler
 * gave none). This is the entry point for any front end (the shell, the golden runner, an
 * HTTP layer). */
int lql_eval_to(lql_session *s, const char *text, size_t n, const lql_eval_opts *o, FILE *out,
                FILE *notes, lql_err *e);

/* Does st write (the journal, a container or a file)? The statements -readonly refuses. */
int lql_stmt_writes(const lql_stmt *st);

/* lql_eval_to into a malloc'd string (*out; NULL on failure) in mode, display precision,
 * notes inline: what a test compares. */
int lql_eval(lql_session *s, const char *text, size_t n, lql_outmode mode, char **out, lql_err *e);

/* The printed form of an error: "error: LABEL:LINE:COL: msg" (or "error: LINE:COL: msg"
 * when label is NULL), plus, when src is not NULL, the source line (at most
 * LQL_ECHO_MAX columns of it around the culprit, control bytes escaped) and a caret span
 * under the culprit. src's first line is line line0. malloc'd; NULL on out-of-memory. */
#define LQL_ECHO_MAX 200
char *lql_error_text(const char *label, const char *src, int line0, const lql_err *e);

/* In json mode, the frame of input the shell answers itself (a meta-command, a NUL in a
 * statement): text[0..n) as its statement, r's notes (NULL: none), msg NULL or its error at
 * line:col; nothing otherwise. A reader takes one frame per statement it sent. */
void lql_shell_frame(lql_shell *sh, const lql_result *r, const char *text, size_t n,
                     const char *msg, int line, int col);

/* A meta-command line (starting with '.'). Returns 0, or -1 after printing an error. */
int lql_meta(lql_shell *sh, const char *line, const char *label, int lineno);

/* Meta-command names (".help", …) for completion. */
size_t lql_meta_count(void);
const char *lql_meta_name(size_t i);

/* The interactive loop (readline, history in ~/.lql_history). Returns when the user quits. */
int lql_repl(lql_shell *sh);

/* The version printed by --version and the REPL banner. */
#define LQL_VERSION "0.1.0"

/* Run a golden test file (docs/lql/TESTING.md); update rewrites its expected blocks.
 * Prints failures and "N passed, M failed" to stdout. Returns 0 when all passed. */
int lql_golden(const char *path, int update);

/* The statement and meta-command reference as Markdown (docs/lql/REFERENCE.md is this
 * text; test_render checks it). malloc'd. */
char *lql_help_markdown(void);

/* Install the signal handlers. SIGINT (Ctrl-C) raises vx_cancel_flag (and clears the REPL
 * line). SIGTERM and SIGHUP end lql: at once while it waits for input (lql_idle set), else
 * they cancel the running statement as Ctrl-C does (its temporary files removed, its
 * journal transaction rolled back), the run stops, and main re-raises the signal once the
 * shell is closed (lql_term_sig). A second one while a statement winds down ends lql at once. */
void lql_signals_install(void);
extern volatile sig_atomic_t lql_idle;
extern volatile sig_atomic_t lql_term_sig;

#endif
