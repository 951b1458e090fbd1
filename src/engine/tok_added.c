/*
 * tok_added.c — finding added tokens in text. Contents go into a byte trie (edges in a
 * u64 hash map); the text is scanned for the leftmost match, taking the longest token
 * that starts there, then scanning on after it (non-overlapping, as Hugging Face's
 * aho-corasick LeftmostLongest). A single_word token is skipped when a word character
 * touches either side; lstrip / rstrip widen the match over neighbouring whitespace.
 */
#include "tok_int.h"

#include <stdlib.h>
#include <string.h>

static int32_t new_node(tok_trie *tr)
{
    if (tr->n == tr->cap) {
        size_t c = tr->cap ? tr->cap * 2 : 256;
        int32_t *p = realloc(tr->term, c * sizeof *p);
        if (!p)
            return -1;
        tr->term = p;
        tr->cap = c;
    }
    tr->term[tr->n] = -1;
    return (int32_t)tr->n++;
}

int tok_trie_add(tok_trie *tr, const char *s, size_t n, int32_t idx)
{
    if (!tr->edges.e && tok_pmap_init(&tr->edges, 64) < 0)
        return -1;
    if (tr->n == 0 && new_node(tr) < 0)
        return -1;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)(uint32_t)node << 8 | (uint8_t)s[i];
        const tok_pmap_e *e = tok_pmap_get(&tr->edges, k);
        if (e) {
            node = e->b;
            continue;
        }
        int32_t child = new_node(tr);
        if (child < 0 || tok_pmap_put(&tr->edges, k, 0, child) < 0)
            return -1;
        node = child;
    }
    tr->term[node] = idx;
    return 0;
}

void tok_trie_free(tok_trie *tr)
{
    tok_pmap_free(&tr->edges);
    free(tr->term);
    memset(tr, 0, sizeof *tr);
}

/* Length of the longest token starting at s[0..n) (0: none), its index in *idx. */
static size_t longest(const tok_trie *tr, const char *s, size_t n, int32_t *idx)
{
    int32_t node = 0;
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        const tok_pmap_e *e =
            tok_pmap_get(&tr->edges, (uint64_t)(uint32_t)node << 8 | (uint8_t)s[i]);
        if (!e)
            break;
        node = e->b;
        if (tr->term[node] >= 0) {
            best = i + 1;
            *idx = tr->term[node];
        }
    }
    return best;
}

/* The character ending at s[end) (end > 0). */
static int32_t char_before(const char *s, size_t end, size_t *w)
{
    size_t k = 1;
    while (k < end && k < 4 && ((uint8_t)s[end - k] & 0xC0) == 0x80)
        k++;
    int32_t cp;
    tok_utf8_next(s + end - k, k, &cp);
    *w = k;
    return cp;
}

int tok_added_split(const eng_tokenizer *t, const tok_trie *tr, const char *s, size_t n,
                    tok_spans *out)
{
    out->n = 0;
    size_t from = 0, i = 0;   /* from: end of the previous emitted token */
    while (tr->n && i < n) {
        int32_t idx = -1;
        size_t len = longest(tr, s + i, n - i, &idx);
        if (!len) {
            i++;
            continue;
        }
        size_t ms = i, me = i + len, w;
        int32_t cp;
        i = me;
        const tok_added *a = &t->added[idx];
        if (a->single_word) {
            int left = ms > 0 && tok_is_word(char_before(s, ms, &w));
            int right = me < n && (tok_utf8_next(s + me, n - me, &cp), tok_is_word(cp));
            if (left || right)
                continue;
        }
        while (a->lstrip && ms > from && tok_is_ws(char_before(s, ms, &w)))
            ms -= w;
        while (a->rstrip && me < n) {
            size_t k = tok_utf8_next(s + me, n - me, &cp);
            if (!tok_is_ws(cp))
                break;
            me += k;
        }
        i = me;
        if ((from < ms && tok_spans_add(out, from, ms, -1) < 0) ||
            tok_spans_add(out, ms, me, idx) < 0)
            return -1;
        from = me;
    }
    if (from < n && tok_spans_add(out, from, n, -1) < 0)
        return -1;
    return 0;
}
