/*
 * lql.y — the LQL grammar (Lemon → build/gen/lql.c, lql.h).
 *
 * The grammar holds no logic: each action is one builder call (src/lql/ast.c), every
 * node comes from the parse's arena. Optional clauses are left-recursive lists merged into
 * a statement accumulator, so they may appear in any order; a repeated clause is refused
 * by the builder. Any keyword falls back to ID where a name is expected (field names).
 * Syntax errors stop the parse (YYNOERRORRECOVERY); the driver (parse.c) words them.
 */
%name lqlParser
%token_prefix LQL_TK_
%extra_context {lql_pctx *p}
%token_type {lql_token}
%default_type {lql_stmt *}
%start_symbol input

%include {
#include <assert.h>
#include "parse_int.h"
#define YYNOERRORRECOVERY 1
#define YYMALLOCARGTYPE size_t
}

%syntax_error {
    (void)yymajor;
    p->failed = 2;             /* the driver words the message: it knows the token */
    (void)TOKEN;
}
%stack_overflow {
    lql_p_error(p, NULL, "statement too deeply nested");
}

/* Tokens only the lexer produces. */
%token ILLEGAL UNTERMINATED DOT.

/* Keywords usable as names (fields, columns). Keep in step with src/lql/keywords.c. */
%fallback ID
    ALL ALPHA AND APPLY AS ASC AT ATTENTION BEGIN BRIEF BROWSE BY COMPACT COMPARE
    COMPILE COMPONENTS COMPOSE CONFIDENCE CONFLICT CURRENT DECOMPOSE DELETE DENSE DESC
    DESCRIBE DIFF DTYPE EDGES ENTITIES EXAMPLES EXPLAIN EXTRACT FAIL FEATURES FOR FORMAT FROM
    GENERATE GGUF HIGHEST_CONFIDENCE HISTORY HYBRID IDS IN INFER INFERENCE INSERT INTO JOURNAL KNN
    KNOWLEDGE LAST LAST_WINS LAYER LAYERS LIKE LIMIT MEMIT MODE MODEL MODELS NEAREST ON
    ONLY ORDER OUTPUT PATCH PATCHES PHYSICAL POSITIONS PROFILE PURE RAW RELATION RELATIONS
    REMOVE REPRESENT REPRESENTATIONS ROLLBACK SAFETENSORS SAVE SEED SELECT SET SHOW STATS SYNTAX
    TEMPERATURE TO TOKENIZE TOP TOP_P TRACE UNDO UPDATE USE VALUES VERBOSE VINDEX WALK
    WEIGHTS WHERE WITH.

/* ------------------------------------------------------------------ input */
input ::= chain(C).        { lql_b_done(p, C); }
input ::= chain(C) SEMI.   { lql_b_done(p, C); }

chain(A) ::= stmt(S).                   { A = S; }
chain(A) ::= chain(X) PIPE stmt(S).     { A = lql_b_pipe(p, X, S); }

/* ------------------------------------------------------------------ shared pieces */
%type range {lql_range *}
range(A) ::= INT(L) MINUS INT(H).       { A = lql_b_range(p, &L, &H); }
range(A) ::= ALL(K).                    { A = lql_b_range_all(p, &K); }

%type num {lql_token}
num(A) ::= INT(X).                      { A = X; }
num(A) ::= FLOAT(X).                    { A = X; }

%type value {lql_value *}
value(A) ::= STRING(X).                 { A = lql_b_value(p, NULL, &X); }
value(A) ::= num(X).                    { A = lql_b_value(p, NULL, &X); }
value(A) ::= MINUS(M) num(X).           { A = lql_b_value(p, &M, &X); }

%type vlist {lql_value *}
vlist(A) ::= value(V).                  { A = lql_b_list(p, NULL, V, NULL); }
vlist(A) ::= vlist(L) COMMA value(V).   { A = lql_b_list(p, L, V, NULL); }

