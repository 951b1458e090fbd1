/*
 * fuzz_serve_jinja.c — libFuzzer over the chat-template engine: arbitrary bytes as a
 * template are compiled (the lexer, the Lemon grammar, the subset check) and, when they
 * compile, rendered with a small conversation. Nothing may crash, leak, hang or trip a
 * sanitizer; a refusal always says why.
 *   cmake -S . -B build-fuzz -DLQL_FUZZ=ON -DCMAKE_C_COMPILER=clang
 *   cmake --build build-fuzz --target fuzz_serve_jinja && build-fuzz/fuzz_serve_jinja -max_total_time=600
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cJSON *vars;
    if (!vars)
        vars = cJSON_Parse("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
                           "\"content\": \"hi <think>x</think>\"}, {\"role\": \"assistant\", \"content\": "
                           "[{\"type\": \"text\", \"text\": \" t \"}]}], \"add_generation_prompt\": true, "
                           "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"n\": 3}");
    char err[256] = "";
    srv_tmpl *t = srv_tmpl_compile((const char *)data, size, err, sizeof err);
    if (!t) {
        if (!err[0]) abort();
        return 0;
    }
    char *out = srv_tmpl_render(t, vars, err, sizeof err);
    if (!out && !err[0]) abort();
    free(out);
    srv_tmpl_free(t);
    return 0;
}
