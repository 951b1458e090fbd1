/*
 * test_journal_overlay.c — the effective model: journal operations replayed into the
 * overlay the executor and browse apply, on the real tiny model.
 *
 * Three different mechanisms silence one strongly firing feature and must agree:
 * a tombstone, a replacement down column of zeros, and a rank-1 low-rank delta
 * u = −down[:, f], v = e_f. Each changes the logits; UNDO of the edit restores the base
 * logits bit for bit; a replacement column equal to the base one changes nothing.
 * Metadata overrides reach browse; ops that do not fit the model are refused by name.
 */
#include "browse.h"
#include "overlay.h"
#include "engine.h"
#include "journal.h"
#include "t.h"

#include <stdint.h>
#include <stdlib.h>

#define TINY LQL_FIXTURE_DIR "/models/tinyllama"
#define PROMPT "The capital of France is"
#define LAYER 2

typedef struct probe {
    int layer, features;
    float *act;               /* last position's activations at LAYER */
} probe;

static void on_ffn(void *ctx, int layer, int pos0, int n, const float *in, const float *act,
                   int features)
{
    (void)pos0;
    (void)in;
    probe *p = ctx;
    if (layer != p->layer)
        return;
    p->features = features;
    free(p->act);
    p->act = malloc((size_t)features * sizeof *p->act);
    memcpy(p->act, act + (size_t)(n - 1) * features, (size_t)features * sizeof *p->act);
}

/* Logits of the prompt's next token through m (with whatever overlay it has). */
static float *logits_of(eng_model *m, const int32_t *ids, int n, probe *p)
{
    eng_session *s;
    vx_err e = {0};
    float *lg = malloc((size_t)eng_model_vocab(m) * sizeof *lg);
    eng_observer obs = {p, NULL, NULL, on_ffn, NULL};
    if (eng_session_new(m, 0, &s, &e) || eng_forward(s, ids, n, lg, p ? &obs : NULL, &e)) {
        fprintf(stderr, "forward: %s\n", e.msg);
        free(lg);
        return NULL;
    }
    eng_session_free(s);
    return lg;
}

