/*
 * st_header.h — the safetensors header the benchmarks' checkpoint writers emit (ckpt.h's Llama,
 * ssm_decode.c's Mamba2): entries added in file order, then padded to 8 bytes and written with
 * its length. Header-only (static) because CMake builds every bench source as its own executable.
 */
#ifndef LQL_BENCH_ST_HEADER_H
#define LQL_BENCH_ST_HEADER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct st_header { char *h; size_t len, cap; uint64_t off; } st_header;

/* Room for n entries; 0 or -1 (out of memory). */
static int st_header_begin(st_header *s, int n)
{
    s->cap = (size_t)n * 200 + 64;
    s->len = 0;
    s->off = 0;
    if (!(s->h = malloc(s->cap))) return -1;
    s->len += (size_t)snprintf(s->h, s->cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    return 0;
}

/* The next tensor: dtype "F32"/"F16"/"BF16", nd dimensions, esz bytes per element. */
static void st_header_add(st_header *s, const char *name, const char *dtype, const int64_t *shape,
                          int nd, int esz)
{
    uint64_t n = (uint64_t)esz;
    s->len += (size_t)snprintf(s->h + s->len, s->cap - s->len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                               name, dtype);
    for (int d = 0; d < nd; d++) {
        n *= (uint64_t)shape[d];
        s->len += (size_t)snprintf(s->h + s->len, s->cap - s->len, "%s%lld", d ? "," : "",
                                   (long long)shape[d]);
    }
    s->len += (size_t)snprintf(s->h + s->len, s->cap - s->len, "],\"data_offsets\":[%llu,%llu]}",
                               (unsigned long long)s->off, (unsigned long long)(s->off + n));
    s->off += n;
}

/* Closes the header, writes length + header to f and frees it; 0 or -1. */
static int st_header_write(st_header *s, FILE *f)
{
    s->len += (size_t)snprintf(s->h + s->len, s->cap - s->len, "}");
    while (s->len % 8) s->h[s->len++] = ' ';
    uint64_t hl = s->len;
    int rc = fwrite(&hl, 8, 1, f) == 1 && fwrite(s->h, 1, s->len, f) == s->len ? 0 : -1;
    free(s->h);
    s->h = NULL;
    return rc;
}

#endif
