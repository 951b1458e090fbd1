/*
 * test_browse_ondemand.c — down-meta computed on demand (ondemand.c) for a container
 * encoded without it (brw_encode_finish_bands, `vindex encode --no-down-meta`) gives the
 * stored records bit for bit: per fixture (dense bf16 Llama, GPT-2's plain MLP, Mixtral's
 * experts, gpt-oss's MXFP4-packed experts), every record brw_downmeta_exact computes
 * equals down_meta.bin's bytes, and every feature's brw_feature_meta through
 * brw_meta_prepare equals the stored container's, as does a whole layer computed by
 * brw_meta_prepare_layers (the screened pass) and SHOW FEATURES over it. Also: the
 * bands-only index (layer bands, no down_meta, verify ok), the source each container
 * reports, out-of-range and repeated features skipped, and the computed count.
 * The down-meta cache (metacache.h): a second model computes nothing the first did and
 * reads the same records; a hostile or foreign cache (a token outside the vocabulary, a
 * record of the wrong size, not SQLite, another container's), and one that cannot be
 * created, are set aside with the reason while everything is computed as without one;
 * LQL_NO_CACHE=1 writes nothing.
 */
#include "brw_int.h"
#include "t.h"
#include "t_browse.h"

#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t computed(const brw_model *m)
{
    brw_od_stats st;
    brw_meta_stats(m, &st);
    return st.computed;
}

/* brw_downmeta_exact of every feature against the stored file, byte for byte. */
static void check_exact(const brw_model *m, const char *dir, const char *what)
{
    size_t n = 0;
    uint8_t *file = t_slurp(&n, "%s/browse/down_meta.bin", dir);
    CHECK_MSG(file != NULL, "%s: no down_meta.bin", what);
    if (!file) return;
    const size_t rb = 8 + 8 * (size_t)BRW_DOWN_TOP_K;
    size_t off = 16, bad = 0, total = 0;
    for (int l = 0; l < m->s.layers; l++) {
        const int64_t F = m->s.layer[l].features;
        off += 4;
        if (F == 0) continue;
        int *ls = malloc((size_t)F * sizeof *ls);
        int64_t *fs = malloc((size_t)F * sizeof *fs);
        uint8_t *rec = malloc((size_t)F * rb);
        for (int64_t f = 0; f < F; f++) {
            ls[f] = l;
            fs[f] = f;
        }
        vx_err err = {0};
        CHECK_MSG(brw_downmeta_exact(&m->s, ls, fs, (size_t)F, rec, &err) == 0, "%s: %s", what,
                  err.msg);
        CHECK(off + (size_t)F * rb <= n);
        for (int64_t f = 0; f < F && off + (size_t)F * rb <= n; f++)
            bad += memcmp(rec + (size_t)f * rb, file + off + (size_t)f * rb, rb) != 0;
        off += (size_t)F * rb;
        total += (size_t)F;
        free(ls);
        free(fs);
        free(rec);
    }
    CHECK_MSG(bad == 0 && total > 0, "%s: %zu of %zu records differ from down_meta.bin", what,
              bad, total);
    free(file);
}

