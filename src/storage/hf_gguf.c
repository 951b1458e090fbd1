/*
 * hf_gguf.c — a container as a GGUF v3 file for llama.cpp (vindex.h, vx_export_gguf).
 * The family's llama.cpp architecture (the table below: llama, qwen2, phi3, olmo2, gpt2,
 * gemma2) must compute exactly what the container's execution surface says; every departure
 * is refused naming family and construct, and families with no such architecture are
 * refused with the reason. Tensors are laid out as convert_hf_to_gguf.py lays them out: llama.cpp's
 * names, q|k|v and gate|up rows fused where the architecture fuses them, experts stacked.
 * Tensors keep their stored dtype (F32, F16, BF16) and bytes, except 16-bit vectors (norm
 * weights), widened exactly to F32 because ggml multiplies only by F32 vectors (as
 * convert_hf_to_gguf.py writes them), and llama's q_proj and k_proj, whose rows are permuted as
 * convert_hf_to_gguf.py's LlamaModel.permute does: per head, HF's rotate-half order
 * [first halves | second halves] becomes llama.cpp's interleaved pairs (new row
 * h·d + 2i + j = old row h·d + j·d/2 + i). The tokenizer travels as tokenizer.ggml.*
 * metadata: a byte-level BPE tokenizer.json (model "gpt2", pre-tokenizer "gpt-2", Llama
 * 3's "llama-bpe" or Qwen2's "qwen2", merges) or Llama 2's SentencePiece BPE (model "llama", scores
 * from the merge ranks), tokens by id, token types, bos/eos and add_bos. Layout (ggml's
 * docs/gguf.md): header, key-values, tensor infos, padding to general.alignment (32), then
 * each tensor's data padded to the alignment.
 */
#define _GNU_SOURCE
#include "hf_int.h"
#include "vx_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ALIGN 32

enum { G_U8 = 0, G_U32 = 4, G_I32 = 5, G_F32 = 6, G_BOOL = 7, G_STR = 8, G_ARR = 9 };
enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5, T_BYTE = 6 };

/* A growing byte buffer: the header, key-values and tensor infos are built in memory. */
typedef struct buf {
    unsigned char *p;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const void *p, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }

static void kv_u32(buf *b, size_t *n, const char *k, uint32_t v) { str(b, k); u32(b, G_U32); u32(b, v); ++*n; }
static void kv_f32(buf *b, size_t *n, const char *k, float v) { str(b, k); u32(b, G_F32); put(b, &v, 4); ++*n; }
static void kv_str(buf *b, size_t *n, const char *k, const char *v) { str(b, k); u32(b, G_STR); str(b, v); ++*n; }
/* An array's key and header; its n elements follow. */
static void kv_array(buf *b, size_t *n, const char *k, uint32_t type, uint64_t count)
{
    str(b, k);
    u32(b, G_ARR);
    u32(b, type);
    u64(b, count);
    ++*n;
}
static void kv_bool(buf *b, size_t *n, const char *k, int v)
{
    unsigned char c = v != 0;
    str(b, k);
    u32(b, G_BOOL);
    put(b, &c, 1);
    ++*n;
}

/* ---------------------------------------------------------------- what llama.cpp runs */

static const cJSON *jp(const cJSON *o, const char *path)
{
    char k[64];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        snprintf(k, sizeof k, "%.*s", (int)n, path);
        o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(k))
                             : cJSON_GetObjectItemCaseSensitive(o, k);
        path += n + (path[n] == '.');
    }
    return o;
}

