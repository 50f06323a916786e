
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_parse.h"
#include "ngx_http_dynamo_rl_state.h"
#include "ngx_http_dynamo_rl_gate.h"


#define NGX_HTTP_DYNAMO_RL_GATE_BODY    4096
#define NGX_HTTP_DYNAMO_RL_RETRY_AFTER  5

/*
 * a change the store did not answer: how long the gate is read again to
 * learn whether it was made, past its deadline, and how often
 */
#define NGX_HTTP_DYNAMO_RL_GATE_VERIFY        3000
#define NGX_HTTP_DYNAMO_RL_GATE_VERIFY_EVERY  100


static ngx_int_t ngx_http_dynamo_rl_gate_known(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_main_conf_t *drmcf,
    ngx_http_dynamo_rl_loc_conf_t *drlcf);
static ngx_uint_t ngx_http_dynamo_rl_gate_in_flight(
    ngx_http_dynamo_rl_shctx_t *sh);
static ngx_int_t ngx_http_dynamo_rl_gate_handler(ngx_http_request_t *r);
static void ngx_http_dynamo_rl_gate_body(ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_gate_apply(ngx_http_request_t *r,
    ngx_http_dynamo_rl_gate_req_t *req, char **err);
static ngx_int_t ngx_http_dynamo_rl_gate_send(ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_gate_store_send(
    ngx_http_dynamo_rl_store_t *store, ngx_http_dynamo_rl_shctx_t *sh,
    char *action, ngx_http_dynamo_rl_gate_req_t *req, uint64_t deadline,
    ngx_str_t *token, ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp);
static void ngx_http_dynamo_rl_gate_clock(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_gate_reply_t *gr);
static void ngx_http_dynamo_rl_gate_store_apply(
    ngx_http_dynamo_rl_zone_t *zone, ngx_http_dynamo_rl_store_t *store,
    ngx_http_dynamo_rl_gate_reply_t *gr, ngx_log_t *log);
static void ngx_http_dynamo_rl_gate_poll(ngx_event_t *ev);
static void ngx_http_dynamo_rl_gate_polled(void *data, ngx_int_t rc,
    redisReply *reply);
static void ngx_http_dynamo_rl_gate_beat(ngx_event_t *ev);
static void ngx_http_dynamo_rl_gate_beaten(void *data, ngx_int_t rc,
    redisReply *reply);
static ngx_int_t ngx_http_dynamo_rl_gate_store_call(ngx_http_request_t *r,
    ngx_http_dynamo_rl_store_t *store, ngx_http_dynamo_rl_gate_req_t *req);
static void ngx_http_dynamo_rl_gate_answered(void *data, ngx_int_t rc,
    redisReply *reply);
static ngx_int_t ngx_http_dynamo_rl_gate_unavailable(ngx_http_request_t *r,
    ngx_http_dynamo_rl_store_t *store, ngx_uint_t change);
static void ngx_http_dynamo_rl_gate_call_cleanup(void *data);
static ngx_int_t ngx_http_dynamo_rl_gate_fleet_send(ngx_http_request_t *r,
    ngx_http_dynamo_rl_store_t *store, ngx_http_dynamo_rl_gate_reply_t *gr,
    ngx_uint_t local);


/* per worker process: the reads of the store's gate, the heartbeat */

typedef struct {
    ngx_http_dynamo_rl_zone_t      *zone;
    ngx_http_dynamo_rl_store_t     *store;
    ngx_event_t                     poll;
    ngx_event_t                     beat;
    ngx_uint_t                      polling;
    ngx_uint_t                      beating;
    ngx_uint_t                      beaten;
    ngx_str_t                       field;
} ngx_http_dynamo_rl_gate_poller_t;


static ngx_uint_t ngx_http_dynamo_rl_gate_own(
    ngx_http_dynamo_rl_gate_poller_t *gp);


/*
 * a call of the gate API on the store, waited for; a change carries a
 * deadline on the store's clock, past which the store refuses it, and a
 * token it leaves in the gate record: one the store did not answer is
 * followed by reads of the gate ("verifying") that tell whether it was
 * made
 */

typedef struct {
    ngx_http_request_t             *request;
    ngx_http_dynamo_rl_store_cmd_t *cmd;
    ngx_uint_t                      action;
    ngx_uint_t                      change;
    ngx_uint_t                      verifying;
    ngx_event_t                     verify;
    ngx_msec_t                      sent;      /* ngx_current_msec */
    ngx_msec_t                      until;     /* verifying, at most */
    uint64_t                        epoch;     /* the change's starting one */
    ngx_str_t                       token;
    ngx_uint_t                      clocking;  /* 1: a read for the clock,
                                                  2: read */
    ngx_http_dynamo_rl_gate_req_t   req;       /* the change, meanwhile */
} ngx_http_dynamo_rl_gate_call_t;


static ngx_int_t ngx_http_dynamo_rl_gate_change_send(
    ngx_http_dynamo_rl_gate_call_t *gc, ngx_http_dynamo_rl_store_t *store,
    ngx_http_dynamo_rl_gate_req_t *req);
static void ngx_http_dynamo_rl_gate_verify_later(
    ngx_http_dynamo_rl_gate_call_t *gc, ngx_http_dynamo_rl_store_t *store);
static void ngx_http_dynamo_rl_gate_verify(ngx_event_t *ev);
static ngx_int_t ngx_http_dynamo_rl_gate_verified(
    ngx_http_dynamo_rl_gate_call_t *gc, ngx_http_dynamo_rl_store_t *store,
    ngx_http_dynamo_rl_gate_reply_t *gr);


/*
 * PRECONTENT, request plane, after access control: the request is counted
 * in its process's drain slot, then, with dynamo_rl_gate on, the gate is
 * read; while it is closed, new generation is refused (NGX_DECLINED, the
 * verdict in ctx) and not recorded; the gate never authorises
 */

ngx_int_t
ngx_http_dynamo_rl_gate_enter(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    uint64_t                         now;
    ngx_uint_t                       retry;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_shctx_t      *sh;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

    zone = drmcf->shm_zone->data;
    sh = zone->sh;

    /*
     * counted before the gate is read, with an atomic add that is a full
     * barrier: a close either comes after the count and sees it in the
     * drain, or before the read and refuses the request
     */

    if (!ctx->counted) {
        ctx->counted = 1;
        ctx->slot_zone = zone;

        (void) ngx_atomic_fetch_add(
                         &sh->slot_requests[ngx_http_dynamo_rl_slot()], 1);
    }

    if (!drlcf->gate) {
        return NGX_OK;
    }

    /*
     * with a store and the ledger, the claim reads the store's gate itself,
     * in the same step: a view read a moment ago could still be closed
     */

    if (!sh->gate_closed || (drmcf->store != NULL && drlcf->ledger)) {
        return ngx_http_dynamo_rl_gate_known(r, ctx, drmcf, drlcf);
    }

    now = ngx_http_dynamo_rl_now();
    retry = NGX_HTTP_DYNAMO_RL_RETRY_AFTER;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (!sh->gate_closed) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return NGX_OK;
    }

    if (sh->gate_expires > now) {
        retry = (ngx_uint_t) ((sh->gate_expires - now + 999) / 1000);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "dynamo rl gate: closed, attempt \"%V\" refused",
                  &ctx->attempt_id);

    ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_CLOSED;
    ctx->retry_after = retry;

    return NGX_DECLINED;
}


/*
 * with a store, the zone's gate is the store's as last read; a location
 * without the ledger has nothing else to go by, and when that read is
 * older than gate_stale, it does not know the gate: a closed one might
 * read as open (the ledger's claim reads the store's gate itself)
 */

static ngx_int_t
ngx_http_dynamo_rl_gate_known(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx, ngx_http_dynamo_rl_main_conf_t *drmcf,
    ngx_http_dynamo_rl_loc_conf_t *drlcf)
{
    ngx_http_dynamo_rl_store_t  *store;
    ngx_http_dynamo_rl_shctx_t  *sh;

    store = drmcf->store;

    if (store == NULL) {
        return NGX_OK;
    }

    sh = ((ngx_http_dynamo_rl_zone_t *) drmcf->shm_zone->data)->sh;

    if (drlcf->ledger
        || (sh->store_known
            && ngx_http_dynamo_rl_now() - sh->store_read <= store->gate_stale))
    {
        return NGX_OK;
    }

    if (store->on_error == NGX_HTTP_DYNAMO_RL_STORE_LOCAL && sh->store_known) {
        /* the zone's gate, as the store last had it */
        (void) ngx_atomic_fetch_add(&sh->store.fallbacks, 1);
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "dynamo rl gate: the store's gate is not known, "
                  "attempt \"%V\" refused", &ctx->attempt_id);

    ctx->verdict = NGX_HTTP_DYNAMO_RL_VERDICT_STALE;

    return NGX_DECLINED;
}


/*
 * the slot was left by a process that exited, however it exited (the
 * ledger has ended its attempts by now); under the mutex, under which
 * the ledger frees the slots of processes that died
 */

void
ngx_http_dynamo_rl_gate_init_process(ngx_http_dynamo_rl_zone_t *zone)
{
    ngx_uint_t                       slot;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    slot = ngx_http_dynamo_rl_slot();

    drmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                                ngx_http_dynamo_rl_module);

    ngx_shmtx_lock(&zone->shpool->mutex);

    zone->sh->slot_requests[slot] = 0;
    zone->sh->slot_pid[slot] = ngx_pid;

    if (drmcf->store != NULL && zone->sh->slot_boot == NULL) {
        zone->sh->slot_boot = ngx_slab_calloc_locked(zone->shpool,
                                   NGX_HTTP_DYNAMO_RL_SLOTS * sizeof(uint64_t));
    }

    if (zone->sh->slot_boot != NULL) {
        zone->sh->slot_boot[slot] = (drmcf->store != NULL)
                                    ? drmcf->store->boot : 0;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


static ngx_uint_t
ngx_http_dynamo_rl_gate_in_flight(ngx_http_dynamo_rl_shctx_t *sh)
{
    ngx_pid_t   pid;
    ngx_uint_t  i, n, total;

    total = 0;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SLOTS; i++) {
        n = sh->slot_requests[i];

        if (n == 0) {
            continue;
        }

        pid = sh->slot_pid[i];

        /* a worker killed with requests in flight never counts them out */

        if (pid != 0 && pid != ngx_pid
            && kill(pid, 0) == -1 && ngx_errno == NGX_ESRCH)
        {
            continue;
        }

        total += n;
    }

    return total;
}


void
ngx_http_dynamo_rl_gate_state(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_gate_state_t *gs)
{
    uint64_t                     members;
    ngx_uint_t                   known;
    ngx_http_dynamo_rl_shctx_t  *sh;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    gs->closed = sh->gate_closed;
    gs->epoch = sh->gate_epoch;
    gs->expires = sh->gate_expires;
    gs->expires_wall = sh->gate_expires_wall;
    gs->changed = sh->gate_changed;
    gs->changed_ms = sh->store_changed;
    gs->reason_len = sh->gate_reason_len;
    ngx_memcpy(gs->reason, sh->gate_reason, sh->gate_reason_len);

    /*
     * the snapshot's (instance_id, system_url) set is not the one of when
     * the gate closed: a worker joined (at old weights) or left; a
     * snapshot that came or went counts as a change
     */

    members = ngx_http_dynamo_rl_zone_members(sh, &known);

    gs->members_changed = sh->gate_closed
                          && (sh->gate_members_known != known
                              || (known && sh->gate_members != members));

    ngx_shmtx_unlock(&zone->shpool->mutex);

    gs->in_flight = ngx_http_dynamo_rl_gate_in_flight(sh);
    gs->now = ngx_http_dynamo_rl_now();
    gs->expired = (gs->closed && gs->expires && gs->expires <= gs->now);
}


size_t
ngx_http_dynamo_rl_gate_json_len(ngx_http_dynamo_rl_gate_state_t *gs)
{
    return sizeof("{\"state\":\"closed\",\"reason\":\"\",\"epoch\":,"
                  "\"in_flight\":,\"lease_expires\":\"\",\"expired\":false,"
                  "\"lease_remaining_ms\":,\"changed\":\"\","
                  "\"members_changed\":false}") + NGX_INT64_LEN
           + gs->reason_len
           + ngx_escape_json(NULL, gs->reason, gs->reason_len)
           + 2 * NGX_INT_T_LEN + 2 * NGX_HTTP_DYNAMO_RL_ISO_LEN;
}


u_char *
ngx_http_dynamo_rl_gate_json(u_char *p, ngx_http_dynamo_rl_gate_state_t *gs)
{
    p = ngx_sprintf(p, "{\"state\":\"%s\",\"reason\":",
                    gs->closed ? "closed" : "open");

    if (gs->closed) {
        *p++ = '"';
        p = (u_char *) ngx_escape_json(p, gs->reason, gs->reason_len);
        *p++ = '"';

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    p = ngx_sprintf(p, ",\"epoch\":%ui,\"in_flight\":%ui,\"lease_expires\":",
                    gs->epoch, gs->in_flight);

    if (gs->closed && gs->expires) {
        *p++ = '"';
        p = ngx_http_dynamo_rl_iso_time(p, gs->expires_wall);
        *p++ = '"';

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    p = ngx_sprintf(p, ",\"expired\":%s,\"lease_remaining_ms\":",
                    gs->expired ? "true" : "false");

    if (gs->closed && gs->expires) {
        p = ngx_sprintf(p, "%uL", gs->expired ? 0 : gs->expires - gs->now);

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    p = ngx_cpymem(p, ",\"changed\":", sizeof(",\"changed\":") - 1);

    if (gs->changed_ms) {
        *p++ = '"';
        p = ngx_http_dynamo_rl_iso_time(p, gs->changed_ms);
        *p++ = '"';

    } else if (gs->changed) {
        *p++ = '"';
        p = ngx_http_dynamo_rl_iso_time(p, (uint64_t) gs->changed * 1000);
        *p++ = '"';

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    p = ngx_sprintf(p, ",\"members_changed\":%s",
                    !gs->closed ? "null"
                    : gs->members_changed ? "true" : "false");

    *p++ = '}';

    return p;
}


char *
ngx_http_dynamo_rl_gate_api(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_dynamo_rl_loc_conf_t *drlcf = conf;

    ngx_str_t  *value;

    value = cf->args->elts;

    if (cf->args->nelts == 2) {
        if (value[1].len != sizeof("read_only") - 1
            || ngx_strcmp(value[1].data, "read_only") != 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\", it must be "
                               "\"read_only\"", &value[1]);
            return NGX_CONF_ERROR;
        }

        drlcf->gate_read_only = 1;
    }

    return ngx_http_dynamo_rl_content_handler(cf,
               ngx_http_dynamo_rl_gate_handler);
}


static ngx_int_t
ngx_http_dynamo_rl_gate_handler(ngx_http_request_t *r)
{
    ngx_int_t                        rc;
    ngx_http_dynamo_rl_loc_conf_t   *drlcf;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
        rc = ngx_http_discard_request_body(r);

        if (rc != NGX_OK) {
            return rc;
        }

        drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

        if (drmcf->store != NULL) {
            rc = ngx_http_dynamo_rl_gate_store_call(r, drmcf->store, NULL);

            if (rc == NGX_DONE) {
                r->main->count++;
            }

            return rc;
        }

        return ngx_http_dynamo_rl_gate_send(r);
    }

    drlcf = ngx_http_get_module_loc_conf(r, ngx_http_dynamo_rl_module);

    /* a dashboard's or a monitor's view: it reads, never changes */

    if (drlcf->gate_read_only) {
        if (!(r->method & NGX_HTTP_POST)) {
            return ngx_http_dynamo_rl_read_only(r);
        }

        ngx_log_error(drlcf->log_level, r->connection->log, 0,
                      "dynamo rl gate: POST refused, this gate API is "
                      "read_only");

        return ngx_http_dynamo_rl_error(r, NGX_HTTP_FORBIDDEN, "read_only",
                                        "this gate API is read-only: GET "
                                        "and HEAD only");
    }

    if (!(r->method & NGX_HTTP_POST)) {
        if (ngx_http_dynamo_rl_allow(r, NGX_HTTP_GET|NGX_HTTP_HEAD
                                        |NGX_HTTP_POST)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_dynamo_rl_error(r, NGX_HTTP_NOT_ALLOWED, "method",
                                        "only GET, HEAD and POST");
    }

    if (ngx_http_dynamo_rl_cross_origin(r) != NGX_OK) {
        return ngx_http_dynamo_rl_error(r, NGX_HTTP_FORBIDDEN, "cross_origin",
                                        "request from another site");
    }

    if (r->headers_in.content_length_n > NGX_HTTP_DYNAMO_RL_GATE_BODY) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "dynamo rl gate: bad request: body is larger than 4k");

        return ngx_http_dynamo_rl_error(r, NGX_HTTP_BAD_REQUEST, "bad_body",
                                        "body is larger than 4k");
    }

    r->request_body_in_single_buf = 1;
    r->request_body_in_persistent_file = 0;

    rc = ngx_http_read_client_request_body(r, ngx_http_dynamo_rl_gate_body);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_dynamo_rl_gate_body(ngx_http_request_t *r)
{
    u_char                         *p, body[NGX_HTTP_DYNAMO_RL_GATE_BODY];
    char                           *err;
    size_t                          len, n;
    ssize_t                         got;
    ngx_int_t                       rc;
    ngx_chain_t                    *cl;
    ngx_http_dynamo_rl_zone_t      *zone;
    ngx_http_dynamo_rl_gate_req_t   req;
    ngx_http_dynamo_rl_main_conf_t *drmcf;

    len = 0;
    err = NULL;

    if (r->request_body != NULL) {
        for (cl = r->request_body->bufs; cl; cl = cl->next) {

            if (ngx_buf_in_memory(cl->buf)) {
                n = cl->buf->last - cl->buf->pos;
                p = cl->buf->pos;

                if (len + n > sizeof(body)) {
                    err = "body is larger than 4k";
                    break;
                }

                ngx_memcpy(body + len, p, n);
                len += n;
                continue;
            }

            if (!cl->buf->in_file || cl->buf->file == NULL) {
                /* an empty or special buffer, as with an empty body */
                continue;
            }

            n = (size_t) (cl->buf->file_last - cl->buf->file_pos);

            if (len + n > sizeof(body)) {
                err = "body is larger than 4k";
                break;
            }

            got = ngx_read_file(cl->buf->file, body + len, n,
                                cl->buf->file_pos);

            if (got != (ssize_t) n) {
                ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
                return;
            }

            len += n;
        }
    }

    if (err == NULL
        && ngx_http_dynamo_rl_json_gate(body, len, &req, &err) == NGX_OK)
    {
        drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);

        if (drmcf->store != NULL) {
            /* the store's gate; the zone's follows from the answer */

            rc = ngx_http_dynamo_rl_gate_store_call(r, drmcf->store, &req);

            if (rc != NGX_DONE) {
                ngx_http_finalize_request(r, rc);
            }

            return;
        }

        /* with state=, written to the file before the answer */

        zone = ngx_http_dynamo_rl_get_zone(r);
        ngx_http_dynamo_rl_state_begin(zone, r->connection->log);

        rc = ngx_http_dynamo_rl_gate_apply(r, &req, &err);

        if (ngx_http_dynamo_rl_state_end(zone, rc == NGX_OK,
                                         r->connection->log)
            != NGX_OK)
        {
            rc = ngx_http_dynamo_rl_error(r, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                          "state_unwritable",
                                          "the gate changed in this zone, "
                                          "but the state file could not be "
                                          "written: see the error log");
            ngx_http_finalize_request(r, rc);
            return;
        }

        if (rc == NGX_OK) {
            ngx_http_finalize_request(r, ngx_http_dynamo_rl_gate_send(r));
            return;
        }

        if (rc == NGX_BUSY) {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "dynamo rl gate: epoch %ui is not current",
                          req.epoch);

            rc = ngx_http_dynamo_rl_error(r, NGX_HTTP_CONFLICT,
                                          "epoch_mismatch", err);
            ngx_http_finalize_request(r, rc);
            return;
        }
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "dynamo rl gate: bad request: %s", err);

    rc = ngx_http_dynamo_rl_error(r, NGX_HTTP_BAD_REQUEST, "bad_body", err);

    ngx_http_finalize_request(r, rc);
}


static ngx_int_t
ngx_http_dynamo_rl_gate_apply(ngx_http_request_t *r,
    ngx_http_dynamo_rl_gate_req_t *req, char **err)
{
    uint64_t                     now, wall;
    ngx_http_dynamo_rl_zone_t   *zone;
    ngx_http_dynamo_rl_shctx_t  *sh;

    zone = ngx_http_dynamo_rl_get_zone(r);
    sh = zone->sh;
    now = ngx_http_dynamo_rl_now();
    wall = ngx_http_dynamo_rl_wall();

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (req->has_epoch && req->epoch != sh->gate_epoch) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        *err = "the gate changed since that epoch";
        return NGX_BUSY;
    }

    switch (req->action) {

    case NGX_HTTP_DYNAMO_RL_GATE_CLOSE:

        /* the fleet the gate closed on, for "members_changed" */

        if (!sh->gate_closed) {
            sh->gate_members = ngx_http_dynamo_rl_zone_members(sh,
                                                     &sh->gate_members_known);
        }

        sh->gate_closed = 1;
        sh->gate_lease = req->lease;
        sh->gate_expires = req->lease ? now + req->lease : 0;
        sh->gate_expires_wall = req->lease ? wall + req->lease : 0;
        sh->gate_reason_len = req->reason_len;
        ngx_memcpy(sh->gate_reason, req->reason, req->reason_len);
        break;

    case NGX_HTTP_DYNAMO_RL_GATE_RENEW:
        if (!sh->gate_closed) {
            ngx_shmtx_unlock(&zone->shpool->mutex);
            *err = "the gate is open: nothing to renew";
            return NGX_DECLINED;
        }

        if (req->lease) {
            sh->gate_lease = req->lease;
        }

        if (sh->gate_lease == 0) {
            ngx_shmtx_unlock(&zone->shpool->mutex);
            *err = "the gate was closed without a lease: give one";
            return NGX_DECLINED;
        }

        sh->gate_expires = now + sh->gate_lease;
        sh->gate_expires_wall = wall + sh->gate_lease;
        break;

    default: /* NGX_HTTP_DYNAMO_RL_GATE_OPEN */
        sh->gate_closed = 0;
        sh->gate_lease = 0;
        sh->gate_expires = 0;
        sh->gate_expires_wall = 0;
        sh->gate_reason_len = 0;
        break;
    }

    sh->gate_epoch++;
    sh->gate_changed = ngx_time();
    sh->store_changed = 0;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                  "dynamo rl gate: %s, epoch %ui",
                  req->action == NGX_HTTP_DYNAMO_RL_GATE_CLOSE ? "closed"
                  : req->action == NGX_HTTP_DYNAMO_RL_GATE_RENEW ? "renewed"
                  : "opened", sh->gate_epoch);

    return NGX_OK;
}


