
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_ledger.h"
#include "ngx_http_dynamo_rl_gate.h"
#include "ngx_http_dynamo_rl_body.h"
#include "ngx_http_dynamo_rl_request.h"

#include <openssl/rand.h>


static ngx_int_t ngx_http_dynamo_rl_attempt(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf);
static ngx_int_t ngx_http_dynamo_rl_attempt_id(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_table_elt_t *id, ngx_uint_t n);
static u_char *ngx_http_dynamo_rl_log_error(ngx_http_request_t *r,
    ngx_http_request_t *sr, u_char *buf, size_t len);
static ngx_int_t ngx_http_dynamo_rl_mint(ngx_http_request_t *r,
    u_char *dst);
static ngx_int_t ngx_http_dynamo_rl_upstream_headers(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf,
    ngx_uint_t client_id, ngx_uint_t touch);
static ngx_int_t ngx_http_dynamo_rl_upstream_touch(ngx_table_elt_t *h,
    ngx_uint_t class, ngx_http_dynamo_rl_loc_conf_t *drlcf);
static ngx_table_elt_t *ngx_http_dynamo_rl_push_header(ngx_list_t *list,
    ngx_str_t *name, u_char *lowcase, ngx_uint_t hash, ngx_str_t *value);
static ngx_int_t ngx_http_dynamo_rl_assign(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf);
static ngx_int_t ngx_http_dynamo_rl_assign_one(ngx_http_request_t *r,
    ngx_http_complex_value_t *cv, ngx_str_t *name, ngx_str_t *value);


#if (NGX_HTTP_GZIP || NGX_HTTP_HEADERS)
static ngx_int_t ngx_http_dynamo_rl_identity(ngx_http_request_t *r);
#endif
static ngx_int_t ngx_http_dynamo_rl_peer_init(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_dynamo_rl_peer_get(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_dynamo_rl_peer_free(ngx_peer_connection_t *pc,
    void *data, ngx_uint_t state);
static ngx_http_dynamo_rl_ctx_t *ngx_http_dynamo_rl_peer_ctx(
    ngx_peer_connection_t *pc);


typedef struct {
    ngx_http_upstream_srv_conf_t   *uscf;
    ngx_http_upstream_init_peer_pt  init;
} ngx_http_dynamo_rl_peer_init_t;


static ngx_str_t  ngx_http_dynamo_rl_request_id = ngx_string("request-id");
static ngx_str_t  ngx_http_dynamo_rl_tenant_id = ngx_string("x-tenant-id");
static ngx_str_t  ngx_http_dynamo_rl_priority_name =
    ngx_string("x-dynamo-request-priority");


ngx_int_t
ngx_http_dynamo_rl_preaccess_handler(ngx_http_request_t *r)
{
    uint64_t                        id;
    ngx_int_t                       rc;
    ngx_uint_t                      methods;
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    if (r != r->main) {

        /*
         * a background subrequest ("mirror", a cache update) of a plane
         * request would send the same generation or admin call again
         */

        ctx = ngx_http_get_module_ctx(r->main, ngx_http_dynamo_rl_module);

        if (r->background && ctx != NULL
            && ctx->plane > NGX_HTTP_DYNAMO_RL_PLANE_NONE)
        {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "dynamo rl: background subrequest \"%V\" of a "
                          "plane request not sent", &r->uri);

            return NGX_HTTP_FORBIDDEN;
        }

        /*
         * nor does any subrequest enter a plane location, where the plane's
         * checks are those of main requests: the refresh, sent elsewhere by
         * the listener's X-Accel-Redirect, would reach the frontend
         */

        drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

        if (drlcf->plane > NGX_HTTP_DYNAMO_RL_PLANE_NONE) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "dynamo rl: subrequest \"%V\" into a plane "
                          "location not sent", &r->uri);

            return NGX_HTTP_FORBIDDEN;
        }

        return NGX_DECLINED;
    }

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    /*
     * an internal redirect cleared r->ctx: the context is found again
     * here, in the first phase of the module's, for every location (the
     * precontent handler reads it as it is)
     */

    if (ngx_http_dynamo_rl_get_ctx(r) != NULL) {
        /* already classified before an internal redirect */
        return NGX_DECLINED;
    }

    if (drlcf->plane <= NGX_HTTP_DYNAMO_RL_PLANE_NONE) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_dynamo_rl_create_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->plane = drlcf->plane;
    ctx->header = &drlcf->attempt_header;
    ctx->started = ngx_http_dynamo_rl_now();
    ctx->started_tick = ngx_current_msec;


    if (drlcf->plane == NGX_HTTP_DYNAMO_RL_PLANE_REQUEST) {
        rc = ngx_http_dynamo_rl_attempt(r, ctx, drlcf);

        if (rc != NGX_OK) {
            return rc;
        }
    }

    methods = drlcf->methods;

    /* GET {admin location}{instance_id}/health or /live, and only GET */

    if (drlcf->plane == NGX_HTTP_DYNAMO_RL_PLANE_ADMIN
        && r->uri.len > drlcf->admin_prefix.len
        && ngx_strncmp(r->uri.data, drlcf->admin_prefix.data,
                       drlcf->admin_prefix.len)
           == 0
        && ngx_http_dynamo_rl_parse_health_path(
               r->uri.data + drlcf->admin_prefix.len,
               r->uri.len - drlcf->admin_prefix.len, &id)
           == NGX_OK)
    {
        methods = NGX_HTTP_GET;
    }

    if (!(r->method & methods)) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl: method \"%V\" not allowed",
                      &r->method_name);

        if (ngx_http_dynamo_rl_allow(r, methods) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_dynamo_rl_deny(r, NGX_HTTP_NOT_ALLOWED, "method",
                                       "method not allowed");
    }

    if (drlcf->plane == NGX_HTTP_DYNAMO_RL_PLANE_ADMIN
        && !(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))
        && ngx_http_dynamo_rl_cross_origin(r) != NGX_OK)
    {
        return ngx_http_dynamo_rl_deny(r, NGX_HTTP_FORBIDDEN, "cross_origin",
                                       "request from another site");
    }

    if (ngx_http_dynamo_rl_target_canonical(r->unparsed_uri.data,
                                            r->unparsed_uri.len,
                                            r->uri.data, r->uri.len)
        != NGX_OK)
    {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl: non-canonical request target \"%V\"",
                      &r->unparsed_uri);

        return ngx_http_dynamo_rl_deny(r, NGX_HTTP_BAD_REQUEST, "bad_path",
                                       "request target is not canonical");
    }

    return NGX_DECLINED;
}


