/*
 * path.c — resolving container-relative paths without letting them escape the container:
 * absolute paths, ".." components and symlinks whose target leaves the directory are
 * refused, naming the path and the reason; and creating the directories above a file
 * lql keeps outside containers (a journal, the down-meta cache).
 */
#include "vindex.h"
#include "vx_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int has_dotdot(const char *rel)
{
    const char *p = rel;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return 1;
        p += n;
        while (*p == '/')
            p++;
    }
    return 0;
}

/* Is `path` equal to `root` or below it? Both are canonical. */
static int inside(const char *root, const char *path)
{
    size_t n = strlen(root);
    if (strncmp(root, path, n) != 0)
        return 0;
    return path[n] == '\0' || path[n] == '/' || (n == 1 && root[0] == '/');
}

/* Canonicalise the longest existing prefix of `full` (a missing file may still be named
 * so callers report "cannot open" themselves); 0 when found. */
static int existing_prefix(const char *full, char real[PATH_MAX])
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", full);
    for (;;) {
        if (realpath(buf, real))
            return 0;
        if (errno != ENOENT && errno != ENOTDIR)
            return -1;
        char *slash = strrchr(buf, '/');
        if (!slash || slash == buf)
            return -1;
        *slash = '\0';
    }
}

int vx_resolve_in(const char *dir, const char *rel, char *out, size_t outsz, vx_err *err)
{
    if (!rel || !*rel)
        return vx_errf(err, VX_EPATH, "empty path in container '%s'", dir);
    if (rel[0] == '/')
        return vx_errf(err, VX_EPATH, "path '%s' is absolute; container paths are relative to '%s'",
                       rel, dir);
    if (has_dotdot(rel))
        return vx_errf(err, VX_EPATH, "path '%s' has a '..' component; container paths stay inside '%s'",
                       rel, dir);
    char root[PATH_MAX], full[PATH_MAX], real[PATH_MAX];
    if (!realpath(dir, root))
        return vx_errf(err, VX_EIO, "cannot resolve container directory '%s': %s", dir,
                       strerror(errno));
    if ((size_t)snprintf(full, sizeof full, "%s/%s", root, rel) >= sizeof full)
        return vx_errf(err, VX_EPATH, "path '%s' is too long under the container directory: "
                       "%zu bytes with it, the limit is %d (directory '%s')", rel,
                       strlen(root) + 1 + strlen(rel), PATH_MAX - 1, root);
    if (realpath(full, real)) {
        if (!inside(root, real))
            return vx_errf(err, VX_EPATH, "path '%s' leaves the container through a symlink (to '%s')",
                           rel, real);
        if ((size_t)snprintf(out, outsz, "%s", real) >= outsz)
            return vx_errf(err, VX_EARG, "path '%s' does not fit the caller's buffer", rel);
        return 0;
    }
    if (errno != ENOENT && errno != ENOTDIR)
        return vx_errf(err, VX_EIO, "cannot resolve '%s' in '%s': %s", rel, dir, strerror(errno));
    /* A dangling symlink could be pointed anywhere later; refuse it now. */
    struct stat st;
    if (lstat(full, &st) == 0 && S_ISLNK(st.st_mode))
        return vx_errf(err, VX_EPATH, "path '%s' is a dangling symlink", rel);
    if (existing_prefix(full, real) < 0 || !inside(root, real))
        return vx_errf(err, VX_EPATH, "path '%s' leaves the container through a symlink", rel);
    if ((size_t)snprintf(out, outsz, "%s", full) >= outsz)
        return vx_errf(err, VX_EARG, "path '%s' does not fit the caller's buffer", rel);
    return 0;
}

int vx_xdg_file(const char *var, const char *home_rel, const char *name, const char *sha256,
                const char *ext, char *out, size_t outsz)
{
    const char *xdg = getenv(var), *home = getenv("HOME");
    int n;
    if (xdg && *xdg == '/')
        n = snprintf(out, outsz, "%s/lql/%s-%.16s.%s", xdg, name, sha256, ext);
    else if (home && *home)
        n = snprintf(out, outsz, "%s/%s/lql/%s-%.16s.%s", home, home_rel, name, sha256, ext);
    else
        return 1;
    return n < 0 || (size_t)n >= outsz ? -1 : 0;
}

int vx_mkdirs_above(const char *path, const char *label, vx_err *err)
{
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s", path) >= sizeof dir)
        return vx_errf(err, VX_EARG, "%s: path too long: '%s'", label, path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    /* mkdir -p: each component in turn, tolerating existing ones */
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            return vx_errf(err, VX_EIO, "cannot create %s '%s': %s", label, dir, strerror(e));
        }
        *p = c;
        if (!c)
            return 0;
    }
}
