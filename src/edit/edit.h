/*
 * edit.h — the mutation layer's one door (docs/lql/MUTATION.md). An ed_model is the
 * effective model of a binding: the base container (never written), its journal
 * (storage/journal.h, the SQLite store) and the overlay replayed from the journal's active
 * operations (overlay.h). Every call that changes the journal replays it and hands the new
 * overlay to the attach callback, so the caller's executor sees the effective model.
 *
 * Calls: insert (MEMIT, KNN, COMPOSE), delete, update, patches (begin / save / apply /
 * remove), undo, rollback, the KNN store's override, DIFF (diff.c), COMPILE (compile.h)
 * and COMPACT (compact.h). Results are typed structs; errors are returned as ed_err (a
 * vx_err and the part of the request it is about), printed only by the caller. Nothing
 * here knows LQL statements.
 */
#ifndef LQL_EDIT_H
#define LQL_EDIT_H

#include <stddef.h>
#include <stdint.h>

#include "browse.h"
#include "compact.h"
#include "compile.h"
#include "engine.h"
#include "journal.h"
#include "overlay.h"

typedef struct ed_model ed_model;

/* Which part of a request an error is about, so the caller can point at it. */
typedef enum ed_at {
    ED_AT_REQUEST,            /* the request as a whole */
    ED_AT_ENTITY,             /* the entity (its prompt) */
    ED_AT_TARGET,             /* the target */
    ED_AT_LAYER,              /* the layer asked for (or the default one) */
    ED_AT_FILE,               /* the file named */
    ED_AT_OUTPUT,             /* the output named (COMPILE's INTO) */
    ED_AT_CONFLICT,           /* the conflict policy */
} ed_at;

typedef struct ed_err {
    vx_err vx;
    ed_at at;
} ed_err;

/* Called with the overlay after every replay (NULL: nothing active). */
typedef void (*ed_attach_fn)(void *ctx, const eng_overlay *ov);

/* ---------------------------------------------------------------- the effective model */

/* The effective model of c (borrowed; it must outlive the model). journal names the
 * journal file (NULL: its default place beside the container, vx_journal_locate; when
 * there is none, reading still works and the first edit says why). Nothing is opened yet:
 * ed_model_load does that once a browse model is set. */
int ed_model_new(vx_container *c, const char *journal, ed_attach_fn attach, void *ctx,
                 ed_model **out, vx_err *err);
void ed_model_free(ed_model *ed);
/* The browse model geometry, tokenizer and down-meta are read from (borrowed). */
void ed_model_set_browse(ed_model *ed, brw_model *bm);
brw_model *ed_model_browse(const ed_model *ed);
vx_container *ed_model_container(const ed_model *ed);
/* Is there a journal to load: one named, or one at the default place? */
int ed_model_has_journal(const ed_model *ed);
/* Open that journal and replay it (needs the browse model); nothing when there is none. */
int ed_model_load(ed_model *ed, vx_err *err);

/* Open the journal. create 0 (reading): a journal that does not exist stays absent (no
 * edits) so a read-only session creates nothing; create 1 (the first edit) creates it,
 * and its directory when it is the default place. */
int ed_journal_open(ed_model *ed, int create, vx_err *err);
vx_journal *ed_journal(const ed_model *ed);   /* NULL: not opened / none */
/* The journal's path, or the place it would take, or why there is none. */
const char *ed_journal_where(const ed_model *ed);
const char *ed_journal_place(const ed_model *ed);   /* NULL: no place */

/* The journal's active operations (none while it does not exist). */
int ed_active_ops(const ed_model *ed, vx_op **ops, size_t *n, vx_err *err);
/* Replay the active operations into a fresh overlay and attach it (needs the browse
 * model: every call below that changes the journal replays). */
int ed_refresh(ed_model *ed, vx_err *err);
/* 1 when another session changed the journal since this one last read it (or created the
 * journal this session had none of), so ed_refresh must run before the overlay is used;
 * 0 when the overlay is current; -1 on error. */
int ed_stale(ed_model *ed, vx_err *err);
/* The replayed overlay, NULL when nothing is active. */
const ed_overlay *ed_current(const ed_model *ed);
/* Its overlay as the executor and browse read it (NULL when nothing is active). */
const eng_overlay *ed_model_overlay(const ed_model *ed);
/* The effective metadata of a feature (the overlay's, else the base's). */
int ed_feature_meta(const ed_model *ed, int layer, int64_t feature, brw_meta *md);
/* Record ops as one statement (text), then replay. */
int ed_record(ed_model *ed, const char *text, const vx_op *ops, size_t n,
              vx_record_info *info, vx_err *err);

