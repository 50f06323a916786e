
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_scope.h"


/*
 * A caller held to its own scope: "dynamo_rl_namespace" and
 * "dynamo_rl_admin_routes" with variables, evaluated per request (a map
 * of $ssl_client_s_dn, say).  The value is in the directive's own
 * grammar; an empty value, or one that does not parse, denies with 403
 * "caller_scope" and never widens a scope.  Each distinct value is
 * parsed once per worker process, and which workers of the process's
 * snapshot index it covers is worked out once per snapshot.
 */


#define NGX_HTTP_DYNAMO_RL_SCOPES     8
#define NGX_HTTP_DYNAMO_RL_SCOPE_MAX  1024


typedef struct {
    u_char                         *value;       /* NULL: a free entry */
    size_t                          len;
    ngx_uint_t                      valid;
    ngx_uint_t                      mode;
    ngx_str_t                       scope;       /* NS, NS-S or P */

    /* in[i]: workers[i] of the process's index is in scope */
    ngx_http_dynamo_rl_index_t     *index;
    ngx_uint_t                      generation;
    u_char                         *in;
} ngx_http_dynamo_rl_scope_entry_t;


typedef struct {
    ngx_http_dynamo_rl_scope_entry_t  entries[NGX_HTTP_DYNAMO_RL_SCOPES];
    ngx_uint_t                        next;
} ngx_http_dynamo_rl_scopes_t;


static ngx_http_dynamo_rl_scope_entry_t *ngx_http_dynamo_rl_scope_lookup(
    ngx_http_request_t *r, ngx_str_t *value);
static void ngx_http_dynamo_rl_scope_free(
    ngx_http_dynamo_rl_scope_entry_t *e);
static void ngx_http_dynamo_rl_scope_cleanup(void *data);
static ngx_int_t ngx_http_dynamo_rl_scope_match(ngx_uint_t mode,
    ngx_str_t *scope, ngx_str_t *ns);
static ngx_int_t ngx_http_dynamo_rl_scope_denied(ngx_http_request_t *r,
    char *directive, ngx_str_t *value);


/* whether a directive's arguments name variables: a caller's scope */

ngx_uint_t
ngx_http_dynamo_rl_scope_variables(ngx_conf_t *cf)
{
    ngx_str_t   *value;
    ngx_uint_t   i;

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {
        if (ngx_http_script_variables_count(&value[i])) {
            return 1;
        }
    }

    return 0;
}


/*
 * the directive's arguments, joined by spaces, as one complex value:
 * "dynamo_rl_namespace exact=$team suffix=$env" evaluates to
 * "exact=a suffix=b", parsed per request
 */

