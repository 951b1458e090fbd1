/*
 * test_crash.c — the journal's crash guarantees, tested by killing a writer.
 *
 * Crash: 50 times, a child process records statements (three-op edits and five-op patch
 * imports, each with vectors whose values encode the statement) and writes each
 * acknowledged history number to a pipe; the parent SIGKILLs it after a pseudo-random
 * delay (fixed seed) counted from when its journal is open, then opens the journal and
 * checks that every acknowledged statement is present with all of its ops and exact
 * vectors, and that no statement is partially visible (at most one unacknowledged
 * statement — the one committed as the kill landed).
 *
 * Disk full: a child lowers RLIMIT_FSIZE just above the journal's current size (ignoring
 * SIGXFSZ so write() fails with EFBIG), attempts a 1 MB statement, and reports the error
 * text; the journal must then open cleanly without that statement, and the child's handle
 * must still record a small statement once the limit is lifted.
 */
#include "journal.h"
#include "t.h"
#include "t_file.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHA "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HID 64
#define KILLS 50

static char dir[256];

static float value(long id, int op, int i)
{
    return (float)id + 0.5f * (float)op + 0.001f * (float)i;
}

/* Statement id's ops: n of them, each a delete-or-update with one vector. */
static void make_ops(vx_op *ops, int n, long id)
{
    float v[HID];
    char ent[32];
    snprintf(ent, sizeof ent, "s%ld", id);
    for (int k = 0; k < n; k++) {
        vx_op_init(&ops[k], k % 2 ? VX_OP_DELETE : VX_OP_UPDATE);
        ops[k].layer = (int)(id % 4);
        ops[k].feature = k;
        vx_op_set_str(&ops[k].entity, ent, NULL);
        for (int i = 0; i < HID; i++)
            v[i] = value(id, k, i);
        vx_op_set_vec(&ops[k], k % 2 ? "key" : "gate", 1, HID, v, NULL);
    }
}

static void free_ops(vx_op *ops, int n)
{
    for (int k = 0; k < n; k++)
        vx_op_clear(&ops[k]);
}

/* The writer: records statements until killed, acknowledging each through fd. */
static void writer(const char *path, int fd, long first_id)
{
    vx_journal *j;
    vx_err e;
    if (vx_journal_open(path, SHA, "crash", &j, &e))
        _exit(3);
    const int64_t ready[2] = {0, 0};     /* the kill timer starts once the journal is open */
    if (write(fd, ready, sizeof ready) != (ssize_t)sizeof ready)
        _exit(5);
    for (long id = first_id;; id++) {
        int n = id % 7 == 0 ? 5 : 3;
        vx_op ops[5];
        char text[64];
        snprintf(text, sizeof text, "stmt %ld %d", id, n);
        make_ops(ops, n, id);
        int rc;
        int64_t hist = 0;
        if (n == 5) {
            vx_patch_meta meta = {"imported", NULL, NULL, NULL, NULL};
            rc = vx_journal_import(j, text, &meta, ops, (size_t)n, NULL, &hist, &e);
        } else {
            vx_record_info info;
            rc = vx_journal_record(j, text, ops, (size_t)n, &info, &e);
            hist = info.history_n;
        }
        free_ops(ops, n);
        if (rc)
            _exit(4);
        int64_t ack[2] = {hist, id};
        if (write(fd, ack, sizeof ack) != (ssize_t)sizeof ack)
            _exit(5);
    }
}

/* Check one statement's ops (history entry h) against what make_ops wrote: its ops are
 * contiguous in seq order, found by binary search on the first seq. */
static int statement_ok(const vx_op *ops, size_t nops, const vx_history_entry *h, long id,
                        int n)
{
    size_t lo = 0, hi = nops;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ops[mid].seq < h->first_seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    char ent[32];
    snprintf(ent, sizeof ent, "s%ld", id);
    int k = 0;
    for (size_t i = lo; i < nops && ops[i].history_n == h->n; i++, k++) {
        const vx_op *op = &ops[i];
        const vx_opvec *v = vx_op_vec(op, k % 2 ? "key" : "gate");
        if (op->feature != k || !op->entity || strcmp(op->entity, ent) != 0 || !v ||
            v->cols != HID)
            return 0;
        for (int x = 0; x < HID; x++)
            if (v->data[x] != value(id, k, x))
                return 0;
    }
    return k == n && h->n_ops == n;
}

