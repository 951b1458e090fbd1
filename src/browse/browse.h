/*
 * browse.h — the browse layer's public interface: reading a container as a graph of
 * FFN features without running attention, and observing a forward pass.
 *
 *   - down-meta (DMET): per feature, the tokens its down column writes most strongly
 *     (computed at encode by brw_encode_finish, read back by brw_dmet_*);
 *   - gate KNN: per layer, the features whose gate row has the largest |gate·q|;
 *   - walk / describe / select / show / stats: the browse statements as library calls
 *     returning plain structs (no lql types, nothing printed);
 *   - trace / explain: logit lens and feature attributions from engine observers.
 *
 * The "gate" of a feature is the row that decides whether it fires: ffn.gate_proj for a
 * gated FFN, ffn.up_proj (GPT-2's fc row) for a plain MLP, and the experts' gate rows for
 * MoE layers, numbered expert-major (e · expert_intermediate + f).
 *
 * Ownership: a brw_model borrows its vx_container (which must outlive it). Result structs
 * are owned by the caller and released with their *_free function. Errors: -1 and a
 * lower-case vx_err message; nothing here prints.
 */
#ifndef LQL_BROWSE_H
#define LQL_BROWSE_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "vindex.h"

/* ---------------------------------------------------------------- down-meta */

#define BRW_DMET_MAGIC 0x444D4554u    /* "DMET" read as a big-endian word */
#define BRW_DMET_MAGIC_LIT 0x54454D44u /* the literal bytes "DMET" read LE */
#define BRW_DOWN_TOP_K 10

typedef struct brw_dmet brw_dmet;

#define BRW_DMET_K_MAX 64      /* larger top_k in a file is refused */

/* One feature's metadata: top token id and its logit (c_score), then k (id, logit)
 * pairs by descending logit. present is 0 for an all-zero record (no metadata). */
typedef struct brw_meta {
    int present;
    int32_t top_id;
    float c_score;
    int k;
    int32_t ids[BRW_DMET_K_MAX];
    float logits[BRW_DMET_K_MAX];
} brw_meta;

/* Parse a DMET image (copied; the caller keeps buf). Accepts the magic 0x444D4554 as
 * written LE and the literal "DMET" bytes. Hostile sizes are refused before any read. */
int brw_dmet_parse(const void *buf, size_t n, brw_dmet **out, vx_err *err);
/* Map and parse a DMET file. */
int brw_dmet_load(const char *path, brw_dmet **out, vx_err *err);
void brw_dmet_free(brw_dmet *d);
int brw_dmet_layers(const brw_dmet *d);
int brw_dmet_top_k(const brw_dmet *d);
int64_t brw_dmet_count(const brw_dmet *d, int layer);     /* -1 past the end */
/* The record of (layer, feature); 0 and *out filled, or -1 when out of range. */
int brw_dmet_get(const brw_dmet *d, int layer, int64_t feature, brw_meta *out);
/* Every present record's token ids below vocab: 0, or -1 naming the first that is not
 * (a hostile file's id would otherwise show as an empty token, never as an error). */
int brw_dmet_check_ids(const brw_dmet *d, int32_t vocab, vx_err *err);

/* Compute down-meta for every layer of the container in tmpdir and write
 * browse/down_meta.bin; record index.browse {down_meta, down_top_k, layer_bands,
 * band_rule}. ctx is NULL or a const vx_encode_opts * whose layer_lo/layer_hi (when both
 * >= 0) override the knowledge band; without them, index.encoder.layer_band (recorded by
 * the encoder from the same options) does; its progress, when set, hears stage
 * "down-meta" in features screened. Matches vx_encode_opts.finish. */
int brw_encode_finish(void *ctx, const char *tmpdir, cJSON *index, vx_err *err);
/* brw_encode_finish without down-meta (`vindex encode --no-down-meta`): the tokenizer
 * check and index.browse's layer bands alone; browse then computes the down-meta of the
 * features a statement names when asked (brw_meta_prepare). */
