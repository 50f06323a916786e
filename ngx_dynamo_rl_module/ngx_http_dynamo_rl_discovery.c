
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_scope.h"
#include "ngx_http_dynamo_rl_discovery.h"

#if (NGX_LINUX && defined __GLIBC__)
#include <malloc.h>
#endif


/*
 * a refresh subrequest's state, reached through its post_subrequest, which
 * internal redirects and error_page keep, unlike the subrequest's r->ctx
 */

typedef struct {
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_ctx_t       *doc;
} ngx_http_dynamo_rl_refresh_t;


static ngx_int_t ngx_http_dynamo_rl_namespace_keep_env(ngx_conf_t *cf);
static ngx_int_t ngx_http_dynamo_rl_refresh(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf);
static ngx_int_t ngx_http_dynamo_rl_refresh_done(ngx_http_request_t *r,
    void *data, ngx_int_t rc);
static ngx_int_t ngx_http_dynamo_rl_source_name(ngx_http_request_t *r,
    ngx_str_t *location, ngx_str_t *name);
static ngx_http_dynamo_rl_refresh_t *ngx_http_dynamo_rl_refresh_of(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_discovery_upstream(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
static void ngx_http_dynamo_rl_discovery_finalize(ngx_http_request_t *r,
    ngx_int_t rc);
static void ngx_http_dynamo_rl_flight_end(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_snap_t *snap, ngx_uint_t abandoned);
static void ngx_http_dynamo_rl_wait_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_build(ngx_http_request_t *r, u_char *doc,
    size_t len, ngx_pool_t **pool, ngx_http_dynamo_rl_index_t **index,
    ngx_str_t *reason);
static ngx_int_t ngx_http_dynamo_rl_source_of(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_loc_conf_t *drlcf, ngx_uint_t *source);
static uint32_t ngx_http_dynamo_rl_server_key(ngx_conf_t *cf,
    ngx_http_core_srv_conf_t *cscf);
static ngx_int_t ngx_http_dynamo_rl_store_source(ngx_http_request_t *r,
    ngx_http_dynamo_rl_zone_t *zone, ngx_http_dynamo_rl_loc_conf_t *drlcf,
    ngx_uint_t *source);
static ngx_int_t ngx_http_dynamo_rl_snapshot_store(ngx_log_t *log,
    ngx_http_dynamo_rl_zone_t *zone, ngx_http_dynamo_rl_snap_t *sh,
    u_char *doc, size_t len, ngx_uint_t source,
    ngx_http_dynamo_rl_index_t *index, ngx_uint_t *generation);
static void ngx_http_dynamo_rl_install(ngx_http_dynamo_rl_main_conf_t *drmcf,
    ngx_uint_t source, ngx_pool_t *pool, ngx_http_dynamo_rl_index_t *index,
    ngx_uint_t generation);
static ngx_http_dynamo_rl_index_t *ngx_http_dynamo_rl_local_index(
    ngx_http_request_t *r, ngx_http_dynamo_rl_zone_t *zone,
    ngx_uint_t source);
static void ngx_http_dynamo_rl_bad_routes(ngx_http_request_t *r,
    ngx_http_dynamo_rl_index_t *index);
static void *ngx_http_dynamo_rl_palloc(void *data, size_t size);
static ngx_int_t ngx_http_dynamo_rl_discovery_header_filter(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_discovery_body_filter(
    ngx_http_request_t *r, ngx_chain_t *in);
static ngx_int_t ngx_http_dynamo_rl_discovery_append(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_buf_t *b, size_t max);
static void ngx_http_dynamo_rl_discovery_discard(ngx_buf_t *b);
static ngx_int_t ngx_http_dynamo_rl_discovery_send(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
static void ngx_http_dynamo_rl_discovery_rewritten(ngx_http_request_t *r);
static ngx_uint_t ngx_http_dynamo_rl_admin_eligible(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_index_t *index,
    ngx_http_dynamo_rl_worker_t *w);
static ngx_int_t ngx_http_dynamo_rl_discovery_invalid(ngx_http_request_t *r,
    ngx_str_t *reason);
static ngx_int_t ngx_http_dynamo_rl_discovery_output(ngx_http_request_t *r,
    ngx_uint_t status, u_char *p, size_t len);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


char *
ngx_http_dynamo_rl_discovery(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_dynamo_rl_loc_conf_t *drlcf = conf;

    ssize_t                          size;
    ngx_str_t                       *value, s;
    ngx_int_t                        valid;
    ngx_uint_t                       i;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    if (drlcf->discovery.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0 || value[1].data[0] != '/') {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid discovery location \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    if (value[1].len > NGX_HTTP_DYNAMO_RL_SOURCE_NAME) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "discovery location \"%V\" is longer than "
                           "%d bytes", &value[1],
                           NGX_HTTP_DYNAMO_RL_SOURCE_NAME);
        return NGX_CONF_ERROR;
    }

    drlcf->discovery = value[1];

    /*
     * the URI is resolved in the server of each location that uses it:
     * its source is known once the configuration is merged (see
     * discovery_source)
     */

    drmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_dynamo_rl_module);
    drmcf->named++;

    /* a discovery-plane location stores only into a source named here */

    drlcf->source_named = 1;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "valid=", 6) == 0) {

            s.len = value[i].len - 6;
            s.data = value[i].data + 6;

            valid = ngx_parse_time(&s, 0);
            if (valid == NGX_ERROR) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid \"valid\" value \"%V\"",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }

            drlcf->discovery_valid = (ngx_msec_t) valid;

            continue;
        }

        if (ngx_strncmp(value[i].data, "max_size=", 9) == 0) {

            s.len = value[i].len - 9;
            s.data = value[i].data + 9;

            size = ngx_parse_size(&s);
            if (size == NGX_ERROR || size < 64) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid \"max_size\" value \"%V\"",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }

            drlcf->discovery_max_size = (size_t) size;

            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * dynamo_rl_admin_url URL | off: the discovery answer's system_urls become
 * URL followed by each worker's instance id; a URL without variables is
 * checked here, one with them on every answer
 */

