/*
 * tokenizer.c — the public tokenizer (eng_tok_* in engine.h): loading tokenizer.json and
 * tokenizer_config.json, the encode pipeline, the post-processor and decode.
 *
 * Encode follows Hugging Face tokenizers: the input is first repaired to valid UTF-8
 * (each ill-formed subsequence becomes U+FFFD, so bytes never reach the regex engine
 * unchecked); added tokens with normalized=false are cut out of the raw text; each
 * remaining segment is normalized on its own (so a Prepend('▁') normalizer gives every
 * segment its own '▁'), cut again by the normalized added tokens, pre-tokenized into
 * pieces, and each piece is run through the BPE model. With add_special the
 * post-processor's template ids (e.g. BOS) are put around the result.
 */
#include "tok_int.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* tokenizer.json or tokenizer_config.json as a JSON object; the path labels errors. A
 * string holding U+0000 loads cut there (a vocabulary may hold one; transformers loads it)
 * rather than refusing the model's tokenizer. */
static int parse_json(const char *path, cJSON **out, vx_err *err)
{
    char *text = NULL;
    size_t n = 0;
    if (vx_read_small_file(path, path, &text, &n, err) < 0)
        return -1;
    int rc = vx_json_parse_as(path, text, n, 1, out, err);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- added tokens */

static int grow_ids(eng_tokenizer *t, size_t n, vx_err *err)
{
    if (n <= t->n_ids)
        return 0;
    const char **p = realloc(t->piece, n * sizeof *p);
    if (p)
        t->piece = p;
    uint32_t *l = realloc(t->plen, n * sizeof *l);
    if (l)
        t->plen = l;
    uint8_t *s = realloc(t->special, n);
    if (s)
        t->special = s;
    if (!p || !l || !s)
        return vx_errf(err, VX_ENOMEM, "out of memory growing the vocab to %zu ids", n);
    memset(t->piece + t->n_ids, 0, (n - t->n_ids) * sizeof *p);
    memset(t->plen + t->n_ids, 0, (n - t->n_ids) * sizeof *l);
    memset(t->special + t->n_ids, 0, n - t->n_ids);
    t->n_ids = n;
    return 0;
}

static int load_added(eng_tokenizer *t, const cJSON *a, vx_err *err)
{
    if (!a)
        return tok_smap_init(&t->added_map, 0) < 0 ? vx_errf(err, VX_ENOMEM, "out of memory") : 0;
    if (!cJSON_IsArray(a))
        return vx_errf(err, VX_EFORMAT, "%s: added_tokens must be an array (got %s)", t->path,
                       tok_jtype(a));
    size_t n = (size_t)cJSON_GetArraySize(a), i = 0;
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added || tok_smap_init(&t->added_map, n) < 0)
        return vx_errf(err, VX_ENOMEM, "out of memory loading %zu added tokens", n);
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%zu]", i++);
        if (!cJSON_IsObject(e))
            return vx_errf(err, VX_EFORMAT, "%s: %s must be an object (got %s)", t->path, where,
                           tok_jtype(e));
        const char *content;
        long id;
        int sw, ls, rs, special, norm;
        if (tok_jstr(t, e, "content", where, 1, &content, err) < 0 ||
            tok_jint(t, e, "id", where, 0, (1L << 24) - 1, -1, &id, err) < 0 ||
            tok_jbool(t, e, "single_word", where, 0, &sw, err) < 0 ||
            tok_jbool(t, e, "lstrip", where, 0, &ls, err) < 0 ||
            tok_jbool(t, e, "rstrip", where, 0, &rs, err) < 0 ||
            tok_jbool(t, e, "special", where, 0, &special, err) < 0 ||
            tok_jbool(t, e, "normalized", where, !special, &norm, err) < 0)
            return -1;
        if (id < 0)
            return vx_errf(err, VX_EFORMAT, "%s: %s has no 'id'", t->path, where);
        if (!*content)
            return vx_errf(err, VX_EFORMAT, "%s: %s has an empty content", t->path, where);
        /* content the model's vocab holds keeps the vocab's id, as the Rust crate assigns
         * it (one text, one id, whichever path finds it); the file's id is then unused */
        int32_t in_vocab = tok_smap_get(&t->vocab, content, strlen(content));
        if (in_vocab >= 0)
            id = in_vocab;
        tok_added *x = &t->added[t->n_added++];
        x->id = (int32_t)id;
        x->n = strlen(content);
        if (!(x->s = tok_arena_dup(&t->arena, content, x->n)))
            return vx_errf(err, VX_ENOMEM, "out of memory");
        x->special = (uint8_t)special;
        x->single_word = (uint8_t)sw;
        x->lstrip = (uint8_t)ls;
        x->rstrip = (uint8_t)rs;
        x->normalized = (uint8_t)norm;
        if (grow_ids(t, (size_t)id + 1, err) < 0)
            return -1;
        if (tok_smap_put(&t->added_map, x->s, x->n, x->id) < 0)
            return vx_errf(err, VX_ENOMEM, "out of memory");
        t->piece[id] = x->s;   /* decode sees the added content (normalized: build_tries) */
        t->plen[id] = (uint32_t)x->n;
        t->special[id] = (uint8_t)special;
    }
    return 0;
}

