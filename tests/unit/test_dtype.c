/*
 * test_dtype.c — dtype table, byte counts, exact f16/bf16 conversions (every 16-bit
 * pattern, subnormals, ties, inf, NaN), sha256 and safe path resolution.
 */
#include "t.h"
#include "vindex.h"
#include "vx_int.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static float f(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static uint32_t u(float x)
{
    uint32_t r;
    memcpy(&r, &x, 4);
    return r;
}

static void test_table(void)
{
    static const struct { vx_dtype t; const char *name; unsigned be, bb; } want[] = {
        {VX_F32, "f32", 1, 4}, {VX_F16, "f16", 1, 2}, {VX_BF16, "bf16", 1, 2},
        {VX_Q8_0, "q8_0", 32, 34}, {VX_Q4_0, "q4_0", 32, 18}, {VX_Q4_K, "q4_k", 256, 144},
        {VX_Q6_K, "q6_k", 256, 210}, {VX_MXFP4, "mxfp4", 32, 17}, {VX_I32, "i32", 1, 4},
        {VX_I64, "i64", 1, 8}, {VX_U8, "u8", 1, 1},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_STR(vx_dtype_name(want[i].t), want[i].name);
        CHECK(vx_dtype_block_elems(want[i].t) == want[i].be);
        CHECK(vx_dtype_block_bytes(want[i].t) == want[i].bb);
        vx_dtype p = VX_DTYPE_COUNT;
        CHECK(vx_dtype_parse(want[i].name, &p) == 0 && p == want[i].t);
    }
    vx_dtype p = VX_DTYPE_COUNT;
    CHECK(vx_dtype_parse("BF16", &p) == 0 && p == VX_BF16);
    CHECK(vx_dtype_parse("F32", &p) == 0 && p == VX_F32);
    CHECK(vx_dtype_parse("Q4_K", &p) == 0 && p == VX_Q4_K);
    CHECK(vx_dtype_parse("f8", &p) == -1);
    CHECK(vx_dtype_parse(NULL, &p) == -1);
    CHECK(vx_dtype_name(VX_DTYPE_COUNT) == NULL);
    CHECK(vx_dtype_name((vx_dtype)-1) == NULL);

    uint64_t n = 0;
    CHECK(vx_dtype_nbytes(VX_F32, 16, 3, &n) == 0 && n == 192);
    CHECK(vx_dtype_nbytes(VX_Q4_K, 512, 2, &n) == 0 && n == 2 * 2 * 144);
    CHECK(vx_dtype_nbytes(VX_Q6_K, 256, 1, &n) == 0 && n == 210);
    CHECK(vx_dtype_nbytes(VX_MXFP4, 64, 1, &n) == 0 && n == 34);
    CHECK(vx_dtype_nbytes(VX_Q8_0, 33, 1, &n) == -1);            /* not a block multiple */
    CHECK(vx_dtype_nbytes(VX_F32, UINT64_MAX / 2, 1, &n) == -1); /* overflow */
    CHECK(vx_dtype_nbytes(VX_F32, 1ull << 32, 1ull << 31, &n) == -1);
    CHECK(vx_dtype_nbytes(VX_DTYPE_COUNT, 1, 1, &n) == -1);
}

