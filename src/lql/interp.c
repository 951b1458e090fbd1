/*
 * interp.c — the statement table (dispatch, `.help`, the reference docs), the session's
 * lifecycle and the error helpers every handler shares.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "interp.h"

/* ---------------------------------------------------------------- the table */

static const lql_stmt_def defs[] = {
    {LQL_S_USE, "USE", lql_h_use, LQL_CLASS_LOCAL,
     "USE \"container\" {JOURNAL \"file\" | PROFILE \"name\"}",
     "Bind a VINDEX3 container for the statements that follow. JOURNAL names the overlay "
     "journal file (default: beside the container); PROFILE selects one of the container's "
     "declared execution profiles. Returns a note naming the model and its geometry."},
    {LQL_S_TOKENIZE, "TOKENIZE", lql_h_tokenize, LQL_CLASS_READ,
     "TOKENIZE \"text\"",
     "The bound model's tokens for text, special tokens applied as the model's tokenizer "
     "does: one row per token with position, id and vocabulary piece."},
    {LQL_S_EXTRACT, "EXTRACT", lql_h_extract, LQL_CLASS_LOCAL,
     "EXTRACT MODEL \"hf_dir\" INTO \"out\" {WITH (INFERENCE|ALL) | LAYERS ALL | "
     "DTYPE (f32|f16|bf16)}",
     "Encode a Hugging Face checkpoint directory into a new VINDEX3 container (written "
     "beside, renamed into place when complete): every layer and operand. WITH WEIGHTS is "
     "the legacy name of INFERENCE. Refused: WITH BROWSE and LAYERS a-b (the encoder writes "
     "only complete containers) and quantised DTYPEs (q8_0, q4_k, …: encode, then REPRESENT "
     "\"object\" AS q8_0). Shows progress on a terminal."},
    {LQL_S_STATS, "STATS", lql_h_stats, LQL_CLASS_READ,
     "STATS",
     "Facts about the bound container: model, geometry, feature counts, layer bands with "
     "their features, features with down-meta (for a container that stores none: how many are "
     "known so far, computed or read from the down-meta cache, and the cache's path or why "
     "there is none), gate bytes, bytes on disk, path."},
    {LQL_S_SHOW_LAYERS, "SHOW LAYERS", lql_h_show_layers, LQL_CLASS_READ,
     "SHOW LAYERS [range]",
     "One row per layer: attention operator, window, FFN kind, features and the bytes of "
     "the layer's operands; band, most frequent down-meta top token and its count, "
     "features with down-meta (overlay applied) and gate dtype."},
    {LQL_S_SHOW_FEATURES, "SHOW FEATURES", lql_h_show_features, LQL_CLASS_READ,
     "SHOW FEATURES layer {WHERE conds | LIMIT n}",
     "The FFN features of one layer with their output tokens (down-meta) and score. "
     "LIMIT defaults to 20; a note says when that cut rows."},
    {LQL_S_SHOW_RELATIONS, "SHOW RELATIONS", lql_h_show_relations, LQL_CLASS_READ,
     "SHOW RELATIONS {AT LAYER n | WITH EXAMPLES | LIMIT n}",
     "Relation labels and the output tokens they lead to. LIMIT defaults to 50; a note "
     "says when that cut rows."},
    {LQL_S_SHOW_ENTITIES, "SHOW ENTITIES", lql_h_show_entities, LQL_CLASS_READ,
     "SHOW ENTITIES {AT LAYER n | LIMIT n}",
     "Entity-like output tokens (capitalised words) with their feature counts and scores. "
     "LIMIT defaults to 50; a note says when that cut rows."},
    {LQL_S_SHOW_MODELS, "SHOW MODELS", lql_h_show_models, LQL_CLASS_LOCAL,
     "SHOW MODELS",
     "Containers (directories holding index.json) in the current directory; needs no "
     "binding."},
    {LQL_S_SHOW_COMPONENTS, "SHOW COMPONENTS", lql_h_show_components, LQL_CLASS_READ,
     "SHOW COMPONENTS",
     "The components of the bound container's system graph with their role and layers."},
    {LQL_S_SHOW_REPRESENTATIONS, "SHOW REPRESENTATIONS", lql_h_show_representations, LQL_CLASS_READ,
     "SHOW REPRESENTATIONS",
     "Each logical object's representations: dtype, fidelity, segments and bytes."},
    {LQL_S_SHOW_PATCHES, "SHOW PATCHES", lql_h_show_patches, LQL_CLASS_READ,
     "SHOW PATCHES",
     "The patches in the overlay with their operation counts."},
    {LQL_S_SHOW_HISTORY, "SHOW HISTORY", lql_h_show_history, LQL_CLASS_READ,
     "SHOW HISTORY",
     "The journal's statements, numbered for ROLLBACK TO."},
    {LQL_S_WALK, "WALK", lql_h_walk, LQL_CLASS_READ,
     "WALK \"prompt\" {TOP n | LAYERS range | MODE (HYBRID|PURE|DENSE) | COMPARE}",
     "Feature scan without attention: the prompt's last-token embedding (times the "
     "embedding scale) against every layer's gate rows; per layer the features with the "
     "largest |gate·q| (HYBRID), the largest signed gate·q (PURE) or the largest "
     "|act(gate·q)·(up·q)| (DENSE, reads the up rows too), with their output tokens."},
    {LQL_S_EXPLAIN_WALK, "EXPLAIN WALK", lql_h_explain_walk, LQL_CLASS_READ,
     "EXPLAIN WALK \"prompt\" {LAYERS range | TOP n | VERBOSE | MODE (HYBRID|PURE|DENSE)}",
     "The WALK scan one hit per row, with the plan: query token, layers, bytes read."},
    {LQL_S_DESCRIBE, "DESCRIBE", lql_h_describe, LQL_CLASS_READ,
     "DESCRIBE \"entity\" {ALL LAYERS | SYNTAX | KNOWLEDGE | OUTPUT | AT LAYER n | "
     "RELATIONS ONLY | BRIEF | VERBOSE | RAW}",
     "What the model associates with an entity: edges (relation, target token, gate "
     "strength, layers) grouped into the container's syntax / knowledge / output bands."},
    {LQL_S_SELECT, "SELECT", lql_h_select, LQL_CLASS_READ,
     "SELECT (*|field, …) FROM (EDGES|FEATURES|ENTITIES) {NEAREST TO \"x\" AT LAYER n | "
     "WHERE cond AND … | ORDER BY field [ASC|DESC] | LIMIT n}",
     "Query edges, features or entities. Conditions: = != > < >= <= LIKE IN (…) on "
     "layer, feature, token/entity, relation, score/confidence. LIMIT defaults to 20; a "
     "note says when that cut rows."},
    {LQL_S_INFER, "INFER", lql_h_infer, LQL_CLASS_READ,
     "INFER \"prompt\" {TOP n | GENERATE n | TEMPERATURE x | TOP_P x | SEED n | COMPARE | "
     "WITH IDS}",
     "A full forward pass (overlay applied): the next-token distribution as rank, token, "
     "prob (TOP, default 5); WITH IDS adds each token's id after it. GENERATE n continues the prompt greedily, or sampled with "
     "TEMPERATURE / TOP_P / SEED, for n tokens or until an end-of-sequence token (the "
     "graph's `special_tokens.eos`; kept in the output), as Hugging Face's generate() "
     "stops, so fewer than n may come back. Without SEED the seed is 0, so a sampled continuation is "
     "the same on every run (a script reproduces; the HTTP API's `seed` is random when "
     "absent, as OpenAI's is, SERVE.md). Sampling is temperature then top-p only: no "
     "top-k (Hugging Face's default of 50 is not applied), no repetition penalty, and "
     "generation_config.json's sampling defaults are not read, so GENERATE is greedy "
     "unless TEMPERATURE is given. COMPARE shows the base model beside the effective "
     "one."},
    {LQL_S_EXPLAIN_INFER, "EXPLAIN INFER", lql_h_explain_infer, LQL_CLASS_READ,
     "EXPLAIN INFER \"prompt\" {TOP n | WITH ATTENTION | ALL LAYERS | SYNTAX | KNOWLEDGE "
     "| OUTPUT | LAYERS range}",
     "The prediction plus the features that fired per layer; WITH ATTENTION adds the "
     "most-attended token and the logit-lens top-1 per layer."},
    {LQL_S_TRACE, "TRACE", lql_h_trace, LQL_CLASS_READ,
     "TRACE (\"prompt\" | FROM \"file\") {FOR (\"token\" | id) | DECOMPOSE | LAYERS range | "
     "POSITIONS (ALL|LAST) | SAVE \"file\"}",
     "Logit lens per layer: top-1 and probability, |attention delta|, |FFN delta|; with "
     "FOR, the token's rank and probability per layer and what pushed it. SAVE \"file\" "
     "keeps the recorded trace; TRACE FROM \"file\" shows a saved one without running the "
     "prompt again."},
    {LQL_S_INSERT, "INSERT", lql_h_insert, LQL_CLASS_EDIT,
     "INSERT INTO EDGES (entity, relation, target) VALUES (\"e\", \"r\", \"t\") {AT LAYER n "
     "| CONFIDENCE x | ALPHA x | MODE (KNN|COMPOSE|MEMIT)}",
     "Add a fact to the overlay (journaled; the base container is never written)."},
    {LQL_S_DELETE, "DELETE", lql_h_delete, LQL_CLASS_EDIT,
     "DELETE FROM EDGES WHERE cond AND …",
     "Tombstone the matching features in the overlay."},
    {LQL_S_UPDATE, "UPDATE", lql_h_update, LQL_CLASS_EDIT,
     "UPDATE EDGES SET field = value, … WHERE cond AND …",
     "Override the matching features' metadata or vectors in the overlay."},
    {LQL_S_BEGIN_PATCH, "BEGIN PATCH", lql_h_begin_patch, LQL_CLASS_EDIT,
     "BEGIN PATCH \"name\"", "Start recording edits into a named patch."},
    {LQL_S_SAVE_PATCH, "SAVE PATCH", lql_h_save_patch, LQL_CLASS_EDIT,
     "SAVE PATCH [\"file.vlp\"]", "Write the current patch as a .vlp JSON file."},
    {LQL_S_APPLY_PATCH, "APPLY PATCH", lql_h_apply_patch, LQL_CLASS_EDIT,
     "APPLY PATCH \"file.vlp\"", "Apply a .vlp patch on top of the overlay."},
    {LQL_S_REMOVE_PATCH, "REMOVE PATCH", lql_h_remove_patch, LQL_CLASS_EDIT,
     "REMOVE PATCH \"name\"", "Remove a patch from the overlay."},
    {LQL_S_UNDO, "UNDO", lql_h_undo, LQL_CLASS_EDIT,
     "UNDO", "Step back one edit statement in the journal."},
    {LQL_S_ROLLBACK, "ROLLBACK", lql_h_rollback, LQL_CLASS_EDIT,
     "ROLLBACK TO n", "Step back to history entry n (SHOW HISTORY numbers them)."},
    {LQL_S_DIFF, "DIFF", lql_h_diff, LQL_CLASS_READ,
     "DIFF (\"a\"|CURRENT) (\"b\"|CURRENT) {LAYER n | RELATION \"r\" | LIMIT n | PHYSICAL | "
     "INTO PATCH \"file.vlp\"}",
     "Logical difference of two effective model states: changed features and per-tensor "
     "value deltas."},
    {LQL_S_COMPILE, "COMPILE", lql_h_compile, LQL_CLASS_LOCAL,
     "COMPILE CURRENT INTO (VINDEX \"out\" | MODEL \"target\" {FORMAT (SAFETENSORS|GGUF)}) "
     "{ON CONFLICT (LAST_WINS|HIGHEST_CONFIDENCE|FAIL)}",
     "Materialise base + overlay as a new container stamped authority: derived; INTO MODEL "
     "exports it as a Hugging Face checkpoint directory or a GGUF file for llama.cpp."},
    {LQL_S_COMPACT, "COMPACT", lql_h_compact, LQL_CLASS_LOCAL,
     "COMPACT [\"container\"] {INTO VINDEX \"out\"}",
     "Reorganise a container's storage with the same semantics, naming every file dropped."},
    {LQL_S_REPRESENT, "REPRESENT", lql_h_represent, LQL_CLASS_LOCAL,
     "REPRESENT \"object\" AS dtype",
     "Add a representation of a logical object in another dtype."},
};
#define NDEFS (sizeof defs / sizeof defs[0])

