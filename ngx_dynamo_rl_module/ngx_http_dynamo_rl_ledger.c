
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_ledger.h"

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


/* a record forwarded under on_error=local, as the replay sends it */

typedef struct {
    u_char                          id[NGX_HTTP_DYNAMO_RL_ATTEMPT_ID_LEN];
    size_t                          len;
    uint64_t                        started;
    uint64_t                        begun;
    uint64_t                        ttl;
} ngx_http_dynamo_rl_replayed_t;


#define NGX_HTTP_DYNAMO_RL_REPLAY_BATCH  32


/*
 * a worker process's own heartbeat in the store, with a store: the lease
 * of its records renewed, silent processes' records ended (the "live"
 * script); and the replay of the records forwarded under on_error=local
 */

typedef struct ngx_http_dynamo_rl_live_s  ngx_http_dynamo_rl_live_t;

typedef struct {
    ngx_http_dynamo_rl_live_t      *owner;
    ngx_http_dynamo_rl_replayed_t   rec;
    ngx_str_t                       id;       /* rec's */
    uint64_t                        bytes;
    uint64_t                        ended;
    uint64_t                        left;     /* the record's ttl, ms */
    ngx_uint_t                      in_flight;
    ngx_uint_t                      state;
    ngx_uint_t                      status;
    ngx_uint_t                      stream;
    ngx_uint_t                      reason;
} ngx_http_dynamo_rl_replay_t;


struct ngx_http_dynamo_rl_live_s {
    ngx_event_t                     ev;
    ngx_http_dynamo_rl_store_t     *store;
    ngx_http_dynamo_rl_zone_t      *zone;
    ngx_uint_t                      busy;
    ngx_uint_t                      replaying;  /* members waited for */
    ngx_uint_t                      replayed;   /* this round */
    ngx_uint_t                      conflicts;  /* this round */
    ngx_http_dynamo_rl_replay_t     replay[NGX_HTTP_DYNAMO_RL_REPLAY_BATCH];
};


/* silent this long, at least, a worker process is taken for gone */
#define NGX_HTTP_DYNAMO_RL_LIVE_SILENCE   3000
#define NGX_HTTP_DYNAMO_RL_LIVE_BEATS     6
static ngx_int_t ngx_http_dynamo_rl_ledger_header_filter(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_ledger_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_dynamo_rl_ledger_scan(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_buf_t *b);
static ngx_int_t ngx_http_dynamo_rl_attempts_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_ledger_claim(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_store_t *store);
static void ngx_http_dynamo_rl_ledger_claimed(void *data, ngx_int_t rc,
    redisReply *reply);
static void ngx_http_dynamo_rl_ledger_store_settle(
    ngx_http_dynamo_rl_node_t *lr, ngx_pid_t pid, uint64_t boot);
static void ngx_http_dynamo_rl_ledger_live(ngx_event_t *ev);
static ngx_uint_t ngx_http_dynamo_rl_ledger_own(void *data);
static void ngx_http_dynamo_rl_ledger_lived(void *data, ngx_int_t rc,
    redisReply *reply);
static ngx_uint_t ngx_http_dynamo_rl_ledger_replayed(
    ngx_http_dynamo_rl_node_t *lr, ngx_http_dynamo_rl_replayed_t *rp);
static void ngx_http_dynamo_rl_ledger_replayed_end(
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_replayed_t *rp,
    ngx_uint_t state, ngx_uint_t status, off_t sent, ngx_uint_t reason);
static void ngx_http_dynamo_rl_ledger_replay(ngx_http_dynamo_rl_live_t *lv);
static void ngx_http_dynamo_rl_ledger_replay_done(void *data, ngx_int_t rc,
    redisReply *reply);
static ngx_msec_t ngx_http_dynamo_rl_ledger_silence(
    ngx_http_dynamo_rl_store_t *store);
static ngx_int_t ngx_http_dynamo_rl_ledger_live_send(
    ngx_http_dynamo_rl_store_t *store, char *action,
    ngx_http_dynamo_rl_store_pt handler, void *data);
static void ngx_http_dynamo_rl_ledger_failing(ngx_http_request_t *r,
    redisReply *reply);
static void ngx_http_dynamo_rl_ledger_move(ngx_http_dynamo_rl_ctx_t *ctx,
    char *from, char *to, ngx_msec_t ttl, ngx_str_t *values, ngx_uint_t n);
static ngx_int_t ngx_http_dynamo_rl_ledger_defer(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx);
static void ngx_http_dynamo_rl_ledger_stream(ngx_event_t *ev);
static void ngx_http_dynamo_rl_ledger_undefer(ngx_http_dynamo_rl_ctx_t *ctx);
static ngx_uint_t ngx_http_dynamo_rl_ledger_verdict(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_uint_t status, ngx_uint_t upstream,
    ngx_uint_t *reason);
static ngx_uint_t ngx_http_dynamo_rl_ledger_shutdown(ngx_http_request_t *r);
static void ngx_http_dynamo_rl_ledger_store_end(ngx_http_dynamo_rl_ctx_t *ctx,
    ngx_uint_t state, ngx_uint_t status, off_t sent, ngx_uint_t reason);
static ngx_int_t ngx_http_dynamo_rl_attempts_store(ngx_http_request_t *r,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *id);
static void ngx_http_dynamo_rl_attempts_found(void *data, ngx_int_t rc,
    redisReply *reply);
static ngx_int_t ngx_http_dynamo_rl_attempts_local(ngx_http_request_t *r,
    ngx_str_t *id, ngx_uint_t local);
static ngx_int_t ngx_http_dynamo_rl_attempts_unavailable(
    ngx_http_request_t *r, ngx_http_dynamo_rl_store_t *store, ngx_str_t *id);
static ngx_int_t ngx_http_dynamo_rl_attempt_send(ngx_http_request_t *r,
    ngx_str_t *id, ngx_http_dynamo_rl_record_t *rec, uint64_t duration,
    ngx_uint_t local);


/* a lookup of the attempts API in the store, waited for */

typedef struct {
    ngx_http_request_t             *request;
    ngx_http_dynamo_rl_store_cmd_t *cmd;
    ngx_str_t                       id;
} ngx_http_dynamo_rl_lookup_t;


ngx_str_t  ngx_http_dynamo_rl_ledger_states[] = {
    ngx_null_string,
    ngx_string("accepted"),
    ngx_string("streaming"),
    ngx_string("succeeded"),
    ngx_string("failed"),
    ngx_string("canceled")
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


static ngx_inline ngx_uint_t
ngx_http_dynamo_rl_ledger_hash(ngx_http_dynamo_rl_shctx_t *sh, ngx_str_t *id)
{
    return (uint32_t) ngx_http_dynamo_rl_siphash13(sh->key, id->data, id->len);
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

    if (lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_LOCAL) {
        zone->sh->store_local--;
    }

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
 * NGX_OK: recorded as accepted; NGX_AGAIN: the store's answer is waited
 * for, the phases go on from its handler; NGX_DECLINED: not recorded,
 * ctx->verdict says why (the id is in the ledger, in flight or finished;
 * the zone is full of in-flight and unexpired records that cannot go;
 * the store's gate is closed, or the store does not answer)
 */

ngx_int_t
ngx_http_dynamo_rl_ledger_add(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    u_char                          *p;
    size_t                           size, tenant;
    uint64_t                         now;
    ngx_int_t                        rc;
    ngx_uint_t                       hash, local;
    ngx_http_dynamo_rl_node_t       *lr;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_loc_conf_t   *drlcf;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);
    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    zone = drmcf->shm_zone->data;
    local = 0;

    if (drmcf->store != NULL) {

        /*
         * the ids this replica forwarded on its own (on_error=local) go
         * into the store before anything new does: until then, the zone
         * goes on deciding
         */

        if (zone->sh->store_local
            && drmcf->store->on_error == NGX_HTTP_DYNAMO_RL_STORE_LOCAL
            && !ctx->store_wait && !ctx->store_done)
        {
            ctx->store = drmcf->store;
            ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_UNAVAILABLE;
            rc = NGX_DECLINED;

        } else {
            rc = ngx_http_dynamo_rl_ledger_claim(r, ctx, drmcf->store);
        }

        /*
         * a claim in the store is also kept in the zone, as this replica
         * saw it: a worker process that dies leaves its attempts to the
         * others to end, and on_error=local knows what went through the
         * store before it failed
         */

        if (rc == NGX_OK) {
            goto record;
        }

        if (rc != NGX_DECLINED) {
            return rc;
        }

        if (ctx->verdict != NGX_HTTP_DYNAMO_RL_VERDICT_UNAVAILABLE
            || drmcf->store->on_error != NGX_HTTP_DYNAMO_RL_STORE_LOCAL)
        {
            goto refused;
        }

        /* never read the store's gate: it may be closed */

        if (!zone->sh->store_known && drlcf->gate) {
            ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_UNKNOWN;
            goto refused;
        }

        /* on_error=local: this replica's zone, single use within it */

        (void) ngx_atomic_fetch_add(&zone->sh->store.fallbacks, 1);
        local = 1;

        if (ngx_atomic_cmp_set(&zone->sh->store_fallback, 0, 1)) {
            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "dynamo rl store: not available, the zone's "
                          "ledger acts for this replica alone");
        }

        /* and the zone's gate, the store's as last read */

        if (zone->sh->gate_closed && drlcf->gate) {
            ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_CLOSED;
            ctx->retry_after = 5;
            goto refused;
        }
    }

record:

    hash = ngx_http_dynamo_rl_ledger_hash(zone->sh, &ctx->attempt_id);
    now = ngx_http_dynamo_rl_ctx_now(ctx);

    size = offsetof(ngx_http_dynamo_rl_node_t, id) + ctx->attempt_id.len;

    if (ctx->request_id.data != ctx->attempt_id.data) {
        size += 16;
    }

    tenant = ngx_min(ctx->tenant.len, 255);

    if (tenant) {
        size += 1 + tenant;
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

            if (ctx->store_claimed) {
                /* used here while the store was away, or it lost it */
                ctx->store_claimed = 0;
                ngx_http_dynamo_rl_ledger_move(ctx, "a", "x",
                                               ctx->store->lease, NULL, 0);
            }

            ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_DUPLICATE;
            goto refused;
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

            if (ctx->store_claimed) {
                /* the store has it: only this replica's copy is missing */
                return NGX_OK;
            }

            ngx_log_error(NGX_LOG_CRIT, r->connection->log, 0,
                          "attempt ledger is full in dynamo_rl zone \"%V\", "
                          "%ui attempts in flight", &zone->name,
                          zone->sh->in_flight);

            ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_FULL;
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

    lr->request_id = ctx->store_claimed ? NGX_HTTP_DYNAMO_RL_NODE_STORE : 0;

    if (local) {
        /* to be put in the store when it answers again */
        lr->request_id |= NGX_HTTP_DYNAMO_RL_NODE_LOCAL;
        zone->sh->store_local++;
    }

    p = lr->id + lr->len;

    if (ctx->request_id.data != ctx->attempt_id.data) {
        lr->request_id |= NGX_HTTP_DYNAMO_RL_NODE_REQUEST_ID;
        ngx_http_dynamo_rl_uuid_pack(p, ctx->request_id.data);
        p += 16;
    }

    if (tenant) {
        lr->request_id |= NGX_HTTP_DYNAMO_RL_NODE_TENANT;
        *p++ = (u_char) tenant;
        ngx_memcpy(p, ctx->tenant.data, tenant);
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

refused:

    switch (ctx->verdict) {

    case NGX_HTTP_DYNAMO_RL_VERDICT_DUPLICATE:
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl: attempt id \"%V\" already used",
                      &ctx->attempt_id);
        break;

    case NGX_HTTP_DYNAMO_RL_VERDICT_CLOSED:
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl gate: closed in the store, attempt \"%V\" "
                      "refused", &ctx->attempt_id);
        break;

    case NGX_HTTP_DYNAMO_RL_VERDICT_UNKNOWN:
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "dynamo rl store: no gate record, attempt \"%V\" "
                      "refused", &ctx->attempt_id);
        break;

    case NGX_HTTP_DYNAMO_RL_VERDICT_LOST:

        /* the gate's reader logs it at crit, once, as it creates it again */

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl store: the gate record is lost while the "
                      "gate was closed, attempt \"%V\" refused",
                      &ctx->attempt_id);
        break;
    }

    return NGX_DECLINED;
}


