/*
 * render_int.h — the layout of result sets, shared by result.c (building) and render.c
 * (printing) only.
 */
#ifndef LQL_RENDER_INT_H
#define LQL_RENDER_INT_H

#include <stddef.h>

#include "result.h"

typedef struct lql_cell {
    char *text;             /* as printed; NULL for a null cell */
    size_t len;             /* text's bytes: a decoded token can hold a NUL */
    int null;
    double num;             /* the value of a numeric cell */
} lql_cell;

struct lql_table {
    char *title;
    int ncols;
    lql_colspec *cols;      /* names point into `names` */
    char **names;
    lql_cell *cells;        /* row-major, ncols per row */
    size_t ncells, capcells, nrows;
    int oom;                /* a cell could not be stored: the table is incomplete */
};

struct lql_result {
    lql_table **tables;
    size_t ntables;
    char **notes;
    size_t nnotes;
};

void lql_format_float(double v, int prec, char *buf, size_t n);
/* The shortest text that parses back to exactly v, in positional form for decimal exponents
 * -4 to 15 as Python's repr (100, not 1e+02); nan / inf / -inf as words. */
void lql_format_exact(double v, char *buf, size_t n);

#endif
