/*
 * test_parser.c — the LQL lexer and parser: every statement form of LQL.md parses into
 * the AST fields its handler reads, and malformed input fails with pinned error text and
 * position. Also the keyword table, the splitter and the REPL completeness check.
 */
#include <stdlib.h>
#include <string.h>

#include "t.h"
#include "ast.h"

static lql_arena *ar;
static char errbuf[1100];

/* Parse text; NULL on error with errbuf = "LINE:COL: message". */
static lql_stmt *P(const char *text)
{
    lql_err e;
    lql_stmt *st = NULL;
    lql_arena_free(ar);
    ar = lql_arena_new();
    errbuf[0] = 0;
    if (lql_parse(text, strlen(text), ar, &st, &e) < 0) {
        snprintf(errbuf, sizeof errbuf, "%d:%d: %s", e.line, e.col, e.msg);
        return NULL;
    }
    return st;
}

/* The error text of a statement that must fail. */
static const char *E(const char *text)
{
    lql_stmt *st = P(text);
    return st ? "(parsed)" : errbuf;
}

#define HAS(st, c) ((st) && lql_has((st), LQL_C_##c))

static void session_statements(void)
{
    lql_stmt *st = P("USE \"models/tiny.vindex3\";");
    CHECK(st && st->kind == LQL_S_USE);
    CHECK_STR(st ? st->arg : NULL, "models/tiny.vindex3");
    CHECK(st && st->at.line == 1 && st->at.col == 1 && st->at.len == 3);
    CHECK(st && st->nsrc == strlen("USE \"models/tiny.vindex3\""));
    st = P("use 'x' JOURNAL \"j.db\" PROFILE 'exact'");
    CHECK(st && st->kind == LQL_S_USE && HAS(st, JOURNAL) && HAS(st, PROFILE));
    CHECK_STR(st ? st->journal : NULL, "j.db");
    CHECK_STR(st ? st->profile : NULL, "exact");
    st = P("TOKENIZE \"a\\tb\\n\\\\ \\q\\\" 'c'\"");
    CHECK(st && st->kind == LQL_S_TOKENIZE);
    CHECK_STR(st ? st->arg : NULL, "a\tb\n\\ q\" 'c'");
    st = P("EXTRACT MODEL \"hf\" INTO \"out.vindex3\" WITH INFERENCE LAYERS 0-3 DTYPE BF16");
    CHECK(st && st->kind == LQL_S_EXTRACT && st->level == LQL_LEVEL_INFERENCE);
    CHECK_STR(st ? st->arg : NULL, "hf");
    CHECK_STR(st ? st->arg2 : NULL, "out.vindex3");
    CHECK(st && st->layers.lo == 0 && st->layers.hi == 3 && !st->layers.all);
    CHECK_STR(st ? st->dtype : NULL, "bf16");
    st = P("EXTRACT MODEL 'a' INTO 'b' WITH WEIGHTS");
    CHECK(st && st->level == LQL_LEVEL_INFERENCE);
    st = P("EXTRACT MODEL 'a' INTO 'b' WITH BROWSE");
    CHECK(st && st->level == LQL_LEVEL_BROWSE);
    st = P("EXTRACT MODEL 'a' INTO 'b' WITH ALL LAYERS ALL");
    CHECK(st && st->level == LQL_LEVEL_ALL && st->layers.all);
    st = P("STATS");
    CHECK(st && st->kind == LQL_S_STATS && st->has == 0);
    st = P("SHOW LAYERS");
    CHECK(st && st->kind == LQL_S_SHOW_LAYERS && !HAS(st, LAYERS));
    st = P("SHOW LAYERS 2-5;");
    CHECK(st && st->kind == LQL_S_SHOW_LAYERS && HAS(st, LAYERS) && st->layers.lo == 2 && st->layers.hi == 5);
    st = P("SHOW FEATURES 7 WHERE token = 'Paris' AND confidence >= 0.5 LIMIT 3");
    CHECK(st && st->kind == LQL_S_SHOW_FEATURES && st->layer == 7 && st->limit == 3);
    CHECK(st && st->where && st->where->op == LQL_OP_EQ && st->where->next
          && st->where->next->op == LQL_OP_GE && st->where->next->val.kind == LQL_V_FLOAT);
    CHECK_STR(st && st->where ? st->where->field : NULL, "token");
    st = P("SHOW RELATIONS AT LAYER 3 WITH EXAMPLES");
    CHECK(st && st->kind == LQL_S_SHOW_RELATIONS && st->layer == 3 && HAS(st, WITH_EXAMPLES));
    st = P("SHOW ENTITIES LIMIT 5 AT LAYER 1");
    CHECK(st && st->kind == LQL_S_SHOW_ENTITIES && st->limit == 5 && st->layer == 1);
    static const struct { const char *text; lql_kind kind; } simple[] = {
        {"SHOW MODELS", LQL_S_SHOW_MODELS}, {"show components", LQL_S_SHOW_COMPONENTS},
        {"Show Representations", LQL_S_SHOW_REPRESENTATIONS}, {"SHOW PATCHES", LQL_S_SHOW_PATCHES},
        {"SHOW HISTORY", LQL_S_SHOW_HISTORY}, {"UNDO", LQL_S_UNDO}, {"SAVE PATCH", LQL_S_SAVE_PATCH},
    };
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++) {
        st = P(simple[i].text);
        CHECK_MSG(st && st->kind == simple[i].kind && st->has == 0 && !st->arg, "%s", simple[i].text);
    }
}

