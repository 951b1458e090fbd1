/*
 * render.c — result sets as text (render.h gives each mode's rules). lql_render goes
 * through an open_memstream buffer so the shell, the golden runner and the tests see the
 * same bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>

#include "render.h"
#include "render_int.h"

static const char *const mode_names[] = {
#define X(m, name) name,
    LQL_OUTMODES(X)
#undef X
};

const char *lql_outmode_name(lql_outmode m)
{
    return (unsigned)m < LQL_OUT_COUNT ? mode_names[m] : "?";
}

int lql_outmode_parse(const char *name, lql_outmode *out)
{
    for (int m = 0; m < LQL_OUT_COUNT; m++)
        if (strcasecmp(name, mode_names[m]) == 0) { *out = (lql_outmode)m; return 0; }
    return -1;
}

int lql_outmode_human(lql_outmode m)
{
    return m == LQL_OUT_TABLE || m == LQL_OUT_BOX || m == LQL_OUT_MARKDOWN;
}

/* A cell's text and its length (decoded text can hold a NUL): a float column's number
 * round-trips when exact, else the stored text. */
static const char *cell(const lql_table *t, size_t r, int c, int exact, char *buf, size_t n,
                        size_t *len)
{
    const lql_cell *x = &t->cells[r * (size_t)t->ncols + (size_t)c];
    if (exact && !x->null && t->cols[c].type == LQL_FLOAT) {
        lql_format_exact(x->num, buf, n);
        *len = strlen(buf);
        return buf;
    }
    return lql_table_celln(t, r, c, len);
}

/* ---------------------------------------------------------------- table, box, markdown */

/* Display width in terminal columns (invalid UTF-8 bytes count one each). Stops at the
 * byte where the width would pass max (max < 0: no limit); *cut receives that offset. */
static int width_upto(const char *s, int max, size_t *cut)
{
    int w = 0;
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    while (*p) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p, -1, &cp);
        int cw = 1;
        if (k <= 0) k = 1;
        else cw = utf8proc_charwidth(cp) > 0 ? utf8proc_charwidth(cp) : 0;
        if (max >= 0 && w + cw > max) break;
        w += cw;
        p += k;
    }
    if (cut) *cut = (size_t)(p - (const utf8proc_uint8_t *)s);
    return w;
}

static int width(const char *s) { return width_upto(s, -1, NULL); }

/* Text of a cell for the people modes: control characters made visible, `|` escaped in
 * markdown, cut to `cut` columns with "…" (0: no limit). malloc'd. */
static char *visible(const char *s, size_t n, int md, int cut)
{
    char *v = malloc(n * 4 + 4), *o = v;
    if (!v) return NULL;
    for (const char *e = s + n; s < e; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n') { *o++ = '\\'; *o++ = 'n'; }
        else if (c == '\t') { *o++ = '\\'; *o++ = 't'; }
        else if (c == '\r') { *o++ = '\\'; *o++ = 'r'; }
        else if (c < 0x20 || c == 0x7f) o += sprintf(o, "\\x%02x", c);
        else if (c == '|' && md) { *o++ = '\\'; *o++ = '|'; }
        else *o++ = (char)c;
    }
    *o = 0;
    size_t at;
    if (cut > 1 && width(v) > cut) {
        width_upto(v, cut - 1, &at);
        memcpy(v + at, "…", sizeof "…");
    }
    return v;
}

static void pad(FILE *f, int n)
{
    while (n-- > 0) fputc(' ', f);
}

static void rep(FILE *f, const char *s, int n)
{
    while (n-- > 0) fputs(s, f);
}

/* One line of cells: numbers right-aligned, text left; between cells `sep`, around the
 * row `left` and `right` (table: two blanks between, nothing around). */
static void grid_line(FILE *f, const lql_table *t, char **v, const int *w, const char *left,
                      const char *sep, const char *right)
{
    fputs(left, f);
    for (int c = 0; c < t->ncols; c++) {
        const char *s = v[c] ? v[c] : "";
        int num = t->cols[c].type != LQL_TEXT, cw = width(s), last = c + 1 == t->ncols;
        if (num) pad(f, w[c] - cw);
        fputs(s, f);
        if (!num && (!last || *right)) pad(f, w[c] - cw);
        fputs(last ? right : sep, f);
    }
    fputc('\n', f);
}

