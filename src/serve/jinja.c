/*
 * jinja.c — compiling (lex, parse, check every filter/test/function/method name against
 * the subset) and rendering chat templates. Values live in a per-render arena: undefined,
 * none, bool, int, string, list, dict (a namespace is a dict whose attributes may be set).
 * Scopes follow jinja2: a for loop's body is a scope of its own (sets inside do not leak
 * out, hence namespace()), if blocks are not.
 */
#define _GNU_SOURCE             /* memmem */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "jinja.h"
#include "jinja_gram.h"
#include "jinja_int.h"
#include "srv_int.h"

/* ---------------------------------------------------------------- arena */

struct jj_arena {
    struct jj_arena *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

void *jj_alloc(jj_arena **a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!*a || (*a)->used + n > (*a)->cap) {
        size_t cap = n > 65536 ? n : 65536;
        jj_arena *c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = *a;
        c->used = 0;
        c->cap = cap;
        *a = c;
    }
    void *p = (*a)->mem + (*a)->used;
    (*a)->used += n;
    memset(p, 0, n);
    return p;
}

void jj_arena_free(jj_arena *a)
{
    while (a) {
        jj_arena *n = a->next;
        free(a);
        a = n;
    }
}

/* ---------------------------------------------------------------- compiling */

struct srv_tmpl {
    jj_arena *arena;
    jj_node *root;
};

jj_node *jj_node_new(jj_parse *p, jj_kind k, int line)
{
    jj_node *n = jj_alloc(p->arena, sizeof *n);
    if (!n) {
        if (!p->failed) snprintf(p->err, p->errn, "out of memory");
        p->failed = 1;
        return NULL;
    }
    n->k = k;
    n->line = line;
    return n;
}

jj_node *jj_append(jj_node *a, jj_node *b)
{
    if (!a) return b;
    jj_node *t = a;
    while (t->next) t = t->next;
    t->next = b;
    return a;
}

static const char *const filters[] = {"trim", "length", "count", "tojson", "lower", "upper",
    "first", "last", "join", "string", "default", "d"};
static const char *const tests[] = {"defined", "undefined", "none", "string", "number",
    "integer", "mapping", "iterable", "sequence", "true", "false", "boolean"};
static const char *const functions[] = {"namespace", "raise_exception", "range"};
static const char *const methods[] = {"startswith", "endswith", "split", "strip", "lstrip",
    "rstrip", "upper", "lower", "replace", "title", "items", "keys", "values", "get"};
static const char *const loop_attrs[] = {"index", "index0", "first", "last", "length",
    "revindex", "revindex0"};

static int known(const char *const *set, size_t n, const char *s, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(set[i]) == len && !memcmp(set[i], s, len)) return 1;
    return 0;
}
#define KNOWN(set, s, n) known(set, sizeof set / sizeof set[0], s, n)

static int is_name(const jj_node *x, const char *name)
{
    return x && x->k == JN_NAME && strlen(name) == x->n && !memcmp(x->s, name, x->n);
}

static int check_list(const jj_node *x, char *err, size_t errn);

static int no_kwargs(const jj_node *g, char *err, size_t errn)
{
    for (; g; g = g->next)
        if (g->k == JN_KWARG) {
            snprintf(err, errn, "line %d: unsupported keyword argument '%.*s'", g->line, (int)g->n, g->s);
            return -1;
        }
    return 0;
}

/* One node: every name outside the subset refused, with its line; then its children. */
static int check_one(const jj_node *x, char *err, size_t errn)
{
    const char *what = NULL;
    const jj_node *named = x;
    switch (x->k) {
    case JN_FILTER:
        if (!KNOWN(filters, x->s, x->n)) what = "filter";
        else if (no_kwargs(x->b, err, errn) < 0) return -1;
        break;
    case JN_TEST: case JN_NOTTEST: if (!KNOWN(tests, x->s, x->n)) what = "test"; break;
    case JN_CALL:
        named = x->a;
        if (x->a->k == JN_NAME) { if (!KNOWN(functions, x->a->s, x->a->n)) what = "function"; }
        else if (x->a->k == JN_ATTR) { if (!KNOWN(methods, x->a->s, x->a->n)) what = "method"; }
        else { snprintf(err, errn, "line %d: unsupported call of a computed value", x->line); return -1; }
        if (!what && !is_name(x->a, "namespace") && no_kwargs(x->b, err, errn) < 0) return -1;
        break;
    case JN_ATTR:
        if (is_name(x->a, "loop") && !KNOWN(loop_attrs, x->s, x->n)) what = "loop attribute";
        break;
    case JN_LIST:
        if (no_kwargs(x->a, err, errn) < 0) return -1;
        break;
    case JN_BIN:
        if (x->op == JO_DIV) {
            snprintf(err, errn, "line %d: unsupported operator '/' (no floats in this subset)", x->line);
            return -1;
        }
        break;
    default: break;
    }
    if (what) {
        snprintf(err, errn, "line %d: unsupported %s '%.*s'", named->line, what, (int)named->n, named->s);
        return -1;
    }
    /* a child is one node or the head of a list (bodies, arguments, items) */
    if (x->k == JN_SETATTR) return check_list(x->a, err, errn);
    return check_list(x->a, err, errn) < 0 || check_list(x->b, err, errn) < 0 ||
           check_list(x->c, err, errn) < 0 || check_list(x->d, err, errn) < 0 ? -1 : 0;
}

static int check_list(const jj_node *x, char *err, size_t errn)
{
    for (; x; x = x->next)
        if (check_one(x, err, errn) < 0) return -1;
    return 0;
}

srv_tmpl *srv_tmpl_compile(const char *src, size_t n, char *err, size_t errn)
{
    srv_tmpl *t = calloc(1, sizeof *t);
    if (!t) { snprintf(err, errn, "out of memory"); return NULL; }
    /* the lexer reads up to a NUL sentinel */
    char *copy = jj_alloc(&t->arena, n + 1);
    jj_tok *toks = NULL;
    int ntok = 0;
    if (!copy) { snprintf(err, errn, "out of memory"); srv_tmpl_free(t); return NULL; }
    memcpy(copy, src, n);
    if (memchr(copy, 0, n)) { snprintf(err, errn, "the template holds a NUL byte"); srv_tmpl_free(t); return NULL; }
    if (jj_lex(copy, n, &t->arena, &toks, &ntok, err, errn) < 0) { srv_tmpl_free(t); return NULL; }
    jj_parse p = {&t->arena, NULL, 0, 0, err, errn};
    void *parser = JinjaParseAlloc(malloc);
    if (!parser) { snprintf(err, errn, "out of memory"); srv_tmpl_free(t); return NULL; }
    for (int i = 0; i < ntok && !p.failed; i++) {
        p.line = toks[i].line;
        JinjaParse(parser, toks[i].code, toks[i], &p);
        if (toks[i].code == 0) break;
    }
    JinjaParseFree(parser, free);
    if (p.failed || check_list(p.root, err, errn) < 0) { srv_tmpl_free(t); return NULL; }
    t->root = p.root;
    return t;
}

