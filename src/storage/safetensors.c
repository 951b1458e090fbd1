/*
 * safetensors.c — reading Hugging Face safetensors checkpoints in place.
 *
 * Format: [u64 LE header length N][N bytes of JSON][data area]. The JSON maps tensor
 * names to {dtype, shape, data_offsets: [start, end]} relative to the data area, plus an
 * optional "__metadata__" object. Everything from the file is hostile until checked:
 * lengths and offsets are validated in 64-bit arithmetic before a pointer into the
 * mapping is formed, and each failure names the file, the tensor and the numbers.
 */
#include "st.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct shard {
    char *path;
    unsigned char *map;          /* whole file, PROT_READ; NULL for an empty file */
    uint64_t size;
} shard;

struct st_model {
    shard *sh;
    int nsh;
    st_tensor *t;                /* sorted by name */
    size_t n, cap;
};

#define MAX_EXACT 9007199254740992.0   /* 2^53: larger JSON numbers are not exact */

static int u64_of(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d < MAX_EXACT) || d != (double)(uint64_t)d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

/* safetensors spells dtypes in upper case; lql reads the float types it computes with
 * and the integer types vx_dtype can hold. BOOL (one byte per element, as old GPT-2
 * attention-mask buffers are stored) reads as u8. */
static int known_dtype(const char *z, vx_dtype *t)
{
    static const char *const ok[] = {"F32", "F16", "BF16", "I32", "I64", "U8"};
    if (strcmp(z, "BOOL") == 0) {
        *t = VX_U8;
        return 1;
    }
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (strcmp(z, ok[i]) == 0)
            return vx_dtype_parse(z, t) == 0;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int by_offset(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->file_offset < y->file_offset ? -1 : x->file_offset > y->file_offset;
}

static int push(st_model *m, vx_err *err)
{
    if (m->n < m->cap)
        return 0;
    size_t cap = m->cap ? 2 * m->cap : 64;
    st_tensor *t = realloc(m->t, cap * sizeof *t);
    if (!t)
        return vx_errf(err, VX_ENOMEM, "safetensors: out of memory for %zu tensors", cap);
    m->t = t;
    m->cap = cap;
    return 0;
}

/* Parse one tensor entry `it` of the header of `label` into m (appended). data is the
 * start of the data area, dsize its length, dbase its offset in the file. */
static int parse_entry(st_model *m, const cJSON *it, const char *label, const unsigned char *data,
                       uint64_t dsize, uint64_t dbase, int shard_i, vx_err *err)
{
    const char *name = it->string;
    if (!cJSON_IsObject(it))
        return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' is not a JSON object", label, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsString(dt))
        return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' has no string dtype", label, name);
    vx_dtype t;
    if (!known_dtype(dt->valuestring, &t))
        return vx_errf(err, VX_EUNSUPPORTED,
                       "'%s': tensor '%s' has dtype '%s', which lql does not read "
                       "(F32, F16, BF16, I32, I64, U8, BOOL)", label, name, dt->valuestring);
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > VX_MAX_DIMS)
        return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' shape is not an array of at most %d "
                       "dimensions", label, name, VX_MAX_DIMS);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' data_offsets is not [start, end]",
                       label, name);
    if (push(m, err) < 0)
        return -1;
    st_tensor *x = &m->t[m->n];
    memset(x, 0, sizeof *x);
    x->dtype = t;
    uint64_t elems = 1;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        uint64_t v;
        if (u64_of(d, &v) < 0 || v > INT64_MAX)
            return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' has a dimension that is not a "
                           "non-negative integer", label, name);
        if (__builtin_mul_overflow(elems, v, &elems))
            return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' element count overflows 64 bits",
                           label, name);
        x->shape[x->ndim++] = (int64_t)v;
    }
    uint64_t start, end, need;
    if (u64_of(cJSON_GetArrayItem(off, 0), &start) < 0 || u64_of(cJSON_GetArrayItem(off, 1), &end) < 0)
        return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' data_offsets are not non-negative "
                       "integers", label, name);
    if (vx_dtype_nbytes(t, elems, 1, &need) < 0)
        return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' byte size overflows 64 bits", label, name);
    if (end < start)
        return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' data_offsets [%llu, %llu] end before "
                       "they start", label, name, (unsigned long long)start, (unsigned long long)end);
    if (end > dsize)
        return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' data_offsets [%llu, %llu] extend past "
                       "the data area (%llu bytes)", label, name, (unsigned long long)start,
                       (unsigned long long)end, (unsigned long long)dsize);
    if (end - start != need)
        return vx_errf(err, VX_EFORMAT, "'%s': tensor '%s' shape and dtype %s need %llu bytes "
                       "but data_offsets span %llu", label, name, dt->valuestring,
                       (unsigned long long)need, (unsigned long long)(end - start));
    x->name = strdup(name);
    if (!x->name)
        return vx_errf(err, VX_ENOMEM, "safetensors: out of memory");
    x->data = data + start;
    x->nbytes = need;
    x->file_offset = dbase + start;
    x->shard = shard_i;
    m->n++;
    return 0;
}