const lql_stmt_def *lql_stmt_defs(size_t *n)
{
    *n = NDEFS;
    return defs;
}

const lql_stmt_def *lql_stmt_def_find(const char *name)
{
    /* Compare ignoring case and runs of blanks ("show   layers"). */
    for (size_t i = 0; i < NDEFS; i++) {
        const char *a = defs[i].name, *b = name;
        while (*b == ' ') b++;
        while (*a && *b) {
            if (*a == ' ' && *b == ' ') {
                a++;
                while (*b == ' ') b++;
                continue;
            }
            if ((*a | 0x20) != (*b | 0x20)) break;
            a++; b++;
        }
        while (*b == ' ' || *b == ';') b++;
        if (!*a && !*b) return &defs[i];
    }
    return NULL;
}

const lql_stmt_def *lql_stmt_def_of(lql_kind k)
{
    for (size_t i = 0; i < NDEFS; i++)
        if (defs[i].kind == k) return &defs[i];
    return NULL;
}

int lql_exec_one(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    const lql_stmt_def *d = lql_stmt_def_of(st->kind);
    if (!d) return lql_errf(e, LQL_EEXEC, &st->at, "no handler for %s", lql_kind_name(st->kind));
    /* an edit computed while another session committed is recorded by nobody (VX_ESTALE):
     * replayed and run again, a few times, before it is given up */
    for (int tries = 0;; tries++) {
        if (s->edit && st->kind != LQL_S_USE && lql_edit_sync(s, st, r, e) < 0) return -1;
        const lql_browse_mark before = lql_browse_mark_now(s);
        int rc = d->handler(s, st, r, e);
        if (rc == 0 && st->kind != LQL_S_USE) lql_browse_note(s, &before, r);
        if (rc == 0 || e->code != LQL_ESTALE || tries == 4) return rc;
        *e = (lql_err){0};
    }
}

