/*
 * server.c — the HTTP side: libmicrohttpd with a thread per connection, the routes, the
 * checks every request passes (Host header against DNS rebinding, the API key compared in
 * constant time, application/json for POST, body cap), the error envelope, and start/stop.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "files.h"
#include "journal.h"
#include "jinja.h"
#include "srv_int.h"

void srv_opts_default(srv_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->host, sizeof o->host, "127.0.0.1");
    o->body_max = 1u << 20;
    o->stmt_max = 64u << 10;
    o->stmts_max = 64;
    o->tokens_max = 512;
    o->sessions_max = 8;
    o->session_ttl_s = 900;
    o->queue_max = 16;
    o->deadline_ms = 300000;
    o->trace_max = 64u << 20;
    o->batch_max = 8;
}

int srv_set_limit(srv_opts *o, const char *kv, char *msg, size_t msgn)
{
    static const struct { const char *name; size_t off; int is_size; } limits[] = {
        {"body_max", offsetof(srv_opts, body_max), 1}, {"stmt_max", offsetof(srv_opts, stmt_max), 1},
        {"stmts_max", offsetof(srv_opts, stmts_max), 0}, {"tokens_max", offsetof(srv_opts, tokens_max), 0},
        {"sessions_max", offsetof(srv_opts, sessions_max), 0},
        {"session_ttl_s", offsetof(srv_opts, session_ttl_s), 0},
        {"queue_max", offsetof(srv_opts, queue_max), 0}, {"deadline_ms", offsetof(srv_opts, deadline_ms), 0},
        {"trace_max", offsetof(srv_opts, trace_max), 1}, {"batch_max", offsetof(srv_opts, batch_max), 0}};
    const char *eq = strchr(kv, '=');
    char *end;
    long long v = eq ? strtoll(eq + 1, &end, 10) : 0;
    for (size_t i = 0; eq && i < sizeof limits / sizeof limits[0]; i++) {
        if (strlen(limits[i].name) != (size_t)(eq - kv) || strncmp(kv, limits[i].name, (size_t)(eq - kv))) continue;
        const int upto64 = !strcmp(limits[i].name, "sessions_max") || !strcmp(limits[i].name, "batch_max");
        if (!eq[1] || *end || v < 1 || v > (limits[i].is_size ? (1LL << 40) : 1000000000LL) ||
            (upto64 && v > 64)) {
            snprintf(msg, msgn, "--limit %s: the value must be a positive integer%s", kv,
                     upto64 ? " up to 64" : "");
            return -1;
        }
        char *f = (char *)o + limits[i].off;
        if (limits[i].is_size) *(size_t *)f = (size_t)v;
        else *(int *)f = (int)v;
        return 0;
    }
    snprintf(msg, msgn, "--limit %s: expected NAME=VALUE with NAME one of body_max stmt_max stmts_max "
             "tokens_max sessions_max session_ttl_s queue_max deadline_ms trace_max batch_max", kv);
    return -1;
}

int srv_parse_listen(srv_opts *o, const char *spec, char *msg, size_t msgn)
{
    const char *colon = strrchr(spec, ':'), *port = colon ? colon + 1 : spec;
    if (colon) {
        const char *h = spec;
        size_t hn = (size_t)(colon - spec);
        if (hn >= 2 && h[0] == '[' && h[hn - 1] == ']') { h++; hn -= 2; }
        if (hn == 0 || hn >= sizeof o->host) {
            snprintf(msg, msgn, "--serve %s: expected HOST:PORT (a numeric address)", spec);
            return -1;
        }
        memcpy(o->host, h, hn);
        o->host[hn] = 0;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (!*port || *end || p < 0 || p > 65535) {
        snprintf(msg, msgn, "--serve %s: the port must be a number in [0, 65535]", spec);
        return -1;
    }
    o->port = (int)p;
    unsigned char a[16];
    if (inet_pton(AF_INET, o->host, a) != 1 && inet_pton(AF_INET6, o->host, a) != 1) {
        snprintf(msg, msgn, "--serve %s: \"%s\" is not a numeric IPv4 or IPv6 address", spec, o->host);
        return -1;
    }
    return 0;
}

static int loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

/* ---------------------------------------------------------------- answers */

