
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_scope.h"
#include "ngx_http_dynamo_rl_discovery.h"
#include "ngx_http_dynamo_rl_admin.h"


static ngx_int_t ngx_http_dynamo_rl_admin_decide(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_index_t *index,
    uint64_t id);
static ngx_int_t ngx_http_dynamo_rl_admin_deny(ngx_http_request_t *r,
    ngx_uint_t status, char *reason, char *message);
static ngx_int_t ngx_http_dynamo_rl_admin_header_filter(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_admin_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static void ngx_http_dynamo_rl_admin_headers_clear(ngx_http_request_t *r);


/* a worker's answer larger than this is judged by its status alone */
#define NGX_HTTP_DYNAMO_RL_ADMIN_BODY  65536


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


/*
 * ACCESS phase: an admin call goes on only to a worker of the current
 * snapshot, in scope, valid, healthy, with a valid system_url, and only
 * for a route that worker advertises; each check has its own reason
 */

ngx_int_t
ngx_http_dynamo_rl_admin_handler(ngx_http_request_t *r)
{
    u_char                         *p;
    uint64_t                        id;
    ngx_int_t                       rc;
    ngx_str_t                       path, route;
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_index_t     *index;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    if (r != r->main) {
        return NGX_DECLINED;
    }

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (drlcf->plane != NGX_HTTP_DYNAMO_RL_PLANE_ADMIN) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx == NULL || ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_ADMIN) {
        /* classified elsewhere before an internal redirect: fail closed */
        return ngx_http_dynamo_rl_admin_deny(r, NGX_HTTP_BAD_REQUEST,
                                             "bad_path",
                                             "request was redirected into "
                                             "the admin plane");
    }

    if (ctx->admin_done) {
        return NGX_OK;
    }

    /* no query string, not even an empty one */

    if (r->args.len
        || ngx_strlchr(r->unparsed_uri.data,
                       r->unparsed_uri.data + r->unparsed_uri.len, '?')
           != NULL
        || r->uri.len < drlcf->admin_prefix.len
        || ngx_strncmp(r->uri.data, drlcf->admin_prefix.data,
                       drlcf->admin_prefix.len)
           != 0)
    {
        return ngx_http_dynamo_rl_admin_deny(r, NGX_HTTP_BAD_REQUEST,
                                             "bad_path",
                                             "expected {instance_id}/engine/"
                                             "{route} without a query");
    }

    path.data = r->uri.data + drlcf->admin_prefix.len;
    path.len = r->uri.len - drlcf->admin_prefix.len;

    /* GET {instance_id}/health or /live: a probe before binding */

    ngx_str_null(&route);

    if (ngx_http_dynamo_rl_parse_health_path(path.data, path.len, &id)
        == NGX_OK)
    {
        ctx->admin_health = 1;
        ctx->admin_live = (path.data[path.len - 1] == 'e');  /* "/live" */

    } else if (ngx_http_dynamo_rl_parse_admin_path(path.data, path.len, &id,
                                                   &route)
               != NGX_OK)
    {
        return ngx_http_dynamo_rl_admin_deny(r, NGX_HTTP_BAD_REQUEST,
                                             "bad_path",
                                             "expected {instance_id}/engine/"
                                             "{route}, {instance_id}/"
                                             "health or {instance_id}/live");
    }

    if (ctx->instance_id.len == 0) {
        p = ngx_strlchr(path.data, path.data + path.len, '/');

        ctx->instance_id.data = path.data;
        ctx->instance_id.len = p - path.data;
        ctx->route = route;
    }

    /* before the snapshot: a caller out of any scope learns nothing */

    rc = ngx_http_dynamo_rl_scope_eval(r, ctx);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        return ngx_http_dynamo_rl_deny(r, NGX_HTTP_FORBIDDEN, "caller_scope",
                                       "the caller's scope is empty or "
                                       "invalid");
    }

    rc = ngx_http_dynamo_rl_discovery_fresh(r, ctx, &index);

    if (rc == NGX_AGAIN) {
        return NGX_AGAIN;
    }

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        return ngx_http_dynamo_rl_admin_deny(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE,
                                             "discovery_unavailable",
                                             "no current discovery snapshot");
    }

    return ngx_http_dynamo_rl_admin_decide(r, ctx, index, id);
}


