/*
 * render.h — the one renderer: a result set (result.h) as text in an output mode.
 *
 * For people (notes and table titles printed with the tables):
 *   table     aligned columns under a header and a rule; numbers right-aligned; control
 *             characters shown as \n \t \r; cells wider than opts.width cut with "…";
 *             `(N rows)`; notes after the tables. The default on a terminal.
 *   box       the same inside Unicode box-drawing lines.
 *   markdown  a GitHub pipe table (`|` escaped in cells), never cut.
 * For programs (stdout carries only results: titles and notes go to the notes stream):
 *   tsv       header line then rows, tab-separated; \t \n \r \\ (and a NUL, as \0)
 *             escaped in cells. The default in batch.
 *   csv       RFC 4180: fields holding , " CR or LF are quoted with "" doubled; CRLF.
 *   json      one frame per statement on one line (lql_render_frame):
 *             {"statement": …, "tables": [{"title", "columns", "rows"}], "notes": [...],
 *              "error": null | {"message", "line", "col"}} — notes are a field, not a line.
 *   jsonl     one JSON object per row per line (column name → value).
 * Numbers: in the program modes opts.exact prints a float as the shortest text that
 * parses back to the same double (the shell sets it); otherwise, and always in the modes
 * for people, with its column's precision. Non-finite numbers and NULL cells are null in JSON.
 * Several tables are separated by a blank line in table/box/markdown/tsv/csv.
 */
#ifndef LQL_RENDER_H
#define LQL_RENDER_H

#include <stdio.h>

#include "result.h"

#define LQL_OUTMODES(X) X(TABLE, "table") X(TSV, "tsv") X(CSV, "csv") X(JSON, "json") \
    X(JSONL, "jsonl") X(BOX, "box") X(MARKDOWN, "markdown")
typedef enum lql_outmode {
#define X(m, name) LQL_OUT_##m,
    LQL_OUTMODES(X)
#undef X
    LQL_OUT_COUNT
} lql_outmode;

const char *lql_outmode_name(lql_outmode m);
/* Parse a mode name (case-insensitive); -1 if unknown. */
int lql_outmode_parse(const char *name, lql_outmode *out);
/* The modes for people (table, box, markdown): titles and notes print with the tables. */
int lql_outmode_human(lql_outmode m);

typedef struct lql_render_opts {
    lql_outmode mode;
    int exact;                  /* program modes: floats round-trip (shortest text that parses back) */
    int noheader;               /* table/box/markdown/tsv/csv: no header line */
    int width;                  /* table/box: cut cells wider than this (0: no limit) */
} lql_render_opts;

/* r rendered into out; in the program modes titles and notes go to notes instead, as
 * `-- text` lines (notes may equal out). json writes a frame without statement/error (use
 * lql_render_frame). Write errors are left on the streams (ferror). */
void lql_render_to(const lql_result *r, const lql_render_opts *o, FILE *out, FILE *notes);

/* One json frame, one line: stmt[0..nstmt) is the statement's text (NULL: null), r its
 * result (NULL: no tables), errmsg NULL or the error with its line and column. */
void lql_render_frame(FILE *f, const lql_result *r, const lql_render_opts *o, const char *stmt,
                      size_t nstmt, const char *errmsg, int line, int col);

/* r rendered in mode m with display precision, header, no width limit and notes inline,
 * as a malloc'd string (the caller frees it); NULL only on out-of-memory. */
char *lql_render(const lql_result *r, lql_outmode m);

/* n bytes of s (which may hold NULs) as a JSON string literal, quotes included, as json
 * mode writes it: a NUL is \u0000, an invalid UTF-8 byte \ufffd. malloc'd; NULL on
 * out-of-memory. */
char *lql_json_quote(const char *s, size_t n);

#endif
