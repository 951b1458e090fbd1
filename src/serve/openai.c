/*
 * openai.c — the model-facing routes: /v1/models (computed once), /v1/tokenize,
 * /v1/detokenize, /v1/completions and /v1/chat/completions (OpenAI's shape, SSE streaming
 * with usage), /v1/trace
 * (the bytes TRACE SAVE writes). Each runs the session's effective model when a session is
 * given. Chat completions render the container's (or --chat-template's) template with the
 * Jinja subset of jinja.c; without one they are refused: the server never guesses a template.
 */
#define _GNU_SOURCE             /* memmem */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "jinja.h"
#include "shell.h"
#include "srv_int.h"

/* ---------------------------------------------------------------- models */

/* A special token's text from tokenizer_config.json (a string or {"content": …}). */
static char *special(const cJSON *cfg, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, k);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return strdup(cJSON_IsString(v) ? v->valuestring : "");
}

/* The chat template: --chat-template FILE (a template, or a tokenizer_config.json holding
 * one), else the container's tokenizer_config.json `chat_template` (a string, or the entry
 * named "default" of a list), else its chat_template.jinja. Never guessed from the family:
 * none found leaves chat disabled, as does one outside the subset (the status says why). */
static int template_init(srv *S, lql_err *e)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", S->container);
    char *text = lql_read_file(p, 16u << 20, NULL), *src = NULL;
    cJSON *cfg = text ? cJSON_Parse(text) : NULL, *tcfg = NULL;
    free(text);
    S->bos = special(cfg, "bos_token");
    S->eos = special(cfg, "eos_token");
    const char *from = S->o->chat_template;
    if (from) {
        src = lql_read_file(from, 16u << 20, NULL);
        if (!src) {
            cJSON_Delete(cfg);
            return lql_errf(e, LQL_EEXEC, NULL, "--chat-template %s: cannot read it", from);
        }
        size_t n = strlen(from);
        if (n > 5 && !strcmp(from + n - 5, ".json")) {
            tcfg = cJSON_Parse(src);
            free(src);
            src = NULL;
            cfg = tcfg ? (cJSON_Delete(cfg), tcfg) : cfg;
            tcfg = NULL;
        }
    }
    if (!src) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), *x;
        if (cJSON_IsArray(t))
            cJSON_ArrayForEach(x, t)
                if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "name")) ?: "", "default"))
                    t = cJSON_GetObjectItemCaseSensitive(x, "template");
        if (cJSON_IsString(t)) src = strdup(t->valuestring);
    }
    if (!src && !from) {
        snprintf(p, sizeof p, "%s/chat_template.jinja", S->container);
        src = lql_read_file(p, 16u << 20, NULL);
    }
    cJSON_Delete(cfg);
    char err[256];
    if (!src) snprintf(S->tmpl_status, sizeof S->tmpl_status, "absent");
    else if ((S->tmpl = srv_tmpl_compile(src, strlen(src), err, sizeof err)))
        snprintf(S->tmpl_status, sizeof S->tmpl_status, "ok");
    else
        snprintf(S->tmpl_status, sizeof S->tmpl_status, "unsupported: %s", err);
    free(src);
    return 0;
}

int srv_models_init(srv *S, lql_err *e)
{
    /* before entering the base, which makes the temporary root the working directory: a
     * relative --chat-template names a file where lql was started */
    if (template_init(S, e) < 0 || srv_sess_enter(S, S->base, e) < 0) return -1;
    eng_model *m = NULL;
    if (lql_session_model(S->base->s, NULL, &m, e) < 0) return -1;
    const vx_container *c = S->base->s->vx;
    const char *name = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(vx_index_json(c), "model"));
    if (!name || !*name) {
        name = strrchr(S->container, '/');
        name = name ? name + 1 : S->container;
    }
    S->model_id = strdup(name);
    S->context = eng_model_context(m);
    S->vocab = eng_model_vocab(m);
    cJSON *doc = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(doc, "data"),
          *o = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "object", "list");
    cJSON_AddStringToObject(o, "id", name);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", 0);
    cJSON_AddStringToObject(o, "owned_by", "lql");
    cJSON_AddNumberToObject(o, "layers", eng_model_layers(m));
    cJSON_AddNumberToObject(o, "hidden", eng_model_hidden(m));
    cJSON_AddNumberToObject(o, "vocab", S->vocab);
    cJSON_AddNumberToObject(o, "context", S->context);
    cJSON_AddStringToObject(o, "index_sha256", vx_index_sha256(c));
    cJSON_AddStringToObject(o, "chat_template", S->tmpl_status);
    cJSON_AddItemToArray(data, o);
    S->models = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    if (!S->models || !S->model_id) return lql_errf(e, LQL_ENOMEM, NULL, "out of memory");
    return 0;
}