static void box_rule(FILE *f, const int *w, int nc, const char *l, const char *m, const char *r)
{
    fputs(l, f);
    for (int c = 0; c < nc; c++) { rep(f, "─", w[c] + 2); fputs(c + 1 < nc ? m : r, f); }
    fputc('\n', f);
}

static void render_grid(FILE *f, const lql_table *t, const lql_render_opts *o)
{
    size_t nrows = lql_table_nrows(t);
    int nc = t->ncols, md = o->mode == LQL_OUT_MARKDOWN, box = o->mode == LQL_OUT_BOX;
    int cut = md ? 0 : o->width, head = md || !o->noheader;
    char **cells = calloc((nrows + 1) * (size_t)nc, sizeof *cells);
    int *w = calloc((size_t)nc, sizeof *w);
    if (!cells || !w) { free(cells); free(w); fputs("(out of memory)\n", f); return; }
    for (size_t r = 0; r <= nrows; r++)
        for (int c = 0; c < nc; c++) {
            size_t n = 0;
            const char *s = r == 0 ? t->cols[c].name : lql_table_celln(t, r - 1, c, &n);
            if (r == 0) n = strlen(s);
            char *v = visible(s, n, md, t->cols[c].type == LQL_TEXT ? cut : 0);   /* numbers whole */
            cells[r * (size_t)nc + (size_t)c] = v;
            int cw = v ? width(v) : 0;
            if ((r > 0 || head) && cw > w[c]) w[c] = cw;
        }
    if (md) for (int c = 0; c < nc; c++) if (w[c] < 3) w[c] = 3;
    if (t->title) fprintf(f, "%s\n", t->title);
    const char *l = md ? "| " : box ? "│ " : "", *s = md ? " | " : box ? " │ " : "  ";
    const char *rr = md ? " |" : box ? " │" : "";
    if (box) box_rule(f, w, nc, "┌", "┬", "┐");
    if (head) {
        grid_line(f, t, cells, w, l, s, rr);
        if (box) box_rule(f, w, nc, "├", "┼", "┤");
        else {
            fputs(md ? "|" : "", f);
            for (int c = 0; c < nc; c++) {
                int num = md && t->cols[c].type != LQL_TEXT;
                rep(f, "-", w[c] + (md ? 2 : 0) - num);
                if (num) fputc(':', f);
                fputs(md ? "|" : c + 1 < nc ? "  " : "", f);
            }
            fputc('\n', f);
        }
    }
    for (size_t r = 1; r <= nrows; r++) grid_line(f, t, cells + r * (size_t)nc, w, l, s, rr);
    if (box) box_rule(f, w, nc, "└", "┴", "┘");
    if (o->mode == LQL_OUT_TABLE) fprintf(f, "(%zu row%s)\n", nrows, nrows == 1 ? "" : "s");
    for (size_t i = 0; i < (nrows + 1) * (size_t)nc; i++) free(cells[i]);
    free(cells);
    free(w);
}

/* ---------------------------------------------------------------- tsv, csv */

