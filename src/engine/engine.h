/*
 * engine.h — the reference executor's public interface.
 *
 * A bound model is an op plan derived from a container's system graph (execution
 * surface + explicit per-layer operators) plus borrowed views of its operands in the
 * mmap. No family names exist below this line: everything the plan knows comes from
 * docs/lql/CONTAINER.md's execution surface. A model needing an operator or field value
 * the plan does not implement is refused at bind, naming the operator and layer.
 *
 * Ownership: eng_model borrows its vx_container (which must outlive it); eng_session
 * borrows its eng_model. Errors are returned as -1 with a vx_err, never printed.
 */
#ifndef LQL_ENGINE_H
#define LQL_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include "vindex.h"

/* ---------------------------------------------------------------- tokenizer */

typedef struct eng_tokenizer eng_tokenizer;
/* Every function below takes t == NULL (a container without a tokenizer): encode and
 * decode refuse with VX_EMISSING, the lookups answer NULL, -1 or 0. */

/* Load from a tokenizer.json (and, when config_path is not NULL and exists, its
 * tokenizer_config.json for clean_up_tokenization_spaces / add_bos overrides). */
int eng_tok_load(const char *tokenizer_json, const char *config_path,
                 eng_tokenizer **out, vx_err *err);
/* Load from a directory holding tokenizer.json (a container or a checkpoint). */
int eng_tok_load_dir(const char *dir, eng_tokenizer **out, vx_err *err);
void eng_tok_free(eng_tokenizer *t);

/* Encode UTF-8 text. add_special: apply the post-processor (BOS etc.) as
 * add_special_tokens=True does. *ids is malloc'd; the caller frees it. */
int eng_tok_encode(const eng_tokenizer *t, const char *text, size_t len, int add_special,
                   int32_t **ids, size_t *n, vx_err *err);
/* Decode ids to malloc'd NUL-terminated UTF-8; skip_special drops special tokens. */
int eng_tok_decode(const eng_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                   char **out, vx_err *err);
/* The same with the text's length in *len: a token can decode to U+0000 (byte-level "Ā",
 * "<0x00>"), which the terminator alone would hide. */
int eng_tok_decode_len(const eng_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                       char **out, size_t *len, vx_err *err);
/* The text ids add after earlier, non-empty text (a continuation, a token shown on its own): as
 * eng_tok_decode_len, but what a decoder does only at the start of the whole text is not
 * done — Strip's leading characters once the pieces are fused (Llama 2's "▁Paris" is
 * " Paris", not "Paris"), Metaspace's dropped first word-start mark. For a prompt p and a
 * continuation c, decode(p) followed by decode_after(c) is decode(p + c), as Hugging
 * Face's text-generation pipeline cuts its full decode. */
int eng_tok_decode_after(const eng_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                         char **out, size_t *len, vx_err *err);
/* Whether ids decode to any text (special tokens skipped): a prompt of BOS alone does not,
 * and what follows it starts the text (eng_tok_decode_len, not _after). */
int eng_tok_has_text(const eng_tokenizer *t, const int32_t *ids, size_t n);
/* The vocabulary string of an id (e.g. "Ġworld", "▁Hello", "<0x0A>"), NULL if out of range
 * or there is no tokenizer. */
const char *eng_tok_piece(const eng_tokenizer *t, int32_t id);
/* Id of an exact vocabulary string (added tokens included), or -1. */
int32_t eng_tok_lookup(const eng_tokenizer *t, const char *piece);
size_t eng_tok_vocab_size(const eng_tokenizer *t);
/* The ids a model writes to say " text" after a prompt (no specials): encode(" " + text),
 * one space the caller wrote counted as that space, leading pieces of only word-start
 * marks and spaces ("▁", "▁▁", "Ġ", " ") skipped, since a dummy-prefix tokenizer spells " Paris" as "▁" "▁Paris".
 * *ids malloc'd (non-NULL); *n may be 0 when text is only spaces. The one reading of an
 * answer for INSERT's targets and TRACE's FOR. */
int eng_tok_answer_ids(const eng_tokenizer *t, const char *text, int32_t **ids, size_t *n,
                       vx_err *err);
int eng_tok_is_special(const eng_tokenizer *t, int32_t id);

/* ---------------------------------------------------------------- model */

typedef struct eng_model eng_model;

/* Build the op plan from c's system graph and bind operands. Loads the container's
 * tokenizer snapshot. */
