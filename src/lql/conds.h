/*
 * conds.h — the one conversion of a parsed WHERE list into browse conditions, shared by
 * the browse statements (exec_browse.c) and the mutation statements' feature selection
 * (exec_delete.c).
 */
#ifndef LQL_CONDS_H
#define LQL_CONDS_H

#include "ast.h"
#include "browse.h"
#include "result.h"

/* The conditions of `where` for table `from`: *conds (*n of them) and *vals (their
 * literals, which conds point into) are malloc'd; the caller frees both. alias, when not
 * NULL, maps a field name before it is parsed (e.g. "target" → "token"). -1 with the
 * field's error at its span (nothing to free) or out of memory. */
int lql_browse_conds(const lql_cond *where, brw_from from, const char *(*alias)(const char *),
                     brw_cond **conds, size_t *n, brw_value **vals, lql_err *e);
/* For a selection of m's features that found none: a note on the first condition that
 * compares a feature's token (FEATURES token, EDGES target, ENTITIES entity) to a text with
 * = or a one-value IN that no token of the vocabulary reads — a word of several tokens,
 * which no feature's token can equal — naming its tokens. */
void lql_note_unread_token(const brw_model *m, brw_from from, const brw_cond *conds, size_t n,
                           lql_result *r);
/* The span of the condition a browse error names (its message starts with the condition's
 * field as written or as `from` names it: "layer 99 is out of range …", "target IN …" for
 * a `token` condition on EDGES), else other. */
const lql_span *lql_cond_span(const lql_cond *where, brw_from from, const vx_err *ve,
                              const lql_span *other);

#endif