/*
 * an error of the request plane to a request that never reached PREACCESS
 * (nginx's own 413 of a declared body, from the find-config phase, or a
 * "return" of the rewrite phase): a context all the same, so that the
 * error has the plane's shape and carries an id, the client's when it
 * sent one valid id, else one minted; it is no attempt, and nothing was
 * forwarded
 */

ngx_http_dynamo_rl_ctx_t *
ngx_http_dynamo_rl_request_late(ngx_http_request_t *r,
    ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    ngx_uint_t                       n;
    ngx_table_elt_t                 *h, *id;
    ngx_http_dynamo_rl_ctx_t        *ctx;
    ngx_http_dynamo_rl_list_iter_t   it;

    ctx = ngx_http_dynamo_rl_create_ctx(r);
    if (ctx == NULL) {
        return NULL;
    }

    ctx->plane = NGX_HTTP_DYNAMO_RL_PLANE_REQUEST;
    ctx->header = &drlcf->attempt_header;
    ctx->started = ngx_http_dynamo_rl_now();
    ctx->started_tick = ngx_current_msec;

    n = 0;
    id = NULL;

    for (h = ngx_http_dynamo_rl_list_first(&r->headers_in.headers, &it);
         h != NULL;
         h = ngx_http_dynamo_rl_list_next(&it))
    {
        if (ngx_http_dynamo_rl_header_is(h, &drlcf->attempt_header)
            == NGX_OK)
        {
            id = h;
            n++;
        }
    }

    if (ngx_http_dynamo_rl_attempt_id(r, ctx, id, n) == NGX_ERROR) {
        return NULL;
    }

    return ctx;
}


/*
 * PRECONTENT: a request that already went to an upstream from a plane
 * location is never forwarded again, whatever brought it back (an
 * error_page with proxy_intercept_errors, to a regular or a named
 * location, of any plane or none); on the request plane, the gate, the
 * body policy and the ledger act, in that order, only on what allow/deny
 * and auth let through, so that a refused client neither consumes nor
 * probes attempt ids: each of them decides, and a refusal is answered
 * here, once
 */