char *
ngx_http_dynamo_rl_admin_url(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_dynamo_rl_loc_conf_t *drlcf = conf;

    ngx_str_t                         *value;
    ngx_http_compile_complex_value_t   ccv;

    if (drlcf->admin_url != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 3 && ngx_strncmp(value[1].data, "off", 3) == 0) {
        drlcf->admin_url = NULL;
        return NGX_CONF_OK;
    }

    drlcf->admin_url = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (drlcf->admin_url == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = drlcf->admin_url;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (drlcf->admin_url->lengths == NULL
        && ngx_http_dynamo_rl_admin_url_valid(value[1].data, value[1].len)
           != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"dynamo_rl_admin_url\" must be an http or "
                           "https URL without a query, a fragment or "
                           "spaces, as in \"https://gateway:9090"
                           "/v1/rl/workers/\", not \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * dynamo_rl_namespace any | exact=NS [suffix=S] | prefix=P | env;
 * "env" follows the RL listener: DYN_NAMESPACE_PREFIX, then
 * DYN_NAMESPACE_WORKER_SUFFIX over DYN_NAMESPACE, where empty prefix and
 * suffix are absent, an empty namespace is the empty namespace and an
 * unset one is "dynamo"
 */

char *
ngx_http_dynamo_rl_namespace(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_dynamo_rl_loc_conf_t *drlcf = conf;

    u_char     *p;
    char       *env, *prefix, *suffix;
    ngx_str_t  *value, base, sfx;

    if (drlcf->ns_mode != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    /* a caller's scope, evaluated per request: ngx_http_dynamo_rl_scope.c */

    if (ngx_http_dynamo_rl_scope_variables(cf)) {
        drlcf->ns_mode = NGX_HTTP_DYNAMO_RL_NS_VALUE;
        return ngx_http_dynamo_rl_scope_compile(cf, &drlcf->ns_value);
    }

    ngx_str_null(&sfx);

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "any") == 0) {
        drlcf->ns_mode = NGX_HTTP_DYNAMO_RL_NS_ANY;
        return NGX_CONF_OK;
    }

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "env") == 0) {

        if (ngx_http_dynamo_rl_namespace_keep_env(cf) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        prefix = getenv("DYN_NAMESPACE_PREFIX");

        if (prefix != NULL && prefix[0] != '\0') {
            drlcf->ns_mode = NGX_HTTP_DYNAMO_RL_NS_PREFIX;
            drlcf->ns_scope.data = (u_char *) prefix;
            drlcf->ns_scope.len = ngx_strlen(prefix);
            goto copy;
        }

        env = getenv("DYN_NAMESPACE");

        if (env != NULL) {
            base.data = (u_char *) env;
            base.len = ngx_strlen(env);

        } else {
            ngx_str_set(&base, "dynamo");
        }

        suffix = getenv("DYN_NAMESPACE_WORKER_SUFFIX");

        if (suffix != NULL) {
            sfx.data = (u_char *) suffix;
            sfx.len = ngx_strlen(suffix);
        }

        goto exact;
    }

    if (cf->args->nelts == 2
        && ngx_strncmp(value[1].data, "prefix=", 7) == 0
        && value[1].len > 7)
    {
        drlcf->ns_mode = NGX_HTTP_DYNAMO_RL_NS_PREFIX;
        drlcf->ns_scope.data = value[1].data + 7;
        drlcf->ns_scope.len = value[1].len - 7;
        return NGX_CONF_OK;
    }

    if (ngx_strncmp(value[1].data, "exact=", 6) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    base.data = value[1].data + 6;
    base.len = value[1].len - 6;

    if (cf->args->nelts == 3) {
        if (ngx_strncmp(value[2].data, "suffix=", 7) != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\"", &value[2]);
            return NGX_CONF_ERROR;
        }

        sfx.data = value[2].data + 7;
        sfx.len = value[2].len - 7;
    }

exact:

    drlcf->ns_mode = NGX_HTTP_DYNAMO_RL_NS_EXACT;

    if (sfx.len == 0) {
        drlcf->ns_scope = base;
        goto copy;
    }

    drlcf->ns_scope.len = base.len + 1 + sfx.len;
    drlcf->ns_scope.data = ngx_pnalloc(cf->pool, drlcf->ns_scope.len);
    if (drlcf->ns_scope.data == NULL) {
        return NGX_CONF_ERROR;
    }

    p = ngx_cpymem(drlcf->ns_scope.data, base.data, base.len);
    *p++ = '-';
    ngx_memcpy(p, sfx.data, sfx.len);

    return NGX_CONF_OK;

copy:

    /* the environment may change after configuration */

    p = ngx_pnalloc(cf->pool, drlcf->ns_scope.len + 1);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memcpy(p, drlcf->ns_scope.data, drlcf->ns_scope.len);
    drlcf->ns_scope.data = p;

    return NGX_CONF_OK;
}


/*
 * the variables of "env" are kept in nginx's environment as if named by
 * "env" directives: a binary upgrade (USR2) starts the new master with
 * those alone, and it would otherwise read the default scope
 */

static ngx_int_t
ngx_http_dynamo_rl_namespace_keep_env(ngx_conf_t *cf)
{
    ngx_str_t        *var, *name;
    ngx_uint_t        i;
    ngx_core_conf_t  *ccf;

    static ngx_str_t  names[] = {
        ngx_string("DYN_NAMESPACE_PREFIX"),
        ngx_string("DYN_NAMESPACE_WORKER_SUFFIX"),
        ngx_string("DYN_NAMESPACE"),
        ngx_null_string
    };

    ccf = (ngx_core_conf_t *) ngx_get_conf(cf->cycle->conf_ctx,
                                           ngx_core_module);

    for (name = names; name->len; name++) {

        var = ccf->env.elts;

        for (i = 0; i < ccf->env.nelts; i++) {
            if (var[i].len >= name->len
                && ngx_strncmp(var[i].data, name->data, name->len) == 0
                && (var[i].len == name->len
                    || var[i].data[name->len] == '='))
            {
                break;
            }
        }

        if (i < ccf->env.nelts) {
            continue;
        }

        var = ngx_array_push(&ccf->env);
        if (var == NULL) {
            return NGX_ERROR;
        }

        *var = *name;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_dynamo_rl_in_scope(ngx_http_dynamo_rl_loc_conf_t *drlcf,
    ngx_str_t *ns)
{
    /* a worker without a namespace belongs to no scope but "any" */

    if (ns->data == NULL && drlcf->ns_mode != NGX_HTTP_DYNAMO_RL_NS_ANY) {
        return NGX_DECLINED;
    }

    /* a caller's scope is known only per request: ngx_http_dynamo_rl_scope.c */

    if (drlcf->ns_mode == NGX_HTTP_DYNAMO_RL_NS_VALUE) {
        return NGX_DECLINED;
    }

    return ngx_http_dynamo_rl_namespace_match(drlcf->ns_mode,
                                              &drlcf->ns_scope,
                                              ns->data, ns->len);
}


/*
 * NGX_OK: "index" is a snapshot no older than "valid"; NGX_AGAIN: a refresh
 * is running for this request or another one; NGX_DECLINED: no fresh
 * snapshot can be had, and an older one is never used in its place
 */

ngx_int_t
ngx_http_dynamo_rl_discovery_fresh(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_index_t **index)
{
    ngx_msec_t                       now;
    ngx_uint_t                       lead, source;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_snap_t       *sh;
    ngx_http_dynamo_rl_loc_conf_t   *drlcf;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);
    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    zone = drmcf->shm_zone->data;

    if (ctx->refresh == NGX_HTTP_DYNAMO_RL_REFRESH_FAILED
        || ngx_http_dynamo_rl_source_of(zone, drlcf, &source) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    /* this location's source: its snapshot, its refresh */

    sh = &zone->sh->snaps[zone->slot[source]];

    now = ngx_current_msec;
    lead = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /*
     * a snapshot stored since this request began to refresh or wait is
     * the one it asked for, however short "valid" is
     */

    if (sh->raw != NULL
        && (now - sh->fetched <= drlcf->discovery_valid
            || (ctx->refresh != NGX_HTTP_DYNAMO_RL_REFRESH_NONE
                && sh->generation != ctx->seen)))
    {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        goto fresh;
    }

    if (ctx->refresh == NGX_HTTP_DYNAMO_RL_REFRESH_DONE
        || (ctx->refresh == NGX_HTTP_DYNAMO_RL_REFRESH_WAITING
            && sh->flights != ctx->flights))
    {
        /* the flight this request ran or waited for stored nothing */

        ngx_shmtx_unlock(&zone->shpool->mutex);

        ctx->refresh = NGX_HTTP_DYNAMO_RL_REFRESH_FAILED;
        return NGX_DECLINED;
    }

    if (ctx->refresh == NGX_HTTP_DYNAMO_RL_REFRESH_NONE) {
        ctx->seen = sh->generation;
    }

    if (!sh->updating
        || (ngx_msec_int_t) (now - sh->deadline) > 0
        || (sh->updater != ngx_pid && kill(sh->updater, 0) == -1
            && ngx_errno == NGX_ESRCH))
    {
        sh->updating = 1;
        sh->updater = ngx_pid;
        sh->deadline = now + NGX_HTTP_DYNAMO_RL_FLIGHT_TIMEOUT;
        sh->refresh_begun = now;
        lead = 1;
    }

    ctx->flights = sh->flights;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (lead) {
        ctx->zone = zone;
        ctx->snap = sh;

        if (ngx_http_dynamo_rl_refresh(r, ctx, drlcf) != NGX_OK) {
            ngx_http_dynamo_rl_flight_end(zone, sh, 0);
            ctx->zone = NULL;
            ctx->refresh = NGX_HTTP_DYNAMO_RL_REFRESH_FAILED;
            return NGX_ERROR;
        }

        return NGX_AGAIN;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl discovery: waiting for flight %ui",
                   ctx->flights);

    ctx->refresh = NGX_HTTP_DYNAMO_RL_REFRESH_WAITING;

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_dynamo_rl_wait_handler;

    ngx_add_timer(r->connection->write, 10);

    return NGX_AGAIN;

fresh:

    *index = ngx_http_dynamo_rl_local_index(r, zone, source);

    return *index ? NGX_OK : NGX_DECLINED;
}


static void
ngx_http_dynamo_rl_wait_handler(ngx_http_request_t *r)
{
    ngx_event_t  *wev;

    wev = r->connection->write;

    if (!wev->timedout) {
        return;
    }

    wev->timedout = 0;

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    ngx_http_core_run_phases(r);
}


static ngx_int_t
ngx_http_dynamo_rl_refresh(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    ngx_http_request_t            *sr;
    ngx_http_dynamo_rl_ctx_t      *sctx;
    ngx_http_post_subrequest_t    *ps;
    ngx_http_dynamo_rl_refresh_t  *rf;

    ps = ngx_palloc(r->pool, sizeof(ngx_http_post_subrequest_t));
    if (ps == NULL) {
        return NGX_ERROR;
    }

    rf = ngx_pcalloc(r->pool, sizeof(ngx_http_dynamo_rl_refresh_t));
    if (rf == NULL) {
        return NGX_ERROR;
    }

    rf->ctx = ctx;

    ps->handler = ngx_http_dynamo_rl_refresh_done;
    ps->data = rf;

    /*
     * not NGX_HTTP_SUBREQUEST_IN_MEMORY: its buffer is the discovery
     * location's subrequest_output_buffer_size, and a larger document
     * would end the whole request; the discovery body filter collects
     * the document instead, bounded by max_size, and passes nothing of
     * the subrequest on, found by its post_subrequest whatever an
     * internal redirect does to it
     */

    if (ngx_http_subrequest(r, &drlcf->discovery, NULL, &sr, ps,
                            NGX_HTTP_SUBREQUEST_WAITED)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    sctx = ngx_pcalloc(r->pool, sizeof(ngx_http_dynamo_rl_ctx_t));
    if (sctx == NULL) {
        return NGX_ERROR;
    }

    sctx->refresh_sr = 1;
    sctx->doc_hold = 1;

    rf->doc = sctx;

    ngx_http_set_ctx(sr, sctx, ngx_http_dynamo_rl_module);

    sr->filter_need_in_memory = 1;

    /* a bare GET: none of the admin call's method, body or headers */

    sr->method = NGX_HTTP_GET;
    sr->method_name = ngx_http_core_get_method;

    sr->request_body = ngx_pcalloc(r->pool, sizeof(ngx_http_request_body_t));
    if (sr->request_body == NULL) {
        return NGX_ERROR;
    }

    sr->headers_in.content_length = NULL;
    sr->headers_in.content_length_n = -1;
    sr->headers_in.transfer_encoding = NULL;
    sr->headers_in.chunked = 0;

    /* the proxy module tunnels a 101 only for a request with an Upgrade */
    sr->headers_in.upgrade = NULL;

    if (ngx_list_init(&sr->headers_in.headers, r->pool, 1,
                      sizeof(ngx_table_elt_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    ctx->refresh = NGX_HTTP_DYNAMO_RL_REFRESH_RUNNING;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl discovery: refresh from \"%V\"",
                   &drlcf->discovery);

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_refresh_done(ngx_http_request_t *r, void *data,
    ngx_int_t rc)
{
    ngx_http_dynamo_rl_refresh_t *rf = data;

    u_char                          *doc;
    size_t                           len;
    ngx_str_t                        reason;
    ngx_http_dynamo_rl_ctx_t        *ctx, *sctx;
    ngx_uint_t                       generation;
    ngx_pool_t                      *pool;
    ngx_str_t                        from;
    ngx_uint_t                       source;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_snap_t       *snap;
    ngx_http_dynamo_rl_index_t      *index;
    ngx_http_dynamo_rl_loc_conf_t   *drlcf;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    ctx = rf->ctx;
    sctx = rf->doc;

    if (ctx->refresh != NGX_HTTP_DYNAMO_RL_REFRESH_RUNNING) {
        return rc;
    }

    zone = ctx->zone;
    snap = ctx->snap;
    ctx->zone = NULL;
    ctx->refresh = NGX_HTTP_DYNAMO_RL_REFRESH_FAILED;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);
    drlcf = ngx_http_get_module_loc_conf(r->parent, ngx_http_dynamo_rl_module);

    if (rc == NGX_HTTP_CLIENT_CLOSED_REQUEST || r->connection->error) {

        /* the admin call went away: no verdict on the listener */

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "discovery refresh from \"%V\" abandoned: "
                      "the client closed the connection", &drlcf->discovery);

        ngx_http_dynamo_rl_flight_end(zone, snap, 1);

        return rc;
    }

    /*
     * what the log names: the internal location, or for a file that the
     * location serves (alias, root), the file
     */

    if (ngx_http_dynamo_rl_source_name(r, &drlcf->discovery, &from)
        != NGX_OK)
    {
        goto failed;
    }

    if (sctx->doc_error.len) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "discovery refresh from %V failed: %V",
                      &from, &sctx->doc_error);
        goto failed;
    }

    /* internal redirects clear r->ctx: its answer is not the listener's */

    if (ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module) != sctx) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "discovery refresh from %V failed: it was "
                      "redirected to \"%V\" (X-Accel-Redirect or "
                      "error_page), never followed", &from,
                      &r->uri);
        goto failed;
    }

    if (rc > NGX_OK || r->headers_out.status != NGX_HTTP_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "discovery refresh from %V failed: status %ui",
                      &from,
                      rc > NGX_OK ? (ngx_uint_t) rc
                                  : r->headers_out.status);
        goto failed;
    }

    if (rc != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "discovery refresh from %V failed: the "
                      "subrequest ended with %i", &from, rc);
        goto failed;
    }

    if (sctx->doc_too_big) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "discovery document from %V is invalid: "
                      "%O bytes exceed max_size %uz", &from,
                      sctx->doc_total, drlcf->discovery_max_size);
        goto failed;
    }

    if (sctx->doc_encoded) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "discovery document from %V is invalid: "
                      "it has a content encoding", &from);
        goto failed;
    }

    doc = sctx->doc ? sctx->doc : (u_char *) "";
    len = sctx->doc_len;

    if (ngx_http_dynamo_rl_build(r, doc, len, &pool, &index,
                                 &reason)
        != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "discovery document from %V is invalid: %V",
                      &from, &reason);
        goto failed;
    }

    if (ngx_http_dynamo_rl_source_of(zone, drlcf, &source) != NGX_OK
        || ngx_http_dynamo_rl_snapshot_store(r->connection->log, zone, snap,
                                             doc, len,
                                             NGX_HTTP_DYNAMO_RL_SOURCE_REFRESH,
                                             index, &generation)
           != NGX_OK)
    {
        ngx_destroy_pool(pool);
        goto failed;
    }

    ngx_http_dynamo_rl_bad_routes(r, index);
    ngx_http_dynamo_rl_install(drmcf, source, pool, index, generation);

    ctx->refresh = NGX_HTTP_DYNAMO_RL_REFRESH_DONE;

    return rc;

