/*
 * test_edit_model.c — the mutation layer's door (src/edit/edit.h) called directly, with
 * no statement in between, on the tiny Llama fixture:
 *   - an ed_model over a journal file replays every change and hands the overlay to its
 *     attach callback (NULL when nothing is active);
 *   - DELETE / UPDATE as calls: tombstones and metadata overrides in the one overlay
 *     (eng_overlay), typed per-feature results, UNDO and ROLLBACK back to the base;
 *   - INSERT … MODE KNN as a call: a typed result and the store's look-up at inference;
 *   - errors say which part of the request they are about (ED_AT_*), and a change on a
 *     model without its browse model is refused, not replayed into nothing.
 */
#include "edit.h"
#include "t.h"
#include "test_journal_fx.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct attached {
    int calls;
    const eng_overlay *last;
    eng_model *m;
} attached;

static void attach(void *ctx, const eng_overlay *ov)
{
    attached *a = ctx;
    a->calls++;
    a->last = ov;
    if (a->m)
        eng_model_set_overlay(a->m, ov);
}

int main(void)
{
    char dir[2048], base[2100], journal[2200], other[2200];
    if (fx_tiny_dir("edit-model", dir, base))
        return 1;
    snprintf(journal, sizeof journal, "%s/j.lqljournal", dir);
    snprintf(other, sizeof other, "%s/other.lqljournal", dir);
    vx_container *c = NULL;
    brw_model *bm = NULL;
    eng_model *m = NULL;
    vx_err e = {0};
    if (vx_open(base, &c, &e) || brw_open(c, &bm, &e) || eng_model_bind(c, &m, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    attached a = {0, NULL, m};
    ed_model *ed = NULL;
    CHECK_MSG(ed_model_new(c, journal, attach, &a, &ed, &e) == 0, "%s", e.msg);
    CHECK(!ed_model_has_journal(ed));   /* named but absent: the first edit creates it */
    CHECK(ed_model_container(ed) == c && ed_model_browse(ed) == NULL);
    ed_model_set_browse(ed, bm);
    CHECK_MSG(ed_model_load(ed, &e) == 0, "%s", e.msg);
    CHECK(a.calls == 0 && ed_current(ed) == NULL && access(journal, F_OK) != 0);
    CHECK_STR(ed_journal_where(ed), journal);

    /* DELETE */
    ed_slot del = {1, 5};
    vx_record_info info;
    CHECK_MSG(ed_delete(ed, "DELETE FROM EDGES WHERE layer = 1 AND feature = 5", &del, 1,
                        &info, &e) == 0, "%s", e.msg);
    CHECK(info.auto_started && info.history_n == 1);
    CHECK(a.calls == 1 && a.last && a.last == ed_model_overlay(ed));
    CHECK(ed_model_has_journal(ed));
    CHECK(ed_is_tombstone(ed_current(ed), 1, 5) && !ed_is_tombstone(ed_current(ed), 1, 6));
    ed_counts cnt;
    ed_overlay_counts(ed_current(ed), &cnt);
    CHECK(cnt.ops == 1 && cnt.tombstones == 1 && cnt.meta == 0);
    brw_meta md;
    CHECK(ed_feature_meta(ed, 1, 5, &md) == -1 && !md.present);

    /* UPDATE: the override is in the same overlay the executor runs */
    ed_slot upd = {2, 7};
    ed_update_row row;
    brw_meta before;
    int had = ed_feature_meta(ed, 2, 7, &before) == 0;
    CHECK_MSG(ed_update(ed, "UPDATE …", &upd, 1, 42, 0.25, &row, &info, &e) == 0, "%s", e.msg);
    CHECK(row.layer == 2 && row.feature == 7 && row.top_id == 42);
    CHECK_NEAR(row.c_score, 0.25, 1e-9);
    CHECK(row.before.present == had && (!had || row.before.top_id == before.top_id));
    const eng_overlay *ov = ed_model_overlay(ed);
    CHECK(ov && ov->n_meta == 1 && ov->meta[0].layer == 2 && ov->meta[0].feature == 7 &&
          ov->meta[0].top_id == 42 && ov->n_edits == 1 && ov->edits[0].tombstone);
    CHECK(ed_feature_meta(ed, 2, 7, &md) == 0 && md.top_id == 42);
    CHECK_NEAR(md.c_score, 0.25, 1e-6);
    /* NaN keeps the confidence, a negative id the token */
    CHECK(ed_update(ed, "UPDATE …", &upd, 1, -1, NAN, &row, &info, &e) == 0);
    CHECK(row.top_id == 42 && fabs(row.c_score - 0.25) < 1e-6);

    /* UNDO, ROLLBACK */
    int64_t n = 0;
    char *text = NULL;
    CHECK_MSG(ed_undo(ed, &n, &text, &e) == 0, "%s", e.msg);
    CHECK(n == 3 && text && strncmp(text, "UPDATE", 6) == 0);
    free(text);
    int64_t count = 0;
    CHECK_MSG(ed_rollback(ed, 0, &count, &e) == 0, "%s", e.msg);
    CHECK(count == 2 && ed_current(ed) == NULL && a.last == NULL);
    CHECK(ed_feature_meta(ed, 2, 7, &md) == (had ? 0 : -1));

    /* INSERT … MODE KNN: typed result, then the store answers at inference */
    ed_insert_req req = {.text = "INSERT … MODE KNN", .entity = "Atlantis", .relation = "capital",
                         .target = "Poseidonia", .mode = ED_KNN, .confidence = NAN,
                         .alpha = NAN};
    ed_insert_res x;
    ed_err ee;
    CHECK_MSG(ed_insert(ed, m, &req, &x, &ee) == 0, "%s", ee.vx.msg);
    CHECK(x.knn_entries == 1 && x.prompt && strcmp(x.prompt, "The capital of Atlantis is") == 0);
    CHECK(x.layer >= 0 && x.layer < eng_model_layers(m) && x.feature == -1);
    int32_t *ids = NULL;
    size_t nids = 0;
    CHECK(eng_tok_encode(eng_model_tokenizer(m), x.prompt, strlen(x.prompt), 1, &ids, &nids,
                         &e) == 0);
    ed_knn_hit hit;
    CHECK_MSG(ed_knn_lookup(ed, m, ids, nids, &hit, &e) == 0, "%s", e.msg);
    CHECK(hit.entry && strcmp(hit.entry->entity, "Atlantis") == 0 && hit.cosine > 0.999);
    free(ids);
    ed_insert_res_free(&x);

    /* errors name the part of the request */
    req.layer_given = 1;
    req.layer = 999;
    CHECK(ed_insert(ed, m, &req, &x, &ee) == -1 && ee.at == ED_AT_LAYER);
    CHECK_HAS(ee.vx.msg, "layer 999 is out of range");
    ed_insert_res_free(&x);
    req.layer_given = 0;
    req.target = "Poseidonia Atlantica Maxima";
    req.mode_named = 1;
    CHECK(ed_insert(ed, m, &req, &x, &ee) == -1 && ee.at == ED_AT_TARGET);
    CHECK_HAS(ee.vx.msg, "MODE KNN writes one token");
    ed_insert_res_free(&x);
    ed_model_free(ed);

    /* an explicit journal path longer than a path buffer is refused, not truncated */
    {
        char *lp = malloc(5000);
        if (lp) {
            memset(lp, 'j', 4999);
            lp[4999] = '\0';
            ed = NULL;
            CHECK(ed_model_new(c, lp, attach, &a, &ed, &e) == -1 && ed == NULL);
            CHECK_HAS(e.msg, "journal path too long");
            free(lp);
        }
    }

    /* a change without the browse model is refused by name */
    a = (attached){0, NULL, NULL};
    CHECK(ed_model_new(c, other, attach, &a, &ed, &e) == 0);
    CHECK(ed_delete(ed, "DELETE …", &del, 1, &info, &e) == -1);
    CHECK_HAS(e.msg, "no browse model");
    CHECK(a.calls == 0);
    ed_model_free(ed);

    eng_model_free(m);
    brw_close(bm);
    vx_close(c);

    /* DIFF of a q8_0-bound base against its effective model: the edited tensors are decoded
     * and compared (both sides' bytes are equal; they were left out before) */
    CHECK_MSG(vx_represent(base, "target.decoder_stack", VX_Q8_0, NULL, &e) == 0, "%s", e.msg);
    vx_select sel = {"target.decoder_stack", "target.decoder_stack.q8_0"};
    c = NULL;
    bm = NULL;
    CHECK_MSG(vx_open_profile(base, NULL, &sel, 1, &c, &e) == 0 && brw_open(c, &bm, &e) == 0,
              "%s", e.msg);
    a = (attached){0, NULL, NULL};
    CHECK_MSG(c && bm && ed_model_new(c, ":memory:", attach, &a, &ed, &e) == 0, "%s", e.msg);
    if (ed) {
        ed_model_set_browse(ed, bm);
        CHECK_MSG(ed_model_load(ed, &e) == 0, "%s", e.msg);
        CHECK_MSG(ed_delete(ed, "DELETE …", &del, 1, &info, &e) == 0, "%s", e.msg);
        ed_side sa = {"stored", c, bm, 0, NULL, NULL}, sb;
        ed_tensor_diff *td = NULL;
        size_t nt = 0;
        CHECK_MSG(ed_side_open(ed, NULL, &sb, &e) == 0 &&
                  ed_diff_tensors(&sa, &sb, 1, &td, &nt, &e) == 0, "%s", e.msg);
        CHECK(nt == 2);
        for (size_t i = 0; i < nt; i++) {
            CHECK(!strcmp(td[i].status, "modified") && td[i].has_max && td[i].changed > 0);
            CHECK(!strcmp(td[i].name, "layers.1.ffn.gate_proj") ||
                  !strcmp(td[i].name, "layers.1.ffn.down_proj"));
        }
        free(td);
        ed_model_free(ed);
    }
    brw_close(bm);
    vx_close(c);
    fx_rm_rf(dir);
    return T_DONE();
}