/*
 * with a store, one script checks the store's gate and claims the id for
 * every replica at once; the request waits for its answer
 */

static ngx_int_t
ngx_http_dynamo_rl_ledger_claim(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_store_t *store)
{
    u_char                         *p;
    ngx_int_t                       rc;
    ngx_str_t                       keys[NGX_HTTP_DYNAMO_RL_CLAIM_SHARED + 1];
    ngx_str_t                       argv[NGX_HTTP_DYNAMO_RL_CLAIM_ARGS];
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;
    u_char                          t0[NGX_INT64_LEN];
    u_char                          lease[NGX_INT64_LEN];
    u_char                          ttl[NGX_INT64_LEN];
    u_char                          quiet[NGX_INT64_LEN];

    if (ctx->store_wait) {
        return NGX_AGAIN;
    }

    if (ctx->store_done) {
        /* the answer is taken once: a later pass is an internal redirect */
        ctx->store_done = 0;
        return ctx->store_claimed ? NGX_OK : NGX_DECLINED;
    }

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    ctx->store = store;
    ctx->ttl = drlcf->attempt_ttl;

    /*
     * the record's key, and its owner: this process's identity (drawn
     * afresh as it started) and the request
     */

    p = ngx_pnalloc(r->pool, store->attempt_key.len + ctx->attempt_id.len
                             + store->identity.len + 2 * NGX_INT64_LEN + 2);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ctx->store_key.data = p;
    p = ngx_cpymem(p, store->attempt_key.data, store->attempt_key.len);
    p = ngx_cpymem(p, ctx->attempt_id.data, ctx->attempt_id.len);
    ctx->store_key.len = p - ctx->store_key.data;

    ctx->store_owner.data = p;
    p = ngx_sprintf(p, "%V/%uA.%ui", &store->identity,
                    r->connection->number, r->connection->requests);
    ctx->store_owner.len = p - ctx->store_owner.data;

    /* joined with the other claims of this turn into one script run */

    keys[0] = store->gate_key;
    keys[1] = store->live_key;
    keys[2] = store->records;
    keys[3] = ctx->store_key;

    argv[0] = ctx->store_owner;

    /* t1 is t0 plus the monotonic clock's interval: see store_end() */

    ctx->store_t0 = ngx_http_dynamo_rl_wall();
    ctx->store_t0_mono = ngx_http_dynamo_rl_now();

    argv[1].data = t0;
    argv[1].len = ngx_sprintf(t0, "%uL", ctx->store_t0) - t0;

    argv[2].data = lease;
    argv[2].len = ngx_sprintf(lease, "%M", store->lease) - lease;

    argv[3] = store->replica;

    /* the request id only when it is not the attempt id */

    if (ctx->request_id.data != ctx->attempt_id.data) {
        argv[4] = ctx->request_id;

    } else {
        ngx_str_set(&argv[4], "");
    }

    /* dynamo_rl_gate off: the claim alone, whatever the gate */

    argv[5].data = (u_char *) (drlcf->gate ? "1" : "0");
    argv[5].len = 1;

    /* the ttl of the record once ended, for whoever ends it */

    argv[6].data = ttl;
    argv[6].len = ngx_sprintf(ttl, "%M", drlcf->attempt_ttl) - ttl;

    /* the tenant the gateway assigned, as the zone keeps it */

    argv[7].data = ctx->tenant.data;
    argv[7].len = ngx_min(ctx->tenant.len, 255);

    /* this process's silence, for a claim before its first beat */

    argv[8].data = quiet;
    argv[8].len = ngx_sprintf(quiet, "%M",
                              ngx_http_dynamo_rl_ledger_silence(store))
                  - quiet;

    rc = ngx_http_dynamo_rl_store_batch(store, NGX_HTTP_DYNAMO_RL_SCRIPT_CLAIM,
                                        NGX_HTTP_DYNAMO_RL_CLAIM_SHARED, keys,
                                        NGX_HTTP_DYNAMO_RL_CLAIM_ARGS, argv,
                                        ngx_http_dynamo_rl_ledger_claimed, r,
                                        &ctx->store_cmd);

    if (rc != NGX_OK) {
        ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_UNAVAILABLE;

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl store: not connected, attempt \"%V\" "
                      "not claimed", &ctx->attempt_id);

        return NGX_DECLINED;
    }

    ctx->store_wait = 1;

    return NGX_AGAIN;
}


static void
ngx_http_dynamo_rl_ledger_claimed(void *data, ngx_int_t rc,
    redisReply *reply)
{
    ngx_http_request_t *r = data;

    ngx_connection_t                  *c;
    ngx_http_dynamo_rl_ctx_t          *ctx;
    ngx_http_dynamo_rl_zone_t         *zone;
    ngx_http_dynamo_rl_claim_reply_t   cr;

    c = r->connection;
    ctx = ngx_http_dynamo_rl_get_ctx(r);

    ctx->store_cmd = NULL;
    ctx->store_wait = 0;
    ctx->store_done = 1;
    ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_UNAVAILABLE;

    if (rc == NGX_OK && ngx_http_dynamo_rl_resp_claim(reply, &cr) == NGX_OK) {

        switch (cr.result) {

        case NGX_HTTP_DYNAMO_RL_CLAIM_OK:
            ctx->store_claimed = 1;
            ctx->verdict = 0;
            break;

        case NGX_HTTP_DYNAMO_RL_CLAIM_DUP:
            ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_DUPLICATE;
            break;

        case NGX_HTTP_DYNAMO_RL_CLAIM_CLOSED:
            ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_CLOSED;
            ctx->retry_after = (cr.expires > cr.now)
                               ? (ngx_uint_t) ((cr.expires - cr.now + 999)
                                               / 1000)
                               : 5;
            break;

        default: /* NGX_HTTP_DYNAMO_RL_CLAIM_NOGATE */

            /*
             * the gate record is gone: a fresh store, or one that lost its
             * data; where the gate was last seen closed, it stays so
             */

            zone = ngx_http_dynamo_rl_get_zone(r);

            ctx->verdict = zone->sh->gate_closed
                           ? NGX_HTTP_DYNAMO_RL_VERDICT_LOST
                           : NGX_HTTP_DYNAMO_RL_VERDICT_UNKNOWN;
        }

        if (ctx->verdict != NGX_HTTP_DYNAMO_RL_VERDICT_UNAVAILABLE) {
            zone = ngx_http_dynamo_rl_get_zone(r);
            zone->sh->store_fallback = 0;

            if (zone->sh->store_failing
                && ngx_atomic_cmp_set(&zone->sh->store_failing, 1, 0))
            {
                ngx_log_error(NGX_LOG_NOTICE, c->log, 0,
                              "dynamo rl store: the claims are accepted "
                              "again");
            }
        }

    } else if (rc == NGX_OK) {
        ngx_http_dynamo_rl_ledger_failing(r, reply);

    } else if (rc == NGX_AGAIN) {
        ngx_log_error(NGX_LOG_WARN, c->log, 0,
                      "dynamo rl store: no answer to the claim within %M",
                      ctx->store->timeout);

        /* whatever the store did with the claim, the id stays usable */

        ngx_http_dynamo_rl_ledger_move(ctx, "a", "x", ctx->store->lease,
                                       NULL, 0);

    } else {
        ngx_log_error(NGX_LOG_INFO, c->log, 0,
                      "dynamo rl store: connection lost, or too few "
                      "replicas (wait=), before the claim's answer");

        /* the claim may have run: the release is sent on reconnecting */

        ngx_http_dynamo_rl_ledger_move(ctx, "a", "x", ctx->store->lease,
                                       NULL, 0);
    }

    if (c->error && ctx->store_claimed) {
        /*
         * the client went away meanwhile (an HTTP/2 stream reset): the
         * record ends canceled and not forwarded, its id usable again
         */

        ctx->store_done = 0;
        ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);

    } else {
        ngx_http_core_run_phases(r);
    }

    ngx_http_run_posted_requests(c);
}


