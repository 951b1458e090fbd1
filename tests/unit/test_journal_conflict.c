/*
 * test_journal_conflict.c — COMPILE … ON CONFLICT HIGHEST_CONFIDENCE through the real
 * shell. The geo patch (tests/lql/data/edit_geo.vlp: a delete, an update of layer 3
 * feature 61 with down_meta c 0.5, an insert at layer 2 with confidence 0.9) is applied,
 * then an UPDATE of the same slot in the session's own patch:
 *   - at confidence 0.3 the session's operation (4) is set aside for geo's (2): three
 *     operations compiled, provenance records 1 set aside;
 *   - LAST_WINS compiles all four, none set aside;
 *   - at confidence 0.8 (after UNDO) geo's update is set aside for the session's (5).
 * Each note is pinned exactly.
 */
#include "browse.h"
#include "t.h"
#include "test_journal_fx.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The set-aside count recorded in a compiled container's provenance, or -1. */
static int set_aside(const char *dir)
{
    vx_container *c = NULL;
    vx_err e = {0};
    int n = -1;
    if (vx_open(dir, &c, &e) == 0) {
        const cJSON *p = cJSON_GetObjectItem(vx_index_json(c), "derived_from");
        const cJSON *k = cJSON_GetObjectItem(p, "set_aside_by_highest_confidence");
        n = cJSON_IsNumber(k) ? k->valueint : -1;
    }
    vx_close(c);
    return n;
}

int main(void)
{
    char dir[2048], base[2100], hc[2100], lw[2100], hc2[2100];
    snprintf(dir, sizeof dir, "%s/h11-conflict", LQL_BINARY_DIR);
    fx_rm_rf(dir);
    snprintf(base, sizeof base, "%s/base.vindex3", dir);
    mkdir(dir, 0755);
    snprintf(hc, sizeof hc, "%s/hc.vindex3", dir);
    snprintf(lw, sizeof lw, "%s/lw.vindex3", dir);
    snprintf(hc2, sizeof hc2, "%s/hc2.vindex3", dir);
    if (fx_encode_tiny(base, NULL))
        return 1;
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "'%s/lql' -c 'USE \"%s\" JOURNAL \":memory:\"; "
             "APPLY PATCH \"%s/tests/lql/data/edit_geo.vlp\"; "
             "UPDATE EDGES SET confidence = 0.3 WHERE layer = 3 AND feature = 61; "
             "COMPILE CURRENT INTO VINDEX \"%s\" ON CONFLICT HIGHEST_CONFIDENCE; "
             "COMPILE CURRENT INTO VINDEX \"%s\"; UNDO; "
             "UPDATE EDGES SET confidence = 0.8 WHERE layer = 3 AND feature = 61; "
             "COMPILE CURRENT INTO VINDEX \"%s\" ON CONFLICT HIGHEST_CONFIDENCE;' 2>&1",
             LQL_BINARY_DIR, base, LQL_SOURCE_DIR, hc, lw, hc2);
    static char out[1 << 16];
    CHECK(fx_run(cmd, out, sizeof out) == 0);
    CHECK_HAS(out, "-- ON CONFLICT HIGHEST_CONFIDENCE: layer 3 feature 61: operation 4 "
                   "(confidence 0.3) set aside for operation 2 (confidence 0.5)\n");
    CHECK_HAS(out, "hc.vindex3 (authority derived; 3 operations materialised");
    CHECK_HAS(out, "lw.vindex3 (authority derived; 4 operations materialised");
    CHECK_HAS(out, "-- ON CONFLICT HIGHEST_CONFIDENCE: layer 3 feature 61: operation 2 "
                   "(confidence 0.5) set aside for operation 5 (confidence 0.8)\n");
    CHECK_HAS(out, "hc2.vindex3 (authority derived; 3 operations materialised");
    /* one set-aside note per compile that sets one aside, none for LAST_WINS */
    int notes = 0;
    for (const char *q = out; (q = strstr(q, "set aside for")); q++)
        notes++;
    CHECK(notes == 2);
    CHECK(set_aside(hc) == 1);
    CHECK(set_aside(lw) == 0);
    CHECK(set_aside(hc2) == 1);
    if (t_fail)
        fputs(out, stderr);
    else
        fx_rm_rf(dir);
    return T_DONE();
}
