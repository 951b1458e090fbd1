/*
 * test_browse_dmet.c — the DMET reader on hand-built images (valid, both magics, every
 * hostile size) and the layer-band rule.
 */
#include "browse.h"
#include "t.h"

#include <stdint.h>
#include <stdlib.h>

static size_t put(uint8_t *b, size_t at, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[at + i] = (uint8_t)(v >> (8 * i));
    return at + 4;
}

static size_t putf(uint8_t *b, size_t at, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return put(b, at, u);
}

/* 2 layers, top_k 2: layer 0 has 2 features (the second all-zero), layer 1 has 1. */
static size_t build(uint8_t *b, uint32_t magic)
{
    size_t n = 0;
    n = put(b, n, magic);
    n = put(b, n, 1);
    n = put(b, n, 2);
    n = put(b, n, 2);
    n = put(b, n, 2);
    n = put(b, n, 7);
    n = putf(b, n, 3.5f);
    n = put(b, n, 7);
    n = putf(b, n, 3.5f);
    n = put(b, n, 9);
    n = putf(b, n, -1.25f);
    memset(b + n, 0, 24);
    n += 24;
    n = put(b, n, 1);
    n = put(b, n, 4095);
    n = putf(b, n, 0.5f);
    n = put(b, n, 4095);
    n = putf(b, n, 0.5f);
    n = put(b, n, 3);
    n = putf(b, n, 0.25f);
    return n;
}

