/*
 * segment_write.c — writing one tensor-table segment file as a stream.
 *
 * Layout (docs/lql/CONTAINER.md): [u64 LE header length][header JSON, space padded so the
 * payload starts 64-byte aligned][payload, each tensor at a 64-aligned offset, zero
 * padding between]. The table is known before any payload byte, so the header is written
 * first with placeholder per-tensor sha256 fields; they have a fixed width (64 hex), so
 * patching in the real hashes at close leaves every offset unchanged. Memory use is one
 * 2 MiB write buffer, whatever the segment size. Every write() but the last is 2 MiB at a
 * 2 MiB-aligned file offset: the page cache then holds the file in 2 MiB folios, which a
 * reader's mapping (the engine's, straight after encode or COMPILE) maps with one TLB
 * entry each. Written in 1 MiB pieces, or copied in the kernel (copy_file_range), the same
 * bytes sat in small folios and decode streamed them 15% slower; the huge folios cost the
 * write more kernel time on the measured VM (ENCODE.md "Huge folios": both measured).
 *
 * Also the two steps every writer of segments shares (encoder, representation adder,
 * bank importer): recording a written file in index.json's "segments", and removing a
 * temporary container directory when a write fails.
 */
#define _GNU_SOURCE   /* nftw, sync_file_range */
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define WBUF (2u << 20)       /* the huge folio size; see above */
#define KICK (64u << 20)      /* writeback started every KICK bytes (sync_file_range) */

struct vx_segw {
    int fd;
    char *path;
    cJSON *hdr;                  /* the table, re-printed at close with the real hashes */
    uint64_t hlen;               /* padded header length (the u64 prefix) */
    size_t n, cur;               /* tensors; the one being written */
    uint64_t *off, *len;         /* payload-relative */
    uint64_t pos;                /* payload bytes emitted so far (incl. padding) */
    uint64_t done;               /* bytes of tensor `cur` written */
    vx_sha256_ctx th;            /* hash of tensor `cur` */
    vx_hasher *hs;               /* feeds th beside the write, or NULL (inline) */
    char (*hex)[65];
    unsigned char *buf;
    size_t nbuf;
    uint64_t flushed, kicked;    /* file bytes written / handed to writeback */
};

static const char zero_hex[] =
    "0000000000000000000000000000000000000000000000000000000000000000";

uint64_t vx_segw_header_bound(const vx_segw_tensor *t, size_t n)
{
    uint64_t b = 512 + 64;
    for (size_t i = 0; i < n; i++)
        b += strlen(t[i].name) + 320;
    return b;
}

int vx_shard_cap(uint64_t *cap, vx_err *err)
{
    const char *z = getenv("LQL_SHARD_CAP");
    *cap = 4ull << 30;
    if (!z || !*z)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(z, &end, 10);
    if (*end || v == 0 || errno || *z == '-' || *z == '+')
        return vx_errf(err, VX_EARG, "LQL_SHARD_CAP='%.64s' is not a positive number of bytes "
                       "(unset it for the 4 GiB default)", z);
    *cap = (uint64_t)v;
    return 0;
}

/* Bytes of a row-major tensor (0 when the dtype has no size for the shape). */
static uint64_t table_len(const vx_segw_tensor *t)
{
    uint64_t rows = 1, len = 0;
    for (int d = 0; d + 1 < t->ndim; d++)
        rows *= (uint64_t)t->shape[d];
    uint64_t inner = t->ndim ? (uint64_t)t->shape[t->ndim - 1] : 1;
    return vx_dtype_nbytes(t->dtype, inner, rows, &len) < 0 ? 0 : len;
}

int vx_segw_fit(const vx_segw_tensor *t, size_t n, uint64_t cap, const char *label,
                const char *object, size_t *k, vx_err *err)
{
    uint64_t base = vx_segw_header_bound(NULL, 0), hb = base, pay = 0;
    size_t i = 0;
    for (; i < n; i++) {
        uint64_t add = vx_segw_header_bound(&t[i], 1) - base, len = table_len(&t[i]);
        uint64_t size = 8 + hb + add + ((pay + 63) & ~(uint64_t)63) + len;
        if (size > cap) {
            if (i == 0)
                return vx_errf(err, VX_EARG, "%s: tensor '%s' of '%s' (%llu bytes) does not fit the "
                               "shard cap of %llu bytes (raise LQL_SHARD_CAP)", label, t[0].name,
                               object, (unsigned long long)len, (unsigned long long)cap);
            break;
        }
        hb += add;
        pay = ((pay + 63) & ~(uint64_t)63) + len;
    }
    *k = i;
    return 0;
}

