/*
 * brw_int.h — declarations shared inside the browse layer (and with its tests): the
 * container's FFN shape as browse sees it, and the browse model's internals.
 */
#ifndef LQL_BRW_INT_H
#define LQL_BRW_INT_H

#include "browse.h"

#include <cjson/cJSON.h>

/* The per-layer FFN matrices browse reads: one "part" per dense layer, one per expert of
 * a MoE layer. Features of a layer are the parts' rows concatenated (expert-major). */
typedef struct brw_part {
    const vx_tensor *gate;   /* [rows, hidden]: gate_proj, or up_proj for a plain MLP */
    const vx_tensor *down;   /* [hidden, rows] */
    int64_t first;           /* feature index of row 0 within the layer */
    int64_t rows;
    const vx_tensor *up;     /* [rows, hidden] up_proj of a gated part; NULL for a plain MLP */
    const vx_tensor *bias;   /* [rows] up_proj.bias of a plain MLP with ffn.bias, or NULL */
    const vx_tensor *gate_b; /* [rows] gate_proj.bias / up_proj.bias of an expert with */
    const vx_tensor *up_b;   /*   biases (execution.moe.expert_bias), or NULL */
} brw_part;

typedef struct brw_layer {
    int n_parts;              /* 0: the layer has no channel mixer */
    brw_part *parts;
    int64_t features;
    uint64_t gate_bytes;
    uint64_t up_bytes;       /* up rows (and bias) a DENSE walk reads besides the gates */
    const vx_layer_shape *g; /* the graph's view of the layer (kinds, state) */
} brw_layer;

typedef struct brw_shape {
    const vx_graph_shape *g;  /* the container's typed graph shape */
    int layers, hidden, vocab;
    float embed_scale;
    int gated;               /* ffn.kind == "gated" */
    int act;                 /* execution.ffn.activation: 0 silu, 1 gelu_tanh, 2 gelu (eng_act) */
    float glu_alpha, glu_limit; /* experts' clamped SwiGLU (execution.moe.expert_activation); limit 0: act */
    const vx_tensor *embed;  /* [vocab, hidden] */
    brw_layer *layer;        /* [layers] */
} brw_shape;

/* Read the decoder component's shape and bind the FFN operands of every layer; refuses a
 * missing operand or a shape that does not agree, naming it. */
int brw_shape_read(const vx_container *c, brw_shape *s, vx_err *err);
void brw_shape_free(brw_shape *s);
/* The tensors browse reads (the embedding, then each part's gate, up and bias rows and
 * expert biases), which brw_open checks on first touch: a malloc'd array of *n, or NULL
 * when memory runs out. */
const vx_tensor **brw_shape_tensors(const brw_shape *s, size_t *n);

/* One embedding row as f32 (f32/f16/bf16 storage). */
int brw_embed_row(const brw_shape *s, int32_t id, float *out, vx_err *err);

/* One DMET record (8 + 8 · top_k bytes) decoded as brw_dmet_get gives it. */
void brw_dmet_rec(const uint8_t *p, int top_k, brw_meta *out);

/* Is the representation bound for object (under c's profile) the checkpoint's own values
 * (fidelity source-*, or not derived from another)? */
int brw_rep_canonical(const vx_container *c, const char *object);
/* 0 when down-meta can be computed from every down operand of c's shape (f32, f16, bf16,
 * or the checkpoint's own block packing); else -1 naming the operand. */
int brw_downmeta_check(const vx_container *c, const brw_shape *s, vx_err *err);
/* The down-meta records (8 + 8 · BRW_DOWN_TOP_K bytes each, as down_meta.bin holds them)
 * of n features (layer[i], feature[i]) into recs, by the exact pass alone: the same
 * records as the encode hook's for the same weights, at vocab · hidden multiply-adds a
 * feature (no screen). On the engine's pool; not from inside eng_parallel. Cancellable
 * (vx_cancel_flag, VX_ECANCEL: no record written). */
int brw_downmeta_exact(const brw_shape *s, const int *layer, const int64_t *feature, size_t n,
                       uint8_t *recs, vx_err *err);
/* Every record of the n layers listed into recs[i] (features × record bytes each), by the
 * encode hook's screened pass: the same bytes it writes into down_meta.bin. Cancellable
 * (vx_cancel_flag, VX_ECANCEL); not from inside eng_parallel. */
