/*
 * journal.h — the mutation layer's storage: the SQLite overlay journal and .vlp patch files.
 *
 * An edit never touches the base container. Every edit statement becomes exactly one
 * SQLite transaction in a journal database keyed to the base by vx_index_sha256(); the
 * effective model is the base plus a replay of the journal's active operations in seq
 * order. Patches group operations (a session's first edit without BEGIN PATCH opens an
 * anonymous one); history rows record statements so UNDO / ROLLBACK TO n can step back.
 * docs/lql/MUTATION.md describes the location rules, the schema and the guarantees.
 *
 * Errors: every fallible function returns 0 on success and -1 with a vx_err; nothing
 * here prints. Strings and arrays returned through out-parameters are owned by the caller
 * and released with the matching *_free function.
 */
#ifndef LQL_JOURNAL_H
#define LQL_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "vindex.h"

/* ---------------------------------------------------------------- operations */

/* The operation kinds of the reference's .vlp format, plus lql's own.
 * VX_OP_INSERT: a feature slot takes new gate/up/down rows and output metadata, or (no
 * feature; vectors u, v, key) a low-rank down_proj delta, optionally of one expert;
 * VX_OP_UPDATE: overrides of some of those; VX_OP_DELETE: a tombstone;
 * VX_OP_INSERT_KNN / VX_OP_DELETE_KNN: the reference's residual-key store (kept so .vlp
 * files round-trip; lql's executor has no KNN store and refuses to apply them). */
typedef enum vx_op_kind {
    VX_OP_INSERT = 0, VX_OP_UPDATE, VX_OP_DELETE, VX_OP_INSERT_KNN, VX_OP_DELETE_KNN,
    VX_OP_KIND_COUNT
} vx_op_kind;

/* "insert", "update", "delete", "insert_knn", "delete_knn"; NULL for invalid values. */
const char *vx_op_kind_name(vx_op_kind k);
int vx_op_kind_parse(const char *name, vx_op_kind *out);

/* A vector or matrix carried by an operation. role is one of gate, up, down (one
 * feature's rows, [1, hidden]), key (a KNN residual key, [1, hidden]; on a low-rank insert
 * the FFN activations it was keyed on, [1, features]), u, v (factors of a
 * low-rank down_proj delta: u [hidden, rank], v [features, rank]). Row-major f32. */
#define VX_OP_MAX_VECS 6
typedef struct vx_opvec {
    char role[8];
    int64_t rows, cols;
    float *data;              /* rows·cols floats, owned by the op */
} vx_opvec;

/* One operation. Optional fields: strings NULL, numbers NAN, layer/feature -1, ids -1. */
typedef struct vx_op {
    vx_op_kind kind;
    int64_t seq, patch_id, history_n;   /* set when read back from a journal; else 0 */
    int layer, feature;
    int expert;               /* a low-rank insert on a MoE layer: the routed expert whose
                               * down_proj it updates (v spans its features); -1 layer-wide */
    char *entity, *relation, *target;
    double confidence, alpha;
    char *mode;               /* how an insert was made ("compose", "memit", ...) or NULL */
    char *reason;             /* delete: why (reference field), or NULL */
    int64_t target_id;        /* insert_knn: the target token id */
    /* down_meta {t, i, c}: the feature's output token, its id and c_score */
    int has_meta;
    char *meta_token;
    int64_t meta_id;
    double meta_c;
    int nvec;
    vx_opvec vec[VX_OP_MAX_VECS];
} vx_op;

/* An op with every optional field absent. */
void vx_op_init(vx_op *op, vx_op_kind kind);
/* Release what an op owns (strings, vectors) and re-initialise it. */
void vx_op_clear(vx_op *op);
/* Clear n ops and free the array. */
void vx_ops_free(vx_op *ops, size_t n);
/* Copy a vector into the op under a role (replacing one of the same role). -1 on a bad
 * role, a bad shape (rows, cols ≥ 1, rows·cols ≤ 2^28) or no memory. */
int vx_op_set_vec(vx_op *op, const char *role, int64_t rows, int64_t cols, const float *data,
                  vx_err *err);
/* The op's vector of a role, or NULL. */
const vx_opvec *vx_op_vec(const vx_op *op, const char *role);
/* Set a string field (copied; NULL clears). -1 only on out-of-memory. */
int vx_op_set_str(char **field, const char *s, vx_err *err);
/* Deep copy. */
int vx_op_copy(vx_op *dst, const vx_op *src, vx_err *err);

/* ---------------------------------------------------------------- journal */

typedef struct vx_journal vx_journal;

/* The current schema version (PRAGMA user_version). */
#define VX_JOURNAL_SCHEMA 3

