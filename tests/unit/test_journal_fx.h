/*
 * test_journal_fx.h — what the mutation tests share: removing a test tree and encoding the
 * tiny Llama fixture (with its down-meta) into a fresh container, optionally under a shard
 * cap so a representation is stored as several segments; a checkpoint of a chosen
 * geometry from mkfixture, encoded and bound.
 */
#ifndef TEST_JOURNAL_FX_H
#define TEST_JOURNAL_FX_H

#include "browse.h"
#include "vindex.h"
#include "vx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TINY LQL_FIXTURE_DIR "/models/tinyllama"

/* rm -rf dir (and nothing else). */
static inline void fx_rm_rf(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Encode the checkpoint src into out (removed first) with down-meta; shard_cap (may be
 * NULL) is LQL_SHARD_CAP for the encode only. 0, or -1 with the error printed. */
static inline int fx_encode(const char *src, const char *out, const char *shard_cap)
{
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.finish = brw_encode_finish;
    o.finish_ctx = &o;
    vx_err e = {0};
    fx_rm_rf(out);
    if (shard_cap)
        setenv("LQL_SHARD_CAP", shard_cap, 1);
    int rc = vx_encode(src, out, &o, &e);
    if (shard_cap)
        unsetenv("LQL_SHARD_CAP");
    if (rc)
        fprintf(stderr, "setup: encode %s: %s\n", out, e.msg);
    return rc;
}

/* A checkpoint from mkfixture (args: its options after --family, the llama2 tokenizer
 * added) written to hf, encoded into vx without down-meta, opened and bound. 0, or -1 with
 * the error printed; *c and *m are NULL on failure. */
static inline int fx_mkfixture_bind(const char *args, const char *hf, const char *vx,
                                    vx_container **c, eng_model **m)
{
    char cmd[8192];
    *c = NULL;
    *m = NULL;
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && '%s/mkfixture' --family %s --tokenizer "
             "'%s/llama2/tokenizer.json' -o '%s' >/dev/null 2>&1", hf, LQL_BINARY_DIR, args,
             LQL_TOKENIZER_DIR, hf);
    vx_err e = {0};
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    fx_rm_rf(vx);
    if (system(cmd) != 0) {
        fprintf(stderr, "setup: mkfixture --family %s failed\n", args);
        return -1;
    }
    if (vx_encode(hf, vx, &o, &e) || vx_open(vx, c, &e) || eng_model_bind(*c, m, &e)) {
        fprintf(stderr, "setup: %s: %s\n", vx, e.msg);
        vx_close(*c);
        *c = NULL;
        return -1;
    }
    return 0;
}

/* Encode tinyllama into out (fx_encode). */
static inline int fx_encode_tiny(const char *out, const char *shard_cap)
{
    return fx_encode(TINY, out, shard_cap);
}

/* A fresh test directory LQL_BINARY_DIR/name (dir, 2048 bytes) holding tinyllama encoded
 * as dir/base.vindex3 (base, 2100 bytes). 0, or -1 with the error printed. */
static inline int fx_tiny_dir(const char *name, char *dir, char *base)
{
    snprintf(dir, 2048, "%s/%s", LQL_BINARY_DIR, name);
    fx_rm_rf(dir);
    mkdir(dir, 0755);
    snprintf(base, 2100, "%s/base.vindex3", dir);
    return fx_encode_tiny(base, NULL);
}

/* Run a shell command, its stdout (and whatever it redirects) into out (NUL-terminated,
 * at most n - 1 bytes). 0 when it ran and exited 0. */
static inline int fx_run(const char *cmd, char *out, size_t n)
{
    FILE *p = popen(cmd, "r");
    size_t k = p ? fread(out, 1, n - 1, p) : 0;
    out[k] = '\0';
    return p && pclose(p) == 0 ? 0 : -1;
}

/* A saved patch's text (malloc'd; NULL with the error printed) and how many times needle
 * occurs in it (*count). */
static inline char *fx_patch_text(const char *vlp, const char *needle, int *count)
{
    char *text = NULL;
    size_t n = 0;
    vx_err e = {0};
    *count = 0;
    if (vx_read_small_file(vlp, "patch", &text, &n, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return NULL;
    }
    for (const char *q = text; (q = strstr(q, needle)); q++)
        (*count)++;
    return text;
}

#endif
