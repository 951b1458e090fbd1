/*
 * fuzz_encode.c — libFuzzer over the encoder's input, a Hugging Face checkpoint a user
 * points EXTRACT at. The input is split at "\n%%\n" into config.json and model.safetensors
 * (a tiny model of some family, mutated), written into a scratch checkpoint directory and
 * encoded as EXTRACT does (vx_encode with browse's down-meta hook). A refusal must say why
 * and leave no output behind; an encoded container must verify against the checkpoint it
 * came from (vindex verify), open, pass its integrity check, bind to the engine (what
 * encode admits, the executor runs) and run a two-token forward (which may refuse
 * non-finite values, saying where).
 */
#include "browse.h"
#include "engine.h"
#include "fuzz_files.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char ckpt[PATH_MAX], out[PATH_MAX];

static void run(vx_container *c)
{
    eng_model *m = NULL;
    eng_session *s = NULL;
    vx_err err = {0};
    if (eng_model_bind(c, &m, &err) != 0) {
        fprintf(stderr, "encoded, but the engine refuses it: %s\n", err.msg);
        abort();
    }
    int vocab = eng_model_vocab(m);
    float *logits = malloc((size_t)vocab * sizeof *logits);
    int32_t ids[2] = {0, vocab - 1};
    if (!logits || eng_session_new(m, 8, &s, &err) != 0)
        abort();
    /* mutated weights may overflow: the forward may refuse, saying where */
    if (eng_forward(s, ids, 2, logits, NULL, &err) != 0 && !err.msg[0])
        abort();
    eng_session_free(s);
    free(logits);
    eng_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ckpt[0]) {
        const char *dir = fz_scratch("fuzz_encode");
        snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
        snprintf(out, sizeof out, "%s/out.vindex3", dir);
        if (mkdir(ckpt, 0755) != 0)
            abort();
    }
    const uint8_t *p = data;
    size_t nc, nw;
    const uint8_t *cfg = fz_part(&p, data + size, &nc), *st = fz_part(&p, data + size, &nw);
    fz_put(ckpt, "config.json", cfg, nc);
    fz_put(ckpt, "model.safetensors", st, nw);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.model_name = "fuzz";
    o.finish = brw_encode_finish;
    o.finish_ctx = &o;
    vx_err err = {0};
    struct stat sb;
    if (vx_encode(ckpt, out, &o, &err) != 0) {
        if (!err.msg[0] || stat(out, &sb) == 0)
            abort();   /* a refusal says why and leaves nothing */
        return 0;
    }
    vx_container *c = NULL;
    cJSON *report = NULL;
    if (vx_verify(out, ckpt, &report, &err) != 0 || vx_open(out, &c, &err) != 0 ||
        vx_object_check(c, NULL, &err) != 0) {
        fprintf(stderr, "encoded, but: %s\n", err.msg);
        abort();
    }
    cJSON_Delete(report);
    run(c);
    vx_close(c);
    fz_rm_tree(out);
    return 0;
}