static void check_fixture(const char *what)
{
    char src[1024], full[1024], lazy[1024];
    snprintf(src, sizeof src, "%s/models/%s", LQL_FIXTURE_DIR, what);
    snprintf(full, sizeof full, "%s/ondemand-full.vindex3", LQL_BINARY_DIR);
    snprintf(lazy, sizeof lazy, "%s/ondemand-lazy.vindex3", LQL_BINARY_DIR);
    if (t_encode_browse(src, full, 1, what) != 0 || t_encode_browse(src, lazy, 0, what) != 0)
        return;

    /* the bands-only index: bands recorded, no down-meta, every hash still verifies */
    char path[1100];
    snprintf(path, sizeof path, "%s/index.json", lazy);
    cJSON *idx = t_load_json(path);
    const cJSON *br = cJSON_GetObjectItemCaseSensitive(idx, "browse");
    CHECK_MSG(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(br, "layer_bands")) &&
              !cJSON_HasObjectItem(br, "down_meta") && !cJSON_HasObjectItem(br, "down_meta_sha256"),
              "%s: index.browse of a bands-only encode", what);
    cJSON_Delete(idx);
    cJSON *rep = NULL;
    vx_err err = {0};
    CHECK_MSG(vx_verify(lazy, NULL, &rep, &err) == 0, "%s: verify: %s", what, err.msg);
    cJSON_Delete(rep);

    vx_container *cf, *cl;
    brw_model *mf, *ml;
    if (t_open_browse(full, &cf, &mf, what) != 0) return;
    if (t_open_browse(lazy, &cl, &ml, what) != 0) {
        brw_close(mf);
        vx_close(cf);
        return;
    }
    CHECK(brw_meta_source(mf) == BRW_META_STORED && brw_meta_source(ml) == BRW_META_ON_DEMAND);
    check_exact(mf, full, what);

    /* a feature read before anything prepared it is computed by the read itself (one
     * feature, the stored record), never read as "no metadata"; nothing else is computed */
    brw_meta md, ms;
    CHECK(computed(ml) == 0);
    const int r_lazy = brw_feature_meta(ml, NULL, 0, 0, &md), r_full = brw_feature_meta(mf, NULL, 0, 0, &ms);
    CHECK(r_lazy == r_full && md.present == ms.present && md.top_id == ms.top_id &&
          md.c_score == ms.c_score && md.k == ms.k);
    CHECK(computed(ml) == 1);
    /* Ctrl-C (vx_cancel_flag) stops the exact pass itself (the operands' first-touch check
     * passed above): an error, nothing computed; the next request computes the feature */
    {
        const int l0 = 0;
        const int64_t f0 = 1;
        vx_cancel_flag = 1;
        vx_err ce = {0};
        CHECK(brw_meta_prepare(ml, &l0, &f0, 1, &ce) == -1 && ce.code == VX_ECANCEL);
        vx_cancel_flag = 0;
        CHECK(computed(ml) == 1);
    }

    /* every feature through brw_meta_prepare, in two batches (the second half first, with a
     * repeat and out-of-range entries, which are skipped) */
    size_t n = 0;
    for (int l = 0; l < ml->s.layers; l++)
        n += (size_t)ml->s.layer[l].features;
    int *ls = malloc((n + 3) * sizeof *ls);
    int64_t *fs = malloc((n + 3) * sizeof *fs);
    size_t k = 0;
    for (int l = 0; l < ml->s.layers; l++)
        for (int64_t f = 0; f < ml->s.layer[l].features; f++) {
            ls[k] = l;
            fs[k++] = f;
        }
    ls[k] = ml->s.layers;           /* past the last layer */
    fs[k++] = 0;
    ls[k] = 0;                      /* past layer 0's features */
    fs[k++] = ml->s.layer[0].features;
    ls[k] = ls[n - 1];              /* a repeat */
    fs[k++] = fs[n - 1];
    CHECK_MSG(brw_meta_prepare(ml, ls + n / 2, fs + n / 2, k - n / 2, &err) == 0, "%s: %s", what,
              err.msg);
    CHECK(computed(ml) == 1 + n - n / 2);
    CHECK_MSG(brw_meta_prepare(ml, ls, fs, n, &err) == 0, "%s: %s", what, err.msg);
    CHECK(computed(ml) == n);   /* feature (0, 0) was computed by the read above */
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        brw_meta a, b;
        const int ra = brw_feature_meta(mf, NULL, ls[i], fs[i], &a);
        const int rb = brw_feature_meta(ml, NULL, ls[i], fs[i], &b);
        bad += ra != rb || memcmp(&a, &b, sizeof a) != 0;
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu features' down-meta differ on demand", what, bad, n);
    free(ls);
    free(fs);

    brw_close(ml);
    vx_close(cl);
    /* a whole layer at once (the screened pass), on a fresh model: the stored records */
    if (t_open_browse(lazy, &cl, &ml, what) == 0) {
        const int last = ml->s.layers - 1;
        CHECK_MSG(brw_meta_prepare_layers(ml, &last, 1, &err) == 0, "%s: %s", what, err.msg);
        CHECK(computed(ml) == (uint64_t)ml->s.layer[last].features);
        CHECK_MSG(brw_meta_prepare_layers(ml, &last, 1, &err) == 0, "%s: %s", what, err.msg);
        CHECK(computed(ml) == (uint64_t)ml->s.layer[last].features);
        bad = 0;
        for (int64_t f = 0; f < ml->s.layer[last].features; f++) {
            brw_meta a, b;
            brw_feature_meta(mf, NULL, last, f, &a);
            brw_feature_meta(ml, NULL, last, f, &b);
            bad += memcmp(&a, &b, sizeof a) != 0;
        }
        CHECK_MSG(bad == 0, "%s: %zu features of layer %d differ computed by layer", what, bad,
                  last);
        /* SHOW FEATURES of a layer computes it when not stored: the same rows */
        brw_rows ra, rb;
        brw_select_opts so = {.limit = 8};
        CHECK(brw_show_features(mf, 0, &so, &ra, &err) == 0);
        CHECK_MSG(brw_show_features(ml, 0, &so, &rb, &err) == 0, "%s: %s", what, err.msg);
        CHECK(ra.n == rb.n && ra.n > 0);
        for (size_t i = 0; i < ra.n && i < rb.n; i++)
            CHECK(ra.rows[i].feature == rb.rows[i].feature &&
                  ra.rows[i].score == rb.rows[i].score &&
                  !strcmp(ra.rows[i].token ? ra.rows[i].token : "",
                          rb.rows[i].token ? rb.rows[i].token : ""));
        brw_rows_free(&ra);
        brw_rows_free(&rb);
        /* a list naming under a third of a layer is computed feature by feature; a third
         * or more, the whole layer by the screened pass (cheaper): the same records */
        if (ml->s.layers > 2) {   /* layer 1: neither the last nor layer 0, computed above */
            const int l = 1;
            const int64_t F = ml->s.layer[l].features, few = F / 3 - 1, many = (F + 2) / 3;
            int *ll = malloc((size_t)many * sizeof *ll);
            int64_t *lf = malloc((size_t)many * sizeof *lf);
            for (int64_t i = 0; i < many; i++) {
                ll[i] = l;
                lf[i] = F - 1 - i;
            }
            const uint64_t c0 = computed(ml);
            CHECK(brw_meta_prepare(ml, ll, lf, (size_t)few, &err) == 0);
            CHECK(computed(ml) == c0 + (uint64_t)few);
            CHECK(brw_meta_prepare(ml, ll, lf, (size_t)many, &err) == 0);
            CHECK(computed(ml) == c0 + (uint64_t)F);
            bad = 0;
            for (int64_t f = 0; f < F; f++) {
                brw_meta a, b;
                brw_feature_meta(mf, NULL, l, f, &a);
                brw_feature_meta(ml, NULL, l, f, &b);
                bad += memcmp(&a, &b, sizeof a) != 0;
            }
            CHECK_MSG(bad == 0, "%s: %zu features of layer %d differ", what, bad, l);
            free(ll);
            free(lf);
        }
    }

    brw_close(mf);
    brw_close(ml);
    vx_close(cf);
    vx_close(cl);
    t_rm_rf(full);
    t_rm_rf(lazy);
}