static void test_f16(void)
{
    /* Every non-NaN pattern survives f16 -> f32 -> f16; NaNs stay NaN. */
    int bad = 0, nan_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float x = vx_f16_to_f32((uint16_t)h);
        uint16_t back = vx_f32_to_f16(x);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            if (x == x || (back & 0x7c00) != 0x7c00 || !(back & 0x3ff))
                nan_bad++;
        } else if (back != h) {
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d f16 patterns did not round-trip", bad);
    CHECK_MSG(nan_bad == 0, "%d f16 NaNs were not kept", nan_bad);

    CHECK(vx_f16_to_f32(0x3c00) == 1.0f);
    CHECK(vx_f16_to_f32(0xc000) == -2.0f);
    CHECK(vx_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(vx_f16_to_f32(0x0001) == 0x1p-24f);                /* smallest subnormal */
    CHECK(vx_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);         /* largest subnormal */
    CHECK(vx_f16_to_f32(0x0400) == 0x1p-14f);                /* smallest normal */
    CHECK(u(vx_f16_to_f32(0x8000)) == 0x80000000u);          /* -0 */
    CHECK(vx_f16_to_f32(0x7c00) == INFINITY);
    CHECK(vx_f16_to_f32(0xfc00) == -INFINITY);

    /* Round to nearest, ties to even. */
    CHECK(vx_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);         /* tie, even stays */
    CHECK(vx_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);     /* tie, odd rounds up */
    CHECK(vx_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);
    CHECK(vx_f32_to_f16(0x1p-25f) == 0x0000);                /* tie to zero */
    CHECK(vx_f32_to_f16(3 * 0x1p-25f) == 0x0002);            /* tie 1.5 units -> 2 */
    CHECK(vx_f32_to_f16(0x1p-25f + 0x1p-40f) == 0x0001);
    CHECK(vx_f32_to_f16(0x1p-26f) == 0x0000);
    CHECK(vx_f32_to_f16(-0x1p-24f) == 0x8001);
    CHECK(vx_f32_to_f16(1023.5f * 0x1p-24f) == 0x0400);      /* rounds into the normals */
    CHECK(vx_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(vx_f32_to_f16(65519.0f) == 0x7bff);
    CHECK(vx_f32_to_f16(65520.0f) == 0x7c00);                /* tie to even = inf */
    CHECK(vx_f32_to_f16(1e10f) == 0x7c00);
    CHECK(vx_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(vx_f32_to_f16(-0.0f) == 0x8000);
    uint16_t qn = vx_f32_to_f16(f(0x7f800001u));             /* payload below f16 precision */
    CHECK((qn & 0x7c00) == 0x7c00 && (qn & 0x3ff) != 0);
}

static void test_bf16(void)
{
    int bad = 0, nan_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float x = vx_bf16_to_f32((uint16_t)h);
        uint16_t back = vx_f32_to_bf16(x);
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) {
            if ((back & 0x7f80) != 0x7f80 || !(back & 0x7f))
                nan_bad++;
        } else if (back != h) {
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d bf16 patterns did not round-trip", bad);
    CHECK_MSG(nan_bad == 0, "%d bf16 NaNs were not kept", nan_bad);
    CHECK(vx_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(vx_bf16_to_f32(0x0001) == 0x1p-133f);              /* subnormal */
    CHECK(vx_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);         /* tie, even stays */
    CHECK(vx_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);     /* tie, odd rounds up */
    CHECK(vx_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
    CHECK(vx_f32_to_bf16(f(0x7f7fffffu)) == 0x7f80);         /* FLT_MAX rounds to inf */
    CHECK(vx_f32_to_bf16(f(0x00008000u)) == 0x0000);         /* subnormal tie to even */
    CHECK(vx_f32_to_bf16(f(0x00018000u)) == 0x0002);
    uint16_t qn = vx_f32_to_bf16(f(0x7f800001u));            /* NaN whose payload is all low bits */
    CHECK((qn & 0x7f80) == 0x7f80 && (qn & 0x7f) != 0);
    CHECK(vx_f32_to_bf16(-INFINITY) == 0xff80);
}

static void test_rows(void)
{
    uint16_t h[3] = {0x3c00, 0xc000, 0x0001};
    uint16_t b[3] = {0x3f80, 0xc000, 0x4049};
    float in[3] = {1.5f, -0.25f, 3e-5f}, out[3];
    CHECK(vx_row_to_f32(VX_F16, h, out, 3) == 0);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0x1p-24f);
    CHECK(vx_row_to_f32(VX_BF16, b, out, 3) == 0);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 3.140625f);
    CHECK(vx_row_to_f32(VX_F32, in, out, 3) == 0);
    CHECK(memcmp(in, out, sizeof in) == 0);
    unsigned char odd[7] = {0, 0x00, 0x3c, 0x00, 0xc0, 0, 0};   /* misaligned source */
    CHECK(vx_row_to_f32(VX_F16, odd + 1, out, 2) == 0 && out[0] == 1.0f && out[1] == -2.0f);
    CHECK(vx_row_to_f32(VX_Q8_0, h, out, 3) == -1);
}

static void test_sha(void)
{
    char hex[65];
    vx_sha256_hex("abc", 3, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    vx_sha256_hex("", 0, hex);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    vx_sha256_ctx ctx;
    CHECK(vx_sha256_init(&ctx, NULL) == 0);
    vx_sha256_update(&ctx, "a", 1);
    vx_sha256_update(&ctx, "bc", 2);
    vx_sha256_final(&ctx, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

    char dir[] = "/tmp/lql_dtype_XXXXXX", path[PATH_MAX];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/abc", dir);
    FILE *fp = fopen(path, "wb");
    fputs("abc", fp);
    fclose(fp);
    vx_err err = {0};
    CHECK(vx_sha256_file(path, hex, &err) == 0);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    char missing[PATH_MAX + 16];
    snprintf(missing, sizeof missing, "%s/nope", dir);
    CHECK(vx_sha256_file(missing, hex, &err) == -1 && err.code == VX_EMISSING);
    char want[PATH_MAX + 128];
    snprintf(want, sizeof want, "cannot open the file to hash ('%s'): No such file or directory",
             missing);
    CHECK_STR(err.msg, want);

    /* The hasher's thread: the same digest as inline, posted in pieces; NULL hashes inline. */
    for (int threaded = 0; threaded < 2; threaded++) {
        vx_hasher *h = threaded ? vx_hasher_start() : NULL;
        CHECK(!threaded || h != NULL);
        CHECK(vx_sha256_init(&ctx, NULL) == 0);
        vx_hasher_post(h, &ctx, "a", 1);
        vx_hasher_post(h, &ctx, "bc", 2);   /* waits for the first */
        CHECK(vx_hasher_wait(h) == 0);
        vx_sha256_final(&ctx, hex);
        CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        vx_hasher_stop(h);
    }
    /* A mapping cut short under the thread's read: SIGBUS is a failed wait, not a dead
     * process. (256 KiB: a piece under 64 KiB is hashed on the caller's thread.) */
    vx_hasher *h = vx_hasher_start();
    CHECK(h != NULL);
    const size_t len = 256u << 10;
    fp = fopen(path, "wb");
    for (size_t i = 0; i < len; i++) fputc('x', fp);
    fclose(fp);
    int fd = open(path, O_RDONLY);
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(map != MAP_FAILED);
    CHECK(truncate(path, (off_t)sysconf(_SC_PAGESIZE)) == 0);
    CHECK(vx_sha256_init(&ctx, NULL) == 0);
    vx_hasher_post(h, &ctx, map, len);
    CHECK(vx_hasher_wait(h) == -1);
    vx_sha256_free(&ctx);
    munmap(map, len);
    close(fd);
    vx_hasher_stop(h);
    unlink(path);
    rmdir(dir);
}

static void test_path(void)
{
    char dir[] = "/tmp/lql_path_XXXXXX", sub[PATH_MAX], real[PATH_MAX], out[PATH_MAX];
    char want[PATH_MAX + 64];
    CHECK(mkdtemp(dir) != NULL);
    CHECK(realpath(dir, real) != NULL);
    snprintf(sub, sizeof sub, "%s/segments", dir);
    CHECK(mkdir(sub, 0755) == 0);
    vx_err err = {0};

    CHECK(vx_resolve_in(dir, "segments", out, sizeof out, &err) == 0);
    snprintf(want, sizeof want, "%s/segments", real);
    CHECK_STR(out, want);
    CHECK(vx_resolve_in(dir, "segments/new.bin", out, sizeof out, &err) == 0);  /* may not exist */
    snprintf(want, sizeof want, "%s/segments/new.bin", real);
    CHECK_STR(out, want);

    CHECK(vx_resolve_in(dir, "/etc/passwd", out, sizeof out, &err) == -1 && err.code == VX_EPATH);
    snprintf(want, sizeof want, "path '/etc/passwd' is absolute; container paths are relative to '%s'", dir);
    CHECK_STR(err.msg, want);
    CHECK(vx_resolve_in(dir, "segments/../../x.bin", out, sizeof out, &err) == -1);
    snprintf(want, sizeof want, "path 'segments/../../x.bin' has a '..' component; container paths stay inside '%s'", dir);
    CHECK_STR(err.msg, want);
    CHECK(vx_resolve_in(dir, "..", out, sizeof out, &err) == -1 && err.code == VX_EPATH);
    CHECK(vx_resolve_in(dir, "a..b", out, sizeof out, &err) == 0);   /* not a component */
    CHECK(vx_resolve_in(dir, "", out, sizeof out, &err) == -1 && err.code == VX_EPATH);

    char link[PATH_MAX + 16];
    snprintf(link, sizeof link, "%s/segments/escape.bin", dir);
    CHECK(symlink("/etc/hostname", link) == 0);
    CHECK(vx_resolve_in(dir, "segments/escape.bin", out, sizeof out, &err) == -1);
    CHECK(err.code == VX_EPATH);
    CHECK_HAS(err.msg, "path 'segments/escape.bin' leaves the container through a symlink");
    unlink(link);
    snprintf(link, sizeof link, "%s/out", dir);
    CHECK(symlink("/tmp", link) == 0);
    CHECK(vx_resolve_in(dir, "out/missing.bin", out, sizeof out, &err) == -1);
    CHECK_STR(err.msg, "path 'out/missing.bin' leaves the container through a symlink");
    unlink(link);
    snprintf(link, sizeof link, "%s/segments/dangling.bin", dir);
    CHECK(symlink("/nonexistent/lql/target", link) == 0);
    CHECK(vx_resolve_in(dir, "segments/dangling.bin", out, sizeof out, &err) == -1);
    CHECK_STR(err.msg, "path 'segments/dangling.bin' is a dangling symlink");
    unlink(link);
    snprintf(link, sizeof link, "%s/inner", dir);
    CHECK(symlink("segments", link) == 0);                              /* stays inside */
    CHECK(vx_resolve_in(dir, "inner", out, sizeof out, &err) == 0);
    snprintf(want, sizeof want, "%s/segments", real);
    CHECK_STR(out, want);
    unlink(link);
    rmdir(sub);
    rmdir(dir);
}

int main(void)
{
    test_table();
    test_f16();
    test_bf16();
    test_rows();
    test_sha();
    test_path();
    return T_DONE();
}
