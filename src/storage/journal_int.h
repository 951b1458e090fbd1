/*
 * journal_int.h — what journal.c and journal_schema.c share (storage-internal): the
 * schema migration entry point and the SQLite-error phrasing (metacache.c uses it too).
 */
#ifndef LQL_JOURNAL_INT_H
#define LQL_JOURNAL_INT_H

#include <sqlite3.h>

#include "vindex.h"

/* Bring the schema from `from` (0 = empty database) to VX_JOURNAL_SCHEMA, one explicit
 * step per version, inside the caller's transaction; sets PRAGMA user_version. */
int vx_journal_migrate(sqlite3 *db, const char *path, int from, vx_err *err);

/* Phrase the database's last error for the user (what, where, likely cause); -1. what
 * names the file's kind ("journal", "down-meta cache"). */
int vx_sqlite_err(sqlite3 *db, const char *what, const char *path, const char *doing, vx_err *err);
/* The same for a journal. */
int vx_journal_dberr(sqlite3 *db, const char *path, const char *doing, vx_err *err);

#endif
