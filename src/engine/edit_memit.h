/*
 * edit_memit.h — inserting a fact by a closed-form, covariance-whitened update of one
 * layer's down_proj (MEMIT-style, rank 1 per fact), expressed as an eng_lowrank so the
 * overlay applies it and COMPILE could materialise it.
 *
 * For a fact prompt and target token at layer L:
 *   key k     = the FFN activations at L on the prompt's last position (effective model);
 *   v         = A⁻¹K (KᵀA⁻¹K)⁻¹ e_new, A = E[act actᵀ] over a corpus + decoy keys + ridge,
 *               K = [protected keys | the prompt's earlier positions | k]: vᵀk = 1, zero
 *               on the others, ‖v‖_A minimal — the update leaves earlier facts' keys,
 *               prompts sharing the fact's prefix and the corpus' directions alone;
 *   u = δ     = the change of L's output at the last position that makes the target win,
 *               found by normalised gradient descent on −log p(target) with the exact
 *               forward pass (base + overlay + δ·vᵀ) and a gradient through the layers
 *               above (their FFNs and norms; attention held fixed for the gradient only;
 *               exact at the last layer); at the last layer each step is also steered by
 *               the gradient of the preserved prompts' KL (their output there is exactly
 *               h_c + (vᵀk_c)·δ), the part orthogonal to the target's gradient and to δ;
 *               and, given other wordings of the fact with their share r of δ (a gated
 *               slot's, below), their mean −log p(target) at h + r·δ joins the loss;
 *   update    = down_proj += u vᵀ, i.e. the FFN output gains u · (vᵀ act).
 *
 * Shapes: hidden H, features F of layer L; cov is F×F row-major double. Errors are
 * returned as -1 with a vx_err; nothing prints. Honours vx_cancel_flag.
 */
#ifndef LQL_EDIT_MEMIT_H
#define LQL_EDIT_MEMIT_H

#include <stdint.h>

#include "engine.h"

/* Can INSERT edit layer L of m as a dense FFN? -1 naming the reason (no FFN, MoE, a
 * post-FFN norm, or a layer whose F×F covariance needs more than half the machine's
 * memory: 20·F² bytes while solving, 2.5 GiB for F = 11008). */
int eng_edit_check_layer(const eng_model *m, int layer, vx_err *err);
/* Tests: the memory the covariance rule compares against (0: the machine's). */
void eng_edit_test_set_memory(uint64_t bytes);
/* An edit site: a dense layer (expert -1), or one routed expert of a MoE layer, whose
 * features are its expert_intermediate activations (routing weight folded in, zero at
 * positions not routed to it) and whose update is that expert's down_proj += u vᵀ. -1
 * naming the reason it cannot be edited (expert -1 on a MoE layer: eng_edit_check_layer's). */
int eng_edit_check_site(const eng_model *m, int layer, int expert, vx_err *err);

/* The experts a MoE layer routes the last of ids[0..n) to, through m (its overlay
 * applies), in the router's order (best selection score first): experts and weights
 * [top_k]; returns top_k, 0 for a dense layer. */
int eng_edit_route(eng_model *m, int layer, const int32_t *ids, int n, int *experts,
                   float *weights, vx_err *err);

/* The FFN activations of layer `layer` at the last of ids[0..n) through m (its overlay
 * applies): key [features]. */
int eng_edit_key(eng_model *m, int layer, const int32_t *ids, int n, float *key, vx_err *err);

/* Sample a corpus from the model itself: nseq sequences, each one of the start texts
 * (tokenized with specials) followed by len tokens sampled at temperature 1 with seed
 * seed + i. ids receives nseq·(≤ start + len) ids back to back, lens the lengths; both
 * malloc'd. */
int eng_edit_corpus(eng_model *m, const char *const *starts, int n_starts, int nseq, int len,
                    uint64_t seed, int32_t **ids, int **lens, vx_err *err);

/* eng_edit_corpus and eng_edit_covariance of its texts in one go: the site's statistics
 * are gathered from the sampling passes themselves (each text's last token passed through
 * the model too), so the texts run once, not twice; the same numbers up to the rounding of
 * how the passes batch the rows. */
int eng_edit_corpus_stats(eng_model *m, const char *const *starts, int n_starts, int nseq,
                          int len, uint64_t seed, int layer, int expert, int32_t **ids,
                          int **lens, double **cov, int64_t *count, float **inputs,
                          vx_err *err);

/* E[act actᵀ] of the edit site (layer, expert) over every position of the corpus: *cov
 * [F×F] malloc'd (F the site's features), *count the positions. When inputs is not NULL
 * the same pass keeps the FFN inputs (after the FFN norm) of every position: *inputs
 * [*count × H] malloc'd. */
int eng_edit_covariance(eng_model *m, int layer, int expert, const int32_t *ids, const int *lens,
                        int nseq, double **cov, int64_t *count, float **inputs, vx_err *err);