void srv_tmpl_free(srv_tmpl *t)
{
    if (!t) return;
    jj_arena_free(t->arena);
    free(t);
}

/* ---------------------------------------------------------------- values */

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_STR, V_LIST, V_DICT, V_FLOAT } vtype;
typedef struct jv {
    vtype t;
    int64_t i;                  /* BOOL, INT */
    const char *s;              /* STR */
    size_t n;                   /* STR bytes */
    struct jseq *l;             /* LIST */
    struct jmap *d;             /* DICT */
    double f;                   /* FLOAT: a request's fraction (never made by the template) */
} jv;
typedef struct jseq { size_t n; jv *v; } jseq;
typedef struct jmap { size_t n, cap; jv *k, *v; int ns; } jmap;

#define SCOPES_MAX 64
#define LOOP_BUDGET 100000
/* Every string a render makes stays in its arena until the end: a budget keeps a template
 * that doubles a string in a loop from taking the memory (real chat renders make < 1 MiB). */
#define KEPT_BUDGET ((size_t)64 << 20)
#define OUT_MAX ((size_t)16 << 20)   /* the rendered text */
typedef struct rctx {
    jj_arena *ar;
    srv_buf out;
    jmap *scope[SCOPES_MAX];
    int depth;
    int failed;
    long iterations;            /* loop bodies run so far, against LOOP_BUDGET */
    size_t kept;                /* bytes of strings, lists and dicts made so far, against KEPT_BUDGET */
    char *err;
    size_t errn;
} rctx;

static const jv undef = {.t = V_UNDEF};

static jv fail(rctx *r, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static jv fail(rctx *r, int line, const char *fmt, ...)
{
    if (!r->failed) {
        /* line 0: the variables handed in, not the template */
        int k = line ? snprintf(r->err, r->errn, "line %d: ", line) : 0;
        va_list ap;
        va_start(ap, fmt);
        if (k >= 0 && (size_t)k < r->errn) vsnprintf(r->err + k, r->errn - (size_t)k, fmt, ap);
        va_end(ap);
    }
    r->failed = 1;
    return undef;
}

static jv vstr(const char *s, size_t n) { return (jv){.t = V_STR, .s = s, .n = n}; }
static jv vint(int64_t i) { return (jv){.t = V_INT, .i = i}; }
static jv vbool(int b) { return (jv){.t = V_BOOL, .i = b != 0}; }
static jv vdict(jmap *m) { return (jv){.t = V_DICT, .d = m}; }
static const jv none = {.t = V_NONE};

/* n more bytes a render keeps (strings, lists, dicts: loop scopes, namespaces, loop
 * objects): past KEPT_BUDGET the render fails naming what, and 1 is returned. */
static int over_budget(rctx *r, size_t n, const char *what, int line)
{
    if (n <= KEPT_BUDGET && (r->kept += n) <= KEPT_BUDGET)
        return 0;
    fail(r, line, "the template's %s exceed %zu MiB", what, KEPT_BUDGET >> 20);
    return 1;
}

static jv vlist(rctx *r, size_t n)
{
    if (over_budget(r, n > KEPT_BUDGET / sizeof(jv) ? KEPT_BUDGET + 1 : n * sizeof(jv), "lists", 0))
        return undef;
    jseq *l = jj_alloc(&r->ar, sizeof *l);
    jv *v = n ? jj_alloc(&r->ar, n * sizeof *v) : NULL;
    if (!l || (n && !v)) return fail(r, 0, "out of memory");
    l->n = n;
    l->v = v;
    return (jv){.t = V_LIST, .l = l};
}

static jmap *map_new(rctx *r)
{
    if (over_budget(r, sizeof(jmap), "dicts", 0))
        return NULL;
    jmap *m = jj_alloc(&r->ar, sizeof *m);
    if (!m) fail(r, 0, "out of memory");
    return m;
}

static int streq(jv a, const char *s, size_t n) { return a.t == V_STR && a.n == n && !memcmp(a.s, s, n); }

static jv *map_find(const jmap *m, const char *s, size_t n)
{
    for (size_t i = 0; m && i < m->n; i++)
        if (streq(m->k[i], s, n)) return &m->v[i];
    return NULL;
}

static void map_set(rctx *r, jmap *m, jv k, jv v)
{
    jv *old = k.t == V_STR ? map_find(m, k.s, k.n) : NULL;
    if (old) { *old = v; return; }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        if (over_budget(r, 2 * cap * sizeof(jv), "dicts", 0))
            return;
        jv *nk = jj_alloc(&r->ar, cap * sizeof *nk), *nv = jj_alloc(&r->ar, cap * sizeof *nv);
        if (!nk || !nv) { fail(r, 0, "out of memory"); return; }
        if (m->n) { memcpy(nk, m->k, m->n * sizeof *nk); memcpy(nv, m->v, m->n * sizeof *nv); }
        m->k = nk;
        m->v = nv;
        m->cap = cap;
    }
    m->k[m->n] = k;
    m->v[m->n++] = v;
}

static jv from_json(rctx *r, const cJSON *j)
{
    if (cJSON_IsString(j)) return vstr(j->valuestring, strlen(j->valuestring));
    if (cJSON_IsBool(j)) return vbool(cJSON_IsTrue(j));
    if (cJSON_IsNull(j)) return none;
    if (cJSON_IsNumber(j)) {
        int64_t i;
        /* a fraction (a tool call's argument, say) is a Python float, printed as its repr; a
         * whole number beyond 64 bits is an int or a float (cJSON does not say which), so
         * printing it fails, but only if the template prints it */
        if (srv_json_int(j, INT64_MIN, INT64_MAX, &i)) return vint(i);
        return (jv){.t = V_FLOAT, .f = j->valuedouble};
    }
    if (cJSON_IsArray(j)) {
        jv l = vlist(r, (size_t)cJSON_GetArraySize(j));
        size_t i = 0;
        for (const cJSON *x = j->child; x && !r->failed; x = x->next) l.l->v[i++] = from_json(r, x);
        return l;
    }
    jmap *m = map_new(r);
    for (const cJSON *x = j->child; m && x && !r->failed; x = x->next)
        map_set(r, m, vstr(x->string, strlen(x->string)), from_json(r, x));
    return m ? vdict(m) : undef;
}

