
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * libFuzzer harness for ngx_http_dynamo_rl_attempt_id_valid(),
 * ngx_http_dynamo_rl_attempt_id_canonical() and ngx_http_dynamo_rl_uuid7().
 *
 * The whole input is an attempt id candidate; the verdict must agree
 * with an independent reference of DESIGN's rule, 1 to 128 bytes of
 * [A-Za-z0-9._:-].  When the input has at least 18 bytes, the first 8
 * (big-endian) are also a millisecond time and the next 10 the random
 * bytes of a UUIDv7, whose layout is checked field by field.
 *
 * Any violated invariant calls abort(), which libFuzzer reports as a
 * crash with the input that caused it.
 */


#include "ngx_http_dynamo_rl_module.h"
#include "../unit/uuid7.h"

#include <stdlib.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static ngx_uint_t ngx_http_dynamo_rl_fuzz_id_byte(u_char c);
static void ngx_http_dynamo_rl_fuzz_uuid7(const uint8_t *data);
static void ngx_http_dynamo_rl_fuzz_canonical(u_char *p, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char     *p;
    size_t      i;
    ngx_int_t   rc;
    ngx_uint_t  expect;

    p = (u_char *) data;

    rc = ngx_http_dynamo_rl_attempt_id_valid(p, size);

    if (rc != NGX_OK && rc != NGX_DECLINED) {
        abort();
    }

    expect = (size >= 1 && size <= 128);

    for (i = 0; expect && i < size; i++) {
        expect = ngx_http_dynamo_rl_fuzz_id_byte(p[i]);
    }

    if ((rc == NGX_OK) != expect) {
        abort();
    }

    if (rc == NGX_OK) {
        if (size == 0 || size > NGX_HTTP_DYNAMO_RL_ATTEMPT_ID_LEN) {
            abort();
        }

        for (i = 0; i < size; i++) {
            if (!ngx_http_dynamo_rl_fuzz_id_byte(p[i])) {
                abort();
            }
        }
    }

    ngx_http_dynamo_rl_fuzz_canonical(p, size);

    if (size >= 18) {
        ngx_http_dynamo_rl_fuzz_uuid7(data);
    }

    return 0;
}


static ngx_uint_t
ngx_http_dynamo_rl_fuzz_id_byte(u_char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9')
           || c == '.' || c == '_' || c == ':' || c == '-';
}


static void
ngx_http_dynamo_rl_fuzz_uuid7(const uint8_t *data)
{
    u_char     *end;
    u_char      out[NGX_HTTP_DYNAMO_RL_UUID_LEN + 1], rnd[10], copy[10];
    uint64_t    ms;
    ngx_uint_t  i;

    ms = 0;

    for (i = 0; i < 8; i++) {
        ms = (ms << 8) | data[i];
    }

    ngx_memcpy(rnd, data + 8, sizeof(rnd));
    ngx_memcpy(copy, rnd, sizeof(rnd));

    out[NGX_HTTP_DYNAMO_RL_UUID_LEN] = 0xa5;

    end = ngx_http_dynamo_rl_uuid7(out, ms, rnd);

    /* exactly 36 bytes written, the random input left alone */

    if (end != out + NGX_HTTP_DYNAMO_RL_UUID_LEN
        || out[NGX_HTTP_DYNAMO_RL_UUID_LEN] != 0xa5
        || ngx_memcmp(rnd, copy, sizeof(rnd)) != 0)
    {
        abort();
    }

    /*
     * 36 bytes of lowercase hex and hyphens, version 7, variant 10, the
     * low 48 bits of ms big-endian, all 74 random bits from rnd
     */

    if (ngx_http_dynamo_rl_test_uuid_check(out, ms, rnd) != NULL) {
        abort();
    }

    if (ngx_http_dynamo_rl_attempt_id_valid(out, NGX_HTTP_DYNAMO_RL_UUID_LEN)
        != NGX_OK)
    {
        abort();
    }
}


/*
 * ngx_http_dynamo_rl_attempt_id_canonical(): a UUID comes out lower case,
 * equal to the input but for case, still valid, and unchanged by a second
 * pass; any other input comes out byte for byte as it went in
 */

static void
ngx_http_dynamo_rl_fuzz_canonical(u_char *p, size_t size)
{
    size_t     i;
    ngx_int_t  rc, uuid;
    u_char     buf[64], again[64];

    if (size > sizeof(buf)) {
        return;
    }

    ngx_memcpy(buf, p, size);

    uuid = ngx_http_dynamo_rl_uuid_valid(p, size) == NGX_OK;
    rc = ngx_http_dynamo_rl_attempt_id_canonical(buf, size);

    if ((rc == NGX_OK) != uuid || (rc != NGX_OK && rc != NGX_DECLINED)) {
        abort();
    }

    if (!uuid) {
        if (ngx_memcmp(buf, p, size) != 0) {
            abort();
        }

        return;
    }

    for (i = 0; i < size; i++) {
        if ((buf[i] >= 'A' && buf[i] <= 'Z')
            || ngx_tolower(p[i]) != buf[i])
        {
            abort();
        }
    }

    if (ngx_http_dynamo_rl_uuid_valid(buf, size) != NGX_OK
        || ngx_http_dynamo_rl_attempt_id_valid(buf, size) != NGX_OK)
    {
        abort();
    }

    ngx_memcpy(again, buf, size);

    if (ngx_http_dynamo_rl_attempt_id_canonical(again, size) != NGX_OK
        || ngx_memcmp(again, buf, size) != 0)
    {
        abort();
    }
}
