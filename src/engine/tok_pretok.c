/*
 * tok_pretok.c — pre-tokenizers: tokenizer.json "pre_tokenizer" parsed into a flat list of
 * steps, each turning a list of pieces into a new list (empty pieces are dropped, as in
 * Hugging Face's PreTokenizedString::split). Split follows HF's SplitDelimiterBehavior
 * (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous) and `invert`.
 * ByteLevel maps every byte to GPT-2's bytes_to_unicode character after the optional
 * prefix space and GPT-2 regex split. Regexes run in PCRE2 with UTF and UCP so \p{L},
 * \p{N}, \s and \w are Unicode-aware, as Oniguruma is in HF.
 */
#include "tok_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pre-tokenizer regex (ByteLevel use_regex). */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* HF Whitespace: keep runs of word characters and runs of other non-space characters.
 * Its regex runs in Rust's regex crate, whose \w is Unicode's (UTS #18): Alphabetic, marks,
 * decimal digits, connector punctuation and the joiners, so "e\u0301" and "नमस्ते" are one
 * word and "²" is not. PCRE2 10.42's \w is \p{L}, \p{N} and '_', hence the class spelled
 * out (\p{L} as well, so that it gains the letters of Unicode 15-17 like every \p{L}). */
#define WS_WORD "\\p{L}\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}"
static const char ws_regex[] = "[" WS_WORD "]+|[^" WS_WORD "\\s]+";

/* ---------------------------------------------------------------- bytes_to_unicode */

/* Printable Latin-1 bytes map to themselves; the other 68 bytes map, in byte order, to
 * U+0100 onwards (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A). */
static int printable(int b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

int32_t tok_byte_char(uint8_t b)
{
    if (printable(b))
        return b;
    int k = 0;
    for (int i = 0; i < b; i++)
        k += !printable(i);
    return 256 + k;
}

int tok_char_byte(int32_t cp)
{
    if (cp < 256)
        return printable(cp) ? cp : -1;
    int k = cp - 256;
    if (k >= 68)
        return -1;
    for (int b = 0; b < 256; b++)
        if (!printable(b) && k-- == 0)
            return b;
    return -1;
}

/* ---------------------------------------------------------------- loading */

static int behavior_of(const eng_tokenizer *t, const cJSON *o, const char *where, int dflt,
                       int *out, vx_err *err)
{
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    const char *b;
    if (tok_jstr(t, o, "behavior", where, 0, &b, err) < 0)
        return -1;
    *out = dflt;
    if (!b)
        return 0;
    for (int i = 0; i < 5; i++)
        if (strcmp(b, names[i]) == 0) {
            *out = i;
            return 0;
        }
    return vx_errf(err, VX_EFORMAT, "%s: %s.behavior '%s' is not one of Removed, Isolated, "
                   "MergedWithPrevious, MergedWithNext, Contiguous", t->path, where, b);
}

static int load_metaspace(eng_tokenizer *t, const cJSON *o, tok_pre *s, vx_err *err)
{
    const char *w = "pre_tokenizer(Metaspace)", *rep, *scheme;
    int legacy;
    if (tok_jstr(t, o, "replacement", w, 0, &rep, err) < 0 ||
        tok_jstr(t, o, "prepend_scheme", w, 0, &scheme, err) < 0 ||
        tok_jbool(t, o, "add_prefix_space", w, 1, &legacy, err) < 0 ||
        tok_jbool(t, o, "split", w, 1, &s->split, err) < 0)
        return -1;
    if (!rep)
        rep = "\xE2\x96\x81";
    int32_t cp;
    s->nrep = strlen(rep);
    if (s->nrep == 0 || s->nrep > 4 || tok_utf8_next(rep, s->nrep, &cp) != s->nrep)
        return vx_errf(err, VX_EFORMAT, "%s: %s.replacement '%s' must be one character",
                       t->path, w, rep);
    memcpy(s->rep, rep, s->nrep);
    s->scheme = legacy ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    if (scheme) {
        if (strcmp(scheme, "always") == 0)
            s->scheme = TOK_PREPEND_ALWAYS;
        else if (strcmp(scheme, "first") == 0)
            s->scheme = TOK_PREPEND_FIRST;
        else if (strcmp(scheme, "never") == 0)
            s->scheme = TOK_PREPEND_NEVER;
        else
            return vx_errf(err, VX_EFORMAT, "%s: %s.prepend_scheme '%s' is not one of always, "
                           "first, never", t->path, w, scheme);
    }
    return 0;
}

static int step(eng_tokenizer *t, const cJSON *o, const char *type, vx_err *err)
{
    tok_pre s = {0};
    if (strcmp(type, "Split") == 0) {
        s.kind = TOK_SPLIT;
        if (behavior_of(t, o, "pre_tokenizer(Split)", TOK_ISOLATED, &s.behavior, err) < 0 ||
            tok_jbool(t, o, "invert", "pre_tokenizer(Split)", 0, &s.invert, err) < 0 ||
            tok_pat_load(t, tok_jget(o, "pattern"), "pre_tokenizer(Split)", &s.pat, err) < 0)
            return -1;
    } else if (strcmp(type, "ByteLevel") == 0) {
        s.kind = TOK_BYTELEVEL;
        if (tok_jbool(t, o, "add_prefix_space", "pre_tokenizer(ByteLevel)", 1,
                      &s.prefix_space, err) < 0 ||
            tok_jbool(t, o, "use_regex", "pre_tokenizer(ByteLevel)", 1, &s.use_regex, err) < 0)
            return -1;
        if (s.use_regex && !t->gpt2_re &&
            !(t->gpt2_re = tok_re_compile(gpt2_regex, "byte-level regex", err)))
            return -1;
    } else if (strcmp(type, "Metaspace") == 0) {
        s.kind = TOK_METASPACE;
        if (load_metaspace(t, o, &s, err) < 0)
            return -1;
    } else if (strcmp(type, "Whitespace") == 0) {
        s.kind = TOK_WHITESPACE;
        s.pat.kind = TOK_PAT_RE;
        if (!(s.pat.re = tok_re_compile(ws_regex, "whitespace regex", err)))
            return -1;
        s.behavior = TOK_REMOVED;
        s.invert = 1;
    } else if (strcmp(type, "WhitespaceSplit") == 0) {
        s.kind = TOK_WSSPLIT;
        s.pat = (tok_pat){.kind = TOK_PAT_FN, .fn = tok_is_ws};
        s.behavior = TOK_REMOVED;
    } else if (strcmp(type, "Digits") == 0) {
        int single;
        s.kind = TOK_DIGITS;
        if (tok_jbool(t, o, "individual_digits", "pre_tokenizer(Digits)", 0, &single, err) < 0)
            return -1;
        s.pat = (tok_pat){.kind = TOK_PAT_FN, .fn = tok_is_num};
        s.behavior = single ? TOK_ISOLATED : TOK_CONTIGUOUS;
    } else if (strcmp(type, "Punctuation") == 0) {
        s.kind = TOK_PUNCT;
        s.pat = (tok_pat){.kind = TOK_PAT_FN, .fn = tok_is_punct};
        if (behavior_of(t, o, "pre_tokenizer(Punctuation)", TOK_ISOLATED, &s.behavior, err) < 0)
            return -1;
    } else {
        return vx_errf(err, VX_EUNSUPPORTED,
                       "%s: pre_tokenizer '%s' is not supported (supported: Split, ByteLevel, "
                       "Metaspace, Whitespace, WhitespaceSplit, Digits, Punctuation, Sequence)",
                       t->path, type);
    }
    if (tok_push(&t->pre, &t->n_pre, sizeof s, &s) < 0) {
        pcre2_code_free(s.pat.re);
        return vx_errf(err, VX_ENOMEM, "out of memory loading the pre-tokenizer");
    }
    return 0;
}

int tok_pre_load(eng_tokenizer *t, const cJSON *o, vx_err *err)
{
    return tok_load_steps(t, o, "pre_tokenizer", "pretokenizers", step, err);
}

/* ---------------------------------------------------------------- applying */

/* Split s[0..n) by pat with HF's behaviors, appending the kept non-empty parts to out. */
static int split(tok_ctx *c, const tok_pat *pat, int behavior, int invert, const char *s,
                 size_t n, tok_pieces *out)
{
    if (tok_pat_find(pat, s, n, c->md, &c->spans, c->err) < 0)
        return -1;
    tok_spans *sp = &c->spans;
    size_t k = 0;   /* merged spans are compacted in place into sp->p[0..k) */
    int prev = 0;
    for (size_t i = 0; i < sp->n; i++) {
        tok_span x = sp->p[i];
        x.m = invert ? !x.m : x.m;
        int m = x.m;
        switch (behavior) {
        case TOK_REMOVED:
            sp->p[k++] = x;
            break;
        case TOK_ISOLATED:
            x.m = 0;
            sp->p[k++] = x;
            break;
        case TOK_CONTIGUOUS:
            if (k && m == prev)
                sp->p[k - 1].e = x.e;
            else
                sp->p[k++] = (tok_span){x.s, x.e, 0};
            break;
        case TOK_MERGED_PREV:
            if (m && !prev && k)
                sp->p[k - 1].e = x.e;
            else
                sp->p[k++] = (tok_span){x.s, x.e, 0};
            break;
        case TOK_MERGED_NEXT:
            /* a match joins the span after it: handled below, walking backwards */
            sp->p[k++] = x;
            break;
        }
        prev = m;
    }
    sp->n = k;
    if (behavior == TOK_MERGED_NEXT) {
        size_t w = sp->n;   /* compact from the end towards the end of the array */
        int nextm = 0;
        for (size_t i = sp->n; i-- > 0;) {
            tok_span x = sp->p[i];
            if (x.m && !nextm && w < sp->n)
                sp->p[w].s = x.s;
            else
                sp->p[--w] = (tok_span){x.s, x.e, 0};
            nextm = x.m;
        }
        memmove(sp->p, sp->p + w, (sp->n - w) * sizeof *sp->p);
        sp->n -= w;
        for (size_t i = 0; i < sp->n; i++)
            sp->p[i].m = 0;
    }
    for (size_t i = 0; i < sp->n; i++) {
        const tok_span *x = &sp->p[i];
        if (x->m || x->e == x->s)
            continue;
        if (tok_pieces_add(out, s + x->s, x->e - x->s) < 0)
            return vx_errf(c->err, VX_ENOMEM, "out of memory while pre-tokenizing");
    }
    return 0;
}

static int bytes_to_chars(const char *s, size_t n, tok_pieces *out)
{
    tok_buf *b = &out->text;
    for (size_t i = 0; i < n; i++) {
        char u[4];
        if (tok_buf_put(b, u, tok_utf8_put(tok_byte_char((uint8_t)s[i]), u)) < 0)
            return -1;
    }
    return tok_pieces_add(out, "", 0);   /* closes the piece the bytes went into */
}

static int byte_level(tok_ctx *c, const tok_pre *st, const char *s, size_t n, tok_pieces *out)
{
    const char *src = s;
    size_t ns = n;
    if (st->prefix_space && (n == 0 || s[0] != ' ')) {
        c->tmp.n = 0;
        if (tok_buf_putc(&c->tmp, ' ') < 0 || tok_buf_put(&c->tmp, s, n) < 0)
            goto oom;
        src = c->tmp.p;
        ns = c->tmp.n;
    }
    tok_pieces parts = {0};
    if (st->use_regex) {
        tok_pat pat = {.kind = TOK_PAT_RE, .re = c->t->gpt2_re};
        if (split(c, &pat, TOK_ISOLATED, 0, src, ns, &parts) < 0) {
            tok_pieces_free(&parts);
            return -1;
        }
    } else if (ns && tok_pieces_add(&parts, src, ns) < 0) {
        goto oom;
    }
    for (size_t i = 0; i < parts.n; i++) {
        size_t k;
        const char *p = tok_piece(&parts, i, &k);
        if (bytes_to_chars(p, k, out) < 0) {
            tok_pieces_free(&parts);
            goto oom;
        }
    }
    tok_pieces_free(&parts);
    return 0;
oom:
    return vx_errf(c->err, VX_ENOMEM, "out of memory while pre-tokenizing");
}

static int metaspace(tok_ctx *c, const tok_pre *st, const char *s, size_t n, int first,
                     tok_pieces *out)
{
    tok_buf *b = &c->tmp;
    b->n = 0;
    int starts = n >= st->nrep && memcmp(s, st->rep, st->nrep) == 0;
    int prepend = st->scheme == TOK_PREPEND_ALWAYS || (st->scheme == TOK_PREPEND_FIRST && first);
    if (prepend && !starts && !(n && s[0] == ' ') && tok_buf_put(b, st->rep, st->nrep) < 0)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        int rc = s[i] == ' ' ? tok_buf_put(b, st->rep, st->nrep) : tok_buf_putc(b, s[i]);
        if (rc < 0)
            goto oom;
    }
    if (!st->split) {
        if (b->n && tok_pieces_add(out, b->p, b->n) < 0)
            goto oom;
        return 0;
    }
    tok_pat pat = {.kind = TOK_PAT_LIT, .lit = (char *)st->rep, .nlit = st->nrep};
    return split(c, &pat, TOK_MERGED_NEXT, 0, b->p, b->n, out);
oom:
    return vx_errf(c->err, VX_ENOMEM, "out of memory while pre-tokenizing");
}

int tok_pretokenize(tok_ctx *c, const char *s, size_t n, int first, tok_pieces *out)
{
    const eng_tokenizer *t = c->t;
    tok_pieces cur = {0}, next = {0};
    tok_pieces_clear(out);
    if (n == 0)
        return 0;
    if (tok_pieces_add(&cur, s, n) < 0)
        goto oom;
    for (size_t i = 0; i < t->n_pre; i++) {
        const tok_pre *st = &t->pre[i];
        tok_pieces_clear(&next);
        for (size_t j = 0; j < cur.n; j++) {
            size_t k;
            const char *p = tok_piece(&cur, j, &k);
            int rc;
            if (st->kind == TOK_BYTELEVEL)
                rc = byte_level(c, st, p, k, &next);
            else if (st->kind == TOK_METASPACE)
                rc = metaspace(c, st, p, k, first && j == 0, &next);
            else
                rc = split(c, &st->pat, st->behavior, st->invert, p, k, &next);
            if (rc < 0)
                goto fail;
        }
        tok_pieces x = cur;
        cur = next;
        next = x;
    }
    tok_pieces_free(&next);
    tok_pieces_free(out);
    *out = cur;
    return 0;
oom:
    vx_errf(c->err, VX_ENOMEM, "out of memory while pre-tokenizing");
fail:
    tok_pieces_free(&cur);
    tok_pieces_free(&next);
    return -1;
}