static double jnum(const cJSON *o, const char *path)
{
    const cJSON *v = jp(o, path);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* llama.cpp architectures the writer targets, each checked by hand against llama.cpp
 * (docs/lql/MUTATION.md "Export"): what the container's execution surface must be for
 * llama.cpp's graph of that architecture to compute the same function, and how the
 * tensors are laid out there. */
typedef struct garch {
    const char *name;                  /* general.architecture and the key prefix */
    const char *families[4];           /* index.json families written as this architecture */
    int permute;                       /* rope LLAMA_ROPE_TYPE_NORM: q/k rows interleaved */
    int fused_qkv, fused_gate_up;      /* attn_qkv = q|k|v rows, ffn_up = gate|up rows */
    int output_required;               /* a tied model writes token_embd again as output */
    int full_heads;                    /* the loader wants heads·head_dim = hidden */
    int mha;                           /* the loader sizes k and its norm by the hidden size */
    int gemma2;                        /* norms 1 + w, windows on even layers, size-set scale */
    const char *const *want;           /* "path=value" of the surface; '-' absent/false */
} garch;

/* what every rotary, RMS-normed, gated-SiLU architecture below computes */
#define ROPE_RMS_SILU "norm.kind=rms", "norm.bias=-", "norm.weight_offset=0", \
    "embedding.scale=1", "embedding.positions=-", "attention.rope.style=rotate_half", \
    "attention.rope.scaling=-", "attention.softcap=-", "attention.output_gate=-", \
    "attention.sinks=-", "attention.out_bias=-", "ffn.kind=gated", "ffn.activation=silu", \
    "ffn.bias=-", "mla=-", "mamba2=-", "gated_deltanet=-", "residual_scale=-", \
    "lm_head.softcap=-", "lm_head.logits_divisor=-", "final_norm=+"
#define PRE_NORMS "pre_norms.attn=+", "pre_norms.ffn=+", "post_norms.attn=-", "post_norms.ffn=-"

static const char *const want_llama[] = {ROPE_RMS_SILU, PRE_NORMS, "attention.qkv_bias=-",
                                         "attention.qk_norm=-", NULL};
static const char *const want_qwen2[] = {ROPE_RMS_SILU, PRE_NORMS, "attention.qkv_bias=+",
                                         "attention.qk_norm=-", "moe=-", NULL};
static const char *const want_phi3[] = {ROPE_RMS_SILU, PRE_NORMS, "attention.qkv_bias=-",
                                        "attention.qk_norm=-", "moe=-", NULL};
static const char *const want_olmo2[] = {ROPE_RMS_SILU, "pre_norms.attn=-", "pre_norms.ffn=-",
                                         "post_norms.attn=+", "post_norms.ffn=+",
                                         "attention.qkv_bias=-", "attention.qk_norm=projection",
                                         "moe=-", NULL};
static const char *const want_gemma2[] = {
    "norm.kind=rms", "norm.bias=-", "norm.weight_offset=1", "embedding.positions=-",
    "attention.rope.style=rotate_half", "attention.rope.scaling=-", "attention.output_gate=-",
    "attention.sinks=-", "attention.qkv_bias=-", "attention.out_bias=-", "attention.qk_norm=-",
    "ffn.kind=gated", "ffn.activation=gelu_tanh", "ffn.bias=-", "mla=-", "moe=-", "mamba2=-",
    "gated_deltanet=-", "residual_scale=-", "lm_head.logits_divisor=-", "lm_head.tied=+",
    "pre_norms.attn=+", "pre_norms.ffn=+", "post_norms.attn=+", "post_norms.ffn=+",
    "final_norm=+", NULL};
static const char *const want_gpt2[] = {
    "norm.kind=layer", "norm.bias=+", "embedding.scale=1", "embedding.positions=learned",
    "attention.rope=-", "attention.softcap=-", "attention.qk_norm=-", "attention.output_gate=-",
    "attention.sinks=-", "attention.qkv_bias=+", "attention.out_bias=+", "ffn.kind=plain",
    "ffn.activation=gelu_tanh", "ffn.bias=+", "mla=-", "moe=-", "mamba2=-",
    "gated_deltanet=-", "residual_scale=-", "lm_head.softcap=-", "lm_head.logits_divisor=-",
    "final_norm=+", PRE_NORMS, NULL};
/* llama.cpp's llama MoE (Mixtral): softmax over the router, top-k renormalised, no
 * shared expert, no biases */
static const char *const want_moe[] = {
    "moe.scoring=softmax", "moe.normalise=+", "moe.n_group=1", "moe.routed_scaling=1",
    "moe.shared=-", "moe.router_bias=-", "moe.expert_bias=-", "moe.score_correction_bias=-",
    "moe.expert_activation=-", NULL};

static const garch archs[] = {
    /* name, families, permute, fused_qkv, fused_gate_up, output_required, full_heads, mha,
     * gemma2, want; MoE (want_moe) only where want does not say "moe=-" */
    {"llama", {"llama", "mistral", "mixtral"}, 1, 0, 0, 0, 0, 0, 0, want_llama},
    {"qwen2", {"qwen2"}, 0, 0, 0, 0, 1, 0, 0, want_qwen2},
    {"phi3", {"phi3"}, 0, 1, 1, 1, 1, 0, 0, want_phi3},
    {"olmo2", {"olmo2"}, 0, 0, 0, 1, 1, 1, 0, want_olmo2},
    {"gpt2", {"gpt2"}, 0, 1, 0, 1, 1, 1, 0, want_gpt2},
    {"gemma2", {"gemma2"}, 0, 0, 0, 0, 0, 0, 1, want_gemma2},
};

/* Families with no GGUF form here, and the construct that keeps them out. */
static const struct { const char *family, *why; } refused[] = {
    {"qwen3", "q/k head norms: llama.cpp's qwen3 architecture is newer than the llama.cpp the "
              "writer is checked against"},
    {"qwen3_moe", "q/k head norms and dense layers between MoE layers: llama.cpp's qwen3moe "
                  "architecture is newer than the llama.cpp the writer is checked against"},
    {"qwen2_moe", "dense layers between MoE layers (mlp_only_layers) and the sigmoid-gated "
                  "shared expert: llama.cpp's qwen2moe makes every layer MoE"},
    {"gemma3_text", "no gemma3 architecture in the llama.cpp the writer is checked against"},
    {"deepseek_v3", "multi-head latent attention and the grouped sigmoid router"},
    {"gpt_oss", "attention sinks, clamped SwiGLU experts and YaRN rope"},
    {"granitemoehybrid", "Mamba2 layers"},
    {"mamba2", "Mamba2 layers"},
    {"qwen3_next", "gated DeltaNet layers"},
};

/* One "path=value" requirement: '-' absent, null or false; '+' true; a number; a string. */
static int want_ok(const cJSON *x, const char *w, char *path, size_t n, const char **val)
{
    const char *eq = strchr(w, '=');
    snprintf(path, n, "%.*s", (int)(eq - w), w);
    *val = eq + 1;
    const cJSON *v = jp(x, path);
    if (!strcmp(*val, "-"))
        return !v || cJSON_IsNull(v) || cJSON_IsFalse(v);
    if (!strcmp(*val, "+"))
        return cJSON_IsTrue(v);
    if (cJSON_IsNumber(v))
        return v->valuedouble == atof(*val);
    return cJSON_IsString(v) && !strcmp(v->valuestring, *val);
}

/* The architecture that computes what the container does; refuse the first thing that
 * differs, naming the family and the construct. */
static int gguf_arch(const vx_container *c, const cJSON *x, const cJSON *comp,
                     const garch **out, double *window, vx_err *err)
{
    const char *family = vx_json_str(vx_index_json(c), "family");
    const garch *a = NULL;
    for (size_t i = 0; !a && family && i < sizeof archs / sizeof *archs; i++)
        for (int k = 0; k < 4 && archs[i].families[k]; k++)
            if (!strcmp(family, archs[i].families[k]))
                a = &archs[i];
    if (!a) {
        for (size_t i = 0; family && i < sizeof refused / sizeof *refused; i++)
            if (!strcmp(family, refused[i].family))
                return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s' is not written "
                               "as GGUF: %s (export FORMAT SAFETENSORS and convert it with "
                               "llama.cpp's convert_hf_to_gguf.py)", family, refused[i].why);
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s' has no GGUF mapping in "
                       "lql (export FORMAT SAFETENSORS and convert it with llama.cpp's "
                       "convert_hf_to_gguf.py)", family ? family : "?");
    }
    const int moe = jp(x, "moe") && !cJSON_IsNull(jp(x, "moe"));
    for (int pass = 0; pass < 1 + moe; pass++)
        for (const char *const *w = pass ? want_moe : a->want; *w; w++) {
            char path[64];
            const char *val;
            if (want_ok(x, *w, path, sizeof path, &val))
                continue;
            const cJSON *v = jp(x, path);
            char *have = v && !cJSON_IsObject(v) ? cJSON_PrintUnformatted(v) : NULL;
            vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': execution.%s is %s; "
                    "llama.cpp's %s architecture %s%s", family, path,
                    have ? have : v ? "set" : "absent",
                    a->name, !strcmp(val, "-") ? "has no form for it" : "computes ",
                    !strcmp(val, "-") ? "" : !strcmp(val, "+") ? "it" : val);
            free(have);
            return -1;
        }
    const double hd = jnum(x, "attention.head_dim"), hidden = jnum(comp, "hidden_size");
    const double layers = jnum(comp, "num_layers");
    if (a->gemma2 && layers != 26 && layers != 42 && layers != 46)
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': %g layers; llama.cpp's "
                       "gemma2 architecture sets its query scale by the model size (26, 42 or 46 "
                       "layers) and aborts on any other", family, layers);
    /* gemma2's 27B (46 layers) scales queries by 1/sqrt(hidden / heads) */
    const double sd = a->gemma2 && layers == 46 ? hidden / jnum(x, "attention.heads") : hd;
    if (fabs(jnum(x, "attention.scale") * sqrt(sd) - 1) > 1e-6)
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': attention.scale %g is "
                       "not 1/sqrt(%g); llama.cpp's %s architecture has no other", family,
                       jnum(x, "attention.scale"), sd, a->name);
    if (a->gemma2 && (fabs(jnum(x, "embedding.scale") - sqrt(hidden)) > 1e-6 * sqrt(hidden) ||
                      jnum(x, "attention.softcap") <= 0 || jnum(x, "lm_head.softcap") <= 0))
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': llama.cpp's gemma2 "
                       "architecture scales the embedding by sqrt(hidden) and soft-caps both "
                       "attention and logits", family);
    if (jp(x, "attention.rope") && !cJSON_IsNull(jp(x, "attention.rope")) &&
        jnum(x, "attention.rope.rotary_dim") != hd)
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': rope covers %g of %g "
                       "head dimensions; the writer rotates whole heads", family,
                       jnum(x, "attention.rope.rotary_dim"), hd);
    if (a->full_heads && jnum(x, "attention.heads") * hd != jnum(comp, "hidden_size"))
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': heads x head_dim is not "
                       "the hidden size; llama.cpp's %s architecture sizes q by the hidden "
                       "size", family, a->name);
    if (a->mha && jnum(x, "attention.kv_heads") != jnum(x, "attention.heads"))
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': %g kv heads for %g "
                       "query heads (grouped-query attention); llama.cpp's %s architecture "
                       "sizes k%s by the hidden size", family, jnum(x, "attention.kv_heads"),
                       jnum(x, "attention.heads"), a->name,
                       cJSON_IsString(jp(x, "attention.qk_norm")) ? " and its norm" : "");
    const cJSON *l;
    int i = 0;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(comp, "layers")) {
        const char *op = vx_json_str(l, "operator"), *ffn = vx_json_str(l, "ffn");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(l, "window");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(l, "rope");
        if (!op || strcmp(op, "softmax_attention") != 0)
            return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': layer %d is %s, "
                           "not softmax attention", family, i, op ? op : "?");
        /* gemma2: a window on every even layer (one size), none on odd ones */
        const double win = cJSON_IsNumber(w) ? w->valuedouble : 0;
        if (a->gemma2 && (i % 2 ? win != 0 : win <= 0 || (*window && win != *window)))
            return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': layer %d has %s "
                           "window; llama.cpp's gemma2 architecture has one sliding window on "
                           "the even layers and full attention on the odd ones", family, i,
                           win ? "a" : "no");
        if (!a->gemma2 && win)
            return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': layer %d has a "
                           "sliding window of %g; llama.cpp's %s architecture attends to the "
                           "whole context", family, i, win, a->name);
        if (a->gemma2 && i % 2 == 0)
            *window = win;
        if (r && !cJSON_IsNull(r))
            return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': layer %d has its "
                           "own rope; llama.cpp's %s architecture has one", family, i, a->name);
        /* llama.cpp's llama is MoE on every layer or on none */
        if (!ffn || strcmp(ffn, moe ? "moe" : "dense") != 0)
            return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s': layer %d is %s "
                           "among %s layers; llama.cpp's %s architecture has one FFN kind",
                           family, i, ffn ? ffn : "?", moe ? "moe" : "dense", a->name);
        i++;
    }
    if (vx_graph_json(c) && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(vx_graph_json(c),
                                                                               "components")) > 1)
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: the container has an auxiliary "
                       "component (multi-token prediction) that GGUF's %s architecture cannot "
                       "hold", a->name);
    *out = a;
    return 0;
}

