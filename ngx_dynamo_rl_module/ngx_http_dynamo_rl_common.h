
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_COMMON_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_COMMON_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_parse.h"
#include "ngx_http_dynamo_rl_json.h"
#include "ngx_http_dynamo_rl_zone.h"


#define NGX_HTTP_DYNAMO_RL_VERSION          "0.1.0"

#define NGX_HTTP_DYNAMO_RL_PLANE_UNSET      0
#define NGX_HTTP_DYNAMO_RL_PLANE_NONE       1
#define NGX_HTTP_DYNAMO_RL_PLANE_REQUEST    2
#define NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY  3
#define NGX_HTTP_DYNAMO_RL_PLANE_ADMIN      4

/* what dynamo_rl_attempt_upstream_header names */
#define NGX_HTTP_DYNAMO_RL_UPSTREAM_NONE    0
#define NGX_HTTP_DYNAMO_RL_UPSTREAM_OTHER   1
#define NGX_HTTP_DYNAMO_RL_UPSTREAM_XRID    2

#define NGX_HTTP_DYNAMO_RL_RAND_SIZE        4096
#define NGX_HTTP_DYNAMO_RL_ISO_LEN  sizeof("2026-01-01T00:00:00.000Z")

#define NGX_HTTP_DYNAMO_RL_SOURCE_REFRESH    1
#define NGX_HTTP_DYNAMO_RL_SOURCE_DISCOVERY  2

#define NGX_HTTP_DYNAMO_RL_REFRESH_NONE      0
#define NGX_HTTP_DYNAMO_RL_REFRESH_RUNNING   1
#define NGX_HTTP_DYNAMO_RL_REFRESH_WAITING   2
#define NGX_HTTP_DYNAMO_RL_REFRESH_DONE      3
#define NGX_HTTP_DYNAMO_RL_REFRESH_FAILED    4


typedef struct {
    ngx_shm_zone_t                 *shm_zone;

    /* the request context's pool cleanup, the module's own */
    ngx_pool_cleanup_pt             ctx_cleanup;

    /*
     * the discovery sources, each dynamo_rl_discovery URI once per server
     * it is resolved in (the server's core configuration while the
     * configuration is read, and a hash of its listen addresses and
     * names, which names the source across reloads), and the largest
     * max_size of the locations that store each one's snapshot;
     * "orphan_max": of discovery-plane locations that name no source in
     * their own block, which store into a snapshot of their own when the
     * configuration has no source, and into none otherwise; "named": the
     * dynamo_rl_discovery directives of the configuration
     */
    ngx_uint_t                      nsources;
    ngx_str_t                       sources[NGX_HTTP_DYNAMO_RL_SOURCES];
    void                           *source_srv[NGX_HTTP_DYNAMO_RL_SOURCES];
    uint32_t                        source_key[NGX_HTTP_DYNAMO_RL_SOURCES];
    size_t                          source_max[NGX_HTTP_DYNAMO_RL_SOURCES];
    size_t                          orphan_max;
    ngx_uint_t                      named;

    /* per-process room of the body scanner, which never yields */
    void                           *body_scan;

    /* per-process randomness for UUIDv7, refilled with RAND_bytes() */
    u_char                         *rand;
    ngx_uint_t                      rand_pos;

    /* per-process index of each source's snapshot in the zone */
    ngx_http_dynamo_rl_index_t     *index[NGX_HTTP_DYNAMO_RL_SOURCES];
    ngx_pool_t                     *index_pool[NGX_HTTP_DYNAMO_RL_SOURCES];
    ngx_uint_t                      index_serial;

    /* per-process cache of callers' scopes from variables: _scope.c */
    void                           *scopes;

    /* dynamo_rl_store: the ledger and the gate in Redis or Valkey */
    ngx_http_dynamo_rl_store_t     *store;

    /* the upstream groups of request planes and their own peer.init */
    ngx_array_t                    *peer_inits;
} ngx_http_dynamo_rl_main_conf_t;