/* ---------------------------------------------------------------- delete / update */

typedef struct ed_slot {
    int layer;
    int64_t feature;
} ed_slot;

/* The base metadata of n features computed in one pass where the container stores none
 * (brw_meta_prepare; nothing to do otherwise), before ed_feature_meta reads each. */
int ed_prepare_meta(const ed_model *ed, const ed_slot *sel, size_t n, vx_err *err);

/* Tombstone every slot of sel[0..n) as one statement. */
int ed_delete(ed_model *ed, const char *text, const ed_slot *sel, size_t n,
              vx_record_info *info, vx_err *err);

/* UPDATE's per-feature outcome. */
typedef struct ed_update_row {
    int layer;
    int64_t feature;
    brw_meta before;          /* effective metadata before */
    int32_t top_id;           /* after: -1 none */
    double c_score;
} ed_update_row;

/* Set the metadata of every slot: top token tid (< 0 keeps the current one) and
 * confidence conf (NaN keeps the current one). rows [n] receives what changed. */
int ed_update(ed_model *ed, const char *text, const ed_slot *sel, size_t n, int32_t tid,
              double conf, ed_update_row *rows, vx_record_info *info, vx_err *err);

/* eng_tok_answer_ids, refused when it leaves no token: *out malloc'd, *n ≥ 1. */
int ed_target_ids(const eng_tokenizer *tok, const char *target, int32_t **out, size_t *n,
                  vx_err *err);

/* ---------------------------------------------------------------- insert */

typedef enum ed_insert_mode { ED_MEMIT, ED_KNN, ED_COMPOSE } ed_insert_mode;

typedef struct ed_insert_req {
    const char *text;         /* the statement, as journaled */
    const char *entity, *relation, *target;
    ed_insert_mode mode;
    int layer_given;          /* 0: the mode's default layer */
    int layer;
    double confidence;        /* NaN: the mode's default */
    double alpha;             /* COMPOSE only; NaN: the default */
    int mode_named;           /* the caller named the mode (a multi-token target is then
                               * refused by KNN and COMPOSE rather than cut) */
} ed_insert_req;

/* Where an edit site's statistics came from, when the call computed them. */
typedef struct ed_site_note {
    int layer, expert;        /* expert -1: a dense layer */
    long long positions;
    int seqs;
} ed_site_note;

/* A target token written as a gated feature: its slot, the gate's pre-activation on the
 * prompt, the bound it keeps under on the negatives and how many of them do. */
typedef struct ed_gate_note {
    int feature;
    double z_prompt, z_off;
    long long n_off, n_neg;
} ed_gate_note;

typedef struct ed_insert_res {
    int layer;
    int feature;              /* COMPOSE's slot; -1 for the modes that edit no one feature */
    double p_before, p_after; /* of the whole target */
    int steps;
    size_t n_tokens;          /* target tokens */
    char *prompt;             /* the canonical prompt (malloc'd) */
    vx_record_info info;
    ed_site_note *sites;      /* statistics computed by this call (malloc'd) */
    int n_sites;
    int computed;             /* the update was computed (p_* and steps hold), whether or
                               * not recording it succeeded */
    /* MEMIT on a MoE layer: per target token the experts its key routes to (router order)
     * and their weights; expert[j][top_k] is the edited (top-1) expert, -1 dense */
    int top_k;
    int *experts;             /* [n_tokens × (top_k + 1)] malloc'd, or NULL */
    float *weights;           /* [n_tokens × (top_k + 1)] */
    size_t knn_entries;       /* KNN: entries in the store after the insert */
    double norms[3];          /* COMPOSE: |gate| |up| |down| */
    double d_ref;             /* COMPOSE: the down reference norm */
    double alpha;             /* COMPOSE: the ALPHA used */
    /* MEMIT on a dense gated FFN: each target token written as a gated feature */
    int gated;
    ed_gate_note *gates;      /* [n_tokens] malloc'd when gated */
    char fallback[VX_ERR_MAX + 32]; /* why a gate could not be fitted ("" none): rank-1 instead */
    /* the model already answers the fact above CONFIDENCE (p_before, prompt set): nothing
     * was inserted or journaled */
    int answered;
    double confidence;        /* the mode's CONFIDENCE (set when answered, and by COMPOSE) */
    /* the latest active insert for the same entity and relation, when its target differs
     * (malloc'd), and its history number: both stay active */
    char *earlier;
    long long earlier_history;
} ed_insert_res;