/* ---------------------------------------------------------------- tokenizer */

/* llama.cpp's pre-tokenizer for a byte-level tokenizer.json, or NULL: GPT-2's ByteLevel
 * regex ("gpt-2"), or a Split regex before a regex-free ByteLevel: Llama 3's
 * ("llama-bpe") or Qwen2's, which splits digits singly ("qwen2"). */
static const char *pre_type(const cJSON *pt)
{
    static const char llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                 "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                 "\\s+(?!\\S)|\\s+";
    static const char qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                "\\s+(?!\\S)|\\s+";
    const char *t = vx_json_str(pt, "type");
    if (t && strcmp(t, "ByteLevel") == 0)
        return cJSON_IsFalse(jp(pt, "use_regex")) ? NULL : "gpt-2";
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    const cJSON *split = cJSON_GetArrayItem(seq, 0), *bl = cJSON_GetArrayItem(seq, 1);
    const char *re = cJSON_GetStringValue(jp(split, "pattern.Regex"));
    if (!t || strcmp(t, "Sequence") != 0 || cJSON_GetArraySize(seq) != 2 || !re ||
        (strcmp(re, llama3) != 0 && strcmp(re, qwen2) != 0) || !vx_json_str(split, "behavior") ||
        strcmp(vx_json_str(split, "behavior"), "Isolated") != 0 ||
        !vx_json_str(bl, "type") || strcmp(vx_json_str(bl, "type"), "ByteLevel") != 0 ||
        !cJSON_IsFalse(jp(bl, "use_regex")))
        return NULL;
    return strcmp(re, qwen2) == 0 ? "qwen2" : "llama-bpe";
}

