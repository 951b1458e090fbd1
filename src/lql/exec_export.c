/*
 * exec_export.c — COMPILE CURRENT INTO MODEL "target" {FORMAT (SAFETENSORS|GGUF)}: the
 * effective model written where other tools load models. The edited tensors are never
 * computed here: the overlay is compiled into a temporary container by COMPILE's own path
 * (exec_edit.c, with its probe gate), and that container — or, with nothing edited, the
 * bound one — is written out by storage's exporters (hf_export.c, hf_gguf.c), which know
 * the checkpoint layouts. docs/lql/MUTATION.md "Export".
 */
#include <stdio.h>
#include <unistd.h>

#include "exec_edit.h"
#include "interp.h"
#include "result.h"

static const char *format_name(const lql_stmt *st)
{
    return st->format == LQL_FORMAT_GGUF ? "gguf" : "safetensors";
}

int lql_export_check(const vx_container *c, const lql_stmt *st, lql_err *e)
{
    vx_err ve = {0};
    const int gguf = st->format == LQL_FORMAT_GGUF;
    /* a Hugging Face checkpoint is a directory; a GGUF is one file */
    if (vx_cw_check(st->arg2, NULL, gguf ? VX_CW_FILE : 0, "export", &ve))
        return lql_err_vx(e, &ve, &st->arg2_at);
    if (vx_export_check(c, gguf, &ve))
        return lql_err_vx(e, &ve, &st->arg2_at);
    return 0;
}

const char *lql_export_staging(const lql_stmt *st, char *buf, size_t n)
{
    snprintf(buf, n, "%s.compiled.tmp.%ld", st->arg2, (long)getpid());
    return buf;
}

int lql_export_run(lql_session *s, const lql_stmt *st, const char *dir, lql_result *r,
                   lql_err *e)
{
    vx_container *own = NULL;
    vx_err ve = {0};
    if (dir && vx_open_profile(dir, vx_profile(s->vx), NULL, 0, &own, &ve))
        return lql_err_vx(e, &ve, &st->arg2_at);
    const vx_container *c = own ? own : s->vx;
    vx_export_report rep;
    int rc = st->format == LQL_FORMAT_GGUF ? vx_export_gguf(c, st->arg2, &rep, &ve)
                                           : vx_export_hf(c, st->arg2, &rep, &ve);
    vx_close(own);
    if (rc)
        return lql_err_vx(e, &ve, &st->arg2_at);
    static const lql_colspec cols[] = {{"path", LQL_TEXT, 0}, {"format", LQL_TEXT, 0},
                                       {"tensors", LQL_INT, 0}, {"bytes", LQL_INT, 0}};
    lql_table *t = lql_result_table(r, "exported", 4, cols);
    if (t) {
        lql_row(t);
        lql_cell_text(t, st->arg2);
        lql_cell_text(t, format_name(st));
        lql_cell_int(t, (int64_t)rep.tensors);
        lql_cell_int(t, (int64_t)rep.bytes);
    }
    if (st->format == LQL_FORMAT_GGUF)
        lql_result_note(r, "exported: %s (GGUF v3 for llama.cpp; %zu tensors in llama.cpp's "
                        "layout for the family; %zu metadata keys)", st->arg2, rep.tensors,
                        rep.files);
    else
        lql_result_note(r, "exported: %s (model.safetensors: %zu tensors as stored, under the "
                        "checkpoint's names; %zu files from the container's snapshots; %s)",
                        st->arg2, rep.tensors, rep.files, dir ? "the overlay compiled first" :
                        "nothing edited: the bound container as it is");
    return 0;
}
