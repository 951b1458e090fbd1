/*
 * files.c — whole-file reads (files.h).
 */
#include <stdlib.h>
#include <string.h>

#include "files.h"

char *lql_read_stream(FILE *f, size_t max, size_t *n)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            if (max && cap >= max) { free(buf); return NULL; }
            cap = cap ? cap * 2 : 8192;
            if (max && cap > max) cap = max;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { free(buf); return NULL; }
            buf = nb;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        if (k == 0) break;
        len += k;
    }
    if (ferror(f)) { free(buf); return NULL; }
    if (!buf && !(buf = malloc(1))) return NULL;
    buf[len] = 0;
    if (n) *n = len;
    return buf;
}

char *lql_read_file(const char *path, size_t max, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = lql_read_stream(f, max, n);
    fclose(f);
    return buf;
}
