/*
 * test_encode.c — vx_encode end to end: every vendored fixture and mkfixture output (all
 * families x f32/f16/bf16, a sharded checkpoint) encodes into a container that vx_open
 * accepts and vx_verify finds clean; the execution surface carries each family's facts;
 * split / transposed / converted operands hold the right values; refusals name the key
 * or tensor; failures (shard cap, cancel) leave no directory behind.
 */
#include "t.h"
#include "t_file.h"

#include "st.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAM LQL_FIXTURE_DIR "/models/families/"

static char tmp[64];
static vx_err err;

static cJSON *jload(const char *dir, const char *file)
{
    char path[512], *text;
    size_t n;
    cJSON *j = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (vx_read_small_file(path, file, &text, &n, &err) < 0)
        return NULL;
    vx_json_parse(file, text, n, &j, &err);
    free(text);
    return j;
}

/* Dotted path lookup; numeric parts index arrays ("layers.0.window"). */
static const cJSON *jp(const cJSON *j, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *t = strtok_r(buf, ".", &save); t && j; t = strtok_r(NULL, ".", &save))
        j = cJSON_IsArray(j) ? cJSON_GetArrayItem(j, atoi(t)) : cJSON_GetObjectItemCaseSensitive(j, t);
    return j;
}

static double jnum(const cJSON *j, const char *path)
{
    const cJSON *v = jp(j, path);
    return cJSON_IsNumber(v) ? v->valuedouble : -12345.0;
}

static const char *js(const cJSON *j, const char *path)
{
    const cJSON *v = jp(j, path);
    return cJSON_IsString(v) ? v->valuestring : "(not a string)";
}

static int jtrue(const cJSON *j, const char *path)
{
    return cJSON_IsTrue(jp(j, path));
}

static int jnull(const cJSON *j, const char *path)
{
    return cJSON_IsNull(jp(j, path));
}

static const char *out_path(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    return p;
}

/* Encode src into tmp/name; on success open + verify (with the source) must be clean. */
static int encode_ok(const char *src, const char *name, const vx_encode_opts *o)
{
    const char *out = out_path(name);
    int rc = vx_encode(src, out, o, &err);
    CHECK_MSG(rc == 0, "encode %s: %s", src, err.msg);
    if (rc)
        return -1;
    vx_container *c;
    rc = vx_open(out, &c, &err);
    CHECK_MSG(rc == 0, "open %s: %s", out, err.msg);
    if (rc)
        return -1;
    vx_close(c);
    cJSON *rep = NULL;
    rc = vx_verify(out, src, &rep, &err);
    CHECK_MSG(rc == 0, "verify %s: %s", out, err.msg);
    cJSON_Delete(rep);
    return rc;
}

/* The execution surface of an encoded container (caller deletes the graph). */
static cJSON *graph(const char *name, const cJSON **x, const cJSON **layers)
{
    cJSON *g = jload(out_path(name), "system_graph.json");
    *x = jp(g, "components.0.execution");
    *layers = jp(g, "components.0.layers");
    return g;
}

/* No "<name>.tmp.*" sibling and no <name> left in tmp. */
static int leftovers(const char *name)
{
    DIR *d = opendir(tmp);
    int n = 0;
    struct dirent *e;
    size_t k = strlen(name);
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, name, k) == 0 && (e->d_name[k] == '\0' || e->d_name[k] == '.'))
            n++;
    if (d)
        closedir(d);
    return n;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

static float elem(const void *base, vx_dtype t, size_t i)
{
    float f;
    vx_row_to_f32(t, (const unsigned char *)base + i * vx_dtype_block_bytes(t), &f, 1);
    return f;
}

/* ---------------------------------------------------------------- tests */

/* The segment writer on its own (also used by representation and COMPILE writers). */
static void segment_writer(void)
{
    vx_segw_tensor t[3] = {
        {.name = "a", .dtype = VX_F32, .ndim = 2, .shape = {3, 5}},
        {.name = "b", .dtype = VX_F16, .ndim = 1, .shape = {7}},
        {.name = "empty", .dtype = VX_BF16, .ndim = 1, .shape = {0}},
    };
    unsigned char a[60], b[14];
    for (int i = 0; i < 60; i++)
        a[i] = (unsigned char)(i * 7 + 1);
    for (int i = 0; i < 14; i++)
        b[i] = (unsigned char)(200 - i);
    char path[300], sha[65], want[65];
    snprintf(path, sizeof path, "%s/seg.bin", tmp);
    vx_segw *w;
    uint64_t bytes = 0;
    /* Empty tensors are refused, as the reader refuses them. */
    CHECK(vx_segw_open(&w, path, "obj", "obj.f32", t, 3, &err) == -1);
    char msg[400];
    snprintf(msg, sizeof msg, "segment '%s': tensor 'empty' needs 1-4 positive dimensions", path);
    CHECK_STR(err.msg, msg);
    CHECK(access(path, F_OK) != 0);
    CHECK(vx_segw_open(&w, path, "obj", "obj.f32", t, 2, &err) == 0);
    CHECK(vx_segw_write(w, a, 13, &err) == 0 && vx_segw_write(w, a + 13, 47, &err) == 0);
    CHECK(vx_segw_write(w, b, 14, &err) == 0);
    CHECK(vx_segw_write(w, b, 1, &err) == -1);
    snprintf(msg, sizeof msg, "segment '%s': 1 bytes written past the last tensor", path);
    CHECK_STR(err.msg, msg);
    CHECK(vx_segw_close(w, sha, &bytes, &err) == 0);
    CHECK(vx_sha256_file(path, want, &err) == 0);
    CHECK_STR(sha, want);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == bytes);
    char *img;
    size_t n;
    CHECK(vx_read_small_file(path, "seg", &img, &n, &err) == 0);
    vx_segment_hdr h;
    if (vx_segment_parse("seg", img, n, &h, &err) == 0) {
        CHECK(h.n == 2 && h.payload_off % 64 == 0);
        CHECK(h.t[0].offset == 0 && h.t[0].length == 60 && h.t[1].offset == 64 && h.t[1].length == 14);
        CHECK_STR(h.t[1].name, "b");
        vx_sha256_hex(a, 60, want);
        CHECK_STR(h.t[0].sha256, want);
        vx_sha256_hex(b, 14, want);
        CHECK_STR(h.t[1].sha256, want);
        CHECK(memcmp(img + h.payload_off + 64, b, 14) == 0);
        vx_segment_hdr_free(&h);
    } else {
        CHECK_MSG(0, "segment does not parse: %s", err.msg);
    }
    free(img);
    /* Closing with a tensor unfinished fails and names it. */
    snprintf(path, sizeof path, "%s/seg2.bin", tmp);
    CHECK(vx_segw_open(&w, path, "obj", "obj.f32", t, 2, &err) == 0);
    CHECK(vx_segw_write(w, a, 60, &err) == 0);
    CHECK(vx_segw_close(w, sha, &bytes, &err) == -1);
    snprintf(msg, sizeof msg, "segment '%s': tensor 2 of 2 is incomplete", path);
    CHECK_STR(err.msg, msg);
    /* An existing file is never overwritten. */
    CHECK(vx_segw_open(&w, path, "obj", "obj.f32", t, 2, &err) == -1);
    CHECK_HAS(err.msg, "cannot create segment");
    /* Shard planning and the cap. */
    size_t k = 99;
    uint64_t one = 8 + vx_segw_header_bound(t, 1) + 60;
    CHECK(vx_segw_fit(t, 2, one, "x", "obj", &k, &err) == 0 && k == 1);
    CHECK(vx_segw_fit(t, 2, 1ull << 20, "x", "obj", &k, &err) == 0 && k == 2);
    CHECK(vx_segw_fit(t, 2, one - 1, "x", "obj", &k, &err) == -1);
    snprintf(msg, sizeof msg, "x: tensor 'a' of 'obj' (60 bytes) does not fit the shard cap of %llu "
             "bytes (raise LQL_SHARD_CAP)", (unsigned long long)(one - 1));
    CHECK_STR(err.msg, msg);
    uint64_t cap;
    setenv("LQL_SHARD_CAP", "12345", 1);
    CHECK(vx_shard_cap(&cap, &err) == 0 && cap == 12345);
    /* a value that is set but not a byte count is refused, never quietly the default */
    const char *bad[] = {"12k", "1e6", "abc", "0", "-5", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("LQL_SHARD_CAP", bad[i], 1);
        CHECK(vx_shard_cap(&cap, &err) == -1 && err.code == VX_EARG);
    }
    CHECK_STR(err.msg, "LQL_SHARD_CAP='99999999999999999999999' is not a positive number of bytes "
              "(unset it for the 4 GiB default)");
    unsetenv("LQL_SHARD_CAP");
    CHECK(vx_shard_cap(&cap, &err) == 0 && cap == 4ull << 30);
}

/* The smaps entry of this process's mapping that holds addr: *kb the value of field (kB),
 * flags its VmFlags line. 0 when found. */