/* Start writeback of what was written since the last kick: the disk works while the
 * writer hashes, and the fsync at close has less to wait for. */
static void kick(vx_segw *w, int all)
{
    if (w->flushed - w->kicked >= KICK || (all && w->flushed > w->kicked)) {
        sync_file_range(w->fd, (off_t)w->kicked, (off_t)(w->flushed - w->kicked),
                        SYNC_FILE_RANGE_WRITE);
        w->kicked = w->flushed;
    }
}

/* n bytes to the file at its end, writeback started as they accumulate. */
static int write_out(vx_segw *w, const void *p, size_t n, vx_err *err)
{
    if (vx_write_all(w->fd, p, n, NULL, w->path, err) < 0)
        return -1;
    w->flushed += n;
    kick(w, 0);
    return 0;
}

static int flush(vx_segw *w, vx_err *err)
{
    if (write_out(w, w->buf, w->nbuf, err) < 0)
        return -1;
    w->nbuf = 0;
    return 0;
}

static int put(vx_segw *w, const void *data, size_t n, vx_err *err)
{
    const unsigned char *p = data;
    while (n) {
        if (p && !w->nbuf && n >= WBUF) {
            /* whole buffers' worth straight from the caller's bytes: still aligned */
            size_t k = n & ~(size_t)(WBUF - 1);
            if (write_out(w, p, k, err) < 0)
                return -1;
            p += k;
            n -= k;
            continue;
        }
        size_t k = WBUF - w->nbuf < n ? WBUF - w->nbuf : n;
        if (p)
            memcpy(w->buf + w->nbuf, p, k);
        else
            memset(w->buf + w->nbuf, 0, k);
        w->nbuf += k;
        if (p)
            p += k;
        n -= k;
        if (w->nbuf == WBUF && flush(w, err) < 0)
            return -1;
    }
    return 0;
}

static char *print_header(vx_segw *w)
{
    cJSON *ts = cJSON_GetObjectItemCaseSensitive(w->hdr, "tensors"), *t;
    size_t i = 0;
    cJSON_ArrayForEach(t, ts) {
        cJSON_ReplaceItemInObjectCaseSensitive(t, "sha256", cJSON_CreateString(w->hex[i]));
        i++;
    }
    return cJSON_PrintUnformatted(w->hdr);
}

void vx_segw_abort(vx_segw *w)
{
    if (!w)
        return;
    vx_hasher_stop(w->hs);   /* a SIGBUS jump out of a write may have left it hashing */
    if (w->fd >= 0)
        close(w->fd);
    vx_sha256_free(&w->th);
    cJSON_Delete(w->hdr);
    free(w->path);
    free(w->off);
    free(w->len);
    free(w->hex);
    free(w->buf);
    free(w);
}

/* Start tensor `cur`: zero padding up to its offset and a fresh hash. */
static int begin(vx_segw *w, vx_err *err)
{
    if (w->cur >= w->n)
        return 0;
    if (put(w, NULL, (size_t)(w->off[w->cur] - w->pos), err) < 0)
        return -1;
    w->pos = w->off[w->cur];
    w->done = 0;
    return vx_sha256_init(&w->th, err);
}

