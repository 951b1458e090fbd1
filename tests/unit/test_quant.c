/*
 * test_quant.c — the block codecs against the reference vectors in
 * tests/fixtures/models/quant: every vector of manifest.json (inputs hash-checked first so a
 * changed fixture is noticed), dequantisation compared bit for bit, quantisation byte for
 * byte where lql quantises that format; plus the refusals of the row API.
 */
#include "t.h"
#include "t_file.h"
#include "vindex.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define QDIR LQL_FIXTURE_DIR "/models/quant"

/* Reads a manifest file record and checks its size and sha256; NULL when absent. */
static unsigned char *load(const cJSON *files, const char *key, size_t *n)
{
    const cJSON *rec = cJSON_GetObjectItem(files, key);
    if (!rec)
        return NULL;
    const char *path = cJSON_GetObjectItem(rec, "path")->valuestring;
    unsigned char *buf = t_slurp(n, "%s/%s", QDIR, path);
    CHECK_MSG(buf != NULL, "cannot read %s", path);
    if (!buf)
        return NULL;
    char hex[65];
    vx_sha256_hex(buf, *n, hex);
    CHECK_MSG(*n == (size_t)cJSON_GetObjectItem(rec, "bytes")->valuedouble, "%s size", path);
    CHECK_MSG(strcmp(hex, cJSON_GetObjectItem(rec, "sha256")->valuestring) == 0,
              "%s sha256 changed: %s", path, hex);
    return buf;
}

static int n_deq, n_quant;

static void one_vector(const cJSON *v)
{
    const char *fmt = cJSON_GetObjectItem(v, "format")->valuestring;
    const char *name = cJSON_GetObjectItem(v, "name")->valuestring;
    const cJSON *shape = cJSON_GetObjectItem(v, "shape");
    size_t rows = (size_t)cJSON_GetArrayItem(shape, 0)->valuedouble;
    size_t cols = (size_t)cJSON_GetArrayItem(shape, 1)->valuedouble;
    vx_dtype dt = VX_F32;
    char lower[16];
    size_t k = 0;
    for (; fmt[k] && k < sizeof lower - 1; k++)
        lower[k] = (char)(fmt[k] >= 'A' && fmt[k] <= 'Z' ? fmt[k] + 32 : fmt[k]);
    lower[k] = 0;
    int found = 0;
    static const vx_dtype all[] = {VX_Q8_0, VX_Q4_0, VX_Q2_K, VX_Q3_K, VX_Q4_K, VX_Q5_K,
                                   VX_Q6_K, VX_MXFP4};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(vx_quant_name(all[i]), lower) == 0) {
            dt = all[i];
            found = 1;
        }
    CHECK_MSG(found, "format %s has no codec", fmt);
    if (!found)
        return;
    unsigned be, bb;
    CHECK(vx_quant_block(dt, &be, &bb) == 0);
    CHECK(be == (unsigned)cJSON_GetObjectItem(v, "block_size")->valuedouble);
    CHECK(bb == (unsigned)cJSON_GetObjectItem(v, "bytes_per_block")->valuedouble);

    const cJSON *files = cJSON_GetObjectItem(v, "files");
    size_t nsrc = 0, nq = 0, ndq = 0;
    unsigned char *src = load(files, "source", &nsrc);
    unsigned char *q = load(files, "quantised", &nq);
    unsigned char *dq = load(files, "dequantised", &ndq);
    CHECK(q && dq);
    if (!q || !dq)
        goto out;
    CHECK(nq == rows * cols / be * bb);
    CHECK(ndq == rows * cols * 4);

    /* Dequantise row by row; compare bit patterns (NaN, -0 and subnormals included). */
    float *row = malloc(cols * sizeof(float));
    size_t bad = 0;
    for (size_t r = 0; r < rows; r++) {
        CHECK(vx_dequantize_row(dt, q + r * (cols / be) * bb, row, cols) == 0);
        if (memcmp(row, dq + r * cols * 4, cols * 4) != 0)
            bad++;
    }
    CHECK_MSG(bad == 0, "%s_%s: %zu rows dequantise differently", lower, name, bad);
    n_deq++;

    /* Quantise where lql has a quantiser; bytes must be identical. */
    unsigned char *mine = malloc(nq);
    int can = vx_quantize_row(dt, (const float *)(void *)dq, mine, cols) == 0;
    if (can && src) {
        size_t qbad = 0, first = (size_t)-1;
        for (size_t r = 0; r < rows; r++) {
            float *x = malloc(cols * sizeof(float));
            memcpy(x, src + r * cols * 4, cols * 4);
            CHECK(vx_quantize_row(dt, x, mine + r * (cols / be) * bb, cols) == 0);
            free(x);
        }
        for (size_t i = 0; i < nq; i++)
            if (mine[i] != q[i]) {
                if (first == (size_t)-1)
                    first = i;
                qbad++;
            }
        CHECK_MSG(qbad == 0, "%s_%s: %zu bytes differ, first at %zu (block %zu)", lower, name,
                  qbad, first, first / bb);
        n_quant++;
    }
    free(mine);
    free(row);