int brw_encode_finish_bands(void *ctx, const char *tmpdir, cJSON *index, vx_err *err);
/* COMPILE's down-meta for the container staged in dir, written to path (no metadata
 * overrides: the caller applies those): the base's records old are kept but for the
 * features whose down column ov changes (a replaced column; every column of a layer, or of
 * one expert, under a low-rank update), which are computed from dir's weights as at
 * encode, and but for the layers complete marks 0 (complete NULL: every layer is the
 * base's), computed whole. A base not of dir's layers, feature counts and top_k (or NULL:
 * none known) is computed again in full. Progress as brw_encode_finish's. */
int brw_downmeta_compile(const char *dir, const char *path, const brw_dmet *old,
                         const uint8_t *complete, const eng_overlay *ov,
                         vx_progress_fn progress, void *progress_ctx, vx_err *err);
/* The screen brw_encode_finish runs for a hidden width on this CPU, for benchmarks' labels:
 * "int8 (AMX-INT8)", "int8 (AVX512-VNNI)", "int8 (AVX2)", "bf16 (AVX512-BF16)" or "f32 (eng_matmul_rows)". */
const char *brw_downmeta_screen(int hidden);

/* The bands for a depth: syntax = first floor(L/4) layers (at least 1), output = last
 * max(1, L/5) layers, knowledge = the middle; with lo/hi >= 0, knowledge = [lo, hi] and the
 * others take what lies before and after it. band[b][0..1] inclusive, -1 -1 if empty. */
void brw_bands_for_depth(int layers, int lo, int hi, int band[3][2]);
extern const char *const brw_band_rule;

/* ---------------------------------------------------------------- the browse model */

enum { BRW_SYNTAX = 0, BRW_KNOWLEDGE = 1, BRW_OUTPUT = 2 };

typedef struct brw_model brw_model;

/* Open browse over c: embedding, per-layer gate rows, tokenizer snapshot, down-meta and
 * bands from index.browse (derived from depth when absent), labels when present. */
int brw_open(vx_container *c, brw_model **out, vx_err *err);
/* brw_open with a tokenizer the caller already loaded (borrowed: it must outlive the
 * model), so a session holds one tokenizer for engine, browse and lql; NULL loads one. */
int brw_open_tok(vx_container *c, const eng_tokenizer *tok, brw_model **out, vx_err *err);
void brw_close(brw_model *m);

int brw_layers(const brw_model *m);
int64_t brw_features(const brw_model *m, int layer);
int brw_hidden(const brw_model *m);
int brw_vocab(const brw_model *m);
/* The features of routed expert `expert` of a MoE layer: [first, first + rows) of the
 * layer's expert-major numbering; -1 when the layer has no such expert. */
int brw_expert_span(const brw_model *m, int layer, int expert, int64_t *first, int64_t *rows);
/* The stored down column of feature f into col [hidden] as f32 (a block codec's blocks
 * decoded); -1 when its part has no down_proj or (col not NULL) its dtype is neither
 * f32/f16/bf16 nor a block codec. col NULL: only checks that the column exists. */
int brw_down_column(const brw_model *m, int layer, int64_t f, float *col);
/* The token a column writes most strongly, as the encoder's down-meta ranks it: argmax
 * over the vocabulary of E · col (E the unscaled embedding) into *id and *score; -1 when
 * the embedding has no f32 view (col NULL: only that check). */
int brw_top_token(const brw_model *m, const float *col, int32_t *id, float *score);
float brw_embed_scale(const brw_model *m);
const eng_tokenizer *brw_tokenizer(const brw_model *m);
/* Where a feature's down-meta comes from: BRW_META_STORED (browse/down_meta.bin),
 * BRW_META_ON_DEMAND (the container stores none; computed for the features a statement
 * names, brw_meta_prepare) or BRW_META_NONE (brw_meta_refuse says why). */
