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

/* Is s 64 lower-case hex digits, the form every recorded sha256 takes? */
int vx_is_sha256(const char *s);

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
/* Feeds n mapped bytes in 16 MiB slices, polling vx_cancel_flag between slices (VX_ECANCEL,
 * the context left for the caller to free); with release set, hashed pages are dropped from
 * RSS (verify of a 2 GB container stays small). what names the range in the message. */
int vx_sha256_mapped(vx_sha256_ctx *ctx, const void *p, uint64_t n, int release,
                     const char *what, vx_err *err);

/* A second thread that feeds one context while the caller does other work with the same
 * bytes (the encoder hashes its payload beside the segment write: one core, not two, of
 * the three sha256 passes a written byte takes). vx_hasher_start gives NULL when no
 * thread can start; then vx_hasher_post hashes inline, as it does a piece under 64 KiB.
 * Post, work, then wait before the bytes change or the context is read; a shrunk mapping
 * (SIGBUS) in the thread's read makes the next vx_hasher_wait return -1, once (its
 * context's digest is then not the bytes'), even if a post waited for that job first.
 * vx_hasher_stop waits for a posted job and joins. */
typedef struct vx_hasher vx_hasher;
vx_hasher *vx_hasher_start(void);
void vx_hasher_post(vx_hasher *h, vx_sha256_ctx *ctx, const void *data, size_t n);
int vx_hasher_wait(vx_hasher *h);
void vx_hasher_stop(vx_hasher *h);

/* ---- SIGBUS on mapped reads (sigbus.c) ----
 * A mapped file that shrinks while it is read raises SIGBUS. Between vx_bus_arm(&jb) and
 * vx_bus_disarm() on this thread, it returns to `sigsetjmp(jb, 1)` with 1 instead: take
 * sigsetjmp first, arm when it returns 0, and keep what the region changes in memory the
 * jump cannot lose (heap, or objects only reached through a pointer). */
#include <setjmp.h>
void vx_bus_arm(sigjmp_buf *jb);
void vx_bus_disarm(void);

/* ---- JSON files (index.c) ---- */
#define VX_VERSION_MIN 3          /* index.json versions this reader accepts (VINDEX3) */
#define VX_VERSION_MAX 4
#define VX_GRAPH_SCHEMA 7         /* system_graph.json schema */

/* Read a whole regular file of at most 64 MiB into a NUL-terminated malloc'd buffer
 * (*out, caller frees). `label` names it in errors ("index.json"). */
int vx_read_small_file(const char *path, const char *label, char **out, size_t *n, vx_err *err);
/* Parse n bytes as one JSON object (trailing whitespace allowed). Malformed input fails
 * with "<label>: malformed json at line L:C", and so does a string holding NUL (cJSON would
 * end it there) or an object naming a key twice. *out is owned by the caller. */
int vx_json_parse(const char *label, const char *text, size_t n, cJSON **out, vx_err *err);
/* The same; nul_ok takes a NUL-holding string as cJSON does, cut at the NUL: for
 * tokenizer.json, whose vocabulary may hold U+0000 and which transformers loads. */
int vx_json_parse_as(const char *label, const char *text, size_t n, int nul_ok, cJSON **out,
                     vx_err *err);
/* A non-negative integer that a double holds exactly (<= 2^53); -1 otherwise. */
int vx_json_u64(const cJSON *item, uint64_t *out);
/* obj[key] when it is a string, else NULL. */
const char *vx_json_str(const cJSON *obj, const char *key);
/* v as compact JSON in buf, cut to n - 1 bytes ("(missing)" for NULL, "?" when it cannot be
 * printed): a value quoted in a refusal. Returns buf. */
const char *vx_json_text(const cJSON *v, char *buf, size_t n);
/* Does path exist as something other than a directory (a file given where a directory
 * belongs)? */
int vx_is_file(const char *path);
/* The first entry of system_graph.json's "objects" whose "id" is id; NULL when none. */
cJSON *vx_graph_object(const cJSON *graph, const char *id);
/* Judge index.json's "version" (the only generation discriminator): 3-4 accepted, 1-2
 * refused as VINDEX2, anything else refused naming the value and the supported span. */
int vx_index_version(const cJSON *index, int *version, vx_err *err);