%type cond {lql_cond *}
cond(A) ::= ID(F) EQ value(V).          { A = lql_b_cond(p, &F, LQL_OP_EQ, V); }
cond(A) ::= ID(F) NE value(V).          { A = lql_b_cond(p, &F, LQL_OP_NE, V); }
cond(A) ::= ID(F) GT value(V).          { A = lql_b_cond(p, &F, LQL_OP_GT, V); }
cond(A) ::= ID(F) LT value(V).          { A = lql_b_cond(p, &F, LQL_OP_LT, V); }
cond(A) ::= ID(F) GE value(V).          { A = lql_b_cond(p, &F, LQL_OP_GE, V); }
cond(A) ::= ID(F) LE value(V).          { A = lql_b_cond(p, &F, LQL_OP_LE, V); }
cond(A) ::= ID(F) LIKE value(V).        { A = lql_b_cond(p, &F, LQL_OP_LIKE, V); }
cond(A) ::= ID(F) IN inlist(V).         { A = lql_b_cond(p, &F, LQL_OP_IN, V); }

%type inlist {lql_value *}
inlist(A) ::= LP(L) vlist(V) RP.        { A = lql_b_list(p, V, NULL, &L); }

%type conds {lql_cond *}
conds(A) ::= cond(C).                   { A = C; }
conds(A) ::= conds(L) AND cond(C).      { A = lql_b_and(p, L, C); }

%type names {lql_names *}
names(A) ::= ID(X).                     { A = lql_b_name(p, NULL, &X); }
names(A) ::= names(L) COMMA ID(X).      { A = lql_b_name(p, L, &X); }

%type strs {lql_names *}
strs(A) ::= STRING(X).                  { A = lql_b_name(p, NULL, &X); }
strs(A) ::= strs(L) COMMA STRING(X).    { A = lql_b_name(p, L, &X); }

/* An empty clause list, for statements without options. */
none(A) ::= .                           { A = lql_b_opts(p); }

/* Clauses shared by several statements. */
%type c_top {lql_clause *}
c_top(A) ::= TOP(K) INT(N).             { A = lql_b_int(p, LQL_C_TOP, &K, &N); }
%type c_layers {lql_clause *}
c_layers(A) ::= LAYERS(K) range(R).     { A = lql_b_layers(p, &K, R); }
%type c_at {lql_clause *}
c_at(A) ::= AT(K) LAYER INT(N).         { A = lql_b_int(p, LQL_C_AT_LAYER, &K, &N); }
%type c_limit {lql_clause *}
c_limit(A) ::= LIMIT(K) INT(N).         { A = lql_b_int(p, LQL_C_LIMIT, &K, &N); }
%type c_where {lql_clause *}
c_where(A) ::= WHERE(K) conds(C).       { A = lql_b_where(p, &K, C); }
%type c_verbose {lql_clause *}
c_verbose(A) ::= VERBOSE(K).            { A = lql_b_flag(p, LQL_C_VERBOSE, &K); }
%type c_compare {lql_clause *}
c_compare(A) ::= COMPARE(K).            { A = lql_b_flag(p, LQL_C_COMPARE, &K); }
%type c_band {lql_clause *}
c_band(A) ::= ALL(K) LAYERS.            { A = lql_b_enum(p, LQL_C_BAND, &K, LQL_BAND_ALL); }
c_band(A) ::= SYNTAX(K).                { A = lql_b_enum(p, LQL_C_BAND, &K, LQL_BAND_SYNTAX); }
c_band(A) ::= KNOWLEDGE(K).             { A = lql_b_enum(p, LQL_C_BAND, &K, LQL_BAND_KNOWLEDGE); }
c_band(A) ::= OUTPUT(K).                { A = lql_b_enum(p, LQL_C_BAND, &K, LQL_BAND_OUTPUT); }
%type c_into_vindex {lql_clause *}
c_into_vindex(A) ::= INTO(K) VINDEX STRING(S). { A = lql_b_str(p, LQL_C_INTO_VINDEX, &K, &S); }

/* ------------------------------------------------------------------ USE */
stmt(A) ::= USE(K) STRING(S) use_opts(O).   { A = lql_b_stmt(p, O, LQL_S_USE, &K, &S, NULL); }
use_opts(A) ::= .                           { A = lql_b_opts(p); }
use_opts(A) ::= use_opts(O) use_opt(C).     { A = lql_b_add(p, O, C); }
%type use_opt {lql_clause *}
use_opt(A) ::= JOURNAL(K) STRING(S).        { A = lql_b_str(p, LQL_C_JOURNAL, &K, &S); }
use_opt(A) ::= PROFILE(K) STRING(S).        { A = lql_b_str(p, LQL_C_PROFILE, &K, &S); }