failed:

    ngx_http_dynamo_rl_flight_end(zone, snap, 0);

    return rc;
}


/*
 * a refresh's source as its log lines name it: "/_rl_discovery", quoted,
 * or, when no upstream answered (a file the location serves with alias
 * or root), file "/etc/nginx/workers.json"
 */

static ngx_int_t
ngx_http_dynamo_rl_source_name(ngx_http_request_t *r, ngx_str_t *location,
    ngx_str_t *name)
{
    u_char                    *p;
    size_t                     root;
    ngx_str_t                  path;
    ngx_http_core_loc_conf_t  *clcf;

    path.len = 0;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (r->upstream == NULL && clcf->handler == NULL
        && ngx_http_map_uri_to_path(r, &path, &root, 0) != NULL)
    {
        path.len--;
    }

    name->len = (path.len ? sizeof("file \"\"") - 1 + path.len
                          : sizeof("\"\"") - 1 + location->len);

    p = ngx_pnalloc(r->pool, name->len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    name->data = p;

    if (path.len) {
        p = ngx_cpymem(p, "file \"", sizeof("file \"") - 1);
        p = ngx_cpymem(p, path.data, path.len);

    } else {
        *p++ = '"';
        p = ngx_cpymem(p, location->data, location->len);
    }

    *p = '"';

    return NGX_OK;
}


/* the refresh that a subrequest, or one of its ancestors, is */

static ngx_http_dynamo_rl_refresh_t *
ngx_http_dynamo_rl_refresh_of(ngx_http_request_t *r)
{
    for ( /* void */ ; r != r->main; r = r->parent) {
        if (r->post_subrequest != NULL
            && r->post_subrequest->handler == ngx_http_dynamo_rl_refresh_done)
        {
            return r->post_subrequest->data;
        }
    }

    return NULL;
}


/*
 * the listener's answer on the discovery plane or to a refresh: never an
 * upgrade, and an answer cut short or stalled after its header is still
 * answered for (ngx_http_dynamo_rl_discovery_finalize)
 */

static ngx_int_t
ngx_http_dynamo_rl_discovery_upstream(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    u_char               *p;
    ngx_http_upstream_t  *u;

    u = r->upstream;

    if (u != NULL) {
        u->upgrade = 0;

        if (u->finalize_request != ngx_http_dynamo_rl_discovery_finalize) {
            ctx->doc_finalize = u->finalize_request;
            u->finalize_request = ngx_http_dynamo_rl_discovery_finalize;
        }
    }

    if (r->headers_out.status >= NGX_HTTP_OK) {
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, sizeof("the listener answered , an upgrade "
                                    "is never honoured") - 1
                             + NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ctx->doc_error.data = p;
    ctx->doc_error.len = ngx_sprintf(p, "the listener answered %ui, an "
                                     "upgrade is never honoured",
                                     r->headers_out.status)
                         - p;

    return NGX_DECLINED;
}


/*
 * u->finalize_request of the listener's answer held by the discovery
 * plane or a refresh: when it fails after its header (closed before
 * Content-Length, read timeout), nothing of it has been sent, so nginx
 * is told so and answers for it; the discovery filters make that answer
 * a 502 discovery_invalid, or the refresh a failed one
 */

static void
ngx_http_dynamo_rl_discovery_finalize(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_http_upstream_t           *u;
    ngx_http_dynamo_rl_ctx_t      *ctx;
    ngx_http_dynamo_rl_refresh_t  *rf;

    if (r == r->main) {
        ctx = ngx_http_dynamo_rl_get_ctx(r);

    } else {
        rf = ngx_http_dynamo_rl_refresh_of(r);
        ctx = rf ? rf->doc : NULL;
    }

    if (ctx == NULL || ctx->doc_finalize == NULL) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "dynamo rl discovery: no context to finalize");
        return;
    }

    ctx->doc_finalize(r, rc);

    u = r->upstream;

    if (!ctx->doc_hold
        || rc < NGX_HTTP_SPECIAL_RESPONSE
        || rc == NGX_HTTP_REQUEST_TIME_OUT
        || rc == NGX_HTTP_CLIENT_CLOSED_REQUEST
        || r->connection->error)
    {
        return;
    }

    if (ctx->doc_error.len == 0) {
        if (rc == NGX_HTTP_GATEWAY_TIME_OUT
            || (u->peer.connection != NULL
                && u->peer.connection->read->timedout))
        {
            ngx_str_set(&ctx->doc_error, "the listener timed out before "
                        "the document was complete");

        } else {
            ngx_str_set(&ctx->doc_error, "the listener's answer ended "
                        "before the document was complete");
        }
    }

    u->header_sent = 0;
}


