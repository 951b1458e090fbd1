/*
 * render.c — result sets as text (render.h gives each mode's rules). Everything goes
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

/* ---------------------------------------------------------------- table */

/* Text of a cell for table mode: control characters made visible. malloc'd. */
static char *visible(const char *s)
{
    size_t n = strlen(s);
    char *v = malloc(n * 4 + 1), *o = v;
    if (!v) return NULL;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n') { *o++ = '\\'; *o++ = 'n'; }
        else if (c == '\t') { *o++ = '\\'; *o++ = 't'; }
        else if (c == '\r') { *o++ = '\\'; *o++ = 'r'; }
        else if (c < 0x20 || c == 0x7f) o += sprintf(o, "\\x%02x", c);
        else *o++ = (char)c;
    }
    *o = 0;
    return v;
}

/* Display width in terminal columns (invalid UTF-8 bytes count one each). */
static int width(const char *s)
{
    int w = 0;
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    while (*p) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p, -1, &cp);
        if (k <= 0) { w++; p++; continue; }
        int cw = utf8proc_charwidth(cp);
        w += cw > 0 ? cw : 0;
        p += k;
    }
    return w;
}

static void pad(FILE *f, int n)
{
    while (n-- > 0) fputc(' ', f);
}

static void render_table(FILE *f, const lql_table *t)
{
    size_t nrows = lql_table_nrows(t);
    int nc = t->ncols;
    char **cells = calloc(nrows * (size_t)nc + 1, sizeof *cells);
    int *w = calloc((size_t)nc, sizeof *w);
    if (!cells || !w) { free(cells); free(w); fputs("(out of memory)\n", f); return; }
    for (int c = 0; c < nc; c++) w[c] = width(t->cols[c].name);
    for (size_t r = 0; r < nrows; r++)
        for (int c = 0; c < nc; c++) {
            char *v = visible(lql_table_cell(t, r, c));
            cells[r * (size_t)nc + (size_t)c] = v;
            int cw = v ? width(v) : 0;
            if (cw > w[c]) w[c] = cw;
        }
    if (t->title) fprintf(f, "%s\n", t->title);
    for (int c = 0; c < nc; c++) {
        int num = t->cols[c].type != LQL_TEXT;
        int cw = width(t->cols[c].name);
        if (num) pad(f, w[c] - cw);
        fputs(t->cols[c].name, f);
        if (c + 1 < nc) { if (!num) pad(f, w[c] - cw); fputs("  ", f); }
    }
    fputc('\n', f);
    for (int c = 0; c < nc; c++) {
        for (int i = 0; i < w[c]; i++) fputc('-', f);
        if (c + 1 < nc) fputs("  ", f);
    }
    fputc('\n', f);
    for (size_t r = 0; r < nrows; r++) {
        for (int c = 0; c < nc; c++) {
            const char *v = cells[r * (size_t)nc + (size_t)c];
            if (!v) v = "";
            int num = t->cols[c].type != LQL_TEXT, cw = width(v);
            if (num) pad(f, w[c] - cw);
            fputs(v, f);
            if (c + 1 < nc) { if (!num) pad(f, w[c] - cw); fputs("  ", f); }
        }
        fputc('\n', f);
    }
    fprintf(f, "(%zu row%s)\n", nrows, nrows == 1 ? "" : "s");
    for (size_t i = 0; i < nrows * (size_t)nc; i++) free(cells[i]);
    free(cells);
    free(w);
}

/* ---------------------------------------------------------------- tsv, csv */

static void tsv_field(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '\t': fputs("\\t", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\\': fputs("\\\\", f); break;
        default: fputc(*s, f);
        }
    }
}

static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) { fputs(s, f); return; }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void render_sep(FILE *f, const lql_table *t, int csv)
{
    const char *sep = csv ? "," : "\t", *eol = csv ? "\r\n" : "\n";
    void (*field)(FILE *, const char *) = csv ? csv_field : tsv_field;
    if (t->title) fprintf(f, "-- %s%s", t->title, eol);
    for (int c = 0; c < t->ncols; c++) {
        if (c) fputs(sep, f);
        field(f, t->cols[c].name);
    }
    fputs(eol, f);
    size_t nrows = lql_table_nrows(t);
    for (size_t r = 0; r < nrows; r++) {
        for (int c = 0; c < t->ncols; c++) {
            if (c) fputs(sep, f);
            field(f, lql_table_cell(t, r, c));
        }
        fputs(eol, f);
    }
}

