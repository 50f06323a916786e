
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


/*
 * The layer every plane and feature stands on: the per-request context,
 * the zone, the clocks, the gate's drain count, the module's own answers
 * (JSON errors, 405 with Allow) and the prologue of its APIs (read-only
 * methods, cross-site POSTs, the content handler install).  It calls
 * nothing above it.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_common.h"


ngx_http_dynamo_rl_ctx_t *
ngx_http_dynamo_rl_create_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t              *cln;
    ngx_http_dynamo_rl_ctx_t        *ctx;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_dynamo_rl_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    /*
     * the cleanup is how the context survives internal redirects, which
     * clear r->ctx, and the point where the request's end is observed
     */

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    cln->handler = drmcf->ctx_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_dynamo_rl_module);

    return ctx;
}


ngx_http_dynamo_rl_ctx_t *
ngx_http_dynamo_rl_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t              *cln;
    ngx_http_dynamo_rl_ctx_t        *ctx;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    /*
     * a subrequest shares its main request's pool, and so its cleanups:
     * the walk is for the main request only, or a subrequest (one that an
     * upstream or error_page redirected, say) would act on the main
     * request's context
     */

    if (ctx == NULL && r == r->main && (r->internal || r->filter_finalize)) {

        drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

        for (cln = r->pool->cleanup; cln; cln = cln->next) {
            if (cln->handler == drmcf->ctx_cleanup) {
                ctx = cln->data;
                ngx_http_set_ctx(r, ctx, ngx_http_dynamo_rl_module);
                break;
            }
        }
    }

    return ctx;
}


/* the gate, attempts, status and metrics APIs: a zone and no other handler */

char *
ngx_http_dynamo_rl_content_handler(ngx_conf_t *cf, ngx_http_handler_pt handler)
{
    ngx_http_core_loc_conf_t        *clcf;
    ngx_http_dynamo_rl_loc_conf_t   *drlcf;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_dynamo_rl_module);

    if (drmcf->shm_zone == NULL) {
        return "requires \"dynamo_rl_zone\" before it";
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->handler != NULL) {
        return "is duplicate";
    }

    clcf->handler = handler;

    drlcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_dynamo_rl_module);
    drlcf->api = 1;

    return NGX_CONF_OK;
}


ngx_http_dynamo_rl_zone_t *
ngx_http_dynamo_rl_get_zone(ngx_http_request_t *r)
{
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    return drmcf->shm_zone->data;
}


/*
 * the clock of attempt ttls, gate leases and durations, in milliseconds:
 * CLOCK_MONOTONIC, which a step of the wall clock moves neither way and
 * whose origin is the same in every process of the machine (the zone is
 * shared by the worker processes and outlives reloads); read each time,
 * not nginx's ngx_current_msec, which each process caches at its own
 * moments, so that no process reads a time earlier than one another
 * process has already stored
 */

uint64_t
ngx_http_dynamo_rl_now(void)
{
#if (NGX_HAVE_CLOCK_MONOTONIC)

    struct timespec  ts;

    if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0) {
        return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    }

#endif

    return (uint64_t) ngx_current_msec;
}


/*
 * the same clock, for a request: its start as long as nginx's cached
 * clock has not moved since (ngx_current_msec, updated as the event loop
 * turns, or each timer_resolution), as in the phases that follow a
 * request's header without waiting, which then need not read the clock
 * again; at most one such tick early
 */

uint64_t
ngx_http_dynamo_rl_ctx_now(ngx_http_dynamo_rl_ctx_t *ctx)
{
    if (ctx->started && ctx->started_tick == ngx_current_msec) {
        return ctx->started;
    }

    return ngx_http_dynamo_rl_now();
}


/* the end of the request's response, or now if it never ended */

uint64_t
ngx_http_dynamo_rl_ctx_end(ngx_http_dynamo_rl_ctx_t *ctx)
{
    return ctx->ended_at ? ctx->ended_at : ngx_http_dynamo_rl_now();
}