/*
 * a reply the claim cannot use, typically an error reply (-OOM, -READONLY,
 * -NOPERM): the store is there but refuses; one error line per outage,
 * with the store's words
 */

static void
ngx_http_dynamo_rl_ledger_failing(ngx_http_request_t *r, redisReply *reply)
{
    size_t                      len;
    u_char                     *p;
    ngx_http_dynamo_rl_zone_t  *zone;
    u_char                      text[128];

    zone = ngx_http_dynamo_rl_get_zone(r);

    if (!ngx_atomic_cmp_set(&zone->sh->store_failing, 0, 1)) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl store: the claim was refused");
        return;
    }

    len = 0;

    if (reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STATUS)
    {
        len = ngx_min((size_t) reply->len, 60);
    }

    /* the store's text is not trusted for the log */

    p = ngx_http_dynamo_rl_escape_log(text, text + sizeof(text),
                                      (u_char *) reply->str, len);

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "dynamo rl store: the claims are refused: \"%*s\"",
                  p - text, text);
}


/*
 * a record in the store changes state, queued and sent with the others:
 * the response never waits for it; "values" are code and sse, or none
 */

static void
ngx_http_dynamo_rl_ledger_move(ngx_http_dynamo_rl_ctx_t *ctx, char *from,
    char *to, ngx_msec_t ttl, ngx_str_t *values, ngx_uint_t n)
{
    ngx_uint_t  i;
    ngx_str_t   argv[6 + 2];
    u_char      buf[NGX_INT64_LEN];

    argv[0] = ctx->store_key;
    argv[1] = ctx->store->proc_key;
    argv[2] = ctx->store_owner;
    argv[3].data = (u_char *) from;
    argv[3].len = ngx_strlen(from);
    argv[4].data = (u_char *) to;
    argv[4].len = ngx_strlen(to);
    argv[5].data = buf;
    argv[5].len = ngx_sprintf(buf, "%M", ttl) - buf;

    for (i = 0; i < n && i < 2; i++) {
        argv[6 + i] = values[i];
    }

    (void) ngx_http_dynamo_rl_store_eval(ctx->store,
                                         NGX_HTTP_DYNAMO_RL_SCRIPT_MOVE,
                                         2, 6 + i, argv, NULL, NULL, NULL);
}


