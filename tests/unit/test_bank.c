/*
 * test_bank.c — bank-shape containers (docs/lql/BANK.md) on the MoE fixtures (mixtral,
 * qwen2-moe, deepseek-v3-lite): each is encoded (graph shape) and imported as a bank
 * container, then
 *   - the reader reports the shape, and every operand of the graph container is found in
 *     the bank container with the same dtype, shape and bytes (experts from LYRW files);
 *   - the engine's f32 logits are bit-identical (memcmp) on every golden prompt and along
 *     the 32-token greedy continuation, whose tokens equal the golden ones; top-5 ids and
 *     probabilities match the golden numbers (1e-5); a bf16 encode (LYRW format bf16)
 *     is bit-identical between the shapes too;
 *   - WALK gives the same hits (layer, feature, score) on both;
 *   - a q8_0 representation compiled on a bank container binds through a profile with
 *     its own expert operands, the baseline with the LYRW ones;
 *   - hostile manifests and bank files are refused with pinned messages, and the
 *     importer's refusals are pinned.
 */
#include "browse.h"
#include "engine.h"
#include "lyrw.h"
#include "vx_int.h"
#include "t.h"
#include "t_file.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp[] = "/tmp/lql-bank-XXXXXX";

static void write_json(const char *path, const cJSON *j)
{
    char *text = cJSON_Print(j);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0 && fputc('\n', f) != EOF);   /* as the importer writes it */
    if (f)
        fclose(f);
    free(text);
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int ids_of(const cJSON *arr, int32_t *out, int max)
{
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        if (n < max) out[n++] = (int32_t)e->valuedouble;
    }
    return n;
}

/* Same operands, same bytes; returns how many came from LYRW files. */
static int same_operands(const vx_container *g, const vx_container *b)
{
    int from_lyrw = 0, bad = 0;
    CHECK(vx_tensor_count(g) == vx_tensor_count(b));
    for (size_t i = 0; i < vx_tensor_count(g); i++) {
        const vx_tensor *x = vx_tensor_at(g, i), *y = vx_find(b, x->object, x->name);
        if (!y || y->dtype != x->dtype || y->ndim != x->ndim || y->nbytes != x->nbytes ||
            memcmp(y->shape, x->shape, sizeof x->shape) != 0 || memcmp(y->data, x->data, x->nbytes) != 0) {
            if (!bad++)
                fprintf(stderr, "operand %s differs or is absent in the bank container\n", x->name);
            continue;
        }
        from_lyrw += strstr(y->segment, ".lyrw") != NULL;
    }
    CHECK(bad == 0);
    return from_lyrw;
}

/* dtype -1 keeps the source dtype and checks the goldens too; another dtype (bf16)
 * checks graph/bank identity only (the goldens are float64). */
