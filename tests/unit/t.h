/*
 * t.h — the unit tests' few macros. Each test_*.c is one executable registered with
 * ctest; it prints a line per failed check and a closing "N passed, M failed" line, and
 * exits non-zero if anything failed.
 */
#ifndef LQL_T_H
#define LQL_T_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int t_pass, t_fail;

#define CHECK(cond) do { if (cond) t_pass++; else { t_fail++; \
    fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { if (cond) t_pass++; else { t_fail++; \
    fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_STR(a, b) do { const char *t_a = (a), *t_b = (b); \
    if (t_a && t_b && strcmp(t_a, t_b) == 0) t_pass++; else { t_fail++; \
    fprintf(stderr, "%s:%d: %s\n   got: %s\n  want: %s\n", __FILE__, __LINE__, #a, \
            t_a ? t_a : "(null)", t_b ? t_b : "(null)"); } } while (0)
#define CHECK_NEAR(a, b, tol) do { double t_x = (a), t_y = (b); \
    if (fabs(t_x - t_y) <= (tol)) t_pass++; else { t_fail++; \
    fprintf(stderr, "%s:%d: %s = %.9g, want %.9g (tol %g)\n", __FILE__, __LINE__, #a, \
            t_x, t_y, (double)(tol)); } } while (0)
/* Does msg contain needle? */
#define CHECK_HAS(msg, needle) do { const char *t_m = (msg), *t_n = (needle); \
    if (t_m && strstr(t_m, t_n)) t_pass++; else { t_fail++; \
    fprintf(stderr, "%s:%d: %s\n   got: %s\n  want it to contain: %s\n", __FILE__, \
            __LINE__, #msg, t_m ? t_m : "(null)", t_n); } } while (0)

#define T_DONE() (printf("%s: %d passed, %d failed\n", __FILE__, t_pass, t_fail), \
                  t_fail ? 1 : 0)

#endif
