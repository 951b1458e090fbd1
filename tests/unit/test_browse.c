/*
 * test_browse.c — browse on the real tiny model: encode tests/fixtures/models/tinyllama
 * with the down-meta hook into the build tree, then check
 *   - index.browse (bands, top_k) and one feature's down-meta against a direct float64
 *     E · down[:, f] over the whole vocabulary;
 *   - WALK's query token and per-layer hits against a float64 ranking of gate·q;
 *   - TRACE: lens top-1 per layer equals golden.json's lens_top1 and the residual norms
 *     equal hidden_norms (1e-3 relative) for every golden prompt; FOR pushes telescope;
 *     SAVE then FROM reproduces the rows;
 *   - DESCRIBE / SELECT / SHOW values and their bad inputs with pinned texts.
 */
#include "brw_int.h"
#include "t.h"
#include "t_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TINY LQL_FIXTURE_DIR "/models/tinyllama"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double elem(const vx_tensor *t, size_t i)
{
    if (t->dtype == VX_F32)
        return ((const float *)t->data)[i];
    if (t->dtype == VX_F16)
        return vx_f16_to_f32(((const uint16_t *)t->data)[i]);
    return vx_bf16_to_f32(((const uint16_t *)t->data)[i]);
}

static void check_down_meta(const brw_model *m, int layer, int64_t f)
{
    const vx_tensor *E = m->s.embed, *D = m->s.layer[layer].parts[0].down;
    int V = m->s.vocab, H = m->s.hidden;
    int64_t I = D->shape[1];
    double *lg = malloc((size_t)V * sizeof *lg);
    for (int v = 0; v < V; v++) {
        double s = 0;
        for (int h = 0; h < H; h++)
            s += elem(E, (size_t)v * H + h) * elem(D, (size_t)h * (size_t)I + (size_t)f);
        lg[v] = s;
    }
    brw_meta md;
    CHECK(brw_dmet_get(m->dmet, layer, f, &md) == 0 && md.present && md.k == 10);
    int ok = 1;
    for (int j = 0; j < 10; j++) {
        int best = -1;
        for (int v = 0; v < V; v++) {
            int used = 0;
            for (int u = 0; u < j && !used; u++)
                used = md.ids[u] == v;
            if (!used && (best < 0 || lg[v] > lg[best]))
                best = v;
        }
        ok &= md.ids[j] == best;
        CHECK_NEAR(md.logits[j], lg[md.ids[j]], 1e-4 * (1 + fabs(lg[md.ids[j]])));
    }
    CHECK_MSG(ok, "down-meta top-10 of L%d F%lld differs from float64", layer, (long long)f);
    CHECK(md.top_id == md.ids[0]);
    CHECK_NEAR(md.c_score, md.logits[0], 0);
    free(lg);
}

/* What the encode's progress heard: the encoder's bytes, then down-meta's features. */
static struct {
    int calls[2], bad;
    uint64_t last[2], total[2];
} prog;

static void record_progress(void *ctx, const char *stage, uint64_t done, uint64_t total)
{
    (void)ctx;
    int k = strcmp(stage, "down-meta") == 0;
    if (!k && strcmp(stage, "encode") != 0) prog.bad++;
    if (k && prog.calls[0] && prog.last[0] != prog.total[0]) prog.bad++;   /* encode first, whole */
    if (!k && prog.calls[1]) prog.bad++;
    if (done > total || (prog.calls[k] && (done < prog.last[k] || total != prog.total[k]))) prog.bad++;
    prog.calls[k]++;
    prog.last[k] = done;
    prog.total[k] = total;
}

/* SELECT's text matching: LIKE by characters with an escape, case folded beyond ASCII, and
 * linear on patterns that made the old recursive matcher exponential. */
