/*
 * engine_int.h — the executor's private types: the op plan a container's system graph
 * binds to, the weight views the kernels read in place, the thread pool, and the pure
 * kernels (norm, rope, attention, ffn, moe, mla) with their shape contracts.
 *
 * Shapes: activations are row-major [n, width] f32 (one row per position of the chunk).
 * A weight view eng_w is a borrowed [rows=out, cols=in] matrix in its stored dtype; the
 * only matrix product is eng_matmul (y = x · Wᵀ).
 */
#ifndef LQL_ENGINE_INT_H
#define LQL_ENGINE_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "engine.h"

/* The innermost kernel loops under the sanitizers: instrumented, each broadcast and load
 * took a shadow check, making the GEMM micro-kernel 10-16x slower and most of the sanitizer
 * suite's edit tests (and in the fuzz build, a traced comparison per loop step was most of
 * an input's time). ENG_HOT_LOOP leaves such a loop uninstrumented; the kernel then checks
 * every range it reads or writes once per call (eng_asan_range), so an overrun is still
 * reported. The files holding such loops are built without ASan's scope checks
 * (CMakeLists.txt): GCC keeps the scope marks of the helpers they inline, and the frame
 * would return with them still poisoned. */
#if defined(__SANITIZE_ADDRESS__)
#define ENG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ENG_ASAN 1
#endif
#endif
#ifdef ENG_ASAN
#include <sanitizer/asan_interface.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __clang__   /* the fuzz build: nor the comparisons traced for libFuzzer (a loop's bound) */
#define ENG_HOT_LOOP __attribute__((no_sanitize("address", "undefined", "coverage")))
#else
#define ENG_HOT_LOOP __attribute__((no_sanitize("address", "undefined")))
#endif
/* Aborts with ASan's description when any byte of [p, p + bytes) is not addressable. */
static inline void eng_asan_range(const void *p, size_t bytes, const char *what)
{
    void *bad = __asan_region_is_poisoned((void *)(uintptr_t)p, bytes);
    if (bad) {
        fprintf(stderr, "eng_asan_range: %s: %zu bytes at %p reach unaddressable %p\n", what, bytes, p, bad);
        __asan_describe_address(bad);
        abort();
    }
}
#else
#define ENG_HOT_LOOP
#define eng_asan_range(p, bytes, what) ((void)0)
#endif