/* ---------------------------------------------------------------- helpers */

/* The session's model and tokenizer on the compute thread; -1 after answering. */
static int model_of(srv *S, srv_job *j, eng_model **m)
{
    lql_err e = {0};
    if (srv_job_enter(S, j, "model_unavailable") < 0) return -1;
    if (lql_session_model(j->sess->s, NULL, m, &e) < 0) {
        srv_job_failed(j, "the request", e.msg, "model_unavailable");
        return -1;
    }
    return 0;
}

static cJSON *item(const srv_job *j, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(j->req, k);
}

/* ---------------------------------------------------------------- tokenize */

void srv_tokenize_run(srv *S, srv_job *j)
{
    static const char *const keys[] = {"text", "add_special", "session", "stream"};
    if (srv_keys_only(j, j->req, keys, 4, NULL) < 0) return;
    const cJSON *t = item(j, "text"), *sp = item(j, "add_special");
    if (!cJSON_IsString(t) || (sp && !cJSON_IsBool(sp))) {
        srv_job_error(j, 400, cJSON_IsString(t) ? "\"add_special\" must be a boolean"
                      : "\"text\" must be a string", "invalid_request_error", "invalid_value",
                      cJSON_IsString(t) ? "add_special" : "text");
        return;
    }
    eng_model *m;
    if (model_of(S, j, &m) < 0) return;
    int32_t *ids = NULL;
    size_t n = 0;
    vx_err ve = {0};
    if (eng_tok_encode(eng_model_tokenizer(m), t->valuestring, strlen(t->valuestring),
                       !sp || cJSON_IsTrue(sp), &ids, &n, &ve) < 0) {
        srv_job_error(j, 400, ve.msg, "invalid_request_error", "tokenize_failed", "text");
        return;
    }
    cJSON *doc = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(doc, "tokens"),
          *p = cJSON_AddArrayToObject(doc, "pieces");
    for (size_t i = 0; i < n; i++) {
        cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
        const char *piece = eng_tok_piece(eng_model_tokenizer(m), ids[i]);
        cJSON_AddItemToArray(p, cJSON_CreateString(piece ? piece : ""));
    }
    free(ids);
    srv_job_json(j, 200, doc);
}

void srv_detokenize_run(srv *S, srv_job *j)
{
    static const char *const keys[] = {"tokens", "skip_special", "session", "stream"};
    if (srv_keys_only(j, j->req, keys, 4, NULL) < 0) return;
    const cJSON *t = item(j, "tokens"), *sk = item(j, "skip_special");
    if (!cJSON_IsArray(t) || (sk && !cJSON_IsBool(sk))) {
        srv_job_error(j, 400, cJSON_IsArray(t) ? "\"skip_special\" must be a boolean"
                      : "\"tokens\" must be an array of token ids", "invalid_request_error",
                      "invalid_value", cJSON_IsArray(t) ? "skip_special" : "tokens");
        return;
    }
    eng_model *m;
    if (model_of(S, j, &m) < 0) return;
    /* ids the tokenizer has beyond the model's rows (an added <mask>) decode too: decoding
     * reads no embedding, and /v1/tokenize returns them */
    size_t tv = eng_tok_vocab_size(eng_model_tokenizer(m));
    int n = cJSON_GetArraySize(t), vocab = eng_model_vocab(m);
    if (tv > (size_t)vocab && tv <= INT32_MAX) vocab = (int)tv;
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) { srv_job_error(j, 500, "out of memory", "server_error", "out_of_memory", NULL); return; }
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, t) {   /* by link: cJSON_GetArrayItem(t, i) walks from the head */
        int64_t id;
        if (!srv_json_int(v, 0, vocab - 1, &id)) {
            char msg[128];
            snprintf(msg, sizeof msg, "tokens[%d] is not a token id in [0, %d)", i, vocab);
            srv_job_error(j, 400, msg, "invalid_request_error", "invalid_value", "tokens");
            free(ids);
            return;
        }
        ids[i++] = (int32_t)id;
    }
    char *text = NULL;
    size_t len = 0;
    vx_err ve = {0};
    int rc = eng_tok_decode_len(eng_model_tokenizer(m), ids, (size_t)n, sk && cJSON_IsTrue(sk), &text,
                                &len, &ve);
    free(ids);
    if (rc < 0) { srv_job_error(j, 400, ve.msg, "invalid_request_error", "detokenize_failed", "tokens"); return; }
    cJSON *doc = cJSON_CreateObject();
    int oom = !srv_json_add_text(doc, "text", text, len);
    free(text);
    if (oom) { cJSON_Delete(doc); srv_job_error(j, 500, "out of memory", "server_error", "out_of_memory", NULL); return; }
    srv_job_json(j, 200, doc);
}

