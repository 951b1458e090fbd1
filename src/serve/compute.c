/*
 * compute.c — the one compute thread and its bounded FIFO queue. Statements run one at a
 * time (the engine's pool already uses every core); completions queued behind one another
 * join its batch (srv_admit), each step one pass over all of them. Waiters poll their
 * client's socket so a hang-up, a passed deadline or a deleted session stops the running
 * statement through the engine's cancel flag, which this thread clears before every job,
 * or drops a batched completion at its next token.
 */
#define _GNU_SOURCE             /* POLLRDHUP */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"
#include "srv_int.h"

int srv_buf_add(srv_buf *b, const void *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return -1; }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void srv_buf_free(srv_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

int srv_json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    /* [-2^63, 2^63) holds every double that converts to int64_t */
    if (!(d >= -0x1p63 && d < 0x1p63) || d != (double)(int64_t)d) return 0;
    int64_t i = (int64_t)d;
    if (i < lo || i > hi) return 0;
    if (out) *out = i;
    return 1;
}

cJSON *srv_json_add_text(cJSON *obj, const char *key, const char *s, size_t n)
{
    char *q = lql_json_quote(s, n);
    cJSON *it = q ? cJSON_AddRawToObject(obj, key, q) : NULL;
    free(q);
    return it;
}

double srv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

srv_job *srv_job_new(void (*run)(srv *S, srv_job *j), srv_sess *sess, cJSON *req, int stream)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->run = run;
    j->sess = sess;
    j->req = req;
    j->stream = stream;
    j->refs = 1;
    j->status = 500;
    return j;
}

static void job_free(srv *S, srv_job *j)
{
    if (j->sess) srv_sess_put(S, j->sess);
    cJSON_Delete(j->req);
    srv_buf_free(&j->body);
    srv_buf_free(&j->out);
    free(j);
}

/* Under the mutex; *free_it: the caller frees j after unlocking. */
static void unref_locked(srv_job *j, int *free_it)
{
    *free_it = --j->refs == 0;
}

void srv_job_unref(srv *S, srv_job *j)
{
    if (!j) return;
    int f;
    pthread_mutex_lock(&S->mu);
    unref_locked(j, &f);
    pthread_mutex_unlock(&S->mu);
    if (f) job_free(S, j);
}

int srv_submit(srv *S, srv_job *j)
{
    pthread_mutex_lock(&S->mu);
    if (S->queued >= S->o->queue_max || S->stopping) {
        pthread_mutex_unlock(&S->mu);
        return -1;
    }
    j->refs++;
    j->state = SRV_QUEUED;
    j->next = NULL;
    if (S->tail) S->tail->next = j;
    else S->head = j;
    S->tail = j;
    S->queued++;
    pthread_cond_signal(&S->work);
    pthread_mutex_unlock(&S->mu);
    return 0;
}

void srv_stop_running_locked(srv *S, srv_job *j, int why)
{
    if (!j->cancel) j->cancel = why;
    /* the flag stops every session of a pass: a batch's others would lose their step */
    if (S->n_running == 1) vx_cancel_flag = 1;
}

/* Under S->mu. A queued job leaves the queue at once; a running one is stopped (above). */
static void cancel_locked(srv *S, srv_job *j, int why, int *free_it)
{
    *free_it = 0;
    if (j->state == SRV_DONE) return;
    if (j->state == SRV_RUNNING) {
        srv_stop_running_locked(S, j, why);
        return;
    }
    if (!j->cancel) j->cancel = why;
    srv_job **pp = &S->head, *prev = NULL;
    while (*pp && *pp != j) { prev = *pp; pp = &(*pp)->next; }
    if (*pp) {
        *pp = j->next;
        if (S->tail == j) S->tail = prev;
        S->queued--;
        S->cancelled++;
        j->state = SRV_DONE;
        unref_locked(j, free_it);
        pthread_cond_broadcast(&S->prog);
    }
}

void srv_cancel(srv *S, srv_job *j, int why)
{
    int f;
    pthread_mutex_lock(&S->mu);
    cancel_locked(S, j, why, &f);
    pthread_mutex_unlock(&S->mu);
    if (f) job_free(S, j);
}

/* 1 when the peer hung up (or the socket failed). */
static int client_gone(int fd)
{
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Wait on S->prog for at most 20 ms (the socket is polled between waits). Under S->mu. */
static void nap_locked(srv *S)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&S->prog, &S->mu, &ts);
}

/* Under S->mu: cancel j when its client went away or its deadline passed. */
static void watch_locked(srv *S, srv_job *j, int fd, double deadline)
{
    int why = client_gone(fd) ? SRV_CLIENT_GONE : srv_now_ms() > deadline ? SRV_DEADLINE : 0;
    if (why && j->state != SRV_DONE && !j->cancel) {
        int f;
        cancel_locked(S, j, why, &f);    /* the waiter's reference keeps j alive: f is 0 */
    }
}

int srv_wait(srv *S, srv_job *j, int fd, double deadline, int *streaming)
{
    pthread_mutex_lock(&S->mu);
    for (;;) {
        watch_locked(S, j, fd, deadline);
        if (j->state == SRV_DONE || (streaming && j->out.n && !j->cancel)) break;
        nap_locked(S);
    }
    int why = j->cancel;
    /* the watch looks once a nap: a job that ended after its deadline within one is as late */
    if (!why && j->state == SRV_DONE && srv_now_ms() > deadline) why = SRV_DEADLINE;
    if (streaming) *streaming = !why && j->out.n;
    pthread_mutex_unlock(&S->mu);
    return why;
}

