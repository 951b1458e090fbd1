/*
 * t_graph.h — tests on encoded family fixtures: encoding one into a scratch directory, and
 * refusals of edited system graphs (copy an encoded container, edit its primary
 * component's JSON, check the edit is refused with an exact message, by the typed graph
 * shape at open or by the engine's plan at bind, and by browse's open alike). Static
 * inline, like t_file.h; the including test provides t.h's counters and links lqlcore.
 */
#ifndef LQL_T_GRAPH_H
#define LQL_T_GRAPH_H

#include <stdlib.h>
#include <cjson/cJSON.h>
#include "t_file.h"
#include "engine.h"
#include "browse.h"

/* Encode the family fixture fx (tests/fixtures/models/families/fx) into tmp/fx.vindex3,
 * whose path goes to out. */
static inline void t_encode_family(const char *tmp, const char *fx, char *out, size_t n)
{
    char src[4096];
    snprintf(src, sizeof src, "%s/models/families/%s", LQL_FIXTURE_DIR, fx);
    snprintf(out, n, "%s/%s.vindex3", tmp, fx);
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    vx_err err = {0};
    int rc = vx_encode(src, out, &o, &err);
    CHECK_MSG(rc == 0, "encode %s: %s", fx, err.msg);
}

typedef void (*t_graph_edit)(cJSON *comp);

/* Copy base to tmp/editN, apply ed to components[0], and check vx_open (open_fails) or
 * eng_model_bind refuses it with exactly want; a container the engine refuses is refused
 * by browse with the same words (WALK never answers where INFER cannot run). */
static inline void t_graph_refused(const char *tmp, const char *base, t_graph_edit ed,
                                   int open_fails, const char *want)
{
    static int k;
    char dir[4200], cmd[9000], gp[4300];
    snprintf(dir, sizeof dir, "%s/edit%d", tmp, k++);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", base, dir);
    CHECK(system(cmd) == 0);
    snprintf(gp, sizeof gp, "%s/system_graph.json", dir);
    cJSON *g = t_load_json(gp);
    CHECK(g != NULL);
    if (!g) return;
    cJSON *comp = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "components"), 0);
    ed(comp);
    t_save_json(gp, g);
    /* index.json repeats the geometry, as the encoder would write it for this graph */
    snprintf(gp, sizeof gp, "%s/index.json", dir);
    cJSON *ix = t_load_json(gp);
    static const char *const geo[] = {"hidden_size", "num_layers"};
    for (int i = 0; ix && i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItem(comp, geo[i]);
        if (v) cJSON_ReplaceItemInObject(ix, geo[i], cJSON_Duplicate(v, 1));
    }
    if (ix) t_save_json(gp, ix);
    cJSON_Delete(ix);
    cJSON_Delete(g);
    vx_container *c = NULL;
    eng_model *m = NULL;
    vx_err err = {0};
    int rc = vx_open(dir, &c, &err);
    if (open_fails) {
        CHECK(rc == -1 && c == NULL);
        CHECK_STR(err.msg, want);
        return;
    }
    CHECK_MSG(rc == 0, "open: %s", err.msg);
    if (rc) return;
    CHECK(eng_model_bind(c, &m, &err) == -1 && m == NULL);
    CHECK_STR(err.msg, want);
    brw_model *b = NULL;
    vx_err berr = {0};
    CHECK(brw_open(c, &b, &berr) == -1 && b == NULL);
    CHECK_STR(berr.msg, want);
    vx_close(c);
}

#endif
