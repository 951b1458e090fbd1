/*
 * test_lyrw.c — LYRW v2: writer → reader round trips (single- and multi-segment layers,
 * unknown tags preserved and reported), the capability check's refusals, every hostile
 * file the reader must reject with its own pinned message, and truncations / byte flips
 * of a valid file that must fail cleanly.
 */
#include "t.h"
#include "t_file.h"
#include "lyrw.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

/* The fixture: routed bank 7 (4 experts: gate q4_k 4x256, up q8_0 4x256, down f16 256x4)
 * and shared bank 9 (1 entry: gate_up_fused mxfp4 8x256 interleaved, down bf16 256x4, and
 * a vendor region, role 300 format 42 layout 9, 100 bytes). */
static const vx_lyrw_schema routed[3] = {
    {0, VX_ROLE_GATE, VX_LF_Q4_K, VX_PACK_BLOCKS_INLINE, VX_LYRW_UNPAIRED, 0, 4, 256, 0},
    {0, VX_ROLE_UP, VX_LF_Q8_0, VX_PACK_BLOCKS_INLINE, VX_LYRW_UNPAIRED, 0, 4, 256, 0},
    {0, VX_ROLE_DOWN, VX_LF_F16, VX_PACK_ROW_MAJOR, VX_LYRW_UNPAIRED, 0, 256, 4, 0},
};
static const vx_lyrw_schema shared[3] = {
    {0, VX_ROLE_GATE_UP_FUSED, VX_LF_MXFP4, VX_PACK_BLOCKS_INLINE, VX_LYRW_UNPAIRED,
     VX_LAYOUT_INTERLEAVED, 8, 256, 0},
    {0, VX_ROLE_DOWN, VX_LF_BF16, VX_PACK_ROW_MAJOR, VX_LYRW_UNPAIRED, 0, 256, 4, 0},
    {0, 300, 42, VX_PACK_ROW_MAJOR, VX_LYRW_UNPAIRED, 9, 1, 100, 0},
};
static const uint64_t shared_len[3] = {0, 0, 100};
static const uint64_t routed_len[3] = {4 * 144, 4 * 8 * 34, 256 * 4 * 2};

static unsigned char pattern(uint32_t bank, uint32_t entry, uint32_t schema, uint64_t i)
{
    return (unsigned char)(bank * 31 + entry * 7 + schema * 3 + i * 13);
}

static void specs(vx_lyrw_bank_spec b[2], uint32_t first, uint32_t count)
{
    b[0] = (vx_lyrw_bank_spec){.id = 7, .kind = VX_BANK_ROUTED, .flags = 1, .schema_count = 3,
        .num_entries = 4, .input_dim = 256, .intermediate_dim = 4, .output_dim = 256,
        .schemas = routed, .region_bytes = NULL, .segment_index = 0, .first_entry = first,
        .entry_count = count};
    b[1] = (vx_lyrw_bank_spec){.id = 9, .kind = VX_BANK_DENSE, .schema_count = 3,
        .num_entries = 1, .input_dim = 256, .intermediate_dim = 4, .output_dim = 256,
        .schemas = shared, .region_bytes = shared_len, .entry_count = 1};
}

/* Writes the regions the writer asks for, each filled with pattern(). */
static int write_file(const char *path, uint32_t flags, uint32_t first, uint32_t count,
                      uint16_t nbanks, vx_err *err)
{
    vx_lyrw_bank_spec b[2];
    specs(b, first, count);
    vx_lyrw_writer *w;
    if (vx_lyrw_writer_open(path, 3, flags, b, nbanks, &w, err) != 0)
        return -1;
    static unsigned char buf[4096];
    for (;;) {
        int bank;
        uint32_t e;
        uint16_t s;
        vx_lyrw_writer_next(w, &bank, &e, &s);
        if (bank < 0)
            break;
        uint64_t n = bank == 0 ? routed_len[s] : (s == 0 ? 8 * 8 * 17 : s == 1 ? 2048 : 100);
        uint32_t entry = bank == 0 ? first + e : e;
        for (uint64_t i = 0; i < n; i++)
            buf[i] = pattern((uint32_t)bank, entry, s, i);
        if (vx_lyrw_write_region(w, buf, n, err) != 0) {
            vx_lyrw_writer_abort(w);
            return -1;
        }
    }
    return vx_lyrw_writer_close(w, NULL, NULL, err);
}

