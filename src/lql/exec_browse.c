/*
 * exec_browse.c — the browse statements: WALK, EXPLAIN WALK, DESCRIBE, SELECT, SHOW
 * FEATURES / RELATIONS / ENTITIES, TRACE and EXPLAIN INFER's per-layer part. Owned by the
 * browse engineer; until src/browse lands every handler refuses by name, so no statement
 * ever returns a result it did not compute.
 */
#include "interp.h"

#define NOT_YET "browse has not landed"

int lql_h_walk(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_explain_walk(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_describe(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_select(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_show_features(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_show_relations(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_show_entities(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_trace(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_explain_infer_layers(lql_session *s, const lql_stmt *st, const int32_t *ids, int n,
                             lql_result *r, lql_err *e)
{
    (void)s; (void)ids; (void)n; (void)r;
    return lql_refuse(e, st, NOT_YET " (INFER gives the prediction alone)");
}
