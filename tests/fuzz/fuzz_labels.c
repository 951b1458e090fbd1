/*
 * fuzz_labels.c — libFuzzer over the browse label files a container may carry: the input
 * is split at "\n%%\n" into feature_labels.json, relation_clusters.json and
 * feature_clusters.jsonl (a missing part removes the file), written into a small encoded
 * model (tests/fixtures/models/families/llama-gqa, with down-meta), which browse then opens.
 * Every feature's label is read (ASan sees a pointer that outlives its JSON), and SHOW
 * RELATIONS must agree with them: with labels, its rows count exactly the labelled features
 * (when fewer than its 50-row cap), and without, no feature has one.
 *   scripts/fuzz SECONDS fuzz_labels      (from the repository root, where the fixture is)
 */
#include "browse.h"
#include "fuzz_files.h"
#include "interp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static vx_container *C;
static char model[PATH_MAX];

static void cleanup(void)
{
    vx_close(C);
}

static void setup(void)
{
    vx_err err = {0};
    snprintf(model, sizeof model, "%s/m.vindex3", fz_scratch("fuzz_labels"));
    if (lql_encode_container("tests/fixtures/models/families/llama-gqa", model, -1, 1, NULL, NULL,
                             &err) != 0 || vx_open(model, &C, &err) != 0) {
        fprintf(stderr, "fuzz_labels: %s (run from the repository root)\n", err.msg);
        abort();
    }
    atexit(cleanup);
}

static const char *files[] = {"feature_labels.json", "relation_clusters.json",
                              "feature_clusters.jsonl"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!C)
        setup();
    const uint8_t *p = data;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        size_t n;
        const uint8_t *a = fz_part(&p, data + size, &n);
        fz_put(model, files[i], a, n);
    }
    brw_model *m = NULL;
    vx_err err = {0};
    if (brw_open(C, &m, &err) != 0)
        abort();   /* label files are optional: a bad one is ignored, never fatal */
    int64_t labelled = 0;
    volatile size_t sink = 0;
    for (int l = 0; l < brw_layers(m); l++)
        for (int64_t f = 0; f < brw_features(m, l); f++) {
            const char *t = brw_label(m, NULL, l, f);
            if (t) {
                sink += strlen(t);
                labelled++;
            }
        }
    (void)sink;
    brw_rows rows;
    int is_labelled;
    float cut;
    if (brw_show_relations(m, -1, INT64_MAX, NULL, &rows, &is_labelled, &cut, &err) == 0) {
        int64_t counted = 0;
        for (size_t i = 0; i < rows.n; i++)
            counted += rows.rows[i].count;
        if (is_labelled != brw_has_labels(m, NULL) || (!is_labelled && labelled) ||
            rows.total != rows.n || (is_labelled && counted != labelled))
            abort();
        brw_rows_free(&rows);
    } else if (!strstr(err.msg, "down-meta")) {
        abort();
    }
    brw_close(m);
    return 0;
}
