/*
 * test_container.c — the reader on well-formed containers built by hand: geometry,
 * lookup, borrowed views with the stored values, index identity, unknown fields kept,
 * and vx_verify clean / corrupted payload / changed source.
 */
#include "t.h"
#include "test_container_fx.h"

static void test_open(void)
{
    fx f;
    fx_init(&f);
    fx_write(&f);
    vx_container *c = NULL;
    vx_err err = {0};
    CHECK(vx_open(f.dir, &c, &err) == 0);
    if (!c) {
        fprintf(stderr, "open: %s\n", err.msg);
        fx_free(&f);
        return;
    }
    CHECK_STR(vx_dir(c), f.dir);
    CHECK(vx_version(c) == 4);
    CHECK(vx_container_shape(c) == VX_SHAPE_GRAPH);
    CHECK(vx_tensor_count(c) == 21);
    CHECK_STR(cJSON_GetObjectItem(vx_component(c), "id")->valuestring, "target");
    CHECK(cJSON_GetObjectItem(vx_graph_json(c), "future_field") != NULL);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(vx_index_json(c), "unknown_future_key")) == 3);

    /* index identity = sha256 of the exact bytes on disk */
    char path[PATH_MAX], hex[65];
    fx_path(&f, "index.json", path, sizeof path);
    CHECK(vx_sha256_file(path, hex, &err) == 0);
    CHECK_STR(vx_index_sha256(c), hex);

    const vx_tensor *t = vx_find(c, "target.decoder_stack", "layers.1.attn.k_proj");
    CHECK(t != NULL);
    if (t) {
        CHECK_STR(t->object, "target.decoder_stack");
        CHECK_STR(t->segment, "segments/target.decoder_stack.bin");
        CHECK(t->dtype == VX_F32 && t->ndim == 2 && t->shape[0] == 4 && t->shape[1] == 8);
        CHECK(t->nbytes == 128 && vx_tensor_nelems(t) == 32);
        CHECK(((uintptr_t)t->data & 63) == 0);
        const float *v = t->data;
        CHECK(v[0] == fx_value(1 + 9 + 2, 0) && v[31] == fx_value(1 + 9 + 2, 31));
    }
    t = vx_findf(c, "target.decoder_stack", "layers.%d.ffn.down_proj", 0);
    CHECK(t && t->dtype == VX_BF16 && t->shape[0] == 8 && t->shape[1] == 16 && t->nbytes == 256);
    if (t) {
        float row[16];
        CHECK(vx_row_to_f32(t->dtype, (const char *)t->data + 32, row, 16) == 0);
        CHECK(row[0] == fx_value(9, 16) && row[15] == fx_value(9, 31));
    }
    CHECK(vx_find(c, "target.output_head", "lm_head") != NULL);
    CHECK(vx_find(c, "target.embedding", "lm_head") == NULL);      /* names are per object */
    CHECK(vx_find(c, "target.decoder_stack", "layers.2.attn.q_proj") == NULL);
    CHECK(vx_find(c, "nope", "weight") == NULL);
    CHECK(vx_findf(c, "target.decoder_stack", "%0300d", 1) == NULL);
    /* table order: embedding, decoder stack, output head */
    CHECK_STR(vx_tensor_at(c, 0)->name, "weight");
    CHECK_STR(vx_tensor_at(c, 1)->name, "layers.0.attn_norm");
    CHECK_STR(vx_tensor_at(c, 20)->name, "lm_head");
    CHECK(vx_tensor_at(c, 21) == NULL);
    for (size_t i = 0; i < vx_tensor_count(c); i++) {
        const vx_tensor *a = vx_tensor_at(c, i);
        CHECK(vx_find(c, a->object, a->name) == a);
    }
    char out[PATH_MAX];
    CHECK(vx_resolve(c, "segments/target.embedding.bin", out, sizeof out, &err) == 0);
    CHECK(vx_resolve(c, "../x", out, sizeof out, &err) == -1 && err.code == VX_EPATH);
    vx_close(c);
    vx_close(NULL);
    fx_free(&f);
}

