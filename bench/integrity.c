/*
 * integrity.c — the cost of first-touch integrity (vx_tensor_check, docs/lql/CONTAINER.md
 * "Integrity on first touch"): how long the first statement that reads a container's
 * weights spends hashing them. For each container and round, two fresh opens: the tensors
 * in turn, then over the engine's pool (eng_tensors_check, as the statements run it). Each
 * times the tensors browse binds (embedding, gate and up rows: what WALK / DESCRIBE /
 * SELECT touch first), then every tensor (what INFER / GENERATE / TRACE touch first), then
 * the same again (remembered: ~0). Wall and CPU seconds and GB/s; pages are read once
 * beforehand so the numbers are the hash alone, as after USE on a warm page cache.
 *
 *   integrity [--rounds 3] CONTAINER…   e.g. a ~1.1B bf16 encode with a tokenizer
 *                              (`walk --encode`, BROWSE.md; keep generated models out of
 *                              the repo)
 */
#include "brw_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double wall(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

/* One fresh open of path: browse's first touch, then every tensor's, then again
 * (remembered); in turn (vx_tensor_check, vx_object_check) or over the pool
 * (eng_tensors_check, as the statements run it). */
static int run_once(const char *path, int pool, double *w, double *cp, uint64_t *bb, uint64_t *all)
{
    vx_container *c;
    vx_err err = {0};
    if (vx_open(path, &c, &err) != 0) {
        fprintf(stderr, "integrity: %s\n", err.msg);
        return 1;
    }
    /* page everything in first: the hash is what is measured */
    volatile unsigned char sink = 0;
    *all = 0;
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        for (uint64_t b = 0; b < t->nbytes; b += 4096)
            sink ^= ((const unsigned char *)t->data)[b];
        *all += t->nbytes;
    }
    brw_shape s;
    const vx_tensor **list = NULL;
    size_t n = 0;
    int rc = brw_shape_read(c, &s, &err);
    const int shaped = rc == 0;
    if (shaped) {
        list = brw_shape_tensors(&s, &n);
        rc = list ? 0 : -1;
    }
    if (rc == 0) {
        *bb = 0;
        for (size_t i = 0; i < n; i++) *bb += list[i]->nbytes;
        w[0] = wall(), cp[0] = cpu();
        if (pool) {
            rc = eng_tensors_check(c, list, n, &err);
        } else {
            for (size_t i = 0; i < n && rc == 0; i++) rc = vx_tensor_check(c, list[i], &err);
        }
        w[1] = wall(), cp[1] = cpu();
        if (rc == 0) rc = pool ? eng_tensors_check(c, NULL, 0, &err) : vx_object_check(c, NULL, &err);
        w[2] = wall(), cp[2] = cpu();
        if (rc == 0) rc = pool ? eng_tensors_check(c, NULL, 0, &err) : vx_object_check(c, NULL, &err);
        w[3] = wall();
    }
    if (shaped) brw_shape_free(&s);
    free(list);
    vx_close(c);
    if (rc != 0) fprintf(stderr, "integrity: %s\n", err.msg[0] ? err.msg : "out of memory");
    return rc != 0;
}

static int bench_one(const char *path, int rounds)
{
    printf("%s (%d threads for the pool)\n", path, eng_threads());
    for (int r = 0; r < rounds; r++)
        for (int pool = 0; pool < 2; pool++) {
            double w[4], cp[3];
            uint64_t bytes, all;
            if (run_once(path, pool, w, cp, &bytes, &all)) return 1;
            printf("  round %d %-7s browse %6.3f GB %6.3f s wall %6.3f s cpu %5.2f GB/s | all %6.3f GB "
                   "%6.3f s wall %6.3f s cpu %5.2f GB/s | again %.6f s\n",
                   r + 1, pool ? "pool" : "in turn", bytes / 1e9, w[1] - w[0], cp[1] - cp[0],
                   bytes / 1e9 / (w[1] - w[0]), all / 1e9, w[2] - w[0], cp[2] - cp[0],
                   all / 1e9 / (w[2] - w[0]), w[3] - w[2]);
        }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: integrity CONTAINER...\n");
        return 2;
    }
    int rc = 0, rounds = 3, i = 1;
    if (argc > 2 && !strcmp(argv[1], "--rounds")) {
        rounds = atoi(argv[2]);
        i = 3;
    }
    if (rounds < 1 || i >= argc) {
        fprintf(stderr, "usage: integrity [--rounds N] CONTAINER...\n");
        return 2;
    }
    for (; i < argc; i++)
        rc |= bench_one(argv[i], rounds);
    return rc;
}