/* Llama 2's SentencePiece BPE as tokenizer.json writes it: byte fallback, the normalizer
 * Prepend("▁") then Replace(" ", "▁"), no pre-tokenizer. */
static int is_spm(const cJSON *tj)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(tj, "normalizer");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
    const cJSON *a = cJSON_GetArrayItem(s, 0), *r = cJSON_GetArrayItem(s, 1);
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer");
    const char *ta = vx_json_str(a, "type"), *tr = vx_json_str(r, "type");
    const char *pa = vx_json_str(a, "prepend"), *rp = cJSON_GetStringValue(jp(r, "pattern.String"));
    const char *rc = vx_json_str(r, "content");
    return cJSON_IsTrue(jp(tj, "model.byte_fallback")) && (!pt || cJSON_IsNull(pt)) &&
           cJSON_GetArraySize(s) == 2 && ta && !strcmp(ta, "Prepend") && pa &&
           !strcmp(pa, "\xe2\x96\x81") && tr && !strcmp(tr, "Replace") && rp && !strcmp(rp, " ") &&
           rc && !strcmp(rc, "\xe2\x96\x81");
}

static const char *const *sort_tok;
static int cmp_tok(const void *a, const void *b)
{
    return strcmp(sort_tok[*(const int *)a], sort_tok[*(const int *)b]);
}

/* llama.cpp's SentencePiece tokenizer merges the adjacent pair whose joined text is the
 * token of highest score; scoring the result of merge r as -r makes it choose as
 * tokenizer.json's BPE does (lowest rank first). Other tokens score 0 (never a merge's
 * result, so never compared). */
static int spm_scores(const cJSON *merges, const char *const *tok, int *order, float *score,
                      int vocab)
{
    for (int i = 0; i < vocab; i++)
        order[i] = i;
    sort_tok = tok;
    qsort(order, (size_t)vocab, sizeof *order, cmp_tok);
    int r = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        char joined[1024];
        const char *s = cJSON_GetStringValue(m), *sp = s ? strchr(s, ' ') : NULL;
        if (sp)
            snprintf(joined, sizeof joined, "%.*s%s", (int)(sp - s), s, sp + 1);
        else
            snprintf(joined, sizeof joined, "%s%s", cJSON_GetStringValue(cJSON_GetArrayItem(m, 0)) ?
                     cJSON_GetStringValue(cJSON_GetArrayItem(m, 0)) : "",
                     cJSON_GetStringValue(cJSON_GetArrayItem(m, 1)) ?
                     cJSON_GetStringValue(cJSON_GetArrayItem(m, 1)) : "");
        int lo = 0, hi = vocab, hit = -1;
        while (lo < hi) {
            int mid = (lo + hi) / 2, c = strcmp(tok[order[mid]], joined);
            if (c == 0) {
                hit = order[mid];
                break;
            }
            if (c < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (hit < 0)
            return -1;
        if (score[hit] == 0)
            score[hit] = -(float)(r + 1);
        r++;
    }
    return 0;
}

/* The id a TemplateProcessing post-processor puts first in a single sequence, or -1: the
 * BOS of a checkpoint whose config names none (OLMo 2) — llama.cpp would add its default. */
static int template_bos(const cJSON *tj)
{
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(tj, "post_processor");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
    const int n = list ? cJSON_GetArraySize(list) : 1;
    for (int i = 0; i < n; i++) {
        const cJSON *p = list ? cJSON_GetArrayItem(list, i) : pp;
        const char *t = vx_json_str(p, "type");
        const cJSON *first = jp(p, "single.0.SpecialToken.id");
        if (!t || strcmp(t, "TemplateProcessing") != 0 || !cJSON_IsString(first))
            continue;
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(jp(p, "special_tokens"),
                                                           first->valuestring);
        const cJSON *id = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(sp, "ids"), 0);
        return cJSON_IsNumber(id) ? id->valueint : -1;
    }
    return -1;
}

