/*
 * gemv.c — the decode GEMV against a plain read of the same bytes, in the same minutes:
 * each round runs eng_matmul with one activation row over every 2-D f32/f16/bf16 tensor
 * of a container's decoder stack (the model's own shapes, from its own file mapping, as
 * one decoded token reads them), then a plain read of the same tensors on the engine's
 * pool (the probe's summing loop, bench/bandwidth.h), and prints both rates and their
 * ratio; then the median and quartiles of the ratios. The ratio is the kernel's share of
 * what the memory system gave in that minute, so it is comparable across minutes whose
 * bandwidth moved. --n N gives the product N activation rows (a step decoding N sessions
 * together, or an N-token prompt): the same bytes, N times the arithmetic.
 *
 *   gemv [CONTAINER] [--rounds 40] [--n 1]   (default /tmp/lql-bench/vx-bf16-22.vindex3,
 *                                              which `decode` creates)
 *
 * Wall-clock numbers are printed, never asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vindex.h"
#include "engine_int.h"
#include "bandwidth.h"

#define MAX_MATS 4096

typedef struct rd {
    const char *p;
    size_t n;
    float sink[64];
} rd;

/* Part i of the plain read: a contiguous slice, summed by the bandwidth probe's body. */
static void read_part(void *ctx, int i, int np)
{
    rd *r = ctx;
    size_t per = r->n / (size_t)np & ~(size_t)127, lo = (size_t)i * per;
    size_t hi = i == np - 1 ? r->n & ~(size_t)127 : lo + per;
    bw_slice s = {(const float *)(r->p + lo), (hi - lo) / sizeof(float), 0};
    bw_sum(&s);
    r->sink[i % 64] = s.sum;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *dir = "/tmp/lql-bench/vx-bf16-22.vindex3";
    int rounds = 40, n = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoi(argv[++i]);
        else dir = argv[i];
    }
    if (rounds < 1) rounds = 1;
    if (n < 1 || n > 64) {
        fprintf(stderr, "gemv: --n takes 1 to 64 rows\n");
        return 2;
    }
    bw_drop_cache(dir);     /* as bench/decode: the container cached by its own mapping */
    vx_container *c;
    vx_err err = {0};
    if (vx_open(dir, &c, &err)) {
        fprintf(stderr, "gemv: %s\n", err.msg);
        return 1;
    }
    static eng_w w[MAX_MATS];
    int nw = 0, maxc = 0, maxr = 0;
    size_t bytes = 0;
    for (size_t i = 0; i < vx_tensor_count(c) && nw < MAX_MATS; i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if (strcmp(t->object, "target.decoder_stack") || t->ndim != 2 ||
            (t->dtype != VX_BF16 && t->dtype != VX_F16 && t->dtype != VX_F32))
            continue;
        eng_w_of(&w[nw], t);
        bytes += (size_t)t->nbytes;
        maxc = w[nw].cols > maxc ? w[nw].cols : maxc;
        maxr = w[nw].rows > maxr ? w[nw].rows : maxr;
        nw++;
    }
    if (!nw) {
        fprintf(stderr, "gemv: %s has no 2-D f32/f16/bf16 decoder-stack tensors\n", dir);
        vx_close(c);
        return 1;
    }
    float *x = malloc((size_t)n * maxc * sizeof *x), *y = malloc((size_t)n * maxr * sizeof *y);
    double *ratio = malloc((size_t)rounds * sizeof *ratio);
    if (!x || !y || !ratio) return 1;
    for (int i = 0; i < n * maxc; i++) x[i] = (float)((i * 7) % 13) / 13.0f - 0.4f;
    printf("%s: %d matrices, %.1f MB, %d activation rows, %d threads (the first round pages "
           "them in)\n", dir, nw, (double)bytes / 1e6, n, eng_threads());
    printf("round  gemv GB/s  read GB/s  ratio\n");
    for (int r = 0; r < rounds; r++) {
        double t0 = bw_now();
        for (int i = 0; i < nw; i++) eng_matmul(&w[i], x, n, y);
        double t1 = bw_now();
        for (int i = 0; i < nw; i++) {
            rd p = {.p = w[i].data, .n = (size_t)w[i].rows * w[i].row_bytes};
            eng_parallel(read_part, &p);
        }
        double t2 = bw_now(), g = (double)bytes / (t1 - t0) / 1e9, b = (double)bytes / (t2 - t1) / 1e9;
        ratio[r] = g / b;
        printf("%5d  %9.1f  %9.1f  %5.2f\n", r + 1, g, b, ratio[r]);
    }
    if (rounds > 1) {
        qsort(ratio + 1, (size_t)rounds - 1, sizeof *ratio, cmp_d);   /* round 1 pages in */
        int m = rounds - 1;
        printf("gemv / read over rounds 2-%d: median %.3f (quartiles %.3f-%.3f)\n", rounds,
               ratio[1 + m / 2], ratio[1 + m / 4], ratio[1 + 3 * m / 4]);
    }
    free(x);
    free(y);
    free(ratio);
    vx_close(c);
    return 0;
}