static void parity(const char *fx, int dtype, unsigned flags, int want_lyrw, int want_files,
                   const int want_banks[3])
{
    char src[2048], gdir[512], bdir[512], golden[4096];
    snprintf(src, sizeof src, "%s/models/families/%s", LQL_FIXTURE_DIR, fx);
    snprintf(golden, sizeof golden, "%s/golden.json", src);
    const char *tag = dtype >= 0 ? "-bf16" : flags ? "-fused" : "";
    snprintf(gdir, sizeof gdir, "%s/%s%s.graph", tmp, fx, tag);
    snprintf(bdir, sizeof bdir, "%s/%s%s.bank", tmp, fx, tag);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.dtype = dtype;
    vx_err err = {0};
    CHECK_MSG(vx_encode(src, gdir, &o, &err) == 0, "encode %s: %s", fx, err.msg);
    vx_bank_info in;
    CHECK_MSG(vx_bank_import(gdir, bdir, flags, &in, &err) == 0, "import %s: %s", fx, err.msg);
    CHECK(in.layers == want_files);
    CHECK(memcmp(in.banks, want_banks, sizeof in.banks) == 0);
    /* fused: 2 regions per entry of 3 operands; gpt-oss-expert-v1: 4 regions (gate, up,
     * down, one bias row) per entry of 6 operands */
    int biased = strncmp(fx, "gpt-oss", 7) == 0;
    CHECK((int)in.regions == (flags || biased ? want_lyrw / 3 * 2 : want_lyrw));

    vx_container *g = NULL, *b = NULL;
    CHECK_MSG(vx_open(gdir, &g, &err) == 0, "%s", err.msg);
    CHECK_MSG(vx_open(bdir, &b, &err) == 0, "open bank %s: %s", fx, err.msg);
    if (!g || !b) {
        vx_close(g);
        vx_close(b);
        return;
    }
    CHECK(vx_container_shape(g) == VX_SHAPE_GRAPH && vx_container_shape(b) == VX_SHAPE_BANK);
    CHECK(vx_container_bank(g) == NULL && vx_bank_file_count(vx_container_bank(b)) == (size_t)want_files);
    CHECK_MSG(same_operands(g, b) == want_lyrw, "%s: operands from LYRW", fx);
    cJSON *rep = NULL;
    CHECK_MSG(vx_verify(bdir, NULL, &rep, &err) == 0, "verify %s: %s", fx, err.msg);
    cJSON_Delete(rep);

    eng_model *mg = NULL, *mb = NULL;
    CHECK_MSG(eng_model_bind(g, &mg, &err) == 0, "%s", err.msg);
    CHECK_MSG(eng_model_bind(b, &mb, &err) == 0, "bind bank %s: %s", fx, err.msg);
    cJSON *gold = t_load_json(golden), *p;
    int V = mg ? eng_model_vocab(mg) : 0, prompts = 0, differ = 0, greedy_bad = 0, top_bad = 0;
    float *lg = malloc((size_t)V * sizeof *lg), *lb = malloc((size_t)V * sizeof *lb);
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(gold, "prompts")) {
        if (!mg || !mb)
            break;
        int32_t ids[256], want[64];
        int n = ids_of(cJSON_GetObjectItem(p, "ids"), ids, 256);
        int ng = ids_of(cJSON_GetObjectItem(p, "greedy32"), want, 64);
        eng_session *sg, *sb;
        CHECK(eng_session_new(mg, n + ng + 1, &sg, &err) == 0 && eng_session_new(mb, n + ng + 1, &sb, &err) == 0);
        CHECK(eng_forward(sg, ids, n, lg, NULL, &err) == 0 && eng_forward(sb, ids, n, lb, NULL, &err) == 0);
        differ += memcmp(lg, lb, (size_t)V * sizeof *lg) != 0;
        /* top-5 against the golden float64 oracle */
        double mx = lb[argmax(lb, V)], z = 0;
        for (int i = 0; i < V; i++) z += exp((double)lb[i] - mx);
        const cJSON *t;
        int k = 0;
        float tmpv[4096];
        memcpy(tmpv, lb, (size_t)V * sizeof *lb);
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(p, "top5")) {
            int id = argmax(tmpv, V);
            double pr = exp((double)lb[id] - mx) / z;
            top_bad += dtype < 0 && (id != cJSON_GetObjectItem(t, "id")->valueint ||
                                     fabs(pr - cJSON_GetObjectItem(t, "prob")->valuedouble) > 1e-5);
            tmpv[id] = -INFINITY;
            k++;
        }
        CHECK(k == 5);
        for (int i = 0; i < ng; i++) {
            int32_t tg = argmax(lg, V), tb = argmax(lb, V);
            greedy_bad += tg != tb || (dtype < 0 && tg != want[i]);
            if (i + 1 < ng) {
                CHECK(eng_forward(sg, &tg, 1, lg, NULL, &err) == 0 && eng_forward(sb, &tb, 1, lb, NULL, &err) == 0);
                differ += memcmp(lg, lb, (size_t)V * sizeof *lg) != 0;
            }
        }
        eng_session_free(sg);
        eng_session_free(sb);
        prompts++;
    }
    CHECK_MSG(prompts == 4, "%s: %d golden prompts", fx, prompts);
    CHECK_MSG(differ == 0, "%s: %d logit vectors differ between graph and bank", fx, differ);
    CHECK_MSG(greedy_bad == 0, "%s: %d greedy tokens differ from the golden", fx, greedy_bad);
    CHECK_MSG(top_bad == 0, "%s: %d top-5 entries differ from the golden", fx, top_bad);
    free(lg);
    free(lb);
    cJSON_Delete(gold);
    eng_model_free(mg);
    eng_model_free(mb);

    /* WALK: identical hits */
    brw_model *bg = NULL, *bb = NULL;
    CHECK_MSG(brw_open(g, &bg, &err) == 0 && brw_open(b, &bb, &err) == 0, "brw_open %s: %s", fx, err.msg);
    const char *walk_prompts[] = {"The capital of France is", "hello world"};
    for (int w = 0; bg && bb && w < 2; w++) {
        brw_walk_opts wo = {.top = 10, .layer_lo = -1, .layer_hi = -1};
        brw_walk x, y;
        CHECK(brw_walk_run(bg, walk_prompts[w], &wo, &x, &err) == 0);
        CHECK(brw_walk_run(bb, walk_prompts[w], &wo, &y, &err) == 0);
        CHECK(x.n_layers == y.n_layers && x.n_layers == brw_layers(bb));
        int total = 0, same = x.top == y.top;
        for (int l = 0; same && l < x.n_layers && l < y.n_layers; l++) {
            same &= x.counts[l] == y.counts[l];
            total += x.counts[l];
            for (int h = 0; same && h < x.counts[l]; h++) {
                const brw_hit *u = &x.hits[l * x.top + h], *v = &y.hits[l * y.top + h];
                same &= u->layer == v->layer && u->feature == v->feature &&
                        memcmp(&u->score, &v->score, sizeof u->score) == 0;
            }
        }
        CHECK_MSG(same && total == 10 * x.n_layers, "%s walk '%s': hits differ (%d)", fx, walk_prompts[w], total);
        brw_walk_free(&x);
        brw_walk_free(&y);
    }
    brw_close(bg);
    brw_close(bb);
    vx_close(g);
    vx_close(b);
}

