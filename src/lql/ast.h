/*
 * ast.h — the parsed form of one LQL statement (or a `a |> b` chain of them).
 *
 * The parser (grammar/lql.y) builds statements through the builders declared here, one
 * builder call per grammar action. Every node lives in the lql_arena handed to the parse:
 * freeing the arena frees the whole tree, so no error path can leak.
 *
 * Consume rule: builders accept NULL for any node argument (an earlier allocation failed
 * or an earlier builder reported an error) and then return NULL themselves; they never
 * free their inputs, because the arena owns everything. The first error a builder finds
 * is recorded in the parse context and stops the parse.
 *
 * Positions: every span is 1-based line and column within the text given to lql_parse,
 * with len the culprit's length in bytes (for the `^~~` underline).
 */
#ifndef LQL_AST_H
#define LQL_AST_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- errors */

enum {
    LQL_OK = 0,
    LQL_ESYNTAX,      /* lexer or parser rejected the text */
    LQL_EEXEC,        /* a statement failed while running (bad value, storage error...) */
    LQL_EREFUSED,     /* a statement or clause this build does not provide */
    LQL_ENOMEM,
    LQL_ECANCEL,      /* Ctrl-C */
    LQL_ESTALE        /* another session changed the journal under an edit (run again) */
};

typedef struct lql_span { int line, col, len; } lql_span;

/* An error as a value. line/col 0 mean "no position" (the whole statement). msg is
 * lower-case, says what and why and quotes the culprit. Only the shell prints it. */
typedef struct lql_err {
    int code;               /* LQL_E*, 0 when clear */
    int line, col, len;     /* where, within the statement text given to lql_parse */
    char msg[1024];         /* room for a storage error (VX_ERR_MAX) and its statement prefix */
} lql_err;

