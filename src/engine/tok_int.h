/*
 * tok_int.h — the tokenizer's private types, shared by its files:
 *   tokenizer.c   loading tokenizer.json / tokenizer_config.json, the public eng_tok_* API,
 *                 the encode pipeline and the post-processor
 *   tok_json.c    the fast path reading model.vocab / model.merges from the raw text
 *   tok_util.c    byte buffers, piece lists, id lists, a string arena, two hash maps,
 *                 UTF-8 helpers, the literal / regex / predicate pattern finder and the
 *                 JSON accessors used while loading
 *   tok_norm.c    normalizers (NFC/NFKC/NFD/NFKD, Prepend, Replace, Lowercase, Strip)
 *   tok_pretok.c  pre-tokenizers (Split, ByteLevel, Metaspace, Whitespace, Digits, ...)
 *   tok_bpe.c     the BPE model: vocab, merges by rank, byte fallback, unk fusing
 *   tok_added.c   added-token matching (leftmost-longest over a byte trie)
 *   tok_decode.c  decoders and clean_up_tokenization_spaces
 * The pipeline follows Hugging Face tokenizers: added tokens are cut out of the raw text,
 * each remaining segment is normalized, cut again by the normalized added tokens,
 * pre-tokenized into pieces, and each piece goes through the BPE model.
 */
#ifndef LQL_TOK_INT_H
#define LQL_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine.h"   /* and vindex.h: vx_err, cJSON */

/* ---------------------------------------------------------------- containers */

/* A growable byte string; p is NUL-terminated whenever n > 0 or after tok_buf_put. */
typedef struct tok_buf {
    char *p;
    size_t n, cap;
} tok_buf;

/* A list of byte strings stored back to back: piece i is text.p[start(i) .. end[i]). */
typedef struct tok_pieces {
    tok_buf text;
    size_t *end;
    size_t n, cap;
} tok_pieces;

typedef struct tok_ids {
    int32_t *p;
    size_t n, cap;
} tok_ids;

/* One span of a subject: [s, e) and whether it matched the pattern. */
typedef struct tok_span {
    size_t s, e;
    int m;
} tok_span;

typedef struct tok_spans {
    tok_span *p;
    size_t n, cap;
} tok_spans;

/* All return 0, or -1 when out of memory (the only failure). */
int tok_buf_put(tok_buf *b, const void *s, size_t n);
int tok_buf_putc(tok_buf *b, char c);
void tok_buf_free(tok_buf *b);
int tok_pieces_add(tok_pieces *l, const char *s, size_t n);
void tok_pieces_clear(tok_pieces *l);
void tok_pieces_free(tok_pieces *l);
const char *tok_piece(const tok_pieces *l, size_t i, size_t *n);
int tok_ids_add(tok_ids *l, int32_t id);
int tok_spans_add(tok_spans *l, size_t s, size_t e, int m);

/* A chunked arena of strings that never move; freed at once. */
typedef struct tok_block tok_block;
typedef struct tok_arena {
    tok_block *head;
} tok_arena;
/* A NUL-terminated copy of s[0..n), or NULL when out of memory. */
char *tok_arena_dup(tok_arena *a, const char *s, size_t n);
void tok_arena_free(tok_arena *a);

/* String → int32 map; keys are borrowed (they must outlive the map). */
typedef struct tok_smap_e {
    const char *k;
    uint32_t n;
    uint32_t h;
    int32_t v;
} tok_smap_e;
typedef struct tok_smap {
    tok_smap_e *e;
    size_t mask, n;
} tok_smap;
int tok_smap_init(tok_smap *m, size_t expected);
/* Insert or overwrite; 0, or -1 when out of memory. */
int tok_smap_put(tok_smap *m, const char *k, size_t n, int32_t v);
/* The value of k, or -1; _h with k's tok_hash already computed. */
int32_t tok_smap_get(const tok_smap *m, const char *k, size_t n);
int32_t tok_smap_get_h(const tok_smap *m, const char *k, size_t n, uint32_t h);
uint32_t tok_hash(const char *s, size_t n);
/* Start loading the slot a look-up of hash h / key k will read (bulk loading is bound by
 * cache misses on tables of several MB). */
void tok_smap_prefetch(const tok_smap *m, uint32_t h);
void tok_smap_free(tok_smap *m);

