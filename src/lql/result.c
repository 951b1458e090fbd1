/*
 * result.c — result sets (result.h): tables of typed cells plus notes. Each cell is
 * formatted once, when added, into the text every output mode prints, so the modes cannot
 * disagree about a number. Number formatting: integers in plain decimal; floats in fixed
 * point with the column's precision ("%.*f"), a negative zero printed without its sign,
 * or, for a column of -d digits, a nonzero value they would round to zero in "%.2e",
 * non-finite values as nan / inf / -inf (null in JSON).
 *
 * Out-of-memory never crashes: the table stops growing and its `oom` flag is set; the
 * renderer then prints an error note instead of a partial table.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "result.h"
#include "render_int.h"

lql_result *lql_result_new(void)
{
    return calloc(1, sizeof(lql_result));
}

void lql_result_drop_tables(lql_result *r)
{
    for (size_t i = 0; i < r->ntables; i++) {
        lql_table *t = r->tables[i];
        for (size_t k = 0; k < t->ncells; k++) free(t->cells[k].text);
        for (int c = 0; c < t->ncols; c++) free(t->names[c]);
        free(t->cells); free(t->cols); free(t->names); free(t->title);
        free(t);
    }
    r->ntables = 0;
}

void lql_result_free(lql_result *r)
{
    if (!r) return;
    lql_result_drop_tables(r);
    for (size_t i = 0; i < r->nnotes; i++) free(r->notes[i]);
    free(r->tables); free(r->notes);
    free(r);
}

static char *dup(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

lql_table *lql_result_table(lql_result *r, const char *title, int ncols, const lql_colspec *cols)
{
    if (!r || ncols <= 0) return NULL;
    lql_table **tables = realloc(r->tables, (r->ntables + 1) * sizeof *tables);
    if (!tables) return NULL;
    r->tables = tables;
    lql_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cols = calloc((size_t)ncols, sizeof *t->cols);
    t->names = calloc((size_t)ncols, sizeof *t->names);
    t->title = title ? dup(title) : NULL;
    if (!t->cols || !t->names || (title && !t->title)) {
        free(t->cols); free(t->names); free(t->title); free(t);
        return NULL;
    }
    t->ncols = ncols;
    for (int c = 0; c < ncols; c++) {
        t->cols[c] = cols[c];
        t->names[c] = dup(cols[c].name ? cols[c].name : "");
        if (!t->names[c]) t->oom = 1;
        t->cols[c].name = t->names[c] ? t->names[c] : "";
    }
    r->tables[r->ntables++] = t;
    return t;
}

void lql_result_note(lql_result *r, const char *fmt, ...)
{
    if (!r) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **notes = realloc(r->notes, (r->nnotes + 1) * sizeof *notes);
    if (!notes) return;
    r->notes = notes;
    if ((r->notes[r->nnotes] = dup(buf))) r->nnotes++;
}

void lql_row(lql_table *t)
{
    if (!t || t->oom) return;
    if (t->nrows && t->ncells != t->nrows * (size_t)t->ncols) {
        t->oom = 1;             /* the previous row was short: a caller bug, shown not hidden */
        return;
    }
    size_t need = (t->nrows + 1) * (size_t)t->ncols;
    if (need > t->capcells) {
        size_t cap = t->capcells ? t->capcells * 2 : (size_t)t->ncols * 16;
        while (cap < need) cap *= 2;
        lql_cell *cells = realloc(t->cells, cap * sizeof *cells);
        if (!cells) { t->oom = 1; return; }
        t->cells = cells;
        t->capcells = cap;
    }
    t->nrows++;
}

static void putn(lql_table *t, char *text, size_t len, int null, double num)
{
    if (!t || t->oom) { free(text); return; }
    if (t->nrows == 0 || t->ncells >= t->nrows * (size_t)t->ncols) {
        free(text);
        t->oom = 1;             /* more cells than columns */
        return;
    }
    if (!text && !null) { t->oom = 1; return; }
    lql_cell *c = &t->cells[t->ncells++];
    c->text = text;
    c->len = len;
    c->null = null;
    c->num = num;
}

