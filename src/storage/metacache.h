/*
 * metacache.h — the per-user cache of records derived from a container's weights: today
 * the down-meta that browse computes on demand for a container that stores none
 * (docs/lql/BROWSE.md, "The down-meta cache"). One SQLite file per container, outside it
 * (a base container is never modified), keyed by the container's index sha256, so every
 * copy of one container shares it and a container whose weights differ never reads it.
 * Records are opaque fixed-size blobs by (layer, feature); the caller checks their content.
 *
 * Errors: 0 on success, -1 with a vx_err; nothing here prints.
 */
#ifndef LQL_METACACHE_H
#define LQL_METACACHE_H

#include <stddef.h>
#include <stdint.h>

#include "vindex.h"

#define VX_METACACHE_SCHEMA 1

typedef struct vx_metacache vx_metacache;

/* Where the cache of the container at dir (index_sha256) lives:
 * "$XDG_CACHE_HOME/lql/<name>-<first 16 hex of index_sha256>.lqlcache", <name> the resolved
 * directory's, XDG_CACHE_HOME defaulting to "$HOME/.cache". 1 with why (a sentence) when
 * there is none: LQL_NO_CACHE=1, or neither variable set; out is "" unless 0 is returned. */
int vx_metacache_locate(const char *dir, const char *index_sha256, char *out, size_t outsz,
                        char *why, size_t whysz, vx_err *err);
/* A handle on the cache at path for records of rec_bytes of the container index_sha256. An
 * absent file is created by the first vx_metacache_put (looking creates nothing); an
 * existing one is opened now and refused, saying why, when it is not an lql cache, of a
 * newer schema, of another container or record size, or corrupt. */
int vx_metacache_open(const char *path, const char *index_sha256, size_t rec_bytes,
                      vx_metacache **out, vx_err *err);
void vx_metacache_close(vx_metacache *c);
const char *vx_metacache_path(const vx_metacache *c);
/* The records of layer held for features whose have[f] is 0: copied to recs[f * rec_bytes]
 * and have[f] set to 1 (every other feature's recs and have untouched); *n their count. A
 * record of the wrong size or a feature out of range is an error (the file is not what it
 * claims). */
int vx_metacache_layer(vx_metacache *c, int layer, int64_t features, uint8_t *recs,
                       uint8_t *have, uint64_t *n, vx_err *err);
/* Store n records (layer[i], feature[i]) from recs (n × rec_bytes) in one transaction. */
int vx_metacache_put(vx_metacache *c, const int *layer, const int64_t *feature, size_t n,
                     const uint8_t *recs, vx_err *err);

#endif