char *srv_error_json(const char *message, const char *type, const char *code,
                     const char *param, cJSON *extra)
{
    cJSON *doc = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(doc, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddStringToObject(e, "code", code);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (extra) {
        for (cJSON *x = extra->child; x; x = x->next)
            cJSON_AddItemReferenceToObject(e, x->string, x);
    }
    char *t = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    cJSON_Delete(extra);
    return t;
}

void srv_job_error(srv_job *j, int status, const char *message, const char *type,
                   const char *code, const char *param)
{
    char *t = srv_error_json(message, type, code, param, NULL);
    srv_buf_free(&j->body);
    j->status = status;
    j->ctype = "application/json";
    if (t) srv_buf_add(&j->body, t, strlen(t));
    free(t);
}

int srv_unsupported(srv_job *j, const char *prefix, const char *name)
{
    char field[240], msg[300];
    snprintf(field, sizeof field, "%s%s%.100s", prefix ? prefix : "", prefix ? "." : "", name);
    snprintf(msg, sizeof msg, "\"%s\" is not supported by this server", field);
    srv_job_error(j, 400, msg, "invalid_request_error", "unsupported_parameter", field);
    return -1;
}

int srv_keys_only(srv_job *j, const cJSON *obj, const char *const *keys, size_t n, const char *prefix)
{
    for (const cJSON *f = obj->child; f; f = f->next) {
        size_t i = 0;
        while (i < n && strcmp(f->string, keys[i])) i++;
        if (i == n) return srv_unsupported(j, prefix, f->string);
    }
    return 0;
}

void srv_job_json(srv_job *j, int status, cJSON *doc)
{
    char *t = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    if (!t) { srv_job_error(j, 500, "out of memory", "server_error", "out_of_memory", NULL); return; }
    srv_buf_free(&j->body);
    j->status = status;
    j->ctype = "application/json";
    srv_buf_add(&j->body, t, strlen(t));
    free(t);
}

static enum MHD_Result answer(struct MHD_Connection *c, int status, const char *ctype,
                              const void *body, size_t n, const char *hname, const char *hval)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (hname) MHD_add_response_header(r, hname, hval);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result answer_error(struct MHD_Connection *c, int status, const char *message,
                                    const char *code, const char *param)
{
    const char *type = status == 401 ? "authentication_error" : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error" : status == 503 ? "overloaded_error"
                     : status == 504 ? "timeout_error" : status >= 500 ? "server_error"
                     : "invalid_request_error";
    char *t = srv_error_json(message, type, code, param, NULL);
    enum MHD_Result rc = t ? answer(c, status, "application/json", t, strlen(t),
                                    status == 503 ? "Retry-After" : NULL, "1")
                           : MHD_NO;
    free(t);
    return rc;
}

static enum MHD_Result answer_json(struct MHD_Connection *c, int status, cJSON *doc)
{
    char *t = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    enum MHD_Result rc = t ? answer(c, status, "application/json", t, strlen(t), NULL, NULL) : MHD_NO;
    free(t);
    return rc;
}

/* ---------------------------------------------------------------- checks */

int srv_host_allowed(const char *bind_host, int port, const char *h)
{
    if (!h) return 0;
    char name[300];
    const char *colon = h[0] == '[' ? strstr(h, "]:") : strrchr(h, ':');
    size_t n = colon ? (size_t)(colon - h) + (h[0] == '[') : strlen(h);
    if (n >= sizeof name) return 0;
    memcpy(name, h, n);
    name[n] = 0;
    if (colon) {
        const char *p = colon + 1 + (h[0] == '[');
        char *end;
        long v = strtol(p, &end, 10);
        if (!*p || *end || v != port) return 0;
    }
    if (!strcasecmp(name, "localhost") || !strcmp(name, "127.0.0.1") || !strcmp(name, "[::1]"))
        return 1;
    if (loopback(bind_host)) return 0;
    /* a non-loopback bind (a wildcard one included) is reached by an address: a DNS
     * rebinding page names a host, and an IP literal cannot be rebound */
    unsigned char a[16];
    if (name[0] == '[' && n > 2 && name[n - 1] == ']') {
        name[n - 1] = 0;
        return inet_pton(AF_INET6, name + 1, a) == 1;
    }
    return inet_pton(AF_INET, name, a) == 1;
}

static int host_ok(srv *S, struct MHD_Connection *c, int port)
{
    return srv_host_allowed(S->o->host, port, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"));
}

static int key_ok(srv *S, struct MHD_Connection *c)
{
    if (!S->key) return 1;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7)) return 0;
    /* digests of both sides, compared in constant time: neither bytes nor length leak */
    unsigned char d1[32], d2[32];
    unsigned int n1 = 0, n2 = 0;
    if (!EVP_Digest(a + 7, strlen(a + 7), d1, &n1, EVP_sha256(), NULL) ||
        !EVP_Digest(S->key, S->keyn, d2, &n2, EVP_sha256(), NULL))
        return 0;
    return CRYPTO_memcmp(d1, d2, 32) == 0;
}

