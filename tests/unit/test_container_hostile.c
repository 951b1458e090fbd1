/*
 * test_container_hostile.c — every way a container can lie, each refused by vx_open with
 * its own message (pinned here): versions, malformed JSON, missing graph, bank shape,
 * truncated segments, header lengths, offsets, overlaps, dtype/shape/length, escaping
 * paths and symlinks, missing operands.
 */
#include "t.h"
#include "test_container_fx.h"

#include <fcntl.h>

#define DEC "segments/target.decoder_stack.bin"

/* Each case starts from a fresh good fixture. */
static fx f;

static void fresh(void)
{
    fx_init(&f);
}

static void done(void)
{
    fx_free(&f);
}

static void put_text(const char *rel, const char *text)
{
    char path[PATH_MAX];
    fx_path(&f, rel, path, sizeof path);
    fx_put(path, text, strlen(text));
}

static void test_versions(void)
{
    static const struct { const char *v, *msg; } cases[] = {
        {"7", "index.json version 7 is not supported; this lql reads VINDEX3 (versions 3-4)"},
        {"2", "index.json version 2 is VINDEX2; this lql reads VINDEX3 (versions 3-4)"},
        {"1", "index.json version 1 is VINDEX2; this lql reads VINDEX3 (versions 3-4)"},
        {"0", "index.json version 0 is not supported; this lql reads VINDEX3 (versions 3-4)"},
        {"\"4\"", "index.json version \"4\" is not an integer; this lql reads VINDEX3 (versions 3-4)"},
        {"4.5", "index.json version 4.5 is not an integer; this lql reads VINDEX3 (versions 3-4)"},
        {"-3", "index.json version -3 is not an integer; this lql reads VINDEX3 (versions 3-4)"},
        {"null", "index.json version null is not an integer; this lql reads VINDEX3 (versions 3-4)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fresh();
        char text[128];
        /* Nothing else exists: the version is judged before any other file is read. */
        snprintf(text, sizeof text, "{\"system_graph\": \"system_graph.json\", \"version\": %s}",
                 cases[i].v);
        put_text("index.json", text);
        vx_err err = {0};
        vx_container *c = NULL;
        CHECK(vx_open(f.dir, &c, &err) == -1 && c == NULL);
        CHECK(err.code == VX_EVERSION);
        CHECK_STR(err.msg, cases[i].msg);
        done();
    }
    fresh();
    put_text("index.json", "{\"system_graph\": \"system_graph.json\"}");
    CHECK_STR(fx_open_err(&f), "index.json has no version; this lql reads VINDEX3 (versions 3-4)");
    done();
}

static void test_malformed(void)
{
    fresh();
    put_text("index.json", "{\n  \"version\": 4,\n  \"segments\": {,}\n}\n");
    CHECK_STR(fx_open_err(&f), "index.json: malformed json at line 3:17");
    put_text("index.json", "[4]");
    CHECK_STR(fx_open_err(&f), "index.json: top level is not a json object");
    put_text("index.json", "{\"version\": 4} x");
    CHECK_STR(fx_open_err(&f), "index.json: trailing bytes after the json value (at byte 15)");
    put_text("index.json", "");
    CHECK_STR(fx_open_err(&f), "index.json: malformed json at line 1:1");
    {
        static char deep[2100];
        memset(deep, '[', 1500);
        memcpy(deep + 1500, "]]", 3);
        char doc[2200];
        snprintf(doc, sizeof doc, "{\"a\": %s}", deep);
        put_text("index.json", doc);
        CHECK_STR(fx_open_err(&f), "index.json: nested deeper than 1000 levels at line 1:1006 "
                                   "(the JSON reader's limit)");
    }
    /* one key twice: cJSON reads the first, Python's json the last */
    put_text("index.json", "{\"version\": 4, \"version\": 3}");
    CHECK_STR(fx_open_err(&f), "index.json: key 'version' appears twice in the top-level "
                               "object; a reader cannot tell which value is meant");
    put_text("index.json", "{\"version\": 4, \"segments\": {\"a\": 1, \"b\": 2, \"a\": 3}}");
    CHECK_STR(fx_open_err(&f), "index.json: key 'a' appears twice in object 'segments'; a "
                               "reader cannot tell which value is meant");
    /* a name holding NUL would reach every reader as its shorter prefix */
    put_text("index.json", "{\"version\": 4,\n \"system_graph\": \"system_graph.json\\u0000x\"}");
    CHECK_STR(fx_open_err(&f), "index.json: a string holds U+0000 at line 2:36; names and values "
                               "cannot hold NUL");
    done();

    fresh();
    char want[256];
    snprintf(want, sizeof want, "'%s' is not a container: it has no index.json", f.dir);
    CHECK_STR(fx_open_err(&f), want);
    /* what users point lql at instead: a checkpoint directory, a GGUF file */
    put_text("config.json", "{}");
    char want2[PATH_MAX + 256];
    snprintf(want2, sizeof want2, "%s (it holds config.json: a Hugging Face checkpoint? encode it "
             "with 'vindex encode DIR -o OUT' or EXTRACT MODEL \"DIR\" INTO \"OUT\")", want);
    CHECK_STR(fx_open_err(&f), want2);
    put_text("m.gguf", "GGUF");
    char gguf[PATH_MAX];
    fx_path(&f, "m.gguf", gguf, sizeof gguf);
    vx_err ge = {0};
    vx_container *gc = NULL;
    CHECK(vx_open(gguf, &gc, &ge) == -1 && ge.code == VX_EARG);
    snprintf(want2, sizeof want2, "'%s' is a file, not a container directory (a GGUF file: lql "
             "reads VINDEX3 containers; encode the Hugging Face checkpoint it came from with "
             "'vindex encode DIR -o OUT')", gguf);
    CHECK_STR(ge.msg, want2);
    done();

    vx_err err = {0};
    vx_container *c = NULL;
    CHECK(vx_open("/nonexistent/lql/dir", &c, &err) == -1);
    CHECK_STR(err.msg, "cannot resolve container directory '/nonexistent/lql/dir': No such file or directory");
}

static void test_graph(void)
{
    fresh();
    fx_write(&f);
    char path[PATH_MAX], want[256];
    fx_path(&f, "system_graph.json", path, sizeof path);
    unlink(path);
    snprintf(want, sizeof want, "system_graph.json is missing from '%s' (index.json names it)", f.dir);
    CHECK_STR(fx_open_err(&f), want);
    done();

    fresh();
    fx_set_num(f.graph, "schema", 5);
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "system_graph.json schema 5 is not supported; this lql reads schema 7");
    done();

    /* index.json's copy of the geometry must be the graph's */
    fresh();
    fx_set_num(f.index, "hidden_size", 16);
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "index.json: hidden_size 16 disagrees with the system graph's 8");
    done();
    fresh();
    cJSON_ReplaceItemInObject(f.index, "num_layers", cJSON_CreateString("2"));
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "index.json: num_layers (not a number) disagrees with the system "
                               "graph's 2");
    done();

    fresh();
    fx_write(&f);
    put_text("system_graph.json", "{\"schema\": 7, \"components\": [}");
    CHECK_STR(fx_open_err(&f), "system_graph.json: malformed json at line 1:30");
    done();

    fresh();
    cJSON_ReplaceItemInObject(f.index, "system_graph", cJSON_CreateString("../graph.json"));
    fx_write(&f);
    snprintf(want, sizeof want,
             "path '../graph.json' has a '..' component; container paths stay inside '%s'", f.dir);
    CHECK_STR(fx_open_err(&f), want);
    done();

    /* Bank shape: recognised, refused by name, never parsed. */
    fresh();
    cJSON_ReplaceItemInObject(f.index, "system_graph", cJSON_CreateNull());
    cJSON_ReplaceItemInObject(f.index, "moe_manifest", cJSON_CreateString("moe_manifest.json"));
    fx_write(&f);
    vx_err err = {0};
    vx_container *c = NULL;
    CHECK(vx_open(f.dir, &c, &err) == -1 && err.code == VX_EUNSUPPORTED);
    CHECK_STR(err.msg, "bank-shape containers (LYRW v2) are not readable yet "
                       "(index.json sets moe_manifest, no system_graph)");
    cJSON_ReplaceItemInObject(f.index, "moe_manifest", cJSON_CreateNull());
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "index.json names neither a system_graph nor a moe_manifest");
    done();

    fresh();
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(fx_object(&f, 2), "representations"), 0,
                             cJSON_CreateString("target.output_head.q4"));
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "object 'target.output_head' names representation "
                               "'target.output_head.q4', which index.json does not list");
    done();
}

