/*
 * test_journal_compact.c — COMPACT on the real tiny model. The base is encoded with a
 * small shard cap (the decoder stack in three shard segments), then given two files nothing
 * references, one file an unknown index field names (bytes lql cannot decode) and a stale
 * temporary sibling. Compacting it (cap back to default) must
 *   - merge the three shards into one segment and name each merged-away shard,
 *   - drop exactly the two unreferenced files, named with their sizes, sorted,
 *   - carry the undecodable file and every capability file byte-identically,
 *   - keep every stored tensor byte-identical (39), the decoder payload hash unchanged,
 *     pass vx_verify, and give memcmp-equal logits on three prompts,
 *   - leave the base untouched (index identity, shard files present);
 * compacting the result again changes nothing (index.json carried, identity kept); an
 * existing target is refused by name; in place, a junk file goes and the identity stays.
 */
#include "browse.h"
#include "compact.h"
#include "engine.h"
#include "t.h"
#include "test_journal_fx.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const prompts[] = {
    "The capital of France is", "Once upon a time there was", "A baby cat is called a",
};

static float *logits_of(const char *dir, const char *text, int *vocab)
{
    vx_container *c = NULL;
    eng_model *m = NULL;
    eng_session *s = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    vx_err e = {0};
    float *lg = NULL;
    if (vx_open(dir, &c, &e) || eng_model_bind(c, &m, &e) ||
        eng_tok_encode(eng_model_tokenizer(m), text, strlen(text), 1, &ids, &n, &e) ||
        eng_session_new(m, 0, &s, &e) ||
        !(lg = malloc((size_t)eng_model_vocab(m) * sizeof *lg)) ||
        eng_forward(s, ids, (int)n, lg, NULL, &e)) {
        *vocab = 0;
        fprintf(stderr, "%s: %s\n", dir, e.msg);
        free(lg);
        lg = NULL;
    }
    else
        *vocab = eng_model_vocab(m);
    eng_session_free(s);
    free(ids);
    eng_model_free(m);
    vx_close(c);
    return lg;
}

static void put(const char *dir, const char *rel, const char *text)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int exists(const char *dir, const char *rel)
{
    char p[4200];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    return stat(p, &sb) == 0;
}

static void file_sha(const char *dir, const char *rel, char hex[65])
{
    char p[4200];
    vx_err e = {0};
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    if (vx_sha256_file(p, hex, &e))
        snprintf(hex, 65, "unreadable");
}

static char *index_sha(const char *dir)
{
    vx_container *c = NULL;
    vx_err e = {0};
    char *s = NULL;
    if (vx_open(dir, &c, &e) == 0)
        s = strdup(vx_index_sha256(c));
    vx_close(c);
    return s ? s : strdup("unopenable");
}

static const char *decoder_payload(const cJSON *index)
{
    const cJSON *r = cJSON_GetObjectItem(cJSON_GetObjectItem(index, "representations"),
                                         "target.decoder_stack.f32");
    return cJSON_GetStringValue(cJSON_GetObjectItem(r, "payload_sha256"));
}

static int refuse(void *ctx, vx_err *err)
{
    (void)ctx;
    return vx_errf(err, VX_EVERIFY, "refused by the check");
}

