
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_BODY_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_BODY_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_common.h"


#define NGX_HTTP_DYNAMO_RL_BODY_NONE     0
#define NGX_HTTP_DYNAMO_RL_BODY_READING  1
#define NGX_HTTP_DYNAMO_RL_BODY_CHECKED  2
#define NGX_HTTP_DYNAMO_RL_BODY_DONE     3


ngx_int_t ngx_http_dynamo_rl_body_start(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf);
char *ngx_http_dynamo_rl_metadata_upload(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
char *ngx_http_dynamo_rl_strip_nvext(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_DYNAMO_RL_BODY_H_INCLUDED_ */
