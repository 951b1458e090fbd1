/*
 * test_browse_knn.c — the gate-KNN kernel against a float64 sort on synthetic gate rows:
 * f32, f16 and bf16 storage, odd widths, a MoE layer of several expert parts, ties, k
 * larger than the layer, an overlay (tombstones, replacement rows) kept exact, and rows
 * holding NaN or infinity (NaN ranks last).
 */
#include "brw_int.h"
#include "t.h"

#include <math.h>
#include <stdlib.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

typedef struct ref { int64_t f; double s; } ref;

static int cmp_ref(const void *pa, const void *pb)
{
    const ref *a = pa, *b = pb;
    double x = a->s < 0 ? -a->s : a->s, y = b->s < 0 ? -b->s : b->s;
    if (x != y)
        return x > y ? -1 : 1;
    return a->f < b->f ? -1 : a->f > b->f;
}

/* Stored value of element i of a row, widened exactly. */
static double elem(vx_dtype t, const void *row, int64_t i)
{
    if (t == VX_F32)
        return ((const float *)row)[i];
    if (t == VX_F16)
        return vx_f16_to_f32(((const uint16_t *)row)[i]);
    return vx_bf16_to_f32(((const uint16_t *)row)[i]);
}

static void *make_rows(vx_dtype t, int64_t rows, int hidden)
{
    size_t esz = t == VX_F32 ? 4 : 2, n = (size_t)rows * (size_t)hidden;
    uint8_t *p = aligned_alloc(64, (n * esz + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) {
        float x = frand();
        if (t == VX_F32)
            ((float *)p)[i] = x;
        else if (t == VX_F16)
            ((uint16_t *)p)[i] = vx_f32_to_f16(x);
        else
            ((uint16_t *)p)[i] = vx_f32_to_bf16(x);
    }
    return p;
}

int main(void)
{
    for (vx_dtype t = VX_F32; t <= VX_BF16; t++) {
        for (int hidden = 1; hidden <= 70; hidden += 23) {
            void *row = make_rows(t, 1, hidden);
            float q[80];
            double want = 0;
            for (int i = 0; i < hidden; i++) {
                q[i] = frand();
                want += elem(t, row, i) * q[i];
            }
            CHECK_NEAR(eng_row_dot(t, row, q, hidden), want, 1e-5 * hidden);
            free(row);
        }
    }

    /* a model: layer 0 dense (f16, 1000 rows), layer 1 MoE of 3 bf16 experts of 77 rows,
     * layer 2 dense f32 with 5 rows */
    enum { H = 67 };
    vx_tensor g[5];
    memset(g, 0, sizeof g);
    vx_dtype dts[5] = {VX_F16, VX_BF16, VX_BF16, VX_BF16, VX_F32};
    int64_t rows[5] = {1000, 77, 77, 77, 5};
    for (int i = 0; i < 5; i++) {
        g[i].dtype = dts[i];
        g[i].ndim = 2;
        g[i].shape[0] = rows[i];
        g[i].shape[1] = H;
        g[i].data = make_rows(dts[i], rows[i], H);
        g[i].nbytes = (uint64_t)rows[i] * H * (dts[i] == VX_F32 ? 4 : 2);
    }
    /* a tie: rows 10 and 11 of layer 0 identical */
    memcpy((uint8_t *)g[0].data + 11 * H * 2, (const uint8_t *)g[0].data + 10 * H * 2, H * 2);
    brw_part p0 = {&g[0], NULL, 0, 1000, NULL, NULL, NULL, NULL};
    brw_part p1[3] = {{&g[1], NULL, 0, 77, NULL, NULL, NULL, NULL}, {&g[2], NULL, 77, 77, NULL, NULL, NULL, NULL},
                      {&g[3], NULL, 154, 77, NULL, NULL, NULL, NULL}};
    brw_part p2 = {&g[4], NULL, 0, 5, NULL, NULL, NULL, NULL};
    brw_layer layers[3] = {{1, &p0, 1000, g[0].nbytes, 0, NULL},
                           {3, p1, 231, g[1].nbytes * 3, 0, NULL},
                           {1, &p2, 5, g[4].nbytes, 0, NULL}};
    brw_model m;
    memset(&m, 0, sizeof m);
    m.s.layers = 3;
    m.s.hidden = H;
    m.s.layer = layers;
    float q[H];
    for (int i = 0; i < H; i++)
        q[i] = frand();

    int want_layers[3] = {0, 1, 2};
    enum { K = 12 };
    brw_hit hits[3 * K];
    int counts[3];
    vx_err err = {0};
    CHECK(brw_gate_knn(&m, want_layers, 3, q, K, NULL, hits, counts, &err) == 0);
    CHECK(counts[0] == K && counts[1] == K && counts[2] == 5);
    ref *r = malloc(1000 * sizeof *r), *r0 = malloc(1000 * sizeof *r0);
    for (int l = 0; l < 3; l++) {
        int64_t n = 0;
        for (int p = 0; p < layers[l].n_parts; p++) {
            const brw_part *pt = &layers[l].parts[p];
            size_t rb = (size_t)H * (pt->gate->dtype == VX_F32 ? 4 : 2);
            for (int64_t i = 0; i < pt->rows; i++) {
                double s = 0;
                for (int j = 0; j < H; j++)
                    s += elem(pt->gate->dtype, (const uint8_t *)pt->gate->data + i * rb, j) * q[j];
                r[n++] = (ref){pt->first + i, s};
            }
        }
        qsort(r, (size_t)n, sizeof *r, cmp_ref);
        if (l == 0)
            memcpy(r0, r, (size_t)n * sizeof *r);
        int ok = 1;
        for (int j = 0; j < counts[l]; j++) {
            const brw_hit *h = &hits[l * K + j];
            ok &= h->layer == l && h->feature == r[j].f && fabs(h->score - r[j].s) < 1e-4;
        }
        CHECK_MSG(ok, "layer %d top-%d differs from the float64 ranking", l, K);
    }
    /* the tie is ordered by feature (both rows score the same) */
    int q10 = -1, q11 = -1;
    brw_hit all[1000];
    int c1;
    CHECK(brw_gate_knn(&m, want_layers, 1, q, 1000, NULL, all, &c1, &err) == 0 && c1 == 1000);
    for (int j = 0; j < 1000; j++) {
        if (all[j].feature == 10)
            q10 = j;
        if (all[j].feature == 11)
            q11 = j;
    }
    CHECK(q10 >= 0 && q11 == q10 + 1);

    /* overlay: tombstone the best hit of layer 0, replace the gate of a weak feature with
     * q itself (it must become the top hit with score |q|²) */
    brw_hit base[K];
    memcpy(base, hits, sizeof base);
    int64_t weak = all[999].feature;
    eng_feature_edit ed[2] = {{.layer = 0, .feature = base[0].feature, .tombstone = 1},
                              {.layer = 0, .feature = weak, .gate = q}};
    eng_overlay eo = {ed, 2, NULL, 0, NULL, 0};
    CHECK(brw_gate_knn(&m, want_layers, 1, q, K, &eo, hits, counts, &err) == 0);
    double qq = 0;
    for (int i = 0; i < H; i++)
        qq += (double)q[i] * q[i];
    CHECK(counts[0] == K);
    CHECK(hits[0].feature == weak);
    CHECK_NEAR(hits[0].score, qq, 1e-4);
    int ok = 1;
    for (int j = 1; j < K; j++)
        ok &= hits[j].feature == base[j].feature;
    CHECK_MSG(ok, "the rest of the overlay ranking is the base ranking minus the tombstone");

    /* broken weights: rows 20-24 of layer 0 hold a NaN, row 30 an infinity. NaN ranks
     * below every number (it never displaces a finite hit), the infinity first. */
    for (int i = 20; i < 25; i++)
        ((uint16_t *)g[0].data)[i * H + i % H] = 0x7E00;
    ((uint16_t *)g[0].data)[30 * H + 3] = 0x7C00;
    CHECK(brw_gate_knn(&m, want_layers, 1, q, K, NULL, hits, counts, &err) == 0 && counts[0] == K);
    CHECK(hits[0].feature == 30 && isinf(hits[0].score));
    int finite = 0;
    for (int j = 1, i = 0; j < K; j++, i++) {
        while (r0[i].f == 30 || (r0[i].f >= 20 && r0[i].f < 25))
            i++;
        finite += hits[j].feature == r0[i].f && !isnan(hits[j].score);
    }
    CHECK_MSG(finite == K - 1, "a NaN row displaced a finite hit (%d of %d kept)", finite, K - 1);
    CHECK(brw_gate_knn(&m, want_layers, 1, q, 1000, NULL, all, &c1, &err) == 0 && c1 == 1000);
    ok = 1;
    for (int j = 0; j < 5; j++)
        ok &= all[995 + j].feature == 20 + j && isnan(all[995 + j].score);
    for (int j = 0; j < 995; j++)
        ok &= !isnan(all[j].score);
    CHECK_MSG(ok, "the NaN rows come last, in feature order");

    /* errors */
    int bad = 3;
    CHECK(brw_gate_knn(&m, &bad, 1, q, K, NULL, hits, counts, &err) == -1);
    CHECK_STR(err.msg, "layer 3 is out of range (the model has 3 layers: 0-2)");
    CHECK(brw_gate_knn(&m, want_layers, 1, q, 0, NULL, hits, counts, &err) == -1);
    CHECK_STR(err.msg, "gate knn: k must be positive (got 0)");

    free(r);
    free(r0);
    for (int i = 0; i < 5; i++)
        free((void *)g[i].data);
    return T_DONE();
}
