/*
 * dmet.c — reading browse/down_meta.bin (DMET) and the layer-band rule.
 *
 * A DMET image is four u32 LE (magic, version 1, layers, top_k), then per layer a u32
 * feature count and that many fixed records (u32 top id, f32 c_score, top_k × (u32 id,
 * f32 logit)). Every size is checked in 64-bit arithmetic against the image length before
 * a record is touched, so a hostile file yields an error, never a wild read.
 */
#include "brw_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct brw_dmet {
    const uint8_t *base;      /* image start */
    size_t n;
    void *map;                /* mmap'd image (load) or NULL */
    uint8_t *owned;           /* copied image (parse) or NULL */
    int layers, top_k;
    uint64_t *off;            /* [layers] byte offset of each layer's first record */
    int64_t *count;           /* [layers] */
};

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float rdf(const uint8_t *p)
{
    uint32_t u = rd32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Validate the image held by d (base, n) and index its layers. */
static int index_image(brw_dmet *d, vx_err *err)
{
    if (d->n < 16)
        return vx_errf(err, VX_EFORMAT, "down_meta: file is %zu bytes, shorter than the "
                       "16-byte header", d->n);
    uint32_t magic = rd32(d->base), ver = rd32(d->base + 4);
    uint32_t layers = rd32(d->base + 8), k = rd32(d->base + 12);
    if (magic != BRW_DMET_MAGIC && magic != BRW_DMET_MAGIC_LIT)
        return vx_errf(err, VX_EFORMAT, "down_meta: bad magic 0x%08x (want 0x%08x)", magic,
                       BRW_DMET_MAGIC);
    if (ver != 1)
        return vx_errf(err, VX_EVERSION, "down_meta: unsupported version %u (want 1)", ver);
    if (k > BRW_DMET_K_MAX)
        return vx_errf(err, VX_EFORMAT, "down_meta: top_k %u exceeds %d", k, BRW_DMET_K_MAX);
    /* each layer needs at least its 4-byte count */
    if ((uint64_t)layers * 4 > d->n - 16)
        return vx_errf(err, VX_EFORMAT, "down_meta: %u layers cannot fit in %zu bytes",
                       layers, d->n);
    d->layers = (int)layers;
    d->top_k = (int)k;
    d->off = calloc(layers ? layers : 1, sizeof *d->off);
    d->count = calloc(layers ? layers : 1, sizeof *d->count);
    if (!d->off || !d->count)
        return vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
    uint64_t rec = 8 + 8 * (uint64_t)k, pos = 16;
    for (uint32_t l = 0; l < layers; l++) {
        if (pos + 4 > d->n)
            return vx_errf(err, VX_EFORMAT, "down_meta: layer %u count at byte %llu is past "
                           "the end (%zu bytes)", l, (unsigned long long)pos, d->n);
        uint64_t cnt = rd32(d->base + pos);
        pos += 4;
        if (cnt * rec > d->n - pos)
            return vx_errf(err, VX_EFORMAT, "down_meta: layer %u declares %llu records of %llu "
                           "bytes but only %llu bytes remain", l, (unsigned long long)cnt,
                           (unsigned long long)rec, (unsigned long long)(d->n - pos));
        d->off[l] = pos;
        d->count[l] = (int64_t)cnt;
        pos += cnt * rec;
    }
    if (pos != d->n)
        return vx_errf(err, VX_EFORMAT, "down_meta: %llu trailing bytes after layer %u",
                       (unsigned long long)(d->n - pos), layers ? layers - 1 : 0);
    return 0;
}

int brw_dmet_parse(const void *buf, size_t n, brw_dmet **out, vx_err *err)
{
    *out = NULL;
    brw_dmet *d = calloc(1, sizeof *d);
    if (!d)
        return vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
    d->owned = malloc(n ? n : 1);
    if (!d->owned) {
        free(d);
        return vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
    }
    if (n)
        memcpy(d->owned, buf, n);
    d->base = d->owned;
    d->n = n;
    if (index_image(d, err) != 0) {
        brw_dmet_free(d);
        return -1;
    }
    *out = d;
    return 0;
}

int brw_dmet_load(const char *path, brw_dmet **out, vx_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return vx_errf(err, VX_EIO, "down_meta: cannot open \"%s\"", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return vx_errf(err, VX_EIO, "down_meta: \"%s\" is not a regular file", path);
    }
    brw_dmet *d = calloc(1, sizeof *d);
    if (!d) {
        close(fd);
        return vx_errf(err, VX_ENOMEM, "down_meta: out of memory");
    }
    d->n = (size_t)st.st_size;
    if (d->n > 0) {
        d->map = mmap(NULL, d->n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (d->map == MAP_FAILED) {
            d->map = NULL;
            close(fd);
            free(d);
            return vx_errf(err, VX_EIO, "down_meta: cannot map \"%s\"", path);
        }
        d->base = d->map;
    } else {
        d->base = (const uint8_t *)"";
    }
    close(fd);
    if (index_image(d, err) != 0) {
        char why[VX_ERR_MAX];
        snprintf(why, sizeof why, "%s", err ? err->msg : "");
        brw_dmet_free(d);
        return vx_errf(err, err ? err->code : VX_EFORMAT, "%s (in \"%s\")", why, path);
    }
    *out = d;
    return 0;
}

void brw_dmet_free(brw_dmet *d)
{
    if (!d)
        return;
    if (d->map)
        munmap(d->map, d->n);
    free(d->owned);
    free(d->off);
    free(d->count);
    free(d);
}

int brw_dmet_layers(const brw_dmet *d) { return d->layers; }
int brw_dmet_top_k(const brw_dmet *d) { return d->top_k; }

int64_t brw_dmet_count(const brw_dmet *d, int layer)
{
    return layer >= 0 && layer < d->layers ? d->count[layer] : -1;
}

void brw_dmet_rec(const uint8_t *p, int top_k, brw_meta *out)
{
    memset(out, 0, sizeof *out);
    uint64_t rec = 8 + 8 * (uint64_t)top_k;
    int zero = 1;
    for (uint64_t i = 0; i < rec && zero; i++)
        zero = p[i] == 0;
    if (zero)
        return;
    out->present = 1;
    out->top_id = (int32_t)rd32(p);
    out->c_score = rdf(p + 4);
    /* a repeated id is read once: COMPILE writes a feature whose top token an edit changed
     * as k copies of that token, having no alternatives to give */
    for (int j = 0; j < top_k; j++) {
        int32_t id = (int32_t)rd32(p + 8 + 8 * j);
        int seen = 0;
        for (int i = 0; i < out->k && !seen; i++)
            seen = out->ids[i] == id;
        if (seen)
            continue;
        out->ids[out->k] = id;
        out->logits[out->k++] = rdf(p + 12 + 8 * j);
    }
}

int brw_dmet_get(const brw_dmet *d, int layer, int64_t feature, brw_meta *out)
{
    memset(out, 0, sizeof *out);
    if (layer < 0 || layer >= d->layers || feature < 0 || feature >= d->count[layer])
        return -1;
    uint64_t rec = 8 + 8 * (uint64_t)d->top_k;
    brw_dmet_rec(d->base + d->off[layer] + (uint64_t)feature * rec, d->top_k, out);
    return 0;
}

int brw_dmet_check_ids(const brw_dmet *d, int32_t vocab, vx_err *err)
{
    brw_meta md;
    for (int l = 0; l < d->layers; l++)
        for (int64_t f = 0; f < d->count[l]; f++) {
            brw_dmet_get(d, l, f, &md);
            if (!md.present)
                continue;
            /* ids are stored u32: compared as such, so a huge one is not read as negative */
            uint32_t id = (uint32_t)md.top_id;
            for (int j = 0; j < md.k && id < (uint32_t)vocab; j++)
                id = (uint32_t)md.ids[j];
            if (id >= (uint32_t)vocab)
                return vx_errf(err, VX_EFORMAT, "down_meta: layer %d feature %lld names token "
                               "id %u, outside the vocabulary (%d tokens)", l, (long long)f, id,
                               vocab);
        }
    return 0;
}

/* ---------------------------------------------------------------- bands */

const char *const brw_band_rule =
    "syntax = first max(1, floor(L/4)) layers, output = last max(1, floor(L/5)) layers, "
    "knowledge = the layers between (L >= 3 makes all three non-empty)";

void brw_bands_for_depth(int layers, int lo, int hi, int band[3][2])
{
    for (int b = 0; b < 3; b++)
        band[b][0] = band[b][1] = -1;
    if (layers <= 0)
        return;
    if (lo >= 0 && hi >= lo && lo < layers) {
        if (hi >= layers)
            hi = layers - 1;
        if (lo > 0) {
            band[BRW_SYNTAX][0] = 0;
            band[BRW_SYNTAX][1] = lo - 1;
        }
        band[BRW_KNOWLEDGE][0] = lo;
        band[BRW_KNOWLEDGE][1] = hi;
        if (hi < layers - 1) {
            band[BRW_OUTPUT][0] = hi + 1;
            band[BRW_OUTPUT][1] = layers - 1;
        }
        return;
    }
    int s = layers / 4 > 1 ? layers / 4 : 1;
    int o = layers / 5 > 1 ? layers / 5 : 1;
    band[BRW_SYNTAX][0] = 0;
    band[BRW_SYNTAX][1] = s - 1;
    if (layers == 1)
        return;
    band[BRW_OUTPUT][0] = layers - o;
    band[BRW_OUTPUT][1] = layers - 1;
    if (layers - o > s) {
        band[BRW_KNOWLEDGE][0] = s;
        band[BRW_KNOWLEDGE][1] = layers - o - 1;
    }
}

const char *brw_band_name(int band)
{
    static const char *const names[] = {"syntax", "knowledge", "output"};
    return band >= 0 && band < 3 ? names[band] : "none";
}