/* Validate the header of one file image and append its tensors (from index `first` on). */
static int parse_image(st_model *m, const unsigned char *buf, uint64_t size, const char *label,
                       int shard_i, vx_err *err)
{
    if (size < 8)
        return vx_errf(err, VX_EFORMAT, "'%s': file is %llu bytes, too short for a safetensors "
                       "header", label, (unsigned long long)size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    if (hlen > ST_HEADER_MAX)
        return vx_errf(err, VX_EFORMAT, "'%s': header length %llu exceeds the %u-byte limit", label,
                       (unsigned long long)hlen, ST_HEADER_MAX);
    if (hlen > size - 8)
        return vx_errf(err, VX_EFORMAT, "'%s': header length %llu runs past end of file (%llu bytes)",
                       label, (unsigned long long)hlen, (unsigned long long)size);
    /* JSON text is UTF-8: a name with stray bytes would be some other name, missing later */
    size_t bad = vx_utf8_bad_at((const char *)buf + 8, (size_t)hlen);
    if (bad != (size_t)-1)
        return vx_errf(err, VX_EFORMAT, "'%s': header is not valid UTF-8 (byte %zu)", label,
                       bad + 8);
    const char *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts((const char *)buf + 8, (size_t)hlen, &end, 0);
    if (!h) {
        size_t deep = vx_json_too_deep((const char *)buf + 8, (size_t)hlen);
        if (deep != (size_t)-1)
            return vx_errf(err, VX_EFORMAT, "'%s': header nested deeper than %d levels (near byte "
                           "%llu; the JSON reader's limit)", label, CJSON_NESTING_LIMIT,
                           (unsigned long long)deep + 8);
        return vx_errf(err, VX_EFORMAT, "'%s': header is not valid JSON (near byte %lld)", label,
                       end ? (long long)(end - (const char *)buf) : -1LL);
    }
    if (!cJSON_IsObject(h)) {
        cJSON_Delete(h);
        return vx_errf(err, VX_EFORMAT, "'%s': header is not a JSON object", label);
    }
    size_t nul = vx_json_nul_at((const char *)buf + 8, (size_t)(end - (const char *)buf - 8));
    if (nul != (size_t)-1) {
        /* a tensor name cut at its NUL could pass for another tensor */
        cJSON_Delete(h);
        return vx_errf(err, VX_EFORMAT, "'%s': header holds a string with U+0000 (near byte "
                       "%zu); tensor names cannot hold NUL", label, nul + 8);
    }
    size_t first = m->n;
    const unsigned char *data = buf + 8 + hlen;
    uint64_t dsize = size - 8 - hlen;
    const cJSON *it;
    int rc = 0;
    cJSON_ArrayForEach(it, h) {
        if (strcmp(it->string, "__metadata__") == 0)
            continue;
        if ((rc = parse_entry(m, it, label, data, dsize, 8 + hlen, shard_i, err)) < 0)
            break;
    }
    cJSON_Delete(h);
    if (rc < 0)
        return -1;
    /* Overlap: sort this file's tensors by offset and compare neighbours (empty ones never
     * overlap anything). */
    size_t k = m->n - first;
    if (k < 2)
        return 0;
    const st_tensor **o = malloc(k * sizeof *o);
    if (!o)
        return vx_errf(err, VX_ENOMEM, "safetensors: out of memory");
    for (size_t i = 0; i < k; i++)
        o[i] = &m->t[first + i];
    qsort(o, k, sizeof *o, by_offset);
    const st_tensor *prev = NULL;
    for (size_t i = 0; i < k; i++) {
        if (!o[i]->nbytes)
            continue;
        if (prev && prev->file_offset + prev->nbytes > o[i]->file_offset) {
            rc = vx_errf(err, VX_EFORMAT, "'%s': tensors '%s' and '%s' overlap (bytes [%llu, %llu) "
                         "and [%llu, %llu) of the data area)", label, prev->name, o[i]->name,
                         (unsigned long long)(prev->file_offset - 8 - hlen),
                         (unsigned long long)(prev->file_offset + prev->nbytes - 8 - hlen),
                         (unsigned long long)(o[i]->file_offset - 8 - hlen),
                         (unsigned long long)(o[i]->file_offset + o[i]->nbytes - 8 - hlen));
            break;
        }
        prev = o[i];
    }
    free(o);
    return rc;
}

int st_check_image(const void *buf, uint64_t size, const char *label, vx_err *err)
{
    st_model m = {0};
    int rc = parse_image(&m, buf, size, label, 0, err);
    int n = (int)m.n;
    for (size_t i = 0; i < m.n; i++)
        free(m.t[i].name);
    free(m.t);
    return rc < 0 ? -1 : n;
}

/* mmap path as shard i of m. */
static int map_shard(st_model *m, const char *path, vx_err *err)
{
    shard *s = realloc(m->sh, (size_t)(m->nsh + 1) * sizeof *s);
    if (!s)
        return vx_errf(err, VX_ENOMEM, "safetensors: out of memory");
    m->sh = s;
    s = &m->sh[m->nsh];
    memset(s, 0, sizeof *s);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return vx_errf(err, VX_EIO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return vx_errf(err, VX_EIO, "'%s' is not a regular file", path);
    }
    s->size = (uint64_t)st.st_size;
    if (s->size) {
        void *p = mmap(NULL, (size_t)s->size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return vx_errf(err, VX_EIO, "cannot map '%s': %s", path, strerror(errno));
        }
        s->map = p;
    }
    close(fd);
    s->path = strdup(path);
    m->nsh++;
    if (!s->path)
        return vx_errf(err, VX_ENOMEM, "safetensors: out of memory");
    return 0;
}

void st_close(st_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->nsh; i++) {
        if (m->sh[i].map)
            munmap(m->sh[i].map, (size_t)m->sh[i].size);
        free(m->sh[i].path);
    }
    for (size_t i = 0; i < m->n; i++)
        free(m->t[i].name);
    free(m->sh);
    free(m->t);
    free(m);
}