static int regions_match(const vx_lyrw *l, int bank_index, uint16_t bank_id, uint32_t first,
                         uint32_t count)
{
    const vx_lyrw_bank *k = vx_lyrw_bank_by_id(l, bank_id);
    int ok = k != NULL;
    for (uint32_t e = first; ok && e < first + count; e++)
        for (uint16_t s = 0; ok && s < k->schema_count; s++) {
            const vx_lyrw_region *r = vx_lyrw_region_of(l, bank_id, e, s);
            ok = r && r->offset % 64 == 0;
            const unsigned char *p = ok ? vx_lyrw_bytes(l, r) : NULL;
            for (uint64_t i = 0; ok && i < r->length; i++)
                ok = p[i] == pattern((uint32_t)bank_index, e, s, i);
        }
    return ok;
}

static void round_trip(void)
{
    char path[320], report[512];
    snprintf(path, sizeof path, "%s/layer3.lyrw", dir);
    vx_err err = {0};
    CHECK(write_file(path, 0, 0, 4, 2, &err) == 0);
    CHECK_STR(err.msg, "");
    vx_lyrw *l;
    CHECK(vx_lyrw_open(path, &l, &err) == 0);
    if (!l) {
        fprintf(stderr, "open: %s\n", err.msg);
        return;
    }
    CHECK(l->layer == 3 && l->num_banks == 2 && l->num_segments == 2 && l->flags == 0);
    CHECK(l->tables_end == 456);     /* 24 + 2·24 + 2·12 + 6·20 + (12 + 3)·16 */
    CHECK(l->segments[0].regions[0].offset == 512);
    const vx_lyrw_bank *k = vx_lyrw_bank_by_id(l, 7);
    CHECK(k && k->kind == VX_BANK_ROUTED && k->flags == 1 && k->num_entries == 4);
    CHECK(k && k->schemas[2].role == VX_ROLE_DOWN && k->schemas[2].rows == 256 &&
          k->schemas[2].cols == 4 && k->schemas[1].index == 1);
    CHECK(regions_match(l, 0, 7, 0, 4));
    CHECK(regions_match(l, 1, 9, 0, 1));
    CHECK(vx_lyrw_region_of(l, 7, 4, 0) == NULL);
    CHECK(vx_lyrw_region_of(l, 7, 0, 3) == NULL);
    CHECK(vx_lyrw_region_of(l, 8, 0, 0) == NULL);
    /* Decodable regions as tensor views; the vendor region and absent entries refuse. */
    vx_tensor t;
    CHECK(vx_lyrw_tensor(l, 7, 2, 0, &t, &err) == 0);
    CHECK(t.dtype == VX_Q4_K && t.ndim == 2 && t.shape[0] == 4 && t.shape[1] == 256 &&
          t.nbytes == 576 && t.data == vx_lyrw_bytes(l, vx_lyrw_region_of(l, 7, 2, 0)) &&
          ((const unsigned char *)t.data)[5] == pattern(0, 2, 0, 5));
    CHECK(vx_lyrw_tensor(l, 9, 0, 1, &t, &err) == 0 && t.dtype == VX_BF16 && t.shape[0] == 256);
    CHECK(vx_lyrw_tensor(l, 9, 0, 2, &t, &err) == -1 && err.code == VX_EUNSUPPORTED);
    char want2[1024];
    snprintf(want2, sizeof want2, "%s: bank 9 entry 0 schema 2: format 42 (unregistered) with "
             "packing 0 (row_major) is not a tensor lql can read", path);
    CHECK_STR(err.msg, want2);
    CHECK(vx_lyrw_tensor(l, 7, 4, 0, &t, &err) == -1 && err.code == VX_EMISSING);
    snprintf(want2, sizeof want2, "%s: no region for bank 7 entry 4 schema 0 in this file", path);
    CHECK_STR(err.msg, want2);
    /* The vendor region is preserved (bytes intact) and reported. */
    k = vx_lyrw_bank_by_id(l, 9);
    CHECK(k && k->schemas[2].role == 300 && k->schemas[2].format == 42 &&
          k->schemas[2].layout == 9 &&
          k->schemas[2].unknown == (VX_LYRW_UNKNOWN_ROLE | VX_LYRW_UNKNOWN_FORMAT |
                                    VX_LYRW_UNKNOWN_LAYOUT));
    CHECK(l->n_unknown == 1);
    CHECK(vx_lyrw_unknown_report(l, report, sizeof report) == 1);
    CHECK_STR(report, "bank 9 schema 2: role 300 format 42 layout 9 (unregistered, preserved)");
    /* Capability: down is everywhere and decodable; gate is missing from the shared bank;
     * the vendor role cannot be decoded. */
    uint16_t down = VX_ROLE_DOWN, gate = VX_ROLE_GATE, vendor = 300, fused = VX_ROLE_GATE_UP_FUSED;
    CHECK(vx_lyrw_check(l, &down, 1, &err) == 0);
    CHECK(vx_lyrw_check(l, &gate, 1, &err) == -1);
    char want[1024];
    snprintf(want, sizeof want, "%s: bank 9 has no gate region, which the operation needs", path);
    CHECK_STR(err.msg, want);
    CHECK(err.code == VX_EUNSUPPORTED);
    CHECK(vx_lyrw_check(l, &vendor, 1, &err) == -1);
    snprintf(want, sizeof want, "%s: bank 7 has no unregistered region, which the operation "
             "needs", path);
    CHECK_STR(err.msg, want);
    CHECK(vx_lyrw_check(l, &fused, 1, &err) == -1);
    snprintf(want, sizeof want, "%s: bank 7 has no gate_up_fused region, which the operation "
             "needs", path);
    CHECK_STR(err.msg, want);
    vx_lyrw_free(l);
    /* A file of only the shared bank: the vendor role refuses on its format. */
    char p2[320];
    snprintf(p2, sizeof p2, "%s/shared.lyrw", dir);
    vx_lyrw_bank_spec b[2];
    specs(b, 0, 4);
    vx_lyrw_writer *w;
    CHECK(vx_lyrw_writer_open(p2, 0, 0, &b[1], 1, &w, &err) == 0);
    static unsigned char zeros[2048];
    CHECK(vx_lyrw_write_region(w, zeros, 8 * 8 * 17, &err) == 0);
    CHECK(vx_lyrw_write_region(w, zeros, 2048, &err) == 0);
    CHECK(vx_lyrw_write_region(w, zeros, 100, &err) == 0);
    /* hashed as written: the file's own hash and size */
    char sha[65] = "", file_sha[65] = "";
    uint64_t bytes = 0;
    struct stat sb;
    CHECK(vx_lyrw_writer_close(w, sha, &bytes, &err) == 0);
    CHECK(vx_sha256_file(p2, file_sha, &err) == 0 && stat(p2, &sb) == 0);
    CHECK_STR(sha, file_sha);
    CHECK(bytes == (uint64_t)sb.st_size);
    CHECK(vx_lyrw_open(p2, &l, &err) == 0);
    if (l) {
        CHECK(vx_lyrw_check(l, &vendor, 1, &err) == -1);
        snprintf(want, sizeof want, "%s: bank 9 schema 2 (unregistered): format 42 "
                 "(unregistered) cannot be decoded by lql", p2);
        CHECK_STR(err.msg, want);
        CHECK(vx_lyrw_check(l, &fused, 1, &err) == 0);
        vx_lyrw_free(l);
    }
}

