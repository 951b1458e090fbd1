/*
 * test_kernels.c — the engine's pure kernels against naive float64 loops: eng_matmul in
 * every dtype on both paths (streaming GEMV for few rows, the AVX-512 or the AVX2 GEMM
 * for many — each run with and without LQL_NO_AVX512; odd widths, row counts that are not
 * a multiple of the 6-row block and token counts past one 64-token group exercise the
 * tails), the LQL_PREFILL_BF16=1 opt-in's bound, the transposed f32 view, norms, rope styles, activations,
 * softcap, softmax, and the sampler's determinism and filters; eng_matmul_shared equal to
 * eng_matmul bit for bit, and the AVX2 GEMM to the AVX-512 one; eng_matmul_t, the
 * transposed product.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "t.h"
#include "engine_int.h"
#include "qkernels.h"

static uint64_t rs = 88172645463325252ull;
static float rnd(void)
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Store a [rows, cols] matrix m (f32) as dtype dt in buf; returns the view. The values of
 * m are replaced by their rounded ones so the reference sees exactly what is stored. */
static eng_w store(vx_dtype dt, float *m, int rows, int cols, void *buf)
{
    eng_w w = {dt, buf, rows, cols, (size_t)cols * (dt == VX_F32 ? 4 : 2), 0, 0};
    for (size_t i = 0; i < (size_t)rows * cols; i++) {
        if (dt == VX_F32) ((float *)buf)[i] = m[i];
        else if (dt == VX_F16) { uint16_t h = vx_f32_to_f16(m[i]); ((uint16_t *)buf)[i] = h; m[i] = vx_f16_to_f32(h); }
        else { uint16_t h = vx_f32_to_bf16(m[i]); ((uint16_t *)buf)[i] = h; m[i] = vx_bf16_to_f32(h); }
    }
    return w;
}

/* Worst error of eng_matmul relative to 1 + |exact|; *vs_abs (if not NULL): the worst
 * relative to Σ|w·x|. */
static double matmul_err(vx_dtype dt, int rows, int cols, int n, double *vs_abs)
{
    float *m = malloc((size_t)rows * cols * 4), *x = malloc((size_t)n * cols * 4);
    float *y = malloc((size_t)n * rows * 4);
    void *buf = malloc((size_t)rows * cols * 4);
    for (size_t i = 0; i < (size_t)rows * cols; i++) m[i] = rnd();
    for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = rnd();
    eng_w w = store(dt, m, rows, cols, buf);
    eng_matmul(&w, x, n, y);
    double worst = 0, worst_abs = 0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            double s = 0, a = 0;
            for (int c = 0; c < cols; c++) {
                double p = (double)m[(size_t)r * cols + c] * x[(size_t)t * cols + c];
                s += p;
                a += fabs(p);
            }
            double e = fabs(s - y[(size_t)t * rows + r]);
            worst = fmax(worst, e / (1 + fabs(s)));
            worst_abs = fmax(worst_abs, e / a);
        }
    free(m); free(x); free(y); free(buf);
    if (vs_abs) *vs_abs = worst_abs;
    return worst;
}

/* A random [rows, cols] matrix m (with room to store it as any dtype), n random x rows and
 * two outputs, for tests that compare two products bit for bit. */
typedef struct pair {
    float *m, *x, *y0, *y1;
    void *buf;
} pair;

static pair pair_make(int rows, int cols, int n)
{
    pair p = {malloc((size_t)rows * cols * 4), malloc((size_t)n * cols * 4), malloc((size_t)n * rows * 4),
              malloc((size_t)n * rows * 4), malloc((size_t)rows * cols * 4)};
    for (size_t i = 0; i < (size_t)rows * cols; i++) p.m[i] = rnd();
    for (size_t i = 0; i < (size_t)n * cols; i++) p.x[i] = rnd();
    return p;
}

static void pair_free(pair *p)
{
    free(p->m); free(p->x); free(p->y0); free(p->y1); free(p->buf);
}

