/*
 * interp.h — the interpreter: the session a shell keeps between statements, the handler
 * signature every statement implements, and the statement table that drives dispatch,
 * `.help` and the reference docs.
 *
 * Ownership split by file (each file owns its handlers, nobody else edits them):
 *   exec_session.c  USE, TOKENIZE, EXTRACT, STATS, SHOW LAYERS/MODELS/COMPONENTS/
 *                   REPRESENTATIONS, REPRESENT                      (language, "h5")
 *   exec_infer.c    INFER, EXPLAIN INFER (prediction part)         (language, "h5")
 *   exec_browse.c   WALK, EXPLAIN WALK, DESCRIBE, SELECT, SHOW FEATURES/RELATIONS/
 *                   ENTITIES, TRACE, EXPLAIN INFER's per-layer part (browse, "h7")
 *   exec_insert.c   INSERT                                          (mutation, "h8")
 *   exec_delete.c   DELETE, UPDATE
 *   exec_patch.c    patches, UNDO, ROLLBACK, SHOW PATCHES/HISTORY
 *   exec_diff.c     DIFF
 *   exec_compile.c  COMPILE, COMPACT (exec_export.c: INTO MODEL)
 *   exec_edit.c     the USE hook and the binding's ed_model (src/edit, edit.h)
 *
 * Handler contract: `int h(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)`
 * returns 0 after adding zero or more tables / notes to r, or -1 with e filled (a
 * lower-case message quoting the culprit; the position of the clause or operand at fault,
 * taken from st's spans, or NULL for the whole statement). Handlers never print, never
 * exit, and poll vx_cancel_flag in long loops (LQL_ECANCEL). A statement or clause whose
 * engine is missing refuses with lql_refuse(), never a partial or fake result.
 *
 * Stability: this header is shared by three engineers; changes are additive only.
 */
#ifndef LQL_INTERP_H
#define LQL_INTERP_H

#include <stdint.h>

#include "ast.h"
#include "engine.h"
#include "result.h"
#include "vindex.h"

/* ---------------------------------------------------------------- session */

typedef struct lql_session {
    /* The bound container (USE), or NULL. Owned by the session. */
    vx_container *vx;
    char *path;                 /* the path given to USE (malloc'd) */
    char *journal;              /* USE … JOURNAL "path" (malloc'd), NULL: default location */
    char *profile;              /* USE … PROFILE "name" (malloc'd), NULL: none */

    /* The engine model over vx, bound lazily by lql_session_model(); NULL until then. */
    eng_model *model;
    /* The container's tokenizer, loaded once on first use (lql_session_tokenizer, model
     * binding, browse); the model and browse borrow it, so it is freed after them. */
    eng_tokenizer *tok;

    /* Effective-weight corrections of the overlay (journal replay), owned by the binding's
     * ed_model (src/edit); NULL: the base model. lql_session_model attaches it when binding; whoever
     * changes it calls lql_session_set_overlay so a bound model sees the change. */
    const eng_overlay *overlay;

    /* Per-layer state, created lazily by exec_browse.c / exec_edit.c (an ed_model) and
     * freed (by the session, through the matching free function) when the binding changes. */
    void *browse;
    void (*browse_free)(void *browse);
    void *edit;
    void (*edit_free)(void *edit);

    /* Long work reports progress here (the shell draws a bar on a terminal); may be NULL. */
    vx_progress_fn progress;
    void *progress_ctx;

    /* INFER … GENERATE hands each token here as it is chosen (the HTTP server streams
     * them); a nonzero return stops the generation after that token. May be NULL. */
    int (*on_token)(void *ctx, int32_t id);
    void *token_ctx;

    /* Set by the HTTP server: results do not show the host's paths (STATS' path row). */
    int hide_paths;
} lql_session;

/* A fresh session with nothing bound; free with lql_session_free. NULL on out-of-memory. */
lql_session *lql_session_new(void);
void lql_session_free(lql_session *s);
/* Drop the binding: edit and browse state, model, container (in that order). */
void lql_session_unbind(lql_session *s);

/* The bound container; -1 with `no container bound: USE "path" first` (at st) if none. */
int lql_session_container(lql_session *s, const lql_stmt *st, vx_container **out, lql_err *e);
/* The bound model, binding it on first use (eng_model_bind_tok with the session's
 * tokenizer, + the overlay); -1 with the engine's reason otherwise. */
int lql_session_model(lql_session *s, const lql_stmt *st, eng_model **out, lql_err *e);
/* The bound container's tokenizer (loaded from its tokenizer.json once per binding and
 * shared by the model and browse); -1 with the tokenizer's reason otherwise. */
int lql_session_tokenizer(lql_session *s, const lql_stmt *st, const eng_tokenizer **out,
                          lql_err *e);
/* Set (or with NULL clear) the overlay, attaching it to the model when bound. */
void lql_session_set_overlay(lql_session *s, const eng_overlay *ov);

/* ---------------------------------------------------------------- errors */

/* Copy a storage/engine error into e at span `at` (NULL: the whole statement); -1. The
 * code maps VX_ECANCEL to LQL_ECANCEL, VX_EUNSUPPORTED to LQL_EREFUSED, others LQL_EEXEC. */
int lql_err_vx(lql_err *e, const vx_err *ve, const lql_span *at);
/* 0 when layers lo..hi (lo == hi: one layer) exist in a model of `layers`; otherwise -1
 * with the wording every statement gives, at `at`: `layer 9 is out of range (the model
 * has 4 layers: 0-3)`, `layer range 5-6 is out of range (…)`. */
