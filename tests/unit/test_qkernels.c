/*
 * test_qkernels.c — the quantised GEMV/GEMM kernels against dequantise-then-dot in f64,
 * for every block codec, within the tolerance qkernels.h documents:
 *     |y - exact| <= Σ_i |W[r,i]| · amax_B(i)(x) / 254 + 1e-5 · Σ_i |W[r,i]·x[i]|
 * (the first term only for the formats whose kernel quantises the activations), on the
 * serial and the threaded path, plus the MXFP4 NaN scale and the refusals.
 */
#include "t.h"
#include "t_file.h"
#include "engine_int.h"
#include "lyrw.h"
#include "qkernels.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float urand(void)            /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int act_block(vx_dtype dt)
{
    return dt == VX_Q4_K || dt == VX_Q6_K ? 256 :
           dt == VX_Q8_0 || dt == VX_Q4_0 || dt == VX_MXFP4 ? 32 : 0;
}

/* A rows × cols matrix in dt: quantised from random values, or for the decode-only
 * K-quants random blocks with sane f16 scales. Returns the bytes; *ref gets the exact
 * dequantised values. */
static unsigned char *make_w(vx_dtype dt, int rows, int cols, float **ref)
{
    unsigned be, bb;
    vx_quant_block(dt, &be, &bb);
    size_t rb = (size_t)cols / be * bb;
    unsigned char *w = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    *ref = malloc(sizeof(float) * (size_t)cols * (size_t)rows);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++)
            row[c] = urand() * (c % 97 == 0 ? 8.f : 1.f);
        if (vx_quantize_row(dt, row, w + rb * (size_t)r, (size_t)cols) != 0) {
            for (size_t i = 0; i < rb; i++) {
                urand();
                w[rb * (size_t)r + i] = (unsigned char)(rng >> 24);
            }
            for (size_t b = 0; b < rb / bb; b++) {
                unsigned char *blk = w + rb * (size_t)r + b * bb;
                size_t at[2] = {dt == VX_Q2_K ? 80 : dt == VX_Q3_K ? 108 : 0,
                                dt == VX_Q2_K ? 82 : dt == VX_Q5_K ? 2 : (size_t)-1};
                for (int k = 0; k < 2; k++)
                    if (at[k] != (size_t)-1) {
                        uint16_t h = vx_f32_to_f16(0.01f * (urand() + 1.5f));
                        blk[at[k]] = (unsigned char)h;
                        blk[at[k] + 1] = (unsigned char)(h >> 8);
                    }
            }
        }
        CHECK(vx_dequantize_row(dt, w + rb * (size_t)r, *ref + (size_t)r * cols, (size_t)cols) == 0);
    }
    free(row);
    return w;
}

static double worst;   /* largest error / bound seen */

/* The activation block of the integer path eng_qgemm takes for n rows (0: activations
 * kept in f32, the tight bound): up to 8 rows every integer codec; past 8 (prefill) the
 * same codecs on AVX-512 VNNI; none with LQL_QEXACT=1. eng_qgemm_rows past 8 rows is exact (gemm 0). */
static int int_block(vx_dtype dt, int n, int gemm)
{
    const char *ex = getenv("LQL_QEXACT");
    if (ex && *ex == '1') return 0;
    if (n <= 8) return act_block(dt);
    int integer = dt == VX_Q8_0 || dt == VX_Q4_0 || dt == VX_MXFP4 || dt == VX_Q4_K || dt == VX_Q6_K;
    return gemm && integer && eng_avx512() && __builtin_cpu_supports("avx512vnni") ? act_block(dt) : 0;
}