/*
 * a flight that ended without storing a snapshot; an abandoned one (its
 * request went away) is no verdict on the listener: a waiter takes over
 */

static void
ngx_http_dynamo_rl_flight_end(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_snap_t *snap, ngx_uint_t abandoned)
{
    ngx_shmtx_lock(&zone->shpool->mutex);

    if (snap->updating && snap->updater == ngx_pid) {
        snap->updating = 0;

        if (!abandoned) {
            snap->flights++;

            ngx_http_dynamo_rl_zone_observe(zone->sh,
                                            NGX_HTTP_DYNAMO_RL_HIST_REFRESH + 1,
                                            ngx_current_msec
                                            - snap->refresh_begun);
        }
    }

    if (!abandoned) {
        zone->sh->refresh_failed++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


void
ngx_http_dynamo_rl_discovery_cleanup(ngx_http_dynamo_rl_ctx_t *ctx)
{
    /* the request went away with its refresh still running */

    if (ctx->zone != NULL
        && ctx->refresh == NGX_HTTP_DYNAMO_RL_REFRESH_RUNNING)
    {
        ngx_http_dynamo_rl_flight_end(ctx->zone, ctx->snap, 1);
        ctx->zone = NULL;
    }
}


static ngx_int_t
ngx_http_dynamo_rl_build(ngx_http_request_t *r, u_char *doc, size_t len,
    ngx_pool_t **pool, ngx_http_dynamo_rl_index_t **index, ngx_str_t *reason)
{
    u_char                         *p;
    ngx_int_t                       rc;
    ngx_pool_t                     *ipool;
    ngx_http_dynamo_rl_index_t     *idx;
    ngx_http_dynamo_rl_json_err_t   err;

    ngx_str_set(reason, "out of memory");

    /* the pool outlives the request: the cycle's log, not the client's */

    ipool = ngx_create_pool(NGX_DEFAULT_POOL_SIZE, ngx_cycle->log);
    if (ipool == NULL) {
        return NGX_ERROR;
    }

    idx = ngx_palloc(ipool, sizeof(ngx_http_dynamo_rl_index_t));
    if (idx == NULL) {
        ngx_destroy_pool(ipool);
        return NGX_ERROR;
    }

    rc = ngx_http_dynamo_rl_json_index(doc, len, ngx_http_dynamo_rl_palloc,
                                       ipool, idx, &err);

    if (rc != NGX_OK) {
        ngx_destroy_pool(ipool);

        p = ngx_pnalloc(r->pool, 512);
        if (p == NULL) {
            return NGX_ERROR;
        }

        reason->data = p;

        if (err.text[0] != '\0') {
            reason->len = ngx_snprintf(p, 512, "%s: %s at line %d column %d",
                                       err.reason, err.text, err.line,
                                       err.column)
                          - p;

        } else {
            reason->len = ngx_snprintf(p, 512, "%s", err.reason) - p;
        }

        return rc;
    }

    *pool = ipool;
    *index = idx;

    return NGX_OK;
}


/* once per document entering the zone, not per process that indexes it */

static void
ngx_http_dynamo_rl_bad_routes(ngx_http_request_t *r,
    ngx_http_dynamo_rl_index_t *index)
{
    if (index->bad_routes) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "discovery document advertises %ui route(s) outside "
                      "the route grammar, never allowed", index->bad_routes);
    }
}