ngx_int_t
ngx_http_dynamo_rl_precontent_handler(ngx_http_request_t *r)
{
    ngx_int_t                       rc;
    ngx_http_core_loc_conf_t       *clcf;
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    if (r != r->main) {
        return NGX_DECLINED;
    }

    /* found again in PREACCESS after an internal redirect */

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    if (ctx == NULL) {
        return NGX_DECLINED;
    }

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (ctx->body_state == NGX_HTTP_DYNAMO_RL_BODY_CHECKED
        || ctx->store_wait || ctx->store_done)
    {
        /* back from the body handler, or from the store's claim */
        rc = NGX_OK;
        goto admitted;
    }

    if (ctx->passed) {

        /*
         * back after an internal redirect: the request passed a plane
         * location once, and was forwarded there (an upstream was
         * created) or refused before it (nginx's 413, 400 or 408 of a
         * body the policy was reading, that error_page sent on); a static
         * error page may answer, no location content handler may forward
         * it, for the first time unjudged or again
         */

        clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

        if (drlcf->plane <= NGX_HTTP_DYNAMO_RL_PLANE_NONE
            && clcf->handler == NULL)
        {
            return NGX_DECLINED;
        }

        if (r->post_action) {

            /*
             * post_action, after the response: nothing is sent again,
             * and nothing answered, which would change what the request
             * is logged and counted as
             */

            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "dynamo rl: post_action \"%V\" of a plane request "
                          "not sent", &r->uri);

            ngx_http_finalize_request(r, NGX_OK);

            return NGX_DONE;
        }

        if (r->upstream == NULL) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "dynamo rl: request refused before it was "
                          "forwarded, not sent to \"%V\" after an internal "
                          "redirect", &r->uri);

            ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_REFUSED;

        } else {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "dynamo rl: request already forwarded, not again "
                          "to \"%V\" after an internal redirect", &r->uri);

            ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_FORWARDED;
        }

        rc = NGX_DECLINED;
        goto done;
    }

    if (drlcf->plane <= NGX_HTTP_DYNAMO_RL_PLANE_NONE) {
        return NGX_DECLINED;
    }

    ctx->passed = 1;

    if (drlcf->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        || ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        || ctx->admitted)
    {
        return NGX_DECLINED;
    }

    ctx->admitted = 1;

    rc = NGX_OK;

    if (drlcf->gate || drlcf->ledger) {
        rc = ngx_http_dynamo_rl_gate_enter(r, ctx, drlcf);
    }

admitted:

    /*
     * the tenant and priority, from variables that the access phase may
     * have set (auth_request_set), before the body policy, which removes
     * a body's cache salt while a tenant is assigned
     */

    if (rc == NGX_OK && !ctx->assigned) {
        ctx->assigned = 1;
        rc = ngx_http_dynamo_rl_assign(r, ctx, drlcf);
    }

    /* a closed gate reads no body; a refused body consumes no attempt id */

    if (rc == NGX_OK) {
        rc = ngx_http_dynamo_rl_body_start(r, ctx, drlcf);
    }

    /*
     * the attempt is recorded last: nothing refused before is recorded;
     * a GET or HEAD (/v1/models) generates nothing and is no attempt: its
     * id is not claimed, and a generation may use it later
     */

    if (rc == NGX_OK && drlcf->ledger
        && !(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)))
    {
        rc = ngx_http_dynamo_rl_ledger_add(r, ctx);
    }

done:

    switch (rc) {

    case NGX_OK:
        return NGX_DECLINED;

    case NGX_DONE:
    case NGX_AGAIN:
        return rc;

    case NGX_ERROR:
        ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_ERROR;
        break;
    }

    return ngx_http_dynamo_rl_refuse(r, ctx);
}


static ngx_int_t
ngx_http_dynamo_rl_attempt(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    size_t            len;
    uint64_t          lens;
    ngx_int_t         rc;
    ngx_uint_t        i, n, touch, class;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *header, *id;

    n = 0;
    id = NULL;
    touch = 0;
    lens = drlcf->header_lens;

    /*
     * one walk of the client's headers: the attempt id, whether any
     * header is to be renamed or dropped before the upstream sees it, and
     * whether the body names a content coding other than "identity" (the
     * only one the body policy reads)
     */

    part = &r->headers_in.headers.part;
    header = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            header = part->elts;
            i = 0;
        }

        len = header[i].key.len;

        if (len < 64 && !(lens & (1ULL << len))) {
            continue;
        }

        if (len == drlcf->attempt_header.len
            && ngx_http_dynamo_rl_header_is(&header[i], &drlcf->attempt_header)
               == NGX_OK)
        {
            id = &header[i];
            n++;
        }

        class = ngx_http_dynamo_rl_header_class(header[i].key.data, len);

        if (!touch
            && ngx_http_dynamo_rl_upstream_touch(&header[i], class, drlcf)
               == NGX_OK)
        {
            touch = 1;
        }

        if (class == NGX_HTTP_DYNAMO_RL_HEADER_CODING
            && (header[i].value.len != sizeof("identity") - 1
                || ngx_strncasecmp(header[i].value.data,
                                   (u_char *) "identity",
                                   header[i].value.len)
                   != 0))
        {
            ctx->body_coded = 1;
        }
    }

