/*
 * sample.c — softmax and token sampling: greedy (temperature 0; ties go to the lower id),
 * or temperature → top-k (with every token tied with the k-th) → softmax → top-p (the
 * smallest set of most likely tokens whose mass reaches p) → a draw from a
 * splitmix64-seeded xorshift64* stream. Without top-k and
 * top-p nothing is ranked: the draw walks the tokens in id order. The same seed and logits
 * always give the same token.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include "engine_int.h"

float eng_sampler_param(double x)
{
    float f = (float)x;
    return x > 0 && f < FLT_MIN ? FLT_MIN : f;
}

void eng_softmax(float *x, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (x[i] > mx) mx = x[i];
    double sum = 0;
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - mx); sum += x[i]; }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

uint64_t eng_splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* xorshift64*; a zero state (never valid for xorshift) is first mixed by splitmix64. */
static uint64_t next(uint64_t *s)
{
    if (*s == 0) *s = eng_splitmix64(0) | 1;
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

typedef struct cand { float p; int id; } cand;

static int by_prob(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id;
}

int32_t eng_sample(const eng_sampler *sp, float *logits, int n, uint64_t *rng_state)
{
    if (!sp || sp->temperature <= 0) return argmax(logits, n);
    if ((sp->top_k <= 0 || sp->top_k >= n) && !(sp->top_p > 0 && sp->top_p < 1)) {
        /* plain temperature: no ranking needed, draw in id order */
        float mx = logits[argmax(logits, n)];
        double total = 0;
        for (int i = 0; i < n; i++) {
            logits[i] = expf((logits[i] - mx) / sp->temperature);
            total += logits[i];
        }
        double u = (double)(next(rng_state) >> 11) * (1.0 / 9007199254740992.0) * total, acc = 0;
        int last = 0;
        for (int i = 0; i < n; i++) {
            if (logits[i] <= 0) continue;
            last = i;
            acc += logits[i];
            if (u < acc) return i;
        }
        return last;
    }
    cand *c = malloc((size_t)n * sizeof *c);
    if (!c) return argmax(logits, n);   /* no memory for the candidate list: greedy */
    /* the maximum is taken out before dividing: logit / T overflows to inf for a tiny T,
     * and inf - inf would make every probability NaN */
    float mx = logits[argmax(logits, n)];
    for (int i = 0; i < n; i++) { c[i].p = (logits[i] - mx) / sp->temperature; c[i].id = i; }
    qsort(c, (size_t)n, sizeof *c, by_prob);
    int k = sp->top_k > 0 && sp->top_k < n ? sp->top_k : n;
    while (k < n && c[k].p == c[k - 1].p)
        k++;   /* as Hugging Face's top-k: every token tied with the k-th stays */
    double sum = 0;
    for (int i = 0; i < k; i++) { c[i].p = expf(c[i].p); sum += c[i].p; }
    double mass = 0;
    int keep = k;
    for (int i = 0; i < k; i++) {
        c[i].p = (float)(c[i].p / sum);
        mass += c[i].p;
        if (sp->top_p > 0 && sp->top_p < 1 && mass >= sp->top_p) { keep = i + 1; break; }
    }
    double total = 0;
    for (int i = 0; i < keep; i++) total += c[i].p;
    double u = (double)(next(rng_state) >> 11) * (1.0 / 9007199254740992.0) * total, acc = 0;
    int32_t pick = c[keep - 1].id;
    for (int i = 0; i < keep; i++) {
        acc += c[i].p;
        if (u < acc) { pick = c[i].id; break; }
    }
    free(c);
    return pick;
}
