
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"


typedef struct {
    ngx_str_t                       name;
    ngx_uint_t                      method;
} ngx_http_dynamo_rl_method_name_t;


static ngx_int_t ngx_http_dynamo_rl_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_dynamo_rl_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_dynamo_rl_add_handler(
    ngx_http_core_main_conf_t *cmcf, ngx_uint_t phase,
    ngx_http_handler_pt handler, ngx_uint_t first);
static void *ngx_http_dynamo_rl_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_dynamo_rl_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_dynamo_rl_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_dynamo_rl_init_process(ngx_cycle_t *cycle);
static void ngx_http_dynamo_rl_store_slots(ngx_http_dynamo_rl_zone_t *zone,
    ngx_cycle_t *cycle);
static void ngx_http_dynamo_rl_exit_process(ngx_cycle_t *cycle);
static void ngx_http_dynamo_rl_exit_index(void *data);

static char *ngx_http_dynamo_rl_plane(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_dynamo_rl_methods(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_dynamo_rl_header_name(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_dynamo_rl_merge_names(ngx_conf_t *cf,
    ngx_http_dynamo_rl_loc_conf_t *prev, ngx_http_dynamo_rl_loc_conf_t *conf);

static void ngx_http_dynamo_rl_cleanup(void *data);
static ngx_int_t ngx_http_dynamo_rl_log_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_plane_header_filter(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_plane_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_dynamo_rl_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_trusted_headers(ngx_http_request_t *r,
    ngx_uint_t plane);
static ngx_int_t ngx_http_dynamo_rl_flat_error(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
static ngx_int_t ngx_http_dynamo_rl_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_dynamo_rl_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_dynamo_rl_plane_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_conf_enum_t  ngx_http_dynamo_rl_planes[] = {
    { ngx_string("request"), NGX_HTTP_DYNAMO_RL_PLANE_REQUEST },
    { ngx_string("discovery"), NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY },
    { ngx_string("admin"), NGX_HTTP_DYNAMO_RL_PLANE_ADMIN },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_http_dynamo_rl_log_levels[] = {
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};


static ngx_http_dynamo_rl_method_name_t  ngx_http_dynamo_rl_method_names[] = {
    { ngx_string("GET"), NGX_HTTP_GET },
    { ngx_string("HEAD"), NGX_HTTP_HEAD },
    { ngx_string("POST"), NGX_HTTP_POST },
    { ngx_string("PUT"), NGX_HTTP_PUT },
    { ngx_string("DELETE"), NGX_HTTP_DELETE },
    { ngx_string("PATCH"), NGX_HTTP_PATCH },
    { ngx_string("OPTIONS"), NGX_HTTP_OPTIONS },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_dynamo_rl_commands[] = {

    { ngx_string("dynamo_rl_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_dynamo_rl_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_main_conf_t, shm_zone),
      NULL },

    { ngx_string("dynamo_rl_store"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_dynamo_rl_store,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_main_conf_t, store),
      NULL },

    { ngx_string("dynamo_rl_plane"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_dynamo_rl_plane,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_methods"),
      NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_dynamo_rl_methods,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_attempt_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_dynamo_rl_header_name,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, attempt_header),
      NULL },

    { ngx_string("dynamo_rl_attempt_upstream_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_dynamo_rl_header_name,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, attempt_upstream_header),
      (void *) 1 },

    { ngx_string("dynamo_rl_strip_routing_headers"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, strip_routing_headers),
      NULL },

    { ngx_string("dynamo_rl_body_policy"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, body_policy),
      NULL },

    { ngx_string("dynamo_rl_metadata_upload"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_dynamo_rl_metadata_upload,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_tenant"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_dynamo_rl_assigned,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, tenant),
      NULL },

    { ngx_string("dynamo_rl_priority"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_dynamo_rl_assigned,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, priority),
      NULL },

    { ngx_string("dynamo_rl_strip_headers"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_dynamo_rl_strip_headers,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_strip_nvext"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_dynamo_rl_strip_nvext,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_discovery"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_dynamo_rl_discovery,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_namespace"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE12,
      ngx_http_dynamo_rl_namespace,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_admin_routes"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_dynamo_rl_admin_routes,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_log_level"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, log_level),
      &ngx_http_dynamo_rl_log_levels },

    { ngx_string("dynamo_rl_ledger"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, ledger),
      NULL },

    { ngx_string("dynamo_rl_attempt_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, attempt_ttl),
      NULL },

    { ngx_string("dynamo_rl_attempts_api"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_dynamo_rl_attempts_api,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_gate"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, gate),
      NULL },

    { ngx_string("dynamo_rl_gate_api"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
      ngx_http_dynamo_rl_gate_api,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_dynamo_rl_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_dynamo_rl_metrics,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_ready"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_dynamo_rl_ready,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_admin_url"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_dynamo_rl_admin_url,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("dynamo_rl_accel_buffering"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dynamo_rl_loc_conf_t, accel_buffering),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_dynamo_rl_module_ctx = {
    ngx_http_dynamo_rl_add_variables,      /* preconfiguration */
    ngx_http_dynamo_rl_init,               /* postconfiguration */

    ngx_http_dynamo_rl_create_main_conf,   /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_dynamo_rl_create_loc_conf,    /* create location configuration */
    ngx_http_dynamo_rl_merge_loc_conf      /* merge location configuration */
};


ngx_module_t  ngx_http_dynamo_rl_module = {
    NGX_MODULE_V1,
    &ngx_http_dynamo_rl_module_ctx,        /* module context */
    ngx_http_dynamo_rl_commands,           /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_dynamo_rl_init_process,       /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_dynamo_rl_exit_process,       /* exit process */
    ngx_http_dynamo_rl_state_exit_master,  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_variable_t  ngx_http_dynamo_rl_vars[] = {

    { ngx_string("dynamo_rl_attempt_id"), NULL,
      ngx_http_dynamo_rl_variable,
      offsetof(ngx_http_dynamo_rl_ctx_t, attempt_id),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("dynamo_rl_plane"), NULL,
      ngx_http_dynamo_rl_plane_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("dynamo_rl_outcome"), NULL,
      ngx_http_dynamo_rl_variable,
      offsetof(ngx_http_dynamo_rl_ctx_t, outcome),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("dynamo_rl_deny_reason"), NULL,
      ngx_http_dynamo_rl_variable,
      offsetof(ngx_http_dynamo_rl_ctx_t, deny_reason),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("dynamo_rl_instance_id"), NULL,
      ngx_http_dynamo_rl_variable,
      offsetof(ngx_http_dynamo_rl_ctx_t, instance_id),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("dynamo_rl_route"), NULL,
      ngx_http_dynamo_rl_variable,
      offsetof(ngx_http_dynamo_rl_ctx_t, route),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("dynamo_rl_system_url"), NULL,
      ngx_http_dynamo_rl_variable,
      offsetof(ngx_http_dynamo_rl_ctx_t, system_url),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("dynamo_rl_engine_path"), NULL,
      ngx_http_dynamo_rl_variable,
      offsetof(ngx_http_dynamo_rl_ctx_t, engine_path),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("dynamo_rl_admin_result"), NULL,
      ngx_http_dynamo_rl_variable,
      offsetof(ngx_http_dynamo_rl_ctx_t, admin_result),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("dynamo_rl_snapshot_generation"), NULL,
      ngx_http_dynamo_rl_variable,
      offsetof(ngx_http_dynamo_rl_ctx_t, generation),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;

/* the filters of every plane, the module's own last: see plane_header_filter */
static ngx_http_output_header_filter_pt  ngx_http_dynamo_rl_planes_header;
static ngx_http_output_body_filter_pt    ngx_http_dynamo_rl_planes_body;


/*
 * the proxy module's location configuration starts with its
 * ngx_http_upstream_conf_t, which is how plane locations switch off the
 * X-Accel-* controls without asking every operator for proxy_ignore_headers
 */

extern ngx_module_t  ngx_http_proxy_module;


static void
ngx_http_dynamo_rl_cleanup(void *data)
{
    ngx_http_dynamo_rl_ctx_t *ctx = data;

    ngx_http_dynamo_rl_discovery_cleanup(ctx);
    ngx_http_dynamo_rl_ledger_abandon(ctx);

    ngx_http_dynamo_rl_drain_leave(ctx);
}


/*
 * the log phase, moved before the access log: the attempt's terminal
 * state and the counters are settled before $dynamo_rl_outcome is logged
 */

static ngx_int_t
ngx_http_dynamo_rl_log_handler(ngx_http_request_t *r)
{
    ngx_http_dynamo_rl_ctx_t  *ctx;

    if (r != r->main) {
        return NGX_OK;
    }

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx == NULL || ctx->logged) {
        return NGX_OK;
    }

    ctx->logged = 1;

    ngx_http_dynamo_rl_ledger_finish(r, ctx);
    ngx_http_dynamo_rl_admin_finish(r, ctx);
    ngx_http_dynamo_rl_account(r, ctx);

    return NGX_OK;
}


/*
 * The module's filters are a chain: discovery's, status's, admin's, the
 * ledger's, then the module's own.  A request plane response, nearly all
 * of the traffic, needs only status's, the ledger's and the module's, so
 * these two filters on top of the chain call just those, in the chain's
 * order, and pass anything else to the whole chain.  Whatever this path
 * does must stay what the chain does for the same request: "make
 * test-filters" runs the request plane's tests against build/nofast,
 * built with NGX_HTTP_DYNAMO_RL_NOFAST, where these two filters pass
 * such a response to the chain as well, with a debug line that says so.
 */

static ngx_int_t
ngx_http_dynamo_rl_plane_header_filter(ngx_http_request_t *r)
{
    ngx_http_dynamo_rl_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_dynamo_rl_planes_header(r);
    }

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx == NULL || ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        || ctx->admin_done)
    {
        return ngx_http_dynamo_rl_planes_header(r);
    }

#if (NGX_HTTP_DYNAMO_RL_NOFAST)

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl filter: request plane header to the chain");

    return ngx_http_dynamo_rl_planes_header(r);

#endif

    ngx_http_dynamo_rl_status_header(r, ctx);

    if (ngx_http_dynamo_rl_ledger_header(r, ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_dynamo_rl_header_filter(r);
}


static ngx_int_t
ngx_http_dynamo_rl_plane_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t                  rc;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_dynamo_rl_planes_body(r, in);
    }

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx == NULL || ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        || ctx->doc_hold || ctx->admin_inspect)
    {
        return ngx_http_dynamo_rl_planes_body(r, in);
    }

#if (NGX_HTTP_DYNAMO_RL_NOFAST)

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "dynamo rl filter: request plane body to the chain");

    return ngx_http_dynamo_rl_planes_body(r, in);

#endif

    /* the module's own body filter acts only on an error page of nginx's */

    if (in == NULL) {
        rc = ctx->error_body ? ngx_http_dynamo_rl_body_filter(r, in)
                             : ngx_http_next_body_filter(r, in);

        /* a flush of what the client did not take at once */

        if (ctx->complete) {
            ngx_http_dynamo_rl_ledger_sent(r, ctx, rc);
        }

        return rc;
    }

    ngx_http_dynamo_rl_status_body(ctx, in);

    rc = ngx_http_dynamo_rl_ledger_body(r, ctx, in);

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        return ctx->error_body ? ngx_http_dynamo_rl_body_filter(r, in)
                               : ngx_http_next_body_filter(r, in);
    }

    rc = ctx->error_body ? ngx_http_dynamo_rl_body_filter(r, in)
                         : ngx_http_next_body_filter(r, in);

    ngx_http_dynamo_rl_ledger_sent(r, ctx, rc);

    return rc;
}


static ngx_int_t
ngx_http_dynamo_rl_header_filter(ngx_http_request_t *r)
{
    ngx_uint_t                      plane;
    ngx_table_elt_t                *h;
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;
    ngx_http_dynamo_rl_list_iter_t  it;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    if (ctx == NULL && drlcf->plane == NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        && r->headers_out.status >= NGX_HTTP_BAD_REQUEST)
    {
        ctx = ngx_http_dynamo_rl_request_late(r, drlcf);
        if (ctx == NULL) {
            return NGX_ERROR;
        }
    }

    plane = ctx ? ctx->plane : drlcf->plane;

    if ((plane == NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY
         || plane == NGX_HTTP_DYNAMO_RL_PLANE_ADMIN
         || drlcf->api)
        && ngx_http_dynamo_rl_trusted_headers(r, plane) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ctx == NULL || ctx->attempt_id.len == 0) {
        return ngx_http_next_header_filter(r);
    }

    if (r->err_status >= NGX_HTTP_BAD_REQUEST
        && r->headers_out.status == r->err_status
        && ctx->plane == NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        && ngx_http_dynamo_rl_flat_error(r, ctx) != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* the gateway's id wins over anything the upstream sent by that name */

    for (h = ngx_http_dynamo_rl_list_first(&r->headers_out.headers, &it);
         h != NULL;
         h = ngx_http_dynamo_rl_list_next(&it))
    {
        if (h->key.len == ctx->header->len
            && ngx_strncasecmp(h->key.data, ctx->header->data,
                               ctx->header->len) == 0)
        {
            h->hash = 0;
        }
    }

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key = *ctx->header;
    h->value = ctx->attempt_id;

    return ngx_http_next_header_filter(r);
}


/*
 * the trusted listener is opened in browsers: nothing it answers is
 * sniffed into HTML; the discovery plane validated its body as JSON and
 * says so, whatever type the listener sent; a worker's answer is passed
 * on as it is, in a sandbox that runs nothing
 */

static ngx_int_t
ngx_http_dynamo_rl_trusted_headers(ngx_http_request_t *r, ngx_uint_t plane)
{
    ngx_uint_t        i, n;
    ngx_table_elt_t  *h;

    /* the first for every plane, both for the admin plane */

    static ngx_keyval_t  headers[] = {
        { ngx_string("X-Content-Type-Options"), ngx_string("nosniff") },
        { ngx_string("Content-Security-Policy"),
          ngx_string("sandbox; default-src 'none'") }
    };

    n = (plane == NGX_HTTP_DYNAMO_RL_PLANE_ADMIN) ? 2 : 1;

    for (i = 0; i < n; i++) {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        h->key = headers[i].key;
        h->value = headers[i].value;
    }

    if (plane == NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY) {
        ngx_str_set(&r->headers_out.content_type, "application/json");
        r->headers_out.content_type_len = sizeof("application/json") - 1;
        r->headers_out.content_type_lowcase = NULL;
        ngx_str_null(&r->headers_out.charset);
    }

    return NGX_OK;
}


/*
 * an error page of nginx's own (502 with no upstream, 504, 413, ...) on
 * the request plane is given Dynamo's flat shape, as clients parse it,
 * nested under "error" on SGLang's /generate
 */

static ngx_int_t
ngx_http_dynamo_rl_flat_error(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    u_char     *p;
    size_t      len;
    ngx_str_t   type;

    ngx_http_dynamo_rl_status_type(r->headers_out.status, &type);

    len = sizeof("{\"error\":{\"message\":\"\",\"type\":\"\",\"code\":}}\n")
          - 1 + 2 * type.len + NGX_INT_T_LEN;

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ctx->error.data = p;

    /* nested on SGLang's /generate */

    if (ngx_http_dynamo_rl_route_generate(r) == NGX_OK) {
        p = ngx_cpymem(p, "{\"error\":", sizeof("{\"error\":") - 1);
    }

    p = ngx_sprintf(p, "{\"message\":\"%V\",\"type\":\"%V\",\"code\":%ui}",
                    &type, &type, r->headers_out.status);

    if (ngx_http_dynamo_rl_route_generate(r) == NGX_OK) {
        *p++ = '}';
    }

    *p++ = LF;

    ctx->error.len = p - ctx->error.data;

    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    r->headers_out.charset.len = 0;

    r->headers_out.content_length_n = ctx->error.len;

    if (r->headers_out.content_length) {
        r->headers_out.content_length->hash = 0;
        r->headers_out.content_length = NULL;
    }

    ctx->error_body = 1;

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_chain_t               *cl;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    if (ctx == NULL || !ctx->error_body) {
        return ngx_http_next_body_filter(r, in);
    }

    /* nginx's HTML page is replaced by the flat JSON body, once */

    for (cl = in; cl; cl = cl->next) {
        cl->buf->pos = cl->buf->last;
        cl->buf->file_pos = cl->buf->file_last;

        if (cl->buf->last_buf) {
            break;
        }
    }

    if (cl == NULL) {
        return NGX_OK;
    }

    ctx->error_body = 0;

    return ngx_http_dynamo_rl_send_body(r, ngx_http_next_body_filter,
                                        ctx->error.data, ctx->error.len);
}


static ngx_int_t
ngx_http_dynamo_rl_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t                 *s;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    ctx = ngx_http_dynamo_rl_get_ctx(r->main);

    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    s = (ngx_str_t *) ((char *) ctx + data);

    if (s->len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = s->len;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->data = s->data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_plane_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_uint_t                      plane;
    ngx_conf_enum_t                *e;
    ngx_http_dynamo_rl_ctx_t       *ctx;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    ctx = ngx_http_dynamo_rl_get_ctx(r->main);

    if (ctx != NULL) {
        plane = ctx->plane;

    } else {
        drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);
        plane = drlcf->plane;
    }

    for (e = ngx_http_dynamo_rl_planes; e->name.len; e++) {
        if (e->value == plane) {
            v->len = e->name.len;
            v->valid = 1;
            v->no_cacheable = 0;
            v->not_found = 0;
            v->data = e->name.data;

            return NGX_OK;
        }
    }

    v->not_found = 1;

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_dynamo_rl_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static void *
ngx_http_dynamo_rl_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_dynamo_rl_main_conf_t));
    if (drmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     drmcf->shm_zone = NULL;
     *     drmcf->ctx_cleanup = NULL;
     *     drmcf->nsources = 0;
     *     drmcf->orphan_max = 0;
     *     drmcf->rand = NULL;
     *     drmcf->rand_pos = 0;
     *     drmcf->index[] = NULL;
     *     drmcf->index_pool[] = NULL;
     *     drmcf->index_serial = 0;
     *     drmcf->scopes = NULL;
     *     drmcf->store = NULL;
     */

    drmcf->ctx_cleanup = ngx_http_dynamo_rl_cleanup;

    return drmcf;
}


static void *
ngx_http_dynamo_rl_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_dynamo_rl_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_dynamo_rl_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->plane = NGX_HTTP_DYNAMO_RL_PLANE_UNSET;
     *     conf->methods = 0;
     *     conf->attempt_header = { 0, NULL };
     *     conf->attempt_upstream_header = { 0, NULL };
     *     conf->discovery = { 0, NULL };
     *     conf->ns_scope = { 0, NULL };
     *     conf->admin_prefix = { 0, NULL };
     *     conf->api = 0;
     *     conf->ns_value = NULL;
     *     conf->routes_value = NULL;
     *     conf->gate_read_only = 0;
     *     conf->body_tree = NULL;
     */

    conf->attempt_header_hash = NGX_CONF_UNSET_UINT;
    conf->attempt_upstream_header_hash = NGX_CONF_UNSET_UINT;
    conf->strip_routing_headers = NGX_CONF_UNSET;
    conf->accel_buffering = NGX_CONF_UNSET;
    conf->discovery_valid = NGX_CONF_UNSET_MSEC;
    conf->discovery_max_size = NGX_CONF_UNSET_SIZE;
    conf->ns_mode = NGX_CONF_UNSET_UINT;
    conf->admin_routes = NGX_CONF_UNSET_PTR;
    conf->log_level = NGX_CONF_UNSET_UINT;
    conf->ledger = NGX_CONF_UNSET;
    conf->attempt_ttl = NGX_CONF_UNSET_MSEC;
    conf->gate = NGX_CONF_UNSET;
    conf->body_policy = NGX_CONF_UNSET;
    conf->upload_prefixes = NGX_CONF_UNSET_PTR;
    conf->tenant = NGX_CONF_UNSET_PTR;
    conf->priority = NGX_CONF_UNSET_PTR;
    conf->strip_headers = NGX_CONF_UNSET_PTR;
    conf->admin_url = NGX_CONF_UNSET_PTR;

    return conf;
}


static char *
ngx_http_dynamo_rl_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_dynamo_rl_loc_conf_t *prev = parent;
    ngx_http_dynamo_rl_loc_conf_t *conf = child;

    ngx_http_upstream_conf_t        *ucf;
    ngx_http_core_loc_conf_t        *clcf;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    /*
     * a nested location, and the "if" and "limit_except" blocks that
     * nginx builds as locations with the parent's proxy_pass, inherit
     * the plane with all of its policy; the unset plane is 0, not
     * NGX_CONF_UNSET_UINT, so ngx_conf_merge_uint_value() cannot do it
     */

    if (conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_UNSET) {
        conf->plane = prev->plane;
        conf->admin_prefix = prev->admin_prefix;
    }

    if (conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_UNSET) {
        conf->plane = NGX_HTTP_DYNAMO_RL_PLANE_NONE;
    }

    /* a plane's default methods are not inherited by another plane */

    if (conf->methods == 0 && prev->plane == conf->plane) {
        conf->methods = prev->methods;
    }

    if (conf->methods == 0) {
        switch (conf->plane) {

        case NGX_HTTP_DYNAMO_RL_PLANE_REQUEST:
            conf->methods = NGX_HTTP_GET|NGX_HTTP_HEAD|NGX_HTTP_POST;
            break;

        case NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY:
            conf->methods = NGX_HTTP_GET|NGX_HTTP_HEAD;
            break;

        case NGX_HTTP_DYNAMO_RL_PLANE_ADMIN:
            conf->methods = NGX_HTTP_POST;
            break;
        }
    }

    if (conf->attempt_header.data == NULL) {
        conf->attempt_header = prev->attempt_header;
        conf->attempt_header_hash = prev->attempt_header_hash;
    }

    if (conf->attempt_header.data == NULL) {
        ngx_str_set(&conf->attempt_header, "X-Dynamo-Attempt-Id");
        conf->attempt_header_hash =
                              ngx_hash_key((u_char *) "x-dynamo-attempt-id",
                                           sizeof("x-dynamo-attempt-id") - 1);
    }

    if (conf->attempt_upstream_header.data == NULL) {
        conf->attempt_upstream_header = prev->attempt_upstream_header;
        conf->attempt_upstream_header_hash =
                                            prev->attempt_upstream_header_hash;
    }

    if (conf->attempt_upstream_header.data == NULL) {
        ngx_str_set(&conf->attempt_upstream_header, "x-request-id");
        conf->attempt_upstream_header_hash =
                                     ngx_hash_key((u_char *) "x-request-id",
                                                  sizeof("x-request-id") - 1);
    }

    ngx_conf_merge_ptr_value(conf->tenant, prev->tenant, NULL);
    ngx_conf_merge_ptr_value(conf->priority, prev->priority, NULL);
    ngx_conf_merge_ptr_value(conf->strip_headers, prev->strip_headers, NULL);

    if (conf->body_tree == NULL) {
        conf->body_tree = prev->body_tree;
    }

    if (ngx_http_dynamo_rl_merge_names(cf, prev, conf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_value(conf->strip_routing_headers,
                         prev->strip_routing_headers, 1);
    ngx_conf_merge_value(conf->accel_buffering, prev->accel_buffering, 0);

    if (conf->discovery.data == NULL) {
        conf->discovery = prev->discovery;
    }

    ngx_conf_merge_msec_value(conf->discovery_valid, prev->discovery_valid,
                              1000);
    ngx_conf_merge_size_value(conf->discovery_max_size,
                              prev->discovery_max_size, 4 * 1024 * 1024);

    if (conf->ns_mode == NGX_CONF_UNSET_UINT) {
        conf->ns_mode = prev->ns_mode;
        conf->ns_scope = prev->ns_scope;
        conf->ns_value = prev->ns_value;
    }

    if (conf->ns_mode == NGX_CONF_UNSET_UINT) {
        conf->ns_mode = NGX_HTTP_DYNAMO_RL_NS_ANY;
    }

    if (conf->admin_routes == NGX_CONF_UNSET_PTR) {
        conf->routes_value = prev->routes_value;
    }

    ngx_conf_merge_ptr_value(conf->admin_routes, prev->admin_routes, NULL);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_WARN);
    ngx_conf_merge_value(conf->ledger, prev->ledger, 1);
    ngx_conf_merge_msec_value(conf->attempt_ttl, prev->attempt_ttl, 600000);
    ngx_conf_merge_value(conf->gate, prev->gate, 1);
    ngx_conf_merge_value(conf->body_policy, prev->body_policy, 1);
    ngx_conf_merge_ptr_value(conf->upload_prefixes, prev->upload_prefixes,
                             NULL);
    ngx_conf_merge_ptr_value(conf->admin_url, prev->admin_url, NULL);

    /*
     * the source of a location that reads or stores a snapshot: its
     * discovery URI as resolved in its own server
     */

    if (conf->discovery.data != NULL
        && (conf->api || conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY
            || conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_ADMIN)
        && ngx_http_dynamo_rl_discovery_source(cf, conf) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (conf->plane <= NGX_HTTP_DYNAMO_RL_PLANE_NONE) {
        return NGX_CONF_OK;
    }

    drmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_dynamo_rl_module);

    if (drmcf->shm_zone == NULL
        && (conf->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST || conf->ledger
            || conf->gate))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"dynamo_rl_plane %s\" requires "
                           "\"dynamo_rl_zone\"%s",
                           conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_ADMIN
                           ? "admin"
                           : conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY
                             ? "discovery" : "request",
                           conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
                           ? " for the attempt ledger and the gate" : "");
        return NGX_CONF_ERROR;
    }

    /*
     * what the gateway assigns is removed from bodies by the body policy
     * only: without it a client's nvext.cache_salt and agent_hints
     * priorities would reach the frontend beside the gateway's headers
     */

    if (conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_REQUEST && !conf->body_policy
        && (conf->tenant != NULL || conf->priority != NULL))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%s\" requires \"dynamo_rl_body_policy on\": "
                           "a body's %s would reach the frontend",
                           conf->tenant != NULL ? "dynamo_rl_tenant"
                                                : "dynamo_rl_priority",
                           conf->tenant != NULL
                           ? "nvext.cache_salt"
                           : "nvext.agent_hints.priority");
        return NGX_CONF_ERROR;
    }

    /*
     * the zone reserves room for each source's largest snapshot: see
     * zone_reserve
     */

    if (conf->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST) {
        if (conf->source
            && (conf->source_named
                || conf->plane != NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY))
        {
            if (conf->discovery_max_size
                > drmcf->source_max[conf->source - 1])
            {
                drmcf->source_max[conf->source - 1] =
                                                     conf->discovery_max_size;
            }

        } else if (conf->discovery_max_size > drmcf->orphan_max) {
            drmcf->orphan_max = conf->discovery_max_size;
        }
    }

    /*
     * a discovery-plane answer refreshes only the snapshot of a source the
     * location names in its own block (see store_source); the method check
     * refuses what a "limit_except" block would serve
     */

    clcf = ((ngx_http_conf_ctx_t *) cf->ctx)
               ->loc_conf[ngx_http_core_module.ctx_index];

    if (conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY
        && !conf->source_named && drmcf->named && !clcf->lmt_excpt)
    {
        if (clcf->noname) {
            ngx_log_error(NGX_LOG_WARN, cf->log, 0,
                          "an \"if\" block in the discovery-plane location "
                          "\"%V\" may proxy elsewhere: its answers refresh "
                          "no snapshot", &clcf->name);

        } else {
            ngx_log_error(NGX_LOG_WARN, cf->log, 0,
                          "the discovery-plane location \"%V\" does not "
                          "name its source in its own block: its answers "
                          "refresh no snapshot; add \"dynamo_rl_discovery\" "
                          "to it", &clcf->name);
        }
    }

    if (conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_ADMIN) {
        if (conf->discovery.data == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"dynamo_rl_plane admin\" requires "
                               "\"dynamo_rl_discovery\"");
            return NGX_CONF_ERROR;
        }

        clcf = ((ngx_http_conf_ctx_t *) cf->ctx)
                   ->loc_conf[ngx_http_core_module.ctx_index];

        /* under "satisfy any" another module could skip the admin check */

        if (clcf->satisfy != NGX_HTTP_SATISFY_ALL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"dynamo_rl_plane admin\" cannot be used "
                               "with \"satisfy any\"");
            return NGX_CONF_ERROR;
        }
    }

    /* a caller's scope from a variable is checked in the access phase */

    if (conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_DISCOVERY
        && (conf->ns_value != NULL || conf->routes_value != NULL))
    {
        clcf = ((ngx_http_conf_ctx_t *) cf->ctx)
                   ->loc_conf[ngx_http_core_module.ctx_index];

        if (clcf->satisfy != NGX_HTTP_SATISFY_ALL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"dynamo_rl_plane discovery\" with a "
                               "caller's scope from variables cannot be "
                               "used with \"satisfy any\"");
            return NGX_CONF_ERROR;
        }
    }

    /*
     * upstreams cannot steer nginx from a plane location: the proxy module
     * has merged its configuration before ours, as a static module
     */

    ucf = ((ngx_http_conf_ctx_t *) cf->ctx)
              ->loc_conf[ngx_http_proxy_module.ctx_index];

    if (ucf != NULL) {
        ucf->ignore_headers |= NGX_HTTP_UPSTREAM_IGN_XA_REDIRECT
                               |NGX_HTTP_UPSTREAM_IGN_XA_EXPIRES
                               |NGX_HTTP_UPSTREAM_IGN_XA_LIMIT_RATE
                               |NGX_HTTP_UPSTREAM_IGN_XA_CHARSET;

        if (!conf->accel_buffering) {
            ucf->ignore_headers |= NGX_HTTP_UPSTREAM_IGN_XA_BUFFERING;
        }

        /* generation and admin calls are not idempotent */

        if (ucf->next_upstream & NGX_HTTP_UPSTREAM_FT_NON_IDEMPOTENT) {
            ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                               "\"proxy_next_upstream non_idempotent\" is "
                               "ignored in a dynamo_rl plane location");

            ucf->next_upstream &= ~NGX_HTTP_UPSTREAM_FT_NON_IDEMPOTENT;
        }

        /* a request that reached one upstream is not sent to another */

        if (conf->plane == NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
            && ngx_http_dynamo_rl_request_upstream(cf, drmcf, ucf->upstream)
               != NGX_CONF_OK)
        {
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_dynamo_rl_plane(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_dynamo_rl_loc_conf_t *drlcf = conf;

    ngx_str_t                 *value;
    ngx_conf_enum_t           *e;
    ngx_http_core_loc_conf_t  *clcf;

    if (drlcf->plane != NGX_HTTP_DYNAMO_RL_PLANE_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (e = ngx_http_dynamo_rl_planes; e->name.len; e++) {
        if (e->name.len == value[1].len
            && ngx_strcmp(e->name.data, value[1].data) == 0)
        {
            break;
        }
    }

    if (e->name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid plane \"%V\", it must be \"request\", "
                           "\"discovery\" or \"admin\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    drlcf->plane = e->value;

    if (drlcf->plane != NGX_HTTP_DYNAMO_RL_PLANE_ADMIN) {
        return NGX_CONF_OK;
    }

    /*
     * the admin path is {instance_id}/engine/{route} after the prefix of
     * the location that names the plane, which the locations nested in it
     * inherit; a regular expression or a name has no such prefix
     */

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

#if (NGX_PCRE)
    if (clcf->regex != NULL) {
        return "requires a prefix location, not a regular expression";
    }
#endif

    if (clcf->named || clcf->exact_match) {
        return "requires a prefix location";
    }

    drlcf->admin_prefix = clcf->name;

    return NGX_CONF_OK;
}


static char *
ngx_http_dynamo_rl_methods(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_dynamo_rl_loc_conf_t *drlcf = conf;

    ngx_str_t                         *value;
    ngx_uint_t                         i;
    ngx_http_dynamo_rl_method_name_t  *m;

    if (drlcf->methods != 0) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        for (m = ngx_http_dynamo_rl_method_names; m->name.len; m++) {
            if (m->name.len == value[i].len
                && ngx_strcmp(m->name.data, value[i].data) == 0)
            {
                break;
            }
        }

        if (m->name.len == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid method \"%V\"", &value[i]);
            return NGX_CONF_ERROR;
        }

        if (drlcf->methods & m->method) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "duplicate method \"%V\"", &value[i]);
            return NGX_CONF_ERROR;
        }

        drlcf->methods |= m->method;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_dynamo_rl_header_name(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char  *p = conf;

    u_char      c, *lowcase;
    ngx_str_t  *field, *value;
    ngx_uint_t  i, *hash;

    field = (ngx_str_t *) (p + cmd->offset);
    hash = (ngx_uint_t *) (p + cmd->offset + sizeof(ngx_str_t));

    if (field->data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 3 && ngx_strcmp(value[1].data, "off") == 0) {
        if (cmd->post == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid header name \"%V\"", &value[1]);
            return NGX_CONF_ERROR;
        }

        ngx_str_set(field, "");
        *hash = 0;
        return NGX_CONF_OK;
    }

    if (value[1].len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid header name \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    lowcase = ngx_pnalloc(cf->pool, value[1].len);
    if (lowcase == NULL) {
        return NGX_CONF_ERROR;
    }

    /* an RFC 9110 token */

    for (i = 0; i < value[1].len; i++) {
        c = value[1].data[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9')
            || ngx_strlchr((u_char *) "!#$%&'*+-.^_`|~",
                           (u_char *) "!#$%&'*+-.^_`|~" + 15, c)
               != NULL)
        {
            lowcase[i] = ngx_tolower(c);
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid header name \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    *field = value[1];
    *hash = ngx_hash_key(lowcase, value[1].len);

    return NGX_CONF_OK;
}


/*
 * what the request plane would otherwise work out for every request: the
 * id headers' names in lower case (their lowcase_key upstream), and
 * whether the upstream name is another header, x-request-id, or none
 */

static ngx_int_t
ngx_http_dynamo_rl_merge_names(ngx_conf_t *cf,
    ngx_http_dynamo_rl_loc_conf_t *prev, ngx_http_dynamo_rl_loc_conf_t *conf)
{
    u_char      *lc;
    ngx_str_t   *name;
    ngx_uint_t   i, n;

    static ngx_str_t  request_id = ngx_string("request-id");

    for (n = 0; n < 2; n++) {
        name = n ? &conf->attempt_upstream_header : &conf->attempt_header;

        if (name->data == (n ? prev->attempt_upstream_header.data
                              : prev->attempt_header.data))
        {
            lc = n ? prev->attempt_upstream_header_lc
                   : prev->attempt_header_lc;

        } else {
            lc = NULL;
        }

        if (lc == NULL) {
            lc = ngx_pnalloc(cf->pool, name->len + 1);
            if (lc == NULL) {
                return NGX_ERROR;
            }

            for (i = 0; i < name->len; i++) {
                lc[i] = ngx_tolower(name->data[i]);
            }

            lc[i] = '\0';
        }

        if (n) {
            conf->attempt_upstream_header_lc = lc;

        } else {
            conf->attempt_header_lc = lc;
        }
    }

    name = &conf->attempt_upstream_header;
    lc = conf->attempt_upstream_header_lc;

    if (name->len == 0
        || (name->len == conf->attempt_header.len
            && ngx_strncmp(lc, conf->attempt_header_lc, name->len) == 0))
    {
        conf->attempt_upstream = NGX_HTTP_DYNAMO_RL_UPSTREAM_NONE;

    } else if (name->len == sizeof("x-request-id") - 1
               && ngx_strncmp(lc, "x-request-id", name->len) == 0)
    {
        conf->attempt_upstream = NGX_HTTP_DYNAMO_RL_UPSTREAM_XRID;

    } else {
        conf->attempt_upstream = NGX_HTTP_DYNAMO_RL_UPSTREAM_OTHER;
    }

    conf->request_id_hash = ngx_hash_key(request_id.data, request_id.len);
    conf->header_lens = ngx_http_dynamo_rl_request_lens(conf);

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_add_handler(ngx_http_core_main_conf_t *cmcf,
    ngx_uint_t phase, ngx_http_handler_pt handler, ngx_uint_t first)
{
    ngx_http_handler_pt  *h, *elts;

    h = ngx_array_push(&cmcf->phases[phase].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    if (first) {
        elts = cmcf->phases[phase].handlers.elts;
        ngx_memmove(&elts[1], &elts[0], (h - elts) * sizeof(*h));
        h = &elts[0];
    }

    *h = handler;

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_init(ngx_conf_t *cf)
{
    ngx_uint_t                       n;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_core_main_conf_t       *cmcf;
    ngx_http_dynamo_rl_loc_conf_t   *drlcf;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    drmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_dynamo_rl_module);

    if (drmcf->shm_zone != NULL) {
        zone = drmcf->shm_zone->data;
        zone->state_check = ngx_http_dynamo_rl_state_check;
        zone->state_load = ngx_http_dynamo_rl_state_load;

        /* an attempt in flight when the file was written: http's ttl */

        drlcf = ngx_http_conf_get_module_loc_conf(cf,
                                                  ngx_http_dynamo_rl_module);
        zone->state_ttl = &drlcf->attempt_ttl;
    }

    /* the zone keeps the store's gate as last read, and its figures */

    if (drmcf->store != NULL && drmcf->shm_zone == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"dynamo_rl_store\" requires \"dynamo_rl_zone\"");
        return NGX_ERROR;
    }

    /* the store's host names: http{}'s "resolver", or resolved now */

    if (drmcf->store != NULL
        && ngx_http_dynamo_rl_store_resolve_conf(cf, drmcf->store->resolve)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (drmcf->store == NULL && drmcf->shm_zone != NULL && zone->stateless) {
        ngx_log_error(NGX_LOG_WARN, cf->log, 0,
                      "dynamo_rl zone \"%V\" has no \"state\" parameter: "
                      "a restart or a binary upgrade opens the gate and "
                      "forgets used attempt ids in %s:%ui",
                      &zone->name, zone->file, zone->line);
    }

    if (ngx_http_dynamo_rl_refusals_check(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    /*
     * a discovery-plane location that names no source of its own stores
     * into none, or, when the configuration has no source, into one of
     * its own (see store_source)
     */

    if (drmcf->nsources == 0 && drmcf->orphan_max) {
        ngx_str_set(&drmcf->sources[0], "");
        drmcf->source_key[0] = 0;
        drmcf->source_max[0] = drmcf->orphan_max;
        n = 1;

    } else {
        n = drmcf->nsources;
    }

    if (drmcf->shm_zone != NULL
        && ngx_http_dynamo_rl_zone_reserve(cf, drmcf->shm_zone, n,
                                           drmcf->sources,
                                           drmcf->source_key,
                                           drmcf->source_max)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    /*
     * the access phase runs its handlers from the end of the array: first
     * in it, the admin check runs after allow/deny and auth, so that a
     * refused client learns nothing of the fleet and triggers no refresh;
     * the log phase runs from the start: first in it, the outcome is
     * settled before the access log is written
     */

    if (ngx_http_dynamo_rl_add_handler(cmcf, NGX_HTTP_PREACCESS_PHASE,
                                       ngx_http_dynamo_rl_preaccess_handler,
                                       0)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_dynamo_rl_add_handler(cmcf, NGX_HTTP_PRECONTENT_PHASE,
                                       ngx_http_dynamo_rl_precontent_handler,
                                       0)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_dynamo_rl_add_handler(cmcf, NGX_HTTP_ACCESS_PHASE,
                                       ngx_http_dynamo_rl_admin_handler, 1)
        != NGX_OK
        || ngx_http_dynamo_rl_add_handler(cmcf, NGX_HTTP_ACCESS_PHASE,
                                          ngx_http_dynamo_rl_scope_handler,
                                          1)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_dynamo_rl_add_handler(cmcf, NGX_HTTP_LOG_PHASE,
                                       ngx_http_dynamo_rl_log_handler, 1)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_dynamo_rl_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_dynamo_rl_body_filter;

    if (ngx_http_dynamo_rl_ledger_filter_init(cf) != NGX_OK
        || ngx_http_dynamo_rl_admin_filter_init(cf) != NGX_OK
        || ngx_http_dynamo_rl_status_filter_init(cf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_dynamo_rl_discovery_filter_init(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_dynamo_rl_planes_header = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_dynamo_rl_plane_header_filter;

    ngx_http_dynamo_rl_planes_body = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_dynamo_rl_plane_body_filter;

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_init_process(ngx_cycle_t *cycle)
{
    ngx_pool_cleanup_t              *cln;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    if (cycle->conf_ctx[ngx_http_module.index] == NULL) {
        return NGX_OK;
    }

    drmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                                ngx_http_dynamo_rl_module);

    /* randomness is drawn after fork(), never shared between workers */

    drmcf->rand = ngx_palloc(cycle->pool, NGX_HTTP_DYNAMO_RL_RAND_SIZE);
    if (drmcf->rand == NULL) {
        return NGX_ERROR;
    }

    drmcf->rand_pos = NGX_HTTP_DYNAMO_RL_RAND_SIZE;

    /*
     * the store's connection, worker processes only: first, so that the
     * ledger's ends of a dead predecessor's attempts are queued for it
     */

    if (drmcf->store != NULL
        && (ngx_process == NGX_PROCESS_WORKER
            || ngx_process == NGX_PROCESS_SINGLE))
    {
        zone = drmcf->shm_zone->data;
        drmcf->store->stats = &zone->sh->store;

        ngx_http_dynamo_rl_store_slots(zone, cycle);

        if (ngx_http_dynamo_rl_store_init_process(drmcf->store, cycle)
            != NGX_OK
            || ngx_http_dynamo_rl_gate_store_init_process(zone, drmcf->store,
                                                          cycle)
               != NGX_OK
            || ngx_http_dynamo_rl_ledger_store_init_process(drmcf->store,
                                                            cycle)
               != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (drmcf->shm_zone != NULL) {
        /* first the ledger ends a dead predecessor's attempts */
        ngx_http_dynamo_rl_ledger_init_process(drmcf->shm_zone->data);
        ngx_http_dynamo_rl_gate_init_process(drmcf->shm_zone->data);

        if (ngx_http_dynamo_rl_state_init_process(cycle,
                                                  drmcf->shm_zone->data)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    /* the process's snapshot index is not cycle pool memory */

    cln = ngx_pool_cleanup_add(cycle->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_dynamo_rl_exit_index;
    cln->data = drmcf;

    return NGX_OK;
}


/*
 * the words of the worker processes' store connections (store_conn_up()),
 * from the zone's pool: only a zone with a store pays for them, taken by
 * the first worker process, kept by a reload that keeps the zone
 */

static void
ngx_http_dynamo_rl_store_slots(ngx_http_dynamo_rl_zone_t *zone,
    ngx_cycle_t *cycle)
{
    ngx_atomic_t  *slot;

    if (zone->sh->store.slot != NULL) {
        return;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    slot = zone->sh->store.slot;

    if (slot == NULL) {
        slot = ngx_slab_calloc_locked(zone->shpool,
                                      NGX_HTTP_DYNAMO_RL_STORE_SLOTS
                                      * sizeof(ngx_atomic_t));
        zone->sh->store.slot = slot;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (slot == NULL) {
        ngx_log_error(NGX_LOG_CRIT, cycle->log, 0,
                      "dynamo_rl zone \"%V\" has no room for the store's "
                      "%uz bytes of worker process state: "
                      "dynamo_rl_store_up reads 0, make the zone larger",
                      &zone->name,
                      NGX_HTTP_DYNAMO_RL_STORE_SLOTS * sizeof(ngx_atomic_t));
    }
}


static void
ngx_http_dynamo_rl_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    if (cycle->conf_ctx[ngx_http_module.index] != NULL) {
        drmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                                    ngx_http_dynamo_rl_module);

        if (drmcf->store != NULL) {
            ngx_http_dynamo_rl_ledger_store_exit_process(drmcf->store);
            ngx_http_dynamo_rl_store_exit_process(drmcf->store);
        }
    }

    ngx_http_dynamo_rl_state_exit_process(cycle);
}


static void
ngx_http_dynamo_rl_exit_index(void *data)
{
    ngx_http_dynamo_rl_main_conf_t *drmcf = data;

    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SOURCES; i++) {
        if (drmcf->index_pool[i] != NULL) {
            ngx_destroy_pool(drmcf->index_pool[i]);
            drmcf->index_pool[i] = NULL;
            drmcf->index[i] = NULL;
        }
    }
}