static void test_matmul(void)
{
    const vx_dtype dts[3] = {VX_F32, VX_F16, VX_BF16};
    const int shapes[][3] = {{45, 37, 1}, {64, 256, 1}, {33, 100, 3}, {130, 71, 8},
                             {97, 203, 9}, {300, 64, 40}, {7, 5, 2}, {50, 96, 17}, {64, 1024, 33}, {96, 1600, 20},
                             {131, 300, 70}, {13, 2048, 64}, {200, 520, 129}};
    /* error against Σ|w·x|: an f32 sum's rounding grows with its terms, not with its value;
     * relative to 1 + |exact| a 2048-column dot that cancels reached 2.02e-5 through
     * OpenBLAS's sgemm (LQL_NO_AVX512) on a host where its blocking summed in another order */
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            double a, e = matmul_err(dts[d], shapes[s][0], shapes[s][1], shapes[s][2], &a);
            CHECK_MSG(a < 1e-6 && e < 1e-4, "%s rows %d cols %d n %d: err / sum|w x| %g, / (1 + |exact|) %g",
                      vx_dtype_name(dts[d]), shapes[s][0], shapes[s][1], shapes[s][2], a, e);
        }
    /* 2-16 tokens in blocks of 4 rows by 4 tokens with AVX-512 (a last row alone; x in pairs'
     * order for bf16), 3 rows by up to 3 tokens with AVX2 (a last row or two alone), also past
     * the split's width and with a tail, against Σ|w·x| as above */
    const int few[][3] = {{97, 512, 5}, {64, 5632, 7}, {33, 4100, 2}, {18, 64, 8}, {3, 96, 3},
                          {97, 512, 9}, {64, 2048, 14}, {33, 4100, 16}, {131, 96, 11}};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof few / sizeof *few; s++) {
            double a;
            matmul_err(dts[d], few[s][0], few[s][1], few[s][2], &a);
            CHECK_MSG(a < 1e-6, "%s rows %d cols %d n %d: err / sum|w x| %g", vx_dtype_name(dts[d]),
                      few[s][0], few[s][1], few[s][2], a);
        }
    /* a row's value does not depend on the block or chunk that holds it: the same rows
     * through a view one row further on (the blocks shifted by one) are bit for bit equal */
    for (int d = 0; d < 3; d++)
        for (int n = 2; n <= 16; n += 7) {
            const int rows = 50, cols = 300;
            pair p = pair_make(rows, cols, n);
            eng_w w0 = store(dts[d], p.m, rows, cols, p.buf), w1 = w0;
            w1.data = (const char *)w0.data + w0.row_bytes;
            w1.rows = rows - 1;
            eng_matmul(&w0, p.x, n, p.y0);
            eng_matmul(&w1, p.x, n, p.y1);
            int same = 1;
            for (int t = 0; t < n; t++)
                for (int r = 0; r < rows - 1; r++)
                    same &= p.y0[(size_t)t * rows + r + 1] == p.y1[(size_t)t * (rows - 1) + r];
            CHECK_MSG(same, "%s n %d: rows 1.. through a shifted view differ", vx_dtype_name(dts[d]), n);
            pair_free(&p);
        }
    /* f16 and bf16 rows give the bits of the f32 rows of their values on every path: the
     * prefill GEMM widens them in registers or converts a tile first (eng_gemm_widens),
     * the same products in the same order either way */
    for (int d = 1; d < 3; d++)
        for (int n = 17; n <= 130; n += 56) {
            const int rows = 61, cols = 520;
            pair p = pair_make(rows, cols, n);
            eng_w wh = store(dts[d], p.m, rows, cols, p.buf);
            eng_w wf = {VX_F32, p.m, rows, cols, (size_t)cols * 4, 0, 0};
            eng_matmul(&wh, p.x, n, p.y0);
            eng_matmul(&wf, p.x, n, p.y1);
            CHECK_MSG(!memcmp(p.y0, p.y1, (size_t)n * rows * 4), "%s n %d: not the f32 rows' bits (%s)",
                      vx_dtype_name(dts[d]), n, eng_prefill_path(dts[d]));
            pair_free(&p);
        }
    /* transposed f32 view: W stored [cols, rows] */
    float st[3 * 2] = {1, 2, 3, 4, 5, 6};     /* [cols=3, rows=2] */
    eng_w w = {VX_F32, st, 2, 3, 0, 1, 0};
    float x[3] = {1, -1, 2}, y[2];
    eng_matmul(&w, x, 1, y);
    CHECK_NEAR(y[0], 1 * 1 - 3 + 2 * 5, 1e-6);
    CHECK_NEAR(y[1], 2 * 1 - 4 + 2 * 6, 1e-6);
    CHECK_NEAR(eng_w_at(&w, 1, 2), 6, 0);
    /* a transposed bf16 slice: rows 1..2 of a stored [4, 6] matrix read in-major, i.e. the
     * [6 out, 2 in] matrix W[r][c] = S[1 + c][r] */
    float sm[4 * 6];
    uint16_t sb[4 * 6];
    for (int i = 0; i < 24; i++) sm[i] = rnd();
    store(VX_BF16, sm, 4, 6, sb);
    eng_w ws = {VX_BF16, sb + 6, 6, 2, 12, 1, 0};
    float xs[2 * 2] = {0.5f, -2, 1, 3}, ys[2 * 6];
    eng_matmul(&ws, xs, 2, ys);
    double wt = 0;
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < 6; r++)
            wt = fmax(wt, fabs(ys[t * 6 + r] - (sm[6 + r] * xs[t * 2] + sm[12 + r] * xs[t * 2 + 1])));
    CHECK_NEAR(wt, 0, 1e-6);
    CHECK_NEAR(eng_w_at(&ws, 4, 1), sm[12 + 4], 0);
    /* dot row and element access on bf16 */
    float m[2 * 3] = {1, 2, 3, 0.5f, -1, 4};
    uint16_t b[6];
    eng_w wb = store(VX_BF16, m, 2, 3, b);
    CHECK_NEAR(eng_w_dot_row(&wb, 1, x), 0.5 + 1 + 8, 1e-6);
    CHECK_NEAR(eng_w_at(&wb, 1, 2), 4, 0);
    CHECK(eng_dtype_executable(VX_BF16) && !eng_dtype_executable(VX_I32));
    float da[37], db[37];
    double dref = 0;
    for (int i = 0; i < 37; i++) { da[i] = rnd(); db[i] = rnd(); dref += (double)da[i] * db[i]; }
    CHECK_NEAR(eng_dot(da, db, 37), dref, 1e-5);
}

/* eng_matmul_t, y[n, cols] = x[n, rows] · W, in f32/f16/bf16 against float64 (row counts
 * that leave a part a partial tile, one part, rows fewer than the threads), and on a
 * transposed view, where it is eng_matmul of the stored rows. */
