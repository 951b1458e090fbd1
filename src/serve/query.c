/*
 * query.c — POST /v1/query {"lql", "session"?, "format"?, "stream"?}: the statements run
 * in order and stop at the first failure, each through lql_eval_to, the shell's own
 * evaluation in its program modes (exact floats, notes apart), so a body in a format is the
 * shell's stdout byte for byte and the typed answer (no format) is the shell's json frames.
 * Statement classes (the statement table's cls column) decide what may run: host-local
 * statements never, edits only in a writable session; file operands must be plain names and
 * resolve in the session's sandbox.
 */
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "shell.h"
#include "srv_int.h"

/* One statement's text within the request: the chunk lql_split finds from offset off
 * (leading blanks and comments included; positions inside it count from its start). */
typedef struct chunk {
    size_t off, len;
    int line, col;              /* where the chunk starts in the request text */
} chunk;

/* The next chunk at *i; 0 at the end of the text. */
static int next_chunk(const char *t, size_t n, size_t *i, int *line, int *col, chunk *c)
{
    /* blanks, `--` comments and empty statements (a lone `;`) are skipped, as the shell
     * skips them (LANGUAGE.md) */
    while (*i < n && (strchr(" \t\r\n\f\v;", t[*i]) ||
                      (t[*i] == '-' && *i + 1 < n && t[*i + 1] == '-'))) {
        if (t[*i] == '-') {
            while (*i < n && t[*i] != '\n') { (*i)++; (*col)++; }
        } else if (t[(*i)++] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
    if (*i >= n) return 0;
    c->off = *i;
    c->line = *line;
    c->col = *col;
    lql_split(t + *i, n - *i, &c->len);
    for (size_t k = *i; k < *i + c->len; k++) {
        if (t[k] == '\n') { (*line)++; *col = 1; }
        else if (((unsigned char)t[k] & 0xC0) != 0x80) (*col)++;
    }
    *i += c->len;
    return 1;
}

/* Positions in e (relative to c) made positions in the request text. */
static void place(lql_err *e, const chunk *c)
{
    if (e->line == 0) return;
    if (e->line == 1) e->col += c->col - 1;
    e->line += c->line - 1;
}

static int first_char(const char *t, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (t[k] != ' ' && t[k] != '\t' && t[k] != '\r' && t[k] != '\n') return t[k];
    return 0;
}

/* An LQL error as the envelope's members: statement (1-based), kind, line, col, len. */
static cJSON *lql_extra(int stmt, const lql_stmt *st, const lql_err *e)
{
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "statement", stmt);
    if (st) cJSON_AddStringToObject(x, "kind", lql_kind_name(st->kind));
    if (e->line) {
        cJSON_AddNumberToObject(x, "line", e->line);
        cJSON_AddNumberToObject(x, "col", e->col);
        cJSON_AddNumberToObject(x, "len", e->len);
    }
    return x;
}

static const char *err_code(int code)
{
    switch (code) {
    case LQL_ESYNTAX: return "lql_syntax";
    case LQL_EREFUSED: return "lql_refused";
    case LQL_ENOMEM: return "out_of_memory";
    case LQL_ECANCEL: return "cancelled";
    default: return "lql_error";
    }
}

static void fail(srv_job *j, int status, const char *code, int stmt, const lql_stmt *st,
                 const lql_err *e)
{
    char *t = srv_error_json(e->msg, status == 504 ? "timeout_error"
                                     : status >= 500 ? "server_error" : "invalid_request_error",
                             code, "lql", lql_extra(stmt, st, e));
    srv_buf_free(&j->body);
    j->status = status;
    j->ctype = "application/json";
    if (t) srv_buf_add(&j->body, t, strlen(t));
    free(t);
}

/* Why a parsed statement may not run here (in why[200] or a constant), or NULL; status,
 * code and the span at fault with it. */
static const char *refusal(srv *S, srv_job *j, const lql_stmt *st, int *status,
                           const char **code, const lql_span **at, char why[200])
{
    const lql_stmt_def *d = lql_stmt_def_of(st->kind);
    *status = 403;
    *code = "forbidden_statement";
    *at = &st->at;
    if (!d || d->cls == LQL_CLASS_LOCAL) {
        snprintf(why, 200, "%s is not available over HTTP (it binds, writes or lists "
                 "paths on the server's host)", lql_kind_name(st->kind));
        return why;
    }
    if (lql_has(st, LQL_C_GENERATE) && st->generate > S->o->tokens_max) {
        *status = 400;
        *code = "too_many_tokens";
        *at = &st->clause_at[LQL_C_GENERATE];
        snprintf(why, 200, "GENERATE %lld exceeds the server's cap of %d tokens",
                 (long long)st->generate, S->o->tokens_max);
        return why;
    }
    if (d->cls == LQL_CLASS_EDIT && S->o->read_only)
        return "the server is read-only (--read-only): edits are refused";
    if (d->cls == LQL_CLASS_EDIT && j->sess == S->base)
        return "edits need a session: POST /v1/sessions, then pass its id as \"session\"";
    /* file operands: plain names inside the session's sandbox */
    const char *files[3] = {0};
    const lql_span *spans[3] = {0};
    int nf = 0;
    if (st->kind == LQL_S_TRACE) {
        if (lql_has(st, LQL_C_SAVE)) { files[nf] = st->save_path; spans[nf++] = &st->clause_at[LQL_C_SAVE]; }
        if (lql_has(st, LQL_C_FROM)) { files[nf] = st->from_path; spans[nf++] = &st->clause_at[LQL_C_FROM]; }
    } else if (st->kind == LQL_S_SAVE_PATCH || st->kind == LQL_S_APPLY_PATCH) {
        if (!st->arg) {
            *status = 400;
            *code = "invalid_file_operand";
            return "SAVE PATCH needs a file name over HTTP: SAVE PATCH \"name.vlp\"";
        }
        files[nf] = st->arg;
        spans[nf++] = &st->arg_at;
    } else if (st->kind == LQL_S_DIFF) {
        if (st->arg || st->arg2) {
            *at = st->arg ? &st->arg_at : &st->arg2_at;
            return "DIFF over HTTP compares CURRENT with CURRENT only (a side naming a "
                   "container is a host path)";
        }
        if (lql_has(st, LQL_C_INTO_PATCH)) { files[nf] = st->into; spans[nf++] = &st->clause_at[LQL_C_INTO_PATCH]; }
    }
    for (int k = 0; k < nf; k++) {
        *at = spans[k];
        if (j->sess == S->base)
            return "file operands need a session (its sandbox): POST /v1/sessions";
        *code = "invalid_file_operand";
        if (!srv_name_ok(files[k])) {
            *status = 400;
            snprintf(why, 200, "file \"%.64s\" is not a sandbox name "
                     "([A-Za-z0-9_-][A-Za-z0-9._-]{0,63})", files[k]);
            return why;
        }
        /* the statements open their files by name: a link in the sandbox is never followed */
        struct stat lst;
        if (fstatat(j->sess->dirfd, files[k], &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
            !S_ISREG(lst.st_mode)) {
            *status = 400;
            snprintf(why, 200, "file \"%.64s\" in the session's sandbox is not a "
                     "regular file (links are never followed)", files[k]);
            return why;
        }
    }
    return NULL;
}

/* Walk the request's statements. check: parse and classify (HTTP thread); otherwise run
 * them (compute thread). Returns -1 after setting the job's error answer. */
static int each_statement(srv *S, srv_job *j, int check,
                          int (*fn)(srv *S, srv_job *j, const char *t, const chunk *c,
                                    int k, void *ctx), void *ctx)
{
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j->req, "lql"));
    size_t n = strlen(text), i = 0;
    int line = 1, col = 1, k = 0;
    chunk c;
    while (next_chunk(text, n, &i, &line, &col, &c)) {
        lql_arena *ar = lql_arena_new();
        lql_stmt *st = NULL;
        lql_err e = {0};
        if (!ar) { srv_job_error(j, 500, "out of memory", "server_error", "out_of_memory", NULL); return -1; }
        int rc = lql_parse(text + c.off, c.len, ar, &st, &e);
        if (rc == 0 && !st) { lql_arena_free(ar); continue; }   /* blanks and comments */
        k++;
        if (check && rc < 0) {
            if (first_char(text + c.off, c.len) == '.')
                snprintf(e.msg, sizeof e.msg, "meta-commands are not available over HTTP (use "
                         "\"format\" for .mode)");
            place(&e, &c);
            fail(j, 400, err_code(e.code), k, NULL, &e);
            lql_arena_free(ar);
            return -1;
        }
        if (check && k > S->o->stmts_max) {
            snprintf(e.msg, sizeof e.msg, "more than %d statements in one request", S->o->stmts_max);
            fail(j, 400, "too_many_statements", k, NULL, &e);
            lql_arena_free(ar);
            return -1;
        }
        if (check && c.len > S->o->stmt_max) {
            snprintf(e.msg, sizeof e.msg, "statement of %zu bytes exceeds the limit of %zu",
                     c.len, S->o->stmt_max);
            fail(j, 413, "statement_too_long", k, st, &e);
            lql_arena_free(ar);
            return -1;
        }
        for (const lql_stmt *one = st; check && one; one = one->next) {
            int status;
            const char *code;
            const lql_span *at;
            char buf[200];
            const char *why = refusal(S, j, one, &status, &code, &at, buf);
            if (!why) continue;
            lql_errf(&e, LQL_EREFUSED, at, "%s", why);
            place(&e, &c);
            fail(j, status, code, k, one, &e);
            lql_arena_free(ar);
            return -1;
        }
        lql_arena_free(ar);
        if (!check && fn(S, j, text, &c, k, ctx) < 0) return -1;
    }
    return 0;
}

