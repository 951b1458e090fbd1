/*
 * test_container_cli.c — the vindex executable end to end on hand-built containers:
 * output values, valid --json, pinned error texts and the exit codes (0 ok, 1 failure,
 * 2 usage).
 */
#include "t.h"
#include "t_file.h"
#include "test_container_fx.h"

#include <sys/wait.h>

static char out[1 << 16], errtxt[4096], out_path[64], err_path[64];

/* Runs `vindex ARGS`, capturing stdout and stderr; returns the exit code. */
static int run(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s/vindex' %s >%s 2>%s", LQL_BINARY_DIR, args, out_path, err_path);
    int st = system(cmd);
    t_read_into(out_path, out, sizeof out);
    t_read_into(err_path, errtxt, sizeof errtxt);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int main(void)
{
    snprintf(out_path, sizeof out_path, "/tmp/lql_cli_out.%d", (int)getpid());
    snprintf(err_path, sizeof err_path, "/tmp/lql_cli_err.%d", (int)getpid());
    fx f;
    fx_init(&f);
    fx_write(&f);
    char args[512];

    snprintf(args, sizeof args, "inspect %s", f.dir);
    CHECK(run(args) == 0);
    CHECK_HAS(out, "format     VINDEX3 (index.json version 4), graph shape, authority canonical\n");
    CHECK_HAS(out, "decoder    target: 2 layers, hidden 8, vocab 16, context 32\n");
    CHECK_HAS(out, "  target.decoder_stack.f32    18 tensors    3.1 KiB  f32+bf16\n");
    CHECK_HAS(out, "total      21 tensors, 4.2 KiB payload in 3 segments (8.1 KiB on disk)\n");

    snprintf(args, sizeof args, "inspect %s --json", f.dir);
    CHECK(run(args) == 0);
    cJSON *doc = cJSON_Parse(out);
    CHECK(doc != NULL);
    CHECK(jnum(doc, "version") == 4 && jnum(doc, "tensors") == 21 && jnum(doc, "payload_bytes") == 4256);
    CHECK(jnum(cJSON_GetObjectItem(doc, "component"), "num_layers") == 2);
    cJSON_Delete(doc);

    snprintf(args, sizeof args, "precision %s --json", f.dir);
    CHECK(run(args) == 0);
    doc = cJSON_Parse(out);
    CHECK(doc != NULL);
    /* 680 f32 weights (2720 B) + 768 bf16 weights (1536 B) */
    CHECK_NEAR(jnum(cJSON_GetObjectItem(doc, "overall"), "bits_per_weight"), 8.0 * 4256 / 1448, 1e-9);
    CHECK(jnum(cJSON_GetObjectItem(doc, "overall"), "weights") == 1448);
    CHECK(jnum(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "dtypes"), 1), "bits_per_weight") == 16);
    cJSON_Delete(doc);

    snprintf(args, sizeof args, "representations %s --json", f.dir);
    CHECK(run(args) == 0);
    doc = cJSON_Parse(out);
    CHECK(cJSON_GetArraySize(doc) == 3);
    CHECK(jnum(cJSON_GetArrayItem(doc, 1), "tensors") == 18);
    cJSON_Delete(doc);

    snprintf(args, sizeof args, "describe %s target.output_head", f.dir);
    CHECK(run(args) == 0);
    CHECK_HAS(out, "lm_head     f32    [16, 8]                512 B  lm_head.weight\n");
    CHECK_HAS(out, "2 tensors, 544 B\n");
    snprintf(args, sizeof args, "describe %s target --json", f.dir);
    CHECK(run(args) == 0);
    doc = cJSON_Parse(out);
    CHECK(jnum(cJSON_GetObjectItem(doc, "component"), "hidden_size") == 8);
    cJSON_Delete(doc);
    snprintf(args, sizeof args, "describe %s target.mlp", f.dir);
    CHECK(run(args) == 1);
    CHECK_STR(errtxt, "vindex describe: no object or component 'target.mlp' (have: target "
                      "target.embedding target.decoder_stack target.output_head)\n");
    snprintf(args, sizeof args, "describe %s target.mlp --json", f.dir);
    CHECK(run(args) == 1);
    doc = cJSON_Parse(out);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(doc, "ok")));
    cJSON_Delete(doc);

    snprintf(args, sizeof args, "verify %s", f.dir);
    CHECK_MSG(run(args) == 0, "%s", errtxt);
    CHECK_HAS(out, "representation  target.output_head.f32             payload ok, source ok\n");
    CHECK_HAS(out, "verify: ok, 8.1 KiB hashed in ");

    /* corrupt one byte: exit 1 and the segment and tensor named */
    char path[PATH_MAX];
    fx_path(&f, "segments/target.embedding.bin", path, sizeof path);
    FILE *fp = fopen(path, "r+b");
    fseek(fp, -2, SEEK_END);
    fputc(0x11, fp);
    fclose(fp);
    snprintf(args, sizeof args, "verify %s", f.dir);
    CHECK(run(args) == 1);
    CHECK_HAS(out, "segment         segments/target.embedding.bin      encoded != recorded (tensor 'weight')\n");
    CHECK_STR(errtxt, "vindex verify: segment 'segments/target.embedding.bin': encoded != recorded "
                      "(first differing tensor 'weight')\n");
    snprintf(args, sizeof args, "verify --json %s", f.dir);
    CHECK(run(args) == 1);
    doc = cJSON_Parse(out);
    CHECK(doc && cJSON_IsFalse(cJSON_GetObjectItem(doc, "ok")));
    cJSON_Delete(doc);

    /* refused containers: exit 1 with the reader's text */
    fx_set_num(f.index, "version", 2);
    fx_path(&f, "index.json", path, sizeof path);
    fx_put_json(path, f.index);
    snprintf(args, sizeof args, "inspect %s", f.dir);
    CHECK(run(args) == 1);
    CHECK_STR(errtxt, "vindex inspect: index.json version 2 is VINDEX2; this lql reads VINDEX3 (versions 3-4)\n");
    CHECK_STR(out, "");

    /* usage errors: exit 2 */
    CHECK(run("") == 2);
    CHECK(run("frobnicate x") == 2);
    CHECK_HAS(errtxt, "vindex: unknown command 'frobnicate'\n");
    CHECK(run("inspect") == 2);
    CHECK_HAS(errtxt, "vindex inspect: missing arguments\nusage: vindex inspect PATH [--json]\n");
    CHECK(run("inspect a b") == 2);
    CHECK_HAS(errtxt, "vindex inspect: unexpected argument 'b'\n");
    CHECK(run("verify x --source") == 2);
    CHECK_HAS(errtxt, "vindex verify: option '--source' needs a value\n");
    CHECK(run("inspect x --bogus") == 2);
    CHECK_HAS(errtxt, "vindex inspect: unknown option '--bogus'\n");
    CHECK(run("encode x") == 2);
    CHECK_HAS(errtxt, "vindex encode: missing -o OUT\n");
    CHECK(run("encode x -o y --dtype q4_k") == 2);
    CHECK_HAS(errtxt, "vindex encode: --dtype must be f32, f16 or bf16 (got 'q4_k': a quantised "
                      "representation is added to an encoded container with 'vindex represent')\n");
    CHECK(run("help verify") == 0);
    CHECK_HAS(out, "usage: vindex verify PATH [--source DIR] [--json]\n");

    unlink(out_path);
    unlink(err_path);
    fx_free(&f);

    /* hashes fine, graph unbindable (it says 12 FFN features, the rows are 16): verify
     * fails, as every statement would refuse the container */
    fx_init(&f);
    cJSON *ffn = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(
        cJSON_GetObjectItem(f.graph, "components"), 0), "execution"), "ffn");
    fx_set_num(ffn, "intermediate", 12);
    fx_write(&f);
    snprintf(args, sizeof args, "verify %s", f.dir);
    CHECK(run(args) == 1);
    CHECK_STR(errtxt, "vindex verify: the system graph does not bind: layer 0: operand "
                      "'layers.0.ffn.gate_proj' of target.decoder_stack has shape [16, 8], "
                      "expected [12, 8]\n");
    snprintf(args, sizeof args, "verify --json %s", f.dir);
    CHECK(run(args) == 1);
    doc = cJSON_Parse(out);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(doc, "ok")));
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "graph"), "binds")));
    cJSON_Delete(doc);
    fx_free(&f);
    return T_DONE();
}
