/*
 * downmeta.c — the encode hook that computes down-meta: for every FFN feature f of every
 * layer, logits = E · down[:, f] over the whole vocabulary (E the unscaled embedding, no
 * final norm), keeping the top BRW_DOWN_TOP_K (id, logit) pairs; then records the layer
 * bands in index.json.
 *
 * The record is defined by the exact pass: the top k of eng_row_dot(E[v], down[:, f])
 * (exact weights, f32) over every v, by (logit desc, id asc); an all-zero column has none
 * (silent_col). Computing that for every v is 2·vocab·hidden·features·layers flops (16
 * TFLOP for a 1.1B Llama), so each chunk of FC features runs two passes that give the same
 * records:
 *   1. screen: the whole vocabulary is scored by a fast product with a proven error bound
 *      B per feature, the fastest the CPU has of
 *        int8   (eng_screen_u8s8, AVX512-VNNI, AMX-INT8 or AVX2): E's rows and the columns
 *               quantised to int8 (the columns to ±64 on AVX2, whose pair sums are 16-bit)
 *               with one f32 scale per row / column; the integer sums are exact, B
 *               covers both quantisations (‖e − ê‖·‖d̂‖ + ‖e‖·‖d − d̂‖) and the three
 *               f32 roundings that apply the scales;
 *        bf16   (eng_screen_bf16, AVX512-BF16): E and the columns rounded to bf16, pair
 *               products exact, f32 sums; B covers the rounding of both operands
 *               (‖e' − e‖·‖d'‖ + ‖e‖·‖d' − d‖, zero for a bf16 checkpoint), the f32
 *               summation (eng_sum_gamma) and denormal flushing;
 *        f32    the engine's matrix door (eng_matmul_rows).
 *      A token can be in the exact top k only if its screened score reaches t − 2(B + R),
 *      t the k-th best screened score so far and R the bound of the exact pass's own
 *      rounding; every such token is a candidate. B uses the largest embedding row norms,
 *      so one threshold serves a feature's whole scan.
 *   2. the candidates are rescored by the exact pass and the best k written.
 * The product runs on the engine's pool and hands each block of results to the admission
 * (admit_block) on the thread that computed it, while it is in cache; each pool part keeps
 * its own thresholds and candidates and rescores its own candidates; the parts' best k are
 * merged per feature.
 */
#include "brw_int.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <immintrin.h>

#define FC 256          /* features per chunk */
#define VTILE 4080      /* vocabulary rows per f32 screen product (its logits go to cbuf) */
#define K BRW_DOWN_TOP_K
/* the int8 and bf16 screens run only where the CPU has these (eng_*_dot_ready) */
#define T512 __attribute__((target("avx512f")))

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void putf(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put32(p, u);
}

/* ---------------------------------------------------------------- shared state */

typedef struct dm_chunk {
    const brw_part *part;
    int64_t f0;
    int nb;
} dm_chunk;

/* A candidate: a screened score that reached its feature's threshold. */
typedef struct dm_hit {
    float val;
    int32_t id;              /* the vocabulary row */
    int32_t j;               /* the chunk's feature */
} dm_hit;

enum { DM_F32 = 1, DM_BF16, DM_I8 };

/* Tests choose the screen (0: the fastest this CPU has) and can drop the bound. */
static int forced_screen, zero_margin;

void brw_downmeta_test_set(int screen, int no_margin)
{
    forced_screen = screen;
    zero_margin = no_margin;
}

/* What one pool part has admitted for each feature of the chunk, from the vocabulary rows
 * it screened (the parts' rows are disjoint: eng_screen_* gives each row block to one part,
 * in ascending order), and the exact best k of the candidates it rescored. */
typedef struct dm_part {
    float *thr;              /* [FC] the admission threshold; only rises */
    float *top;              /* [FC, K] the k best screened scores so far, descending */
    int *tn;                 /* [FC] */
    dm_hit *hit;             /* the candidates, in the order admitted */
    size_t n, cap;
    dm_hit *side;            /* those among the part's k best screened when admitted */
    size_t sn, scap;
    dm_hit *sel, *sel2;      /* a rescoring pass's candidates, then sorted by feature */
    size_t selcap, sel2cap;
    int *cnt;                /* [FC + 1] */
    int32_t *xid;            /* [FC, K] the exact best k of the rescored, by (logit desc, id) */
    float *xval;             /* [FC, K] */
    int *xn;                 /* [FC] */
} dm_part;

/* The scratch of the pass: one chunk at a time. */
typedef struct dm_worker {
    const brw_shape *s;
    int screen;              /* DM_* */
    int wide;                /* eng_avx512(), read once (admit_block's form) */
    int xlim;                /* eng_u8s8_x_limit(), read once: the columns' int8 range */
    uint8_t *rec;            /* the layer's records [features, record bytes] */
    size_t rb;
    float *dcol;             /* [FC, hidden] the chunk's down columns, feature-major */
    uint16_t *xb;            /* [FC, hidden] the same rounded to bf16 (bf16 screen) */
    int8_t *xq;              /* [FC, hidden] the same quantised (int8 screen) */
    float *dsc;              /* [FC] their scales */
    int32_t *dcorr;          /* [FC] 128 · Σ of the quantised column (E is stored + 128) */
    float *cbuf;             /* [FC, VTILE] the f32 screen's logits of one vocabulary tile */
    double *margin;          /* [FC] 2(B + R) */
    int parts;               /* pool parts admitting (eng_screen_fn's part < parts) */
    dm_part *pst;            /* [parts] */
    /* the rescoring's per feature: a candidate is rescored in the first pass if its screened
     * score reaches first[j], in the second if it reaches lo2[j] (+∞: silent column, none) */
    float *first, *lo2;      /* [FC] */
    /* the embedding as the screen reads it: bf16 rows (in place, or a rounded copy), or
     * int8 rows stored + 128 with a scale per row */
    const uint8_t *eb;
    uint16_t *eb_copy;
    uint8_t *eq;
    int eq_packed;           /* eq as eng_u8s8_pack_row lays it out (row v0's block at v0 · H) */
    float *esc;
    double e_max, eb_max, de_max;  /* largest ‖e‖, ‖e'‖, ‖e' − e‖ over the rows (e' = ê) */
    float *rn;               /* [vocab, 3] each row's ‖e‖, ‖e'‖, ‖e' − e‖, rounded up */
    double *fn;              /* [FC, 3] each column's ‖d‖, ‖d'‖, ‖d' − d‖ */
    float *x10;              /* [FC] the k-th exact logit after the first rescoring pass */
    /* the chunk's features; the first vocabulary row of the product (v0, and vt its rows:
     * the f32 screen's tiles; the other screens run one product from row 0) */
    int nb, v0, vt;
    const dm_chunk *pch;     /* the chunk being prepared */
    atomic_int next_row;     /* the f32 screen's next row to admit */
    dm_chunk *chunks;        /* a layer's chunks */
    int pass;                /* the rescoring's pass, 1 or 2 */
    atomic_int failed;
} dm_worker;

/* Load the chunk's down columns j0 ≤ j < j1 into w->dcol as f32, feature-major. */
static void load_cols(dm_worker *w, const dm_chunk *ch, int j0, int j1)
{
    const brw_shape *s = w->s;
    const vx_tensor *dn = ch->part->down;
    int H = s->hidden;
    unsigned be = 1, bb = 0;
    if (vx_quant_block(dn->dtype, &be, &bb) == 0) {
        /* a block codec with source authority (MXFP4 experts): decode the blocks covering
         * the chunk's features of each row */
        const size_t f0 = (size_t)ch->f0 + (size_t)j0;
        size_t b0 = f0 / be, b1 = (f0 + (size_t)(j1 - j0) + be - 1) / be;
        size_t rb = (size_t)ch->part->rows / be * bb, skip = f0 - b0 * be;
        float buf[FC + 256];
        for (int h = 0; h < H; h++) {
            vx_dequantize_row(dn->dtype, (const uint8_t *)dn->data + (size_t)h * rb + b0 * bb, buf,
                              (b1 - b0) * be);
            for (int j = j0; j < j1; j++)
                w->dcol[(size_t)j * (size_t)H + (size_t)h] = buf[skip + (size_t)(j - j0)];
        }
        return;
    }
    size_t esz = dn->dtype == VX_F32 ? 4 : 2;
    float tmp[FC];
    for (int h = 0; h < H; h++) {
        const uint8_t *row = (const uint8_t *)dn->data +
                             ((size_t)h * (size_t)ch->part->rows + (size_t)ch->f0 + (size_t)j0) * esz;
        vx_row_to_f32(dn->dtype, row, tmp, (size_t)(j1 - j0));
        for (int j = j0; j < j1; j++)
            w->dcol[(size_t)j * (size_t)H + (size_t)h] = tmp[j - j0];
    }
}

