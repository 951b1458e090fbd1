/*
 * decode.c — prompt and decode speed of the engine side by side with llama.cpp, in the same
 * minutes, on the ~1.1B TinyLlama-geometry model (bench/ckpt.h), per weight format.
 *
 *   decode --peer LLAMA_BENCH --peer-models DIR [--dtype bf16,f16,q8_0,q4_k] [--rounds 3]
 *          [--threads 2] [--prompt 64] [--gen 32] [--dir /tmp/lql-bench] [--layers 22]
 *   decode --no-peer ...      lql alone (no ratios)
 *
 * The peer is llama.cpp's llama-bench binary (--peer, or $LQL_PEER_BENCH) and a directory
 * holding bench-1b-{bf16,f16,q8_0,q4_k}.gguf of the same geometry (--peer-models, or
 * $LQL_PEER_MODELS); nothing of llama.cpp is in this repository. Without a peer the bench
 * refuses (a remembered figure is never a valid denominator: the machine's bandwidth moves
 * 2x between minutes), unless --no-peer asks for lql's figures alone.
 *
 * The containers and GGUFs are dropped from the page cache first, so each program caches
 * its weights through its own reader (a copy cached by `cp` or `cat` sits in 4 KiB folios
 * and decodes 15-20 % slower: the pmd column). Each round, per format: the load average, the streaming-read bandwidth probe, then lql and
 * llama-bench (-r 1) one after the other, the order flipped every round. The probe is taken
 * again before each format's pair, not once a round: a probe 30 s away from the decode it
 * divides measured other minutes (this host's bandwidth halved within one round). lql measures like
 * llama-bench: the prompt is one forward of --prompt tokens into an empty cache, decode is
 * --gen single-token forwards from an empty cache; first the same warm-up as llama-bench's
 * (one prompt, then one decoded token), which also pages the weights in. Every ratio is printed, then per format the median and range. The weights are
 * random (speed does not depend on them); llama.cpp's default KV cache is f16, lql's f32.
 * lql's q8_0/q4_k are REPRESENT profiles of the bf16 container (decoder stack and head;
 * the embedding stays bf16, one row read per token); the peer's q4_k is `--pure`.
 * Wall-clock numbers are printed, never asserted.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "vindex.h"
#include "engine_int.h"
#include "qkernels.h"
#include "bandwidth.h"
#include "ckpt.h"

#define MAX_ROUNDS 32

typedef struct fmt {
    char name[8];           /* bf16 f16 q8_0 q4_k */
    char vx[2048];          /* container */
    const char *profile;    /* NULL: the container's own dtype */
    double pp[MAX_ROUNDS], tg[MAX_ROUNDS], ppeer[MAX_ROUNDS], tpeer[MAX_ROUNDS];
    double bw[MAX_ROUNDS];  /* the probe just before the round's pair */
    const char *alt;        /* the prompt's second run: "LQL_PREFILL_BF16" or "LQL_QEXACT" */
    double ppx[MAX_ROUNDS], kl[MAX_ROUNDS];   /* that run's t/s and KL, or -1 */
    uint64_t wbytes;        /* weight bytes streamed per decoded token */
} fmt;

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double load1(void)
{
    double ld[3] = {0};
    return getloadavg(ld, 3) < 0 ? -1 : ld[0];
}

/* KL(p || q) in nats of the softmaxes of logits a (p) and b (q). */
static double kl_logits(const float *a, const float *b, int n)
{
    double ma = a[0], mb = b[0], za = 0, zb = 0, kl = 0;
    for (int i = 1; i < n; i++) {
        ma = a[i] > ma ? a[i] : ma;
        mb = b[i] > mb ? b[i] : mb;
    }
    for (int i = 0; i < n; i++) {
        za += exp(a[i] - ma);
        zb += exp(b[i] - mb);
    }
    for (int i = 0; i < n; i++) {
        double la = a[i] - ma - log(za), lb = b[i] - mb - log(zb);
        kl += exp(la) * (la - lb);
    }
    return kl;
}

/* The variable of the prompt's second run for a format on this host, or NULL: bf16 where
 * the LQL_PREFILL_BF16=1 opt-in applies (its speed and its KL to the default), and Q8_0 and
 * Q4_K where the default prefill quantises activations as decode does (LQL_QEXACT=1 is then
 * the exact reference it is measured against). */
