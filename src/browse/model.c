/*
 * model.c — the browse model: a container opened for browsing (FFN shape, tokenizer
 * snapshot, down-meta, bands, optional labels), plus the query vectors WALK, DESCRIBE and
 * SELECT scan with, and the effective (overlay-aware) metadata of a feature.
 */
#include "brw_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bands from index.browse.layer_bands when recorded and valid; else from depth, and
 * m->bands_note says why the recorded ones were not used (STATS shows it: a container
 * whose bands are silently replaced would label its layers with no sign of it). */
static void read_bands(brw_model *m)
{
    brw_bands_for_depth(m->s.layers, -1, -1, m->band);
    const cJSON *br = cJSON_GetObjectItemCaseSensitive(vx_index_json(m->c), "browse");
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(br, "layer_bands");
    if (!lb)
        return;
    if (!cJSON_IsObject(lb)) {
        snprintf(m->bands_note, sizeof m->bands_note, "it is not an object");
        return;
    }
    int band[3][2];
    for (int b = 0; b < 3; b++) {
        const char *name = brw_band_name(b);
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(lb, name);
        band[b][0] = band[b][1] = -1;
        if (cJSON_IsNull(r) || !r)
            continue;
        const cJSON *a = cJSON_GetArrayItem(r, 0), *z = cJSON_GetArrayItem(r, 1);
        if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) != 2 || !cJSON_IsNumber(a) ||
            !cJSON_IsNumber(z)) {
            snprintf(m->bands_note, sizeof m->bands_note, "'%s' is not [first, last]", name);
            return;
        }
        if (a->valuedouble == -1 && z->valuedouble == -1)
            continue;   /* [-1, -1]: no such band, as null */
        if (a->valuedouble < 0 || z->valuedouble < a->valuedouble ||
            z->valuedouble >= m->s.layers || a->valuedouble != (int)a->valuedouble ||
            z->valuedouble != (int)z->valuedouble) {
            snprintf(m->bands_note, sizeof m->bands_note,
                     "'%s' [%.17g, %.17g] is not a layer range in 0-%d", name, a->valuedouble,
                     z->valuedouble, m->s.layers - 1);
            return;
        }
        band[b][0] = (int)a->valuedouble;
        band[b][1] = (int)z->valuedouble;
    }
    memcpy(m->band, band, sizeof band);
}

