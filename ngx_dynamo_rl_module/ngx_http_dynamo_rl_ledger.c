
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"

#include <openssl/rand.h>


static ngx_inline ngx_uint_t ngx_http_dynamo_rl_ledger_hash(
    ngx_http_dynamo_rl_shctx_t *sh, ngx_str_t *id);
static ngx_inline uint64_t ngx_http_dynamo_rl_ledger_elapsed(
    ngx_http_dynamo_rl_node_t *lr, uint64_t now);
static ngx_http_dynamo_rl_node_t *ngx_http_dynamo_rl_ledger_lookup(
    ngx_http_dynamo_rl_shctx_t *sh, ngx_uint_t hash, u_char *id, size_t len);
static void ngx_http_dynamo_rl_ledger_delete(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_node_t *lr);
static ngx_uint_t ngx_http_dynamo_rl_ledger_expire(
    ngx_http_dynamo_rl_zone_t *zone, uint64_t now, ngx_uint_t force);
static void ngx_http_dynamo_rl_ledger_end(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_node_t *lr, ngx_uint_t state, ngx_uint_t reason,
    uint64_t now);
static void ngx_http_dynamo_rl_ledger_reaper(ngx_event_t *ev);
static void ngx_http_dynamo_rl_ledger_reap(ngx_http_dynamo_rl_zone_t *zone);
static ngx_uint_t ngx_http_dynamo_rl_ledger_settle(
    ngx_http_dynamo_rl_zone_t *zone, ngx_uint_t slot, ngx_pid_t pid);
