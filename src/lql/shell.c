/*
 * shell.c — running text through the interpreter: splitting a script into statements and
 * meta-commands, evaluating each (parse → execute → render), and printing results and
 * errors with their source line and a caret span. Shared by batch, -c, the REPL, `.read`
 * and the golden runner.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shell.h"

int lql_shell_init(lql_shell *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->s = lql_session_new();
    if (!sh->s) return -1;
    sh->out = stdout;
    sh->err = stderr;
    sh->mode = isatty(STDOUT_FILENO) ? LQL_OUT_TABLE : LQL_OUT_TSV;
    return 0;
}

void lql_shell_close(lql_shell *sh)
{
    lql_session_free(sh->s);
    sh->s = NULL;
    if (sh->out && sh->out != stdout) fclose(sh->out);
    sh->out = NULL;
}

/* ---------------------------------------------------------------- evaluation */

int lql_eval(lql_session *s, const char *text, size_t n, lql_outmode mode, char **out, lql_err *e)
{
    *out = NULL;
    lql_arena *ar = lql_arena_new();
    if (!ar) return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    lql_stmt *st = NULL;
    int rc = lql_parse(text, n, ar, &st, e);
    /* `a |> b`: each statement's result is rendered in turn, so notes stay with theirs */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = rc == 0 ? open_memstream(&buf, &len) : NULL;
    if (rc == 0 && !f) rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    int shown = 0;              /* a blank line separates statements' outputs, as tables */
    for (const lql_stmt *one = st; rc == 0 && one; one = one->next) {
        lql_result *r = lql_result_new();
        if (!r) { rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory"); break; }
        memset(e, 0, sizeof *e);
        rc = lql_exec_one(s, one, r, e);
        if (rc < 0 && e->line == 0) { e->line = one->at.line; e->col = one->at.col; e->len = one->at.len; }
        if (rc < 0 && e->code == LQL_ECANCEL) snprintf(e->msg, sizeof e->msg, "cancelled");
        /* a failed statement still shows what it produced before failing */
        if (rc == 0 || lql_result_ntables(r) || lql_result_nnotes(r)) {
            char *text1 = lql_render(r, mode);
            if (text1 && *text1 && shown++ && mode != LQL_OUT_JSON && mode != LQL_OUT_JSONL)
                fputs(mode == LQL_OUT_CSV ? "\r\n" : "\n", f);
            if (text1) fputs(text1, f);
            else if (rc == 0) rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
            free(text1);
        }
        lql_result_free(r);
    }
    if (f && fclose(f) == 0) *out = buf;
    else free(buf);
    if (rc == 0 && !*out) rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    lql_arena_free(ar);
    return rc;
}

/* ---------------------------------------------------------------- errors */

char *lql_error_text(const char *label, const char *src, int line0, const lql_err *e)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    if (label) fprintf(f, "error: %s:%d:%d: %s\n", label, e->line, e->col, e->msg);
    else fprintf(f, "error: %d:%d: %s\n", e->line, e->col, e->msg);
    if (src && e->line >= line0) {
        const char *p = src;
        for (int l = line0; l < e->line && p; l++) {
            p = strchr(p, '\n');
            if (p) p++;
        }
        if (p) {
            size_t ll = strcspn(p, "\n"), i = 0;
            fprintf(f, "  %.*s\n  ", (int)ll, p);
            /* under the culprit: columns count characters; tabs kept so they line up */
            for (int c = 1; c < e->col && i < ll; c++) {
                fputc(p[i] == '\t' ? '\t' : ' ', f);
                i++;
                while (i < ll && ((unsigned char)p[i] & 0xC0) == 0x80) i++;
            }
            fputc('^', f);
            for (int k = 1; k < e->len && i < ll; k++) {
                i++;
                while (i < ll && ((unsigned char)p[i] & 0xC0) == 0x80) i++;
                if (i < ll) fputc('~', f);
            }
            fputc('\n', f);
        }
    }
    if (fclose(f) != 0) { free(buf); return NULL; }
    return buf;
}

/* ---------------------------------------------------------------- running text */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Skip blanks and `--` comments; returns the new offset and counts newlines. */
static size_t skip_space(const char *t, size_t i, size_t n, int *line)
{
    while (i < n) {
        if (t[i] == '\n') { (*line)++; i++; }
        else if (t[i] == ' ' || t[i] == '\t' || t[i] == '\r' || t[i] == '\f' || t[i] == '\v') i++;
        else if (t[i] == '-' && i + 1 < n && t[i + 1] == '-') { while (i < n && t[i] != '\n') i++; }
        else break;
    }
    return i;
}

/* Run one statement text (which starts at line/col1 of the source). */
static int run_stmt(lql_shell *sh, const char *label, const char *src, int line0, size_t start,
                    size_t end, int line, int col1)
{
    char *out = NULL;
    lql_err e;
    double t0 = now_ms();
    int rc = lql_eval(sh->s, src + start, end - start, sh->mode, &out, &e);
    double t1 = now_ms();
    if (out) {
        fputs(out, sh->out);
        fflush(sh->out);
        free(out);
    }
    if (rc < 0) {
        /* positions are relative to the statement text: make them file positions */
        if (e.line == 1) e.col += col1 - 1;
        e.line += line - 1;
        if (e.code == LQL_ECANCEL && sh->interactive) fputc('\n', sh->err);  /* after the ^C echo */
        char *msg = sh->plain_errors ? lql_error_text(NULL, NULL, line0, &e)
                                     : lql_error_text(label, src, line0, &e);
        if (msg) fputs(msg, sh->err);
        fflush(sh->err);
        free(msg);
        sh->failed = 1;
        if (sh->bail || (e.code == LQL_ECANCEL && !sh->interactive)) sh->stop = 1;
    }
    if (sh->timer) fprintf(sh->err, "time: %.3f ms\n", t1 - t0);
    return rc;
}

int lql_shell_run(lql_shell *sh, const char *label, const char *text, int line0)
{
    size_t n = strlen(text), i = 0;
    int line = line0, rc = 0;
    while (i < n && !sh->stop) {
        /* a Ctrl-C between statements cancels the rest of the text (in batch: the run) */
        if (vx_cancel_flag) {
            sh->failed = 1;
            if (!sh->interactive) sh->stop = 1;
            return -1;
        }
        i = skip_space(text, i, n, &line);
        if (i >= n) break;
        size_t bol = i;
        while (bol > 0 && text[bol - 1] != '\n') bol--;
        int col1 = 1;           /* in characters, as the lexer counts */
        for (size_t k = bol; k < i; k++) col1 += ((unsigned char)text[k] & 0xC0) != 0x80;
        if (text[i] == '.' && col1 == 1) {
            /* a meta-command: the rest of the line */
            size_t e = i;
            while (e < n && text[e] != '\n') e++;
            char *cmd = strndup(text + i, e - i);
            if (!cmd || lql_meta(sh, cmd, label, line) < 0) { rc = -1; sh->failed = 1; if (sh->bail) sh->stop = 1; }
            free(cmd);
            i = e;
            continue;
        }
        size_t len;
        lql_split(text + i, n - i, &len);
        if (run_stmt(sh, label, text, line0, i, i + len, line, col1) < 0) rc = -1;
        for (size_t k = i; k < i + len; k++)
            if (text[k] == '\n') line++;
        i += len;
    }
    return rc;
}
