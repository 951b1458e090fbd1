/*
 * bank.c — the bank-shape storage of a container (docs/lql/BANK.md): moe_manifest.json
 * judged against the system graph (the semantic authority), every LYRW v2 file it names
 * opened through lyrw.c, each bank's programme checked for the roles it needs, and one
 * borrowed vx_tensor view per (layer, bank, entry, role) under the canonical operand
 * names of docs/lql/CONTAINER.md, so the reader's lookup table (and through it the
 * engine and browse) sees expert weights exactly as in the graph shape.
 */
#include "vindex.h"
#include "vx_int.h"
#include "lyrw.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NAME_MAX_LEN 80

/* One LYRW file of the bank. */
typedef struct bank_file {
    vx_lyrw *lyrw;
    const char *rel;           /* into the manifest JSON */
    const char *sha;           /* index.json's recorded sha256 of the file, or NULL */
    int ok;                    /* hashed to it (first touch; under mu) */
    pthread_mutex_t mu;        /* initialised once every file is open (the array moves before) */
} bank_file;

struct vx_bank {
    vx_manifest m;
    bank_file *files;
    size_t nfiles;
    int mu_ready;              /* every files[i].mu is initialised */
    vx_tensor *t;
    char (*names)[NAME_MAX_LEN];
    size_t nt, capt;
};

static void operand_name(char *out, size_t n, int slot, uint32_t layer, uint32_t entry,
                         const char *role)
{
    if (slot == VX_SLOT_ROUTED)
        snprintf(out, n, "layers.%u.ffn.experts.%u.%s", layer, entry, role);
    else if (slot == VX_SLOT_SHARED)
        snprintf(out, n, "layers.%u.ffn.shared.%s", layer, role);
    else
        snprintf(out, n, "layers.%u.ffn.%s", layer, role);
}

/* The index of the bank file `rel`, or b->nfiles. */
static size_t file_index(const vx_bank *b, const char *rel)
{
    size_t i = 0;
    while (i < b->nfiles && strcmp(b->files[i].rel, rel) != 0)
        i++;
    return i;
}

/* Open (once per path) the LYRW file `rel`, checking index.json's byte count first. */
static int open_file(vx_bank *b, const char *dir, const cJSON *index, const char *rel,
                     const char *where, vx_lyrw **out, vx_err *err)
{
    size_t i = file_index(b, rel);
    if (i < b->nfiles) {
        *out = b->files[i].lyrw;
        return 0;
    }
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(index, "segments"), rel);
    uint64_t recorded;
    if (!cJSON_IsObject(rec) || vx_json_u64(cJSON_GetObjectItemCaseSensitive(rec, "bytes"), &recorded) < 0)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s: storage '%s' has no record in index.json segments",
                       where, rel);
    char path[PATH_MAX];
    struct stat st;
    if (vx_resolve_in(dir, rel, path, sizeof path, err) < 0)
        return -1;
    if (stat(path, &st) < 0)
        return vx_errf(err, errno == ENOENT ? VX_EMISSING : VX_EIO,
                       "moe_manifest.json %s: storage '%s' is missing from the container: %s", where, rel,
                       strerror(errno));
    if ((uint64_t)st.st_size != recorded)
        return vx_errf(err, VX_EFORMAT, "bank file '%s' is %s: %llu bytes on disk, index.json records %llu",
                       rel, (uint64_t)st.st_size < recorded ? "truncated" : "longer than recorded",
                       (unsigned long long)st.st_size, (unsigned long long)recorded);
    bank_file *f = realloc(b->files, (b->nfiles + 1) * sizeof *f);
    if (!f)
        return vx_errf(err, VX_ENOMEM, "out of memory opening bank file '%s'", rel);
    b->files = f;
    bank_file *nf = &b->files[b->nfiles];
    *nf = (bank_file){.rel = rel, .sha = vx_json_str(rec, "sha256")};
    if (vx_lyrw_open(path, &nf->lyrw, err) < 0)
        return -1;
    b->nfiles++;
    *out = nf->lyrw;
    return 0;
}

/* The manifest's restatement m of the graph's moe field g (as the bank writer restates it):
 * absent or equal; null equals null or absent. */
static int agrees(uint32_t layer, const char *key, const cJSON *m, const cJSON *g,
                  const char *gkey, vx_err *err)
{
    int gnull = !g || cJSON_IsNull(g);
    if (!m || (cJSON_IsNull(m) && gnull) || (!gnull && cJSON_Compare(m, g, 1)))
        return 0;
    char mt[65], gt[65];
    return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %u: %s %s disagrees with the system "
                   "graph's moe.%s %s", layer, key, vx_json_text(m, mt, sizeof mt), gkey,
                   gnull ? "null" : vx_json_text(g, gt, sizeof gt));
}

