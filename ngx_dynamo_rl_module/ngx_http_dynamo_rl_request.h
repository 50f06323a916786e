
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_REQUEST_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_REQUEST_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_common.h"


ngx_int_t ngx_http_dynamo_rl_preaccess_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_dynamo_rl_precontent_handler(ngx_http_request_t *r);
ngx_http_dynamo_rl_ctx_t *ngx_http_dynamo_rl_request_late(
    ngx_http_request_t *r, ngx_http_dynamo_rl_loc_conf_t *drlcf);
uint64_t ngx_http_dynamo_rl_request_lens(
    ngx_http_dynamo_rl_loc_conf_t *drlcf);
char *ngx_http_dynamo_rl_assigned(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_dynamo_rl_strip_headers(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_dynamo_rl_request_upstream(ngx_conf_t *cf,
    ngx_http_dynamo_rl_main_conf_t *drmcf,
    ngx_http_upstream_srv_conf_t *uscf);


#endif /* _NGX_HTTP_DYNAMO_RL_REQUEST_H_INCLUDED_ */
