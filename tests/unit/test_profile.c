/*
 * test_profile.c — representations and profiles on encoded fixtures (seed §9.1, §9.2):
 * vx_represent's records (ids, segments, kept tensors, measured fidelity, payload hash,
 * unknown index fields kept, the original untouched), vx_profile_add, binding by profile
 * and by override, derived authority, vx_tensor_diff, and every refusal pinned: absent
 * profile, a profile naming an absent representation or an unknown object (judged before
 * any segment is opened), a representation whose segment is missing, an existing id, an
 * unknown object, a dtype without an encoder, a duplicate profile name.
 */
#include "t.h"
#include "t_file.h"
#include "vindex.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[64];
static char q8_sha[65];          /* payload of the stack's q8_0, made with LQL_THREADS=1 */

static cJSON *read_json(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return t_load_json(p);
}

static void write_json(const char *dir, const char *name, const cJSON *j)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    t_save_json(p, j);
}

static void sha_of(const char *dir, const char *rel, char hex[65])
{
    char p[600];
    vx_err err = {0};
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    if (vx_sha256_file(p, hex, &err) < 0) hex[0] = '\0';
}

static int encode(const char *model, const char *name, char *dir, size_t n)
{
    char src[512];
    vx_err err = {0};
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    snprintf(src, sizeof src, "%s/models/%s", LQL_FIXTURE_DIR, model);
    snprintf(dir, n, "%s/%s", root, name);
    int rc = vx_encode(src, dir, &o, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return rc;
}

static void test_represent_records(const char *dir)
{
    vx_err err = {0};
    char before[65], after[65];
    sha_of(dir, "segments/target.decoder_stack.bin", before);
    /* an unknown index field survives the atomic rewrite */
    cJSON *ix = read_json(dir, "index.json");
    cJSON_AddNumberToObject(ix, "x_unknown_field", 7);
    write_json(dir, "index.json", ix);
    cJSON_Delete(ix);

    /* the graph cannot be written (its temporary name is taken, as a full disk would fail
     * it) after the segment and the new index were: nothing is replaced, nothing is left */
    char ixsha[65], ixsha2[65], block[600], segq8[600];
    sha_of(dir, "index.json", ixsha);
    snprintf(block, sizeof block, "%s/system_graph.json.tmp.%ld", dir, (long)getpid());
    snprintf(segq8, sizeof segq8, "%s/segments/target.decoder_stack.q8_0.bin", dir);
    CHECK(mkdir(block, 0755) == 0);
    CHECK(vx_represent(dir, "target.decoder_stack", VX_Q8_0, NULL, &err) < 0);
    CHECK_MSG(strstr(err.msg, "system_graph.json") != NULL, "%s", err.msg);
    CHECK(rmdir(block) == 0);
    sha_of(dir, "index.json", ixsha2);
    CHECK_STR(ixsha2, ixsha);
    CHECK(access(segq8, F_OK) != 0);
    cJSON *vr = NULL;
    CHECK_MSG(vx_verify(dir, NULL, &vr, &err) == 0, "%s", err.msg);
    cJSON_Delete(vr);

    vx_represent_info in;
    setenv("LQL_THREADS", "1", 1);
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_Q8_0, &in, &err) == 0, "%s", err.msg);
    unsetenv("LQL_THREADS");
    memcpy(q8_sha, in.payload_sha256, sizeof q8_sha);
    CHECK_STR(in.id, "target.decoder_stack.q8_0");
    CHECK_STR(in.from, "target.decoder_stack.f32");
    CHECK_STR(in.fidelity, "numerically-approximate");
    CHECK(in.tensors == 36 && in.kept == 8 && in.segments == 1);
    CHECK(in.weights == 3147776);
    CHECK(in.bytes == 3147776 - 8 * 256 + 8 * 256 * 4 - (3147776 - 8 * 256) + (3147776 - 8 * 256) / 32 * 34);
    sha_of(dir, "segments/target.decoder_stack.bin", after);
    CHECK_STR(after, before);                       /* the original is never touched */

    ix = read_json(dir, "index.json");
    const cJSON *rep = cJSON_GetObjectItem(cJSON_GetObjectItem(ix, "representations"), in.id);
    CHECK(cJSON_GetObjectItem(ix, "x_unknown_field") && cJSON_GetObjectItem(ix, "x_unknown_field")->valuedouble == 7);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(rep, "dtype")), "q8_0");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(rep, "payload_sha256")), in.payload_sha256);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "segments"), 0)),
              "segments/target.decoder_stack.q8_0.bin");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "kept_source_dtype"),
                                                       "layers.2.ffn_norm")), "f32");
    const cJSON *seg = cJSON_GetObjectItem(cJSON_GetObjectItem(ix, "segments"), "segments/target.decoder_stack.q8_0.bin");
    char hex[65];
    sha_of(dir, "segments/target.decoder_stack.q8_0.bin", hex);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(seg, "sha256")), hex);
    cJSON_Delete(ix);
    cJSON *g = read_json(dir, "system_graph.json");
    const cJSON *o = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "objects"), 1);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(o, "representations")) == 2);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "representations"), 1)), in.id);
    cJSON_Delete(g);

    /* verify re-hashes the new segment and payload too */
    cJSON *report = NULL;
    CHECK_MSG(vx_verify(dir, NULL, &report, &err) == 0, "%s", err.msg);
    cJSON_Delete(report);

    /* refusals, by name */
    CHECK(vx_represent(dir, "target.decoder_stack", VX_Q8_0, NULL, &err) < 0);
    CHECK_STR(err.msg, "represent: representation 'target.decoder_stack.q8_0' already exists");
    CHECK(vx_represent(dir, "target.vision", VX_Q8_0, NULL, &err) < 0);
    CHECK_STR(err.msg, "represent: no object 'target.vision' in system_graph.json (objects: target.embedding, target.decoder_stack, target.output_head)");
    CHECK(vx_represent(dir, "target.decoder_stack", VX_I32, NULL, &err) < 0);
    CHECK_STR(err.msg, "represent: dtype 'i32' has no encoder (targets: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, mxfp4)");
    CHECK(vx_represent(dir, "target.decoder_stack", VX_Q3_K, NULL, &err) < 0);
    CHECK_STR(err.msg, "represent: dtype 'q3_k' has no encoder (targets: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, mxfp4)");
}

