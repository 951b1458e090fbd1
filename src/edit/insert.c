/*
 * insert.c — INSERT on the effective model (edit.h): the default MEMIT path (per-site
 * activation covariance and decoys cached per binding, one rank-1 update per target token
 * computed by engine/edit_memit.h, journaled as a low-rank insert per edit site) and
 * MODE KNN (a key of the overlay's residual-key store). MODE COMPOSE is compose.c.
 */
#include "ed_int.h"
#include "edit_memit.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Texts the covariance corpus is sampled from (each followed by 8 sampled tokens: what is
 * preserved is mostly prompts, whose activations are short-context ones — measured on the
 * held-out set, 256 texts of 8 tokens kept more unseen prompts than 32 of 48). */
static const char *const corpus_starts[] = {
    "The", "In", "A", "It", "He", "She", "We", "Once", "This", "There", "I", "They",
    "When", "My", "All", "What",
};
#define CORPUS_SEQS 256
#define CORPUS_LEN 8
#define CORPUS_SEED 1
#define DECOYS 40            /* template neighbours "The {relation} of {W} is" */
#define FRAME_DECOYS 100     /* "The {w} is": prompts of the fact's frame, any word */
#define DECOY_WEIGHT 2.0     /* both decoy sets together, relative to the corpus */
/* Preserved prompts: corpus prefixes whose next-token distribution steers the optimisation
 * of u (KL, edit_memit.h) — measured (MUTATION.md): mean KL on controls 0.0296 → 0.0146
 * held-out, 0.0112 → 0.0021 suite; 128 prompts gained 0.001 more for twice the cost. */
#define PRESERVED 64
#define KL_WEIGHT 1e5
#define GATE_MARGIN 8.0f     /* a gated slot: SiLU(−8) = −0.003 of SiLU(8) off its prompt */

/* The activation covariance of an edit site (a dense layer, or a routed expert of a MoE
 * layer) and its frame decoys, once per binding and site. */
static int layer_cov(ed_model *es, eng_model *m, int layer, int expert, ed_insert_res *res,
                     vx_err *e, const edit_site_cache **out)
{
    for (int i = 0; i < SITE_CACHE; i++)
        if (es->sites[i].cov && es->sites[i].layer == layer && es->sites[i].expert == expert) {
            *out = &es->sites[i];
            return 0;
        }
    int32_t *ids = NULL;
    int *lens = NULL;
    double *cov = NULL;
    float *frame = NULL, *xin = NULL, *xfr = NULL;
    int64_t count = 0, nxin = 0;
    int nf = 0;
    vx_err ve = {0};
    ed_site_note *notes = realloc(res->sites, (size_t)(res->n_sites + 1) * sizeof *notes);
    if (!notes)
        return vx_errf(e, VX_ENOMEM, "out of memory");
    res->sites = notes;
    /* a gated slot's negatives: the corpus and the frame decoys at the FFN input */
    const int gated = expert < 0 && eng_edit_gate_ok(m, layer);
    int rc = eng_edit_corpus_stats(m, corpus_starts,
                                   (int)(sizeof corpus_starts / sizeof *corpus_starts),
                                   CORPUS_SEQS, CORPUS_LEN, CORPUS_SEED, layer, expert, &ids,
                                   &lens, &cov, &count, gated ? &xin : NULL, &ve) ||
             eng_edit_frame_decoys(m, layer, expert, FRAME_DECOYS, &frame, gated ? &xfr : NULL,
                                   &nf, &ve);
    if (!rc && gated) {
        const int H = eng_model_hidden(m);
        float *all = realloc(xin, (size_t)(count + nf) * H * sizeof *all);
        if (!all) {
            rc = vx_errf(&ve, VX_ENOMEM, "out of memory");
        } else {
            memcpy(all + (size_t)count * H, xfr, (size_t)nf * H * sizeof *all);
            xin = all;
            nxin = count + nf;
        }
    }
    free(xfr);
    /* preserved prompts (once per binding, whatever the site): prefixes of spread corpus
     * texts, 3 to 9 tokens long */
    const int npres = es->pres_ids ? 0 : PRESERVED;
    int32_t *pids = rc || !npres ? NULL : malloc((size_t)(npres * 9 + 1) * sizeof *pids);
    int *plens = rc || !npres ? NULL : malloc((size_t)(npres + 1) * sizeof *plens);
    if (!rc && npres && (!pids || !plens))
        rc = vx_errf(&ve, VX_ENOMEM, "out of memory");
    size_t used = 0;
    int q = 0;
    for (int i = 0, off = 0; !rc && q < npres && i < CORPUS_SEQS; off += lens[i++]) {
        if (i % (CORPUS_SEQS / npres))
            continue;
        int len = 3 + q % 7 < lens[i] ? 3 + q % 7 : lens[i];
        memcpy(pids + used, ids + off, (size_t)len * sizeof *pids);
        used += (size_t)len;
        plens[q++] = len;
    }
    free(ids);
    free(lens);
    if (rc) {
        free(cov);
        free(frame);
        free(xin);
        free(pids);
        free(plens);
        *e = ve;
        return -1;
    }
    if (npres) {
        es->pres_ids = pids;
        es->pres_lens = plens;
        es->n_pres = q;
    }
    free(es->sites[SITE_CACHE - 1].cov);
    free(es->sites[SITE_CACHE - 1].frame);
    free(es->sites[SITE_CACHE - 1].xin);
    memmove(es->sites + 1, es->sites, (SITE_CACHE - 1) * sizeof *es->sites);
    const int F = expert >= 0 ? eng_model_expert_features(m) : eng_model_ffn_features(m, layer);
    es->sites[0] = (edit_site_cache){cov, layer, expert, F, count, frame, nf, xin, nxin};
    *out = &es->sites[0];
    /* a site's covariance is 8·F² bytes (128 MB at 4096 features, 970 MB at 11008): the
     * newest is kept, older ones while they fit the budget */
    size_t bytes = 0;
    for (int i = 0; i < SITE_CACHE; i++) {
        bytes += (size_t)es->sites[i].F * (size_t)es->sites[i].F * sizeof(double);
        if (i > 0 && bytes > SITE_CACHE_BYTES) {
            free(es->sites[i].cov);
            free(es->sites[i].frame);
            free(es->sites[i].xin);
            es->sites[i] = (edit_site_cache){0};
        }
    }
    res->sites[res->n_sites++] = (ed_site_note){layer, expert, (long long)count, CORPUS_SEQS};
    return 0;
}