static int smaps_of(const void *addr, const char *field, long *kb, char *flags, size_t fcap)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int in = 0, found = -1;
    *kb = 0;
    flags[0] = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char c;
        if (sscanf(line, "%lx-%lx %c", &lo, &hi, &c) == 3 && strchr(line, '-') < strchr(line, ' ')) {
            if (in)
                break;
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            continue;
        }
        if (!in)
            continue;
        found = 0;
        size_t fl = strlen(field);
        if (!strncmp(line, field, fl))
            *kb = atol(line + fl);
        if (!strncmp(line, "VmFlags:", 8))
            snprintf(flags, fcap, "%.200s", line + 8);
    }
    fclose(f);
    return found;
}

static volatile unsigned touched;   /* keeps pmd_mapped's page touches */

/* Map path read-only with the huge-page advice, touch every page: its FilePmdMapped (kB),
 * or -1. */
static long pmd_mapped(const char *path)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const volatile unsigned char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return -1;
    madvise((void *)m, (size_t)st.st_size, MADV_HUGEPAGE);
    unsigned sum = 0;
    for (off_t o = 0; o < st.st_size; o += 4096)
        sum += m[o];
    long kb = -1;
    char flags[256];
    if (smaps_of((const void *)m, "FilePmdMapped:", &kb, flags, sizeof flags) != 0)
        kb = -1;
    munmap((void *)m, (size_t)st.st_size);
    touched = sum;
    return kb;
}

/* Segments are written in 2 MiB writes at 2 MiB offsets, so the page cache keeps them in
 * huge folios a reader maps with one TLB entry each (decode streams the weights through
 * them); the bytes are the same whatever the caller's write sizes. Where this kernel and
 * file system give a plain 2 MiB-aligned write huge folios (the control), the segment must
 * have them too; and the container reader advises huge pages on its segment mappings. */
static void huge_folios(void)
{
    const size_t na = 3 * 1048581;                      /* bf16 [3, 1048581] */
    vx_segw_tensor t[2] = {
        {.name = "a", .dtype = VX_BF16, .ndim = 2, .shape = {3, 1048581}},
        {.name = "b", .dtype = VX_F32, .ndim = 1, .shape = {1000}},
    };
    unsigned char *a = malloc(2 * na), b[4000];
    if (!a) {
        CHECK_MSG(0, "out of memory");
        return;
    }
    for (size_t i = 0; i < 2 * na; i++)
        a[i] = (unsigned char)(i * 2654435761u >> 13);
    for (int i = 0; i < 4000; i++)
        b[i] = (unsigned char)(i * 31 + 7);
    char path[300], sha[65], want[65];
    snprintf(path, sizeof path, "%s/huge.bin", tmp);
    vx_segw *w;
    uint64_t bytes = 0;
    /* a small piece, then more than two buffers at once (straight from the caller past the
     * first full buffer), then the rest in odd pieces */
    size_t cut[] = {100, 100 + (5u << 20), 100 + (5u << 20) + 777, 2 * na};
    CHECK(vx_segw_open(&w, path, "obj", "obj.bf16", t, 2, &err) == 0);
    for (size_t i = 0, at = 0; i < sizeof cut / sizeof *cut; at = cut[i++])
        CHECK(vx_segw_write(w, a + at, cut[i] - at, &err) == 0);
    CHECK(vx_segw_write(w, b, 4000, &err) == 0);
    CHECK(vx_segw_close(w, sha, &bytes, &err) == 0);
    CHECK(vx_sha256_file(path, want, &err) == 0);
    CHECK_STR(sha, want);
    char *img;
    size_t n;
    vx_segment_hdr h;
    if (vx_read_small_file(path, "huge", &img, &n, &err) == 0) {
        if (vx_segment_parse("huge", img, n, &h, &err) == 0) {
            CHECK(h.n == 2 && h.t[0].length == 2 * na && h.t[1].length == 4000);
            CHECK(memcmp(img + h.payload_off + h.t[0].offset, a, 2 * na) == 0);
            CHECK(memcmp(img + h.payload_off + h.t[1].offset, b, 4000) == 0);
            vx_sha256_hex(a, 2 * na, want);
            CHECK_STR(h.t[0].sha256, want);
            vx_segment_hdr_free(&h);
        } else {
            CHECK_MSG(0, "segment does not parse: %s", err.msg);
        }
        free(img);
    } else {
        CHECK_MSG(0, "cannot read the segment back: %s", err.msg);
    }
    char ctl[300];
    snprintf(ctl, sizeof ctl, "%s/huge-control.bin", tmp);
    int fd = open(ctl, O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0 && write(fd, a, 4u << 20) == (ssize_t)(4u << 20) && fsync(fd) == 0);
    if (fd >= 0)
        close(fd);
    long c = pmd_mapped(ctl), s = pmd_mapped(path);
    if (c >= 4096)
        CHECK_MSG(s >= 6144, "segment of %llu bytes: %ld kB PMD-mapped (control: %ld kB)",
                  (unsigned long long)bytes, s, c);
    else
        printf("  (huge folios not checked: this file system gives a 2 MiB-aligned write %ld kB PMD-mapped)\n", c);
    free(a);
    /* the reader's advice, wherever madvise takes it */
    void *probe = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int thp = probe != MAP_FAILED && madvise(probe, 4096, MADV_HUGEPAGE) == 0;
    if (probe != MAP_FAILED)
        munmap(probe, 4096);
    vx_container *vc;
    if (thp && vx_open(out_path("tiny.vindex3"), &vc, &err) == 0) {
        long kb;
        char flags[256];
        const vx_tensor *x = vx_tensor_at(vc, 0);
        CHECK(x && smaps_of(x->data, "Rss:", &kb, flags, sizeof flags) == 0);
        CHECK_MSG(strstr(flags, " hg") != NULL, "segment mapping without MADV_HUGEPAGE: VmFlags%s", flags);
        vx_close(vc);
    } else if (thp) {
        CHECK_MSG(0, "cannot open tiny.vindex3: %s", err.msg);
    }
}

static void tinyllama(void)
{
    if (encode_ok(LQL_FIXTURE_DIR "/models/tinyllama", "tiny.vindex3", NULL) < 0)
        return;
    const char *out = out_path("tiny.vindex3");
    cJSON *ix = jload(out, "index.json");
    CHECK(jnum(ix, "version") == 4);
    CHECK_STR(js(ix, "model"), "tinyllama");
    CHECK_STR(js(ix, "family"), "llama");
    CHECK_STR(js(ix, "authority"), "canonical");
    CHECK(jnum(ix, "hidden_size") == 256 && jnum(ix, "num_layers") == 4);
    CHECK(jnull(ix, "moe_manifest") && jnull(ix, "derived_from_model"));
    CHECK(cJSON_IsArray(jp(ix, "profiles")) && cJSON_GetArraySize(jp(ix, "profiles")) == 0);
    CHECK(cJSON_IsObject(jp(ix, "variants")));
    char real[4096];
    CHECK(realpath(LQL_FIXTURE_DIR "/models/tinyllama", real) != NULL);
    CHECK_STR(jp(ix, "encoder") ? cJSON_GetObjectItem(jp(ix, "encoder"), "source")->valuestring : NULL, real);
    CHECK_STR(js(ix, "encoder.dtype_policy"), "source");
    CHECK_STR(js(ix, "encoder.declaration_only.initializer_range"), "training initialisation");
    CHECK_STR(js(ix, "encoder.declaration_only.pretraining_tp"),
              "tensor-parallel slicing used in pre-training; computes the same function");
    const cJSON *rep = cJSON_GetObjectItem(jp(ix, "representations"), "target.decoder_stack.f32");
    CHECK(rep != NULL);
    CHECK_STR(js(rep, "fidelity"), "source-exact");
    CHECK_STR(js(rep, "encoding"), "tensor-table");
    /* Each recorded segment hash is the file's. */
    const cJSON *s;
    int nseg = 0;
    cJSON_ArrayForEach(s, jp(ix, "segments")) {
        char path[512], hex[65];
        snprintf(path, sizeof path, "%s/%s", out, s->string);
        CHECK(vx_sha256_file(path, hex, &err) == 0);
        CHECK_STR(hex, js(s, "sha256"));
        struct stat st;
        CHECK(stat(path, &st) == 0 && (double)st.st_size == jnum(s, "bytes"));
        nseg++;
    }
    CHECK(nseg == 3);
    cJSON_Delete(ix);

    const cJSON *x, *ls;
    cJSON *g = graph("tiny.vindex3", &x, &ls);
    CHECK(jnum(g, "schema") == 7);
    CHECK_STR(js(g, "components.0.id"), "target");
    CHECK_STR(js(g, "components.0.role"), "decoder");
    CHECK(jnum(g, "components.0.vocab_size") == 4096 && jnum(g, "components.0.context_length") == 256);
    CHECK_STR(js(x, "norm.kind"), "rms");
    CHECK_NEAR(jnum(x, "norm.eps"), 1e-5, 1e-12);
    CHECK(jnum(x, "attention.heads") == 8 && jnum(x, "attention.kv_heads") == 4 && jnum(x, "attention.head_dim") == 32);
    CHECK_NEAR(jnum(x, "attention.scale"), 0.17677669529663687, 1e-15);
    CHECK_STR(js(x, "attention.rope.style"), "rotate_half");
    CHECK(jnum(x, "attention.rope.theta") == 10000 && jnull(x, "attention.rope.scaling"));
    CHECK_STR(js(x, "ffn.activation"), "silu");
    CHECK(jnum(x, "ffn.intermediate") == 768);
    CHECK(!jtrue(x, "lm_head.tied") && jnull(x, "lm_head.softcap") && jnull(x, "moe") && jnull(x, "mla"));
    CHECK(jnum(x, "special_tokens.bos") == 0 && jnum(x, "special_tokens.eos.0") == 0);
    CHECK(jtrue(x, "special_tokens.add_bos"));
    CHECK(cJSON_GetArraySize(ls) == 4 && jnull(ls, "3.window"));
    const cJSON *b = cJSON_GetObjectItem(jp(g, "objects.1.source_bindings"), "layers.3.ffn.down_proj");
    CHECK_STR(cJSON_IsString(b) ? b->valuestring : NULL, "model.layers.3.mlp.down_proj.weight");
    cJSON_Delete(g);

    /* Snapshots. */
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", out);
    CHECK(stat(p, &st) == 0 && st.st_size > 1000);
    snprintf(p, sizeof p, "%s/config.json", out);
    CHECK(stat(p, &st) == 0);

    /* A trailing slash names the same output. */
    char slashed[300];
    snprintf(slashed, sizeof slashed, "%s/slash.vx/", tmp);
    CHECK(vx_encode(FAM "llama3-rope", slashed, NULL, &err) == 0);
    struct stat ss;
    CHECK(stat(out_path("slash.vx/index.json"), &ss) == 0 && leftovers("slash.vx") == 1);

    /* Existing output refused. */
    CHECK(vx_encode(LQL_FIXTURE_DIR "/models/tinyllama", out, NULL, &err) == -1);
    char want[512];
    snprintf(want, sizeof want, "encode: '%s' already exists; lql does not overwrite it", out);
    CHECK_STR(err.msg, want);
}

