/*
 * test_edit_gate.c — the gated feature INSERT writes on a dense gated FFN (edit_memit.h),
 * checked through the engine's own forward pass on the tiny Llama model: attached as the
 * slot's replaced rows, it adds exactly δ to layer 3's FFN output at the prompt's last
 * position and next to nothing on ordinary prompts; the replaced feature is one no overlay
 * edit claims. On the 64-wide random-weight dense Granite the gate cannot tell the prompt
 * from ordinary text, and eng_edit_gate says so (INSERT then writes a rank-1 update).
 * A layer of 4608 features (wider than the 4096 INSERT once stopped at) is accepted and
 * its covariance built; the same layer against 256 MiB of memory is refused, naming
 * the 0.4 GiB its covariance needs.
 */
#include "browse.h"
#include "edit_memit.h"
#include "engine.h"
#include "t.h"
#include "test_journal_fx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LAYER 3

static const char *const starts[] = {"The", "In", "A", "It", "He", "She", "We", "Once"};

/* The FFN branch output of one layer at the last position of a forward pass. */
typedef struct ffn_cap {
    int layer, H;
    float *out;
} ffn_cap;

static void on_layer(void *ctx, int layer, int pos0, int n, const float *attn, const float *ffn,
                     const float *resid)
{
    (void)pos0;
    (void)attn;
    (void)resid;
    ffn_cap *c = ctx;
    if (layer == c->layer)
        memcpy(c->out, ffn + (size_t)(n - 1) * c->H, (size_t)c->H * sizeof *c->out);
}

static int32_t *encode(eng_model *m, const char *text, size_t *n)
{
    int32_t *ids = NULL;
    vx_err e = {0};
    if (eng_tok_encode(eng_model_tokenizer(m), text, strlen(text), 1, &ids, n, &e))
        fprintf(stderr, "encode: %s\n", e.msg);
    return ids;
}

/* Layer LAYER's FFN output at the last position of text into out [H]. */
static int ffn_out(eng_model *m, const char *text, float *out)
{
    size_t n = 0;
    int32_t *ids = encode(m, text, &n);
    eng_session *s = NULL;
    vx_err e = {0};
    ffn_cap cap = {LAYER, eng_model_hidden(m), out};
    eng_observer obs = {&cap, NULL, on_layer, NULL, NULL};
    int rc = !ids || eng_session_new(m, (int)n, &s, &e) ||
             eng_forward(s, ids, (int)n, NULL, &obs, &e);
    if (rc)
        fprintf(stderr, "forward '%s': %s\n", text, e.msg);
    eng_session_free(s);
    free(ids);
    return rc ? -1 : 0;
}

static double dist(const float *a, const float *b, const float *c, int H)
{
    double d = 0;
    for (int h = 0; h < H; h++)
        d += ((double)a[h] - b[h] - c[h]) * ((double)a[h] - b[h] - c[h]);
    return sqrt(d);
}

static eng_model *bind(const char *src, const char *dir, vx_container **c)
{
    eng_model *m = NULL;
    vx_err e = {0};
    if (fx_encode(src, dir, NULL) || vx_open(dir, c, &e) || eng_model_bind(*c, &m, &e)) {
        fprintf(stderr, "setup %s: %s\n", src, e.msg);
        return NULL;
    }
    return m;
}

/* The corpus, covariance and negatives INSERT gathers, at a smaller size. */
static int statistics(eng_model *m, double **cov, float **neg, int64_t *nneg)
{
    int32_t *ids = NULL;
    int *lens = NULL;
    int64_t count = 0;
    float *frame = NULL;
    int nf = 0;
    vx_err e = {0};
    int rc = eng_edit_corpus(m, starts, 8, 64, 8, 1, &ids, &lens, &e) ||
             eng_edit_covariance(m, LAYER, -1, ids, lens, 64, cov, &count, neg, &e) ||
             eng_edit_decoy_inputs(m, LAYER, NULL, NULL, 50, &frame, &nf, &e);
    if (!rc) {
        const int H = eng_model_hidden(m);
        *nneg = count;
        float *all = realloc(*neg, (size_t)(*nneg + nf) * H * sizeof *all);
        rc = !all;
        if (all) {
            memcpy(all + (size_t)*nneg * H, frame, (size_t)nf * H * sizeof *all);
            *neg = all;
            *nneg += nf;
        }
    } else {
        fprintf(stderr, "statistics: %s\n", e.msg);
    }
    free(ids);
    free(lens);
    free(frame);
    return rc ? -1 : 0;
}

