/*
 * screen_rate.h — down-meta's int8 screening product alone: eng_screen_u8s8 as down-meta
 * runs it (rows packed for AMX-INT8 tiles where the CPU has them, each block of results
 * handed to a consumer, here one that keeps nothing), on random bytes. Its time is the
 * floor under down-meta's: the admission, the rescoring and the columns' preparation come
 * on top. peak prints its rate on a 4080-row tile; encode times the checkpoint's whole
 * vocabulary to put a floor under the encode with down-meta. Header-only (static inline)
 * because CMake builds every bench source as its own executable.
 */
#ifndef LQL_BENCH_SCREEN_RATE_H
#define LQL_BENCH_SCREEN_RATE_H

#include <stdint.h>
#include <stdlib.h>
#include "engine.h"
#include "bandwidth.h"

static void sr_take(void *ctx, int part, int r0, int nr, int t0, int tn, const void *c)
{
    (void)ctx, (void)part, (void)r0, (void)nr, (void)t0, (void)tn, (void)c;
}

/* Best seconds of `reps` screening products of `rows` rows × hidden bytes against n
 * features; -1 when this CPU has no int8 screen for the width, or memory ran out. */
static inline double screen_best(int rows, int hidden, int n, int reps)
{
    if (rows < 1 || n < 1 || hidden % 4 || hidden > 65536) return -1;
    const int amx = eng_u8s8_amx(hidden), lim = eng_u8s8_x_limit();
    uint8_t *w = amx ? calloc(1, eng_u8s8_pack_bytes(rows, hidden)) : malloc((size_t)rows * hidden);
    uint8_t *row = malloc((size_t)hidden);
    int8_t *x = malloc((size_t)n * hidden);
    double best = -1;
    if (w && row && x) {
        uint32_t s = 12345;
        for (int r = 0; r < rows; r++) {
            uint8_t *dst = amx ? row : w + (size_t)r * hidden;
            for (int c = 0; c < hidden; c++) {
                s = s * 1664525u + 1013904223u;
                dst[c] = (uint8_t)(s >> 24);
            }
            if (amx) eng_u8s8_pack_row(w, hidden, r, row);
        }
        for (size_t i = 0; i < (size_t)n * hidden; i++) {
            s = s * 1664525u + 1013904223u;
            x[i] = (int8_t)((int)(s >> 24) % (2 * lim + 1) - lim);
        }
        for (int k = 0; k < reps; k++) {
            const double t0 = bw_now();
            if (eng_screen_u8s8(w, rows, hidden, amx ? 0 : (size_t)hidden, x, n, eng_threads(),
                                sr_take, NULL) != 0) {
                best = -1;
                break;
            }
            const double t = bw_now() - t0;
            best = best < 0 || t < best ? t : best;
        }
    }
    free(w);
    free(row);
    free(x);
    return best;
}

#endif
