/*
 * edit_compose.h — the numerics of INSERT … MODE COMPOSE (REFERENCE-NOTES §6): a new FFN
 * feature whose gate is the canonical prompt's FFN input made orthogonal (modified
 * Gram-Schmidt) to fixed decoys, template decoys and the gates already installed at the
 * layer (× g_ref·30), whose up is the input (× u_ref) and whose down is the target's
 * embedding query (× d_ref·ALPHA); the down is then balanced on the target's probability
 * with the feature attached and shrunk while it pushes a recent install below p 0.20.
 * g_ref, u_ref, d_ref are the medians of the stored gate/up row and down column norms of
 * the layer's first 100 features.
 *
 * The slot, the target's embedding query and the recent installs come from the caller
 * (the mutation layer, src/edit); the model's overlay is the one the feature is added to
 * and is restored on return. Errors are returned as -1 with a vx_err; nothing prints.
 */
#ifndef LQL_EDIT_COMPOSE_H
#define LQL_EDIT_COMPOSE_H

#include <stdint.h>

#include "engine.h"

/* How many recent installs the cross-fact check keeps. */
#define ENG_COMPOSE_RECENT 16

/* A recent install: its canonical prompt and its target's first token. */
typedef struct eng_compose_fact {
    const char *prompt;
    int32_t tid;
} eng_compose_fact;

typedef struct eng_compose_opts {
    int layer, slot;              /* the feature written */
    int32_t target;               /* the target's first token */
    const char *entity, *relation;
    double alpha;                 /* the down's scale, × d_ref */
    const float *temb;            /* [hidden] the target's embedding query */
    const eng_compose_fact *recent;
    int n_recent;
} eng_compose_opts;

typedef struct eng_compose_out {
    float *gate, *up, *down;      /* [hidden] each, one malloc'd block at gate */
    float p_before, p_after;      /* p(target) after the canonical prompt */
    int steps;                    /* balancing steps */
    float ref[3];                 /* g_ref, u_ref, d_ref */
    double norms[3];              /* |gate| |up| |down| */
} eng_compose_out;

/* Compute the feature (m's overlay plus it is what the balancing runs). */
int eng_compose(eng_model *m, const eng_compose_opts *o, eng_compose_out *out, vx_err *err);
void eng_compose_out_free(eng_compose_out *out);

#endif
