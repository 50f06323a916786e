
/*
 * Copyright (C) ngx_dynamo_rl_module developers
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include "ngx_http_dynamo_rl_store_conn.h"
#include "ngx_http_dynamo_rl_store_tls.h"
#include "ngx_http_dynamo_rl_store_resolve.h"


/*
 * One connection per worker process.  A command is formatted once by
 * hiredis and kept until its reply is read: its bytes are copied to the
 * output buffer, which goes out in one send per event-loop turn (a posted
 * write event), and they stay with the command so that a NOSCRIPT reply
 * can be answered with EVAL, and a write without a handler can be sent
 * again on the next connection.  Replies are matched to the FIFO in
 * order.  One timer per connection serves every deadline: it fires at the
 * earliest one and walks the FIFO, which is bounded by queue_max.
 *
 * Over TLS, while a command sent that a request waits for (a claim) is
 * unanswered, the next batch is held and goes out with the last such
 * reply.  redis-server reads a TLS connection one record, that is one
 * send, at a time and answers each apart; sent as they came, the turns'
 * small batches would make as many records, reads and wake-ups on both
 * ends (1.5 sends per request at 32 connections on loopback, 0.34 without
 * TLS).  Held, a send carries what came during a round trip.  Writes that
 * nothing waits for (a record's later states) hold nothing, so that a
 * lone request's claim does not wait for the previous request's end; nor
 * does anything with wait=: a WAIT's reply waits for the replicas, and
 * the claims behind it would wait as long.  Once a command times out, the
 * held batch goes at once and nothing is held until the FIFO is empty: a
 * store slower than timeout answers the later commands by their own
 * deadlines, as without the hold.
 */


#define NGX_HTTP_DYNAMO_RL_STORE_BACKOFF     100
#define NGX_HTTP_DYNAMO_RL_STORE_BACKOFF_MAX 2000
#define NGX_HTTP_DYNAMO_RL_STORE_STALL_MIN   1000
#define NGX_HTTP_DYNAMO_RL_STORE_READ        16384
#define NGX_HTTP_DYNAMO_RL_STORE_OUT         16384


static void ngx_http_dynamo_rl_store_tls_handshaked(ngx_connection_t *c);
static void ngx_http_dynamo_rl_store_connected(
    ngx_http_dynamo_rl_store_conn_t *conn);
