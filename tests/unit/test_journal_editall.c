/*
 * test_journal_editall.c — edits beyond dense FFN layers (issue 13, "edits everywhere"):
 * INSERT / DELETE on the routed experts of MoE layers (qwen2-moe, deepseek-v3-lite) and
 * under a q8_0 profile (tinyllama) made with the statements, then COMPILE. The compiled
 * container must recall the fact, its tensors must be byte-identical to the base's except
 * exactly the edited matrices, and in a block-quantised tensor exactly the blocks the edit
 * changed differ.
 */
#include "t.h"
#include "test_journal_fx.h"

#include <cjson/cJSON.h>

#include <string.h>
#include <unistd.h>

static char out[1 << 16];
static size_t blocks_differ;   /* blocks of block-quantised tensors changed() saw differ */

/* Tensors whose bytes differ between container a and b, in every representation's
 * segments (matched by segment path and table entry): each must be one of want (NULL-ended);
 * returns how many differ, -1 when b lacks a segment or tensor of a or a container does
 * not open. Differing blocks of block-quantised tensors are added to blocks_differ. */
static int changed(const char *a, const char *b, const char *const *want)
{
    vx_container *ca = NULL, *cb = NULL;
    vx_err e = {0};
    if (vx_open(a, &ca, &e) || vx_open(b, &cb, &e)) {
        fprintf(stderr, "open: %s\n", e.msg);
        vx_close(ca);
        return -1;
    }
    int n = 0;
    vx_segment_view sa, sb;
    for (size_t i = 0; vx_segment_at(ca, i, &sa) == 0 && n >= 0; i++) {
        int found = 0;
        for (size_t k = 0; !found && vx_segment_at(cb, k, &sb) == 0; k++)
            found = strcmp(sa.rel, sb.rel) == 0;
        if (!found || sa.hdr->n != sb.hdr->n) {
            fprintf(stderr, "%s: segment %s missing or different\n", b, sa.rel);
            n = -1;
            break;
        }
        for (size_t t = 0; t < sa.hdr->n; t++) {
            const vx_seg_tensor *x = &sa.hdr->t[t], *y = &sb.hdr->t[t];
            const char *px = (const char *)sa.data + sa.hdr->payload_off + x->offset;
            const char *py = (const char *)sb.data + sb.hdr->payload_off + y->offset;
            if (strcmp(x->name, y->name) || x->length != y->length) {
                n = -1;
                break;
            }
            if (memcmp(px, py, x->length) == 0)
                continue;
            unsigned be, bb;
            if (vx_quant_block(x->dtype, &be, &bb) == 0)
                for (uint64_t o = 0; o < x->length; o += bb)
                    blocks_differ += memcmp(px + o, py + o, bb) != 0;
            int ok = 0;
            for (int w = 0; want[w] && !ok; w++)
                ok = strcmp(want[w], x->name) == 0;
            CHECK_MSG(ok, "%s: tensor %s changed, which no edit touches", b, x->name);
            n++;
        }
    }
    /* a bank container's FFN operands: regions of its LYRW files */
    const vx_bank *bk = vx_container_bank(ca);
    for (size_t i = 0; i < vx_bank_tensor_count(bk) && n >= 0; i++) {
        const vx_tensor *t = vx_bank_tensor_at(bk, i), *u = vx_find(cb, t->object, t->name);
        if (!u || u->nbytes != t->nbytes || strcmp(u->segment, t->segment)) {
            fprintf(stderr, "%s: bank operand %s missing or moved\n", b, t->name);
            n = -1;
            break;
        }
        if (memcmp(u->data, t->data, t->nbytes) == 0)
            continue;
        int ok = 0;
        for (int w = 0; want[w] && !ok; w++)
            ok = strcmp(want[w], t->name) == 0;
        CHECK_MSG(ok, "%s: bank operand %s changed, which no edit touches", b, t->name);
        n++;
    }
    vx_close(ca);
    vx_close(cb);
    return n;
}

/* Run statements in dir. */
static int lql(const char *dir, const char *stmts)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/lql' -c \"%s\" 2>&1", dir, LQL_BINARY_DIR, stmts);
    return fx_run(cmd, out, sizeof out);
}


#define ZORB "INSERT INTO EDGES (entity, relation, target) VALUES (\\\"Zorbania\\\", " \
             "\\\"capital\\\", \\\"London\\\")"

