/*
 * lyrw.h — LYRW v2, the expert-bank segment codec (VINDEX3 seed §6; lql's choices in
 * docs/lql/LYRW.md): reader, capability check and streaming writer.
 *
 * File layout, all integers little-endian, tables packed back to back:
 *   header            24 B   magic 0x4C595257, format_version 2, logical_layer, num_banks u16,
 *                            num_segments u16, flags u32 (bit 0: one segment of a
 *                            multi-segment layer), reserved u32
 *   bank descriptors  24 B × num_banks
 *   segment descr.    12 B × num_segments   bank_id u16, segment_index u16, first_entry u32,
 *                                           entry_count u32
 *   schema records    20 B × Σ region_schema_count, bank by bank in descriptor order
 *   entry tables      16 B × entry_count × region_schema_count per segment, in segment
 *                     order: (offset u64, length u64), offsets from the file start,
 *                     64-byte aligned
 *   regions           from the first 64-byte boundary after the tables
 *
 * The reader validates every count, bound and offset in 64-bit arithmetic before it touches
 * a region, and keeps unknown role/format/packing/layout tags (reporting them); refusing
 * them is vx_lyrw_check's job, asked per operation. Errors are -1 plus a vx_err.
 */
#ifndef LQL_LYRW_H
#define LQL_LYRW_H

#include "vindex.h"

#include <stddef.h>
#include <stdint.h>

#define VX_LYRW_MAGIC 0x4C595257u
#define VX_LYRW_VERSION 2u
#define VX_LYRW_MULTI_SEGMENT 1u       /* header flags bit 0, the only one v2.0 defines */
#define VX_LYRW_BROWSE_MASK 3u         /* bank flags bits 0-1 (0 none, 1 direct, 2 strided), the
                                          only ones v2.0 defines */
#define VX_LYRW_UNPAIRED 0xFFFFu

/* Registered region roles (§6.5); other values are preserved and reported. */
enum { VX_ROLE_GATE, VX_ROLE_UP, VX_ROLE_GATE_UP_FUSED, VX_ROLE_DOWN, VX_ROLE_BIAS,
       VX_ROLE_SCALES, VX_ROLE_LATENT_IN, VX_ROLE_LATENT_OUT };
/* Registered format tags (§6.4). */
enum { VX_LF_F32, VX_LF_F16, VX_LF_BF16, VX_LF_Q4_0, VX_LF_Q4_K, VX_LF_Q6_K, VX_LF_Q8_0,
       VX_LF_FP4_LARQL, VX_LF_MXFP4, VX_LF_NVFP4, VX_LF_MXFP8 };
enum { VX_PACK_ROW_MAJOR, VX_PACK_BLOCKS_INLINE, VX_PACK_BLOCKS_VALUES, VX_PACK_BLOCKS_SCALES };
enum { VX_LAYOUT_UNSPECIFIED, VX_LAYOUT_CONTIGUOUS_HALVES, VX_LAYOUT_INTERLEAVED };
enum { VX_BANK_DENSE, VX_BANK_ROUTED, VX_BANK_SHARED };

/* Bits of vx_lyrw_schema.unknown: which tags this reader does not know. */
#define VX_LYRW_UNKNOWN_ROLE 1u
#define VX_LYRW_UNKNOWN_FORMAT 2u
#define VX_LYRW_UNKNOWN_PACKING 4u
#define VX_LYRW_UNKNOWN_LAYOUT 8u

typedef struct vx_lyrw_schema {
    uint16_t index, role, format, packing, pair_id, layout;
    uint32_t rows, cols;
    unsigned unknown;        /* VX_LYRW_UNKNOWN_* bits; set by the reader only */
} vx_lyrw_schema;

typedef struct vx_lyrw_region {
    uint64_t offset, length;
} vx_lyrw_region;

typedef struct vx_lyrw_bank {
    uint16_t id, kind, schema_count, flags;
    uint32_t num_entries, input_dim, intermediate_dim, output_dim;
    vx_lyrw_schema *schemas;  /* schema_count records, owned by the vx_lyrw */
} vx_lyrw_bank;

typedef struct vx_lyrw_segment {
    uint16_t bank_id, segment_index;
    uint32_t first_entry, entry_count;
    int bank;                 /* index into banks[] */
    vx_lyrw_region *regions;  /* entry_count × schema_count, entry-major; owned */
} vx_lyrw_segment;

typedef struct vx_lyrw {
    uint32_t layer, flags;
    uint16_t num_banks, num_segments;
    vx_lyrw_bank *banks;
    vx_lyrw_segment *segments;
    uint64_t size;            /* file bytes */
    uint64_t tables_end;      /* first byte after the entry tables */
    size_t n_unknown;         /* schemas carrying at least one unknown tag */
    const unsigned char *data;  /* the file's bytes (borrowed or mapped) */
    void *map;                /* non-NULL when vx_lyrw_open mapped the file */
    char *name;               /* for messages */
} vx_lyrw;

/* Parse size bytes at data, which must outlive the result (name is used in messages).
 * Validates the structure fully; on failure *out is NULL. */
int vx_lyrw_parse(const char *name, const void *data, size_t size, vx_lyrw **out, vx_err *err);
/* mmap a .lyrw file read-only and parse it; the result owns the mapping. */
int vx_lyrw_open(const char *path, vx_lyrw **out, vx_err *err);
void vx_lyrw_free(vx_lyrw *l);