/* f32 → bf16 as vdpbf16ps sees it: rounded to nearest even, subnormals flushed to zero (the
 * instruction would treat them as zero anyway; flushing here puts that in the bound). */
static uint16_t to_bf16(float x, float *back)
{
    uint16_t h = vx_f32_to_bf16(x);
    if (!(h & 0x7f80u)) h &= 0x8000u;
    *back = vx_bf16_to_f32(h);
    return h;
}

/* ‖x‖, ‖x'‖ and ‖x' − x‖ of a row, x' its rounding to bf16 (written to xb) or x itself when
 * xb is NULL (the row is screened as stored). */
static void round_row(const float *x, int n, uint16_t *xb, double nrm[3])
{
    double nx = 0, nb = 0, nd = 0;
    for (int i = 0; i < n; i++) {
        float b = x[i];
        if (xb) xb[i] = to_bf16(x[i], &b);
        nx += (double)x[i] * x[i];
        nb += (double)b * b;
        nd += ((double)b - x[i]) * ((double)b - x[i]);
    }
    nrm[0] = sqrt(nx);
    nrm[1] = sqrt(nb);
    nrm[2] = sqrt(nd);
}

/* x quantised to int8 with one f32 scale sc = max|x| / lim (|q_i| ≤ lim ≤ 127): out[i] =
 * q_i + bias as a byte, ê_i = sc · q_i (exact in double). ‖x‖, ‖ê‖ and ‖ê − x‖ go to nrm;
 * returns Σ q_i. */
static int32_t quant_row(const float *x, int n, int lim, uint8_t *out, int bias, float *sc,
                         double nrm[3])
{
    float mx = 0;
    for (int i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        mx = a > mx ? a : mx;   /* fmaxf's result (NaN skipped), in a form that vectorises */
    }
    const float scale = mx / (float)lim;
    /* 8 values a step (the scalar loop's three double sums in sequence ran at a few cycles
     * a value, 5 % of the 1.1B encode); the norms' summation order differs from the
     * tail's, which the bound's 2^-20 slack on them covers in any order */
    __m256d vx = _mm256_setzero_pd(), vq = vx, vd = vx;
    __m256i vs = _mm256_setzero_si256();
    int i = 0;
    for (; i + 8 <= n && scale > 0; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        __m256 r = _mm256_round_ps(_mm256_div_ps(xv, _mm256_set1_ps(scale)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        /* as the tail: NaN to 0, then clamped to ±lim */
        r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));
        r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps((float)-lim)), _mm256_set1_ps((float)lim));
        const __m256i q = _mm256_cvtps_epi32(r);
        vs = _mm256_add_epi32(vs, q);
        int32_t qb[8];
        _mm256_storeu_si256((__m256i *)(void *)qb, _mm256_add_epi32(q, _mm256_set1_epi32(bias)));
        for (int k = 0; k < 8; k++) out[i + k] = (uint8_t)qb[k];
        for (int h = 0; h < 2; h++) {
            const __m256d xd = _mm256_cvtps_pd(h ? _mm256_extractf128_ps(xv, 1) : _mm256_castps256_ps128(xv));
            const __m256d e = _mm256_mul_pd(_mm256_set1_pd((double)scale),
                                            _mm256_cvtepi32_pd(h ? _mm256_extracti128_si256(q, 1)
                                                                 : _mm256_castsi256_si128(q)));
            const __m256d de = _mm256_sub_pd(e, xd);
            vx = _mm256_fmadd_pd(xd, xd, vx);
            vq = _mm256_fmadd_pd(e, e, vq);
            vd = _mm256_fmadd_pd(de, de, vd);
        }
    }
    double lx[4], lq[4], ld[4];
    int32_t ls[8];
    _mm256_storeu_pd(lx, vx);
    _mm256_storeu_pd(lq, vq);
    _mm256_storeu_pd(ld, vd);
    _mm256_storeu_si256((__m256i *)(void *)ls, vs);
    double nx = lx[0] + lx[1] + lx[2] + lx[3], nq = lq[0] + lq[1] + lq[2] + lq[3],
           nd = ld[0] + ld[1] + ld[2] + ld[3];
    int32_t sum = ls[0] + ls[1] + ls[2] + ls[3] + ls[4] + ls[5] + ls[6] + ls[7];
    for (; i < n; i++) {
        /* any q is sound (the bound uses the q chosen); clamped, non-finite input too */
        const float r = scale > 0 ? nearbyintf(x[i] / scale) : 0;
        const int q = r >= lim ? lim : r <= -lim ? -lim : r == r ? (int)r : 0;
        const double e = (double)scale * q;
        out[i] = (uint8_t)(q + bias);
        sum += q;
        nx += (double)x[i] * x[i];
        nq += e * e;
        nd += (e - x[i]) * (e - x[i]);
    }
    *sc = scale;
    nrm[0] = sqrt(nx);
    nrm[1] = sqrt(nq);
    nrm[2] = sqrt(nd);
    return sum;
}

/* The fastest screen this CPU has for the shape (or the one a test forced, if it can). */
static int pick_screen(int H)
{
    const int i8 = H % 4 == 0 && H <= 65536;
    const int bf = eng_bf16_dot_ready() && H % 2 == 0;
    if (forced_screen == DM_F32 || (forced_screen == DM_BF16 && bf)) return forced_screen;
    return i8 ? DM_I8 : bf ? DM_BF16 : DM_F32;
}

const char *brw_downmeta_screen(int hidden)
{
    static const char *name[] = {"", "f32 (eng_matmul_rows)", "bf16 (AVX512-BF16)",
                                 "int8 (AVX512-VNNI)"};
    const int s = pick_screen(hidden);
    if (s == DM_I8 && eng_u8s8_amx(hidden)) return "int8 (AMX-INT8)";
    return s == DM_I8 && eng_u8s8_x_limit() < 127 ? "int8 (AVX2)" : name[s];
}

/* The embedding's row norms and the copy the screen reads: bf16 (unless stored so) or int8. */
static int prepare_embed(dm_worker *w, vx_err *err)
{
    const brw_shape *s = w->s;
    const vx_tensor *E = s->embed;
    const int H = s->hidden;
    const size_t esz = E->dtype == VX_F32 ? 4 : 2, VH = (size_t)s->vocab * (size_t)H;
    w->screen = pick_screen(H);
    w->wide = eng_avx512();
    w->xlim = eng_u8s8_x_limit();
    /* AMX-INT8 reads E in whole tiles (eng_u8s8_pack_row): each row is quantised into qrow
     * and put in place */
    w->eq_packed = w->screen == DM_I8 && eng_u8s8_amx(H);
    float *row = malloc((size_t)H * sizeof *row);
    uint8_t *qrow = w->eq_packed ? malloc((size_t)H) : NULL;
    if (!row || (w->eq_packed && !qrow)) {
        free(row);
        free(qrow);
        return vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
    }
    if (!(w->rn = malloc((size_t)s->vocab * 3 * sizeof *w->rn)) ||
        (w->screen == DM_BF16 && E->dtype != VX_BF16 &&
         !(w->eb_copy = malloc(VH * sizeof *w->eb_copy))) ||
        (w->screen == DM_I8 && (!(w->eq = w->eq_packed ? calloc(1, eng_u8s8_pack_bytes(s->vocab, H))
                                                       : malloc(VH)) ||
                                !(w->esc = malloc((size_t)s->vocab * sizeof *w->esc))))) {
        free(row);
        free(qrow);
        return vx_errf(err, VX_ENOMEM, "down_meta: out of memory for the embedding's %s copy",
                       w->screen == DM_I8 ? "int8" : "bf16");
    }
    w->eb = w->eb_copy ? (const uint8_t *)w->eb_copy : (const uint8_t *)E->data;
    for (int v = 0; v < s->vocab; v++) {
        vx_row_to_f32(E->dtype, (const uint8_t *)E->data + (size_t)v * (size_t)H * esz, row,
                      (size_t)H);
        double nrm[3];
        if (w->screen == DM_I8) {
            quant_row(row, H, 127, qrow ? qrow : w->eq + (size_t)v * (size_t)H, 128, &w->esc[v], nrm);
            if (qrow) eng_u8s8_pack_row(w->eq, H, v, qrow);
        } else
            round_row(row, H, w->eb_copy ? w->eb_copy + (size_t)v * (size_t)H : NULL, nrm);
        w->e_max = fmax(w->e_max, nrm[0]);
        w->eb_max = fmax(w->eb_max, nrm[1]);
        w->de_max = fmax(w->de_max, nrm[2]);
        for (int q = 0; q < 3; q++) {
            float f = (float)nrm[q];
            w->rn[(size_t)v * 3 + (size_t)q] = (double)f < nrm[q] ? nextafterf(f, INFINITY) : f;
        }
    }
    free(row);
    free(qrow);
    return 0;
}

