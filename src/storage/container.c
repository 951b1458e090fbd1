/*
 * container.c — opening a graph-shape VINDEX3 container: index.json (version first), the
 * system graph, one read-only mmap per segment with its tensor table validated, the
 * operand closure of every object, and O(1) tensor lookup by (object, operand name).
 * Opening reads metadata only; no weight byte is touched.
 */
#include "vindex.h"
#include "vx_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct seg {
    char *rel;               /* container-relative path, as index.json spells it */
    void *map;               /* whole file, read-only */
    uint64_t size;
    vx_segment_hdr h;
    const char *object;      /* owning object id (points into the graph JSON) */
    const char *rep;         /* representation id (points into the graph JSON) */
    int active;              /* the bound representation of its object: in the lookup table */
} seg;

struct vx_container {
    char *dir;
    int version;
    vx_shape shape;
    cJSON *index, *graph;
    const cJSON *component;
    vx_graph_shape *shapes;  /* every component validated, the primary first (graph_shape.c) */
    size_t nshapes;
    char sha[65];
    seg *segs;
    size_t nseg, capseg;
    vx_tensor *t;
    size_t nt;
    const char **tsha;       /* per tensor: the recorded sha256 (segment table), or NULL */
    unsigned char *checked;  /* per tensor: 1 once its bytes matched tsha (first touch);
                              * checked[nt]: 1 once every snapshot matched its record */
    size_t *slot;            /* open addressing: tensor index + 1, 0 = empty */
    size_t nslot;            /* power of two, >= 2 * nt */
    char *profile;           /* bound profile name, NULL: each object's baseline */
    vx_bank *bank;           /* bank shape: the LYRW banks moe_manifest.json names (bank.c) */
};

static uint64_t hash_key(const char *object, const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)object; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h;
}

/* Returns the slot holding (object, name), or the empty slot where it would go. */
static size_t probe(const vx_container *c, const char *object, const char *name)
{
    size_t mask = c->nslot - 1, i = (size_t)hash_key(object, name) & mask;
    while (c->slot[i]) {
        const vx_tensor *t = &c->t[c->slot[i] - 1];
        if (strcmp(t->name, name) == 0 && strcmp(t->object, object) == 0)
            break;
        i = (i + 1) & mask;
    }
    return i;
}