#ifdef __AVX2__
#include <immintrin.h>
/* The sum of v's 8 lanes: how every AVX2 dot-product kernel finishes. */
static inline float eng_hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The largest of v's 8 lanes. */
static inline float eng_hmax256(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
#endif

/* The AVX-512 mask of the first n of 16 lanes (all 16 for n >= 16): a block's tail. */
static inline uint16_t eng_lanes16(int n)
{
    return n >= 16 ? 0xffff : (uint16_t)((1u << n) - 1);
}

/* ---------------------------------------------------------------- weights */

/* A borrowed matrix. trans == 0: rows = out features, each row `cols` elements in `dt`,
 * row r at data + r * row_bytes. trans == 1: the matrix is stored [cols, rows] (in-major):
 * stored row c (at data + c * row_bytes; row_bytes 0 means packed) holds element (r, c)
 * at index r; used for small computed factors and in-major weight slices. */
typedef struct eng_w {
    vx_dtype dt;
    const void *data;
    int rows, cols;
    size_t row_bytes;
    int trans;
    int exact;      /* block codec stored with source authority: f32 products, no 8-bit
                     * activations (the weights are the model, so the product must be too) */
} eng_w;

/* y[n, w->rows] = x[n, w->cols] · Wᵀ, every row of y overwritten. Dispatches on the
 * dtype: small n streams weight rows once through a vector kernel (the decode GEMV); large
 * n runs a GEMM (AMX tiles, or gemm.c's f32 GEMM on AVX-512 or AVX2). Never fails for a
 * bound view. */
void eng_matmul(const eng_w *w, const float *x, int n, float *y);
/* y[n, w->cols] = x[n, w->rows] · W, the product eng_matmul transposes (a gradient taken
 * back through a layer): the pool's threads each sum their rows of W, converted to f32 a
 * tile at a time, by sgemm. -1 without memory for the parts' sums (y untouched). */
int eng_matmul_t(const eng_w *w, const float *x, int n, float *y);
/* y[i] = x · w[i]ᵀ for i < count: the same as count eng_matmul calls, bit for bit; products
 * on decode's streaming path (n <= 8) run in one parallel region (eng_parallel_rows). */
void eng_matmul_shared(const eng_w *const *w, int count, const float *x, int n, float *const *y);
/* y[t, i] += b[i] for t < n, i < w; nothing when b is NULL. */
void eng_add_bias(float *y, const float *b, int n, int w);
/* Dot product of two f32 vectors of n elements (vectorised). */
float eng_dot(const float *a, const float *b, int n);
/* Dot product of weight row r with x (cols elements), f32 result. */
float eng_w_dot_row(const eng_w *w, int r, const float *x);
/* Element (r, c) of a view as f32. */
float eng_w_at(const eng_w *w, int r, int c);
/* n elements of a row in any executable dtype to f32 (block dtypes: n a multiple of the
 * block size). */
void eng_row_f32(vx_dtype dt, const void *src, float *dst, size_t n);
/* Can eng_matmul execute this dtype? */
int eng_dtype_executable(vx_dtype t);
/* Make a view of a stored 2-D tensor. */
void eng_w_of(eng_w *w, const vx_tensor *t);

/* AMX prefill (amx.c): 1 when the CPU has AMX-BF16 and the tile state was granted (and
 * LQL_NO_AMX is not 1). eng_amx_matmul computes y for the first eng_amx_rows(w) rows of
 * a bf16 view with cols % 32 == 0, at f32 accuracy (split bf16 activations); -1 when it
 * could not get memory (y then partly written; the caller recomputes). */
int eng_amx_ready(void);
int eng_amx_rows(const eng_w *w);
int eng_amx_matmul(const eng_w *w, const float *x, int n, float *y);
/* 1 when eng_amx_ready() and the CPU has AMX-INT8 too (LQL_NO_AMX read per call). eng_amx_i8_rows is gemm.c's integer
 * micro-kernel on tiles (amx.c says how; the same sums, bit for bit): c[i · gt + 16 v + t]
 * for weight rows i < rows (a multiple of 16; row i's 32-value block b of int8 at
 * w + i · rb + b · bst, its scale and min at dw [i · sn + b], mn [i · nb + b]) and the
 * packed activations' token vectors v < nv (xq, xd, xs as eng_xpack_make_q8 lays out one
 * group for AMX: signed bytes), over all nb blocks; min: add the blocks' mins. */
int eng_amx_i8_ready(void);
/* eng_screen_u8s8's block on tiles (amx.c; exact, as vpdpbusd): c[i · 64 + 16 v + t] for rows
 * i < rows (a multiple of 32) of weights packed by eng_u8s8_pack_row, token vectors v < nv of
 * activations packed as whole tiles, ks 64-byte k-steps. */
void eng_amx_u8s8_rows(const uint8_t *w, int rows, const uint32_t *xt, int ks, int nv,
                       uint32_t *c);
void eng_amx_i8_rows(const uint8_t *w, size_t rb, size_t bst, int rows, const float *dw,
                     const float *mn, int sn, int nb, const uint8_t *xq, const float *xd,
                     const float *xs, int nv, int min, float *c, int gt);
/* Prefill GEMM at f32 accuracy (gemm.c: AVX-512, or AVX2 without it or with
 * LQL_NO_AVX512=1). eng_xpack_make packs activations x [n, cols] once per product, with
 * scratch for every pool part (-1 when out of memory: the caller takes another path).
 * Inside eng_parallel, part `part` then claims chunks of weight rows from *next (zero
 * before the product) until all `rows` are taken, computing y[t, r] (row stride rows) from
 * each row produced as exact f32 by row(ctx, r, dst). src and src_rb are the stored rows'
 * base and stride (or NULL): with AVX-512, bf16 rows (src_dt) and Q8_0 rows against
 * eng_xpack_make_q8's packing are read there in place and row is not called. */
enum { ROW_I8_PLAIN, ROW_I8_MIN, ROW_I8_HALF };
typedef struct eng_xpack {
    float *p, *scratch;
    uint8_t *q8;             /* eng_xpack_make_q8: activation bytes (p NULL), signed if amx, */
    float *q8d, *q8s;        /* their block scales, and scale × block sum (or NULL) */
    /* integer formats not read in place (set by the caller after packing; NULL for Q8_0):
     * row r as int8 values per 32-block, each block's scale d and min m (w = d·q + m), or
     * for ROW_I8_HALF a scale per 16 values (2 · cols / 32 of them) and no min */
    void (*row_i8)(const void *ctx, int r, int8_t *q, float *d, float *m);
    int row_i8_kind;         /* ROW_I8_PLAIN, ROW_I8_MIN (needs sums) or ROW_I8_HALF */
    int amx;                 /* eng_xpack_make_q8: the products run on AMX-INT8 tiles */
    int v256;                /* eng_xpack_make without AVX-512: the AVX2 f32 kernel */
    int n, cols, parts;
    size_t scratch_floats;   /* per part */
} eng_xpack;
int eng_xpack_make(eng_xpack *xp, const float *x, int n, int cols);
/* Scratch for a product (64-byte aligned): taken from the few kept buffers when one is
 * large enough, given back for the next product (gemm.c says why). */
void *eng_buf_take(size_t bytes);
void eng_buf_give(void *p, size_t bytes);
/* Whether the CPU is Intel's: where a kernel's best form was measured to differ by vendor
 * (the decode's fetch ahead, f16's widening in the GEMM). */
int eng_intel(void);
/* Whether the AVX-512 f32 GEMM reads rows of dt where they are stored and widens each
 * weight exactly in registers (bf16; f16 off Intel), rather than through an f32 tile. */
int eng_gemm_widens(vx_dtype dt);
/* y[t · ys + i] = c[i · 64 + t] for i < nr, t < tn: a C tile of nr rows of 64 tokens
 * (its buffer a multiple of 16 rows long) into [token][row] output; wide: the caller's
 * eng_avx512(), read once per product (16 × 16 blocks, else 8 × 8). */
void eng_store_t(const uint32_t *c, int nr, int tn, uint32_t *y, size_t ys, int wide);
/* The same for integer products, on a CPU with AVX-512 VNNI (the caller checks), against
 * activations already quantised to 8-bit blocks of blk (32 or 256) — d [n, cols / blk]
 * scales, q [n, cols] values — and, for kind ROW_I8_MIN (formats with block mins), bs
 * [n, cols / 16] the sums of each 16 values (not read otherwise), from which each 32-block's
 * scale × value sum is packed: the integer products of the decode kernels, at GEMM speed.
 * Sets xp->row_i8_kind and xp->amx. Q8_0 (src_dt) is read in place; other formats need
 * xp->row_i8. */
int eng_xpack_make_q8(eng_xpack *xp, const float *d, const int8_t *q, const int16_t *bs, int n,
                      int cols, int blk, int kind);
/* 1 when integer products of this kind run on AMX-INT8 tiles (eng_amx_i8_ready, and not
 * ROW_I8_HALF's 16-value scales, which stay on VNNI): eng_xpack_make_q8's rule, which
 * eng_prefill_path reports. */
int eng_q8_amx(int kind);
void eng_xpack_free(eng_xpack *xp);
void eng_gemm_part(const eng_xpack *xp, int part, atomic_int *next, int rows, float *y,
                   void (*row)(const void *ctx, int r, float *dst), const void *ctx,
                   vx_dtype src_dt, const void *src, size_t src_rb);
/* 1 when LQL_PREFILL_BF16=1 asks for bf16-rounded activations in bf16 prefill products and
 * the CPU has AVX512-BF16 but no AMX (read per call; matmul.c says why it is opt-in). */
int eng_prefill_bf16_optin(void);
/* Which kernel eng_matmul uses for a many-row product (prefill) on weights of dtype dt on
 * this host, in words (benchmarks print it beside their figures). */
const char *eng_prefill_path(vx_dtype dt);

/* ---------------------------------------------------------------- threads */

/* (eng_parallel, the pool's entry, is public: engine.h.) [lo, hi) of part i of n over
 * count items, split in multiples of `align`. */
void eng_split(int count, int i, int n, int align, int *lo, int *hi);
/* The next [*lo, *hi) of `rows` claimed from *next: 1/nparts of the rows still unclaimed
 * (a multiple of 16, at least 16), so chunks shrink toward the product's end; 0 when none
 * is left. Decode's parts claim their rows so a thread the scheduler delays before it
 * claims leaves its share to the others, the last chunks are short so the threads finish
 * together, and a product is read in a few long sequential streams: each new stream costs
 * the prefetchers about a microsecond to pick up (fixed chunks of rows / (nparts · 8)
 * decoded the 1.1B bench model 3 % slower in Q8_0 and 6 % in Q4_K, ENGINE.md session 43). */
int eng_claim_rows(atomic_int *next, int rows, int nparts, int *lo, int *hi);
/* One product's rows as work for a shared region: run(ctx, lo, hi) computes rows [lo, hi);
 * next starts at 0. */
typedef struct eng_rowjob {
    void (*run)(const void *ctx, int lo, int hi);
    const void *ctx;
    int rows;
    atomic_int next;
} eng_rowjob;
/* jobs[0..count) in one eng_parallel region: each part claims chunks (eng_claim_rows) of
 * the first job with rows left, so a part done with its share of one product goes on to
 * the next instead of waiting at the product's end. Not from inside eng_parallel. */
void eng_parallel_rows(eng_rowjob *jobs, int count);

/* ---------------------------------------------------------------- plan */

enum { NORM_RMS = 0, NORM_LAYER = 1 };
enum { ACT_SILU = 0, ACT_GELU_TANH = 1, ACT_GELU = 2 };
enum { ROPE_NONE = 0, ROPE_HALF = 1, ROPE_INTERLEAVED = 2 };
enum { SCORE_SOFTMAX = 0, SCORE_SIGMOID = 1 };
enum { QK_NONE = 0, QK_HEAD = 1, QK_PROJECTION = 2 };

/* A norm bound to its (offset-added) f32 weight and optional bias, each [width]. */
typedef struct eng_norm {
    int kind, width;
    float eps;
    float *w, *b;   /* owned; b NULL when there is no bias */
} eng_norm;

/* A gated or plain MLP block: gate (NULL view data when plain), up, down, biases. */
typedef struct eng_mlp {
    int inter;
    eng_w gate, up, down;   /* gate.data NULL for a plain MLP */
    float *gate_b, *up_b, *down_b;   /* owned or NULL */
    float alpha, limit;     /* limit > 0: clamped SwiGLU min(g,L)·σ(αg)·(clamp(u,±L)+1) */
} eng_mlp;

typedef struct eng_rope {
    int style, rotary_dim;
    double *inv_freq;           /* owned, [rotary_dim / 2] */
    double mscale;              /* multiplies cos and sin (YaRN's attention factor); 1 */
} eng_rope;

/* ---------------------------------------------------------------- recurrent mixers: types */

/* A depthwise causal conv1d over `channels`, kernel `kernel` (w [channels, kernel], the
 * last tap multiplying the current input; b NULL when there is no bias), then SiLU. */
typedef struct eng_conv {
    int channels, kernel;
    float *w, *b;               /* owned */
} eng_conv;

/* Mamba2 SSM mixer. in_proj rows [z (I) | x (I) | B (G·N) | C (G·N) | dt (heads)] with
 * I = heads · head_dim; the conv runs over [x | B | C]; head h reads B/C group
 * h / (heads / groups). dt = clamp(softplus(dt + dt_bias), dt_min, dt_max); per head
 * h_t = exp(dt·a)·h_{t-1} + dt·x_t ⊗ B_t, y_t = h_t·C_t + d·x_t; then y·silu(z),
 * RMS over all I channels (norm), out_proj. State per layer: conv window
 * [kernel − 1, I + 2GN] and h [heads, head_dim, N], f32. */
typedef struct eng_ssm {
    int heads, head_dim, groups, state;
    eng_w in_proj, out_proj;
    float *in_b, *out_b;        /* owned or NULL */
    eng_conv conv;
    float *dt_bias, *a, *d;     /* owned [heads]; a = −exp(A_log) */
    float dt_min, dt_max;       /* dt_max INFINITY when unbounded */
    eng_norm norm;              /* gated RMSNorm over I: gate first, then normalise */
} eng_ssm;

/* Gated DeltaNet mixer. in_qkvz rows per key head [q (dk) | k (dk) | v (r·dv) | z (r·dv)],
 * in_ba rows per key head [b (r) | a (r)], r = v_heads / k_heads; value head h reads key
 * head h / r. The conv runs over [q (all heads) | k | v] (no bias); q and k are
 * L2-normalised (x·rsqrt(Σx² + 1e-6)), q scaled by dk^-½; per value head
 * g = a·softplus(a_in + dt_bias), β = sigmoid(b), S ← exp(g)·S, δ = β·(v − Sᵀk),
 * S ← S + k·δᵀ, o = Sᵀq; then RMSNorm over dv per head (norm), × silu(z), out_proj.
 * State per layer: conv window [kernel − 1, 2·nk·dk + nv·dv] and S [nv, dk, dv], f32. */
typedef struct eng_deltanet {
    int k_heads, v_heads, k_dim, v_dim;
    eng_w in_qkvz, in_ba, out_proj;
    eng_conv conv;
    float *dt_bias, *a;         /* owned [v_heads]; a = −exp(A_log) */
    eng_norm norm;              /* [v_dim]: normalise first, then gate */
} eng_deltanet;

typedef struct eng_layer {
    int mla;                 /* 0: softmax_attention, 1: mla */
    eng_ssm *ssm;            /* owned; the token mixer when not NULL (a Mamba2 layer) */
    eng_deltanet *dn;        /* owned; the token mixer when not NULL (a Gated DeltaNet layer) */
    int ffn_none;            /* 1: no channel mixer */
    const eng_rope *rope;    /* the model's, or own_rope when the layer declares its own */
    eng_rope own_rope;
    int window;              /* 0: full causal */
    int moe;                 /* 0: dense FFN, 1: moe */
    eng_norm attn_norm, ffn_norm, post_attn, post_ffn;  /* width 0 when absent */
    /* softmax attention */
    eng_w q, k, v, o;
    float *qb, *kb, *vb, *ob;   /* owned or NULL */
    eng_norm q_norm, k_norm;    /* QK-norm before rope, width head_dim (per head) or the
                                 * whole projection; width 0 when absent */
    float *sinks;               /* owned [heads] learned sink logits, or NULL */
    /* mla */
    eng_w q_a, q_b, kv_a, kv_b; /* q_a.data NULL: q holds the direct q_proj */
    eng_norm q_a_norm, kv_a_norm;
    /* ffn */
    eng_mlp mlp;                /* dense */
    eng_w router;
    float *score_bias;          /* owned or NULL, [experts] */
    float *router_b;            /* owned or NULL, [experts]: added to the router logits */
    eng_mlp *experts;           /* owned array [experts] (views borrowed) */
    eng_mlp shared;             /* inter 0 when absent */
    eng_w shared_gate;          /* data NULL when ungated */
} eng_layer;

/* More end-of-sequence ids than this in a graph are refused by name, never cut. */
#define ENG_MAX_EOS 32

struct eng_model {
    vx_container *c;
    const vx_graph_shape *shape; /* the container's typed graph shape (owned by c) */
    const eng_tokenizer *tok;   /* own_tok or borrowed (eng_model_bind_tok); NULL if none */
    eng_tokenizer *own_tok;     /* loaded by eng_model_bind, freed with the model */
    int n_layers, hidden, vocab, ctx;
    /* embedding */
    eng_w embed;
    float embed_scale;
    eng_w positions;            /* data NULL when absent */
    /* attention */
    int heads, kv_heads, head_dim, v_head_dim;
    float attn_scale, attn_softcap;   /* softcap 0: off */
    int attn_gate;              /* q_proj rows per head [query | gate]; out × sigmoid(gate) */
    int qk_norm;                /* QK_NONE, QK_HEAD, QK_PROJECTION */
    eng_rope rope;
    /* mla geometry (mla_on 0 when unused) */
    int mla_on, q_lora, kv_lora, qk_nope, qk_rope;
    /* ffn */
    int ffn_gated, act, ffn_bias, inter;
    int moe_on, experts, top_k, expert_inter, scoring, n_group, topk_group, normalise;
    int has_score_bias, shared_inter, shared_gated;
    int router_bias, expert_bias;
    float routed_scaling;
    float expert_alpha, expert_limit; /* clamped SwiGLU experts; limit 0: the ffn activation */
    /* output */
    eng_norm final_norm;        /* width 0 when there is no final norm */
    eng_w lm_head;
    float final_softcap;        /* 0: off */
    float logits_divisor;       /* logits / this (1: off) */
    float residual_scale;       /* every branch output × this before it is added (1: off) */
    int32_t eos[ENG_MAX_EOS];
    int n_eos;
    eng_layer *layers;          /* owned, [n_layers] */
    const eng_overlay *overlay; /* borrowed, may be NULL */
};

/* Bind helpers (plan.c): build the plan from the graph; on failure the partially
 * filled model is released by the caller with eng_model_free. */
int eng_plan_build(eng_model *m, vx_err *err);
void eng_plan_free(eng_model *m);

/* ---------------------------------------------------------------- kernels */

/* Keep a loaded weight vector in its register: GCC otherwise folds the load into each
 * instruction that reads it (a bf16 line's shift and mask, a nibble line's two masks),
 * reading the same streaming line from L1 twice; on a Zen 4 host that cost the bf16 gate
 * scan and decode 6-12 % of a fast minute's bandwidth (ENGINE.md session 25). */
#define ENG_KEEP(v) __asm__("" : "+v"(v))

/* out[n, width] = norm(x[n, width]) (out may equal x). */
void eng_norm_apply(const eng_norm *nm, const float *x, float *out, int n);
/* Rotate the first rotary_dim features of each head of x[n, heads * stride] at
 * positions pos0.., in place. `off` is where the rotated part starts within a head. */
void eng_rope_apply(const eng_rope *r, float *x, int n, int pos0, int heads, int stride,
                    int off);
/* Activation f applied to x (in place) over n elements. */
void eng_act(int act, float *x, size_t n);
float eng_softcap(float x, float cap);

/* splitmix64: a well-mixed 64-bit value of x (seeding the sampler's stream). */
uint64_t eng_splitmix64(uint64_t x);

/* ---------------------------------------------------------------- recurrent mixers: kernels */

/* softplus with torch's threshold (x > 20: x). */
float eng_softplus(float x);
/* Conv + SiLU over n inputs (row t at x + t·xstride), out [n, channels]; win
 * [kernel − 1, channels] holds the previous inputs, oldest first, and is advanced. */
void eng_conv_run(const eng_conv *cv, float *win, const float *x, size_t xstride, int n,
                  float *out);
/* Floats of the conv window a mixer carries: (kernel − 1) · channels. */
size_t eng_conv_window_floats(const eng_conv *cv);
/* Gated RMSNorm of rows y[n, width] with gates z[n, width] in place: gate_first
 * (y·silu(z), then normalise) or normalise, then gate. */
void eng_gated_norm(const eng_norm *nm, float *y, const float *z, int n, int gate_first);

/* Run a mixer over n positions of h [n, hidden] (already normed) → out [n, hidden],
 * carrying its state (conv window, recurrent state) from the previous call. Prefill
 * of any length, in any split, equals token-by-token decode. */
int eng_ssm_run(const eng_ssm *L, const float *h, int n, float *conv_win, float *state,
                float *out, vx_err *err);
int eng_deltanet_run(const eng_deltanet *L, const float *h, int n, float *conv_win,
                     float *state, float *out, vx_err *err);
/* Floats of each mixer's recurrent state region. */
size_t eng_ssm_state_floats(const eng_ssm *L);
size_t eng_deltanet_state_floats(const eng_deltanet *L);

/* ---------------------------------------------------------------- session */

/* Per-layer KV cache: k [max_ctx, kv_heads * kdim]; values of position j, kv head g at
 * v + j * vstride + g * vdim. MLA layers keep one shared row per position,
 * [normed latent | roped k_rope], and read their values from its latent part (v NULL:
 * values live in k). */
typedef struct eng_kv {
    float *k, *v;
    int kdim, vdim, kv_heads, vstride;
} eng_kv;

struct eng_session {
    const eng_model *m;
    int max_ctx, pos;
    /* continuation state as the graph declares it: region r of layer l is
     * state[l * VX_STATE_MAX + r], max_ctx positions of it when per_token, zeroed */
    void **state;
    eng_kv *kv;                 /* [n_layers], views of attention layers' state */
    /* routing of the last position of the last forward, per layer: expert ids and the
     * weights applied (selection order), for parity and EXPLAIN */
    int *route_ids;             /* [n_layers * top_k], -1 for dense layers */
    float *route_w;             /* [n_layers * top_k] */
};

/* Rows of several sessions in one forward pass (eng_forward_batch; eng_forward is one
 * session): session b's n[b] rows follow the earlier sessions' rows and continue it at its
 * own position. Matrix products run once over all the rows; what reads a session's state
 * (attention over its cache, a recurrence, the routing record) runs per session. */
typedef struct eng_batch {
    eng_session *const *ss;
    int B;
    const int *n;
    int rows;                   /* the sum of n */
} eng_batch;

/* eng_lens over n residual rows [n, hidden] → logits [n, vocab] in one head product;
 * normed is scratch [n, hidden]. */
void eng_lens_rows(const eng_model *m, const float *resid, int n, float *normed, float *logits);

/* Attention over the cache for n queries at pos0 (keys 0..pos0+n-1 are in kv already).
 * q [n, heads * kdim] (roped), out [n, heads * vdim]; query head h reads kv head
 * h / (heads / kv_heads). */
void eng_attend(const eng_model *m, const eng_layer *L, int layer, const eng_kv *kv,
                const float *q, int n, int pos0, float *out, const eng_observer *obs);

/* FFN of one layer: h [n, hidden] → out [n, hidden] (before post-norm); the MoE FFN runs
 * the batch's rows and leaves each session the routing record of its last row. pos0 is
 * what observers see (-1 for several sessions); obs may be NULL. */
int eng_ffn_dense(const eng_model *m, int layer, const float *h, int n, int pos0,
                  float *out, const eng_observer *obs, vx_err *err);
int eng_ffn_moe(const eng_batch *bt, int layer, const float *h, int pos0, float *out,
                const eng_observer *obs, vx_err *err);
/* Apply an MLP block with the overlay edits whose features fall in [f0, f0 + inter)
 * of the layer's feature numbering; `act` receives [n, inter] activations (after edits,
 * scaled by rowscale[t] when rowscale is not NULL), `out` [n, hidden]. */
int eng_mlp_run(const eng_model *m, int layer, const eng_mlp *b, int f0, const float *h,
                int n, const float *rowscale, float *act, float *out, vx_err *err);

/* out[n, hidden] += U·(Vᵀ·act) for the overlay's low-rank deltas of `layer`;
 * act is [n, features]. */
int eng_lowrank_apply(const eng_model *m, int layer, const float *act, int n, int features,
                      float *out, vx_err *err);

/* Attention layers: h [n, hidden] → out [n, hidden] (after o_proj, before post-norm).
 * Fill the session's KV cache for positions pos0..pos0+n-1; eng_attn_layer does so for
 * each session of a batch at its own position (h and out hold the batch's rows). */
int eng_attn_layer(const eng_batch *bt, int layer, const float *h, float *out,
                   const eng_observer *obs, vx_err *err);
int eng_mla_layer(eng_session *s, int layer, const float *h, int n, int pos0, float *out,
                  const eng_observer *obs, vx_err *err);

/* The routing record of the last forward's last position (tests, EXPLAIN): the top_k
 * expert ids and weights at `layer`; returns the count (0 for dense layers). */
int eng_session_routing(const eng_session *s, int layer, int *ids, float *w);

#endif
