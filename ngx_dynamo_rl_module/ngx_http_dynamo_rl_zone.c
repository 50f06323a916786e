
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
static ngx_int_t ngx_http_dynamo_rl_zone_slots(ngx_shm_zone_t *shm_zone,
    ngx_http_dynamo_rl_zone_t *zone, ngx_uint_t fresh);
static ngx_int_t ngx_http_dynamo_rl_zone_slot_is(
    ngx_http_dynamo_rl_snap_t *snap, ngx_str_t *name, uint32_t key);


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
 * after the http block, with each discovery source and the largest
 * max_size of the locations that store its snapshot: the room is reserved
 * in the zone, a snapshot's apart from another's and from the ledger, so
 * that no pattern of request-plane traffic, and no other source, can keep
 * a valid snapshot out, and nginx -t refuses a zone that cannot hold them
 */

ngx_int_t
ngx_http_dynamo_rl_zone_reserve(ngx_conf_t *cf, ngx_shm_zone_t *shm_zone,
    ngx_uint_t n, ngx_str_t *names, uint32_t *keys, size_t *max_size)
{
    size_t                      need, sum;
    ngx_uint_t                  i;
    ngx_http_dynamo_rl_zone_t  *zone;

    zone = shm_zone->data;

    zone->nsources = n;
    need = NGX_HTTP_DYNAMO_RL_ZONE_BASE;
    sum = 0;

    for (i = 0; i < n; i++) {
        zone->source_names[i] = names[i];
        zone->source_keys[i] = keys[i];
        zone->reserve[i] = ngx_align(max_size[i], ngx_pagesize);

        need += max_size[i] + max_size[i] / 64;
        sum += max_size[i];
    }

    if (n == 0 || shm_zone->shm.size >= need) {
        return NGX_OK;
    }

    if (n == 1) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "dynamo_rl zone \"%V\" of %uz bytes is too small for "
                      "a discovery snapshot of max_size=%uz: it needs at "
                      "least max_size + max_size/64 + 64k = %uz bytes, plus "
                      "the attempt ledger, in %s:%ui",
                      &zone->name, shm_zone->shm.size, max_size[0], need,
                      zone->file, zone->line);

    } else {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "dynamo_rl zone \"%V\" of %uz bytes is too small for "
                      "the snapshots of %ui discovery sources, max_size=%uz "
                      "in all: it needs at least each max_size + "
                      "max_size/64, and 64k, = %uz bytes, plus the attempt "
                      "ledger, in %s:%ui",
                      &zone->name, shm_zone->shm.size, n, sum, need,
                      zone->file, zone->line);
    }

    return NGX_ERROR;
}


/*
 * a hash of the (instance_id, system_url) sets of every source's current
 * snapshot, for the gate's "members_changed"; "known": any snapshot at
 * all.  Under the zone's mutex.
 */

uint64_t
ngx_http_dynamo_rl_zone_members(ngx_http_dynamo_rl_shctx_t *sh,
    ngx_uint_t *known)
{
    uint64_t                    h;
    ngx_uint_t                  i;
    ngx_http_dynamo_rl_snap_t  *snap;

    h = 0xcbf29ce484222325ULL;
    *known = 0;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SOURCES; i++) {
        snap = &sh->snaps[i];

        if (snap->raw == NULL) {
            continue;
        }

        *known = 1;
        h = (h ^ snap->members ^ i) * 0x100000001b3ULL;
    }

    return h;
}