int eng_model_bind(vx_container *c, eng_model **out, vx_err *err);
/* eng_model_bind with a tokenizer the caller already loaded (borrowed: it must outlive
 * the model; NULL = none), so one tokenizer serves a whole session. */
int eng_model_bind_tok(vx_container *c, const eng_tokenizer *tok, eng_model **out,
                       vx_err *err);
void eng_model_free(eng_model *m);

const vx_container *eng_model_container(const eng_model *m);
const eng_tokenizer *eng_model_tokenizer(const eng_model *m);
int eng_model_layers(const eng_model *m);
int eng_model_hidden(const eng_model *m);
int eng_model_vocab(const eng_model *m);
int eng_model_context(const eng_model *m);
/* Features per layer seen by browse and the overlay: intermediate for dense layers,
 * experts · expert_intermediate for MoE layers. */
int eng_model_ffn_features(const eng_model *m, int layer);
/* Experts each position is routed to (top_k; 0 for a model without MoE layers) and a MoE
 * layer's features per expert (its expert-major features are e · this + f). */
int eng_model_top_k(const eng_model *m);
int eng_model_expert_features(const eng_model *m);
float eng_model_embed_scale(const eng_model *m);
int32_t eng_model_eos(const eng_model *m, int i); /* i-th eos id, -1 past the end */
int eng_model_is_eos(const eng_model *m, int32_t id);  /* 1 when id is one of them */

/* Threads for every kernel: LQL_THREADS, else the core count. */
int eng_threads(void);
/* The engine's kernels for the layers above it (browse's gate scan and down-meta), so
 * there is one door to matrix products: y[n, rows] = x[n, cols] · Wᵀ for a stored
 * row-major matrix W (rows × cols in dt, row r at data + r · row_bytes), run by the
 * engine's kernels and thread pool (not to be called from inside eng_parallel); and one
 * stored row · x with exact weights and f32 products (safe anywhere). */
void eng_matmul_rows(vx_dtype dt, const void *data, int rows, int cols, size_t row_bytes,
                     const float *x, int n, float *y);
float eng_row_dot(vx_dtype dt, const void *row, const float *x, int cols);
/* Element k of a stored row in f32/f16/bf16 or a block codec (only the block holding it
 * decoded), as the kernels read it. */
float eng_row_elem(vx_dtype dt, const void *row, int k);
/* y[i] = eng_row_dot of row i < n of a stored matrix (row i at data + i · row_bytes): the
 * same results, the CPU checks made once for all n rows (a scan's chunk; safe anywhere).
 * xp: eng_x_pairs(x, cols) when the caller dots many chunks against one x, or NULL. */
void eng_rows_dot(vx_dtype dt, const void *data, size_t row_bytes, int n, const float *x,
                  const float *xp, int cols, float *y);
/* x in the order the bf16 row kernel reads it (each 32-block's even elements, then its odd
 * ones), 64-byte aligned, for eng_rows_dot over bf16 rows; NULL when that kernel reads x
 * as it is (no AVX-512, cols % 32 != 0) or memory is short. free() it. */
float *eng_x_pairs(const float *x, int cols);
/* A 64-byte-aligned copy of x[n] for a caller about to stream many rows against it (the
 * row kernels load x in 64-byte vectors, and one straddling two cache lines costs two),
 * or NULL when x is aligned already or memory is short: then use x itself. free() it. */
float *eng_x_aligned(const float *x, size_t n);
/* A screening product for callers that recompute the survivors exactly (down-meta's
 * candidate pass): y[n, rows] ≈ x[n, cols] · Wᵀ for bf16 W (row r at w + r · row_bytes)
 * and bf16 x, with AVX512-BF16 on the engine's pool. Products are exact; each sum is
 * within eng_sum_gamma(cols) · Σ|w·x| + eng_bf16_sum_slack(cols, ‖x‖, ‖w‖) of the exact
 * sum of the bf16 products. eng_sum_gamma(n) bounds any f32 sum of exact products with at
 * most n roundings (eng_row_dot: cols + 32; eng_matmul_rows: cols + 64, plus AMX's
 * activation split). -1 when the CPU lacks AVX512-BF16 (or LQL_NO_AVX512=1),
 * cols is odd, or memory runs out: the caller then uses eng_matmul_rows. */
int eng_bf16_dot_ready(void);
int eng_matmul_bf16(const void *w, int rows, int cols, size_t row_bytes, const uint16_t *x,
                    int n, float *y);
