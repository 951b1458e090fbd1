/*
 * test_journal.c — the overlay journal: location rules, schema and WAL settings, one
 * transaction per statement, auto-patch, BEGIN/REMOVE/APPLY bookkeeping, UNDO / REDO /
 * ROLLBACK TO, and the refusals (other base, newer schema, not a database, not lql's,
 * unwritable place) with their exact texts.
 */
#include "journal.h"
#include "t.h"
#include "t_file.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHA_A "aaaaaaaaaaaaaaaa1111111111111111aaaaaaaaaaaaaaaa1111111111111111"
#define SHA_B "bbbbbbbbbbbbbbbb2222222222222222bbbbbbbbbbbbbbbb2222222222222222"
#define HID 8

static char dir[256];

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

static void make_vec(float *v, int n, float base)
{
    for (int i = 0; i < n; i++)
        v[i] = base + 0.125f * (float)i - (i % 3 ? 0.0f : 1e-7f);
}

/* A DELETE-like op and an UPDATE-like op with a gate row and metadata. */
static void make_ops(vx_op ops[2], int layer, int feature, float base)
{
    float g[HID];
    make_vec(g, HID, base);
    vx_op_init(&ops[0], VX_OP_DELETE);
    ops[0].layer = layer;
    ops[0].feature = feature;
    vx_op_set_str(&ops[0].reason, "test", NULL);
    vx_op_init(&ops[1], VX_OP_UPDATE);
    ops[1].layer = layer;
    ops[1].feature = feature + 1;
    ops[1].has_meta = 1;
    vx_op_set_str(&ops[1].meta_token, " Paris", NULL);
    ops[1].meta_id = 42;
    ops[1].meta_c = 0.75;
    vx_op_set_vec(&ops[1], "gate", 1, HID, g, NULL);
}

static int64_t active_count(vx_journal *j)
{
    vx_op *ops;
    size_t n;
    vx_err e = {0};
    if (vx_journal_active_ops(j, &ops, &n, &e))
        return -1;
    vx_ops_free(ops, n);
    return (int64_t)n;
}

static void sql_exec(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_open(path, &db);
    sqlite3_exec(db, sql, NULL, NULL, NULL);
    sqlite3_close(db);
}

static void sql_text(const char *path, const char *sql, char *out, size_t n)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    out[0] = '\0';
    sqlite3_open(path, &db);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
            snprintf(out, n, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
}

static void test_locate(void)
{
    char out[512], want[512];
    vx_err e = {0};
    char cont[300];
    path_in(cont, sizeof cont, "tiny.vindex3");
    mkdir(cont, 0755);
    path_in(cont, sizeof cont, "tiny.vindex3/");
    CHECK(vx_journal_locate(cont, SHA_A, out, sizeof out, &e) == 0);
    path_in(want, sizeof want, "tiny.vindex3.lqljournal");
    CHECK_STR(out, want);
    /* never inside the container */
    CHECK(strncmp(out, cont, strlen(cont)) != 0);
    /* one container, one journal: every spelling of it, a symlink to it and "." inside it
     * name the same file (".", "x/." and "x/./" used to bind without their journal, a
     * symlink with a second one) */
    static const char *const spellings[] = {"tiny.vindex3/.", "tiny.vindex3/./",
                                            "tiny.vindex3//", "alias", "alias/", "."};
    char alias[300], cwd[4096];
    path_in(alias, sizeof alias, "alias");
    CHECK(symlink("tiny.vindex3", alias) == 0);
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    for (size_t i = 0; i < sizeof spellings / sizeof *spellings; i++) {
        int inside = !strcmp(spellings[i], ".");
        char sp[300];
        path_in(sp, sizeof sp, spellings[i]);
        path_in(cont, sizeof cont, "tiny.vindex3");
        if (inside)
            CHECK(chdir(cont) == 0);
        out[0] = '\0';
        CHECK_MSG(vx_journal_locate(inside ? "." : sp, SHA_A, out, sizeof out, &e) == 0, "%s: %s",
                  spellings[i], e.msg);
        CHECK_STR(out, want);
        if (inside)
            CHECK(chdir(cwd) == 0);
    }

    /* an unwritable parent falls back to $XDG_DATA_HOME/lql/ */
    char xdg[300];
    path_in(xdg, sizeof xdg, "xdg");
    setenv("XDG_DATA_HOME", xdg, 1);
    CHECK(vx_journal_locate("/proc/self/fd", SHA_A, out, sizeof out, &e) == 0);
    snprintf(want, sizeof want, "%s/lql/fd-aaaaaaaaaaaaaaaa.lqljournal", xdg);
    CHECK_STR(out, want);
    /* locating creates nothing; the first edit creates the directory */
    struct stat sb;
    snprintf(want, sizeof want, "%s/lql", xdg);
    CHECK(stat(want, &sb) != 0);
    CHECK(vx_journal_create_dir(out, &e) == 0);
    CHECK(stat(want, &sb) == 0 && S_ISDIR(sb.st_mode));
    unsetenv("XDG_DATA_HOME");
    setenv("HOME", xdg, 1);
    CHECK(vx_journal_locate("/proc/self/ns", SHA_B, out, sizeof out, &e) == 0);
    snprintf(want, sizeof want, "%s/.local/share/lql/ns-bbbbbbbbbbbbbbbb.lqljournal", xdg);
    CHECK_STR(out, want);

    CHECK(vx_journal_locate("/", SHA_A, out, sizeof out, &e) == -1);
    CHECK_STR(e.msg, "cannot name a journal for container '/' (the root directory): use USE ... "
                     "JOURNAL \"path\"");
    CHECK(vx_journal_locate("no-such.vindex3", SHA_A, out, sizeof out, &e) == -1);
    CHECK_STR(e.msg, "cannot resolve container directory 'no-such.vindex3': No such file or "
                     "directory");
}

