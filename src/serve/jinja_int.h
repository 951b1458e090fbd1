/*
 * jinja_int.h — private to the chat-template engine (jinja.c, grammar/jinja_lex.re,
 * grammar/jinja_gram.y): tokens, the syntax tree and the arena both live in.
 */
#ifndef LQL_JINJA_INT_H
#define LQL_JINJA_INT_H

#include <stddef.h>
#include <stdint.h>

/* Bump allocation for a template's tokens and tree (freed at once). */
typedef struct jj_arena jj_arena;
void *jj_alloc(jj_arena **a, size_t n);
void jj_arena_free(jj_arena *a);

typedef struct jj_tok {
    int code;                   /* JT_* from the generated jinja_gram.h; 0 ends the stream */
    const char *s;              /* TEXT and STRING: the bytes (escapes resolved); NAME */
    size_t n;
    int64_t i;                  /* INT */
    int line;
} jj_tok;

/* The template as tokens: text between tags (whitespace control, trim_blocks and
 * lstrip_blocks applied, as Hugging Face configures jinja2), and each tag's tokens, the
 * opening keyword of a block tag fused with it (TAG_IF, TAG_FOR, …). -1 with err naming
 * the construct and line for anything outside the subset. */
int jj_lex(const char *src, size_t n, jj_arena **a, jj_tok **out, int *nout, char *err,
           size_t errn);

typedef enum jj_kind {
    /* statements */
    JN_TEXT, JN_OUT, JN_IF, JN_FOR, JN_SET, JN_SETATTR,
    /* expressions */
    JN_STR, JN_INT, JN_TRUE, JN_FALSE, JN_NONE, JN_NAME, JN_LIST, JN_ATTR, JN_INDEX, JN_SLICE,
    JN_CALL, JN_FILTER, JN_TEST, JN_NOTTEST, JN_NOT, JN_NEG, JN_BIN, JN_AND, JN_OR, JN_COND,
    JN_KWARG, JN_EMPTY
} jj_kind;

enum { JO_ADD = 1, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_CAT, JO_EQ, JO_NE, JO_LT,
       JO_GT, JO_LE, JO_GE, JO_IN, JO_NOTIN };

/* One node. Lists (bodies, arguments, list items) chain through next from the first.
 *   TEXT/STR/NAME: s,n   INT: i   OUT: a   IF: a cond, b then, c else   FOR: s var, a iter,
 *   b body   SET: s name, a value   SETATTR: s name, b attribute (STR), a value
 *   ATTR: a object, s attribute   INDEX: a object, b key   SLICE: a object, b c d (EMPTY
 *   when omitted)   CALL: a callee, b args   FILTER: a value, s name, b args   TEST/NOTTEST:
 *   a value, s test name   NOT/NEG: a   BIN: op, a, b   AND/OR: a, b   COND: a then, b cond,
 *   c else (NULL: undefined)   KWARG: s name, a value   LIST: a items */
typedef struct jj_node {
    jj_kind k;
    int op, line;
    const char *s;
    size_t n;
    int64_t i;
    struct jj_node *a, *b, *c, *d, *next;
} jj_node;

/* The parser's state (grammar/jinja_gram.y). */
typedef struct jj_parse {
    jj_arena **arena;
    jj_node *root;
    int failed;
    int line;
    char *err;
    size_t errn;
} jj_parse;

jj_node *jj_node_new(jj_parse *p, jj_kind k, int line);
/* Append b to the list starting at a; returns the head. */
jj_node *jj_append(jj_node *a, jj_node *b);

/* Lemon's entry points (generated). */
void *JinjaParseAlloc(void *(*malloc_fn)(size_t));
void JinjaParse(void *parser, int code, jj_tok tok, jj_parse *p);
void JinjaParseFree(void *parser, void (*free_fn)(void *));

#endif
