/*
 * test_container_encode.c — the reader on what the encoder writes: tinyllama and every
 * family fixture under tests/fixtures/models/families are encoded, opened, checked for geometry
 * against their config.json (layers, hidden, vocab, operand shapes), verified clean, and
 * then a copy with one flipped payload byte must fail verify naming segment and tensor.
 */
#include "t.h"
#include "t_file.h"
#include "vindex.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static double cfg(const cJSON *c, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItem(c, a);
    if (!cJSON_IsNumber(v) && b)
        v = cJSON_GetObjectItem(c, b);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static double gnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -2;
}

static int sh(const char *fmt, const char *a, const char *b)
{
    char cmd[2 * PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    return system(cmd);
}

/* The output projection of layer l's token mixer. */
static const char *out_proj(const vx_container *c, int l)
{
    const vx_mixer k = vx_shape_of(c)->layer[l].mixer;
    return k == VX_MIXER_MAMBA2 ? "ssm.out_proj" : k == VX_MIXER_DELTANET ? "deltanet.out_proj"
                                                                           : "attn.o_proj";
}

/* Flip one byte in the middle of a decoder-stack tensor of a copy; verify must name it. */
static void corrupt_copy(const char *name, const char *dir, const vx_container *c)
{
    char copy[PATH_MAX + 8], path[2 * PATH_MAX], want[512];
    snprintf(copy, sizeof copy, "%s.bad", dir);
    CHECK(sh("cp -r '%s' '%s'", dir, copy) == 0);
    const vx_tensor *t = vx_findf(c, "target.decoder_stack", "layers.0.%s", out_proj(c, 0));
    CHECK_MSG(t != NULL, "%s: no layers.0.%s", name, out_proj(c, 0));
    if (!t)
        return;
    snprintf(path, sizeof path, "%s/%s", copy, t->segment);
    FILE *f = fopen(path, "r+b");
    /* the tensor's file offset: the segment's payload start + its offset */
    uint64_t hl = 0;
    unsigned char le[8];
    CHECK(fread(le, 1, 8, f) == 8);
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | le[i];
    long at = (long)(8 + hl + t->offset + t->nbytes / 2);
    fseek(f, at, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(ch ^ 0x40, f);
    fclose(f);
    cJSON *rep = NULL;
    vx_err err = {0};
    CHECK(vx_verify(copy, NULL, &rep, &err) == -1);
    CHECK(err.code == VX_EVERIFY);
    snprintf(want, sizeof want, "segment '%s': encoded != recorded (first differing tensor '%s')",
             t->segment, t->name);
    CHECK_STR(err.msg, want);
    cJSON_Delete(rep);
    sh("rm -rf '%s'%s", copy, "");
}

static void check_model(const char *name, const char *hf)
{
    char tmp[] = "/tmp/lql_enc_XXXXXX", out[PATH_MAX], path[PATH_MAX + 16];
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(out, sizeof out, "%s/%s.vindex3", tmp, name);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    vx_err err = {0};
    int rc = vx_encode(hf, out, &o, &err);
    CHECK_MSG(rc == 0, "%s: encode: %s", name, err.msg);
    snprintf(path, sizeof path, "%s/config.json", hf);
    cJSON *conf = t_load_json(path);
    vx_container *c = NULL;
    if (rc == 0 && vx_open(out, &c, &err) < 0)
        CHECK_MSG(0, "%s: open: %s", name, err.msg);
    if (c && conf) {
        const cJSON *comp = vx_component(c);
        int layers = (int)cfg(conf, "num_hidden_layers", "n_layer");
        double hidden = cfg(conf, "hidden_size", "n_embd"), vocab = cfg(conf, "vocab_size", NULL);
        CHECK(vx_version(c) == 4);
        CHECK_MSG(gnum(comp, "num_layers") == layers, "%s: num_layers %g, config %d", name,
                  gnum(comp, "num_layers"), layers);
        CHECK_MSG(gnum(comp, "hidden_size") == hidden, "%s: hidden", name);
        CHECK_MSG(gnum(comp, "vocab_size") == vocab, "%s: vocab", name);
        const vx_tensor *e = vx_find(c, "target.embedding", "weight");
        CHECK_MSG(e && e->ndim == 2 && e->shape[0] == vocab && e->shape[1] == hidden,
                  "%s: embedding shape", name);
        const cJSON *ls = cJSON_GetObjectItem(comp, "layers");
        CHECK(cJSON_GetArraySize(ls) == layers);
        const cJSON *att = cJSON_GetObjectItem(cJSON_GetObjectItem(comp, "execution"), "attention");
        double heads = gnum(att, "heads"), kv = gnum(att, "kv_heads"), hd = gnum(att, "head_dim");
        for (int l = 0; l < layers; l++) {
            /* the norm on the attention branch: before it, or (no pre-norms) on its output */
            const vx_tensor *n = vx_findf(c, "target.decoder_stack", "layers.%d.attn_norm", l);
            if (!n) n = vx_findf(c, "target.decoder_stack", "layers.%d.post_attn_norm", l);
            const vx_tensor *op = vx_findf(c, "target.decoder_stack", "layers.%d.%s", l, out_proj(c, l));
            CHECK_MSG(n && n->ndim == 1 && n->shape[0] == hidden, "%s: layer %d attn_norm", name, l);
            CHECK_MSG(op && op->shape[0] == hidden, "%s: layer %d o_proj", name, l);
            const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(ls, l), "operator"));
            if (kind && strcmp(kind, "softmax_attention") == 0) {
                const vx_tensor *q = vx_findf(c, "target.decoder_stack", "layers.%d.attn.q_proj", l);
                const vx_tensor *k = vx_findf(c, "target.decoder_stack", "layers.%d.attn.k_proj", l);
                /* a sigmoid output gate rides in q_proj: [query | gate] rows per head */
                double qrows = heads * hd * (cJSON_IsString(cJSON_GetObjectItem(att, "output_gate")) ? 2 : 1);
                CHECK_MSG(q && q->shape[0] == qrows && q->shape[1] == hidden, "%s: layer %d q_proj", name, l);
                CHECK_MSG(k && k->shape[0] == kv * hd && k->shape[1] == hidden, "%s: layer %d k_proj", name, l);
            }
            const char *ffn = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(ls, l), "ffn"));
            if (ffn && strcmp(ffn, "dense") == 0) {
                const vx_tensor *d = vx_findf(c, "target.decoder_stack", "layers.%d.ffn.down_proj", l);
                const vx_tensor *u = vx_findf(c, "target.decoder_stack", "layers.%d.ffn.up_proj", l);
                CHECK_MSG(d && u && d->shape[0] == hidden && d->shape[1] == u->shape[0] &&
                          u->shape[1] == hidden, "%s: layer %d ffn shapes", name, l);
            }
        }
        cJSON *rep = NULL;
        rc = vx_verify(out, NULL, &rep, &err);
        CHECK_MSG(rc == 0, "%s: verify: %s", name, err.msg);
        CHECK_MSG(cJSON_IsTrue(cJSON_GetObjectItem(rep, "ok")), "%s: verify report not ok", name);
        const cJSON *src = cJSON_GetObjectItem(rep, "source");
        CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(src, "status")), "checked");
        cJSON_Delete(rep);
        corrupt_copy(name, out, c);
    }
    vx_close(c);
    cJSON_Delete(conf);
    sh("rm -rf '%s'%s", tmp, "");
}