/* Build the two tries; normalized tokens are matched by their normalized content. */
static int build_tries(eng_tokenizer *t, vx_err *err)
{
    tok_ctx c = {.t = t, .err = err};
    tok_buf nb = {0};
    int rc = 0;
    if (!(c.md = pcre2_match_data_create(1, NULL)))
        return vx_errf(err, VX_ENOMEM, "out of memory");
    for (size_t i = 0; i < t->n_added && rc == 0; i++) {
        tok_added *x = &t->added[i];
        if (!x->normalized) {
            if (tok_trie_add(&t->raw_trie, x->s, x->n, (int32_t)i) < 0)
                rc = vx_errf(err, VX_ENOMEM, "out of memory");
            continue;
        }
        if (tok_normalize(&c, x->s, x->n, &nb) < 0) {
            rc = -1;
            break;
        }
        x->nn = nb.n;
        if (nb.n == 0)   /* normalized away entirely: it can never match */
            continue;
        if (!(x->ns = tok_arena_dup(&t->arena, nb.p, nb.n)) ||
            tok_trie_add(&t->norm_trie, x->ns, x->nn, (int32_t)i) < 0) {
            rc = vx_errf(err, VX_ENOMEM, "out of memory");
            break;
        }
        /* its piece is the normalized form, which the decoder inverts (tokenizers >= 0.23's
         * id_to_token): "fish" added under Prepend('▁') + Replace(' ', '▁') decodes " fish"
         * after "a", where the raw content lost the space ("afish") */
        t->piece[x->id] = x->ns;
        t->plen[x->id] = (uint32_t)x->nn;
    }
    tok_buf_free(&nb);
    tok_ctx_free(&c);
    return rc;
}

/* ---------------------------------------------------------------- post-processor */

static int put_ids(const eng_tokenizer *t, tok_ids *l, const int32_t *ids, size_t n, vx_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (tok_ids_add(l, ids[i]) < 0)
            return vx_errf(err, VX_ENOMEM, "out of memory loading %s", t->path);
    return 0;
}

/* Wrap the current template: pre' = pre_new + pre, post' = post + post_new. */
static int wrap(eng_tokenizer *t, const tok_ids *pre, const tok_ids *post, vx_err *err)
{
    tok_ids np = {0};
    if (put_ids(t, &np, pre->p, pre->n, err) < 0 ||
        put_ids(t, &np, t->post_pre.p, t->post_pre.n, err) < 0 ||
        put_ids(t, &t->post_post, post->p, post->n, err) < 0) {
        free(np.p);
        return -1;
    }
    free(t->post_pre.p);
    t->post_pre = np;
    return 0;
}

/* Is v the id of a token (the id table has holes: an id no vocab entry or added token
 * gives would encode to what nothing can decode)? */
static int token_id(const eng_tokenizer *t, const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < (double)t->n_ids &&
           v->valuedouble == (double)(int32_t)v->valuedouble && t->piece[(int32_t)v->valuedouble];
}

