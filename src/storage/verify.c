/*
 * verify.c — re-hashing a container against its records: every segment file (index.json
 * `segments[*].sha256`), every representation's payload (`payload_sha256`: the stored
 * tensor bytes in table order across its segments) and, when the source checkpoint is at
 * hand, the source tensors (`source_payload_sha256`, hashed by st_hash_sources). A
 * mismatch names the segment and, when the encoder recorded per-tensor hashes, the first
 * tensor whose bytes differ.
 */
#include "vindex.h"
#include "vx_int.h"
#include "st.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Keep the first failure in *err and the report; later ones only go to the report. */
static void fail(cJSON *report, vx_err *err, int *bad, int code, const char *msg)
{
    if (!*bad) {
        vx_errf(err, code, "%s", msg);
        cJSON_AddStringToObject(report, "error", msg);
    }
    *bad = 1;
}

/* The first tensor whose bytes differ from its recorded sha256, or NULL; *all_hashed
 * says whether every tensor had a hash to compare (so NULL means "not in a tensor"). */
static const char *first_bad_tensor(const vx_segment_view *v, int *all_hashed)
{
    const unsigned char *payload = (const unsigned char *)v->data + v->hdr->payload_off;
    *all_hashed = 1;
    for (size_t i = 0; i < v->hdr->n; i++) {
        const vx_seg_tensor *t = &v->hdr->t[i];
        if (!t->sha256) {
            *all_hashed = 0;
            continue;
        }
        char hex[65];
        vx_sha256_hex(payload + t->offset, (size_t)t->length, hex);
        if (strcmp(hex, t->sha256) != 0)
            return t->name;
    }
    return NULL;
}

static int check_segments(const vx_container *c, cJSON *report, vx_err *err, int *bad)
{
    const cJSON *recs = cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "segments"), *rec;
    cJSON *arr = cJSON_AddArrayToObject(report, "segments");
    char msg[2 * VX_ERR_MAX];
    cJSON_ArrayForEach(rec, recs) {
        const char *rel = rec->string, *want = vx_json_str(rec, "sha256");
        vx_segment_view v = {0};
        for (size_t i = 0; i < vx_segment_count(c); i++) {
            vx_segment_at(c, i, &v);
            if (strcmp(v.rel, rel) == 0)
                break;
            v.rel = NULL;
        }
        char hex[65] = "";
        cJSON *row = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, row);
        cJSON_AddStringToObject(row, "segment", rel);
        if (v.rel) {
            vx_sha256_ctx ctx;
            if (vx_sha256_init(&ctx, err) < 0)
                return -1;
            if (vx_sha256_mapped(&ctx, v.data, v.size, 1, "verify", err) < 0) {
                vx_sha256_free(&ctx);
                return -1;
            }
            vx_sha256_final(&ctx, hex);
            cJSON_AddNumberToObject(row, "bytes", (double)v.size);
        } else {
            /* Recorded but not used by any representation: hash the file itself. */
            char path[PATH_MAX];
            vx_err e2 = {0};
            if (vx_resolve(c, rel, path, sizeof path, &e2) < 0 ||
                vx_sha256_file(path, hex, &e2) < 0) {
                cJSON_AddStringToObject(row, "status", e2.msg);
                snprintf(msg, sizeof msg, "segment '%s': %s", rel, e2.msg);
                fail(report, err, bad, e2.code == VX_ECANCEL ? VX_ECANCEL : VX_EVERIFY, msg);
                if (e2.code == VX_ECANCEL)
                    return -1;
                continue;
            }
        }
        cJSON_AddStringToObject(row, "sha256", hex);
        cJSON_AddStringToObject(row, "recorded", want ? want : "");
        if (!want) {
            cJSON_AddStringToObject(row, "status", "unrecorded");
            snprintf(msg, sizeof msg, "segment '%s': index.json records no sha256", rel);
            fail(report, err, bad, VX_EVERIFY, msg);
        } else if (strcmp(hex, want) != 0) {
            int all = 0;
            const char *t = v.rel ? first_bad_tensor(&v, &all) : NULL;
            cJSON_AddStringToObject(row, "status", "encoded != recorded");
            if (t) {
                cJSON_AddStringToObject(row, "tensor", t);
                snprintf(msg, sizeof msg, "segment '%s': encoded != recorded (first differing tensor '%s')",
                         rel, t);
            } else if (all && v.rel) {
                snprintf(msg, sizeof msg,
                         "segment '%s': encoded != recorded (outside the tensors: every tensor matches its sha256)",
                         rel);
            } else {
                snprintf(msg, sizeof msg, "segment '%s': encoded != recorded (sha256 %.12s, recorded %.12s)",
                         rel, hex, want);
            }
            fail(report, err, bad, VX_EVERIFY, msg);
        } else {
            cJSON_AddStringToObject(row, "status", "ok");
        }
    }
    return 0;
}

