/*
 * exec_compile.c — COMPILE and COMPACT: src/edit materialises the effective model into a
 * derived container and gates it (ed_compile_current: INFER logits, TRACE lens and WALK
 * hits of its probes must agree with the overlay's within a storage-dependent tolerance,
 * or the output is removed), or reorganises a container's storage (compact.h) and gates
 * the answers (a failure removes the output, or in place exchanges the old tree back); here the clauses are read and the reports rendered. INTO MODEL exports
 * through exec_export.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_edit.h"

/* The probe gate's table: titled names[0], the sides' top tokens under names[1] and [2]. */
static void gate_rows(const ed_gate *g, const char *const names[3], lql_result *r)
{
    if (!g->ran)
        return;
    const lql_colspec cols[] = {
        {"prompt", LQL_TEXT, 0}, {names[1], LQL_TEXT, 0}, {names[2], LQL_TEXT, 0},
        {"max_logit_diff", LQL_FLOAT, 6}, {"max_lens_diff", LQL_FLOAT, 6},
        {"max_walk_diff", LQL_FLOAT, 6}};
    lql_table *t = lql_result_table(r, names[0], g->bm ? 6 : 5, cols);
    for (size_t i = 0; t && i < g->n_rows; i++) {
        const ed_probe_row *p = &g->rows[i];
        lql_row(t);
        lql_cell_text(t, p->prompt);
        lql_cell_text(t, p->null_a ? NULL : p->top_a);
        lql_cell_text(t, p->null_b ? NULL : p->top_b);
        lql_cell_float(t, p->logit);
        lql_cell_float(t, p->lens);
        if (g->bm)
            lql_cell_float(t, p->walk);
    }
}