static void test_open_and_record(void)
{
    char p[300], buf[128];
    vx_err e = {0};
    vx_journal *j;
    path_in(p, sizeof p, "a.lqljournal");
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, &e) == 0);
    if (!j)
        return;
    sql_text(p, "PRAGMA journal_mode", buf, sizeof buf);
    CHECK_STR(buf, "wal");
    sql_text(p, "PRAGMA user_version", buf, sizeof buf);
    CHECK_STR(buf, "3");
    sql_text(p, "SELECT value FROM meta WHERE key = 'base_sha256'", buf, sizeof buf);
    CHECK_STR(buf, SHA_A);
    CHECK(vx_journal_recording(j) == 0);

    vx_op ops[2];
    make_ops(ops, 2, 10, 1.0f);
    vx_record_info info;
    CHECK(vx_journal_record(j, "DELETE ...", ops, 2, &info, &e) == 0);
    CHECK(info.auto_started == 1);
    CHECK(info.history_n == 1);
    CHECK_STR(info.patch_name, "auto-1");
    CHECK_STR(vx_journal_recording_name(j), "auto-1");
    uint64_t gen = vx_journal_generation(j);
    CHECK(vx_journal_record(j, "UPDATE ...", ops, 2, &info, &e) == 0);
    CHECK(info.auto_started == 0);
    CHECK(info.history_n == 2);
    CHECK(vx_journal_generation(j) > gen);

    /* read back: order, fields and bit-exact vectors */
    vx_op *got;
    size_t n;
    CHECK(vx_journal_active_ops(j, &got, &n, &e) == 0);
    CHECK(n == 4);
    if (n == 4) {
        CHECK(got[0].kind == VX_OP_DELETE && got[0].layer == 2 && got[0].feature == 10);
        CHECK_STR(got[0].reason, "test");
        CHECK(got[1].kind == VX_OP_UPDATE && got[1].feature == 11 && got[1].has_meta);
        CHECK_STR(got[1].meta_token, " Paris");
        CHECK(got[1].meta_id == 42);
        CHECK_NEAR(got[1].meta_c, 0.75, 0);
        CHECK(isnan(got[1].confidence));
        const vx_opvec *v = vx_op_vec(&got[1], "gate");
        CHECK(v && v->rows == 1 && v->cols == HID);
        if (v)
            CHECK(memcmp(v->data, ops[1].vec[0].data, HID * sizeof(float)) == 0);
        CHECK(got[0].seq < got[1].seq && got[1].seq < got[2].seq);
        CHECK(got[2].history_n == 2);
    }
    vx_ops_free(got, n);

    /* history and undo / redo / rollback */
    vx_history_entry *h;
    CHECK(vx_journal_history(j, &h, &n, &e) == 0);
    CHECK(n == 2);
    if (n == 2) {
        CHECK_STR(h[0].text, "DELETE ...");
        CHECK_STR(h[0].action, "edit");
        CHECK_STR(h[0].patch_name, "auto-1");
        CHECK(h[0].n_ops == 2 && h[1].first_seq == 3 && h[1].last_seq == 4);
        CHECK(h[0].undone == 0);
    }
    vx_history_free(h, n);
    int64_t u;
    CHECK(vx_journal_undo(j, &u, &e) == 0 && u == 2);
    CHECK(active_count(j) == 2);
    CHECK(vx_journal_redo(j, &u, &e) == 0 && u == 2);
    CHECK(active_count(j) == 4);
    CHECK(vx_journal_redo(j, &u, &e) == 0 && u == 0);
    int64_t cnt;
    CHECK(vx_journal_rollback(j, 0, &cnt, &e) == 0 && cnt == 2);
    CHECK(active_count(j) == 0);
    CHECK(vx_journal_undo(j, &u, &e) == 0 && u == 0);
    CHECK(vx_journal_rollback(j, 9, &cnt, &e) == -1);
    CHECK_STR(e.msg, "no such history entry: 9 (history has 1-2; 0 is the base)");
    /* a patch whose statements are all undone is no longer listed, unless recording */
    vx_patch_info *pi;
    CHECK(vx_journal_patches(j, &pi, &n, &e) == 0 && n == 1 && pi[0].recording == 1 &&
          pi[0].n_ops == 0);
    vx_patch_infos_free(pi, n);
    CHECK(vx_journal_redo(j, &u, &e) == 0 && u == 1);
    CHECK(active_count(j) == 2);

    /* BEGIN PATCH takes over the anonymous one */
    int64_t taken;
    CHECK(vx_journal_begin_patch(j, "geo", &taken, &e) == 0);
    CHECK(taken == 2);
    CHECK_STR(vx_journal_recording_name(j), "geo");
    CHECK(vx_journal_begin_patch(j, "geo", &taken, &e) == -1);
    CHECK_STR(e.msg, "a patch named 'geo' already exists (REMOVE PATCH it first or choose "
                     "another name)");
    CHECK(vx_journal_record(j, "INSERT ...", ops, 1, &info, &e) == 0);
    CHECK(info.auto_started == 0 && strcmp(info.patch_name, "geo") == 0);

    /* APPLY (import) and REMOVE */
    vx_patch_meta meta = {"imported", "a description", "me", "[\"t\"]", "x.vlp"};
    int64_t pid, hn;
    CHECK(vx_journal_import(j, "APPLY PATCH \"x.vlp\"", &meta, ops, 2, &pid, &hn, &e) == 0);
    CHECK(hn == 4);
    CHECK(active_count(j) == 5);
    CHECK(vx_journal_patches(j, &pi, &n, &e) == 0);
    CHECK(n == 2);
    if (n == 2) {
        CHECK_STR(pi[0].name, "geo");
        CHECK(pi[0].anonymous == 0 && pi[0].recording == 1 && pi[0].n_delete == 2 &&
              pi[0].n_update == 1 && pi[0].n_ops == 3);
        CHECK_STR(pi[1].name, "imported");
        CHECK_STR(pi[1].description, "a description");
        CHECK(pi[1].applied == 1 && pi[1].recording == 0 && pi[1].n_ops == 2);
    }
    vx_patch_infos_free(pi, n);
    CHECK(vx_journal_remove_patch(j, "REMOVE PATCH \"imported\"", "imported", &pid, &e) == 0);
    CHECK(active_count(j) == 3);
    CHECK(vx_journal_remove_patch(j, "REMOVE PATCH \"nope\"", "nope", &pid, &e) == -1);
    CHECK_STR(e.msg, "no such patch: 'nope' (SHOW PATCHES lists them)");
    CHECK(vx_journal_undo(j, &u, &e) == 0 && u == 5);     /* undo the remove */
    CHECK(active_count(j) == 5);
    CHECK(vx_journal_rollback(j, 3, &cnt, &e) == 0 && cnt == 1);   /* drops the apply */
    CHECK(active_count(j) == 3);
    /* the patch's own ops, for SAVE PATCH */
    vx_op *po;
    CHECK(vx_journal_patch_ops(j, vx_journal_recording(j), &po, &n, &e) == 0 && n == 3);
    vx_ops_free(po, n);
    vx_journal_close(j);

    /* reopen: everything persists; recording is per session */
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, &e) == 0);
    if (j) {
        CHECK(active_count(j) == 3);
        CHECK(vx_journal_recording(j) == 0);
        CHECK(vx_journal_record(j, "DELETE again", ops, 1, &info, &e) == 0);
        CHECK(info.auto_started == 1 && info.history_n == 6);
        CHECK_STR(info.patch_name, "auto-3");
        vx_journal_close(j);
    }
    vx_op_clear(&ops[0]);
    vx_op_clear(&ops[1]);

    /* the same journal refuses another base, naming both */
    CHECK(vx_journal_open(p, SHA_B, "other", &j, &e) == -1 && !j);
    char want[700];
    snprintf(want, sizeof want,
             "journal '%s' belongs to another base: it was recorded for model 'tiny' (index "
             "sha256 aaaaaaaaaaaaaaaa...) but the container it is opened with is model 'other' (index "
             "sha256 bbbbbbbbbbbbbbbb...); move it away or name another journal", p);
    CHECK_STR(e.msg, want);
    CHECK(e.code == VX_EVERIFY);

    /* a newer schema refuses by version */
    sql_exec(p, "PRAGMA user_version = 7");
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, &e) == -1);
    snprintf(want, sizeof want, "journal '%s' has schema version 7, newer than this lql "
             "supports (3): use a newer lql or another journal", p);
    CHECK_STR(e.msg, want);
}