/* Insert a fact through m (the effective model: the current overlay attached). */
int ed_insert(ed_model *ed, eng_model *m, const ed_insert_req *req, ed_insert_res *res,
              ed_err *err);
void ed_insert_res_free(ed_insert_res *res);

/* ---------------------------------------------------------------- the KNN store at inference */

typedef struct ed_knn_hit {
    const ed_knn_entry *entry;   /* NULL: no key above ED_KNN_THRESHOLD */
    double cosine;
} ed_knn_hit;

/* When the store has entries: run ids through m capturing each layer's last-position
 * residual and find the best key of its layer above the threshold. */
int ed_knn_lookup(const ed_model *ed, eng_model *m, const int32_t *ids, size_t n,
                  ed_knn_hit *hit, vx_err *err);

/* The store during generation: ed_knn_gen_hooks sets h's observer, which keeps each layer's
 * last-position residual, and its pick, which replaces each sampled token by the target of
 * the best key above the threshold, as INFER's look-up does for one prediction. Nothing is
 * set when the store is empty. The counts say what happened, for the caller's note. */
typedef struct ed_knn_gen {
    const ed_knn_entry *keys;
    size_t n_keys;
    int layers, hidden;
    float *res;                  /* [layers × hidden] */
    eng_observer obs;
    int steps;                   /* tokens picked */
    int overridden;              /* of them, set by a key */
    int first_step;              /* the first one so set (0-based), -1 when none */
    ed_knn_hit first;
} ed_knn_gen;
int ed_knn_gen_hooks(ed_knn_gen *g, const ed_model *ed, const eng_model *m, eng_gen_hooks *h,
                     vx_err *err);
void ed_knn_gen_free(ed_knn_gen *g);

/* The residual after every layer at the last of ids through m (its overlay attached) into
 * res [layers × hidden]; logits (may be NULL) gets the next-token logits. */
int ed_last_residuals(eng_model *m, const int32_t *ids, size_t n, float *res, float *logits,
                      vx_err *err);

/* ---------------------------------------------------------------- patches, undo, history */

/* BEGIN PATCH: start recording name; prev receives the patch recording before ("" none),
 * *taken the operations taken over from it. */
int ed_begin_patch(ed_model *ed, const char *name, char *prev, size_t nprev, int64_t *taken,
                   vx_err *err);

/* Operations per kind. */
void ed_count_kinds(const vx_op *ops, size_t n, size_t c[VX_OP_KIND_COUNT]);

/* SAVE PATCH: write the recording patch to file (then stop recording); counts per kind. */
int ed_save_patch(ed_model *ed, const char *file, size_t counts[VX_OP_KIND_COUNT],
                  vx_err *err);

typedef struct ed_apply_res {
    char name[256];
    size_t n_ops;
    size_t counts[VX_OP_KIND_COUNT];
    int64_t history_n;
} ed_apply_res;

/* APPLY PATCH: the file's operations checked against the base and the geometry, imported
 * as one patch named by its description (else the file's stem), then replayed. */
int ed_apply_patch(ed_model *ed, const char *file, const char *text, ed_apply_res *res,
                   vx_err *err);
/* REMOVE PATCH. */
int ed_remove_patch(ed_model *ed, const char *text, const char *name, vx_err *err);
/* UNDO: *n the history entry undone (0: nothing); *text (malloc'd, may be NULL) its
 * statement. */
int ed_undo(ed_model *ed, int64_t *n, char **text, vx_err *err);
/* ROLLBACK to history entry n: *count statements undone. */
int ed_rollback(ed_model *ed, int64_t n, int64_t *count, vx_err *err);

/* ---------------------------------------------------------------- diff (diff.c) */

/* One side of a DIFF: CURRENT (the bound base plus the overlay) or a container path (its
 * stored state). */
typedef struct ed_side {
    const char *label;
    vx_container *c;          /* owned when a path was given */
    brw_model *bm;            /* owned when a path was given */
    int owned;
    const eng_overlay *ov;    /* CURRENT's overlay, else NULL */
    const ed_overlay *edit;
} ed_side;

/* path NULL: CURRENT (ed's base and overlay, borrowed; ed needs its browse model). */
int ed_side_open(const ed_model *ed, const char *path, ed_side *d, vx_err *err);
void ed_side_close(ed_side *d);

typedef struct ed_diff_row {
    int layer;
    int64_t feature;
    const char *status;       /* deleted, restored, added, removed, modified */
    brw_meta a, b;
} ed_diff_row;

