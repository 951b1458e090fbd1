/*
 * prefill.c — GFLOP/s of eng_matmul's many-row product (prefill) per weight dtype, on the
 * shapes of the 1.1B benchmark model's MLP (5632 × 2048 and 2048 × 5632), with the kernel
 * paths alternated in the same minutes: the default path of this host and the fallback
 * LQL_NO_AVX512=1 selects (OpenBLAS sgemm on f32 weight tiles). Best of --reps runs each:
 * the machine is shared, and the best run is the least disturbed one.
 *
 *   LQL_THREADS=2 prefill [--n 64] [--reps 10]
 *
 * Wall-clock numbers are printed, never asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine_int.h"
#include "bandwidth.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float rnd(void)
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 - 0.5) * 0.1f;
}

/* Best seconds of `reps` products y = x · Wᵀ with LQL_NO_AVX512 set to `no512`. */
static double best_of(const eng_w *w, const float *x, int n, float *y, int reps, int no512)
{
    double best = 1e30;
    setenv("LQL_NO_AVX512", no512 ? "1" : "0", 1);
    for (int r = 0; r < reps; r++) {
        double t0 = bw_now();
        eng_matmul(w, x, n, y);
        double t = bw_now() - t0;
        best = t < best ? t : best;
    }
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
    const vx_dtype dts[3] = {VX_BF16, VX_F16, VX_F32};
    double ld[3] = {0};
    if (getloadavg(ld, 3) < 0) ld[0] = -1;
    printf("threads %d, n %d, best of %d, load %.2f\n", eng_threads(), n, reps, ld[0]);
    printf("%-5s %-11s %12s %12s %7s   (default path: %s)\n", "dtype", "rows x cols", "default GF/s",
           "sgemm GF/s", "ratio", eng_prefill_path(VX_BF16));
    for (int s = 0; s < 2; s++) {
        const int rows = shapes[s][0], cols = shapes[s][1];
        float *x = malloc((size_t)n * cols * sizeof *x), *y = malloc((size_t)n * rows * sizeof *y);
        void *buf = malloc((size_t)rows * cols * 4);
        if (!x || !y || !buf) { fprintf(stderr, "prefill: out of memory\n"); return 1; }
        for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = rnd();
        for (int d = 0; d < 3; d++) {
            for (size_t i = 0; i < (size_t)rows * cols; i++) {
                float v = rnd();
                if (dts[d] == VX_F32) ((float *)buf)[i] = v;
                else ((uint16_t *)buf)[i] = dts[d] == VX_F16 ? vx_f32_to_f16(v) : vx_f32_to_bf16(v);
            }
            eng_w w = {dts[d], buf, rows, cols, (size_t)cols * (dts[d] == VX_F32 ? 4 : 2), 0, 0};
            double fast = 1e30, slow = 1e30;
            for (int round = 0; round < 2; round++) {   /* alternate the two paths */
                double a = best_of(&w, x, n, y, reps, 0), b = best_of(&w, x, n, y, reps, 1);
                fast = a < fast ? a : fast;
                slow = b < slow ? b : slow;
            }
            double flop = 2.0 * n * rows * cols;
            printf("%-5s %5d x %-5d %12.1f %12.1f %7.2f\n", vx_dtype_name(dts[d]), rows, cols,
                   flop / fast / 1e9, flop / slow / 1e9, slow / fast);
        }
        free(x);
        free(y);
        free(buf);
    }
    return 0;
}
