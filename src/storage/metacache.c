/*
 * metacache.c — the per-user cache of derived records (metacache.h): one SQLite file,
 *   meta(key, value)            index_sha256, record_bytes
 *   rec(layer, feature, rec)    the records, WITHOUT ROWID by (layer, feature)
 * with PRAGMA application_id 'LQLC' and user_version VX_METACACHE_SCHEMA. WAL, so a session
 * reads while another writes; every put is one transaction, so a reader never sees half of
 * one and a crash loses at most the last.
 */
#include "metacache.h"
#include "journal_int.h"
#include "vx_int.h"

#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define APP_ID 0x4C514C43   /* "LQLC" */
#define WHAT "down-meta cache"

struct vx_metacache {
    char *path;
    char sha[65];
    size_t rec_bytes;
    sqlite3 *db;             /* NULL until the file exists */
};

int vx_metacache_locate(const char *dir, const char *index_sha256, char *out, size_t outsz,
                        char *why, size_t whysz, vx_err *err)
{
    out[0] = 0;   /* set only when there is a place */
    const char *off = getenv("LQL_NO_CACHE");
    if (off && strcmp(off, "1") == 0) {
        snprintf(why, whysz, "LQL_NO_CACHE=1");
        return 1;
    }
    if (!index_sha256 || strlen(index_sha256) < 16)
        return vx_errf(err, VX_EARG, "the down-meta cache needs the container's index sha256");
    char real[PATH_MAX], parent[PATH_MAX];
    if (!realpath(dir, real))
        return vx_errf(err, VX_EIO, "cannot resolve container directory '%s': %s", dir,
                       strerror(errno));
    const char *name = vx_split_parent(real, parent, sizeof parent);
    int rc = vx_xdg_file("XDG_CACHE_HOME", ".cache", *name ? name : "root", index_sha256,
                         "lqlcache", out, outsz);
    if (rc == 1)
        snprintf(why, whysz, "neither XDG_CACHE_HOME nor HOME is set");
    if (rc != 0)
        out[0] = 0;
    return rc < 0 ? vx_errf(err, VX_EARG, "down-meta cache path too long for '%s'", dir) : rc;
}

static int dberr(vx_metacache *c, const char *doing, vx_err *err)
{
    return vx_sqlite_err(c->db, WHAT, c->path, doing, err);
}

static int exec(vx_metacache *c, const char *sql, const char *doing, vx_err *err)
{
    return sqlite3_exec(c->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : dberr(c, doing, err);
}

/* The integer the one-row query gives, or -1 with err. */
static int scalar(vx_metacache *c, const char *sql, int64_t *v, vx_err *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK)
        return dberr(c, "reading its header", err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : dberr(c, "reading its header", err);
}

/* meta[key] into out ("" when absent). */
static int meta(vx_metacache *c, const char *key, char *out, size_t n, vx_err *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->db, "SELECT value FROM meta WHERE key = ?1", -1, &st, NULL) !=
        SQLITE_OK)
        return dberr(c, "reading its header", err);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    const unsigned char *v = rc == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    snprintf(out, n, "%s", v ? (const char *)v : "");
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : dberr(c, "reading its header", err);
}

