/*
 * fuzz_patch.c — libFuzzer over the .vlp patch reader (vx_patch_parse), the file APPLY
 * PATCH takes from anyone. The first input byte picks the model width the vectors are
 * checked against (none, 4 or 256 floats); the rest is the file. A refusal must say why
 * and leave nothing allocated; an accepted patch is serialised (vx_patch_to_json), read
 * back and serialised again: the two texts must be equal, so SAVE PATCH loses nothing an
 * APPLY PATCH accepted.
 */
#include "journal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const int widths[] = {0, 4, 256};
    int hidden = widths[data[0] % 3];
    vx_patch p;
    vx_err err = {0};
    if (vx_patch_parse((const char *)data + 1, size - 1, "p.vlp", hidden, &p, &err) != 0) {
        if (!err.msg[0] || strncmp(err.msg, "p.vlp", 5) != 0 || p.ops || p.tags || p.base_model)
            abort();   /* a refusal names the file, says why and keeps nothing */
        return 0;
    }
    char *a = vx_patch_to_json(&p, &err);
    if (!a)
        abort();
    vx_patch q;
    if (vx_patch_parse(a, strlen(a), "again", hidden, &q, &err) != 0)
        abort();       /* what we write we read */
    char *b = vx_patch_to_json(&q, &err);
    if (!b || strcmp(a, b) != 0 || q.nops != p.nops)
        abort();
    free(a);
    free(b);
    vx_patch_free(&q);
    vx_patch_free(&p);
    return 0;
}