static ngx_int_t ngx_http_dynamo_rl_store_hello(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_ready_now(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_fail_reply(
    ngx_http_dynamo_rl_store_conn_t *conn, const char *what,
    redisReply *reply);
static ngx_uint_t ngx_http_dynamo_rl_store_report(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t was, const char *cause,
    ngx_err_t err);
static void ngx_http_dynamo_rl_store_slot(ngx_http_dynamo_rl_store_t *store,
    ngx_atomic_uint_t state);
static ngx_atomic_uint_t ngx_http_dynamo_rl_store_slot_time(time_t now);
static ngx_uint_t ngx_http_dynamo_rl_store_refused_recent(
    ngx_atomic_uint_t state, uint32_t now);
static void ngx_http_dynamo_rl_store_close(
    ngx_http_dynamo_rl_store_conn_t *conn);
static ngx_uint_t ngx_http_dynamo_rl_store_conn_stays(
    ngx_http_dynamo_rl_store_conn_t *conn);

static void ngx_http_dynamo_rl_store_write_handler(ngx_event_t *wev);
static void ngx_http_dynamo_rl_store_read_handler(ngx_event_t *rev);
static void ngx_http_dynamo_rl_store_timer_handler(ngx_event_t *ev);
static void ngx_http_dynamo_rl_store_unhold(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_retry_handler(ngx_event_t *ev);
static ngx_int_t ngx_http_dynamo_rl_store_test_connect(ngx_connection_t *c);
static void ngx_http_dynamo_rl_store_send(
    ngx_http_dynamo_rl_store_conn_t *conn);

static ngx_int_t ngx_http_dynamo_rl_store_append(
    ngx_http_dynamo_rl_store_conn_t *conn, char *buf, size_t len);
static ngx_int_t ngx_http_dynamo_rl_store_dispatch(
    ngx_http_dynamo_rl_store_conn_t *conn, redisReply *reply);
static ngx_int_t ngx_http_dynamo_rl_store_handshake(
    ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd, redisReply *reply);
static ngx_int_t ngx_http_dynamo_rl_store_load(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t kind);
static void ngx_http_dynamo_rl_store_arm(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_msec_t at);
static ngx_addr_t *ngx_http_dynamo_rl_store_peer(
    ngx_http_dynamo_rl_store_conn_t *conn);
static void ngx_http_dynamo_rl_store_resolved(void *data, ngx_addr_t *addr,
    const char *cause);
static void ngx_http_dynamo_rl_store_connect_peer(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_addr_t *addr);
static ngx_int_t ngx_http_dynamo_rl_store_auth(
    ngx_http_dynamo_rl_store_conn_t *conn, ngx_uint_t op);
static ngx_int_t ngx_http_dynamo_rl_store_sentinel_ask(
    ngx_http_dynamo_rl_store_conn_t *conn);
static ngx_int_t ngx_http_dynamo_rl_store_sentinel_reply(
    ngx_http_dynamo_rl_store_conn_t *conn, redisReply *reply);


/* the upper bounds of the round-trip buckets, in microseconds */

static const uint64_t  ngx_http_dynamo_rl_store_buckets[] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
    250000, 500000, 1000000
};


/* a buffer of ngx_alloc() moved to "size" bytes, its "used" bytes kept */

ngx_int_t
ngx_http_dynamo_rl_store_conn_grow(u_char **data, size_t *size, size_t used,
    size_t n, ngx_log_t *log)
{
    u_char  *p;

    p = ngx_alloc(n, log);
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (*data != NULL) {
        ngx_memcpy(p, *data, used);
        ngx_free(*data);
    }

    *data = p;
    *size = n;

    return NGX_OK;
}


/* a command of the client itself: not counted, never kept while down */

ngx_int_t
ngx_http_dynamo_rl_store_conn_internal(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t kind, ngx_uint_t script, int argc, const char **argv,
    size_t *argvlen)
{
    int                              len;
    char                            *buf;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    buf = NULL;

    len = redisFormatCommandArgv(&buf, argc, argv, argvlen);

    if (len < 0 || buf == NULL) {
        return NGX_ERROR;
    }

    cmd = ngx_http_dynamo_rl_store_conn_cmd_alloc(conn);
    if (cmd == NULL) {
        redisFreeCommand(buf);
        return NGX_ERROR;
    }

    cmd->buf = buf;
    cmd->len = len;
    cmd->kind = kind;
    cmd->script = script;
    cmd->op = NGX_HTTP_DYNAMO_RL_STORE_OP_CONNECT;
    cmd->deadline = ngx_current_msec + conn->store->timeout;
    cmd->start = 0;

    if (ngx_http_dynamo_rl_store_conn_enqueue(conn, cmd) != NGX_OK) {
        ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);
        return NGX_ERROR;
    }

    if (kind != NGX_HTTP_DYNAMO_RL_STORE_RELOAD
        && kind != NGX_HTTP_DYNAMO_RL_STORE_WAIT)
    {
        /* one more reply that the handshake waits for */
        conn->handshake++;
    }

    return NGX_OK;
}


/* into the output buffer and the FIFO; the posted write sends the batch */

ngx_int_t
ngx_http_dynamo_rl_store_conn_enqueue(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    ngx_connection_t  *c;

    if (ngx_http_dynamo_rl_store_append(conn, cmd->buf, cmd->len) != NGX_OK) {
        return NGX_ERROR;
    }

    if (conn->nfifo == 0) {
        conn->progress = ngx_current_msec;
    }

    ngx_queue_insert_tail(&conn->fifo, &cmd->queue);
    conn->nfifo++;

    ngx_http_dynamo_rl_store_arm(conn,
                                 (cmd->waited
                                  || (cmd->kind != NGX_HTTP_DYNAMO_RL_STORE_USER
                                      && cmd->kind
                                         != NGX_HTTP_DYNAMO_RL_STORE_RELOAD
                                      && cmd->kind
                                         != NGX_HTTP_DYNAMO_RL_STORE_WAIT))
                                 ? cmd->deadline
                                 : conn->progress + conn->stall);

    c = conn->peer.connection;

    if (!c->write->posted && !conn->flushing) {
        ngx_post_event(c->write, &ngx_posted_events);
    }

    return NGX_OK;
}


/* whether the send of this turn is posted already */

ngx_uint_t
ngx_http_dynamo_rl_store_conn_posted(ngx_http_dynamo_rl_store_conn_t *conn)
{
    return conn->peer.connection->write->posted;
}


/* the send of this turn, posted: it joins the batches before it sends */

void
ngx_http_dynamo_rl_store_conn_post(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_post_event(conn->peer.connection->write, &ngx_posted_events);
}


static ngx_int_t
ngx_http_dynamo_rl_store_append(ngx_http_dynamo_rl_store_conn_t *conn,
    char *buf, size_t len)
{
    size_t  size;

    if (conn->out_size - conn->out_last < len && conn->out_pos > 0) {
        ngx_memmove(conn->out, conn->out + conn->out_pos,
                    conn->out_last - conn->out_pos);
        conn->out_last -= conn->out_pos;
        conn->out_pos = 0;
    }

    if (conn->out_size - conn->out_last < len) {
        size = ngx_max(conn->out_size * 2, NGX_HTTP_DYNAMO_RL_STORE_OUT);

        while (size - conn->out_last < len) {
            size *= 2;
        }

        if (ngx_http_dynamo_rl_store_conn_grow(&conn->out, &conn->out_size,
                                               conn->out_last, size, conn->log)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    conn->out_last = ngx_cpymem(conn->out + conn->out_last, buf, len)
                     - conn->out;

    return NGX_OK;
}


/* the timer fires at "at" or earlier, exactly: ngx_add_timer() is lazy */

static void
ngx_http_dynamo_rl_store_arm(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_msec_t at)
{
    ngx_msec_int_t  left;

    if (conn->timer.timer_set) {
        if ((ngx_msec_int_t) (conn->timer.timer.key - at) <= 0) {
            return;
        }

        ngx_del_timer(&conn->timer);
    }

    left = (ngx_msec_int_t) (at - ngx_current_msec);

    ngx_add_timer(&conn->timer, left > 0 ? (ngx_msec_t) left : 1);
}


/*
 * the connection of a worker process, not yet connected: its owner sets
 * its hooks, then calls ngx_http_dynamo_rl_store_conn_connect()
 */

ngx_http_dynamo_rl_store_conn_t *
ngx_http_dynamo_rl_store_conn_create(ngx_http_dynamo_rl_store_t *store,
    ngx_cycle_t *cycle)
{
    ngx_http_dynamo_rl_store_conn_t  *conn;

    conn = ngx_pcalloc(cycle->pool, sizeof(ngx_http_dynamo_rl_store_conn_t));
    if (conn == NULL) {
        return NULL;
    }

    conn->store = store;
    conn->log = cycle->log;

    conn->quiet = *cycle->log;
    conn->quiet.log_level = NGX_LOG_ALERT;

    conn->in = ngx_palloc(cycle->pool, NGX_HTTP_DYNAMO_RL_STORE_READ);
    if (conn->in == NULL) {
        return NULL;
    }

    ngx_queue_init(&conn->fifo);
    ngx_queue_init(&conn->pending);
    ngx_queue_init(&conn->free);

    conn->timer.handler = ngx_http_dynamo_rl_store_timer_handler;
    conn->timer.data = conn;
    conn->timer.log = cycle->log;

    /* waiters keep a worker that shuts down until they are answered */
    conn->timer.cancelable = 0;

    conn->retry.handler = ngx_http_dynamo_rl_store_retry_handler;
    conn->retry.data = conn;
    conn->retry.log = cycle->log;
    conn->retry.cancelable = 1;

    conn->backoff = NGX_HTTP_DYNAMO_RL_STORE_BACKOFF;
    conn->stall = ngx_max(4 * store->timeout,
                          NGX_HTTP_DYNAMO_RL_STORE_STALL_MIN);

    /* not up until connected */
    ngx_http_dynamo_rl_store_slot(store, (ngx_atomic_uint_t) ngx_pid << 1);

    return conn;
}


void
ngx_http_dynamo_rl_store_conn_connect(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_addr_t  *addr;

    if (conn->connects++) {
        NGX_HTTP_DYNAMO_RL_STORE_STAT(conn->store, reconnects, 1);
    }

    conn->state = NGX_HTTP_DYNAMO_RL_STORE_CONNECTING;

    ngx_memzero(&conn->peer, sizeof(ngx_peer_connection_t));

    addr = ngx_http_dynamo_rl_store_peer(conn);

    if (addr == NULL) {
        /* a host name being resolved: _store_resolved() goes on */
        return;
    }

    ngx_http_dynamo_rl_store_connect_peer(conn, addr);
}


/* a host name's address, or why there is none: the store is down */

static void
ngx_http_dynamo_rl_store_resolved(void *data, ngx_addr_t *addr,
    const char *cause)
{
    ngx_http_dynamo_rl_store_conn_t  *conn = data;

    if (!ngx_http_dynamo_rl_store_conn_stays(conn)) {
        conn->state = NGX_HTTP_DYNAMO_RL_STORE_DOWN;
        return;
    }

    if (cause != NULL) {
        conn->peer.name = &addr->name;
        ngx_http_dynamo_rl_store_conn_fail(conn, cause, 0);
        return;
    }

    ngx_http_dynamo_rl_store_connect_peer(conn, addr);
}


static void
ngx_http_dynamo_rl_store_connect_peer(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_addr_t *addr)
{
    ngx_int_t                    rc;
    ngx_err_t                    err;
    ngx_connection_t            *c;
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    conn->peer.sockaddr = addr->sockaddr;
    conn->peer.socklen = addr->socklen;
    conn->peer.name = &addr->name;
    conn->peer.get = ngx_event_get_peer;
    conn->peer.log = &conn->quiet;
    conn->peer.log_error = NGX_ERROR_ERR;

    ngx_set_socket_errno(0);

    rc = ngx_event_connect_peer(&conn->peer);

    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
        err = ngx_socket_errno;

        if (conn->peer.connection != NULL) {
            ngx_close_connection(conn->peer.connection);
            conn->peer.connection = NULL;
        }

        ngx_http_dynamo_rl_store_conn_fail(conn, "connect() failed", err);
        return;
    }

    c = conn->peer.connection;

    c->data = conn;
    c->log = conn->log;
    c->read->log = conn->log;
    c->write->log = conn->log;
    c->log_error = NGX_ERROR_INFO;

    c->read->handler = ngx_http_dynamo_rl_store_read_handler;
    c->write->handler = ngx_http_dynamo_rl_store_write_handler;

    if (rc == NGX_AGAIN) {
        ngx_add_timer(c->write, store->timeout);
        return;
    }

    ngx_http_dynamo_rl_store_connected(conn);
}


/* rediss://: the TLS handshake ended, or timed out */

static void
ngx_http_dynamo_rl_store_tls_handshaked(ngx_connection_t *c)
{
    const char                       *cause;
    ngx_http_dynamo_rl_store_conn_t  *conn;

    conn = c->data;

    cause = ngx_http_dynamo_rl_store_tls_check(conn->store->tls, c);

    if (cause != NULL) {
        /* a refusal, unless it timed out: see _store_report() */
        conn->refused = !c->timedout;

        ngx_http_dynamo_rl_store_conn_fail(conn, cause, 0);
        return;
    }

    c->read->handler = ngx_http_dynamo_rl_store_read_handler;
    c->write->handler = ngx_http_dynamo_rl_store_write_handler;

    ngx_http_dynamo_rl_store_connected(conn);
}


/* AUTH, SELECT, CONFIG GET, SCRIPT LOAD: pipelined, one round trip */

static void
ngx_http_dynamo_rl_store_connected(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_connection_t            *c;
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;
    c = conn->peer.connection;

    if (conn->peer.sockaddr->sa_family != AF_UNIX) {
        (void) ngx_tcp_nodelay(c);
    }

    if (store->tls != NULL && c->ssl == NULL) {
        if (ngx_http_dynamo_rl_store_tls_connect(store->tls, c,
                                    store->timeout,
                                    ngx_http_dynamo_rl_store_tls_handshaked)
            != NGX_AGAIN)
        {
            ngx_http_dynamo_rl_store_tls_handshaked(c);
        }

        return;
    }

    conn->reader = ngx_http_dynamo_rl_resp_reader();
    if (conn->reader == NULL) {
        ngx_http_dynamo_rl_store_conn_fail(conn, "out of memory", 0);
        return;
    }

    conn->in_size = 0;

    conn->state = NGX_HTTP_DYNAMO_RL_STORE_HANDSHAKE;
    conn->handshake = 0;

    if (conn->asking) {
        if (ngx_http_dynamo_rl_store_sentinel_ask(conn) == NGX_OK) {
            return;
        }

        goto failed;
    }

    if (ngx_http_dynamo_rl_store_hello(conn) == NGX_OK) {
        return;
    }

failed:

    ngx_http_dynamo_rl_store_conn_fail(conn, "out of memory", 0);
}


/* to the store: AUTH, SELECT, ROLE, CONFIG GET, SCRIPT LOAD */

static ngx_int_t
ngx_http_dynamo_rl_store_hello(ngx_http_dynamo_rl_store_conn_t *conn)
{
    size_t                       len[3];
    u_char                       db[NGX_INT_T_LEN];
    const char                  *argv[3];
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    if (ngx_http_dynamo_rl_store_auth(conn, NGX_HTTP_DYNAMO_RL_STORE_AUTH)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (store->db) {
        argv[0] = "SELECT";
        len[0] = 6;
        argv[1] = (const char *) db;
        len[1] = ngx_sprintf(db, "%ui", store->db) - db;

        if (ngx_http_dynamo_rl_store_conn_internal(conn,
                                                NGX_HTTP_DYNAMO_RL_STORE_SELECT,
                                                0, 2, argv, len)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    /* a replica would refuse every write: not a store to use */

    argv[0] = "ROLE";
    len[0] = 4;

    if (ngx_http_dynamo_rl_store_conn_internal(conn,
                                               NGX_HTTP_DYNAMO_RL_STORE_ROLE,
                                               0, 1, argv, len)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    argv[0] = "CONFIG";
    len[0] = 6;
    argv[1] = "GET";
    len[1] = 3;
    argv[2] = "maxmemory-policy";
    len[2] = 16;

    if (ngx_http_dynamo_rl_store_conn_internal(conn,
                                               NGX_HTTP_DYNAMO_RL_STORE_CONFIG,
                                               0, 3, argv, len)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_dynamo_rl_store_load(conn, NGX_HTTP_DYNAMO_RL_STORE_LOAD);
}


/* the last reply of the handshake: the writes kept while down go first */

static void
ngx_http_dynamo_rl_store_ready_now(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    store = conn->store;

    conn->state = NGX_HTTP_DYNAMO_RL_STORE_READY;
    conn->backoff = NGX_HTTP_DYNAMO_RL_STORE_BACKOFF;
    conn->dropping = 0;

    NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[
                                  NGX_HTTP_DYNAMO_RL_STORE_OP_CONNECT][
                                  NGX_HTTP_DYNAMO_RL_STORE_R_OK], 1);

    while (!ngx_queue_empty(&conn->pending)) {
        q = ngx_queue_head(&conn->pending);
        ngx_queue_remove(q);
        conn->npending--;

        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        if (ngx_http_dynamo_rl_store_conn_enqueue(conn, cmd) != NGX_OK) {
            ngx_queue_insert_head(&conn->pending, q);
            conn->npending++;
            ngx_http_dynamo_rl_store_conn_fail(conn, "out of memory", 0);
            return;
        }
    }

    if (conn->up) {
        return;
    }

    conn->up = 1;
    conn->reported = 0;

    ngx_log_error(NGX_LOG_NOTICE, conn->log, 0,
                  "dynamo rl store: connected to \"%V\" (%V) as replica"
                  " \"%V\"", &store->url, conn->peer.name, &store->replica);

    ngx_http_dynamo_rl_store_slot(store,
                                  (ngx_atomic_uint_t) ngx_pid << 1 | 1);

    if (store->stats != NULL) {
        (void) ngx_atomic_fetch_add(&store->stats->transitions, 1);
    }

    if (store->changed != NULL) {
        store->changed(store->changed_data, 1);
    }
}


static void
ngx_http_dynamo_rl_store_fail_reply(ngx_http_dynamo_rl_store_conn_t *conn,
    const char *what, redisReply *reply)
{
    u_char  *p;
    size_t   len;

    len = 0;

    if (reply != NULL && reply->type == REDIS_REPLY_ERROR
        && reply->str != NULL)
    {
        len = ngx_min(reply->len, 160);
    }

    if (len == 0) {
        p = ngx_snprintf(conn->cause, sizeof(conn->cause) - 1,
                         "%s: an unexpected reply", what);
        *p = '\0';

    } else {
        /* the store's text is not trusted for the log: a LF forges lines */

        p = ngx_snprintf(conn->cause, sizeof(conn->cause) - 1, "%s: ", what);
        (void) ngx_http_dynamo_rl_escape_log(p,
                                             conn->cause + sizeof(conn->cause),
                                             (u_char *) reply->str, len);
    }

    ngx_http_dynamo_rl_store_conn_fail(conn, (char *) conn->cause, 0);
}


/*
 * the connection is gone or unusable: the writes without a handler that
 * were not answered go back to the head of the pending queue, in order
 * (the scripts are safe to run twice: a move checks the owner and the
 * state); every waiter gets NGX_ERROR; a reconnect is scheduled; logged
 * once per transition
 */

void
ngx_http_dynamo_rl_store_conn_fail(ngx_http_dynamo_rl_store_conn_t *conn,
    const char *cause, ngx_err_t err)
{
    ngx_uint_t                       was, changed;
    ngx_queue_t                     *q, waiters;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    store = conn->store;
    was = conn->state;

    cause = ngx_http_dynamo_rl_store_tls_cause(store->tls, cause, &err);

    ngx_http_dynamo_rl_store_close(conn);

    changed = ngx_http_dynamo_rl_store_report(conn, was, cause, err);

    conn->drop(conn, !conn->exiting);

    ngx_queue_init(&waiters);

    while (!ngx_queue_empty(&conn->fifo)) {
        q = ngx_queue_last(&conn->fifo);
        ngx_queue_remove(q);
        conn->nfifo--;

        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        if (cmd->kind != NGX_HTTP_DYNAMO_RL_STORE_USER) {
            ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);
            continue;
        }

        if (!cmd->waited && !conn->exiting) {
            ngx_queue_insert_head(&conn->pending, q);
            conn->npending++;
            continue;
        }

        ngx_queue_insert_head(&waiters, q);
    }

    /*
     * the batches of the turn: writes after those that were sent before
     * them, waiters answered NGX_ERROR with the others
     */

    if (!conn->exiting) {
        (void) conn->flush(conn);
    }

    if (ngx_http_dynamo_rl_store_conn_stays(conn)) {
        ngx_add_timer(&conn->retry, conn->backoff);
        conn->backoff = ngx_min(conn->backoff * 2,
                                NGX_HTTP_DYNAMO_RL_STORE_BACKOFF_MAX);
    }

    if (changed && store->changed != NULL) {
        store->changed(store->changed_data, 0);
    }

    while (!ngx_queue_empty(&waiters)) {
        q = ngx_queue_head(&waiters);
        ngx_queue_remove(q);

        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        ngx_http_dynamo_rl_store_conn_finish(conn, cmd,
                                             NGX_HTTP_DYNAMO_RL_STORE_R_DOWN,
                                             NGX_ERROR, NULL);
        ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);
    }
}


/*
 * the operations' count of a failed connect, the store's state, and one
 * log line per transition; 1: the connection was up.  While the store
 * stays unavailable, a refusal (an error reply of the store or a
 * sentinel, a replica's ROLE, the store's certificate) other than the
 * failure last logged is logged too: a certificate rotated to another
 * name shows after "the store closed the connection".  Failures of the
 * transport (refused, reset, timed out) stay at debug: their symptoms
 * vary from one attempt to the next (an alert read, or a reset write).
 */

static ngx_uint_t
ngx_http_dynamo_rl_store_report(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t was, const char *cause, ngx_err_t err)
{
    uint32_t                     crc;
    ngx_uint_t                   i, n, result, changed, refused;
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    refused = conn->refused || cause == (char *) conn->cause;
    conn->refused = 0;

    ngx_crc32_init(crc);
    ngx_crc32_update(&crc, (u_char *) cause, ngx_strlen(cause));
    ngx_crc32_update(&crc, (u_char *) &err, sizeof(ngx_err_t));
    ngx_crc32_final(crc);

    /* a refusal logged in this outage (sentinels may take turns) */

    n = ngx_min(conn->nreported, NGX_HTTP_DYNAMO_RL_STORE_CAUSES);

    for (i = 0; refused && i < n; i++) {
        if (conn->reported_cause[i] == crc) {
            refused = 0;
        }
    }

    if (was != NGX_HTTP_DYNAMO_RL_STORE_READY) {
        result = (err == NGX_ETIMEDOUT) ? NGX_HTTP_DYNAMO_RL_STORE_R_TIMEOUT
                 : (cause == (char *) conn->cause)
                   ? NGX_HTTP_DYNAMO_RL_STORE_R_ERROR
                   : NGX_HTTP_DYNAMO_RL_STORE_R_DOWN;

        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[
                                      NGX_HTTP_DYNAMO_RL_STORE_OP_CONNECT][
                                      result], 1);
    }

    changed = 0;

    if (conn->up) {
        conn->up = 0;
        changed = 1;

        ngx_log_error(NGX_LOG_ERR, conn->log, err,
                      "dynamo rl store: lost \"%V\" (%V): %s",
                      &store->url, conn->peer.name, cause);

        ngx_http_dynamo_rl_store_slot(store, (ngx_atomic_uint_t) ngx_pid << 1);

        if (store->stats != NULL) {
            (void) ngx_atomic_fetch_add(&store->stats->transitions, 1);
        }

    } else if (!conn->reported) {
        ngx_log_error(NGX_LOG_ERR, conn->log, err,
                      "dynamo rl store: \"%V\" (%V) is unavailable: %s",
                      &store->url, conn->peer.name, cause);

        ngx_http_dynamo_rl_store_slot(store, (ngx_atomic_uint_t) ngx_pid << 1);

    } else if (refused) {
        ngx_log_error(NGX_LOG_ERR, conn->log, err,
                      "dynamo rl store: \"%V\" (%V) is still unavailable:"
                      " %s", &store->url, conn->peer.name, cause);

        conn->reported_cause[conn->nreported++
                             % NGX_HTTP_DYNAMO_RL_STORE_CAUSES] = crc;

        return changed;

    } else {
        ngx_log_debug2(NGX_LOG_DEBUG_EVENT, conn->log, err,
                       "dynamo rl store: \"%V\" still unavailable: %s",
                       &store->url, cause);

        return changed;
    }

    conn->reported = 1;
    conn->reported_cause[0] = crc;
    conn->nreported = 1;

    return changed;
}


static void
ngx_http_dynamo_rl_store_close(ngx_http_dynamo_rl_store_conn_t *conn)
{
    if (conn->peer.connection != NULL) {
        ngx_http_dynamo_rl_store_tls_close(conn->peer.connection);
        ngx_close_connection(conn->peer.connection);
        conn->peer.connection = NULL;
    }

    if (conn->timer.timer_set) {
        ngx_del_timer(&conn->timer);
    }

    if (conn->reader != NULL) {
        redisReaderFree(conn->reader);
        conn->reader = NULL;
    }

    conn->out_pos = 0;
    conn->out_last = 0;
    conn->unanswered = 0;
    conn->holding = 0;
    conn->slow = 0;
    conn->loading = 0;
    conn->state = NGX_HTTP_DYNAMO_RL_STORE_DOWN;
}


/*
 * at exit, one send of what is buffered (the batches of the turn and the
 * writes without a handler that wait are added first), never blocking
 */

void
ngx_http_dynamo_rl_store_conn_last(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_queue_t                     *q;
    ngx_connection_t                *c;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    c = conn->peer.connection;

    if (conn->state == NGX_HTTP_DYNAMO_RL_STORE_READY && c != NULL) {

        conn->flushing = 1;
        (void) conn->flush(conn);

        for (q = ngx_queue_head(&conn->pending);
             q != ngx_queue_sentinel(&conn->pending);
             q = ngx_queue_next(q))
        {
            cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

            if (ngx_http_dynamo_rl_store_append(conn, cmd->buf, cmd->len)
                != NGX_OK)
            {
                break;
            }
        }

        if (conn->out_last > conn->out_pos) {
            (void) c->send(c, conn->out + conn->out_pos,
                           conn->out_last - conn->out_pos);
        }
    }
}


/* at exit, after the last send: everything is freed, no handler called */

void
ngx_http_dynamo_rl_store_conn_destroy(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_queue_t       *q;
    ngx_connection_t  *c;

    ngx_http_dynamo_rl_store_resolve_cancel(conn->store->resolve);

    /* the process exits: it is no longer one of the store's */
    ngx_http_dynamo_rl_store_slot(conn->store, 0);

    c = conn->peer.connection;

    if (c != NULL) {
        ngx_http_dynamo_rl_store_tls_close(c);
        ngx_close_connection(c);
        conn->peer.connection = NULL;
    }

    if (conn->timer.timer_set) {
        ngx_del_timer(&conn->timer);
    }

    if (conn->retry.timer_set) {
        ngx_del_timer(&conn->retry);
    }

    while (!ngx_queue_empty(&conn->fifo)) {
        q = ngx_queue_head(&conn->fifo);
        ngx_queue_remove(q);
        ngx_http_dynamo_rl_store_conn_cmd_free(conn,
            ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue));
    }

    while (!ngx_queue_empty(&conn->pending)) {
        q = ngx_queue_head(&conn->pending);
        ngx_queue_remove(q);
        ngx_http_dynamo_rl_store_conn_cmd_free(conn,
            ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue));
    }

    while (!ngx_queue_empty(&conn->free)) {
        q = ngx_queue_head(&conn->free);
        ngx_queue_remove(q);
        ngx_free(ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue));
    }

    conn->nfifo = 0;
    conn->npending = 0;

    if (conn->reader != NULL) {
        redisReaderFree(conn->reader);
        conn->reader = NULL;
    }

    if (conn->out != NULL) {
        ngx_free(conn->out);
        conn->out = NULL;
    }
}