int main(void)
{
    uint8_t b[512];
    size_t n = build(b, BRW_DMET_MAGIC);
    CHECK(b[0] == 'T' && b[1] == 'E' && b[2] == 'M' && b[3] == 'D');
    brw_dmet *d = NULL;
    vx_err e = {0};
    CHECK(brw_dmet_parse(b, n, &d, &e) == 0);
    CHECK(d && brw_dmet_layers(d) == 2 && brw_dmet_top_k(d) == 2);
    CHECK(brw_dmet_count(d, 0) == 2 && brw_dmet_count(d, 1) == 1 && brw_dmet_count(d, 2) == -1);
    brw_meta m;
    CHECK(brw_dmet_get(d, 0, 0, &m) == 0 && m.present && m.top_id == 7);
    CHECK_NEAR(m.c_score, 3.5, 0);
    CHECK(m.k == 2 && m.ids[1] == 9);
    CHECK_NEAR(m.logits[1], -1.25, 0);
    CHECK(brw_dmet_get(d, 0, 1, &m) == 0 && !m.present);
    CHECK(brw_dmet_get(d, 1, 0, &m) == 0 && m.present && m.top_id == 4095);
    CHECK(brw_dmet_get(d, 1, 1, &m) == -1);
    CHECK(brw_dmet_get(d, -1, 0, &m) == -1);
    /* ids against the vocabulary: 4095 is the largest, the all-zero record is skipped */
    CHECK(brw_dmet_check_ids(d, 4096, &e) == 0);
    CHECK(brw_dmet_check_ids(d, 4095, &e) == -1);
    CHECK_STR(e.msg, "down_meta: layer 1 feature 0 names token id 4095, outside the vocabulary "
                     "(4095 tokens)");
    brw_dmet_free(d);
    /* an id past 2^31 is not read as negative; a top-k id is checked as the top id is */
    n = build(b, BRW_DMET_MAGIC);
    put(b, 16 + 4 + 8 + 8, 0xFFFFFFF0u);
    CHECK(brw_dmet_parse(b, n, &d, &e) == 0);
    CHECK(brw_dmet_check_ids(d, 4096, &e) == -1);
    CHECK_STR(e.msg, "down_meta: layer 0 feature 0 names token id 4294967280, outside the "
                     "vocabulary (4096 tokens)");
    brw_dmet_free(d);

    /* the literal "DMET" bytes are accepted too */
    n = build(b, BRW_DMET_MAGIC_LIT);
    CHECK(b[0] == 'D' && b[3] == 'T');
    CHECK(brw_dmet_parse(b, n, &d, &e) == 0);
    brw_dmet_free(d);

    /* hostile images */
    n = build(b, BRW_DMET_MAGIC);
    CHECK(brw_dmet_parse(b, 10, &d, &e) == -1 && d == NULL);
    CHECK_STR(e.msg, "down_meta: file is 10 bytes, shorter than the 16-byte header");
    put(b, 0, 0x12345678);
    CHECK(brw_dmet_parse(b, n, &d, &e) == -1);
    CHECK_STR(e.msg, "down_meta: bad magic 0x12345678 (want 0x444d4554)");
    n = build(b, BRW_DMET_MAGIC);
    put(b, 4, 2);
    CHECK(brw_dmet_parse(b, n, &d, &e) == -1);
    CHECK_STR(e.msg, "down_meta: unsupported version 2 (want 1)");
    n = build(b, BRW_DMET_MAGIC);
    put(b, 8, 0xFFFFFFFFu);
    CHECK(brw_dmet_parse(b, n, &d, &e) == -1);
    CHECK_STR(e.msg, "down_meta: 4294967295 layers cannot fit in 96 bytes");
    n = build(b, BRW_DMET_MAGIC);
    put(b, 12, 100000);
    CHECK(brw_dmet_parse(b, n, &d, &e) == -1);
    CHECK_STR(e.msg, "down_meta: top_k 100000 exceeds 64");
    n = build(b, BRW_DMET_MAGIC);
    put(b, 16, 0xFFFFFFFFu);   /* layer 0 count: 4G records of 24 bytes */
    CHECK(brw_dmet_parse(b, n, &d, &e) == -1);
    CHECK_STR(e.msg, "down_meta: layer 0 declares 4294967295 records of 24 bytes but only "
                     "76 bytes remain");
    n = build(b, BRW_DMET_MAGIC);
    CHECK(brw_dmet_parse(b, n - 4, &d, &e) == -1);
    CHECK_STR(e.msg, "down_meta: layer 1 declares 1 records of 24 bytes but only 20 bytes "
                     "remain");
    CHECK(brw_dmet_parse(b, n - 26, &d, &e) == -1);
    CHECK_STR(e.msg, "down_meta: layer 1 count at byte 68 is past the end (70 bytes)");
    b[n] = 0;
    CHECK(brw_dmet_parse(b, n + 1, &d, &e) == -1);
    CHECK_STR(e.msg, "down_meta: 1 trailing bytes after layer 1");
    CHECK(brw_dmet_load("/nonexistent/down_meta.bin", &d, &e) == -1);
    CHECK_STR(e.msg, "down_meta: cannot open \"/nonexistent/down_meta.bin\"");

    /* every byte-length prefix is refused or accepted without a wild read (ASan checks) */
    n = build(b, BRW_DMET_MAGIC);
    int accepted = 0;
    for (size_t i = 0; i <= n; i++) {
        if (brw_dmet_parse(b, i, &d, &e) == 0) {
            accepted++;
            brw_dmet_free(d);
        }
    }
    CHECK(accepted == 1);

    /* bands */
    int band[3][2];
    brw_bands_for_depth(4, -1, -1, band);
    CHECK(band[0][0] == 0 && band[0][1] == 0 && band[1][0] == 1 && band[1][1] == 2 &&
          band[2][0] == 3 && band[2][1] == 3);
    brw_bands_for_depth(22, -1, -1, band);
    CHECK(band[0][1] == 4 && band[1][0] == 5 && band[1][1] == 17 && band[2][0] == 18 &&
          band[2][1] == 21);
    brw_bands_for_depth(34, -1, -1, band);
    CHECK(band[0][1] == 7 && band[1][0] == 8 && band[1][1] == 27 && band[2][0] == 28);
    for (int L = 3; L <= 128; L++) {
        brw_bands_for_depth(L, -1, -1, band);
        int ok = 1;
        for (int k = 0; k < 3; k++)
            ok &= band[k][0] >= 0 && band[k][1] >= band[k][0];
        ok &= band[0][0] == 0 && band[1][0] == band[0][1] + 1 &&
              band[2][0] == band[1][1] + 1 && band[2][1] == L - 1;
        CHECK_MSG(ok, "bands for %d layers", L);
    }
    brw_bands_for_depth(2, -1, -1, band);
    CHECK(band[0][1] == 0 && band[1][0] == -1 && band[2][0] == 1);
    brw_bands_for_depth(1, -1, -1, band);
    CHECK(band[0][1] == 0 && band[1][0] == -1 && band[2][0] == -1);
    brw_bands_for_depth(10, 2, 6, band);
    CHECK(band[0][0] == 0 && band[0][1] == 1 && band[1][0] == 2 && band[1][1] == 6 &&
          band[2][0] == 7 && band[2][1] == 9);
    brw_bands_for_depth(10, 0, 9, band);
    CHECK(band[0][0] == -1 && band[1][0] == 0 && band[1][1] == 9 && band[2][0] == -1);
    CHECK_STR(brw_band_name(BRW_KNOWLEDGE), "knowledge");
    return T_DONE();
}
