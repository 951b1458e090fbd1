/*
 * norm.c — RMSNorm and LayerNorm over rows of activations, the gated RMSNorm of the
 * recurrent mixers, plus the two scalar maps the plan shares (soft-cap and the FFN
 * activations). Sums run in double: the fixtures' goldens are float64 and norms are
 * cheap next to the matrix work.
 */
#include <math.h>
#include "engine_int.h"

void eng_norm_apply(const eng_norm *nm, const float *x, float *out, int n)
{
    const int d = nm->width;
    for (int t = 0; t < n; t++) {
        const float *xr = x + (size_t)t * d;
        float *o = out + (size_t)t * d;
        double mean = 0, ss = 0;
        if (nm->kind == NORM_LAYER) {
            for (int i = 0; i < d; i++) mean += xr[i];
            mean /= d;
        }
        for (int i = 0; i < d; i++) { double c = xr[i] - mean; ss += c * c; }
        float inv = (float)(1.0 / sqrt(ss / d + (double)nm->eps));
        for (int i = 0; i < d; i++) {
            float v = (float)(xr[i] - mean) * inv * nm->w[i];
            o[i] = nm->b ? v + nm->b[i] : v;
        }
    }
}

void eng_gated_norm(const eng_norm *nm, float *y, const float *z, int n, int gate_first)
{
    const int d = nm->width;
    for (int t = 0; t < n; t++) {
        float *yr = y + (size_t)t * d;
        const float *zr = z + (size_t)t * d;
        if (gate_first)
            for (int i = 0; i < d; i++) yr[i] *= zr[i] / (1.0f + expf(-zr[i]));
        double ss = 0;
        for (int i = 0; i < d; i++) ss += (double)yr[i] * yr[i];
        float inv = (float)(1.0 / sqrt(ss / d + (double)nm->eps));
        for (int i = 0; i < d; i++) yr[i] *= inv * nm->w[i];
        if (!gate_first)
            for (int i = 0; i < d; i++) yr[i] *= zr[i] / (1.0f + expf(-zr[i]));
    }
}

float eng_softcap(float x, float cap)
{
    return cap * tanhf(x / cap);
}

void eng_act(int act, float *x, size_t n)
{
    switch (act) {
    case ACT_SILU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + expf(-x[i]));
        break;
    case ACT_GELU_TANH:
        for (size_t i = 0; i < n; i++) {
            float v = x[i];
            x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        }
        break;
    default:
        for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.7071067811865476f));
        break;
    }
}