/* ---------------------------------------------------------------- requests */

typedef struct req {
    srv_buf body;
    int too_big;
    size_t dropped;             /* body bytes read past the cap */
} req;

typedef struct stream_ctx {
    srv *S;
    srv_job *j;
    int fd;
    double deadline;
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_ctx *x = cls;
    long n = srv_wait_stream(x->S, x->j, x->fd, x->deadline, buf, max);
    return n > 0 ? n : n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
}

static void stream_free(void *cls)
{
    stream_ctx *x = cls;
    srv_cancel(x->S, x->j, SRV_CLIENT_GONE);
    srv_job_unref(x->S, x->j);
    free(x);
}

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* When the request must be done, in srv_now_ms terms; -1 when X-Deadline-Ms is not a
 * positive whole number of milliseconds (a larger one than the server's is its own). */
static double deadline_of(srv *S, struct MHD_Connection *c)
{
    double ms = S->o->deadline_ms;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Deadline-Ms");
    if (h) {
        char *end;
        errno = 0;
        long long v = strtoll(h, &end, 10);
        if (!*h || *end || errno || v <= 0 || *h == '+') return -1;
        if (v < ms) ms = (double)v;
    }
    return srv_now_ms() + ms;
}

/* Queue j and answer when it is done, or stream its events from the first one: until then
 * a streamed job's failure (a prompt past the context, a deadline) is answered with its
 * status, as the job not streamed would be. Consumes j. */
static enum MHD_Result run_job(srv *S, struct MHD_Connection *c, srv_job *j)
{
    double deadline = deadline_of(S, c);
    if (deadline < 0) {
        srv_job_unref(S, j);
        return answer_error(c, 400, "X-Deadline-Ms must be a positive whole number of milliseconds",
                            "invalid_value", "X-Deadline-Ms");
    }
    int fd = conn_fd(c);
    if (srv_submit(S, j) < 0) {
        srv_job_unref(S, j);
        return answer_error(c, 503, "the server is busy: the request queue is full", "queue_full", NULL);
    }
    int streaming = 0;
    int why = srv_wait(S, j, fd, deadline, j->stream ? &streaming : NULL);
    if (streaming) {
        stream_ctx *x = calloc(1, sizeof *x);
        struct MHD_Response *r = x ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                                       stream_read, x, stream_free)
                                   : NULL;
        if (!r) {
            free(x);
            srv_cancel(S, j, SRV_CLIENT_GONE);
            srv_job_unref(S, j);
            return MHD_NO;
        }
        *x = (stream_ctx){S, j, fd, deadline};
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return rc;
    }
    enum MHD_Result rc;
    /* a job stopped before it ran, or whose answer was not its own failure (500 is also
     * the status of a job that wrote none) */
    int stopped = j->status == 500 || j->status < 300;
    if (why == SRV_CLIENT_GONE) rc = MHD_NO;
    else if (why == SRV_DEADLINE && stopped)
        rc = answer_error(c, 504, "the request's deadline passed", "deadline_exceeded", NULL);
    else if (why == SRV_SESSION_GONE && stopped)
        rc = answer_error(c, 409, "the session was deleted", "session_deleted", NULL);
    else
        rc = answer(c, j->status, j->ctype ? j->ctype : "application/json", j->body.p ? j->body.p : "",
                    j->body.n, j->extra_header[0], j->extra_header[1]);
    srv_job_unref(S, j);
    return rc;
}

static int is_json_ctype(struct MHD_Connection *c)
{
    const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!t || strncasecmp(t, "application/json", 16)) return 0;
    return t[16] == 0 || t[16] == ';' || t[16] == ' ';
}

