/*
 * cli.c — shared output and argument helpers for the vindex commands.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

const char *vindex_flag(const vindex_args *a, const char *name)
{
    for (int i = 0; i < a->nflag; i++) {
        if (strcmp(a->flag[i], name) == 0)
            return a->val[i];
    }
    return NULL;
}

int vindex_fail(const vindex_args *a, const char *msg)
{
    if (a->json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddBoolToObject(doc, "ok", 0);
        cJSON_AddStringToObject(doc, "error", msg);
        vindex_emit(doc);
    } else {
        /* the library names its operation too ("encode: cannot write …"): said once */
        size_t k = strlen(a->cmd);
        if (strncmp(msg, a->cmd, k) == 0 && msg[k] == ':' && msg[k + 1] == ' ')
            msg += k + 2;
        fprintf(stderr, "vindex %s: %s\n", a->cmd, msg);
    }
    return VINDEX_FAIL;
}

int vindex_fail_err(const vindex_args *a, const vx_err *err)
{
    return vindex_fail(a, err->msg[0] ? err->msg : "failed (no message)");
}

int vindex_emit(cJSON *doc)
{
    char *s = doc ? cJSON_Print(doc) : NULL;
    cJSON_Delete(doc);
    if (!s) {
        fprintf(stderr, "vindex: out of memory printing json\n");
        return VINDEX_FAIL;
    }
    puts(s);
    free(s);
    return VINDEX_OK;
}

vx_container *vindex_open(const vindex_args *a, int *rc)
{
    vx_container *c = NULL;
    vx_err err = {0};
    if (vx_open(a->pos[0], &c, &err) < 0) {
        *rc = vindex_fail_err(a, &err);
        return NULL;
    }
    *rc = VINDEX_OK;
    return c;
}

const char *vindex_bytes(uint64_t n, char *buf, size_t size)
{
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (n < 1024) {
        snprintf(buf, size, "%llu B", (unsigned long long)n);
        return buf;
    }
    double v = (double)n / 1024;
    int u = 0;
    while (v >= 1024 && u < 3) {
        v /= 1024;
        u++;
    }
    snprintf(buf, size, "%.1f %s", v, units[u]);
    return buf;
}

const char *vindex_shape(const vx_tensor *t, char *buf, size_t size)
{
    size_t at = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < t->ndim && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (at < size)
        snprintf(buf + at, size - at, "]");
    return buf;
}

static const int cancel_sigs[3] = {SIGINT, SIGTERM, SIGHUP};

static void on_cancel_signal(int sig)
{
    (void)sig;
    vx_cancel_flag = 1;
}

void vindex_signals_cancel(struct sigaction old[3])
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_cancel_signal;
    for (int i = 0; i < 3; i++) sigaction(cancel_sigs[i], &sa, &old[i]);
}

void vindex_signals_restore(const struct sigaction old[3])
{
    for (int i = 0; i < 3; i++) sigaction(cancel_sigs[i], &old[i], NULL);
}
