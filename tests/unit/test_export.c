/*
 * test_export.c — COMPILE CURRENT INTO MODEL (docs/lql/MUTATION.md "Export").
 *
 * Round trip with an edit: tinyllama + an INSERTed fact, compiled INTO VINDEX and exported
 * INTO MODEL from the same journal; `vindex encode` of the exported directory must give a
 * container whose every representation payload hash and every segment file hash equal the
 * compiled container's, and INFER on it must recall the fact. The same statement with
 * FORMAT GGUF writes a file that tests/export/check_gguf.py (an independent Python reader)
 * finds equal, tensor by tensor, to the exported safetensors; one flipped byte makes the
 * reader fail. A llama with Llama 2's SentencePiece tokenizer gets llama.cpp's llama
 * tokenizer (checked the same way).
 *
 * Round trip without an edit, through the C call: qwen3, qwen2-moe, phi3 (fused rows),
 * gpt2 (transposed Conv1D), mamba2 (reshaped conv), deepseek-v3-lite (MLA + MoE),
 * granite-hybrid (per-expert row slices), gpt-oss-bf16 (gathered experts) and gpt-oss
 * (MXFP4 blocks and scales) each encode →
 * export → encode to the same payload hashes as the direct encode, and every exported
 * tensor equals the source checkpoint's (dtype, shape, bytes).
 *
 * GGUF beyond llama: qwen2, phi3, gpt2, Mixtral, a 26-layer Gemma 2 (tools/mkfixture) and an
 * MHA OLMo 2 (tests/export/mha_variant.py), each read by check_gguf.py against its exported
 * directory. MXFP4 experts (gpt-oss) go back as blocks and scales.
 *
 * Refusals by name: a non-empty target directory, an existing GGUF file, a path whose
 * parent is missing (and nothing left behind), GGUF of families llama.cpp has no form for
 * and of constructs an architecture lacks (rope scaling, a window, GQA under olmo2, a
 * 3-layer gemma2), a bank-shape container, a q8_0 profile, MXFP4 experts stored as f32; a
 * full disk midway (RLIMIT_FSIZE) fails by name and leaves nothing.
 */
#include "st.h"
#include "t.h"
#include "test_journal_fx.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAMILIES LQL_FIXTURE_DIR "/models/families"

static char out[1 << 16];

static cJSON *index_of(const char *dir)
{
    char p[4200], *text = NULL;
    size_t n = 0;
    cJSON *j = NULL;
    vx_err e = {0};
    snprintf(p, sizeof p, "%s/index.json", dir);
    if (vx_read_small_file(p, "index", &text, &n, &e) == 0)
        j = cJSON_ParseWithLength(text, n);
    free(text);
    return j;
}

/* Every representation's payload hash (and, with segments, every segment record's sha256)
 * of a equal to b's; the count of compared hashes in *n. */
static int same_hashes(const char *a, const char *b, int segments, int *n)
{
    cJSON *ia = index_of(a), *ib = index_of(b);
    int ok = ia && ib;
    *n = 0;
    const char *keys[2] = {"representations", "segments"};
    const char *field[2] = {"payload_sha256", "sha256"};
    for (int k = 0; k < 1 + segments && ok; k++) {
        const cJSON *x, *ra = cJSON_GetObjectItem(ia, keys[k]), *rb = cJSON_GetObjectItem(ib, keys[k]);
        ok = cJSON_GetArraySize(ra) == cJSON_GetArraySize(rb) && cJSON_GetArraySize(ra) > 0;
        cJSON_ArrayForEach(x, ra) {
            const char *ha = vx_json_str(x, field[k]);
            const char *hb = vx_json_str(cJSON_GetObjectItem(rb, x->string), field[k]);
            if (!ha || !hb || strcmp(ha, hb) != 0) {
                fprintf(stderr, "%s '%s': %s vs %s\n", keys[k], x->string, ha ? ha : "-",
                        hb ? hb : "-");
                ok = 0;
            }
            (*n)++;
        }
    }
    cJSON_Delete(ia);
    cJSON_Delete(ib);
    return ok;
}

