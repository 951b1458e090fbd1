/*
 * shell.c — running text through the interpreter: splitting a script into statements and
 * meta-commands, evaluating each (parse → execute → render), and printing results and
 * errors with their source line and a caret span. Shared by batch, -c, the REPL, `.read`
 * and the golden runner.
 */
#include <errno.h>
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
    sh->width = 80;
    sh->exact = 1;
    sh->exit_code = -1;
    return 0;
}

/* Close a results file, reporting a failed write (a full disk shows only here). */
static int close_out(lql_shell *sh, FILE *f)
{
    if (!f || f == stdout) return 0;
    if (fclose(f) == 0) return 0;
    fprintf(sh->err, "error: cannot write results: %s\n", strerror(errno));
    sh->failed = 1;
    return -1;
}

int lql_shell_close(lql_shell *sh)
{
    lql_session_free(sh->s);
    sh->s = NULL;
    int rc = close_out(sh, sh->once);
    rc |= close_out(sh, sh->out);
    sh->once = sh->out = NULL;
    return rc;
}

/* After writing results: flush them (a conversation over a pipe waits for them) and turn
 * a failed write (a full disk, a closed pipe) into an error that stops the run. */
int lql_shell_flush(lql_shell *sh, FILE *f)
{
    if (fflush(f) == 0 && !ferror(f)) return 0;
    /* a Ctrl-C that lands in a blocked write (a terminal that stopped reading) interrupts
     * it: that cancels the statement, not the shell; the bytes that write held are gone
     * (the statement says it was cancelled) and the stream goes on */
    if (errno == EINTR || (vx_cancel_flag && !lql_term_sig)) {
        clearerr(f);
        if (fflush(f) == 0) return 0;
    }
    if (!sh->write_failed)
        fprintf(sh->err, "error: cannot write results: %s\n", errno ? strerror(errno) : "write failed");
    sh->write_failed = sh->failed = 1;
    sh->stop = 1;
    return -1;
}

/* ---------------------------------------------------------------- evaluation */

int lql_stmt_writes(const lql_stmt *st)
{
    /* the edit class (the journal) comes from the statement table, as the server reads it */
    const lql_stmt_def *d = lql_stmt_def_of(st->kind);
    if (d && d->cls == LQL_CLASS_EDIT)
        return 1;
    switch (st->kind) {
    case LQL_S_COMPILE: case LQL_S_COMPACT: case LQL_S_EXTRACT: case LQL_S_REPRESENT:
        return 1;   /* new containers and representations */
    case LQL_S_TRACE: return lql_has(st, LQL_C_SAVE);
    case LQL_S_DIFF: return lql_has(st, LQL_C_INTO_PATCH);
    default: return 0;
    }
}

/* A position within a text that starts at line/col of its source, in source terms. */
static void shift(lql_err *e, int line, int col)
{
    if (e->line == 0) return;
    if (e->line == 1) e->col += col - 1;
    e->line += line - 1;
}