static void families(void)
{
    static const char *const names[] = {"llama-gqa", "llama-gqa-bf16", "llama3-rope", "qwen2",
                                        "mistral-swa", "gemma2", "gpt2", "phi3", "mixtral",
                                        "qwen2-moe", "deepseek-v3-lite"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char src[512];
        snprintf(src, sizeof src, FAM "%s", names[i]);
        encode_ok(src, names[i], NULL);
    }
    const cJSON *x, *ls;
    cJSON *g = graph("gemma2", &x, &ls);
    CHECK(jnum(x, "norm.weight_offset") == 1.0);
    CHECK(jnum(x, "attention.softcap") == 50.0 && jnum(x, "lm_head.softcap") == 30.0);
    CHECK(jnum(x, "attention.scale") == 0.25 && jnum(x, "attention.head_dim") == 24);
    CHECK(jnum(x, "embedding.scale") == 8.0);
    CHECK(jnum(ls, "0.window") == 8 && jnull(ls, "1.window") && jnum(ls, "2.window") == 8);
    CHECK(jtrue(x, "post_norms.attn") && jtrue(x, "post_norms.ffn") && jtrue(x, "lm_head.tied"));
    CHECK_STR(js(x, "ffn.activation"), "gelu_tanh");
    CHECK(jnum(x, "special_tokens.bos") == 2 && jnum(x, "special_tokens.eos.0") == 1);
    cJSON_Delete(g);
    cJSON *ix = jload(out_path("gemma2"), "index.json");
    CHECK_STR(js(ix, "encoder.declaration_only.hidden_act"),
              "legacy spelling; this family reads hidden_activation");
    cJSON_Delete(ix);

    g = graph("gpt2", &x, &ls);
    CHECK_STR(js(x, "embedding.positions"), "learned");
    CHECK_STR(js(x, "norm.kind"), "layer");
    CHECK(jtrue(x, "norm.bias") && jtrue(x, "lm_head.tied") && jtrue(x, "attention.qkv_bias"));
    CHECK(jtrue(x, "attention.out_bias") && jtrue(x, "ffn.bias") && jnull(x, "attention.rope"));
    CHECK_STR(js(x, "ffn.kind"), "plain");
    CHECK(jnum(x, "ffn.intermediate") == 256 && jnum(x, "context_length") == 128);
    CHECK(!jtrue(x, "special_tokens.add_bos"));
    cJSON_Delete(g);

    g = graph("llama3-rope", &x, &ls);
    CHECK_STR(js(x, "attention.rope.scaling.type"), "llama3");
    CHECK(jnum(x, "attention.rope.scaling.factor") == 8 && jnum(x, "attention.rope.scaling.low_freq_factor") == 1);
    CHECK(jnum(x, "attention.rope.scaling.high_freq_factor") == 4);
    CHECK(jnum(x, "attention.rope.scaling.original_max_position_embeddings") == 64);
    CHECK(jnum(x, "attention.rope.theta") == 500000 && jnum(x, "attention.kv_heads") == 1);
    CHECK(jtrue(x, "lm_head.tied"));
    cJSON_Delete(g);

    g = graph("qwen2", &x, &ls);
    CHECK(jtrue(x, "attention.qkv_bias") && !jtrue(x, "attention.out_bias"));
    CHECK(jnull(ls, "0.window") && jnull(ls, "2.window") && !jtrue(x, "special_tokens.add_bos"));
    CHECK_NEAR(jnum(x, "norm.eps"), 1e-6, 1e-15);
    cJSON_Delete(g);

    g = graph("mistral-swa", &x, &ls);
    CHECK(jnum(ls, "0.window") == 8 && jnum(ls, "1.window") == 8);
    cJSON_Delete(g);

    g = graph("mixtral", &x, &ls);
    CHECK(jnum(x, "moe.experts") == 8 && jnum(x, "moe.top_k") == 2 && jnum(x, "moe.expert_intermediate") == 64);
    CHECK_STR(js(x, "moe.scoring"), "softmax");
    CHECK(jtrue(x, "moe.normalise") && jnull(x, "moe.shared") && jnum(x, "moe.routed_scaling") == 1);
    CHECK_STR(js(ls, "0.ffn"), "moe");
    CHECK_STR(js(ls, "1.ffn"), "moe");
    const cJSON *b = cJSON_GetObjectItem(jp(g, "objects.1.source_bindings"), "layers.1.ffn.experts.7.up_proj");
    CHECK_STR(cJSON_IsString(b) ? b->valuestring : NULL, "model.layers.1.block_sparse_moe.experts.7.w3.weight");
    cJSON_Delete(g);

    g = graph("qwen2-moe", &x, &ls);
    CHECK(!jtrue(x, "moe.normalise") && jnum(x, "moe.shared.intermediate") == 64);
    CHECK_STR(js(x, "moe.shared.gate"), "sigmoid");
    CHECK_STR(js(ls, "0.ffn"), "moe");
    CHECK_STR(js(ls, "1.ffn"), "dense");
    CHECK_STR(js(ls, "2.ffn"), "moe");
    CHECK(jtrue(x, "attention.qkv_bias") && jnum(x, "ffn.intermediate") == 128);
    cJSON_Delete(g);

    g = graph("deepseek-v3-lite", &x, &ls);
    CHECK(jnum(x, "mla.q_lora_rank") == 32 && jnum(x, "mla.kv_lora_rank") == 32);
    CHECK(jnum(x, "mla.qk_nope_head_dim") == 16 && jnum(x, "mla.qk_rope_head_dim") == 8 && jnum(x, "mla.v_head_dim") == 16);
    CHECK(jnum(x, "mla.q_a_norm_eps") == 1e-6 && jnum(x, "mla.kv_a_norm_eps") == 1e-6);
    CHECK_STR(js(x, "moe.scoring"), "sigmoid");
    CHECK(jtrue(x, "moe.score_correction_bias") && jnum(x, "moe.n_group") == 4 && jnum(x, "moe.topk_group") == 2);
    CHECK(jtrue(x, "moe.normalise") && jnum(x, "moe.routed_scaling") == 2.5);
    CHECK(jnum(x, "moe.shared.intermediate") == 32 && jnull(x, "moe.shared.gate"));
    CHECK_STR(js(x, "attention.rope.style"), "interleaved");
    CHECK(jnum(x, "attention.rope.rotary_dim") == 8);
    CHECK_NEAR(jnum(x, "attention.scale"), 1.0 / sqrt(24.0), 1e-15);
    CHECK_STR(js(ls, "0.operator"), "mla");
    CHECK_STR(js(ls, "0.ffn"), "dense");
    CHECK_STR(js(ls, "1.ffn"), "moe");
    cJSON_Delete(g);

    /* Values: split, transposed and kept operands against the checkpoint. */
    vx_container *c;
    st_model *m;
    if (vx_open(out_path("gpt2"), &c, &err) == 0 && st_open_dir(FAM "gpt2", &m, &err) == 0) {
        const st_tensor *w = st_find(m, "transformer.h.1.attn.c_attn.weight");
        const vx_tensor *k = vx_find(c, "target.decoder_stack", "layers.1.attn.k_proj");
        CHECK(k && k->shape[0] == 64 && k->shape[1] == 64);
        int same = k && w;
        for (int r = 0; same && r < 64; r++)
            for (int col = 0; col < 64; col++)
                same &= elem(k->data, k->dtype, (size_t)r * 64 + col) ==
                        elem(w->data, VX_F32, (size_t)col * 192 + 64 + r);
        CHECK_MSG(same, "gpt2 k_proj is not the transposed middle third of c_attn");
        const vx_tensor *d = vx_find(c, "target.decoder_stack", "layers.0.ffn.down_proj");
        CHECK(d && d->shape[0] == 64 && d->shape[1] == 256);
        const vx_tensor *kb = vx_find(c, "target.decoder_stack", "layers.1.attn.k_proj.bias");
        const st_tensor *bb = st_find(m, "transformer.h.1.attn.c_attn.bias");
        CHECK(kb && bb && memcmp(kb->data, bb->data + 64 * 4, 64 * 4) == 0);
        CHECK(vx_find(c, "target.output_head", "lm_head") == NULL);
        CHECK(vx_find(c, "target.embedding", "positions") != NULL);
        st_close(m);
        vx_close(c);
    }
    if (vx_open(out_path("phi3"), &c, &err) == 0 && st_open_dir(FAM "phi3", &m, &err) == 0) {
        const st_tensor *w = st_find(m, "model.layers.1.self_attn.qkv_proj.weight");
        const vx_tensor *v = vx_find(c, "target.decoder_stack", "layers.1.attn.v_proj");
        CHECK(v && w && v->shape[0] == 32 && memcmp(v->data, w->data + 96 * 64 * 4, 32 * 64 * 4) == 0);
        const st_tensor *gu = st_find(m, "model.layers.0.mlp.gate_up_proj.weight");
        const vx_tensor *up = vx_find(c, "target.decoder_stack", "layers.0.ffn.up_proj");
        CHECK(up && gu && memcmp(up->data, gu->data + 128 * 64 * 4, 128 * 64 * 4) == 0);
        st_close(m);
        vx_close(c);
    }
    if (vx_open(out_path("deepseek-v3-lite"), &c, &err) == 0) {
        const vx_tensor *sb = vx_find(c, "target.decoder_stack", "layers.2.ffn.router.score_bias");
        CHECK(sb && sb->dtype == VX_F32 && sb->shape[0] == 8);
        CHECK(vx_find(c, "target.decoder_stack", "layers.0.ffn.router") == NULL);
        CHECK(vx_find(c, "target.decoder_stack", "layers.1.ffn.shared.down_proj") != NULL);
        vx_close(c);
    }
    ix = jload(out_path("llama-gqa-bf16"), "index.json");
    const cJSON *rep = cJSON_GetObjectItem(jp(ix, "representations"), "target.decoder_stack.bf16");
    CHECK(rep != NULL);
    CHECK_STR(js(rep, "fidelity"), "source-exact");
    cJSON_Delete(ix);
}

