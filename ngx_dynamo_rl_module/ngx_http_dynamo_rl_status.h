
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_STATUS_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_STATUS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_common.h"


void ngx_http_dynamo_rl_account(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
ngx_int_t ngx_http_dynamo_rl_status_filter_init(ngx_conf_t *cf);
void ngx_http_dynamo_rl_status_header(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
void ngx_http_dynamo_rl_status_body(ngx_http_dynamo_rl_ctx_t *ctx,
    ngx_chain_t *in);
char *ngx_http_dynamo_rl_status(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_dynamo_rl_metrics(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_dynamo_rl_ready(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_DYNAMO_RL_STATUS_H_INCLUDED_ */
