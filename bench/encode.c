/*
 * encode.c — encode speed side by side with copying the checkpoint, alternating in the same
 * minutes. Each round runs, each in a child process (so its peak RSS and CPU time are its
 * own):
 *   cp      `cp` of the checkpoint's files into the work directory, then `sha256sum` of the
 *           copies (what any tool that writes and fingerprints the bytes must at least do);
 *   plain   vx_encode (source dtype kept), no hooks;
 *   meta    vx_encode with the down-meta hook (brw_encode_finish), as `vindex encode` runs.
 * and prints per round the load average, wall and CPU seconds, MiB/s of checkpoint bytes,
 * peak RSS, and the ratios issue 12 sets goals for: plain speed / cp speed (goal ≥ 0.8),
 * meta / plain time (goal ≤ 2), and down-meta's share of the meta encode. With the int8
 * screen, each round also times down-meta's screening product alone over the checkpoint's
 * vocabulary (screen_rate.h, in a child between plain and meta): vocab · hidden ·
 * features multiply-adds at that rate is a floor under down-meta, so (plain + floor) / plain
 * is the lowest meta / plain this host allowed in that minute, the admission, rescoring and
 * preparation not counted. Asserts nothing.
 *
 *   encode [--geom 0.1b|1.1b|3b|8b] [--rounds 3] [--dir /tmp/lql-bench-encode] [--keep] [--no-meta]
 *
 * --no-meta skips the third step (the plain-encode goal alone, in a fraction of the time).
 *
 * The checkpoint DIR/hf-GEOM is generated on first use with the mkfixture next to this
 * binary (Llama family, bf16, random weights): 0.1b = hidden 768, 12 layers, inter 2048;
 * 1.1b = the TinyLlama geometry (hidden 2048, 22 layers, inter 5632); 3b = the OpenLLaMA-3B
 * geometry (hidden 3200, 26 layers, inter 8640), these three with vocab 32000; 8b = the
 * Llama-3-8B geometry (hidden 4096, 32 layers, 8 KV heads, inter 14336, vocab 128256); all
 * with an untied head. Check `df -h` first: the 3b checkpoint is 6.9 GB, the 8b one 16 GB,
 * and a round writes two more copies of that size (each removed before the next step;
 * --keep keeps the checkpoint's containers of the last round).
 */
#include "browse.h"
#include "child_cost.h"
#include "screen_rate.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct geom {
    const char *name;
    int hidden, layers, heads, kv, inter, vocab;
} geoms[] = {
    {"0.1b", 768, 12, 12, 4, 2048, 32000},
    {"1.1b", 2048, 22, 32, 4, 5632, 32000},
    {"3b", 3200, 26, 32, 32, 8640, 32000},
    {"8b", 4096, 32, 32, 8, 14336, 128256},
};

static double load1(void)
{
    double ld[3];
    return getloadavg(ld, 3) < 0 ? -1 : ld[0];
}

/* screen_best over 256 features, in a child: the engine's pool must not start in this
 * process, whose later children (fork) would inherit a pool without its threads. */
static double screen_in_child(int rows, int hidden)
{
    int fd[2];
    if (pipe(fd) != 0) return -1;
    const pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        const double t = screen_best(rows, hidden, 256, 5);
        _exit(write(fd[1], &t, sizeof t) == (ssize_t)sizeof t ? 0 : 1);
    }
    close(fd[1]);
    double t = -1;
    if (read(fd[0], &t, sizeof t) != (ssize_t)sizeof t) t = -1;
    close(fd[0]);
    waitpid(pid, NULL, 0);
    return t;
}

/* One step: 0 cp + sha256sum, 1 plain encode, 2 encode with down-meta; out removed first. */
static int run(int mode, const char *src, const char *out, child_cost *r)
{
    char cmd[5000];
    snprintf(cmd, sizeof cmd, "rm -rf '%.1090s'", out);
    if (system(cmd) != 0) return -1;
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    if (mode == 2) {
        o.finish = brw_encode_finish;
        o.finish_ctx = &o;
    }
    snprintf(cmd, sizeof cmd, "mkdir -p '%.1090s' && cp '%.1090s'/* '%.1090s'/ && sha256sum '%.1090s'/* >/dev/null",
             out, src, out, out);
    return child_run(src, out, &o, mode == 0 ? cmd : NULL, r);
}

