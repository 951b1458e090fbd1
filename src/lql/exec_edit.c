/*
 * exec_edit.c — the mutation statements: INSERT, DELETE, UPDATE, the patch statements,
 * UNDO, ROLLBACK, SHOW PATCHES / HISTORY, DIFF, COMPILE, COMPACT, and the hook USE calls
 * after binding a container. Owned by the mutation engineer; until the journal and the
 * overlay land every handler refuses by name.
 */
#include "interp.h"

#define NOT_YET "the mutation journal has not landed"

int lql_h_insert(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_delete(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_update(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_begin_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_save_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_apply_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_remove_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_undo(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_rollback(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_show_patches(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_show_history(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_diff(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_compile(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

int lql_h_compact(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    return lql_refuse(e, st, NOT_YET);
}

/* Without a journal there is no overlay to open: a USE without JOURNAL binds the base
 * model alone; asking for a journal is refused rather than ignored. */
int lql_edit_on_use(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    (void)s; (void)r;
    if (lql_has(st, LQL_C_JOURNAL)) return lql_refuse_clause(e, st, LQL_C_JOURNAL, NOT_YET);
    return 0;
}
