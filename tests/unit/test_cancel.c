/*
 * test_cancel.c — Ctrl-C cancels a long statement (issue 10 §4). A child `lql -c` binds a
 * generated model (tinyllama's shapes and tokenizer with a 4096-token context, so GENERATE
 * and TRACE can run long) and runs one long statement in table mode; the parent waits until
 * USE's note is on the child's output (stdout and stderr, one pipe, so wherever a mode
 * prints notes), sleeps part of the statement's measured uninterrupted time, sends SIGINT,
 * and checks that the child exits within a bounded time with the error `cancelled` and a
 * non-zero status; for the statements built to run long it also printed no result and left
 * no output container, for the others a container published before the cancel must
 * verify. EXTRACT and COMPILE are also ended by SIGTERM, which must clean up the same way and
 * then end lql by the signal. Statements: GENERATE, TRACE (positions × layers lens), EXTRACT (encode +
 * down-meta), INSERT, COMPILE, COMPACT (of a sharded container, which it merges). A
 * statement whose uninterrupted run is too short to interrupt reliably on this machine is
 * reported, not checked (the lines say which).
 */
#include "browse.h"
#include "t.h"

#include <cjson/cJSON.h>
#include "t_file.h"

#include "shell.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BOUND_S 3.0   /* SIGINT to exit, generous for a loaded machine */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct child {
    pid_t pid;
    int out;            /* read end of the child's stdout and stderr (notes go to either) */
} child;

static int spawn(const char *script, child *c)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    c->pid = fork();
    if (c->pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        setenv("LQL_THREADS", "1", 1);   /* long enough to interrupt, and fair to others */
        execl(LQL_BINARY_DIR "/lql", "lql", "-table", "-c", script, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    c->out = p[0];
    return c->pid > 0 ? 0 : -1;
}

/* Reads the child's stdout until `mark` appears (1) or EOF (0); the text in buf. */
static int read_until(child *c, const char *mark, char *buf, size_t n, size_t *len)
{
    while (*len + 1 < n) {
        ssize_t k = read(c->out, buf + *len, n - 1 - *len);
        if (k <= 0)
            return 0;
        *len += (size_t)k;
        buf[*len] = 0;
        if (strstr(buf, mark))
            return 1;
    }
    return 0;
}

/* Reads the rest of the child's output to EOF (keeping what fits in buf, NUL-terminated),
 * reaps it and returns its wait status. */
static int finish(child *c, char *buf, size_t n, size_t *len)
{
    char spill[4096];
    for (;;) {
        int room = *len + 1 < n;
        ssize_t k = room ? read(c->out, buf + *len, n - 1 - *len) : read(c->out, spill, sizeof spill);
        if (k <= 0)
            break;
        if (room)
            *len += (size_t)k;
    }
    buf[*len] = 0;
    int status = 0;
    waitpid(c->pid, &status, 0);
    close(c->out);
    return status;
}

/* The uninterrupted statement time: from USE's note to the statement's result on stdout
 * (not to EOF: the process's exit — LeakSanitizer's scan under ASan — is no part of the
 * statement, and counting it put the SIGINT after the statement had finished), or -1
 * when the run failed. */
static double calibrate(const char *script, const char *result)
{
    child c;
    char buf[1 << 16];
    size_t len = 0;
    if (spawn(script, &c) != 0)
        return -1;
    int seen = read_until(&c, "using ", buf, sizeof buf, &len);
    double t0 = now();
    int done = seen && read_until(&c, result, buf, sizeof buf, &len);
    double d = now() - t0;
    int status = finish(&c, buf, sizeof buf, &len);
    if (!done || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "calibration of %.200s failed: %.2000s\n", script, buf);
        return -1;
    }
    return d;
}

/* Interrupts the statement with sig at 0.3 of its calibrated time d. SIGINT cancels it and
 * the run (exit status 1); SIGTERM cancels it too, then lql dies of the signal. Either way
 * no temporary tree of the target is left behind. */
