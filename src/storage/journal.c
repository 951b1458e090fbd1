/*
 * journal.c — the SQLite overlay journal: one database per bound base container, keyed
 * to it by the sha256 of its index.json. Every statement that changes the effective model
 * is exactly one IMMEDIATE transaction (WAL, synchronous=FULL), so a crash at any point
 * leaves either the state before the statement or the state after it. UNDO and ROLLBACK
 * only flag history rows; nothing recorded is ever deleted. The schema and its
 * migrations live in journal_schema.c.
 */
#include "journal.h"
#include "journal_int.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

struct vx_journal {
    sqlite3 *db;
    char *path;
    int64_t recording;        /* patch id recording this session's edits, 0 when none */
    char *recording_name;
    uint64_t generation;
    int64_t data_version;     /* PRAGMA data_version when last looked (vx_journal_moved);
                                 * 0 before, when opened over history */
    int strict;               /* vx_journal_strict: records check it (check_current) */
};

/* ---------------------------------------------------------------- errors */

/* SQLite loses the errno of a WAL write that fails at COMMIT (sqlite3_system_errno is 0
 * there): a file-size limit the journal or its WAL has reached, or a full file system, is
 * told from the place itself. 0 when neither. */
static int out_of_room(const char *path)
{
    char wal[4200];
    struct stat a, b;
    struct rlimit rl;
    struct statvfs v;
    snprintf(wal, sizeof wal, "%s-wal", path);
    off_t big = stat(path, &a) == 0 ? a.st_size : 0;
    if (stat(wal, &b) == 0 && b.st_size > big)
        big = b.st_size;
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (rlim_t)big + 65536 >= rl.rlim_cur)
        return EFBIG;
    if (statvfs(path, &v) == 0 && (uint64_t)v.f_bavail * v.f_frsize < (1u << 20))
        return ENOSPC;
    return 0;
}

/* Fill err from the database's last error, phrased for the user: what failed, where,
 * and the likely cause. Always -1. */
int vx_sqlite_err(sqlite3 *db, const char *what, const char *path, const char *doing, vx_err *err)
{
    int rc = db ? sqlite3_extended_errcode(db) : SQLITE_NOMEM;
    int sys = db ? sqlite3_system_errno(db) : 0;
    if ((rc & 0xff) == SQLITE_IOERR && sys == 0 && path)
        sys = out_of_room(path);
    const char *m = db ? sqlite3_errmsg(db) : "out of memory";
    switch (rc & 0xff) {
    case SQLITE_FULL:
        return vx_errf(err, VX_EIO, "%s '%s': disk full while %s (%s)", what, path, doing, m);
    case SQLITE_IOERR:
        if (sys == EFBIG || sys == ENOSPC || sys == EDQUOT)
            return vx_errf(err, VX_EIO,
                           "%s '%s': disk full or file size limit reached while %s (%s)",
                           what, path, doing, strerror(sys));
        return vx_errf(err, VX_EIO, "%s '%s': i/o error while %s (%s%s%s)", what, path, doing, m,
                       sys ? ": " : "", sys ? strerror(sys) : "");
    case SQLITE_NOTADB:
        return vx_errf(err, VX_EFORMAT, "%s '%s' is not an lql %s: %s", what, path, what, m);
    case SQLITE_CORRUPT:
        return vx_errf(err, VX_EFORMAT, "%s '%s' is corrupt (%s)", what, path, m);
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_CANTOPEN: {
        /* SQLite names the -wal/-shm file it could not create as "no such file" or the
         * database as read-only: the cause is the directory (a read-only mount, chattr +i,
         * no permission) */
        char dir[4096];
        if (path)
            vx_split_parent(path, dir, sizeof dir);
        if (path && access(dir, W_OK) != 0) {
            int e = errno;
            return vx_errf(err, VX_EIO, "cannot open %s '%s': its directory is not "
                           "writable (%s), which SQLite needs even to read it", what, path,
                           strerror(e));
        }
        if ((rc & 0xff) != SQLITE_CANTOPEN)
            return vx_errf(err, VX_EIO, "%s '%s' cannot be written (%s%s%s)", what, path, m,
                           sys ? ": " : "", sys ? strerror(sys) : "");
        return vx_errf(err, VX_EIO, "cannot open %s '%s' (%s%s%s)", what, path, m,
                       sys ? ": " : "", sys ? strerror(sys) : "");
    }
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return vx_errf(err, VX_EIO, "%s '%s' is locked by another process while %s (%s)",
                       what, path, doing, m);
    case SQLITE_NOMEM:
        return vx_errf(err, VX_ENOMEM, "out of memory while %s (%s '%s')", doing, what, path);
    default:
        return vx_errf(err, VX_EIO, "%s '%s': %s failed (%s)", what, path, doing, m);
    }
}

int vx_journal_dberr(sqlite3 *db, const char *path, const char *doing, vx_err *err)
{
    return vx_sqlite_err(db, "journal", path, doing, err);
}

static int dberr(vx_journal *j, const char *doing, vx_err *err)
{
    return vx_journal_dberr(j->db, j->path, doing, err);
}

/* ---------------------------------------------------------------- transactions */

