/*
 * fuzz_container.c — libFuzzer over a whole container directory. The input is split at
 * "\n%%\n" into index.json, system_graph.json and the three segment files a graph-shape
 * container names (segments/target.{embedding,decoder_stack,output_head}.bin); they are
 * written into one scratch directory and opened with vx_open, then every tensor view is
 * touched at both ends so ASan sees any out-of-bounds pointer, and the first-touch
 * integrity check runs twice over every tensor (same answer; a refusal names the segment).
 */
#include "vindex.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static const char *files[] = {"index.json", "system_graph.json",
                              "segments/target.embedding.bin",
                              "segments/target.decoder_stack.bin",
                              "segments/target.output_head.bin"};
#define NFILES (sizeof files / sizeof files[0])

static void put(const char *rel, const uint8_t *p, size_t n)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    if (!p) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (n)
        fwrite(p, 1, n, f);
    fclose(f);
}

/* Removes the scratch directory when libFuzzer exits. */
static void cleanup(void)
{
    char sub[PATH_MAX];
    for (size_t i = 0; i < NFILES; i++)
        put(files[i], NULL, 0);
    snprintf(sub, sizeof sub, "%s/segments", dir);
    rmdir(sub);
    rmdir(dir);
}

/* First occurrence of the separator in [p, end), or NULL. */
static const uint8_t *find_sep(const uint8_t *p, const uint8_t *end, const char *sep, size_t n)
{
    for (; (size_t)(end - p) >= n; p++) {
        if (memcmp(p, sep, n) == 0)
            return p;
    }
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        /* tmpfs when there is one: every input is five file writes and an open. */
        struct stat st;
        snprintf(dir, sizeof dir, "%s/lql_fuzz_container_XXXXXX",
                 stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp");
        char sub[PATH_MAX];
        if (!mkdtemp(dir))
            abort();
        snprintf(sub, sizeof sub, "%s/segments", dir);
        mkdir(sub, 0755);
        atexit(cleanup);
    }
    static const char sep[] = "\n%%\n";
    const uint8_t *p = data, *end = data + size;
    for (size_t i = 0; i < NFILES; i++) {
        if (!p) {
            put(files[i], NULL, 0);
            continue;
        }
        const uint8_t *q = find_sep(p, end, sep, sizeof sep - 1);
        size_t n = q ? (size_t)(q - p) : (size_t)(end - p);
        put(files[i], p, n);
        p = q ? q + sizeof sep - 1 : NULL;
    }
    vx_container *c = NULL;
    vx_err err;
    if (vx_open(dir, &c, &err) == 0) {
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < vx_tensor_count(c); i++) {
            const vx_tensor *t = vx_tensor_at(c, i);
            const uint8_t *b = t->data;
            sink ^= b[0];
            sink ^= b[t->nbytes - 1];
            if (vx_find(c, t->object, t->name) != t)
                abort();
        }
        (void)sink;
        /* first-touch integrity over every tensor: a mismatch must come back as a refusal
         * that names the segment, and a second pass must give the same answer */
        vx_err e1 = {0}, e2 = {0};
        int r1 = vx_object_check(c, NULL, &e1), r2 = vx_object_check(c, NULL, &e2);
        if (r1 != r2 || (r1 != 0 && (!strstr(e1.msg, "segment '") || strcmp(e1.msg, e2.msg))))
            abort();
        vx_close(c);
    }
    return 0;
}