/* u64 → (u32 a, i32 b) map, used for merges ((left << 32 | right) → (rank, merged id))
 * and trie edges ((node << 8 | byte) → child). */
typedef struct tok_pmap_e {
    uint64_t k;
    uint32_t a;
    int32_t b;
} tok_pmap_e;
typedef struct tok_pmap {
    tok_pmap_e *e;
    size_t mask, n;
} tok_pmap;
int tok_pmap_init(tok_pmap *m, size_t expected);
int tok_pmap_put(tok_pmap *m, uint64_t k, uint32_t a, int32_t b);
/* The entry of k, or NULL. */
const tok_pmap_e *tok_pmap_get(const tok_pmap *m, uint64_t k);
void tok_pmap_prefetch(const tok_pmap *m, uint64_t k);
void tok_pmap_free(tok_pmap *m);

/* ---------------------------------------------------------------- UTF-8 */

/* Append s[0..n) to out with every ill-formed sequence replaced by U+FFFD, one per
 * maximal subpart (as Rust's String::from_utf8_lossy and the WHATWG decoder do). */
int tok_utf8_lossy(const char *s, size_t n, tok_buf *out);
/* Is s[0..n) well-formed UTF-8? */
int tok_utf8_valid(const char *s, size_t n);
/* Decode the code point at s (valid UTF-8 assumed, n > 0); returns its byte length. */
size_t tok_utf8_next(const char *s, size_t n, int32_t *cp);
/* Encode cp; returns the byte length (1..4). */
size_t tok_utf8_put(int32_t cp, char out[4]);
int tok_is_ws(int32_t cp);      /* Rust char::is_whitespace (White_Space) */
int tok_is_num(int32_t cp);     /* Rust char::is_numeric (Nd, Nl, No) */
int tok_is_word(int32_t cp);    /* Rust regex \w: letters, marks, Nd, Nl, Pc, joiners */
int tok_is_punct(int32_t cp);   /* ASCII punctuation or a P* category */

/* ---------------------------------------------------------------- patterns */

enum { TOK_PAT_NONE = 0, TOK_PAT_LIT, TOK_PAT_RE, TOK_PAT_FN };

/* What a Split / Replace looks for: a literal string, a PCRE2 regex (UTF + UCP), or a
 * per-character predicate (each matching character is its own match). */
typedef struct tok_pat {
    int kind;
    char *lit;           /* arena-owned */
    size_t nlit;
    pcre2_code *re;      /* owned */
    const char *where;   /* a regex's "tokenizer.json: field" for match errors (arena) */
    int (*fn)(int32_t cp);
} tok_pat;

/* Compile a regex (UTF, UCP, JIT when available), its \s and \p{L} / \p{N} matched to
 * Oniguruma / Unicode 17 (see tok_util.c); NULL with err filled on a bad pattern. */
pcre2_code *tok_re_compile(const char *src, const char *where, vx_err *err);
/* Cover s[0..n) with spans alternating non-matches and matches (HF find_matches).
 * md is scratch match data for regex patterns. */
int tok_pat_find(const tok_pat *p, const char *s, size_t n, pcre2_match_data *md,
                 tok_spans *out, vx_err *err);
/* Replace every match of p in s[0..n) with r, appending to out. */
int tok_pat_replace(const tok_pat *p, const char *s, size_t n, const char *r, size_t nr,
                    pcre2_match_data *md, tok_spans *scratch, tok_buf *out, vx_err *err);

/* ---------------------------------------------------------------- pipeline steps */

enum { TOK_NFC, TOK_NFD, TOK_NFKC, TOK_NFKD, TOK_PREPEND, TOK_REPLACE, TOK_LOWER, TOK_STRIP };

typedef struct tok_norm {
    int kind;
    tok_pat pat;         /* REPLACE */
    char *s;             /* PREPEND text / REPLACE content (arena) */
    size_t ns;
    int left, right;     /* STRIP */
} tok_norm;

enum { TOK_SPLIT, TOK_BYTELEVEL, TOK_METASPACE, TOK_WHITESPACE, TOK_WSSPLIT, TOK_DIGITS,
       TOK_PUNCT };
enum { TOK_REMOVED, TOK_ISOLATED, TOK_MERGED_PREV, TOK_MERGED_NEXT, TOK_CONTIGUOUS };
enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };

