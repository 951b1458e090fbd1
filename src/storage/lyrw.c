/*
 * lyrw.c — LYRW v2 bank files: the validating reader, the capability check, and the
 * streaming writer (header and every table first, with final offsets computed up front,
 * then the regions in file order, so peak memory is the tables plus whatever region the
 * caller hands over). Layout in lyrw.h; the rules and messages in docs/lql/LYRW.md.
 */
#include "lyrw.h"
#include "vx_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HDR 24u
#define BANK_REC 24u
#define SEG_REC 12u
#define SCHEMA_REC 20u
#define ENTRY_REC 16u

typedef unsigned long long ull;

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static void wr16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static void wr32(unsigned char *p, uint32_t v) { wr16(p, (uint16_t)v); wr16(p + 2, (uint16_t)(v >> 16)); }
static void wr64(unsigned char *p, uint64_t v) { wr32(p, (uint32_t)v); wr32(p + 4, (uint32_t)(v >> 32)); }

static uint64_t align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

/* ---------------------------------------------------------------- tag names */

static const char *const roles[] = {"gate", "up", "gate_up_fused", "down", "bias", "scales",
                                    "latent_in", "latent_out"};
static const char *const formats[] = {"f32", "f16", "bf16", "q4_0", "q4_k", "q6_k", "q8_0",
                                      "fp4_larql", "mxfp4", "nvfp4", "mxfp8"};
static const char *const packings[] = {"row_major", "blocks_with_scales_inline",
                                       "blocks_values", "blocks_scales"};
static const char *const layouts[] = {"unspecified", "contiguous_halves", "interleaved"};
static const int format_dtypes[] = {VX_F32, VX_F16, VX_BF16, VX_Q4_0, VX_Q4_K, VX_Q6_K,
                                    VX_Q8_0, -1, VX_MXFP4, -1, -1};

#define NAME_OF(tab, v) ((v) < sizeof tab / sizeof tab[0] ? tab[v] : NULL)

const char *vx_lyrw_role_name(unsigned role) { return NAME_OF(roles, role); }
const char *vx_lyrw_format_name(unsigned format) { return NAME_OF(formats, format); }
const char *vx_lyrw_packing_name(unsigned packing) { return NAME_OF(packings, packing); }
const char *vx_lyrw_layout_name(unsigned layout) { return NAME_OF(layouts, layout); }

int vx_lyrw_format_dtype(unsigned format, vx_dtype *out)
{
    if (format >= sizeof format_dtypes / sizeof format_dtypes[0] || format_dtypes[format] < 0)
        return -1;
    *out = (vx_dtype)format_dtypes[format];
    return 0;
}

static const char *or_unreg(const char *s) { return s ? s : "unregistered"; }

/* Bytes of a rows × cols region stored in a decodable format, row-major blocks; -1 when
 * the format is not decodable or a row is not whole blocks. */
static int region_size(unsigned format, uint32_t rows, uint32_t cols, uint64_t *out)
{
    vx_dtype dt;
    if (vx_lyrw_format_dtype(format, &dt) != 0)
        return -1;
    return vx_dtype_nbytes(dt, cols, rows, out);
}

/* ---------------------------------------------------------------- reader */

void vx_lyrw_free(vx_lyrw *l)
{
    if (!l)
        return;
    for (unsigned i = 0; i < l->num_banks && l->banks; i++)
        free(l->banks[i].schemas);
    for (unsigned i = 0; i < l->num_segments && l->segments; i++)
        free(l->segments[i].regions);
    free(l->banks);
    free(l->segments);
    if (l->map)
        munmap(l->map, (size_t)l->size);
    free(l->name);
    free(l);
}

typedef struct span {
    uint64_t off, len;
    uint32_t seg, entry;
    uint16_t schema;
} span;

