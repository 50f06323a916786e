
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * libFuzzer harness for ngx_http_dynamo_rl_target_canonical().
 *
 * Input layout: the first byte, modulo the remaining length + 1, is the
 * length of the raw request target ($request_uri); the bytes after it
 * are the raw target, then the normalised $uri.  Each part is copied
 * into its own heap buffer of exactly its size, so that AddressSanitizer
 * sees a read past either end.
 *
 * Invariant: the result is NGX_OK if and only if the path part of raw
 * (up to the first "?") equals uri byte for byte.
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdlib.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char     *raw, *uri;
    size_t      raw_len, uri_len, path, i;
    ngx_int_t   rc;
    ngx_uint_t  expect;

    if (size == 0) {
        return 0;
    }

    raw_len = data[0] % size;
    uri_len = size - 1 - raw_len;

    /* malloc(0) may return NULL: keep one byte, pass the real length */

    raw = malloc(raw_len ? raw_len : 1);
    uri = malloc(uri_len ? uri_len : 1);

    if (raw == NULL || uri == NULL) {
        abort();
    }

    ngx_memcpy(raw, data + 1, raw_len);
    ngx_memcpy(uri, data + 1 + raw_len, uri_len);

    rc = ngx_http_dynamo_rl_target_canonical(raw, raw_len, uri, uri_len);

    if (rc != NGX_OK && rc != NGX_DECLINED) {
        abort();
    }

    for (path = 0; path < raw_len && raw[path] != '?'; path++) { /* void */ }

    expect = (path == uri_len);

    for (i = 0; expect && i < uri_len; i++) {
        expect = (raw[i] == uri[i]);
    }

    if ((rc == NGX_OK) != expect) {
        abort();
    }

    /* an accepted uri can hold no "?": raw was cut at the first one */

    if (rc == NGX_OK && ngx_strlchr(uri, uri + uri_len, '?') != NULL) {
        abort();
    }

    free(raw);
    free(uri);

    return 0;
}