/* bf16 conversion of an f32 checkpoint: RNE of every value, recorded as approximate. */
static void variant(const char *fixture, const char *name, const char *sed);

static void conversion(void)
{
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.dtype = VX_BF16;
    if (encode_ok(FAM "llama-gqa", "gqa-bf16", &o) < 0)
        return;
    cJSON *ix = jload(out_path("gqa-bf16"), "index.json");
    const cJSON *rep = cJSON_GetObjectItem(jp(ix, "representations"), "target.embedding.bf16");
    CHECK(rep != NULL);
    CHECK_STR(js(rep, "fidelity"), "numerically-approximate");
    CHECK_STR(js(ix, "encoder.dtype_policy"), "bf16");
    cJSON_Delete(ix);
    vx_container *c;
    st_model *m;
    if (vx_open(out_path("gqa-bf16"), &c, &err) == 0 && st_open_dir(FAM "llama-gqa", &m, &err) == 0) {
        const vx_tensor *t = vx_find(c, "target.decoder_stack", "layers.2.ffn.up_proj");
        const st_tensor *s = st_find(m, "model.layers.2.mlp.up_proj.weight");
        CHECK(t && t->dtype == VX_BF16 && t->nbytes == s->nbytes / 2);
        int same = t && s;
        for (size_t i = 0; same && i < s->nbytes / 4; i++) {
            float f;
            uint16_t h;
            memcpy(&f, s->data + 4 * i, 4);
            memcpy(&h, (const unsigned char *)t->data + 2 * i, 2);
            same &= h == vx_f32_to_bf16(f);
        }
        CHECK_MSG(same, "bf16 values are not the RNE of the f32 source");
        st_close(m);
        vx_close(c);
    }
    /* bf16 -> f32 widening is exact. */
    vx_encode_opts_init(&o);
    o.dtype = VX_F32;
    if (encode_ok(FAM "llama-gqa-bf16", "bf16-f32", &o) == 0) {
        ix = jload(out_path("bf16-f32"), "index.json");
        rep = cJSON_GetObjectItem(jp(ix, "representations"), "target.output_head.f32");
        CHECK_STR(rep ? js(rep, "fidelity") : NULL, "source-equivalent");
        cJSON_Delete(ix);
    }
    /* a finite weight past f16's range is refused, never stored as infinity */
    variant("llama-gqa", "f16over", NULL);
    char over[256];
    snprintf(over, sizeof over, "%s/f16over", tmp);
    st_model *sm = NULL;
    CHECK(st_open_dir(over, &sm, &err) == 0);
    const st_tensor *up = sm ? st_find(sm, "model.layers.1.mlp.up_proj.weight") : NULL;
    uint64_t at = up ? up->file_offset + 4 * 7 : 0;
    st_close(sm);
    char file[300];
    snprintf(file, sizeof file, "%s/model.safetensors", over);
    int fd = open(file, O_WRONLY);
    float big = 1e5f;
    CHECK(up && fd >= 0 && pwrite(fd, &big, 4, (off_t)at) == 4);
    if (fd >= 0) close(fd);
    o.dtype = VX_F16;
    CHECK(vx_encode(over, out_path("f16over.vx"), &o, &err) == -1);
    CHECK_STR(err.msg, "encode: tensor 'model.layers.1.mlp.up_proj.weight' holds 100000, beyond f16's "
              "range (±65504): as f16 it would be infinity; encode it as bf16 or f32 (--dtype)");
    CHECK(leftovers("f16over.vx") == 0);
    o.dtype = VX_BF16;
    encode_ok(over, "f16over-bf16.vx", &o);

    o.dtype = VX_Q4_K;
    CHECK(vx_encode(FAM "llama-gqa", out_path("q4k"), &o, &err) == -1);
    CHECK_STR(err.msg, "encode: dtype 'q4_k' is not an encode target (f32, f16 or bf16; quantised "
              "representations are made from a container: encode, then REPRESENT \"object\" AS "
              "q4_k in lql, or vindex represent)");
}