/* tokenizer.ggml.* from the container's tokenizer.json (byte-level BPE only). */
static int tokenizer_kv(const vx_container *c, const cJSON *special, int vocab, buf *b,
                        size_t *nkv, vx_err *err)
{
    char path[4200], *text = NULL;
    size_t n = 0;
    cJSON *tj = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", vx_dir(c));
    if (access(path, F_OK) != 0)
        return vx_errf(err, VX_EMISSING, "export gguf: the container has no tokenizer.json, and a "
                       "GGUF file carries the tokenizer llama.cpp runs (FORMAT SAFETENSORS exports "
                       "without one)");
    if (vx_snapshot_check(c, NULL, err) ||
        vx_read_small_file(path, "export gguf: tokenizer.json", &text, &n, err) ||
        vx_json_parse_as("export gguf: tokenizer.json", text, n, 1, &tj, err)) {
        free(text);
        return -1;
    }
    free(text);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *vmap = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const char *mt = vx_json_str(model, "type");
    int rc = 0;
    const char *pre = pre_type(cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer"));
    const int spm = is_spm(tj);
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(tj, "normalizer");
    /* Qwen2's NFC normalizer: llama.cpp's qwen2 tokenizer does not normalise (nor does its
     * converter keep it), so text that NFC changes tokenizes differently there */
    const int nfc = pre && !strcmp(pre, "qwen2") && vx_json_str(norm, "type") &&
                    !strcmp(vx_json_str(norm, "type"), "NFC");
    if (!mt || strcmp(mt, "BPE") != 0 || !cJSON_IsObject(vmap) || !cJSON_IsArray(merges) ||
        (!spm && (!pre || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")) ||
                  (norm && !cJSON_IsNull(norm) && !nfc)))) {
        cJSON_Delete(tj);
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: tokenizer.json is neither a "
                       "byte-level BPE without a normalizer (Qwen2's NFC aside) pre-tokenized as "
                       "GPT-2, Llama 3 or Qwen2 (llama.cpp's gpt2 tokenizer) nor a Llama 2 "
                       "SentencePiece BPE with byte fallback (llama.cpp's llama tokenizer) "
                       "(model %s)", mt ? mt : "absent");
    }
    const char **tok = calloc((size_t)vocab, sizeof *tok);
    int32_t *type = calloc((size_t)vocab, sizeof *type);
    float *score = calloc((size_t)vocab, sizeof *score);
    int *order = calloc((size_t)vocab, sizeof *order);
    char (*pad)[24] = calloc((size_t)vocab, sizeof *pad);
    if (!tok || !type || !score || !order || !pad) {
        rc = vx_errf(err, VX_ENOMEM, "export gguf: out of memory");
        goto done;
    }
    const cJSON *v;
    /* a token past the embedding rows: llama.cpp's vocabulary is one entry per row, so
     * dropping it would tokenize its text differently from lql */
    const char *past = NULL;
    int past_id = 0;
    cJSON_ArrayForEach(v, vmap) {
        int id = cJSON_IsNumber(v) ? v->valueint : -1;
        if (id >= vocab && !past) {
            past = v->string;
            past_id = id;
        }
        if (id >= 0 && id < vocab) {
            tok[id] = v->string;
            type[id] = T_NORMAL;
        }
    }
    const char *unk = vx_json_str(model, "unk_token");
    int unk_id = -1;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(tj, "added_tokens")) {
        int id = (int)jnum(v, "id");
        const char *s = vx_json_str(v, "content");
        if (id >= vocab && s && !past) {
            past = s;
            past_id = id;
        }
        if (id >= 0 && id < vocab && s) {
            tok[id] = s;
            type[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "special")) ? T_CONTROL
                                                                                   : T_USER;
            if (spm && unk && strcmp(s, unk) == 0) {
                type[id] = T_UNKNOWN;
                unk_id = id;
            }
        }
    }
    for (int i = 0; spm && i < vocab; i++) {
        unsigned x;
        char end;
        if (tok[i] && strlen(tok[i]) == 6 && sscanf(tok[i], "<0x%2X%c", &x, &end) == 2 && end == '>')
            type[i] = T_BYTE;
    }
    if (past) {
        rc = vx_errf(err, VX_EUNSUPPORTED, "export gguf: tokenizer.json gives '%.64s' the id %d, "
                     "past the model's %d embedding rows; a GGUF vocabulary is one token per row, "
                     "so llama.cpp would split that text into other tokens", past, past_id, vocab);
        goto done;
    }
    /* ids the tokenizer never produces (a vocabulary padded to a round size) */
    for (int i = 0; i < vocab; i++)
        if (!tok[i]) {
            snprintf(pad[i], sizeof pad[i], "[PAD%d]", i);
            tok[i] = pad[i];
            type[i] = T_UNUSED;
        }
    if (spm && spm_scores(merges, tok, order, score, vocab)) {
        rc = vx_errf(err, VX_EFORMAT, "export gguf: tokenizer.json has a merge whose result "
                     "is not in the vocabulary");
        goto done;
    }
    kv_str(b, nkv, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
    if (!spm)
        kv_str(b, nkv, "tokenizer.ggml.pre", pre);
    kv_array(b, nkv, "tokenizer.ggml.tokens", G_STR, (uint64_t)vocab);
    for (int i = 0; i < vocab; i++)
        str(b, tok[i]);
    kv_array(b, nkv, "tokenizer.ggml.token_type", G_I32, (uint64_t)vocab);
    put(b, type, (size_t)vocab * 4);
    if (spm) {
        kv_array(b, nkv, "tokenizer.ggml.scores", G_F32, (uint64_t)vocab);
        put(b, score, (size_t)vocab * 4);
    } else {
        kv_array(b, nkv, "tokenizer.ggml.merges", G_STR, (uint64_t)cJSON_GetArraySize(merges));
    }
    const cJSON *ml = spm ? NULL : merges;
    cJSON_ArrayForEach(v, ml) {
        char m[1024];
        /* "a b", or the newer ["a", "b"] */
        if (cJSON_IsString(v))
            snprintf(m, sizeof m, "%s", v->valuestring);
        else
            snprintf(m, sizeof m, "%s %s", cJSON_GetStringValue(cJSON_GetArrayItem(v, 0)) ?
                     cJSON_GetStringValue(cJSON_GetArrayItem(v, 0)) : "",
                     cJSON_GetStringValue(cJSON_GetArrayItem(v, 1)) ?
                     cJSON_GetStringValue(cJSON_GetArrayItem(v, 1)) : "");
        str(b, m);
    }
    const int bos = jnum(special, "bos") >= 0 ? (int)jnum(special, "bos") : template_bos(tj);
    if (bos >= 0)
        kv_u32(b, nkv, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (jnum(special, "eos.0") >= 0)
        kv_u32(b, nkv, "tokenizer.ggml.eos_token_id", (uint32_t)jnum(special, "eos.0"));
    kv_bool(b, nkv, "tokenizer.ggml.add_bos_token", cJSON_IsTrue(jp(special, "add_bos")));
    kv_bool(b, nkv, "tokenizer.ggml.add_eos_token", 0);
    if (spm) {
        if (unk_id >= 0)
            kv_u32(b, nkv, "tokenizer.ggml.unknown_token_id", (uint32_t)unk_id);
        kv_bool(b, nkv, "tokenizer.ggml.add_space_prefix", 1);
    }
done:
    free(tok);
    free(type);
    free(score);
    free(order);
    free(pad);
    cJSON_Delete(tj);
    return rc;
}

/* ---------------------------------------------------------------- tensors */

/* One GGUF tensor: a stored tensor, or several joined along their first dimension (fused
 * attn_qkv / ffn_up rows, or experts stacked into ffn_*_exps), in slot order. */
typedef struct gt {
    char name[64];
    const vx_tensor **part;      /* [nslot], by slot */
    int nslot;
    int stacked;                 /* experts: a new outer dimension */
    int heads;                   /* q/k: heads whose rows are permuted; 0 = as stored */
    int widen;                   /* 16-bit vectors written as F32 */
    int offset;                  /* gemma2's norms: 1 + w written, as F32 */
    int ndim;
    int64_t shape[VX_MAX_DIMS];  /* as written, outermost first */
    vx_dtype dtype;
    uint64_t off, nbytes;        /* as written */
} gt;

static uint32_t ggml_type(vx_dtype t)
{
    return t == VX_F32 ? 0 : t == VX_F16 ? 1 : 30;   /* GGML_TYPE_F32, F16, BF16 */
}

/* canonical operand → llama.cpp tensor (name, slot in a fused or stacked tensor, rope
 * permutation); -1 when the architecture has none. */
static int gguf_name(const garch *a, const vx_tensor *t, char *name, size_t n, int *slot,
                     int *stacked, int *perm)
{
    static const struct { const char *op, *gg; int perm; } map[] = {
        {"attn_norm", "attn_norm", 0}, {"attn.q_proj", "attn_q", 1}, {"attn.k_proj", "attn_k", 2},
        {"attn.v_proj", "attn_v", 0}, {"attn.o_proj", "attn_output", 0},
        {"attn.q_norm", "attn_q_norm", 0}, {"attn.k_norm", "attn_k_norm", 0},
        {"ffn_norm", "ffn_norm", 0}, {"post_attn_norm", "post_attention_norm", 0},
        {"post_ffn_norm", "post_ffw_norm", 0}, {"ffn.gate_proj", "ffn_gate", 0},
        {"ffn.up_proj", "ffn_up", 0}, {"ffn.down_proj", "ffn_down", 0},
        {"ffn.router", "ffn_gate_inp", 0},
    };
    char op[64];
    int layer, at = 0, expert, eat = 0;
    *slot = *stacked = *perm = 0;
    /* a bias is its weight's operand + ".bias" */
    size_t len = strlen(t->name);
    const int bias = len > 5 && strcmp(t->name + len - 5, ".bias") == 0;
    const char *kind = bias ? "bias" : "weight";
    if (strcmp(t->object, "target.embedding") == 0) {
        const char *e = !strcmp(t->name, "weight") ? "token_embd" :
                        !strcmp(t->name, "positions") ? "position_embd" : NULL;
        return e ? (snprintf(name, n, "%s.weight", e), 0) : -1;
    }
    if (strcmp(t->object, "target.output_head") == 0) {
        const char *o = !strncmp(t->name, "final_norm", 10) ? "output_norm" :
                        !strcmp(t->name, "lm_head") ? "output" : NULL;
        return o ? (snprintf(name, n, "%s.%s", o, kind), 0) : -1;
    }
    if (strcmp(t->object, "target.decoder_stack") != 0 ||
        sscanf(t->name, "layers.%d.%n", &layer, &at) != 1 || !at)
        return -1;
    snprintf(op, sizeof op, "%.*s", (int)(len - (size_t)at - (bias ? 5 : 0)), t->name + at);
    /* ffn.experts.E.x_proj: expert E of a MoE layer, stacked into ffn_x_exps */
    if (sscanf(op, "ffn.experts.%d.%n", &expert, &eat) == 1 && eat) {
        static const char *const ex[] = {"gate_proj", "ffn_gate_exps", "up_proj", "ffn_up_exps",
                                         "down_proj", "ffn_down_exps"};
        for (int i = 0; i < 6 && !bias; i += 2)
            if (strcmp(op + eat, ex[i]) == 0) {
                snprintf(name, n, "blk.%d.%s.weight", layer, ex[i + 1]);
                *slot = expert;
                *stacked = 1;
                return 0;
            }
        return -1;
    }
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        if (strcmp(op, map[i].op) != 0)
            continue;
        const char *gg = map[i].gg;
        const int qkv = !strcmp(gg, "attn_q") ? 0 : !strcmp(gg, "attn_k") ? 1 :
                        !strcmp(gg, "attn_v") ? 2 : -1;
        if (a->fused_qkv && qkv >= 0) {
            *slot = qkv;
            gg = "attn_qkv";
        } else if (a->fused_gate_up && (!strcmp(gg, "ffn_gate") || !strcmp(gg, "ffn_up"))) {
            *slot = !strcmp(gg, "ffn_up");
            gg = "ffn_up";
        } else if (a->permute && !bias) {
            *perm = map[i].perm;
        }
        snprintf(name, n, "blk.%d.%s.%s", layer, gg, kind);
        return 0;
    }
    return -1;
}