static int truthy(jv v)
{
    switch (v.t) {
    case V_BOOL: case V_INT: return v.i != 0;
    case V_FLOAT: return v.f != 0;
    case V_STR: return v.n > 0;
    case V_LIST: return v.l->n > 0;
    case V_DICT: return v.d->n > 0;
    default: return 0;
    }
}

/* A request's float that is not a fraction: a whole number beyond 64 bits (or one cJSON read
 * as infinite), which may have been an int or a float (cJSON does not say), so it has no
 * repr here. */
static int float_whole(jv v) { return !isfinite(v.f) || v.f == floor(v.f); }

static const char *type_name(jv v)
{
    static const char *const names[] = {"undefined", "none", "bool", "int", "string", "list", "dict", "float"};
    return v.t == V_FLOAT && float_whole(v) ? "whole number beyond 64 bits" : names[v.t];
}

static uint32_t cp_at(const char *s, size_t n, size_t i, size_t *len);

/* Python's repr() of a string: single quotes unless the text holds ' and no ", the quote
 * and backslash escaped, \t \n \r, other ASCII controls as \xNN, and what
 * str.isprintable() rejects (Unicode categories C* and Z* but the space) as \xNN, \uNNNN
 * or \UNNNNNNNN; the rest as it is. */
static void repr_str(jv v, srv_buf *b)
{
    char q = v.n && memchr(v.s, '\'', v.n) && !memchr(v.s, '"', v.n) ? '"' : '\'', esc[16];
    srv_buf_add(b, &q, 1);
    for (size_t i = 0, len; i < v.n; i += len) {
        uint32_t c = cp_at(v.s, v.n, i, &len);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
        int shown = c >= 0x80 ? !(cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
                                  cat == UTF8PROC_CATEGORY_CS || cat == UTF8PROC_CATEGORY_CO ||
                                  cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_ZS ||
                                  cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP)
                              : c >= 0x20 && c < 0x7F;
        if (c == (uint32_t)q || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; srv_buf_add(b, esc, 2); }
        else if (c == '\t' || c == '\n' || c == '\r')
            srv_buf_add(b, c == '\t' ? "\\t" : c == '\n' ? "\\n" : "\\r", 2);
        else if (shown) srv_buf_add(b, v.s + i, len);
        else srv_buf_add(b, esc, (size_t)snprintf(esc, sizeof esc, c <= 0xFF ? "\\x%02x" : c <= 0xFFFF ?
                                                  "\\u%04x" : "\\U%08x", (unsigned)c));
    }
    srv_buf_add(b, &q, 1);
}

static int to_text(jv v, srv_buf *b);

/* Python's repr() of a float (str() and json.dumps give the same): the fewest digits that
 * read back as the same double; positional for exponents -4..15 (with ".0" when whole),
 * else d.ddde+XX. */