int main(int argc, char **argv)
{
    const char *gname = "1.1b", *dir = "/tmp/lql-bench-encode";
    int rounds = 3, keep = 0, steps = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--geom") == 0 && i + 1 < argc) gname = argv[++i];
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) dir = argv[++i];
        else if (strcmp(argv[i], "--keep") == 0) keep = 1;
        else if (strcmp(argv[i], "--no-meta") == 0) steps = 2;
        else {
            fprintf(stderr, "usage: encode [--geom 0.1b|1.1b|3b|8b] [--rounds 3] [--dir DIR] [--keep] "
                    "[--no-meta]\n");
            return 2;
        }
    }
    const struct geom *g = NULL;
    for (size_t i = 0; i < sizeof geoms / sizeof *geoms; i++)
        if (strcmp(geoms[i].name, gname) == 0) g = &geoms[i];
    if (!g || rounds < 1) {
        fprintf(stderr, "encode: --geom is 0.1b, 1.1b, 3b or 8b and --rounds at least 1\n");
        return 2;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "encode: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    if (strlen(dir) > 900) {
        fprintf(stderr, "encode: directory name too long: %s\n", dir);
        return 2;
    }
    char src[1000], cfg[1100], out[3][1100];
    snprintf(src, sizeof src, "%s/hf-%s", dir, g->name);
    snprintf(cfg, sizeof cfg, "%s/config.json", src);
    if (access(cfg, F_OK) != 0) {
        char self[PATH_MAX], cmd[3 * PATH_MAX];
        snprintf(self, sizeof self, "%s", argv[0]);
        snprintf(cmd, sizeof cmd, "'%s/mkfixture' --family llama --hidden %d --layers %d --heads %d "
                 "--kv-heads %d --inter %d --vocab %d --ctx 2048 --dtype bf16 --seed 7 -o '%s'",
                 dirname(self), g->hidden, g->layers, g->heads, g->kv, g->inter, g->vocab, src);
        double t0 = cc_now();
        if (system(cmd) != 0) {
            fprintf(stderr, "encode: generating the checkpoint failed: %s\n", cmd);
            return 1;
        }
        printf("generated %s in %.1f s\n", src, cc_now() - t0);
    }
    static const char *label[3] = {"cp+sha256", "plain", "meta"};
    for (int k = 0; k < 3; k++) snprintf(out[k], sizeof out[k], "%s/out-%s", dir, label[k]);
    const double mib = (double)dir_bytes(src) / 1048576.0;
    printf("checkpoint %s: %.1f MiB; %d threads; down-meta screen: %s\n", src, mib, eng_threads(),
           brw_downmeta_screen(g->hidden));
    printf("%5s %-10s %6s %8s %8s %9s %10s\n", "round", "step", "load", "wall s", "cpu s", "MiB/s",
           "peak RSS");
    for (int r = 0; r < rounds; r++) {
        child_cost s[3];
        double ld[3], floor_s = -1;
        for (int k = 0; k < steps; k++) {
            if (k == 2) {   /* one screening pass covers 256 features, as down-meta's chunks */
                const double t = screen_in_child(g->vocab, g->hidden);
                floor_s = t < 0 ? -1 : t * g->layers * g->inter / 256.0;
                if (floor_s >= 0)
                    printf("%5d %-10s %6.1f %8.1f %8s %9s   (%.0f G int8 multiply-adds/s)\n", r + 1,
                           "screen", load1(), floor_s, "-", "-",
                           (double)g->vocab * g->hidden * 256 / t / 1e9);
            }
            ld[k] = load1();
            if (run(k, src, out[k], &s[k]) != 0) {
                fprintf(stderr, "encode: round %d: %s failed\n", r + 1, label[k]);
                return 1;
            }
            printf("%5d %-10s %6.1f %8.1f %8.1f %9.1f %6.0f MiB\n", r + 1, label[k], ld[k], s[k].wall,
                   s[k].cpu, mib / s[k].wall, (double)s[k].rss / 1048576.0);
            fflush(stdout);
            if (k < 2 || !keep) {
                char cmd[1200];
                snprintf(cmd, sizeof cmd, "rm -rf '%.1090s'", out[k]);
                if (system(cmd) != 0) return 1;
            }
        }
        if (steps == 2) {
            printf("round %d: plain / cp+sha256 speed %.2f (goal >= 0.8; cpu %.2f)\n", r + 1,
                   s[0].wall / s[1].wall, s[0].cpu / s[1].cpu);
            continue;
        }
        printf("round %d: plain / cp+sha256 speed %.2f (goal >= 0.8; cpu %.2f); meta / plain time "
               "%.2f (goal <= 2; cpu %.2f); down-meta %.0f%% of the meta encode\n",
               r + 1, s[0].wall / s[1].wall, s[0].cpu / s[1].cpu, s[2].wall / s[1].wall,
               s[2].cpu / s[1].cpu, 100 * (s[2].wall - s[1].wall) / s[2].wall);
        if (floor_s >= 0)
            printf("round %d: the screening product alone (no admission, rescoring or preparation) "
                   "takes %.1f s: meta / plain is at least %.2f here\n",
                   r + 1, floor_s, (s[1].wall + floor_s) / s[1].wall);
    }
    return 0;
}