/* The source tensors operand `name` reads per `bindings` (an object's source_bindings), in
 * the encoder's hashing order: the tensor (a string binding, or {"tensor": name, ...} when
 * sliced), then (packed MXFP4) its scales; NULL where there is none. */
static void binding_sources(const cJSON *bindings, const char *name, const char *out[2])
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(bindings, name);
    out[0] = cJSON_IsString(b) ? b->valuestring : vx_json_str(b, "tensor");
    out[1] = out[0] ? vx_json_str(b, "scales") : NULL;
}

int vx_source_hash(const vx_container *c, const char *object, const char *fidelity,
                   const vx_tensor *const *t, size_t n, char hex[65])
{
    const cJSON *bindings = cJSON_GetObjectItemCaseSensitive(
        vx_graph_object(vx_graph_json(c), object), "source_bindings");
    const char **names = calloc(2 * n + 1, sizeof *names);
    if (!names)
        return -1;
    /* whole: every operand is one source tensor's bytes, stored unchanged (then names[i]
     * is operand i's) */
    int whole = fidelity && strcmp(fidelity, "source-exact") == 0, ok = 0;
    size_t nn = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s[2];
        binding_sources(bindings, t[i]->name, s);
        whole = whole && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(bindings, t[i]->name));
        for (int k = 0; k < 2; k++)
            if (s[k])
                names[nn++] = s[k];
    }
    const char *dir = vx_json_str(cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "encoder"), "source");
    st_model *m = NULL;
    vx_err e = {0};
    if (dir && st_open_dir(dir, &m, &e) == 0) {
        ok = st_hash_sources(m, names, nn, hex, &e) == 0;
        st_close(m);
    }
    vx_sha256_ctx h;
    if (!ok && whole && vx_sha256_init(&h, &e) == 0) {
        for (size_t i = 0; i < n; i++) {
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++)
                seen = strcmp(names[i], names[j]) == 0;
            if (!seen)
                vx_sha256_update(&h, t[i]->data, (size_t)t[i]->nbytes);
        }
        vx_sha256_final(&h, hex);
        ok = 1;
    }
    free(names);
    return ok ? 0 : -1;
}

