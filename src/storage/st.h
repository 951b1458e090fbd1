/*
 * st.h — safetensors input for the encoder and the verifier (storage-internal).
 *
 * A checkpoint is one `model.safetensors` or a sharded set named by
 * `model.safetensors.index.json` (its weight_map says which shard holds each tensor).
 * Every shard is mmap'd read-only; a st_tensor is a borrowed view into that mapping and
 * lives as long as its st_model. Validation happens at open: the header length is within
 * the file and below 100 MB, the header is a JSON object, every tensor has a known dtype,
 * shape × dtype size = end − start, offsets lie inside the data area and no two tensors
 * overlap — all checked in 64-bit arithmetic before any pointer is formed.
 */
#ifndef LQL_ST_H
#define LQL_ST_H

#include "vindex.h"

#include <stddef.h>
#include <stdint.h>

#define ST_HEADER_MAX (100u * 1024u * 1024u)   /* refuse larger JSON headers */

typedef struct st_tensor {
    char *name;                  /* checkpoint name, e.g. "model.layers.0.mlp.up_proj.weight" */
    vx_dtype dtype;              /* f32, f16, bf16, i32, i64 or u8 */
    int ndim;                    /* 0..VX_MAX_DIMS (0 = scalar) */
    int64_t shape[VX_MAX_DIMS];  /* PyTorch order, innermost last */
    const unsigned char *data;   /* into the shard's mmap */
    uint64_t nbytes;
    uint64_t file_offset;        /* absolute offset of data within its shard file */
    int shard;                   /* index into the model's shard list */
} st_tensor;

typedef struct st_model st_model;

/* Open one .safetensors file. On failure *out is NULL and err names the file and why. */
int st_open_file(const char *path, st_model **out, vx_err *err);
/* Open a checkpoint directory: model.safetensors.index.json when present (every shard it
 * names is opened; a tensor must live in the shard the weight_map names), else the single
 * model.safetensors. */
int st_open_dir(const char *dir, st_model **out, vx_err *err);
void st_close(st_model *m);

/* Tensor lookup by checkpoint name (O(log n)); NULL when absent. */
const st_tensor *st_find(const st_model *m, const char *name);
size_t st_count(const st_model *m);
const st_tensor *st_at(const st_model *m, size_t i);   /* sorted by name */
/* The number of shards. */
int st_shard_count(const st_model *m);

/* Parse a safetensors header held in memory (the fuzz entry point): buf is the whole
 * file image. Returns the number of tensors or -1 with err filled. */
int st_check_image(const void *buf, uint64_t size, const char *label, vx_err *err);

/* Source payload hash, as recorded in index.json `source_payload_sha256`: the bytes of
 * each distinct source tensor, whole, in order of first use by `names` (operand order in
 * the tensor table). Missing names fail naming the tensor. */
int st_hash_sources(const st_model *m, const char *const *names, size_t n, char hex[65],
                    vx_err *err);

/* Drop the resident pages of [p, p+n) of a mapping (kept in the page cache), so a
 * streaming reader's RSS stays at the window it is working on. */
void st_release(const void *p, uint64_t n);

#endif