static int begin(vx_journal *j, vx_err *err)
{
    if (sqlite3_exec(j->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return dberr(j, "starting a transaction", err);
    return 0;
}

/* Report the current error, then roll back whatever is open. Always -1. */
static int fail(vx_journal *j, const char *doing, vx_err *err)
{
    dberr(j, doing, err);
    if (!sqlite3_get_autocommit(j->db))
        sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

/* Roll back after an error already reported in err. Always -1. */
static int abandon(vx_journal *j)
{
    if (!sqlite3_get_autocommit(j->db))
        sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

static int commit(vx_journal *j, vx_err *err)
{
    if (sqlite3_exec(j->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        return fail(j, "committing", err);
    j->generation++;
    return 0;
}

static sqlite3_stmt *prep(vx_journal *j, const char *sql, vx_err *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(j->db, sql, -1, &st, NULL) != SQLITE_OK) {
        dberr(j, "preparing a query", err);
        return NULL;
    }
    return st;
}

/* Run a statement that returns no rows (or whose rows are ignored); finalizes it. */
static int run(vx_journal *j, sqlite3_stmt *st, const char *doing, vx_err *err)
{
    int rc;
    if (!st)
        return -1;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        ;
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return dberr(j, doing, err);
    return 0;
}

/* One integer from a query (def when no row); -1 on error. */
static int scalar(vx_journal *j, sqlite3_stmt *st, int64_t def, int64_t *out, vx_err *err)
{
    if (!st)
        return -1;
    int rc = sqlite3_step(st);
    *out = def;
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return dberr(j, "reading the journal", err);
    return 0;
}

/* scalar() of a query whose ?1 is bound to a. */
static int scalar1(vx_journal *j, const char *sql, int64_t a, int64_t def, int64_t *out,
                   vx_err *err)
{
    sqlite3_stmt *st = prep(j, sql, err);
    if (st)
        sqlite3_bind_int64(st, 1, a);
    return scalar(j, st, def, out, err);
}

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static void bind_real(sqlite3_stmt *st, int i, double v)
{
    if (isnan(v))
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_double(st, i, v);
}

static void bind_int(sqlite3_stmt *st, int i, int64_t v)
{
    if (v < 0)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_int64(st, i, v);
}

/* What a column read back must hold. SQLite converts any stored value to the type asked
 * for, so a hand-edited row (text or 2.7 for a layer, a number for an entity) would replay
 * as some other edit; each column is checked against these before it is read. */
enum { C_I64 = 1, C_ID = 2, C_NUM = 4, C_TEXT = 8, C_BLOB = 16, C_NULL = 32 };

static const char *type_name(int t)
{
    return t == SQLITE_INTEGER ? "an integer" : t == SQLITE_FLOAT ? "a real" : t == SQLITE_TEXT ? "text"
         : t == SQLITE_BLOB ? "a blob" : "null";
}

static int col_fits(sqlite3_stmt *st, int i, int want)
{
    int t = sqlite3_column_type(st, i);
    sqlite3_int64 v = t == SQLITE_INTEGER ? sqlite3_column_int64(st, i) : 0;
    return t == SQLITE_NULL      ? (want & C_NULL) != 0
         : t == SQLITE_INTEGER   ? (want & (C_I64 | C_NUM)) || ((want & C_ID) && v >= 0 && v <= INT32_MAX)
         : t == SQLITE_FLOAT     ? (want & C_NUM) != 0
         : t == SQLITE_TEXT      ? (want & C_TEXT) != 0
                                 : (want & C_BLOB) != 0;
}

/* Every column of a row against want[]; the error names the table, the operation and the
 * column. */
static int check_row(const vx_journal *j, sqlite3_stmt *st, const char *table, long long seq,
                     const char *const *names, const int *want, vx_err *err)
{
    for (int i = 0; names[i]; i++) {
        if (col_fits(st, i, want[i]))
            continue;
        int t = sqlite3_column_type(st, i);
        return vx_errf(err, VX_EFORMAT, "journal '%s': %s of operation %lld: column %s holds %s%s "
                       "where %s belongs; nothing was replayed", j->path, table, seq, names[i],
                       type_name(t), t == SQLITE_INTEGER ? " out of range" : "",
                       want[i] & C_ID ? "an id (0 to 2147483647)" : want[i] & C_NUM ? "a number"
                       : want[i] & C_TEXT ? "text" : want[i] & C_BLOB ? "a blob" : "an integer");
    }
    return 0;
}

static char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? strdup((const char *)s) : NULL;
}

/* ---------------------------------------------------------------- location */

int vx_journal_guard(const char *dir, const char *what, vx_err *err)
{
    char path[4096], sha[65], jp[4096];
    vx_err le = {0};
    if (vx_resolve_in(dir, "index.json", path, sizeof path, err) < 0 ||
        vx_sha256_file(path, sha, err) < 0)
        return -1;
    if (vx_journal_locate(dir, sha, jp, sizeof jp, &le) == 0 && access(jp, F_OK) == 0)
        return vx_errf(err, VX_EARG, "%s rewrites index.json, and the journal '%s' is keyed to "
                       "its sha256: its edits could not be opened again; COMPILE them into a new "
                       "container first (or move the journal away)", what, jp);
    return 0;
}

int vx_journal_locate(const char *container_dir, const char *index_sha256, char *out,
                      size_t outsz, vx_err *err)
{
    if (!container_dir || !*container_dir || !index_sha256 || strlen(index_sha256) < 16)
        return vx_errf(err, VX_EARG, "journal location needs a container directory and its "
                                     "index sha256");
    /* named from the resolved directory, so every spelling of one container ("x/.", ".",
     * a symlink to it) finds the one journal */
    char dir[PATH_MAX], parent[PATH_MAX];
    if (!realpath(container_dir, dir))
        return vx_errf(err, VX_EIO, "cannot resolve container directory '%s': %s",
                       container_dir, strerror(errno));
    const char *name = vx_split_parent(dir, parent, sizeof parent);
    if (!*name)
        return vx_errf(err, VX_EARG, "cannot name a journal for container '%s' (the root "
                       "directory): use USE ... JOURNAL \"path\"", container_dir);
    /* beside the container when its directory is writable, or when a journal is already
     * there (a directory made read-only since must not hide its edits behind a new journal
     * elsewhere: opening it then says why it cannot be used) */
    if ((size_t)snprintf(out, outsz, "%s/%s.lqljournal", parent, name) >= outsz)
        return vx_errf(err, VX_EARG, "journal path too long for '%s'", container_dir);
    if (access(parent, W_OK) == 0 || access(out, F_OK) == 0)
        return 0;
    int rc = vx_xdg_file("XDG_DATA_HOME", ".local/share", name, index_sha256, "lqljournal", out,
                         outsz);
    if (rc == 1)
        return vx_errf(err, VX_EIO,
                       "no place for the journal of '%s': its directory '%s' is not writable "
                       "and neither XDG_DATA_HOME nor HOME is set (use USE ... JOURNAL \"path\")",
                       container_dir, parent);
    if (rc != 0)
        return vx_errf(err, VX_EARG, "journal path too long for '%s'", container_dir);
    return 0;
}

int vx_journal_create_dir(const char *path, vx_err *err)
{
    return vx_mkdirs_above(path, "journal directory", err);
}

/* ---------------------------------------------------------------- open / close */

static int meta_get(vx_journal *j, const char *key, char **out, vx_err *err)
{
    sqlite3_stmt *st = prep(j, "SELECT value FROM meta WHERE key = ?1", err);
    if (!st)
        return -1;
    bind_text(st, 1, key);
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? col_text(st, 0) : NULL;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return dberr(j, "reading the journal's base", err);
    return 0;
}

static int meta_set(vx_journal *j, const char *key, const char *value, vx_err *err)
{
    sqlite3_stmt *st = prep(j, "INSERT INTO meta(key, value) VALUES (?1, ?2)", err);
    if (st) {
        bind_text(st, 1, key);
        bind_text(st, 2, value);
    }
    return run(j, st, "recording the journal's base", err);
}

/* Create or migrate the schema, then check (or, when new, record) the base. */
static int prepare_schema(vx_journal *j, const char *sha, const char *model, vx_err *err)
{
    /* a journal already at this schema and of this base needs nothing written: read, so a
     * session that only reads does not wait for another's write lock (WAL lets it read) */
    int64_t current;
    char *have = NULL;
    if (scalar(j, prep(j, "PRAGMA user_version", err), 0, &current, err))
        return -1;
    if (current == VX_JOURNAL_SCHEMA && meta_get(j, "base_sha256", &have, err) == 0 && have &&
        strcmp(have, sha) == 0) {
        free(have);
        return 0;
    }
    free(have);
    if (begin(j, err))
        return -1;
    int64_t version, tables;
    if (scalar(j, prep(j, "PRAGMA user_version", err), 0, &version, err) ||
        scalar(j, prep(j, "SELECT count(*) FROM sqlite_master", err), 0, &tables, err))
        return abandon(j);
    if (version > VX_JOURNAL_SCHEMA) {
        vx_errf(err, VX_EVERSION,
                "journal '%s' has schema version %lld, newer than this lql supports (%d): "
                "use a newer lql or another journal",
                j->path, (long long)version, VX_JOURNAL_SCHEMA);
        return abandon(j);
    }
    if (version == 0 && tables > 0) {
        vx_errf(err, VX_EFORMAT,
                "journal '%s' is not an lql journal (a database with %lld other objects)",
                j->path, (long long)tables);
        return abandon(j);
    }
    if (vx_journal_migrate(j->db, j->path, (int)version, err))
        return abandon(j);
    char *have_sha = NULL, *have_model = NULL;
    if (meta_get(j, "base_sha256", &have_sha, err) || meta_get(j, "base_model", &have_model, err)) {
        free(have_sha);
        return abandon(j);
    }
    int rc = 0;
    if (!have_sha) {
        char now[32];
        vx_utc_now(now);
        rc = meta_set(j, "base_sha256", sha, err) || meta_set(j, "base_model", model, err) ||
             meta_set(j, "created", now, err) ? -1 : 0;
    } else if (strcmp(have_sha, sha) != 0) {
        vx_errf(err, VX_EVERIFY,
                "journal '%s' belongs to another base: it was recorded for model '%s' (index "
                "sha256 %.16s...) but the container it is opened with is model '%s' (index "
                "sha256 %.16s...); move it away or name another journal",
                j->path, have_model ? have_model : "?", have_sha, model, sha);
        rc = -1;
    }
    free(have_sha);
    free(have_model);
    if (rc)
        return abandon(j);
    return commit(j, err);
}

int vx_journal_open(const char *path, const char *base_sha256, const char *base_model,
                    vx_journal **out, vx_err *err)
{
    *out = NULL;
    if (!path || !*path || !base_sha256 || !base_model)
        return vx_errf(err, VX_EARG, "opening a journal needs a path, a base sha256 and a model");
    /* ":memory:" is SQLite's private in-memory database: a journal for one session only
     * (tests, throwaway edits); it cannot use WAL and needs no durability. */
    int memory = strcmp(path, ":memory:") == 0;
    struct stat sb;
    int found = !memory && stat(path, &sb) == 0, absent = !memory && !found && errno == ENOENT;
    if (found && !S_ISREG(sb.st_mode))
        return vx_errf(err, VX_EIO, "cannot open journal '%s': not a regular file", path);
    vx_journal *j = calloc(1, sizeof *j);
    if (!j || !(j->path = strdup(path))) {
        free(j);
        return vx_errf(err, VX_ENOMEM, "out of memory opening journal '%s'", path);
    }
    int rc = sqlite3_open_v2(path, &j->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        vx_journal_dberr(j->db, path, "opening", err);
        goto fail;
    }
    sqlite3_extended_result_codes(j->db, 1);
    sqlite3_busy_timeout(j->db, 5000);
    /* WAL + synchronous=FULL: a commit is durable once COMMIT returns, and a reader never
     * sees a half-written transaction. */
    sqlite3_stmt *st = prep(j, "PRAGMA journal_mode=WAL", err);
    if (!st)
        goto fail;
    rc = sqlite3_step(st);
    char mode[16] = "";
    if (rc == SQLITE_ROW)
        snprintf(mode, sizeof mode, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) {
        dberr(j, "enabling write-ahead logging", err);
        goto fail;
    }
    if (strcmp(mode, memory ? "memory" : "wal") != 0) {
        vx_errf(err, VX_EIO, "journal '%s': cannot enable write-ahead logging (mode '%s')",
                path, mode);
        goto fail;
    }
    if (sqlite3_exec(j->db, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON", NULL, NULL,
                     NULL) != SQLITE_OK) {
        dberr(j, "configuring", err);
        goto fail;
    }
    st = prep(j, "PRAGMA quick_check", err);
    if (!st)
        goto fail;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0) {
        vx_errf(err, VX_EFORMAT, "journal '%s' is corrupt (%s)", path,
                (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        goto fail;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) {
        dberr(j, "checking integrity", err);
        goto fail;
    }
    /* an empty journal is what a session without edits has seen: its version is the
     * baseline; one with history is unseen until replayed (ed_refresh asks then) */
    int64_t hist = 0;
    if (prepare_schema(j, base_sha256, base_model, err) ||
        scalar(j, prep(j, "SELECT count(*) FROM history", err), 0, &hist, err) ||
        (hist == 0 && vx_journal_moved(j, err) < 0))
        goto fail;
    *out = j;
    return 0;
fail:
    sqlite3_close(j->db);
    /* a journal this call created and could not write a byte of (a full disk) is not
     * left behind: an empty file would be taken for a journal by the next REPRESENT */
    if (absent && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 0)
        unlink(path);
    free(j->path);
    free(j);
    return -1;
}

void vx_journal_close(vx_journal *j)
{
    if (!j)
        return;
    sqlite3_close(j->db);
    free(j->path);
    free(j->recording_name);
    free(j);
}

const char *vx_journal_path(const vx_journal *j)
{
    return j->path;
}

uint64_t vx_journal_generation(const vx_journal *j)
{
    return j->generation;
}

void vx_journal_strict(vx_journal *j)
{
    j->strict = 1;
}

int vx_journal_moved(vx_journal *j, vx_err *err)
{
    int64_t v;
    if (scalar(j, prep(j, "PRAGMA data_version", err), 0, &v, err))
        return -1;
    int moved = v != j->data_version;
    j->data_version = v;
    return moved;
}

/* Inside the write transaction of an edit computed from what this connection last read:
 * VX_ESTALE when another session has committed since (its data_version moved; or, never
 * read, it was opened over history, which is never deleted), since the edit may claim
 * what that commit did (two INSERTs picking one free feature: the later one overwrote the
 * earlier). SQLite's data_version is never 0, so 0 is "not read". */
static int check_current(vx_journal *j, vx_err *err)
{
    int64_t v = 0;
    if (!j->strict)
        return 0;
    if (j->data_version && scalar(j, prep(j, "PRAGMA data_version", err), 0, &v, err))
        return -1;
    if (v != j->data_version || !v)
        return vx_errf(err, VX_ESTALE, "journal '%s' was changed by another session while "
                       "this statement ran: nothing was recorded", j->path);
    return 0;
}

int64_t vx_journal_recording(const vx_journal *j)
{
    return j->recording;
}

const char *vx_journal_recording_name(const vx_journal *j)
{
    return j->recording ? j->recording_name : NULL;
}

void vx_journal_stop_recording(vx_journal *j)
{
    j->recording = 0;
    free(j->recording_name);
    j->recording_name = NULL;
}

static int set_recording(vx_journal *j, int64_t id, const char *name, vx_err *err)
{
    char *copy = strdup(name);
    if (!copy)
        return vx_errf(err, VX_ENOMEM, "out of memory");
    free(j->recording_name);
    j->recording_name = copy;
    j->recording = id;
    return 0;
}

/* ---------------------------------------------------------------- writing ops */

/* The op's scalar extras as a JSON object text (malloc'd), or NULL when it has none. */
static char *op_metadata(const vx_op *op, int *oom)
{
    *oom = 0;
    if (!op->has_meta && !op->reason && op->target_id < 0)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    char *text = NULL;
    if (!o)
        goto done;
    if (op->has_meta) {
        cJSON *m = cJSON_AddObjectToObject(o, "down_meta");
        if (!m || !cJSON_AddStringToObject(m, "t", op->meta_token ? op->meta_token : "") ||
            !cJSON_AddNumberToObject(m, "i", (double)op->meta_id) ||
            !cJSON_AddNumberToObject(m, "c", isnan(op->meta_c) ? 0.0 : op->meta_c))
            goto done;
    }
    if (op->reason && !cJSON_AddStringToObject(o, "reason", op->reason))
        goto done;
    if (op->target_id >= 0 && !cJSON_AddNumberToObject(o, "target_id", (double)op->target_id))
        goto done;
    text = cJSON_PrintUnformatted(o);
done:
    cJSON_Delete(o);
    *oom = !text;
    return text;
}

static int parse_metadata(const char *text, vx_op *op)
{
    cJSON *o = cJSON_Parse(text);
    if (!o)
        return -1;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "down_meta");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "reason");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "target_id");
    int rc = 0;
    if (cJSON_IsObject(m)) {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(m, "t");
        const cJSON *mi = cJSON_GetObjectItemCaseSensitive(m, "i");
        const cJSON *mc = cJSON_GetObjectItemCaseSensitive(m, "c");
        op->has_meta = 1;
        if (cJSON_IsString(mt) && !(op->meta_token = strdup(mt->valuestring)))
            rc = -1;
        op->meta_id = cJSON_IsNumber(mi) ? (int64_t)mi->valuedouble : -1;
        op->meta_c = cJSON_IsNumber(mc) ? mc->valuedouble : NAN;
    }
    if (cJSON_IsString(r) && !(op->reason = strdup(r->valuestring)))
        rc = -1;
    if (cJSON_IsNumber(t))
        op->target_id = (int64_t)t->valuedouble;
    cJSON_Delete(o);
    return rc;
}

/* ---------------------------------------------------------------- op digests */

/* An operation's digest (ops.digest, schema 3): sha256 over what its row stores (kind,
 * numbers, strings, metadata; a NULL distinct from any value) and then its vectors' roles,
 * shapes and little-endian bytes in stored order. The database checks its pages' structure
 * only (quick_check), so this is what turns a changed byte in a vector into a refusal
 * rather than a different edit replayed. */
static void dg_u64(vx_sha256_ctx *h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    vx_sha256_update(h, b, 8);
}

static void dg_mark(vx_sha256_ctx *h, int present)
{
    uint8_t b = present ? 1 : 0;
    vx_sha256_update(h, &b, 1);
}

static void dg_str(vx_sha256_ctx *h, const char *s)
{
    dg_mark(h, s != NULL);
    if (s) {
        size_t n = strlen(s);
        dg_u64(h, n);
        vx_sha256_update(h, s, n);
    }
}

/* bind_int's rule: a negative number is stored as NULL */
static void dg_int(vx_sha256_ctx *h, int64_t v)
{
    dg_mark(h, v >= 0);
    if (v >= 0)
        dg_u64(h, (uint64_t)v);
}

/* bind_real's rule: NaN is NULL; SQLite may store a whole REAL as an integer, so -0 reads
 * back as +0 */
static void dg_real(vx_sha256_ctx *h, double v)
{
    dg_mark(h, !isnan(v));
    if (!isnan(v)) {
        if (v == 0)
            v = 0;
        uint64_t u;
        memcpy(&u, &v, sizeof u);
        dg_u64(h, u);
    }
}

static int dg_row(vx_sha256_ctx *h, const char *kind, const vx_op *op, const char *meta,
                  vx_err *err)
{
    if (vx_sha256_init(h, err))
        return -1;
    dg_str(h, kind);
    dg_int(h, op->layer);
    dg_int(h, op->feature);
    dg_int(h, op->expert);
    dg_str(h, op->entity);
    dg_str(h, op->relation);
    dg_str(h, op->target);
    dg_real(h, op->confidence);
    dg_real(h, op->alpha);
    dg_str(h, op->mode);
    dg_str(h, meta);
    return 0;
}

static void dg_vec(vx_sha256_ctx *h, const char *role, int64_t rows, int64_t cols,
                   const void *le, size_t bytes)
{
    dg_str(h, role);
    dg_int(h, rows);
    dg_int(h, cols);
    vx_sha256_update(h, le, bytes);
}

/* Every vector of op as little-endian floats in *buf (grown as needed), vector v at bytes
 * [off[v], off[v + 1]): what the digest covers and the rows store, converted once. */
static int op_le(const vx_op *op, uint8_t **buf, size_t *cap, size_t off[VX_OP_MAX_VECS + 1],
                 vx_err *err)
{
    off[0] = 0;
    for (int v = 0; v < op->nvec; v++)
        off[v + 1] = off[v] + (size_t)(op->vec[v].rows * op->vec[v].cols) * 4;
    if (off[op->nvec] > *cap) {
        uint8_t *nb = realloc(*buf, off[op->nvec]);
        if (!nb)
            return vx_errf(err, VX_ENOMEM, "out of memory recording an operation's vectors");
        *buf = nb;
        *cap = off[op->nvec];
    }
    for (int v = 0; v < op->nvec; v++)
        vx_f32_store_le(*buf + off[v], op->vec[v].data, (off[v + 1] - off[v]) / 4);
    return 0;
}

/* Insert n ops (and their vectors) under a history entry and a patch; inside a
 * transaction the caller owns. */
static int insert_ops(vx_journal *j, int64_t hist, int64_t patch, const vx_op *ops, size_t n,
                      vx_err *err)
{
    char now[32];
    vx_utc_now(now);
    sqlite3_stmt *ins = prep(j,
        "INSERT INTO ops(history_n, patch_id, kind, layer, feature, entity, relation, target,"
        " confidence, alpha, mode, metadata, created, expert, digest)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)", err);
    sqlite3_stmt *vec = prep(j,
        "INSERT INTO vectors(op_seq, role, rows, cols, data) VALUES (?1, ?2, ?3, ?4, ?5)", err);
    int rc = -1;
    uint8_t *buf = NULL;
    size_t bufcap = 0;
    if (!ins || !vec)
        goto done;
    for (size_t i = 0; i < n; i++) {
        const vx_op *op = &ops[i];
        if (!vx_op_kind_name(op->kind)) {
            vx_errf(err, VX_EARG, "operation %zu has an invalid kind %d", i + 1, (int)op->kind);
            goto done;
        }
        int oom;
        char *meta = op_metadata(op, &oom);
        if (oom) {
            vx_errf(err, VX_ENOMEM, "out of memory");
            goto done;
        }
        vx_sha256_ctx h = {0};
        char digest[65];
        size_t off[VX_OP_MAX_VECS + 1];
        if (op_le(op, &buf, &bufcap, off, err) || dg_row(&h, vx_op_kind_name(op->kind), op, meta, err)) {
            free(meta);
            goto done;
        }
        for (int v = 0; v < op->nvec; v++)
            dg_vec(&h, op->vec[v].role, op->vec[v].rows, op->vec[v].cols, buf + off[v],
                   off[v + 1] - off[v]);
        vx_sha256_final(&h, digest);
        sqlite3_reset(ins);
        sqlite3_bind_int64(ins, 1, hist);
        sqlite3_bind_int64(ins, 2, patch);
        bind_text(ins, 3, vx_op_kind_name(op->kind));
        bind_int(ins, 4, op->layer);
        bind_int(ins, 5, op->feature);
        bind_text(ins, 6, op->entity);
        bind_text(ins, 7, op->relation);
        bind_text(ins, 8, op->target);
        bind_real(ins, 9, op->confidence);
        bind_real(ins, 10, op->alpha);
        bind_text(ins, 11, op->mode);
        bind_text(ins, 12, meta);
        bind_text(ins, 13, now);
        bind_int(ins, 14, op->expert);
        bind_text(ins, 15, digest);
        int st = sqlite3_step(ins);
        free(meta);
        if (st != SQLITE_DONE) {
            dberr(j, "recording an operation", err);
            goto done;
        }
        int64_t seq = sqlite3_last_insert_rowid(j->db);
        for (int v = 0; v < op->nvec; v++) {
            const vx_opvec *ov = &op->vec[v];
            sqlite3_reset(vec);
            sqlite3_bind_int64(vec, 1, seq);
            bind_text(vec, 2, ov->role);
            sqlite3_bind_int64(vec, 3, ov->rows);
            sqlite3_bind_int64(vec, 4, ov->cols);
            sqlite3_bind_blob64(vec, 5, buf + off[v], off[v + 1] - off[v], SQLITE_STATIC);
            if (sqlite3_step(vec) != SQLITE_DONE) {
                dberr(j, "recording a vector", err);
                goto done;
            }
        }
    }
    rc = 0;
done:
    sqlite3_finalize(ins);
    sqlite3_finalize(vec);
    free(buf);
    return rc;
}

static int add_history(vx_journal *j, const char *text, const char *action, int64_t patch,
                       int64_t *n, vx_err *err)
{
    char now[32];
    vx_utc_now(now);
    sqlite3_stmt *st = prep(j,
        "INSERT INTO history(text, action, patch_id, created) VALUES (?1, ?2, ?3, ?4)", err);
    if (st) {
        bind_text(st, 1, text ? text : "");
        bind_text(st, 2, action);
        sqlite3_bind_int64(st, 3, patch);
        bind_text(st, 4, now);
    }
    if (run(j, st, "recording the statement", err))
        return -1;
    *n = sqlite3_last_insert_rowid(j->db);
    return 0;
}

static int new_patch(vx_journal *j, const char *name, const vx_patch_meta *meta, int anonymous,
                     int64_t *id, vx_err *err)
{
    char now[32];
    vx_utc_now(now);
    sqlite3_stmt *st = prep(j,
        "INSERT INTO patches(name, created, description, author, tags, source, anonymous)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", err);
    if (st) {
        bind_text(st, 1, name ? name : "");
        bind_text(st, 2, now);
        bind_text(st, 3, meta ? meta->description : NULL);
        bind_text(st, 4, meta ? meta->author : NULL);
        bind_text(st, 5, meta ? meta->tags_json : NULL);
        bind_text(st, 6, meta ? meta->source : NULL);
        sqlite3_bind_int(st, 7, anonymous);
    }
    if (run(j, st, "creating a patch", err))
        return -1;
    *id = sqlite3_last_insert_rowid(j->db);
    if (anonymous) {
        st = prep(j, "UPDATE patches SET name = 'auto-' || id WHERE id = ?1", err);
        if (st)
            sqlite3_bind_int64(st, 1, *id);
        if (run(j, st, "naming a patch", err))
            return -1;
    }
    return 0;
}

int vx_journal_record(vx_journal *j, const char *text, const vx_op *ops, size_t n,
                      vx_record_info *info, vx_err *err)
{
    vx_record_info local;
    if (!info)
        info = &local;
    memset(info, 0, sizeof *info);
    if (begin(j, err))
        return -1;
    if (check_current(j, err))
        return abandon(j);
    int64_t patch = j->recording;
    if (patch) {
        int64_t live;
        if (scalar1(j, "SELECT count(*) FROM patches WHERE id = ?1 AND applied = 1", patch, 0,
                    &live, err))
            return abandon(j);
        if (!live)
            patch = 0;
    }
    if (!patch) {
        if (new_patch(j, NULL, NULL, 1, &patch, err))
            return abandon(j);
        info->auto_started = 1;
    }
    if (add_history(j, text, "edit", patch, &info->history_n, err) ||
        insert_ops(j, info->history_n, patch, ops, n, err))
        return abandon(j);
    if (commit(j, err))
        return -1;
    info->patch_id = patch;
    if (info->auto_started) {
        snprintf(info->patch_name, sizeof info->patch_name, "auto-%lld", (long long)patch);
        if (set_recording(j, patch, info->patch_name, err))
            return -1;
    } else {
        snprintf(info->patch_name, sizeof info->patch_name, "%s", j->recording_name);
    }
    return 0;
}

/* ---------------------------------------------------------------- patches */

/* A patch is listed while it records or holds a statement that is not undone. */
#define VISIBLE_PATCH \
    "(p.id = ?1 OR EXISTS (SELECT 1 FROM history h WHERE h.patch_id = p.id" \
    " AND h.undone = 0 AND h.action IN ('edit', 'apply')))"

static int name_taken(vx_journal *j, const char *name, int64_t *id, vx_err *err)
{
    sqlite3_stmt *st = prep(j, "SELECT p.id FROM patches p WHERE p.name = ?2 AND p.applied = 1"
                               " AND " VISIBLE_PATCH " ORDER BY p.id DESC LIMIT 1", err);
    if (st) {
        sqlite3_bind_int64(st, 1, j->recording);
        bind_text(st, 2, name);
    }
    return scalar(j, st, 0, id, err);
}

int vx_journal_begin_patch(vx_journal *j, const char *name, int64_t *taken_over, vx_err *err)
{
    int64_t dummy, existing;
    if (!taken_over)
        taken_over = &dummy;
    *taken_over = 0;
    if (!name || !*name)
        return vx_errf(err, VX_EARG, "BEGIN PATCH needs a non-empty name");
    if (begin(j, err))
        return -1;
    if (name_taken(j, name, &existing, err))
        return abandon(j);
    if (existing) {
        vx_errf(err, VX_EARG, "a patch named '%s' already exists (REMOVE PATCH it first or "
                              "choose another name)", name);
        return abandon(j);
    }
    int64_t anon = 0, id;
    if (j->recording &&
        scalar1(j, "SELECT anonymous FROM patches WHERE id = ?1", j->recording, 0, &anon, err))
        return abandon(j);
    if (j->recording && anon) {
        id = j->recording;
        sqlite3_stmt *st = prep(j, "UPDATE patches SET name = ?2, anonymous = 0 WHERE id = ?1",
                                err);
        if (st) {
            sqlite3_bind_int64(st, 1, id);
            bind_text(st, 2, name);
        }
        if (run(j, st, "renaming the patch", err))
            return abandon(j);
        if (scalar1(j, "SELECT count(*) FROM ops o JOIN history h ON h.n = o.history_n"
                       " WHERE o.patch_id = ?1 AND h.undone = 0", id, 0, taken_over, err))
            return abandon(j);
    } else if (new_patch(j, name, NULL, 0, &id, err)) {
        return abandon(j);
    }
    if (commit(j, err))
        return -1;
    return set_recording(j, id, name, err);
}

void vx_patch_infos_free(vx_patch_info *p, size_t n)
{
    for (size_t i = 0; p && i < n; i++) {
        free(p[i].name);
        free(p[i].description);
        free(p[i].author);
        free(p[i].tags_json);
        free(p[i].created);
        free(p[i].source);
    }
    free(p);
}

int vx_journal_patches(vx_journal *j, vx_patch_info **out, size_t *n, vx_err *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = prep(j,
        "SELECT p.id, p.name, p.description, p.author, p.tags, p.created, p.source,"
        " p.anonymous, p.applied,"
        " (SELECT count(*) FROM ops o JOIN history h ON h.n = o.history_n"
        "   WHERE o.patch_id = p.id AND h.undone = 0 AND o.kind = ?2),"
        " (SELECT count(*) FROM ops o JOIN history h ON h.n = o.history_n"
        "   WHERE o.patch_id = p.id AND h.undone = 0 AND o.kind = ?3),"
        " (SELECT count(*) FROM ops o JOIN history h ON h.n = o.history_n"
        "   WHERE o.patch_id = p.id AND h.undone = 0 AND o.kind = ?4),"
        " (SELECT count(*) FROM ops o JOIN history h ON h.n = o.history_n"
        "   WHERE o.patch_id = p.id AND h.undone = 0 AND o.kind IN (?5, ?6))"
        " FROM patches p WHERE " VISIBLE_PATCH " ORDER BY p.id", err);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, j->recording);
    for (int k = 0; k < VX_OP_KIND_COUNT; k++)
        bind_text(st, k + 2, vx_op_kind_name((vx_op_kind)k));
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            vx_patch_info *np = realloc(*out, cap * sizeof *np);
            if (!np) {
                sqlite3_finalize(st);
                vx_patch_infos_free(*out, *n);
                *out = NULL;
                *n = 0;
                return vx_errf(err, VX_ENOMEM, "out of memory listing patches");
            }
            *out = np;
        }
        vx_patch_info *p = &(*out)[(*n)++];
        memset(p, 0, sizeof *p);
        p->id = sqlite3_column_int64(st, 0);
        p->name = col_text(st, 1);
        p->description = col_text(st, 2);
        p->author = col_text(st, 3);
        p->tags_json = col_text(st, 4);
        p->created = col_text(st, 5);
        p->source = col_text(st, 6);
        p->anonymous = sqlite3_column_int(st, 7);
        p->applied = sqlite3_column_int(st, 8);
        p->recording = p->id == j->recording;
        p->n_insert = sqlite3_column_int64(st, 9);
        p->n_update = sqlite3_column_int64(st, 10);
        p->n_delete = sqlite3_column_int64(st, 11);
        p->n_knn = sqlite3_column_int64(st, 12);
        p->n_ops = p->n_insert + p->n_update + p->n_delete + p->n_knn;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        vx_patch_infos_free(*out, *n);
        *out = NULL;
        *n = 0;
        return dberr(j, "listing patches", err);
    }
    return 0;
}