/*
 * why the request plane refuses an attempt at precontent (ctx->verdict):
 * the gate, the body policy and the ledger decide, and the precontent
 * handler answers once, with ngx_http_dynamo_rl_refuse(): from its table
 * for every verdict before BODY, which with ERROR stays last
 */
#define NGX_HTTP_DYNAMO_RL_VERDICT_DUPLICATE    1
#define NGX_HTTP_DYNAMO_RL_VERDICT_FULL         2
#define NGX_HTTP_DYNAMO_RL_VERDICT_CLOSED       3   /* ctx->retry_after */
#define NGX_HTTP_DYNAMO_RL_VERDICT_UNAVAILABLE  4
#define NGX_HTTP_DYNAMO_RL_VERDICT_UNKNOWN      5
#define NGX_HTTP_DYNAMO_RL_VERDICT_LOST         6
#define NGX_HTTP_DYNAMO_RL_VERDICT_STALE        7
#define NGX_HTTP_DYNAMO_RL_VERDICT_REFUSED      8
#define NGX_HTTP_DYNAMO_RL_VERDICT_FORWARDED    9
#define NGX_HTTP_DYNAMO_RL_VERDICT_BODY         10  /* ctx->body_* */
#define NGX_HTTP_DYNAMO_RL_VERDICT_ERROR        11

typedef struct {
    ngx_uint_t                      plane;
    ngx_uint_t                      methods;
    ngx_str_t                       admin_prefix;
    ngx_flag_t                      api;

    ngx_str_t                       attempt_header;
    ngx_uint_t                      attempt_header_hash;
    ngx_str_t                       attempt_upstream_header;
    ngx_uint_t                      attempt_upstream_header_hash;

    /* set by the merge for the request plane's hot path */
    u_char                         *attempt_header_lc;
    u_char                         *attempt_upstream_header_lc;
    ngx_uint_t                      attempt_upstream;
    ngx_uint_t                      request_id_hash;
    uint64_t                        header_lens;

    ngx_flag_t                      strip_routing_headers;
    ngx_flag_t                      accel_buffering;

    ngx_str_t                       discovery;
    ngx_uint_t                      source;     /* 1 + its index, 0: none */
    ngx_flag_t                      source_named;   /* in its own block */
    ngx_msec_t                      discovery_valid;
    size_t                          discovery_max_size;

    ngx_uint_t                      ns_mode;
    ngx_str_t                       ns_scope;

    ngx_array_t                    *admin_routes;

    ngx_uint_t                      log_level;

    ngx_flag_t                      ledger;
    ngx_msec_t                      attempt_ttl;
    ngx_flag_t                      gate;

    /* a caller's scope from variables (NGX_HTTP_DYNAMO_RL_NS_VALUE) */
    ngx_http_complex_value_t       *ns_value;
    ngx_http_complex_value_t       *routes_value;

    ngx_flag_t                      gate_read_only;

    /* request bodies: dynamo_rl_body_policy, dynamo_rl_metadata_upload */
    ngx_flag_t                      body_policy;
    ngx_array_t                    *upload_prefixes;

    /*
     * what the gateway assigns and removes: dynamo_rl_tenant,
     * dynamo_rl_priority, dynamo_rl_strip_headers (ngx_str_t, lowercase)
     * and dynamo_rl_strip_nvext (an ngx_http_dynamo_rl_body_tree_t of
     * _scan.c, NULL for the built-in one)
     */
    ngx_http_complex_value_t       *tenant;
    ngx_http_complex_value_t       *priority;
    ngx_array_t                    *strip_headers;
    void                           *body_tree;
    /* dynamo_rl_admin_url: the discovery answer names the admin plane */
    ngx_http_complex_value_t       *admin_url;
} ngx_http_dynamo_rl_loc_conf_t;


