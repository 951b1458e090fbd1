/*
 * profile.c — execution profiles (seed §9, §9.1, §9.2): inline in index.json `profiles` as
 * {"profile": name, "select": {object: representation id}}. A profile selects present
 * representations only and carries no authority of its own: its authority is derived as
 * the weakest fidelity across the representations it binds. This file judges profiles
 * against the system graph (before any segment is opened), derives authority, and adds
 * profiles to a container by rewriting index.json atomically.
 */
#include "journal.h"
#include "vindex.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The five fidelity levels of seed §9.2, then "derived": what COMPILE records for a
 * representation it rewrote from edited (effective) state, which claims no relation to the
 * source at all and so ranks below every level. */
static const char *const levels[] = {"source-exact", "source-equivalent", "numerically-approximate",
                                     "structurally-approximate", "analysis-only", "derived"};
#define NLEVELS (int)(sizeof levels / sizeof levels[0])

int vx_fidelity_rank(const char *fidelity)
{
    for (int i = 0; fidelity && i < NLEVELS; i++) {
        if (strcmp(levels[i], fidelity) == 0)
            return i;
    }
    return NLEVELS;
}

/* "a, b, c" from the string items of a JSON array (or the ids of graph objects). */
static void list_names(const cJSON *arr, const char *key, char *buf, size_t n)
{
    size_t at = 0;
    const cJSON *e;
    buf[0] = '\0';
    cJSON_ArrayForEach(e, arr) {
        const char *s = key ? vx_json_str(e, key) : cJSON_GetStringValue(e);
        if (s && at < n)
            at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? ", " : "", s);
    }
    if (!at)
        snprintf(buf, n, "none");
}

int vx_select_check(const cJSON *graph, const char *object, const char *rep, const char *profile,
                    vx_err *err)
{
    char who[160], names[384];
    if (profile)
        snprintf(who, sizeof who, "profile '%s'", profile);
    else
        snprintf(who, sizeof who, "selection");
    const cJSON *o = object ? vx_graph_object(graph, object) : NULL;
    if (!o) {
        list_names(cJSON_GetObjectItemCaseSensitive(graph, "objects"), "id", names, sizeof names);
        return vx_errf(err, VX_EMISSING, "%s selects object '%s', which system_graph.json does not define (objects: %s)",
                       who, object ? object : "(none)", names);
    }
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "representations"), *e;
    cJSON_ArrayForEach(e, list) {
        const char *s = cJSON_GetStringValue(e);
        if (s && rep && strcmp(s, rep) == 0)
            return 0;
    }
    list_names(list, NULL, names, sizeof names);
    return vx_errf(err, VX_EMISSING, "%s selects representation '%s' for object '%s', which is not present (present: %s)",
                   who, rep ? rep : "(not a string)", object, names);
}

const char *vx_profile_choice(const cJSON *profile, const char *object)
{
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(profile, "select");
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sel, object));
}

static const char *profile_name(const cJSON *p)
{
    return vx_json_str(p, "profile");
}

int vx_profile_find(const cJSON *index, const cJSON *graph, const char *name, const cJSON **out,
                    vx_err *err)
{
    const cJSON *profiles = cJSON_GetObjectItemCaseSensitive(index, "profiles"), *p;
    *out = NULL;
    if (profiles && !cJSON_IsArray(profiles))
        return vx_errf(err, VX_EFORMAT, "index.json 'profiles' is not an array");
    cJSON_ArrayForEach(p, profiles) {
        const char *pn = profile_name(p);
        if (!pn || strcmp(pn, name) != 0)
            continue;
        /* two profiles of one name: which selection binds would be the reader's choice */
        if (*out)
            return vx_errf(err, VX_EFORMAT, "index.json lists profile '%s' twice", name);
        *out = p;
    }
    if (!*out) {
        char names[384];
        list_names(profiles, "profile", names, sizeof names);
        return vx_errf(err, VX_EMISSING, "no profile '%s' in index.json (profiles: %s)", name, names);
    }
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(*out, "select"), *e;
    if (!cJSON_IsObject(sel))
        return vx_errf(err, VX_EFORMAT, "profile '%s' has no 'select' object", name);
    cJSON_ArrayForEach(e, sel) {
        if (vx_select_check(graph, e->string, cJSON_GetStringValue(e), name, err) < 0)
            return -1;
    }
    return 0;
}

int vx_profile_authority(const cJSON *index, const cJSON *graph, const char *profile,
                         const char **out, vx_err *err)
{
    const cJSON *prof = NULL, *o;
    if (profile && vx_profile_find(index, graph, profile, &prof, err) < 0)
        return -1;
    const cJSON *reps = cJSON_GetObjectItemCaseSensitive(index, "representations");
    int worst = -1;
    *out = levels[0];
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(graph, "objects")) {
        const char *id = vx_json_str(o, "id"), *rid = vx_profile_choice(prof, id ? id : "");
        if (!rid)
            rid = cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "representations"), 0));
        if (!rid)
            continue;
        const char *f = vx_json_str(cJSON_GetObjectItemCaseSensitive(reps, rid), "fidelity");
        int r = vx_fidelity_rank(f);
        if (r > worst) {
            worst = r;
            *out = r < NLEVELS ? levels[r] : "unknown";
        }
    }
    /* a container COMPILE derived never presents as the source of truth (seed §9.2), even
     * through a profile over representations it copied unchanged */
    const char *ca = vx_json_str(index, "authority");
    if (ca && strcmp(ca, "derived") == 0 && worst < NLEVELS)
        *out = levels[NLEVELS - 1];
    return 0;
}

