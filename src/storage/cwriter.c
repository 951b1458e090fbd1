/*
 * cwriter.c — the one container writer (vx_cw_*) and the one single-file atomic writer
 * (vx_afile_*), shared by encode, bank import, COMPILE, COMPACT and export.
 *
 * A container directory is built in a temporary sibling of its target, `<target>.tmp.<pid>`
 * (the one naming rule), and published by a rename only when complete: files are fsynced
 * as they are closed, every directory of the tree at commit, the parent after the rename.
 * A process killed at any point leaves the target absent or whole, never partial; what it
 * leaves is a `<target>.tmp.<pid>` that no other process reads (it carries another pid).
 * The target must be new (or an empty directory, replaced atomically) and, when the result
 * is made from a base container, outside that base (else the carry would walk into its own
 * temporary tree). Unchanged files of the base are hard-linked (copied when linking is not
 * possible, e.g. across file systems): the base is never written, and new files are always
 * fresh inodes, so no write reaches a linked file.
 */
#define _GNU_SOURCE   /* renameat2, copy_file_range */
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct vx_cw {
    char target[PATH_MAX];
    char tmp[PATH_MAX];
    char base[PATH_MAX];         /* "" when the result has no base container */
    const char *what;            /* names the statement in messages */
};

/* ---------------------------------------------------------------- the target rule */

const char *vx_split_parent(const char *path, char *out, size_t n)
{
    snprintf(out, n, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash) {
        const char *name = path;
        snprintf(out, n, ".");
        return name;
    }
    const char *name = path + (slash - out) + 1;
    slash[slash == out] = '\0';
    return name;
}

int vx_cw_check(const char *target, const char *base_dir, unsigned flags, const char *what,
                vx_err *err)
{
    struct stat sb;
    if (!target || !*target)
        return vx_errf(err, VX_EARG, "%s: an output path is required", what);
    char t[PATH_MAX], parent[PATH_MAX];
    if (strlen(target) + 32 >= sizeof t)
        return vx_errf(err, VX_EARG, "%s: output path '%s' is too long", what, target);
    snprintf(t, sizeof t, "%s", target);
    for (size_t n = strlen(t); n > 1 && t[n - 1] == '/'; n--)
        t[n - 1] = '\0';
    const char *name = vx_split_parent(t, parent, sizeof parent);
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        return vx_errf(err, VX_EARG, "%s: '%s' does not name a new %s", what, target,
                       flags & VX_CW_FILE ? "file" : "directory");
    if (lstat(t, &sb) == 0) {
        int n = 0;
        DIR *d = (flags & VX_CW_FILE) || !S_ISDIR(sb.st_mode) ? NULL : opendir(t);
        struct dirent *de;
        while (d && (de = readdir(d)))
            n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
        if (d)
            closedir(d);
        if (!d || n)
            return vx_errf(err, VX_EARG, "%s: '%s' already exists; lql does not overwrite it",
                           what, target);
    } else if (errno != ENOENT && errno != ENOTDIR) {   /* ENOTDIR: said of the parent below */
        return vx_errf(err, VX_EIO, "%s: cannot check '%s': %s", what, target, strerror(errno));
    }
    /* the temporary sibling is written beside it: its parent must be a directory */
    char rp[PATH_MAX];
    int e = !realpath(parent, rp) ? errno : stat(rp, &sb) != 0 ? errno
                                          : !S_ISDIR(sb.st_mode) ? ENOTDIR : 0;
    if (e == ENOENT || e == EACCES || e == ENOTDIR)
        return vx_errf(err, VX_EARG, "%s: cannot write '%s': its parent '%s' %s", what, target,
                       parent, e == ENOENT ? "does not exist" : e == EACCES
                           ? "cannot be searched (permission denied)" : "is not a directory");
    if (e)
        return vx_errf(err, VX_EIO, "%s: cannot write '%s': cannot resolve its parent '%s': %s",
                       what, target, parent, strerror(e));
    if (base_dir) {
        char rb[PATH_MAX], full[PATH_MAX + 256];
        if (!realpath(base_dir, rb))
            return vx_errf(err, VX_EIO, "%s: cannot resolve '%s': %s", what, base_dir,
                           strerror(errno));
        snprintf(full, sizeof full, "%s/%s", strcmp(rp, "/") ? rp : "", name);
        size_t nb = strlen(rb);
        if (strncmp(full, rb, nb) == 0 && (full[nb] == '/' || full[nb] == '\0'))
            return vx_errf(err, VX_EARG, "%s: '%s' is inside the container it is made from "
                           "('%s'); write it outside", what, target, base_dir);
    }
    /* nor inside any other container: a base is never written into (a later COMPACT or
     * verify of it would find a stranger's files). Its directory, or one of the folders a
     * container holds (segments/, browse/, banks/): nothing above is looked at, so a check
     * never reads outside the paths the user named. */
    for (int up = 0; up < 2; up++) {
        char d[PATH_MAX + 16];
        snprintf(d, sizeof d, "%s/index.json", strcmp(rp, "/") ? rp : "");
        if (stat(d, &sb) == 0 && S_ISREG(sb.st_mode))   /* named as the user wrote it */
            return vx_errf(err, VX_EARG, "%s: '%s' is inside the container '%s'; write it "
                           "outside", what, target, up ? rp : parent);
        char *slash = strrchr(rp, '/');
        if (!slash || slash == rp || (strcmp(slash + 1, "segments") &&
                                      strcmp(slash + 1, "browse") && strcmp(slash + 1, "banks")))
            break;
        *slash = '\0';
    }
    return 0;
}