static void test_kills(const char *path)
{
    int64_t acked_total = 0;
    long next_id = 1;
    unsigned seed = 20261129;
    int bad_open = 0, lost = 0, partial = 0, extra = 0;
    for (int round = 0; round < KILLS; round++) {
        int fds[2];
        if (pipe(fds)) {
            perror("pipe");
            t_fail++;
            return;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            writer(path, fds[1], next_id);
        }
        close(fds[1]);
        int64_t ready[2];
        if (read(fds[0], ready, sizeof ready) != (ssize_t)sizeof ready)
            fprintf(stderr, "round %d: the writer did not open the journal\n", round);
        seed = seed * 1103515245u + 12345u;
        struct timespec ts = {0, (long)(1 + (seed >> 8) % 40) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "round %d: writer exited with status %d before the kill", round, status);

        int64_t ack[2], acks[4096][2];
        size_t na = 0;
        while (read(fds[0], ack, sizeof ack) == (ssize_t)sizeof ack && na < 4096) {
            acks[na][0] = ack[0];
            acks[na][1] = ack[1];
            na++;
        }
        close(fds[0]);

        vx_journal *j;
        vx_err e = {0};
        if (vx_journal_open(path, SHA, "crash", &j, &e)) {
            fprintf(stderr, "round %d: reopen failed: %s\n", round, e.msg);
            bad_open++;
            continue;
        }
        vx_op *ops;
        size_t nops;
        vx_history_entry *h;
        size_t nh;
        if (vx_journal_active_ops(j, &ops, &nops, &e) || vx_journal_history(j, &h, &nh, &e)) {
            fprintf(stderr, "round %d: read failed: %s\n", round, e.msg);
            bad_open++;
            vx_journal_close(j);
            continue;
        }
        /* every acknowledged statement is there, complete */
        for (size_t a = 0; a < na; a++) {
            int n = acks[a][1] % 7 == 0 ? 5 : 3;
            int64_t hn = acks[a][0];
            if (hn < 1 || (size_t)hn > nh || h[hn - 1].n != hn ||
                !statement_ok(ops, nops, &h[hn - 1], (long)acks[a][1], n))
                lost++;
        }
        /* every statement present is complete; at most one more than acknowledged */
        for (size_t i = 0; i < nh; i++) {
            long id;
            int n;
            if (sscanf(h[i].text, "stmt %ld %d", &id, &n) != 2 ||
                !statement_ok(ops, nops, &h[i], id, n))
                partial++;
        }
        int64_t now_total = (int64_t)nh;
        if (now_total > acked_total + (int64_t)na + 1 || now_total < acked_total + (int64_t)na)
            extra++;
        /* the next writer continues after whatever was committed */
        if (nh) {
            long id;
            int n;
            if (sscanf(h[nh - 1].text, "stmt %ld %d", &id, &n) == 2)
                next_id = id + 1;
        }
        acked_total = now_total;
        vx_ops_free(ops, nops);
        vx_history_free(h, nh);
        vx_journal_close(j);
    }
    CHECK_MSG(bad_open == 0, "%d reopen failures", bad_open);
    CHECK_MSG(lost == 0, "%d acknowledged statements lost", lost);
    CHECK_MSG(partial == 0, "%d statements partially visible", partial);
    CHECK_MSG(extra == 0, "%d rounds with unexplained statement counts", extra);
    CHECK_MSG(acked_total >= 10, "only %lld statements in %d rounds",
              (long long)acked_total, KILLS);
    printf("crash: %d kills, %lld statements committed, none lost or partial\n", KILLS,
           (long long)acked_total);
}