static void synthetic(void)
{
    static const char *const fams[] = {"llama", "mistral", "qwen2", "gemma", "gemma2", "gpt2", "phi3",
                                       "mixtral", "qwen2_moe", "deepseek_v3"};
    static const char *const dts[] = {"f32", "f16", "bf16"};
    for (size_t f = 0; f < sizeof fams / sizeof *fams; f++) {
        for (int d = 0; d < 3; d++) {
            char name[64], src[256], out[80];
            snprintf(name, sizeof name, "fx-%s-%s", fams[f], dts[d]);
            snprintf(src, sizeof src, "%s/%s", tmp, name);
            snprintf(out, sizeof out, "%s.vx", name);
            int rc = sh("'%s/mkfixture' --family %s --dtype %s --layers 3 --hidden 96 --heads 4 "
                        "--kv-heads 2 --seed %zu --tokenizer '%s' -o '%s'", LQL_BINARY_DIR, fams[f], dts[d],
                        f * 3 + (size_t)d, FAM "llama-gqa/tokenizer.json", src);
            CHECK_MSG(rc == 0, "mkfixture %s failed", name);
            if (rc == 0)
                encode_ok(src, out, NULL);
        }
    }
    /* Gemma's embedding scale is sqrt(hidden) rounded to the model dtype. */
    const cJSON *x, *ls;
    cJSON *g = graph("fx-gemma2-bf16.vx", &x, &ls);
    CHECK(jnum(x, "embedding.scale") == vx_bf16_to_f32(vx_f32_to_bf16(sqrtf(96.0f))));
    CHECK(jnum(x, "embedding.scale") == 9.8125);
    cJSON_Delete(g);
    g = graph("fx-gemma2-f32.vx", &x, &ls);
    CHECK(jnum(x, "embedding.scale") == (double)sqrtf(96.0f));
    cJSON_Delete(g);
    /* Gemma (v1): (1+w) norms, GeGLU, tied, no soft-caps, no post norms, no window. */
    g = graph("fx-gemma-f16.vx", &x, &ls);
    CHECK(jnum(x, "norm.weight_offset") == 1 && jtrue(x, "lm_head.tied") && jnull(x, "attention.softcap"));
    CHECK(!jtrue(x, "post_norms.attn") && jnull(x, "lm_head.softcap") && jnull(ls, "0.window"));
    CHECK(jnum(x, "embedding.scale") == vx_f16_to_f32(vx_f32_to_f16(sqrtf(96.0f))));
    CHECK_STR(js(x, "ffn.activation"), "gelu_tanh");
    CHECK_NEAR(jnum(x, "attention.scale"), 1.0 / sqrt(24.0), 1e-15);
    cJSON_Delete(g);
    /* Llama with attention_bias: q/k/v and o biases. */
    char src[256];
    snprintf(src, sizeof src, "%s/fx-llama-bias", tmp);
    CHECK(sh("'%s/mkfixture' --family llama --attention-bias --layers 2 -o '%s'", LQL_BINARY_DIR, src) == 0);
    if (encode_ok(src, "fx-llama-bias.vx", NULL) == 0) {
        g = graph("fx-llama-bias.vx", &x, &ls);
        CHECK(jtrue(x, "attention.qkv_bias") && jtrue(x, "attention.out_bias"));
        cJSON_Delete(g);
        vx_container *cb;
        if (vx_open(out_path("fx-llama-bias.vx"), &cb, &err) == 0) {
            const vx_tensor *ob = vx_find(cb, "target.decoder_stack", "layers.1.attn.o_proj.bias");
            CHECK(ob && ob->ndim == 1 && ob->shape[0] == 64);
            CHECK(vx_find(cb, "target.decoder_stack", "layers.0.attn.k_proj.bias") != NULL);
            vx_close(cb);
        }
    }
    vx_container *c;
    if (vx_open(out_path("fx-qwen2_moe-f16.vx"), &c, &err) == 0) {
        const vx_tensor *t = vx_find(c, "target.decoder_stack", "layers.0.ffn.experts.3.gate_proj");
        CHECK(t && t->dtype == VX_F16);
        vx_close(c);
    }
}

static uint64_t seen_done;
static void progress(void *ctx, const char *stage, uint64_t done, uint64_t total)
{
    (void)ctx;
    CHECK_STR(stage, "encode");
    CHECK(done <= total);
    seen_done = done;
}

static void cancel_progress(void *ctx, const char *stage, uint64_t done, uint64_t total)
{
    (void)ctx;
    (void)stage;
    if (done > total / 3)
        vx_cancel_flag = 1;
}

/* Cut the checkpoint short once the encode is under way, as another program rewriting it
 * would: the rest of its mapping faults. */
static void truncate_progress(void *ctx, const char *stage, uint64_t done, uint64_t total)
{
    (void)stage;
    (void)total;
    if (done > 0 && *(const char *)ctx) {
        CHECK(truncate((const char *)ctx, 4096) == 0);
        *(char *)ctx = 0;
    }
}

static int finish_hook(void *ctx, const char *tmpdir, cJSON *index, vx_err *e)
{
    (void)e;
    (*(int *)ctx)++;
    char p[512];
    snprintf(p, sizeof p, "%s/index.json", tmpdir);
    CHECK(access(p, F_OK) == 0);
    cJSON_AddStringToObject(index, "hooked", "yes");
    return 0;
}

static void sharding_and_failures(void)
{
    char src[256];
    snprintf(src, sizeof src, "%s/sharded-src", tmp);
    CHECK(sh("'%s/mkfixture' --family llama --layers 4 --shards 3 -o '%s'", LQL_BINARY_DIR, src) == 0);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.progress = progress;
    int hooked = 0;
    o.finish = finish_hook;
    o.finish_ctx = &hooked;
    o.model_name = "shardy";
    if (encode_ok(src, "sharded.vx", &o) == 0) {
        cJSON *ix = jload(out_path("sharded.vx"), "index.json");
        CHECK_STR(js(ix, "hooked"), "yes");
        CHECK_STR(js(ix, "model"), "shardy");
        CHECK(hooked == 1 && seen_done > 0);
        cJSON_Delete(ix);
    }

    /* model.safetensors wins over an index beside it, as transformers loads it: here the
     * index is stale and names a shard that is gone */
    char both[256];
    snprintf(both, sizeof both, "%s/both-src", tmp);
    CHECK(sh("'%s/mkfixture' --family llama --layers 2 -o '%s' && printf '%%s' "
             "'{\"weight_map\": {\"model.norm.weight\": \"model-00001-of-00002.safetensors\"}}' "
             "> '%s/model.safetensors.index.json'", LQL_BINARY_DIR, both, both) == 0);
    encode_ok(both, "both.vx", NULL);

    /* A small shard cap splits the decoder stack; tensors never straddle files. */
    setenv("LQL_SHARD_CAP", "4300000", 1);
    if (encode_ok(LQL_FIXTURE_DIR "/models/tinyllama", "capped.vx", NULL) == 0) {
        cJSON *ix = jload(out_path("capped.vx"), "index.json");
        const cJSON *segs = cJSON_GetObjectItem(cJSON_GetObjectItem(jp(ix, "representations"),
                                                       "target.decoder_stack.f32"), "segments");
        CHECK(cJSON_GetArraySize(segs) > 2);
        CHECK_STR(cJSON_GetArrayItem(segs, 0)->valuestring, "segments/target.decoder_stack.bin");
        CHECK_STR(cJSON_GetArrayItem(segs, 1)->valuestring, "segments/target.decoder_stack.001.bin");
        const cJSON *s;
        cJSON_ArrayForEach(s, jp(ix, "segments")) CHECK(jnum(s, "bytes") <= 4300000);
        cJSON_Delete(ix);
    }
    /* A tensor larger than the cap refuses, and nothing is left behind. */
    setenv("LQL_SHARD_CAP", "100000", 1);
    CHECK(vx_encode(LQL_FIXTURE_DIR "/models/tinyllama", out_path("toosmall.vx"), NULL, &err) == -1);
    CHECK_STR(err.msg, "encode: tensor 'weight' of 'target.embedding' (4194304 bytes) does not fit the "
              "shard cap of 100000 bytes (raise LQL_SHARD_CAP)");
    CHECK(leftovers("toosmall.vx") == 0);
    unsetenv("LQL_SHARD_CAP");

    /* Cancel mid-stream: VX_ECANCEL, no directory. */
    vx_encode_opts_init(&o);
    o.progress = cancel_progress;
    CHECK(vx_encode(LQL_FIXTURE_DIR "/models/tinyllama", out_path("cancelled.vx"), &o, &err) == -1);
    CHECK(err.code == VX_ECANCEL);
    CHECK_STR(err.msg, "encode: cancelled");
    CHECK(leftovers("cancelled.vx") == 0);
    vx_cancel_flag = 0;

    /* A checkpoint file cut short mid-encode: SIGBUS on its mapping becomes an error, and
     * nothing is left behind. */
    char cut[256], shard[300];
    snprintf(cut, sizeof cut, "%s/cut-src", tmp);
    CHECK(sh("cp -r '%s/models/tinyllama' '%s'", LQL_FIXTURE_DIR, cut) == 0);
    snprintf(shard, sizeof shard, "%s/model.safetensors", cut);
    vx_encode_opts_init(&o);
    o.progress = truncate_progress;
    o.progress_ctx = shard;
    CHECK(vx_encode(cut, out_path("cut.vx"), &o, &err) == -1);
    CHECK(err.code == VX_EIO);
    CHECK_HAS(err.msg, "shrank or vanished while it was being read (SIGBUS on its mapping)");
    CHECK(shard[0] == 0);                                   /* it did truncate */
    CHECK(leftovers("cut.vx") == 0);
}

/* Copy a fixture into tmp/name, then edit its config with a sed expression. */
static void variant(const char *fixture, const char *name, const char *sed)
{
    CHECK(sh("rm -rf '%s/%s' && cp -r '" FAM "%s' '%s/%s'", tmp, name, fixture, tmp, name) == 0);
    if (sed)
        CHECK(sh("sed -i '%s' '%s/%s/config.json'", sed, tmp, name) == 0);
}

static void refuse(const char *name, const char *want)
{
    char src[256], out[256];
    snprintf(src, sizeof src, "%s/%s", tmp, name);
    snprintf(out, sizeof out, "%s/%s.vx", tmp, name);
    CHECK(vx_encode(src, out, NULL, &err) == -1);
    CHECK_STR(err.msg, want);
    CHECK(leftovers(out + strlen(tmp) + 1) == 0);
    struct stat st;
    CHECK(stat(out, &st) != 0);
}