/* ---------------------------------------------------------------- completions */

/* Fields the server refuses rather than ignore: name, and whether a value is harmless. */
static int harmless(const char *k, const cJSON *v)
{
    if (cJSON_IsNull(v)) return 1;
    if (!strcmp(k, "n") || !strcmp(k, "best_of")) return cJSON_IsNumber(v) && v->valuedouble == 1;
    if (!strcmp(k, "echo") || !strcmp(k, "logprobs")) return cJSON_IsFalse(v);
    if (!strcmp(k, "logit_bias")) return cJSON_IsObject(v) && !v->child;
    if (!strcmp(k, "frequency_penalty") || !strcmp(k, "presence_penalty"))
        return cJSON_IsNumber(v) && v->valuedouble == 0;
    return 0;                   /* tools, tool_choice, functions, function_call, suffix, … */
}

static const char *const refused[] = {"n", "echo", "best_of", "tools", "tool_choice",
    "functions", "function_call", "logit_bias", "logprobs", "top_logprobs", "suffix",
    "frequency_penalty", "presence_penalty", "response_format"};

static int bad(srv_job *j, const char *msg, const char *param)
{
    srv_job_error(j, 400, msg, "invalid_request_error", "invalid_value", param);
    return -1;
}

/* Fields honoured (or, "user", harmless to ignore); the route's own input. Any other field
 * is refused like the refused ones: ignoring it would answer something not asked for. */
static const char *const honoured[] = {"model", "max_tokens", "max_completion_tokens",
    "temperature", "top_p", "seed", "stop", "stream", "stream_options", "session", "user"};

static int known(const char *k, int chat)
{
    for (size_t i = 0; i < sizeof honoured / sizeof honoured[0]; i++)
        if (!strcmp(k, honoured[i])) return 1;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (!strcmp(k, refused[i])) return 1;
    return !strcmp(k, chat ? "messages" : "prompt");
}

/* The largest seed a double carries exactly, and so every integer below: cJSON reads numbers
 * as doubles, so 2^53 + 1 would arrive as 2^53, a different seed than the one asked for. */
#define SEED_MAX ((1LL << 53) - 1)

/* max_tokens, or chat's newer name for it */
static const cJSON *max_tokens_of(const srv_job *j)
{
    const cJSON *v = item(j, "max_tokens");
    return v && !cJSON_IsNull(v) ? v : item(j, "max_completion_tokens");
}

/* One stop string: the same rule alone or in a list (a streamed text is held back by its length). */
static int stop_ok(const cJSON *s)
{
    return cJSON_IsString(s) && *s->valuestring && strlen(s->valuestring) < 256;
}