void
ngx_http_dynamo_rl_ledger_finish(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    off_t                            sent;
    uint64_t                         now;
    ngx_uint_t                       state, status, upstream, reason;
    ngx_uint_t                       replayed;
    ngx_connection_t                *c;
    ngx_http_upstream_state_t       *us;
    ngx_http_dynamo_rl_node_t       *lr;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_replayed_t    rp;

    /*
     * an attempt, once admitted: a request that access control refused is
     * no attempt, and one the module refused before it was forwarded was
     * not recorded; one refused after it was (an error page that would
     * forward it again) ends as what its upstream answered
     */

    if (ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST || ctx->settled
        || (ctx->deny_reason.len
            && (r->upstream == NULL || !r->upstream->request_sent)))
    {
        return;
    }

    if (!ctx->admitted) {
        if (r->headers_out.status >= NGX_HTTP_BAD_REQUEST) {
            ngx_str_set(&ctx->outcome, "rejected");
        }

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

    /*
     * the upstream's own status, which proxy_intercept_errors and an
     * error page may have hidden from the client behind another one
     */

    upstream = NGX_HTTP_OK;

    if (r->upstream_states != NULL && r->upstream_states->nelts) {
        us = r->upstream_states->elts;
        us = &us[r->upstream_states->nelts - 1];

        if (us->status) {
            upstream = us->status;
        }
    }

    state = ngx_http_dynamo_rl_ledger_verdict(r, ctx, status, upstream,
                                              &reason);

    ctx->outcome = ngx_http_dynamo_rl_ledger_states[state];

    ngx_http_dynamo_rl_drain_leave(ctx);

    if (lr == NULL && !ctx->store_claimed) {
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

    if (!ctx->written && (r->upstream == NULL || !r->upstream->request_sent))
    {
        reason = NGX_HTTP_DYNAMO_RL_NOT_FORWARDED;
    }

    if (ctx->store_claimed) {
        ngx_http_dynamo_rl_ledger_store_end(ctx, state, status, sent, reason);
    }

    if (lr == NULL) {
        return;
    }

    /* the end of the response, when it ended, is the record's */

    now = ngx_http_dynamo_rl_ctx_end(ctx);

    zone = ctx->ledger_zone;

    ngx_shmtx_lock(&zone->shpool->mutex);

    lr->status = (u_short) status;
    lr->stream = ctx->sse_on;
    lr->bytes = sent;

    replayed = ngx_http_dynamo_rl_ledger_replayed(lr, &rp);

    ngx_http_dynamo_rl_ledger_end(zone, lr, state, reason, now);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (replayed) {
        ngx_http_dynamo_rl_ledger_replayed_end(ctx, &rp, state, status, sent,
                                               reason);
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "dynamo rl ledger: \"%V\" %V, status %ui",
                   &ctx->attempt_id, &ctx->outcome, status);
}


/*
 * an attempt's terminal state and its reason, at its end: succeeded only
 * when nginx handed the last byte of a whole 2xx answer (for SSE, one that
 * ended with [DONE] and carried no error) to the client connection; the
 * log phase comes after send_timeout (c->timedout) and after a
 * worker_shutdown_timeout, which both end a response that was whole
 * upstream with its bytes still buffered in nginx
 */

static ngx_uint_t
ngx_http_dynamo_rl_ledger_verdict(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_uint_t status, ngx_uint_t upstream,
    ngx_uint_t *reason)
{
    ngx_connection_t  *c;

    c = r->connection;

    if (ctx->sse.error) {
        *reason = ctx->sse.aborted ? NGX_HTTP_DYNAMO_RL_ABORTED
                                   : NGX_HTTP_DYNAMO_RL_IN_STREAM_ERROR;
        return NGX_HTTP_DYNAMO_RL_FAILED;
    }

    if (ngx_http_dynamo_rl_ledger_shutdown(r)) {
        *reason = NGX_HTTP_DYNAMO_RL_GATEWAY_SHUTDOWN;
        return NGX_HTTP_DYNAMO_RL_FAILED;
    }

    if (c->timedout || c->write->timedout
#if (NGX_HTTP_V2)
        || (r->stream && r->stream->connection->connection->timedout)
#endif
       )
    {
        *reason = NGX_HTTP_DYNAMO_RL_SEND_TIMEOUT;
        return NGX_HTTP_DYNAMO_RL_FAILED;
    }

    if (c->error || status == NGX_HTTP_CLIENT_CLOSED_REQUEST) {
        *reason = NGX_HTTP_DYNAMO_RL_CLIENT_CLOSED;
        return NGX_HTTP_DYNAMO_RL_CANCELED;
    }

    if (!ctx->complete) {
        /* the upstream closed early, or nginx gave up mid-response */
        *reason = NGX_HTTP_DYNAMO_RL_UPSTREAM_INCOMPLETE;
        return NGX_HTTP_DYNAMO_RL_FAILED;
    }

    if (r->out || r->buffered || r->postponed || c->buffered) {
        *reason = NGX_HTTP_DYNAMO_RL_UNDELIVERED;
        return NGX_HTTP_DYNAMO_RL_FAILED;
    }

    if (status < NGX_HTTP_OK || status >= NGX_HTTP_SPECIAL_RESPONSE
        || upstream < NGX_HTTP_OK || upstream >= NGX_HTTP_SPECIAL_RESPONSE)
    {
        *reason = NGX_HTTP_DYNAMO_RL_UPSTREAM_STATUS;
        return NGX_HTTP_DYNAMO_RL_FAILED;
    }

    if (ctx->sse_on && !ctx->sse.done) {
        *reason = NGX_HTTP_DYNAMO_RL_UPSTREAM_INCOMPLETE;
        return NGX_HTTP_DYNAMO_RL_FAILED;
    }

    *reason = 0;

    return NGX_HTTP_DYNAMO_RL_SUCCEEDED;
}


/*
 * worker_shutdown_timeout closed the connection: the shutdown timer sets
 * "close" and "error" on every connection of an exiting worker process;
 * an HTTP/1.x request sees them on its own connection, an HTTP/2 stream
 * on the connection it is multiplexed on, where "close" is reset at once:
 * there, an error that no read or write of the client's caused
 */

static ngx_uint_t
ngx_http_dynamo_rl_ledger_shutdown(ngx_http_request_t *r)
{
    ngx_connection_t  *c;

    if (!ngx_exiting) {
        return 0;
    }

    c = r->connection;

#if (NGX_HTTP_V2)
    if (r->stream) {
        c = r->stream->connection->connection;

        return c->error && !c->timedout && !c->read->eof && !c->read->error
               && !c->write->error;
    }
#endif

    return c->close && c->error;
}


/*
 * the record's end, joined with the other ends of this turn into one
 * script run: owner, to, ttl, code, sse, b, t1 and rs ("nf" for an
 * attempt never forwarded)
 */

static void
ngx_http_dynamo_rl_ledger_store_end(ngx_http_dynamo_rl_ctx_t *ctx,
    ngx_uint_t state, ngx_uint_t status, off_t sent, ngx_uint_t reason)
{
    u_char     *p;
    uint64_t    end;
    ngx_str_t   keys[2], argv[NGX_HTTP_DYNAMO_RL_END_ARGS];
    u_char      buf[4 * NGX_INT64_LEN];

    static u_char  states[] = "?asufc";

    ctx->store_claimed = 0;

    /* the record goes from accepted to its end at once */
    ngx_http_dynamo_rl_ledger_undefer(ctx);

    p = buf;

    argv[0] = ctx->store_owner;

    argv[1].data = &states[state];
    argv[1].len = 1;

    argv[2].data = p;
    p = ngx_sprintf(p, "%M", ctx->ttl);
    argv[2].len = p - argv[2].data;

    argv[3].data = p;
    p = ngx_sprintf(p, "%ui", status);
    argv[3].len = p - argv[3].data;

    argv[4].data = (u_char *) (ctx->sse_on ? "1" : "0");
    argv[4].len = 1;

    argv[5].data = p;
    p = ngx_sprintf(p, "%O", sent);
    argv[5].len = p - argv[5].data;

    /*
     * t1 is t0 plus the time since the claim on the monotonic clock, as
     * in the zone: a step of the wall clock during the attempt changes
     * neither the duration nor "ended"
     */

    end = ngx_http_dynamo_rl_ctx_end(ctx);

    argv[6].data = p;
    p = ngx_sprintf(p, "%uL", ctx->store_t0 + (end > ctx->store_t0_mono
                                               ? end - ctx->store_t0_mono
                                               : 0));
    argv[6].len = p - argv[6].data;

    argv[7].data = (u_char *) ngx_http_dynamo_rl_attempt_reasons[reason].code;
    argv[7].len = reason ? 2 : 0;

    keys[0] = ctx->store->proc_key;
    keys[1] = ctx->store_key;

    (void) ngx_http_dynamo_rl_store_batch(ctx->store,
                                          NGX_HTTP_DYNAMO_RL_SCRIPT_END, 1,
                                          keys, NGX_HTTP_DYNAMO_RL_END_ARGS,
                                          argv, NULL, NULL, NULL);
}


/*
 * under the mutex: the store's record of an attempt of a worker process
 * that died ends as it does in the zone; its owner is known up to the
 * process, which the end script takes as a prefix
 */

static void
ngx_http_dynamo_rl_ledger_store_settle(ngx_http_dynamo_rl_node_t *lr,
    ngx_pid_t pid, uint64_t boot)
{
    u_char                          *p;
    ngx_str_t                        keys[2];
    ngx_str_t                        argv[NGX_HTTP_DYNAMO_RL_END_ARGS];
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;
    u_char                           k[256], owner[128];
    u_char                           ttl[NGX_INT64_LEN], t1[NGX_INT64_LEN];

    drmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                                ngx_http_dynamo_rl_module);
    store = drmcf->store;

    if (store == NULL
        || store->attempt_key.len + lr->len > sizeof(k)
        || store->replica.len + 2 * NGX_INT64_LEN + 4 > sizeof(owner))
    {
        return;
    }

    p = ngx_cpymem(k, store->attempt_key.data, store->attempt_key.len);
    p = ngx_cpymem(p, lr->id, lr->len);

    keys[0] = store->proc_key;
    keys[1].data = k;
    keys[1].len = p - k;

    /* owner, to, ttl, code, sse, b, t1, rs */

    argv[0].data = owner;
    argv[0].len = ngx_sprintf(owner, "%V/%P.%016xL/*", &store->replica, pid,
                              boot)
                  - owner;

    ngx_str_set(&argv[1], "f");

    /* still in flight: "expires" holds the TTL it gets as it ends */

    argv[2].data = ttl;
    argv[2].len = ngx_sprintf(ttl, "%uL", lr->expires) - ttl;

    ngx_str_set(&argv[3], "0");
    argv[4].data = (u_char *) (lr->stream ? "1" : "0");
    argv[4].len = 1;
    ngx_str_set(&argv[5], "0");

    argv[6].data = t1;
    argv[6].len = ngx_sprintf(t1, "%uL", ngx_http_dynamo_rl_wall()) - t1;

    ngx_str_set(&argv[7], "we");

    (void) ngx_http_dynamo_rl_store_batch(store, NGX_HTTP_DYNAMO_RL_SCRIPT_END,
                                          1, keys,
                                          NGX_HTTP_DYNAMO_RL_END_ARGS, argv,
                                          NULL, NULL, NULL);
}


/* a request freed without its log phase: the attempt did not complete */

void
ngx_http_dynamo_rl_ledger_abandon(ngx_http_dynamo_rl_ctx_t *ctx)
{
    uint64_t                        now;
    ngx_uint_t                      replayed;
    ngx_http_dynamo_rl_node_t      *lr;
    ngx_http_dynamo_rl_zone_t      *zone;
    ngx_http_dynamo_rl_replayed_t   rp;

    /* the posted event lives in the request's pool */
    ngx_http_dynamo_rl_ledger_undefer(ctx);

    if (ctx->store_cmd != NULL) {
        /* the request went away while its claim was waited for */

        ngx_http_dynamo_rl_store_cancel(ctx->store_cmd);
        ctx->store_cmd = NULL;

        ngx_http_dynamo_rl_ledger_move(ctx, "a", "x", ctx->store->lease,
                                       NULL, 0);
    }

    if (ctx->store_claimed) {
        ngx_http_dynamo_rl_ledger_store_end(ctx, NGX_HTTP_DYNAMO_RL_FAILED, 0,
                                            0, 0);
    }

    lr = ctx->node;

    if (lr == NULL) {
        return;
    }

    ctx->node = NULL;
    zone = ctx->ledger_zone;
    now = ngx_http_dynamo_rl_now();

    ngx_shmtx_lock(&zone->shpool->mutex);

    replayed = ngx_http_dynamo_rl_ledger_replayed(lr, &rp);

    ngx_http_dynamo_rl_ledger_end(zone, lr, NGX_HTTP_DYNAMO_RL_FAILED, 0, now);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (replayed) {
        ngx_http_dynamo_rl_ledger_replayed_end(ctx, &rp,
                                               NGX_HTTP_DYNAMO_RL_FAILED, 0,
                                               0, 0);
    }
}


/*
 * under the mutex: whether the record, forwarded under on_error=local, was
 * put in the store in flight; then its end goes there too, and what that
 * takes is copied out of the record
 */

static ngx_uint_t
ngx_http_dynamo_rl_ledger_replayed(ngx_http_dynamo_rl_node_t *lr,
    ngx_http_dynamo_rl_replayed_t *rp)
{
    if (!(lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_REPLAYED)) {
        return 0;
    }

    lr->request_id &= (u_char) ~NGX_HTTP_DYNAMO_RL_NODE_REPLAYED;

    rp->len = lr->len;
    ngx_memcpy(rp->id, lr->id, lr->len);
    rp->started = lr->started;
    rp->begun = lr->begun;
    rp->ttl = lr->expires;

    return 1;
}


/* the end of a record the replay put in the store, as its owner */

static void
ngx_http_dynamo_rl_ledger_replayed_end(ngx_http_dynamo_rl_ctx_t *ctx,
    ngx_http_dynamo_rl_replayed_t *rp, ngx_uint_t state, ngx_uint_t status,
    off_t sent, ngx_uint_t reason)
{
    u_char                          *p;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;
    u_char                           key[512], owner[256];

    drmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                                ngx_http_dynamo_rl_module);
    store = drmcf->store;

    if (store == NULL
        || store->attempt_key.len + rp->len > sizeof(key)
        || store->identity.len + 2 > sizeof(owner))
    {
        return;
    }

    p = ngx_cpymem(key, store->attempt_key.data, store->attempt_key.len);
    p = ngx_cpymem(p, rp->id, rp->len);

    ctx->store = store;
    ctx->store_key.data = key;
    ctx->store_key.len = p - key;

    p = ngx_cpymem(owner, store->identity.data, store->identity.len);
    p = ngx_cpymem(p, "/l", 2);

    ctx->store_owner.data = owner;
    ctx->store_owner.len = p - owner;

    ctx->store_t0 = rp->started;
    ctx->store_t0_mono = rp->begun;
    ctx->ttl = rp->ttl;

    ngx_http_dynamo_rl_ledger_store_end(ctx, state, status, sent, reason);

    /* the batch holds copies */

    ngx_str_null(&ctx->store_key);
    ngx_str_null(&ctx->store_owner);
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


/*
 * with a store, every worker process beats for itself each heartbeat
 * (the "live" script): its records in flight keep their lease while it
 * lives, and the records of processes fallen silent end
 */

ngx_int_t
ngx_http_dynamo_rl_ledger_store_init_process(ngx_http_dynamo_rl_store_t *store,
    ngx_cycle_t *cycle)
{
    ngx_http_dynamo_rl_live_t       *lv;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    lv = ngx_pcalloc(cycle->pool, sizeof(ngx_http_dynamo_rl_live_t));
    if (lv == NULL) {
        return NGX_ERROR;
    }

    drmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                                ngx_http_dynamo_rl_module);

    lv->store = store;
    lv->zone = drmcf->shm_zone->data;

    lv->ev.handler = ngx_http_dynamo_rl_ledger_live;
    lv->ev.data = lv;
    lv->ev.log = cycle->log;
    lv->ev.cancelable = 1;

    ngx_add_timer(&lv->ev, store->heartbeat);

    store->busy = ngx_http_dynamo_rl_ledger_own;
    store->busy_data = lv;

    return NGX_OK;
}