/* q/k rows in llama.cpp's order: new row h·d + 2i + j is old row h·d + j·d/2 + i. */
static int write_permuted(int fd, const vx_tensor *t, int heads, const char *path, vx_err *err)
{
    const int64_t rows = t->shape[0], d = rows / heads;
    const size_t rb = (size_t)(t->nbytes / (uint64_t)rows);
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < d / 2; i++)
            for (int64_t j = 0; j < 2; j++) {
                const unsigned char *src = (const unsigned char *)t->data +
                                           (size_t)(h * d + j * (d / 2) + i) * rb;
                if (vx_write_all(fd, src, rb, "export gguf", path, err))
                    return -1;
            }
    return 0;
}

/* A GGUF tensor's data: its parts in slot order, each permuted, widened or as stored. */
static int write_gt(int fd, const gt *g, const char *path, vx_err *err)
{
    for (int s = 0; s < g->nslot; s++) {
        const vx_tensor *t = g->part[s];
        int rc;
        if (g->widen) {
            const size_t n = (size_t)vx_tensor_nelems(t);
            float *f = malloc(n * 4 + 1);
            rc = !f ? vx_errf(err, VX_ENOMEM, "export gguf: out of memory")
                    : vx_row_to_f32(t->dtype, t->data, f, n) < 0
                    ? vx_errf(err, VX_EUNSUPPORTED, "export gguf: cannot widen '%s'", t->name)
                    : 0;
            for (size_t k = 0; rc == 0 && g->offset && k < n; k++)
                f[k] += 1.0f;
            rc = rc ? rc : vx_write_all(fd, f, n * 4, "export gguf", path, err);
            free(f);
        } else {
            rc = g->heads ? write_permuted(fd, t, g->heads, path, err)
                          : vx_write_all(fd, t->data, t->nbytes, "export gguf", path, err);
        }
        if (rc)
            return -1;
    }
    return 0;
}