int srv_complete_check(srv *S, srv_job *j, int chat)
{
    char msg[256];
    for (const cJSON *f = j->req->child; f; f = f->next)
        if (!known(f->string, chat)) return srv_unsupported(j, NULL, f->string);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const cJSON *v = item(j, refused[i]);
        if (v && !harmless(refused[i], v)) return srv_unsupported(j, NULL, refused[i]);
    }
    const cJSON *model = item(j, "model");
    if (model && (!cJSON_IsString(model) || strcmp(model->valuestring, S->model_id))) {
        snprintf(msg, sizeof msg, "model \"%.100s\" is not served here (GET /v1/models: \"%.100s\")",
                 cJSON_IsString(model) ? model->valuestring : "?", S->model_id);
        srv_job_error(j, 404, msg, "invalid_request_error", "model_not_found", "model");
        return -1;
    }
    if (chat) {
        if (!S->tmpl) {
            snprintf(msg, sizeof msg, "chat completions need the model's chat template, which is %.180s",
                     S->tmpl_status);
            srv_job_error(j, 400, msg, "invalid_request_error", "chat_template_unavailable", "messages");
            return -1;
        }
        const cJSON *ms = item(j, "messages"), *x;
        int ok = cJSON_IsArray(ms) && cJSON_GetArraySize(ms) > 0;
        cJSON_ArrayForEach(x, ms) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(x, "content");
            ok &= cJSON_IsObject(x) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(x, "role")) &&
                  (!c || cJSON_IsString(c) || cJSON_IsArray(c) || cJSON_IsNull(c));
        }
        if (!ok) return bad(j, "\"messages\" must be a non-empty array of {\"role\": string, "
                            "\"content\": string or parts}", "messages");
    } else {
        const cJSON *p = item(j, "prompt");
        if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = cJSON_GetArrayItem(p, 0);
        if (!cJSON_IsString(p) || !*p->valuestring)
            return bad(j, "\"prompt\" must be a non-empty string", "prompt");
    }
    const cJSON *v = item(j, "max_tokens"), *v2 = item(j, "max_completion_tokens");
    if (v && !cJSON_IsNull(v) && v2 && !cJSON_IsNull(v2))
        return bad(j, "give one of \"max_tokens\" and \"max_completion_tokens\"", "max_completion_tokens");
    v = max_tokens_of(j);
    if (v && !cJSON_IsNull(v) && !srv_json_int(v, 1, S->o->tokens_max, NULL)) {
        snprintf(msg, sizeof msg, "\"%s\" must be an integer in [1, %d]", v->string, S->o->tokens_max);
        return bad(j, msg, v->string);
    }
    v = item(j, "temperature");
    if (v && !cJSON_IsNull(v) && (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2))
        return bad(j, "\"temperature\" must be a number in [0, 2]", "temperature");
    v = item(j, "top_p");
    if (v && !cJSON_IsNull(v) && (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 1)))
        return bad(j, "\"top_p\" must be a number in (0, 1]", "top_p");
    v = item(j, "seed");
    if (v && !cJSON_IsNull(v) && !srv_json_int(v, 0, SEED_MAX, NULL))
        return bad(j, "\"seed\" must be an integer in [0, 2^53 - 1]: a JSON number is read as a "
                   "double, which rounds larger ones (2^53 + 1 would run as 2^53; the shell's SEED "
                   "takes up to 2^63 - 1)", "seed");
    v = item(j, "stop");
    if (v && !cJSON_IsNull(v)) {
        int ok = stop_ok(v);
        if (cJSON_IsArray(v)) {
            ok = cJSON_GetArraySize(v) <= 4;
            const cJSON *s;
            cJSON_ArrayForEach(s, v) ok &= stop_ok(s);
        }
        if (!ok) return bad(j, "\"stop\" must be a string of 1 to 255 bytes or a list of up to 4 of "
                            "them", "stop");
    }
    v = item(j, "stream");
    if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) return bad(j, "\"stream\" must be a boolean", "stream");
    v = item(j, "stream_options");
    if (v && !cJSON_IsNull(v)) {
        if (!j->stream) return bad(j, "\"stream_options\" applies only with \"stream\": true", "stream_options");
        static const char *const opts[] = {"include_usage"};
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(v, "include_usage");
        if (!cJSON_IsObject(v) || (u && !cJSON_IsBool(u)))
            return bad(j, "\"stream_options\" must be {\"include_usage\": bool}", "stream_options");
        if (srv_keys_only(j, v, opts, 1, "stream_options") < 0) return -1;
    }
    return 0;
}

typedef struct gen {
    srv *S;
    srv_job *j;
    const eng_model *m;
    const eng_tokenizer *tok;
    eng_session *es;            /* room for the prompt and all but the last token */
    eng_sampler sp;
    uint64_t rng;               /* the sampler's stream */
    int32_t *prompt;            /* until the prefill */
    size_t np;
    int32_t *ids;               /* the tokens generated */
    int n, max;
    const char *stops[4];
    int nstops;
    size_t hold;                /* bytes held back while they may start a stop string */
    char *text;                 /* the decoded continuation (truncated at a stop) */
    size_t len;                 /* its bytes: a token may decode to a NUL */
    size_t emitted;
    int stopped;                /* a stop string ended it */
    int late;                   /* tokens that arrived after the job was cancelled */
    char id[40];
    long created;
    int chat;                   /* chat.completion shapes */
    int after;                  /* the prompt has text: the continuation follows it */
} gen;

/* The common members of every answer and chunk. */
static cJSON *answer_head(const gen *g, int chunk)
{
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "id", g->id);
    cJSON_AddStringToObject(doc, "object", g->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                   : "text_completion");
    cJSON_AddNumberToObject(doc, "created", (double)g->created);
    cJSON_AddStringToObject(doc, "model", g->S->model_id);
    return doc;
}

/* One choice: text (completions) or a message / delta (chat). */
static cJSON *choice(const gen *g, const char *text, size_t n, const char *finish, int chunk)
{
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    if (g->chat) {
        cJSON *m = cJSON_AddObjectToObject(ch, chunk ? "delta" : "message");
        if (!chunk || !g->emitted) cJSON_AddStringToObject(m, "role", "assistant");
        if (!srv_json_add_text(m, "content", text, n)) { cJSON_Delete(ch); return NULL; }
    } else if (!srv_json_add_text(ch, "text", text, n)) {
        cJSON_Delete(ch);
        return NULL;
    }
    cJSON_AddNullToObject(ch, "logprobs");
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    return ch;
}

