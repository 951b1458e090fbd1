/*
 * compact.h — COMPACT: reorganise a container's storage without changing what it
 * means. A representation stored as several shard segments whose tensors fit one segment
 * under the shard cap (vx_shard_cap) is rewritten as one segment (same tensor bytes, same
 * table order, so its payload_sha256 is unchanged); every file that index.json, the system
 * graph or the MoE manifest names, and every registered capability file (the tokenizer and
 * config snapshots), is carried byte-identically (hard link, or copy across file systems);
 * every other file is dropped and named in the report, never silently. index.json is
 * carried byte-identically when no segment was merged (the container keeps its identity,
 * so a journal keyed to it still applies); otherwise it is rewritten with the merged
 * segments' records and nothing else changed.
 *
 * The result is written into a temporary sibling, then checked before it is published:
 * it must open, and every tensor of every segment of the source (bound representation or
 * not) must be present in the result under the same representation and name with
 * byte-identical stored bytes; the merged representations' payload hashes are recomputed
 * from the new files and must equal the recorded ones.
 */
#ifndef LQL_EDIT_COMPACT_H
#define LQL_EDIT_COMPACT_H

#include <stddef.h>
#include <stdint.h>

#include "vindex.h"

typedef struct ed_compact_entry {
    char *path;              /* container-relative */
    uint64_t bytes;
    char *merged_into;       /* NULL for a dropped unreferenced file */
} ed_compact_entry;

typedef struct ed_compact_report {
    ed_compact_entry *entries;  /* dropped and merged-away files, sorted by path */
    size_t n_entries;
    size_t n_dropped;            /* entries with merged_into NULL */
    size_t reps_merged;          /* representations whose shards became one segment */
    size_t segments_before, segments_after;
    size_t files_carried;        /* files linked or copied unchanged */
    size_t tensors_checked;      /* stored tensors compared byte for byte */
    uint64_t bytes_dropped;      /* sizes of the dropped files */
    int index_rewritten;         /* 0: index.json carried byte-identically */
} ed_compact_report;

/* Compact c into out_dir, which must not exist. On failure nothing exists at out_dir (the
 * temporary sibling is removed) and err says why. rep is filled on success and must be
 * released with ed_compact_report_free (also after a failure). */
int ed_compact(const vx_container *c, const char *out_dir, ed_compact_report *rep,
               vx_err *err);

/* Called after the exchange, with the compacted container at dir and the old one still
 * kept aside; a nonzero return (err set) undoes the exchange. */
typedef int (*ed_compact_check)(void *ctx, vx_err *err);

/* Compact the container at dir in place: compacted into a temporary sibling, checked as
 * above, then exchanged with dir in one atomic rename (renameat2 RENAME_EXCHANGE) and the
 * parent fsynced. check (may be NULL) then runs on the new dir: when it fails the two are
 * exchanged back and the compacted copy removed; otherwise the old tree is removed. A reader
 * sees either the old container or the new one, never a mix. A file system without
 * RENAME_EXCHANGE is refused (VX_EUNSUPPORTED) with nothing changed, and so is a merge
 * (index.json rewritten) while a journal exists at dir's default place (vx_journal_guard):
 * the journal is keyed to index.json's sha256. */
int ed_compact_in_place(const char *dir, ed_compact_check check, void *ctx,
                        ed_compact_report *rep, vx_err *err);

void ed_compact_report_free(ed_compact_report *rep);

#endif