/* Overwrite the u64 header length of the decoder segment. */
static void set_header_len(uint64_t v)
{
    char path[PATH_MAX];
    fx_path(&f, DEC, path, sizeof path);
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(v >> (8 * i));
    int fd = open(path, O_WRONLY);
    CHECK(pwrite(fd, le, 8, 0) == 8);
    close(fd);
}

static uint64_t dec_size(void)
{
    char path[PATH_MAX];
    struct stat st;
    fx_path(&f, DEC, path, sizeof path);
    stat(path, &st);
    return (uint64_t)st.st_size;
}

static void test_framing(void)
{
    char want[256];
    fresh();
    fx_write(&f);
    uint64_t size = dec_size();
    char path[PATH_MAX];
    fx_path(&f, DEC, path, sizeof path);
    CHECK(truncate(path, (off_t)size - 100) == 0);
    snprintf(want, sizeof want, "segment '" DEC "' is truncated: %llu bytes on disk, index.json records %llu",
             (unsigned long long)size - 100, (unsigned long long)size);
    CHECK_STR(fx_open_err(&f), want);
    CHECK(truncate(path, 5) == 0);
    cJSON *rec = cJSON_GetObjectItem(cJSON_GetObjectItem(f.index, "segments"), DEC);
    fx_set_num(rec, "bytes", 5);
    fx_path(&f, "index.json", path, sizeof path);
    fx_put_json(path, f.index);
    CHECK_STR(fx_open_err(&f), "segment '" DEC "' is truncated: 5 bytes, too short for the 8-byte header length");
    done();

    fresh();
    fx_write(&f);
    size = dec_size();
    set_header_len(1000000);
    snprintf(want, sizeof want, "segment '" DEC "': header length 1000000 extends past end of file (%llu bytes)",
             (unsigned long long)size);
    CHECK_STR(fx_open_err(&f), want);
    set_header_len(UINT64_MAX);
    snprintf(want, sizeof want, "segment '" DEC "': header length 18446744073709551615 extends past end of file (%llu bytes)",
             (unsigned long long)size);
    CHECK_STR(fx_open_err(&f), want);
    set_header_len(100);
    CHECK_STR(fx_open_err(&f), "segment '" DEC "': header length 100 does not start the payload on a 64-byte boundary");
    done();

    /* A header length inside the file but beyond any sane table. */
    fresh();
    fx_write(&f);
    fx_path(&f, DEC, path, sizeof path);
    CHECK(truncate(path, (off_t)(200ull << 20)) == 0);
    cJSON *big = cJSON_GetObjectItem(cJSON_GetObjectItem(f.index, "segments"), DEC);
    fx_set_num(big, "bytes", (double)(200ull << 20));
    fx_path(&f, "index.json", path, sizeof path);
    fx_put_json(path, f.index);
    set_header_len((150ull << 20) - 8);
    CHECK_STR(fx_open_err(&f), "segment '" DEC "': header length 157286392 exceeds the 104857600-byte limit");
    done();

    /* A segment longer than its record. */
    fresh();
    fx_write(&f);
    size = dec_size();
    fx_path(&f, DEC, path, sizeof path);
    CHECK(truncate(path, (off_t)size + 64) == 0);
    snprintf(want, sizeof want, "segment '" DEC "' is longer than recorded: %llu bytes on disk, index.json records %llu",
             (unsigned long long)size + 64, (unsigned long long)size);
    CHECK_STR(fx_open_err(&f), want);
    done();

    fresh();
    fx_write(&f);
    set_header_len(56);
    CHECK_STR(fx_open_err(&f), "segment '" DEC "' header: malformed json at line 1:48");
    done();

    fresh();
    cJSON_ReplaceItemInObject(f.hdr[1], "schema", cJSON_CreateString("lyrw"));
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "segment '" DEC "': header schema 'lyrw' is not 'tensor-table'");
    cJSON_DeleteItemFromObject(f.hdr[1], "schema");
    cJSON_AddStringToObject(f.hdr[1], "schema", "tensor-table");
    cJSON_ReplaceItemInObject(f.hdr[1], "object", cJSON_CreateString("target.embedding"));
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "segment '" DEC "' holds object 'target.embedding', but its representation belongs to 'target.decoder_stack'");
    done();
}

