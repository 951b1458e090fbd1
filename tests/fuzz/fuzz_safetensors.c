/*
 * fuzz_safetensors.c — libFuzzer over the safetensors header checker (st_check_image):
 * any byte string must either be refused with a non-empty message or yield a tensor count
 * no larger than what the header could describe; nothing may read outside the input.
 * Seed it with real checkpoints' first bytes (docs/lql/BANK.md records the runs).
 */
#include "st.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy, so a read one byte past the input is caught at its end. */
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    vx_err err;
    memset(&err, 0, sizeof err);
    int n = st_check_image(buf, size, "fuzz", &err);
    /* A refusal says why; a success never claims more tensors than header bytes. */
    if ((n < 0 && (err.msg[0] == '\0' || err.code == VX_OK)) || (n >= 0 && (uint64_t)n > size))
        abort();
    free(buf);
    return 0;
}