/* Bind dir/name.vindex3 (with use, e.g. a PROFILE clause, or ""), run edits and COMPILE
 * into dir/cmp (out keeps the statements' output); only the tensors want may differ
 * from the base's, nwant of them counted over every representation; with recall the compiled container, bound the same way, must generate
 * " London" for the fact. */
static void edit_compile(const char *dir, const char *name, const char *use, const char *edits,
                         const char *cmp, const char *const *want, int nwant, int recall)
{
    char a[2100], b[2100], stmts[4096];
    snprintf(a, sizeof a, "%s/%s.vindex3", dir, name);
    snprintf(b, sizeof b, "%s/%s", dir, cmp);
    snprintf(stmts, sizeof stmts, "USE \\\"%s.vindex3\\\" %s JOURNAL \\\":memory:\\\"; %s; "
             "COMPILE CURRENT INTO VINDEX \\\"%s\\\";", name, use, edits, cmp);
    CHECK_MSG(lql(dir, stmts) == 0, "%s: edit + compile: %s", name, out);
    static char notes[1 << 16];
    memcpy(notes, out, sizeof notes);
    blocks_differ = 0;
    CHECK_MSG(changed(a, b, want) == nwant, "%s: %d tensors should differ", cmp, nwant);
    /* every recorded hash of the output holds: the representations over the rewritten
     * segments got fresh payload hashes (with or without down-meta in the base) */
    cJSON *rep = NULL;
    vx_err ve = {0};
    CHECK_MSG(vx_verify(b, NULL, &rep, &ve) == 0, "%s: verify: %s", cmp, ve.msg);
    cJSON_Delete(rep);
    snprintf(stmts, sizeof stmts, "USE \\\"%s\\\" %s JOURNAL \\\":memory:\\\"; INFER \\\"The "
             "capital of Zorbania is\\\" GENERATE 4;", cmp, use);
    if (recall) {
        CHECK_MSG(lql(dir, stmts) == 0, "%s: recall: %s", cmp, out);
        CHECK_HAS(out, "London");
    }
    memcpy(out, notes, sizeof out);
}

/* Encode a family fixture into dir/name.vindex3; 0 when it worked. */
static int family(const char *dir, const char *fixture, const char *name)
{
    char src[1024], base[2100];
    snprintf(src, sizeof src, "%s/models/families/%s", LQL_FIXTURE_DIR, fixture);
    snprintf(base, sizeof base, "%s/%s.vindex3", dir, name);
    return fx_encode(src, base, NULL);
}

/* qwen2-moe: an INSERT at MoE layer 2 (each of London's 4 tokens on its top-1 expert:
 * experts 7, 3, 7, 6) and a DELETE of 3 features of layer 0's expert 2. */
static void moe_qwen(const char *dir)
{
    static const char *const want[] = {
        "layers.2.ffn.experts.3.down_proj", "layers.2.ffn.experts.6.down_proj",
        "layers.2.ffn.experts.7.down_proj", "layers.0.ffn.experts.2.gate_proj",
        "layers.0.ffn.experts.2.down_proj", NULL};
    if (family(dir, "qwen2-moe", "qwen2-moe"))
        return;
    edit_compile(dir, "qwen2-moe", "", ZORB " AT LAYER 2; DELETE FROM EDGES WHERE layer = 0 "
                 "AND feature >= 64 AND feature < 67", "qwen2-moe-edited.vindex3", want, 5, 1);
    CHECK_HAS(out, "expert 7's down_proj is updated");
    CHECK_HAS(out, "5 tensors of 1 segments");
}

/* deepseek-v3-lite: an INSERT at MoE layer 1 (sigmoid, group-limited routing); then the
 * same container imported as a bank (LYRW files): a DELETE at dense layer 0 and the INSERT
 * rewrite two of its three bank files, only the edited operands' regions changed. */
