/*
 * ed_int.h — the edit layer's internals, shared by its files (model.c, insert.c, …) and
 * nobody else: the effective model's state.
 */
#ifndef LQL_ED_INT_H
#define LQL_ED_INT_H

#include "edit.h"

/* What INSERT computes once per binding and edit site (a dense layer, or a routed expert
 * of a MoE layer: expert ≥ 0): the activation covariance and the frame decoys' keys. */
typedef struct edit_site_cache {
    double *cov;              /* [F×F], NULL: an empty entry */
    int layer, expert, F;
    int64_t count;            /* corpus positions behind it */
    float *frame;             /* keys of "The {w} is" at the site [n_frame × F] */
    int n_frame;
    float *xin;               /* a gated dense layer: the FFN inputs of the corpus and of
                               * "The {w} is", a gated slot's negatives [n_xin × H] */
    int64_t n_xin;
} edit_site_cache;
#define SITE_CACHE 8          /* a multi-token target on a MoE layer visits several experts */
#define SITE_CACHE_BYTES ((size_t)256 << 20)   /* older sites beyond it are dropped */

struct ed_model {
    vx_container *c;          /* the base, borrowed */
    char *jpath;              /* the journal's path (explicit or located); NULL: no place */
    char *jerr;               /* why there is no place (said by the first edit), or NULL */
    int explicit_journal;     /* the caller named the journal; else jpath is the default place,
                               * whose directory may be missing */
    vx_journal *j;            /* NULL until opened */
    brw_model *bm;            /* the caller's browse model, borrowed (ed_model_set_browse) */
    ed_overlay *ov;           /* the replayed overlay, NULL when nothing is active */
    ed_attach_fn attach;      /* told the overlay after every replay */
    void *attach_ctx;
    edit_site_cache sites[SITE_CACHE]; /* INSERT's per-site statistics, most recent first */
    int32_t *pres_ids;        /* INSERT: preserved prompts (corpus prefixes), back to back */
    int *pres_lens;
    int n_pres;
};

/* ---------------------------------------------------------------- INSERT's modes */

/* Where an INSERT installs by default: the last layer (MEMIT) or the layer before the end
 * of the knowledge band (the reference's KNN and COMPOSE default). */
typedef enum { INSERT_AT_LAST, INSERT_AT_KNOWLEDGE } insert_default;
/* What an INSERT mode edits: nothing of the FFN (KNN), a dense FFN (COMPOSE), or a dense
 * FFN or the routed experts of a MoE layer (MEMIT). */
typedef enum { SITE_NONE, SITE_DENSE, SITE_ROUTED } edit_site;

/* What every INSERT mode starts with (insert.c). */
int ed_insert_setup(ed_model *es, eng_model *m, const ed_insert_req *st, insert_default dflt,
                    edit_site edits, int *layer, int32_t *tid, ed_err *e);
/* An INSERT whose fact the effective model already answers — every target token above conf
 * after the prompt and the target's tokens before it — would still take a slot (a base
 * feature's weights) and journal an operation: 1 then, with r->answered, p_after,
 * confidence and prompt set, and nothing may be recorded; 0 when the fact needs writing;
 * -1 on error (e set). r->p_before (the whole target's p, the product over its tokens) and
 * r->n_tokens are set either way. */
int ed_insert_answered(eng_model *m, const ed_insert_req *st, double conf, ed_insert_res *r,
                       ed_err *e);
/* INSERT … MODE COMPOSE (compose.c). */
int ed_insert_compose(ed_model *es, eng_model *m, const ed_insert_req *st, ed_insert_res *r,
                      ed_err *e);

/* The model's name as index.json records it ("" when absent). */
const char *ed_model_name(const vx_container *c);
/* A patch file's header for operations on c's base: version 1, the base's model and index
 * sha256, created now (the caller's buffer), described. Borrows every string. */
void ed_patch_header(vx_patch *p, const vx_container *c, const char *description, char now[32]);

#endif