int srv_query_check(srv *S, srv_job *j)
{
    static const char *const keys[] = {"lql", "session", "format", "stream"};
    if (srv_keys_only(j, j->req, keys, 4, NULL) < 0) return -1;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j->req, "lql");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j->req, "format");
    if (!cJSON_IsString(q)) {
        srv_job_error(j, 400, "\"lql\" must be a string of statements", "invalid_request_error",
                      "invalid_value", "lql");
        return -1;
    }
    if (strlen(q->valuestring) == 0 || first_char(q->valuestring, strlen(q->valuestring)) == 0) {
        srv_job_error(j, 400, "\"lql\" holds no statement", "invalid_request_error",
                      "invalid_value", "lql");
        return -1;
    }
    lql_outmode m;
    /* the program modes only: the people modes' rounded numbers are no API */
    if (f && !cJSON_IsNull(f) && (!cJSON_IsString(f) || lql_outmode_parse(f->valuestring, &m) < 0 ||
                                  (m != LQL_OUT_JSON && m != LQL_OUT_JSONL &&
                                   m != LQL_OUT_CSV && m != LQL_OUT_TSV))) {
        srv_job_error(j, 400, "\"format\" must be one of json, jsonl, csv, tsv",
                      "invalid_request_error", "invalid_value", "format");
        return -1;
    }
    return each_statement(S, j, 1, NULL, NULL);
}