/* the wall clock in milliseconds since the epoch: for display only */

uint64_t
ngx_http_dynamo_rl_wall(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (uint64_t) tp->sec * 1000 + tp->msec;
}


/* RFC 3339 in UTC with milliseconds */

u_char *
ngx_http_dynamo_rl_iso_time(u_char *p, uint64_t ms)
{
    ngx_tm_t  tm;

    ngx_gmtime((time_t) (ms / 1000), &tm);

    return ngx_sprintf(p, "%4d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                       tm.ngx_tm_year, tm.ngx_tm_mon, tm.ngx_tm_mday,
                       tm.ngx_tm_hour, tm.ngx_tm_min, tm.ngx_tm_sec,
                       (int) (ms % 1000));
}


/* a JSON answer of the module's own, ended with a newline as text is */

ngx_int_t
ngx_http_dynamo_rl_send_json(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *body)
{
    u_char     *p;
    ngx_str_t   type, json;

    p = ngx_pnalloc(r->pool, body->len + 1);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    json.data = p;
    p = ngx_cpymem(p, body->data, body->len);
    *p++ = LF;
    json.len = p - json.data;

    ngx_str_set(&type, "application/json");

    return ngx_http_dynamo_rl_send(r, status, &type, &json);
}


ngx_int_t
ngx_http_dynamo_rl_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, ngx_str_t *body)
{
    ngx_int_t  rc;

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    r->headers_out.status = status;
    r->headers_out.content_length_n = body->len;

    r->headers_out.content_type = *type;
    r->headers_out.content_type_len = type->len;
    r->headers_out.content_type_lowcase = NULL;

    ngx_http_clear_accept_ranges(r);
    ngx_http_clear_last_modified(r);
    ngx_http_clear_etag(r);

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    return ngx_http_dynamo_rl_send_body(r, ngx_http_output_filter,
                                        body->data, body->len);
}


/*
 * a whole body in memory as one last buffer, through the output filter of
 * a content handler or the next body filter of a filter that answers
 */

ngx_int_t
ngx_http_dynamo_rl_send_body(ngx_http_request_t *r,
    ngx_http_output_body_filter_pt filter, u_char *p, size_t len)
{
    ngx_buf_t    *b;
    ngx_chain_t   out;

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = p;
    b->last = p + len;
    b->memory = len ? 1 : 0;
    b->last_buf = 1;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return filter(r, &out);
}


/*
 * the gateway's own error in the plane's shape: the request plane uses
 * Dynamo's flat {"message","type","code"} (nested under "error" on
 * /generate), the trusted planes and APIs {"error","message"}
 */