static int add_file(st_model *m, const char *path, vx_err *err)
{
    if (map_shard(m, path, err) < 0)
        return -1;
    shard *s = &m->sh[m->nsh - 1];
    return parse_image(m, s->map, s->size, path, m->nsh - 1, err);
}

/* Sort by name and refuse a name seen twice (in one header or across shards). */
static int finish(st_model *m, vx_err *err)
{
    if (m->n)
        qsort(m->t, m->n, sizeof *m->t, by_name);
    for (size_t i = 1; i < m->n; i++)
        if (strcmp(m->t[i - 1].name, m->t[i].name) == 0)
            return vx_errf(err, VX_EFORMAT, "tensor '%s' appears twice (in '%s' and '%s')",
                           m->t[i].name, m->sh[m->t[i - 1].shard].path, m->sh[m->t[i].shard].path);
    return 0;
}

int st_open_file(const char *path, st_model **out, vx_err *err)
{
    *out = NULL;
    st_model *m = calloc(1, sizeof *m);
    if (!m)
        return vx_errf(err, VX_ENOMEM, "safetensors: out of memory");
    if (add_file(m, path, err) < 0 || finish(m, err) < 0) {
        st_close(m);
        return -1;
    }
    *out = m;
    return 0;
}

/* dir/name for a shard the weight_map names. Names are file names relative to the
 * checkpoint: absolute paths and ".." components are refused. Symlinks are followed, since
 * the Hugging Face cache links every snapshot file into a blobs directory. */
