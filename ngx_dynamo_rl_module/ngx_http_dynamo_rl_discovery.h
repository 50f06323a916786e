
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_DISCOVERY_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_DISCOVERY_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_common.h"


/* a refresh in flight longer than this is taken over by another request */
#define NGX_HTTP_DYNAMO_RL_FLIGHT_TIMEOUT  60000


char *ngx_http_dynamo_rl_discovery(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_dynamo_rl_namespace(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_dynamo_rl_admin_url(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_dynamo_rl_discovery_fresh(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_index_t **index);
void ngx_http_dynamo_rl_discovery_cleanup(ngx_http_dynamo_rl_ctx_t *ctx);
ngx_int_t ngx_http_dynamo_rl_in_scope(ngx_http_dynamo_rl_loc_conf_t *drlcf,
    ngx_str_t *ns);
ngx_http_dynamo_rl_index_t *ngx_http_dynamo_rl_discovery_index(
    ngx_http_request_t *r);
ngx_http_dynamo_rl_snap_t *ngx_http_dynamo_rl_snapshot_of(
    ngx_http_request_t *r, ngx_uint_t *source);
ngx_int_t ngx_http_dynamo_rl_discovery_source(ngx_conf_t *cf,
    ngx_http_dynamo_rl_loc_conf_t *drlcf);
ngx_int_t ngx_http_dynamo_rl_discovery_filter_init(ngx_conf_t *cf);
ngx_int_t ngx_http_dynamo_rl_upstream_group(ngx_http_request_t *r,
    ngx_str_t *url, ngx_uint_t log);


#endif /* _NGX_HTTP_DYNAMO_RL_DISCOVERY_H_INCLUDED_ */
