/*
 * test_journal_specificity.c — what INSERT costs the rest of the model, measured through
 * the statement itself on the tiny Llama model, on two sets: the suite's (the set the
 * method was tuned on, test_journal_facts.h) and a held-out one (test_journal_heldout.h).
 * For each set the ten facts are inserted one after another by `lql` into a journal; the
 * journal is then replayed (the overlay INFER applies) and, against the base model:
 *   efficacy     — each fact's canonical prompt answers its target top-1;
 *   paraphrase   — the fact asked two other ways (para_templates) answers it top-1;
 *   specificity  — the set's fifty unrelated prompts keep their base top-1, and the mean
 *                  KL(base ‖ edited) of their next-token distributions.
 * Prints the table MUTATION.md reports and pins what was measured (bounds at the checks).
 */
#include "browse.h"
#include "edit_memit.h"
#include "edit_overlay.h"
#include "engine.h"
#include "journal.h"
#include "t.h"
#include "test_journal_facts.h"
#include "test_journal_fx.h"
#include "test_journal_heldout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* softmax of the next-token logits after text into p [V]; the top-1 id. */
static int32_t dist(eng_model *m, const char *text, double *p)
{
    int32_t *ids = NULL;
    size_t n = 0;
    vx_err e = {0};
    eng_session *s = NULL;
    const int V = eng_model_vocab(m);
    float *lg = malloc((size_t)V * sizeof *lg);
    int32_t best = -1;
    if (lg && eng_tok_encode(eng_model_tokenizer(m), text, strlen(text), 1, &ids, &n, &e) == 0 &&
        eng_session_new(m, 0, &s, &e) == 0 && eng_forward(s, ids, (int)n, lg, NULL, &e) == 0) {
        best = 0;
        double mx = lg[0], sum = 0;
        for (int v = 1; v < V; v++)
            if (lg[v] > lg[best])
                best = v;
        mx = lg[best];
        for (int v = 0; v < V; v++)
            sum += (p[v] = exp((double)lg[v] - mx));
        for (int v = 0; v < V; v++)
            p[v] /= sum;
    } else {
        fprintf(stderr, "forward '%s': %s\n", text, e.msg);
    }
    eng_session_free(s);
    free(ids);
    free(lg);
    return best;
}

static int32_t first_token(eng_model *m, const char *target)
{
    int32_t *ids = NULL;
    size_t n = 0;
    vx_err e = {0};
    int32_t t = -1;
    if (eng_tok_encode(eng_model_tokenizer(m), target, strlen(target), 0, &ids, &n, &e) == 0 &&
        n > 0)
        t = ids[0];
    free(ids);
    return t;
}

typedef struct measured {
    int efficacy, paraphrase, kept;
    double kl_mean, kl_max;
} measured;