static int map_segment(vx_container *c, const char *rel, const char *object, const char *rep,
                       int active, vx_err *err)
{
    for (size_t i = 0; i < c->nseg; i++) {
        if (strcmp(c->segs[i].rel, rel) == 0)
            return vx_errf(err, VX_EFORMAT, "segment '%s' is listed twice in index.json representations",
                           rel);
    }
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(c->index, "segments"), rel);
    uint64_t recorded = 0;
    if (!cJSON_IsObject(rec))
        return vx_errf(err, VX_EFORMAT, "segment '%s' has no record in index.json segments", rel);
    if (vx_json_u64(cJSON_GetObjectItemCaseSensitive(rec, "bytes"), &recorded) < 0)
        return vx_errf(err, VX_EFORMAT, "segment '%s': index.json records no byte count", rel);
    /* the record's kind, where it states one, is the one reading this lql has */
    const cJSON *rsj = cJSON_GetObjectItemCaseSensitive(rec, "schema");
    const char *rs = cJSON_IsString(rsj) ? rsj->valuestring : NULL;
    if (!rs && rsj && !cJSON_IsNull(rsj))
        rs = "(not a string)";
    const cJSON *rv = cJSON_GetObjectItemCaseSensitive(rec, "version");
    if ((rs && strcmp(rs, "tensor-table") != 0) || (rv && !(cJSON_IsNumber(rv) && rv->valuedouble == 1)))
        return vx_errf(err, VX_EUNSUPPORTED, "segment '%s': index.json records it as %s version %g; "
                       "a representation's segment is read as tensor-table version 1", rel,
                       rs ? rs : "tensor-table", cJSON_IsNumber(rv) ? rv->valuedouble : 1.0);
    char path[PATH_MAX];
    if (vx_resolve_in(c->dir, rel, path, sizeof path, err) < 0)
        return -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return vx_errf(err, errno == ENOENT ? VX_EMISSING : VX_EIO, "segment '%s' cannot be opened: %s",
                       rel, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return vx_errf(err, VX_EIO, "segment '%s' is not a regular file", rel);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size != recorded) {
        close(fd);
        return vx_errf(err, VX_EFORMAT, "segment '%s' is %s: %llu bytes on disk, index.json records %llu",
                       rel, size < recorded ? "truncated" : "longer than recorded",
                       (unsigned long long)size, (unsigned long long)recorded);
    }
    if (size > SIZE_MAX) {
        close(fd);
        return vx_errf(err, VX_EFORMAT, "segment '%s' is too large to map", rel);
    }
    void *map = size ? mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (map == MAP_FAILED)
        return vx_errf(err, VX_EIO, "segment '%s' cannot be mapped: %s", rel, strerror(errno));
    /* Pages read from disk then come in 2 MiB folios, mapped with one TLB entry each
     * (pages already cached keep their folios; the segment writer makes 2 MiB ones): decode
     * streams every weight per token, 15% faster so on this host (ENCODE.md "Huge
     * folios"). Only advice: a kernel without file THP ignores it. */
    if (map)
        madvise(map, (size_t)size, MADV_HUGEPAGE);
    if (c->nseg == c->capseg) {
        size_t cap = c->capseg ? 2 * c->capseg : 8;
        seg *s = realloc(c->segs, cap * sizeof *s);
        if (!s) {
            if (map)
                munmap(map, (size_t)size);
            return vx_errf(err, VX_ENOMEM, "out of memory mapping segment '%s'", rel);
        }
        c->segs = s;
        c->capseg = cap;
    }
    seg *s = &c->segs[c->nseg];
    memset(s, 0, sizeof *s);
    s->map = map;
    s->size = size;
    s->object = object;
    s->rep = rep;
    s->active = active;
    s->rel = strdup(rel);
    c->nseg++;                       /* owned from here on: vx_close releases it */
    if (!s->rel)
        return vx_errf(err, VX_ENOMEM, "out of memory mapping segment '%s'", rel);
    if (vx_segment_parse(rel, map, size, &s->h, err) < 0)
        return -1;
    if (s->h.object && strcmp(s->h.object, object) != 0)
        return vx_errf(err, VX_EFORMAT, "segment '%s' holds object '%s', but its representation belongs to '%s'",
                       rel, s->h.object, object);
    if (s->h.representation && strcmp(s->h.representation, rep) != 0)
        return vx_errf(err, VX_EFORMAT, "segment '%s' holds representation '%s', but index.json "
                       "lists it under '%s'", rel, s->h.representation, rep);
    return 0;
}

/* Does an item of list before `item` carry this "id"? (Those before it were checked to have
 * one.) Two of one id would leave which one runs to the reader. */
static int id_earlier(const cJSON *list, const cJSON *item, const char *id)
{
    for (const cJSON *p = list->child; p != item; p = p->next)
        if (strcmp(vx_json_str(p, "id"), id) == 0)
            return 1;
    return 0;
}

/* A representation record's own facts, where it states them (null or absent: not stated):
 * its object is `id`, its encoding one this lql reads, its dtype one it knows. Read past,
 * a wrong one was shown (SHOW REPRESENTATIONS) or ignored for the segments' own. */
static int rep_facts(const cJSON *rep, const char *rid, const char *id, vx_err *err)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(rep, "object");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(rep, "encoding");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(rep, "dtype");
    vx_dtype dt;
    if (o && !cJSON_IsNull(o) && !(cJSON_IsString(o) && strcmp(o->valuestring, id) == 0))
        return vx_errf(err, VX_EFORMAT, "representation '%s' belongs to object '%s', not '%s'",
                       rid, cJSON_IsString(o) ? o->valuestring : "(not a string)", id);
    if (e && !cJSON_IsNull(e) && !(cJSON_IsString(e) && strcmp(e->valuestring, "tensor-table") == 0))
        return vx_errf(err, VX_EUNSUPPORTED, "representation '%s': encoding '%s' is not one this "
                       "lql reads (tensor-table)", rid,
                       cJSON_IsString(e) ? e->valuestring : "(not a string)");
    if (d && !cJSON_IsNull(d) && !(cJSON_IsString(d) && vx_dtype_parse(d->valuestring, &dt) == 0))
        return vx_errf(err, VX_EUNSUPPORTED, "representation '%s': dtype '%s' is not one this lql "
                       "knows", rid, cJSON_IsString(d) ? d->valuestring : "(not a string)");
    return 0;
}

