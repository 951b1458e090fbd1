/*
 * compile.h — COMPILE: materialise a base container plus an overlay (tombstones,
 * replaced gate/up/down rows, low-rank down_proj deltas) as a new standalone container
 * stamped `authority: derived`. The base is never written: untouched files are hard-linked
 * (copied across file systems), segments holding an edited tensor are rewritten through
 * the segment writer, index.json gets fresh segment and payload hashes plus provenance,
 * and the down-meta is recomputed from the edited weights, then the overlay's metadata
 * overrides (UPDATE) and tombstones are written over it. Written into a temporary
 * sibling and renamed into place only when complete.
 *
 * Materialisation (exact for f32 storage, rounded once for f16/bf16):
 *   tombstone  → the feature's down column and (gated FFN) gate row become zero, so its
 *                activation and its contribution are both zero, as in the overlay;
 *   gate/up/down replacements → the rows / column are written;
 *   low-rank   → down_proj += U·Vᵀ.
 * Block-quantised representations re-quantise only the blocks whose values changed, MoE
 * edits rewrite only the edited experts' matrices, and bank-shape containers get each
 * edited layer's LYRW file written anew (MUTATION.md); COMPILE fails when fewer FFN
 * tensors were rewritten than the overlay edits. COMPILE (derive.c) gates the
 * result against the overlay. LQL_TEST_COMPILE_FAULT (tests only) corrupts one written
 * value so that gate can be shown to fail.
 */
#ifndef LQL_EDIT_COMPILE_H
#define LQL_EDIT_COMPILE_H

#include <stddef.h>

#include "browse.h"
#include "engine.h"
#include "vindex.h"

/* The effective value of one stored tensor under an overlay, as f32 ([nelems], malloc'd
 * into *out): an edited tensor as COMPILE stores it (f32 exact, f16 / bf16 rounded once,
 * the changed blocks of a block-quantised one quantised again), decoded; *edited is 1 when
 * the overlay changes it. A dtype with no decoder fails with VX_EUNSUPPORTED. ov may be
 * NULL (the stored values). */
int ed_tensor_f32(const vx_container *c, const eng_overlay *ov, const vx_tensor *t,
                  float **out, int *edited, vx_err *err);
/* Does the overlay change the tensor (ed_tensor_f32's *edited, without the values)? */
int ed_tensor_edited(const vx_container *c, const eng_overlay *ov, const vx_tensor *t);

/* Shared with COMPACT (edit_compact.c). */
/* sha256 of a representation's payload: its segments' tensor bytes in table order, read
 * from the files under dir. */
int brw_payload_sha256(const char *dir, const cJSON *rep, char hex[65], vx_err *err);

typedef struct ed_compile_report {
    size_t tensors_rewritten;     /* edited tensors */
    size_t segments_rewritten;    /* segment files written anew (LYRW bank files included) */
    size_t bank_files_rewritten;  /* of them, LYRW bank files */
    size_t files_linked;          /* files hard-linked or copied unchanged */
    size_t meta_written;          /* down-meta records the overlay's metadata set */
    int meta_layers, meta_layers_known; /* a base without down-meta under metadata edits:
                                   * its layers, and how many of them were carried from
                                   * records computed or cached (0 0 otherwise) */
    unsigned dtypes;              /* a bit (1 << vx_dtype) per dtype of an edited tensor
                                   * the bound profile reads */
    size_t blocks, blocks_requantised; /* blocks of edited block-quantised tensors, and how
                                        * many of them the edit changed (re-quantised; the
                                        * others keep their bytes) */
    size_t blocks_new_bytes;      /* re-quantised blocks whose bytes differ from the base's
                                   * (a change below half a quantisation step rounds back) */
} ed_compile_report;

/* Compile c + ov (its weights edits and its metadata overrides) into out_dir (which must
 * not exist). provenance (may be NULL) is added to index.json as "derived_from" (copied).
 * The compiled container stores down-meta when c does, or when ov sets some: then c's
 * records are carried for the features whose down column ov leaves alone — from c's file,
 * or, when c stores none, the records bm (c's browse model, may be NULL) has computed or
 * its down-meta cache holds — and the rest is computed for the compiled weights. progress
 * (may be NULL) hears that computation, stage "down-meta". */
int ed_compile(const vx_container *c, const brw_model *bm, const eng_overlay *ov,
               const char *out_dir, const cJSON *provenance, vx_progress_fn progress,
               void *progress_ctx, ed_compile_report *rep, vx_err *err);

#endif