int main(void)
{
    char base[2048], out[4096], again[2048], inplace[2048];
    snprintf(base, sizeof base, "%s/h11-compact-base.vindex3", LQL_BINARY_DIR);
    snprintf(out, sizeof out, "%s/h11-compact-out.vindex3", LQL_BINARY_DIR);
    snprintf(again, sizeof again, "%s/h11-compact-again.vindex3", LQL_BINARY_DIR);
    snprintf(inplace, sizeof inplace, "%s/h11-compact-inplace.vindex3", LQL_BINARY_DIR);
    fx_rm_rf(base);
    fx_rm_rf(out);
    fx_rm_rf(again);
    fx_rm_rf(inplace);
    vx_err e = {0};
    if (fx_encode_tiny(base, "5000000"))
        return 1;
    CHECK(exists(base, "segments/target.decoder_stack.002.bin"));
    /* extra files: two nothing references, one an unknown index field names */
    put(base, "notes.txt", "scratch\n");
    put(base, "browse/stale.bin", "0123456789");
    snprintf(out, sizeof out, "%s/extra", base);
    mkdir(out, 0755);
    put(base, "extra/blob.dat", "\x01\xff not a segment \x7f");
    {
        char *text = NULL;
        size_t n = 0;
        cJSON *idx = NULL;
        snprintf(out, sizeof out, "%s/index.json", base);
        if (vx_read_small_file(out, "index.json", &text, &n, &e) ||
            vx_json_parse("index.json", text, n, &idx, &e))
            fprintf(stderr, "setup: %s\n", e.msg);
        cJSON_AddItemToObject(idx, "x_lab_notes", cJSON_CreateString("extra/blob.dat"));
        CHECK(vx_json_replace(base, "index.json", idx, &e) == 0);
        cJSON_Delete(idx);
        free(text);
    }
    snprintf(out, sizeof out, "%s/h11-compact-out.vindex3", LQL_BINARY_DIR);
    char *base_id = index_sha(base), blob_a[65], blob_b[65], tok_a[65], tok_b[65];
    file_sha(base, "extra/blob.dat", blob_a);
    file_sha(base, "tokenizer.json", tok_a);

    vx_container *c = NULL;
    ed_compact_report rep;
    CHECK(vx_open(base, &c, &e) == 0);
    int rc = ed_compact(c, out, &rep, &e);
    CHECK_MSG(rc == 0, "compact: %s", e.msg);
    if (rc == 0) {
        CHECK(rep.n_entries == 4);
        CHECK(rep.n_dropped == 2);
        CHECK(rep.bytes_dropped == 18);
        CHECK(rep.reps_merged == 1);
        CHECK(rep.segments_before == 5);
        CHECK(rep.segments_after == 3);
        CHECK(rep.tensors_checked == 39);
        CHECK(rep.index_rewritten == 1);
        static const char *const want[4][2] = {
            {"browse/stale.bin", NULL},
            {"notes.txt", NULL},
            {"segments/target.decoder_stack.001.bin", "segments/target.decoder_stack.bin"},
            {"segments/target.decoder_stack.002.bin", "segments/target.decoder_stack.bin"}};
        for (size_t i = 0; i < 4 && i < rep.n_entries; i++) {
            CHECK_STR(rep.entries[i].path, want[i][0]);
            CHECK_STR(rep.entries[i].merged_into ? rep.entries[i].merged_into : "(dropped)",
                      want[i][1] ? want[i][1] : "(dropped)");
        }
        CHECK(rep.entries[0].bytes == 10 && rep.entries[1].bytes == 8);
    }
    ed_compact_report_free(&rep);
    CHECK(!exists(out, "notes.txt") && !exists(out, "browse/stale.bin"));
    CHECK(!exists(out, "segments/target.decoder_stack.001.bin"));
    CHECK(exists(out, "browse/down_meta.bin") && exists(out, "tokenizer_config.json"));
    file_sha(out, "extra/blob.dat", blob_b);
    file_sha(out, "tokenizer.json", tok_b);
    CHECK_STR(blob_b, blob_a);
    CHECK_STR(tok_b, tok_a);
    {
        cJSON *report = NULL;
        vx_err ve = {0};
        CHECK_MSG(vx_verify(out, NULL, &report, &ve) == 0, "verify: %s", ve.msg);
        cJSON_Delete(report);
        vx_container *c2 = NULL;
        CHECK(vx_open(out, &c2, &ve) == 0);
        if (c2) {
            CHECK(decoder_payload(vx_index_json(c)) != NULL);
            CHECK_STR(decoder_payload(vx_index_json(c2)), decoder_payload(vx_index_json(c)));
            CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(vx_index_json(c2), "segments")) == 3);
            CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(vx_index_json(c2),
                                                               "x_lab_notes")),
                      "extra/blob.dat");
        }
        vx_close(c2);
    }
    for (size_t i = 0; i < sizeof prompts / sizeof *prompts; i++) {
        int va = 0, vb = 0;
        float *a = logits_of(base, prompts[i], &va), *b = logits_of(out, prompts[i], &vb);
        CHECK(a && b && va > 1000 && va == vb && memcmp(a, b, (size_t)va * sizeof *a) == 0);
        free(a);
        free(b);
    }
    /* the base is untouched */
    char *base_id2 = index_sha(base);
    CHECK_STR(base_id2, base_id);
    CHECK(exists(base, "segments/target.decoder_stack.001.bin") && exists(base, "notes.txt"));
    free(base_id2);
    /* an existing target is refused */
    CHECK(ed_compact(c, out, &rep, &e) == -1);
    {
        char msg[4400];
        snprintf(msg, sizeof msg, "compact: '%s' already exists; lql does not overwrite it", out);
        CHECK_STR(e.msg, msg);
    }
    ed_compact_report_free(&rep);
    vx_close(c);

    /* compacting a compact container changes nothing */
    c = NULL;
    CHECK(vx_open(out, &c, &e) == 0);
    CHECK(c && ed_compact(c, again, &rep, &e) == 0);
    CHECK(rep.n_entries == 0 && rep.index_rewritten == 0 && rep.tensors_checked == 39);
    ed_compact_report_free(&rep);
    vx_close(c);
    char *id_out = index_sha(out), *id_again = index_sha(again);
    CHECK_STR(id_again, id_out);

    /* in place with a journal beside it: a merge would rewrite index.json and orphan the
     * journal, so it is refused and the container (shards and identity) left as it was */
    {
        char cmd[9000], jp[4200];
        snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", base, inplace);
        CHECK(system(cmd) == 0);
        snprintf(jp, sizeof jp, "%s.lqljournal", inplace);
        put(LQL_BINARY_DIR, "h11-compact-inplace.vindex3.lqljournal", "");
        CHECK(ed_compact_in_place(inplace, NULL, NULL, &rep, &e) == -1);
        snprintf(cmd, sizeof cmd, "compact: merging shards in place rewrites index.json, and "
                 "the journal '%s' is keyed to its sha256: its edits could not be opened again; "
                 "COMPILE them into a new container first (or move the journal away)", jp);
        CHECK_STR(e.msg, cmd);
        ed_compact_report_free(&rep);
        char *id = index_sha(inplace);
        CHECK_STR(id, base_id);
        free(id);
        CHECK(exists(inplace, "segments/target.decoder_stack.001.bin"));
        snprintf(cmd, sizeof cmd, "%s.compact.%ld", inplace, (long)getpid());
        struct stat sb;
        CHECK(stat(cmd, &sb) != 0);
        fx_rm_rf(inplace);
    }

    /* in place: the junk goes, the identity stays (so the journal beside it still applies
     * and is no reason to refuse), no sibling is left */
    {
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", out, inplace);
        CHECK(system(cmd) == 0);
    }
    put(inplace, "segments/old.bin", "junk");
    /* a check that fails after the exchange puts the old tree back and leaves no sibling */
    CHECK(ed_compact_in_place(inplace, refuse, NULL, &rep, &e) != 0);
    CHECK(strstr(e.msg, "refused by the check") != NULL);
    ed_compact_report_free(&rep);
    CHECK(exists(inplace, "segments/old.bin"));
    {
        char side[4300];
        snprintf(side, sizeof side, "%s.compact.%ld", inplace, (long)getpid());
        struct stat sb;
        CHECK(stat(side, &sb) != 0);
    }
    CHECK_MSG(ed_compact_in_place(inplace, NULL, NULL, &rep, &e) == 0, "in place: %s", e.msg);
    CHECK(rep.n_dropped == 1 && rep.entries && !strcmp(rep.entries[0].path, "segments/old.bin"));
    ed_compact_report_free(&rep);
    CHECK(!exists(inplace, "segments/old.bin") && exists(inplace, "segments/target.embedding.bin"));
    char *id_in = index_sha(inplace);
    CHECK_STR(id_in, id_out);
    {
        char side[4300];
        snprintf(side, sizeof side, "%s.compact.%ld", inplace, (long)getpid());
        struct stat sb;
        CHECK(stat(side, &sb) != 0);
        cJSON *report = NULL;
        vx_err ve = {0};
        CHECK_MSG(vx_verify(inplace, NULL, &report, &ve) == 0, "verify: %s", ve.msg);
        cJSON_Delete(report);
    }
    free(id_in);
    free(id_out);
    free(id_again);
    free(base_id);
    if (t_fail == 0) {
        fx_rm_rf(base);
        fx_rm_rf(out);
        fx_rm_rf(again);
        fx_rm_rf(inplace);
    }
    snprintf(out, sizeof out, "%s/h11-compact-inplace.vindex3.lqljournal", LQL_BINARY_DIR);
    unlink(out);
    return T_DONE();
}
