
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"

#include "tap.h"

#include <stdio.h>


/*
 * The duration buckets and the table of reasons by plane (issue 17):
 * each duration lands in the first bucket whose bound it does not pass,
 * and a reason is found only on the planes that can give it.
 */


typedef struct {
    ngx_msec_t   ms;
    ngx_uint_t   bucket;
} bucket_case_t;


typedef struct {
    const char  *reason;
    ngx_uint_t   plane;
    ngx_uint_t   found;
} reason_case_t;



static bucket_case_t  buckets[] = {
    { 0, 0 },
    { 5, 0 },
    { 6, 1 },
    { 250, 5 },
    { 251, 6 },
    { 60000, 12 },
    { 60001, 13 },
    { 3600000, 17 },
    { 3600001, 18 },
    { (ngx_msec_t) -1, 18 }
};


static reason_case_t  reasons[] = {
    { "method", 0, 1 },
    { "method", 1, 1 },
    { "method", 2, 1 },
    { "redirected", 1, 1 },
    { "gate_closed", 0, 1 },
    { "gate_closed", 2, 0 },
    { "unknown_worker", 0, 0 },
    { "unknown_worker", 1, 0 },
    { "unknown_worker", 2, 1 },
    { "cross_origin", 0, 0 },
    { "cross_origin", 2, 1 },
    { "discovery_invalid", 1, 1 },
    { "discovery_invalid", 2, 0 },
    { "upgrade_refused", 2, 0 },
    { "metho", 0, 0 },
    { "", 0, 0 },
    { NULL, 0, 0 }
};


int
main(void)
{
    char            name[160];
    ngx_uint_t      i, n, planes, series, stored;
    reason_case_t  *c;

    setvbuf(stdout, NULL, _IOLBF, 0);

    for (i = 0; i < sizeof(buckets) / sizeof(buckets[0]); i++) {
        snprintf(name, sizeof(name), "%lu ms: bucket %lu",
                 (unsigned long) buckets[i].ms,
                 (unsigned long) buckets[i].bucket);
        ok(ngx_http_dynamo_rl_bucket(buckets[i].ms) == buckets[i].bucket,
           name);
    }

    for (i = 1; i < NGX_HTTP_DYNAMO_RL_BUCKETS - 1; i++) {
        if (ngx_http_dynamo_rl_buckets[i] <= ngx_http_dynamo_rl_buckets[i - 1])
        {
            break;
        }
    }

    ok(i == NGX_HTTP_DYNAMO_RL_BUCKETS - 1, "bounds increase");
    ok(ngx_http_dynamo_rl_buckets[NGX_HTTP_DYNAMO_RL_BUCKETS - 2] == 3600000,
       "the last bound is an hour");

    for (c = reasons; c->reason; c++) {
        n = ngx_http_dynamo_rl_reason_find((u_char *) c->reason,
                                           ngx_strlen(c->reason), c->plane);

        snprintf(name, sizeof(name), "\"%s\" on plane %lu: %s", c->reason,
                 (unsigned long) c->plane, c->found ? "found" : "none");
        ok(c->found ? n < NGX_HTTP_DYNAMO_RL_REASONS
                    : n == NGX_HTTP_DYNAMO_RL_REASONS, name);
    }

    /*
     * the zone's counters have room for every row; 28 series in all, and
     * 3 more that only a shared store gives
     */

    series = 0;
    stored = 0;

    for (i = 0; ngx_http_dynamo_rl_reasons[i].name.len; i++) {
        planes = ngx_http_dynamo_rl_reasons[i].planes;
        n = (planes & 1) + ((planes >> 1) & 1) + ((planes >> 2) & 1);

        if (planes & NGX_HTTP_DYNAMO_RL_ON_STORE) {
            stored += n;

        } else {
            series += n;
        }
    }

    ok(i <= NGX_HTTP_DYNAMO_RL_REASONS, "the table fits the zone");
    ok(series == 28, "28 (plane, reason) series");
    ok(stored == 3, "3 more with a store, on the request plane");

    return done_testing();
}