enum { BRW_META_NONE, BRW_META_STORED, BRW_META_ON_DEMAND };
int brw_meta_source(const brw_model *m);
/* -1 with err saying why the container has no down-meta to read (BRW_META_NONE). */
int brw_meta_refuse(const brw_model *m, vx_err *err);
/* With BRW_META_ON_DEMAND: compute the down-meta of the n features (layer[i], feature[i])
 * not computed yet (out-of-range ones are skipped), by the exact pass that defines the
 * stored records, so brw_feature_meta then gives what down_meta.bin would; vocab · hidden
 * multiply-adds a feature, on the engine's pool. A layer the list names a third or more of
 * is computed whole by brw_meta_prepare_layers instead (cheaper, the same records).
 * Cancellable (vx_cancel_flag): what was not finished stays uncomputed. Otherwise nothing
 * to do. */
int brw_meta_prepare(const brw_model *m, const int *layer, const int64_t *feature, size_t n,
                     vx_err *err);
/* With BRW_META_ON_DEMAND: every feature's down-meta of the n layers listed (those not
 * complete yet; out-of-range ones skipped), by the encode hook's screened pass (its cost
 * per layer, ≈ 1–2 cpu-s at 1.1B); cancellable (vx_cancel_flag). Otherwise nothing. */
int brw_meta_prepare_layers(const brw_model *m, const int *layers, int n, vx_err *err);
/* With BRW_META_ON_DEMAND, the base records COMPILE can carry (brw_downmeta_compile):
 * every layer whose records this model has computed or its down-meta cache holds (read
 * now; nothing is computed), (*complete)[l] 1 for those (malloc'd, one byte a layer of m;
 * the caller frees both); *out and *complete NULL when there is none, or when the model's
 * profile binds a derived representation (its records are not the checkpoint's). */
int brw_meta_known(const brw_model *m, brw_dmet **out, uint8_t **complete, vx_err *err);
/* What on-demand down-meta has done for the model so far (all zero without it). */
typedef struct brw_od_stats {
    uint64_t computed;        /* features computed */
    double seconds;           /* the time that took */
    uint64_t cached;          /* features read from the down-meta cache instead */
    char cache[4096];         /* the cache's path; "" without one (cache and why both ""
                               * until the first computation looks for it) */
    char why[VX_ERR_MAX + 64];/* why there is no cache ("none (LQL_NO_CACHE=1)"), or what
                               * went wrong and that it is not used / not written; "" while
                               * it works */
    unsigned events;          /* problems so far (the cache's, or a record that could not
                               * be computed): a new one is said once */
} brw_od_stats;
void brw_meta_stats(const brw_model *m, brw_od_stats *out);
/* band[b] = {lo, hi} inclusive (or -1 -1); the band of a layer (-1 if none). */
void brw_bands(const brw_model *m, int band[3][2]);
int brw_band_of(const brw_model *m, int layer);
const char *brw_band_name(int band);                  /* "syntax" "knowledge" "output" */
/* Readable text of a token id: the decoded piece (leading space kept), "" if empty; the
 * vocabulary piece instead where the decoded text would hide the token (U+FFFD, a NUL,
 * whitespace alone). The string is owned by m. */
const char *brw_token_text(const brw_model *m, int32_t id);
/* Does the token decode to whitespace alone (brw_token_text then shows its piece)? */
int brw_token_blank(const brw_model *m, int32_t id);
/* s with surrounding whitespace removed, into buf (truncated to n - 1 bytes). */
void brw_trim(const char *s, char *buf, size_t n);
/* A label for (layer, feature), NULL when none: the relation of the insert that wrote the
 * feature (ov, may be NULL) first, then the probe label of feature_labels.json ("L26_F9515"
 * or "26:9515" keys), else the cluster label (relation_clusters.json labels[c] for the c
 * that feature_clusters.jsonl gives the feature). */
const char *brw_label(const brw_model *m, const eng_overlay *ov, int layer, int64_t feature);
/* The files a container may carry for browse's labels, which no index field names (so a
 * COMPACT keeps them as capability files): feature_labels.json, relation_clusters.json,
 * feature_clusters.jsonl; NULL-terminated. */
extern const char *const brw_label_files[];
/* Can any feature have a label: the container's labels or clusters, or an insert's relation
 * in ov? */
int brw_has_labels(const brw_model *m, const eng_overlay *ov);
/* The feature labels a container compiled from c with ov should hold: c's
 * feature_labels.json with every live inserted feature's relation set ("L{l}_F{f}"), in
 * *out (the caller deletes it); *out NULL when ov names no relation (c's file, if any, is
 * then carried as it is). */