int lql_eval_to(lql_session *s, const char *text, size_t n, const lql_eval_opts *o, FILE *out,
                FILE *notes, lql_err *e)
{
    const lql_render_opts *ro = &o->render;
    int json = ro->mode == LQL_OUT_JSON;
    lql_arena *ar = lql_arena_new();
    if (!ar) return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    lql_stmt *st = NULL;
    int rc = lql_parse(text, n, ar, &st, e);
    if (rc < 0) {
        shift(e, o->line, o->col);
        if (json) {
            while (n && (text[n - 1] == ';' || text[n - 1] == '\n' || text[n - 1] == ' ')) n--;
            lql_render_frame(out, NULL, ro, text, n, e->msg, e->line, e->col);
        }
    }
    /* `a |> b`: each statement's result is rendered in turn, so notes stay with theirs,
     * and framed as `a; b` would be: nothing between them that a reader would take for
     * a table boundary */
    for (const lql_stmt *one = st; rc == 0 && one; one = one->next) {
        lql_result *r = lql_result_new();
        if (!r) { rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory"); break; }
        memset(e, 0, sizeof *e);
        if (o->readonly && lql_stmt_writes(one)) {
            /* TRACE and DIFF write only through a clause: name and point at it */
            int cl = one->kind == LQL_S_TRACE ? LQL_C_SAVE : one->kind == LQL_S_DIFF ? LQL_C_INTO_PATCH : -1;
            rc = lql_errf(e, LQL_EREFUSED, cl >= 0 ? &one->clause_at[cl] : &one->at,
                          "%s%s writes: refused in a read-only shell (-readonly)",
                          lql_kind_name(one->kind), cl == LQL_C_SAVE ? " … SAVE"
                                                    : cl == LQL_C_INTO_PATCH ? " … INTO PATCH" : "");
        }
        else
            rc = lql_exec_one(s, one, r, e);
        if (rc < 0 && e->line == 0) { e->line = one->at.line; e->col = one->at.col; e->len = one->at.len; }
        if (rc < 0 && e->code == LQL_ECANCEL) snprintf(e->msg, sizeof e->msg, "cancelled");
        if (rc < 0) shift(e, o->line, o->col);
        if (json) {
            lql_render_frame(out, r, ro, one->src, one->nsrc, rc < 0 ? e->msg : NULL, e->line, e->col);
        } else if (rc == 0 || lql_result_ntables(r) || lql_result_nnotes(r)) {
            /* a failed statement still shows what it produced before failing */
            lql_render_to(r, ro, out, notes);
        }
        lql_result_free(r);
    }
    lql_arena_free(ar);
    return rc;
}

int lql_eval(lql_session *s, const char *text, size_t n, lql_outmode mode, char **out, lql_err *e)
{
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    memset(e, 0, sizeof *e);
    FILE *f = open_memstream(&buf, &len);
    if (!f) return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    lql_eval_opts o = {{mode, 0, 0, 0}, 0, 1, 1};
    int rc = lql_eval_to(s, text, n, &o, f, f, e);
    if (fclose(f) == 0) *out = buf;
    else free(buf);
    if (!*out && rc == 0) rc = lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    return rc;
}

/* ---------------------------------------------------------------- errors */

/* The character at p (before e) as an echo shows it (lql_shown_len: control bytes and
 * bytes that are not UTF-8 as \xNN, tabs kept so the caret lines up), written to f unless
 * f is NULL; returns its bytes, *cols its columns. */
static size_t echo_char(FILE *f, const char *p, const char *e, int *cols)
{
    int k = lql_shown_len(p, (size_t)(e - p), cols);
    if (f && k) fwrite(p, 1, (size_t)k, f);
    else if (f) fprintf(f, "\\x%02x", (unsigned char)*p);
    return k ? (size_t)k : 1;
}

/* Echo p[0..e), returning its columns. */
static int echo(FILE *f, const char *p, const char *e)
{
    int cols = 0, w;
    while (p < e) {
        p += echo_char(f, p, e, &w);
        cols += w;
    }
    return cols;
}

/* Walk n characters forward from p (not past a newline or the end). */
static const char *chars_fwd(const char *p, long n)
{
    for (; n > 0 && *p && *p != '\n'; n--) {
        p++;
        while (((unsigned char)*p & 0xC0) == 0x80) p++;
    }
    return p;
}

/* lql_error_text, finding the culprit's line from a known point of src: byte `at`, which
 * is at line `line`, column `col` (a statement's start), so a script of many statements
 * on one line is not walked from its start for each error. */
static char *error_text_from(const char *label, const char *src, size_t at, int line, int col,
                             const lql_err *e)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    if (label) fprintf(f, "error: %s:%d:%d: ", label, e->line, e->col);
    else fprintf(f, "error: %d:%d: ", e->line, e->col);
    echo(f, e->msg, e->msg + strlen(e->msg));                /* it may quote the input */
    fputc('\n', f);
    if (src && (e->line > line || (e->line == line && e->col >= col))) {
        const char *q = src + at;
        for (; line < e->line && q; line++, col = 1) {
            q = strchr(q, '\n');
            if (q) q++;
        }
        if (q) {
            q = chars_fwd(q, e->col - col);               /* the culprit */
            /* a window of LQL_ECHO_MAX characters around it: back to the line's start
             * or LQL_ECHO_MAX / 2 characters, then on to the line's end or the width */
            const char *from = q;
            int before = 0;
            while (from > src && from[-1] != '\n' && before < LQL_ECHO_MAX / 2) {
                from--;
                while (from > src && ((unsigned char)*from & 0xC0) == 0x80) from--;
                before++;
            }
            int cut_left = from > src && from[-1] != '\n';
            const char *to = chars_fwd(from, LQL_ECHO_MAX);
            int cut_right = *to && *to != '\n';
            fputs(cut_left ? "  …" : "  ", f);
            echo(f, from, to);
            fputs(cut_right ? "…\n  " : "\n  ", f);
            /* under the culprit: as wide as what was echoed before it, then as wide as
             * it was echoed (at least the caret) */
            if (cut_left) fputc(' ', f);
            for (const char *k = from; k < q;) {
                int w;
                size_t b = echo_char(NULL, k, to, &w);
                if (*k == '\t') fputc('\t', f);
                else fprintf(f, "%*s", w, "");
                k += b;
            }
            const char *end = chars_fwd(q, e->len > 1 ? e->len : 1);
            int w = echo(NULL, q, end < to ? end : to);
            fputc('^', f);
            for (int i = 1; i < w; i++) fputc('~', f);
            fputc('\n', f);
        }
    }
    if (fclose(f) != 0) { free(buf); return NULL; }
    return buf;
}

