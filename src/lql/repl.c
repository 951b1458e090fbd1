/*
 * repl.c — the interactive shell: GNU Readline behind three macros (READ_LINE,
 * ADD_HISTORY, and the completion hook), history in ~/.lql_history, tab completion of
 * keywords, meta-commands and file paths inside strings, `lql> ` / `  ...> ` prompts, and
 * Ctrl-C: during a statement it raises vx_cancel_flag (the statement stops, the shell
 * stays); at the prompt it clears the line and any unfinished statement.
 */
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <readline/history.h>
#include <readline/readline.h>

#include "shell.h"

#define READ_LINE(prompt) readline(prompt)
#define ADD_HISTORY(line) add_history(line)

static volatile sig_atomic_t interrupted;
static int dropped;             /* Ctrl-C at the prompt: forget the unfinished statement */

static void on_sigint(int sig)
{
    (void)sig;
    vx_cancel_flag = 1;
    interrupted = 1;
}

volatile sig_atomic_t lql_idle;
volatile sig_atomic_t lql_term_sig;

static void on_term(int sig)
{
    if (lql_idle || lql_term_sig) {     /* nothing to wind down, or asked twice */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    lql_term_sig = sig;
    vx_cancel_flag = 1;
}

void lql_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* Readline calls this when a signal arrives while it waits for input: a Ctrl-C at the
 * prompt abandons the line (and any unfinished statement) and starts a fresh prompt
 * without leaving readline, so no keystroke is lost. */
static int on_signal_event(void)
{
    if (interrupted) {
        interrupted = 0;
        vx_cancel_flag = 0;
        dropped = 1;
        rl_replace_line("", 0);
        rl_crlf();
        rl_set_prompt("lql> ");
        rl_on_new_line();
        rl_redisplay();
    }
    return 0;
}

/* ---------------------------------------------------------------- completion */

static char *pending;           /* the unfinished statement's earlier lines */

typedef struct kwset { const char *a[128]; int n; } kwset;

static void add_kw(void *ctx, const char *kw)
{
    kwset *k = ctx;
    if (k->n < 128) k->a[k->n++] = kw;
}

static kwset cands;             /* keywords the grammar accepts at the word, or all */
static int cands_all;
static int meta_ok;             /* the word starts an empty buffer: meta-commands fit */

/* Which keywords fit where the word starts: the grammar is asked with the statement typed
 * so far (earlier lines plus this line up to the word, after the last complete `;`). */
static void find_candidates(int start)
{
    size_t pl = pending ? strlen(pending) : 0;
    char *text = malloc(pl + (size_t)start + 1);
    cands.n = 0;
    cands_all = 1;
    if (!text) return;
    if (pl) memcpy(text, pending, pl);
    memcpy(text + pl, rl_line_buffer, (size_t)start);
    size_t n = pl + (size_t)start, off = 0, len;
    text[n] = 0;
    while (off < n && lql_split(text + off, n - off, &len)) off += len;
    cands_all = lql_next_keywords(text + off, n - off, add_kw, &cands) < 0;
    free(text);
}

static char *keyword_gen(const char *text, int state)
{
    static size_t i, j, len;
    if (!state) { i = 0; j = 0; len = strlen(text); }
    size_t total = cands_all ? lql_keyword_count() : (size_t)cands.n;
    while (i < total) {
        const char *kw = cands_all ? lql_keyword_at(i) : cands.a[i];
        i++;
        if (strncasecmp(kw, text, len) == 0) {
            /* keep the user's case: lower-case input completes in lower case */
            char *m = strdup(kw);
            if (m && len && islower((unsigned char)text[0]))
                for (char *p = m; *p; p++) *p = (char)tolower((unsigned char)*p);
            return m;
        }
    }
    while (meta_ok && j < lql_meta_count()) {
        const char *name = lql_meta_name(j++);
        if (strncmp(name, text, len) == 0) return strdup(name);
    }
    return NULL;
}

/* Inside an open string: complete file names; elsewhere the keywords the grammar accepts
 * there, and meta-commands at the start of an empty buffer. */
static char **complete(const char *text, int start, int end)
{
    (void)end;
    int quote = 0;
    for (int i = 0; i < start; i++) {
        char c = rl_line_buffer[i];
        if (quote) {
            if (c == '\\') i++;
            else if (c == quote) quote = 0;
        } else if (c == '"' || c == '\'') quote = c;
        else if (c == '-' && rl_line_buffer[i + 1] == '-') break;
    }
    rl_attempted_completion_over = 1;       /* no fallback to file names outside strings */
    if (quote) {
        rl_completion_append_character = '\0';
        return rl_completion_matches(text, rl_filename_completion_function);
    }
    rl_completion_append_character = ' ';
    find_candidates(start);
    meta_ok = !pending && (int)strspn(rl_line_buffer, " \t") >= start;
    return rl_completion_matches(text, keyword_gen);
}

/* ---------------------------------------------------------------- the loop */

static char *history_path(void)
{
    const char *home = getenv("HOME");
    if (!home || !*home) return NULL;
    size_t n = strlen(home) + 20;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/.lql_history", home);
    return p;
}

/* The history file holds one entry per line, so a multi-line statement is saved with its
 * newlines as \x01 and restored on reading (as psql does): it stays one entry. */
static void history_map(char from, char to)
{
    for (int i = 0; i < history_length; i++) {
        HIST_ENTRY *h = history_get(history_base + i);
        if (h && h->line)
            for (char *p = h->line; *p; p++) if (*p == from) *p = to;
    }
}

int lql_repl(lql_shell *sh)
{
    char *hist = history_path();
    rl_readline_name = "lql";
    rl_attempted_completion_function = complete;
    rl_basic_word_break_characters = " \t\n\"'(),;=<>|";
    rl_completer_quote_characters = "";
    rl_signal_event_hook = on_signal_event;
    using_history();
    if (hist) { read_history(hist); history_map('\x01', '\n'); }
    lql_signals_install();
    /* typing at a terminal into a pipe: the banner, prompts and line editing go to stderr,
     * so stdout keeps to results as the program modes promise */
    FILE *chat = isatty(fileno(sh->out)) ? sh->out : stderr;
    rl_outstream = chat;
    fprintf(chat, "lql %s — .help for statements, Ctrl-D to quit\n", LQL_VERSION);

    char *buf = NULL;           /* the statement being typed, across lines */
    size_t len = 0, resume = 0;
    int line0 = 1, lineno = 0;
    while (!sh->stop) {
        interrupted = 0;
        dropped = 0;
        lql_idle = 1;
        char *line = READ_LINE(len ? "  ...> " : "lql> ");
        lql_idle = 0;
        /* readline echoes on this stream: a Ctrl-C that interrupted an echo's write leaves
         * its error flag set, which says nothing about the results written next */
        clearerr(chat);
        if (dropped) {          /* Ctrl-C at the prompt: the unfinished statement is gone */
            len = resume = 0;
            if (buf) buf[0] = 0;
            pending = NULL;
        }
        if (!line) {            /* Ctrl-D: an unfinished statement runs, as at a script's end */
            fputc('\n', chat);
            if (len) {
                buf[len - 1] = 0;
                ADD_HISTORY(buf);
                vx_cancel_flag = 0;
                lql_shell_run(sh, "<stdin>", buf, line0);
            }
            break;
        }
        lineno++;
        if (len == 0 && line[strspn(line, " \t")] == '.') {
            ADD_HISTORY(line);
            lql_meta(sh, line + strspn(line, " \t"), "<stdin>", lineno);
            free(line);
            continue;
        }
        if (len == 0 && line[strspn(line, " \t")] == 0) { free(line); continue; }
        size_t ll = strlen(line);
        char *nb = realloc(buf, len + ll + 2);
        if (!nb) { free(line); break; }
        buf = nb;
        if (len == 0) line0 = lineno;
        memcpy(buf + len, line, ll);
        len += ll;
        buf[len++] = '\n';
        buf[len] = 0;
        free(line);
        if (!lql_complete_from(buf, len, &resume)) { pending = buf; continue; }
        pending = NULL;
        buf[len - 1] = 0;       /* history keeps the statement without the last newline */
        ADD_HISTORY(buf);
        buf[len - 1] = '\n';
        vx_cancel_flag = 0;
        lql_shell_run(sh, "<stdin>", buf, line0);
        len = resume = 0;
        buf[0] = 0;
    }
    free(buf);
    if (hist) {
        history_map('\n', '\x01');
        write_history(hist);
        history_truncate_file(hist, 2000);
        free(hist);
    }
    return 0;
}