static void
ngx_http_dynamo_rl_store_retry_handler(ngx_event_t *ev)
{
    ngx_http_dynamo_rl_store_conn_t  *conn;

    conn = ev->data;

    if (!ngx_http_dynamo_rl_store_conn_stays(conn)) {
        return;
    }

    ngx_http_dynamo_rl_store_conn_connect(conn);
}


/*
 * a lost connection is made again, with the backoff: not as the process
 * exits or terminates; while it shuts down gracefully, as long as it has
 * requests of its own in flight or writes kept for the store, so that its
 * heartbeat goes on (its records are not ended as replica_lost) and its
 * records' ends reach the store
 */

static ngx_uint_t
ngx_http_dynamo_rl_store_conn_stays(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_http_dynamo_rl_store_t  *store;

    if (conn->exiting || ngx_terminate) {
        return 0;
    }

    if (!ngx_exiting && !ngx_quit) {
        return 1;
    }

    store = conn->store;

    return !ngx_queue_empty(&conn->pending)
           || (store->busy != NULL && store->busy(store->busy_data));
}


static ngx_int_t
ngx_http_dynamo_rl_store_test_connect(ngx_connection_t *c)
{
    int        err;
    socklen_t  len;

    err = 0;
    len = sizeof(int);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *) &err, &len) == -1) {
        err = ngx_socket_errno;
    }

    if (err) {
        ngx_set_socket_errno(err);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_dynamo_rl_store_write_handler(ngx_event_t *wev)
{
    ngx_connection_t                 *c;
    ngx_http_dynamo_rl_store_conn_t  *conn;

    c = wev->data;
    conn = c->data;

    if (conn->state == NGX_HTTP_DYNAMO_RL_STORE_CONNECTING) {

        if (wev->timedout) {
            ngx_http_dynamo_rl_store_conn_fail(conn, "connect() timed out",
                                               NGX_ETIMEDOUT);
            return;
        }

        if (wev->timer_set) {
            ngx_del_timer(wev);
        }

        if (ngx_http_dynamo_rl_store_test_connect(c) != NGX_OK) {
            ngx_http_dynamo_rl_store_conn_fail(conn, "connect() failed",
                                               ngx_socket_errno);
            return;
        }

        ngx_http_dynamo_rl_store_connected(conn);
        return;
    }

    ngx_http_dynamo_rl_store_send(conn);
}


static void
ngx_http_dynamo_rl_store_send(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ssize_t                          n;
    ngx_int_t                        rc;
    ngx_queue_t                     *q;
    ngx_connection_t                *c;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    c = conn->peer.connection;

    /* over TLS, the next batch waits for the replies (see above) */

    if (c->ssl != NULL
        && conn->unanswered
        && conn->out_pos == 0
        && conn->state == NGX_HTTP_DYNAMO_RL_STORE_READY
        && conn->store->wait == 0
        && !conn->slow)
    {
        conn->holding = 1;
        return;
    }

    if (conn->nbatched) {
        conn->flushing = 1;
        rc = conn->flush(conn);
        conn->flushing = 0;

        if (rc != NGX_OK) {
            ngx_http_dynamo_rl_store_conn_fail(conn, "out of memory", 0);
            return;
        }
    }

    while (conn->out_pos < conn->out_last) {

        n = c->send(c, conn->out + conn->out_pos,
                    conn->out_last - conn->out_pos);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n == NGX_ERROR || n <= 0) {
            ngx_http_dynamo_rl_store_conn_fail(conn, "send() failed",
                                               ngx_socket_errno);
            return;
        }

        conn->out_pos += n;
    }

    /* everything in the FIFO is sent now: the claims among it, over TLS */

    conn->unanswered = 0;

    for (q = ngx_queue_head(&conn->fifo);
         c->ssl != NULL && q != ngx_queue_sentinel(&conn->fifo);
         q = ngx_queue_next(q))
    {
        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        if (cmd->waited) {
            conn->unanswered++;
        }
    }

    if (conn->out_pos == conn->out_last) {
        conn->out_pos = 0;
        conn->out_last = 0;
    }

    if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
        ngx_http_dynamo_rl_store_conn_fail(conn, "write event failed", 0);
    }
}


