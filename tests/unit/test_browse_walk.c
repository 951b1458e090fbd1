/*
 * test_browse_walk.c — WALK's three ranking modes against a float64 recomputation over
 * every feature of every layer, on real fixtures encoded into the build tree:
 *   - tinyllama (gated, silu): HYBRID |g|, PURE signed g, DENSE |silu(g)·u|;
 *   - gpt2 (plain MLP, gelu_tanh, c_fc bias): DENSE |gelu(u + b)|;
 *   - mixtral (MoE, expert-major numbering): DENSE per expert;
 * plus the overlay (a replacement up row moves a feature in DENSE only; a tombstone drops
 * it), the bytes each mode reads, and the mode names.
 */
#include "test_walk_ref.h"
#include "t_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAM LQL_FIXTURE_DIR "/models/families"

static int open_fixture(const char *hf, const char *tag, vx_container **c, brw_model **m)
{
    char out[4096];
    snprintf(out, sizeof out, "%s/h12-walk-%s.vindex3", LQL_BINARY_DIR, tag);
    if (t_rm_rf(out) != 0)
        return -1;
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    vx_err err = {0};
    *c = NULL;
    *m = NULL;
    CHECK_MSG(vx_encode(hf, out, &o, &err) == 0, "encode %s: %s", tag, err.msg);
    CHECK_MSG(vx_open(out, c, &err) == 0, "open %s: %s", tag, err.msg);
    CHECK_MSG(*c && brw_open(*c, m, &err) == 0, "brw_open %s: %s", tag, err.msg);
    return *m ? 0 : -1;
}

static void close_fixture(vx_container *c, brw_model *m, const char *tag)
{
    char cmd[4200];
    brw_close(m);
    vx_close(c);
    snprintf(cmd, sizeof cmd, "rm -rf '%s/h12-walk-%s.vindex3'", LQL_BINARY_DIR, tag);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove the %s container\n", tag);
}

