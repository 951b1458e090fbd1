/*
 * walk.c — WALK throughput: a full gate-KNN scan over every layer of a container (the
 * generated ~1.1B checkpoint, BF16 and F16 gates), reported as ms per WALK, GB/s of gate
 * bytes scanned, and the ratio to a streaming-read bandwidth probe (eng_threads() threads
 * summing a 2 GB array) interleaved with the walks, so both see the same machine load.
 *
 *   walk [CONTAINER…]   default: /tmp/lql-bench-1b-bf16.vindex3 /tmp/lql-bench-1b-f16.vindex3
 *   walk --encode HF_DIR OUT.vindex3 [DTYPE]
 *                       encode HF_DIR twice (without down-meta into OUT.plain, as `vindex
 *                       encode --no-down-meta` does, then with the down-meta hook into OUT;
 *                       converted to DTYPE when given) and report both times: what
 *                       down-meta adds at encode. Then WALK TOP 10 over every layer of
 *                       OUT.plain for a few prompts, which computes its hits' down-meta on
 *                       demand, and what that took. OUT.plain is removed afterwards.
 *
 * Gate rows are touched once before timing so the numbers are from page cache, like the
 * reference's published figure (0.3 ms for 34 layers of a 4B model on an M3 Max).
 */
#include "browse.h"
#include "bandwidth.h"

#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* CPU seconds (user + system, all threads) used by this process so far: under a loaded
 * machine a fairer measure of work than wall time. */
static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

/* WALK over every layer, interleaved with the bandwidth probe (so both see the same
 * machine load): best of 20 walks and best of 10 probes. */
static int bench_one(const char *path, const float *arr, size_t n_arr)
{
    vx_container *c = NULL;
    brw_model *m = NULL;
    vx_err err = {0};
    bw_drop_cache(path);    /* as bench/decode: the container cached by its own mapping */
    if (vx_open(path, &c, &err) != 0 || brw_open(c, &m, &err) != 0) {
        fprintf(stderr, "walk: %s: %s\n", path, err.msg);
        vx_close(c);
        return 1;
    }
    brw_walk_opts o = {.top = 10, .layer_lo = -1, .layer_hi = -1};
    brw_walk w;
    /* warm: page every gate row in */
    if (brw_walk_run(m, "The capital of France is", &o, &w, &err) != 0) {
        fprintf(stderr, "walk: %s\n", err.msg);
        brw_close(m);
        vx_close(c);
        return 1;
    }
    uint64_t bytes = w.bytes_scanned;
    brw_walk_free(&w);
    int reps = 20, threads = eng_threads();
    double best = 1e30, total = 0, bw = 0;
    for (int r = 0; r < reps; r++) {
        if (r % 2 == 0) {
            double g = bw_once(arr, n_arr, threads);
            if (g > bw)
                bw = g;
        }
        double t0 = bw_now();
        brw_walk_run(m, "The capital of France is", &o, &w, &err);
        double dt = bw_now() - t0;
        brw_walk_free(&w);
        total += dt;
        if (dt < best)
            best = dt;
    }
    double gbs = (double)bytes / best / 1e9;
    brw_stats st;
    brw_stats_get(m, &st, &err);
    printf("%s\n  layers %d, gate bytes %.1f MB (%s), threads %d\n", path, brw_layers(m),
           bytes / 1e6, st.gate_dtype, threads);
    printf("  WALK all layers: best %.2f ms, mean %.2f ms over %d runs\n", best * 1e3,
           total / reps * 1e3, reps);
    printf("  gate scan: %.1f GB/s; bandwidth probe (best of 10, interleaved) %.1f GB/s; "
           "ratio %.2f\n", gbs, bw, bw > 0 ? gbs / bw : 0);
    /* the reference: 34 layers × 10240 features × 2560 hidden, f32, in 0.3 ms */
    double ref_bytes = 34.0 * 10240 * 2560 * 4;
    printf("  per byte: lql %.3f ms/GB; the reference's figure implies %.3f ms/GB "
           "(%.0f GB/s, above any memory bandwidth: not a full scan)\n",
           best * 1e3 / (bytes / 1e9), 0.3 / (ref_bytes / 1e9), ref_bytes / 0.3e-3 / 1e9);
    brw_close(m);
    vx_close(c);
    return 0;
}

/* WALK TOP 10 over every layer of a container without down-meta, a few prompts: each
 * computes its new hits' down-meta on demand (the first also hashes the down operands and
 * pages the gate rows in). The down-meta cache is off: this times the computation. */