ngx_int_t
ngx_http_dynamo_rl_error(ngx_http_request_t *r, ngx_uint_t status,
    char *reason, char *message)
{
    u_char                    *p;
    size_t                     len, size;
    uintptr_t                  esc;
    ngx_str_t                  body, type;
    ngx_uint_t                 nested;
    ngx_table_elt_t           *h;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx != NULL) {
        ctx->deny_reason.data = (u_char *) reason;
        ctx->deny_reason.len = ngx_strlen(reason);
        ngx_str_set(&ctx->outcome, "rejected");
    }

    if (ctx != NULL && ctx->plane == NGX_HTTP_DYNAMO_RL_PLANE_REQUEST) {

        /* the flat shape has no reason: a client tells ours from Dynamo's */

        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        h->hash = 1;
        ngx_str_set(&h->key, "X-Dynamo-RL-Reason");
        h->value = ctx->deny_reason;
    }

    ngx_http_dynamo_rl_status_type(status, &type);

    /* reasons and types are fixed strings; a message may have quotes */

    len = ngx_strlen(message);
    esc = ngx_escape_json(NULL, (u_char *) message, len);

    size = sizeof("{\"error\":{\"message\":\"\",\"type\":\"\",\"code\":}}")
           - 1 + len + esc + type.len + NGX_INT_T_LEN
           + sizeof("{\"error\":\"\",\"message\":\"\"}") - 1
           + ngx_strlen(reason);

    p = ngx_pnalloc(r->pool, size);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    body.data = p;

    if (ctx != NULL && ctx->plane == NGX_HTTP_DYNAMO_RL_PLANE_REQUEST) {

        /* SGLang's /generate nests its errors, the OpenAI routes do not */

        nested = (ngx_http_dynamo_rl_route_generate(r) == NGX_OK);

        if (nested) {
            p = ngx_cpymem(p, "{\"error\":", sizeof("{\"error\":") - 1);
        }

        p = ngx_cpymem(p, "{\"message\":\"", sizeof("{\"message\":\"") - 1);
        p = (u_char *) ngx_escape_json(p, (u_char *) message, len);
        p = ngx_sprintf(p, "\",\"type\":\"%V\",\"code\":%ui}", &type, status);

        if (nested) {
            *p++ = '}';
        }

    } else {
        p = ngx_sprintf(p, "{\"error\":\"%s\",\"message\":\"", reason);
        p = (u_char *) ngx_escape_json(p, (u_char *) message, len);
        *p++ = '"';
        *p++ = '}';
    }

    body.len = p - body.data;

    return ngx_http_dynamo_rl_send_json(r, status, &body);
}


/*
 * a phase handler's refusal: the error is sent, the request finalized,
 * and NGX_DONE stops the phases
 */

ngx_int_t
ngx_http_dynamo_rl_deny(ngx_http_request_t *r, ngx_uint_t status,
    char *reason, char *message)
{
    ngx_http_finalize_request(r,
                              ngx_http_dynamo_rl_error(r, status, reason,
                                                       message));

    return NGX_DONE;
}


/*
 * the request plane's refusals at precontent, by verdict: the gate, the
 * body policy and the ledger decide and log, the precontent handler
 * answers with ngx_http_dynamo_rl_refuse()
 */

typedef struct {
    ngx_uint_t                      verdict;
    ngx_uint_t                      status;
    char                           *reason;
    char                           *message;
    ngx_uint_t                      retry_after;
} ngx_http_dynamo_rl_refusal_t;


/*
 * indexed by verdict; each row names its verdict, and
 * ngx_http_dynamo_rl_refusals_check() holds the two together
 */

static ngx_http_dynamo_rl_refusal_t  ngx_http_dynamo_rl_refusals[] = {
    { 0, 0, NULL, NULL, 0 },

    { NGX_HTTP_DYNAMO_RL_VERDICT_DUPLICATE,
      NGX_HTTP_CONFLICT, "duplicate_attempt",
      "attempt id already used: generation is not idempotent", 0 },

    { NGX_HTTP_DYNAMO_RL_VERDICT_FULL,
      NGX_HTTP_SERVICE_UNAVAILABLE, "ledger_full",
      "attempt ledger is full", 0 },

    /* the retry after the lease's end, in ctx->retry_after */
    { NGX_HTTP_DYNAMO_RL_VERDICT_CLOSED,
      NGX_HTTP_SERVICE_UNAVAILABLE, "gate_closed",
      "generation is paused for a policy refresh, retry later", 0 },

    { NGX_HTTP_DYNAMO_RL_VERDICT_UNAVAILABLE,
      NGX_HTTP_SERVICE_UNAVAILABLE, "store_unavailable",
      "the shared store does not answer: nothing was sent, retry later", 1 },

    { NGX_HTTP_DYNAMO_RL_VERDICT_UNKNOWN,
      NGX_HTTP_SERVICE_UNAVAILABLE, "gate_unknown",
      "the gate's state is not known, retry later", 1 },

    { NGX_HTTP_DYNAMO_RL_VERDICT_LOST,
      NGX_HTTP_SERVICE_UNAVAILABLE, "gate_lost",
      "the gate's record was lost while it was closed: it stays closed", 5 },

    { NGX_HTTP_DYNAMO_RL_VERDICT_STALE,
      NGX_HTTP_SERVICE_UNAVAILABLE, "gate_unknown",
      "the gate's state is not known: the shared store has not answered, "
      "retry later", 1 },

    { NGX_HTTP_DYNAMO_RL_VERDICT_REFUSED,
      NGX_HTTP_BAD_GATEWAY, "redirected",
      "the request was refused in a plane location and is not forwarded "
      "after a redirect", 0 },

    { NGX_HTTP_DYNAMO_RL_VERDICT_FORWARDED,
      NGX_HTTP_BAD_GATEWAY, "redirected",
      "the request already reached an upstream and is not forwarded again",
      0 },
};