static void browse_statements(void)
{
    lql_stmt *st = P("WALK \"The capital of France is\" TOP 5 LAYERS 0-21 MODE PURE COMPARE");
    CHECK(st && st->kind == LQL_S_WALK && st->top == 5 && st->layers.hi == 21
          && st->mode == LQL_MODE_PURE && HAS(st, COMPARE));
    CHECK_STR(st ? st->arg : NULL, "The capital of France is");
    st = P("WALK 'x' MODE HYBRID");
    CHECK(st && st->mode == LQL_MODE_HYBRID && !HAS(st, TOP));
    st = P("WALK 'x' MODE DENSE LAYERS ALL");
    CHECK(st && st->mode == LQL_MODE_DENSE && st->layers.all);
    st = P("EXPLAIN WALK 'x' VERBOSE TOP 3 LAYERS 1-2");
    CHECK(st && st->kind == LQL_S_EXPLAIN_WALK && HAS(st, VERBOSE) && st->top == 3 && st->layers.lo == 1);
    st = P("DESCRIBE \"France\"");
    CHECK(st && st->kind == LQL_S_DESCRIBE && st->band == LQL_BAND_NONE && st->has == 0);
    st = P("DESCRIBE 'France' ALL LAYERS VERBOSE RELATIONS ONLY");
    CHECK(st && st->band == LQL_BAND_ALL && HAS(st, VERBOSE) && HAS(st, RELATIONS_ONLY));
    st = P("DESCRIBE 'France' KNOWLEDGE BRIEF");
    CHECK(st && st->band == LQL_BAND_KNOWLEDGE && HAS(st, BRIEF));
    st = P("DESCRIBE 'France' SYNTAX RAW");
    CHECK(st && st->band == LQL_BAND_SYNTAX && HAS(st, RAW));
    st = P("DESCRIBE 'France' OUTPUT AT LAYER 4");
    CHECK(st && st->band == LQL_BAND_OUTPUT && st->layer == 4);
    st = P("SELECT * FROM EDGES WHERE entity = 'France' AND relation LIKE 'cap%' ORDER BY score DESC LIMIT 10");
    CHECK(st && st->kind == LQL_S_SELECT && st->from == LQL_FROM_EDGES && st->nfields == 0);
    CHECK(st && st->where && st->where->next && st->where->next->op == LQL_OP_LIKE);
    CHECK(st && st->order_desc == 1 && st->limit == 10);
    CHECK_STR(st ? st->order_field : NULL, "score");
    st = P("SELECT layer, Feature, token FROM FEATURES WHERE layer IN (1, 2, 3) AND score > -0.5 ORDER BY layer ASC");
    CHECK(st && st->from == LQL_FROM_FEATURES && st->nfields == 3 && st->order_desc == 0);
    CHECK_STR(st && st->nfields == 3 ? st->fields[1] : NULL, "feature");
    CHECK(st && st->where && st->where->op == LQL_OP_IN && st->where->val.kind == LQL_V_LIST
          && st->where->val.n == 3 && st->where->val.items[2].i == 3);
    CHECK(st && st->where && st->where->next && st->where->next->val.kind == LQL_V_FLOAT
          && st->where->next->val.f == -0.5 && st->where->next->op == LQL_OP_GT);
    /* exponents, and a literal longer than any fixed buffer read whole */
    st = P("SELECT * FROM EDGES WHERE score > 2.5e-1 AND score < -1E3 AND score != 1e+2");
    CHECK(st && st->where && st->where->val.kind == LQL_V_FLOAT && st->where->val.f == 0.25
          && st->where->next->val.f == -1000.0 && st->where->next->next->val.f == 100.0);
    st = P("SELECT * FROM EDGES WHERE score < 1000000000000000000000000000000000000000000000000000000000000000000000.5");
    CHECK(st && st->where && st->where->val.f == 1e69);
    CHECK_STR(E("SELECT * FROM EDGES WHERE score > 1e309"), "1:35: number out of range: 1e309");
    /* underflow: a nonzero literal that would read as 0 is refused; a zero one is 0 */
    CHECK_STR(E("SELECT * FROM EDGES WHERE score > 1e-400"), "1:35: number out of range: 1e-400");
    st = P("SELECT * FROM EDGES WHERE score > 0.000e-400 AND score > 1e-310");
    CHECK(st && st->where && st->where->val.f == 0 && st->where->next->val.f > 0);
    CHECK_STR(E("SELECT * FROM EDGES WHERE score > 1e"), "1:36: near \"e\": expected AND, LIMIT, NEAREST, ORDER, WHERE, |>, ; or end of input");
    st = P("SELECT entity FROM ENTITIES NEAREST TO 'Paris' AT LAYER 5 LIMIT 4");
    CHECK(st && st->from == LQL_FROM_ENTITIES && HAS(st, NEAREST) && st->layer == 5 && st->limit == 4);
    CHECK_STR(st ? st->nearest : NULL, "Paris");
    st = P("SELECT * FROM EDGES WHERE layer != 3 AND feature < 10 AND score <= 2 AND layer = -1");
    CHECK(st && st->where && st->where->op == LQL_OP_NE && st->where->next->op == LQL_OP_LT
          && st->where->next->next->op == LQL_OP_LE && st->where->next->next->next->val.i == -1);
    st = P("TRACE \"The cat\" FOR \"mat\" DECOMPOSE LAYERS 0-3 POSITIONS ALL SAVE 't.bin'");
    CHECK(st && st->kind == LQL_S_TRACE && HAS(st, DECOMPOSE) && st->positions == LQL_POS_ALL);
    CHECK_STR(st ? st->for_token : NULL, "mat");
    CHECK_STR(st ? st->save_path : NULL, "t.bin");
    st = P("TRACE FROM 't.bin' POSITIONS LAST");
    CHECK(st && st->kind == LQL_S_TRACE && !st->arg && st->positions == LQL_POS_LAST);
    CHECK_STR(st ? st->from_path : NULL, "t.bin");
}

