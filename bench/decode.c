/*
 * decode.c — prefill and decode speed of the engine on a ~1.1B-parameter Llama-geometry
 * checkpoint (TinyLlama-1.1B shapes, random weights), against the machine's streaming-read
 * bandwidth measured in the same run.
 *
 *   decode [--dtype bf16|f16|f32] [--dir /tmp/lql-bench] [--threads 2] [--prompt 64]
 *          [--gen 32] [--layers 22] [--no-amx]
 *
 * The checkpoint (config.json + model.safetensors, written streaming with a seeded PRNG)
 * and its container are made under --dir on first use and reused afterwards. Reported:
 * prompt tokens/s, decode tokens/s, peak RSS, weight bytes read per decoded token, the
 * bandwidth probe (threads summing a 2 GB array), decode's fraction of the bandwidth
 * limit, and the ratios to llama.cpp's numbers for this machine type (shared/models/PERF.md).
 * Wall-clock numbers are printed, never asserted.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "vindex.h"
#include "engine_int.h"
#include "bandwidth.h"

#define HID 2048
#define INTER 5632
#define VOCAB 32000
#define HEADS 32
#define KVH 4
#define HD 64

/* ---------------------------------------------------------------- checkpoint writer */

typedef struct tdesc { char name[96]; int64_t r, c; int norm; } tdesc;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const tdesc *)a)->name, ((const tdesc *)b)->name);
}

static uint64_t rng = 0x243F6A8885A308D3ull;
static float rnd(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    /* sum of two uniforms: cheap, roughly bell-shaped, std ≈ 0.02 */
    double u = (double)(rng >> 40) / 16777216.0, v = (double)(rng & 0xFFFFFF) / 16777216.0;
    return (float)((u + v - 1.0) * 0.049);
}

