/*
 * cmd_diff.c — `diff PATH OBJECT REPR_A REPR_B`: one object under two representations,
 * compared value by value (vx_tensor_diff: max |a-b|, RMS, relative error ||a-b||/||a||),
 * per tensor and overall. The container is opened twice, once binding each
 * representation, so both are judged present before any weight is read; values are
 * decoded on the fly, a chunk of rows at a time.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

VINDEX_HANDLER(diff)
{
    const char *obj = a->pos[1];
    vx_select sa = {obj, a->pos[2]}, sb = {obj, a->pos[3]};
    vx_container *ca = NULL, *cb = NULL;
    vx_err err = {0};
    if (vx_open_profile(a->pos[0], NULL, &sa, 1, &ca, &err) < 0 ||
        vx_open_profile(a->pos[0], NULL, &sb, 1, &cb, &err) < 0) {
        vx_close(ca);
        return vindex_fail_err(a, &err);
    }
    cJSON *doc = a->json ? cJSON_CreateObject() : NULL, *arr = NULL;
    int w = 6;
    for (size_t i = 0; i < vx_tensor_count(ca); i++) {
        const vx_tensor *t = vx_tensor_at(ca, i);
        if (strcmp(t->object, obj) == 0 && (int)strlen(t->name) > w)
            w = (int)strlen(t->name);
    }
    if (doc) {
        cJSON_AddStringToObject(doc, "object", obj);
        cJSON_AddStringToObject(doc, "a", a->pos[2]);
        cJSON_AddStringToObject(doc, "b", a->pos[3]);
        arr = cJSON_AddArrayToObject(doc, "tensors");
    } else {
        printf("%-*s  %-5s  %-5s  %12s  %12s  %12s\n", w, "tensor", "a", "b", "max_abs", "rms", "rel_err");
    }
    double max_abs = 0, sd = 0, sa2 = 0;
    uint64_t n = 0, differ = 0;
    int rc = VINDEX_OK;
    for (size_t i = 0; i < vx_tensor_count(ca) && rc == VINDEX_OK; i++) {
        const vx_tensor *ta = vx_tensor_at(ca, i);
        if (strcmp(ta->object, obj) != 0)
            continue;
        const vx_tensor *tb = vx_find(cb, obj, ta->name);
        vx_diff_stat d;
        if (!tb) {
            vx_errf(&err, VX_EMISSING, "diff: tensor '%s' of '%s' is not in representation '%s'", ta->name, obj,
                    a->pos[3]);
            rc = vindex_fail_err(a, &err);
            break;
        }
        if (vx_tensor_diff(ta, tb, &d, &err) < 0) {
            rc = vindex_fail_err(a, &err);
            break;
        }
        max_abs = d.max_abs > max_abs ? d.max_abs : max_abs;
        sd += d.ss_diff;
        sa2 += d.ss_ref;
        n += d.n;
        differ += d.differ;
        if (doc) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "name", ta->name);
            cJSON_AddStringToObject(r, "dtype_a", vx_dtype_name(ta->dtype));
            cJSON_AddStringToObject(r, "dtype_b", vx_dtype_name(tb->dtype));
            cJSON_AddNumberToObject(r, "values", (double)d.n);
            cJSON_AddNumberToObject(r, "differ", (double)d.differ);
            cJSON_AddNumberToObject(r, "max_abs", d.max_abs);
            cJSON_AddNumberToObject(r, "rms", d.rms);
            cJSON_AddNumberToObject(r, "rel_err", isfinite(d.rel) ? d.rel : -1);
            cJSON_AddItemToArray(arr, r);
        } else {
            printf("%-*s  %-5s  %-5s  %12.4e  %12.4e  %12.4e\n", w, ta->name, vx_dtype_name(ta->dtype),
                   vx_dtype_name(tb->dtype), d.max_abs, d.rms, d.rel);
        }
    }
    vx_close(ca);
    vx_close(cb);
    if (rc != VINDEX_OK) {
        cJSON_Delete(doc);
        return rc;
    }
    double rms = n ? sqrt(sd / (double)n) : 0, rel = sa2 > 0 ? sqrt(sd / sa2) : 0;
    if (doc) {
        cJSON *t = cJSON_AddObjectToObject(doc, "overall");
        cJSON_AddNumberToObject(t, "values", (double)n);
        cJSON_AddNumberToObject(t, "differ", (double)differ);
        cJSON_AddNumberToObject(t, "max_abs", max_abs);
        cJSON_AddNumberToObject(t, "rms", rms);
        cJSON_AddNumberToObject(t, "rel_err", rel);
        return vindex_emit(doc);
    }
    printf("%-*s  %-5s  %-5s  %12.4e  %12.4e  %12.4e\n", w, "overall", "", "", max_abs, rms, rel);
    printf("%llu of %llu values differ\n", (unsigned long long)differ, (unsigned long long)n);
    return VINDEX_OK;
}