/* Checks y (one output row per weight row) against ref·x; blk as int_block gives it. */
static int check_rows(vx_dtype dt, const float *ref, int r0, int r1, int cols, const float *x,
                      const float *y, int stride, int blk)
{
    int ok = 1;
    for (int r = r0; r < r1; r++) {
        const float *w = ref + (size_t)r * cols;
        double exact = 0, mag = 0, qerr = 0;
        for (int c = 0; c < cols; c++) {
            exact += (double)w[c] * x[c];
            mag += fabs((double)w[c] * x[c]);
        }
        if (blk)
            for (int b = 0; b < cols / blk; b++) {
                double amax = 0, wabs = 0;
                for (int i = 0; i < blk; i++) {
                    amax = fmax(amax, fabs(x[b * blk + i]));
                    wabs += fabs(w[b * blk + i]);
                }
                qerr += wabs * amax / 254;
            }
        double bound = qerr + 1e-5 * mag + 1e-30;
        double err = fabs(y[(size_t)r * stride] - exact);
        if (err / bound > worst)
            worst = err / bound;
        if (!(err <= bound)) {
            if (ok)
                fprintf(stderr, "%s row %d: got %.9g want %.9g (bound %.3g)\n", vx_quant_name(dt),
                        r, y[(size_t)r * stride], exact, bound);
            ok = 0;
        }
        /* The bound is not vacuous: well under the result's own magnitude. */
        if (bound > 0.05 * mag + 1e-20)
            ok = 0;
    }
    return ok;
}

static void one(vx_dtype dt, int rows, int cols, int n)
{
    float *ref;
    unsigned char *w = make_w(dt, rows, cols, &ref);
    float *X = malloc(sizeof(float) * (size_t)n * cols), *Y = malloc(sizeof(float) * (size_t)n * rows);
    for (int i = 0; i < n * cols; i++) {
        int blk = (i % cols) / 32;
        X[i] = blk % 5 == 3 ? 0.f : urand() * (blk % 3 == 0 ? 50.f : 1.f);
    }
    eng_qgemv(dt, w, rows, cols, X, Y);
    CHECK_MSG(check_rows(dt, ref, 0, rows, cols, X, Y, 1, int_block(dt, 1, 1)), "%s gemv %dx%d", vx_quant_name(dt),
              rows, cols);
    eng_qgemm(dt, w, rows, cols, X, n, Y);
    for (int t = 0; t < n; t++)
        CHECK_MSG(check_rows(dt, ref, 0, rows, cols, X + (size_t)t * cols, Y + (size_t)t * rows, 1,
                             int_block(dt, n, 1)),
                  "%s gemm row %d", vx_quant_name(dt), t);
    if (n <= 8 && int_block(dt, n, 1)) {
        /* a short prompt streams each row against every token (Q8_0 up to 3 tokens at a
         * time with AVX2): each token's row is its own GEMV bit for bit */
        float *y1 = malloc(sizeof(float) * (size_t)rows);
        for (int t = 0; t < n; t++) {
            eng_qgemv(dt, w, rows, cols, X + (size_t)t * cols, y1);
            int same = 1;
            for (int r = 0; r < rows; r++) same &= Y[(size_t)t * rows + r] == y1[r];
            CHECK_MSG(same, "%s short prompt token %d of %d differs from its GEMV", vx_quant_name(dt), t, n);
        }
        free(y1);
    }
    if (n > 8 && int_block(dt, n, 1)) {
        /* the prefill GEMM takes decode's integer products: each token's row agrees with
         * its own GEMV up to the order of the f32 sums, far inside the quantisation bound */
        float *y1 = malloc(sizeof(float) * (size_t)rows);
        for (int t = 0; t < n; t++) {
            eng_qgemv(dt, w, rows, cols, X + (size_t)t * cols, y1);
            for (int r = 0; r < rows; r++) {
                double mag = 0;
                for (int c = 0; c < cols; c++)
                    mag += fabs((double)ref[(size_t)r * cols + c] * X[(size_t)t * cols + c]);
                CHECK_MSG(fabs((double)Y[(size_t)t * rows + r] - y1[r]) <= 1e-5 * mag + 1e-30,
                          "%s prefill token %d row %d: %.9g, decode %.9g", vx_quant_name(dt), t, r,
                          Y[(size_t)t * rows + r], y1[r]);
            }
        }
        free(y1);
    }
    for (int i = 0; i < n * rows; i++)
        Y[i] = -12345.f;
    eng_qgemm_rows(dt, w, 2, 5, rows, cols, X, n, Y);
    CHECK(Y[0] == -12345.f && Y[1] == -12345.f && Y[5] == -12345.f);
    CHECK(check_rows(dt, ref, 2, 5, cols, X, Y, 1, int_block(dt, n, 0)));
    CHECK(check_rows(dt, ref, 2, 5, cols, X + cols, Y + rows, 1, int_block(dt, n, 0)));
    /* eng_qdot: exact weights in f32, the tight bound. */
    unsigned be, bb;
    vx_quant_block(dt, &be, &bb);
    float d = eng_qdot(dt, w + (size_t)cols / be * bb, X, cols);
    double exact = 0, mag = 0;
    for (int c = 0; c < cols; c++) {
        exact += (double)ref[cols + c] * X[c];
        mag += fabs((double)ref[cols + c] * X[c]);
    }
    CHECK_MSG(fabs(d - exact) <= 1e-5 * mag, "%s qdot %.9g want %.9g", vx_quant_name(dt), d, exact);
    /* Against a unit vector eng_qdot returns the weight itself: the in-register
     * dequantisation is bit-equal to the codec's. */
    float *e = calloc((size_t)cols, sizeof(float));
    int same = 1;
    for (int c = 0; c < cols; c += 7) {
        e[c] = 1.f;
        same &= eng_qdot(dt, w + (size_t)cols / be * bb, e, cols) == ref[cols + c];
        e[c] = 0.f;
    }
    CHECK_MSG(same, "%s qdot of unit vectors differs from the codec", vx_quant_name(dt));
    float *mine = malloc(sizeof(float) * (size_t)cols);
    eng_qrow_f32(dt, w + (size_t)cols / be * bb, mine, cols);
    CHECK_MSG(memcmp(mine, ref + cols, sizeof(float) * (size_t)cols) == 0,
              "%s eng_qrow_f32 differs from the codec", vx_quant_name(dt));
    free(mine);
    free(e);
    free(X);
    free(Y);
    free(w);
    free(ref);
}