/* ------------------------------------------------------------------ TOKENIZE */
stmt(A) ::= TOKENIZE(K) STRING(S) none(O). { A = lql_b_stmt(p, O, LQL_S_TOKENIZE, &K, &S, NULL); }

/* ------------------------------------------------------------------ EXTRACT */
stmt(A) ::= EXTRACT(K) MODEL STRING(S) INTO STRING(D) extract_opts(O).
                                            { A = lql_b_stmt(p, O, LQL_S_EXTRACT, &K, &S, &D); }
extract_opts(A) ::= .                       { A = lql_b_opts(p); }
extract_opts(A) ::= extract_opts(O) extract_opt(C). { A = lql_b_add(p, O, C); }
%type extract_opt {lql_clause *}
extract_opt(A) ::= WITH(K) BROWSE.          { A = lql_b_enum(p, LQL_C_WITH, &K, LQL_LEVEL_BROWSE); }
extract_opt(A) ::= WITH(K) INFERENCE.       { A = lql_b_enum(p, LQL_C_WITH, &K, LQL_LEVEL_INFERENCE); }
extract_opt(A) ::= WITH(K) WEIGHTS.         { A = lql_b_enum(p, LQL_C_WITH, &K, LQL_LEVEL_INFERENCE); }
extract_opt(A) ::= WITH(K) ALL.             { A = lql_b_enum(p, LQL_C_WITH, &K, LQL_LEVEL_ALL); }
extract_opt(A) ::= c_layers(C).             { A = C; }
extract_opt(A) ::= DTYPE(K) ID(X).          { A = lql_b_dtype(p, &K, &X); }

/* ------------------------------------------------------------------ STATS, SHOW */
stmt(A) ::= STATS(K) none(O). { A = lql_b_stmt(p, O, LQL_S_STATS, &K, NULL, NULL); }
stmt(A) ::= SHOW(K) LAYERS layers_opts(O). { A = lql_b_stmt(p, O, LQL_S_SHOW_LAYERS, &K, NULL, NULL); }
layers_opts(A) ::= .                        { A = lql_b_opts(p); }
layers_opts(A) ::= layers_opts(O) c_range(C). { A = lql_b_add(p, O, C); }
%type c_range {lql_clause *}
c_range(A) ::= range(R).                    { A = lql_b_layers(p, NULL, R); }
stmt(A) ::= SHOW(K) FEATURES INT(N) features_opts(O). { A = lql_b_stmt_n(p, O, LQL_S_SHOW_FEATURES, &K, &N); }
features_opts(A) ::= .                      { A = lql_b_opts(p); }
features_opts(A) ::= features_opts(O) c_where(C). { A = lql_b_add(p, O, C); }
features_opts(A) ::= features_opts(O) c_limit(C). { A = lql_b_add(p, O, C); }
stmt(A) ::= SHOW(K) RELATIONS relations_opts(O). { A = lql_b_stmt(p, O, LQL_S_SHOW_RELATIONS, &K, NULL, NULL); }
relations_opts(A) ::= .                     { A = lql_b_opts(p); }
relations_opts(A) ::= relations_opts(O) c_at(C). { A = lql_b_add(p, O, C); }
relations_opts(A) ::= relations_opts(O) c_examples(C). { A = lql_b_add(p, O, C); }
relations_opts(A) ::= relations_opts(O) c_limit(C). { A = lql_b_add(p, O, C); }
%type c_examples {lql_clause *}
c_examples(A) ::= WITH(K) EXAMPLES.         { A = lql_b_flag(p, LQL_C_WITH_EXAMPLES, &K); }
stmt(A) ::= SHOW(K) ENTITIES entities_opts(O). { A = lql_b_stmt(p, O, LQL_S_SHOW_ENTITIES, &K, NULL, NULL); }
entities_opts(A) ::= .                      { A = lql_b_opts(p); }
entities_opts(A) ::= entities_opts(O) c_at(C). { A = lql_b_add(p, O, C); }
entities_opts(A) ::= entities_opts(O) c_limit(C). { A = lql_b_add(p, O, C); }
stmt(A) ::= SHOW(K) MODELS none(O). { A = lql_b_stmt(p, O, LQL_S_SHOW_MODELS, &K, NULL, NULL); }
stmt(A) ::= SHOW(K) COMPONENTS none(O). { A = lql_b_stmt(p, O, LQL_S_SHOW_COMPONENTS, &K, NULL, NULL); }
stmt(A) ::= SHOW(K) REPRESENTATIONS none(O). { A = lql_b_stmt(p, O, LQL_S_SHOW_REPRESENTATIONS, &K, NULL, NULL); }
stmt(A) ::= SHOW(K) PATCHES none(O). { A = lql_b_stmt(p, O, LQL_S_SHOW_PATCHES, &K, NULL, NULL); }
stmt(A) ::= SHOW(K) HISTORY none(O). { A = lql_b_stmt(p, O, LQL_S_SHOW_HISTORY, &K, NULL, NULL); }

