
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_MODULE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


#define NGX_HTTP_DYNAMO_RL_PLANE_UNSET      0
#define NGX_HTTP_DYNAMO_RL_PLANE_NONE       1
#define NGX_HTTP_DYNAMO_RL_PLANE_REQUEST    2
#define NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY  3
#define NGX_HTTP_DYNAMO_RL_PLANE_ADMIN      4

#define NGX_HTTP_DYNAMO_RL_ATTEMPT_ID_LEN   128
#define NGX_HTTP_DYNAMO_RL_UUID_LEN         36

#define NGX_HTTP_DYNAMO_RL_RAND_SIZE        4096


typedef struct {
    /* per-process randomness for UUIDv7, refilled with RAND_bytes() */
    u_char                         *rand;
    ngx_uint_t                      rand_pos;
} ngx_http_dynamo_rl_main_conf_t;


typedef struct {
    ngx_uint_t                      plane;
    ngx_uint_t                      methods;

    ngx_str_t                       attempt_header;
    ngx_uint_t                      attempt_header_hash;
    ngx_str_t                       attempt_upstream_header;
    ngx_uint_t                      attempt_upstream_header_hash;

    ngx_flag_t                      strip_routing_headers;
    ngx_flag_t                      accel_buffering;
} ngx_http_dynamo_rl_loc_conf_t;


typedef struct {
    ngx_uint_t                      plane;

    ngx_str_t                       attempt_id;
    ngx_str_t                       outcome;
    ngx_str_t                       deny_reason;

    ngx_str_t                      *header;

    u_char                          id[NGX_HTTP_DYNAMO_RL_UUID_LEN];
} ngx_http_dynamo_rl_ctx_t;


ngx_http_dynamo_rl_ctx_t *ngx_http_dynamo_rl_get_ctx(ngx_http_request_t *r);
ngx_http_dynamo_rl_ctx_t *ngx_http_dynamo_rl_create_ctx(ngx_http_request_t *r);
ngx_int_t ngx_http_dynamo_rl_send_json(ngx_http_request_t *r,
    ngx_uint_t status, ngx_str_t *body);


extern ngx_module_t  ngx_http_dynamo_rl_module;


#include "ngx_http_dynamo_rl_parse.h"
#include "ngx_http_dynamo_rl_request.h"


#endif /* _NGX_HTTP_DYNAMO_RL_MODULE_H_INCLUDED_ */
