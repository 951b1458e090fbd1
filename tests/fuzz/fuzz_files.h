/*
 * fuzz_files.h — what the harnesses that fuzz whole files share: one input cut into parts
 * at "\n%%\n", and a scratch directory (tmpfs when there is one: every input is a few file
 * writes) to write them into.
 */
#ifndef LQL_FUZZ_FILES_H
#define LQL_FUZZ_FILES_H

#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fz_dir[64];

static int fz_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Remove path and everything below it. */
static inline void fz_rm_tree(const char *path)
{
    nftw(path, fz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void fz_rm_scratch(void)
{
    fz_rm_tree(fz_dir);
}

/* The harness's scratch directory, named after tag: made on the first call (aborting when
 * it cannot be) and removed with everything in it when libFuzzer exits. */
static inline const char *fz_scratch(const char *tag)
{
    if (!fz_dir[0]) {
        struct stat st;
        snprintf(fz_dir, sizeof fz_dir, "%s/lql_%s_XXXXXX",
                 stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp", tag);
        if (!mkdtemp(fz_dir))
            abort();
        atexit(fz_rm_scratch);
    }
    return fz_dir;
}

/* Write n bytes of p to dir/rel, or remove it when p is NULL. */
static inline void fz_put(const char *dir, const char *rel, const uint8_t *p, size_t n)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, rel) >= sizeof path)
        abort();
    if (!p) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0)
        abort();
}

/* The next part of [*p, end): its start (NULL when the input has no more parts) and length
 * in *n; *p moves past the separator that ends it (NULL after the last part). */
static inline const uint8_t *fz_part(const uint8_t **p, const uint8_t *end, size_t *n)
{
    static const char sep[] = "\n%%\n";
    const uint8_t *a = *p, *q = a;
    *n = 0;
    if (!a)
        return NULL;
    while ((size_t)(end - q) >= 4 && memcmp(q, sep, 4) != 0)
        q++;
    if ((size_t)(end - q) < 4)
        q = end;
    *n = (size_t)(q - a);
    *p = q < end ? q + 4 : NULL;
    return a;
}

#endif
