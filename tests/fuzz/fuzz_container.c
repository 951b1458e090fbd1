/*
 * fuzz_container.c — libFuzzer over a whole container directory. The input is split at
 * "\n%%\n" into index.json, system_graph.json and the three segment files a graph-shape
 * container names (segments/target.{embedding,decoder_stack,output_head}.bin); they are
 * written into one scratch directory and opened with vx_open, then every tensor view is
 * touched at both ends so ASan sees any out-of-bounds pointer, and the first-touch
 * integrity check runs twice over every tensor (same answer; a refusal names the segment).
 */
#include "fuzz_files.h"
#include "vindex.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *files[] = {"index.json", "system_graph.json",
                              "segments/target.embedding.bin",
                              "segments/target.decoder_stack.bin",
                              "segments/target.output_head.bin"};
#define NFILES (sizeof files / sizeof files[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fz_scratch("fuzz_container");
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/segments", dir);
    mkdir(sub, 0755);   /* (exists after the first input) */
    const uint8_t *p = data;
    for (size_t i = 0; i < NFILES; i++) {
        size_t n;
        const uint8_t *a = fz_part(&p, data + size, &n);
        fz_put(dir, files[i], a, n);
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