/* ---------------------------------------------------------------- json */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    while (*p) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p, -1, &cp);
        if (k <= 0) { fputs("\\ufffd", f); p++; continue; }   /* invalid UTF-8 byte */
        if (cp == '"') fputs("\\\"", f);
        else if (cp == '\\') fputs("\\\\", f);
        else if (cp == '\n') fputs("\\n", f);
        else if (cp == '\t') fputs("\\t", f);
        else if (cp == '\r') fputs("\\r", f);
        else if (cp < 0x20) fprintf(f, "\\u%04x", (unsigned)cp);
        else fwrite(p, 1, (size_t)k, f);
        p += k;
    }
    fputc('"', f);
}

static void json_value(FILE *f, const lql_table *t, size_t r, int c)
{
    const char *v = lql_table_cell(t, r, c);
    if (lql_table_cell_is_null(t, r, c)) fputs("null", f);
    else if (t->cols[c].type == LQL_TEXT) json_string(f, v);
    else if (strcmp(v, "nan") == 0 || strcmp(v, "inf") == 0 || strcmp(v, "-inf") == 0) fputs("null", f);
    else fputs(v, f);
}

static void json_row(FILE *f, const lql_table *t, size_t r)
{
    fputc('{', f);
    for (int c = 0; c < t->ncols; c++) {
        if (c) fputs(", ", f);
        json_string(f, t->cols[c].name);
        fputs(": ", f);
        json_value(f, t, r, c);
    }
    fputc('}', f);
}

static void render_json(FILE *f, const lql_table *t)
{
    size_t nrows = lql_table_nrows(t);
    fputs(nrows ? "[\n" : "[]\n", f);
    for (size_t r = 0; r < nrows; r++) {
        fputs("  ", f);
        json_row(f, t, r);
        fputs(r + 1 < nrows ? ",\n" : "\n]\n", f);
    }
}

/* ---------------------------------------------------------------- driver */

char *lql_render(const lql_result *r, lql_outmode m)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    for (size_t i = 0; i < lql_result_ntables(r); i++) {
        const lql_table *t = r->tables[i];
        if (i && (m == LQL_OUT_TABLE || m == LQL_OUT_TSV)) fputc('\n', f);
        if (i && m == LQL_OUT_CSV) fputs("\r\n", f);
        if (t->oom) {
            fputs(m == LQL_OUT_JSON || m == LQL_OUT_JSONL ? "{\"error\": \"out of memory\"}\n"
                                                          : "-- out of memory: table incomplete\n", f);
            continue;
        }
        switch (m) {
        case LQL_OUT_TABLE: render_table(f, t); break;
        case LQL_OUT_TSV: render_sep(f, t, 0); break;
        case LQL_OUT_CSV: render_sep(f, t, 1); break;
        case LQL_OUT_JSON: render_json(f, t); break;
        case LQL_OUT_JSONL:
            for (size_t k = 0; k < lql_table_nrows(t); k++) { json_row(f, t, k); fputc('\n', f); }
            break;
        default: break;
        }
    }
    size_t nn = lql_result_nnotes(r);
    if (nn && m == LQL_OUT_JSON) {
        fputs("{\"notes\": [", f);
        for (size_t i = 0; i < nn; i++) {
            if (i) fputs(", ", f);
            json_string(f, r->notes[i]);
        }
        fputs("]}\n", f);
    } else {
        for (size_t i = 0; i < nn; i++) {
            switch (m) {
            case LQL_OUT_TABLE: fprintf(f, "%s\n", r->notes[i]); break;
            case LQL_OUT_TSV: fprintf(f, "-- %s\n", r->notes[i]); break;
            case LQL_OUT_CSV: fprintf(f, "-- %s\r\n", r->notes[i]); break;
            case LQL_OUT_JSONL: fputs("{\"note\": ", f); json_string(f, r->notes[i]); fputs("}\n", f); break;
            default: break;
            }
        }
    }
    if (fclose(f) != 0) { free(buf); return NULL; }
    return buf;
}