static int write_checkpoint(const char *dir, const char *dt, int layers)
{
    char p[4096];
    int esz = strcmp(dt, "f32") == 0 ? 4 : 2;
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    fprintf(f, "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
            "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
            "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
            "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
            "  \"max_position_embeddings\": 2048,\n  \"rms_norm_eps\": 1e-05,\n"
            "  \"rope_theta\": 10000.0,\n  \"rope_scaling\": null,\n  \"hidden_act\": \"silu\",\n"
            "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"tie_word_embeddings\": false,\n"
            "  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"torch_dtype\": \"%s\",\n"
            "  \"transformers_version\": \"4.46.3\"\n}\n",
            VOCAB, HID, INTER, layers, HEADS, KVH, HD,
            strcmp(dt, "bf16") == 0 ? "bfloat16" : strcmp(dt, "f16") == 0 ? "float16" : "float32");
    fclose(f);

    int nt = 3 + 9 * layers;
    tdesc *t = calloc((size_t)nt, sizeof *t);
    int k = 0;
    snprintf(t[k].name, 96, "model.embed_tokens.weight"); t[k].r = VOCAB; t[k++].c = HID;
    snprintf(t[k].name, 96, "model.norm.weight"); t[k].r = HID; t[k].c = 0; t[k++].norm = 1;
    snprintf(t[k].name, 96, "lm_head.weight"); t[k].r = VOCAB; t[k++].c = HID;
    for (int l = 0; l < layers; l++) {
        const char *nm[9] = {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                             "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        const int64_t sh[9][2] = {{HID, 0}, {HID, 0}, {HEADS * HD, HID}, {KVH * HD, HID},
                                  {KVH * HD, HID}, {HID, HEADS * HD}, {INTER, HID},
                                  {INTER, HID}, {HID, INTER}};
        for (int i = 0; i < 9; i++) {
            snprintf(t[k].name, 96, "model.layers.%d.%s.weight", l, nm[i]);
            t[k].r = sh[i][0];
            t[k].c = sh[i][1];
            t[k++].norm = i < 2;
        }
    }
    qsort(t, (size_t)nt, sizeof *t, by_name);
    /* header */
    size_t cap = (size_t)nt * 200 + 64, len = 0;
    char *h = malloc(cap);
    uint64_t off = 0;
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    const char *sdt = strcmp(dt, "bf16") == 0 ? "BF16" : strcmp(dt, "f16") == 0 ? "F16" : "F32";
    for (int i = 0; i < nt; i++) {
        uint64_t n = (uint64_t)t[i].r * (t[i].c ? (uint64_t)t[i].c : 1) * esz;
        if (t[i].c)
            len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],"
                                    "\"data_offsets\":[%llu,%llu]}", t[i].name, sdt,
                                    (long long)t[i].r, (long long)t[i].c,
                                    (unsigned long long)off, (unsigned long long)(off + n));
        else
            len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],"
                                    "\"data_offsets\":[%llu,%llu]}", t[i].name, sdt,
                                    (long long)t[i].r, (unsigned long long)off,
                                    (unsigned long long)(off + n));
        off += n;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    f = fopen(p, "wb");
    if (!f) { free(h); free(t); return -1; }
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(h, 1, len, f);
    enum { CH = 1 << 16 };
    static unsigned char buf[CH * 4];
    for (int i = 0; i < nt; i++) {
        uint64_t n = (uint64_t)t[i].r * (t[i].c ? (uint64_t)t[i].c : 1);
        for (uint64_t done = 0; done < n;) {
            uint64_t m = n - done < CH ? n - done : CH;
            for (uint64_t j = 0; j < m; j++) {
                float v = t[i].norm ? 1.0f + rnd() : rnd();
                if (esz == 4) memcpy(buf + j * 4, &v, 4);
                else {
                    uint16_t b = strcmp(dt, "bf16") == 0 ? vx_f32_to_bf16(v) : vx_f32_to_f16(v);
                    memcpy(buf + j * 2, &b, 2);
                }
            }
            fwrite(buf, (size_t)esz, (size_t)m, f);
            done += m;
        }
    }
    int rc = fclose(f) ? -1 : 0;
    free(h);
    free(t);
    return rc;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    const char *dt = "bf16", *dir = "/tmp/lql-bench";
    int threads = 2, n_prompt = 64, n_gen = 32, layers = 22;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--no-amx")) { setenv("LQL_NO_AMX", "1", 1); continue; }
        if (i + 1 >= argc) { fprintf(stderr, "decode: %s needs a value\n", o); return 2; }
        const char *v = argv[++i];
        if (!strcmp(o, "--dtype")) dt = v;
        else if (!strcmp(o, "--dir")) dir = v;
        else if (!strcmp(o, "--threads")) threads = atoi(v);
        else if (!strcmp(o, "--prompt")) n_prompt = atoi(v);
        else if (!strcmp(o, "--gen")) n_gen = atoi(v);
        else if (!strcmp(o, "--layers")) layers = atoi(v);
        else { fprintf(stderr, "decode: unknown option %s\n", o); return 2; }
    }
    if (strcmp(dt, "bf16") && strcmp(dt, "f16") && strcmp(dt, "f32")) {
        fprintf(stderr, "decode: --dtype must be bf16, f16 or f32\n");
        return 2;
    }
    if (threads < 1 || n_prompt < 1 || n_gen < 1 || layers < 1) {
        fprintf(stderr, "decode: counts must be positive\n");
        return 2;
    }
    char th[16];
    snprintf(th, sizeof th, "%d", threads);
    setenv("LQL_THREADS", th, 1);

    char hf[2048], vx[2048];
    mkdir(dir, 0755);
    snprintf(hf, sizeof hf, "%s/hf-%s-%d", dir, dt, layers);
    snprintf(vx, sizeof vx, "%s/vx-%s-%d.vindex3", dir, dt, layers);
    vx_err err = {0};
    struct stat st;
    if (stat(vx, &st) != 0) {
        char cfg[2100];
        snprintf(cfg, sizeof cfg, "%s/model.safetensors", hf);
        if (stat(cfg, &st) != 0) {
            double t0 = bw_now();
            if (write_checkpoint(hf, dt, layers)) { fprintf(stderr, "decode: cannot write %s\n", hf); return 1; }
            fprintf(stderr, "decode: wrote %s in %.1f s\n", hf, bw_now() - t0);
        }
        vx_encode_opts o;
        vx_encode_opts_init(&o);
        double t0 = bw_now();
        if (vx_encode(hf, vx, &o, &err)) { fprintf(stderr, "decode: encode: %s\n", err.msg); return 1; }
        fprintf(stderr, "decode: encoded %s in %.1f s\n", vx, bw_now() - t0);
    }
    vx_container *c;
    eng_model *m;
    eng_session *s;
    if (vx_open(vx, &c, &err) || eng_model_bind(c, &m, &err) ||
        eng_session_new(m, n_prompt + n_gen + 8, &s, &err)) {
        fprintf(stderr, "decode: %s\n", err.msg);
        return 1;
    }
    /* bytes streamed per decoded token: every matrix except the embedding table (one row) */
    uint64_t wbytes = 0;
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if (!(strcmp(t->object, "target.embedding") == 0 && strcmp(t->name, "weight") == 0))
            wbytes += t->nbytes;
    }
    int32_t *ids = malloc((size_t)(n_prompt + n_gen) * sizeof *ids);
    for (int i = 0; i < n_prompt + n_gen; i++) ids[i] = (int32_t)((i * 7919 + 13) % VOCAB);
    float *logits = malloc(VOCAB * sizeof *logits);

    double bw = bw_probe(threads);
    /* warm-up: fault every weight page in once, so both timings see a resident model */
    if (eng_forward(s, ids, 1, logits, NULL, &err)) { fprintf(stderr, "decode: %s\n", err.msg); return 1; }
    eng_session_reset(s);

    double t0 = bw_now();
    if (eng_forward(s, ids, n_prompt, logits, NULL, &err)) { fprintf(stderr, "decode: %s\n", err.msg); return 1; }
    double tp = bw_now() - t0;
    t0 = bw_now();
    for (int i = 0; i < n_gen; i++)
        if (eng_forward(s, ids + n_prompt + i, 1, logits, NULL, &err)) {
            fprintf(stderr, "decode: %s\n", err.msg);
            return 1;
        }
    double td = bw_now() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double ld[3] = {0};
    if (getloadavg(ld, 3) < 0) ld[0] = -1;

    const double ref_p = !strcmp(dt, "bf16") ? 156.3 : !strcmp(dt, "f16") ? 80.6 : 60.7;
    const double ref_d = !strcmp(dt, "bf16") ? 14.4 : !strcmp(dt, "f16") ? 15.9 : 8.1;
    double pps = n_prompt / tp, dps = n_gen / td, frac = wbytes * dps / (bw * 1e9);
    printf("model        %s, %d layers, %.2f B params, %.2f GB streamed per token\n", dt, layers,
           (double)wbytes / (strcmp(dt, "f32") ? 2 : 4) / 1e9 + (double)VOCAB * HID / 1e9,
           wbytes / 1e9);
    printf("threads      %d (load average before the run: %.2f)\n", threads, ld[0]);
    printf("prefill      %s\n", eng_amx_ready() && strcmp(dt, "f32")
                                    ? "AMX tiles (split bf16 parts, f32 accuracy)"
                                    : "f32 tiles + sgemm");
    printf("bandwidth    %.1f GB/s (%d threads summing 2 GB)\n", bw, threads);
    printf("prompt       %d tokens in %.3f s = %.1f tokens/s (llama.cpp %.1f: ratio %.2f)\n",
           n_prompt, tp, pps, ref_p, pps / ref_p);
    printf("decode       %d tokens in %.3f s = %.2f tokens/s (llama.cpp %.1f: ratio %.2f)\n",
           n_gen, td, dps, ref_d, dps / ref_d);
    printf("decode b/w   %.1f GB/s = %.2f of the probe\n", wbytes * dps / 1e9, frac);
    printf("peak rss     %.0f MB\n", ru.ru_maxrss / 1024.0);
    eng_session_free(s);
    eng_model_free(m);
    vx_close(c);
    free(ids);
    free(logits);
    return 0;
}