/* ---------------------------------------------------------------- files */

/* Create every missing directory above path (below an existing prefix). */
static int mkdirs_for(const char *path, const char *what, vx_err *err)
{
    char d[PATH_MAX];
    if ((size_t)snprintf(d, sizeof d, "%s", path) >= sizeof d)
        return vx_errf(err, VX_EARG, "%s: path too long: '%s'", what, path);
    for (char *p = d + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(d, 0755) != 0 && errno != EEXIST)
            return vx_errf(err, VX_EIO, "%s: cannot create '%s': %s", what, d, strerror(errno));
        *p = '/';
    }
    return 0;
}

int vx_write_all(int fd, const void *data, uint64_t n, const char *what, const char *path,
                 vx_err *err)
{
    const unsigned char *p = data;
    while (n) {
        size_t k = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t w = write(fd, p, k);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return vx_errf(err, VX_EIO, "%s%scannot write '%s': %s", what ? what : "",
                           what ? ": " : "", path, w < 0 ? strerror(errno) : "short write");
        p += w;
        n -= (uint64_t)w;
    }
    return 0;
}

int vx_file_copy(const char *src, const char *dst, vx_err *err)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return vx_errf(err, VX_EIO, "cannot read '%s': %s", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        close(in);
        return vx_errf(err, VX_EIO, "cannot create '%s': %s", dst, strerror(e));
    }
    /* in the kernel where it can (no user-space pass over the bytes); read/write when the
     * file systems do not support it */
    ssize_t k;
    int rc = 0;
    while ((k = copy_file_range(in, NULL, out, NULL, 1u << 30, 0)) > 0 ||
           (k < 0 && errno == EINTR && !vx_cancel_flag))
        ;
    if (k < 0 && errno == EINTR) {
        close(in);
        close(out);
        return vx_errf(err, VX_ECANCEL, "copying '%s': cancelled", src);
    }
    if (k < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        char buf[1 << 16];
        while (rc == 0 && ((k = read(in, buf, sizeof buf)) > 0 || (k < 0 && errno == EINTR)))
            if (k > 0)
                rc = vx_write_all(out, buf, (uint64_t)k, NULL, dst, err);
    }
    if (rc == 0 && k < 0)
        rc = vx_errf(err, VX_EIO, "copying '%s' to '%s' failed: %s", src, dst, strerror(errno));
    if (rc == 0 && fsync(out) != 0)
        rc = vx_errf(err, VX_EIO, "cannot sync '%s': %s", dst, strerror(errno));
    close(in);
    close(out);
    return rc;
}

/* fsync a file or directory by path (EINVAL: the file system does not sync that kind). */
static int sync_path(const char *path, vx_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return vx_errf(err, VX_EIO, "cannot open '%s' to sync: %s", path, strerror(errno));
    int rc = fsync(fd), e = errno;
    close(fd);
    if (rc < 0 && e != EINVAL)
        return vx_errf(err, VX_EIO, "cannot sync '%s': %s", path, strerror(e));
    return 0;
}