/* ---- segment framing (segment_read.c) ---- */
/* One validated tensor-table entry; name and sha256 point into the header JSON. */
typedef struct vx_seg_tensor {
    const char *name;
    vx_dtype dtype;
    int ndim;
    int64_t shape[VX_MAX_DIMS];
    uint64_t offset, length;  /* payload-relative; offset 64-aligned, offset+length <= payload */
    const char *sha256;       /* per-tensor hash when the encoder recorded one, else NULL */
} vx_seg_tensor;

typedef struct vx_segment_hdr {
    cJSON *json;              /* the parsed header (owns every string below) */
    uint64_t header_len;      /* the u64 prefix */
    uint64_t payload_off;     /* 8 + header_len, a multiple of 64 */
    uint64_t payload_bytes;   /* size - payload_off */
    const char *object, *representation;  /* header fields, NULL when absent */
    vx_seg_tensor *t;         /* table order */
    size_t n;
} vx_segment_hdr;

/* Parse and validate a whole segment held in memory (size bytes at data; `seg` names it
 * in errors). On success *h owns its JSON and table (vx_segment_hdr_free); on failure *h
 * is empty. Reads nothing past data + size. */
int vx_segment_parse(const char *seg, const void *data, uint64_t size, vx_segment_hdr *h,
                     vx_err *err);
void vx_segment_hdr_free(vx_segment_hdr *h);

/* ---- an open container's segments (container.c), for verify and the CLI ---- */
typedef struct vx_segment_view {
    const char *rel;             /* container-relative path */
    const char *object;          /* owning object id */
    const char *representation;  /* representation id the segment belongs to */
    int active;                  /* 1 when that representation is bound (in the lookup table) */
    const void *data;            /* the whole file, mapped read-only */
    uint64_t size;
    const vx_segment_hdr *hdr;   /* validated framing and table */
} vx_segment_view;

size_t vx_segment_count(const vx_container *c);
/* Fills *out for segment i (graph object order, then representation order); -1 past the end. */
int vx_segment_at(const vx_container *c, size_t i, vx_segment_view *out);

/* ---- source hashes (verify.c), for the writers that record one ---- */
/* source_payload_sha256 (CONTAINER.md) of operands t[0..n) of `object`, in table order:
 * from the checkpoint index.json's encoder.source names, when it opens; else, when
 * `fidelity` is source-exact and every operand is bound whole to one source tensor, from
 * the stored bytes (they are the source bytes). 0 with hex filled; -1 when neither is
 * possible (the caller leaves the record out: verify reports it unrecorded). */
int vx_source_hash(const vx_container *c, const char *object, const char *fidelity,
                   const vx_tensor *const *t, size_t n, char hex[65]);

/* ---- profiles (profile.c), used by the reader ---- */
/* Find profile `name` in index.json `profiles` and check every selection against the
 * graph (object defined, representation listed for it); *out the profile object. */
int vx_profile_find(const cJSON *index, const cJSON *graph, const char *name, const cJSON **out,
                    vx_err *err);
/* The representation a profile (may be NULL) selects for object, or NULL. */
const char *vx_profile_choice(const cJSON *profile, const char *object);
/* Check that object is a graph object listing representation rep; profile (may be NULL)
 * names who asked, for the message. */
int vx_select_check(const cJSON *graph, const char *object, const char *rep, const char *profile,
                    vx_err *err);
/* A file lql keeps per container for the user: "$var/lql/<name>-<first 16 hex of
 * sha256>.<ext>", $var defaulting to "$HOME/<home_rel>" (XDG_DATA_HOME: ".local/share",
 * XDG_CACHE_HOME: ".cache"); 1 when neither is set, -1 when out is too short. */
int vx_xdg_file(const char *var, const char *home_rel, const char *name, const char *sha256,
                const char *ext, char *out, size_t outsz);
/* mkdir -p of the directories above path; a failure names label ("journal directory"),
 * the directory and why. */
int vx_mkdirs_above(const char *path, const char *label, vx_err *err);
/* The parent of path (".", "/" or its directory part) into out; returns the last component. */
const char *vx_split_parent(const char *path, char *out, size_t n);
/* Write json to dir/rel atomically: a temporary sibling, fsync, rename over rel. */
int vx_json_replace(const char *dir, const char *rel, const cJSON *json, vx_err *err);
/* The same for n files that belong together: every one is written and synced before the
 * first is renamed, so a full disk or a write error replaces none of them. */
