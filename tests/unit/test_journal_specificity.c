/*
 * test_journal_specificity.c — what INSERT costs the rest of the model, measured through
 * the statement itself on the tiny Llama model, on three sets: the suite's and the first
 * held-out one (test_journal_facts.h, test_journal_heldout.h: the method was tuned on
 * them) and the unseen one (test_journal_heldout2.h, never tuned on).
 * For each set the ten facts are inserted one after another by `lql` into a journal; the
 * journal is then replayed (the overlay INFER applies) and, against the base model:
 *   efficacy     — each fact's canonical prompt answers its target top-1;
 *   paraphrase   — the fact asked two other ways (para_templates, or the set's own
 *                  wording) answers it top-1;
 *   specificity  — the set's fifty unrelated prompts keep their base top-1 (also counted
 *                  over the decisive ones: base top-1 ahead of the second by ≥ 0.01), and
 *                  the mean KL(base ‖ edited) of their next-token distributions.
 * Prints the table MUTATION.md reports and pins what was measured (bounds at the checks).
 */
#include "browse.h"
#include "edit_memit.h"
#include "overlay.h"
#include "engine.h"
#include "journal.h"
#include "t.h"
#include "test_journal_facts.h"
#include "test_journal_fx.h"
#include "test_journal_heldout.h"
#include "test_journal_heldout2.h"

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
    int efficacy, paraphrase, kept, decisive, decisive_kept;
    double kl_mean, kl_max;
} measured;

/* A testbed: ten facts, their paraphrases (NULL: para_templates), the controls. */
typedef struct testset {
    const char *name;
    const char *const (*facts)[3];
    const char *const (*paras)[NPARA];
    const char *const *ctrl;
    int nctrl;
} testset;

/* Insert the set's facts with lql into journal j, replay it, measure. */
static int measure(const char *dir, const testset *ts, measured *out)
{
    const char *name = ts->name, *const *ctrl = ts->ctrl;
    const char *const (*fs)[3] = ts->facts;
    const int nctrl = ts->nctrl;
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
    ed_overlay *ov = NULL;
    if (vx_open(base, &c, &e) || eng_model_bind(c, &m, &e) ||
        brw_open_tok(c, eng_model_tokenizer(m), &bm, &e) ||
        vx_journal_open(j, vx_index_sha256(c), "tinyllama", &jr, &e) ||
        vx_journal_active_ops(jr, &ops, &nops, &e) ||
        ed_overlay_build(bm, ops, nops, &ov, &e)) {
        fprintf(stderr, "%s: replay: %s\n", name, e.msg);
        return -1;
    }
    const int V = eng_model_vocab(m);
    double *pb = malloc((size_t)V * sizeof *pb), *pe = malloc((size_t)V * sizeof *pe);
    memset(out, 0, sizeof *out);
    for (int i = 0; i < nctrl; i++) {
        eng_model_set_overlay(m, NULL);
        int32_t tb = dist(m, ctrl[i], pb);
        eng_model_set_overlay(m, ed_overlay_eng(ov));
        int32_t te = dist(m, ctrl[i], pe);
        double kl = 0;
        for (int v = 0; v < V; v++)
            if (pb[v] > 0)
                kl += pb[v] * (log(pb[v]) - log(fmax(pe[v], 1e-300)));
        /* how close the base's own top two were */
        double second = 0;
        for (int v = 0; v < V; v++)
            if (v != tb)
                second = fmax(second, pb[v]);
        int decisive = pb[tb] - second >= 0.01;
        out->kept += tb == te;
        out->decisive += decisive;
        out->decisive_kept += decisive && tb == te;
        out->kl_mean += kl / nctrl;
        out->kl_max = fmax(out->kl_max, kl);
        if (tb != te) {
            printf("  %s: control changed: \"%s\" (KL %.4f; base top-1 p %.4f, margin over "
                   "the second %.4f)\n", name, ctrl[i], kl, pb[tb], pb[tb] - second);
        }
    }
    eng_model_set_overlay(m, ed_overlay_eng(ov));
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
            if (ts->paras)
                snprintf(para, sizeof para, "%s", ts->paras[f][q]);
            else
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
    ed_overlay_free(ov);
    vx_ops_free(ops, nops);
    vx_journal_close(jr);
    brw_close(bm);
    eng_model_free(m);
    vx_close(c);
    return 0;
}

