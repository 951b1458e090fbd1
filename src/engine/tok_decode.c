/*
 * tok_decode.c — decoders: tokenizer.json "decoder" parsed into a flat list of steps, each
 * turning the list of token strings into a new list (Hugging Face's decode_chain); the
 * result is joined (with ' ' when there is no decoder at all). ByteLevel maps characters
 * back to bytes through GPT-2's table (a token with an off-table character keeps its own
 * bytes) and repairs ill-formed UTF-8 with U+FFFD; ByteFallback turns runs of <0xNN>
 * pieces into their bytes, or one U+FFFD per byte when the run is not valid UTF-8.
 * clean_up_tokenization_spaces then applies transformers' fixed replacements. The result
 * is always valid UTF-8 (pieces from a hostile vocab are repaired with U+FFFD).
 */
#include "tok_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- loading */

static int keep(eng_tokenizer *t, const char *s, tok_dec *d, vx_err *err)
{
    d->ns = strlen(s);
    d->s = tok_arena_dup(&t->arena, s, d->ns);
    return d->s ? 0 : vx_errf(err, VX_ENOMEM, "out of memory");
}

static int load_metaspace(eng_tokenizer *t, const cJSON *o, tok_dec *d, vx_err *err)
{
    const char *w = "decoder(Metaspace)", *rep, *scheme;
    int legacy;
    if (tok_jstr(t, o, "replacement", w, 0, &rep, err) < 0 ||
        tok_jstr(t, o, "prepend_scheme", w, 0, &scheme, err) < 0 ||
        tok_jbool(t, o, "add_prefix_space", w, 1, &legacy, err) < 0)
        return -1;
    d->prefix = scheme ? strcmp(scheme, "never") != 0 : legacy;
    return keep(t, rep ? rep : "\xE2\x96\x81", d, err);
}

static int step(eng_tokenizer *t, const cJSON *o, const char *type, vx_err *err)
{
    tok_dec d = {0};
    if (strcmp(type, "ByteLevel") == 0) {
        d.kind = TOK_D_BYTELEVEL;
    } else if (strcmp(type, "ByteFallback") == 0) {
        d.kind = TOK_D_BYTEFALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        d.kind = TOK_D_FUSE;
    } else if (strcmp(type, "Replace") == 0) {
        const char *c;
        d.kind = TOK_D_REPLACE;
        if (tok_jstr(t, o, "content", "decoder(Replace)", 1, &c, err) < 0 ||
            tok_pat_load(t, tok_jget(o, "pattern"), "decoder(Replace)", &d.pat, err) < 0)
            return -1;
        if (keep(t, c, &d, err) < 0) {
            pcre2_code_free(d.pat.re);
            return -1;
        }
    } else if (strcmp(type, "Strip") == 0) {
        const char *c;
        long a, b;
        d.kind = TOK_D_STRIP;
        if (tok_jstr(t, o, "content", "decoder(Strip)", 1, &c, err) < 0 ||
            tok_jint(t, o, "start", "decoder(Strip)", 0, 1 << 20, 0, &a, err) < 0 ||
            tok_jint(t, o, "stop", "decoder(Strip)", 0, 1 << 20, 0, &b, err) < 0)
            return -1;
        size_t n = strlen(c);
        if (n == 0 || tok_utf8_next(c, n, &d.ch) != n)
            return vx_errf(err, VX_EFORMAT, "%s: decoder(Strip).content '%s' must be one "
                           "character", t->path, c);
        d.start = (int)a;
        d.stop = (int)b;
    } else if (strcmp(type, "Metaspace") == 0) {
        d.kind = TOK_D_METASPACE;
        if (load_metaspace(t, o, &d, err) < 0)
            return -1;
    } else if (strcmp(type, "BPEDecoder") == 0) {
        const char *sfx;
        d.kind = TOK_D_BPE;
        if (tok_jstr(t, o, "suffix", "decoder(BPEDecoder)", 0, &sfx, err) < 0 ||
            keep(t, sfx ? sfx : "</w>", &d, err) < 0)
            return -1;
    } else {
        return vx_errf(err, VX_EUNSUPPORTED,
                       "%s: decoder '%s' is not supported (supported: ByteLevel, Replace, "
                       "ByteFallback, Fuse, Strip, Metaspace, BPEDecoder, Sequence)",
                       t->path, type);
    }
    if (tok_push(&t->dec, &t->n_dec, sizeof d, &d) < 0) {
        pcre2_code_free(d.pat.re);
        return vx_errf(err, VX_ENOMEM, "out of memory loading the decoder");
    }
    return 0;
}