#if (NGX_HTTP_GZIP || NGX_HTTP_HEADERS)

    if (r->headers_in.accept_encoding != NULL
        && ngx_http_dynamo_rl_identity(r) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

#endif

    rc = ngx_http_dynamo_rl_attempt_id(r, ctx, id, n);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED && n > 0) {

        /* the response still carries an id the access log can join on */

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl: invalid client attempt id in \"%V\" "
                      "header, %ui header(s)", &drlcf->attempt_header, n);

        return ngx_http_dynamo_rl_deny(r, NGX_HTTP_BAD_REQUEST,
                                       "bad_attempt_id",
                                       n > 1 ? "more than one attempt id"
                                             : "invalid attempt id: 1 to 128 "
                                               "bytes of [A-Za-z0-9._:-]");
    }

    /*
     * Dynamo's own request id is a UUID: the attempt id when it is one,
     * else one minted for the attempt (and kept in its ledger record)
     */

    if (rc == NGX_OK
        && ngx_http_dynamo_rl_uuid_valid(id->value.data, id->value.len)
           != NGX_OK)
    {
        if (ngx_http_dynamo_rl_mint(r, ctx->id) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ctx->request_id.data = ctx->id;
        ctx->request_id.len = NGX_HTTP_DYNAMO_RL_UUID_LEN;
    }

    if (rc == NGX_OK) {
        ctx->client_id = 1;

        if (ctx->request_id.len == 0) {
            ctx->request_id = ctx->attempt_id;
        }

    } else {
        ctx->request_id = ctx->attempt_id;
    }

    /* every error-log line of the request names its attempt */

    ctx->log_handler = r->log_handler;
    r->log_handler = ngx_http_dynamo_rl_log_error;

    if (ngx_http_dynamo_rl_upstream_headers(r, ctx, drlcf, n, touch)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl request: attempt \"%V\"%s",
                   &ctx->attempt_id, n ? " from client" : "");

    return NGX_OK;
}


/*
 * the attempt id, from what a walk of the client's headers found (the
 * last attempt id header, and how many there were): NGX_OK with the
 * client's one valid id, NGX_DECLINED with one minted when it sent none,
 * more than one or an invalid one, NGX_ERROR when none could be minted
 */

static ngx_int_t
ngx_http_dynamo_rl_attempt_id(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_table_elt_t *id, ngx_uint_t n)
{
    u_char  *p;
    size_t   i, len;

    if (n == 1
        && ngx_http_dynamo_rl_attempt_id_valid(id->value.data, id->value.len)
           == NGX_OK)
    {
        ctx->attempt_id = id->value;

        /*
         * a UUID in its lower-case form, also in the header the upstream
         * sees; ctx->id is a minted id's room only
         */

        p = id->value.data;
        len = id->value.len;

        for (i = 0; i < len && !(p[i] >= 'A' && p[i] <= 'F'); i++) {
            /* void */
        }

        if (i < len && ngx_http_dynamo_rl_uuid_valid(p, len) == NGX_OK) {
            p = ngx_pnalloc(r->pool, len);
            if (p == NULL) {
                return NGX_ERROR;
            }

            ngx_memcpy(p, id->value.data, len);
            (void) ngx_http_dynamo_rl_attempt_id_canonical(p, len);

            ctx->attempt_id.data = p;
            id->value.data = p;
        }

        return NGX_OK;
    }

    if (ngx_http_dynamo_rl_mint(r, ctx->id) != NGX_OK) {
        return NGX_ERROR;
    }

    ctx->attempt_id.data = ctx->id;
    ctx->attempt_id.len = NGX_HTTP_DYNAMO_RL_UUID_LEN;

    return NGX_DECLINED;
}


/*
 * at merge: the lengths of every name the attempt's walk of the client's
 * headers looks for, a bit each (a name of 64 bytes or more is looked at
 * whatever its length), so that most headers cost one test
 */