/* Fill e (when not NULL) at span `at` (NULL: no position); returns -1. */
int lql_errf(lql_err *e, int code, const lql_span *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---------------------------------------------------------------- allocation */

/* Every allocation of the language front end (arena chunks, the parser's stack) goes
 * through lql_malloc, so tests can make the Nth call fail: lql_fail_after(n) lets n more
 * calls succeed and fails the rest until lql_fail_after(-1). */
void *lql_malloc(size_t n);
void lql_fail_after(int n);

/* ---------------------------------------------------------------- arena */

typedef struct lql_arena lql_arena;

/* A bump allocator: allocations live until lql_arena_free. NULL on out-of-memory. */
lql_arena *lql_arena_new(void);
void lql_arena_free(lql_arena *a);
void *lql_arena_alloc(lql_arena *a, size_t n);          /* zeroed, 16-byte aligned */
char *lql_arena_strndup(lql_arena *a, const char *z, size_t n);

/* ---------------------------------------------------------------- tokens */

/* A token is a span of the source text (not NUL-terminated). */
typedef struct lql_token {
    const char *z;
    int n;
    int line, col;          /* 1-based */
} lql_token;

/* ---------------------------------------------------------------- values */

typedef enum lql_vkind { LQL_V_INT = 1, LQL_V_FLOAT, LQL_V_STR, LQL_V_LIST } lql_vkind;

/* A literal: integer, float, string (escapes resolved), or a parenthesised list (IN). */
typedef struct lql_value {
    lql_vkind kind;
    int64_t i;               /* LQL_V_INT */
    double f;                /* LQL_V_FLOAT; also set (= i) for LQL_V_INT */
    const char *s;           /* LQL_V_STR, NUL-terminated */
    struct lql_value *items; /* LQL_V_LIST: n items (scalars only) */
    int n;
    lql_span at;
} lql_value;

/* Comparison operators of a WHERE condition. */
#define LQL_CMPOPS(X) X(EQ, "=") X(NE, "!=") X(GT, ">") X(LT, "<") X(GE, ">=") \
    X(LE, "<=") X(LIKE, "LIKE") X(IN, "IN")
typedef enum lql_cmpop {
#define X(name, text) LQL_OP_##name,
    LQL_CMPOPS(X)
#undef X
    LQL_OP_COUNT
} lql_cmpop;
const char *lql_cmpop_text(lql_cmpop op);

/* One condition `field op value`; conditions of a WHERE are joined by AND (next). */
typedef struct lql_cond {
    const char *field;       /* lower-cased */
    lql_span field_at;
    lql_cmpop op;
    lql_value val;
    struct lql_cond *next;
    struct lql_cond *tail;   /* the parser's: on a list's first cond, its last (linear AND) */
} lql_cond;

/* One `field = value` of UPDATE … SET. */
typedef struct lql_assign {
    const char *field;       /* lower-cased */
    lql_span field_at;
    lql_value val;
    struct lql_assign *next;
} lql_assign;

/* A layer range: `INT-INT` (lo <= hi, checked by the parser) or ALL. */
typedef struct lql_range {
    int all;                 /* 1: every layer; lo/hi unused */
    int lo, hi;              /* inclusive */
    lql_span at;             /* the range as written */
} lql_range;

/* ---------------------------------------------------------------- statements */

/* Statement kinds: X(KIND, "NAME as .help lists it"). */
#define LQL_STMTS(X) \
    X(USE, "USE") X(TOKENIZE, "TOKENIZE") X(EXTRACT, "EXTRACT") X(STATS, "STATS") \
    X(SHOW_LAYERS, "SHOW LAYERS") X(SHOW_FEATURES, "SHOW FEATURES") \
    X(SHOW_RELATIONS, "SHOW RELATIONS") X(SHOW_ENTITIES, "SHOW ENTITIES") \
    X(SHOW_MODELS, "SHOW MODELS") X(SHOW_COMPONENTS, "SHOW COMPONENTS") \
    X(SHOW_REPRESENTATIONS, "SHOW REPRESENTATIONS") X(SHOW_PATCHES, "SHOW PATCHES") \
    X(SHOW_HISTORY, "SHOW HISTORY") \
    X(WALK, "WALK") X(EXPLAIN_WALK, "EXPLAIN WALK") X(DESCRIBE, "DESCRIBE") \
    X(SELECT, "SELECT") X(INFER, "INFER") X(EXPLAIN_INFER, "EXPLAIN INFER") \
    X(TRACE, "TRACE") \
    X(INSERT, "INSERT") X(DELETE, "DELETE") X(UPDATE, "UPDATE") \
    X(BEGIN_PATCH, "BEGIN PATCH") X(SAVE_PATCH, "SAVE PATCH") \
    X(APPLY_PATCH, "APPLY PATCH") X(REMOVE_PATCH, "REMOVE PATCH") \
    X(UNDO, "UNDO") X(ROLLBACK, "ROLLBACK") X(DIFF, "DIFF") X(COMPILE, "COMPILE") \
    X(COMPACT, "COMPACT") X(REPRESENT, "REPRESENT")
typedef enum lql_kind {
#define X(kind, name) LQL_S_##kind,
    LQL_STMTS(X)
#undef X
    LQL_S_COUNT
} lql_kind;
const char *lql_kind_name(lql_kind k);

/* Optional clauses: X(KIND, "text as the user writes it"). Which clauses a statement
 * accepts is decided by the grammar; lql_stmt.has records which were given. */
#define LQL_CLAUSES(X) \
    X(TOP, "TOP") X(LAYERS, "LAYERS") X(MODE, "MODE") X(COMPARE, "COMPARE") \
    X(VERBOSE, "VERBOSE") X(BRIEF, "BRIEF") X(RAW, "RAW") X(BAND, "band") \
    X(AT_LAYER, "AT LAYER") X(LAYER, "LAYER") X(RELATIONS_ONLY, "RELATIONS ONLY") \
    X(NEAREST, "NEAREST TO") X(WHERE, "WHERE") X(ORDER, "ORDER BY") X(LIMIT, "LIMIT") \
    X(GENERATE, "GENERATE") X(TEMPERATURE, "TEMPERATURE") X(TOP_P, "TOP_P") \
    X(SEED, "SEED") X(WITH_ATTENTION, "WITH ATTENTION") X(FOR, "FOR") X(WITH_IDS, "WITH IDS") \
    X(DECOMPOSE, "DECOMPOSE") X(POSITIONS, "POSITIONS") X(SAVE, "SAVE") X(FROM, "FROM") \
    X(CONFIDENCE, "CONFIDENCE") X(ALPHA, "ALPHA") X(WITH_EXAMPLES, "WITH EXAMPLES") \
    X(RELATION, "RELATION") X(PHYSICAL, "PHYSICAL") X(INTO_PATCH, "INTO PATCH") \
    X(ON_CONFLICT, "ON CONFLICT") X(INTO_VINDEX, "INTO VINDEX") X(WITH, "WITH") \
    X(DTYPE, "DTYPE") X(JOURNAL, "JOURNAL") X(PROFILE, "PROFILE") \
    X(INTO_MODEL, "INTO MODEL") X(FORMAT, "FORMAT")
typedef enum lql_clause_kind {
#define X(kind, text) LQL_C_##kind,
    LQL_CLAUSES(X)
#undef X
    LQL_C_COUNT
} lql_clause_kind;
const char *lql_clause_text(lql_clause_kind c);

/* Enumerated clause values. */
typedef enum lql_mode {         /* WALK MODE / INSERT MODE */
    LQL_MODE_NONE = 0,
    LQL_MODE_HYBRID, LQL_MODE_PURE, LQL_MODE_DENSE,      /* WALK */
    LQL_MODE_KNN, LQL_MODE_COMPOSE, LQL_MODE_MEMIT        /* INSERT */
} lql_mode;
typedef enum lql_band {         /* DESCRIBE / EXPLAIN INFER band */
    LQL_BAND_NONE = 0, LQL_BAND_ALL, LQL_BAND_SYNTAX, LQL_BAND_KNOWLEDGE, LQL_BAND_OUTPUT
} lql_band;
/* A band as the user writes it ("KNOWLEDGE", "ALL LAYERS"; "" for none): LQL_C_BAND's own
 * name ("band") is nobody's word. */
const char *lql_band_text(lql_band band);
typedef enum lql_positions { LQL_POS_LAST = 0, LQL_POS_ALL } lql_positions;
typedef enum lql_source { LQL_FROM_EDGES = 1, LQL_FROM_FEATURES, LQL_FROM_ENTITIES } lql_source;
typedef enum lql_conflict {
    LQL_CONFLICT_LAST_WINS = 0, LQL_CONFLICT_HIGHEST_CONFIDENCE, LQL_CONFLICT_FAIL
} lql_conflict;
typedef enum lql_format {       /* COMPILE … INTO MODEL … FORMAT x */
    LQL_FORMAT_SAFETENSORS = 0, LQL_FORMAT_GGUF
} lql_format;
typedef enum lql_level {        /* EXTRACT … WITH; WEIGHTS is the legacy name of INFERENCE */
    LQL_LEVEL_DEFAULT = 0, LQL_LEVEL_BROWSE, LQL_LEVEL_INFERENCE, LQL_LEVEL_ALL
} lql_level;

/* One statement. Fields not used by a kind stay zero / NULL. Strings are NUL-terminated
 * with escapes resolved. A clause's value is meaningful only when lql_has(st, clause). */
typedef struct lql_stmt {
    lql_kind kind;
    lql_span at;             /* the statement's first keyword */
    const char *src;         /* the statement's source text (n bytes, no trailing ';') */
    size_t nsrc;

    /* Operands (not clauses):
     *   arg:  USE path · TOKENIZE text · EXTRACT checkpoint dir · WALK / EXPLAIN WALK /
     *         INFER / EXPLAIN INFER / TRACE prompt (NULL for TRACE FROM) · DESCRIBE entity ·
     *         BEGIN/REMOVE PATCH name · SAVE PATCH file (NULL: none given) · APPLY PATCH
     *         file · DIFF left side (NULL: CURRENT) · COMPACT container (NULL: the bound
     *         one) · REPRESENT object
     *   arg2: EXTRACT INTO dir · DIFF right side (NULL: CURRENT) · REPRESENT dtype
     *         (lower-cased) · COMPILE's output dir (INTO MODEL: the export target) */
    const char *arg;
    lql_span arg_at;
    const char *arg2;
    lql_span arg2_at;

    /* INSERT INTO EDGES (entity, relation, target) VALUES (…), in that order whatever
     * the order of the column list. */
    const char *entity, *relation_v, *target;
    lql_span entity_at, relation_at, target_at;

    /* SELECT: fields (lower-cased; nfields 0 = `*`) and source. */
    const char **fields;
    lql_span *fields_at;
    int nfields;
    lql_source from;

    /* UPDATE EDGES SET … (in the order written). */
    lql_assign *sets;

    /* ROLLBACK TO n / SHOW FEATURES n (the layer) / SHOW LAYERS range (in `layers`). */
    int64_t n;
    lql_span n_at;

    /* Clauses. */
    uint64_t has;                          /* bit (1 << LQL_C_x) per clause given */
    lql_span clause_at[LQL_C_COUNT];       /* where each given clause starts */
    int64_t top;                           /* TOP n */
    lql_range layers;                      /* LAYERS range, SHOW LAYERS range */
    lql_mode mode;                         /* MODE x */
    lql_band band;                         /* ALL LAYERS | SYNTAX | KNOWLEDGE | OUTPUT */
    int64_t layer;                         /* AT LAYER n, NEAREST … AT LAYER n, DIFF LAYER n */
    const char *nearest;                   /* NEAREST TO "x" */
    lql_cond *where;                       /* WHERE a AND b … */
    const char *order_field;               /* ORDER BY field (lower-cased) */
    lql_span order_at;
    int order_desc;                        /* 1: DESC */
    int64_t limit;                         /* LIMIT n */
    int64_t generate;                      /* GENERATE n */
    double temperature;                    /* TEMPERATURE x */
    double top_p;                          /* TOP_P x */
    uint64_t seed;                         /* SEED n */
    const char *for_token;                 /* TRACE FOR "t"; NULL with FOR n */
    int for_id;                            /* TRACE FOR n: a token id */
    lql_positions positions;               /* POSITIONS ALL|LAST */
    const char *save_path;                 /* TRACE SAVE "file" */
    const char *from_path;                 /* TRACE FROM "file" */
    double confidence;                     /* CONFIDENCE x */
    double alpha;                          /* ALPHA x */
    const char *relation;                  /* DIFF RELATION "r" */
    const char *into;                      /* INTO PATCH "f" / INTO VINDEX "d" */
    lql_conflict conflict;                 /* ON CONFLICT x */
    lql_format format;                     /* COMPILE … INTO MODEL … FORMAT x */
    lql_level level;                       /* EXTRACT WITH x */
    const char *dtype;                     /* EXTRACT DTYPE x (lower-cased, validated) */
    const char *journal;                   /* USE … JOURNAL "path" */
    const char *profile;                   /* USE … PROFILE "name" */

    struct lql_stmt *next;                 /* `a |> b`: b */
    struct lql_stmt *tail;                 /* the parser's: on a chain's first, its last */
} lql_stmt;

static inline int lql_has(const lql_stmt *st, lql_clause_kind c)
{
    return (int)((st->has >> c) & 1u);
}

/* ---------------------------------------------------------------- parsing */

/* Parse one statement chain (`a |> b |> …`, optionally ending in `;`) from text[0..n).
 * Nodes come from arena. Returns 0 and *out, or -1 with e filled (LQL_ESYNTAX: position
 * and `near "X": …` / `incomplete input` / `unrecognized token: "…"` /
 * `unterminated string`). Text holding only blanks and comments gives *out = NULL. */
int lql_parse(const char *text, size_t n, lql_arena *arena, lql_stmt **out, lql_err *e);

/* How error messages and echoed source lines show the text at p[0..n) (n > 0): the byte
 * length of the character there when it is shown as it is (a tab, or a printable
 * character that is valid UTF-8), or 0 when its first byte is shown as `\xNN` (a control
 * byte, or a byte that does not start valid UTF-8). *cols (unless NULL) receives the
 * terminal columns it takes: 4 for `\xNN`, 2 for a wide (East Asian) character, 0 for a
 * combining mark, so a caret under the culprit lines up. */
int lql_shown_len(const char *p, size_t n, int *cols);

/* Split: find the end of the first statement in text[0..n): the offset just past its
 * terminating `;` (outside strings and comments), or n when there is none. Returns 1 when
 * a `;` was found, 0 otherwise. text[n] must be NUL (the lexer's sentinel): no copy is
 * made, so splitting a text into statements is linear in its length. */
int lql_split(const char *text, size_t n, size_t *end);

/* Is text a complete input for the REPL: every string closed and the last token a `;`
 * (comments and blanks after it allowed), or no token at all (a comment line)? 1 or 0. */
int lql_complete(const char *text);
/* lql_complete over a text that grows: text[0..n) NUL-terminated; *resume (0 at first)
 * is where the previous call's scan can go on, so feeding a statement line by line lexes
 * each line about once. */
int lql_complete_from(const char *text, size_t n, size_t *resume);

/* Completion: the keywords the grammar accepts after text[0..n) (the start of a statement
 * chain, the word being completed excluded), passed to fn in alphabetical order. Returns
 * how many, or -1 when a name is accepted there (then every keyword is) or the text does
 * not lex or parse as a prefix. */
int lql_next_keywords(const char *text, size_t n, void (*fn)(void *ctx, const char *kw),
                      void *ctx);

/* Keywords, in alphabetical order: for completion, `.help` and the docs. */
size_t lql_keyword_count(void);
const char *lql_keyword_at(size_t i);

#endif
