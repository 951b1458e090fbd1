/*
 * ckpt.h — the benchmarks' model: a ~1.1B-parameter Llama-geometry checkpoint (TinyLlama-1.1B
 * shapes: hidden 2048, 22 layers, 32 heads, 4 KV heads, head_dim 64, intermediate 5632,
 * vocab 32000, untied head; random weights from a seeded PRNG, written streaming) and its
 * containers, made under one directory on first use and reused afterwards:
 *   DIR/hf-DT-L          config.json + model.safetensors (DT bf16, f16 or f32; L layers)
 *   DIR/vx-DT-L.vindex3  its container in the source dtype; bench_quant() adds the q8_0 and
 *                        q4_k representations of the decoder stack and output head, with a
 *                        profile named after each (REPRESENT's names).
 * This is the same geometry as llama.cpp's bench-1b GGUFs, so the two run the same shapes.
 * Header-only (static) because CMake builds every bench source as its own executable.
 */
#ifndef LQL_BENCH_CKPT_H
#define LQL_BENCH_CKPT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "vindex.h"
#include "bandwidth.h"
#include "st_header.h"

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
    const char *sdt = strcmp(dt, "bf16") == 0 ? "BF16" : strcmp(dt, "f16") == 0 ? "F16" : "F32";
    st_header sh;
    if (st_header_begin(&sh, nt)) { free(t); return -1; }
    for (int i = 0; i < nt; i++) {
        const int64_t shape[2] = {t[i].r, t[i].c};
        st_header_add(&sh, t[i].name, sdt, shape, t[i].c ? 2 : 1, (int)esz);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    f = fopen(p, "wb");
    if (!f || st_header_write(&sh, f)) {
        if (f) fclose(f);
        free(sh.h);
        free(t);
        return -1;
    }
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
    free(t);
    return rc;
}

/* The container DIR/vx-DT-L.vindex3 (path into out), writing the checkpoint and encoding it
 * when missing. 0 or -1 (printed). */
static int bench_container(const char *dir, const char *dt, int layers, char *out, size_t cap)
{
    char hf[2048], cfg[2100];
    struct stat st;
    vx_err err = {0};
    mkdir(dir, 0755);
    if ((size_t)snprintf(hf, sizeof hf, "%s/hf-%s-%d", dir, dt, layers) >= sizeof hf ||
        (size_t)snprintf(out, cap, "%s/vx-%s-%d.vindex3", dir, dt, layers) >= cap) {
        fprintf(stderr, "bench: directory name too long: %s\n", dir);
        return -1;
    }
    if (stat(out, &st) == 0) return 0;
    snprintf(cfg, sizeof cfg, "%s/model.safetensors", hf);
    if (stat(cfg, &st) != 0) {
        double t0 = bw_now();
        if (write_checkpoint(hf, dt, layers)) { fprintf(stderr, "bench: cannot write %s\n", hf); return -1; }
        fprintf(stderr, "bench: wrote %s in %.1f s\n", hf, bw_now() - t0);
    }
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    double t0 = bw_now();
    if (vx_encode(hf, out, &o, &err)) { fprintf(stderr, "bench: encode: %s\n", err.msg); return -1; }
    fprintf(stderr, "bench: encoded %s in %.1f s\n", out, bw_now() - t0);
    return 0;
}

/* Represent the decoder stack and output head of container `vx` as dt (Q8_0, Q4_K, ...)
 * and add the profile vx_dtype_name(dt) selecting both, unless it is there already. */
static int bench_quant(const char *vx, vx_dtype dt)
{
    static const char *objs[] = {"target.decoder_stack", "target.output_head"};
    vx_err err = {0};
    for (int k = 0; k < 2; k++) {
        vx_container *c = NULL;
        if (vx_open(vx, &c, &err) < 0) { fprintf(stderr, "bench: %s\n", err.msg); return -1; }
        char id[256];
        snprintf(id, sizeof id, "%s.%s", objs[k], vx_dtype_name(dt));
        vx_rep_totals tot;
        int have = vx_representation_totals(c, id, &tot) == 0;
        vx_close(c);
        if (have) continue;
        vx_represent_info in;
        double t0 = bw_now();
        if (vx_represent(vx, objs[k], dt, &in, &err) < 0) { fprintf(stderr, "bench: %s\n", err.msg); return -1; }
        double secs = bw_now() - t0;
        fprintf(stderr, "bench: represented %s as %s in %.1f s (%.1f M weights/s, %.3f bits/weight)\n",
                objs[k], vx_dtype_name(dt), secs, (double)in.weights / secs / 1e6,
                8.0 * (double)in.bytes / (double)in.weights);
        vx_select sel = {objs[k], in.id};
        if (vx_profile_add(vx, vx_dtype_name(dt), &sel, 1, 1, &err) < 0) {
            fprintf(stderr, "bench: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

#endif