/* eng_qrow_f32 against the reference vectors' dequantised bits (NaN, inf, -0 and
 * subnormals included; test_quant checks the same for the codec). */
static void reference_vectors(void)
{
    static const struct { const char *name; vx_dtype dt; int rows, cols; } v[] = {
        {"q8_0_mixed", VX_Q8_0, 4, 512}, {"q4_0_edge", VX_Q4_0, 3, 256},
        {"q4_k_mixed", VX_Q4_K, 4, 512}, {"q4_k_edge", VX_Q4_K, 3, 256},
        {"q6_k_mixed", VX_Q6_K, 4, 512}, {"q6_k_small", VX_Q6_K, 3, 256},
        {"mxfp4_mixed", VX_MXFP4, 4, 512}, {"mxfp4_allcodes", VX_MXFP4, 7, 32},
        {"mxfp4_special", VX_MXFP4, 3, 32}, {"q5_k_mixed", VX_Q5_K, 4, 512},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char qn[64], dn[64];
        snprintf(qn, sizeof qn, "%s.q", v[i].name);
        snprintf(dn, sizeof dn, "%s.deq.f32", v[i].name);
        size_t nq, nd;
        unsigned char *q = t_slurp(&nq, "%s/models/quant/%s", LQL_FIXTURE_DIR, qn),
                      *d = t_slurp(&nd, "%s/models/quant/%s", LQL_FIXTURE_DIR, dn);
        CHECK_MSG(q && d, "%s: fixture missing", v[i].name);
        if (q && d) {
            float *out = malloc(nd);
            size_t rb = nq / (size_t)v[i].rows;
            for (int r = 0; r < v[i].rows; r++)
                eng_qrow_f32(v[i].dt, q + rb * (size_t)r, out + (size_t)r * v[i].cols, v[i].cols);
            CHECK_MSG(memcmp(out, d, nd) == 0, "%s: eng_qrow_f32 bits differ", v[i].name);
            free(out);
        }
        free(q);
        free(d);
    }
}

/* End to end: an expert region written to a LYRW file, read back as a tensor view, bound
 * with eng_w_of and multiplied by eng_matmul, which must dispatch to these kernels. */