/* ------------------------------------------------------------------ WALK, EXPLAIN WALK */
stmt(A) ::= WALK(K) STRING(S) walk_opts(O). { A = lql_b_stmt(p, O, LQL_S_WALK, &K, &S, NULL); }
walk_opts(A) ::= .                          { A = lql_b_opts(p); }
walk_opts(A) ::= walk_opts(O) walk_opt(C).  { A = lql_b_add(p, O, C); }
%type walk_opt {lql_clause *}
walk_opt(A) ::= c_top(C).                   { A = C; }
walk_opt(A) ::= c_layers(C).                { A = C; }
walk_opt(A) ::= c_compare(C).               { A = C; }
walk_opt(A) ::= MODE(K) HYBRID.             { A = lql_b_enum(p, LQL_C_MODE, &K, LQL_MODE_HYBRID); }
walk_opt(A) ::= MODE(K) PURE.               { A = lql_b_enum(p, LQL_C_MODE, &K, LQL_MODE_PURE); }
walk_opt(A) ::= MODE(K) DENSE.              { A = lql_b_enum(p, LQL_C_MODE, &K, LQL_MODE_DENSE); }

stmt(A) ::= EXPLAIN(K) WALK STRING(S) ewalk_opts(O). { A = lql_b_stmt(p, O, LQL_S_EXPLAIN_WALK, &K, &S, NULL); }
ewalk_opts(A) ::= .                         { A = lql_b_opts(p); }
ewalk_opts(A) ::= ewalk_opts(O) ewalk_opt(C). { A = lql_b_add(p, O, C); }
%type ewalk_opt {lql_clause *}
ewalk_opt(A) ::= c_top(C).                  { A = C; }
ewalk_opt(A) ::= c_layers(C).               { A = C; }
ewalk_opt(A) ::= c_verbose(C).              { A = C; }
ewalk_opt(A) ::= MODE(K) HYBRID.            { A = lql_b_enum(p, LQL_C_MODE, &K, LQL_MODE_HYBRID); }
ewalk_opt(A) ::= MODE(K) PURE.              { A = lql_b_enum(p, LQL_C_MODE, &K, LQL_MODE_PURE); }
ewalk_opt(A) ::= MODE(K) DENSE.             { A = lql_b_enum(p, LQL_C_MODE, &K, LQL_MODE_DENSE); }

/* ------------------------------------------------------------------ DESCRIBE */
stmt(A) ::= DESCRIBE(K) STRING(S) describe_opts(O). { A = lql_b_stmt(p, O, LQL_S_DESCRIBE, &K, &S, NULL); }
describe_opts(A) ::= .                      { A = lql_b_opts(p); }
describe_opts(A) ::= describe_opts(O) describe_opt(C). { A = lql_b_add(p, O, C); }
%type describe_opt {lql_clause *}
describe_opt(A) ::= c_band(C).              { A = C; }
describe_opt(A) ::= c_at(C).                { A = C; }
describe_opt(A) ::= RELATIONS(K) ONLY.      { A = lql_b_flag(p, LQL_C_RELATIONS_ONLY, &K); }
describe_opt(A) ::= BRIEF(K).               { A = lql_b_flag(p, LQL_C_BRIEF, &K); }
describe_opt(A) ::= c_verbose(C).           { A = C; }
describe_opt(A) ::= RAW(K).                 { A = lql_b_flag(p, LQL_C_RAW, &K); }