static int float_repr(double d, srv_buf *b)
{
    char e[40], o[400];
    int p = 1;
    while (p < 17 && (snprintf(e, sizeof e, "%.*e", p - 1, d), strtod(e, NULL) != d)) p++;
    snprintf(e, sizeof e, "%.*e", p - 1, d);
    char *x = strchr(e, 'e'), digits[20];
    int exp = atoi(x + 1), nd = 0, k = 0;
    for (const char *c = e; c < x; c++) if (*c >= '0' && *c <= '9') digits[nd++] = *c;
    if (d < 0) o[k++] = '-';
    if (exp < -4 || exp >= 16) {
        o[k++] = digits[0];
        if (nd > 1) { o[k++] = '.'; memcpy(o + k, digits + 1, (size_t)nd - 1); k += nd - 1; }
        k += snprintf(o + k, sizeof o - (size_t)k, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
    } else if (exp < 0) {
        o[k++] = '0';
        o[k++] = '.';
        for (int i = exp + 1; i < 0; i++) o[k++] = '0';
        memcpy(o + k, digits, (size_t)nd);
        k += nd;
    } else {
        for (int i = 0; i <= exp; i++) o[k++] = i < nd ? digits[i] : '0';
        o[k++] = '.';
        if (nd > exp + 1) { memcpy(o + k, digits + exp + 1, (size_t)(nd - exp - 1)); k += nd - exp - 1; }
        else o[k++] = '0';
    }
    return srv_buf_add(b, o, (size_t)k);
}

/* Python's repr() of an item inside a printed list or dict; -1 for what has no repr here
 * (an undefined item, a namespace) and past the 16 MiB a render may give (a list holding
 * one long string many times would otherwise print without bound). */
static int repr_of(jv v, srv_buf *b)
{
    if (b->n > OUT_MAX || v.t == V_UNDEF) return -1;
    if (v.t == V_STR) { repr_str(v, b); return 0; }
    return to_text(v, b);
}

/* Text of a value as {{ }} prints it: Python's str(), so a list or dict (a message's
 * content parts, say) prints as its repr, as jinja2 does. -1 when that is not possible. */
static int to_text(jv v, srv_buf *b)
{
    char num[32];
    switch (v.t) {
    case V_UNDEF: return 0;
    case V_NONE: return srv_buf_add(b, "None", 4);
    case V_BOOL: return srv_buf_add(b, v.i ? "True" : "False", v.i ? 4 : 5);
    case V_INT: snprintf(num, sizeof num, "%lld", (long long)v.i); return srv_buf_add(b, num, strlen(num));
    case V_STR: return srv_buf_add(b, v.s, v.n);
    case V_FLOAT: return float_whole(v) ? -1 : float_repr(v.f, b);
    case V_LIST:
        srv_buf_add(b, "[", 1);
        for (size_t i = 0; i < v.l->n; i++)
            if ((i && srv_buf_add(b, ", ", 2)) || repr_of(v.l->v[i], b) < 0) return -1;
        return srv_buf_add(b, "]", 1);
    case V_DICT:
        if (v.d->ns) return -1;
        srv_buf_add(b, "{", 1);
        for (size_t i = 0; i < v.d->n; i++)
            if ((i && srv_buf_add(b, ", ", 2)) || repr_of(v.d->k[i], b) < 0 || srv_buf_add(b, ": ", 2) ||
                repr_of(v.d->v[i], b) < 0)
                return -1;
        return srv_buf_add(b, "}", 1);
    default: return -1;
    }
}

static jv keep(rctx *r, srv_buf *b, int line);

static jv as_str(rctx *r, jv v, int line)
{
    if (v.t == V_STR) return v;
    srv_buf b = {0};
    if (to_text(v, &b) < 0 && !b.oom) {
        srv_buf_free(&b);
        return fail(r, line, "cannot turn a %s into text", type_name(v));
    }
    return keep(r, &b, line);   /* a repr can be long: it counts against the budget */
}

static int equal(jv a, jv b)
{
    if ((a.t == V_INT || a.t == V_BOOL) && (b.t == V_INT || b.t == V_BOOL)) return a.i == b.i;
    if (a.t != b.t) return 0;
    switch (a.t) {
    case V_UNDEF: case V_NONE: return 1;
    case V_FLOAT: return a.f == b.f;    /* never equal to an int: floats here are fractions */
    case V_STR: return a.n == b.n && !memcmp(a.s, b.s, a.n);
    case V_LIST:
        if (a.l->n != b.l->n) return 0;
        for (size_t i = 0; i < a.l->n; i++) if (!equal(a.l->v[i], b.l->v[i])) return 0;
        return 1;
    case V_DICT:
        if (a.d->n != b.d->n) return 0;
        for (size_t i = 0; i < a.d->n; i++) {
            jv *o = map_find(b.d, a.d->k[i].s, a.d->k[i].n);
            if (!o || !equal(a.d->v[i], *o)) return 0;
        }
        return 1;
    default: return 0;
    }
}

/* Only ASCII bytes? (case mapping beyond ASCII is refused, not guessed) */
static int ascii(jv s)
{
    for (size_t i = 0; i < s.n; i++)
        if ((unsigned char)s.s[i] >= 0x80) return 0;
    return 1;
}

/* Code points in a UTF-8 string. */
static size_t u8len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* Byte offset of code point i. */
static size_t u8off(const char *s, size_t n, size_t i)
{
    size_t b = 0;
    while (b < n && i > 0) {
        b++;
        while (b < n && ((unsigned char)s[b] & 0xC0) == 0x80) b++;
        i--;
    }
    return b;
}

/* ---------------------------------------------------------------- evaluation */

static jv eval(rctx *r, const jj_node *x);

static jv lookup(rctx *r, const char *s, size_t n)
{
    for (int d = r->depth - 1; d >= 0; d--) {
        jv *v = map_find(r->scope[d], s, n);
        if (v) return *v;
    }
    return undef;
}

/* The code point at s[i] (UTF-8; a stray byte counts as itself) and its length. */
static uint32_t cp_at(const char *s, size_t n, size_t i, size_t *len)
{
    unsigned char c = (unsigned char)s[i];
    int k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (i + (size_t)k > n) k = 1;
    uint32_t v = k == 1 ? c : c & (0x3F >> (k - 1));
    for (int j = 1; j < k; j++) v = v << 6 | ((unsigned char)s[i + (size_t)j] & 0x3F);
    *len = (size_t)k;
    return v;
}

/* Python's str.isspace() for one code point. */
static int py_space(uint32_t c)
{
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
           c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Is a (Python) whitespace character at s[i]? *len its bytes. */
static int space_at(const char *s, size_t n, size_t i, size_t *len)
{
    return py_space(cp_at(s, n, i, len));
}

/* The start of the character that ends at s[b - 1]: a lead byte whose sequence ends
 * exactly there, else the byte itself (a stray continuation byte counts as itself, as
 * cp_at reads it; backing over it onto an earlier character would split that one). */
static size_t char_before(const char *s, size_t n, size_t b)
{
    size_t a = b - 1, len;
    while (a > 0 && b - a < 4 && ((unsigned char)s[a] & 0xC0) == 0x80) a--;
    cp_at(s, n, a, &len);
    return a + len == b ? a : b - 1;
}

/* Python's str.strip family: which = 1 left, 2 right, 3 both; chars NULL = whitespace. */
static jv strip(jv s, const char *chars, size_t nchars, int which)
{
    size_t a = 0, b = s.n, k;
    if (chars) {
        if (which & 1) while (a < b && memchr(chars, s.s[a], nchars)) a++;
        if (which & 2) while (b > a && memchr(chars, s.s[b - 1], nchars)) b--;
        return vstr(s.s + a, b - a);
    }
    if (which & 1) while (a < b && space_at(s.s, s.n, a, &k)) a += k;
    if (which & 2)
        for (size_t c; b > a && (c = char_before(s.s, s.n, b)) >= a && space_at(s.s, s.n, c, &k);)
            b = c;
    return vstr(s.s + a, b - a);
}

static jv json_of(rctx *r, jv v, srv_buf *b, int line)
{
    char num[32];
    switch (v.t) {
    case V_NONE: srv_buf_add(b, "null", 4); break;
    case V_BOOL: srv_buf_add(b, v.i ? "true" : "false", v.i ? 4 : 5); break;
    case V_INT: snprintf(num, sizeof num, "%lld", (long long)v.i); srv_buf_add(b, num, strlen(num)); break;
    case V_FLOAT:
        if (float_whole(v)) return fail(r, line, "the request's number %g: whole numbers beyond 64 bits are not supported", v.f);
        float_repr(v.f, b);
        break;
    case V_STR:
        /* json.dumps(ensure_ascii=False): quotes, backslash and controls escaped */
        srv_buf_add(b, "\"", 1);
        for (size_t i = 0; i < v.n; i++) {
            unsigned char c = (unsigned char)v.s[i];
            const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (e) srv_buf_add(b, e, 2);
            else if (c < 0x20) { snprintf(num, sizeof num, "\\u%04x", c); srv_buf_add(b, num, 6); }
            else srv_buf_add(b, v.s + i, 1);
        }
        srv_buf_add(b, "\"", 1);
        break;
    case V_LIST:
        srv_buf_add(b, "[", 1);
        for (size_t i = 0; i < v.l->n && !r->failed; i++) {
            if (i) srv_buf_add(b, ", ", 2);
            json_of(r, v.l->v[i], b, line);
        }
        srv_buf_add(b, "]", 1);
        break;
    case V_DICT:
        srv_buf_add(b, "{", 1);
        for (size_t i = 0; i < v.d->n && !r->failed; i++) {
            if (i) srv_buf_add(b, ", ", 2);
            json_of(r, as_str(r, v.d->k[i], line), b, line);
            srv_buf_add(b, ": ", 2);
            json_of(r, v.d->v[i], b, line);
        }
        srv_buf_add(b, "}", 1);
        break;
    default:
        return fail(r, line, "tojson of an undefined value");
    }
    return undef;
}

static jv keep(rctx *r, srv_buf *b, int line)
{
    if (b->oom) { srv_buf_free(b); return fail(r, line, "out of memory"); }
    if (over_budget(r, b->n, "strings", line)) {
        srv_buf_free(b);
        return undef;
    }
    char *s = jj_alloc(&r->ar, b->n + 1);
    if (!s) { srv_buf_free(b); return fail(r, line, "out of memory"); }
    if (b->n) memcpy(s, b->p, b->n);
    jv v = vstr(s, b->n);
    srv_buf_free(b);
    return v;
}

/* The arguments of a call or filter, evaluated; at most 4. */
static int eval_args(rctx *r, const jj_node *g, jv *out, int max, int line)
{
    int n = 0;
    for (; g && !r->failed; g = g->next) {
        if (n == max) { fail(r, line, "too many arguments"); return -1; }
        out[n++] = eval(r, g);
    }
    return r->failed ? -1 : n;
}

static jv filter(rctx *r, const jj_node *x)
{
    jv v = eval(r, x->a), args[4];
    int na = eval_args(r, x->b, args, 4, x->line);
    if (r->failed) return undef;
    const char *f = x->s;
    size_t fn = x->n;
#define IS(name) (fn == sizeof name - 1 && !memcmp(f, name, fn))
    if (IS("default") || IS("d")) return v.t == V_UNDEF ? (na ? args[0] : vstr("", 0)) : v;
    if (IS("length") || IS("count")) {
        if (v.t == V_STR) return vint((int64_t)u8len(v.s, v.n));
        if (v.t == V_LIST) return vint((int64_t)v.l->n);
        if (v.t == V_DICT) return vint((int64_t)v.d->n);
        if (v.t == V_UNDEF) return vint(0);
        return fail(r, x->line, "length of a %s", type_name(v));
    }
    if (IS("tojson")) {
        srv_buf b = {0};
        json_of(r, v, &b, x->line);
        return keep(r, &b, x->line);
    }
    if (IS("first") || IS("last")) {
        if (v.t == V_LIST) return v.l->n ? v.l->v[IS("first") ? 0 : v.l->n - 1] : undef;
        if (v.t == V_STR && v.n) {
            size_t k = u8len(v.s, v.n), a = u8off(v.s, v.n, IS("first") ? 0 : k - 1);
            return vstr(v.s + a, u8off(v.s, v.n, IS("first") ? 1 : k) - a);
        }
        return fail(r, x->line, "%.*s of a %s", (int)fn, f, type_name(v));
    }
    if (IS("join")) {
        if (v.t != V_LIST) return fail(r, x->line, "join of a %s", type_name(v));
        jv sep = na ? as_str(r, args[0], x->line) : vstr("", 0);
        srv_buf b = {0};
        /* past the budget keep() refuses it: stop there (a list repeating a long string
         * would otherwise join without bound first) */
        for (size_t i = 0; i < v.l->n && !r->failed && b.n <= KEPT_BUDGET; i++) {
            if (i) srv_buf_add(&b, sep.s, sep.n);
            jv s = as_str(r, v.l->v[i], x->line);
            srv_buf_add(&b, s.s, s.n);
        }
        return keep(r, &b, x->line);
    }
    jv s = as_str(r, v, x->line);
    if (r->failed) return undef;
    if (IS("string")) return s;
    if (IS("trim")) {
        if (na && args[0].t != V_STR) return fail(r, x->line, "trim's characters must be a string");
        return strip(s, na ? args[0].s : NULL, na ? args[0].n : 0, 3);
    }
    if ((IS("lower") || IS("upper")) && !ascii(s))
        return fail(r, x->line, "%.*s of non-ASCII text is not supported (Unicode case mapping)", (int)fn, f);
    if (IS("lower") || IS("upper")) {
        char *o = jj_alloc(&r->ar, s.n + 1);
        if (!o) return fail(r, x->line, "out of memory");
        for (size_t i = 0; i < s.n; i++) {
            char c = s.s[i];
            o[i] = IS("lower") ? (c >= 'A' && c <= 'Z' ? (char)(c + 32) : c)
                               : (c >= 'a' && c <= 'z' ? (char)(c - 32) : c);
        }
        return vstr(o, s.n);
    }
#undef IS
    return fail(r, x->line, "unsupported filter '%.*s'", (int)fn, f);
}

static int test(rctx *r, const jj_node *x)
{
    jv v = eval(r, x->a);
    const char *t = x->s;
    size_t n = x->n;
#define IS(name) (n == sizeof name - 1 && !memcmp(t, name, n))
    if (IS("defined")) return v.t != V_UNDEF;
    if (IS("undefined")) return v.t == V_UNDEF;
    if (IS("none")) return v.t == V_NONE;
    if (IS("string")) return v.t == V_STR;
    if (IS("number")) return v.t == V_INT || v.t == V_FLOAT;
    if (IS("integer")) return v.t == V_INT;
    if (IS("boolean")) return v.t == V_BOOL;
    if (IS("true")) return v.t == V_BOOL && v.i;
    if (IS("false")) return v.t == V_BOOL && !v.i;
    if (IS("mapping")) return v.t == V_DICT;
    if (IS("iterable")) return v.t == V_STR || v.t == V_LIST || v.t == V_DICT || v.t == V_UNDEF;
    if (IS("sequence")) return v.t == V_STR || v.t == V_LIST || v.t == V_DICT;
#undef IS
    fail(r, x->line, "unsupported test '%.*s'", (int)n, t);
    return 0;
}

/* Python's slice indices for a sequence of length len. */
static void slice_range(int64_t len, const jv *b, const jv *c, const jv *d, int64_t *start,
                        int64_t *stop, int64_t *step)
{
    *step = d->t == V_INT ? d->i : 1;
    int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? len - 1 : len;
    if (b->t == V_INT) { *start = b->i < 0 ? b->i + len : b->i; if (*start < lo) *start = lo; if (*start > hi) *start = hi; }
    else *start = *step < 0 ? hi : lo;
    if (c->t == V_INT) { *stop = c->i < 0 ? c->i + len : c->i; if (*stop < lo) *stop = lo; if (*stop > hi) *stop = hi; }
    else *stop = *step < 0 ? lo : hi;
}

static jv slice(rctx *r, const jj_node *x)
{
    jv v = eval(r, x->a);
    jv b = x->b->k == JN_EMPTY ? undef : eval(r, x->b), c = x->c->k == JN_EMPTY ? undef : eval(r, x->c),
       d = x->d->k == JN_EMPTY ? undef : eval(r, x->d);
    if (r->failed) return undef;
    if ((b.t != V_UNDEF && b.t != V_INT) || (c.t != V_UNDEF && c.t != V_INT) || (d.t != V_UNDEF && d.t != V_INT) ||
        (d.t == V_INT && d.i == 0))
        return fail(r, x->line, "slice bounds must be integers (and the step not 0)");
    int64_t len = v.t == V_LIST ? (int64_t)v.l->n : v.t == V_STR ? (int64_t)u8len(v.s, v.n) : -1;
    if (len < 0) return fail(r, x->line, "cannot slice a %s", type_name(v));
    int64_t start, stop, step, cnt = 0;
    slice_range(len, &b, &c, &d, &start, &stop, &step);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) cnt++;
    if (v.t == V_LIST) {
        jv out = vlist(r, (size_t)cnt);
        int64_t k = 0;
        for (int64_t i = start; !r->failed && (step > 0 ? i < stop : i > stop); i += step) out.l->v[k++] = v.l->v[i];
        return out;
    }
    srv_buf s = {0};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        size_t a = u8off(v.s, v.n, (size_t)i), e = u8off(v.s, v.n, (size_t)i + 1);
        srv_buf_add(&s, v.s + a, e - a);
    }
    return keep(r, &s, x->line);
}