char *lql_error_text(const char *label, const char *src, int line0, const lql_err *e)
{
    return error_text_from(label, src, 0, line0, 1, e);
}

/* ---------------------------------------------------------------- running text */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Skip blanks, `--` comments and empty statements (a lone `;`); returns the new offset
 * and counts newlines. */
static size_t skip_space(const char *t, size_t i, size_t n, int *line)
{
    while (i < n) {
        if (t[i] == '\n') { (*line)++; i++; }
        else if (t[i] == ' ' || t[i] == '\t' || t[i] == '\r' || t[i] == '\f' || t[i] == '\v' || t[i] == ';') i++;
        else if (t[i] == '-' && i + 1 < n && t[i + 1] == '-') { while (i < n && t[i] != '\n') i++; }
        else break;
    }
    return i;
}

/* The error of a failed statement, printed (and noted in the shell's state). */
static void report(lql_shell *sh, const char *label, const char *src, size_t at, int line,
                   int col, lql_err *e)
{
    if (e->code == LQL_ECANCEL && sh->interactive) fputc('\n', sh->err);  /* after the ^C echo */
    char *msg = sh->plain_errors ? lql_error_text(NULL, NULL, line, e)
                                 : error_text_from(label, src, at, line, col, e);
    if (msg) fputs(msg, sh->err);
    fflush(sh->err);
    free(msg);
    sh->failed = 1;
    if (sh->bail || (e->code == LQL_ECANCEL && !sh->interactive) || lql_term_sig) sh->stop = 1;
}

/* Run one statement text (which starts at line/col1 of the source). */
static int run_stmt(lql_shell *sh, const char *label, const char *src, size_t start,
                    size_t end, int line, int col1)
{
    lql_err e;
    FILE *out = sh->once ? sh->once : sh->out;
    lql_eval_opts o = {{sh->mode, sh->exact, sh->noheader, sh->width}, sh->readonly, line, col1};
    double t0 = now_ms();
    int rc = lql_eval_to(sh->s, src + start, end - start, &o, out, sh->notes ? sh->notes : sh->err, &e);
    double t1 = now_ms();
    lql_shell_flush(sh, out);
    if (sh->once) {             /* .once: this statement only */
        if (close_out(sh, sh->once) < 0) sh->stop = 1;
        sh->once = NULL;
    }
    if (rc < 0) report(sh, label, src, start, line, col1, &e);
    if (sh->timer) fprintf(sh->err, "time: %.3f ms\n", t1 - t0);
    return rc;
}

/* Where the statement or meta-command at text[i] (not a blank) ends; *meta says which. A
 * meta-command is the rest of its line, recognised only at a line's start. */
static size_t unit_end(const char *text, size_t i, size_t n, int *meta)
{
    /* a '.' first on its line, blanks before it allowed (as the REPL takes it) */
    size_t b = i;
    while (b > 0 && (text[b - 1] == ' ' || text[b - 1] == '\t'))
        b--;
    *meta = text[i] == '.' && (b == 0 || text[b - 1] == '\n');
    if (*meta) {
        const char *nl = memchr(text + i, '\n', n - i);
        return nl ? (size_t)(nl - text) : n;
    }
    size_t len;
    lql_split(text + i, n - i, &len);
    return i + len;
}

int lql_shell_count(const char *text)
{
    size_t n = strlen(text), i = 0;
    int line = 1, count = 0, meta;
    while ((i = skip_space(text, i, n, &line)) < n) {
        i = unit_end(text, i, n, &meta);
        count++;
    }
    return count;
}