/* fsync the directory holding path: what makes a rename or link into it durable. */
static int sync_parent(const char *path, vx_err *err)
{
    char parent[PATH_MAX];
    vx_split_parent(path, parent, sizeof parent);
    return sync_path(parent, err);
}

static int tree_at(const char *root, const char *rel, vx_tree_fn fn, void *ctx, vx_err *err)
{
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s%s%s", root, *rel ? "/" : "", rel) >= sizeof dir)
        return vx_errf(err, VX_EARG, "path too long under '%s'", root);
    DIR *d = opendir(dir);
    if (!d)
        return vx_errf(err, VX_EIO, "cannot list '%s': %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char sub[PATH_MAX], src[PATH_MAX];
        if ((size_t)snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
            sizeof sub || (size_t)snprintf(src, sizeof src, "%s/%s", root, sub) >= sizeof src) {
            rc = vx_errf(err, VX_EARG, "path too long under '%s'", dir);
            break;
        }
        /* lstat: a link is refused, not followed (the carry would link the link itself,
         * the copy fallback its target); nothing is skipped, or the result would lack it */
        struct stat sb;
        if (lstat(src, &sb) != 0)
            rc = vx_errf(err, VX_EIO, "cannot examine '%s': %s", src, strerror(errno));
        else if (S_ISDIR(sb.st_mode))
            rc = tree_at(root, sub, fn, ctx, err);
        else if (S_ISREG(sb.st_mode))
            rc = fn(ctx, sub, src, &sb);
        else
            rc = vx_errf(err, VX_EUNSUPPORTED, "'%s' is %s; a container holds only regular "
                         "files and directories", src, S_ISLNK(sb.st_mode) ? "a symbolic link"
                         : S_ISFIFO(sb.st_mode) ? "a FIFO" : S_ISSOCK(sb.st_mode) ? "a socket"
                         : "a device");
    }
    closedir(d);
    return rc;
}

int vx_tree_files(const char *root, vx_tree_fn fn, void *ctx, vx_err *err)
{
    return tree_at(root, "", fn, ctx, err);
}

/* ---------------------------------------------------------------- the container writer */