/* B + R for feature j (its column's norms in w->fn) and an embedding row of norms e = ‖e‖,
 * eb = ‖e'‖, de = ‖e' − e‖ (or the largest over the rows): B bounds |screened − exact
 * product| and R the exact pass's own rounding. */
static double row_bound(const dm_worker *w, int j, double e, double eb, double de)
{
    const int H = w->s->hidden;
    const double u = ldexp(1.0, -23);
    const double nd = w->fn[(size_t)j * 3], nb = w->fn[(size_t)j * 3 + 1], dd = w->fn[(size_t)j * 3 + 2];
    double B;
    if (w->screen == DM_I8)
        /* the integer sum is exact; fl(fl(fl(I) · sc_e) · sc_d) has three roundings of
         * at most u/2 relative, and in the subnormal range 2^-149 absolute each, the
         * first carried through the × sc_d */
        B = de * nb + e * dd + 3 * u * eb * nb + ldexp(1.0, -148) * (1 + w->dsc[j]);
    else if (w->screen == DM_BF16)
        B = eng_sum_gamma(H) * eb * nb + de * nb + e * dd + eng_bf16_sum_slack(H, nb, eb);
    else   /* f32 products (AMX's split activations: 2^-20 for a part's underflow) */
        B = (eng_sum_gamma(H + 64) + ldexp(1.0, -20)) * e * nd + eng_bf16_sum_slack(H, nd, e);
    return B + eng_sum_gamma(H + 32) * e * nd + eng_bf16_sum_slack(H, nd, e);
}

/* Is the column all zero? Such a feature writes nothing to the residual stream, so it has
 * no output token: its record is the all-zero one (no metadata), as COMPILE writes for a
 * tombstone, whose down column it zeroes — so a compiled tombstone reads the same whether
 * the container stores its down-meta or computes it on demand. */
static int silent_col(const float *col, int H)
{
    for (int h = 0; h < H; h++)
        if (col[h] != 0)
            return 0;
    return 1;
}

/* Load the chunk's columns (those of part i of n), round them for the screen and set each
 * feature's margin 2(B + R). */
static void prepare_part(void *ctx, int part, int parts)
{
    dm_worker *w = ctx;
    const dm_chunk *ch = w->pch;
    const int H = w->s->hidden;
    const int j0 = (int)((int64_t)ch->nb * part / parts), j1 = (int)((int64_t)ch->nb * (part + 1) / parts);
    load_cols(w, ch, j0, j1);
    for (int j = j0; j < j1; j++) {
        double nrm[3];
        const float *d = w->dcol + (size_t)j * (size_t)H;
        if (w->screen == DM_I8)
            w->dcorr[j] = 128 * quant_row(d, H, w->xlim, (uint8_t *)w->xq + (size_t)j * (size_t)H, 0,
                                          &w->dsc[j], nrm);
        else
            round_row(d, H, w->screen == DM_BF16 ? w->xb + (size_t)j * (size_t)H : NULL, nrm);
        for (int q = 0; q < 3; q++) w->fn[(size_t)j * 3 + (size_t)q] = nrm[q];
        const double M = row_bound(w, j, w->e_max, w->eb_max, w->de_max), nb = nrm[1];
        /* the norms were summed in double: 2^-20 more covers their own rounding; a screened
         * score that could overflow f32 admits everything */
        double m = 2 * M * (1 + ldexp(1.0, -20));
        w->margin[j] = zero_margin ? 0 : isfinite(m) && w->eb_max * nb < 1e37 ? m : INFINITY;
        /* an all-zero column has no record (silent_col): nothing is admitted for it */
        const float start = silent_col(d, H) ? INFINITY : -INFINITY;
        for (int p = 0; p < w->parts; p++) {
            w->pst[p].thr[j] = start;
            w->pst[p].tn[j] = 0;
            w->pst[p].xn[j] = 0;
        }
    }
}

/* The largest float not above t (−∞ when t is not a number: admit everything). */
static float floor_f32(double t)
{
    if (isnan(t)) return -INFINITY;
    float f = (float)t;
    return (double)f > t ? nextafterf(f, -INFINITY) : f;
}

/* The admission threshold t − 2(B + R) of feature j, t a k-th best screened score: the
 * largest float not above it. */
static float screen_thr(const dm_worker *w, int j, float t)
{
    return floor_f32((double)t - w->margin[j]);
}

/* Room for n hits in *h (capacity *cap). */
static int grow_hits(dm_hit **h, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    size_t c = *cap ? 2 * *cap : 4096;
    while (c < n)
        c *= 2;
    dm_hit *p = realloc(*h, c * sizeof *p);
    if (!p)
        return -1;
    *h = p;
    *cap = c;
    return 0;
}

/* Room for `more` candidates after ps's n: those the part's thresholds have passed since
 * they were admitted are dropped first (the order kept), and the list grows when that frees
 * little. */
static int hit_room(dm_part *ps, size_t more)
{
    if (ps->n + more <= ps->cap)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < ps->n; i++) {
        /* each copied, kept by the count: about half stay, a branch on it mispredicted */
        const dm_hit h = ps->hit[i];
        ps->hit[n] = h;
        n += h.val >= ps->thr[h.j];
    }
    ps->n = n;
    if (n + more <= ps->cap && n < ps->cap / 2)
        return 0;
    /* more than half stay: grow, or the next blocks would compact again at once */
    return grow_hits(&ps->hit, &ps->cap, n + more > ps->cap ? n + more : ps->cap + 1);
}

/* Insert a into a descending best k of *n values. */
static void top_insert(float *top, int *n, float a)
{
    if (*n == K && !(a > top[K - 1]))
        return;
    int p = *n < K ? (*n)++ : K - 1;
    while (p > 0 && a > top[p - 1]) {
        top[p] = top[p - 1];
        p--;
    }
    top[p] = a;
}

/* h into its part's k best if it belongs there, and onto the side list: 1 if it entered. */
static int enter_top(dm_part *ps, dm_hit h)
{
    float *top = ps->top + (size_t)h.j * K;
    if (ps->tn[h.j] == K && h.val < top[K - 1]) return 0;   /* a tie may be the k-th */
    top_insert(top, &ps->tn[h.j], h.val);
    ps->side[ps->sn++] = h;
    return 1;
}

/* The hits of one row and 16 features (mask m over a's lanes, j0 the first feature) appended
 * to a part's list of n as dm_hit {val, id, j}, the new n returned: a's and the features'
 * lanes compressed, then interleaved with the row's id into three vectors of 16 dm_hit
 * (stored whatever their number; admit_block's hit_room leaves room for 16 more). */
static const int32_t hit_perm[3][16] = {
    {0, 0, 16, 1, 0, 17, 2, 0, 18, 3, 0, 19, 4, 0, 20, 5},
    {0, 21, 6, 0, 22, 7, 0, 23, 8, 0, 24, 9, 0, 25, 10, 0},
    {26, 11, 0, 27, 12, 0, 28, 13, 0, 29, 14, 0, 30, 15, 0, 31}};
static const uint16_t hit_idmask[3] = {0x2492, 0x9249, 0x4924};