/* Overwrite dir/model.safetensors' lm_head.weight with its embedding's bytes; 0 when done. */
static int head_is_embedding(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%.512s/model.safetensors", dir);
    st_model *m;
    if (st_open_file(path, &m, &err))
        return -1;
    const st_tensor *e = st_find(m, "model.embed_tokens.weight"), *h = st_find(m, "lm_head.weight");
    int rc = -1, fd = open(path, O_WRONLY);
    if (e && h && e->nbytes == h->nbytes && fd >= 0 &&
        pwrite(fd, e->data, e->nbytes, (off_t)h->file_offset) == (ssize_t)e->nbytes)
        rc = 0;
    if (fd >= 0)
        close(fd);
    st_close(m);
    return rc;
}

static void refusals(void)
{
    variant("llama-gqa", "dynamic", "s/\"rope_scaling\": null/\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 4.0}/");
    refuse("dynamic", "config.json: key 'rope_scaling.type=dynamic' changes execution and is not admitted for "
           "family 'llama'");
    /* yarn whose factor disagrees with max_position_embeddings / original (512 / 64) */
    variant("llama-gqa", "yarn", "s/\"rope_scaling\": null/\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, "
            "\"original_max_position_embeddings\": 64}/");
    refuse("yarn", "config.json: rope_scaling.factor 4 differs from max_position_embeddings / "
           "original_max_position_embeddings = 8; transformers versions disagree on which applies "
           "(family 'llama')");
    /* group-limited routing that cannot fill top_k, or groups too small to rank: the
     * executor would refuse the graph, so encode refuses the config (found by fuzz_encode) */
    variant("deepseek-v3-lite", "fewgroups", "s/\"num_experts_per_tok\": 2/\"num_experts_per_tok\": 5/");
    refuse("fewgroups", "config.json: num_experts_per_tok 5 is more than the 4 experts of the "
           "topk_group 2 groups routing keeps");
    variant("deepseek-v3-lite", "onegroup", "s/\"n_group\": 4/\"n_group\": 8/");
    refuse("onegroup", "config.json: n_group 8 leaves groups of 1 expert (n_routed_experts 8); a "
           "group is ranked by its two best");
    variant("llama-gqa", "unknown", "s/\"vocab_size\": 512/\"vocab_size\": 512, \"foo_gate\": 3/");
    refuse("unknown", "config.json: key 'foo_gate' changes execution and is not admitted for family 'llama'");
    variant("llama-gqa", "relu", "s/\"hidden_act\": \"silu\"/\"hidden_act\": \"relu\"/");
    refuse("relu", "config.json: key 'hidden_act=relu' changes execution and is not admitted for family 'llama'");
    variant("llama-gqa", "mlpbias", "s/\"mlp_bias\": false/\"mlp_bias\": true/");
    refuse("mlpbias", "config.json: key 'mlp_bias=true' changes execution and is not admitted for family 'llama'");
    variant("llama-gqa", "llama3b", "s/\"rope_scaling\": null/\"rope_scaling\": {\"rope_type\": \"llama3\", "
            "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
            "\"original_max_position_embeddings\": 64, \"beta\": 2}/");
    refuse("llama3b", "config.json: key 'rope_scaling.beta=2' changes execution and is not admitted for "
           "family 'llama'");
    variant("mistral-swa", "mistral-llama-key", "s/\"sliding_window\": 8/\"sliding_window\": 8, \"max_window_layers\": 1/");
    refuse("mistral-llama-key", "config.json: key 'max_window_layers' changes execution and is not admitted "
           "for family 'mistral'");
    variant("gpt2", "gpt2-scale", "s/\"scale_attn_by_inverse_layer_idx\": false/\"scale_attn_by_inverse_layer_idx\": true/");
    refuse("gpt2-scale", "config.json: key 'scale_attn_by_inverse_layer_idx=true' changes execution and is "
           "not admitted for family 'gpt2'");
    variant("deepseek-v3-lite", "ds-softmax", "s/\"scoring_func\": \"sigmoid\"/\"scoring_func\": \"softmax\"/");
    refuse("ds-softmax", "config.json: key 'scoring_func=softmax' changes execution and is not admitted for "
           "family 'deepseek_v3'");
    variant("llama-gqa", "quant", "s/\"vocab_size\": 512/\"vocab_size\": 512, \"quantization_config\": {\"bits\": 4}/");
    refuse("quant", "config.json: key 'quantization_config' changes execution and is not admitted for "
           "family 'llama'");
    /* Keys real hub configs carry that change nothing. */
    variant("phi3", "phi3-hub", "s/\"vocab_size\": 512/\"vocab_size\": 512, \"auto_map\": {\"AutoConfig\": "
            "\"configuration_phi3.Phi3Config\"}, \"gradient_checkpointing\": false/");
    char hub[256];
    snprintf(hub, sizeof hub, "%s/phi3-hub", tmp);
    if (encode_ok(hub, "phi3-hub.vx", NULL) == 0) {
        cJSON *ix = jload(out_path("phi3-hub.vx"), "index.json");
        CHECK_STR(js(ix, "encoder.declaration_only.auto_map"),
                  "python classes for remote code; the family is taken from model_type");
        CHECK_STR(js(ix, "encoder.declaration_only.original_max_position_embeddings"),
                  "used only by longrope scaling, which is not set");
        cJSON_Delete(ix);
    }
    variant("llama-gqa", "bos600", "s/\"bos_token_id\": 510/\"bos_token_id\": 600/");
    refuse("bos600", "config.json: key 'bos_token_id' must be a token id below vocab_size 512 (or "
           "null) for family 'llama'");
    /* an id from generation_config.json is blamed on that file */
    variant("llama-gqa", "geneos", NULL);
    CHECK(sh("printf '%%s' '{\"eos_token_id\": [511, 9999]}' > '%s/geneos/generation_config.json'", tmp) == 0);
    refuse("geneos", "generation_config.json: key 'eos_token_id' must be a token id below vocab_size "
           "512 (or a list of them) for family 'llama'");
    variant("llama-gqa", "ctxhuge", "s/\"max_position_embeddings\": 512/\"max_position_embeddings\": "
            "4611686018427387904/");
    refuse("ctxhuge", "config.json: key 'max_position_embeddings' = 4.6116860184273879e+18 is too large "
           "for family 'llama' (no size this reader takes is above 10^15)");
    variant("gpt2", "ninner0", "s/\"n_inner\": null/\"n_inner\": 0/");
    refuse("ninner0", "config.json: key 'n_inner' must be a positive integer or null for family 'gpt2'");
    variant("gemma2", "eps0", "s/\"rms_norm_eps\": 1e-06/\"rms_norm_eps\": 0/");
    refuse("eps0", "config.json: key 'rms_norm_eps' must be a positive number for family 'gemma2'");
    variant("llama-gqa", "bert", "s/\"model_type\": \"llama\"/\"model_type\": \"bert\"/");
    refuse("bert", "config.json: model_type 'bert' is not admitted; lql admits llama, mistral, qwen2, gemma, "
           "gemma2, gpt2, phi3, mixtral, qwen2_moe, deepseek_v3, qwen3, qwen3_moe, olmo2, gemma3_text, "
           "gpt_oss, mamba2, granitemoehybrid, qwen3_next");
    variant("llama-gqa", "shape", "s/\"intermediate_size\": 176/\"intermediate_size\": 177/");
    char want[512];
    refuse("shape", "checkpoint: tensor 'model.layers.0.mlp.gate_proj.weight' has shape [176, 64], "
           "config.json implies [177, 64] (family 'llama')");
    variant("llama-gqa", "fewer", "s/\"num_hidden_layers\": 3/\"num_hidden_layers\": 2/");
    refuse("fewer", "checkpoint: tensor 'model.layers.2.input_layernorm.weight' is not bound to any operand "
           "of family 'llama' (lql refuses to drop weights silently)");
    variant("llama-gqa", "more", "s/\"num_hidden_layers\": 3/\"num_hidden_layers\": 4/");
    refuse("more", "checkpoint: tensor 'model.layers.3.input_layernorm.weight' is missing (family 'llama')");
    /* a tied model's own lm_head.weight is dropped only when it is the embedding's copy */
    variant("llama-gqa", "tiedhead", "s/\"tie_word_embeddings\": false/\"tie_word_embeddings\": true/");
    refuse("tiedhead", "checkpoint: tie_word_embeddings is true but tensor 'lm_head.weight' differs "
           "from 'model.embed_tokens.weight' (family 'llama'): the tied head would drop it; set "
           "tie_word_embeddings to false if it is the output projection");
    snprintf(want, sizeof want, "%s/tiedhead", tmp);
    CHECK(head_is_embedding(want) == 0);
    if (encode_ok(want, "tiedhead.vx", NULL) == 0) {
        const cJSON *x, *layers;
        cJSON *g = graph("tiedhead.vx", &x, &layers);
        CHECK(jtrue(x, "lm_head.tied"));
        cJSON_Delete(g);
    }
    variant("llama-gqa", "untied", NULL);
    CHECK(sh("rm '%s/untied/model.safetensors'", tmp) == 0);
    snprintf(want, sizeof want, "'%s/untied' has neither model.safetensors nor model.safetensors.index.json",
             tmp);
    refuse("untied", want);
    variant("llama3-rope", "tied-missing", "s/\"tie_word_embeddings\": true/\"tie_word_embeddings\": false/");
    refuse("tied-missing", "checkpoint: tensor 'lm_head.weight' is missing and tie_word_embeddings is false "
           "(family 'llama')");
    /* The newer spellings are admitted: rope_parameters and dtype. */
    variant("llama3-rope", "v5", "s/\"rope_scaling\"/\"rope_parameters\"/; s/\"torch_dtype\"/\"dtype\"/; "
            "s/\"rope_type\": \"llama3\"/\"rope_type\": \"llama3\", \"rope_theta\": 500000.0/; /\"rope_theta\": 500000.0,$/d");
    char src[256];
    snprintf(src, sizeof src, "%s/v5", tmp);
    if (encode_ok(src, "v5.vx", NULL) == 0) {
        const cJSON *x, *ls;
        cJSON *g = graph("v5.vx", &x, &ls);
        CHECK(jnum(x, "attention.rope.theta") == 500000 && jnum(x, "attention.rope.scaling.factor") == 8);
        cJSON_Delete(g);
    }
}