/*
 * a verdict added out of order would answer with another verdict's row:
 * the table is checked once, at postconfiguration
 */

ngx_int_t
ngx_http_dynamo_rl_refusals_check(ngx_conf_t *cf)
{
    ngx_uint_t  i, n;

    n = sizeof(ngx_http_dynamo_rl_refusals)
        / sizeof(ngx_http_dynamo_rl_refusal_t);

    /* a row for every verdict before BODY; BODY and ERROR have none */

    if (n != NGX_HTTP_DYNAMO_RL_VERDICT_BODY) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "dynamo_rl refusals: %ui rows for %ui verdicts",
                           n, (ngx_uint_t) NGX_HTTP_DYNAMO_RL_VERDICT_BODY);
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        if (ngx_http_dynamo_rl_refusals[i].verdict != i) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "dynamo_rl refusals: row %ui is for verdict %ui",
                               i, ngx_http_dynamo_rl_refusals[i].verdict);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_dynamo_rl_refuse(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    ngx_uint_t                     retry;
    ngx_table_elt_t               *h;
    ngx_http_dynamo_rl_refusal_t  *rf;

    /* the answer may free the request: the count goes first */

    ngx_http_dynamo_rl_drain_leave(ctx);

    if (ctx->verdict == NGX_HTTP_DYNAMO_RL_VERDICT_BODY) {

        if (ctx->body_reason == NULL) {
            /* nginx's own refusal of the body (413, 400), or an error */
            return ctx->body_status;
        }

        return ngx_http_dynamo_rl_deny(r, ctx->body_status, ctx->body_reason,
                                       ctx->body_message);
    }

    /* NGX_HTTP_DYNAMO_RL_VERDICT_ERROR, and none: a bug */

    if (ctx->verdict == 0
        || ctx->verdict >= sizeof(ngx_http_dynamo_rl_refusals)
                           / sizeof(ngx_http_dynamo_rl_refusal_t))
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rf = &ngx_http_dynamo_rl_refusals[ctx->verdict];

    retry = (ctx->verdict == NGX_HTTP_DYNAMO_RL_VERDICT_CLOSED)
            ? ctx->retry_after : rf->retry_after;

    if (retry && ngx_http_dynamo_rl_retry_after(r, retry) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->verdict == NGX_HTTP_DYNAMO_RL_VERDICT_DUPLICATE) {

        /*
         * the OpenAI SDKs retry a 409 unless told not to: the same id
         * would only be refused again
         */

        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        h->hash = 1;
        ngx_str_set(&h->key, "X-Should-Retry");
        ngx_str_set(&h->value, "false");
    }

    return ngx_http_dynamo_rl_deny(r, rf->status, rf->reason, rf->message);
}


