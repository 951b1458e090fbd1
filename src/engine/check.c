/*
 * check.c — first-touch integrity over the pool (docs/lql/CONTAINER.md, "Integrity on first
 * touch"): vx_tensor_check for many tensors, claimed in order by the engine's threads.
 * SHA-256 runs at about 1.9 GB/s on one core, so a 1.1B model's first INFER used to hash for
 * 1.2 s on one thread while the other waited.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include "engine_int.h"

#define MAX_PARTS 64   /* eng_threads() is at most 64 */

typedef struct chk {
    const vx_container *c;
    const vx_tensor *const *t;   /* NULL: every tensor of c */
    size_t n;
    atomic_size_t next;          /* the next index to claim */
    atomic_size_t stop;          /* the lowest failing index so far, n while none */
    struct { size_t at; vx_err err; } fail[MAX_PARTS];
} chk;

static void check_part(void *ctx, int part, int parts)
{
    chk *k = ctx;
    (void)parts;
    size_t i;
    while ((i = atomic_fetch_add(&k->next, 1)) < k->n && i < atomic_load(&k->stop)) {
        const vx_tensor *t = k->t ? k->t[i] : vx_tensor_at(k->c, i);
        if (vx_tensor_check(k->c, t, &k->fail[part].err) == 0) continue;
        k->fail[part].at = i;
        /* claims only grow, so every index below the lowest failure is still checked and
         * the error reported is the one a check in turn would give */
        size_t cur = atomic_load(&k->stop);
        while (i < cur && !atomic_compare_exchange_weak(&k->stop, &cur, i)) {}
        return;
    }
}

int eng_tensors_check(const vx_container *c, const vx_tensor *const *t, size_t n, vx_err *err)
{
    chk *k = malloc(sizeof *k);
    if (!k) return vx_errf(err, VX_ENOMEM, "integrity check: out of memory");
    k->c = c;
    k->t = t;
    k->n = t ? n : vx_tensor_count(c);
    atomic_init(&k->next, 0);
    atomic_init(&k->stop, k->n);
    for (int p = 0; p < MAX_PARTS; p++) {
        k->fail[p].at = k->n;
        k->fail[p].err = (vx_err){0};
    }
    eng_parallel(check_part, k);
    int worst = -1;
    for (int p = 0; p < MAX_PARTS; p++)
        if (k->fail[p].at < k->n && (worst < 0 || k->fail[p].at < k->fail[worst].at)) worst = p;
    if (worst >= 0) *err = k->fail[worst].err;
    free(k);
    return worst >= 0 ? -1 : 0;
}