static void test_version3_and_templates(void)
{
    fx f;
    fx_init(&f);
    fx_set_num(f.index, "version", 3);
    /* A per-layer template binding expands over num_layers. */
    cJSON *b = cJSON_GetObjectItem(fx_object(&f, 1), "source_bindings");
    cJSON_AddStringToObject(b, "layers.{i}.attn.q_proj", "model.layers.{i}.self_attn.q_proj.weight");
    fx_write(&f);
    vx_container *c = NULL;
    vx_err err = {0};
    CHECK(vx_open(f.dir, &c, &err) == 0);
    CHECK(c && vx_version(c) == 3);
    vx_close(c);
    /* A third layer makes the template demand layers.2.* */
    cJSON *comp = cJSON_GetArrayItem(cJSON_GetObjectItem(f.graph, "components"), 0);
    fx_set_num(comp, "num_layers", 3);
    fx_set_num(f.index, "num_layers", 3);   /* index.json's copy follows the graph */
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "system graph: component.layers must list 3 layers");
    cJSON *ls = cJSON_GetObjectItem(comp, "layers");
    cJSON_AddItemToArray(ls, cJSON_Duplicate(cJSON_GetArrayItem(ls, 0), 1));
    fx_write(&f);
    CHECK_STR(fx_open_err(&f),
              "missing operand 'layers.2.attn.q_proj' (object 'target.decoder_stack', layer 2): "
              "not in segment 'segments/target.decoder_stack.bin'");
    fx_free(&f);
}

static void test_verify(void)
{
    fx f;
    fx_init(&f);
    fx_write(&f);
    cJSON *rep = NULL;
    vx_err err = {0};
    CHECK(vx_verify(f.dir, NULL, &rep, &err) == 0);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(rep, "ok")));
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "source"), "status")->valuestring, "checked");
    cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "representations"), 1);
    CHECK_STR(cJSON_GetObjectItem(r0, "representation")->valuestring, "target.decoder_stack.f32");
    CHECK_STR(cJSON_GetObjectItem(r0, "payload")->valuestring, "ok");
    CHECK_STR(cJSON_GetObjectItem(r0, "source")->valuestring, "ok");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(rep, "segments")) == 3);
    cJSON_Delete(rep);

    /* Source gone (and not given): the container side is still verified. */
    char path[PATH_MAX + 32], moved[128];
    snprintf(path, sizeof path, "%s", f.src);
    snprintf(moved, sizeof moved, "%s.gone", f.src);
    CHECK(rename(path, moved) == 0);
    CHECK(vx_verify(f.dir, NULL, &rep, &err) == 0);
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "source"), "status")->valuestring, "absent");
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "representations"), 0),
                                  "source")->valuestring, "not checked");
    cJSON_Delete(rep);
    /* ... and given explicitly from elsewhere */
    CHECK(vx_verify(f.dir, moved, &rep, &err) == 0);
    cJSON_Delete(rep);

    /* A source directory given but not there: verify fails saying so. */
    CHECK(vx_verify(f.dir, "/nonexistent/ckpt", &rep, &err) == -1);
    CHECK_HAS(err.msg, "/nonexistent/ckpt");
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "source"), "status")->valuestring, "unreadable");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(rep, "ok")));
    cJSON_Delete(rep);

    /* A changed source tensor: source != recorded for that representation only. */
    snprintf(path, sizeof path, "%s/model.safetensors", moved);
    FILE *fp = fopen(path, "r+b");
    fseek(fp, -3, SEEK_END);     /* inside lm_head, the last tensor written */
    fputc(0x55, fp);
    fclose(fp);
    CHECK(vx_verify(f.dir, moved, &rep, &err) == -1);
    CHECK(err.code == VX_EVERIFY);
    CHECK_STR(err.msg, "representation 'target.output_head.f32': source != recorded (object 'target.output_head')");
    cJSON *reps = cJSON_GetObjectItem(rep, "representations");
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(reps, 0), "source")->valuestring, "ok");
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(reps, 2), "source")->valuestring, "checkpoint != recorded");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(rep, "ok")));
    cJSON_Delete(rep);
    fx_rm(moved);

    /* A flipped payload byte: the segment, and the tensor holding the byte, are named. */
    fx_path(&f, "segments/target.decoder_stack.bin", path, sizeof path);
    fp = fopen(path, "r+b");
    fseek(fp, -1, SEEK_END);     /* last byte of layers.1.ffn.down_proj */
    int ch = fgetc(fp);
    fseek(fp, -1, SEEK_END);
    fputc(ch ^ 1, fp);
    fclose(fp);
    CHECK(vx_verify(f.dir, NULL, &rep, &err) == -1);
    CHECK(err.code == VX_EVERIFY);
    CHECK_STR(err.msg, "segment 'segments/target.decoder_stack.bin': encoded != recorded "
                       "(first differing tensor 'layers.1.ffn.down_proj')");
    CHECK_STR(cJSON_GetObjectItem(rep, "error")->valuestring, err.msg);
    cJSON *s1 = cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "segments"), 1);
    CHECK_STR(cJSON_GetObjectItem(s1, "status")->valuestring, "encoded != recorded");
    CHECK_STR(cJSON_GetObjectItem(s1, "tensor")->valuestring, "layers.1.ffn.down_proj");
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "representations"), 1),
                                  "payload")->valuestring, "encoded != recorded");
    cJSON_Delete(rep);
    fx_free(&f);

    /* A byte outside every tensor (header padding, still valid JSON whitespace). */
    fx_init(&f);
    fx_write(&f);
    fx_path(&f, "segments/target.output_head.bin", path, sizeof path);
    fp = fopen(path, "r+b");
    unsigned char hdr[64];
    CHECK(fread(hdr, 1, 8, fp) == 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | hdr[i];
    fseek(fp, (long)(8 + hl - 1), SEEK_SET);   /* the last padding byte */
    CHECK(fgetc(fp) == ' ');
    fseek(fp, (long)(8 + hl - 1), SEEK_SET);
    fputc('\t', fp);
    fclose(fp);
    CHECK(vx_verify(f.dir, NULL, &rep, &err) == -1);
    CHECK_STR(err.msg, "segment 'segments/target.output_head.bin': encoded != recorded "
                       "(outside the tensors: every tensor matches its sha256)");
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "representations"), 2),
                                  "payload")->valuestring, "ok");
    cJSON_Delete(rep);
    fx_free(&f);

    /* Without per-tensor hashes the segment is still named, with both hashes' prefixes. */
    fx_init(&f);
    f.tensor_sha = 0;
    fx_write(&f);
    fx_path(&f, "segments/target.embedding.bin", path, sizeof path);
    fp = fopen(path, "r+b");
    fseek(fp, -1, SEEK_END);
    fputc(0x7f, fp);
    fclose(fp);
    CHECK(vx_verify(f.dir, NULL, &rep, &err) == -1);
    CHECK_HAS(err.msg, "segment 'segments/target.embedding.bin': encoded != recorded (sha256 ");
    cJSON_Delete(rep);
    fx_free(&f);
}