static void emit_chunk(gen *g, const char *text, size_t n, const char *finish)
{
    cJSON *doc = answer_head(g, 1), *ch = choice(g, text, n, finish, 1);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(doc, "choices"), ch);
    char *ev = ch ? cJSON_PrintUnformatted(doc) : NULL;
    srv_emit(g->S, g->j, ev ? ev : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    free(ev);
    cJSON_Delete(doc);
}

size_t srv_text_ready(const char *text, size_t len, size_t n)
{
    while (n > 0 && n < len && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
    /* only the bytes at the very end can still become a character; a U+FFFD anything
     * follows is final (holding it would stall the stream for good) */
    if (n == len)
        while (n >= 3 && memcmp(text + n - 3, "\xEF\xBF\xBD", 3) == 0) n -= 3;
    return n;
}

/* How many bytes of g->text may go out now: not a possible stop-string start, not an
 * unfinished character. */
static size_t safe_len(const gen *g, int final)
{
    size_t n = g->len;
    if (final) return n;
    return srv_text_ready(g->text, n, n > g->hold ? n - g->hold : 0);
}

static int on_token(void *ctx, int32_t id)
{
    gen *g = ctx;
    g->ids[g->n++] = id;
    if (g->j->cancel) { g->late++; return 1; }    /* the one in flight: generation ends here */
    char *t = NULL;
    size_t len = 0;
    vx_err ve = {0};
    if ((g->after ? eng_tok_decode_after : eng_tok_decode_len)(g->tok, g->ids, (size_t)g->n, 1,
                                                               &t, &len, &ve) < 0) return 1;
    free(g->text);
    g->text = t;
    g->len = len;
    for (int k = 0; k < g->nstops; k++) {
        char *at = memmem(g->text, g->len, g->stops[k], strlen(g->stops[k]));
        if (at) { *at = 0; g->len = (size_t)(at - g->text); g->stopped = 1; }
    }
    if (g->j->stream) {
        size_t n = safe_len(g, g->stopped);
        if (n > g->emitted) emit_chunk(g, g->text + g->emitted, n - g->emitted, NULL);
        if (n > g->emitted) g->emitted = n;
    }
    return g->stopped;
}

/* An error after the stream's first event travels as its last event; one before it
 * (template, tokenizer, context, a prompt stopped) is answered as the job's status. */
static void end_stream(srv *S, srv_job *j)
{
    if (j->stream && srv_stream_started(j)) {
        srv_emit(S, j, j->body.p ? j->body.p : "{\"error\":{\"message\":\"failed\"}}");
        srv_emit(S, j, "[DONE]");
    }
}

/* A completion set up on the compute thread: its prompt rendered and tokenized, its
 * sampler, and a session with room for it; -1 after answering j. */
static int gen_open(srv *S, srv_job *j, gen *g)
{
    eng_model *m;
    if (model_of(S, j, &m) < 0) return -1;
    int chat = item(j, "messages") != NULL;
    char *rendered = NULL;
    const char *prompt_text;
    if (chat) {
        /* the template sees the request's messages; it writes BOS itself when it wants one */
        cJSON *vars = cJSON_CreateObject();
        char err[256];
        cJSON_AddItemReferenceToObject(vars, "messages", item(j, "messages"));
        cJSON_AddBoolToObject(vars, "add_generation_prompt", 1);
        cJSON_AddStringToObject(vars, "bos_token", S->bos);
        cJSON_AddStringToObject(vars, "eos_token", S->eos);
        rendered = srv_tmpl_render(S->tmpl, vars, err, sizeof err);
        cJSON_Delete(vars);
        if (!rendered) {
            char msg[300];
            snprintf(msg, sizeof msg, "the chat template: %s", err);
            srv_job_error(j, 400, msg, "invalid_request_error", "template_error", "messages");
            return -1;
        }
        prompt_text = rendered;
    } else {
        const cJSON *p = item(j, "prompt");
        if (cJSON_IsArray(p)) p = cJSON_GetArrayItem(p, 0);
        prompt_text = p->valuestring;
    }
    const cJSON *v;
    int max = 16;
    eng_sampler sp = {1.0f, 0, 1.0f, 0};
    int64_t iv;
    if (srv_json_int(max_tokens_of(j), 1, S->o->tokens_max, &iv)) max = (int)iv;
    if ((v = item(j, "temperature")) && cJSON_IsNumber(v)) sp.temperature = eng_sampler_param(v->valuedouble);
    if ((v = item(j, "top_p")) && cJSON_IsNumber(v)) sp.top_p = eng_sampler_param(v->valuedouble);
    if (srv_json_int(item(j, "seed"), 0, SEED_MAX, &iv)) sp.seed = (uint64_t)iv;
    else if (getrandom(&sp.seed, sizeof sp.seed, 0) != (ssize_t)sizeof sp.seed) sp.seed = (uint64_t)time(NULL);

    *g = (gen){.S = S, .j = j, .m = m, .tok = eng_model_tokenizer(m), .sp = sp,
               .rng = eng_sampler_stream(sp.seed), .max = max, .created = time(NULL), .chat = chat};
    unsigned char r[12];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) memset(r, 0, sizeof r);
    int o = snprintf(g->id, sizeof g->id, chat ? "chatcmpl-" : "cmpl-");
    for (int i = 0; i < 12; i++) o += snprintf(g->id + o, sizeof g->id - (size_t)o, "%02x", r[i]);
    if ((v = item(j, "stop")) && cJSON_IsString(v)) g->stops[g->nstops++] = v->valuestring;
    else if (cJSON_IsArray(v)) {
        const cJSON *s;
        cJSON_ArrayForEach(s, v) g->stops[g->nstops++] = s->valuestring;
    }
    for (int k = 0; k < g->nstops; k++)
        if (strlen(g->stops[k]) > g->hold + 1) g->hold = strlen(g->stops[k]) - 1;

    vx_err ve = {0};
    /* a rendered chat prompt carries its special tokens: adding them would double BOS */
    int rc_tok = eng_tok_encode(g->tok, prompt_text, strlen(prompt_text), !chat, &g->prompt, &g->np, &ve);
    free(rendered);
    if (rc_tok < 0) {
        srv_job_error(j, 400, ve.msg, "invalid_request_error", "tokenize_failed", chat ? "messages" : "prompt");
        return -1;
    }
    g->after = eng_tok_has_text(g->tok, g->prompt, g->np);
    /* the shell's rule (INFER … GENERATE): the last token generated is never fed back, so
     * it needs no position; a prompt too long on its own is the prompt's fault */
    if ((int64_t)g->np + max - 1 > S->context) {
        char msg[240];
        const int alone = (int64_t)g->np > S->context;
        if (alone)
            snprintf(msg, sizeof msg, "prompt has %zu tokens, more than the model's context of %d",
                     g->np, S->context);
        else
            snprintf(msg, sizeof msg, "prompt (%zu tokens) + max_tokens %d exceeds the model's "
                     "context of %d (the prompt and all but the last generated token take a "
                     "position)", g->np, max, S->context);
        srv_job_error(j, 400, msg, "invalid_request_error", "context_length_exceeded",
                      alone ? (chat ? "messages" : "prompt") : "max_tokens");
        free(g->prompt);
        return -1;
    }
    g->ids = malloc((size_t)max * sizeof *g->ids);
    if (!g->ids || eng_session_new(m, (int)g->np + max - 1, &g->es, &ve) < 0) {
        srv_job_failed(j, "generation", g->ids ? ve.msg : "out of memory", "generation_failed");
        free(g->ids);
        free(g->prompt);
        return -1;
    }
    return 0;
}