T512 static inline size_t put_hits(dm_hit *hit, size_t n, __mmask16 m, __m512 a, int j0, int id)
{
    const __m512i v = _mm512_castps_si512(_mm512_maskz_compress_ps(m, a));
    const __m512i j = _mm512_maskz_compress_epi32(
        m, _mm512_add_epi32(_mm512_set1_epi32(j0),
                            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
    const __m512i idv = _mm512_set1_epi32(id);
    int32_t *out = (int32_t *)(void *)(hit + n);
    for (int k = 0; k < 3; k++)
        _mm512_storeu_si512((void *)(out + 16 * k),
                            _mm512_mask_blend_epi32(hit_idmask[k], _mm512_permutex2var_epi32(
                                v, _mm512_loadu_si512((const void *)hit_perm[k]), j), idv));
    return n + (size_t)__builtin_popcount(m);
}

/* admit_block's rows for the int8 and bf16 screens (CPUs with AVX-512): 16 features a
 * compare; the int8 sums scaled, fl(fl(fl(I − 128·Σq_d) · sc_e) · sc_d). The hits are
 * appended without a branch per hit (put_hits: the per-hit stores and loop exits of the
 * AVX2 form cost a third of the 1.1B encode), and those that may enter the part's k best
 * are found by one more compare, against each feature's k-th best as the block started:
 * it only rises, so that is a superset, each checked against the live one as the AVX2
 * form's second pass checks every hit, in the same order. Returns the features whose k
 * best changed. */
T512 static uint64_t admit_rows512(dm_worker *w, dm_part *ps, int v0, int nr, int t0, int tn,
                                   const void *cv, const float *thr)
{
    const int i8 = w->screen == DM_I8;
    uint64_t touched = 0;
    float kth[64] __attribute__((aligned(64)));
    for (int t = 0; t < 64; t++)
        kth[t] = t >= tn ? INFINITY
                 : ps->tn[t0 + t] == K ? ps->top[(size_t)(t0 + t) * K + K - 1] : -INFINITY;
    const int32_t *dcorr = i8 ? w->dcorr + t0 : NULL;
    const float *dsc = i8 ? w->dsc + t0 : NULL;
    dm_hit *const hit = ps->hit;   /* (locals: the stores through hit may alias ps) */
    size_t n = ps->n;
    for (int i = 0; i < nr; i++) {
        const int32_t *ci = (const int32_t *)cv + (size_t)i * 64;
        const float *fi = (const float *)cv + (size_t)i * 64;
        const __m512 esc = _mm512_set1_ps(i8 ? w->esc[v0 + i] : 0.f);
        for (int tg = 0; tg < tn; tg += 16) {
            const __mmask16 lanes = tn - tg >= 16 ? 0xffff : (__mmask16)((1u << (tn - tg)) - 1);
            const __m512 a = i8 ? _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(
                                                                  _mm512_loadu_si512((const void *)(ci + tg)),
                                                                  _mm512_loadu_si512((const void *)(dcorr + tg)))),
                                                              esc),
                                                _mm512_loadu_ps(dsc + tg))
                                : _mm512_loadu_ps(fi + tg);
            const __mmask16 m = _mm512_cmp_ps_mask(a, _mm512_load_ps(thr + tg), _CMP_GE_OQ) & lanes;
            if (!m) continue;
            n = put_hits(hit, n, m, a, t0 + tg, v0 + i);
            __mmask16 e = _mm512_cmp_ps_mask(a, _mm512_load_ps(kth + tg), _CMP_GE_OQ) & m;
            if (!e) continue;
            float av[16];
            _mm512_storeu_ps(av, a);
            for (; e; e &= (__mmask16)(e - 1)) {
                const int b = __builtin_ctz(e);
                if (enter_top(ps, (dm_hit){av[b], v0 + i, t0 + tg + b})) touched |= 1ull << (tg + b);
            }
        }
    }
    ps->n = n;
    return touched;
}

/* The same without AVX-512 (the f32 screen's blocks, or the int8 screen's scaled as
 * admit_rows512 scales them): 8 features a compare, the hits appended one by one, then
 * each brought into the part's k best in turn. */
static uint64_t admit_rows256(const dm_worker *w, dm_part *ps, int v0, int nr, int t0, int tn,
                              const void *cv, const float *thr)
{
    const int i8 = w->screen == DM_I8;
    const size_t n0 = ps->n;
    uint64_t touched = 0;
    for (int i = 0; i < nr; i++) {
        const int32_t *ci = (const int32_t *)cv + (size_t)i * 64;
        const float *fi = (const float *)cv + (size_t)i * 64;
        const __m256 esc = _mm256_set1_ps(i8 ? w->esc[v0 + i] : 0.f);
        for (int tg = 0; tg < tn; tg += 8) {
            const unsigned lanes = tn - tg >= 8 ? 0xffu : (1u << (tn - tg)) - 1;
            const __m256 a = i8 ? _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(
                                                                  _mm256_loadu_si256((const __m256i *)(const void *)(ci + tg)),
                                                                  _mm256_loadu_si256((const __m256i *)(const void *)(w->dcorr + t0 + tg)))),
                                                              esc),
                                                _mm256_loadu_ps(w->dsc + t0 + tg))
                                : _mm256_loadu_ps(fi + tg);
            unsigned m = (unsigned)_mm256_movemask_ps(
                             _mm256_cmp_ps(a, _mm256_load_ps(thr + tg), _CMP_GE_OQ)) & lanes;
            if (!m) continue;
            float av[8];
            _mm256_storeu_ps(av, a);
            for (; m; m &= m - 1) {
                const int b = __builtin_ctz(m);
                ps->hit[ps->n++] = (dm_hit){av[b], v0 + i, t0 + tg + b};
            }
        }
    }
    for (size_t q = n0; q < ps->n; q++)
        if (enter_top(ps, ps->hit[q])) touched |= 1ull << (ps->hit[q].j - t0);
    return touched;
}

/* Admit one block of a screening product, c[i · 64 + t] the screened result of vocabulary
 * row w->v0 + r0 + i and the chunk's feature t0 + t, into the admission state of pool part
 * `part` (eng_screen_fn: called where the block was computed, while it is in cache). A
 * score joins feature j's candidates if it reaches the part's threshold t − 2(B + R), t the
 * k-th best screened score the part has seen for j (a lower bound of the final k-th best,
 * so a sound t; −∞ until it has seen k). The scores that enter the part's k best also go to
 * its side list (the rescoring's first pass wants those reaching the scan's k-th best
 * screened score, which is at least the part's: they are among them). Each feature's
 * threshold is brought up to date once a block, where its k best changed. */
static void admit_block(void *ctx, int part, int r0, int nr, int t0, int tn, const void *cv)
{
    dm_worker *w = ctx;
    dm_part *ps = &w->pst[part];
    const int v0 = w->v0 + r0;
    const size_t most = (size_t)nr * (size_t)tn;
    /* (16 more: admit_rows512 stores 16 hits whatever their number) */
    if (hit_room(ps, most + 16) != 0 || grow_hits(&ps->side, &ps->scap, ps->sn + most) != 0) {
        atomic_store(&w->failed, 1);
        return;
    }
    float thr[64] __attribute__((aligned(64)));
    for (int t = 0; t < 64; t++)
        thr[t] = t < tn ? ps->thr[t0 + t] : INFINITY;
    uint64_t touched = w->screen != DM_F32 && w->wide
                           ? admit_rows512(w, ps, v0, nr, t0, tn, cv, thr)
                           : admit_rows256(w, ps, v0, nr, t0, tn, cv, thr);
    for (; touched; touched &= touched - 1) {
        const int j = t0 + __builtin_ctzll(touched);
        if (ps->tn[j] == K) {
            const float th = screen_thr(w, j, ps->top[(size_t)j * K + K - 1]);
            ps->thr[j] = th > ps->thr[j] ? th : ps->thr[j];
        }
    }
}

/* The f32 screen's tile, cbuf[feature][vocabulary row], admitted as the other screens'
 * blocks are: rows taken 64 at a time by whichever pool part is free, transposed. */
static void admit_rows(void *ctx, int part, int parts)
{
    dm_worker *w = ctx;
    (void)parts;
    if (part >= w->parts) return;   /* the pool grew: the others take every row */
    float blk[64 * 64];
    int r0;
    while ((r0 = atomic_fetch_add(&w->next_row, 64)) < w->vt) {
        const int nr = w->vt - r0 < 64 ? w->vt - r0 : 64;
        for (int t0 = 0; t0 < w->nb; t0 += 64) {
            const int tn = w->nb - t0 < 64 ? w->nb - t0 : 64;
            for (int t = 0; t < tn; t++)
                for (int i = 0; i < nr; i++)
                    blk[i * 64 + t] = w->cbuf[(size_t)(t0 + t) * (size_t)w->vt + (size_t)(r0 + i)];
            admit_block(w, part, r0, nr, t0, tn, blk);
        }
    }
}