/* The typed graph shape: docs/lql/GRAPH.md's worked example (attention with its own rope,
 * Gated DeltaNet with MoE, Mamba2 without a channel mixer) read at open. */
static void test_graph_shape(void)
{
    fx f;
    fx_init(&f);
    cJSON *comp = cJSON_GetArrayItem(cJSON_GetObjectItem(f.graph, "components"), 0);
    cJSON *ex = cJSON_GetObjectItem(comp, "execution");
    cJSON_ReplaceItemInObject(ex, "moe", cJSON_Parse("{\"experts\": 4, \"top_k\": 2, \"expert_intermediate\": 8}"));
    cJSON_ReplaceItemInObject(ex, "gated_deltanet", cJSON_CreateObject());
    cJSON_ReplaceItemInObject(ex, "mamba2", cJSON_CreateObject());
    fx_set_num(comp, "num_layers", 3);
    fx_set_num(f.index, "num_layers", 3);
    cJSON_ReplaceItemInObject(comp, "layers", cJSON_Parse(
        "[{\"operator\": \"softmax_attention\", \"window\": 8, \"ffn\": \"dense\","
        "  \"rope\": {\"style\": \"rotate_half\", \"theta\": 10000.0, \"rotary_dim\": 4, \"scaling\": null},"
        "  \"state\": [{\"name\": \"k\", \"dtype\": \"f32\", \"shape\": [2, 16], \"per_token\": true},"
        "            {\"name\": \"v\", \"dtype\": \"f32\", \"shape\": [2, 16], \"per_token\": true}]},"
        " {\"operator\": \"gated_deltanet\", \"window\": null, \"ffn\": \"moe\", \"rope\": null,"
        "  \"state\": [{\"name\": \"conv\", \"dtype\": \"f32\", \"shape\": [3, 128], \"per_token\": false},"
        "            {\"name\": \"recurrent\", \"dtype\": \"f32\", \"shape\": [4, 16, 24], \"per_token\": false}]},"
        " {\"operator\": \"mamba2\", \"window\": null, \"ffn\": \"none\", \"rope\": null,"
        "  \"state\": [{\"name\": \"conv\", \"dtype\": \"f32\", \"shape\": [3, 160], \"per_token\": false},"
        "            {\"name\": \"ssm\", \"dtype\": \"bf16\", \"shape\": [8, 16, 16], \"per_token\": false}]}]"));
    fx_write(&f);
    vx_container *c = NULL;
    vx_err err = {0};
    CHECK_MSG(vx_open(f.dir, &c, &err) == 0, "%s", err.msg);
    const vx_graph_shape *g = c ? vx_shape_of(c) : NULL;
    CHECK(g && vx_shape_count(c) == 1 && vx_shape_component(c, "target") == g &&
          vx_shape_component(c, NULL) == g && !vx_shape_component(c, "mtp"));
    if (g) {
        CHECK(g->layers == 3 && g->hidden == 8 && g->vocab == 16 && g->context == 32);
        CHECK(g->heads == 2 && g->kv_heads == 1 && g->head_dim == 4 && g->intermediate == 16);
        CHECK(g->experts == 4 && g->top_k == 2 && g->expert_intermediate == 8);
        CHECK(g->layer[0].mixer == VX_MIXER_ATTENTION && g->layer[0].channel == VX_CHANNEL_DENSE &&
              g->layer[0].window == 8 && g->layer[0].features == 16);
        CHECK(g->layer[1].mixer == VX_MIXER_DELTANET && g->layer[1].channel == VX_CHANNEL_MOE &&
              g->layer[1].features == 32 && g->layer[1].nstate == 2);
        CHECK(g->layer[2].mixer == VX_MIXER_MAMBA2 && g->layer[2].channel == VX_CHANNEL_NONE &&
              g->layer[2].features == 0);
        CHECK(g->layer[0].state_per_token == 256 && g->layer[0].state_fixed == 0);
        CHECK(g->layer[1].state_per_token == 0 && g->layer[1].state_fixed == 7680);
        /* bf16 ssm: 8·16·16·2 */
        CHECK(g->layer[2].state_fixed == 1920 + 4096 && g->layer[2].state[1].dtype == VX_BF16 &&
              g->layer[2].state[1].ndim == 3 && g->layer[2].state[1].elems == 2048);
        CHECK(g->state_per_token == 256 && g->state_fixed == 7680 + 6016 && g->features == 48);
        CHECK_STR(vx_mixer_name(g->layer[1].mixer), "gated_deltanet");
        CHECK_STR(vx_channel_name(g->layer[2].channel), "none");
    }
    vx_close(c);
    /* a window or rope on a recurrent layer, a region declared twice, too many regions */
    cJSON *l2 = cJSON_GetArrayItem(cJSON_GetObjectItem(comp, "layers"), 2);
    cJSON_ReplaceItemInObject(l2, "window", cJSON_CreateNumber(4));
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "layer 2: a window on operator 'mamba2', which does not attend");
    cJSON_ReplaceItemInObject(l2, "window", cJSON_CreateNull());
    cJSON_ReplaceItemInObject(l2, "rope", cJSON_CreateString("x"));   /* nor a rope of its own */
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "layer 2: a rope on operator 'mamba2', which does not attend");
    cJSON_ReplaceItemInObject(l2, "rope", cJSON_CreateNull());
    cJSON *st = cJSON_GetObjectItem(l2, "state");
    cJSON_AddItemToArray(st, cJSON_Duplicate(cJSON_GetArrayItem(st, 0), 1));
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "layer 2: state region 'conv' is declared twice");
    for (int i = 0; i < 3; i++) cJSON_AddItemToArray(st, cJSON_Duplicate(cJSON_GetArrayItem(st, 0), 1));
    fx_write(&f);
    CHECK_STR(fx_open_err(&f), "layer 2: 6 state regions (at most 4)");
    fx_free(&f);
}

int main(void)
{
    test_open();
    test_graph_shape();
    test_version3_and_templates();
    test_verify();
    return T_DONE();
}
