/*
 * fuzz_lyrw.c — libFuzzer over the LYRW v2 reader: any byte string must either be refused
 * with a message or parse into tables whose every region lies inside the input; the
 * accessors (region bytes, tensor views), the unknown-tag report and the capability check
 * then run over the result.
 */
#include "lyrw.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Copy so reads past the input are caught exactly at its end. */
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    vx_lyrw *l;
    vx_err err;
    if (vx_lyrw_parse("fuzz", buf, size, &l, &err) == 0) {
        unsigned sum = 0;
        /* Every entry owns at least one 16-byte table record, so these loops are bounded
         * by the input size. */
        for (unsigned s = 0; s < l->num_segments; s++) {
            const vx_lyrw_segment *g = &l->segments[s];
            const vx_lyrw_bank *k = &l->banks[g->bank];
            for (uint32_t e = 0; e < g->entry_count; e++)
                for (uint16_t c = 0; c < k->schema_count; c++) {
                    const vx_lyrw_region *r = vx_lyrw_region_of(l, g->bank_id, g->first_entry + e, c);
                    if (!r)
                        abort();
                    const unsigned char *p = vx_lyrw_bytes(l, r);
                    if (r->length)
                        sum += p[0] + p[r->length - 1];
                    vx_tensor t;
                    if (vx_lyrw_tensor(l, g->bank_id, g->first_entry + e, c, &t, &err) == 0)
                        sum += ((const unsigned char *)t.data)[t.nbytes - 1];
                }
        }
        char report[256];
        vx_lyrw_unknown_report(l, report, sizeof report);
        static const uint16_t need[] = {VX_ROLE_GATE, VX_ROLE_UP, VX_ROLE_DOWN};
        vx_lyrw_check(l, need, 3, &err);
        vx_lyrw_free(l);
        if (sum == 0xFFFFFFFFu)
            abort();
    } else if (err.msg[0] == 0) {
        abort();              /* a refusal always says why */
    }
    free(buf);
    return 0;
}