static void test_tensors(void)
{
    static const struct { const char *field, *json, *msg; } cases[] = {
        {"dtype", "\"f8\"", "segment '" DEC "': tensor 'layers.0.attn.q_proj' has unknown dtype 'f8'"},
        {"shape", "[]", "segment '" DEC "': tensor 'layers.0.attn.q_proj' has 0 dims (1-4 allowed)"},
        {"shape", "[1, 1, 1, 1, 64]", "segment '" DEC "': tensor 'layers.0.attn.q_proj' has more than 4 dims (1-4 allowed)"},
        {"shape", "[8, 0]", "segment '" DEC "': tensor 'layers.0.attn.q_proj' dim 1 is not a positive integer"},
        {"shape", "[-8, -8]", "segment '" DEC "': tensor 'layers.0.attn.q_proj' dim 0 is not a positive integer"},
        {"shape", "[8, 4]", "segment '" DEC "': tensor 'layers.0.attn.q_proj' length 256 does not match f32 x [8, 4] = 128 bytes"},
        {"shape", "[4294967296, 4294967296, 8]", "segment '" DEC "': tensor 'layers.0.attn.q_proj' shape overflows 64 bits"},
        {"shape", "[1099511627776, 1073741824]", "segment '" DEC "': tensor 'layers.0.attn.q_proj' shape [1099511627776, 1073741824] overflows 64 bits"},
        {"length", "257", "segment '" DEC "': tensor 'layers.0.attn.q_proj' length 257 does not match f32 x [8, 8] = 256 bytes"},
        {"length", "-256", "segment '" DEC "': tensor 'layers.0.attn.q_proj' length is not an integer in 0..2^53"},
        {"offset", "96", "segment '" DEC "': tensor 'layers.0.attn.q_proj' offset 96 is not 64-byte aligned"},
        {"offset", "18446744073709551552", "segment '" DEC "': tensor 'layers.0.attn.q_proj' offset is not an integer in 0..2^53"},
        {"offset", "9007199254740928", "segment '" DEC "': tensor 'layers.0.attn.q_proj' extends past end of file (offset 9007199254740928 + 256 > 3328)"},
        {"offset", "3264", "segment '" DEC "': tensor 'layers.0.attn.q_proj' extends past end of file (offset 3264 + 256 > 3328)"},
        {"offset", "0", "segment '" DEC "': tensors 'layers.0.attn_norm' and 'layers.0.attn.q_proj' overlap (offset 0 + 32 > 0)"},
        {"offset", "192", "segment '" DEC "': tensors 'layers.0.attn.q_proj' and 'layers.0.attn.k_proj' overlap (offset 192 + 256 > 320)"},
        {"name", "\"layers.0.attn.k_proj\"", "segment '" DEC "': tensor name 'layers.0.attn.k_proj' appears twice"},
        {"name", "\"\"", "segment '" DEC "': tensor #1 has no name"},
        {"dtype", "\"q8_0\"", "segment '" DEC "': tensor 'layers.0.attn.q_proj' innermost dim 8 is not a multiple of the q8_0 block (32)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fresh();
        cJSON *t = fx_tensor(&f, 1, "layers.0.attn.q_proj");
        cJSON_ReplaceItemInObject(t, cases[i].field, cJSON_Parse(cases[i].json));
        fx_write(&f);
        vx_err err = {0};
        vx_container *c = NULL;
        CHECK(vx_open(f.dir, &c, &err) == -1 && err.code == VX_EFORMAT && c == NULL);
        CHECK_STR(err.msg, cases[i].msg);
        done();
    }
    fresh();
    cJSON_DeleteItemFromObject(f.hdr[1], "tensors");
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "segment '" DEC "': header has no 'tensors' array");
    done();
}

