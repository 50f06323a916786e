
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_PARSE_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_PARSE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/*
 * Pure parsers: no nginx runtime, no allocation, no logging, so that the
 * unit tests and the libFuzzer harnesses drive them directly.
 */


#define NGX_HTTP_DYNAMO_RL_NS_ANY     0
#define NGX_HTTP_DYNAMO_RL_NS_EXACT   1
#define NGX_HTTP_DYNAMO_RL_NS_PREFIX  2
#define NGX_HTTP_DYNAMO_RL_NS_VALUE   3     /* from variables, per request */

#define NGX_HTTP_DYNAMO_RL_SCAN_DEPTH  64

#define NGX_HTTP_DYNAMO_RL_ATTEMPT_ID_LEN  128
#define NGX_HTTP_DYNAMO_RL_UUID_LEN        36

#define NGX_HTTP_DYNAMO_RL_REASONS         24
#define NGX_HTTP_DYNAMO_RL_BUCKETS         19   /* 5 ms .. 1 h, +Inf */

/*
 * a client's request header that the request plane renames or drops
 * (ngx_http_dynamo_rl_header_class()), and the lengths of their names, a
 * bit each, so that most headers are ruled out by their length alone
 */
#define NGX_HTTP_DYNAMO_RL_HEADER_OTHER       0
#define NGX_HTTP_DYNAMO_RL_HEADER_ROUTING     1   /* a routing pin */
#define NGX_HTTP_DYNAMO_RL_HEADER_REQUEST_ID  2   /* a request id of Dynamo's */
#define NGX_HTTP_DYNAMO_RL_HEADER_CODING      3   /* Content-Encoding */
#define NGX_HTTP_DYNAMO_RL_HEADER_ASSIGNED    4   /* the gateway's to send */

#define NGX_HTTP_DYNAMO_RL_HEADER_LENS                                       \
    ((1ULL << 9) | (1ULL << 10) | (1ULL << 11) | (1ULL << 16)               \
     | (1ULL << 17) | (1ULL << 19) | (1ULL << 20) | (1ULL << 21)            \
     | (1ULL << 24) | (1ULL << 25) | (1ULL << 27) | (1ULL << 28)            \
     | (1ULL << 32))

/* an attempt's states, in the ledger and in the store's replies */
#define NGX_HTTP_DYNAMO_RL_ACCEPTED        1
#define NGX_HTTP_DYNAMO_RL_STREAMING       2
#define NGX_HTTP_DYNAMO_RL_SUCCEEDED       3
#define NGX_HTTP_DYNAMO_RL_FAILED          4
#define NGX_HTTP_DYNAMO_RL_CANCELED        5

/*
 * why a record ended as it did (its "reason"): the index of
 * ngx_http_dynamo_rl_attempt_reasons[], which also gives the two-letter
 * code the store keeps; 0 is none (succeeded)
 */
#define NGX_HTTP_DYNAMO_RL_WORKER_EXITED        1
#define NGX_HTTP_DYNAMO_RL_NOT_FORWARDED        2
#define NGX_HTTP_DYNAMO_RL_SEND_TIMEOUT         3
#define NGX_HTTP_DYNAMO_RL_GATEWAY_SHUTDOWN     4
#define NGX_HTTP_DYNAMO_RL_CLIENT_CLOSED        5
#define NGX_HTTP_DYNAMO_RL_UPSTREAM_STATUS      6
#define NGX_HTTP_DYNAMO_RL_UPSTREAM_INCOMPLETE  7
#define NGX_HTTP_DYNAMO_RL_IN_STREAM_ERROR      8
#define NGX_HTTP_DYNAMO_RL_ABORTED              9
#define NGX_HTTP_DYNAMO_RL_UNDELIVERED          10
/* the store's records only */
#define NGX_HTTP_DYNAMO_RL_REPLICA_LOST         11
#define NGX_HTTP_DYNAMO_RL_ATTEMPT_REASONS      12

typedef struct {
    ngx_str_t                      name;
    char                          *code;
} ngx_http_dynamo_rl_attempt_reason_t;


/* a worker element of a discovery document, as byte positions in it */

typedef struct {
    u_char                         *start;
    u_char                         *end;
    u_char                         *id_start;
    u_char                         *id_end;
    u_char                         *url_start;   /* "system_url" member */
    u_char                         *url_end;
    u_char                         *base_start;  /* "admin_base_url" */
    u_char                         *base_end;
    unsigned                        escaped_key:1;
} ngx_http_dynamo_rl_scan_worker_t;


/* what ngx_http_dynamo_rl_admin_rewrite() may add to an element */
#define NGX_HTTP_DYNAMO_RL_REWRITE_ROOM(len)  ((len) + NGX_INT64_LEN + 2)