/* ------------------------------------------------------------------ SELECT */
stmt(A) ::= SELECT(K) STAR FROM source(F) select_opts(O). { A = lql_b_select(p, O, &K, NULL, F); }
stmt(A) ::= SELECT(K) names(N) FROM source(F) select_opts(O). { A = lql_b_select(p, O, &K, N, F); }
%type source {lql_source}
source(A) ::= EDGES.                        { A = LQL_FROM_EDGES; }
source(A) ::= FEATURES.                     { A = LQL_FROM_FEATURES; }
source(A) ::= ENTITIES.                     { A = LQL_FROM_ENTITIES; }
select_opts(A) ::= .                        { A = lql_b_opts(p); }
select_opts(A) ::= select_opts(O) select_opt(C). { A = lql_b_add(p, O, C); }
%type select_opt {lql_clause *}
select_opt(A) ::= NEAREST(K) TO STRING(S) AT LAYER INT(N). { A = lql_b_nearest(p, &K, &S, &N); }
select_opt(A) ::= c_where(C).               { A = C; }
select_opt(A) ::= ORDER(K) BY ID(F).        { A = lql_b_order(p, &K, &F, 0); }
select_opt(A) ::= ORDER(K) BY ID(F) ASC.    { A = lql_b_order(p, &K, &F, 0); }
select_opt(A) ::= ORDER(K) BY ID(F) DESC.   { A = lql_b_order(p, &K, &F, 1); }
select_opt(A) ::= c_limit(C).               { A = C; }

/* ------------------------------------------------------------------ INFER, EXPLAIN INFER */
stmt(A) ::= INFER(K) STRING(S) infer_opts(O). { A = lql_b_stmt(p, O, LQL_S_INFER, &K, &S, NULL); }
infer_opts(A) ::= .                         { A = lql_b_opts(p); }
infer_opts(A) ::= infer_opts(O) infer_opt(C). { A = lql_b_add(p, O, C); }
%type infer_opt {lql_clause *}
infer_opt(A) ::= c_top(C).                  { A = C; }
infer_opt(A) ::= GENERATE(K) INT(N).        { A = lql_b_int(p, LQL_C_GENERATE, &K, &N); }
infer_opt(A) ::= TEMPERATURE(K) num(X).     { A = lql_b_num(p, LQL_C_TEMPERATURE, &K, &X); }
infer_opt(A) ::= TOP_P(K) num(X).           { A = lql_b_num(p, LQL_C_TOP_P, &K, &X); }
infer_opt(A) ::= SEED(K) INT(N).            { A = lql_b_int(p, LQL_C_SEED, &K, &N); }
infer_opt(A) ::= c_compare(C).              { A = C; }
infer_opt(A) ::= WITH(K) IDS.               { A = lql_b_flag(p, LQL_C_WITH_IDS, &K); }

stmt(A) ::= EXPLAIN(K) INFER STRING(S) einfer_opts(O). { A = lql_b_stmt(p, O, LQL_S_EXPLAIN_INFER, &K, &S, NULL); }
einfer_opts(A) ::= .                        { A = lql_b_opts(p); }
einfer_opts(A) ::= einfer_opts(O) einfer_opt(C). { A = lql_b_add(p, O, C); }
%type einfer_opt {lql_clause *}
einfer_opt(A) ::= c_top(C).                 { A = C; }
einfer_opt(A) ::= WITH(K) ATTENTION.        { A = lql_b_flag(p, LQL_C_WITH_ATTENTION, &K); }
einfer_opt(A) ::= c_band(C).                { A = C; }
einfer_opt(A) ::= c_layers(C).              { A = C; }