static void execution_statements(void)
{
    lql_stmt *st = P("INFER \"The cat sat on the\" TOP 3");
    CHECK(st && st->kind == LQL_S_INFER && st->top == 3 && !HAS(st, GENERATE));
    st = P("INFER 'x' GENERATE 20 TEMPERATURE 0.7 TOP_P 0.9 SEED 42 COMPARE");
    CHECK(st && st->generate == 20 && st->temperature == 0.7 && st->top_p == 0.9 && st->seed == 42
          && HAS(st, COMPARE));
    st = P("INFER 'x' TEMPERATURE 1");
    CHECK(st && st->temperature == 1.0);
    st = P("EXPLAIN INFER 'x' TOP 2 WITH ATTENTION KNOWLEDGE LAYERS 3-4");
    CHECK(st && st->kind == LQL_S_EXPLAIN_INFER && st->top == 2 && HAS(st, WITH_ATTENTION)
          && st->band == LQL_BAND_KNOWLEDGE && st->layers.lo == 3 && st->layers.hi == 4);
}

static void edit_statements(void)
{
    lql_stmt *st = P("INSERT INTO EDGES (entity, relation, target) VALUES (\"France\", \"capital\", \"Paris\") AT LAYER 20 CONFIDENCE 0.9 ALPHA 0.1 MODE COMPOSE");
    CHECK(st && st->kind == LQL_S_INSERT && st->layer == 20 && st->confidence == 0.9
          && st->alpha == 0.1 && st->mode == LQL_MODE_COMPOSE);
    CHECK_STR(st ? st->entity : NULL, "France");
    CHECK_STR(st ? st->relation_v : NULL, "capital");
    CHECK_STR(st ? st->target : NULL, "Paris");
    st = P("INSERT INTO EDGES (target, entity, relation) VALUES ('P', 'F', 'c') MODE = KNN");
    CHECK_STR(st ? st->entity : NULL, "F");
    CHECK_STR(st ? st->target : NULL, "P");
    CHECK(st && st->mode == LQL_MODE_KNN);
    st = P("INSERT INTO EDGES (entity, relation, target) VALUES ('a', 'b', 'c') MODE MEMIT");
    CHECK(st && st->mode == LQL_MODE_MEMIT);
    st = P("DELETE FROM EDGES WHERE layer = 3 AND feature = 17");
    CHECK(st && st->kind == LQL_S_DELETE && st->where && st->where->next && st->where->next->val.i == 17);
    st = P("UPDATE EDGES SET target = 'Lyon', confidence = 0.5 WHERE layer = 3 AND feature = 9");
    CHECK(st && st->kind == LQL_S_UPDATE && st->sets && st->sets->next && st->sets->next->val.f == 0.5);
    CHECK_STR(st && st->sets ? st->sets->val.s : NULL, "Lyon");
    st = P("BEGIN PATCH 'fix'");
    CHECK(st && st->kind == LQL_S_BEGIN_PATCH);
    CHECK_STR(st ? st->arg : NULL, "fix");
    st = P("SAVE PATCH 'fix.vlp'");
    CHECK(st && st->kind == LQL_S_SAVE_PATCH);
    CHECK_STR(st ? st->arg : NULL, "fix.vlp");
    st = P("APPLY PATCH 'fix.vlp'");
    CHECK(st && st->kind == LQL_S_APPLY_PATCH);
    st = P("REMOVE PATCH 'fix'");
    CHECK(st && st->kind == LQL_S_REMOVE_PATCH);
    st = P("ROLLBACK TO 3");
    CHECK(st && st->kind == LQL_S_ROLLBACK && st->n == 3);
    st = P("DIFF 'a.vindex3' CURRENT LAYER 3 RELATION 'capital' LIMIT 7 PHYSICAL INTO PATCH 'd.vlp'");
    CHECK(st && st->kind == LQL_S_DIFF && st->arg2 == NULL && st->layer == 3 && st->limit == 7
          && HAS(st, PHYSICAL));
    CHECK_STR(st ? st->arg : NULL, "a.vindex3");
    CHECK_STR(st ? st->relation : NULL, "capital");
    CHECK_STR(st ? st->into : NULL, "d.vlp");
    st = P("DIFF CURRENT 'b'");
    CHECK(st && st->arg == NULL);
    CHECK_STR(st ? st->arg2 : NULL, "b");
    st = P("COMPILE CURRENT INTO VINDEX 'out.vindex3' ON CONFLICT HIGHEST_CONFIDENCE");
    CHECK(st && st->kind == LQL_S_COMPILE && st->conflict == LQL_CONFLICT_HIGHEST_CONFIDENCE);
    CHECK_STR(st ? st->arg2 : NULL, "out.vindex3");
    st = P("COMPILE CURRENT INTO VINDEX 'o' ON CONFLICT FAIL");
    CHECK(st && st->conflict == LQL_CONFLICT_FAIL);
    st = P("COMPACT");
    CHECK(st && st->kind == LQL_S_COMPACT && !st->arg && !HAS(st, INTO_VINDEX));
    st = P("COMPACT 'a' INTO VINDEX 'b'");
    CHECK_STR(st ? st->into : NULL, "b");
    CHECK_STR(st ? st->arg : NULL, "a");
    st = P("REPRESENT 'target.decoder_stack' AS Q4_K");
    CHECK(st && st->kind == LQL_S_REPRESENT);
    CHECK_STR(st ? st->arg2 : NULL, "q4_k");
    st = P("REPRESENT decoder AS f16");
    CHECK_STR(st ? st->arg : NULL, "decoder");
    st = P("STATS |> SHOW LAYERS 0-1 |> INFER 'x';");
    CHECK(st && st->kind == LQL_S_STATS && st->next && st->next->kind == LQL_S_SHOW_LAYERS
          && st->next->next && st->next->next->kind == LQL_S_INFER);
    CHECK(st && st->nsrc == 5 && st->next && st->next->nsrc == strlen("SHOW LAYERS 0-1"));
}

