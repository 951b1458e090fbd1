/*
 * quant.c — the block codecs: row quantisation and dequantisation for the ggml block
 * formats (Q8_0, Q4_0, and the K-quants Q2_K..Q6_K) and for MXFP4 (OCP MX v1.0).
 *
 * Exactness is the point of this file. Dequantisation performs ggml's float operations in
 * ggml's order (the build turns contraction off, so no FMA changes a last bit); the Q4_K
 * and Q6_K quantisers follow the published scale/min search (weighted least squares over a
 * small sweep of candidate scales) so that they reproduce the reference bytes, including
 * its rounding helper, which rounds through the float adder rather than through roundf.
 * Layouts, the derivation and the measured agreement are in docs/lql/QUANT.md.
 */
#include "vindex.h"

#include <math.h>
#include <string.h>

#define QK 256              /* K-quant super-block */

static float f16(const unsigned char *p)
{
    return vx_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void put_f16(unsigned char *p, float f)
{
    uint16_t h = vx_f32_to_f16(f);
    p[0] = (unsigned char)(h & 0xff);
    p[1] = (unsigned char)(h >> 8);
}

/* Round to nearest (ties to even) by adding 1.5·2^23: the reference's own rounding, which
 * differs from roundf on ties. Callers keep |f| below 2^22. */
static int nearest_int(float f)
{
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

/* ---------------------------------------------------------------- Q8_0 */

static void deq_q8_0(const unsigned char *b, float *y)
{
    float d = f16(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

/* Scale = amax / 127; values rounded half away from zero (roundf). */
static void quant_q8_0(const float *x, unsigned char *b)
{
    float amax = 0.f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    put_f16(b, d);
    /* The clamp changes nothing for finite input; it keeps a NaN or inf from reaching an
     * undefined float-to-integer conversion. */
    for (int j = 0; j < 32; j++)
        b[2 + j] = (unsigned char)(int8_t)fmaxf(-127.f, fminf(127.f, roundf(x[j] * id)));
}

/* ---------------------------------------------------------------- Q4_0 */

static void deq_q4_0(const unsigned char *b, float *y)
{
    float d = f16(b);
    for (int j = 0; j < 16; j++) {
        int x0 = (b[2 + j] & 0x0f) - 8, x1 = (b[2 + j] >> 4) - 8;
        y[j] = (float)x0 * d;
        y[j + 16] = (float)x1 * d;
    }
}

/* d = m / -8 with m the signed value of largest magnitude; q truncates x/d + 8.5. */
static void quant_q4_0(const float *x, unsigned char *b)
{
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < 32; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    float d = max / -8.f, id = d != 0.f ? 1.f / d : 0.f;
    put_f16(b, d);
    for (int j = 0; j < 16; j++) {
        /* Truncation of a value in [0.5, 16.5], capped at 15 (clamped first, as above). */
        int q0 = (int)fmaxf(0.f, fminf(15.f, x[j] * id + 8.5f));
        int q1 = (int)fmaxf(0.f, fminf(15.f, x[j + 16] * id + 8.5f));
        b[2 + j] = (unsigned char)(q0 | q1 << 4);
    }
}

/* ---------------------------------------------------------------- MXFP4 */

static const float e2m1[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f,
                               -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};

/* x = E2M1(code) · 2^(e-127): exact (ldexpf overflows to ±inf at e = 254); e = 255 is NaN. */
static void deq_mxfp4(const unsigned char *b, float *y)
{
    if (b[0] == 255) {
        for (int j = 0; j < 32; j++)
            y[j] = NAN;
        return;
    }
    int e = (int)b[0] - 127;
    for (int j = 0; j < 16; j++) {
        y[j] = ldexpf(e2m1[b[1 + j] & 0x0f], e);
        y[j + 16] = ldexpf(e2m1[b[1 + j] >> 4], e);
    }
}

/* Magnitude code of |v| ≤ 6 rounded to nearest-even in E2M1, saturated at 6. */
static int e2m1_code(float a)
{
    /* Midpoints between neighbours; on a tie the even code (mantissa bit 0) wins. */
    static const float mid[7] = {.25f, .75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f};
    int c = 0;
    while (c < 7 && a > mid[c])
        c++;
    if (c < 7 && a == mid[c] && (c & 1))
        c++;
    return c;
}

/* OCP conversion: shared exponent floor(log2 amax) - 2 (clamped to -127, 0 for an all-zero
 * block), each value divided by the scale, rounded to E2M1; the sign is kept, -0 included. */
static void quant_mxfp4(const float *x, unsigned char *b)
{
    float amax = 0.f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    int se = -127;
    if (amax > 0.f) {
        int ex;
        frexpf(amax, &ex);             /* amax = m·2^ex, m in [0.5, 1) */
        se = imax(-127, ex - 1 - 2);
    }
    b[0] = amax > 0.f ? (unsigned char)(se + 127) : 0;
    unsigned char q[32];
    for (int j = 0; j < 32; j++) {
        float v = amax > 0.f ? ldexpf(x[j], -se) : x[j];
        q[j] = (unsigned char)(e2m1_code(fabsf(v)) | (signbit(v) ? 8 : 0));
    }
    for (int j = 0; j < 16; j++)
        b[1 + j] = (unsigned char)(q[j] | q[j + 16] << 4);
}

/* ---------------------------------------------------------------- K-quants: scales */

/* The 6-bit scale j and min j of Q4_K/Q5_K's 12 packed bytes. */
static void scale_min_k4(int j, const unsigned char *q, int *d, int *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The scales and mins of sub-blocks is and is + 1 (Q4_K and Q5_K walk them in pairs),
 * already multiplied by the super-block's d and min: dm = {d1, m1, d2, m2}. */
static void scale_min_pair(int is, const unsigned char *sc, float d, float min, float dm[4])
{
    int s, m;
    scale_min_k4(is, sc, &s, &m);
    dm[0] = d * (float)s;
    dm[1] = min * (float)m;
    scale_min_k4(is + 1, sc, &s, &m);
    dm[2] = d * (float)s;
    dm[3] = min * (float)m;
}

/* ---------------------------------------------------------------- Q2_K */

static void deq_q2_k(const unsigned char *b, float *y)
{
    const unsigned char *sc = b, *q = b + 16;
    float d = f16(b + 80), min = f16(b + 82);
    int is = 0;
    for (int n = 0; n < QK; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                int s = sc[is++];
                float dl = d * (float)(s & 0x0f), ml = min * (float)(s >> 4);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
            }
        }
        q += 32;
    }
}

/* ---------------------------------------------------------------- Q3_K */

/* The 16 signed 6-bit scales (stored +32) from their 12 packed bytes. */
static void q3_scales(const unsigned char *p, int8_t out[16])
{
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? p[j] & 0x0f : p[j - 8] >> 4;
        int hi = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | hi << 4) - 32);
    }
}

