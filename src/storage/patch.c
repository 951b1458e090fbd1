/*
 * patch.c — edit operations (vx_op) and the .vlp patch file: JSON interchangeable with
 * the reference implementation, vectors as base64 of little-endian f32. Parsing treats
 * the file as hostile: every field is type-checked, every vector decoded strictly and
 * its length checked against the model's hidden size before anything is used.
 */
#include "journal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- small helpers */

static const char *const kind_names[VX_OP_KIND_COUNT] = {
    "insert", "update", "delete", "insert_knn", "delete_knn"
};

const char *vx_op_kind_name(vx_op_kind k)
{
    return (unsigned)k < VX_OP_KIND_COUNT ? kind_names[k] : NULL;
}

int vx_op_kind_parse(const char *name, vx_op_kind *out)
{
    for (int k = 0; name && k < VX_OP_KIND_COUNT; k++)
        if (strcmp(name, kind_names[k]) == 0) {
            *out = (vx_op_kind)k;
            return 0;
        }
    return -1;
}

void vx_utc_now(char buf[32])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int host_is_le(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

void vx_f32_store_le(uint8_t *dst, const float *src, size_t n)
{
    if (host_is_le()) {
        memcpy(dst, src, n * 4);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        dst[4 * i] = (uint8_t)u;
        dst[4 * i + 1] = (uint8_t)(u >> 8);
        dst[4 * i + 2] = (uint8_t)(u >> 16);
        dst[4 * i + 3] = (uint8_t)(u >> 24);
    }
}

void vx_f32_load_le(float *dst, const uint8_t *src, size_t n)
{
    if (host_is_le()) {
        memcpy(dst, src, n * 4);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = src + 4 * i;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24;
        memcpy(&dst[i], &u, 4);
    }
}

/* ---------------------------------------------------------------- operations */

void vx_op_init(vx_op *op, vx_op_kind kind)
{
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->layer = op->feature = op->expert = -1;
    op->confidence = op->alpha = op->meta_c = NAN;
    op->target_id = op->meta_id = -1;
}

void vx_op_clear(vx_op *op)
{
    free(op->entity);
    free(op->relation);
    free(op->target);
    free(op->mode);
    free(op->reason);
    free(op->meta_token);
    for (int i = 0; i < op->nvec; i++)
        free(op->vec[i].data);
    vx_op_init(op, op->kind);
}

void vx_ops_free(vx_op *ops, size_t n)
{
    for (size_t i = 0; ops && i < n; i++)
        vx_op_clear(&ops[i]);
    free(ops);
}

static int valid_role(const char *role)
{
    static const char *const roles[] = {"gate", "up", "down", "key", "u", "v"};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(role, roles[i]) == 0)
            return 1;
    return 0;
}

int vx_op_set_vec(vx_op *op, const char *role, int64_t rows, int64_t cols, const float *data,
                  vx_err *err)
{
    if (!role || !valid_role(role))
        return vx_errf(err, VX_EARG, "unknown vector role '%s' (gate, up, down, key, u, v)",
                       role ? role : "(null)");
    if (rows < 1 || cols < 1 || rows > (1 << 28) || cols > (1 << 28) ||
        rows * cols > (1 << 28))
        return vx_errf(err, VX_EARG, "vector '%s' has a bad shape [%lld, %lld]", role,
                       (long long)rows, (long long)cols);
    int slot = -1;
    for (int i = 0; i < op->nvec; i++)
        if (strcmp(op->vec[i].role, role) == 0)
            slot = i;
    if (slot < 0 && op->nvec == VX_OP_MAX_VECS)
        return vx_errf(err, VX_EARG, "operation carries more than %d vectors", VX_OP_MAX_VECS);
    size_t bytes = (size_t)(rows * cols) * sizeof(float);
    float *copy = malloc(bytes);
    if (!copy)
        return vx_errf(err, VX_ENOMEM, "out of memory copying vector '%s' (%zu bytes)", role,
                       bytes);
    memcpy(copy, data, bytes);
    if (slot < 0) {
        slot = op->nvec++;
    } else {
        free(op->vec[slot].data);
    }
    snprintf(op->vec[slot].role, sizeof op->vec[slot].role, "%s", role);
    op->vec[slot].rows = rows;
    op->vec[slot].cols = cols;
    op->vec[slot].data = copy;
    return 0;
}