int vx_journal_find_patch(vx_journal *j, const char *name, int64_t *id, vx_err *err)
{
    if (name_taken(j, name ? name : "", id, err))
        return -1;
    if (!*id)
        return vx_errf(err, VX_EMISSING, "no such patch: '%s' (SHOW PATCHES lists them)",
                       name ? name : "");
    return 0;
}

int vx_journal_import(vx_journal *j, const char *text, const vx_patch_meta *meta,
                      const vx_op *ops, size_t n, int64_t *patch_id, int64_t *history_n,
                      vx_err *err)
{
    int64_t pid, hist;
    if (begin(j, err))
        return -1;
    if (new_patch(j, meta && meta->name ? meta->name : "patch", meta, 0, &pid, err) ||
        add_history(j, text, "apply", pid, &hist, err) || insert_ops(j, hist, pid, ops, n, err))
        return abandon(j);
    if (commit(j, err))
        return -1;
    if (patch_id)
        *patch_id = pid;
    if (history_n)
        *history_n = hist;
    return 0;
}

int vx_journal_remove_patch(vx_journal *j, const char *text, const char *name,
                            int64_t *patch_id, vx_err *err)
{
    int64_t pid, hist;
    if (begin(j, err))
        return -1;
    if (vx_journal_find_patch(j, name, &pid, err))
        return abandon(j);
    sqlite3_stmt *st = prep(j, "UPDATE patches SET applied = 0 WHERE id = ?1", err);
    if (st)
        sqlite3_bind_int64(st, 1, pid);
    if (run(j, st, "removing the patch", err) ||
        add_history(j, text, "remove", pid, &hist, err))
        return abandon(j);
    if (commit(j, err))
        return -1;
    if (j->recording == pid)
        vx_journal_stop_recording(j);
    if (patch_id)
        *patch_id = pid;
    return 0;
}