#define ZERO_SHA "0000000000000000000000000000000000000000000000000000000000000000"

static void test_paths(void)
{
    char want[PATH_MAX + 128], path[PATH_MAX], outside[PATH_MAX];
    /* A representation naming a segment outside the container. */
    fresh();
    fx_write(&f);
    cJSON *rep = cJSON_GetObjectItem(cJSON_GetObjectItem(f.index, "representations"),
                                     "target.output_head.f32");
    cJSON_ReplaceItemInObject(rep, "segments", cJSON_Parse("[\"../evil.bin\"]"));
    cJSON_AddItemToObject(cJSON_GetObjectItem(f.index, "segments"), "../evil.bin",
                          cJSON_Parse("{\"bytes\": 64, \"sha256\": \"" ZERO_SHA "\"}"));
    fx_path(&f, "index.json", path, sizeof path);
    fx_put_json(path, f.index);
    snprintf(want, sizeof want,
             "path '../evil.bin' has a '..' component; container paths stay inside '%s'", f.dir);
    CHECK_STR(fx_open_err(&f), want);
    cJSON_ReplaceItemInObject(rep, "segments", cJSON_Parse("[\"/etc/passwd\"]"));
    cJSON_AddItemToObject(cJSON_GetObjectItem(f.index, "segments"), "/etc/passwd",
                          cJSON_Parse("{\"bytes\": 64}"));
    fx_put_json(path, f.index);
    snprintf(want, sizeof want,
             "path '/etc/passwd' is absolute; container paths are relative to '%s'", f.dir);
    CHECK_STR(fx_open_err(&f), want);
    done();

    /* A segment that is a symlink leaving the directory (to an identical copy). */
    char real[PATH_MAX];
    fresh();
    fx_write(&f);
    fx_path(&f, "segments/target.output_head.bin", path, sizeof path);
    snprintf(outside, sizeof outside, "%s/head.bin", f.src);
    CHECK(rename(path, outside) == 0);
    CHECK(symlink(outside, path) == 0);
    CHECK(realpath(outside, real) != NULL);
    snprintf(want, sizeof want,
             "path 'segments/target.output_head.bin' leaves the container through a symlink (to '%s')",
             real);
    vx_err err = {0};
    vx_container *c = NULL;
    CHECK(vx_open(f.dir, &c, &err) == -1 && err.code == VX_EPATH);
    CHECK_STR(err.msg, want);
    done();

    /* index.json itself a symlink to a file outside. */
    fresh();
    fx_write(&f);
    fx_path(&f, "index.json", path, sizeof path);
    snprintf(outside, sizeof outside, "%s/index.json", f.src);
    CHECK(rename(path, outside) == 0);
    CHECK(symlink(outside, path) == 0);
    CHECK(realpath(outside, real) != NULL);
    snprintf(want, sizeof want, "path 'index.json' leaves the container through a symlink (to '%s')", real);
    CHECK_STR(fx_open_err(&f), want);
    done();

    /* A representation claimed by another object, and one with no segments. */
    fresh();
    fx_write(&f);
    rep = cJSON_GetObjectItem(cJSON_GetObjectItem(f.index, "representations"), "target.output_head.f32");
    cJSON_ReplaceItemInObject(rep, "object", cJSON_CreateString("target.embedding"));
    fx_path(&f, "index.json", path, sizeof path);
    fx_put_json(path, f.index);
    CHECK_STR(fx_open_err(&f), "representation 'target.output_head.f32' belongs to object 'target.embedding', not 'target.output_head'");
    cJSON_ReplaceItemInObject(rep, "object", cJSON_CreateString("target.output_head"));
    cJSON_ReplaceItemInObject(rep, "segments", cJSON_CreateArray());
    fx_put_json(path, f.index);
    CHECK_STR(fx_open_err(&f), "representation 'target.output_head.f32' lists no segments");
    done();

    /* A segment file that is simply gone. */
    fresh();
    fx_write(&f);
    fx_path(&f, "segments/target.embedding.bin", path, sizeof path);
    unlink(path);
    CHECK_STR(fx_open_err(&f), "segment 'segments/target.embedding.bin' cannot be opened: No such file or directory");
    done();

    /* A segment without a record in index.json. */
    fresh();
    fx_write(&f);
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(f.index, "segments"), "segments/target.embedding.bin");
    fx_path(&f, "index.json", path, sizeof path);
    fx_put_json(path, f.index);
    CHECK_STR(fx_open_err(&f), "segment 'segments/target.embedding.bin' has no record in index.json segments");
    done();
}

