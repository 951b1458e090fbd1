/*
 * cmd_represent.c — adding representations and profiles to a container (seed §9.1,
 * §18.3): `represent PATH OBJECT --dtype D [--profile NAME]` compiles a new
 * representation beside the original (and optionally selects it in profile NAME), and
 * `profile PATH [add NAME OBJECT=REPRESENTATION ...]` lists the profiles with their derived
 * authority or adds one. The work is the storage layer's (vx_represent, vx_profile_add);
 * this file parses, times and prints.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

VINDEX_HANDLER(represent)
{
    const char *dname = vindex_flag(a, "--dtype"), *profile = vindex_flag(a, "--profile");
    vx_dtype dt;
    if (!dname) {
        fprintf(stderr, "vindex represent: --dtype is required (q8_0, q4_0, q4_k, q6_k, mxfp4, f16, bf16, f32)\n");
        return VINDEX_USAGE;
    }
    if (vx_dtype_parse(dname, &dt) < 0) {
        fprintf(stderr, "vindex represent: unknown dtype '%s' (q8_0, q4_0, q4_k, q6_k, mxfp4, f16, bf16, f32)\n", dname);
        return VINDEX_USAGE;
    }
    vx_err err = {0};
    vx_represent_info in;
    double t0 = seconds();
    struct sigaction old[3];
    vindex_signals_cancel(old);     /* a signal removes the segment being written */
    int rc = vx_represent(a->pos[0], a->pos[1], dt, &in, &err);
    vindex_signals_restore(old);
    if (rc < 0)
        return vindex_fail_err(a, &err);
    double secs = seconds() - t0;
    if (profile) {
        vx_select sel = {a->pos[1], in.id};
        if (vx_profile_add(a->pos[0], profile, &sel, 1, 1, &err) < 0)
            return vindex_fail_err(a, &err);
    }
    double bpw = in.weights ? 8.0 * (double)in.bytes / (double)in.weights : 0;
    if (a->json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddBoolToObject(doc, "ok", 1);
        cJSON_AddStringToObject(doc, "container", a->pos[0]);
        cJSON_AddStringToObject(doc, "object", a->pos[1]);
        cJSON_AddStringToObject(doc, "representation", in.id);
        cJSON_AddStringToObject(doc, "from", in.from);
        cJSON_AddStringToObject(doc, "dtype", vx_dtype_name(dt));
        cJSON_AddStringToObject(doc, "fidelity", in.fidelity);
        cJSON_AddNumberToObject(doc, "tensors", (double)in.tensors);
        cJSON_AddNumberToObject(doc, "kept", (double)in.kept);
        cJSON_AddNumberToObject(doc, "weights", (double)in.weights);
        cJSON_AddNumberToObject(doc, "bytes", (double)in.bytes);
        cJSON_AddNumberToObject(doc, "source_bytes", (double)in.source_bytes);
        cJSON_AddNumberToObject(doc, "bits_per_weight", bpw);
        cJSON_AddNumberToObject(doc, "segments", in.segments);
        cJSON_AddStringToObject(doc, "payload_sha256", in.payload_sha256);
        if (profile)
            cJSON_AddStringToObject(doc, "profile", profile);
        cJSON_AddNumberToObject(doc, "seconds", secs);
        return vindex_emit(doc);
    }
    char b1[32], b2[32];
    printf("represented %s as %s: %s (from %s)\n", a->pos[1], vx_dtype_name(dt), in.id, in.from);
    printf("  %zu tensor%s (%zu kept in their source dtype), %s -> %s, %.3f bits/weight\n",
           in.tensors, in.tensors == 1 ? "" : "s", in.kept, vindex_bytes(in.source_bytes, b1, sizeof b1), vindex_bytes(in.bytes, b2, sizeof b2), bpw);
    printf("  fidelity %s, %d segment%s, %.1f s\n", in.fidelity, in.segments, in.segments == 1 ? "" : "s", secs);
    if (profile)
        printf("  profile %s selects %s\n", profile, in.id);
    return VINDEX_OK;
}