int vx_json_replace_n(const char *dir, const char *const *rel, const cJSON *const *json, int n,
                      vx_err *err)
{
    vx_afile f[2];
    int opened = 0, rc = 0;
    if (n > (int)(sizeof f / sizeof f[0]))
        return vx_errf(err, VX_EARG, "too many files to replace together");
    for (int i = 0; i < n && rc == 0; i++) {
        char path[PATH_MAX], *text;
        if (vx_resolve_in(dir, rel[i], path, sizeof path, err) < 0)
            rc = -1;
        else if (!(text = cJSON_Print(json[i])))
            rc = vx_errf(err, VX_ENOMEM, "out of memory printing %s", rel[i]);
        else {
            size_t len = strlen(text);
            text[len] = '\n';   /* replaces the NUL: the file ends with a newline */
            if (vx_afile_open(&f[i], path, 1, NULL, err) < 0)
                rc = -1;
            else {
                opened++;
                rc = vx_afile_write(&f[i], text, len + 1, err) < 0 || vx_afile_sync(&f[i], err) < 0
                         ? -1 : 0;
            }
            free(text);
        }
    }
    for (int i = 0; i < opened; i++) {
        if (rc == 0)
            rc = vx_afile_commit(&f[i], err);
        else
            vx_afile_abort(&f[i]);
    }
    return rc;
}

int vx_json_replace(const char *dir, const char *rel, const cJSON *json, vx_err *err)
{
    return vx_json_replace_n(dir, &rel, &json, 1, err);
}

/* Reads dir's index.json and system_graph.json (caller frees both). */
static int read_pair(const char *dir, cJSON **index, cJSON **graph, vx_err *err)
{
    char path[PATH_MAX], *text = NULL;
    size_t n = 0;
    int version;
    *index = *graph = NULL;
    if (vx_resolve_in(dir, "index.json", path, sizeof path, err) < 0 ||
        vx_read_small_file(path, "index.json", &text, &n, err) < 0)
        return -1;
    int rc = vx_json_parse("index.json", text, n, index, err);
    free(text);
    if (rc < 0 || vx_index_version(*index, &version, err) < 0)
        return -1;
    const char *rel = vx_json_str(*index, "system_graph");
    if (!rel)
        return vx_errf(err, VX_EFORMAT, "index.json names no system_graph");
    if (vx_resolve_in(dir, rel, path, sizeof path, err) < 0 ||
        vx_read_small_file(path, rel, &text, &n, err) < 0)
        return -1;
    rc = vx_json_parse(rel, text, n, graph, err);
    free(text);
    return rc;
}

int vx_profile_add(const char *dir, const char *name, const vx_select *sel, size_t n, int merge,
                   vx_err *err)
{
    if (!name || !*name)
        return vx_errf(err, VX_EARG, "a profile needs a name");
    if (n == 0)
        return vx_errf(err, VX_EARG, "profile '%s' selects nothing", name);
    cJSON *index = NULL, *graph = NULL;
    int rc = -1;
    if (vx_journal_guard(dir, "adding a profile", err) < 0 || read_pair(dir, &index, &graph, err) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (vx_select_check(graph, sel[i].object, sel[i].representation, name, err) < 0)
            goto out;
    }
    cJSON *profiles = cJSON_GetObjectItemCaseSensitive(index, "profiles"), *p, *found = NULL;
    if (!profiles) {
        profiles = cJSON_AddArrayToObject(index, "profiles");
    } else if (!cJSON_IsArray(profiles)) {
        vx_errf(err, VX_EFORMAT, "index.json 'profiles' is not an array");
        goto out;
    }
    cJSON_ArrayForEach(p, profiles) {
        const char *pn = profile_name(p);
        if (pn && strcmp(pn, name) == 0)
            found = p;
    }
    if (found && !merge) {
        vx_errf(err, VX_EARG, "profile '%s' already exists in index.json", name);
        goto out;
    }
    if (!found) {
        found = cJSON_CreateObject();
        cJSON_AddItemToArray(profiles, found);
        cJSON_AddStringToObject(found, "profile", name);
    }
    cJSON *select = cJSON_GetObjectItemCaseSensitive(found, "select");
    if (!cJSON_IsObject(select)) {
        cJSON_DeleteItemFromObjectCaseSensitive(found, "select");
        select = cJSON_AddObjectToObject(found, "select");
    }
    for (size_t i = 0; i < n; i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(select, sel[i].object);
        cJSON_AddStringToObject(select, sel[i].object, sel[i].representation);
    }
    rc = vx_json_replace(dir, "index.json", index, err);
out:
    cJSON_Delete(index);
    cJSON_Delete(graph);
    return rc;
}