/* Maps every segment of every representation an object lists, in graph order (so verify
 * and inspect see them all); only the bound representation of each object (the override
 * in sel, else the profile's selection, else the first listed: the baseline) enters the
 * lookup table. The profile and overrides are judged before any segment is opened. */
static int map_objects(vx_container *c, const char *profile, const vx_select *sel, size_t nsel,
                       vx_err *err)
{
    const cJSON *reps = cJSON_GetObjectItemCaseSensitive(c->index, "representations");
    if (!cJSON_IsObject(reps))
        return vx_errf(err, VX_EFORMAT, "index.json has no 'representations' object");
    const cJSON *objects = cJSON_GetObjectItemCaseSensitive(c->graph, "objects");
    if (!cJSON_IsArray(objects))
        return vx_errf(err, VX_EFORMAT, "system_graph.json has no 'objects' array");
    const cJSON *prof = NULL, *o;
    if (profile && vx_profile_find(c->index, c->graph, profile, &prof, err) < 0)
        return -1;
    for (size_t i = 0; i < nsel; i++) {
        if (vx_select_check(c->graph, sel[i].object, sel[i].representation, NULL, err) < 0)
            return -1;
    }
    cJSON_ArrayForEach(o, objects) {
        const char *id = vx_json_str(o, "id");
        if (!id)
            return vx_errf(err, VX_EFORMAT, "system_graph.json: an object has no id");
        if (id_earlier(objects, o, id))
            return vx_errf(err, VX_EFORMAT, "system_graph.json: object id '%s' is used twice", id);
        /* an object of no declared component would be read with the primary's geometry */
        const char *comp = vx_json_str(o, "component");
        if (!comp || !vx_shape_component(c, comp))
            return vx_errf(err, VX_EFORMAT, "system_graph.json: object '%s' names component "
                           "%s%s%s, which the graph does not declare", id, comp ? "'" : "",
                           comp ? comp : "(not a string)", comp ? "'" : "");
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "representations"), *r;
        const char *bound = vx_profile_choice(prof, id);
        for (size_t i = 0; i < nsel; i++) {
            if (strcmp(sel[i].object, id) == 0)
                bound = sel[i].representation;
        }
        if (!bound)
            bound = cJSON_GetStringValue(cJSON_GetArrayItem(list, 0));
        cJSON_ArrayForEach(r, list) {
            const char *rid = cJSON_GetStringValue(r);
            const cJSON *rep = rid ? cJSON_GetObjectItemCaseSensitive(reps, rid) : NULL;
            if (!rep)
                return vx_errf(err, VX_EMISSING, "object '%s' names representation '%s', which index.json does not list",
                               id, rid ? rid : "(not a string)");
            if (rep_facts(rep, rid, id, err) < 0)
                return -1;
            const cJSON *segs = cJSON_GetObjectItemCaseSensitive(rep, "segments"), *sp;
            if (!cJSON_IsArray(segs) || cJSON_GetArraySize(segs) == 0)
                return vx_errf(err, VX_EFORMAT, "representation '%s' lists no segments", rid);
            cJSON_ArrayForEach(sp, segs) {
                const char *rel = cJSON_GetStringValue(sp);
                if (!rel)
                    return vx_errf(err, VX_EFORMAT, "representation '%s': a segment path is not a string",
                                   rid);
                if (map_segment(c, rel, id, rid, bound && strcmp(bound, rid) == 0, err) < 0)
                    return -1;
            }
        }
    }
    return 0;
}

/* Bank operands belong to the representation whose index.json record lists
 * bank_storage (docs/lql/BANK.md); another representation of that object bound by a
 * profile holds every operand itself, so the bank stays out of the table. */
static size_t bank_tensors(const vx_container *c)
{
    if (!c->bank)
        return 0;
    const char *rep = vx_bound_representation(c, vx_bank_manifest(c->bank)->object);
    const cJSON *r = rep ? cJSON_GetObjectItemCaseSensitive(
                               cJSON_GetObjectItemCaseSensitive(c->index, "representations"), rep)
                         : NULL;
    return cJSON_GetObjectItemCaseSensitive(r, "bank_storage") ? vx_bank_tensor_count(c->bank) : 0;
}