static void test_profiles(const char *dir)
{
    vx_err err = {0};
    vx_represent_info in;
    CHECK_MSG(vx_represent(dir, "target.output_head", VX_Q4_K, &in, &err) == 0, "%s", err.msg);
    CHECK(in.kept == 1);
    vx_select sel[2] = {{"target.decoder_stack", "target.decoder_stack.q8_0"},
                        {"target.output_head", "target.output_head.q4_k"}};
    CHECK_MSG(vx_profile_add(dir, "mixed", sel, 2, 0, &err) == 0, "%s", err.msg);
    CHECK(vx_profile_add(dir, "mixed", sel, 1, 0, &err) < 0);
    CHECK_STR(err.msg, "profile 'mixed' already exists in index.json");
    vx_select bad = {"target.decoder_stack", "target.decoder_stack.q6_k"};
    CHECK(vx_profile_add(dir, "other", &bad, 1, 0, &err) < 0);
    CHECK_STR(err.msg, "profile 'other' selects representation 'target.decoder_stack.q6_k' for object 'target.decoder_stack', which is not present (present: target.decoder_stack.f32, target.decoder_stack.q8_0)");

    vx_container *c = NULL;
    CHECK_MSG(vx_open_profile(dir, "mixed", NULL, 0, &c, &err) == 0, "%s", err.msg);
    if (c) {
        CHECK_STR(vx_profile(c), "mixed");
        CHECK_STR(vx_bound_representation(c, "target.decoder_stack"), "target.decoder_stack.q8_0");
        CHECK_STR(vx_bound_representation(c, "target.embedding"), "target.embedding.f32");
        const vx_tensor *t = vx_find(c, "target.decoder_stack", "layers.0.attn.q_proj");
        CHECK(t && t->dtype == VX_Q8_0);
        t = vx_find(c, "target.output_head", "lm_head");
        CHECK(t && t->dtype == VX_Q4_K);
        t = vx_find(c, "target.output_head", "final_norm");
        CHECK(t && t->dtype == VX_F32);
        CHECK(vx_tensor_count(c) == 39);            /* one representation per object */
        const char *auth = NULL;
        CHECK(vx_profile_authority(vx_index_json(c), vx_graph_json(c), "mixed", &auth, &err) == 0);
        CHECK_STR(auth, "numerically-approximate");
        CHECK(vx_profile_authority(vx_index_json(c), vx_graph_json(c), NULL, &auth, &err) == 0);
        CHECK_STR(auth, "source-exact");
        vx_rep_totals tot;
        CHECK(vx_representation_totals(c, "target.output_head.q4_k", &tot) == 0);
        CHECK(tot.tensors == 2 && tot.bytes == 256 * 4 + 4096 * 256 / 256 * 144 && tot.weights == 256 + 4096 * 256);
        CHECK(vx_representation_totals(c, "target.output_head.q2_k", &tot) < 0);
    }
    vx_close(c);
    /* an override binds one object's representation without a profile */
    vx_select ov = {"target.output_head", "target.output_head.q4_k"};
    CHECK(vx_open_profile(dir, NULL, &ov, 1, &c, &err) == 0);
    if (c) {
        CHECK_STR(vx_bound_representation(c, "target.output_head"), "target.output_head.q4_k");
        CHECK_STR(vx_bound_representation(c, "target.decoder_stack"), "target.decoder_stack.f32");
    }
    vx_close(c);
    /* the baseline binding is the first listed representation */
    CHECK(vx_open(dir, &c, &err) == 0);
    if (c) {
        const vx_tensor *t = vx_find(c, "target.decoder_stack", "layers.0.attn.q_proj");
        CHECK(t && t->dtype == VX_F32);
        CHECK(vx_profile(c) == NULL);
    }
    vx_close(c);

    /* diff: the codec's error on one tensor; a tensor against itself is identical */
    vx_container *a = NULL, *b = NULL;
    CHECK(vx_open(dir, &a, &err) == 0 && vx_open_profile(dir, "mixed", NULL, 0, &b, &err) == 0);
    if (a && b) {
        const vx_tensor *ta = vx_find(a, "target.decoder_stack", "layers.1.ffn.down_proj");
        const vx_tensor *tb = vx_find(b, "target.decoder_stack", "layers.1.ffn.down_proj");
        vx_diff_stat d;
        CHECK(vx_tensor_diff(ta, tb, &d, &err) == 0);
        CHECK(d.n == 256 * 768 && d.differ > d.n / 2);
        printf("layers.1.ffn.down_proj f32 vs q8_0: max_abs %.3g rms %.3g rel %.4g\n", d.max_abs, d.rms, d.rel);
        CHECK(d.rel > 0.002 && d.rel < 0.01);
        CHECK(d.max_abs > 0 && d.max_abs < 0.01);
        CHECK(vx_tensor_diff(ta, ta, &d, &err) == 0 && d.differ == 0 && d.max_abs == 0 && d.rel == 0);
        const vx_tensor *norm = vx_find(a, "target.decoder_stack", "layers.1.ffn_norm");
        CHECK(vx_tensor_diff(ta, norm, &d, &err) < 0);
        CHECK_STR(err.msg, "diff: tensor 'layers.1.ffn.down_proj' has different shapes in the two representations");
    }
    vx_close(a);
    vx_close(b);
}