/* The manifest restates facts the graph owns (which layers route, expert count, top-k,
 * scoring, grouping, scaling, normalisation); any disagreement is refused rather than
 * resolved. */
static int agree_with_graph(const vx_mlayer *L, const vx_graph_shape *shape, vx_err *err)
{
    const vx_layer_shape *gl = &shape->layer[L->layer];
    const char *ffn = vx_channel_name(gl->channel);
    int routed = L->bank[VX_SLOT_ROUTED].present;
    if (gl->channel != (routed ? VX_CHANNEL_MOE : VX_CHANNEL_DENSE))
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %u has a %s, but the system graph's layer %u ffn is '%s'",
                       L->layer, routed ? "routed_bank" : "dense_bank", L->layer, ffn);
    if (!routed)
        return 0;
    if ((uint32_t)shape->experts != L->bank[VX_SLOT_ROUTED].experts)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %u: routed_bank experts %u disagree with the system graph's moe.experts %d",
                       L->layer, L->bank[VX_SLOT_ROUTED].experts, shape->experts);
    if ((uint32_t)shape->top_k != L->top_k)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %u: selection k %u disagrees with the system graph's moe.top_k %d",
                       L->layer, L->top_k, shape->top_k);
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(shape->execution, "moe");
    const cJSON *router = cJSON_GetObjectItemCaseSensitive(L->json, "router");
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(router, "selection");
    const int norm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(moe, "normalise"));
    /* moe.normalise as the manifest restates it: only compared and printed, so a cJSON on
     * the stack */
    cJSON normj = {.type = cJSON_String, .valuestring = (char *)(norm ? "sum_to_one" : "none")};
    /* manifest field, its object, the graph's value and its name in the refusal */
#define G(k) cJSON_GetObjectItemCaseSensitive(moe, k), k
    const struct { const char *key; const cJSON *in, *g; const char *gkey; } f[] = {
        {"scoring", router, G("scoring")}, {"n_group", sel, G("n_group")},
        {"topk_group", sel, G("topk_group")}, {"routed_scaling", router, G("routed_scaling")},
        {"normalisation", router, &normj, norm ? "normalise true, i.e." : "normalise false, i.e."}};
#undef G
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (agrees(L->layer, f[i].key, cJSON_GetObjectItemCaseSensitive(f[i].in, f[i].key), f[i].g,
                   f[i].gkey, err))
            return -1;
    /* the optional operands the manifest names (manifest.c: under their canonical names)
     * are there exactly when the graph says so */
    const cJSON *sb = cJSON_GetObjectItemCaseSensitive(router, "score_bias");
    const cJSON *sg = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(L->json, vx_bank_slot_names[VX_SLOT_SHARED]), "gate");
    const cJSON *gsg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(moe, "shared"), "gate");
    const int has_sb = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(moe, "score_correction_bias"));
    const int has_sg = gsg && !cJSON_IsNull(gsg);
    if ((sb && !cJSON_IsNull(sb)) != has_sb)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %u: router.score_bias is %s, but "
                       "the system graph's moe.score_correction_bias is %s", L->layer,
                       has_sb ? "null" : "named", has_sb ? "true" : "false");
    if (L->bank[VX_SLOT_SHARED].present && (sg && !cJSON_IsNull(sg)) != has_sg)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %u: shared_bank.gate is %s, but "
                       "the system graph's moe.shared.gate is %s", L->layer,
                       has_sg ? "null" : "named", has_sg ? "set" : "null");
    /* the clamped, biased experts of the graph are exactly programme gpt-oss-expert-v1 */
    const vx_mbank *rb = &L->bank[VX_SLOT_ROUTED];
    int biased = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(shape->execution, "moe"), "expert_bias"));
    if (rb->prog && (rb->prog->id == 2) != biased)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %u: routed_bank programme '%s' disagrees with the system graph's moe.expert_bias %s",
                       L->layer, rb->programme, biased ? "true" : "false");
    return 0;
}

/* The operand a required role stands for, for refusals: the fused role names the gate
 * operand it carries first. */
static const char *role_operand(uint16_t role)
{
    return role == VX_ROLE_UP ? "up_proj" : role == VX_ROLE_DOWN ? "down_proj" : "gate_proj";
}