static enum MHD_Result session_route(srv *S, struct MHD_Connection *c, const char *method,
                                     const char *rest, req *rq)
{
    char id[40];
    size_t n = strcspn(rest, "/");
    if (n == 0 || n >= sizeof id) return answer_error(c, 404, "no such session", "session_not_found", NULL);
    memcpy(id, rest, n);
    id[n] = 0;
    rest += n;
    if (!*rest && !strcmp(method, "DELETE")) {
        if (srv_sess_delete(S, id) < 0) return answer_error(c, 404, "no such session", "session_not_found", NULL);
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "id", id);
        cJSON_AddBoolToObject(doc, "deleted", 1);
        return answer_json(c, 200, doc);
    }
    srv_sess *x = srv_sess_get(S, id);
    if (!x) return answer_error(c, 404, "no such session", "session_not_found", NULL);
    enum MHD_Result rc;
    if (!*rest && !strcmp(method, "GET")) {
        cJSON *doc = cJSON_CreateObject(), *files = cJSON_CreateArray();
        cJSON_AddStringToObject(doc, "id", id);
        cJSON_AddStringToObject(doc, "object", "session");
        cJSON_AddNumberToObject(doc, "ttl_seconds", S->o->session_ttl_s);
        DIR *d = srv_sess_dir(x);
        for (struct dirent *de; d && (de = readdir(d));)
            if (srv_name_ok(de->d_name)) cJSON_AddItemToArray(files, cJSON_CreateString(de->d_name));
        if (d) closedir(d);
        cJSON_AddItemToObject(doc, "files", files);
        rc = answer_json(c, 200, doc);
    } else if (!strncmp(rest, "/files/", 7) && (!strcmp(method, "PUT") || !strcmp(method, "GET"))) {
        const char *name = rest + 7;
        if (!srv_name_ok(name)) {
            rc = answer_error(c, 400, "file names are [A-Za-z0-9_-][A-Za-z0-9._-]{0,63}",
                              "invalid_file_name", "name");
        } else if (!strcmp(method, "PUT")) {
            /* never through a link (O_NOFOLLOW); names were checked to stay in the sandbox */
            int fd = openat(x->dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
            size_t done = 0;
            while (fd >= 0 && done < rq->body.n) {
                ssize_t k = write(fd, rq->body.p + done, rq->body.n - done);
                if (k <= 0) break;
                done += (size_t)k;
            }
            int err = errno;
            if (fd >= 0) close(fd);
            if (fd < 0 && (err == ELOOP || err == EISDIR)) {
                rc = answer_error(c, 400, "the name is not a regular file in the sandbox (links "
                                  "are never followed)", "invalid_file_name", "name");
            } else if (fd < 0 || done < rq->body.n) {
                errno = err;
                rc = answer_error(c, 500, strerror(errno), "file_write_failed", "name");
            } else {
                cJSON *doc = cJSON_CreateObject();
                cJSON_AddStringToObject(doc, "name", name);
                cJSON_AddNumberToObject(doc, "bytes", (double)done);
                rc = answer_json(c, 201, doc);
            }
        } else {
            int fd = openat(x->dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            struct stat sb;
            if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
                if (fd >= 0) close(fd);
                rc = answer_error(c, 404, "no such file in the session", "file_not_found", "name");
            } else {
                struct MHD_Response *r = MHD_create_response_from_fd((size_t)sb.st_size, fd);
                if (!r) { close(fd); rc = MHD_NO; }
                else {
                    MHD_add_response_header(r, "Content-Type", "application/octet-stream");
                    rc = MHD_queue_response(c, 200, r);
                    MHD_destroy_response(r);
                }
            }
        }
    } else {
        rc = answer_error(c, 405, "method not allowed here", "method_not_allowed", NULL);
    }
    srv_sess_put(S, x);
    return rc;
}

/* POST routes with a JSON body that run on the compute thread. */
static const struct {
    const char *path;
    void (*run)(srv *S, srv_job *j);
    int can_stream;
} jobs[] = {
    {"/v1/query", srv_query_run, 1},
    {"/v1/completions", srv_complete_run, 1},
    {"/v1/chat/completions", srv_complete_run, 1},
    {"/v1/tokenize", srv_tokenize_run, 0},
    {"/v1/detokenize", srv_detokenize_run, 0},
    {"/v1/trace", srv_trace_run, 0},
};

/* The offset of a \\u escape in JSON text that is half of a surrogate pair without its
 * other half (cJSON refuses the text there), or (size_t)-1. */