typedef struct tok_pre {
    int kind;
    tok_pat pat;         /* SPLIT, WHITESPACE, WSSPLIT, DIGITS, PUNCT */
    int behavior, invert;
    int prefix_space, use_regex;   /* BYTELEVEL */
    char rep[8];         /* METASPACE replacement character (UTF-8) */
    size_t nrep;
    int scheme, split;   /* METASPACE */
} tok_pre;

enum { TOK_D_BYTELEVEL, TOK_D_REPLACE, TOK_D_BYTEFALLBACK, TOK_D_FUSE, TOK_D_STRIP,
       TOK_D_METASPACE, TOK_D_BPE };

typedef struct tok_dec {
    int kind;
    tok_pat pat;         /* REPLACE */
    char *s;             /* REPLACE content / METASPACE replacement / BPE suffix (arena) */
    size_t ns;
    int32_t ch;          /* STRIP content character */
    int start, stop;     /* STRIP counts */
    int prefix;          /* METASPACE: strip the first token's replacement */
} tok_dec;

/* An added token (tokenizer.json added_tokens[]). */
typedef struct tok_added {
    int32_t id;
    char *s;             /* content (arena) */
    size_t n;
    char *ns;            /* normalized content for normalized tokens (arena) */
    size_t nn;
    uint8_t special, single_word, lstrip, rstrip, normalized;
} tok_added;

/* A byte trie over added-token contents; term[node] = index into added[] or -1. */
typedef struct tok_trie {
    tok_pmap edges;
    int32_t *term;
    size_t n, cap;
} tok_trie;

/* ---------------------------------------------------------------- the tokenizer */

struct eng_tokenizer {
    char path[512];              /* tokenizer.json, for messages */
    tok_arena arena;
    /* id → piece (added tokens override the model vocab), n_ids = largest id + 1 */
    const char **piece;
    uint32_t *plen;
    uint8_t *special;
    size_t n_ids;
    /* BPE model */
    tok_smap vocab;              /* model vocab piece → id */
    tok_pmap merges;             /* (left << 32 | right) → (rank, merged id) */
    int ignore_merges, byte_fallback, fuse_unk;
    int32_t unk;                 /* -1: unknown characters are dropped */
    char *unk_name;              /* model.unk_token (arena) or NULL, resolved after loading */
    char *prefix, *suffix;       /* continuing_subword_prefix / end_of_word_suffix or NULL */
    size_t nprefix, nsuffix;
    int32_t byte_id[256];        /* id of "<0xNN>", -1 when absent */
    /* added tokens */
    tok_added *added;
    size_t n_added;
    tok_smap added_map;          /* content → id */
    tok_trie raw_trie, norm_trie;
    /* pipeline */
    tok_norm *norm;
    size_t n_norm;
    tok_pre *pre;
    size_t n_pre;
    pcre2_code *gpt2_re;         /* ByteLevel's built-in regex, compiled when used */
    tok_dec *dec;
    size_t n_dec;
    int has_decoder;
    tok_ids post_pre, post_post; /* ids the post-processor puts around the sequence */
    int cleanup;                 /* clean_up_tokenization_spaces */
};

/* Encode scratch, one per eng_tok_encode call (the tokenizer itself stays read-only). */
typedef struct tok_ctx {
    const eng_tokenizer *t;
    pcre2_match_data *md;
    tok_spans spans;
    tok_buf tmp;
    struct tok_sym *sym;
    size_t nsym;
    struct tok_merge *heap;
    size_t nheap;
    vx_err *err;
} tok_ctx;

/* ---------------------------------------------------------------- loading */

/* JSON access with precise errors ("<file>: <where>.<key> must be a string (got
 * number)"). A key that is absent or JSON null yields the default / NULL unless required. */
const cJSON *tok_jget(const cJSON *o, const char *key);
int tok_jstr(const eng_tokenizer *t, const cJSON *o, const char *key, const char *where,
             int required, const char **out, vx_err *err);
int tok_jbool(const eng_tokenizer *t, const cJSON *o, const char *key, const char *where,
              int dflt, int *out, vx_err *err);
int tok_jint(const eng_tokenizer *t, const cJSON *o, const char *key, const char *where,
             long lo, long hi, long dflt, long *out, vx_err *err);