static void
ngx_http_dynamo_rl_store_read_handler(ngx_event_t *rev)
{
    ssize_t                           n;
    ngx_int_t                         rc;
    redisReply                       *reply;
    ngx_connection_t                 *c;
    ngx_http_dynamo_rl_store_conn_t  *conn;

    c = rev->data;
    conn = c->data;

    if (conn->state == NGX_HTTP_DYNAMO_RL_STORE_CONNECTING) {
        ngx_http_dynamo_rl_store_write_handler(c->write);
        return;
    }

    while (rev->ready) {

        n = c->recv(c, conn->in, NGX_HTTP_DYNAMO_RL_STORE_READ);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n == 0) {
            ngx_http_dynamo_rl_store_conn_fail(conn,
                                              "the store closed the connection",
                                              0);
            return;
        }

        if (n == NGX_ERROR) {
            ngx_http_dynamo_rl_store_conn_fail(conn, "recv() failed",
                                               ngx_socket_errno);
            return;
        }

        if (ngx_http_dynamo_rl_resp_feed(conn->reader, &conn->in_size,
                                         conn->in, n)
            != NGX_OK)
        {
            ngx_http_dynamo_rl_store_conn_fail(conn, "out of memory", 0);
            return;
        }

        for ( ;; ) {
            rc = ngx_http_dynamo_rl_resp_read(conn->reader, &conn->in_size,
                                              &reply);

            if (rc == NGX_ERROR) {
                ngx_http_dynamo_rl_store_conn_fail(conn,
                                                   "the store sent an invalid"
                                                   " reply", 0);
                return;
            }

            if (rc == NGX_DECLINED) {
                ngx_http_dynamo_rl_store_conn_fail(conn,
                                                   "the store sent a reply"
                                                   " larger than 1M", 0);
                return;
            }

            if (reply == NULL) {
                break;
            }

            /*
             * the stall timer counts whole replies, not bytes: a store
             * that trickles a reply is no store
             */

            conn->progress = ngx_current_msec;

            if (ngx_http_dynamo_rl_store_dispatch(conn, reply) != NGX_OK) {
                return;
            }
        }
    }

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        ngx_http_dynamo_rl_store_conn_fail(conn, "read event failed", 0);
    }
}