char *
ngx_http_dynamo_rl_scope_compile(ngx_conf_t *cf,
    ngx_http_complex_value_t **cv)
{
    u_char                            *p;
    size_t                             len;
    ngx_str_t                         *value, s;
    ngx_uint_t                         i;
    ngx_http_compile_complex_value_t   ccv;

    value = cf->args->elts;

    len = 0;

    for (i = 1; i < cf->args->nelts; i++) {
        len += value[i].len + 1;
    }

    p = ngx_pnalloc(cf->pool, len);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    s.data = p;

    for (i = 1; i < cf->args->nelts; i++) {
        if (i > 1) {
            *p++ = ' ';
        }

        p = ngx_cpymem(p, value[i].data, value[i].len);
    }

    s.len = p - s.data;

    *cv = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (*cv == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &s;
    ccv.complex_value = *cv;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * NGX_OK: the caller's scope, if variables give it, is in ctx;
 * NGX_DECLINED: it is empty or does not parse, logged once here, and the
 * caller is to be denied with 403 "caller_scope"
 */

ngx_int_t
ngx_http_dynamo_rl_scope_eval(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    ngx_uint_t                         n;
    ngx_http_dynamo_rl_loc_conf_t     *drlcf;
    ngx_http_dynamo_rl_scope_entry_t  *e;

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (drlcf->ns_mode == NGX_HTTP_DYNAMO_RL_NS_VALUE) {

        if (ngx_http_complex_value(r, drlcf->ns_value, &ctx->scope_value)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (ctx->scope_value.len == 0
            || ctx->scope_value.len > NGX_HTTP_DYNAMO_RL_SCOPE_MAX)
        {
            return ngx_http_dynamo_rl_scope_denied(r, "dynamo_rl_namespace",
                                                   &ctx->scope_value);
        }

        e = ngx_http_dynamo_rl_scope_lookup(r, &ctx->scope_value);
        if (e == NULL) {
            return NGX_ERROR;
        }

        if (!e->valid) {
            return ngx_http_dynamo_rl_scope_denied(r, "dynamo_rl_namespace",
                                                   &ctx->scope_value);
        }
    }

    if (drlcf->routes_value != NULL) {

        if (ngx_http_complex_value(r, drlcf->routes_value,
                                   &ctx->routes_value)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (ngx_http_dynamo_rl_parse_routes(ctx->routes_value.data,
                                            ctx->routes_value.len, &n)
            != NGX_OK)
        {
            return ngx_http_dynamo_rl_scope_denied(r,
                                                   "dynamo_rl_admin_routes",
                                                   &ctx->routes_value);
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_scope_denied(ngx_http_request_t *r, char *directive,
    ngx_str_t *value)
{
    u_char                          buf[128], *last;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (value->len == 0) {
        ngx_log_error(drlcf->log_level, r->connection->log, 0,
                      "dynamo rl: caller scope denied: \"%s\" is empty "
                      "for this caller", directive);
        return NGX_DECLINED;
    }

    /* a map's value may hold whatever a certificate's subject held */

    last = ngx_http_dynamo_rl_escape_log(buf, buf + sizeof(buf), value->data,
                                         ngx_min(value->len, 96));

    ngx_log_error(drlcf->log_level, r->connection->log, 0,
                  "dynamo rl: caller scope denied: \"%s\" is \"%*s\"%s, "
                  "which does not parse", directive, last - buf, buf,
                  value->len > 96 ? "..." : "");

    return NGX_DECLINED;
}


/* the caller's namespace scope is "any" */

ngx_int_t
ngx_http_dynamo_rl_scope_any(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    ngx_http_dynamo_rl_loc_conf_t     *drlcf;
    ngx_http_dynamo_rl_scope_entry_t  *e;

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (drlcf->ns_mode != NGX_HTTP_DYNAMO_RL_NS_VALUE) {
        return drlcf->ns_mode == NGX_HTTP_DYNAMO_RL_NS_ANY
               ? NGX_OK : NGX_DECLINED;
    }

    if (ctx == NULL || ctx->scope_value.len == 0) {
        return NGX_DECLINED;
    }

    e = ngx_http_dynamo_rl_scope_lookup(r, &ctx->scope_value);

    if (e != NULL && e->valid && e->mode == NGX_HTTP_DYNAMO_RL_NS_ANY) {
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/* NGX_OK: worker "w" of "index" is in the caller's namespace scope */

ngx_int_t
ngx_http_dynamo_rl_scope_worker(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_index_t *index,
    ngx_http_dynamo_rl_worker_t *w)
{
    ngx_str_t                         *ns;
    ngx_uint_t                         i;
    ngx_http_dynamo_rl_loc_conf_t     *drlcf;
    ngx_http_dynamo_rl_scope_entry_t  *e;

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (drlcf->ns_mode != NGX_HTTP_DYNAMO_RL_NS_VALUE) {
        return ngx_http_dynamo_rl_scope_match(drlcf->ns_mode,
                                              &drlcf->ns_scope,
                                              &w->namespace);
    }

    /* fail closed: ngx_http_dynamo_rl_scope_eval() allowed none */

    if (ctx == NULL || ctx->scope_value.len == 0) {
        return NGX_DECLINED;
    }

    e = ngx_http_dynamo_rl_scope_lookup(r, &ctx->scope_value);

    if (e == NULL || !e->valid) {
        return NGX_DECLINED;
    }

    /* an index no process installed may be freed and its address reused */

    if (index == NULL || index->serial == 0 || index->nworkers == 0) {
        return ngx_http_dynamo_rl_scope_match(e->mode, &e->scope,
                                              &w->namespace);
    }

    /* once per value and snapshot, then a byte per worker */

    if (e->in == NULL || e->index != index || e->generation != index->serial)
    {
        if (e->in != NULL) {
            ngx_free(e->in);
            e->in = NULL;
        }

        e->in = ngx_alloc(index->nworkers, r->connection->log);
        if (e->in == NULL) {
            return ngx_http_dynamo_rl_scope_match(e->mode, &e->scope,
                                                  &w->namespace);
        }

        for (i = 0; i < index->nworkers; i++) {
            ns = &index->workers[i].namespace;
            e->in[i] = (ngx_http_dynamo_rl_scope_match(e->mode, &e->scope, ns)
                        == NGX_OK);
        }

        e->index = index;
        e->generation = index->serial;
    }

    i = w - index->workers;

    if (i >= index->nworkers) {
        return NGX_DECLINED;
    }

    return e->in[i] ? NGX_OK : NGX_DECLINED;
}


/* NGX_OK: the caller may call "route", if its worker advertises it */

ngx_int_t
ngx_http_dynamo_rl_scope_route(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_str_t *route)
{
    ngx_str_t                      *routes;
    ngx_uint_t                      i;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (drlcf->routes_value != NULL) {
        if (ctx->routes_value.len == 0) {
            return NGX_DECLINED;
        }

        return ngx_http_dynamo_rl_routes_find(ctx->routes_value.data,
                                              ctx->routes_value.len, route);
    }

    if (drlcf->admin_routes == NULL) {
        return NGX_OK;
    }

    routes = drlcf->admin_routes->elts;

    for (i = 0; i < drlcf->admin_routes->nelts; i++) {
        if (routes[i].len == route->len
            && ngx_memcmp(routes[i].data, route->data, route->len) == 0)
        {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


/*
 * ACCESS phase, discovery plane: a caller whose scope comes from
 * variables and is empty or invalid sees nothing of the fleet
 */

ngx_int_t
ngx_http_dynamo_rl_scope_handler(ngx_http_request_t *r)
{
    ngx_int_t                       rc;
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    if (r != r->main) {
        return NGX_DECLINED;
    }

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (drlcf->plane != NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY
        || drlcf->ns_mode != NGX_HTTP_DYNAMO_RL_NS_VALUE)
    {
        return NGX_DECLINED;
    }

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx == NULL || ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY) {
        return NGX_DECLINED;
    }

    rc = ngx_http_dynamo_rl_scope_eval(r, ctx);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        return ngx_http_dynamo_rl_deny(r, NGX_HTTP_FORBIDDEN, "caller_scope",
                                       "the caller's namespace scope is "
                                       "empty or invalid");
    }

    return NGX_DECLINED;
}


static ngx_int_t
ngx_http_dynamo_rl_scope_match(ngx_uint_t mode, ngx_str_t *scope,
    ngx_str_t *ns)
{
    /* a worker without a namespace belongs to no scope but "any" */

    if (ns->data == NULL && mode != NGX_HTTP_DYNAMO_RL_NS_ANY) {
        return NGX_DECLINED;
    }

    return ngx_http_dynamo_rl_namespace_match(mode, scope, ns->data,
                                              ns->len);
}


/* the entry of a value, parsed on first sight; NULL only without memory */

static ngx_http_dynamo_rl_scope_entry_t *
ngx_http_dynamo_rl_scope_lookup(ngx_http_request_t *r, ngx_str_t *value)
{
    u_char                            *p;
    ngx_str_t                          name, suffix;
    ngx_uint_t                         i, mode;
    ngx_pool_cleanup_t                *cln;
    ngx_http_dynamo_rl_scopes_t       *sc;
    ngx_http_dynamo_rl_main_conf_t    *drmcf;
    ngx_http_dynamo_rl_scope_entry_t  *e;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    sc = drmcf->scopes;

    if (sc == NULL) {
        sc = ngx_pcalloc(ngx_cycle->pool, sizeof(ngx_http_dynamo_rl_scopes_t));
        if (sc == NULL) {
            return NULL;
        }

        cln = ngx_pool_cleanup_add(ngx_cycle->pool, 0);
        if (cln == NULL) {
            return NULL;
        }

        cln->handler = ngx_http_dynamo_rl_scope_cleanup;
        cln->data = sc;

        drmcf->scopes = sc;
    }

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SCOPES; i++) {
        e = &sc->entries[i];

        if (e->value != NULL && e->len == value->len
            && ngx_memcmp(e->value, value->data, value->len) == 0)
        {
            return e;
        }
    }

    e = &sc->entries[sc->next++ % NGX_HTTP_DYNAMO_RL_SCOPES];

    ngx_http_dynamo_rl_scope_free(e);

    /* the value, then room for "NS-S", which is never longer */

    p = ngx_alloc(2 * value->len + 1, r->connection->log);
    if (p == NULL) {
        return NULL;
    }

    ngx_memcpy(p, value->data, value->len);

    e->value = p;
    e->len = value->len;
    e->valid = 0;

    if (ngx_http_dynamo_rl_parse_scope(p, value->len, &mode, &name, &suffix)
        == NGX_OK)
    {
        e->valid = 1;
        e->mode = mode;
        e->scope = name;

        if (suffix.len) {
            e->scope.data = p + value->len;
            p = ngx_cpymem(e->scope.data, name.data, name.len);
            *p++ = '-';
            p = ngx_cpymem(p, suffix.data, suffix.len);
            e->scope.len = p - e->scope.data;
        }
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl scope: \"%V\" parsed, valid: %ui",
                   value, e->valid);

    return e;
}


static void
ngx_http_dynamo_rl_scope_free(ngx_http_dynamo_rl_scope_entry_t *e)
{
    if (e->value != NULL) {
        ngx_free(e->value);
        e->value = NULL;
    }

    if (e->in != NULL) {
        ngx_free(e->in);
        e->in = NULL;
    }

    e->index = NULL;
}


static void
ngx_http_dynamo_rl_scope_cleanup(void *data)
{
    ngx_http_dynamo_rl_scopes_t *sc = data;

    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SCOPES; i++) {
        ngx_http_dynamo_rl_scope_free(&sc->entries[i]);
    }
}