/* Capability (seed §11): the programme is one lql executes and the bank holds every
 * role it needs in a decodable form; otherwise refuse naming layer, bank, role, file.
 * schema_of[i] receives the schema of the programme's i-th role. */
static int capable(const vx_mlayer *L, int slot, const vx_lyrw *f, const vx_lyrw_bank *k,
                   const char *rel, int schema_of[5], vx_err *err)
{
    const vx_mbank *mb = &L->bank[slot];
    const char *sn = vx_bank_slot_names[slot];
    const vx_programme *p = mb->prog;
    if (!p)
        return vx_errf(err, VX_EUNSUPPORTED, "moe_manifest.json layer %u %s: programme '%s' is not in the programme registry; the bank is kept but cannot execute",
                       L->layer, sn, mb->programme);
    if (!p->executable)
        return vx_errf(err, VX_EUNSUPPORTED, "moe_manifest.json layer %u %s: programme '%s' (registry id %d) is registered, but lql executes only gated-mlp-v1, gated-mlp-fused-fc1-v1 and gpt-oss-expert-v1",
                       L->layer, sn, mb->programme, p->id);
    for (int r = 0; r < p->nroles; r++) {
        schema_of[r] = -1;
        for (unsigned s = 0; s < k->schema_count && schema_of[r] < 0; s++) {
            if (k->schemas[s].role == p->roles[r])
                schema_of[r] = (int)s;
        }
        if (schema_of[r] < 0) {
            char op[NAME_MAX_LEN];
            operand_name(op, sizeof op, slot, L->layer, 0, role_operand(p->roles[r]));
            return vx_errf(err, VX_EMISSING, "missing operand '%s' (layer %u, %s %u, programme '%s'): role '%s' is absent from segment '%s'",
                           op, L->layer, sn, mb->bank_id, mb->programme, vx_lyrw_role_name(p->roles[r]), rel);
        }
        const vx_lyrw_schema *c = &k->schemas[schema_of[r]];
        const uint16_t role = p->roles[r];
        if (role == VX_ROLE_BIAS &&
            (c->rows != 1 || c->cols != 2 * mb->intermediate + mb->output))
            return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %u %s: the bias region of '%s' is %u x %u; "
                           "programme '%s' keeps one row [gate %u | up %u | down %u]", L->layer, sn, rel,
                           c->rows, c->cols, mb->programme, mb->intermediate, mb->intermediate, mb->output);
        if (role == VX_ROLE_GATE_UP_FUSED && (c->layout != VX_LAYOUT_CONTIGUOUS_HALVES || c->rows % 2))
            return vx_errf(err, VX_EUNSUPPORTED, "moe_manifest.json layer %u %s: the gate_up_fused region of '%s' (layout %s, %u rows) is not two contiguous halves, so it has no gate and up views",
                           L->layer, sn, rel, vx_lyrw_layout_name(c->layout) ? vx_lyrw_layout_name(c->layout) : "unregistered",
                           c->rows);
        /* the views take the schema's shape, which must be the one the bank's dims give */
        uint64_t rows = role == VX_ROLE_DOWN ? mb->output : mb->intermediate;
        uint64_t cols = role == VX_ROLE_DOWN ? mb->intermediate : mb->input;
        rows *= role == VX_ROLE_GATE_UP_FUSED ? 2 : 1;
        if (role != VX_ROLE_BIAS && (c->rows != rows || c->cols != cols))
            return vx_errf(err, VX_EFORMAT, "moe_manifest.json layer %u %s: the %s region of '%s' is %u x %u; "
                           "bank %u's dims (input %u, intermediate %u, output %u) make it %llu x %llu",
                           L->layer, sn, vx_lyrw_role_name(role), rel, c->rows, c->cols, mb->bank_id,
                           mb->input, mb->intermediate, mb->output, (unsigned long long)rows,
                           (unsigned long long)cols);
    }
    return vx_lyrw_check(f, p->roles, (size_t)p->nroles, err);
}

static int add_tensor(vx_bank *b, const vx_tensor *t, const char *name, vx_err *err)
{
    if (b->nt == b->capt) {
        size_t cap = b->capt ? 2 * b->capt : 64;
        vx_tensor *nt = realloc(b->t, cap * sizeof *nt);
        if (nt)
            b->t = nt;
        char (*nn)[NAME_MAX_LEN] = nt ? realloc(b->names, cap * sizeof *nn) : NULL;
        if (!nn)
            return vx_errf(err, VX_ENOMEM, "out of memory for bank tensor '%s'", name);
        b->names = nn;
        b->capt = cap;
        for (size_t i = 0; i < b->nt; i++)     /* names moved with the realloc */
            b->t[i].name = b->names[i];
    }
    snprintf(b->names[b->nt], NAME_MAX_LEN, "%s", name);
    b->t[b->nt] = *t;
    b->t[b->nt].name = b->names[b->nt];
    b->nt++;
    return 0;
}