/* Features 0 .. n-1 of layer l prepared one by one; their down-meta equals the stored
 * model's (the count that differs is returned). */
static int prepare_first(const brw_model *ml, const brw_model *mf, int l, int n)
{
    int ls[64], bad = 0;
    int64_t fs[64];
    for (int i = 0; i < n; i++) {
        ls[i] = l;
        fs[i] = i;
    }
    vx_err err = {0};
    CHECK_MSG(brw_meta_prepare(ml, ls, fs, (size_t)n, &err) == 0, "%s", err.msg);
    for (int i = 0; i < n; i++) {
        brw_meta a, b;
        brw_feature_meta(mf, NULL, l, i, &a);
        brw_feature_meta(ml, NULL, l, i, &b);
        bad += !b.present || memcmp(&a, &b, sizeof a) != 0;
    }
    return bad;
}

/* Run SQL on the cache file. */
static void cache_sql(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK_MSG(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s: %s", sql,
              sqlite3_errmsg(db));
    sqlite3_close(db);
}

static char last_why[1024];

/* A fresh model over lazy whose first prepare of layer 0's first feature meets the cache as
 * it now is: it is set aside (why has want) and the record is computed, the stored one. */
static void expect_set_aside(const char *lazy, const brw_model *mf, const char *want)
{
    vx_container *c;
    brw_model *m;
    if (t_open_browse(lazy, &c, &m, "cache") != 0) return;
    CHECK(prepare_first(m, mf, 0, 1) == 0);
    brw_od_stats st;
    brw_meta_stats(m, &st);
    CHECK_MSG(st.events == 1 && strstr(st.why, want) && st.computed == 1 && st.cached == 0,
              "want '%s': events %u, why '%s', computed %llu, cached %llu", want, st.events, st.why,
              (unsigned long long)st.computed, (unsigned long long)st.cached);
    snprintf(last_why, sizeof last_why, "%s", st.why);
    brw_close(m);
    vx_close(c);
}

