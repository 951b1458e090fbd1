/*
 * files.c — whole-file reads and the output-file rule (files.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "files.h"
#include "vindex.h"

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

int lql_output_path(const char *path, const char *what, const lql_span *at, lql_err *e)
{
    if (!path || !*path)
        return lql_errf(e, LQL_EEXEC, at, "%s needs a file name", what);
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return lql_errf(e, LQL_EEXEC, at, "%s: \"%s\" climbs out of its directory with "
                            "\"..\"; name a file below the current directory or an absolute "
                            "path without \"..\"", what, path);
        p += n;
        p += *p == '/';
    }
    struct stat sb;
    if (lstat(path, &sb) == 0)
        return lql_errf(e, LQL_EEXEC, at, "%s: \"%s\" already exists; lql does not overwrite "
                        "files: remove it or choose another name", what, path);
    if (errno != ENOENT)
        return lql_errf(e, LQL_EEXEC, at, "%s: cannot check \"%s\": %s", what, path,
                        strerror(errno));
    /* the writers' rule for the rest: a parent directory that exists, and not inside a
     * container (the base is never written into), said before any work is done */
    vx_err ve = {0};
    if (vx_cw_check(path, NULL, VX_CW_FILE, what, &ve) != 0)
        return lql_errf(e, LQL_EEXEC, at, "%s", ve.msg);
    return 0;
}
