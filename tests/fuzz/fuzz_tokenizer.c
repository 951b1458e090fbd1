/*
 * fuzz_tokenizer.c — libFuzzer over the tokenizer a container carries (tokenizer.json,
 * optionally tokenizer_config.json): a hostile container's tokenizer is read at USE. The
 * input is split at "\n%%\n" into tokenizer.json, a text and tokenizer_config.json. A
 * refusal must say why. A loaded tokenizer encodes the text with and without special
 * tokens (every id inside the vocabulary, every id's piece readable), decodes the ids
 * back with and without specials (the length-carrying decode agreeing with the C-string
 * one up to its first NUL), and refuses an id past the vocabulary.
 */
#include "engine.h"
#include "fuzz_files.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const eng_tokenizer *t, const char *text, size_t len, int special)
{
    int32_t *ids = NULL;
    size_t n = 0;
    vx_err err = {0};
    if (eng_tok_encode(t, text, len, special, &ids, &n, &err) != 0) {
        if (!err.msg[0])
            abort();
        return;
    }
    size_t vocab = eng_tok_vocab_size(t);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= vocab || !eng_tok_piece(t, ids[i]))
            abort();
    for (int skip = 0; skip < 2; skip++) {
        char *a = NULL, *b = NULL;
        size_t alen = 0;
        int ra = eng_tok_decode_len(t, ids, n, skip, &a, &alen, &err);
        int rb = eng_tok_decode(t, ids, n, skip, &b, &err);
        if (ra != rb || (ra == 0 && (strlen(a) != strnlen(a, alen) || strcmp(a, b) != 0)))
            abort();
        if (ra == 0 && a[alen] != 0)
            abort();   /* terminated after its length */
        free(a);
        free(b);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fz_scratch("fuzz_tok");
    const uint8_t *p = data;
    size_t nj, nt, nc;
    const uint8_t *json = fz_part(&p, data + size, &nj), *text = fz_part(&p, data + size, &nt),
                  *cfg = fz_part(&p, data + size, &nc);
    fz_put(dir, "tokenizer.json", json, nj);
    fz_put(dir, "tokenizer_config.json", cfg, nc);
    char tj[PATH_MAX], tc[PATH_MAX];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
    eng_tokenizer *t = NULL;
    vx_err err = {0};
    if (eng_tok_load(tj, tc, &t, &err) != 0) {
        if (!err.msg[0] || t)
            abort();
        return 0;
    }
    static const char fixed[] = "The capital of France is Paris.\n  caf\xc3\xa9 <s> 123";
    if (text)
        roundtrip(t, (const char *)text, nt, 1);
    else
        roundtrip(t, fixed, sizeof fixed - 1, 1);
    roundtrip(t, fixed, sizeof fixed - 1, 0);
    int32_t past = (int32_t)eng_tok_vocab_size(t);
    char *o = NULL;
    if (eng_tok_decode(t, &past, 1, 0, &o, &err) == 0)
        abort();       /* an id past the vocabulary is refused */
    free(o);
    eng_tok_free(t);
    return 0;
}