/* ---------------------------------------------------------------- running */

typedef struct run_ctx {
    lql_render_opts render;     /* the shell's program mode: exact floats, notes apart */
    int typed;                  /* no format: the json frames as the "results" array */
    cJSON *results;
    srv_buf text;               /* a format's body so far */
} run_ctx;

/* A streamed GENERATE: each token's text as an event while the statement runs. */
typedef struct token_stream {
    srv *S;
    srv_job *j;
    int stmt;
    const eng_tokenizer *tok;
    int32_t *ids;               /* the statement's tokens so far (cap of them) */
    int n, cap;
    size_t sent;
} token_stream;

/* The event for token id (or, id < 0, the text held back at the end of the statement:
 * a U+FFFD that ended it, sent without a token). */
static void stream_text(token_stream *ts, int32_t id)
{
    char *t = NULL;
    size_t len = 0;
    vx_err ve = {0};
    if (eng_tok_decode_after(ts->tok, ts->ids, (size_t)ts->n, 1, &t, &len, &ve) < 0) return;
    size_t ready = id < 0 ? len : srv_text_ready(t, len, len);
    if (id < 0 && ready <= ts->sent) {
        free(t);
        return;
    }
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddNumberToObject(ev, "index", ts->stmt);
    if (id >= 0) cJSON_AddNumberToObject(ev, "token", id);
    int ok = ready > ts->sent ? srv_json_add_text(ev, "text", t + ts->sent, ready - ts->sent) != NULL
                              : cJSON_AddStringToObject(ev, "text", "") != NULL;
    if (ready > ts->sent) ts->sent = ready;
    char *e = ok ? cJSON_PrintUnformatted(ev) : NULL;
    if (e) srv_emit(ts->S, ts->j, e);
    free(e);
    cJSON_Delete(ev);
    free(t);
}