static int shard_path(const char *dir, const char *ipath, const char *name, char *out, size_t n,
                      vx_err *err)
{
    int dotdot = 0;
    for (const char *p = name; *p;) {
        size_t k = strcspn(p, "/");
        dotdot |= k == 2 && p[0] == '.' && p[1] == '.';
        p += k;
        while (*p == '/')
            p++;
    }
    if (!*name || name[0] == '/' || dotdot)
        return vx_errf(err, VX_EPATH, "'%s': shard '%s' is not a file name inside the checkpoint "
                       "directory", ipath, name);
    if ((size_t)snprintf(out, n, "%s/%s", dir, name) >= n)
        return vx_errf(err, VX_EARG, "'%s': shard path '%s' is too long", ipath, name);
    /* one file however the index spells it ("x", "./x", "a/../x" refused above) */
    char canon[PATH_MAX];
    if (realpath(out, canon) && strlen(canon) < n)
        memcpy(out, canon, strlen(canon) + 1);
    return 0;
}

/* Sharded checkpoint: open each shard the weight_map names (once), then check that every
 * mapped tensor lives in the shard that names it. */
static int open_index(st_model *m, const char *dir, const char *ipath, vx_err *err)
{
    char *text;
    size_t n;
    cJSON *idx;
    if (vx_read_small_file(ipath, "model.safetensors.index.json", &text, &n, err) < 0)
        return -1;
    int prc = vx_json_parse(ipath, text, n, &idx, err);
    free(text);
    if (prc < 0)
        return -1;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(idx);
        return vx_errf(err, VX_EFORMAT, "'%s': not a JSON object with a \"weight_map\" object", ipath);
    }
    int rc = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e)) {
            rc = vx_errf(err, VX_EFORMAT, "'%s': weight_map entry '%s' is not a file name", ipath,
                         e->string);
            break;
        }
        char path[PATH_MAX];
        if (shard_path(dir, ipath, e->valuestring, path, sizeof path, err) < 0) {
            rc = -1;
            break;
        }
        int seen = 0;
        for (int i = 0; i < m->nsh && !seen; i++)
            seen = strcmp(m->sh[i].path, path) == 0;
        if (seen)
            continue;
        if (access(path, R_OK) < 0) {
            rc = vx_errf(err, VX_EMISSING, "'%s': shard '%s' (holding tensor '%s') cannot be read: %s",
                         ipath, e->valuestring, e->string, strerror(errno));
            break;
        }
        if ((rc = add_file(m, path, err)) < 0)
            break;
    }
    if (rc == 0)
        rc = finish(m, err);
    if (rc == 0) {
        cJSON_ArrayForEach(e, wm) {
            const st_tensor *t = st_find(m, e->string);
            char path[PATH_MAX];
            if (shard_path(dir, ipath, e->valuestring, path, sizeof path, NULL) < 0 || !t ||
                strcmp(m->sh[t->shard].path, path) != 0) {
                rc = vx_errf(err, VX_EMISSING, "'%s': tensor '%s' is not in shard '%s'", ipath,
                             e->string, e->valuestring);
                break;
            }
        }
    }
    cJSON_Delete(idx);
    return rc;
}