int brw_labels_compiled(const vx_container *c, const eng_overlay *ov, cJSON **out,
                        vx_err *err);

/* ---------------------------------------------------------------- overlay */

/* Browse reads the mutation overlay as the engine's type (engine.h eng_overlay): edited
 * gate rows are rescored, tombstones dropped, metadata overrides shown. NULL: the base. */

/* ---------------------------------------------------------------- gate KNN */

typedef struct brw_hit {
    int layer;
    int64_t feature;
    float score;            /* the ranked value, sign kept: gate·q (HYBRID, PURE) or the
                             * feature's activation act(gate·q)·(up·q) (DENSE; an expert's
                             * biases and clamped SwiGLU as the engine applies them) */
    float gate;             /* gate·q (+ an expert's gate bias; up·q + bias for a plain
                             * MLP's DENSE), sign kept */
} brw_hit;

/* brw_meta_prepare of gate-KNN hits: n_layers runs of counts[i] hits, stride apart. */
int brw_meta_prepare_hits(const brw_model *m, const brw_hit *hits, const int *counts,
                          int n_layers, int stride, vx_err *err);

/* How a scan ranks features (WALK … MODE):
 *   HYBRID — by |gate·q|, sign kept (the default; what the reference's walk ranks by);
 *   PURE   — by the signed gate·q, largest first: the features q excites;
 *   DENSE  — by |a| with a the feature's activation for input q without attention:
 *            act(gate·q)·(up·q) gated, act(up·q + b) plain MLP, an expert's own a for
 *            MoE (router weight not applied); reads the up rows too. */
typedef enum brw_walk_mode { BRW_HYBRID = 0, BRW_PURE = 1, BRW_DENSE = 2 } brw_walk_mode;
const char *brw_walk_mode_name(brw_walk_mode mode);   /* "hybrid" "pure" "dense" */

/* For each of n_layers layers, the top-k features by |gate·q| (sorted by |score|
 * descending, ties by feature ascending). hits receives n_layers × k entries, row-major;
 * counts[i] the number found for layers[i] (< k only when the layer has fewer features).
 * One multi-threaded pass over the gate rows in place (eng_threads()). With ov, features
 * with a replacement gate row are rescored with it and tombstones are dropped. */
int brw_gate_knn(const brw_model *m, const int *layers, int n_layers, const float *q, int k,
                 const eng_overlay *ov, brw_hit *hits, int *counts, vx_err *err);
/* brw_gate_knn ranking by mode (sorted best first by that mode's key, ties by feature
 * ascending); with an overlay, replacement gate and up rows are both used. */
int brw_gate_knn_mode(const brw_model *m, const int *layers, int n_layers, const float *q,
                      int k, brw_walk_mode mode, const eng_overlay *ov, brw_hit *hits,
                      int *counts, vx_err *err);

/* ---------------------------------------------------------------- queries */

/* WALK's query: the embedding row of the prompt's last token (tokenized with specials)
 * times the embedding scale. q is [hidden]; *tok the token id. */
int brw_walk_query(const brw_model *m, const char *prompt, float *q, int32_t *tok,
                   vx_err *err);
/* DESCRIBE / SELECT / NEAREST's query: mean of the entity's token embeddings (no
 * specials) times the scale. Refuses an entity with no tokens. */
int brw_entity_query(const brw_model *m, const char *entity, float *q, vx_err *err);

/* ---------------------------------------------------------------- walk */

typedef struct brw_walk_opts {
    int top;                /* features per layer (default 10) */
    int layer_lo, layer_hi; /* inclusive; -1 -1 = all layers */
    const eng_overlay *ov;
    brw_walk_mode mode;     /* BRW_HYBRID (0) by default */
} brw_walk_opts;

typedef struct brw_walk {
    int32_t token;          /* the query token */
    int n_layers, top;
    int *layers;            /* [n_layers] */
    int *counts;            /* [n_layers] */
    brw_hit *hits;          /* [n_layers × top] */
    uint64_t bytes_scanned; /* gate rows, plus up rows and biases in DENSE mode */
    brw_walk_mode mode;
} brw_walk;

