/*
 * generate.c — eng_generate: prefill the prompt as one batch, then decode one token at a
 * time, sampling with eng_sample (a caller's pick may replace the token) and stopping after
 * an eos id (which is kept) or when the caller's token hook says so.
 */
#include <stdlib.h>
#include "engine_int.h"

/* splitmix64 of the seed, so nearby seeds start far-apart streams. */
uint64_t eng_sampler_stream(uint64_t seed)
{
    uint64_t z = eng_splitmix64(seed);
    return z ? z : 1;
}

int eng_model_is_eos(const eng_model *m, int32_t id)
{
    for (int e = 0; e < m->n_eos; e++)
        if (id == m->eos[e]) return 1;
    return 0;
}

int eng_generate(eng_session *s, const int32_t *prompt, int n_prompt, int max_new,
                 const eng_sampler *sp, int32_t *out, int *n_out, vx_err *err)
{
    return eng_generate_each(s, prompt, n_prompt, max_new, sp, NULL, NULL, out, n_out, err);
}

int eng_generate_each(eng_session *s, const int32_t *prompt, int n_prompt, int max_new,
                      const eng_sampler *sp, int (*on_token)(void *ctx, int32_t id), void *ctx,
                      int32_t *out, int *n_out, vx_err *err)
{
    const eng_gen_hooks h = {on_token, ctx, NULL, NULL, NULL};
    return eng_generate_with(s, prompt, n_prompt, max_new, sp, &h, out, n_out, err);
}

int eng_generate_with(eng_session *s, const int32_t *prompt, int n_prompt, int max_new,
                      const eng_sampler *sp, const eng_gen_hooks *h, int32_t *out, int *n_out,
                      vx_err *err)
{
    const eng_model *m = s->m;
    *n_out = 0;
    if (max_new <= 0) return 0;
    float *logits = malloc((size_t)m->vocab * sizeof *logits);
    if (!logits) return vx_errf(err, VX_ENOMEM, "out of memory for logits");
    uint64_t rng = eng_sampler_stream(sp ? sp->seed : 0);
    int rc = n_prompt > 0 ? eng_forward(s, prompt, n_prompt, logits, h->obs, err) : 0;
    if (!rc && n_prompt <= 0) rc = vx_errf(err, VX_EARG, "generate: empty prompt");
    for (int i = 0; !rc && i < max_new; i++) {
        int32_t id = eng_sample(sp, logits, m->vocab, &rng);
        if (h->pick && h->pick(h->pick_ctx, &id, err)) {
            rc = -1;
            break;
        }
        out[(*n_out)++] = id;
        int stop = eng_model_is_eos(m, id);
        if (h->on_token && h->on_token(h->token_ctx, id)) stop = 1;
        if (stop || i + 1 == max_new) break;
        rc = eng_forward(s, &id, 1, logits, h->obs, err);
    }
    free(logits);
    return rc;
}

int eng_generate_batch(eng_session *const *ss, int B, const int32_t *prompts,
                       const int *n_prompt, int max_new, const eng_sampler *sp,
                       const eng_observer *obs, int feed_last, int32_t *out, int *n_out,
                       vx_err *err)
{
    const int V = ss[0]->m->vocab;
    for (int b = 0; b < B; b++) n_out[b] = 0;
    if (max_new <= 0 || B <= 0) return 0;
    float *logits = malloc((size_t)B * V * sizeof *logits);
    uint64_t *rng = malloc((size_t)B * sizeof *rng);
    int *live = malloc((size_t)B * sizeof *live), *ones = malloc((size_t)B * sizeof *ones);
    int *last = calloc((size_t)B, sizeof *last);
    eng_session **run = malloc((size_t)B * sizeof *run);
    int32_t *next = malloc((size_t)B * sizeof *next);
    int rc = 0;
    if (!logits || !rng || !live || !ones || !last || !run || !next) {
        rc = vx_errf(err, VX_ENOMEM, "out of memory generating %d texts", B);
        goto done;
    }
    int n_live = B;
    for (int b = 0; b < B; b++) {
        rng[b] = eng_sampler_stream(sp[b].seed);
        live[b] = b;
        ones[b] = 1;
    }
    rc = eng_forward_batch(ss, B, prompts, n_prompt, logits, obs, err);
    /* row j of logits belongs to text live[j]; a text leaves after an eos or max_new, or
     * with feed_last once that token has been through the model too (last[j]) */
    while (!rc && n_live > 0) {
        int kept = 0;
        for (int j = 0; j < n_live; j++) {
            const int b = live[j];
            if (last[j]) continue;
            int32_t id = eng_sample(&sp[b], logits + (size_t)j * V, V, &rng[b]);
            out[(size_t)b * max_new + n_out[b]++] = id;
            const int stop = n_out[b] == max_new || eng_model_is_eos(ss[b]->m, id);
            if (stop && !feed_last) continue;
            live[kept] = b;
            run[kept] = ss[b];
            next[kept] = id;
            last[kept++] = stop;
        }
        n_live = kept;
        if (n_live) rc = eng_forward_batch(run, n_live, next, ones, logits, obs, err);
    }
done:
    free(logits);
    free(rng);
    free(live);
    free(ones);
    free(last);
    free(run);
    free(next);
    return rc;
}