/* The exact integer screen: y[n, rows] = x[n, cols] · Wᵀ for unsigned-byte W and
 * signed-byte x, int32 sums, on the engine's pool (a signed W is passed offset by 128 and
 * 128 · Σx subtracted by the caller): with AVX512-VNNI for any x; without it (or with
 * LQL_NO_AVX512=1) with AVX2 for |x| ≤ eng_u8s8_x_limit() = 64 (its 16-bit pair sums);
 * on AMX-INT8 tiles where the CPU has them and cols is a multiple of 64 (eng_u8s8_amx: the
 * same sums). -1 when an x is beyond the limit, cols is not a multiple of 4 or above 65536
 * (the sums stay below 2^31), or memory runs out. */
int eng_u8s8_x_limit(void);
/* 1 when the CPU has AVX-512 F/BW/VL and LQL_NO_AVX512 is not 1 (read per call, so a test
 * can cover both paths in one process): the one CPU check of the AVX-512 kernels, the
 * engine's and its callers' (down-meta's admission of screened blocks). */
int eng_avx512(void);
int eng_u8s8_amx(int cols);
/* The layout the AMX kernel reads W in (eng_screen_u8s8 with row_bytes 0): rows in blocks
 * of 16, each block's 64-byte k-steps one contiguous 1 KiB tile. eng_u8s8_pack_row puts
 * row r of cols bytes in place in dst, which holds eng_u8s8_pack_bytes(rows, cols) bytes,
 * zeroed first (the kernel reads whole 32-row blocks from any 16-row block on). */
size_t eng_u8s8_pack_bytes(int rows, int cols);
void eng_u8s8_pack_row(uint8_t *dst, int cols, int r, const uint8_t *row);
int eng_matmul_u8s8(const uint8_t *w, int rows, int cols, size_t row_bytes, const int8_t *x,
                    int n, int32_t *y);
/* The same two products handed over a block at a time instead of stored: fn(ctx, part,
 * r0, nr, t0, tn, c) with c[i · 64 + t] the result (float for bf16, int32 for u8s8) of
 * weight row r0 + i (i < nr) and token t0 + t (t < tn), called on the pool part
 * (< parts, at most eng_threads()) that computed it, while the block is in its cache: a
 * caller that keeps a little of a large product (down-meta's candidates) reads each
 * result once, where it was made, in place of a y it would write and read back from
 * memory. The blocks of one part come one after another; different parts' at once. */
typedef void (*eng_screen_fn)(void *ctx, int part, int r0, int nr, int t0, int tn,
                              const void *c);
int eng_screen_bf16(const void *w, int rows, int cols, size_t row_bytes, const uint16_t *x,
                    int n, int parts, eng_screen_fn fn, void *ctx);
/* eng_screen_u8s8: row_bytes 0 means W is packed (eng_u8s8_pack_row; only where
 * eng_u8s8_amx(cols)), w at a row that is a multiple of 16. */
int eng_screen_u8s8(const uint8_t *w, int rows, int cols, size_t row_bytes, const int8_t *x,
                    int n, int parts, eng_screen_fn fn, void *ctx);
double eng_sum_gamma(int n);
double eng_bf16_sum_slack(int cols, double xnorm, double wnorm);
/* Run fn(ctx, i, n) for i in 0..n-1 (n at most eng_threads()) on the engine's pool, the
 * caller running part 0; blocks until all parts are done. Not reentrant. */
void eng_parallel(void (*fn)(void *ctx, int i, int n), void *ctx);
/* vx_tensor_check (first-touch integrity) of t[0..n), or of every tensor of c when t is
 * NULL, split over the pool; on failure the error of the first failing tensor in that
 * order, as checking them in turn would give. Not from inside eng_parallel. */
int eng_tensors_check(const vx_container *c, const vx_tensor *const *t, size_t n, vx_err *err);
/* The FFN activation in place: act 0 silu, 1 gelu_tanh, 2 gelu (execution.ffn.activation). */
void eng_act(int act, float *x, size_t n);
/* GPT-OSS's clamped SwiGLU of one feature: min(g, limit)·σ(alpha·min(g, limit)) ·
 * (clamp(u, ±limit) + 1) (execution.moe.expert_activation). */
float eng_glu_clamped(float g, float u, float alpha, float limit);

/* ---------------------------------------------------------------- observers */

/* Hooks a caller (TRACE, EXPLAIN INFER, INSERT) attaches to a forward pass. Any member
 * may be NULL. Buffers are valid only during the call; rows are positions of the current
 * chunk (pos0 = absolute position of row 0). */