static ngx_int_t
ngx_http_dynamo_rl_gate_send(ngx_http_request_t *r)
{
    ngx_str_t                        body;
    ngx_http_dynamo_rl_gate_state_t  gs;

    ngx_http_dynamo_rl_gate_state(ngx_http_dynamo_rl_get_zone(r), &gs);

    body.data = ngx_pnalloc(r->pool, ngx_http_dynamo_rl_gate_json_len(&gs));
    if (body.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    body.len = ngx_http_dynamo_rl_gate_json(body.data, &gs) - body.data;

    return ngx_http_dynamo_rl_send_json(r, NGX_HTTP_OK, &body);
}


/*
 * with dynamo_rl_store: every worker process reads the store's gate each
 * gate_poll into the zone's gate, which then serves the fast 503 while
 * closed, the locations without the ledger, status and metrics; one
 * worker process of the instance (the first) reports its drain each
 * heartbeat
 */

ngx_int_t
ngx_http_dynamo_rl_gate_store_init_process(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_store_t *store, ngx_cycle_t *cycle)
{
    ngx_http_dynamo_rl_gate_poller_t  *gp;

    gp = ngx_pcalloc(cycle->pool, sizeof(ngx_http_dynamo_rl_gate_poller_t));
    if (gp == NULL) {
        return NGX_ERROR;
    }

    gp->zone = zone;
    gp->store = store;

    gp->poll.handler = ngx_http_dynamo_rl_gate_poll;
    gp->poll.data = gp;
    gp->poll.log = cycle->log;
    gp->poll.cancelable = 1;

    /* the first read as soon as the connection is up */
    ngx_add_timer(&gp->poll, 1);

    /*
     * the instance's field in the fleet: the replica's name, its master's
     * pid, so that the two instances of a binary upgrade each report
     * their own requests, and the zone's instance number, so that two
     * replicas of one name whose masters have one pid (containers, each
     * its own pid namespace, on host networking) never share a report
     */

    gp->field.data = ngx_pnalloc(cycle->pool,
                                 store->replica.len + 2 + NGX_INT64_LEN + 8);
    if (gp->field.data == NULL) {
        return NGX_ERROR;
    }

    gp->field.len = ngx_sprintf(gp->field.data, "%V/%P.%08xD",
                                &store->replica,
                                ngx_process == NGX_PROCESS_SINGLE
                                ? ngx_pid : ngx_parent,
                                zone->sh->instance)
                    - gp->field.data;

    gp->beat.handler = ngx_http_dynamo_rl_gate_beat;
    gp->beat.data = gp;
    gp->beat.log = cycle->log;
    gp->beat.cancelable = 1;

    if (ngx_worker == 0) {
        ngx_add_timer(&gp->beat, store->heartbeat);
    }

    return NGX_OK;
}


/*
 * KEYS: the gate, the fleet; ARGV: action, the epoch expected or "", the
 * lease, the reason, whether this instance last saw the gate closed and
 * the highest epoch it saw (for a gate record that is gone), a change's
 * deadline on the store's clock and its token ("" for a read)
 */

static ngx_int_t
ngx_http_dynamo_rl_gate_store_send(ngx_http_dynamo_rl_store_t *store,
    ngx_http_dynamo_rl_shctx_t *sh, char *action,
    ngx_http_dynamo_rl_gate_req_t *req, uint64_t deadline, ngx_str_t *token,
    ngx_http_dynamo_rl_store_pt handler, void *data,
    ngx_http_dynamo_rl_store_cmd_t **cmdp)
{
    ngx_str_t  argv[10];
    u_char     epoch[NGX_INT_T_LEN], lease[NGX_INT_T_LEN];
    u_char     seen[NGX_INT_T_LEN], until[NGX_INT64_LEN];

    argv[0] = store->gate_key;
    argv[1] = store->fleet_key;

    argv[2].data = (u_char *) action;
    argv[2].len = ngx_strlen(action);

    ngx_str_null(&argv[3]);
    ngx_str_set(&argv[4], "0");
    ngx_str_null(&argv[5]);

    if (req != NULL) {
        if (req->has_epoch) {
            argv[3].data = epoch;
            argv[3].len = ngx_sprintf(epoch, "%ui", req->epoch) - epoch;
        }

        argv[4].data = lease;
        argv[4].len = ngx_sprintf(lease, "%M", req->lease) - lease;

        argv[5].data = req->reason;
        argv[5].len = req->reason_len;
    }

    argv[6].data = (u_char *) (sh->gate_closed ? "1" : "0");
    argv[6].len = 1;

    argv[7].data = seen;
    argv[7].len = ngx_sprintf(seen, "%ui", sh->gate_epoch) - seen;

    ngx_str_null(&argv[8]);
    ngx_str_null(&argv[9]);

    if (token != NULL) {
        argv[8].data = until;
        argv[8].len = ngx_sprintf(until, "%uL", deadline) - until;
        argv[9] = *token;
    }

    return ngx_http_dynamo_rl_store_eval(store, NGX_HTTP_DYNAMO_RL_SCRIPT_GATE,
                                         2, 10, argv, handler, data, cmdp);
}


/*
 * the store's clock as a gate read found it, against the monotonic one
 * when the reply is handled (later than the store's TIME was taken, and
 * 1 ms less for the rounding of both): a deadline set from it is never
 * later on the store than the moment it is set for here
 */

static void
ngx_http_dynamo_rl_gate_clock(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_gate_reply_t *gr)
{
    uint64_t  mono;

    mono = ngx_http_dynamo_rl_now() + 1;

    if (gr->now <= mono) {
        return;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    zone->sh->store_skew = gr->now - mono;
    zone->sh->store_skew_known = 1;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


static void
ngx_http_dynamo_rl_gate_store_apply(ngx_http_dynamo_rl_zone_t *zone,
    ngx_http_dynamo_rl_store_t *store, ngx_http_dynamo_rl_gate_reply_t *gr,
    ngx_log_t *log)
{
    uint64_t                     now, left;
    ngx_uint_t                   changed, was;
    ngx_http_dynamo_rl_shctx_t  *sh;

    if (gr->result != NGX_HTTP_DYNAMO_RL_GATE_R_OK
        && gr->result != NGX_HTTP_DYNAMO_RL_GATE_R_CREATED
        && gr->result != NGX_HTTP_DYNAMO_RL_GATE_R_LOST)
    {
        return;
    }

    sh = zone->sh;
    now = ngx_http_dynamo_rl_now();

    /* this worker process knows the gate (dynamo_rl_ready) */
    store->gate_read = now;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /*
     * the reads of the worker processes cross: one sent before a change
     * may land after another's that saw it
     */

    if (gr->result == NGX_HTTP_DYNAMO_RL_GATE_R_OK && sh->store_known
        && gr->epoch < sh->gate_epoch
        && now - sh->store_read < store->gate_stale)
    {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return;
    }

    was = sh->gate_closed;
    changed = (sh->gate_epoch != gr->epoch || !sh->store_known);

    /* the fleet the gate closed on, as this instance saw it */

    if (gr->closed && !sh->gate_closed) {
        sh->gate_members = ngx_http_dynamo_rl_zone_members(sh,
                                                     &sh->gate_members_known);
    }

    sh->gate_closed = gr->closed;
    sh->gate_epoch = (ngx_uint_t) gr->epoch;
    sh->gate_lease = (ngx_msec_t) gr->lease;

    if (gr->closed && gr->expires) {
        /* the lease on this host's monotonic clock, judged by the store's */
        left = (gr->expires > gr->now) ? gr->expires - gr->now : 0;
        sh->gate_expires = now + left;
        sh->gate_expires_wall = gr->expires;

    } else {
        sh->gate_expires = 0;
        sh->gate_expires_wall = 0;
    }

    sh->gate_changed = (time_t) (gr->changed / 1000);
    sh->store_changed = gr->changed;

    sh->gate_reason_len = ngx_min(gr->reason.len,
                                  NGX_HTTP_DYNAMO_RL_GATE_REASON);
    ngx_memcpy(sh->gate_reason, gr->reason.data, sh->gate_reason_len);

    sh->store_read = now;
    sh->store_known = 1;

    /* the fleet for status and metrics, as fresh as the gate */

    if (gr->has_fleet) {
        sh->fleet_known = 1;
        sh->fleet_replicas = gr->fleet.replicas;
        sh->fleet_acked = gr->fleet.acked;
        sh->fleet_in_flight = gr->fleet.in_flight;
        sh->fleet_lost = gr->fleet.lost_total;
        sh->fleet_drained = gr->fleet.drained;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (gr->result == NGX_HTTP_DYNAMO_RL_GATE_R_LOST) {
        ngx_log_error(NGX_LOG_CRIT, log, 0,
                      "dynamo rl store: the gate record was lost while the "
                      "gate was closed, created again closed, epoch %uL",
                      gr->epoch);

    } else if (gr->result == NGX_HTTP_DYNAMO_RL_GATE_R_CREATED) {
        ngx_log_error(NGX_LOG_NOTICE, log, 0,
                      "dynamo rl store: no gate record, created open, "
                      "epoch %uL", gr->epoch);

    } else if (changed && (was != gr->closed)) {
        ngx_log_error(NGX_LOG_NOTICE, log, 0,
                      "dynamo rl gate: %s in the store, epoch %uL",
                      gr->closed ? "closed" : "open", gr->epoch);
    }
}


static void
ngx_http_dynamo_rl_gate_poll(ngx_event_t *ev)
{
    ngx_http_dynamo_rl_gate_poller_t *gp = ev->data;

    if (ngx_exiting || ngx_quit || ngx_terminate) {

        /*
         * a worker process that goes on with requests of its own reports
         * them, whichever it is: the drain holds until they end
         */

        if (!gp->beat.timer_set && ngx_http_dynamo_rl_gate_own(gp)) {
            ngx_add_timer(&gp->beat, 1);
        }

        return;
    }

    if (!gp->polling
        && ngx_http_dynamo_rl_store_ready(gp->store)
        && ngx_http_dynamo_rl_gate_store_send(gp->store, gp->zone->sh, "init",
                                              NULL, 0, NULL,
                                              ngx_http_dynamo_rl_gate_polled,
                                              gp, NULL)
           == NGX_OK)
    {
        gp->polling = 1;
    }

    ngx_add_timer(ev, gp->store->gate_poll);
}


static void
ngx_http_dynamo_rl_gate_polled(void *data, ngx_int_t rc, redisReply *reply)
{
    ngx_http_dynamo_rl_gate_poller_t *gp = data;

    ngx_http_dynamo_rl_gate_reply_t  gr;

    gp->polling = 0;

    if (rc != NGX_OK) {
        return;
    }

    if (ngx_http_dynamo_rl_resp_gate(reply, gp->store->heartbeat, &gr)
        != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ERR, gp->poll.log, 0,
                      "dynamo rl store: unexpected reply to the gate's read");
        return;
    }

    ngx_http_dynamo_rl_gate_clock(gp->zone, &gr);

    ngx_http_dynamo_rl_gate_store_apply(gp->zone, gp->store, &gr,
                                        gp->poll.log);

    /* the first report as soon as there is an epoch to acknowledge */

    if (gp->beat.timer_set && !gp->beaten) {
        gp->beaten = 1;
        ngx_del_timer(&gp->beat);
        ngx_add_timer(&gp->beat, 1);
    }
}


/*
 * the instance's report: the highest epoch it applied and its requests
 * in flight, and how long the report counts as alive (3 heartbeats); a
 * report that acknowledges the close epoch only falls after
 */

static void
ngx_http_dynamo_rl_gate_beat(ngx_event_t *ev)
{
    ngx_http_dynamo_rl_gate_poller_t *gp = ev->data;

    ngx_str_t                    argv[6];
    ngx_http_dynamo_rl_shctx_t  *sh;
    u_char                       seen[NGX_INT_T_LEN];
    u_char                       flight[NGX_INT_T_LEN];
    u_char                       alive[NGX_INT64_LEN];

    if ((ngx_exiting || ngx_quit || ngx_terminate)
        && !ngx_http_dynamo_rl_gate_own(gp))
    {
        return;
    }

    sh = gp->zone->sh;

    if (!gp->beating && sh->store_known
        && ngx_http_dynamo_rl_store_ready(gp->store))
    {
        argv[0] = gp->store->fleet_key;
        argv[1] = gp->store->gate_key;
        argv[2] = gp->field;

        argv[3].data = seen;
        argv[3].len = ngx_sprintf(seen, "%ui", sh->gate_epoch) - seen;

        argv[4].data = flight;
        argv[4].len = ngx_sprintf(flight, "%ui",
                                  ngx_http_dynamo_rl_gate_in_flight(sh))
                      - flight;

        /* the readers judge this report by this instance's heartbeat */

        argv[5].data = alive;
        argv[5].len = ngx_sprintf(alive, "%uL",
                                  (uint64_t) gp->store->heartbeat * 3)
                      - alive;

        if (ngx_http_dynamo_rl_store_eval(gp->store,
                                          NGX_HTTP_DYNAMO_RL_SCRIPT_BEAT,
                                          2, 6, argv,
                                          ngx_http_dynamo_rl_gate_beaten, gp,
                                          NULL)
            == NGX_OK)
        {
            gp->beating = 1;
        }
    }

    ngx_add_timer(ev, gp->store->heartbeat);
}


/* this worker process has requests of its own in flight */

static ngx_uint_t
ngx_http_dynamo_rl_gate_own(ngx_http_dynamo_rl_gate_poller_t *gp)
{
    return gp->zone->sh->slot_requests[ngx_http_dynamo_rl_slot()] != 0;
}


static void
ngx_http_dynamo_rl_gate_beaten(void *data, ngx_int_t rc, redisReply *reply)
{
    ngx_http_dynamo_rl_gate_poller_t *gp = data;

    gp->beating = 0;
}


/* the gate API on the store: GET (req NULL) or POST, waited for */

static ngx_int_t
ngx_http_dynamo_rl_gate_store_call(ngx_http_request_t *r,
    ngx_http_dynamo_rl_store_t *store, ngx_http_dynamo_rl_gate_req_t *req)
{
    ngx_pool_cleanup_t              *cln;
    ngx_http_dynamo_rl_zone_t       *zone;
    ngx_http_dynamo_rl_gate_call_t  *gc;

    gc = ngx_pcalloc(r->pool, sizeof(ngx_http_dynamo_rl_gate_call_t));
    if (gc == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    gc->request = r;
    gc->change = (req != NULL);
    gc->action = req ? req->action : 0;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_dynamo_rl_gate_call_cleanup;
    cln->data = gc;

    if (req != NULL) {
        return ngx_http_dynamo_rl_gate_change_send(gc, store, req);
    }

    zone = ngx_http_dynamo_rl_get_zone(r);

    if (ngx_http_dynamo_rl_gate_store_send(store, zone->sh, "init", NULL, 0,
                                           NULL,
                                           ngx_http_dynamo_rl_gate_answered,
                                           gc, &gc->cmd)
        != NGX_OK)
    {
        return ngx_http_dynamo_rl_gate_unavailable(r, store, 0);
    }

    return NGX_DONE;
}


/*
 * a change, with its deadline: the moment this process gives up waiting
 * for it (timeout), on the store's clock as last read; the store refuses
 * it from then on, so that a change answered 503 is never made later.
 * Its token: this process's identity and the request's number.
 */

static ngx_int_t
ngx_http_dynamo_rl_gate_change_send(ngx_http_dynamo_rl_gate_call_t *gc,
    ngx_http_dynamo_rl_store_t *store, ngx_http_dynamo_rl_gate_req_t *req)
{
    char                        *action;
    uint64_t                     skew, deadline;
    ngx_uint_t                   known;
    ngx_http_request_t          *r;
    ngx_http_dynamo_rl_zone_t   *zone;
    ngx_http_dynamo_rl_shctx_t  *sh;

    r = gc->request;
    zone = ngx_http_dynamo_rl_get_zone(r);
    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    skew = sh->store_skew;
    known = sh->store_skew_known;
    gc->epoch = req->has_epoch ? req->epoch : sh->gate_epoch;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (!known) {

        /*
         * no gate read has answered in this zone yet (a replica that has
         * just started): the gate is read first, for the store's clock,
         * and the change sent then; nothing is sent without it
         */

        if (gc->clocking) {
            return ngx_http_dynamo_rl_gate_unavailable(r, store, 1);
        }

        gc->clocking = 1;
        gc->req = *req;

        if (ngx_http_dynamo_rl_gate_store_send(store, sh, "init", NULL, 0,
                                               NULL,
                                               ngx_http_dynamo_rl_gate_answered,
                                               gc, &gc->cmd)
            != NGX_OK)
        {
            return ngx_http_dynamo_rl_gate_unavailable(r, store, 1);
        }

        return NGX_DONE;
    }

    gc->token.data = ngx_pnalloc(r->pool, store->identity.len + 2
                                          + 2 * NGX_ATOMIC_T_LEN);
    if (gc->token.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    gc->token.len = ngx_sprintf(gc->token.data, "%V/%uA.%ui",
                                &store->identity, r->connection->number,
                                r->connection->requests)
                    - gc->token.data;

    /* the store's timeout timer is set from ngx_current_msec too */

    gc->sent = ngx_current_msec;
    deadline = (uint64_t) gc->sent + skew + store->timeout;

    action = (req->action == NGX_HTTP_DYNAMO_RL_GATE_CLOSE) ? "close"
             : (req->action == NGX_HTTP_DYNAMO_RL_GATE_RENEW) ? "renew"
             : "open";

    if (ngx_http_dynamo_rl_gate_store_send(store, sh, action, req, deadline,
                                           &gc->token,
                                           ngx_http_dynamo_rl_gate_answered,
                                           gc, &gc->cmd)
        != NGX_OK)
    {
        return ngx_http_dynamo_rl_gate_unavailable(r, store, 1);
    }

    return NGX_DONE;
}


static void
ngx_http_dynamo_rl_gate_answered(void *data, ngx_int_t rc, redisReply *reply)
{
    ngx_http_dynamo_rl_gate_call_t *gc = data;

    ngx_connection_t                *c;
    ngx_http_request_t              *r;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_gate_reply_t  gr;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    r = gc->request;
    c = r->connection;
    gc->cmd = NULL;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);
    store = drmcf->store;

    if (rc != NGX_OK
        || ngx_http_dynamo_rl_resp_gate(reply, store->heartbeat, &gr)
           != NGX_OK)
    {
        if (rc == NGX_OK) {
            ngx_log_error(NGX_LOG_ERR, c->log, 0,
                          "dynamo rl store: unexpected reply to the gate "
                          "API");
        }

        /* the read before a change: nothing of the change was sent */

        if (gc->clocking == 1) {
            rc = ngx_http_dynamo_rl_gate_unavailable(r, store, 1);
            goto done;
        }

        /* a change that may have been sent: was it made? */

        if (gc->change) {
            if (gc->verifying
                && (ngx_msec_int_t) (gc->until - ngx_current_msec) <= 0)
            {
                rc = ngx_http_dynamo_rl_gate_verified(gc, store, NULL);
                goto done;
            }

            ngx_http_dynamo_rl_gate_verify_later(gc, store);
            return;
        }

        rc = ngx_http_dynamo_rl_gate_unavailable(r, store, 0);
        goto done;
    }

    ngx_http_dynamo_rl_gate_clock(ngx_http_dynamo_rl_get_zone(r), &gr);

    if (gc->clocking == 1) {
        gc->clocking = 2;

        rc = ngx_http_dynamo_rl_gate_change_send(gc, store, &gc->req);

        if (rc == NGX_DONE) {
            return;
        }

        goto done;
    }

    if (gc->verifying) {
        rc = ngx_http_dynamo_rl_gate_verified(gc, store, &gr);
        goto done;
    }

    switch (gr.result) {

    case NGX_HTTP_DYNAMO_RL_GATE_R_LATE:
        ngx_log_error(NGX_LOG_WARN, c->log, 0,
                      "dynamo rl gate: the store took the change after its "
                      "deadline and refused it, nothing changed");

        rc = ngx_http_dynamo_rl_store_down(r, "the shared store answered "
                                              "too late: the gate did not "
                                              "change");
        break;

    case NGX_HTTP_DYNAMO_RL_GATE_R_MISMATCH:
        ngx_log_error(NGX_LOG_INFO, c->log, 0,
                      "dynamo rl gate: epoch is not current in the store, "
                      "epoch %uL there", gr.epoch);

        rc = ngx_http_dynamo_rl_error(r, NGX_HTTP_CONFLICT, "epoch_mismatch",
                                      "the gate changed since that epoch");
        break;

    case NGX_HTTP_DYNAMO_RL_GATE_R_NOT_CLOSED:
    case NGX_HTTP_DYNAMO_RL_GATE_R_NO_LEASE:
        ngx_log_error(NGX_LOG_INFO, c->log, 0,
                      "dynamo rl gate: bad request: %s",
                      gr.result == NGX_HTTP_DYNAMO_RL_GATE_R_NO_LEASE
                      ? "no lease to renew" : "the gate is open");

        rc = ngx_http_dynamo_rl_error(r, NGX_HTTP_BAD_REQUEST, "bad_body",
                                      gr.result
                                      == NGX_HTTP_DYNAMO_RL_GATE_R_NO_LEASE
                                      ? "the gate was closed without a "
                                        "lease: give one"
                                      : "the gate is open: nothing to "
                                        "renew");
        break;

    case NGX_HTTP_DYNAMO_RL_GATE_R_NOGATE:
        if (ngx_http_dynamo_rl_retry_after(r, 1) != NGX_OK) {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
            break;
        }

        rc = ngx_http_dynamo_rl_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                      "gate_unknown",
                                      "no gate record in the store yet: "
                                      "nothing changed, retry later");
        break;

    default:
        ngx_http_dynamo_rl_gate_store_apply(ngx_http_dynamo_rl_get_zone(r),
                                            store, &gr, c->log);

        if (gc->change) {
            ngx_log_error(NGX_LOG_NOTICE, c->log, 0,
                          "dynamo rl gate: %s in the store, epoch %uL",
                          gc->action == NGX_HTTP_DYNAMO_RL_GATE_CLOSE
                          ? "closed"
                          : gc->action == NGX_HTTP_DYNAMO_RL_GATE_RENEW
                          ? "renewed" : "opened", gr.epoch);
        }

        rc = ngx_http_dynamo_rl_gate_fleet_send(r, store, &gr, 0);
    }

done:

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


/*
 * a change without an answer (timeout, the connection lost, a reply
 * that is not one): the gate is read again once the store's clock is
 * past the change's deadline, from when the store refuses it; a read
 * then comes after the change in the store if the change was made at
 * all.  Again every 100 ms while the store does not answer, for 3 s.
 */

static void
ngx_http_dynamo_rl_gate_verify_later(ngx_http_dynamo_rl_gate_call_t *gc,
    ngx_http_dynamo_rl_store_t *store)
{
    ngx_msec_t  after;

    if (!gc->verifying) {
        gc->verifying = 1;
        gc->until = gc->sent + store->timeout + NGX_HTTP_DYNAMO_RL_GATE_VERIFY;

        gc->verify.handler = ngx_http_dynamo_rl_gate_verify;
        gc->verify.data = gc;
        gc->verify.log = gc->request->connection->log;

        ngx_log_error(NGX_LOG_WARN, gc->verify.log, 0,
                      "dynamo rl gate: no answer from the store to the "
                      "change, reading the gate to learn whether it was "
                      "made");
    }

    after = gc->sent + store->timeout + 1;

    after = ((ngx_msec_int_t) (after - ngx_current_msec) > 0)
            ? after - ngx_current_msec : 0;

    if (gc->verify.timer_set) {
        ngx_del_timer(&gc->verify);
    }

    ngx_add_timer(&gc->verify,
                  ngx_max(after, NGX_HTTP_DYNAMO_RL_GATE_VERIFY_EVERY));
}


static void
ngx_http_dynamo_rl_gate_verify(ngx_event_t *ev)
{
    ngx_http_dynamo_rl_gate_call_t *gc = ev->data;

    ngx_connection_t                *c;
    ngx_http_request_t              *r;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_main_conf_t  *drmcf;

    r = gc->request;
    c = r->connection;

    drmcf = ngx_http_get_module_main_conf(r, ngx_http_dynamo_rl_module);
    store = drmcf->store;

    if (ngx_http_dynamo_rl_gate_store_send(store,
                                           ngx_http_dynamo_rl_get_zone(r)->sh,
                                           "init", NULL, 0, NULL,
                                           ngx_http_dynamo_rl_gate_answered,
                                           gc, &gc->cmd)
        == NGX_OK)
    {
        return;
    }

    if ((ngx_msec_int_t) (gc->until - ngx_current_msec) > 0) {
        ngx_http_dynamo_rl_gate_verify_later(gc, store);
        return;
    }

    ngx_http_finalize_request(r, ngx_http_dynamo_rl_gate_verified(gc, store,
                                                                   NULL));
    ngx_http_run_posted_requests(c);
}


/*
 * the gate as read after a change's deadline (NULL: not read in time):
 * the change's token in it, the change was made and is the last one; the
 * epoch it started from, nothing changed; another, someone else changed
 * the gate (and this change may have been made before that)
 */

static ngx_int_t
ngx_http_dynamo_rl_gate_verified(ngx_http_dynamo_rl_gate_call_t *gc,
    ngx_http_dynamo_rl_store_t *store, ngx_http_dynamo_rl_gate_reply_t *gr)
{
    ngx_http_request_t  *r;

    r = gc->request;

    if (gr == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "dynamo rl gate: the store does not answer, whether "
                      "the change was made is not known: read the gate");

        if (ngx_http_dynamo_rl_retry_after(r, 1) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_dynamo_rl_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                        "gate_outcome_unknown",
                                        "the shared store stopped answering "
                                        "after the change was sent: it may "
                                        "or may not have been made; read "
                                        "the gate");
    }

    if (gr->result == NGX_HTTP_DYNAMO_RL_GATE_R_OK
        || gr->result == NGX_HTTP_DYNAMO_RL_GATE_R_CREATED
        || gr->result == NGX_HTTP_DYNAMO_RL_GATE_R_LOST)
    {
        ngx_http_dynamo_rl_gate_store_apply(ngx_http_dynamo_rl_get_zone(r),
                                            store, gr, r->connection->log);
    }

    if (gr->result == NGX_HTTP_DYNAMO_RL_GATE_R_OK
        && gr->token.len == gc->token.len
        && ngx_memcmp(gr->token.data, gc->token.data, gc->token.len) == 0)
    {
        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                      "dynamo rl gate: %s in the store, epoch %uL, read "
                      "after no answer",
                      gc->action == NGX_HTTP_DYNAMO_RL_GATE_CLOSE
                      ? "closed"
                      : gc->action == NGX_HTTP_DYNAMO_RL_GATE_RENEW
                      ? "renewed" : "opened", gr->epoch);

        return ngx_http_dynamo_rl_gate_fleet_send(r, store, gr, 0);
    }

    if (gr->result == NGX_HTTP_DYNAMO_RL_GATE_R_OK
        && gr->epoch != gc->epoch)
    {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "dynamo rl gate: no answer from the store to the "
                      "change, and the gate changed meanwhile, epoch %uL "
                      "there", gr->epoch);

        return ngx_http_dynamo_rl_error(r, NGX_HTTP_CONFLICT,
                                        "epoch_mismatch",
                                        "the gate changed meanwhile: read "
                                        "it");
    }

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "dynamo rl gate: the store did not answer in time, "
                  "the change was not made");

    return ngx_http_dynamo_rl_store_down(r, "the shared store does not "
                                            "answer: the gate did not "
                                            "change");
}


