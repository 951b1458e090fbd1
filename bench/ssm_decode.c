/*
 * ssm_decode.c — decode cost of a recurrent (Mamba2) model against context length: a
 * generated ~115M-parameter Mamba2 (hidden 768, 24 layers, 24 heads x 64, state 128, one
 * group, conv 4, vocab 32000 tied; random weights with dt, A and D in their trained
 * ranges so the recurrence stays bounded), decoded at position 64 and at position 2048.
 * A recurrent layer carries fixed-size state (conv window + SSM state), so the two rates
 * should be the same; an attention model's would fall as its KV cache grows. Near and far
 * alternate over three rounds (best of each reported), in wall-clock and in CPU time (the
 * figure to read on a loaded machine, with --threads 1). Also printed: the declared state
 * (bytes fixed, bytes per position) and the prefill rate.
 *
 *   ssm_decode [--dtype bf16|f32] [--dir /tmp/lql-bench] [--threads 2] [--gen 32]
 *              [--near 64] [--far 2048]
 *
 * The checkpoint and its container are made under --dir on first use and reused. Wall-clock
 * numbers are printed, never asserted.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "vindex.h"
#include "engine_int.h"
#include "bandwidth.h"
#include "st_header.h"

enum { HID = 768, LAYERS = 24, HEADS = 24, HD = 64, NST = 128, CONV = 4, VOCAB = 32000 };
enum { INNER = HEADS * HD, CONVD = INNER + 2 * NST, PROJ = 2 * INNER + 2 * NST + HEADS };

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uni(void) /* [0, 1) */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* What a tensor is filled with: a matrix (std ~0.02), ones (norms, D), the conv taps, or a
 * per-head parameter in its trained range. */
typedef enum { W_MAT, W_ONE, W_CONV, W_ALOG, W_DTB } fill;
typedef struct tdesc { char name[80]; int64_t shape[3]; int nd; fill f; } tdesc;

static float value(fill f, int64_t i)
{
    switch (f) {
    case W_ONE: return 1.0f;
    case W_CONV: return (float)((uni() - 0.5) * 0.5);
    case W_ALOG: return (float)log(1.0 + 15.0 * (double)(i % HEADS) / HEADS);     /* A in [-16, -1] */
    case W_DTB: {                                           /* dt = softplus(dt_bias) in [1e-3, 0.1] */
        double dt = exp(log(1e-3) + (log(0.1) - log(1e-3)) * uni());
        return (float)(dt + log(-expm1(-dt)));
    }
    default: return (float)((uni() + uni() - 1.0) * 0.049);
    }
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const tdesc *)a)->name, ((const tdesc *)b)->name);
}

