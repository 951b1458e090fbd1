/*
 * hf_gguf.c — a container as a GGUF v3 file for llama.cpp (vindex.h, vx_export_gguf).
 * Family llama only: the execution surface is checked to be exactly what llama.cpp's
 * LLM_ARCH_LLAMA computes (RMSNorm, rotate-half RoPE without scaling, gated SiLU FFN, no
 * biases, windows, soft-caps, MoE or MLA), and every departure is refused by name.
 * Tensors keep their stored dtype (F32, F16, BF16) and bytes, except 16-bit vectors (norm
 * weights), widened exactly to F32 because ggml multiplies only by F32 vectors (as
 * convert_hf_to_gguf.py writes them), and q_proj and k_proj, whose rows are permuted as
 * convert_hf_to_gguf.py's LlamaModel.permute does: per head, HF's rotate-half order
 * [first halves | second halves] becomes llama.cpp's interleaved pairs (new row
 * h·d + 2i + j = old row h·d + j·d/2 + i). The tokenizer travels as tokenizer.ggml.*
 * metadata: a byte-level BPE tokenizer.json (model "gpt2", pre-tokenizer "gpt-2" or
 * Llama 3's "llama-bpe", merges) or Llama 2's SentencePiece BPE (model "llama", scores
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

/* The surface must be LLM_ARCH_LLAMA's; refuse the first thing that is not. */
static int llama_surface(const vx_container *c, const cJSON *x, const cJSON *comp, vx_err *err)
{
    static const struct { const char *path; const char *want; } must[] = {
        {"norm.kind", "rms"}, {"attention.rope.style", "rotate_half"}, {"ffn.kind", "gated"},
        {"ffn.activation", "silu"},
    };
    static const char *const none[] = {
        "attention.rope.scaling", "attention.softcap", "attention.qk_norm", "attention.output_gate",
        "embedding.positions", "mla", "moe", "mamba2", "gated_deltanet", "residual_scale",
        "lm_head.softcap", "lm_head.logits_divisor",
    };
    static const char *const off[] = {
        "norm.bias", "attention.qkv_bias", "attention.out_bias", "attention.sinks", "ffn.bias",
        "post_norms.attn", "post_norms.ffn",
    };
    const char *family = vx_json_str(vx_index_json(c), "family");
    if (!family || strcmp(family, "llama") != 0)
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: family '%s' is not written as GGUF; "
                       "lql writes the llama family (export FORMAT SAFETENSORS and convert it "
                       "with llama.cpp's convert_hf_to_gguf.py)", family ? family : "?");
    for (size_t i = 0; i < sizeof must / sizeof *must; i++) {
        const char *v = cJSON_GetStringValue(jp(x, must[i].path));
        if (!v || strcmp(v, must[i].want) != 0)
            return vx_errf(err, VX_EUNSUPPORTED, "export gguf: execution.%s is %s; llama.cpp's "
                           "llama architecture computes %s", must[i].path, v ? v : "absent",
                           must[i].want);
    }
    for (size_t i = 0; i < sizeof none / sizeof *none; i++)
        if (jp(x, none[i]) && !cJSON_IsNull(jp(x, none[i])))
            return vx_errf(err, VX_EUNSUPPORTED, "export gguf: execution.%s is set; the GGUF "
                           "writer has no llama.cpp form for it", none[i]);
    for (size_t i = 0; i < sizeof off / sizeof *off; i++)
        if (cJSON_IsTrue(jp(x, off[i])))
            return vx_errf(err, VX_EUNSUPPORTED, "export gguf: execution.%s is true; the GGUF "
                           "writer has no llama.cpp form for it", off[i]);
    if (jnum(x, "norm.weight_offset") != 0 || jnum(x, "embedding.scale") != 1 ||
        !cJSON_IsTrue(jp(x, "pre_norms.attn")) || !cJSON_IsTrue(jp(x, "pre_norms.ffn")) ||
        !cJSON_IsTrue(jp(x, "final_norm")) ||
        jnum(x, "attention.rope.rotary_dim") != jnum(x, "attention.head_dim"))
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: the norms, embedding scale or rotary "
                       "width differ from llama.cpp's llama architecture");
    double hd = jnum(x, "attention.head_dim");
    if (fabs(jnum(x, "attention.scale") * sqrt(hd) - 1) > 1e-6)
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: attention.scale %g is not "
                       "1/sqrt(head_dim); llama.cpp's llama architecture has no other",
                       jnum(x, "attention.scale"));
    const cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(comp, "layers")) {
        const char *op = vx_json_str(l, "operator"), *ffn = vx_json_str(l, "ffn");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(l, "window");
        if (!op || strcmp(op, "softmax_attention") || !ffn || strcmp(ffn, "dense") ||
            (w && !cJSON_IsNull(w)) ||
            (cJSON_GetObjectItemCaseSensitive(l, "rope") &&
             !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(l, "rope"))))
            return vx_errf(err, VX_EUNSUPPORTED, "export gguf: a layer is not full softmax "
                           "attention with a dense FFN and the global rope");
    }
    if (vx_graph_json(c) && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(vx_graph_json(c),
                                                                               "components")) > 1)
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: the container has an auxiliary "
                       "component (multi-token prediction) GGUF's llama architecture cannot hold");
    return 0;
}