static void
ngx_http_dynamo_rl_gate_call_cleanup(void *data)
{
    ngx_http_dynamo_rl_gate_call_t *gc = data;

    if (gc->cmd != NULL) {
        ngx_http_dynamo_rl_store_cancel(gc->cmd);
        gc->cmd = NULL;
    }

    if (gc->verify.timer_set) {
        ngx_del_timer(&gc->verify);
    }
}


/*
 * the store does not answer: a change is never made in the zone alone
 * (the replicas would disagree); a read may show the zone's view with
 * on_error=local
 */

static ngx_int_t
ngx_http_dynamo_rl_gate_unavailable(ngx_http_request_t *r,
    ngx_http_dynamo_rl_store_t *store, ngx_uint_t change)
{
    if (!change && store->on_error == NGX_HTTP_DYNAMO_RL_STORE_LOCAL
        && ngx_http_dynamo_rl_get_zone(r)->sh->store_known)
    {
        return ngx_http_dynamo_rl_gate_fleet_send(r, store, NULL, 1);
    }

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "dynamo rl gate: the store does not answer, %s",
                  change ? "nothing changed" : "the gate is not known");

    return ngx_http_dynamo_rl_store_down(r, change
                                         ? "the shared store does not "
                                           "answer: the gate did not change"
                                         : "the shared store does not "
                                           "answer: the gate is not known");
}