const vx_opvec *vx_op_vec(const vx_op *op, const char *role)
{
    for (int i = 0; i < op->nvec; i++)
        if (strcmp(op->vec[i].role, role) == 0)
            return &op->vec[i];
    return NULL;
}

int vx_op_set_str(char **field, const char *s, vx_err *err)
{
    char *copy = NULL;
    if (s && !(copy = strdup(s)))
        return vx_errf(err, VX_ENOMEM, "out of memory");
    free(*field);
    *field = copy;
    return 0;
}

int vx_op_copy(vx_op *dst, const vx_op *src, vx_err *err)
{
    *dst = *src;
    dst->entity = dst->relation = dst->target = dst->mode = dst->reason = NULL;
    dst->meta_token = NULL;
    dst->nvec = 0;
    if (vx_op_set_str(&dst->entity, src->entity, err) ||
        vx_op_set_str(&dst->relation, src->relation, err) ||
        vx_op_set_str(&dst->target, src->target, err) ||
        vx_op_set_str(&dst->mode, src->mode, err) ||
        vx_op_set_str(&dst->reason, src->reason, err) ||
        vx_op_set_str(&dst->meta_token, src->meta_token, err))
        goto fail;
    for (int i = 0; i < src->nvec; i++)
        if (vx_op_set_vec(dst, src->vec[i].role, src->vec[i].rows, src->vec[i].cols,
                          src->vec[i].data, err))
            goto fail;
    return 0;
fail:
    vx_op_clear(dst);
    return -1;
}