int lql_exec(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    for (; st; st = st->next)
        if (lql_exec_one(s, st, r, e) < 0) return -1;
    return 0;
}

/* ---------------------------------------------------------------- session */

lql_session *lql_session_new(void)
{
    return calloc(1, sizeof(lql_session));
}

void lql_session_unbind(lql_session *s)
{
    if (s->edit && s->edit_free) s->edit_free(s->edit);
    s->edit = NULL; s->edit_free = NULL;
    s->overlay = NULL;
    if (s->browse && s->browse_free) s->browse_free(s->browse);
    s->browse = NULL; s->browse_free = NULL;
    eng_model_free(s->model);
    s->model = NULL;
    eng_tok_free(s->tok);
    s->tok = NULL;
    vx_close(s->vx);
    s->vx = NULL;
    free(s->path); free(s->journal); free(s->profile);
    s->path = s->journal = s->profile = NULL;
}

void lql_session_free(lql_session *s)
{
    if (!s) return;
    lql_session_unbind(s);
    free(s);
}

int lql_session_container(lql_session *s, const lql_stmt *st, vx_container **out, lql_err *e)
{
    if (!s->vx)
        return lql_errf(e, LQL_EEXEC, st ? &st->at : NULL, "no container bound: USE \"path\" first");
    *out = s->vx;
    return 0;
}

