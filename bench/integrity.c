/*
 * integrity.c — the cost of first-touch integrity (vx_tensor_check, docs/lql/CONTAINER.md
 * "Integrity on first touch"): how long the first statement that reads a container's
 * weights spends hashing them. For each container: the tensors browse binds (embedding,
 * gate and up rows: what WALK / DESCRIBE / SELECT touch first), then every bound tensor
 * (what INFER / GENERATE / TRACE touch first), then the same again (remembered: ~0). Wall
 * and CPU seconds and GB/s; pages are read once beforehand so the numbers are the hash
 * alone, as after USE on a warm page cache.
 *
 *   integrity CONTAINER…      e.g. a ~1.1B bf16 encode (bench/decode writes one under
 *                              /tmp/lql-bench; keep generated models out of the repo)
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

static int bench_one(const char *path)
{
    vx_container *c;
    vx_err err = {0};
    if (vx_open(path, &c, &err) != 0) {
        fprintf(stderr, "integrity: %s\n", err.msg);
        return 1;
    }
    /* page everything in first: the hash is what is measured */
    uint64_t all = 0;
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        for (uint64_t b = 0; b < t->nbytes; b += 4096)
            sink ^= ((const unsigned char *)t->data)[b];
        all += t->nbytes;
    }
    brw_shape s;
    if (brw_shape_read(c, &s, &err) != 0) {
        fprintf(stderr, "integrity: %s\n", err.msg);
        vx_close(c);
        return 1;
    }
    double w0 = wall(), c0 = cpu();
    uint64_t bytes = s.embed->nbytes;
    int rc = vx_tensor_check(c, s.embed, &err);
    for (int l = 0; l < s.layers && rc == 0; l++)
        for (int e = 0; e < s.layer[l].n_parts && rc == 0; e++) {
            const brw_part *p = &s.layer[l].parts[e];
            rc = vx_tensor_check(c, p->gate, &err);
            bytes += p->gate->nbytes;
            if (rc == 0 && p->up) {
                rc = vx_tensor_check(c, p->up, &err);
                bytes += p->up->nbytes;
            }
        }
    double w1 = wall(), c1 = cpu();
    if (rc == 0)
        rc = vx_object_check(c, NULL, &err);
    double w2 = wall(), c2 = cpu();
    if (rc == 0)
        rc = vx_object_check(c, NULL, &err);
    double w3 = wall();
    brw_shape_free(&s);
    vx_close(c);
    if (rc != 0) {
        fprintf(stderr, "integrity: %s\n", err.msg);
        return 1;
    }
    printf("%s\n", path);
    printf("  browse first touch  %7.3f GB  %6.3f s wall  %6.3f s cpu  %5.2f GB/s\n",
           bytes / 1e9, w1 - w0, c1 - c0, bytes / 1e9 / (w1 - w0));
    printf("  engine first touch  %7.3f GB  %6.3f s wall  %6.3f s cpu  (the rest: %.3f GB, "
           "%5.2f GB/s)\n", all / 1e9, w2 - w0, (c2 - c1) + (c1 - c0), (all - bytes) / 1e9,
           (all - bytes) / 1e9 / (w2 - w1));
    printf("  again (remembered)  %10.6f s\n", w3 - w2);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: integrity CONTAINER...\n");
        return 2;
    }
    int rc = 0;
    for (int i = 1; i < argc; i++)
        rc |= bench_one(argv[i]);
    return rc;
}