/*
 * this worker process has requests of its own in flight: as it shuts
 * down gracefully, it reconnects to the store for them
 */

static ngx_uint_t
ngx_http_dynamo_rl_ledger_own(void *data)
{
    ngx_http_dynamo_rl_live_t *lv = data;

    return lv->zone->sh->slot_requests[ngx_http_dynamo_rl_slot()] != 0;
}


/*
 * a worker process's last words as it exits, after its records' ends: a
 * fast shutdown (SIGTERM) ends the records it still had in flight as
 * failed (worker_exited); sent if the store is there, once, unwaited
 */

void
ngx_http_dynamo_rl_ledger_store_exit_process(ngx_http_dynamo_rl_store_t *store)
{
    ngx_http_dynamo_rl_store_flush_batches(store);

    (void) ngx_http_dynamo_rl_ledger_live_send(store, "bye", NULL, NULL);
}


/*
 * how long a worker process may be silent before its records in flight
 * end: six heartbeats, 3 s at least, but half the lease at most, so that
 * they end before their lease runs out and the id is taken for unused.
 * With wait=, a beat may wait in the store behind one WAIT (up to
 * timeout), and so may the next: two beats of a live process are at most
 * 2 * timeout + heartbeat apart, and the silence is twice that at least
 * (dynamo_rl_store refuses a lease shorter than twice the silence then)
 */

static ngx_msec_t
ngx_http_dynamo_rl_ledger_silence(ngx_http_dynamo_rl_store_t *store)
{
    ngx_msec_t  silence;

    silence = ngx_max(NGX_HTTP_DYNAMO_RL_LIVE_BEATS * store->heartbeat,
                      NGX_HTTP_DYNAMO_RL_LIVE_SILENCE);

    if (store->wait) {
        silence = ngx_max(silence,
                          2 * (2 * store->timeout + store->heartbeat));
    }

    if (silence > store->lease / 2) {
        silence = ngx_max(store->lease / 2, 2 * store->heartbeat);
    }

    return silence;
}


static ngx_int_t
ngx_http_dynamo_rl_ledger_live_send(ngx_http_dynamo_rl_store_t *store,
    char *action, ngx_http_dynamo_rl_store_pt handler, void *data)
{
    ngx_msec_t  silence;
    ngx_str_t   argv[7];
    u_char      lease[NGX_INT64_LEN], quiet[NGX_INT64_LEN];

    if (!ngx_http_dynamo_rl_store_ready(store)) {
        return NGX_DECLINED;
    }

    silence = ngx_http_dynamo_rl_ledger_silence(store);

    argv[0] = store->live_key;
    argv[1] = store->proc_key;
    argv[2] = store->identity;

    argv[3].data = lease;
    argv[3].len = ngx_sprintf(lease, "%M", store->lease) - lease;

    argv[4].data = quiet;
    argv[4].len = ngx_sprintf(quiet, "%M", silence) - quiet;

    argv[5].data = (u_char *) action;
    argv[5].len = ngx_strlen(action);

    /* one worker process of each instance looks for silent ones */

    argv[6].data = (u_char *) (ngx_worker == 0 ? "1" : "0");
    argv[6].len = 1;

    return ngx_http_dynamo_rl_store_eval(store, NGX_HTTP_DYNAMO_RL_SCRIPT_LIVE,
                                         2, 7, argv, handler, data, NULL);
}


static void
ngx_http_dynamo_rl_ledger_live(ngx_event_t *ev)
{
    ngx_http_dynamo_rl_live_t *lv = ev->data;

    /* a process that shuts down gracefully beats while it has requests */

    if (ngx_exiting) {
        /* and admits nothing: not counted in dynamo_rl_store_up */
        ngx_http_dynamo_rl_store_conn_leave(lv->store);
    }

    if (!lv->busy
        && ngx_http_dynamo_rl_ledger_live_send(lv->store, "beat",
                                               ngx_http_dynamo_rl_ledger_lived,
                                               lv)
           == NGX_OK)
    {
        lv->busy = 1;
    }

    if (lv->zone->sh->store_local && !lv->replaying
        && lv->store->on_error == NGX_HTTP_DYNAMO_RL_STORE_LOCAL)
    {
        ngx_http_dynamo_rl_ledger_replay(lv);
    }

    ngx_add_timer(ev, lv->store->heartbeat);
}


/*
 * the store answers again after an outage under on_error=local: the
 * records this replica forwarded meanwhile go into it, before it admits
 * anything new through it (until none is left, the zone decides); each
 * worker process sends its own records in flight (their ends follow on
 * the same connection) and any ended one, up to a batch each heartbeat.
 * An id another replica claimed meanwhile is a conflict: counted, logged.
 */