typedef struct eng_observer {
    void *ctx;
    /* residual after the embedding stage, [n, hidden] */
    void (*on_embed)(void *ctx, int pos0, int n, const float *resid);
    /* per layer: attention branch output and FFN branch output as added to the residual
     * (after post-norms), and the residual after the layer; each [n, hidden] */
    void (*on_layer)(void *ctx, int layer, int pos0, int n, const float *attn_delta,
                     const float *ffn_delta, const float *resid_out);
    /* FFN input (after ffn_norm) and feature activations act = f(gate)·up (dense) or the
     * routed expert-major activations with unselected experts zero (moe), [n, features] */
    void (*on_ffn)(void *ctx, int layer, int pos0, int n, const float *ffn_in,
                   const float *act, int features);
    /* attention probabilities of one head, [n, n_keys] (keys 0..n_keys-1 absolute) */
    void (*on_attn)(void *ctx, int layer, int head, int pos0, int n, int n_keys,
                    const float *probs);
} eng_observer;

/* ---------------------------------------------------------------- overlay */

/* Effective-weight corrections applied on top of the base FFN (mutation layer). For a
 * layer, the FFN output becomes
 *     down·act  +  sum_f (down'_f − down_f)·act_f   (replaced down columns)
 *               +  U·(Vᵀ·act)                        (low-rank delta on down_proj)
 * with act computed from gate/up rows that may also be replaced, and tombstoned features
 * contributing nothing (a low-rank delta addressed to an expert reads that expert's slice
 * of act only). The overlay is owned by the caller and must outlive its use. */
typedef struct eng_feature_edit {
    int layer, feature;
    int tombstone;            /* 1: the feature contributes nothing */
    const float *gate;        /* [hidden] replacement gate row, or NULL */
    const float *up;          /* [hidden] replacement up row, or NULL */
    const float *down;        /* [hidden] replacement down column, or NULL */
} eng_feature_edit;

typedef struct eng_lowrank {
    int layer, rank;
    const float *u;           /* [hidden, rank] row-major */
    const float *v;           /* [features, rank] row-major: delta = u · vᵀ */
    int expert;               /* -1: v spans the layer's features; e ≥ 0 on a MoE layer: v
                               * spans expert e's expert_intermediate features only, i.e.
                               * expert e's down_proj += u · vᵀ */
} eng_lowrank;

/* Metadata override for a feature (UPDATE … SET target / confidence, an insert's
 * down_meta): top_id < 0 keeps the base token, has_score 0 keeps the base c_score. The
 * forward pass does not read it: browse shows it and COMPILE writes it into the down-meta. */
typedef struct eng_meta_edit {
    int layer;
    int64_t feature;
    int32_t top_id;
    int has_score;
    float c_score;
    const char *relation;     /* the relation the insert that wrote the feature named (browse
                               * labels the feature with it), or NULL */
} eng_meta_edit;

/* The one overlay type: the mutation layer (src/edit) builds it from the journal, the
 * executor applies its edits and low-rank deltas, browse reads all of it. */
typedef struct eng_overlay {
    const eng_feature_edit *edits; size_t n_edits;
    const eng_lowrank *lowrank;    size_t n_lowrank;
    const eng_meta_edit *meta;     size_t n_meta;
} eng_overlay;

/* Attach (or with NULL detach) an overlay; later forward passes see base + overlay. */
void eng_model_set_overlay(eng_model *m, const eng_overlay *ov);

/* ---------------------------------------------------------------- sessions */

typedef struct eng_session eng_session;

/* A KV cache for up to max_ctx positions (0: the model's context length). */
int eng_session_new(const eng_model *m, int max_ctx, eng_session **out, vx_err *err);
void eng_session_free(eng_session *s);
void eng_session_reset(eng_session *s);
int eng_session_pos(const eng_session *s);

/* Append n tokens (prefill as a batch) and, when logits is not NULL, write the logits of
 * the last appended position ([vocab], after the final soft-cap). obs may be NULL.
 * Honours vx_cancel_flag (VX_ECANCEL). On failure the session is back where it was,
 * except that one holding recurrent (fixed) state is reset to position 0: a recurrence
 * cannot be rewound. */
int eng_forward(eng_session *s, const int32_t *ids, int n, float *logits,
                const eng_observer *obs, vx_err *err);

/* eng_forward from layer `first` on: x_in [n, hidden] holds the residual entering that
 * layer at the session's next n positions (what on_layer gave as resid_out of layer
 * first − 1, or on_embed for 0); the layers below are not run and their state is not
 * touched. Layers from `first` on compute exactly what eng_forward would from the same
 * rows — an edit's optimisation re-runs only the layers its edit can change. */