static cJSON *read_json_file(const char *path)
{
    vx_err e;
    FILE *f = vx_fopen_regular(path, "a label file", &e);
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    cJSON *j = NULL;
    if (n > 0 && n < (1L << 30)) {
        char *buf = malloc((size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
            buf[n] = 0;
            j = cJSON_Parse(buf);
        }
        free(buf);
    }
    fclose(f);
    return j;
}

const char *const brw_label_files[] = {"feature_labels.json", "relation_clusters.json",
                                       "feature_clusters.jsonl", NULL};

/* feature_labels.json's two spellings of a feature's key: "L{l}_F{f}" and "{l}:{f}". */
static void label_keys(int layer, int64_t feature, char k1[64], char k2[64])
{
    snprintf(k1, 64, "L%d_F%lld", layer, (long long)feature);
    snprintf(k2, 64, "%d:%lld", layer, (long long)feature);
}

/* m->label_of from feature_labels.json, so a label costs one load, not a search of the
 * object's keys (SHOW RELATIONS asks for every feature). Only the two spellings as
 * label_keys writes them count; "L…_F…" wins over "l:f" and the first of equal keys wins,
 * as looking the keys up did. Anything but an object is ignored (no labels). */
static int index_labels(brw_model *m)
{
    if (!cJSON_IsObject(m->labels)) {
        cJSON_Delete(m->labels);
        m->labels = NULL;
        return 0;
    }
    m->label_of = calloc((size_t)m->s.layers + 1, sizeof *m->label_of);
    if (!m->label_of)
        return -1;
    for (int form = 0; form < 2; form++) {
        const cJSON *it;
        cJSON_ArrayForEach(it, m->labels) {
            int l, n = 0;
            long long f;
            char k[2][64];
            if (!cJSON_IsString(it) || !it->string ||
                (form == 0 ? sscanf(it->string, "L%d_F%lld%n", &l, &f, &n)
                           : sscanf(it->string, "%d:%lld%n", &l, &f, &n)) != 2 ||
                l < 0 || l >= m->s.layers || f < 0 || f >= m->s.layer[l].features)
                continue;
            label_keys(l, f, k[0], k[1]);
            if (strcmp(it->string, k[form]) != 0)
                continue;
            if (!m->label_of[l] &&
                !(m->label_of[l] = calloc((size_t)m->s.layer[l].features, sizeof(char *))))
                return -1;
            if (!m->label_of[l][f])
                m->label_of[l][f] = it->valuestring;
        }
    }
    return 0;
}

/* relation_clusters.json ({labels: [...]}) plus feature_clusters.jsonl (one {"l", "f",
 * "c"} per line): optional, and ignored when either is absent or malformed. */
static void read_clusters(brw_model *m)
{
    char path[4096];
    vx_err e;
    if (vx_resolve(m->c, brw_label_files[1], path, sizeof path, &e) != 0)
        return;
    m->clusters = read_json_file(path);
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m->clusters, "labels")) ||
        vx_resolve(m->c, brw_label_files[2], path, sizeof path, &e) != 0)
        goto drop;
    FILE *f = vx_fopen_regular(path, "a label file", &e);
    if (!f)
        goto drop;
    m->cluster_of = calloc((size_t)m->s.layers + 1, sizeof *m->cluster_of);
    for (int l = 0; m->cluster_of && l < m->s.layers; l++) {
        m->cluster_of[l] = malloc(((size_t)m->s.layer[l].features + 1) * sizeof(int32_t));
        if (!m->cluster_of[l])
            break;
        for (int64_t i = 0; i < m->s.layer[l].features; i++)
            m->cluster_of[l][i] = -1;
    }
    char line[512];
    while (m->cluster_of && fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "l");
        const cJSON *fe = cJSON_GetObjectItemCaseSensitive(j, "f");
        const cJSON *cl = cJSON_GetObjectItemCaseSensitive(j, "c");
        if (cJSON_IsNumber(l) && cJSON_IsNumber(fe) && cJSON_IsNumber(cl) &&
            l->valuedouble >= 0 && l->valuedouble < m->s.layers && fe->valuedouble >= 0 &&
            fe->valuedouble < (double)m->s.layer[(int)l->valuedouble].features &&
            cl->valuedouble >= 0 && cl->valuedouble < 1e9 && m->cluster_of[(int)l->valuedouble])
            m->cluster_of[(int)l->valuedouble][(int64_t)fe->valuedouble] = (int32_t)cl->valuedouble;
        cJSON_Delete(j);
    }
    fclose(f);
    return;
drop:
    cJSON_Delete(m->clusters);
    m->clusters = NULL;
}

/* First touch of the weights browse reads (brw_shape_tensors): refused when their bytes
 * differ from the recorded hashes (eng_tensors_check, once per container and process). The
 * down rows are only read by the encode hook and COMPILE. */
static int check_bound(const brw_shape *s, const vx_container *c, vx_err *err)
{
    size_t n;
    const vx_tensor **t = brw_shape_tensors(s, &n);
    if (!t) return vx_errf(err, VX_ENOMEM, "integrity check: out of memory");
    int rc = eng_tensors_check(c, t, n, err);
    free(t);
    return rc;
}

int brw_open(vx_container *c, brw_model **out, vx_err *err)
{
    return brw_open_tok(c, NULL, out, err);
}