static void check_cache(const char *what)
{
    char src[1024], full[1024], lazy[1024], xdg[1024], path[4096];
    snprintf(src, sizeof src, "%s/models/%s", LQL_FIXTURE_DIR, what);
    snprintf(full, sizeof full, "%s/cache-full.vindex3", LQL_BINARY_DIR);
    snprintf(lazy, sizeof lazy, "%s/cache-lazy.vindex3", LQL_BINARY_DIR);
    snprintf(xdg, sizeof xdg, "%s/cache-xdg", LQL_BINARY_DIR);
    t_rm_rf(xdg);
    setenv("XDG_CACHE_HOME", xdg, 1);
    unsetenv("LQL_NO_CACHE");
    if (t_encode_browse(src, full, 1, what) != 0 || t_encode_browse(src, lazy, 0, what) != 0)
        return;
    vx_container *cf, *c;
    brw_model *mf, *m;
    vx_err err = {0};
    if (t_open_browse(full, &cf, &mf, what) != 0) return;
    const int last = mf->s.layers - 1;
    const uint64_t F0 = (uint64_t)mf->s.layer[0].features, FL = (uint64_t)mf->s.layer[last].features;
    brw_od_stats st;

    /* the first model computes, and writes what it computed */
    if (t_open_browse(lazy, &c, &m, what) == 0) {
        brw_meta_stats(m, &st);
        CHECK(!*st.why && !*st.cache);
        CHECK_MSG(brw_meta_prepare_layers(m, &last, 1, &err) == 0, "%s", err.msg);
        CHECK(prepare_first(m, mf, 0, 10) == 0);
        brw_meta_stats(m, &st);
        CHECK_MSG(*st.cache && st.computed == FL + 10 && st.cached == 0 && !*st.why && st.events == 0,
                  "%s: computed %llu, why '%s'", what, (unsigned long long)st.computed, st.why);
        CHECK_MSG(strstr(st.cache, "/cache-xdg/lql/cache-lazy.vindex3-") &&
                  strstr(st.cache, ".lqlcache"), "%s: cache at '%s'", what, st.cache);
        snprintf(path, sizeof path, "%s", st.cache);
        brw_close(m);
        vx_close(c);
    }
    struct stat sb;
    CHECK_MSG(stat(path, &sb) == 0, "%s: no cache file '%s'", what, path);
    /* a second one reads those and computes only the rest: the same records */
    if (t_open_browse(lazy, &c, &m, what) == 0) {
        CHECK(prepare_first(m, mf, 0, 20) == 0);
        brw_meta_stats(m, &st);
        CHECK(st.cached == 10 && st.computed == 10);
        CHECK_MSG(brw_meta_prepare_layers(m, &last, 1, &err) == 0, "%s", err.msg);
        brw_meta_stats(m, &st);
        CHECK(st.cached == 10 + FL && st.computed == 10);
        size_t bad = 0;
        for (int64_t f = 0; f < (int64_t)FL; f++) {
            brw_meta a, b;
            brw_feature_meta(mf, NULL, last, f, &a);
            brw_feature_meta(m, NULL, last, f, &b);
            bad += memcmp(&a, &b, sizeof a) != 0;
        }
        CHECK_MSG(bad == 0, "%s: %zu cached records differ from the stored ones", what, bad);
        brw_close(m);
        vx_close(c);
    }
    /* a third computes layer 0 whole around the 20 cached */
    if (t_open_browse(lazy, &c, &m, what) == 0) {
        const int zero = 0;
        CHECK_MSG(brw_meta_prepare_layers(m, &zero, 1, &err) == 0, "%s", err.msg);
        brw_meta_stats(m, &st);
        CHECK(st.cached == 20 && st.computed == F0 - 20);
        brw_close(m);
        vx_close(c);
    }

    /* hostile or foreign caches are set aside; the records are computed */
    cache_sql(path, "UPDATE rec SET rec = zeroblob(8) || x'f0ffffff' || substr(rec, 13) "
                    "WHERE layer = 0 AND feature = 0");
    expect_set_aside(lazy, mf, "names a token outside the vocabulary");
    cache_sql(path, "UPDATE rec SET rec = x'00' WHERE layer = 0 AND feature = 0");
    expect_set_aside(lazy, mf, "a record of the wrong size");
    cache_sql(path, "UPDATE meta SET value = 'ab' || substr(value, 3) WHERE key = 'index_sha256'");
    expect_set_aside(lazy, mf, "belongs to another container");
    t_rm_rf(xdg);
    CHECK(mkdir(xdg, 0755) == 0 && mkdir(strcat(strcpy(src, xdg), "/lql"), 0755) == 0);
    FILE *fp = fopen(path, "w");
    if (fp) {
        fputs("not a database, though long enough to be read as one's header ........", fp);
        fclose(fp);
    }
    expect_set_aside(lazy, mf, "is not an lql");
    /* a cache that cannot be written (a file size limit of 0: a full disk's symptom), and
     * the empty file that leaves, which the next model takes for no cache */
    t_rm_rf(xdg);
    struct rlimit keep, none = {0, 0};
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &keep);
    none.rlim_max = keep.rlim_max;
    setrlimit(RLIMIT_FSIZE, &none);
    expect_set_aside(lazy, mf, "disk full or file size limit reached while ");
    CHECK(strstr(last_why, "; what is computed is kept for this session only") != NULL);
    setrlimit(RLIMIT_FSIZE, &keep);
    if (t_open_browse(lazy, &c, &m, what) == 0) {
        CHECK(prepare_first(m, mf, 0, 1) == 0);
        brw_meta_stats(m, &st);
        CHECK_MSG(st.events == 0 && st.computed == 1 && !*st.why, "why '%s'", st.why);
        brw_close(m);
        vx_close(c);
    }
    /* a cache that cannot be: a file where its directory belongs */
    t_rm_rf(xdg);
    fp = fopen(xdg, "w");
    if (fp) fclose(fp);
    expect_set_aside(lazy, mf, "cannot open down-meta cache '");
    CHECK(strstr(last_why, "': Not a directory; the cache is not used (down-meta is computed "
                           "instead)") != NULL);
    unlink(xdg);
    /* LQL_NO_CACHE=1: nothing looked for, nothing written */
    setenv("LQL_NO_CACHE", "1", 1);
    if (t_open_browse(lazy, &c, &m, what) == 0) {
        CHECK(prepare_first(m, mf, 0, 1) == 0);
        brw_meta_stats(m, &st);
        CHECK(st.events == 0 && !strcmp(st.why, "none (LQL_NO_CACHE=1)") && !*st.cache);
        CHECK(stat(xdg, &sb) != 0);
        brw_close(m);
        vx_close(c);
    }
    brw_close(mf);
    vx_close(cf);
    t_rm_rf(full);
    t_rm_rf(lazy);
    t_rm_rf(xdg);
}

int main(void)
{
    /* the checks above count what is computed: the user's cache stays out of them */
    setenv("LQL_NO_CACHE", "1", 1);
    check_fixture("tinyllama-bf16");
    check_fixture("families/gpt2");
    check_fixture("families/mixtral");
    check_fixture("families/gpt-oss");
    check_cache("tinyllama-bf16");
    return T_DONE();
}