static ngx_int_t
ngx_http_dynamo_rl_admin_decide(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_index_t *index,
    uint64_t id)
{
    u_char                          *p;
    size_t                           len;
    ngx_uint_t                       n, k;
    ngx_str_t                       *route;
    ngx_http_dynamo_rl_worker_t    **wp, *w;

    static ngx_str_t  health = ngx_string("health");
    static ngx_str_t  live = ngx_string("live");

    ctx->generation.data = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (ctx->generation.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->generation.len = ngx_sprintf(ctx->generation.data, "%ui",
                                      index->generation)
                          - ctx->generation.data;

    w = NULL;
    n = 0;

    wp = ngx_http_dynamo_rl_index_find(index, id, &k);

    for ( /* void */ ; k; k--, wp++) {
        if (ngx_http_dynamo_rl_scope_worker(r, ctx, index, *wp) == NGX_OK) {
            w = *wp;
            n++;
        }
    }

    if (n == 0) {
        return ngx_http_dynamo_rl_admin_deny(r, NGX_HTTP_NOT_FOUND,
                                             "unknown_worker",
                                             "no such worker in the "
                                             "discovery snapshot");
    }

    if (n > 1) {
        return ngx_http_dynamo_rl_admin_deny(r, NGX_HTTP_CONFLICT,
                                             "ambiguous_worker",
                                             "instance id is not unique in "
                                             "the discovery snapshot");
    }

    switch (w->state) {

    case NGX_HTTP_DYNAMO_RL_WORKER_INVALID:
        return ngx_http_dynamo_rl_admin_deny(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE,
                                             "worker_invalid",
                                             "worker entry is invalid");

    case NGX_HTTP_DYNAMO_RL_WORKER_ERROR:
        return ngx_http_dynamo_rl_admin_deny(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE,
                                             "worker_error",
                                             "worker reports an error");

    case NGX_HTTP_DYNAMO_RL_WORKER_NO_URL:
        return ngx_http_dynamo_rl_admin_deny(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE,
                                             "no_system_url",
                                             "worker has no valid "
                                             "system_url");
    }

    if (ngx_http_dynamo_rl_upstream_group(r, &w->system_url, 1) != NGX_OK)
    {
        return ngx_http_dynamo_rl_admin_deny(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE,
                                             "no_system_url",
                                             "worker's system_url names an "
                                             "upstream group of the "
                                             "gateway");
    }

    if (ctx->admin_health) {
        route = ctx->admin_live ? &live : &health;

    } else {
        route = ngx_http_dynamo_rl_route_find(w->routes, w->nroutes,
                                              &ctx->route);

        if (route == NULL
            || ngx_http_dynamo_rl_scope_route(r, ctx, &ctx->route) != NGX_OK)
        {
            return ngx_http_dynamo_rl_admin_deny(r, NGX_HTTP_FORBIDDEN,
                                                 "route_not_advertised",
                                                 "route is not advertised "
                                                 "by this worker");
        }
    }

    /*
     * everything forwarded comes from the snapshot, copied into the
     * request's pool: the process's index may be replaced meanwhile
     */

    len = w->system_url.len;

    if (w->system_url.data[len - 1] == '/') {
        len--;
    }

    ctx->system_url.data = ngx_pnalloc(r->pool, len);
    if (ctx->system_url.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(ctx->system_url.data, w->system_url.data, len);
    ctx->system_url.len = len;

    if (ctx->admin_health) {
        if (ctx->admin_live) {
            ngx_str_set(&ctx->engine_path, "/live");

        } else {
            ngx_str_set(&ctx->engine_path, "/health");
        }

        goto allow;
    }

    len = sizeof("/engine/") - 1 + route->len;

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->engine_path.data = p;
    ctx->engine_path.len = len;

    p = ngx_cpymem(p, "/engine/", sizeof("/engine/") - 1);
    ngx_memcpy(p, route->data, route->len);

    ctx->route.data = p;
    ctx->route.len = route->len;

allow:

    /* an admin call never upgrades the connection */
    r->headers_in.upgrade = NULL;

    ctx->admin_done = 1;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl admin: allow %V%V snapshot %V",
                   &ctx->system_url, &ctx->engine_path, &ctx->generation);

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_admin_deny(ngx_http_request_t *r, ngx_uint_t status,
    char *reason, char *message)
{
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);
    ctx = ngx_http_dynamo_rl_get_ctx(r);

    ngx_log_error(drlcf->log_level, r->connection->log, 0,
                  "dynamo rl admin: denied, %s: instance \"%V\" "
                  "route \"%V\"", reason,
                  ctx ? &ctx->instance_id : &r->uri,
                  ctx ? &ctx->route : &r->uri);

    return ngx_http_dynamo_rl_deny(r, status, reason, message);
}


ngx_int_t
ngx_http_dynamo_rl_admin_filter_init(ngx_conf_t *cf)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_dynamo_rl_admin_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_dynamo_rl_admin_body_filter;

    return NGX_OK;
}