static void gts_free(gt *g, size_t n)
{
    for (size_t i = 0; g && i < n; i++)
        free(g[i].part);
    free(g);
}

/* The GGUF tensors of container c under architecture a, in the order of their first
 * operand; every slot of a fused or stacked tensor filled, with one dtype and one shape. */
static int plan_gts(const vx_container *c, const garch *a, int heads, int kv, int tied, gt **out,
                    size_t *nout, vx_err *err)
{
    const size_t nt = vx_tensor_count(c);
    gt *g = calloc(nt + 1, sizeof *g);
    size_t n = 0;
    const vx_tensor *embd = NULL;
    if (!g)
        return vx_errf(err, VX_ENOMEM, "export gguf: out of memory");
    for (size_t i = 0; i < nt; i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        char name[64];
        int slot, stacked, perm;
        if (gguf_name(a, t, name, sizeof name, &slot, &stacked, &perm)) {
            gts_free(g, n);
            return vx_errf(err, VX_EUNSUPPORTED, "export gguf: operand '%s' of '%s' has no "
                           "tensor in llama.cpp's %s architecture", t->name, t->object, a->name);
        }
        if (!strcmp(name, "token_embd.weight"))
            embd = t;
        size_t k = 0;
        while (k < n && strcmp(g[k].name, name) != 0)
            k++;
        if (k == n) {
            snprintf(g[n].name, sizeof g[n].name, "%s", name);
            g[n].stacked = stacked;
            g[n].heads = perm == 1 ? heads : perm == 2 ? kv : 0;
            n++;
        }
        if (slot >= g[k].nslot) {
            const vx_tensor **p = realloc(g[k].part, (size_t)(slot + 1) * sizeof *p);
            if (!p) {
                gts_free(g, n);
                return vx_errf(err, VX_ENOMEM, "export gguf: out of memory");
            }
            memset(p + g[k].nslot, 0, (size_t)(slot + 1 - g[k].nslot) * sizeof *p);
            g[k].part = p;
            g[k].nslot = slot + 1;
        }
        if (g[k].part[slot]) {
            vx_errf(err, VX_EFORMAT, "export gguf: operands '%s' and '%s' both map to '%s'",
                    g[k].part[slot]->name, t->name, name);
            gts_free(g, n);
            return -1;
        }
        g[k].part[slot] = t;
    }
    /* llama.cpp's loader for this architecture wants output.weight even when tied (its
     * converter writes the embedding twice) */
    if (tied && a->output_required && embd) {
        snprintf(g[n].name, sizeof g[n].name, "output.weight");
        g[n].part = malloc(sizeof *g[n].part);
        if (!g[n].part) {
            gts_free(g, n);
            return vx_errf(err, VX_ENOMEM, "export gguf: out of memory");
        }
        g[n].part[0] = embd;
        g[n++].nslot = 1;
    }
    for (size_t k = 0; k < n; k++) {
        gt *x = &g[k];
        const vx_tensor *t0 = x->part[0];
        for (int s = 0; s < x->nslot; s++) {
            const vx_tensor *t = x->part[s];
            const int same_inner = t && t->ndim == t0->ndim && t->dtype == t0->dtype &&
                                   (t->ndim < 2 || t->shape[1] == t0->shape[1]) &&
                                   (!x->stacked || t->shape[0] == t0->shape[0]);
            if (!same_inner) {
                gts_free(g, n);
                return vx_errf(err, VX_EFORMAT, "export gguf: '%s' is built from %d operands "
                               "but part %d is %s", x->name, x->nslot, s,
                               t ? "of another dtype or shape" : "missing");
            }
        }
        if (x->heads && (t0->ndim != 2 || t0->shape[0] % (2 * x->heads))) {
            gts_free(g, n);
            return vx_errf(err, VX_EFORMAT, "export gguf: '%s' does not split into %d heads of "
                           "even size", t0->name, x->heads);
        }
        x->dtype = t0->dtype;
        x->ndim = t0->ndim + x->stacked;
        memcpy(x->shape + x->stacked, t0->shape, (size_t)t0->ndim * sizeof *x->shape);
        if (x->stacked)
            x->shape[0] = x->nslot;
        for (int s = 1; s < x->nslot && !x->stacked; s++)
            x->shape[0] += x->part[s]->shape[0];
        /* ggml multiplies by F32 vectors only (norm weights, biases): widened, exactly, as
         * convert_hf_to_gguf.py does */
        x->offset = a->gemma2 && t0->ndim == 1 && strstr(x->name, "norm.weight");
        x->widen = t0->ndim == 1 && (t0->dtype != VX_F32 || x->offset);
        x->nbytes = 0;
        for (int s = 0; s < x->nslot; s++)
            x->nbytes += x->widen ? vx_tensor_nelems(x->part[s]) * 4 : x->part[s]->nbytes;
    }
    *out = g;
    *nout = n;
    return 0;
}

int vx_export_check(const vx_container *c, int gguf, vx_err *err)
{
    if (!gguf)
        return hf_export_admissible(c, 1, "export", err);
    const cJSON *comp = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(vx_graph_json(c),
                                                                            "components"), 0);
    const garch *a = NULL;
    double window = 0;
    return gguf_arch(c, cJSON_GetObjectItemCaseSensitive(comp, "execution"), comp, &a, &window,
                     err) || hf_export_admissible(c, 0, "export gguf", err) ? -1 : 0;
}

