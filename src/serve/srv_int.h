/*
 * srv_int.h — private to src/serve: the server state, jobs on the compute thread,
 * sessions, and the routes' entry points.
 *
 * Threads: libmicrohttpd runs a thread per connection; those threads parse and validate
 * requests, then hand a job to the one compute thread and wait (polling their socket, so a
 * client that goes away cancels its job). Every lql_session is touched only by the compute
 * thread, which also frees them. One mutex (srv.mu) guards the queue, the session table and
 * job state; srv.prog is broadcast whenever a job makes progress (stream data, done).
 */
#ifndef LQL_SRV_INT_H
#define LQL_SRV_INT_H

#include <dirent.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "interp.h"
#include "serve.h"

/* ---------------------------------------------------------------- buffers */

typedef struct srv_buf { char *p; size_t n, cap; int oom; } srv_buf;
/* Append (NUL kept after the bytes); -1 on out-of-memory, which also sets oom, so a caller
 * appending many pieces can check once. */
int srv_buf_add(srv_buf *b, const void *s, size_t n);
void srv_buf_free(srv_buf *b);

/* 1 when v is a JSON number holding an integer in [lo, hi] (then *out gets it); checked
 * before any cast, since a cast of an out-of-range double is undefined behaviour. */
int srv_json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out);

/* Add n bytes of decoded text (which may hold NULs: cJSON's strings end at one) to obj
 * under key, escaped as lql's json mode escapes it; NULL on out-of-memory. */
cJSON *srv_json_add_text(cJSON *obj, const char *key, const char *s, size_t n);

/* ---------------------------------------------------------------- sessions */

typedef struct srv_sess {
    char id[33];                /* 32 hex digits; "" for the base (sessionless) model */
    lql_session *s;             /* bound on the compute thread on first use */
    int dirfd;                  /* the sandbox directory (file operands), -1 for the base */
    char *dir;
    int refs;                   /* the table's + one per job; 0: freed by the compute thread */
    int gone;                   /* deleted or expired: its jobs are cancelled */
    time_t last;                /* last use, for the idle TTL */
    struct srv_sess *next;      /* the free list */
} srv_sess;

/* ---------------------------------------------------------------- jobs */
#define SRV_BATCH_MAX 64                  /* batch_max's ceiling */

enum { SRV_QUEUED, SRV_RUNNING, SRV_DONE };
enum { SRV_LIVE, SRV_CLIENT_GONE, SRV_DEADLINE, SRV_SESSION_GONE };

typedef struct srv srv;
typedef struct srv_job srv_job;
struct srv_job {
    void (*run)(srv *S, srv_job *j);      /* on the compute thread */
    srv_sess *sess;                       /* the session's model, or the base (ref held) */
    cJSON *req;                           /* the request body */
    int stream;                           /* 1: run() emits SSE events with srv_emit */
    /* the answer of a non-streamed job */
    int status;
    const char *ctype;
    const char *extra_header[2];          /* one optional header (name, value) */
    srv_buf body;
    /* a streamed job's events: out[sent..n) not yet written */
    srv_buf out;
    size_t sent;
    /* control, under srv.mu */
    int state;
    _Atomic int cancel;                   /* SRV_LIVE or why it was stopped (written under
                                           * srv.mu, read by the compute thread without) */
    int refs;                             /* the waiter's and the queue's/compute's */
    srv_job *next;
};

struct srv {
    const srv_opts *o;
    pthread_mutex_t mu;
    pthread_cond_t work, prog;
    srv_job *head, *tail;
    int queued;
    srv_job *running[SRV_BATCH_MAX];      /* the job running, or a batch's completions */
    int n_running;
    int stopping;
    srv_sess *base;
    srv_sess *table[64];
    int nsess;
    srv_sess *dead;                       /* sessions for the compute thread to free */
    /* reported by /health: tokens the completion routes generated, jobs stopped by a
     * cancellation, and the most tokens one completion produced after its cancel */
    long long gen_tokens, cancelled;
    int late_tokens;
    int batch_peak;                       /* the most completions one pass decoded */
    char *root;                           /* private temp dir: the base's cwd, sandboxes */
    char *container;                      /* absolute path */
    char *key;                            /* API key, or NULL */
    size_t keyn;
    char *models;                         /* GET /v1/models, computed at start */
    struct srv_tmpl *tmpl;                /* the chat template, NULL: chat disabled */
    char tmpl_status[300];                /* "ok", "absent" or "unsupported: why" */
    char *bos, *eos;                      /* the template's bos_token / eos_token */
    char *model_id;
    int context, vocab;
};

/* compute.c */
int srv_compute_start(srv *S, pthread_t *th);
void srv_compute_stop(srv *S, pthread_t th);
srv_job *srv_job_new(void (*run)(srv *S, srv_job *j), srv_sess *sess, cJSON *req, int stream);
void srv_job_unref(srv *S, srv_job *j);
/* Queue j; -1 when the queue is full (answer 503). */
int srv_submit(srv *S, srv_job *j);
/* Wait until j is done, or (streaming not NULL) until it has its first event. fd is the
 * client's socket (watched for a hang-up), deadline an absolute CLOCK_MONOTONIC time in ms.
 * A gone client or a passed deadline cancels j (the engine's flag stops the running
 * statement) and still waits for the compute thread to let go of it. Returns j->cancel, or
 * SRV_DEADLINE for a job that ended after its deadline (between two looks of the watch).
 * *streaming: 1 when the answer is the stream of j's events (then nothing stopped j before
 * its first one), 0 when it is j's status and body, as for a job that does not stream. */