static int check_representation(const vx_container *c, const cJSON *obj, const char *rid,
                                const st_model *src, cJSON *row, cJSON *report, vx_err *err,
                                int *bad)
{
    const char *oid = vx_json_str(obj, "id");
    const cJSON *rep = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "representations"), rid);
    const cJSON *bindings = cJSON_GetObjectItemCaseSensitive(obj, "source_bindings");
    const char *want = vx_json_str(rep, "payload_sha256");
    const char *want_src = vx_json_str(rep, "source_payload_sha256");
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(rep, "segments"), *sp;
    char msg[2 * VX_ERR_MAX], hex[65];
    size_t nnames = 0, cap = 0;
    const char **names = NULL;
    vx_sha256_ctx ctx;
    if (vx_sha256_init(&ctx, err) < 0)
        return -1;
    int rc = 0;
    cJSON_ArrayForEach(sp, segs) {
        vx_segment_view v = {0};
        for (size_t i = 0; i < vx_segment_count(c) && !v.rel; i++) {
            vx_segment_at(c, i, &v);
            if (strcmp(v.rel, sp->valuestring) != 0)
                v.rel = NULL;
        }
        if (!v.rel)
            continue;
        const unsigned char *payload = (const unsigned char *)v.data + v.hdr->payload_off;
        for (size_t i = 0; i < v.hdr->n && rc == 0; i++) {
            const vx_seg_tensor *t = &v.hdr->t[i];
            rc = vx_sha256_mapped(&ctx, payload + t->offset, t->length, 1, "verify", err);
            const char *srcs[2];
            binding_sources(bindings, t->name, srcs);
            for (int k = 0; k < 2 && rc == 0 && srcs[0]; k++) {
                if (!srcs[k])
                    continue;
                if (nnames == cap) {
                    cap = cap ? 2 * cap : 64;
                    const char **nn = realloc(names, cap * sizeof *nn);
                    if (!nn) {
                        rc = vx_errf(err, VX_ENOMEM, "verify: out of memory");
                        break;
                    }
                    names = nn;
                }
                names[nnames++] = srcs[k];
            }
        }
        if (rc)
            break;
    }
    if (rc) {
        vx_sha256_free(&ctx);
        free(names);
        return -1;
    }
    vx_sha256_final(&ctx, hex);
    cJSON_AddStringToObject(row, "payload_sha256", hex);
    if (!want) {
        cJSON_AddStringToObject(row, "payload", "unrecorded");
    } else if (strcmp(hex, want) != 0) {
        cJSON_AddStringToObject(row, "payload", "encoded != recorded");
        snprintf(msg, sizeof msg, "representation '%s': payload encoded != recorded (object '%s')",
                 rid, oid);
        fail(report, err, bad, VX_EVERIFY, msg);
    } else {
        cJSON_AddStringToObject(row, "payload", "ok");
    }
    if (!src) {
        cJSON_AddStringToObject(row, "source", "not checked");
    } else if (!want_src) {
        cJSON_AddStringToObject(row, "source", "unrecorded");
    } else {
        vx_err e2 = {0};
        if (st_hash_sources(src, names, nnames, hex, &e2) < 0) {
            cJSON_AddStringToObject(row, "source", e2.msg);
            snprintf(msg, sizeof msg, "representation '%s': source != recorded (%s)", rid, e2.msg);
            fail(report, err, bad, VX_EVERIFY, msg);
        } else if (strcmp(hex, want_src) != 0) {
            cJSON_AddStringToObject(row, "source", "checkpoint != recorded");
            snprintf(msg, sizeof msg, "representation '%s': source != recorded (object '%s')", rid,
                     oid);
            fail(report, err, bad, VX_EVERIFY, msg);
        } else {
            cJSON_AddStringToObject(row, "source", "ok");
        }
    }
    free(names);
    return 0;
}

/* Chooses the source checkpoint: the caller's, else encoder.source when it still exists. */
static int open_source(const vx_container *c, const char *source_dir, st_model **src,
                       cJSON *report, vx_err *err)
{
    *src = NULL;
    const char *dir = source_dir;
    cJSON *s = cJSON_AddObjectToObject(report, "source");
    if (!dir) {
        dir = vx_json_str(cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "encoder"), "source");
        struct stat st;
        if (!dir || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
            cJSON_AddItemToObject(s, "dir", dir ? cJSON_CreateString(dir) : cJSON_CreateNull());
            cJSON_AddStringToObject(s, "status", dir ? "absent" : "not recorded");
            return 0;
        }
    }
    cJSON_AddStringToObject(s, "dir", dir);
    if (st_open_dir(dir, src, err) < 0) {
        cJSON_AddStringToObject(s, "status", "unreadable");
        return -1;
    }
    cJSON_AddStringToObject(s, "status", "checked");
    return 0;
}

/* Files index.json records a sha256 for outside the segments (browse/down_meta.bin). */
static int check_browse(const vx_container *c, cJSON *report, vx_err *err, int *bad)
{
    const cJSON *br = cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "browse");
    const char *rel = vx_json_str(br, "down_meta"), *want = vx_json_str(br, "down_meta_sha256");
    if (!rel || !want)
        return 0;
    char path[4096], hex[65], msg[4400];
    if (vx_resolve(c, rel, path, sizeof path, err) != 0 || vx_sha256_file(path, hex, err) != 0)
        return -1;
    cJSON *row = cJSON_AddObjectToObject(report, "browse");
    cJSON_AddStringToObject(row, "file", rel);
    cJSON_AddBoolToObject(row, "ok", strcmp(hex, want) == 0);
    if (strcmp(hex, want) != 0) {
        snprintf(msg, sizeof msg, "'%s': encoded != recorded (sha256 %s, index.json records %s)",
                 rel, hex, want);
        fail(report, err, bad, VX_EVERIFY, msg);
    }
    return 0;
}

