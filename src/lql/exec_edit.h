/*
 * exec_edit.h — what the mutation statements (exec_insert.c, exec_delete.c, exec_patch.c,
 * exec_diff.c, exec_compile.c, exec_export.c) share with each other and the rest of the
 * interpreter. The effective model itself is src/edit (edit.h): the session holds one
 * ed_model per binding (lql_session.edit), created at USE by exec_edit.c, whose overlay is
 * attached to the session after every change, so INFER / TRACE / WALK see it. Browse
 * statements take lql_edit_overlay so edited features are rescored, tombstones dropped and
 * metadata overrides shown.
 */
#ifndef LQL_EXEC_EDIT_H
#define LQL_EXEC_EDIT_H

#include "browse.h"
#include "edit.h"
#include "interp.h"

/* The session's overlay for browse calls, or NULL when nothing is edited (or nothing is
 * bound). Valid until the next statement. */
const eng_overlay *lql_edit_overlay(const lql_session *s);

/* The binding's effective model; with browse 1 its browse model is opened (the session's,
 * borrowed). -1 when nothing is bound. */
int lql_edit_model(lql_session *s, const lql_stmt *st, int browse, ed_model **out,
                   lql_err *e);
/* ed_journal_open with the statement's position on failure. */
int lql_edit_journal(const lql_stmt *st, ed_model *ed, int create, lql_err *e);
/* The note an edit adds when it started the anonymous auto-patch. */
void lql_edit_note_recorded(lql_result *r, const ed_model *ed, const vx_record_info *info);
/* The statement's text (malloc'd), as the journal records it. */
char *lql_edit_text(const lql_stmt *st);

/* INFER's hook for the residual-key store: when the session has KNN entries, runs ids
 * through m capturing each layer's last-position residual and, when the best cosine with a
 * key of its layer exceeds ED_KNN_THRESHOLD, adds a note naming the overriding target. */
int lql_edit_knn_override(lql_session *s, const lql_stmt *st, eng_model *m, const int32_t *ids,
                          size_t n, lql_result *r, lql_err *e);

/* COMPILE CURRENT INTO MODEL (exec_export.c). lql_export_check refuses, before any work, a
 * target that exists (a file, or a directory that is not empty) and what the format cannot
 * hold in the bound container c (vx_export_check: a block-quantised profile, a family with
 * no GGUF form), edited or not; lql_export_staging names the temporary container an overlay
 * is compiled into first (a sibling of the target); lql_export_run writes the export from
 * that container (dir, bound with the session's profile, as COMPILE's gate probed it), or
 * from the bound one (dir NULL: nothing edited), and reports it. */
int lql_export_check(const vx_container *c, const lql_stmt *st, lql_err *e);
const char *lql_export_staging(const lql_stmt *st, char *buf, size_t n);
int lql_export_run(lql_session *s, const lql_stmt *st, const char *dir, lql_result *r,
                   lql_err *e);

#endif
