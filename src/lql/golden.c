/*
 * golden.c — the golden-test runner, `lql --test FILE.lql [--update]` (format: TESTING.md
 * in docs/lql). Records run in order in one session, through lql_eval — the same path as
 * the shell — and their results are compared with the expected blocks:
 *   statement ok            the statement must succeed (its output is not checked)
 *   statement error         it must fail; after ---- the exact `error: L:C: msg` line
 *   query [mode=M] [tol=X] [rowsort] [exact]
 *                           after ---- the exact output (numbers within X when tol given)
 *   require container NAME FROM "hf_dir" [DTYPE d]
 *                           encode hf_dir into the test cache (once per build of lql) and
 *                           USE it; later records may write ${NAME} for its path
 * An expected block ends at a blank line followed by a record header, a # comment or the
 * end of the file, so outputs may hold blank lines (between tables).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "shell.h"

typedef struct record {
    int line;                   /* of the header */
    char *header;
    char *text;                 /* the statement(s) */
    int text_line;
    char *expected;             /* NULL when the record has no ---- block */
    size_t exp_start, exp_end;  /* byte range of the expected block in the file */
} record;

typedef struct var { char *name, *value; } var;

/* ---------------------------------------------------------------- reading */

static int is_header(const char *l)
{
    return strncmp(l, "statement ", 10) == 0 || strncmp(l, "query", 5) == 0
        || strncmp(l, "require ", 8) == 0;
}

static size_t line_end(const char *t, size_t n, size_t i)
{
    while (i < n && t[i] != '\n') i++;
    return i;
}

/* The records of a file, in order. */
static int split_records(const char *t, size_t n, record **out, int *nrec)
{
    size_t cap = 16;
    record *recs = calloc(cap, sizeof *recs);
    int nr = 0;
    size_t i = 0;
    int line = 1;
    if (!recs) return -1;
    while (i < n) {
        size_t e = line_end(t, n, i);
        if (e == i || t[i] == '#') { i = e + 1; line++; continue; }
        if (!is_header(t + i)) {
            free(recs);
            fprintf(stderr, "line %d: expected a record header (statement ok|error, query, require), got \"%.*s\"\n",
                    line, (int)(e - i), t + i);
            return -1;
        }
        if (nr == (int)cap) {
            cap *= 2;
            record *nrp = realloc(recs, cap * sizeof *recs);
            if (!nrp) { free(recs); return -1; }
            recs = nrp;
        }
        record *r = &recs[nr++];
        memset(r, 0, sizeof *r);
        r->line = line;
        r->header = strndup(t + i, e - i);
        i = e + 1; line++;
        /* the statement text: up to ---- or a blank line */
        size_t ts = i;
        r->text_line = line;
        while (i < n) {
            e = line_end(t, n, i);
            if (e == i || (e - i == 4 && strncmp(t + i, "----", 4) == 0)) break;
            i = e + 1; line++;
        }
        r->text = strndup(t + ts, i > ts ? i - ts - 1 : 0);
        if (i < n && strncmp(t + i, "----", 4) == 0) {
            i += 5; line++;
            size_t es = i;
            /* up to a blank line that is followed by a header, a comment or the end */
            for (;;) {
                if (i >= n) break;
                e = line_end(t, n, i);
                if (e == i) {
                    size_t k = i + 1;
                    while (k < n && t[k] == '\n') k++;
                    if (k >= n || t[k] == '#' || is_header(t + k)) break;
                }
                i = e + 1; line++;
            }
            size_t ee = i > n ? n : i;
            r->exp_start = es;
            r->exp_end = ee;
            while (ee > es && t[ee - 1] == '\n') ee--;
            r->expected = strndup(t + es, ee - es);
        }
    }
    *out = recs;
    *nrec = nr;
    return 0;
}

/* ---------------------------------------------------------------- comparing */

static int number_at(const char *s, double *v, const char **end)
{
    const char *p = s;
    if (*p == '-') p++;
    if (*p < '0' || *p > '9') return 0;
    char *e;
    *v = strtod(s, &e);
    *end = e;
    return e > s;
}

/* Equal, with numbers compared within tol (absolute or relative) when tol >= 0. */
static int same(const char *a, const char *b, double tol)
{
    if (tol < 0) return strcmp(a, b) == 0;
    while (*a && *b) {
        double x, y;
        const char *ea, *eb;
        if (number_at(a, &x, &ea) && number_at(b, &y, &eb)) {
            double d = fabs(x - y), m = fmax(fabs(x), fabs(y));
            if (!(d <= tol || d <= tol * m)) return 0;
            a = ea; b = eb;
            continue;
        }
        if (*a != *b) return 0;
        a++; b++;
    }
    return *a == *b;
}

