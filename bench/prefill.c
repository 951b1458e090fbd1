/*
 * prefill.c — GFLOP/s of eng_matmul's many-row product (prefill) per weight dtype, on the
 * shapes of the 1.1B benchmark model's MLP (5632 × 2048 and 2048 × 5632), with the kernel
 * paths alternated in the same minutes: the default path of this host, the exact f32 path
 * LQL_QEXACT=1 selects for the block formats (whose default, on AVX-512 VNNI, keeps
 * decode's quantised activations), the AVX2 GEMM LQL_NO_AVX512=1 selects, and OpenBLAS's
 * cblas_sgemm on the same weights converted to f32 beforehand (on as many threads as the
 * engine's pool; its conversion not timed). Best of --reps runs each: the machine is
 * shared, and the best run is the least disturbed one.
 *
 *   LQL_THREADS=2 prefill [--n 64] [--reps 10]
 *
 * Wall-clock numbers are printed, never asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "engine_int.h"
#include "bandwidth.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float rnd(void)
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 - 0.5) * 0.1f;
}

/* Best seconds of `reps` products y = x · Wᵀ with LQL_NO_AVX512 and LQL_QEXACT set, or
 * with wf (w as f32) through cblas_sgemm. */
static double best_of(const eng_w *w, const float *wf, const float *x, int n, float *y, int reps,
                      int no512, int exact)
{
    double best = 1e30;
    setenv("LQL_NO_AVX512", no512 ? "1" : "0", 1);
    setenv("LQL_QEXACT", exact ? "1" : "0", 1);
    if (wf) openblas_set_num_threads(eng_threads());
    for (int r = 0; r < reps; r++) {
        double t0 = bw_now();
        if (wf)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, w->rows, w->cols, 1.0f, x, w->cols,
                        wf, w->cols, 0.0f, y, w->rows);
        else
            eng_matmul(w, x, n, y);
        double t = bw_now() - t0;
        best = t < best ? t : best;
    }
    if (wf) openblas_set_num_threads(1);   /* as the engine keeps it */
    return best;
}

int main(int argc, char **argv)
{
    int n = 64, reps = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else { fprintf(stderr, "prefill: unknown option %s\n", argv[i]); return 2; }
    }
    if (n < 1 || reps < 1) { fprintf(stderr, "prefill: counts must be positive\n"); return 2; }
    const int shapes[2][2] = {{5632, 2048}, {2048, 5632}};
    const vx_dtype dts[6] = {VX_BF16, VX_F16, VX_F32, VX_Q8_0, VX_Q4_K, VX_Q6_K};
    double ld[3] = {0};
    if (getloadavg(ld, 3) < 0) ld[0] = -1;
    printf("threads %d, n %d, best of %d, load %.2f\n", eng_threads(), n, reps, ld[0]);
    printf("%-5s %-11s %12s %12s %12s %12s %7s   default path\n", "dtype", "rows x cols",
           "default GF/s", "QEXACT GF/s", "AVX2 GF/s", "OpenBLAS", "ratio");
    for (int s = 0; s < 2; s++) {
        const int rows = shapes[s][0], cols = shapes[s][1];
        float *x = malloc((size_t)n * cols * sizeof *x), *y = malloc((size_t)n * rows * sizeof *y);
        float *row = malloc((size_t)cols * sizeof *row);
        void *buf = malloc((size_t)rows * cols * 4);
        float *wf = malloc((size_t)rows * cols * sizeof *wf);
        if (!x || !y || !row || !buf || !wf) { fprintf(stderr, "prefill: out of memory\n"); return 1; }
        for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = rnd();
        for (int d = 0; d < 6; d++) {
            unsigned be = 1, bb = 0;
            const int quant = vx_quant_block(dts[d], &be, &bb) == 0;
            const size_t rb = quant ? (size_t)cols / be * bb : (size_t)cols * (dts[d] == VX_F32 ? 4 : 2);
            for (int r = 0; r < rows; r++) {
                for (int c = 0; c < cols; c++) row[c] = rnd();
                char *dst = (char *)buf + (size_t)r * rb;
                if (quant && vx_quantize_row(dts[d], row, dst, (size_t)cols) < 0) {
                    fprintf(stderr, "prefill: cannot quantise to %s\n", vx_dtype_name(dts[d]));
                    return 1;
                }
                for (int c = 0; c < cols && !quant; c++) {
                    if (dts[d] == VX_F32) ((float *)(void *)dst)[c] = row[c];
                    else ((uint16_t *)(void *)dst)[c] = dts[d] == VX_F16 ? vx_f32_to_f16(row[c])
                                                                          : vx_f32_to_bf16(row[c]);
                }
            }
            eng_w w = {dts[d], buf, rows, cols, rb, 0, 0};
            for (int r = 0; r < rows; r++) eng_row_f32(w.dt, (const char *)buf + (size_t)r * rb, wf + (size_t)r * cols, (size_t)cols);
            double fast = 1e30, exact = 1e30, slow = 1e30, blas = 1e30;
            for (int round = 0; round < 2; round++) {   /* alternate the paths */
                double a = best_of(&w, NULL, x, n, y, reps, 0, 0), b = best_of(&w, NULL, x, n, y, reps, 1, 0);
                double e = quant ? best_of(&w, NULL, x, n, y, reps, 0, 1) : 1e30;
                double o = best_of(&w, wf, x, n, y, reps, 0, 0);
                fast = a < fast ? a : fast;
                slow = b < slow ? b : slow;
                exact = e < exact ? e : exact;
                blas = o < blas ? o : blas;
            }
            setenv("LQL_NO_AVX512", "0", 1);
            setenv("LQL_QEXACT", "0", 1);
            double flop = 2.0 * n * rows * cols;
            char ex[32] = "-";
            if (quant) snprintf(ex, sizeof ex, "%.1f", flop / exact / 1e9);
            printf("%-5s %5d x %-5d %12.1f %12s %12.1f %12.1f %7.2f   %s\n", vx_dtype_name(dts[d]), rows,
                   cols, flop / fast / 1e9, ex, flop / slow / 1e9, flop / blas / 1e9, blas / fast,
                   eng_prefill_path(dts[d]));
        }
        free(x);
        free(y);
        free(row);
        free(buf);
        free(wf);
    }
    printf("(ratio: OpenBLAS seconds / default seconds; QEXACT: LQL_QEXACT=1, the exact f32 path;\n"
           " AVX2: LQL_NO_AVX512=1)\n");
    return 0;
}