static void row(const char *label, const measured *x, int nctrl)
{
    printf("| %s | %d/10 | %d/%d | %d/%d | %d/%d | %.4f | %.4f |\n", label, x->efficacy,
           x->paraphrase, 10 * NPARA, x->kept, nctrl, x->decisive_kept, x->decisive,
           x->kl_mean, x->kl_max);
}

int main(void)
{
    char dir[2048], base[2100];
    if (fx_tiny_dir("h13-specificity", dir, base))
        return 1;
    const testset sets[3] = {
        {"suite", facts, NULL, controls, NCTRL},
        {"heldout", held_facts, NULL, held_controls, NHCTRL},
        {"unseen", held2_facts, held2_paras, held2_controls, NH2CTRL},
    };
    /* Under AddressSanitizer the three sets took 9.4 minutes (on a loaded 2-core host):
     * there the suite's set alone is measured and checked, which runs every path of the
     * insert; the release run measures all three. */
#ifdef __SANITIZE_ADDRESS__
    const int nsets = 1;
#else
    const int nsets = 3;
#endif
    measured got[3] = {{0}};
    for (int k = 0; k < nsets; k++)
        CHECK(measure(dir, &sets[k], &got[k]) == 0);
    const measured *s = &got[0], *h = &got[1], *u = &got[2];
    printf("| set | efficacy (top-1) | paraphrases (top-1) | controls kept (top-1) | decisive "
           "controls kept | mean KL on controls | max KL |\n");
    row("suite (tuned on)", s, NCTRL);
    /* measured with the gated slot, δ raised on the paraphrase-style templates too
     * (edit_memit.h; the rank-1 update before it, in brackets): suite 50/50, mean KL
     * 0.0007, paraphrases 10/20 (50/50, 0.0021, 4/20); held-out 49/50 — the one change a
     * tie of the base, margin 0.0001 — KL 0.0002, 10/20 (46/50, 0.0146, 3/20); unseen
     * 50/50, KL 0.0003, 7/20 (46/50, 0.0066, 3/20). */
    CHECK(s->efficacy == 10);
    CHECK_MSG(s->kept >= 49, "suite controls kept %d/50", s->kept);
    CHECK_MSG(s->kl_mean < 0.002, "suite mean KL %.4f", s->kl_mean);
    CHECK_MSG(s->paraphrase >= 8, "suite paraphrases %d/20", s->paraphrase);
    if (nsets == 3) {
        row("held-out (tuned on)", h, NHCTRL);
        row("unseen (never tuned on)", u, NH2CTRL);
        CHECK(h->efficacy == 10);
        CHECK(u->efficacy == 10);
        CHECK_MSG(h->kept >= 49, "held-out controls kept %d/50", h->kept);
        CHECK_MSG(u->kept >= 49, "unseen controls kept %d/50", u->kept);
        CHECK_MSG(h->decisive_kept == h->decisive, "held-out decisive controls kept %d/%d",
                  h->decisive_kept, h->decisive);
        CHECK_MSG(u->decisive_kept == u->decisive, "unseen decisive controls kept %d/%d",
                  u->decisive_kept, u->decisive);
        CHECK_MSG(h->kl_mean < 0.001, "held-out mean KL %.4f", h->kl_mean);
        CHECK_MSG(u->kl_mean < 0.001, "unseen mean KL %.4f", u->kl_mean);
        CHECK_MSG(h->paraphrase >= 8 && u->paraphrase >= 5, "paraphrases held-out %d/20, "
                  "unseen %d/20", h->paraphrase, u->paraphrase);
    }
    if (t_fail == 0)
        fx_rm_rf(dir);
    return T_DONE();
}