static int load_bank(vx_bank *b, const char *dir, const cJSON *index, const vx_mlayer *L, int slot,
                     vx_err *err)
{
    const vx_mbank *mb = &L->bank[slot];
    const char *sn = vx_bank_slot_names[slot];
    char where[64];
    snprintf(where, sizeof where, "layer %u %s", L->layer, sn);
    if (slot != VX_SLOT_ROUTED && mb->experts != 1)
        return vx_errf(err, VX_EUNSUPPORTED, "moe_manifest.json %s: %u experts; the graph shape has one %s MLP per layer",
                       where, mb->experts, slot == VX_SLOT_SHARED ? "shared" : "dense");
    vx_lyrw *f = NULL;
    if (open_file(b, dir, index, mb->storage, where, &f, err) < 0)
        return -1;
    if (f->layer != L->layer)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s: storage '%s' holds layer %u",
                       where, mb->storage, f->layer);
    const vx_lyrw_bank *k = vx_lyrw_bank_by_id(f, (uint16_t)mb->bank_id);
    if (!k)
        return vx_errf(err, VX_EMISSING, "moe_manifest.json %s: bank %u is not in '%s' (it holds %u bank%s)",
                       where, mb->bank_id, mb->storage, f->num_banks, f->num_banks == 1 ? "" : "s");
    static const uint16_t kind_of[VX_BANK_SLOTS] = {VX_BANK_ROUTED, VX_BANK_SHARED, VX_BANK_DENSE};
    static const char *const kinds[] = {"dense", "routed", "shared"};
    if (k->kind != kind_of[slot])
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s: bank %u of '%s' has kind %u (%s)",
                       where, mb->bank_id, mb->storage, k->kind, kinds[k->kind]);
    if (k->num_entries != mb->experts || k->input_dim != mb->input ||
        k->intermediate_dim != mb->intermediate || k->output_dim != mb->output)
        return vx_errf(err, VX_EFORMAT, "moe_manifest.json %s: bank %u of '%s' is %u entries of %u/%u/%u, the manifest says %u of %u/%u/%u",
                       where, mb->bank_id, mb->storage, k->num_entries, k->input_dim,
                       k->intermediate_dim, k->output_dim, mb->experts, mb->input, mb->intermediate,
                       mb->output);
    int schema_of[5];
    if (capable(L, slot, f, k, mb->storage, schema_of, err) < 0)
        return -1;
    const vx_programme *p = mb->prog;
    for (uint32_t e = 0; e < mb->experts; e++) {
        for (int r = 0; r < p->nroles; r++) {
            char name[NAME_MAX_LEN];
            vx_tensor t;
            if (vx_lyrw_tensor(f, (uint16_t)mb->bank_id, e, (uint16_t)schema_of[r], &t, err) < 0)
                return -1;
            t.segment = mb->storage;
            if (p->roles[r] == VX_ROLE_BIAS) {
                /* gpt-oss-expert-v1: one row [gate bias | up bias | down bias], three views */
                static const char *const parts[] = {"gate_proj.bias", "up_proj.bias", "down_proj.bias"};
                const uint32_t len[3] = {mb->intermediate, mb->intermediate, mb->output};
                uint64_t esz = t.nbytes / (2 * (uint64_t)mb->intermediate + mb->output);
                t.ndim = 1;
                memset(t.shape, 0, sizeof t.shape);
                for (int q = 0; q < 3; q++) {
                    t.shape[0] = len[q];
                    t.nbytes = len[q] * esz;
                    operand_name(name, sizeof name, slot, L->layer, e, parts[q]);
                    if (add_tensor(b, &t, name, err) < 0)
                        return -1;
                    t.data = (const unsigned char *)t.data + t.nbytes;
                    t.offset += t.nbytes;
                }
                continue;
            }
            int fused = p->roles[r] == VX_ROLE_GATE_UP_FUSED;
            if (fused) {
                /* contiguous halves: rows [0, n/2) are gate, [n/2, n) up (checked above) */
                t.shape[0] /= 2;
                t.nbytes /= 2;
            }
            operand_name(name, sizeof name, slot, L->layer, e, role_operand(p->roles[r]));
            if (add_tensor(b, &t, name, err) < 0)
                return -1;
            if (fused) {
                t.data = (const unsigned char *)t.data + t.nbytes;
                t.offset += t.nbytes;
                operand_name(name, sizeof name, slot, L->layer, e, "up_proj");
                if (add_tensor(b, &t, name, err) < 0)
                    return -1;
            }
        }
    }
    return 0;
}