/* Rewrite the gpt2 fixture in the old hub layout: no "transformer." prefix, plus the
 * attn.bias / attn.masked_bias mask buffers, which the encoder must ignore. */
static void legacy_gpt2(const char *dst)
{
    st_model *m;
    if (st_open_dir(FAM "gpt2", &m, &err) < 0)
        return;
    cJSON *h = cJSON_CreateObject();
    uint64_t off = 0;
    for (size_t i = 0; i < st_count(m) + 4; i++) {
        char name[160];
        cJSON *e;
        if (i < st_count(m)) {
            const st_tensor *t = st_at(m, i);
            snprintf(name, sizeof name, "%s", t->name + strlen("transformer."));
            e = cJSON_AddObjectToObject(h, name);
            cJSON_AddStringToObject(e, "dtype", "F32");
            cJSON *shp = cJSON_AddArrayToObject(e, "shape");
            for (int d = 0; d < t->ndim; d++)
                cJSON_AddItemToArray(shp, cJSON_CreateNumber((double)t->shape[d]));
            cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
            cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
            cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + t->nbytes)));
            off += t->nbytes;
            continue;
        }
        int layer = (int)(i - st_count(m)) / 2, masked = (int)(i - st_count(m)) % 2;
        snprintf(name, sizeof name, "h.%d.attn.%s", layer, masked ? "masked_bias" : "bias");
        e = cJSON_AddObjectToObject(h, name);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *shp = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < 4 && !masked; d++)
            cJSON_AddItemToArray(shp, cJSON_CreateNumber(d < 2 ? 1 : 4));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        off += masked ? 4 : 64;
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
    }
    char *z = cJSON_PrintUnformatted(h), path[512];
    cJSON_Delete(h);
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    FILE *f = fopen(path, "wb");
    uint64_t n = strlen(z);
    fwrite(&n, 8, 1, f);
    fwrite(z, 1, n, f);
    free(z);
    for (size_t i = 0; i < st_count(m); i++)
        fwrite(st_at(m, i)->data, 1, st_at(m, i)->nbytes, f);
    static const float zeros[16];
    for (int i = 0; i < 2; i++) {
        fwrite(zeros, 4, 16, f);
        fwrite(zeros, 4, 1, f);
    }
    fclose(f);
    st_close(m);
}

/* Config spellings seen in real checkpoints that the shared fixtures do not cover. */
static void variants(void)
{
    const cJSON *x, *ls;
    char src[256];
    cJSON *g;
    variant("qwen2", "qwen-swa", "s/\"use_sliding_window\": false/\"use_sliding_window\": true/; "
            "s/\"max_window_layers\": 3/\"max_window_layers\": 1/; s/\"sliding_window\": 512/\"sliding_window\": 4/");
    snprintf(src, sizeof src, "%s/qwen-swa", tmp);
    if (encode_ok(src, "qwen-swa.vx", NULL) == 0) {
        g = graph("qwen-swa.vx", &x, &ls);
        CHECK(jnull(ls, "0.window") && jnum(ls, "1.window") == 4 && jnum(ls, "2.window") == 4);
        cJSON_Delete(g);
    }
    variant("gemma2", "gemma-types", "s/\"sliding_window\": 8,/\"sliding_window\": 8, \"layer_types\": "
            "[\"full_attention\", \"sliding_attention\", \"full_attention\"],/");
    snprintf(src, sizeof src, "%s/gemma-types", tmp);
    if (encode_ok(src, "gemma-types.vx", NULL) == 0) {
        g = graph("gemma-types.vx", &x, &ls);
        CHECK(jnull(ls, "0.window") && jnum(ls, "1.window") == 8 && jnull(ls, "2.window"));
        cJSON_Delete(g);
    }
    variant("llama-gqa", "partial", "s/\"vocab_size\": 512/\"vocab_size\": 512, \"partial_rotary_factor\": 0.5/");
    snprintf(src, sizeof src, "%s/partial", tmp);
    if (encode_ok(src, "partial.vx", NULL) == 0) {
        g = graph("partial.vx", &x, &ls);
        CHECK(jnum(x, "attention.rope.rotary_dim") == 8 && jnum(x, "attention.head_dim") == 16);
        cJSON_Delete(g);
    }
    /* Mamba2 files write time_step_limit [0.0, Infinity] (Python's json): read as
     * unbounded, dt_max null in the graph */
    variant("mamba2", "mamba-inf", "s/^    1\\.0$/    Infinity/; s/^    0\\.05,$/    0.0,/");
    snprintf(src, sizeof src, "%s/mamba-inf", tmp);
    if (encode_ok(src, "mamba-inf.vx", NULL) == 0) {
        g = graph("mamba-inf.vx", &x, &ls);
        CHECK(jnum(x, "mamba2.dt_min") == 0 && jnull(x, "mamba2.dt_max"));
        cJSON_Delete(g);
    }
    variant("mamba2", "mamba-nan", "s/^    1\\.0$/    NaN/");
    refuse("mamba-nan", "config.json: malformed json at line 31:5");
    /* A Hugging Face cache snapshot: every file a symlink into blobs/. */
    CHECK(sh("mkdir -p '%s/hub/blobs' '%s/hub/snap' && cd '" FAM "qwen2' && for f in *; do "
             "cp \"$f\" '%s/hub/blobs/'\"$f\".blob && ln -s ../blobs/\"$f\".blob '%s/hub/snap/'\"$f\"; done",
             tmp, tmp, tmp, tmp) == 0);
    snprintf(src, sizeof src, "%s/hub/snap", tmp);
    encode_ok(src, "hub.vx", NULL);
    /* Absent keys take the config class's default: Mistral's window is 4096, Mixtral's
     * theta 1e6 and eps 1e-5; an explicit null window means none. */
    variant("mistral-swa", "mistral-nowin", "/\"sliding_window\": 8,/d");
    snprintf(src, sizeof src, "%s/mistral-nowin", tmp);
    if (encode_ok(src, "mistral-nowin.vx", NULL) == 0) {
        g = graph("mistral-nowin.vx", &x, &ls);
        CHECK(jnum(ls, "0.window") == 4096 && jnum(ls, "1.window") == 4096);
        cJSON_Delete(g);
    }
    variant("mistral-swa", "mistral-null", "s/\"sliding_window\": 8,/\"sliding_window\": null,/");
    snprintf(src, sizeof src, "%s/mistral-null", tmp);
    if (encode_ok(src, "mistral-null.vx", NULL) == 0) {
        g = graph("mistral-null.vx", &x, &ls);
        CHECK(jnull(ls, "0.window") && jnull(ls, "1.window"));
        cJSON_Delete(g);
    }
    variant("mixtral", "mixtral-defaults", "/\"rope_theta\"/d; /\"rms_norm_eps\"/d");
    snprintf(src, sizeof src, "%s/mixtral-defaults", tmp);
    if (encode_ok(src, "mixtral-defaults.vx", NULL) == 0) {
        g = graph("mixtral-defaults.vx", &x, &ls);
        CHECK(jnum(x, "attention.rope.theta") == 1e6);
        CHECK_NEAR(jnum(x, "norm.eps"), 1e-5, 1e-15);
        cJSON_Delete(g);
    }
    variant("gpt2", "gpt2-legacy", "s/\"n_positions\": 128,/\"n_positions\": 128, \"n_ctx\": 128,/");
    snprintf(src, sizeof src, "%s/gpt2-legacy", tmp);
    legacy_gpt2(src);
    if (encode_ok(src, "gpt2-legacy.vx", NULL) == 0) {
        cJSON *ix = jload(out_path("gpt2-legacy.vx"), "index.json");
        CHECK_STR(js(ix, "encoder.declaration_only.n_ctx"), "legacy alias of n_positions (equal here)");
        cJSON *ref = jload(out_path("gpt2"), "index.json");
        const cJSON *ra = jp(ix, "representations"), *rb = jp(ref, "representations");
        /* Same stored bytes as the prefixed layout. */
        CHECK_STR(js(cJSON_GetObjectItem(ra, "target.decoder_stack.f32"), "payload_sha256"),
                  js(cJSON_GetObjectItem(rb, "target.decoder_stack.f32"), "payload_sha256"));
        cJSON_Delete(ref);
        cJSON_Delete(ix);
        g = graph("gpt2-legacy.vx", &x, &ls);
        const cJSON *bd = cJSON_GetObjectItem(jp(g, "objects.0.source_bindings"), "weight");
        CHECK_STR(cJSON_IsString(bd) ? bd->valuestring : NULL, "wte.weight");
        cJSON_Delete(g);
    }
    variant("gpt2", "gpt2-nctx", "s/\"n_positions\": 128,/\"n_positions\": 128, \"n_ctx\": 64,/");
    refuse("gpt2-nctx", "config.json: key 'n_ctx=64' changes execution and is not admitted for family 'gpt2'");
}

