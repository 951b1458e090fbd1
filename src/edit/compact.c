/*
 * compact.c — COMPACT (compact.h): what a container's files are, decided from
 * what its metadata names; shard segments merged through the segment writer; the result
 * compared byte for byte with the source before it is published.
 */
#define _GNU_SOURCE   /* renameat2 */
#include "compact.h"
#include "compile.h"
#include "journal.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct strs {
    const char **v;
    size_t n, cap;
} strs;

static int strs_add(strs *s, const char *x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        const char **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

static int strs_has(const strs *s, const char *x)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], x) == 0)
            return 1;
    return 0;
}

/* Every string value under j: a file is referenced when its path is one of them. */
static int collect(const cJSON *j, strs *s)
{
    if (cJSON_IsString(j))
        return strs_add(s, j->valuestring);
    const cJSON *k;
    cJSON_ArrayForEach(k, j)
        if (collect(k, s))
            return -1;
    return 0;
}

typedef struct compact_ctx {
    vx_cw *cw;
    const strs *refs;          /* referenced paths */
    const strs *rewritten;     /* written anew */
    int carry_index;
    ed_compact_report *rep;
    vx_err *err;
} compact_ctx;

static int add_entry(ed_compact_report *rep, const char *path, uint64_t bytes,
                     const char *merged_into)
{
    ed_compact_entry *v = realloc(rep->entries, (rep->n_entries + 1) * sizeof *v);
    if (!v)
        return -1;
    rep->entries = v;
    ed_compact_entry *e = &v[rep->n_entries];
    e->path = strdup(path);
    e->merged_into = merged_into ? strdup(merged_into) : NULL;
    e->bytes = bytes;
    if (!e->path || (merged_into && !e->merged_into)) {
        free(e->path);
        free(e->merged_into);
        return -1;
    }
    rep->n_entries++;
    if (!merged_into) {
        rep->n_dropped++;
        rep->bytes_dropped += bytes;
    }
    return 0;
}

/* Carry a referenced regular file; name any other one in the report. */
static int visit(void *ctx, const char *rel, const char *src, const struct stat *sb)
{
    compact_ctx *w = ctx;
    if (strs_has(w->rewritten, rel))
        return 0;
    int referenced = strs_has(w->refs, rel);
    /* registered capability files: the snapshots the encoder copies and browse's label
     * files (COMPILE writes feature_labels.json), carried though no index field names them */
    for (size_t i = 0; vx_hf_snapshots[i]; i++)
        referenced |= strcmp(rel, vx_hf_snapshots[i]) == 0;
    for (size_t i = 0; brw_label_files[i]; i++)
        referenced |= strcmp(rel, brw_label_files[i]) == 0;
    if (strcmp(rel, "index.json") == 0) {
        if (!w->carry_index)
            return 0;   /* written anew */
        referenced = 1;
    }
    (void)src;
    if (referenced && S_ISREG(sb->st_mode)) {
        w->rep->files_carried++;
        return vx_cw_carry(w->cw, rel, w->err);
    }
    if (add_entry(w->rep, rel, (uint64_t)sb->st_size, NULL))
        return vx_errf(w->err, VX_ENOMEM, "compact: out of memory");
    return 0;
}

/* The mapped segment of c at container path rel, or -1. */
static int view_of(const vx_container *c, const char *rel, vx_segment_view *v)
{
    for (size_t i = 0; vx_segment_at(c, i, v) == 0; i++)
        if (strcmp(v->rel, rel) == 0)
            return 0;
    return -1;
}

/* Merge representation r's shards into one segment at its first shard's path when they
 * fit under the cap; *merged says whether it did. */
