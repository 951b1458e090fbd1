/*
 * test_journal_ops.c — COMPILE carries every kind of operation (issue 10: an UPDATE was
 * lost). For each scenario — every op kind alone, mixed, in a recording patch, from an
 * applied patch — the edits are journaled on the tiny Llama model, the effective model is
 * probed (SELECT of every touched feature, INFER of the inserted facts' prompts and a
 * control), the overlay is compiled, and the compiled container must print the same
 * tokens, and the same numbers within 0.01 (see same()). Outputs inside the base are
 * refused. A KNN-store entry cannot be carried: COMPILE refuses it by name.
 */
#include "t.h"
#include "t_file.h"
#include "test_journal_fx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const probes =
    "SELECT * FROM FEATURES WHERE layer = 3 AND feature = 470; "
    "SELECT * FROM FEATURES WHERE layer = 2 AND feature < 6; "
    "SELECT * FROM FEATURES WHERE layer = 1 AND feature < 400 AND token = \\\"Boston\\\"; "
    "INFER \\\"The capital of Zorbania is\\\" TOP 3; "
    "INFER \\\"The capital of Quintara is\\\" TOP 3; "
    "INFER \\\"The capital of France is\\\" TOP 3;";

#define INS_MEMIT "INSERT INTO EDGES (entity, relation, target) VALUES (\\\"Zorbania\\\", " \
                  "\\\"capital\\\", \\\"London\\\"); "
#define INS_COMPOSE "INSERT INTO EDGES (entity, relation, target) VALUES (\\\"Quintara\\\", " \
                    "\\\"capital\\\", \\\"Boston\\\") MODE COMPOSE; "
#define DEL "DELETE FROM EDGES WHERE layer = 2 AND feature = 5; "
#define UPD "UPDATE EDGES SET target = \\\"Paul\\\", confidence = 0.9 WHERE layer = 3 AND " \
            "feature = 470; "
#define UPD_C "UPDATE EDGES SET confidence = 0.25 WHERE layer = 2 AND feature < 3; "

static char a[1 << 16], b[1 << 16], out[1 << 16];

/* Output after the "-- using" line (the session's own notes before it differ). */
static const char *after_use(const char *s)
{
    const char *u = strstr(s, "-- using ");
    const char *nl = u ? strchr(u, '\n') : NULL;
    return nl ? nl + 1 : s;
}

/* Do two probe outputs agree? Text fields exactly; numbers (scores, probabilities) within
 * 0.01: a low-rank INSERT moves every down column a little, and the overlay recomputes the
 * down-meta of only the 8 features it moves most (MUTATION.md), where COMPILE recomputes
 * all of them from the edited weights. */
static int same(const char *x, const char *y)
{
    while (*x && *y) {
        size_t nx = strcspn(x, "\t\n"), ny = strcspn(y, "\t\n");
        char *ex, *ey;
        double dx = strtod(x, &ex), dy = strtod(y, &ey);
        int num = nx && ny && ex == x + nx && ey == y + ny;
        if (num ? fabs(dx - dy) > 0.01 : (nx != ny || memcmp(x, y, nx) != 0 || x[nx] != y[ny]))
            return 0;
        x += nx + (x[nx] != '\0');
        y += ny + (y[ny] != '\0');
    }
    return *x == *y;
}

static void scenario(const char *dir, const char *name, const char *pre, const char *edits)
{
    char j[2300], o[2300], cmd[16384];
    snprintf(j, sizeof j, "%s/%s.lqljournal", dir, name);
    snprintf(o, sizeof o, "%s/%s.vindex3", dir, name);
    const char *base = "base.vindex3";
    snprintf(cmd, sizeof cmd, "cd '%s' && %s'%s/lql' -c \"USE \\\"%s\\\" JOURNAL \\\"%s\\\"; %s\" "
             "2>&1", dir, pre, LQL_BINARY_DIR, base, j, edits);
    CHECK_MSG(fx_run(cmd, out, sizeof out) == 0, "%s: edits: %s", name, out);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/lql' -c \"USE \\\"%s\\\" JOURNAL \\\"%s\\\"; %s\" "
             "2>&1", dir, LQL_BINARY_DIR, base, j, probes);
    CHECK_MSG(fx_run(cmd, a, sizeof a) == 0, "%s: overlay probes: %s", name, a);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/lql' -c \"USE \\\"%s\\\" JOURNAL \\\"%s\\\"; "
             "COMPILE CURRENT INTO VINDEX \\\"%s\\\";\" 2>&1", dir, LQL_BINARY_DIR, base, j, o);
    CHECK_MSG(fx_run(cmd, out, sizeof out) == 0, "%s: compile: %s", name, out);
    CHECK_HAS(out, "the down-meta of every edited feature is equal");
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/lql' -c \"USE \\\"%s\\\" JOURNAL \\\":memory:\\\"; "
             "%s\" 2>&1", dir, LQL_BINARY_DIR, o, probes);
    CHECK_MSG(fx_run(cmd, b, sizeof b) == 0, "%s: compiled probes: %s", name, b);
    CHECK_MSG(same(after_use(a), after_use(b)), "%s: overlay and compiled differ:\n"
              "--- overlay\n%s--- compiled\n%s", name, after_use(a), after_use(b));
    printf("%s: overlay = compiled (%zu bytes of probe output)\n", name, strlen(after_use(a)));
}