static void deq_q3_k(const unsigned char *b, float *y)
{
    const unsigned char *hm = b, *q = b + 32;
    float d = f16(b + 108);
    int8_t sc[16];
    q3_scales(b + 96, sc);
    int is = 0;
    unsigned m = 1;
    for (int n = 0; n < QK; n += 128) {
        for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
            for (int half = 0; half < 2; half++) {
                float dl = d * (float)sc[is++];
                for (int l = 0; l < 16; l++) {
                    int k = l + 16 * half;
                    int v = ((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4);
                    *y++ = dl * (float)v;
                }
            }
        }
        q += 32;
    }
}

/* ---------------------------------------------------------------- Q4_K */

static void deq_q4_k(const unsigned char *b, float *y)
{
    float d = f16(b), min = f16(b + 2);
    const unsigned char *sc = b + 4, *q = b + 16;
    for (int j = 0, is = 0; j < QK; j += 64, is += 2, q += 32) {
        float dm[4];
        scale_min_pair(is, sc, d, min, dm);
        for (int l = 0; l < 32; l++)
            *y++ = dm[0] * (float)(q[l] & 0x0f) - dm[1];
        for (int l = 0; l < 32; l++)
            *y++ = dm[2] * (float)(q[l] >> 4) - dm[3];
    }
}