static jv index_of(rctx *r, jv v, jv k, int line)
{
    if (v.t == V_UNDEF) return fail(r, line, "subscript of an undefined value");
    if (v.t == V_DICT) {
        if (k.t != V_STR) return undef;
        jv *o = map_find(v.d, k.s, k.n);
        return o ? *o : undef;
    }
    if ((v.t == V_LIST || v.t == V_STR) && k.t == V_INT) {
        int64_t len = v.t == V_LIST ? (int64_t)v.l->n : (int64_t)u8len(v.s, v.n), i = k.i < 0 ? k.i + len : k.i;
        if (i < 0 || i >= len) return undef;
        if (v.t == V_LIST) return v.l->v[i];
        size_t a = u8off(v.s, v.n, (size_t)i);
        return vstr(v.s + a, u8off(v.s, v.n, (size_t)i + 1) - a);
    }
    return undef;
}

/* str.split(sep) / str.split(). */
static jv split(rctx *r, jv s, const jv *sep, int line)
{
    size_t cnt = 0, i = 0;
    jv out = undef;
    if (sep && sep->t != V_NONE) {
        if (sep->t != V_STR || sep->n == 0) return fail(r, line, "split needs a non-empty separator");
        for (const char *p = s.s, *e = s.s + s.n;; cnt++) {
            const char *q = p;
            while (q + sep->n <= e && memcmp(q, sep->s, sep->n)) q++;
            if (q + sep->n > e) { cnt++; break; }
            p = q + sep->n;
        }
        out = vlist(r, cnt);
        const char *p = s.s, *e = s.s + s.n;
        for (i = 0; i < cnt && !r->failed; i++) {
            const char *q = p;
            while (q + sep->n <= e && memcmp(q, sep->s, sep->n)) q++;
            if (q + sep->n > e) q = e;
            out.l->v[i] = vstr(p, (size_t)(q - p));
            p = q + sep->n;
        }
        return out;
    }
    /* str.split(): runs of whitespace separate, none at the ends */
    size_t len;
    for (int pass = 0; pass < 2 && !r->failed; pass++) {
        if (pass) out = vlist(r, cnt);
        for (size_t k = 0; k < s.n && !r->failed;) {
            while (k < s.n && space_at(s.s, s.n, k, &len)) k += len;
            size_t a = k;
            while (k < s.n && !space_at(s.s, s.n, k, &len)) k += len;
            if (k > a && pass) out.l->v[i++] = vstr(s.s + a, k - a);
            else if (k > a) cnt++;
        }
    }
    return out;
}

