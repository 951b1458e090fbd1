/*
 * test_safetensors.c — the safetensors reader (src/storage/safetensors.c): the shared
 * fixtures open with the right tensors; hostile files built here are refused with pinned
 * messages; sharded checkpoints resolve through model.safetensors.index.json; the source
 * hash is sha256 of whole tensors in first-use order.
 */
#include "t.h"
#include "t_file.h"

#include "st.h"
#include "vx_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

/* Write [u64 len][header][data bytes of value 0x11] as dir/name; returns the path. */
static const char *mk(const char *name, uint64_t hlen_field, const char *header, size_t ndata)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(hlen_field >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < ndata; i++)
        fputc(0x11 + (int)(i % 7), f);
    fclose(f);
    return path;
}

static const char *good(const char *name, const char *header, size_t ndata)
{
    return mk(name, strlen(header), header, ndata);
}

/* Expect st_open_file(path) to fail with exactly "'<path>': <tail>". */
static void refused(const char *path, const char *tail, int code)
{
    st_model *m = (st_model *)1;
    vx_err err = {0};
    char want[600];
    snprintf(want, sizeof want, "'%s': %s", path, tail);
    CHECK(st_open_file(path, &m, &err) == -1);
    CHECK(m == NULL);
    CHECK_STR(err.msg, want);
    CHECK_MSG(err.code == code, "code %d, want %d for %s", err.code, code, tail);
}

static void fixtures(void)
{
    st_model *m;
    vx_err err = {0};
    CHECK(st_open_dir(LQL_FIXTURE_DIR "/models/families/llama-gqa", &m, &err) == 0);
    if (!m) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    /* 3 layers x 9 + embed + norm + lm_head */
    CHECK(st_count(m) == 30);
    const st_tensor *t = st_find(m, "model.embed_tokens.weight");
    CHECK(t && t->dtype == VX_F32 && t->ndim == 2 && t->shape[0] == 512 && t->shape[1] == 64);
    CHECK(t && t->nbytes == 512 * 64 * 4);
    t = st_find(m, "model.layers.2.self_attn.k_proj.weight");
    CHECK(t && t->shape[0] == 32 && t->shape[1] == 64);
    CHECK(st_find(m, "model.layers.3.self_attn.k_proj.weight") == NULL);
    CHECK(st_shard_count(m) == 1);
    /* sorted by name */
    for (size_t i = 1; i < st_count(m); i++)
        CHECK(strcmp(st_at(m, i - 1)->name, st_at(m, i)->name) < 0);
    st_close(m);

    CHECK(st_open_dir(LQL_FIXTURE_DIR "/models/families/llama-gqa-bf16", &m, &err) == 0);
    t = m ? st_find(m, "lm_head.weight") : NULL;
    CHECK(t && t->dtype == VX_BF16 && t->nbytes == 512 * 64 * 2);
    st_close(m);

    CHECK(st_open_dir(LQL_FIXTURE_DIR "/models/families/deepseek-v3-lite", &m, &err) == 0);
    t = m ? st_find(m, "model.layers.1.mlp.gate.e_score_correction_bias") : NULL;
    CHECK(t && t->dtype == VX_F32 && t->ndim == 1 && t->shape[0] == 8);
    st_close(m);

    CHECK(st_open_dir("/nonexistent-dir", &m, &err) == -1);
    CHECK_STR(err.msg, "'/nonexistent-dir' has neither model.safetensors nor model.safetensors.index.json");
}

