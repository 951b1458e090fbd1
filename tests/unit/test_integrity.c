/*
 * test_integrity.c — corrupted weights are never answered from (issue 10 §4). The tiny
 * Llama model is encoded (with browse down-meta) and copied; in the copy a payload byte of
 * one tensor is flipped, or 200 KB of 0xFF are written over the output head. USE accepts
 * the container (it reads metadata only); every statement that reads the corrupted tensor
 * — INFER, GENERATE, TRACE for the output head; WALK, DESCRIBE, SELECT … entity, INFER for
 * a gate — fails naming the segment and tensor, while statements that do not read it still
 * answer. A NaN written with its recorded hash updated (as a container without hashes, or
 * an overflow, would present it) is refused by the forward pass naming the layer or the
 * output head; a trace file holding NaN states is refused by TRACE FROM. With two tensors
 * corrupted, the check over the engine's pool names the one a check in turn meets first.
 */
#include "brw_int.h"
#include "shell.h"
#include "vx_int.h"
#include "t.h"
#include "t_file.h"
#include "test_journal_fx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char base[4096];

static int run(const char *dir, const char *text, char *msg, size_t n);

/* Each statement of stmts, run on dir, fails with a message containing want. */
static void refused(const char *dir, const char *const *stmts, size_t n, const char *want)
{
    char msg[8192];
    for (size_t i = 0; i < n; i++) {
        CHECK_MSG(run(dir, stmts[i], msg, sizeof msg) == -1, "%s answered from corrupted data",
                  stmts[i]);
        CHECK_HAS(msg, want);
    }
}

/* Runs text in a fresh session bound to dir (plain USE: it reads no weight); the output
 * (0) or the error message (-1). */
static int run(const char *dir, const char *text, char *msg, size_t n)
{
    char use[4400];
    snprintf(use, sizeof use, "USE \"%s\";", dir);
    lql_session *s = lql_session_new();
    char *out = NULL;
    lql_err e = {0};
    int rc = lql_eval(s, use, strlen(use), LQL_OUT_TSV, &out, &e);
    free(out);
    out = NULL;
    if (rc == 0)
        rc = lql_eval(s, text, strlen(text), LQL_OUT_TSV, &out, &e);
    snprintf(msg, n, "%s", rc == 0 ? (out ? out : "") : e.msg);
    free(out);
    lql_session_free(s);
    return rc;
}

static int copy_file(const char *from, const char *to)
{
    size_t n;
    unsigned char *b = t_slurp(&n, "%s", from);
    FILE *f = fopen(to, "wb");
    int ok = b && f && fwrite(b, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = 0;
    free(b);
    return ok ? 0 : -1;
}

/* A fresh copy of the base container at dir (the files a tiny encode writes). */
static int copy_container(const char *dir)
{
    static const char *const files[] = {
        "index.json", "system_graph.json", "config.json", "generation_config.json", "tokenizer.json",
        "tokenizer_config.json", "segments/target.embedding.bin",
        "segments/target.decoder_stack.bin", "segments/target.output_head.bin",
        "browse/down_meta.bin"};
    char a[4400], b[4400];
    if (t_rm_rf(dir) != 0)
        return -1;
    snprintf(a, sizeof a, "mkdir -p '%s/segments' '%s/browse'", dir, dir);
    if (system(a) != 0)
        return -1;
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(a, sizeof a, "%s/%s", base, files[i]);
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        FILE *f = fopen(a, "rb");
        if (!f)
            continue;   /* a file this encode did not write */
        fclose(f);
        if (copy_file(a, b) != 0)
            return -1;
    }
    return 0;
}

/* File offset of a tensor's payload in its segment, and its length. */
static long tensor_at(const char *dir, const char *object, const char *name, uint64_t *len,
                      char *seg, size_t nseg)
{
    vx_container *c;
    vx_err err = {0};
    if (vx_open(dir, &c, &err) != 0)
        return -1;
    const vx_tensor *t = vx_find(c, object, name);
    long off = -1;
    for (size_t i = 0; t && i < vx_segment_count(c); i++) {
        vx_segment_view v;
        vx_segment_at(c, i, &v);
        if (strcmp(v.rel, t->segment) == 0) {
            off = (long)((const char *)t->data - (const char *)v.data);
            *len = t->nbytes;
            snprintf(seg, nseg, "%s/%s", dir, v.rel);
        }
    }
    vx_close(c);
    return off;
}

static int write_at(const char *path, long off, const void *p, size_t n)
{
    FILE *f = fopen(path, "r+b");
    int ok = f && fseek(f, off, SEEK_SET) == 0 && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

static int flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    int c = f && fseek(f, off, SEEK_SET) == 0 ? fgetc(f) : EOF;
    if (f)
        fclose(f);
    unsigned char b = (unsigned char)(c ^ 0x10);
    return c == EOF ? -1 : write_at(path, off, &b, 1);
}