static int build_table(vx_container *c, vx_err *err)
{
    size_t n = 0, nbank = bank_tensors(c);
    for (size_t i = 0; i < c->nseg; i++)
        n += c->segs[i].active ? c->segs[i].h.n : 0;
    n += nbank;
    c->nslot = 16;
    while (c->nslot < 2 * n)
        c->nslot *= 2;
    c->t = calloc(n ? n : 1, sizeof *c->t);
    c->tsha = calloc(n ? n : 1, sizeof *c->tsha);
    c->checked = calloc(n + 1, 1);
    c->slot = calloc(c->nslot, sizeof *c->slot);
    if (!c->t || !c->tsha || !c->checked || !c->slot)
        return vx_errf(err, VX_ENOMEM, "out of memory for %zu tensors", n);
    for (size_t i = 0; i < c->nseg; i++) {
        seg *s = &c->segs[i];
        if (!s->active)
            continue;
        const unsigned char *payload = (const unsigned char *)s->map + s->h.payload_off;
        for (size_t j = 0; j < s->h.n; j++) {
            const vx_seg_tensor *st = &s->h.t[j];
            size_t at = probe(c, s->object, st->name);
            if (c->slot[at])
                return vx_errf(err, VX_EFORMAT, "object '%s': tensor '%s' appears in both '%s' and '%s'",
                               s->object, st->name, c->t[c->slot[at] - 1].segment, s->rel);
            vx_tensor *t = &c->t[c->nt];
            t->name = st->name;
            t->object = s->object;
            t->segment = s->rel;
            t->dtype = st->dtype;
            t->ndim = st->ndim;
            memcpy(t->shape, st->shape, sizeof t->shape);
            t->data = payload + st->offset;
            t->nbytes = st->length;
            t->offset = st->offset;
            c->tsha[c->nt] = st->sha256;
            c->slot[at] = ++c->nt;
        }
    }
    for (size_t i = 0; i < nbank; i++) {
        const vx_tensor *bt = vx_bank_tensor_at(c->bank, i);
        size_t at = probe(c, bt->object, bt->name);
        if (c->slot[at])
            return vx_errf(err, VX_EFORMAT, "object '%s': tensor '%s' appears in both '%s' and '%s'",
                           bt->object, bt->name, c->t[c->slot[at] - 1].segment, bt->segment);
        c->t[c->nt] = *bt;
        c->slot[at] = ++c->nt;
    }
    return 0;
}

const vx_graph_shape *vx_object_shape(const vx_container *c, const cJSON *obj)
{
    return vx_shape_component(c, vx_json_str(obj, "component"));   /* declared: map_objects */
}

/* Names the segments of an object for a closure error: "'a'" or "'a', 'b'". */
static void object_segments(const vx_container *c, const char *object, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < c->nseg && at < n; i++) {
        if (c->segs[i].active && strcmp(c->segs[i].object, object) == 0)
            at += (size_t)snprintf(buf + at, n - at, "%s'%s'", at ? ", " : "", c->segs[i].rel);
    }
    if (!at)
        snprintf(buf, n, "(none)");
}

static int need_operand(const vx_container *c, const char *object, const char *name, vx_err *err)
{
    if (vx_find(c, object, name))
        return 0;
    char segs[512], layer[48] = "";
    int li;
    if (sscanf(name, "layers.%d.", &li) == 1)
        snprintf(layer, sizeof layer, ", layer %d", li);
    object_segments(c, object, segs, sizeof segs);
    return vx_errf(err, VX_EMISSING, "missing operand '%s' (object '%s'%s): not in segment%s %s",
                   name, object, layer, strchr(segs, ',') ? "s" : "", segs);
}

/* Every source_bindings key (with "{i}" expanded over the component's layers) must be a
 * stored tensor of its object. */
