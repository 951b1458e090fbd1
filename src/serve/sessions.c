/*
 * sessions.c — the session table. A session is an overlay workspace: its own lql_session
 * bound to the served container with an in-memory journal (so nothing is written beside
 * the container), and a sandbox directory that is the working directory while its
 * statements run, so file operands (checked to be plain names by the query route) resolve
 * inside it. Sessions are freed by the compute thread once no job holds them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shell.h"
#include "srv_int.h"

int srv_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > 64 || name[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || (c == '.' && i > 0)))
            return 0;
    }
    return 1;
}

static srv_sess **slot_locked(srv *S, const char *id)
{
    for (int i = 0; i < S->nsess; i++)
        if (strcmp(S->table[i]->id, id) == 0) return &S->table[i];
    return NULL;
}

/* Take x out of the table (under the lock) and drop the table's reference. */
static void remove_locked(srv *S, srv_sess **slot)
{
    srv_sess *x = *slot;
    *slot = S->table[--S->nsess];
    x->gone = 1;
    if (--x->refs == 0) {
        x->next = S->dead;
        S->dead = x;
        pthread_cond_signal(&S->work);
    }
}

static void sweep_locked(srv *S)
{
    time_t now = time(NULL);
    for (int i = 0; i < S->nsess;) {
        srv_sess *x = S->table[i];
        if (x->refs == 1 && now - x->last > S->o->session_ttl_s) remove_locked(S, &S->table[i]);
        else i++;
    }
}

void srv_sess_sweep(srv *S)
{
    pthread_mutex_lock(&S->mu);
    sweep_locked(S);
    pthread_mutex_unlock(&S->mu);
}

int srv_sess_create(srv *S, srv_sess **out)
{
    *out = NULL;
    srv_sess *x = calloc(1, sizeof *x);
    if (!x) return -1;
    x->dirfd = -1;
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) { free(x); return -1; }
    for (int i = 0; i < 16; i++) snprintf(x->id + 2 * i, 3, "%02x", r[i]);
    size_t n = strlen(S->root) + 40;
    x->dir = malloc(n);
    if (!x->dir) { free(x); return -1; }
    snprintf(x->dir, n, "%s/%s", S->root, x->id);
    if (mkdir(x->dir, 0700) < 0 ||
        (x->dirfd = open(x->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        srv_sess_free(x);
        return -1;
    }
    x->refs = 1;
    x->last = time(NULL);
    pthread_mutex_lock(&S->mu);
    sweep_locked(S);
    int full = S->nsess >= S->o->sessions_max || S->nsess >= (int)(sizeof S->table / sizeof S->table[0]);
    if (!full) S->table[S->nsess++] = x;
    pthread_mutex_unlock(&S->mu);
    if (full) {
        srv_sess_free(x);
        errno = 0;
        return -1;
    }
    *out = x;
    return 0;
}

srv_sess *srv_sess_get(srv *S, const char *id)
{
    pthread_mutex_lock(&S->mu);
    srv_sess **slot = slot_locked(S, id), *x = slot ? *slot : NULL;
    if (x) { x->refs++; x->last = time(NULL); }
    pthread_mutex_unlock(&S->mu);
    return x;
}

void srv_sess_put(srv *S, srv_sess *x)
{
    if (!x || x == S->base) return;
    pthread_mutex_lock(&S->mu);
    x->last = time(NULL);
    if (--x->refs == 0) {
        x->next = S->dead;
        S->dead = x;
        pthread_cond_signal(&S->work);
    }
    pthread_mutex_unlock(&S->mu);
}

int srv_sess_delete(srv *S, const char *id)
{
    pthread_mutex_lock(&S->mu);
    srv_sess **slot = slot_locked(S, id);
    if (slot) {
        srv_sess *x = *slot;
        /* its queued jobs are skipped, its running ones stop at the next cancel check */
        for (srv_job *j = S->head; j; j = j->next)
            if (j->sess == x && !j->cancel) j->cancel = SRV_SESSION_GONE;
        for (int k = 0; k < S->n_running; k++)
            if (S->running[k]->sess == x) srv_stop_running_locked(S, S->running[k], SRV_SESSION_GONE);
        remove_locked(S, slot);
    }
    pthread_mutex_unlock(&S->mu);
    return slot ? 0 : -1;
}

DIR *srv_sess_dir(const srv_sess *x)
{
    int fd = openat(x->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0) close(fd);
    return d;
}

void srv_sess_free(srv_sess *x)
{
    if (!x) return;
    lql_session_free(x->s);
    if (x->dirfd >= 0) {
        DIR *d = srv_sess_dir(x);
        for (struct dirent *de; d && (de = readdir(d));)
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                unlinkat(x->dirfd, de->d_name, 0);
        if (d) closedir(d);
        close(x->dirfd);
        rmdir(x->dir);
    }
    free(x->dir);
    free(x);
}

void srv_sess_reap(srv *S)
{
    pthread_mutex_lock(&S->mu);
    srv_sess *d = S->dead;
    S->dead = NULL;
    pthread_mutex_unlock(&S->mu);
    while (d) {
        srv_sess *next = d->next;
        srv_sess_free(d);
        d = next;
    }
}

void srv_job_failed(srv_job *j, const char *what, const char *msg, const char *code)
{
    char m[160];
    /* stopped because the job was: the answer a stopped statement gets */
    if (j->cancel == SRV_SESSION_GONE) {
        snprintf(m, sizeof m, "the session was deleted: %s was stopped", what);
        srv_job_error(j, 409, m, "invalid_request_error", "session_deleted", NULL);
    } else if (j->cancel == SRV_DEADLINE) {
        snprintf(m, sizeof m, "the request's deadline passed: %s was stopped", what);
        srv_job_error(j, 504, m, "timeout_error", "deadline_exceeded", NULL);
    } else {
        srv_job_error(j, 500, msg, "server_error", code, NULL);
    }
}

int srv_job_enter(srv *S, srv_job *j, const char *code)
{
    lql_err e = {0};
    if (srv_sess_enter(S, j->sess, &e) == 0) return 0;
    srv_job_failed(j, "the request", e.msg, code);
    return -1;
}

int srv_sess_enter(srv *S, srv_sess *x, lql_err *e)
{
    if (!x->s) {
        /* bound as a USE statement, with a private in-memory journal */
        srv_buf use = {0};
        int bad = srv_buf_add(&use, "USE \"", 5) < 0;
        for (const char *p = S->container; *p && !bad; p++)
            bad = ((*p == '"' || *p == '\\') && srv_buf_add(&use, "\\", 1) < 0) ||
                  srv_buf_add(&use, p, 1) < 0;
        if (bad || srv_buf_add(&use, "\" JOURNAL \":memory:\";", 21) < 0 ||
            !(x->s = lql_session_new())) {
            srv_buf_free(&use);
            return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
        }
        x->s->hide_paths = 1;   /* a caller sees no host path, as USE and DIFF refuse them */
        char *out = NULL;
        int rc = lql_eval(x->s, use.p, use.n, LQL_OUT_TSV, &out, e);
        free(out);
        srv_buf_free(&use);
        if (rc < 0) {
            lql_session_free(x->s);
            x->s = NULL;
            return -1;
        }
    }
    if ((x->dirfd >= 0 ? fchdir(x->dirfd) : chdir(S->root)) < 0)
        return lql_errf(e, LQL_EEXEC, NULL, "cannot enter the session's directory: %s",
                        strerror(errno));
    return 0;
}
