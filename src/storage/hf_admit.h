/*
 * hf_admit.h — admission of a Hugging Face checkpoint (storage-internal); src/storage/hf_*.c
 * is the one place in lql that knows model families. hf_admit judges every config.json
 * key (execution surface, declaration-only with a reason, or refused), builds the
 * SystemGraph component (execution surface + explicit per-layer operators) and the plan of
 * operands: for each logical object, the canonical operand names in storage order, each
 * bound to the checkpoint tensor (and row/column slice or transpose) it is copied from.
 */
#ifndef LQL_HF_ADMIT_H
#define LQL_HF_ADMIT_H

#include "st.h"

typedef enum hf_xform {
    HF_WHOLE,      /* the source tensor as stored */
    HF_ROWS,       /* rows [lo, hi) of the source's last dimension, leading dimensions
                    * flattened (elements for 1-D) */
    HF_T,          /* the 2-D source transposed ([in, out] Conv1D -> [out, in]) */
    HF_COLS_T,     /* columns [lo, hi) of a 2-D source, transposed */
    HF_GATHER      /* of expert `expert` of an [E, R, C] source ([E, N] for vectors): rows
                    * lo, lo + step, … (transpose: those columns, as rows); with `scales`,
                    * MXFP4 blocks [E, R, C/32, 16] + scales [E, R, C/32] as lql's mxfp4 */
} hf_xform;

typedef struct hf_operand {
    char *name;                  /* canonical operand name, owned */
    const st_tensor *src;        /* borrowed from the st_model */
    hf_xform xf;
    int64_t lo, hi;              /* slice bounds for HF_ROWS / HF_COLS_T / HF_GATHER */
    int expert, step, transpose; /* HF_GATHER */
    const st_tensor *scales;     /* HF_GATHER of MXFP4 blocks: their E8M0 scales */
    int ndim;
    int64_t shape[VX_MAX_DIMS];  /* stored shape, PyTorch order */
    int keep_f32;                /* stored as f32 whatever the dtype policy */
} hf_operand;

typedef struct hf_object {
    const char *id;              /* "target.embedding", ... (static) */
    const char *kind;            /* "embedding", "decoder_stack", "output_head" (static) */
    const char *component;       /* the component it belongs to: "target" or "mtp" (static) */
    hf_operand *op;              /* in storage order */
    size_t n, cap;
} hf_object;

#define HF_NOBJ 4            /* target.embedding, .decoder_stack, .output_head, mtp.block */

typedef struct hf_plan {
    char family[32];             /* config.json model_type */
    cJSON *component;            /* owned: system_graph component with execution + layers */
    cJSON *aux;                  /* owned or NULL: the auxiliary (MTP) component */
    cJSON *edges;                /* owned or NULL: hidden-state edges to the auxiliary one */
    cJSON *declaration_only;     /* owned: {key: reason} */
    hf_object obj[HF_NOBJ];
    int num_layers, hidden, vocab;
} hf_plan;

/* Admit the checkpoint in dir (config.json, generation_config.json, tokenizer files) whose
 * tensors are m. On success fills *p (free with hf_plan_free); on failure p holds nothing
 * and err names the key or tensor and the family. */
int hf_admit(const char *dir, const st_model *m, hf_plan *p, vx_err *err);
void hf_plan_free(hf_plan *p);

/* Binding JSON for one operand: a string, or {"tensor", "rows"|"cols", "transpose"} (a
 * gather adds "expert", "step" and, for MXFP4, "scales"). */
cJSON *hf_binding(const hf_operand *o);

#endif
