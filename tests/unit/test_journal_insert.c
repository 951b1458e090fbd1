/*
 * test_journal_insert.c — INSERT's algorithm on the real tiny model (the MUTATION-NOTES
 * testbed): ten facts about made-up entities are inserted one after another at layer 3 as
 * rank-1 covariance-whitened down_proj updates, each protecting the earlier facts' keys;
 * then every fact must be recalled top-1 on its prompt, at least 48 of 50 unrelated
 * prompts must keep their base top-1, and at least 13 of 16 template neighbours ("The
 * capital of Germany is", same relation, real entity) too. Also checks the update's algebra (vᵀk = 1, vᵀk_old = 0) and
 * the refusals.
 */
#include "browse.h"
#include "edit_memit.h"
#include "engine.h"
#include "t.h"
#include "test_journal_facts.h"

#include <stdint.h>
#include <stdlib.h>

#define TINY LQL_FIXTURE_DIR "/models/tinyllama"
#define LAYER 3
static const char *const starts[] = {
    "The", "In", "A", "It", "He", "She", "We", "Once", "This", "There", "I", "They",
    "When", "My", "All", "What",
};

static int32_t *encode(eng_model *m, const char *text, int special, size_t *n)
{
    int32_t *ids = NULL;
    vx_err e = {0};
    if (eng_tok_encode(eng_model_tokenizer(m), text, strlen(text), special, &ids, n, &e))
        fprintf(stderr, "encode: %s\n", e.msg);
    return ids;
}

static int32_t top1(eng_model *m, const char *text)
{
    size_t n;
    int32_t *ids = encode(m, text, 1, &n);
    eng_session *s;
    vx_err e = {0};
    float *lg = malloc((size_t)eng_model_vocab(m) * sizeof *lg);
    int32_t best = -1;
    if (eng_session_new(m, 0, &s, &e) == 0 && eng_forward(s, ids, (int)n, lg, NULL, &e) == 0) {
        best = 0;
        for (int v = 1; v < eng_model_vocab(m); v++)
            if (lg[v] > lg[best])
                best = v;
    }
    eng_session_free(s);
    free(lg);
    free(ids);
    return best;
}