int lql_h_compile(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    ed_model *ed = NULL;
    eng_model *m = NULL;
    vx_err ve = {0};
    /* INTO MODEL (exec_export.c): the overlay is compiled into a staging container, which
     * is then exported; with nothing edited the bound container is exported as it is */
    const int model = lql_has(st, LQL_C_INTO_MODEL);
    char staging[4200];
    const char *out = model ? lql_export_staging(st, staging, sizeof staging) : st->arg2;
    if (lql_edit_model(s, st, 0, &ed, e) ||
        (model && lql_export_check(ed_model_container(ed), st, e)))
        return -1;
    /* the overlay replays into the browse model (which needs the tokenizer's texts); an
     * export of a container nothing edited needs neither */
    vx_op *ops = NULL;
    size_t n_ops = 1;
    if (model && (ed_journal_open(ed, 0, &ve) || ed_active_ops(ed, &ops, &n_ops, &ve)))
        return lql_err_vx(e, &ve, &st->at);
    vx_ops_free(ops, model ? n_ops : 0);
    if (n_ops && lql_edit_model(s, st, 1, &ed, e))
        return -1;
    if (ed_refresh(ed, &ve))
        return lql_err_vx(e, &ve, &st->at);
    if (lql_session_model(s, st, &m, e))
        return -1;
    if (!ed_current(ed) && model)
        return lql_export_run(s, st, NULL, r, e);
    ed_conflict policy = !lql_has(st, LQL_C_ON_CONFLICT) ? ED_LAST_WINS
                       : st->conflict == LQL_CONFLICT_FAIL ? ED_CONFLICT_FAIL
                       : st->conflict == LQL_CONFLICT_HIGHEST_CONFIDENCE ? ED_HIGHEST_CONFIDENCE
                       : ED_LAST_WINS;
    ed_compile_res x;
    ed_err ee;
    int rc = ed_compile_current(ed, m, out, policy, s->progress, s->progress_ctx, &x, &ee);
    for (size_t i = 0; i < x.n_aside; i++) {
        const ed_set_aside *a = &x.aside[i];
        lql_result_note(r, "ON CONFLICT HIGHEST_CONFIDENCE: layer %d feature %d: operation "
                        "%lld (confidence %.4g) set aside for operation %lld (confidence %.4g)",
                        a->layer, a->feature, a->seq, a->confidence, a->win_seq,
                        a->win_confidence);
    }
    static const char *const heads[3] = {"compiled vs overlay", "overlay", "compiled"};
    gate_rows(&x.gate, heads, r);
    if (rc && model && ee.at == ED_AT_OUTPUT) {
        /* the staging path is not one the user wrote: say what it was for */
        char m2[sizeof ee.vx.msg + 96];
        int k = snprintf(m2, sizeof m2, "compiling the overlay into a staging container "
                         "before the export: %s", ee.vx.msg);
        k = k < (int)sizeof ee.vx.msg ? k : (int)sizeof ee.vx.msg - 1;
        memcpy(ee.vx.msg, m2, (size_t)k);
        ee.vx.msg[k] = 0;
    }
    if (rc)
        lql_err_vx(e, &ee.vx, ee.at == ED_AT_OUTPUT ? &st->arg2_at
                            : ee.at == ED_AT_CONFLICT ? &st->clause_at[LQL_C_ON_CONFLICT]
                            : &st->at);
    const ed_compile_report *rep = &x.rep;
    if (rc == 0 && model)
        rc = lql_export_run(s, st, out, r, e);
    if (rc == 0 && model && rep->meta_written)
        lql_result_note(r, "%zu down-meta records the overlay sets (UPDATE, inserts' metadata) "
                        "are lql's browse metadata, which a checkpoint has no place for: the "
                        "export carries the weights", rep->meta_written);
    if (model && x.probes)
        vx_rmtree(out);
    if (rc == 0) {
        lql_result_note(r, "compile gate: INFER logits, TRACE lens (every layer) and WALK hits "
                        "(top 10 per layer) of %d probes agree within %s x the logit scale; "
                        "the down-meta of every edited feature is equal", x.probes, x.why);
        lql_result_note(r, "compiled: %s (authority derived; %zu operations materialised into "
                        "%zu tensors of %zu segments and %zu down-meta records; %zu files "
                        "linked unchanged)%s", model ? "the staging container" : st->arg2,
                        x.counts.ops, rep->tensors_rewritten, rep->segments_rewritten,
                        rep->meta_written, rep->files_linked,
                        model ? ", then exported and removed" : "");
        if (rep->meta_layers && !model)
            lql_result_note(r, "compiled: the base stores no down-meta, so the compiled "
                            "container's was written whole: %d of %d layers carried from the "
                            "base's records computed this session or read from its down-meta "
                            "cache, %d computed", rep->meta_layers_known, rep->meta_layers,
                            rep->meta_layers - rep->meta_layers_known);
        if (rep->blocks)
            lql_result_note(r, "compiled: %zu of %zu blocks of the edited block-quantised "
                            "tensors changed and were quantised again (%zu of them to new "
                            "bytes; the rest rounded back); the other blocks keep their bytes",
                            rep->blocks_requantised, rep->blocks, rep->blocks_new_bytes);
    }
    ed_compile_res_free(&x);
    return rc ? -1 : 0;
}

/* COMPACT's report: one row per file not carried as it was. */
static void compact_rows(const ed_compact_report *rep, lql_result *r)
{
    static const lql_colspec cols[] = {
        {"file", LQL_TEXT, 0}, {"bytes", LQL_INT, 0}, {"fate", LQL_TEXT, 0}};
    lql_table *t = lql_result_table(r, "files not carried", 3, cols);
    for (size_t i = 0; t && i < rep->n_entries; i++) {
        char fate[4200];
        if (rep->entries[i].merged_into)
            snprintf(fate, sizeof fate, "merged into %s", rep->entries[i].merged_into);
        else
            snprintf(fate, sizeof fate, "dropped: nothing references it");
        lql_row(t);
        lql_cell_text(t, rep->entries[i].path);
        lql_cell_int(t, (int64_t)rep->entries[i].bytes);
        lql_cell_text(t, fate);
    }
}