static void *
ngx_http_dynamo_rl_palloc(void *data, size_t size)
{
    return ngx_palloc(data, size);
}


/*
 * the document was validated in process memory; it is copied over the
 * old one in the room reserved for it, under the mutex under which every
 * reader copies it out, so one copy's room is enough and nothing else in
 * the zone, ledger records least of all, gives way to it
 */

static ngx_int_t
ngx_http_dynamo_rl_snapshot_store(ngx_log_t *log,
    ngx_http_dynamo_rl_zone_t *zone, ngx_http_dynamo_rl_snap_t *sh,
    u_char *doc, size_t len, ngx_uint_t source,
    ngx_http_dynamo_rl_index_t *index, ngx_uint_t *generation)
{
    uint64_t  members;

    /* for the gate's "members_changed": the key never changes */

    members = ngx_http_dynamo_rl_index_members(index, zone->sh->key);

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (len > sh->room_size) {

        /* nginx -t sized the room for the largest max_size */

        if (sh->raw != NULL) {
            /* the old snapshot goes anyway; a stale one is never used */

            sh->raw = NULL;
            sh->raw_len = 0;
            sh->generation++;
        }

        /* a refresh is counted as failed where its flight ends */

        if (sh->updating && sh->updater == ngx_pid
            && source == NGX_HTTP_DYNAMO_RL_SOURCE_REFRESH)
        {
            sh->updating = 0;
            sh->flights++;
        }

        ngx_shmtx_unlock(&zone->shpool->mutex);

        ngx_log_error(NGX_LOG_ALERT, log, 0,
                      "could not store a discovery snapshot of %uz bytes "
                      "in dynamo_rl zone \"%V\": %uz bytes are reserved "
                      "for its source", len, &zone->name, sh->room_size);

        return NGX_ERROR;
    }

    ngx_memcpy(sh->room, doc, len);

    sh->raw = sh->room;
    sh->raw_len = len;
    sh->members = members;
    sh->generation++;
    sh->fetched = ngx_current_msec;
    sh->fetched_time = ngx_time();
    sh->source = source;

    if (source == NGX_HTTP_DYNAMO_RL_SOURCE_REFRESH) {
        zone->sh->refresh_ok++;

        if (sh->updating && sh->updater == ngx_pid) {
            sh->updating = 0;
            sh->flights++;

            ngx_http_dynamo_rl_zone_observe(zone->sh,
                                            NGX_HTTP_DYNAMO_RL_HIST_REFRESH,
                                            ngx_current_msec
                                            - sh->refresh_begun);
        }
    }

    *generation = sh->generation;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, log, 0,
                   "dynamo rl discovery: snapshot %ui, %uz bytes",
                   *generation, len);

    return NGX_OK;
}


static void
ngx_http_dynamo_rl_install(ngx_http_dynamo_rl_main_conf_t *drmcf,
    ngx_uint_t source, ngx_pool_t *pool, ngx_http_dynamo_rl_index_t *index,
    ngx_uint_t generation)
{
    if (drmcf->index_pool[source] != NULL) {
        ngx_destroy_pool(drmcf->index_pool[source]);
    }

    index->generation = generation;
    index->serial = ++drmcf->index_serial;

    drmcf->index_pool[source] = pool;
    drmcf->index[source] = index;

#if (NGX_LINUX && defined __GLIBC__)

    /*
     * jansson's tree of the document, the build's scratch and the old
     * index were freed, tens of MB for a large fleet, which glibc would
     * otherwise keep in every worker process
     */

    (void) malloc_trim(0);

#endif
}


/* the process's own index, rebuilt only when the zone's generation moved */

static ngx_http_dynamo_rl_index_t *
ngx_http_dynamo_rl_local_index(ngx_http_request_t *r,
    ngx_http_dynamo_rl_zone_t *zone, ngx_uint_t source)
{
    u_char                          *doc;
    size_t                           len;
    ngx_str_t                        reason;
    ngx_uint_t                       generation;
    ngx_pool_t                      *pool;
    ngx_http_dynamo_rl_index_t      *index;
    ngx_http_dynamo_rl_snap_t       *sh;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);
    sh = &zone->sh->snaps[zone->slot[source]];

    ngx_shmtx_lock(&zone->shpool->mutex);

    generation = sh->generation;

    if (drmcf->index[source] != NULL
        && generation == drmcf->index[source]->generation)
    {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return drmcf->index[source];
    }

    len = sh->raw_len;

    doc = ngx_alloc(len ? len : 1, r->connection->log);
    if (doc == NULL) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return NULL;
    }

    if (sh->raw == NULL) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        ngx_free(doc);
        return NULL;
    }

    ngx_memcpy(doc, sh->raw, len);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (ngx_http_dynamo_rl_build(r, doc, len, &pool, &index,
                                 &reason)
        != NGX_OK)
    {
        /* the zone holds only validated documents */

        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "discovery snapshot %ui in dynamo_rl zone \"%V\" "
                      "is invalid: %V", generation, &zone->name, &reason);
        ngx_free(doc);
        return NULL;
    }

    ngx_free(doc);

    ngx_http_dynamo_rl_install(drmcf, source, pool, index, generation);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl discovery: index %ui, %ui workers",
                   generation, index->nworkers);

    return index;
}


/* the process's index of the current snapshot, or NULL without one */

ngx_http_dynamo_rl_index_t *
ngx_http_dynamo_rl_discovery_index(ngx_http_request_t *r)
{
    ngx_uint_t                  source;
    ngx_http_dynamo_rl_zone_t  *zone;

    zone = ngx_http_dynamo_rl_get_zone(r);

    if (ngx_http_dynamo_rl_snapshot_of(r, &source) == NULL
        || zone->sh->snaps[zone->slot[source]].raw == NULL)
    {
        return NULL;
    }

    return ngx_http_dynamo_rl_local_index(r, zone, source);
}


/*
 * the snapshot that the status and metrics of a location show: its
 * source's, or the first source's; NULL without any
 */

ngx_http_dynamo_rl_snap_t *
ngx_http_dynamo_rl_snapshot_of(ngx_http_request_t *r, ngx_uint_t *source)
{
    ngx_http_dynamo_rl_zone_t  *zone;

    zone = ngx_http_dynamo_rl_get_zone(r);

    if (ngx_http_dynamo_rl_source_of(zone,
            ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module),
            source)
        != NGX_OK)
    {
        if (zone->nsources == 0) {
            return NULL;
        }

        *source = 0;
    }

    return &zone->sh->snaps[zone->slot[*source]];
}


/*
 * the source whose snapshot a location reads and stores: the one its
 * dynamo_rl_discovery names, or, for a location without one, the only
 * source of the configuration
 */

static ngx_int_t
ngx_http_dynamo_rl_source_of(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_loc_conf_t *drlcf, ngx_uint_t *source)
{
    ngx_uint_t  i;

    if (drlcf->source) {
        i = drlcf->source - 1;

    } else if (zone->nsources == 1) {
        i = 0;

    } else {
        return NGX_DECLINED;
    }

    if (i >= zone->nsources) {
        return NGX_DECLINED;
    }

    *source = i;

    return NGX_OK;
}