int vx_cw_open(vx_cw **out, const char *target, const char *base_dir, const char *what,
               vx_err *err)
{
    *out = NULL;
    if (vx_cw_check(target, base_dir, 0, what, err) < 0)
        return -1;
    vx_cw *w = calloc(1, sizeof *w);
    if (!w)
        return vx_errf(err, VX_ENOMEM, "%s: out of memory", what);
    w->what = what;
    snprintf(w->target, sizeof w->target, "%s", target);
    for (size_t n = strlen(w->target); n > 1 && w->target[n - 1] == '/'; n--)
        w->target[n - 1] = '\0';
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld", w->target, (long)getpid());
    if (base_dir)
        snprintf(w->base, sizeof w->base, "%s", base_dir);
    vx_rmtree(w->tmp);   /* left by a killed process that had this pid */
    if (mkdir(w->tmp, 0755) != 0) {
        int e = errno;
        vx_errf(err, VX_EIO, "%s: cannot create '%s': %s", what, w->tmp, strerror(e));
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

const char *vx_cw_dir(const vx_cw *w)
{
    return w->tmp;
}

int vx_cw_path(const vx_cw *w, const char *rel, char *out, size_t n, vx_err *err)
{
    if ((size_t)snprintf(out, n, "%s/%s", w->tmp, rel) >= n)
        return vx_errf(err, VX_EARG, "%s: path too long under '%s'", w->what, w->tmp);
    return mkdirs_for(out, w->what, err);
}

int vx_cw_carry(vx_cw *w, const char *rel, vx_err *err)
{
    char src[PATH_MAX], dst[PATH_MAX];
    if (!w->base[0])
        return vx_errf(err, VX_EARG, "%s: nothing to carry '%s' from", w->what, rel);
    if ((size_t)snprintf(src, sizeof src, "%s/%s", w->base, rel) >= sizeof src)
        return vx_errf(err, VX_EARG, "%s: path too long under '%s'", w->what, w->base);
    if (vx_cw_path(w, rel, dst, sizeof dst, err) < 0)
        return -1;
    if (link(src, dst) == 0)
        return 0;
    return vx_file_copy(src, dst, err);
}

int vx_cw_segment(vx_cw *w, const char *rel, const char *object, const char *representation,
                  const vx_segw_tensor *t, size_t n, vx_segw **out, vx_err *err)
{
    char path[PATH_MAX];
    *out = NULL;
    if (vx_cw_path(w, rel, path, sizeof path, err) < 0)
        return -1;
    return vx_segw_open(out, path, object, representation, t, n, err);
}

int vx_cw_file(vx_cw *w, const char *rel, const void *data, size_t n, vx_err *err)
{
    char path[PATH_MAX];
    if (vx_cw_path(w, rel, path, sizeof path, err) < 0)
        return -1;
    unlink(path);   /* a fresh inode: never writes through a link to the base */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return vx_errf(err, VX_EIO, "%s: cannot create '%s': %s", w->what, path,
                       strerror(errno));
    int rc = vx_write_all(fd, data, n, w->what, path, err);
    if (rc == 0 && fsync(fd) < 0)
        rc = vx_errf(err, VX_EIO, "%s: cannot sync '%s': %s", w->what, path, strerror(errno));
    close(fd);
    return rc;
}

int vx_cw_json(vx_cw *w, const char *rel, const cJSON *json, vx_err *err)
{
    char *z = cJSON_Print(json);
    if (!z)
        return vx_errf(err, VX_ENOMEM, "%s: out of memory printing %s", w->what, rel);
    size_t n = strlen(z);
    z[n] = '\n';   /* replaces the NUL: the file ends with a newline */
    int rc = vx_cw_file(w, rel, z, n + 1, err);
    free(z);
    return rc;
}

int vx_cw_index(vx_cw *w, const cJSON *index, vx_err *err)
{
    return vx_cw_json(w, "index.json", index, err);
}

/* nftw has no context pointer */
static _Thread_local vx_err *sync_err;
static _Thread_local int sync_rc;

static int sync_dir(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_D || flag == FTW_DP)
        sync_rc = sync_path(path, sync_err);
    else if (flag == FTW_DNR || flag == FTW_NS)
        sync_rc = vx_errf(sync_err, VX_EIO, "cannot read '%s' to sync it", path);
    return sync_rc;
}

void vx_cw_abort(vx_cw *w)
{
    if (!w)
        return;
    vx_rmtree(w->tmp);
    free(w);
}

int vx_cw_commit(vx_cw *w, vx_err *err)
{
    int rc = 0;
    struct stat sb;
    if (vx_cancel_flag)
        rc = vx_errf(err, VX_ECANCEL, "%s: cancelled", w->what);
    if (rc == 0) {
        vx_err local = {0};
        sync_err = &local;
        sync_rc = 0;
        if (nftw(w->tmp, sync_dir, 16, FTW_PHYS) != 0 && sync_rc == 0)
            sync_rc = vx_errf(&local, VX_EIO, "%s: cannot walk '%s' to sync it: %s", w->what,
                              w->tmp, strerror(errno));
        if ((rc = sync_rc) < 0)
            *err = local;
    }
    if (rc == 0) {
        /* absent: renamed without replacing anything that appears meanwhile; an empty
         * directory (accepted at open) is replaced atomically, and rename fails should it
         * have been filled since */
        int absent = lstat(w->target, &sb) != 0;
        int r = absent ? renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->target, RENAME_NOREPLACE)
                       : rename(w->tmp, w->target);
        if (r != 0 && absent && (errno == EINVAL || errno == ENOSYS))
            r = lstat(w->target, &sb) == 0 ? (errno = EEXIST, -1) : rename(w->tmp, w->target);
        if (r != 0 && (errno == EEXIST || errno == ENOTEMPTY || errno == ENOTDIR ||
                       errno == EISDIR))
            rc = vx_errf(err, VX_EARG, "%s: output '%s' appeared while writing; not replaced",
                         w->what, w->target);
        else if (r != 0)
            rc = vx_errf(err, VX_EIO, "%s: cannot rename '%s' to '%s': %s", w->what, w->tmp,
                         w->target, strerror(errno));
    }
    if (rc == 0) {
        rc = sync_parent(w->target, err);
        free(w);
        return rc;
    }
    vx_cw_abort(w);
    return -1;
}