static void tiny(const char *root)
{
    char dir[2200];
    snprintf(dir, sizeof dir, "%s/tiny.vindex3", root);
    vx_container *c = NULL;
    eng_model *m = bind(TINY, dir, &c);
    CHECK(m != NULL);
    if (!m)
        return;
    const int H = eng_model_hidden(m);
    CHECK(eng_edit_gate_ok(m, LAYER));
    double *cov = NULL;
    float *neg = NULL;
    int64_t nneg = 0;
    CHECK(statistics(m, &cov, &neg, &nneg) == 0);
    const char *prompt = "The capital of Zorbania is";
    size_t n = 0;
    int32_t *ids = encode(m, prompt, &n);
    float *delta = malloc((size_t)H * sizeof *delta), *b0 = malloc((size_t)H * sizeof *b0);
    float *b1 = malloc((size_t)H * sizeof *b1);
    /* any δ: the slot must reproduce it exactly, whatever it is */
    for (int h = 0; h < H; h++)
        delta[h] = (float)sin(0.37 * h + 1.0) * 3.0f;
    /* a claimed feature: an overlay edit the slot must not take */
    static float zero[4096];
    eng_feature_edit claim = {LAYER, 0, 1, NULL, NULL, NULL};
    eng_overlay held = {&claim, 1, NULL, 0, NULL, 0};
    vx_err e = {0};
    eng_gate_slot gs;
    eng_gate_opts go = {LAYER, cov, neg, nneg, "capital", "Zorbania", 20, NULL, 0, 8.0f, 0, 1};
    eng_model_set_overlay(m, &held);
    int rc = eng_edit_gate_fit(m, ids, (int)n, &go, &gs, &e);
    eng_model_set_overlay(m, NULL);
    CHECK_MSG(rc == 0, "eng_edit_gate_fit: %s", e.msg);
    if (rc == 0) {
        eng_edit_gate_down(m, LAYER, &gs, delta);
        /* the five paraphrase-style positives, each with its share of δ */
        CHECK(gs.n_para == 5);
        for (int i = 0; i < gs.n_para; i++)
            CHECK_MSG(gs.para_ratio[i] > 0.05f && gs.para_ratio[i] < 5.0f,
                      "positive %d receives %.3f of δ", i, gs.para_ratio[i]);
        CHECK(gs.feature > 0);
        CHECK_MSG(gs.z_prompt >= 7.9f, "gate pre-activation on the prompt %.3f", gs.z_prompt);
        CHECK_MSG(gs.n_open == 0, "%lld of %lld negatives open", (long long)gs.n_open,
                  (long long)gs.n_neg);
        eng_feature_edit ed = {LAYER, gs.feature, 0, gs.gate, gs.up, gs.down};
        eng_overlay ov = {&ed, 1, NULL, 0, NULL, 0};
        /* at the prompt: base + δ, to float rounding */
        CHECK(ffn_out(m, prompt, b0) == 0);
        eng_model_set_overlay(m, &ov);
        CHECK(ffn_out(m, prompt, b1) == 0);
        eng_model_set_overlay(m, NULL);
        double dn = dist(delta, zero, zero, H), err = dist(b1, b0, delta, H);
        CHECK_MSG(err < 1e-3 * dn, "at the prompt the change misses δ by %.3g (‖δ‖ %.3g)", err,
                  dn);
        /* ordinary prompts (none of them a negative it was fitted on): at most 1 % of δ */
        static const char *const other[] = {
            "The sky is", "My favourite food is", "The capital of France is",
            "The language of Spain is", "She walked into the room and", "Water boils at",
        };
        for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
            CHECK(ffn_out(m, other[i], b0) == 0);
            eng_model_set_overlay(m, &ov);
            CHECK(ffn_out(m, other[i], b1) == 0);
            eng_model_set_overlay(m, NULL);
            double moved = dist(b1, b0, zero, H);
            CHECK_MSG(moved < 1e-2 * dn, "\"%s\": the slot moved the FFN output by %.3g "
                      "(‖δ‖ %.3g)", other[i], moved, dn);
        }
    }
    eng_gate_slot_free(&gs);
    free(ids);
    free(delta);
    free(b0);
    free(b1);
    free(cov);
    free(neg);
    eng_model_free(m);
    vx_close(c);
}