static void test_matmul_t(void)
{
    const vx_dtype dts[3] = {VX_F32, VX_F16, VX_BF16};
    const int shapes[][3] = {{1, 5, 1}, {45, 37, 1}, {130, 71, 3}, {200, 64, 40}, {64, 2048, 2},
                             {3, 700, 65}};
    for (int d = 0; d < 3; d++)
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
            const int rows = shapes[k][0], cols = shapes[k][1], n = shapes[k][2];
            float *m = malloc((size_t)rows * cols * 4), *x = malloc((size_t)n * rows * 4);
            float *y = malloc((size_t)n * cols * 4);
            void *buf = malloc((size_t)rows * cols * 4);
            for (size_t i = 0; i < (size_t)rows * cols; i++) m[i] = rnd();
            for (size_t i = 0; i < (size_t)n * rows; i++) x[i] = rnd();
            eng_w w = store(dts[d], m, rows, cols, buf);
            CHECK(eng_matmul_t(&w, x, n, y) == 0);
            double worst = 0;
            for (int t = 0; t < n; t++)
                for (int c = 0; c < cols; c++) {
                    double sum = 0, a = 0;
                    for (int r = 0; r < rows; r++) {
                        const double p = (double)x[(size_t)t * rows + r] * m[(size_t)r * cols + c];
                        sum += p;
                        a += fabs(p);
                    }
                    worst = fmax(worst, fabs(sum - y[(size_t)t * cols + c]) / (a + 1e-30));
                }
            CHECK_MSG(worst < 1e-6, "%s rows %d cols %d n %d: err / sum|x w| %g",
                      vx_dtype_name(dts[d]), rows, cols, n, worst);
            free(m); free(x); free(y); free(buf);
        }
    /* a transposed view W[r][c] = S[c][r] of a stored [3, 2] S: y = x · W = S · x */
    float st[3 * 2] = {1, 2, 3, 4, 5, 6};
    eng_w w = {VX_F32, st, 2, 3, 0, 1, 0};
    float x[2] = {1, -1}, y[3];
    CHECK(eng_matmul_t(&w, x, 1, y) == 0);
    CHECK_NEAR(y[0], 1 - 2, 1e-6);
    CHECK_NEAR(y[1], 3 - 4, 1e-6);
    CHECK_NEAR(y[2], 5 - 6, 1e-6);
}

/* LQL_PREFILL_BF16=1: bf16 prefill products round x to bf16 (relative error at most 2^-9
 * per element, products exact, f32 sums), so each output is within 2^-8 · Σ|w·x| of the
 * exact one — and, on a CPU with AVX512-BF16, measurably off the f32 path (the opt-in
 * ran). Decode (n <= 8), odd widths and other dtypes stay f32-accurate. */
static void test_prefill_bf16_optin(void)
{
    const int shapes[][3] = {{131, 300, 70}, {13, 2048, 64}, {97, 203, 9}, {64, 256, 8}};
    setenv("LQL_PREFILL_BF16", "1", 1);
    const int on = eng_prefill_bf16_optin();
    CHECK(!on || strstr(eng_prefill_path(VX_BF16), "LQL_PREFILL_BF16"));
    CHECK(!strstr(eng_prefill_path(VX_F16), "LQL_PREFILL_BF16"));
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const int rows = shapes[k][0], cols = shapes[k][1], n = shapes[k][2];
        const int rounded = on && n > 8 && cols % 2 == 0;
        double worst, worst_f32 = matmul_err(VX_BF16, rows, cols, n, &worst);
        if (rounded) {
            CHECK_MSG(worst <= ldexp(1.0, -8), "rows %d cols %d n %d: err / sum|wx| %g", rows, cols, n, worst);
            CHECK_MSG(worst_f32 > 2e-5, "rows %d cols %d n %d: rel err %g, the opt-in did not run", rows,
                      cols, n, worst_f32);
        } else {   /* f32-accurate, judged as test_matmul judges it */
            CHECK_MSG(worst < 1e-6 && worst_f32 < 1e-4, "rows %d cols %d n %d: err / sum|wx| %g, rel err %g",
                      rows, cols, n, worst, worst_f32);
        }
    }
    unsetenv("LQL_PREFILL_BF16");
    CHECK(!eng_prefill_bf16_optin());
}

/* Block-quantised weights go through the block kernels: compare with the dequantised
 * matrix in float64 (the activation is rounded to 8 bits per block, hence the tolerance). */
static void test_quant_dispatch(void)
{
    const int rows = 40, cols = 256;
    float *m = malloc((size_t)rows * cols * 4), *deq = malloc((size_t)rows * cols * 4);
    unsigned char *q = malloc((size_t)rows * cols * 2);
    size_t rb = (size_t)cols / vx_dtype_block_elems(VX_Q8_0) * vx_dtype_block_bytes(VX_Q8_0);
    for (int i = 0; i < rows * cols; i++) m[i] = rnd();
    for (int r = 0; r < rows; r++) {
        CHECK(vx_quantize_row(VX_Q8_0, m + (size_t)r * cols, q + r * rb, (size_t)cols) == 0);
        CHECK(vx_dequantize_row(VX_Q8_0, q + r * rb, deq + (size_t)r * cols, (size_t)cols) == 0);
    }
    eng_w w = {VX_Q8_0, q, rows, cols, rb, 0, 0};
    CHECK(eng_dtype_executable(VX_Q8_0));
    CHECK_NEAR(eng_w_at(&w, 7, 100), deq[7 * cols + 100], 0);
    for (int n = 1; n <= 12; n += 11) {
        float *x = malloc((size_t)n * cols * 4), *y = malloc((size_t)n * rows * 4);
        for (int i = 0; i < n * cols; i++) x[i] = rnd();
        eng_matmul(&w, x, n, y);
        double worst = 0;
        for (int t = 0; t < n; t++)
            for (int r = 0; r < rows; r++) {
                double s = 0, a = 0;
                for (int c = 0; c < cols; c++) {
                    s += (double)deq[r * cols + c] * x[t * cols + c];
                    a += fabs((double)deq[r * cols + c] * x[t * cols + c]);
                }
                worst = fmax(worst, fabs(s - y[t * rows + r]) / a);
            }
        CHECK_MSG(worst < 1e-2, "q8_0 n %d: error %g of sum |w x|", n, worst);
        double s = 0;
        for (int c = 0; c < cols; c++) s += (double)deq[3 * cols + c] * x[c];
        CHECK_NEAR(eng_w_dot_row(&w, 3, x), s, 1e-4);
        free(x);
        free(y);
    }
    free(m); free(deq); free(q);
}

/* The integer prefill's block products on AMX-INT8 tiles equal the VNNI micro-kernel's bit
 * for bit (the same integer sums, scaled and added in the same order): Q8_0 read in place,
 * Q4_K (block mins) and Q4_0 from int8 tiles, row counts off the 16-row block (padded rows),
 * one and several 64-token groups, and a product wider than a chunk of k. On a CPU without
 * AMX-INT8 both runs take the VNNI kernel and the comparison holds trivially: the line
 * printed says which. */