static jv method(rctx *r, const jj_node *x)
{
    const jj_node *m = x->a;
    jv self = eval(r, m->a), args[4];
    int na = eval_args(r, x->b, args, 4, x->line);
    if (r->failed) return undef;
    const char *f = m->s;
    size_t fn = m->n;
#define IS(name) (fn == sizeof name - 1 && !memcmp(f, name, fn))
    if (self.t == V_DICT) {
        if (IS("get")) {
            jv *o = na && args[0].t == V_STR ? map_find(self.d, args[0].s, args[0].n) : NULL;
            return o ? *o : na > 1 ? args[1] : none;
        }
        if (IS("keys") || IS("values") || IS("items")) {
            jv out = vlist(r, self.d->n);
            for (size_t i = 0; i < self.d->n && !r->failed; i++) {
                if (IS("keys")) out.l->v[i] = self.d->k[i];
                else if (IS("values")) out.l->v[i] = self.d->v[i];
                else {
                    jv pair = vlist(r, 2);
                    if (r->failed) break;
                    pair.l->v[0] = self.d->k[i];
                    pair.l->v[1] = self.d->v[i];
                    out.l->v[i] = pair;
                }
            }
            return out;
        }
        return fail(r, x->line, "a dict has no method '%.*s'", (int)fn, f);
    }
    if (self.t != V_STR) return fail(r, x->line, "a %s has no method '%.*s'", type_name(self), (int)fn, f);
    for (int i = 0; i < na; i++)
        if (args[i].t != V_STR && !(IS("split") && args[i].t == V_NONE) && !(IS("strip") && args[i].t == V_NONE))
            return fail(r, x->line, "'%.*s' takes string arguments", (int)fn, f);
    if (IS("startswith") || IS("endswith")) {
        if (na != 1) return fail(r, x->line, "'%.*s' takes one argument", (int)fn, f);
        if (args[0].n > self.n) return vbool(0);
        return vbool(!memcmp(IS("startswith") ? self.s : self.s + self.n - args[0].n, args[0].s, args[0].n));
    }
    if (IS("strip") || IS("lstrip") || IS("rstrip")) {
        int has = na && args[0].t == V_STR;
        return strip(self, has ? args[0].s : NULL, has ? args[0].n : 0, IS("strip") ? 3 : IS("lstrip") ? 1 : 2);
    }
    if (IS("split")) return split(r, self, na ? &args[0] : NULL, x->line);
    if (IS("replace")) {
        if (na != 2 || args[0].n == 0) return fail(r, x->line, "replace takes two strings, the first not empty");
        srv_buf b = {0};
        for (size_t i = 0; i < self.n && b.n <= KEPT_BUDGET;) {    /* keep() refuses more */
            if (i + args[0].n <= self.n && !memcmp(self.s + i, args[0].s, args[0].n)) {
                srv_buf_add(&b, args[1].s, args[1].n);
                i += args[0].n;
            } else {
                srv_buf_add(&b, self.s + i++, 1);
            }
        }
        return keep(r, &b, x->line);
    }
    if ((IS("upper") || IS("lower") || IS("title")) && !ascii(self))
        return fail(r, x->line, "%.*s of non-ASCII text is not supported (Unicode case mapping)", (int)fn, f);
    if (IS("upper") || IS("lower") || IS("title")) {
        char *o = jj_alloc(&r->ar, self.n + 1);
        if (!o) return fail(r, x->line, "out of memory");
        int word = 0;
        for (size_t i = 0; i < self.n; i++) {
            char c = self.s[i];
            int up = IS("upper") || (IS("title") && !word);
            int alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
            if (up && c >= 'a' && c <= 'z') c = (char)(c - 32);
            else if (!up && c >= 'A' && c <= 'Z') c = (char)(c + 32);
            word = alpha;
            o[i] = c;
        }
        return vstr(o, self.n);
    }
#undef IS
    return fail(r, x->line, "a string has no method '%.*s'", (int)fn, f);
}