typedef struct {
    ngx_uint_t                      plane;

    ngx_str_t                       attempt_id;
    ngx_str_t                       outcome;
    ngx_str_t                       deny_reason;
    ngx_str_t                       error;

    ngx_str_t                      *header;
    ngx_http_log_handler_pt         log_handler;

    /* request plane: the id headers sent upstream, the body's verdict */
    ngx_str_t                       request_id;
    ngx_table_elt_t                *id_headers[3];
    ngx_uint_t                      body_state;
    ngx_uint_t                      body_status;
    char                           *body_reason;
    char                           *body_message;

    /* admin plane */
    ngx_str_t                       instance_id;
    ngx_str_t                       route;
    ngx_str_t                       system_url;
    ngx_str_t                       engine_path;
    ngx_str_t                       generation;
    ngx_http_dynamo_rl_zone_t      *zone;
    ngx_http_dynamo_rl_snap_t      *snap;       /* the refresh's source */
    ngx_uint_t                      refresh;
    ngx_uint_t                      flights;
    ngx_uint_t                      seen;

    /* attempt ledger */
    void                           *node;
    ngx_http_dynamo_rl_zone_t      *ledger_zone;
    ngx_http_dynamo_rl_zone_t      *slot_zone;
    ngx_msec_t                      ttl;
    ngx_http_dynamo_rl_sse_t        sse;

    /* admin plane: the worker's answer, for ok or error */
    u_char                         *admin_body;
    size_t                          admin_len;
    ngx_str_t                       admin_result;

    /*
     * ngx_http_dynamo_rl_now(): the start, the upstream's header, the end;
     * ngx_current_msec at the start, see ngx_http_dynamo_rl_ctx_now()
     */
    uint64_t                        started;
    ngx_msec_t                      started_tick;
    uint64_t                        header_at;
    uint64_t                        ended_at;

    /* discovery plane: the listener's document, held until complete */
    u_char                         *doc;
    size_t                          doc_len;
    size_t                          doc_size;
    off_t                           doc_total;
    ngx_uint_t                      doc_status;
    ngx_str_t                       doc_error;
    void                          (*doc_finalize)(ngx_http_request_t *r,
                                                   ngx_int_t rc);

    unsigned                        doc_hold:1;
    unsigned                        refresh_sr:1;
    unsigned                        doc_too_big:1;
    unsigned                        doc_encoded:1;
    unsigned                        admin_done:1;
    unsigned                        error_body:1;
    unsigned                        sse_on:1;
    unsigned                        complete:1;
    unsigned                        counted:1;
    unsigned                        logged:1;
    unsigned                        settled:1;
    unsigned                        admitted:1;
    unsigned                        passed:1;
    unsigned                        admin_inspect:1;
    unsigned                        admin_overflow:1;
    unsigned                        admin_error:1;
    unsigned                        admin_decided:1;
    unsigned                        admin_health:1;
    unsigned                        admin_live:1;
    unsigned                        client_id:1;
    unsigned                        body_sync:1;
    unsigned                        body_coded:1;
    unsigned                        assigned:1;

    /* the tenant the gateway assigned, empty for none */
    ngx_str_t                       tenant;

    /* the caller's scope, when variables give it: _scope.c */
    ngx_str_t                       scope_value;
    ngx_str_t                       routes_value;
    char                           *admin_why;

    /*
     * the shared store: the claim waited for, its verdict, the record's
     * key and owner
     */
    ngx_http_dynamo_rl_store_t     *store;
    ngx_http_dynamo_rl_store_cmd_t *store_cmd;
    ngx_event_t                    *store_stream;  /* the deferred move */
    ngx_str_t                       store_key;
    ngx_str_t                       store_owner;
    uint64_t                        store_t0;      /* the wall clock */
    uint64_t                        store_t0_mono;
    ngx_uint_t                      verdict;
    ngx_uint_t                      retry_after;
    unsigned                        store_wait:1;
    unsigned                        store_done:1;
    unsigned                        store_claimed:1;

    /*
     * request plane: the upstream peer's own free and get, and the bytes
     * its connection had sent before this request (a cached keepalive
     * connection); "written" once a byte of the request went upstream
     */
    ngx_event_free_peer_pt          peer_free;
    ngx_event_get_peer_pt           peer_get;
    off_t                           peer_sent;
    unsigned                        peer_wrapped:1;
    unsigned                        written:1;

    u_char                          id[NGX_HTTP_DYNAMO_RL_UUID_LEN];
    u_char                          request_uuid[NGX_HTTP_DYNAMO_RL_UUID_LEN];
} ngx_http_dynamo_rl_ctx_t;