int lql_check_layers(lql_err *e, const lql_span *at, int64_t lo, int64_t hi, int layers);
/* `<STATEMENT> … <clause> is refused: <why>` at the clause, for a clause that parses but
 * that lql does not carry out by design (why says what to do instead); -1. */
int lql_refuse_clause(lql_err *e, const lql_stmt *st, lql_clause_kind c, const char *why);

/* ---------------------------------------------------------------- handlers */

typedef int (*lql_handler)(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);

/* exec_session.c */
int lql_h_use(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_tokenize(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_extract(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_stats(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_show_layers(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_show_models(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_show_components(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_show_representations(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_represent(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
/* exec_infer.c */
int lql_h_infer(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_explain_infer(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
/* exec_browse.c */
struct brw_model;
/* The session's browse model over the bound container, opened on first use with the
 * session's tokenizer; -1 with browse's reason otherwise. */
int lql_session_browse(lql_session *s, const lql_stmt *st, struct brw_model **out, lql_err *e);
/* What the session's browse model had done on demand before a statement (zero without
 * one); lql_browse_note adds notes to r saying what the statement computed or read from
 * the down-meta cache since, and a cache problem it met. */
typedef struct lql_browse_mark {
    uint64_t computed, cached;
    unsigned events;
} lql_browse_mark;
lql_browse_mark lql_browse_mark_now(const lql_session *s);
void lql_browse_note(const lql_session *s, const lql_browse_mark *before, lql_result *r);
int lql_h_walk(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_explain_walk(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_describe(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_select(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_show_features(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_show_relations(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_show_entities(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_trace(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
/* EXPLAIN INFER's per-layer part, called by lql_h_explain_infer after it has added the
 * prediction table: ids[0..n) is the tokenized prompt (special tokens applied), the model
 * is bound (lql_session_model). Adds the features that fired per layer (and with WITH
 * ATTENTION the most-attended token and lens top-1), honouring TOP, band and LAYERS. */
int lql_explain_infer_layers(lql_session *s, const lql_stmt *st, const int32_t *ids, int n,
                             lql_result *r, lql_err *e);
/* Its clauses (TOP, band, LAYERS) checked against the bound model, for lql_h_explain_infer
 * to call before the predictions run: a bad clause never follows printed results. */
int lql_explain_infer_check(lql_session *s, const lql_stmt *st, lql_err *e);
/* exec_insert.c, exec_delete.c, exec_patch.c, exec_diff.c, exec_compile.c */
int lql_h_insert(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_delete(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_update(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_begin_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_save_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_apply_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_remove_patch(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_undo(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_rollback(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_show_patches(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_show_history(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_diff(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_compile(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
int lql_h_compact(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
/* Called by USE right after the container is bound (s->vx, s->path, s->journal set):
 * opens or prepares the journal / overlay for the new binding. -1 refuses the USE (the
 * binding is then dropped). */
int lql_edit_on_use(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
/* Before every statement: when another session changed the bound journal since this one
 * read it, replay it (with a note) so the statement sees what the journal holds. */
int lql_edit_sync(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);

/* Encode a Hugging Face checkpoint into out_dir with lql's hooks (down-meta for browse, or
 * with down_meta 0 the layer bands alone); dtype -1 keeps the source dtypes. Shared by
 * EXTRACT, the golden runner's `require container` and fuzz_exec. */
int lql_encode_container(const char *hf_dir, const char *out_dir, int dtype, int down_meta,
                         vx_progress_fn progress, void *progress_ctx, vx_err *err);

/* A token's decoded text as a cell, NULs kept (the byte-level "Ā" decodes to U+0000); ""
 * for an id the tokenizer cannot decode. */
void lql_cell_token(lql_table *t, const eng_tokenizer *tok, int32_t id);

/* ---------------------------------------------------------------- the statement table */

/* What a statement may touch, for callers that run statements on someone else's behalf
 * (the HTTP server): 0 is no class, so a row left without one is caught by test_serve. */
typedef enum lql_stmt_class {
    LQL_CLASS_READ = 1,         /* reads the effective model (file operands aside) */
    LQL_CLASS_EDIT,             /* changes the session's overlay journal */
    LQL_CLASS_LOCAL             /* binds, writes or lists host paths: never over HTTP */
} lql_stmt_class;

typedef struct lql_stmt_def {
    lql_kind kind;
    const char *name;           /* "SHOW LAYERS" */
    lql_handler handler;
    lql_stmt_class cls;
    const char *usage;          /* the full syntax, clauses in {} may come in any order */
    const char *help;           /* one paragraph: what it does and returns */
} lql_stmt_def;

/* The table, in the order `.help` lists it; *n receives its length. */
const lql_stmt_def *lql_stmt_defs(size_t *n);
/* The entry for a statement name ("walk", "SHOW LAYERS", case-insensitive), or NULL. */
const lql_stmt_def *lql_stmt_def_find(const char *name);
/* The entry for a statement kind, or NULL. */
const lql_stmt_def *lql_stmt_def_of(lql_kind k);

/* Run one statement chain (`a |> b` runs a then b into the same result). Stops at the
 * first failure. */
int lql_exec(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);
/* Run st alone (not the statements chained after it). */
int lql_exec_one(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e);

#endif
