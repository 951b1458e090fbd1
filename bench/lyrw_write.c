/*
 * lyrw_write.c — streams one routed LYRW v2 layer at mini-K3 geometry (896 experts,
 * latent 256 → expert intermediate 256 → latent 256; gate, up and down each 256 × 256) to
 * disk, quantising each expert as it goes, and reports peak RSS against one expert's bytes:
 * the streaming writer's promise is that memory stays at one expert plus the tables
 * whatever the bank size. Then it reopens the file and checks a few experts byte for byte.
 *
 *   lyrw_write [--out /tmp/lql-lyrw-bench.lyrw] [--experts 896] [--format q6_k|q4_k|q8_0]
 *
 * Wall-clock numbers are printed, never asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "lyrw.h"

#define LATENT 256
#define INTER 256

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long rss_kb(void)      /* current resident set, from /proc */
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static long peak_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Deterministic weights of (expert, matrix): a cheap hash, roughly N(0, 0.02)-scaled. */
static void weights(uint32_t e, int m, float *w, size_t n)
{
    uint64_t s = 0x9e3779b97f4a7c15ull ^ ((uint64_t)e << 8 | (uint64_t)m);
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (float)((int32_t)(s >> 32)) * (0.02f / 2147483648.f);
    }
}

static int quantise(vx_dtype dt, const float *w, unsigned char *out, size_t rowbytes)
{
    for (int r = 0; r < LATENT; r++)
        if (vx_quantize_row(dt, w + (size_t)r * INTER, out + (size_t)r * rowbytes, INTER) != 0)
            return -1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *out = "/tmp/lql-lyrw-bench.lyrw", *fmt = "q6_k";
    uint32_t experts = 896;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--out"))
            out = argv[i + 1];
        else if (!strcmp(argv[i], "--experts"))
            experts = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--format"))
            fmt = argv[i + 1];
    }
    vx_dtype dt;
    unsigned tag = !strcmp(fmt, "q4_k") ? VX_LF_Q4_K : !strcmp(fmt, "q8_0") ? VX_LF_Q8_0 : VX_LF_Q6_K;
    vx_lyrw_format_dtype(tag, &dt);
    uint64_t region;
    vx_dtype_nbytes(dt, INTER, LATENT, &region);
    size_t rowbytes = (size_t)(region / LATENT);
    vx_lyrw_schema sch[3] = {
        {0, VX_ROLE_GATE, (uint16_t)tag, VX_PACK_BLOCKS_INLINE, VX_LYRW_UNPAIRED, 0, INTER, LATENT, 0},
        {0, VX_ROLE_UP, (uint16_t)tag, VX_PACK_BLOCKS_INLINE, VX_LYRW_UNPAIRED, 0, INTER, LATENT, 0},
        {0, VX_ROLE_DOWN, (uint16_t)tag, VX_PACK_BLOCKS_INLINE, VX_LYRW_UNPAIRED, 0, LATENT, INTER, 0},
    };
    vx_lyrw_bank_spec bank = {.id = 0, .kind = VX_BANK_ROUTED, .flags = 1, .schema_count = 3,
        .num_entries = experts, .input_dim = LATENT, .intermediate_dim = INTER,
        .output_dim = LATENT, .schemas = sch, .entry_count = experts};
    unlink(out);
    long rss0 = rss_kb();
    double t0 = now();
    vx_err err;
    vx_lyrw_writer *w;
    if (vx_lyrw_writer_open(out, 12, 0, &bank, 1, &w, &err) != 0) {
        fprintf(stderr, "lyrw_write: %s\n", err.msg);
        return 1;
    }
    float *f = malloc(sizeof(float) * LATENT * INTER);
    unsigned char *expert = malloc((size_t)region * 3);   /* one expert, all three regions */
    for (uint32_t e = 0; e < experts; e++) {
        for (int m = 0; m < 3; m++) {
            weights(e, m, f, (size_t)LATENT * INTER);
            quantise(dt, f, expert + (size_t)m * region, rowbytes);
        }
        for (int m = 0; m < 3; m++)
            if (vx_lyrw_write_region(w, expert + (size_t)m * region, region, &err) != 0) {
                fprintf(stderr, "lyrw_write: %s\n", err.msg);
                vx_lyrw_writer_abort(w);
                return 1;
            }
    }
    if (vx_lyrw_writer_close(w, NULL, NULL, &err) != 0) {
        fprintf(stderr, "lyrw_write: %s\n", err.msg);
        return 1;
    }
    double t1 = now();
    long peak = peak_kb();

    /* Read back: open (validates every table entry), compare three experts. */
    vx_lyrw *l;
    double t2 = now();
    if (vx_lyrw_open(out, &l, &err) != 0) {
        fprintf(stderr, "lyrw_write: %s\n", err.msg);
        return 1;
    }
    double t3 = now();
    int same = 1;
    uint32_t probe[3] = {0, experts / 2, experts - 1};
    for (int k = 0; k < 3; k++)
        for (int m = 0; m < 3; m++) {
            weights(probe[k], m, f, (size_t)LATENT * INTER);
            quantise(dt, f, expert, rowbytes);
            const vx_lyrw_region *r = vx_lyrw_region_of(l, 0, probe[k], (uint16_t)m);
            same &= r && r->length == region && memcmp(vx_lyrw_bytes(l, r), expert, region) == 0;
        }
    uint64_t size = l->size, tables = l->tables_end;
    vx_lyrw_free(l);
    free(f);
    free(expert);

    double expert_kb = (double)region * 3 / 1024;
    printf("lyrw_write: %u experts, %s, %llu bytes per expert, file %.1f MB (tables %llu bytes)\n",
           experts, fmt, (unsigned long long)region * 3, (double)size / 1e6,
           (unsigned long long)tables);
    printf("  write: %.2f s (%.1f MB/s incl. quantisation); open+validate: %.2f ms; readback %s\n",
           t1 - t0, (double)size / 1e6 / (t1 - t0), (t3 - t2) * 1e3, same ? "identical" : "DIFFERENT");
    printf("  RSS before writing %ld KB, peak %ld KB: growth %ld KB = %.2f x one expert "
           "(%.0f KB), %.4f%% of the file\n", rss0, peak, peak - rss0,
           (double)(peak - rss0) / expert_kb, expert_kb,
           100.0 * (double)(peak - rss0) * 1024 / (double)size);
    return same ? 0 : 1;
}