int brw_open_tok(vx_container *c, const eng_tokenizer *tok, brw_model **out, vx_err *err)
{
    *out = NULL;
    brw_model *m = calloc(1, sizeof *m);
    if (!m)
        return vx_errf(err, VX_ENOMEM, "browse: out of memory");
    m->c = c;
    /* the engine's plan is the one reading of graph and operands: browse answers only for
     * a container the model runs from (an expert count or feature width that disagrees with
     * the stored rows, or an operand nothing reads, is refused here as by INFER) */
    eng_model *plan;
    if (eng_model_bind_tok(c, NULL, &plan, err) != 0)
        goto fail;
    eng_model_free(plan);
    if (brw_shape_read(c, &m->s, err) != 0 || check_bound(&m->s, c, err) != 0)
        goto fail;
    if (!tok) {
        if (vx_snapshot_check(c, NULL, err) != 0)
            goto fail;
        if (eng_tok_load_dir(vx_dir(c), &m->own_tok, err) != 0) {
            if (err && err->code == VX_EMISSING)
                vx_errf(err, VX_EMISSING, "browse needs the container's tokenizer (its token texts), "
                        "and '%s' has no tokenizer.json", vx_dir(c));
            goto fail;
        }
        tok = m->own_tok;
    }
    m->tok = tok;
    /* sized by what the tokenizer can name: a graph's vocab_size alone (sparse rows of a
     * hostile container) would cost a pointer per id */
    size_t tv = eng_tok_vocab_size(tok);
    m->ntext = (size_t)m->s.vocab < tv ? m->s.vocab : (int32_t)tv;
    m->text = calloc((size_t)m->ntext + 1, sizeof *m->text);
    m->blank = calloc((size_t)m->ntext + 1, 1);
    if (!m->text || !m->blank) {
        vx_errf(err, VX_ENOMEM, "browse: out of memory");
        goto fail;
    }
    for (int32_t id = 0; id < m->ntext; id++) {
        vx_err e2;
        size_t len = 0;
        if (eng_tok_decode_after(m->tok, &id, 1, 0, &m->text[id], &len, &e2) != 0)
            m->text[id] = NULL;
        /* a lone byte of a multi-byte character decodes to U+FFFD, "<0x00>" or
         * byte-level "Ā" to a NUL the C string would hide, and "\n" or " " to nothing once
         * the token columns trim it: show the piece ("<0xE2>", "Ā", "<0x0A>", "Ċ")
         * instead, so distinct tokens stay distinguishable */
        const char *piece = eng_tok_piece(m->tok, id);
        m->blank[id] = m->text[id] && !m->text[id][strspn(m->text[id], " \t\n\r")];
        if (m->text[id] && piece && *piece &&
            (strstr(m->text[id], "\xEF\xBF\xBD") || strlen(m->text[id]) != len || m->blank[id])) {
            char *p = strdup(piece);
            if (p) {
                free(m->text[id]);
                m->text[id] = p;
            }
        }
    }
    read_bands(m);
    char path[4096];
    const cJSON *br = cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "browse");
    const cJSON *dm = cJSON_GetObjectItemCaseSensitive(br, "down_meta");
    if (cJSON_IsString(dm)) {
        if (vx_resolve(c, dm->valuestring, path, sizeof path, err) != 0)
            goto fail;
        /* first-touch integrity, as for tensors: the records are hashed at encode and COMPILE */
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(br, "down_meta_sha256");
        const char *want = cJSON_IsString(sum) ? sum->valuestring : NULL;
        char hex[65];
        if (want && vx_sha256_file(path, hex, err) != 0)
            goto fail;
        if (want && strcmp(hex, want) != 0) {
            vx_errf(err, VX_EVERIFY, "'%s' is corrupted: its sha256 does not match the one "
                    "index.json records (vindex verify DIR checks every byte)", dm->valuestring);
            goto fail;
        }
        if (brw_dmet_load(path, &m->dmet, err) != 0)
            goto fail;
        if (brw_dmet_layers(m->dmet) != m->s.layers) {
            vx_errf(err, VX_EFORMAT, "browse: down_meta has %d layers, the model %d",
                    brw_dmet_layers(m->dmet), m->s.layers);
            goto fail;
        }
        for (int l = 0; l < m->s.layers; l++)
            if (brw_dmet_count(m->dmet, l) != m->s.layer[l].features) {
                vx_errf(err, VX_EFORMAT, "browse: down_meta layer %d has %lld records, the "
                        "model %lld features", l, (long long)brw_dmet_count(m->dmet, l),
                        (long long)m->s.layer[l].features);
                goto fail;
            }
        if (brw_dmet_check_ids(m->dmet, m->s.vocab, err) != 0)
            goto fail;
    } else {
        vx_err why = {0};
        if (brw_downmeta_check(c, &m->s, &why) == 0) {
            if (brw_ondemand_new(m, err) != 0)
                goto fail;
        } else
            snprintf(m->no_meta_why, sizeof m->no_meta_why, "%s", why.msg);
    }
    vx_err e3;
    if (vx_resolve(c, brw_label_files[0], path, sizeof path, &e3) == 0)
        m->labels = read_json_file(path);
    if (index_labels(m) != 0) {
        vx_errf(err, VX_ENOMEM, "browse: out of memory indexing feature_labels.json");
        goto fail;
    }
    read_clusters(m);
    *out = m;
    return 0;