/*
 * NGX_ERROR: the connection was closed, stop reading; the replies to the
 * client's own commands are read here, the others by its owner
 */

static ngx_int_t
ngx_http_dynamo_rl_store_dispatch(ngx_http_dynamo_rl_store_conn_t *conn,
    redisReply *reply)
{
    ngx_int_t                        rc;
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    if (ngx_queue_empty(&conn->fifo)) {
        freeReplyObject(reply);
        ngx_http_dynamo_rl_store_conn_fail(conn, "a reply to no command", 0);
        return NGX_ERROR;
    }

    q = ngx_queue_head(&conn->fifo);
    ngx_queue_remove(q);
    conn->nfifo--;

    cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

    if (conn->nfifo == 0) {
        conn->slow = 0;
    }

    if (cmd->waited && conn->unanswered) {
        conn->unanswered--;

        if (conn->unanswered == 0 && conn->holding) {
            conn->holding = 0;

            if (!conn->peer.connection->write->posted) {
                ngx_post_event(conn->peer.connection->write,
                               &ngx_posted_events);
            }
        }
    }

    if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_USER
        || cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_WAIT)
    {
        return conn->reply(conn, cmd, reply);
    }

    rc = ngx_http_dynamo_rl_store_handshake(conn, cmd, reply);
    freeReplyObject(reply);
    ngx_http_dynamo_rl_store_conn_cmd_free(conn, cmd);

    if (rc == NGX_OK) {
        ngx_http_dynamo_rl_store_conn_idle(conn);
    }

    return rc;
}


/* no command waits for a reply: the deadlines' timer stops */

void
ngx_http_dynamo_rl_store_conn_idle(ngx_http_dynamo_rl_store_conn_t *conn)
{
    if (conn->nfifo == 0 && conn->timer.timer_set) {
        ngx_del_timer(&conn->timer);
    }
}


/* the client's own replies; NGX_ERROR: the connection was closed */