/* Answer g's job once its generation ended (failed with msg when rc < 0) and free g. */
static void gen_close(srv *S, gen *g, int rc, const char *msg)
{
    srv_job *j = g->j;
    eng_session_free(g->es);
    free(g->prompt);
    pthread_mutex_lock(&S->mu);
    S->gen_tokens += g->n;
    if (g->late > S->late_tokens) S->late_tokens = g->late;
    pthread_mutex_unlock(&S->mu);
    if (rc < 0 || j->cancel) {
        srv_job_failed(j, "generation", msg ? msg : "stopped", "generation_failed");
        end_stream(S, j);
    } else {
        const int eos = g->n > 0 && eng_model_is_eos(g->m, g->ids[g->n - 1]);
        const char *finish = g->stopped || eos ? "stop" : "length";
        const char *text = g->text ? g->text : "";
        cJSON *usage = cJSON_CreateObject();
        cJSON_AddNumberToObject(usage, "prompt_tokens", (double)g->np);
        cJSON_AddNumberToObject(usage, "completion_tokens", g->n);
        cJSON_AddNumberToObject(usage, "total_tokens", (double)g->np + g->n);
        if (j->stream) {
            emit_chunk(g, text + g->emitted, g->len > g->emitted ? g->len - g->emitted : 0, finish);
            const cJSON *so = item(j, "stream_options");
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"))) {
                cJSON *doc = answer_head(g, 1);
                cJSON_AddArrayToObject(doc, "choices");
                cJSON_AddItemToObject(doc, "usage", usage);
                usage = NULL;
                char *ev = cJSON_PrintUnformatted(doc);
                if (ev) srv_emit(S, j, ev);
                free(ev);
                cJSON_Delete(doc);
            }
            cJSON_Delete(usage);
            srv_emit(S, j, "[DONE]");
        } else {
            cJSON *doc = answer_head(g, 0), *ch = choice(g, text, g->len, finish, 0);
            cJSON_AddItemToArray(cJSON_AddArrayToObject(doc, "choices"), ch);
            cJSON_AddItemToObject(doc, "usage", usage);
            if (ch) srv_job_json(j, 200, doc);
            else {
                cJSON_Delete(doc);
                srv_job_error(j, 500, "out of memory", "server_error", "out_of_memory", NULL);
            }
        }
    }
    free(g->ids);
    free(g->text);
    srv_job_done(S, j);
}

