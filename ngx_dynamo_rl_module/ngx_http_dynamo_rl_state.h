
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_STATE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_STATE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_zone.h"


ngx_int_t ngx_http_dynamo_rl_state_check(ngx_http_dynamo_rl_zone_t *zone,
    ngx_log_t *log);
ngx_int_t ngx_http_dynamo_rl_state_load(ngx_http_dynamo_rl_zone_t *zone,
    ngx_log_t *log);
void ngx_http_dynamo_rl_state_begin(ngx_http_dynamo_rl_zone_t *zone,
    ngx_log_t *log);
ngx_int_t ngx_http_dynamo_rl_state_end(ngx_http_dynamo_rl_zone_t *zone,
    ngx_uint_t save, ngx_log_t *log);
ngx_int_t ngx_http_dynamo_rl_state_init_process(ngx_cycle_t *cycle,
    ngx_http_dynamo_rl_zone_t *zone);
void ngx_http_dynamo_rl_state_exit_process(ngx_cycle_t *cycle);
void ngx_http_dynamo_rl_state_exit_master(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_DYNAMO_RL_STATE_H_INCLUDED_ */