static void test_amx_int8(void)
{
    const vx_dtype dts[3] = {VX_Q8_0, VX_Q4_K, VX_Q4_0};
    const int shapes[][3] = {{40, 256, 64}, {53, 512, 70}, {16, 2048, 17}, {100, 768, 130}};
    printf("integer prefill: %s\n", eng_prefill_path(VX_Q8_0));
    for (int d = 0; d < 3; d++)
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
            const int rows = shapes[k][0], cols = shapes[k][1], n = shapes[k][2];
            if (!eng_qprefill_int(dts[d])) continue;
            const size_t rb = (size_t)cols / vx_dtype_block_elems(dts[d]) * vx_dtype_block_bytes(dts[d]);
            float *m = malloc((size_t)rows * cols * 4), *x = malloc((size_t)n * cols * 4);
            float *y0 = malloc((size_t)n * rows * 4), *y1 = malloc((size_t)n * rows * 4);
            unsigned char *q = malloc((size_t)rows * rb);
            for (int i = 0; i < rows * cols; i++) m[i] = rnd();
            for (int i = 0; i < n * cols; i++) x[i] = rnd();
            for (int r = 0; r < rows; r++)
                CHECK(vx_quantize_row(dts[d], m + (size_t)r * cols, q + r * rb, (size_t)cols) == 0);
            eng_w w = {dts[d], q, rows, cols, rb, 0, 0};
            eng_matmul(&w, x, n, y0);
            setenv("LQL_NO_AMX", "1", 1);
            eng_matmul(&w, x, n, y1);
            unsetenv("LQL_NO_AMX");
            CHECK_MSG(!memcmp(y0, y1, (size_t)n * rows * 4), "%s rows %d cols %d n %d: AMX and VNNI differ",
                      vx_dtype_name(dts[d]), rows, cols, n);
            free(m); free(x); free(y0); free(y1); free(q);
        }
}

/* eng_matmul_shared against one eng_matmul per product, bit for bit: bf16 (pairs' order,
 * and past 4096 columns the split rows), f16, f32, Q8_0 and Q4_K sharing one x (given at
 * an address off a cache line, so the aligned copy is made), 1-8 tokens in one region;
 * 9 tokens, a transposed view and a source-exact block view take eng_matmul itself. */
static void shared_case(int cols, int n, int odd)
{
    enum { P = 4 };
    const vx_dtype dts[5] = {VX_BF16, VX_F16, VX_F32, VX_Q8_0, VX_Q4_K};
    const int rows[P] = {300, 40, 8, 520};   /* 8 rows: tiny, x read as given */
    float *m = malloc((size_t)520 * cols * 4), *xb = malloc(((size_t)n * cols + 16) * 4);
    float *x = xb + 1;
    for (int i = 0; i < n * cols; i++) x[i] = rnd();
    for (int set = 0; set < 5; set++) {
        eng_w w[P];
        void *buf[P];
        float *y[P], *ref[P];
        const eng_w *wp[P];
        for (int i = 0; i < P; i++) {
            vx_dtype dt = dts[(set + i) % 5];
            for (size_t k = 0; k < (size_t)rows[i] * cols; k++) m[k] = rnd();
            buf[i] = malloc((size_t)rows[i] * cols * 4);
            if (dt == VX_Q8_0 || dt == VX_Q4_K) {
                size_t rb = (size_t)cols / vx_dtype_block_elems(dt) * vx_dtype_block_bytes(dt);
                for (int r = 0; r < rows[i]; r++)
                    vx_quantize_row(dt, m + (size_t)r * cols, (char *)buf[i] + r * rb, (size_t)cols);
                w[i] = (eng_w){dt, buf[i], rows[i], cols, rb, 0, 0};
            } else {
                w[i] = store(dt, m, rows[i], cols, buf[i]);
            }
            if (odd == 1 && i == 2 && dt == VX_F32) {
                w[i].trans = 1;   /* stored [cols, rows]: a different path, same shape */
                w[i].rows = cols < rows[i] ? cols : rows[i];
                w[i].cols = cols;
                w[i].row_bytes = 0;
            }
            if (odd == 2 && (dt == VX_Q8_0 || dt == VX_Q4_K)) w[i].exact = 1;
            wp[i] = &w[i];
            y[i] = malloc((size_t)n * w[i].rows * 4);
            ref[i] = malloc((size_t)n * w[i].rows * 4);
            eng_matmul(&w[i], x, n, ref[i]);
        }
        eng_matmul_shared(wp, P, x, n, y);
        for (int i = 0; i < P; i++) {
            CHECK_MSG(!memcmp(y[i], ref[i], (size_t)n * w[i].rows * 4),
                      "shared product %d (%s, %d x %d) at %d tokens differs from eng_matmul",
                      i, vx_dtype_name(w[i].dt), w[i].rows, cols, n);
            free(y[i]); free(ref[i]); free(buf[i]);
        }
    }
    free(m); free(xb);
}

static void test_shared(void)
{
    for (int n = 1; n <= 9; n += (n < 3 ? 2 : 5)) {
        shared_case(512, n, 0);
        shared_case(5632, n, 0);
    }
    shared_case(512, 1, 1);
    shared_case(512, 2, 2);
}