/* Every top-level config key of several fixtures replaced by hostile values: the encode
 * either succeeds (and verifies) or fails with a message; it never crashes and never
 * leaves a directory behind. */
static void hostile_configs(void)
{
    static const char *const fixtures[] = {"llama-gqa", "gpt2", "gemma2", "deepseek-v3-lite"};
    static const char *const bad[] = {"-1", "0", "1e18", "\"x\"", "[]", "0.5"};
    int runs = 0, refused_n = 0;
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        char dir[256], src[256], out[256];
        snprintf(dir, sizeof dir, "%s/hostile-%zu", tmp, f);
        snprintf(src, sizeof src, FAM "%s", fixtures[f]);
        snprintf(out, sizeof out, "%s/hostile-out", tmp);
        CHECK(sh("mkdir -p '%s' && ln -sf '%s/model.safetensors' '%s/model.safetensors'", dir, src, dir) == 0);
        cJSON *cfg = jload(src, "config.json");
        /* Declaration-only keys (from the clean encode in families()) change nothing. */
        cJSON *ix = jload(out_path(fixtures[f]), "index.json");
        const cJSON *decl = jp(ix, "encoder.declaration_only");
        if (!cfg || !decl) {
            CHECK(cfg && decl);
            cJSON_Delete(cfg);
            cJSON_Delete(ix);
            continue;
        }
        int nkeys = cJSON_GetArraySize(cfg);
        for (int k = 0; k < nkeys; k++) {
            if (cJSON_GetObjectItem(decl, cJSON_GetArrayItem(cfg, k)->string))
                continue;
            for (size_t v = 0; v < sizeof bad / sizeof *bad; v++) {
                cJSON *c = cJSON_Duplicate(cfg, 1);
                cJSON *item = cJSON_GetArrayItem(c, k);
                cJSON_ReplaceItemInObjectCaseSensitive(c, item->string, cJSON_Parse(bad[v]));
                char path[300];
                snprintf(path, sizeof path, "%s/config.json", dir);
                t_save_json(path, c);
                cJSON_Delete(c);
                vx_err e = {0};
                int rc = vx_encode(dir, out, NULL, &e);
                runs++;
                if (rc < 0) {
                    refused_n++;
                    CHECK_MSG(e.msg[0] != '\0' && e.code != 0, "no message for %s=%s", item->string, bad[v]);
                } else {
                    vx_container *vc;
                    CHECK_MSG(vx_open(out, &vc, &e) == 0, "%s=%s encoded but does not open: %s",
                              cJSON_GetArrayItem(cfg, k)->string, bad[v], e.msg);
                    vx_close(vc);
                    sh("rm -rf '%s'", out);
                }
                CHECK(leftovers("hostile-out") == 0);
            }
        }
        cJSON_Delete(cfg);
        cJSON_Delete(ix);
    }
    CHECK(runs > 300 && refused_n > runs * 3 / 4);
    printf("hostile configs: %d encodes, %d refused\n", runs, refused_n);
}

/* The container stands alone: delete the checkpoint, reopen and verify. */
static void standalone(void)
{
    variant("llama-gqa", "ephemeral", NULL);
    CHECK(sh("printf '#version: 0.2\\na b\\n' > '%s/ephemeral/merges.txt'", tmp) == 0);
    char src[256];
    snprintf(src, sizeof src, "%s/ephemeral", tmp);
    if (encode_ok(src, "ephemeral.vx", NULL) < 0)
        return;
    CHECK(sh("rm -rf '%s'", src) == 0);
    char merges[512], *text = NULL;
    size_t n = 0;
    snprintf(merges, sizeof merges, "%s/merges.txt", out_path("ephemeral.vx"));
    CHECK(vx_read_small_file(merges, "merges.txt", &text, &n, &err) == 0);
    CHECK_STR(text, "#version: 0.2\na b\n");
    free(text);
    vx_container *c;
    CHECK(vx_open(out_path("ephemeral.vx"), &c, &err) == 0);
    if (c) {
        const vx_tensor *t = vx_find(c, "target.output_head", "lm_head");
        CHECK(t && t->shape[0] == 512 && t->shape[1] == 64);
        vx_close(c);
    }
    cJSON *rep = NULL;
    CHECK(vx_verify(out_path("ephemeral.vx"), NULL, &rep, &err) == 0);
    cJSON_Delete(rep);
}

/* The snapshots' sha256 in index.json: an edit after the encode is refused by readers
 * (vx_snapshot_check) and reported by verify; a file gone too. */
/* A checkpoint directory whose name is not UTF-8: index.json stays JSON (U+FFFD for each
 * stray byte in the model name and source path). */
static void non_utf8_name(void)
{
    char src[256], out[300];
    snprintf(src, sizeof src, "%s/m\xff\xfe", tmp);
    snprintf(out, sizeof out, "%s/nonutf8.vx", tmp);
    CHECK(sh("cp -r '" FAM "llama-gqa' '%s'", src) == 0);
    CHECK(vx_encode(src, out, NULL, &err) == 0);
    cJSON *ix = jload(out, "index.json");
    CHECK_STR(js(ix, "model"), "m\xEF\xBF\xBD\xEF\xBF\xBD");
    cJSON_Delete(ix);
}

static void snapshots(void)
{
    if (encode_ok(FAM "llama-gqa", "snap.vx", NULL) != 0)
        return;
    cJSON *ix = jload(out_path("snap.vx"), "index.json");
    const cJSON *snaps = cJSON_GetObjectItem(ix, "snapshots");
    const char *h = cJSON_GetStringValue(cJSON_GetObjectItem(snaps, "tokenizer.json"));
    CHECK(h && strlen(h) == 64 && cJSON_GetStringValue(cJSON_GetObjectItem(snaps, "config.json")));
    cJSON_Delete(ix);
    vx_container *c = NULL;
    CHECK(vx_open(out_path("snap.vx"), &c, &err) == 0 && vx_snapshot_check(c, NULL, &err) == 0);
    vx_close(c);
    CHECK(sh("sed -i 's/\"ignore_merges\": true/\"ignore_merges\": false/' '%s/tokenizer.json'",
             out_path("snap.vx")) == 0);
    CHECK(vx_open(out_path("snap.vx"), &c, &err) == 0);
    CHECK(c && vx_snapshot_check(c, NULL, &err) == -1 && err.code == VX_EVERIFY);
    CHECK_HAS(err.msg, "snapshot 'tokenizer.json' does not match the sha256 index.json records for it");
    vx_close(c);
    cJSON *rep = NULL;
    CHECK(vx_verify(out_path("snap.vx"), NULL, &rep, &err) == -1);
    CHECK_HAS(err.msg, "snapshot 'tokenizer.json' does not match");
    cJSON_Delete(rep);
    CHECK(sh("rm '%s/config.json'", out_path("snap.vx")) == 0);
    CHECK(vx_open(out_path("snap.vx"), &c, &err) == 0);
    CHECK(c && vx_snapshot_check(c, "config.json", &err) == -1 && err.code == VX_EMISSING);
    vx_close(c);
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/lql-enc-XXXXXX");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    segment_writer();
    tinyllama();
    huge_folios();
    families();
    conversion();
    synthetic();
    sharding_and_failures();
    refusals();
    variants();
    hostile_configs();
    standalone();
    snapshots();
    non_utf8_name();
    if (t_fail == 0)
        sh("rm -rf '%s'", tmp);
    else
        fprintf(stderr, "outputs kept in %s\n", tmp);
    return T_DONE();
}
