/*
 * test_journal_kill.c — COMPILE and COMPACT killed midway leave nothing at the target.
 * A child `lql` runs `COMPILE CURRENT INTO VINDEX` (after a DELETE, so a segment is
 * rewritten and the down-meta recomputed) or `COMPACT … INTO VINDEX` on a three-shard
 * base; the parent waits until the child's temporary sibling (<out>.tmp.<pid>) appears,
 * sleeps a random part of the measured write time (shrunk while kills land after the
 * publication) and sends SIGKILL. Each kill that lands
 * while the temporary sibling exists counts as midway (at least 20 per statement); after
 * every kill the target must not exist. A child that finished before the kill must have
 * published a complete container (it verifies). Then the statement run to completion beside
 * the leftover temporaries (which it ignores: they carry another pid) gives a container that
 * verifies.
 */
#include "browse.h"
#include "t.h"
#include "test_journal_fx.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void rm_rf(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'.tmp.*", dir, dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static pid_t spawn(const char *script)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(LQL_BINARY_DIR "/lql", "lql", "-c", script, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int verifies(const char *dir)
{
    cJSON *report = NULL;
    vx_err e = {0};
    int ok = vx_verify(dir, NULL, &report, &e) == 0;
    cJSON_Delete(report);
    if (!ok)
        fprintf(stderr, "verify %s: %s\n", dir, e.msg);
    return ok;
}

/* Run script (which writes out) to completion: its write time (from the temporary
 * sibling's appearance), or -1. */
static double calibrate(const char *script, const char *out)
{
    pid_t pid = spawn(script);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)pid);
    double t0 = 0;
    int status = 0;
    for (;;) {
        if (!t0 && exists(tmp))
            t0 = now();
        if (waitpid(pid, &status, WNOHANG) == pid)
            break;
        usleep(100);
    }
    double d = t0 ? now() - t0 : -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 && exists(out) ? d : -1;
}

/* Kill script's child midway at least 20 times; returns the midway count. */
static int kill_runs(const char *what, const char *script, const char *out, double write_s)
{
    int midway = 0, finished = 0, early = 0;
    for (int attempt = 0; attempt < 80 && midway < 20; attempt++) {
        pid_t pid = spawn(script);
        char tmp[4300];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)pid);
        int status = 0, done = 0;
        while (!exists(tmp) && !done) {
            done = waitpid(pid, &status, WNOHANG) == pid;
            usleep(50);
        }
        if (!done) {
            usleep((useconds_t)(write_s * 1e6 * (double)(rand() % 1000) / 1000.0));
            int mid = exists(tmp) && !exists(out);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            midway += WIFSIGNALED(status) && mid;
            early += !mid;
        }
        if (WIFEXITED(status))
            CHECK_MSG(WEXITSTATUS(status) == 0, "%s: attempt %d exited with %d", what, attempt,
                      WEXITSTATUS(status));
        /* killed after the rename (during the statement's probes) or finished: complete.
         * The kill came too late: later runs can be much faster than the calibration run
         * (once in the full suite 76 of 80 COMPACT kills came after the publication), so
         * the kill window shrinks until kills land in the write again. */
        if (exists(out)) {
            finished++;
            write_s *= 0.75;
            CHECK_MSG(verifies(out), "%s: attempt %d published a bad container", what, attempt);
            rm_rf(out);
        }
    }
    printf("%s: %d killed midway (nothing at the target), %d published before the kill "
           "(complete), %d landed outside the write\n", what, midway, finished, early);
    return midway;
}

int main(void)
{
    char base[2048], out[2048], script[8192];
    srand(11);
    snprintf(base, sizeof base, "%s/h11-kill-base.vindex3", LQL_BINARY_DIR);
    snprintf(out, sizeof out, "%s/h11-kill-out.vindex3", LQL_BINARY_DIR);
    rm_rf(base);
    rm_rf(out);
    if (fx_encode_tiny(base, "5000000"))
        return 1;
    static const char *const what[2] = {"COMPILE", "COMPACT"};
    for (int k = 0; k < 2; k++) {
        if (k == 0)
            snprintf(script, sizeof script, "USE \"%s\" JOURNAL \":memory:\"; DELETE FROM EDGES "
                     "WHERE layer = 1 AND feature = 4; COMPILE CURRENT INTO VINDEX \"%s\";",
                     base, out);
        else
            snprintf(script, sizeof script, "COMPACT \"%s\" INTO VINDEX \"%s\";", base, out);
        double w = calibrate(script, out);
        CHECK_MSG(w > 0, "%s: the uninterrupted run failed", what[k]);
        if (w <= 0)
            continue;
        CHECK(verifies(out));
        rm_rf(out);
        CHECK(kill_runs(what[k], script, out, w) >= 20);
        /* the leftovers are ignored by the next run */
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "ls -d '%s'.tmp.* >/dev/null 2>&1", out);
        CHECK(system(cmd) == 0);
        pid_t pid = spawn(script);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK(verifies(out));
        rm_rf(out);
    }
    if (t_fail == 0)
        rm_rf(base);
    return T_DONE();
}