/* Keys of the active low-rank inserts at a site (layer, expert): [*n × F], malloc'd. */
static int layer_keys(ed_model *es, int layer, int expert, int F, float **keys, int *n,
                      vx_err *e)
{
    vx_op *ops = NULL;
    size_t nops = 0;
    *keys = NULL;
    *n = 0;
    if (ed_active_ops(es, &ops, &nops, e))
        return -1;
    size_t rows = 0;
    for (size_t i = 0; i < nops; i++) {
        const vx_opvec *key = vx_op_vec(&ops[i], "key");
        if (ops[i].kind == VX_OP_INSERT && ops[i].layer == layer &&
            ops[i].expert == expert && key && key->cols == F)
            rows += (size_t)key->rows;
    }
    float *k = malloc((rows + 1) * (size_t)F * sizeof *k);
    if (!k) {
        vx_ops_free(ops, nops);
        return vx_errf(e, VX_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < nops; i++) {
        const vx_opvec *key = vx_op_vec(&ops[i], "key");
        if (ops[i].kind != VX_OP_INSERT || ops[i].layer != layer || ops[i].expert != expert ||
            !key || key->cols != F)
            continue;
        memcpy(k + (size_t)*n * F, key->data, (size_t)key->rows * F * sizeof *k);
        *n += (int)key->rows;
    }
    vx_ops_free(ops, nops);
    *keys = k;
    return 0;
}

/* The canonical prompts of the active inserts at dense layer `layer` other than prompt
 * (a gated slot stays off on them): *out [*n] malloc'd strings. */
static int fact_prompts(ed_model *es, int layer, const char *prompt, char ***out, int *n,
                        vx_err *e)
{
    vx_op *ops = NULL;
    size_t nops = 0;
    *out = NULL;
    *n = 0;
    if (ed_active_ops(es, &ops, &nops, e))
        return -1;
    char **p = malloc((nops + 1) * sizeof *p);
    for (size_t i = 0; p && i < nops; i++) {
        if (ops[i].kind != VX_OP_INSERT || ops[i].layer != layer || ops[i].expert >= 0 ||
            !ops[i].entity || !ops[i].relation)
            continue;
        char *q = eng_edit_prompt(ops[i].relation, ops[i].entity);
        int dup = q && !strcmp(q, prompt);
        for (int k = 0; q && k < *n && !dup; k++)
            dup = !strcmp(q, p[k]);
        if (dup || !q)
            free(q);
        else
            p[(*n)++] = q;
    }
    vx_ops_free(ops, nops);
    if (!p)
        return vx_errf(e, VX_ENOMEM, "out of memory");
    *out = p;
    return 0;
}

/* What every INSERT mode starts with: the install layer (the request's, else the mode's
 * default) checked against the model — and against what the mode edits (edits) — and the
 * target's id. */
int ed_insert_setup(ed_model *es, eng_model *m, const ed_insert_req *st,
                      insert_default dflt, edit_site edits, int *layer, int32_t *tid,
                      ed_err *e)
{
    const int L = eng_model_layers(m);
    /* the fact's prompt is "The <relation> of <entity> is": a blank part leaves a prompt
     * that names nothing */
    e->at = ED_AT_ENTITY;
    if (!st->entity[strspn(st->entity, " \t\r\n")])
        return vx_errf(&e->vx, VX_EARG, "INSERT needs a non-empty entity");
    e->at = ED_AT_REQUEST;
    if (!st->relation[strspn(st->relation, " \t\r\n")])
        return vx_errf(&e->vx, VX_EARG, "INSERT needs a non-empty relation");
    if (st->layer_given) {
        *layer = st->layer;
    } else if (dflt == INSERT_AT_LAST) {
        *layer = L - 1;
    } else {
        int band[3][2];
        brw_bands(es->bm, band);
        *layer = band[1][1] - 1 >= 0 ? band[1][1] - 1 : 0;
    }
    e->at = ED_AT_LAYER;
    if (*layer < 0 || *layer >= L)
        return vx_errf(&e->vx, VX_EARG, "layer %d is out of range (the model has %d layers: "
                       "0-%d)", *layer, L, L - 1);
    if ((edits == SITE_DENSE && eng_edit_check_layer(m, *layer, &e->vx)) ||
        (edits == SITE_ROUTED && eng_edit_check_site(m, *layer, 0, &e->vx)))
        return -1;
    int32_t *ids = NULL;
    size_t n = 0;
    e->at = ED_AT_TARGET;
    if (ed_target_ids(eng_model_tokenizer(m), st->target, &ids, &n, &e->vx))
        return -1;
    *tid = ids[0];
    free(ids);
    /* KNN overrides one prediction and COMPOSE writes one feature's token */
    if (n > 1 && st->mode != ED_MEMIT && st->mode_named)
        return vx_errf(&e->vx, VX_EARG, "target \"%s\" is %zu tokens; MODE %s writes one "
                       "token (the default MODE MEMIT writes them all)", st->target, n,
                       st->mode == ED_KNN ? "KNN" : "COMPOSE");
    e->at = ED_AT_REQUEST;
    return 0;
}

/* p(t_j) after ids[0..n) and the target's tokens before t_j, for every target token, through
 * m as its overlay stands: one session appending the next target token, as greedy
 * generation reads them. p [nt] out. */
static int target_ps(eng_model *m, const int32_t *ids, size_t n, const int32_t *tids, size_t nt,
                     double *p, vx_err *e)
{
    const int V = eng_model_vocab(m);
    int32_t *seq = malloc((n + nt) * sizeof *seq);
    float *lg = malloc((size_t)V * sizeof *lg);
    eng_session *ss = NULL;
    int rc = -1;
    if (!seq || !lg) {
        vx_errf(e, VX_ENOMEM, "out of memory");
        goto done;
    }
    memcpy(seq, ids, n * sizeof *seq);
    memcpy(seq + n, tids, nt * sizeof *seq);
    if (eng_session_new(m, (int)(n + nt), &ss, e))
        goto done;
    for (size_t j = 0; j < nt; j++) {
        if (j ? eng_forward(ss, seq + n + j - 1, 1, lg, NULL, e)
              : eng_forward(ss, seq, (int)n, lg, NULL, e))
            goto done;
        p[j] = eng_edit_p(lg, V, tids[j]);
    }
    rc = 0;
done:
    eng_session_free(ss);
    free(seq);
    free(lg);
    return rc;
}

int ed_insert_answered(eng_model *m, const ed_insert_req *st, double conf, ed_insert_res *r,
                       ed_err *e)
{
    const eng_tokenizer *tok = eng_model_tokenizer(m);
    char *prompt = eng_edit_prompt(st->relation, st->entity);
    int32_t *ids = NULL, *tids = NULL;
    size_t n = 0, nt = 0;
    double *pj = NULL, p = 1;
    int above = 1, rc = -1;
    if (!prompt) {
        vx_errf(&e->vx, VX_ENOMEM, "out of memory");
        goto done;
    }
    if (eng_tok_encode(tok, prompt, strlen(prompt), 1, &ids, &n, &e->vx)) {
        e->at = ED_AT_ENTITY;
        goto done;
    }
    if (ed_target_ids(tok, st->target, &tids, &nt, &e->vx)) {
        e->at = ED_AT_TARGET;
        goto done;
    }
    if (!(pj = malloc(nt * sizeof *pj))) {
        vx_errf(&e->vx, VX_ENOMEM, "out of memory");
        goto done;
    }
    if (target_ps(m, ids, n, tids, nt, pj, &e->vx))
        goto done;
    for (size_t j = 0; j < nt; j++) {
        p *= pj[j];
        above = above && pj[j] > conf;
    }
    rc = above;
    /* the whole target's p before the statement, whether or not it is written */
    r->p_before = p;
    r->n_tokens = nt;
    if (above) {
        r->answered = 1;
        r->p_after = p;
        r->confidence = conf;
        r->prompt = prompt;
        prompt = NULL;
    }
done:
    free(pj);
    free(tids);
    free(ids);
    free(prompt);
    return rc;
}

/* INSERT … MODE KNN: the residual after `layer` at the canonical prompt's last position,
 * through the effective model, journaled as an insert_knn (key stored as captured; the
 * store normalises it). Default layer: the knowledge band's last layer − 1, as the
 * reference. */
static int insert_knn(ed_model *es, eng_model *m, const ed_insert_req *st, ed_insert_res *r,
                      ed_err *e)
{
    int layer;
    int32_t tid;
    if (ed_insert_setup(es, m, st, INSERT_AT_KNOWLEDGE, SITE_NONE, &layer, &tid, e))
        return -1;
    const int L = eng_model_layers(m), H = eng_model_hidden(m);
    double conf = !isnan(st->confidence) ? st->confidence : 1.0;
    char *prompt = eng_edit_prompt(st->relation, st->entity);
    int32_t *ids = NULL;
    size_t n = 0;
    float *res = malloc((size_t)L * H * sizeof *res);
    vx_err ve = {0};
    vx_op op;
    vx_op_init(&op, VX_OP_INSERT_KNN);
    int rc = -1;
    if (!prompt || !res) {
        vx_errf(&e->vx, VX_ENOMEM, "out of memory");
        goto done;
    }
    if (eng_tok_encode(eng_model_tokenizer(m), prompt, strlen(prompt), 1, &ids, &n, &ve) ||
        ed_last_residuals(m, ids, n, res, NULL, &ve)) {
        e->vx = ve;
        e->at = ED_AT_ENTITY;
        goto done;
    }
    op.layer = layer;
    op.confidence = conf;
    op.target_id = tid;
    if (vx_op_set_str(&op.entity, st->entity, &ve) ||
        vx_op_set_str(&op.relation, st->relation, &ve) ||
        vx_op_set_str(&op.target, st->target, &ve) || vx_op_set_str(&op.mode, "knn", &ve) ||
        vx_op_set_vec(&op, "key", 1, H, res + (size_t)layer * H, &ve)) {
        e->vx = ve;
        goto done;
    }
    r->layer = layer;
    if (ed_record(es, st->text, &op, 1, &r->info, &e->vx))
        goto done;
    ed_counts cnt;
    ed_overlay_counts(es->ov, &cnt);
    r->knn_entries = cnt.knn;
    r->prompt = prompt;
    prompt = NULL;
    rc = 0;
done:
    vx_op_clear(&op);
    free(prompt);
    free(ids);
    free(res);
    return rc;
}
/* An edit site's inputs to the δ optimisation: its covariance (cached per binding), the keys
 * of the active inserts there with room for `extra` more, and its template and frame
 * decoys. *keys and *decoys are replaced (the caller frees them, also on failure). */
static int site_inputs(ed_model *es, eng_model *m, const ed_insert_req *st, int layer, int site,
                       size_t extra, ed_insert_res *r, const edit_site_cache **sc, int *F,
                       float **keys, int *nk, float **decoys, int *nd, vx_err *e)
{
    free(*keys);
    free(*decoys);
    *keys = *decoys = NULL;
    *nk = *nd = 0;
    *F = site >= 0 ? eng_model_expert_features(m) : eng_model_ffn_features(m, layer);
    if (layer_cov(es, m, layer, site, r, e, sc) || layer_keys(es, layer, site, *F, keys, nk, e) ||
        eng_edit_decoys(m, layer, site, st->relation, st->entity, DECOYS, decoys, nd, e))
        return -1;
    float *all = realloc(*decoys, (size_t)(*nd + (*sc)->n_frame + 1) * *F * sizeof *all);
    if (all)
        *decoys = all;
    float *grown = realloc(*keys, (*nk + extra + 1) * (size_t)*F * sizeof *grown);
    if (grown)
        *keys = grown;
    if (!all || !grown)
        return vx_errf(e, VX_ENOMEM, "out of memory");
    memcpy(*decoys + (size_t)*nd * *F, (*sc)->frame, (size_t)(*sc)->n_frame * *F * sizeof **decoys);
    *nd += (*sc)->n_frame;
    return 0;
}

/* The δ optimisation's options for target token tid at a site; g: the token's gated slot
 * (its paraphrase-style positives share δ), NULL for a rank-1 update. */
static eng_insert_opts memit_opts(const ed_model *es, int layer, int site, int32_t tid,
                                  const edit_site_cache *sc, const float *keys, int nk,
                                  const float *decoys, int nd, double conf,
                                  const eng_gate_slot *g)
{
    eng_insert_opts io = {layer, site, tid, sc->cov, keys, nk, decoys, nd, DECOY_WEIGHT,
                          1e-2, 100, (float)conf, 0.02f, 4.0f, es->pres_ids, es->pres_lens,
                          es->n_pres, g ? 0 : KL_WEIGHT, NULL, NULL, NULL, 0};
    if (g) {
        io.aux_ids = g->para_ids;
        io.aux_lens = g->para_lens;
        io.aux_ratio = g->para_ratio;
        io.n_aux = g->n_para;
    }
    return io;
}

/* The edit site of target token j: its top-1 expert, -1 a dense layer (experts [nt × (K + 1)],
 * [K] of each row). */
static int token_site(const int *experts, int K, size_t j)
{
    return experts[j * (size_t)(K + 1) + K];
}

/* The edits one MEMIT statement writes, one per target token, over the journal's. */
typedef struct {
    int layer, gated, K;
    double conf;
    const int32_t *seq;         /* the prompt (n ids), then the target's tokens but the last */
    size_t n;
    const int32_t *tids;        /* the target's nt ids */
    size_t nt;
    const int *experts;         /* [nt × (K + 1)]: [K] each token's edit site */
    eng_insert_fact *fx;        /* [nt] each token's δ (a rank-1 update's v and key too) */
    eng_gate_slot *gs;          /* [nt] gated: each token's slot */
    eng_feature_edit *eds;      /* the journal's nbe feature edits, then the tokens' slots */
    size_t nbe;
    eng_lowrank *lrs;           /* the journal's nbase low-rank updates, then the tokens' */
    size_t nbase;
    const eng_overlay *base;    /* the journal's overlay, restored after each trial */
} memit_edits;

#define SETTLE_ROUNDS 3

/* Each token reached CONFIDENCE with the edits of the tokens before it; the later ones reach
 * its position a little too (a gated slot is SiLU(≤ −4) off its prompt, not 0; a rank-1
 * update by its key's overlap), which left a token of "Buenos Aires" at p 0.4986 after an
 * insert that claimed 0.5. So the whole target is read through the statement's complete
 * overlay, and a token below CONFIDENCE is fitted again (its δ; a slot keeps its gate and
 * up rows) with every other token's edit present, for a few rounds. *p_after: the whole
 * target's p as written (the product over its tokens). */
static int settle(ed_model *es, eng_model *m, const ed_insert_req *st, ed_insert_res *r,
                  const memit_edits *x, double *p_after, int *steps, ed_err *e)
{
    const size_t nt = x->nt;
    const int gated = x->gated;
    float *keys = NULL, *decoys = NULL;
    int nk = 0, nd = 0, F = 0, rc = -1, loaded = -2, nk0 = 0;
    const edit_site_cache *sc = NULL;
    eng_feature_edit *eds = malloc((x->nbe + nt + 1) * sizeof *eds);
    eng_lowrank *lrs = malloc((x->nbase + nt + 1) * sizeof *lrs);
    double *pj = malloc(nt * sizeof *pj);
    if (!eds || !lrs || !pj) {
        vx_errf(&e->vx, VX_ENOMEM, "out of memory");
        goto done;
    }
    memcpy(eds, x->eds, x->nbe * sizeof *eds);
    memcpy(lrs, x->lrs, x->nbase * sizeof *lrs);
    for (int round = 0;; round++) {
        const eng_overlay all = {x->eds, x->nbe + (gated ? nt : 0), x->lrs,
                                 x->nbase + (gated ? 0 : nt), NULL, 0};
        eng_model_set_overlay(m, &all);
        const int prc = target_ps(m, x->seq, x->n, x->tids, nt, pj, &e->vx);
        eng_model_set_overlay(m, x->base);
        if (prc)
            goto done;
        size_t low = 0;
        while (low < nt && pj[low] > x->conf)
            low++;
        if (low == nt) {
            *p_after = 1;
            for (size_t j = 0; j < nt; j++)
                *p_after *= pj[j];
            break;
        }
        if (round == SETTLE_ROUNDS) {
            const char *piece = eng_tok_piece(eng_model_tokenizer(m), x->tids[low]);
            char *prompt = eng_edit_prompt(st->relation, st->entity);
            e->at = ED_AT_TARGET;
            vx_errf(&e->vx, VX_EARG, "could not make \"%s\" reach p %.2f after \"%s\" at "
                    "layer %d: token %zu of %zu, '%s', stays at p %.4f once the target's other "
                    "tokens are written; nothing inserted", st->target, x->conf,
                    prompt ? prompt : "?", x->layer, low + 1, nt, piece ? piece : "?", pj[low]);
            free(prompt);
            goto done;
        }
        for (size_t j = low; j < nt; j++) {
            if (pj[j] > x->conf)
                continue;
            const int site = token_site(x->experts, x->K, j);
            /* a site's inputs once (its decoys are forward passes), its journal keys kept
             * and the other tokens' appended afresh for each token */
            if (site != loaded) {
                if (site_inputs(es, m, st, x->layer, site, nt, r, &sc, &F, &keys, &nk, &decoys,
                                &nd, &e->vx))
                    goto done;
                loaded = site;
                nk0 = nk;
            }
            nk = nk0;
            /* every other token: its key protected at this site, its edit on the overlay */
            size_t ne = x->nbe, nl = x->nbase;
            for (size_t i = 0; i < nt; i++) {
                if (i == j)
                    continue;
                if (token_site(x->experts, x->K, i) == site)
                    memcpy(keys + (size_t)nk++ * F, x->fx[i].key, (size_t)F * sizeof *keys);
                if (gated)
                    eds[ne++] = x->eds[x->nbe + i];
                else
                    lrs[nl++] = x->lrs[x->nbase + i];
            }
            const eng_overlay trial = {eds, ne, lrs, nl, NULL, 0};
            const eng_insert_opts io = memit_opts(es, x->layer, site, x->tids[j], sc, keys, nk,
                                                  decoys, nd, x->conf,
                                                  gated ? &x->gs[j] : NULL);
            eng_insert_fact nf = {0};
            eng_model_set_overlay(m, &trial);
            const int ir = eng_edit_insert(m, x->seq, (int)(x->n + j), &io, &nf, &e->vx);
            eng_model_set_overlay(m, x->base);
            if (ir) {
                eng_insert_fact_free(&nf);
                goto done;
            }
            if (gated)
                eng_edit_gate_down(m, x->layer, &x->gs[j], nf.u);
            else
                x->lrs[x->nbase + j] = (eng_lowrank){x->layer, 1, nf.u, nf.v, site};
            *steps += nf.steps;
            eng_insert_fact_free(&x->fx[j]);
            x->fx[j] = nf;
        }
    }
    rc = 0;
done:
    free(keys);
    free(decoys);
    free(eds);
    free(lrs);
    free(pj);
    return rc;
}

/* INSERT (MODE MEMIT, the default): one rank-1 covariance-whitened down_proj update per
 * target token (engine/edit_memit.h), journaled as a low-rank insert per edit site. */
static int insert_memit(ed_model *es, eng_model *m, const ed_insert_req *st, ed_insert_res *r,
                        ed_err *e)
{
    double conf = !isnan(st->confidence) ? st->confidence : 0.5;
    int layer;
    int32_t tid;
    if (ed_insert_setup(es, m, st, INSERT_AT_LAST, SITE_ROUTED, &layer, &tid, e))
        return -1;
    int answered = ed_insert_answered(m, st, conf, r, e);
    if (answered)
        return answered < 0 ? -1 : 0;
    vx_err ve = {0};
    const int H = eng_model_hidden(m), K = eng_model_top_k(m);
    char *prompt = eng_edit_prompt(st->relation, st->entity);
    int32_t *ids = NULL;
    size_t n = 0;
    float *keys = NULL, *decoys = NULL;
    int nk = 0, nd = 0, rc = -1, F = 0, site = -2;
    const edit_site_cache *sc = NULL;
    int32_t *tids = NULL, *seq = NULL;
    size_t nt = 0, nops = 0;
    eng_insert_fact *fx = NULL;
    eng_lowrank *lrs = NULL;
    int *experts = NULL;
    float *wroute = NULL;
    /* the overlay the statement starts from (the journal's), restored after each trial */
    const eng_overlay *base = es->ov ? ed_overlay_eng(es->ov) : NULL;
    const size_t nbase = base ? base->n_lowrank : 0, nbe = base ? base->n_edits : 0;
    /* a dense gated FFN gets one gated feature per target token (edit_memit.h), else
     * (MoE experts, plain MLPs) a rank-1 down_proj update */
    int gated = eng_edit_gate_ok(m, layer);
    eng_feature_edit *eds = NULL;
    eng_gate_slot *gs = NULL;
    char **others = NULL;
    int nothers = 0;
    vx_op *ops = NULL;
    r->layer = layer;
    if (!prompt) {
        vx_errf(&e->vx, VX_ENOMEM, "out of memory");
        goto done;
    }
    if (eng_tok_encode(eng_model_tokenizer(m), prompt, strlen(prompt), 1, &ids, &n, &ve)) {
        e->vx = ve;
        e->at = ED_AT_ENTITY;
        goto done;
    }
    /* a target of several tokens is one rank-1 update per token, each keyed on the prompt
     * followed by the target's earlier tokens and protecting the keys before it, so that
     * greedy generation writes the whole target; journaled as one insert per edit site */
    if (ed_target_ids(eng_model_tokenizer(m), st->target, &tids, &nt, &e->vx)) {
        e->at = ED_AT_TARGET;
        goto done;
    }
    seq = malloc((n + nt) * sizeof *seq);
    fx = calloc(nt, sizeof *fx);
    lrs = malloc((nbase + nt + 1) * sizeof *lrs);
    experts = malloc((nt * (size_t)(K + 1) + 1) * sizeof *experts);
    wroute = malloc((nt * (size_t)(K + 1) + 1) * sizeof *wroute);
    ops = calloc(nt, sizeof *ops);
    eds = malloc((nbe + nt + 1) * sizeof *eds);
    gs = calloc(nt, sizeof *gs);
    r->gates = calloc(nt, sizeof *r->gates);
    if (!seq || !fx || !lrs || !experts || !wroute || !ops || !eds || !gs || !r->gates) {
        vx_errf(&e->vx, VX_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t j = 0; j < nt; j++)
        vx_op_init(&ops[j], VX_OP_INSERT);
    memcpy(seq, ids, n * sizeof *seq);
    if (nt > 1)
        memcpy(seq + n, tids, (nt - 1) * sizeof *seq);
    if (nbase)
        memcpy(lrs, base->lowrank, nbase * sizeof *lrs);
    if (nbe)
        memcpy(eds, base->edits, nbe * sizeof *eds);
    if (gated && fact_prompts(es, layer, prompt, &others, &nothers, &e->vx))
        goto done;
    double p_after = 0;
    int steps = 0;
    for (size_t j = 0; j < nt; j++) {
        /* the edit site: the layer, or on a MoE layer the top-1 expert the token's key
         * routes to (the router's first choice; an edit of the layer's FFN cannot change
         * the routing at that layer, so the expert stays the one the key reaches) */
        int *ex = experts + j * (size_t)(K + 1);
        float *wx = wroute + j * (size_t)(K + 1);
        int nr = eng_edit_route(m, layer, seq, (int)(n + j), ex, wx, &ve);
        if (nr < 0) {
            e->vx = ve;
            goto done;
        }
        ex[K] = nr > 0 ? ex[0] : -1;
        const int want = ex[K];
        if (want != site) {
            site = want;
            if (site_inputs(es, m, st, layer, site, nt, r, &sc, &F, &keys, &nk, &decoys, &nd,
                            &e->vx))
                goto done;
            /* the statement's earlier tokens written at this site are protected too */
            for (size_t i = 0; i < j; i++)
                if (token_site(experts, K, i) == site)
                    memcpy(keys + (size_t)nk++ * F, fx[i].key, (size_t)F * sizeof *keys);
        }
        eng_overlay trial = {eds, nbe + (gated ? j : 0), lrs, nbase + (gated ? 0 : j), NULL, 0};
        eng_model_set_overlay(m, &trial);
        /* gated: the gate first, so that δ can also raise the target on the fact's other
         * wordings (each receives its share of δ) */
        int ir = 0;
        if (gated) {
            eng_gate_opts go = {layer, sc->cov, sc->xin, sc->n_xin, st->relation, st->entity,
                                DECOYS, (const char *const *)others, nothers, GATE_MARGIN,
                                (int)j, 1};
            ir = eng_edit_gate_fit(m, seq, (int)(n + j), &go, &gs[j], &ve);
        }
        const eng_insert_opts io = memit_opts(es, layer, site, tids[j], sc, keys, nk, decoys, nd,
                                              conf, gated ? &gs[j] : NULL);
        if (!ir)
            ir = eng_edit_insert(m, seq, (int)(n + j), &io, &fx[j], &ve);
        if (!ir && gated && fx[j].p_after > conf)
            eng_edit_gate_down(m, layer, &gs[j], fx[j].u);
        eng_model_set_overlay(m, base);
        if (ir == 1) {
            /* no gate tells this prompt apart: the whole statement as rank-1 updates */
            snprintf(r->fallback, sizeof r->fallback, "%s: a rank-1 update instead", ve.msg);
            for (size_t i = 0; i <= j; i++)
                eng_insert_fact_free(&fx[i]);
            gated = 0;
            site = -2;
            j = (size_t)-1;
            continue;
        }
        if (ir) {
            e->vx = ve;
            goto done;
        }
        if (!(fx[j].p_after > conf)) {
            const char *piece = eng_tok_piece(eng_model_tokenizer(m), tids[j]);
            e->at = ED_AT_TARGET;
            vx_errf(&e->vx, VX_EARG, "could not make \"%s\" reach p %.2f after \"%s\" in %d "
                    "steps at layer %d (token %zu of %zu, '%s': p %.4f); nothing inserted",
                    st->target, conf, prompt, fx[j].steps, layer, j + 1, nt,
                    piece ? piece : "?", fx[j].p_after);
            goto done;
        }
        memcpy(keys + (size_t)nk++ * F, fx[j].key, (size_t)F * sizeof *keys);
        lrs[nbase + j] = (eng_lowrank){layer, 1, fx[j].u, fx[j].v, site};
        if (gated)
            eds[nbe + j] = (eng_feature_edit){layer, gs[j].feature, 0, gs[j].gate, gs[j].up,
                                              gs[j].down};
        steps += fx[j].steps;
    }
    const memit_edits sm = {layer, gated, K, conf, seq, n, tids, nt, experts, fx, gs, eds, nbe,
                            lrs, nbase, base};
    if (settle(es, m, st, r, &sm, &p_after, &steps, e))
        goto done;
    /* gated: one slot insert per target token, mode "gated" (replayed as the slot's rows) */
    for (size_t j = 0; gated && j < nt; j++) {
        vx_op *op = &ops[nops++];
        /* the decoded text, as UPDATE and COMPOSE write down_meta.t (not the vocabulary
         * piece: "ĠLondon") */
        const char *piece = brw_token_text(es->bm, tids[j]);
        op->layer = layer;
        op->feature = gs[j].feature;
        op->confidence = conf;
        op->has_meta = 1;
        op->meta_id = tids[j];
        op->meta_c = conf;
        if (vx_op_set_str(&op->entity, st->entity, &ve) ||
            vx_op_set_str(&op->relation, st->relation, &ve) ||
            vx_op_set_str(&op->target, st->target, &ve) || vx_op_set_str(&op->mode, "gated", &ve) ||
            vx_op_set_str(&op->meta_token, piece ? piece : "", &ve) ||
            vx_op_set_vec(op, "gate", 1, H, gs[j].gate, &ve) ||
            vx_op_set_vec(op, "up", 1, H, gs[j].up, &ve) ||
            vx_op_set_vec(op, "down", 1, H, gs[j].down, &ve)) {
            e->vx = ve;
            goto done;
        }
        r->gates[j] = (ed_gate_note){gs[j].feature, gs[j].z_prompt, -0.5 * GATE_MARGIN,
                                     (long long)(gs[j].n_neg - gs[j].n_open),
                                     (long long)gs[j].n_neg};
    }
    r->gated = gated;
    /* rank-1: one insert per edit site, its columns the site's tokens in order (a dense
     * layer, or every token routed to the same expert: one op of rank nt) */
    for (size_t j = 0; !gated && j < nt; j++) {
        const int sj = token_site(experts, K, j);
        int done_site = 0;
        for (size_t i = 0; i < j && !done_site; i++)
            done_site = token_site(experts, K, i) == sj;
        if (done_site)
            continue;
        size_t cols = 0;
        for (size_t i = j; i < nt; i++)
            cols += token_site(experts, K, i) == sj;
        const int Fs = fx[j].features;
        float *U = malloc((size_t)H * cols * sizeof *U), *Vm = malloc((size_t)Fs * cols * sizeof *Vm);
        float *Km = malloc((size_t)Fs * cols * sizeof *Km);
        vx_op *op = &ops[nops++];
        vx_err oe = {0};
        int bad = !U || !Vm || !Km;
        for (size_t i = j, c = 0; i < nt && !bad; i++) {
            if (token_site(experts, K, i) != sj)
                continue;
            for (int h = 0; h < H; h++)
                U[(size_t)h * cols + c] = fx[i].u[h];
            for (int f = 0; f < Fs; f++)
                Vm[(size_t)f * cols + c] = fx[i].v[f];
            memcpy(Km + c * Fs, fx[i].key, (size_t)Fs * sizeof *Km);
            c++;
        }
        op->layer = layer;
        op->expert = sj;
        op->confidence = conf;
        if (bad) {
            vx_errf(&oe, VX_ENOMEM, "out of memory");
        } else if (vx_op_set_str(&op->entity, st->entity, &oe) ||
                   vx_op_set_str(&op->relation, st->relation, &oe) ||
                   vx_op_set_str(&op->target, st->target, &oe) ||
                   vx_op_set_str(&op->mode, "memit", &oe) ||
                   vx_op_set_vec(op, "u", H, (int64_t)cols, U, &oe) ||
                   vx_op_set_vec(op, "v", Fs, (int64_t)cols, Vm, &oe) ||
                   vx_op_set_vec(op, "key", (int64_t)cols, Fs, Km, &oe)) {
            bad = 1;
        }
        free(U);
        free(Vm);
        free(Km);
        if (bad) {
            e->vx = oe;
            goto done;
        }
    }
    r->feature = -1;
    r->p_after = p_after;
    r->steps = steps;
    r->n_tokens = nt;
    r->computed = 1;
    if (ed_record(es, st->text, ops, nops, &r->info, &e->vx))
        goto done;
    r->prompt = prompt;
    prompt = NULL;
    r->top_k = K;
    r->experts = experts;
    r->weights = wroute;
    experts = NULL;
    wroute = NULL;
    rc = 0;
done:
    for (size_t j = 0; ops && j < nt; j++)
        vx_op_clear(&ops[j]);
    free(ops);
    for (size_t j = 0; fx && j < nt; j++)
        eng_insert_fact_free(&fx[j]);
    for (size_t j = 0; gs && j < nt; j++)
        eng_gate_slot_free(&gs[j]);
    for (int i = 0; i < nothers; i++)
        free(others[i]);
    free(others);
    free(gs);
    free(eds);
    free(fx);
    free(lrs);
    free(seq);
    free(tids);
    free(experts);
    free(wroute);
    free(prompt);
    free(ids);
    free(keys);
    free(decoys);
    return rc;
}

/* The latest active insert of req's entity and relation into res->earlier when its target
 * is another: the new fact is written over it and both stay active, which the statement
 * says. */
static int earlier_fact(const ed_model *ed, const ed_insert_req *req, ed_insert_res *res,
                        vx_err *err)
{
    vx_op *ops = NULL;
    size_t n = 0;
    if (ed_active_ops(ed, &ops, &n, err))
        return -1;
    int rc = 0;
    for (size_t i = n; i-- > 0;) {
        const vx_op *o = &ops[i];
        if ((o->kind != VX_OP_INSERT && o->kind != VX_OP_INSERT_KNN) || !o->entity ||
            !o->relation || !o->target || strcmp(o->entity, req->entity) ||
            strcmp(o->relation, req->relation))
            continue;
        if (strcmp(o->target, req->target) && !(res->earlier = strdup(o->target)))
            rc = vx_errf(err, VX_ENOMEM, "out of memory");
        res->earlier_history = o->history_n;
        break;
    }
    vx_ops_free(ops, n);
    return rc;
}

int ed_insert(ed_model *ed, eng_model *m, const ed_insert_req *req, ed_insert_res *res,
              ed_err *err)
{
    memset(res, 0, sizeof *res);
    memset(err, 0, sizeof *err);
    res->feature = -1;
    if (ed_journal_open(ed, 0, &err->vx) || earlier_fact(ed, req, res, &err->vx))
        return -1;
    switch (req->mode) {
    case ED_KNN: return insert_knn(ed, m, req, res, err);
    case ED_COMPOSE: return ed_insert_compose(ed, m, req, res, err);
    default: return insert_memit(ed, m, req, res, err);
    }
}

void ed_insert_res_free(ed_insert_res *res)
{
    free(res->prompt);
    free(res->sites);
    free(res->experts);
    free(res->weights);
    free(res->gates);
    free(res->earlier);
    memset(res, 0, sizeof *res);
}