static const char *alt_of(const fmt *f)
{
    if (!f->profile && !strcmp(f->name, "bf16") && !eng_amx_ready()) {
        setenv("LQL_PREFILL_BF16", "1", 1);     /* the opt-in applies only once asked for */
        int on = eng_prefill_bf16_optin();
        unsetenv("LQL_PREFILL_BF16");
        return on ? "LQL_PREFILL_BF16" : NULL;
    }
    if (f->profile && ((!strcmp(f->name, "q8_0") && eng_qprefill_int(VX_Q8_0)) ||
                       (!strcmp(f->name, "q4_k") && eng_qprefill_int(VX_Q4_K))))
        return "LQL_QEXACT";
    return NULL;
}

static const char *alt_what(const fmt *f)
{
    return !strcmp(f->alt, "LQL_QEXACT") ? "exact f32 prefill, the reference" : "opt-in, not f32-accurate";
}

/* The share of the container's resident pages that this process maps 2 MiB at a time
 * (FilePmdMapped / Rss over its mappings in /proc/self/smaps), or -1. It depends on how the
 * page cache last filled those pages: a bf16 stack at 92 % read 10 % slower than the f16
 * one at 94 %, and as fast once both were evicted and faulted in again at 100 % (ENGINE.md,
 * session 11), so a reader of a slow round can tell the page cache from the kernel. */
static double pmd_share(const char *dir)
{
    char abs[PATH_MAX], line[PATH_MAX + 256];
    FILE *fp = realpath(dir, abs) ? fopen("/proc/self/smaps", "r") : NULL;
    if (!fp) return -1;
    const size_t n = strlen(abs);
    double rss = 0, pmd = 0;
    int in = 0;
    while (fgets(line, sizeof line, fp)) {
        unsigned long kb;
        if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) {
            const char *path = strchr(line, '/');   /* a mapping's header line */
            in = path && strncmp(path, abs, n) == 0 && path[n] == '/';
        } else if (in && sscanf(line, "Rss: %lu kB", &kb) == 1) {
            rss += (double)kb;
        } else if (in && sscanf(line, "FilePmdMapped: %lu kB", &kb) == 1) {
            pmd += (double)kb;
        }
    }
    fclose(fp);
    return rss > 0 ? pmd / rss : -1;
}

/* lql on one format: prompt and decode tokens/s (and CPU ms per decoded token). With
 * alt_of, the prompt is run a second time with that variable set to 1: *ppx its tokens/s,
 * *kl the KL of the default prompt's last-token distribution to that run's (else both -1). */
static int lql_run(fmt *f, int n_prompt, int n_gen, double *pps, double *dps, double *cpu_ms,
                   double *ppx, double *kl, double *pmd)
{
    vx_container *c = NULL;
    eng_model *m = NULL;
    eng_session *s = NULL;
    vx_err err = {0};
    /* lql's first touch, as a session's: every bound tensor hashed in one sequential pass
     * over its mapping, which is what pages the weights in (in 2 MiB folios); without it the
     * prefill's tiles fault them in out of order and 13 % of a Q4_K stack came in 4 KiB
     * folios (pmd 0.86 against 0.996) */
    if (vx_open_profile(f->vx, f->profile, NULL, 0, &c, &err) < 0 ||
        eng_tensors_check(c, NULL, 0, &err) < 0 || eng_model_bind(c, &m, &err) < 0 ||
        eng_session_new(m, (n_prompt > n_gen ? n_prompt : n_gen) + 8, &s, &err) < 0) {
        fprintf(stderr, "decode: %s: %s\n", f->name, err.msg);
        eng_model_free(m);
        vx_close(c);
        return -1;
    }
    f->wbytes = 0;
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *t = vx_tensor_at(c, i);
        if (strcmp(t->object, "target.embedding") != 0) f->wbytes += t->nbytes;
    }
    int vocab = eng_model_vocab(m), rc = 0, nmax = n_prompt > n_gen ? n_prompt : n_gen;
    int32_t *ids = malloc((size_t)nmax * sizeof *ids);
    float *logits = malloc((size_t)vocab * sizeof *logits);
    for (int i = 0; ids && i < nmax; i++) ids[i] = (int32_t)((i * 7919 + 13) % vocab);
    /* the warm-up llama-bench does: one prompt, then one decoded token */
    if (!ids || !logits || eng_forward(s, ids, n_prompt, logits, NULL, &err) < 0 ||
        eng_forward(s, ids + n_prompt % nmax, 1, logits, NULL, &err) < 0)
        rc = -1;
    eng_session_reset(s);
    double t0 = bw_now();
    if (!rc && eng_forward(s, ids, n_prompt, logits, NULL, &err) < 0) rc = -1;
    double tp = bw_now() - t0;
    *ppx = *kl = -1;
    f->alt = alt_of(f);
    float *opt = !rc && f->alt ? malloc((size_t)vocab * sizeof *opt) : NULL;
    if (opt) setenv(f->alt, "1", 1);
    if (opt) {
        eng_session_reset(s);
        t0 = bw_now();
        if (eng_forward(s, ids, n_prompt, opt, NULL, &err) < 0) rc = -1;
        *ppx = n_prompt / (bw_now() - t0);
        *kl = kl_logits(logits, opt, vocab);
        free(opt);
        unsetenv(f->alt);
    }
    eng_session_reset(s);
    t0 = bw_now();
    double c0 = cpu_now();
    for (int i = 0; !rc && i < n_gen; i++)
        if (eng_forward(s, ids + i, 1, logits, NULL, &err) < 0) rc = -1;
    double td = bw_now() - t0;
    *cpu_ms = (cpu_now() - c0) / n_gen * 1e3;
    *pmd = pmd_share(f->vx);
    if (rc) fprintf(stderr, "decode: %s: %s\n", f->name, err.msg[0] ? err.msg : "out of memory");
    *pps = n_prompt / tp;
    *dps = n_gen / td;
    free(ids);
    free(logits);
    eng_session_free(s);
    eng_model_free(m);
    vx_close(c);
    return rc;
}

