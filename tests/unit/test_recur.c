/*
 * test_recur.c — the recurrent token mixers (ssm.c: Mamba2, deltanet.c: Gated DeltaNet)
 * against float64 references written here from transformers' eager semantics
 * (modeling_mamba2.py torch_forward, modeling_qwen3_next.py
 * torch_recurrent_gated_delta_rule), with random weights. For each mixer and geometry:
 * the whole prompt in one call, the prompt split at odd points (state carried across the
 * calls) and token-by-token decode all match the reference, and each other within 1e-5.
 * A second geometry is large enough to put the scan on the thread pool.
 */
#include <math.h>
#include <stdlib.h>
#include "t.h"
#include "engine_int.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float rnd(float scale)
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return scale * (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float *rvec(size_t n, float scale, float offset)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = offset + rnd(scale);
    return v;
}
static eng_w wview(const float *m, int rows, int cols)
{
    eng_w w = {VX_F32, m, rows, cols, (size_t)cols * 4, 0, 0};
    return w;
}
static double softplus_d(double x) { return x > 20 ? x : log1p(exp(x)); }
static double silu_d(double x) { return x / (1 + exp(-x)); }

/* max |a - b| / (1 + max|b|) over n values */
static double rel_err(const float *a, const double *b, size_t n)
{
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) if (fabs(b[i]) > scale) scale = fabs(b[i]);
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / (1 + scale);
        if (e > worst) worst = e;
    }
    return worst;
}
static double rel_errf(const float *a, const float *b, size_t n)
{
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) if (fabs(b[i]) > scale) scale = fabs(b[i]);
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (1 + scale);
        if (e > worst) worst = e;
    }
    return worst;
}

/* y[o] = Σ_i W[o, i] x[i] in double */
static void mv(const float *W, int rows, int cols, const double *x, double *y)
{
    for (int o = 0; o < rows; o++) {
        double s = 0;
        for (int i = 0; i < cols; i++) s += (double)W[(size_t)o * cols + i] * x[i];
        y[o] = s;
    }
}

/* Feed x [n, hidden] in pieces of the given sizes (0-terminated; the rest in one call). */
typedef int (*run_fn)(const void *L, const float *h, int n, float *win, float *st, float *out);
static void run_split(run_fn f, const void *L, const float *x, int n, int hidden, int out_w,
                      const int *pieces, size_t win_n, size_t st_n, float *out)
{
    float *win = calloc(win_n + 1, sizeof *win), *st = calloc(st_n, sizeof *st);
    int done = 0;
    for (int i = 0; done < n; i++) {
        int c = pieces && pieces[i] ? pieces[i] : n - done;
        if (c > n - done) c = n - done;
        CHECK(f(L, x + (size_t)done * hidden, c, win, st, out + (size_t)done * out_w) == 0);
        done += c;
    }
    free(win);
    free(st);
}

/* ---------------------------------------------------------------- Mamba2 */

typedef struct mgeo { int hidden, heads, hd, groups, N, K, n; float dt_min, dt_max; } mgeo;

static int ssm_call(const void *L, const float *h, int n, float *win, float *st, float *out)
{
    vx_err e;
    return eng_ssm_run(L, h, n, win, st, out, &e);
}

static void ssm_ref(const mgeo *g, const float *in_w, const float *conv_w, const float *conv_b,
                    const float *dt_bias, const float *a_log, const float *D, const float *nw,
                    const float *out_w, float eps, const float *x, double *out)
{
    const int I = g->heads * g->hd, GN = g->groups * g->N, C = I + 2 * GN, P = 2 * I + 2 * GN + g->heads;
    double *proj = malloc((size_t)g->n * P * sizeof *proj), *xbc = malloc((size_t)g->n * C * sizeof *xbc);
    double *st = calloc((size_t)I * g->N, sizeof *st), *y = malloc((size_t)I * sizeof *y);
    double *xt = malloc((size_t)g->hidden * sizeof *xt);
    for (int t = 0; t < g->n; t++) {
        for (int i = 0; i < g->hidden; i++) xt[i] = x[(size_t)t * g->hidden + i];
        mv(in_w, P, g->hidden, xt, proj + (size_t)t * P);
    }
    for (int t = 0; t < g->n; t++)
        for (int c = 0; c < C; c++) {
            double s = conv_b[c];
            for (int k = 0; k < g->K; k++) {
                int src = t - g->K + 1 + k;
                if (src >= 0) s += conv_w[(size_t)c * g->K + k] * proj[(size_t)src * P + I + c];
            }
            xbc[(size_t)t * C + c] = silu_d(s);
        }
    for (int t = 0; t < g->n; t++) {
        const double *r = xbc + (size_t)t * C;
        for (int h = 0; h < g->heads; h++) {
            int grp = h / (g->heads / g->groups);
            double dt = softplus_d(proj[(size_t)t * P + I + C + h] + dt_bias[h]);
            dt = fmin(fmax(dt, g->dt_min), g->dt_max);
            double da = exp(dt * -exp((double)a_log[h]));
            for (int p = 0; p < g->hd; p++) {
                double xv = r[h * g->hd + p], acc = 0;
                for (int k = 0; k < g->N; k++) {
                    double *s = st + ((size_t)h * g->hd + p) * g->N + k;
                    *s = da * *s + dt * xv * r[I + grp * g->N + k];
                    acc += *s * r[I + GN + grp * g->N + k];
                }
                y[h * g->hd + p] = acc + D[h] * xv;
            }
        }
        double ss = 0;
        for (int i = 0; i < I; i++) { y[i] *= silu_d(proj[(size_t)t * P + i]); ss += y[i] * y[i]; }
        double inv = 1 / sqrt(ss / I + eps);
        for (int i = 0; i < I; i++) y[i] *= inv * nw[i];
        mv(out_w, g->hidden, I, y, out + (size_t)t * g->hidden);
    }
    free(proj); free(xbc); free(st); free(y); free(xt);
}

