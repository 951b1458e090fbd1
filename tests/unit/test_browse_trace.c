/*
 * test_browse_trace.c — the TRACE SAVE file reader (brw_trace_parse) on synthetic images
 * for a 2-layer, 4-wide, 32-token model: a valid image round-trips every id and state;
 * every refusal is pinned (header, version, shape, size, FOR id and prompt ids outside the
 * vocabulary, which a FROM file could otherwise pass to the lens and the decoder; states
 * that are not finite or do not add up); and
 * FOR's token on a SentencePiece vocabulary (a generated llama with Llama 2's tokenizer).
 */
#include "brw_int.h"
#include "t.h"
#include "test_journal_fx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NT = 3, NL = 2, H = 4, V = 32 };
#define NS (NT * (NL + 1) * 3 * H)
#define SIZE (32 + 4 * NT + 4 * NS)

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void image(uint8_t *b)
{
    memcpy(b, "LQLTRACE", 8);
    put32(b + 8, 1);
    put32(b + 12, NT);
    put32(b + 16, NL);
    put32(b + 20, H);
    put32(b + 24, 7);
    put32(b + 28, 0);
    for (int i = 0; i < NT; i++)
        put32(b + 32 + 4 * i, (uint32_t)(i + 10));
    /* as a forward pass records them: each residual the row before plus its two deltas */
    float s[NT][NL + 1][3][H];
    for (int t = 0; t < NT; t++)
        for (int r = 0; r <= NL; r++)
            for (int i = 0; i < H; i++) {
                s[t][r][1][i] = r ? 0.5f * (float)(r + i) : 0.0f;
                s[t][r][2][i] = r ? -0.25f * (float)(i + 1) : 0.0f;
                s[t][r][0][i] = r ? s[t][r - 1][0][i] + s[t][r][1][i] + s[t][r][2][i]
                                  : (float)t + 0.25f * (float)i;
            }
    memcpy(b + 32 + 4 * NT, s, sizeof s);
}

/* Set state (pos, row, slot k, element i) of an image. */
static void state(uint8_t *b, int pos, int row, int k, int i, float v)
{
    memcpy(b + 32 + 4 * NT + 4 * (((pos * (NL + 1) + row) * 3 + k) * H + i), &v, 4);
}

static void refused(const uint8_t *b, size_t n, const char *want)
{
    brw_trace t;
    vx_err err = {0};
    CHECK(brw_trace_parse(b, n, "t.bin", NL, H, V, &t, &err) == -1);
    CHECK_STR(err.msg, want);
    CHECK(!t.ids && !t.states);
}

/* FOR "Paris" with Llama 2's tokenizer, whose dummy prefix spells "Paris" as "▁Paris" but
 * " Paris" as "▁" "▁Paris": the id the model must produce to say " Paris" is "▁Paris",
 * written either way, not the lone "▁" (a 1-layer llama of 32000 tokens from mkfixture). */
