/*
 * main.c — the lql command line, shaped like sqlite3's:
 *   lql [OPTIONS] [CONTAINER] [STATEMENTS]   interactive shell when stdin is a terminal
 *   lql [CONTAINER] -f FILE | -c "STATS;" (several, run in order) | < script.lql
 *   lql --test FILE.lql [--update]  golden test        lql --help-markdown
 *   lql CONTAINER --serve HOST:PORT [--api-key-file F] [--read-only] [--chat-template F]
 *       [--limit NAME=VALUE]…       the HTTP service (docs/lql/SERVE.md)
 * Options (one or two dashes): -json -jsonl -csv -tsv -table -box -markdown, -header /
 * -noheader, -bail, -readonly, -cmd STMT (run first, repeatable), -init FILE (instead of
 * ~/.lqlrc, which is read only when interactive), --version, -h. SHELL.md documents them.
 * Exit status: 0 when every statement succeeded, 1 when one failed (or results could not
 * be written), 2 for a usage error, N after `.exit N`.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve.h"
#include "shell.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: lql [OPTIONS] [CONTAINER] [STATEMENTS]\n"
               "       lql --test FILE.lql [--update]\n"
               "       lql --help-markdown\n"
               "       lql CONTAINER --serve HOST:PORT [--api-key-file FILE] [--read-only]\n"
               "                     [--chat-template FILE] [--limit NAME=VALUE]…   (docs/lql/SERVE.md)\n"
               "Statements come from STATEMENTS, -c and -f in the order given, else from stdin\n"
               "(an interactive shell on a terminal; a pipe runs each statement as its line ends).\n"
               "Options:\n"
               "  -c STATEMENTS      run them (repeatable)       -f FILE        run a script\n"
               "  -cmd STATEMENTS    run before anything else    -init FILE     run instead of ~/.lqlrc\n"
               "  -table -box -markdown -tsv -csv -json -jsonl   output mode\n"
               "  -header -noheader  column-name line on/off     -bail          stop at the first error\n"
               "  -readonly          refuse statements that write\n"
               "  --version          print the version           -h, --help     this text\n");
}

/* A progress bar on stderr, drawn only when stderr is a terminal, named by its stage. */
static void progress(void *ctx, const char *stage, uint64_t done, uint64_t total)
{
    (void)ctx;
    if (total == 0) return;
    int pct = (int)(done * 100 / total), bars = pct * 30 / 100;
    fprintf(stderr, "\r%-9s [%.*s%*s] %3d%%", stage, bars, "##############################", 30 - bars, "",
            pct);
    if (done >= total) fputs("\r\033[K", stderr);
    fflush(stderr);
}

/* Run a script file through the streaming reader (NUL and BOM rules, statements run as
 * they end). */
static int run_file(lql_shell *sh, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(sh->err, "error: cannot open %s: %s\n", path, strerror(errno));
        sh->failed = 1;
        if (sh->bail) sh->stop = 1;
        return -1;
    }
    int rc = lql_shell_run_stream(sh, path, f);
    fclose(f);
    return rc;
}

/* ~/.lqlrc, when it exists. */
static void run_rc(lql_shell *sh)
{
    const char *home = getenv("HOME");
    if (!home || !*home) return;
    size_t n = strlen(home) + 10;
    char *p = malloc(n);
    if (!p) return;
    snprintf(p, n, "%s/.lqlrc", home);
    if (access(p, R_OK) == 0) run_file(sh, p);
    free(p);
}

typedef struct action { int file; const char *arg; } action;

/* The option's name without its leading dashes, or NULL for a non-option. */
static const char *opt_name(const char *a)
{
    if (a[0] != '-' || !a[1]) return NULL;
    return a[1] == '-' ? a + 2 : a + 1;
}

/* The separator before the k-th of n listed items (k counts from 0): ", " or " and ". */
static const char *list_sep(int k, int n)
{
    return k == 0 ? "" : k == n - 1 ? " and " : ", ";
}

/* What a batch run would have run after binding its container, for the note of a
 * container that could not be bound: "2 statements and the script a.lql". NULL when
 * nothing (or out of memory). malloc'd. */
