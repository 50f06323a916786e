
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_SCOPE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_SCOPE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_common.h"


ngx_uint_t ngx_http_dynamo_rl_scope_variables(ngx_conf_t *cf);
char *ngx_http_dynamo_rl_scope_compile(ngx_conf_t *cf,
    ngx_http_complex_value_t **cv);
ngx_int_t ngx_http_dynamo_rl_scope_eval(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
ngx_int_t ngx_http_dynamo_rl_scope_any(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
ngx_int_t ngx_http_dynamo_rl_scope_worker(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_index_t *index,
    ngx_http_dynamo_rl_worker_t *w);
ngx_int_t ngx_http_dynamo_rl_scope_route(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_str_t *route);
ngx_int_t ngx_http_dynamo_rl_scope_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_DYNAMO_RL_SCOPE_H_INCLUDED_ */
