/*
 * serve.h — lql as an HTTP service (docs/lql/SERVE.md): `lql CONTAINER --serve HOST:PORT`.
 * A layer above src/lql: statements run through the interpreter's table and renderer, so a
 * body in a text format equals the shell's `.mode` output; one compute thread runs every
 * statement in FIFO order while HTTP threads (libmicrohttpd, a thread per connection)
 * parse, validate and wait.
 */
#ifndef LQL_SERVE_H
#define LQL_SERVE_H

#include <stddef.h>

typedef struct srv_opts {
    const char *container;      /* the container served (bound read-only as the base) */
    char host[256];             /* numeric address to bind: 127.0.0.1 by default */
    int port;                   /* 0: any free port (printed on stderr) */
    const char *api_key_file;   /* required for a non-loopback bind */
    int read_only;              /* 1: edits refused in sessions too */
    const char *chat_template;  /* a template file (or a tokenizer_config.json holding one)
                                   instead of the container's; NULL: the container's */
    size_t body_max;            /* request body cap (413), 1 MiB */
    size_t stmt_max;            /* one statement's text cap, 64 KiB */
    int stmts_max;              /* statements per request, 64 */
    int tokens_max;             /* max_tokens / GENERATE cap, 512 */
    int sessions_max;           /* live sessions, 8 */
    int session_ttl_s;          /* idle seconds before a session is dropped, 900 */
    int queue_max;              /* waiting requests before 503, 16 */
    int deadline_ms;            /* default per-request deadline (504), 300000 */
    size_t trace_max;           /* bytes a /v1/trace answer may hold, 64 MiB */
    int batch_max;              /* completions decoded together, 8 (1: one at a time) */
} srv_opts;

/* The defaults above. */
void srv_opts_default(srv_opts *o);
/* One limit as NAME=VALUE (`--limit session_ttl_s=60`): body_max, stmt_max, stmts_max,
 * tokens_max, sessions_max, session_ttl_s, queue_max, deadline_ms, trace_max, batch_max (names
 * as the fields above; positive integers, sessions_max and batch_max at most 64). -1 with why in msg. */
int srv_set_limit(srv_opts *o, const char *kv, char *msg, size_t msgn);
/* "HOST:PORT", "[v6]:PORT" or "PORT" (host 127.0.0.1) into o; -1 with why in msg. */
int srv_parse_listen(srv_opts *o, const char *spec, char *msg, size_t msgn);
/* Whether a request's Host header (h, NULL when absent) may reach a server bound to
 * bind_host:port (against DNS rebinding): the loopback names with the bound port, and for a
 * non-loopback bind also any IP literal; never another name. */
int srv_host_allowed(const char *bind_host, int port, const char *h);
/* Serve until SIGINT or SIGTERM. Prints `lql: serving http://HOST:PORT` on stderr once
 * listening. Returns 0 after a clean stop, 1 when it could not start (reason on stderr). */
int srv_run(const srv_opts *o);

#endif