/* Screen the chunk's features over the whole vocabulary. */
static int screen_chunk(dm_worker *w, const dm_chunk *ch)
{
    const brw_shape *s = w->s;
    const vx_tensor *E = s->embed;
    const int H = s->hidden, V = s->vocab;
    const size_t esz = E->dtype == VX_F32 ? 4 : 2;
    w->nb = ch->nb;
    w->v0 = 0;
    atomic_store(&w->failed, 0);
    if (w->screen != DM_F32) {
        /* one product over the whole vocabulary: its blocks are admitted as they come */
        if (w->screen == DM_BF16 ? eng_screen_bf16(w->eb, V, H, (size_t)H * 2, w->xb, ch->nb,
                                                   w->parts, admit_block, w)
                                 : eng_screen_u8s8(w->eq, V, H, w->eq_packed ? 0 : (size_t)H,
                                                   w->xq, ch->nb, w->parts, admit_block, w))
            return -1;   /* out of memory (its other refusals were checked at pick_screen) */
        return atomic_load(&w->failed) ? -1 : 0;
    }
    /* the f32 screen's products land in cbuf, a vocabulary tile at a time */
    for (int v0 = 0; v0 < V; v0 += VTILE) {
        const int vt = V - v0 < VTILE ? V - v0 : VTILE;
        w->v0 = v0;
        w->vt = vt;
        eng_matmul_rows(E->dtype, (const uint8_t *)E->data + (size_t)v0 * H * esz, vt, H,
                        (size_t)H * esz, w->dcol, ch->nb, w->cbuf);
        atomic_store(&w->next_row, 0);
        eng_parallel(admit_rows, w);
        if (atomic_load(&w->failed)) return -1;
    }
    return 0;
}

/* Merge (id, x) into a best k (ids, val, *n) by (logit desc, id asc). A NaN logit never
 * enters, as the screen never admits one, so the k best are one set whatever the order
 * the ids come in. */
static void topk_push(int32_t *ids, float *val, int *n, int32_t id, float x)
{
    if (x != x || (*n == K && !(x > val[K - 1] || (x == val[K - 1] && id < ids[K - 1]))))
        return;
    int p = *n < K ? (*n)++ : K - 1;
    while (p > 0 && (x > val[p - 1] || (x == val[p - 1] && id < ids[p - 1]))) {
        val[p] = val[p - 1];
        ids[p] = ids[p - 1];
        p--;
    }
    val[p] = x;
    ids[p] = id;
}

/* The exact logit of token id against a column: the pass that defines the record. */
static float exact_logit(const brw_shape *s, int32_t id, const float *col)
{
    const size_t esz = s->embed->dtype == VX_F32 ? 4 : 2;
    return eng_row_dot(s->embed->dtype,
                       (const uint8_t *)s->embed->data + (size_t)id * (size_t)s->hidden * esz,
                       col, s->hidden);
}

/* A record: the top token and its logit, then the best n of K (id, logit) pairs; all zero
 * when n is 0 (no metadata). */
static void put_rec(uint8_t *r, size_t rb, int32_t top, float score, const int32_t *ids,
                    const float *val, int n)
{
    memset(r, 0, rb);
    if (n == 0)
        return;
    put32(r, (uint32_t)top);
    putf(r + 4, score);
    for (int t = 0; t < n; t++) {
        put32(r + 8 + 8 * t, (uint32_t)ids[t]);
        putf(r + 12 + 8 * t, val[t]);
    }
}

/* Can candidate h's exact logit reach x10, by its own row's bound (row_bound with that row's
 * norms, not the largest: the second pass's lo2 used the largest)? */
static int near(const dm_worker *w, dm_hit h)
{
    const float *r = w->rn + (size_t)h.id * 3;
    return (double)h.val + row_bound(w, h.j, r[0], r[1], r[2]) * (1 + ldexp(1.0, -20)) >=
           (double)w->x10[h.j];
}

/* One pass of the rescoring over the candidates part admitted: those of feature j whose
 * screened score reaches first[j] (pass 1, from the side list), or lies in [lo2[j],
 * first[j]) and can reach x10[j] by its row's bound (pass 2), each rescored exactly into
 * the part's best k of j. They are taken feature by feature (a counting sort), so the
 * column stays in cache while its rows are read, the next one fetched ahead. */
static void rescore_part(void *ctx, int part, int parts)
{
    dm_worker *w = ctx;
    (void)parts;
    if (part >= w->parts) return;
    dm_part *ps = &w->pst[part];
    const brw_shape *s = w->s;
    const size_t rowb = (size_t)s->hidden * (s->embed->dtype == VX_F32 ? 4 : 2);
    const char *E = s->embed->data;
    const int second = w->pass == 2;
    const dm_hit *src = second ? ps->hit : ps->side;
    const size_t n = second ? ps->n : ps->sn;
    if (grow_hits(&ps->sel, &ps->selcap, n) != 0 || grow_hits(&ps->sel2, &ps->sel2cap, n) != 0) {
        atomic_store(&w->failed, 1);
        return;
    }
    size_t m = 0;
    memset(ps->cnt, 0, (size_t)(w->nb + 1) * sizeof *ps->cnt);
    for (size_t i = 0; i < n; i++) {
        const dm_hit h = src[i];
        if (second ? h.val >= w->lo2[h.j] && h.val < w->first[h.j] && near(w, h)
                   : h.val >= w->first[h.j]) {
            ps->sel[m++] = h;
            ps->cnt[h.j + 1]++;
        }
    }
    for (int j = 0; j < w->nb; j++) ps->cnt[j + 1] += ps->cnt[j];
    for (size_t i = 0; i < m; i++) ps->sel2[ps->cnt[ps->sel[i].j]++] = ps->sel[i];
    for (size_t i = 0; i < m; i++) {
        const dm_hit h = ps->sel2[i];
        if (i + 1 < m)
            for (size_t b = 0; b < rowb; b += 64)
                __builtin_prefetch(E + (size_t)ps->sel2[i + 1].id * rowb + b);
        topk_push(ps->xid + (size_t)h.j * K, ps->xval + (size_t)h.j * K, &ps->xn[h.j], h.id,
                  exact_logit(s, h.id, w->dcol + (size_t)h.j * (size_t)s->hidden));
    }
}

/* Feature j's exact best k over the parts' (the same set whatever the order: topk_push's
 * order is total). */
static void merge_exact(const dm_worker *w, int j, int32_t *ids, float *val, int *n)
{
    *n = 0;
    for (int p = 0; p < w->parts; p++) {
        const dm_part *ps = &w->pst[p];
        for (int q = 0; q < ps->xn[j]; q++)
            topk_push(ids, val, n, ps->xid[(size_t)j * K + q], ps->xval[(size_t)j * K + q]);
    }
}

/* Rescore the chunk's candidates exactly and write its records. The parts' k best screened
 * scores hold the scan's k best; its k-th, first[j], gives a threshold at least any part's
 * (candidates were admitted under earlier thresholds: the final one holds for the whole
 * scan). Pass 1 rescores the candidates of the k best screened scores, which gives a k-th
 * exact logit x10 (the final one is at least that); a candidate of screened score a has an
 * exact logit of at most a + B + R, so pass 2 rescores only those with a ≥ x10 − (B + R):
 * one margin, not the screen's two. -1 when a part ran out of memory for its passes. */
static int rescore_chunk(dm_worker *w, const dm_chunk *ch)
{
    for (int j = 0; j < ch->nb; j++) {
        float top[K], thr = -INFINITY;
        int tn = 0;
        for (int p = 0; p < w->parts; p++) {
            const dm_part *ps = &w->pst[p];
            for (int q = 0; q < ps->tn[j]; q++) top_insert(top, &tn, ps->top[(size_t)j * K + (size_t)q]);
            thr = ps->thr[j] > thr ? ps->thr[j] : thr;
        }
        if (tn == K) {
            const float th = screen_thr(w, j, top[K - 1]);
            thr = th > thr ? th : thr;
        }
        /* a silent column admitted nothing (tn 0) under a threshold of +∞: neither pass */
        w->first[j] = tn ? top[tn - 1] : INFINITY;
        w->lo2[j] = thr;
    }
    w->pass = 1;
    eng_parallel(rescore_part, w);
    if (atomic_load(&w->failed)) return -1;
    for (int j = 0; j < ch->nb; j++) {
        int32_t ids[K];
        float val[K];
        int n;
        merge_exact(w, j, ids, val, &n);
        w->x10[j] = -INFINITY;
        if (n == K) {
            const float stop = floor_f32((double)val[K - 1] - w->margin[j] / 2);
            w->lo2[j] = stop > w->lo2[j] ? stop : w->lo2[j];
            if (isfinite(w->margin[j])) w->x10[j] = val[K - 1];
        }
    }
    w->pass = 2;
    eng_parallel(rescore_part, w);
    if (atomic_load(&w->failed)) return -1;
    for (int j = 0; j < ch->nb; j++) {
        int32_t ids[K] = {0};
        float val[K] = {0};
        int n;
        merge_exact(w, j, ids, val, &n);   /* none for a silent column: nothing reaches +∞ */
        put_rec(w->rec + (size_t)(ch->part->first + ch->f0 + j) * w->rb, w->rb, ids[0], val[0],
                ids, val, n);
    }
    return 0;
}