static int special_pair(eng_tokenizer *t, const cJSON *o, const char *key, const char *where,
                        int32_t *id, vx_err *err)
{
    const cJSON *p = tok_jget(o, key);
    const cJSON *v = cJSON_IsArray(p) && cJSON_GetArraySize(p) == 2 ? p->child->next : NULL;
    if (!token_id(t, v))
        return vx_errf(err, VX_EFORMAT, "%s: %s.%s must be [token, id] with an id in the vocab",
                       t->path, where, key);
    *id = (int32_t)v->valuedouble;
    return 0;
}

static int template_ids(eng_tokenizer *t, const cJSON *specials, const char *name,
                        tok_ids *to, vx_err *err)
{
    const cJSON *sp = tok_jget(specials, name), *ids = tok_jget(sp, "ids"), *e;
    if (!sp)
        return vx_errf(err, VX_EFORMAT, "%s: post_processor template names special token '%s', "
                       "which is not in its special_tokens", t->path, name);
    if (!cJSON_IsArray(ids))
        return vx_errf(err, VX_EFORMAT, "%s: post_processor.special_tokens['%s'].ids must be "
                       "an array (got %s)", t->path, name, tok_jtype(ids));
    cJSON_ArrayForEach(e, ids) {
        if (!token_id(t, e))
            return vx_errf(err, VX_EFORMAT, "%s: post_processor.special_tokens['%s'].ids holds "
                           "a value that is not an id in the vocab", t->path, name);
        if (tok_ids_add(to, (int32_t)e->valuedouble) < 0)
            return vx_errf(err, VX_ENOMEM, "out of memory");
    }
    return 0;
}

static int load_template(eng_tokenizer *t, const cJSON *o, vx_err *err)
{
    const cJSON *single = tok_jget(o, "single"), *specials = tok_jget(o, "special_tokens"), *it;
    if (!cJSON_IsArray(single))
        return vx_errf(err, VX_EFORMAT, "%s: post_processor(TemplateProcessing).single must be "
                       "an array (got %s)", t->path, tok_jtype(single));
    tok_ids pre = {0}, post = {0};
    int seen = 0, rc = 0;
    cJSON_ArrayForEach(it, single) {
        const cJSON *st = tok_jget(it, "SpecialToken"), *sq = tok_jget(it, "Sequence");
        const char *name;
        if (sq) {
            if (tok_jstr(t, sq, "id", "post_processor single Sequence", 1, &name, err) < 0) {
                rc = -1;
                break;
            }
            if (strcmp(name, "A") != 0 || seen) {
                rc = vx_errf(err, VX_EFORMAT, "%s: post_processor single template must hold "
                             "sequence A exactly once (found '%s')", t->path, name);
                break;
            }
            seen = 1;
        } else if (st) {
            if (tok_jstr(t, st, "id", "post_processor single SpecialToken", 1, &name, err) < 0 ||
                template_ids(t, specials, name, seen ? &post : &pre, err) < 0) {
                rc = -1;
                break;
            }
        } else {
            rc = vx_errf(err, VX_EFORMAT, "%s: post_processor single template item is neither "
                         "a SpecialToken nor a Sequence", t->path);
            break;
        }
    }
    if (rc == 0 && !seen)
        rc = vx_errf(err, VX_EFORMAT, "%s: post_processor single template has no sequence A",
                     t->path);
    if (rc == 0)
        rc = wrap(t, &pre, &post, err);
    free(pre.p);
    free(post.p);
    return rc;
}

static int post_step(eng_tokenizer *t, const cJSON *o, const char *type, vx_err *err)
{
    if (strcmp(type, "ByteLevel") == 0)   /* offsets only; ids unchanged */
        return 0;
    if (strcmp(type, "TemplateProcessing") == 0)
        return load_template(t, o, err);
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        int32_t cls, sep;
        if (special_pair(t, o, "cls", "post_processor", &cls, err) < 0 ||
            special_pair(t, o, "sep", "post_processor", &sep, err) < 0)
            return -1;
        tok_ids pre = {&cls, 1, 1}, post = {&sep, 1, 1};
        return wrap(t, &pre, &post, err);
    }
    return vx_errf(err, VX_EUNSUPPORTED, "%s: post_processor '%s' is not supported (supported: "
                   "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence)",
                   t->path, type);
}

