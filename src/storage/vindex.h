/*
 * vindex.h — the storage layer's public interface: VINDEX3 containers on disk.
 *
 * On-disk layout of a graph-shape container (normative source: the VINDEX3 seed
 * §5–§7, §12; lql's choices: docs/lql/CONTAINER.md):
 *
 *   1. <dir>/index.json         sole root authority; "version" (3–4) is the only
 *                               generation discriminator and is checked before any
 *                               other byte is read.
 *   2. <dir>/system_graph.json  SystemGraph schema 7: components (with the execution
 *                               surface and explicit per-layer operators and state), logical
 *                               objects, edges.
 *   3. <dir>/segments/<object>.bin
 *                               [u64 LE header length][header JSON, space padded so the
 *                               payload starts 64-byte aligned][payload]; the header is a
 *                               tensor table {name, dtype, shape, offset, length} with
 *                               offsets relative to the payload, 64-byte aligned.
 *   4. tokenizer / config snapshot files, browse/down_meta.bin (DMET).
 *
 * Everything is read through one mmap per segment; a vx_tensor is a borrowed view into
 * that mapping and lives exactly as long as its container.
 *
 * Errors: every fallible function returns 0 on success and -1 on failure, filling the
 * caller's vx_err with a lower-case message that says what, where and why. Nothing in
 * this layer prints.
 */
#ifndef LQL_VINDEX_H
#define LQL_VINDEX_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct cJSON cJSON;

/* ---------------------------------------------------------------- errors */

enum {
    VX_OK = 0,
    VX_EIO,        /* file missing, unreadable, short read, write failed */
    VX_EFORMAT,    /* bytes or JSON that do not follow the format */
    VX_EVERSION,   /* unknown or refused index.json version / schema */
    VX_EMISSING,   /* a required operand, object, file or key is absent */
    VX_EPATH,      /* a path from a container escapes the container directory */
    VX_EUNSUPPORTED, /* representable but not executable / not admitted */
    VX_EARG,       /* bad argument from the caller */
    VX_ENOMEM,
    VX_ECANCEL,    /* the cancel flag was raised */
    VX_EVERIFY,    /* a hash does not match its record */
    VX_ESTALE      /* another session committed to the journal since this one read it */
};

#define VX_ERR_MAX 512
typedef struct vx_err {
    int code;                /* one of VX_E*, 0 when clear */
    char msg[VX_ERR_MAX];    /* lower-case, no trailing newline */
} vx_err;