static int close_operands(const vx_container *c, vx_err *err)
{
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(c->graph, "objects")) {
        const char *id = vx_json_str(o, "id");
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(o, "source_bindings")) {
            const char *key = b->string, *tpl = key ? strstr(key, "{i}") : NULL;
            if (!key)
                continue;
            if (!tpl) {
                if (need_operand(c, id, key, err) < 0)
                    return -1;
                continue;
            }
            const vx_graph_shape *sh = vx_object_shape(c, o);
            for (int i = 0; i < sh->layers; i++) {
                char name[512];
                snprintf(name, sizeof name, "%.*s%d%s", (int)(tpl - key), key, i, tpl + 3);
                if (need_operand(c, id, name, err) < 0)
                    return -1;
            }
        }
    }
    return 0;
}

static int read_graph(vx_container *c, vx_err *err)
{
    const char *rel = vx_json_str(c->index, "system_graph");
    if (vx_read_json_in(c->dir, rel, &c->graph, err) < 0 ||
        vx_schema_check(c->graph, rel, VX_GRAPH_SCHEMA, err) < 0)
        return -1;
    /* The primary component is the first decoder, else the first component. */
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(c->graph, "components"), *comp;
    const cJSON *decoder = NULL;
    int k = 0;
    cJSON_ArrayForEach(comp, comps) {
        const char *id = vx_json_str(comp, "id"), *role = vx_json_str(comp, "role");
        if (!id || !role)
            return vx_errf(err, VX_EFORMAT, "%s: components[%d] has no %s string", rel, k,
                           id ? "role" : "id");
        if (id_earlier(comps, comp, id))
            return vx_errf(err, VX_EFORMAT, "%s: component id '%s' is used twice", rel, id);
        if (!decoder && strcmp(role, "decoder") == 0)
            decoder = comp;
        k++;
    }
    if (!cJSON_GetArrayItem(comps, 0))
        return vx_errf(err, VX_EFORMAT, "%s has no components", rel);
    /* lql reads and runs a decoder: a tower or drafter alone run as one would answer for a
     * model the container does not hold */
    if (!decoder)
        return vx_errf(err, VX_EUNSUPPORTED, "%s: no component has role 'decoder' (the first, "
                       "'%s', has role '%s'); lql reads and runs decoder systems", rel,
                       vx_json_str(cJSON_GetArrayItem(comps, 0), "id"),
                       vx_json_str(cJSON_GetArrayItem(comps, 0), "role"));
    c->component = decoder;
    if (vx_shapes_read(c->graph, c->component, &c->shapes, &c->nshapes, err) < 0)
        return -1;
    /* index.json repeats the primary's geometry for tools that read no graph: two answers
     * that differ would give those tools another model */
    static const char *const keys[] = {"hidden_size", "num_layers"};
    const int want[] = {c->shapes->hidden, c->shapes->layers};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->index, keys[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == want[i])) {
            char got[32];
            snprintf(got, sizeof got, cJSON_IsNumber(v) ? "%.17g" : "(not a number)",
                     cJSON_IsNumber(v) ? v->valuedouble : 0.0);
            return vx_errf(err, VX_EFORMAT, "index.json: %s %s disagrees with the system "
                           "graph's %d", keys[i], got, want[i]);
        }
    }
    return 0;
}

/* A recorded hash that is present but not a sha256 is refused here, once for every reader:
 * read as "none recorded" (the older-writer path), it would switch a check off. */
static int bad_hash(const cJSON *h)
{
    return h && !cJSON_IsNull(h) && !(cJSON_IsString(h) && vx_is_sha256(h->valuestring));
}

static int hashes_wellformed(const vx_container *c, vx_err *err)
{
    const cJSON *br = cJSON_GetObjectItemCaseSensitive(c->index, "browse");
    if (bad_hash(cJSON_GetObjectItemCaseSensitive(br, "down_meta_sha256")))
        return vx_errf(err, VX_EFORMAT, "index.json: browse.down_meta_sha256 is not a sha256 (64 "
                       "lower-case hex digits)");
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(c->index, "segments"))
        if (bad_hash(cJSON_GetObjectItemCaseSensitive(r, "sha256")))
            return vx_errf(err, VX_EFORMAT, "index.json: segments['%s'].sha256 is not a sha256 (64 "
                           "lower-case hex digits)", r->string);
    static const char *const rep_hashes[] = {"payload_sha256", "source_payload_sha256"};
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(c->index, "representations"))
        for (int i = 0; i < 2; i++)
            if (bad_hash(cJSON_GetObjectItemCaseSensitive(r, rep_hashes[i])))
                return vx_errf(err, VX_EFORMAT, "index.json: representations['%s'].%s is not a "
                               "sha256 (64 lower-case hex digits)", r->string, rep_hashes[i]);
    const cJSON *snaps = cJSON_GetObjectItemCaseSensitive(c->index, "snapshots"), *s;
    if (snaps && !cJSON_IsObject(snaps))
        return vx_errf(err, VX_EFORMAT, "index.json: snapshots is not an object");
    cJSON_ArrayForEach(s, snaps)
        if (!cJSON_IsString(s) || !vx_is_sha256(s->valuestring))
            return vx_errf(err, VX_EFORMAT, "index.json: snapshots['%s'] is not a sha256 (64 "
                           "lower-case hex digits)", s->string);
    return 0;
}