int vx_json_replace_n(const char *dir, const char *const *rel, const cJSON *const *json, int n,
                      vx_err *err);

/* ---- segment writer (segment_write.c), used by the encoder ----
 * The table is declared up front (names, dtypes, shapes); the header is written with
 * placeholder per-tensor hashes, payload bytes are streamed tensor by tensor (each
 * tensor's bytes in order, exactly its length; padding is inserted automatically), and
 * close patches the real hashes in (same length), fsyncs, and hashes the whole file. */
typedef struct vx_segw_tensor {
    const char *name;            /* operand name (copied) */
    vx_dtype dtype;
    int ndim;
    int64_t shape[VX_MAX_DIMS];
} vx_segw_tensor;

typedef struct vx_segw vx_segw;

/* Header bytes a table of n tensors with these names may need at most (for shard planning). */
uint64_t vx_segw_header_bound(const vx_segw_tensor *t, size_t n);
/* The shard cap in bytes into *cap: LQL_SHARD_CAP, 4 GiB when it is unset or empty; -1
 * (VX_EARG) when it is set but not a positive integer. */
int vx_shard_cap(uint64_t *cap, vx_err *err);
/* Shard planning: *k = how many of t[0..n) fit one segment file of at most cap bytes
 * (header bound + 64-aligned payload). When t[0] alone does not fit, -1 with
 * "<label>: tensor 'x' of '<object>' (N bytes) does not fit the shard cap of M bytes". */
int vx_segw_fit(const vx_segw_tensor *t, size_t n, uint64_t cap, const char *label,
                const char *object, size_t *k, vx_err *err);
/* Create path (must not exist) holding the table t[0..n). */
int vx_segw_open(vx_segw **out, const char *path, const char *object, const char *representation,
                 const vx_segw_tensor *t, size_t n, vx_err *err);
/* Append the next bytes of the current tensor. */
int vx_segw_write(vx_segw *w, const void *data, size_t n, vx_err *err);
/* Finish: every tensor must be complete. Fills the file's sha256 and size, frees w. */
int vx_segw_close(vx_segw *w, char sha[65], uint64_t *bytes, vx_err *err);
/* Abandon (error paths): closes and frees; the caller removes the file. NULL is fine. */
void vx_segw_abort(vx_segw *w);
/* A segment rel of a container being written (cwriter.c): vx_segw_open on its path in
 * the temporary tree, parent directories created. */
int vx_cw_segment(vx_cw *w, const char *rel, const char *object, const char *representation,
                  const vx_segw_tensor *t, size_t n, vx_segw **out, vx_err *err);
/* The container-relative name of shard `index` of a segment stem: "segments/<stem>.bin"
 * for the first, "segments/<stem>.NNN.bin" after (CONTAINER.md's naming). */
void vx_shard_name(char *rel, size_t size, const char *stem, size_t index);
/* index.json's record of one written file: segs[rel] = {schema, version, bytes, sha256},
 * replacing any earlier record of rel. Out of memory leaves the record out. */
void vx_segment_record(cJSON *segs, const char *rel, const char *schema, int version,
                       uint64_t bytes, const char *sha);

/* ---- bank shape (docs/lql/BANK.md): moe_manifest.json (manifest.c), its LYRW v2 banks
 * exposed as tensors under the canonical operand names (bank.c) ---- */
#define VX_MANIFEST_SCHEMA 1
enum { VX_SLOT_ROUTED, VX_SLOT_SHARED, VX_SLOT_DENSE, VX_BANK_SLOTS };
/* "routed_bank", "shared_bank", "dense_bank": the manifest keys of the slots. */
extern const char *const vx_bank_slot_names[VX_BANK_SLOTS];

/* A §8.4 registry entry: the region roles (lyrw.h VX_ROLE_*) the programme needs, and
 * whether lql executes it. */
typedef struct vx_programme {
    int id;
    const char *name;
    uint16_t roles[5];
    int nroles;
    int executable;
} vx_programme;
/* The registry entry named `name`, or NULL (an unknown programme: kept, refused at the
 * capability check). */