/* a walk of an ngx_list_t (headers, shared memory zones), part by part */

typedef struct {
    ngx_list_t                     *list;
    ngx_list_part_t                *part;
    ngx_uint_t                      i;
} ngx_http_dynamo_rl_list_iter_t;


ngx_http_dynamo_rl_ctx_t *ngx_http_dynamo_rl_create_ctx(ngx_http_request_t *r);
ngx_http_dynamo_rl_ctx_t *ngx_http_dynamo_rl_get_ctx(ngx_http_request_t *r);
char *ngx_http_dynamo_rl_content_handler(ngx_conf_t *cf,
    ngx_http_handler_pt handler);
ngx_http_dynamo_rl_zone_t *ngx_http_dynamo_rl_get_zone(ngx_http_request_t *r);
uint64_t ngx_http_dynamo_rl_now(void);
uint64_t ngx_http_dynamo_rl_ctx_now(ngx_http_dynamo_rl_ctx_t *ctx);
uint64_t ngx_http_dynamo_rl_ctx_end(ngx_http_dynamo_rl_ctx_t *ctx);
uint64_t ngx_http_dynamo_rl_wall(void);
u_char *ngx_http_dynamo_rl_iso_time(u_char *p, uint64_t ms);
ngx_int_t ngx_http_dynamo_rl_send_json(ngx_http_request_t *r,
    ngx_uint_t status, ngx_str_t *body);
ngx_int_t ngx_http_dynamo_rl_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, ngx_str_t *body);
ngx_int_t ngx_http_dynamo_rl_send_body(ngx_http_request_t *r,
    ngx_http_output_body_filter_pt filter, u_char *p, size_t len);
ngx_int_t ngx_http_dynamo_rl_error(ngx_http_request_t *r,
    ngx_uint_t status, char *reason, char *message);
ngx_int_t ngx_http_dynamo_rl_deny(ngx_http_request_t *r,
    ngx_uint_t status, char *reason, char *message);
ngx_int_t ngx_http_dynamo_rl_refusals_check(ngx_conf_t *cf);
ngx_int_t ngx_http_dynamo_rl_refuse(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
ngx_int_t ngx_http_dynamo_rl_allow(ngx_http_request_t *r,
    ngx_uint_t methods);
ngx_int_t ngx_http_dynamo_rl_read_only(ngx_http_request_t *r);
ngx_int_t ngx_http_dynamo_rl_cross_origin(ngx_http_request_t *r);
ngx_int_t ngx_http_dynamo_rl_header_is(ngx_table_elt_t *h,
    ngx_str_t *name);
void ngx_http_dynamo_rl_clear_urls(ngx_http_request_t *r);
void ngx_http_dynamo_rl_headers_drop(ngx_http_request_t *r,
    ngx_str_t *names);
void *ngx_http_dynamo_rl_list_first(ngx_list_t *list,
    ngx_http_dynamo_rl_list_iter_t *it);
void *ngx_http_dynamo_rl_list_next(ngx_http_dynamo_rl_list_iter_t *it);
void ngx_http_dynamo_rl_drain_leave(ngx_http_dynamo_rl_ctx_t *ctx);
ngx_uint_t ngx_http_dynamo_rl_slot(void);
ngx_int_t ngx_http_dynamo_rl_retry_after(ngx_http_request_t *r,
    ngx_uint_t seconds);
ngx_int_t ngx_http_dynamo_rl_store_down(ngx_http_request_t *r,
    char *message);
ngx_int_t ngx_http_dynamo_rl_route_generate(ngx_http_request_t *r);


#endif /* _NGX_HTTP_DYNAMO_RL_COMMON_H_INCLUDED_ */