static ngx_int_t ngx_http_dynamo_rl_ledger_header_filter(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_ledger_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_dynamo_rl_ledger_scan(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_buf_t *b);
static ngx_int_t ngx_http_dynamo_rl_attempts_handler(ngx_http_request_t *r);


ngx_str_t  ngx_http_dynamo_rl_ledger_states[] = {
    ngx_null_string,
    ngx_string("accepted"),
    ngx_string("streaming"),
    ngx_string("succeeded"),
    ngx_string("failed"),
    ngx_string("canceled")
};


static ngx_str_t  ngx_http_dynamo_rl_ledger_reasons[] = {
    ngx_null_string,
    ngx_string("worker_exited"),
    ngx_string("not_forwarded")
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


static ngx_inline ngx_uint_t
ngx_http_dynamo_rl_ledger_hash(ngx_http_dynamo_rl_shctx_t *sh, ngx_str_t *id)
{
    return (uint32_t) ngx_http_dynamo_rl_siphash(sh->key, id->data, id->len);
}


/*
 * an attempt's age on the monotonic clock, which no wall-clock step moves;
 * never negative, even on a clock that is not monotonic after all
 */

static ngx_inline uint64_t
ngx_http_dynamo_rl_ledger_elapsed(ngx_http_dynamo_rl_node_t *lr, uint64_t now)
{
    return now > lr->begun ? now - lr->begun : 0;
}


static ngx_http_dynamo_rl_node_t *
ngx_http_dynamo_rl_ledger_lookup(ngx_http_dynamo_rl_shctx_t *sh,
    ngx_uint_t hash, u_char *id, size_t len)
{
    ngx_http_dynamo_rl_node_t  *lr;

    for (lr = sh->buckets[hash & sh->mask]; lr; lr = lr->next) {
        if (lr->hash == hash && lr->len == len
            && ngx_memcmp(lr->id, id, len) == 0)
        {
            return lr;
        }
    }

    return NULL;
}


static void
ngx_http_dynamo_rl_ledger_delete(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_node_t *lr)
{
    ngx_http_dynamo_rl_node_t  **p;

    for (p = (ngx_http_dynamo_rl_node_t **)
             &zone->sh->buckets[lr->hash & zone->sh->mask];
         *p != lr;
         p = &(*p)->next)
    {
        /* void */
    }

    *p = lr->next;

    ngx_queue_remove(&lr->queue);
    ngx_slab_free_locked(zone->shpool, lr);

    zone->sh->records--;
}


/*
 * removes up to two expired finished records from the LRU end, or with
 * "force" the oldest finished record whether expired or not; in-flight
 * records are never in the queue, so never evicted
 */

static ngx_uint_t
ngx_http_dynamo_rl_ledger_expire(ngx_http_dynamo_rl_zone_t *zone,
    uint64_t now, ngx_uint_t force)
{
    ngx_uint_t                  n;
    ngx_queue_t                *q;
    ngx_http_dynamo_rl_node_t  *lr;

    for (n = 0; n < 2; n++) {

        if (ngx_queue_empty(&zone->sh->finished)) {
            return n;
        }

        q = ngx_queue_last(&zone->sh->finished);
        lr = ngx_queue_data(q, ngx_http_dynamo_rl_node_t, queue);

        if (lr->expires > now) {
            if (!force) {
                return n;
            }

            zone->sh->evictions++;
            force = 0;

        } else {
            zone->sh->expired++;
        }

        ngx_http_dynamo_rl_ledger_delete(zone, lr);
    }

    return n;
}


/*
 * NGX_OK: recorded as accepted; NGX_BUSY: the id is in the ledger, in
 * flight or finished; NGX_DECLINED: the zone is full of in-flight and
 * unexpired records that cannot go
 */

ngx_int_t
ngx_http_dynamo_rl_ledger_add(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    size_t                           size;
    uint64_t                         now;
    ngx_uint_t                       hash;
    ngx_http_dynamo_rl_node_t       *lr;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_loc_conf_t   *drlcf;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);
    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    zone = drmcf->shm_zone->data;

    hash = ngx_http_dynamo_rl_ledger_hash(zone->sh, &ctx->attempt_id);
    now = ngx_http_dynamo_rl_now();

    size = offsetof(ngx_http_dynamo_rl_node_t, id) + ctx->attempt_id.len;

    if (ctx->request_id.data != ctx->attempt_id.data) {
        size += 16;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    (void) ngx_http_dynamo_rl_ledger_expire(zone, now, 0);

    /*
     * an id minted here is new, 74 of its bits fresh from RAND_bytes(), so
     * only a client's id is looked up: a lookup of a new id reads the
     * records of its bucket, each a cache miss
     */

    if (ctx->attempt_id.data == ctx->id) {
        lr = NULL;

    } else {
        lr = ngx_http_dynamo_rl_ledger_lookup(zone->sh, hash,
                                              ctx->attempt_id.data,
                                              ctx->attempt_id.len);
    }

    if (lr != NULL) {
        if (lr->state < NGX_HTTP_DYNAMO_RL_SUCCEEDED
            || (lr->expires > now
                && lr->reason != NGX_HTTP_DYNAMO_RL_NOT_FORWARDED))
        {
            zone->sh->duplicates++;
            ngx_shmtx_unlock(&zone->shpool->mutex);
            return NGX_BUSY;
        }

        /* expired, or never sent upstream: the id is free again */

        if (lr->expires <= now) {
            zone->sh->expired++;
        }

        ngx_http_dynamo_rl_ledger_delete(zone, lr);
    }

    lr = ngx_slab_alloc_locked(zone->shpool, size);

    while (lr == NULL) {
        if (ngx_http_dynamo_rl_ledger_expire(zone, now, 1) == 0) {
            zone->sh->exhausted++;
            ngx_shmtx_unlock(&zone->shpool->mutex);

            ngx_log_error(NGX_LOG_CRIT, r->connection->log, 0,
                          "attempt ledger is full in dynamo_rl zone \"%V\", "
                          "%ui attempts in flight", &zone->name,
                          zone->sh->in_flight);

            return NGX_DECLINED;
        }

        lr = ngx_slab_alloc_locked(zone->shpool, size);
    }

    lr->hash = (uint32_t) hash;
    lr->pid = ngx_pid;
    lr->state = NGX_HTTP_DYNAMO_RL_ACCEPTED;
    lr->stream = 0;
    lr->reason = 0;
    lr->len = (u_char) ctx->attempt_id.len;
    lr->status = 0;
    lr->bytes = 0;
    lr->started = ngx_http_dynamo_rl_wall();
    lr->ended = 0;
    lr->begun = now;

    /* the TTL, for whichever process ends the record */
    lr->expires = drlcf->attempt_ttl;

    ngx_memcpy(lr->id, ctx->attempt_id.data, ctx->attempt_id.len);

    lr->request_id = 0;

    if (ctx->request_id.data != ctx->attempt_id.data) {
        lr->request_id = 1;
        ngx_http_dynamo_rl_uuid_pack(lr->id + lr->len, ctx->request_id.data);
    }

    lr->next = zone->sh->buckets[hash & zone->sh->mask];
    zone->sh->buckets[hash & zone->sh->mask] = lr;

    ngx_queue_insert_head(&zone->sh->active, &lr->queue);

    zone->sh->records++;
    zone->sh->in_flight++;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ctx->node = lr;
    ctx->ledger_zone = zone;
    ctx->ttl = drlcf->attempt_ttl;

    return NGX_OK;
}


void
ngx_http_dynamo_rl_ledger_finish(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    off_t                            sent;
    uint64_t                         now;
    ngx_uint_t                       state, status, reason;
    ngx_connection_t                *c;
    ngx_http_dynamo_rl_node_t       *lr;
    ngx_http_dynamo_rl_zone_t       *zone;

    if (ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST || ctx->deny_reason.len
        || ctx->settled)
    {
        return;
    }

    ctx->settled = 1;

    lr = ctx->node;
    ctx->node = NULL;

    c = r->connection;
    status = r->headers_out.status;

    if (status == 0 && c->error) {
        status = NGX_HTTP_CLIENT_CLOSED_REQUEST;
    }

    if (ctx->sse.error) {
        state = NGX_HTTP_DYNAMO_RL_FAILED;

    } else if (ctx->complete && !c->error) {
        state = (status >= NGX_HTTP_OK && status < NGX_HTTP_SPECIAL_RESPONSE
                 && (!ctx->sse_on || ctx->sse.done))
                ? NGX_HTTP_DYNAMO_RL_SUCCEEDED : NGX_HTTP_DYNAMO_RL_FAILED;

    } else if (c->error || status == NGX_HTTP_CLIENT_CLOSED_REQUEST) {
        state = NGX_HTTP_DYNAMO_RL_CANCELED;

    } else {
        /* the upstream closed early, or nginx gave up mid-response */
        state = NGX_HTTP_DYNAMO_RL_FAILED;
    }

    ctx->outcome = ngx_http_dynamo_rl_ledger_states[state];

    ngx_http_dynamo_rl_drain_leave(ctx);

    if (lr == NULL) {
        /* dynamo_rl_ledger off: the verdict is for the access log only */
        return;
    }

    sent = c->sent - r->header_size;

    if (sent < 0) {
        sent = 0;
    }

    /*
     * an attempt of which not a byte went upstream (its body was too
     * large, or never came, or no upstream took the connection) did not
     * use up its id: the record stays, to say what happened, but the id
     * may be sent again
     */

    reason = (r->upstream != NULL && r->upstream->request_sent)
             ? 0 : NGX_HTTP_DYNAMO_RL_NOT_FORWARDED;

    now = ngx_http_dynamo_rl_now();

    zone = ctx->ledger_zone;

    ngx_shmtx_lock(&zone->shpool->mutex);

    lr->status = (u_short) status;
    lr->stream = ctx->sse_on;
    lr->bytes = sent;

    ngx_http_dynamo_rl_ledger_end(zone, lr, state, reason, now);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "dynamo rl ledger: \"%V\" %V, status %ui",
                   &ctx->attempt_id, &ctx->outcome, status);
}


/* a request freed without its log phase: the attempt did not complete */

void
ngx_http_dynamo_rl_ledger_abandon(ngx_http_dynamo_rl_ctx_t *ctx)
{
    uint64_t                    now;
    ngx_http_dynamo_rl_node_t  *lr;
    ngx_http_dynamo_rl_zone_t  *zone;

    lr = ctx->node;

    if (lr == NULL) {
        return;
    }

    ctx->node = NULL;
    zone = ctx->ledger_zone;
    now = ngx_http_dynamo_rl_now();

    ngx_shmtx_lock(&zone->shpool->mutex);

    ngx_http_dynamo_rl_ledger_end(zone, lr, NGX_HTTP_DYNAMO_RL_FAILED, 0, now);

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/* under the mutex: an in-flight record takes its terminal state */

static void
ngx_http_dynamo_rl_ledger_end(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_node_t *lr, ngx_uint_t state, ngx_uint_t reason,
    uint64_t now)
{
    lr->state = (u_char) state;
    lr->reason = (u_char) reason;
    lr->ended = lr->started + ngx_http_dynamo_rl_ledger_elapsed(lr, now);
    lr->expires = now + lr->expires;

    ngx_queue_remove(&lr->queue);
    ngx_queue_insert_head(&zone->sh->finished, &lr->queue);

    zone->sh->in_flight--;
}


/*
 * every worker process looks once a second, and once as it starts (its
 * slot may be a dead process's), for processes that died with attempts
 * in flight: nothing else would ever end them
 */

void
ngx_http_dynamo_rl_ledger_init_process(ngx_http_dynamo_rl_zone_t *zone)
{
    ngx_event_t  *ev;

    ngx_http_dynamo_rl_ledger_reap(zone);

    ev = &zone->reaper;

    ev->handler = ngx_http_dynamo_rl_ledger_reaper;
    ev->data = zone;
    ev->log = ngx_cycle->log;
    ev->cancelable = 1;

    ngx_add_timer(ev, 1000);
}


static void
ngx_http_dynamo_rl_ledger_reaper(ngx_event_t *ev)
{
    if (ngx_exiting || ngx_quit || ngx_terminate) {
        return;
    }

    ngx_http_dynamo_rl_ledger_reap(ev->data);

    ngx_add_timer(ev, 1000);
}


static void
ngx_http_dynamo_rl_ledger_reap(ngx_http_dynamo_rl_zone_t *zone)
{
    ngx_pid_t                    pid;
    ngx_uint_t                   i, n;
    ngx_http_dynamo_rl_shctx_t  *sh;

    sh = zone->sh;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SLOTS; i++) {
        pid = sh->slot_pid[i];

        if (pid == 0 || pid == ngx_pid
            || kill(pid, 0) == 0 || ngx_errno != NGX_ESRCH)
        {
            continue;
        }

        n = ngx_http_dynamo_rl_ledger_settle(zone, i, pid);

        if (n) {
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                          "dynamo rl ledger: %ui attempt(s) in flight in "
                          "worker process %P, which exited, ended as "
                          "failed", n, pid);
        }
    }
}