static void lexical(void)
{
    /* keywords as field names, any case */
    lql_stmt *st = P("select LAYER, limit, Top from edges where confidence > 1 and RELATION = 'x'");
    CHECK(st && st->nfields == 3);
    CHECK_STR(st && st->nfields == 3 ? st->fields[1] : NULL, "limit");
    CHECK_STR(st && st->where && st->where->next ? st->where->next->field : NULL, "relation");
    /* comments, multi-line positions */
    st = P("-- a comment\n  WALK -- inline\n 'x' TOP 1 -- end");
    CHECK(st && st->at.line == 2 && st->at.col == 3 && st->arg_at.line == 3 && st->arg_at.col == 2);
    CHECK(P("  -- only a comment\n") == NULL && errbuf[0] == 0);
    /* every keyword lexes to itself, the table is sorted */
    size_t nk = lql_keyword_count();
    CHECK(nk > 90);
    for (size_t i = 1; i < nk; i++)
        CHECK_MSG(strcmp(lql_keyword_at(i - 1), lql_keyword_at(i)) < 0, "%s", lql_keyword_at(i));
    /* splitting and completeness */
    size_t end;
    const char *two = "USE 'a;b'; -- x;\nSTATS;";
    CHECK(lql_split(two, strlen(two), &end) == 1 && end == strlen("USE 'a;b';"));
    CHECK(lql_split("STATS", 5, &end) == 0 && end == 5);
    CHECK(lql_complete("STATS;") == 1);
    CHECK(lql_complete("STATS; -- done") == 1);
    CHECK(lql_complete("WALK 'a;") == 0);
    CHECK(lql_complete("WALK 'a'") == 0);
    CHECK(lql_complete("WALK 'a' -- ;") == 0);
    CHECK(lql_complete("WALK 'a'\n  TOP 3;\n") == 1);
    CHECK(lql_complete("  -- just a comment") == 1);
    CHECK(lql_complete("'") == 0);
}