static void test_ssm(const mgeo *g)
{
    const int I = g->heads * g->hd, GN = g->groups * g->N, C = I + 2 * GN, P = 2 * I + 2 * GN + g->heads;
    float *in_w = rvec((size_t)P * g->hidden, 0.3f, 0), *out_w = rvec((size_t)g->hidden * I, 0.2f, 0);
    float *conv_w = rvec((size_t)C * g->K, 0.5f, 0), *conv_b = rvec(C, 0.1f, 0);
    float *dt_bias = rvec(g->heads, 1.0f, -1.5f), *a_log = rvec(g->heads, 1.0f, 0.5f);
    float *D = rvec(g->heads, 0.5f, 1.0f), *nw = rvec(I, 0.1f, 1.0f);
    float *x = rvec((size_t)g->n * g->hidden, 1.0f, 0), *a = malloc(g->heads * sizeof *a);
    for (int h = 0; h < g->heads; h++) a[h] = (float)-exp((double)a_log[h]);
    const float eps = 1e-5f;
    eng_ssm L = {.heads = g->heads, .head_dim = g->hd, .groups = g->groups, .state = g->N,
                 .in_proj = wview(in_w, P, g->hidden), .out_proj = wview(out_w, g->hidden, I),
                 .conv = {C, g->K, conv_w, conv_b}, .dt_bias = dt_bias, .a = a, .d = D,
                 .dt_min = g->dt_min, .dt_max = g->dt_max,
                 .norm = {NORM_RMS, I, eps, nw, NULL}};
    CHECK(eng_conv_window_floats(&L.conv) == (size_t)(g->K - 1) * C);
    CHECK(eng_ssm_state_floats(&L) == (size_t)g->heads * g->hd * g->N);
    size_t on = (size_t)g->n * g->hidden;
    double *ref = malloc(on * sizeof *ref);
    float *whole = malloc(on * 4), *split = malloc(on * 4), *step = malloc(on * 4);
    ssm_ref(g, in_w, conv_w, conv_b, dt_bias, a_log, D, nw, out_w, eps, x, ref);
    static const int pieces[] = {3, 1, 7, 2, 11, 0}, ones[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    CHECK(g->n <= 48);
    run_split(ssm_call, &L, x, g->n, g->hidden, g->hidden, NULL, eng_conv_window_floats(&L.conv), eng_ssm_state_floats(&L), whole);
    run_split(ssm_call, &L, x, g->n, g->hidden, g->hidden, pieces, eng_conv_window_floats(&L.conv), eng_ssm_state_floats(&L), split);
    run_split(ssm_call, &L, x, g->n, g->hidden, g->hidden, ones, eng_conv_window_floats(&L.conv), eng_ssm_state_floats(&L), step);
    double e_ref = rel_err(whole, ref, on), e_split = rel_errf(split, whole, on), e_step = rel_errf(step, whole, on);
    CHECK_MSG(e_ref < 1e-5, "ssm heads %d: prefill vs float64 reference %g", g->heads, e_ref);
    CHECK_MSG(e_split < 1e-5, "ssm heads %d: split prefill vs whole %g", g->heads, e_split);
    CHECK_MSG(e_step < 1e-5, "ssm heads %d: token-by-token vs prefill %g", g->heads, e_step);
    /* the limits are live in this data: without the clamp the reference differs */
    mgeo un = *g;
    un.dt_min = 0; un.dt_max = INFINITY;
    double *ref2 = malloc(on * sizeof *ref2);
    ssm_ref(&un, in_w, conv_w, conv_b, dt_bias, a_log, D, nw, out_w, eps, x, ref2);
    double diff = 0;
    for (size_t i = 0; i < on; i++) diff = fmax(diff, fabs(ref2[i] - ref[i]));
    CHECK_MSG(g->dt_max == INFINITY || diff > 1e-3, "dt limits do not matter here (%g)", diff);
    free(ref2);
    free(in_w); free(out_w); free(conv_w); free(conv_b); free(dt_bias); free(a_log); free(D);
    free(nw); free(x); free(a); free(ref); free(whole); free(split); free(step);
}

/* ---------------------------------------------------------------- Gated DeltaNet */

typedef struct dgeo { int hidden, nk, nv, dk, dv, K, n; } dgeo;

static int dn_call(const void *L, const float *h, int n, float *win, float *st, float *out)
{
    vx_err e;
    return eng_deltanet_run(L, h, n, win, st, out, &e);
}

static void l2n(double *v, int d)
{
    double ss = 0;
    for (int i = 0; i < d; i++) ss += v[i] * v[i];
    double inv = 1 / sqrt(ss + 1e-6);
    for (int i = 0; i < d; i++) v[i] *= inv;
}

static void dn_ref(const dgeo *g, const float *wq, const float *wb, const float *conv_w,
                   const float *dt_bias, const float *a_log, const float *nw, const float *wo,
                   float eps, const float *x, double *out)
{
    const int nk = g->nk, nv = g->nv, dk = g->dk, dv = g->dv, r = nv / nk;
    const int C = 2 * nk * dk + nv * dv, Pq = nk * (2 * dk + 2 * r * dv), Pb = 2 * nv;
    double *pq = malloc((size_t)g->n * Pq * sizeof *pq), *pb = malloc((size_t)g->n * Pb * sizeof *pb);
    double *mixed = malloc((size_t)g->n * C * sizeof *mixed), *cv = malloc((size_t)g->n * C * sizeof *cv);
    double *S = calloc((size_t)nv * dk * dv, sizeof *S), *xt = malloc((size_t)g->hidden * sizeof *xt);
    double *o = malloc((size_t)nv * dv * sizeof *o);
    for (int t = 0; t < g->n; t++) {
        for (int i = 0; i < g->hidden; i++) xt[i] = x[(size_t)t * g->hidden + i];
        mv(wq, Pq, g->hidden, xt, pq + (size_t)t * Pq);
        mv(wb, Pb, g->hidden, xt, pb + (size_t)t * Pb);
        /* transformers' fix_query_key_value_ordering: per key head [q | k | v | z] */
        for (int j = 0; j < nk; j++) {
            const double *grp = pq + (size_t)t * Pq + (size_t)j * (2 * dk + 2 * r * dv);
            for (int i = 0; i < dk; i++) {
                mixed[(size_t)t * C + j * dk + i] = grp[i];
                mixed[(size_t)t * C + nk * dk + j * dk + i] = grp[dk + i];
            }
            for (int i = 0; i < r * dv; i++) mixed[(size_t)t * C + 2 * nk * dk + j * r * dv + i] = grp[2 * dk + i];
        }
    }
    for (int t = 0; t < g->n; t++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int k = 0; k < g->K; k++) {
                int src = t - g->K + 1 + k;
                if (src >= 0) s += conv_w[(size_t)c * g->K + k] * mixed[(size_t)src * C + c];
            }
            cv[(size_t)t * C + c] = silu_d(s);
        }
    for (int t = 0; t < g->n; t++) {
        for (int h = 0; h < nv; h++) {
            int j = h / r, i = h % r;
            double q[64], k[64], delta[64];
            for (int d = 0; d < dk; d++) {
                q[d] = cv[(size_t)t * C + j * dk + d];
                k[d] = cv[(size_t)t * C + nk * dk + j * dk + d];
            }
            l2n(q, dk); l2n(k, dk);
            for (int d = 0; d < dk; d++) q[d] /= sqrt((double)dk);
            const double *v = cv + (size_t)t * C + 2 * nk * dk + h * dv;
            double b = pb[(size_t)t * Pb + j * 2 * r + i], a = pb[(size_t)t * Pb + j * 2 * r + r + i];
            double beta = 1 / (1 + exp(-b));
            double gg = -exp((double)a_log[h]) * softplus_d(a + dt_bias[h]);
            double *Sh = S + (size_t)h * dk * dv;
            for (int e = 0; e < dk * dv; e++) Sh[e] *= exp(gg);
            for (int c = 0; c < dv; c++) {
                double m = 0;
                for (int d = 0; d < dk; d++) m += Sh[d * dv + c] * k[d];
                delta[c] = beta * (v[c] - m);
            }
            for (int d = 0; d < dk; d++)
                for (int c = 0; c < dv; c++) Sh[d * dv + c] += k[d] * delta[c];
            double ss = 0;
            for (int c = 0; c < dv; c++) {
                double s = 0;
                for (int d = 0; d < dk; d++) s += Sh[d * dv + c] * q[d];
                o[h * dv + c] = s;
                ss += s * s;
            }
            double inv = 1 / sqrt(ss / dv + eps);
            const double *grp = pq + (size_t)t * Pq + (size_t)j * (2 * dk + 2 * r * dv);
            for (int c = 0; c < dv; c++)
                o[h * dv + c] *= inv * nw[c] * silu_d(grp[2 * dk + r * dv + i * dv + c]);
        }
        mv(wo, g->hidden, nv * dv, o, out + (size_t)t * g->hidden);
    }
    free(pq); free(pb); free(mixed); free(cv); free(S); free(xt); free(o);
}