static int encode(const char *src, const char *dst)
{
    vx_err e = {0};
    fx_rm_rf(dst);
    int rc = vx_encode(src, dst, NULL, &e);
    if (rc)
        fprintf(stderr, "encode %s: %s\n", src, e.msg);
    return rc;
}

/* Export the container vx (no overlay) through the C call, as a Hugging Face directory or
 * (gguf) a GGUF file; 0 or -1 with msg filled. */
static int export_to(const char *vx, const char *target, int gguf, char *msg, size_t n)
{
    vx_container *c = NULL;
    vx_err e = {0};
    vx_export_report rep;
    int rc = vx_open(vx, &c, &e) || (gguf ? vx_export_gguf(c, target, &rep, &e)
                                          : vx_export_hf(c, target, &rep, &e));
    snprintf(msg, n, "%s", rc ? e.msg : "");
    vx_close(c);
    return rc ? -1 : 0;
}

/* Entries of dir whose name starts with prefix. */
static int leftovers(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d)))
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

static void edited_round_trip(const char *dir)
{
    char script[2300], cmd[16384], cv[2300], hf[2300], gg[2300], re[2300];
    snprintf(script, sizeof script, "%s/export.lql", dir);
    snprintf(cv, sizeof cv, "%s/compiled.vindex3", dir);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(gg, sizeof gg, "%s/tiny.gguf", dir);
    snprintf(re, sizeof re, "%s/reencoded.vindex3", dir);
    mkdir(hf, 0755);     /* an empty directory is an acceptable target */
    FILE *f = fopen(script, "w");
    fprintf(f, "USE \"%s/base.vindex3\" JOURNAL \":memory:\";\n"
               "INSERT INTO EDGES (entity, relation, target) VALUES (\"Zorbania\", \"capital\", "
               "\"London\");\n"
               "COMPILE CURRENT INTO VINDEX \"%s\";\n"
               "COMPILE CURRENT INTO MODEL \"%s\";\n"
               "COMPILE CURRENT INTO MODEL \"%s\" FORMAT GGUF;\n", dir, cv, hf, gg);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s/lql' -bail -f '%s' 2>&1", LQL_BINARY_DIR, script);
    CHECK_MSG(fx_run(cmd, out, sizeof out) == 0, "edit + compile + export: %s", out);
    CHECK_HAS(out, "model.safetensors: 39 tensors as stored");
    CHECK_HAS(out, "then exported and removed");
    CHECK_HAS(out, "GGUF v3 for llama.cpp; 39 tensors");
    CHECK(leftovers(dir, "hf.") == 0 && leftovers(dir, "tiny.gguf.") == 0);

    int n = 0;
    CHECK(encode(hf, re) == 0);
    CHECK_MSG(same_hashes(cv, re, 1, &n), "re-encoded export differs from COMPILE INTO VINDEX");
    CHECK(n == 6);       /* 3 representations, 3 segments */
    printf("tinyllama + INSERT: export re-encodes to COMPILE INTO VINDEX's %d hashes\n", n);
    snprintf(cmd, sizeof cmd, "'%s/lql' '%s' -c 'USE \"%s\" JOURNAL \":memory:\"; INFER \"The "
             "capital of Zorbania is\" TOP 1;' 2>&1", LQL_BINARY_DIR, re, re);
    CHECK_MSG(fx_run(cmd, out, sizeof out) == 0, "infer: %s", out);
    CHECK_HAS(out, "1\t London\t");

    /* the GGUF, read independently */
    snprintf(cmd, sizeof cmd, "python3 '%s/tests/export/check_gguf.py' '%s' '%s' 2>&1",
             LQL_SOURCE_DIR, gg, hf);
    CHECK_MSG(fx_run(cmd, out, sizeof out) == 0, "check_gguf: %s", out);
    CHECK_HAS(out, "ok: GGUF v3 llama, 25 metadata keys, 39 tensors equal");
    CHECK_HAS(out, "4096 tokens, gpt2 tokenizer, 3839 merges");
    printf("%s", out);
    /* the reader can fail: one byte of the last tensor flipped */
    char bad[2400];
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && printf '\\377' | dd of='%s' bs=1 seek=$(($(stat "
             "-c %%s '%s') - 64)) conv=notrunc 2>/dev/null && python3 "
             "'%s/tests/export/check_gguf.py' '%s' '%s' 2>&1", gg, bad, bad, bad, LQL_SOURCE_DIR,
             bad, hf);
    CHECK(fx_run(cmd, out, sizeof out) != 0);
    CHECK_HAS(out, "FAIL: ");

    /* refusals of the statement */
    snprintf(cmd, sizeof cmd, "'%s/lql' -c 'USE \"%s/base.vindex3\" JOURNAL \":memory:\"; "
             "COMPILE CURRENT INTO MODEL \"%s\";' 2>&1", LQL_BINARY_DIR, dir, hf);
    CHECK(fx_run(cmd, out, sizeof out) != 0);
    CHECK_HAS(out, "already exists; lql does not overwrite it");
    snprintf(cmd, sizeof cmd, "'%s/lql' -c 'USE \"%s/base.vindex3\" JOURNAL \":memory:\"; "
             "COMPILE CURRENT INTO MODEL \"%s\" FORMAT GGUF;' 2>&1", LQL_BINARY_DIR, dir, gg);
    CHECK(fx_run(cmd, out, sizeof out) != 0);
    CHECK_HAS(out, "already exists; lql does not overwrite it");
    snprintf(cmd, sizeof cmd, "'%s/lql' -c 'USE \"%s/base.vindex3\" JOURNAL \":memory:\"; "
             "INSERT INTO EDGES (entity, relation, target) VALUES (\"Zorbania\", \"capital\", "
             "\"London\"); COMPILE CURRENT INTO MODEL \"%s/no/such/dir\";' 2>&1",
             LQL_BINARY_DIR, dir, dir);
    CHECK(fx_run(cmd, out, sizeof out) != 0);
    CHECK_HAS(out, "export: cannot write '");
    CHECK_HAS(out, "no/such/dir': its parent '");
    CHECK_HAS(out, "no/such' does not exist");
    CHECK(leftovers(dir, "no") == 0);
}

/* Every tensor of the exported checkpoint equal (dtype, shape, bytes) to the source
 * checkpoint's tensor of that name; the count in *n. */
static int same_checkpoint(const char *exported, const char *source, size_t *n)
{
    st_model *a = NULL, *b = NULL;
    vx_err e = {0};
    int ok = st_open_dir(exported, &a, &e) == 0 && st_open_dir(source, &b, &e) == 0;
    *n = 0;
    for (size_t i = 0; ok && i < st_count(a); i++) {
        const st_tensor *x = st_at(a, i), *y = st_find(b, x->name);
        ok = y && x->dtype == y->dtype && x->ndim == y->ndim && x->nbytes == y->nbytes &&
             !memcmp(x->shape, y->shape, sizeof x->shape) && !memcmp(x->data, y->data, x->nbytes);
        if (!ok)
            fprintf(stderr, "%s: '%s' differs from the source\n", exported, x->name);
        (*n)++;
    }
    st_close(a);
    st_close(b);
    return ok;
}

/* Checkpoint src (made first by the shell command make, when not NULL) encoded into dir,
 * exported as a Hugging Face directory and as a GGUF, and the GGUF read by check_gguf.py
 * against the directory; its report must hold want. The GGUF's path in gg. */
static void gguf_checked(const char *dir, const char *src, const char *make, const char *name,
                         const char *want, char *gg, size_t ng)
{
    char cmd[8192], a[2300], hf[2300], msg[1024];
    snprintf(a, sizeof a, "%s/%s.g.vindex3", dir, name);
    snprintf(hf, sizeof hf, "%s/%s.g.hf", dir, name);
    snprintf(gg, ng, "%s/%s.gguf", dir, name);
    fx_rm_rf(hf);
    unlink(gg);
    if (make) {
        fx_rm_rf(src);
        CHECK_MSG(fx_run(make, out, sizeof out) == 0, "%s: %s", name, out);
    }
    CHECK(encode(src, a) == 0);
    CHECK_MSG(export_to(a, hf, 0, msg, sizeof msg) == 0, "%s: %s", name, msg);
    CHECK_MSG(export_to(a, gg, 1, msg, sizeof msg) == 0, "%s gguf: %s", name, msg);
    snprintf(cmd, sizeof cmd, "python3 '%s/tests/export/check_gguf.py' '%s' '%s' 2>&1",
             LQL_SOURCE_DIR, gg, hf);
    CHECK_MSG(fx_run(cmd, out, sizeof out) == 0, "check_gguf %s: %s", name, out);
    CHECK_HAS(out, want);
    printf("%s: %s", name, out);
}

/* A llama with Llama 2's SentencePiece tokenizer (tools/mkfixture, 32000 tokens): the GGUF
 * carries llama.cpp's llama tokenizer (scores from the merge ranks, byte tokens). */
static void sentencepiece_gguf(const char *dir)
{
    char make[8192], src[2300], gg[2300];
    snprintf(src, sizeof src, "%s/llama-spm", dir);
    snprintf(make, sizeof make, "'%s/mkfixture' --family llama --vocab 32000 --hidden 64 "
             "--layers 2 --heads 4 --kv-heads 2 --inter 128 --tokenizer "
             "'%s/llama2/tokenizer.json' -o '%s' 2>&1", LQL_BINARY_DIR, LQL_TOKENIZER_DIR, src);
    gguf_checked(dir, src, make, "llama-spm", "32000 tokens, llama tokenizer", gg, sizeof gg);
}

static void family_round_trips(const char *dir)
{
    static const char *const fams[] = {"qwen3", "qwen2-moe", "phi3", "gpt2", "mamba2",
                                       "deepseek-v3-lite", "granite-hybrid", "gpt-oss-bf16",
                                       "gpt-oss"};
    for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
        char src[2300], a[2300], hf[2300], b[2300], msg[1024];
        snprintf(src, sizeof src, "%s/%s", FAMILIES, fams[i]);
        snprintf(a, sizeof a, "%s/%s.vindex3", dir, fams[i]);
        snprintf(hf, sizeof hf, "%s/%s.hf", dir, fams[i]);
        snprintf(b, sizeof b, "%s/%s.re.vindex3", dir, fams[i]);
        int n = 0;
        CHECK(encode(src, a) == 0);
        CHECK_MSG(export_to(a, hf, 0, msg, sizeof msg) == 0, "%s: %s", fams[i], msg);
        CHECK(encode(hf, b) == 0);
        CHECK_MSG(same_hashes(a, b, 0, &n), "%s: payload hashes differ", fams[i]);
        size_t nt = 0;
        CHECK_MSG(same_checkpoint(hf, src, &nt), "%s: export differs from its checkpoint", fams[i]);
        printf("%s: encode -> export -> encode: %d payload hashes equal; the export's %zu "
               "tensors are the checkpoint's\n", fams[i], n, nt);
    }
}

/* GGUF beyond llama: each family llama.cpp has an architecture for, exported as a
 * Hugging Face directory and as a GGUF from the same container, the GGUF read by
 * check_gguf.py against the directory (names, shapes, metadata and bytes under each
 * architecture's layout); a byte flipped inside Mixtral's stacked experts fails it. */
static void gguf_families(const char *dir)
{
    static const struct { const char *fam, *want; } f[] = {
        {"qwen2", "ok: GGUF v3 qwen2, 25 metadata keys, 39 tensors equal"},
        {"phi3", "ok: GGUF v3 phi3, 26 metadata keys, 15 tensors equal"},
        {"gpt2", "ok: GGUF v3 gpt2, 23 metadata keys, 29 tensors equal"},
        {"mixtral", "ok: GGUF v3 llama, 27 metadata keys, 23 tensors equal"},
    };
    char src[2300], make[8192], gg[2300];
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        snprintf(src, sizeof src, "%s/%s", FAMILIES, f[i].fam);
        gguf_checked(dir, src, NULL, f[i].fam, f[i].want, gg, sizeof gg);
    }
    /* Gemma 2 at a size llama.cpp knows (26 layers: query scale 1/sqrt(head_dim)), with the
     * fixture's SentencePiece tokenizer: norms written as 1 + w, windows on even layers */
    snprintf(src, sizeof src, "%s/gemma2-26", dir);
    snprintf(make, sizeof make, "'%s/mkfixture' --family gemma2 --layers 26 --hidden 64 "
             "--heads 4 --kv-heads 2 --head-dim 16 --inter 128 --vocab 512 --tokenizer "
             "'%s/gemma2/tokenizer.json' -o '%s' 2>&1", LQL_BINARY_DIR, FAMILIES, src);
    gguf_checked(dir, src, make, "gemma2-26", "ok: GGUF v3 gemma2, 29 metadata keys, 288 "
                 "tensors equal", gg, sizeof gg);
    CHECK_HAS(out, "512 tokens, llama tokenizer");
    /* OLMo 2 with multi-head attention (tests/export/mha_variant.py regrows the fixture's
     * k/v): q/k norms, post norms without pre-norms, the BOS its tokenizer's template adds */
    snprintf(src, sizeof src, "%s/olmo2-mha", dir);
    snprintf(make, sizeof make, "python3 '%s/tests/export/mha_variant.py' '%s/olmo2' '%s' 2>&1",
             LQL_SOURCE_DIR, FAMILIES, src);
    gguf_checked(dir, src, make, "olmo2-mha", "ok: GGUF v3 olmo2, 25 metadata keys, 36 tensors "
                 "equal", gg, sizeof gg);
    char cmd[16384], bad[2400];
    snprintf(bad, sizeof bad, "%s/bad-mixtral.gguf", dir);
    snprintf(cmd, sizeof cmd, "cp '%s/mixtral.gguf' '%s' && printf '\\377' | dd of='%s' "
             "bs=1 seek=$(($(stat -c %%s '%s') - 700000)) conv=notrunc 2>/dev/null && python3 "
             "'%s/tests/export/check_gguf.py' '%s' '%s/mixtral.g.hf' 2>&1", dir, bad, bad, bad,
             LQL_SOURCE_DIR, bad, dir);
    CHECK(fx_run(cmd, out, sizeof out) != 0);
    CHECK_HAS(out, "FAIL: blk.0.ffn_down_exps.weight: bytes differ from "
                   "model.layers.0.block_sparse_moe.experts.0.w2.weight");
}