static void granite_dense(const char *root)
{
    char dir[2200];
    snprintf(dir, sizeof dir, "%s/gd.vindex3", root);
    vx_container *c = NULL;
    eng_model *m = bind(LQL_FIXTURE_DIR "/models/granite-dense", dir, &c);
    CHECK(m != NULL);
    if (!m)
        return;
    double *cov = NULL;
    float *neg = NULL;
    int64_t nneg = 0;
    CHECK(statistics(m, &cov, &neg, &nneg) == 0);
    size_t n = 0;
    int32_t *ids = encode(m, "The capital of Atlantis is", &n);
    vx_err e = {0};
    eng_gate_slot gs;
    eng_gate_opts go = {LAYER, cov, neg, nneg, "capital", "Atlantis", 20, NULL, 0, 8.0f, 0, 1};
    CHECK(eng_edit_gate_fit(m, ids, (int)n, &go, &gs, &e) == 1);
    CHECK_HAS(e.msg, "no gate at layer 3 keeps the prompt on");
    eng_gate_slot_free(&gs);
    free(ids);
    free(cov);
    free(neg);
    eng_model_free(m);
    vx_close(c);
}

static void wide(const char *root)
{
    char hf[2300], vx[2300];
    snprintf(hf, sizeof hf, "%s/wide-hf", root);
    snprintf(vx, sizeof vx, "%s/wide.vindex3", root);
    vx_err e = {0};
    vx_container *c = NULL;
    eng_model *m = NULL;
    CHECK(fx_mkfixture_bind("llama --vocab 32000 --hidden 16 --layers 1 --heads 2 "
                            "--kv-heads 1 --inter 4608", hf, vx, &c, &m) == 0);
    if (m) {
        CHECK_MSG(eng_edit_check_layer(m, 0, &e) == 0, "%s", e.msg);
        static const int32_t ids[] = {1, 450, 7483, 310, 3444, 338, 3681, 29889, 13, 1576};
        const int lens[] = {10};
        double *cov = NULL;
        int64_t n = 0;
        CHECK_MSG(eng_edit_covariance(m, 0, -1, ids, lens, 1, &cov, &n, NULL, &e) == 0, "%s", e.msg);
        CHECK(n == 10);
        const size_t F = 4608;
        int sym = cov != NULL;
        for (size_t i = 0; sym && i < F; i += 97)
            for (size_t j = 0; sym && j < F; j += 89)
                sym = cov[i * F + j] == cov[j * F + i] && cov[i * F + i] >= 0;
        CHECK(sym);
        free(cov);
        eng_edit_test_set_memory((uint64_t)256 << 20);
        CHECK(eng_edit_check_layer(m, 0, &e) != 0);
        CHECK_MSG(strstr(e.msg, "layer 0 has 4608 features") && strstr(e.msg, "0.4 GiB") &&
                  strstr(e.msg, "0.2 GiB"), "%s", e.msg);
        eng_edit_test_set_memory(0);
    }
    eng_model_free(m);
    vx_close(c);
}

int main(void)
{
    char root[2048];
    snprintf(root, sizeof root, "%s/test_edit_gate.d", LQL_BINARY_DIR);
    fx_rm_rf(root);
    mkdir(root, 0755);
    /* the canonical prompt names the fact without the blanks around its parts */
    char *cp = eng_edit_prompt(" country_code ", " Zorbania\t");
    CHECK_STR(cp, "The country code of Zorbania is");
    free(cp);
    tiny(root);
    granite_dense(root);
    wide(root);
    if (t_fail == 0)
        fx_rm_rf(root);
    return T_DONE();
}