static int cmp_lines(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* rowsort: every line after the first (the header) sorted. Returns a new string. */
static char *rowsorted(const char *s)
{
    char *copy = strdup(s);
    if (!copy) return NULL;
    size_t n = 0, cap = 16;
    char **lines = malloc(cap * sizeof *lines);
    for (char *p = copy, *save = NULL, *l; lines && (l = strtok_r(p, "\n", &save)); p = NULL) {
        if (n == cap) { cap *= 2; char **nl = realloc(lines, cap * sizeof *nl); if (!nl) break; lines = nl; }
        lines[n++] = l;
    }
    if (!lines) { free(copy); return NULL; }
    if (n > 1) qsort(lines + 1, n - 1, sizeof *lines, cmp_lines);
    size_t total = strlen(s) + 2;
    char *out = malloc(total);
    if (out) {
        out[0] = 0;
        for (size_t i = 0; i < n; i++) { strcat(out, lines[i]); if (i + 1 < n) strcat(out, "\n"); }
    }
    free(lines);
    free(copy);
    return out;
}

static void print_diff(const char *want, const char *got)
{
    printf("--- expected\n+++ got\n");
    const char *a = want, *b = got;
    while (*a || *b) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la == lb && strncmp(a, b, la) == 0) printf("  %.*s\n", (int)la, a);
        else {
            if (*a) printf("- %.*s\n", (int)la, a);
            if (*b) printf("+ %.*s\n", (int)lb, b);
        }
        a += la + (a[la] == '\n');
        b += lb + (b[lb] == '\n');
    }
}

/* ---------------------------------------------------------------- require container */

/* The cache directory: <dir of the lql executable>/lqltest-cache/<mtime of lql>, so a
 * rebuilt lql (perhaps a changed encoder) encodes afresh. LQL_TEST_CACHE overrides. */
static int cache_dir(char *out, size_t n)
{
    const char *env = getenv("LQL_TEST_CACHE");
    if (env && *env) { snprintf(out, n, "%s", env); return 0; }
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return -1;
    exe[k] = 0;
    struct stat sb;
    if (stat(exe, &sb) != 0) return -1;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    int k2 = snprintf(out, n, "%s/lqltest-cache/%llx", exe, (unsigned long long)sb.st_mtime);
    return k2 > 0 && (size_t)k2 < n ? 0 : -1;
}