static int merge(const vx_container *c, vx_cw *cw, const char *id, cJSON *r,
                 cJSON *segs, strs *rewritten, ed_compact_report *rep, int *merged,
                 vx_err *err)
{
    *merged = 0;
    cJSON *list = cJSON_GetObjectItemCaseSensitive(r, "segments");
    int ns = cJSON_GetArraySize(list);
    const char *enc = vx_json_str(r, "encoding");
    if (ns < 2 || !enc || strcmp(enc, "tensor-table") != 0)
        return 0;
    vx_segment_view *v = calloc((size_t)ns, sizeof *v);
    size_t nt = 0;
    if (!v)
        return vx_errf(err, VX_ENOMEM, "compact: out of memory");
    for (int i = 0; i < ns; i++) {
        const cJSON *p = cJSON_GetArrayItem(list, i);
        if (!cJSON_IsString(p) || view_of(c, p->valuestring, &v[i])) {
            free(v);
            return 0;   /* a shard lql does not hold mapped: carried as it is */
        }
        nt += v[i].hdr->n;
    }
    vx_segw_tensor *t = calloc(nt ? nt : 1, sizeof *t);
    if (!t) {
        free(v);
        return vx_errf(err, VX_ENOMEM, "compact: out of memory");
    }
    size_t k = 0;
    for (int i = 0; i < ns; i++)
        for (size_t j = 0; j < v[i].hdr->n; j++, k++) {
            const vx_seg_tensor *x = &v[i].hdr->t[j];
            t[k].name = x->name;
            t[k].dtype = x->dtype;
            t[k].ndim = x->ndim;
            memcpy(t[k].shape, x->shape, sizeof t[k].shape);
        }
    size_t fit = 0;
    vx_err quiet = {0};
    int rc = 0;
    const char *first = v[0].rel;
    const char *object = v[0].hdr->object ? v[0].hdr->object : v[0].object;
    uint64_t cap;
    if (vx_shard_cap(&cap, err) < 0) {
        rc = -1;
        goto done;
    }
    if (vx_segw_fit(t, nt, cap, id, object, &fit, &quiet) || fit < nt)
        goto done;   /* over the cap: the shards stay as they are */
    vx_segw *w = NULL;
    if ((rc = vx_cw_segment(cw, first, object,
                            v[0].hdr->representation ? v[0].hdr->representation : id, t, nt,
                            &w, err)))
        goto done;
    for (int i = 0; i < ns && rc == 0; i++) {
        const unsigned char *payload = (const unsigned char *)v[i].data + v[i].hdr->payload_off;
        for (size_t j = 0; j < v[i].hdr->n && rc == 0; j++)
            rc = vx_segw_write(w, payload + v[i].hdr->t[j].offset,
                               (size_t)v[i].hdr->t[j].length, err);
    }
    char sha[65];
    uint64_t bytes = 0;
    if (rc) {
        vx_segw_abort(w);
        goto done;
    }
    if ((rc = vx_segw_close(w, sha, &bytes, err)))
        goto done;
    /* the index: one record for the merged segment, the shards' records gone */
    cJSON *rec = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(segs, first), 1);
    cJSON *one = cJSON_CreateArray();
    char *keep = strdup(first);
    if (!rec || !one || !keep || strs_add(rewritten, keep)) {
        cJSON_Delete(rec);
        cJSON_Delete(one);
        free(keep);
        rc = vx_errf(err, VX_ENOMEM, "compact: out of memory");
        goto done;
    }
    cJSON_ReplaceItemInObjectCaseSensitive(rec, "sha256", cJSON_CreateString(sha));
    cJSON_ReplaceItemInObjectCaseSensitive(rec, "bytes", cJSON_CreateNumber((double)bytes));
    for (int i = 0; i < ns && rc == 0; i++) {
        char *gone = i > 0 ? strdup(v[i].rel) : NULL;
        if (i > 0 && (!gone || add_entry(rep, v[i].rel, v[i].size, keep) ||
                      strs_add(rewritten, gone))) {
            free(gone);
            rc = vx_errf(err, VX_ENOMEM, "compact: out of memory");
        }
        cJSON_DeleteItemFromObjectCaseSensitive(segs, v[i].rel);
    }
    cJSON_AddItemToObject(segs, keep, rec);
    cJSON_AddItemToArray(one, cJSON_CreateString(keep));
    cJSON_ReplaceItemInObjectCaseSensitive(r, "segments", one);
    *merged = rc == 0;
done:
    free(t);
    free(v);
    return rc;
}