static jv call(rctx *r, const jj_node *x)
{
    if (x->a->k == JN_ATTR) return method(r, x);
    const jj_node *fnode = x->a;
    if (is_name(fnode, "namespace")) {
        jmap *m = map_new(r);
        if (!m) return undef;
        m->ns = 1;
        for (const jj_node *g = x->b; g && !r->failed; g = g->next) {
            if (g->k != JN_KWARG) return fail(r, x->line, "namespace() takes keyword arguments");
            map_set(r, m, vstr(g->s, g->n), eval(r, g->a));
        }
        return vdict(m);
    }
    jv args[4];
    int na = eval_args(r, x->b, args, 4, x->line);
    if (r->failed) return undef;
    if (is_name(fnode, "raise_exception")) {
        jv msg = na ? as_str(r, args[0], x->line) : vstr("", 0);
        return fail(r, x->line, "the template raised: %.*s", (int)(msg.n > 200 ? 200 : msg.n), msg.s ? msg.s : "");
    }
    /* range(stop) / range(start, stop) */
    int64_t a = 0, b = na == 1 ? args[0].i : na == 2 ? args[1].i : 0;
    if (na == 2) a = args[0].i;
    if (na < 1 || na > 2 || args[0].t != V_INT || (na == 2 && args[1].t != V_INT))
        return fail(r, x->line, "range takes one or two integers");
    if (b > a && (a < 0 ? b > a + 100000 : b - a > 100000))
        return fail(r, x->line, "range of more than 100000 items");
    jv out = vlist(r, b > a ? (size_t)(b - a) : 0);
    for (int64_t i = a; i < b && !r->failed; i++) out.l->v[i - a] = vint(i);
    return out;
}

static jv overflow(rctx *r, int line)
{
    return fail(r, line, "integer overflow (this subset's integers are 64-bit)");
}

static jv binop(rctx *r, const jj_node *x)
{
    jv a = eval(r, x->a);
    if (r->failed) return undef;
    jv b = eval(r, x->b);
    if (r->failed) return undef;
    switch (x->op) {
    case JO_EQ: return vbool(equal(a, b));
    case JO_NE: return vbool(!equal(a, b));
    case JO_IN: case JO_NOTIN: {
        int in = 0;
        if (b.t == V_STR && a.t == V_STR) in = a.n == 0 || memmem(b.s, b.n, a.s, a.n) != NULL;
        else if (b.t == V_LIST) for (size_t i = 0; i < b.l->n && !in; i++) in = equal(a, b.l->v[i]);
        else if (b.t == V_DICT) in = a.t == V_STR && map_find(b.d, a.s, a.n) != NULL;
        else return fail(r, x->line, "'in' needs a string, list or dict on its right, not a %s", type_name(b));
        return vbool(x->op == JO_IN ? in : !in);
    }
    case JO_CAT: {
        jv s = as_str(r, a, x->line), t = as_str(r, b, x->line);
        if (r->failed) return undef;
        srv_buf o = {0};
        srv_buf_add(&o, s.s, s.n);
        srv_buf_add(&o, t.s, t.n);
        return keep(r, &o, x->line);
    }
    default: break;
    }
    if (x->op == JO_ADD && a.t == V_STR && b.t == V_STR) {
        srv_buf o = {0};
        srv_buf_add(&o, a.s, a.n);
        srv_buf_add(&o, b.s, b.n);
        return keep(r, &o, x->line);
    }
    if (x->op == JO_ADD && a.t == V_LIST && b.t == V_LIST) {
        jv out = vlist(r, a.l->n + b.l->n);
        if (r->failed) return undef;
        if (a.l->n) memcpy(out.l->v, a.l->v, a.l->n * sizeof *a.l->v);
        if (b.l->n) memcpy(out.l->v + a.l->n, b.l->v, b.l->n * sizeof *b.l->v);
        return out;
    }
    if ((x->op == JO_LT || x->op == JO_GT || x->op == JO_LE || x->op == JO_GE) && a.t == V_STR && b.t == V_STR) {
        int c = memcmp(a.s, b.s, a.n < b.n ? a.n : b.n);
        if (c == 0) c = a.n < b.n ? -1 : a.n > b.n;
        return vbool(x->op == JO_LT ? c < 0 : x->op == JO_GT ? c > 0 : x->op == JO_LE ? c <= 0 : c >= 0);
    }
    int ints = (a.t == V_INT || a.t == V_BOOL) && (b.t == V_INT || b.t == V_BOOL);
    if (!ints) return fail(r, x->line, "unsupported operands: %s and %s", type_name(a), type_name(b));
    int64_t p = a.i, q = b.i, v;
    /* Python's integers are unbounded, this subset's are 64-bit: overflow fails closed */
    switch (x->op) {
    case JO_ADD: return __builtin_add_overflow(p, q, &v) ? overflow(r, x->line) : vint(v);
    case JO_SUB: return __builtin_sub_overflow(p, q, &v) ? overflow(r, x->line) : vint(v);
    case JO_MUL: return __builtin_mul_overflow(p, q, &v) ? overflow(r, x->line) : vint(v);
    case JO_FLOORDIV: case JO_MOD: {
        if (q == 0) return fail(r, x->line, "division by zero");
        if (p == INT64_MIN && q == -1) return overflow(r, x->line);
        int64_t d = p / q, m = p % q;
        if (m != 0 && ((m < 0) != (q < 0))) { d--; m += q; }   /* Python floors */
        return vint(x->op == JO_FLOORDIV ? d : m);
    }
    case JO_LT: return vbool(p < q);
    case JO_GT: return vbool(p > q);
    case JO_LE: return vbool(p <= q);
    case JO_GE: return vbool(p >= q);
    default: return fail(r, x->line, "unsupported operator");
    }
}

