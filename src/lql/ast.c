/*
 * ast.c — the AST builders grammar/lql.y calls, the per-statement arena, and the names
 * of kinds, clauses and operators. Builders validate what the grammar cannot (integer
 * ranges, `lo <= hi`, repeated clauses, INSERT's column list, dtype names) and record the
 * first error in the parse context with the culprit's position.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "parse_int.h"

/* ---------------------------------------------------------------- errors */

int lql_errf(lql_err *e, int code, const lql_span *at, const char *fmt, ...)
{
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    e->line = at ? at->line : 0;
    e->col = at ? at->col : 0;
    e->len = at ? at->len : 0;
    return -1;
}

/* A token's span; len counts characters, as columns do. */
static lql_span span_of(const lql_token *t)
{
    lql_span s = {0, 0, 0};
    if (!t) return s;
    s.line = t->line;
    s.col = t->col;
    for (int i = 0; t->z && i < t->n; i++) s.len += ((unsigned char)t->z[i] & 0xC0) != 0x80;
    if (!t->z) s.len = t->n;
    return s;
}

void lql_p_error(lql_pctx *p, const lql_token *at, const char *fmt, ...)
{
    if (p->failed) return;
    p->failed = 1;
    if (!p->err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->msg, sizeof p->err->msg, fmt, ap);
    va_end(ap);
    lql_span s = span_of(at);
    p->err->code = LQL_ESYNTAX;
    p->err->line = s.line;
    p->err->col = s.col;
    p->err->len = s.len;
}

/* lql_p_error at a span rather than a token. */
static void error_at(lql_pctx *p, const lql_span *at, const char *msg, ...)
    __attribute__((format(printf, 3, 4)));
static void error_at(lql_pctx *p, const lql_span *at, const char *fmt, ...)
{
    if (p->failed) return;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    lql_token t = {NULL, at->len, at->line, at->col};
    lql_p_error(p, &t, "%s", buf);
}

/* ---------------------------------------------------------------- allocation */

static int fail_countdown = -1;     /* -1: never fail */

void lql_fail_after(int n) { fail_countdown = n; }

void *lql_malloc(size_t n)
{
    if (fail_countdown == 0) return NULL;
    if (fail_countdown > 0) fail_countdown--;
    return malloc(n);
}

/* ---------------------------------------------------------------- arena */

typedef struct chunk { struct chunk *next; size_t used, cap; } chunk;
struct lql_arena { chunk *head; };
#define CHUNK_MIN 4096
#define ALIGN 16

lql_arena *lql_arena_new(void)
{
    lql_arena *a = lql_malloc(sizeof *a);
    if (a) a->head = NULL;
    return a;
}

void lql_arena_free(lql_arena *a)
{
    if (!a) return;
    for (chunk *c = a->head, *nx; c; c = nx) { nx = c->next; free(c); }
    free(a);
}

void *lql_arena_alloc(lql_arena *a, size_t n)
{
    if (!a || n > SIZE_MAX / 2) return NULL;
    n = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    size_t hdr = (sizeof(chunk) + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
        c = lql_malloc(hdr + cap);
        if (!c) return NULL;
        c->cap = cap; c->used = 0; c->next = a->head;
        a->head = c;
    }
    char *mem = (char *)c + hdr + c->used;
    c->used += n;
    memset(mem, 0, n);
    return mem;
}

char *lql_arena_strndup(lql_arena *a, const char *z, size_t n)
{
    char *s = lql_arena_alloc(a, n + 1);
    if (s) { memcpy(s, z, n); s[n] = 0; }
    return s;
}

/* ---------------------------------------------------------------- names */

static const char *const kind_names[] = {
#define X(kind, name) name,
    LQL_STMTS(X)
#undef X
};
static const char *const clause_texts[] = {
#define X(kind, text) text,
    LQL_CLAUSES(X)
#undef X
};
static const char *const op_texts[] = {
#define X(name, text) text,
    LQL_CMPOPS(X)
#undef X
};

const char *lql_kind_name(lql_kind k) { return (unsigned)k < LQL_S_COUNT ? kind_names[k] : "?"; }
const char *lql_clause_text(lql_clause_kind c) { return (unsigned)c < LQL_C_COUNT ? clause_texts[c] : "?"; }
const char *lql_cmpop_text(lql_cmpop op) { return (unsigned)op < LQL_OP_COUNT ? op_texts[op] : "?"; }

/* ---------------------------------------------------------------- literals */

