/*
 * test_patch.c — the .vlp patch format: base64 (RFC 4648 vectors), a round trip of every
 * op kind with bit-exact vectors, a file written the way the reference writes it, and
 * hostile files (bad base64, wrong vector length, non-finite values, wrong types, unknown
 * ops, other versions) refused with their exact texts.
 */
#include "journal.h"
#include "t.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static void test_base64(void)
{
    static const char *const in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const out[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
                                      "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char *e = vx_base64_encode(in[i], strlen(in[i]));
        CHECK_STR(e, out[i]);
        free(e);
        uint8_t *d;
        size_t n;
        vx_err err = {0};
        CHECK(vx_base64_decode(out[i], strlen(out[i]), &d, &n, &err) == 0);
        CHECK(n == strlen(in[i]) && memcmp(d, in[i], n) == 0);
        free(d);
    }
    uint8_t *d;
    size_t n;
    vx_err err = {0};
    CHECK(vx_base64_decode("Zm9", 3, &d, &n, &err) == -1);
    CHECK_STR(err.msg, "bad base64: length 3 is not a multiple of 4");
    CHECK(vx_base64_decode("Zm!v", 4, &d, &n, &err) == -1);
    CHECK_STR(err.msg, "bad base64: character '!' at offset 2");
    CHECK(vx_base64_decode("Z=9v", 4, &d, &n, &err) == -1);
    CHECK_STR(err.msg, "bad base64: character '=' at offset 1");
    /* every byte value survives */
    uint8_t all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    char *e = vx_base64_encode(all, 256);
    CHECK(vx_base64_decode(e, strlen(e), &d, &n, &err) == 0 && n == 256 &&
          memcmp(d, all, 256) == 0);
    free(d);
    free(e);
}

#define H 4

static void set_vec(vx_op *op, const char *role, float base)
{
    float v[H] = {base, -base * 0.5f, 1e-30f, -3.25e7f};
    vx_op_set_vec(op, role, 1, H, v, NULL);
}

