/*
 * ssm.c — the Mamba2 selective state-space mixer (eng_ssm in engine_int.h).
 *
 * One call projects all n positions at once (GEMM for a prompt, GEMV for one token), runs
 * the conv over the carried window, then scans the recurrence position by position per
 * head. The scan is the exact recurrence, not the chunked (SSD) form: its cost is
 * heads·head_dim·N per token, small next to the projections, and a prompt split at any
 * point continues bit-for-bit as the same recurrence, so prefill equals decode. Heads are
 * independent and run on the pool when the scan is large enough to pay for it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine_int.h"

size_t eng_ssm_state_floats(const eng_ssm *L)
{
    return (size_t)L->heads * L->head_dim * L->state;
}

typedef struct scan {
    const eng_ssm *L;
    const float *xbc, *dt;  /* conv outputs [n, I + 2GN]; dt [n, heads] (final) */
    float *st, *y;          /* state [heads, hd, N]; y [n, I] */
    int n;
} scan;

static void scan_heads(void *ctx, int part, int parts)
{
    const scan *s = ctx;
    const eng_ssm *L = s->L;
    const int hd = L->head_dim, N = L->state, I = L->heads * hd, GN = L->groups * N;
    const int C = I + 2 * GN, per_group = L->heads / L->groups;
    int lo, hi;
    eng_split(L->heads, part, parts, 1, &lo, &hi);
    for (int h = lo; h < hi; h++) {
        const int g = h / per_group;
        float *st = s->st + (size_t)h * hd * N;
        for (int t = 0; t < s->n; t++) {
            const float *row = s->xbc + (size_t)t * C;
            const float *x = row + (size_t)h * hd, *B = row + I + (size_t)g * N;
            const float *Cm = row + I + GN + (size_t)g * N;
            const float dt = s->dt[(size_t)t * L->heads + h];
            const float da = expf(dt * L->a[h]);
            float *y = s->y + (size_t)t * I + (size_t)h * hd;
            for (int p = 0; p < hd; p++) {
                float *sp = st + (size_t)p * N, xdt = x[p] * dt, acc = 0;
                for (int k = 0; k < N; k++) {
                    sp[k] = da * sp[k] + xdt * B[k];
                    acc += sp[k] * Cm[k];
                }
                y[p] = acc + L->d[h] * x[p];
            }
        }
    }
}

int eng_ssm_run(const eng_ssm *L, const float *h, int n, float *conv_win, float *state,
                float *out, vx_err *err)
{
    const int I = L->heads * L->head_dim, GN = L->groups * L->state, C = I + 2 * GN;
    const int P = 2 * I + 2 * GN + L->heads;
    float *zx = malloc((size_t)n * ((size_t)P + C + I + L->heads) * sizeof *zx);
    if (!zx) return vx_errf(err, VX_ENOMEM, "out of memory for the ssm mixer (%d positions)", n);
    float *xbc = zx + (size_t)n * P, *y = xbc + (size_t)n * C, *dt = y + (size_t)n * I;
    eng_matmul(&L->in_proj, h, n, zx);
    eng_add_bias(zx, L->in_b, n, P);
    eng_conv_run(&L->conv, conv_win, zx + I, (size_t)P, n, xbc);
    for (int t = 0; t < n; t++)
        for (int hh = 0; hh < L->heads; hh++) {
            float v = eng_softplus(zx[(size_t)t * P + I + C + hh] + L->dt_bias[hh]);
            dt[(size_t)t * L->heads + hh] = fminf(fmaxf(v, L->dt_min), L->dt_max);
        }
    scan sc = {L, xbc, dt, state, y, n};
    if ((size_t)n * I * L->state < 65536) scan_heads(&sc, 0, 1);
    else eng_parallel(scan_heads, &sc);
    /* z sits at the start of each projected row: gather it beside y for the gated norm */
    for (int t = 0; t < n; t++) memcpy(xbc + (size_t)t * I, zx + (size_t)t * P, (size_t)I * sizeof *zx);
    eng_gated_norm(&L->norm, y, xbc, n, 1);
    eng_matmul(&L->out_proj, y, n, out);
    eng_add_bias(out, L->out_b, n, L->out_proj.rows);
    free(zx);
    return 0;
}