static size_t lone_surrogate(const char *t, size_t n)
{
    int in = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '"') { in = !in; continue; }
        if (!in || t[i] != '\\' || i + 1 >= n) continue;
        if (t[i + 1] != 'u' || i + 6 > n) { i++; continue; }
        unsigned v = (unsigned)strtoul((char[5]){t[i + 2], t[i + 3], t[i + 4], t[i + 5], 0}, NULL, 16);
        if (v >= 0xDC00 && v <= 0xDFFF) return i;             /* a low half first */
        if (v >= 0xD800 && v <= 0xDBFF) {
            unsigned w = i + 12 <= n && t[i + 6] == '\\' && t[i + 7] == 'u'
                ? (unsigned)strtoul((char[5]){t[i + 8], t[i + 9], t[i + 10], t[i + 11], 0}, NULL, 16) : 0;
            if (w < 0xDC00 || w > 0xDFFF) return i;
            i += 6;
        }
        i += 5;
    }
    return (size_t)-1;
}

/* The request body as a JSON object, or NULL after answering 400 (*rc): not JSON (where,
 * and why when it is a depth or a lone surrogate), not an object, bytes after it, a key
 * twice (cJSON keeps the first, most readers the last), text that is not UTF-8 (RFC 8259
 * requires it), a string holding U+0000. */
static cJSON *body_object(struct MHD_Connection *c, const req *rq, enum MHD_Result *rc)
{
    const char *text = rq->body.p ? rq->body.p : "", *end = NULL;
    char msg[VX_ERR_MAX + 64];
    cJSON *body = cJSON_ParseWithLengthOpts(text, rq->body.n, &end, 0);
    size_t at;
    vx_err ve = {0};
    if (!body) {
        if ((at = vx_json_too_deep(text, rq->body.n)) != (size_t)-1)
            snprintf(msg, sizeof msg, "the body nests deeper than %d levels (at byte %zu)",
                     CJSON_NESTING_LIMIT, at);
        else if ((at = lone_surrogate(text, rq->body.n)) != (size_t)-1)
            snprintf(msg, sizeof msg, "the body holds a lone surrogate escape (%.6s at byte %zu), "
                     "which no UTF-8 text can hold", text + at, at);
        else
            snprintf(msg, sizeof msg, "the body is not valid JSON (near byte %zu)",
                     end && end >= text ? (size_t)(end - text) : (size_t)0);
    } else if (!cJSON_IsObject(body)) {
        snprintf(msg, sizeof msg, "the body is JSON but not an object");
    } else if (end && (at = (size_t)(end - text) + strspn(end, " \t\r\n")) < rq->body.n) {
        snprintf(msg, sizeof msg, "the body has bytes after its JSON object (at byte %zu)", at);
    } else if (vx_json_twice("the body", body, &ve) < 0) {
        snprintf(msg, sizeof msg, "%s", ve.msg);
    } else if ((at = vx_utf8_bad_at(text, rq->body.n)) != (size_t)-1) {
        snprintf(msg, sizeof msg, "the body is not valid UTF-8 (byte 0x%02x at byte %zu), which "
                 "JSON text must be", (unsigned char)text[at], at);
    } else if (vx_json_nul_at(text, rq->body.n) != (size_t)-1) {
        /* cJSON would cut the string there: a prompt would lose its tail unseen */
        cJSON_Delete(body);
        *rc = answer_error(c, 400, "a string in the body holds U+0000, which no prompt, "
                           "name or value may hold", "invalid_value", NULL);
        return NULL;
    } else {
        return body;
    }
    cJSON_Delete(body);
    *rc = answer_error(c, 400, msg, "invalid_json", NULL);
    return NULL;
}