/* Writes the float v at element i of the tensor and replaces the tensor's recorded sha256
 * in the segment's table with the new bytes' hash, so only the forward pass can object. */
static int poison(const char *dir, const char *object, const char *name, size_t i, float v)
{
    char seg[4400];
    uint64_t len = 0;
    long off = tensor_at(dir, object, name, &len, seg, sizeof seg);
    if (off < 0 || write_at(seg, off + (long)(i * sizeof v), &v, sizeof v) != 0)
        return -1;
    size_t n;
    unsigned char *b = t_slurp(&n, "%s", seg);
    if (!b)
        return -1;
    vx_container *c;
    vx_err err = {0};
    char old[65] = "", hex[65];
    vx_sha256_hex(b + off, (size_t)len, hex);
    /* the old hash: the one the segment's table records for this tensor */
    if (vx_open(dir, &c, &err) == 0) {
        for (size_t k = 0; k < vx_segment_count(c); k++) {
            vx_segment_view sv;
            vx_segment_at(c, k, &sv);
            for (size_t j = 0; j < sv.hdr->n; j++)
                if (sv.hdr->t[j].sha256 && strcmp(sv.hdr->t[j].name, name) == 0 &&
                    strcmp(sv.object, object) == 0)
                    snprintf(old, sizeof old, "%s", sv.hdr->t[j].sha256);
        }
        vx_close(c);
    }
    long at = -1;
    for (long k = 0; old[0] && at < 0 && k + 64 <= off; k++)
        if (memcmp(b + k, old, 64) == 0)
            at = k;
    int rc = at >= 0 ? write_at(seg, at, hex, 64) : -1;
    free(b);
    return rc;
}

