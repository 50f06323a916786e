
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * libFuzzer harness for ngx_http_dynamo_rl_namespace_match().
 *
 * Input layout: byte 0 modulo 3 is the mode (0 any, 1 exact, 2 prefix);
 * byte 1, modulo the remaining length + 1, is the length of the scope;
 * the scope follows, and the namespace is the rest.  Scope and namespace
 * are copied into heap buffers of exactly their size, so that
 * AddressSanitizer sees a read past either end.
 *
 * Invariants:
 *   any:    always NGX_OK;
 *   exact:  NGX_OK if and only if the bytes are equal;
 *   prefix: NGX_OK if and only if the name is P, starts with "P-", or
 *           starts with P when P ends in "-".  The "only if" direction
 *           (a match implies the name starts with P) is not applied to
 *           P = "dynamo", which DESIGN says matches every namespace.
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdlib.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char     *ns;
    size_t      len;
    ngx_int_t   rc;
    ngx_str_t   scope;
    ngx_uint_t  mode, starts, rule, global;

    static ngx_uint_t  modes[] = {
        NGX_HTTP_DYNAMO_RL_NS_ANY,
        NGX_HTTP_DYNAMO_RL_NS_EXACT,
        NGX_HTTP_DYNAMO_RL_NS_PREFIX
    };

    if (size < 2) {
        return 0;
    }

    mode = modes[data[0] % 3];

    scope.len = data[1] % (size - 1);
    len = size - 2 - scope.len;

    /* malloc(0) may return NULL: keep one byte, pass the real length */

    scope.data = malloc(scope.len ? scope.len : 1);
    ns = malloc(len ? len : 1);

    if (scope.data == NULL || ns == NULL) {
        abort();
    }

    ngx_memcpy(scope.data, data + 2, scope.len);
    ngx_memcpy(ns, data + 2 + scope.len, len);

    rc = ngx_http_dynamo_rl_namespace_match(mode, &scope, ns, len);

    if (rc != NGX_OK && rc != NGX_DECLINED) {
        abort();
    }

    starts = (len >= scope.len
              && ngx_memcmp(ns, scope.data, scope.len) == 0);

    switch (mode) {

    case NGX_HTTP_DYNAMO_RL_NS_ANY:
        if (rc != NGX_OK) {
            abort();
        }

        break;

    case NGX_HTTP_DYNAMO_RL_NS_EXACT:
        if ((rc == NGX_OK) != (starts && len == scope.len)) {
            abort();
        }

        break;

    default: /* NGX_HTTP_DYNAMO_RL_NS_PREFIX */

        rule = starts
               && (len == scope.len
                   || ns[scope.len] == '-'
                   || (scope.len > 0 && scope.data[scope.len - 1] == '-'));

        global = (scope.len == 6
                  && ngx_memcmp(scope.data, "dynamo", 6) == 0);

        if (rule && rc != NGX_OK) {
            abort();
        }

        if (!global && rc == NGX_OK && !rule) {
            abort();
        }

        /* in particular, a match implies the name starts with the prefix */

        if (!global && rc == NGX_OK && !starts) {
            abort();
        }

        break;
    }

    free(scope.data);
    free(ns);

    return 0;
}
