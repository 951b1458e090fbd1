/*
 * edit_gate.h — a fact written as one gated FFN feature that fires on its prompt alone.
 *
 * A rank-1 down_proj update u vᵀ is linear in the activations, so every prompt c receives
 * (vᵀk_c)·u: a leak that flips the base model's near-ties. A gated feature contributes
 * f(g·x)·(w·x)·d (x the FFN input after the FFN norm, f the layer's SiLU/GELU), and
 * f(z) ≈ 0 for z ≪ 0 (SiLU(−8) = −0.003). The slot:
 *   g  = a max-margin separator (L2-SVM, no bias: the norm output's near-constant
 *        component serves as one) with g·x ≥ +1 on the prompt's last position and
 *        on fixed paraphrase-style templates of the fact (positives too), and g·x ≤ −1 on
 *        the negatives — every position of a sampled corpus, the prompt's earlier
 *        positions, template and frame decoys, other facts' prompts — then scaled by
 *        `margin`;
 *   w  = x_p / ‖x_p‖² (w·x_p = 1);
 *   d  = (δ + a_old·d_old) / f(g·x_p): exactly δ at the prompt, δ found by the same
 *        optimisation as the rank-1 insert (edit_memit.h), which at the last layer also
 *        raises the target on the paraphrase-style positives (their output there is
 *        h_t + ratio_t·δ).
 * It replaces a feature of the layer: the unclaimed one with the least output energy on
 * the corpus (E[act_f²]·‖d_f‖², from the covariance diagonal), whose own output at the
 * prompt is folded into d. Journaled as a slot insert (gate/up/down rows), which replay,
 * COMPILE and export already carry.
 */
#ifndef LQL_EDIT_GATE_H
#define LQL_EDIT_GATE_H

#include <stdint.h>

#include "engine.h"

/* Can a gated slot be written at `layer`: a dense gated FFN (gate and up rows, no
 * biases) that eng_edit_check_layer accepts? */
int eng_edit_gate_ok(const eng_model *m, int layer);

typedef struct eng_gate_opts {
    int layer;
    const double *cov;          /* [F×F] the layer's activation second moment (corpus) */
    const float *neg;           /* [n_neg × H] FFN inputs the feature must stay off on */
    int64_t n_neg;
    const char *relation, *entity; /* template decoys "The {relation} of {W} is" */
    int n_decoys;
    const char *const *others;  /* other facts' prompts: stay off on their last position */
    int n_others;
    float margin;               /* gate pre-activation ≥ margin on the prompt, ≤ −margin
                                 * on the negatives that the separator keeps */
    int tail;                   /* the last `tail` ids are the target's earlier tokens */
    int para;                   /* 1: fixed paraphrase-style templates are positives too */
} eng_gate_opts;

typedef struct eng_gate_slot {
    int feature;
    float *gate, *up, *down;    /* [H] each, one malloc'd block at gate (down: set by
                                 * eng_edit_gate_down) */
    float z_prompt;             /* g·x on the prompt */
    float a_prompt, a_old;      /* the slot's activation on the prompt; the replaced
                                 * feature's there */
    int32_t *para_ids;          /* the paraphrase-style positives' ids back to back */
    int *para_lens;
    float *para_ratio;          /* each one's activation / a_prompt: its share of δ */
    int n_para;
    int64_t n_neg;              /* negatives the separator was fitted on */
    int64_t n_open;             /* of them, with g·x > −margin/2 (f no longer ≈ 0) */
} eng_gate_slot;

/* The gate and up rows of a slot for the last of ids[0..n) at layer o->layer (through m,
 * its overlay applying: its edits' features are claimed), and the paraphrase-style
 * positives with their share of δ (the δ optimisation can raise the target there too).
 * Returns 1, saying why in err, when no gate keeps the prompt on and 99 % of the
 * negatives off (the layer cannot tell the prompt from ordinary text). */
int eng_edit_gate_fit(eng_model *m, const int32_t *ids, int n, const eng_gate_opts *o,
                      eng_gate_slot *out, vx_err *err);
/* The down column that makes the fitted slot add delta [H] to the FFN output at the
 * prompt. */
void eng_edit_gate_down(const eng_model *m, int layer, eng_gate_slot *s, const float *delta);
void eng_gate_slot_free(eng_gate_slot *s);

#endif
