/*
 * patch.c — patches, UNDO and ROLLBACK on the effective model (edit.h): the journal's
 * patch calls, each followed by a replay when it changes what is active.
 */
#include "ed_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ed_begin_patch(ed_model *ed, const char *name, char *prev, size_t nprev, int64_t *taken,
                   vx_err *err)
{
    /* a name is typed back (REMOVE PATCH), printed in notes and is SAVE PATCH's default
     * file "<name>.vlp" in the current directory: it must survive all three unchanged */
    for (const char *c = name ? name : ""; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f || *c == '/')
            return vx_errf(err, VX_EARG, "patch name holds %s at byte %d: a name is typed back, "
                           "printed and saved as \"<name>.vlp\" here, so control characters "
                           "and '/' are not allowed", *c == '/' ? "'/'" : "a control character",
                           (int)(c - name));
    if (ed_journal_open(ed, 1, err))
        return -1;
    const char *was = vx_journal_recording_name(ed->j);
    snprintf(prev, nprev, "%s", was ? was : "");
    *taken = 0;
    return vx_journal_begin_patch(ed->j, name, taken, err);
}

void ed_patch_header(vx_patch *p, const vx_container *c, const char *description, char now[32])
{
    vx_utc_now(now);
    p->version = 1;
    p->base_model = (char *)ed_model_name(c);
    p->base_checksum = (char *)vx_index_sha256(c);
    p->created_at = now;
    p->description = (char *)description;
}

void ed_count_kinds(const vx_op *ops, size_t n, size_t c[VX_OP_KIND_COUNT])
{
    memset(c, 0, VX_OP_KIND_COUNT * sizeof *c);
    for (size_t i = 0; i < n; i++)
        if ((unsigned)ops[i].kind < VX_OP_KIND_COUNT)
            c[ops[i].kind]++;
}

int ed_save_patch(ed_model *ed, const char *file, size_t counts[VX_OP_KIND_COUNT],
                  vx_err *err)
{
    const char *name = ed->j ? vx_journal_recording_name(ed->j) : NULL;
    if (!name)
        return vx_errf(err, VX_EARG, "no patch is recording: BEGIN PATCH \"name\" or make an "
                       "edit first");
    vx_patch p = {0};
    if (vx_journal_patch_ops(ed->j, vx_journal_recording(ed->j), &p.ops, &p.nops, err))
        return -1;
    char now[32];
    ed_patch_header(&p, ed->c, name, now);
    int rc = vx_patch_write(file, &p, err);
    ed_count_kinds(p.ops, p.nops, counts);
    vx_ops_free(p.ops, p.nops);
    if (rc)
        return -1;
    vx_journal_stop_recording(ed->j);
    return 0;
}

/* The name an applied file takes: its description, else the file's stem. A name is typed
 * back (REMOVE PATCH "name") and printed in notes: control characters become spaces, and a
 * long description is cut at a character boundary. */
static void patch_name(const vx_patch *p, const char *file, char *out, size_t n)
{
    if (p->description && *p->description) {
        size_t k = 0;
        const char *d = p->description;
        for (; *d && k + 1 < n; d++)
            out[k++] = (unsigned char)*d < 0x20 || *d == 0x7f ? ' ' : *d;
        if (*d) {   /* cut: drop the last character, which may be cut too */
            while (k > 0 && ((unsigned char)out[k - 1] & 0xC0) == 0x80)
                k--;
            if (k > 0 && (unsigned char)out[k - 1] >= 0xC0)
                k--;
        }
        out[k] = 0;
        return;
    }
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    size_t len = strlen(base);
    if (len > 4 && strcmp(base + len - 4, ".vlp") == 0)
        len -= 4;
    snprintf(out, n, "%.*s", (int)len, base);
}