int main(void)
{
    char dir[4200], seg[4400], msg[8192];
    snprintf(base, sizeof base, "%s/integrity-tiny.vindex3", LQL_BINARY_DIR);
    snprintf(dir, sizeof dir, "%s/integrity-bad.vindex3", LQL_BINARY_DIR);
    if (fx_encode_tiny(base, NULL) != 0)
        return 1;
    vx_err err = {0};

    /* the intact container answers, and the check is remembered per container */
    CHECK(run(base, "INFER \"The capital of France is\" TOP 1;", msg, sizeof msg) == 0);
    CHECK_HAS(msg, "Par");
    vx_container *c;
    CHECK(vx_open(base, &c, &err) == 0);
    if (c) {
        CHECK(vx_object_check(c, NULL, &err) == 0 && vx_object_check(c, NULL, &err) == 0);
        vx_close(c);
    }

    /* one payload byte of the output head flipped */
    uint64_t len = 0;
    CHECK(copy_container(dir) == 0);
    long off = tensor_at(dir, "target.output_head", "lm_head", &len, seg, sizeof seg);
    CHECK(off > 0 && len > 4096);
    CHECK(flip_byte(seg, off + 1001) == 0);
    const char *want = "segment 'segments/target.output_head.bin' is corrupted: tensor 'lm_head' "
                       "(object 'target.output_head') does not match its recorded sha256";
    const char *head[] = {"INFER \"The capital of France is\" TOP 2;",
                          "INFER \"Once upon a time\" GENERATE 3;",
                          "TRACE \"The capital of France is\";",
                          "EXPLAIN INFER \"The capital of France is\";"};
    refused(dir, head, sizeof head / sizeof *head, want);
    /* statements that never read the head still answer */
    CHECK(run(dir, "WALK \"The capital of France is\" TOP 1;", msg, sizeof msg) == 0);
    CHECK(run(dir, "SELECT * FROM FEATURES WHERE layer = 0 LIMIT 1;", msg, sizeof msg) == 0);
    CHECK(run(dir, "STATS;", msg, sizeof msg) == 0);

    /* the case: 200 KB of 0xFF over the output head */
    CHECK(copy_container(dir) == 0);
    unsigned char *ff = malloc(200 * 1024);
    CHECK(ff != NULL);
    if (ff) {
        memset(ff, 0xFF, 200 * 1024);
        CHECK(write_at(seg, off + 4096, ff, 200 * 1024) == 0);
        free(ff);
    }
    CHECK(run(dir, "INFER \"The capital of France is\" TOP 2;", msg, sizeof msg) == -1);
    CHECK_HAS(msg, want);

    /* a gate row of layer 1 corrupted: browse and the engine both refuse */
    CHECK(copy_container(dir) == 0);
    off = tensor_at(dir, "target.decoder_stack", "layers.1.ffn.gate_proj", &len, seg, sizeof seg);
    CHECK(off > 0 && flip_byte(seg, off + 77) == 0);
    want = "segment 'segments/target.decoder_stack.bin' is corrupted: tensor "
           "'layers.1.ffn.gate_proj' (object 'target.decoder_stack')";
    const char *gate[] = {"WALK \"The capital of France is\" TOP 1;",
                          "DESCRIBE \"France\";",
                          "SELECT * FROM EDGES WHERE entity = \"France\" LIMIT 1;",
                          "INFER \"The capital of France is\" TOP 2;",
                          "TRACE \"The capital of France is\";"};
    refused(dir, gate, sizeof gate / sizeof *gate, want);
    CHECK(run(dir, "TOKENIZE \"France\";", msg, sizeof msg) == 0);
    /* USE with a journal opens browse for the overlay, so it refuses too */
    char use[4400];
    snprintf(use, sizeof use, "USE \"%s\" JOURNAL \":memory:\";", dir);
    CHECK(run(dir, use, msg, sizeof msg) == -1);
    CHECK_HAS(msg, want);

    /* the output head corrupted too: the check over the pool (eng_tensors_check) names the
     * tensor a check in turn meets first, the gate */
    off = tensor_at(dir, "target.output_head", "lm_head", &len, seg, sizeof seg);
    CHECK(off > 0 && flip_byte(seg, off + 5) == 0);
    vx_container *c1 = NULL, *c2 = NULL;
    vx_err e1 = {0}, e2 = {0};
    CHECK(vx_open(dir, &c1, &err) == 0 && vx_open(dir, &c2, &err) == 0);
    if (c1 && c2) {
        CHECK(vx_object_check(c1, NULL, &e1) == -1 && eng_tensors_check(c2, NULL, 0, &e2) == -1);
        CHECK_MSG(strcmp(e1.msg, e2.msg) == 0, "in turn: %s; over the pool: %s", e1.msg, e2.msg);
        CHECK_HAS(e2.msg, want);
    }
    if (c1) vx_close(c1);
    if (c2) vx_close(c2);

    /* a NaN whose hash was updated: the forward pass names where it appeared */
    CHECK(copy_container(dir) == 0);
    CHECK(poison(dir, "target.decoder_stack", "layers.2.ffn.down_proj", 5, NAN) == 0);
    CHECK(run(dir, "INFER \"The capital of France is\" TOP 2;", msg, sizeof msg) == -1);
    CHECK_HAS(msg, "layer 2 produced a non-finite value (nan at position 0");
    CHECK(run(dir, "INFER \"Once upon a time\" GENERATE 2;", msg, sizeof msg) == -1);
    CHECK_HAS(msg, "layer 2 produced a non-finite value");
    CHECK(run(dir, "TRACE \"The capital of France is\";", msg, sizeof msg) == -1);
    CHECK_HAS(msg, "layer 2 produced a non-finite value");
    CHECK(copy_container(dir) == 0);
    CHECK(poison(dir, "target.output_head", "lm_head", 256 * 1680 + 3, INFINITY) == 0);
    CHECK(run(dir, "INFER \"The capital of France is\" TOP 2;", msg, sizeof msg) == -1);
    CHECK_HAS(msg, "the output head produced a non-finite value (");
    CHECK(run(dir, "TRACE \"The capital of France is\";", msg, sizeof msg) == -1);
    CHECK_HAS(msg, "trace: the logit lens of the embedding at position 5 is not finite");
    CHECK(copy_container(dir) == 0);
    CHECK(poison(dir, "target.embedding", "weight", 0, NAN) == 0);
    CHECK(run(dir, "INFER \"The capital of France is\" TOP 2;", msg, sizeof msg) == -1);
    CHECK_HAS(msg, "the embedding produced a non-finite value (nan at position 0, element 0)");

    /* a trace file with a NaN state: TRACE FROM refuses instead of printing nan */
    char tr[4400];
    snprintf(tr, sizeof tr, "%s/integrity.trace", LQL_BINARY_DIR);
    remove(tr);
    char stmt[4600];
    snprintf(stmt, sizeof stmt, "TRACE \"The capital of France is\" SAVE \"%s\";", tr);
    CHECK(run(base, stmt, msg, sizeof msg) == 0);
    float nan = NAN;
    /* header 32 + 6 ids; state (pos 0, row 2, residual) at float (0 * 5 + 2) * 3 * 256 */
    CHECK(write_at(tr, 32 + 4 * 6 + 4 * (2 * 3 * 256 + 7), &nan, 4) == 0);
    snprintf(stmt, sizeof stmt, "TRACE FROM \"%s\" POSITIONS ALL;", tr);
    CHECK(run(base, stmt, msg, sizeof msg) == -1);
    CHECK_HAS(msg, "integrity.trace\": the residual of layer 1 at position 0 is not finite "
                   "(element 7): the file is corrupted");
    remove(tr);

    t_rm_rf(dir);
    t_rm_rf(base);
    return T_DONE();
}