/* ---------------------------------------------------------------- undo / rollback */

/* Flip one history entry (inside a transaction): undone = 1 undoes it, 0 redoes it. A
 * "remove" entry also flips its patch's applied flag back. */
static int flip(vx_journal *j, int64_t n, int undone, vx_err *err)
{
    sqlite3_stmt *st = prep(j,
        "UPDATE patches SET applied = ?2 WHERE id ="
        " (SELECT patch_id FROM history WHERE n = ?1 AND action = 'remove')", err);
    if (st) {
        sqlite3_bind_int64(st, 1, n);
        sqlite3_bind_int(st, 2, undone);
    }
    if (run(j, st, "restoring a patch", err))
        return -1;
    st = prep(j, "UPDATE history SET undone = ?2 WHERE n = ?1", err);
    if (st) {
        sqlite3_bind_int64(st, 1, n);
        sqlite3_bind_int(st, 2, undone);
    }
    return run(j, st, "marking history", err);
}

int vx_journal_undo(vx_journal *j, int64_t *undone, vx_err *err)
{
    *undone = 0;
    if (begin(j, err))
        return -1;
    if (scalar(j, prep(j, "SELECT max(n) FROM history WHERE undone = 0", err), 0, undone, err))
        return abandon(j);
    if (*undone && flip(j, *undone, 1, err)) {
        *undone = 0;
        return abandon(j);
    }
    return commit(j, err);
}