static void multi_segment(void)
{
    char a[320], b[320];
    snprintf(a, sizeof a, "%s/layer3.seg00.lyrw", dir);
    snprintf(b, sizeof b, "%s/layer3.seg01.lyrw", dir);
    vx_err err = {0};
    CHECK(write_file(a, VX_LYRW_MULTI_SEGMENT, 0, 2, 1, &err) == 0);
    CHECK(write_file(b, VX_LYRW_MULTI_SEGMENT, 2, 2, 1, &err) == 0);
    vx_lyrw *la, *lb;
    CHECK(vx_lyrw_open(a, &la, &err) == 0);
    CHECK(vx_lyrw_open(b, &lb, &err) == 0);
    if (!la || !lb)
        return;
    CHECK(la->flags == 1 && la->segments[0].first_entry == 0 && la->segments[0].entry_count == 2);
    CHECK(lb->segments[0].first_entry == 2 && lb->segments[0].entry_count == 2);
    CHECK(vx_lyrw_region_of(la, 7, 3, 0) == NULL);
    CHECK(vx_lyrw_region_of(lb, 7, 1, 0) == NULL);
    CHECK(regions_match(la, 0, 7, 0, 2));
    CHECK(regions_match(lb, 0, 7, 2, 2));
    vx_lyrw_free(la);
    vx_lyrw_free(lb);
    /* Without the multi-segment flag a partial bank is refused, by the writer and reader. */
    char c[320];
    snprintf(c, sizeof c, "%s/partial.lyrw", dir);
    CHECK(write_file(c, 0, 0, 2, 1, &err) == -1);
    char want[1024];
    snprintf(want, sizeof want, "%s: bank 7: a single-segment file holds all 4 entries", c);
    CHECK_STR(err.msg, want);
    size_t n;
    unsigned char *buf = t_slurp(&n, "%s", b);
    buf[16] = 0;                         /* clear flags bit 0 */
    vx_lyrw *l;
    CHECK(vx_lyrw_parse("seg01", buf, n, &l, &err) == -1 && l == NULL);
    CHECK_STR(err.msg, "seg01: bank 7: segments cover 2 of 4 entries, but header flags bit 0 "
              "(multi-segment layer) is clear");
    free(buf);
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Parse a mutated copy of the fixture and expect msg. */
static void expect(const unsigned char *good, size_t n, size_t at, const void *bytes,
                   size_t len, size_t cut, const char *msg)
{
    unsigned char *b = malloc(n);
    memcpy(b, good, n);
    if (bytes)
        memcpy(b + at, bytes, len);
    vx_lyrw *l = (vx_lyrw *)1;
    vx_err err = {0};
    CHECK(vx_lyrw_parse("f.lyrw", b, cut ? cut : n, &l, &err) == -1);
    CHECK(l == NULL);
    CHECK_STR(err.msg, msg);
    free(b);
}

#define ENTRY(x, s) (216 + ((x) * 3 + (s)) * 16)

static void hostile(void)
{
    char path[320];
    snprintf(path, sizeof path, "%s/layer3.lyrw", dir);
    size_t n;
    unsigned char *g = t_slurp(&n, "%s", path);
    CHECK(g != NULL);
    if (!g)
        return;
    unsigned char v[8];
    char msg[512];
    /* 512 for the tables, 4 routed entries of 576 + 1088 + 2048, the shared entry's
     * 1088 + 2048 + 100, padded to 64. */
    CHECK(n == 512 + 4 * 3712 + 3264);
    expect(g, n, 0, "LYRX", 4, 0, "f.lyrw: bad magic 0x5852594c; a LYRW file starts with "
           "0x4c595257 (\"LYRW\")");
    expect(g, n, 4, "\1\0\0\0", 4, 0, "f.lyrw: LYRW format_version 1 is a VINDEX2 layer file; "
           "this reader needs version 2 (VINDEX3)");
    expect(g, n, 4, "\3\0\0\0", 4, 0, "f.lyrw: LYRW format_version 3 is not supported; this "
           "reader needs version 2 (VINDEX3)");
    expect(g, n, 0, NULL, 0, 23, "f.lyrw: 23 bytes is too short for a LYRW header (24 bytes)");
    expect(g, n, 14, "\0\0", 2, 0, "f.lyrw: num_segments is 0; a LYRW file describes at least "
           "one segment");
    expect(g, n, 12, "\0\0", 2, 0, "f.lyrw: num_banks is 0; a LYRW file describes at least "
           "one bank");
    expect(g, n, 12, "\xff\xff", 2, 0, "f.lyrw: 65535 bank and 2 segment descriptors end at "
           "byte 1572888, past the end of the file (18624 bytes)");
    /* Region past EOF: the last region of the routed bank starts 64 bytes before EOF. */
    uint64_t off = ((uint64_t)n - 1) & ~(uint64_t)63;
    put64(v, off);
    snprintf(msg, sizeof msg, "f.lyrw: bank 7 entry 3 schema 2: region at byte %llu of 2048 "
             "bytes runs past the end of the file (%zu bytes)", (unsigned long long)off, n);
    expect(g, n, ENTRY(3, 2), v, 8, 0, msg);
    put64(v, 512 + 8);
    expect(g, n, ENTRY(0, 0), v, 8, 0, "f.lyrw: bank 7 entry 0 schema 0: region offset 520 is "
           "not 64-byte aligned");
    expect(g, n, 24 + 4, "\xff\xff", 2, 0, "f.lyrw: the banks declare 65538 region schemas "
           "(1310760 bytes from byte 96), past the end of the file (18624 bytes)");
    /* Two segment descriptors for bank 7 whose entry ranges overlap. */
    expect(g, n, 72 + 12, "\x07\0\0\0\x01\0\0\0\x02\0\0\0", 12, 0, "f.lyrw: segments overlap "
           "in bank 7: entries [0, 4) and [1, 3)");
    /* Entry 1's gate region pointed at entry 0's. */
    put64(v, 512);
    expect(g, n, ENTRY(1, 0), v, 8, 0, "f.lyrw: regions overlap: bank 7 entry 0 schema 0 [512, "
           "1088) and bank 7 entry 1 schema 0 [512, 1088)");
    put64(v, 448);
    expect(g, n, ENTRY(0, 0), v, 8, 0, "f.lyrw: bank 7 entry 0 schema 0: region at byte 448 "
           "overlaps the tables, which end at byte 456");
    put64(v, 575);
    expect(g, n, ENTRY(0, 0) + 8, v, 8, 0, "f.lyrw: bank 7 entry 0 schema 0: region is 575 "
           "bytes; 4 x 256 q4_k is 576");
    expect(g, n, 72, "\x05\0", 2, 0, "f.lyrw: segment descriptor 0 names bank 5, which this "
           "file does not describe");
    expect(g, n, 72 + 8, "\x05\0\0\0", 4, 0, "f.lyrw: segment descriptor 0 covers entries "
           "[0, 5) of bank 7, which has 4");
    expect(g, n, 96 + 20, "\x05\0", 2, 0, "f.lyrw: bank 7 schema record 1 carries "
           "schema_index 5");
    expect(g, n, 96 + 8, "\x05\0", 2, 0, "f.lyrw: bank 7 schema 0 pairs with schema 5, which "
           "the bank does not have");
    expect(g, n, 48, "\x07\0", 2, 0, "f.lyrw: bank id 7 is described twice");
    expect(g, n, 24 + 4, "\0\0", 2, 0, "f.lyrw: bank 7 declares no region schemas");
    expect(g, n, 48 + 8, "\2\0\0\0", 4, 0, "f.lyrw: dense bank 9 has 2 entries; a dense bank "
           "has exactly 1");
    expect(g, n, 24 + 2, "\x03\0", 2, 0, "f.lyrw: bank 7 has kind 3; the kinds are 0 (dense), "
           "1 (routed) and 2 (shared)");
    expect(g, n, 96 + 16, "\x01\x01\0\0", 4, 0, "f.lyrw: bank 7 schema 0: a q4_k row of 257 "
           "columns is not a whole number of 256-element blocks");
    expect(g, n, 96 + 40 + 12, "\xff\xff\xff\xff\xff\xff\xff\xff", 8, 0, "f.lyrw: bank 7 "
           "schema 2: 4294967295 x 4294967295 f16 overflows 64 bits");
    expect(g, n, 0, NULL, 0, 400, "f.lyrw: the entry table of segment descriptor 0 ends at "
           "byte 408, past the end of the file (400 bytes)");
    /* Undefined header and bank flag bits and the reserved word: a later writer's meaning
     * (per-entry overrides sit behind a header bit, seed §6.4) must not be read as clear. */
    expect(g, n, 16, "\xfe\xff\xff\xff", 4, 0, "f.lyrw: header flags 0xfffffffe set undefined "
           "bits 0xfffffffe; this reader knows LYRW v2.0, which defines bit 0 (multi-segment "
           "layer) only");
    expect(g, n, 16, "\x03\0\0\0", 4, 0, "f.lyrw: header flags 0x00000003 set undefined bits "
           "0x00000002; this reader knows LYRW v2.0, which defines bit 0 (multi-segment layer) "
           "only");
    expect(g, n, 20, "\x07\0\0\0", 4, 0, "f.lyrw: the header's reserved word is 0x00000007; "
           "LYRW v2.0 writes 0");
    expect(g, n, 24 + 6, "\x03\0", 2, 0, "f.lyrw: bank 7 has browse mode 3; the modes are 0 "
           "(none), 1 (direct) and 2 (strided)");
    expect(g, n, 24 + 6, "\x05\x80", 2, 0, "f.lyrw: bank 7 flags 0x8005 set undefined bits "
           "0x8004; LYRW v2.0 defines bits 0-1 (browse mode) only");
    /* Banks are homogeneous: an entry cannot leave out a region its bank's schema sizes. */
    put64(v, 0);
    expect(g, n, ENTRY(1, 0) + 8, v, 8, 0, "f.lyrw: bank 7 entry 1 schema 0: region is 0 bytes; "
           "4 x 256 q4_k is 576");

    /* Every truncation and every single-byte flip of the tables fails cleanly or parses to
     * something whose regions stay inside the buffer (the sanitizer build checks reads). */
    int bad = 0;
    for (size_t cut = 0; cut < n; cut += cut < 600 ? 1 : 97) {
        unsigned char *b = malloc(cut ? cut : 1);
        memcpy(b, g, cut);
        vx_lyrw *l;
        vx_err err;
        if (vx_lyrw_parse("t", b, cut, &l, &err) == 0) {
            bad++;
            vx_lyrw_free(l);
        }
        free(b);
    }
    CHECK(bad == 0);
    size_t accepted = 0;
    for (size_t i = 0; i < 512; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            unsigned char *b = malloc(n);
            memcpy(b, g, n);
            b[i] ^= (unsigned char)(1u << bit);
            vx_lyrw *l;
            vx_err err;
            if (vx_lyrw_parse("t", b, n, &l, &err) == 0) {
                accepted++;
                uint64_t sum = 0;
                for (unsigned s = 0; s < l->num_segments; s++) {
                    const vx_lyrw_segment *sg = &l->segments[s];
                    uint64_t cnt = (uint64_t)sg->entry_count * l->banks[sg->bank].schema_count;
                    for (uint64_t r = 0; r < cnt; r++) {
                        const unsigned char *p = vx_lyrw_bytes(l, &sg->regions[r]);
                        if (sg->regions[r].length)
                            sum += p[sg->regions[r].length - 1];
                    }
                }
                CHECK(sum < UINT64_MAX);
                vx_lyrw_free(l);
            }
            free(b);
        }
    }
    CHECK(accepted > 0 && accepted < 512 * 3);
    free(g);
}