fail:
    brw_close(m);
    return -1;
}

void brw_close(brw_model *m)
{
    if (!m)
        return;
    if (m->text)
        for (int32_t i = 0; i < m->ntext; i++)
            free(m->text[i]);
    free(m->text);
    free(m->blank);
    brw_dmet_free(m->dmet);
    brw_ondemand_free(m->od);
    eng_tok_free(m->own_tok);
    cJSON_Delete(m->labels);
    if (m->label_of)
        for (int l = 0; l < m->s.layers; l++)
            free((void *)m->label_of[l]);
    free((void *)m->label_of);
    cJSON_Delete(m->clusters);
    if (m->cluster_of)
        for (int l = 0; l < m->s.layers; l++)
            free(m->cluster_of[l]);
    free(m->cluster_of);
    brw_shape_free(&m->s);
    free(m);
}

int brw_layers(const brw_model *m) { return m->s.layers; }
int brw_hidden(const brw_model *m) { return m->s.hidden; }
float brw_embed_scale(const brw_model *m) { return m->s.embed_scale; }
const eng_tokenizer *brw_tokenizer(const brw_model *m) { return m->tok; }
int brw_meta_source(const brw_model *m)
{
    return m->dmet ? BRW_META_STORED : m->od ? BRW_META_ON_DEMAND : BRW_META_NONE;
}

int brw_meta_refuse(const brw_model *m, vx_err *err)
{
    return vx_errf(err, VX_EMISSING, "the container has no down-meta (browse/down_meta.bin) "
                   "and it cannot be computed: %s", m->no_meta_why);
}

int64_t brw_features(const brw_model *m, int layer)
{
    return layer >= 0 && layer < m->s.layers ? m->s.layer[layer].features : 0;
}

int brw_vocab(const brw_model *m) { return m->s.vocab; }

int brw_expert_span(const brw_model *m, int layer, int expert, int64_t *first, int64_t *rows)
{
    if (layer < 0 || layer >= m->s.layers)
        return -1;
    const brw_layer *bl = &m->s.layer[layer];
    if (expert < 0 || bl->n_parts < 2 || expert >= bl->n_parts)
        return -1;
    *first = bl->parts[expert].first;
    *rows = bl->parts[expert].rows;
    return 0;
}

static size_t plain_size(vx_dtype t)
{
    return t == VX_F32 ? 4 : t == VX_F16 || t == VX_BF16 ? 2 : 0;
}

int brw_down_column(const brw_model *m, int layer, int64_t f, float *col)
{
    if (layer < 0 || layer >= m->s.layers)
        return -1;
    const brw_layer *bl = &m->s.layer[layer];
    const brw_part *pt = NULL;
    for (int p = 0; p < bl->n_parts && !pt; p++)
        if (f >= bl->parts[p].first && f < bl->parts[p].first + bl->parts[p].rows)
            pt = &bl->parts[p];
    const vx_tensor *dn = pt ? pt->down : NULL;
    const int H = m->s.hidden;
    if (!dn || dn->ndim != 2 || dn->shape[0] != H || f - pt->first >= dn->shape[1])
        return -1;
    const int64_t lf = f - pt->first;
    /* f32/f16/bf16 or a block codec (GPT-OSS's MXFP4 experts, a quantised profile), its
     * element read as the kernels read it */
    unsigned be, bb;
    uint64_t rb = 0;
    if (col && ((!plain_size(dn->dtype) && vx_quant_block(dn->dtype, &be, &bb) < 0) ||
                vx_dtype_nbytes(dn->dtype, (uint64_t)dn->shape[1], 1, &rb) < 0))
        return -1;
    for (int h = 0; col && h < H; h++)
        col[h] = eng_row_elem(dn->dtype, (const uint8_t *)dn->data + (uint64_t)h * rb, (int)lf);
    return 0;
}