/* ------------------------------------------------------------------ TRACE */
stmt(A) ::= TRACE(K) STRING(S) trace_opts(O). { A = lql_b_stmt(p, O, LQL_S_TRACE, &K, &S, NULL); }
stmt(A) ::= TRACE(K) trace_opts(O).         { A = lql_b_stmt(p, O, LQL_S_TRACE, &K, NULL, NULL); }
trace_opts(A) ::= .                         { A = lql_b_opts(p); }
trace_opts(A) ::= trace_opts(O) trace_opt(C). { A = lql_b_add(p, O, C); }
%type trace_opt {lql_clause *}
trace_opt(A) ::= FOR(K) STRING(S).          { A = lql_b_str(p, LQL_C_FOR, &K, &S); }
trace_opt(A) ::= FOR(K) INT(N).             { A = lql_b_int(p, LQL_C_FOR, &K, &N); }
trace_opt(A) ::= DECOMPOSE(K).              { A = lql_b_flag(p, LQL_C_DECOMPOSE, &K); }
trace_opt(A) ::= c_layers(C).               { A = C; }
trace_opt(A) ::= POSITIONS(K) ALL.          { A = lql_b_enum(p, LQL_C_POSITIONS, &K, LQL_POS_ALL); }
trace_opt(A) ::= POSITIONS(K) LAST.         { A = lql_b_enum(p, LQL_C_POSITIONS, &K, LQL_POS_LAST); }
trace_opt(A) ::= SAVE(K) STRING(S).         { A = lql_b_str(p, LQL_C_SAVE, &K, &S); }
trace_opt(A) ::= FROM(K) STRING(S).         { A = lql_b_str(p, LQL_C_FROM, &K, &S); }

/* ------------------------------------------------------------------ INSERT, DELETE, UPDATE */
stmt(A) ::= INSERT(K) INTO EDGES LP names(N) RP VALUES LP strs(V) RP insert_opts(O).
                                            { A = lql_b_insert(p, O, &K, N, V); }
insert_opts(A) ::= .                        { A = lql_b_opts(p); }
insert_opts(A) ::= insert_opts(O) insert_opt(C). { A = lql_b_add(p, O, C); }
%type insert_opt {lql_clause *}
insert_opt(A) ::= c_at(C).                  { A = C; }
insert_opt(A) ::= CONFIDENCE(K) num(X).     { A = lql_b_num(p, LQL_C_CONFIDENCE, &K, &X); }
insert_opt(A) ::= ALPHA(K) num(X).          { A = lql_b_num(p, LQL_C_ALPHA, &K, &X); }
insert_opt(A) ::= MODE(K) imode(M).         { A = lql_b_enum(p, LQL_C_MODE, &K, M); }
insert_opt(A) ::= MODE(K) EQ imode(M).      { A = lql_b_enum(p, LQL_C_MODE, &K, M); }
%type imode {int}
imode(A) ::= KNN.                           { A = LQL_MODE_KNN; }
imode(A) ::= COMPOSE.                       { A = LQL_MODE_COMPOSE; }
imode(A) ::= MEMIT.                         { A = LQL_MODE_MEMIT; }

stmt(A) ::= DELETE(K) FROM EDGES where_only(O). { A = lql_b_stmt(p, O, LQL_S_DELETE, &K, NULL, NULL); }
where_only(A) ::= none(O) c_where(C).       { A = lql_b_add(p, O, C); }

stmt(A) ::= UPDATE(K) EDGES SET sets(S) where_only(O). { A = lql_b_update(p, O, &K, S); }
%type sets {lql_assign *}
sets(A) ::= ID(F) EQ value(V).              { A = lql_b_assign(p, NULL, &F, V); }
sets(A) ::= sets(L) COMMA ID(F) EQ value(V). { A = lql_b_assign(p, L, &F, V); }

/* ------------------------------------------------------------------ patches, history */
stmt(A) ::= BEGIN(K) PATCH STRING(S) none(O). { A = lql_b_stmt(p, O, LQL_S_BEGIN_PATCH, &K, &S, NULL); }
stmt(A) ::= SAVE(K) PATCH none(O). { A = lql_b_stmt(p, O, LQL_S_SAVE_PATCH, &K, NULL, NULL); }
stmt(A) ::= SAVE(K) PATCH STRING(S) none(O). { A = lql_b_stmt(p, O, LQL_S_SAVE_PATCH, &K, &S, NULL); }
stmt(A) ::= APPLY(K) PATCH STRING(S) none(O). { A = lql_b_stmt(p, O, LQL_S_APPLY_PATCH, &K, &S, NULL); }
stmt(A) ::= REMOVE(K) PATCH STRING(S) none(O). { A = lql_b_stmt(p, O, LQL_S_REMOVE_PATCH, &K, &S, NULL); }
stmt(A) ::= UNDO(K) none(O). { A = lql_b_stmt(p, O, LQL_S_UNDO, &K, NULL, NULL); }
stmt(A) ::= ROLLBACK(K) TO INT(N) none(O). { A = lql_b_stmt_n(p, O, LQL_S_ROLLBACK, &K, &N); }