/* A decoder stack split at a small shard cap: every shard is its own mapped segment,
 * lookups cross shards, verify covers each, and a flipped byte names the right shard. */
static void check_shards(void)
{
    char tmp[] = "/tmp/lql_shard_XXXXXX", hf[PATH_MAX], out[PATH_MAX], want[512];
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(hf, sizeof hf, "%s/models/tinyllama", LQL_FIXTURE_DIR);
    snprintf(out, sizeof out, "%s/tiny.vindex3", tmp);
    setenv("LQL_SHARD_CAP", "4300000", 1);    /* 4.3 MB: the 4 MiB embedding fits, one 3 MiB layer per shard */
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    vx_err err = {0};
    CHECK_MSG(vx_encode(hf, out, &o, &err) == 0, "encode: %s", err.msg);
    unsetenv("LQL_SHARD_CAP");
    vx_container *c = NULL;
    CHECK_MSG(vx_open(out, &c, &err) == 0, "open: %s", err.msg);
    if (!c) {
        sh("rm -rf '%s'%s", tmp, "");
        return;
    }
    const cJSON *rep = cJSON_GetObjectItem(cJSON_GetObjectItem(vx_index_json(c), "representations"),
                                           "target.decoder_stack.f32");
    int nseg = cJSON_GetArraySize(cJSON_GetObjectItem(rep, "segments"));
    CHECK_MSG(nseg >= 4, "decoder stack in %d segments", nseg);
    const vx_tensor *first = vx_findf(c, "target.decoder_stack", "layers.%d.attn.q_proj", 0);
    const vx_tensor *last = vx_findf(c, "target.decoder_stack", "layers.%d.ffn.down_proj", 3);
    CHECK(first && last && strcmp(first->segment, last->segment) != 0);
    CHECK(vx_tensor_count(c) == 39);
    cJSON *report = NULL;
    CHECK_MSG(vx_verify(out, NULL, &report, &err) == 0, "verify: %s", err.msg);
    cJSON_Delete(report);
    if (last) {
        char path[2 * PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", out, last->segment);
        FILE *f = fopen(path, "r+b");
        fseek(f, -5, SEEK_END);
        fputc(0x5a, f);
        fclose(f);
        CHECK(vx_verify(out, NULL, &report, &err) == -1);
        snprintf(want, sizeof want, "segment '%s': encoded != recorded (first differing tensor 'layers.3.ffn.down_proj')",
                 last->segment);
        CHECK_STR(err.msg, want);
        cJSON_Delete(report);
    }
    vx_close(c);
    sh("rm -rf '%s'%s", tmp, "");
}

/* A converting encode (f32 source -> f16): every stored tensor is f16, 16 bits per weight,
 * and verify still checks the f32 source against what was recorded. */
static void check_converted(void)
{
    char tmp[] = "/tmp/lql_conv_XXXXXX", hf[PATH_MAX], out[PATH_MAX];
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(hf, sizeof hf, "%s/models/families/llama-gqa", LQL_FIXTURE_DIR);
    snprintf(out, sizeof out, "%s/gqa.vindex3", tmp);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.dtype = VX_F16;
    vx_err err = {0};
    vx_container *c = NULL;
    CHECK_MSG(vx_encode(hf, out, &o, &err) == 0, "encode: %s", err.msg);
    CHECK_MSG(vx_open(out, &c, &err) == 0, "open: %s", err.msg);
    size_t f16 = 0;
    for (size_t i = 0; c && i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        f16 += t->dtype == VX_F16 && t->nbytes == 2 * vx_tensor_nelems(t);
    }
    CHECK(c && vx_tensor_count(c) > 0 && f16 == vx_tensor_count(c));
    vx_close(c);
    cJSON *rep = NULL;
    CHECK_MSG(vx_verify(out, NULL, &rep, &err) == 0, "verify: %s", err.msg);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "source"), "status")), "checked");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(
                  cJSON_GetObjectItem(rep, "representations"), 1), "source")), "ok");
    cJSON_Delete(rep);
    sh("rm -rf '%s'%s", tmp, "");
}

int main(void)
{
    char path[PATH_MAX];
    int n = 0;
    snprintf(path, sizeof path, "%s/models/tinyllama", LQL_FIXTURE_DIR);
    check_model("tinyllama", path);
    n++;
    snprintf(path, sizeof path, "%s/models/families", LQL_FIXTURE_DIR);
    DIR *d = opendir(path);
    CHECK(d != NULL);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char hf[PATH_MAX + 300], conf[PATH_MAX + 320];
        struct stat st;
        snprintf(hf, sizeof hf, "%s/%s", path, e->d_name);
        snprintf(conf, sizeof conf, "%s/config.json", hf);
        if (e->d_name[0] == '.' || stat(conf, &st) < 0)
            continue;
        check_model(e->d_name, hf);
        n++;
    }
    if (d)
        closedir(d);
    CHECK_MSG(n >= 23, "only %d models found", n);
    check_shards();
    check_converted();
    return T_DONE();
}