int lql_shell_use(lql_shell *sh, const char *path, const char *unrun)
{
    lql_arena *ar = lql_arena_new();
    lql_result *r = lql_result_new();
    char *use = malloc(strlen(path) * 2 + 8), *o = use, *msg = NULL;
    lql_stmt *st = NULL;
    lql_err e = {0};
    int rc = lql_errf(&e, LQL_ENOMEM, NULL, "out of memory");
    size_t n = 0;
    if (ar && r && use) {
        /* the USE a user would type: the binding, its notes and its json frame are USE's */
        o += sprintf(o, "USE \"");
        for (const char *p = path; *p; p++) {
            if (*p == '"' || *p == '\\') *o++ = '\\';
            *o++ = *p;
        }
        *o++ = '"';
        *o = 0;
        n = (size_t)(o - use);
        rc = lql_parse(use, n, ar, &st, &e) < 0 ? -1 : lql_exec_one(sh->s, st, r, &e);
    }
    if (rc < 0) {
        /* the argument failed, not a statement the user typed: no position, no echo */
        size_t k = strlen(path) + sizeof e.msg + 32;
        if ((msg = malloc(k))) snprintf(msg, k, "container argument '%s': %s", path, e.msg);
        fprintf(sh->err, "error: %s\n", msg ? msg : e.msg);
        fflush(sh->err);
        sh->failed = 1;
        if (unrun) lql_result_note(r, "%s not run: the container could not be bound", unrun);
    }
    lql_render_opts ro = {sh->mode, sh->exact, sh->noheader, sh->width};
    if (sh->mode == LQL_OUT_JSON)
        lql_render_frame(sh->out, r, &ro, use, n, rc < 0 ? (msg ? msg : e.msg) : NULL, 0, 0);
    else
        lql_render_to(r, &ro, sh->out, sh->notes ? sh->notes : sh->err);
    lql_shell_flush(sh, sh->out);
    free(msg);
    free(use);
    lql_result_free(r);
    lql_arena_free(ar);
    return rc;
}

void lql_shell_frame(lql_shell *sh, const lql_result *r, const char *text, size_t n,
                     const char *msg, int line, int col)
{
    if (sh->mode != LQL_OUT_JSON)
        return;
    lql_render_opts ro = {sh->mode, sh->exact, sh->noheader, sh->width};
    lql_render_frame(sh->out, r, &ro, text, n, msg, line, col);
    lql_shell_flush(sh, sh->out);
}

/* A statement [start, end) of text that held a NUL at offset nul (line, col its place; the
 * stream reader made it a space): refused where it is, in json as the statement's frame,
 * and not run. */
static void nul_stmt(lql_shell *sh, const char *label, const char *text, size_t start,
                     size_t end, int line, int col)
{
    static const char msg[] = "NUL byte in the input: LQL text cannot hold one (the statement "
                              "is discarded)";
    fprintf(sh->err, "error: %s:%d:%d: %s\n", label, line, col, msg);
    fflush(sh->err);
    while (end > start && (text[end - 1] == ';' || text[end - 1] == '\n' || text[end - 1] == ' '))
        end--;
    lql_shell_frame(sh, NULL, text + start, end - start, msg, line, col);
    sh->failed = 1;
    if (sh->bail) sh->stop = 1;
}

/* lql_shell_run, where the statements holding the offsets nul[0..nnul) (ascending) are
 * refused instead of run. */
static int run_text(lql_shell *sh, const char *label, const char *text, int line0,
                    const size_t *nul, size_t nnul)
{
    size_t n = strlen(text), i = 0, at = 0, k_nul = 0;
    int line = line0, rc = 0, col = 1;      /* col: the column of text[at], in characters */
    while (i < n && !sh->stop) {
        i = skip_space(text, i, n, &line);
        if (i >= n) break;
        for (; at < i; at++)    /* columns counted once: linear in the text */
            col = text[at] == '\n' ? 1 : col + (((unsigned char)text[at] & 0xC0) != 0x80);
        /* a Ctrl-C that landed in a statement which did not poll it (or between two)
         * cancels the rest of the text (in batch: the run), and says where */
        if (vx_cancel_flag || lql_term_sig) {
            fprintf(sh->err, "error: %s:%d:%d: cancelled: this statement and the rest of the "
                    "text were not run\n", label, line, col);
            sh->failed = 1;
            if (!sh->interactive || lql_term_sig) sh->stop = 1;
            return -1;
        }
        int meta;
        size_t e = unit_end(text, i, n, &meta);
        while (k_nul < nnul && nul[k_nul] < i) k_nul++;
        if (k_nul < nnul && nul[k_nul] < e) {
            int nl = line, nc = col;
            for (size_t k = i; k < nul[k_nul]; k++)
                if (text[k] == '\n') { nl++; nc = 1; }
                else nc += ((unsigned char)text[k] & 0xC0) != 0x80;
            nul_stmt(sh, label, text, i, e, nl, nc);
            rc = -1;
            for (size_t k = i; k < e; k++)
                if (text[k] == '\n') line++;
            i = e;
            continue;
        }
        if (meta) {
            char *cmd = strndup(text + i, e - i);
            if (!cmd || lql_meta(sh, cmd, label, line) < 0) { rc = -1; sh->failed = 1; if (sh->bail) sh->stop = 1; }
            free(cmd);
            i = e;
            continue;
        }
        if (run_stmt(sh, label, text, i, e, line, col) < 0) rc = -1;
        for (size_t k = i; k < e; k++)
            if (text[k] == '\n') line++;
        i = e;
    }
    return rc;
}