/* Prefill the joiners g[n..m) into their logits rows, as many per pass as eng_batch_fit
 * gives (eng_forward_batch; one alone takes eng_forward, as a completion alone always
 * did). A pass that fails answers its joiners. Returns the new member count: the joiners
 * that prefilled follow the members, in order, with their logits rows. */
static int prefill_joiners(srv *S, gen *g, int n, int m, eng_session **ss, int *lens,
                           float *logits, int V)
{
    vx_err ve = {0};
    for (int i = n; i < m; i++) lens[i] = (int)g[i].np;
    int k = n;
    for (int b = n; b < m;) {
        const int e = b + eng_batch_fit(lens + b, m - b);
        size_t rows = 0;
        for (int i = b; i < e; i++) rows += g[i].np;
        int32_t *ids = e - b > 1 ? malloc(rows * sizeof *ids) : NULL;
        int rc = e - b > 1 && !ids ? vx_errf(&ve, VX_ENOMEM, "out of memory for %zu prompt tokens", rows) : 0;
        srv_batch_arm(S, 0);
        if (!rc && e - b == 1) {
            rc = eng_forward(g[b].es, g[b].prompt, (int)g[b].np, logits + (size_t)b * V, NULL, &ve);
        } else if (!rc) {
            size_t at = 0;
            for (int i = b; i < e; i++) {
                memcpy(ids + at, g[i].prompt, g[i].np * sizeof *ids);
                at += g[i].np;
                ss[i - b] = g[i].es;
            }
            rc = eng_forward_batch(ss, e - b, ids, lens + b, logits + (size_t)b * V, NULL, &ve);
        }
        free(ids);
        for (int i = b; i < e; i++) {
            if (rc < 0) {
                gen_close(S, &g[i], -1, ve.msg);
                continue;
            }
            free(g[i].prompt);
            g[i].prompt = NULL;
            if (k != i) {
                g[k] = g[i];
                memcpy(logits + (size_t)k * V, logits + (size_t)i * V, (size_t)V * sizeof *logits);
            }
            k++;
        }
        b = e;
    }
    return k;
}

/* Completions decode together: j and those queued behind it for the same session join one
 * batch (srv_admit, up to batch_max), prefilled together as they join, then every step is
 * one pass over the batch's last tokens (eng_forward_batch), each sampled with its own
 * sampler and stream. A completion leaves as soon as it ends, and others join between
 * steps. A batch of one computes what eng_generate_each would, bit for bit. */
