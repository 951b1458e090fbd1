/*
 * cmd_tokenize.c — `vindex tokenize PATH TEXT [--no-special] [--json]`: the token ids and
 * pieces Hugging Face would give for TEXT, using the tokenizer.json of a container or of
 * any directory holding one (a checkpoint). Special tokens (BOS etc.) are added as
 * add_special_tokens=True does unless --no-special. Human output is one row per token
 * with control characters escaped; --json prints {"ids": [...], "tokens": [...]}.
 */
#include "cli.h"
#include "engine.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* A piece with control characters and backslashes escaped, for a terminal. */
static void print_piece(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '\\')
            fputs("\\\\", stdout);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02X", c);
        else
            putchar(c);
    }
}

VINDEX_HANDLER(tokenize)
{
    eng_tokenizer *t = NULL;
    vx_err err = {0};
    if (eng_tok_load_dir(a->pos[0], &t, &err) < 0)
        return vindex_fail_err(a, &err);
    const char *text = a->pos[1];
    int32_t *ids = NULL;
    size_t n = 0;
    if (eng_tok_encode(t, text, strlen(text), !vindex_flag(a, "--no-special"), &ids, &n,
                       &err) < 0) {
        eng_tok_free(t);
        return vindex_fail_err(a, &err);
    }
    int rc = VINDEX_OK;
    if (a->json) {
        cJSON *doc = cJSON_CreateObject(), *jids = cJSON_AddArrayToObject(doc, "ids"),
              *jtoks = cJSON_AddArrayToObject(doc, "tokens");
        for (size_t i = 0; i < n; i++) {
            cJSON_AddItemToArray(jids, cJSON_CreateNumber(ids[i]));
            cJSON_AddItemToArray(jtoks, cJSON_CreateString(eng_tok_piece(t, ids[i])));
        }
        rc = vindex_emit(doc);
    } else {
        printf("%-5s %-8s %s\n", "pos", "id", "piece");
        for (size_t i = 0; i < n; i++) {
            printf("%-5zu %-8d ", i, (int)ids[i]);
            print_piece(eng_tok_piece(t, ids[i]));
            puts(eng_tok_is_special(t, ids[i]) ? "  (special)" : "");
        }
        printf("%zu token%s\n", n, n == 1 ? "" : "s");
    }
    free(ids);
    eng_tok_free(t);
    return rc;
}