/* Where the journal of a container lives by default: "<parent>/<name>.lqljournal" beside
 * the container directory (resolved by realpath, so every spelling of one container and a
 * symlink to it name one journal; an unresolvable directory is an error) when its parent
 * directory is writable, else
 * "$XDG_DATA_HOME/lql/<name>-<first 16 hex of index_sha256>.lqljournal" (XDG_DATA_HOME
 * defaulting to $HOME/.local/share). Never inside the container. Creates nothing: a
 * session that only reads leaves no trace; the first edit calls vx_journal_create_dir. */
int vx_journal_locate(const char *container_dir, const char *index_sha256, char *out,
                      size_t outsz, vx_err *err);
/* -1 when the container at dir has a journal at its default place: `what` (REPRESENT,
 * `vindex profile add`) is about to rewrite index.json, whose sha256 keys that journal, so
 * its edits could never be opened again. 0 when there is none. */
int vx_journal_guard(const char *dir, const char *what, vx_err *err);
/* Create the directories above a journal path (mkdir -p of its parent). */
int vx_journal_create_dir(const char *path, vx_err *err);

/* Open (creating when absent) the journal at path for the base identified by its index
 * sha256 and model name. Sets WAL mode and synchronous=FULL; creates or migrates the
 * schema explicitly; refuses a newer schema, a database that is not an lql journal, and a
 * journal recorded for another base (naming both models and hashes). The path ":memory:"
 * opens a private in-memory journal that lives as long as the handle. On failure *out is
 * NULL and nothing was changed. */
int vx_journal_open(const char *path, const char *base_sha256, const char *base_model,
                    vx_journal **out, vx_err *err);
void vx_journal_close(vx_journal *j);
const char *vx_journal_path(const vx_journal *j);

/* What a recording statement did. */
typedef struct vx_record_info {
    int64_t history_n;        /* the statement's history number */
    int64_t patch_id;         /* the patch its ops joined */
    int auto_started;         /* 1: an anonymous patch was opened for it */
    char patch_name[128];
} vx_record_info;

/* Record one edit statement (its text and its n ops) as one transaction: the ops join the
 * recording patch, opening an anonymous one first when none is recording. Vectors are
 * stored as little-endian f32 BLOBs. All or nothing: on failure (disk full, read-only,
 * corrupt) nothing of the statement is visible and the session state is unchanged.
 * On a handle made strict, the edit was computed from the journal as this handle last saw
 * it: when another session has committed since, VX_ESTALE and nothing is recorded (the
 * caller replays and computes again). */
int vx_journal_record(vx_journal *j, const char *text, const vx_op *ops, size_t n,
                      vx_record_info *info, vx_err *err);

/* BEGIN PATCH name: an anonymous recording patch is renamed and kept (its ops taken
 * over, *taken_over their count); otherwise a new empty patch starts recording. A name
 * already used by an applied patch is refused. */
int vx_journal_begin_patch(vx_journal *j, const char *name, int64_t *taken_over,
                           vx_err *err);
/* The recording patch's id (0 when none) and name (NULL when none). */
int64_t vx_journal_recording(const vx_journal *j);
const char *vx_journal_recording_name(const vx_journal *j);
/* Stop recording (after SAVE PATCH); the next edit opens a new anonymous patch. */
void vx_journal_stop_recording(vx_journal *j);

typedef struct vx_patch_info {
    int64_t id;
    char *name, *description, *author, *tags_json, *created, *source;
    int anonymous, applied, recording;
    /* counts of active ops (statement not undone) by kind */
    int64_t n_ops, n_insert, n_update, n_delete, n_knn;
} vx_patch_info;

/* Every patch, in id order. */
int vx_journal_patches(vx_journal *j, vx_patch_info **out, size_t *n, vx_err *err);
void vx_patch_infos_free(vx_patch_info *p, size_t n);
/* The applied patch named name (the latest when several), or VX_EMISSING naming it. */
int vx_journal_find_patch(vx_journal *j, const char *name, int64_t *id, vx_err *err);
/* The active ops of one patch (statements not undone), in seq order. */
int vx_journal_patch_ops(vx_journal *j, int64_t patch_id, vx_op **ops, size_t *n,
                         vx_err *err);

/* Header fields of an imported patch (all may be NULL). */
typedef struct vx_patch_meta {
    const char *name, *description, *author, *tags_json, *source;
} vx_patch_meta;

/* APPLY PATCH: import ops as a new applied patch in one transaction; one history entry
 * (action "apply") so UNDO removes it again. *patch_id / *history_n may be NULL. */
int vx_journal_import(vx_journal *j, const char *text, const vx_patch_meta *meta,
                      const vx_op *ops, size_t n, int64_t *patch_id, int64_t *history_n,
                      vx_err *err);