/* ---------------------------------------------------------------- loading */

/* A config token: "<s>" or an AddedToken object {"content": "<s>", ...}; NULL if absent. */
static const char *config_token(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* transformers' Llama/Gemma fast tokenizers rebuild the post-processor from the config:
 * [bos if add_bos_token (default true)] A [eos if add_eos_token (default false)]. */
static int llama_template(eng_tokenizer *t, const char *path, const cJSON *j, vx_err *err)
{
    static const char *const classes[] = {"LlamaTokenizer", "LlamaTokenizerFast",
                                          "GemmaTokenizer", "GemmaTokenizerFast",
                                          "CodeLlamaTokenizer", "CodeLlamaTokenizerFast"};
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(j, "tokenizer_class");
    size_t k = 0;
    while (k < sizeof classes / sizeof classes[0] &&
           !(cJSON_IsString(cls) && strcmp(cls->valuestring, classes[k]) == 0))
        k++;
    if (k == sizeof classes / sizeof classes[0])
        return 0;
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(j, "add_bos_token"),
                *ae = cJSON_GetObjectItemCaseSensitive(j, "add_eos_token");
    int add[2] = {ab ? cJSON_IsTrue(ab) : 1, cJSON_IsTrue(ae)};
    const char *keys[2] = {"bos_token", "eos_token"};
    tok_ids *lists[2] = {&t->post_pre, &t->post_post};
    for (int i = 0; i < 2; i++) {
        lists[i]->n = 0;
        if (!add[i])
            continue;
        const char *tok = config_token(j, keys[i]);
        int32_t id = tok ? eng_tok_lookup(t, tok) : -1;
        if (!tok)
            return vx_errf(err, VX_EFORMAT, "%s: add_%s is set but %s is missing", path,
                           keys[i], keys[i]);
        if (id < 0)
            return vx_errf(err, VX_EFORMAT, "%s: add_%s is set but %s '%s' is not in the "
                           "vocab", path, keys[i], keys[i], tok);
        if (tok_ids_add(lists[i], id) < 0)
            return vx_errf(err, VX_ENOMEM, "out of memory");
    }
    return 0;
}

static int load_config(eng_tokenizer *t, const char *path, vx_err *err)
{
    cJSON *j;
    if (parse_json(path, &j, err) < 0)
        return -1;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "clean_up_tokenization_spaces");
    int rc = 0;
    if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v))
        rc = vx_errf(err, VX_EFORMAT, "%s: clean_up_tokenization_spaces must be a boolean "
                     "(got %s)", path, tok_jtype(v));
    else
        t->cleanup = cJSON_IsTrue(v);   /* missing → false, as the goldens treat it */
    if (rc == 0)
        rc = llama_template(t, path, j, err);
    cJSON_Delete(j);
    return rc;
}

static int load_all(eng_tokenizer *t, const cJSON *root, const tok_raw *fast, vx_err *err)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model)
        return vx_errf(err, VX_EFORMAT, "%s: no 'model' section", t->path);
    if (tok_bpe_load(t, model, fast, err) < 0 ||
        load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), err) < 0 ||
        tok_norm_load(t, tok_jget(root, "normalizer"), err) < 0 ||
        tok_pre_load(t, tok_jget(root, "pre_tokenizer"), err) < 0 ||
        tok_dec_load(t, tok_jget(root, "decoder"), err) < 0 ||
        tok_load_steps(t, tok_jget(root, "post_processor"), "post_processor", "processors",
                       post_step, err) < 0 || build_tries(t, err) < 0)
        return -1;
    t->unk = -1;
    if (t->unk_name) {
        size_t n = strlen(t->unk_name);
        t->unk = tok_smap_get(&t->vocab, t->unk_name, n);
        if (t->unk < 0)
            t->unk = tok_smap_get(&t->added_map, t->unk_name, n);
        if (t->unk < 0)
            return vx_errf(err, VX_EFORMAT, "%s: model.unk_token '%s' is not in the vocab",
                           t->path, t->unk_name);
    }
    return 0;
}

