/*
 * child_cost.h — run one encode (or a shell command) in a child process and report what it
 * alone cost: wall time, CPU time (user + system, its reaped children included; the machine
 * is shared, so wall time includes waiting) and peak RSS. And the bytes under a directory.
 * Header-only (static) because CMake builds every bench source as its own executable.
 */
#ifndef LQL_BENCH_CHILD_COST_H
#define LQL_BENCH_CHILD_COST_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "vindex.h"

typedef struct child_cost {
    double wall, cpu;
    uint64_t rss;   /* bytes */
} child_cost;

static double cc_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* vx_encode(src, out, o) in a child, or `sh -c cmd` when cmd is not NULL. 0 or -1. */
static int child_run(const char *src, const char *out, const vx_encode_opts *o, const char *cmd,
                     child_cost *c)
{
    double t0 = cc_now();
    pid_t pid = fork();
    if (pid == 0) {
        if (cmd) {
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
            _exit(127);
        }
        vx_err err = {0};
        if (vx_encode(src, out, o, &err) != 0) {
            fprintf(stderr, "encode: %s\n", err.msg);
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
        return -1;
    c->wall = cc_now() - t0;
    c->cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
             (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    c->rss = (uint64_t)ru.ru_maxrss * 1024;
    return 0;
}

/* Bytes under dir (links followed), 0 when du fails. */
static uint64_t dir_bytes(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "du -sbL '%.4096s'", dir);
    FILE *p = popen(cmd, "r");
    unsigned long long n = 0;
    if (p) {
        if (fscanf(p, "%llu", &n) != 1) n = 0;
        pclose(p);
    }
    return n;
}

#endif