typedef struct {
    u_char                         *workers_start;
    u_char                         *workers_end;
    ngx_http_dynamo_rl_scan_worker_t  *workers;
    ngx_uint_t                      nworkers;
    ngx_uint_t                      nalloc;
} ngx_http_dynamo_rl_scan_t;


/*
 * a refusal's reason, and the planes that can give it, as bits of their
 * index: request 0, discovery 1, admin 2
 */

#define NGX_HTTP_DYNAMO_RL_ON_REQUEST    0x1
#define NGX_HTTP_DYNAMO_RL_ON_DISCOVERY  0x2
#define NGX_HTTP_DYNAMO_RL_ON_ADMIN      0x4
#define NGX_HTTP_DYNAMO_RL_ON_ALL        0x7

/* a reason that only a shared store gives (dynamo_rl_store) */
#define NGX_HTTP_DYNAMO_RL_ON_STORE      0x8

typedef struct {
    ngx_str_t                      name;
    ngx_uint_t                     planes;
} ngx_http_dynamo_rl_reason_t;


/*
 * incremental SSE terminal detection over any split of the stream: each
 * event's data (its data lines, joined) goes through a JSON tokenizer
 * that keeps only the few members it judges, see ngx_http_dynamo_rl_sse_scan()
 */

#define NGX_HTTP_DYNAMO_RL_SSE_DEPTH  8

typedef struct {
    u_char                         line[24];    /* a line's first bytes */
    size_t                         len;
    u_char                         buf[24];     /* a key or a string */
    u_char                         kind[NGX_HTTP_DYNAMO_RL_SSE_DEPTH];
    u_char                         depth;
    u_char                         json;        /* the tokenizer's state */
    u_char                         key;         /* the member's, judged */
    u_char                         blen;
    unsigned                       field:2;     /* of the current line */
    unsigned                       value:1;     /* past the field's ':' */
    unsigned                       esc:1;
    unsigned                       done:1;
    unsigned                       error:1;
    unsigned                       aborted:1;   /* with error */
    unsigned                       cr:1;
} ngx_http_dynamo_rl_sse_t;


/* a state file (dynamo_rl_zone state=), checked whole before any use */

#define NGX_HTTP_DYNAMO_RL_STATE_VERSION  2

typedef struct {
    ngx_uint_t                     version;     /* 1 or 2 */
    uint64_t                       written;     /* ms since the epoch */
    ngx_uint_t                     closed;
    ngx_uint_t                     epoch;
    uint64_t                       lease;
    uint64_t                       remaining;
    ngx_uint_t                     leased;      /* remaining is set */
    uint64_t                       changed;     /* seconds since the epoch */
    size_t                         reason_len;
    u_char                         reason[128];
    u_char                        *records;
    u_char                        *end;
    ngx_uint_t                     nrecords;
} ngx_http_dynamo_rl_state_file_t;


/* one attempt record of a state file; times relative to "written" */

typedef struct {
    u_char                        *id;
    size_t                         len;
    ngx_uint_t                     state;
    ngx_uint_t                     status;
    ngx_uint_t                     stream;
    uint64_t                       bytes;
    uint64_t                       started_ago;
    uint64_t                       ended_ago;
    uint64_t                       remaining;
    ngx_uint_t                     in_flight;
    ngx_uint_t                     owner;       /* pid in flight, or 0 */
    ngx_uint_t                     reason;      /* finished, version 2 */
    ngx_uint_t                     tail;        /* owner or reason given */
} ngx_http_dynamo_rl_state_record_t;


extern ngx_http_dynamo_rl_attempt_reason_t
    ngx_http_dynamo_rl_attempt_reasons[];

ngx_int_t ngx_http_dynamo_rl_attempt_id_valid(u_char *p, size_t len);
ngx_int_t ngx_http_dynamo_rl_attempt_id_canonical(u_char *p, size_t len);
void ngx_http_dynamo_rl_sse_scan(ngx_http_dynamo_rl_sse_t *sse, u_char *p,
    size_t len, ngx_uint_t last);
u_char *ngx_http_dynamo_rl_uuid7(u_char *dst, uint64_t ms, u_char *rnd);
ngx_int_t ngx_http_dynamo_rl_target_canonical(u_char *raw, size_t raw_len,
    u_char *uri, size_t uri_len);
ngx_int_t ngx_http_dynamo_rl_parse_u64(u_char *p, size_t len, uint64_t *n);
ngx_int_t ngx_http_dynamo_rl_route_valid(u_char *p, size_t len);
ngx_int_t ngx_http_dynamo_rl_parse_admin_path(u_char *p, size_t len,
    uint64_t *id, ngx_str_t *route);
