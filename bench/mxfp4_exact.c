/*
 * mxfp4_exact.c — speed of eng_matmul on a source-exact MXFP4 matrix (GPT-OSS experts as
 * the checkpoint packs them: decoded exactly to bf16 and run through the bf16 kernels, so
 * the logits are the dequantised model's bit for bit) next to the same product on the bf16
 * matrix it decodes to, for decode and prefill row counts.
 *
 *   mxfp4_exact [--rows 2880] [--cols 2880] [--reps 30]      (GPT-OSS-20B's expert width)
 *   LQL_NO_AVX512=1 mxfp4_exact                               (the AVX2 paths)
 *
 * Each figure is the best of --reps runs, the two products alternating (the machine is
 * shared); before each timing the outputs are compared and must be bit-identical.
 * Wall-clock numbers are printed, never asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine_int.h"
#include "qkernels.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int rows = 2880, cols = 2880, reps = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows")) rows = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols")) cols = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: mxfp4_exact [--rows N] [--cols N (a multiple of 32)] [--reps N]\n");
            return 2;
        }
    }
    if (rows <= 0 || cols <= 0 || cols % 32 || reps <= 0) {
        fprintf(stderr, "mxfp4_exact: rows, reps positive; cols a positive multiple of 32\n");
        return 2;
    }
    static const int ns[] = {1, 4, 8, 64};
    const size_t rb = (size_t)cols / 32 * 17;
    unsigned char *q = malloc((size_t)rows * rb);
    uint16_t *b = malloc((size_t)rows * cols * sizeof *b);
    float *row = malloc((size_t)cols * sizeof *row), *x = malloc((size_t)64 * cols * sizeof *x);
    float *yq = malloc((size_t)64 * rows * sizeof *yq), *yb = malloc((size_t)64 * rows * sizeof *yb);
    if (!q || !b || !row || !x || !yq || !yb) {
        fprintf(stderr, "mxfp4_exact: out of memory\n");
        return 1;
    }
    /* random codes under GPT-OSS-like scales (2^-7 .. 2^-4) */
    uint64_t s = 1;
    for (size_t i = 0; i < (size_t)rows * rb; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        q[i] = (unsigned char)(s >> 56);
        if (i % 17 == 0) q[i] = (unsigned char)(120 + (s >> 62));
    }
    for (int r = 0; r < rows; r++) {
        eng_qrow_f32(VX_MXFP4, q + (size_t)r * rb, row, cols);
        for (int c = 0; c < cols; c++) b[(size_t)r * cols + c] = vx_f32_to_bf16(row[c]);
    }
    for (int i = 0; i < 64 * cols; i++) x[i] = (float)(i % 17) / 17.0f - 0.5f;
    eng_w wq = {VX_MXFP4, q, rows, cols, rb, 0, 1};
    eng_w wb = {VX_BF16, b, rows, cols, (size_t)cols * 2, 0, 0};
    printf("[%d, %d], %d threads, AVX-512 %s: best of %d\n", rows, cols, eng_threads(),
           eng_avx512() ? "on" : "off", reps);
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        const int n = ns[k];
        eng_matmul(&wq, x, n, yq);
        eng_matmul(&wb, x, n, yb);
        int same = memcmp(yq, yb, (size_t)n * rows * sizeof *yq) == 0;
        double bq = 1e30, bbf = 1e30;
        for (int r = 0; r < reps; r++) {
            double t = now();
            eng_matmul(&wq, x, n, yq);
            t = now() - t;
            bq = t < bq ? t : bq;
            t = now();
            eng_matmul(&wb, x, n, yb);
            t = now() - t;
            bbf = t < bbf ? t : bbf;
        }
        printf("  %2d rows: mxfp4 source-exact %8.3f ms   bf16 %8.3f ms   ratio %.2f   %s\n", n,
               bq * 1e3, bbf * 1e3, bq / bbf, same ? "bit-identical" : "DIFFERENT");
    }
    free(q); free(b); free(row); free(x); free(yq); free(yb);
    return 0;
}
