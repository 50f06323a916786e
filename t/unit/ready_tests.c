
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"

#include "tap.h"

#include <stdio.h>


/*
 * The readiness decision of dynamo_rl_ready (issue 25): without a store
 * the replica is ready; with one, its worker process must be connected,
 * not have had a claim refused by the store of late (attack 25b) and have
 * read the store's gate within gate_stale.
 */


typedef struct {
    const char  *name;
    ngx_uint_t   store;
    ngx_uint_t   connected;
    ngx_uint_t   refusing;
    uint64_t     read;
    uint64_t     now;
    ngx_msec_t   stale;
    ngx_uint_t   want;
} ready_case_t;


static ready_case_t  cases[] = {
    { "no store", 0, 0, 0, 0, 1000, 2000, NGX_HTTP_DYNAMO_RL_READY },
    { "no store, whatever else", 0, 1, 0, 5, 100000, 1,
      NGX_HTTP_DYNAMO_RL_READY },
    { "store, not connected", 1, 0, 0, 0, 1000, 2000,
      NGX_HTTP_DYNAMO_RL_READY_STORE_DOWN },
    { "store, not connected, a fresh read", 1, 0, 0, 990, 1000, 2000,
      NGX_HTTP_DYNAMO_RL_READY_STORE_DOWN },
    { "connected, never read", 1, 1, 0, 0, 1000, 2000,
      NGX_HTTP_DYNAMO_RL_READY_GATE_UNKNOWN },
    { "connected, read just now", 1, 1, 0, 1000, 1000, 2000,
      NGX_HTTP_DYNAMO_RL_READY },
    { "connected, read gate_stale ago", 1, 1, 0, 1000, 3000, 2000,
      NGX_HTTP_DYNAMO_RL_READY },
    { "connected, read 1 ms past gate_stale", 1, 1, 0, 1000, 3001, 2000,
      NGX_HTTP_DYNAMO_RL_READY_GATE_STALE },
    { "connected, a read after now (clock)", 1, 1, 0, 5000, 1000, 2000,
      NGX_HTTP_DYNAMO_RL_READY },
    { "store, refusing, not connected", 1, 0, 1, 990, 1000, 2000,
      NGX_HTTP_DYNAMO_RL_READY_STORE_DOWN },
    { "connected, refusing, read just now", 1, 1, 1, 1000, 1000, 2000,
      NGX_HTTP_DYNAMO_RL_READY_STORE_REFUSING },
    { "connected, refusing, never read", 1, 1, 1, 0, 1000, 2000,
      NGX_HTTP_DYNAMO_RL_READY_STORE_REFUSING },
    { "no store, refusing", 0, 1, 1, 1000, 1000, 2000,
      NGX_HTTP_DYNAMO_RL_READY },
    { NULL, 0, 0, 0, 0, 0, 0, 0 }
};


int
main(void)
{
    ready_case_t  *c;

    setvbuf(stdout, NULL, _IOLBF, 0);

    for (c = cases; c->name; c++) {
        ok(ngx_http_dynamo_rl_ready_check(c->store, c->connected,
                                          c->refusing, c->read, c->now,
                                          c->stale)
           == c->want, c->name);
    }

    return done_testing();
}
