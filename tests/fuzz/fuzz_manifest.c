/*
 * fuzz_manifest.c — libFuzzer over moe_manifest.json validation (vx_manifest_parse) for a
 * 4-layer graph: any byte string must either be refused with a message or give layers in
 * range, listed once, each with at least one bank carrying storage and programme.
 */
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    vx_err err;
    memset(&err, 0, sizeof err);
    cJSON *json = NULL;
    vx_manifest m;
    if (vx_json_parse("fuzz", text, size, &json, &err) == 0) {
        if (vx_manifest_parse(json, 4, &m, &err) == 0) {
            for (size_t i = 0; i < m.n; i++) {
                int banks = 0;
                if (m.l[i].layer >= 4)
                    abort();
                for (size_t j = 0; j < i; j++)
                    if (m.l[j].layer == m.l[i].layer)
                        abort();
                for (int s = 0; s < VX_BANK_SLOTS; s++)
                    if (m.l[i].bank[s].present) {
                        banks++;
                        if (!m.l[i].bank[s].storage || !m.l[i].bank[s].programme)
                            abort();
                    }
                if (!banks)
                    abort();
            }
            vx_manifest_free(&m);
        } else if (!err.msg[0]) {
            abort();
        }
    }
    free(text);
    return 0;
}
