/*
 * fuzz_dmet.c — libFuzzer over browse's two binary readers: the DMET down-meta reader
 * (brw_dmet_parse, then every record of every layer through brw_dmet_get) and the TRACE
 * SAVE file reader (brw_trace_parse for a 2-layer, 4-wide, 32-token model, then every id
 * and state read so ASan sees any out-of-bounds pointer). The first input byte picks the
 * reader; the rest is the file image.
 */
#include "brw_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { T_LAYERS = 2, T_HIDDEN = 4, T_VOCAB = 32 };

static volatile float sink;

static void dmet(const uint8_t *p, size_t n)
{
    brw_dmet *d;
    vx_err err = {0};
    if (brw_dmet_parse(p, n, &d, &err) != 0) {
        if (!err.msg[0])
            abort();   /* a refusal always says why */
        return;
    }
    int k = brw_dmet_top_k(d);
    if (k < 0 || k > BRW_DMET_K_MAX)
        abort();
    for (int l = 0; l < brw_dmet_layers(d); l++) {
        int64_t c = brw_dmet_count(d, l);
        for (int64_t f = 0; f < c; f++) {
            brw_meta m;
            if (brw_dmet_get(d, l, f, &m) != 0 || m.k > BRW_DMET_K_MAX)
                abort();
            sink += m.c_score + (m.k ? m.logits[m.k - 1] : 0);
        }
        brw_meta m;
        if (brw_dmet_get(d, l, c, &m) == 0)
            abort();   /* one past the end is refused */
    }
    brw_dmet_free(d);
}

static void trace(const uint8_t *p, size_t n)
{
    brw_trace t;
    vx_err err = {0};
    if (brw_trace_parse(p, n, "fuzz", T_LAYERS, T_HIDDEN, T_VOCAB, &t, &err) != 0) {
        if (!err.msg[0] || t.ids || t.states)
            abort();
        return;
    }
    if (t.target < -1 || t.target >= T_VOCAB)
        abort();
    for (int i = 0; i < t.n_tokens; i++)
        if (t.ids[i] < 0 || t.ids[i] >= T_VOCAB)
            abort();
    size_t ns = (size_t)t.n_tokens * (T_LAYERS + 1) * 3 * T_HIDDEN;
    for (size_t i = 0; i < ns; i++)
        sink += t.states[i];
    brw_trace_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        trace(data + 1, size - 1);
    else
        dmet(data + 1, size - 1);
    return 0;
}
