
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The body scanner against jansson (JSON_REJECT_DUPLICATES with
 * JSON_ALLOW_NUL: RFC 8259 allows "\u0000" in values), shared by the
 * differential unit test and the libFuzzer harness.  The verdicts must
 * agree, except where the two differ by design:
 *
 *   - a root that is not an object: jansson takes any array, the scanner
 *     refuses it (the policy needs one object);
 *   - nesting deeper than 64: jansson allows 2048, the scanner refuses;
 *   - a duplicate name that jansson refuses but the scanner does not read
 *     (below the top-level object, nvext and nvext.metadata_upload): then
 *     the scanner must accept exactly when jansson without
 *     JSON_REJECT_DUPLICATES does;
 *   - numbers out of jansson's range ("too big integer", "real number
 *     overflow"), which RFC 8259 allows: either verdict;
 *   - "\u0000" in a name, which both refuse (jansson cannot hold it, the
 *     scanner because a C string would cut the name short);
 *   - a raw NUL byte right after a number or a literal, which jansson
 *     lets through and RFC 8259 does not allow: the scanner refuses it.
 *
 * Where both accept an object, the removals agree too: the body without
 * the spans of ngx_http_dynamo_rl_body_cuts() (every rule on, the paths
 * "agent_hints.osl" and "extra.deep.a" added) is jansson's document with
 * those members deleted, and scans again with nothing left to remove.
 *
 * Returns the case's class, or BODY_ORACLE_MISMATCH.
 */


#ifndef _NGX_HTTP_DYNAMO_RL_BODY_ORACLE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_BODY_ORACLE_H_INCLUDED_


#include <jansson.h>
#include <string.h>


#define BODY_ORACLE_MISMATCH   0
#define BODY_ORACLE_SAME       1
#define BODY_ORACLE_NOT_OBJECT 2
#define BODY_ORACLE_DEEP       3
#define BODY_ORACLE_DUP_BELOW  4
#define BODY_ORACLE_RANGE      5
#define BODY_ORACLE_RAW_NUL    6


#define BODY_ORACLE_WHEN                                                     \
    (NGX_HTTP_DYNAMO_RL_CUT_ALWAYS | NGX_HTTP_DYNAMO_RL_CUT_ROUTING          \
     | NGX_HTTP_DYNAMO_RL_CUT_TENANT)


static void *body_oracle_alloc(void *data, size_t size);
static int body_oracle(const u_char *data, size_t len);
static ngx_http_dynamo_rl_body_tree_t *body_oracle_tree(void);
static void body_oracle_delete(json_t *j);
static int body_oracle_cuts(const u_char *data, size_t len);


/* room for objects with more members than the scanner's own */

static u_char  body_oracle_arena[4 * 1024 * 1024];
static size_t  body_oracle_used;

/* documents the removals changed */
static unsigned  body_oracle_removed;


static void *
body_oracle_alloc(void *data, size_t size)
{
    void  *p;

    size = (size + 15) & ~(size_t) 15;

    if (body_oracle_used + size > sizeof(body_oracle_arena)) {
        return NULL;
    }

    p = body_oracle_arena + body_oracle_used;
    body_oracle_used += size;

    return p;
}


static int
body_oracle(const u_char *data, size_t len)
{
    int                             jok, sok;
    json_t                         *j;
    ngx_int_t                       rc;
    json_error_t                    e;
    static ngx_http_dynamo_rl_body_scan_t  bs;

    j = json_loadb((const char *) data, len,
                   JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &e);

    bs.alloc = body_oracle_alloc;
    body_oracle_used = 0;

    rc = ngx_http_dynamo_rl_body_scan((u_char *) data, len, &bs);
    sok = (rc == NGX_OK);

    if (j != NULL) {
        jok = json_is_object(j);
        json_decref(j);

        if (!jok) {
            return sok ? BODY_ORACLE_MISMATCH : BODY_ORACLE_NOT_OBJECT;
        }

        if (!sok && bs.too_deep) {
            return BODY_ORACLE_DEEP;
        }

        if (!sok && bs.err_pos < data + len && *bs.err_pos == '\0'
            && bs.err_pos > data
            && ((bs.err_pos[-1] >= '0' && bs.err_pos[-1] <= '9')
                || bs.err_pos[-1] == 'e' || bs.err_pos[-1] == 'l'))
        {
            return BODY_ORACLE_RAW_NUL;
        }

        if (sok && !body_oracle_cuts(data, len)) {
            return BODY_ORACLE_MISMATCH;
        }

        return sok ? BODY_ORACLE_SAME : BODY_ORACLE_MISMATCH;
    }

    if (strstr(e.text, "too big") != NULL
        || strstr(e.text, "overflow") != NULL)
    {
        return BODY_ORACLE_RANGE;
    }

    if (!sok && bs.too_deep) {
        return BODY_ORACLE_DEEP;
    }

    if (strncmp(e.text, "duplicate object key", 20) == 0 && sok) {
        j = json_loadb((const char *) data, len, JSON_ALLOW_NUL, &e);

        if (j == NULL) {
            /* a number jansson cannot hold, after the duplicate */

            return (strstr(e.text, "too big") != NULL
                    || strstr(e.text, "overflow") != NULL)
                   ? BODY_ORACLE_RANGE : BODY_ORACLE_MISMATCH;
        }

        json_decref(j);

        return BODY_ORACLE_DUP_BELOW;
    }

    return sok ? BODY_ORACLE_MISMATCH : BODY_ORACLE_SAME;
}