int srv_stream_started(const srv_job *j)
{
    return j->out.n > 0;        /* no lock: this thread is the only writer of out */
}

long srv_wait_stream(srv *S, srv_job *j, int fd, double deadline, char *dst, size_t max)
{
    pthread_mutex_lock(&S->mu);
    for (;;) {
        if (j->cancel == SRV_CLIENT_GONE) break;
        if (j->out.n > j->sent) {
            size_t n = j->out.n - j->sent < max ? j->out.n - j->sent : max;
            memcpy(dst, j->out.p + j->sent, n);
            j->sent += n;
            pthread_mutex_unlock(&S->mu);
            return (long)n;
        }
        if (j->state == SRV_DONE) {
            pthread_mutex_unlock(&S->mu);
            return 0;
        }
        watch_locked(S, j, fd, deadline);
        if (j->cancel == SRV_CLIENT_GONE) break;
        nap_locked(S);
    }
    pthread_mutex_unlock(&S->mu);
    return -1;
}

void srv_emit(srv *S, srv_job *j, const char *text)
{
    pthread_mutex_lock(&S->mu);
    /* out of memory loses the event; the stream still ends with [DONE] */
    if (srv_buf_add(&j->out, "data: ", 6) == 0 && srv_buf_add(&j->out, text, strlen(text)) == 0)
        srv_buf_add(&j->out, "\n\n", 2);
    pthread_cond_broadcast(&S->prog);
    pthread_mutex_unlock(&S->mu);
}

/* Under S->mu: take the queue's head, which becomes running. */
static srv_job *take_locked(srv *S)
{
    srv_job *j = S->head;
    S->head = j->next;
    if (!S->head) S->tail = NULL;
    S->queued--;
    j->state = SRV_RUNNING;
    S->running[S->n_running++] = j;
    return j;
}

srv_job *srv_admit(srv *S, const srv_job *like)
{
    pthread_mutex_lock(&S->mu);
    srv_job *j = S->head;
    if (j && !S->stopping && !j->cancel && j->run == like->run && j->sess == like->sess &&
        S->n_running < S->o->batch_max)
        take_locked(S);
    else
        j = NULL;
    pthread_mutex_unlock(&S->mu);
    return j;
}

void srv_batch_arm(srv *S, int batch)
{
    pthread_mutex_lock(&S->mu);
    if (batch > S->batch_peak) S->batch_peak = batch;
    vx_cancel_flag = S->stopping || (S->n_running == 1 && S->running[0]->cancel);
    pthread_mutex_unlock(&S->mu);
}

void srv_job_done(srv *S, srv_job *j)
{
    pthread_mutex_lock(&S->mu);
    int k = 0;
    while (k < S->n_running && S->running[k] != j) k++;
    if (k == S->n_running || j->state != SRV_RUNNING) {     /* answered already */
        pthread_mutex_unlock(&S->mu);
        return;
    }
    S->running[k] = S->running[--S->n_running];
    S->cancelled += j->cancel != 0;
    if (!S->n_running) vx_cancel_flag = 0;
    j->state = SRV_DONE;
    pthread_cond_broadcast(&S->prog);
    int f;
    unref_locked(j, &f);                 /* the queue's reference, which running held */
    pthread_mutex_unlock(&S->mu);
    if (f) job_free(S, j);
}

static void *compute_main(void *arg)
{
    srv *S = arg;
    pthread_mutex_lock(&S->mu);
    for (;;) {
        while (!S->head && !S->dead && !S->stopping) pthread_cond_wait(&S->work, &S->mu);
        if (S->dead) {
            pthread_mutex_unlock(&S->mu);
            srv_sess_reap(S);
            pthread_mutex_lock(&S->mu);
            continue;
        }
        if (!S->head) break;             /* stopping, queue drained */
        srv_job *j = take_locked(S);
        j->refs++;                       /* run() may answer j itself (srv_job_done) */
        vx_cancel_flag = j->cancel != 0;
        pthread_mutex_unlock(&S->mu);

        if (!j->cancel) j->run(S, j);
        srv_job_done(S, j);
        srv_job_unref(S, j);

        pthread_mutex_lock(&S->mu);
    }
    pthread_mutex_unlock(&S->mu);
    return NULL;
}

int srv_compute_start(srv *S, pthread_t *th)
{
    return pthread_create(th, NULL, compute_main, S) == 0 ? 0 : -1;
}

void srv_compute_stop(srv *S, pthread_t th)
{
    pthread_mutex_lock(&S->mu);
    S->stopping = 1;
    for (srv_job *j = S->head; j; j = j->next) j->cancel = SRV_CLIENT_GONE;
    for (int k = 0; k < S->n_running; k++) S->running[k]->cancel = SRV_CLIENT_GONE;
    if (S->n_running) vx_cancel_flag = 1;
    pthread_cond_broadcast(&S->work);
    pthread_mutex_unlock(&S->mu);
    pthread_join(th, NULL);
}