static void for_sentencepiece(void)
{
    const char *dir = LQL_BINARY_DIR "/trace-spm";
    char cmd[4096], hf[1024], vx[1024];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(vx, sizeof vx, "%s/c.vindex3", dir);
    vx_err err = {0};
    vx_container *c = NULL;
    eng_model *em = NULL;
    fx_rm_rf(dir);
    mkdir(dir, 0755);
    CHECK(fx_mkfixture_bind("llama --vocab 32000 --hidden 16 --layers 1 --heads 2 --kv-heads 1 "
                            "--inter 32", hf, vx, &c, &em) == 0);
    if (em) {
        int32_t want = eng_tok_lookup(eng_model_tokenizer(em), "\xe2\x96\x81Paris");
        CHECK(want >= 0 && want != eng_tok_lookup(eng_model_tokenizer(em), "\xe2\x96\x81"));
        static const char *const spell[] = {"Paris", " Paris"};
        for (int i = 0; i < 2; i++) {
            brw_trace t;
            brw_trace_opts to = {.for_token = spell[i], .layer_lo = -1, .layer_hi = -1};
            CHECK_MSG(brw_trace_run(em, "The capital of France is", &to, &t, &err) == 0, "%s",
                      err.msg);
            CHECK_MSG(t.target == want, "FOR \"%s\": id %d, want %d", spell[i], t.target, want);
            brw_trace_free(&t);
        }
    }
    eng_model_free(em);
    vx_close(c);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    for_sentencepiece();
    static uint8_t b[SIZE + 4];
    image(b);
    brw_trace t;
    vx_err err = {0};
    CHECK(brw_trace_parse(b, SIZE, "t.bin", NL, H, V, &t, &err) == 0);
    CHECK(t.n_tokens == NT && t.n_layers == NL && t.hidden == H && t.target == 7 &&
          t.first_pos == 0);
    CHECK(t.ids && t.ids[0] == 10 && t.ids[2] == 12);
    CHECK(t.states && t.states[0] == 0.0f && t.states[NS - 1] == -1.0f);
    brw_trace_free(&t);

    /* states a forward pass cannot record: each would print as a plausible norm or push */
    state(b, 1, 2, 1, 3, NAN);
    refused(b, SIZE, "trace \"t.bin\": the attention delta of layer 1 at position 1 is not "
                     "finite (element 3): the file is corrupted");
    image(b);
    state(b, 2, 0, 2, 0, INFINITY);
    refused(b, SIZE, "trace \"t.bin\": the FFN delta of the embedding row at position 2 is not "
                     "finite (element 0): the file is corrupted");
    image(b);
    state(b, 0, 1, 2, 1, 30.0f);
    refused(b, SIZE, "trace \"t.bin\": the residual after layer 0 at position 0 is not the row "
                     "before plus its attention and FFN deltas (element 1: 0.75, want 31.25): "
                     "the file is corrupted");
    image(b);

    refused(b, 31, "\"t.bin\" is not an lql trace file (bad header)");
    b[0] = 'X';
    refused(b, SIZE, "\"t.bin\" is not an lql trace file (bad header)");
    image(b);
    put32(b + 8, 2);
    refused(b, SIZE, "trace \"t.bin\": unsupported version 2");
    image(b);
    put32(b + 16, 3);
    refused(b, SIZE, "trace \"t.bin\" (3 tokens, 3 layers, hidden 4) does not match the bound "
                     "model (2 layers, hidden 4)");
    image(b);
    put32(b + 12, 0);   /* the shapes match: the count is what is wrong, and said */
    refused(b, SIZE, "trace \"t.bin\" records 0 tokens (a trace holds 1 to 1048576)");
    image(b);
    put32(b + 12, 0xFFFFFFFFu);
    refused(b, SIZE, "trace \"t.bin\" records 4294967295 tokens (a trace holds 1 to 1048576)");
    image(b);
    put32(b + 28, 7);
    refused(b, SIZE, "trace \"t.bin\": header bytes 28-31 are reserved (0), not 7");
    image(b);
    refused(b, SIZE + 4, "trace \"t.bin\" is 480 bytes, want 476");
    refused(b, SIZE - 1, "trace \"t.bin\" is 475 bytes, want 476");
    put32(b + 24, 32);
    refused(b, SIZE, "trace \"t.bin\": FOR token id 32 is outside the vocabulary (0-31)");
    put32(b + 24, (uint32_t)-2);
    refused(b, SIZE, "trace \"t.bin\": FOR token id -2 is outside the vocabulary (0-31)");
    put32(b + 24, (uint32_t)-1);
    put32(b + 36, 40);
    refused(b, SIZE, "trace \"t.bin\": token 1 has id 40, outside the vocabulary (0-31)");
    put32(b + 36, (uint32_t)-5);
    refused(b, SIZE, "trace \"t.bin\": token 1 has id -5, outside the vocabulary (0-31)");
    put32(b + 36, 31);
    CHECK(brw_trace_parse(b, SIZE, "t.bin", NL, H, V, &t, &err) == 0 && t.target == -1 &&
          t.ids[1] == 31);
    brw_trace_free(&t);
    return T_DONE();
}