static void worker_free(dm_worker *w)
{
    free(w->chunks);
    free(w->rec);
    free(w->dcol);
    free(w->xb);
    free(w->xq);
    free(w->dsc);
    free(w->dcorr);
    free(w->cbuf);
    free(w->margin);
    free(w->first);
    free(w->lo2);
    free(w->x10);
    free(w->fn);
    free(w->rn);
    for (int p = 0; w->pst && p < w->parts; p++) {
        dm_part *ps = &w->pst[p];
        free(ps->thr);
        free(ps->top);
        free(ps->tn);
        free(ps->hit);
        free(ps->side);
        free(ps->sel);
        free(ps->sel2);
        free(ps->cnt);
        free(ps->xid);
        free(ps->xval);
        free(ps->xn);
    }
    free(w->pst);
    free(w->eb_copy);
    free(w->eq);
    free(w->esc);
}

/* What COMPILE keeps of its base's down-meta: the base's records (same layers, counts and
 * top_k) and, per layer, the features to compute again (dirty[l] NULL: none). */
typedef struct dm_carry {
    const brw_dmet *old;
    uint8_t **dirty;
} dm_carry;

static int chunk_dirty(const dm_carry *cy, int l, const dm_chunk *ch)
{
    if (!cy)
        return 1;
    const uint8_t *d = cy->dirty[l];
    for (int j = 0; d && j < ch->nb; j++)
        if (d[ch->part->first + ch->f0 + j])
            return 1;
    return 0;
}

/* The base's record of (l, f) into r, byte for byte (the same top_k). */
static void carry_rec(const brw_dmet *old, int l, int64_t f, uint8_t *r, size_t rb)
{
    brw_meta m;
    if (brw_dmet_get(old, l, f, &m) != 0 || !m.present)
        m.k = 0;
    put_rec(r, rb, m.top_id, m.c_score, m.ids, m.logits, m.k);
}

/* Progress of a pass in features computed (fn NULL: none). */
typedef struct dm_progress {
    vx_progress_fn fn;
    void *ctx;
    uint64_t done, total;
} dm_progress;

/* The scratch for s's chunks (w->rec holds the widest layer's records, w->chunks its
 * chunks) and, when prepare is set, the embedding as the screen reads it. */
static int worker_init(dm_worker *w, const brw_shape *s, int prepare, vx_err *err)
{
    const size_t H = (size_t)s->hidden;
    int64_t maxf = 0;
    size_t max_chunks = 0;
    memset(w, 0, sizeof *w);
    w->s = s;
    w->rb = 8 + 8 * (size_t)K;
    for (int l = 0; l < s->layers; l++) {
        size_t n = 0;
        for (int p = 0; p < s->layer[l].n_parts; p++)
            n += (size_t)((s->layer[l].parts[p].rows + FC - 1) / FC);
        max_chunks = n > max_chunks ? n : max_chunks;
        maxf = s->layer[l].features > maxf ? s->layer[l].features : maxf;
    }
    w->chunks = malloc((max_chunks + 1) * sizeof *w->chunks);
    w->rec = malloc((size_t)maxf * w->rb + 1);
    w->dcol = malloc((size_t)FC * H * sizeof *w->dcol);
    w->xb = malloc((size_t)FC * H * sizeof *w->xb);
    w->xq = malloc((size_t)FC * H);
    w->dsc = malloc((size_t)FC * sizeof *w->dsc);
    w->dcorr = malloc((size_t)FC * sizeof *w->dcorr);
    w->cbuf = malloc((size_t)FC * VTILE * sizeof *w->cbuf);
    w->margin = malloc((size_t)FC * sizeof *w->margin);
    w->first = malloc((size_t)FC * sizeof *w->first);
    w->x10 = malloc((size_t)FC * sizeof *w->x10);
    w->fn = malloc((size_t)FC * 3 * sizeof *w->fn);
    w->lo2 = malloc((size_t)FC * sizeof *w->lo2);
    w->parts = eng_threads();
    w->pst = calloc((size_t)w->parts, sizeof *w->pst);
    int ok = w->pst != NULL;
    for (int p = 0; ok && p < w->parts; p++) {
        dm_part *ps = &w->pst[p];
        ps->thr = malloc((size_t)FC * sizeof *ps->thr);
        ps->top = malloc((size_t)FC * K * sizeof *ps->top);
        ps->tn = malloc((size_t)FC * sizeof *ps->tn);
        ps->xid = malloc((size_t)FC * K * sizeof *ps->xid);
        ps->xval = malloc((size_t)FC * K * sizeof *ps->xval);
        ps->xn = malloc((size_t)FC * sizeof *ps->xn);
        ps->cnt = malloc((FC + 1) * sizeof *ps->cnt);
        ok = ps->thr && ps->top && ps->tn && ps->xid && ps->xval && ps->xn && ps->cnt;
    }
    if (!ok || !w->chunks || !w->rec || !w->dcol || !w->xb || !w->xq || !w->dsc || !w->dcorr ||
        !w->cbuf || !w->margin || !w->first || !w->lo2 || !w->x10 || !w->fn)
        return vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
    return prepare ? prepare_embed(w, err) : 0;
}

/* Layer l's records into w->rec: with cy, the features it marks dirty computed and the
 * others carried from its base; without, every one computed. */
static int layer_pass(dm_worker *w, int l, const dm_carry *cy, dm_progress *pg, vx_err *err)
{
    const brw_layer *L = &w->s->layer[l];
    size_t n_chunks = 0;
    for (int p = 0; p < L->n_parts; p++)
        for (int64_t f0 = 0; f0 < L->parts[p].rows; f0 += FC)
            w->chunks[n_chunks++] = (dm_chunk){&L->parts[p], f0,
                (int)(L->parts[p].rows - f0 < FC ? L->parts[p].rows - f0 : FC)};
    for (size_t i = 0; i < n_chunks && !vx_cancel_flag; i++) {
        if (!chunk_dirty(cy, l, &w->chunks[i]))
            continue;
        w->pch = &w->chunks[i];
        eng_parallel(prepare_part, w);
        for (int p = 0; p < w->parts; p++)
            w->pst[p].n = w->pst[p].sn = 0;
        if (screen_chunk(w, &w->chunks[i]) != 0)
            return vx_errf(err, VX_ENOMEM, "down_meta: out of memory screening layer %d", l);
        if (rescore_chunk(w, &w->chunks[i]) != 0)
            return vx_errf(err, VX_ENOMEM, "down_meta: out of memory rescoring layer %d", l);
        pg->done += (uint64_t)w->chunks[i].nb;
        if (pg->fn)
            pg->fn(pg->ctx, "down-meta", pg->done < pg->total ? pg->done : pg->total, pg->total);
    }
    for (int64_t i = 0; cy && i < L->features; i++)
        if (!cy->dirty[l] || !cy->dirty[l][i])
            carry_rec(cy->old, l, i, w->rec + (size_t)i * w->rb, w->rb);
    if (vx_cancel_flag)
        return vx_errf(err, VX_ECANCEL, "down_meta: cancelled at layer %d", l);
    return 0;
}

/* The records of every layer into path; progress (o may be NULL) in features screened.
 * With cy, a feature not marked dirty keeps the base's record and only the chunks holding
 * a dirty one are computed. */