static void through_lyrw(void)
{
    char path[] = "/tmp/test_qkernels_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    unlink(path);
    static const vx_dtype dts[] = {VX_Q8_0, VX_Q4_K, VX_Q6_K, VX_MXFP4};
    static const unsigned tags[] = {VX_LF_Q8_0, VX_LF_Q4_K, VX_LF_Q6_K, VX_LF_MXFP4};
    for (size_t k = 0; k < 4; k++) {
        float *ref;
        unsigned char *w = make_w(dts[k], 24, 512, &ref);
        vx_lyrw_schema sch = {0, VX_ROLE_GATE, (uint16_t)tags[k], VX_PACK_BLOCKS_INLINE,
                              VX_LYRW_UNPAIRED, 0, 24, 512, 0};
        vx_lyrw_bank_spec b = {.id = 3, .kind = VX_BANK_ROUTED, .schema_count = 1,
                               .num_entries = 2, .schemas = &sch, .entry_count = 2};
        unsigned be, bb;
        vx_quant_block(dts[k], &be, &bb);
        uint64_t len = 24 * 512 / be * bb;
        vx_lyrw_writer *wr;
        vx_err err;
        CHECK(vx_lyrw_writer_open(path, 0, 0, &b, 1, &wr, &err) == 0);
        CHECK(vx_lyrw_write_region(wr, w, len, &err) == 0);
        CHECK(vx_lyrw_write_region(wr, w, len, &err) == 0);
        CHECK(vx_lyrw_writer_close(wr, NULL, NULL, &err) == 0);
        vx_lyrw *l;
        vx_tensor t;
        CHECK(vx_lyrw_open(path, &l, &err) == 0);
        CHECK(l && vx_lyrw_tensor(l, 3, 1, 0, &t, &err) == 0);
        if (l) {
            eng_w ew;
            eng_w_of(&ew, &t);
            CHECK(ew.rows == 24 && ew.cols == 512 && ew.row_bytes == 512 / be * bb);
            float x[512 * 10], y[24 * 10], want[24 * 10];
            for (int i = 0; i < 512 * 10; i++)
                x[i] = urand();
            for (int n = 1; n <= 10; n += 9) {
                eng_matmul(&ew, x, n, y);
                eng_qgemm(dts[k], w, 24, 512, x, n, want);
                CHECK_MSG(memcmp(y, want, sizeof(float) * 24 * (size_t)n) == 0,
                          "%s: eng_matmul over a LYRW region differs (n = %d)",
                          vx_quant_name(dts[k]), n);
            }
            vx_lyrw_free(l);
        }
        unlink(path);
        free(w);
        free(ref);
    }
}

static const vx_dtype all[] = {VX_Q8_0, VX_Q4_0, VX_Q2_K, VX_Q3_K, VX_Q4_K, VX_Q5_K,
                               VX_Q6_K, VX_MXFP4};

static void every_codec(void)
{
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        CHECK(eng_qsupported(all[i]));
        one(all[i], 37, 512, 3);     /* serial (small) */
        one(all[i], 300, 1024, 3);   /* threaded */
        one(all[i], 61, 512, 8);     /* a short prompt: 3 + 3 + 2 tokens */
        one(all[i], 20, 256, 4);     /* 2 + 2 */
        one(all[i], 40, 256, 70);    /* prefill: exact f32 tiles, Q8_0's integer GEMM */
        one(all[i], 300, 512, 20);   /* the same, threaded */
        if (act_block(all[i]) == 32) {
            one(all[i], 37, 32 * 13, 3);  /* 8-block steps and a 5-block tail */
            one(all[i], 37, 32 * 13, 7);  /* the same in a short prompt: 3 + 2 + 2 tokens */
            one(all[i], 37, 32 * 13, 21); /* the same in prefill, and a token-vector tail */
            one(all[i], 43, 32 * 21, 21); /* prefill: 16-block steps and a tail */
        }
    }
}

/* MXFP4 scale codes on the 8-block vector paths (0 and 1 subnormal, 200 large, 255
 * NaN): each row's blocks share one code. The AVX2 kernel's 9-block row (one 8-block
 * step, converted as a vector, and a tail block) must equal the sum of its blocks taken
 * one at a time (each a tail, converted by the scalar routine), and the wide kernel's
 * row the AVX2 one. */
