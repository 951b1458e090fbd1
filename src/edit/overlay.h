/*
 * overlay.h — the effective model of the mutation layer: the journal's active
 * operations (storage/journal.h) replayed in seq order into what the executor and browse
 * consume — an eng_overlay (tombstones, replaced gate/up/down rows, low-rank down_proj
 * deltas) and browse's metadata overrides.
 *
 * Replay rules per feature slot (layer, feature), last operation wins per field:
 *   delete  → tombstone (the feature contributes nothing; browse drops it);
 *   insert  → tombstone cleared; the gate/up/down rows and down_meta it carries replace
 *             the slot's; an insert carrying u/v adds a low-rank delta to its layer;
 *   update  → the rows and down_meta it carries replace the slot's (a tombstone stays).
 *   insert_knn → an entry of the residual-key store (layer, unit-length key, target);
 *   delete_knn → every store entry of that entity is dropped.
 * After replay, the 8 features each low-rank delta moves most (largest |v_f|·|u|) get
 * their down-meta recomputed from the effective column (E · column, as the encoder's
 * down-meta and so COMPILE's), unless an operation set their metadata.
 *
 * Ownership: the overlay owns copies of every vector; the eng_overlay it hands out (the one
 * overlay type: the executor applies it, browse and COMPILE read it) points into it and
 * lives until ed_overlay_free.
 */
#ifndef LQL_EDIT_OVERLAY_H
#define LQL_EDIT_OVERLAY_H

#include <stddef.h>

#include "browse.h"
#include "engine.h"
#include "journal.h"

typedef struct ed_overlay ed_overlay;

/* Check one operation against the model's geometry (layer and feature in range, vectors
 * of hidden floats, u [hidden, r] with v [features, r], an executable kind); where names
 * the operation in the message ("operation 3"). */
int ed_check_op(const brw_model *m, const vx_op *op, const char *where, vx_err *err);

/* Replay ops[0..n) (checked as above) into a new overlay. */
int ed_overlay_build(const brw_model *m, const vx_op *ops, size_t n, ed_overlay **out,
                     vx_err *err);
void ed_overlay_free(ed_overlay *o);

/* What the executor applies and browse reads: edits, low-rank deltas and metadata
 * overrides (never NULL for a built overlay). */
const eng_overlay *ed_overlay_eng(const ed_overlay *o);

typedef struct ed_counts {
    size_t ops;               /* operations replayed */
    size_t features;          /* distinct feature slots touched */
    size_t tombstones;        /* of which tombstoned */
    size_t replaced;          /* with at least one replacement row */
    size_t meta;              /* with a metadata override */
    size_t lowrank;           /* low-rank deltas */
    size_t knn;               /* residual-key store entries */
    size_t recomputed;        /* features whose down-meta a low-rank delta's move recomputed */
} ed_counts;

void ed_overlay_counts(const ed_overlay *o, ed_counts *out);
/* The residual-key store (INSERT … MODE KNN): at inference the residual at the entry's
 * layer (last position) is compared by cosine with every key of that layer; the best match
 * above ED_KNN_THRESHOLD overrides the prediction with its target. */
#define ED_KNN_THRESHOLD 0.75
typedef struct ed_knn_entry {
    int layer;
    int32_t target_id;
    const float *key;         /* [hidden], unit length */
    const char *entity, *relation, *target;   /* as inserted; relation "" when none */
} ed_knn_entry;
/* The store's entries in journal order (*n of them; NULL/0 for a NULL overlay). */
const ed_knn_entry *ed_knn(const ed_overlay *o, size_t *n);

/* Is (layer, feature) tombstoned in the overlay? */
int ed_is_tombstone(const ed_overlay *o, int layer, int64_t feature);

#endif