static void like_and_fold(void)
{
    CHECK(brw_like("Café", "caf_") && brw_like("café", "CAF%") && !brw_like("Café", "caf__"));
    CHECK(brw_fold_cmp("ÉTAT", "état") == 0 && brw_fold_cmp("Paris", "paris") == 0);
    CHECK(brw_fold_cmp("a", "b") < 0 && brw_fold_cmp("ab", "a") > 0 && brw_fold_cmp("", "") == 0);
    CHECK(brw_like("50%", "50\\%") && !brw_like("500", "50\\%") && brw_like("a_b", "%\\_%"));
    CHECK(!brw_like("ab", "%\\_%") && brw_like("x\\", "x\\") && brw_like("", "%%"));
    CHECK(!brw_like("", "_") && brw_like("Paris", "%a%i%") && !brw_like("Paris", "%i%a%"));
    CHECK(brw_like("\xff\xfe", "__") && !brw_like("\xff", "\xfe"));
    char text[4001];
    memset(text, 'a', 4000);
    text[4000] = 0;
    /* 30 runs of % over 4000 characters: C(4000, 30) paths for a backtracking matcher */
    CHECK(!brw_like(text, "%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%b"));
    CHECK(brw_like(text, "%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a"));
}

int main(void)
{
    like_and_fold();
    char out[4096], plain[4096];
    snprintf(out, sizeof out, "%s/h7-browse-tiny.vindex3", LQL_BINARY_DIR);
    snprintf(plain, sizeof plain, "%s/h7-browse-tiny-plain.vindex3", LQL_BINARY_DIR);
    t_rm_rf(out);
    t_rm_rf(plain);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    vx_err err = {0};
    double t0 = now();
    CHECK(vx_encode(TINY, plain, &o, &err) == 0);
    double t_plain = now() - t0;
    o.finish = brw_encode_finish;
    o.finish_ctx = &o;
    o.progress = record_progress;
    t0 = now();
    int enc = vx_encode(TINY, out, &o, &err);
    double t_browse = now() - t0;
    CHECK_MSG(enc == 0, "encode: %s", err.msg);
    /* down-meta reports its own stage after the bytes, up to every feature of every layer */
    CHECK(prog.bad == 0 && prog.calls[0] > 0 && prog.calls[1] > 1);
    CHECK(prog.total[1] == 4 * 768 && prog.last[1] == prog.total[1]);
    if (enc != 0)
        return T_DONE();
    printf("encode tinyllama: %.3f s without down-meta, %.3f s with\n", t_plain, t_browse);

    vx_container *c = NULL;
    brw_model *m = NULL;
    CHECK(vx_open(out, &c, &err) == 0);
    CHECK_MSG(c && brw_open(c, &m, &err) == 0, "brw_open: %s", err.msg);
    if (!m)
        return T_DONE();
    const cJSON *br = cJSON_GetObjectItem(vx_index_json(c), "browse");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(br, "down_meta")), "browse/down_meta.bin");
    CHECK(cJSON_GetObjectItem(br, "down_top_k")->valueint == 10);
    CHECK(cJSON_IsString(cJSON_GetObjectItem(br, "band_rule")));
    int band[3][2];
    brw_bands(m, band);
    CHECK(band[0][0] == 0 && band[0][1] == 0 && band[1][0] == 1 && band[1][1] == 2 &&
          band[2][0] == 3 && band[2][1] == 3);
    CHECK(brw_layers(m) == 4 && brw_features(m, 0) == 768 && brw_hidden(m) == 256);
    CHECK(m->dmet && brw_dmet_layers(m->dmet) == 4 && brw_dmet_count(m->dmet, 3) == 768);

    check_down_meta(m, 2, 100);
    check_down_meta(m, 0, 767);
    /* byte-level "Ā" (id 1) decodes to a NUL the C string would hide as "": its piece
     * shows instead, as for a lone byte that decodes to U+FFFD */
    CHECK_STR(brw_token_text(m, 1), "\xC4\x80");
    CHECK_STR(brw_token_text(m, 2), "\x01");

    /* WALK: query = embedding of the last token of "The capital of France is" (id 265) */
    brw_walk w;
    brw_walk_opts wo = {.top = 5, .layer_lo = -1, .layer_hi = -1};
    CHECK(brw_walk_run(m, "The capital of France is", &wo, &w, &err) == 0);
    CHECK(w.token == 265 && w.n_layers == 4);
    {
        float q[256];
        brw_embed_row(&m->s, 265, q, &err);
        for (int l = 0; l < 4; l++) {
            const vx_tensor *G = m->s.layer[l].parts[0].gate;
            double best[5] = {0};
            int64_t bi[5] = {-1, -1, -1, -1, -1};
            for (int64_t f = 0; f < 768; f++) {
                double s = 0;
                for (int h = 0; h < 256; h++)
                    s += elem(G, (size_t)f * 256 + h) * q[h] * m->s.embed_scale;
                for (int j = 0; j < 5; j++)
                    if (bi[j] < 0 || fabs(s) > fabs(best[j])) {
                        for (int k = 4; k > j; k--) {
                            best[k] = best[k - 1];
                            bi[k] = bi[k - 1];
                        }
                        best[j] = s;
                        bi[j] = f;
                        break;
                    }
            }
            int ok = w.counts[l] == 5;
            for (int j = 0; j < 5; j++)
                ok &= w.hits[l * 5 + j].feature == bi[j] &&
                      fabs(w.hits[l * 5 + j].score - best[j]) < 1e-4;
            CHECK_MSG(ok, "walk layer %d differs from float64", l);
        }
    }
    brw_walk_free(&w);
    wo.layer_lo = 2;
    wo.layer_hi = 7;
    CHECK(brw_walk_run(m, "x", &wo, &w, &err) == -1);
    CHECK_STR(err.msg, "layer range 2-7 is out of range (the model has 4 layers: 0-3)");

    /* DESCRIBE / SELECT errors */
    brw_describe d;
    CHECK(brw_describe_run(m, "  ", NULL, &d, &err) == -1);
    CHECK_STR(err.msg, "DESCRIBE needs a non-empty entity");
    brw_describe_opts dop = {.band = -1, .at_layer = 9};
    CHECK(brw_describe_run(m, "France", &dop, &d, &err) == -1);
    CHECK_STR(err.msg, "layer 9 is out of range (the model has 4 layers: 0-3)");
    dop.at_layer = -1;
    CHECK(brw_describe_run(m, "France", &dop, &d, &err) == 0);
    brw_describe_free(&d);
    brw_field fld;
    CHECK(brw_field_parse(BRW_FEATURES, "colour", &fld, &err) == -1);
    CHECK_STR(err.msg, "unknown field \"colour\" for FEATURES (fields: layer, feature, token, "
                       "relation, score, also, band)");
    /* ENTITIES: layer and feature are conditions (the features counted), never columns */
    CHECK(brw_field_parse(BRW_ENTITIES, "layer", &fld, &err) == -1);
    CHECK_STR(err.msg, "unknown field \"layer\" for ENTITIES (fields: entity, count, score)");
    CHECK(brw_cond_field_parse(BRW_ENTITIES, "feature", &fld, &err) == 0 &&
          fld == BRW_F_FEATURE);

    /* SELECT FROM FEATURES WHERE layer = 3 AND feature < 4: exactly features 0-3 of L3 */
    brw_value v3 = {0, 3, NULL}, v4 = {0, 4, NULL};
    brw_cond cs[2] = {{BRW_F_LAYER, BRW_EQ, &v3, 1}, {BRW_F_FEATURE, BRW_LT, &v4, 1}};
    brw_select_opts so = {.conds = cs, .n_conds = 2, .limit = -1};
    brw_rows rows;
    CHECK(brw_select(m, BRW_FEATURES, &so, &rows, &err) == 0);
    CHECK(rows.n == 4);
    for (size_t i = 0; i < rows.n; i++) {
        brw_meta md;
        brw_dmet_get(m->dmet, 3, (int64_t)i, &md);
        CHECK(rows.rows[i].layer == 3 && rows.rows[i].feature == (int64_t)i);
        CHECK_NEAR(rows.rows[i].score, md.c_score, 0);
    }
    brw_rows_free(&rows);
    brw_value sv = {1, 0, "x"};
    brw_cond bad = {BRW_F_LAYER, BRW_EQ, &sv, 1};
    so.conds = &bad;
    so.n_conds = 1;
    CHECK(brw_select(m, BRW_FEATURES, &so, &rows, &err) == -1);
    CHECK_STR(err.msg, "layer = compares numbers, got \"x\"");

    /* SHOW LAYERS' browse part and STATS: counts, bands, bytes, the most frequent top
     * token of a layer (recounted here from the DMET) */
    {
        brw_layer_info *li = NULL;
        size_t nl = 0;
        CHECK(brw_show_layers(m, 1, 2, NULL, &li, &nl, &err) == 0 && nl == 2);
        int32_t *cnt = calloc(4096, sizeof *cnt);
        int32_t best = -1, bestc = 0;
        for (int64_t f = 0; f < 768; f++) {
            brw_meta md;
            brw_dmet_get(m->dmet, 2, f, &md);
            if (md.present && ++cnt[md.top_id] > bestc) {
                bestc = cnt[md.top_id];
                best = md.top_id;
            } else if (md.present && cnt[md.top_id] == bestc && md.top_id < best) {
                best = md.top_id;
            }
        }
        CHECK(li && li[1].layer == 2 && li[1].features == 768 && li[1].with_meta == 768);
        CHECK(li && li[1].top_id == best && li[1].top_count == bestc);
        CHECK(li && li[0].band == BRW_KNOWLEDGE && li[1].gate_bytes == 768 * 256 * 4);
        CHECK_STR(li ? li[0].gate_dtype : NULL, "f32");
        free(cnt);
        free(li);
        CHECK(brw_show_layers(m, 2, 9, NULL, &li, &nl, &err) == -1);
        CHECK_STR(err.msg, "layer range 2-9 is out of range (the model has 4 layers: 0-3)");
        brw_stats st;
        CHECK(brw_stats_get(m, &st, &err) == 0);
        CHECK(st.layers == 4 && st.hidden == 256 && st.vocab == 4096 && st.features == 3072);
        CHECK(st.with_meta == 3072 && st.band_features[0] == 768 &&
              st.band_features[1] == 1536 && st.band_features[2] == 768);
        CHECK(st.gate_bytes == 4ull * 768 * 256 * 4 && st.labelled == 0);
        CHECK(st.container_bytes > st.gate_bytes);
    }

    /* TRACE against golden.json */
    eng_model *em = NULL;
    CHECK_MSG(eng_model_bind(c, &em, &err) == 0, "bind: %s", err.msg);
    cJSON *g = t_load_json(TINY "/golden.json");
    CHECK(g != NULL);
    const cJSON *prompts = cJSON_GetObjectItem(g, "prompts"), *p;
    int n_prompts = 0;
    cJSON_ArrayForEach(p, prompts)
    {
        if (!em)
            break;
        n_prompts++;
        const char *text = cJSON_GetObjectItem(p, "text")->valuestring;
        brw_trace t;
        brw_trace_opts to = {.for_token = NULL, .layer_lo = -1, .layer_hi = -1};
        CHECK_MSG(brw_trace_run(em, text, &to, &t, &err) == 0, "trace: %s", err.msg);
        const cJSON *lt = cJSON_GetObjectItem(p, "lens_top1");
        const cJSON *hn = cJSON_GetObjectItem(p, "hidden_norms");
        CHECK(t.n_rows == 5);
        for (size_t i = 0; i < t.n_rows && i < 5; i++) {
            CHECK_MSG(t.rows[i].top_id == cJSON_GetArrayItem(lt, (int)i)->valueint,
                      "\"%s\" lens row %zu: %d", text, i, t.rows[i].top_id);
            double want = cJSON_GetArrayItem(hn, (int)i)->valuedouble;
            CHECK_NEAR(t.rows[i].resid_norm, want, 1e-3 * want);
        }
        brw_trace_free(&t);
    }
    CHECK(n_prompts == 5);

    if (em) {
        /* FOR " Par": rank 1 at the last layer; pushes telescope to the logit change */
        brw_trace t;
        brw_trace_opts to = {.for_token = "Par", .layer_lo = -1, .layer_hi = -1, .keep_all = 1};
        CHECK(brw_trace_run(em, "The capital of France is", &to, &t, &err) == 0);
        CHECK(t.target == 1680);
        CHECK(t.rows[4].rank == 1);
        CHECK_NEAR(t.rows[4].prob, 0.9604446476430529, 1e-4);
        float *lg0 = malloc(4096 * sizeof *lg0), *lg4 = malloc(4096 * sizeof *lg4);
        size_t H = 256, last = (size_t)t.n_tokens - 1;
        eng_lens(em, t.states + (last * 5 + 0) * 3 * H, lg0);
        eng_lens(em, t.states + (last * 5 + 4) * 3 * H, lg4);
        double sum = 0;
        for (int i = 1; i < 5; i++)
            sum += t.rows[i].attn_push + t.rows[i].ffn_push;
        CHECK_NEAR(sum, lg4[1680] - lg0[1680], 1e-3 * (1 + fabs(lg4[1680] - lg0[1680])));
        free(lg0);
        free(lg4);
        char path[4200];
        snprintf(path, sizeof path, "%s/h7-trace.bin", LQL_BINARY_DIR);
        remove(path);   /* a trace file is created exclusively (left by an earlier run) */
        CHECK(brw_trace_save(&t, path, &err) == 0);
        CHECK(brw_trace_save(&t, path, &err) == -1);
        CHECK_HAS(err.msg, "File exists");
        brw_trace t2;
        CHECK(brw_trace_load(em, path, &to, &t2, &err) == 0);
        CHECK(t2.n_rows == t.n_rows && t2.target == 1680);
        int same = 1;
        for (size_t i = 0; i < t.n_rows && i < t2.n_rows; i++)
            same &= t.rows[i].top_id == t2.rows[i].top_id &&
                    t.rows[i].prob == t2.rows[i].prob && t.rows[i].rank == t2.rows[i].rank;
        CHECK(same);
        brw_trace_free(&t2);
        FILE *f = fopen(path, "r+b");
        if (f) {
            fseek(f, 16, SEEK_SET);
            fputc(9, f);   /* n_layers 4 -> 9 */
            fclose(f);
        }
        CHECK(brw_trace_load(em, path, &to, &t2, &err) == -1);
        CHECK_HAS(err.msg, "does not match the bound model (4 layers, hidden 256)");
        /* a truncated file (header intact) is refused by its size */
        f = fopen(path, "r+b");
        if (f) {
            fseek(f, 16, SEEK_SET);
            fputc(4, f);
            fclose(f);
        }
        if (truncate(path, 32 + 24 + 100) != 0)
            fprintf(stderr, "truncate failed\n");
        CHECK(brw_trace_load(em, path, &to, &t2, &err) == -1);
        CHECK_HAS(err.msg, "is 156 bytes, want 92216");
        brw_trace_free(&t);
        /* without keep_all only the last position is recorded, and SAVE refuses */
        to.keep_all = 0;
        CHECK(brw_trace_run(em, "The capital of France is", &to, &t, &err) == 0);
        CHECK(t.first_pos == 5 && t.n_rows == 5 && t.rows[4].top_id == 1680);
        CHECK(brw_trace_save(&t, path, &err) == -1);
        CHECK_STR(err.msg, "trace: only the last position was recorded; SAVE needs every "
                           "position (keep_all)");
        brw_trace_free(&t);
        to.layer_lo = 1;
        to.layer_hi = 2;
        to.all_positions = 1;
        CHECK(brw_trace_run(em, "The capital of France is", &to, &t, &err) == 0);
        CHECK(t.n_rows == 12 && t.rows[0].pos == 0 && t.rows[0].layer == 1 &&
              t.rows[11].pos == 5 && t.rows[11].layer == 2);
        brw_trace_free(&t);
        /* FOR "" would track the bare space token of encode(" "): refused, nothing kept */
        to.for_token = "";
        CHECK(brw_trace_run(em, "x", &to, &t, &err) == -1);
        CHECK_STR(err.msg, "FOR needs a non-empty token");

        /* EXPLAIN INFER: the features that fired carry down-meta; attention sums to 1 */
        int32_t ids[6] = {0, 283, 308, 269, 3993, 265};
        brw_explain x;
        brw_explain_opts xo = {.top = 3, .attention = 1, .layer_lo = -1, .layer_hi = -1,
                               .band = -1};
        CHECK(brw_explain_run(em, m, ids, 6, &xo, &x, &err) == 0);
        CHECK(x.n_layers == 4 && x.top_ids[0] == 1680);
        CHECK(x.layers[3].lens_id == 1680);
        for (int l = 0; l < 4; l++) {
            CHECK(x.layers[l].n_fired == 3 && x.layers[l].fired[0].top_id >= 0);
            CHECK(x.layers[l].attended_pos >= 0 && x.layers[l].attended_weight > 0 &&
                  x.layers[l].attended_weight <= 1.0001f);
        }
        brw_explain_free(&x);
        eng_model_free(em);
    }
    cJSON_Delete(g);

    /* the AVX2 kernels (LQL_NO_AVX512, read per product) write the same down-meta as the
     * default path, AMX or AVX-512 */
    setenv("LQL_NO_AMX", "1", 1);
    setenv("LQL_NO_AVX512", "1", 1);
    t_rm_rf(plain);
    o.finish_ctx = &o;
    CHECK(vx_encode(TINY, plain, &o, &err) == 0);
    unsetenv("LQL_NO_AMX");
    unsetenv("LQL_NO_AVX512");
    {
        char pa[4200], pb[4200];
        snprintf(pa, sizeof pa, "%s/browse/down_meta.bin", out);
        snprintf(pb, sizeof pb, "%s/browse/down_meta.bin", plain);
        brw_dmet *da = NULL, *db = NULL;
        CHECK(brw_dmet_load(pa, &da, &err) == 0 && brw_dmet_load(pb, &db, &err) == 0);
        int differ = 0, total = 0;
        for (int l = 0; da && db && l < 4; l++)
            for (int64_t f = 0; f < 768; f++) {
                brw_meta x, y;
                brw_dmet_get(da, l, f, &x);
                brw_dmet_get(db, l, f, &y);
                total++;
                /* the same ids; logits equal up to the summation order of the rescoring
                 * dot, which also follows LQL_NO_AVX512 (AVX2 vs AVX-512 lanes) */
                int off = memcmp(x.ids, y.ids, sizeof x.ids) != 0;
                for (int i = 0; i < x.k && !off; i++)
                    off = fabs((double)x.logits[i] - y.logits[i]) > 1e-5 * (1 + fabs(x.logits[i]));
                differ += off;
            }
        CHECK_MSG(differ == 0, "%d of %d records differ between the two passes", differ, total);
        brw_dmet_free(da);
        brw_dmet_free(db);
    }
    /* labels: a probe label wins over a cluster; clusters come from two files */
    {
        char path[4300];
        const char *files[3][2] = {
            /* both spellings; "L…_F…" wins over "l:f" and the first of equal keys wins;
             * a non-canonical key, one out of range and a non-string value are no labels */
            {"feature_labels.json", "{\"L2_F100\": \"capital\", \"3:7\": \"river\", "
                                    "\"1:9\": \"lost\", \"L1_F9\": \"won\", \"L1_F9\": \"again\", "
                                    "\"L01_F8\": \"padded\", \"1: 8\": \"spaced\", "
                                    "\"L1_F99999\": \"far\", \"L1_F7\": 3, \"1:7\": \"text\"}"},
            {"relation_clusters.json", "{\"k\": 2, \"labels\": [\"located in\", \"born in\"]}"},
            {"feature_clusters.jsonl", "{\"l\": 3, \"f\": 5, \"c\": 1}\n{\"l\": 2, \"f\": 100, "
                                       "\"c\": 0}\n{\"l\": 9, \"f\": 1, \"c\": 0}\nnot json\n"}};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", out, files[i][0]);
            FILE *f = fopen(path, "w");
            if (f) {
                fputs(files[i][1], f);
                fclose(f);
            }
        }
        brw_model *lm = NULL;
        CHECK(brw_open(c, &lm, &err) == 0);
        if (lm) {
            CHECK_STR(brw_label(lm, NULL, 2, 100), "capital");
            CHECK_STR(brw_label(lm, NULL, 3, 7), "river");
            CHECK_STR(brw_label(lm, NULL, 3, 5), "born in");
            CHECK(brw_label(lm, NULL, 3, 6) == NULL && brw_label(lm, NULL, 9, 1) == NULL);
            CHECK_STR(brw_label(lm, NULL, 1, 9), "won");
            CHECK(brw_label(lm, NULL, 1, 8) == NULL);
            CHECK_STR(brw_label(lm, NULL, 1, 7), "text");
            brw_rows rr;
            int labelled = 0;
            float cut;
            CHECK(brw_show_relations(lm, 3, -1, NULL, &rr, &labelled, &cut, &err) == 0 && labelled);
            CHECK(rr.n == 2);
            brw_rows_free(&rr);
            brw_describe dd;
            brw_describe_opts rop = {.band = -1, .at_layer = -1, .relations_only = 1,
                                     .mode = BRW_DESCRIBE_VERBOSE};
            CHECK(brw_describe_run(lm, "France", &rop, &dd, &err) == 0);
            int all_labelled = 1;
            for (size_t i = 0; i < dd.n_edges; i++)
                all_labelled &= dd.edges[i].relation != NULL;
            CHECK(all_labelled);
            brw_describe_free(&dd);
            brw_close(lm);
        }
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", out, files[i][0]);
            unlink(path);
        }
    }
    /* a down_meta changed after encode is refused at open by its recorded sha256 (the
     * records' own structure checks are test_browse_dmet's, on files with no hash) */
    {
        char path[4300];
        snprintf(path, sizeof path, "%s/browse/down_meta.bin", out);
        uint8_t img[16 + 4 * 4] = {0};
        uint32_t hdr[4] = {BRW_DMET_MAGIC, 1, 3, 10};
        memcpy(img, hdr, sizeof hdr);
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite(img, 1, 16 + 12, f);
            fclose(f);
        }
        brw_model *bm2 = NULL;
        CHECK(brw_open(c, &bm2, &err) == -1 && bm2 == NULL);
        CHECK_STR(err.msg, "'browse/down_meta.bin' is corrupted: its sha256 does not match the one index.json "
                  "records (vindex verify DIR checks every byte)");
        hdr[2] = 4;
        memcpy(img, hdr, sizeof hdr);
        f = fopen(path, "wb");
        if (f) {
            fwrite(img, 1, sizeof img, f);
            fclose(f);
        }
        CHECK(brw_open(c, &bm2, &err) == -1);
        CHECK_STR(err.msg, "'browse/down_meta.bin' is corrupted: its sha256 does not match the one index.json "
                  "records (vindex verify DIR checks every byte)");
        f = fopen(path, "wb");
        if (f) {
            fwrite(img, 1, 10, f);
            fclose(f);
        }
        CHECK(brw_open(c, &bm2, &err) == -1);
        CHECK_STR(err.msg, "'browse/down_meta.bin' is corrupted: its sha256 does not match the one index.json "
                  "records (vindex verify DIR checks every byte)");
        cJSON *rep = NULL;
        CHECK(vx_verify(out, NULL, &rep, &err) == -1 && err.code == VX_EVERIFY);
        CHECK_HAS(err.msg, "'browse/down_meta.bin': encoded != recorded (sha256 ");
        cJSON_Delete(rep);
    }
    /* a band override reaches the hook through index.encoder.layer_band even when the
     * caller passes no ctx (as EXTRACT does) */
    {
        t_rm_rf(plain);
        vx_encode_opts ob;
        vx_encode_opts_init(&ob);
        ob.layer_lo = 1;
        ob.layer_hi = 1;
        ob.finish = brw_encode_finish;
        CHECK(vx_encode(TINY, plain, &ob, &err) == 0);
        vx_container *cb = NULL;
        brw_model *mb = NULL;
        if (vx_open(plain, &cb, &err) == 0 && brw_open(cb, &mb, &err) == 0) {
            int bb[3][2];
            brw_bands(mb, bb);
            CHECK(bb[0][0] == 0 && bb[0][1] == 0 && bb[1][0] == 1 && bb[1][1] == 1 &&
                  bb[2][0] == 2 && bb[2][1] == 3);
            const cJSON *bj = cJSON_GetObjectItem(vx_index_json(cb), "browse");
            CHECK_HAS(cJSON_GetStringValue(cJSON_GetObjectItem(bj, "band_rule")),
                      "knowledge band given at encode");
        } else {
            CHECK_MSG(0, "band override container: %s", err.msg);
        }
        brw_close(mb);
        vx_close(cb);
    }
    /* a tokenizer the engine cannot load is refused at encode, nothing written; a
     * checkpoint without one still encodes */
    {
        char ck[4096], file[4200];
        snprintf(ck, sizeof ck, "%s/h7-browse-badtok", LQL_BINARY_DIR);
        t_rm_rf(ck);
        t_rm_rf(plain);
        CHECK(mkdir(ck, 0755) == 0);
        static const char *const names[] = {"config.json", "model.safetensors", NULL};
        for (int i = 0; names[i]; i++) {
            char from[4200];
            snprintf(from, sizeof from, "%s/%s", TINY, names[i]);
            snprintf(file, sizeof file, "%s/%s", ck, names[i]);
            CHECK(symlink(from, file) == 0);
        }
        snprintf(file, sizeof file, "%s/tokenizer.json", TINY);
        cJSON *tj = t_load_json(file);
        cJSON_ReplaceItemInObject(cJSON_GetObjectItem(tj, "model"), "type",
                                  cJSON_CreateString("WordPiece"));
        snprintf(file, sizeof file, "%s/tokenizer.json", ck);
        CHECK(t_save_json(file, tj) == 0);
        cJSON_Delete(tj);
        vx_encode_opts ot;
        vx_encode_opts_init(&ot);
        ot.finish = brw_encode_finish;
        CHECK(vx_encode(ck, plain, &ot, &err) == -1);
        CHECK_STR(err.msg, "the checkpoint's tokenizer.json: model type 'WordPiece' is not "
                           "supported (only BPE)");
        CHECK(access(plain, F_OK) != 0);
        CHECK(unlink(file) == 0);
        CHECK_MSG(vx_encode(ck, plain, &ot, &err) == 0, "no tokenizer: %s", err.msg);
        t_rm_rf(ck);
    }
    brw_close(m);
    vx_close(c);
    t_rm_rf(plain);
    t_rm_rf(out);   /* its down_meta was overwritten above */
    return T_DONE();
}
