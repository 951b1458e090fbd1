/*
 * tokdump.c — one line per string of a JSON array, for the differential check against
 * @huggingface/tokenizers (tools/tokdiff/: run.sh compares this with ref.mjs line by line).
 *
 *   tokdump DIR STRINGS.json
 *
 * DIR holds tokenizer.json (and tokenizer_config.json when there is one). Each output line
 * is `ids|decoded|decoded_skip_special|ids_no_special|`: ids comma-separated, decodes as
 * lowercase hex of their UTF-8 bytes (a decode can hold U+0000), an error as `ERR message`.
 */
#include "engine.h"
#include "files.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_ids(const eng_tokenizer *t, const char *s, int add_special, int32_t **ids,
                    size_t *n)
{
    vx_err err = {0};
    if (eng_tok_encode(t, s, strlen(s), add_special, ids, n, &err) != 0) {
        printf("ERR %s|", err.msg);
        *ids = NULL;
        *n = 0;
        return;
    }
    for (size_t i = 0; i < *n; i++)
        printf("%s%d", i ? "," : "", (int)(*ids)[i]);
    putchar('|');
}

static void put_decode(const eng_tokenizer *t, const int32_t *ids, size_t n, int skip)
{
    vx_err err = {0};
    char *s = NULL;
    size_t len = 0;
    if (eng_tok_decode_len(t, ids, n, skip, &s, &len, &err) != 0) {
        printf("ERR %s|", err.msg);
        return;
    }
    for (size_t i = 0; i < len; i++)
        printf("%02x", (unsigned char)s[i]);
    putchar('|');
    free(s);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: tokdump DIR STRINGS.json\n");
        return 2;
    }
    char tj[4096], tc[4096];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", argv[1]);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", argv[1]);
    eng_tokenizer *t = NULL;
    vx_err err = {0};
    if (eng_tok_load(tj, tc, &t, &err) != 0) {
        fprintf(stderr, "tokdump: %s\n", err.msg);
        return 1;
    }
    char *buf = lql_read_file(argv[2], 0, NULL);
    cJSON *arr = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    if (!cJSON_IsArray(arr)) {
        fprintf(stderr, "tokdump: %s: not a readable JSON array of strings\n", argv[2]);
        cJSON_Delete(arr);
        eng_tok_free(t);
        return 1;
    }
    const cJSON *s;
    cJSON_ArrayForEach(s, arr) {
        const char *text = cJSON_IsString(s) ? s->valuestring : "";
        int32_t *ids = NULL, *plain = NULL;
        size_t n = 0, np = 0;
        put_ids(t, text, 1, &ids, &n);
        put_decode(t, ids, n, 0);
        put_decode(t, ids, n, 1);
        put_ids(t, text, 0, &plain, &np);
        putchar('\n');
        free(ids);
        free(plain);
    }
    cJSON_Delete(arr);
    eng_tok_free(t);
    return 0;
}
