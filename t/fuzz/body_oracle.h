
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


static void *body_oracle_alloc(void *data, size_t size);
static int body_oracle(const u_char *data, size_t len);


/* room for objects with more members than the scanner's own */

static u_char  body_oracle_arena[4 * 1024 * 1024];
static size_t  body_oracle_used;


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


#endif /* _NGX_HTTP_DYNAMO_RL_BODY_ORACLE_H_INCLUDED_ */