static void
ngx_http_dynamo_rl_ledger_replay(ngx_http_dynamo_rl_live_t *lv)
{
    u_char                       *p;
    uint64_t                      now;
    ngx_int_t                     rc;
    ngx_str_t                     keys[2];
    ngx_str_t                     argv[NGX_HTTP_DYNAMO_RL_REPLAY_ARGS];
    ngx_uint_t                    i, n, hash;
    ngx_queue_t                  *q, *queues[2];
    ngx_http_dynamo_rl_node_t    *lr;
    ngx_http_dynamo_rl_zone_t    *zone;
    ngx_http_dynamo_rl_store_t   *store;
    ngx_http_dynamo_rl_replay_t  *rp;
    u_char                        key[512], owner[256];
    u_char                        buf[6 * NGX_INT64_LEN];

    static u_char  states[] = "?asufc";

    store = lv->store;
    zone = lv->zone;

    if (!ngx_http_dynamo_rl_store_ready(store)
        || store->identity.len + 2 > sizeof(owner)
        || store->attempt_key.len + NGX_HTTP_DYNAMO_RL_ATTEMPT_ID_LEN
           > sizeof(key))
    {
        return;
    }

    now = ngx_http_dynamo_rl_now();
    n = 0;

    /*
     * the records to send, copied out and taken out of the zone's count;
     * sent once the mutex is released (a failed send calls handlers)
     */

    ngx_shmtx_lock(&zone->shpool->mutex);

    queues[0] = &zone->sh->active;
    queues[1] = &zone->sh->finished;

    for (i = 0; i < 2; i++) {
        for (q = ngx_queue_head(queues[i]);
             q != ngx_queue_sentinel(queues[i])
             && n < NGX_HTTP_DYNAMO_RL_REPLAY_BATCH;
             q = ngx_queue_next(q))
        {
            lr = ngx_queue_data(q, ngx_http_dynamo_rl_node_t, queue);

            if (!(lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_LOCAL)
                || (i == 0 && lr->pid != ngx_pid))
            {
                continue;
            }

            rp = &lv->replay[n++];

            rp->owner = lv;
            rp->in_flight = (i == 0);
            rp->rec.len = lr->len;
            ngx_memcpy(rp->rec.id, lr->id, lr->len);
            rp->rec.started = lr->started;
            rp->rec.begun = lr->begun;
            rp->rec.ttl = lr->expires;
            rp->state = (i == 0 && lr->state != NGX_HTTP_DYNAMO_RL_STREAMING)
                        ? NGX_HTTP_DYNAMO_RL_ACCEPTED : lr->state;
            rp->status = lr->status;
            rp->stream = lr->stream;
            rp->bytes = lr->bytes;
            rp->ended = lr->ended;
            rp->reason = (lr->reason < NGX_HTTP_DYNAMO_RL_ATTEMPT_REASONS)
                         ? lr->reason : 0;
            rp->left = (i == 0) ? (uint64_t) store->lease
                                : (lr->expires > now ? lr->expires - now : 1);

            lr->request_id &= (u_char) ~NGX_HTTP_DYNAMO_RL_NODE_LOCAL;
            zone->sh->store_local--;

            if (i == 0) {
                lr->request_id |= NGX_HTTP_DYNAMO_RL_NODE_REPLAYED;
            }
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    p = ngx_cpymem(owner, store->identity.data, store->identity.len);
    p = ngx_cpymem(p, "/l", 2);

    argv[0].data = owner;
    argv[0].len = p - owner;

    argv[9] = store->replica;

    keys[0] = store->records;

    for (i = 0; i < n; i++) {
        rp = &lv->replay[i];

        argv[1].data = &states[rp->state];
        argv[1].len = 1;

        p = buf;

        argv[2].data = p;
        p = ngx_sprintf(p, "%uL", rp->left);
        argv[2].len = p - argv[2].data;

        argv[3].data = p;
        p = ngx_sprintf(p, "%ui", rp->status);
        argv[3].len = p - argv[3].data;

        argv[4].data = (u_char *) (rp->stream ? "1" : "0");
        argv[4].len = 1;

        argv[5].data = p;
        p = ngx_sprintf(p, "%uL", rp->bytes);
        argv[5].len = p - argv[5].data;

        argv[6].data = p;
        p = ngx_sprintf(p, "%uL", rp->rec.started);
        argv[6].len = p - argv[6].data;

        argv[7].data = p;
        p = ngx_sprintf(p, "%uL", rp->ended);
        argv[7].len = p - argv[7].data;

        argv[8].data = (u_char *)
                       ngx_http_dynamo_rl_attempt_reasons[rp->reason].code;
        argv[8].len = ngx_strlen(argv[8].data);

        argv[10].data = p;
        p = ngx_sprintf(p, "%uL", rp->rec.ttl);
        argv[10].len = p - argv[10].data;

        p = ngx_cpymem(key, store->attempt_key.data, store->attempt_key.len);
        p = ngx_cpymem(p, rp->rec.id, rp->rec.len);

        keys[1].data = key;
        keys[1].len = p - key;

        lv->replaying++;

        rc = ngx_http_dynamo_rl_store_batch(store,
                 NGX_HTTP_DYNAMO_RL_SCRIPT_REPLAY, 1, keys,
                 NGX_HTTP_DYNAMO_RL_REPLAY_ARGS, argv,
                 ngx_http_dynamo_rl_ledger_replay_done, rp, NULL);

        if (rc == NGX_OK) {
            continue;
        }

        lv->replaying--;

        /* not sent: back in the count, for the next round */

        rp->id.data = rp->rec.id;
        rp->id.len = rp->rec.len;

        hash = ngx_http_dynamo_rl_ledger_hash(zone->sh, &rp->id);

        ngx_shmtx_lock(&zone->shpool->mutex);

        lr = ngx_http_dynamo_rl_ledger_lookup(zone->sh, hash, rp->rec.id,
                                              rp->rec.len);

        if (lr != NULL && !(lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_LOCAL)) {
            lr->request_id |= NGX_HTTP_DYNAMO_RL_NODE_LOCAL;
            lr->request_id &= (u_char) ~NGX_HTTP_DYNAMO_RL_NODE_REPLAYED;
            zone->sh->store_local++;
        }

        ngx_shmtx_unlock(&zone->shpool->mutex);
    }
}


static void
ngx_http_dynamo_rl_ledger_replay_done(void *data, ngx_int_t rc,
    redisReply *reply)
{
    ngx_http_dynamo_rl_replay_t *rp = data;

    u_char                     *p;
    ngx_str_t                   id, state, replica;
    ngx_uint_t                  conflict, hash, left;
    ngx_http_dynamo_rl_live_t  *lv;
    ngx_http_dynamo_rl_node_t  *lr;
    ngx_http_dynamo_rl_zone_t  *zone;
    u_char                      text[128];

    lv = rp->owner;
    zone = lv->zone;

    id.data = rp->rec.id;
    id.len = rp->rec.len;

    if (rc == NGX_OK
        && ngx_http_dynamo_rl_resp_replay(reply, &conflict, &state, &replica)
           == NGX_OK)
    {
        lv->replayed++;

        if (conflict) {
            lv->conflicts++;
            (void) ngx_atomic_fetch_add(&zone->sh->store.conflicts, 1);

            /* the store's text is not trusted for the log */

            p = ngx_http_dynamo_rl_escape_log(text, text + sizeof(text),
                                              replica.data,
                                              ngx_min(replica.len, 63));

            ngx_log_error(NGX_LOG_WARN, lv->ev.log, 0,
                          "dynamo rl store: attempt \"%V\", forwarded by "
                          "this replica while the store was unavailable, "
                          "was claimed meanwhile through replica \"%*s\": "
                          "a conflict", &id, p - text, text);
        }

        if (!conflict || !rp->in_flight) {
            goto done;
        }

        /* another replica's record: this one's end is not for it */

        hash = ngx_http_dynamo_rl_ledger_hash(zone->sh, &id);

        ngx_shmtx_lock(&zone->shpool->mutex);

        lr = ngx_http_dynamo_rl_ledger_lookup(zone->sh, hash, id.data, id.len);

        if (lr != NULL) {
            lr->request_id &= (u_char) ~NGX_HTTP_DYNAMO_RL_NODE_REPLAYED;
        }

        ngx_shmtx_unlock(&zone->shpool->mutex);

        goto done;
    }

    /* not answered: the record waits for the next round */

    hash = ngx_http_dynamo_rl_ledger_hash(zone->sh, &id);

    ngx_shmtx_lock(&zone->shpool->mutex);

    lr = ngx_http_dynamo_rl_ledger_lookup(zone->sh, hash, id.data, id.len);

    if (lr != NULL && !(lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_LOCAL)) {
        lr->request_id |= NGX_HTTP_DYNAMO_RL_NODE_LOCAL;
        lr->request_id &= (u_char) ~NGX_HTTP_DYNAMO_RL_NODE_REPLAYED;
        zone->sh->store_local++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

done:

    if (--lv->replaying) {
        return;
    }

    left = zone->sh->store_local;

    if (left == 0 && lv->replayed) {
        ngx_log_error(NGX_LOG_NOTICE, lv->ev.log, 0,
                      "dynamo rl store: %ui record(s) forwarded while the "
                      "store was unavailable are in the store, %ui "
                      "conflict(s)", lv->replayed, lv->conflicts);

        lv->replayed = 0;
        lv->conflicts = 0;
    }
}


/* identity, count, for each silent process whose records were ended */

static void
ngx_http_dynamo_rl_ledger_lived(void *data, ngx_int_t rc, redisReply *reply)
{
    ngx_http_dynamo_rl_live_t *lv = data;

    u_char      *p;
    size_t       i;
    ngx_msec_t   silence;
    redisReply  *id, *n;
    u_char       text[256];

    lv->busy = 0;

    if (rc != NGX_OK || reply->type != REDIS_REPLY_ARRAY) {
        return;
    }

    silence = ngx_http_dynamo_rl_ledger_silence(lv->store);

    for (i = 0; i + 1 < reply->elements; i += 2) {
        id = reply->element[i];
        n = reply->element[i + 1];

        if (id->type != REDIS_REPLY_STRING || n->type != REDIS_REPLY_INTEGER
            || n->integer <= 0)
        {
            continue;
        }

        /* the store's text is not trusted for the log */

        p = ngx_http_dynamo_rl_escape_log(text, text + sizeof(text),
                                          (u_char *) id->str,
                                          ngx_min((size_t) id->len, 128));

        ngx_log_error(NGX_LOG_WARN, lv->ev.log, 0,
                      "dynamo rl store: %L attempt(s) in flight of worker "
                      "process \"%*s\", silent for over %Mms, ended as failed "
                      "(replica_lost)", n->integer, p - text, text, silence);
    }
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


/*
 * attempts adopted in flight from another zone (a reload that resized the
 * zone, a binary upgrade) whose owner, a process of that zone, is gone:
 * the state file's writer (ngx_http_dynamo_rl_state.c) first marks those
 * whose owner is gone ("settle" 0, the number marked), then merges the
 * file, which has every end the owner made before it exited, then ends
 * as failed those still marked ("settle" 1): nothing else would end them
 */

ngx_uint_t
ngx_http_dynamo_rl_ledger_orphans(ngx_http_dynamo_rl_zone_t *zone,
    ngx_uint_t settle)
{
    uint64_t                     now;
    ngx_pid_t                    pid;
    ngx_uint_t                   n;
    ngx_queue_t                 *q, *next;
    ngx_http_dynamo_rl_node_t   *lr;
    ngx_http_dynamo_rl_shctx_t  *sh;

    sh = zone->sh;
    now = ngx_http_dynamo_rl_now();
    n = 0;
    pid = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (q = ngx_queue_head(&sh->active);
         q != ngx_queue_sentinel(&sh->active) && sh->adopted;
         q = next)
    {
        next = ngx_queue_next(q);
        lr = ngx_queue_data(q, ngx_http_dynamo_rl_node_t, queue);

        if (!(lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_ADOPTED)) {
            continue;
        }

        if (!settle) {
            if (lr->pid != ngx_pid && kill(lr->pid, 0) == -1
                && ngx_errno == NGX_ESRCH)
            {
                lr->request_id |= NGX_HTTP_DYNAMO_RL_NODE_ORPHAN;
                n++;
            }

            continue;
        }

        if (!(lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_ORPHAN)) {
            continue;
        }

        lr->request_id &= ~(NGX_HTTP_DYNAMO_RL_NODE_ADOPTED
                            |NGX_HTTP_DYNAMO_RL_NODE_ORPHAN);
        sh->adopted--;

        ngx_http_dynamo_rl_ledger_end(zone, lr, NGX_HTTP_DYNAMO_RL_FAILED,
                                      NGX_HTTP_DYNAMO_RL_WORKER_EXITED, now);
        pid = lr->pid;
        n++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (settle && n) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "dynamo rl ledger: %ui attempt(s) in flight in "
                      "worker process %P of another zone, which exited, "
                      "ended as failed", n, pid);
    }

    return n;
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

        /*
         * without the process's identity (no room for it in the zone),
         * the store's heartbeats end the record, as of a silent process
         */

        if ((lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_STORE)
            && sh->slot_boot != NULL && sh->slot_boot[slot] != 0)
        {
            ngx_http_dynamo_rl_ledger_store_settle(lr, pid,
                                                   sh->slot_boot[slot]);
        }

        if (lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_ADOPTED) {
            lr->request_id &= ~(NGX_HTTP_DYNAMO_RL_NODE_ADOPTED
                                |NGX_HTTP_DYNAMO_RL_NODE_ORPHAN);
            sh->adopted--;
        }

        ngx_http_dynamo_rl_ledger_end(zone, lr, NGX_HTTP_DYNAMO_RL_FAILED,
                                      NGX_HTTP_DYNAMO_RL_WORKER_EXITED, now);
        n++;
    }

    sh->slot_pid[slot] = 0;
    sh->slot_requests[slot] = 0;

    if (sh->slot_boot != NULL) {
        sh->slot_boot[slot] = 0;
    }

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
    ngx_http_dynamo_rl_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    if (ctx != NULL && ngx_http_dynamo_rl_ledger_header(r, ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_next_header_filter(r);
}


/*
 * the ledger's part of the header filter, also called by the module's
 * request plane filter, which runs it without the other planes' filters
 */

ngx_int_t
ngx_http_dynamo_rl_ledger_header(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    ngx_http_dynamo_rl_node_t  *lr;
    ngx_http_dynamo_rl_zone_t  *zone;

    if (ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        || ctx->deny_reason.len || ctx->logged)
    {
        return NGX_OK;
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

    if (ctx->store_claimed
        && ngx_http_dynamo_rl_ledger_defer(r, ctx) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (lr == NULL) {
        return NGX_OK;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    lr->state = NGX_HTTP_DYNAMO_RL_STREAMING;
    lr->status = (u_short) r->headers_out.status;
    lr->stream = ctx->sse_on;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return NGX_OK;
}


/*
 * the move to streaming waits for the end of the event loop's turn: a
 * response that is whole in the turn of its header (most that are not
 * streams) then goes from accepted to its end in one write to the store,
 * and a stream is seen streaming as soon as the turn ends
 */

static ngx_int_t
ngx_http_dynamo_rl_ledger_defer(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    ngx_event_t  *ev;

    ev = ctx->store_stream;

    if (ev == NULL) {
        ev = ngx_pcalloc(r->pool, sizeof(ngx_event_t));
        if (ev == NULL) {
            return NGX_ERROR;
        }

        ev->handler = ngx_http_dynamo_rl_ledger_stream;
        ev->data = r;
        ev->log = r->connection->log;

        ctx->store_stream = ev;
    }

    if (!ev->posted) {
        ngx_post_event(ev, &ngx_posted_events);
    }

    return NGX_OK;
}


static void
ngx_http_dynamo_rl_ledger_stream(ngx_event_t *ev)
{
    ngx_http_request_t *r = ev->data;

    ngx_str_t                  values[2];
    ngx_http_dynamo_rl_ctx_t  *ctx;
    u_char                     buf[NGX_INT_T_LEN];

    ctx = ngx_http_dynamo_rl_get_ctx(r);

    if (ctx == NULL || !ctx->store_claimed) {
        return;
    }

    values[0].data = buf;
    values[0].len = ngx_sprintf(buf, "%ui", r->headers_out.status) - buf;

    values[1].data = (u_char *) (ctx->sse_on ? "1" : "0");
    values[1].len = 1;

    ngx_http_dynamo_rl_ledger_move(ctx, "a", "s", ctx->store->lease, values,
                                   2);
}


static void
ngx_http_dynamo_rl_ledger_undefer(ngx_http_dynamo_rl_ctx_t *ctx)
{
    if (ctx->store_stream != NULL && ctx->store_stream->posted) {
        ngx_delete_posted_event(ctx->store_stream);
    }
}


static ngx_int_t
ngx_http_dynamo_rl_ledger_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t                  rc;
    ngx_http_dynamo_rl_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_dynamo_rl_module);

    if (ctx == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    if (in == NULL) {
        /* a flush of what the client did not take at once */

        rc = ngx_http_next_body_filter(r, in);

        if (ctx->complete) {
            ngx_http_dynamo_rl_ledger_sent(r, ctx, rc);
        }

        return rc;
    }

    rc = ngx_http_dynamo_rl_ledger_body(r, ctx, in);

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        return ngx_http_next_body_filter(r, in);
    }

    rc = ngx_http_next_body_filter(r, in);

    ngx_http_dynamo_rl_ledger_sent(r, ctx, rc);

    return rc;
}


/*
 * the ledger's part of the body filter, before the next filter:
 * NGX_DECLINED when the response is not the ledger's to follow, and then
 * ngx_http_dynamo_rl_ledger_sent() is not to be called after it
 */

ngx_int_t
ngx_http_dynamo_rl_ledger_body(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_chain_t *in)
{
    ngx_chain_t  *cl;

    if (ctx->plane != NGX_HTTP_DYNAMO_RL_PLANE_REQUEST
        || ctx->deny_reason.len || ctx->complete)
    {
        return NGX_DECLINED;
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

    return NGX_OK;
}


/*
 * after the next filter: settled as soon as the whole response is
 * written (with the last buffer or with a later flush of what the client
 * did not take at once), not at the log phase, which a lingering close
 * can hold back for seconds
 */

void
ngx_http_dynamo_rl_ledger_sent(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_int_t rc)
{
    if (ctx->complete && rc == NGX_OK && !r->out && !r->buffered
        && !r->postponed && !r->connection->buffered
        && !r->connection->error)
    {
        ngx_http_dynamo_rl_ledger_finish(r, ctx);
    }
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
    u_char                          *p;
    ngx_int_t                        rc;
    ngx_str_t                        id;
    ngx_http_core_loc_conf_t        *clcf;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

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

    /* a UUID is looked up in its lower-case form, as it was recorded */

    if (id.len == NGX_HTTP_DYNAMO_RL_UUID_LEN) {
        p = ngx_pnalloc(r->pool, id.len);
        if (p == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        id.data = ngx_cpymem(p, id.data, id.len) - id.len;

        (void) ngx_http_dynamo_rl_attempt_id_canonical(id.data, id.len);
    }

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    if (drmcf->store != NULL) {
        return ngx_http_dynamo_rl_attempts_store(r, drmcf->store, &id);
    }

    return ngx_http_dynamo_rl_attempts_local(r, &id, 0);
}


/*
 * the attempt as this zone has it; "local" when a store is configured
 * but does not answer (on_error=local)
 */

static ngx_int_t
ngx_http_dynamo_rl_attempts_local(ngx_http_request_t *r, ngx_str_t *id,
    ngx_uint_t local)
{
    u_char                        *p, *q;
    uint64_t                       now, duration;
    ngx_uint_t                     found;
    ngx_http_dynamo_rl_node_t     *lr;
    ngx_http_dynamo_rl_zone_t     *zone;
    ngx_http_dynamo_rl_record_t    rec;
    u_char                         request_id[NGX_HTTP_DYNAMO_RL_UUID_LEN];
    u_char                         tenant[255];

    zone = ngx_http_dynamo_rl_get_zone(r);
    now = ngx_http_dynamo_rl_now();

    found = 0;
    duration = 0;
    ngx_memzero(&rec, sizeof(ngx_http_dynamo_rl_record_t));

    ngx_shmtx_lock(&zone->shpool->mutex);

    lr = ngx_http_dynamo_rl_ledger_lookup(zone->sh,
                                          ngx_http_dynamo_rl_ledger_hash(
                                              zone->sh, id),
                                          id->data, id->len);

    if (lr != NULL
        && (lr->state < NGX_HTTP_DYNAMO_RL_SUCCEEDED || lr->expires > now))
    {
        found = 1;
        rec.state = lr->state;
        rec.status = lr->status;
        rec.stream = lr->stream;
        rec.reason = lr->reason;
        rec.bytes = lr->bytes;
        rec.started = lr->started;
        rec.ended = lr->ended;
        duration = rec.ended ? rec.ended - rec.started
                             : ngx_http_dynamo_rl_ledger_elapsed(lr, now);

        q = lr->id + lr->len;

        if (lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_REQUEST_ID) {
            p = ngx_http_dynamo_rl_uuid_unpack(request_id, q);
            rec.request_id.data = request_id;
            rec.request_id.len = p - request_id;
            q += 16;
        }

        if (lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_TENANT) {
            rec.tenant.len = *q;
            rec.tenant.data = tenant;
            ngx_memcpy(tenant, q + 1, rec.tenant.len);
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (!found && local) {
        /* the store may have it: a 404 would invite a resubmit */

        return ngx_http_dynamo_rl_store_down(r, "the shared store does not "
                                             "answer and this replica has "
                                             "no record of the attempt, "
                                             "retry later");
    }

    if (!found) {
        return ngx_http_dynamo_rl_error(r, NGX_HTTP_NOT_FOUND,
                                        "unknown_attempt",
                                        "no such attempt, or it expired");
    }

    return ngx_http_dynamo_rl_attempt_send(r, id, &rec, duration, local);
}


static ngx_int_t
ngx_http_dynamo_rl_attempts_store(ngx_http_request_t *r,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *id)
{
    u_char                       *p;
    ngx_uint_t                    i;
    ngx_pool_cleanup_t           *cln;
    ngx_http_dynamo_rl_lookup_t  *lk;
    ngx_str_t                     argv[2 + NGX_HTTP_DYNAMO_RL_RECORD_NFIELDS];

    static char  *fields[] = { NGX_HTTP_DYNAMO_RL_RECORD_FIELDS };

    lk = ngx_pcalloc(r->pool, sizeof(ngx_http_dynamo_rl_lookup_t));
    if (lk == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    lk->request = r;
    lk->id = *id;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_dynamo_rl_store_cleanup;
    cln->data = &lk->cmd;

    p = ngx_pnalloc(r->pool, store->attempt_key.len + id->len);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&argv[0], "HMGET");
    argv[1].data = p;
    p = ngx_cpymem(p, store->attempt_key.data, store->attempt_key.len);
    p = ngx_cpymem(p, id->data, id->len);
    argv[1].len = p - argv[1].data;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_RECORD_NFIELDS; i++) {
        argv[2 + i].data = (u_char *) fields[i];
        argv[2 + i].len = ngx_strlen(fields[i]);
    }

    if (ngx_http_dynamo_rl_store_command(store, NGX_HTTP_DYNAMO_RL_STORE_OP_GET,
                                         2 + NGX_HTTP_DYNAMO_RL_RECORD_NFIELDS,
                                         argv,
                                         ngx_http_dynamo_rl_attempts_found,
                                         lk, &lk->cmd)
        != NGX_OK)
    {
        return ngx_http_dynamo_rl_attempts_unavailable(r, store, id);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_http_dynamo_rl_attempts_found(void *data, ngx_int_t rc,
    redisReply *reply)
{
    ngx_http_dynamo_rl_lookup_t *lk = data;

    uint64_t                         duration;
    ngx_connection_t                *c;
    ngx_http_request_t              *r;
    ngx_http_dynamo_rl_record_t      rec;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    r = lk->request;
    c = r->connection;
    lk->cmd = NULL;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    if (rc != NGX_OK
        || ngx_http_dynamo_rl_resp_record(reply, &rec) != NGX_OK)
    {
        if (rc == NGX_OK) {
            ngx_log_error(NGX_LOG_ERR, c->log, 0,
                          "dynamo rl store: unexpected reply to the lookup "
                          "of an attempt");
        }

        rc = ngx_http_dynamo_rl_attempts_unavailable(r, drmcf->store,
                                                     &lk->id);

    } else if (!rec.found) {
        rc = ngx_http_dynamo_rl_error(r, NGX_HTTP_NOT_FOUND,
                                      "unknown_attempt",
                                      "no such attempt, or it expired");

    } else {
        duration = 0;

        /*
         * the end of a worker process that died is the wall clock of
         * the one that settled it (ngx_http_dynamo_rl_ledger_store_settle()),
         * which may be behind t0: never a negative duration, and "ended"
         * stays started plus duration_ms
         */

        if (rec.ended) {
            if (rec.ended > rec.started) {
                duration = rec.ended - rec.started;

            } else {
                rec.ended = rec.started;
            }

        } else if (ngx_http_dynamo_rl_wall() > rec.started) {
            duration = ngx_http_dynamo_rl_wall() - rec.started;
        }

        rc = ngx_http_dynamo_rl_attempt_send(r, &lk->id, &rec, duration, 0);
    }

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


/*
 * never 404 when the store cannot say: a trainer would take it for an
 * attempt that never ran and send it again
 */

static ngx_int_t
ngx_http_dynamo_rl_attempts_unavailable(ngx_http_request_t *r,
    ngx_http_dynamo_rl_store_t *store, ngx_str_t *id)
{
    if (store->on_error == NGX_HTTP_DYNAMO_RL_STORE_LOCAL) {
        return ngx_http_dynamo_rl_attempts_local(r, id, 1);
    }

    return ngx_http_dynamo_rl_store_down(r, "the shared store does not "
                                         "answer: the attempt's state is "
                                         "not known, retry later");
}


static ngx_int_t
ngx_http_dynamo_rl_attempt_send(ngx_http_request_t *r, ngx_str_t *id,
    ngx_http_dynamo_rl_record_t *rec, uint64_t duration, ngx_uint_t local)
{
    u_char     *p;
    size_t      len;
    ngx_str_t   body;

    if (rec->state < NGX_HTTP_DYNAMO_RL_ACCEPTED
        || rec->state > NGX_HTTP_DYNAMO_RL_CANCELED)
    {
        rec->state = NGX_HTTP_DYNAMO_RL_ACCEPTED;
    }

    len = sizeof("{\"attempt_id\":\"\",\"state\":\"\",\"status\":,"
                 "\"stream\":false,\"bytes_sent\":,\"started\":\"\","
                 "\"ended\":\"\",\"duration_ms\":}") - 1
          + sizeof(",\"reason\":\"upstream_incomplete\"")
          + sizeof(",\"request_id\":\"\"") + NGX_HTTP_DYNAMO_RL_UUID_LEN
          + sizeof(",\"replica\":\"\"") + rec->replica.len
          + ngx_escape_json(NULL, rec->replica.data, rec->replica.len)
          + sizeof(",\"tenant\":\"\"") + rec->tenant.len
          + ngx_escape_json(NULL, rec->tenant.data, rec->tenant.len)
          + sizeof(",\"source\":\"local\"")
          + id->len + sizeof("streaming") + 3 * NGX_INT64_LEN
          + 2 * NGX_HTTP_DYNAMO_RL_ISO_LEN;

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the id passed the attempt id grammar: nothing to escape */

    body.data = p;

    p = ngx_sprintf(p, "{\"attempt_id\":\"%V\",\"state\":\"%V\",\"status\":",
                    id, &ngx_http_dynamo_rl_ledger_states[rec->state]);

    p = rec->status ? ngx_sprintf(p, "%ui", rec->status)
                    : ngx_cpymem(p, "null", 4);

    p = ngx_sprintf(p, ",\"stream\":%s,\"bytes_sent\":%uL,\"started\":\"",
                    rec->stream ? "true" : "false", rec->bytes);
    p = ngx_http_dynamo_rl_iso_time(p, rec->started);
    p = ngx_cpymem(p, "\",\"ended\":", sizeof("\",\"ended\":") - 1);

    if (rec->ended) {
        *p++ = '"';
        p = ngx_http_dynamo_rl_iso_time(p, rec->ended);
        *p++ = '"';

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    p = ngx_sprintf(p, ",\"duration_ms\":%uL", duration);

    /* Dynamo's request id: the attempt id when it is a UUID */

    p = ngx_cpymem(p, ",\"request_id\":", sizeof(",\"request_id\":") - 1);

    if (rec->request_id.len == NGX_HTTP_DYNAMO_RL_UUID_LEN
        && ngx_http_dynamo_rl_uuid_valid(rec->request_id.data,
                                         rec->request_id.len)
           == NGX_OK)
    {
        p = ngx_sprintf(p, "\"%V\"", &rec->request_id);

    } else if (ngx_http_dynamo_rl_uuid_valid(id->data, id->len) == NGX_OK) {
        p = ngx_sprintf(p, "\"%V\"", id);

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    /* only when there is one: the fields of a plain record stay as they were */

    if (rec->reason && rec->reason < NGX_HTTP_DYNAMO_RL_ATTEMPT_REASONS) {
        p = ngx_sprintf(p, ",\"reason\":\"%V\"",
                        &ngx_http_dynamo_rl_attempt_reasons[rec->reason]
                             .name);
    }

    /* the tenant the gateway assigned, from variables: escaped */

    if (rec->tenant.len) {
        p = ngx_cpymem(p, ",\"tenant\":\"", sizeof(",\"tenant\":\"") - 1);
        p = (u_char *) ngx_escape_json(p, rec->tenant.data, rec->tenant.len);
        *p++ = '"';
    }

    /* as the store has it: whoever writes there is not trusted for JSON */

    if (rec->replica.len) {
        p = ngx_cpymem(p, ",\"replica\":\"", sizeof(",\"replica\":\"") - 1);
        p = (u_char *) ngx_escape_json(p, rec->replica.data,
                                       rec->replica.len);
        *p++ = '"';
    }

    if (local) {
        p = ngx_cpymem(p, ",\"source\":\"local\"",
                       sizeof(",\"source\":\"local\"") - 1);
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
 * under the mutex: a record of another zone (the state file, or the zone
 * of the previous configuration), unless the id is in the ledger already;
 * one in flight stays in flight here, owned by the process "rec->pid" of
 * the other zone ("adopted"), until that process's end of it arrives the
 * same way or the process is gone.  NGX_DECLINED: the id is known;
 * NGX_DONE: an adopted record took the end "rec" brought; NGX_ERROR: no
 * room
 */

ngx_int_t
ngx_http_dynamo_rl_ledger_restore(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_node_t *rec, ngx_str_t *id)
{
    ngx_uint_t                  hash, in_flight;
    ngx_http_dynamo_rl_node_t  *lr;

    hash = ngx_http_dynamo_rl_ledger_hash(zone->sh, id);
    in_flight = (rec->state < NGX_HTTP_DYNAMO_RL_SUCCEEDED);

    lr = ngx_http_dynamo_rl_ledger_lookup(zone->sh, hash, id->data, id->len);

    if (lr != NULL) {

        if (in_flight || lr->state >= NGX_HTTP_DYNAMO_RL_SUCCEEDED
            || !(lr->request_id & NGX_HTTP_DYNAMO_RL_NODE_ADOPTED))
        {
            return NGX_DECLINED;
        }

        /* the owner ended it in its zone */

        lr->state = rec->state;
        lr->reason = rec->reason;
        lr->status = rec->status;
        lr->stream = rec->stream;
        lr->bytes = rec->bytes;
        lr->ended = rec->ended;
        lr->expires = rec->expires;
        lr->request_id &= ~(NGX_HTTP_DYNAMO_RL_NODE_ADOPTED
                            |NGX_HTTP_DYNAMO_RL_NODE_ORPHAN);

        ngx_queue_remove(&lr->queue);
        ngx_queue_insert_head(&zone->sh->finished, &lr->queue);

        zone->sh->in_flight--;
        zone->sh->adopted--;

        return NGX_DONE;
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
    lr->pid = in_flight ? rec->pid : 0;
    lr->reason = rec->reason;
    lr->request_id = in_flight ? NGX_HTTP_DYNAMO_RL_NODE_ADOPTED : 0;

    ngx_memcpy(lr->id, id->data, id->len);

    lr->next = zone->sh->buckets[hash & zone->sh->mask];
    zone->sh->buckets[hash & zone->sh->mask] = lr;

    if (in_flight) {
        ngx_queue_insert_head(&zone->sh->active, &lr->queue);
        zone->sh->in_flight++;
        zone->sh->adopted++;

    } else {
        ngx_queue_insert_head(&zone->sh->finished, &lr->queue);
    }

    zone->sh->records++;

    return NGX_OK;
}