/* llama-bench on one format, one repetition: prompt and decode tokens/s. */
static int peer_run(const char *lb, const char *models, const char *name, int threads,
                    int n_prompt, int n_gen, double *pps, double *dps)
{
    char cmd[8192], line[8192];
    if ((size_t)snprintf(cmd, sizeof cmd, "'%s' -m '%s/bench-1b-%s.gguf' -t %d -p %d -n %d -r 1 -o csv 2>/dev/null",
                         lb, models, name, threads, n_prompt, n_gen) >= sizeof cmd)
        return -1;
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    int c_np = -1, c_ng = -1, c_ts = -1;
    *pps = *dps = 0;
    while (fgets(line, sizeof line, p)) {
        char *fld[128];
        int nf = 0;
        for (char *t = strtok(line, ",\n"); t && nf < 128; t = strtok(NULL, ",\n")) {
            if (*t == '"') t++;
            size_t l = strlen(t);
            if (l && t[l - 1] == '"') t[l - 1] = 0;
            fld[nf++] = t;
        }
        if (c_ts < 0) {
            for (int i = 0; i < nf; i++) {
                if (!strcmp(fld[i], "n_prompt")) c_np = i;
                if (!strcmp(fld[i], "n_gen")) c_ng = i;
                if (!strcmp(fld[i], "avg_ts")) c_ts = i;
            }
            continue;
        }
        if (c_np < 0 || c_ng < 0 || c_ts >= nf) continue;
        if (atoi(fld[c_np]) > 0) *pps = atof(fld[c_ts]);
        else if (atoi(fld[c_ng]) > 0) *dps = atof(fld[c_ts]);
    }
    int st = pclose(p);
    if (st != 0 || *pps <= 0 || *dps <= 0) {
        fprintf(stderr, "decode: llama-bench on %s/bench-1b-%s.gguf failed (status %d)\n", models, name, st);
        return -1;
    }
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median, min and max of v[0..n). */
static void stats(const double *v, int n, double *med, double *lo, double *hi)
{
    double s[MAX_ROUNDS];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_d);
    *med = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    *lo = s[0];
    *hi = s[n - 1];
}