/* ------------------------------------------------------------------ DIFF */
stmt(A) ::= DIFF(K) vref(X) vref(Y) diff_opts(O). { A = lql_b_stmt(p, O, LQL_S_DIFF, &K, X.z ? &X : NULL, Y.z ? &Y : NULL); }
%type vref {lql_token}
vref(A) ::= STRING(S).                      { A = S; }
vref(A) ::= CURRENT.                        { A.z = NULL; A.n = 0; A.line = 0; A.col = 0; }
diff_opts(A) ::= .                          { A = lql_b_opts(p); }
diff_opts(A) ::= diff_opts(O) diff_opt(C).  { A = lql_b_add(p, O, C); }
%type diff_opt {lql_clause *}
diff_opt(A) ::= LAYER(K) INT(N).            { A = lql_b_int(p, LQL_C_LAYER, &K, &N); }
diff_opt(A) ::= RELATION(K) STRING(S).      { A = lql_b_str(p, LQL_C_RELATION, &K, &S); }
diff_opt(A) ::= c_limit(C).                 { A = C; }
diff_opt(A) ::= PHYSICAL(K).                { A = lql_b_flag(p, LQL_C_PHYSICAL, &K); }
diff_opt(A) ::= INTO(K) PATCH STRING(S).    { A = lql_b_str(p, LQL_C_INTO_PATCH, &K, &S); }

/* ------------------------------------------------------------------ COMPILE, COMPACT */
stmt(A) ::= COMPILE(K) CURRENT INTO VINDEX STRING(S) compile_opts(O). { A = lql_b_stmt(p, O, LQL_S_COMPILE, &K, NULL, &S); }
stmt(A) ::= COMPILE(K) CURRENT INTO MODEL(M) STRING(S) export_opts(O). { A = lql_b_stmt(p, lql_b_add(p, O, lql_b_flag(p, LQL_C_INTO_MODEL, &M)), LQL_S_COMPILE, &K, NULL, &S); }
compile_opts(A) ::= .                       { A = lql_b_opts(p); }
compile_opts(A) ::= compile_opts(O) c_conflict(C). { A = lql_b_add(p, O, C); }
export_opts(A) ::= .                        { A = lql_b_opts(p); }
export_opts(A) ::= export_opts(O) c_conflict(C). { A = lql_b_add(p, O, C); }
export_opts(A) ::= export_opts(O) FORMAT(K) format(X). { A = lql_b_add(p, O, lql_b_enum(p, LQL_C_FORMAT, &K, X)); }
%type format {int}
format(A) ::= SAFETENSORS.                  { A = LQL_FORMAT_SAFETENSORS; }
format(A) ::= GGUF.                         { A = LQL_FORMAT_GGUF; }
%type c_conflict {lql_clause *}
c_conflict(A) ::= ON(K) CONFLICT conflict(X). { A = lql_b_enum(p, LQL_C_ON_CONFLICT, &K, X); }
%type conflict {int}
conflict(A) ::= LAST_WINS.                  { A = LQL_CONFLICT_LAST_WINS; }
conflict(A) ::= HIGHEST_CONFIDENCE.         { A = LQL_CONFLICT_HIGHEST_CONFIDENCE; }
conflict(A) ::= FAIL.                       { A = LQL_CONFLICT_FAIL; }

stmt(A) ::= COMPACT(K) compact_opts(O).     { A = lql_b_stmt(p, O, LQL_S_COMPACT, &K, NULL, NULL); }
stmt(A) ::= COMPACT(K) STRING(S) compact_opts(O). { A = lql_b_stmt(p, O, LQL_S_COMPACT, &K, &S, NULL); }
compact_opts(A) ::= .                       { A = lql_b_opts(p); }
compact_opts(A) ::= compact_opts(O) c_into_vindex(C). { A = lql_b_add(p, O, C); }

/* ------------------------------------------------------------------ REPRESENT */
stmt(A) ::= REPRESENT(K) STRING(S) AS ID(D) none(O). { A = lql_b_stmt(p, O, LQL_S_REPRESENT, &K, &S, &D); }
stmt(A) ::= REPRESENT(K) ID(S) AS ID(D) none(O). { A = lql_b_stmt(p, O, LQL_S_REPRESENT, &K, &S, &D); }