out:
    free(src);
    free(q);
    free(dq);
}

static void errors(void)
{
    float x[64] = {0}, y[64];
    unsigned char b[256] = {0};
    CHECK(vx_dequantize_row(VX_Q8_0, b, y, 33) == -1);   /* not a multiple of 32 */
    CHECK(vx_quantize_row(VX_Q8_0, x, b, 31) == -1);
    CHECK(vx_quantize_row(VX_Q4_K, x, b, 64) == -1);     /* not a multiple of 256 */
    CHECK(vx_quantize_row(VX_Q2_K, x, b, 256) == -1);    /* decode only */
    CHECK(vx_quantize_row(VX_F32, x, b, 32) == -1);      /* not a block codec */
    CHECK(vx_dequantize_row(VX_BF16, b, y, 32) == -1);
    CHECK(vx_dequantize_row((vx_dtype)99, b, y, 32) == -1);
    CHECK(vx_quant_name(VX_F16) == NULL);
    CHECK_STR(vx_quant_name(VX_Q5_K), "q5_k");
    /* The codec geometry agrees with the container dtype table. */
    static const vx_dtype stored[] = {VX_Q8_0, VX_Q4_0, VX_Q4_K, VX_Q6_K, VX_MXFP4};
    for (size_t i = 0; i < sizeof stored / sizeof stored[0]; i++) {
        unsigned e, by;
        CHECK(vx_quant_block(stored[i], &e, &by) == 0);
        CHECK(e == vx_dtype_block_elems(stored[i]) && by == vx_dtype_block_bytes(stored[i]));
    }
    unsigned e, by;
    CHECK(vx_quant_block(VX_I32, &e, &by) == -1);
    /* Zero row: d = 0 and every quant 0 for Q8_0; Q4_0 gets d = 0 / -8 = -0 and codes 8. */
    CHECK(vx_quantize_row(VX_Q8_0, x, b, 32) == 0);
    int zero = 1;
    for (int i = 0; i < 34; i++)
        zero &= b[i] == 0;
    CHECK(zero);
    CHECK(vx_quantize_row(VX_Q4_0, x, b, 32) == 0);
    CHECK(b[0] == 0 && b[1] == 0x80 && b[2] == 0x88 && b[17] == 0x88);
    /* Non-finite input is not representable, but must not be undefined behaviour: every
     * quantiser returns and the sanitizer build stays quiet. */
    float bad[256];
    for (int i = 0; i < 256; i++)
        bad[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -1.f;
    static const vx_dtype q[] = {VX_Q8_0, VX_Q4_0, VX_Q4_K, VX_Q6_K, VX_MXFP4};
    unsigned char big[512];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        CHECK(vx_quantize_row(q[i], bad, big, 256) == 0);
    /* Arbitrary bit patterns (huge, subnormal, NaN payloads) through every quantiser and
     * back through the decoder. */
    uint32_t s = 12345;
    int all_ok = 1;
    for (int row = 0; row < 200; row++) {
        for (int i = 0; i < 256; i++) {
            s = s * 1664525u + 1013904223u;
            uint32_t bits = s ^ (s >> 7);
            memcpy(&bad[i], &bits, 4);
        }
        for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
            float back[256];
            all_ok &= vx_quantize_row(q[i], bad, big, 256) == 0;
            all_ok &= vx_dequantize_row(q[i], big, back, 256) == 0;
        }
    }
    CHECK(all_ok);
    /* Arbitrary block bytes through every decoder (the decode-only K-quants included). */
    static const vx_dtype dq[] = {VX_Q8_0, VX_Q4_0, VX_Q2_K, VX_Q3_K, VX_Q4_K, VX_Q5_K,
                                  VX_Q6_K, VX_MXFP4};
    unsigned char raw[2 * 210];
    float out[512];
    for (int row = 0; row < 200; row++) {
        for (size_t i = 0; i < sizeof raw; i++) {
            s = s * 1664525u + 1013904223u;
            raw[i] = (unsigned char)(s >> 24);
        }
        for (size_t i = 0; i < sizeof dq / sizeof dq[0]; i++) {
            vx_quant_block(dq[i], &e, &by);
            all_ok &= vx_dequantize_row(dq[i], raw, out, 2 * (size_t)e) == 0;
        }
    }
    CHECK(all_ok);
}

