
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * libFuzzer harness for ngx_http_dynamo_rl_state_parse() and
 * ngx_http_dynamo_rl_state_record(), the reader of the state file of
 * "dynamo_rl_zone ... state=".
 *
 * The input is parsed as it is, then signed: after "dynamo_rl_state 1\n"
 * with an "end" line that counts its "a " lines and carries the right
 * checksum, so that mutations reach the field checks behind the
 * checksum.  A file that parses must give exactly its count of records,
 * each inside the buffer with a valid id, and a reason that fits the
 * gate; any violated invariant calls abort().
 */


#include "ngx_http_dynamo_rl_module.h"

#include <stdio.h>
#include <stdlib.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static void ngx_http_dynamo_rl_fuzz_state(u_char *p, size_t len);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char      *buf, *p, *exact;
    size_t       i, n;
    uint64_t     sum;
    ngx_uint_t   records;

    /* buffers of exactly the parsed size: a read past the end is caught */

    exact = malloc(size ? size : 1);
    if (exact == NULL) {
        return 0;
    }

    ngx_memcpy(exact, data, size);
    ngx_http_dynamo_rl_fuzz_state(exact, size);
    free(exact);

    buf = malloc(size + 128);
    if (buf == NULL) {
        return 0;
    }

    /* version 1, or 2 (owners of records in flight) by the size's parity */

    p = ngx_cpymem(buf, (size & 1) ? "dynamo_rl_state 2\n"
                                   : "dynamo_rl_state 1\n", 18);
    p = ngx_cpymem(p, data, size);

    records = 0;

    for (i = 18; i + 1 < (size_t) (p - buf); i++) {
        if (buf[i - 1] == '\n' && buf[i] == 'a' && buf[i + 1] == ' ') {
            records++;
        }
    }

    sum = ngx_http_dynamo_rl_state_checksum(buf, p - buf);

    n = snprintf((char *) p, 64, "end %lu %016llx\n",
                 (unsigned long) records, (unsigned long long) sum);

    n += p - buf;

    exact = malloc(n);
    if (exact != NULL) {
        ngx_memcpy(exact, buf, n);
        ngx_http_dynamo_rl_fuzz_state(exact, n);
        free(exact);
    }

    free(buf);

    return 0;
}


static void
ngx_http_dynamo_rl_fuzz_state(u_char *p, size_t len)
{
    char                               *err;
    u_char                             *pos;
    ngx_int_t                           rc;
    ngx_uint_t                          n;
    ngx_http_dynamo_rl_state_file_t     sf;
    ngx_http_dynamo_rl_state_record_t   rec;

    err = NULL;

    rc = ngx_http_dynamo_rl_state_parse(p, len, &sf, &err);

    if (rc != NGX_OK) {
        if (rc != NGX_ERROR || err == NULL) {
            abort();
        }

        return;
    }

    if (sf.reason_len > NGX_HTTP_DYNAMO_RL_GATE_REASON
        || sf.records < p || sf.end > p + len || sf.records > sf.end)
    {
        abort();
    }

    pos = sf.records;

    for (n = 0; ; n++) {
        rc = ngx_http_dynamo_rl_state_record(&pos, sf.end, &rec);

        if (rc == NGX_DONE) {
            break;
        }

        if (rc != NGX_OK
            || rec.id < p || rec.id + rec.len > sf.end
            || ngx_http_dynamo_rl_attempt_id_valid(rec.id, rec.len)
               != NGX_OK
            || rec.state < 1 || rec.state > 5 || rec.stream > 1
            || rec.in_flight != (rec.state < 3)
            || (rec.owner != 0) != (sf.version == 2 && rec.in_flight)
            || rec.tail != (sf.version == 2)
            || rec.owner > 0x7fffffff
            || rec.reason >= NGX_HTTP_DYNAMO_RL_ATTEMPT_REASONS)
        {
            abort();
        }
    }

    if (n != sf.nrecords || pos != sf.end) {
        abort();
    }
}
