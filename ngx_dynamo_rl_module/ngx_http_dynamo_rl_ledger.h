
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_LEDGER_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_LEDGER_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_common.h"


/* the flags of a record's "request_id" */
#define NGX_HTTP_DYNAMO_RL_NODE_REQUEST_ID  1   /* 16 bytes follow the id */
#define NGX_HTTP_DYNAMO_RL_NODE_STORE       2   /* claimed in the store */
#define NGX_HTTP_DYNAMO_RL_NODE_TENANT      4   /* its length, then it */
#define NGX_HTTP_DYNAMO_RL_NODE_LOCAL       8   /* on_error=local's, not in
                                                   the store yet */
#define NGX_HTTP_DYNAMO_RL_NODE_REPLAYED   16   /* put in the store in
                                                   flight: its end too */
#define NGX_HTTP_DYNAMO_RL_NODE_ADOPTED    32   /* another zone's, in flight */
#define NGX_HTTP_DYNAMO_RL_NODE_ORPHAN     64   /* adopted, its owner gone */


/*
 * an attempt record: one 128-byte slab slot with ids up to 49 bytes, in a
 * hash index of the zone (a tree walk missed the cache at every level);
 * in flight, it is in the "active" queue, owned by the worker process
 * "pid", and "expires" holds the TTL it will get when it ends; when
 * Dynamo's request id is not the attempt id (a client id that is not a
 * UUID), its 16 bytes follow the id and "request_id" is set; then the
 * tenant the gateway assigned, when it did, as a length byte and at most
 * 255 bytes
 */

typedef struct ngx_http_dynamo_rl_node_s  ngx_http_dynamo_rl_node_t;

struct ngx_http_dynamo_rl_node_s {
    ngx_http_dynamo_rl_node_t      *next;
    ngx_queue_t                     queue;
    uint64_t                        bytes;
    uint64_t                        started;   /* wall ms, for display */
    uint64_t                        ended;     /* started + duration */
    uint64_t                        begun;     /* ngx_http_dynamo_rl_now() */
    uint64_t                        expires;   /* ngx_http_dynamo_rl_now() */
    uint32_t                        hash;
    ngx_pid_t                       pid;
    u_short                         status;
    u_char                          state;
    u_char                          stream;
    u_char                          reason;
    u_char                          len;
    u_char                          request_id;
    u_char                          id[1];
};


typedef ngx_int_t (*ngx_http_dynamo_rl_ledger_walk_pt)(void *data,
    ngx_http_dynamo_rl_node_t *lr);


extern ngx_str_t  ngx_http_dynamo_rl_ledger_states[];


ngx_int_t ngx_http_dynamo_rl_ledger_add(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
void ngx_http_dynamo_rl_ledger_finish(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
void ngx_http_dynamo_rl_ledger_init_process(ngx_http_dynamo_rl_zone_t *zone);
ngx_int_t ngx_http_dynamo_rl_ledger_store_init_process(
    ngx_http_dynamo_rl_store_t *store, ngx_cycle_t *cycle);
void ngx_http_dynamo_rl_ledger_store_exit_process(
    ngx_http_dynamo_rl_store_t *store);
void ngx_http_dynamo_rl_ledger_abandon(ngx_http_dynamo_rl_ctx_t *ctx);
ngx_int_t ngx_http_dynamo_rl_ledger_filter_init(ngx_conf_t *cf);
ngx_int_t ngx_http_dynamo_rl_ledger_header(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
ngx_int_t ngx_http_dynamo_rl_ledger_body(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_chain_t *in);
void ngx_http_dynamo_rl_ledger_sent(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_int_t rc);
char *ngx_http_dynamo_rl_attempts_api(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_dynamo_rl_ledger_walk(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_ledger_walk_pt handler, void *data);
ngx_uint_t ngx_http_dynamo_rl_ledger_orphans(ngx_http_dynamo_rl_zone_t *zone,
    ngx_uint_t settle);
ngx_int_t ngx_http_dynamo_rl_ledger_restore(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_node_t *rec, ngx_str_t *id);


#endif /* _NGX_HTTP_DYNAMO_RL_LEDGER_H_INCLUDED_ */