/* The CPU's model name and the flags that decide the kernels, from /proc/cpuinfo. */
static void cpu_note(char *model, size_t mcap, char *flags, size_t fcap)
{
    static const char *want[] = {"avx2", "f16c", "avx512f", "avx512_bf16", "avx512_vnni",
                                 "avx_vnni", "amx_tile", "amx_bf16", "amx_int8"};
    char line[8192];
    snprintf(model, mcap, "unknown");
    flags[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    int got_m = 0, got_f = 0;
    while (fgets(line, sizeof line, f) && !(got_m && got_f)) {
        char *v = strchr(line, ':');
        if (!v) continue;
        v += 2;
        v[strcspn(v, "\n")] = 0;
        if (!got_m && !strncmp(line, "model name", 10)) {
            snprintf(model, mcap, "%s", v);
            got_m = 1;
        } else if (!got_f && !strncmp(line, "flags", 5)) {
            size_t len = 0;
            for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
                char pat[32];
                snprintf(pat, sizeof pat, " %s ", want[i]);
                char padded[8200];
                snprintf(padded, sizeof padded, " %s ", v);
                len += (size_t)snprintf(flags + len, fcap - len, "%s%s %s", len ? ", " : "", want[i],
                                        strstr(padded, pat) ? "yes" : "NO");
                if (len >= fcap) break;
            }
            got_f = 1;
        }
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    const char *dtypes = "bf16,f16,q8_0,q4_k", *dir = "/tmp/lql-bench";
    const char *lb = getenv("LQL_PEER_BENCH"), *models = getenv("LQL_PEER_MODELS");
    int threads = 2, n_prompt = 64, n_gen = 32, layers = 22, rounds = 3, no_peer = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--no-peer")) { no_peer = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "decode: %s needs a value\n", o); return 2; }
        const char *v = argv[++i];
        if (!strcmp(o, "--dtype")) dtypes = v;
        else if (!strcmp(o, "--dir")) dir = v;
        else if (!strcmp(o, "--peer")) lb = v;
        else if (!strcmp(o, "--peer-models")) models = v;
        else if (!strcmp(o, "--threads")) threads = atoi(v);
        else if (!strcmp(o, "--prompt")) n_prompt = atoi(v);
        else if (!strcmp(o, "--gen")) n_gen = atoi(v);
        else if (!strcmp(o, "--layers")) layers = atoi(v);
        else if (!strcmp(o, "--rounds")) rounds = atoi(v);
        else { fprintf(stderr, "decode: unknown option %s\n", o); return 2; }
    }
    if (threads < 1 || n_prompt < 1 || n_gen < 1 || layers < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "decode: counts must be positive (rounds at most %d)\n", MAX_ROUNDS);
        return 2;
    }
    fmt F[4];
    int nf = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", dtypes);
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
        if (nf == 4 || (strcmp(t, "bf16") && strcmp(t, "f16") && strcmp(t, "q8_0") && strcmp(t, "q4_k"))) {
            fprintf(stderr, "decode: --dtype takes up to four of bf16,f16,q8_0,q4_k (got '%s')\n", t);
            return 2;
        }
        memset(&F[nf], 0, sizeof F[nf]);
        snprintf(F[nf].name, sizeof F[nf].name, "%s", t);
        nf++;
    }
    if (!no_peer) {
        struct stat st;
        char g[4200];
        if (!lb || access(lb, X_OK) != 0) {
            fprintf(stderr, "decode: no llama.cpp peer: pass --peer PATH/llama-bench (or set LQL_PEER_BENCH)"
                            " and --peer-models DIR (or LQL_PEER_MODELS) holding bench-1b-DTYPE.gguf;"
                            " --no-peer measures lql alone\n");
            return 2;
        }
        for (int k = 0; k < nf; k++) {
            int len = snprintf(g, sizeof g, "%s/bench-1b-%.7s.gguf", models ? models : "(unset)", F[k].name);
            if (!models || (size_t)len >= sizeof g || stat(g, &st) != 0) {
                fprintf(stderr, "decode: the peer's model %s is missing (--peer-models DIR or LQL_PEER_MODELS)\n", g);
                return 2;
            }
            bw_drop_cache(g);   /* read in by llama.cpp's own loader, as lql's containers below */
        }
    }
    char th[16];
    snprintf(th, sizeof th, "%d", threads);
    setenv("LQL_THREADS", th, 1);
    for (int k = 0; k < nf; k++) {
        int quant = F[k].name[0] == 'q';
        if (bench_container(dir, quant ? "bf16" : F[k].name, layers, F[k].vx, sizeof F[k].vx)) return 1;
        if (quant) {
            vx_dtype qd = strcmp(F[k].name, "q8_0") ? VX_Q4_K : VX_Q8_0;
            if (bench_quant(F[k].vx, qd)) return 1;
            F[k].profile = vx_dtype_name(qd);
        }
    }

    /* lql's weights start out of the page cache too (the GGUFs were dropped above), so each
     * program caches its own through its reader (lql's mapping asks for 2 MiB folios), not
     * by whatever copied it there */
    for (int k = 0; k < nf; k++)
        bw_drop_cache(F[k].vx);
    char cpu[256], flags[512];
    cpu_note(cpu, sizeof cpu, flags, sizeof flags);
    printf("cpu          %s\nflags        %s\n", cpu, flags);
    printf("prefill      bf16: %s; f16: %s; q8_0: %s; q4_k: %s\n", eng_prefill_path(VX_BF16),
           eng_prefill_path(VX_F16), eng_prefill_path(VX_Q8_0), eng_prefill_path(VX_Q4_K));
    printf("model        TinyLlama-1.1B geometry, %d layers; prompt %d tokens, decode %d tokens, "
           "%d threads, %d rounds\n", layers, n_prompt, n_gen, threads, rounds);
    printf("%-5s %-4s %5s %6s | %8s %8s %5s | %7s %7s %5s | %5s %5s %6s %4s\n", "round", "fmt", "load",
           "probe", "pp lql", "pp peer", "ratio", "tg lql", "tg peer", "ratio", "bw l", "bw p", "cpu ms", "pmd");
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < nf; k++) {
            fmt *f = &F[k];
            double ld = load1(), cpu_ms = 0, pmd = -1, bw = bw_probe(threads);
            f->bw[r] = bw;
            for (int side = 0; side < 2; side++) {
                int lql_turn = (side == 0) == (r % 2 == 0);
                if (lql_turn && lql_run(f, n_prompt, n_gen, &f->pp[r], &f->tg[r], &cpu_ms, &f->ppx[r],
                                        &f->kl[r], &pmd))
                    return 1;
                if (!lql_turn && !no_peer &&
                    peer_run(lb, models, f->name, threads, n_prompt, n_gen, &f->ppeer[r], &f->tpeer[r]))
                    return 1;
            }
            double gb = (double)f->wbytes / 1e9;
            if (no_peer)
                printf("%-5d %-4s %5.2f %6.1f | %8.1f %8s %5s | %7.2f %7s %5s | %5.2f %5s %6.1f %4.2f\n", r + 1,
                       f->name, ld, bw, f->pp[r], "-", "-", f->tg[r], "-", "-", gb * f->tg[r] / bw, "-", cpu_ms,
                       pmd);
            else
                printf("%-5d %-4s %5.2f %6.1f | %8.1f %8.1f %5.2f | %7.2f %7.2f %5.2f | %5.2f %5.2f %6.1f %4.2f\n",
                       r + 1, f->name, ld, bw, f->pp[r], f->ppeer[r], f->pp[r] / f->ppeer[r], f->tg[r],
                       f->tpeer[r], f->tg[r] / f->tpeer[r], gb * f->tg[r] / bw, gb * f->tpeer[r] / bw, cpu_ms, pmd);
            if (f->ppx[r] > 0)
                printf("%-5d %-4s %s=1 (%s): pp lql %.1f, ratio %s%.2f, KL default||it %.2e nats\n",
                       r + 1, f->name, f->alt, alt_what(f), f->ppx[r], no_peer ? "- " : "",
                       no_peer ? f->ppx[r] / f->pp[r] : f->ppx[r] / f->ppeer[r], f->kl[r]);
            fflush(stdout);
        }
    }
    printf("(pp/tg: tokens/s; ratio: lql / llama.cpp; bw l/p: weight bytes streamed per second in decode\n"
           " as a fraction of the probe before the pair, for lql and the peer; cpu ms: lql CPU per decoded token;\n"
           " pmd: the share of lql's resident container pages mapped 2 MiB at a time, -1 unknown;\n"
           " second-run lines: the prompt again with the variable set, its ratio to llama.cpp (with\n"
           " --no-peer to lql's default prompt) and the KL of the default's last-token distribution to it)\n");
    for (int k = 0; k < nf && !no_peer; k++) {
        double rp[MAX_ROUNDS], rt[MAX_ROUNDS], fb[MAX_ROUNDS], a, lo, hi, b, lo2, hi2, c, lo3, hi3;
        for (int r = 0; r < rounds; r++) {
            rp[r] = F[k].pp[r] / F[k].ppeer[r];
            rt[r] = F[k].tg[r] / F[k].tpeer[r];
            fb[r] = (double)F[k].wbytes / 1e9 * F[k].tg[r] / F[k].bw[r];
        }
        stats(rp, rounds, &a, &lo, &hi);
        stats(rt, rounds, &b, &lo2, &hi2);
        stats(fb, rounds, &c, &lo3, &hi3);
        printf("%-4s  prompt ratio median %.2f (%.2f-%.2f)   decode ratio median %.2f (%.2f-%.2f)   "
               "decode/probe %.2f (%.2f-%.2f)\n", F[k].name, a, lo, hi, b, lo2, hi2, c, lo3, hi3);
        if (F[k].ppx[0] > 0) {
            double kmax = 0;
            for (int r = 0; r < rounds; r++) {
                rp[r] = F[k].ppx[r] / F[k].ppeer[r];
                kmax = F[k].kl[r] > kmax ? F[k].kl[r] : kmax;
            }
            stats(rp, rounds, &a, &lo, &hi);
            printf("%-4s  prompt ratio with %s=1 (%s) median %.2f (%.2f-%.2f), KL default||it at most %.2e nats\n",
                   F[k].name, F[k].alt, alt_what(&F[k]), a, lo, hi, kmax);
        }
    }
    printf("AMX %s on this host\n", eng_amx_ready() ? "present and used" : "absent (or LQL_NO_AMX=1)");
    return 0;
}