/* ---------------------------------------------------------------- representations */

/* vx_verify on dir (source: `source`, else the recorded checkpoint) passes, with the
 * source tensors of representation `id` checked against its record. */
static void verify_source(const char *dir, const char *source, const char *id)
{
    cJSON *rep = NULL, *row;
    vx_err err = {0};
    CHECK_MSG(vx_verify(dir, source, &rep, &err) == 0, "verify %s: %s", dir, err.msg);
    const char *status = NULL;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(rep, "representations"))
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(row, "representation")), id) == 0)
            status = cJSON_GetStringValue(cJSON_GetObjectItem(row, "source"));
    CHECK_STR(status, "ok");
    cJSON_Delete(rep);
}

/* Represented on a bank container, whose baseline's source hash covers only the operands
 * outside the LYRW files: the new representation's covers every operand it holds, so
 * verify passes — hashed from the checkpoint (gpt-oss: MXFP4 experts with their scales),
 * and, with the checkpoint gone at represent time, from the source-exact stored bytes. */
static void verify_represented_bank(void)
{
    char dir[600], cmd[1400], path[700], src[2048];
    vx_err err = {0};
    vx_represent_info in;
    snprintf(dir, sizeof dir, "%s/gpt-oss.bank", tmp);
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_Q8_0, &in, &err) == 0, "%s", err.msg);
    verify_source(dir, NULL, in.id);
    snprintf(dir, sizeof dir, "%s/mixtral-nosrc.bank", tmp);
    snprintf(cmd, sizeof cmd, "cp -r '%s/mixtral.bank' '%s'", tmp, dir);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/index.json", dir);
    cJSON *ix = t_load_json(path);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(ix, "encoder"), "source", cJSON_CreateString("/nonexistent"));
    write_json(path, ix);
    cJSON_Delete(ix);
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_Q4_0, &in, &err) == 0, "%s", err.msg);
    snprintf(src, sizeof src, "%s/models/families/mixtral", LQL_FIXTURE_DIR);
    verify_source(dir, src, in.id);
}

/* A representation compiled on a bank container holds every operand itself (experts
 * included); a profile binding it keeps the bank out of the lookup table, the baseline
 * binding reads experts from the LYRW files. */
static void profile_on_bank(void)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/qwen2-moe.bank", tmp);
    vx_err err = {0};
    vx_represent_info in;
    CHECK_MSG(vx_represent(dir, "target.decoder_stack", VX_Q8_0, &in, &err) == 0, "%s", err.msg);
    verify_source(dir, NULL, in.id);
    vx_select sel = {"target.decoder_stack", in.id};
    CHECK_MSG(vx_profile_add(dir, "q8", &sel, 1, 0, &err) == 0, "%s", err.msg);
    vx_container *c = NULL;
    CHECK_MSG(vx_open_profile(dir, "q8", NULL, 0, &c, &err) == 0, "%s", err.msg);
    const vx_tensor *t = c ? vx_find(c, "target.decoder_stack", "layers.2.ffn.experts.7.down_proj") : NULL;
    CHECK(t && t->dtype == VX_Q8_0);
    CHECK_STR(t ? t->segment : NULL, "segments/target.decoder_stack.q8_0.bin");
    eng_model *m = NULL;
    CHECK_MSG(c && eng_model_bind(c, &m, &err) == 0, "bind q8: %s", err.msg);
    eng_session *s = NULL;
    int32_t ids[3] = {1, 2, 3};
    float lg[4096];
    CHECK(m && eng_session_new(m, 8, &s, &err) == 0 && eng_forward(s, ids, 3, lg, NULL, &err) == 0);
    eng_session_free(s);
    eng_model_free(m);
    vx_close(c);
    CHECK_MSG(vx_open(dir, &c, &err) == 0, "%s", err.msg);
    t = c ? vx_find(c, "target.decoder_stack", "layers.2.ffn.experts.7.down_proj") : NULL;
    CHECK(t && t->dtype == VX_F32);
    CHECK_STR(t ? t->segment : NULL, "banks/layer_002.lyrw");
    vx_close(c);
}

