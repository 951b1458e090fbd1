/*
 * jinja_gram.y — the chat-template grammar (Lemon → build/gen/jinja_gram.c).
 *
 * The subset real chat templates use: text, {{ expr }}, {% if/elif/else/endif %},
 * {% for x in expr %}…{% endfor %}, {% set x = expr %}, {% set ns.attr = expr %}; expressions
 * with Jinja's precedence (conditional, or, and, not, comparisons and in/not in, ~, + -,
 * * / // %, unary minus, then postfix attribute, subscript and slice, call, filter and
 * is-test). Anything else is a syntax error naming the line; names of filters, tests and
 * functions are checked by jinja.c after the parse.
 */
%name JinjaParse
%token_prefix JT_
%token_type {jj_tok}
%extra_argument {jj_parse *p}

%include {
#include <assert.h>
#include <stdio.h>
#include "jinja_int.h"
}

%syntax_error {
    if (!p->failed && yymajor == 0) {
        p->failed = 1;
        snprintf(p->err, p->errn, "line %d: the template ends inside an open block (a missing "
                 "endif or endfor)", TOKEN.line);
    }
    if (!p->failed) {
        p->failed = 1;
        snprintf(p->err, p->errn, "line %d: unsupported syntax near %s%.*s%s", TOKEN.line,
                 TOKEN.s ? "\"" : "", TOKEN.s ? (int)(TOKEN.n > 30 ? 30 : TOKEN.n) : 0,
                 TOKEN.s ? TOKEN.s : "", TOKEN.s ? "\"" : "a symbol");
    }
}
%parse_failure {
    if (!p->failed) { p->failed = 1; snprintf(p->err, p->errn, "the template does not parse"); }
}
%stack_overflow {
    p->failed = 1;
    snprintf(p->err, p->errn, "the template nests too deeply");
}

%token TEXT OUT_BEGIN OUT_END BLOCK_END TAG_IF TAG_ELIF TAG_ELSE TAG_ENDIF TAG_FOR
       TAG_ENDFOR TAG_SET.

%right IF ELSE.
%left OR.
%left AND.
%right NOT.
%left EQ NE LT GT LE GE IN IS.
%left TILDE.
%left PLUS MINUS.
%left STAR SLASH FLOORDIV PERCENT.
%right UMINUS.
%left PIPE.
%left DOT LBRACKET LPAREN.

%type body {jj_node *}
%type stmt {jj_node *}
%type else_part {jj_node *}
%type expr {jj_node *}
%type args {jj_node *}
%type arglist {jj_node *}
%type arg {jj_node *}
%type items {jj_node *}
%type opt {jj_node *}

template ::= body(B). { p->root = B; }

body(A) ::= . { A = NULL; }
body(A) ::= body(B) stmt(S). { A = jj_append(B, S); }

stmt(A) ::= TEXT(T). { A = jj_node_new(p, JN_TEXT, T.line); if (A) { A->s = T.s; A->n = T.n; } }
stmt(A) ::= OUT_BEGIN(T) expr(E) OUT_END. { A = jj_node_new(p, JN_OUT, T.line); if (A) A->a = E; }
stmt(A) ::= TAG_IF(T) expr(C) BLOCK_END body(B) else_part(E) TAG_ENDIF BLOCK_END. {
    A = jj_node_new(p, JN_IF, T.line); if (A) { A->a = C; A->b = B; A->c = E; } }
else_part(A) ::= . { A = NULL; }
else_part(A) ::= TAG_ELSE BLOCK_END body(B). { A = B; }
else_part(A) ::= TAG_ELIF(T) expr(C) BLOCK_END body(B) else_part(E). {
    A = jj_node_new(p, JN_IF, T.line); if (A) { A->a = C; A->b = B; A->c = E; } }
stmt(A) ::= TAG_FOR(T) NAME(V) IN expr(E) BLOCK_END body(B) TAG_ENDFOR BLOCK_END. {
    A = jj_node_new(p, JN_FOR, T.line); if (A) { A->s = V.s; A->n = V.n; A->a = E; A->b = B; } }
stmt(A) ::= TAG_SET(T) NAME(V) ASSIGN expr(E) BLOCK_END. {
    A = jj_node_new(p, JN_SET, T.line); if (A) { A->s = V.s; A->n = V.n; A->a = E; } }
stmt(A) ::= TAG_SET(T) NAME(V) DOT NAME(F) ASSIGN expr(E) BLOCK_END. {
    A = jj_node_new(p, JN_SETATTR, T.line);
    jj_node *f = jj_node_new(p, JN_STR, T.line);
    if (A && f) { A->s = V.s; A->n = V.n; f->s = F.s; f->n = F.n; A->b = f; A->a = E; } }

expr(A) ::= expr(X) IF(T) expr(C) ELSE expr(Y). {
    A = jj_node_new(p, JN_COND, T.line); if (A) { A->a = X; A->b = C; A->c = Y; } }
expr(A) ::= expr(X) IF(T) expr(C). [IF] {
    A = jj_node_new(p, JN_COND, T.line); if (A) { A->a = X; A->b = C; } }