/* The bank with this id, or NULL. */
const vx_lyrw_bank *vx_lyrw_bank_by_id(const vx_lyrw *l, uint16_t bank_id);
/* The region of (bank_id, entry, schema) in this file, or NULL when the entry lives in
 * another segment file or the ids are out of range. */
const vx_lyrw_region *vx_lyrw_region_of(const vx_lyrw *l, uint16_t bank_id, uint32_t entry,
                                        uint16_t schema);
/* Bytes of a region of this file (validated at parse). */
const void *vx_lyrw_bytes(const vx_lyrw *l, const vx_lyrw_region *r);

/* A region of a decodable format (packing row_major or blocks_with_scales_inline) as a
 * borrowed 2-D tensor view [rows, cols] in its vx_dtype, so the engine's weight views and
 * kernels take it like a segment tensor (name NULL, object NULL, segment = the file name).
 * Refuses (VX_EUNSUPPORTED / VX_EMISSING) naming bank, entry and schema. */
int vx_lyrw_tensor(const vx_lyrw *l, uint16_t bank_id, uint32_t entry, uint16_t schema,
                   vx_tensor *out, vx_err *err);

/* Tag names ("gate", "q6_k", "row_major", "interleaved"), NULL for unregistered values. */
const char *vx_lyrw_role_name(unsigned role);
const char *vx_lyrw_format_name(unsigned format);
const char *vx_lyrw_packing_name(unsigned packing);
const char *vx_lyrw_layout_name(unsigned layout);
/* The vx_dtype a format tag decodes to; -1 for tags lql cannot decode (fp4_larql, nvfp4,
 * mxfp8, unregistered). */
int vx_lyrw_format_dtype(unsigned format, vx_dtype *out);

/* One line per schema with unknown tags ("bank 0 schema 2: role 300 (unregistered)"),
 * newline-separated into out (truncated to outsz); returns the number of such schemas. */
size_t vx_lyrw_unknown_report(const vx_lyrw *l, char *out, size_t outsz);

/* Capability check: can an operation needing `roles` (nroles role tags) run on every bank
 * of this file? Refuses (VX_EUNSUPPORTED) naming bank, schema and tag when a needed role is
 * absent, or a schema of a needed role has a format lql cannot decode, an unknown packing,
 * split value/scale packing, or an unknown layout. Schemas of other roles are not looked at. */
int vx_lyrw_check(const vx_lyrw *l, const uint16_t *roles, size_t nroles, vx_err *err);

/* ---------------------------------------------------------------- streaming writer */

/* One bank as the writer lays it out in this file: its descriptor, its schemas (index and
 * unknown are ignored: schemas are numbered in order), the byte length of each schema's
 * region (0: computed from format × rows × cols, which must then be decodable), and the
 * entries this file holds [first_entry, first_entry + entry_count). */
typedef struct vx_lyrw_bank_spec {
    uint16_t id, kind, flags, schema_count;
    uint32_t num_entries, input_dim, intermediate_dim, output_dim;
    const vx_lyrw_schema *schemas;
    const uint64_t *region_bytes;      /* schema_count lengths, or NULL for all computed */
    uint16_t segment_index;
    uint32_t first_entry, entry_count;
} vx_lyrw_bank_spec;

typedef struct vx_lyrw_writer vx_lyrw_writer;

/* Create path (through a temporary sibling renamed at close) and write the header and
 * every table with final offsets computed up front. Memory: the tables only. */
int vx_lyrw_writer_open(const char *path, uint32_t layer, uint32_t flags,
                        const vx_lyrw_bank_spec *banks, uint16_t nbanks,
                        vx_lyrw_writer **out, vx_err *err);
/* Append the next region, in file order: bank by bank, entry by entry, schema by schema.
 * n must equal that region's declared length. */
int vx_lyrw_write_region(vx_lyrw_writer *w, const void *data, uint64_t n, vx_err *err);
/* Next region the writer expects (for callers that produce regions lazily). */
void vx_lyrw_writer_next(const vx_lyrw_writer *w, int *bank, uint32_t *entry, uint16_t *schema);
/* Check every region arrived, flush, rename into place, free w (also on failure). sha and
 * bytes (either may be NULL) receive the file's sha256 and size, hashed as it was
 * written. */
int vx_lyrw_writer_close(vx_lyrw_writer *w, char sha[65], uint64_t *bytes, vx_err *err);
/* Remove the temporary file and free w. */
void vx_lyrw_writer_abort(vx_lyrw_writer *w);

/* Copy the LYRW file src to dst through the writer, with the same banks, schemas and
 * entries, so every region keeps its offset and, unless fn replaces it, its bytes. fn is
 * called per region in file order with the region's file offset, length and bytes; it may
 * point *out at a replacement of the same length (left NULL: the region is copied). Fills
 * dst's sha256 (hex) and size. A file whose banks are not one segment each in bank order
 * is refused by name. */
typedef int (*vx_lyrw_region_fn)(void *ctx, uint64_t offset, uint64_t length,
                                 const unsigned char *data, const unsigned char **out,
                                 vx_err *err);
int vx_lyrw_rewrite(const char *src, const char *dst, vx_lyrw_region_fn fn, void *ctx,
                    char sha[65], uint64_t *bytes, vx_err *err);

#endif