/* Hostile indexes: each edit is made to a copy of index.json and undone after. */
static void test_hostile(const char *dir)
{
    vx_err err = {0};
    vx_container *c = NULL;
    cJSON *orig = read_json(dir, "index.json");

    CHECK(vx_open_profile(dir, "nope", NULL, 0, &c, &err) < 0 && !c);
    CHECK_STR(err.msg, "no profile 'nope' in index.json (profiles: mixed)");
    CHECK(err.code == VX_EMISSING);

    /* a profile naming an absent representation: judged before any segment is opened, so
     * the message is the profile's even with a segment file gone */
    cJSON *ix = cJSON_Duplicate(orig, 1);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "profile", "q6");
    cJSON *sel = cJSON_AddObjectToObject(p, "select");
    cJSON_AddStringToObject(sel, "target.decoder_stack", "target.decoder_stack.q6_k");
    cJSON_AddItemToArray(cJSON_GetObjectItem(ix, "profiles"), p);
    p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "profile", "ghost");
    sel = cJSON_AddObjectToObject(p, "select");
    cJSON_AddStringToObject(sel, "target.vision_tower", "target.vision_tower.q8_0");
    cJSON_AddItemToArray(cJSON_GetObjectItem(ix, "profiles"), p);
    write_json(dir, "index.json", ix);
    cJSON_Delete(ix);
    char seg[600], moved[600];
    snprintf(seg, sizeof seg, "%s/segments/target.embedding.bin", dir);
    snprintf(moved, sizeof moved, "%s/moved.bin", root);
    CHECK(rename(seg, moved) == 0);
    CHECK(vx_open_profile(dir, "q6", NULL, 0, &c, &err) < 0);
    CHECK_STR(err.msg, "profile 'q6' selects representation 'target.decoder_stack.q6_k' for object 'target.decoder_stack', which is not present (present: target.decoder_stack.f32, target.decoder_stack.q8_0)");
    CHECK(vx_open_profile(dir, "ghost", NULL, 0, &c, &err) < 0);
    CHECK_STR(err.msg, "profile 'ghost' selects object 'target.vision_tower', which system_graph.json does not define (objects: target.embedding, target.decoder_stack, target.output_head)");
    vx_select ov = {"target.decoder_stack", "target.decoder_stack.bf16"};
    CHECK(vx_open_profile(dir, NULL, &ov, 1, &c, &err) < 0);
    CHECK_STR(err.msg, "selection selects representation 'target.decoder_stack.bf16' for object 'target.decoder_stack', which is not present (present: target.decoder_stack.f32, target.decoder_stack.q8_0)");
    const char *auth = NULL;
    cJSON *g = read_json(dir, "system_graph.json");
    ix = read_json(dir, "index.json");
    CHECK(vx_profile_authority(ix, g, "ghost", &auth, &err) < 0);
    CHECK_HAS(err.msg, "profile 'ghost' selects object 'target.vision_tower'");
    CHECK(rename(moved, seg) == 0);

    /* a representation whose segment is missing: named, with the path */
    snprintf(seg, sizeof seg, "%s/segments/target.decoder_stack.q8_0.bin", dir);
    CHECK(rename(seg, moved) == 0);
    CHECK(vx_open_profile(dir, "mixed", NULL, 0, &c, &err) < 0);
    CHECK_STR(err.msg, "segment 'segments/target.decoder_stack.q8_0.bin' cannot be opened: No such file or directory");
    CHECK(err.code == VX_EMISSING);
    CHECK(rename(moved, seg) == 0);

    /* an interrupted REPRESENT: index.json lists the representation, the graph does not */
    cJSON *gcut = cJSON_Duplicate(g, 1);
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(gcut, "objects"), 2),
                                                  "representations"), 1);
    write_json(dir, "system_graph.json", gcut);
    CHECK(vx_represent(dir, "target.output_head", VX_Q4_K, NULL, &err) < 0);
    CHECK_STR(err.msg, "represent: representation 'target.output_head.q4_k' is in index.json but not listed by system_graph.json (an interrupted REPRESENT: remove its index.json entries and segments)");
    write_json(dir, "system_graph.json", g);
    cJSON_Delete(gcut);

    /* profiles that are not an array; a profile without a select object */
    cJSON_ReplaceItemInObject(ix, "profiles", cJSON_CreateString("q8"));
    write_json(dir, "index.json", ix);
    CHECK(vx_open_profile(dir, "q8", NULL, 0, &c, &err) < 0);
    CHECK_STR(err.msg, "index.json 'profiles' is not an array");
    cJSON *arr = cJSON_CreateArray();
    p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "profile", "empty");
    cJSON_AddItemToArray(arr, p);
    cJSON_ReplaceItemInObject(ix, "profiles", arr);
    write_json(dir, "index.json", ix);
    CHECK(vx_open_profile(dir, "empty", NULL, 0, &c, &err) < 0);
    CHECK_STR(err.msg, "profile 'empty' has no 'select' object");
    /* the baseline still opens whatever the profiles say */
    CHECK(vx_open(dir, &c, &err) == 0);
    vx_close(c);
    c = NULL;
    cJSON_Delete(ix);
    cJSON_Delete(g);
    write_json(dir, "index.json", orig);
    cJSON_Delete(orig);
    CHECK(vx_open_profile(dir, "mixed", NULL, 0, &c, &err) == 0);
    vx_close(c);
}

