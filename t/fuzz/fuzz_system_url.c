
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * libFuzzer harness for ngx_http_dynamo_rl_system_url_valid().
 *
 * The whole input is a system_url candidate.  An accepted URL must be
 * "http://" or "https://", an authority and at most one final "/", with
 * no userinfo, query, fragment, path, percent-encoding, backslash,
 * whitespace, control or non-ASCII byte, a non-empty host without empty
 * labels, and a port, if any, of 1 to 5 digits in 1..65535.
 *
 * Metamorphic checks on an accepted URL U (each variant is a fresh heap
 * buffer of exactly its size): U without its final "/" is accepted, and
 * so is U + "/" when U has none; U + "//", U + "/x", U + "?", U + "#",
 * "u@" inserted before the host, and U with an uppercase scheme are all
 * refused.
 *
 * Any violated invariant calls abort().
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdlib.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static ngx_int_t ngx_http_dynamo_rl_fuzz_variant(u_char *p, size_t len,
    size_t at, char *insert, size_t cut);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char      c, *p, *last, *host, *end, *port;
    size_t      i, scheme;
    ngx_int_t   rc;
    ngx_uint_t  n;

    p = (u_char *) data;
    last = p + size;

    rc = ngx_http_dynamo_rl_system_url_valid(p, size);

    if (rc != NGX_OK && rc != NGX_DECLINED) {
        abort();
    }

    if (rc != NGX_OK) {
        return 0;
    }

    /* the scheme */

    if (size > 7 && ngx_memcmp(p, "http://", 7) == 0) {
        scheme = 7;

    } else if (size > 8 && ngx_memcmp(p, "https://", 8) == 0) {
        scheme = 8;

    } else {
        abort();
    }

    /* no byte that could smuggle userinfo, query, fragment or escapes */

    for (i = 0; i < size; i++) {
        c = p[i];

        if (c <= 0x20 || c >= 0x7f || c == '@' || c == '?' || c == '#'
            || c == '%' || c == '\\')
        {
            abort();
        }
    }

    /* no path: a "/" after the scheme can only be the last byte */

    host = p + scheme;
    end = last;

    if (end[-1] == '/') {
        end--;
    }

    if (end == host || ngx_strlchr(host, end, '/') != NULL) {
        abort();
    }

    /* the host, then an optional port */

    if (*host == '[') {
        port = ngx_strlchr(host, end, ']');

        if (port == NULL || port - host < 3) {
            abort();
        }

        port++;

    } else {
        port = ngx_strlchr(host, end, ':');

        if (port == NULL) {
            port = end;
        }

        if (port == host || *host == '.' || port[-1] == '.') {
            abort();
        }

        for (i = 1; host + i < port; i++) {
            if (host[i] == '.' && host[i - 1] == '.') {
                abort();
            }
        }
    }

    if (port != end) {
        if (*port++ != ':' || port == end || end - port > 5) {
            abort();
        }

        n = 0;

        for ( /* void */ ; port < end; port++) {
            if (*port < '0' || *port > '9') {
                abort();
            }

            n = n * 10 + (*port - '0');
        }

        if (n == 0 || n > 65535) {
            abort();
        }
    }

    /* metamorphic variants */

    if (last[-1] == '/') {
        if (ngx_http_dynamo_rl_fuzz_variant(p, size, size, "", 1)
            != NGX_OK)
        {
            abort();
        }

        size--;
    }

    if (ngx_http_dynamo_rl_fuzz_variant(p, size, size, "/", 0) != NGX_OK
        || ngx_http_dynamo_rl_fuzz_variant(p, size, size, "//", 0) == NGX_OK
        || ngx_http_dynamo_rl_fuzz_variant(p, size, size, "/x", 0) == NGX_OK
        || ngx_http_dynamo_rl_fuzz_variant(p, size, size, "?", 0) == NGX_OK
        || ngx_http_dynamo_rl_fuzz_variant(p, size, size, "#", 0) == NGX_OK
        || ngx_http_dynamo_rl_fuzz_variant(p, size, scheme, "u@", 0)
           == NGX_OK
        || ngx_http_dynamo_rl_fuzz_variant(p, size, 0, "H", 1) == NGX_OK)
    {
        abort();
    }

    return 0;
}


/*
 * validates a copy of p[0..len) with "insert" placed at offset "at",
 * after removing "cut" bytes there (cut at the end when at == len)
 */

static ngx_int_t
ngx_http_dynamo_rl_fuzz_variant(u_char *p, size_t len, size_t at,
    char *insert, size_t cut)
{
    u_char    *buf, *b;
    size_t     n, size;
    ngx_int_t  rc;

    n = ngx_strlen(insert);

    if (at == len) {
        at -= cut;
    }

    size = len - cut + n;

    buf = malloc(size ? size : 1);
    if (buf == NULL) {
        abort();
    }

    b = ngx_cpymem(buf, p, at);
    b = ngx_cpymem(b, insert, n);
    ngx_memcpy(b, p + at + cut, len - at - cut);

    rc = ngx_http_dynamo_rl_system_url_valid(buf, size);

    free(buf);

    return rc;
}