/* the zone's gate (the store's, just applied) with the replica and fleet */

static ngx_int_t
ngx_http_dynamo_rl_gate_fleet_send(ngx_http_request_t *r,
    ngx_http_dynamo_rl_store_t *store, ngx_http_dynamo_rl_gate_reply_t *gr,
    ngx_uint_t local)
{
    u_char                           *p;
    size_t                            len;
    ngx_str_t                         body;
    ngx_uint_t                        i;
    ngx_http_dynamo_rl_fleet_t       *fl;
    ngx_http_dynamo_rl_gate_state_t   gs;

    ngx_http_dynamo_rl_gate_state(ngx_http_dynamo_rl_get_zone(r), &gs);

    fl = (gr != NULL && gr->has_fleet) ? &gr->fleet : NULL;

    len = ngx_http_dynamo_rl_gate_json_len(&gs)
          + sizeof(",\"replica\":\"\",\"source\":\"local\",\"fleet\":"
                   "{\"replicas\":,\"acked\":,\"in_flight\":,\"lost\":[],"
                   "\"drained\":false}")
          + store->replica.len + 3 * NGX_INT64_LEN;

    if (fl != NULL) {
        for (i = 0; i < fl->nlost; i++) {
            len += 3 + fl->lost[i].len
                   + ngx_escape_json(NULL, fl->lost[i].data, fl->lost[i].len);
        }
    }

    body.data = ngx_pnalloc(r->pool, len);
    if (body.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the zone's JSON without its closing brace */

    p = ngx_http_dynamo_rl_gate_json(body.data, &gs) - 1;

    p = ngx_sprintf(p, ",\"replica\":\"%V\"", &store->replica);

    if (local) {
        p = ngx_cpymem(p, ",\"source\":\"local\"",
                       sizeof(",\"source\":\"local\"") - 1);
    }

    if (fl != NULL) {
        p = ngx_sprintf(p, ",\"fleet\":{\"replicas\":%ui,\"acked\":%ui,"
                        "\"in_flight\":%uL,\"lost\":[",
                        fl->replicas, fl->acked, fl->in_flight);

        for (i = 0; i < fl->nlost; i++) {
            if (i) {
                *p++ = ',';
            }

            *p++ = '"';
            p = (u_char *) ngx_escape_json(p, fl->lost[i].data,
                                           fl->lost[i].len);
            *p++ = '"';
        }

        p = ngx_sprintf(p, "],\"drained\":%s}",
                        fl->drained ? "true" : "false");
    }

    *p++ = '}';

    body.len = p - body.data;

    return ngx_http_dynamo_rl_send_json(r, NGX_HTTP_OK, &body);
}