static off_t fsize(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_size : 0;
}

/* big: a statement whose vectors overflow the limit while recorded; else a small one,
 * against a limit at the files' size, which fails in the WAL write at COMMIT (where SQLite
 * keeps no errno) */
static void test_disk_full(const char *path, int big_stmt)
{
    int fds[2];
    if (pipe(fds)) {
        t_fail++;
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        vx_journal *j;
        vx_err e = {0};
        char msg[VX_ERR_MAX + 64] = "";
        if (vx_journal_open(path, SHA, "crash", &j, &e))
            _exit(3);
        vx_op small[3];
        make_ops(small, 3, 1);
        vx_record_info info;
        if (vx_journal_record(j, "stmt 1 3", small, 3, &info, &e))
            _exit(4);
        int64_t recording = vx_journal_recording(j);
        char wal[320];
        snprintf(wal, sizeof wal, "%s-wal", path);
        off_t lim = fsize(path) > fsize(wal) ? fsize(path) : fsize(wal);
        struct rlimit old, rl;
        getrlimit(RLIMIT_FSIZE, &old);
        rl = old;
        rl.rlim_cur = (rlim_t)lim + (big_stmt ? 4096 : 0);
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
        vx_op big;
        vx_op_init(&big, VX_OP_INSERT);
        big.layer = 0;
        big.feature = 0;
        float *u = calloc((size_t)HID * 4096, sizeof *u);
        vx_op_set_vec(&big, "u", HID, 4096, u, NULL);
        vx_op_set_vec(&big, "v", 4096, 4096 / HID, u, NULL);
        free(u);
        int rc = big_stmt ? vx_journal_record(j, "stmt 2 1", &big, 1, &info, &e)
                          : vx_journal_record(j, "stmt 1 3", small, 3, &info, &e);
        vx_op_clear(&big);
        snprintf(msg, sizeof msg, "%d|%s", rc, e.msg);
        /* the handle is unchanged and usable once space returns */
        setrlimit(RLIMIT_FSIZE, &old);
        int still = vx_journal_recording(j) == recording;
        int again = vx_journal_record(j, "stmt 1 3", small, 3, &info, &e) == 0;
        free_ops(small, 3);
        vx_journal_close(j);
        if (write(fds[1], msg, strlen(msg) + 1) < 0)
            _exit(5);
        _exit(still && again ? 0 : 6);
    }
    close(fds[1]);
    char msg[VX_ERR_MAX + 64] = "";
    ssize_t got = read(fds[0], msg, sizeof msg - 1);
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    msg[got > 0 ? got : 0] = '\0';
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "disk-full child status %d",
              status);
    CHECK_HAS(msg, "-1|journal '");
    CHECK_HAS(msg, "': disk full or file size limit reached while ");
    CHECK_HAS(msg, "(File too large)");

    vx_journal *j;
    vx_err e = {0};
    CHECK(vx_journal_open(path, SHA, "crash", &j, &e) == 0);
    if (!j)
        return;
    vx_history_entry *h;
    size_t nh;
    CHECK(vx_journal_history(j, &h, &nh, &e) == 0);
    CHECK(nh == 2);
    for (size_t i = 0; i < nh; i++)
        CHECK_STR(h[i].text, "stmt 1 3");
    vx_history_free(h, nh);
    vx_op *ops;
    size_t nops;
    CHECK(vx_journal_active_ops(j, &ops, &nops, &e) == 0 && nops == 6);
    vx_ops_free(ops, nops);
    vx_journal_close(j);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/test_crash.XXXXXX", LQL_BINARY_DIR);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[300];
    snprintf(path, sizeof path, "%s/kill.lqljournal", dir);
    test_kills(path);
    snprintf(path, sizeof path, "%s/full.lqljournal", dir);
    test_disk_full(path, 1);
    snprintf(path, sizeof path, "%s/full-commit.lqljournal", dir);
    test_disk_full(path, 0);
    if (t_fail == 0)
        t_rm_rf(dir);
    return T_DONE();
}