int vx_bank_load(const char *dir, const cJSON *index, const cJSON *graph,
                 const vx_graph_shape *shape, vx_bank **out, vx_err *err)
{
    *out = NULL;
    const char *rel = vx_json_str(index, "moe_manifest");
    if (!rel)
        return vx_errf(err, VX_EFORMAT, "index.json: moe_manifest is not a path string");
    uint64_t layers = (uint64_t)shape->layers;
    cJSON *json;
    if (vx_read_json_in(dir, rel, &json, err) < 0)
        return -1;
    vx_bank *b = calloc(1, sizeof *b);
    if (!b) {
        cJSON_Delete(json);
        return vx_errf(err, VX_ENOMEM, "out of memory reading %s", rel);
    }
    int rc = vx_manifest_parse(json, layers, &b->m, err);
    if (rc == 0 && !vx_graph_object(graph, b->m.object))
        rc = vx_errf(err, VX_EMISSING, "moe_manifest.json names object '%s', which the system graph does not define",
                     b->m.object);
    for (size_t i = 0; rc == 0 && i < b->m.n; i++) {
        const vx_mlayer *L = &b->m.l[i];
        rc = agree_with_graph(L, shape, err);
        for (int s = 0; rc == 0 && s < VX_BANK_SLOTS; s++) {
            if (L->bank[s].present)
                rc = load_bank(b, dir, index, L, s, err);
        }
    }
    if (rc < 0) {
        vx_bank_free(b);
        return -1;
    }
    for (size_t i = 0; i < b->nfiles; i++)
        pthread_mutex_init(&b->files[i].mu, NULL);
    b->mu_ready = 1;
    for (size_t i = 0; i < b->nt; i++)
        b->t[i].object = b->m.object;
    *out = b;
    return 0;
}

void vx_bank_free(vx_bank *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->nfiles; i++) {
        vx_lyrw_free(b->files[i].lyrw);
        if (b->mu_ready)
            pthread_mutex_destroy(&b->files[i].mu);
    }
    free(b->files);
    free(b->t);
    free(b->names);
    vx_manifest_free(&b->m);
    free(b);
}

size_t vx_bank_tensor_count(const vx_bank *b) { return b ? b->nt : 0; }
const vx_tensor *vx_bank_tensor_at(const vx_bank *b, size_t i) { return i < b->nt ? &b->t[i] : NULL; }
int vx_bank_tensor_check(vx_bank *b, const vx_tensor *t, const char *dir, vx_err *err)
{
    size_t i = file_index(b, t->segment);
    if (i == b->nfiles)
        return 0;   /* not a bank file's view */
    bank_file *f = &b->files[i];
    /* one thread hashes a file; the pool's others reading views of it wait for the answer */
    pthread_mutex_lock(&f->mu);
    int rc = 0;
    if (!f->ok && f->sha) {
        vx_sha256_ctx ctx;
        char hex[65], what[VX_ERR_MAX];
        snprintf(what, sizeof what, "checking bank file '%s'", f->rel);
        rc = vx_sha256_init(&ctx, err);
        if (rc == 0 && (rc = vx_sha256_mapped(&ctx, f->lyrw->data, f->lyrw->size, 0, what, err)) < 0)
            vx_sha256_free(&ctx);
        if (rc == 0) {
            vx_sha256_final(&ctx, hex);
            if (strcmp(hex, f->sha) != 0)
                rc = vx_errf(err, VX_EVERIFY, "bank file '%s' is corrupted: it does not match its "
                             "recorded sha256 (read for tensor '%s' of object '%s'; vindex verify "
                             "%s checks every byte)", f->rel, t->name, t->object, dir);
        }
    }
    if (rc == 0)
        f->ok = 1;
    pthread_mutex_unlock(&f->mu);
    return rc;
}

size_t vx_bank_file_count(const vx_bank *b) { return b ? b->nfiles : 0; }
const char *vx_bank_file_at(const vx_bank *b, size_t i) { return i < b->nfiles ? b->files[i].rel : NULL; }
const vx_manifest *vx_bank_manifest(const vx_bank *b) { return &b->m; }
