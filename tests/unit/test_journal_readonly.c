/*
 * test_journal_readonly.c — a session that only reads creates nothing (issue 10): the
 * journal and its directory are created by the first edit. Driven through the lql CLI as an
 * unprivileged user (root drops to nobody in the child, so a 0555 directory is really
 * read-only):
 *   - a container in a read-only directory with no HOME and no XDG_DATA_HOME: USE and INFER
 *     work; the first edit is refused naming why there is no place for the journal;
 *   - the same with a writable HOME: reading (INFER, SELECT, SHOW HISTORY / PATCHES, UNDO,
 *     COMPILE with nothing to compile, a DELETE / UPDATE that matches nothing) leaves
 *     ~/.local/share/lql absent; the first DELETE creates it and the journal;
 *   - a writable directory: reading leaves no .lqljournal beside the container, nor a
 *     journal USE … JOURNAL names; the first edit creates it.
 */
#include "t.h"
#include "test_journal_fx.h"

#include <dirent.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16];

/* Run lql -c script with the environment home (NULL: no HOME, no XDG_DATA_HOME) as an
 * unprivileged user; stdout+stderr into out. Returns lql's exit status. */
static int run_lql(const char *script, const char *home)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 ||
                               setuid(65534) != 0))
            _exit(99);
        unsetenv("XDG_DATA_HOME");
        if (home)
            setenv("HOME", home, 1);
        else
            unsetenv("HOME");
        execl(LQL_BINARY_DIR "/lql", "lql", "-c", script, (char *)NULL);
        _exit(98);
    }
    close(fd[1]);
    size_t k = 0;
    ssize_t r;
    while (k < sizeof out - 1 && (r = read(fd[0], out + k, sizeof out - 1 - k)) > 0)
        k += (size_t)r;
    out[k] = '\0';
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int entries(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

int main(void)
{
    char dir[2048], ro[2100], base[2200], home[2100], share[2200], wr[2100], wbase[2200];
    char script[8192], j[2300];
    snprintf(dir, sizeof dir, "%s/h10-readonly", LQL_BINARY_DIR);
    fx_rm_rf(dir);
    mkdir(dir, 0755);
    snprintf(ro, sizeof ro, "%s/ro", dir);
    snprintf(wr, sizeof wr, "%s/rw", dir);
    snprintf(home, sizeof home, "%s/home", dir);
    snprintf(base, sizeof base, "%s/base.vindex3", ro);
    snprintf(wbase, sizeof wbase, "%s/base.vindex3", wr);
    snprintf(share, sizeof share, "%s/.local/share/lql", home);
    mkdir(ro, 0755);
    mkdir(wr, 0777);
    mkdir(home, 0777);
    chmod(wr, 0777);
    chmod(home, 0777);
    if (fx_encode_tiny(base, NULL) || fx_encode_tiny(wbase, NULL))
        return 1;
    chmod(ro, 0555);

    /* read-only directory, no HOME: reading works, the first edit says why it cannot */
    snprintf(script, sizeof script, "USE \"%s\"; INFER \"The capital of France is\" TOP 1;",
             base);
    CHECK(run_lql(script, NULL) == 0);
    CHECK_HAS(out, "-- using ");
    CHECK_HAS(out, "Par");
    snprintf(script, sizeof script, "USE \"%s\"; DELETE FROM EDGES WHERE layer = 1 AND "
             "feature = 0;", base);
    CHECK(run_lql(script, NULL) != 0);
    char want[8192];
    snprintf(want, sizeof want, "no place for the journal of '%s': its directory '%s' is not "
             "writable and neither XDG_DATA_HOME nor HOME is set (use USE ... JOURNAL "
             "\"path\")", base, ro);
    CHECK_HAS(out, want);
    CHECK(!strstr(out, "-- deleted\n"));   /* nothing is reported as deleted */
    /* UPDATE likewise; INSERT is refused before it computes the edit */
    snprintf(script, sizeof script, "USE \"%s\"; UPDATE EDGES SET confidence = 0.5 WHERE "
             "layer = 1 AND feature = 0;", base);
    CHECK(run_lql(script, NULL) != 0);
    CHECK_HAS(out, want);
    CHECK(!strstr(out, "-- updated\n"));
    snprintf(script, sizeof script, "USE \"%s\"; INSERT INTO EDGES (entity, relation, target) "
             "VALUES (\"Quintara\", \"capital\", \"Boston\");", base);
    CHECK(run_lql(script, NULL) != 0);
    CHECK_HAS(out, want);
    CHECK(!strstr(out, "-- inserted\n") && !strstr(out, "covariance"));
    /* a HOME where no directory can be made: USE and INFER work, the first edit says why */
    snprintf(script, sizeof script, "USE \"%s\"; INFER \"The capital of France is\" TOP 1; "
             "DELETE FROM EDGES WHERE layer = 1 AND feature = 0;", base);
    CHECK(run_lql(script, "/nonexistent") != 0);
    CHECK_HAS(out, "Par");
    CHECK_HAS(out, "cannot create journal directory '/nonexistent': Permission denied");
    CHECK(!strstr(out, "-- deleted\n"));

    /* read-only directory, writable HOME: statements that only read create nothing */
    snprintf(script, sizeof script,
             "USE \"%s\"; INFER \"The capital of France is\" TOP 1; "
             "SELECT * FROM FEATURES WHERE layer = 1 AND feature = 0; SHOW HISTORY; "
             "SHOW PATCHES; UNDO; DELETE FROM EDGES WHERE layer = 1 AND token = \"zzzqqq\"; "
             "UPDATE EDGES SET confidence = 0.5 WHERE layer = 1 AND token = \"zzzqqq\";", base);
    CHECK(run_lql(script, home) == 0);
    CHECK_HAS(out, "no live feature matches: nothing deleted");
    CHECK_HAS(out, "nothing to undo");
    CHECK(!exists(share));
    snprintf(script, sizeof script, "USE \"%s\"; COMPILE CURRENT INTO VINDEX \"%s/c.vindex3\";",
             base, home);
    CHECK(run_lql(script, home) != 0);
    CHECK_HAS(out, "nothing to compile: the overlay is empty");
    CHECK(!exists(share));
    /* the first edit creates the directory and the journal */
    snprintf(script, sizeof script, "USE \"%s\"; DELETE FROM EDGES WHERE layer = 1 AND "
             "feature = 0;", base);
    CHECK(run_lql(script, home) == 0);
    CHECK_HAS(out, "deleted 1 feature");
    CHECK(exists(share));
    CHECK_HAS(out, share);

    /* writable directory: reading leaves no journal beside the container */
    snprintf(j, sizeof j, "%s.lqljournal", wbase);
    snprintf(script, sizeof script,
             "USE \"%s\"; INFER \"Once upon a time\" TOP 1; SHOW HISTORY; "
             "DELETE FROM EDGES WHERE layer = 2 AND token = \"zzzqqq\";", wbase);
    CHECK(run_lql(script, home) == 0);
    CHECK(!exists(j));

    /* a journal named by USE … JOURNAL likewise: reading creates nothing (it used to be
     * created by the USE, in a -readonly shell too), the first edit does; a place where it
     * could not be created is refused by the USE */
    char named[2300];
    snprintf(named, sizeof named, "%s/named.j", wr);
    snprintf(script, sizeof script, "USE \"%s\" JOURNAL \"%s\"; INFER \"Once upon a time\" "
             "TOP 1; SHOW HISTORY;", wbase, named);
    CHECK(run_lql(script, home) == 0);
    CHECK(!exists(named));
    snprintf(script, sizeof script, "USE \"%s\" JOURNAL \"%s\"; DELETE FROM EDGES WHERE "
             "layer = 1 AND feature = 0;", wbase, named);
    CHECK(run_lql(script, home) == 0);
    CHECK(exists(named));
    snprintf(script, sizeof script, "USE \"%s\" JOURNAL \"%s/no/j\";", wbase, wr);
    CHECK(run_lql(script, home) != 0);
    CHECK_HAS(out, "journal: cannot write '");
    CHECK_HAS(out, "/no/j': its parent '");

    /* a journal beside the container whose directory has since become read-only: refused
     * with the reason, never answered around (the beside journal was ignored, INFER gave
     * the base's answer and the next edit started a second journal under HOME) */
    snprintf(script, sizeof script, "USE \"%s\"; DELETE FROM EDGES WHERE layer = 1 AND "
             "feature = 0;", wbase);
    CHECK(run_lql(script, home) == 0);
    CHECK(exists(j));
    int before = entries(share);
    chmod(wr, 0555);
    snprintf(script, sizeof script, "USE \"%s\"; INFER \"Once upon a time\" TOP 1; DELETE "
             "FROM EDGES WHERE layer = 1 AND feature = 1;", wbase);
    CHECK(run_lql(script, home) != 0);
    snprintf(want, sizeof want, "cannot open journal '%s': its directory is not writable "
             "(Permission denied), which SQLite needs even to read it", j);
    CHECK_HAS(out, want);
    CHECK(!strstr(out, "deleted 1 feature"));
    CHECK(entries(share) == before);
    chmod(wr, 0777);

    chmod(ro, 0755);
    fx_rm_rf(dir);
    return T_DONE();
}