/* COMPACT's probe gate: the compacted container must answer exactly as its source. */
typedef struct compact_gate {
    eng_model *m;      /* the source, kept mapped across an in-place exchange */
    const char *out;
    ed_gate g;
    ed_err ge;
    int failed;        /* the gate failed (as opposed to the compaction) */
} compact_gate;

static int compact_check(void *ctx, vx_err *err)
{
    static const char *const prompts[] = {"The capital of France is", "Once upon a time"};
    compact_gate *k = ctx;
    k->failed = 1;
    if (ed_gate_run(k->m, k->out, prompts, 2, &k->g, &k->ge)) {
        *err = k->ge.vx;
        return -1;
    }
    double worst = fmax(k->g.logit, k->g.lens);
    if (worst != 0) {
        k->ge.at = ED_AT_REQUEST;
        return vx_errf(err, VX_EVERIFY, "compact: '%s' answers differently from its source "
                       "(max logit difference %g)", k->out, worst);
    }
    k->failed = 0;
    return 0;
}

int lql_h_compact(lql_session *s, const lql_stmt *st, lql_result *r, lql_err *e)
{
    const char *src = st->arg ? st->arg : s->vx ? vx_dir(s->vx) : NULL;
    const lql_span *at = st->arg ? &st->arg_at : &st->at;
    if (!src)
        return lql_errf(e, LQL_EEXEC, &st->at, "COMPACT needs a container: name one "
                        "(COMPACT \"dir\") or bind one with USE");
    char rs[4096], rb[4096];
    int bound = s->vx && realpath(src, rs) && realpath(vx_dir(s->vx), rb) && !strcmp(rs, rb);
    if (!st->into && bound)
        return lql_errf(e, LQL_EEXEC, at, "COMPACT in place of the bound container is "
                        "refused: this session maps its files; give INTO VINDEX \"out\" or "
                        "compact it from a session bound elsewhere");
    /* the source model, kept mapped so the probes can run after an in-place exchange */
    vx_container *c = NULL;
    eng_model *m = NULL;
    vx_err ve = {0};
    if (vx_open(src, &c, &ve) || eng_model_bind(c, &m, &ve)) {
        vx_close(c);
        return lql_err_vx(e, &ve, at);
    }
    ed_compact_report rep;
    const char *out = st->into ? st->into : src;
    const lql_span *out_at = st->into ? &st->clause_at[LQL_C_INTO_VINDEX] : at;
    compact_gate k = {.m = m, .out = out};
    /* in place, a failed gate exchanges the old tree back; INTO removes the output */
    int rc = st->into ? ed_compact(c, out, &rep, &ve)
                      : ed_compact_in_place(src, compact_check, &k, &rep, &ve);
    if (rc == 0 && st->into && compact_check(&k, &ve)) {
        vx_rmtree(out);
        rc = -1;
    }
    if (rc == 0)
        compact_rows(&rep, r);
    static const char *const names[3] = {"compacted vs source", "source", "compacted"};
    gate_rows(&k.g, names, r);
    ed_gate_free(&k.g);
    if (rc) {
        rc = lql_err_vx(e, &ve, !k.failed || k.ge.at == ED_AT_OUTPUT ? out_at : &st->at);
        goto done;
    }
    lql_result_note(r, "compacted: %s (%zu segments -> %zu, %zu representation%s merged, %zu "
                    "file%s dropped (%llu bytes), %zu carried unchanged, %zu tensors "
                    "byte-identical, index.json %s)", out, rep.segments_before,
                    rep.segments_after, rep.reps_merged, rep.reps_merged == 1 ? "" : "s",
                    rep.n_dropped, rep.n_dropped == 1 ? "" : "s",
                    (unsigned long long)rep.bytes_dropped, rep.files_carried,
                    rep.tensors_checked, rep.index_rewritten ? "rewritten" : "carried as it was");
done:
    ed_compact_report_free(&rep);
    eng_model_free(m);
    vx_close(c);
    return rc;
}

