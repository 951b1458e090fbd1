/*
 * fuzz_serve_request.c — libFuzzer over the server's request checks: arbitrary bytes as the
 * JSON body of /v1/query and /v1/completions and /v1/chat/completions go through cJSON and
 * the same validation the HTTP threads run (statement splitting, parsing, classes, file
 * operands, every OpenAI field), with and without a session. Nothing may crash, leak or
 * trip a sanitizer; a refusal always carries a status and an error envelope.
 *   cmake -S . -B build-fuzz -DLQL_FUZZ=ON -DCMAKE_C_COMPILER=clang
 *   cmake --build build-fuzz --target fuzz_serve_request && build-fuzz/fuzz_serve_request -max_total_time=600
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "srv_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int checked(srv *S, srv_sess *x, const uint8_t *data, size_t size, int route)
{
    cJSON *req = cJSON_ParseWithLength((const char *)data, size);
    if (!cJSON_IsObject(req)) { cJSON_Delete(req); return 0; }
    srv_job *j = srv_job_new(route == 0 ? srv_query_run : srv_complete_run, NULL, req,
                             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "stream")));
    if (!j) { cJSON_Delete(req); return 0; }
    j->sess = x;
    int bad = route == 0 ? srv_query_check(S, j) : srv_complete_check(S, j, route == 2);
    if (bad && (j->status < 400 || !j->body.p || !strstr(j->body.p, "\"error\""))) abort();
    j->sess = NULL;             /* not a reference: the harness owns the sessions */
    srv_job_unref(S, j);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static srv S;
    static srv_opts o;
    static srv_sess base = {.dirfd = -1}, sess = {.id = "s", .dirfd = -1};
    static char status[] = "ok";
    if (!S.o) {
        srv_opts_default(&o);
        S.o = &o;
        S.base = &base;
        S.model_id = "m";
        S.context = 256;
        const char *t = "{% for m in messages %}{{ m.role + m.content }}{% endfor %}";
        char err[256];
        S.tmpl = srv_tmpl_compile(t, strlen(t), err, sizeof err);
        memcpy(S.tmpl_status, status, sizeof status);
        pthread_mutex_init(&S.mu, NULL);
    }
    for (int route = 0; route < 3; route++) {
        checked(&S, &base, data, size, route);
        checked(&S, &sess, data, size, route);
    }
    return 0;
}
