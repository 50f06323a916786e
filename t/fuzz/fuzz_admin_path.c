
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * libFuzzer harness for ngx_http_dynamo_rl_parse_admin_path(), and with
 * it ngx_http_dynamo_rl_parse_u64() and ngx_http_dynamo_rl_route_valid().
 *
 * The whole input is the part of an admin URI after the location prefix,
 * "{instance_id}/engine/{route}".  Every verdict must agree with an
 * independent reference written from DESIGN's grammar, and an accepted
 * path must decompose exactly: the id printed in decimal is the input up
 * to the first "/", then "/engine/", then the route, which points into
 * the input, ends where it ends, and passes route_valid() itself.
 *
 * Any violated invariant calls abort().
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdio.h>
#include <stdlib.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static ngx_uint_t ngx_http_dynamo_rl_fuzz_u64(u_char *p, size_t len);
static ngx_uint_t ngx_http_dynamo_rl_fuzz_route(u_char *p, size_t len);
static ngx_uint_t ngx_http_dynamo_rl_fuzz_alnum(u_char c);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char        dec[32];
    u_char     *p, *last, *slash;
    size_t      plen;
    uint64_t    id, n;
    ngx_int_t   rc;
    ngx_str_t   route;
    ngx_uint_t  expect;

    p = (u_char *) data;
    last = p + size;

    /* parse_u64() on the whole input */

    n = 0;
    rc = ngx_http_dynamo_rl_parse_u64(p, size, &n);

    if ((rc == NGX_OK) != ngx_http_dynamo_rl_fuzz_u64(p, size)) {
        abort();
    }

    if (rc == NGX_OK) {
        plen = (size_t) snprintf(dec, sizeof(dec), "%llu",
                                 (unsigned long long) n);

        if (plen != size || ngx_memcmp(dec, p, size) != 0) {
            abort();
        }
    }

    /* route_valid() on the whole input */

    rc = ngx_http_dynamo_rl_route_valid(p, size);

    if ((rc == NGX_OK) != ngx_http_dynamo_rl_fuzz_route(p, size)) {
        abort();
    }

    /* parse_admin_path() */

    route.data = NULL;
    route.len = 0;

    rc = ngx_http_dynamo_rl_parse_admin_path(p, size, &id, &route);

    if (rc != NGX_OK && rc != NGX_DECLINED) {
        abort();
    }

    slash = ngx_strlchr(p, last, '/');

    expect = 0;

    if (slash != NULL) {
        plen = slash - p;

        expect = ngx_http_dynamo_rl_fuzz_u64(p, plen)
                 && (size_t) (last - slash) >= 8
                 && ngx_memcmp(slash, "/engine/", 8) == 0
                 && ngx_http_dynamo_rl_fuzz_route(slash + 8,
                                                  last - slash - 8);
    }

    if ((rc == NGX_OK) != expect) {
        abort();
    }

    if (rc != NGX_OK) {
        return 0;
    }

    /* the route lies inside the input, right after "/engine/" */

    if (route.data != slash + 8
        || route.data < p || route.data > last
        || route.len != (size_t) (last - route.data)
        || route.len == 0)
    {
        abort();
    }

    if (ngx_http_dynamo_rl_route_valid(route.data, route.len) != NGX_OK) {
        abort();
    }

    /* the id printed back in decimal is the input up to the first "/" */

    plen = (size_t) snprintf(dec, sizeof(dec), "%llu",
                             (unsigned long long) id);

    if (plen != (size_t) (slash - p) || ngx_memcmp(dec, p, plen) != 0) {
        abort();
    }

    return 0;
}


/* canonical decimal in 0..2^64 - 1, by string comparison, not arithmetic */

static ngx_uint_t
ngx_http_dynamo_rl_fuzz_u64(u_char *p, size_t len)
{
    size_t  i;

    if (len == 0 || len > 20) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return 0;
        }
    }

    if (len > 1 && p[0] == '0') {
        return 0;
    }

    if (len == 20 && ngx_memcmp(p, "18446744073709551615", 20) > 0) {
        return 0;
    }

    return 1;
}


/*
 * route = segment *( "/" segment ), segment = [A-Za-z0-9][A-Za-z0-9._-]*,
 * checked one segment at a time
 */

static ngx_uint_t
ngx_http_dynamo_rl_fuzz_route(u_char *p, size_t len)
{
    u_char  *last, *seg, *end;

    last = p + len;
    seg = p;

    for ( ;; ) {
        end = ngx_strlchr(seg, last, '/');

        if (end == NULL) {
            end = last;
        }

        if (end == seg || !ngx_http_dynamo_rl_fuzz_alnum(*seg)) {
            return 0;
        }

        for (seg++; seg < end; seg++) {
            if (!ngx_http_dynamo_rl_fuzz_alnum(*seg)
                && *seg != '.' && *seg != '_' && *seg != '-')
            {
                return 0;
            }
        }

        if (end == last) {
            return 1;
        }

        seg = end + 1;
    }
}


static ngx_uint_t
ngx_http_dynamo_rl_fuzz_alnum(u_char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9');
}