static void mxfp4_codes(void)
{
    static const unsigned char codes[9] = {0, 1, 2, 100, 127, 128, 160, 200, 255};
    enum { NB = 9, BB = 17 };
    unsigned char w[9][NB * BB];
    float x[NB * 32], wide[9], narrow[9];
    for (int r = 0; r < 9; r++)
        for (int b = 0; b < NB; b++) {
            w[r][b * BB] = codes[r];
            for (int i = 1; i < BB; i++)
                w[r][b * BB + i] = (unsigned char)((r * 31 + b * 7 + i * 13) & 0xff);
        }
    for (int i = 0; i < NB * 32; i++)
        x[i] = urand();
    setenv("LQL_NO_AVX512", "1", 1);
    eng_qgemv(VX_MXFP4, w, 9, NB * 32, x, narrow);
    float split[9] = {0};
    for (int r = 0; r < 9; r++)
        for (int b = 0; b < NB; b++) {
            float y;
            eng_qgemv(VX_MXFP4, w[r] + b * BB, 1, 32, x + 32 * b, &y);
            split[r] += y;
        }
    setenv("LQL_NO_AVX512", "0", 1);
    eng_qgemv(VX_MXFP4, w, 9, NB * 32, x, wide);
    for (int r = 0; r < 8; r++) {
        CHECK_MSG(fabsf(split[r] - narrow[r]) <= 1e-5f * fabsf(narrow[r]) && narrow[r] != 0,
                  "mxfp4 code %d: 8-block step %.9g vs block by block %.9g", codes[r], narrow[r], split[r]);
        CHECK_MSG(fabsf(wide[r] - narrow[r]) <= 1e-5f * fabsf(narrow[r]),
                  "mxfp4 code %d: %.9g vs %.9g", codes[r], wide[r], narrow[r]);
    }
    CHECK(isnan(wide[8]) && isnan(narrow[8]) && isnan(split[8]));
}

/* Q8_0 values at the int8 edge (-128, which no quantiser writes but a foreign file may
 * hold, and 127) and a NaN scale, on the wide kernel's 8-block steps, pairs and tail (13
 * blocks): the same as the AVX2 kernel's products. */
static void q8_0_edges(void)
{
    enum { NB = 13, BB = 34, R = 4 };
    unsigned char w[R][NB * BB];
    float x[NB * 32], wide[R], narrow[R];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < NB; b++) {
            uint16_t h = r == 3 && b == 11 ? 0x7e00 : vx_f32_to_f16(0.02f * (float)(b + 1));
            w[r][b * BB] = (unsigned char)h;
            w[r][b * BB + 1] = (unsigned char)(h >> 8);
            for (int i = 0; i < 32; i++)
                w[r][b * BB + 2 + i] = r == 0 ? 0x80 : r == 1 ? 0x7f : (unsigned char)(i & 1 ? 0x80 : 0x7f);
        }
    for (int i = 0; i < NB * 32; i++)
        x[i] = urand() * (i % 7 == 0 ? 30.f : 1.f);
    setenv("LQL_NO_AVX512", "1", 1);
    eng_qgemv(VX_Q8_0, w, R, NB * 32, x, narrow);
    setenv("LQL_NO_AVX512", "0", 1);
    eng_qgemv(VX_Q8_0, w, R, NB * 32, x, wide);
    for (int r = 0; r < 3; r++)
        CHECK_MSG(fabsf(wide[r] - narrow[r]) <= 1e-5f * fabsf(narrow[r]) && narrow[r] != 0,
                  "q8_0 edge row %d: %.9g vs %.9g", r, wide[r], narrow[r]);
    CHECK(isnan(wide[3]) && isnan(narrow[3]));
}

/* Q8_0 unit rows (row r picks element r: d = 1, q = 1) return each activation exactly as
 * the integer path quantised it, d_x · q_x (x itself on the exact path). Against the scalar rule (amax / 127, lrintf
 * of x · 127 / amax, ties to even), bit for bit, in decode (1 token) and prefill (20), with
 * exact ties (amax 127 makes x · id = x) and a block of ordinary values. */