int brw_top_token(const brw_model *m, const float *col, int32_t *id, float *score)
{
    const vx_tensor *E = m->s.embed;
    const int H = m->s.hidden, V = m->s.vocab;
    const size_t esz = E ? plain_size(E->dtype) : 0;
    if (esz == 0)
        return -1;
    if (!col)
        return 0;
    int32_t best = -1;
    float bx = -INFINITY;
    for (int v = 0; v < V; v++) {
        float x = eng_row_dot(E->dtype, (const uint8_t *)E->data + (size_t)v * H * esz, col, H);
        if (x > bx) {
            bx = x;
            best = v;
        }
    }
    *id = best;
    *score = bx;
    return 0;
}

void brw_bands(const brw_model *m, int band[3][2])
{
    memcpy(band, m->band, sizeof m->band);
}

int brw_band_of(const brw_model *m, int layer)
{
    for (int b = 0; b < 3; b++)
        if (m->band[b][0] >= 0 && layer >= m->band[b][0] && layer <= m->band[b][1])
            return b;
    return -1;
}

const char *brw_token_text(const brw_model *m, int32_t id)
{
    if (id < 0 || id >= m->ntext || !m->text[id])
        return "";
    return m->text[id];
}

int brw_token_blank(const brw_model *m, int32_t id)
{
    return id >= 0 && id < m->ntext && m->blank[id];
}


/* Is (layer, feature) tombstoned in ov? */
static int tombstoned(const eng_overlay *ov, int layer, int64_t feature)
{
    for (size_t i = 0; ov && i < ov->n_edits; i++)
        if (ov->edits[i].tombstone && ov->edits[i].layer == layer &&
            ov->edits[i].feature == feature)
            return 1;
    return 0;
}

/* The relation ov's insert named for (layer, feature), or NULL. */
static const char *inserted_relation(const eng_overlay *ov, int layer, int64_t feature)
{
    for (size_t i = 0; ov && i < ov->n_meta; i++)
        if (ov->meta[i].relation && ov->meta[i].layer == layer && ov->meta[i].feature == feature)
            return ov->meta[i].relation;
    return NULL;
}

static int names_relations(const eng_overlay *ov)
{
    for (size_t i = 0; ov && i < ov->n_meta; i++)
        if (ov->meta[i].relation)
            return 1;
    return 0;
}

int brw_has_labels(const brw_model *m, const eng_overlay *ov)
{
    return m->labels || m->clusters || names_relations(ov);
}

int brw_labels_compiled(const vx_container *c, const eng_overlay *ov, cJSON **out,
                        vx_err *err)
{
    *out = NULL;
    if (!names_relations(ov))
        return 0;
    char path[4096];
    vx_err e;
    cJSON *labels = NULL;
    if (vx_resolve(c, brw_label_files[0], path, sizeof path, &e) == 0)
        labels = read_json_file(path);
    if (!cJSON_IsObject(labels)) {   /* absent, or malformed as browse ignores it */
        cJSON_Delete(labels);
        labels = cJSON_CreateObject();
    }
    for (size_t i = 0; labels && i < ov->n_meta; i++) {
        const eng_meta_edit *me = &ov->meta[i];
        if (!me->relation || tombstoned(ov, me->layer, me->feature))
            continue;
        char k1[64], k2[64];
        label_keys(me->layer, me->feature, k1, k2);
        cJSON_DeleteItemFromObjectCaseSensitive(labels, k1);
        cJSON_DeleteItemFromObjectCaseSensitive(labels, k2);
        if (!cJSON_AddStringToObject(labels, k1, me->relation)) {
            cJSON_Delete(labels);
            labels = NULL;
        }
    }
    if (!labels)
        return vx_errf(err, VX_ENOMEM, "compile: out of memory writing the feature labels");
    *out = labels;
    return 0;
}

