/*
 * t_browse.h — tests of down-meta: a fixture encoded with or without it, and a container
 * opened for browsing. Static inline, like t_file.h; the including test provides t.h's
 * counters, includes brw_int.h and links lqlcore.
 */
#ifndef LQL_T_BROWSE_H
#define LQL_T_BROWSE_H

#include "t_file.h"

/* src encoded into out (removed first) with the down-meta hook, or (meta 0) the bands-only
 * one; 0, or -1 with a failed check naming what. */
static inline int t_encode_browse(const char *src, const char *out, int meta, const char *what)
{
    vx_encode_opts o;
    vx_encode_opts_init(&o);
    o.finish = meta ? brw_encode_finish : brw_encode_finish_bands;
    o.finish_ctx = &o;
    vx_err err = {0};
    t_rm_rf(out);
    const int rc = vx_encode(src, out, &o, &err);
    CHECK_MSG(rc == 0, "%s: encode: %s", what, err.msg);
    return rc;
}

/* dir opened and its browse model; 0, or -1 (nothing left open) with a failed check. */
static inline int t_open_browse(const char *dir, vx_container **c, brw_model **m, const char *what)
{
    vx_err err = {0};
    *c = NULL;
    *m = NULL;
    CHECK_MSG(vx_open(dir, c, &err) == 0 && brw_open(*c, m, &err) == 0, "%s: %s", what, err.msg);
    if (*m) return 0;
    vx_close(*c);
    return -1;
}

#endif