/* Weighted search for a scale and a (non-positive) min for n values quantised to
 * 0..nmax: start from the min/max grid, then try nstep+1 stretched grids and keep the
 * weighted least-squares fit with the smallest weighted squared error. Writes the levels
 * to L, -min to *the_min, returns the scale. */
static float qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L,
                  float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep)
{
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
        float diff = scale * (float)L[i] + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                cur += w[i] * (diff * diff);
            }
            if (cur < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

static void quant_q4_k(const float *x, unsigned char *b)
{
    uint8_t L[QK], Laux[32];
    float w[32], mins[8], scales[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(xs[l]);
        scales[j] = qkx2(32, 15, xs, w, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    unsigned char *sc = b + 4;
    memset(sc, 0, 12);
    for (int j = 0; j < 8; j++) {
        /* Both are in 0..63 for finite input; the lower clamp only keeps a NaN from
         * becoming a negative shift operand. */
        int ls = imax(0, imin(63, nearest_int(inv_scale * scales[j])));
        int lm = imax(0, imin(63, nearest_int(inv_min * mins[j])));
        if (j < 4) {
            sc[j] = (unsigned char)ls;
            sc[j + 4] = (unsigned char)lm;
        } else {
            sc[j + 4] = (unsigned char)((ls & 0x0f) | (lm & 0x0f) << 4);
            sc[j - 4] |= (unsigned char)((ls >> 4) << 6);
            sc[j] |= (unsigned char)((lm >> 4) << 6);
        }
    }
    put_f16(b, max_scale / 63.f);
    put_f16(b + 2, max_min / 63.f);
    float d_all = f16(b), dmin_all = f16(b + 2);
    for (int j = 0; j < 8; j++) {
        int s, m;
        scale_min_k4(j, sc, &s, &m);
        float d = d_all * (float)s;
        if (d == 0.f)
            continue;          /* keep the search's levels, as the reference does */
        float dm = dmin_all * (float)m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)imax(0, imin(15, nearest_int((x[32 * j + i] + dm) / d)));
    }
    unsigned char *q = b + 16;
    for (int j = 0; j < QK; j += 64, q += 32)
        for (int l = 0; l < 32; l++)
            q[l] = (unsigned char)(L[j + l] | L[j + l + 32] << 4);
}

/* ---------------------------------------------------------------- Q5_K */

static void deq_q5_k(const unsigned char *b, float *y)
{
    float d = f16(b), min = f16(b + 2);
    const unsigned char *sc = b + 4, *qh = b + 16, *ql = b + 48;
    unsigned u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < QK; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
        float dm[4];
        scale_min_pair(is, sc, d, min, dm);
        for (int l = 0; l < 32; l++)
            *y++ = dm[0] * (float)((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - dm[1];
        for (int l = 0; l < 32; l++)
            *y++ = dm[2] * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - dm[3];
    }
}

/* ---------------------------------------------------------------- Q6_K */

static void deq_q6_k(const unsigned char *b, float *y)
{
    const unsigned char *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = f16(b + 208);
    for (int n = 0; n < QK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
            int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
            int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

#define GROUP_EPS 1e-15f

/* Symmetric search for n values quantised to -nmax..nmax-1 with weights x²: the plain
 * scale -nmax/max, then 18 nearby scales, keeping the best weighted least-squares fit.
 * Writes levels + nmax to L and returns the scale. */
static float qx(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.f ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quant_q6_k(const float *x, unsigned char *b)
{
    int8_t L[QK];
    float scales[16], max_scale = 0, max_abs = 0;
    for (int ib = 0; ib < 16; ib++) {
        scales[ib] = qx(16, 32, x + 16 * ib, L + 16 * ib);
        if (fabsf(scales[ib]) > max_abs) {
            max_abs = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    if (max_abs < GROUP_EPS) {
        memset(b, 0, 210);
        return;
    }
    float iscale = -128.f / max_scale;
    put_f16(b + 208, 1 / iscale);
    int8_t *sc = (int8_t *)(b + 192);
    for (int ib = 0; ib < 16; ib++)
        sc[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
    float d_all = f16(b + 208);
    for (int j = 0; j < 16; j++) {
        float d = d_all * (float)sc[j];
        if (d == 0.f)
            continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(imax(-32, imin(31, nearest_int(x[16 * j + i] / d))) + 32);
    }
    unsigned char *ql = b, *qh = b + 128;
    for (int j = 0; j < QK; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
            ql[l] = (unsigned char)((q1 & 0x0f) | (q3 & 0x0f) << 4);
            ql[l + 32] = (unsigned char)((q2 & 0x0f) | (q4 & 0x0f) << 4);
            qh[l] = (unsigned char)((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
        }
    }
}

/* ---------------------------------------------------------------- row API */

typedef struct codec {
    vx_dtype dt;
    const char *name;
    unsigned elems, bytes;
    void (*deq)(const unsigned char *, float *);
    void (*quant)(const float *, unsigned char *);  /* NULL: decode only */
} codec;

static const codec codecs[] = {
    {VX_Q8_0, "q8_0", 32, 34, deq_q8_0, quant_q8_0},
    {VX_Q4_0, "q4_0", 32, 18, deq_q4_0, quant_q4_0},
    {VX_Q2_K, "q2_k", QK, 84, deq_q2_k, NULL},
    {VX_Q3_K, "q3_k", QK, 110, deq_q3_k, NULL},
    {VX_Q4_K, "q4_k", QK, 144, deq_q4_k, quant_q4_k},
    {VX_Q5_K, "q5_k", QK, 176, deq_q5_k, NULL},
    {VX_Q6_K, "q6_k", QK, 210, deq_q6_k, quant_q6_k},
    {VX_MXFP4, "mxfp4", 32, 17, deq_mxfp4, quant_mxfp4},
};

static const codec *find(vx_dtype dt)
{
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++)
        if (codecs[i].dt == dt)
            return &codecs[i];
    return NULL;
}

int vx_quant_block(vx_dtype dt, unsigned *elems, unsigned *bytes)
{
    const codec *c = find(dt);
    if (!c)
        return -1;
    *elems = c->elems;
    *bytes = c->bytes;
    return 0;
}

const char *vx_quant_name(vx_dtype dt)
{
    const codec *c = find(dt);
    return c ? c->name : NULL;
}

/* dt must be a block codec (callers check with vx_quant_block first); does nothing else. */
void vx_dequantize_block(vx_dtype dt, const void *block, float *out)
{
    const codec *c = find(dt);
    if (c)
        c->deq(block, out);
}

int vx_dequantize_row(vx_dtype dt, const void *src, float *dst, size_t n)
{
    const codec *c = find(dt);
    if (!c || n % c->elems)
        return -1;
    const unsigned char *p = src;
    for (size_t i = 0; i < n / c->elems; i++)
        c->deq(p + i * c->bytes, dst + i * c->elems);
    return 0;
}

int vx_quantize_row(vx_dtype dt, const float *x, void *dst, size_t n)
{
    const codec *c = find(dt);
    if (!c || !c->quant || n % c->elems)
        return -1;
    unsigned char *p = dst;
    for (size_t i = 0; i < n / c->elems; i++)
        c->quant(x + i * c->elems, p + i * c->bytes);
    return 0;
}