/* bf16 source: f32 reproduces it exactly (source-equivalent, measured); f16 does not. */
static void test_fidelity_measured(const char *dir)
{
    vx_err err = {0};
    vx_represent_info in;
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_F32, &in, &err) == 0, "%s", err.msg);
    CHECK_STR(in.fidelity, "source-equivalent");
    CHECK(in.kept == 0);
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_F16, &in, &err) == 0, "%s", err.msg);
    CHECK_STR(in.fidelity, "numerically-approximate");
    vx_select sel = {"target.decoder_stack", "target.decoder_stack.f32"};
    CHECK(vx_profile_add(dir, "wide", &sel, 1, 0, &err) == 0);
    cJSON *ix = read_json(dir, "index.json"), *g = read_json(dir, "system_graph.json");
    const char *auth = NULL;
    CHECK(vx_profile_authority(ix, g, "wide", &auth, &err) == 0);
    CHECK_STR(auth, "source-equivalent");
    cJSON_Delete(ix);
    cJSON_Delete(g);
    vx_container *a = NULL, *b = NULL;
    CHECK(vx_open(dir, &a, &err) == 0 && vx_open_profile(dir, "wide", NULL, 0, &b, &err) == 0);
    for (size_t i = 0; a && b && i < vx_tensor_count(a); i++) {
        const vx_tensor *ta = vx_tensor_at(a, i);
        vx_diff_stat d;
        const vx_tensor *tb = vx_find(b, ta->object, ta->name);
        if (strcmp(ta->object, "target.decoder_stack") != 0) continue;
        CHECK(tb && tb->dtype == VX_F32 && vx_tensor_diff(ta, tb, &d, &err) == 0 && d.differ == 0);
    }
    vx_close(a);
    vx_close(b);
    CHECK_STR(vx_fidelity_rank("analysis-only") == 4 ? "ok" : "bad", "ok");
    CHECK(vx_fidelity_rank("made-up") == 6 && vx_fidelity_rank("source-exact") == 0);
    CHECK(vx_fidelity_rank("derived") == 5);
}