ngx_int_t
ngx_http_dynamo_rl_allow(ngx_http_request_t *r, ngx_uint_t methods)
{
    u_char           *p;
    ngx_table_elt_t  *h;

    static struct {
        ngx_uint_t    method;
        char         *name;
    } names[] = {
        { NGX_HTTP_GET, "GET" },
        { NGX_HTTP_HEAD, "HEAD" },
        { NGX_HTTP_POST, "POST" },
        { NGX_HTTP_PUT, "PUT" },
        { NGX_HTTP_DELETE, "DELETE" },
        { NGX_HTTP_PATCH, "PATCH" },
        { NGX_HTTP_OPTIONS, "OPTIONS" },
        { 0, NULL }
    };

    ngx_uint_t  i;

    p = ngx_pnalloc(r->pool, sizeof("GET, HEAD, POST, PUT, DELETE, PATCH, "
                                    "OPTIONS"));
    if (p == NULL) {
        return NGX_ERROR;
    }

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Allow");
    h->value.data = p;

    for (i = 0; names[i].name; i++) {
        if (methods & names[i].method) {
            if (p != h->value.data) {
                *p++ = ','; *p++ = ' ';
            }

            p = ngx_cpymem(p, names[i].name, ngx_strlen(names[i].name));
        }
    }

    h->value.len = p - h->value.data;

    return NGX_OK;
}


/*
 * the prologue of the read-only APIs: NGX_DECLINED for a GET or HEAD,
 * whose body is then discarded; otherwise what the handler returns,
 * a 405 with Allow among them
 */

ngx_int_t
ngx_http_dynamo_rl_read_only(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        if (ngx_http_dynamo_rl_allow(r, NGX_HTTP_GET|NGX_HTTP_HEAD)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_dynamo_rl_error(r, NGX_HTTP_NOT_ALLOWED, "method",
                                        "only GET and HEAD");
    }

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    return NGX_DECLINED;
}


/*
 * a POST from a page of another site through an operator's browser (a
 * CORS "simple request" needs no preflight) changes nothing: 403
 * "cross_origin" and one line; requests without Origin and Sec-Fetch-Site
 * are not a browser's and pass
 */

ngx_int_t
ngx_http_dynamo_rl_cross_origin(ngx_http_request_t *r)
{
    ngx_str_t                        origin, *site, *host;
    ngx_uint_t                       n, https;
    ngx_table_elt_t                 *h;
    ngx_http_dynamo_rl_loc_conf_t   *drlcf;
    ngx_http_dynamo_rl_list_iter_t   it;

    static ngx_str_t  origin_name = ngx_string("Origin");
    static ngx_str_t  site_name = ngx_string("Sec-Fetch-Site");

    n = 0;
    site = NULL;
    ngx_str_null(&origin);

    for (h = ngx_http_dynamo_rl_list_first(&r->headers_in.headers, &it);
         h != NULL;
         h = ngx_http_dynamo_rl_list_next(&it))
    {
        if (ngx_http_dynamo_rl_header_is(h, &origin_name) == NGX_OK) {
            origin = h->value;
            n++;

        } else if (ngx_http_dynamo_rl_header_is(h, &site_name) == NGX_OK) {
            site = &h->value;
        }
    }

    host = r->headers_in.host ? &r->headers_in.host->value : NULL;

    https = 0;

#if (NGX_HTTP_SSL)
    https = (r->connection->ssl != NULL);
#endif

    if (ngx_http_dynamo_rl_same_origin(&origin, n, site, host, https)
        == NGX_OK)
    {
        return NGX_OK;
    }

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    ngx_log_error(drlcf->log_level, r->connection->log, 0,
                  "dynamo rl: cross-origin \"%V\" refused, origin \"%V\"%s%V",
                  &r->method_name, &origin,
                  site ? ", sec-fetch-site " : "",
                  site ? site : &origin);

    return NGX_DECLINED;
}


