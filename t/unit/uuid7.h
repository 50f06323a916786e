
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_UUID7_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_UUID7_H_INCLUDED_


/*
 * The reference check of a generated UUIDv7, shared by the unit tests
 * (t/unit/unit_tests.c) and the attempt id fuzzer
 * (t/fuzz/fuzz_attempt_id.c).
 */


static char *ngx_http_dynamo_rl_test_uuid_check(u_char *u, uint64_t ms,
    u_char *rnd);


/*
 * returns NULL if "u" is a well-formed UUIDv7 for "ms" and "rnd", or the
 * first problem found
 */

static char *
ngx_http_dynamo_rl_test_uuid_check(u_char *u, uint64_t ms, u_char *rnd)
{
    u_char      c, b[16];
    uint64_t    ts;
    ngx_uint_t  i, k;

    k = 0;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_UUID_LEN; i++) {
        c = u[i];

        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-') {
                return "no hyphen at 8, 13, 18 or 23";
            }

            continue;
        }

        if (c >= '0' && c <= '9') {
            c = (u_char) (c - '0');

        } else if (c >= 'a' && c <= 'f') {
            c = (u_char) (c - 'a' + 10);

        } else {
            return "not lowercase hex";
        }

        if (k % 2 == 0) {
            b[k / 2] = (u_char) (c << 4);

        } else {
            b[k / 2] |= c;
        }

        k++;
    }

    if (u[14] != '7' || (b[6] >> 4) != 7) {
        return "version nibble is not 7";
    }

    if ((b[8] & 0xc0) != 0x80) {
        return "variant bits are not 10";
    }

    ts = 0;

    for (i = 0; i < 6; i++) {
        ts = (ts << 8) | b[i];
    }

    if (ts != (ms & 0xffffffffffffULL)) {
        return "timestamp is not the low 48 bits of ms, big-endian";
    }

    if ((b[6] & 0x0f) != (rnd[0] & 0x0f)
        || b[7] != rnd[1]
        || (b[8] & 0x3f) != (rnd[2] & 0x3f)
        || ngx_memcmp(&b[9], &rnd[3], 7) != 0)
    {
        return "random bits are not taken from rnd";
    }

    return NULL;
}


#endif /* _NGX_HTTP_DYNAMO_RL_UUID7_H_INCLUDED_ */