int main(void)
{
    char dir[4096], cmd[4200];
    snprintf(dir, sizeof dir, "%s/h8-insert-tiny.vindex3", LQL_BINARY_DIR);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        return 1;
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    vx_err e = {0};
    vx_container *c = NULL;
    eng_model *m = NULL;
    if (vx_encode(TINY, dir, &o, &e) || vx_open(dir, &c, &e) || eng_model_bind(c, &m, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    const int F = eng_model_ffn_features(m, LAYER);

    int32_t base_ctrl[NCTRL], base_near[NNEAR];
    for (int i = 0; i < NCTRL; i++)
        base_ctrl[i] = top1(m, controls[i]);
    for (int i = 0; i < NNEAR; i++)
        base_near[i] = top1(m, near[i]);

    int32_t *cids;
    int *clens;
    double *cov;
    int64_t npos;
    CHECK(eng_edit_corpus(m, starts, 16, 32, 48, 1, &cids, &clens, &e) == 0);
    CHECK(eng_edit_covariance(m, LAYER, -1, cids, clens, 32, &cov, &npos, NULL, &e) == 0);
    printf("covariance of layer %d over %lld corpus positions\n", LAYER, (long long)npos);
    {
        /* gathered while sampling: the same texts, positions and covariance (to rounding),
         * and the FFN inputs of every position */
        int32_t *sids;
        int *slens;
        double *scov;
        float *xin;
        int64_t sn;
        CHECK(eng_edit_corpus_stats(m, starts, 16, 32, 48, 1, LAYER, -1, &sids, &slens, &scov,
                                    &sn, &xin, &e) == 0);
        CHECK(sn == npos && memcmp(slens, clens, 32 * sizeof *clens) == 0 &&
              memcmp(sids, cids, (size_t)npos * sizeof *cids) == 0);
        double worst = 0, scale = 0;
        for (size_t i = 0; i < (size_t)F * F; i++) {
            worst = fmax(worst, fabs(scov[i] - cov[i]));
            scale = fmax(scale, fabs(cov[i]));
        }
        CHECK_MSG(worst <= 1e-5 * scale, "covariance while sampling off by %g of %g", worst, scale);
        for (size_t i = 0; i < (size_t)sn * eng_model_hidden(m); i++)
            CHECK(isfinite(xin[i]));
        free(sids);
        free(slens);
        free(scov);
        free(xin);
    }

    /* the overlay accumulates the facts' rank-1 updates */
    eng_lowrank lr[NFACTS];
    eng_insert_fact fx[NFACTS];
    float *keys = malloc((size_t)NFACTS * F * sizeof *keys);
    eng_overlay ov = {NULL, 0, lr, 0, NULL, 0};
    for (int f = 0; f < NFACTS; f++) {
        char *prompt = eng_edit_prompt(facts[f][1], facts[f][0]);
        size_t n, nt;
        int32_t *ids = encode(m, prompt, 1, &n), *tid = encode(m, facts[f][2], 0, &nt);
        float *decoys;
        int nd;
        CHECK(eng_edit_decoys(m, LAYER, -1, facts[f][1], facts[f][0], 40, &decoys, &nd, &e) == 0);
        eng_insert_opts io = {LAYER, -1, tid[0], cov, keys, f, decoys, nd, 1.0, 1e-2, 60, 0.5f,
                              0.02f, 4.0f, NULL, NULL, 0, 0, NULL, NULL, NULL, 0};
        int rc = eng_edit_insert(m, ids, (int)n, &io, &fx[f], &e);
        CHECK_MSG(rc == 0, "insert %d: %s", f, e.msg);
        if (rc == 0) {
            memcpy(keys + (size_t)f * F, fx[f].key, (size_t)F * sizeof(float));
            /* vᵀk = 1 for this fact, 0 for the earlier ones */
            double self = 0, worst = 0;
            for (int i = 0; i < F; i++)
                self += (double)fx[f].v[i] * fx[f].key[i];
            for (int g = 0; g < f; g++) {
                double d = 0;
                for (int i = 0; i < F; i++)
                    d += (double)fx[f].v[i] * keys[(size_t)g * F + i];
                worst = fmax(worst, fabs(d));
            }
            CHECK_NEAR(self, 1.0, 1e-3);
            CHECK_MSG(worst < 1e-3, "fact %d leaks onto an earlier key: %g", f, worst);
            lr[f] = (eng_lowrank){LAYER, 1, fx[f].u, fx[f].v, -1};
            ov.n_lowrank = (size_t)f + 1;
            eng_model_set_overlay(m, &ov);
            printf("  %-12s %-9s %-12s p %.4f -> %.4f in %d steps\n", facts[f][0],
                   facts[f][1], facts[f][2], fx[f].p_before, fx[f].p_after, fx[f].steps);
        }
        free(decoys);
        free(prompt);
        free(ids);
        free(tid);
    }

    int recalled = 0, kept = 0;
    for (int f = 0; f < NFACTS; f++) {
        char *prompt = eng_edit_prompt(facts[f][1], facts[f][0]);
        size_t nt;
        int32_t *tid = encode(m, facts[f][2], 0, &nt);
        int ok = top1(m, prompt) == tid[0];
        recalled += ok;
        if (!ok)
            printf("  not recalled: %s\n", prompt);
        free(prompt);
        free(tid);
    }
    for (int i = 0; i < NCTRL; i++) {
        int ok = top1(m, controls[i]) == base_ctrl[i];
        kept += ok;
        if (!ok)
            printf("  control changed: %s\n", controls[i]);
    }
    int kept_near = 0;
    for (int i = 0; i < NNEAR; i++) {
        int ok = top1(m, near[i]) == base_near[i];
        kept_near += ok;
        if (!ok)
            printf("  template neighbour changed: %s\n", near[i]);
    }
    printf("recalled %d/%d facts, kept %d/%d unrelated prompts and %d/%d template "
           "neighbours\n", recalled, NFACTS, kept, NCTRL, kept_near, NNEAR);
    CHECK_MSG(recalled == NFACTS, "recalled %d/%d", recalled, NFACTS);
    CHECK_MSG(kept >= 48, "kept %d/%d unrelated prompts", kept, NCTRL);
    CHECK_MSG(kept_near >= 13, "kept %d/%d template neighbours", kept_near, NNEAR);

    eng_model_set_overlay(m, NULL);
    for (int f = 0; f < NFACTS; f++)
        eng_insert_fact_free(&fx[f]);
    free(keys);
    free(cov);
    free(cids);
    free(clens);
    eng_model_free(m);
    vx_close(c);
    if (t_fail == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return T_DONE();
}