static int walk_on_demand(const char *path)
{
    setenv("LQL_NO_CACHE", "1", 1);
    static const char *prompts[] = {"The capital of France is", "A banana is a kind of",
                                    "Water boils at", "The author of Hamlet was",
                                    "Mount Everest is in"};
    vx_container *c = NULL;
    brw_model *m = NULL;
    vx_err err = {0};
    if (vx_open(path, &c, &err) != 0 || brw_open(c, &m, &err) != 0) {
        fprintf(stderr, "walk: %s: %s\n", path, err.msg);
        vx_close(c);
        return 1;
    }
    brw_walk_opts o = {.top = 10, .layer_lo = -1, .layer_hi = -1};
    printf("  WALK TOP 10 without stored down-meta (its hits' computed on demand):\n");
    for (size_t i = 0; i < sizeof prompts / sizeof *prompts; i++) {
        brw_od_stats s0, s1;
        brw_meta_stats(m, &s0);
        brw_walk w;
        double t0 = bw_now();
        if (brw_walk_run(m, prompts[i], &o, &w, &err) != 0) {
            fprintf(stderr, "walk: %s\n", err.msg);
            break;
        }
        double dt = bw_now() - t0;
        brw_walk_free(&w);
        brw_meta_stats(m, &s1);
        const uint64_t n = s1.computed - s0.computed;
        const double sec = s1.seconds - s0.seconds;
        printf("    \"%s\": %.0f ms, of which %.0f ms computed %llu features' down-meta "
               "(%.2f ms each)%s\n", prompts[i], dt * 1e3, sec * 1e3, (unsigned long long)n,
               n ? sec * 1e3 / (double)n : 0,
               i == 0 ? "; first use: pages in and hashes the gate and down operands" : "");
    }
    brw_close(m);
    vx_close(c);
    return 0;
}

static int bench_encode(const char *hf, const char *out, const char *dtype)
{
    char plain[4200];
    snprintf(plain, sizeof plain, "%s.plain", out);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    vx_err err = {0};
    vx_dtype dt;
    if (dtype) {
        if (vx_dtype_parse(dtype, &dt) != 0) {
            fprintf(stderr, "walk: unknown dtype %s\n", dtype);
            return 2;
        }
        o.dtype = (int)dt;
    }
    o.finish = brw_encode_finish_bands;
    o.finish_ctx = &o;
    double t0 = bw_now(), c0 = cpu_now();
    if (vx_encode(hf, plain, &o, &err) != 0) {
        fprintf(stderr, "walk: encode %s: %s\n", hf, err.msg);
        return 1;
    }
    double t_plain = bw_now() - t0, c_plain = cpu_now() - c0;
    o.finish = brw_encode_finish;
    o.finish_ctx = &o;
    t0 = bw_now();
    c0 = cpu_now();
    if (vx_encode(hf, out, &o, &err) != 0) {
        fprintf(stderr, "walk: encode %s: %s\n", hf, err.msg);
        return 1;
    }
    double t_browse = bw_now() - t0, c_browse = cpu_now() - c0;
    printf("encode %s: %.1f s without down-meta, %.1f s with down-meta (down-meta %.1f s, "
           "%.2fx)\n", hf, t_plain, t_browse, t_browse - t_plain, t_browse / t_plain);
    printf("  cpu: %.1f s without down-meta, %.1f s with down-meta (down-meta %.1f cpu-s)\n",
           c_plain, c_browse, c_browse - c_plain);
    int rc = walk_on_demand(plain);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", plain);
    return system(cmd) != 0 || rc;
}

int main(int argc, char **argv)
{
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "--encode") == 0)
        return bench_encode(argv[2], argv[3], argc == 5 ? argv[4] : NULL);
    const char *def[] = {"/tmp/lql-bench-1b-bf16.vindex3", "/tmp/lql-bench-1b-f16.vindex3"};
    size_t n_arr = ((size_t)2 << 30) / sizeof(float);
    float *arr = bw_array(n_arr);
    if (!arr) {
        fprintf(stderr, "walk: cannot allocate the 2 GB probe array\n");
        return 1;
    }
    int rc = 0;
    if (argc > 1)
        for (int i = 1; i < argc; i++)
            rc |= bench_one(argv[i], arr, n_arr);
    else
        for (int i = 0; i < 2; i++)
            rc |= bench_one(def[i], arr, n_arr);
    return rc;
}