static void *alloc(lql_pctx *p, size_t n)
{
    void *m = lql_arena_alloc(p->arena, n);
    if (!m && !p->failed) {
        lql_p_error(p, NULL, "out of memory");
        if (p->err) p->err->code = LQL_ENOMEM;
    }
    return m;
}

/* A STRING token's value: quotes dropped, escapes \\ \" \' \n \t \r resolved, any
 * other escaped character kept as itself; `\0` is refused (a NUL would cut the string
 * short for everything downstream). */
static char *unquote(lql_pctx *p, const lql_token *t)
{
    char *s = alloc(p, (size_t)t->n + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (int i = 1; i < t->n - 1; i++) {
        char c = t->z[i];
        if (c == '\\' && i + 1 < t->n - 1) {
            c = t->z[++i];
            if (c == '0') {
                lql_token at = {t->z + i - 1, 2, t->line, 0};
                at.col = t->col;
                for (int j = 0; j < i - 1; j++) {
                    if (t->z[j] == '\n') { at.line++; at.col = 1; }
                    else at.col += ((unsigned char)t->z[j] & 0xC0) != 0x80;
                }
                lql_p_error(p, &at, "\\0 in a string: LQL strings cannot hold a NUL character");
                return NULL;
            }
            switch (c) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            default: break;
            }
        }
        s[k++] = c;
    }
    s[k] = 0;
    return s;
}

/* A name token lower-cased (field names, dtype names). */
static char *lower(lql_pctx *p, const lql_token *t)
{
    char *s = alloc(p, (size_t)t->n + 1);
    if (!s) return NULL;
    for (int i = 0; i < t->n; i++) s[i] = (char)tolower((unsigned char)t->z[i]);
    s[t->n] = 0;
    return s;
}

/* Text of a token for messages (at most 40 bytes). */
static const char *tok_text(const lql_token *t, char *buf, size_t n)
{
    int len = t->n < 40 ? t->n : 40;
    snprintf(buf, n, "%.*s%s", len, t->z, t->n > 40 ? "…" : "");
    return buf;
}

static int int_of(lql_pctx *p, const lql_token *t, int neg, int64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < t->n; i++) {
        unsigned d = (unsigned)(t->z[i] - '0');
        if (v > (UINT64_MAX - d) / 10) goto range;
        v = v * 10 + d;
    }
    if (v > (uint64_t)INT64_MAX + (neg ? 1u : 0u)) goto range;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
range:;
    char buf[64];
    lql_p_error(p, t, "integer out of range: %s", tok_text(t, buf, sizeof buf));
    return -1;
}

/* A number token's value, read whole (a long literal must not be cut short); one too
 * large for a double (1e309) is refused, not made infinite, and so is a nonzero one too
 * small (1e-400), not made 0: a later check would report 0, a value never written. */