/* Schema 2 added ops.expert (a low-rank insert on one routed expert of a MoE layer). A
 * version-1 journal — ops without the column — migrates on open and replays its ops as
 * layer-wide (expert -1); an expert-addressed insert round-trips. */
static void test_migrate_v1(void)
{
    char p[300], buf[64];
    vx_err e = {0};
    vx_journal *j;
    path_in(p, sizeof p, "v1.lqljournal");
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, &e) == 0);
    if (!j)
        return;
    float u[HID], v[4];
    make_vec(u, HID, 0.5f);
    make_vec(v, 4, -1.0f);
    vx_op op;
    vx_op_init(&op, VX_OP_INSERT);
    op.layer = 1;
    vx_op_set_vec(&op, "u", HID, 1, u, NULL);
    vx_op_set_vec(&op, "v", 4, 1, v, NULL);
    vx_record_info info;
    CHECK(vx_journal_record(j, "INSERT ...", &op, 1, &info, &e) == 0);
    vx_journal_close(j);
    /* what a version-1 lql wrote: no expert column (nor schema 3's digests) */
    sql_exec(p, "ALTER TABLE ops DROP COLUMN expert; ALTER TABLE ops DROP COLUMN digest;"
                " DELETE FROM meta WHERE key = 'ops_digest_from'; PRAGMA user_version = 1");
    sql_text(p, "PRAGMA user_version", buf, sizeof buf);
    CHECK_STR(buf, "1");
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, &e) == 0);
    if (!j) {
        vx_op_clear(&op);
        return;
    }
    vx_op *got;
    size_t n;
    CHECK(vx_journal_active_ops(j, &got, &n, &e) == 0);
    CHECK(n == 1 && got[0].expert == -1 && vx_op_vec(&got[0], "v"));
    vx_ops_free(got, n);
    op.expert = 5;
    CHECK(vx_journal_record(j, "INSERT ...", &op, 1, &info, &e) == 0);
    CHECK(vx_journal_active_ops(j, &got, &n, &e) == 0);
    CHECK(n == 2 && got[0].expert == -1 && got[1].expert == 5);
    vx_ops_free(got, n);
    vx_journal_close(j);
    vx_op_clear(&op);
    sql_text(p, "PRAGMA user_version", buf, sizeof buf);
    CHECK_STR(buf, "3");
}