/* ---------------------------------------------------------------- hostile input */

static char bank[600], mpath[700];
static cJSON *manifest;

/* Open the bank container with the manifest edited by `edit`; the message is returned
 * (static) and the manifest restored. */
static const char *open_edited(void (*edit)(cJSON *m))
{
    static vx_err err;
    cJSON *m = cJSON_Duplicate(manifest, 1);
    edit(m);
    write_json(mpath, m);
    cJSON_Delete(m);
    vx_container *c = NULL;
    memset(&err, 0, sizeof err);
    int rc = vx_open(bank, &c, &err);
    CHECK(rc == -1 && c == NULL);
    vx_close(c);
    write_json(mpath, manifest);
    return err.msg;
}

static cJSON *layer0(cJSON *m) { return cJSON_GetArrayItem(cJSON_GetObjectItem(m, "layers"), 0); }
static cJSON *routed0(cJSON *m) { return cJSON_GetObjectItem(layer0(m), "routed_bank"); }
static void e_schema(cJSON *m) { cJSON_ReplaceItemInObject(m, "schema", cJSON_CreateNumber(2)); }
static void e_layer(cJSON *m) { cJSON_ReplaceItemInObject(layer0(m), "layer", cJSON_CreateNumber(7)); }
static void e_twice(cJSON *m) { cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(m, "layers"), 1), "layer", cJSON_CreateNumber(0)); }
static void e_storage(cJSON *m) { cJSON_ReplaceItemInObject(routed0(m), "storage", cJSON_CreateString("banks/layer_009.lyrw")); }
static void e_bank_id(cJSON *m) { cJSON_ReplaceItemInObject(routed0(m), "bank_id", cJSON_CreateNumber(5)); }
static void e_unknown(cJSON *m)
{
    cJSON_ReplaceItemInObject(routed0(m), "programme", cJSON_CreateString("foo-expert-v9"));
    cJSON_DeleteItemFromObject(routed0(m), "programme_id");
}
static void e_latent(cJSON *m)
{
    cJSON_ReplaceItemInObject(routed0(m), "programme", cJSON_CreateString("latent-moe-v1"));
    cJSON_ReplaceItemInObject(routed0(m), "programme_id", cJSON_CreateNumber(4));
}
static void e_pid(cJSON *m) { cJSON_ReplaceItemInObject(routed0(m), "programme_id", cJSON_CreateNumber(3)); }
static void e_experts(cJSON *m) { cJSON_ReplaceItemInObject(routed0(m), "experts", cJSON_CreateNumber(4)); }
static void e_topk(cJSON *m)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cJSON_GetObjectItem(layer0(m), "router"), "selection"), "k",
                              cJSON_CreateNumber(3));
}
static cJSON *router0(cJSON *m) { return cJSON_GetObjectItem(layer0(m), "router"); }
/* facts the manifest restates or names beyond its banks: what lql does not execute, an
 * operand other than the graph's, a router fact the graph states otherwise */
static void e_transforms(cJSON *m)
{
    cJSON_ReplaceItemInObject(layer0(m), "transforms", cJSON_Parse("{\"routed_input\": \"x\"}"));
}
static void e_reduction(cJSON *m) { cJSON_ReplaceItemInObject(layer0(m), "reduction", cJSON_CreateString("mean")); }
static void e_scores(cJSON *m) { cJSON_ReplaceItemInObject(router0(m), "scores", cJSON_CreateString("layers.0.ffn.up")); }
static void e_scaling(cJSON *m) { cJSON_ReplaceItemInObject(router0(m), "routed_scaling", cJSON_CreateNumber(7)); }
static void e_norm(cJSON *m) { cJSON_ReplaceItemInObject(router0(m), "normalisation", cJSON_CreateString("none")); }
static void e_scoring(cJSON *m) { cJSON_ReplaceItemInObject(router0(m), "scoring", cJSON_CreateNumber(1)); }
static void e_fused(cJSON *m)
{
    cJSON_ReplaceItemInObject(routed0(m), "programme", cJSON_CreateString("gated-mlp-fused-fc1-v1"));
    cJSON_ReplaceItemInObject(routed0(m), "programme_id", cJSON_CreateNumber(1));
}
static void e_object(cJSON *m) { cJSON_ReplaceItemInObject(m, "object", cJSON_CreateString("target.nowhere")); }
static void e_wrong_file(cJSON *m) { cJSON_ReplaceItemInObject(routed0(m), "storage", cJSON_CreateString("banks/layer_001.lyrw")); }
static void e_nobank(cJSON *m) { cJSON_DeleteItemFromObject(layer0(m), "routed_bank"); }
static void e_dims(cJSON *m)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(routed0(m), "expert_dims"), "intermediate", cJSON_CreateNumber(32));
}

