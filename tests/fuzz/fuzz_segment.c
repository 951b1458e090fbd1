/*
 * fuzz_segment.c — libFuzzer over one segment's bytes: framing (u64 header length,
 * 64-byte payload start) and the tensor-table header, through vx_segment_parse. Every
 * accepted table is then walked end to end so ASan sees any out-of-bounds view.
 */
#include "vindex.h"
#include "vx_int.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vx_segment_hdr h;
    vx_err err;
    if (vx_segment_parse("fuzz.bin", data, size, &h, &err) < 0)
        return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < h.n; i++) {
        const uint8_t *p = data + h.payload_off + h.t[i].offset;
        sink ^= p[0];
        sink ^= p[h.t[i].length - 1];
        uint64_t n;
        vx_dtype_nbytes(h.t[i].dtype, (uint64_t)h.t[i].shape[h.t[i].ndim - 1], 1, &n);
    }
    (void)sink;
    vx_segment_hdr_free(&h);
    return 0;
}
