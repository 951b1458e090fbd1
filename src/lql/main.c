/*
 * main.c — the lql command line:
 *   lql [CONTAINER]                 interactive shell (stdin a terminal), CONTAINER bound
 *   lql [CONTAINER] -f FILE         run a script       lql [CONTAINER] -c "STATS;"
 *   lql [CONTAINER] < script.lql    statements on stdin
 *   lql --test FILE.lql [--update]  golden test        lql --help-markdown
 * Exit status: 0 when every statement succeeded, 1 when one failed, 2 for a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files.h"
#include "shell.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: lql [CONTAINER] [-f FILE | -c \"STATEMENTS\"]\n"
               "       lql --test FILE.lql [--update]\n"
               "       lql --help-markdown\n"
               "Without -f or -c, statements come from stdin (a shell on a terminal).\n");
}

/* A progress bar on stderr, drawn only when stderr is a terminal. */
static void progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    if (total == 0) return;
    int pct = (int)(done * 100 / total), bars = pct * 30 / 100;
    fprintf(stderr, "\r[%.*s%*s] %3d%%", bars, "##############################", 30 - bars, "", pct);
    if (done >= total) fputs("\r\033[K", stderr);
    fflush(stderr);
}

int main(int argc, char **argv)
{
    const char *container = NULL, *file = NULL, *command = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--test") == 0 && i + 1 < argc) {
            int update = i + 2 < argc && strcmp(argv[i + 2], "--update") == 0;
            return lql_golden(argv[i + 1], update);
        }
        if (strcmp(argv[i], "--help-markdown") == 0) {
            char *md = lql_help_markdown();
            if (!md) return 1;
            fputs(md, stdout);
            free(md);
            return 0;
        }
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { usage(stdout); return 0; }
        if (strcmp(argv[i], "-f") == 0 && i + 1 < argc) file = argv[++i];
        else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) command = argv[++i];
        else if (argv[i][0] != '-' && !container) container = argv[i];
        else { usage(stderr); return 2; }
    }
    if (file && command) { usage(stderr); return 2; }

    lql_shell sh;
    if (lql_shell_init(&sh) < 0) { fprintf(stderr, "error: out of memory\n"); return 1; }
    int interactive = !file && !command && isatty(STDIN_FILENO);
    sh.interactive = interactive;
    if (isatty(STDERR_FILENO)) sh.s->progress = progress;
    lql_signals_install();

    if (container) {
        /* bind as a USE statement would, so errors read the same */
        size_t n = strlen(container) * 2 + 16;
        char *use = malloc(n), *o = use;
        if (use) {
            o += sprintf(o, "USE \"");
            for (const char *p = container; *p; p++) {
                if (*p == '"' || *p == '\\') *o++ = '\\';
                *o++ = *p;
            }
            sprintf(o, "\";");
            lql_shell_run(&sh, "<command line>", use, 1);
            free(use);
        }
        if (sh.failed && !interactive) { lql_shell_close(&sh); return 1; }
    }

    if (interactive) {
        lql_repl(&sh);
    } else if (command) {
        lql_shell_run(&sh, "<command>", command, 1);
    } else {
        FILE *f = file ? fopen(file, "rb") : stdin;
        if (!f) { fprintf(stderr, "error: cannot open %s\n", file); lql_shell_close(&sh); return 1; }
        char *text = lql_read_stream(f, 0, NULL);
        if (file) fclose(f);
        if (!text) {
            fprintf(stderr, "error: %s: %s\n", file ? file : "<stdin>",
                    vx_cancel_flag ? "cancelled" : "cannot read");
            lql_shell_close(&sh);
            return 1;
        }
        lql_shell_run(&sh, file ? file : "<stdin>", text, 1);
        free(text);
    }
    int failed = sh.failed;
    lql_shell_close(&sh);
    return failed ? 1 : 0;
}
