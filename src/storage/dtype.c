/*
 * dtype.c — the element types a container may store: names, block geometry, byte counts
 * (overflow-checked), and exact scalar conversions between f32 and the 16-bit floats.
 */
#include "vindex.h"

#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    const char *alias;       /* safetensors' spelling, when it has one */
    unsigned elems, bytes;   /* per block */
} types[VX_DTYPE_COUNT] = {
    [VX_F32] = {"f32", "F32", 1, 4},
    [VX_F16] = {"f16", "F16", 1, 2},
    [VX_BF16] = {"bf16", "BF16", 1, 2},
    [VX_Q8_0] = {"q8_0", NULL, 32, 34},
    [VX_Q4_0] = {"q4_0", NULL, 32, 18},
    [VX_Q4_K] = {"q4_k", NULL, 256, 144},
    [VX_Q6_K] = {"q6_k", NULL, 256, 210},
    [VX_MXFP4] = {"mxfp4", NULL, 32, 17},
    [VX_I32] = {"i32", "I32", 1, 4},
    [VX_I64] = {"i64", "I64", 1, 8},
    [VX_U8] = {"u8", "U8", 1, 1},
};

static int valid(vx_dtype t)
{
    return (int)t >= 0 && t < VX_DTYPE_COUNT;
}

const char *vx_dtype_name(vx_dtype t)
{
    return valid(t) ? types[t].name : NULL;
}

/* Returns -1 (without an error value: callers name the context) for an unknown name. */
int vx_dtype_parse(const char *name, vx_dtype *out)
{
    if (!name)
        return -1;
    for (int i = 0; i < VX_DTYPE_COUNT; i++) {
        if (strcasecmp(name, types[i].name) == 0 ||
            (types[i].alias && strcasecmp(name, types[i].alias) == 0)) {
            *out = (vx_dtype)i;
            return 0;
        }
    }
    return -1;
}

unsigned vx_dtype_block_elems(vx_dtype t)
{
    return valid(t) ? types[t].elems : 0;
}

unsigned vx_dtype_block_bytes(vx_dtype t)
{
    return valid(t) ? types[t].bytes : 0;
}

int vx_dtype_nbytes(vx_dtype t, uint64_t ne0, uint64_t nrows, uint64_t *out)
{
    if (!valid(t))
        return -1;
    uint64_t be = types[t].elems, bb = types[t].bytes;
    if (ne0 % be != 0)
        return -1;
    uint64_t row = ne0 / be, total;
    if (__builtin_mul_overflow(row, bb, &row) || __builtin_mul_overflow(row, nrows, &total))
        return -1;
    *out = total;
    return 0;
}

uint64_t vx_tensor_nelems(const vx_tensor *t)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= (uint64_t)t->shape[i];
    return n;
}

/* ---- 16-bit floats: bit-exact, round-to-nearest-even ---- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float vx_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f)                        /* inf / nan, payload kept */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp != 0)
        return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0)
        return bits_f32(sign);
    /* Subnormal: normalise the mantissa into an f32 exponent. */
    int e = -1;
    do {
        e++;
        man <<= 1;
    } while (!(man & 0x400u));
    return bits_f32(sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13));
}

uint16_t vx_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
    if (exp == 0xff) {
        if (man == 0)
            return sign | 0x7c00u;
        /* NaN: keep the top payload bits and make sure it stays a NaN. */
        return sign | 0x7c00u | 0x200u | (uint16_t)(man >> 13);
    }
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f)
        return sign | 0x7c00u;
    if (e <= 0) {
        /* Result is subnormal (or zero): shift the full significand, round to even. */
        if (e < -10)
            return sign;
        uint32_t m = man | 0x800000u;
        unsigned shift = (unsigned)(14 - e);
        uint32_t half = 1u << (shift - 1), rest = m & ((1u << shift) - 1);
        uint32_t r = m >> shift;
        if (rest > half || (rest == half && (r & 1u)))
            r++;
        return sign | (uint16_t)r;   /* a carry into bit 10 yields the smallest normal */
    }
    uint32_t r = ((uint32_t)e << 10) | (man >> 13), rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u)))
        r++;                         /* a carry may overflow to inf, which is right */
    return sign | (uint16_t)r;
}

float vx_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t vx_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu))
        return (uint16_t)((u >> 16) | 0x40u);   /* quiet NaN, never rounded to inf */
    uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

/* Converts n elements of a scalar float row to f32. Returns -1 for any other dtype. */
int vx_row_to_f32(vx_dtype t, const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    uint16_t h;
    switch (t) {
    case VX_F32:
        memcpy(dst, src, n * sizeof(float));
        return 0;
    case VX_F16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&h, p + 2 * i, 2);
            dst[i] = vx_f16_to_f32(h);
        }
        return 0;
    case VX_BF16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&h, p + 2 * i, 2);
            dst[i] = vx_bf16_to_f32(h);
        }
        return 0;
    default:
        return -1;
    }
}