static enum MHD_Result post_route(srv *S, struct MHD_Connection *c, const char *url, req *rq)
{
    size_t k = 0;
    while (k < sizeof jobs / sizeof jobs[0] && strcmp(jobs[k].path, url)) k++;
    if (k == sizeof jobs / sizeof jobs[0]) return answer_error(c, 404, "no such route", "not_found", NULL);
    if (!is_json_ctype(c))
        return answer_error(c, 415, "POST bodies must be Content-Type: application/json",
                            "unsupported_media_type", NULL);
    enum MHD_Result brc;
    cJSON *body = body_object(c, rq, &brc);
    if (!body) return brc;
    const cJSON *sid = cJSON_GetObjectItemCaseSensitive(body, "session");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(body, "stream");
    srv_sess *x = S->base;
    if (sid && !cJSON_IsNull(sid)) {
        x = cJSON_IsString(sid) ? srv_sess_get(S, sid->valuestring) : NULL;
        if (!x) {
            cJSON_Delete(body);
            return answer_error(c, 404, "no such session", "session_not_found", "session");
        }
    }
    if (st && !cJSON_IsNull(st) && (!cJSON_IsBool(st) || (!jobs[k].can_stream && cJSON_IsTrue(st)))) {
        srv_sess_put(S, x);
        cJSON_Delete(body);
        return answer_error(c, 400, jobs[k].can_stream ? "\"stream\" must be a boolean"
                            : "this route does not stream", "invalid_value", "stream");
    }
    srv_job *j = srv_job_new(jobs[k].run, x, body, cJSON_IsTrue(st));
    if (!j) {
        srv_sess_put(S, x);
        cJSON_Delete(body);
        return answer_error(c, 500, "out of memory", "out_of_memory", NULL);
    }
    int bad = 0;
    if (jobs[k].run == srv_query_run) bad = srv_query_check(S, j);
    else if (jobs[k].run == srv_complete_run) bad = srv_complete_check(S, j, !strcmp(url, "/v1/chat/completions"));
    if (bad) {
        enum MHD_Result rc = answer(c, j->status, "application/json", j->body.p, j->body.n, NULL, NULL);
        srv_job_unref(S, j);
        return rc;
    }
    return run_job(S, c, j);
}

static enum MHD_Result route(srv *S, struct MHD_Connection *c, const char *url,
                             const char *method, req *rq, int port)
{
    if (!MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"))
        return answer_error(c, 400, "the request has no Host header (HTTP/1.1 requires one; "
                            "this server checks it against DNS rebinding)", "host_missing", NULL);
    if (!host_ok(S, c, port))
        return answer_error(c, 403, "the Host header names no address this server answers to",
                            "host_not_allowed", NULL);
    if (!strcmp(url, "/health") && !strcmp(method, "GET")) {
        cJSON *doc = cJSON_CreateObject();
        pthread_mutex_lock(&S->mu);
        int q = S->queued + S->n_running, ns = S->nsess, late = S->late_tokens, peak = S->batch_peak;
        double gen = (double)S->gen_tokens, cancelled = (double)S->cancelled;
        pthread_mutex_unlock(&S->mu);
        cJSON_AddStringToObject(doc, "status", "ok");
        cJSON_AddNumberToObject(doc, "busy", q);
        cJSON_AddNumberToObject(doc, "sessions", ns);
        cJSON_AddNumberToObject(doc, "completion_tokens", gen);
        cJSON_AddNumberToObject(doc, "cancelled", cancelled);
        cJSON_AddNumberToObject(doc, "tokens_after_cancel", late);
        cJSON_AddNumberToObject(doc, "batch_peak", peak);
        return answer_json(c, 200, doc);
    }
    if (!key_ok(S, c))
        return answer_error(c, 401, "a valid API key is required: Authorization: Bearer KEY",
                            "invalid_api_key", NULL);
    if (rq->too_big) {
        char msg[96];
        snprintf(msg, sizeof msg, "the request body exceeds %zu bytes", S->o->body_max);
        return answer_error(c, 413, msg, "body_too_large", NULL);
    }
    srv_sess_sweep(S);
    if (!strcmp(url, "/v1/models") && !strcmp(method, "GET"))
        return answer(c, 200, "application/json", S->models, strlen(S->models), NULL, NULL);
    if (!strcmp(url, "/v1/sessions") && !strcmp(method, "POST")) {
        /* even without a body: a cross-site form POST (no preflight) must not create one */
        if (!is_json_ctype(c))
            return answer_error(c, 415, "POST bodies must be Content-Type: application/json",
                                "unsupported_media_type", NULL);
        if (rq->body.n) {       /* none, or an empty object: a session takes no options */
            enum MHD_Result brc;
            cJSON *b = body_object(c, rq, &brc);
            if (!b) return brc;
            char k[65] = "", msg[160];
            if (b->child) snprintf(k, sizeof k, "%s", b->child->string);
            snprintf(msg, sizeof msg, "a session takes no options: field '%s' is not known", k);
            int any = b->child != NULL;
            cJSON_Delete(b);
            if (any) return answer_error(c, 400, msg, "invalid_value", k);
        }
        srv_sess *x;
        if (srv_sess_create(S, &x) < 0)
            return errno == 0 ? answer_error(c, 429, "too many sessions: delete one first",
                                             "too_many_sessions", NULL)
                              : answer_error(c, 500, strerror(errno), "session_failed", NULL);
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "id", x->id);
        cJSON_AddStringToObject(doc, "object", "session");
        cJSON_AddNumberToObject(doc, "ttl_seconds", S->o->session_ttl_s);
        return answer_json(c, 201, doc);
    }
    if (!strncmp(url, "/v1/sessions/", 13)) return session_route(S, c, method, url + 13, rq);
    if (!strcmp(method, "POST")) return post_route(S, c, url, rq);
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/health") || !strcmp(url, "/v1/sessions"))
        return answer_error(c, 405, "method not allowed here", "method_not_allowed", NULL);
    return answer_error(c, 404, "no such route", "not_found", NULL);
}

