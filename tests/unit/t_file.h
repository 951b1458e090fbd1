/*
 * t_file.h — the unit tests' file chores: reading a whole file (fixture vectors, goldens,
 * files a test has just written) and removing a scratch directory, so each test does not
 * carry its own copy. Static inline: a test includes it and uses what it needs.
 */
#ifndef LQL_T_FILE_H
#define LQL_T_FILE_H

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* The whole file at the path printf-formatted from fmt, in a malloc'd buffer (caller
 * frees) of *n bytes plus one NUL after them; NULL when it cannot be read whole. */
__attribute__((format(printf, 2, 3)))
static inline unsigned char *t_slurp(size_t *n, const char *fmt, ...)
{
    char path[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    unsigned char *b = len >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)len + 1) : NULL;
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[len] = 0;
        *n = (size_t)len;
    }
    return b;
}

/* The start of the file at path into buf: at most size - 1 bytes, NUL-terminated; empty
 * when it cannot be opened (captured command output, small fixtures). */
static inline void t_read_into(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "rb");
    buf[f ? fread(buf, 1, size - 1, f) : 0] = '\0';
    if (f)
        fclose(f);
}

/* The file at path parsed as JSON (caller deletes); NULL when unreadable or malformed. */
static inline cJSON *t_load_json(const char *path)
{
    size_t n;
    char *text = (char *)t_slurp(&n, "%s", path);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

/* Write json to path as cJSON_Print text (no trailing newline); -1 when that fails. */
static inline int t_save_json(const char *path, const cJSON *json)
{
    char *text = cJSON_Print(json);
    FILE *f = fopen(path, "wb");
    int ok = f && text && fputs(text, f) >= 0;
    if (f && fclose(f) != 0)
        ok = 0;
    free(text);
    return ok ? 0 : -1;
}

/* rm -rf dir (a test's scratch directory); -1 with "could not remove DIR" on stderr when
 * that fails. */
static inline int t_rm_rf(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", dir);
        return -1;
    }
    return 0;
}

#endif