static void test_norm(void)
{
    float x[2 * 4] = {1, 2, 3, 4, -1, 0, 1, 2}, o[8];
    float w[4] = {1, 0.5f, 2, 1}, b[4] = {0, 1, 0, -1};
    eng_norm rms = {NORM_RMS, 4, 1e-5f, w, NULL};
    eng_norm_apply(&rms, x, o, 2);
    double r0 = sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-5);
    CHECK_NEAR(o[0], 1 / r0, 1e-6);
    CHECK_NEAR(o[1], 0.5 * 2 / r0, 1e-6);
    CHECK_NEAR(o[2], 2 * 3 / r0, 1e-6);
    double r1 = sqrt((1 + 0 + 1 + 4) / 4.0 + 1e-5);
    CHECK_NEAR(o[7], 2 / r1, 1e-6);
    eng_norm ln = {NORM_LAYER, 4, 1e-5f, w, b};
    eng_norm_apply(&ln, x, o, 1);
    double sd = sqrt(1.25 + 1e-5);   /* mean 2.5, variance 1.25 */
    CHECK_NEAR(o[0], -1.5 / sd, 1e-6);
    CHECK_NEAR(o[1], 0.5 * -0.5 / sd + 1, 1e-6);
    CHECK_NEAR(o[3], 1.5 / sd - 1, 1e-6);
    /* in place */
    float y[4] = {3, 4, 0, 0};
    float one[4] = {1, 1, 1, 1};
    eng_norm r2 = {NORM_RMS, 4, 0, one, NULL};
    eng_norm_apply(&r2, y, y, 1);
    CHECK_NEAR(y[0], 3 / sqrt(25 / 4.0), 1e-6);
}

static void test_rope(void)
{
    double inv[4];
    for (int i = 0; i < 4; i++) inv[i] = 1.0 / pow(10000.0, 2.0 * i / 8);
    eng_rope half = {ROPE_HALF, 8, inv, 1}, il = {ROPE_INTERLEAVED, 8, inv, 1};
    float a[2 * 10], b[2 * 10], ref[2 * 10];   /* 2 heads, stride 10, rotated part 8 at off 1 */
    for (int i = 0; i < 20; i++) a[i] = b[i] = ref[i] = rnd();
    const int pos = 5;
    eng_rope_apply(&half, a, 1, pos, 2, 10, 1);
    eng_rope_apply(&il, b, 1, pos, 2, 10, 1);
    double worst_h = 0, worst_i = 0;
    for (int h = 0; h < 2; h++) {
        const float *r = ref + h * 10 + 1;
        for (int i = 0; i < 4; i++) {
            double c = cos(pos * inv[i]), s = sin(pos * inv[i]);
            double h0 = r[i] * c - r[i + 4] * s, h1 = r[i + 4] * c + r[i] * s;
            worst_h = fmax(worst_h, fabs(h0 - a[h * 10 + 1 + i]));
            worst_h = fmax(worst_h, fabs(h1 - a[h * 10 + 1 + i + 4]));
            double i0 = r[2 * i] * c - r[2 * i + 1] * s, i1 = r[2 * i + 1] * c + r[2 * i] * s;
            worst_i = fmax(worst_i, fabs(i0 - b[h * 10 + 1 + 2 * i]));
            worst_i = fmax(worst_i, fabs(i1 - b[h * 10 + 1 + 2 * i + 1]));
        }
        CHECK(a[h * 10] == ref[h * 10] && a[h * 10 + 9] == ref[h * 10 + 9]);
    }
    CHECK_NEAR(worst_h, 0, 1e-6);
    CHECK_NEAR(worst_i, 0, 1e-6);
    /* position 0 is the identity */
    float z[8], z0[8];
    for (int i = 0; i < 8; i++) z[i] = z0[i] = rnd();
    eng_rope_apply(&half, z, 1, 0, 1, 8, 0);
    CHECK(memcmp(z, z0, sizeof z) == 0);
    /* mscale (YaRN's attention factor) scales cos and sin: position 0 scales by it */
    eng_rope ms = {ROPE_HALF, 8, inv, 1.5};
    eng_rope_apply(&ms, z, 1, 0, 1, 8, 0);
    for (int i = 0; i < 8; i++) CHECK_NEAR(z[i], 1.5 * z0[i], 1e-6);
}

static void test_act(void)
{
    float v[3] = {1, 1, 1};
    eng_act(ACT_SILU, v, 1);
    eng_act(ACT_GELU_TANH, v + 1, 1);
    eng_act(ACT_GELU, v + 2, 1);
    CHECK_NEAR(v[0], 0.7310585786, 1e-6);
    CHECK_NEAR(v[1], 0.8411919906, 1e-6);
    CHECK_NEAR(v[2], 0.8413447461, 1e-6);
    CHECK_NEAR(eng_softcap(100, 50), 50 * tanh(2.0), 1e-5);
    float s[4] = {1000, 1001, 1002, -INFINITY};
    eng_softmax(s, 4);
    double e = exp(1), z = 1 + e + e * e;
    CHECK_NEAR(s[0], 1 / z, 1e-6);
    CHECK_NEAR(s[2], e * e / z, 1e-6);
    CHECK_NEAR(s[3], 0, 0);
}