static void tiny(void)
{
    vx_container *c;
    brw_model *m;
    if (open_fixture(LQL_FIXTURE_DIR "/models/tinyllama", "tiny", &c, &m) != 0)
        return;
    const char *p = "The capital of France is";
    CHECK(m->s.gated && m->s.act == 0);
    wr_check_mode(m, "tiny hybrid", p, BRW_HYBRID, 10);
    wr_check_mode(m, "tiny pure", p, BRW_PURE, 10);
    wr_check_mode(m, "tiny dense", p, BRW_DENSE, 10);
    wr_check_mode(m, "tiny dense all", p, BRW_DENSE, 768);
    wr_check_mode(m, "tiny pure 2", "Paris", BRW_PURE, 25);

    /* pinned values (browse_walk.lql shows the same) */
    brw_walk_opts o = {.top = 3, .layer_lo = 0, .layer_hi = 0, .mode = BRW_PURE};
    brw_walk w;
    vx_err err = {0};
    CHECK(brw_walk_run(m, p, &o, &w, &err) == 0);
    CHECK(w.counts[0] == 3 && w.hits[0].feature == 739 && w.hits[1].feature == 248 &&
          w.hits[2].feature == 763);
    CHECK_NEAR(w.hits[1].score, 0.2858, 1e-4);
    CHECK(w.hits[2].score == w.hits[2].gate);
    brw_walk_free(&w);
    o.mode = BRW_DENSE;
    CHECK(brw_walk_run(m, p, &o, &w, &err) == 0);
    CHECK(w.hits[0].feature == 739 && w.hits[2].feature == 116);
    CHECK_NEAR(w.hits[0].gate, 0.2942, 1e-4);
    CHECK_NEAR(w.hits[0].score, 0.0493, 1e-4);
    CHECK(w.bytes_scanned == 2ull * m->s.layer[0].gate_bytes);
    int64_t second = w.hits[1].feature;
    brw_walk_free(&w);

    /* overlay: a replacement up row of 10·q/|q|² makes feature 5's u = 10, so in DENSE it
     * ranks by |silu(g)·10| while HYBRID (gate rows only) does not move it; a tombstone
     * on the second DENSE hit drops it */
    float *q = malloc((size_t)m->s.hidden * sizeof *q), *up = malloc((size_t)m->s.hidden * 4);
    int32_t tok;
    CHECK(brw_walk_query(m, p, q, &tok, &err) == 0);
    double qq = 0;
    for (int i = 0; i < m->s.hidden; i++)
        qq += (double)q[i] * q[i];
    for (int i = 0; i < m->s.hidden; i++)
        up[i] = (float)(10.0 * q[i] / qq);
    eng_feature_edit ed[2] = {{.layer = 0, .feature = 5, .up = up},
                              {.layer = 0, .feature = (int)second, .tombstone = 1}};
    eng_overlay eo = {ed, 2, NULL, 0, NULL, 0};
    o.ov = &eo;
    CHECK(brw_walk_run(m, p, &o, &w, &err) == 0);
    double g5 = wr_dot64(m->s.layer[0].parts[0].gate, 5, q, m->s.hidden);
    double a5 = wr_act64(0, g5) * 10;
    int at5 = -1, has2 = 0;
    for (int j = 0; j < w.counts[0]; j++) {
        at5 = w.hits[j].feature == 5 ? j : at5;
        has2 |= w.hits[j].feature == second;
    }
    CHECK_MSG(at5 == 0, "feature 5 at %d (act %g)", at5, a5);
    if (at5 == 0)
        CHECK_NEAR(w.hits[0].score, a5, 1e-4 * fabs(a5));
    CHECK(!has2 && w.counts[0] == 3);
    brw_walk_free(&w);
    o.mode = BRW_HYBRID;
    CHECK(brw_walk_run(m, p, &o, &w, &err) == 0);
    CHECK(w.hits[0].feature == 739 && w.hits[1].feature == 90);
    brw_walk_free(&w);
    free(q);
    free(up);

    /* the knn entry point refuses an unknown mode */
    int layer = 0, cnt;
    brw_hit h[1];
    float z[256] = {0};
    CHECK(brw_gate_knn_mode(m, &layer, 1, z, 1, (brw_walk_mode)7, NULL, h, &cnt, &err) == -1);
    CHECK_STR(err.msg, "gate knn: unknown mode 7");
    CHECK_STR(brw_walk_mode_name(BRW_HYBRID), "hybrid");
    CHECK_STR(brw_walk_mode_name(BRW_PURE), "pure");
    CHECK_STR(brw_walk_mode_name(BRW_DENSE), "dense");
    close_fixture(c, m, "tiny");
}

static void gpt2(void)
{
    vx_container *c;
    brw_model *m;
    if (open_fixture(FAM "/gpt2", "gpt2", &c, &m) != 0)
        return;
    CHECK(!m->s.gated && m->s.act == 1);
    CHECK(m->s.layer[0].parts[0].bias && !m->s.layer[0].parts[0].up);
    CHECK(m->s.layer[0].up_bytes == m->s.layer[0].parts[0].bias->nbytes);
    wr_check_mode(m, "gpt2 hybrid", "The capital of France is", BRW_HYBRID, 10);
    wr_check_mode(m, "gpt2 pure", "The capital of France is", BRW_PURE, 10);
    wr_check_mode(m, "gpt2 dense", "The capital of France is", BRW_DENSE, 10);
    close_fixture(c, m, "gpt2");
}

static void mixtral(void)
{
    vx_container *c;
    brw_model *m;
    if (open_fixture(FAM "/mixtral", "mixtral", &c, &m) != 0)
        return;
    CHECK(m->s.layer[0].n_parts > 1 && m->s.layer[0].parts[1].up);
    wr_check_mode(m, "mixtral pure", "The capital of France is", BRW_PURE, 10);
    wr_check_mode(m, "mixtral dense", "The capital of France is", BRW_DENSE, 10);
    close_fixture(c, m, "mixtral");
}

int main(void)
{
    tiny();
    gpt2();
    mixtral();
    return T_DONE();
}