/* the process in the slot is gone: its attempts end, its slot is free */

static ngx_uint_t
ngx_http_dynamo_rl_ledger_settle(ngx_http_dynamo_rl_zone_t *zone,
    ngx_uint_t slot, ngx_pid_t pid)
{
    uint64_t                     now;
    ngx_uint_t                   n;
    ngx_queue_t                 *q, *next;
    ngx_http_dynamo_rl_node_t   *lr;
    ngx_http_dynamo_rl_shctx_t  *sh;

    sh = zone->sh;
    now = ngx_http_dynamo_rl_now();
    n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /* another process may have been quicker */

    if (sh->slot_pid[slot] != pid) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return 0;
    }

    for (q = ngx_queue_head(&sh->active);
         q != ngx_queue_sentinel(&sh->active);
         q = next)
    {
        next = ngx_queue_next(q);
        lr = ngx_queue_data(q, ngx_http_dynamo_rl_node_t, queue);

        if (lr->pid != pid) {
            continue;
        }

        ngx_http_dynamo_rl_ledger_end(zone, lr, NGX_HTTP_DYNAMO_RL_FAILED,
                                      NGX_HTTP_DYNAMO_RL_WORKER_EXITED, now);
        n++;
    }

    sh->slot_pid[slot] = 0;
    sh->slot_requests[slot] = 0;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}


