/*
 * replay.c — runs a libFuzzer harness (tests/fuzz/fuzz_*.c) over its kept corpus without
 * libFuzzer: each file of each directory given, in name order, through
 * LLVMFuzzerTestOneInput once. The suite builds every harness this way (the tests
 * fuzz_*_replay, in both suites), so a harness cannot fall behind the APIs it calls, and every input
 * a past fuzzing run kept is rerun against the harness's own checks, which abort on a
 * wrong answer.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One input through the harness, from a copy of exactly its size (a read past it is caught
 * under ASan, as with libFuzzer; the project's reader adds a terminator). */
static int run_file(const char *path)
{
    size_t n = 0;
    char *buf = lql_read_file(path, 0, &n);
    uint8_t *in = buf ? malloc(n ? n : 1) : NULL;
    if (!in) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(buf);
        return 1;
    }
    memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 0;
}

int main(int argc, char **argv)
{
    int rc = 0;
    size_t total = 0;
    for (int a = 1; a < argc; a++) {
        DIR *d = opendir(argv[a]);
        if (!d) {
            fprintf(stderr, "replay: cannot open the corpus %s\n", argv[a]);
            return 1;
        }
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            if (n == cap) {
                char **nn = realloc(names, (cap = cap ? cap * 2 : 256) * sizeof *names);
                if (!nn)
                    return 1;
                names = nn;
            }
            if (!(names[n++] = strdup(e->d_name)))
                return 1;
        }
        closedir(d);
        qsort(names, n, sizeof *names, by_name);
        for (size_t i = 0; i < n; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], names[i]);
            rc |= run_file(path);
            free(names[i]);
        }
        free(names);
        total += n;
    }
    printf("replay: %zu inputs\n", total);
    return rc;
}
