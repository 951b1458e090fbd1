/*
 * result.h — what every statement returns: zero or more tables (named, typed columns)
 * plus notes. No statement prints; one renderer (render.c) turns results into table /
 * tsv / csv / json / jsonl text.
 *
 * Ownership: a lql_result owns its tables, cells and strings (copied in). Free with
 * lql_result_free. Numbers are stored as numbers; a float column carries its printing
 * precision (digits after the point) so every mode prints the same fixed text.
 */
#ifndef LQL_RESULT_H
#define LQL_RESULT_H

#include <stddef.h>
#include <stdint.h>

typedef enum lql_coltype { LQL_INT, LQL_FLOAT, LQL_TEXT } lql_coltype;

typedef struct lql_colspec {
    const char *name;
    lql_coltype type;
    int precision;           /* LQL_FLOAT: digits after the point; -d: d digits, but a
                              * nonzero value they would show as zero in 3 significant
                              * digits (a probability of 1.4e-12 is not 0.0000) */
} lql_colspec;

typedef struct lql_table lql_table;
typedef struct lql_result lql_result;

lql_result *lql_result_new(void);
void lql_result_free(lql_result *r);

/* Add a table (title may be NULL). Returns NULL only on out-of-memory. */
lql_table *lql_result_table(lql_result *r, const char *title, int ncols,
                            const lql_colspec *cols);
/* Remove every table added so far (notes stay): a statement whose tables would claim what
 * its failure undid, such as an edit that could not be journaled. */
void lql_result_drop_tables(lql_result *r);
/* Append a note line (printed after the tables; "-- " prefixed in tsv/csv). */
void lql_result_note(lql_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Append a row: call lql_row() then exactly ncols cell calls in column order. */
void lql_row(lql_table *t);
void lql_cell_int(lql_table *t, int64_t v);
void lql_cell_float(lql_table *t, double v);
void lql_cell_text(lql_table *t, const char *s);   /* NULL prints as empty */
/* n bytes of s, which may hold NULs (decoded text): printed escaped, \u0000 in json. */
void lql_cell_textn(lql_table *t, const char *s, size_t n);
void lql_cell_null(lql_table *t);

/* Readers, for the renderer and tests. */
size_t lql_result_ntables(const lql_result *r);
const lql_table *lql_result_table_at(const lql_result *r, size_t i);
size_t lql_result_nnotes(const lql_result *r);
const char *lql_result_note_at(const lql_result *r, size_t i);
const char *lql_table_title(const lql_table *t);
int lql_table_ncols(const lql_table *t);
const lql_colspec *lql_table_col(const lql_table *t, int c);
size_t lql_table_nrows(const lql_table *t);
/* Cell text exactly as every mode prints it (numbers formatted with the column's
 * precision; NULL cells as ""). Pointer valid while the result lives. */
const char *lql_table_cell(const lql_table *t, size_t row, int col);
/* The same with the text's length in *len (a decoded token can hold a NUL). */
const char *lql_table_celln(const lql_table *t, size_t row, int col, size_t *len);
int lql_table_cell_is_null(const lql_table *t, size_t row, int col);

#endif