/* A sha256 over every field and vector of the active ops: equal fingerprints, equal
 * replays. NULL when they cannot be read. */
static char *ops_fingerprint(vx_journal *j, char hex[65], vx_err *e)
{
    vx_op *ops;
    size_t n;
    if (vx_journal_active_ops(j, &ops, &n, e))
        return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    for (size_t i = 0; i < n; i++) {
        const vx_op *o = &ops[i];
        fprintf(f, "%d %d %d %d %s|%s|%s|%s|%s|%s %a %a %d %lld %a %lld;", (int)o->kind,
                o->layer, o->feature, o->expert, o->entity ? o->entity : "-",
                o->relation ? o->relation : "-", o->target ? o->target : "-",
                o->mode ? o->mode : "-", o->reason ? o->reason : "-",
                o->meta_token ? o->meta_token : "-", o->confidence, o->alpha, o->has_meta,
                (long long)o->meta_id, o->meta_c, (long long)o->target_id);
        for (int v = 0; v < o->nvec; v++) {
            fprintf(f, "%s %lld %lld:", o->vec[v].role, (long long)o->vec[v].rows,
                    (long long)o->vec[v].cols);
            fwrite(o->vec[v].data, sizeof(float), (size_t)(o->vec[v].rows * o->vec[v].cols), f);
        }
    }
    fclose(f);
    vx_sha256_hex(text, len, hex);
    free(text);
    vx_ops_free(ops, n);
    return hex;
}