static int by_off(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

typedef struct segref {
    int bank;
    uint32_t first, count;
} segref;

static int by_bank_first(const void *a, const void *b)
{
    const segref *x = a, *y = b;
    if (x->bank != y->bank)
        return x->bank < y->bank ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

static int fail(vx_lyrw *l, vx_lyrw **out)
{
    vx_lyrw_free(l);          /* l->map is still NULL: the caller owns a mapping until success */
    *out = NULL;
    return -1;
}

/* Header and descriptor checks; fills l->banks (without schemas) and the segment fields. */
static int parse_descriptors(vx_lyrw *l, const unsigned char *p, vx_err *err)
{
    const char *nm = l->name;
    uint64_t end = (uint64_t)HDR + (uint64_t)BANK_REC * l->num_banks
                   + (uint64_t)SEG_REC * l->num_segments;
    if (end > l->size)
        return vx_errf(err, VX_EFORMAT, "%s: %u bank and %u segment descriptors end at byte "
                       "%llu, past the end of the file (%llu bytes)", nm, l->num_banks,
                       l->num_segments, (ull)end, (ull)l->size);
    l->banks = calloc(l->num_banks, sizeof *l->banks);
    l->segments = calloc(l->num_segments, sizeof *l->segments);
    if (!l->banks || !l->segments)
        return vx_errf(err, VX_ENOMEM, "%s: out of memory for the bank tables", nm);
    for (unsigned i = 0; i < l->num_banks; i++) {
        const unsigned char *b = p + HDR + (size_t)BANK_REC * i;
        vx_lyrw_bank *k = &l->banks[i];
        k->id = rd16(b);
        k->kind = rd16(b + 2);
        k->schema_count = rd16(b + 4);
        k->flags = rd16(b + 6);
        k->num_entries = rd32(b + 8);
        k->input_dim = rd32(b + 12);
        k->intermediate_dim = rd32(b + 16);
        k->output_dim = rd32(b + 20);
        /* Undefined bits are where a later writer's meaning would land; read as clear,
         * they would misdescribe the bank. */
        if (k->flags & ~VX_LYRW_BROWSE_MASK)
            return vx_errf(err, VX_EFORMAT, "%s: bank %u flags 0x%04x set undefined bits "
                           "0x%04x; LYRW v2.0 defines bits 0-1 (browse mode) only", nm, k->id,
                           k->flags, k->flags & ~VX_LYRW_BROWSE_MASK);
        if ((k->flags & VX_LYRW_BROWSE_MASK) == VX_LYRW_BROWSE_MASK)
            return vx_errf(err, VX_EFORMAT, "%s: bank %u has browse mode 3; the modes are 0 "
                           "(none), 1 (direct) and 2 (strided)", nm, k->id);
        if (k->kind > VX_BANK_SHARED)
            return vx_errf(err, VX_EFORMAT, "%s: bank %u has kind %u; the kinds are 0 (dense), "
                           "1 (routed) and 2 (shared)", nm, k->id, k->kind);
        if (k->schema_count == 0)
            return vx_errf(err, VX_EFORMAT, "%s: bank %u declares no region schemas", nm, k->id);
        if (k->kind == VX_BANK_DENSE && k->num_entries != 1)
            return vx_errf(err, VX_EFORMAT, "%s: dense bank %u has %u entries; a dense bank "
                           "has exactly 1", nm, k->id, k->num_entries);
    }
    /* id → bank index + 1: linear in the counts, whatever a hostile file declares. */
    uint32_t *byid = calloc(65536, sizeof *byid);
    if (!byid)
        return vx_errf(err, VX_ENOMEM, "%s: out of memory for the bank tables", nm);
    int rc = 0;
    for (unsigned i = 0; i < l->num_banks && rc == 0; i++) {
        if (byid[l->banks[i].id])
            rc = vx_errf(err, VX_EFORMAT, "%s: bank id %u is described twice", nm, l->banks[i].id);
        byid[l->banks[i].id] = i + 1;
    }
    const unsigned char *s = p + HDR + (size_t)BANK_REC * l->num_banks;
    for (unsigned i = 0; i < l->num_segments && rc == 0; i++, s += SEG_REC) {
        vx_lyrw_segment *g = &l->segments[i];
        g->bank_id = rd16(s);
        g->segment_index = rd16(s + 2);
        g->first_entry = rd32(s + 4);
        g->entry_count = rd32(s + 8);
        g->bank = (int)byid[g->bank_id] - 1;
        uint64_t last = (uint64_t)g->first_entry + g->entry_count;
        if (g->bank < 0)
            rc = vx_errf(err, VX_EFORMAT, "%s: segment descriptor %u names bank %u, which "
                         "this file does not describe", nm, i, g->bank_id);
        else if (last > l->banks[g->bank].num_entries)
            rc = vx_errf(err, VX_EFORMAT, "%s: segment descriptor %u covers entries [%u, %llu) "
                         "of bank %u, which has %u", nm, i, g->first_entry, (ull)last,
                         g->bank_id, l->banks[g->bank].num_entries);
    }
    free(byid);
    return rc;
}

/* Entry ranges of one bank's segments must not overlap; a single-segment file covers every
 * entry of every bank. */
static int check_coverage(vx_lyrw *l, vx_err *err)
{
    segref *r = malloc(sizeof *r * l->num_segments);
    if (!r)
        return vx_errf(err, VX_ENOMEM, "%s: out of memory", l->name);
    for (unsigned i = 0; i < l->num_segments; i++)
        r[i] = (segref){l->segments[i].bank, l->segments[i].first_entry,
                        l->segments[i].entry_count};
    qsort(r, l->num_segments, sizeof *r, by_bank_first);
    int rc = 0;
    for (unsigned i = 1; i < l->num_segments && rc == 0; i++) {
        uint64_t prev_end = (uint64_t)r[i - 1].first + r[i - 1].count;
        if (r[i].bank == r[i - 1].bank && r[i].count && r[i - 1].count && r[i].first < prev_end)
            rc = vx_errf(err, VX_EFORMAT, "%s: segments overlap in bank %u: entries [%u, %llu) "
                         "and [%u, %llu)", l->name, l->banks[r[i].bank].id, r[i - 1].first,
                         (ull)prev_end, r[i].first, (ull)((uint64_t)r[i].first + r[i].count));
    }
    if (rc == 0 && !(l->flags & VX_LYRW_MULTI_SEGMENT)) {
        /* r is sorted by bank: one pass sums each bank's entries. */
        size_t i = 0;
        for (unsigned b = 0; b < l->num_banks && rc == 0; b++) {
            uint64_t covered = 0;
            for (; i < l->num_segments && r[i].bank == (int)b; i++)
                covered += r[i].count;
            if (covered != l->banks[b].num_entries)
                rc = vx_errf(err, VX_EFORMAT, "%s: bank %u: segments cover %llu of %u entries, "
                             "but header flags bit 0 (multi-segment layer) is clear", l->name,
                             l->banks[b].id, (ull)covered, l->banks[b].num_entries);
        }
    }
    free(r);
    return rc;
}

/* Reads schema records bank by bank from *pos; marks unknown tags. */
static int parse_schemas(vx_lyrw *l, const unsigned char *p, uint64_t *pos, vx_err *err)
{
    const char *nm = l->name;
    uint64_t total = 0;
    for (unsigned i = 0; i < l->num_banks; i++)
        total += l->banks[i].schema_count;
    uint64_t end = *pos + total * SCHEMA_REC;
    if (end > l->size)
        return vx_errf(err, VX_EFORMAT, "%s: the banks declare %llu region schemas (%llu bytes "
                       "from byte %llu), past the end of the file (%llu bytes)", nm, (ull)total,
                       (ull)(total * SCHEMA_REC), (ull)*pos, (ull)l->size);
    const unsigned char *s = p + *pos;
    for (unsigned i = 0; i < l->num_banks; i++) {
        vx_lyrw_bank *k = &l->banks[i];
        k->schemas = calloc(k->schema_count ? k->schema_count : 1, sizeof *k->schemas);
        if (!k->schemas)
            return vx_errf(err, VX_ENOMEM, "%s: out of memory for bank %u's schemas", nm, k->id);
        for (unsigned j = 0; j < k->schema_count; j++, s += SCHEMA_REC) {
            vx_lyrw_schema *c = &k->schemas[j];
            c->index = rd16(s);
            c->role = rd16(s + 2);
            c->format = rd16(s + 4);
            c->packing = rd16(s + 6);
            c->pair_id = rd16(s + 8);
            c->layout = rd16(s + 10);
            c->rows = rd32(s + 12);
            c->cols = rd32(s + 16);
            if (c->index != j)
                return vx_errf(err, VX_EFORMAT, "%s: bank %u schema record %u carries "
                               "schema_index %u", nm, k->id, j, c->index);
            if (c->pair_id != VX_LYRW_UNPAIRED && (c->pair_id >= k->schema_count || c->pair_id == j))
                return vx_errf(err, VX_EFORMAT, "%s: bank %u schema %u pairs with schema %u, "
                               "which the bank does not have", nm, k->id, j, c->pair_id);
            c->unknown = (vx_lyrw_role_name(c->role) ? 0 : VX_LYRW_UNKNOWN_ROLE)
                       | (vx_lyrw_format_name(c->format) ? 0 : VX_LYRW_UNKNOWN_FORMAT)
                       | (vx_lyrw_packing_name(c->packing) ? 0 : VX_LYRW_UNKNOWN_PACKING)
                       | (vx_lyrw_layout_name(c->layout) ? 0 : VX_LYRW_UNKNOWN_LAYOUT);
            if (c->unknown)
                l->n_unknown++;
        }
    }
    *pos = end;
    return 0;
}

/* Expected region length of a schema, or UINT64_MAX when the reader cannot know it. */
static int schema_length(const vx_lyrw *l, const vx_lyrw_bank *k, const vx_lyrw_schema *c,
                         uint64_t *want, vx_err *err)
{
    *want = UINT64_MAX;
    vx_dtype dt;
    if (c->packing > VX_PACK_BLOCKS_INLINE || vx_lyrw_format_dtype(c->format, &dt) != 0)
        return 0;
    if (c->cols % vx_dtype_block_elems(dt))
        return vx_errf(err, VX_EFORMAT, "%s: bank %u schema %u: a %s row of %u columns is not a "
                       "whole number of %u-element blocks", l->name, k->id, c->index,
                       vx_lyrw_format_name(c->format), c->cols, vx_dtype_block_elems(dt));
    if (region_size(c->format, c->rows, c->cols, want) != 0)
        return vx_errf(err, VX_EFORMAT, "%s: bank %u schema %u: %u x %u %s overflows 64 bits",
                       l->name, k->id, c->index, c->rows, c->cols, vx_lyrw_format_name(c->format));
    return 0;
}

static int parse_entries(vx_lyrw *l, const unsigned char *p, uint64_t pos, vx_err *err)
{
    const char *nm = l->name;
    uint64_t end = pos, nregions = 0;
    for (unsigned i = 0; i < l->num_segments; i++) {
        const vx_lyrw_segment *g = &l->segments[i];
        uint64_t n = (uint64_t)g->entry_count * l->banks[g->bank].schema_count;
        end += n * ENTRY_REC;          /* ≤ size + 2^52 at every step: no wrap */
        nregions += n;
        if (end > l->size)
            return vx_errf(err, VX_EFORMAT, "%s: the entry table of segment descriptor %u ends "
                           "at byte %llu, past the end of the file (%llu bytes)", nm, i,
                           (ull)end, (ull)l->size);
    }
    l->tables_end = end;
    span *all = malloc(sizeof *all * (nregions ? nregions : 1));
    if (!all)
        return vx_errf(err, VX_ENOMEM, "%s: out of memory for %llu regions", nm, (ull)nregions);
    size_t nall = 0;
    const unsigned char *e = p + pos;
    int rc = 0;
    for (unsigned i = 0; i < l->num_segments && rc == 0; i++) {
        vx_lyrw_segment *g = &l->segments[i];
        const vx_lyrw_bank *k = &l->banks[g->bank];
        uint64_t n = (uint64_t)g->entry_count * k->schema_count;
        g->regions = calloc(n ? n : 1, sizeof *g->regions);
        if (!g->regions) {
            rc = vx_errf(err, VX_ENOMEM, "%s: out of memory for segment %u's entry table", nm, i);
            break;
        }
        for (unsigned s = 0; s < k->schema_count && rc == 0; s++) {
            uint64_t want;
            rc = schema_length(l, k, &k->schemas[s], &want, err);
            for (uint32_t x = 0; x < g->entry_count && rc == 0; x++) {
                const unsigned char *r = e + ((uint64_t)x * k->schema_count + s) * ENTRY_REC;
                vx_lyrw_region *rg = &g->regions[(uint64_t)x * k->schema_count + s];
                rg->offset = rd64(r);
                rg->length = rd64(r + 8);
                uint32_t entry = g->first_entry + x;
                if (rg->offset % 64)
                    rc = vx_errf(err, VX_EFORMAT, "%s: bank %u entry %u schema %u: region offset "
                                 "%llu is not 64-byte aligned", nm, k->id, entry, s,
                                 (ull)rg->offset);
                else if (rg->offset > l->size || rg->length > l->size - rg->offset)
                    rc = vx_errf(err, VX_EFORMAT, "%s: bank %u entry %u schema %u: region at "
                                 "byte %llu of %llu bytes runs past the end of the file (%llu "
                                 "bytes)", nm, k->id, entry, s, (ull)rg->offset,
                                 (ull)rg->length, (ull)l->size);
                else if (rg->length && rg->offset < l->tables_end)
                    rc = vx_errf(err, VX_EFORMAT, "%s: bank %u entry %u schema %u: region at "
                                 "byte %llu overlaps the tables, which end at byte %llu", nm,
                                 k->id, entry, s, (ull)rg->offset, (ull)l->tables_end);
                else if (want != UINT64_MAX && rg->length != want)
                    rc = vx_errf(err, VX_EFORMAT, "%s: bank %u entry %u schema %u: region is "
                                 "%llu bytes; %u x %u %s is %llu", nm, k->id, entry, s,
                                 (ull)rg->length, k->schemas[s].rows, k->schemas[s].cols,
                                 vx_lyrw_format_name(k->schemas[s].format), (ull)want);
                else if (rg->length)
                    all[nall++] = (span){rg->offset, rg->length, i, entry, (uint16_t)s};
            }
        }
        e += n * ENTRY_REC;
    }
    if (rc == 0) {
        qsort(all, nall, sizeof *all, by_off);
        for (size_t i = 1; i < nall && rc == 0; i++) {
            const span *a = &all[i - 1], *b = &all[i];
            if (b->off < a->off + a->len)
                rc = vx_errf(err, VX_EFORMAT, "%s: regions overlap: bank %u entry %u schema %u "
                             "[%llu, %llu) and bank %u entry %u schema %u [%llu, %llu)", nm,
                             l->segments[a->seg].bank_id, a->entry, a->schema, (ull)a->off,
                             (ull)(a->off + a->len), l->segments[b->seg].bank_id, b->entry,
                             b->schema, (ull)b->off, (ull)(b->off + b->len));
        }
    }
    free(all);
    return rc;
}

int vx_lyrw_parse(const char *name, const void *data, size_t size, vx_lyrw **out, vx_err *err)
{
    *out = NULL;
    const unsigned char *p = data;
    if (!name)
        name = "lyrw";
    if (size < HDR)
        return vx_errf(err, VX_EFORMAT, "%s: %zu bytes is too short for a LYRW header (24 "
                       "bytes)", name, size);
    uint32_t magic = rd32(p), version = rd32(p + 4);
    if (magic != VX_LYRW_MAGIC)
        return vx_errf(err, VX_EFORMAT, "%s: bad magic 0x%08x; a LYRW file starts with "
                       "0x4c595257 (\"LYRW\")", name, magic);
    if (version == 1)
        return vx_errf(err, VX_EVERSION, "%s: LYRW format_version 1 is a VINDEX2 layer file; "
                       "this reader needs version 2 (VINDEX3)", name);
    if (version != VX_LYRW_VERSION)
        return vx_errf(err, VX_EVERSION, "%s: LYRW format_version %u is not supported; this "
                       "reader needs version 2 (VINDEX3)", name, version);
    vx_lyrw *l = calloc(1, sizeof *l);
    if (!l || !(l->name = strdup(name))) {
        free(l);
        return vx_errf(err, VX_ENOMEM, "%s: out of memory", name);
    }
    l->data = p;
    l->size = size;
    l->layer = rd32(p + 8);
    l->num_banks = rd16(p + 12);
    l->num_segments = rd16(p + 14);
    l->flags = rd32(p + 16);
    uint32_t reserved = rd32(p + 20);
    /* v2.0 reserves per-entry overrides behind a header flag bit (seed §6.4): a file setting
     * one would be misread as homogeneous, so every undefined bit is refused. */
    if (l->flags & ~VX_LYRW_MULTI_SEGMENT) {
        vx_errf(err, VX_EVERSION, "%s: header flags 0x%08x set undefined bits 0x%08x; this "
                "reader knows LYRW v2.0, which defines bit 0 (multi-segment layer) only", name,
                l->flags, l->flags & ~VX_LYRW_MULTI_SEGMENT);
        return fail(l, out);
    }
    if (reserved) {
        vx_errf(err, VX_EFORMAT, "%s: the header's reserved word is 0x%08x; LYRW v2.0 writes 0",
                name, reserved);
        return fail(l, out);
    }
    if (l->num_banks == 0) {
        vx_errf(err, VX_EFORMAT, "%s: num_banks is 0; a LYRW file describes at least one bank",
                name);
        return fail(l, out);
    }
    if (l->num_segments == 0) {
        vx_errf(err, VX_EFORMAT, "%s: num_segments is 0; a LYRW file describes at least one "
                "segment", name);
        return fail(l, out);
    }
    uint64_t pos = HDR + (uint64_t)BANK_REC * l->num_banks + (uint64_t)SEG_REC * l->num_segments;
    if (parse_descriptors(l, p, err) != 0 || check_coverage(l, err) != 0 ||
        parse_schemas(l, p, &pos, err) != 0 || parse_entries(l, p, pos, err) != 0)
        return fail(l, out);
    *out = l;
    return 0;
}

int vx_lyrw_open(const char *path, vx_lyrw **out, vx_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return vx_errf(err, VX_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return vx_errf(err, VX_EIO, "%s: not a regular file", path);
    }
    void *map = NULL;
    if (st.st_size > 0) {
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            close(fd);
            return vx_errf(err, VX_EIO, "%s: cannot map: %s", path, strerror(errno));
        }
        madvise(map, (size_t)st.st_size, MADV_HUGEPAGE);   /* as container.c's segments */
    }
    close(fd);
    static const unsigned char empty[1];
    if (vx_lyrw_parse(path, map ? map : empty, (size_t)st.st_size, out, err) != 0) {
        if (map)
            munmap(map, (size_t)st.st_size);
        return -1;
    }
    (*out)->map = map;
    return 0;
}

const vx_lyrw_bank *vx_lyrw_bank_by_id(const vx_lyrw *l, uint16_t bank_id)
{
    for (unsigned i = 0; i < l->num_banks; i++)
        if (l->banks[i].id == bank_id)
            return &l->banks[i];
    return NULL;
}

const vx_lyrw_region *vx_lyrw_region_of(const vx_lyrw *l, uint16_t bank_id, uint32_t entry,
                                        uint16_t schema)
{
    for (unsigned i = 0; i < l->num_segments; i++) {
        const vx_lyrw_segment *g = &l->segments[i];
        const vx_lyrw_bank *k = &l->banks[g->bank];
        if (g->bank_id == bank_id && schema < k->schema_count && entry >= g->first_entry &&
            entry - g->first_entry < g->entry_count)
            return &g->regions[(uint64_t)(entry - g->first_entry) * k->schema_count + schema];
    }
    return NULL;
}

const void *vx_lyrw_bytes(const vx_lyrw *l, const vx_lyrw_region *r)
{
    return l->data + r->offset;
}

int vx_lyrw_tensor(const vx_lyrw *l, uint16_t bank_id, uint32_t entry, uint16_t schema,
                   vx_tensor *out, vx_err *err)
{
    const vx_lyrw_bank *k = vx_lyrw_bank_by_id(l, bank_id);
    const vx_lyrw_region *r = vx_lyrw_region_of(l, bank_id, entry, schema);
    if (!k || !r)
        return vx_errf(err, VX_EMISSING, "%s: no region for bank %u entry %u schema %u in this "
                       "file", l->name, bank_id, entry, schema);
    const vx_lyrw_schema *c = &k->schemas[schema];
    vx_dtype dt;
    if (c->packing > VX_PACK_BLOCKS_INLINE || vx_lyrw_format_dtype(c->format, &dt) != 0)
        return vx_errf(err, VX_EUNSUPPORTED, "%s: bank %u entry %u schema %u: format %u (%s) "
                       "with packing %u (%s) is not a tensor lql can read", l->name, bank_id,
                       entry, schema, c->format, or_unreg(vx_lyrw_format_name(c->format)),
                       c->packing, or_unreg(vx_lyrw_packing_name(c->packing)));
    if (r->length == 0)
        return vx_errf(err, VX_EMISSING, "%s: bank %u entry %u schema %u: the region is empty",
                       l->name, bank_id, entry, schema);
    *out = (vx_tensor){.name = NULL, .object = NULL, .segment = l->name, .dtype = dt,
                       .ndim = 2, .shape = {c->rows, c->cols}, .data = l->data + r->offset,
                       .nbytes = r->length, .offset = r->offset};
    return 0;
}

/* ---------------------------------------------------------------- reporting, capability */

size_t vx_lyrw_unknown_report(const vx_lyrw *l, char *out, size_t outsz)
{
    size_t n = 0, used = 0;
    if (outsz)
        out[0] = 0;
    for (unsigned i = 0; i < l->num_banks; i++) {
        const vx_lyrw_bank *k = &l->banks[i];
        for (unsigned j = 0; j < k->schema_count; j++) {
            const vx_lyrw_schema *c = &k->schemas[j];
            if (!c->unknown)
                continue;
            char line[160];
            int len = snprintf(line, sizeof line, "%sbank %u schema %u:", n ? "\n" : "", k->id, j);
            if (c->unknown & VX_LYRW_UNKNOWN_ROLE)
                len += snprintf(line + len, sizeof line - (size_t)len, " role %u", c->role);
            if (c->unknown & VX_LYRW_UNKNOWN_FORMAT)
                len += snprintf(line + len, sizeof line - (size_t)len, " format %u", c->format);
            if (c->unknown & VX_LYRW_UNKNOWN_PACKING)
                len += snprintf(line + len, sizeof line - (size_t)len, " packing %u", c->packing);
            if (c->unknown & VX_LYRW_UNKNOWN_LAYOUT)
                len += snprintf(line + len, sizeof line - (size_t)len, " layout %u", c->layout);
            snprintf(line + len, sizeof line - (size_t)len, " (unregistered, preserved)");
            if (used < outsz) {
                snprintf(out + used, outsz - used, "%s", line);
                used += strlen(out + used);
            }
            n++;
        }
    }
    return n;
}

int vx_lyrw_check(const vx_lyrw *l, const uint16_t *need, size_t nneed, vx_err *err)
{
    for (unsigned i = 0; i < l->num_banks; i++) {
        const vx_lyrw_bank *k = &l->banks[i];
        for (size_t r = 0; r < nneed; r++) {
            int found = 0;
            for (unsigned j = 0; j < k->schema_count; j++) {
                const vx_lyrw_schema *c = &k->schemas[j];
                if (c->role != need[r])
                    continue;
                found = 1;
                const char *what = or_unreg(vx_lyrw_role_name(c->role));
                vx_dtype dt;
                if (vx_lyrw_format_dtype(c->format, &dt) != 0)
                    return vx_errf(err, VX_EUNSUPPORTED, "%s: bank %u schema %u (%s): format %u "
                                   "(%s) cannot be decoded by lql", l->name, k->id, j, what,
                                   c->format, or_unreg(vx_lyrw_format_name(c->format)));
                if (c->packing > VX_PACK_BLOCKS_INLINE)
                    return vx_errf(err, VX_EUNSUPPORTED, "%s: bank %u schema %u (%s): packing %u "
                                   "(%s) is not executable; lql reads row_major and "
                                   "blocks_with_scales_inline", l->name, k->id, j, what,
                                   c->packing, or_unreg(vx_lyrw_packing_name(c->packing)));
                if (c->unknown & VX_LYRW_UNKNOWN_LAYOUT)
                    return vx_errf(err, VX_EUNSUPPORTED, "%s: bank %u schema %u (%s): layout %u "
                                   "is unregistered", l->name, k->id, j, what, c->layout);
                if (c->role == VX_ROLE_GATE_UP_FUSED && c->layout == VX_LAYOUT_UNSPECIFIED)
                    return vx_errf(err, VX_EUNSUPPORTED, "%s: bank %u schema %u (gate_up_fused): "
                                   "layout is unspecified, so the order of the gate and up "
                                   "halves is not declared", l->name, k->id, j);
            }
            if (!found)
                return vx_errf(err, VX_EUNSUPPORTED, "%s: bank %u has no %s region, which the "
                               "operation needs", l->name, k->id,
                               or_unreg(vx_lyrw_role_name(need[r])));
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- streaming writer */

typedef struct wbank {
    uint16_t schema_count;
    uint32_t entry_count;
    uint64_t *len;            /* per schema */
} wbank;

struct vx_lyrw_writer {
    vx_afile f;               /* path.tmp.<pid>, renamed into place at close */
    char *path;
    uint16_t nbanks;
    wbank *banks;
    uint64_t pos;             /* bytes written so far */
    vx_sha256_ctx h;          /* of those bytes: written strictly in order, never re-read */
    int bank;                 /* cursor: next region */
    uint32_t entry;
    uint16_t schema;
};

static int put(vx_lyrw_writer *w, const void *data, size_t n, vx_err *err)
{
    if (vx_afile_write(&w->f, data, n, err) != 0)
        return -1;
    vx_sha256_update(&w->h, data, n);
    w->pos += n;
    return 0;
}

static int pad_to(vx_lyrw_writer *w, uint64_t target, vx_err *err)
{
    static const unsigned char zeros[64];
    while (w->pos < target)
        if (put(w, zeros, (size_t)(target - w->pos < 64 ? target - w->pos : 64), err) != 0)
            return -1;
    return 0;
}

void vx_lyrw_writer_abort(vx_lyrw_writer *w)
{
    if (!w)
        return;
    vx_afile_abort(&w->f);
    vx_sha256_free(&w->h);
    for (unsigned i = 0; i < w->nbanks && w->banks; i++)
        free(w->banks[i].len);
    free(w->banks);
    free(w->path);
    free(w);
}

/* Validates the specs and records each schema's region length. */
static int writer_layout(vx_lyrw_writer *w, uint32_t flags, const vx_lyrw_bank_spec *b,
                         vx_err *err)
{
    if (flags & ~VX_LYRW_MULTI_SEGMENT)
        return vx_errf(err, VX_EARG, "%s: header flags 0x%08x set bits LYRW v2.0 does not "
                       "define", w->path, flags);
    for (unsigned i = 0; i < w->nbanks; i++) {
        const vx_lyrw_bank_spec *s = &b[i];
        if (s->kind > VX_BANK_SHARED || s->flags & ~VX_LYRW_BROWSE_MASK ||
            (s->flags & VX_LYRW_BROWSE_MASK) == VX_LYRW_BROWSE_MASK)
            return vx_errf(err, VX_EARG, "%s: bank %u: kind %u with flags 0x%04x is not a LYRW "
                           "v2.0 bank (kinds 0-2, browse modes 0-2, no other flag bits)",
                           w->path, s->id, s->kind, s->flags);
        for (unsigned j = 0; j < i; j++)
            if (b[j].id == s->id)
                return vx_errf(err, VX_EARG, "%s: bank id %u given twice", w->path, s->id);
        if ((uint64_t)s->first_entry + s->entry_count > s->num_entries)
            return vx_errf(err, VX_EARG, "%s: bank %u: entries [%u, %llu) past its %u entries",
                           w->path, s->id, s->first_entry,
                           (ull)((uint64_t)s->first_entry + s->entry_count), s->num_entries);
        if (!(flags & VX_LYRW_MULTI_SEGMENT) && (s->first_entry || s->entry_count != s->num_entries))
            return vx_errf(err, VX_EARG, "%s: bank %u: a single-segment file holds all %u "
                           "entries", w->path, s->id, s->num_entries);
        if (s->kind == VX_BANK_DENSE && s->num_entries != 1)
            return vx_errf(err, VX_EARG, "%s: dense bank %u must have 1 entry", w->path, s->id);
        if (s->schema_count == 0)
            return vx_errf(err, VX_EARG, "%s: bank %u has no region schemas", w->path, s->id);
        wbank *k = &w->banks[i];
        k->schema_count = s->schema_count;
        k->entry_count = s->entry_count;
        k->len = calloc(s->schema_count ? s->schema_count : 1, sizeof *k->len);
        if (!k->len)
            return vx_errf(err, VX_ENOMEM, "%s: out of memory", w->path);
        for (unsigned j = 0; j < s->schema_count; j++) {
            const vx_lyrw_schema *c = &s->schemas[j];
            k->len[j] = s->region_bytes ? s->region_bytes[j] : 0;
            if (c->pair_id != VX_LYRW_UNPAIRED && (c->pair_id >= s->schema_count || c->pair_id == j))
                return vx_errf(err, VX_EARG, "%s: bank %u schema %u pairs with missing schema "
                               "%u", w->path, s->id, j, c->pair_id);
            if (k->len[j] == 0 && (c->packing > VX_PACK_BLOCKS_INLINE ||
                                   region_size(c->format, c->rows, c->cols, &k->len[j]) != 0))
                return vx_errf(err, VX_EARG, "%s: bank %u schema %u: no region length given and "
                               "%s %u x %u cannot be sized", w->path, s->id, j,
                               or_unreg(vx_lyrw_format_name(c->format)), c->rows, c->cols);
        }
    }
    return 0;
}

/* Move the cursor off banks that have no region left to write. */
static void settle(vx_lyrw_writer *w)
{
    while (w->bank < w->nbanks && w->entry >= w->banks[w->bank].entry_count) {
        w->bank++;
        w->entry = 0;
        w->schema = 0;
    }
}

/* Advance the cursor past the current region. */
static void advance(vx_lyrw_writer *w)
{
    if (++w->schema >= w->banks[w->bank].schema_count) {
        w->schema = 0;
        w->entry++;
    }
    settle(w);
}

static int write_tables(vx_lyrw_writer *w, uint32_t layer, uint32_t flags,
                        const vx_lyrw_bank_spec *b, vx_err *err)
{
    unsigned char rec[HDR];
    uint64_t nschemas = 0, nentries = 0;
    for (unsigned i = 0; i < w->nbanks; i++) {
        nschemas += b[i].schema_count;
        nentries += (uint64_t)b[i].entry_count * b[i].schema_count;
    }
    uint64_t tables_end = HDR + (uint64_t)(BANK_REC + SEG_REC) * w->nbanks
                          + nschemas * SCHEMA_REC + nentries * ENTRY_REC;
    wr32(rec, VX_LYRW_MAGIC);
    wr32(rec + 4, VX_LYRW_VERSION);
    wr32(rec + 8, layer);
    wr16(rec + 12, w->nbanks);
    wr16(rec + 14, w->nbanks);       /* one segment descriptor per bank */
    wr32(rec + 16, flags);
    wr32(rec + 20, 0);
    if (put(w, rec, HDR, err) != 0)
        return -1;
    for (unsigned i = 0; i < w->nbanks; i++) {
        wr16(rec, b[i].id);
        wr16(rec + 2, b[i].kind);
        wr16(rec + 4, b[i].schema_count);
        wr16(rec + 6, b[i].flags);
        wr32(rec + 8, b[i].num_entries);
        wr32(rec + 12, b[i].input_dim);
        wr32(rec + 16, b[i].intermediate_dim);
        wr32(rec + 20, b[i].output_dim);
        if (put(w, rec, BANK_REC, err) != 0)
            return -1;
    }
    for (unsigned i = 0; i < w->nbanks; i++) {
        wr16(rec, b[i].id);
        wr16(rec + 2, b[i].segment_index);
        wr32(rec + 4, b[i].first_entry);
        wr32(rec + 8, b[i].entry_count);
        if (put(w, rec, SEG_REC, err) != 0)
            return -1;
    }
    for (unsigned i = 0; i < w->nbanks; i++) {
        for (unsigned j = 0; j < b[i].schema_count; j++) {
            const vx_lyrw_schema *c = &b[i].schemas[j];
            wr16(rec, (uint16_t)j);
            wr16(rec + 2, c->role);
            wr16(rec + 4, c->format);
            wr16(rec + 6, c->packing);
            wr16(rec + 8, c->pair_id);
            wr16(rec + 10, c->layout);
            wr32(rec + 12, c->rows);
            wr32(rec + 16, c->cols);
            if (put(w, rec, SCHEMA_REC, err) != 0)
                return -1;
        }
    }
    /* Entry tables with the offsets the regions will land at (same walk as advance()). */
    uint64_t at = align64(tables_end);
    for (unsigned i = 0; i < w->nbanks; i++) {
        for (uint32_t e = 0; e < b[i].entry_count; e++) {
            for (unsigned j = 0; j < b[i].schema_count; j++) {
                uint64_t len = w->banks[i].len[j];
                wr64(rec, at);
                wr64(rec + 8, len);
                if (put(w, rec, ENTRY_REC, err) != 0)
                    return -1;
                at = align64(at + len);
            }
        }
    }
    return pad_to(w, align64(tables_end), err);
}

int vx_lyrw_writer_open(const char *path, uint32_t layer, uint32_t flags,
                        const vx_lyrw_bank_spec *banks, uint16_t nbanks,
                        vx_lyrw_writer **out, vx_err *err)
{
    *out = NULL;
    if (nbanks == 0)
        return vx_errf(err, VX_EARG, "%s: a LYRW file needs at least one bank", path);
    vx_lyrw_writer *w = calloc(1, sizeof *w);
    if (!w)
        return vx_errf(err, VX_ENOMEM, "%s: out of memory", path);
    w->f.fd = -1;
    w->nbanks = nbanks;
    w->path = strdup(path);
    w->banks = calloc(nbanks, sizeof *w->banks);
    if (!w->path || !w->banks) {
        vx_lyrw_writer_abort(w);
        return vx_errf(err, VX_ENOMEM, "%s: out of memory", path);
    }
    if (writer_layout(w, flags, banks, err) != 0) {
        vx_lyrw_writer_abort(w);
        return -1;
    }
    if (vx_sha256_init(&w->h, err) != 0 || vx_afile_open(&w->f, path, 1, NULL, err) != 0) {
        vx_lyrw_writer_abort(w);
        return -1;
    }
    if (write_tables(w, layer, flags, banks, err) != 0) {
        vx_lyrw_writer_abort(w);
        return -1;
    }
    settle(w);
    *out = w;
    return 0;
}

void vx_lyrw_writer_next(const vx_lyrw_writer *w, int *bank, uint32_t *entry, uint16_t *schema)
{
    *bank = w->bank < w->nbanks ? w->bank : -1;
    *entry = w->entry;
    *schema = w->schema;
}

int vx_lyrw_write_region(vx_lyrw_writer *w, const void *data, uint64_t n, vx_err *err)
{
    if (w->bank >= w->nbanks)
        return vx_errf(err, VX_EARG, "%s: every region is already written", w->path);
    uint64_t want = w->banks[w->bank].len[w->schema];
    if (n != want)
        return vx_errf(err, VX_EARG, "%s: bank index %d entry %u schema %u: region is %llu "
                       "bytes, the table says %llu", w->path, w->bank, w->entry, w->schema,
                       (ull)n, (ull)want);
    if (put(w, data, (size_t)n, err) != 0 || pad_to(w, align64(w->pos), err) != 0)
        return -1;
    advance(w);
    return 0;
}

int vx_lyrw_writer_close(vx_lyrw_writer *w, char sha[65], uint64_t *bytes, vx_err *err)
{
    int rc = 0;
    if (w->bank < w->nbanks)
        rc = vx_errf(err, VX_EARG, "%s: closed before every region was written (next: bank "
                     "index %d entry %u schema %u)", w->path, w->bank, w->entry, w->schema);
    else
        rc = vx_afile_commit(&w->f, err);
    if (rc == 0 && sha)
        vx_sha256_final(&w->h, sha);
    if (rc == 0 && bytes)
        *bytes = w->pos;
    vx_lyrw_writer_abort(w);
    return rc;
}

/* ---------------------------------------------------------------- rewriting */

int vx_lyrw_rewrite(const char *src, const char *dst, vx_lyrw_region_fn fn, void *ctx,
                    char sha[65], uint64_t *bytes, vx_err *err)
{
    vx_lyrw *l = NULL;
    if (vx_lyrw_open(src, &l, err))
        return -1;
    vx_lyrw_bank_spec *spec = calloc((size_t)l->num_banks + 1, sizeof *spec);
    uint64_t **lens = calloc((size_t)l->num_banks + 1, sizeof *lens);
    vx_lyrw_writer *w = NULL;
    int rc = -1;
    if (!spec || !lens) {
        vx_errf(err, VX_ENOMEM, "%s: out of memory", src);
        goto done;
    }
    /* the writer lays a file out bank by bank, one segment each */
    for (uint16_t s = 0; s < l->num_segments; s++) {
        const vx_lyrw_segment *g = &l->segments[s];
        const vx_lyrw_bank *k = &l->banks[g->bank];
        if (l->num_segments != l->num_banks || g->bank != s || g->entry_count == 0) {
            vx_errf(err, VX_EUNSUPPORTED, "%s: its banks are not one segment each in bank "
                    "order; only such LYRW files are rewritten", src);
            goto done;
        }
        if (!(lens[s] = calloc((size_t)k->schema_count + 1, sizeof **lens))) {
            vx_errf(err, VX_ENOMEM, "%s: out of memory", src);
            goto done;
        }
        for (uint16_t j = 0; j < k->schema_count; j++)
            lens[s][j] = g->regions[j].length;
        spec[s] = (vx_lyrw_bank_spec){k->id, k->kind, k->flags, k->schema_count,
                                      k->num_entries, k->input_dim, k->intermediate_dim,
                                      k->output_dim, k->schemas, lens[s], g->segment_index,
                                      g->first_entry, g->entry_count};
    }
    if (vx_lyrw_writer_open(dst, l->layer, l->flags, spec, l->num_banks, &w, err))
        goto done;
    for (uint16_t s = 0; s < l->num_segments; s++) {
        const vx_lyrw_segment *g = &l->segments[s];
        const size_t n = (size_t)g->entry_count * l->banks[g->bank].schema_count;
        for (size_t r = 0; r < n; r++) {
            const vx_lyrw_region *rg = &g->regions[r];
            const unsigned char *data = l->data + rg->offset, *out = NULL;
            if (fn(ctx, rg->offset, rg->length, data, &out, err) ||
                vx_lyrw_write_region(w, out ? out : data, rg->length, err))
                goto done;
        }
    }
    rc = vx_lyrw_writer_close(w, sha, bytes, err);
    w = NULL;
done:
    if (w)
        vx_lyrw_writer_abort(w);
    for (uint16_t s = 0; lens && s < l->num_banks; s++)
        free(lens[s]);
    free(lens);
    free(spec);
    vx_lyrw_free(l);
    return rc;
}
