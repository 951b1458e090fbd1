/*
 * encode_rss.c — peak memory and throughput of vx_encode on a ~1.1B-parameter checkpoint.
 *
 *   encode_rss [--src DIR] [--work DIR] [--keep]
 *
 * --src defaults to /tmp/lql-bench-1b-bf16-hf; when it has no config.json the TinyLlama
 * geometry (hidden 2048, 22 layers, 32 heads, 4 kv, inter 5632, vocab 32000, untied,
 * bf16 ≈ 2.2 GB) is generated there with the mkfixture next to this binary. Each encode
 * (source dtype kept, then converted to f32) runs in a child process so its ru_maxrss is
 * its own; the report compares it with the largest tensor and with the budget of
 * 256 MiB + one tensor. Prints ratios, asserts nothing.
 */
#include "st.h"
#include "child_cost.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *src = "/tmp/lql-bench-1b-bf16-hf", *work = "/tmp/lql-encode-rss";
    int keep = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--src") == 0 && i + 1 < argc)
            src = argv[++i];
        else if (strcmp(argv[i], "--work") == 0 && i + 1 < argc)
            work = argv[++i];
        else if (strcmp(argv[i], "--keep") == 0)
            keep = 1;
        else {
            fprintf(stderr, "usage: encode_rss [--src DIR] [--work DIR] [--keep]\n");
            return 2;
        }
    }
    char cfg[PATH_MAX];
    snprintf(cfg, sizeof cfg, "%s/config.json", src);
    if (access(cfg, F_OK) != 0) {
        char self[PATH_MAX], cmd[3 * PATH_MAX];
        snprintf(self, sizeof self, "%s", argv[0]);
        snprintf(cmd, sizeof cmd, "'%s/mkfixture' --family llama --hidden 2048 --layers 22 --heads 32 "
                 "--kv-heads 4 --inter 5632 --vocab 32000 --ctx 2048 --dtype bf16 --seed 7 -o '%s'",
                 dirname(self), src);
        double t0 = cc_now();
        if (system(cmd) != 0) {
            fprintf(stderr, "encode_rss: generating the checkpoint failed: %s\n", cmd);
            return 1;
        }
        printf("generated %s in %.1f s\n", src, cc_now() - t0);
    }
    st_model *m;
    vx_err err = {0};
    if (st_open_dir(src, &m, &err) < 0) {
        fprintf(stderr, "encode_rss: %s\n", err.msg);
        return 1;
    }
    uint64_t largest = 0, total = 0, params = 0;
    const char *lname = "";
    for (size_t i = 0; i < st_count(m); i++) {
        const st_tensor *t = st_at(m, i);
        total += t->nbytes;
        params += t->nbytes / vx_dtype_block_bytes(t->dtype);
        if (t->nbytes > largest) {
            largest = t->nbytes;
            lname = t->name;
        }
    }
    printf("checkpoint %s: %.2f B parameters, %.2f GB, largest tensor %s %.1f MiB\n", src,
           (double)params / 1e9, (double)total / 1e9, lname, (double)largest / 1048576.0);
    uint64_t lparams = largest / 2;
    st_close(m);
    if (mkdir(work, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "encode_rss: cannot create %s: %s\n", work, strerror(errno));
        return 1;
    }
    static const struct { const char *label; int dtype; uint64_t elem; } modes[] = {
        {"source (bf16 -> bf16)", -1, 2}, {"convert (bf16 -> f32)", VX_F32, 4},
    };
    printf("%-24s %8s %8s %9s %12s %14s %16s %10s\n", "mode", "wall s", "cpu s", "GB/s cpu", "peak RSS",
           "largest out", "budget", "RSS/budget");
    for (size_t k = 0; k < 2; k++) {
        char out[PATH_MAX], cmd[PATH_MAX + 16];
        snprintf(out, sizeof out, "%s/out-%zu.vindex3", work, k);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
        if (system(cmd) != 0)
            return 1;
        vx_encode_opts o;
        vx_encode_opts_init(&o);
        o.dtype = modes[k].dtype;
        child_cost cc;
        if (child_run(src, out, &o, NULL, &cc) != 0) {
            fprintf(stderr, "encode_rss: %s failed\n", modes[k].label);
            return 1;
        }
        uint64_t lout = lparams * modes[k].elem, budget = (256ull << 20) + lout;
        uint64_t bytes = dir_bytes(out);
        printf("%-24s %8.1f %8.1f %9.2f %8.1f MiB %10.1f MiB %12.1f MiB %10.2f\n", modes[k].label,
               cc.wall, cc.cpu, (double)bytes / 1e9 / cc.cpu, (double)cc.rss / 1048576.0,
               (double)lout / 1048576.0, (double)budget / 1048576.0,
               (double)cc.rss / (double)budget);
        if (!keep && system(cmd) != 0)
            return 1;
    }
    return 0;
}