static void interrupt(const char *what, const char *script, const char *result, double d,
                      int must, const char *target, int sig)
{
    const char *sn = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    if (d < 0.15) {
        printf("%s: %.3f s uninterrupted: too short to interrupt reliably here, not checked\n",
               what, d);
        CHECK_MSG(!must, "%s must run long enough to be interrupted (%.3f s)", what, d);
        return;
    }
    child c;
    char buf[1 << 16];
    size_t len = 0;
    CHECK(spawn(script, &c) == 0);
    CHECK(read_until(&c, "using ", buf, sizeof buf, &len));
    size_t mark = len;   /* what follows is the statement's */
    usleep((useconds_t)(d * 0.3 * 1e6));
    /* a statement already past publishing its target (a loaded machine runs the second
     * run faster than the calibration) may finish whole instead of cancelling */
    int late = !must && access(target, F_OK) == 0;
    double t0 = now();
    kill(c.pid, sig);
    int status = finish(&c, buf, sizeof buf, &len);
    double t = now() - t0;
    const char *e = strstr(buf + mark, "error:");
    /* the first line of the message (the rest echoes the statement) */
    printf("%s: %.3f s uninterrupted; %s at %.3f s, exit %.3f s later: %.*s\n", what, d, sn,
           d * 0.3, t, e ? (int)strcspn(e, "\n") : 8, e ? e : "no error");
    CHECK_MSG(t < BOUND_S, "%s: exit %.3f s after %s", what, t, sn);
    int died = WIFSIGNALED(status) && WTERMSIG(status) == sig;
    if (late && !e) {
        printf("%s: the target was published before the %s: finished whole\n", what, sn);
        CHECK_MSG((WIFEXITED(status) && WEXITSTATUS(status) == 0) || (sig == SIGTERM && died),
                  "%s: exit status", what);
        CHECK_MSG(strstr(buf + mark, result) != NULL, "%s: finished without its result", what);
    } else {
        CHECK_MSG(e && strstr(e, "cancelled"), "%s: no 'cancelled' error", what);
        if (sig == SIGTERM)
            CHECK_MSG(died, "%s: lql did not end by SIGTERM (status %#x)", what, status);
        else
            CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) != 0, "%s: exit status", what);
    }
    char tmp[2300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", target, (long)c.pid);
    CHECK_MSG(access(tmp, F_OK) != 0, "%s: %s left its temporary tree %s", what, sn, tmp);
    FILE *f = fopen(target, "r");
    if (f)
        fclose(f);
    if (must) {
        CHECK_MSG(!strstr(buf + mark, result), "%s: the result was printed anyway", what);
        CHECK_MSG(!f, "%s: a cancelled statement left its target %s", what, target);
    } else if (f) {
        /* cancelled after publishing (COMPILE and COMPACT rename, then run their probes):
         * what was published must be complete */
        cJSON *report = NULL;
        vx_err ve = {0};
        printf("%s: the target was published before the cancel\n", what);
        CHECK_MSG(vx_verify(target, NULL, &report, &ve) == 0, "%s: published target does not "
                  "verify: %s", what, ve.msg);
        cJSON_Delete(report);
    }
}

/* ---------------------------------------------------------------- a write cut by Ctrl-C */

static void on_alarm(int sig)
{
    (void)sig;
    vx_cancel_flag = 1;   /* as the shell's SIGINT handler */
}

static void *drain_later(void *arg)
{
    int fd = *(int *)arg;
    usleep(600 * 1000);
    char b[4096];
    while (read(fd, b, sizeof b) > 0) {}
    return NULL;
}

/* Results blocked on a reader that stopped (a terminal not read) when Ctrl-C arrives: the
 * interrupted write cancels the statement's output, not the shell. lql_shell_flush said
 * "cannot write results: Interrupted system call" and stopped the interactive shell. */
