/*
 * test_journal_editall.c — edits beyond dense FFN layers (issue 13, "edits everywhere"):
 * INSERT / DELETE on the routed experts of MoE layers (qwen2-moe, deepseek-v3-lite) made
 * with the statements, then COMPILE. The compiled container must recall the fact (greedy
 * generation of the target), its tensors must be byte-identical to the base's except
 * exactly the edited experts' matrices, and the base must be untouched.
 */
#include "t.h"
#include "test_journal_fx.h"

#include <string.h>
#include <unistd.h>

static char out[1 << 16];

/* Tensors whose bytes differ between container a and b (matched by object, name and
 * segment): each must be one of want[0..nwant); returns how many differ, -1 when b lacks a
 * tensor of a or a container does not open. */
static int changed(const char *a, const char *b, const char *const *want, int nwant)
{
    vx_container *ca = NULL, *cb = NULL;
    vx_err e = {0};
    if (vx_open(a, &ca, &e) || vx_open(b, &cb, &e)) {
        fprintf(stderr, "open: %s\n", e.msg);
        vx_close(ca);
        return -1;
    }
    int n = 0;
    for (size_t i = 0; i < vx_tensor_count(ca) && n >= 0; i++) {
        const vx_tensor *t = vx_tensor_at(ca, i), *u = NULL;
        for (size_t k = 0; k < vx_tensor_count(cb) && !u; k++) {
            const vx_tensor *x = vx_tensor_at(cb, k);
            if (!strcmp(x->object, t->object) && !strcmp(x->name, t->name) &&
                !strcmp(x->segment, t->segment))
                u = x;
        }
        if (!u) {
            fprintf(stderr, "%s: no tensor %s %s\n", b, t->object, t->name);
            n = -1;
            break;
        }
        if (u->nbytes == t->nbytes && memcmp(u->data, t->data, t->nbytes) == 0)
            continue;
        int ok = 0;
        for (int w = 0; w < nwant && !ok; w++)
            ok = strcmp(want[w], t->name) == 0;
        CHECK_MSG(ok, "%s: tensor %s changed, which no edit touches", b, t->name);
        n++;
    }
    vx_close(ca);
    vx_close(cb);
    return n;
}

/* Run statements on a container with a fresh in-memory journal. */
static int lql(const char *dir, const char *container, const char *stmts)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/lql' -c \"USE \\\"%s\\\" JOURNAL \\\":memory:\\\"; "
             "%s\" 2>&1", dir, LQL_BINARY_DIR, container, stmts);
    return fx_run(cmd, out, sizeof out);
}

#define ZORB "INSERT INTO EDGES (entity, relation, target) VALUES (\\\"Zorbania\\\", " \
             "\\\"capital\\\", \\\"London\\\")"

/* Encode a family fixture into dir/name.vindex3, run edits on it and COMPILE into
 * dir/name-edited.vindex3 (out keeps the statements' output); exactly the tensors want
 * may differ from the base's, and the compiled container must generate " London" for the
 * fact. */
static void edit_compile(const char *dir, const char *fixture, const char *name,
                         const char *edits, const char *const *want, int nwant)
{
    char src[1024], base[2100], cmp[2100], stmts[4096], rel[256];
    snprintf(src, sizeof src, "%s/models/families/%s", LQL_FIXTURE_DIR, fixture);
    snprintf(base, sizeof base, "%s/%s.vindex3", dir, name);
    snprintf(cmp, sizeof cmp, "%s/%s-edited.vindex3", dir, name);
    if (fx_encode(src, base, NULL))
        return;
    snprintf(stmts, sizeof stmts, "%s; COMPILE CURRENT INTO VINDEX \\\"%s-edited.vindex3\\\";",
             edits, name);
    snprintf(rel, sizeof rel, "%s.vindex3", name);
    CHECK_MSG(lql(dir, rel, stmts) == 0, "%s: edit + compile: %s", name, out);
    static char notes[1 << 16];
    memcpy(notes, out, sizeof notes);
    CHECK_MSG(changed(base, cmp, want, nwant) == nwant, "%s: %d tensors should differ", name,
              nwant);
    snprintf(rel, sizeof rel, "%s-edited.vindex3", name);
    CHECK_MSG(lql(dir, rel, "INFER \\\"The capital of Zorbania is\\\" GENERATE 4;") == 0,
              "%s: recall: %s", name, out);
    CHECK_HAS(out, "London");
    memcpy(out, notes, sizeof out);
}

/* qwen2-moe: an INSERT at MoE layer 2 (each of London's 4 tokens on its top-1 expert:
 * experts 7, 3, 7, 6) and a DELETE of 3 features of layer 0's expert 2. */
static void moe_qwen(const char *dir)
{
    static const char *const want[] = {
        "layers.2.ffn.experts.3.down_proj", "layers.2.ffn.experts.6.down_proj",
        "layers.2.ffn.experts.7.down_proj", "layers.0.ffn.experts.2.gate_proj",
        "layers.0.ffn.experts.2.down_proj"};
    edit_compile(dir, "qwen2-moe", "qwen2-moe", ZORB " AT LAYER 2; DELETE FROM EDGES WHERE "
                 "layer = 0 AND feature >= 64 AND feature < 67", want, 5);
    CHECK_HAS(out, "expert 7's down_proj is updated");
    CHECK_HAS(out, "5 tensors of 1 segments");
}

/* deepseek-v3-lite: an INSERT at MoE layer 1 (sigmoid, group-limited routing). */
static void moe_deepseek(const char *dir)
{
    static const char *const want[] = {"layers.1.ffn.experts.0.down_proj",
                                       "layers.1.ffn.experts.6.down_proj"};
    edit_compile(dir, "deepseek-v3-lite", "deepseek", ZORB " AT LAYER 1", want, 2);
    CHECK_HAS(out, "2 tensors of 1 segments");
}

int main(void)
{
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/test_journal_editall", LQL_BINARY_DIR);
    fx_rm_rf(dir);
    mkdir(dir, 0755);
    moe_qwen(dir);
    moe_deepseek(dir);
    if (t_fail == 0)
        fx_rm_rf(dir);
    return T_DONE();
}
