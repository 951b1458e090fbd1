/*
 * test_browse_screen.c — down-meta's screened pass (downmeta.c) writes exactly the records
 * of the exhaustive one: for every feature of every layer, the top 10 of
 * eng_row_dot(E[v], down[:, f]) over the whole vocabulary by (logit desc, id asc), ids and
 * logits bit for bit. Checked for every screen the CPU has (int8 with AVX512-VNNI or AVX2,
 * bf16 with AVX512-BF16, f32) on tinyllama stored as f32 (the int8 and bf16 screens quantise a
 * copy of the embedding, so their bounds carry the rounding of both operands), on
 * tinyllama-bf16, with LQL_NO_AVX512=1, and on a generated llama of uneven sizes (100
 * features a layer, 600 vocabulary rows); and that without the bound (margin zero) the
 * fastest screen's records come out wrong. Also eng_matmul_bf16 against a float64 product
 * within its stated bound and eng_matmul_u8s8 against exact integer sums.
 */
#include "brw_int.h"
#include "t.h"
#include "t_browse.h"

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

#define NREC 3072   /* tinyllama: 4 layers × 768 features (the most a checkpoint here has) */

/* The exhaustive exact pass's records: ids and logits of every feature, 10 each. */
typedef struct ref {
    int n;
    int32_t id[NREC][10];
    float lg[NREC][10];
} ref;

static void build_ref(const char *dir, ref *r, const char *what)
{
    vx_container *c;
    brw_model *m;
    if (t_open_browse(dir, &c, &m, what) != 0) return;
    const vx_tensor *E = m->s.embed;
    const int V = m->s.vocab, H = m->s.hidden;
    const size_t esz = E->dtype == VX_F32 ? 4 : 2;
    float *d = malloc((size_t)H * sizeof *d), *lg = malloc((size_t)V * sizeof *lg);
    int total = 0;
    for (int l = 0; l < m->s.layers; l++) {
        const vx_tensor *D = m->s.layer[l].parts[0].down;
        const int64_t I = D->shape[1];
        for (int64_t f = 0; f < I && total < NREC; f++, total++) {
            for (int h = 0; h < H; h++) d[h] = elem(D, (size_t)h * (size_t)I + (size_t)f);
            for (int v = 0; v < V; v++)
                lg[v] = eng_row_dot(E->dtype, (const uint8_t *)E->data + (size_t)v * H * esz, d, H);
            for (int j = 0; j < 10; j++) {
                int best = -1;   /* the j-th by (logit desc, id asc): strictly after j - 1 */
                for (int v = 0; v < V; v++) {
                    if (j > 0 && !(lg[v] < r->lg[total][j - 1] ||
                                   (lg[v] == r->lg[total][j - 1] && v > r->id[total][j - 1])))
                        continue;
                    if (best < 0 || lg[v] > lg[best]) best = v;
                }
                r->id[total][j] = best;
                r->lg[total][j] = lg[best];
            }
        }
    }
    r->n = total;
    free(d);
    free(lg);
    brw_close(m);
    vx_close(c);
}

/* How many of the container's down-meta records differ from the exhaustive pass's. */
static int count_bad(const char *dir, const ref *r, const char *what)
{
    vx_container *c;
    brw_model *m;
    if (t_open_browse(dir, &c, &m, what) != 0) return -1;
    int bad = 0, total = 0;
    for (int l = 0; l < m->s.layers; l++)
        for (int64_t f = 0; f < m->s.layer[l].features && total < r->n; f++, total++) {
            brw_meta md;
            CHECK(brw_dmet_get(m->dmet, l, f, &md) == 0 && md.present && md.k == 10);
            int ok = md.top_id == md.ids[0] && md.c_score == md.logits[0];
            for (int j = 0; j < 10 && ok; j++)
                ok = md.ids[j] == r->id[total][j] && memcmp(&md.logits[j], &r->lg[total][j], 4) == 0;
            if (!ok && bad++ < 3)
                printf("%s: L%d F%lld differs from the exhaustive pass (top %d %.9g)\n", what, l,
                       (long long)f, md.ids[0], md.logits[0]);
        }
    CHECK(total == r->n);
    brw_close(m);
    vx_close(c);
    return bad;
}

/* Every screen this CPU has writes the exhaustive pass's records bit for bit. */
static void check_paths(const char *src, const char *out, const char *what, ref *r)
{
    static const struct { int screen; const char *name; } paths[] = {
        {0, "fastest screen"}, {2, "bf16 screen"}, {1, "f32 screen"}};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        char name[256];
        snprintf(name, sizeof name, "%s, %s", what, paths[i].name);
        brw_downmeta_test_set(paths[i].screen, 0);
        if (t_encode_browse(src, out, 1, name) != 0) continue;
        if (i == 0) build_ref(out, r, name);
        const int bad = count_bad(out, r, name);
        CHECK_MSG(bad == 0, "%s: %d of %d records differ from the exhaustive pass", name, bad, r->n);
    }
    brw_downmeta_test_set(0, 0);
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