/* ---------------------------------------------------------------- tokenizer */

/* llama.cpp's pre-tokenizer for a byte-level tokenizer.json, or NULL: GPT-2's ByteLevel
 * regex ("gpt-2"), or Llama 3's Split regex before a regex-free ByteLevel ("llama-bpe"). */
static const char *pre_type(const cJSON *pt)
{
    static const char llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                 "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                 "\\s+(?!\\S)|\\s+";
    const char *t = vx_json_str(pt, "type");
    if (t && strcmp(t, "ByteLevel") == 0)
        return cJSON_IsFalse(jp(pt, "use_regex")) ? NULL : "gpt-2";
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    const cJSON *split = cJSON_GetArrayItem(seq, 0), *bl = cJSON_GetArrayItem(seq, 1);
    const char *re = cJSON_GetStringValue(jp(split, "pattern.Regex"));
    if (!t || strcmp(t, "Sequence") != 0 || cJSON_GetArraySize(seq) != 2 || !re ||
        strcmp(re, llama3) != 0 || !vx_json_str(split, "behavior") ||
        strcmp(vx_json_str(split, "behavior"), "Isolated") != 0 ||
        !vx_json_str(bl, "type") || strcmp(vx_json_str(bl, "type"), "ByteLevel") != 0 ||
        !cJSON_IsFalse(jp(bl, "use_regex")))
        return NULL;
    return "llama-bpe";
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

/* tokenizer.ggml.* from the container's tokenizer.json (byte-level BPE only). */
static int tokenizer_kv(const vx_container *c, const cJSON *special, int vocab, buf *b,
                        size_t *nkv, vx_err *err)
{
    char path[4200], *text = NULL;
    size_t n = 0;
    cJSON *tj = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", vx_dir(c));
    if (vx_read_small_file(path, "export gguf: tokenizer.json", &text, &n, err) ||
        vx_json_parse("export gguf: tokenizer.json", text, n, &tj, err)) {
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
    if (!mt || strcmp(mt, "BPE") != 0 || !cJSON_IsObject(vmap) || !cJSON_IsArray(merges) ||
        (!spm && (!pre || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")) ||
                  (norm && !cJSON_IsNull(norm))))) {
        cJSON_Delete(tj);
        return vx_errf(err, VX_EUNSUPPORTED, "export gguf: tokenizer.json is neither a "
                       "byte-level BPE without a normalizer pre-tokenized as GPT-2 or Llama 3 "
                       "(llama.cpp's gpt2 tokenizer) nor a Llama 2 SentencePiece BPE with byte "
                       "fallback (llama.cpp's llama tokenizer) (model %s)", mt ? mt : "absent");
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
    cJSON_ArrayForEach(v, vmap) {
        int id = cJSON_IsNumber(v) ? v->valueint : -1;
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
    if (jnum(special, "bos") >= 0)
        kv_u32(b, nkv, "tokenizer.ggml.bos_token_id", (uint32_t)jnum(special, "bos"));
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

typedef struct gt {
    const vx_tensor *t;
    char name[64];
    int heads;                   /* q/k: heads whose rows are permuted; 0 = as stored */
    int widen;                   /* a 16-bit vector written as F32 */
    uint64_t off, nbytes;        /* as written */
} gt;

static uint32_t ggml_type(vx_dtype t)
{
    return t == VX_F32 ? 0 : t == VX_F16 ? 1 : 30;   /* GGML_TYPE_F32, F16, BF16 */
}

/* canonical operand → llama.cpp tensor name (and the rope permutation it needs) */
static int gguf_name(const vx_tensor *t, int heads, int kv_heads, gt *g)
{
    static const struct { const char *op, *gg; int perm; } map[] = {
        {"attn_norm", "attn_norm", 0}, {"attn.q_proj", "attn_q", 1}, {"attn.k_proj", "attn_k", 2},
        {"attn.v_proj", "attn_v", 0}, {"attn.o_proj", "attn_output", 0}, {"ffn_norm", "ffn_norm", 0},
        {"ffn.gate_proj", "ffn_gate", 0}, {"ffn.up_proj", "ffn_up", 0},
        {"ffn.down_proj", "ffn_down", 0},
    };
    int layer, at = 0;
    g->t = t;
    g->heads = 0;
    if (strcmp(t->object, "target.embedding") == 0 && strcmp(t->name, "weight") == 0) {
        snprintf(g->name, sizeof g->name, "token_embd.weight");
        return 0;
    }
    if (strcmp(t->object, "target.output_head") == 0) {
        const char *n = !strcmp(t->name, "final_norm") ? "output_norm" :
                        !strcmp(t->name, "lm_head") ? "output" : NULL;
        if (!n)
            return -1;
        snprintf(g->name, sizeof g->name, "%s.weight", n);
        return 0;
    }
    if (strcmp(t->object, "target.decoder_stack") != 0 ||
        sscanf(t->name, "layers.%d.%n", &layer, &at) != 1 || !at)
        return -1;
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (strcmp(t->name + at, map[i].op) == 0) {
            snprintf(g->name, sizeof g->name, "blk.%d.%s.weight", layer, map[i].gg);
            g->heads = map[i].perm == 1 ? heads : map[i].perm == 2 ? kv_heads : 0;
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
                if (hf_export_write(fd, src, rb, path, err))
                    return -1;
            }
    return 0;
}

int vx_export_gguf(const vx_container *c, const char *out_path, vx_export_report *rep,
                   vx_err *err)
{
    memset(rep, 0, sizeof *rep);
    if (vx_export_target_check(out_path, 0, "export gguf", err) ||
        hf_export_admissible(c, "export gguf", err))
        return -1;
    const cJSON *comp = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(vx_graph_json(c),
                                                                            "components"), 0);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(comp, "execution");
    if (llama_surface(c, x, comp, err))
        return -1;
    const int layers = (int)jnum(comp, "num_layers"), hidden = (int)jnum(comp, "hidden_size");
    const int vocab = (int)jnum(comp, "vocab_size"), heads = (int)jnum(x, "attention.heads");
    const int kv = (int)jnum(x, "attention.kv_heads"), hd = (int)jnum(x, "attention.head_dim");
    const int inter = (int)jnum(x, "ffn.intermediate");
    size_t nt = vx_tensor_count(c);
    gt *g = calloc(nt ? nt : 1, sizeof *g);
    if (!g)
        return vx_errf(err, VX_ENOMEM, "export gguf: out of memory");
    buf b = {0};
    size_t nkv = 0, nf32 = 0, n16 = 0, nbf = 0;
    uint64_t off = 0;
    int rc = 0, fd = -1;
    char tmp[4200];
    tmp[0] = '\0';
    for (size_t i = 0; i < nt; i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if (gguf_name(t, heads, kv, &g[i])) {
            rc = vx_errf(err, VX_EUNSUPPORTED, "export gguf: operand '%s' of '%s' has no "
                         "tensor in llama.cpp's llama architecture", t->name, t->object);
            goto done;
        }
        if (g[i].heads && (t->ndim != 2 || t->shape[0] % (2 * g[i].heads))) {
            rc = vx_errf(err, VX_EFORMAT, "export gguf: '%s' does not split into %d heads of "
                         "even size", t->name, g[i].heads);
            goto done;
        }
        /* ggml multiplies by F32 vectors only (norm weights): widened, exactly, as
         * convert_hf_to_gguf.py does */
        g[i].widen = t->ndim == 1 && t->dtype != VX_F32;
        g[i].nbytes = g[i].widen ? vx_tensor_nelems(t) * 4 : t->nbytes;
        g[i].off = off;
        off = (off + g[i].nbytes + ALIGN - 1) / ALIGN * ALIGN;
        nf32 += t->dtype == VX_F32 && t->ndim == 2;
        n16 += t->dtype == VX_F16;
        nbf += t->dtype == VX_BF16;
    }
    /* header and key-values (kv count patched below) */
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, (uint64_t)nt);
    u64(&b, 0);
    const char *model = vx_json_str(vx_index_json(c), "model");
    kv_str(&b, &nkv, "general.architecture", "llama");
    kv_str(&b, &nkv, "general.name", model ? model : "lql export");
    kv_u32(&b, &nkv, "general.alignment", ALIGN);
    /* LLAMA_FTYPE_ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32: what most matrices are */
    kv_u32(&b, &nkv, "general.file_type", nbf > n16 && nbf > nf32 ? 32 : n16 > nf32 ? 1 : 0);
    kv_u32(&b, &nkv, "llama.vocab_size", (uint32_t)vocab);
    kv_u32(&b, &nkv, "llama.context_length", (uint32_t)jnum(x, "context_length"));
    kv_u32(&b, &nkv, "llama.embedding_length", (uint32_t)hidden);
    kv_u32(&b, &nkv, "llama.block_count", (uint32_t)layers);
    kv_u32(&b, &nkv, "llama.feed_forward_length", (uint32_t)inter);
    kv_u32(&b, &nkv, "llama.attention.head_count", (uint32_t)heads);
    kv_u32(&b, &nkv, "llama.attention.head_count_kv", (uint32_t)kv);
    kv_u32(&b, &nkv, "llama.attention.key_length", (uint32_t)hd);
    kv_u32(&b, &nkv, "llama.attention.value_length", (uint32_t)hd);
    kv_u32(&b, &nkv, "llama.rope.dimension_count", (uint32_t)hd);
    kv_f32(&b, &nkv, "llama.rope.freq_base", (float)jnum(x, "attention.rope.theta"));
    kv_f32(&b, &nkv, "llama.attention.layer_norm_rms_epsilon", (float)jnum(x, "norm.eps"));
    if ((rc = tokenizer_kv(c, cJSON_GetObjectItemCaseSensitive(x, "special_tokens"), vocab, &b,
                           &nkv, err)))
        goto done;
    for (size_t i = 0; i < nt; i++) {
        const vx_tensor *t = g[i].t;
        str(&b, g[i].name);
        u32(&b, (uint32_t)t->ndim);
        for (int d = t->ndim - 1; d >= 0; d--)      /* ggml's ne: innermost first */
            u64(&b, (uint64_t)t->shape[d]);
        u32(&b, ggml_type(g[i].widen ? VX_F32 : t->dtype));
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
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out_path, (long)getpid()) >= sizeof tmp) {
        rc = vx_errf(err, VX_EARG, "export gguf: output path '%s' is too long", out_path);
        tmp[0] = '\0';
        goto done;
    }
    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = vx_errf(err, VX_EIO, "export gguf: cannot create '%s': %s", tmp, strerror(errno));
        tmp[0] = '\0';
        goto done;
    }
    rc = hf_export_write(fd, b.p, b.n, tmp, err);
    for (size_t i = 0; i < nt && rc == 0; i++) {
        const vx_tensor *t = g[i].t;
        if (g[i].widen) {
            float *f = malloc((size_t)g[i].nbytes);
            rc = !f ? vx_errf(err, VX_ENOMEM, "export gguf: out of memory")
                    : vx_row_to_f32(t->dtype, t->data, f, (size_t)vx_tensor_nelems(t)) < 0
                    ? vx_errf(err, VX_EUNSUPPORTED, "export gguf: cannot widen '%s'", t->name)
                    : hf_export_write(fd, f, g[i].nbytes, tmp, err);
            free(f);
        } else {
            rc = g[i].heads ? write_permuted(fd, t, g[i].heads, tmp, err)
                            : hf_export_write(fd, t->data, t->nbytes, tmp, err);
        }
        if (rc == 0)
            rc = hf_export_write(fd, zero, (ALIGN - g[i].nbytes % ALIGN) % ALIGN, tmp, err);
        rep->bytes += g[i].nbytes;
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = vx_errf(err, VX_EIO, "export gguf: cannot sync '%s': %s", tmp, strerror(errno));
    /* linked into place: never replaces a file that appeared meanwhile */
    if (rc == 0 && link(tmp, out_path) != 0)
        rc = vx_errf(err, VX_EIO, "export gguf: cannot create '%s': %s", out_path,
                     strerror(errno));
    rep->tensors = nt;
    rep->files = nkv;
done:
    if (fd >= 0)
        close(fd);
    if (tmp[0])
        unlink(tmp);
    free(b.p);
    free(g);
    return rc ? -1 : 0;
}