static ngx_http_dynamo_rl_body_tree_t *
body_oracle_tree(void)
{
    static int                             ready;
    static char                            osl[] = "agent_hints.osl";
    static char                            deep[] = "extra.deep.a";
    static ngx_http_dynamo_rl_body_tree_t  tree;

    if (!ready) {
        ngx_http_dynamo_rl_body_tree_init(&tree);

        if (ngx_http_dynamo_rl_body_tree_add(&tree, (u_char *) osl,
                                             sizeof(osl) - 1,
                                             NGX_HTTP_DYNAMO_RL_CUT_ALWAYS)
            != NULL
            || ngx_http_dynamo_rl_body_tree_add(&tree, (u_char *) deep,
                                                sizeof(deep) - 1,
                                                NGX_HTTP_DYNAMO_RL_CUT_ALWAYS)
               != NULL)
        {
            abort();
        }

        ready = 1;
    }

    return &tree;
}


/* what the removals must leave, by jansson */

static void
body_oracle_delete(json_t *j)
{
    json_t       *nv, *o;
    const char  **name;

    static const char  *nvext[] = {
        "backend_instance_id", "prefill_worker_id", "decode_worker_id",
        "dp_rank", "prefill_dp_rank", "routing_constraints", "router",
        "cache_salt", NULL
    };

    static const char  *hints[] = {
        "priority", "strict_priority", "osl", NULL
    };

    nv = json_object_get(j, "nvext");

    if (!json_is_object(nv)) {
        return;
    }

    for (name = nvext; *name; name++) {
        json_object_del(nv, *name);
    }

    o = json_object_get(nv, "agent_hints");

    if (json_is_object(o)) {
        for (name = hints; *name; name++) {
            json_object_del(o, *name);
        }
    }

    o = json_object_get(nv, "extra");
    o = json_is_object(o) ? json_object_get(o, "deep") : NULL;

    if (json_is_object(o)) {
        json_object_del(o, "a");
    }
}


/* 1: the scanner's removals are jansson's deletions */

static int
body_oracle_cuts(const u_char *data, size_t len)
{
    int                                     ok;
    u_char                                 *out, *p, *last;
    json_t                                 *j, *o;
    ngx_uint_t                              i, n;
    json_error_t                            e;
    static ngx_http_dynamo_rl_body_scan_t   bs;
    static u_char  *cut[2 * NGX_HTTP_DYNAMO_RL_BODY_MEMBERS];

    j = json_loadb((const char *) data, len,
                   JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &e);

    if (j == NULL || !json_is_object(j)) {
        json_decref(j);
        return 1;
    }

    bs.alloc = body_oracle_alloc;
    bs.tree = body_oracle_tree();
    body_oracle_used = 0;

    if (ngx_http_dynamo_rl_body_scan((u_char *) data, len, &bs) != NGX_OK) {
        json_decref(j);
        return 1;
    }

    n = ngx_http_dynamo_rl_body_cuts(&bs, BODY_ORACLE_WHEN, cut);

    if (n == 0) {
        json_decref(j);
        return 1;
    }

    body_oracle_removed++;

    out = malloc(len + 1);
    if (out == NULL) {
        abort();
    }

    p = out;
    last = (u_char *) data;
    ok = 1;

    for (i = 0; i < n; i++) {
        if (cut[2 * i] < last || cut[2 * i + 1] < cut[2 * i]
            || cut[2 * i + 1] > data + len)
        {
            ok = 0;
            break;
        }

        p = ngx_cpymem(p, last, cut[2 * i] - last);
        last = cut[2 * i + 1];
    }

    if (ok) {
        p = ngx_cpymem(p, last, data + len - last);

        o = json_loadb((const char *) out, p - out,
                       JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &e);

        body_oracle_delete(j);

        ok = (o != NULL && json_equal(j, o));
        json_decref(o);

        body_oracle_used = 0;

        if (ok
            && (ngx_http_dynamo_rl_body_scan(out, p - out, &bs) != NGX_OK
                || ngx_http_dynamo_rl_body_cuts(&bs, BODY_ORACLE_WHEN, cut)
                   != 0))
        {
            ok = 0;
        }
    }

    free(out);
    json_decref(j);

    return ok;
}


#endif /* _NGX_HTTP_DYNAMO_RL_BODY_ORACLE_H_INCLUDED_ */
