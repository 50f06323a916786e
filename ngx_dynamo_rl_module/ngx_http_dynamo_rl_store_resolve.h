
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The store's hosts (the URL's host, or the sentinels): addresses, and
 * host names.  With a "resolver" at the http level, a name is resolved
 * again on every connect, in the event loop (ngx_resolve_name(), within
 * "resolver_timeout"), and its addresses are taken in turn; without one,
 * names are resolved once, when the configuration is read, as nginx does
 * for "proxy_pass" with a literal host.  The store client calls in at
 * three points: when the URL is read (_add()), for the address of each
 * connect (_peer()), and when the worker process exits (_cancel()); the
 * module's postconfiguration chooses between the two ways (_conf()).
 */


#ifndef _NGX_HTTP_DYNAMO_RL_STORE_RESOLVE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_STORE_RESOLVE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


typedef struct ngx_http_dynamo_rl_store_resolve_s
    ngx_http_dynamo_rl_store_resolve_t;

/*
 * the outcome of a resolution: "cause" NULL and "addr" the address to
 * connect to (the name's port set), or the reason it failed ("addr" then
 * has the name as written, and no sockaddr)
 */

typedef void (*ngx_http_dynamo_rl_store_resolved_pt)(void *data,
    ngx_addr_t *addr, const char *cause);


ngx_http_dynamo_rl_store_resolve_t *ngx_http_dynamo_rl_store_resolve_create(
    ngx_conf_t *cf, ngx_str_t *url);
ngx_int_t ngx_http_dynamo_rl_store_resolve_add(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_resolve_t *res, ngx_url_t *u);
ngx_int_t ngx_http_dynamo_rl_store_resolve_conf(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_resolve_t *res);

ngx_int_t ngx_http_dynamo_rl_store_resolve_peer(
    ngx_http_dynamo_rl_store_resolve_t *res, ngx_uint_t n, ngx_addr_t **addr,
    ngx_http_dynamo_rl_store_resolved_pt handler, void *data);
void ngx_http_dynamo_rl_store_resolve_cancel(
    ngx_http_dynamo_rl_store_resolve_t *res);


#endif /* _NGX_HTTP_DYNAMO_RL_STORE_RESOLVE_H_INCLUDED_ */