/* The FFN input (after the FFN norm) of `layer` at the last position of ids, into x [H];
 * logits (may be NULL) gets the next-token logits. The model's overlay applies. */
int eng_edit_ffn_in(eng_model *m, int layer, const int32_t *ids, int n, float *x,
                    float *logits, vx_err *err);
/* softmax(logits)[t]. */
float eng_edit_p(const float *logits, int V, int32_t t);

/* The canonical fact prompt "The {relation} of {entity} is" (relation's '-' and '_' as
 * spaces; both trimmed of surrounding blanks), malloc'd; NULL on out-of-memory. */
char *eng_edit_prompt(const char *relation, const char *entity);

/* Keys of up to n template neighbours of a fact: the canonical prompt with the entity
 * replaced by capitalised alphabetic vocabulary words of three or more letters (a word
 * boundary piece, lowest ids first, the entity itself skipped). *keys [*count × F]
 * malloc'd. */
int eng_edit_decoys(eng_model *m, int layer, int expert, const char *relation,
                    const char *entity, int n, float **keys, int *count, vx_err *err);

/* Keys of n prompts of the canonical prompt's frame with a common word in place of
 * "{relation} of {entity}": "The {w} is" for the first n lower-case alphabetic vocabulary
 * words of three or more letters (a word-boundary piece, lowest ids first). They do not
 * depend on the fact, so a session computes them once per layer. When inputs is not NULL
 * the same pass keeps their FFN inputs too (*inputs [*count × H], as
 * eng_edit_decoy_inputs with relation NULL gives them; expert -1). */
int eng_edit_frame_decoys(eng_model *m, int layer, int expert, int n, float **keys,
                          float **inputs, int *count, vx_err *err);

/* The FFN inputs [H] at dense layer `layer` of the same prompts as eng_edit_decoys
 * (relation given) or eng_edit_frame_decoys (relation NULL): *x [*count × H] malloc'd. */
int eng_edit_decoy_inputs(eng_model *m, int layer, const char *relation, const char *entity,
                          int n, float **x, int *count, vx_err *err);

typedef struct eng_insert_opts {
    int layer;
    int expert;                /* the edit site: -1 dense, else the routed expert */
    int32_t target;
    const double *cov;         /* [F×F] from eng_edit_covariance */
    const float *protect;      /* [n_protect × F] keys whose output must not change */
    int n_protect;
    const float *decoys;       /* [n_decoys × F] keys weighted into A (template neighbours) */
    int n_decoys;
    double decoy_weight;       /* their total weight relative to the corpus (1: equal) */
    double ridge;              /* × mean diagonal of A, added to its diagonal (1e-2) */
    int max_steps;             /* gradient steps (100) */
    float p_stop;              /* stop once p(target) exceeds it (0.5: top-1 for sure) */
    float step;                /* step length as a fraction of ‖h_L‖ (0.02) */
    float max_norm;            /* ‖δ‖ ≤ max_norm × ‖h_L‖ at the last position (4) */
    const int32_t *pres_ids;   /* preserved prompts' ids back to back (with BOS) */
    const int *pres_lens;      /* their lengths [n_pres] */
    int n_pres;
    double kl_weight;          /* × their mean KL(now ‖ edited) added to −log p(target);
                                * applied when layer is the last (0: none) */
    const int32_t *aux_ids;    /* the fact asked other ways (with BOS), back to back: the
                                * mean of their −log p(target) is added to the loss */
    const int *aux_lens;
    const float *aux_ratio;    /* the share of δ each one's output receives */
    int n_aux;                 /* applied when layer is the last (0: none) */
} eng_insert_opts;

typedef struct eng_insert_fact {
    int hidden, features;      /* features of the site */
    float *u;                  /* [hidden] δ */
    float *v;                  /* [features] */
    float *key;                /* [features] */
    float p_before, p_after;   /* p(target) before the edit and with it */
    int steps;
} eng_insert_fact;

/* Compute one fact's rank-1 update (the model's overlay is restored on return). */
int eng_edit_insert(eng_model *m, const int32_t *ids, int n, const eng_insert_opts *o,
                    eng_insert_fact *out, vx_err *err);
void eng_insert_fact_free(eng_insert_fact *f);

/* ---------------------------------------------------------------- the gated feature */

/*
 * The gated feature: a fact written as one FFN feature that fires on its prompt alone.
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
/* Can a gated slot be written at `layer`: a dense gated FFN (gate and up rows, no
 * biases) that eng_edit_check_layer accepts? */
int eng_edit_gate_ok(const eng_model *m, int layer);
/* Does ov (may be NULL) edit feature f of layer, so a slot insert must not take it? */
int eng_edit_claimed(const eng_overlay *ov, int layer, int64_t f);

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