/*
 * A worker answers logical failures with HTTP 200: {"status":"error"}
 * (vLLM) or {"success":false} (SGLang).  The answer passes unchanged; a
 * copy of a small 2xx body is kept to judge it once complete.
 */

static ngx_int_t
ngx_http_dynamo_rl_admin_header_filter(ngx_http_request_t *r)
{
    ngx_int_t                  rc;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    static u_char  body[] = "{\"error\":\"upgrade_refused\",\"message\":"
                            "\"the worker answered 101 Switching Protocols; "
                            "the admin plane never upgrades\"}\n";

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    if (ctx == NULL || !ctx->admin_done || ctx->admin_decided) {
        return ngx_http_next_header_filter(r);
    }

    /* a worker's redirect names its own address: never passed on */

    ngx_http_dynamo_rl_clear_urls(r);

    if (r->headers_out.status == NGX_HTTP_SWITCHING_PROTOCOLS) {

        /*
         * the admin plane never upgrades: a worker's 101 becomes a JSON
         * 502, and header_only then ends the upstream request at once
         */

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "dynamo rl admin: instance \"%V\" answered %V with "
                      "101 Switching Protocols, refused",
                      &ctx->instance_id, &ctx->engine_path);

        ngx_http_dynamo_rl_admin_headers_clear(r);

        if (r->upstream != NULL) {
            r->upstream->upgrade = 0;
        }

        r->headers_out.status = NGX_HTTP_BAD_GATEWAY;
        r->headers_out.status_line.len = 0;
        r->headers_out.content_length_n = sizeof(body) - 1;

        ngx_str_set(&r->headers_out.content_type, "application/json");
        r->headers_out.content_type_len = r->headers_out.content_type.len;
        r->headers_out.content_type_lowcase = NULL;

        r->keepalive = 0;

        ctx->admin_decided = 1;
        ctx->admin_error = 1;

        rc = ngx_http_next_header_filter(r);

        if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
            return rc;
        }

        rc = ngx_http_dynamo_rl_send_body(r, ngx_http_next_body_filter,
                                          body, sizeof(body) - 1);

        /* the worker's stream after its 101 is never read: header_only */

        r->header_only = 1;

        return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
    }

    if (r->headers_out.status < NGX_HTTP_OK
        || r->headers_out.status >= NGX_HTTP_SPECIAL_RESPONSE)
    {
        ctx->admin_decided = 1;
        ctx->admin_error = 1;

        return ngx_http_next_header_filter(r);
    }

    if (r->header_only) {
        ctx->admin_decided = 1;

        return ngx_http_next_header_filter(r);
    }

    /* a 2xx without a body is not the JSON that every route answers */

    if (r->headers_out.content_length_n == 0) {
        ctx->admin_decided = 1;
        ctx->admin_error = 1;
        ctx->admin_why = "the body is empty, not JSON";

        return ngx_http_next_header_filter(r);
    }

    ctx->admin_inspect = 1;

    return ngx_http_next_header_filter(r);
}


/* none of the worker's headers goes with the 502 that replaces its 101 */