int lql_shell_run(lql_shell *sh, const char *label, const char *text, int line0)
{
    return run_text(sh, label, text, line0, NULL, 0);
}

/* ---------------------------------------------------------------- streams */

typedef struct feed {
    char *buf;                  /* the pending statement's lines */
    size_t len, cap, resume;    /* resume: where lql_complete_from goes on */
    int line0;                  /* line of buf's first line */
    size_t *nul, nnul, capnul;  /* offsets in buf of the NULs its lines held (now spaces):
                                 * the statements holding them are refused, not the others */
} feed;

static int feed_run(lql_shell *sh, const char *label, feed *fd)
{
    int rc = 0;
    if (fd->len) rc = run_text(sh, label, fd->buf, fd->line0, fd->nul, fd->nnul);
    fd->len = fd->resume = fd->nnul = 0;
    if (fd->buf) fd->buf[0] = 0;
    return rc;
}

int lql_shell_run_stream(lql_shell *sh, const char *label, FILE *f)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    feed fd = {0};
    int lineno = 0, rc = 0;
    errno = 0;
    while (!sh->stop) {
        lql_idle = 1;   /* a SIGTERM while lql waits for the next line ends it at once */
        got = getline(&line, &cap, f);
        lql_idle = 0;
        if (got < 0) break;
        size_t n = (size_t)got;
        char *l = line;
        if (++lineno == 1 && n >= 3 && memcmp(l, "\xEF\xBB\xBF", 3) == 0) { l += 3; n -= 3; }
        char *nul = memchr(l, 0, n);
        if (nul && fd.len == 0 && l[0] == '.') {
            /* a meta-command line is its own unit: refused whole */
            int col = 1;
            for (const char *p = l; p < nul; p++) col += ((unsigned char)*p & 0xC0) != 0x80;
            fprintf(sh->err, "error: %s:%d:%d: NUL byte in the input: LQL text cannot hold one "
                    "(the statement is discarded)\n", label, lineno, col);
            sh->failed = 1;
            rc = -1;
            if (sh->bail) { sh->stop = 1; break; }
            continue;
        }
        if (fd.len == 0 && l[0] == '.') {
            if (n && l[n - 1] == '\n') l[--n] = 0;
            if (lql_shell_run(sh, label, l, lineno) < 0) rc = -1;
            continue;
        }
        if (fd.len + n + 1 > fd.cap) {
            size_t nc = (fd.len + n + 1) * 2;
            char *nb = realloc(fd.buf, nc);
            if (!nb) { fprintf(sh->err, "error: out of memory\n"); sh->failed = 1; rc = -1; goto done; }
            fd.buf = nb;
            fd.cap = nc;
        }
        if (fd.len == 0) fd.line0 = lineno;
        for (char *p = nul; p && p < l + n; p++) {
            if (*p) continue;
            if (fd.nnul == fd.capnul) {
                size_t nc = fd.capnul ? 2 * fd.capnul : 8;
                size_t *nn = realloc(fd.nul, nc * sizeof *nn);
                if (!nn) { fprintf(sh->err, "error: out of memory\n"); sh->failed = 1; rc = -1; goto done; }
                fd.nul = nn;
                fd.capnul = nc;
            }
            fd.nul[fd.nnul++] = fd.len + (size_t)(p - l);
            *p = ' ';
        }
        memcpy(fd.buf + fd.len, l, n);
        fd.len += n;
        fd.buf[fd.len] = 0;
        if (lql_complete_from(fd.buf, fd.len, &fd.resume) && feed_run(sh, label, &fd) < 0) rc = -1;
        errno = 0;
    }
    if (!sh->stop && ferror(f)) {
        fprintf(sh->err, "error: %s: %s\n", label, vx_cancel_flag ? "cancelled" : strerror(errno ? errno : EIO));
        sh->failed = 1;
        if (vx_cancel_flag) sh->stop = 1;   /* the interrupt is said: the run ends here */
        rc = -1;
    } else if (!sh->stop && feed_run(sh, label, &fd) < 0) rc = -1;   /* the final `;` is optional */
done:
    free(fd.nul);
    free(fd.buf);
    free(line);
    return rc;
}