/* eng_matmul_u8s8 on awkward sizes against exact integer sums: equal, every one (132
 * columns take vpdpbusd or AVX2's pair sums, 256 AMX-INT8's tiles where the CPU has them:
 * rows off the 32-row block, an odd last token vector), x at the extremes of the range
 * this CPU's product takes (eng_u8s8_x_limit); one x past a narrower limit is refused. */
static void check_kernel_u8s8(int cols)
{
    const int rows = 103, n = 70, lim = eng_u8s8_x_limit();
    uint8_t *w = malloc((size_t)rows * cols);
    int8_t *x = malloc((size_t)n * cols);
    int32_t *y = malloc((size_t)n * rows * sizeof *y);
    uint32_t s = 777;
    for (int i = 0; i < rows * cols; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = i % 11 == 0 ? 255 : (uint8_t)(s >> 24);   /* the extremes too */
    }
    for (int i = 0; i < n * cols; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (int8_t)(i % 13 == 0 ? -lim : i % 17 == 0 ? lim : (int)(s >> 24) % (2 * lim + 1) - lim);
    }
    printf("eng_matmul_u8s8, %d columns: |x| <= %d\n", cols, lim);
    CHECK(lim == 127 || lim == 64);
    CHECK(eng_matmul_u8s8(w, rows, cols, (size_t)cols, x, n, y) == 0);
    int bad = 0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            int64_t ex = 0;
            for (int k = 0; k < cols; k++) ex += (int64_t)w[r * cols + k] * x[t * cols + k];
            bad += y[(size_t)t * rows + r] != ex;
        }
    CHECK_MSG(bad == 0, "eng_matmul_u8s8: %d of %d sums differ from the exact ones", bad, rows * n);
    CHECK(eng_matmul_u8s8(w, rows, cols - 2, (size_t)cols, x, n, y) == -1);
    if (lim < 127) {
        x[(size_t)(n - 1) * cols + 5] = (int8_t)(-lim - 1);
        CHECK(eng_matmul_u8s8(w, rows, cols, (size_t)cols, x, n, y) == -1);
    }
    free(w);
    free(x);
    free(y);
}

int main(void)
{
    char out[4096];
    snprintf(out, sizeof out, "%s/screen-tiny.vindex3", LQL_BINARY_DIR);
    printf("screens: int8 (|x| <= %d), bf16 %s\n", eng_u8s8_x_limit(),
           eng_bf16_dot_ready() ? "yes" : "no");
    check_kernel();
    check_kernel_u8s8(132);
    check_kernel_u8s8(256);
    ref *r = calloc(1, sizeof *r);
    check_paths(LQL_FIXTURE_DIR "/models/tinyllama", out, "tinyllama f32", r);
    /* the bound is what makes them exact: without it the fastest screen's records differ
     * (int8 or bf16 rounding of the f32 embedding; r is tinyllama f32's reference) */
    brw_downmeta_test_set(0, 1);
    if (t_encode_browse(LQL_FIXTURE_DIR "/models/tinyllama", out, 1, "zero margin") == 0) {
        const int bad = count_bad(out, r, "tinyllama f32, fastest screen, zero margin");
        printf("zero margin: %d of %d records differ\n", bad, r->n);
        CHECK(bad > 0);
    }
    brw_downmeta_test_set(0, 0);
    check_paths(LQL_FIXTURE_DIR "/models/tinyllama-bf16", out, "tinyllama bf16", r);
    setenv("LQL_NO_AVX512", "1", 1);
    check_paths(LQL_FIXTURE_DIR "/models/tinyllama", out, "tinyllama f32, LQL_NO_AVX512=1", r);
    unsetenv("LQL_NO_AVX512");
    /* uneven sizes: 100 features a layer (a chunk's last 64-feature block ends 4 features
     * into a 16-feature group) and 600 vocabulary rows (a short last row block); the
     * 512-token tokenizer of the llama-gqa fixture names the first 512 */
    char hf[4096], cmd[12288];
    snprintf(hf, sizeof hf, "%s/screen-odd-hf", LQL_BINARY_DIR);
    t_rm_rf(hf);
    snprintf(cmd, sizeof cmd, "'%s/mkfixture' --family llama --hidden 64 --layers 2 --heads 4 "
             "--kv-heads 2 --inter 100 --vocab 600 --dtype bf16 --seed 7 --tokenizer "
             "'%s/models/families/llama-gqa/tokenizer.json' -o '%s' > /dev/null",
             LQL_BINARY_DIR, LQL_FIXTURE_DIR, hf);
    CHECK(system(cmd) == 0);
    check_paths(hf, out, "llama 2 x 100 features, vocab 600", r);
    CHECK(r->n == 200);
    t_rm_rf(hf);
    free(r);
    t_rm_rf(out);
    return T_DONE();
}