/* ---------------------------------------------------------------- base64 */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *vx_base64_encode(const void *data, size_t n)
{
    const uint8_t *p = data;
    if (n > (SIZE_MAX / 4) * 3 - 3)
        return NULL;
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        *o++ = b64_alphabet[v >> 18 & 63];
        *o++ = b64_alphabet[v >> 12 & 63];
        *o++ = i + 1 < n ? b64_alphabet[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? b64_alphabet[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(b64_alphabet, c) : NULL;
    return p ? (int)(p - b64_alphabet) : -1;
}

int vx_base64_decode(const char *text, size_t len, uint8_t **out, size_t *outn, vx_err *err)
{
    *out = NULL;
    *outn = 0;
    if (len % 4)
        return vx_errf(err, VX_EFORMAT, "bad base64: length %zu is not a multiple of 4", len);
    size_t pad = 0;
    if (len && text[len - 1] == '=')
        pad = len >= 2 && text[len - 2] == '=' ? 2 : 1;
    uint8_t *buf = malloc(len / 4 * 3 + 1);
    if (!buf)
        return vx_errf(err, VX_ENOMEM, "out of memory decoding base64 (%zu chars)", len);
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            size_t at = i + (size_t)k;
            if (text[at] == '=' && at >= len - pad) {
                v[k] = 0;
                continue;
            }
            v[k] = b64_value(text[at]);
            if (v[k] < 0) {
                free(buf);
                return vx_errf(err, VX_EFORMAT, "bad base64: character '%c' at offset %zu",
                               text[at] >= 32 && text[at] < 127 ? text[at] : '?', at);
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        buf[o++] = (uint8_t)(w >> 16);
        buf[o++] = (uint8_t)(w >> 8);
        buf[o++] = (uint8_t)w;
    }
    *out = buf;
    *outn = o - pad;
    return 0;
}

/* ---------------------------------------------------------------- .vlp parsing */

typedef struct parse_ctx {
    const char *where;
    int hidden;
    size_t index;            /* operation index (1-based) being parsed, 0 for the header */
    const char *op;          /* its op name */
    vx_err *err;
} parse_ctx;

static int perr(parse_ctx *c, int code, const char *fmt, const char *a, const char *b)
{
    char what[VX_ERR_MAX + 128];
    snprintf(what, sizeof what, fmt, a, b ? b : "");
    if (c->index)
        return vx_errf(c->err, code, "%s: operation %zu (%s): %s", c->where, c->index,
                       c->op ? c->op : "?", what);
    return vx_errf(c->err, code, "%s: %s", c->where, what);
}

/* The value of a required (req = 1) or optional field: *v NULL when it is absent or null
 * (an error when required). */
static int field(parse_ctx *c, const cJSON *o, const char *key, int req, const cJSON **v)
{
    *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (*v && cJSON_IsNull(*v))
        *v = NULL;
    if (!*v && req)
        return perr(c, VX_EFORMAT, "missing field '%s'", key, NULL);
    return 0;
}

/* A string field's text (borrowed from the JSON), NULL when absent or null. */
static int string_field(parse_ctx *c, const cJSON *o, const char *key, int req,
                        const char **out)
{
    const cJSON *v;
    *out = NULL;
    if (field(c, o, key, req, &v))
        return -1;
    if (v && !cJSON_IsString(v))
        return perr(c, VX_EFORMAT, "field '%s' must be a string", key, NULL);
    *out = v ? v->valuestring : NULL;
    return 0;
}

/* A string field copied: absent/null gives NULL. */
static int get_str(parse_ctx *c, const cJSON *o, const char *key, int req, char **out)
{
    const char *z;
    *out = NULL;
    if (string_field(c, o, key, req, &z))
        return -1;
    if (z && !(*out = strdup(z)))
        return vx_errf(c->err, VX_ENOMEM, "out of memory");
    return 0;
}

/* A non-negative integer below max; absent gives -1 when optional. */
static int get_uint(parse_ctx *c, const cJSON *o, const char *key, int req, double max,
                    int64_t *out)
{
    const cJSON *v;
    *out = -1;
    if (field(c, o, key, req, &v))
        return -1;
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= max ||
        v->valuedouble != floor(v->valuedouble))
        return perr(c, VX_EFORMAT, "field '%s' must be a non-negative integer%s", key,
                    max < 3e9 ? " below 2^31" : "");
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int get_num(parse_ctx *c, const cJSON *o, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = NAN;
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return perr(c, VX_EFORMAT, "field '%s' must be a finite number", key, NULL);
    *out = v->valuedouble;
    return 0;
}

/* Decode "<role>_vector_b64" into op (absent is fine unless req). Feature vectors must
 * hold exactly hidden floats; u/v take their shape from "<role>_shape". */
static int get_vec(parse_ctx *c, const cJSON *o, const char *role, int req, vx_op *op)
{
    char key[32], skey[32];
    snprintf(key, sizeof key, "%s_vector_b64", role);
    snprintf(skey, sizeof skey, "%s_shape", role);
    const char *z;
    if (string_field(c, o, key, req, &z))
        return -1;
    if (!z)
        return 0;
    uint8_t *bytes;
    size_t n;
    vx_err sub;
    if (vx_base64_decode(z, strlen(z), &bytes, &n, &sub))
        return perr(c, sub.code, "%s: %s", key, sub.msg);
    int rc = -1;
    float *f = NULL;
    char msg[160];
    int64_t rows = 1, cols = (int64_t)(n / 4);
    if (n % 4) {
        snprintf(msg, sizeof msg, "holds %zu bytes, not a whole number of f32", n);
        perr(c, VX_EFORMAT, "%s %s", key, msg);
        goto done;
    }
    if (strcmp(role, "u") == 0 || strcmp(role, "v") == 0 ||
        (strcmp(role, "key") == 0 && op->kind == VX_OP_INSERT)) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, skey);
        if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) != 2 ||
            !cJSON_IsNumber(cJSON_GetArrayItem(s, 0)) ||
            !cJSON_IsNumber(cJSON_GetArrayItem(s, 1))) {
            perr(c, VX_EFORMAT, "field '%s' must be [rows, cols]", skey, NULL);
            goto done;
        }
        double r = cJSON_GetArrayItem(s, 0)->valuedouble, k = cJSON_GetArrayItem(s, 1)->valuedouble;
        if (r < 1 || k < 1 || r > (1 << 28) || k > (1 << 28) || r * k != (double)(n / 4)) {
            snprintf(msg, sizeof msg, "holds %zu floats, not %s %.0f x %.0f", n / 4, skey, r, k);
            perr(c, VX_EFORMAT, "%s %s", key, msg);
            goto done;
        }
        rows = (int64_t)r;
        cols = (int64_t)k;
        if (c->hidden > 0 && strcmp(role, "u") == 0 && rows != c->hidden) {
            snprintf(msg, sizeof msg, "has %lld rows; the model's hidden size is %d",
                     (long long)rows, c->hidden);
            perr(c, VX_EFORMAT, "%s %s", key, msg);
            goto done;
        }
    } else if (c->hidden > 0 && cols != c->hidden) {
        snprintf(msg, sizeof msg, "holds %lld floats; the model's hidden size is %d",
                 (long long)cols, c->hidden);
        perr(c, VX_EFORMAT, "%s %s", key, msg);
        goto done;
    } else if (cols == 0) {
        perr(c, VX_EFORMAT, "%s is empty", key, NULL);
        goto done;
    }
    if (!(f = malloc((size_t)(rows * cols) * sizeof *f))) {
        vx_errf(c->err, VX_ENOMEM, "out of memory decoding %s", key);
        goto done;
    }
    vx_f32_load_le(f, bytes, (size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++)
        if (!isfinite(f[i])) {
            snprintf(msg, sizeof msg, "holds a non-finite value at index %lld", (long long)i);
            perr(c, VX_EFORMAT, "%s %s", key, msg);
            goto done;
        }
    rc = vx_op_set_vec(op, role, rows, cols, f, c->err);
done:
    free(f);
    free(bytes);
    return rc;
}