static void refusals(const char *dir)
{
    char a[2300], t[2300], msg[1024];
    struct { const char *fam; int gguf; const char *want; } r[] = {
        {"gpt-oss", 1, "export gguf: family 'gpt_oss' is not written as GGUF: attention sinks, "
                       "clamped SwiGLU experts and YaRN rope"},
        {"qwen3", 1, "export gguf: family 'qwen3' is not written as GGUF: q/k head norms: "
                     "llama.cpp's qwen3 architecture is newer than the llama.cpp the writer is "
                     "checked against"},
        {"llama3-rope", 1, "export gguf: family 'llama': execution.attention.rope.scaling is "
                           "set; llama.cpp's llama architecture has no form for it"},
        {"mistral-swa", 1, "export gguf: family 'mistral': layer 0 has a sliding window of 8; "
                           "llama.cpp's llama architecture attends to the whole context"},
        {"olmo2", 1, "export gguf: family 'olmo2': 2 kv heads for 4 query heads (grouped-query "
                     "attention); llama.cpp's olmo2 architecture sizes k and its norm by the "
                     "hidden size"},
        {"gemma2", 1, "export gguf: family 'gemma2': 3 layers; llama.cpp's gemma2 architecture "
                      "sets its query scale by the model size (26, 42 or 46 layers) and aborts on "
                      "any other"},
        {"qwen2-moe", 1, "export gguf: family 'qwen2_moe' is not written as GGUF: dense layers "
                         "between MoE layers"},
        {"deepseek-v3-lite", 1, "export gguf: family 'deepseek_v3' is not written as GGUF: "
                                "multi-head latent attention"},
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        char src[2300];
        snprintf(src, sizeof src, "%s/%s", FAMILIES, r[i].fam);
        snprintf(a, sizeof a, "%s/%s.vindex3", dir, r[i].fam);
        snprintf(t, sizeof t, "%s/%s.out", dir, r[i].fam);
        CHECK(encode(src, a) == 0);
        CHECK(export_to(a, t, r[i].gguf, msg, sizeof msg) < 0);
        CHECK_HAS(msg, r[i].want);
        CHECK(leftovers(dir, strrchr(t, '/') + 1) == 0);
    }
    /* a token the tokenizer numbers past the embedding rows: GGUF has no entry for it */
    {
        char src[2300], cmd[8000], ran[4096];
        snprintf(src, sizeof src, "%s/addtok", dir);
        snprintf(cmd, sizeof cmd, "cp -r '%s/llama-gqa' '%s' && python3 -c 'import json,sys; p=sys.argv[1]; "
                 "t=json.load(open(p)); t[\"added_tokens\"].append({\"id\": 600, \"content\": \"<|x|>\", "
                 "\"single_word\": False, \"lstrip\": False, \"rstrip\": False, \"normalized\": False, "
                 "\"special\": True}); json.dump(t, open(p, \"w\"))' '%s/tokenizer.json' 2>&1",
                 FAMILIES, src, src);
        CHECK(fx_run(cmd, ran, sizeof ran) == 0);
        snprintf(a, sizeof a, "%s/addtok.vindex3", dir);
        snprintf(t, sizeof t, "%s/addtok.gguf", dir);
        CHECK(encode(src, a) == 0);
        CHECK(export_to(a, t, 1, msg, sizeof msg) < 0);
        CHECK_HAS(msg, "export gguf: tokenizer.json gives '<|x|>' the id 600, past the model's 512 "
                  "embedding rows");
        CHECK(leftovers(dir, "addtok.gguf") == 0);
    }
    /* encoder.source_shapes that lie about phi3's fused qkv (stored as row slices): a
     * shape whose element count wraps 64 bits to the operands' count, and the shape with
     * its dims swapped (same count) */
    {
        static const struct { const char *shape, *want; } lies[] = {
            {"[2251799813685249, 8192]", "export: encoder.source_shapes['model.layers.0."
             "self_attn.qkv_proj.weight'] has more elements than 64 bits count"},
            {"[64, 128]", "export: the row slices of 'model.layers.0.self_attn.qkv_proj.weight' "
             "cover 128 rows; encoder.source_shapes gives it 64"},
        };
        for (int i = 0; i < 2; i++) {
            char cmd[8000], ran[4096];
            snprintf(a, sizeof a, "%s/phi3-lie.vindex3", dir);
            snprintf(t, sizeof t, "%s/phi3-lie.hf", dir);
            fx_rm_rf(a);
            snprintf(cmd, sizeof cmd, "cp -r '%s/phi3.vindex3' '%s' && python3 -c 'import json,sys; "
                     "p=sys.argv[1]; x=json.load(open(p)); x[\"encoder\"][\"source_shapes\"]"
                     "[\"model.layers.0.self_attn.qkv_proj.weight\"]=%s; json.dump(x, open(p, "
                     "\"w\"))' '%s/index.json' 2>&1", dir, a, lies[i].shape, a);
            CHECK(fx_run(cmd, ran, sizeof ran) == 0);
            CHECK(export_to(a, t, 0, msg, sizeof msg) < 0);
            CHECK_HAS(msg, lies[i].want);
            CHECK(leftovers(dir, "phi3-lie.hf") == 0);
        }
        fx_rm_rf(a);
    }
    /* a bank-shape container (qwen2-moe imported as LYRW banks) */
    char bank[2300];
    vx_err be = {0};
    snprintf(a, sizeof a, "%s/qwen2-moe.vindex3", dir);
    snprintf(bank, sizeof bank, "%s/qwen2-moe.bank", dir);
    snprintf(t, sizeof t, "%s/bank.hf", dir);
    fx_rm_rf(bank);
    CHECK_MSG(vx_bank_import(a, bank, 0, NULL, &be) == 0, "%s", be.msg);
    CHECK(export_to(bank, t, 0, msg, sizeof msg) < 0);
    CHECK_HAS(msg, "is bank-shape: its experts live in LYRW bank files with no checkpoint "
                   "layout; export the graph-shape container it was imported from");
    /* a q8_0 profile: export writes tensors as stored and does not dequantise */
    snprintf(a, sizeof a, "%s/base.vindex3", dir);
    vx_err e = {0};
    vx_represent_info in;
    CHECK_MSG(vx_represent(a, "target.decoder_stack", VX_Q8_0, &in, &e) == 0, "%s", e.msg);
    vx_select sel = {"target.decoder_stack", in.id};
    CHECK_MSG(vx_profile_add(a, "q8", &sel, 1, 0, &e) == 0, "%s", e.msg);
    vx_container *c = NULL;
    vx_export_report rep;
    snprintf(t, sizeof t, "%s/q8.hf", dir);
    CHECK_MSG(vx_open_profile(a, "q8", NULL, 0, &c, &e) == 0, "%s", e.msg);
    CHECK(c && vx_export_hf(c, t, &rep, &e) < 0);
    CHECK_HAS(e.msg, "is stored as q8_0 (profile 'q8'); export writes tensors as stored and "
                     "does not dequantise");
    vx_close(c);
    /* the statement refuses it the same way with an edit, before the staging compile: an
     * edited export used to be written from the f32 representation the gate never probed;
     * likewise GGUF of a family with no form, which ran the whole compile first */
    for (int i = 0; i < 3; i++) {
        char cmd[8192], q3[2300];
        snprintf(q3, sizeof q3, "%s/qwen3.vindex3", dir);
        snprintf(t, sizeof t, "%s/%s", dir, i < 2 ? "q8.hf" : "q3.gguf");
        snprintf(cmd, sizeof cmd, "'%s/lql' -c 'USE \"%s\" %sJOURNAL \":memory:\"; %s"
                 "COMPILE CURRENT INTO MODEL \"%s\"%s;' 2>&1", LQL_BINARY_DIR, i < 2 ? a : q3,
                 i < 2 ? "PROFILE \"q8\" " : "", i ? "DELETE FROM EDGES WHERE layer = 0 AND "
                 "feature = 1; " : "", t, i < 2 ? "" : " FORMAT GGUF");
        CHECK(fx_run(cmd, out, sizeof out) != 0);
        if (i)
            CHECK_HAS(out, "deleted 1 feature (history 1");
        CHECK_HAS(out, "error: <command>:1:");
        CHECK_HAS(out, i < 2 ? ": export: tensor 'layers.0.attn.q_proj' (target.decoder_stack) is "
                  "stored as q8_0 (profile 'q8'); export writes tensors as stored and does not "
                  "dequantise (the result would not re-encode to this container): bind its "
                  "f32/f16/bf16 representation\n" : ": export gguf: family 'qwen3' is not "
                  "written as GGUF: q/k head norms");
        CHECK_MSG(strstr(out, "compiled vs overlay") == NULL, "%s", out);
        CHECK(leftovers(dir, i < 2 ? "q8.hf" : "q3.gguf") == 0);
    }
    /* MXFP4 experts re-represented as f32 (as an edit would leave them): no longer the
     * checkpoint's blocks and scales, and not re-packed */
    snprintf(a, sizeof a, "%s/gpt-oss.vindex3", dir);
    snprintf(t, sizeof t, "%s/oss-f32.hf", dir);
    CHECK_MSG(vx_represent(a, "target.decoder_stack", VX_F32, &in, &e) == 0, "%s", e.msg);
    sel.representation = in.id;
    CHECK_MSG(vx_profile_add(a, "f32", &sel, 1, 0, &e) == 0, "%s", e.msg);
    c = NULL;
    CHECK_MSG(vx_open_profile(a, "f32", NULL, 0, &c, &e) == 0, "%s", e.msg);
    CHECK(c && vx_export_hf(c, t, &rep, &e) < 0);
    CHECK_HAS(e.msg, "export: operand 'layers.0.ffn.experts.0.gate_proj' is bound to the MXFP4 "
                     "blocks of 'model.layers.0.mlp.experts.gate_up_proj_blocks' but stored as "
                     "f32 (edited or re-represented); export writes MXFP4 experts back only as "
                     "stored and does not re-pack blocks and scales");
    CHECK(leftovers(dir, "oss-f32") == 0);
    vx_close(c);
}