const char *brw_label(const brw_model *m, const eng_overlay *ov, int layer, int64_t feature)
{
    if (layer < 0 || layer >= m->s.layers || feature < 0 || feature >= m->s.layer[layer].features)
        return NULL;
    const char *ins = inserted_relation(ov, layer, feature);
    if (ins)
        return ins;
    if (m->label_of && m->label_of[layer] && m->label_of[layer][feature])
        return m->label_of[layer][feature];   /* a probe label wins over a cluster */
    if (!m->clusters || !m->cluster_of || !m->cluster_of[layer] ||
        m->cluster_of[layer][feature] < 0)
        return NULL;
    const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m->clusters, "labels"),
                           m->cluster_of[layer][feature]);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int brw_walk_query(const brw_model *m, const char *prompt, float *q, int32_t *tok,
                   vx_err *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (eng_tok_encode(m->tok, prompt, strlen(prompt), 1, &ids, &n, err) != 0)
        return -1;
    if (n == 0) {
        free(ids);
        return vx_errf(err, VX_EARG, "empty prompt: it has no tokens");
    }
    *tok = ids[n - 1];
    free(ids);
    if (brw_embed_row(&m->s, *tok, q, err) != 0)
        return -1;
    for (int i = 0; i < m->s.hidden; i++)
        q[i] *= m->s.embed_scale;
    return 0;
}

int brw_entity_query(const brw_model *m, const char *entity, float *q, vx_err *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (eng_tok_encode(m->tok, entity, strlen(entity), 0, &ids, &n, err) != 0)
        return -1;
    size_t used = 0;
    float *row = malloc((size_t)m->s.hidden * sizeof *row);
    if (!row) {
        free(ids);
        return vx_errf(err, VX_ENOMEM, "browse: out of memory");
    }
    memset(q, 0, (size_t)m->s.hidden * sizeof *q);
    for (size_t i = 0; i < n; i++) {
        if (eng_tok_is_special(m->tok, ids[i]))
            continue;
        if (brw_embed_row(&m->s, ids[i], row, err) != 0) {
            free(row);
            free(ids);
            return -1;
        }
        for (int j = 0; j < m->s.hidden; j++)
            q[j] += row[j];
        used++;
    }
    free(row);
    free(ids);
    if (used == 0)
        return vx_errf(err, VX_EARG, "entity \"%s\" has no tokens", entity);
    float s = m->s.embed_scale / (float)used;
    for (int j = 0; j < m->s.hidden; j++)
        q[j] *= s;
    return 0;
}

int brw_feature_meta(const brw_model *m, const eng_overlay *ov, int layer, int64_t feature,
                     brw_meta *out)
{
    memset(out, 0, sizeof *out);
    if (m->dmet)
        brw_dmet_get(m->dmet, layer, feature, out);
    else if (m->od)
        brw_ondemand_get(m, layer, feature, out);
    int retop = 0, scored = 0;
    float score = 0;
    if (ov)
        for (size_t i = 0; i < ov->n_meta; i++) {
            const eng_meta_edit *e = &ov->meta[i];
            if (e->layer != layer || e->feature != feature)
                continue;
            if (e->top_id >= 0) {
                retop |= !out->present || out->top_id != e->top_id;
                out->top_id = e->top_id;
                out->present = 1;
            }
            if (e->has_score) {
                scored = 1;
                score = e->c_score;
            }
        }
    /* a score is the confidence of a record's top token: without a record (no down-meta,
     * no token set) there is nothing to score, and a record of token 0 would be invented */
    if (scored && out->present)
        out->c_score = score;
    if (retop) {
        /* the base alternatives no longer describe the target: the new top token alone,
         * as COMPILE writes the record */
        out->k = 1;
        out->ids[0] = out->top_id;
        out->logits[0] = out->c_score;
    }
    if (tombstoned(ov, layer, feature))
        memset(out, 0, sizeof *out);
    return out->present ? 0 : -1;
}
