/*
 * bandwidth.h — the streaming-read bandwidth probe the benchmarks divide by (decode,
 * walk): `threads` threads summing 1 MiB chunks of a large float array, claimed in turn,
 * with AVX2 (benches build with -march=x86-64-v3) and fetching 4 KiB ahead into L2, so the
 * figure is bound by memory, not by add latency or fill buffers — a scalar loop would
 * understate the bandwidth and flatter the ratios.
 * Header-only (static inline) because CMake builds every bench source as its own executable.
 */
#ifndef LQL_BENCH_BANDWIDTH_H
#define LQL_BENCH_BANDWIDTH_H

#include <fcntl.h>
#include <ftw.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Monotonic wall clock, seconds. */
static inline double bw_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct bw_slice { const float *a; size_t n; float sum; } bw_slice;

/* How far ahead each step asks for its lines into L2 (floats: 4 KiB). On the Emerald
 * Rapids host (2 vCPUs, 2026-12-06) the read without it gave 22-23 GB/s in a minute where
 * the same read fetching 4 KiB ahead gave 29-30 (30.4 against 34.4 in a faster one): the
 * L2 holds more misses in flight than L1's fill buffers. A probe below what the memory
 * gives flatters every ratio to it, and the decode kernels fetch ahead the same way. */
#define BW_AHEAD 1024

/* Thread body: four independent accumulators in flight; the sum is kept so the loads
 * are observable. Prefetches past the end are hints and never fault. */
static inline void *bw_sum(void *arg)
{
    bw_slice *p = arg;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= p->n; i += 32) {
        _mm_prefetch((const char *)(p->a + i + BW_AHEAD), _MM_HINT_T1);
        _mm_prefetch((const char *)(p->a + i + BW_AHEAD + 16), _MM_HINT_T1);
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(p->a + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(p->a + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(p->a + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(p->a + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    float s = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    for (; i < p->n; i++)
        s += p->a[i];
    p->sum = s;
    return NULL;
}

/* The probe's reads claim 1 MiB chunks in turn: on the Zen 5 host two threads streaming
 * interleaved chunks read 2-47% faster than two threads each reading one half (64 KiB
 * chunks were slower, 1 and 4 MiB alike), and a probe below what the memory gives would
 * flatter every ratio to it. */
#define BW_CHUNK ((size_t)1 << 18)   /* floats */

typedef struct bw_job { const float *a; size_t n; atomic_size_t next; float sink[64]; } bw_job;
typedef struct bw_arg { bw_job *j; int id; } bw_arg;

static inline void *bw_claim(void *arg)
{
    bw_arg *p = arg;
    float s = 0;
    for (;;) {
        size_t lo = atomic_fetch_add(&p->j->next, 1) * BW_CHUNK;
        if (lo >= p->j->n)
            break;
        bw_slice c = {p->j->a + lo, p->j->n - lo < BW_CHUNK ? p->j->n - lo : BW_CHUNK, 0};
        bw_sum(&c);
        s += c.sum;
    }
    p->j->sink[p->id % 64] = s;
    return NULL;
}

/* One streaming read of the whole array a (n floats) with `threads` threads (at most
 * 64): GB/s. */
static inline double bw_once(const float *a, size_t n, int threads)
{
    pthread_t tid[64];
    bw_arg p[64];
    bw_job j = {.a = a, .n = n};
    atomic_init(&j.next, 0);
    if (threads > 64)
        threads = 64;
    if (threads < 1)
        threads = 1;
    double t0 = bw_now();
    for (int t = 0; t < threads; t++) {
        p[t] = (bw_arg){&j, t};
        pthread_create(&tid[t], NULL, bw_claim, &p[t]);
    }
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    return (double)n * sizeof(float) / (bw_now() - t0) / 1e9;
}

/* The probe's array of n floats, filled, in 2 MiB pages where the kernel gives them (as
 * the engine's weight mappings get them, ENCODE.md "Huge folios"; with 4 KiB pages the
 * probe read 6-16% slower), or NULL. Never freed: it lives as long as its process. */
static inline float *bw_array(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    char *m = mmap(NULL, n * sizeof(float) + huge, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    float *a = (float *)(((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1));
    madvise(a, n * sizeof(float), MADV_HUGEPAGE);
    for (size_t i = 0; i < n; i++)
        a[i] = (float)(i & 7);
    return a;
}

/* Best of three reads of a 2 GB bw_array with `threads` threads, GB/s; 0 when it cannot run. The probe runs in a child process so its
 * 2 GB stay out of the caller's peak RSS. */
static inline double bw_probe(int threads)
{
    int fd[2];
    double bw = 0;
    if (pipe(fd) < 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        size_t n = ((size_t)2 << 30) / sizeof(float);
        float *a = bw_array(n);
        double best = 0;
        for (int rep = 0; a && rep < 3; rep++) {
            double g = bw_once(a, n, threads);
            best = g > best ? g : best;
        }
        ssize_t w = write(fd[1], &best, sizeof best);
        _exit(w == (ssize_t)sizeof best ? 0 : 1);
    }
    close(fd[1]);
    if (pid < 0 || read(fd[0], &bw, sizeof bw) != (ssize_t)sizeof bw)
        bw = 0;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return bw;
}

static int bw_drop_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    int fd = type == FTW_F ? open(path, O_RDONLY) : -1;
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    return 0;
}

/* Drop the page cache of a file, or of every file under a directory (pages some process
 * has mapped stay). Each program then reads its weights in with its own reader: a copy
 * left in the cache by `cp` or `cat` sits in 4 KiB folios, which a mapping can only map
 * 4 KiB at a time (decode 15-20 % slower, ENGINE.md "Huge folios"). */
static inline void bw_drop_cache(const char *path)
{
    nftw(path, bw_drop_one, 16, FTW_PHYS);
}

#endif
