/*
 * rope.c — rotary position embedding in place on [n, heads * stride] rows. The angle of
 * pair i at position p is p · inv_freq[i], computed in double (inv_freq comes from the
 * plan, with llama3 scaling already folded in). rotate_half pairs feature j with
 * j + rotary_dim/2; interleaved pairs (2i, 2i + 1). mscale (YaRN's attention factor)
 * multiplies cos and sin, so q·k grows by its square.
 */
#include <math.h>
#include "engine_int.h"

void eng_rope_apply(const eng_rope *r, float *x, int n, int pos0, int heads, int stride,
                    int off)
{
    const int half = r->rotary_dim / 2;
    if (r->style == ROPE_NONE || half == 0) return;
    float cs[half], sn[half];
    for (int t = 0; t < n; t++) {
        double p = (double)(pos0 + t);
        for (int i = 0; i < half; i++) {
            double a = p * r->inv_freq[i];
            cs[i] = (float)(cos(a) * r->mscale);
            sn[i] = (float)(sin(a) * r->mscale);
        }
        for (int h = 0; h < heads; h++) {
            float *v = x + (size_t)t * heads * stride + (size_t)h * stride + off;
            for (int i = 0; i < half; i++) {
                int a = r->style == ROPE_HALF ? i : 2 * i;
                int b = r->style == ROPE_HALF ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs[i] - x1 * sn[i];
                v[b] = x1 * cs[i] + x0 * sn[i];
            }
        }
    }
}