static char kwbuf[400];
static void collect(void *ctx, const char *kw)
{
    (void)ctx;
    if (kwbuf[0]) strcat(kwbuf, " ");
    strcat(kwbuf, kw);
}

static const char *next_kw(const char *prefix)
{
    kwbuf[0] = 0;
    int n = lql_next_keywords(prefix, strlen(prefix), collect, NULL);
    return n < 0 ? "(any)" : kwbuf;
}

static void completion(void)
{
    CHECK_STR(next_kw("DESC"), "(any)");                 /* DESC alone does not parse */
    CHECK_HAS(next_kw(""), "COMPILE DELETE DESCRIBE DIFF EXPLAIN");
    CHECK(strstr(next_kw(""), "DESC ") == NULL);         /* only statement keywords first */
    CHECK_STR(next_kw("EXPLAIN "), "INFER WALK");
    CHECK_STR(next_kw("WALK 'x' TOP 3 "), "COMPARE LAYERS MODE TOP");
    CHECK_STR(next_kw("WALK 'x' MODE "), "DENSE HYBRID PURE");
    CHECK_STR(next_kw("SELECT * FROM EDGES WHERE "), "(any)"); /* a field name: anything */
    CHECK_STR(next_kw("WALK 'x\n TOP"), "(any)");          /* open string */
    CHECK_STR(next_kw("WALK TOP "), "(any)");               /* not a valid prefix */
}