static void tsv_field(FILE *f, const char *s, size_t n)
{
    for (const char *e = s + n; s < e; s++) {
        switch (*s) {
        case '\0': fputs("\\0", f); break;
        case '\t': fputs("\\t", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\\': fputs("\\\\", f); break;
        default: fputc(*s, f);
        }
    }
}

static void csv_field(FILE *f, const char *s, size_t n)
{
    int quote = 0;
    for (size_t i = 0; i < n; i++)
        quote |= s[i] == ',' || s[i] == '"' || s[i] == '\r' || s[i] == '\n';
    if (!quote) { fwrite(s, 1, n, f); return; }
    fputc('"', f);
    for (const char *e = s + n; s < e; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void render_sep(FILE *f, FILE *notes, const lql_table *t, const lql_render_opts *o)
{
    int csv = o->mode == LQL_OUT_CSV;
    const char *sep = csv ? "," : "\t", *eol = csv ? "\r\n" : "\n";
    void (*field)(FILE *, const char *, size_t) = csv ? csv_field : tsv_field;
    char buf[40];
    if (t->title) {
        if (notes != f) fflush(f);          /* in order when both streams reach one terminal */
        fprintf(notes, "-- %s%s", t->title, notes == f ? eol : "\n");
    }
    if (!o->noheader) {
        for (int c = 0; c < t->ncols; c++) {
            if (c) fputs(sep, f);
            field(f, t->cols[c].name, strlen(t->cols[c].name));
        }
        fputs(eol, f);
    }
    size_t nrows = lql_table_nrows(t);
    for (size_t r = 0; r < nrows; r++) {
        for (int c = 0; c < t->ncols; c++) {
            if (c) fputs(sep, f);
            size_t n;
            const char *v = cell(t, r, c, o->exact, buf, sizeof buf, &n);
            field(f, v, n);
        }
        fputs(eol, f);
    }
}

/* ---------------------------------------------------------------- json */

/* n bytes of s as a JSON string (a NUL is \u0000). */
static void json_stringn(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s, *e = p + n;
    while (p < e) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p, e - p, &cp);
        if (k <= 0) { fputs("\\ufffd", f); p++; continue; }   /* invalid UTF-8 byte */
        if (cp == '"') fputs("\\\"", f);
        else if (cp == '\\') fputs("\\\\", f);
        else if (cp == '\n') fputs("\\n", f);
        else if (cp == '\t') fputs("\\t", f);
        else if (cp == '\r') fputs("\\r", f);
        else if (cp < 0x20 || cp == 0x2028 || cp == 0x2029) fprintf(f, "\\u%04x", (unsigned)cp);
        else fwrite(p, 1, (size_t)k, f);
        p += k;
    }
    fputc('"', f);
}

static void json_string(FILE *f, const char *s)
{
    json_stringn(f, s, strlen(s));
}

char *lql_json_quote(const char *s, size_t n)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f) return NULL;
    json_stringn(f, s, n);
    if (fclose(f) != 0) { free(out); return NULL; }
    return out;
}

static void json_value(FILE *f, const lql_table *t, size_t r, int c, int exact)
{
    char buf[40];
    size_t n;
    const char *v = cell(t, r, c, exact, buf, sizeof buf, &n);
    if (lql_table_cell_is_null(t, r, c)) fputs("null", f);
    else if (t->cols[c].type == LQL_TEXT) json_stringn(f, v, n);
    else if (strcmp(v, "nan") == 0 || strcmp(v, "inf") == 0 || strcmp(v, "-inf") == 0) fputs("null", f);
    else fputs(v, f);
}

/* A row object's keys are unique: a column named like an earlier one (SELECT token, TOKEN)
 * is keyed "name_2", "name_3", …; a json reader would keep only one of two equal names. */
static void json_key(FILE *f, const lql_table *t, int c)
{
    int seen = 1;
    for (int k = 0; k < c; k++) seen += strcmp(t->cols[k].name, t->cols[c].name) == 0;
    if (seen == 1) {
        json_string(f, t->cols[c].name);
        return;
    }
    char key[160];
    snprintf(key, sizeof key, "%.120s_%d", t->cols[c].name, seen);
    json_string(f, key);
}

static void json_row(FILE *f, const lql_table *t, size_t r, int exact)
{
    fputc('{', f);
    for (int c = 0; c < t->ncols; c++) {
        if (c) fputs(", ", f);
        json_key(f, t, c);
        fputs(": ", f);
        json_value(f, t, r, c, exact);
    }
    fputc('}', f);
}

static const char *const type_names[] = {"int", "float", "text"};