/* Replace banks/layer_000.lyrw by a file whose one bank, of the given kind, has the given
 * roles (each an f32 [rows, cols] region of zeros; index.json's byte record updated so the
 * reader gets as far as the capability check). */
static void layer0_bank(const uint16_t *roles, int n, uint16_t kind, uint32_t rows, uint32_t cols)
{
    char path[700], ipath[700];
    snprintf(path, sizeof path, "%s/banks/layer_000.lyrw", bank);
    snprintf(ipath, sizeof ipath, "%s/index.json", bank);
    unlink(path);
    vx_lyrw_schema sch[4];
    for (int i = 0; i < n; i++)
        sch[i] = (vx_lyrw_schema){0, roles[i], VX_LF_F32, VX_PACK_ROW_MAJOR, VX_LYRW_UNPAIRED, 0, rows, cols, 0};
    vx_lyrw_bank_spec spec = {.id = 0, .kind = kind, .schema_count = (uint16_t)n, .num_entries = 8,
                              .input_dim = 64, .intermediate_dim = 64, .output_dim = 64,
                              .schemas = sch, .entry_count = 8};
    vx_lyrw_writer *w;
    vx_err err = {0};
    static float zero[64 * 64];      /* rows x cols is at most 64 x 64 */
    CHECK(vx_lyrw_writer_open(path, 0, 0, &spec, 1, &w, &err) == 0);
    for (int i = 0; i < 8 * n; i++)
        CHECK(vx_lyrw_write_region(w, zero, (size_t)rows * cols * sizeof *zero, &err) == 0);
    CHECK(vx_lyrw_writer_close(w, NULL, NULL, &err) == 0);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    cJSON *ix = t_load_json(ipath);
    cJSON *rec = cJSON_GetObjectItem(cJSON_GetObjectItem(ix, "segments"), "banks/layer_000.lyrw");
    cJSON_ReplaceItemInObject(rec, "bytes", cJSON_CreateNumber((double)size));
    write_json(ipath, ix);
    cJSON_Delete(ix);
}