uint64_t
ngx_http_dynamo_rl_request_lens(ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    uint64_t    lens;
    ngx_str_t  *name;
    ngx_uint_t  i;

    lens = NGX_HTTP_DYNAMO_RL_HEADER_LENS;

    if (drlcf->strip_headers != NULL) {
        name = drlcf->strip_headers->elts;

        for (i = 0; i < drlcf->strip_headers->nelts; i++) {
            lens |= (name[i].len < 64) ? 1ULL << name[i].len : (uint64_t) -1;
        }
    }

    if (drlcf->attempt_header.len < 64) {
        lens |= 1ULL << drlcf->attempt_header.len;

    } else {
        lens = (uint64_t) -1;
    }

    if (drlcf->attempt_upstream != NGX_HTTP_DYNAMO_RL_UPSTREAM_NONE) {
        lens |= (drlcf->attempt_upstream_header.len < 64)
                ? 1ULL << drlcf->attempt_upstream_header.len
                : (uint64_t) -1;
    }

    return lens;
}


static u_char *
ngx_http_dynamo_rl_log_error(ngx_http_request_t *r, ngx_http_request_t *sr,
    u_char *buf, size_t len)
{
    u_char                    *p;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx == NULL || ctx->log_handler == NULL) {
        return buf;
    }

    p = ctx->log_handler(r, sr, buf, len);

    len -= p - buf;

    return ngx_snprintf(p, len, ", attempt: \"%V\"", &ctx->attempt_id);
}


static ngx_int_t
ngx_http_dynamo_rl_mint(ngx_http_request_t *r, u_char *dst)
{
    ngx_time_t                      *tp;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    if (drmcf->rand_pos + 10 > NGX_HTTP_DYNAMO_RL_RAND_SIZE) {
        if (RAND_bytes(drmcf->rand, NGX_HTTP_DYNAMO_RL_RAND_SIZE) != 1) {
            ngx_log_error(NGX_LOG_CRIT, r->connection->log, 0,
                          "RAND_bytes() failed");
            return NGX_ERROR;
        }

        drmcf->rand_pos = 0;
    }

    tp = ngx_timeofday();

    ngx_http_dynamo_rl_uuid7(dst, (uint64_t) tp->sec * 1000 + tp->msec,
                             drmcf->rand + drmcf->rand_pos);

    /* each id consumes its bytes: no two ids share randomness */

    ngx_memzero(drmcf->rand + drmcf->rand_pos, 10);
    drmcf->rand_pos += 10;

    return NGX_OK;
}


/*
 * the upstream sees the attempt id under both names, and never a client's
 * routing pins or its own x-request-id; the list is rebuilt only when a
 * header has to go
 */

