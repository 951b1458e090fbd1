/*
 * edit_moe.c — where INSERT edits a mixture-of-experts layer: the experts the fact's key
 * routes to. The update itself is edit_memit's, on the chosen expert's site (its slice of
 * the layer's expert-major activations, edit_memit.h).
 */
#include "edit_memit.h"
#include "engine_int.h"


int eng_edit_route(eng_model *m, int layer, const int32_t *ids, int n, int *experts,
                   float *weights, vx_err *err)
{
    if (layer < 0 || layer >= m->n_layers)
        return vx_errf(err, VX_EARG, "layer %d is out of range (the model has %d layers: 0-%d)",
                       layer, m->n_layers, m->n_layers - 1);
    if (!m->layers[layer].moe)
        return 0;
    eng_session *s;
    if (eng_session_new(m, n, &s, err))
        return -1;
    int rc = eng_forward(s, ids, n, NULL, NULL, err) ? -1
           : eng_session_routing(s, layer, experts, weights);
    eng_session_free(s);
    return rc;
}
