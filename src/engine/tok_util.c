/*
 * tok_util.c — the tokenizer's plumbing: growable buffers and lists, a string arena, the
 * two open-addressing hash maps (string → id for vocabularies, u64 → pair for merges and
 * trie edges), UTF-8 decoding with U+FFFD repair, Unicode character classes, the pattern
 * finder shared by Split / Replace, and the JSON accessors used while loading.
 */
#include "tok_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---------------------------------------------------------------- buffers */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

int tok_buf_put(tok_buf *b, const void *s, size_t n)
{
    if (grow((void **)&b->p, &b->cap, b->n + n + 1, 1) < 0)
        return -1;
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

int tok_buf_putc(tok_buf *b, char c)
{
    return tok_buf_put(b, &c, 1);
}

void tok_buf_free(tok_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

int tok_pieces_add(tok_pieces *l, const char *s, size_t n)
{
    if (grow((void **)&l->end, &l->cap, l->n + 1, sizeof *l->end) < 0 ||
        tok_buf_put(&l->text, s, n) < 0)
        return -1;
    l->end[l->n++] = l->text.n;
    return 0;
}

void tok_pieces_clear(tok_pieces *l)
{
    l->n = 0;
    l->text.n = 0;
}

void tok_pieces_free(tok_pieces *l)
{
    tok_buf_free(&l->text);
    free(l->end);
    memset(l, 0, sizeof *l);
}

const char *tok_piece(const tok_pieces *l, size_t i, size_t *n)
{
    size_t s = i ? l->end[i - 1] : 0;
    *n = l->end[i] - s;
    return l->text.p + s;
}

int tok_ids_add(tok_ids *l, int32_t id)
{
    if (grow((void **)&l->p, &l->cap, l->n + 1, sizeof *l->p) < 0)
        return -1;
    l->p[l->n++] = id;
    return 0;
}

int tok_spans_add(tok_spans *l, size_t s, size_t e, int m)
{
    if (grow((void **)&l->p, &l->cap, l->n + 1, sizeof *l->p) < 0)
        return -1;
    l->p[l->n++] = (tok_span){s, e, m};
    return 0;
}

/* ---------------------------------------------------------------- arena */

struct tok_block {
    tok_block *next;
    size_t used, cap;
    char data[];
};

char *tok_arena_dup(tok_arena *a, const char *s, size_t n)
{
    tok_block *b = a->head;
    if (!b || b->cap - b->used < n + 1) {
        size_t cap = n + 1 > (1u << 20) ? n + 1 : (1u << 20);
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    char *p = b->data + b->used;
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    b->used += n + 1;
    return p;
}

void tok_arena_free(tok_arena *a)
{
    while (a->head) {
        tok_block *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

/* ---------------------------------------------------------------- hash maps */

uint32_t tok_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;   /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static uint64_t hash_u64(uint64_t k)
{
    k ^= k >> 33;   /* murmur3 finaliser */
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* Linear probing stays fast below 70% load; tables are powers of two. */
static int crowded(size_t n, size_t cap)
{
    return n * 10 > cap * 7;
}

static size_t table_size(size_t expected)
{
    size_t c = 64;
    while (crowded(expected + 1, c))
        c *= 2;
    return c;
}

int tok_smap_init(tok_smap *m, size_t expected)
{
    size_t c = table_size(expected);
    m->e = calloc(c, sizeof *m->e);
    m->mask = c - 1;
    m->n = 0;
    return m->e ? 0 : -1;
}

static int smap_rehash(tok_smap *m)
{
    tok_smap big;
    if (tok_smap_init(&big, (m->mask + 1)) < 0)
        return -1;
    for (size_t i = 0; i <= m->mask; i++) {
        tok_smap_e *e = &m->e[i];
        if (!e->k)
            continue;
        size_t j = e->h & big.mask;
        while (big.e[j].k)
            j = (j + 1) & big.mask;
        big.e[j] = *e;
        big.n++;
    }
    free(m->e);
    *m = big;
    return 0;
}

int tok_smap_put(tok_smap *m, const char *k, size_t n, int32_t v)
{
    if (crowded(m->n + 1, m->mask + 1) && smap_rehash(m) < 0)
        return -1;
    uint32_t h = tok_hash(k, n);
    size_t j = h & m->mask;
    for (; m->e[j].k; j = (j + 1) & m->mask) {
        tok_smap_e *e = &m->e[j];
        if (e->h == h && e->n == n && memcmp(e->k, k, n) == 0) {
            e->v = v;
            return 0;
        }
    }
    m->e[j] = (tok_smap_e){k, (uint32_t)n, h, v};
    m->n++;
    return 0;
}

int32_t tok_smap_get_h(const tok_smap *m, const char *k, size_t n, uint32_t h)
{
    if (!m->e)
        return -1;
    for (size_t j = h & m->mask; m->e[j].k; j = (j + 1) & m->mask) {
        const tok_smap_e *e = &m->e[j];
        if (e->h == h && e->n == n && memcmp(e->k, k, n) == 0)
            return e->v;
    }
    return -1;
}

int32_t tok_smap_get(const tok_smap *m, const char *k, size_t n)
{
    return tok_smap_get_h(m, k, n, tok_hash(k, n));
}

void tok_smap_prefetch(const tok_smap *m, uint32_t h)
{
    __builtin_prefetch(&m->e[h & m->mask]);
}

void tok_smap_free(tok_smap *m)
{
    free(m->e);
    memset(m, 0, sizeof *m);
}

#define PMAP_EMPTY UINT64_MAX

int tok_pmap_init(tok_pmap *m, size_t expected)
{
    size_t c = table_size(expected);
    m->e = malloc(c * sizeof *m->e);
    if (!m->e)
        return -1;
    for (size_t i = 0; i < c; i++)
        m->e[i].k = PMAP_EMPTY;
    m->mask = c - 1;
    m->n = 0;
    return 0;
}

int tok_pmap_put(tok_pmap *m, uint64_t k, uint32_t a, int32_t b)
{
    if (crowded(m->n + 1, m->mask + 1)) {
        tok_pmap big;
        if (tok_pmap_init(&big, m->mask + 1) < 0)
            return -1;
        for (size_t i = 0; i <= m->mask; i++)
            if (m->e[i].k != PMAP_EMPTY)
                tok_pmap_put(&big, m->e[i].k, m->e[i].a, m->e[i].b);
        free(m->e);
        *m = big;
    }
    size_t j = hash_u64(k) & m->mask;
    for (; m->e[j].k != PMAP_EMPTY; j = (j + 1) & m->mask)
        if (m->e[j].k == k)
            break;
    if (m->e[j].k == PMAP_EMPTY)
        m->n++;
    m->e[j] = (tok_pmap_e){k, a, b};
    return 0;
}

const tok_pmap_e *tok_pmap_get(const tok_pmap *m, uint64_t k)
{
    if (!m->e)
        return NULL;
    for (size_t j = hash_u64(k) & m->mask; m->e[j].k != PMAP_EMPTY; j = (j + 1) & m->mask)
        if (m->e[j].k == k)
            return &m->e[j];
    return NULL;
}

void tok_pmap_prefetch(const tok_pmap *m, uint64_t k)
{
    __builtin_prefetch(&m->e[hash_u64(k) & m->mask], 1);
}

void tok_pmap_free(tok_pmap *m)
{
    free(m->e);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- UTF-8 */

/* Length of the well-formed prefix of the sequence at s (1..4), and whether it is
 * complete; follows Unicode Table 3-7 so the maximal subpart is what gets replaced. */
static size_t utf8_scan(const uint8_t *s, size_t n, int *ok)
{
    uint8_t c = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    *ok = 0;
    if (c < 0x80) {
        *ok = 1;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 1;
    }
    size_t i = 1;
    for (; i < need && i < n; i++) {
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return i;
    }
    *ok = i == need;
    return i;
}

int tok_utf8_lossy(const char *s, size_t n, tok_buf *out)
{
    size_t i = 0, run = 0;   /* run: start of the pending well-formed bytes */
    while (i < n) {
        int ok;
        size_t k = utf8_scan((const uint8_t *)s + i, n - i, &ok);
        if (!ok) {
            if (tok_buf_put(out, s + run, i - run) < 0 || tok_buf_put(out, "\xEF\xBF\xBD", 3) < 0)
                return -1;
            run = i + k;
        }
        i += k;
    }
    return tok_buf_put(out, s + run, n - run);
}

int tok_utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int ok;
        i += utf8_scan((const uint8_t *)s + i, n - i, &ok);
        if (!ok)
            return 0;
    }
    return 1;
}

size_t tok_utf8_next(const char *s, size_t n, int32_t *cp)
{
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &c);
    if (k <= 0) {   /* cannot happen on repaired text; keep the walk moving */
        *cp = 0xFFFD;
        return 1;
    }
    *cp = c;
    return (size_t)k;
}

size_t tok_utf8_put(int32_t cp, char out[4])
{
    return (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
}

int tok_is_ws(int32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

int tok_is_num(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

/* Rust's regex crate \w (UTS #18), which single_word tests: Alphabetic (letters, Nl, and
 * the circled / squared letters of So), marks, decimal digits, connector punctuation, the
 * joiners. */
int tok_is_word(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ND) ||
           k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC || c == 0x200C || c == 0x200D ||
           (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
           (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
}

int tok_is_punct(int32_t c)
{
    if (c < 0x80)
        return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
               (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* ---------------------------------------------------------------- patterns */

/* Code points that are letters (\p{L}) / numbers (\p{N}) in Unicode 17, the tables of the
 * regexes in @huggingface/tokenizers (node 20's ICU), but not in PCRE2 10.42's Unicode 14:
 * the Unicode 15-17 additions (CJK extensions H-J, Kawi, Garay, ...). Redundant, so
 * harmless, with a newer PCRE2. */
static const char new_letters[] =
    "\\x{88F}\\x{C5C}\\x{CDC}\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CF}\\x{A7D2}\\x{A7D4}"
    "\\x{A7DA}-\\x{A7DC}\\x{A7F1}\\x{105C0}-\\x{105F3}\\x{10940}-\\x{10959}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC7}\\x{1123F}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}"
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11DB0}-\\x{11DDB}\\x{11F02}\\x{11F04}-\\x{11F10}"
    "\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}"
    "\\x{16100}-\\x{1611D}\\x{16D40}-\\x{16D6C}\\x{16EA0}-\\x{16EB8}\\x{16EBB}-\\x{16ED3}"
    "\\x{16FF2}-\\x{16FF3}\\x{187F8}-\\x{187FF}\\x{18CFF}\\x{18D09}-\\x{18D1E}"
    "\\x{18D80}-\\x{18DF2}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}"
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{1E6C0}-\\x{1E6DE}"
    "\\x{1E6E0}-\\x{1E6E2}\\x{1E6E4}-\\x{1E6E5}\\x{1E6E7}-\\x{1E6ED}\\x{1E6F0}-\\x{1E6F4}"
    "\\x{1E6FE}-\\x{1E6FF}\\x{2B739}-\\x{2B73F}\\x{2CEA2}-\\x{2CEAD}\\x{2EBF0}-\\x{2EE5D}"
    "\\x{31350}-\\x{33479}";
static const char new_numbers[] =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11DE0}-\\x{11DE9}"
    "\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{16FF4}-\\x{16FF6}"
    "\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

static int put_str(tok_buf *b, const char *s)
{
    return tok_buf_put(b, s, strlen(s));
}

/* The length of the POSIX class ("[:alpha:]", "[:^digit:]") at s, or 0. */
static size_t posix_class(const char *s)
{
    if (s[0] != '[' || s[1] != ':')
        return 0;
    size_t k = 2 + (s[2] == '^');
    k += strspn(s + k, "abcdefghijklmnopqrstuvwxyz");
    return s[k] == ':' && s[k + 1] == ']' ? k + 2 : 0;
}

/* The word characters of Oniguruma 6.9.8 (the onig crate's, which Hugging Face's Rust crate
 * runs Split patterns on): Alphabetic, marks, decimal digits, connector punctuation, and,
 * for \w, \W and \b outside a class only (its Latin-1 table), '²' '³' '¹' '¼' '½' '¾'; not
 * the joiners (tok_is_word's Rust regex crate has them). PCRE2 10.42's \w is letters, all
 * numbers and '_'. A class of its own when `open` ("[" or "[^") is given, else the items. */
static int put_word(tok_buf *b, const char *open)
{
    return (open && put_str(b, open)) || put_str(b, "\\p{Alphabetic}") ||
           put_str(b, new_letters) || put_str(b, "\\p{M}\\p{Nd}\\p{Pc}") ||
           (open && (put_str(b, "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}") ||
                     tok_buf_putc(b, ']')));
}

/* \b (or \B when `not`) on the word characters of put_word. */
static int put_boundary(tok_buf *b, int not)
{
    return put_str(b, "(?:(?<=") || put_word(b, "[") || put_str(b, not ? ")(?=" : ")(?!") ||
           put_word(b, "[") || put_str(b, ")|(?<!") || put_word(b, "[") ||
           put_str(b, not ? ")(?!" : ")(?=") || put_word(b, "[") || put_str(b, "))");
}

/* src with \p{L} / \p{N} widened by the code points above (added to the enclosing character
 * class, or made one), \s / \S spelled \p{White_Space} / \P{White_Space} (PCRE2's \s also
 * matches U+180E: its \h list predates Unicode 6.3; Oniguruma's and JS's do not), and \w,
 * \W, \b, \B on Oniguruma's word characters (put_word); \W inside a class stays PCRE2's.
 * 0, or -1 when out of memory. */
static int re_widen(const char *src, tok_buf *out)
{
    int in_class = 0;
    for (const char *s = src; *s; s++) {
        int rc;
        if (*s == '\\' && (s[1] == 's' || s[1] == 'S')) {
            rc = put_str(out, s[1] == 's' ? "\\p{White_Space}" : "\\P{White_Space}");
            s++;
        } else if (*s == '\\' && (s[1] == 'w' || (s[1] == 'W' && !in_class))) {
            rc = put_word(out, in_class ? NULL : s[1] == 'w' ? "[" : "[^");
            s++;
        } else if (*s == '\\' && (s[1] == 'b' || s[1] == 'B') && !in_class) {
            rc = put_boundary(out, s[1] == 'B');
            s++;
        } else if (strncmp(s, "\\p{L}", 5) == 0 || strncmp(s, "\\p{N}", 5) == 0) {
            rc = (!in_class && tok_buf_putc(out, '[')) || tok_buf_put(out, s, 5) ||
                 put_str(out, s[3] == 'L' ? new_letters : new_numbers) ||
                 (!in_class && tok_buf_putc(out, ']'));
            s += 4;
        } else if (strncmp(s, "\\Q", 2) == 0) {
            /* quoted up to \E: copied as it is */
            const char *e = strstr(s, "\\E");
            size_t k = e ? (size_t)(e - s) + 2 : strlen(s);
            rc = tok_buf_put(out, s, k);
            s += k - 1;
        } else if (*s == '\\' && s[1]) {
            rc = tok_buf_put(out, s, 2);
            s++;
        } else if (!in_class && *s == '[') {
            /* a ']' first in the class (after an optional '^') is a literal */
            size_t k = 1 + (s[1] == '^');
            k += s[k] == ']';
            rc = tok_buf_put(out, s, k);
            s += k - 1;
            in_class = 1;
        } else if (in_class && posix_class(s)) {
            rc = tok_buf_put(out, s, posix_class(s));
            s += posix_class(s) - 1;
        } else {
            in_class &= *s != ']';
            rc = tok_buf_putc(out, *s);
        }
        if (rc)
            return -1;
    }
    return 0;
}

static pcre2_code *re_compile(const char *src, size_t n, const char *where, vx_err *err)
{
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, n, PCRE2_UTF | PCRE2_UCP, &code, &off,
                                   NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        vx_errf(err, VX_EFORMAT, "%s: bad regex '%.*s' at offset %zu: %s", where, (int)n, src,
                (size_t)off, (const char *)msg);
    }
    return re;
}

pcre2_code *tok_re_compile(const char *src, const char *where, vx_err *err)
{
    /* The pattern as written is compiled first so that an error names its own offsets. */
    pcre2_code *re = re_compile(src, strlen(src), where, err);
    if (!re)
        return NULL;
    pcre2_code_free(re);
    tok_buf w = {0};
    if (re_widen(src, &w) < 0) {
        tok_buf_free(&w);
        vx_errf(err, VX_ENOMEM, "out of memory");
        return NULL;
    }
    re = re_compile(w.n ? w.p : "", w.n, where, err);
    tok_buf_free(&w);
    if (re)
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* the interpreter is the fallback */
    return re;
}

/* Next match of p in s at or after `from`: 1 with [*ms, *me), 0 when none, -1 on error. */
static int next_match(const tok_pat *p, const char *s, size_t n, size_t from,
                      pcre2_match_data *md, size_t *ms, size_t *me, vx_err *err)
{
    if (p->kind == TOK_PAT_LIT) {
        if (p->nlit > n)
            return 0;
        for (size_t i = from; i + p->nlit <= n; i++)
            if (s[i] == p->lit[0] && memcmp(s + i, p->lit, p->nlit) == 0) {
                *ms = i;
                *me = i + p->nlit;
                return 1;
            }
        return 0;
    }
    if (p->kind == TOK_PAT_FN) {
        for (size_t i = from; i < n;) {
            int32_t cp;
            size_t k = tok_utf8_next(s + i, n - i, &cp);
            if (p->fn(cp)) {
                *ms = i;
                *me = i + k;
                return 1;
            }
            i += k;
        }
        return 0;
    }
    int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        const int bound = rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT ||
                          rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT;
        return vx_errf(err, VX_EFORMAT, "%s: regex match failed on a %zu-byte piece: %s%s",
                       p->where ? p->where : "tokenizer", n, (const char *)msg,
                       bound ? " (the pattern backtracks without bound on this text)" : "");
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

int tok_pat_find(const tok_pat *p, const char *s, size_t n, pcre2_match_data *md,
                 tok_spans *out, vx_err *err)
{
    out->n = 0;
    size_t prev = 0, from = 0;
    while (from <= n) {
        size_t ms = 0, me = 0;
        int r = next_match(p, s, n, from, md, &ms, &me, err);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        if (prev < ms && tok_spans_add(out, prev, ms, 0) < 0)
            goto oom;
        if (tok_spans_add(out, ms, me, 1) < 0)
            goto oom;
        prev = me;
        if (me > ms) {
            from = me;
        } else {   /* an empty match: step one character so the walk ends */
            if (me >= n)
                break;
            int32_t cp;
            from = me + tok_utf8_next(s + me, n - me, &cp);
        }
    }
    if (prev < n && tok_spans_add(out, prev, n, 0) < 0)
        goto oom;
    return 0;
oom:
    return vx_errf(err, VX_ENOMEM, "out of memory while splitting text");
}

int tok_pat_replace(const tok_pat *p, const char *s, size_t n, const char *r, size_t nr,
                    pcre2_match_data *md, tok_spans *scratch, tok_buf *out, vx_err *err)
{
    if (tok_pat_find(p, s, n, md, scratch, err) < 0)
        return -1;
    for (size_t i = 0; i < scratch->n; i++) {
        const tok_span *sp = &scratch->p[i];
        int rc = sp->m ? tok_buf_put(out, r, nr) : tok_buf_put(out, s + sp->s, sp->e - sp->s);
        if (rc < 0)
            return vx_errf(err, VX_ENOMEM, "out of memory while replacing text");
    }
    return tok_buf_put(out, "", 0) < 0 ? vx_errf(err, VX_ENOMEM, "out of memory") : 0;
}

/* ---------------------------------------------------------------- JSON */

const char *tok_jtype(const cJSON *o)
{
    if (!o || cJSON_IsNull(o))
        return "null";
    if (cJSON_IsBool(o))
        return "boolean";
    if (cJSON_IsNumber(o))
        return "number";
    if (cJSON_IsString(o))
        return "string";
    if (cJSON_IsArray(o))
        return "array";
    return "object";
}

const cJSON *tok_jget(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int tok_jstr(const eng_tokenizer *t, const cJSON *o, const char *key, const char *where,
             int required, const char **out, vx_err *err)
{
    const cJSON *v = tok_jget(o, key);
    *out = NULL;
    if (!v)
        return required ? vx_errf(err, VX_EFORMAT, "%s: %s has no '%s'", t->path, where, key)
                        : 0;
    if (!cJSON_IsString(v))
        return vx_errf(err, VX_EFORMAT, "%s: %s.%s must be a string (got %s)", t->path, where,
                       key, tok_jtype(v));
    *out = v->valuestring;
    return 0;
}

int tok_jbool(const eng_tokenizer *t, const cJSON *o, const char *key, const char *where,
              int dflt, int *out, vx_err *err)
{
    const cJSON *v = tok_jget(o, key);
    *out = dflt;
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return vx_errf(err, VX_EFORMAT, "%s: %s.%s must be a boolean (got %s)", t->path, where,
                       key, tok_jtype(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

int tok_jint(const eng_tokenizer *t, const cJSON *o, const char *key, const char *where,
             long lo, long hi, long dflt, long *out, vx_err *err)
{
    const cJSON *v = tok_jget(o, key);
    *out = dflt;
    if (!v)
        return 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
    /* range before the cast: converting an out-of-range double is undefined */
    if (!cJSON_IsNumber(v) || d < (double)lo || d > (double)hi || d != (double)(long)d)
        return vx_errf(err, VX_EFORMAT, "%s: %s.%s must be an integer in %ld..%ld (got %s)",
                       t->path, where, key, lo, hi,
                       cJSON_IsNumber(v) ? "a number out of range" : tok_jtype(v));
    *out = (long)d;
    return 0;
}

int tok_push(void *arr, size_t *n, size_t size, const void *x)
{
    void *p;
    memcpy(&p, arr, sizeof p);   /* arr is the address of some T * */
    char *q = realloc(p, (*n + 1) * size);
    if (!q)
        return -1;
    memcpy(q + *n * size, x, size);
    memcpy(arr, &q, sizeof q);
    (*n)++;
    return 0;
}

static int load_steps(eng_tokenizer *t, const cJSON *o, const char *what, const char *list_key,
                      tok_step_fn one, int depth, vx_err *err)
{
    const char *type;
    if (!cJSON_IsObject(o))
        return vx_errf(err, VX_EFORMAT, "%s: %s must be an object (got %s)", t->path, what,
                       tok_jtype(o));
    if (depth > 16)
        return vx_errf(err, VX_EFORMAT, "%s: %s sequences nest deeper than 16", t->path, what);
    if (tok_jstr(t, o, "type", what, 1, &type, err) < 0)
        return -1;
    if (strcmp(type, "Sequence") != 0)
        return one(t, o, type, err);
    const cJSON *a = tok_jget(o, list_key), *e;
    if (!cJSON_IsArray(a))
        return vx_errf(err, VX_EFORMAT, "%s: %s.%s must be an array (got %s)", t->path, what,
                       list_key, tok_jtype(a));
    cJSON_ArrayForEach(e, a)
        if (load_steps(t, e, what, list_key, one, depth + 1, err) < 0)
            return -1;
    return 0;
}

int tok_load_steps(eng_tokenizer *t, const cJSON *o, const char *what, const char *list_key,
                   tok_step_fn one, vx_err *err)
{
    return o ? load_steps(t, o, what, list_key, one, 0, err) : 0;
}

int tok_pat_load(eng_tokenizer *t, const cJSON *o, const char *where, tok_pat *p, vx_err *err)
{
    const char *lit, *re;
    if (!cJSON_IsObject(o))
        return vx_errf(err, VX_EFORMAT, "%s: %s.pattern must be an object (got %s)", t->path,
                       where, tok_jtype(o));
    if (tok_jstr(t, o, "String", where, 0, &lit, err) < 0 ||
        tok_jstr(t, o, "Regex", where, 0, &re, err) < 0)
        return -1;
    if (lit) {
        if (!*lit)
            return vx_errf(err, VX_EFORMAT, "%s: %s.pattern.String is empty", t->path, where);
        p->kind = TOK_PAT_LIT;
        p->nlit = strlen(lit);
        p->lit = tok_arena_dup(&t->arena, lit, p->nlit);
        return p->lit ? 0 : vx_errf(err, VX_ENOMEM, "out of memory");
    }
    if (re) {
        char w[600];
        snprintf(w, sizeof w, "%s: %s.pattern", t->path, where);
        p->kind = TOK_PAT_RE;
        p->re = tok_re_compile(re, w, err);
        p->where = p->re ? tok_arena_dup(&t->arena, w, strlen(w)) : NULL;
        return !p->re ? -1 : p->where ? 0 : vx_errf(err, VX_ENOMEM, "out of memory");
    }
    return vx_errf(err, VX_EFORMAT, "%s: %s.pattern needs a 'String' or a 'Regex'", t->path,
                   where);
}