int vx_export_gguf(const vx_container *c, const char *out_path, vx_export_report *rep,
                   vx_err *err)
{
    memset(rep, 0, sizeof *rep);
    const cJSON *comp = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(vx_graph_json(c),
                                                                            "components"), 0);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(comp, "execution");
    const garch *a = NULL;
    double window = 0;
    if (vx_cw_check(out_path, vx_dir(c), VX_CW_FILE, "export gguf", err) ||
        gguf_arch(c, x, comp, &a, &window, err) || hf_export_admissible(c, 0, "export gguf", err))
        return -1;
    const int layers = (int)jnum(comp, "num_layers"), hidden = (int)jnum(comp, "hidden_size");
    const int vocab = (int)jnum(comp, "vocab_size"), heads = (int)jnum(x, "attention.heads");
    const int kv = (int)jnum(x, "attention.kv_heads"), hd = (int)jnum(x, "attention.head_dim");
    const int moe = jnum(x, "moe.experts") > 0;
    /* llama.cpp's llama sizes its experts by feed_forward_length */
    const int inter = (int)jnum(x, moe ? "moe.expert_intermediate" : "ffn.intermediate");
    gt *g = NULL;
    size_t nt = 0;
    if (plan_gts(c, a, heads, kv, cJSON_IsTrue(jp(x, "lm_head.tied")), &g, &nt, err))
        return -1;
    buf b = {0};
    size_t nkv = 0, nf32 = 0, n16 = 0, nbf = 0;
    uint64_t off = 0;
    int rc = 0;
    vx_afile f = {.fd = -1};
    char k[96];
    for (size_t i = 0; i < nt; i++) {
        g[i].off = off;
        off = (off + g[i].nbytes + ALIGN - 1) / ALIGN * ALIGN;
        nf32 += g[i].dtype == VX_F32 && g[i].ndim >= 2;
        n16 += g[i].dtype == VX_F16;
        nbf += g[i].dtype == VX_BF16;
    }
#define AK(key) (snprintf(k, sizeof k, "%s.%s", a->name, key), k)
    /* header and key-values (kv count patched below) */
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, (uint64_t)nt);
    u64(&b, 0);
    const char *model = vx_json_str(vx_index_json(c), "model");
    kv_str(&b, &nkv, "general.architecture", a->name);
    kv_str(&b, &nkv, "general.name", model ? model : "lql export");
    kv_u32(&b, &nkv, "general.alignment", ALIGN);
    /* LLAMA_FTYPE_ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32: what most matrices are */
    kv_u32(&b, &nkv, "general.file_type", nbf > n16 && nbf > nf32 ? 32 : n16 > nf32 ? 1 : 0);
    kv_u32(&b, &nkv, AK("vocab_size"), (uint32_t)vocab);
    kv_u32(&b, &nkv, AK("context_length"), (uint32_t)jnum(x, "context_length"));
    kv_u32(&b, &nkv, AK("embedding_length"), (uint32_t)hidden);
    kv_u32(&b, &nkv, AK("block_count"), (uint32_t)layers);
    kv_u32(&b, &nkv, AK("feed_forward_length"), (uint32_t)inter);
    kv_u32(&b, &nkv, AK("attention.head_count"), (uint32_t)heads);
    kv_u32(&b, &nkv, AK("attention.head_count_kv"), (uint32_t)kv);
    kv_u32(&b, &nkv, AK("attention.key_length"), (uint32_t)hd);
    kv_u32(&b, &nkv, AK("attention.value_length"), (uint32_t)hd);
    if (!strcmp(vx_json_str(jp(x, "norm"), "kind"), "layer")) {
        kv_f32(&b, &nkv, AK("attention.layer_norm_epsilon"), (float)jnum(x, "norm.eps"));
    } else {
        kv_f32(&b, &nkv, AK("attention.layer_norm_rms_epsilon"), (float)jnum(x, "norm.eps"));
        kv_u32(&b, &nkv, AK("rope.dimension_count"), (uint32_t)hd);
        kv_f32(&b, &nkv, AK("rope.freq_base"), (float)jnum(x, "attention.rope.theta"));
    }
    if (moe) {
        kv_u32(&b, &nkv, AK("expert_count"), (uint32_t)jnum(x, "moe.experts"));
        kv_u32(&b, &nkv, AK("expert_used_count"), (uint32_t)jnum(x, "moe.top_k"));
    }
    /* phi3's loader wants the key; 0 is "no window" (the surface check refused windows) */
    if (!strcmp(a->name, "phi3") || a->gemma2)
        kv_u32(&b, &nkv, AK("attention.sliding_window"), (uint32_t)window);
    if (a->gemma2) {
        kv_f32(&b, &nkv, AK("attn_logit_softcapping"), (float)jnum(x, "attention.softcap"));
        kv_f32(&b, &nkv, AK("final_logit_softcapping"), (float)jnum(x, "lm_head.softcap"));
    }
#undef AK
    if ((rc = tokenizer_kv(c, cJSON_GetObjectItemCaseSensitive(x, "special_tokens"), vocab, &b,
                           &nkv, err)))
        goto done;
    for (size_t i = 0; i < nt; i++) {
        str(&b, g[i].name);
        u32(&b, (uint32_t)g[i].ndim);
        for (int d = g[i].ndim - 1; d >= 0; d--)      /* ggml's ne: innermost first */
            u64(&b, (uint64_t)g[i].shape[d]);
        u32(&b, ggml_type(g[i].widen ? VX_F32 : g[i].dtype));
        u64(&b, g[i].off);
    }
    static const unsigned char zero[ALIGN] = {0};
    put(&b, zero, (ALIGN - b.n % ALIGN) % ALIGN);
    if (b.oom) {
        rc = vx_errf(err, VX_ENOMEM, "export gguf: out of memory");
        goto done;
    }
    uint64_t kvn = nkv;
    memcpy(b.p + 16, &kvn, 8);
    if ((rc = vx_afile_open(&f, out_path, 0, "export gguf", err)))
        goto done;
    rc = vx_afile_write(&f, b.p, b.n, err);
    for (size_t i = 0; i < nt && rc == 0; i++) {
        rc = write_gt(f.fd, &g[i], f.tmp, err);
        if (rc == 0)
            rc = vx_afile_write(&f, zero, (ALIGN - g[i].nbytes % ALIGN) % ALIGN, err);
        rep->bytes += g[i].nbytes;
    }
    rep->tensors = nt;
    rep->files = nkv;
    /* linked into place: never replaces a file that appeared meanwhile */
    if (rc == 0)
        rc = vx_afile_commit(&f, err);
done:
    vx_afile_abort(&f);
    free(b.p);
    gts_free(g, nt);
    return rc ? -1 : 0;
}
