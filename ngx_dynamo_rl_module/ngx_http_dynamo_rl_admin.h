
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_ADMIN_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_ADMIN_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_common.h"


ngx_int_t ngx_http_dynamo_rl_admin_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_dynamo_rl_admin_filter_init(ngx_conf_t *cf);
void ngx_http_dynamo_rl_admin_finish(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
char *ngx_http_dynamo_rl_admin_routes(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_DYNAMO_RL_ADMIN_H_INCLUDED_ */