static int write_meta(const brw_shape *s, const char *path, const vx_encode_opts *o,
                      const dm_carry *cy, vx_err *err)
{
    dm_worker w;
    dm_progress pg = {o ? o->progress : NULL, o ? o->progress_ctx : NULL, 0, 0};
    for (int l = 0; l < s->layers; l++)
        for (int64_t i = 0; i < s->layer[l].features; i++)
            pg.total += !cy || (cy->dirty[l] && cy->dirty[l][i]);
    int rc = -1;
    FILE *f = NULL;
    if (pg.fn)
        pg.fn(pg.ctx, "down-meta", 0, pg.total);
    if (worker_init(&w, s, pg.total > 0, err) != 0)
        goto done;
    f = fopen(path, "wb");
    if (!f) {
        vx_errf(err, VX_EIO, "down_meta: cannot create \"%s\": %s", path, strerror(errno));
        goto done;
    }
    uint8_t hdr[16];
    put32(hdr, BRW_DMET_MAGIC);
    put32(hdr + 4, 1);
    put32(hdr + 8, (uint32_t)s->layers);
    put32(hdr + 12, K);
    if (fwrite(hdr, 1, 16, f) != 16) {
        vx_errf(err, VX_EIO, "down_meta: cannot write \"%s\": %s", path, strerror(errno));
        goto done;
    }
    for (int l = 0; l < s->layers; l++) {
        const int64_t F = s->layer[l].features;
        uint8_t cnt[4];
        put32(cnt, (uint32_t)F);
        if (layer_pass(&w, l, cy, &pg, err) != 0)
            goto done;
        if (fwrite(cnt, 1, 4, f) != 4 || fwrite(w.rec, w.rb, (size_t)F, f) != (size_t)F) {
            vx_errf(err, VX_EIO, "down_meta: cannot write \"%s\": %s", path, strerror(errno));
            goto done;
        }
    }
    /* synced before the container around it is committed: its hash is in the index */
    if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) {
        vx_errf(err, VX_EIO, "down_meta: cannot write \"%s\": %s", path, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (f && fclose(f) != 0 && rc == 0)
        rc = vx_errf(err, VX_EIO, "down_meta: close failed: %s", strerror(errno));
    worker_free(&w);
    return rc;
}

int brw_downmeta_layers(const brw_shape *s, const int *layers, int n, uint8_t **recs,
                        vx_err *err)
{
    dm_worker w;
    dm_progress pg = {0};
    int rc = worker_init(&w, s, 1, err);
    for (int i = 0; i < n && rc == 0; i++)
        if ((rc = layer_pass(&w, layers[i], NULL, &pg, err)) == 0)
            memcpy(recs[i], w.rec, (size_t)s->layer[layers[i]].features * w.rb);
    worker_free(&w);
    return rc;
}

static cJSON *band_json(const int r[2])
{
    if (r[0] < 0)
        return cJSON_CreateNull();
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber(r[0]));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(r[1]));
    return a;
}

/* ---------------------------------------------------------------- the exact pass alone */

#define EX_TILE 64      /* vocabulary rows per step: kept in L2 across the columns */

/* Feature f of layer l as an f32 down column (col[hidden]), from the part holding it. */
static void load_col(const brw_shape *s, int l, int64_t f, float *col)
{
    const brw_part *pt = s->layer[l].parts;
    while (f >= pt->first + pt->rows)
        pt++;
    const vx_tensor *dn = pt->down;
    const size_t j = (size_t)(f - pt->first);
    unsigned be = 1, bb = 0;
    if (vx_quant_block(dn->dtype, &be, &bb) == 0) {
        /* brw_downmeta_check admits blocks of at most FC values */
        const size_t rb = (size_t)pt->rows / be * bb;
        float buf[FC];
        for (int h = 0; h < s->hidden; h++) {
            vx_dequantize_row(dn->dtype, (const uint8_t *)dn->data + (size_t)h * rb + j / be * bb,
                              buf, be);
            col[h] = buf[j % be];
        }
        return;
    }
    const size_t esz = dn->dtype == VX_F32 ? 4 : 2;
    for (int h = 0; h < s->hidden; h++)
        vx_row_to_f32(dn->dtype, (const uint8_t *)dn->data + ((size_t)h * (size_t)pt->rows + j) * esz,
                      &col[h], 1);
}

/* The exact pass over the whole vocabulary for n columns: part i takes a slice of the
 * vocabulary and keeps its own best k of each column, merged after (the order of the
 * k best is total, so the merge gives what one pass in id order would). */
typedef struct dm_exact {
    const brw_shape *s;
    size_t n;
    float *cols;             /* [n, hidden] */
    float **xp;              /* [n] eng_x_pairs of each column, or NULL */
    int32_t *ids;            /* [parts, n, K] */
    float *val;              /* [parts, n, K] */
    int *cnt;                /* [parts, n] */
    float *y;                /* [parts, EX_TILE] */
} dm_exact;

static void exact_part(void *ctx, int part, int parts)
{
    dm_exact *x = ctx;
    const brw_shape *s = x->s;
    const int H = s->hidden;
    const int64_t lo = (int64_t)s->vocab * part / parts, hi = (int64_t)s->vocab * (part + 1) / parts;
    const size_t rowb = (size_t)H * (s->embed->dtype == VX_F32 ? 4 : 2);
    float *y = x->y + (size_t)part * EX_TILE;
    for (int64_t v0 = lo; v0 < hi && !vx_cancel_flag; v0 += EX_TILE) {
        const int nt = (int)(hi - v0 < EX_TILE ? hi - v0 : EX_TILE);
        for (size_t j = 0; j < x->n; j++) {
            const size_t o = (size_t)part * x->n + j;
            eng_rows_dot(s->embed->dtype, (const uint8_t *)s->embed->data + (size_t)v0 * rowb,
                         rowb, nt, x->cols + j * (size_t)H, x->xp[j], H, y);
            for (int v = 0; v < nt; v++)
                topk_push(x->ids + o * K, x->val + o * K, &x->cnt[o], (int32_t)(v0 + v), y[v]);
        }
    }
}

int brw_downmeta_exact(const brw_shape *s, const int *layer, const int64_t *feature, size_t n,
                       uint8_t *recs, vx_err *err)
{
    const size_t H = (size_t)s->hidden, rb = 8 + 8 * (size_t)K, parts = (size_t)eng_threads();
    dm_exact x = {.s = s, .n = n};
    x.cols = malloc(n * H * sizeof *x.cols + 1);
    x.xp = calloc(n + 1, sizeof *x.xp);
    x.ids = malloc(parts * n * K * sizeof *x.ids + 1);
    x.val = malloc(parts * n * K * sizeof *x.val + 1);
    x.cnt = calloc(parts * n + 1, sizeof *x.cnt);
    x.y = malloc(parts * EX_TILE * sizeof *x.y);
    int rc = 0;
    if (!x.cols || !x.xp || !x.ids || !x.val || !x.cnt || !x.y) {
        rc = vx_errf(err, VX_ENOMEM, "down_meta: out of memory for %zu columns", n);
        goto done;
    }
    for (size_t j = 0; j < n; j++) {
        load_col(s, layer[j], feature[j], x.cols + j * H);
        x.xp[j] = eng_x_pairs(x.cols + j * H, (int)H);
    }
    eng_parallel(exact_part, &x);
    if (vx_cancel_flag) {   /* Ctrl-C between tiles of 64 vocabulary rows: nothing written */
        rc = vx_errf(err, VX_ECANCEL, "down_meta: cancelled");
        goto done;
    }
    for (size_t j = 0; j < n; j++) {
        int32_t ids[K] = {0};
        float val[K] = {0};
        int c = 0;
        for (size_t p = 0; p < parts; p++) {
            const size_t o = p * n + j;
            for (int t = 0; t < x.cnt[o]; t++)
                topk_push(ids, val, &c, x.ids[o * K + (size_t)t], x.val[o * K + (size_t)t]);
        }
        if (silent_col(x.cols + j * H, s->hidden))
            c = 0;
        put_rec(recs + j * rb, rb, ids[0], val[0], ids, val, c);
    }
done:
    for (size_t j = 0; x.xp && j < n; j++)
        free(x.xp[j]);
    free(x.xp);
    free(x.cols);
    free(x.ids);
    free(x.val);
    free(x.cnt);
    free(x.y);
    return rc;
}

/* Every down operand of c's shape is one down-meta can be computed from: down-meta
 * describes the canonical weights, so the columns are read as f32/f16/bf16, or as a block
 * codec only when it is the checkpoint's own packing (GPT-OSS experts): the stack's
 * representation has source authority, or it is the encoder's (no derived_from), which
 * never quantises, so its block operands are copies even when --dtype narrowed its float
 * ones; a quantised derivation is not the model. */
int brw_rep_canonical(const vx_container *c, const char *object)
{
    const char *rid = vx_bound_representation(c, object);
    const cJSON *rep = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "representations"), rid ? rid : "");
    const cJSON *fid = cJSON_GetObjectItemCaseSensitive(rep, "fidelity");
    return (cJSON_IsString(fid) && strncmp(fid->valuestring, "source-", 7) == 0) ||
           (cJSON_IsObject(rep) && !cJSON_HasObjectItem(rep, "derived_from"));
}

int brw_downmeta_check(const vx_container *c, const brw_shape *s, vx_err *err)
{
    const int canonical = brw_rep_canonical(c, "target.decoder_stack");
    unsigned be, bb;
    for (int l = 0; l < s->layers; l++)
        for (int p = 0; p < s->layer[l].n_parts; p++) {
            const vx_tensor *dn = s->layer[l].parts[p].down;
            if (dn->dtype != VX_F32 && dn->dtype != VX_F16 && dn->dtype != VX_BF16 &&
                !(canonical && vx_quant_block(dn->dtype, &be, &bb) == 0 && FC % be == 0))
                return vx_errf(err, VX_EUNSUPPORTED, "down_meta: operand \"%s\" is stored as "
                               "%s; down-meta is computed from f32, f16 or bf16 weights",
                               dn->name, vx_dtype_name(dn->dtype));
        }
    return 0;
}