int vx_journal_redo(vx_journal *j, int64_t *redone, vx_err *err)
{
    *redone = 0;
    if (begin(j, err))
        return -1;
    if (scalar(j, prep(j, "SELECT min(n) FROM history WHERE undone = 1 AND n >"
                          " (SELECT coalesce(max(n), 0) FROM history WHERE undone = 0)", err),
               0, redone, err))
        return abandon(j);
    if (*redone && flip(j, *redone, 0, err)) {
        *redone = 0;
        return abandon(j);
    }
    return commit(j, err);
}

int vx_journal_rollback(vx_journal *j, int64_t n, int64_t *count, vx_err *err)
{
    *count = 0;
    int64_t last;
    if (begin(j, err))
        return -1;
    if (scalar(j, prep(j, "SELECT max(n) FROM history", err), 0, &last, err))
        return abandon(j);
    if (n < 0 || n > last) {
        if (last)
            vx_errf(err, VX_EARG, "no such history entry: %lld (history has 1-%lld; 0 is the base)",
                    (long long)n, (long long)last);
        else
            vx_errf(err, VX_EARG, "no such history entry: %lld (the history is empty)",
                    (long long)n);
        return abandon(j);
    }
    sqlite3_stmt *st = prep(j, "SELECT n FROM history WHERE n > ?1 AND undone = 0 ORDER BY n DESC",
                            err);
    if (!st)
        return abandon(j);
    sqlite3_bind_int64(st, 1, n);
    int64_t *todo = NULL;
    size_t nt = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (nt == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *nb = realloc(todo, cap * sizeof *nb);
            if (!nb) {
                sqlite3_finalize(st);
                free(todo);
                vx_errf(err, VX_ENOMEM, "out of memory");
                return abandon(j);
            }
            todo = nb;
        }
        todo[nt++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(todo);
        return fail(j, "reading history", err);
    }
    for (size_t i = 0; i < nt; i++)
        if (flip(j, todo[i], 1, err)) {
            free(todo);
            return abandon(j);
        }
    free(todo);
    if (commit(j, err))
        return -1;
    *count = (int64_t)nt;
    return 0;
}