/*
 * the source whose snapshot a discovery-plane answer refreshes: only one
 * that the location names in its own block, where the operator sets its
 * proxy_pass too; one inherited from the server (or the configuration's
 * only source) may be another listener's or another file's, whose workers
 * its admin location would then allow.  A configuration without sources
 * keeps the answers in a snapshot of their own, which only the status page
 * and the metrics read
 */

static ngx_int_t
ngx_http_dynamo_rl_store_source(ngx_http_request_t *r,
    ngx_http_dynamo_rl_zone_t *zone, ngx_http_dynamo_rl_loc_conf_t *drlcf,
    ngx_uint_t *source)
{
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    if (drlcf->source_named) {
        return ngx_http_dynamo_rl_source_of(zone, drlcf, source);
    }

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    if (drmcf->nsources == 0 && zone->nsources == 1) {
        *source = 0;
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/*
 * proxy_pass with variables takes a host that names an upstream{} block
 * for that group, without a resolver: a system_url must never do so (the
 * admin plane logs the refusal, the discovery plane's rewrite does not)
 */

ngx_int_t
ngx_http_dynamo_rl_upstream_group(ngx_http_request_t *r, ngx_str_t *url,
    ngx_uint_t log)
{
    ngx_str_t                       host;
    ngx_uint_t                      i;
    ngx_http_upstream_srv_conf_t  **uscfp;
    ngx_http_upstream_main_conf_t  *umcf;

    if (ngx_http_dynamo_rl_system_url_host(url->data, url->len, &host)
        != NGX_OK)
    {
        return NGX_DECLINED;
    }

    umcf = ngx_http_get_module_main_conf(r, ngx_http_upstream_module);
    uscfp = umcf->upstreams.elts;

    for (i = 0; i < umcf->upstreams.nelts; i++) {

        if ((uscfp[i]->flags & NGX_HTTP_UPSTREAM_CREATE)
            && uscfp[i]->host.len == host.len
            && ngx_strncasecmp(uscfp[i]->host.data, host.data, host.len)
               == 0)
        {
            if (log == 0) {
                return NGX_DECLINED;
            }

            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "dynamo rl admin: system_url \"%V\" of instance "
                          "\"%V\" names the upstream group \"%V\", refused",
                          url, &r->uri, &uscfp[i]->host);
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}


/*
 * the source of a location that names a discovery URI: the internal
 * location that the URI resolves to, in the location's own server (a
 * refresh is a subrequest, which nginx looks up in the server of its
 * request), so that two servers with one URI for two listeners or two
 * files have two sources, each with its own snapshot; a location, its
 * nested ones and its server's other locations naming the URI share one.
 * The key that names the source in the zone across reloads hashes the
 * server's listen addresses and names; servers alike in both are told
 * apart by their order in the configuration.
 */

ngx_int_t
ngx_http_dynamo_rl_discovery_source(ngx_conf_t *cf,
    ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    uint32_t                         key;
    ngx_uint_t                       i;
    ngx_http_core_srv_conf_t        *cscf;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_dynamo_rl_module);
    cscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_core_module);

    for (i = 0; i < drmcf->nsources; i++) {
        if (drmcf->source_srv[i] == cscf
            && drmcf->sources[i].len == drlcf->discovery.len
            && ngx_strncmp(drmcf->sources[i].data, drlcf->discovery.data,
                           drlcf->discovery.len)
               == 0)
        {
            drlcf->source = i + 1;
            return NGX_OK;
        }
    }

    if (drmcf->nsources == NGX_HTTP_DYNAMO_RL_SOURCES) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "more than %d discovery sources (each "
                           "\"dynamo_rl_discovery\" location once in each "
                           "server that uses it)",
                           NGX_HTTP_DYNAMO_RL_SOURCES);
        return NGX_ERROR;
    }

    key = ngx_http_dynamo_rl_server_key(cf, cscf);

again:

    for (i = 0; i < drmcf->nsources; i++) {
        if (drmcf->source_key[i] == key
            && drmcf->sources[i].len == drlcf->discovery.len
            && ngx_strncmp(drmcf->sources[i].data, drlcf->discovery.data,
                           drlcf->discovery.len)
               == 0)
        {
            key++;
            goto again;
        }
    }

    i = drmcf->nsources++;

    drmcf->sources[i] = drlcf->discovery;
    drmcf->source_srv[i] = cscf;
    drmcf->source_key[i] = key;

    drlcf->source = i + 1;

    return NGX_OK;
}


/* a hash of a server's listen addresses and names, in their order */

static uint32_t
ngx_http_dynamo_rl_server_key(ngx_conf_t *cf, ngx_http_core_srv_conf_t *cscf)
{
    uint32_t                    crc;
    ngx_uint_t                  p, a, s;
    ngx_http_conf_port_t       *port;
    ngx_http_conf_addr_t       *addr;
    ngx_http_server_name_t     *sn;
    ngx_http_core_srv_conf_t  **servers;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    ngx_crc32_init(crc);

    port = cmcf->ports ? cmcf->ports->elts : NULL;

    for (p = 0; cmcf->ports && p < cmcf->ports->nelts; p++) {
        addr = port[p].addrs.elts;

        for (a = 0; a < port[p].addrs.nelts; a++) {
            servers = addr[a].servers.elts;

            for (s = 0; s < addr[a].servers.nelts; s++) {
                if (servers[s] == cscf) {
                    ngx_crc32_update(&crc, addr[a].opt.addr_text.data,
                                     addr[a].opt.addr_text.len);
                    ngx_crc32_update(&crc, (u_char *) " ", 1);
                }
            }
        }
    }

    ngx_crc32_update(&crc, (u_char *) "|", 1);

    sn = cscf->server_names.elts;

    for (s = 0; s < cscf->server_names.nelts; s++) {
        ngx_crc32_update(&crc, sn[s].name.data, sn[s].name.len);
        ngx_crc32_update(&crc, (u_char *) " ", 1);
    }

    ngx_crc32_final(crc);

    return crc;
}


ngx_int_t
ngx_http_dynamo_rl_discovery_filter_init(ngx_conf_t *cf)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_dynamo_rl_discovery_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_dynamo_rl_discovery_body_filter;

    return NGX_OK;
}


/*
 * the discovery plane holds the listener's response until the document is
 * complete: it is validated, becomes the snapshot, and is passed on with
 * the out-of-scope workers removed, or replaced by a 502
 */