/* Insert the set's facts with lql into journal j, replay it, measure. */
static int measure(const char *dir, const char *name, const char *const (*fs)[3],
                   const char *const *ctrl, int nctrl, measured *out)
{
    char base[2200], j[2300];
    snprintf(base, sizeof base, "%s/base.vindex3", dir);
    snprintf(j, sizeof j, "%s/%s.lqljournal", dir, name);
    static char cmd[1 << 14], out_log[1 << 16];
    int k = snprintf(cmd, sizeof cmd, "'%s/lql' -c \"USE \\\"%s\\\" JOURNAL \\\"%s\\\"; ",
                     LQL_BINARY_DIR, base, j);
    for (int f = 0; f < 10; f++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, "INSERT INTO EDGES (entity, relation, "
                      "target) VALUES (\\\"%s\\\", \\\"%s\\\", \\\"%s\\\"); ", fs[f][0],
                      fs[f][1], fs[f][2] + 1);
    snprintf(cmd + k, sizeof cmd - (size_t)k, "\" 2>&1");
    if (fx_run(cmd, out_log, sizeof out_log) != 0) {
        fprintf(stderr, "%s: inserting failed:\n%s\n", name, out_log);
        return -1;
    }
    vx_err e = {0};
    vx_container *c = NULL;
    eng_model *m = NULL;
    brw_model *bm = NULL;
    vx_journal *jr = NULL;
    vx_op *ops = NULL;
    size_t nops = 0;
    brw_edit_overlay *ov = NULL;
    if (vx_open(base, &c, &e) || eng_model_bind(c, &m, &e) ||
        brw_open_tok(c, eng_model_tokenizer(m), &bm, &e) ||
        vx_journal_open(j, vx_index_sha256(c), "tinyllama", &jr, &e) ||
        vx_journal_active_ops(jr, &ops, &nops, &e) ||
        brw_edit_overlay_build(bm, ops, nops, &ov, &e)) {
        fprintf(stderr, "%s: replay: %s\n", name, e.msg);
        return -1;
    }
    const int V = eng_model_vocab(m);
    double *pb = malloc((size_t)V * sizeof *pb), *pe = malloc((size_t)V * sizeof *pe);
    memset(out, 0, sizeof *out);
    for (int i = 0; i < nctrl; i++) {
        eng_model_set_overlay(m, NULL);
        int32_t tb = dist(m, ctrl[i], pb);
        eng_model_set_overlay(m, brw_edit_overlay_eng(ov));
        int32_t te = dist(m, ctrl[i], pe);
        double kl = 0;
        for (int v = 0; v < V; v++)
            if (pb[v] > 0)
                kl += pb[v] * (log(pb[v]) - log(fmax(pe[v], 1e-300)));
        out->kept += tb == te;
        out->kl_mean += kl / nctrl;
        out->kl_max = fmax(out->kl_max, kl);
        if (tb != te) {
            /* how close the base's own top two were */
            double second = 0;
            for (int v = 0; v < V; v++)
                if (v != tb)
                    second = fmax(second, pb[v]);
            printf("  %s: control changed: \"%s\" (KL %.4f; base top-1 p %.4f, margin over "
                   "the second %.4f)\n", name, ctrl[i], kl, pb[tb], pb[tb] - second);
        }
    }
    eng_model_set_overlay(m, brw_edit_overlay_eng(ov));
    for (int f = 0; f < 10; f++) {
        int32_t t = first_token(m, fs[f][2]);
        char *prompt = eng_edit_prompt(fs[f][1], fs[f][0]);
        int ok = dist(m, prompt, pe) == t;
        out->efficacy += ok;
        if (!ok)
            printf("  %s: not recalled: \"%s\"\n", name, prompt);
        free(prompt);
        for (int q = 0; q < NPARA; q++) {
            char para[256];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
            snprintf(para, sizeof para, para_templates[q], fs[f][0], fs[f][1]);
#pragma GCC diagnostic pop
            ok = dist(m, para, pe) == t;
            out->paraphrase += ok;
            if (!ok)
                printf("  %s: paraphrase not recalled: \"%s\"\n", name, para);
        }
    }
    eng_model_set_overlay(m, NULL);
    free(pb);
    free(pe);
    brw_edit_overlay_free(ov);
    vx_ops_free(ops, nops);
    vx_journal_close(jr);
    brw_close(bm);
    eng_model_free(m);
    vx_close(c);
    return 0;
}

int main(void)
{
    char dir[2048], base[2100];
    if (fx_tiny_dir("h13-specificity", dir, base))
        return 1;
    measured s, h;
    CHECK(measure(dir, "suite", facts, controls, NCTRL, &s) == 0);
    CHECK(measure(dir, "heldout", held_facts, held_controls, NHCTRL, &h) == 0);
    printf("| set | efficacy (top-1) | paraphrases (top-1) | controls kept (top-1) | mean KL "
           "on controls | max KL |\n");
    printf("| suite (tuned on) | %d/10 | %d/%d | %d/%d | %.4f | %.4f |\n", s.efficacy,
           s.paraphrase, 10 * NPARA, s.kept, NCTRL, s.kl_mean, s.kl_max);
    printf("| held-out | %d/10 | %d/%d | %d/%d | %.4f | %.4f |\n", h.efficacy, h.paraphrase,
           10 * NPARA, h.kept, NHCTRL, h.kl_mean, h.kl_max);
    /* measured: suite 50/50, KL 0.0112; held-out 46/50, KL 0.0296 (before the short-context
     * corpus and the frame decoys: 49/50, 0.0388 and 41/50, 0.0663). The goal of
     * 49/50 held-out is not met: the four prompts that change are near-ties of the base
     * (top-1 ahead of the second by at most 0.013 in probability, printed above). */
    CHECK(s.efficacy == 10);
    CHECK(h.efficacy == 10);
    CHECK_MSG(s.kept >= 49, "suite controls kept %d/50", s.kept);
    CHECK_MSG(h.kept >= 46, "held-out controls kept %d/50", h.kept);
    CHECK_MSG(s.kl_mean < 0.015, "suite mean KL %.4f", s.kl_mean);
    CHECK_MSG(h.kl_mean < 0.035, "held-out mean KL %.4f", h.kl_mean);
    if (t_fail == 0)
        fx_rm_rf(dir);
    return T_DONE();
}
