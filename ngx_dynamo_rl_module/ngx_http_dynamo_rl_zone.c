
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_parse.h"
#include "ngx_http_dynamo_rl_zone.h"

#include <openssl/rand.h>


static char *ngx_http_dynamo_rl_zone_state(ngx_conf_t *cf,
    ngx_http_dynamo_rl_zone_t *zone, ngx_str_t *value);
static ngx_int_t ngx_http_dynamo_rl_zone_buckets(
    ngx_http_dynamo_rl_zone_t *zone, size_t size);
static ngx_int_t ngx_http_dynamo_rl_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);


char *
ngx_http_dynamo_rl_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_shm_zone_t  **shm_zone = (ngx_shm_zone_t **) ((char *) conf
                                                      + cmd->offset);

    u_char                     *p;
    ssize_t                     size;
    ngx_str_t                  *value, *state, name, s;
    ngx_uint_t                  i;
    ngx_http_dynamo_rl_zone_t  *zone;

    if (*shm_zone != NULL) {
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

    *shm_zone = ngx_shared_memory_add(cf, &name, size,
                                      &ngx_http_dynamo_rl_module);
    if (*shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if ((*shm_zone)->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate zone \"%V\"", &name);
        return NGX_CONF_ERROR;
    }

    zone->name = name;
    zone->file = cf->conf_file->file.name.data;
    zone->line = cf->conf_file->line;

    if (ngx_http_dynamo_rl_zone_state(cf, zone, state) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    (*shm_zone)->init = ngx_http_dynamo_rl_init_zone;
    (*shm_zone)->data = zone;

    return NGX_CONF_OK;
}


/*
 * after the http block, with the largest max_size of the locations that
 * store a snapshot: the room is reserved in the zone, apart from the
 * ledger, so that no pattern of request-plane traffic can keep a valid
 * snapshot out, and nginx -t refuses a zone that cannot hold it
 */

ngx_int_t
ngx_http_dynamo_rl_zone_reserve(ngx_conf_t *cf, ngx_shm_zone_t *shm_zone,
    size_t max_size)
{
    size_t                      need;
    ngx_http_dynamo_rl_zone_t  *zone;

    zone = shm_zone->data;

    if (max_size == 0) {
        zone->reserve = 0;
        return NGX_OK;
    }

    zone->reserve = ngx_align(max_size, ngx_pagesize);

    need = max_size + max_size / 64 + NGX_HTTP_DYNAMO_RL_ZONE_BASE;

    if (shm_zone->shm.size >= need) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                  "dynamo_rl zone \"%V\" of %uz bytes is too small for a "
                  "discovery snapshot of max_size=%uz: it needs at least "
                  "max_size + max_size/64 + 64k = %uz bytes, plus the "
                  "attempt ledger, in %s:%ui",
                  &zone->name, shm_zone->shm.size, max_size, need,
                  zone->file, zone->line);

    return NGX_ERROR;
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

        /* the pages of a zone in use cannot be rearranged under it */

        if (zone->reserve > ozone->sh->room_size) {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "dynamo_rl zone \"%V\" holds %uz bytes for a "
                          "discovery snapshot and max_size now needs %uz: "
                          "restart nginx, or change the zone's size for "
                          "a new zone", &shm_zone->shm.name,
                          ozone->sh->room_size, zone->reserve);
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
    ngx_queue_init(&zone->sh->active);

    /* first, while the pool is empty: the pages are contiguous */

    if (zone->reserve) {
        zone->sh->room = ngx_slab_alloc(zone->shpool, zone->reserve);
        if (zone->sh->room == NULL) {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "dynamo_rl zone \"%V\" cannot hold a discovery "
                          "snapshot of %uz bytes", &shm_zone->shm.name,
                          zone->reserve);
            return NGX_ERROR;
        }

        zone->sh->room_size = zone->reserve;
    }

    if (ngx_http_dynamo_rl_zone_buckets(zone,
                                       shm_zone->shm.size - zone->reserve)
        != NGX_OK)
    {
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

    /*
     * a new zone: a restart, a binary upgrade, a renamed or resized zone;
     * the state file's reader, set by the module, is above this file
     */

    if (zone->state_load == NULL) {
        return NGX_OK;
    }

    return zone->state_load(zone, shm_zone->shm.log);
}