/* The JSON type name of o, for messages. */
const char *tok_jtype(const cJSON *o);
/* Append *x (size bytes) to the malloc'd array whose address is arr (a T **), growing
 * *n; 0, or -1 when out of memory (the array is unchanged). */
int tok_push(void *arr, size_t *n, size_t size, const void *x);
/* Load a pipeline section that may be a Sequence (nested at most 16 deep): `what` names
 * it in messages ("normalizer"), list_key is the Sequence's array ("normalizers"); one()
 * parses every other step. o NULL: nothing to load. */
typedef int (*tok_step_fn)(eng_tokenizer *t, const cJSON *o, const char *type, vx_err *err);
int tok_load_steps(eng_tokenizer *t, const cJSON *o, const char *what, const char *list_key,
                   tok_step_fn one, vx_err *err);
/* Parse {"String": s} or {"Regex": r} into p (arena copies). */
int tok_pat_load(eng_tokenizer *t, const cJSON *o, const char *where, tok_pat *p, vx_err *err);

/* The model's vocab and merges before they are indexed: vocab entries (a = piece, id)
 * and merge pairs (a, b), with strings borrowed from the parsed JSON or held in
 * `strings` (the fast scanner's copies). */
typedef struct tok_raw_entry {
    const char *a;
    uint32_t na;
    const char *b;
    uint32_t nb;
    int32_t id;
} tok_raw_entry;
typedef struct tok_raw {
    tok_raw_entry *v, *m;
    size_t nv, nm, cv, cm;
    tok_arena strings;
} tok_raw;
int tok_raw_vocab(tok_raw *r, const char *k, size_t n, int32_t id);   /* -1: no memory */
int tok_raw_merge(tok_raw *r, const char *a, size_t na, const char *b, size_t nb);
void tok_raw_free(tok_raw *r);

/* tok_json.c: the fast path for big files. Find model.vocab and model.merges in the raw
 * JSON text, parse them into r (strings copied into r->strings), and set rest to the
 * text with those two values replaced by {} and [] for cJSON. Returns 1 when done, 0
 * when the text is not in the plain expected shape (nothing kept: the caller parses it
 * all with cJSON, which reports any error precisely), -1 when out of memory. */
int tok_fast_scan(const char *text, size_t n, tok_raw *r, tok_buf *rest);

/* Each parses its tokenizer.json section (o may be NULL: none) into t. The model's vocab
 * and merges come from fast when not NULL, else from the model JSON. */
int tok_bpe_load(eng_tokenizer *t, const cJSON *model, const tok_raw *fast, vx_err *err);
int tok_norm_load(eng_tokenizer *t, const cJSON *o, vx_err *err);
int tok_pre_load(eng_tokenizer *t, const cJSON *o, vx_err *err);
int tok_dec_load(eng_tokenizer *t, const cJSON *o, vx_err *err);

/* tok_norm.c: run the normalizers over s[0..n), result in out (replaced). */
int tok_normalize(tok_ctx *c, const char *s, size_t n, tok_buf *out);
/* tok_pretok.c: pre-tokenize s[0..n) into pieces (replaced); first: the segment starts
 * the text (Metaspace prepend_scheme "first"). */
int tok_pretokenize(tok_ctx *c, const char *s, size_t n, int first, tok_pieces *out);
/* tok_bpe.c: build the model from the parsed vocab and merges (see tokenizer.c). */
int tok_bpe_word(tok_ctx *c, const char *s, size_t n, tok_ids *out);
void tok_ctx_free(tok_ctx *c);
/* tok_added.c */
int tok_trie_add(tok_trie *tr, const char *s, size_t n, int32_t idx);
void tok_trie_free(tok_trie *tr);
/* Cut s[0..n) by the trie's tokens: spans with m = index into added[] or -1 for text. */
int tok_added_split(const eng_tokenizer *t, const tok_trie *tr, const char *s, size_t n,
                    tok_spans *out);
/* tok_decode.c: run the decoders over tokens and join (clean-up applied when set). */
int tok_decode_pieces(const eng_tokenizer *t, tok_pieces *tokens, int after, tok_buf *out,
                      vx_err *err);
/* The GPT-2 bytes_to_unicode table: byte → code point, and its inverse (-1 off-table). */
int32_t tok_byte_char(uint8_t b);
int tok_char_byte(int32_t cp);

#endif