static void writer_errors(void)
{
    char path[320], want[1024];
    snprintf(path, sizeof path, "%s/w.lyrw", dir);
    vx_lyrw_bank_spec b[2];
    specs(b, 0, 4);
    vx_lyrw_writer *w;
    vx_err err = {0};
    CHECK(vx_lyrw_writer_open(path, 0, 0, b, 1, &w, &err) == 0);
    unsigned char buf[600] = {0};
    CHECK(vx_lyrw_write_region(w, buf, 575, &err) == -1);
    snprintf(want, sizeof want, "%s: bank index 0 entry 0 schema 0: region is 575 bytes, the "
             "table says 576", path);
    CHECK_STR(err.msg, want);
    CHECK(vx_lyrw_write_region(w, buf, 576, &err) == 0);
    CHECK(vx_lyrw_writer_close(w, NULL, NULL, &err) == -1);
    snprintf(want, sizeof want, "%s: closed before every region was written (next: bank index "
             "0 entry 0 schema 1)", path);
    CHECK_STR(err.msg, want);
    CHECK(access(path, F_OK) != 0);      /* nothing renamed into place */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);       /* and the temporary is gone */
    /* An unsizable schema without an explicit length. */
    b[1].region_bytes = NULL;
    CHECK(vx_lyrw_writer_open(path, 0, 0, &b[1], 1, &w, &err) == -1);
    snprintf(want, sizeof want, "%s: bank 9 schema 2: no region length given and unregistered "
             "1 x 100 cannot be sized", path);
    CHECK_STR(err.msg, want);
    specs(b, 0, 4);
    CHECK(vx_lyrw_writer_open(path, 0, 2, b, 2, &w, &err) == -1);
    snprintf(want, sizeof want, "%s: header flags 0x00000002 set bits LYRW v2.0 does not define", path);
    CHECK_STR(err.msg, want);
    b[0].flags = 3;
    CHECK(vx_lyrw_writer_open(path, 0, 0, b, 2, &w, &err) == -1);
    snprintf(want, sizeof want, "%s: bank 7: kind 1 with flags 0x0003 is not a LYRW v2.0 bank "
             "(kinds 0-2, browse modes 0-2, no other flag bits)", path);
    CHECK_STR(err.msg, want);
    specs(b, 0, 4);
    b[1].id = 7;
    CHECK(vx_lyrw_writer_open(path, 0, 0, b, 2, &w, &err) == -1);
    snprintf(want, sizeof want, "%s: bank id 7 given twice", path);
    CHECK_STR(err.msg, want);
    specs(b, 0, 4);
    b[0].schema_count = 0;
    CHECK(vx_lyrw_writer_open(path, 0, 0, b, 1, &w, &err) == -1);
    snprintf(want, sizeof want, "%s: bank 7 has no region schemas", path);
    CHECK_STR(err.msg, want);
    vx_lyrw *l;
    CHECK(vx_lyrw_open("/nonexistent/x.lyrw", &l, &err) == -1 && err.code == VX_EIO);
    CHECK_STR(err.msg, "/nonexistent/x.lyrw: cannot open: No such file or directory");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_lyrw.XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    round_trip();
    multi_segment();
    hostile();
    writer_errors();
    CHECK(t_rm_rf(dir) == 0);
    return T_DONE();
}