static ngx_int_t
ngx_http_dynamo_rl_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_dynamo_rl_zone_t  *ozone = data;

    size_t                      len, reserved;
    ngx_uint_t                  i;
    ngx_http_dynamo_rl_zone_t  *zone;

    zone = shm_zone->data;

    /* nginx -t included, and a reload that keeps the zone */

    if (zone->state_check != NULL
        && zone->state_check(zone, shm_zone->shm.log) != NGX_OK)
    {
        return NGX_ERROR;
    }

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

        return ngx_http_dynamo_rl_zone_slots(shm_zone, zone, 0);
    }

    zone->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        zone->sh = zone->shpool->data;

        return ngx_http_dynamo_rl_zone_slots(shm_zone, zone, 0);
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

    if (ngx_http_dynamo_rl_zone_slots(shm_zone, zone, 1) != NGX_OK) {
        return NGX_ERROR;
    }

    for (i = 0, reserved = 0; i < zone->nsources; i++) {
        reserved += zone->reserve[i];
    }

    if (ngx_http_dynamo_rl_zone_buckets(zone, shm_zone->shm.size - reserved)
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
 * each discovery source of the configuration gets the slot of the zone
 * that its URI names, or a free one with room of its own; the pages of a
 * zone in use cannot be rearranged, so a reload that needs more room for
 * a source than the zone set apart, or room that the zone no longer has,
 * is refused with a message
 */

static ngx_int_t
ngx_http_dynamo_rl_zone_slots(ngx_shm_zone_t *shm_zone,
    ngx_http_dynamo_rl_zone_t *zone, ngx_uint_t fresh)
{
    ngx_str_t                  *name;
    ngx_uint_t                  i, j;
    ngx_http_dynamo_rl_snap_t  *snap;

    for (i = 0; i < zone->nsources; i++) {
        name = &zone->source_names[i];

        if (name->len > NGX_HTTP_DYNAMO_RL_SOURCE_NAME) {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "dynamo_rl zone \"%V\": the discovery location "
                          "\"%V\" is longer than %d bytes",
                          &shm_zone->shm.name, name,
                          NGX_HTTP_DYNAMO_RL_SOURCE_NAME);
            return NGX_ERROR;
        }

        ngx_shmtx_lock(&zone->shpool->mutex);

        for (j = 0; j < NGX_HTTP_DYNAMO_RL_SOURCES; j++) {
            if (ngx_http_dynamo_rl_zone_slot_is(&zone->sh->snaps[j], name,
                                                zone->source_keys[i])
                == NGX_OK)
            {
                break;
            }
        }

        if (j == NGX_HTTP_DYNAMO_RL_SOURCES) {
            for (j = 0; j < NGX_HTTP_DYNAMO_RL_SOURCES; j++) {
                if (zone->sh->snaps[j].name_len == 0) {
                    break;
                }
            }
        }

        if (j == NGX_HTTP_DYNAMO_RL_SOURCES) {
            ngx_shmtx_unlock(&zone->shpool->mutex);

            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "dynamo_rl zone \"%V\" has held %d discovery "
                          "sources and cannot take \"%V\": restart nginx",
                          &shm_zone->shm.name, NGX_HTTP_DYNAMO_RL_SOURCES,
                          name);
            return NGX_ERROR;
        }

        snap = &zone->sh->snaps[j];

        if (snap->name_len == 0) {

            /* a new source: its name, and its own room */

            if (zone->reserve[i]) {
                snap->room = ngx_slab_alloc_locked(zone->shpool,
                                                   zone->reserve[i]);
                if (snap->room == NULL) {
                    ngx_shmtx_unlock(&zone->shpool->mutex);

                    ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                                  "dynamo_rl zone \"%V\" cannot hold a "
                                  "discovery snapshot of %uz bytes for "
                                  "\"%V\"%s", &shm_zone->shm.name,
                                  zone->reserve[i], name,
                                  fresh ? "" : ": restart nginx, or change "
                                               "the zone's size for a new "
                                               "zone");
                    return NGX_ERROR;
                }

                snap->room_size = zone->reserve[i];
            }

            ngx_memcpy(snap->name, name->data, name->len);
            snap->name_len = name->len ? name->len : (size_t) -1;
            snap->name_crc = ngx_crc32_short(name->data, name->len);
            snap->server = zone->source_keys[i];

        } else if (zone->reserve[i] > snap->room_size) {
            ngx_shmtx_unlock(&zone->shpool->mutex);

            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "dynamo_rl zone \"%V\" holds %uz bytes for a "
                          "discovery snapshot and max_size now needs %uz: "
                          "restart nginx, or change the zone's size for a "
                          "new zone (discovery location \"%V\")",
                          &shm_zone->shm.name, snap->room_size,
                          zone->reserve[i], name);
            return NGX_ERROR;
        }

        ngx_shmtx_unlock(&zone->shpool->mutex);

        zone->slot[i] = j;
    }

    return NGX_OK;
}


/* the slot that holds the snapshot of the source "name" in server "key" */

static ngx_int_t
ngx_http_dynamo_rl_zone_slot_is(ngx_http_dynamo_rl_snap_t *snap,
    ngx_str_t *name, uint32_t key)
{
    size_t  len;

    len = name->len ? name->len : (size_t) -1;

    if (snap->name_len != len
        || snap->server != key
        || snap->name_crc != ngx_crc32_short(name->data, name->len)
        || ngx_memcmp(snap->name, name->data, name->len) != 0)
    {
        return NGX_DECLINED;
    }

    return NGX_OK;
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
    u_char     *p;
    ngx_str_t   path;

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
     * not ngx_add_path(): nginx would give an existing directory (and
     * whatever else it holds) to the worker processes' user; the
     * directory is checked, and created when missing, with the zone
     */

    zone->state_cycle = cf->cycle;

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