static void test_round_trip(void)
{
    vx_patch p = {0};
    p.version = 1;
    p.base_model = strdup("tiny");
    p.base_checksum = strdup("abc");
    p.created_at = strdup("2026-11-29T13:00:00Z");
    p.description = strdup("geo \"facts\"\n");
    p.tags = calloc(2, sizeof *p.tags);
    p.tags[0] = strdup("geography");
    p.tags[1] = strdup("ünïcode");
    p.ntags = 2;
    p.nops = 6;
    p.ops = calloc(6, sizeof *p.ops);
    vx_op_init(&p.ops[0], VX_OP_INSERT);
    p.ops[0].layer = 2;
    p.ops[0].feature = 77;
    p.ops[0].entity = strdup("Zorbania");
    p.ops[0].relation = strdup("capital");
    p.ops[0].target = strdup("London");
    p.ops[0].confidence = 0.875;
    p.ops[0].has_meta = 1;
    p.ops[0].meta_token = strdup(" London");
    p.ops[0].meta_id = 1234;
    p.ops[0].meta_c = 0.5;
    set_vec(&p.ops[0], "gate", 1.5f);
    set_vec(&p.ops[0], "up", 2.5f);
    set_vec(&p.ops[0], "down", -0.1f);
    vx_op_init(&p.ops[1], VX_OP_UPDATE);
    p.ops[1].layer = 0;
    p.ops[1].feature = 3;
    p.ops[1].has_meta = 1;
    p.ops[1].meta_token = strdup("x");
    p.ops[1].meta_id = 7;
    p.ops[1].meta_c = 0.25;
    vx_op_init(&p.ops[2], VX_OP_DELETE);
    p.ops[2].layer = 1;
    p.ops[2].feature = 9;
    vx_op_init(&p.ops[3], VX_OP_INSERT_KNN);
    p.ops[3].layer = 3;
    p.ops[3].entity = strdup("e");
    p.ops[3].relation = strdup("r");
    p.ops[3].target = strdup("t");
    p.ops[3].target_id = 99;
    set_vec(&p.ops[3], "key", 0.75f);
    vx_op_init(&p.ops[4], VX_OP_DELETE_KNN);
    p.ops[4].entity = strdup("e");
    vx_op_init(&p.ops[5], VX_OP_INSERT);
    p.ops[5].layer = 1;
    p.ops[5].entity = strdup("A");
    p.ops[5].target = strdup("B");
    p.ops[5].mode = strdup("memit");
    float u[H * 2], v[6 * 2];
    for (int i = 0; i < H * 2; i++)
        u[i] = (float)i * 0.1f;
    for (int i = 0; i < 12; i++)
        v[i] = -(float)i;
    vx_op_set_vec(&p.ops[5], "u", H, 2, u, NULL);
    vx_op_set_vec(&p.ops[5], "v", 6, 2, v, NULL);
    vx_op_set_vec(&p.ops[5], "key", 1, 6, v, NULL);

    vx_err err = {0};
    char path[300];
    snprintf(path, sizeof path, "%s/test_patch.%d.vlp", LQL_BINARY_DIR, (int)getpid());
    CHECK(vx_patch_write(path, &p, &err) == 0);
    /* an existing file is never replaced, and no temporary is left beside it */
    CHECK(vx_patch_write(path, &p, &err) == -1);
    char want[400], tmp[320];
    snprintf(want, sizeof want, "patch: cannot create '%s': File exists", path);
    CHECK_STR(err.msg, want);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);
    vx_patch q;
    CHECK(vx_patch_read(path, H, &q, &err) == 0);
    remove(path);
    CHECK(q.version == 1);
    CHECK_STR(q.base_model, "tiny");
    CHECK_STR(q.base_checksum, "abc");
    CHECK_STR(q.created_at, "2026-11-29T13:00:00Z");
    CHECK_STR(q.description, "geo \"facts\"\n");
    CHECK(q.author == NULL);
    CHECK(q.ntags == 2 && strcmp(q.tags[1], "ünïcode") == 0);
    CHECK(q.nops == 6);
    if (q.nops == 6) {
        CHECK(q.ops[0].kind == VX_OP_INSERT && q.ops[0].layer == 2 && q.ops[0].feature == 77);
        CHECK_STR(q.ops[0].entity, "Zorbania");
        CHECK_STR(q.ops[0].relation, "capital");
        CHECK_STR(q.ops[0].target, "London");
        CHECK_NEAR(q.ops[0].confidence, 0.875, 0);
        CHECK(q.ops[0].has_meta && q.ops[0].meta_id == 1234);
        CHECK_STR(q.ops[0].meta_token, " London");
        CHECK_NEAR(q.ops[0].meta_c, 0.5, 0);
        static const char *const roles[] = {"gate", "up", "down"};
        for (int r = 0; r < 3; r++) {
            const vx_opvec *a = vx_op_vec(&p.ops[0], roles[r]), *b = vx_op_vec(&q.ops[0], roles[r]);
            CHECK(b && b->cols == H && memcmp(a->data, b->data, H * 4) == 0);
        }
        CHECK(q.ops[1].kind == VX_OP_UPDATE && q.ops[1].nvec == 0 && q.ops[1].meta_id == 7);
        CHECK(q.ops[2].kind == VX_OP_DELETE && q.ops[2].layer == 1 && q.ops[2].feature == 9);
        CHECK(q.ops[3].kind == VX_OP_INSERT_KNN && q.ops[3].target_id == 99 &&
              vx_op_vec(&q.ops[3], "key") != NULL);
        CHECK(q.ops[4].kind == VX_OP_DELETE_KNN && q.ops[4].layer == -1);
        CHECK_STR(q.ops[4].entity, "e");
        const vx_opvec *qu = vx_op_vec(&q.ops[5], "u"), *qv = vx_op_vec(&q.ops[5], "v");
        CHECK(qu && qu->rows == H && qu->cols == 2 && memcmp(qu->data, u, sizeof u) == 0);
        CHECK(qv && qv->rows == 6 && qv->cols == 2 && memcmp(qv->data, v, sizeof v) == 0);
        CHECK_STR(q.ops[5].mode, "memit");
        /* a low-rank insert has no feature slot; its key keeps its own shape */
        CHECK(q.ops[5].feature == -1);
        const vx_opvec *qk = vx_op_vec(&q.ops[5], "key");
        CHECK(qk && qk->rows == 1 && qk->cols == 6 && memcmp(qk->data, v, 6 * 4) == 0);
    }
    /* serialising the parsed patch gives the same text */
    char *t1 = vx_patch_to_json(&p, &err), *t2 = vx_patch_to_json(&q, &err);
    CHECK_STR(t1, t2);
    free(t1);
    free(t2);
    vx_patch_free(&p);
    vx_patch_free(&q);
}

