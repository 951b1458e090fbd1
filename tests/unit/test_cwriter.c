/*
 * test_cwriter.c — the one container writer (vx_cw_*) and single-file writer (vx_afile_*):
 * the target rule and its messages, the temporary sibling's name, carry by hard link with
 * the base never written through, commit and abort, a target that appears meanwhile, and
 * a writer killed midway leaving the target absent. Encode, bank import, COMPILE, COMPACT
 * and export are tested through their own suites; this file tests the steps they share.
 */
#include "t.h"
#include "t_file.h"
#include "vx_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[512];

/* A file system without hard links (vfat, exFAT): set, the writer's link() fails as it
 * does there. This definition takes the place of libc's in this executable. */
static int no_links;

int link(const char *from, const char *to)
{
    if (no_links) {
        errno = EPERM;
        return -1;
    }
    return linkat(AT_FDCWD, from, AT_FDCWD, to, 0);
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int exists(const char *p)
{
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static void target_rule(void)
{
    char base[600], out[1024], want[4096], path[800];
    vx_err e = {0};
    snprintf(base, sizeof base, "%s/base", dir);
    mkdir(base, 0755);
    snprintf(path, sizeof path, "%s/a.txt", base);
    put(path, "base file\n");
    CHECK(vx_cw_check(NULL, NULL, 0, "t", &e) == -1);
    CHECK_STR(e.msg, "t: an output path is required");
    /* a non-empty directory, and a file, are refused; an empty directory is accepted */
    CHECK(vx_cw_check(base, NULL, 0, "compile", &e) == -1);
    snprintf(want, sizeof want, "compile: '%s' already exists; lql does not overwrite it", base);
    CHECK_STR(e.msg, want);
    CHECK(vx_cw_check(path, NULL, VX_CW_FILE, "export gguf", &e) == -1);
    snprintf(out, sizeof out, "%s/empty", dir);
    mkdir(out, 0755);
    CHECK_MSG(vx_cw_check(out, NULL, 0, "t", &e) == 0, "%s", e.msg);
    CHECK(vx_cw_check(out, NULL, VX_CW_FILE, "t", &e) == -1);   /* a file target: never */
    /* inside the base, or the base itself through a trailing slash */
    snprintf(out, sizeof out, "%s/inner", base);
    CHECK(vx_cw_check(out, base, 0, "compact", &e) == -1);
    snprintf(want, sizeof want, "compact: '%s' is inside the container it is made from "
             "('%s'); write it outside", out, base);
    CHECK_STR(e.msg, want);
    /* a parent that is a file, or missing */
    snprintf(out, sizeof out, "%s/x", path);
    CHECK(vx_cw_check(out, NULL, 0, "export", &e) == -1);
    snprintf(want, sizeof want, "export: cannot write '%s': its parent '%s' is not a "
             "directory", out, path);
    CHECK_STR(e.msg, want);
    snprintf(out, sizeof out, "%s/no/such", dir);
    CHECK(vx_cw_check(out, NULL, 0, "export", &e) == -1);
    snprintf(want, sizeof want, "export: cannot write '%s': its parent '%s/no' does not exist",
             out, dir);
    CHECK_STR(e.msg, want);
    /* a parent that cannot be searched (root searches everything: not checked then) */
    char locked[700];
    snprintf(locked, sizeof locked, "%s/locked", dir);
    mkdir(locked, 0755);
    snprintf(out, sizeof out, "%s/sub/x", locked);
    snprintf(path, sizeof path, "%s/sub", locked);
    mkdir(path, 0755);
    chmod(locked, 0);
    if (geteuid() != 0) {
        CHECK(vx_cw_check(out, NULL, 0, "export", &e) == -1);
        snprintf(want, sizeof want, "export: cannot write '%s': its parent '%s' cannot be "
                 "searched (permission denied)", out, path);
        CHECK_STR(e.msg, want);
    }
    chmod(locked, 0755);
}

static void write_commit_abort(void)
{
    char base[600], out[700], tmp[800], p[900], q[900], want[2048];
    vx_err e = {0};
    snprintf(base, sizeof base, "%s/base", dir);
    snprintf(out, sizeof out, "%s/out.vx/", dir);   /* a trailing slash names the same */
    vx_cw *w = NULL;
    CHECK_MSG(vx_cw_open(&w, out, base, "t", &e) == 0, "%s", e.msg);
    if (!w)
        return;
    snprintf(tmp, sizeof tmp, "%s/out.vx.tmp.%ld", dir, (long)getpid());
    CHECK_STR(vx_cw_dir(w), tmp);
    CHECK(exists(tmp));
    /* carried by hard link: the same inode as the base's file */
    CHECK(vx_cw_carry(w, "a.txt", &e) == 0);
    struct stat sa, sb;
    snprintf(p, sizeof p, "%s/a.txt", base);
    snprintf(q, sizeof q, "%s/a.txt", tmp);
    CHECK(stat(p, &sa) == 0 && stat(q, &sb) == 0 && sa.st_ino == sb.st_ino);
    /* writing that path anew never writes through the link into the base */
    CHECK(vx_cw_file(w, "a.txt", "new\n", 4, &e) == 0);
    char got[64];
    t_read_into(p, got, sizeof got);
    CHECK_STR(got, "base file\n");
    t_read_into(q, got, sizeof got);
    CHECK_STR(got, "new\n");
    /* the messages name the statement: a file, and a parent directory, under a file */
    CHECK(vx_cw_file(w, "a.txt/f", "x", 1, &e) == -1);
    snprintf(want, sizeof want, "t: cannot create '%s/a.txt/f': Not a directory", tmp);
    CHECK_STR(e.msg, want);
    CHECK(vx_cw_file(w, "a.txt/d/f", "x", 1, &e) == -1);
    snprintf(want, sizeof want, "t: cannot create '%s/a.txt/d': Not a directory", tmp);
    CHECK_STR(e.msg, want);
    /* parents are created; JSON ends with a newline */
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "version", 4);
    CHECK(vx_cw_json(w, "deep/er/x.json", j, &e) == 0);
    CHECK(vx_cw_index(w, j, &e) == 0);
    cJSON_Delete(j);
    snprintf(q, sizeof q, "%s/index.json", tmp);
    t_read_into(q, got, sizeof got);
    CHECK_STR(got, "{\n\t\"version\":\t4\n}\n");
    CHECK(vx_cw_carry(w, "missing", &e) == -1);
    CHECK_MSG(vx_cw_commit(w, &e) == 0, "%s", e.msg);
    snprintf(q, sizeof q, "%s/out.vx/deep/er/x.json", dir);
    CHECK(exists(q) && !exists(tmp));

    /* a target that appears while writing is not replaced; the temporary tree goes */
    snprintf(out, sizeof out, "%s/late.vx", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    w = NULL;
    CHECK(vx_cw_open(&w, out, NULL, "t", &e) == 0);
    CHECK(w && vx_cw_file(w, "f", "x", 1, &e) == 0);
    mkdir(out, 0755);
    snprintf(q, sizeof q, "%s/someone-elses", out);
    put(q, "theirs");
    CHECK(w && vx_cw_commit(w, &e) == -1);
    snprintf(want, sizeof want, "t: output '%s' appeared while writing; not replaced", out);
    CHECK_STR(e.msg, want);
    CHECK(exists(q) && !exists(tmp));
    /* an empty directory accepted at open is replaced */
    snprintf(out, sizeof out, "%s/empty", dir);
    w = NULL;
    CHECK(vx_cw_open(&w, out, NULL, "t", &e) == 0);
    CHECK(w && vx_cw_file(w, "f", "x", 1, &e) == 0);
    CHECK(w && vx_cw_commit(w, &e) == 0);
    snprintf(q, sizeof q, "%s/f", out);
    CHECK(exists(q));
    /* abort removes the tree; so does a cancelled commit */
    snprintf(out, sizeof out, "%s/gone.vx", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    w = NULL;
    CHECK(vx_cw_open(&w, out, NULL, "t", &e) == 0 && exists(tmp));
    vx_cw_abort(w);
    CHECK(!exists(tmp) && !exists(out));
    w = NULL;
    CHECK(vx_cw_open(&w, out, NULL, "encode", &e) == 0);
    vx_cancel_flag = 1;
    CHECK(w && vx_cw_commit(w, &e) == -1 && e.code == VX_ECANCEL);
    vx_cancel_flag = 0;
    CHECK_STR(e.msg, "encode: cancelled");
    CHECK(!exists(tmp) && !exists(out));
}

/* A child writing a container is killed at random points: the target is absent or whole
 * (its three files present), never partial. */
static void killed(void)
{
    char out[700], f[800];
    snprintf(out, sizeof out, "%s/killed.vx", dir);
    int whole = 0, absent = 0;
    srand(5);
    for (int i = 0; i < 12; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            vx_err e = {0};
            vx_cw *w = NULL;
            static char big[1 << 20];
            if (vx_cw_open(&w, out, NULL, "t", &e))
                _exit(1);
            for (int k = 0; k < 3; k++) {
                char rel[32];
                snprintf(rel, sizeof rel, "f%d", k);
                if (vx_cw_file(w, rel, big, sizeof big, &e))
                    _exit(1);
            }
            _exit(vx_cw_commit(w, &e) ? 1 : 0);
        }
        usleep((useconds_t)(rand() % 40000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        int n = 0;
        for (int k = 0; k < 3; k++) {
            snprintf(f, sizeof f, "%s/f%d", out, k);
            n += exists(f);
        }
        CHECK_MSG(exists(out) ? n == 3 : n == 0, "kill %d: %d of 3 files at the target", i, n);
        whole += exists(out);
        absent += !exists(out);
        t_rm_rf(out);
        snprintf(f, sizeof f, "%s.tmp.%ld", out, (long)pid);
        t_rm_rf(f);
    }
    printf("killed: %d absent, %d whole\n", absent, whole);
}

static int count_file(void *ctx, const char *rel, const char *path, const struct stat *sb)
{
    (void)rel;
    (void)path;
    *(int *)ctx += S_ISREG(sb->st_mode);
    return 0;
}

/* The walk every carry uses: regular files and directories only; a link, or an entry that
 * cannot be examined, fails it instead of leaving a file out of the copy. */
static void tree_walk(void)
{
    char root[600], p[700], want[2048];
    vx_err e = {0};
    int n = 0;
    snprintf(root, sizeof root, "%s/tree", dir);
    mkdir(root, 0755);
    snprintf(p, sizeof p, "%s/sub", root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/sub/f", root);
    put(p, "f");
    CHECK(vx_tree_files(root, count_file, &n, &e) == 0 && n == 1);
    snprintf(p, sizeof p, "%s/sub/dangling", root);
    CHECK(symlink("no-such-file", p) == 0);
    n = 0;
    CHECK(vx_tree_files(root, count_file, &n, &e) == -1);
    snprintf(want, sizeof want, "'%s' is a symbolic link; a container holds only regular "
             "files and directories", p);
    CHECK_STR(e.msg, want);
    unlink(p);
    CHECK(symlink("f", p) == 0);   /* to a file: refused too, not followed */
    CHECK(vx_tree_files(root, count_file, &n, &e) == -1 && e.code == VX_EUNSUPPORTED);
    unlink(p);
    /* a directory that cannot be searched: its entries cannot be examined */
    snprintf(p, sizeof p, "%s/sub", root);
    chmod(p, 0644);
    if (geteuid() != 0) {
        CHECK(vx_tree_files(root, count_file, &n, &e) == -1);
        snprintf(want, sizeof want, "cannot examine '%s/f': Permission denied", p);
        CHECK_STR(e.msg, want);
    }
    chmod(p, 0755);
}

static void single_file(void)
{
    char p[700], tmp[800], got[64], want[2048];
    vx_err e = {0};
    snprintf(p, sizeof p, "%s/one.txt", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    CHECK(vx_atomic_file(p, "one\n", 4, 0, "patch", &e) == 0);
    CHECK(vx_atomic_file(p, "two\n", 4, 0, "patch", &e) == -1);   /* linked: never replaces */
    snprintf(want, sizeof want, "patch: cannot create '%s': File exists", p);
    CHECK_STR(e.msg, want);
    t_read_into(p, got, sizeof got);
    CHECK_STR(got, "one\n");
    CHECK(vx_atomic_file(p, "two\n", 4, 1, NULL, &e) == 0);      /* renamed over it */
    t_read_into(p, got, sizeof got);
    CHECK_STR(got, "two\n");
    CHECK(!exists(tmp));
    vx_afile f;
    CHECK(vx_afile_open(&f, p, 1, NULL, &e) == 0 && exists(tmp));
    vx_afile_abort(&f);
    CHECK(!exists(tmp));
    t_read_into(p, got, sizeof got);
    CHECK_STR(got, "two\n");
    /* without hard links a new file is still published, and still never replaces one */
    no_links = 1;
    snprintf(p, sizeof p, "%s/nolinks.txt", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    CHECK_MSG(vx_atomic_file(p, "one\n", 4, 0, "patch", &e) == 0, "%s", e.msg);
    t_read_into(p, got, sizeof got);
    CHECK_STR(got, "one\n");
    CHECK(vx_atomic_file(p, "two\n", 4, 0, "patch", &e) == -1 && e.code == VX_EARG);
    snprintf(want, sizeof want, "patch: cannot create '%s': File exists", p);
    CHECK_STR(e.msg, want);
    t_read_into(p, got, sizeof got);
    CHECK_STR(got, "one\n");
    CHECK(!exists(tmp));
    no_links = 0;
    /* a replacing rename that fails says so */
    snprintf(p, sizeof p, "%s/nolinks.dir", dir);
    mkdir(p, 0755);
    snprintf(tmp, sizeof tmp, "%s/inside", p);
    put(tmp, "x");
    CHECK(vx_atomic_file(p, "two\n", 4, 1, "profile", &e) == -1);
    snprintf(want, sizeof want, "profile: cannot replace '%s': Is a directory", p);
    CHECK_STR(e.msg, want);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/cwriter.%ld", LQL_BINARY_DIR, (long)getpid());
    t_rm_rf(dir);
    if (mkdir(dir, 0755) != 0) {
        fprintf(stderr, "cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    target_rule();
    write_commit_abort();
    killed();
    tree_walk();
    single_file();
    if (t_fail == 0)
        t_rm_rf(dir);
    return T_DONE();
}