/* `vindex ARGS 2>&1` through popen: the output into buf, the exit code returned. */
static int vindex(const char *args, char *buf, size_t n)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s/vindex' %s 2>&1", LQL_BINARY_DIR, args);
    FILE *p = popen(cmd, "r");
    size_t got = p ? fread(buf, 1, n - 1, p) : 0;
    buf[got] = '\0';
    int st = p ? pclose(p) : -1;
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The CLI over the same container: represent's refusals and exit codes, profile listing
 * with derived authority, diff's figures. */
static void test_cli(const char *dir)
{
    static char out[1 << 16];
    char args[800];
    /* {arguments after the path, exit code, text the output must contain} */
    static const struct { const char *args; int rc; const char *want; } cases[] = {
        {"target.decoder_stack --dtype q8_0", 1,
         "vindex represent: representation 'target.decoder_stack.q8_0' already exists\n"},
        {"target.decoder_stack --dtype q9", 2, "vindex represent: unknown dtype 'q9'"},
        {"target.decoder_stack", 2, "vindex represent: --dtype is required"},
        {"", 0, "(baseline)            source-exact"},
        {"", 0, "mixed                 numerically-approximate   target.decoder_stack=target.decoder_stack.q8_0 target.output_head=target.output_head.q4_k"},
        {"add q8only target.decoder_stack=target.decoder_stack.q8_0", 0,
         "profile q8only added (1 selection), authority numerically-approximate\n"},
        {"add bad target.decoder_stack", 2, "vindex profile: 'target.decoder_stack' is not OBJECT=REPRESENTATION\n"},
        {"target.decoder_stack target.decoder_stack.f32 target.decoder_stack.q4_0", 1,
         "vindex diff: selection selects representation 'target.decoder_stack.q4_0' for object 'target.decoder_stack', which is not present (present: target.decoder_stack.f32, target.decoder_stack.q8_0)\n"},
    };
    static const char *const cmd[] = {"represent", "represent", "represent", "profile", "profile",
                                      "profile", "profile", "diff"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, "%s '%s' %s", cmd[i], dir, cases[i].args);
        CHECK_MSG(vindex(args, out, sizeof out) == cases[i].rc, "vindex %s", args);
        CHECK_HAS(out, cases[i].want);
    }
    snprintf(args, sizeof args, "diff '%s' target.decoder_stack target.decoder_stack.f32 target.decoder_stack.q8_0 --json", dir);
    CHECK(vindex(args, out, sizeof out) == 0);
    cJSON *doc = cJSON_Parse(out), *all = cJSON_GetObjectItem(doc, "overall");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "tensors")) == 36);
    CHECK(cJSON_GetObjectItem(all, "values") && cJSON_GetObjectItem(all, "values")->valuedouble == 3147776);
    double rel = cJSON_GetObjectItem(all, "rel_err") ? cJSON_GetObjectItem(all, "rel_err")->valuedouble : -1;
    CHECK(rel > 0.0045 && rel < 0.0055);          /* measured 0.00500 */
    cJSON_Delete(doc);
    snprintf(args, sizeof args, "precision '%s' --json", dir);
    CHECK(vindex(args, out, sizeof out) == 0);
    doc = cJSON_Parse(out);
    const cJSON *r;
    int seen = 0;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(doc, "representations")) {
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(r, "id"));
        double bpw = cJSON_GetObjectItem(r, "bits_per_weight")->valuedouble;
        if (id && strcmp(id, "target.output_head.q4_k") == 0) {
            CHECK_NEAR(bpw, 8.0 * (256 * 4 + 4096 * 144) / (256 + 4096 * 256.0), 1e-9);
            seen++;
        }
    }
    CHECK(seen == 1);
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(doc, "dtypes")) {
        const char *dt = cJSON_GetStringValue(cJSON_GetObjectItem(r, "dtype"));
        double bpw = cJSON_GetObjectItem(r, "bits_per_weight")->valuedouble;
        if (dt && strcmp(dt, "q8_0") == 0) { CHECK_NEAR(bpw, 8.5, 1e-12); seen++; }
        if (dt && strcmp(dt, "q4_k") == 0) { CHECK_NEAR(bpw, 4.5, 1e-12); seen++; }
    }
    CHECK(seen == 3);
    cJSON_Delete(doc);
}

