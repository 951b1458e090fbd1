/*
 * index.c — reading the container's JSON files: whole-file reads with a size cap, parsing
 * with a line:col position on malformed input, typed field getters, and index.json's
 * version check (the sole generation discriminator, judged before anything else is read).
 */
#include "vindex.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#include <utf8proc.h>

#define JSON_FILE_MAX (64ull << 20)   /* index / graph files are metadata, never this big */

FILE *vx_fopen_regular(const char *path, const char *label, vx_err *err)
{
    /* "label ('path')", or the path alone when the caller's label is the path */
    char what[VX_ERR_MAX];
    if (strcmp(label, path) == 0)
        snprintf(what, sizeof what, "'%s'", path);
    else
        snprintf(what, sizeof what, "%s ('%s')", label, path);
    /* O_NONBLOCK: a FIFO put where a file belongs opens at once (and is refused below)
     * instead of blocking until some writer appears; reads of a regular file ignore it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        vx_errf(err, errno == ENOENT ? VX_EMISSING : VX_EIO, "cannot open %s: %s", what,
                strerror(errno));
        return NULL;
    }
    struct stat st;
    FILE *f = NULL;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        vx_errf(err, VX_EIO, "%s is not a regular file", what);
    else if (!(f = fdopen(fd, "rb")))
        vx_errf(err, VX_ENOMEM, "cannot open %s: %s", what, strerror(errno));
    if (!f)
        close(fd);
    return f;
}

int vx_read_small_file(const char *path, const char *label, char **out, size_t *n, vx_err *err)
{
    *out = NULL;
    FILE *f = vx_fopen_regular(path, label, err);
    if (!f)
        return -1;
    struct stat st;
    if (fstat(fileno(f), &st) < 0) {
        fclose(f);
        return vx_errf(err, VX_EIO, "cannot stat %s ('%s'): %s", label, path, strerror(errno));
    }
    if ((uint64_t)st.st_size > JSON_FILE_MAX) {
        fclose(f);
        return vx_errf(err, VX_EFORMAT, "%s is too large (%lld bytes; limit %llu)", label,
                       (long long)st.st_size, JSON_FILE_MAX);
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        return vx_errf(err, VX_ENOMEM, "out of memory reading %s", label);
    }
    size_t got = fread(buf, 1, size, f);
    fclose(f);
    if (got != size) {
        free(buf);
        return vx_errf(err, VX_EIO, "short read on %s ('%s'): %zu of %zu bytes", label, path,
                       got, size);
    }
    buf[size] = '\0';
    *out = buf;
    *n = size;
    return 0;
}

size_t vx_utf8_bad_at(const char *t, size_t n)
{
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)t + i,
                                              (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0)
            return i;
        i += (size_t)k;
    }
    return (size_t)-1;
}

size_t vx_json_nul_at(const char *text, size_t n)
{
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (!in_str) {
            in_str = ch == '"';
        } else if (ch == '"') {
            in_str = 0;
        } else if (ch == 0) {
            return i;
        } else if (ch == '\\' && i + 1 < n) {
            if (text[i + 1] == 'u' && n - i >= 6 && memcmp(text + i + 2, "0000", 4) == 0)
                return i;
            i++;   /* the escaped character cannot end the string */
        }
    }
    return (size_t)-1;
}