/* REMOVE PATCH name: the latest applied patch of that name stops applying (history action
 * "remove"; UNDO re-applies it). Ends recording when it was the recording patch. */
int vx_journal_remove_patch(vx_journal *j, const char *text, const char *name,
                            int64_t *patch_id, vx_err *err);

/* UNDO: mark the latest active history entry undone (rows are kept, never deleted).
 * *undone receives its number, or 0 when there was nothing to undo. */
int vx_journal_undo(vx_journal *j, int64_t *undone, vx_err *err);
/* REDO: re-activate the earliest undone entry that comes after every active one; 0 when
 * there is none. */
int vx_journal_redo(vx_journal *j, int64_t *redone, vx_err *err);
/* ROLLBACK TO n: every active entry after n becomes undone (n = 0: back to the base);
 * *count receives how many. An n past the last entry is refused by name. */
int vx_journal_rollback(vx_journal *j, int64_t n, int64_t *count, vx_err *err);

typedef struct vx_history_entry {
    int64_t n;
    char *text, *action, *created, *patch_name;
    int64_t patch_id;
    int undone;
    int64_t n_ops, first_seq, last_seq;  /* 0 / 0 / 0 when the statement has no ops */
} vx_history_entry;

/* Every history entry, in order. */
int vx_journal_history(vx_journal *j, vx_history_entry **out, size_t *n, vx_err *err);
void vx_history_free(vx_history_entry *h, size_t n);

/* The effective journal: every active op (statement not undone, patch applied) in seq
 * order — what a replay applies on top of the base. */
int vx_journal_active_ops(vx_journal *j, vx_op **ops, size_t *n, vx_err *err);
/* A counter that changes whenever the effective journal may have changed (this handle's
 * writes), so callers can cache the replayed overlay. */
uint64_t vx_journal_generation(const vx_journal *j);
/* 1 when another connection (another lql session) committed to the journal since this
 * handle last asked, 0 when not, -1 on error. This handle's own commits do
 * not count: SQLite's PRAGMA data_version. */
int vx_journal_moved(vx_journal *j, vx_err *err);
/* From now on vx_journal_record refuses (VX_ESTALE) when another session has committed
 * since this handle last asked vx_journal_moved, or, opened over history and never asked,
 * at all: for callers whose edits are computed from a replay of the journal. */
void vx_journal_strict(vx_journal *j);

/* ---------------------------------------------------------------- .vlp patch files */

/* A .vlp file: JSON {version: 1, base_model, base_checksum?, created_at, description?,
 * author?, tags: [..], operations: [{op: "insert"|"update"|"delete"|"insert_knn"|
 * "delete_knn", ...}]}, interchangeable with the reference. Vectors travel as
 * gate/up/down/key_vector_b64 (base64 of little-endian f32); lql's low-rank inserts have no
 * feature and add u/v/key_vector_b64 with u_shape / v_shape / key_shape. */
typedef struct vx_patch {
    int version;
    char *base_model, *base_checksum, *created_at, *description, *author;
    char **tags;
    size_t ntags;
    vx_op *ops;
    size_t nops;
} vx_patch;

/* Parse and validate .vlp text; where names the source in errors. hidden > 0 checks every
 * feature vector holds exactly hidden floats. Refuses precisely: bad JSON, a missing or
 * mistyped field, an unknown op, bad base64, a wrong vector length. */
int vx_patch_parse(const char *text, size_t len, const char *where, int hidden, vx_patch *out,
                   vx_err *err);
int vx_patch_read(const char *path, int hidden, vx_patch *out, vx_err *err);
/* Serialise to malloc'd JSON text (pretty, stable key order). */
char *vx_patch_to_json(const vx_patch *p, vx_err *err);
/* Write atomically (temporary sibling, fsync, link into place): an existing path is never
 * replaced ("patch: cannot create 'p': File exists"). */
int vx_patch_write(const char *path, const vx_patch *p, vx_err *err);
void vx_patch_free(vx_patch *p);

/* Base64 (RFC 4648, with padding). encode returns malloc'd text; decode returns malloc'd
 * bytes and refuses characters outside the alphabet, bad padding and bad lengths. */
char *vx_base64_encode(const void *data, size_t n);
int vx_base64_decode(const char *text, size_t len, uint8_t **out, size_t *outn, vx_err *err);

/* n floats to / from little-endian bytes (4·n), whatever the host order. */
void vx_f32_store_le(uint8_t *dst, const float *src, size_t n);
void vx_f32_load_le(float *dst, const uint8_t *src, size_t n);

/* UTC now as "2026-11-29T13:45:00Z". */
void vx_utc_now(char buf[32]);

#endif