/* Every stored tensor of every segment of a must be in b, same representation and name,
 * same bytes. */
static int same_tensors(const vx_container *a, const vx_container *b, size_t *checked,
                        vx_err *err)
{
    vx_segment_view va, vb;
    for (size_t i = 0; vx_segment_at(a, i, &va) == 0; i++)
        for (size_t j = 0; j < va.hdr->n; j++) {
            const vx_seg_tensor *x = &va.hdr->t[j];
            const unsigned char *px = (const unsigned char *)va.data + va.hdr->payload_off +
                                      x->offset;
            int found = 0;
            for (size_t k = 0; !found && vx_segment_at(b, k, &vb) == 0; k++) {
                if (!va.representation || !vb.representation ||
                    strcmp(va.representation, vb.representation) != 0)
                    continue;
                for (size_t m = 0; m < vb.hdr->n && !found; m++) {
                    const vx_seg_tensor *y = &vb.hdr->t[m];
                    if (strcmp(x->name, y->name) != 0)
                        continue;
                    found = 1;
                    const unsigned char *py = (const unsigned char *)vb.data +
                                              vb.hdr->payload_off + y->offset;
                    if (y->length != x->length || y->dtype != x->dtype ||
                        memcmp(px, py, (size_t)x->length) != 0)
                        return vx_errf(err, VX_EFORMAT, "compact: tensor '%s' of "
                                       "representation '%s' differs after compaction",
                                       x->name, va.representation);
                }
            }
            if (!found)
                return vx_errf(err, VX_EFORMAT, "compact: tensor '%s' of representation '%s' "
                               "is missing after compaction", x->name, va.representation);
            (*checked)++;
        }
    return 0;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const ed_compact_entry *)a)->path, ((const ed_compact_entry *)b)->path);
}

int ed_compact(const vx_container *c, const char *out_dir, ed_compact_report *rep,
               vx_err *err)
{
    memset(rep, 0, sizeof *rep);
    vx_cw *cw = NULL;
    if (vx_cw_open(&cw, out_dir, vx_dir(c), "compact", err))
        return -1;
    cJSON *index = cJSON_Duplicate(vx_index_json(c), 1), *manifest = NULL;
    strs refs = {0}, rewritten = {0};
    vx_container *c2 = NULL;
    int rc = -1;
    if (!index) {
        vx_errf(err, VX_ENOMEM, "compact: out of memory");
        goto fail;
    }
    rep->segments_before = vx_segment_count(c);
    cJSON *segs = cJSON_GetObjectItemCaseSensitive(index, "segments"), *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(index, "representations")) {
        int merged = 0;
        if (merge(c, cw, r->string, r, segs, &rewritten, rep, &merged, err))
            goto fail;
        rep->reps_merged += (size_t)merged;
    }
    rep->index_rewritten = rep->reps_merged > 0;
    /* what the (new) metadata names */
    const char *mm = vx_json_str(index, "moe_manifest");
    if (mm) {
        char path[4200], *text = NULL;
        size_t n = 0;
        if (vx_resolve(c, mm, path, sizeof path, err) ||
            vx_read_small_file(path, "moe manifest", &text, &n, err) ||
            vx_json_parse(mm, text, n, &manifest, err)) {
            free(text);
            goto fail;
        }
        free(text);
    }
    if (collect(index, &refs) || collect(vx_graph_json(c), &refs) ||
        (manifest && collect(manifest, &refs))) {
        vx_errf(err, VX_ENOMEM, "compact: out of memory");
        goto fail;
    }
    compact_ctx w = {cw, &refs, &rewritten, !rep->index_rewritten, rep, err};
    if (vx_tree_files(vx_dir(c), visit, &w, err))
        goto fail;
    if (rep->index_rewritten) {
        if (vx_cw_index(cw, index, err))
            goto fail;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(index, "representations")) {
            const char *want = vx_json_str(r, "payload_sha256");
            char hex[65];
            if (!want || cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "segments")) != 1)
                continue;
            if (brw_payload_sha256(vx_cw_dir(cw), r, hex, err))
                goto fail;
            if (strcmp(hex, want) != 0) {
                vx_errf(err, VX_EFORMAT, "compact: representation '%s' payload hash changed "
                        "(%.16s… recorded, %.16s… after compaction)", r->string, want, hex);
                goto fail;
            }
        }
    }
    if (vx_open(vx_cw_dir(cw), &c2, err) || same_tensors(c, c2, &rep->tensors_checked, err))
        goto fail;
    rep->segments_after = vx_segment_count(c2);
    vx_close(c2);
    c2 = NULL;
    rc = vx_cw_commit(cw, err);
    cw = NULL;
    if (rc)
        goto fail;
    if (rep->n_entries)
        qsort(rep->entries, rep->n_entries, sizeof *rep->entries, by_path);
    rc = 0;
    goto done;