static char *unrun_text(const action *cmds, int ncmds, const action *acts, int nacts)
{
    int stmts = 0, items = nacts == 0;         /* no -c / -f: standard input */
    for (int i = 0; i < ncmds; i++) stmts += lql_shell_count(cmds[i].arg);
    for (int i = 0; i < nacts; i++) {
        if (acts[i].file) items++;
        else stmts += lql_shell_count(acts[i].arg);
    }
    items += stmts > 0;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = items ? open_memstream(&buf, &len) : NULL;
    if (!f) return NULL;
    int k = 0;
    if (stmts) {
        fprintf(f, "%d statement%s", stmts, stmts == 1 ? "" : "s");
        k++;
    }
    for (int i = 0; i < nacts; i++)
        if (acts[i].file) fprintf(f, "%sthe script %s", list_sep(k++, items), acts[i].arg);
    if (!nacts) fprintf(f, "%sstandard input", list_sep(k, items));
    if (fclose(f) != 0) { free(buf); return NULL; }
    return buf;
}

int main(int argc, char **argv)
{
    const char *container = NULL, *init = NULL;
    action *acts = calloc((size_t)argc + 1, sizeof *acts), *cmds = calloc((size_t)argc + 1, sizeof *cmds);
    int nacts = 0, ncmds = 0, mode = -1, header = -1, bail = 0, readonly = 0;
    const char *serve_at = NULL;
    int limits = 0;
    srv_opts so;
    srv_opts_default(&so);
    if (!acts || !cmds) { fprintf(stderr, "error: out of memory\n"); return 1; }
    /* a closed output pipe or a file-size limit is a write error with a message (EPIPE,
     * EFBIG, and the written tree removed), not a silent death by signal */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    int early = -1;             /* set by an option that ends the run before it starts */
    for (int i = 1; i < argc && early < 0; i++) {
        const char *o = opt_name(argv[i]);
        int has_arg = i + 1 < argc;
        lql_outmode m;
        if (!o) {
            if (!container) container = argv[i];
            else acts[nacts++] = (action){0, argv[i]};     /* sqlite3: statements after the database */
        } else if (strcmp(o, "test") == 0 && has_arg) {
            int update = i + 2 < argc && strcmp(argv[i + 2], "--update") == 0;
            early = lql_golden(argv[i + 1], update) ? 1 : 0;
        } else if (strcmp(o, "help-markdown") == 0) {
            char *md = lql_help_markdown();
            if (md) fputs(md, stdout);
            free(md);
            early = md && fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
        } else if (strcmp(o, "h") == 0 || strcmp(o, "help") == 0) {
            usage(stdout);
            early = 0;
        } else if (strcmp(o, "version") == 0) {
            printf("lql %s\n", LQL_VERSION);
            early = fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
        } else if (strcmp(o, "f") == 0 && has_arg) acts[nacts++] = (action){1, argv[++i]};
        else if (strcmp(o, "c") == 0 && has_arg) acts[nacts++] = (action){0, argv[++i]};
        else if (strcmp(o, "cmd") == 0 && has_arg) cmds[ncmds++] = (action){0, argv[++i]};
        else if (strcmp(o, "init") == 0 && has_arg) init = argv[++i];
        else if (strcmp(o, "header") == 0 || strcmp(o, "noheader") == 0) header = o[0] == 'h';
        else if (strcmp(o, "bail") == 0) bail = 1;
        else if (strcmp(o, "readonly") == 0 || strcmp(o, "read-only") == 0) readonly = 1;
        else if (strcmp(o, "serve") == 0 && has_arg) serve_at = argv[++i];
        else if (strcmp(o, "api-key-file") == 0 && has_arg) so.api_key_file = argv[++i];
        else if (strcmp(o, "chat-template") == 0 && has_arg) so.chat_template = argv[++i];
        else if (strcmp(o, "limit") == 0 && has_arg) {
            char msg[300];
            if (srv_set_limit(&so, argv[++i], msg, sizeof msg) < 0) {
                fprintf(stderr, "error: %s\n", msg);
                early = 2;
            }
            limits = 1;
        }
        else if (lql_outmode_parse(o, &m) == 0) mode = (int)m;
        else {
            fprintf(stderr, "lql: unknown option or missing argument: %s\n", argv[i]);
            usage(stderr);
            early = 2;
        }
    }
    if (early >= 0) { free(acts); free(cmds); return early; }

    if (serve_at || so.api_key_file || so.chat_template || limits) {
        char msg[300];
        int ok = serve_at && container && !nacts && !ncmds && !init;
        free(acts);
        free(cmds);
        if (!ok) { usage(stderr); return 2; }
        if (srv_parse_listen(&so, serve_at, msg, sizeof msg) < 0) { fprintf(stderr, "error: %s\n", msg); return 2; }
        so.container = container;
        so.read_only = readonly;
        return srv_run(&so);
    }

    lql_shell sh;
    if (lql_shell_init(&sh) < 0) { fprintf(stderr, "error: out of memory\n"); free(acts); free(cmds); return 1; }
    int interactive = nacts == 0 && isatty(STDIN_FILENO);
    sh.interactive = interactive;
    sh.bail = bail;
    sh.readonly = readonly;
    if (mode >= 0) sh.mode = (lql_outmode)mode;
    if (header >= 0) sh.noheader = !header;
    if (isatty(STDERR_FILENO)) sh.s->progress = progress;
    lql_signals_install();

    /* the rc file first (it may set the mode), then the container, then -cmd */
    if (init) run_file(&sh, init);
    else if (interactive) run_rc(&sh);
    if (container && !sh.stop) {
        /* only a container that cannot be bound stops the run here: an -init or rc
         * failure is an ordinary error (-bail stopped the run already if asked to) */
        int failed = sh.failed;
        sh.failed = 0;
        char *unrun = interactive ? NULL : unrun_text(cmds, ncmds, acts, nacts);
        lql_shell_use(&sh, container, unrun);
        free(unrun);
        if (sh.failed && !interactive) sh.stop = 1;
        sh.failed |= failed;
    }
    for (int i = 0; i < ncmds && !sh.stop; i++) lql_shell_run(&sh, "<command>", cmds[i].arg, 1);

    if (sh.stop) {
        /* a bad container, a bailed -cmd or .exit in the rc file: nothing more runs */
    } else if (interactive) {
        lql_repl(&sh);
    } else if (nacts) {
        /* a Ctrl-C one action did not poll cancels the rest (run_text says where) */
        for (int i = 0; i < nacts && !sh.stop; i++) {
            if (acts[i].file) run_file(&sh, acts[i].arg);
            else lql_shell_run(&sh, "<command>", acts[i].arg, 1);
        }
    } else {
        lql_shell_run_stream(&sh, "<stdin>", stdin);
    }
    if (vx_cancel_flag && !lql_term_sig && !interactive && !sh.stop) {
        /* a Ctrl-C during the last statement, which never polled it, is not lost either */
        fprintf(stderr, "error: cancelled: the interrupt came during the last statement, "
                "which does not poll it and ran to its end\n");
        sh.failed = 1;
    }
    free(acts);
    free(cmds);
    int code = sh.exit_code;
    if (lql_shell_close(&sh) < 0) sh.failed = 1;
    /* results that never reached stdout (a full disk, a closed pipe) are a failure */
    if (fflush(stdout) != 0 || ferror(stdout) || fclose(stdout) != 0) {
        if (!sh.write_failed) fprintf(stderr, "error: cannot write results: %s\n", strerror(errno));
        sh.failed = 1;
    }
    int sig = lql_term_sig;
    if (sig) {
        /* the statement it cancelled is cleaned up and the journal closed: die of it, so
         * the sender sees the signal in the exit status */
        fprintf(stderr, "error: %s: the running statement was cancelled; lql ends\n",
                sig == SIGTERM ? "SIGTERM" : "SIGHUP");
        signal(sig, SIG_DFL);
        raise(sig);
    }
    /* only library destructors run after this (OpenBLAS joins its threads, which can hang
     * when a memory limit starves them): a SIGTERM now ends lql at once */
    lql_idle = 1;
    if (code >= 0) return code;
    return sh.failed ? 1 : 0;
}