int eng_tok_load(const char *tokenizer_json, const char *config_path, eng_tokenizer **out,
                 vx_err *err)
{
    *out = NULL;
    eng_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return vx_errf(err, VX_ENOMEM, "out of memory");
    snprintf(t->path, sizeof t->path, "%s", tokenizer_json);
    char *text = NULL;
    size_t n = 0;
    if (vx_read_small_file(tokenizer_json, tokenizer_json, &text, &n, err) < 0) {
        eng_tok_free(t);
        return -1;
    }
    /* The fast scanner takes vocab and merges; cJSON parses the rest. When it declines
     * (or the rest does not parse) cJSON parses everything, for its exact messages. */
    tok_raw raw = {0};
    tok_buf rest = {0};
    cJSON *root = NULL;
    int fast = tok_fast_scan(text, n, &raw, &rest), rc = 0;
    if (fast < 0)
        rc = vx_errf(err, VX_ENOMEM, "out of memory reading '%s'", tokenizer_json);
    if (fast == 1 && vx_json_parse_as(tokenizer_json, rest.p, rest.n, 1, &root, NULL) < 0) {
        tok_raw_free(&raw);
        fast = 0;
    }
    if (rc == 0 && fast == 0)
        rc = vx_json_parse_as(tokenizer_json, text, n, 1, &root, err);
    free(text);
    tok_buf_free(&rest);
    if (rc == 0)
        rc = load_all(t, root, fast ? &raw : NULL, err);
    tok_raw_free(&raw);
    cJSON_Delete(root);
    if (rc == 0 && config_path && access(config_path, F_OK) == 0)
        rc = load_config(t, config_path, err);
    if (rc < 0) {
        eng_tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int eng_tok_load_dir(const char *dir, eng_tokenizer **out, vx_err *err)
{
    char tj[4096], tc[4096], idx[4096];
    *out = NULL;
    if ((size_t)snprintf(idx, sizeof idx, "%s/index.json", dir) >= sizeof idx)
        return vx_errf(err, VX_EARG, "directory path '%s' is too long", dir);
    if (access(idx, F_OK) == 0) {   /* a container: its files may not leave it */
        if (vx_resolve_in(dir, "tokenizer.json", tj, sizeof tj, err) < 0 ||
            vx_resolve_in(dir, "tokenizer_config.json", tc, sizeof tc, err) < 0)
            return -1;
    } else {
        snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
        snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
    }
    if (access(tj, F_OK) != 0)
        return vx_errf(err, VX_EMISSING, "no tokenizer.json in '%s'", dir);
    return eng_tok_load(tj, tc, out, err);
}

void eng_tok_free(eng_tokenizer *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_norm; i++)
        pcre2_code_free(t->norm[i].pat.re);
    for (size_t i = 0; i < t->n_pre; i++)
        pcre2_code_free(t->pre[i].pat.re);
    for (size_t i = 0; i < t->n_dec; i++)
        pcre2_code_free(t->dec[i].pat.re);
    free(t->norm);
    free(t->pre);
    free(t->dec);
    pcre2_code_free(t->gpt2_re);
    free(t->piece);
    free(t->plen);
    free(t->special);
    tok_smap_free(&t->vocab);
    tok_pmap_free(&t->merges);
    tok_smap_free(&t->added_map);
    free(t->added);
    tok_trie_free(&t->raw_trie);
    tok_trie_free(&t->norm_trie);
    free(t->post_pre.p);
    free(t->post_post.p);
    tok_arena_free(&t->arena);
    free(t);
}

/* ---------------------------------------------------------------- encode */

/* Normalize, cut by normalized added tokens, pre-tokenize and BPE one raw segment. */
static int encode_segment(tok_ctx *c, const char *s, size_t n, int first, tok_ids *out)
{
    const eng_tokenizer *t = c->t;
    tok_buf nb = {0};
    tok_spans cuts = {0};
    tok_pieces pieces = {0};
    int rc = tok_normalize(c, s, n, &nb);
    if (rc == 0 && tok_added_split(t, &t->norm_trie, nb.p ? nb.p : "", nb.n, &cuts) < 0)
        rc = vx_errf(c->err, VX_ENOMEM, "out of memory while encoding");
    for (size_t i = 0; rc == 0 && i < cuts.n; i++) {
        const tok_span *sp = &cuts.p[i];
        if (sp->m >= 0) {
            if (tok_ids_add(out, t->added[sp->m].id) < 0)
                rc = vx_errf(c->err, VX_ENOMEM, "out of memory while encoding");
            continue;
        }
        rc = tok_pretokenize(c, nb.p + sp->s, sp->e - sp->s, first && sp->s == 0, &pieces);
        for (size_t j = 0; rc == 0 && j < pieces.n; j++) {
            size_t k;
            const char *p = tok_piece(&pieces, j, &k);
            rc = tok_bpe_word(c, p, k, out);
        }
    }
    tok_buf_free(&nb);
    free(cuts.p);
    tok_pieces_free(&pieces);
    return rc;
}

/* A container need not carry a tokenizer (the model still runs on ids); the text doors
 * refuse on it by name rather than reading through NULL. */
static int no_tokenizer(vx_err *err, const char *what)
{
    return vx_errf(err, VX_EMISSING, "this container has no tokenizer (no tokenizer.json in "
                   "its directory): %s", what);
}

int eng_tok_encode(const eng_tokenizer *t, const char *text, size_t len, int add_special,
                   int32_t **ids, size_t *n, vx_err *err)
{
    *ids = NULL;
    *n = 0;
    if (!t)
        return no_tokenizer(err, "text cannot be turned into token ids");
    if (!text && len)
        return vx_errf(err, VX_EARG, "encode: NULL text of %zu bytes", len);
    tok_ctx c = {.t = t, .err = err};
    tok_buf clean = {0};
    tok_spans cuts = {0};
    tok_ids out = {0};
    int rc = 0;
    if (!(c.md = pcre2_match_data_create(1, NULL)) || tok_utf8_lossy(text ? text : "", len,
                                                                      &clean) < 0 ||
        tok_added_split(t, &t->raw_trie, clean.p ? clean.p : "", clean.n, &cuts) < 0)
        rc = vx_errf(err, VX_ENOMEM, "out of memory while encoding");
    if (rc == 0 && add_special)
        rc = put_ids(t, &out, t->post_pre.p, t->post_pre.n, err);
    for (size_t i = 0; rc == 0 && i < cuts.n; i++) {
        const tok_span *sp = &cuts.p[i];
        if (sp->m >= 0)
            rc = tok_ids_add(&out, t->added[sp->m].id) < 0
                     ? vx_errf(err, VX_ENOMEM, "out of memory while encoding") : 0;
        else
            rc = encode_segment(&c, clean.p + sp->s, sp->e - sp->s, sp->s == 0, &out);
    }
    if (rc == 0 && add_special)
        rc = put_ids(t, &out, t->post_post.p, t->post_post.n, err);
    tok_ctx_free(&c);
    tok_buf_free(&clean);
    free(cuts.p);
    if (rc < 0) {
        free(out.p);
        return -1;
    }
    *ids = out.p ? out.p : calloc(1, sizeof **ids);   /* non-NULL even when empty */
    *n = out.n;
    if (!*ids)
        return vx_errf(err, VX_ENOMEM, "out of memory");
    return 0;
}

/* ---------------------------------------------------------------- decode and lookups */

int eng_tok_decode(const eng_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                   char **out, vx_err *err)
{
    size_t len;
    return eng_tok_decode_len(t, ids, n, skip_special, out, &len, err);
}

static int decode_ids(const eng_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                      int after, char **out, size_t *len, vx_err *err)
{
    *out = NULL;
    *len = 0;
    if (!t)
        return no_tokenizer(err, "token ids cannot be turned into text");
    tok_pieces toks = {0};
    tok_buf s = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->n_ids || !t->piece[id]) {
            tok_pieces_free(&toks);
            if (id < 0 || (size_t)id >= t->n_ids)
                return vx_errf(err, VX_EARG, "cannot decode token id %d: the vocab has ids "
                               "0..%zu", (int)id, t->n_ids - 1);
            return vx_errf(err, VX_EARG, "cannot decode token id %d: no token has that id",
                           (int)id);
        }
        if (skip_special && t->special[id])
            continue;
        if (tok_pieces_add(&toks, t->piece[id], t->plen[id]) < 0) {
            tok_pieces_free(&toks);
            return vx_errf(err, VX_ENOMEM, "out of memory while decoding");
        }
    }
    int rc = tok_decode_pieces(t, &toks, after, &s, err);
    tok_pieces_free(&toks);
    if (rc == 0 && !s.p && tok_buf_put(&s, "", 0) < 0)
        rc = vx_errf(err, VX_ENOMEM, "out of memory while decoding");
    if (rc < 0) {
        tok_buf_free(&s);
        return -1;
    }
    *out = s.p;
    *len = s.n;
    return 0;
}