/* What a directory without index.json or a file given as a container is, when it can be
 * told: users point lql at the checkpoint or the GGUF they have. */
static int not_container(const char *dir, int is_file, vx_err *err)
{
    char path[PATH_MAX];
    const size_t n = strlen(dir);
    if (is_file)
        return vx_errf(err, VX_EARG, "'%s' is a file, not a container directory%s", dir,
                       n > 5 && strcasecmp(dir + n - 5, ".gguf") == 0
                           ? " (a GGUF file: lql reads VINDEX3 containers; encode the Hugging Face "
                             "checkpoint it came from with 'vindex encode DIR -o OUT')"
                           : "");
    int hf = snprintf(path, sizeof path, "%s/config.json", dir) < (int)sizeof path &&
             access(path, F_OK) == 0;
    return vx_errf(err, VX_EMISSING, "'%s' is not a container: it has no index.json%s", dir,
                   hf ? " (it holds config.json: a Hugging Face checkpoint? encode it with "
                        "'vindex encode DIR -o OUT' or EXTRACT MODEL \"DIR\" INTO \"OUT\")"
                      : "");
}

static int read_index(vx_container *c, vx_err *err)
{
    char path[PATH_MAX], *text = NULL;
    size_t n = 0;
    if (vx_is_file(c->dir))
        return not_container(c->dir, 1, err);
    if (vx_resolve_in(c->dir, "index.json", path, sizeof path, err) < 0)
        return -1;
    if (vx_read_small_file(path, "index.json", &text, &n, err) < 0) {
        if (err && err->code == VX_EMISSING)
            not_container(c->dir, 0, err);
        return -1;
    }
    vx_sha256_hex(text, n, c->sha);
    int rc = vx_json_parse("index.json", text, n, &c->index, err);
    free(text);
    if (rc < 0 || vx_index_version(c->index, &c->version, err) < 0)
        return -1;
    const cJSON *graph = cJSON_GetObjectItemCaseSensitive(c->index, "system_graph");
    const cJSON *bank = cJSON_GetObjectItemCaseSensitive(c->index, "moe_manifest");
    int has_graph = cJSON_IsString(graph), has_bank = bank && !cJSON_IsNull(bank);
    if (!has_graph && has_bank)
        return vx_errf(err, VX_EUNSUPPORTED,
                       "bank-shape containers (LYRW v2) are not readable yet (index.json sets moe_manifest, no system_graph)");
    if (!has_graph)
        return vx_errf(err, VX_EFORMAT, "index.json names neither a system_graph nor a moe_manifest");
    c->shape = has_bank ? VX_SHAPE_BANK : VX_SHAPE_GRAPH;
    return hashes_wellformed(c, err);
}

int vx_open(const char *dir, vx_container **out, vx_err *err)
{
    return vx_open_profile(dir, NULL, NULL, 0, out, err);
}

int vx_open_profile(const char *dir, const char *profile, const vx_select *sel, size_t nsel,
                    vx_container **out, vx_err *err)
{
    *out = NULL;
    if (!dir || !*dir)
        return vx_errf(err, VX_EARG, "no container directory given");
    vx_container *c = calloc(1, sizeof *c);
    if (!c || !(c->dir = strdup(dir)) || (profile && !(c->profile = strdup(profile)))) {
        if (c)
            free(c->dir);
        free(c);
        return vx_errf(err, VX_ENOMEM, "out of memory opening '%s'", dir);
    }
    if (read_index(c, err) < 0 || read_graph(c, err) < 0 || map_objects(c, profile, sel, nsel, err) < 0 ||
        (c->shape == VX_SHAPE_BANK &&
         vx_bank_load(c->dir, c->index, c->graph, c->shapes, &c->bank, err) < 0) ||
        build_table(c, err) < 0 || close_operands(c, err) < 0) {
        vx_close(c);
        return -1;
    }
    *out = c;
    return 0;
}

