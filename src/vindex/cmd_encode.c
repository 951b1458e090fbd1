/*
 * cmd_encode.c — `vindex encode HF_DIR -o OUT [--dtype f32|f16|bf16] [--no-down-meta]`:
 * runs vx_encode with the browse layer's down-meta hook (or, with --no-down-meta, its
 * bands-only hook: browse then computes the down-meta a statement needs when asked), a
 * byte progress line on a terminal, and Ctrl-C wired to the cancel flag; then reopens the
 * result and reports what was written.
 */
#include "cli.h"

#include "browse.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void progress(void *ctx, const char *stage, uint64_t done, uint64_t total)
{
    (void)ctx;
    const int pct = total ? (int)(100.0 * done / total) : 100;
    if (strcmp(stage, "encode") != 0) {
        fprintf(stderr, "\r%s %3d%%  %llu of %llu features              ", stage, pct,
                (unsigned long long)done, (unsigned long long)total);
        return;
    }
    char a[32], b[32];
    fprintf(stderr, "\rencoding %3d%%  %s of %s   ", pct, vindex_bytes(done, a, sizeof a),
            vindex_bytes(total, b, sizeof b));
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

VINDEX_HANDLER(encode)
{
    const char *out = vindex_flag(a, "-o"), *dt = vindex_flag(a, "--dtype");
    if (!out) {
        fprintf(stderr, "vindex encode: missing -o OUT\nusage: vindex encode HF_DIR -o OUT "
                "[--dtype f32|f16|bf16] [--no-down-meta] [--json]\n");
        return VINDEX_USAGE;
    }
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    if (dt) {
        vx_dtype d;
        if (vx_dtype_parse(dt, &d) < 0) {
            fprintf(stderr, "vindex encode: --dtype must be f32, f16 or bf16 (got '%s')\n", dt);
            return VINDEX_USAGE;
        }
        vx_err quant;   /* the encoder's rule; this message names the CLI's way */
        if (vx_encode_dtype_check((int)d, &quant)) {
            fprintf(stderr, "vindex encode: --dtype must be f32, f16 or bf16 (got '%s': a "
                    "quantised representation is added to an encoded container with 'vindex "
                    "represent')\n", dt);
            return VINDEX_USAGE;
        }
        o.dtype = (int)d;
    }
    int tty = !a->json && isatty(STDERR_FILENO);
    if (tty)
        o.progress = progress;
    o.finish = vindex_flag(a, "--no-down-meta") ? brw_encode_finish_bands : brw_encode_finish;
    o.finish_ctx = &o;
    struct sigaction old[3];
    vindex_signals_cancel(old);     /* the encode removes its temporary tree and returns */
    double t0 = now();
    vx_err err = {0};
    int rc = vx_encode(a->pos[0], out, &o, &err);
    double secs = now() - t0;
    vindex_signals_restore(old);
    if (tty)
        fprintf(stderr, "\r%60s\r", "");
    if (rc < 0)
        return vindex_fail_err(a, &err);

    vx_container *c = NULL;
    if (vx_open(out, &c, &err) < 0)
        return vindex_fail_err(a, &err);
    uint64_t bytes = 0;
    for (size_t i = 0; i < vx_tensor_count(c); i++)
        bytes += vx_tensor_at(c, i)->nbytes;
    if (a->json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddBoolToObject(doc, "ok", 1);
        cJSON_AddStringToObject(doc, "source", a->pos[0]);
        cJSON_AddStringToObject(doc, "container", out);
        cJSON_AddNumberToObject(doc, "tensors", (double)vx_tensor_count(c));
        cJSON_AddNumberToObject(doc, "payload_bytes", (double)bytes);
        cJSON_AddNumberToObject(doc, "seconds", secs);
        cJSON_AddStringToObject(doc, "index_sha256", vx_index_sha256(c));
        vx_close(c);
        return vindex_emit(doc);
    }
    char b[32];
    printf("encoded %s -> %s: %zu tensors, %s in %.1f s (%.0f MiB/s)\n", a->pos[0], out,
           vx_tensor_count(c), vindex_bytes(bytes, b, sizeof b), secs,
           secs > 0 ? bytes / 1048576.0 / secs : 0.0);
    vx_close(c);
    return VINDEX_OK;
}