static void test_closure(void)
{
    /* The table lost an operand the graph binds. */
    fresh();
    cJSON *tensors = cJSON_GetObjectItem(f.hdr[1], "tensors");
    cJSON_DeleteItemFromArray(tensors, cJSON_GetArraySize(tensors) - 1);
    fx_write(&f);
    vx_err err = {0};
    vx_container *c = NULL;
    CHECK(vx_open(f.dir, &c, &err) == -1 && err.code == VX_EMISSING);
    CHECK_STR(err.msg, "missing operand 'layers.1.ffn.down_proj' (object 'target.decoder_stack', layer 1): "
                       "not in segment 'segments/target.decoder_stack.bin'");
    done();

    fresh();
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(f.hdr[2], "tensors"), 1);
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "missing operand 'lm_head' (object 'target.output_head'): "
                               "not in segment 'segments/target.output_head.bin'");
    done();

    /* The same operand name twice in one object, across two segments. */
    fresh();
    fx_write(&f);
    cJSON *rep = cJSON_GetObjectItem(cJSON_GetObjectItem(f.index, "representations"),
                                     "target.output_head.f32");
    cJSON_AddItemToArray(cJSON_GetObjectItem(rep, "segments"), cJSON_CreateString("segments/copy.bin"));
    cJSON *rec = cJSON_Duplicate(cJSON_GetObjectItem(cJSON_GetObjectItem(f.index, "segments"),
                                                     "segments/target.output_head.bin"), 1);
    cJSON_AddItemToObject(cJSON_GetObjectItem(f.index, "segments"), "segments/copy.bin", rec);
    char path[PATH_MAX], copy[PATH_MAX];
    fx_path(&f, "index.json", path, sizeof path);
    fx_put_json(path, f.index);
    fx_path(&f, "segments/target.output_head.bin", path, sizeof path);
    fx_path(&f, "segments/copy.bin", copy, sizeof copy);
    CHECK(link(path, copy) == 0);
    CHECK_STR(fx_open_err(&f), "object 'target.output_head': tensor 'final_norm' appears in both "
                               "'segments/target.output_head.bin' and 'segments/copy.bin'");
    done();
}