int vx_segw_open(vx_segw **out, const char *path, const char *object, const char *representation,
                 const vx_segw_tensor *t, size_t n, vx_err *err)
{
    *out = NULL;
    vx_segw *w = calloc(1, sizeof *w);
    if (!w)
        return vx_errf(err, VX_ENOMEM, "segment writer: out of memory");
    w->fd = -1;
    w->n = n;
    w->path = strdup(path);
    w->off = calloc(n + 1, sizeof *w->off);
    w->len = calloc(n + 1, sizeof *w->len);
    w->hex = calloc(n + 1, sizeof *w->hex);
    w->buf = malloc(WBUF);
    w->hdr = cJSON_CreateObject();
    if (!w->path || !w->off || !w->len || !w->hex || !w->buf || !w->hdr) {
        vx_segw_abort(w);
        return vx_errf(err, VX_ENOMEM, "segment writer: out of memory");
    }
    cJSON_AddStringToObject(w->hdr, "schema", "tensor-table");
    cJSON_AddNumberToObject(w->hdr, "version", 1);
    cJSON_AddStringToObject(w->hdr, "object", object);
    cJSON_AddStringToObject(w->hdr, "representation", representation);
    cJSON *ts = cJSON_AddArrayToObject(w->hdr, "tensors");
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        /* The reader refuses empty tensors and more than VX_MAX_DIMS dimensions; so does
         * the writer, before a byte is written. */
        int ok = t[i].ndim >= 1 && t[i].ndim <= VX_MAX_DIMS;
        for (int d = 0; ok && d < t[i].ndim; d++)
            ok = t[i].shape[d] > 0;
        if (!ok) {
            vx_segw_abort(w);
            return vx_errf(err, VX_EARG, "segment '%s': tensor '%s' needs 1-%d positive dimensions",
                           path, t[i].name, VX_MAX_DIMS);
        }
        uint64_t rows = 1;
        for (int d = 0; d + 1 < t[i].ndim; d++)
            rows *= (uint64_t)t[i].shape[d];
        uint64_t inner = t[i].ndim ? (uint64_t)t[i].shape[t[i].ndim - 1] : 1;
        if (vx_dtype_nbytes(t[i].dtype, inner, rows, &w->len[i]) < 0) {
            vx_segw_abort(w);
            return vx_errf(err, VX_EARG, "segment '%s': tensor '%s' has no byte size", path, t[i].name);
        }
        w->off[i] = at;
        at = (at + w->len[i] + 63) & ~(uint64_t)63;
        memcpy(w->hex[i], zero_hex, 65);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", t[i].name);
        cJSON_AddStringToObject(e, "dtype", vx_dtype_name(t[i].dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON_AddNumberToObject(e, "offset", (double)w->off[i]);
        cJSON_AddNumberToObject(e, "length", (double)w->len[i]);
        cJSON_AddStringToObject(e, "sha256", zero_hex);
        cJSON_AddItemToArray(ts, e);
    }
    char *z = cJSON_PrintUnformatted(w->hdr);
    if (!z) {
        vx_segw_abort(w);
        return vx_errf(err, VX_ENOMEM, "segment writer: out of memory");
    }
    uint64_t raw = strlen(z);
    w->hlen = ((8 + raw + 63) & ~(uint64_t)63) - 8;
    w->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        free(z);
        vx_segw_abort(w);
        return vx_errf(err, VX_EIO, "cannot create segment '%s': %s", path, strerror(e));
    }
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(w->hlen >> (8 * i));
    int rc = put(w, le, 8, err);
    if (rc == 0)
        rc = put(w, z, (size_t)raw, err);
    free(z);
    for (uint64_t i = raw; rc == 0 && i < w->hlen; i++)
        rc = put(w, " ", 1, err);
    if (rc == 0)
        rc = begin(w, err);
    if (rc < 0) {
        vx_segw_abort(w);
        return -1;
    }
    w->hs = vx_hasher_start();
    *out = w;
    return 0;
}

