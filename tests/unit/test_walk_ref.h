/*
 * test_walk_ref.h — what the WALK tests share: a float64 ranking of every feature of a
 * layer under a mode, from the stored rows of any dtype browse reads (plain widening or
 * block dequantisation, both exact), and the check that a walk's hits equal it.
 */
#ifndef TEST_WALK_REF_H
#define TEST_WALK_REF_H

#include "brw_int.h"
#include "t.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Row r of a [rows, h] operand, decoded to f32, dotted with q in float64. */
static inline double wr_dot64(const vx_tensor *t, int64_t r, const float *q, int h)
{
    size_t rb = (size_t)h / vx_dtype_block_elems(t->dtype) * vx_dtype_block_bytes(t->dtype);
    float *w = malloc((size_t)h * sizeof *w);
    double s = 0;
    if (w && vx_decode_f32(t->dtype, (const uint8_t *)t->data + (size_t)r * rb, w,
                           (size_t)h) == 0)
        for (int i = 0; i < h; i++)
            s += (double)w[i] * q[i];
    else
        s = NAN;
    free(w);
    return s;
}

/* Element i of an f32/f16/bf16 vector. */
static inline double wr_elem(const vx_tensor *t, size_t i)
{
    float f;
    vx_row_to_f32(t->dtype, (const uint8_t *)t->data + i * vx_dtype_block_bytes(t->dtype), &f,
                  1);
    return f;
}

static inline double wr_act64(int act, double x)
{
    if (act == 0)
        return x / (1 + exp(-x));
    if (act == 1)
        return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x * 0.7071067811865476));
}

typedef struct wr_ref { int64_t f; double key, score, gate; } wr_ref;

static inline int wr_cmp(const void *pa, const void *pb)
{
    const wr_ref *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key > b->key ? -1 : 1;
    return a->f < b->f ? -1 : a->f > b->f;
}

/* The float64 ranking of a layer: keys per mode, best first; [features] entries. */
static inline wr_ref *wr_rank64(const brw_model *m, int layer, const float *q,
                                brw_walk_mode mode)
{
    const brw_layer *L = &m->s.layer[layer];
    wr_ref *r = malloc((size_t)L->features * sizeof *r);
    int h = m->s.hidden;
    for (int p = 0; p < L->n_parts; p++) {
        const brw_part *pt = &L->parts[p];
        for (int64_t i = 0; i < pt->rows; i++) {
            wr_ref *x = &r[pt->first + i];
            x->f = pt->first + i;
            x->gate = wr_dot64(pt->gate, i, q, h);
            x->score = x->gate;
            if (mode == BRW_DENSE && pt->up)
                x->score = wr_act64(m->s.act, x->gate) * wr_dot64(pt->up, i, q, h);
            else if (mode == BRW_DENSE) {
                if (pt->bias)
                    x->gate += wr_elem(pt->bias, (size_t)i);
                x->score = wr_act64(m->s.act, x->gate);
            }
            x->key = mode == BRW_PURE ? x->score : fabs(x->score);
        }
    }
    qsort(r, (size_t)L->features, sizeof *r, wr_cmp);
    return r;
}

/* Walk every layer in mode and compare with wr_rank64: same key at every rank (ties may
 * swap features), each hit's score and gate equal to its own float64 values, within 1e-4
 * of the layer's top key (gate: 1e-4 relative); the bytes scanned are the layer's gate
 * (and, DENSE, up) bytes. Returns the mismatches. */
static inline int wr_check_mode(const brw_model *m, const char *name, const char *prompt,
                                brw_walk_mode mode, int top)
{
    brw_walk_opts o = {.top = top, .layer_lo = -1, .layer_hi = -1, .mode = mode};
    brw_walk w;
    vx_err err = {0};
    CHECK_MSG(brw_walk_run(m, prompt, &o, &w, &err) == 0, "%s walk: %s", name, err.msg);
    if (!w.hits)
        return 1;
    CHECK(w.mode == mode && w.n_layers == m->s.layers);
    float *q = malloc((size_t)m->s.hidden * sizeof *q);
    int32_t tok;
    CHECK(brw_walk_query(m, prompt, q, &tok, &err) == 0 && tok == w.token);
    int bad = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < w.n_layers; i++) {
        const brw_layer *L = &m->s.layer[i];
        bytes += L->gate_bytes + (mode == BRW_DENSE ? L->up_bytes : 0);
        wr_ref *r = wr_rank64(m, i, q, mode);
        int want = top < L->features ? top : (int)L->features;
        if (w.counts[i] != want)
            bad++;
        for (int j = 0; j < w.counts[i] && j < want; j++) {
            const brw_hit *x = &w.hits[(size_t)i * (size_t)top + j];
            double key = mode == BRW_PURE ? x->score : fabs(x->score);
            double tol = 1e-4 * (fabs(r[0].key) + 1e-6);
            wr_ref *own = NULL;
            for (int64_t k = 0; k < L->features; k++)
                if (r[k].f == x->feature)
                    own = &r[k];
            if (!own || fabs(key - r[j].key) > tol || fabs(x->score - own->score) > tol ||
                fabs(x->gate - own->gate) > 1e-4 * (fabs(own->gate) + 1e-3)) {
                if (bad++ < 3)
                    fprintf(stderr, "%s L%d #%d: feature %lld score %g gate %g; float64 "
                            "#%d feature %lld key %g\n", name, i, j, (long long)x->feature,
                            (double)x->score, (double)x->gate, j, (long long)r[j].f,
                            r[j].key);
            }
        }
        free(r);
    }
    CHECK_MSG(bad == 0, "%s: %d hits differ from float64", name, bad);
    CHECK_MSG(w.bytes_scanned == bytes, "%s: bytes %llu want %llu", name,
              (unsigned long long)w.bytes_scanned, (unsigned long long)bytes);
    free(q);
    brw_walk_free(&w);
    return bad;
}

#endif