int brw_walk_run(const brw_model *m, const char *prompt, const brw_walk_opts *o,
                 brw_walk *out, vx_err *err);
void brw_walk_free(brw_walk *w);

/* The effective metadata of a feature (overlay first, then base): 0 when present. With
 * BRW_META_ON_DEMAND a base record not prepared yet is computed here, one feature at a
 * time (a failure is said through brw_od_stats.why); readers of many features prepare
 * them first (brw_meta_prepare, brw_meta_prepare_layers). */
int brw_feature_meta(const brw_model *m, const eng_overlay *ov, int layer, int64_t feature,
                     brw_meta *out);

/* ---------------------------------------------------------------- describe */

enum { BRW_DESCRIBE_BRIEF = 0, BRW_DESCRIBE_VERBOSE = 1, BRW_DESCRIBE_RAW = 2 };

typedef struct brw_describe_opts {
    int band;               /* -1: all layers, else BRW_SYNTAX… */
    int at_layer;           /* >= 0: one layer (with a band: only if the layer is in it) */
    int relations_only;     /* keep labelled edges only */
    int mode;               /* BRW_DESCRIBE_* (caps per band: 10 / 30 / 30, output 5 in brief) */
    const eng_overlay *ov;
} brw_describe_opts;

#define BRW_ALSO_MAX 5
typedef struct brw_edge {
    char *target;           /* readable target token (trimmed) */
    char *relation;         /* label or NULL */
    float gate;             /* max gate over the merged hits */
    int layer;              /* best hit */
    int64_t feature;
    int band;
    int count;              /* merged hits */
    int layer_min, layer_max;
    int n_also;
    char *also[BRW_ALSO_MAX];
} brw_edge;

typedef struct brw_describe {
    size_t n_edges;
    brw_edge *edges;        /* sorted by band, then gate descending */
    size_t total_edges;     /* before the per-band caps */
    float max_gate;
    const char *signal;     /* "clean" (>= 20), "moderate" (>= 10), "diffuse" */
} brw_describe;

int brw_describe_run(const brw_model *m, const char *entity, const brw_describe_opts *o,
                     brw_describe *out, vx_err *err);
void brw_describe_free(brw_describe *d);

/* ---------------------------------------------------------------- select */

typedef enum brw_field {
    BRW_F_LAYER, BRW_F_FEATURE, BRW_F_TOKEN, BRW_F_ENTITY, BRW_F_RELATION,
    BRW_F_SCORE, BRW_F_CONFIDENCE, BRW_F_ALSO, BRW_F_COUNT, BRW_F_BAND, BRW_F_TARGET,
    BRW_F_COUNT_
} brw_field;
typedef enum brw_op { BRW_EQ, BRW_NE, BRW_GT, BRW_LT, BRW_GE, BRW_LE, BRW_LIKE, BRW_IN } brw_op;
typedef enum brw_from { BRW_EDGES, BRW_FEATURES, BRW_ENTITIES } brw_from;

/* A literal: a number or a string (is_str). */
typedef struct brw_value {
    int is_str;
    double num;
    const char *str;
} brw_value;

typedef struct brw_cond {
    brw_field field;
    brw_op op;
    const brw_value *vals;  /* 1 value, or n_vals for IN */
    size_t n_vals;
} brw_cond;

/* Does some token of m's vocabulary read text — its trimmed text equal to trimmed text, as a
 * condition compares them? A feature's token is one token: no other text can equal it. */
int brw_vocab_reads(const brw_model *m, const char *text);
/* Field name → a column of the table (SELECT's list, ORDER BY); -1 with an error naming
 * the field and the table's fields when unknown. */
int brw_field_parse(brw_from from, const char *name, brw_field *out, vx_err *err);
/* The same for a condition's field: ENTITIES also takes layer and feature, which pick the
 * features counted. */
int brw_cond_field_parse(brw_from from, const char *name, brw_field *out, vx_err *err);
const char *brw_field_name(brw_field f);
/* The default columns of a table, in order. */
size_t brw_default_fields(brw_from from, brw_field *out, size_t max);

