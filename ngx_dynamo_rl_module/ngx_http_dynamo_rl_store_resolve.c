
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_store_resolve.h"


/*
 * One resolution at a time per worker process: the store has one
 * connection, and a connect waits for its address.  Its context is the
 * resolver's own (ngx_resolve_start()); its answer may come at once, from
 * the resolver's cache, before ngx_resolve_name() returns, and the
 * handler copes with either.  The timer of the context is cancelable: a
 * worker that shuts down does not wait for a resolver that does not
 * answer, and _cancel() frees the context at exit.
 */


#define NGX_HTTP_DYNAMO_RL_STORE_RESOLVE_TIMEOUT  30000


/* a host of the URL: an address, or a name (addr.sockaddr NULL) */

typedef struct {
    ngx_addr_t                          addr;
    ngx_str_t                           host;
    in_port_t                           port;
    in_port_t                           default_port;
    ngx_str_t                           text;      /* as written */
    u_char                             *file;
    ngx_uint_t                          line;

    /* per worker process: the next of the name's addresses */
    ngx_uint_t                          next;
} ngx_http_dynamo_rl_store_host_t;


struct ngx_http_dynamo_rl_store_resolve_s {
    /* configuration */
    ngx_str_t                           url;       /* the store's */
    ngx_array_t                         hosts;
    ngx_uint_t                          names;
    ngx_http_core_loc_conf_t           *clcf;      /* http{}'s */
    ngx_resolver_t                     *resolver;  /* NULL: resolved once */
    ngx_msec_t                          timeout;

    /* per worker process: the resolution under way */
    ngx_resolver_ctx_t                 *ctx;
    ngx_http_dynamo_rl_store_host_t    *host;
    ngx_http_dynamo_rl_store_resolved_pt  handler;
    void                               *data;

    ngx_addr_t                          addr;
    ngx_sockaddr_t                      sockaddr;
    u_char                              text[NGX_SOCKADDR_STRLEN];
    u_char                              cause[256];
};


static void ngx_http_dynamo_rl_store_resolve_handler(ngx_resolver_ctx_t *ctx);
static void ngx_http_dynamo_rl_store_resolve_fail(
    ngx_http_dynamo_rl_store_resolve_t *res, const char *why);


