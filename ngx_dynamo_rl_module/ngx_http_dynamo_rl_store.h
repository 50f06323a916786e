
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The store client: one pipelined RESP2 connection per worker process to
 * Redis or Valkey, owned by nginx's event loop (ngx_event_connect_peer);
 * hiredis only formats commands and reads replies.  Commands are answered
 * in order through a FIFO of waiters; a waiter that is cancelled (its
 * request went away) has its reply read and dropped.
 */


#ifndef _NGX_HTTP_DYNAMO_RL_STORE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_STORE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_resp.h"


#define NGX_HTTP_DYNAMO_RL_STORE_FAIL      0
#define NGX_HTTP_DYNAMO_RL_STORE_LOCAL     1

/* operations and results, the fixed labels of the metrics */
#define NGX_HTTP_DYNAMO_RL_STORE_OP_CLAIM  0
#define NGX_HTTP_DYNAMO_RL_STORE_OP_MOVE   1
#define NGX_HTTP_DYNAMO_RL_STORE_OP_GATE   2
#define NGX_HTTP_DYNAMO_RL_STORE_OP_BEAT   3
#define NGX_HTTP_DYNAMO_RL_STORE_OP_GET    4
#define NGX_HTTP_DYNAMO_RL_STORE_OP_CONNECT 5  /* AUTH, SELECT, SCRIPT LOAD */
#define NGX_HTTP_DYNAMO_RL_STORE_OPS       6

#define NGX_HTTP_DYNAMO_RL_STORE_R_OK      0
#define NGX_HTTP_DYNAMO_RL_STORE_R_ERROR   1   /* an error reply */
#define NGX_HTTP_DYNAMO_RL_STORE_R_DOWN    2   /* not sent, or lost */
#define NGX_HTTP_DYNAMO_RL_STORE_R_TIMEOUT 3
#define NGX_HTTP_DYNAMO_RL_STORE_RESULTS   4

/* round trips, in microseconds: 100us .. 1s, +Inf */
#define NGX_HTTP_DYNAMO_RL_STORE_BUCKETS   14


/* in the zone, shared by the worker processes */

typedef struct {
    ngx_atomic_t                    up;          /* 1: last seen reachable */
    ngx_atomic_t                    transitions;
    ngx_atomic_t                    ops[NGX_HTTP_DYNAMO_RL_STORE_OPS]
                                       [NGX_HTTP_DYNAMO_RL_STORE_RESULTS];
    ngx_atomic_t                    rtt[NGX_HTTP_DYNAMO_RL_STORE_BUCKETS];
    ngx_atomic_t                    rtt_sum_us;
    ngx_atomic_t                    rtt_count;
    ngx_atomic_t                    queue;       /* waiting, all processes */
    ngx_atomic_t                    fallbacks;   /* on_error=local */
    ngx_atomic_t                    reconnects;
    ngx_atomic_t                    dropped;     /* writes given up */
    ngx_atomic_t                    conflicts;   /* on_error=local's ids
                                                    claimed meanwhile */
} ngx_http_dynamo_rl_store_stats_t;


typedef struct ngx_http_dynamo_rl_store_s      ngx_http_dynamo_rl_store_t;
typedef struct ngx_http_dynamo_rl_store_cmd_s  ngx_http_dynamo_rl_store_cmd_t;

/*
 * rc NGX_OK: "reply" is the reply (it may be an error reply, never
 * NOSCRIPT, which the client handles); NGX_ERROR: the store is
 * unavailable (not connected, the queue is full, the connection was lost
 * or sent garbage before the reply); NGX_AGAIN: no reply within the
 * timeout, the outcome is unknown.  The reply is freed after the call.
 */

typedef void (*ngx_http_dynamo_rl_store_pt)(void *data, ngx_int_t rc,
    redisReply *reply);


struct ngx_http_dynamo_rl_store_s {
    /* configuration: dynamo_rl_store */
    ngx_str_t                       url;        /* as written, for logs */
    ngx_addr_t                     *addrs;
    ngx_uint_t                      naddrs;
    ngx_uint_t                      db;
    ngx_str_t                       sentinel;   /* sentinel://.../name */
    ngx_str_t                       prefix;     /* default "dynamo-rl" */
    ngx_str_t                       replica;    /* default: hostname */
    ngx_str_t                       user;
    ngx_str_t                       password;   /* from password_file */
    ngx_msec_t                      timeout;    /* default 250ms */
    ngx_msec_t                      lease;      /* default 1h */
    ngx_msec_t                      gate_poll;  /* default 250ms */
    ngx_msec_t                      gate_stale; /* default 2s */
    ngx_msec_t                      heartbeat;  /* default 500ms */
    ngx_uint_t                      on_error;   /* STORE_FAIL | STORE_LOCAL */
    ngx_uint_t                      queue_max;  /* default 4096 */
    ngx_uint_t                      wait;       /* WAIT N after claims */

    /* rediss://: ngx_http_dynamo_rl_store_tls.c, NULL without TLS */
    struct ngx_http_dynamo_rl_store_tls_s  *tls;

    /* key names, built at configuration time */
    ngx_str_t                       gate_key;   /* "{P}:gate" */
    ngx_str_t                       fleet_key;  /* "{P}:fleet" */
    ngx_str_t                       attempt_key;  /* "{P}:a:" */
    ngx_str_t                       live_key;   /* "{P}:live" */
    ngx_str_t                       proc_key;   /* "{P}:p:" */

    /* set by the zone's owner before init_process, may stay NULL */
    ngx_http_dynamo_rl_store_stats_t  *stats;

    /* called when the connection becomes ready or is lost */
    void                          (*changed)(void *data, ngx_uint_t up);
    void                           *changed_data;

    /*
     * per worker process: an identity drawn afresh as it starts, never
     * that of an earlier process, whatever its pid (a container's pid
     * namespace gives a restarted replica's worker the same pid), nor of
     * another replica of the same name: "replica/pid.boot"; a record's
     * owner is "identity/connection.request"; the process's list of its
     * records in flight is "{P}:p:identity"
     */
    uint64_t                        boot;
    ngx_str_t                       identity;
    ngx_str_t                       records;

    /* per worker process: the client's own state */
    void                           *conn;
};


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