/* The pid of `vindex represent dir target.decoder_stack --dtype dt`, started with its
 * output discarded, once its segment file (under its temporary name) exists; *st and
 * *gone if it ended before that. */
static pid_t start_represent(const char *dir, const char *dt, int *st, int *gone)
{
    char bin[512], seg[600], tmp[640];
    snprintf(bin, sizeof bin, "%s/vindex", LQL_BINARY_DIR);
    snprintf(seg, sizeof seg, "%s/segments/target.decoder_stack.%s.bin", dir, dt);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("LQL_THREADS", "1", 1);
        int dn = open("/dev/null", O_WRONLY);
        if (dn >= 0) { dup2(dn, 1); dup2(dn, 2); }
        execl(bin, "vindex", "represent", dir, "target.decoder_stack", "--dtype", dt,
              (char *)NULL);
        _exit(127);
    }
    *gone = 0;
    if (pid <= 0) return pid;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", seg, (long)pid);
    for (int t = 0; t < 20000 && access(tmp, F_OK) != 0 && access(seg, F_OK) != 0; t++) {
        if (waitpid(pid, st, WNOHANG) == pid) { *gone = 1; break; }   /* <= 20 s */
        usleep(1000);
    }
    return pid;
}

/* `vindex represent` ended by SIGINT/SIGTERM at several points of its write (0-30 ms after
 * its segment file appears, so under a sanitizer's slow start too): it removes the segment
 * it was writing (it died and left it, and every retry was refused with "segment …
 * already exists"), so whenever it stops, every file under segments/ is one index.json
 * lists. */