int main(void)
{
    char dir[2048], base[2100], cmd[8192];
    if (fx_tiny_dir("h10-ops", dir, base))
        return 1;

    scenario(dir, "update", "", UPD);
    scenario(dir, "update_confidence", "", UPD_C);
    scenario(dir, "delete", "", DEL);
    scenario(dir, "insert", "", INS_MEMIT);
    scenario(dir, "insert_compose", "", INS_COMPOSE);
    scenario(dir, "mixed", "", INS_MEMIT DEL UPD UPD_C INS_COMPOSE);
    scenario(dir, "mixed_patch", "", "BEGIN PATCH \\\"geo\\\"; " INS_MEMIT DEL UPD
             "SAVE PATCH \\\"geo.vlp\\\"; " UPD_C);
    /* the saved file writes down_meta.t as decoded text for the insert as for the update
     * (the insert wrote the vocabulary piece, "ĠLondon") */
    {
        size_t n = 0;
        unsigned char *text = t_slurp(&n, "%s/geo.vlp", dir);
        CHECK(text && strstr((char *)text, "\"t\":\t\" London\"") &&
              strstr((char *)text, "\"t\":\t\" Paul\"") && !strstr((char *)text, "\u0120"));
        free(text);
    }
    scenario(dir, "applied_patch", "", "APPLY PATCH \\\"geo.vlp\\\"; " INS_COMPOSE);
    /* an UPDATE of a deleted feature: the tombstone stays */
    scenario(dir, "update_deleted", "", DEL "UPDATE EDGES SET confidence = 0.5 WHERE layer = "
             "2 AND feature < 6; ");

    /* the residual-key store has no place in a container: refused by name */
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/lql' -c \"USE \\\"base.vindex3\\\" JOURNAL "
             "\\\":memory:\\\"; INSERT INTO EDGES (entity, relation, target) VALUES "
             "(\\\"Quintara\\\", \\\"capital\\\", \\\"Boston\\\") MODE KNN; COMPILE CURRENT "
             "INTO VINDEX \\\"knn.vindex3\\\";\" 2>&1", dir, LQL_BINARY_DIR);
    CHECK(fx_run(cmd, out, sizeof out) != 0);
    CHECK_HAS(out, "compile: 1 KNN-store entry (INSERT … MODE KNN) cannot be carried: a "
                   "container has no residual-key store; UNDO it or REMOVE its patch, then "
                   "COMPILE");
    struct stat sb;
    snprintf(cmd, sizeof cmd, "%s/knn.vindex3", dir);
    CHECK(stat(cmd, &sb) != 0);

    /* outputs at or inside the base are refused (they would carry their own temporary
     * tree into themselves), through ".." and symlinks too; nothing is written there */
    static const char *const inside[] = {"base.vindex3/inner.vindex3",
                                         "base.vindex3/segments/../x.vindex3",
                                         "link/y.vindex3"};
    snprintf(cmd, sizeof cmd, "%s/link", dir);
    CHECK(symlink("base.vindex3", cmd) == 0);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 2; k++) {
            snprintf(cmd, sizeof cmd, "cd '%s' && '%s/lql' -c \"USE \\\"base.vindex3\\\" JOURNAL "
                     "\\\":memory:\\\"; " DEL "%s INTO VINDEX \\\"%s\\\";\" 2>&1", dir,
                     LQL_BINARY_DIR, k ? "COMPACT" : "COMPILE CURRENT", inside[i]);
            CHECK(fx_run(cmd, out, sizeof out) != 0);
            char want[512];
            snprintf(want, sizeof want, "%s: '%s' is inside the container it is made from "
                     "('base.vindex3'); write it outside", k ? "compact" : "compile", inside[i]);
            CHECK_HAS(out, want);
        }
    }
    snprintf(cmd, sizeof cmd, "cd '%s' && ls base.vindex3 | wc -l", dir);
    CHECK(fx_run(cmd, out, sizeof out) == 0);
    CHECK_STR(out, "8\n");

    fx_rm_rf(dir);
    return T_DONE();
}
