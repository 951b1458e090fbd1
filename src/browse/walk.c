/*
 * walk.c — WALK: the prompt's last-token embedding (times the embedding scale) scanned
 * against every requested layer's gate rows; per layer the top features by the mode's
 * key (HYBRID |gate·q|, PURE signed gate·q, DENSE |act(gate·q)·(up·q)|).
 */
#include "brw_int.h"

#include <stdlib.h>
#include <string.h>

int brw_walk_run(const brw_model *m, const char *prompt, const brw_walk_opts *o,
                 brw_walk *out, vx_err *err)
{
    memset(out, 0, sizeof *out);
    int top = o && o->top > 0 ? o->top : 10;
    int lo = o ? o->layer_lo : -1, hi = o ? o->layer_hi : -1;
    if (lo >= 0 && (lo > hi || hi >= m->s.layers))
        return vx_errf(err, VX_EARG, "layer range %d-%d is out of range (the model has %d "
                       "layers: 0-%d)", lo, hi, m->s.layers, m->s.layers - 1);
    if (lo < 0) {
        lo = 0;
        hi = m->s.layers - 1;
    }
    float *q = malloc((size_t)m->s.hidden * sizeof *q);
    out->n_layers = hi - lo + 1;
    out->top = top;
    out->layers = malloc((size_t)out->n_layers * sizeof *out->layers);
    out->counts = calloc((size_t)out->n_layers, sizeof *out->counts);
    out->hits = malloc((size_t)out->n_layers * (size_t)top * sizeof *out->hits);
    if (!q || !out->layers || !out->counts || !out->hits) {
        free(q);
        brw_walk_free(out);
        return vx_errf(err, VX_ENOMEM, "walk: out of memory");
    }
    out->mode = o ? o->mode : BRW_HYBRID;
    for (int i = 0; i < out->n_layers; i++) {
        out->layers[i] = lo + i;
        out->bytes_scanned += m->s.layer[lo + i].gate_bytes;
        if (out->mode == BRW_DENSE)
            out->bytes_scanned += m->s.layer[lo + i].up_bytes;
    }
    if (brw_walk_query(m, prompt, q, &out->token, err) != 0 ||
        brw_gate_knn_mode(m, out->layers, out->n_layers, q, top, out->mode, o ? o->ov : NULL,
                          out->hits, out->counts, err) != 0 ||
        brw_meta_prepare_hits(m, out->hits, out->counts, out->n_layers, top, err) != 0) {
        free(q);
        brw_walk_free(out);
        return -1;
    }
    free(q);
    return 0;
}

void brw_walk_free(brw_walk *w)
{
    free(w->layers);
    free(w->counts);
    free(w->hits);
    memset(w, 0, sizeof *w);
}