int brw_downmeta_layers(const brw_shape *s, const int *layers, int n, uint8_t **recs,
                        vx_err *err);

/* A DMET image of s's layers, parsed into *out: layer l's records from recs[l] (features ×
 * record bytes), all-zero records where recs[l] is NULL. */
int brw_dmet_from_records(const brw_shape *s, uint8_t *const *recs, brw_dmet **out,
                          vx_err *err);

/* For tests of down-meta's screen (downmeta.c): screen 0 = the fastest this CPU has,
 * 1 = f32 (eng_matmul_rows), 2 = bf16 where the CPU has it; no_margin 1 drops the error
 * bound from the admission threshold (records may then differ from the exact pass). */
void brw_downmeta_test_set(int screen, int no_margin);

/* Down-meta computed on demand (ondemand.c), for a container that stores none. */
typedef struct brw_ondemand brw_ondemand;
int brw_ondemand_new(brw_model *m, vx_err *err);
void brw_ondemand_free(brw_ondemand *d);
/* m->od's record of (layer, feature) if computed (else out->present 0); -1 out of range. */
int brw_ondemand_get(const brw_model *m, int layer, int64_t feature, brw_meta *out);

struct brw_model {
    vx_container *c;
    brw_shape s;
    const eng_tokenizer *tok; /* own_tok, or the one brw_open_tok borrowed */
    eng_tokenizer *own_tok;   /* loaded by brw_open, freed by brw_close; NULL if borrowed */
    brw_dmet *dmet;
    brw_ondemand *od;        /* without dmet, when the down operands allow computing it */
    char no_meta_why[512];   /* without either: why not */
    int band[3][2];
    char bands_note[128];    /* why index.browse.layer_bands was not used, or "" */
    char **text;             /* [ntext] token texts as the token columns show them */
    int32_t ntext;           /* ids with a text: the vocabulary's and the tokenizer's, the
                              * fewer (an id past the tokenizer has none to show) */
    unsigned char *blank;    /* [ntext] 1: the token decodes to whitespace alone (text[]
                              * holds its piece), never a DESCRIBE target */
    cJSON *labels;           /* feature_labels.json ("L{l}_F{f}" or "l:f" keys), or NULL */
    const char ***label_of;  /* [layers][features] its string, or NULL (layers without one) */
    cJSON *clusters;         /* relation_clusters.json (labels[c]), or NULL */
    int32_t **cluster_of;    /* [layers][features] cluster id or -1 (feature_clusters.jsonl) */
};

/* Is t (trimmed) an English function word ("the", "which", …)? Case-insensitive. */
int brw_stop_word(const char *t);

/* Text order ignoring case code point by code point ("État" = "état"), as SELECT compares. */
int brw_fold_cmp(const char *a, const char *b);

/* SQL LIKE ignoring case: % any run, _ one character, \ makes the next one literal. */
int brw_like(const char *s, const char *p);

/* Three-way order of two scores (-1, 0, 1) with NaN below every number, -inf included: a
 * NaN from a broken weight ranks last in every descending list and never displaces a
 * number from a top-k (sorting and heaps need an order that is total). */
static inline int brw_fcmp(double a, double b)
{
    int an = a != a, bn = b != b;
    if (an || bn)
        return bn - an;
    return (a > b) - (a < b);
}

/* brw_fcmp as a qsort comparator of floats (ascending, NaN first). */
static inline int brw_cmp_floats(const void *a, const void *b)
{
    return brw_fcmp(*(const float *)a, *(const float *)b);
}

/* Is a layer inside [lo, hi] (-1 -1 = all)? */
static inline int brw_in_range(int layer, int lo, int hi)
{
    return lo < 0 || (layer >= lo && layer <= hi);
}

/* Parse a trace file image (format in docs/lql/BROWSE.md) recorded on a model of `layers`
 * layers, `hidden` wide, with `vocab` tokens; name is used in messages. Header, sizes
 * (64-bit) and every id are checked before anything is copied; out owns copies. */
int brw_trace_parse(const void *buf, size_t n, const char *name, int layers, int hidden,
                    int vocab, brw_trace *out, vx_err *err);

#endif