ngx_int_t
ngx_http_dynamo_rl_header_is(ngx_table_elt_t *h, ngx_str_t *name)
{
    if (h->key.len == name->len
        && ngx_strncasecmp(h->key.data, name->data, name->len) == 0)
    {
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/*
 * an upstream's headers that carry a URL, as a worker's own redirect
 * does: with proxy_pass of variables proxy_redirect cannot rewrite them,
 * and a client would follow them around the boundary; neither plane of
 * the trusted side passes them on
 */

void
ngx_http_dynamo_rl_clear_urls(ngx_http_request_t *r)
{
    static ngx_str_t  names[] = {
        ngx_string("Location"),
        ngx_string("Content-Location"),
        ngx_string("Refresh"),
        ngx_string("Link"),
        ngx_null_string
    };

    ngx_http_clear_location(r);

    if (r->headers_out.refresh != NULL) {
        r->headers_out.refresh->hash = 0;
        r->headers_out.refresh = NULL;
    }

    ngx_http_dynamo_rl_headers_drop(r, names);
}


/* the response headers of the names given, whatever their letter case */

void
ngx_http_dynamo_rl_headers_drop(ngx_http_request_t *r, ngx_str_t *names)
{
    ngx_str_t                       *name;
    ngx_table_elt_t                 *h;
    ngx_http_dynamo_rl_list_iter_t   it;

    for (h = ngx_http_dynamo_rl_list_first(&r->headers_out.headers, &it);
         h != NULL;
         h = ngx_http_dynamo_rl_list_next(&it))
    {
        for (name = names; name->len; name++) {
            if (ngx_http_dynamo_rl_header_is(h, name) == NGX_OK) {
                h->hash = 0;
                break;
            }
        }
    }
}


/*
 * the walk of an ngx_list_t that core writes out at every use: the first
 * element, then the next one, NULL after the last
 */

void *
ngx_http_dynamo_rl_list_first(ngx_list_t *list,
    ngx_http_dynamo_rl_list_iter_t *it)
{
    it->list = list;
    it->part = &list->part;
    it->i = 0;

    return ngx_http_dynamo_rl_list_next(it);
}


void *
ngx_http_dynamo_rl_list_next(ngx_http_dynamo_rl_list_iter_t *it)
{
    while (it->i >= it->part->nelts) {

        if (it->part->next == NULL) {
            return NULL;
        }

        it->part = it->part->next;
        it->i = 0;
    }

    return (u_char *) it->part->elts + it->list->size * it->i++;
}


/*
 * the gate's drain: a request admitted to the request plane is counted in
 * its process's slot (by the gate, ngx_http_dynamo_rl_gate_enter()) until
 * it is refused or its response is done, whichever layer sees that first
 */

void
ngx_http_dynamo_rl_drain_leave(ngx_http_dynamo_rl_ctx_t *ctx)
{
    if (!ctx->counted) {
        return;
    }

    ctx->counted = 0;

    (void) ngx_atomic_fetch_add(
                 &ctx->slot_zone->sh->slot_requests[ngx_http_dynamo_rl_slot()],
                 -1);
}


/* one slot for each of nginx's, NGX_MAX_PROCESSES: none is shared */

ngx_uint_t
ngx_http_dynamo_rl_slot(void)
{
    return (ngx_uint_t) ngx_process_slot % NGX_HTTP_DYNAMO_RL_SLOTS;
}


ngx_int_t
ngx_http_dynamo_rl_retry_after(ngx_http_request_t *r, ngx_uint_t seconds)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->value.data = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (h->value.data == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Retry-After");
    h->value.len = ngx_sprintf(h->value.data, "%ui", seconds) - h->value.data;

    return NGX_OK;
}


/* an API's answer when the shared store does not answer, as a 503 */

ngx_int_t
ngx_http_dynamo_rl_store_down(ngx_http_request_t *r, char *message)
{
    if (ngx_http_dynamo_rl_retry_after(r, 1) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_dynamo_rl_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                    "store_unavailable", message);
}


/*
 * SGLang's native /generate, whose errors are nested and whose body's
 * "rid" is the engine request id; /inference/v1/generate is vLLM's
 */

ngx_int_t
ngx_http_dynamo_rl_route_generate(ngx_http_request_t *r)
{
    if (r->uri.len == sizeof("/generate") - 1
        && ngx_strncmp(r->uri.data, "/generate", r->uri.len) == 0)
    {
        return NGX_OK;
    }

    return NGX_DECLINED;
}