static void errors(void)
{
    CHECK_STR(E("INFER TOP 3;"), "1:7: near \"TOP\": expected a string");
    CHECK_STR(E("WALK"), "1:5: incomplete input: expected a string");
    CHECK_STR(E("WALK 'x' TOP"), "1:13: incomplete input: expected an integer");
    CHECK_STR(E("WALK 'x' TOP 3.5"), "1:14: near \"3.5\": expected an integer");
    CHECK_STR(E("WALK 'x' TOP -3"), "1:14: near \"-\": expected an integer");
    CHECK_STR(E("WALK 'x' TOP 3 TOP 4"), "1:16: duplicate clause: TOP");
    /* two words for one setting name both as written, not an internal clause name */
    CHECK_STR(E("DESCRIBE 'x' SYNTAX OUTPUT"),
              "1:21: SYNTAX and OUTPUT both name a band; give one");
    CHECK_STR(E("DESCRIBE 'x' ALL LAYERS SYNTAX"),
              "1:25: ALL LAYERS and SYNTAX both name a band; give one");
    CHECK_STR(E("EXPLAIN INFER 'x' KNOWLEDGE KNOWLEDGE"), "1:29: duplicate clause: KNOWLEDGE");
    CHECK_STR(E("DESCRIBE 'x' BRIEF VERBOSE"),
              "1:20: BRIEF and VERBOSE both set the detail; give one");
    CHECK_STR(E("DESCRIBE 'x' VERBOSE AT LAYER 2 RAW"),
              "1:33: VERBOSE and RAW both set the detail; give one");
    CHECK_STR(E("WALK 'x' LAYERS 5-2"), "1:17: invalid range 5-2: start is after end");
    CHECK_STR(E("WALK 'x' LAYERS 5"), "1:18: incomplete input: expected -");
    CHECK_STR(E("WALK 'x' MODE FAST"), "1:15: near \"FAST\": expected DENSE, HYBRID or PURE");
    CHECK_STR(E("WALK \"unterminated"), "1:6: unterminated string");
    CHECK_STR(E("WALK 'x' TOP 3 #"), "1:16: unrecognized token: \"#\"");
    CHECK_STR(E("WALK 'x' TOP 3 \xc3\xa9"), "1:16: unrecognized token: \"\xc3\xa9\"");
    /* a byte that is not UTF-8 is named by its value, as the shell's echo shows it */
    CHECK_STR(E("WALK 'x' TOP 3 \xff"), "1:16: unrecognized token: \"\\xff\"");
    /* a word that starts no statement: the keywords that do, and where GENERATE belongs */
#define STARTERS "APPLY, BEGIN, COMPACT, COMPILE, DELETE, DESCRIBE, DIFF, EXPLAIN, EXTRACT, INFER, INSERT, REMOVE, REPRESENT, ROLLBACK, SAVE, SELECT, SHOW, STATS, TOKENIZE, TRACE, UNDO, UPDATE, USE or WALK"
    CHECK_STR(E("FROB 'x'"), "1:1: near \"FROB\": not a statement; one starts with " STARTERS);
    CHECK_STR(E("WALK 'x' |> FROB"), "1:13: near \"FROB\": not a statement; one starts with " STARTERS);
    CHECK_STR(E("generate 'x' 5"), "1:1: near \"generate\": not a statement; one starts with " STARTERS
              " (GENERATE is INFER's clause: INFER \"prompt\" GENERATE n)");
#undef STARTERS
    CHECK_STR(E("WALK 'x' TOPP 3"), "1:10: near \"TOPP\": expected COMPARE, LAYERS, MODE, TOP, |>, ; or end of input (did you mean TOP?)");
    CHECK_STR(E("DESCRIBE 'x' KNOWLEGDE"), "1:14: near \"KNOWLEGDE\": expected ALL, AT, BRIEF, KNOWLEDGE, OUTPUT, RAW, RELATIONS, SYNTAX, VERBOSE, |>, ; or end of input (did you mean KNOWLEDGE?)");
    CHECK_STR(E("SHOW LAYER"), "1:6: near \"LAYER\": expected COMPONENTS, ENTITIES, FEATURES, HISTORY, LAYERS, MODELS, PATCHES, RELATIONS or REPRESENTATIONS (did you mean LAYERS?)");
    CHECK_STR(E("SELCT * FROM EDGES"), "1:1: near \"SELCT\": syntax error (did you mean SELECT?)");
    CHECK_STR(E("WALK 'x' TO 3"), "1:10: near \"TO\": expected COMPARE, LAYERS, MODE, TOP, |>, ; or end of input");
    /* FROM is read as a field name (keywords fall back to names), so EDGES is the culprit */
    CHECK_STR(E("SELECT FROM EDGES"), "1:13: near \"EDGES\": expected , or FROM");
    CHECK_STR(E("SELECT * FROM TABLES"), "1:15: near \"TABLES\": expected EDGES, ENTITIES or FEATURES");
    CHECK_STR(E("SELECT * FROM EDGES WHERE"), "1:26: incomplete input: expected a name");
    CHECK_STR(E("SELECT * FROM EDGES WHERE layer"),
              "1:32: incomplete input: expected =, !=, >, <, >=, <=, IN or LIKE");
    CHECK_STR(E("SELECT * FROM EDGES WHERE layer = "), "1:35: incomplete input: expected a string, a number or -");
    CHECK_STR(E("SELECT * FROM EDGES WHERE token LIKE 3"), "1:38: LIKE needs a string pattern");
    CHECK_STR(E("SELECT * FROM EDGES WHERE layer IN ()"), "1:37: near \")\": expected a string, a number or -");
    CHECK_STR(E("SELECT * FROM EDGES ORDER score"), "1:27: near \"score\": expected BY");
    CHECK_STR(E("SELECT * FROM EDGES LIMIT 99999999999999999999"),
              "1:27: integer out of range: 99999999999999999999");
    CHECK_STR(E("SELECT * FROM EDGES LIMIT 3000000000"), "1:27: LIMIT value too large: 3000000000");
    CHECK_STR(E("USE"), "1:4: incomplete input: expected a string");
    CHECK_STR(E("USE x"), "1:5: near \"x\": expected a string");
    CHECK_STR(E("USE 'a' JOURNAL"), "1:16: incomplete input: expected a string");
    CHECK_STR(E("EXTRACT MODEL 'a' INTO 'b' DTYPE q5_k"),
              "1:34: unknown dtype: q5_k (expected f32, f16, bf16, q8_0, q4_k or q6_k)");
    CHECK_STR(E("EXTRACT MODEL 'a' 'b'"), "1:19: near \"'b'\": expected INTO");
    CHECK_STR(E("EXTRACT 'a' INTO 'b'"), "1:9: near \"'a'\": expected MODEL");
    CHECK_STR(E("SHOW TABLES"), "1:6: near \"TABLES\": expected COMPONENTS, ENTITIES, FEATURES, HISTORY, LAYERS, MODELS, PATCHES, RELATIONS or REPRESENTATIONS");
    CHECK_STR(E("SHOW FEATURES"), "1:14: incomplete input: expected an integer");
    CHECK_STR(E("INSERT INTO EDGES (entity, relation) VALUES ('a', 'b')"),
              "1:28: INSERT INTO EDGES needs 3 columns (entity, relation, target) and 3 values, got 2 and 2");
    /* at the list that is off: its last item when one is missing, else its first extra */
    CHECK_STR(E("INSERT INTO EDGES (entity, relation, target) VALUES ('a', 'b')"),
              "1:59: INSERT INTO EDGES needs 3 columns (entity, relation, target) and 3 values, got 3 and 2");
    CHECK_STR(E("INSERT INTO EDGES (entity, relation, target) VALUES ('a', 'b', 'c', 'd')"),
              "1:69: INSERT INTO EDGES needs 3 columns (entity, relation, target) and 3 values, got 3 and 4");
    {
        lql_stmt *sf = P("SHOW FEATURES 12");
        CHECK(sf && sf->n == 12 && sf->n_at.col == 15 && sf->n_at.len == 2);
    }
    CHECK_STR(E("INSERT INTO EDGES (entity, relation, colour) VALUES ('a', 'b', 'c')"),
              "1:38: unknown column: colour (INSERT INTO EDGES takes entity, relation, target)");
    CHECK_STR(E("INSERT INTO EDGES (entity, entity, target) VALUES ('a', 'b', 'c')"),
              "1:28: column given twice: entity");
    CHECK_STR(E("INSERT INTO EDGES (entity, relation, target) VALUES ('a', 'b', 3)"),
              "1:64: near \"3\": expected a string");
    CHECK_STR(E("INSERT INTO EDGES (entity, relation, target) VALUES ('a', 'b', 'c') MODE FAST"),
              "1:74: near \"FAST\": expected =, COMPOSE, KNN or MEMIT");
    CHECK_STR(E("DELETE FROM EDGES"), "1:18: incomplete input: expected WHERE");
    CHECK_STR(E("UPDATE EDGES SET target = 'a', target = 'b' WHERE layer = 1"),
              "1:32: field set twice: target");
    CHECK_STR(E("UPDATE EDGES SET target = 'a'"), "1:30: incomplete input: expected , or WHERE");
    CHECK_STR(E("ROLLBACK 3"), "1:10: near \"3\": expected TO");
    CHECK_STR(E("DIFF 'a'"), "1:9: incomplete input: expected a string or CURRENT");
    CHECK_STR(E("COMPILE CURRENT INTO VINDEX 'o' ON CONFLICT MERGE"),
              "1:45: near \"MERGE\": expected FAIL, HIGHEST_CONFIDENCE or LAST_WINS");
    CHECK_STR(E("COMPILE 'x' INTO VINDEX 'o'"), "1:9: near \"'x'\": expected CURRENT");
    CHECK_STR(E("TRACE"), "1:1: TRACE needs a prompt string or FROM \"file\"");
    CHECK_STR(E("TRACE 'x' POSITIONS FIRST"), "1:21: near \"FIRST\": expected ALL or LAST");
    CHECK_STR(E("EXPLAIN 'x'"), "1:9: near \"'x'\": expected INFER or WALK");
    CHECK_STR(E("STATS STATS"), "1:7: near \"STATS\": expected |>, ; or end of input");
    CHECK_STR(E("STATS; STATS"), "1:8: near \"STATS\": expected end of input");
    /* too many alternatives to list */
    CHECK_STR(E("STATS |>"), "1:9: incomplete input");
    CHECK_STR(E("INFER 'x' TEMPERATURE -1"), "1:23: near \"-\": expected a number");
    CHECK_STR(E("REPRESENT 'x' 'f16'"), "1:15: near \"'f16'\": expected AS");
    CHECK_STR(E("WALK 'a'\n  TOP x"), "2:7: near \"x\": expected an integer");
    CHECK_STR(E("DESCRIBE 'x' ALL"), "1:17: incomplete input: expected LAYERS");
}

