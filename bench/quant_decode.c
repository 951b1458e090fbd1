/*
 * quant_decode.c — decode speed of Q8_0 and Q4_K representations against the bf16
 * baseline, on the ~1.1B-parameter Llama-geometry checkpoint bench/decode writes
 * (TinyLlama-1.1B shapes, random weights), beside a streaming-read bandwidth probe run
 * in the same process tree, with llama.cpp's figures for this machine type
 * (shared/models/PERF.md: Q8_0 decode 23.4 t/s, BF16 14.4 t/s).
 *
 *   quant_decode [--src /tmp/lql-bench/hf-bf16-22] [--dir /tmp/lql-bench/vx-quant-22.vindex3]
 *                [--threads 2] [--prompt 64] [--gen 32]
 *
 * On first use the checkpoint is encoded (bf16, source dtypes) and its decoder stack and
 * output head are represented as q8_0 and q4_k (profiles "q8_0" and "q4_k", as LQL's
 * REPRESENT names them); the container is reused afterwards. Run `decode` once first if
 * the checkpoint is missing. Per profile: prompt and decode tokens/s, weight bytes
 * streamed per decoded token, CPU milliseconds per decoded token (all threads; fairer than
 * wall time on a shared machine), and the decode traffic as a fraction of the probe.
 * Wall-clock numbers are printed, never asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "vindex.h"
#include "engine.h"
#include "bandwidth.h"

/* ---------------------------------------------------------------- container */