/* The container in dir opened with its shape, once brw_downmeta_check admits it (when
 * check is set). */
static int open_shape(const char *dir, int check, vx_container **cp, brw_shape *sp, vx_err *err)
{
    vx_container *c = NULL;
    if (vx_open(dir, &c, err) != 0)
        return -1;
    brw_shape s;
    if (brw_shape_read(c, &s, err) != 0) {
        vx_close(c);
        return -1;
    }
    if (check && brw_downmeta_check(c, &s, err) != 0) {
        brw_shape_free(&s);
        vx_close(c);
        return -1;
    }
    *cp = c;
    *sp = s;
    return 0;
}

/* The encode hooks: meta 0 records the bands alone. */
static int encode_finish(const vx_encode_opts *o, int meta, const char *tmpdir, cJSON *index,
                         vx_err *err)
{
    vx_container *c = NULL;
    brw_shape s;
    /* A tokenizer the engine cannot load gives a container that opens and then refuses
     * every prompt: refuse it here, while the checkpoint is at hand. None at all is legal. */
    eng_tokenizer *tok = NULL;
    vx_err te = {0};
    if (eng_tok_load_dir(tmpdir, &tok, &te) != 0 && te.code != VX_EMISSING) {
        const char *m = strstr(te.msg, "tokenizer.json");
        return vx_errf(err, te.code, "the checkpoint's %s", m ? m : te.msg);
    }
    eng_tok_free(tok);
    if (open_shape(tmpdir, meta, &c, &s, err) != 0)
        return -1;
    int rc = -1;
    char dir[4096], path[4200], hex[65];
    snprintf(dir, sizeof dir, "%s/browse", tmpdir);
    snprintf(path, sizeof path, "%s/down_meta.bin", dir);
    if (meta && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        vx_errf(err, VX_EIO, "down_meta: cannot create \"%s\": %s", dir, strerror(errno));
        goto done;
    }
    if (meta && (write_meta(&s, path, o, NULL, err) != 0 || vx_sha256_file(path, hex, err) != 0))
        goto done;
    /* the band override: from the options when given as ctx, else as the encoder
     * recorded it (index.encoder.layer_band) */
    int lo = o ? o->layer_lo : -1, hi = o ? o->layer_hi : -1;
    const cJSON *lb0 = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(index, "encoder"), "layer_band");
    if (lo < 0 && cJSON_IsArray(lb0) && cJSON_GetArraySize(lb0) == 2 &&
        cJSON_IsNumber(cJSON_GetArrayItem(lb0, 0)) && cJSON_IsNumber(cJSON_GetArrayItem(lb0, 1))) {
        lo = (int)cJSON_GetArrayItem(lb0, 0)->valuedouble;
        hi = (int)cJSON_GetArrayItem(lb0, 1)->valuedouble;
    }
    int band[3][2];
    brw_bands_for_depth(s.layers, lo, hi, band);
    cJSON *br = cJSON_CreateObject();
    if (meta) {
        cJSON_AddStringToObject(br, "down_meta", "browse/down_meta.bin");
        cJSON_AddStringToObject(br, "down_meta_sha256", hex);
        cJSON_AddNumberToObject(br, "down_top_k", BRW_DOWN_TOP_K);
    }
    cJSON *lb = cJSON_AddObjectToObject(br, "layer_bands");
    for (int b = 0; b < 3; b++)
        cJSON_AddItemToObject(lb, brw_band_name(b), band_json(band[b]));
    if (lo >= 0 && hi >= lo)
        cJSON_AddStringToObject(br, "band_rule", "knowledge band given at encode "
                                "(layer_lo-layer_hi); syntax before it, output after it");
    else
        cJSON_AddStringToObject(br, "band_rule", brw_band_rule);
    if (cJSON_HasObjectItem(index, "browse"))
        cJSON_ReplaceItemInObjectCaseSensitive(index, "browse", br);
    else
        cJSON_AddItemToObject(index, "browse", br);
    rc = 0;
done:
    brw_shape_free(&s);
    vx_close(c);
    return rc;
}

int brw_encode_finish(void *ctx, const char *tmpdir, cJSON *index, vx_err *err)
{
    return encode_finish(ctx, 1, tmpdir, index, err);
}

int brw_encode_finish_bands(void *ctx, const char *tmpdir, cJSON *index, vx_err *err)
{
    return encode_finish(ctx, 0, tmpdir, index, err);
}

int brw_dmet_from_records(const brw_shape *s, uint8_t *const *recs, brw_dmet **out,
                          vx_err *err)
{
    const size_t rb = 8 + 8 * (size_t)K;
    size_t n = 16;
    for (int l = 0; l < s->layers; l++)
        n += 4 + (size_t)s->layer[l].features * rb;
    uint8_t *img = calloc(n, 1), *p = img + 16;
    if (!img)
        return vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
    put32(img, BRW_DMET_MAGIC);
    put32(img + 4, 1);
    put32(img + 8, (uint32_t)s->layers);
    put32(img + 12, K);
    for (int l = 0; l < s->layers; l++) {
        const size_t bytes = (size_t)s->layer[l].features * rb;
        put32(p, (uint32_t)s->layer[l].features);
        if (recs[l])
            memcpy(p + 4, recs[l], bytes);
        p += 4 + bytes;
    }
    int rc = brw_dmet_parse(img, n, out, err);
    free(img);
    return rc;
}

int brw_downmeta_compile(const char *dir, const char *path, const brw_dmet *old,
                         const uint8_t *complete, const eng_overlay *ov,
                         vx_progress_fn progress, void *progress_ctx, vx_err *err)
{
    vx_container *c = NULL;
    brw_shape s;
    if (open_shape(dir, 1, &c, &s, err) != 0)
        return -1;
    vx_encode_opts o;   /* only its progress */
    vx_encode_opts_init(&o);
    o.progress = progress;
    o.progress_ctx = progress_ctx;
    int carry = old && brw_dmet_top_k(old) == K && brw_dmet_layers(old) == s.layers;
    for (int l = 0; carry && l < s.layers; l++)
        carry = brw_dmet_count(old, l) == s.layer[l].features;
    uint8_t **dirty = calloc((size_t)s.layers + 1, sizeof *dirty);
    int rc = -1;
    if (!dirty) {
        vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
        goto done;
    }
    /* a layer the base does not hold whole is computed whole */
    for (int l = 0; carry && complete && l < s.layers; l++) {
        if (complete[l] || !s.layer[l].features)
            continue;
        if (!(dirty[l] = malloc((size_t)s.layer[l].features))) {
            vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
            goto done;
        }
        memset(dirty[l], 1, (size_t)s.layer[l].features);
    }
    /* down-meta reads only the down columns: a replaced one, or every column a low-rank
     * update of the layer (or of one expert) moves, is computed again */
    for (size_t i = 0; carry && i < ov->n_edits + ov->n_lowrank; i++) {
        const eng_feature_edit *fe = i < ov->n_edits ? &ov->edits[i] : NULL;
        const eng_lowrank *lr = fe ? NULL : &ov->lowrank[i - ov->n_edits];
        const int l = fe ? fe->layer : lr->layer;
        if ((fe && !fe->down) || l < 0 || l >= s.layers || !s.layer[l].features)
            continue;
        const brw_layer *L = &s.layer[l];
        if (!dirty[l] && !(dirty[l] = calloc((size_t)L->features, 1))) {
            vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
            goto done;
        }
        int64_t f0 = 0, n = L->features;
        if (fe) {
            f0 = fe->feature;
            n = f0 >= 0 && f0 < L->features ? 1 : 0;
        } else if (lr->expert >= 0 && L->n_parts > 1) {
            f0 = lr->expert < L->n_parts ? L->parts[lr->expert].first : 0;
            n = lr->expert < L->n_parts ? L->parts[lr->expert].rows : 0;
        }
        memset(dirty[l] + f0, 1, (size_t)n);
    }
    dm_carry cy = {old, dirty};
    rc = write_meta(&s, path, &o, carry ? &cy : NULL, err);
done:
    for (int l = 0; dirty && l < s.layers; l++)
        free(dirty[l]);
    free(dirty);
    brw_shape_free(&s);
    vx_close(c);
    return rc;
}