const vx_programme *vx_programme_find(const char *name);

typedef struct vx_mbank {
    int present;
    const char *programme, *storage;     /* point into the manifest JSON */
    const vx_programme *prog;            /* NULL for an unknown programme */
    uint32_t bank_id, experts, input, intermediate, output;
} vx_mbank;

typedef struct vx_mlayer {
    uint32_t layer;
    vx_mbank bank[VX_BANK_SLOTS];
    uint32_t top_k;                      /* routed layers: the router's k */
    const cJSON *json;                   /* the layer's entry, for the graph's agreement */
} vx_mlayer;

typedef struct vx_manifest {
    cJSON *json;                         /* owns every string above */
    const char *object;                  /* the graph object the banks belong to */
    vx_mlayer *l;
    size_t n;
} vx_manifest;

/* Structurally validate moe_manifest.json (json, owned by *m from here on, also on
 * failure) against a graph of num_layers layers: schema (refused by name unless 1), layers
 * in range and listed once, every bank with programme, storage, bank_id, experts,
 * expert_dims. Programme names outside the registry are kept (prog NULL). On failure *m
 * is empty and json freed. */
int vx_manifest_parse(cJSON *json, uint64_t num_layers, vx_manifest *m, vx_err *err);
/* json's integer "schema" must equal want; else VX_EVERSION "<label> schema X is not
 * supported; this lql reads schema N" (manifest.c, shared with the graph reader). */
int vx_schema_check(const cJSON *json, const char *label, int want, vx_err *err);
/* Read and parse the container file dir/rel (path resolved safely); a missing file is
 * "<rel> is missing from '<dir>' (index.json names it)". *out owned by the caller. */
int vx_read_json_in(const char *dir, const char *rel, cJSON **out, vx_err *err);
/* Copy from_dir/name to to_dir/name (created exclusively, fsynced) when the source exists;
 * a missing source is not an error (encode.c: the snapshot copier, also export's). */
int vx_copy_snapshot(const char *from_dir, const char *to_dir, const char *name, vx_err *err);
void vx_manifest_free(vx_manifest *m);

typedef struct vx_bank vx_bank;
/* Load the bank storage of a container whose index.json sets moe_manifest: the manifest
 * (checked against the graph's execution surface), every LYRW file it names (opened
 * through lyrw.c, byte count checked against index.json `segments`), the capability
 * check of each bank's programme, and one vx_tensor view per (layer, bank, entry, role)
 * named as docs/lql/CONTAINER.md names the operand. On failure *out is NULL. */
/* Validate every component of the graph into typed shapes, the primary first
 * (graph_shape.c); *out is freed with vx_shapes_free. */
/* The shape of graph object obj's component (the primary when it names none or an
 * unknown one); never NULL for an open container. */
const vx_graph_shape *vx_object_shape(const vx_container *c, const cJSON *obj);
int vx_shapes_read(const cJSON *graph, const cJSON *primary, vx_graph_shape **out, size_t *n,
                   vx_err *err);
void vx_shapes_free(vx_graph_shape *s, size_t n);
int vx_bank_load(const char *dir, const cJSON *index, const cJSON *graph,
                 const vx_graph_shape *shape, vx_bank **out, vx_err *err);
void vx_bank_free(vx_bank *b);
size_t vx_bank_tensor_count(const vx_bank *b);
const vx_tensor *vx_bank_tensor_at(const vx_bank *b, size_t i);
/* The bank of the open container, NULL for a graph-shape container. */
const vx_bank *vx_container_bank(const vx_container *c);
/* vx_tensor_check for a view into a bank file (t->segment names it): the whole file is
 * hashed against index.json's record the first time any of its views is checked, once
 * however many threads ask; 0 when t is no bank file's or the file has no record. */
int vx_bank_tensor_check(vx_bank *b, const vx_tensor *t, const char *dir, vx_err *err);
/* The LYRW files of a loaded bank, container-relative, in manifest order. */
size_t vx_bank_file_count(const vx_bank *b);
const char *vx_bank_file_at(const vx_bank *b, size_t i);
const vx_manifest *vx_bank_manifest(const vx_bank *b);

#endif