void vx_close(vx_container *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nseg; i++) {
        vx_segment_hdr_free(&c->segs[i].h);
        if (c->segs[i].map)
            munmap(c->segs[i].map, (size_t)c->segs[i].size);
        free(c->segs[i].rel);
    }
    free(c->segs);
    vx_bank_free(c->bank);
    vx_shapes_free(c->shapes, c->nshapes);
    free(c->t);
    free(c->tsha);
    free(c->checked);
    free(c->slot);
    cJSON_Delete(c->index);
    cJSON_Delete(c->graph);
    free(c->profile);
    free(c->dir);
    free(c);
}

const char *vx_dir(const vx_container *c) { return c->dir; }
int vx_version(const vx_container *c) { return c->version; }
vx_shape vx_container_shape(const vx_container *c) { return c->shape; }
const vx_bank *vx_container_bank(const vx_container *c) { return c->bank; }
const cJSON *vx_index_json(const vx_container *c) { return c->index; }
const cJSON *vx_graph_json(const vx_container *c) { return c->graph; }
const cJSON *vx_component(const vx_container *c) { return c->component; }
const vx_graph_shape *vx_shape_of(const vx_container *c) { return c->shapes; }
size_t vx_shape_count(const vx_container *c) { return c->nshapes; }

const vx_graph_shape *vx_shape_at(const vx_container *c, size_t i)
{
    return i < c->nshapes ? &c->shapes[i] : NULL;
}

const vx_graph_shape *vx_shape_component(const vx_container *c, const char *id)
{
    for (size_t i = 0; id && i < c->nshapes; i++)
        if (c->shapes[i].id && strcmp(c->shapes[i].id, id) == 0) return &c->shapes[i];
    return id ? NULL : c->shapes;
}
const char *vx_index_sha256(const vx_container *c) { return c->sha; }
const char *vx_profile(const vx_container *c) { return c->profile; }

const char *vx_bound_representation(const vx_container *c, const char *object)
{
    for (size_t i = 0; i < c->nseg; i++) {
        if (c->segs[i].active && strcmp(c->segs[i].object, object) == 0)
            return c->segs[i].rep;
    }
    return NULL;
}
size_t vx_tensor_count(const vx_container *c) { return c->nt; }

const vx_tensor *vx_tensor_at(const vx_container *c, size_t i)
{
    return i < c->nt ? &c->t[i] : NULL;
}

const vx_tensor *vx_find(const vx_container *c, const char *object, const char *name)
{
    if (!c || !object || !name || !c->nslot)
        return NULL;
    size_t at = probe(c, object, name);
    return c->slot[at] ? &c->t[c->slot[at] - 1] : NULL;
}

const vx_tensor *vx_findf(const vx_container *c, const char *object, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof name)
        return NULL;               /* no stored operand name is this long */
    return vx_find(c, object, name);
}

int vx_resolve(const vx_container *c, const char *rel, char *out, size_t outsz, vx_err *err)
{
    return vx_resolve_in(c->dir, rel, out, outsz, err);
}

int vx_representation_totals(const vx_container *c, const char *rep, vx_rep_totals *out)
{
    int found = 0;
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < c->nseg; i++) {
        const seg *s = &c->segs[i];
        if (strcmp(s->rep, rep) != 0)
            continue;
        found = 1;
        for (size_t j = 0; j < s->h.n; j++) {
            const vx_seg_tensor *t = &s->h.t[j];
            uint64_t e = 1;
            for (int d = 0; d < t->ndim; d++)
                e *= (uint64_t)t->shape[d];
            out->tensors++;
            out->bytes += t->length;
            out->weights += e;
            out->dtypes |= 1u << t->dtype;
        }
    }
    return found ? 0 : -1;
}

size_t vx_segment_count(const vx_container *c) { return c->nseg; }