static void test_signal(const char *dir)
{
    static const int sigs[] = {SIGTERM, SIGINT, SIGTERM, SIGINT};
    static const int delay_ms[] = {0, 5, 15, 30};
    for (int i = 0; i < 4; i++) {
        int st = 0, gone = 0;
        pid_t pid = start_represent(dir, "q6_k", &st, &gone);
        CHECK(pid > 0);
        if (pid <= 0) return;
        usleep((useconds_t)delay_ms[i] * 1000);
        if (!gone) {
            kill(pid, sigs[i]);
            waitpid(pid, &st, 0);
        }
        CHECK_MSG(WIFEXITED(st), "vindex represent died of signal %d instead of cancelling",
                  WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        cJSON *ix = read_json(dir, "index.json");
        char segdir[512];
        snprintf(segdir, sizeof segdir, "%s/segments", dir);
        DIR *d = opendir(segdir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char rel[600];
            if (e->d_name[0] == '.') continue;
            snprintf(rel, sizeof rel, "segments/%s", e->d_name);
            CHECK_MSG(cJSON_GetObjectItem(cJSON_GetObjectItem(ix, "segments"), rel),
                      "%s is not listed by index.json after the signal", rel);
        }
        if (d) closedir(d);
        int done = cJSON_GetObjectItem(cJSON_GetObjectItem(ix, "representations"),
                                       "target.decoder_stack.q6_k") != NULL;
        cJSON_Delete(ix);
        if (done) break;   /* finished before the signal: nothing left to interrupt */
    }
}

/* SIGKILL cannot be caught: killed mid-write, `vindex represent` leaves only its segment's
 * temporary file, unlisted, and a retry is not refused (it was: "segment … already exists
 * (not listed by index.json; remove it first)"). */
static void test_kill9(const char *dir)
{
    int st = 0, gone = 0;
    pid_t pid = start_represent(dir, "q4_0", &st, &gone);
    CHECK(pid > 0);
    if (pid <= 0) return;
    if (!gone) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    char seg[600], tmp[640];
    snprintf(seg, sizeof seg, "%s/segments/target.decoder_stack.q4_0.bin", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", seg, (long)pid);
    vx_err err = {0};
    if (WIFSIGNALED(st)) {
        CHECK(access(seg, F_OK) != 0);
        CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_Q4_0, NULL, &err) == 0, "%s", err.msg);
        cJSON *report = NULL;
        CHECK_MSG(vx_verify(dir, NULL, &report, &err) == 0, "%s", err.msg);
        cJSON_Delete(report);
    }
    unlink(tmp);
}

/* Stores v at [row, col] of the decoder stack's f32 tensor `name`, in its segment file. */
static void poke(const char *dir, const char *name, uint64_t row, uint64_t col, float v)
{
    vx_container *c = NULL;
    vx_err err = {0};
    CHECK_MSG(vx_open(dir, &c, &err) == 0, "%s", err.msg);
    const vx_tensor *t = c ? vx_find(c, "target.decoder_stack", name) : NULL;
    CHECK(t && t->dtype == VX_F32 && t->ndim == 2);
    char path[600] = "";
    long at = -1;
    vx_segment_view sv = {0};
    for (size_t i = 0; t && i < vx_segment_count(c); i++) {
        if (vx_segment_at(c, i, &sv) == 0 && strcmp(sv.rel, t->segment) == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, sv.rel);
            at = (long)((const unsigned char *)t->data - (const unsigned char *)sv.data) +
                 (long)((row * (uint64_t)t->shape[1] + col) * sizeof v);
        }
    }
    vx_close(c);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && at >= 0 && pwrite(fd, &v, sizeof v, at) == (ssize_t)sizeof v);
    if (fd >= 0)
        close(fd);
}

/* A value a block codec cannot hold is refused by name, never written as a block that
 * decodes to NaN (or a NaN that decodes finite); f16 refuses a finite value past its range
 * as the encoder does. Nothing is left behind. */
