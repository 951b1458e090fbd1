/*
 * pool.c — the kernels' thread pool: eng_threads() - 1 persistent workers plus the
 * caller. Decode calls a parallel kernel a few hundred times per token, so workers spin
 * briefly on a generation counter before sleeping on a condition variable; spawning
 * threads per call would cost more than a small GEMV itself.
 *
 * Parts are claimed, not assigned: the caller runs part 0, then claims and runs every part
 * no worker has taken yet, and waits only for parts a worker is already running. On a
 * loaded machine a worker that is not scheduled costs nothing; a worker that wakes late
 * finds nothing left (or claims a part of whatever job is current, whose fn and ctx were
 * published before its counter was reset).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include <immintrin.h>
#include "engine_int.h"

#define MAX_THREADS 64
#define SPIN 4000

static struct {
    pthread_once_t once;
    pthread_mutex_t run;          /* serialises eng_parallel callers */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nthreads;                 /* caller + workers */
    void (*fn)(void *ctx, int i, int n);
    void *ctx;
    atomic_uint gen;
    atomic_int next;              /* next part index to claim */
    atomic_int finished;          /* parts of the current job done */
} P = { .once = PTHREAD_ONCE_INIT, .run = PTHREAD_MUTEX_INITIALIZER,
        .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

int eng_threads(void)
{
    const char *e = getenv("LQL_THREADS");
    long n = 0;
    if (e && *e) {
        char *end;
        n = strtol(e, &end, 10);
        if (*end) n = 0;
    }
    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    return (int)n;
}

static void *worker(void *arg)
{
    (void)arg;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&P.gen, memory_order_acquire)) == seen) {
            if (++spins < SPIN) { _mm_pause(); continue; }
            pthread_mutex_lock(&P.mu);
            while ((g = atomic_load_explicit(&P.gen, memory_order_acquire)) == seen)
                pthread_cond_wait(&P.cv, &P.mu);
            pthread_mutex_unlock(&P.mu);
            break;
        }
        seen = g;
        int i;
        while ((i = atomic_fetch_add(&P.next, 1)) < P.nthreads) {
            P.fn(P.ctx, i, P.nthreads);
            atomic_fetch_add(&P.finished, 1);
        }
    }
    return NULL;
}

static void start(void)
{
    int n = eng_threads();
    P.nthreads = 1;
    for (int i = 1; i < n; i++) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        /* a worker that cannot start just leaves the pool smaller */
        if (pthread_create(&t, &a, worker, NULL) == 0) P.nthreads++;
        pthread_attr_destroy(&a);
        if (P.nthreads != i + 1) break;
    }
}

void eng_parallel(void (*fn)(void *ctx, int i, int n), void *ctx)
{
    pthread_once(&P.once, start);
    if (P.nthreads == 1) { fn(ctx, 0, 1); return; }
    pthread_mutex_lock(&P.run);
    P.fn = fn;
    P.ctx = ctx;
    atomic_store(&P.finished, 0);
    atomic_store(&P.next, 1);          /* part 0 is the caller's */
    pthread_mutex_lock(&P.mu);
    atomic_fetch_add_explicit(&P.gen, 1, memory_order_release);
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.mu);
    fn(ctx, 0, P.nthreads);
    atomic_fetch_add(&P.finished, 1);
    int i;
    while ((i = atomic_fetch_add(&P.next, 1)) < P.nthreads) {
        fn(ctx, i, P.nthreads);
        atomic_fetch_add(&P.finished, 1);
    }
    /* only parts a worker is running remain; yield after a while on a loaded machine */
    for (int spins = 0; atomic_load(&P.finished) < P.nthreads; spins++) {
        if (spins < SPIN) _mm_pause();
        else sched_yield();
    }
    pthread_mutex_unlock(&P.run);
}

void eng_split(int count, int i, int n, int align, int *lo, int *hi)
{
    if (align < 1) align = 1;
    int blocks = (count + align - 1) / align;
    int b0 = (int)((long)blocks * i / n), b1 = (int)((long)blocks * (i + 1) / n);
    *lo = b0 * align < count ? b0 * align : count;
    *hi = b1 * align < count ? b1 * align : count;
}

int eng_claim_rows(atomic_int *next, int rows, int nparts, int *lo, int *hi)
{
    int cur = atomic_load_explicit(next, memory_order_relaxed);
    for (;;) {
        if (cur >= rows)
            return 0;
        int chunk = (rows - cur) / nparts;
        chunk = chunk < 16 ? 16 : chunk & ~15;
        const int end = rows - cur <= chunk ? rows : cur + chunk;
        if (atomic_compare_exchange_weak_explicit(next, &cur, end, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *lo = cur;
            *hi = end;
            return 1;
        }
    }
}

typedef struct rows_region {
    eng_rowjob *jobs;
    int count;
} rows_region;

static void rows_part(void *ctx, int i, int nparts)
{
    (void)i;
    rows_region *g = ctx;
    int lo, hi;
    for (int k = 0; k < g->count; k++)
        while (eng_claim_rows(&g->jobs[k].next, g->jobs[k].rows, nparts, &lo, &hi))
            g->jobs[k].run(g->jobs[k].ctx, lo, hi);
}

void eng_parallel_rows(eng_rowjob *jobs, int count)
{
    rows_region g = {jobs, count};
    eng_parallel(rows_part, &g);
}