int vx_segment_at(const vx_container *c, size_t i, vx_segment_view *out)
{
    if (i >= c->nseg)
        return -1;
    const seg *s = &c->segs[i];
    out->rel = s->rel;
    out->object = s->object;
    out->representation = s->rep;
    out->active = s->active;
    out->data = s->map;
    out->size = s->size;
    out->hdr = &s->h;
    return 0;
}

/* ---------------------------------------------------------------- first-touch integrity */

int vx_tensor_check(const vx_container *c, const vx_tensor *t, vx_err *err)
{
    if (!c || !t || t < c->t || t >= c->t + c->nt)
        return vx_errf(err, VX_EARG, "integrity check: not a tensor of this container");
    size_t i = (size_t)(t - c->t);
    if (c->checked[i])
        return 0;
    if (!c->tsha[i]) {
        /* a bank view has no hash of its own: its LYRW file's record covers it */
        if (c->bank && vx_bank_tensor_check(c->bank, t, c->dir, err) < 0)
            return -1;
        c->checked[i] = 1;
        return 0;
    }
    vx_sha256_ctx ctx;
    char hex[65], what[VX_ERR_MAX];
    snprintf(what, sizeof what, "checking tensor '%s' of segment '%s'", t->name, t->segment);
    if (vx_sha256_init(&ctx, err) < 0)
        return -1;
    if (vx_sha256_mapped(&ctx, t->data, t->nbytes, 0, what, err) < 0) {
        vx_sha256_free(&ctx);
        return -1;
    }
    vx_sha256_final(&ctx, hex);
    if (strcmp(hex, c->tsha[i]) != 0)
        return vx_errf(err, VX_EVERIFY, "segment '%s' is corrupted: tensor '%s' (object '%s') "
                       "does not match its recorded sha256 (vindex verify %s checks every byte)",
                       t->segment, t->name, t->object, c->dir);
    c->checked[i] = 1;   /* c is logically const: the memo is not part of its value */
    return 0;
}

int vx_snapshot_check(const vx_container *c, const char *name, vx_err *err)
{
    const cJSON *snaps = cJSON_GetObjectItemCaseSensitive(c->index, "snapshots"), *s;
    if (!name) {
        /* once per open container: the engine, browse and TOKENIZE each ask before loading
         * the tokenizer, and the files are hashed whole */
        if (c->checked[c->nt])
            return 0;
        cJSON_ArrayForEach(s, snaps)
            if (s->string && vx_snapshot_check(c, s->string, err) < 0)
                return -1;
        for (size_t i = 0; snaps && vx_hf_snapshots[i]; i++)
            if (!cJSON_GetObjectItemCaseSensitive(snaps, vx_hf_snapshots[i]) &&
                vx_snapshot_check(c, vx_hf_snapshots[i], err) < 0)
                return -1;
        c->checked[c->nt] = 1;
        return 0;
    }
    const char *want = vx_json_str(snaps, name);
    char path[4096], hex[65];
    if (!want) {
        /* with hashes recorded, a snapshot file the record leaves out came later */
        if (!snaps || vx_resolve(c, name, path, sizeof path, err) != 0 || access(path, F_OK) != 0)
            return 0;
        return vx_errf(err, VX_EVERIFY, "snapshot '%s' is in the container but index.json's "
                       "snapshots records no sha256 for it: it was added after the encode", name);
    }
    if (vx_resolve(c, name, path, sizeof path, err) != 0)
        return -1;
    if (access(path, F_OK) != 0)
        return vx_errf(err, VX_EMISSING, "snapshot '%s' is missing: index.json records its sha256 "
                       "(the encoder copied it from the checkpoint)", name);
    if (vx_sha256_file(path, hex, err) != 0)
        return -1;
    if (strcmp(hex, want) != 0)
        return vx_errf(err, VX_EVERIFY, "snapshot '%s' does not match the sha256 index.json records "
                       "for it: it was edited or damaged after the encode (vindex verify %s checks "
                       "every file)", name, c->dir);
    return 0;
}

int vx_object_check(const vx_container *c, const char *object, vx_err *err)
{
    for (size_t i = 0; i < c->nt; i++)
        if ((!object || strcmp(c->t[i].object, object) == 0) &&
            vx_tensor_check(c, &c->t[i], err) < 0)
            return -1;
    return 0;
}