/* A fresh journal `name` (its path in p) and make_ops(ops, 1, 2, 3.0f); NULL when it
 * does not open (checked). */
static vx_journal *open_with_ops(const char *name, char *p, size_t n, vx_op ops[2])
{
    vx_err e = {0};
    vx_journal *j = NULL;
    path_in(p, n, name);
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, &e) == 0);
    if (j)
        make_ops(ops, 1, 2, 3.0f);
    return j;
}

/* Opening p works and reading its operations is refused (the reason in e). */
static int replay_refused(const char *p, vx_err *e)
{
    vx_journal *j;
    char hex[65];
    int refused = 0;
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, e) == 0);
    if (j) {
        refused = ops_fingerprint(j, hex, e) == NULL;
        vx_journal_close(j);
    }
    return refused;
}

/* Schema 3 records each operation's sha256: a byte changed in a vector or a field after
 * the commit refuses the replay by operation and history number. A version-2 journal
 * migrates; its operations, which carry none, replay unchecked, and every later one has
 * one. */
static void test_digests(void)
{
    char p[300], want[600], hex[65], hex2[65];
    vx_err e = {0};
    vx_op ops[2];
    vx_journal *j = open_with_ops("digest.lqljournal", p, sizeof p, ops);
    if (!j)
        return;
    ops[1].confidence = -0.0;      /* SQLite may store a whole REAL as the integer 0 */
    ops[1].alpha = 2.0;
    vx_record_info info;
    CHECK(vx_journal_record(j, "stmt", ops, 2, &info, &e) == 0);
    CHECK(vx_journal_record(j, "stmt", ops, 2, &info, &e) == 0);
    CHECK(ops_fingerprint(j, hex, &e) != NULL);
    vx_journal_close(j);
    char buf[128];
    sql_text(p, "SELECT count(*) FROM ops WHERE length(digest) = 64", buf, sizeof buf);
    CHECK_STR(buf, "4");

    /* one float of operation 4's gate, changed in place */
    sql_exec(p, "UPDATE vectors SET data = CAST(substr(data, 1, 16) || x'0000803f' ||"
                " substr(data, 21) AS BLOB) WHERE op_seq = 4");
    sql_text(p, "SELECT hex(substr(data, 17, 4)) FROM vectors WHERE op_seq = 4", buf, sizeof buf);
    CHECK_STR(buf, "0000803F");
    CHECK(replay_refused(p, &e));
    snprintf(want, sizeof want, "journal '%s': operation 4 (history 2) does not match the "
             "sha256 recorded with it: the file was changed after it was written; nothing "
             "was replayed (move it away or name another journal)", p);
    CHECK_STR(e.msg, want);
    CHECK(e.code == VX_EVERIFY);
    /* a field: the layer of operation 1; then the digest itself gone */
    sql_exec(p, "UPDATE vectors SET data = (SELECT data FROM vectors WHERE op_seq = 2)"
                " WHERE op_seq = 4; UPDATE ops SET layer = 2 WHERE seq = 1");
    CHECK(replay_refused(p, &e));
    CHECK_HAS(e.msg, "operation 1 (history 1) does not match the sha256 recorded with it");
    sql_exec(p, "UPDATE ops SET layer = 1 WHERE seq = 1; UPDATE ops SET digest = NULL WHERE seq = 3");
    CHECK(replay_refused(p, &e));
    CHECK_HAS(e.msg, "operation 3 (history 2) has no sha256");

    /* what a version-2 lql wrote: no digests; they replay, and what follows has them */
    sql_exec(p, "ALTER TABLE ops DROP COLUMN digest; DELETE FROM meta WHERE key = "
                "'ops_digest_from'; PRAGMA user_version = 2");
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, &e) == 0);
    if (j) {
        CHECK(ops_fingerprint(j, hex2, &e) != NULL && !strcmp(hex, hex2));
        CHECK(vx_journal_record(j, "stmt", ops, 2, &info, &e) == 0);
        CHECK(active_count(j) == 6);
        vx_journal_close(j);
    }
    sql_text(p, "SELECT value FROM meta WHERE key = 'ops_digest_from'", buf, sizeof buf);
    CHECK_STR(buf, "5");
    sql_text(p, "SELECT group_concat(seq) FROM ops WHERE digest IS NOT NULL", buf, sizeof buf);
    CHECK_STR(buf, "5,6");
    /* a legacy operation has no digest, so its columns are checked by type: SQLite would
     * hand back 0 for text and 1 for 1.5 where a layer belongs */
    static const char *const bad[][2] = {
        {"UPDATE ops SET layer = 'one' WHERE seq = 1", "column layer holds text where an id"},
        {"UPDATE ops SET layer = 1.5 WHERE seq = 1", "column layer holds a real where an id"},
        {"UPDATE ops SET feature = 4294967298 WHERE seq = 1",
         "column feature holds an integer out of range where an id (0 to 2147483647) belongs"},
        {"UPDATE ops SET entity = x'41' WHERE seq = 1", "column entity holds a blob where text"},
        {"UPDATE ops SET alpha = 'big' WHERE seq = 1", "column alpha holds text where a number"},
        {"UPDATE vectors SET data = substr(hex(zeroblob(4 * rows * cols)), 1, 4 * rows * cols)"
         " WHERE op_seq = 4",
         "a vector of operation 4: column data holds text where a blob belongs"},
    };
    size_t keep_n = 0;
    unsigned char *keep = t_slurp(&keep_n, "%s", p);
    for (size_t i = 0; keep && i < sizeof bad / sizeof *bad; i++) {
        sql_exec(p, bad[i][0]);
        CHECK(replay_refused(p, &e));
        CHECK_HAS(e.msg, bad[i][1]);
        CHECK_HAS(e.msg, "; nothing was replayed");
        CHECK(e.code == VX_EFORMAT);
        FILE *back = fopen(p, "wb");
        CHECK(back && fwrite(keep, 1, keep_n, back) == keep_n);
        if (back) fclose(back);
    }
    free(keep);
    CHECK(!replay_refused(p, &e));
    /* a legacy operation may change unseen; a later one may not lose its digest */
    sql_exec(p, "UPDATE ops SET digest = NULL WHERE seq = 6");
    CHECK(replay_refused(p, &e));
    CHECK_HAS(e.msg, "operation 6 (history 3) has no sha256");
    vx_op_clear(&ops[0]);
    vx_op_clear(&ops[1]);
}