ngx_int_t ngx_http_dynamo_rl_system_url_valid(u_char *p, size_t len);
ngx_int_t ngx_http_dynamo_rl_system_url_host(u_char *p, size_t len,
    ngx_str_t *host);
ngx_uint_t ngx_http_dynamo_rl_scan_bound(u_char *p, size_t len);
ngx_int_t ngx_http_dynamo_rl_scan_discovery(u_char *p, size_t len,
    ngx_http_dynamo_rl_scan_t *scan);
ngx_int_t ngx_http_dynamo_rl_admin_url_valid(u_char *p, size_t len);
u_char *ngx_http_dynamo_rl_admin_rewrite(u_char *dst,
    ngx_http_dynamo_rl_scan_worker_t *w, ngx_str_t *url, uint64_t id);
ngx_int_t ngx_http_dynamo_rl_parse_lease(u_char *p, size_t len,
    ngx_msec_t *ms);
uint64_t ngx_http_dynamo_rl_siphash(u_char *key, u_char *p, size_t len);
uint64_t ngx_http_dynamo_rl_siphash13(u_char *key, u_char *p, size_t len);
uint64_t ngx_http_dynamo_rl_state_checksum(u_char *p, size_t len);
ngx_int_t ngx_http_dynamo_rl_state_parse(u_char *p, size_t len,
    ngx_http_dynamo_rl_state_file_t *sf, char **err);
ngx_int_t ngx_http_dynamo_rl_state_record(u_char **pos, u_char *end,
    ngx_http_dynamo_rl_state_record_t *rec);
ngx_int_t ngx_http_dynamo_rl_namespace_match(ngx_uint_t mode,
    ngx_str_t *scope, u_char *ns, size_t len);
ngx_int_t ngx_http_dynamo_rl_same_origin(ngx_str_t *origin,
    ngx_uint_t origins, ngx_str_t *site, ngx_str_t *host, ngx_uint_t https);
u_char *ngx_http_dynamo_rl_escape_log(u_char *dst, u_char *last,
    u_char *src, size_t len);
ngx_int_t ngx_http_dynamo_rl_parse_scope(u_char *p, size_t len,
    ngx_uint_t *mode, ngx_str_t *name, ngx_str_t *suffix);
ngx_int_t ngx_http_dynamo_rl_scope_name(u_char *p, size_t len);
ngx_int_t ngx_http_dynamo_rl_parse_routes(u_char *p, size_t len,
    ngx_uint_t *n);
ngx_str_t *ngx_http_dynamo_rl_route_find(ngx_str_t *routes, ngx_uint_t n,
    ngx_str_t *route);
ngx_int_t ngx_http_dynamo_rl_routes_find(u_char *p, size_t len,
    ngx_str_t *route);
ngx_int_t ngx_http_dynamo_rl_parse_health_path(u_char *p, size_t len,
    uint64_t *id);
void ngx_http_dynamo_rl_status_type(ngx_uint_t status, ngx_str_t *type);
ngx_uint_t ngx_http_dynamo_rl_header_class(u_char *name, size_t len);
ngx_int_t ngx_http_dynamo_rl_header_eq(u_char *name, u_char *lc,
    size_t len);
ngx_uint_t ngx_http_dynamo_rl_bucket(ngx_msec_t ms);
ngx_uint_t ngx_http_dynamo_rl_reason_find(u_char *p, size_t len,
    ngx_uint_t plane);


extern ngx_msec_t                   ngx_http_dynamo_rl_buckets[];
extern ngx_http_dynamo_rl_reason_t  ngx_http_dynamo_rl_reasons[];
ngx_int_t ngx_http_dynamo_rl_uuid_valid(u_char *p, size_t len);
void ngx_http_dynamo_rl_uuid_pack(u_char *bin, u_char *text);
u_char *ngx_http_dynamo_rl_uuid_unpack(u_char *text, u_char *bin);


/* what ngx_http_dynamo_rl_ready_check() finds */
#define NGX_HTTP_DYNAMO_RL_READY               0
#define NGX_HTTP_DYNAMO_RL_READY_STORE_DOWN    1   /* "store_down" */
#define NGX_HTTP_DYNAMO_RL_READY_GATE_UNKNOWN  2   /* "gate_unknown" */
#define NGX_HTTP_DYNAMO_RL_READY_GATE_STALE    3   /* "gate_stale" */
#define NGX_HTTP_DYNAMO_RL_READY_STORE_REFUSING 4  /* "store_refusing" */

ngx_uint_t ngx_http_dynamo_rl_ready_check(ngx_uint_t store,
    ngx_uint_t connected, ngx_uint_t refusing, uint64_t read, uint64_t now,
    ngx_msec_t stale);


#endif /* _NGX_HTTP_DYNAMO_RL_PARSE_H_INCLUDED_ */