/* ---------------------------------------------------------------- single files */

int vx_afile_open(vx_afile *f, const char *path, int replace, const char *what, vx_err *err)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->replace = replace;
    f->what = what;
    if ((size_t)snprintf(f->path, sizeof f->path, "%s", path) >= sizeof f->path ||
        (size_t)snprintf(f->tmp, sizeof f->tmp, "%s.tmp.%ld", path, (long)getpid()) >=
            sizeof f->tmp) {
        f->tmp[0] = '\0';
        return vx_errf(err, VX_EARG, "%s%spath too long: '%s'", what ? what : "",
                       what ? ": " : "", path);
    }
    unlink(f->tmp);   /* left by a killed process that had this pid */
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        int e = errno;
        f->tmp[0] = '\0';
        return vx_errf(err, VX_EIO, "%s%scannot create '%s': %s", what ? what : "",
                       what ? ": " : "", path, strerror(e));
    }
    return 0;
}

int vx_afile_write(vx_afile *f, const void *data, uint64_t n, vx_err *err)
{
    return vx_write_all(f->fd, data, n, f->what, f->tmp, err);
}

void vx_afile_abort(vx_afile *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp[0])
        unlink(f->tmp);
    f->tmp[0] = '\0';
}

int vx_afile_sync(vx_afile *f, vx_err *err)
{
    if (f->fd < 0)
        return 0;
    const char *w = f->what ? f->what : "", *sep = f->what ? ": " : "";
    int rc = 0;
    if (fsync(f->fd) != 0)
        rc = vx_errf(err, VX_EIO, "%s%scannot sync '%s': %s", w, sep, f->tmp, strerror(errno));
    if (close(f->fd) != 0 && rc == 0)
        rc = vx_errf(err, VX_EIO, "%s%scannot close '%s': %s", w, sep, f->tmp, strerror(errno));
    f->fd = -1;
    return rc;
}

/* tmp renamed to path without replacing, so the complete file appears at once and one
 * created since the caller checked is never replaced (file systems without hard links, e.g.
 * vfat and exFAT, have this rename); where the rename has no RENAME_NOREPLACE, a hard link
 * does the same and tmp is unlinked. */
static int rename_new(const char *tmp, const char *path, const char *what, vx_err *err)
{
    int r = renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE);
    if (r != 0 && (errno == EINVAL || errno == ENOSYS) && link(tmp, path) == 0) {
        unlink(tmp);
        r = 0;
    }
    if (r != 0)
        return vx_errf(err, errno == EEXIST ? VX_EARG : VX_EIO, "%s%scannot create '%s': %s",
                       what ? what : "", what ? ": " : "", path, strerror(errno));
    return 0;
}

int vx_publish_new(const char *tmp, const char *path, const char *what, vx_err *err)
{
    return rename_new(tmp, path, what, err) < 0 ? -1 : sync_parent(path, err);
}

int vx_afile_commit(vx_afile *f, vx_err *err)
{
    int rc = vx_afile_sync(f, err);
    /* replace: renamed over the old file; else renamed without replacing */
    if (rc == 0 && f->replace && rename(f->tmp, f->path) != 0)
        rc = vx_errf(err, VX_EIO, "%s%scannot replace '%s': %s", f->what ? f->what : "",
                     f->what ? ": " : "", f->path, strerror(errno));
    else if (rc == 0 && !f->replace)
        rc = rename_new(f->tmp, f->path, f->what, err);
    if (rc == 0) {
        f->tmp[0] = '\0';   /* renamed: nothing left to remove */
        rc = sync_parent(f->path, err);
    }
    vx_afile_abort(f);
    return rc;
}

int vx_atomic_file(const char *path, const void *data, size_t n, int replace, const char *what,
                   vx_err *err)
{
    vx_afile f;
    if (vx_afile_open(&f, path, replace, what, err) < 0 || vx_afile_write(&f, data, n, err) < 0) {
        vx_afile_abort(&f);
        return -1;
    }
    return vx_afile_commit(&f, err);
}