static int write_checkpoint(const char *dir, int bf16)
{
    char p[4096];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    fprintf(f, "{\"architectures\": [\"Mamba2ForCausalLM\"], \"model_type\": \"mamba2\", "
            "\"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_heads\": %d, \"head_dim\": %d, "
            "\"expand\": 2, \"n_groups\": 1, \"state_size\": %d, \"conv_kernel\": %d, "
            "\"vocab_size\": %d, \"layer_norm_epsilon\": 1e-05, \"use_bias\": false, "
            "\"use_conv_bias\": true, \"hidden_act\": \"silu\", \"tie_word_embeddings\": true, "
            "\"time_step_limit\": [0.0, 1000.0], \"bos_token_id\": 0, \"eos_token_id\": 0, "
            "\"torch_dtype\": \"%s\"}\n", HID, LAYERS, HEADS, HD, NST, CONV, VOCAB,
            bf16 ? "bfloat16" : "float32");
    fclose(f);
    tdesc *t = calloc(2 + 9 * LAYERS, sizeof *t);
    int k = 0;
    t[k++] = (tdesc){"backbone.embeddings.weight", {VOCAB, HID}, 2, W_MAT};
    t[k++] = (tdesc){"backbone.norm_f.weight", {HID}, 1, W_ONE};
    for (int l = 0; l < LAYERS; l++) {
        const struct { const char *n; int64_t s[3]; int nd; fill f; } d[9] = {
            {"norm.weight", {HID}, 1, W_ONE}, {"mixer.in_proj.weight", {PROJ, HID}, 2, W_MAT},
            {"mixer.conv1d.weight", {CONVD, 1, CONV}, 3, W_CONV}, {"mixer.conv1d.bias", {CONVD}, 1, W_CONV},
            {"mixer.dt_bias", {HEADS}, 1, W_DTB}, {"mixer.A_log", {HEADS}, 1, W_ALOG},
            {"mixer.D", {HEADS}, 1, W_ONE}, {"mixer.norm.weight", {INNER}, 1, W_ONE},
            {"mixer.out_proj.weight", {HID, INNER}, 2, W_MAT}};
        for (int i = 0; i < 9; i++, k++) {
            snprintf(t[k].name, sizeof t[k].name, "backbone.layers.%d.%s", l, d[i].n);
            memcpy(t[k].shape, d[i].s, sizeof d[i].s);
            t[k].nd = d[i].nd;
            t[k].f = d[i].f;
        }
    }
    qsort(t, (size_t)k, sizeof *t, by_name);
    /* every tensor in the model dtype except the per-head SSM parameters, kept f32 as
     * converted checkpoints keep them */
    st_header sh;
    if (st_header_begin(&sh, k)) { free(t); return -1; }
    for (int i = 0; i < k; i++) {
        int f32 = !bf16 || t[i].f == W_ALOG || t[i].f == W_DTB;
        st_header_add(&sh, t[i].name, f32 ? "F32" : "BF16", t[i].shape, t[i].nd, f32 ? 4 : 2);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    f = fopen(p, "wb");
    if (!f || st_header_write(&sh, f)) {
        if (f) fclose(f);
        free(sh.h);
        free(t);
        return -1;
    }
    for (int i = 0; i < k; i++) {
        int64_t n = 1;
        for (int d = 0; d < t[i].nd; d++) n *= t[i].shape[d];
        int f32 = !bf16 || t[i].f == W_ALOG || t[i].f == W_DTB;
        for (int64_t j = 0; j < n; j++) {
            float v = value(t[i].f, j);
            if (f32) fwrite(&v, 4, 1, f);
            else {
                uint16_t b = vx_f32_to_bf16(v);
                fwrite(&b, 2, 1, f);
            }
        }
    }
    int rc = fclose(f) ? -1 : 0;
    free(t);
    return rc;
}

/* CPU seconds of this process: on a loaded machine the wall clock measures the queue,
 * CPU time what decoding costs (with --threads 1 it is the one thread's work). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Decode rate after a prompt of `at` tokens: gen single-token forwards, tokens/s of wall
 * time (returned) and of CPU time (*cpu_tps). */
static double decode_at(eng_session *s, const int32_t *ids, int at, int gen, float *logits,
                        double *prefill_tps, double *cpu_tps, vx_err *err)
{
    eng_session_reset(s);
    double t0 = bw_now();
    if (eng_forward(s, ids, at, logits, NULL, err)) return -1;
    *prefill_tps = at / (bw_now() - t0);
    t0 = bw_now();
    double c0 = cpu_now();
    for (int i = 0; i < gen; i++)
        if (eng_forward(s, ids + at + i, 1, logits, NULL, err)) return -1;
    *cpu_tps = gen / (cpu_now() - c0);
    return gen / (bw_now() - t0);
}

int main(int argc, char **argv)
{
    const char *dir = "/tmp/lql-bench", *dt = "bf16";
    int threads = 2, gen = 32, near = 64, far = 2048;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (i + 1 >= argc) { fprintf(stderr, "ssm_decode: %s needs a value\n", o); return 2; }
        const char *v = argv[++i];
        if (!strcmp(o, "--dtype")) dt = v;
        else if (!strcmp(o, "--dir")) dir = v;
        else if (!strcmp(o, "--threads")) threads = atoi(v);
        else if (!strcmp(o, "--gen")) gen = atoi(v);
        else if (!strcmp(o, "--near")) near = atoi(v);
        else if (!strcmp(o, "--far")) far = atoi(v);
        else { fprintf(stderr, "ssm_decode: unknown option %s\n", o); return 2; }
    }
    if ((strcmp(dt, "bf16") && strcmp(dt, "f32")) || threads < 1 || gen < 1 || near < 1 ||
        far <= near) {
        fprintf(stderr, "ssm_decode: --dtype bf16|f32, positive counts, --far above --near\n");
        return 2;
    }
    char th[16];
    snprintf(th, sizeof th, "%d", threads);
    setenv("LQL_THREADS", th, 1);
    char hf[2048], vx[2048], st_path[2100];
    mkdir(dir, 0755);
    snprintf(hf, sizeof hf, "%s/mamba2-%s", dir, dt);
    snprintf(vx, sizeof vx, "%s/mamba2-%s.vindex3", dir, dt);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", hf);
    vx_err err = {0};
    struct stat st;
    if (stat(vx, &st) != 0) {
        if (stat(st_path, &st) != 0 && write_checkpoint(hf, !strcmp(dt, "bf16"))) {
            fprintf(stderr, "ssm_decode: cannot write %s\n", hf);
            return 1;
        }
        vx_encode_opts o;
        vx_encode_opts_init(&o);
        if (vx_encode(hf, vx, &o, &err)) { fprintf(stderr, "ssm_decode: encode: %s\n", err.msg); return 1; }
    }
    vx_container *c;
    eng_model *m;
    eng_session *s;
    if (vx_open(vx, &c, &err) || eng_model_bind(c, &m, &err) ||
        eng_session_new(m, far + gen, &s, &err)) {
        fprintf(stderr, "ssm_decode: %s\n", err.msg);
        return 1;
    }
    uint64_t params = 0;
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        uint64_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
        params += n;
    }
    const vx_graph_shape *g = vx_shape_of(c);
    int32_t *ids = malloc((size_t)(far + gen) * sizeof *ids);
    for (int i = 0; i < far + gen; i++) ids[i] = (int32_t)((i * 7919 + 13) % VOCAB);
    float *logits = malloc(VOCAB * sizeof *logits);
    double p_near, p_far, warm, ca, cb;
    /* warm-up: fault every weight page in once */
    if (decode_at(s, ids, 1, 1, logits, &warm, &ca, &err) < 0) { fprintf(stderr, "ssm_decode: %s\n", err.msg); return 1; }
    /* near and far alternate, three rounds, the best of each kept: on a shared machine the
     * load moves between rounds, and alternating keeps it from favouring one position */
    double d_near = 0, d_far = 0, c_near = 0, c_far = 0;
    for (int r = 0; r < 3; r++) {
        double a = decode_at(s, ids, near, gen, logits, &p_near, &ca, &err);
        double b = a < 0 ? -1 : decode_at(s, ids, far, gen, logits, &p_far, &cb, &err);
        if (b < 0) { fprintf(stderr, "ssm_decode: %s\n", err.msg); return 1; }
        printf("round %d      at %d: %.2f tokens/s (cpu %.2f), at %d: %.2f tokens/s (cpu %.2f)\n", r,
               near, a, ca, far, b, cb);
        if (a > d_near) d_near = a;
        if (b > d_far) d_far = b;
        if (ca > c_near) c_near = ca;
        if (cb > c_far) c_far = cb;
    }
    int finite = 1;
    for (int i = 0; i < VOCAB; i++) finite &= isfinite(logits[i]) != 0;
    double ld[3] = {0};
    if (getloadavg(ld, 3) < 0) ld[0] = -1;
    printf("model        mamba2 %s, %d layers, hidden %d, %.0fM params\n", dt, LAYERS, HID, params / 1e6);
    printf("state        %llu bytes fixed, %llu bytes per position (declared by the graph)\n",
           (unsigned long long)g->state_fixed, (unsigned long long)g->state_per_token);
    printf("threads      %d (load average before the run: %.2f)\n", threads, ld[0]);
    printf("prefill      %d tokens: %.1f tokens/s; %d tokens: %.1f tokens/s\n", near, p_near, far, p_far);
    printf("decode       best of 3, at position %d: %.2f tokens/s; at %d: %.2f tokens/s (ratio %.3f)\n",
           near, d_near, far, d_far, d_far / d_near);
    printf("decode cpu   best of 3, at position %d: %.2f tokens/cpu-s; at %d: %.2f (ratio %.3f)\n",
           near, c_near, far, c_far, c_far / c_near);
    printf("logits       %s after %d positions\n", finite ? "finite" : "NOT FINITE", far + gen);
    eng_session_free(s);
    eng_model_free(m);
    vx_close(c);
    free(ids);
    free(logits);
    return 0;
}