/*
 * the ledger's index: one bucket for every record the zone could hold
 * (128 bytes each): a new id, the common case, then walks about one
 * record, which costs a cache miss in a zone the kernel's work evicts
 * between two requests; and the key of its SipHash, drawn per zone
 */

static ngx_int_t
ngx_http_dynamo_rl_zone_buckets(ngx_http_dynamo_rl_zone_t *zone, size_t size)
{
    ngx_uint_t  n;

    for (n = 64; n * 128 < size; n *= 2) { /* void */ }

    if (RAND_bytes(zone->sh->key, sizeof(zone->sh->key)) != 1
        || RAND_bytes((u_char *) &zone->sh->instance,
                      sizeof(zone->sh->instance))
           != 1)
    {
        ngx_log_error(NGX_LOG_EMERG, ngx_cycle->log, 0,
                      "RAND_bytes() failed for dynamo_rl zone \"%V\"",
                      &zone->name);
        return NGX_ERROR;
    }

    zone->sh->buckets = ngx_slab_calloc(zone->shpool, n * sizeof(void *));
    if (zone->sh->buckets == NULL) {
        return NGX_ERROR;
    }

    zone->sh->mask = n - 1;

    return NGX_OK;
}


static char *
ngx_http_dynamo_rl_zone_state(ngx_conf_t *cf, ngx_http_dynamo_rl_zone_t *zone,
    ngx_str_t *value)
{
    u_char      *p;
    ngx_str_t    path;
    ngx_path_t  *dir;

    zone->state_fd = NGX_INVALID_FILE;

    if (value == NULL) {
        /* warned about after the http block, unless a store keeps them */
        zone->stateless = 1;
        return NGX_CONF_OK;
    }

    path.data = value->data + sizeof("state=") - 1;
    path.len = value->len - (sizeof("state=") - 1);

    if (path.len == 0 || path.data[path.len - 1] == '/') {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid state file \"%V\"", value);
        return NGX_CONF_ERROR;
    }

    if (ngx_conf_full_name(cf->cycle, &path, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    zone->state = path;

    for (p = path.data + path.len; p[-1] != '/'; p--) {
        /* void */
    }

    /* the directory, "/" included when it is the root */

    zone->state_dir.len = (p - path.data > 1) ? p - 1 - path.data : 1;
    zone->state_dir.data = ngx_pnalloc(cf->pool, zone->state_dir.len + 1);
    if (zone->state_dir.data == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memcpy(zone->state_dir.data, path.data, zone->state_dir.len);
    zone->state_dir.data[zone->state_dir.len] = '\0';

    /*
     * a directory of its own, created at start and given to the worker
     * processes' user as nginx does for proxy_temp_path; never "/"
     */

    if (zone->state_dir.len > 1) {
        dir = ngx_pcalloc(cf->pool, sizeof(ngx_path_t));
        if (dir == NULL) {
            return NGX_CONF_ERROR;
        }

        dir->name = zone->state_dir;
        dir->conf_file = cf->conf_file->file.name.data;
        dir->line = cf->conf_file->line;

        if (ngx_add_path(cf, &dir) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    zone->state_temp.len = path.len + sizeof(".tmp") - 1;
    zone->state_temp.data = ngx_pnalloc(cf->pool, zone->state_temp.len + 1);
    if (zone->state_temp.data == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memcpy(ngx_cpymem(zone->state_temp.data, path.data, path.len),
               ".tmp", sizeof(".tmp"));

    return NGX_CONF_OK;
}


/* a duration into one of the zone's histograms, by any process */

void
ngx_http_dynamo_rl_zone_observe(ngx_http_dynamo_rl_shctx_t *sh,
    ngx_uint_t hist, ngx_msec_t ms)
{
    ngx_uint_t  i;

    i = ngx_http_dynamo_rl_bucket(ms);

    (void) ngx_atomic_fetch_add(&sh->hist[hist][i], 1);
    (void) ngx_atomic_fetch_add(&sh->hist_sum[hist], ms);
}