static ngx_int_t
ngx_http_dynamo_rl_upstream_headers(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf,
    ngx_uint_t client_id, ngx_uint_t touch)
{
    ngx_str_t                       *up;
    ngx_uint_t                       i, drop;
    ngx_array_t                     *kept;
    ngx_list_part_t                 *part;
    ngx_table_elt_t                 *header, *h, *hp;
    ngx_http_dynamo_rl_list_iter_t   it;

    up = (drlcf->attempt_upstream == NGX_HTTP_DYNAMO_RL_UPSTREAM_NONE)
         ? NULL : &drlcf->attempt_upstream_header;

    drop = 0;

    part = &r->headers_in.headers.part;
    header = part->elts;

    /* the attempt's walk found nothing to rename or drop: no second walk */

    for (i = 0; touch; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            header = part->elts;
            i = 0;
        }

        if (ngx_http_dynamo_rl_upstream_touch(&header[i],
                          ngx_http_dynamo_rl_header_class(header[i].key.data,
                                                          header[i].key.len),
                          drlcf)
            != NGX_OK)
        {
            continue;
        }

        if (drlcf->attempt_upstream == NGX_HTTP_DYNAMO_RL_UPSTREAM_XRID
            && ngx_http_dynamo_rl_header_is(&header[i], up) == NGX_OK)
        {
            /* a trajectory id, often reused: kept under another name */

            ngx_str_set(&header[i].key, "x-client-request-id");
            header[i].lowcase_key = header[i].key.data;
            header[i].hash = ngx_hash_key(header[i].key.data,
                                          header[i].key.len);
            continue;
        }

        header[i].hash = 0;
        drop = 1;
    }

    if (drop) {
        /* the list is rebuilt in place: it is embedded in headers_in */

        kept = ngx_array_create(r->pool, 20, sizeof(ngx_table_elt_t));
        if (kept == NULL) {
            return NGX_ERROR;
        }

        for (hp = ngx_http_dynamo_rl_list_first(&r->headers_in.headers, &it);
             hp != NULL;
             hp = ngx_http_dynamo_rl_list_next(&it))
        {
            if (hp->hash == 0) {
                ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                               "dynamo rl request: drop header \"%V: %V\"",
                               &hp->key, &hp->value);
                continue;
            }

            h = ngx_array_push(kept);
            if (h == NULL) {
                return NGX_ERROR;
            }

            *h = *hp;
        }

        if (ngx_list_init(&r->headers_in.headers, r->pool, kept->nelts + 2,
                          sizeof(ngx_table_elt_t))
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        header = kept->elts;

        for (i = 0; i < kept->nelts; i++) {
            h = ngx_list_push(&r->headers_in.headers);
            if (h == NULL) {
                return NGX_ERROR;
            }

            *h = header[i];
        }
    }

    /* kept in ctx: a /generate body's rid may still become the id */

    if (!client_id) {
        ctx->id_headers[0] = ngx_http_dynamo_rl_push_header(
                                                 &r->headers_in.headers,
                                                 &drlcf->attempt_header,
                                                 drlcf->attempt_header_lc,
                                                 drlcf->attempt_header_hash,
                                                 &ctx->attempt_id);
        if (ctx->id_headers[0] == NULL) {
            return NGX_ERROR;
        }
    }

    ctx->id_headers[2] = ngx_http_dynamo_rl_push_header(
                                           &r->headers_in.headers,
                                           &ngx_http_dynamo_rl_request_id,
                                           ngx_http_dynamo_rl_request_id.data,
                                           drlcf->request_id_hash,
                                           &ctx->request_id);
    if (ctx->id_headers[2] == NULL) {
        return NGX_ERROR;
    }

    if (up != NULL) {
        ctx->id_headers[1] = ngx_http_dynamo_rl_push_header(
                                           &r->headers_in.headers, up,
                                           drlcf->attempt_upstream_header_lc,
                                           drlcf->attempt_upstream_header_hash,
                                           &ctx->attempt_id);
        if (ctx->id_headers[1] == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * NGX_OK: a client's header the upstream must not see as it is (the
 * upstream id's name, a routing pin, a request id, a tenant or priority,
 * one of dynamo_rl_strip_headers), the attempt header excepted; "class"
 * is the header's ngx_http_dynamo_rl_header_class()
 */

static ngx_int_t
ngx_http_dynamo_rl_upstream_touch(ngx_table_elt_t *h, ngx_uint_t class,
    ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    ngx_str_t   *name;
    ngx_uint_t   i;

    if (class == NGX_HTTP_DYNAMO_RL_HEADER_REQUEST_ID
        || class == NGX_HTTP_DYNAMO_RL_HEADER_ASSIGNED
        || (class == NGX_HTTP_DYNAMO_RL_HEADER_ROUTING
            && drlcf->strip_routing_headers))
    {
        return NGX_OK;
    }

    /* the attempt header is the module's own: never the operator's to strip */

    if (drlcf->strip_headers != NULL
        && !(h->key.len == drlcf->attempt_header.len
             && ngx_http_dynamo_rl_header_is(h, &drlcf->attempt_header)
                == NGX_OK))
    {
        name = drlcf->strip_headers->elts;

        for (i = 0; i < drlcf->strip_headers->nelts; i++) {
            if (h->key.len == name[i].len
                && ngx_http_dynamo_rl_header_eq(h->key.data, name[i].data,
                                                name[i].len)
                   == NGX_OK)
            {
                return NGX_OK;
            }
        }
    }

    if (drlcf->attempt_upstream != NGX_HTTP_DYNAMO_RL_UPSTREAM_NONE
        && h->key.len == drlcf->attempt_upstream_header.len
        && ngx_http_dynamo_rl_header_is(h, &drlcf->attempt_upstream_header)
           == NGX_OK)
    {
        return NGX_OK;
    }

    return NGX_DECLINED;
}


static ngx_table_elt_t *
ngx_http_dynamo_rl_push_header(ngx_list_t *list, ngx_str_t *name,
    u_char *lowcase, ngx_uint_t hash, ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(list);
    if (h == NULL) {
        return NULL;
    }

    h->hash = hash;
    h->key = *name;
    h->value = *value;
    h->lowcase_key = lowcase;

    return h;
}


/*
 * the tenant and priority the gateway assigns: the client's own were
 * removed with the routing pins, a non-empty value is sent instead
 */

static ngx_int_t
ngx_http_dynamo_rl_assign(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    ngx_str_t  priority;

    if (drlcf->tenant != NULL) {
        if (ngx_http_dynamo_rl_assign_one(r, drlcf->tenant,
                                          &ngx_http_dynamo_rl_tenant_id,
                                          &ctx->tenant)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (drlcf->priority != NULL) {
        if (ngx_http_dynamo_rl_assign_one(r, drlcf->priority,
                                          &ngx_http_dynamo_rl_priority_name,
                                          &priority)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_assign_one(ngx_http_request_t *r,
    ngx_http_complex_value_t *cv, ngx_str_t *name, ngx_str_t *value)
{
    u_char           *p, *last;
    ngx_table_elt_t  *h;

    if (ngx_http_complex_value(r, cv, value) != NGX_OK) {
        return NGX_ERROR;
    }

    if (value->len == 0) {
        return NGX_OK;
    }

    /* a header value: no control bytes but tab, whatever a variable held */

    last = value->data + value->len;

    for (p = value->data; p < last; p++) {
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "dynamo rl: \"%V\" value with a control byte "
                          "not sent", name);
            value->len = 0;
            return NGX_ERROR;
        }
    }

    h = ngx_http_dynamo_rl_push_header(&r->headers_in.headers, name,
                                       name->data,
                                       ngx_hash_key(name->data, name->len),
                                       value);
    if (h == NULL) {
        return NGX_ERROR;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl request: assigned \"%V: %V\"", name, value);

    return NGX_OK;
}


/* dynamo_rl_tenant value | off, dynamo_rl_priority value | off */

char *
ngx_http_dynamo_rl_assigned(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t                          *value;
    ngx_http_complex_value_t          **cv;
    ngx_http_compile_complex_value_t    ccv;

    cv = (ngx_http_complex_value_t **) (p + cmd->offset);

    if (*cv != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        *cv = NULL;
        return NGX_CONF_OK;
    }

    *cv = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (*cv == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = *cv;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * dynamo_rl_strip_headers name ...: RFC 9110 tokens, kept in lower case
 * with dashes for underscores, as the routing pins are matched
 */

char *
ngx_http_dynamo_rl_strip_headers(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_dynamo_rl_loc_conf_t *drlcf = conf;

    u_char      c, *lc;
    ngx_str_t  *value, *name;
    ngx_uint_t  i, k;

    if (drlcf->strip_headers == NGX_CONF_UNSET_PTR) {
        drlcf->strip_headers = ngx_array_create(cf->pool, 4,
                                                sizeof(ngx_str_t));
        if (drlcf->strip_headers == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        lc = ngx_pnalloc(cf->pool, value[i].len + 1);
        if (lc == NULL) {
            return NGX_CONF_ERROR;
        }

        for (k = 0; k < value[i].len; k++) {
            c = value[i].data[k];

            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                  || (c >= '0' && c <= '9')
                  || ngx_strlchr((u_char *) "!#$%&'*+-.^_`|~",
                                 (u_char *) "!#$%&'*+-.^_`|~" + 15, c)
                     != NULL))
            {
                break;
            }

            lc[k] = (c == '_') ? '-' : ngx_tolower(c);
        }

        if (value[i].len == 0 || k < value[i].len) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid header name \"%V\": a header name "
                               "is a token of RFC 9110 (letters, digits and "
                               "!#$%%&'*+-.^_`|~)", &value[i]);
            return NGX_CONF_ERROR;
        }

        lc[k] = '\0';

        name = ngx_array_push(drlcf->strip_headers);
        if (name == NULL) {
            return NGX_CONF_ERROR;
        }

        name->data = lc;
        name->len = k;
    }

    return NGX_CONF_OK;
}


#if (NGX_HTTP_GZIP || NGX_HTTP_HEADERS)

/*
 * the ledger reads the answer as it passes: the upstream is asked for
 * it uncompressed ("Accept-Encoding: identity" instead of the client's
 * codings); the client's own header stays what nginx's filters toward
 * the client (gzip) see
 */

static ngx_int_t
ngx_http_dynamo_rl_identity(ngx_http_request_t *r)
{
    ngx_table_elt_t                 *h, *copy;
    ngx_http_dynamo_rl_list_iter_t   it;

    copy = ngx_palloc(r->pool, sizeof(ngx_table_elt_t));
    if (copy == NULL) {
        return NGX_ERROR;
    }

    *copy = *r->headers_in.accept_encoding;
    r->headers_in.accept_encoding = copy;

    for (h = ngx_http_dynamo_rl_list_first(&r->headers_in.headers, &it);
         h != NULL;
         h = ngx_http_dynamo_rl_list_next(&it))
    {
        if (h->key.len == sizeof("Accept-Encoding") - 1
            && ngx_strncasecmp(h->key.data, (u_char *) "Accept-Encoding",
                               sizeof("Accept-Encoding") - 1)
               == 0)
        {
            ngx_str_set(&h->value, "identity");
        }
    }

    return NGX_OK;
}

#endif


/*
 * A request whose bytes reached one upstream is never sent to another,
 * whatever its method and proxy_next_upstream: nginx re-sends a request
 * after an error, a timeout or a 5xx unless the method is POST, LOCK or
 * PATCH, and a request-plane body is read whole first, which also turns
 * off nginx's guard for bodies it has not buffered.  The upstream groups
 * of request-plane locations get a peer.init that wraps the balancer's
 * get and free: free, which nginx calls before it decides to try the next
 * server, ends the tries once the connection wrote a byte of this request.
 * The flag also says whether the attempt was forwarded: nginx resets
 * request_sent when a retry finds no server.
 */

char *
ngx_http_dynamo_rl_request_upstream(ngx_conf_t *cf,
    ngx_http_dynamo_rl_main_conf_t *drmcf, ngx_http_upstream_srv_conf_t *uscf)
{
    ngx_http_dynamo_rl_peer_init_t  *pi;

    if (uscf == NULL || uscf->peer.init == NULL
        || uscf->peer.init == ngx_http_dynamo_rl_peer_init)
    {
        return NGX_CONF_OK;
    }

    if (drmcf->peer_inits == NULL) {
        drmcf->peer_inits = ngx_array_create(cf->pool, 4,
                                      sizeof(ngx_http_dynamo_rl_peer_init_t));
        if (drmcf->peer_inits == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    pi = ngx_array_push(drmcf->peer_inits);
    if (pi == NULL) {
        return NGX_CONF_ERROR;
    }

    pi->uscf = uscf;
    pi->init = uscf->peer.init;

    uscf->peer.init = ngx_http_dynamo_rl_peer_init;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_peer_init(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_int_t                        rc;
    ngx_uint_t                       i;
    ngx_http_upstream_t             *u;
    ngx_http_dynamo_rl_ctx_t        *ctx;
    ngx_http_dynamo_rl_peer_init_t  *pi;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    pi = drmcf->peer_inits->elts;

    for (i = 0; pi[i].uscf != us; i++) {
        if (i + 1 == drmcf->peer_inits->nelts) {
            return NGX_ERROR;
        }
    }

    rc = pi[i].init(r, us);

    if (rc != NGX_OK) {
        return rc;
    }

    ctx = ngx_http_dynamo_rl_get_ctx(r);
    u = r->upstream;

    /* the proxy module's input filter context is the request */

    if (ctx == NULL || ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        || r != r->main || u->input_filter_ctx != r
        || u->peer.get == NULL || u->peer.free == NULL)
    {
        return NGX_OK;
    }

    ctx->peer_get = u->peer.get;
    ctx->peer_free = u->peer.free;
    ctx->peer_wrapped = 1;

    u->peer.get = ngx_http_dynamo_rl_peer_get;
    u->peer.free = ngx_http_dynamo_rl_peer_free;

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_peer_get(ngx_peer_connection_t *pc, void *data)
{
    ngx_int_t                  rc;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    ctx = ngx_http_dynamo_rl_peer_ctx(pc);

    rc = ctx->peer_get(pc, data);

    /* NGX_DONE: a cached connection, with what it sent before */

    ctx->peer_sent = (rc == NGX_DONE && pc->connection != NULL)
                     ? pc->connection->sent : 0;

    return rc;
}


static void
ngx_http_dynamo_rl_peer_free(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state)
{
    ngx_http_dynamo_rl_ctx_t  *ctx;

    ctx = ngx_http_dynamo_rl_peer_ctx(pc);

    /* a keepalive free takes the connection away: look first */

    if (pc->connection != NULL && pc->connection->sent > ctx->peer_sent) {
        ctx->written = 1;
    }

    ctx->peer_free(pc, data, state);

    if (ctx->written) {
        pc->tries = 0;
    }
}


static ngx_http_dynamo_rl_ctx_t *
ngx_http_dynamo_rl_peer_ctx(ngx_peer_connection_t *pc)
{
    ngx_http_request_t   *r;
    ngx_http_upstream_t  *u;

    u = (ngx_http_upstream_t *)
            ((u_char *) pc - offsetof(ngx_http_upstream_t, peer));
    r = u->input_filter_ctx;

    /* as peer_init found it, after an internal redirect too */

    return ngx_http_dynamo_rl_get_ctx(r);
}