/* One snapshot's row of the report from its check's outcome (rc, e): a failure other than
 * a mismatch or a missing file is verify's own error. */
static int snapshot_row(const char *name, int rc, const vx_err *e, cJSON **rows, cJSON *report,
                        vx_err *err, int *bad)
{
    if (!*rows)
        *rows = cJSON_AddArrayToObject(report, "snapshots");
    cJSON *row = cJSON_CreateObject();
    cJSON_AddItemToArray(*rows, row);
    cJSON_AddStringToObject(row, "file", name);
    cJSON_AddBoolToObject(row, "ok", rc == 0);
    if (rc < 0 && e->code != VX_EVERIFY && e->code != VX_EMISSING) {
        *err = *e;
        return -1;
    }
    if (rc < 0)
        fail(report, err, bad, VX_EVERIFY, e->msg);
    return 0;
}

/* Every snapshot index.json records a sha256 for, against it; where it records any, a
 * snapshot file it leaves out (added after the encode) fails too, and only those get a row. */
static int check_snapshots(const vx_container *c, cJSON *report, vx_err *err, int *bad)
{
    const cJSON *snaps = cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "snapshots"), *s;
    cJSON *rows = NULL;
    cJSON_ArrayForEach(s, snaps) {
        vx_err e = {0};
        if (s->string && snapshot_row(s->string, vx_snapshot_check(c, s->string, &e), &e, &rows,
                                      report, err, bad) < 0)
            return -1;
    }
    for (size_t i = 0; snaps && vx_hf_snapshots[i]; i++) {
        vx_err e = {0};
        if (cJSON_GetObjectItemCaseSensitive(snaps, vx_hf_snapshots[i]) ||
            vx_snapshot_check(c, vx_hf_snapshots[i], &e) == 0)
            continue;
        if (snapshot_row(vx_hf_snapshots[i], -1, &e, &rows, report, err, bad) < 0)
            return -1;
    }
    return 0;
}

int vx_verify(const char *dir, const char *source_dir, cJSON **report, vx_err *err)
{
    cJSON *r = cJSON_CreateObject();
    *report = r;
    if (!r)
        return vx_errf(err, VX_ENOMEM, "verify: out of memory");
    cJSON_AddStringToObject(r, "container", dir ? dir : "");
    vx_container *c = NULL;
    if (vx_open(dir, &c, err) < 0) {
        cJSON_AddBoolToObject(r, "ok", 0);
        cJSON_AddStringToObject(r, "error", err ? err->msg : "cannot open");
        return -1;
    }
    cJSON_AddStringToObject(r, "index_sha256", vx_index_sha256(c));
    int bad = 0, rc = 0;
    st_model *src = NULL;
    if (check_segments(c, r, err, &bad) < 0 || check_browse(c, r, err, &bad) < 0 ||
        check_snapshots(c, r, err, &bad) < 0 ||
        open_source(c, source_dir, &src, r, err) < 0) {
        rc = -1;
    } else {
        cJSON *reps = cJSON_AddArrayToObject(r, "representations");
        const cJSON *o, *rid;
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(vx_graph_json(c), "objects")) {
            cJSON_ArrayForEach(rid, cJSON_GetObjectItemCaseSensitive(o, "representations")) {
                cJSON *row = cJSON_CreateObject();
                cJSON_AddItemToArray(reps, row);
                cJSON_AddStringToObject(row, "representation", rid->valuestring);
                cJSON_AddStringToObject(row, "object", vx_json_str(o, "id"));
                if (check_representation(c, o, rid->valuestring, src, row, r, err, &bad) < 0) {
                    rc = -1;
                    break;
                }
            }
            if (rc)
                break;
        }
    }
    if (rc && !cJSON_GetObjectItemCaseSensitive(r, "error"))
        cJSON_AddStringToObject(r, "error", err ? err->msg : "verify failed");
    cJSON_AddBoolToObject(r, "ok", !bad && !rc);
    st_close(src);
    vx_close(c);
    return bad || rc ? -1 : 0;
}
