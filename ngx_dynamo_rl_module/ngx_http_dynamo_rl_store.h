
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The store client: what the ledger and the gate ask of the store
 * (dynamo_rl_store's configuration, the scripts, the batches of a turn,
 * EVALSHA and its NOSCRIPT fallback, WAIT, the fleet's keys), over the
 * connection of ngx_http_dynamo_rl_store_conn.c; hiredis only formats
 * commands and reads replies.  Commands are answered in order through a
 * FIFO of waiters; a waiter that is cancelled (its request went away) has
 * its reply read and dropped.
 */


#ifndef _NGX_HTTP_DYNAMO_RL_STORE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_STORE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_store_conn.h"


#define NGX_HTTP_DYNAMO_RL_STORE_FAIL      0
#define NGX_HTTP_DYNAMO_RL_STORE_LOCAL     1


char *ngx_http_dynamo_rl_store(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_dynamo_rl_store_init_process(
    ngx_http_dynamo_rl_store_t *store, ngx_cycle_t *cycle);
void ngx_http_dynamo_rl_store_exit_process(ngx_http_dynamo_rl_store_t *store);
ngx_uint_t ngx_http_dynamo_rl_store_ready(ngx_http_dynamo_rl_store_t *store);

ngx_int_t ngx_http_dynamo_rl_store_eval(ngx_http_dynamo_rl_store_t *store,
    ngx_uint_t script, ngx_uint_t nkeys, ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp);
ngx_int_t ngx_http_dynamo_rl_store_command(ngx_http_dynamo_rl_store_t *store,
    ngx_uint_t op, ngx_uint_t argc, ngx_str_t *argv,
    ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp);
ngx_int_t ngx_http_dynamo_rl_store_batch(ngx_http_dynamo_rl_store_t *store,
    ngx_uint_t script, ngx_uint_t nshared, ngx_str_t *keys, ngx_uint_t argc,
    ngx_str_t *argv, ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp);
void ngx_http_dynamo_rl_store_flush_batches(
    ngx_http_dynamo_rl_store_t *store);
void ngx_http_dynamo_rl_store_cancel(ngx_http_dynamo_rl_store_cmd_t *cmd);
void ngx_http_dynamo_rl_store_cleanup(void *data);


#endif /* _NGX_HTTP_DYNAMO_RL_STORE_H_INCLUDED_ */