static int mkdirs(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') { *p = 0; if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1; *p = '/'; }
    return mkdir(tmp, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* `require container NAME FROM "hf_dir" [DTYPE d] [SHAPE bank]`: returns the container
 * path. SHAPE bank derives a bank-shape container from the graph encode (vx_bank_import). */
static int require(lql_shell *sh, const char *header, var *v, char *err, size_t errsz)
{
    char name[128], hf[PATH_MAX], dt[32] = "";
    const char *shape = strstr(header, " SHAPE ");
    int bank = shape && strcmp(shape, " SHAPE bank") == 0;
    if (sscanf(header, "require container %127s FROM \"%4095[^\"]\" DTYPE %31s", name, hf, dt) < 2 ||
        (shape && !bank) || strcmp(dt, "SHAPE") == 0) {
        snprintf(err, errsz, "usage: require container NAME FROM \"hf_dir\" [DTYPE dtype] [SHAPE bank]");
        return -1;
    }
    int dtype = -1;
    if (dt[0]) {
        vx_dtype d;
        if (vx_dtype_parse(dt, &d) < 0) { snprintf(err, errsz, "unknown dtype: %s", dt); return -1; }
        dtype = (int)d;
    }
    char dir[PATH_MAX - 200], path[PATH_MAX];
    if (cache_dir(dir, sizeof dir) < 0 || mkdirs(dir) < 0) {
        snprintf(err, errsz, "cannot create the test cache directory");
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s%s%s.vindex3", dir, name, dt[0] ? "-" : "", dt);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        vx_err ve = {0};
        /* another test may be encoding the same container: its rename wins, ours fails */
        if (lql_encode_container(hf, path, dtype, 1, NULL, NULL, &ve) < 0 && stat(path, &sb) != 0) {
            snprintf(err, errsz, "encoding %.200s: %.300s", hf, ve.msg);
            return -1;
        }
    }
    if (bank) {
        char graph[PATH_MAX];
        snprintf(graph, sizeof graph, "%s", path);
        snprintf(path, sizeof path, "%s/%s%s%s.bank.vindex3", dir, name, dt[0] ? "-" : "", dt);
        vx_err ve = {0};
        if (stat(path, &sb) != 0 && vx_bank_import(graph, path, 0, NULL, &ve) < 0 &&
            stat(path, &sb) != 0) {
            snprintf(err, errsz, "bank import of %.200s: %.300s", graph, ve.msg);
            return -1;
        }
    }
    v->name = strdup(name);
    v->value = strdup(path);
    char use[PATH_MAX + 16], *out = NULL;
    snprintf(use, sizeof use, "USE \"%s\";", path);
    lql_err e;
    int rc = lql_eval(sh->s, use, strlen(use), sh->mode, &out, &e);
    free(out);
    if (rc < 0) { snprintf(err, errsz, "USE %.200s: %.250s", path, e.msg); return -1; }
    return 0;
}

/* The inverse for an output: each variable's value written back as ${NAME} (the longest
 * matching value first), so a note naming the scratch directory or a container's path can
 * be pinned. malloc'd. */
static char *unexpand(const char *text, const var *vars, int nvars)
{
    char *out = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&out, &n);
    if (!f) return NULL;
    for (const char *p = text; *p;) {
        int best = -1;
        size_t bl = 0;
        for (int i = 0; i < nvars; i++) {
            size_t vl = strlen(vars[i].value);
            if (vl > bl && strncmp(p, vars[i].value, vl) == 0) { best = i; bl = vl; }
        }
        if (best >= 0) { fprintf(f, "${%s}", vars[best].name); p += bl; }
        else fputc(*p++, f);
    }
    if (fclose(f) != 0) { free(out); return NULL; }
    return out;
}

/* Replace ${NAME} by the variables' values. malloc'd. */
static char *expand(const char *text, const var *vars, int nvars)
{
    size_t cap = strlen(text) + 1;
    for (int i = 0; i < nvars; i++) cap += strlen(vars[i].value) * 4;
    char *out = malloc(cap), *o = out;
    if (!out) return NULL;
    for (const char *p = text; *p;) {
        int done = 0;
        for (int i = 0; i < nvars && !done; i++) {
            size_t nl = strlen(vars[i].name);
            if (p[0] == '$' && p[1] == '{' && strncmp(p + 2, vars[i].name, nl) == 0 && p[2 + nl] == '}'
                && (size_t)(o - out) + strlen(vars[i].value) < cap) {
                o += sprintf(o, "%s", vars[i].value);
                p += nl + 3;
                done = 1;
            }
        }
        if (!done) *o++ = *p++;
    }
    *o = 0;
    return out;
}

/* ---------------------------------------------------------------- running */

int lql_golden(const char *path, int update)
{
    size_t n;
    char *t = lql_read_file(path, 0, &n);
    if (!t) { printf("%s: cannot read\n0 passed, 1 failed\n", path); return 1; }
    record *recs = NULL;
    int nrec = 0;
    if (split_records(t, n, &recs, &nrec) < 0) { free(t); printf("0 passed, 1 failed\n"); return 1; }
    lql_shell sh;
    if (lql_shell_init(&sh) < 0) { free(t); free(recs); return 1; }
    sh.mode = LQL_OUT_TSV;
    sh.plain_errors = 1;
    int passed = 0, failed = 0;
    var vars[17];
    int nvars = 0;
    /* ${SCRATCH}: a fresh directory for this run's outputs (EXTRACT INTO, SAVE PATCH …) */
    char scratch[PATH_MAX];
    if (cache_dir(scratch, sizeof scratch - 32) == 0) {
        size_t sl = strlen(scratch);
        snprintf(scratch + sl, sizeof scratch - sl, "/scratch-%ld", (long)getpid());
        vars[nvars].name = strdup("SCRATCH");
        vars[nvars].value = strdup(scratch);
        if (vars[nvars].name && vars[nvars].value) nvars++;
    }
    int scratch_made = 0;       /* created when a record first names it */
    char **actual = calloc((size_t)nrec + 1, sizeof *actual);   /* for --update */

    for (int i = 0; i < nrec; i++) {
        record *r = &recs[i];
        char err[600] = "";
        int ok = 1;
        if (strncmp(r->header, "require ", 8) == 0) {
            if (nvars == 17) snprintf(err, sizeof err, "more than 16 require records");
            if (nvars < 17 && require(&sh, r->header, &vars[nvars], err, sizeof err) == 0) nvars++;
            else ok = 0;
            if (!ok) printf("%s:%d: require failed: %s\n", path, r->line, err);
            ok ? passed++ : failed++;
            continue;
        }
        if (!scratch_made && strstr(r->text, "${SCRATCH}")) scratch_made = mkdirs(scratch) == 0;
        char *text = expand(r->text, vars, nvars);
        lql_outmode mode = LQL_OUT_TSV;
        double tol = -1;
        int rowsort = 0, exact = 0, is_query = strncmp(r->header, "query", 5) == 0;
        int want_error = strcmp(r->header, "statement error") == 0;
        if (!is_query && !want_error && strcmp(r->header, "statement ok") != 0) {
            printf("%s:%d: unknown record: %s\n", path, r->line, r->header);
            failed++;
            free(text);
            continue;
        }
        for (char *opt = is_query ? r->header + 5 : NULL; opt && *opt;) {
            while (*opt == ' ') opt++;
            size_t ol = strcspn(opt, " ");
            if (ol == 0) break;
            char o[64];
            snprintf(o, sizeof o, "%.*s", (int)ol, opt);
            if (strncmp(o, "mode=", 5) == 0) {
                if (lql_outmode_parse(o + 5, &mode) < 0) { printf("%s:%d: unknown mode %s\n", path, r->line, o + 5); ok = 0; }
            } else if (strncmp(o, "tol=", 4) == 0) tol = strtod(o + 4, NULL);
            else if (strcmp(o, "rowsort") == 0) rowsort = 1;
            else if (strcmp(o, "exact") == 0) exact = 1;
            else { printf("%s:%d: unknown query option %s\n", path, r->line, o); ok = 0; }
            opt += ol;
        }
        /* the record runs through the shell itself (meta-commands included), stopping at
         * its first error, which is printed without file name or caret */
        char *got = NULL, *acc = NULL, *errs = NULL;
        size_t acclen = 0, errlen = 0;
        sh.out = open_memstream(&acc, &acclen);
        sh.err = open_memstream(&errs, &errlen);
        sh.notes = sh.out;      /* notes and titles inline, where the record's reader sees them */
        sh.mode = mode;
        sh.exact = exact;       /* numbers at display precision unless the record asks */
        sh.bail = 1;
        sh.failed = sh.stop = 0;
        if (sh.out && sh.err && text) lql_shell_run(&sh, path, text, 1);
        else sh.failed = 1;
        if (sh.out) fclose(sh.out);
        if (sh.err) fclose(sh.err);
        sh.out = stdout;
        sh.err = stderr;
        sh.notes = NULL;
        int rc = sh.failed ? -1 : 0;
        got = rc < 0 ? errs : acc;
        if (rc < 0) free(acc); else free(errs);
        if (!got) got = strdup("");
        char *g = got ? unexpand(got, vars, nvars) : NULL;
        if (g) { free(got); got = g; }
        for (size_t gl = got ? strlen(got) : 0; gl && got[gl - 1] == '\n';) got[--gl] = 0;
        if (ok && want_error) {
            if (rc == 0) { printf("%s:%d: statement succeeded, expected an error\n", path, r->line); ok = 0; }
            else if (r->expected && strcmp(r->expected, got) != 0) {
                printf("%s:%d: statement failed with a different error\n", path, r->line);
                print_diff(r->expected, got);
                ok = 0;
            } else if (!r->expected) {
                printf("%s:%d: statement error needs the expected error after ----\n", path, r->line);
                ok = 0;
            }
        } else if (ok && !is_query) {
            if (rc < 0) { printf("%s:%d: statement failed: %s\n", path, r->line, got); ok = 0; }
        } else if (ok) {
            if (rc < 0) { printf("%s:%d: query failed: %s\n", path, r->line, got); ok = 0; }
            else {
                char *a = rowsort ? rowsorted(got) : strdup(got);
                char *b = rowsort ? rowsorted(r->expected ? r->expected : "") : strdup(r->expected ? r->expected : "");
                if (!a || !b || !same(b, a, tol)) {
                    printf("%s:%d: query failed\n", path, r->line);
                    print_diff(r->expected ? r->expected : "", got);
                    ok = 0;
                }
                free(a);
                free(b);
            }
        }
        if (update && (is_query || want_error) && rc == (want_error ? -1 : 0)) actual[i] = strdup(got);
        free(got);
        free(text);
        ok ? passed++ : failed++;
    }

    if (update) {
        /* rewrite each query / statement error block with what ran */
        FILE *f = fopen(path, "wb");
        size_t pos = 0;
        for (int i = 0; f && i < nrec; i++) {
            if (!actual[i] || !recs[i].expected) continue;
            fwrite(t + pos, 1, recs[i].exp_start - pos, f);
            fprintf(f, "%s\n", actual[i]);
            /* resume after the old block's last line, keeping the blank lines after it */
            size_t b = recs[i].exp_end;
            while (b > recs[i].exp_start && t[b - 1] == '\n') b--;
            pos = b == recs[i].exp_start ? b : b < n ? b + 1 : n;
        }
        if (f) { fwrite(t + pos, 1, n - pos, f); fclose(f); }
        printf("%s: expected blocks rewritten; review with git diff\n", path);
    }
    printf("%d passed, %d failed\n", passed, failed);
    for (int i = 0; i < nrec; i++) {
        free(recs[i].header); free(recs[i].text); free(recs[i].expected); free(actual[i]);
    }
    for (int i = 0; i < nvars; i++) { free(vars[i].name); free(vars[i].value); }
    free(actual);
    free(recs);
    free(t);
    lql_shell_close(&sh);
    return failed ? 1 : 0;
}
