/*
 * test_journal_gate.c — COMPILE's equivalence gate, driven through the lql CLI on the tiny
 * Llama model: an honest COMPILE (patch + DELETE) passes the gate (INFER logits, TRACE lens
 * and WALK hits of its probes within 1e-5 of the logit scale) and leaves a container; the
 * same COMPILE with one written value corrupted (the LQL_TEST_COMPILE_FAULT hook) fails
 * naming what differs, and leaves neither the output nor its temporary tree. On bf16
 * storage COMPILE rounds the edited tensors once and the gate's bound is 2e-2 of the scale.
 */
#include "t.h"
#include "test_journal_fx.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

/* Entries of dir whose name starts with prefix. */
static int count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

int main(void)
{
    char dir[2048], base[2100], ok[2100], bad[2100], cmd[16384];
    static char out[1 << 16];
    struct stat sb;
    snprintf(dir, sizeof dir, "%s/h13-gate", LQL_BINARY_DIR);
    fx_rm_rf(dir);
    mkdir(dir, 0755);
    snprintf(base, sizeof base, "%s/base.vindex3", dir);
    snprintf(ok, sizeof ok, "%s/ok.vindex3", dir);
    snprintf(bad, sizeof bad, "%s/bad.vindex3", dir);
    if (fx_encode_tiny(base, NULL))
        return 1;
    static const char *const stmts =
        "APPLY PATCH \\\"" LQL_SOURCE_DIR "/tests/lql/data/edit_geo.vlp\\\"; "
        "DELETE FROM EDGES WHERE layer = 1 AND feature < 3; ";

    snprintf(cmd, sizeof cmd, "'%s/lql' -c \"USE \\\"%s\\\" JOURNAL \\\":memory:\\\"; %s"
             "COMPILE CURRENT INTO VINDEX \\\"%s\\\";\" 2>&1", LQL_BINARY_DIR, base, stmts, ok);
    CHECK(fx_run(cmd, out, sizeof out) == 0);
    CHECK_HAS(out, "prompt\toverlay\tcompiled\tmax_logit_diff\tmax_lens_diff\tmax_walk_diff\n");
    /* top tokens as text, as INFER shows them (" Par"), not vocabulary pieces ("ĠPar") */
    CHECK_HAS(out, "The capital of France is\t Par\t Par\t");
    CHECK_HAS(out, "-- compile gate: INFER logits, TRACE lens (every layer) and WALK hits (top "
                   "10 per layer) of 4 probes agree within 1e-5 (f32 storage) x the logit scale; the "
                   "down-meta of every edited feature is equal\n");
    CHECK(stat(ok, &sb) == 0);

    snprintf(cmd, sizeof cmd, "LQL_TEST_COMPILE_FAULT=1 '%s/lql' -c \"USE \\\"%s\\\" JOURNAL "
             "\\\":memory:\\\"; %sCOMPILE CURRENT INTO VINDEX \\\"%s\\\";\" 2>&1",
             LQL_BINARY_DIR, base, stmts, bad);
    CHECK(fx_run(cmd, out, sizeof out) != 0);
    CHECK_HAS(out, "compile: removed '");
    CHECK_HAS(out, "bad.vindex3', which does not answer as the overlay does within 1e-5 (f32 "
                   "storage) x logit scale 15.3: INFER logits differ by 0.219\n");
    CHECK(stat(bad, &sb) != 0);
    CHECK(count_prefixed(dir, "bad.vindex3") == 0);
    printf("%s", out);

    /* bf16 storage: the looser bound, named */
    char b16[2100], ok16[2100];
    snprintf(b16, sizeof b16, "%s/base16.vindex3", dir);
    snprintf(ok16, sizeof ok16, "%s/ok16.vindex3", dir);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.finish = brw_encode_finish;
    o.finish_ctx = &o;
    o.dtype = VX_BF16;
    vx_err e = {0};
    CHECK(vx_encode(TINY, b16, &o, &e) == 0);
    snprintf(cmd, sizeof cmd, "'%s/lql' -c \"USE \\\"%s\\\" JOURNAL \\\":memory:\\\"; %s"
             "COMPILE CURRENT INTO VINDEX \\\"%s\\\";\" 2>&1", LQL_BINARY_DIR, b16, stmts, ok16);
    CHECK(fx_run(cmd, out, sizeof out) == 0);
    CHECK_HAS(out, "of 4 probes agree within 2e-2 (bf16 storage) x the logit scale; the "
                   "down-meta of every edited feature is equal\n");
    CHECK(stat(ok16, &sb) == 0);
    printf("%s", out);
    fx_rm_rf(dir);
    return T_DONE();
}
