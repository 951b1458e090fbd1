/*
 * test_parity.c — the engine against the fixtures' float64 goldens (the acceptance bar).
 *
 * Each fixture checkpoint in shared/models is encoded with vx_encode into a temporary
 * directory, bound, and run on every golden prompt:
 *   - prompt ids: the container's tokenizer gives exactly the golden ids, and decoding them
 *     (special tokens skipped) gives the prompt back (the forward pass itself is fed the
 *     golden ids, so the model checks do not depend on the tokenizer);
 *   - the last position's top-5 ids exactly, their probabilities within 1e-5 absolute;
 *   - hidden_norms (after the embedding and every layer, last position) within 1e-3
 *     relative (the worst is printed; the aim is 1e-4);
 *   - lens_top1 (eng_lens on each of those residuals) exactly;
 *   - the greedy continuation exactly (recomputed one token at a time through the KV
 *     cache; EOS does not stop it, as in the golden), and eng_generate's greedy output
 *     equal to its prefix up to the first eos;
 *   - MoE fixtures: routing_last expert ids in selection order and their weights (1e-5).
 *
 *   test_parity [FIXTURE CONTAINER_DIR]   check one already-encoded container
 */
#include <stdlib.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "t.h"
#include "t_file.h"
#include "engine_int.h"

#define MAXL 64

typedef struct cap {
    int H, L;
    float *res;     /* [(L + 1) * H]: last-position residual after embed / each layer */
} cap;

static void on_embed(void *ctx, int pos0, int n, const float *resid)
{
    cap *c = ctx;
    (void)pos0;
    memcpy(c->res, resid + (size_t)(n - 1) * c->H, (size_t)c->H * sizeof(float));
}

static void on_layer(void *ctx, int layer, int pos0, int n, const float *a, const float *f,
                     const float *resid)
{
    cap *c = ctx;
    (void)pos0; (void)a; (void)f;
    memcpy(c->res + (size_t)(layer + 1) * c->H, resid + (size_t)(n - 1) * c->H,
           (size_t)c->H * sizeof(float));
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static int ids_of(const cJSON *arr, int32_t *out, int max)
{
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) if (n < max) out[n++] = (int32_t)e->valuedouble;
    return n;
}

static double worst_norm = 0;