/* The features whose effective state differs between the sides (layer -1: every layer;
 * relation NULL: any), *out malloc'd. */
int ed_diff_features(const ed_side *A, const ed_side *B, int layer, const char *relation,
                     ed_diff_row **out, size_t *n, vx_err *err);

typedef struct ed_tensor_diff {
    const char *object, *name;    /* the sides' own strings */
    int64_t changed;              /* values that differ */
    double max_abs;
    int has_max;                  /* 0: no value comparison (undecodable, or one side only) */
    const char *status;           /* modified, bytes differ, shape differs, only in a/b */
} ed_tensor_diff;

/* Per-tensor value deltas of the effective states (layer -1: every tensor), *out malloc'd. */
int ed_diff_tensors(const ed_side *A, const ed_side *B, int layer, ed_tensor_diff **out,
                    size_t *n, vx_err *err);

/* The feature differences as vector-free operations on side a, written to file; *written
 * operations, *skipped restored features (which have no vector-free form). */
int ed_diff_patch(const ed_side *A, const ed_side *B, const ed_diff_row *rows, size_t n,
                  const char *file, size_t *written, size_t *skipped, vx_err *err);

/* ---------------------------------------------------------------- the probe gate (gate.c) */

/* One probe of the gate: the top token on each side and the largest differences. */
typedef struct ed_probe_row {
    char *prompt;             /* a copy */
    char top_a[64], top_b[64];
    double logit, lens, walk;
    int null_a, null_b;       /* no piece for the top token */
} ed_probe_row;

/* The gate's settings and findings. bm NULL: no WALK comparison (COMPACT). */
typedef struct ed_gate {
    const brw_model *bm;          /* the source's browse model */
    const eng_overlay *ov;        /* the overlay WALK runs through there (may be NULL); its
                                   * tombstones are dropped by the overlay's WALK only */
    double rel;                   /* tolerance, relative to the logit scale */
    double logit, lens, walk;     /* out: largest differences over the probes */
    double scale;                 /* out: the largest |logit| of the source over the probes */
    char walk_bad[160];           /* out: the first WALK hit that is not explained by a tie */
    char meta_bad[200];           /* out: the first feature whose metadata differs */
    int ran;                      /* out: both sides opened and the probes started */
    ed_probe_row *rows;           /* out: one per probe run (malloc'd, also after a failure) */
    size_t n_rows;
} ed_gate;

/* Run the prompts through m (its overlay attached) and the container at out, under m's
 * profile: INFER logits, TRACE lens of every layer, and with g->bm WALK hits and the
 * down-meta of what g->ov edits; the largest differences go to g. */
int ed_gate_run(eng_model *m, const char *out, const char *const *prompts, int np, ed_gate *g,
                ed_err *err);
void ed_gate_free(ed_gate *g);
/* The gate's tolerance relative to the logit scale, from the dtypes COMPILE rewrote. */
double ed_gate_tolerance(const ed_compile_report *rep, const char **why);

/* ---------------------------------------------------------------- compile (derive.c) */

typedef enum ed_conflict {
    ED_LAST_WINS,             /* replay order decides (the default) */
    ED_CONFLICT_FAIL,         /* two patches on one feature slot: refused */
    ED_HIGHEST_CONFIDENCE,    /* per contested slot, the patch with the highest confidence */
} ed_conflict;

/* An operation ON CONFLICT HIGHEST_CONFIDENCE set aside. */
typedef struct ed_set_aside {
    int layer, feature;
    long long seq;
    double confidence;
    long long win_seq;
    double win_confidence;
} ed_set_aside;

typedef struct ed_compile_res {
    ed_set_aside *aside;      /* malloc'd */
    size_t n_aside;
    ed_counts counts;         /* of the overlay compiled */
    ed_compile_report rep;
    ed_gate gate;
    const char *why;          /* the gate's tolerance, said */
    int probes;
} ed_compile_res;

/* COMPILE the effective model (its overlay must not be empty) into out: the overlay the
 * policy leaves, materialised (compile.h), then gated against the overlay through m with
 * the inserted facts' prompts and three fixed ones; a container that does not answer as
 * the overlay does is removed and refused. */
int ed_compile_current(ed_model *ed, eng_model *m, const char *out, ed_conflict policy,
                       vx_progress_fn progress, void *progress_ctx, ed_compile_res *res, ed_err *err);
void ed_compile_res_free(ed_compile_res *res);

#endif
