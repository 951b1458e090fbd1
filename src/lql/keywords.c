/*
 * keywords.c — the keyword table: one sorted list that drives the lexer (identifier →
 * keyword code, case-insensitively), tab completion and the reference docs. The same
 * names appear in grammar/lql.y's %fallback list; test_parser checks every entry lexes
 * to its own code, so the two cannot drift silently.
 */
#include <string.h>
#include <strings.h>

#include "parse_int.h"

#define LQL_KEYWORDS(X) \
    X(ALL) X(ALPHA) X(AND) X(APPLY) X(AS) X(ASC) X(AT) X(ATTENTION) X(BEGIN) X(BRIEF) \
    X(BROWSE) X(BY) X(COMPACT) X(COMPARE) X(COMPILE) X(COMPONENTS) X(COMPOSE) X(CONFIDENCE) \
    X(CONFLICT) X(CURRENT) X(DECOMPOSE) X(DELETE) X(DENSE) X(DESC) X(DESCRIBE) X(DIFF) \
    X(DTYPE) X(EDGES) X(ENTITIES) X(EXAMPLES) X(EXPLAIN) X(EXTRACT) X(FAIL) X(FEATURES) \
    X(FOR) X(FORMAT) X(FROM) X(GENERATE) X(GGUF) X(HIGHEST_CONFIDENCE) X(HISTORY) X(HYBRID) X(IDS) X(IN) X(INFER) \
    X(INFERENCE) X(INSERT) X(INTO) X(JOURNAL) X(KNN) X(KNOWLEDGE) X(LAST) X(LAST_WINS) \
    X(LAYER) X(LAYERS) X(LIKE) X(LIMIT) X(MEMIT) X(MODE) X(MODEL) X(MODELS) X(NEAREST) X(ON) \
    X(ONLY) X(ORDER) X(OUTPUT) X(PATCH) X(PATCHES) X(PHYSICAL) X(POSITIONS) X(PROFILE) \
    X(PURE) X(RAW) X(RELATION) X(RELATIONS) X(REMOVE) X(REPRESENT) X(REPRESENTATIONS) \
    X(ROLLBACK) X(SAFETENSORS) X(SAVE) X(SEED) X(SELECT) X(SET) X(SHOW) X(STATS) X(SYNTAX) X(TEMPERATURE) \
    X(TO) X(TOKENIZE) X(TOP) X(TOP_P) X(TRACE) X(UNDO) X(UPDATE) X(USE) X(VALUES) X(VERBOSE) \
    X(VINDEX) X(WALK) X(WEIGHTS) X(WHERE) X(WITH)

static const struct { const char *name; int code; } kw[] = {
#define X(k) {#k, LQL_TK_##k},
    LQL_KEYWORDS(X)
#undef X
};
#define NKW (sizeof kw / sizeof kw[0])

int lql_keyword_code(const char *z, int n)
{
    size_t lo = 0, hi = NKW;
    while (lo < hi) {           /* binary search; the table is sorted (test_parser checks) */
        size_t mid = (lo + hi) / 2;
        int c = strncasecmp(kw[mid].name, z, (size_t)n);
        if (c == 0 && kw[mid].name[n] != 0) c = 1;
        if (c == 0) return kw[mid].code;
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return LQL_TK_ID;
}

size_t lql_keyword_count(void) { return NKW; }

const char *lql_keyword_at(size_t i) { return i < NKW ? kw[i].name : NULL; }