/* A file shaped as the reference writes it (serde, pretty, unknown fields ignored). */
static void test_reference_shape(void)
{
    /* 1.0f, 2.0f, -0.5f, 0.0f little-endian */
    const char *json =
        "{\n  \"version\": 1,\n  \"base_model\": \"google/gemma-3-4b-it\",\n"
        "  \"base_checksum\": null,\n  \"created_at\": \"2026-04-01T10:00:00Z\",\n"
        "  \"description\": \"medical\",\n  \"author\": null,\n  \"tags\": [],\n"
        "  \"operations\": [\n"
        "    {\"op\": \"insert\", \"layer\": 26, \"feature\": 8821, \"relation\": null,\n"
        "     \"entity\": \"aspirin\", \"target\": \"bleeding\", \"confidence\": 0.9,\n"
        "     \"gate_vector_b64\": \"AACAPwAAAEAAAAC/AAAAAA==\", \"up_vector_b64\": null,\n"
        "     \"down_meta\": {\"t\": \"bleeding\", \"i\": 5012, \"c\": 0.9}},\n"
        "    {\"op\": \"delete\", \"layer\": 3, \"feature\": 5, \"reason\": null, \"extra\": 1}\n"
        "  ]\n}\n";
    vx_patch p;
    vx_err err = {0};
    CHECK(vx_patch_parse(json, strlen(json), "ref.vlp", H, &p, &err) == 0);
    CHECK(p.nops == 2);
    if (p.nops == 2) {
        const vx_opvec *g = vx_op_vec(&p.ops[0], "gate");
        CHECK(g && g->data[0] == 1.0f && g->data[1] == 2.0f && g->data[2] == -0.5f &&
              g->data[3] == 0.0f);
        CHECK(vx_op_vec(&p.ops[0], "up") == NULL);
        CHECK(p.ops[0].relation == NULL && p.ops[0].meta_id == 5012);
        CHECK_NEAR(p.ops[0].confidence, 0.9, 1e-12);
    }
    CHECK(p.base_checksum == NULL && p.author == NULL && p.ntags == 0);
    vx_patch_free(&p);
}

static void refuse(const char *ops, int hidden, const char *want)
{
    char json[2048];
    snprintf(json, sizeof json,
             "{\"version\": 1, \"base_model\": \"m\", \"created_at\": \"now\", \"tags\": [],"
             " \"operations\": [%s]}", ops);
    vx_patch p;
    vx_err err = {0};
    int rc = vx_patch_parse(json, strlen(json), "bad.vlp", hidden, &p, &err);
    CHECK(rc == -1);
    CHECK_STR(err.msg, want);
    CHECK(p.ops == NULL && p.nops == 0);
}