/* Lists the profiles (with the baseline binding first) and their derived authority. */
static int list_profiles(const vindex_args *a)
{
    int rc;
    vx_container *c = vindex_open(a, &rc);
    if (!c)
        return rc;
    const cJSON *ix = vx_index_json(c), *g = vx_graph_json(c), *p;
    cJSON *doc = a->json ? cJSON_CreateArray() : NULL;
    vx_err err = {0};
    const char *auth;
    vx_profile_authority(ix, g, NULL, &auth, &err);
    if (doc) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNullToObject(r, "profile");
        cJSON_AddStringToObject(r, "authority", auth);
        cJSON_AddItemToArray(doc, r);
    } else {
        printf("%-20s  %-24s  %s\n", "profile", "authority", "selects");
        printf("%-20s  %-24s  %s\n", "(baseline)", auth, "the first representation of each object");
    }
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(ix, "profiles")) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "profile"));
        const cJSON *sel = cJSON_GetObjectItemCaseSensitive(p, "select"), *e;
        char what[512] = "";
        size_t at = 0;
        int ok = name && vx_profile_authority(ix, g, name, &auth, &err) == 0;
        if (!ok)
            auth = "invalid";
        cJSON_ArrayForEach(e, sel) {
            if (at < sizeof what)
                at += (size_t)snprintf(what + at, sizeof what - at, "%s%s=%s", at ? " " : "", e->string,
                                       cJSON_IsString(e) ? e->valuestring : "?");
        }
        if (doc) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "profile", name ? name : "");
            cJSON_AddStringToObject(r, "authority", auth);
            cJSON_AddItemToObject(r, "select", cJSON_Duplicate(sel, 1));
            if (!ok)
                cJSON_AddStringToObject(r, "error", err.msg);
            cJSON_AddItemToArray(doc, r);
        } else {
            printf("%-20s  %-24s  %s\n", name ? name : "?", auth, ok ? what : err.msg);
        }
    }
    vx_close(c);
    return doc ? vindex_emit(doc) : VINDEX_OK;
}

VINDEX_HANDLER(profile)
{
    if (a->npos == 1)
        return list_profiles(a);
    if (strcmp(a->pos[1], "add") != 0 || a->npos < 4) {
        fprintf(stderr, "vindex profile: expected 'add NAME OBJECT=REPRESENTATION ...' after the path\n");
        return VINDEX_USAGE;
    }
    vx_select sel[VINDEX_MAX_POS];
    char buf[VINDEX_MAX_POS][512];
    size_t n = 0;
    for (int i = 3; i < a->npos; i++, n++) {
        const char *eq = strchr(a->pos[i], '=');
        if (!eq || eq == a->pos[i] || !eq[1] || strlen(a->pos[i]) >= sizeof buf[0]) {
            fprintf(stderr, "vindex profile: '%s' is not OBJECT=REPRESENTATION\n", a->pos[i]);
            return VINDEX_USAGE;
        }
        memcpy(buf[n], a->pos[i], strlen(a->pos[i]) + 1);
        buf[n][eq - a->pos[i]] = '\0';
        sel[n].object = buf[n];
        sel[n].representation = buf[n] + (eq - a->pos[i]) + 1;
    }
    vx_err err = {0};
    if (vx_profile_add(a->pos[0], a->pos[2], sel, n, 0, &err) < 0)
        return vindex_fail_err(a, &err);
    vx_container *c = NULL;
    const char *auth = "?";
    if (vx_open_profile(a->pos[0], a->pos[2], NULL, 0, &c, &err) < 0 ||
        vx_profile_authority(vx_index_json(c), vx_graph_json(c), a->pos[2], &auth, &err) < 0) {
        vx_close(c);
        return vindex_fail_err(a, &err);
    }
    if (a->json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddBoolToObject(doc, "ok", 1);
        cJSON_AddStringToObject(doc, "profile", a->pos[2]);
        cJSON_AddStringToObject(doc, "authority", auth);
        vx_close(c);
        return vindex_emit(doc);
    }
    printf("profile %s added (%zu selection%s), authority %s\n", a->pos[2], n, n == 1 ? "" : "s", auth);
    vx_close(c);
    return VINDEX_OK;
}