static int connect(vx_metacache *c, int flags, vx_err *err)
{
    if (sqlite3_open_v2(c->path, &c->db, flags, NULL) != SQLITE_OK) {
        dberr(c, "opening it", err);
        sqlite3_close(c->db);
        c->db = NULL;
        return -1;
    }
    sqlite3_extended_result_codes(c->db, 1);
    sqlite3_busy_timeout(c->db, 5000);
    /* the file may be anyone's: no writes to the schema behind SQLite's back */
    sqlite3_db_config(c->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    /* a cache needs no durability beyond "never corrupt": WAL with synchronous=NORMAL */
    if (exec(c, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL", "opening it", err) != 0) {
        sqlite3_close(c->db);
        c->db = NULL;
        return -1;
    }
    return 0;
}

/* An empty database (a file that never got its first transaction) is initialised when
 * may_init (inside the caller's write transaction) and is otherwise 1: absent. Anything
 * else must be this container's cache of this record size. */
static int check(vx_metacache *c, int may_init, vx_err *err)
{
    int64_t app = 0, ver = 0, tables = 0;
    if (scalar(c, "PRAGMA application_id", &app, err) || scalar(c, "PRAGMA user_version", &ver, err) ||
        scalar(c, "SELECT count(*) FROM sqlite_master", &tables, err))
        return -1;
    if (app == 0 && ver == 0 && tables == 0) {
        if (!may_init)
            return 1;
        char sql[512];
        snprintf(sql, sizeof sql,
                 "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                 "CREATE TABLE rec(layer INTEGER NOT NULL, feature INTEGER NOT NULL, rec BLOB NOT "
                 "NULL, PRIMARY KEY(layer, feature)) WITHOUT ROWID;"
                 "INSERT INTO meta VALUES('index_sha256', '%s'), ('record_bytes', '%zu');"
                 "PRAGMA application_id = %d; PRAGMA user_version = %d;",
                 c->sha, c->rec_bytes, APP_ID, VX_METACACHE_SCHEMA);
        return exec(c, sql, "creating it", err);
    }
    if (app != APP_ID)
        return vx_errf(err, VX_EFORMAT, WHAT " '%s' is not an lql cache (application id %lld)",
                       c->path, (long long)app);
    if (ver != VX_METACACHE_SCHEMA)
        return vx_errf(err, VX_EFORMAT, WHAT " '%s' has schema %lld; this lql reads schema %d",
                       c->path, (long long)ver, VX_METACACHE_SCHEMA);
    char sha[80], rb[32], want[32];
    if (meta(c, "index_sha256", sha, sizeof sha, err) || meta(c, "record_bytes", rb, sizeof rb, err))
        return -1;
    if (strcmp(sha, c->sha) != 0)
        return vx_errf(err, VX_EFORMAT, WHAT " '%s' belongs to another container (index sha256 "
                       "%.16s…, this one %.16s…)", c->path, sha, c->sha);
    snprintf(want, sizeof want, "%zu", c->rec_bytes);
    if (strcmp(rb, want) != 0)
        return vx_errf(err, VX_EFORMAT, WHAT " '%s' holds records of %s bytes; this lql writes %s",
                       c->path, rb, want);
    return 0;
}

int vx_metacache_open(const char *path, const char *index_sha256, size_t rec_bytes,
                      vx_metacache **out, vx_err *err)
{
    *out = NULL;
    vx_metacache *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        return vx_errf(err, VX_ENOMEM, "out of memory opening " WHAT " '%s'", path);
    }
    snprintf(c->sha, sizeof c->sha, "%s", index_sha256);
    c->rec_bytes = rec_bytes;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) {
            *out = c;
            return 0;
        }
        vx_errf(err, VX_EIO, "cannot open " WHAT " '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        vx_errf(err, VX_EIO, "cannot open " WHAT " '%s': not a regular file", path);
        goto fail;
    }
    if (connect(c, SQLITE_OPEN_READWRITE, err) != 0)
        goto fail;
    int64_t ok = 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->db, "PRAGMA quick_check", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        dberr(c, "checking its integrity", err);
        goto fail;
    }
    ok = strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0;
    if (!ok)
        vx_errf(err, VX_EFORMAT, WHAT " '%s' is corrupt (%s)", path,
                (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (!ok)
        goto fail;
    int rc = check(c, 0, err);
    if (rc < 0)
        goto fail;
    if (rc == 1) {              /* empty: as if absent */
        sqlite3_close(c->db);
        c->db = NULL;
    }
    *out = c;
    return 0;
fail:
    vx_metacache_close(c);
    return -1;
}

void vx_metacache_close(vx_metacache *c)
{
    if (!c)
        return;
    sqlite3_close(c->db);
    free(c->path);
    free(c);
}

const char *vx_metacache_path(const vx_metacache *c) { return c->path; }

int vx_metacache_layer(vx_metacache *c, int layer, int64_t features, uint8_t *recs,
                       uint8_t *have, uint64_t *n, vx_err *err)
{
    *n = 0;
    if (!c->db)
        return 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(c->db, "SELECT feature, rec FROM rec WHERE layer = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return dberr(c, "reading records", err);
    sqlite3_bind_int(st, 1, layer);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const int64_t f = sqlite3_column_int64(st, 0);
        const void *b = sqlite3_column_blob(st, 1);
        const int len = sqlite3_column_bytes(st, 1);
        if (f < 0 || f >= features || !b || (size_t)len != c->rec_bytes) {
            sqlite3_finalize(st);
            return vx_errf(err, VX_EFORMAT, WHAT " '%s': layer %d feature %lld: %s", c->path,
                           layer, (long long)f,
                           f < 0 || f >= features ? "no such feature in this container"
                                                  : "a record of the wrong size");
        }
        if (have[f])
            continue;
        memcpy(recs + (size_t)f * c->rec_bytes, b, c->rec_bytes);
        have[f] = 1;
        ++*n;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : dberr(c, "reading records", err);
}

int vx_metacache_put(vx_metacache *c, const int *layer, const int64_t *feature, size_t n,
                     const uint8_t *recs, vx_err *err)
{
    if (n == 0)
        return 0;
    int fresh = !c->db;
    if (fresh && (vx_mkdirs_above(c->path, WHAT " directory", err) != 0 ||
                  connect(c, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, err) != 0))
        return -1;
    if (exec(c, "BEGIN IMMEDIATE", "starting a transaction", err) != 0)
        return -1;
    /* another session may have created the file since: checked inside the lock */
    sqlite3_stmt *st = NULL;
    if (fresh && check(c, 1, err) != 0)
        goto fail;
    if (sqlite3_prepare_v2(c->db, "INSERT OR REPLACE INTO rec VALUES(?1, ?2, ?3)", -1, &st,
                           NULL) != SQLITE_OK) {
        dberr(c, "writing records", err);
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_int(st, 1, layer[i]);
        sqlite3_bind_int64(st, 2, feature[i]);
        sqlite3_bind_blob(st, 3, recs + i * c->rec_bytes, (int)c->rec_bytes, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) {
            dberr(c, "writing records", err);
            goto fail;
        }
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    st = NULL;
    if (exec(c, "COMMIT", "writing records", err) == 0)
        return 0;
fail:
    sqlite3_finalize(st);
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    if (fresh) {                /* the next put tries the creation again */
        sqlite3_close(c->db);
        c->db = NULL;
    }
    return -1;
}