/* Fill err (when not NULL) and return -1, so callers can `return vx_errf(...)`. */
int vx_errf(vx_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The offset of the first NUL inside a string of n bytes of JSON text (the backslash of a
 * \u0000 escape, or a raw zero byte), (size_t)-1 when none: cJSON ends its strings
 * there, so readers refuse such text rather than take a shorter string. */
size_t vx_json_nul_at(const char *text, size_t n);
/* The offset of the first byte of t[0..n) that does not start well-formed UTF-8 (a stray
 * continuation, an overlong form, a surrogate, a cut sequence), (size_t)-1 when none: JSON
 * text is UTF-8, and cJSON copies such bytes into its strings as they are. */
size_t vx_utf8_bad_at(const char *t, size_t n);
/* The offset of the first '[' or '{' nested deeper than cJSON parses
 * (CJSON_NESTING_LIMIT), (size_t)-1 when none: a refusal then names the limit instead of
 * calling valid JSON malformed. */
size_t vx_json_too_deep(const char *text, size_t n);
/* -1 with "<label>: key 'k' appears twice in object 'o'…" when an object of root names one
 * key twice (cJSON reads the first, other readers the last); vx_json_parse checks it. */
int vx_json_twice(const char *label, const cJSON *root, vx_err *err);

/* ---------------------------------------------------------------- dtypes */

typedef enum vx_dtype {
    VX_F32 = 0, VX_F16, VX_BF16,
    VX_Q8_0, VX_Q4_0, VX_Q4_K, VX_Q6_K, VX_MXFP4,
    VX_I32, VX_I64, VX_U8,
    VX_DTYPE_COUNT,
    /* Decode-only ggml K-quants (block codecs section below): never a container dtype, so
     * outside the dtype table (vx_dtype_name is NULL for them). */
    VX_Q2_K = 64, VX_Q3_K, VX_Q5_K
} vx_dtype;

/* Lower-case canonical name ("f32", "bf16", "q4_k"), or NULL for an invalid value. */
const char *vx_dtype_name(vx_dtype t);
/* Parse a canonical name (case-insensitive; also accepts safetensors' "F32", "BF16"...). */
int vx_dtype_parse(const char *name, vx_dtype *out);
/* Elements per block (1 for scalar types) and bytes per block. */
unsigned vx_dtype_block_elems(vx_dtype t);
unsigned vx_dtype_block_bytes(vx_dtype t);
/* Bytes for a row-major tensor whose innermost dimension is ne0 and with nrows rows;
 * fails (returns -1) on overflow or when ne0 is not a multiple of the block size. */
int vx_dtype_nbytes(vx_dtype t, uint64_t ne0, uint64_t nrows, uint64_t *out);

/* Exact scalar conversions: f32 -> 16-bit rounds to nearest even; subnormals, infinities
 * and NaNs are kept (a NaN stays a NaN). */
float vx_f16_to_f32(uint16_t h);
uint16_t vx_f32_to_f16(float f);
float vx_bf16_to_f32(uint16_t h);
uint16_t vx_f32_to_bf16(float f);
/* Convert n elements of an f32/f16/bf16 row (any alignment) to f32; -1 for other dtypes. */
int vx_row_to_f32(vx_dtype t, const void *src, float *dst, size_t n);

/* ---------------------------------------------------------------- block codecs */

/* Row codecs for the ggml block formats Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and for
 * MXFP4 (OCP MX v1.0), layouts and exactness claims in docs/lql/QUANT.md. A row of n
 * values is n / block_elems consecutive blocks. Dequantisation is bit-exact to ggml's
 * to_float for every format; quantisation (Q8_0, Q4_0, Q4_K, Q6_K, MXFP4) reproduces the
 * reference quantiser's bytes. Both return -1 (nothing written) when dt is not a block
 * codec that direction supports or n is not a multiple of the block size. */
int vx_quantize_row(vx_dtype dt, const float *x, void *dst, size_t n);
int vx_dequantize_row(vx_dtype dt, const void *src, float *dst, size_t n);
/* Block geometry of a block codec (the decode-only K-quants included): 0 and the elements
 * and bytes per block, or -1 when dt is not a block codec. */
int vx_quant_block(vx_dtype dt, unsigned *elems, unsigned *bytes);
/* Lower-case name of any block codec ("q2_k"), NULL otherwise. */
const char *vx_quant_name(vx_dtype dt);
/* Dequantise one block into out[0..elems): the kernels' per-block fallback. Writes
 * nothing when dt is not a block codec. */
void vx_dequantize_block(vx_dtype dt, const void *block, float *out);

/* ---------------------------------------------------------------- tensors */

#define VX_MAX_DIMS 4
/* A borrowed view of one stored tensor. shape[] is in safetensors / PyTorch order
 * (shape[0] outermost, shape[ndim-1] innermost and contiguous): a Linear weight
 * [out, in] has ndim 2, shape {out, in}, and row r starts at r * row_bytes. */
typedef struct vx_tensor {
    const char *name;        /* operand name relative to its object, e.g. "layers.3.attn.q_proj" */
    const char *object;      /* owning logical object id, e.g. "target.decoder_stack" */
    const char *segment;     /* container-relative segment path holding the bytes */
    vx_dtype dtype;
    int ndim;
    int64_t shape[VX_MAX_DIMS];
    const void *data;        /* into the segment mmap; 64-byte aligned */
    uint64_t nbytes;         /* exact payload length */
    uint64_t offset;         /* payload-relative offset within the segment */
} vx_tensor;

/* Number of elements (product of shape). */
uint64_t vx_tensor_nelems(const vx_tensor *t);

/* ---------------------------------------------------------------- containers */

typedef enum vx_shape { VX_SHAPE_GRAPH = 1, VX_SHAPE_BANK = 2 } vx_shape;

typedef struct vx_container vx_container;

/* Open a container directory. Reads index.json (refusing unknown versions by name
 * before anything else), the system graph, every segment header; mmaps segments and
 * validates each tensor-table entry (bounds, 64-byte alignment, dtype x shape = length,
 * no overlap, 64-bit overflow); closes the operand set against the graph. O(metadata):
 * no weight byte is read. On failure *out is NULL. */
int vx_open(const char *dir, vx_container **out, vx_err *err);
void vx_close(vx_container *c);

/* Representation selection (seed §9.1): an object may list several representations; one is
 * bound per object. A profile (index.json `profiles`: {"profile": name, "select": {object:
 * representation id}}) selects present representations only; sel overrides it per object.
 * Objects neither names are bound to their baseline (the first representation listed).
 * A profile or override naming an absent profile, object or representation fails closed,
 * naming what was asked and what is present, before any segment is opened. profile NULL
 * and nsel 0 is vx_open. Segments of unbound representations are mapped and validated
 * too (verify and inspect see them) but their tensors are not in the lookup table. */
typedef struct vx_select {
    const char *object, *representation;
} vx_select;
int vx_open_profile(const char *dir, const char *profile, const vx_select *sel, size_t nsel,
                    vx_container **out, vx_err *err);
/* The bound profile's name, or NULL (baseline binding). */
const char *vx_profile(const vx_container *c);
/* The representation id bound for an object, or NULL when the object has none. */
const char *vx_bound_representation(const vx_container *c, const char *object);
/* Totals of one representation from its mapped segments' tensor tables (bound or not):
 * tensors, payload bytes (headers and padding excluded), elements, and a bit per
 * vx_dtype present. -1 when no mapped segment belongs to rep. */
typedef struct vx_rep_totals {
    size_t tensors;
    uint64_t bytes, weights;
    unsigned dtypes;
} vx_rep_totals;
int vx_representation_totals(const vx_container *c, const char *rep, vx_rep_totals *out);

const char *vx_dir(const vx_container *c);          /* as given to vx_open */
int vx_version(const vx_container *c);              /* index.json version */
vx_shape vx_container_shape(const vx_container *c);
const cJSON *vx_index_json(const vx_container *c);   /* parsed index.json (owned by c) */
const cJSON *vx_graph_json(const vx_container *c);   /* parsed system_graph.json, or NULL */
/* The primary (decoder) component of the graph, or NULL. */
const cJSON *vx_component(const vx_container *c);
/* ---------------------------------------------------------------- the typed graph shape
 *
 * The system graph validated once at open (docs/lql/GRAPH.md): per component its
 * geometry, and per layer its token mixer, its channel mixer and the continuation state
 * it declares. Every reader of num_layers, widths and layer kinds reads this, never the
 * JSON. Operator facts beyond geometry (norms, rope, routing details) stay in the
 * component's `execution` surface, which the engine's plan validates when it binds. */
typedef enum vx_mixer {          /* token mixer: layers[i].operator */
    VX_MIXER_ATTENTION = 1,      /* "softmax_attention" */
    VX_MIXER_MLA,                /* "mla" */
    VX_MIXER_DELTANET,           /* "gated_deltanet" */
    VX_MIXER_MAMBA2              /* "mamba2" */
} vx_mixer;
typedef enum vx_channel {        /* channel mixer: layers[i].ffn */
    VX_CHANNEL_NONE = 0,         /* "none" */
    VX_CHANNEL_DENSE,            /* "dense" */
    VX_CHANNEL_MOE               /* "moe" */
} vx_channel;
const char *vx_mixer_name(vx_mixer k);
const char *vx_channel_name(vx_channel k);

#define VX_STATE_MAX 4           /* state regions per layer */
#define VX_STATE_DIMS 4
/* One declared continuation-state region: per_token regions grow by one `shape` per
 * position (KV rows, MLA latent), fixed regions are allocated once (conv window,
 * recurrent matrix). bytes: of one position when per_token, of the whole region if not. */
typedef struct vx_state_region {
    char name[24];
    vx_dtype dtype;
    int ndim;
    int64_t shape[VX_STATE_DIMS];
    int per_token;
    uint64_t elems, bytes;
} vx_state_region;

typedef struct vx_layer_shape {
    vx_mixer mixer;
    vx_channel channel;
    int window;                  /* attention window W (key j visible iff i-W < j <= i); 0: none */
    int64_t features;            /* channel features: intermediate, experts x expert_intermediate, 0 */
    int nstate;
    vx_state_region state[VX_STATE_MAX];
    uint64_t state_per_token, state_fixed;   /* bytes: per position, and once */
    const cJSON *json;           /* layers[i] (its per-layer operator facts, e.g. rope) */
} vx_layer_shape;

typedef struct vx_graph_shape {
    const char *id, *role;       /* the component's */
    int layers, hidden, vocab, context;
    /* widths from the execution surface; 0 when its section is null */
    int heads, kv_heads, head_dim;          /* execution.attention */
    int intermediate;                       /* execution.ffn */
    int experts, top_k, expert_intermediate; /* execution.moe */
    int64_t features;            /* channel features over all layers */
    uint64_t state_per_token, state_fixed;
    vx_layer_shape *layer;       /* [layers] */
    const cJSON *component, *execution;
} vx_graph_shape;

/* The primary component's shape (never NULL for an open container). */
const vx_graph_shape *vx_shape_of(const vx_container *c);
/* The shape of a component by id (NULL: the primary), or NULL when there is none. */
const vx_graph_shape *vx_shape_component(const vx_container *c, const char *id);
/* Components in graph order. */
size_t vx_shape_count(const vx_container *c);
const vx_graph_shape *vx_shape_at(const vx_container *c, size_t i);

/* sha256 (64 hex chars) of index.json's bytes: the identity a journal is keyed to. */
const char *vx_index_sha256(const vx_container *c);

/* Look up a tensor by object id and operand name; NULL when absent. */
const vx_tensor *vx_find(const vx_container *c, const char *object, const char *name);
/* Same, with the name built printf-style ("layers.%d.ffn.gate_proj"). */
const vx_tensor *vx_findf(const vx_container *c, const char *object, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* All tensors in the container, in segment and table order. */
size_t vx_tensor_count(const vx_container *c);
const vx_tensor *vx_tensor_at(const vx_container *c, size_t i);

/* First-touch integrity (docs/lql/CONTAINER.md, "Integrity on first touch"): t's bytes
 * are hashed against the sha256 its segment's tensor table records the first time it is
 * asked, and the answer is remembered for the life of c, so a corrupted payload is refused
 * before any result is computed from it while an unchanged container pays once per
 * process. A tensor without a recorded hash (a bank region, an older writer) passes
 * unchecked; `vindex verify` stays the full check. -1 with VX_EVERIFY naming the segment,
 * tensor and object, or VX_ECANCEL (not remembered). Not thread-safe for one tensor. */
int vx_tensor_check(const vx_container *c, const vx_tensor *t, vx_err *err);
/* A snapshot file of the container (tokenizer.json, config.json, …; NULL: every one)
 * against the sha256 index.json's "snapshots" records for it: 0 when they agree or none is
 * recorded (an older writer), -1 VX_EVERIFY naming it when the file changed, VX_EMISSING
 * when it is gone. Readers call it before they read the files. */
int vx_snapshot_check(const vx_container *c, const char *name, vx_err *err);
/* vx_tensor_check over every bound tensor of object (NULL: of every object). */
int vx_object_check(const vx_container *c, const char *object, vx_err *err);

/* Resolve a container-relative path safely: refuses absolute paths, "..", and
 * symlinks that leave the container directory. out receives an absolute path. */
int vx_resolve(const vx_container *c, const char *rel, char *out, size_t outsz, vx_err *err);
int vx_resolve_in(const char *dir, const char *rel, char *out, size_t outsz, vx_err *err);

/* The checkpoint files the encoder copies into a container as snapshots when present
 * (config.json and the tokenizer in every form the hub ships it), NULL-terminated. */
extern const char *const vx_hf_snapshots[];

/* ---------------------------------------------------------------- export (hf_export.c,
 * hf_gguf.c; docs/lql/MUTATION.md "Export") */
typedef struct vx_export_report {
    size_t tensors;          /* tensors written */
    uint64_t bytes;          /* tensor bytes written */
    size_t files;            /* snapshot files copied (HF) / metadata keys written (GGUF) */
} vx_export_report;


/* Write c's stored tensors back as the Hugging Face checkpoint directory it was encoded
 * from: model.safetensors under the source tensor names (the inverse of the encoder's
 * source_bindings: renames, row slices re-concatenated, transposes undone, gathered experts
 * scattered back, MXFP4 experts split back into blocks and scales), config.json and the
 * tokenizer files from the container's snapshots, so `vindex encode` of the directory gives
 * the same payload hashes. out_dir must be absent or an empty directory; the directory is
 * written as a temporary sibling and renamed into place. What the format cannot hold is
 * refused by name (bank shape, block-quantised tensors, MXFP4 operands not stored as the
 * checkpoint's blocks, a container without config.json). */
int vx_export_hf(const vx_container *c, const char *out_dir, vx_export_report *rep,
                 vx_err *err);

/* Write c as a GGUF v3 file out_path (must not exist; temporary sibling, then linked into
 * place) for llama.cpp's architecture of its family (llama for llama / mistral / mixtral,
 * qwen2, phi3, olmo2, gpt2, gemma2), tensors in their stored dtype (f32, f16, bf16; 16-bit
 * vectors widened to f32) in that architecture's layout (fused q|k|v and gate|up rows,
 * stacked experts, llama's q_proj / k_proj rows permuted to its rope layout, gemma2's norms
 * as 1 + w), the tokenizer
 * (byte-level BPE as llama.cpp's gpt2, Llama 2 SentencePiece BPE as its llama) as
 * tokenizer.ggml.* metadata. Any other family or construct is refused by name. */
int vx_export_gguf(const vx_container *c, const char *out_path, vx_export_report *rep,
                   vx_err *err);

/* What vx_export_hf (gguf 0) or vx_export_gguf (gguf 1) would refuse in c's binding itself,
 * before anything is written or compiled: the bank shape, a stored dtype the format cannot
 * hold (a block-quantised profile), and for GGUF a family or construct with no form. A
 * container compiled from c binds the same (same family, same profile), so COMPILE CURRENT
 * INTO MODEL asks this of the bound container before its staging compile. */
int vx_export_check(const vx_container *c, int gguf, vx_err *err);

/* ---------------------------------------------------------------- writing (cwriter.c;
 * docs/lql/CONTAINER.md "Writing a container")
 * The one container writer: every derived or encoded container (encode, bank import,
 * COMPILE, COMPACT, export to a directory) is built in `<target>.tmp.<pid>` and renamed
 * into place when complete, so a killed process leaves the target absent or whole. */
typedef struct vx_cw vx_cw;
enum { VX_CW_FILE = 1 };     /* vx_cw_check: the target is one file, not a directory */

/* The target rule, without side effects: an output path is required; it must not exist,
 * or (a directory target) be an empty directory; its parent must be a directory; with
 * base_dir, it must not be base_dir or below it (symlinks and ".." resolved). what names
 * the statement in the message ("compile: '…' already exists; lql does not overwrite it").
 * Every writer (directory and single-file) checks its target with it. */
int vx_cw_check(const char *target, const char *base_dir, unsigned flags, const char *what,
                vx_err *err);
/* Check the target (vx_cw_check) and create its temporary sibling. base_dir (may be NULL)
 * is the container vx_cw_carry links files from. */
int vx_cw_open(vx_cw **out, const char *target, const char *base_dir, const char *what,
               vx_err *err);
/* The temporary directory (what an encode finish hook writes into). */
const char *vx_cw_dir(const vx_cw *w);
/* The full path of container path rel in the temporary tree, its parents created. */
int vx_cw_path(const vx_cw *w, const char *rel, char *out, size_t n, vx_err *err);
/* base/rel into the tree unchanged: hard-linked, copied when linking is not possible. */
int vx_cw_carry(vx_cw *w, const char *rel, vx_err *err);
/* Write rel as a fresh file (an earlier one is replaced, a link to the base never written
 * through), fsynced; vx_cw_json prints json (cJSON_Print, a final newline). */
int vx_cw_file(vx_cw *w, const char *rel, const void *data, size_t n, vx_err *err);
int vx_cw_json(vx_cw *w, const char *rel, const cJSON *json, vx_err *err);
int vx_cw_index(vx_cw *w, const cJSON *index, vx_err *err);
/* Publish: every directory of the tree fsynced, renamed onto the target (never replacing
 * anything but the empty directory accepted at open), the parent fsynced. Frees w; on
 * failure the temporary tree is removed. vx_cancel_flag set: VX_ECANCEL. */
int vx_cw_commit(vx_cw *w, vx_err *err);
/* Give up: the temporary tree removed, w freed (NULL is fine). */
void vx_cw_abort(vx_cw *w);

/* Write all n bytes to fd (EINTR and short writes retried); errors name path, prefixed
 * "what: " when what is not NULL. */
int vx_write_all(int fd, const void *data, uint64_t n, const char *what, const char *path,
                 vx_err *err);
/* Copy src to dst (created exclusively, fsynced; copy_file_range where it can). */
int vx_file_copy(const char *src, const char *dst, vx_err *err);
/* Call fn for every regular file under root (lstat'd), rel its root-relative path and
 * path its full one; stops at the first nonzero return. Anything else that is not a
 * directory (a symbolic link, a FIFO, a device), or an entry that cannot be examined,
 * fails the walk: a copy made from it would lack a file. */
struct stat;
typedef int (*vx_tree_fn)(void *ctx, const char *rel, const char *path, const struct stat *sb);
int vx_tree_files(const char *root, vx_tree_fn fn, void *ctx, vx_err *err);

/* One file written atomically: `<path>.tmp.<pid>`, fsynced, then renamed into place with
 * RENAME_NOREPLACE, or linked where the rename lacks it (an existing file is never
 * replaced), or with replace renamed over it; the parent fsynced. */
typedef struct vx_afile {
    int fd, replace;
    const char *what;        /* prefixes write errors ("export gguf: cannot write …") */
    char path[4096], tmp[4128];
} vx_afile;
int vx_afile_open(vx_afile *f, const char *path, int replace, const char *what, vx_err *err);
int vx_afile_write(vx_afile *f, const void *data, uint64_t n, vx_err *err);
/* fsync and close the temporary file (once; commit does it if not yet done): several files
 * that must appear together are all written and synced before the first is published. */
int vx_afile_sync(vx_afile *f, vx_err *err);
/* Publish (fsync, link or rename, parent fsynced); the temporary file is gone either way. */
int vx_afile_commit(vx_afile *f, vx_err *err);
void vx_afile_abort(vx_afile *f);
/* A complete, synced file at tmp published as path the way commit does without replace
 * (never over an existing file; the parent fsynced): for files written by another writer. */
int vx_publish_new(const char *tmp, const char *path, const char *what, vx_err *err);
/* The three in one call, for a file held in memory. */
int vx_atomic_file(const char *path, const void *data, size_t n, int replace, const char *what,
                   vx_err *err);

/* Remove dir and everything below it, best effort, not following symlinks (a writer's
 * temporary container directory on error paths, COMPILE/COMPACT output that failed). */
void vx_rmtree(const char *dir);

/* ---------------------------------------------------------------- hashing */

/* sha256 of a byte range / a whole file, as 64 lower-case hex chars + NUL. */
void vx_sha256_hex(const void *data, size_t n, char hex[65]);
int vx_sha256_file(const char *path, char hex[65], vx_err *err);
/* path opened for reading when it is a regular file (never blocking on a FIFO): NULL with
 * err naming label and path otherwise. */
FILE *vx_fopen_regular(const char *path, const char *label, vx_err *err);

/* ---------------------------------------------------------------- encode */

/* Progress of long work: done of total in the unit of its stage ("encode": bytes written;
 * "down-meta": features screened). */
typedef void (*vx_progress_fn)(void *ctx, const char *stage, uint64_t done, uint64_t total);

typedef struct vx_encode_opts {
    int dtype;               /* -1: keep each tensor's source dtype; else a vx_dtype to convert to */
    int layer_lo, layer_hi;  /* band override for browse: -1 = derive from depth */
    const char *model_name;  /* NULL: basename of the checkpoint directory */
    /* Progress, NULL for none: stage "encode" counts bytes written; a finish hook that
     * takes these options as its ctx reports its own stage after it (brw_encode_finish:
     * "down-meta", features screened), which on an 8B checkpoint is most of the time. */
    vx_progress_fn progress;
    void *progress_ctx;
    /* Called once everything is written into the temporary directory, with index.json
     * already present there and `index` its parsed form. The hook may add files under
     * tmpdir (e.g. browse/down_meta.bin) and fields to `index`; the encoder then rewrites
     * index.json and renames tmpdir into place. Used by upper layers (down-meta) without
     * storage depending on them. NULL for none. */
    int (*finish)(void *ctx, const char *tmpdir, cJSON *index, vx_err *err);
    void *finish_ctx;
} vx_encode_opts;

void vx_encode_opts_init(vx_encode_opts *o);

/* Encode a Hugging Face checkpoint directory (config.json, *.safetensors possibly
 * sharded, tokenizer files) into a new graph-shape container at out_dir. Streams one
 * tensor at a time; writes into a temporary sibling and renames into place only when
 * complete; refuses if out_dir exists. */
int vx_encode(const char *hf_dir, const char *out_dir, const vx_encode_opts *opts, vx_err *err);
/* vx_encode's dtype rule alone (-1: keep the source's; else f32, f16 or bf16), so a caller
 * can refuse a DTYPE before anything is read. */
int vx_encode_dtype_check(int dtype, vx_err *err);

/* Verify a container against its recorded hashes (segments, payloads, and when the
 * recorded source checkpoint is present and readable, the source payloads). The report
 * is a JSON object owned by the caller (cJSON_Delete). Returns 0 when everything
 * matches, -1 with err describing the first mismatch otherwise (report still filled). */
int vx_verify(const char *dir, const char *source_dir, cJSON **report, vx_err *err);

/* ---------------------------------------------------------------- representations */

/* Fidelity levels, strongest first (seed §9.2). vx_fidelity_rank gives 0..4 for the five
 * levels, 5 for "derived" (a representation COMPILE rewrote from edited state), or 6 for a
 * name outside the list (treated as weaker than any). */
int vx_fidelity_rank(const char *fidelity);
/* The derived authority of a profile (NULL: the baseline binding): the weakest fidelity
 * across the representation each object would bind, and "derived" in a container whose
 * index.json says `authority: derived` (as STATS reports it). Fails like vx_open_profile when the
 * profile is absent or names absent things; *out points into index (or is a static name). */
int vx_profile_authority(const cJSON *index, const cJSON *graph, const char *profile,
                         const char **out, vx_err *err);
/* Add (or, with merge set, extend: later selections replace earlier ones per object) the
 * profile `name` in dir's index.json, selecting sel[0..n). Every selection must name a
 * present representation of a graph object. index.json is rewritten atomically (temp +
 * rename) keeping every other field. Without merge an existing name is refused. */
int vx_profile_add(const char *dir, const char *name, const vx_select *sel, size_t n, int merge,
                   vx_err *err);

/* What vx_represent made. */
typedef struct vx_represent_info {
    char id[192];              /* "<object>.<dtype>" */
    char fidelity[32];         /* "source-equivalent" or "numerically-approximate" */
    char from[192];            /* the representation it was made from (the baseline) */
    size_t tensors, kept;      /* tensors written; of them kept in their source dtype */
    uint64_t bytes, source_bytes;   /* payload bytes of the new and the source representation */
    uint64_t weights;          /* elements */
    int segments;
    char payload_sha256[65];
} vx_represent_info;

/* Compile a new representation of `object` in dtype dt (f32, f16, bf16, q8_0, q4_0, q4_k,
 * q6_k, mxfp4) beside the original, from the object's baseline representation, streaming
 * one tensor at a time into segments/<object>.<dtype>.bin (sharded past LQL_SHARD_CAP or
 * 4 GiB). Under a block codec, 1-D tensors and tensors whose inner dimension is not a
 * multiple of the block size stay in their source dtype (recorded under
 * `kept_source_dtype`); integer tensors always do. Fidelity is measured: every
 * decoded value is compared with the source value. index.json gains the representation
 * (and its segments) and system_graph.json the object's id, each rewritten atomically; the
 * original representation is never touched. Refuses an existing id, an unknown object, a
 * dtype without a codec. info may be NULL. */
int vx_represent(const char *dir, const char *object, vx_dtype dt, vx_represent_info *info,
                 vx_err *err);

/* Decode n values of any stored dtype (float or block codec) to f32; -1 for integer
 * dtypes or an n that is not a multiple of the block size. */
int vx_decode_f32(vx_dtype dt, const void *src, float *dst, size_t n);
/* Encode n f32 values as dt (f32, f16, bf16 RNE, or a block codec's bytes, identical to
 * ggml's quantisers); -1 when dt has no encoder or n is not whole blocks. *bad is n, or the
 * index of the first value dt cannot hold: a finite value f16 would store as infinity, or
 * under a block codec a non-finite value (a block holds none: NaN comes back finite, inf
 * turns its block to NaN) or the value of largest magnitude of a block whose scale
 * overflows (the block would decode to inf, NaN or 0). dst is written either way. */
int vx_encode_f32(vx_dtype dt, const float *x, void *dst, size_t n, size_t *bad);

/* Value-by-value comparison of two tensors of equal shape (any dtypes), decoded on the fly
 * row by row: max |a-b|, RMS of a-b, relative error ||a-b|| / ||a||, count of values that
 * differ. */
typedef struct vx_diff_stat {
    double max_abs, rms, rel;
    double ss_diff, ss_ref;    /* sum of (a-b)^2 and of a^2, for totals over tensors */
    uint64_t n, differ;
} vx_diff_stat;
int vx_tensor_diff(const vx_tensor *a, const vx_tensor *b, vx_diff_stat *out, vx_err *err);

/* ---------------------------------------------------------------- bank shape */

/* What vx_bank_import wrote (docs/lql/BANK.md). */
typedef struct vx_bank_info {
    int layers;              /* layer files written (one LYRW v2 file per layer) */
    int banks[3];            /* banks written: routed, shared, dense */
    uint64_t regions;        /* LYRW regions (entries x roles) */
    uint64_t bank_bytes;     /* region payload bytes moved into LYRW files */
    uint64_t graph_bytes;    /* payload bytes left in the decoder's tensor-table segments */
} vx_bank_info;

/* Derive a bank-shape container (the convergence configuration: system graph kept as the
 * semantic authority, moe_manifest.json set, gated FFN weights of every layer in one LYRW
 * v2 file per layer) from the graph-shape MoE container src_dir. Bytes are copied
 * unchanged, streamed from the source mapping; unchanged files are hard-linked. Builds a
 * temporary sibling and renames it into place; refuses an existing out_dir, a container
 * without routed layers, and a decoder object with several representations. Banks use
 * programme gated-mlp-v1 (gate, up, down regions), or with VX_BANK_FUSED
 * gated-mlp-fused-fc1-v1 (gate_up_fused, down). info may be NULL. */
#define VX_BANK_FUSED 1u       /* flags: gate and up as one gate_up_fused region (contiguous
                                  halves, programme gated-mlp-fused-fc1-v1) */
int vx_bank_import(const char *src_dir, const char *out_dir, unsigned flags, vx_bank_info *info,
                   vx_err *err);

/* ---------------------------------------------------------------- cancellation */

/* Long-running work (encode, COMPILE, forward passes) polls this flag; the shell sets it
 * on Ctrl-C. Work that sees it set stops and returns VX_ECANCEL. Atomic, not volatile: the
 * server's threads raise it for the compute thread (ThreadSanitizer reported the volatile
 * int as a race); a lock-free atomic may still be set from a signal handler. */
extern _Atomic int vx_cancel_flag;

#endif