static void test_refusals(void)
{
    char p[300], want[600];
    vx_err e = {0};
    vx_journal *j;

    path_in(p, sizeof p, "garbage.lqljournal");
    FILE *f = fopen(p, "wb");
    for (int i = 0; i < 4096; i++)
        fputc("not a database "[i % 15], f);
    fclose(f);
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, &e) == -1 && !j);
    snprintf(want, sizeof want, "journal '%s' is not an lql journal: file is not a database", p);
    CHECK_STR(e.msg, want);

    path_in(p, sizeof p, "other.db");
    sql_exec(p, "CREATE TABLE t(x); CREATE TABLE u(y)");
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, &e) == -1);
    snprintf(want, sizeof want, "journal '%s' is not an lql journal (a database with 2 other "
             "objects)", p);
    CHECK_STR(e.msg, want);

    CHECK(vx_journal_open("/proc/self/x.lqljournal", SHA_A, "tiny", &j, &e) == -1);
    CHECK_HAS(e.msg, "cannot open journal '/proc/self/x.lqljournal'");

    CHECK(vx_journal_open(dir, SHA_A, "tiny", &j, &e) == -1);
    snprintf(want, sizeof want, "cannot open journal '%s': not a regular file", dir);
    CHECK_STR(e.msg, want);

    /* a statement that fails mid-way leaves nothing behind */
    path_in(p, sizeof p, "atomic.lqljournal");
    CHECK(vx_journal_open(p, SHA_A, "tiny", &j, &e) == 0);
    if (j) {
        vx_op ops[2];
        make_ops(ops, 1, 1, 0.5f);
        ops[1].kind = (vx_op_kind)99;
        vx_record_info info;
        CHECK(vx_journal_record(j, "bad", ops, 2, &info, &e) == -1);
        CHECK_STR(e.msg, "operation 2 has an invalid kind 99");
        CHECK(active_count(j) == 0);
        CHECK(vx_journal_recording(j) == 0);
        vx_history_entry *h;
        size_t n;
        CHECK(vx_journal_history(j, &h, &n, &e) == 0 && n == 0);
        vx_history_free(h, n);
        ops[1].kind = VX_OP_UPDATE;
        CHECK(vx_journal_record(j, "good", ops, 2, &info, &e) == 0 && info.history_n == 1);
        vx_op_clear(&ops[0]);
        vx_op_clear(&ops[1]);
        vx_journal_close(j);
    }
}

