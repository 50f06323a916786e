
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#ifndef _NGX_HTTP_DYNAMO_RL_JSON_H_INCLUDED_
#define _NGX_HTTP_DYNAMO_RL_JSON_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


#define NGX_HTTP_DYNAMO_RL_WORKER_OK       0
#define NGX_HTTP_DYNAMO_RL_WORKER_INVALID  1
#define NGX_HTTP_DYNAMO_RL_WORKER_ERROR    2
#define NGX_HTTP_DYNAMO_RL_WORKER_NO_URL   3


typedef void *(*ngx_http_dynamo_rl_alloc_pt)(void *data, size_t size);


typedef struct {
    uint64_t                        id;
    ngx_str_t                       namespace;
    ngx_str_t                       model;
    ngx_str_t                       system_url;
    ngx_str_t                      *routes;
    ngx_uint_t                      nroutes;
    ngx_uint_t                      state;
    char                           *reason;

    /* the element's bytes in the listener's document */
    size_t                          start;
    size_t                          end;

    /* its "system_url" and "admin_base_url" members' bytes, 0 if none */
    size_t                          url_start;
    size_t                          url_end;
    size_t                          base_start;
    size_t                          base_end;

    unsigned                        has_id:1;
} ngx_http_dynamo_rl_worker_t;


typedef struct {
    uint64_t                        id;
    ngx_http_dynamo_rl_worker_t    *worker;      /* sorted[first - 1] */
    uint32_t                        first;
    uint32_t                        n;           /* workers with the id */
} ngx_http_dynamo_rl_slot_t;


typedef struct {
    ngx_http_dynamo_rl_worker_t    *workers;     /* document order */
    ngx_http_dynamo_rl_worker_t   **sorted;      /* by id, with an id */
    ngx_http_dynamo_rl_slot_t      *slots;       /* by id: open addressing */
    ngx_uint_t                      mask;
    ngx_uint_t                      nworkers;
    ngx_uint_t                      nsorted;
    ngx_uint_t                      nelts;       /* "workers" elements */
    ngx_uint_t                      bad_routes;
    size_t                          workers_start;
    size_t                          workers_end;

    /*
     * set when a process installs it: its source's snapshot generation,
     * and a number unique in the process (0: not installed)
     */
    ngx_uint_t                      generation;
    ngx_uint_t                      serial;
} ngx_http_dynamo_rl_index_t;


typedef struct {
    char                           *reason;
    int                             line;
    int                             column;
    char                            text[160];
} ngx_http_dynamo_rl_json_err_t;


#define NGX_HTTP_DYNAMO_RL_GATE_CLOSE  1
#define NGX_HTTP_DYNAMO_RL_GATE_RENEW  2
#define NGX_HTTP_DYNAMO_RL_GATE_OPEN   3


typedef struct {
    ngx_uint_t                      action;
    ngx_uint_t                      epoch;
    ngx_uint_t                      has_epoch;
    ngx_msec_t                      lease;         /* 0: none given */
    size_t                          reason_len;
    u_char                          reason[128];
} ngx_http_dynamo_rl_gate_req_t;


ngx_int_t ngx_http_dynamo_rl_json_gate(u_char *p, size_t len,
    ngx_http_dynamo_rl_gate_req_t *req, char **err);
ngx_int_t ngx_http_dynamo_rl_json_admin_error(u_char *p, size_t len,
    char **why);
ngx_int_t ngx_http_dynamo_rl_json_index(u_char *doc, size_t len,
    ngx_http_dynamo_rl_alloc_pt alloc, void *data,
    ngx_http_dynamo_rl_index_t *index, ngx_http_dynamo_rl_json_err_t *err);
uint64_t ngx_http_dynamo_rl_index_members(ngx_http_dynamo_rl_index_t *index,
    u_char *key);
ngx_http_dynamo_rl_worker_t **ngx_http_dynamo_rl_index_find(
    ngx_http_dynamo_rl_index_t *index, uint64_t id, ngx_uint_t *n);


#endif /* _NGX_HTTP_DYNAMO_RL_JSON_H_INCLUDED_ */
