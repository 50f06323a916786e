
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * TLS to the store ("rediss://"): nginx's OpenSSL on the store's own
 * connection, the handshake non-blocking in the event loop.  The store
 * client calls in at three points: once the TCP connect completes
 * (_tls_connect(), then _tls_check() from the handler it gave), when the
 * connection fails (_tls_cause(): the TLS layer's own reason, if any) and
 * before it closes the connection (_tls_close()).
 */


#ifndef _NGX_HTTP_DYNAMO_RL_STORE_TLS_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_STORE_TLS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


typedef struct ngx_http_dynamo_rl_store_tls_s  ngx_http_dynamo_rl_store_tls_t;


ngx_http_dynamo_rl_store_tls_t *ngx_http_dynamo_rl_store_tls_create(
    ngx_conf_t *cf, ngx_str_t *host);
char *ngx_http_dynamo_rl_store_tls_param(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_tls_t *tls, ngx_str_t *value);
char *ngx_http_dynamo_rl_store_tls_init(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_tls_t *tls);

ngx_int_t ngx_http_dynamo_rl_store_tls_connect(
    ngx_http_dynamo_rl_store_tls_t *tls, ngx_connection_t *c,
    ngx_msec_t timeout, ngx_connection_handler_pt handler);
const char *ngx_http_dynamo_rl_store_tls_check(
    ngx_http_dynamo_rl_store_tls_t *tls, ngx_connection_t *c);
const char *ngx_http_dynamo_rl_store_tls_cause(
    ngx_http_dynamo_rl_store_tls_t *tls, const char *cause, ngx_err_t *err);
void ngx_http_dynamo_rl_store_tls_close(ngx_connection_t *c);


#endif /* _NGX_HTTP_DYNAMO_RL_STORE_TLS_H_INCLUDED_ */