int eng_tok_decode_len(const eng_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                       char **out, size_t *len, vx_err *err)
{
    return decode_ids(t, ids, n, skip_special, 0, out, len, err);
}

int eng_tok_decode_after(const eng_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                         char **out, size_t *len, vx_err *err)
{
    return decode_ids(t, ids, n, skip_special, 1, out, len, err);
}

int eng_tok_has_text(const eng_tokenizer *t, const int32_t *ids, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    vx_err e;
    int has = decode_ids(t, ids, n, 1, 0, &text, &len, &e) == 0 && len > 0;
    free(text);
    return has;
}

const char *eng_tok_piece(const eng_tokenizer *t, int32_t id)
{
    return t && id >= 0 && (size_t)id < t->n_ids ? t->piece[id] : NULL;
}

int32_t eng_tok_lookup(const eng_tokenizer *t, const char *piece)
{
    if (!t)
        return -1;
    size_t n = strlen(piece);
    int32_t id = tok_smap_get(&t->added_map, piece, n);
    return id >= 0 ? id : tok_smap_get(&t->vocab, piece, n);
}

size_t eng_tok_vocab_size(const eng_tokenizer *t)
{
    return t ? t->n_ids : 0;
}

int eng_tok_is_special(const eng_tokenizer *t, int32_t id)
{
    return t && id >= 0 && (size_t)id < t->n_ids && t->special[id];
}