static ngx_int_t
ngx_http_dynamo_rl_discovery_header_filter(ngx_http_request_t *r)
{
    ngx_int_t                       rc;
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_refresh_t   *rf;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    if (r != r->main) {
        rf = ngx_http_dynamo_rl_refresh_of(r);

        if (rf == NULL) {
            return ngx_http_next_header_filter(r);
        }

        /*
         * a refresh: nothing of it reaches the admin call's client, and
         * only the answer of the location it was sent to is kept
         */

        ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

        if (ctx != rf->doc || ctx->doc_error.len) {
            return NGX_OK;
        }

        rc = ngx_http_dynamo_rl_discovery_upstream(r, ctx);

        if (rc != NGX_OK) {
            return rc == NGX_ERROR ? NGX_ERROR : NGX_HTTP_BAD_GATEWAY;
        }

        if (r->headers_out.content_encoding != NULL
            && r->headers_out.content_encoding->value.len)
        {
            ctx->doc_encoded = 1;
        }

        drlcf = ngx_http_get_module_loc_conf(r->parent,
                                             ngx_http_dynamo_rl_module);

        /* refused before a byte of it is kept */

        if (r->headers_out.content_length_n
            > (off_t) drlcf->discovery_max_size)
        {
            ctx->doc_too_big = 1;
        }

        return NGX_OK;
    }

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx == NULL || ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY
        || ctx->deny_reason.len || r->upstream == NULL)
    {
        return ngx_http_next_header_filter(r);
    }

    /* a listener's redirect, on the 502 that replaces it: no URL */

    ngx_http_dynamo_rl_clear_urls(r);

    rc = ngx_http_dynamo_rl_discovery_upstream(r, ctx);

    if (rc != NGX_OK) {
        ctx->doc_hold = 1;
        return rc == NGX_ERROR ? NGX_ERROR : NGX_HTTP_BAD_GATEWAY;
    }

    /* the trainer reads the document as the listener wrote it */

    r->gzip_tested = 1;
    r->gzip_ok = 0;

    if (r->method == NGX_HTTP_HEAD || r->header_only) {
        /* nothing to validate: the listener's headers pass, if it is 200 */

        if (r->headers_out.status == NGX_HTTP_OK) {
            ngx_str_set(&ctx->outcome, "ok");

            /*
             * the answer to GET may be rewritten (admin_url, a scope):
             * its length and validators would not be the listener's
             */

            drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

            if (drlcf->admin_url != NULL
                || ngx_http_dynamo_rl_scope_any(r, ctx) != NGX_OK)
            {
                ngx_http_clear_content_length(r);
                ngx_http_dynamo_rl_discovery_rewritten(r);
            }

        } else {
            ngx_str_set(&ctx->outcome, "invalid");
            ngx_str_set(&ctx->deny_reason, "discovery_invalid");

            r->headers_out.status = NGX_HTTP_BAD_GATEWAY;
            r->headers_out.status_line.len = 0;
            ngx_http_clear_content_length(r);
        }

        return ngx_http_next_header_filter(r);
    }

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    ctx->doc_hold = 1;
    ctx->doc_status = r->headers_out.status;

    if (r->headers_out.content_encoding != NULL
        && r->headers_out.content_encoding->value.len)
    {
        ctx->doc_encoded = 1;
    }

    if (r->headers_out.content_length_n > (off_t) drlcf->discovery_max_size) {
        ctx->doc_too_big = 1;
    }

    ngx_http_clear_content_length(r);
    ngx_http_clear_accept_ranges(r);

    r->filter_need_in_memory = 1;

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_discovery_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in)
{
    ngx_uint_t                      last;
    ngx_chain_t                    *cl;
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_refresh_t   *rf;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    if (r != r->main) {
        rf = ngx_http_dynamo_rl_refresh_of(r);

        if (rf == NULL) {
            return ngx_http_next_body_filter(r, in);
        }

        ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

        if (ctx != rf->doc || ctx->doc_error.len) {

            /* a redirected refresh, or an error page after a failed one */

            for (cl = in; cl; cl = cl->next) {
                ngx_http_dynamo_rl_discovery_discard(cl->buf);
            }

            return NGX_OK;
        }

        drlcf = ngx_http_get_module_loc_conf(r->main,
                                             ngx_http_dynamo_rl_module);

        for (cl = in; cl; cl = cl->next) {
            if (ngx_http_dynamo_rl_discovery_append(r, ctx, cl->buf,
                                                    drlcf->discovery_max_size)
                != NGX_OK)
            {
                return NGX_ERROR;
            }
        }

        return NGX_OK;
    }

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx == NULL || !ctx->doc_hold) {
        return ngx_http_next_body_filter(r, in);
    }

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    last = 0;

    for (cl = in; cl; cl = cl->next) {

        if (ngx_http_dynamo_rl_discovery_append(r, ctx, cl->buf,
                                                drlcf->discovery_max_size)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (cl->buf->last_buf) {
            last = 1;
        }
    }

    if (!last) {
        return NGX_OK;
    }

    ctx->doc_hold = 0;

    return ngx_http_dynamo_rl_discovery_send(r, ctx);
}


static ngx_int_t
ngx_http_dynamo_rl_discovery_append(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_buf_t *b, size_t max)
{
    u_char   *p;
    size_t    size, need;
    ssize_t   n;

    size = ngx_buf_size(b);

    ctx->doc_total += size;

    if (size == 0 || ctx->doc_too_big) {
        goto consumed;
    }

    need = ctx->doc_len + size;

    if (need > max) {
        ctx->doc_too_big = 1;
        goto consumed;
    }

    if (need > ctx->doc_size) {
        ctx->doc_size = ngx_max(need, ngx_min(2 * ctx->doc_size + 16384, max));

        p = ngx_pnalloc(r->pool, ctx->doc_size);
        if (p == NULL) {
            return NGX_ERROR;
        }

        if (ctx->doc_len) {
            ngx_memcpy(p, ctx->doc, ctx->doc_len);
        }

        ctx->doc = p;
    }

    if (ngx_buf_in_memory(b)) {
        ngx_memcpy(ctx->doc + ctx->doc_len, b->pos, size);

    } else {
        n = ngx_read_file(b->file, ctx->doc + ctx->doc_len, size,
                          b->file_pos);

        if (n != (ssize_t) size) {
            return NGX_ERROR;
        }
    }

    ctx->doc_len += size;

consumed:

    ngx_http_dynamo_rl_discovery_discard(b);

    return NGX_OK;
}


static void
ngx_http_dynamo_rl_discovery_discard(ngx_buf_t *b)
{
    if (ngx_buf_in_memory(b)) {
        b->pos = b->last;
    }

    if (b->in_file) {
        b->file_pos = b->file_last;
    }
}


