
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"


static ngx_int_t ngx_http_dynamo_rl_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);


char *
ngx_http_dynamo_rl_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_dynamo_rl_main_conf_t *drmcf = conf;

    u_char                     *p;
    ssize_t                     size;
    ngx_str_t                  *value, *state, name, s;
    ngx_uint_t                  i;
    ngx_http_dynamo_rl_zone_t  *zone;

    if (drmcf->shm_zone != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    size = 0;
    name.len = 0;
    state = NULL;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {

            name.data = value[i].data + 5;

            p = (u_char *) ngx_strchr(name.data, ':');

            if (p == NULL) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid zone size \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            name.len = p - name.data;

            s.data = p + 1;
            s.len = value[i].data + value[i].len - s.data;

            size = ngx_parse_size(&s);

            if (size == NGX_ERROR) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid zone size \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            if (size < (ssize_t) (8 * ngx_pagesize)) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "zone \"%V\" is too small", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "state=", 6) == 0) {

            if (state != NULL) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "duplicate parameter \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            state = &value[i];
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    if (name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    zone = ngx_pcalloc(cf->pool, sizeof(ngx_http_dynamo_rl_zone_t));
    if (zone == NULL) {
        return NGX_CONF_ERROR;
    }

    drmcf->shm_zone = ngx_shared_memory_add(cf, &name, size,
                                            &ngx_http_dynamo_rl_module);
    if (drmcf->shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (drmcf->shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate zone \"%V\"", &name);
        return NGX_CONF_ERROR;
    }

    zone->name = name;

    if (ngx_http_dynamo_rl_state_conf(cf, zone, state) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    drmcf->shm_zone->init = ngx_http_dynamo_rl_init_zone;
    drmcf->shm_zone->data = zone;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_dynamo_rl_zone_t  *ozone = data;

    size_t                      len;
    ngx_http_dynamo_rl_zone_t  *zone;

    zone = shm_zone->data;

    if (ozone) {
        if (ozone->sh->version != NGX_HTTP_DYNAMO_RL_ZONE_VERSION) {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "dynamo_rl zone \"%V\" was created by an "
                          "incompatible version of the module, "
                          "restart nginx instead of reloading it",
                          &shm_zone->shm.name);
            return NGX_ERROR;
        }

        zone->sh = ozone->sh;
        zone->shpool = ozone->shpool;

        return NGX_OK;
    }

    zone->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        zone->sh = zone->shpool->data;

        return NGX_OK;
    }

    zone->sh = ngx_slab_calloc(zone->shpool,
                               sizeof(ngx_http_dynamo_rl_shctx_t));
    if (zone->sh == NULL) {
        return NGX_ERROR;
    }

    zone->sh->version = NGX_HTTP_DYNAMO_RL_ZONE_VERSION;

    ngx_queue_init(&zone->sh->finished);

    if (ngx_http_dynamo_rl_ledger_init(zone, shm_zone->shm.size) != NGX_OK) {
        return NGX_ERROR;
    }

    zone->shpool->data = zone->sh;

    len = sizeof(" in dynamo_rl zone \"\"") + shm_zone->shm.name.len;

    zone->shpool->log_ctx = ngx_slab_alloc(zone->shpool, len);
    if (zone->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(zone->shpool->log_ctx, " in dynamo_rl zone \"%V\"%Z",
                &shm_zone->shm.name);

    /* exhaustion is expected under load and logged once, by the caller */
    zone->shpool->log_nomem = 0;

    /* a new zone: a restart, a binary upgrade, a renamed or resized zone */

    return ngx_http_dynamo_rl_state_load(zone, shm_zone->shm.log);
}