/* The session's one tokenizer (engine, browse and lql share it: a large vocabulary costs
 * ~170 ms and tens of MB per load): loaded from the container once; with `optional`, a
 * container without tokenizer.json gives 0 and NULL (the engine runs on ids). */
static int session_tok(lql_session *s, vx_container *c, int optional, vx_err *ve)
{
    if (s->tok) return 0;
    char path[4096];
    if (optional && (snprintf(path, sizeof path, "%s/tokenizer.json", vx_dir(c)) >= (int)sizeof path ||
                     access(path, F_OK) != 0))
        return 0;
    if (vx_snapshot_check(c, NULL, ve) < 0 || eng_tok_load_dir(vx_dir(c), &s->tok, ve) < 0) {
        s->tok = NULL;
        return -1;
    }
    return 0;
}

int lql_session_model(lql_session *s, const lql_stmt *st, eng_model **out, lql_err *e)
{
    vx_container *c = NULL;
    if (lql_session_container(s, st, &c, e) < 0) return -1;
    if (!s->model) {
        vx_err ve = {0};
        /* the forward pass reads every bound weight: all are checked on this first touch */
        if (eng_tensors_check(c, NULL, 0, &ve) < 0 || session_tok(s, c, 1, &ve) < 0 ||
            eng_model_bind_tok(c, s->tok, &s->model, &ve) < 0) {
            s->model = NULL;
            return lql_err_vx(e, &ve, st ? &st->at : NULL);
        }
        if (s->overlay) eng_model_set_overlay(s->model, s->overlay);
    }
    *out = s->model;
    return 0;
}