/* The graph's list `key` with its item i listed again: refused with `want`. */
static void twice(const char *key, int i, const char *want)
{
    fresh();
    cJSON *list = cJSON_GetObjectItem(f.graph, key);
    cJSON_AddItemToArray(list, cJSON_Duplicate(cJSON_GetArrayItem(list, i), 1));
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), want);
    done();
}

/* The graph's list `key` (or, key starting with "index.", index.json's record map) with
 * item i's field `field` set to v (NULL: deleted): refused with `want`. */
static void edited(const char *key, int i, const char *field, cJSON *v, const char *want)
{
    const int idx = strncmp(key, "index.", 6) == 0;
    fresh();
    if (idx) fx_write(&f);   /* the records exist once written; kept as edited below */
    cJSON *it = cJSON_GetArrayItem(idx ? cJSON_GetObjectItem(f.index, key + 6)
                                       : cJSON_GetObjectItem(f.graph, key), i);
    cJSON_DeleteItemFromObject(it, field);
    if (v) cJSON_AddItemToObject(it, field, v);
    fx_write_opts(&f, idx);
    CHECK_STR(fx_open_err(&f), want);
    done();
}

/* A recorded hash present in a malformed form, a component without id or used twice,
 * and a snapshot file the record leaves out: refused, never read as "none recorded". */