static void test_sample(void)
{
    float lg[5] = {0.1f, 2.0f, 2.0f, -1, 0.5f}, c[5];
    eng_sampler greedy = {0, 0, 1, 0};
    uint64_t st = 1;
    memcpy(c, lg, sizeof c);
    CHECK(eng_sample(&greedy, c, 5, &st) == 1);        /* ties: lower id */
    eng_sampler sp = {1.0f, 0, 1, 42};
    int counts[5] = {0};
    uint64_t a = 7, b = 7;
    for (int i = 0; i < 4000; i++) {
        memcpy(c, lg, sizeof c);
        int x = eng_sample(&sp, c, 5, &a);
        memcpy(c, lg, sizeof c);
        int y = eng_sample(&sp, c, 5, &b);
        CHECK_MSG(x == y, "same stream, different draw at %d", i);
        counts[x]++;
    }
    /* p(1) = e^2 / (e^0.1 + 2e^2 + e^-1 + e^0.5) ≈ 0.4146 */
    CHECK_NEAR(counts[1] / 4000.0, 0.4146, 0.03);
    CHECK(counts[3] > 0);
    eng_sampler k2 = {1.0f, 2, 1, 0};
    eng_sampler p5 = {1.0f, 0, 0.5f, 0};
    int bad = 0;
    for (int i = 0; i < 500; i++) {
        memcpy(c, lg, sizeof c);
        int x = eng_sample(&k2, c, 5, &a);
        bad += x != 1 && x != 2;
        memcpy(c, lg, sizeof c);
        x = eng_sample(&p5, c, 5, &a);   /* 0.41 < 0.5: the two best tokens */
        bad += x != 1 && x != 2;
    }
    CHECK(bad == 0);
    /* top-k keeps the tokens tied with the k-th, as Hugging Face's TopKLogitsWarper: with
     * k = 1 both tied best tokens are drawn; with k = 3 of {3, 2, 2, 2, 1} all three 2s */
    eng_sampler k1 = {1.0f, 1, 1, 0}, k3 = {1.0f, 3, 1, 0};
    float tie[5] = {3, 2, 2, 2, 1};
    int seen1[5] = {0}, seen3[5] = {0};
    for (int i = 0; i < 2000; i++) {
        memcpy(c, lg, sizeof c);
        seen1[eng_sample(&k1, c, 5, &a)]++;
        memcpy(c, tie, sizeof c);
        seen3[eng_sample(&k3, c, 5, &a)]++;
    }
    CHECK(seen1[1] > 800 && seen1[2] > 800 && seen1[1] + seen1[2] == 2000);
    CHECK(seen3[0] > 0 && seen3[1] > 0 && seen3[2] > 0 && seen3[3] > 0 && seen3[4] == 0);
    /* a temperature so small that logit / T overflows: the best token, not NaN's pick */
    eng_sampler tiny = {1e-38f, 0, 0.5f, 0};
    float big[3] = {90.0f, 100.0f, 80.0f};
    CHECK(eng_sample(&tiny, big, 3, &a) == 1);
}

static void test_split(void)
{
    int lo, hi, total = 0, prev = 0;
    for (int i = 0; i < 3; i++) {
        eng_split(100, i, 3, 16, &lo, &hi);
        CHECK(lo == prev && lo % 16 == 0);
        total += hi - lo;
        prev = hi;
    }
    CHECK(total == 100 && prev == 100);
}

/* eng_claim_rows hands out every row once, in chunks that start on a multiple of 16,
 * take 1/nparts of what is left and shrink toward the end (none after the last row). */
