/*
 * cmd_verify.c — `vindex verify PATH [--source DIR]`: vx_verify, then the system graph
 * bound as the engine binds it, printed as one line per segment and representation with a
 * closing verdict; --json prints vx_verify's report with a "graph" entry.
 */
#include "cli.h"
#include "engine.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <string.h>
#include <time.h>

static const char *field(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "-";
}

VINDEX_HANDLER(verify)
{
    struct sigaction old[3];
    vindex_signals_cancel(old);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cJSON *rep = NULL;
    vx_err err = {0};
    int rc = vx_verify(a->pos[0], vindex_flag(a, "--source"), &rep, &err);
    /* hashes and structure hold: the graph must also bind (every operation's operands, in
     * the shapes it reads, nothing stored left unread), or every statement would refuse a
     * container verify called ok */
    if (rc == 0) {
        vx_container *c = NULL;
        eng_model *m = NULL;
        vx_err be = {0};
        int ok = vx_open(a->pos[0], &c, &be) == 0 && eng_model_bind_tok(c, NULL, &m, &be) == 0;
        cJSON *g = cJSON_AddObjectToObject(rep, "graph");
        cJSON_AddBoolToObject(g, "binds", ok);
        if (!ok) {
            cJSON_AddStringToObject(g, "error", be.msg);
            cJSON_ReplaceItemInObject(rep, "ok", cJSON_CreateFalse());
            vx_errf(&err, VX_EVERIFY, "the system graph does not bind: %s", be.msg);
            rc = -1;
        }
        eng_model_free(m);
        vx_close(c);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    vindex_signals_restore(old);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (a->json) {
        cJSON_AddNumberToObject(rep, "seconds", secs);
        int e = vindex_emit(rep);
        return rc < 0 ? VINDEX_FAIL : e;
    }
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(rep, "segments"), *e;
    const cJSON *reps = cJSON_GetObjectItemCaseSensitive(rep, "representations");
    uint64_t bytes = 0;
    int w = 8;
    cJSON_ArrayForEach(e, segs)
        w = (int)strlen(field(e, "segment")) > w ? (int)strlen(field(e, "segment")) : w;
    cJSON_ArrayForEach(e, reps)
        w = (int)strlen(field(e, "representation")) > w ? (int)strlen(field(e, "representation")) : w;
    cJSON_ArrayForEach(e, segs) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes");
        bytes += cJSON_IsNumber(b) ? (uint64_t)b->valuedouble : 0;
        const char *t = field(e, "tensor");
        printf("segment         %-*s  %s%s%s%s\n", w, field(e, "segment"), field(e, "status"),
               *t != '-' ? " (tensor '" : "", *t != '-' ? t : "", *t != '-' ? "')" : "");
    }
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(rep, "source");
    cJSON_ArrayForEach(e, reps)
        printf("representation  %-*s  payload %s, source %s\n", w, field(e, "representation"),
               field(e, "payload"), field(e, "source"));
    if (src)
        printf("source          %s (%s)\n", field(src, "dir"), field(src, "status"));
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rep, "graph"), "binds")))
        printf("graph           binds (every operation's operands present, in shape, all read)\n");
    char b[32];
    if (rc < 0)
        fprintf(stderr, "vindex verify: %s\n", err.msg);
    else
        printf("verify: ok, %s hashed in %.2f s\n", vindex_bytes(bytes, b, sizeof b), secs);
    cJSON_Delete(rep);
    return rc < 0 ? VINDEX_FAIL : VINDEX_OK;
}
