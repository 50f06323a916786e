
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_GATE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_GATE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_common.h"


/* the gate's state, copied out of the zone under the mutex */

typedef struct {
    ngx_uint_t                      closed;
    ngx_uint_t                      epoch;
    ngx_uint_t                      in_flight;
    uint64_t                        expires;
    uint64_t                        expires_wall;
    uint64_t                        now;
    ngx_uint_t                      expired;
    time_t                          changed;
    uint64_t                        changed_ms;   /* the store's, or 0 */
    size_t                          reason_len;
    u_char                          reason[NGX_HTTP_DYNAMO_RL_GATE_REASON];
    ngx_uint_t                      members_changed;
} ngx_http_dynamo_rl_gate_state_t;


ngx_int_t ngx_http_dynamo_rl_gate_enter(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf);
void ngx_http_dynamo_rl_gate_init_process(ngx_http_dynamo_rl_zone_t *zone);
void ngx_http_dynamo_rl_gate_state(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_gate_state_t *gs);
size_t ngx_http_dynamo_rl_gate_json_len(ngx_http_dynamo_rl_gate_state_t *gs);
u_char *ngx_http_dynamo_rl_gate_json(u_char *p,
    ngx_http_dynamo_rl_gate_state_t *gs);
ngx_int_t ngx_http_dynamo_rl_gate_store_init_process(
    ngx_http_dynamo_rl_zone_t *zone, ngx_http_dynamo_rl_store_t *store,
    ngx_cycle_t *cycle);
char *ngx_http_dynamo_rl_gate_api(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_DYNAMO_RL_GATE_H_INCLUDED_ */