typedef struct brw_select_opts {
    const brw_cond *conds; size_t n_conds;   /* all ANDed */
    const char *nearest;                     /* NEAREST TO, or NULL */
    int nearest_layer;
    int has_order; brw_field order; int desc;
    int64_t limit;                           /* < 0: the table's default */
    const eng_overlay *ov;
} brw_select_opts;

/* One row of any table; which fields are meaningful depends on the table. */
typedef struct brw_row {
    int layer;
    int64_t feature;
    char *token;            /* FEATURES/EDGES: top token (target); ENTITIES: the entity */
    char *entity;           /* EDGES walked from an entity: that entity; ENTITIES: the
                             * entity (= token); NULL otherwise */
    char *relation;
    double score;           /* EDGES from an entity / NEAREST: gate; else c_score */
    double confidence;      /* c_score */
    int no_meta;            /* a walked feature without down-meta: no token, no confidence */
    char *also;             /* other top tokens, ", "-joined */
    int64_t count;          /* ENTITIES / SHOW RELATIONS: features */
    int band;
    int layer_max;          /* SHOW RELATIONS: last layer seen (layer = first) */
} brw_row;

typedef struct brw_rows {
    size_t n;
    brw_row *rows;
    size_t total;           /* rows that matched before the limit cut them (>= n) */
} brw_rows;

/* The checks brw_select runs on o's conditions before any row: fields of the table,
 * values of the field's type, relation labels present, and layer / feature indices that
 * exist (`layer 99 is out of range (the model has 4 layers: 0-3)`). For callers that
 * evaluate conditions themselves (the edit statements' layer/feature-only selection). */
int brw_select_check(const brw_model *m, brw_from from, const brw_select_opts *o,
                     vx_err *err);
int brw_select(const brw_model *m, brw_from from, const brw_select_opts *o, brw_rows *out,
               vx_err *err);
void brw_rows_free(brw_rows *r);

/* ---------------------------------------------------------------- show / stats */

/* SHOW FEATURES layer: rows in feature order (same fields as SELECT FROM FEATURES); o->limit
 * < 0 is the default, 20. */
int brw_show_features(const brw_model *m, int layer, const brw_select_opts *o,
                      brw_rows *out, vx_err *err);
/* SHOW ENTITIES: capitalised alphabetic top tokens of >= 3 letters (not function words), counted (features)
 * with their max c_score, sorted by features desc; layer < 0 for all layers; at most limit
 * rows (< 0: 50). */
int brw_show_entities(const brw_model *m, int layer, int64_t limit, const eng_overlay *ov,
                      brw_rows *out, vx_err *err);
/* SHOW RELATIONS: labels (relation, count) of every layer (or one) when the container or
 * the overlay's inserts have them (brw_has_labels); otherwise the
 * top output tokens of the knowledge band (or one layer) among the features whose c_score
 * is in the top 10% of that range (*min_score receives the cut, a relative rule so it
 * holds at any model scale): token, count, max score, first/last layer; also = up to 3
 * example features ("L2 F17"); at most limit rows (< 0: 50), by features desc. */
int brw_show_relations(const brw_model *m, int layer, int64_t limit, const eng_overlay *ov,
                       brw_rows *out, int *labelled, float *min_score, vx_err *err);

typedef struct brw_layer_info {
    int layer;
    int64_t features, with_meta;
    int32_t top_id;         /* most frequent top token (-1 if none) */
    int64_t top_count;
    int band;
    uint64_t gate_bytes;
    const char *gate_dtype;
} brw_layer_info;

int brw_show_layers(const brw_model *m, int lo, int hi, const eng_overlay *ov,
                    brw_layer_info **out, size_t *n, vx_err *err);

typedef struct brw_stats {
    int layers, hidden, vocab;
    int64_t features, with_meta;
    int64_t band_features[3];
    int band[3][2];
    uint64_t gate_bytes, container_bytes;
    const char *gate_dtype;
    int labelled;           /* feature labels present */
    const char *bands_note; /* why index.browse.layer_bands was ignored (bands then follow
                             * depth), or "" */
} brw_stats;