/* Every allocation failure surfaces as "out of memory" (ASan: and leaks nothing). */
static void out_of_memory(void)
{
    const char *text = "SELECT layer, feature FROM EDGES WHERE token IN ('a', 'b', 'c') AND layer > 2 "
                       "ORDER BY score DESC LIMIT 5 |> WALK 'x' TOP 3 LAYERS 0-1;";
    int failures = 0, n;
    for (n = 0; n < 200; n++) {
        lql_arena *a = NULL;
        lql_stmt *st = NULL;
        lql_err e = {0};
        lql_fail_after(n);
        a = lql_arena_new();
        int rc = a ? lql_parse(text, strlen(text), a, &st, &e) : -1;
        lql_fail_after(-1);
        lql_arena_free(a);
        if (rc == 0) break;
        failures++;
        if (a) CHECK_MSG(e.code == LQL_ENOMEM && strcmp(e.msg, "out of memory") == 0,
                         "n=%d: %d %s", n, e.code, e.msg);
    }
    CHECK(n < 200 && failures > 2);
    /* a syntax error's message survives allocation failures in the probing */
    lql_fail_after(-1);
    CHECK_HAS(E("WALK 'x' TOP y"), "near \"y\"");
}

int main(void)
{
    session_statements();
    browse_statements();
    execution_statements();
    edit_statements();
    lexical();
    completion();
    errors();
    out_of_memory();
    lql_arena_free(ar);
    return T_DONE();
}
