/*
 * conv.c — the depthwise causal conv1d (+ SiLU) the recurrent token mixers put in front
 * of their recurrence, over a carried window. Cross-correlation as torch's Conv1d does
 * it: out[t, c] = b[c] + Σ_k w[c, k] · in[t − K + 1 + k, c], with the inputs before the
 * first token being zeros (a fresh window) or the previous call's last K − 1 inputs. So a
 * prompt split anywhere, or fed one token at a time, gives the same outputs.
 */
#include <math.h>
#include <string.h>
#include "engine_int.h"

float eng_softplus(float x)
{
    /* torch's threshold: above 20 softplus(x) is x to f32 precision */
    return x > 20.0f ? x : (float)log1p(exp((double)x));
}

size_t eng_conv_window_floats(const eng_conv *cv)
{
    return (size_t)(cv->kernel - 1) * cv->channels;
}

void eng_conv_run(const eng_conv *cv, float *win, const float *x, size_t xstride, int n,
                  float *out)
{
    const int C = cv->channels, K = cv->kernel;
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * xstride;
        float *o = out + (size_t)t * C;
        for (int c = 0; c < C; c++) {
            const float *w = cv->w + (size_t)c * K;
            float s = cv->b ? cv->b[c] : 0.0f;
            for (int k = 0; k < K - 1; k++) s += w[k] * win[(size_t)k * C + c];
            o[c] = s + w[K - 1] * xt[c];
        }
        /* the window moves on by one input: oldest row out, this token's in */
        if (K > 1) {
            memmove(win, win + C, (size_t)(K - 2) * C * sizeof *win);
            memcpy(win + (size_t)(K - 2) * C, xt, (size_t)C * sizeof *win);
        }
    }
    eng_act(ACT_SILU, out, (size_t)n * C);
}