size_t vx_json_too_deep(const char *text, size_t n)
{
    int in_str = 0;
    long depth = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = text[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == '[' || ch == '{') {
            if (++depth > CJSON_NESTING_LIMIT) return i;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    return (size_t)-1;
}

/* 1-based line and column of byte pos of text. */
static void line_col(const char *text, size_t pos, unsigned *line, unsigned *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

int vx_json_parse(const char *label, const char *text, size_t n, cJSON **out, vx_err *err)
{
    return vx_json_parse_as(label, text, n, 0, out, err);
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first object, depth first, that names one key twice, and that key; NULL when none
 * does (or memory ran out, *oom set). cJSON answers the first of two, other readers the
 * last: a container or checkpoint that says two things must not be read as either. */
static const cJSON *dup_key(const cJSON *o, const char **key, int *oom)
{
    if (cJSON_IsObject(o) && o->child && o->child->next) {
        size_t k = 0;
        for (const cJSON *c = o->child; c; c = c->next) k++;
        const char **names = malloc(k * sizeof *names);
        if (!names) {
            *oom = 1;
            return NULL;
        }
        k = 0;
        for (const cJSON *c = o->child; c; c = c->next) names[k++] = c->string ? c->string : "";
        qsort(names, k, sizeof *names, key_cmp);
        for (size_t i = 1; i < k && !*key; i++)
            if (strcmp(names[i - 1], names[i]) == 0) *key = names[i];
        free(names);
        if (*key) return o;
    }
    for (const cJSON *c = (cJSON_IsObject(o) || cJSON_IsArray(o)) ? o->child : NULL; c; c = c->next) {
        const cJSON *d = dup_key(c, key, oom);
        if (d || *oom) return d;
    }
    return NULL;
}

int vx_json_parse_as(const char *label, const char *text, size_t n, int nul_ok, cJSON **out,
                     vx_err *err)
{
    const char *end = NULL;
    unsigned line, col;
    *out = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!*out) {
        size_t deep = vx_json_too_deep(text, n);
        if (deep != (size_t)-1) {
            line_col(text, deep, &line, &col);
            return vx_errf(err, VX_EFORMAT, "%s: nested deeper than %d levels at line %u:%u "
                           "(the JSON reader's limit)", label, CJSON_NESTING_LIMIT, line, col);
        }
        line_col(text, end && end >= text && end <= text + n ? (size_t)(end - text) : n, &line,
                 &col);
        return vx_errf(err, VX_EFORMAT, "%s: malformed json at line %u:%u", label, line, col);
    }
    /* cJSON's strings end at their first NUL: one inside a name or value would silently
     * become a shorter one */
    size_t nul = nul_ok ? (size_t)-1 : vx_json_nul_at(text, (size_t)(end - text));
    if (nul != (size_t)-1) {
        cJSON_Delete(*out);
        *out = NULL;
        line_col(text, nul, &line, &col);
        return vx_errf(err, VX_EFORMAT, "%s: a string holds U+0000 at line %u:%u; names and "
                       "values cannot hold NUL", label, line, col);
    }
    /* Anything after the value other than whitespace is not JSON either. */
    for (const char *p = end; p && p < text + n; p++) {
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t' && *p != '\0') {
            cJSON_Delete(*out);
            *out = NULL;
            return vx_errf(err, VX_EFORMAT, "%s: trailing bytes after the json value (at byte %zu)",
                           label, (size_t)(p - text));
        }
    }
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return vx_errf(err, VX_EFORMAT, "%s: top level is not a json object", label);
    }
    /* a tokenizer.json's names may have been cut at a NUL into twins: its loader judges them */
    if (!nul_ok && vx_json_twice(label, *out, err) < 0) {
        cJSON_Delete(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

int vx_json_twice(const char *label, const cJSON *root, vx_err *err)
{
    const char *key = NULL;
    int oom = 0;
    const cJSON *twice = dup_key(root, &key, &oom);
    if (oom)
        return vx_errf(err, VX_ENOMEM, "%s: out of memory checking its keys", label);
    if (twice)
        return vx_errf(err, VX_EFORMAT, "%s: key '%.80s' appears twice in %s%.80s%s; a reader "
                       "cannot tell which value is meant", label, key,
                       twice == root ? "the top-level object" : twice->string ? "object '" : "an object in a list",
                       twice != root && twice->string ? twice->string : "",
                       twice != root && twice->string ? "'" : "");
    return 0;
}

int vx_json_u64(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return -1;
    double d = item->valuedouble;
    /* Doubles are exact integers only up to 2^53; refuse anything cJSON could not hold. */
    if (!(d >= 0 && d <= 9007199254740992.0) || floor(d) != d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

const char *vx_json_str(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

const char *vx_json_text(const cJSON *v, char *buf, size_t n)
{
    char *t = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(buf, n, "%s", !v ? "(missing)" : t ? t : "?");
    free(t);
    return buf;
}

int vx_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

cJSON *vx_graph_object(const cJSON *graph, const char *id)
{
    cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(graph, "objects")) {
        const char *oid = vx_json_str(o, "id");
        if (oid && strcmp(oid, id) == 0)
            return o;
    }
    return NULL;
}

/* Spell a JSON value briefly for an error message ("7", "\"4\"", "null"). */
static void spell(const cJSON *v, char *buf, size_t n)
{
    if (cJSON_IsNumber(v))
        snprintf(buf, n, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(buf, n, "\"%.64s\"", v->valuestring);
    else if (cJSON_IsNull(v))
        snprintf(buf, n, "null");
    else if (cJSON_IsBool(v))
        snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else
        snprintf(buf, n, "%s", cJSON_IsArray(v) ? "an array" : "an object");
}

int vx_index_version(const cJSON *index, int *version, vx_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(index, "version");
    uint64_t n;
    char got[96];
    if (!v)
        return vx_errf(err, VX_EVERSION,
                       "index.json has no version; this lql reads VINDEX3 (versions %d-%d)",
                       VX_VERSION_MIN, VX_VERSION_MAX);
    if (vx_json_u64(v, &n) < 0) {
        spell(v, got, sizeof got);
        return vx_errf(err, VX_EVERSION,
                       "index.json version %s is not an integer; this lql reads VINDEX3 (versions %d-%d)",
                       got, VX_VERSION_MIN, VX_VERSION_MAX);
    }
    if (n == 1 || n == 2)
        return vx_errf(err, VX_EVERSION,
                       "index.json version %llu is VINDEX2; this lql reads VINDEX3 (versions %d-%d)",
                       (unsigned long long)n, VX_VERSION_MIN, VX_VERSION_MAX);
    if (n < VX_VERSION_MIN || n > VX_VERSION_MAX)
        return vx_errf(err, VX_EVERSION,
                       "index.json version %llu is not supported; this lql reads VINDEX3 (versions %d-%d)",
                       (unsigned long long)n, VX_VERSION_MIN, VX_VERSION_MAX);
    *version = (int)n;
    return 0;
}
