
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"


/*
 * Gate API bodies: an accepted body has a known action, a reason of 1 to
 * 128 bytes exactly when it closes, and a lease within a week; a refused
 * one always says why.
 */


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static void ngx_http_dynamo_rl_fuzz_gate_body(const uint8_t *data,
    size_t size);
static void ngx_http_dynamo_rl_fuzz_lease(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ngx_http_dynamo_rl_fuzz_gate_body(data, size);
    ngx_http_dynamo_rl_fuzz_lease(data, size);

    return 0;
}


static void
ngx_http_dynamo_rl_fuzz_gate_body(const uint8_t *data, size_t size)
{
    char                           *err;
    ngx_int_t                       rc;
    ngx_http_dynamo_rl_gate_req_t   req;

    err = NULL;

    rc = ngx_http_dynamo_rl_json_gate((u_char *) data, size, &req, &err);

    if (rc == NGX_OK) {
        if (req.action < NGX_HTTP_DYNAMO_RL_GATE_CLOSE
            || req.action > NGX_HTTP_DYNAMO_RL_GATE_OPEN
            || req.lease > 604800000
            || (req.action == NGX_HTTP_DYNAMO_RL_GATE_CLOSE)
               != (req.reason_len > 0)
            || req.reason_len > sizeof(req.reason)
            || (req.action == NGX_HTTP_DYNAMO_RL_GATE_OPEN && req.lease))
        {
            __builtin_trap();
        }

    } else if (err == NULL) {
        __builtin_trap();
    }
}


/* the lease grammar on its own: more than zero, at most a week */

static void
ngx_http_dynamo_rl_fuzz_lease(const uint8_t *data, size_t size)
{
    ngx_msec_t  ms;

    if (ngx_http_dynamo_rl_parse_lease((u_char *) data, size, &ms) == NGX_OK
        && (ms == 0 || ms > 604800000))
    {
        __builtin_trap();
    }
}