ngx_int_t
ngx_http_dynamo_rl_ledger_filter_init(ngx_conf_t *cf)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_dynamo_rl_ledger_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_dynamo_rl_ledger_body_filter;

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_ledger_header_filter(ngx_http_request_t *r)
{
    ngx_http_dynamo_rl_ctx_t   *ctx;
    ngx_http_dynamo_rl_node_t  *lr;
    ngx_http_dynamo_rl_zone_t  *zone;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    if (ctx == NULL || ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        || ctx->deny_reason.len || ctx->logged)
    {
        return ngx_http_next_header_filter(r);
    }

    if (r->method == NGX_HTTP_HEAD
        || r->headers_out.status == NGX_HTTP_NO_CONTENT
        || r->headers_out.status == NGX_HTTP_NOT_MODIFIED)
    {
        /* no body follows: the response is whole once its header is */
        ctx->complete = 1;
    }

    if (r->headers_out.content_type.len >= sizeof("text/event-stream") - 1
        && ngx_strncasecmp(r->headers_out.content_type.data,
                           (u_char *) "text/event-stream",
                           sizeof("text/event-stream") - 1)
           == 0)
    {
        ctx->sse_on = 1;
    }

    zone = ctx->ledger_zone;
    lr = ctx->node;

    if (lr == NULL) {
        return ngx_http_next_header_filter(r);
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    lr->state = NGX_HTTP_DYNAMO_RL_STREAMING;
    lr->status = (u_short) r->headers_out.status;
    lr->stream = ctx->sse_on;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return ngx_http_next_header_filter(r);
}


static ngx_int_t
ngx_http_dynamo_rl_ledger_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t                  rc;
    ngx_chain_t               *cl;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    if (r != r->main || in == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    if (ctx == NULL || ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        || ctx->deny_reason.len || ctx->complete)
    {
        return ngx_http_next_body_filter(r, in);
    }

    for (cl = in; cl; cl = cl->next) {

        if (ctx->sse_on
            && ngx_http_dynamo_rl_ledger_scan(r, ctx, cl->buf) != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (cl->buf->last_buf) {
            ctx->complete = 1;

            if (ctx->sse_on) {
                ngx_http_dynamo_rl_sse_scan(&ctx->sse, NULL, 0, 1);
            }
        }
    }

    rc = ngx_http_next_body_filter(r, in);

    /*
     * settled as soon as the whole response is written, not at the log
     * phase, which a lingering close can hold back for seconds
     */

    if (ctx->complete && rc == NGX_OK && !r->buffered && !r->postponed
        && !r->connection->buffered && !r->connection->error)
    {
        ngx_http_dynamo_rl_ledger_finish(r, ctx);
    }

    return rc;
}


static ngx_int_t
ngx_http_dynamo_rl_ledger_scan(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_buf_t *b)
{
    off_t    pos;
    size_t   size;
    ssize_t  n;
    u_char   buf[4096];

    if (ngx_buf_in_memory(b)) {
        ngx_http_dynamo_rl_sse_scan(&ctx->sse, b->pos, b->last - b->pos, 0);
        return NGX_OK;
    }

    if (!b->in_file) {
        return NGX_OK;
    }

    /* proxy_buffering on may have written the stream to a temporary file */

    for (pos = b->file_pos; pos < b->file_last; pos += n) {
        size = (size_t) ngx_min(b->file_last - pos, (off_t) sizeof(buf));

        n = ngx_read_file(b->file, buf, size, pos);

        if (n <= 0) {
            return NGX_ERROR;
        }

        ngx_http_dynamo_rl_sse_scan(&ctx->sse, buf, n, 0);
    }

    return NGX_OK;
}


char *
ngx_http_dynamo_rl_attempts_api(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    return ngx_http_dynamo_rl_content_handler(cf,
               ngx_http_dynamo_rl_attempts_handler);
}


static ngx_int_t
ngx_http_dynamo_rl_attempts_handler(ngx_http_request_t *r)
{
    u_char                     *p;
    size_t                      len;
    uint64_t                    now, started, ended, duration, bytes;
    ngx_int_t                   rc;
    ngx_str_t                   id, body;
    ngx_uint_t                  found, state, status, stream, reason;
    ngx_uint_t                  packed;
    u_char                      request_id[16];
    ngx_http_dynamo_rl_node_t  *lr;
    ngx_http_dynamo_rl_zone_t  *zone;
    ngx_http_core_loc_conf_t   *clcf;

    rc = ngx_http_dynamo_rl_read_only(r);

    if (rc != NGX_DECLINED) {
        return rc;
    }

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (clcf->regex != NULL || r->uri.len < clcf->name.len) {
        return ngx_http_dynamo_rl_error(r, NGX_HTTP_BAD_REQUEST,
                                        "bad_attempt_id", "no attempt id");
    }

    id.data = r->uri.data + clcf->name.len;
    id.len = r->uri.len - clcf->name.len;

    if (ngx_http_dynamo_rl_attempt_id_valid(id.data, id.len) != NGX_OK) {
        return ngx_http_dynamo_rl_error(r, NGX_HTTP_BAD_REQUEST,
                                        "bad_attempt_id",
                                        "an attempt id is 1 to 128 bytes of "
                                        "[A-Za-z0-9._:-]");
    }

    zone = ngx_http_dynamo_rl_get_zone(r);
    now = ngx_http_dynamo_rl_now();

    found = 0;
    packed = 0;
    state = 0;
    status = 0;
    stream = 0;
    reason = 0;
    bytes = 0;
    started = 0;
    ended = 0;
    duration = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    lr = ngx_http_dynamo_rl_ledger_lookup(zone->sh,
                                          ngx_http_dynamo_rl_ledger_hash(
                                              zone->sh, &id),
                                          id.data, id.len);

    if (lr != NULL
        && (lr->state < NGX_HTTP_DYNAMO_RL_SUCCEEDED || lr->expires > now))
    {
        found = 1;
        state = lr->state;
        status = lr->status;
        stream = lr->stream;
        reason = lr->reason;
        bytes = lr->bytes;
        started = lr->started;
        ended = lr->ended;
        duration = ended ? ended - started
                         : ngx_http_dynamo_rl_ledger_elapsed(lr, now);

        packed = lr->request_id;

        if (packed) {
            ngx_memcpy(request_id, lr->id + lr->len, 16);
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (!found) {
        return ngx_http_dynamo_rl_error(r, NGX_HTTP_NOT_FOUND,
                                        "unknown_attempt",
                                        "no such attempt, or it expired");
    }

    len = sizeof("{\"attempt_id\":\"\",\"state\":\"\",\"status\":,"
                 "\"stream\":false,\"bytes_sent\":,\"started\":\"\","
                 "\"ended\":\"\",\"duration_ms\":}") - 1
          + sizeof(",\"reason\":\"not_forwarded\"")
          + sizeof(",\"request_id\":\"\"") + NGX_HTTP_DYNAMO_RL_UUID_LEN
          + id.len + sizeof("streaming") + 3 * NGX_INT64_LEN
          + 2 * NGX_HTTP_DYNAMO_RL_ISO_LEN;

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the id passed the attempt id grammar: nothing to escape */

    body.data = p;

    p = ngx_sprintf(p, "{\"attempt_id\":\"%V\",\"state\":\"%V\",\"status\":",
                    &id, &ngx_http_dynamo_rl_ledger_states[state]);

    p = status ? ngx_sprintf(p, "%ui", status) : ngx_cpymem(p, "null", 4);

    p = ngx_sprintf(p, ",\"stream\":%s,\"bytes_sent\":%uL,\"started\":\"",
                    stream ? "true" : "false", bytes);
    p = ngx_http_dynamo_rl_iso_time(p, started);
    p = ngx_cpymem(p, "\",\"ended\":", sizeof("\",\"ended\":") - 1);

    if (ended) {
        *p++ = '"';
        p = ngx_http_dynamo_rl_iso_time(p, ended);
        *p++ = '"';

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    p = ngx_sprintf(p, ",\"duration_ms\":%uL", duration);

    /* Dynamo's request id: the attempt id when it is a UUID */

    p = ngx_cpymem(p, ",\"request_id\":", sizeof(",\"request_id\":") - 1);

    if (packed) {
        *p++ = '"';
        p = ngx_http_dynamo_rl_uuid_unpack(p, request_id);
        *p++ = '"';

    } else if (ngx_http_dynamo_rl_uuid_valid(id.data, id.len) == NGX_OK) {
        p = ngx_sprintf(p, "\"%V\"", &id);

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    /* only when there is one: the fields of a plain record stay as they were */

    if (reason) {
        p = ngx_sprintf(p, ",\"reason\":\"%V\"",
                        &ngx_http_dynamo_rl_ledger_reasons[reason]);
    }

    *p++ = '}';

    body.len = p - body.data;

    return ngx_http_dynamo_rl_send_json(r, NGX_HTTP_OK, &body);
}


/*
 * under the mutex, for the state file: the records in flight, then the
 * finished ones oldest first, so that a restore that puts each at the
 * head of the queue keeps the order
 */

ngx_int_t
ngx_http_dynamo_rl_ledger_walk(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_ledger_walk_pt handler, void *data)
{
    ngx_uint_t                  i;
    ngx_queue_t                *q;
    ngx_http_dynamo_rl_node_t  *lr;

    for (i = 0; i <= zone->sh->mask; i++) {
        for (lr = zone->sh->buckets[i]; lr; lr = lr->next) {
            if (lr->state < NGX_HTTP_DYNAMO_RL_SUCCEEDED
                && handler(data, lr) != NGX_OK)
            {
                return NGX_ERROR;
            }
        }
    }

    for (q = ngx_queue_last(&zone->sh->finished);
         q != ngx_queue_sentinel(&zone->sh->finished);
         q = ngx_queue_prev(q))
    {
        lr = ngx_queue_data(q, ngx_http_dynamo_rl_node_t, queue);

        if (handler(data, lr) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * under the mutex: a finished record from the state file, unless the id
 * is in the ledger already; NGX_DECLINED: it is; NGX_ERROR: no room
 */

ngx_int_t
ngx_http_dynamo_rl_ledger_restore(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_node_t *rec, ngx_str_t *id)
{
    ngx_uint_t                  hash;
    ngx_http_dynamo_rl_node_t  *lr;

    hash = ngx_http_dynamo_rl_ledger_hash(zone->sh, id);

    if (ngx_http_dynamo_rl_ledger_lookup(zone->sh, hash, id->data, id->len)
        != NULL)
    {
        return NGX_DECLINED;
    }

    lr = ngx_slab_alloc_locked(zone->shpool,
                               offsetof(ngx_http_dynamo_rl_node_t, id)
                               + id->len);
    if (lr == NULL) {
        return NGX_ERROR;
    }

    lr->hash = (uint32_t) hash;
    lr->state = rec->state;
    lr->stream = rec->stream;
    lr->len = (u_char) id->len;
    lr->status = rec->status;
    lr->bytes = rec->bytes;
    lr->started = rec->started;
    lr->ended = rec->ended;
    lr->begun = rec->begun;
    lr->expires = rec->expires;
    lr->pid = 0;
    lr->reason = rec->reason;
    lr->request_id = 0;

    ngx_memcpy(lr->id, id->data, id->len);

    lr->next = zone->sh->buckets[hash & zone->sh->mask];
    zone->sh->buckets[hash & zone->sh->mask] = lr;

    ngx_queue_insert_head(&zone->sh->finished, &lr->queue);

    zone->sh->records++;

    return NGX_OK;
}