int tok_dec_load(eng_tokenizer *t, const cJSON *o, vx_err *err)
{
    t->has_decoder = o != NULL;
    return tok_load_steps(t, o, "decoder", "decoders", step, err);
}

/* ---------------------------------------------------------------- steps */

static int byte_level(const tok_pieces *in, tok_pieces *out)
{
    tok_buf raw = {0}, fixed = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        size_t n, at = raw.n;
        const char *s = tok_piece(in, i, &n);
        for (size_t j = 0; j < n && rc == 0;) {
            int32_t cp;
            j += tok_utf8_next(s + j, n - j, &cp);
            int b = tok_char_byte(cp);
            if (b < 0) {   /* off-table character: the whole token keeps its bytes */
                raw.n = at;
                rc = tok_buf_put(&raw, s, n);
                break;
            }
            rc = tok_buf_putc(&raw, (char)b);
        }
    }
    if (rc == 0)
        rc = tok_utf8_lossy(raw.p ? raw.p : "", raw.n, &fixed);
    if (rc == 0)
        rc = tok_pieces_add(out, fixed.p ? fixed.p : "", fixed.n);
    tok_buf_free(&raw);
    tok_buf_free(&fixed);
    return rc;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* "<0xNN>" → NN (either hex case, as HF's from_str_radix accepts), else -1. */
static int byte_piece(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int h = hexval(s[3]), l = hexval(s[4]);
    return h < 0 || l < 0 ? -1 : h << 4 | l;
}

static int flush_bytes(tok_buf *run, tok_pieces *out)
{
    if (!run->n)
        return 0;
    tok_buf fixed = {0};
    int rc = tok_utf8_lossy(run->p, run->n, &fixed);
    int valid = rc == 0 && fixed.n == run->n && memcmp(fixed.p, run->p, run->n) == 0;
    if (rc == 0 && valid)
        rc = tok_pieces_add(out, run->p, run->n);
    for (size_t i = 0; rc == 0 && !valid && i < run->n; i++)
        rc = tok_pieces_add(out, "\xEF\xBF\xBD", 3);
    tok_buf_free(&fixed);
    run->n = 0;
    return rc;
}

static int byte_fallback(const tok_pieces *in, tok_pieces *out)
{
    tok_buf run = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        size_t n;
        const char *s = tok_piece(in, i, &n);
        int b = byte_piece(s, n);
        if (b >= 0) {
            rc = tok_buf_putc(&run, (char)b);
            continue;
        }
        rc = flush_bytes(&run, out);
        if (rc == 0)
            rc = tok_pieces_add(out, s, n);
    }
    if (rc == 0)
        rc = flush_bytes(&run, out);
    tok_buf_free(&run);
    return rc;
}

/* keep_start: the piece is not the text's start (a fused continuation) */
static int strip(const tok_dec *d, const tok_pieces *in, int keep_start, tok_pieces *out)
{
    for (size_t i = 0; i < in->n; i++) {
        size_t n, a = 0, b;
        const char *s = tok_piece(in, i, &n);
        b = n;
        int32_t cp;
        for (int k = 0; k < d->start && a < b && !keep_start; k++) {
            size_t w = tok_utf8_next(s + a, b - a, &cp);
            if (cp != d->ch)
                break;
            a += w;
        }
        for (int k = 0; k < d->stop && b > a; k++) {
            size_t w = 1;
            while (w < b - a && ((uint8_t)s[b - w] & 0xC0) == 0x80)
                w++;
            tok_utf8_next(s + b - w, w, &cp);
            if (cp != d->ch)
                break;
            b -= w;
        }
        if (tok_pieces_add(out, s + a, b - a) < 0)
            return -1;
    }
    return 0;
}

/* after: the first piece follows earlier text, so its mark is a space too */
static int metaspace(const tok_dec *d, const tok_pieces *in, int after, tok_pieces *out)
{
    tok_buf b = {0};
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        size_t n;
        const char *s = tok_piece(in, i, &n);
        b.n = 0;
        for (size_t j = 0; j < n && rc == 0;) {
            if (n - j >= d->ns && memcmp(s + j, d->s, d->ns) == 0) {
                if (!(i == 0 && d->prefix && !after))
                    rc = tok_buf_putc(&b, ' ');
                j += d->ns;
            } else {
                rc = tok_buf_putc(&b, s[j++]);
            }
        }
        if (rc == 0)
            rc = tok_pieces_add(out, b.p ? b.p : "", b.n);
    }
    tok_buf_free(&b);
    return rc;
}