int brw_stats_get(const brw_model *m, brw_stats *out, vx_err *err);

/* ---------------------------------------------------------------- trace */

enum { BRW_PUSH_LOGIT = 0 };

typedef struct brw_trace_opts {
    const char *for_token;  /* FOR "t", or NULL */
    int by_id;              /* FOR n: track token id for_id (for_token NULL) */
    int32_t for_id;
    int layer_lo, layer_hi; /* rows kept: -1 -1 all (the embedding row is layer -1) */
    int all_positions;      /* POSITIONS ALL: rows for every position */
    int keep_all;           /* record every position's states (SAVE needs them); without it
                             * and without all_positions only the last one is kept */
} brw_trace_opts;

/* One lens row: position, layer (-1 = embedding), lens top-1, and with FOR the token's
 * rank/probability and the change in its lens logit due to attention and the FFN. */
typedef struct brw_trace_row {
    int pos, layer;
    int32_t top_id;
    float top_prob;
    float attn_norm, ffn_norm, resid_norm;
    int rank;
    float prob;
    float attn_push, ffn_push;
} brw_trace_row;

typedef struct brw_trace {
    int n_tokens, n_layers, hidden;
    int32_t *ids;           /* [n_tokens] prompt ids */
    int32_t target;         /* FOR token id or -1 */
    int for_pieces;         /* FOR "t": how many tokens " t" spells (the first is tracked) */
    int first_pos;          /* states cover positions first_pos .. n_tokens - 1 */
    /* residual after the embedding / each layer and the two deltas, per recorded position:
     * [n_tokens - first_pos][n_layers + 1][3][hidden] (row 0 = embedding: resid, 0, 0) */
    float *states;
    size_t n_rows;
    brw_trace_row *rows;
} brw_trace;

/* Run the prompt with observers (the model's overlay applies) and build the lens rows. */
int brw_trace_run(eng_model *em, const char *prompt, const brw_trace_opts *o,
                  brw_trace *out, vx_err *err);
/* Recompute the lens rows of a saved trace against em (FROM "file"). */
int brw_trace_load(eng_model *em, const char *path, const brw_trace_opts *o,
                   brw_trace *out, vx_err *err);
/* Write the trace file (format in docs/lql/BROWSE.md), created exclusively: an existing
 * path is refused, never overwritten; refuses a trace that recorded only the last
 * position. */
int brw_trace_save(const brw_trace *t, const char *path, vx_err *err);
void brw_trace_free(brw_trace *t);

/* ---------------------------------------------------------------- explain infer */

typedef struct brw_fired {
    int64_t feature;
    float act;              /* activation on the last position */
    int32_t top_id;         /* down-meta top token, -1 when none */
    float c_score;
} brw_fired;

typedef struct brw_explain_layer {
    int layer;
    int n_fired;
    brw_fired *fired;       /* by |act| descending */
    int32_t attended_id;    /* most-attended token (mean over heads), -1 without attention */
    int attended_pos;
    float attended_weight;
    int32_t lens_id;        /* lens top-1 after the layer */
    float lens_prob;
} brw_explain_layer;

typedef struct brw_explain {
    int n_tokens;
    int32_t *ids;
    int n_top;
    int32_t *top_ids;       /* next-token prediction */
    float *top_probs;
    int n_layers;
    brw_explain_layer *layers;
} brw_explain;

typedef struct brw_explain_opts {
    int top;                /* predictions and features per layer */
    int attention;          /* WITH ATTENTION */
    int layer_lo, layer_hi; /* -1 -1: all */
    int band;               /* -1 or a band filter */
} brw_explain_opts;

/* Run ids[0..n) (already tokenized, specials applied) and collect per layer the
 * features that fired on the last position; bm supplies the down-meta and bands (may be
 * NULL). */
int brw_explain_run(eng_model *em, const brw_model *bm, const int32_t *ids, int n,
                    const brw_explain_opts *o, brw_explain *out, vx_err *err);
void brw_explain_free(brw_explain *e);

#endif