int eng_forward_from(eng_session *s, int first, const float *x_in, int n, float *logits,
                     const eng_observer *obs, vx_err *err);

/* eng_forward for B sessions at once: session b appends n[b] tokens (ids holds them in
 * session order), each at its own position, and logits (when not NULL) receive each
 * session's last position's [B, vocab]. The matrix products run once over all the rows
 * (what makes sampling many short texts cost about one prefill of them), attention and
 * recurrences per session; the rows run as one chunk, so the caller keeps their total
 * moderate. The sessions are distinct and bound to one model. Observers see every row
 * with pos0 -1 (on_attn is refused for more than one session). On failure every session
 * is back where it was, as eng_forward leaves one. */
int eng_forward_batch(eng_session *const *ss, int B, const int32_t *ids, const int *n,
                      float *logits, const eng_observer *obs, vx_err *err);
/* How many of count sessions appending n[0..count) tokens, from the first, one
 * eng_forward_batch should take: as many as fit the chunk eng_forward runs (256 rows), at
 * least one (a longer one alone). */
int eng_batch_fit(const int *n, int count);

/* The logit lens: final norm → LM head → final soft-cap of one residual [hidden] into
 * logits [vocab]. */
void eng_lens(const eng_model *m, const float *resid, float *logits);

/* ---------------------------------------------------------------- sampling */

typedef struct eng_sampler {
    float temperature;   /* 0: greedy */
    int top_k;           /* 0: off */
    float top_p;         /* 1: off */
    uint64_t seed;
} eng_sampler;

/* A sampler parameter (temperature, top_p) as the float eng_sampler holds: a positive value
 * below float's range (1e-300) stays positive, the smallest float, instead of becoming 0
 * (greedy, no nucleus). */
float eng_sampler_param(double x);

/* Softmax in place over n logits (numerically stable). */
void eng_softmax(float *x, int n);
/* Pick the next token from logits (modified in place). rng_state carries the stream. */
int32_t eng_sample(const eng_sampler *sp, float *logits, int n, uint64_t *rng_state);
/* The stream's first state for a seed (what eng_generate starts from): a caller that
 * samples step by step itself (a server batching requests) draws what eng_generate would. */
uint64_t eng_sampler_stream(uint64_t seed);

/* Generate up to max_new tokens after the prompt ids (stops after an eos id, which is
 * included). out receives up to max_new ids; *n_out the count. */
int eng_generate(eng_session *s, const int32_t *prompt, int n_prompt, int max_new,
                 const eng_sampler *sp, int32_t *out, int *n_out, vx_err *err);
/* eng_generate that hands each chosen token to on_token(ctx, id) before decoding on (a
 * streaming server); a nonzero return stops after that token. on_token may be NULL. */
int eng_generate_each(eng_session *s, const int32_t *prompt, int n_prompt, int max_new,
                      const eng_sampler *sp, int (*on_token)(void *ctx, int32_t id), void *ctx,
                      int32_t *out, int *n_out, vx_err *err);
/* eng_generate_each with a caller's look at every forward pass (obs, the prompt's and each
 * decoded token's) and a say in the next token: pick, called after each sample, may replace
 * *id (the edit layer's residual-key store does); nonzero from pick is an error it wrote to
 * err. Either may be NULL. */
typedef struct eng_gen_hooks {
    int (*on_token)(void *ctx, int32_t id);
    void *token_ctx;
    const eng_observer *obs;
    int (*pick)(void *ctx, int32_t *id, vx_err *err);
    void *pick_ctx;
} eng_gen_hooks;
int eng_generate_with(eng_session *s, const int32_t *prompt, int n_prompt, int max_new,
                      const eng_sampler *sp, const eng_gen_hooks *h, int32_t *out, int *n_out,
                      vx_err *err);

/* eng_generate for B texts at once, each step one eng_forward_batch: session b continues
 * from prompts' n_prompt[b] ids (in session order) with sampler sp[b], receiving up to
 * max_new ids at out + b · max_new (n_out[b] of them). Text b's tokens are those
 * eng_generate would give it up to the rounding of the batched products. obs (may be NULL)
 * sees every pass; with feed_last each text's last token is passed through the model
 * too (so obs sees every position of every text; the sessions need room for it). */
int eng_generate_batch(eng_session *const *ss, int B, const int32_t *prompts,
                       const int *n_prompt, int max_new, const eng_sampler *sp,
                       const eng_observer *obs, int feed_last, int32_t *out, int *n_out,
                       vx_err *err);

#endif
