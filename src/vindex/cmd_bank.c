/*
 * cmd_bank.c — bank-shape containers (docs/lql/BANK.md): `bank import SRC -o OUT [--fused]` derives
 * a bank container (LYRW v2 expert banks + moe_manifest.json beside the system graph)
 * from a graph-shape MoE container; `bank PATH` shows which shape a container has and,
 * for the bank shape, each layer's banks (programme, entries, storage file). The work is
 * the storage layer's (vx_bank_import, the reader); this file parses and prints.
 */
#include "cli.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int import_bank(const vindex_args *a)
{
    const char *out = vindex_flag(a, "-o");
    if (a->npos != 2 || !out || !*out) {
        fprintf(stderr, "vindex bank: usage: vindex bank import CONTAINER -o OUT [--fused]\n");
        return VINDEX_USAGE;
    }
    vx_err err = {0};
    vx_bank_info in;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (vx_bank_import(a->pos[1], out, vindex_flag(a, "--fused") ? VX_BANK_FUSED : 0, &in, &err) < 0)
        return vindex_fail_err(a, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (a->json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddBoolToObject(doc, "ok", 1);
        cJSON_AddStringToObject(doc, "container", out);
        cJSON_AddNumberToObject(doc, "layer_files", in.layers);
        cJSON_AddNumberToObject(doc, "routed_banks", in.banks[VX_SLOT_ROUTED]);
        cJSON_AddNumberToObject(doc, "shared_banks", in.banks[VX_SLOT_SHARED]);
        cJSON_AddNumberToObject(doc, "dense_banks", in.banks[VX_SLOT_DENSE]);
        cJSON_AddNumberToObject(doc, "regions", (double)in.regions);
        cJSON_AddNumberToObject(doc, "bank_bytes", (double)in.bank_bytes);
        cJSON_AddNumberToObject(doc, "graph_bytes", (double)in.graph_bytes);
        cJSON_AddNumberToObject(doc, "seconds", secs);
        return vindex_emit(doc);
    }
    char b1[32], b2[32];
    printf("bank container %s: %d layer file%s (%d routed, %d shared, %d dense bank%s), %llu regions\n", out,
           in.layers, in.layers == 1 ? "" : "s", in.banks[VX_SLOT_ROUTED], in.banks[VX_SLOT_SHARED],
           in.banks[VX_SLOT_DENSE],
           in.banks[0] + in.banks[1] + in.banks[2] == 1 ? "" : "s", (unsigned long long)in.regions);
    printf("  %s in LYRW v2 banks, %s left in the decoder's tensor-table segments, %.2f s\n",
           vindex_bytes(in.bank_bytes, b1, sizeof b1), vindex_bytes(in.graph_bytes, b2, sizeof b2), secs);
    return VINDEX_OK;
}

static int show_bank(const vindex_args *a)
{
    if (a->npos != 1) {
        fprintf(stderr, "vindex bank: usage: vindex bank PATH | vindex bank import CONTAINER -o OUT\n");
        return VINDEX_USAGE;
    }
    int rc;
    vx_container *c = vindex_open(a, &rc);
    if (!c)
        return rc;
    const vx_bank *b = vx_container_bank(c);
    const vx_manifest *m = b ? vx_bank_manifest(b) : NULL;
    const char *shape = b ? "bank" : "graph";
    cJSON *doc = a->json ? cJSON_CreateObject() : NULL, *rows = NULL;
    if (doc) {
        cJSON_AddStringToObject(doc, "shape", shape);
        rows = cJSON_AddArrayToObject(doc, "banks");
    } else {
        printf("shape %s%s\n", shape, b ? " (system graph + moe_manifest.json, LYRW v2 banks)" : "");
        if (m)
            printf("%-6s  %-12s  %-22s  %8s  %-12s  %s\n", "layer", "bank", "programme", "entries", "dims",
                   "storage");
    }
    for (size_t i = 0; m && i < m->n; i++) {
        for (int s = 0; s < VX_BANK_SLOTS; s++) {
            const vx_mbank *k = &m->l[i].bank[s];
            if (!k->present)
                continue;
            char dims[48];
            snprintf(dims, sizeof dims, "%u/%u/%u", k->input, k->intermediate, k->output);
            if (rows) {
                cJSON *r = cJSON_CreateObject();
                cJSON_AddNumberToObject(r, "layer", m->l[i].layer);
                cJSON_AddStringToObject(r, "bank", vx_bank_slot_names[s]);
                cJSON_AddNumberToObject(r, "bank_id", k->bank_id);
                cJSON_AddStringToObject(r, "programme", k->programme);
                cJSON_AddNumberToObject(r, "entries", k->experts);
                cJSON_AddStringToObject(r, "dims", dims);
                cJSON_AddStringToObject(r, "storage", k->storage);
                cJSON_AddItemToArray(rows, r);
            } else {
                printf("%-6u  %-12s  %-22s  %8u  %-12s  %s\n", m->l[i].layer, vx_bank_slot_names[s], k->programme,
                       k->experts, dims, k->storage);
            }
        }
    }
    vx_close(c);
    return doc ? vindex_emit(doc) : VINDEX_OK;
}

VINDEX_HANDLER(bank)
{
    return strcmp(a->pos[0], "import") == 0 ? import_bank(a) : show_bank(a);
}