static int replace(const tok_dec *d, const tok_pieces *in, tok_pieces *out, int bpe,
                   vx_err *err)
{
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    tok_spans sp = {0};
    tok_buf b = {0};
    tok_pat lit = {.kind = TOK_PAT_LIT, .lit = d->s, .nlit = d->ns};
    int rc = md ? 0 : vx_errf(err, VX_ENOMEM, "out of memory while decoding");
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        size_t n;
        const char *s = tok_piece(in, i, &n);
        b.n = 0;
        if (bpe)   /* BPEDecoder: the suffix becomes a space, except in the last token */
            rc = tok_pat_replace(&lit, s, n, " ", i + 1 < in->n, md, &sp, &b, err);
        else
            rc = tok_pat_replace(&d->pat, s, n, d->s, d->ns, md, &sp, &b, err);
        if (rc == 0 && tok_pieces_add(out, b.p ? b.p : "", b.n) < 0)
            rc = vx_errf(err, VX_ENOMEM, "out of memory while decoding");
    }
    pcre2_match_data_free(md);
    free(sp.p);
    tok_buf_free(&b);
    return rc;
}

static int join(const tok_pieces *in, const char *sep, tok_buf *out)
{
    for (size_t i = 0; i < in->n; i++) {
        size_t n;
        const char *s = tok_piece(in, i, &n);
        if ((i && tok_buf_put(out, sep, strlen(sep)) < 0) || tok_buf_put(out, s, n) < 0)
            return -1;
    }
    return tok_buf_put(out, "", 0);
}

/* transformers' clean_up_tokenization: the fixed replacements, in order. */
static int cleanup(tok_buf *s)
{
    static const char *const pairs[][2] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
        {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        size_t nf = strlen(pairs[i][0]), nt = strlen(pairs[i][1]), w = 0;
        for (size_t r = 0; r < s->n;) {   /* in place: the replacement is never longer */
            if (s->n - r >= nf && memcmp(s->p + r, pairs[i][0], nf) == 0) {
                memmove(s->p + w, pairs[i][1], nt);
                w += nt;
                r += nf;
            } else {
                s->p[w++] = s->p[r++];
            }
        }
        s->n = w;
        if (s->p)
            s->p[w] = '\0';
    }
    return 0;
}

int tok_decode_pieces(const eng_tokenizer *t, tok_pieces *tokens, int after, tok_buf *out,
                      vx_err *err)
{
    tok_pieces next = {0};
    int fused = 0;   /* one piece now holds the whole text: its start is the text's */
    for (size_t i = 0; i < t->n_dec; i++) {
        const tok_dec *d = &t->dec[i];
        int rc = 0;
        tok_pieces_clear(&next);
        switch (d->kind) {
        case TOK_D_BYTELEVEL:
            rc = byte_level(tokens, &next);
            break;
        case TOK_D_BYTEFALLBACK:
            rc = byte_fallback(tokens, &next);
            break;
        case TOK_D_FUSE:
            rc = join(tokens, "", &next.text);
            rc = rc < 0 ? rc : tok_pieces_add(&next, "", 0);
            fused = 1;
            break;
        case TOK_D_STRIP:
            rc = strip(d, tokens, after && fused, &next);
            break;
        case TOK_D_METASPACE:
            rc = metaspace(d, tokens, after, &next);
            break;
        case TOK_D_REPLACE:
        case TOK_D_BPE:
            if (replace(d, tokens, &next, d->kind == TOK_D_BPE, err) < 0) {
                tok_pieces_free(&next);
                return -1;   /* err filled by replace */
            }
            break;
        }
        if (rc < 0) {
            tok_pieces_free(&next);
            return vx_errf(err, VX_ENOMEM, "out of memory while decoding");
        }
        tok_pieces x = *tokens;
        *tokens = next;
        next = x;
    }
    tok_pieces_free(&next);
    out->n = 0;
    /* without a decoder tokens are joined by spaces: one also joins the earlier text */
    if ((after && !t->has_decoder && tokens->n && tok_buf_put(out, " ", 1) < 0) ||
        join(tokens, t->has_decoder ? "" : " ", out) < 0)
        return vx_errf(err, VX_ENOMEM, "out of memory while decoding");
    if (t->cleanup)
        cleanup(out);
    if (!tok_utf8_valid(out->p, out->n)) {   /* pieces of a hostile vocab: repair */
        tok_buf fixed = {0};
        if (tok_utf8_lossy(out->p, out->n, &fixed) < 0) {
            tok_buf_free(&fixed);
            return vx_errf(err, VX_ENOMEM, "out of memory while decoding");
        }
        tok_buf_free(out);
        *out = fixed;
    }
    return 0;
}