int srv_wait(srv *S, srv_job *j, int fd, double deadline, int *streaming);
/* The streamed variant: waits for events not yet sent (or the end); copies up to max bytes
 * to dst, returns their count, 0 at the end, -1 when the client is gone or the deadline
 * passed (the job is cancelled). */
long srv_wait_stream(srv *S, srv_job *j, int fd, double deadline, char *dst, size_t max);
/* From run(): append an SSE event ("data: " + text + "\n\n") for the waiter. */
void srv_emit(srv *S, srv_job *j, const char *text);
/* From run(): whether j has emitted an event. Before one, a failure is answered as a job
 * that does not stream is (status and body, no event): the status line is not yet sent. */
int srv_stream_started(const srv_job *j);
/* Cancel j for the reason given (see srv_wait). */
void srv_cancel(srv *S, srv_job *j, int why);
/* Under S->mu: stop running job j for why. Running alone it is stopped mid-pass by the
 * engine's flag; one of a batch leaves it at the next token while the others go on. */
void srv_stop_running_locked(srv *S, srv_job *j, int why);
/* From a completion's run(), between two passes of its batch: the next queued job when it
 * is a job with like's run and session (so on the same model) and the batch has room
 * (S->o->batch_max); it leaves the queue running. NULL otherwise: the queue's head (a
 * statement, another session's request) waits for the batch to end, as FIFO order wants. */
srv_job *srv_admit(srv *S, const srv_job *like);
/* From a completion's run(), before each batched pass: arm the engine's cancel flag for
 * what is running now (the server stopping, or a lone job already cancelled). */
void srv_batch_arm(srv *S, int batch);
/* From run(): j (the job run() was given or one admitted) is answered: its waiter wakes
 * and the compute thread lets go of it. */
void srv_job_done(srv *S, srv_job *j);
double srv_now_ms(void);

/* sessions.c */
int srv_sess_create(srv *S, srv_sess **out);        /* -1: table full (errno 0) or I/O */
srv_sess *srv_sess_get(srv *S, const char *id);     /* a reference, or NULL */
void srv_sess_put(srv *S, srv_sess *x);
int srv_sess_delete(srv *S, const char *id);        /* -1: no such session */
void srv_sess_sweep(srv *S);                        /* drop idle sessions */
/* On the compute thread: bind x's lql_session (the container with an in-memory journal)
 * and make x's sandbox the working directory; -1 with e filled. */
int srv_sess_enter(srv *S, srv_sess *x, lql_err *e);
/* srv_sess_enter for job j's session; -1 after answering j: 409 session_deleted or 504
 * deadline_exceeded when the job was stopped meanwhile, else 500 with code. */
int srv_job_enter(srv *S, srv_job *j, const char *code);
/* Answer j for a failure of what ("the request", "generation"): 409 session_deleted or
 * 504 deadline_exceeded when the job was stopped, else 500 with msg and code. */
void srv_job_failed(srv_job *j, const char *what, const char *msg, const char *code);
/* Free sessions whose last reference went (compute thread, or at the end). */
void srv_sess_reap(srv *S);
void srv_sess_free(srv_sess *x);
/* x's sandbox opened for reading its names, from the start each time (its own open file,
 * not a dup of the dirfd, whose read position a dup would share); NULL on failure. */
DIR *srv_sess_dir(const srv_sess *x);
/* The sandbox rule for a file name: [A-Za-z0-9_-][A-Za-z0-9._-]{0,63}. */
int srv_name_ok(const char *name);

/* The error envelope {"error":{message,type,code,param}}; extra (may be NULL) adds
 * members to the inner object and is consumed. Returns the malloc'd text. */
char *srv_error_json(const char *message, const char *type, const char *code,
                     const char *param, cJSON *extra);
/* Set a job's answer to an error envelope. */
void srv_job_error(srv_job *j, int status, const char *message, const char *type,
                   const char *code, const char *param);
/* Answer j 400 unsupported_parameter for the field named (under prefix.: a member of that
 * object, when prefix is not NULL); returns -1. */
int srv_unsupported(srv_job *j, const char *prefix, const char *name);
/* 0 when every member of obj is one of keys[0..n); else srv_unsupported for the first other:
 * a field ignored would answer something not asked for. */
int srv_keys_only(srv_job *j, const cJSON *obj, const char *const *keys, size_t n, const char *prefix);
/* Set a job's answer to JSON (consumed). */
void srv_job_json(srv_job *j, int status, cJSON *doc);

/* query.c: POST /v1/query. Checks the request on the HTTP thread (status and error text
 * in j on failure: returns -1), runs on the compute thread. */
int srv_query_check(srv *S, srv_job *j);
void srv_query_run(srv *S, srv_job *j);

/* openai.c: the model-facing routes. */
int srv_complete_check(srv *S, srv_job *j, int chat);
void srv_complete_run(srv *S, srv_job *j);
void srv_tokenize_run(srv *S, srv_job *j);
void srv_detokenize_run(srv *S, srv_job *j);
void srv_trace_run(srv *S, srv_job *j);
/* How much of text[0..n) may be streamed, text being len decoded bytes (n <= len; NULs
 * possible): not a cut character, and not the U+FFFD run that ends the text, which may be
 * a character the decoder has not finished (its last byte still to come). */
size_t srv_text_ready(const char *text, size_t len, size_t n);
/* GET /v1/models, computed once at start from the base model (never queued). */
int srv_models_init(srv *S, lql_err *e);

#endif