static int stream_token(void *ctx, int32_t id)
{
    token_stream *ts = ctx;
    if (ts->j->cancel) return 1;
    if (ts->n == ts->cap) {
        int cap = ts->cap ? 2 * ts->cap : 256;
        int32_t *ids = realloc(ts->ids, (size_t)cap * sizeof *ids);
        if (!ids) return 1;      /* out of memory: the generation stops here */
        ts->ids = ids;
        ts->cap = cap;
    }
    ts->ids[ts->n++] = id;
    stream_text(ts, id);
    return 0;
}

/* One statement chain through lql_eval_to, the shell's own evaluation (positions in
 * request terms). Typed: its json frames join the results. */
static int run_one(srv *S, srv_job *j, const char *text, const chunk *c, int k, void *vctx)
{
    run_ctx *ctx = vctx;
    lql_session *s = j->sess->s;
    lql_err e = {0};
    char *out = NULL, *notes = NULL;
    size_t nout = 0, nnotes = 0;
    FILE *fo = open_memstream(&out, &nout), *fn = open_memstream(&notes, &nnotes);
    token_stream *ts = j->stream ? calloc(1, sizeof *ts) : NULL;
    if (ts && lql_session_tokenizer(s, NULL, &ts->tok, &e) == 0) {
        *ts = (token_stream){.S = S, .j = j, .stmt = k, .tok = ts->tok};
        s->on_token = stream_token;
        s->token_ctx = ts;
    }
    lql_eval_opts o = {ctx->render, 0, c->line, c->col};
    int rc = fo && fn ? lql_eval_to(s, text + c->off, c->len, &o, fo, fn, &e)
                      : lql_errf(&e, LQL_ENOMEM, NULL, "out of memory");
    s->on_token = NULL;
    s->token_ctx = NULL;
    if (ts && ts->n && !j->cancel) stream_text(ts, -1);
    if (ts) free(ts->ids);
    free(ts);
    if ((fo && fclose(fo) != 0) || (fn && fclose(fn) != 0) || !out || !notes) {
        rc = lql_errf(&e, LQL_ENOMEM, NULL, "out of memory");
        free(out);
        out = NULL;
    }
    /* what the statement printed, failed or not, as the shell prints it */
    cJSON *frames = cJSON_CreateArray(), *notelist = cJSON_CreateArray();
    for (char *l = notes, *nl; l && *l; l = nl ? nl + 1 : l + strlen(l)) {
        nl = strchr(l, '\n');
        if (nl) *nl = 0;
        cJSON_AddItemToArray(notelist, cJSON_CreateString(strncmp(l, "-- ", 3) ? l : l + 3));
    }
    if (ctx->typed) {
        for (char *l = out, *nl; l && *l; l = nl ? nl + 1 : l + strlen(l)) {
            nl = strchr(l, '\n');
            if (nl) *nl = 0;
            /* kept as the shell wrote it: re-printing would round the exact floats */
            cJSON *f = cJSON_CreateRaw(l);
            if (f) cJSON_AddItemToArray(frames, f);
        }
    } else if (out) {
        srv_buf_add(&ctx->text, out, nout);
    }
    if (j->stream) {
        cJSON *ev = ctx->typed ? cJSON_CreateObject() : NULL;
        if (ev) {
            cJSON_AddNumberToObject(ev, "index", k);
            cJSON_AddItemReferenceToObject(ev, "frames", frames);
        } else {
            ev = cJSON_CreateObject();
            cJSON_AddNumberToObject(ev, "index", k);
            cJSON_AddStringToObject(ev, "output", out ? out : "");
            cJSON_AddItemReferenceToObject(ev, "notes", notelist);
        }
        char *t = cJSON_PrintUnformatted(ev);
        /* a failure before any event is answered with a status, its output in the body */
        if (t && (rc == 0 || (srv_stream_started(j) && (cJSON_GetArraySize(frames) || (out && *out)))))
            srv_emit(S, j, t);
        free(t);
        cJSON_Delete(ev);
    }
    if (ctx->typed) {
        cJSON *f;
        while ((f = cJSON_DetachItemFromArray(frames, 0))) cJSON_AddItemToArray(ctx->results, f);
    }
    cJSON_Delete(frames);
    cJSON_Delete(notelist);
    free(out);
    free(notes);
    if (rc == 0) return 0;

    /* the first failure ends the request */
    int status = e.code == LQL_ENOMEM ? 500 : 400;
    const char *code = err_code(e.code);
    if (j->cancel == SRV_DEADLINE) {
        status = 504; code = "deadline_exceeded";
        snprintf(e.msg, sizeof e.msg, "the request's deadline passed: statement %d was stopped", k);
    } else if (j->cancel == SRV_SESSION_GONE) {
        status = 409; code = "session_deleted";
        snprintf(e.msg, sizeof e.msg, "the session was deleted: statement %d was stopped", k);
    }
    fail(j, status, code, k, NULL, &e);
    if (j->stream && srv_stream_started(j)) {
        srv_emit(S, j, j->body.p);
    } else {
        /* what ran before the failure rides along beside the error */
        cJSON *doc = cJSON_Parse(j->body.p);
        if (doc && ctx->typed) cJSON_AddItemReferenceToObject(doc, "results", ctx->results);
        else if (doc) cJSON_AddStringToObject(doc, "output", ctx->text.p ? ctx->text.p : "");
        char *t = doc ? cJSON_PrintUnformatted(doc) : NULL;
        if (t) {
            srv_buf_free(&j->body);
            srv_buf_add(&j->body, t, strlen(t));
        }
        free(t);
        cJSON_Delete(doc);
    }
    return -1;
}