/* Disk full midway: a child limits its file size to 1 MB (SIGXFSZ ignored, so write()
 * fails with EFBIG) and exports the 20 MB tinyllama, once as a directory and once as a
 * GGUF; both must fail naming the file and the cause, leaving neither the target nor a
 * temporary sibling. */
static void disk_full(const char *dir)
{
    for (int gguf = 0; gguf < 2; gguf++) {
        char base[2300], target[2300], msg[1024] = "";
        snprintf(base, sizeof base, "%s/base.vindex3", dir);
        snprintf(target, sizeof target, "%s/full.%s", dir, gguf ? "gguf" : "hf");
        int fds[2];
        if (pipe(fds) != 0)
            return;
        pid_t pid = fork();
        if (pid == 0) {
            struct rlimit rl = {1 << 20, 1 << 20};
            signal(SIGXFSZ, SIG_IGN);
            setrlimit(RLIMIT_FSIZE, &rl);
            char m[1024];
            int rc = export_to(base, target, gguf, m, sizeof m);
            dprintf(fds[1], "%d|%s", rc, m);
            _exit(0);
        }
        close(fds[1]);
        ssize_t k = read(fds[0], msg, sizeof msg - 1);
        msg[k > 0 ? k : 0] = '\0';
        close(fds[0]);
        waitpid(pid, NULL, 0);
        CHECK_HAS(msg, "-1|export");
        CHECK_HAS(msg, "File too large");
        CHECK(access(target, F_OK) != 0 && leftovers(dir, gguf ? "full.gguf" : "full.hf") == 0);
        printf("disk full (%s): %s\n", gguf ? "gguf" : "safetensors", msg + 3);
    }
    /* COMPILE INTO MODEL with an edit stages a compiled container beside the target first:
     * the error says so rather than naming only a path the user never wrote */
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "ulimit -f 2048; trap '' XFSZ; '%s/lql' -c 'USE \"%s/base.vindex3\" "
             "JOURNAL \":memory:\"; INSERT INTO EDGES (entity, relation, target) VALUES "
             "(\"Zorbania\", \"capital\", \"London\"); COMPILE CURRENT INTO MODEL "
             "\"%s/fullc.hf\";' 2>&1", LQL_BINARY_DIR, dir, dir);
    CHECK(fx_run(cmd, out, sizeof out) != 0);
    CHECK_HAS(out, "compiling the overlay into a staging container before the export: ");
    CHECK_HAS(out, "File too large");
    CHECK(leftovers(dir, "fullc.hf") == 0);
}

int main(void)
{
    char dir[2048], base[2100];
    if (fx_tiny_dir("export-test", dir, base))
        return 1;
    edited_round_trip(dir);
    sentencepiece_gguf(dir);
    family_round_trips(dir);
    gguf_families(dir);
    refusals(dir);
    disk_full(dir);
    return T_DONE();
}