static void test_claims(void)
{
    static const int cases[][2] = {{2048, 2}, {256, 2}, {5632, 2}, {1000, 3}, {17, 2}, {15, 4}, {0, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int rows = cases[c][0], nparts = cases[c][1];
        atomic_int next;
        atomic_init(&next, 0);
        int lo, hi, prev = 0, last = rows + 1, n = 0;
        while (eng_claim_rows(&next, rows, nparts, &lo, &hi)) {
            CHECK_MSG(lo == prev && lo % 16 == 0 && hi > lo && hi <= rows, "rows %d: [%d, %d) after %d",
                      rows, lo, hi, prev);
            CHECK_MSG(hi == rows || (hi - lo <= last && (hi - lo) % 16 == 0 && hi - lo >= (rows - lo) / nparts - 15),
                      "rows %d: chunk [%d, %d) after one of %d", rows, lo, hi, last);
            last = hi - lo;
            prev = hi;
            n++;
        }
        CHECK_MSG(prev == rows && !eng_claim_rows(&next, rows, nparts, &lo, &hi), "rows %d: ended at %d", rows, prev);
        if (rows == 2048) CHECK_MSG(n <= 12, "2048 rows in %d chunks", n);
    }
}

/* eng_rows_dot (x as it is, or paired by eng_x_pairs) and the decode GEMV give
 * eng_row_dot's results bit for bit: bf16 rows are dotted by pairs on every path, x
 * permuted once or in registers, the same products in the same order; rows wider than
 * 4096 columns are read part by part in panels of 16 (split_rows), their chains kept
 * between parts (19 rows: a whole panel and a partial one; 2 and 3 parts, with and
 * without a tail). */
static void test_rows_dot(void)
{
    const vx_dtype dts[3] = {VX_F32, VX_F16, VX_BF16};
    const int colss[] = {5, 37, 64, 100, 2048, 4096, 4100, 5632, 12317};
    enum { ROWS = 19 };
    for (int d = 0; d < 3; d++)
        for (size_t c = 0; c < sizeof colss / sizeof *colss; c++) {
            const int cols = colss[c];
            float *m = malloc((size_t)ROWS * cols * 4), *x = malloc((size_t)cols * 4);
            float y[ROWS], ym[ROWS];
            void *buf = malloc((size_t)ROWS * cols * 4);
            for (size_t i = 0; i < (size_t)ROWS * cols; i++) m[i] = rnd();
            for (int i = 0; i < cols; i++) x[i] = rnd();
            eng_w w = store(dts[d], m, ROWS, cols, buf);
            float yp[ROWS];
            float *xp = eng_x_pairs(x, cols);
            CHECK(!xp == (cols % 32 != 0 || !eng_avx512()));
            eng_rows_dot(w.dt, w.data, w.row_bytes, ROWS, x, NULL, cols, y);
            eng_rows_dot(w.dt, w.data, w.row_bytes, ROWS, x, xp, cols, yp);
            eng_matmul(&w, x, 1, ym);
            for (int r = 0; r < ROWS; r++) {
                const float e = eng_row_dot(w.dt, (const char *)w.data + (size_t)r * w.row_bytes, x, cols);
                CHECK_MSG(y[r] == e && yp[r] == e, "%s cols %d row %d: rows_dot %.9g / %.9g "
                          "row_dot %.9g", vx_dtype_name(dts[d]), cols, r, y[r], yp[r], e);
                CHECK_MSG(ym[r] == e, "%s cols %d row %d: decode %.9g row_dot %.9g",
                          vx_dtype_name(dts[d]), cols, r, ym[r], e);
            }
            free(m); free(x); free(buf); free(xp);
        }
}

/* eng_mlp_run against float64 on a prompt-sized product (n · inter at least 65536, so the
 * activation is split over the pool): gated SiLU, the clamped SwiGLU and a plain GELU MLP. */
static void test_mlp_split(void)
{
    enum { H = 32, I = 1024, N = 70 };
    float *wg = malloc(sizeof(float) * I * H), *wu = malloc(sizeof(float) * I * H);
    float *wd = malloc(sizeof(float) * H * I), *h = malloc(sizeof(float) * N * H);
    float *act = malloc(sizeof(float) * N * I), *out = malloc(sizeof(float) * N * H);
    double *ref = malloc(sizeof(double) * I);
    for (int i = 0; i < I * H; i++) { wg[i] = rnd() * 0.5f; wu[i] = rnd() * 0.5f; wd[i] = rnd() * 0.1f; }
    for (int i = 0; i < N * H; i++) h[i] = rnd() * 3;
    for (int kind = 0; kind < 3; kind++) {
        eng_model m = {0};
        m.hidden = H;
        m.act = kind == 2 ? ACT_GELU : ACT_SILU;
        eng_mlp b = {0};
        b.inter = I;
        b.up = (eng_w){VX_F32, wu, I, H, H * sizeof(float), 0, 0};
        b.down = (eng_w){VX_F32, wd, H, I, I * sizeof(float), 0, 0};
        if (kind < 2) b.gate = (eng_w){VX_F32, wg, I, H, H * sizeof(float), 0, 0};
        if (kind == 1) { b.alpha = 1.702f; b.limit = 1.5f; }
        vx_err err = {0};
        CHECK(eng_mlp_run(&m, 0, &b, -1, h, N, NULL, act, out, &err) == 0);
        double worst = 0;
        for (int t = 0; t < N; t++) {
            for (int f = 0; f < I; f++) {
                double g = 0, u = 0;
                for (int k = 0; k < H; k++) {
                    g += (double)wg[f * H + k] * h[t * H + k];
                    u += (double)wu[f * H + k] * h[t * H + k];
                }
                if (kind == 0) ref[f] = g / (1 + exp(-g)) * u;
                else if (kind == 1) {
                    double gc = fmin(g, 1.5), uc = fmax(-1.5, fmin(u, 1.5));
                    ref[f] = gc / (1 + exp(-1.702 * gc)) * (uc + 1);
                } else ref[f] = 0.5 * u * (1 + erf(u / sqrt(2.0)));
                worst = fmax(worst, fabs(ref[f] - act[t * I + f]) / (1 + fabs(ref[f])));
            }
            for (int r = 0; r < H; r++) {
                double o = 0;
                for (int f = 0; f < I; f++) o += (double)wd[r * I + f] * ref[f];
                worst = fmax(worst, fabs(o - out[t * H + r]) / (1 + fabs(o)));
            }
        }
        CHECK_MSG(worst < 2e-5, "mlp kind %d: rel err %g", kind, worst);
    }
    free(wg); free(wu); free(wd); free(h); free(act); free(out); free(ref);
}

/* eng_attend against float64: GQA groups, keys past whole 16-key blocks, a window, sinks
 * and a softcap, head widths the AVX-512 kernel unrolls (64), does not (48), AVX2 only (24 / 40) and unequal
 * (MLA's 96 / 64), and the per-head probabilities an observer receives. */
typedef struct probs_seen { int heads, n, n_keys; double worst; const double *ref; } probs_seen;

static void on_probs(void *ctx, int layer, int head, int pos0, int n, int n_keys, const float *pr)
{
    probs_seen *ps = ctx;
    (void)layer; (void)pos0;
    for (int t = 0; t < n; t++)
        for (int j = 0; j < n_keys; j++)
            ps->worst = fmax(ps->worst, fabs(pr[(size_t)t * n_keys + j] -
                                             ps->ref[((size_t)t * ps->heads + head) * n_keys + j]));
}

static void attend_case(int heads, int kvh, int kd, int vd, int n, int pos0, int window, int sinks,
                        float softcap)
{
    const int nk = pos0 + n;
    eng_model m = {0};
    m.heads = heads;
    m.attn_scale = 1.0f / sqrtf((float)kd);
    m.attn_softcap = softcap;
    eng_layer L = {0};
    L.window = window;
    float sk[64];
    for (int h = 0; h < heads; h++) sk[h] = rnd() * 2;
    L.sinks = sinks ? sk : NULL;
    float *k = malloc(sizeof(float) * nk * kvh * kd), *v = malloc(sizeof(float) * nk * kvh * vd);
    float *q = malloc(sizeof(float) * n * heads * kd), *out = malloc(sizeof(float) * n * heads * vd);
    double *pr = malloc(sizeof(double) * n * heads * nk), *ref = malloc(sizeof(double) * n * heads * vd);
    for (int i = 0; i < nk * kvh * kd; i++) k[i] = rnd() * 2;
    for (int i = 0; i < nk * kvh * vd; i++) v[i] = rnd();
    for (int i = 0; i < n * heads * kd; i++) q[i] = rnd() * 2;
    eng_kv kv = {k, v, kd, vd, kvh, kvh * vd};
    for (int t = 0; t < n; t++)
        for (int h = 0; h < heads; h++) {
            const int i = pos0 + t, g = h / (heads / kvh), lo = window && i - window + 1 > 0 ? i - window + 1 : 0;
            double *p = pr + ((size_t)t * heads + h) * nk, mx = sinks ? sk[h] : -INFINITY, sum = 0;
            for (int j = 0; j < nk; j++) p[j] = 0;
            for (int j = lo; j <= i; j++) {
                double s = 0;
                for (int d = 0; d < kd; d++) s += (double)q[((size_t)t * heads + h) * kd + d] * k[((size_t)j * kvh + g) * kd + d];
                s *= m.attn_scale;
                if (softcap > 0) s = softcap * tanh(s / softcap);
                p[j] = s;
                mx = fmax(mx, s);
            }
            if (sinks) sum = exp(sk[h] - mx);
            for (int j = lo; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
            for (int j = lo; j <= i; j++) p[j] /= sum;
            for (int d = 0; d < vd; d++) {
                double o = 0;
                for (int j = lo; j <= i; j++) o += p[j] * v[((size_t)j * kvh + g) * vd + d];
                ref[((size_t)t * heads + h) * vd + d] = o;
            }
        }
    for (int obs = 0; obs < 2; obs++) {
        probs_seen ps = {heads, n, nk, 0, pr};
        eng_observer ob = {0};
        ob.ctx = &ps;
        ob.on_attn = on_probs;
        eng_attend(&m, &L, 0, &kv, q, n, pos0, out, obs ? &ob : NULL);
        double worst = 0;
        for (int i = 0; i < n * heads * vd; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
        CHECK_MSG(worst < 2e-6, "attend heads %d/%d widths %d/%d n %d pos0 %d window %d sinks %d cap %g obs %d: "
                  "err %g", heads, kvh, kd, vd, n, pos0, window, sinks, softcap, obs, worst);
        if (obs) CHECK_MSG(ps.worst < 2e-6, "attend probs: err %g", ps.worst);
    }
    free(k); free(v); free(q); free(out); free(pr); free(ref);
}

/* The AVX2 GEMM sums each output as the AVX-512 one does — one FMA chain over k in order,
 * the weights widened exactly — so a prompt gives the same values with or without AVX-512
 * (AMX's bf16 tiles, the bf16 opt-in and the 9-16-row streaming of AVX-512 hosts aside). On
 * a CPU without AVX-512 both runs take the AVX2 kernel. */
static void test_gemm_isa_equal(void)
{
    const vx_dtype dts[3] = {VX_F32, VX_F16, VX_BF16};
    const int shapes[][3] = {{50, 96, 17}, {131, 300, 70}, {13, 2048, 64}, {97, 203, 129}};
    setenv("LQL_NO_AMX", "1", 1);
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const int rows = shapes[s][0], cols = shapes[s][1], n = shapes[s][2];
            float *m = malloc((size_t)rows * cols * 4), *x = malloc((size_t)n * cols * 4);
            float *y[2] = {malloc((size_t)n * rows * 4), malloc((size_t)n * rows * 4)};
            void *buf = malloc((size_t)rows * cols * 4);
            for (size_t i = 0; i < (size_t)rows * cols; i++) m[i] = rnd();
            for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = rnd();
            eng_w w = store(dts[d], m, rows, cols, buf);
            for (int a = 0; a < 2; a++) {
                setenv("LQL_NO_AVX512", a ? "1" : "0", 1);
                eng_matmul(&w, x, n, y[a]);
            }
            CHECK_MSG(!memcmp(y[0], y[1], (size_t)n * rows * 4), "%s rows %d cols %d n %d: the AVX2 and AVX-512 GEMMs differ",
                      vx_dtype_name(dts[d]), rows, cols, n);
            free(m); free(x); free(y[0]); free(y[1]); free(buf);
        }
    unsetenv("LQL_NO_AVX512");
    unsetenv("LQL_NO_AMX");
    if (!eng_avx512()) printf("test_gemm_isa_equal: no AVX-512 on this CPU, both runs took the AVX2 GEMM\n");
}

static void test_attend(void)
{
    attend_case(8, 2, 64, 64, 1, 40, 0, 0, 0);      /* decode, 2.5 blocks of keys */
    attend_case(8, 2, 64, 64, 21, 19, 0, 0, 0);     /* prefill after a cache */
    attend_case(8, 8, 64, 64, 33, 0, 7, 1, 0);      /* window and sinks, no GQA */
    attend_case(4, 1, 48, 48, 18, 3, 0, 0, 30);     /* MQA, a width not unrolled, softcap */
    attend_case(6, 2, 96, 64, 5, 60, 20, 1, 0);     /* unequal widths */
    attend_case(2, 1, 576, 512, 3, 17, 0, 0, 0);    /* MLA's latent widths (DeepSeek-V3) */
    attend_case(4, 2, 16, 16, 11, 5, 0, 0, 0);      /* two 8-lane vectors (the small fixtures) */
    attend_case(6, 3, 24, 40, 13, 9, 5, 1, 0);      /* widths off 16 lanes, on 8: AVX2's form */
    attend_case(4, 2, 20, 12, 9, 4, 0, 0, 0);       /* widths off 8 lanes: the scalar loop */
}

/* Under AddressSanitizer the uninstrumented kernel loops (ENG_HOT_LOOP) check their ranges
 * once per call: a range one byte past a block is reported and aborts, as an instrumented
 * load would. Nothing to check in a build without it. */
static void test_asan_range(void)
{
#ifdef ENG_ASAN
    char *b = calloc(40, 1);
    eng_asan_range(b, 40, "whole block");
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        if (!freopen("/dev/null", "w", stderr)) _exit(0);   /* ASan's description: not for the log */
        eng_asan_range(b, 41, "one byte past");
        _exit(0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "eng_asan_range: a range past the block "
              "was not reported (status %d)", st);
    free(b);
#endif
}

int main(void)
{
    test_asan_range();
    test_matmul();
    test_matmul_t();
    test_rows_dot();
    test_shared();
    test_attend();
    test_gemm_isa_equal();
    setenv("LQL_NO_AVX512", "1", 1);   /* the AVX2 GEMM, GEMV and attention */
    test_matmul();
    test_rows_dot();
    test_shared();
    test_attend();
    test_quant_dispatch();
    unsetenv("LQL_NO_AVX512");
    test_quant_dispatch();
    test_amx_int8();
    test_norm();
    test_rope();
    test_act();
    test_mlp_split();
    test_sample();
    test_split();
    test_claims();
    test_prefill_bf16_optin();
    return T_DONE();
}