static int get_meta(parse_ctx *c, const cJSON *o, vx_op *op)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "down_meta");
    if (!m || cJSON_IsNull(m))
        return 0;
    if (!cJSON_IsObject(m))
        return perr(c, VX_EFORMAT, "field 'down_meta' must be an object {t, i, c}", NULL, NULL);
    const cJSON *c_ = cJSON_GetObjectItemCaseSensitive(m, "c");
    if (get_str(c, m, "t", 1, &op->meta_token) ||
        get_uint(c, m, "i", 1, 4294967296.0, &op->meta_id))
        return -1;
    if (!cJSON_IsNumber(c_) || !isfinite((float)c_->valuedouble))   /* stored as f32 */
        return perr(c, VX_EFORMAT, "field 'c' of down_meta must be a finite number (a 32-bit "
                    "float: at most 3.4e38 in magnitude)", NULL, NULL);
    op->meta_c = c_->valuedouble;
    op->has_meta = 1;
    return 0;
}

static int parse_op(parse_ctx *c, const cJSON *o, vx_op *op)
{
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "op");
    vx_op_kind kind;
    c->op = NULL;
    if (!cJSON_IsObject(o))
        return perr(c, VX_EFORMAT, "must be an object", NULL, NULL);
    if (!cJSON_IsString(k))
        return perr(c, VX_EFORMAT, "missing string field 'op'", NULL, NULL);
    if (vx_op_kind_parse(k->valuestring, &kind))
        return perr(c, VX_EFORMAT,
                    "unknown op '%s' (insert, update, delete, insert_knn, delete_knn)",
                    k->valuestring, NULL);
    c->op = vx_op_kind_name(kind);
    vx_op_init(op, kind);
    int64_t layer = -1, feature = -1;
    int slot = kind == VX_OP_INSERT || kind == VX_OP_UPDATE || kind == VX_OP_DELETE;
    if (kind != VX_OP_DELETE_KNN && get_uint(c, o, "layer", 1, 2147483648.0, &layer))
        return -1;
    /* an insert carrying a low-rank delta has no feature slot */
    if (slot && get_uint(c, o, "feature", kind != VX_OP_INSERT, 2147483648.0, &feature))
        return -1;
    op->layer = (int)layer;
    op->feature = (int)feature;
    switch (kind) {
    case VX_OP_INSERT:
        if (get_str(c, o, "entity", 1, &op->entity) || get_str(c, o, "target", 1, &op->target) ||
            get_str(c, o, "relation", 0, &op->relation) ||
            get_num(c, o, "confidence", &op->confidence) || get_num(c, o, "alpha", &op->alpha) ||
            get_str(c, o, "mode", 0, &op->mode))
            return -1;
        /* fall through - inserts carry the vectors and down_meta of updates */
    case VX_OP_UPDATE:
        if (get_vec(c, o, "gate", 0, op) || get_vec(c, o, "up", 0, op) ||
            get_vec(c, o, "down", 0, op) || get_vec(c, o, "u", 0, op) ||
            get_vec(c, o, "v", 0, op) || get_meta(c, o, op) ||
            (kind == VX_OP_INSERT && get_vec(c, o, "key", 0, op)))
            return -1;
        if (kind == VX_OP_INSERT && op->feature < 0 && !vx_op_vec(op, "u"))
            return perr(c, VX_EFORMAT, "missing field 'feature'", NULL, NULL);
        if (kind == VX_OP_INSERT && vx_op_vec(op, "u")) {
            int64_t expert = -1;
            if (get_uint(c, o, "expert", 0, 2147483648.0, &expert))
                return -1;
            op->expert = (int)expert;
        } else if (cJSON_GetObjectItemCaseSensitive(o, "expert")) {
            /* replay addresses an expert only through a low-rank delta: it was ignored */
            return perr(c, VX_EFORMAT, "'expert' belongs to a low-rank insert (u_vector_b64, "
                        "v_vector_b64); a feature of a MoE layer is numbered e x "
                        "expert_intermediate + f", NULL, NULL);
        }
        if (!vx_op_vec(op, "u") != !vx_op_vec(op, "v"))
            return perr(c, VX_EFORMAT, "u_vector_b64 and v_vector_b64 come together", NULL,
                        NULL);
        if (vx_op_vec(op, "u") && vx_op_vec(op, "u")->cols != vx_op_vec(op, "v")->cols)
            return perr(c, VX_EFORMAT, "u_shape and v_shape disagree on the rank", NULL, NULL);
        return 0;
    case VX_OP_DELETE:
        return get_str(c, o, "reason", 0, &op->reason);
    case VX_OP_INSERT_KNN:
        if (get_str(c, o, "entity", 1, &op->entity) ||
            get_str(c, o, "relation", 1, &op->relation) ||
            get_str(c, o, "target", 1, &op->target) ||
            get_uint(c, o, "target_id", 1, 4294967296.0, &op->target_id) ||
            get_num(c, o, "confidence", &op->confidence) || get_vec(c, o, "key", 1, op))
            return -1;
        return 0;
    case VX_OP_DELETE_KNN:
        return get_str(c, o, "entity", 1, &op->entity);
    default:
        return perr(c, VX_EFORMAT, "unknown op", NULL, NULL);
    }
}