static void hostile(void)
{
    snprintf(bank, sizeof bank, "%s/mixtral.bank", tmp);
    snprintf(mpath, sizeof mpath, "%s/moe_manifest.json", bank);
    manifest = t_load_json(mpath);
    if (!manifest) {
        CHECK(manifest != NULL);
        return;
    }
    CHECK_STR(open_edited(e_schema), "moe_manifest.json schema 2 is not supported; this lql reads schema 1");
    CHECK_STR(open_edited(e_layer), "moe_manifest.json: layer 7 is out of range (the graph has 2 layers)");
    CHECK_STR(open_edited(e_twice), "moe_manifest.json lists layer 0 twice");
    CHECK_STR(open_edited(e_storage),
              "moe_manifest.json layer 0 routed_bank: storage 'banks/layer_009.lyrw' has no record in index.json segments");
    CHECK_STR(open_edited(e_bank_id),
              "moe_manifest.json layer 0 routed_bank: bank 5 is not in 'banks/layer_000.lyrw' (it holds 1 bank)");
    CHECK_STR(open_edited(e_unknown),
              "moe_manifest.json layer 0 routed_bank: programme 'foo-expert-v9' is not in the programme registry; the bank is kept but cannot execute");
    CHECK_STR(open_edited(e_latent),
              "moe_manifest.json layer 0 routed_bank: programme 'latent-moe-v1' (registry id 4) is registered, but lql executes only gated-mlp-v1, gated-mlp-fused-fc1-v1 and gpt-oss-expert-v1");
    CHECK_STR(open_edited(e_pid),
              "moe_manifest.json layer 0 routed_bank: programme_id disagrees with programme 'gated-mlp-v1' (registry id 0)");
    CHECK_STR(open_edited(e_fused),
              "missing operand 'layers.0.ffn.experts.0.gate_proj' (layer 0, routed_bank 0, programme "
              "'gated-mlp-fused-fc1-v1'): role 'gate_up_fused' is absent from segment 'banks/layer_000.lyrw'");
    CHECK_STR(open_edited(e_experts),
              "moe_manifest.json layer 0: routed_bank experts 4 disagree with the system graph's moe.experts 8");
    CHECK_STR(open_edited(e_topk),
              "moe_manifest.json layer 0: selection k 3 disagrees with the system graph's moe.top_k 2");
    static const struct { void (*edit)(cJSON *); const char *want; } stated[] = {
        {e_transforms, "moe_manifest.json layer 0: transforms {\"routed_input\":\"x\"} is not "
                       "executed by lql (it runs none)"},
        {e_reduction, "moe_manifest.json layer 0: reduction \"mean\" is not executed by lql (it "
                      "runs 'gate_weighted_sum')"},
        {e_scores, "moe_manifest.json layer 0: scores \"layers.0.ffn.up\" is not the operand "
                   "'layers.0.ffn.router'"},
        {e_scaling, "moe_manifest.json layer 0: routed_scaling 7 disagrees with the system graph's "
                    "moe.routed_scaling 1"},
        {e_norm, "moe_manifest.json layer 0: normalisation \"none\" disagrees with the system "
                 "graph's moe.normalise true, i.e. \"sum_to_one\""},
        {e_scoring, "moe_manifest.json layer 0: scoring 1 disagrees with the system graph's "
                    "moe.scoring \"softmax\""}};
    for (size_t i = 0; i < sizeof stated / sizeof stated[0]; i++)
        CHECK_STR(open_edited(stated[i].edit), stated[i].want);
    CHECK_STR(open_edited(e_object),
              "moe_manifest.json names object 'target.nowhere', which the system graph does not define");
    CHECK_STR(open_edited(e_wrong_file),
              "moe_manifest.json layer 0 routed_bank: storage 'banks/layer_001.lyrw' holds layer 1");
    CHECK_STR(open_edited(e_nobank), "moe_manifest.json layer 0 names no bank");
    CHECK_STR(open_edited(e_dims),
              "moe_manifest.json layer 0 routed_bank: bank 0 of 'banks/layer_000.lyrw' is 8 entries of 64/64/64, the manifest says 8 of 64/32/64");

    /* The storage file itself gone (index.json still records it). */
    char path[700], moved[720], want[1024];
    snprintf(path, sizeof path, "%s/banks/layer_001.lyrw", bank);
    snprintf(moved, sizeof moved, "%s.away", path);
    CHECK(rename(path, moved) == 0);
    vx_err err = {0};
    vx_container *c = NULL;
    CHECK(vx_open(bank, &c, &err) == -1 && err.code == VX_EMISSING);
    CHECK_STR(err.msg, "moe_manifest.json layer 1 routed_bank: storage 'banks/layer_001.lyrw' is missing from the container: No such file or directory");
    CHECK(rename(moved, path) == 0);

    /* The manifest itself gone. */
    snprintf(moved, sizeof moved, "%s.away", mpath);
    CHECK(rename(mpath, moved) == 0);
    CHECK(vx_open(bank, &c, &err) == -1);
    snprintf(want, sizeof want, "moe_manifest.json is missing from '%s' (index.json names it)", bank);
    CHECK_STR(err.msg, want);
    CHECK(rename(moved, mpath) == 0);
    CHECK_MSG(vx_open(bank, &c, &err) == 0, "restored: %s", err.msg);
    vx_close(c);

    /* verify hashes bank files like segments: one flipped byte in a region is named. */
    char l0[700];
    snprintf(l0, sizeof l0, "%s/banks/layer_000.lyrw", bank);
    FILE *f = fopen(l0, "r+b");
    int ch = EOF;
    if (f && fseek(f, 4096, SEEK_SET) == 0 && (ch = fgetc(f)) != EOF && fseek(f, 4096, SEEK_SET) == 0)
        fputc(ch ^ 1, f);
    if (f)
        fclose(f);
    cJSON *rep = NULL;
    CHECK(vx_verify(bank, NULL, &rep, &err) == -1 && err.code == VX_EVERIFY);
    CHECK_HAS(err.msg, "segment 'banks/layer_000.lyrw': encoded != recorded (sha256 ");
    cJSON_Delete(rep);
    /* ... and so does the first touch (INFER's and browse's check), by the file's record:
     * its views have no hash of their own */
    CHECK_MSG(vx_open(bank, &c, &err) == 0, "open: %s", err.msg);
    if (c) {
        CHECK(vx_object_check(c, NULL, &err) == -1 && err.code == VX_EVERIFY);
        CHECK_HAS(err.msg, "bank file 'banks/layer_000.lyrw' is corrupted: it does not match its "
                  "recorded sha256 (read for tensor 'layers.0.ffn.experts.0.");
        CHECK(vx_object_check(c, NULL, &err) == -1);   /* a failure is not remembered as checked */
        vx_close(c);
    }
    f = fopen(l0, "r+b");
    if (f && fseek(f, 4096, SEEK_SET) == 0)
        fputc(ch, f);
    if (f)
        fclose(f);
    CHECK_MSG(vx_verify(bank, NULL, &rep, &err) == 0, "restored: %s", err.msg);
    cJSON_Delete(rep);
    CHECK_MSG(vx_open(bank, &c, &err) == 0, "open: %s", err.msg);
    if (c) {
        CHECK_MSG(vx_object_check(c, NULL, &err) == 0, "restored: %s", err.msg);
        vx_close(c);
    }

    /* A bank file shorter than index.json records. */
    CHECK(truncate(path, 4096) == 0);
    CHECK(vx_open(bank, &c, &err) == -1 && err.code == VX_EFORMAT);
    CHECK_HAS(err.msg, "bank file 'banks/layer_001.lyrw' is truncated: 4096 bytes on disk, index.json records ");

    /* An unregistered role beside the needed ones is preserved, not refused: the bank
     * opens and its operands are the gate/up/down regions. */
    CHECK(truncate(path, 0) == 0);   /* layer 1 stays broken: check layer 0 alone */
    static const uint16_t extra[4] = {VX_ROLE_GATE, VX_ROLE_UP, VX_ROLE_DOWN, 300};
    layer0_bank(extra, 4, VX_BANK_ROUTED, 64, 64);
    CHECK(vx_open(bank, &c, &err) == -1);
    CHECK_HAS(err.msg, "bank file 'banks/layer_001.lyrw' is truncated");   /* got past layer 0 */

    /* The bank's kind and its schemas' shapes are the manifest's and the bank dims': a
     * routed bank relabelled shared, and gate/up/down regions of 32 x 128 (the same bytes
     * as 64 x 64) are refused at open, not first by the engine. */
    static const uint16_t gud[3] = {VX_ROLE_GATE, VX_ROLE_UP, VX_ROLE_DOWN};
    layer0_bank(gud, 3, VX_BANK_SHARED, 64, 64);
    CHECK(vx_open(bank, &c, &err) == -1 && err.code == VX_EFORMAT);
    CHECK_STR(err.msg, "moe_manifest.json layer 0 routed_bank: bank 0 of 'banks/layer_000.lyrw' has kind 2 (shared)");
    layer0_bank(gud, 3, VX_BANK_ROUTED, 32, 128);
    CHECK(vx_open(bank, &c, &err) == -1 && err.code == VX_EFORMAT);
    CHECK_STR(err.msg, "moe_manifest.json layer 0 routed_bank: the gate region of 'banks/layer_000.lyrw' is 32 x 128; "
                       "bank 0's dims (input 64, intermediate 64, output 64) make it 64 x 64");

    /* A programme without its required roles: named operand, layer, bank, role, file. */
    static const uint16_t no_down[2] = {VX_ROLE_GATE, VX_ROLE_UP};
    layer0_bank(no_down, 2, VX_BANK_ROUTED, 64, 64);
    CHECK(vx_open(bank, &c, &err) == -1 && err.code == VX_EMISSING);
    CHECK_STR(err.msg, "missing operand 'layers.0.ffn.experts.0.down_proj' (layer 0, routed_bank 0, programme "
                       "'gated-mlp-v1'): role 'down' is absent from segment 'banks/layer_000.lyrw'");

    /* A fused region that is not two contiguous halves has no gate and up views. */
    static const uint16_t fused_any[2] = {VX_ROLE_GATE_UP_FUSED, VX_ROLE_DOWN};
    layer0_bank(fused_any, 2, VX_BANK_ROUTED, 64, 64);
    CHECK_STR(open_edited(e_fused),
              "moe_manifest.json layer 0 routed_bank: the gate_up_fused region of 'banks/layer_000.lyrw' (layout "
              "unspecified, 64 rows) is not two contiguous halves, so it has no gate and up views");
    cJSON_Delete(manifest);
}