void vx_history_free(vx_history_entry *h, size_t n)
{
    for (size_t i = 0; h && i < n; i++) {
        free(h[i].text);
        free(h[i].action);
        free(h[i].created);
        free(h[i].patch_name);
    }
    free(h);
}

int vx_journal_history(vx_journal *j, vx_history_entry **out, size_t *n, vx_err *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = prep(j,
        "SELECT h.n, h.text, h.action, h.created, h.patch_id, p.name, h.undone,"
        " (SELECT count(*) FROM ops o WHERE o.history_n = h.n),"
        " (SELECT min(seq) FROM ops o WHERE o.history_n = h.n),"
        " (SELECT max(seq) FROM ops o WHERE o.history_n = h.n)"
        " FROM history h LEFT JOIN patches p ON p.id = h.patch_id ORDER BY h.n", err);
    if (!st)
        return -1;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            vx_history_entry *nh = realloc(*out, cap * sizeof *nh);
            if (!nh) {
                sqlite3_finalize(st);
                vx_history_free(*out, *n);
                *out = NULL;
                *n = 0;
                return vx_errf(err, VX_ENOMEM, "out of memory reading history");
            }
            *out = nh;
        }
        vx_history_entry *h = &(*out)[(*n)++];
        memset(h, 0, sizeof *h);
        h->n = sqlite3_column_int64(st, 0);
        h->text = col_text(st, 1);
        h->action = col_text(st, 2);
        h->created = col_text(st, 3);
        h->patch_id = sqlite3_column_int64(st, 4);
        h->patch_name = col_text(st, 5);
        h->undone = sqlite3_column_int(st, 6);
        h->n_ops = sqlite3_column_int64(st, 7);
        h->first_seq = sqlite3_column_int64(st, 8);
        h->last_seq = sqlite3_column_int64(st, 9);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        vx_history_free(*out, *n);
        *out = NULL;
        *n = 0;
        return dberr(j, "reading history", err);
    }
    return 0;
}