static void test_hostile(void)
{
    refuse("{\"op\": \"delete\", \"layer\": 1, \"feature\": 1}, "
           "{\"op\": \"insert\", \"layer\": 0, \"feature\": 0, \"entity\": \"e\", "
           "\"target\": \"t\", \"gate_vector_b64\": \"AAC@PwAA\"}", H,
           "bad.vlp: operation 2 (insert): gate_vector_b64: bad base64: character '@' at offset 3");
    refuse("{\"op\": \"update\", \"layer\": 0, \"feature\": 0, "
           "\"down_vector_b64\": \"AACAPwAAAEAAAAC/\"}", H,
           "bad.vlp: operation 1 (update): down_vector_b64 holds 3 floats; the model's hidden "
           "size is 4");
    refuse("{\"op\": \"update\", \"layer\": 0, \"feature\": 0, \"up_vector_b64\": \"AACA\"}",
           H, "bad.vlp: operation 1 (update): up_vector_b64 holds 3 bytes, not a whole number of f32");
    /* a NaN: 0x7fc00000 little-endian */
    refuse("{\"op\": \"update\", \"layer\": 0, \"feature\": 0, "
           "\"gate_vector_b64\": \"AACAPwAAwH8AAAC/AAAAAA==\"}", H,
           "bad.vlp: operation 1 (update): gate_vector_b64 holds a non-finite value at index 1");
    refuse("{\"op\": \"frobnicate\"}", H,
           "bad.vlp: operation 1 (?): unknown op 'frobnicate' (insert, update, delete, "
           "insert_knn, delete_knn)");
    refuse("{\"op\": \"delete\", \"layer\": -1, \"feature\": 0}", H,
           "bad.vlp: operation 1 (delete): field 'layer' must be a non-negative integer below 2^31");
    refuse("{\"op\": \"delete\", \"layer\": 1.5, \"feature\": 0}", H,
           "bad.vlp: operation 1 (delete): field 'layer' must be a non-negative integer below 2^31");
    refuse("{\"op\": \"delete\", \"layer\": 1}", H,
           "bad.vlp: operation 1 (delete): missing field 'feature'");
    refuse("{\"op\": \"insert\", \"layer\": 1, \"entity\": \"e\", \"target\": \"t\"}", H,
           "bad.vlp: operation 1 (insert): missing field 'feature'");
    refuse("{\"op\": \"insert\", \"layer\": 1, \"feature\": 2, \"entity\": 5, \"target\": \"t\"}",
           H, "bad.vlp: operation 1 (insert): field 'entity' must be a string");
    refuse("{\"op\": \"insert_knn\", \"layer\": 1, \"entity\": \"e\", \"relation\": \"r\", "
           "\"target\": \"t\", \"target_id\": 3}", H,
           "bad.vlp: operation 1 (insert_knn): missing field 'key_vector_b64'");
    refuse("{\"op\": \"update\", \"layer\": 0, \"feature\": 0, \"down_meta\": {\"t\": \"x\"}}",
           H, "bad.vlp: operation 1 (update): missing field 'i'");
    /* 1e300 is a finite double but an infinite f32, the c_score's storage */
    refuse("{\"op\": \"update\", \"layer\": 0, \"feature\": 0, \"down_meta\": {\"t\": \"x\", "
           "\"i\": 1, \"c\": 1e300}}", H, "bad.vlp: operation 1 (update): field 'c' of down_meta "
           "must be a finite number (a 32-bit float: at most 3.4e38 in magnitude)");
    refuse("7", H, "bad.vlp: operation 1 (?): must be an object");
    /* a key given twice: cJSON would take the first layer, another reader the second */
    refuse("{\"op\": \"delete\", \"layer\": 1, \"layer\": 0, \"feature\": 0}", H,
           "bad.vlp: key 'layer' appears twice in an object in a list; a reader cannot tell "
           "which value is meant");
    /* a NUL would end the entity there (cJSON's strings are C strings): refused, whether
     * escaped or raw; an escaped backslash before "u0000" is six ordinary characters */
    refuse("{\"op\": \"delete_knn\", \"entity\": \"Zor\\u0000bania\"}", H,
           "bad.vlp: a string holds U+0000 (near byte 117); patch strings cannot hold NUL");
    {
        static const char raw[] = "{\"version\": 1, \"base_model\": \"m\", \"created_at\": "
                                  "\"now\", \"operations\": [{\"op\": \"delete_knn\", "
                                  "\"entity\": \"Zor\0bania\"}]}";
        vx_patch p;
        vx_err err = {0};
        CHECK(vx_patch_parse(raw, sizeof raw - 1, "raw.vlp", H, &p, &err) == -1);
        CHECK_STR(err.msg, "raw.vlp: a string holds U+0000 (near byte 105); patch strings "
                           "cannot hold NUL");
        static const char lit[] = "{\"version\": 1, \"base_model\": \"m\", \"created_at\": "
                                  "\"now\", \"operations\": [{\"op\": \"delete_knn\", "
                                  "\"entity\": \"a\\\\u0000\"}]}";
        CHECK(vx_patch_parse(lit, sizeof lit - 1, "lit.vlp", H, &p, &err) == 0);
        CHECK(p.nops == 1 && strcmp(p.ops[0].entity, "a\\u0000") == 0);
        vx_patch_free(&p);
    }
    CHECK(vx_json_nul_at("\"\\\"\\u0000\"", 11) == 3);
    CHECK(vx_json_nul_at("[\"\\\\u0000\"]", 11) == (size_t)-1);
    CHECK(vx_json_nul_at("{\"a\\u00000\": 1}", 15) == 3);
    CHECK(vx_json_nul_at("{\"a\\u0001\": 1}", 14) == (size_t)-1);

    vx_patch p;
    vx_err err = {0};
    CHECK(vx_patch_parse("{\"version\": 2}", 14, "v2.vlp", H, &p, &err) == -1);
    CHECK_STR(err.msg, "v2.vlp: unsupported patch version 2 (lql reads version 1)");
    CHECK(err.code == VX_EVERSION);
    CHECK(vx_patch_parse("{\"version\": 1, ", 15, "trunc.vlp", H, &p, &err) == -1);
    CHECK_HAS(err.msg, "trunc.vlp: not valid JSON (near byte ");
    /* whole-file refusals: text after the object, a field missing, or present but of
     * another type (said so, not as missing) */
    static const char *const whole[][2] = {
        {"{\"version\": 1, \"base_model\": \"m\", \"created_at\": \"x\", \"operations\": []} garbage",
         "text after the JSON object (near byte 71)"},
        {"{\"version\": 1, \"base_model\": \"m\", \"created_at\": \"x\"}",
         "missing array field 'operations'"},
        {"{\"version\": 1, \"base_model\": \"m\", \"created_at\": \"x\", \"operations\": {\"a\": 1}}",
         "field 'operations' must be an array"},
        {"{\"version\": \"1\", \"operations\": []}", "field 'version' must be a number"},
        {"{\"version\": 1, \"created_at\": \"x\", \"operations\": []}", "missing field 'base_model'"},
    };
    {   /* valid JSON nested past the reader's limit is said so, not called invalid */
        static char deep[4200];
        int k = snprintf(deep, sizeof deep, "{\"version\": 1, \"operations\": ");
        for (int d = 0; d < 2000; d++) deep[k + d] = '[';
        for (int d = 0; d < 2000; d++) deep[k + 2000 + d] = ']';
        deep[k + 4000] = '}';
        CHECK(vx_patch_parse(deep, strlen(deep), "d.vlp", H, &p, &err) == -1);
        CHECK_STR(err.msg, "d.vlp: nested deeper than 1000 levels (near byte 1028; the JSON "
                           "reader's limit)");
    }
    for (size_t i = 0; i < sizeof whole / sizeof *whole; i++) {
        char want[160];
        snprintf(want, sizeof want, "w.vlp: %s", whole[i][1]);
        CHECK(vx_patch_parse(whole[i][0], strlen(whole[i][0]), "w.vlp", H, &p, &err) == -1);
        CHECK_STR(err.msg, want);
    }
    CHECK(vx_patch_read("/nonexistent/x.vlp", H, &p, &err) == -1);
    CHECK_STR(err.msg, "cannot open patch ('/nonexistent/x.vlp'): No such file or directory");
    CHECK(vx_patch_write("/nonexistent/x.vlp", &p, &err) == -1);
    CHECK_STR(err.msg, "patch: cannot create '/nonexistent/x.vlp': No such file or directory");

    /* op helpers refuse bad input */
    vx_op op;
    vx_op_init(&op, VX_OP_UPDATE);
    float f[2] = {0};
    CHECK(vx_op_set_vec(&op, "weird", 1, 2, f, &err) == -1);
    CHECK_STR(err.msg, "unknown vector role 'weird' (gate, up, down, key, u, v)");
    CHECK(vx_op_set_vec(&op, "gate", 0, 2, f, &err) == -1);
    CHECK_STR(err.msg, "vector 'gate' has a bad shape [0, 2]");
    CHECK(vx_op_set_vec(&op, "gate", 1, 2, f, &err) == 0 && op.nvec == 1);
    CHECK(vx_op_set_vec(&op, "gate", 1, 2, f, &err) == 0 && op.nvec == 1);
    vx_op_clear(&op);
}

int main(void)
{
    test_base64();
    test_round_trip();
    test_reference_shape();
    test_hostile();
    return T_DONE();
}