static void importer_refusals(void)
{
    char gdir[600], out[600], want[2048], src[4096];
    vx_err err = {0};
    snprintf(gdir, sizeof gdir, "%s/mixtral.graph", tmp);
    snprintf(out, sizeof out, "%s/mixtral.bank", tmp);
    CHECK(vx_bank_import(gdir, out, 0, NULL, &err) == -1);
    snprintf(want, sizeof want, "bank import: '%s' already exists; lql does not overwrite it", out);
    CHECK_STR(err.msg, want);
    snprintf(out, sizeof out, "%s/again.bank", tmp);
    snprintf(gdir, sizeof gdir, "%s/qwen2-moe.bank", tmp);
    CHECK(vx_bank_import(gdir, out, 0, NULL, &err) == -1);
    snprintf(want, sizeof want, "bank import: '%s' is already a bank-shape container", gdir);
    CHECK_STR(err.msg, want);
    snprintf(src, sizeof src, "%s/models/families/llama-gqa", LQL_FIXTURE_DIR);
    snprintf(gdir, sizeof gdir, "%s/llama.graph", tmp);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    CHECK_MSG(vx_encode(src, gdir, &o, &err) == 0, "%s", err.msg);
    CHECK(vx_bank_import(gdir, out, 0, NULL, &err) == -1 && err.code == VX_EUNSUPPORTED);
    snprintf(want, sizeof want,
             "bank import: '%s' has no routed layers (execution.moe is null); a bank container holds MoE expert banks",
             gdir);
    CHECK_STR(err.msg, want);
    CHECK(access(out, F_OK) != 0);
    snprintf(want, sizeof want, "%s.tmp.%ld", out, (long)getpid());
    CHECK(access(want, F_OK) != 0);     /* the temporary sibling is removed */
}

