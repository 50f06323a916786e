
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_REQUEST_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_REQUEST_H_INCLUDED_


ngx_int_t ngx_http_dynamo_rl_preaccess_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_dynamo_rl_precontent_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_dynamo_rl_deny(ngx_http_request_t *r,
    ngx_uint_t status, char *reason, char *message);
ngx_int_t ngx_http_dynamo_rl_error(ngx_http_request_t *r,
    ngx_uint_t status, char *reason, char *message);
ngx_int_t ngx_http_dynamo_rl_read_only(ngx_http_request_t *r);
ngx_int_t ngx_http_dynamo_rl_cross_origin(ngx_http_request_t *r);
ngx_int_t ngx_http_dynamo_rl_allow(ngx_http_request_t *r,
    ngx_uint_t methods);
void ngx_http_dynamo_rl_status_type(ngx_uint_t status, ngx_str_t *type);


#endif /* _NGX_HTTP_DYNAMO_RL_REQUEST_H_INCLUDED_ */