static void test_records(void)
{
    fresh();
    cJSON *br = cJSON_AddObjectToObject(f.index, "browse");
    cJSON_AddItemToObject(br, "down_meta_sha256", cJSON_CreateArray());
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "index.json: browse.down_meta_sha256 is not a sha256 (64 "
              "lower-case hex digits)");
    done();

    fresh();
    cJSON_AddItemToObject(cJSON_AddObjectToObject(f.index, "snapshots"), "tokenizer.json",
                          cJSON_CreateNull());
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "index.json: snapshots['tokenizer.json'] is not a sha256 (64 "
              "lower-case hex digits)");
    done();

    fresh();
    cJSON_AddObjectToObject(f.index, "snapshots");
    fx_write(&f);
    put_text("tokenizer.json", "{}");
    vx_err err = {0};
    vx_container *c = NULL;
    CHECK(vx_open(f.dir, &c, &err) == 0);
    CHECK(c && vx_snapshot_check(c, NULL, &err) == -1 && err.code == VX_EVERIFY);
    CHECK_STR(err.msg, "snapshot 'tokenizer.json' is in the container but index.json's snapshots "
              "records no sha256 for it: it was added after the encode");
    vx_close(c);
    done();

    twice("components", 0, "system_graph.json: component id 'target' is used twice");

    /* a segment header of another tensor-table version, or naming another representation */
    fresh();
    fx_set_num(f.hdr[2], "version", 2);
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "segment 'segments/target.output_head.bin': tensor-table version 2 "
              "is not supported; this lql reads version 1");
    done();
    fresh();
    cJSON_ReplaceItemInObject(f.hdr[2], "representation", cJSON_CreateString("target.embedding.f32"));
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "segment 'segments/target.output_head.bin' holds representation "
              "'target.embedding.f32', but index.json lists it under 'target.output_head.f32'");
    done();

    /* two profiles of one name */
    fresh();
    for (int i = 0; i < 2; i++)
        cJSON_AddItemToArray(cJSON_GetObjectItem(f.index, "profiles"), cJSON_Parse(
            "{\"profile\": \"p\", \"select\": {\"target.embedding\": \"target.embedding.f32\"}}"));
    fx_write(&f);
    {
        vx_err pe = {0};
        vx_container *pc = NULL;
        CHECK(vx_open_profile(f.dir, "p", NULL, 0, &pc, &pe) == -1 && !pc);
        CHECK_STR(pe.msg, "index.json lists profile 'p' twice");
    }
    done();

    twice("objects", 2, "system_graph.json: object id 'target.output_head' is used twice");

    edited("components", 0, "role", NULL, "system_graph.json: components[0] has no role string");
    /* no decoder (a tower or drafter alone), and an object of an undeclared component: run
     * as the decoder, or with the primary's geometry, they answered for another model */
    edited("components", 0, "role", cJSON_CreateString("perception"), "system_graph.json: no "
           "component has role 'decoder' (the first, 'target', has role 'perception'); lql reads "
           "and runs decoder systems");
    edited("objects", 1, "component", cJSON_CreateString("drafter"), "system_graph.json: object "
           "'target.decoder_stack' names component 'drafter', which the graph does not declare");
    edited("objects", 0, "component", NULL, "system_graph.json: object 'target.embedding' names "
           "component (not a string), which the graph does not declare");

    /* index.json's records: a hash present but malformed, and a representation's stated
     * object, encoding or dtype that is not the one read (they were shown, or ignored) */
    edited("index.segments", 1, "sha256", cJSON_CreateNumber(0), "index.json: "
           "segments['segments/target.decoder_stack.bin'].sha256 is not a sha256 (64 lower-case "
           "hex digits)");
    edited("index.representations", 0, "payload_sha256", cJSON_CreateString("x"), "index.json: "
           "representations['target.embedding.f32'].payload_sha256 is not a sha256 (64 "
           "lower-case hex digits)");
    edited("index.representations", 2, "source_payload_sha256", cJSON_CreateTrue(), "index.json: "
           "representations['target.output_head.f32'].source_payload_sha256 is not a sha256 (64 "
           "lower-case hex digits)");
    edited("index.representations", 0, "object", cJSON_CreateArray(), "representation "
           "'target.embedding.f32' belongs to object '(not a string)', not 'target.embedding'");
    edited("index.representations", 1, "encoding", cJSON_CreateString("lyrw"), "representation "
           "'target.decoder_stack.f32': encoding 'lyrw' is not one this lql reads (tensor-table)");
    edited("index.representations", 1, "dtype", cJSON_CreateString("q9_9"), "representation "
           "'target.decoder_stack.f32': dtype 'q9_9' is not one this lql knows");
    edited("index.segments", 0, "schema", cJSON_CreateNumber(3), "segment "
           "'segments/target.embedding.bin': index.json records it as (not a string) version 1; "
           "a representation's segment is read as tensor-table version 1");
}

int main(void)
{
    test_records();
    test_versions();
    test_malformed();
    test_graph();
    test_framing();
    test_tensors();
    test_paths();
    test_closure();
    return T_DONE();
}