static int float_of(lql_pctx *p, const lql_token *t, double *out)
{
    char *buf = alloc(p, (size_t)t->n + 1);
    if (!buf) return -1;
    memcpy(buf, t->z, (size_t)t->n);
    buf[t->n] = 0;
    *out = strtod(buf, NULL);
    size_t mantissa = strcspn(buf, "eE");
    if (isinf(*out) || (*out == 0 && strcspn(buf, "123456789") < mantissa)) {
        char b[64];
        lql_p_error(p, t, "number out of range: %s", tok_text(t, b, sizeof b));
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- clauses */

static lql_clause *clause(lql_pctx *p, lql_clause_kind k, const lql_token *kw)
{
    if (p->failed) return NULL;
    lql_clause *c = alloc(p, sizeof *c);
    if (!c) return NULL;
    c->kind = k;
    c->at = span_of(kw);
    return c;
}

lql_clause *lql_b_flag(lql_pctx *p, lql_clause_kind k, const lql_token *kw)
{
    return clause(p, k, kw);
}

lql_clause *lql_b_int(lql_pctx *p, lql_clause_kind k, const lql_token *kw, const lql_token *num)
{
    lql_clause *c = clause(p, k, kw);
    if (c && int_of(p, num, 0, &c->i) < 0) return NULL;
    if (c && k != LQL_C_SEED && c->i > INT_MAX) {
        char buf[64];
        lql_p_error(p, num, "%s value too large: %s", lql_clause_text(k), tok_text(num, buf, sizeof buf));
        return NULL;
    }
    return c;
}

lql_clause *lql_b_num(lql_pctx *p, lql_clause_kind k, const lql_token *kw, const lql_token *num)
{
    lql_clause *c = clause(p, k, kw);
    if (c && float_of(p, num, &c->f) < 0) return NULL;
    return c;
}

lql_clause *lql_b_str(lql_pctx *p, lql_clause_kind k, const lql_token *kw, const lql_token *str)
{
    lql_clause *c = clause(p, k, kw);
    if (c) { c->s = unquote(p, str); c->s_at = span_of(str); }
    return c && c->s ? c : NULL;
}

lql_clause *lql_b_enum(lql_pctx *p, lql_clause_kind k, const lql_token *kw, int value)
{
    lql_clause *c = clause(p, k, kw);
    if (c) c->e = value;
    return c;
}

lql_clause *lql_b_layers(lql_pctx *p, const lql_token *kw, lql_range *r)
{
    lql_clause *c = r ? clause(p, LQL_C_LAYERS, kw) : NULL;
    if (c) {
        c->range = *r;
        if (!kw) c->at = r->at;     /* SHOW LAYERS 0-3: the range is the clause */
    }
    return c;
}

lql_clause *lql_b_where(lql_pctx *p, const lql_token *kw, lql_cond *conds)
{
    lql_clause *c = conds ? clause(p, LQL_C_WHERE, kw) : NULL;
    if (c) c->conds = conds;
    return c;
}

lql_clause *lql_b_order(lql_pctx *p, const lql_token *kw, const lql_token *field, int desc)
{
    lql_clause *c = clause(p, LQL_C_ORDER, kw);
    if (c) { c->s = lower(p, field); c->s_at = span_of(field); c->e = desc; }
    return c && c->s ? c : NULL;
}

lql_clause *lql_b_nearest(lql_pctx *p, const lql_token *kw, const lql_token *str,
                          const lql_token *layer)
{
    lql_clause *c = clause(p, LQL_C_NEAREST, kw);
    if (!c) return NULL;
    c->s = unquote(p, str);
    c->s_at = span_of(str);
    if (!c->s || int_of(p, layer, 0, &c->i) < 0) return NULL;
    return c;
}

/* The dtypes EXTRACT can write (LQL.md); anything else is a parse error naming them. */
static const char *const extract_dtypes[] = {"f32", "f16", "bf16", "q8_0", "q4_k", "q6_k"};

lql_clause *lql_b_dtype(lql_pctx *p, const lql_token *kw, const lql_token *name)
{
    lql_clause *c = clause(p, LQL_C_DTYPE, kw);
    if (!c) return NULL;
    c->s = lower(p, name);
    c->s_at = span_of(name);
    if (!c->s) return NULL;
    for (size_t i = 0; i < sizeof extract_dtypes / sizeof extract_dtypes[0]; i++)
        if (strcmp(c->s, extract_dtypes[i]) == 0) return c;
    char buf[64];
    lql_p_error(p, name, "unknown dtype: %s (expected f32, f16, bf16, q8_0, q4_k or q6_k)",
                tok_text(name, buf, sizeof buf));
    return NULL;
}

/* ---------------------------------------------------------------- ranges, values */

lql_range *lql_b_range(lql_pctx *p, const lql_token *lo, const lql_token *hi)
{
    if (p->failed) return NULL;
    int64_t a, b;
    if (int_of(p, lo, 0, &a) < 0 || int_of(p, hi, 0, &b) < 0) return NULL;
    if (a > INT_MAX || b > INT_MAX) {
        lql_p_error(p, a > INT_MAX ? lo : hi, "layer out of range: %.*s",
                    (a > INT_MAX ? lo : hi)->n, (a > INT_MAX ? lo : hi)->z);
        return NULL;
    }
    if (a > b) {
        lql_token whole = *lo;
        whole.n = (int)(hi->z + hi->n - lo->z);
        lql_p_error(p, &whole, "invalid range %lld-%lld: start is after end",
                    (long long)a, (long long)b);
        return NULL;
    }
    lql_range *r = alloc(p, sizeof *r);
    if (r) {
        lql_token whole = *lo;
        whole.n = (int)(hi->z + hi->n - lo->z);
        r->lo = (int)a; r->hi = (int)b; r->at = span_of(&whole);
    }
    return r;
}

lql_range *lql_b_range_all(lql_pctx *p, const lql_token *all)
{
    if (p->failed) return NULL;
    lql_range *r = alloc(p, sizeof *r);
    if (r) { r->all = 1; r->at = span_of(all); }
    return r;
}

lql_value *lql_b_value(lql_pctx *p, const lql_token *minus, const lql_token *lit)
{
    if (p->failed) return NULL;
    lql_value *v = alloc(p, sizeof *v);
    if (!v) return NULL;
    v->at = span_of(minus ? minus : lit);
    if (minus) v->at.len = (int)(lit->z + lit->n - minus->z);
    if (lit->z[0] == '"' || lit->z[0] == '\'') {
        v->kind = LQL_V_STR;
        v->s = unquote(p, lit);
        return v->s ? v : NULL;
    }
    /* an INT token is digits only; a FLOAT has a point or an exponent */
    if (strspn(lit->z, "0123456789") < (size_t)lit->n) {
        v->kind = LQL_V_FLOAT;
        if (float_of(p, lit, &v->f) < 0) return NULL;
        v->f *= minus ? -1 : 1;
    } else {
        v->kind = LQL_V_INT;
        if (int_of(p, lit, minus != NULL, &v->i) < 0) return NULL;
        v->f = (double)v->i;
    }
    return v;
}

/* Build an IN list: items are appended one by one (item), then the list is closed with
 * lp = the opening parenthesis, which gives the list its position. */
lql_value *lql_b_list(lql_pctx *p, lql_value *list, lql_value *item, const lql_token *lp)
{
    if (p->failed) return NULL;
    if (!list) {
        list = alloc(p, sizeof *list);
        if (!list) return NULL;
        list->kind = LQL_V_LIST;
    }
    if (item) {
        if ((list->n & (list->n - 1)) == 0) {      /* grow at powers of two */
            size_t cap = list->n ? (size_t)list->n * 2 : 4;
            lql_value *items = alloc(p, cap * sizeof *items);
            if (!items) return NULL;
            if (list->n) memcpy(items, list->items, (size_t)list->n * sizeof *items);
            list->items = items;
        }
        list->items[list->n++] = *item;
    }
    if (lp) {
        list->at = span_of(lp);
        if (list->n) {
            const lql_value *last = &list->items[list->n - 1];
            if (last->at.line == lp->line) list->at.len = last->at.col + last->at.len - lp->col + 1;
        }
    }
    return list;
}

lql_cond *lql_b_cond(lql_pctx *p, const lql_token *field, lql_cmpop op, lql_value *v)
{
    if (p->failed || !v) return NULL;
    lql_cond *c = alloc(p, sizeof *c);
    if (!c) return NULL;
    c->field = lower(p, field);
    c->field_at = span_of(field);
    c->op = op;
    c->val = *v;
    if (op == LQL_OP_LIKE && v->kind != LQL_V_STR) {
        error_at(p, &v->at, "LIKE needs a string pattern");
        return NULL;
    }
    return c->field ? c : NULL;
}

lql_cond *lql_b_and(lql_pctx *p, lql_cond *list, lql_cond *c)
{
    if (p->failed || !list || !c) return NULL;
    (list->tail ? list->tail : list)->next = c;
    list->tail = c;
    return list;
}

lql_assign *lql_b_assign(lql_pctx *p, lql_assign *list, const lql_token *field, lql_value *v)
{
    if (p->failed || !v) return NULL;
    lql_assign *a = alloc(p, sizeof *a);
    if (!a) return NULL;
    a->field = lower(p, field);
    a->field_at = span_of(field);
    a->val = *v;
    if (!a->field) return NULL;
    if (!list) return a;
    lql_assign *t = list;
    for (;;) {
        if (strcmp(t->field, a->field) == 0) {
            lql_p_error(p, field, "field set twice: %s", a->field);
            return NULL;
        }
        if (!t->next) break;
        t = t->next;
    }
    t->next = a;
    return list;
}

/* Names lists hold lower-cased names (ID tokens) or unquoted strings (STRING tokens). */
lql_names *lql_b_name(lql_pctx *p, lql_names *list, const lql_token *tok)
{
    if (p->failed) return NULL;
    if (!list) {
        list = alloc(p, sizeof *list);
        if (!list) return NULL;
    }
    if (list->n == list->cap) {
        int cap = list->cap ? list->cap * 2 : 4;
        const char **z = alloc(p, (size_t)cap * sizeof *z);
        lql_span *at = alloc(p, (size_t)cap * sizeof *at);
        if (!z || !at) return NULL;
        if (list->n) {
            memcpy(z, list->z, (size_t)list->n * sizeof *z);
            memcpy(at, list->at, (size_t)list->n * sizeof *at);
        }
        list->z = z; list->at = at; list->cap = cap;
    }
    const char *s = (tok->z[0] == '"' || tok->z[0] == '\'') ? unquote(p, tok) : lower(p, tok);
    if (!s) return NULL;
    list->z[list->n] = s;
    list->at[list->n] = span_of(tok);
    list->n++;
    return list;
}

/* ---------------------------------------------------------------- statements */

lql_stmt *lql_b_opts(lql_pctx *p)
{
    if (p->failed) return NULL;
    return alloc(p, sizeof(lql_stmt));
}

const char *lql_band_text(lql_band band)
{
    static const char *const text[] = {"", "ALL LAYERS", "SYNTAX", "KNOWLEDGE", "OUTPUT"};
    return text[band];
}

/* Two clauses that set the same thing (a band, DESCRIBE's detail) are refused naming both
 * as written, whichever words they are; one given twice is a duplicate. */
static int clash(lql_pctx *p, const lql_stmt *st, const lql_clause *c)
{
    const uint64_t detail = (1ull << LQL_C_BRIEF) | (1ull << LQL_C_VERBOSE) | (1ull << LQL_C_RAW);
    const uint64_t other = st->has & detail & ~(1ull << c->kind);
    if (c->kind == LQL_C_BAND && lql_has(st, LQL_C_BAND)) {
        if ((int)st->band == c->e)
            error_at(p, &c->at, "duplicate clause: %s", lql_band_text((lql_band)c->e));
        else
            error_at(p, &c->at, "%s and %s both name a band; give one", lql_band_text(st->band),
                     lql_band_text((lql_band)c->e));
        return -1;
    }
    if (((detail >> c->kind) & 1) && other) {
        error_at(p, &c->at, "%s and %s both set the detail; give one",
                 lql_clause_text((lql_clause_kind)__builtin_ctzll(other)),
                 lql_clause_text(c->kind));
        return -1;
    }
    if (lql_has(st, c->kind)) {
        error_at(p, &c->at, "duplicate clause: %s", lql_clause_text(c->kind));
        return -1;
    }
    return 0;
}

lql_stmt *lql_b_add(lql_pctx *p, lql_stmt *st, lql_clause *c)
{
    if (p->failed || !st || !c || clash(p, st, c)) return NULL;
    st->has |= (uint64_t)1 << c->kind;
    st->clause_at[c->kind] = c->at;
    switch (c->kind) {
    case LQL_C_TOP: st->top = c->i; break;
    case LQL_C_LAYERS: st->layers = c->range; break;
    case LQL_C_MODE: st->mode = (lql_mode)c->e; break;
    case LQL_C_BAND: st->band = (lql_band)c->e; break;
    case LQL_C_AT_LAYER: case LQL_C_LAYER: st->layer = c->i; break;
    case LQL_C_NEAREST: st->nearest = c->s; st->layer = c->i; break;
    case LQL_C_WHERE: st->where = c->conds; break;
    case LQL_C_ORDER: st->order_field = c->s; st->order_at = c->s_at; st->order_desc = c->e; break;
    case LQL_C_LIMIT: st->limit = c->i; break;
    case LQL_C_GENERATE: st->generate = c->i; break;
    case LQL_C_TEMPERATURE: st->temperature = c->f; break;
    case LQL_C_TOP_P: st->top_p = c->f; break;
    case LQL_C_SEED: st->seed = (uint64_t)c->i; break;
    case LQL_C_FOR: st->for_token = c->s; st->for_id = (int)c->i; break;
    case LQL_C_POSITIONS: st->positions = (lql_positions)c->e; break;
    case LQL_C_SAVE: st->save_path = c->s; break;
    case LQL_C_FROM: st->from_path = c->s; break;
    case LQL_C_CONFIDENCE: st->confidence = c->f; break;
    case LQL_C_ALPHA: st->alpha = c->f; break;
    case LQL_C_RELATION: st->relation = c->s; break;
    case LQL_C_INTO_PATCH: case LQL_C_INTO_VINDEX: st->into = c->s; break;
    case LQL_C_ON_CONFLICT: st->conflict = (lql_conflict)c->e; break;
    case LQL_C_FORMAT: st->format = (lql_format)c->e; break;
    case LQL_C_WITH: st->level = (lql_level)c->e; break;
    case LQL_C_DTYPE: st->dtype = c->s; break;
    case LQL_C_JOURNAL: st->journal = c->s; break;
    case LQL_C_PROFILE: st->profile = c->s; break;
    default: break;             /* flags: the bit in `has` is the value */
    }
    return st;
}

/* A STRING operand unquoted, or a name operand lower-cased. */
static const char *operand(lql_pctx *p, const lql_token *t, lql_span *at)
{
    *at = span_of(t);
    return (t->z[0] == '"' || t->z[0] == '\'') ? unquote(p, t) : lower(p, t);
}

lql_stmt *lql_b_stmt(lql_pctx *p, lql_stmt *st, lql_kind k, const lql_token *kw,
                     const lql_token *arg, const lql_token *arg2)
{
    if (p->failed || !st) return NULL;
    st->kind = k;
    st->at = span_of(kw);
    st->src = kw->z;             /* the driver sets nsrc once the statement's end is known */
    if (arg && !(st->arg = operand(p, arg, &st->arg_at))) return NULL;
    if (arg2 && !(st->arg2 = operand(p, arg2, &st->arg2_at))) return NULL;
    if (k == LQL_S_TRACE && !arg && !lql_has(st, LQL_C_FROM)) {
        lql_p_error(p, kw, "TRACE needs a prompt string or FROM \"file\"");
        return NULL;
    }
    return st;
}

lql_stmt *lql_b_stmt_n(lql_pctx *p, lql_stmt *st, lql_kind k, const lql_token *kw,
                       const lql_token *num)
{
    if (!lql_b_stmt(p, st, k, kw, NULL, NULL)) return NULL;
    if (int_of(p, num, 0, &st->n) < 0) return NULL;
    st->n_at = span_of(num);
    if (k == LQL_S_SHOW_FEATURES) st->layer = st->n;
    return st;
}

lql_stmt *lql_b_select(lql_pctx *p, lql_stmt *st, const lql_token *kw, lql_names *fields,
                       lql_source from)
{
    if (!lql_b_stmt(p, st, LQL_S_SELECT, kw, NULL, NULL)) return NULL;
    st->from = from;
    if (fields) {
        st->fields = fields->z;
        st->fields_at = fields->at;
        st->nfields = fields->n;
    }
    return st;
}

lql_stmt *lql_b_insert(lql_pctx *p, lql_stmt *st, const lql_token *kw, lql_names *cols,
                       lql_names *vals)
{
    if (!lql_b_stmt(p, st, LQL_S_INSERT, kw, NULL, NULL) || !cols || !vals) return NULL;
    static const char *const want[3] = {"entity", "relation", "target"};
    const char **slot[3] = {&st->entity, &st->relation_v, &st->target};
    lql_span *slot_at[3] = {&st->entity_at, &st->relation_at, &st->target_at};
    for (int i = 0; i < cols->n; i++) {
        int j = 0;
        while (j < 3 && strcmp(cols->z[i], want[j]) != 0) j++;
        lql_token t = {cols->z[i], (int)strlen(cols->z[i]), cols->at[i].line, cols->at[i].col};
        t.n = cols->at[i].len;
        if (j == 3) {
            lql_p_error(p, &t, "unknown column: %s (INSERT INTO EDGES takes entity, relation, target)",
                        cols->z[i]);
            return NULL;
        }
        if (*slot[j]) {
            lql_p_error(p, &t, "column given twice: %s", cols->z[i]);
            return NULL;
        }
        if (i >= vals->n) break;
        *slot[j] = vals->z[i];
        *slot_at[j] = vals->at[i];
    }
    if (cols->n != 3 || vals->n != 3) {
        /* at the list that is off: its first extra item, or its last when one is missing */
        const lql_names *l = cols->n != 3 ? cols : vals;
        error_at(p, &l->at[l->n > 3 ? 3 : l->n - 1], "INSERT INTO EDGES needs 3 columns "
                 "(entity, relation, target) and 3 values, got %d and %d", cols->n, vals->n);
        return NULL;
    }
    return st;
}

lql_stmt *lql_b_update(lql_pctx *p, lql_stmt *st, const lql_token *kw, lql_assign *sets)
{
    if (!sets || !lql_b_stmt(p, st, LQL_S_UPDATE, kw, NULL, NULL)) return NULL;
    st->sets = sets;
    return st;
}

lql_stmt *lql_b_pipe(lql_pctx *p, lql_stmt *a, lql_stmt *b)
{
    if (p->failed || !a || !b) return NULL;
    (a->tail ? a->tail : a)->next = b;
    a->tail = b;
    return a;
}

void lql_b_done(lql_pctx *p, lql_stmt *chain)
{
    if (!p->failed) p->result = chain;
}