void srv_complete_run(srv *S, srv_job *j)
{
    const int cap = S->o->batch_max;
    gen *g = calloc((size_t)cap, sizeof *g);
    eng_session **ss = calloc((size_t)cap, sizeof *ss);
    int32_t *next = calloc((size_t)cap, sizeof *next);
    int *ones = calloc((size_t)cap, sizeof *ones), *lens = calloc((size_t)cap, sizeof *lens);
    float *logits = NULL;
    int V = 0, n = 0;
    if (!g || !ss || !next || !ones || !lens) {
        srv_job_error(j, 500, "out of memory", "server_error", "out_of_memory", NULL);
        goto out;
    }
    for (int b = 0; b < cap; b++) ones[b] = 1;
    vx_err ve = {0};
    for (srv_job *nj = j; nj || n;) {
        int m = n;
        for (; nj; nj = m < cap ? srv_admit(S, j) : NULL) {
            if (gen_open(S, nj, &g[m]) < 0) {
                end_stream(S, nj);
                srv_job_done(S, nj);
                continue;
            }
            m++;
        }
        if (m > n && !logits) {
            V = eng_model_vocab(g[n].m);
            if (!(logits = malloc((size_t)cap * V * sizeof *logits)))
                for (; m > n; m--) gen_close(S, &g[m - 1], -1, "out of memory");
        }
        n = prefill_joiners(S, g, n, m, ss, lens, logits, V);
        /* sample every member; those that go on move down to rows 0..k */
        int k = 0;
        for (int b = 0; b < n; b++) {
            gen *x = &g[b];
            if (!x->j->cancel) {
                int32_t id = eng_sample(&x->sp, logits + (size_t)b * V, V, &x->rng);
                const int stop = on_token(x, id);
                if (!stop && !eng_model_is_eos(x->m, id) && x->n < x->max) {
                    if (k != b) g[k] = *x;
                    ss[k] = g[k].es;
                    next[k++] = id;
                    continue;
                }
            }
            gen_close(S, x, 0, NULL);
        }
        n = k;
        if (n) {
            srv_batch_arm(S, n);
            if (eng_forward_batch(ss, n, next, ones, logits, NULL, &ve) < 0) {
                for (int b = 0; b < n; b++) gen_close(S, &g[b], -1, ve.msg);
                n = 0;
            }
        }
        nj = n < cap ? srv_admit(S, j) : NULL;
    }
out:
    free(g);
    free(ss);
    free(next);
    free(ones);
    free(lens);
    free(logits);
}

/* ---------------------------------------------------------------- trace */

void srv_trace_run(srv *S, srv_job *j)
{
    static const char *const keys[] = {"prompt", "session", "stream"};
    if (srv_keys_only(j, j->req, keys, 3, NULL) < 0) return;
    /* "" is the shell's TRACE "": BOS alone where the model has one, else its refusal */
    const cJSON *p = item(j, "prompt");
    if (!cJSON_IsString(p)) { bad(j, "\"prompt\" must be a string", "prompt"); return; }
    lql_err e = {0};
    if (srv_job_enter(S, j, "model_unavailable") < 0) return;
    /* TRACE SAVE into a private name in the working directory (the sandbox or the root) */
    unsigned char r[8];
    char name[40];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) memset(r, 0, sizeof r);
    int o = snprintf(name, sizeof name, "trace-");
    for (int i = 0; i < 8; i++) o += snprintf(name + o, sizeof name - (size_t)o, "%02x", r[i]);
    snprintf(name + o, sizeof name - (size_t)o, ".bin");
    srv_buf q = {0};
    int oom = srv_buf_add(&q, "TRACE \"", 7) < 0;
    for (const char *c = p->valuestring; *c && !oom; c++)
        oom = ((*c == '"' || *c == '\\') && srv_buf_add(&q, "\\", 1) < 0) || srv_buf_add(&q, c, 1) < 0;
    oom = oom || srv_buf_add(&q, "\" SAVE \"", 8) < 0 || srv_buf_add(&q, name, strlen(name)) < 0 ||
          srv_buf_add(&q, "\";", 2) < 0;
    char *out = NULL;
    int rc = oom ? lql_errf(&e, LQL_ENOMEM, NULL, "out of memory")
                 : lql_eval(j->sess->s, q.p, q.n, LQL_OUT_TSV, &out, &e);
    free(out);
    srv_buf_free(&q);
    if (rc < 0) {
        if (j->cancel == SRV_DEADLINE)
            srv_job_error(j, 504, "the request's deadline passed: TRACE was stopped", "timeout_error",
                          "deadline_exceeded", NULL);
        else
            srv_job_error(j, e.code == LQL_ENOMEM ? 500 : 400, e.msg, "invalid_request_error",
                          "lql_error", "prompt");
        unlink(name);
        return;
    }
    int fd = open(name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0) {
        srv_job_error(j, 500, "TRACE SAVE wrote no file", "server_error", "trace_failed", NULL);
    } else if ((size_t)sb.st_size > S->o->trace_max) {
        char msg[160];
        snprintf(msg, sizeof msg, "the trace holds %lld bytes, over the cap of %zu", (long long)sb.st_size,
                 S->o->trace_max);
        srv_job_error(j, 413, msg, "invalid_request_error", "trace_too_large", "prompt");
    } else {
        srv_buf_free(&j->body);
        char buf[65536];
        ssize_t k;
        while ((k = read(fd, buf, sizeof buf)) > 0) srv_buf_add(&j->body, buf, (size_t)k);
        j->status = 200;
        j->ctype = "application/octet-stream";
    }
    if (fd >= 0) close(fd);
    unlink(name);
}
