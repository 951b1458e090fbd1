/*
 * test_browse_screen.c — down-meta's screened pass (downmeta.c) writes exactly the records
 * of the exhaustive one: for every feature of every layer, the top 10 of
 * eng_row_dot(E[v], down[:, f]) over the whole vocabulary by (logit desc, id asc), ids and
 * logits bit for bit. Checked on tinyllama stored as f32 (the bf16 screen reads a rounded
 * copy of the embedding, so its bound carries the rounding of both operands), on
 * tinyllama-bf16 (the embedding read in place, bound = summation only), and on the f32
 * screen (LQL_NO_AVX512=1). Also eng_matmul_bf16 against a float64 product within its
 * stated bound.
 */
#include "brw_int.h"
#include "t.h"
#include "t_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float elem(const vx_tensor *t, size_t i)
{
    float x = 0;
    vx_row_to_f32(t->dtype, (const uint8_t *)t->data + i * (t->dtype == VX_F32 ? 4 : 2), &x, 1);
    return x;
}

/* Every record of the container's down-meta against the exhaustive exact pass. */
static void check_exhaustive(const char *dir, const char *what)
{
    vx_err err = {0};
    vx_container *c = NULL;
    brw_model *m = NULL;
    CHECK_MSG(vx_open(dir, &c, &err) == 0 && brw_open(c, &m, &err) == 0, "%s: %s", what, err.msg);
    if (!m) {
        vx_close(c);
        return;
    }
    const vx_tensor *E = m->s.embed;
    const int V = m->s.vocab, H = m->s.hidden;
    const size_t esz = E->dtype == VX_F32 ? 4 : 2;
    float *d = malloc((size_t)H * sizeof *d), *lg = malloc((size_t)V * sizeof *lg);
    int bad = 0, total = 0;
    for (int l = 0; l < m->s.layers; l++) {
        const vx_tensor *D = m->s.layer[l].parts[0].down;
        const int64_t I = D->shape[1];
        for (int64_t f = 0; f < I; f++) {
            for (int h = 0; h < H; h++) d[h] = elem(D, (size_t)h * (size_t)I + (size_t)f);
            for (int v = 0; v < V; v++)
                lg[v] = eng_row_dot(E->dtype, (const uint8_t *)E->data + (size_t)v * H * esz, d, H);
            brw_meta md;
            CHECK(brw_dmet_get(m->dmet, l, f, &md) == 0 && md.present && md.k == 10);
            int ok = md.top_id == md.ids[0] && md.c_score == md.logits[0];
            for (int j = 0; j < 10 && ok; j++) {
                int best = -1;   /* the j-th by (logit desc, id asc): strictly after j - 1 */
                for (int v = 0; v < V; v++) {
                    if (j > 0 && !(lg[v] < md.logits[j - 1] ||
                                   (lg[v] == md.logits[j - 1] && v > md.ids[j - 1])))
                        continue;
                    if (best < 0 || lg[v] > lg[best]) best = v;
                }
                ok = md.ids[j] == best && memcmp(&md.logits[j], &lg[best], 4) == 0;
            }
            if (!ok && bad++ < 3)
                printf("%s: L%d F%lld differs from the exhaustive pass (top %d %.9g)\n", what, l,
                       (long long)f, md.ids[0], md.logits[0]);
            total++;
        }
    }
    CHECK_MSG(bad == 0, "%s: %d of %d records differ from the exhaustive pass", what, bad, total);
    CHECK(total == 3072);
    free(d);
    free(lg);
    brw_close(m);
    vx_close(c);
}

static void encode_check(const char *src, const char *out, const char *what)
{
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.finish = brw_encode_finish;
    o.finish_ctx = &o;
    vx_err err = {0};
    t_rm_rf(out);
    CHECK_MSG(vx_encode(src, out, &o, &err) == 0, "%s: encode: %s", what, err.msg);
    check_exhaustive(out, what);
    t_rm_rf(out);
}

/* eng_matmul_bf16 on awkward sizes (rows not a multiple of 6, tokens not of 64) against a
 * float64 product of the same bf16 values, within the stated bound. */
static void check_kernel(void)
{
    const int rows = 103, cols = 130, n = 70;
    uint16_t *w = malloc((size_t)rows * cols * 2), *x = malloc((size_t)n * cols * 2);
    float *y = malloc((size_t)n * rows * sizeof *y);
    uint32_t s = 12345;
    for (int i = 0; i < rows * cols; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = vx_f32_to_bf16(((float)(s >> 8) / 16777216.0f - 0.5f) * (i % 7 == 0 ? 300 : 1));
    }
    for (int i = 0; i < n * cols; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = vx_f32_to_bf16((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    if (eng_matmul_bf16(w, rows, cols, (size_t)cols * 2, x, n, y) != 0) {
        printf("eng_matmul_bf16: not on this CPU (AVX512-BF16 absent or LQL_NO_AVX512=1)\n");
        CHECK(!eng_bf16_dot_ready());
        free(w);
        free(x);
        free(y);
        return;
    }
    double worst = 0;   /* error / bound */
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            double ex = 0, ab = 0, nx = 0, nw = 0;
            for (int k = 0; k < cols; k++) {
                double a = vx_bf16_to_f32(w[r * cols + k]), b = vx_bf16_to_f32(x[t * cols + k]);
                ex += a * b;
                ab += fabs(a * b);
                nx += b * b;
                nw += a * a;
            }
            double bound = eng_sum_gamma(cols) * ab + eng_bf16_sum_slack(cols, sqrt(nx), sqrt(nw));
            double e = fabs(y[(size_t)t * rows + r] - ex) / bound;
            worst = e > worst ? e : worst;
        }
    printf("eng_matmul_bf16: worst error %.3f of the bound\n", worst);
    CHECK(worst <= 1);
    free(w);
    free(x);
    free(y);
}

int main(void)
{
    char out[4096];
    snprintf(out, sizeof out, "%s/screen-tiny.vindex3", LQL_BINARY_DIR);
    printf("screen: %s\n", eng_bf16_dot_ready() ? "bf16 (AVX512-BF16)" : "f32 (eng_matmul_rows)");
    check_kernel();
    encode_check(LQL_FIXTURE_DIR "/models/tinyllama", out, "tinyllama f32");
    encode_check(LQL_FIXTURE_DIR "/models/tinyllama-bf16", out, "tinyllama bf16");
    setenv("LQL_NO_AVX512", "1", 1);
    encode_check(LQL_FIXTURE_DIR "/models/tinyllama", out, "tinyllama f32, LQL_NO_AVX512=1");
    unsetenv("LQL_NO_AVX512");
    return T_DONE();
}
