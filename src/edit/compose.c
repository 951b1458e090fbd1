/*
 * compose.c — INSERT … MODE COMPOSE on the effective model (edit.h): the free slot, the
 * target's embedding query and the recent compose installs are found here, the feature is
 * computed by the engine (engine/edit_compose.h) and journaled as an insert with
 * gate/up/down vectors.
 */
#include "ed_int.h"
#include "edit_compose.h"
#include "edit_memit.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The slot: the first feature with no base metadata and no overlay claim, else the
 * unclaimed feature with the lowest c_score; -1 when every feature is claimed. */
static int compose_slot(const ed_model *es, const eng_overlay *cur, int layer, int F)
{
    int best = -1;
    float best_c = INFINITY;
    for (int f = 0; f < F; f++) {
        if (eng_edit_claimed(cur, layer, f))
            continue;
        brw_meta md;
        if (brw_feature_meta(es->bm, NULL, layer, f, &md) != 0 || !md.present)
            return f;
        if (md.c_score < best_c) {
            best_c = md.c_score;
            best = f;
        }
    }
    return best;
}

/* The canonical prompts (malloc'd) and targets of the last ENG_COMPOSE_RECENT compose
 * installs. */
static int recent_composes(const ed_model *es, eng_model *m, eng_compose_fact *out, int *n,
                           vx_err *ve)
{
    vx_op *ops = NULL;
    size_t nops = 0;
    *n = 0;
    if (ed_active_ops(es, &ops, &nops, ve))
        return -1;
    for (size_t i = nops; i-- > 0 && *n < ENG_COMPOSE_RECENT;) {
        const vx_op *o = &ops[i];
        if (o->kind != VX_OP_INSERT || !o->mode || strcmp(o->mode, "compose") || !o->entity ||
            !o->relation || !o->target)
            continue;
        int32_t *ids = NULL;
        size_t ni = 0;
        /* the target's first piece as INSERT resolved it (a lone word boundary skipped) */
        int ok = ed_target_ids(eng_model_tokenizer(m), o->target, &ids, &ni, ve) == 0;
        if (ok && (out[*n].prompt = eng_edit_prompt(o->relation, o->entity))) {
            out[*n].tid = ids[0];
            (*n)++;
        }
        free(ids);
    }
    vx_ops_free(ops, nops);
    return 0;
}

/* INSERT … MODE COMPOSE: a new FFN feature in a free slot (REFERENCE-NOTES §6): gate along
 * the canonical prompt's FFN input made orthogonal to decoys and earlier installs' gates
 * (×g_ref·30), up along the input (×u_ref), down along the target's embedding
 * (×d_ref·ALPHA), then balanced on the target's probability and checked against recent
 * installs. Journaled as an insert with gate/up/down vectors. */
int ed_insert_compose(ed_model *es, eng_model *m, const ed_insert_req *st, ed_insert_res *r,
                      ed_err *e)
{
    double alpha = !isnan(st->alpha) ? st->alpha : 0.10;
    double conf = !isnan(st->confidence) ? st->confidence : 0.9;
    int layer;
    int32_t tid;
    if (ed_insert_setup(es, m, st, INSERT_AT_KNOWLEDGE, SITE_DENSE, &layer, &tid, e))
        return -1;
    int answered = ed_insert_answered(m, st, conf, r, e);
    if (answered)
        return answered < 0 ? -1 : 0;
    const int H = eng_model_hidden(m);
    vx_err ve = {0};
    const int F = eng_model_ffn_features(m, layer);
    const eng_overlay *cur = es->ov ? ed_overlay_eng(es->ov) : NULL;
    float *temb = malloc((size_t)H * sizeof *temb);
    eng_compose_fact recent[ENG_COMPOSE_RECENT];
    eng_compose_out x = {0};
    int nrecent = 0, rc = -1;
    vx_op op;
    vx_op_init(&op, VX_OP_INSERT);
    if (!temb) {
        vx_errf(&e->vx, VX_ENOMEM, "out of memory");
        goto done;
    }
    /* the slot reads every base record of the layer (computed first where not stored) */
    if (brw_meta_prepare_layers(es->bm, &layer, 1, &ve))
        goto vx_fail;
    int slot = compose_slot(es, cur, layer, F);
    if (slot < 0) {
        e->at = ED_AT_LAYER;
        vx_errf(&e->vx, VX_EARG, "MODE COMPOSE: every feature of layer %d is claimed by the "
                "overlay", layer);
        goto done;
    }
    eng_compose_opts co = {layer, slot, tid, st->entity, st->relation, alpha, temb, recent, 0};
    if (brw_entity_query(es->bm, st->target, temb, &ve) ||
        recent_composes(es, m, recent, &nrecent, &ve))
        goto vx_fail;
    co.n_recent = nrecent;
    if (eng_compose(m, &co, &x, &ve))
        goto vx_fail;
    op.layer = layer;
    op.feature = slot;
    op.confidence = conf;
    op.alpha = alpha;
    op.has_meta = 1;
    op.meta_id = tid;
    op.meta_c = conf;
    const char *piece = brw_token_text(es->bm, tid);
    if (vx_op_set_str(&op.entity, st->entity, &ve) ||
        vx_op_set_str(&op.relation, st->relation, &ve) ||
        vx_op_set_str(&op.target, st->target, &ve) || vx_op_set_str(&op.mode, "compose", &ve) ||
        vx_op_set_str(&op.meta_token, piece ? piece : "", &ve) ||
        vx_op_set_vec(&op, "gate", 1, H, x.gate, &ve) ||
        vx_op_set_vec(&op, "up", 1, H, x.up, &ve) ||
        vx_op_set_vec(&op, "down", 1, H, x.down, &ve))
        goto vx_fail;
    r->layer = layer;
    r->feature = slot;
    r->p_before = x.p_before;
    r->p_after = x.p_after;
    r->confidence = conf;
    r->steps = x.steps;
    r->prompt = eng_edit_prompt(st->relation, st->entity);
    r->n_tokens = 1;
    r->computed = 1;
    if (ed_record(es, st->text, &op, 1, &r->info, &e->vx))
        goto done;
    memcpy(r->norms, x.norms, sizeof r->norms);
    r->d_ref = x.ref[2];
    r->alpha = alpha;
    rc = 0;
    goto done;
vx_fail:
    e->vx = ve;
done:
    for (int i = 0; i < nrecent; i++)
        free((char *)recent[i].prompt);
    eng_compose_out_free(&x);
    vx_op_clear(&op);
    free(temb);
    return rc;
}