static ngx_int_t
ngx_http_dynamo_rl_discovery_send(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    u_char                           *p, *q, *out;
    size_t                            len;
    ngx_str_t                         reason, url, *urlp;
    ngx_uint_t                        i, generation, keep, sep, installed;
    ngx_uint_t                        source;
    ngx_pool_t                       *pool;
    ngx_http_dynamo_rl_zone_t        *zone;
    ngx_http_dynamo_rl_worker_t      *w;
    ngx_http_dynamo_rl_index_t       *index;
    ngx_http_dynamo_rl_loc_conf_t    *drlcf;
    ngx_http_dynamo_rl_main_conf_t   *drmcf;
    ngx_http_dynamo_rl_scan_worker_t  sw;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    if (ctx->doc_error.len) {
        return ngx_http_dynamo_rl_discovery_invalid(r, &ctx->doc_error);
    }

    if (ctx->doc_status != NGX_HTTP_OK) {
        reason.data = ngx_pnalloc(r->pool, sizeof("listener answered ") - 1
                                           + NGX_INT_T_LEN);
        if (reason.data == NULL) {
            return NGX_ERROR;
        }

        reason.len = ngx_sprintf(reason.data, "listener answered %ui",
                                 ctx->doc_status)
                     - reason.data;

        return ngx_http_dynamo_rl_discovery_invalid(r, &reason);
    }

    if (ctx->doc_encoded) {
        ngx_str_set(&reason, "document has a content encoding");
        return ngx_http_dynamo_rl_discovery_invalid(r, &reason);
    }

    if (ctx->doc_too_big) {
        ngx_str_set(&reason, "document exceeds max_size");
        return ngx_http_dynamo_rl_discovery_invalid(r, &reason);
    }

    if (ngx_http_dynamo_rl_build(r, ctx->doc, ctx->doc_len,
                                 &pool, &index, &reason)
        != NGX_OK)
    {
        return ngx_http_dynamo_rl_discovery_invalid(r, &reason);
    }

    installed = 0;

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    /* into the snapshot of this location's source, if it has one */

    if (drmcf->shm_zone != NULL) {
        zone = drmcf->shm_zone->data;

        if (ngx_http_dynamo_rl_store_source(r, zone, drlcf, &source)
               == NGX_OK
            && ngx_http_dynamo_rl_snapshot_store(
                   r->connection->log, zone,
                   &zone->sh->snaps[zone->slot[source]], ctx->doc,
                   ctx->doc_len, NGX_HTTP_DYNAMO_RL_SOURCE_DISCOVERY, index,
                   &generation)
               == NGX_OK)
        {
            ngx_http_dynamo_rl_bad_routes(r, index);
            ngx_http_dynamo_rl_install(drmcf, source, pool, index,
                                       generation);
            installed = 1;
        }
    }

    /* if it could not be stored, the client still gets what was said */

    keep = index->nelts;

    if (ngx_http_dynamo_rl_scope_any(r, ctx) != NGX_OK) {
        keep = 0;
    }

    for (i = 0; keep != index->nelts && i < index->nworkers; i++) {
        if (ngx_http_dynamo_rl_scope_worker(r, ctx, index,
                                            &index->workers[i])
            == NGX_OK)
        {
            keep++;
        }
    }

    out = ctx->doc;
    len = ctx->doc_len;

    urlp = NULL;

    if (drlcf->admin_url != NULL) {
        if (ngx_http_complex_value(r, drlcf->admin_url, &url) != NGX_OK) {
            if (!installed) {
                ngx_destroy_pool(pool);
            }

            return NGX_ERROR;
        }

        if (ngx_http_dynamo_rl_admin_url_valid(url.data, url.len)
            == NGX_OK)
        {
            urlp = &url;

        } else {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "dynamo_rl_admin_url is not an http or https URL "
                          "here, the answer has no system_url");
        }
    }

    if (keep != index->nelts || drlcf->admin_url != NULL) {

        /*
         * the listener's bytes without the out-of-scope workers' elements,
         * and with dynamo_rl_admin_url, with each system_url naming the
         * admin plane, or cut where the admin plane would refuse the worker
         */

        out = ngx_pnalloc(r->pool,
                          ctx->doc_len
                          + (urlp ? index->nworkers
                                    * NGX_HTTP_DYNAMO_RL_REWRITE_ROOM(url.len)
                                  : 0));
        if (out == NULL) {
            if (!installed) {
                ngx_destroy_pool(pool);
            }

            return NGX_ERROR;
        }

        /*
         * every element kept: the bytes between them too; else only the
         * kept workers' elements, joined by commas
         */

        p = out;
        q = ctx->doc;
        sep = 0;

        if (keep != index->nelts) {
            p = ngx_cpymem(p, ctx->doc, index->workers_start + 1);
            q = ctx->doc + index->workers_end;
        }

        for (i = 0; i < index->nworkers; i++) {
            w = &index->workers[i];

            if (keep != index->nelts) {
                if (ngx_http_dynamo_rl_scope_worker(r, ctx, index, w)
                    != NGX_OK)
                {
                    continue;
                }

                if (sep) {
                    *p++ = ',';
                }

                sep = 1;

            } else {
                p = ngx_cpymem(p, q, ctx->doc + w->start - q);
                q = ctx->doc + w->end;
            }

            if (drlcf->admin_url == NULL) {
                p = ngx_cpymem(p, ctx->doc + w->start, w->end - w->start);
                continue;
            }

            sw.start = ctx->doc + w->start;
            sw.end = ctx->doc + w->end;
            sw.url_start = w->url_start ? ctx->doc + w->url_start : NULL;
            sw.url_end = w->url_start ? ctx->doc + w->url_end : NULL;
            sw.base_start = w->base_start ? ctx->doc + w->base_start : NULL;
            sw.base_end = w->base_start ? ctx->doc + w->base_end : NULL;

            p = ngx_http_dynamo_rl_admin_rewrite(p, &sw,
                    ngx_http_dynamo_rl_admin_eligible(r, ctx, index, w)
                    ? urlp : NULL,
                    w->id);
        }

        p = ngx_cpymem(p, q, ctx->doc + ctx->doc_len - q);

        len = p - out;

        ngx_http_dynamo_rl_discovery_rewritten(r);
    }

    if (!installed) {
        ngx_destroy_pool(pool);
    }

    ngx_str_set(&ctx->outcome, "ok");

    return ngx_http_dynamo_rl_discovery_output(r, NGX_HTTP_OK, out, len);
}


/*
 * the listener's validators, ranges and digests describe its bytes, not
 * those of an answer rewritten from them: a client's cache must not
 * revalidate or check one against the other
 */

static void
ngx_http_dynamo_rl_discovery_rewritten(ngx_http_request_t *r)
{
    static ngx_str_t  names[] = {
        ngx_string("ETag"),
        ngx_string("Last-Modified"),
        ngx_string("Accept-Ranges"),
        ngx_string("Content-MD5"),
        ngx_string("Digest"),
        ngx_string("Content-Digest"),
        ngx_string("Repr-Digest"),
        ngx_null_string
    };

    ngx_http_clear_etag(r);
    ngx_http_clear_last_modified(r);
    ngx_http_clear_accept_ranges(r);

    ngx_http_dynamo_rl_headers_drop(r, names);
}


/*
 * whether the admin plane would allow calls to the worker: valid, without
 * an error, with an acceptable system_url, the only worker in scope with
 * its id; the answer names the gateway only for such a worker
 */

static ngx_uint_t
ngx_http_dynamo_rl_admin_eligible(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_index_t *index,
    ngx_http_dynamo_rl_worker_t *w)
{
    ngx_uint_t                     k, n;
    ngx_http_dynamo_rl_worker_t  **wp;

    if (w->state != NGX_HTTP_DYNAMO_RL_WORKER_OK || !w->has_id) {
        return 0;
    }

    n = 0;

    wp = ngx_http_dynamo_rl_index_find(index, w->id, &k);

    for ( /* void */ ; k; k--, wp++) {
        if (*wp == w
            || ngx_http_dynamo_rl_scope_worker(r, ctx, index, *wp) == NGX_OK)
        {
            n++;
        }
    }

    if (n != 1) {
        return 0;
    }

    return ngx_http_dynamo_rl_upstream_group(r, &w->system_url, 0) == NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_discovery_invalid(ngx_http_request_t *r,
    ngx_str_t *reason)
{
    u_char                    *p, *body;
    size_t                     len;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "discovery document is invalid: %V", reason);

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx != NULL) {
        ngx_str_set(&ctx->outcome, "invalid");
        ngx_str_set(&ctx->deny_reason, "discovery_invalid");
    }

    len = sizeof("{\"error\":\"discovery_invalid\",\"message\":\"\"}\n") - 1
          + reason->len + ngx_escape_json(NULL, reason->data, reason->len);

    body = ngx_pnalloc(r->pool, len);
    if (body == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(body, "{\"error\":\"discovery_invalid\",\"message\":\"",
                   sizeof("{\"error\":\"discovery_invalid\",\"message\":\"")
                   - 1);
    p = (u_char *) ngx_escape_json(p, reason->data, reason->len);
    *p++ = '"';
    *p++ = '}';
    *p++ = LF;

    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if (r->headers_out.content_encoding != NULL) {
        r->headers_out.content_encoding->hash = 0;
        r->headers_out.content_encoding = NULL;
    }

    ngx_http_clear_last_modified(r);
    ngx_http_clear_etag(r);

    return ngx_http_dynamo_rl_discovery_output(r, NGX_HTTP_BAD_GATEWAY,
                                               body, p - body);
}


static ngx_int_t
ngx_http_dynamo_rl_discovery_output(ngx_http_request_t *r, ngx_uint_t status,
    u_char *p, size_t len)
{
    ngx_int_t  rc;

    r->headers_out.status = status;
    r->headers_out.content_length_n = len;

    if (status != NGX_HTTP_OK) {
        r->headers_out.status_line.len = 0;
    }

    rc = ngx_http_next_header_filter(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    return ngx_http_dynamo_rl_send_body(r, ngx_http_next_body_filter, p, len);
}
