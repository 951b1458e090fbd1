/*
 * vx_int.h — declarations shared inside the storage layer (reader, verifier, encoder)
 * and with its tests and fuzzers; not part of the public interface in vindex.h.
 * Additions welcome; keep edits additive.
 */
#ifndef LQL_VX_INT_H
#define LQL_VX_INT_H

#include "vindex.h"

#include <stddef.h>
#include <stdint.h>

/* ---- incremental sha256 (OpenSSL EVP underneath) ---- */
typedef struct vx_sha256_ctx {
    void *md;                /* EVP_MD_CTX */
} vx_sha256_ctx;

int vx_sha256_init(vx_sha256_ctx *ctx, vx_err *err);
void vx_sha256_update(vx_sha256_ctx *ctx, const void *data, size_t n);
/* Writes 64 hex chars + NUL and releases the context. */
void vx_sha256_final(vx_sha256_ctx *ctx, char hex[65]);
/* Releases a context without finishing it (error paths); safe to call twice. */
void vx_sha256_free(vx_sha256_ctx *ctx);

#endif
