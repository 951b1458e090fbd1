/*
 * test_bank_cli.c — `vindex bank` end to end on the qwen2-moe fixture (routed, shared and
 * dense banks): import with --json counts, the shape/bank table of `vindex bank PATH` on
 * both shapes, verify of the result, and the pinned usage and refusal texts with their
 * exit codes (0 ok, 1 failure, 2 usage).
 */
#include "vindex.h"
#include "t.h"
#include "t_file.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[] = "/tmp/lql-bank-cli-XXXXXX";
static char out[1 << 16], errtxt[4096];

/* Runs `vindex ARGS` (fmt with two strings), capturing stdout and stderr; returns the
 * exit code. */
static int run(const char *fmt, const char *a, const char *b)
{
    char args[2048], cmd[4096], path[256];
    snprintf(args, sizeof args, fmt, a, b);
    snprintf(cmd, sizeof cmd, "'%s/vindex' %s >'%s/out' 2>'%s/err'", LQL_BINARY_DIR, args, tmp, tmp);
    int st = system(cmd);
    snprintf(path, sizeof path, "%s/out", tmp);
    t_read_into(path, out, sizeof out);
    snprintf(path, sizeof path, "%s/err", tmp);
    t_read_into(path, errtxt, sizeof errtxt);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int main(void)
{
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    char src[2048], g[256], b[256], want[1024];
    snprintf(src, sizeof src, "%s/models/families/qwen2-moe", LQL_FIXTURE_DIR);
    snprintf(g, sizeof g, "%s/q.graph", tmp);
    snprintf(b, sizeof b, "%s/q.bank", tmp);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    vx_err err = {0};
    CHECK_MSG(vx_encode(src, g, &o, &err) == 0, "%s", err.msg);

    CHECK(run("bank import %s -o %s --json", g, b) == 0);
    cJSON *doc = cJSON_Parse(out);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(doc, "ok")));
    CHECK(jnum(doc, "layer_files") == 3 && jnum(doc, "routed_banks") == 2 && jnum(doc, "shared_banks") == 2 &&
          jnum(doc, "dense_banks") == 1 && jnum(doc, "regions") == 57);
    /* routed 2 x 8 x 3 x 64x32 + shared 2 x 3 x 64x64 + dense 3 x 64x128, f32 */
    CHECK(jnum(doc, "bank_bytes") == (2.0 * 8 * 3 * 64 * 32 + 2.0 * 3 * 64 * 64 + 3.0 * 64 * 128) * 4);
    cJSON_Delete(doc);

    CHECK(run("bank %s%s", b, "") == 0);
    CHECK_HAS(out, "shape bank (system graph + moe_manifest.json, LYRW v2 banks)\n");
    CHECK_HAS(out, "0       routed_bank   gated-mlp-v1                   8  64/32/64      banks/layer_000.lyrw\n");
    CHECK_HAS(out, "0       shared_bank   gated-mlp-v1                   1  64/64/64      banks/layer_000.lyrw\n");
    CHECK_HAS(out, "1       dense_bank    gated-mlp-v1                   1  64/128/64     banks/layer_001.lyrw\n");
    CHECK(run("bank %s --json%s", b, "") == 0);
    doc = cJSON_Parse(out);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "shape")), "bank");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "banks")) == 5);
    cJSON_Delete(doc);
    CHECK(run("bank %s%s", g, "") == 0);
    CHECK_STR(out, "shape graph\n");
    CHECK(run("verify %s%s", b, "") == 0);
    CHECK(run("inspect %s%s", b, "") == 0);
    CHECK_HAS(out, "), bank shape, authority ");
    CHECK(run("inspect %s --json%s", b, "") == 0);
    CHECK_HAS(out, "\"shape\":\t\"bank\"");
    CHECK(run("inspect %s%s", g, "") == 0);
    CHECK_HAS(out, "), graph shape, authority ");

    CHECK(run("bank import %s%s", g, "") == 2);
    CHECK_STR(errtxt, "vindex bank: usage: vindex bank import CONTAINER -o OUT [--fused]\n");
    CHECK(run("bank %s %s", g, b) == 2);
    CHECK_STR(errtxt, "vindex bank: usage: vindex bank PATH | vindex bank import CONTAINER -o OUT\n");
    CHECK(run("bank import %s -o %s", g, b) == 1);
    snprintf(want, sizeof want, "vindex bank: bank import: '%s' already exists; lql does not overwrite it\n", b);
    CHECK_STR(errtxt, want);
    CHECK(run("bank import %s -o %s/again", b, tmp) == 1);
    snprintf(want, sizeof want, "vindex bank: bank import: '%s' is already a bank-shape container\n", b);
    CHECK_STR(errtxt, want);

    CHECK(t_rm_rf(tmp) == 0);
    return T_DONE();
}
