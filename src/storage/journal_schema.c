/*
 * journal_schema.c — the journal's schema, one migration step per version. A database at
 * PRAGMA user_version v is brought to VX_JOURNAL_SCHEMA by running steps[v], steps[v+1],
 * ... inside the opening transaction, so a crash mid-migration leaves the old version.
 * Step 0 creates version 1 from an empty database. To change the schema: append a step
 * (ALTER TABLE / new tables, never editing an earlier step), bump VX_JOURNAL_SCHEMA, and
 * describe it in docs/lql/MUTATION.md.
 */
#include "journal.h"
#include "journal_int.h"

#include <stdio.h>

static const char *const steps[VX_JOURNAL_SCHEMA] = {
    /* 0 -> 1 */
    "CREATE TABLE meta("
    "  key TEXT PRIMARY KEY,"
    "  value TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE patches("
    "  id INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL,"
    "  created TEXT NOT NULL,"
    "  description TEXT, author TEXT, tags TEXT, source TEXT,"
    "  anonymous INTEGER NOT NULL CHECK (anonymous IN (0, 1)),"
    "  applied INTEGER NOT NULL DEFAULT 1 CHECK (applied IN (0, 1)));"
    "CREATE TABLE history("
    "  n INTEGER PRIMARY KEY,"
    "  text TEXT NOT NULL,"
    "  action TEXT NOT NULL CHECK (action IN ('edit', 'apply', 'remove')),"
    "  patch_id INTEGER NOT NULL REFERENCES patches(id),"
    "  created TEXT NOT NULL,"
    "  undone INTEGER NOT NULL DEFAULT 0 CHECK (undone IN (0, 1)));"
    "CREATE TABLE ops("
    "  seq INTEGER PRIMARY KEY,"
    "  history_n INTEGER NOT NULL REFERENCES history(n),"
    "  patch_id INTEGER NOT NULL REFERENCES patches(id),"
    "  kind TEXT NOT NULL CHECK (kind IN ('insert', 'update', 'delete', 'insert_knn',"
    "                                     'delete_knn')),"
    "  layer INTEGER, feature INTEGER,"
    "  entity TEXT, relation TEXT, target TEXT,"
    "  confidence REAL, alpha REAL, mode TEXT,"
    "  metadata TEXT,"
    "  created TEXT NOT NULL);"
    "CREATE INDEX ops_by_history ON ops(history_n);"
    "CREATE INDEX ops_by_patch ON ops(patch_id);"
    "CREATE TABLE vectors("
    "  op_seq INTEGER NOT NULL REFERENCES ops(seq),"
    "  role TEXT NOT NULL CHECK (role IN ('gate', 'up', 'down', 'key', 'u', 'v')),"
    "  rows INTEGER NOT NULL CHECK (rows >= 1),"
    "  cols INTEGER NOT NULL CHECK (cols >= 1),"
    "  data BLOB NOT NULL CHECK (length(data) = 4 * rows * cols),"
    "  PRIMARY KEY (op_seq, role));",
    /* 1 -> 2: a low-rank insert may address one routed expert of a MoE layer (its v spans
     * that expert's features); NULL for every earlier operation, which stays layer-wide */
    "ALTER TABLE ops ADD COLUMN expert INTEGER;",
    /* 2 -> 3: each operation's sha256 over its fields and vectors (journal.c, op_digest), so
     * bytes damaged after the commit refuse instead of replaying a different edit. Rows
     * recorded before this step have none; every later one must. */
    "ALTER TABLE ops ADD COLUMN digest TEXT;"
    "INSERT INTO meta(key, value) SELECT 'ops_digest_from', CAST(coalesce(max(seq), 0) + 1 AS TEXT)"
    "  FROM ops;",
};

int vx_journal_migrate(sqlite3 *db, const char *path, int from, vx_err *err)
{
    if (from < 0 || from > VX_JOURNAL_SCHEMA)
        return vx_errf(err, VX_EVERSION, "journal '%s': cannot migrate from schema version %d",
                       path, from);
    for (int v = from; v < VX_JOURNAL_SCHEMA; v++) {
        char what[64];
        snprintf(what, sizeof what, "migrating the schema to version %d", v + 1);
        if (sqlite3_exec(db, steps[v], NULL, NULL, NULL) != SQLITE_OK)
            return vx_journal_dberr(db, path, what, err);
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", v + 1);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
            return vx_journal_dberr(db, path, what, err);
    }
    return 0;
}