static void hostile(void)
{
    char p[256];
    snprintf(p, sizeof p, "%s/short.safetensors", dir);
    FILE *f = fopen(p, "wb");
    fwrite("abcd", 1, 4, f);
    fclose(f);
    /* a file where a checkpoint directory belongs; PyTorch pickles, which lql does not read */
    st_model *m = NULL;
    vx_err err = {0};
    char want[512];
    CHECK(st_open_dir(p, &m, &err) == -1 && err.code == VX_EARG);
    snprintf(want, sizeof want, "'%s' is a file, not a Hugging Face checkpoint directory "
             "(config.json beside model.safetensors)", p);
    CHECK_STR(err.msg, want);
    char pt[256], bin[300];
    snprintf(pt, sizeof pt, "%s/pt", dir);
    snprintf(bin, sizeof bin, "%s/pytorch_model.bin", pt);
    CHECK(mkdir(pt, 0755) == 0);
    FILE *b = fopen(bin, "wb");
    CHECK(b != NULL);
    if (b) fclose(b);
    CHECK(st_open_dir(pt, &m, &err) == -1 && err.code == VX_EMISSING);
    snprintf(want, sizeof want, "'%s' has neither model.safetensors nor model.safetensors.index.json "
             "(it holds pytorch_model.bin: lql reads safetensors only; save the model with "
             "transformers' save_pretrained(..., safe_serialization=True))", pt);
    CHECK_STR(err.msg, want);
    refused(p, "file is 4 bytes, too short for a safetensors header", VX_EFORMAT);

    refused(mk("past.safetensors", 1000, "{}", 10), "header length 1000 runs past end of file (20 bytes)",
            VX_EFORMAT);
    refused(mk("huge.safetensors", 200u << 20, "{}", 0), "header length 209715200 exceeds the "
            "104857600-byte limit", VX_EFORMAT);
    refused(good("notjson.safetensors", "{\"a\": ", 0), "header is not valid JSON (near byte 13)",
            VX_EFORMAT);
    refused(good("array.safetensors", "[1, 2]  ", 0), "header is not a JSON object", VX_EFORMAT);
    refused(good("latin1.safetensors", "{\"w\xe9\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[0,4]}}", 4), "header is not valid UTF-8 (byte 11)", VX_EFORMAT);
    {   /* deeper than cJSON parses: said so, as for the container's JSON */
        static char deep[2 * 1100 + 16];
        int o = sprintf(deep, "{\"x\": ");
        for (int i = 0; i < 1100; i++) deep[o++] = '[';
        for (int i = 0; i < 1100; i++) deep[o++] = ']';
        deep[o++] = '}';
        deep[o] = 0;
        refused(good("deep.safetensors", deep, 0), "header nested deeper than 1000 levels (near byte "
                "1013; the JSON reader's limit)", VX_EFORMAT);
    }
    /* "a\u0000b" would be read as tensor "a" */
    refused(good("nul.safetensors", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[0,4]}}", 4),
            "header holds a string with U+0000 (near byte 11); tensor names cannot hold NUL",
            VX_EFORMAT);
    refused(good("f64.safetensors", "{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16),
            "tensor 'a' has dtype 'F64', which lql does not read (F32, F16, BF16, I32, I64, U8, BOOL)",
            VX_EUNSUPPORTED);
    refused(good("mismatch.safetensors",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24),
            "tensor 'a' shape and dtype F32 need 24 bytes but data_offsets span 20", VX_EFORMAT);
    refused(good("oob.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", 16),
            "tensor 'a' data_offsets [0, 24] extend past the data area (16 bytes)", VX_EFORMAT);
    refused(good("backward.safetensors",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 16),
            "tensor 'a' data_offsets [8, 0] end before they start", VX_EFORMAT);
    refused(good("overlap.safetensors",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24),
            "tensors 'a' and 'b' overlap (bytes [0, 16) and [8, 24) of the data area)", VX_EFORMAT);
    refused(good("overflow.safetensors",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,16]}}",
                 16),
            "tensor 'a' element count overflows 64 bits", VX_EFORMAT);
    refused(good("negdim.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4),
            "tensor 'a' has a dimension that is not a non-negative integer", VX_EFORMAT);
    refused(good("fracoff.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4]}}", 4),
            "tensor 'a' data_offsets are not non-negative integers", VX_EFORMAT);
    good("dup.safetensors",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8);
}

/* Duplicate names are caught after parsing, with both files named. */
static void duplicates(void)
{
    char path[256], want[600];
    snprintf(path, sizeof path, "%s/dup.safetensors", dir);
    st_model *m;
    vx_err err = {0};
    CHECK(st_open_file(path, &m, &err) == -1);
    snprintf(want, sizeof want, "tensor 'a' appears twice (in '%s' and '%s')", path, path);
    CHECK_STR(err.msg, want);
}