/* vx_encode_f32 writes vx_quantize_row's bytes and names the first value a block cannot
 * hold: a non-finite one, or the largest of a block whose scale overflows (Q8_0 past
 * ~8.3e6, Q4_0 past ~5.2e5, Q4_K at 1e15; Q6_K at 1e19, where its block came back 0). */
static void unrepresentable(void)
{
    static const vx_dtype q[] = {VX_Q8_0, VX_Q4_0, VX_Q4_K, VX_Q6_K, VX_MXFP4};
    static const float big[] = {1e7f, 6e5f, 1e15f, 1e19f, 0.f};   /* MXFP4's E8M0 holds 3e38 */
    float x[512];
    unsigned char a[600], b[600];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        for (int k = 0; k < 512; k++)
            x[k] = (float)((k * 37) % 101 - 50) / 64.f;
        size_t bad = 0;
        CHECK(vx_encode_f32(q[i], x, a, 512, &bad) == 0 && bad == 512);
        CHECK(vx_quantize_row(q[i], x, b, 512) == 0);
        CHECK(memcmp(a, b, vx_dtype_block_bytes(q[i]) * (512 / vx_dtype_block_elems(q[i]))) == 0);
        x[300] = NAN;
        CHECK(vx_encode_f32(q[i], x, a, 512, &bad) == 0 && bad == 300);
        x[300] = -INFINITY;
        CHECK(vx_encode_f32(q[i], x, a, 512, &bad) == 0 && bad == 300);
        x[300] = 0.5f;
        x[290] = big[i];
        CHECK_MSG(vx_encode_f32(q[i], x, a, 512, &bad) == 0 && bad == (big[i] ? 290 : 512),
                  "%s: %zu", vx_dtype_name(q[i]), bad);
    }
    size_t bad = 0;
    CHECK(vx_encode_f32(VX_Q2_K, x, a, 256, &bad) == -1);     /* decode only */
    CHECK(vx_encode_f32(VX_Q8_0, x, a, 31, &bad) == -1);
}

int main(void)
{
    size_t n;
    unsigned char *m = t_slurp(&n, "%s/manifest.json", QDIR);
    CHECK(m != NULL);
    if (!m)
        return T_DONE();
    m[n] = 0;
    cJSON *root = cJSON_Parse((char *)m);
    CHECK(root != NULL);
    const cJSON *vecs = cJSON_GetObjectItem(root, "vectors");
    const cJSON *v;
    cJSON_ArrayForEach(v, vecs)
        one_vector(v);
    CHECK(n_deq == 26);     /* 8 formats × 3 matrices + MXFP4 allcodes and special */
    CHECK(n_quant == 16);   /* Q8_0, Q4_0, Q4_K, Q6_K × 3 + MXFP4 × 4 (special has no source) */
    cJSON_Delete(root);
    free(m);
    errors();
    unrepresentable();
    return T_DONE();
}