/* Append n bytes of the current tensor(s), hashed as they pass. */
int vx_segw_write(vx_segw *w, const void *data, size_t n, vx_err *err)
{
    const unsigned char *p = data;
    /* every writer of segments (encode, REPRESENT, COMPILE, COMPACT) is cancellable here */
    if (vx_cancel_flag)
        return vx_errf(err, VX_ECANCEL, "segment '%s': cancelled", w->path);
    while (n) {
        if (w->cur >= w->n)
            return vx_errf(err, VX_EARG, "segment '%s': %zu bytes written past the last tensor",
                           w->path, n);
        uint64_t room = w->len[w->cur] - w->done;
        size_t k = room < n ? (size_t)room : n;
        /* the tensor's hash on the hasher's thread while this one copies and writes */
        vx_hasher_post(w->hs, &w->th, p, k);
        const int rc = put(w, p, k, err);
        if (vx_hasher_wait(w->hs) < 0 && rc == 0)
            return vx_errf(err, VX_EIO, "segment '%s': the bytes being written shrank under "
                           "their mapping (SIGBUS) while they were hashed", w->path);
        if (rc < 0)
            return -1;
        w->done += k;
        w->pos += k;
        p += k;
        n -= k;
        if (w->done == w->len[w->cur]) {
            vx_sha256_final(&w->th, w->hex[w->cur]);
            w->cur++;
            if (begin(w, err) < 0)
                return -1;
        }
    }
    return 0;
}

/* sha256 of the written file's first n bytes, read through a mapping (no copy). */
static int hash_file(vx_segw *w, uint64_t n, char sha[65], vx_err *err)
{
    void *map = mmap(NULL, (size_t)n, PROT_READ, MAP_SHARED, w->fd, 0);
    if (map == MAP_FAILED)
        return vx_errf(err, VX_EIO, "cannot map '%s': %s", w->path, strerror(errno));
    madvise(map, (size_t)n, MADV_SEQUENTIAL);
    vx_sha256_ctx h;
    int rc = vx_sha256_init(&h, err);
    if (rc == 0 && (rc = vx_sha256_mapped(&h, map, n, 1, w->path, err)) == 0)
        vx_sha256_final(&h, sha);
    else
        vx_sha256_free(&h);
    munmap(map, (size_t)n);
    return rc;
}

int vx_segw_close(vx_segw *w, char sha[65], uint64_t *bytes, vx_err *err)
{
    int rc = 0;
    if (w->cur < w->n)
        rc = vx_errf(err, VX_EARG, "segment '%s': tensor %zu of %zu is incomplete", w->path,
                     w->cur + 1, w->n);
    if (rc == 0)
        rc = flush(w, err);
    char *z = rc == 0 ? print_header(w) : NULL;
    if (rc == 0 && !z)
        rc = vx_errf(err, VX_ENOMEM, "segment '%s': out of memory adding the tensor hashes",
                     w->path);
    size_t zn = z ? strlen(z) : 0, put_n = 0;
    if (rc == 0 && zn > w->hlen)
        rc = vx_errf(err, VX_EIO, "segment '%s': header changed size when hashes were added", w->path);
    while (rc == 0 && put_n < zn) {
        ssize_t k = pwrite(w->fd, z + put_n, zn - put_n, (off_t)(8 + put_n));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            rc = vx_errf(err, VX_EIO, "cannot write '%s': %s", w->path,
                         k < 0 ? strerror(errno) : "short write");
        else
            put_n += (size_t)k;
    }
    free(z);
    /* the whole file hashed from the page cache while its writeback runs, then synced */
    kick(w, 1);
    *bytes = 8 + w->hlen + w->pos;
    if (rc == 0)
        rc = hash_file(w, *bytes, sha, err);
    if (rc == 0 && fsync(w->fd) < 0)
        rc = vx_errf(err, VX_EIO, "cannot sync '%s': %s", w->path, strerror(errno));
    vx_segw_abort(w);
    return rc;
}

void vx_shard_name(char *rel, size_t size, const char *stem, size_t index)
{
    if (index == 0)
        snprintf(rel, size, "segments/%s.bin", stem);
    else
        snprintf(rel, size, "segments/%s.%03zu.bin", stem, index);
}

void vx_segment_record(cJSON *segs, const char *rel, const char *schema, int version,
                       uint64_t bytes, const char *sha)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "schema", schema);
    cJSON_AddNumberToObject(s, "version", version);
    cJSON_AddNumberToObject(s, "bytes", (double)bytes);
    cJSON_AddStringToObject(s, "sha256", sha);
    cJSON_DeleteItemFromObjectCaseSensitive(segs, rel);
    cJSON_AddItemToObject(segs, rel, s);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void vx_rmtree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