/* port: the bound port, known once MHD_start_daemon returns, while its threads may already
 * be reading it (0 until then: no client can name that port yet) */
typedef struct daemon_ctx { srv *S; _Atomic int port; } daemon_ctx;

/* The URL's %HH escapes decoded, except that one holding an escaped NUL is left as sent: a
 * decoded NUL would cut the path short ("files/a%00b" naming "a"), while a '%' fails the
 * file-name rule and matches no route. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls; (void)c;
    return strstr(s, "%00") ? strlen(s) : MHD_http_unescape(s);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_n, void **con_cls)
{
    (void)version;
    daemon_ctx *d = cls;
    req *rq = *con_cls;
    if (!rq) {
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        *con_cls = rq;
        /* a declared body over the cap is refused before a byte of it is read */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > d->S->o->body_max) {
            rq->too_big = 1;
            return route(d->S, c, url, method, rq, d->port);
        }
        return MHD_YES;
    }
    if (*upload_n) {
        if (!rq->too_big && rq->body.n + *upload_n > d->S->o->body_max) rq->too_big = 1;
        if (!rq->too_big && srv_buf_add(&rq->body, upload, *upload_n) < 0) rq->too_big = 1;
        /* a chunked body past the cap is read (and dropped) only so far: then the line goes */
        rq->dropped += rq->too_big ? *upload_n : 0;
        *upload_n = 0;
        return rq->dropped > 4 * d->S->o->body_max ? MHD_NO : MHD_YES;
    }
    return route(d->S, c, url, method, rq, d->port);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls; (void)c; (void)toe;
    req *rq = *con_cls;
    if (rq) { srv_buf_free(&rq->body); free(rq); }
    *con_cls = NULL;
}

/* ---------------------------------------------------------------- start and stop */

static int stop_fd[2] = {-1, -1};

static void on_stop(int sig)
{
    unsigned char b = (unsigned char)sig;
    int e = errno;
    if (write(stop_fd[1], &b, 1) < 0) { /* the pipe is full: a stop is already pending */ }
    errno = e;
}