static void interrupted_flush(void)
{
    int p[2];
    CHECK(pipe(p) == 0);
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    char fill[4096];
    memset(fill, 'x', sizeof fill);
    while (write(p[1], fill, sizeof fill) > 0) {}   /* the pipe is full */
    fcntl(p[1], F_SETFL, 0);
    FILE *f = fdopen(p[1], "w");
    lql_shell sh;
    memset(&sh, 0, sizeof sh);
    sh.err = tmpfile();
    CHECK(f && sh.err);
    if (!f || !sh.err) return;
    fputs("a row of results\n", f);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;      /* no SA_RESTART, as the shell's handlers */
    sigaction(SIGALRM, &sa, &old);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, drain_later, &p[0]) == 0);
    struct itimerval it = {{0, 0}, {0, 200 * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    int rc = lql_shell_flush(&sh, f);       /* blocks, then the signal interrupts it */
    CHECK_MSG(rc == 0 && !sh.stop && !sh.write_failed, "rc %d stop %d", rc, sh.stop);
    fclose(f);
    pthread_join(th, NULL);
    close(p[0]);
    sigaction(SIGALRM, &old, NULL);
    vx_cancel_flag = 0;
    fclose(sh.err);
}

int main(void)
{
    interrupted_flush();
    char hf[2048], vx[2048], out[2048], script[16384], prompt[4096];
    snprintf(hf, sizeof hf, "%s/cancel-hf", LQL_BINARY_DIR);
    snprintf(vx, sizeof vx, "%s/cancel.vindex3", LQL_BINARY_DIR);
    snprintf(out, sizeof out, "%s/cancel-out.vindex3", LQL_BINARY_DIR);
    t_rm_rf(hf);
    t_rm_rf(vx);
    t_rm_rf(out);
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s/mkfixture' --family llama --hidden 256 --layers 4 --heads 8 "
             "--kv-heads 4 --inter 768 --vocab 4096 --ctx 4096 --dtype f32 --seed 5 --tokenizer "
             "'%s/models/tinyllama/tokenizer.json' -o '%s' > /dev/null",
             LQL_BINARY_DIR, LQL_FIXTURE_DIR, hf);
    CHECK(system(cmd) == 0);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.finish = brw_encode_finish;
    vx_err err = {0};
    CHECK_MSG(vx_encode(hf, vx, &o, &err) == 0, "encode: %s", err.msg);
    /* COMPACT's source: the same model in shards it merges (rewrites), so it runs long
     * enough to interrupt; an unsharded container is only linked */
    char vxs[2048];
    snprintf(vxs, sizeof vxs, "%s/cancel-shards.vindex3", LQL_BINARY_DIR);
    t_rm_rf(vxs);
    setenv("LQL_SHARD_CAP", "4300000", 1);
    CHECK_MSG(vx_encode(hf, vxs, &o, &err) == 0, "encode: %s", err.msg);
    unsetenv("LQL_SHARD_CAP");

    /* a long prompt for TRACE: 300 words */
    prompt[0] = 0;
    for (int i = 0; i < 300; i++)
        strcat(prompt, i % 3 ? " the cat" : " France");

    struct {
        const char *what, *stmt, *result;
        int must;   /* long enough by construction (scaled by the model and prompt) */
    } cases[] = {
        {"GENERATE", "INFER \"Once upon a time\" GENERATE 800 TEMPERATURE 0;", "continuation", 1},
        {"TRACE", NULL, "top1_id", 1},
        {"EXTRACT", NULL, "extracted", 0},
        {"INSERT", "INSERT INTO EDGES (entity, relation, target) VALUES (\"France\", "
                   "\"capital\", \"Paris\");", "inserted", 0},
        {"COMPILE", NULL, "compiled", 0},
        {"COMPACT", NULL, "compacted", 0},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++) {
        char stmt[8192];
        if (i == 1)
            snprintf(stmt, sizeof stmt, "TRACE \"%s\" FOR \"Paris\" POSITIONS ALL;", prompt);
        else if (i == 2)
            snprintf(stmt, sizeof stmt, "EXTRACT MODEL \"%s\" INTO \"%s\" WITH ALL;", hf, out);
        else if (i == 4)
            snprintf(stmt, sizeof stmt, "DELETE FROM EDGES WHERE layer = 1 AND feature < 300; "
                     "COMPILE CURRENT INTO VINDEX \"%s\";", out);
        else if (i == 5)
            snprintf(stmt, sizeof stmt, "COMPACT \"%s\" INTO VINDEX \"%s\";", vxs, out);
        else
            snprintf(stmt, sizeof stmt, "%s", cases[i].stmt);
        snprintf(script, sizeof script, "USE \"%s\" JOURNAL \":memory:\"; %s", vx, stmt);
        t_rm_rf(out);
        double d = calibrate(script, cases[i].result);
        CHECK_MSG(d >= 0, "%s: the uninterrupted run failed", cases[i].what);
        t_rm_rf(out);
        if (d >= 0)
            interrupt(cases[i].what, script, cases[i].result, d, cases[i].must, out, SIGINT);
        t_rm_rf(out);
        /* a driver ending lql mid-write: the same clean-up, then death by the signal */
        if (d >= 0 && (i == 2 || i == 4)) {
            interrupt(cases[i].what, script, cases[i].result, d, cases[i].must, out, SIGTERM);
            t_rm_rf(out);
        }
    }
    t_rm_rf(hf);
    t_rm_rf(vx);
    t_rm_rf(vxs);
    return T_DONE();
}