/* A checkpoint path with no safetensors weights, named for what it holds when that tells the
 * user what to do: a file (a GGUF, say), or PyTorch pickles. */
static int no_weights(const char *dir, vx_err *err)
{
    char bin[PATH_MAX];
    if (vx_is_file(dir))
        return vx_errf(err, VX_EARG, "'%s' is a file, not a Hugging Face checkpoint directory "
                       "(config.json beside model.safetensors)", dir);
    int pt = (size_t)snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir) < sizeof bin &&
             (access(bin, F_OK) == 0 ||
              ((size_t)snprintf(bin, sizeof bin, "%s/pytorch_model.bin.index.json", dir) < sizeof bin &&
               access(bin, F_OK) == 0));
    return vx_errf(err, VX_EMISSING, "'%s' has neither model.safetensors nor "
                   "model.safetensors.index.json%s", dir,
                   pt ? " (it holds pytorch_model.bin: lql reads safetensors only; save the model "
                        "with transformers' save_pretrained(..., safe_serialization=True))"
                      : "");
}

int st_open_dir(const char *dir, st_model **out, vx_err *err)
{
    *out = NULL;
    char ipath[PATH_MAX], fpath[PATH_MAX];
    if ((size_t)snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir) >= sizeof ipath ||
        (size_t)snprintf(fpath, sizeof fpath, "%s/model.safetensors", dir) >= sizeof fpath)
        return vx_errf(err, VX_EARG, "checkpoint path '%s' is too long", dir);
    st_model *m = calloc(1, sizeof *m);
    if (!m)
        return vx_errf(err, VX_ENOMEM, "safetensors: out of memory");
    int rc;
    /* transformers' order: model.safetensors wins over an index beside it (a stale index
     * left next to a re-saved model must not pick the old shards) */
    if (access(fpath, F_OK) == 0)
        rc = add_file(m, fpath, err) < 0 ? -1 : finish(m, err);
    else if (access(ipath, F_OK) == 0)
        rc = open_index(m, dir, ipath, err);
    else
        rc = no_weights(dir, err);
    if (rc < 0) {
        st_close(m);
        return -1;
    }
    *out = m;
    return 0;
}

const st_tensor *st_find(const st_model *m, const char *name)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->t[mid].name, name);
        if (c == 0)
            return &m->t[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t st_count(const st_model *m)
{
    return m->n;
}

const st_tensor *st_at(const st_model *m, size_t i)
{
    return i < m->n ? &m->t[i] : NULL;
}

int st_shard_count(const st_model *m)
{
    return m->nsh;
}

void st_release(const void *p, uint64_t n)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (!p || !n || pg <= 0)
        return;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(pg - 1);
    uintptr_t b = ((uintptr_t)p + n + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    madvise((void *)a, b - a, MADV_DONTNEED);
}

#define HASH_CHUNK (8u << 20)

int st_hash_sources(const st_model *m, const char *const *names, size_t n, char hex[65], vx_err *err)
{
    unsigned char *done = calloc(m->n ? m->n : 1, 1);
    if (!done)
        return vx_errf(err, VX_ENOMEM, "safetensors: out of memory");
    vx_sha256_ctx ctx;
    if (vx_sha256_init(&ctx, err) < 0) {
        free(done);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = st_find(m, names[i]);
        if (!t) {
            vx_sha256_free(&ctx);
            free(done);
            return vx_errf(err, VX_EMISSING, "source tensor '%s' is not in the checkpoint", names[i]);
        }
        size_t k = (size_t)(t - m->t);
        if (done[k])
            continue;
        done[k] = 1;
        for (uint64_t o = 0; o < t->nbytes; o += HASH_CHUNK) {
            uint64_t len = t->nbytes - o < HASH_CHUNK ? t->nbytes - o : HASH_CHUNK;
            vx_sha256_update(&ctx, t->data + o, (size_t)len);
            st_release(t->data + o, len);
        }
    }
    free(done);
    vx_sha256_final(&ctx, hex);
    return 0;
}