/* A journal whose pages are damaged after the fact: every damaged copy is refused as
 * corrupt / not a database, or opens and then replays exactly what was recorded or
 * refuses to (the digests) — never a crash, never other operations. */
static void test_damage(void)
{
    char p[300], q[320];
    vx_err e = {0};
    vx_op ops[2];
    vx_journal *j = open_with_ops("damage.lqljournal", p, sizeof p, ops);
    if (!j)
        return;
    vx_record_info info;
    for (int i = 0; i < 20; i++)
        CHECK(vx_journal_record(j, "stmt", ops, 2, &info, &e) == 0);
    vx_op_clear(&ops[0]);
    vx_op_clear(&ops[1]);
    char hex[65], hex2[65];
    CHECK(ops_fingerprint(j, hex, &e) != NULL);
    vx_journal_close(j);   /* the last close checkpoints the WAL into the file */
    FILE *f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    unsigned char *img = malloc((size_t)size);
    fseek(f, 0, SEEK_SET);
    CHECK(fread(img, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    int refused = 0, opened = 0, unread = 0;
    unsigned seed = 7;
    for (int round = 0; round < 40; round++) {
        path_in(q, sizeof q, "damaged.lqljournal");
        unsigned char *copy = malloc((size_t)size);
        memcpy(copy, img, (size_t)size);
        for (int k = 0; k < 16; k++) {
            seed = seed * 1103515245u + 12345u;
            long at = (long)((seed >> 8) % (unsigned)size);
            copy[at] ^= (unsigned char)(1 + (seed & 0x7f));
        }
        f = fopen(q, "wb");
        fwrite(copy, 1, (size_t)size, f);
        fclose(f);
        free(copy);
        if (vx_journal_open(q, SHA_A, "tiny", &j, &e) == 0) {
            /* what opens replays exactly what was recorded, or refuses to */
            if (ops_fingerprint(j, hex2, &e))
                CHECK_MSG(!strcmp(hex, hex2), "round %d replays other operations", round);
            else
                unread++;
            vx_journal_close(j);
            opened++;
        } else {
            refused++;
            CHECK_MSG(strstr(e.msg, "is corrupt") || strstr(e.msg, "not an lql journal") ||
                      strstr(e.msg, "belongs to another base") || strstr(e.msg, "schema version"),
                      "unexpected refusal: %s", e.msg);
        }
        char side[340];
        remove(q);
        snprintf(side, sizeof side, "%s-wal", q);
        remove(side);
        snprintf(side, sizeof side, "%s-shm", q);
        remove(side);
    }
    printf("damaged journals: %d refused, %d opened (%d of them refused their replay)\n",
           refused, opened, unread);
    CHECK(refused > 0);
    free(img);
}

/* ":memory:" is a private journal for one handle: usable, and gone when closed. */
static void test_memory(void)
{
    vx_err e = {0};
    vx_journal *j, *k;
    CHECK(vx_journal_open(":memory:", SHA_A, "tiny", &j, &e) == 0);
    CHECK(vx_journal_open(":memory:", SHA_A, "tiny", &k, &e) == 0);
    if (!j || !k)
        return;
    vx_op ops[2];
    make_ops(ops, 0, 0, 2.0f);
    vx_record_info info;
    CHECK(vx_journal_record(j, "m", ops, 2, &info, &e) == 0 && info.auto_started);
    CHECK(active_count(j) == 2);
    CHECK(active_count(k) == 0);
    CHECK_STR(vx_journal_path(j), ":memory:");
    vx_op_clear(&ops[0]);
    vx_op_clear(&ops[1]);
    vx_journal_close(j);
    vx_journal_close(k);
}

/* A first edit on a full disk (here a file size limit of 0 bytes) fails to create the
 * journal and leaves no empty file behind, which REPRESENT would take for edits. */
static void test_full_create(void)
{
    char p[300];
    path_in(p, sizeof p, "full.lqljournal");
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit r = {0, 0};
        signal(SIGXFSZ, SIG_IGN);
        vx_journal *j = NULL;
        vx_err e = {0};
        if (setrlimit(RLIMIT_FSIZE, &r) != 0)
            _exit(2);
        _exit(vx_journal_open(p, SHA_A, "tiny", &j, &e) == -1 && strstr(e.msg, p) ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    CHECK(access(p, F_OK) != 0);
}

/* Two sessions on one journal: an edit computed from a state another session has since
 * committed over is refused (VX_ESTALE) with nothing recorded, and recorded once the
 * handle has looked again (lql then replays and computes it anew). Two INSERTs run at once
 * both picked one free feature and the later silently overwrote the earlier. */
static void test_stale(void)
{
    char p[300];
    vx_err e = {0};
    vx_journal *a = NULL, *b = NULL, *c = NULL;
    path_in(p, sizeof p, "stale.lqljournal");
    CHECK(vx_journal_open(p, SHA_A, "tiny", &a, &e) == 0);
    CHECK(vx_journal_open(p, SHA_A, "tiny", &b, &e) == 0);   /* empty: its version seen */
    if (!a || !b)
        return;
    vx_journal_strict(a);
    vx_journal_strict(b);
    vx_op ops[2];
    make_ops(ops, 1, 5, 1.0f);
    vx_record_info info;
    CHECK(vx_journal_record(a, "INSERT a", ops, 2, &info, &e) == 0);
    CHECK(vx_journal_record(a, "INSERT a2", ops, 2, &info, &e) == 0);   /* its own: current */
    char want[600];
    snprintf(want, sizeof want, "journal '%s' was changed by another session while this "
             "statement ran: nothing was recorded", p);
    CHECK(vx_journal_record(b, "INSERT b", ops, 2, &info, &e) == -1 && e.code == VX_ESTALE);
    CHECK_STR(e.msg, want);
    CHECK(active_count(b) == 4);
    CHECK(vx_journal_moved(b, &e) == 1);
    CHECK(vx_journal_record(b, "INSERT b", ops, 2, &info, &e) == 0 && info.history_n == 3);
    /* opened over history it has not replayed: nothing it computed is current */
    CHECK(vx_journal_open(p, SHA_A, "tiny", &c, &e) == 0);
    if (c) {
        vx_journal_strict(c);
        CHECK(vx_journal_record(c, "INSERT c", ops, 2, &info, &e) == -1 && e.code == VX_ESTALE);
        CHECK(vx_journal_moved(c, &e) == 1);
        CHECK(vx_journal_record(c, "INSERT c", ops, 2, &info, &e) == 0 && info.history_n == 4);
    }
    CHECK(vx_journal_record(a, "INSERT a3", ops, 2, &info, &e) == -1 && e.code == VX_ESTALE);
    /* another process holding the write lock: a session that only reads still opens and
     * replays at once (USE took the write lock to check the schema, waited 5 s, failed) */
    sqlite3 *w = NULL;
    CHECK(sqlite3_open(p, &w) == SQLITE_OK && sqlite3_exec(w, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
    vx_journal *r = NULL;
    CHECK_MSG(vx_journal_open(p, SHA_A, "tiny", &r, &e) == 0, "%s", e.msg);
    if (r) {
        CHECK(active_count(r) == 8);
        vx_journal_close(r);
    }
    sqlite3_exec(w, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(w);
    vx_op_clear(&ops[0]);
    vx_op_clear(&ops[1]);
    vx_journal_close(a);
    vx_journal_close(b);
    vx_journal_close(c);
    /* an op whose statement is gone (edited outside lql) is named, not skipped by the
     * replay's join (it replayed one op fewer without a word) */
    sql_exec(p, "UPDATE ops SET history_n = 777 WHERE seq = 1");
    vx_journal *d = NULL;
    vx_op *got = NULL;
    size_t n = 0;
    CHECK(vx_journal_open(p, SHA_A, "tiny", &d, &e) == 0);
    if (d) {
        CHECK(vx_journal_active_ops(d, &got, &n, &e) == -1 && e.code == VX_EFORMAT);
        snprintf(want, sizeof want, "journal '%s': 1 operations belong to no statement of its "
                 "history or to no patch (it was changed outside lql)", p);
        CHECK_STR(e.msg, want);
        vx_journal_close(d);
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/test_journal.XXXXXX", LQL_BINARY_DIR);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_locate();
    test_open_and_record();
    test_refusals();
    test_migrate_v1();
    test_digests();
    test_memory();
    test_stale();
    test_full_create();
    test_damage();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (t_fail == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return T_DONE();
}