/* The gpt-oss bank: programme 2 in the manifest, its MXFP4 regions, and its refusals. */
static void gpt_oss_bank(void)
{
    char gdir[512], bdir[512], out[512], path[600], want[1200];
    snprintf(gdir, sizeof gdir, "%s/gpt-oss.graph", tmp);
    snprintf(bdir, sizeof bdir, "%s/gpt-oss.bank", tmp);
    snprintf(path, sizeof path, "%s/moe_manifest.json", bdir);
    cJSON *m = t_load_json(path);
    const cJSON *rb = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(m, "layers"), 0), "routed_bank");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(rb, "programme")), "gpt-oss-expert-v1");
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(rb, "programme_id")) == 2);
    vx_container *c = NULL;
    vx_err err = {0};
    CHECK_MSG(vx_open(bdir, &c, &err) == 0, "%s", err.msg);
    const vx_tensor *t = c ? vx_find(c, "target.decoder_stack", "layers.3.ffn.experts.7.down_proj") : NULL;
    const vx_tensor *bb = c ? vx_find(c, "target.decoder_stack", "layers.3.ffn.experts.7.down_proj.bias") : NULL;
    CHECK(t && t->dtype == VX_MXFP4 && strcmp(t->segment, "banks/layer_003.lyrw") == 0);
    CHECK(bb && bb->ndim == 1 && bb->shape[0] == 64 && strcmp(bb->segment, "banks/layer_003.lyrw") == 0);
    vx_close(c);
    /* a manifest claiming gated-mlp-v1 for the biased experts disagrees with the graph */
    cJSON *rbm = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(m, "layers"), 0), "routed_bank");
    cJSON_ReplaceItemInObject(rbm, "programme", cJSON_CreateString("gated-mlp-v1"));
    cJSON_ReplaceItemInObject(rbm, "programme_id", cJSON_CreateNumber(0));
    snprintf(out, sizeof out, "%s/gpt-oss-p0.bank", tmp);
    snprintf(want, sizeof want, "cp -r '%s' '%s'", bdir, out);
    CHECK(system(want) == 0);
    snprintf(path, sizeof path, "%s/moe_manifest.json", out);
    write_json(path, m);
    cJSON_Delete(m);
    CHECK(vx_open(out, &c, &err) == -1);
    CHECK_HAS(err.msg, "moe_manifest.json layer 0: routed_bank programme 'gated-mlp-v1' disagrees with the system graph's moe.expert_bias true");
    /* --fused has no bias role */
    snprintf(out, sizeof out, "%s/gpt-oss.fused", tmp);
    CHECK(vx_bank_import(gdir, out, VX_BANK_FUSED, NULL, &err) == -1);
    CHECK_STR(err.msg, "bank import: layer 0's routed experts carry biases, which programme "
                       "gated-mlp-fused-fc1-v1 cannot hold (import without --fused)");
}

int main(void)
{
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    static const int mix[3] = {2, 0, 0}, qwen[3] = {2, 2, 1}, ds[3] = {2, 2, 1};
    parity("mixtral", -1, 0, 2 * 8 * 3, 2, mix);
    parity("qwen2-moe", -1, 0, 2 * (8 + 1) * 3 + 3, 3, qwen);
    parity("deepseek-v3-lite", -1, 0, 2 * (8 + 1) * 3 + 3, 3, ds);
    parity("deepseek-v3-lite", VX_BF16, 0, 2 * (8 + 1) * 3 + 3, 3, ds);   /* LYRW format bf16 */
    parity("qwen2-moe", -1, VX_BANK_FUSED, 2 * (8 + 1) * 3 + 3, 3, qwen);   /* gated-mlp-fused-fc1-v1 */
    /* gpt-oss-expert-v1: MXFP4 experts as the checkpoint packs them, and the bf16 layout */
    static const int oss[3] = {4, 0, 0};
    parity("gpt-oss", -1, 0, 4 * 8 * 6, 4, oss);
    parity("gpt-oss-bf16", -1, 0, 4 * 8 * 6, 4, oss);
    gpt_oss_bank();
    importer_refusals();
    profile_on_bank();
    verify_represented_bank();
    hostile();
    CHECK(t_rm_rf(tmp) == 0);
    return T_DONE();
}