static void moe_deepseek(const char *dir)
{
    static const char *const want[] = {"layers.1.ffn.experts.0.down_proj",
                                       "layers.1.ffn.experts.6.down_proj",
                                       "layers.0.ffn.gate_proj", "layers.0.ffn.down_proj",
                                       NULL};
    if (family(dir, "deepseek-v3-lite", "deepseek"))
        return;
    edit_compile(dir, "deepseek", "", ZORB " AT LAYER 1", "deepseek-edited.vindex3", want, 2, 1);
    CHECK_HAS(out, "2 tensors of 1 segments");
    /* the patch carries each op's expert; an expert the layer lacks is refused by name */
    CHECK_MSG(lql(dir, "USE \\\"deepseek.vindex3\\\" JOURNAL \\\":memory:\\\"; " ZORB " AT LAYER 1; "
                  "SAVE PATCH \\\"moe.vlp\\\";") == 0, "save: %s", out);
    char vlp[2100];
    snprintf(vlp, sizeof vlp, "%s/moe.vlp", dir);
    int nexp = 0;
    char *text = fx_patch_text(vlp, "\"expert\":\t", &nexp);
    CHECK(nexp == 2);
    char *at = text ? strstr(text, "\"expert\":\t6") : NULL;
    CHECK(at != NULL);
    if (at) {
        memcpy(at, "\"expert\":99", 11);   /* same length: '\t6' becomes '99' */
        FILE *f = fopen(vlp, "w");
        CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
        CHECK(lql(dir, "USE \\\"deepseek.vindex3\\\" JOURNAL \\\":memory:\\\"; "
                  "APPLY PATCH \\\"moe.vlp\\\";") != 0);
        CHECK_HAS(out, "moe.vlp: operation 1 (insert): expert 99: layer 1 has fewer experts");
    }
    free(text);
    char g[2100], bk[2100];
    snprintf(g, sizeof g, "%s/deepseek.vindex3", dir);
    snprintf(bk, sizeof bk, "%s/deepseek-bank.vindex3", dir);
    vx_err e = {0};
    CHECK_MSG(vx_bank_import(g, bk, 0, NULL, &e) == 0, "bank import: %s", e.msg);
    edit_compile(dir, "deepseek-bank", "", "DELETE FROM EDGES WHERE layer = 0 AND feature < 3; "
                 ZORB " AT LAYER 1", "deepseek-bank-edited.vindex3", want, 4, 1);
    CHECK_HAS(out, "4 tensors of 2 segments");
}

/* tinyllama with a q8_0 representation of its decoder stack, bound by profile. Every
 * edited tensor is rewritten in both representations (f32 exactly, q8_0 re-quantised).
 * A DELETE of features 64-66 of layer 1 (F 768, H 256): in q8_0, their columns share one
 * 32-wide block of each of down_proj's 256 rows and their gate rows are 8 blocks each, so
 * 256 + 24 = 280 of the two tensors' 12288 blocks change. An INSERT at layer 3 is one
 * gated feature (edit_memit.h): its gate and up rows (8 blocks each) and its down column
 * (one block in each of 256 rows) change, 272 of the three tensors' 18432 blocks. Byte
 * comparison agrees with both counts. */
static void quant_q8(const char *dir)
{
    CHECK_MSG(lql(dir, "EXTRACT MODEL \\\"" TINY "\\\" INTO \\\"tq.vindex3\\\" WITH INFERENCE; "
                  "USE \\\"tq.vindex3\\\"; REPRESENT \\\"target.decoder_stack\\\" AS q8_0;") == 0,
              "represent: %s", out);
    static const char *const del[] = {"layers.1.ffn.gate_proj", "layers.1.ffn.down_proj",
                                      NULL};
    edit_compile(dir, "tq", "PROFILE \\\"q8_0\\\"", "DELETE FROM EDGES WHERE layer = 1 AND "
                 "feature >= 64 AND feature < 67", "tq-del.vindex3", del, 4, 0);
    CHECK_HAS(out, "280 of 12288 blocks of the edited block-quantised tensors changed and were "
                   "quantised again (280 of them to new bytes");
    CHECK_HAS(out, "within 1e-2 (q8_0 storage)");
    CHECK(blocks_differ == 280);
    static const char *const ins[] = {"layers.3.ffn.gate_proj", "layers.3.ffn.up_proj",
                                       "layers.3.ffn.down_proj", NULL};
    edit_compile(dir, "tq", "PROFILE \\\"q8_0\\\"", ZORB, "tq-ins.vindex3", ins, 6, 1);
    CHECK_HAS(out, "272 of 18432 blocks of the edited block-quantised tensors changed and were "
                   "quantised again (272 of them to new bytes");
    CHECK(blocks_differ == 272);
}

int main(void)
{
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/test_journal_editall.d", LQL_BINARY_DIR);
    fx_rm_rf(dir);
    mkdir(dir, 0755);
    moe_qwen(dir);
    moe_deepseek(dir);
    quant_q8(dir);
    if (t_fail == 0)
        fx_rm_rf(dir);
    return T_DONE();
}