static int prepare(const char *src, const char *dir)
{
    struct stat st;
    vx_err err = {0};
    if (stat(dir, &st) != 0) {
        char cfg[4200];
        snprintf(cfg, sizeof cfg, "%s/model.safetensors", src);
        if (stat(cfg, &st) != 0) {
            fprintf(stderr, "quant_decode: no checkpoint at %s (run bench 'decode' once: it writes it)\n", src);
            return -1;
        }
        vx_encode_opts o;
        vx_encode_opts_init(&o);
        double t0 = bw_now();
        if (vx_encode(src, dir, &o, &err) < 0) { fprintf(stderr, "quant_decode: encode: %s\n", err.msg); return -1; }
        fprintf(stderr, "quant_decode: encoded %s in %.1f s\n", dir, bw_now() - t0);
    }
    static const char *objs[] = {"target.decoder_stack", "target.output_head"};
    static const vx_dtype dts[] = {VX_Q8_0, VX_Q4_K};
    for (int d = 0; d < 2; d++) {
        for (int k = 0; k < 2; k++) {
            vx_container *c = NULL;
            if (vx_open(dir, &c, &err) < 0) { fprintf(stderr, "quant_decode: %s\n", err.msg); return -1; }
            char id[256];
            snprintf(id, sizeof id, "%s.%s", objs[k], vx_dtype_name(dts[d]));
            vx_rep_totals tot;
            int have = vx_representation_totals(c, id, &tot) == 0;
            vx_close(c);
            if (have) continue;
            vx_represent_info in;
            double t0 = bw_now();
            if (vx_represent(dir, objs[k], dts[d], &in, &err) < 0) { fprintf(stderr, "quant_decode: %s\n", err.msg); return -1; }
            double secs = bw_now() - t0;
            fprintf(stderr, "quant_decode: represented %s as %s in %.1f s (%.1f M weights/s, %.3f bits/weight)\n",
                    objs[k], vx_dtype_name(dts[d]), secs, (double)in.weights / secs / 1e6,
                    8.0 * (double)in.bytes / (double)in.weights);
            vx_select sel = {objs[k], in.id};
            if (vx_profile_add(dir, vx_dtype_name(dts[d]), &sel, 1, 1, &err) < 0) {
                fprintf(stderr, "quant_decode: %s\n", err.msg);
                return -1;
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- one profile */

typedef struct result { double pps, dps, cpu_per_tok; uint64_t wbytes; } result;

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run(const char *dir, const char *profile, int n_prompt, int n_gen, result *r)
{
    vx_container *c = NULL;
    eng_model *m = NULL;
    eng_session *s = NULL;
    vx_err err = {0};
    if (vx_open_profile(dir, profile, NULL, 0, &c, &err) < 0 || eng_model_bind(c, &m, &err) < 0 ||
        eng_session_new(m, n_prompt + n_gen + 8, &s, &err) < 0) {
        fprintf(stderr, "quant_decode: %s: %s\n", profile ? profile : "baseline", err.msg);
        eng_model_free(m);
        vx_close(c);
        return -1;
    }
    /* bytes streamed per decoded token: every bound tensor except the embedding table */
    r->wbytes = 0;
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if (strcmp(t->object, "target.embedding") != 0)
            r->wbytes += t->nbytes;
    }
    int vocab = eng_model_vocab(m), rc = 0;
    int32_t *ids = malloc((size_t)(n_prompt + n_gen) * sizeof *ids);
    float *logits = malloc((size_t)vocab * sizeof *logits);
    for (int i = 0; ids && i < n_prompt + n_gen; i++) ids[i] = (int32_t)((i * 7919 + 13) % vocab);
    /* warm-up: fault every bound weight page in once */
    if (!ids || !logits || eng_forward(s, ids, 1, logits, NULL, &err) < 0) rc = -1;
    eng_session_reset(s);
    double t0 = bw_now();
    if (!rc && eng_forward(s, ids, n_prompt, logits, NULL, &err) < 0) rc = -1;
    double tp = bw_now() - t0;
    t0 = bw_now();
    double c0 = cpu_now();
    for (int i = 0; !rc && i < n_gen; i++)
        if (eng_forward(s, ids + n_prompt + i, 1, logits, NULL, &err) < 0) rc = -1;
    double td = bw_now() - t0;
    r->cpu_per_tok = (cpu_now() - c0) / n_gen;
    if (rc) fprintf(stderr, "quant_decode: %s\n", err.msg[0] ? err.msg : "out of memory");
    r->pps = n_prompt / tp;
    r->dps = n_gen / td;
    free(ids);
    free(logits);
    eng_session_free(s);
    eng_model_free(m);
    vx_close(c);
    return rc;
}

int main(int argc, char **argv)
{
    const char *src = "/tmp/lql-bench/hf-bf16-22", *dir = "/tmp/lql-bench/vx-quant-22.vindex3";
    int threads = 2, n_prompt = 64, n_gen = 32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--src")) src = argv[i + 1];
        else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) n_prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gen")) n_gen = atoi(argv[i + 1]);
        else { fprintf(stderr, "quant_decode: unknown option %s\n", argv[i]); return 2; }
    }
    if (threads < 1 || n_prompt < 1 || n_gen < 1) {
        fprintf(stderr, "quant_decode: counts must be positive\n");
        return 2;
    }
    char th[16];
    snprintf(th, sizeof th, "%d", threads);
    setenv("LQL_THREADS", th, 1);
    if (prepare(src, dir) < 0) return 1;
    double ld[3] = {0};
    if (getloadavg(ld, 3) < 0) ld[0] = -1;
    double bw = bw_probe(threads);
    printf("container    %s (threads %d, load average %.2f)\n", dir, threads, ld[0]);
    printf("bandwidth    %.1f GB/s (%d threads summing 2 GB)\n", bw, threads);
    printf("%-8s %10s %10s %10s %12s %10s %10s %10s\n", "profile", "GB/token", "prompt t/s", "decode t/s",
           "cpu-ms/tok", "llama.cpp", "ratio", "b/w frac");
    static const char *profiles[] = {NULL, "q8_0", "q4_k"};
    static const double ref[] = {14.4, 23.4, 0};
    for (int p = 0; p < 3; p++) {
        result r;
        if (run(dir, profiles[p], n_prompt, n_gen, &r) < 0) return 1;
        char rs[32] = "-", rr[32] = "-";
        if (ref[p] > 0) {
            snprintf(rs, sizeof rs, "%.1f", ref[p]);
            snprintf(rr, sizeof rr, "%.2f", r.dps / ref[p]);
        }
        printf("%-8s %10.3f %10.1f %10.2f %12.1f %10s %10s %10.2f\n", profiles[p] ? profiles[p] : "bf16",
               (double)r.wbytes / 1e9, r.pps, r.dps, r.cpu_per_tok * 1e3, rs, rr, bw > 0 ? (double)r.wbytes * r.dps / (bw * 1e9) : 0);
    }
    printf("(llama.cpp: shared/models/PERF.md, idle machine; no Q4_K figure there)\n");
    return 0;
}