static void check_prompt(const char *fx, eng_model *m, const cJSON *p, int pi)
{
    const int H = eng_model_hidden(m), L = eng_model_layers(m), V = eng_model_vocab(m);
    int32_t ids[256], gold[64];
    int n = ids_of(cJSON_GetObjectItem(p, "ids"), ids, 256);
    const eng_tokenizer *tok = eng_model_tokenizer(m);
    if (tok) {
        const char *text = cJSON_GetObjectItem(p, "text")->valuestring;
        int32_t *got = NULL;
        size_t ng = 0;
        vx_err e = {0};
        int rc = eng_tok_encode(tok, text, strlen(text), 1, &got, &ng, &e);
        CHECK_MSG(rc == 0 && ng == (size_t)n && memcmp(got, ids, (size_t)n * 4) == 0,
                  "%s prompt %d: tokenizer ids differ (%s)", fx, pi, rc ? e.msg : "");
        free(got);
        char *back = NULL;
        CHECK(eng_tok_decode(tok, ids, (size_t)n, 1, &back, &e) == 0);
        CHECK_STR(back, text);
        free(back);
    }
    eng_session *s;
    vx_err err = {0};
    CHECK(eng_session_new(m, 0, &s, &err) == 0);
    if (!s) return;
    cap c = {H, L, malloc((size_t)(L + 1) * H * sizeof(float))};
    eng_observer obs = {&c, on_embed, on_layer, NULL, NULL};
    float *lg = malloc((size_t)V * sizeof *lg), *pr = malloc((size_t)V * sizeof *pr);
    int rc = eng_forward(s, ids, n, lg, &obs, &err);
    CHECK_MSG(rc == 0, "%s prompt %d: forward: %s", fx, pi, err.msg);
    if (rc) goto done;

    /* top-5 and probabilities (softmax in double) */
    double mx = -1e300, sum = 0;
    for (int i = 0; i < V; i++) if (lg[i] > mx) mx = lg[i];
    for (int i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    for (int i = 0; i < V; i++) pr[i] = (float)(exp((double)lg[i] - mx) / sum);
    const cJSON *t5 = cJSON_GetObjectItem(p, "top5"), *e;
    int rank = 0, taken[5];
    cJSON_ArrayForEach(e, t5) {
        int want = cJSON_GetObjectItem(e, "id")->valueint;
        double wp = cJSON_GetObjectItem(e, "prob")->valuedouble;
        int best = -1;
        for (int i = 0; i < V && rank < 5; i++) {
            int used = 0;
            for (int j = 0; j < rank; j++) used |= taken[j] == i;
            if (!used && (best < 0 || pr[i] > pr[best])) best = i;
        }
        if (rank < 5) taken[rank] = best;
        CHECK_MSG(best == want, "%s prompt %d: top5[%d] = %d, want %d", fx, pi, rank, best, want);
        CHECK_MSG(fabs(pr[want] - wp) <= 1e-5, "%s prompt %d: p(%d) = %.8f, want %.8f", fx, pi,
                  want, pr[want], wp);
        rank++;
    }
    CHECK(rank == 5);

    /* hidden norms and the lens */
    const cJSON *hn = cJSON_GetObjectItem(p, "hidden_norms"), *lt = cJSON_GetObjectItem(p, "lens_top1");
    CHECK(cJSON_GetArraySize(hn) == L + 1 && cJSON_GetArraySize(lt) == L + 1);
    for (int l = 0; l <= L && l < cJSON_GetArraySize(hn); l++) {
        double s2 = 0;
        for (int i = 0; i < H; i++) s2 += (double)c.res[(size_t)l * H + i] * c.res[(size_t)l * H + i];
        double want = cJSON_GetArrayItem(hn, l)->valuedouble, rel = fabs(sqrt(s2) - want) / want;
        if (rel > worst_norm) worst_norm = rel;
        CHECK_MSG(rel <= 1e-3, "%s prompt %d: hidden_norms[%d] = %.6f, want %.6f", fx, pi, l,
                  sqrt(s2), want);
        eng_lens(m, c.res + (size_t)l * H, pr);
        int got = argmax(pr, V), wl = cJSON_GetArrayItem(lt, l)->valueint;
        CHECK_MSG(got == wl, "%s prompt %d: lens_top1[%d] = %d, want %d", fx, pi, l, got, wl);
    }

    /* routing of the last prompt position */
    const cJSON *rl = cJSON_GetObjectItem(p, "routing_last");
    for (int l = 0; rl && l < L; l++) {
        const cJSON *want = cJSON_GetArrayItem(rl, l);
        int gid[16];
        float gw[16];
        int k = eng_session_routing(s, l, gid, gw);
        if (cJSON_IsNull(want)) { CHECK_MSG(k == 0, "%s layer %d should be dense", fx, l); continue; }
        CHECK_MSG(k == cJSON_GetArraySize(want), "%s prompt %d layer %d: %d experts routed", fx, pi, l, k);
        for (int j = 0; j < k && j < cJSON_GetArraySize(want); j++) {
            const cJSON *we = cJSON_GetArrayItem(want, j);
            CHECK_MSG(gid[j] == cJSON_GetObjectItem(we, "expert")->valueint,
                      "%s prompt %d layer %d: expert[%d] = %d, want %d", fx, pi, l, j, gid[j],
                      cJSON_GetObjectItem(we, "expert")->valueint);
            CHECK_MSG(fabs(gw[j] - cJSON_GetObjectItem(we, "weight")->valuedouble) <= 1e-5,
                      "%s prompt %d layer %d: weight[%d] = %.7f, want %.7f", fx, pi, l, j, gw[j],
                      cJSON_GetObjectItem(we, "weight")->valuedouble);
        }
    }

    /* greedy continuation through the cache; eos does not stop it */
    const cJSON *gj = cJSON_GetObjectItem(p, "greedy32");
    if (!gj) gj = cJSON_GetObjectItem(p, "greedy");
    int ng = ids_of(gj, gold, 64), bad = -1;
    int32_t got[64];
    for (int i = 0; i < ng; i++) {
        got[i] = argmax(lg, V);
        if (got[i] != gold[i] && bad < 0) bad = i;
        if (i + 1 < ng && eng_forward(s, &got[i], 1, lg, NULL, &err)) {
            CHECK_MSG(0, "%s prompt %d: decode: %s", fx, pi, err.msg);
            break;
        }
    }
    CHECK_MSG(bad < 0, "%s prompt %d: greedy differs at step %d (%d, want %d)", fx, pi, bad,
              bad >= 0 ? got[bad] : 0, bad >= 0 ? gold[bad] : 0);

    /* eng_generate: the same tokens up to and including the first eos */
    eng_session_reset(s);
    eng_sampler g = {0, 0, 1, 0};
    int32_t out[64];
    int nout = 0, stop = ng;
    for (int i = 0; i < ng && stop == ng; i++)
        for (int k = 0; eng_model_eos(m, k) >= 0; k++)
            if (gold[i] == eng_model_eos(m, k)) stop = i + 1;
    CHECK(eng_generate(s, ids, n, ng, &g, out, &nout, &err) == 0);
    CHECK_MSG(nout == stop && memcmp(out, gold, (size_t)stop * 4) == 0,
              "%s prompt %d: eng_generate gave %d tokens, want %d", fx, pi, nout, stop);
done:
    free(lg);
    free(pr);
    free(c.res);
    eng_session_free(s);
}

static void check_container(const char *fx, const char *dir, const char *golden)
{
    vx_container *c = NULL;
    eng_model *m = NULL;
    vx_err err = {0};
    int rc = vx_open(dir, &c, &err);
    CHECK_MSG(rc == 0, "%s: open: %s", fx, err.msg);
    if (rc) return;
    rc = eng_model_bind(c, &m, &err);
    CHECK_MSG(rc == 0, "%s: bind: %s", fx, err.msg);
    cJSON *g = t_load_json(golden);
    CHECK_MSG(g != NULL, "%s: cannot read %s", fx, golden);
    if (!rc && g) {
        const cJSON *p;
        int i = 0;
        double before = worst_norm;
        worst_norm = 0;
        cJSON_ArrayForEach(p, cJSON_GetObjectItem(g, "prompts")) check_prompt(fx, m, p, i++);
        printf("%-18s %d prompts, worst hidden-norm relative error %.2e\n", fx, i, worst_norm);
        if (before > worst_norm) worst_norm = before;
    }
    cJSON_Delete(g);
    eng_model_free(m);
    vx_close(c);
}

static void check_fixture(const char *fx, const char *src, const char *tmp)
{
    char out[4096], golden[4096];
    snprintf(out, sizeof out, "%s/%s.vindex3", tmp, fx);
    snprintf(golden, sizeof golden, "%s/golden.json", src);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    vx_err err = {0};
    int rc = vx_encode(src, out, &o, &err);
    CHECK_MSG(rc == 0, "%s: encode: %s", fx, err.msg);
    if (!rc) check_container(fx, out, golden);
}

int main(int argc, char **argv)
{
    if (argc == 3) {
        char golden[4096];
        snprintf(golden, sizeof golden, "%s/models/families/%s/golden.json", LQL_FIXTURE_DIR, argv[1]);
        if (access(golden, R_OK))
            snprintf(golden, sizeof golden, "%s/models/%s/golden.json", LQL_FIXTURE_DIR, argv[1]);
        check_container(argv[1], argv[2], golden);
        return T_DONE();
    }
    char tmp[] = "/tmp/lql-parity-XXXXXX";
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    static const char *const fams[] = {"llama-gqa", "llama-gqa-bf16", "llama3-rope", "qwen2",
                                       "mistral-swa", "gemma2", "gpt2", "phi3", "mixtral",
                                       "qwen2-moe", "deepseek-v3-lite", "qwen3", "qwen3-tied",
                                       "qwen3-moe", "olmo2", "gemma3", "gpt-oss-bf16", "gpt-oss",
                                       "mamba2", "granite-hybrid", "qwen3-next", "qwen3-next-mtp",
                                       NULL};
    char src[4096];
    snprintf(src, sizeof src, "%s/models/tinyllama", LQL_FIXTURE_DIR);
    check_fixture("tinyllama", src, tmp);
    snprintf(src, sizeof src, "%s/models/tinyllama-bf16", LQL_FIXTURE_DIR);
    check_fixture("tinyllama-bf16", src, tmp);
    for (int i = 0; fams[i]; i++) {
        snprintf(src, sizeof src, "%s/models/families/%s", LQL_FIXTURE_DIR, fams[i]);
        check_fixture(fams[i], src, tmp);
    }
    t_rm_rf(tmp);
    return T_DONE();
}