/* {"title": …, "columns": [{"name", "type"}], "rows": [{…}]} */
static void json_table(FILE *f, const lql_table *t, int exact)
{
    fputs("{\"title\": ", f);
    if (t->title) json_string(f, t->title);
    else fputs("null", f);
    if (t->oom) { fputs(", \"error\": \"out of memory: table incomplete\"}", f); return; }
    fputs(", \"columns\": [", f);
    for (int c = 0; c < t->ncols; c++) {
        fputs(c ? ", {\"name\": " : "{\"name\": ", f);
        json_string(f, t->cols[c].name);
        fprintf(f, ", \"type\": \"%s\"}", type_names[t->cols[c].type]);
    }
    fputs("], \"rows\": [", f);
    for (size_t r = 0; r < lql_table_nrows(t); r++) {
        if (r) fputs(", ", f);
        json_row(f, t, r, exact);
    }
    fputs("]}", f);
}

void lql_render_frame(FILE *f, const lql_result *r, const lql_render_opts *o, const char *stmt,
                      size_t nstmt, const char *errmsg, int line, int col)
{
    fputs("{\"statement\": ", f);
    if (stmt) {
        char *s = strndup(stmt, nstmt);
        if (s) json_string(f, s);
        else fputs("null", f);
        free(s);
    } else fputs("null", f);
    fputs(", \"tables\": [", f);
    for (size_t i = 0; i < lql_result_ntables(r); i++) {
        if (i) fputs(", ", f);
        json_table(f, r->tables[i], o->exact);
    }
    fputs("], \"notes\": [", f);
    for (size_t i = 0; i < lql_result_nnotes(r); i++) {
        if (i) fputs(", ", f);
        json_string(f, r->notes[i]);
    }
    fputs("], \"error\": ", f);
    if (errmsg) {
        fputs("{\"message\": ", f);
        json_string(f, errmsg);
        fprintf(f, ", \"line\": %d, \"col\": %d}", line, col);
    } else fputs("null", f);
    fputs("}\n", f);
}

/* ---------------------------------------------------------------- driver */

void lql_render_to(const lql_result *r, const lql_render_opts *o, FILE *out, FILE *notes)
{
    lql_outmode m = o->mode;
    int human = lql_outmode_human(m);
    if (m == LQL_OUT_JSON) { lql_render_frame(out, r, o, NULL, 0, NULL, 0, 0); return; }
    for (size_t i = 0; i < lql_result_ntables(r); i++) {
        const lql_table *t = r->tables[i];
        if (i && m != LQL_OUT_JSONL) fputs(m == LQL_OUT_CSV ? "\r\n" : "\n", out);
        if (t->oom) {
            fputs(m == LQL_OUT_JSONL ? "{\"error\": \"out of memory: table incomplete\"}\n"
                                     : "-- out of memory: table incomplete\n", out);
            continue;
        }
        if (human) render_grid(out, t, o);
        else if (m == LQL_OUT_JSONL) {
            if (t->title) { fflush(out); fprintf(notes, "-- %s\n", t->title); }
            for (size_t k = 0; k < lql_table_nrows(t); k++) { json_row(out, t, k, o->exact); fputc('\n', out); }
        } else render_sep(out, notes, t, o);
    }
    /* notes: with the tables for people, on the notes stream for programs (after the
     * tables even when both streams go to one place) */
    if (!human && notes != out && lql_result_nnotes(r)) fflush(out);
    for (size_t i = 0; i < lql_result_nnotes(r); i++) {
        /* one line each: a control character a note quotes (a path holding a newline)
         * is shown as a cell would show it */
        char *v = visible(r->notes[i], strlen(r->notes[i]), 0, 0);
        const char *s = v ? v : r->notes[i];
        if (human) fprintf(out, "%s\n", s);
        else fprintf(notes, "-- %s%s", s, m == LQL_OUT_CSV && notes == out ? "\r\n" : "\n");
        free(v);
    }
}

char *lql_render(const lql_result *r, lql_outmode m)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    lql_render_opts o = {m, 0, 0, 0};
    lql_render_to(r, &o, f, f);
    if (fclose(f) != 0) { free(buf); return NULL; }
    return buf;
}