static ngx_int_t
ngx_http_dynamo_rl_store_handshake(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd, redisReply *reply)
{
    ngx_str_t                     policy;
    ngx_http_dynamo_rl_script_t  *script;
    u_char                        text[128];

    switch (cmd->kind) {

    case NGX_HTTP_DYNAMO_RL_STORE_AUTH:
    case NGX_HTTP_DYNAMO_RL_STORE_SELECT:

        if (reply->type != REDIS_REPLY_STATUS) {
            ngx_http_dynamo_rl_store_fail_reply(conn,
                (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_AUTH) ? "AUTH"
                                                             : "SELECT",
                reply);
            return NGX_ERROR;
        }

        break;

    case NGX_HTTP_DYNAMO_RL_STORE_ROLE:

        /* a service that refuses ROLE is taken at its word */

        if (ngx_http_dynamo_rl_resp_role(reply) == NGX_DECLINED) {
            conn->refused = 1;
            ngx_http_dynamo_rl_store_conn_fail(conn,
                                               "the store is not a primary"
                                               " (ROLE)", 0);
            return NGX_ERROR;
        }

        break;

    case NGX_HTTP_DYNAMO_RL_STORE_SAUTH:

        /* a sentinel without a password refuses AUTH: SENTINEL says more */
        break;

    case NGX_HTTP_DYNAMO_RL_STORE_SENTINEL:
        return ngx_http_dynamo_rl_store_sentinel_reply(conn, reply);

    case NGX_HTTP_DYNAMO_RL_STORE_CONFIG:

        /* managed services refuse CONFIG: an error reply is not a fault */

        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
            && reply->element[1]->type == REDIS_REPLY_STRING)
        {
            policy.data = (u_char *) reply->element[1]->str;
            policy.len = reply->element[1]->len;

            if (policy.len != 10
                || ngx_strncmp(policy.data, "noeviction", 10) != 0)
            {
                /* the store's text is not trusted for the log */

                (void) ngx_http_dynamo_rl_escape_log(text,
                                                     text + sizeof(text),
                                                     policy.data,
                                                     policy.len);

                ngx_log_error(NGX_LOG_WARN, conn->log, 0,
                              "dynamo rl store: maxmemory-policy of \"%V\""
                              " is \"%s\", not \"noeviction\": the store"
                              " may evict attempts in flight",
                              &conn->store->url, text);
            }
        }

        break;

    default: /* LOAD, RELOAD */

        script = &ngx_http_dynamo_rl_scripts[cmd->script];

        if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_RELOAD) {

            /* whatever the reply, the EVAL fallback still serves */

            if (cmd->script == NGX_HTTP_DYNAMO_RL_SCRIPTS - 1) {
                conn->loading = 0;
            }

            return NGX_OK;
        }

        if (reply->type != REDIS_REPLY_STRING || reply->len != 40
            || ngx_strncasecmp((u_char *) reply->str, script->sha, 40) != 0)
        {
            ngx_http_dynamo_rl_store_fail_reply(conn, "SCRIPT LOAD", reply);
            return NGX_ERROR;
        }

        break;
    }

    if (--conn->handshake == 0) {
        ngx_http_dynamo_rl_store_ready_now(conn);

        if (conn->state != NGX_HTTP_DYNAMO_RL_STORE_READY) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_dynamo_rl_store_conn_reload(ngx_http_dynamo_rl_store_conn_t *conn)
{
    conn->loading = 1;

    if (ngx_http_dynamo_rl_store_load(conn, NGX_HTTP_DYNAMO_RL_STORE_RELOAD)
        != NGX_OK)
    {
        conn->loading = 0;
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* SCRIPT LOAD of every script: in the handshake, or after a NOSCRIPT */

static ngx_int_t
ngx_http_dynamo_rl_store_load(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t kind)
{
    size_t       len[3];
    ngx_uint_t   i;
    const char  *argv[3];

    argv[0] = "SCRIPT";
    len[0] = 6;
    argv[1] = "LOAD";
    len[1] = 4;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_SCRIPTS; i++) {
        argv[2] = (const char *) ngx_http_dynamo_rl_scripts[i].body.data;
        len[2] = ngx_http_dynamo_rl_scripts[i].body.len;

        if (ngx_http_dynamo_rl_store_conn_internal(conn, kind, i, 3, argv, len)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* counted once; the handler, if it is still there, is called once */

void
ngx_http_dynamo_rl_store_conn_finish(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd, ngx_uint_t result, ngx_int_t rc,
    redisReply *reply)
{
    void                            *data;
    uint64_t                         us;
    ngx_int_t                        shape;
    ngx_uint_t                       i;
    redisReply                      *e;
    ngx_atomic_t                    *word;
    ngx_atomic_uint_t                when;
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_t      *store;
    ngx_http_dynamo_rl_store_pt      handler;
    ngx_http_dynamo_rl_store_cmd_t  *m;

    store = conn->store;

    if (cmd->nmembers) {
        /* a batch: each member its own element of an array reply */

        shape = (rc == NGX_OK)
                ? ngx_http_dynamo_rl_resp_batch(reply, cmd->nmembers)
                : NGX_DECLINED;

        if (shape == NGX_ERROR) {

            /*
             * a count or a shape other than what was sent: an answer to
             * none of them, each refused as by an unavailable store
             */

            ngx_log_error(NGX_LOG_ERR, conn->log, 0,
                          "dynamo rl store: \"%V\" answered a batch of %ui"
                          " %V with a reply of another shape, refused",
                          &store->url, cmd->nmembers,
                          &ngx_http_dynamo_rl_scripts[cmd->script].name);

            result = NGX_HTTP_DYNAMO_RL_STORE_R_ERROR;
            rc = NGX_ERROR;
            reply = NULL;
        }

        i = 0;

        for (q = ngx_queue_head(&cmd->members);
             q != ngx_queue_sentinel(&cmd->members);
             q = ngx_queue_next(q))
        {
            m = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

            if (rc == NGX_AGAIN && (m->done || m->handler == NULL)) {
                i++;
                continue;
            }

            e = (shape == NGX_OK) ? reply->element[i] : reply;

            ngx_http_dynamo_rl_store_conn_finish(conn, m, result, rc, e);
            i++;
        }

        return;
    }

    if (reply != NULL && store->stats != NULL) {
        us = ngx_http_dynamo_rl_store_conn_us() - cmd->start;

        for (i = 0; i < NGX_HTTP_DYNAMO_RL_STORE_BUCKETS - 1; i++) {
            if (us <= ngx_http_dynamo_rl_store_buckets[i]) {
                break;
            }
        }

        (void) ngx_atomic_fetch_add(&store->stats->rtt[i], 1);
        (void) ngx_atomic_fetch_add(&store->stats->rtt_sum_us,
                                    (ngx_atomic_int_t) us);
        (void) ngx_atomic_fetch_add(&store->stats->rtt_count, 1);
    }

    if (!cmd->done) {
        cmd->done = 1;
        NGX_HTTP_DYNAMO_RL_STORE_STAT(store, ops[cmd->op][result], 1);

        /*
         * a claim refused by the store itself, or one admitted again; the
         * shared line is written only when that changes what it says
         */

        if (cmd->op == NGX_HTTP_DYNAMO_RL_STORE_OP_CLAIM
            && store->stats != NULL
            && store->stats->slot != NULL
            && (result == NGX_HTTP_DYNAMO_RL_STORE_R_ERROR
                || (result == NGX_HTTP_DYNAMO_RL_STORE_R_OK && rc == NGX_OK)))
        {
            word = &store->stats->slot[ngx_process_slot
                                       % NGX_HTTP_DYNAMO_RL_STORE_SLOTS];
            when = (result == NGX_HTTP_DYNAMO_RL_STORE_R_ERROR)
                   ? ngx_http_dynamo_rl_store_slot_time(ngx_time()) : 0;

            if ((*word & 0xffffffff) != 0 && (*word >> 32) != when) {
                *word = (*word & 0xffffffff) | (when << 32);
            }
        }
    }

    handler = cmd->handler;
    data = cmd->data;

    cmd->handler = NULL;
    cmd->data = NULL;

    if (handler != NULL) {
        handler(data, rc, reply);
    }
}


/*
 * the deadlines: a waiter past its own gets NGX_AGAIN and stays in the
 * FIFO as cancelled, so that its late reply is read and dropped; nothing
 * read for max(4 * timeout, 1s) while commands wait closes the connection
 */

static void
ngx_http_dynamo_rl_store_timer_handler(ngx_event_t *ev)
{
    ngx_msec_t                       now, next;
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;
    ngx_http_dynamo_rl_store_conn_t *conn;

    conn = ev->data;
    now = ngx_current_msec;

    if (conn->nfifo == 0) {
        return;
    }

    if ((ngx_msec_int_t) (now - conn->progress) >= (ngx_msec_int_t) conn->stall)
    {
        ngx_http_dynamo_rl_store_conn_fail(conn, "no reply in time",
                                           NGX_ETIMEDOUT);
        return;
    }

    next = conn->progress + conn->stall;

    for (q = ngx_queue_head(&conn->fifo);
         q != ngx_queue_sentinel(&conn->fifo);
         q = ngx_queue_next(q))
    {
        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

        if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_RELOAD
            || cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_WAIT)
        {
            continue;
        }

        if (cmd->nmembers) {
            /* a batch's members share one deadline, and time out at once */

            if ((ngx_msec_int_t) (cmd->deadline - now) > 0) {
                if ((ngx_msec_int_t) (cmd->deadline - next) < 0) {
                    next = cmd->deadline;
                }

                continue;
            }

            ngx_http_dynamo_rl_store_unhold(conn);

            ngx_http_dynamo_rl_store_conn_finish(conn, cmd,
                                             NGX_HTTP_DYNAMO_RL_STORE_R_TIMEOUT,
                                             NGX_AGAIN, NULL);
            continue;
        }

        if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_USER && !cmd->waited) {
            continue;
        }

        if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_USER && cmd->done) {
            continue;
        }

        if ((ngx_msec_int_t) (cmd->deadline - now) > 0) {
            if ((ngx_msec_int_t) (cmd->deadline - next) < 0) {
                next = cmd->deadline;
            }

            continue;
        }

        if (cmd->kind != NGX_HTTP_DYNAMO_RL_STORE_USER) {
            ngx_http_dynamo_rl_store_conn_fail(conn,
                                               "no reply to the handshake in"
                                               " time", NGX_ETIMEDOUT);
            return;
        }

        /* a handler may queue more commands: they go after this one */

        ngx_http_dynamo_rl_store_unhold(conn);

        ngx_http_dynamo_rl_store_conn_finish(conn, cmd,
                                             NGX_HTTP_DYNAMO_RL_STORE_R_TIMEOUT,
                                             NGX_AGAIN, NULL);
    }

    ngx_http_dynamo_rl_store_arm(conn, next);
}


/* a command timed out: what is held goes now, and nothing more is held */

static void
ngx_http_dynamo_rl_store_unhold(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_connection_t  *c;

    conn->slow = 1;

    if (!conn->holding) {
        return;
    }

    conn->holding = 0;

    c = conn->peer.connection;

    if (c != NULL && !c->write->posted) {
        ngx_post_event(c->write, &ngx_posted_events);
    }
}


ngx_http_dynamo_rl_store_cmd_t *
ngx_http_dynamo_rl_store_conn_cmd_alloc(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_queue_t                     *q;
    ngx_http_dynamo_rl_store_cmd_t  *cmd;

    if (!ngx_queue_empty(&conn->free)) {
        q = ngx_queue_head(&conn->free);
        ngx_queue_remove(q);

        cmd = ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue);

    } else {
        cmd = ngx_alloc(sizeof(ngx_http_dynamo_rl_store_cmd_t), conn->log);
        if (cmd == NULL) {
            return NULL;
        }
    }

    /* the local buffer is written before it is read */
    ngx_memzero(cmd, offsetof(ngx_http_dynamo_rl_store_cmd_t, small));

    ngx_queue_init(&cmd->members);
    cmd->live = 1;

    return cmd;
}


/* back to the free list; a user's command leaves the queue count */

void
ngx_http_dynamo_rl_store_conn_cmd_free(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    ngx_queue_t  *q;

    /* a batch's command is counted in its members */

    if (cmd->kind == NGX_HTTP_DYNAMO_RL_STORE_USER && cmd->nmembers == 0) {
        NGX_HTTP_DYNAMO_RL_STORE_STAT(conn->store, queue, -1);
    }

    while (!ngx_queue_empty(&cmd->members)) {
        q = ngx_queue_head(&cmd->members);
        ngx_queue_remove(q);
        ngx_http_dynamo_rl_store_conn_cmd_free(conn,
            ngx_queue_data(q, ngx_http_dynamo_rl_store_cmd_t, queue));
    }

    cmd->nmembers = 0;

    ngx_http_dynamo_rl_store_conn_cmd_release(cmd);

    cmd->handler = NULL;
    cmd->data = NULL;
    cmd->live = 0;

    ngx_queue_insert_head(&conn->free, &cmd->queue);
}


void
ngx_http_dynamo_rl_store_conn_cmd_release(ngx_http_dynamo_rl_store_cmd_t *cmd)
{
    if (cmd->buf == NULL) {
        return;
    }

    if (cmd->own) {
        ngx_free(cmd->buf);

    } else if (cmd->buf != (char *) cmd->small) {
        redisFreeCommand(cmd->buf);
    }

    cmd->buf = NULL;
    cmd->own = 0;
}


uint64_t
ngx_http_dynamo_rl_store_conn_us(void)
{
    struct timespec  ts;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}


/*
 * this worker process's connection state in its slot: "pid << 1 | ready";
 * none once it shuts down gracefully: store_conn_leave()
 */

static void
ngx_http_dynamo_rl_store_slot(ngx_http_dynamo_rl_store_t *store,
    ngx_atomic_uint_t state)
{
    ngx_uint_t  slot;

    if (store->stats == NULL || store->stats->slot == NULL) {
        return;
    }

    slot = ngx_process_slot % NGX_HTTP_DYNAMO_RL_STORE_SLOTS;

    if (ngx_exiting || ngx_quit) {
        state = 0;
    }

    /* the time of a refusal stays while the process does */

    if (state != 0) {
        state |= store->stats->slot[slot] & ~(ngx_atomic_uint_t) 0xffffffff;
    }

    store->stats->slot[slot] = state;
}


/*
 * a worker process that shuts down gracefully admits nothing more: its
 * slot's word is cleared as it begins (its heartbeat calls this), so that
 * neither its connection nor its refusals count in store_conn_up() while
 * it finishes its records; _store_slot() keeps it cleared
 */

void
ngx_http_dynamo_rl_store_conn_leave(ngx_http_dynamo_rl_store_t *store)
{
    ngx_atomic_t  *word;

    if (store->stats == NULL || store->stats->slot == NULL) {
        return;
    }

    word = &store->stats->slot[ngx_process_slot
                               % NGX_HTTP_DYNAMO_RL_STORE_SLOTS];

    if (*word != 0) {
        *word = 0;
    }
}


/* a refusal's time in a slot's word: never 0, which means none */

static ngx_atomic_uint_t
ngx_http_dynamo_rl_store_slot_time(time_t now)
{
    uint32_t  t;

    t = (uint32_t) now;

    return (ngx_atomic_uint_t) (t ? t : 1);
}


/*
 * the store is up for the instance when every worker process that has it
 * (not one that exited, however it exited) is connected, and the store
 * refused none of its claims (an error reply, too few replicas for
 * wait=) in the last NGX_HTTP_DYNAMO_RL_STORE_REFUSED seconds without one
 * admitted since; not up with no such process
 */

ngx_uint_t
ngx_http_dynamo_rl_store_conn_up(ngx_http_dynamo_rl_store_stats_t *stats)
{
    uint32_t           now;
    ngx_pid_t          pid;
    ngx_uint_t         i, n;
    ngx_atomic_uint_t  state;

    if (stats->slot == NULL) {
        return 0;
    }

    now = (uint32_t) ngx_time();
    n = 0;

    for (i = 0; i < NGX_HTTP_DYNAMO_RL_STORE_SLOTS; i++) {
        state = stats->slot[i];

        if (state == 0) {
            continue;
        }

        pid = (ngx_pid_t) ((state & 0xffffffff) >> 1);

        if (pid != ngx_pid && kill(pid, 0) == -1 && ngx_errno == NGX_ESRCH) {
            continue;
        }

        if (!(state & 1)) {
            return 0;
        }

        if (ngx_http_dynamo_rl_store_refused_recent(state, now)) {
            return 0;
        }

        n++;
    }

    return (n > 0);
}


/*
 * the store refused one of this worker process's claims in the last
 * NGX_HTTP_DYNAMO_RL_STORE_REFUSED seconds without one admitted since:
 * the window of store_conn_up(); 0 without the words
 */

ngx_uint_t
ngx_http_dynamo_rl_store_conn_refusing(ngx_http_dynamo_rl_store_stats_t *stats)
{
    if (stats == NULL || stats->slot == NULL) {
        return 0;
    }

    return ngx_http_dynamo_rl_store_refused_recent(
               stats->slot[ngx_process_slot % NGX_HTTP_DYNAMO_RL_STORE_SLOTS],
               (uint32_t) ngx_time());
}


/* a slot's word says a refusal at most NGX_HTTP_DYNAMO_RL_STORE_REFUSED old */

static ngx_uint_t
ngx_http_dynamo_rl_store_refused_recent(ngx_atomic_uint_t state, uint32_t now)
{
    uint32_t  refused;

    refused = (uint32_t) (state >> 32);

    /*
     * another process's cached clock may be a little ahead of ours:
     * the difference is taken modulo 2^32, as the times are kept
     */

    return refused != 0
           && (uint32_t) (now - refused + 2)
              < NGX_HTTP_DYNAMO_RL_STORE_REFUSED + 2;
}


/*
 * the address of the next connect: with sentinel://, the primary a
 * sentinel has just named, else the next sentinel (every other connect
 * asks again: on a reconnect, on -READONLY, on a replica's ROLE); NULL:
 * a host name is being resolved, and _store_resolved() is called
 */

static ngx_addr_t *
ngx_http_dynamo_rl_store_peer(ngx_http_dynamo_rl_store_conn_t *conn)
{
    ngx_addr_t                  *addr;
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    conn->asking = 0;

    if (store->sentinel.len) {
        if (conn->primary_known) {
            conn->primary_known = 0;
            return &conn->primary;
        }

        conn->asking = 1;
    }

    if (ngx_http_dynamo_rl_store_resolve_peer(store->resolve,
                                              conn->next_addr++, &addr,
                                              ngx_http_dynamo_rl_store_resolved,
                                              conn)
        != NGX_OK)
    {
        return NULL;
    }

    return addr;
}


/*
 * AUTH [user] password, when a password is set: to the store ("op"
 * NGX_HTTP_DYNAMO_RL_STORE_AUTH) or to a sentinel (_SAUTH)
 */

static ngx_int_t
ngx_http_dynamo_rl_store_auth(ngx_http_dynamo_rl_store_conn_t *conn,
    ngx_uint_t op)
{
    size_t                       len[3];
    ngx_uint_t                   i;
    const char                  *argv[3];
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    if (store->password.len == 0) {
        return NGX_OK;
    }

    argv[0] = "AUTH";
    len[0] = 4;
    i = 1;

    if (store->user.len) {
        argv[i] = (const char *) store->user.data;
        len[i++] = store->user.len;
    }

    argv[i] = (const char *) store->password.data;
    len[i++] = store->password.len;

    return ngx_http_dynamo_rl_store_conn_internal(conn, op, 0, (int) i, argv,
                                                  len);
}


/* AUTH if a password is set, then SENTINEL get-master-addr-by-name */

static ngx_int_t
ngx_http_dynamo_rl_store_sentinel_ask(ngx_http_dynamo_rl_store_conn_t *conn)
{
    size_t                       len[3];
    const char                  *argv[3];
    ngx_http_dynamo_rl_store_t  *store;

    store = conn->store;

    if (ngx_http_dynamo_rl_store_auth(conn, NGX_HTTP_DYNAMO_RL_STORE_SAUTH)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    argv[0] = "SENTINEL";
    len[0] = 8;
    argv[1] = "get-master-addr-by-name";
    len[1] = 23;
    argv[2] = (const char *) store->sentinel.data;
    len[2] = store->sentinel.len;

    return ngx_http_dynamo_rl_store_conn_internal(conn,
                                              NGX_HTTP_DYNAMO_RL_STORE_SENTINEL,
                                              0, 3, argv, len);
}


/*
 * the sentinel's answer: the connection is closed and the primary it
 * names connected at once; NGX_ERROR: the connection was closed
 */

static ngx_int_t
ngx_http_dynamo_rl_store_sentinel_reply(ngx_http_dynamo_rl_store_conn_t *conn,
    redisReply *reply)
{
    u_char                      *p;
    ngx_int_t                    rc;
    in_port_t                    port;
    ngx_str_t                    host;
    in_addr_t                    inaddr;
    struct sockaddr_in          *sin;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6         *sin6;
#endif
    ngx_http_dynamo_rl_store_t  *store;
    u_char                       text[128];

    store = conn->store;

    rc = ngx_http_dynamo_rl_resp_primary(reply, &host, &port);

    if (rc == NGX_DECLINED) {
        p = ngx_snprintf(conn->cause, sizeof(conn->cause) - 1,
                         "the sentinel knows no primary \"%V\"",
                         &store->sentinel);
        *p = '\0';

        ngx_http_dynamo_rl_store_conn_fail(conn, (char *) conn->cause, 0);
        return NGX_ERROR;
    }

    if (rc != NGX_OK) {
        ngx_http_dynamo_rl_store_fail_reply(conn,
                                            "SENTINEL get-master-addr-by-name",
                                            reply);
        return NGX_ERROR;
    }

    ngx_memzero(&conn->primary_sa, sizeof(ngx_sockaddr_t));

    inaddr = ngx_inet_addr(host.data, host.len);

    conn->primary.socklen = 0;

    if (inaddr != INADDR_NONE) {
        sin = &conn->primary_sa.sockaddr_in;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        sin->sin_addr.s_addr = inaddr;
        conn->primary.socklen = sizeof(struct sockaddr_in);
    }

#if (NGX_HAVE_INET6)
    if (conn->primary.socklen == 0
        && ngx_inet6_addr(host.data, host.len,
                          conn->primary_sa.sockaddr_in6.sin6_addr.s6_addr)
           == NGX_OK)
    {
        sin6 = &conn->primary_sa.sockaddr_in6;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(port);
        conn->primary.socklen = sizeof(struct sockaddr_in6);
    }
#endif

    if (conn->primary.socklen == 0) {
        /* the sentinel's text is not trusted for the log */

        (void) ngx_http_dynamo_rl_escape_log(text, text + sizeof(text),
                                             host.data, host.len);

        p = ngx_snprintf(conn->cause, sizeof(conn->cause) - 1,
                         "the sentinel names the primary by a host name,"
                         " \"%s\", not an address", text);
        *p = '\0';

        ngx_http_dynamo_rl_store_conn_fail(conn, (char *) conn->cause, 0);
        return NGX_ERROR;
    }

    conn->primary.sockaddr = &conn->primary_sa.sockaddr;
    conn->primary.name.data = conn->primary_text;
    conn->primary.name.len = ngx_sock_ntop(conn->primary.sockaddr,
                                           conn->primary.socklen,
                                           conn->primary_text,
                                           NGX_SOCKADDR_STRLEN, 1);
    conn->primary_known = 1;

    ngx_log_error(NGX_LOG_INFO, conn->log, 0,
                  "dynamo rl store: sentinel %V names %V the primary of"
                  " \"%V\"", conn->peer.name, &conn->primary.name,
                  &store->sentinel);

    ngx_http_dynamo_rl_store_close(conn);

    ngx_add_timer(&conn->retry, 1);

    return NGX_ERROR;
}