/* ---------------------------------------------------------------- reading ops */

/* Active ops, optionally of one patch (patch_id > 0), with their vectors. */
static int read_ops(vx_journal *j, int64_t patch_id, vx_op **out, size_t *n, vx_err *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = prep(j,
        "SELECT o.seq, o.history_n, o.patch_id, o.kind, o.layer, o.feature, o.entity,"
        " o.relation, o.target, o.confidence, o.alpha, o.mode, o.metadata, o.expert, o.digest"
        " FROM ops o JOIN history h ON h.n = o.history_n JOIN patches p ON p.id = o.patch_id"
        " WHERE h.undone = 0 AND (?1 = 0 AND p.applied = 1 OR o.patch_id = ?1)"
        " ORDER BY o.seq", err);
    sqlite3_stmt *vs = prep(j, "SELECT role, rows, cols, data FROM vectors WHERE op_seq = ?1"
                               " ORDER BY rowid", err);
    vx_op *ops = NULL;
    size_t cnt = 0, cap = 0;
    int rc = SQLITE_DONE, ok = 0;
    vx_sha256_ctx h = {0};
    char *from_text = NULL;
    /* the joins below would pass over an op whose statement or patch is gone (a journal
     * edited outside lql), replaying less without a word: the digests do not cover those
     * links */
    int64_t orphans = 0;
    if (!st || !vs ||
        scalar(j, prep(j, "SELECT count(*) FROM ops o WHERE NOT EXISTS (SELECT 1 FROM history"
                          " h WHERE h.n = o.history_n) OR NOT EXISTS (SELECT 1 FROM patches p"
                          " WHERE p.id = o.patch_id)", err), 0, &orphans, err))
        goto done;
    if (orphans) {
        vx_errf(err, VX_EFORMAT, "journal '%s': %lld operations belong to no statement of its "
                "history or to no patch (it was changed outside lql)", j->path,
                (long long)orphans);
        goto done;
    }
    if (meta_get(j, "ops_digest_from", &from_text, err))
        goto done;
    /* operations recorded before schema 3 carry no digest; absent, the key demands one of all */
    int64_t digest_from = from_text ? strtoll(from_text, NULL, 10) : 1;
    free(from_text);
    sqlite3_bind_int64(st, 1, patch_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (cnt == cap) {
            cap = cap ? cap * 2 : 64;
            vx_op *no = realloc(ops, cap * sizeof *no);
            if (!no) {
                vx_errf(err, VX_ENOMEM, "out of memory reading the journal");
                goto done;
            }
            ops = no;
        }
        static const char *const op_cols[] = {"seq", "history_n", "patch_id", "kind", "layer",
                                              "feature", "entity", "relation", "target",
                                              "confidence", "alpha", "mode", "metadata", "expert",
                                              "digest", NULL};
        static const int op_types[] = {C_I64, C_I64, C_I64, C_TEXT, C_ID | C_NULL, C_ID | C_NULL,
                                       C_TEXT | C_NULL, C_TEXT | C_NULL, C_TEXT | C_NULL,
                                       C_NUM | C_NULL, C_NUM | C_NULL, C_TEXT | C_NULL,
                                       C_TEXT | C_NULL, C_ID | C_NULL, C_TEXT | C_NULL};
        if (check_row(j, st, "the row", (long long)sqlite3_column_int64(st, 0), op_cols, op_types,
                      err))
            goto done;
        vx_op *op = &ops[cnt++];
        vx_op_kind kind = VX_OP_INSERT;
        const char *kname = (const char *)sqlite3_column_text(st, 3);
        if (vx_op_kind_parse(kname, &kind)) {
            vx_op_init(op, kind);
            vx_errf(err, VX_EFORMAT, "journal '%s': operation %lld has unknown kind '%s'",
                    j->path, (long long)sqlite3_column_int64(st, 0), kname ? kname : "");
            goto done;
        }
        vx_op_init(op, kind);
        op->seq = sqlite3_column_int64(st, 0);
        op->history_n = sqlite3_column_int64(st, 1);
        op->patch_id = sqlite3_column_int64(st, 2);
        op->layer = sqlite3_column_type(st, 4) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 4);
        op->feature = sqlite3_column_type(st, 5) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 5);
        op->entity = col_text(st, 6);
        op->relation = col_text(st, 7);
        op->target = col_text(st, 8);
        if (sqlite3_column_type(st, 9) != SQLITE_NULL)
            op->confidence = sqlite3_column_double(st, 9);
        if (sqlite3_column_type(st, 10) != SQLITE_NULL)
            op->alpha = sqlite3_column_double(st, 10);
        op->mode = col_text(st, 11);
        op->expert = sqlite3_column_type(st, 13) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 13);
        const char *meta = (const char *)sqlite3_column_text(st, 12);
        if (meta && parse_metadata(meta, op)) {
            vx_errf(err, VX_EFORMAT, "journal '%s': operation %lld has unreadable metadata",
                    j->path, (long long)op->seq);
            goto done;
        }
        const char *want = (const char *)sqlite3_column_text(st, 14);
        int checked = want != NULL || op->seq >= digest_from;
        if (checked && dg_row(&h, kname, op, meta, err))
            goto done;
        sqlite3_reset(vs);
        sqlite3_bind_int64(vs, 1, op->seq);
        int vr;
        while ((vr = sqlite3_step(vs)) == SQLITE_ROW) {
            static const char *const vcols[] = {"role", "rows", "cols", "data", NULL};
            static const int vtypes[] = {C_TEXT, C_I64, C_I64, C_BLOB};
            if (check_row(j, vs, "a vector", (long long)op->seq, vcols, vtypes, err))
                goto done;
            const char *role = (const char *)sqlite3_column_text(vs, 0);
            int64_t rows = sqlite3_column_int64(vs, 1), cols = sqlite3_column_int64(vs, 2);
            const void *blob = sqlite3_column_blob(vs, 3);
            int64_t bytes = sqlite3_column_bytes(vs, 3);
            if (rows < 1 || cols < 1 || rows > (1 << 28) || cols > (1 << 28) ||
                rows * cols > (1 << 28) || bytes != rows * cols * 4 || !blob) {
                vx_errf(err, VX_EFORMAT, "journal '%s': vector '%s' of operation %lld has "
                        "%lld bytes for shape [%lld, %lld]", j->path, role ? role : "?",
                        (long long)op->seq, (long long)bytes, (long long)rows, (long long)cols);
                goto done;
            }
            if (checked)
                dg_vec(&h, role, rows, cols, blob, (size_t)bytes);
            float *f = malloc((size_t)bytes);
            if (!f) {
                vx_errf(err, VX_ENOMEM, "out of memory reading the journal");
                goto done;
            }
            vx_f32_load_le(f, blob, (size_t)(rows * cols));
            vx_err ve = {0};
            int sr = vx_op_set_vec(op, role ? role : "", rows, cols, f, &ve);
            free(f);
            if (sr) {
                vx_errf(err, ve.code, "journal '%s': operation %lld: %s", j->path,
                        (long long)op->seq, ve.msg);
                goto done;
            }
        }
        if (vr != SQLITE_DONE) {
            dberr(j, "reading vectors", err);
            goto done;
        }
        if (checked) {
            char got[65];
            vx_sha256_final(&h, got);
            if (!want || strcmp(got, want) != 0) {
                vx_errf(err, VX_EVERIFY, "journal '%s': operation %lld (history %lld) %s: the "
                        "file was changed after it was written; nothing was replayed (move it away "
                        "or name another journal)", j->path,
                        (long long)op->seq, (long long)op->history_n,
                        want ? "does not match the sha256 recorded with it" : "has no sha256");
                goto done;
            }
        }
    }
    if (rc != SQLITE_DONE) {
        dberr(j, "reading operations", err);
        goto done;
    }
    ok = 1;
done:
    vx_sha256_free(&h);
    sqlite3_finalize(st);
    sqlite3_finalize(vs);
    if (!ok) {
        vx_ops_free(ops, cnt);
        return -1;
    }
    *out = ops;
    *n = cnt;
    return 0;
}

int vx_journal_patch_ops(vx_journal *j, int64_t patch_id, vx_op **ops, size_t *n, vx_err *err)
{
    if (patch_id <= 0)
        return vx_errf(err, VX_EARG, "no such patch id: %lld", (long long)patch_id);
    return read_ops(j, patch_id, ops, n, err);
}

int vx_journal_active_ops(vx_journal *j, vx_op **ops, size_t *n, vx_err *err)
{
    return read_ops(j, 0, ops, n, err);
}