static double max_diff(const float *a, const float *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Replay the journal into a fresh overlay and attach it. */
static ed_overlay *replay(vx_journal *j, const brw_model *bm, eng_model *m)
{
    vx_op *ops;
    size_t n;
    vx_err e = {0};
    ed_overlay *ov = NULL;
    if (vx_journal_active_ops(j, &ops, &n, &e) || ed_overlay_build(bm, ops, n, &ov, &e))
        fprintf(stderr, "replay: %s\n", e.msg);
    vx_ops_free(ops, n);
    eng_model_set_overlay(m, ov ? ed_overlay_eng(ov) : NULL);
    return ov;
}

static void record1(vx_journal *j, const vx_op *op)
{
    vx_err e = {0};
    vx_record_info info;
    CHECK_MSG(vx_journal_record(j, "edit", op, 1, &info, &e) == 0, "%s", e.msg);
}

static void undo1(vx_journal *j)
{
    int64_t n;
    vx_err e = {0};
    CHECK(vx_journal_undo(j, &n, &e) == 0 && n > 0);
}

/* op made afresh as a kind at (layer, feature) carrying down_meta token id `id`. */
static void meta_op(vx_op *op, vx_op_kind kind, int layer, int feature, int64_t id)
{
    vx_op_clear(op);
    vx_op_init(op, kind);
    op->layer = layer;
    op->feature = feature;
    op->has_meta = 1;
    op->meta_id = id;
}

int main(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/h8-edit-tiny.vindex3", LQL_BINARY_DIR);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        return 1;
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.finish = brw_encode_finish;
    o.finish_ctx = &o;
    vx_err e = {0};
    vx_container *c = NULL;
    brw_model *bm = NULL;
    eng_model *m = NULL;
    vx_journal *j = NULL;
    if (vx_encode(TINY, dir, &o, &e) || vx_open(dir, &c, &e) || brw_open(c, &bm, &e) ||
        eng_model_bind(c, &m, &e) ||
        vx_journal_open(":memory:", vx_index_sha256(c), "tinyllama", &j, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    const int H = eng_model_hidden(m), V = eng_model_vocab(m);
    const int F = eng_model_ffn_features(m, LAYER);
    int32_t *ids;
    size_t nid;
    CHECK(eng_tok_encode(eng_model_tokenizer(m), PROMPT, strlen(PROMPT), 1, &ids, &nid, &e) == 0);

    /* base logits, and the feature that fires hardest at LAYER on the last position */
    probe p = {LAYER, 0, NULL};
    float *base = logits_of(m, ids, (int)nid, &p);
    CHECK(base && p.act && p.features == F);
    int f = 0;
    for (int i = 1; i < F; i++)
        if (fabsf(p.act[i]) > fabsf(p.act[f]))
            f = i;
    printf("silencing L%d F%d (activation %.4f)\n", LAYER, f, p.act[f]);
    const vx_tensor *down = vx_findf(c, "target.decoder_stack", "layers.%d.ffn.down_proj", LAYER);
    CHECK(down && down->dtype == VX_F32 && down->shape[0] == H && down->shape[1] == F);
    float *col = malloc((size_t)H * sizeof *col), *zero = calloc((size_t)H, sizeof *zero);
    for (int h = 0; h < H; h++)
        col[h] = ((const float *)down->data)[(size_t)h * F + f];

    /* 1. tombstone */
    vx_op op;
    vx_op_init(&op, VX_OP_DELETE);
    op.layer = LAYER;
    op.feature = f;
    record1(j, &op);
    ed_overlay *ov = replay(j, bm, m);
    float *tomb = logits_of(m, ids, (int)nid, NULL);
    double d_tomb = max_diff(base, tomb, V);
    CHECK_MSG(d_tomb > 1e-3, "tombstoning the strongest feature changed logits by %g", d_tomb);
    ed_counts cnt;
    ed_overlay_counts(ov, &cnt);
    CHECK(cnt.ops == 1 && cnt.tombstones == 1 && cnt.features == 1);
    CHECK(ed_is_tombstone(ov, LAYER, f) && !ed_is_tombstone(ov, LAYER, f + 1));
    /* browse drops the tombstone from gate KNN */
    {
        float *q = malloc((size_t)H * sizeof *q);
        int32_t tok;
        int layers[1] = {LAYER}, counts[1];
        brw_hit hits[2000];
        CHECK(brw_walk_query(bm, PROMPT, q, &tok, &e) == 0);
        CHECK(brw_gate_knn(bm, layers, 1, q, F, ed_overlay_eng(ov), hits, counts, &e) == 0);
        int seen = 0;
        for (int i = 0; i < counts[0]; i++)
            seen |= hits[i].feature == f;
        CHECK(!seen && counts[0] == F - 1);
        free(q);
    }
    undo1(j);
    ed_overlay_free(ov);
    ov = replay(j, bm, m);
    float *again = logits_of(m, ids, (int)nid, NULL);
    ed_overlay_counts(ov, &cnt);
    CHECK(cnt.ops == 0 && cnt.features == 0 && ed_overlay_eng(ov)->n_edits == 0);
    CHECK_MSG(max_diff(base, again, V) == 0, "after UNDO logits differ by %g",
              max_diff(base, again, V));
    free(again);
    ed_overlay_free(ov);

    /* 2. a replacement down column of zeros silences it the same way */
    vx_op_clear(&op);
    vx_op_init(&op, VX_OP_UPDATE);
    op.layer = LAYER;
    op.feature = f;
    vx_op_set_vec(&op, "down", 1, H, zero, NULL);
    record1(j, &op);
    ov = replay(j, bm, m);
    float *zcol = logits_of(m, ids, (int)nid, NULL);
    CHECK_MSG(max_diff(tomb, zcol, V) < 1e-4, "zero column vs tombstone: %g",
              max_diff(tomb, zcol, V));
    undo1(j);
    ed_overlay_free(ov);

    /* 3. the base column itself changes nothing */
    vx_op_set_vec(&op, "down", 1, H, col, NULL);
    record1(j, &op);
    ov = replay(j, bm, m);
    float *same = logits_of(m, ids, (int)nid, NULL);
    CHECK_MSG(max_diff(base, same, V) < 1e-4, "identical column: %g", max_diff(base, same, V));
    undo1(j);
    ed_overlay_free(ov);

    /* 4. a rank-1 delta cancelling the column: u = -down[:, f], v = e_f */
    vx_op_clear(&op);
    vx_op_init(&op, VX_OP_INSERT);
    op.layer = LAYER;
    op.feature = -1;
    float *u = calloc((size_t)H * 2, sizeof *u), *v = calloc((size_t)F, sizeof *v);
    for (int h = 0; h < H; h++)
        u[h] = -col[h];
    v[f] = 1;
    vx_op_set_vec(&op, "u", H, 1, u, NULL);
    vx_op_set_vec(&op, "v", F, 1, v, NULL);
    record1(j, &op);
    ov = replay(j, bm, m);
    ed_overlay_counts(ov, &cnt);
    CHECK(cnt.lowrank == 1 && cnt.features == 0);
    float *lr = logits_of(m, ids, (int)nid, NULL);
    CHECK_MSG(max_diff(tomb, lr, V) < 1e-4, "low-rank cancel vs tombstone: %g",
              max_diff(tomb, lr, V));
    ed_overlay_free(ov);
    ov = NULL;

    /* 5. metadata overrides reach browse; an insert clears a tombstone */
    vx_op_clear(&op);
    vx_op_init(&op, VX_OP_DELETE);
    op.layer = 1;
    op.feature = 5;
    record1(j, &op);
    meta_op(&op, VX_OP_INSERT, 1, 5, 1234);
    op.meta_c = 0.5;
    vx_op_set_str(&op.entity, "e", NULL);
    vx_op_set_str(&op.target, "t", NULL);
    /* an insert writes weights: without a vector it is refused (it would only relabel) */
    CHECK(ed_check_op(bm, &op, "operation 2", &e) == -1);
    CHECK_STR(e.msg, "operation 2 (insert): no gate, up or down vector: an insert writes the "
                     "feature's weights (UPDATE sets metadata alone)");
    vx_op_set_vec(&op, "gate", 1, H, u, NULL);   /* the reference's shape: a gate row */
    record1(j, &op);
    ov = replay(j, bm, m);
    brw_meta md;
    CHECK(brw_feature_meta(bm, ed_overlay_eng(ov), 1, 5, &md) == 0);
    CHECK(md.present && md.top_id == 1234);
    CHECK_NEAR(md.c_score, 0.5, 0);
    CHECK(!ed_is_tombstone(ov, 1, 5));
    ed_overlay_counts(ov, &cnt);
    CHECK(cnt.ops == 3 && cnt.meta == 1 && cnt.lowrank == 1 && cnt.tombstones == 0);
    ed_overlay_free(ov);

    /* 6. operations that do not fit the model */
    vx_op_clear(&op);
    vx_op_init(&op, VX_OP_DELETE);
    op.layer = 4;
    op.feature = 0;
    CHECK(ed_check_op(bm, &op, "operation 1", &e) == -1);
    CHECK_STR(e.msg, "operation 1 (delete): layer 4 is out of range (the model has 4 layers: 0-3)");
    op.layer = 0;
    op.feature = F;
    CHECK(ed_check_op(bm, &op, "operation 1", &e) == -1);
    CHECK_STR(e.msg, "operation 1 (delete): feature 768 is out of range (layer 0 has features 0-767)");
    op.kind = VX_OP_UPDATE;
    op.feature = 0;
    vx_op_set_vec(&op, "gate", 1, 8, zero, NULL);
    CHECK(ed_check_op(bm, &op, "operation 2", &e) == -1);
    CHECK_STR(e.msg, "operation 2 (update): the gate vector holds 8 floats; the model's hidden size is 256");
    vx_op_clear(&op);
    vx_op_init(&op, VX_OP_INSERT_KNN);
    op.layer = 0;
    CHECK(ed_check_op(bm, &op, "operation 3", &e) == -1);
    CHECK_STR(e.msg, "operation 3 (insert_knn): the key must hold 256 floats (the model's hidden size)");
    CHECK(e.code == VX_EFORMAT);
    vx_op_clear(&op);
    vx_op_init(&op, VX_OP_INSERT);
    op.layer = 0;
    vx_op_set_vec(&op, "u", H, 2, u, NULL);
    vx_op_set_vec(&op, "v", F, 1, v, NULL);
    CHECK(ed_check_op(bm, &op, "operation 4", &e) == -1);
    CHECK_STR(e.msg, "operation 4 (insert): low-rank shapes u [256, 2] and v [768, 1] do not "
                     "fit layer 0 (hidden 256, 768 features)");
    /* what the statements refuse, a hand-edited patch may not bring in (all were applied) */
    meta_op(&op, VX_OP_UPDATE, 0, 3, 99999);
    CHECK(ed_check_op(bm, &op, "operation 5", &e) == -1);
    CHECK_STR(e.msg, "operation 5 (update): down_meta token id 99999 is out of range "
                     "(vocabulary 0-4095)");
    op.meta_id = 7;
    op.meta_c = INFINITY;
    CHECK(ed_check_op(bm, &op, "operation 5", &e) == -1);
    CHECK_STR(e.msg, "operation 5 (update): down_meta c_score inf is not a finite 32-bit float");
    op.meta_c = 1e300;   /* finite as a double, infinite as the f32 it is stored in */
    CHECK(ed_check_op(bm, &op, "operation 5", &e) == -1);
    op.meta_c = 7;   /* a c_score is no probability: above 1 is fine */
    CHECK(ed_check_op(bm, &op, "operation 5", &e) == 0);
    op.has_meta = 0;
    CHECK(ed_check_op(bm, &op, "operation 5", &e) == -1);
    CHECK_STR(e.msg, "operation 5 (update): changes nothing (no down_meta, no vectors)");
    op.has_meta = 1;
    op.confidence = -2;
    CHECK(ed_check_op(bm, &op, "operation 5", &e) == -1);
    CHECK_STR(e.msg, "operation 5 (update): confidence must be between 0 and 1 (got -2)");
    vx_op_clear(&op);
    /* a non-finite float in a vector (a journal op from before the digests): refused by
     * name, not replayed into logits every INFER then blamed on the weights */
    vx_op_init(&op, VX_OP_UPDATE);
    op.layer = 0;
    op.feature = 0;
    zero[5] = NAN;
    vx_op_set_vec(&op, "gate", 1, H, zero, NULL);
    zero[5] = 0;
    CHECK(ed_check_op(bm, &op, "operation 6", &e) == -1);
    CHECK_STR(e.msg, "operation 6 (update): vector 'gate' holds a non-finite value at index 5");
    CHECK(e.code == VX_EFORMAT);
    vx_op_clear(&op);

    eng_model_set_overlay(m, NULL);
    free(u);
    free(v);
    free(col);
    free(zero);
    free(base);
    free(tomb);
    free(zcol);
    free(same);
    free(lr);
    free(p.act);
    free(ids);
    vx_journal_close(j);
    eng_model_free(m);
    brw_close(bm);
    vx_close(c);
    if (t_fail == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return T_DONE();
}