/* Is a vocabulary piece only word-start marks ("▁", "Ġ") and spaces ("▁▁" included)? */
static int blank_piece(const char *p)
{
    if (!p || !*p)
        return 0;
    while (*p)
        if (!strncmp(p, "\xe2\x96\x81", 3))
            p += 3;
        else if (!strncmp(p, "\xc4\xa0", 2))
            p += 2;
        else if (*p == ' ')
            p++;
        else
            return 0;
    return 1;
}

int eng_tok_answer_ids(const eng_tokenizer *t, const char *text, int32_t **ids, size_t *n,
                       vx_err *err)
{
    *ids = NULL;
    *n = 0;
    /* a space the caller wrote is the space the model says, not a second one */
    const char *w = text[0] == ' ' && text[1] ? text + 1 : text;
    size_t len = strlen(w);
    char *s = malloc(len + 2);
    if (!s)
        return vx_errf(err, VX_ENOMEM, "out of memory");
    s[0] = ' ';
    memcpy(s + 1, w, len + 1);
    int rc = eng_tok_encode(t, s, len + 1, 0, ids, n, err);
    free(s);
    if (rc)
        return -1;
    size_t skip = 0;
    while (skip < *n && blank_piece(eng_tok_piece(t, (*ids)[skip])))
        skip++;
    memmove(*ids, *ids + skip, (*n - skip) * sizeof **ids);
    *n -= skip;
    return 0;
}