fail:
    vx_close(c2);
    vx_cw_abort(cw);
done:
    cJSON_Delete(index);
    cJSON_Delete(manifest);
    for (size_t i = 0; i < rewritten.n; i++)
        free((char *)rewritten.v[i]);
    free(refs.v);
    free(rewritten.v);
    return rc;
}

/* fsync the directory holding path, so a rename inside it survives a power loss. */
static int sync_parent(const char *path, vx_err *err)
{
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", path);
    for (size_t n = strlen(parent); n > 1 && parent[n - 1] == '/';)
        parent[--n] = '\0';
    char *slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == parent)
        slash[1] = '\0';
    else
        *slash = '\0';
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return vx_errf(err, VX_EIO, "compact: cannot sync directory '%s': %s", parent,
                       strerror(e));
    }
    close(fd);
    return 0;
}

static int exchange(const char *a, const char *b, vx_err *err)
{
    if (renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0) {
        int e = errno;
        if (e == EINVAL || e == ENOSYS)
            return vx_errf(err, VX_EUNSUPPORTED, "compact: the file system of '%s' cannot "
                           "exchange two directories atomically (renameat2 RENAME_EXCHANGE: "
                           "%s), so it cannot be compacted in place; compact it into another "
                           "path (COMPACT \"%s\" INTO VINDEX \"out\") and replace it yourself",
                           b, strerror(e), b);
        return vx_errf(err, VX_EIO, "compact: cannot exchange '%s' with its compacted copy: %s",
                       b, strerror(e));
    }
    return sync_parent(b, err);
}

int ed_compact_in_place(const char *dir, ed_compact_check check, void *ctx,
                        ed_compact_report *rep, vx_err *err)
{
    memset(rep, 0, sizeof *rep);
    char side[4200];
    if (snprintf(side, sizeof side, "%s.compact.%ld", dir, (long)getpid()) >= (int)sizeof side)
        return vx_errf(err, VX_EARG, "compact: path too long: '%s'", dir);
    vx_rmtree(side);
    vx_container *c = NULL;
    if (vx_open(dir, &c, err))
        return -1;
    int rc = ed_compact(c, side, rep, err);
    vx_close(c);
    if (rc)
        return -1;
    /* a merge rewrites index.json, whose sha256 keys the journal beside dir: its edits
     * could never be opened again */
    if (rep->index_rewritten && vx_journal_guard(dir, "compact: merging shards in place", err)) {
        vx_rmtree(side);
        return -1;
    }
    if (exchange(side, dir, err)) {
        vx_rmtree(side);
        return -1;
    }
    /* side is now the old tree: kept until the check passes, so a failure can swap back */
    if (check && check(ctx, err)) {
        vx_err first = *err, xe = {0};
        if (exchange(side, dir, &xe))
            return vx_errf(err, first.code, "%s; and the old container could not be put back "
                           "(%s): it is at '%s'", first.msg, xe.msg, side);
        vx_rmtree(side);
        return -1;
    }
    vx_rmtree(side);
    return 0;
}

void ed_compact_report_free(ed_compact_report *rep)
{
    for (size_t i = 0; i < rep->n_entries; i++) {
        free(rep->entries[i].path);
        free(rep->entries[i].merged_into);
    }
    free(rep->entries);
    memset(rep, 0, sizeof *rep);
}