expr(A) ::= expr(X) OR(T) expr(Y). { A = jj_node_new(p, JN_OR, T.line); if (A) { A->a = X; A->b = Y; } }
expr(A) ::= expr(X) AND(T) expr(Y). { A = jj_node_new(p, JN_AND, T.line); if (A) { A->a = X; A->b = Y; } }
expr(A) ::= NOT(T) expr(X). { A = jj_node_new(p, JN_NOT, T.line); if (A) A->a = X; }
expr(A) ::= expr(X) EQ(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_EQ; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) NE(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_NE; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) LT(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_LT; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) GT(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_GT; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) LE(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_LE; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) GE(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_GE; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) IN(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_IN; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) NOT(T) IN expr(Y). [IN] { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_NOTIN; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) TILDE(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_CAT; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) PLUS(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_ADD; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) MINUS(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_SUB; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) STAR(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_MUL; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) SLASH(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_DIV; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) FLOORDIV(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_FLOORDIV; A->a = X; A->b = Y; } }
expr(A) ::= expr(X) PERCENT(T) expr(Y). { A = jj_node_new(p, JN_BIN, T.line); if (A) { A->op = JO_MOD; A->a = X; A->b = Y; } }
expr(A) ::= MINUS(T) expr(X). [UMINUS] { A = jj_node_new(p, JN_NEG, T.line); if (A) A->a = X; }
expr(A) ::= expr(X) IS(T) NAME(N). { A = jj_node_new(p, JN_TEST, T.line); if (A) { A->a = X; A->s = N.s; A->n = N.n; } }
expr(A) ::= expr(X) IS(T) NOT NAME(N). { A = jj_node_new(p, JN_NOTTEST, T.line); if (A) { A->a = X; A->s = N.s; A->n = N.n; } }
expr(A) ::= expr(X) IS(T) NONE. { A = jj_node_new(p, JN_TEST, T.line); if (A) { A->a = X; A->s = "none"; A->n = 4; } }
expr(A) ::= expr(X) IS(T) NOT NONE. { A = jj_node_new(p, JN_NOTTEST, T.line); if (A) { A->a = X; A->s = "none"; A->n = 4; } }
expr(A) ::= expr(X) IS(T) TRUE. { A = jj_node_new(p, JN_TEST, T.line); if (A) { A->a = X; A->s = "true"; A->n = 4; } }
expr(A) ::= expr(X) IS(T) FALSE. { A = jj_node_new(p, JN_TEST, T.line); if (A) { A->a = X; A->s = "false"; A->n = 5; } }
expr(A) ::= expr(X) IS(T) NOT TRUE. { A = jj_node_new(p, JN_NOTTEST, T.line); if (A) { A->a = X; A->s = "true"; A->n = 4; } }
expr(A) ::= expr(X) IS(T) NOT FALSE. { A = jj_node_new(p, JN_NOTTEST, T.line); if (A) { A->a = X; A->s = "false"; A->n = 5; } }
expr(A) ::= expr(X) PIPE(T) NAME(N). { A = jj_node_new(p, JN_FILTER, T.line); if (A) { A->a = X; A->s = N.s; A->n = N.n; } }
expr(A) ::= expr(X) PIPE(T) NAME(N) LPAREN args(G) RPAREN. {
    A = jj_node_new(p, JN_FILTER, T.line); if (A) { A->a = X; A->s = N.s; A->n = N.n; A->b = G; } }
expr(A) ::= expr(X) DOT(T) NAME(N). { A = jj_node_new(p, JN_ATTR, T.line); if (A) { A->a = X; A->s = N.s; A->n = N.n; } }
expr(A) ::= expr(X) LBRACKET(T) expr(K) RBRACKET. { A = jj_node_new(p, JN_INDEX, T.line); if (A) { A->a = X; A->b = K; } }
expr(A) ::= expr(X) LBRACKET(T) opt(B) COLON opt(C) RBRACKET. {
    A = jj_node_new(p, JN_SLICE, T.line);
    jj_node *d = jj_node_new(p, JN_EMPTY, T.line);
    if (A) { A->a = X; A->b = B; A->c = C; A->d = d; } }
expr(A) ::= expr(X) LBRACKET(T) opt(B) COLON opt(C) COLON opt(D) RBRACKET. {
    A = jj_node_new(p, JN_SLICE, T.line); if (A) { A->a = X; A->b = B; A->c = C; A->d = D; } }
expr(A) ::= expr(X) LPAREN(T) args(G) RPAREN. { A = jj_node_new(p, JN_CALL, T.line); if (A) { A->a = X; A->b = G; } }
expr(A) ::= LPAREN expr(X) RPAREN. { A = X; }
expr(A) ::= LBRACKET(T) items(I) RBRACKET. { A = jj_node_new(p, JN_LIST, T.line); if (A) A->a = I; }
expr(A) ::= NAME(N). { A = jj_node_new(p, JN_NAME, N.line); if (A) { A->s = N.s; A->n = N.n; } }
expr(A) ::= STRING(S). { A = jj_node_new(p, JN_STR, S.line); if (A) { A->s = S.s; A->n = S.n; } }
expr(A) ::= INT(I). { A = jj_node_new(p, JN_INT, I.line); if (A) A->i = I.i; }
expr(A) ::= TRUE(T). { A = jj_node_new(p, JN_TRUE, T.line); }
expr(A) ::= FALSE(T). { A = jj_node_new(p, JN_FALSE, T.line); }
expr(A) ::= NONE(T). { A = jj_node_new(p, JN_NONE, T.line); }

opt(A) ::= . { A = jj_node_new(p, JN_EMPTY, p->line); }
opt(A) ::= expr(X). { A = X; }

items(A) ::= . { A = NULL; }
items(A) ::= arglist(L). { A = L; }
args(A) ::= . { A = NULL; }
args(A) ::= arglist(L). { A = L; }
arglist(A) ::= arg(X). { A = X; }
arglist(A) ::= arglist(L) COMMA arg(X). { A = jj_append(L, X); }
arg(A) ::= expr(X). { A = X; }
arg(A) ::= NAME(N) ASSIGN expr(X). { A = jj_node_new(p, JN_KWARG, N.line); if (A) { A->s = N.s; A->n = N.n; A->a = X; } }
