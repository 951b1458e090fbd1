/*
 * render.h — the one renderer: a result set (result.h) as text in an output mode.
 *
 *   table  aligned columns under a header and a rule; numbers right-aligned; control
 *          characters shown as \n \t \r; notes after the tables. The default on a terminal.
 *   tsv    header line then rows, tab-separated; \t \n \r \\ escaped inside cells; notes
 *          as `-- note` lines; a table's title as a `-- title` line. The default in batch.
 *   csv    RFC 4180: fields holding , " CR or LF are quoted with "" doubled; CRLF line
 *          ends; notes and titles as in tsv.
 *   json   one JSON array of objects per table (column name → value; numbers as numbers,
 *          non-finite and NULL cells as null), then {"notes": […]} when there are notes.
 *   jsonl  one JSON object per row per line; notes as {"note": "…"} lines.
 * Several tables are separated by a blank line in table/tsv/csv.
 */
#ifndef LQL_RENDER_H
#define LQL_RENDER_H

#include "result.h"

#define LQL_OUTMODES(X) X(TABLE, "table") X(TSV, "tsv") X(CSV, "csv") X(JSON, "json") \
    X(JSONL, "jsonl")
typedef enum lql_outmode {
#define X(m, name) LQL_OUT_##m,
    LQL_OUTMODES(X)
#undef X
    LQL_OUT_COUNT
} lql_outmode;

const char *lql_outmode_name(lql_outmode m);
/* Parse a mode name (case-insensitive); -1 if unknown. */
int lql_outmode_parse(const char *name, lql_outmode *out);

/* r rendered in mode m as a malloc'd NUL-terminated string (the caller frees it); NULL
 * only on out-of-memory. An empty result gives "". */
char *lql_render(const lql_result *r, lql_outmode m);

#endif