static void test_deltanet(const dgeo *g)
{
    const int nk = g->nk, nv = g->nv, dk = g->dk, dv = g->dv, r = nv / nk;
    const int C = 2 * nk * dk + nv * dv, Pq = nk * (2 * dk + 2 * r * dv), Pb = 2 * nv;
    float *wq = rvec((size_t)Pq * g->hidden, 0.3f, 0), *wb = rvec((size_t)Pb * g->hidden, 0.3f, 0);
    float *wo = rvec((size_t)g->hidden * nv * dv, 0.3f, 0), *conv_w = rvec((size_t)C * g->K, 0.5f, 0);
    float *dt_bias = rvec(nv, 0.5f, 0.5f), *a_log = rvec(nv, 0.5f, -0.5f), *nw = rvec(dv, 0.1f, 1.0f);
    float *x = rvec((size_t)g->n * g->hidden, 1.0f, 0), *a = malloc(nv * sizeof *a);
    for (int h = 0; h < nv; h++) a[h] = (float)-exp((double)a_log[h]);
    const float eps = 1e-6f;
    eng_deltanet L = {.k_heads = nk, .v_heads = nv, .k_dim = dk, .v_dim = dv,
                      .in_qkvz = wview(wq, Pq, g->hidden), .in_ba = wview(wb, Pb, g->hidden),
                      .out_proj = wview(wo, g->hidden, nv * dv), .conv = {C, g->K, conv_w, NULL},
                      .dt_bias = dt_bias, .a = a, .norm = {NORM_RMS, dv, eps, nw, NULL}};
    CHECK(eng_conv_window_floats(&L.conv) == (size_t)(g->K - 1) * C);
    CHECK(eng_deltanet_state_floats(&L) == (size_t)nv * dk * dv);
    size_t on = (size_t)g->n * g->hidden;
    double *ref = malloc(on * sizeof *ref);
    float *whole = malloc(on * 4), *split = malloc(on * 4), *step = malloc(on * 4);
    dn_ref(g, wq, wb, conv_w, dt_bias, a_log, nw, wo, eps, x, ref);
    static const int pieces[] = {2, 5, 1, 9, 0}, ones[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    CHECK(g->n <= 40);
    run_split(dn_call, &L, x, g->n, g->hidden, g->hidden, NULL, eng_conv_window_floats(&L.conv), eng_deltanet_state_floats(&L), whole);
    run_split(dn_call, &L, x, g->n, g->hidden, g->hidden, pieces, eng_conv_window_floats(&L.conv), eng_deltanet_state_floats(&L), split);
    run_split(dn_call, &L, x, g->n, g->hidden, g->hidden, ones, eng_conv_window_floats(&L.conv), eng_deltanet_state_floats(&L), step);
    double e_ref = rel_err(whole, ref, on), e_split = rel_errf(split, whole, on), e_step = rel_errf(step, whole, on);
    CHECK_MSG(e_ref < 1e-5, "deltanet dk %d: prefill vs float64 reference %g", dk, e_ref);
    CHECK_MSG(e_split < 1e-5, "deltanet dk %d: split prefill vs whole %g", dk, e_split);
    CHECK_MSG(e_step < 1e-5, "deltanet dk %d: token-by-token vs prefill %g", dk, e_step);
    free(wq); free(wb); free(wo); free(conv_w); free(dt_bias); free(a_log); free(nw); free(x);
    free(a); free(ref); free(whole); free(split); free(step);
}

int main(void)
{
    const mgeo m_small = {24, 4, 6, 2, 5, 4, 37, 0.05f, 1.0f};
    const mgeo m_pool = {32, 8, 16, 1, 16, 4, 48, 0.0f, INFINITY};
    test_ssm(&m_small);
    test_ssm(&m_pool);
    const dgeo d_small = {20, 2, 4, 8, 6, 4, 33};
    const dgeo d_pool = {32, 2, 4, 32, 32, 4, 40};
    test_deltanet(&d_small);
    test_deltanet(&d_pool);
    return T_DONE();
}