static jv eval(rctx *r, const jj_node *x)
{
    if (r->failed) return undef;
    switch (x->k) {
    case JN_STR: return vstr(x->s, x->n);
    case JN_INT: return vint(x->i);
    case JN_TRUE: return vbool(1);
    case JN_FALSE: return vbool(0);
    case JN_NONE: return none;
    case JN_NAME: return lookup(r, x->s, x->n);
    case JN_LIST: {
        size_t n = 0;
        for (const jj_node *g = x->a; g; g = g->next) n++;
        jv out = vlist(r, n);
        size_t i = 0;
        for (const jj_node *g = x->a; g && !r->failed; g = g->next) out.l->v[i++] = eval(r, g);
        return out;
    }
    case JN_ATTR: {
        jv v = eval(r, x->a);
        if (r->failed) return undef;
        if (v.t == V_UNDEF) return fail(r, x->line, "'%.*s' of an undefined value", (int)x->n, x->s);
        return index_of(r, v, vstr(x->s, x->n), x->line);
    }
    case JN_INDEX: {
        jv v = eval(r, x->a), k = eval(r, x->b);
        return r->failed ? undef : index_of(r, v, k, x->line);
    }
    case JN_SLICE: return slice(r, x);
    case JN_CALL: return call(r, x);
    case JN_FILTER: return filter(r, x);
    case JN_TEST: { int t = test(r, x); return vbool(t); }
    case JN_NOTTEST: { int t = test(r, x); return vbool(!t); }
    case JN_NOT: return vbool(!truthy(eval(r, x->a)));
    case JN_NEG: {
        jv v = eval(r, x->a);
        if (v.t == V_INT && v.i == INT64_MIN) return overflow(r, x->line);
        return v.t == V_INT ? vint(-v.i) : fail(r, x->line, "unary minus of a %s", type_name(v));
    }
    case JN_AND: { jv a = eval(r, x->a); return truthy(a) ? eval(r, x->b) : a; }
    case JN_OR: { jv a = eval(r, x->a); return truthy(a) ? a : eval(r, x->b); }
    case JN_COND: return truthy(eval(r, x->b)) ? eval(r, x->a) : x->c ? eval(r, x->c) : undef;
    case JN_BIN: return binop(r, x);
    default: return fail(r, x->line, "unsupported expression");
    }
}

static void exec_body(rctx *r, const jj_node *x);

static void exec_for(rctx *r, const jj_node *x)
{
    jv it = eval(r, x->a);
    if (r->failed) return;
    jv items;
    if (it.t == V_LIST) items = it;
    else if (it.t == V_DICT) {
        items = vlist(r, it.d->n);
        for (size_t i = 0; i < it.d->n && !r->failed; i++) items.l->v[i] = it.d->k[i];
    } else if (it.t == V_STR) {
        size_t n = u8len(it.s, it.n);
        items = vlist(r, n);
        for (size_t i = 0; i < n && !r->failed; i++) items.l->v[i] = index_of(r, it, vint((int64_t)i), x->line);
    } else if (it.t == V_UNDEF) {
        return;
    } else {
        fail(r, x->line, "cannot loop over a %s", type_name(it));
        return;
    }
    if (r->failed) return;
    if (r->depth >= SCOPES_MAX) { fail(r, x->line, "loops nest too deeply"); return; }
    size_t n = items.l->n;
    /* one loop object, advanced, as jinja2's (a `loop` kept in a namespace reads the last
     * iteration after it), and one scope storage, emptied each iteration (a variable set in
     * a body is gone in the next, as in jinja2) */
    jmap *scope = map_new(r), *loop = map_new(r);
    if (!scope || !loop) return;
    for (size_t i = 0; i < n && !r->failed; i++) {
        /* nested loops multiply: a budget keeps a render finite (real templates loop once
         * over the messages) */
        if (++r->iterations > LOOP_BUDGET) {
            fail(r, x->line, "the template runs more than %d loop iterations", LOOP_BUDGET);
            return;
        }
        scope->n = 0;
        static const char *const k[] = {"index", "index0", "first", "last", "length", "revindex", "revindex0"};
        jv v[] = {vint((int64_t)i + 1), vint((int64_t)i), vbool(i == 0), vbool(i + 1 == n), vint((int64_t)n),
                  vint((int64_t)(n - i)), vint((int64_t)(n - i - 1))};
        for (int j = 0; j < 7; j++) map_set(r, loop, vstr(k[j], strlen(k[j])), v[j]);
        map_set(r, scope, vstr("loop", 4), vdict(loop));
        map_set(r, scope, vstr(x->s, x->n), items.l->v[i]);
        r->scope[r->depth++] = scope;
        exec_body(r, x->b);
        r->depth--;
    }
}

static void exec_body(rctx *r, const jj_node *x)
{
    for (; x && !r->failed; x = x->next) {
        switch (x->k) {
        case JN_TEXT: srv_buf_add(&r->out, x->s, x->n); break;
        case JN_OUT: {
            jv v = eval(r, x->a);
            if (!r->failed && to_text(v, &r->out) < 0) fail(r, x->line, "cannot print a %s", type_name(v));
            break;
        }
        case JN_IF: exec_body(r, truthy(eval(r, x->a)) ? x->b : x->c); break;
        case JN_FOR: exec_for(r, x); break;
        case JN_SET: {
            jv v = eval(r, x->a);
            map_set(r, r->scope[r->depth - 1], vstr(x->s, x->n), v);
            break;
        }
        case JN_SETATTR: {
            jv ns = lookup(r, x->s, x->n), v = eval(r, x->a);
            if (r->failed) break;
            if (ns.t != V_DICT || !ns.d->ns) { fail(r, x->line, "'%.*s' is not a namespace", (int)x->n, x->s); break; }
            map_set(r, ns.d, vstr(x->b->s, x->b->n), v);
            break;
        }
        default: fail(r, x->line, "unsupported statement"); break;
        }
        if (r->out.oom) fail(r, x->line, "out of memory");
        if (r->out.n > OUT_MAX) fail(r, x->line, "the rendered text exceeds 16 MiB");
    }
}

char *srv_tmpl_render(const srv_tmpl *t, const cJSON *vars, char *err, size_t errn)
{
    rctx r = {0};
    r.err = err;
    r.errn = errn;
    jmap *globals = map_new(&r), *top = map_new(&r);
    for (const cJSON *x = vars ? vars->child : NULL; globals && x && !r.failed; x = x->next)
        map_set(&r, globals, vstr(x->string, strlen(x->string)), from_json(&r, x));
    if (globals && top) {
        r.scope[r.depth++] = globals;
        r.scope[r.depth++] = top;
        exec_body(&r, t->root);
    }
    char *out = NULL;
    if (!r.failed) {
        out = malloc(r.out.n + 1);
        if (out) { if (r.out.n) memcpy(out, r.out.p, r.out.n); out[r.out.n] = 0; }
        else snprintf(err, errn, "out of memory");
    }
    srv_buf_free(&r.out);
    jj_arena_free(r.ar);
    return out;
}