static const char *mode_ctype(lql_outmode mode)
{
    switch (mode) {
    case LQL_OUT_JSON: return "application/jsonl";
    case LQL_OUT_JSONL: return "application/jsonl";
    case LQL_OUT_CSV: return "text/csv; charset=utf-8";
    case LQL_OUT_TSV: return "text/tab-separated-values; charset=utf-8";
    default: return "application/json";
    }
}

void srv_query_run(srv *S, srv_job *j)
{
    if (srv_job_enter(S, j, "bind_failed") < 0) return;     /* answered before any event */
    run_ctx ctx = {{LQL_OUT_JSON, 1, 0, 0}, 1, cJSON_CreateArray(), {0}};
    const char *f = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j->req, "format"));
    lql_outmode m;
    if (f && lql_outmode_parse(f, &m) == 0) { ctx.render.mode = m; ctx.typed = 0; }
    if (each_statement(S, j, 0, run_one, &ctx) == 0) {
        j->status = 200;
        srv_buf_free(&j->body);
        if (!ctx.typed) {
            j->ctype = mode_ctype(ctx.render.mode);
            srv_buf_add(&j->body, ctx.text.p ? ctx.text.p : "", ctx.text.n);
        } else {
            cJSON *doc = cJSON_CreateObject();
            cJSON_AddItemReferenceToObject(doc, "results", ctx.results);
            char *t = cJSON_PrintUnformatted(doc);
            cJSON_Delete(doc);
            j->ctype = "application/json";
            if (t) srv_buf_add(&j->body, t, strlen(t));
            else srv_job_error(j, 500, "out of memory", "server_error", "out_of_memory", NULL);
            free(t);
        }
    }
    if (j->stream && srv_stream_started(j)) srv_emit(S, j, "[DONE]");
    cJSON_Delete(ctx.results);
    srv_buf_free(&ctx.text);
}