static void put(lql_table *t, char *text, int null, double num)
{
    putn(t, text, text ? strlen(text) : 0, null, num);
}

void lql_cell_int(lql_table *t, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    put(t, dup(buf), 0, (double)v);
}

/* Fixed-point text of v with `prec` digits; "-0.00" loses its sign. */
void lql_format_float(double v, int prec, char *buf, size_t n)
{
    if (isnan(v)) { snprintf(buf, n, "nan"); return; }
    if (isinf(v)) { snprintf(buf, n, v < 0 ? "-inf" : "inf"); return; }
    if (prec < 0) {
        prec = -prec;
        if (v != 0 && fabs(v) < 0.5 * pow(10, -prec)) { snprintf(buf, n, "%.2e", v); return; }
    }
    if (prec > 17) prec = 17;
    snprintf(buf, n, "%.*f", prec, v);
    if (buf[0] == '-' && strspn(buf + 1, "0.") == strlen(buf + 1)) memmove(buf, buf + 1, strlen(buf));
}

void lql_format_exact(double v, char *buf, size_t n)
{
    if (!isfinite(v)) { lql_format_float(v, 0, buf, n); return; }
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* %g writes 100 as "1e+02" when one digit suffices; those digits are written out in full
     * where Python's repr would (decimal exponent -4 to 15): 100, not 1e+02 */
    const char *e = strchr(buf, 'e');
    int ex = e ? atoi(e + 1) : 0;
    if (e && ex >= -4 && ex < 16)
        snprintf(buf, n, "%.*f", prec - 1 - ex > 0 ? prec - 1 - ex : 0, v);
}

void lql_cell_float(lql_table *t, double v)
{
    if (!t || t->oom || t->ncols == 0) return;
    int col = (int)(t->ncells % (size_t)t->ncols);
    char buf[400];
    lql_format_float(v, t->cols[col].type == LQL_FLOAT ? t->cols[col].precision : 6, buf, sizeof buf);
    put(t, dup(buf), 0, v);
}

void lql_cell_text(lql_table *t, const char *s)
{
    if (!s) { put(t, NULL, 1, 0); return; }
    put(t, dup(s), 0, 0);
}

void lql_cell_textn(lql_table *t, const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = 0; }
    putn(t, d, n, 0, 0);
}

void lql_cell_null(lql_table *t)
{
    put(t, NULL, 1, 0);
}

size_t lql_result_ntables(const lql_result *r) { return r ? r->ntables : 0; }
const lql_table *lql_result_table_at(const lql_result *r, size_t i)
{
    return r && i < r->ntables ? r->tables[i] : NULL;
}
size_t lql_result_nnotes(const lql_result *r) { return r ? r->nnotes : 0; }
const char *lql_result_note_at(const lql_result *r, size_t i)
{
    return r && i < r->nnotes ? r->notes[i] : NULL;
}
const char *lql_table_title(const lql_table *t) { return t ? t->title : NULL; }
int lql_table_ncols(const lql_table *t) { return t ? t->ncols : 0; }
const lql_colspec *lql_table_col(const lql_table *t, int c)
{
    return t && c >= 0 && c < t->ncols ? &t->cols[c] : NULL;
}
/* Complete rows only: a row whose cells were not all added is not counted. */
size_t lql_table_nrows(const lql_table *t)
{
    return t && t->ncols ? t->ncells / (size_t)t->ncols : 0;
}
const char *lql_table_celln(const lql_table *t, size_t row, int col, size_t *len)
{
    *len = 0;
    if (!t || col < 0 || col >= t->ncols || row >= lql_table_nrows(t)) return "";
    const lql_cell *c = &t->cells[row * (size_t)t->ncols + (size_t)col];
    if (c->null || !c->text) return "";
    *len = c->len;
    return c->text;
}
const char *lql_table_cell(const lql_table *t, size_t row, int col)
{
    size_t len;
    return lql_table_celln(t, row, col, &len);
}
int lql_table_cell_is_null(const lql_table *t, size_t row, int col)
{
    if (!t || col < 0 || col >= t->ncols || row >= lql_table_nrows(t)) return 1;
    return t->cells[row * (size_t)t->ncols + (size_t)col].null;
}