static void
ngx_http_dynamo_rl_admin_headers_clear(ngx_http_request_t *r)
{
    ngx_table_elt_t                 *h;
    ngx_http_dynamo_rl_list_iter_t   it;

    for (h = ngx_http_dynamo_rl_list_first(&r->headers_out.headers, &it);
         h != NULL;
         h = ngx_http_dynamo_rl_list_next(&it))
    {
        h->hash = 0;
    }

    r->headers_out.content_type.len = 0;
    r->headers_out.content_type.data = NULL;
    r->headers_out.content_length = NULL;
}


static ngx_int_t
ngx_http_dynamo_rl_admin_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    u_char                    *p;
    size_t                     n, size;
    ngx_chain_t               *cl;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    if (r != r->main || in == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    if (ctx == NULL || !ctx->admin_inspect || ctx->admin_decided) {
        return ngx_http_next_body_filter(r, in);
    }

    for (cl = in; cl; cl = cl->next) {

        if (!ctx->admin_overflow && ngx_buf_in_memory(cl->buf)) {
            n = cl->buf->last - cl->buf->pos;

            if (ctx->admin_len + n > NGX_HTTP_DYNAMO_RL_ADMIN_BODY) {
                ctx->admin_overflow = 1;

            } else if (n) {
                size = ctx->admin_len + n;

                p = ngx_pnalloc(r->pool, size);
                if (p == NULL) {
                    return NGX_ERROR;
                }

                if (ctx->admin_len) {
                    ngx_memcpy(p, ctx->admin_body, ctx->admin_len);
                }

                ngx_memcpy(p + ctx->admin_len, cl->buf->pos, n);

                ctx->admin_body = p;
                ctx->admin_len = size;
            }

        } else if (!ngx_buf_in_memory(cl->buf) && ngx_buf_size(cl->buf)) {
            /* a body in a temporary file is not small */
            ctx->admin_overflow = 1;
        }

        if (cl->buf->last_buf) {
            ctx->admin_decided = 1;
            ctx->admin_error = !ctx->admin_overflow
                               && ngx_http_dynamo_rl_json_admin_error(
                                      ctx->admin_body ? ctx->admin_body
                                                      : (u_char *) "",
                                      ctx->admin_len, &ctx->admin_why)
                                  == NGX_OK;
        }
    }

    return ngx_http_next_body_filter(r, in);
}


/* at the log phase: a call forwarded without a complete answer failed */

void
ngx_http_dynamo_rl_admin_finish(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    if (!ctx->admin_done || ctx->deny_reason.len) {
        return;
    }

    if (!ctx->admin_decided || r->connection->error) {
        ctx->admin_error = 1;
    }

    if (ctx->admin_error) {
        ngx_str_set(&ctx->admin_result, "error");
        ngx_str_set(&ctx->outcome, "error");

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "dynamo rl admin: instance \"%V\" answered %V with "
                      "an error, status %ui%s%s", &ctx->instance_id,
                      &ctx->engine_path, r->headers_out.status,
                      ctx->admin_why ? ", " : "",
                      ctx->admin_why ? ctx->admin_why : "");

    } else {
        ngx_str_set(&ctx->admin_result, "ok");
        ngx_str_set(&ctx->outcome, "ok");
    }
}


char *
ngx_http_dynamo_rl_admin_routes(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_dynamo_rl_loc_conf_t *drlcf = conf;

    ngx_str_t   *value, *route;
    ngx_uint_t   i;

    if (drlcf->admin_routes != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    /* a caller's routes, evaluated per request: ngx_http_dynamo_rl_scope.c */

    if (ngx_http_dynamo_rl_scope_variables(cf)) {
        drlcf->admin_routes = NULL;
        return ngx_http_dynamo_rl_scope_compile(cf, &drlcf->routes_value);
    }

    drlcf->admin_routes = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                           sizeof(ngx_str_t));
    if (drlcf->admin_routes == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_dynamo_rl_route_valid(value[i].data, value[i].len)
            != NGX_OK)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid route \"%V\"", &value[i]);
            return NGX_CONF_ERROR;
        }

        route = ngx_array_push(drlcf->admin_routes);
        if (route == NULL) {
            return NGX_CONF_ERROR;
        }

        *route = value[i];
    }

    return NGX_CONF_OK;
}