int srv_run(const srv_opts *o)
{
    srv S_ = {0}, *S = &S_;
    S->o = o;
    pthread_mutex_init(&S->mu, NULL);
    pthread_cond_init(&S->work, NULL);
    pthread_cond_init(&S->prog, NULL);
    int status = 1;
    struct MHD_Daemon *daemon = NULL;
    pthread_t compute;
    int started = 0;
    srv_sess base = {.dirfd = -1};
    S->base = &base;
    /* SIGINT/SIGTERM/SIGHUP stop the server: a handler writes the signal to a pipe the main
     * thread waits on at the end. A handler, not sigwait alone, because a library starts
     * threads before main (OpenBLAS's pool) with every signal unblocked, and a signal left
     * at its default there would kill the process uncleaned. The threads lql starts block
     * them (fewer interrupted calls); a SIGHUP nohup set to be ignored stays ignored. */
    static const int stops[] = {SIGINT, SIGTERM, SIGHUP};
    sigset_t sigs;
    sigemptyset(&sigs);
    if (pipe2(stop_fd, O_CLOEXEC) != 0) {
        fprintf(stderr, "error: cannot create the stop pipe: %s\n", strerror(errno));
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(stops[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(stops[i], &sa, NULL);
        sigaddset(&sigs, stops[i]);
    }
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    if (!loopback(o->host) && !o->api_key_file) {
        fprintf(stderr, "error: --serve %s is not a loopback address: give --api-key-file\n", o->host);
        goto out;
    }
    if (o->api_key_file) {
        S->key = lql_read_file(o->api_key_file, 4096, &S->keyn);
        while (S->key && S->keyn && (S->key[S->keyn - 1] == '\n' || S->key[S->keyn - 1] == '\r' ||
                                     S->key[S->keyn - 1] == ' '))
            S->key[--S->keyn] = 0;
        if (!S->key || S->keyn < 16) {
            fprintf(stderr, "error: --api-key-file %s: %s\n", o->api_key_file,
                    S->key ? "the key must hold at least 16 characters" : "cannot read it");
            goto out;
        }
    }
    if (!(S->container = realpath(o->container, NULL))) {
        fprintf(stderr, "error: %s: %s\n", o->container, strerror(errno));
        goto out;
    }
    const char *tmp = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/lql-serve-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmpl) || !(S->root = strdup(tmpl))) {
        fprintf(stderr, "error: cannot create a private directory in %s: %s\n",
                tmp && *tmp ? tmp : "/tmp", strerror(errno));
        goto out;
    }
    lql_err e = {0};
    if (srv_models_init(S, &e) < 0) {
        fprintf(stderr, "error: %s: %s\n", o->container, e.msg);
        goto out;
    }
    /* the shell would replay the journal kept for this container; the server binds every
     * session to the base with a journal of its own, so say that its edits are not served */
    char jpath[4096];
    vx_err je = {0};
    const vx_container *bc = S->base->s->vx;
    if (vx_journal_locate(vx_dir(bc), vx_index_sha256(bc), jpath, sizeof jpath, &je) == 0 &&
        access(jpath, F_OK) == 0)
        fprintf(stderr, "lql: note: the journal %s is not applied: the server serves the base "
                "container and every session starts from it (COMPILE CURRENT INTO VINDEX to "
                "serve its edits)\n", jpath);

    signal(SIGPIPE, SIG_IGN);
    if (srv_compute_start(S, &compute) < 0) {
        fprintf(stderr, "error: cannot start the compute thread\n");
        goto out;
    }
    started = 1;

    struct sockaddr_in a4 = {0};
    struct sockaddr_in6 a6 = {0};
    struct sockaddr *sa;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, o->host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)o->port);
        sa = (struct sockaddr *)&a4;
    } else {
        inet_pton(AF_INET6, o->host, &a6.sin6_addr);
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)o->port);
        sa = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    }
    daemon_ctx dc = {S, o->port};
    daemon = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handler, &dc,
                              MHD_OPTION_SOCK_ADDR, sa,
                              MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                              MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                              /* one address cannot take every connection (slow or idle
                               * clients hold theirs until the timeout) */
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
                              MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)64,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                              MHD_OPTION_END);
    if (!daemon) {
        fprintf(stderr, "error: cannot listen on %s:%d: %s\n", o->host, o->port, strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    dc.port = di ? di->port : o->port;
    fprintf(stderr, strchr(o->host, ':') ? "lql: serving http://[%s]:%d\n" : "lql: serving http://%s:%d\n",
            o->host, dc.port);
    /* the main thread takes the stop signals again and waits for one (here, or in any
     * thread that has them unblocked) */
    pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
    /* poll with a timeout, not a blocking read: ThreadSanitizer (GCC 12's) defers a handler
     * whose signal lands in read() on a pipe to the thread's next intercepted call, which a
     * blocked read never makes, so a TSan build never stopped; the timeout makes one a second */
    struct pollfd pf = {.fd = stop_fd[0], .events = POLLIN};
    for (;;) {
        int r = poll(&pf, 1, 1000);
        if (r > 0 || (r < 0 && errno != EINTR)) break;
    }
    status = 0;
out:
    if (daemon) MHD_stop_daemon(daemon);
    if (started) srv_compute_stop(S, compute);
    for (int i = 0; i < S->nsess; i++)
        if (--S->table[i]->refs == 0) srv_sess_free(S->table[i]);
    srv_sess_reap(S);
    lql_session_free(base.s);
    if (S->root) vx_rmtree(S->root);
    free(S->root);
    free(S->container);
    free(S->key);
    free(S->models);
    free(S->model_id);
    srv_tmpl_free(S->tmpl);
    free(S->bos);
    free(S->eos);
    pthread_cond_destroy(&S->prog);
    pthread_cond_destroy(&S->work);
    pthread_mutex_destroy(&S->mu);
    return status;
}
