/*
 * edit.h — what the mutation statements (exec_edit.c) share with the rest of the
 * interpreter: the effective overlay as browse needs it. The executor already sees the
 * overlay through lql_session.overlay (attached to the model); browse statements take
 * this one so edited features are rescored, tombstones dropped and metadata overrides
 * shown.
 */
#ifndef LQL_EDIT_H
#define LQL_EDIT_H

#include "browse.h"
#include "interp.h"

/* The session's overlay for browse calls, or NULL when nothing is edited (or nothing is
 * bound). Valid until the next statement. */
const brw_overlay *lql_edit_overlay(const lql_session *s);

/* INFER's hook for the residual-key store: when the session has KNN entries, runs ids
 * through m capturing each layer's last-position residual and, when the best cosine with a
 * key of its layer exceeds BRW_KNN_THRESHOLD, adds a note naming the overriding target. */
int lql_edit_knn_override(lql_session *s, const lql_stmt *st, eng_model *m, const int32_t *ids,
                          size_t n, lql_result *r, lql_err *e);

/* COMPILE CURRENT INTO MODEL (exec_export.c). lql_export_check refuses a target that
 * exists (a file, or a directory that is not empty) before any work; lql_export_staging
 * names the temporary container an overlay is compiled into first (a sibling of the
 * target); lql_export_run writes the export from that container (dir), or from the bound
 * one (dir NULL: nothing edited), and reports it. */
int lql_export_check(const lql_stmt *st, lql_err *e);
const char *lql_export_staging(const lql_stmt *st, char *buf, size_t n);
int lql_export_run(lql_session *s, const lql_stmt *st, const char *dir, lql_result *r,
                   lql_err *e);

#endif
