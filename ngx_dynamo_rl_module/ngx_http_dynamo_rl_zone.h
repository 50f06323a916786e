
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_ZONE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_ZONE_H_INCLUDED_


/* bumped whenever the layout of the shared context changes */
#define NGX_HTTP_DYNAMO_RL_ZONE_VERSION  1


typedef struct {
    ngx_uint_t                      version;

    /* the discovery snapshot: the listener's bytes, never a parse of them */
    u_char                         *raw;
    size_t                          raw_len;
    ngx_uint_t                      generation;
    ngx_msec_t                      fetched;       /* ngx_current_msec */
    time_t                          fetched_time;  /* wall clock */
    ngx_uint_t                      source;

    /* the single refresh in flight across all worker processes */
    ngx_uint_t                      updating;
    ngx_pid_t                       updater;
    ngx_msec_t                      deadline;
    ngx_uint_t                      flights;

    ngx_atomic_uint_t               refresh_ok;
    ngx_atomic_uint_t               refresh_failed;

    /* the attempt ledger: finished records in LRU order, newest first */
    ngx_rbtree_t                    rbtree;
    ngx_rbtree_node_t               sentinel;
    ngx_queue_t                     finished;
    ngx_uint_t                      records;
    ngx_uint_t                      in_flight;
    ngx_uint_t                      evictions;
    ngx_uint_t                      expired;
    ngx_uint_t                      duplicates;
    ngx_uint_t                      exhausted;
} ngx_http_dynamo_rl_shctx_t;


typedef struct {
    ngx_http_dynamo_rl_shctx_t     *sh;
    ngx_slab_pool_t                *shpool;
    ngx_str_t                       name;
} ngx_http_dynamo_rl_zone_t;


char *ngx_http_dynamo_rl_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_DYNAMO_RL_ZONE_H_INCLUDED_ */