int vx_patch_parse(const char *text, size_t len, const char *where, int hidden, vx_patch *out,
                   vx_err *err)
{
    memset(out, 0, sizeof *out);
    parse_ctx c = {where ? where : "patch", hidden, 0, NULL, err};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0, deep = vx_json_too_deep(text, len);
        if (deep != (size_t)-1)
            return vx_errf(err, VX_EFORMAT, "%s: nested deeper than %d levels (near byte %zu; the "
                           "JSON reader's limit)", c.where, CJSON_NESTING_LIMIT, deep);
        return vx_errf(err, VX_EFORMAT, "%s: not valid JSON (near byte %zu)", c.where, at);
    }
    for (const char *q = end; q < text + len; q++)
        if (*q != ' ' && *q != '\t' && *q != '\r' && *q != '\n') {
            cJSON_Delete(root);
            return vx_errf(err, VX_EFORMAT, "%s: text after the JSON object (near byte %zu)",
                           c.where, (size_t)(q - text));
        }
    size_t nul = vx_json_nul_at(text, (size_t)(end - text));
    if (nul != (size_t)-1) {
        cJSON_Delete(root);
        return vx_errf(err, VX_EFORMAT, "%s: a string holds U+0000 (near byte %zu); patch "
                       "strings cannot hold NUL", c.where, nul);
    }
    if (vx_json_twice(c.where, root, err) < 0) {
        cJSON_Delete(root);
        return -1;
    }
    int rc = -1;
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *tags = cJSON_GetObjectItemCaseSensitive(root, "tags");
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(root, "operations");
    if (!cJSON_IsObject(root)) {
        perr(&c, VX_EFORMAT, "the top level must be a JSON object", NULL, NULL);
        goto done;
    }
    if (!cJSON_IsNumber(ver)) {
        perr(&c, VX_EFORMAT, ver ? "field 'version' must be a number" : "missing numeric field 'version'",
             NULL, NULL);
        goto done;
    }
    if (ver->valuedouble != 1) {
        char v[32];
        snprintf(v, sizeof v, "%g", ver->valuedouble);
        perr(&c, VX_EVERSION, "unsupported patch version %s (lql reads version 1)", v, NULL);
        goto done;
    }
    out->version = 1;
    if (get_str(&c, root, "base_model", 1, &out->base_model) ||
        get_str(&c, root, "base_checksum", 0, &out->base_checksum) ||
        get_str(&c, root, "created_at", 1, &out->created_at) ||
        get_str(&c, root, "description", 0, &out->description) ||
        get_str(&c, root, "author", 0, &out->author))
        goto done;
    if (tags && !cJSON_IsNull(tags)) {
        if (!cJSON_IsArray(tags)) {
            perr(&c, VX_EFORMAT, "field 'tags' must be an array of strings", NULL, NULL);
            goto done;
        }
        size_t nt = (size_t)cJSON_GetArraySize(tags);
        if (nt && !(out->tags = calloc(nt, sizeof *out->tags))) {
            vx_errf(err, VX_ENOMEM, "out of memory");
            goto done;
        }
        const cJSON *t;
        cJSON_ArrayForEach(t, tags) {
            if (!cJSON_IsString(t)) {
                perr(&c, VX_EFORMAT, "field 'tags' must be an array of strings", NULL, NULL);
                goto done;
            }
            if (!(out->tags[out->ntags++] = strdup(t->valuestring))) {
                vx_errf(err, VX_ENOMEM, "out of memory");
                goto done;
            }
        }
    }
    if (!cJSON_IsArray(ops)) {
        perr(&c, VX_EFORMAT, ops ? "field 'operations' must be an array"
                                 : "missing array field 'operations'", NULL, NULL);
        goto done;
    }
    size_t n = (size_t)cJSON_GetArraySize(ops);
    if (n && !(out->ops = calloc(n, sizeof *out->ops))) {
        vx_errf(err, VX_ENOMEM, "out of memory (%zu operations)", n);
        goto done;
    }
    const cJSON *o;
    cJSON_ArrayForEach(o, ops) {
        c.index = out->nops + 1;
        int r = parse_op(&c, o, &out->ops[out->nops]);
        out->nops++;
        if (r)
            goto done;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc)
        vx_patch_free(out);
    return rc;
}