static void quantise_exact(void)
{
    enum { C = 64, N = 20 };
    unsigned char w[C][2 * 34];
    memset(w, 0, sizeof w);
    for (int r = 0; r < C; r++) {
        w[r][(r / 32) * 34] = 0x00;
        w[r][(r / 32) * 34 + 1] = 0x3c;        /* f16 1.0 */
        w[r][(r / 32) * 34 + 2 + r % 32] = 1;
    }
    float x[N * C], y[N * C], want[C];
    for (int i = 0; i < 32; i++)
        x[i] = i == 5 ? -127.f : (float)(i % 9) - 4.5f + (i % 2 ? 0.f : 0.25f * (float)(i % 3));
    for (int i = 32; i < C; i++)
        x[i] = urand() * 3.f;
    for (int b = 0; b < 2; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[32 * b + i]));
        for (int i = 0; i < 32; i++)
            want[32 * b + i] = amax / 127.f * (float)lrintf(x[32 * b + i] * (127.f / amax));
    }
    for (int t = 1; t < N; t++)
        memcpy(x + t * C, x, sizeof(float) * C);
    for (int n = 1; n <= N; n += N - 1) {
        eng_qgemm(VX_Q8_0, w, C, C, x, n, y);
        int same = 1, quant = int_block(VX_Q8_0, n, 1) != 0;   /* else exact: y = x */
        for (int t = 0; t < n; t++)
            for (int r = 0; r < C; r++)
                same &= y[t * C + r] == (quant ? want[r] : x[r]);
        CHECK_MSG(same, "q8_0 activation quantisation (n %d, LQL_NO_AVX512=%s)", n,
                  getenv("LQL_NO_AVX512"));
    }
}

int main(void)
{
    reference_vectors();
    through_lyrw();
    /* Both integer kernel families: AVX2, then AVX-512 VNNI where the CPU has it. */
    setenv("LQL_NO_AVX512", "1", 1);
    every_codec();
    quantise_exact();
    setenv("LQL_NO_AVX512", "0", 1);
    every_codec();
    quantise_exact();
    mxfp4_codes();
    q8_0_edges();
    /* Exact decode: f32 activations on every path, held to the tight bound. */
    setenv("LQL_QEXACT", "1", 1);
    every_codec();
    unsetenv("LQL_QEXACT");
    printf("worst error / bound: %.3f\n", worst);
    /* A NaN or an infinity in the activations reaches the outputs on every path. */
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        float *ref;
        unsigned char *w = make_w(all[i], 4, 256, &ref);
        float xs[256 * 9], ys[4 * 9];
        for (int k = 0; k < 256 * 9; k++)
            xs[k] = urand();
        xs[37] = NAN;
        xs[256 + 200] = INFINITY;
        eng_qgemm(all[i], w, 4, 256, xs, 2, ys);
        CHECK_MSG(isnan(ys[0]) && isnan(ys[3]) && !isfinite(ys[4]) && !isfinite(ys[7]),
                  "%s: non-finite activations lost (decode)", vx_quant_name(all[i]));
        eng_qgemm(all[i], w, 4, 256, xs, 9, ys);
        CHECK_MSG(isnan(ys[0]) && !isfinite(ys[4]), "%s: non-finite activations lost (prefill)",
                  vx_quant_name(all[i]));
        free(w);
        free(ref);
    }
    CHECK(!eng_qsupported(VX_F32) && !eng_qsupported(VX_BF16));
    /* MXFP4 scale codes: 255 makes the block NaN; 0 gives subnormal products. */
    unsigned char blk[2][17];
    memset(blk, 0, sizeof blk);
    blk[0][0] = 255;
    blk[0][1] = 0x22;
    blk[1][0] = 0;
    blk[1][1] = 0x07;          /* element 0 = 6 · 2^-127, element 16 = 0 */
    float x[32], y[2];
    for (int i = 0; i < 32; i++)
        x[i] = 1.f;
    eng_qgemv(VX_MXFP4, blk, 2, 32, x, y);
    CHECK(isnan(y[0]));
    /* The scale product 2^-128 · (1/127) is subnormal, so a few bits go: 1e-3 relative. */
    CHECK_NEAR(y[1] / ldexpf(6.f, -127), 1.0, 1e-3);
    return T_DONE();
}
