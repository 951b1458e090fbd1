/*
 * jinja.h — chat templates: the Jinja subset real templates use (the Llama-3, Gemma-3 and
 * Qwen3 templates: set, namespace, for/if, loop.*, whitespace control, slices, tests, string
 * methods, tojson, raise_exception), lexed by re2c and parsed by Lemon, rendered as Hugging
 * Face's jinja2 environment does (trim_blocks, lstrip_blocks, tojson without HTML escaping).
 * Failing closed: a template using anything else does not compile, and the error names the
 * construct and its line.
 */
#ifndef LQL_SRV_JINJA_H
#define LQL_SRV_JINJA_H

#include <stddef.h>

#include <cjson/cJSON.h>

typedef struct srv_tmpl srv_tmpl;

/* Compile src[0..n); NULL with err ("line N: unsupported filter 'x'") otherwise. */
srv_tmpl *srv_tmpl_compile(const char *src, size_t n, char *err, size_t errn);
void srv_tmpl_free(srv_tmpl *t);
/* Render with the members of vars (an object: messages, add_generation_prompt, bos_token,
 * …) as the template's variables. Returns malloc'd text, or NULL with err (a type error or
 * raise_exception's message, with the line). */
char *srv_tmpl_render(const srv_tmpl *t, const cJSON *vars, char *err, size_t errn);

#endif