int lql_session_tokenizer(lql_session *s, const lql_stmt *st, const eng_tokenizer **out,
                          lql_err *e)
{
    vx_container *c = NULL;
    if (lql_session_container(s, st, &c, e) < 0) return -1;
    vx_err ve = {0};
    if (session_tok(s, c, 0, &ve) < 0) return lql_err_vx(e, &ve, st ? &st->at : NULL);
    *out = s->tok;
    return 0;
}

void lql_session_set_overlay(lql_session *s, const eng_overlay *ov)
{
    s->overlay = ov;
    if (s->model) eng_model_set_overlay(s->model, ov);
}

/* ---------------------------------------------------------------- errors */

int lql_err_vx(lql_err *e, const vx_err *ve, const lql_span *at)
{
    int code = ve->code == VX_ECANCEL ? LQL_ECANCEL
             : ve->code == VX_ESTALE ? LQL_ESTALE
             : ve->code == VX_EUNSUPPORTED ? LQL_EREFUSED
             : ve->code == VX_ENOMEM ? LQL_ENOMEM : LQL_EEXEC;
    return lql_errf(e, code, at, "%s", ve->msg[0] ? ve->msg : "failed (no reason given)");
}

void lql_cell_token(lql_table *t, const eng_tokenizer *tok, int32_t id)
{
    char *text = NULL;
    size_t len = 0;
    vx_err ve = {0};
    if (eng_tok_decode_after(tok, &id, 1, 0, &text, &len, &ve) < 0) lql_cell_text(t, "");
    else lql_cell_textn(t, text, len);
    free(text);
}

int lql_check_layers(lql_err *e, const lql_span *at, int64_t lo, int64_t hi, int layers)
{
    if (lo >= 0 && hi < layers) return 0;
    if (lo == hi)
        return lql_errf(e, LQL_EEXEC, at, "layer %lld is out of range (the model has %d "
                        "layers: 0-%d)", (long long)lo, layers, layers - 1);
    return lql_errf(e, LQL_EEXEC, at, "layer range %lld-%lld is out of range (the model has "
                    "%d layers: 0-%d)", (long long)lo, (long long)hi, layers, layers - 1);
}

int lql_refuse_clause(lql_err *e, const lql_stmt *st, lql_clause_kind c, const char *why)
{
    return lql_errf(e, LQL_EREFUSED, &st->clause_at[c], "%s … %s is refused: %s",
                    lql_kind_name(st->kind), lql_clause_text(c), why);
}