ngx_http_dynamo_rl_store_resolve_t *
ngx_http_dynamo_rl_store_resolve_create(ngx_conf_t *cf, ngx_str_t *url)
{
    ngx_http_dynamo_rl_store_resolve_t  *res;

    res = ngx_pcalloc(cf->pool, sizeof(ngx_http_dynamo_rl_store_resolve_t));
    if (res == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     res->names = 0;
     *     res->resolver = NULL;
     *     res->ctx = NULL;
     */

    if (ngx_array_init(&res->hosts, cf->pool, 2,
                       sizeof(ngx_http_dynamo_rl_store_host_t))
        != NGX_OK)
    {
        return NULL;
    }

    res->url = *url;

    /* the store is read at the http level: its "resolver" is http{}'s */

    res->clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    return res;
}


/*
 * a host of the URL, parsed by ngx_parse_url() with "no_resolve": its
 * addresses, or the name, for _conf() to decide
 */

ngx_int_t
ngx_http_dynamo_rl_store_resolve_add(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_resolve_t *res, ngx_url_t *u)
{
    u_char                           *p;
    ngx_uint_t                        i;
    ngx_http_dynamo_rl_store_host_t  *h;

    for (i = 0; i < u->naddrs; i++) {
        h = ngx_array_push(&res->hosts);
        if (h == NULL) {
            return NGX_ERROR;
        }

        ngx_memzero(h, sizeof(ngx_http_dynamo_rl_store_host_t));
        h->addr = u->addrs[i];
    }

    if (u->naddrs) {
        return NGX_OK;
    }

    h = ngx_array_push(&res->hosts);
    if (h == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(h, sizeof(ngx_http_dynamo_rl_store_host_t));

    /* the name, for the logs: "host:port" */

    p = ngx_pnalloc(cf->pool, u->host.len + sizeof(":65535") - 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    h->addr.name.data = p;
    h->addr.name.len = ngx_sprintf(p, "%V:%d", &u->host, (int) u->port) - p;

    h->host = u->host;
    h->port = u->port;
    h->default_port = u->default_port;
    h->text = u->url;
    h->file = cf->conf_file->file.name.data;
    h->line = cf->conf_file->line;

    res->names++;

    return NGX_OK;
}


/*
 * postconfiguration: with a "resolver" in http{}, names are resolved on
 * every connect; without one (or with the empty one nginx makes for its
 * servers), they are resolved now, once, as they always were: their
 * addresses stay until a reload
 */

ngx_int_t
ngx_http_dynamo_rl_store_resolve_conf(ngx_conf_t *cf,
    ngx_http_dynamo_rl_store_resolve_t *res)
{
    ngx_url_t                         u;
    ngx_uint_t                        i, j;
    ngx_array_t                       hosts;
    ngx_resolver_t                   *r;
    ngx_http_dynamo_rl_store_host_t  *h, *nh;

    if (res == NULL || res->names == 0) {
        return NGX_OK;
    }

    r = res->clcf->resolver;

    if (r != NULL && r->connections.nelts > 0) {
        res->resolver = r;
        res->timeout = (res->clcf->resolver_timeout == NGX_CONF_UNSET_MSEC)
                       ? NGX_HTTP_DYNAMO_RL_STORE_RESOLVE_TIMEOUT
                       : res->clcf->resolver_timeout;
        return NGX_OK;
    }

    if (ngx_array_init(&hosts, cf->pool, res->hosts.nelts,
                       sizeof(ngx_http_dynamo_rl_store_host_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    h = res->hosts.elts;

    for (i = 0; i < res->hosts.nelts; i++) {

        if (h[i].addr.sockaddr != NULL) {
            nh = ngx_array_push(&hosts);
            if (nh == NULL) {
                return NGX_ERROR;
            }

            *nh = h[i];
            continue;
        }

        ngx_memzero(&u, sizeof(ngx_url_t));

        u.url = h[i].text;
        u.default_port = h[i].default_port;

        if (ngx_parse_url(cf->pool, &u) != NGX_OK || u.naddrs == 0) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "%s in the store URL \"%V\" in %s:%ui",
                          u.err ? u.err : "host not found", &res->url,
                          h[i].file, h[i].line);
            return NGX_ERROR;
        }

        for (j = 0; j < u.naddrs; j++) {
            nh = ngx_array_push(&hosts);
            if (nh == NULL) {
                return NGX_ERROR;
            }

            ngx_memzero(nh, sizeof(ngx_http_dynamo_rl_store_host_t));
            nh->addr = u.addrs[j];
        }
    }

    res->hosts = hosts;
    res->names = 0;

    return NGX_OK;
}


/*
 * the address of connect "n": NGX_OK and "*addr" an address; NGX_AGAIN
 * for a name, the handler called with its address once it is resolved,
 * or the reason it is not (perhaps already, before this returns)
 */

ngx_int_t
ngx_http_dynamo_rl_store_resolve_peer(ngx_http_dynamo_rl_store_resolve_t *res,
    ngx_uint_t n, ngx_addr_t **addr,
    ngx_http_dynamo_rl_store_resolved_pt handler, void *data)
{
    ngx_resolver_ctx_t               *ctx;
    ngx_http_dynamo_rl_store_host_t  *h;

    h = res->hosts.elts;
    h = &h[n % res->hosts.nelts];

    *addr = &h->addr;

    if (h->addr.sockaddr != NULL) {
        return NGX_OK;
    }

    ngx_http_dynamo_rl_store_resolve_cancel(res);

    res->host = h;
    res->handler = handler;
    res->data = data;

    ctx = ngx_resolve_start(res->resolver, NULL);

    if (ctx == NULL || ctx == NGX_NO_RESOLVER) {
        ngx_http_dynamo_rl_store_resolve_fail(res, "the resolver failed");
        return NGX_AGAIN;
    }

    ctx->name = h->host;
    ctx->handler = ngx_http_dynamo_rl_store_resolve_handler;
    ctx->data = res;
    ctx->timeout = res->timeout;
    ctx->cancelable = 1;

    res->ctx = ctx;

    if (ngx_resolve_name(ctx) != NGX_OK) {
        /* the context is freed */
        res->ctx = NULL;
        ngx_http_dynamo_rl_store_resolve_fail(res, "the resolver failed");
    }

    return NGX_AGAIN;
}


void
ngx_http_dynamo_rl_store_resolve_cancel(ngx_http_dynamo_rl_store_resolve_t *res)
{
    if (res != NULL && res->ctx != NULL) {
        ngx_resolve_name_done(res->ctx);
        res->ctx = NULL;
    }
}


static void
ngx_http_dynamo_rl_store_resolve_handler(ngx_resolver_ctx_t *ctx)
{
    char                                *why;
    ngx_uint_t                           i;
    ngx_http_dynamo_rl_store_host_t     *h;
    ngx_http_dynamo_rl_store_resolve_t  *res;

    res = ctx->data;
    h = res->host;

    res->ctx = NULL;

    if (ctx->state || ctx->naddrs == 0) {
        why = ngx_resolver_strerror(ctx->state ? ctx->state
                                               : NGX_RESOLVE_NXDOMAIN);
        ngx_resolve_name_done(ctx);

        ngx_http_dynamo_rl_store_resolve_fail(res, why);
        return;
    }

    /* the name's addresses in turn, one per connect */

    i = h->next++ % ctx->naddrs;

    ngx_memcpy(&res->sockaddr, ctx->addrs[i].sockaddr, ctx->addrs[i].socklen);
    ngx_inet_set_port(&res->sockaddr.sockaddr, h->port);

    res->addr.sockaddr = &res->sockaddr.sockaddr;
    res->addr.socklen = ctx->addrs[i].socklen;
    res->addr.name.data = res->text;
    res->addr.name.len = ngx_sock_ntop(res->addr.sockaddr, res->addr.socklen,
                                       res->text, NGX_SOCKADDR_STRLEN, 1);

    ngx_log_debug3(NGX_LOG_DEBUG_EVENT, ngx_cycle->log, 0,
                   "dynamo rl store: \"%V\" resolved to %V (of %ui)",
                   &h->host, &res->addr.name, ctx->naddrs);

    ngx_resolve_name_done(ctx);

    res->handler(res->data, &res->addr, NULL);
}


static void
ngx_http_dynamo_rl_store_resolve_fail(ngx_http_dynamo_rl_store_resolve_t *res,
    const char *why)
{
    u_char  *p;

    p = ngx_snprintf(res->cause, sizeof(res->cause) - 1,
                     "\"%V\" could not be resolved: %s", &res->host->host,
                     why);
    *p = '\0';

    res->handler(res->data, &res->host->addr, (char *) res->cause);
}