int vx_patch_read(const char *path, int hidden, vx_patch *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = vx_fopen_regular(path, "patch", err);
    if (!f)
        return -1;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            if (cap >= (size_t)1 << 31) {
                fclose(f);
                free(buf);
                return vx_errf(err, VX_EFORMAT, "patch '%s' is larger than 2 GiB", path);
            }
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                fclose(f);
                free(buf);
                return vx_errf(err, VX_ENOMEM, "out of memory reading patch '%s'", path);
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return vx_errf(err, VX_EIO, "cannot read patch '%s'", path);
    }
    int rc = vx_patch_parse(buf, n, path, hidden, out, err);
    free(buf);
    return rc;
}

void vx_patch_free(vx_patch *p)
{
    if (!p)
        return;
    free(p->base_model);
    free(p->base_checksum);
    free(p->created_at);
    free(p->description);
    free(p->author);
    for (size_t i = 0; i < p->ntags; i++)
        free(p->tags[i]);
    free(p->tags);
    vx_ops_free(p->ops, p->nops);
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------- .vlp writing */

static int add_str(cJSON *o, const char *key, const char *s)
{
    return !s || cJSON_AddStringToObject(o, key, s) ? 0 : -1;
}

static int add_num(cJSON *o, const char *key, double v)
{
    return isnan(v) || cJSON_AddNumberToObject(o, key, v) ? 0 : -1;
}

static int add_vec(cJSON *o, const vx_op *op, const char *role)
{
    const vx_opvec *v = vx_op_vec(op, role);
    if (!v)
        return 0;
    size_t nf = (size_t)(v->rows * v->cols);
    uint8_t *bytes = malloc(nf * 4);
    if (!bytes)
        return -1;
    vx_f32_store_le(bytes, v->data, nf);
    char *b64 = vx_base64_encode(bytes, nf * 4);
    free(bytes);
    char key[32];
    snprintf(key, sizeof key, "%s_vector_b64", role);
    int rc = b64 && cJSON_AddStringToObject(o, key, b64) ? 0 : -1;
    free(b64);
    if (rc == 0 && (strcmp(role, "u") == 0 || strcmp(role, "v") == 0 ||
                    (strcmp(role, "key") == 0 && op->kind == VX_OP_INSERT))) {
        const int shape[2] = {(int)v->rows, (int)v->cols};
        cJSON *s = cJSON_CreateIntArray(shape, 2);
        snprintf(key, sizeof key, "%s_shape", role);
        if (!s || !cJSON_AddItemToObject(o, key, s)) {
            cJSON_Delete(s);
            rc = -1;
        }
    }
    return rc;
}

static cJSON *op_json(const vx_op *op)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "op", vx_op_kind_name(op->kind)))
        goto fail;
    if (op->kind != VX_OP_DELETE_KNN && add_num(o, "layer", op->layer))
        goto fail;
    switch (op->kind) {
    case VX_OP_INSERT:
    case VX_OP_UPDATE:
        if (op->feature >= 0 && add_num(o, "feature", op->feature))
            goto fail;
        if (op->kind == VX_OP_INSERT &&
            (add_str(o, "relation", op->relation) || add_str(o, "entity", op->entity ? op->entity : "") ||
             add_str(o, "target", op->target ? op->target : "") ||
             add_num(o, "confidence", op->confidence) || add_num(o, "alpha", op->alpha) ||
             add_str(o, "mode", op->mode) || (op->expert >= 0 && add_num(o, "expert", op->expert))))
            goto fail;
        if (add_vec(o, op, "gate") || add_vec(o, op, "up") || add_vec(o, op, "down") ||
            add_vec(o, op, "u") || add_vec(o, op, "v") ||
            (op->kind == VX_OP_INSERT && add_vec(o, op, "key")))
            goto fail;
        if (op->has_meta) {
            cJSON *m = cJSON_AddObjectToObject(o, "down_meta");
            if (!m || add_str(m, "t", op->meta_token ? op->meta_token : "") ||
                add_num(m, "i", (double)op->meta_id) || add_num(m, "c", op->meta_c))
                goto fail;
        }
        break;
    case VX_OP_DELETE:
        if (add_num(o, "feature", op->feature) || add_str(o, "reason", op->reason))
            goto fail;
        break;
    case VX_OP_INSERT_KNN:
        if (add_str(o, "entity", op->entity ? op->entity : "") ||
            add_str(o, "relation", op->relation ? op->relation : "") ||
            add_str(o, "target", op->target ? op->target : "") ||
            add_num(o, "target_id", (double)op->target_id) ||
            add_num(o, "confidence", op->confidence) || add_vec(o, op, "key"))
            goto fail;
        break;
    case VX_OP_DELETE_KNN:
        if (add_str(o, "entity", op->entity ? op->entity : ""))
            goto fail;
        break;
    default:
        goto fail;
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

char *vx_patch_to_json(const vx_patch *p, vx_err *err)
{
    cJSON *root = cJSON_CreateObject(), *tags = NULL, *ops = NULL;
    char *text = NULL;
    if (!root || add_num(root, "version", 1) || add_str(root, "base_model", p->base_model ? p->base_model : "") ||
        add_str(root, "base_checksum", p->base_checksum) ||
        add_str(root, "created_at", p->created_at ? p->created_at : "") ||
        add_str(root, "description", p->description) || add_str(root, "author", p->author) ||
        !(tags = cJSON_AddArrayToObject(root, "tags")) ||
        !(ops = cJSON_AddArrayToObject(root, "operations")))
        goto done;
    for (size_t i = 0; i < p->ntags; i++) {
        cJSON *t = cJSON_CreateString(p->tags[i]);
        if (!t || !cJSON_AddItemToArray(tags, t)) {
            cJSON_Delete(t);
            goto done;
        }
    }
    for (size_t i = 0; i < p->nops; i++) {
        cJSON *o = op_json(&p->ops[i]);
        if (!o || !cJSON_AddItemToArray(ops, o)) {
            cJSON_Delete(o);
            goto done;
        }
    }
    text = cJSON_Print(root);
done:
    cJSON_Delete(root);
    if (!text)
        vx_errf(err, VX_ENOMEM, "out of memory serialising the patch");
    return text;
}

int vx_patch_write(const char *path, const vx_patch *p, vx_err *err)
{
    char *text = vx_patch_to_json(p, err);
    if (!text)
        return -1;
    size_t len = strlen(text);
    text[len] = '\n';   /* replaces the NUL: the file ends with a newline */
    /* linked into place: the complete file appears at once, and an existing one (even one
     * created since the caller checked) is never replaced */
    int rc = vx_atomic_file(path, text, len + 1, 0, "patch", err);
    free(text);
    return rc;
}