int ed_apply_patch(ed_model *ed, const char *file, const char *text, ed_apply_res *res,
                   vx_err *err)
{
    if (ed_journal_open(ed, 1, err))
        return -1;
    vx_patch p;
    if (vx_patch_read(file, brw_hidden(ed->bm), &p, err))
        return -1;
    const char *sha = vx_index_sha256(ed->c), *model = ed_model_name(ed->c);
    int rc = -1;
    /* the checksum, when the file has one, is the base's index sha256; else the model */
    if (p.base_checksum && strcmp(p.base_checksum, sha) != 0) {
        vx_errf(err, VX_EARG, "%s was made for another base: checksum %.16s... (model '%s') "
                "but the bound container's index sha256 is %.16s... (model '%s')", file,
                p.base_checksum, p.base_model, sha, model);
        goto done;
    }
    if (!p.base_checksum && strcmp(p.base_model, model) != 0) {
        vx_errf(err, VX_EARG, "%s was made for model '%s' but the bound container is model "
                "'%s'", file, p.base_model, model);
        goto done;
    }
    /* it would record an empty history entry and an applied patch of 0 operations */
    if (p.nops == 0) {
        vx_errf(err, VX_EARG, "%s holds no operations: nothing to apply", file);
        goto done;
    }
    for (size_t i = 0; i < p.nops; i++) {
        char where[300];
        snprintf(where, sizeof where, "%s: operation %zu", file, i + 1);
        if (ed_check_op(ed->bm, &p.ops[i], where, err))
            goto done;
    }
    patch_name(&p, file, res->name, sizeof res->name);
    int64_t existing;
    if (vx_journal_find_patch(ed->j, res->name, &existing, err) == 0) {
        vx_errf(err, VX_EARG, "a patch named '%s' is already applied (REMOVE PATCH \"%s\" "
                "first)", res->name, res->name);
        goto done;
    }
    memset(err, 0, sizeof *err);
    char *tags = NULL;
    cJSON *ta = cJSON_CreateStringArray((const char *const *)p.tags, (int)p.ntags);
    if (ta) {
        tags = cJSON_PrintUnformatted(ta);
        cJSON_Delete(ta);
    }
    vx_patch_meta meta = {res->name, p.description, p.author, tags, file};
    int ir = vx_journal_import(ed->j, text, &meta, p.ops, p.nops, NULL, &res->history_n, err);
    free(tags);
    if (ir || ed_refresh(ed, err))
        goto done;
    res->n_ops = p.nops;
    ed_count_kinds(p.ops, p.nops, res->counts);
    rc = 0;
done:
    vx_patch_free(&p);
    return rc;
}

int ed_remove_patch(ed_model *ed, const char *text, const char *name, vx_err *err)
{
    if (ed_journal_open(ed, 0, err))
        return -1;
    if (!ed->j)
        return ed->jpath ? vx_errf(err, VX_EARG, "no patch named '%s' (nothing has been "
                                   "edited: the journal %s does not exist)", name, ed->jpath)
                         : vx_errf(err, VX_EARG, "no patch named '%s' (nothing has been "
                                   "edited: %s)", name, ed->jerr);
    int64_t pid;
    return vx_journal_remove_patch(ed->j, text, name, &pid, err) || ed_refresh(ed, err) ? -1 : 0;
}

int ed_undo(ed_model *ed, int64_t *n, char **text, vx_err *err)
{
    *n = 0;
    *text = NULL;
    if (!ed->j)
        return 0;
    if (vx_journal_undo(ed->j, n, err))
        return -1;
    if (!*n)
        return 0;
    if (ed_refresh(ed, err))
        return -1;
    vx_history_entry *h;
    size_t nh;
    vx_err ve = {0};
    if (vx_journal_history(ed->j, &h, &nh, &ve) == 0) {
        /* the entry numbered n, for the caller's note */
        if (*n >= 1 && (size_t)*n <= nh && h[*n - 1].n == *n)
            *text = strdup(h[*n - 1].text);
        vx_history_free(h, nh);
    }
    return 0;
}

int ed_rollback(ed_model *ed, int64_t n, int64_t *count, vx_err *err)
{
    if (ed_journal_open(ed, 0, err))
        return -1;
    if (!ed->j)
        return vx_errf(err, VX_EARG, "no such history entry: %lld (the history is empty)",
                       (long long)n);
    return vx_journal_rollback(ed->j, n, count, err) || ed_refresh(ed, err) ? -1 : 0;
}