static void image_and_hash(void)
{
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"x\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                    "\"y\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[8,16]}}";
    const char *path = good("ok.safetensors", h, 16);
    st_model *m;
    vx_err err = {0};
    CHECK(st_open_file(path, &m, &err) == 0);
    if (!m)
        return;
    CHECK(st_count(m) == 2);
    const st_tensor *y = st_find(m, "y");
    CHECK(y && y->dtype == VX_BF16 && y->nbytes == 8 && y->file_offset == 8 + strlen(h) + 8);
    CHECK(y && y->data[0] == 0x11 + 8 % 7);
    /* Source hash: y then x (first use order), each whole, y not repeated. */
    unsigned char cat[11];
    memcpy(cat, y->data, 8);
    memcpy(cat + 8, st_find(m, "x")->data, 3);
    char want[65], got[65];
    vx_sha256_hex(cat, sizeof cat, want);
    /* BOOL reads as one byte per element. */
    const char *hb = "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[2,3],\"data_offsets\":[0,6]}}";
    st_model *mb;
    CHECK(st_open_file(good("bool.safetensors", hb, 6), &mb, &err) == 0);
    CHECK(mb && st_find(mb, "m")->dtype == VX_U8 && st_find(mb, "m")->nbytes == 6);
    st_close(mb);
    const char *names[] = {"y", "x", "y"};
    CHECK(st_hash_sources(m, names, 3, got, &err) == 0);
    CHECK_STR(got, want);
    const char *bad[] = {"y", "nope"};
    CHECK(st_hash_sources(m, bad, 2, got, &err) == -1);
    CHECK_STR(err.msg, "source tensor 'nope' is not in the checkpoint");
    st_close(m);

    /* The in-memory entry point agrees with the file reader. */
    unsigned char img[256];
    size_t hl = strlen(h);
    memset(img, 0, sizeof img);
    for (int i = 0; i < 8; i++)
        img[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(img + 8, h, hl);
    CHECK(st_check_image(img, 8 + hl + 16, "mem", &err) == 2);
    CHECK(st_check_image(img, 8 + hl + 15, "mem", &err) == -1);
    CHECK_STR(err.msg, "'mem': tensor 'y' data_offsets [8, 16] extend past the data area (15 bytes)");
}

/* Deterministic mutation sweep over a valid image: every prefix, and 20000 random byte
 * edits; each must parse or fail with a message (ASan watches the reads). */
static void mutations(void)
{
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[16,24]}}";
    size_t hl = strlen(h), n = 8 + hl + 24;
    unsigned char *img = calloc(1, n), *mut = malloc(n);
    for (int i = 0; i < 8; i++)
        img[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(img + 8, h, hl);
    vx_err e;
    CHECK(st_check_image(img, n, "m", &e) == 2);
    int ok = 0, bad = 0, silent = 0;
    for (size_t k = 0; k < n; k++) {
        unsigned char *exact = malloc(k ? k : 1);
        memcpy(exact, img, k);
        memset(&e, 0, sizeof e);
        int rc = st_check_image(exact, k, "m", &e);
        rc < 0 ? bad++ : ok++;
        silent += rc < 0 && !e.msg[0];
        free(exact);
    }
    uint64_t r = 88172645463325252ull;
    static const char pool[] = "{}[]\":,0123456789-.eE FBUI";
    for (int t = 0; t < 20000; t++) {
        memcpy(mut, img, n);
        for (int edits = 0; edits < 1 + t % 4; edits++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            size_t at = (size_t)(r % n);
            mut[at] = (r >> 32) & 1 ? (unsigned char)pool[(r >> 40) % (sizeof pool - 1)]
                                    : (unsigned char)(r >> 48);
        }
        memset(&e, 0, sizeof e);
        int rc = st_check_image(mut, n, "m", &e);
        rc < 0 ? bad++ : ok++;
        silent += rc < 0 && !e.msg[0];
    }
    CHECK(silent == 0);
    CHECK(bad > 1000 && ok > 10);
    free(img);
    free(mut);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void sharded(void)
{
    char sd[128], p[256], want[700];
    snprintf(sd, sizeof sd, "%s/sharded", dir);
    mkdir(sd, 0755);
    snprintf(p, sizeof p, "%s/a.safetensors", sd);
    const char *ha = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    const char *hb = "{\"y\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}";
    FILE *f = fopen(p, "wb");
    uint64_t n = strlen(ha);
    fwrite(&n, 8, 1, f);
    fputs(ha, f);
    fwrite("abcdefgh", 1, 8, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/b.safetensors", sd);
    f = fopen(p, "wb");
    n = strlen(hb);
    fwrite(&n, 8, 1, f);
    fputs(hb, f);
    fwrite("wxyz", 1, 4, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", sd);
    write_text(p, "{\"metadata\":{},\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}");
    st_model *m;
    vx_err err = {0};
    CHECK(st_open_dir(sd, &m, &err) == 0);
    if (m) {
        CHECK(st_count(m) == 2 && st_shard_count(m) == 2);
        const st_tensor *y = st_find(m, "y");
        CHECK(y && y->shard == 1 && memcmp(y->data, "wxyz", 4) == 0);
        st_close(m);
    }
    /* One shard spelled two ways is one file, as transformers takes it. */
    write_text(p, "{\"weight_map\":{\"x\":\"./a.safetensors\",\"y\":\"b.safetensors\","
                  "\"z\":\"a.safetensors\"}}");
    CHECK(st_open_dir(sd, &m, &err) == -1);     /* z is in no shard: but a.safetensors opened once */
    snprintf(want, sizeof want, "'%s': tensor 'z' is not in shard 'a.safetensors'", p);
    CHECK_STR(err.msg, want);
    write_text(p, "{\"weight_map\":{\"x\":\"./a.safetensors\",\"y\":\"b.safetensors\"}}");
    CHECK(st_open_dir(sd, &m, &err) == 0);
    CHECK(m && st_shard_count(m) == 2);
    st_close(m);
    /* A shard that is missing. */
    write_text(p, "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"c.safetensors\"}}");
    CHECK(st_open_dir(sd, &m, &err) == -1);
    snprintf(want, sizeof want, "'%s': shard 'c.safetensors' (holding tensor 'y') cannot be read: "
             "No such file or directory", p);
    CHECK_STR(err.msg, want);
    CHECK(err.code == VX_EMISSING);
    /* A tensor that is not where the map says. */
    write_text(p, "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\"}}");
    CHECK(st_open_dir(sd, &m, &err) == -1);
    snprintf(want, sizeof want, "'%s': tensor 'y' is not in shard 'a.safetensors'", p);
    CHECK_STR(err.msg, want);
    /* A shard path that leaves the directory. */
    write_text(p, "{\"weight_map\":{\"x\":\"../a.safetensors\"}}");
    CHECK(st_open_dir(sd, &m, &err) == -1);
    snprintf(want, sizeof want, "'%s': shard '../a.safetensors' is not a file name inside the "
             "checkpoint directory", p);
    CHECK_STR(err.msg, want);
    CHECK(err.code == VX_EPATH);
    write_text(p, "{\"weight_map\":{\"x\":\"/etc/passwd\"}}");
    CHECK(st_open_dir(sd, &m, &err) == -1);
    CHECK_HAS(err.msg, "shard '/etc/passwd' is not a file name inside the checkpoint directory");
    /* The Hugging Face cache layout: shards are symlinks into a blobs directory. */
    char blobs[160], snap[160], cmd[1400];
    snprintf(blobs, sizeof blobs, "%s/blobs", dir);
    snprintf(snap, sizeof snap, "%s/snapshots", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s' && mv '%s/a.safetensors' '%s/b.safetensors' '%s/' && "
             "ln -s '../blobs/a.safetensors' '%s/a.safetensors' && ln -s '../blobs/b.safetensors' "
             "'%s/b.safetensors'", blobs, snap, sd, sd, blobs, snap, snap);
    CHECK(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", snap);
    write_text(p, "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}");
    CHECK(st_open_dir(snap, &m, &err) == 0);
    if (m) {
        CHECK(st_count(m) == 2 && memcmp(st_find(m, "y")->data, "wxyz", 4) == 0);
        st_close(m);
    }
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", sd);
    write_text(p, "{\"weight_map\":[]}");
    CHECK(st_open_dir(sd, &m, &err) == -1);
    snprintf(want, sizeof want, "'%s': not a JSON object with a \"weight_map\" object", p);
    CHECK_STR(err.msg, want);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lql-st-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    fixtures();
    hostile();
    duplicates();
    image_and_hash();
    mutations();
    sharded();
    t_rm_rf(dir);
    return T_DONE();
}