static void test_unrepresentable(void)
{
    char dir[256], seg[600];
    vx_err err = {0};
    if (encode("tinyllama", "tiny-big", dir, sizeof dir) != 0)
        return;
    snprintf(seg, sizeof seg, "%s/segments/target.decoder_stack.q8_0.bin", dir);
    poke(dir, "layers.1.ffn.up_proj", 3, 40, 1e7f);
    CHECK(vx_represent(dir, "target.decoder_stack", VX_Q8_0, NULL, &err) == -1 && err.code == VX_EFORMAT);
    CHECK_STR(err.msg, "represent: tensor 'layers.1.ffn.up_proj' row 3 block 1 holds 1e+07, too large "
                       "for a q8_0 block: its scale would overflow and the block decode to "
                       "inf, NaN or 0");
    CHECK(access(seg, F_OK) != 0);
    CHECK(vx_represent(dir, "target.decoder_stack", VX_F16, NULL, &err) == -1);
    CHECK_STR(err.msg, "represent: tensor 'layers.1.ffn.up_proj' row 3 column 40 holds 1e+07, beyond "
                       "f16's range: as f16 it would be infinity");
    poke(dir, "layers.1.ffn.up_proj", 3, 40, 6e5f);      /* fits Q8_0's scale, not Q4_0's */
    CHECK(vx_represent(dir, "target.decoder_stack", VX_Q4_0, NULL, &err) == -1);
    CHECK_STR(err.msg, "represent: tensor 'layers.1.ffn.up_proj' row 3 block 1 holds 600000, too large "
                       "for a q4_0 block: its scale would overflow and the block decode to "
                       "inf, NaN or 0");
    static const vx_dtype blocks[] = {VX_Q8_0, VX_Q4_0, VX_MXFP4};
    static const float odd[] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        poke(dir, "layers.1.ffn.up_proj", 3, 40, odd[k]);
        for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
            char want[512];
            CHECK(vx_represent(dir, "target.decoder_stack", blocks[i], NULL, &err) == -1);
            snprintf(want, sizeof want, "represent: tensor 'layers.1.ffn.up_proj' row 3 block 1 holds "
                     "%s; a %s block cannot hold a non-finite value", k ? "inf" : "nan",
                     vx_dtype_name(blocks[i]));
            CHECK_STR(err.msg, want);
        }
    }
    /* a float target holds them */
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_BF16, NULL, &err) == 0, "%s", err.msg);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/lql-profile-XXXXXX");
    if (!mkdtemp(root)) return 1;
    char f32dir[256], bfdir[256];
    if (encode("tinyllama", "tiny", f32dir, sizeof f32dir) == 0) {
        test_represent_records(f32dir);
        test_profiles(f32dir);
        test_hostile(f32dir);
        test_cli(f32dir);
        test_signal(f32dir);
        test_kill9(f32dir);
    }
    if (encode("tinyllama-bf16", "tiny-bf16", bfdir, sizeof bfdir) == 0)
        test_fidelity_measured(bfdir);
    /* a container with a journal at its default place: rewriting index.json would key the
     * journal to nothing (vindex represent and profile add did it without a word) */
    char jdir[256];
    if (encode("tinyllama", "tiny-j", jdir, sizeof jdir) == 0) {
        char jp[512], want[1024], before[65], after[65];
        vx_err je = {0};
        snprintf(jp, sizeof jp, "%s.lqljournal", jdir);
        FILE *jf = fopen(jp, "w");
        if (jf) fclose(jf);
        sha_of(jdir, "index.json", before);
        snprintf(want, sizeof want, "represent rewrites index.json, and the journal '%s' is "
                 "keyed to its sha256: its edits could not be opened again; COMPILE them into "
                 "a new container first (or move the journal away)", jp);
        CHECK(vx_represent(jdir, "target.decoder_stack", VX_Q8_0, NULL, &je) == -1);
        CHECK_STR(je.msg, want);
        vx_select one = {"target.decoder_stack", "target.decoder_stack.f32"};
        CHECK(vx_profile_add(jdir, "p", &one, 1, 0, &je) == -1);
        CHECK_HAS(je.msg, "adding a profile rewrites index.json, and the journal '");
        sha_of(jdir, "index.json", after);
        CHECK_STR(after, before);
        char seg[512];
        snprintf(seg, sizeof seg, "%s/segments/target.decoder_stack.q8_0.bin", jdir);
        CHECK(access(seg, F_OK) != 0);
        unlink(jp);
        CHECK_MSG(vx_profile_add(jdir, "p", &one, 1, 0, &je) == 0, "%s", je.msg);
    }
    test_unrepresentable();
    /* rows are split over threads: the bytes do not depend on how many */
    char t3dir[256];
    vx_represent_info in;
    vx_err err = {0};
    setenv("LQL_THREADS", "3", 1);
    if (encode("tinyllama", "tiny-t3", t3dir, sizeof t3dir) == 0) {
        CHECK_MSG(vx_represent(t3dir, "target.decoder_stack", VX_Q8_0, &in, &err) == 0, "%s", err.msg);
        CHECK_STR(in.payload_sha256, q8_sha);
    }
    unsetenv("LQL_THREADS");
    t_rm_rf(root);
    return T_DONE();
}
