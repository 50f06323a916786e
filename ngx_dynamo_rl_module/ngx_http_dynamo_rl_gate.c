
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include "ngx_http_dynamo_rl_module.h"


#define NGX_HTTP_DYNAMO_RL_GATE_BODY    4096
#define NGX_HTTP_DYNAMO_RL_RETRY_AFTER  5


static ngx_uint_t ngx_http_dynamo_rl_gate_in_flight(
    ngx_http_dynamo_rl_shctx_t *sh);
static ngx_int_t ngx_http_dynamo_rl_gate_handler(ngx_http_request_t *r);
static void ngx_http_dynamo_rl_gate_body(ngx_http_request_t *r);
static ngx_int_t ngx_http_dynamo_rl_gate_apply(ngx_http_request_t *r,
    ngx_http_dynamo_rl_gate_req_t *req, char **err);
static ngx_int_t ngx_http_dynamo_rl_gate_send(ngx_http_request_t *r);


/*
 * PRECONTENT, request plane, after access control: while the gate is
 * closed, new generation gets 503 with Retry-After and is not recorded;
 * the gate never authorises
 */

ngx_int_t
ngx_http_dynamo_rl_gate_check(ngx_http_request_t *r,
    ngx_http_dynamo_rl_ctx_t *ctx)
{
    uint64_t                     now;
    ngx_uint_t                   retry;
    ngx_table_elt_t             *h;
    ngx_http_dynamo_rl_zone_t   *zone;
    ngx_http_dynamo_rl_shctx_t  *sh;

    zone = ngx_http_dynamo_rl_get_zone(r);
    sh = zone->sh;

    if (!sh->gate_closed) {
        return NGX_DECLINED;
    }

    now = ngx_http_dynamo_rl_now();
    retry = NGX_HTTP_DYNAMO_RL_RETRY_AFTER;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (!sh->gate_closed) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return NGX_DECLINED;
    }

    if (sh->gate_expires > now) {
        retry = (ngx_uint_t) ((sh->gate_expires - now + 999) / 1000);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->value.data = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (h->value.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
    ngx_str_set(&h->key, "Retry-After");
    h->value.len = ngx_sprintf(h->value.data, "%ui", retry) - h->value.data;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "dynamo rl gate: closed, attempt \"%V\" refused",
                  &ctx->attempt_id);

    /* counted before the check, it is not in flight after all */

    ngx_http_dynamo_rl_drain_leave(ctx);

    return ngx_http_dynamo_rl_deny(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                   "gate_closed",
                                   "generation is paused for a policy "
                                   "refresh, retry later");
}


/*
 * the slot was left by a process that exited, however it exited (the
 * ledger has ended its attempts by now); under the mutex, under which
 * the ledger frees the slots of processes that died
 */

void
ngx_http_dynamo_rl_gate_init_process(ngx_http_dynamo_rl_zone_t *zone)
{
    ngx_uint_t  slot;

    slot = ngx_http_dynamo_rl_slot();

    ngx_shmtx_lock(&zone->shpool->mutex);

    zone->sh->slot_requests[slot] = 0;
    zone->sh->slot_pid[slot] = ngx_pid;

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
    ngx_http_dynamo_rl_shctx_t  *sh;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    gs->closed = sh->gate_closed;
    gs->epoch = sh->gate_epoch;
    gs->expires = sh->gate_expires;
    gs->expires_wall = sh->gate_expires_wall;
    gs->changed = sh->gate_changed;
    gs->reason_len = sh->gate_reason_len;
    ngx_memcpy(gs->reason, sh->gate_reason, sh->gate_reason_len);

    /*
     * the snapshot's (instance_id, system_url) set is not the one of when
     * the gate closed: a worker joined (at old weights) or left; a
     * snapshot that came or went counts as a change
     */

    gs->members_changed = sh->gate_closed
                          && (sh->gate_members_known != (sh->raw != NULL)
                              || (sh->raw != NULL
                                  && sh->gate_members != sh->members));

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

    if (gs->changed) {
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
    ngx_int_t                       rc;
    ngx_http_dynamo_rl_loc_conf_t  *drlcf;

    if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
        rc = ngx_http_discard_request_body(r);

        if (rc != NGX_OK) {
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
            sh->gate_members = sh->members;
            sh->gate_members_known = (sh->raw != NULL);
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
